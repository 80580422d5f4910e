// SPDX-License-Identifier: MIT
// quantize / fake_quantize against ONNX Runtime 1.30 QuantizeLinear -> DequantizeLinear (opset
// 21), bit for bit, for int4, uint4, int8, uint8, int16 and uint16: per tensor, per axis (axes 0,
// 1 and 3 of a 4-D tensor) and blocked (block_size along axes 3, 1 and 0, every one with a
// partial last block). The data mixes random values with exact ties (power-of-two scales make
// (k + 1/2) * s a true tie), +-0, float subnormals, huge values, +-Inf and NaN. One ORT run per
// type evaluates every granularity (one Q -> DQ chain each). The ORT result is compared both as
// codes (quantize) and as float bits (fake_quantize and dequantize). FLOAT8E4M3FN and FLOAT8E5M2
// (saturate=1) are compared per tensor and per axis through the dequantized float output.
//
// One known ORT defect is recognised exactly and counted, not hidden (docs/compatibility.md,
// "quant"): several ORT 1.30 kernels convert x / s to int32 without saturating, so for NaN and
// |x / s| >= 2^31 they produce x86's "integer indefinite" INT_MIN, add the zero point with
// wrap-around and clamp (+Inf may become qmin, -Inf qmax). Seen here: the blocked kernel along a
// non-last axis for 8/16-bit types, and the per-axis and blocked kernels for int4/uint4. The
// per-tensor kernels saturate (NaN -> qmin) and match quark everywhere. quark saturates as the
// ONNX specification says: on those elements the test checks quark's saturated code and counts
// how often ORT differs; everywhere else it requires identical bits.
//
// If ORT is not installed the test fails with installation instructions: it never skips.
#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include <quark/dtype/pack.hpp>
#include <quark/quant/fake_quant.hpp>
#include <quark/quant/quantize.hpp>

#include "quant/quant_reference.hpp"
#include "support/ort.hpp"

