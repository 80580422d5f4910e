// SPDX-License-Identifier: MIT
// The com.amd.quark MXQuantizeDequantize / BFPQuantizeDequantize semantics: attribute defaults
// and validation (stable ids), Quark's layout wrapper (axis moved last + zero padding, checked
// against an explicit transpose/pad/slice), single-element tensors, float16 in/out, and the
// block_format facts (bits per element).
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include <quark/block/quark_ops.hpp>

#include "block/block_support.hpp"
#include "support/checks.hpp"

using block_test::check_same;

static_assert(quark::block_traits<quark::mxfp8_e4m3>::bits_per_element == 8.25);
static_assert(quark::block_traits<quark::mxfp8_e5m2>::bits_per_element == 8.25);
static_assert(quark::block_traits<quark::mxfp6_e3m2>::bits_per_element == 6.25);
static_assert(quark::block_traits<quark::mxfp6_e2m3>::bits_per_element == 6.25);
static_assert(quark::block_traits<quark::mxfp4_e2m1>::bits_per_element == 4.25);
static_assert(quark::block_traits<quark::mxint8>::bits_per_element == 8.25);
static_assert(quark::block_traits<quark::bfp16>::bits_per_element == 9.0);
static_assert(quark::block_traits<quark::mx4>::bits_per_element == 4.0);
static_assert(quark::block_traits<quark::mx6>::bits_per_element == 6.0);
static_assert(quark::block_traits<quark::mx9>::bits_per_element == 9.0);
static_assert(quark::block_traits<quark::mxfp4_e2m1>::block_size == 32);
static_assert(quark::block_traits<quark::mx9>::sub_block_size == 2);
static_assert(quark::block_traits<quark::mxint8>::family == quark::block_family::ocp_mx);
static_assert(quark::block_traits<quark::bfp16>::family == quark::block_family::bfp);
static_assert(quark::block_traits<quark::mx6>::family == quark::block_family::micro_exponent);
static_assert(quark::block_format_of<quark::mx4, quark::block_family::micro_exponent>);
static_assert(!quark::block_format_type<float>);
static_assert(quark::mx_element_info_v<quark::float8_e4m3fn>.emax == 8);
static_assert(quark::mx_element_info_v<quark::float8_e5m2>.emax == 15);
static_assert(quark::mx_element_info_v<quark::float6_e3m2fn>.emax == 4);
static_assert(quark::mx_element_info_v<quark::float6_e2m3fn>.emax == 2);
static_assert(quark::mx_element_info_v<quark::float4_e2m1fn>.emax == 2);
static_assert(quark::mx_element_info_v<std::int8_t>.emax == 0);
static_assert(quark::choose_scale<quark::mxfp8_e4m3>(1.0f).to_bits() == 127 - 8);
static_assert(quark::choose_shared_exponent(100.0f).to_bits() == 133);
static_assert(quark::block_storage_layout_for<quark::mxfp4_e2m1>(1, 64).element_bytes == 32);
static_assert(quark::block_storage_layout_for<quark::mxfp6_e2m3>(2, 40).element_bytes == 60);
static_assert(quark::sign_magnitude<7>::from_value(-5).to_bits() == 0x85);

using quark::test::error_id;

namespace {

/// Quark's wrapper done literally: move `axis` last, zero-pad it to a multiple of block_size,
/// run the 1-D op on each padded row, slice and move the axis back.
template <class Attr, class Op>
std::vector<float> literal_wrapper(const Attr& a, const std::vector<float>& x,
                                   const std::vector<std::int64_t>& shape, std::size_t axis,
                                   Op op) {
  std::size_t outer = 1, inner = 1;
  for (std::size_t i = 0; i < axis; ++i)
    outer *= static_cast<std::size_t>(shape[i]);
  for (std::size_t i = axis + 1; i < shape.size(); ++i)
    inner *= static_cast<std::size_t>(shape[i]);
  const auto len = static_cast<std::size_t>(shape[axis]);
  const auto bs = static_cast<std::size_t>(a.block_size);
  const std::size_t padded = (len + bs - 1) / bs * bs;
  std::vector<float> y(x.size());
  for (std::size_t o = 0; o < outer; ++o) {
    for (std::size_t i = 0; i < inner; ++i) {
      std::vector<float> row(padded, 0.0f), out(padded);
      for (std::size_t j = 0; j < len; ++j)
        row[j] = x[(o * len + j) * inner + i];
      const std::int64_t s1[] = {static_cast<std::int64_t>(padded)};
      op(a, std::span<const float>(row), std::span<const std::int64_t>(s1), std::span<float>(out));
      for (std::size_t j = 0; j < len; ++j)
        y[(o * len + j) * inner + i] = out[j];
    }
  }
  return y;
}

}  // namespace

