// SPDX-License-Identifier: MIT
// The semantics of AMD Quark's custom ops MXQuantizeDequantize and BFPQuantizeDequantize
// (domain com.amd.quark, opset 1; quark-spec sections 1.7-1.11), so the ONNX frontend can emit
// and evaluate them without arithmetic of its own. The attribute structs carry the ops' attribute
// names and defaults. Layout: blocks run along `axis` (rank-1 tensors: along the only axis);
// Quark moves the axis last and zero-pads it to a multiple of block_size, which gives exactly the
// values of a partial last block here (zeros never change a shared exponent). float16 tensors are
// widened to float32, processed and rounded back (RNE). compat_mode::quark also passes a
// one-element tensor through unchanged, as Quark's wrapper does; compat_mode::standard quantizes
// it like any other tensor (project decision, docs/compatibility.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <quark/block/bfp.hpp>
#include <quark/block/micro_exponent.hpp>
#include <quark/block/mx.hpp>
#include <quark/core/error.hpp>
#include <quark/dtype/convert.hpp>

namespace quark {

/// Attributes of com.amd.quark MXQuantizeDequantize, with the op's defaults.
///
///     quark::mx_op_attributes a;
///     a.element_dtype = "fp4_e2m1";
///     a.rounding_mode = 2;  // what Quark's presets set
struct mx_op_attributes {
  std::string element_dtype = "int8";  ///< fp8_e4m3, fp8_e5m2, fp6_e3m2, fp6_e2m3, fp4_e2m1, int8
  std::int64_t axis = 1;
  std::int64_t block_size = 32;
  std::int64_t rounding_mode = 0;  ///< int8 elements only: 0 half away, 1 half up, 2 half even
};

/// Attributes of com.amd.quark BFPQuantizeDequantize, with the op's defaults.
///
///     quark::bfp_op_attributes a;           // BFP16, rounding half away from zero
///     a.bfp_method = "to_bfp_prime";        // MX4/6/9 ...
///     a.block_size = 16; a.bit_width = 13;  // ... MX6
struct bfp_op_attributes {
  std::string bfp_method = "to_bfp";  ///< to_bfp, to_bfp_prime (legacy: to_bfp_prime_shared)
  std::int64_t axis = 1;
  std::int64_t bit_width = 16;  ///< magnitude bits = bit_width - 9
  std::int64_t block_size = 8;
  std::int64_t rounding_mode = 0;  ///< 0 half away, 1 half up, 2 half even
  std::int64_t sub_block_size = 2;
  std::int64_t sub_block_shift_bits = 1;
  std::int64_t convert_to_bfloat_before_bfp = 0;
  std::int64_t use_compiler_version_cpu_kernel = 0;
};

/// The OCP MX element named by an element_dtype attribute.
enum class mx_element : std::uint8_t { fp8_e4m3, fp8_e5m2, fp6_e3m2, fp6_e2m3, fp4_e2m1, int8 };

/// Parses an element_dtype attribute; throws quark::invalid_argument ("quark.block.element_dtype").
inline mx_element parse_mx_element(std::string_view s) {
  if (s == "fp8_e4m3")
    return mx_element::fp8_e4m3;
  if (s == "fp8_e5m2")
    return mx_element::fp8_e5m2;
  if (s == "fp6_e3m2")
    return mx_element::fp6_e3m2;
  if (s == "fp6_e2m3")
    return mx_element::fp6_e2m3;
  if (s == "fp4_e2m1")
    return mx_element::fp4_e2m1;
  if (s == "int8")
    return mx_element::int8;
  QUARK_THROW(invalid_argument("quark.block.element_dtype",
                               "unknown MX element_dtype '" + std::string(s) + "'"));
}

/// Quark's rounding_mode attribute; throws quark::invalid_argument ("quark.block.rounding_mode").
inline rounding parse_block_rounding_mode(std::int64_t mode) {
  switch (mode) {
    case 0:
      return rounding::nearest_away;
    case 1:
      return rounding::nearest_up;
    case 2:
      return rounding::nearest_even;
    default:
      QUARK_THROW(invalid_argument("quark.block.rounding_mode",
                                   "rounding_mode must be 0, 1 or 2, got " + std::to_string(mode)));
  }
}

namespace detail {

/// The op's tensor view: shape as size_t and the blocked axis (rank 0/1: axis 0).
struct op_layout {
  std::vector<std::size_t> shape;
  std::size_t axis = 0;
};

inline op_layout make_op_layout(std::span<const std::int64_t> shape, std::int64_t axis,
                                std::int64_t block_size) {
  if (block_size < 1) {
    QUARK_THROW(invalid_argument("quark.block.block_size",
                                 "block_size must be positive, got " + std::to_string(block_size)));
  }
  op_layout l;
  for (const std::int64_t d : shape) {
    if (d < 0)
      QUARK_THROW(invalid_argument("quark.block.shape", "negative dimension"));
    l.shape.push_back(static_cast<std::size_t>(d));
  }
  const auto rank = static_cast<std::int64_t>(shape.size());
  if (rank >= 2) {
    const std::int64_t a = axis < 0 ? axis + rank : axis;
    if (a < 0 || a >= rank) {
      QUARK_THROW(invalid_argument(
          "quark.block.axis",
          "axis " + std::to_string(axis) + " out of range for rank " + std::to_string(rank)));
    }
    l.axis = static_cast<std::size_t>(a);
  }
  return l;
}

inline void check_op_sizes(std::size_t in, std::size_t out) {
  if (in != out) {
    QUARK_THROW(invalid_argument("quark.block.shape", "input and output sizes differ"));
  }
}

}  // namespace detail

/// MXQuantizeDequantize attributes read through a node's accessors: `get_i(name, default)`
/// returns an integer attribute, `get_s(name, default)` a string one (whatever graph API the
/// caller has), absent ones keep the op's defaults. Not validated: see validate().
template <class GetI, class GetS>
mx_op_attributes read_mx_attributes(GetI&& get_i, GetS&& get_s) {
  mx_op_attributes a;
  a.element_dtype = get_s("element_dtype", a.element_dtype);
  a.axis = get_i("axis", a.axis);
  a.block_size = get_i("block_size", a.block_size);
  a.rounding_mode = get_i("rounding_mode", a.rounding_mode);
  return a;
}

/// BFPQuantizeDequantize attributes read through a node's accessors (as read_mx_attributes).
template <class GetI, class GetS>
bfp_op_attributes read_bfp_attributes(GetI&& get_i, GetS&& get_s) {
  bfp_op_attributes a;
  a.bfp_method = get_s("bfp_method", a.bfp_method);
  a.axis = get_i("axis", a.axis);
  a.bit_width = get_i("bit_width", a.bit_width);
  a.block_size = get_i("block_size", a.block_size);
  a.rounding_mode = get_i("rounding_mode", a.rounding_mode);
  a.sub_block_size = get_i("sub_block_size", a.sub_block_size);
  a.sub_block_shift_bits = get_i("sub_block_shift_bits", a.sub_block_shift_bits);
  a.convert_to_bfloat_before_bfp =
      get_i("convert_to_bfloat_before_bfp", a.convert_to_bfloat_before_bfp);
  a.use_compiler_version_cpu_kernel =
      get_i("use_compiler_version_cpu_kernel", a.use_compiler_version_cpu_kernel);
  return a;
}

/// Validates MXQuantizeDequantize attributes (throws quark::invalid_argument, "quark.block.*").
inline void validate(const mx_op_attributes& a) {
  static_cast<void>(parse_mx_element(a.element_dtype));
  static_cast<void>(parse_block_rounding_mode(a.rounding_mode));
  if (a.block_size < 1) {
    QUARK_THROW(invalid_argument("quark.block.block_size", "block_size must be positive"));
  }
}

/// Validates BFPQuantizeDequantize attributes (throws quark::invalid_argument, "quark.block.*").
inline void validate(const bfp_op_attributes& a) {
  if (a.bfp_method != "to_bfp" && a.bfp_method != "to_bfp_prime" &&
      a.bfp_method != "to_bfp_prime_shared") {
    QUARK_THROW(
        invalid_argument("quark.block.bfp_method", "unknown bfp_method '" + a.bfp_method + "'"));
  }
  static_cast<void>(parse_block_rounding_mode(a.rounding_mode));
  if (a.block_size < 1) {
    QUARK_THROW(invalid_argument("quark.block.block_size", "block_size must be positive"));
  }
  if (a.bit_width < 10 || a.bit_width > 31) {
    QUARK_THROW(invalid_argument("quark.block.bit_width",
                                 "bit_width must be 10..31, got " + std::to_string(a.bit_width)));
  }
  if (a.bfp_method != "to_bfp") {
    if (a.sub_block_size < 1) {
      QUARK_THROW(
          invalid_argument("quark.block.sub_block_size", "sub_block_size must be positive"));
    }
    if (a.sub_block_shift_bits < 0 || a.sub_block_shift_bits > 7) {
      QUARK_THROW(invalid_argument("quark.block.sub_block_shift_bits",
                                   "sub_block_shift_bits must be 0..7"));
    }
  }
}

/// Evaluates MXQuantizeDequantize on a float32 tensor of the given shape. FP elements always
/// round half to even (Quark ignores rounding_mode for them); int8 uses rounding_mode.
///
///     quark::mx_op_attributes a{"fp4_e2m1", 1, 32, 2};
///     std::int64_t shape[] = {1, 64};
///     quark::mx_quantize_dequantize(a, std::span<const float>(x), shape, std::span(y));
inline void mx_quantize_dequantize(const mx_op_attributes& a, std::span<const float> in,
                                   std::span<const std::int64_t> shape, std::span<float> out,
                                   compat_mode compat = compat_mode::standard) {
  validate(a);
  detail::check_op_sizes(in.size(), out.size());
  const detail::op_layout l = detail::make_op_layout(shape, a.axis, a.block_size);
  if (compat == compat_mode::quark && in.size() == 1) {
    out[0] = in[0];
    return;
  }
  mx_options o;
  o.compat = compat;
  const auto bs = static_cast<std::size_t>(a.block_size);
  switch (parse_mx_element(a.element_dtype)) {
    case mx_element::fp8_e4m3:
      mx_fake_quantize<float8_e4m3fn>(in, out, l.shape, l.axis, bs, o);
      break;
    case mx_element::fp8_e5m2:
      mx_fake_quantize<float8_e5m2>(in, out, l.shape, l.axis, bs, o);
      break;
    case mx_element::fp6_e3m2:
      mx_fake_quantize<float6_e3m2fn>(in, out, l.shape, l.axis, bs, o);
      break;
    case mx_element::fp6_e2m3:
      mx_fake_quantize<float6_e2m3fn>(in, out, l.shape, l.axis, bs, o);
      break;
    case mx_element::fp4_e2m1:
      mx_fake_quantize<float4_e2m1fn>(in, out, l.shape, l.axis, bs, o);
      break;
    case mx_element::int8:
      o.element_rounding = parse_block_rounding_mode(a.rounding_mode);
      mx_fake_quantize<std::int8_t>(in, out, l.shape, l.axis, bs, o);
      break;
  }
}

/// Evaluates BFPQuantizeDequantize on a float32 tensor: "to_bfp" is BFP (bfp.hpp), "to_bfp_prime"
/// MX4/6/9 (micro_exponent.hpp). convert_to_bfloat_before_bfp rounds the input to bfloat16
/// first for both methods.
///
///     quark::bfp_op_attributes a;  // BFP16
///     std::int64_t shape[] = {2, 8};
///     quark::bfp_quantize_dequantize(a, std::span<const float>(x), shape, std::span(y));
inline void bfp_quantize_dequantize(const bfp_op_attributes& a, std::span<const float> in,
                                    std::span<const std::int64_t> shape, std::span<float> out,
                                    compat_mode compat = compat_mode::standard) {
  validate(a);
  detail::check_op_sizes(in.size(), out.size());
  const detail::op_layout l = detail::make_op_layout(shape, a.axis, a.block_size);
  if (compat == compat_mode::quark && in.size() == 1) {
    out[0] = in[0];
    return;
  }
  const rounding r = parse_block_rounding_mode(a.rounding_mode);
  const auto bs = static_cast<std::size_t>(a.block_size);
  const int m = static_cast<int>(a.bit_width) - 9;
  if (a.bfp_method == "to_bfp") {
    bfp_options o;
    o.element_rounding = r;
    o.input = a.convert_to_bfloat_before_bfp != 0 ? bfp_input::bfloat16_first : bfp_input::float32;
    o.variant =
        a.use_compiler_version_cpu_kernel != 0 ? bfp_variant::compiler : bfp_variant::standard;
    bfp_fake_quantize(in, out, l.shape, l.axis, bs, m, o);
    return;
  }
  micro_exponent_options o;
  o.element_rounding = r;
  o.compat = compat;
  std::span<const float> src = in;
  if (a.convert_to_bfloat_before_bfp != 0) {
    for (std::size_t i = 0; i < in.size(); ++i) {
      out[i] = to_float(convert<bfloat16, policies::ieee>(in[i]));
    }
    src = out;  // the kernels allow in == out
  }
  micro_exponent_fake_quantize(src, out, l.shape, l.axis, bs,
                               static_cast<std::size_t>(a.sub_block_size),
                               static_cast<int>(a.sub_block_shift_bits), m, o);
}

namespace detail {
template <class Attr, class Fn>
void run_float16(const Attr& a, std::span<const float16> in, std::span<const std::int64_t> shape,
                 std::span<float16> out, compat_mode compat, Fn&& fn) {
  check_op_sizes(in.size(), out.size());
  std::vector<float> buf(in.size());
  for (std::size_t i = 0; i < in.size(); ++i)
    buf[i] = to_float(in[i]);
  fn(a, std::span<const float>(buf), shape, std::span<float>(buf), compat);
  for (std::size_t i = 0; i < in.size(); ++i)
    out[i] = convert<float16, policies::ieee>(buf[i]);
}
}  // namespace detail

/// MXQuantizeDequantize on a float16 tensor (widened to float32, processed, rounded back RNE).
inline void mx_quantize_dequantize(const mx_op_attributes& a, std::span<const float16> in,
                                   std::span<const std::int64_t> shape, std::span<float16> out,
                                   compat_mode compat = compat_mode::standard) {
  detail::run_float16(a, in, shape, out, compat,
                      [](const auto& at, std::span<const float> i, auto s, std::span<float> o,
                         compat_mode c) { mx_quantize_dequantize(at, i, s, o, c); });
}

/// BFPQuantizeDequantize on a float16 tensor (widened to float32, processed, rounded back RNE).
inline void bfp_quantize_dequantize(const bfp_op_attributes& a, std::span<const float16> in,
                                    std::span<const std::int64_t> shape, std::span<float16> out,
                                    compat_mode compat = compat_mode::standard) {
  detail::run_float16(a, in, shape, out, compat,
                      [](const auto& at, std::span<const float> i, auto s, std::span<float> o,
                         compat_mode c) { bfp_quantize_dequantize(at, i, s, o, c); });
}

}  // namespace quark