namespace {

namespace ot = quark::test::onnx_type;
using quark::test::attr_int;
using quark::test::model_builder;
using quark::test::npy_array;

template <class T>
constexpr int onnx_code() {
  if constexpr (std::is_same_v<T, quark::int4>)
    return ot::int4;
  if constexpr (std::is_same_v<T, quark::uint4>)
    return ot::uint4;
  if constexpr (std::is_same_v<T, std::int8_t>)
    return ot::int8;
  if constexpr (std::is_same_v<T, std::uint8_t>)
    return ot::uint8;
  if constexpr (std::is_same_v<T, std::int16_t>)
    return ot::int16;
  if constexpr (std::is_same_v<T, std::uint16_t>)
    return ot::uint16;
}

struct qdq_case {
  std::string name;
  quark::granularity gran;
  std::vector<float> scale;
  std::vector<std::int32_t> zp;
  std::vector<std::int64_t> param_dims;  // ONNX shape of scale / zero point
};

const std::vector<std::size_t> shape{4, 6, 5, 7};

/// Random data plus constructed ties, signed zeros, subnormals, huge values, infinities, NaN.
std::vector<float> make_data(std::mt19937_64& rng) {
  std::size_t n = 1;
  for (auto d : shape)
    n *= d;
  auto v = quark_test::nasty_data(n, 1.0f, rng);
  // Exact ties for the power-of-two scales used below (0.25 and 2^-7): (k + 1/2) * s.
  std::uniform_int_distribution<int> k(-70000, 70000);
  for (std::size_t i = 0; i < n; i += 7) {
    const float s = (i / 7) % 2 == 0 ? 0.25f : 0x1p-7f;
    v[i] = (static_cast<float>(k(rng)) + 0.5f) * s;
  }
  return v;
}

template <class T>
std::vector<qdq_case> make_cases(std::mt19937_64& rng) {
  using tr = quark::dtype_traits<T>;
  std::uniform_real_distribution<float> us(0.001f, 3.0f);
  std::uniform_int_distribution<std::int64_t> uz(tr::min_value, tr::max_value);
  std::uniform_int_distribution<int> pick(0, 3);
  auto params = [&](std::size_t count) {
    std::pair<std::vector<float>, std::vector<std::int32_t>> p;
    for (std::size_t k = 0; k < count; ++k) {
      const int c = pick(rng);
      p.first.push_back(c == 0 ? 0.25f : (c == 1 ? 0x1p-7f : us(rng)));
      p.second.push_back(static_cast<std::int32_t>(uz(rng)));
    }
    return p;
  };
  std::vector<qdq_case> cases;
  auto add = [&](std::string name, quark::granularity g, std::vector<std::int64_t> dims) {
    std::size_t count = 1;
    for (auto d : dims)
      count *= static_cast<std::size_t>(d);
    auto [s, z] = params(count);
    cases.push_back({std::move(name), g, std::move(s), std::move(z), std::move(dims)});
  };
  add("tensor", quark::per_tensor{}, {});
  add("axis0", quark::per_channel{0}, {4});
  add("axis1", quark::per_channel{1}, {6});
  add("axis3", quark::per_channel{3}, {7});
  add("block3", quark::per_block{3, 4}, {4, 6, 5, 2});  // 7 = 4 + 3
  add("block1", quark::per_block{1, 4}, {4, 2, 5, 7});  // 6 = 4 + 2
  add("block0", quark::per_block{0, 3}, {2, 6, 5, 7});  // 4 = 3 + 1
  return cases;
}

template <class T>
void run_type() {
  if (!quark::test::ort_available()) {
    FAIL("ONNX Runtime is required for this test and is not usable: "
         << quark::test::ort_unavailable_reason());
  }
  const auto seed = quark_test::test_seed();
  MESSAGE("seed " << seed << " (override with QUARK_TEST_SEED)");
  std::mt19937_64 rng(seed + static_cast<std::uint64_t>(onnx_code<T>()));
  const auto x = make_data(rng);
  const auto cases = make_cases<T>(rng);
  const std::vector<std::int64_t> xdims(shape.begin(), shape.end());

  // 1. One graph: x -> Q_k -> q_k -> DQ_k -> y_k for every case k.
  model_builder m(21);
  m.input("x", ot::float32, xdims);
  for (std::size_t k = 0; k < cases.size(); ++k) {
    const auto& c = cases[k];
    const std::string id = std::to_string(k);
    m.initializer("s" + id, ot::float32, c.param_dims, c.scale);
    if constexpr (quark::dtype_traits<T>::bits < 8) {
      std::vector<T> zt;
      for (auto z : c.zp)
        zt.push_back(T(z));
      std::vector<std::uint8_t> packed(quark::packed_size(zt.size(), 4));
      quark::pack(std::span<const T>(zt), std::span(packed));
      m.initializer_raw("z" + id, onnx_code<T>(), c.param_dims, packed.data(), packed.size());
    } else {
      std::vector<T> zt;
      for (auto z : c.zp)
        zt.push_back(static_cast<T>(z));
      m.initializer("z" + id, onnx_code<T>(), c.param_dims, zt);
    }
    std::vector<quark::test::attribute> attrs;
    if (const auto* pc = std::get_if<quark::per_channel>(&c.gran)) {
      attrs.push_back(attr_int("axis", pc->axis));
    } else if (const auto* pb = std::get_if<quark::per_block>(&c.gran)) {
      attrs.push_back(attr_int("axis", pb->axis));
      attrs.push_back(attr_int("block_size", static_cast<std::int64_t>(pb->block_size)));
    }
    m.node("QuantizeLinear", {"x", "s" + id, "z" + id}, {"q" + id}, attrs);
    m.node("DequantizeLinear", {"q" + id, "s" + id, "z" + id}, {"y" + id}, attrs);
    if constexpr (quark::dtype_traits<T>::bits < 8) {
      // The Node binding cannot return int4/uint4: widen exactly inside the graph.
      constexpr int wide = quark::dtype_traits<T>::is_signed ? ot::int8 : ot::uint8;
      m.node("Cast", {"q" + id}, {"qw" + id}, {attr_int("to", wide)});
      m.output("qw" + id, wide, xdims);
    } else {
      m.output("q" + id, onnx_code<T>(), xdims);
    }
    m.output("y" + id, ot::float32, xdims);
  }
  const auto out = quark::test::run_ort(m.build(), {npy_array::from(x, shape)});

  // 2. Compare every case.
  const quark::tensor_shape ts(std::span<const std::size_t>(shape.data(), shape.size()));
  for (std::size_t k = 0; k < cases.size(); ++k) {
    const auto& c = cases[k];
    CAPTURE(c.name);
    const std::string id = std::to_string(k);
    std::vector<std::int64_t> ort_q;
    if constexpr (quark::dtype_traits<T>::is_signed && quark::dtype_traits<T>::bits < 8) {
      for (auto v : out.at("qw" + id).values<std::int8_t>())
        ort_q.push_back(v);
    } else if constexpr (quark::dtype_traits<T>::bits < 8) {
      for (auto v : out.at("qw" + id).values<std::uint8_t>())
        ort_q.push_back(v);
    } else {
      for (auto v : out.at("q" + id).values<T>())
        ort_q.push_back(v);
    }
    const auto ort_y = out.at("y" + id).values<float>();
    REQUIRE(ort_q.size() == x.size());
    REQUIRE(ort_y.size() == x.size());

    const quark::tensor_qparams<T> p{c.scale, c.zp, c.gran};
    std::vector<T> q(x.size());
    quark::quantize<T>(ts, x, p, std::span(q));
    std::vector<float> fq(x.size()), dq(x.size());
    quark::fake_quantize<T>(ts, x, p, fq);
    quark::dequantize<T>(ts, std::span<const T>(q), p, dq);
    std::size_t bad = 0;
    std::size_t known = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      const float r = x[i] / c.scale[quark_test::param_index(shape, c.gran, i)];
      const bool out_of_int32 = !(std::fabs(r) < 2147483648.0f);
      if (out_of_int32) {
        CHECK(quark::detail::code_value(q[i]) == (r > 0 ? p.qmax : p.qmin));  // NaN -> qmin
      }
      const auto oy = std::bit_cast<std::uint32_t>(ort_y[i]);
      const bool ok = quark::detail::code_value(q[i]) == ort_q[i] &&
                      std::bit_cast<std::uint32_t>(fq[i]) == oy &&
                      std::bit_cast<std::uint32_t>(dq[i]) == oy;
      if (!ok && out_of_int32 && !std::holds_alternative<quark::per_tensor>(c.gran)) {
        ++known;
        continue;
      }
      if (!ok && ++bad <= 5) {
        MESSAGE(c.name << " element " << i << ": x=" << x[i]
                       << " quark q=" << quark::detail::code_value(q[i]) << " y=" << fq[i]
                       << "; ORT q=" << ort_q[i] << " y=" << ort_y[i]);
      }
    }
    CHECK(bad == 0);
    if (known > 0) {
      MESSAGE(c.name << ": ORT's unsaturated conversion differs on " << known
                     << " elements with NaN or |x/s| >= 2^31 (quark saturates)");
    }
  }
}

}  // namespace