TEST_CASE("op attributes: defaults and validation errors") {
  const quark::mx_op_attributes mx;
  CHECK(mx.element_dtype == "int8");
  CHECK(mx.axis == 1);
  CHECK(mx.block_size == 32);
  CHECK(mx.rounding_mode == 0);
  const quark::bfp_op_attributes bfp;
  CHECK(bfp.bfp_method == "to_bfp");
  CHECK(bfp.bit_width == 16);
  CHECK(bfp.block_size == 8);
  CHECK(bfp.sub_block_size == 2);
  CHECK(bfp.sub_block_shift_bits == 1);
  std::vector<float> x(8, 1.0f), y(8);
  const std::int64_t s[] = {2, 4};
  const auto mxrun = [&](quark::mx_op_attributes a) {
    return error_id([&] { quark::mx_quantize_dequantize(a, x, s, y); });
  };
  const auto bfprun = [&](quark::bfp_op_attributes a) {
    return error_id([&] { quark::bfp_quantize_dequantize(a, x, s, y); });
  };
  CHECK(mxrun({"fp8", 1, 32, 0}) == "quark.block.element_dtype");
  CHECK(mxrun({"int8", 1, 32, 3}) == "quark.block.rounding_mode");
  CHECK(mxrun({"int8", 1, 0, 0}) == "quark.block.block_size");
  CHECK(mxrun({"int8", 2, 32, 0}) == "quark.block.axis");
  CHECK(mxrun({"int8", -3, 32, 0}) == "quark.block.axis");
  CHECK(mxrun({"fp4_e2m1", -1, 32, 0}) == "none");
  quark::bfp_op_attributes b;
  b.bfp_method = "to_bfp_x";
  CHECK(bfprun(b) == "quark.block.bfp_method");
  b = {};
  b.bit_width = 9;
  CHECK(bfprun(b) == "quark.block.bit_width");
  b = {};
  b.bfp_method = "to_bfp_prime";
  b.sub_block_size = 0;
  CHECK(bfprun(b) == "quark.block.sub_block_size");
  b.sub_block_size = 2;
  b.sub_block_shift_bits = 9;
  CHECK(bfprun(b) == "quark.block.sub_block_shift_bits");
  b = {};
  b.rounding_mode = -1;
  CHECK(bfprun(b) == "quark.block.rounding_mode");
  const std::int64_t bad[] = {3, 4};
  CHECK(error_id([&] { quark::mx_quantize_dequantize({}, x, bad, y); }) == "quark.block.shape");
}

TEST_CASE("op attributes read through a node's accessors: given values, op defaults otherwise") {
  // A node with some attributes set: the readers take those and keep the defaults for the rest.
  const std::map<std::string, std::int64_t> ints{
      {"axis", 0}, {"bit_width", 13}, {"block_size", 16}, {"rounding_mode", 2}};
  const std::map<std::string, std::string> strs{{"bfp_method", "to_bfp_prime"},
                                                {"element_dtype", "fp4_e2m1"}};
  auto get_i = [&](const char* k, std::int64_t d) {
    const auto it = ints.find(k);
    return it == ints.end() ? d : it->second;
  };
  auto get_s = [&](const char* k, const std::string& d) {
    const auto it = strs.find(k);
    return it == strs.end() ? d : it->second;
  };
  const quark::bfp_op_attributes b = quark::read_bfp_attributes(get_i, get_s);
  CHECK(b.bfp_method == "to_bfp_prime");
  CHECK(b.axis == 0);
  CHECK(b.bit_width == 13);
  CHECK(b.block_size == 16);
  CHECK(b.rounding_mode == 2);
  CHECK(b.sub_block_size == 2);  // the op's defaults
  CHECK(b.sub_block_shift_bits == 1);
  CHECK(b.convert_to_bfloat_before_bfp == 0);
  CHECK(b.use_compiler_version_cpu_kernel == 0);
  const quark::mx_op_attributes m = quark::read_mx_attributes(get_i, get_s);
  CHECK(m.element_dtype == "fp4_e2m1");
  CHECK(m.axis == 0);
  CHECK(m.block_size == 16);
  CHECK(m.rounding_mode == 2);
  // Nothing set: exactly the default-constructed attributes.
  auto none_i = [](const char*, std::int64_t d) { return d; };
  auto none_s = [](const char*, const std::string& d) { return d; };
  const quark::bfp_op_attributes bd = quark::read_bfp_attributes(none_i, none_s);
  CHECK(bd.bfp_method == "to_bfp");
  CHECK(bd.bit_width == 16);
  CHECK(bd.block_size == 8);
  const quark::mx_op_attributes md = quark::read_mx_attributes(none_i, none_s);
  CHECK(md.element_dtype == "int8");
  CHECK(md.block_size == 32);
  CHECK(md.rounding_mode == 0);
}

TEST_CASE("layout wrapper: axis moved last and zero padding, checked literally") {
  const std::uint32_t seed = block_test::seed();
  INFO("seed " << seed);
  std::mt19937 rng(seed);
  const std::vector<std::int64_t> shape = {2, 37, 3, 2};
  const auto x = block_test::random_tensor(rng, 2 * 37 * 3 * 2, -8, 8);
  std::vector<float> y(x.size());
  for (const char* e : {"fp8_e4m3", "fp8_e5m2", "fp6_e3m2", "fp6_e2m3", "fp4_e2m1", "int8"}) {
    for (const std::int64_t axis : {1, -1, 0}) {
      const quark::mx_op_attributes a{e, axis, 16, 2};
      const std::size_t ax =
          axis < 0 ? static_cast<std::size_t>(axis + 4) : static_cast<std::size_t>(axis);
      quark::mx_quantize_dequantize(a, x, shape, y);
      const auto want =
          literal_wrapper(a, x, shape, ax, [](const auto& at, auto i, auto s, auto o) {
            quark::mx_quantize_dequantize(at, i, s, o);
          });
      check_same(y, want, std::string(e) + " axis " + std::to_string(axis));
    }
  }
  for (const char* method : {"to_bfp", "to_bfp_prime"}) {
    quark::bfp_op_attributes a;
    a.bfp_method = method;
    a.block_size = std::string(method) == "to_bfp" ? 8 : 16;
    a.bit_width = std::string(method) == "to_bfp" ? 16 : 13;
    a.rounding_mode = 2;
    quark::bfp_quantize_dequantize(a, x, shape, y);
    const auto want = literal_wrapper(a, x, shape, 1, [](const auto& at, auto i, auto s, auto o) {
      quark::bfp_quantize_dequantize(at, i, s, o);
    });
    check_same(y, want, method);
  }
  // Rank 1: the axis attribute is ignored (blocks run along the only axis).
  const std::int64_t flat[] = {static_cast<std::int64_t>(x.size())};
  std::vector<float> y1(x.size()), y2(x.size());
  quark::mx_quantize_dequantize({"fp4_e2m1", 1, 32, 2}, x, flat, y1);
  quark::mx_quantize_dequantize({"fp4_e2m1", 0, 32, 2}, x, flat, y2);
  check_same(y1, y2, "rank 1");
}

TEST_CASE("op semantics: rounding_mode, single elements, bfloat16 first, float16 in/out") {
  // rounding_mode reaches MXINT8 only: 0.5078125 = 32.5 / 64 -> 33 (away) or 32 (even).
  const std::int64_t s2[] = {2};
  const std::vector<float> x = {1.0f, 0.5078125f};
  std::vector<float> y(2);
  quark::mx_quantize_dequantize({"int8", 1, 32, 0}, x, s2, y);
  CHECK(y[1] == 0.515625f);
  quark::mx_quantize_dequantize({"int8", 1, 32, 2}, x, s2, y);
  CHECK(y[1] == 0.5f);
  // FP elements always round half to even: 1.0625 = 1 + 1/16 ties between E4M3 1.0 and 1.125
  // (X = 2^-8 from amax 1.0625: E = 0 - 8).
  const std::vector<float> t = {1.0625f};
  std::vector<float> ty(1);
  const std::int64_t s1[] = {1};
  quark::mx_quantize_dequantize({"fp8_e4m3", 1, 32, 0}, t, s1, ty);
  CHECK(ty[0] == 1.0f);
  // Single element: quantized (standard) or passed through (Quark's wrapper).
  const std::vector<float> one = {7.0f};
  quark::mx_quantize_dequantize({"fp4_e2m1", 1, 32, 2}, one, s1, ty);
  CHECK(ty[0] == 6.0f);
  quark::mx_quantize_dequantize({"fp4_e2m1", 1, 32, 2}, one, s1, ty, quark::compat_mode::quark);
  CHECK(ty[0] == 7.0f);
  quark::bfp_quantize_dequantize({}, std::vector<float>{3.3f}, s1, ty, quark::compat_mode::quark);
  CHECK(ty[0] == 3.3f);
  // convert_to_bfloat_before_bfp for both methods: 1.01171875 -> 1.015625 first.
  quark::bfp_op_attributes b;
  b.convert_to_bfloat_before_bfp = 1;
  const std::vector<float> bx = {3.3f, 1.01171875f};
  quark::bfp_quantize_dequantize(b, bx, s2, y);
  CHECK(y[1] == 1.03125f);
  b.bfp_method = "to_bfp_prime";
  b.block_size = 16;
  b.bit_width = 16;
  quark::bfp_quantize_dequantize(b, bx, s2, y);
  // MX9: S = 128 (3.3), pair (3.3, 1.015625): d = 0, quantum 2^(1 - 6) -> 1.015625 = 32.5 -> 33.
  CHECK(y[1] == 1.03125f);
  // float16 in/out: widened, processed, rounded back.
  const std::vector<quark::float16> h = {quark::float16(100.0f), quark::float16(2.5f),
                                         quark::float16(-7.77f)};
  std::vector<quark::float16> ho(3);
  const std::int64_t s3[] = {3};
  quark::bfp_op_attributes bf;
  bf.rounding_mode = 2;
  quark::bfp_quantize_dequantize(bf, std::span<const quark::float16>(h), s3,
                                 std::span<quark::float16>(ho));
  CHECK(quark::to_float(ho[0]) == 100.0f);
  CHECK(quark::to_float(ho[1]) == 2.0f);
  CHECK(quark::to_float(ho[2]) == -8.0f);
  quark::mx_quantize_dequantize({"fp4_e2m1", 1, 32, 2}, std::span<const quark::float16>(h), s3,
                                std::span<quark::float16>(ho));
  CHECK(quark::to_float(ho[0]) == 96.0f);
}