TEST_CASE("QDQ bit-exact vs ONNX Runtime: int4") {
  run_type<quark::int4>();
}
TEST_CASE("QDQ bit-exact vs ONNX Runtime: uint4") {
  run_type<quark::uint4>();
}
TEST_CASE("QDQ bit-exact vs ONNX Runtime: int8") {
  run_type<std::int8_t>();
}
TEST_CASE("QDQ bit-exact vs ONNX Runtime: uint8") {
  run_type<std::uint8_t>();
}
TEST_CASE("QDQ bit-exact vs ONNX Runtime: int16") {
  run_type<std::int16_t>();
}
TEST_CASE("QDQ bit-exact vs ONNX Runtime: uint16") {
  run_type<std::uint16_t>();
}

namespace {

/// FP8 targets: QuantizeLinear -> DequantizeLinear (saturate=1, the default) compared through the
/// float output (the Node binding cannot return float8 tensors).
template <class T>
void run_float8(int code) {
  if (!quark::test::ort_available()) {
    FAIL("ONNX Runtime is required for this test and is not usable: "
         << quark::test::ort_unavailable_reason());
  }
  std::mt19937_64 rng(quark_test::test_seed() + static_cast<std::uint64_t>(code));
  const auto x = make_data(rng);
  const std::vector<std::int64_t> xdims(shape.begin(), shape.end());
  const std::vector<float> st{0.25f};
  std::vector<float> sc(6);
  std::uniform_real_distribution<float> us(0.001f, 3.0f);
  for (auto& v : sc)
    v = us(rng);
  const std::vector<std::uint8_t> z1(1, 0), z6(6, 0);
  model_builder m(21);
  m.input("x", ot::float32, xdims);
  m.initializer("s0", ot::float32, {}, st);
  m.initializer_raw("z0", code, {}, z1.data(), 1);
  m.initializer("s1", ot::float32, {6}, sc);
  m.initializer_raw("z1", code, {6}, z6.data(), 6);
  m.node("QuantizeLinear", {"x", "s0", "z0"}, {"q0"});
  m.node("DequantizeLinear", {"q0", "s0", "z0"}, {"y0"});
  m.node("QuantizeLinear", {"x", "s1", "z1"}, {"q1"}, {attr_int("axis", 1)});
  m.node("DequantizeLinear", {"q1", "s1", "z1"}, {"y1"}, {attr_int("axis", 1)});
  m.output("y0", ot::float32, xdims);
  m.output("y1", ot::float32, xdims);
  const auto out = quark::test::run_ort(m.build(), {npy_array::from(x, shape)});
  const quark::tensor_shape ts(std::span<const std::size_t>(shape.data(), shape.size()));
  const std::vector<float> zf1(1, 0.0f), zf6(6, 0.0f);
  const quark::tensor_qparams<T> p0{st, zf1};
  const quark::tensor_qparams<T> p1{sc, zf6, quark::per_channel{1}};
  std::vector<float> y0(x.size()), y1(x.size());
  quark::fake_quantize<T>(ts, x, p0, y0);
  quark::fake_quantize<T>(ts, x, p1, y1);
  const auto o0 = out.at("y0").values<float>();
  const auto o1 = out.at("y1").values<float>();
  std::size_t bad = 0;
  std::size_t nan_sign = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    for (auto [a, b] : {std::pair{y0[i], o0[i]}, std::pair{y1[i], o1[i]}}) {
      if (std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b))
        continue;
      if (std::isnan(a) && std::isnan(b)) {
        ++nan_sign;  // NaN payload/sign is not part of the contract
        continue;
      }
      if (++bad <= 5)
        MESSAGE("element " << i << ": x=" << x[i] << " quark " << a << " ORT " << b);
    }
  }
  CHECK(bad == 0);
  if (nan_sign > 0)
    MESSAGE(nan_sign << " NaN results differ only in sign or payload");
}

}  // namespace

TEST_CASE("QDQ bit-exact vs ONNX Runtime: float8e4m3fn (per tensor, per axis)") {
  run_float8<quark::float8_e4m3fn>(ot::float8e4m3fn);
}
TEST_CASE("QDQ bit-exact vs ONNX Runtime: float8e5m2 (per tensor, per axis)") {
  run_float8<quark::float8_e5m2>(ot::float8e5m2);
}
