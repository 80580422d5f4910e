// SPDX-License-Identifier: MIT
// quantize / dequantize / fake_quantize: quark-spec §12.1-12.2 vectors, every granularity against
// the slow reference, packed layouts, threads, NaN/Inf rules and the fake-quant properties.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include <doctest/doctest.h>

#include <quark/quant/fake_quant.hpp>
#include <quark/quant/quantize.hpp>
#include <quark/quant/tensor_view.hpp>
#include <quark/scale/fixed_point_scale.hpp>
#include <quark/scale/pow2_scale.hpp>
#include <quark/scale/qparams.hpp>

#include "quant/quant_reference.hpp"

using quark::compute_qparams;
using quark::symmetry;

namespace {

template <class D, class S = quark::float_scale>
std::vector<std::int64_t> q_of(const quark::quant_params<S, std::int32_t>& p,
                               std::vector<float> xs) {
  const float s = p.scale_value();
  const std::int32_t z = p.zero_point;
  quark::tensor_qparams<D> tp{std::span(&s, 1), std::span(&z, 1), quark::per_tensor{}, p.qmin,
                              p.qmax};
  std::vector<D> q(xs.size());
  quark::quantize<D>(quark::tensor_shape{xs.size()}, xs, tp, std::span(q));
  std::vector<std::int64_t> out;
  for (auto v : q)
    out.push_back(quark::detail::code_value(v));
  return out;
}

using v64 = std::vector<std::int64_t>;
constexpr quark::qparam_options sym{.sym = symmetry::symmetric};

}  // namespace

TEST_CASE("spec 12.1: integer codes") {
  CHECK(q_of<std::int8_t>(compute_qparams<std::int8_t>({-1.3f, 2.6f}, sym),
                          {-1.3f, 0.0f, 1.0f, 2.6f, 3.0f}) == v64{-63, 0, 49, 127, 127});
  CHECK(q_of<std::uint8_t>(compute_qparams<std::uint8_t>({-1.3f, 2.6f}),
                           {-1.3f, 0.0f, 1.0f, 2.6f}) == v64{0, 85, 150, 255});
  // Spec row: -2.6 -> 1 with the scale of the double range; with the float32 range the scale is
  // one float smaller and -2.6f / s = -127.500008 -> -128 -> code 0 (docs/compatibility.md).
  CHECK(q_of<std::uint8_t>(compute_qparams<std::uint8_t>({-1.3f, 2.6f}, sym),
                           {-1.3f, 0.0f, 1.0f, 2.6f, -2.6f}) == v64{64, 128, 177, 255, 0});
  {
    quark::quant_params<quark::float_scale, std::int32_t> spec_p{
        {0.02039215713739395f}, 128, 0, 255};
    CHECK(q_of<std::uint8_t>(spec_p, {-1.3f, 0.0f, 1.0f, 2.6f, -2.6f}) ==
          v64{64, 128, 177, 255, 1});
  }
  CHECK(q_of<std::uint8_t>(compute_qparams<std::uint8_t>({-1.0f, 1.0f}),
                           {-1.0f, -0.5f, 0.0f, 0.5f, 1.0f}) == v64{1, 64, 128, 192, 255});
  CHECK(q_of<std::int8_t>(
            compute_qparams<std::int8_t>({-1.0f, 1.0f}, {.clip = quark::clip_rule::quark_weight}),
            {-1.0f, -0.5f, 0.0f, 0.5f, 1.0f}) == v64{-127, -64, 0, 64, 127});
  CHECK(q_of<std::int16_t>(compute_qparams<std::int16_t>({-1.3f, 2.6f}, sym),
                           {-1.3f, 0.0f, 1.0f, 2.6f}) == v64{-16384, 0, 12603, 32767});
  CHECK(q_of<quark::int4>(compute_qparams<quark::int4>({-1.0f, 1.0f}, sym),
                          {-1.0f, -0.5f, 0.5f, 1.0f, 0.99f}) == v64{-7, -4, 4, 7, 7});
}

TEST_CASE("spec 12.2: power-of-two codes") {
  const auto p = compute_qparams<std::int8_t, quark::pow2_scale>({-1.3f, 2.6f}, sym);
  CHECK(q_of<std::int8_t, quark::pow2_scale>(p, {-1.3f, 0.0f, 1.0f, 2.6f, 3.0f}) ==
        v64{-83, 0, 64, 127, 127});
}

TEST_CASE("NaN, +-Inf, +-0 and saturation (default policy: NaN -> qmin)") {
  const float s = 0.5f;
  const std::int32_t z = 3;
  quark::tensor_qparams<std::int8_t> p{std::span(&s, 1), std::span(&z, 1)};
  const std::vector<float> x{NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 1e30f, -1e30f, 0.25f, 0.75f};
  std::vector<std::int8_t> q(x.size());
  quark::quantize<std::int8_t>(quark::tensor_shape{x.size()}, x, p, std::span(q));
  CHECK(q == std::vector<std::int8_t>{-128, 127, -128, 3, 3, 127, -128, 3, 5});
  std::vector<float> y(x.size());
  quark::fake_quantize<std::int8_t>(quark::tensor_shape{x.size()}, x, p, y);
  CHECK(y[0] == -65.5f);
  CHECK(std::bit_cast<std::uint32_t>(y[4]) == 0u);  // -0 -> code zp -> +0
  constexpr quark::quant_policy keep_nan{.nan = quark::nan_output::propagate};
  quark::fake_quantize<std::int8_t, keep_nan>(quark::tensor_shape{x.size()}, x, p, y);
  CHECK(std::isnan(y[0]));
  quark::quantize<std::int8_t, keep_nan>(quark::tensor_shape{x.size()}, x, p, std::span(q));
  CHECK(q[0] == 3);  // stored NaN -> zero point
  constexpr quark::quant_policy nan_zp{.nan = quark::nan_output::to_zero_point};
  quark::fake_quantize<std::int8_t, nan_zp>(quark::tensor_shape{x.size()}, x, p, y);
  CHECK(y[0] == 0.0f);
}

TEST_CASE("rounding modes and reciprocal multiplication are options") {
  const float s = 1.0f;
  quark::tensor_qparams<std::int8_t> p{std::span(&s, 1)};
  const std::vector<float> x{2.5f, -2.5f, 3.5f, -0.5f, 1.2f, -1.7f};
  std::vector<float> y(x.size());
  auto run = [&]<quark::quant_policy P>() {
    quark::fake_quantize<std::int8_t, P>(quark::tensor_shape{x.size()}, x, p, y);
    return y;
  };
  using R = quark::rounding;
  CHECK(run.operator()<quark::quant_policy{}>() == std::vector<float>{2, -2, 4, -0.0f, 1, -2});
  CHECK(run.operator()<quark::quant_policy{.round = R::nearest_away}>() ==
        std::vector<float>{3, -3, 4, -1, 1, -2});
  CHECK(run.operator()<quark::quant_policy{.round = R::nearest_up}>() ==
        std::vector<float>{3, -2, 4, 0, 1, -2});
  CHECK(run.operator()<quark::quant_policy{.round = R::toward_zero}>() ==
        std::vector<float>{2, -2, 3, 0, 1, -1});
  CHECK(run.operator()<quark::quant_policy{.round = R::toward_negative}>() ==
        std::vector<float>{2, -3, 3, -1, 1, -2});
  CHECK(run.operator()<quark::quant_policy{.round = R::toward_positive}>() ==
        std::vector<float>{3, -2, 4, 0, 2, -1});
  // x / s and x * (1 / s) differ near ties: s = 0.1f, x = 0.35f.
  const float s2 = 0.1f;
  quark::tensor_qparams<std::int8_t> p2{std::span(&s2, 1)};
  std::vector<float> x2{0.35f};
  std::vector<std::int8_t> qd(1), qr(1);
  quark::quantize<std::int8_t>(quark::tensor_shape{1}, x2, p2, std::span(qd));
  quark::quantize<std::int8_t, quark::policies::torch_fake_quant>(quark::tensor_shape{1}, x2, p2,
                                                                  std::span(qr));
  CHECK(qd[0] == static_cast<std::int8_t>(std::nearbyint(0.35f / 0.1f)));
  CHECK(qr[0] == static_cast<std::int8_t>(std::nearbyint(0.35f * (1.0f / 0.1f))));
}

namespace {

template <class D>
void check_against_reference(std::vector<std::size_t> shape, quark::granularity g,
                             std::mt19937_64& rng) {
  const std::size_t n = [&] {
    std::size_t k = 1;
    for (auto d : shape)
      k *= d;
    return k;
  }();
  const std::size_t np = quark_test::param_count(shape, g);
  std::vector<float> s(np);
  std::vector<std::int32_t> z(np);
  std::uniform_real_distribution<float> us(0.01f, 2.0f);
  using tr = quark::dtype_traits<D>;
  std::uniform_int_distribution<std::int64_t> uz(tr::min_value, tr::max_value);
  for (std::size_t k = 0; k < np; ++k) {
    s[k] = us(rng);
    z[k] = static_cast<std::int32_t>(uz(rng));
  }
  const auto x = quark_test::nasty_data(n, 1.0f, rng);
  const quark::tensor_shape ts(std::span<const std::size_t>(shape.data(), shape.size()));
  quark::tensor_qparams<D> p{s, z, g};
  std::vector<D> q(n);
  quark::quantize<D>(ts, x, p, std::span(q));
  std::vector<float> y(n), fq(n), fq2(n);
  quark::dequantize<D>(ts, std::span<const D>(q), p, y);
  quark::fake_quantize<D>(ts, x, p, fq);
  quark::fake_quantize<D>(ts, x, p, fq2, quark::threading{2, 64});
  std::size_t bad = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t pi = quark_test::param_index(shape, g, i);
    const std::int64_t rq =
        quark_test::ref_quantize(x[i], s[pi], z[pi], tr::min_value, tr::max_value);
    const float ry = quark_test::ref_dequantize(rq, s[pi], z[pi]);
    if (quark::detail::code_value(q[i]) != rq ||
        std::bit_cast<std::uint32_t>(y[i]) != std::bit_cast<std::uint32_t>(ry) ||
        std::bit_cast<std::uint32_t>(fq[i]) != std::bit_cast<std::uint32_t>(ry) ||
        std::bit_cast<std::uint32_t>(fq2[i]) != std::bit_cast<std::uint32_t>(ry)) {
      if (++bad < 5) {
        MESSAGE("element " << i << " x=" << x[i] << " q=" << quark::detail::code_value(q[i])
                           << " ref=" << rq << " fq=" << fq[i] << " ry=" << ry);
      }
    }
  }
  CHECK(bad == 0);
  if constexpr (quark::dtype_traits<D>::bits < 8) {
    std::vector<std::uint8_t> packed(quark::packed_size(n, quark::dtype_traits<D>::bits), 0xAA);
    quark::quantize_packed<D>(ts, x, p, packed, quark::threading{2, 64});
    std::vector<D> unpacked(n);
    quark::unpack(std::span<const std::uint8_t>(packed), std::span(unpacked));
    CHECK(unpacked == q);
    std::vector<float> y2(n);
    quark::dequantize_packed<D>(ts, packed, p, y2);
    CHECK(std::memcmp(y2.data(), y.data(), n * sizeof(float)) == 0);
  }
}

}  // namespace

TEST_CASE_TEMPLATE("every granularity against the reference", D, quark::int2, quark::uint2,
                   quark::int3, quark::int4, quark::uint4, std::int8_t, std::uint8_t, std::int16_t,
                   std::uint16_t) {
  const auto seed = quark_test::test_seed();
  MESSAGE("seed " << seed << " (override with QUARK_TEST_SEED)");
  std::mt19937_64 rng(seed);
  const std::vector<std::size_t> shape{3, 5, 4, 7};
  check_against_reference<D>(shape, quark::per_tensor{}, rng);
  for (std::ptrdiff_t ax : {0, 1, 2, 3, -1}) {
    check_against_reference<D>(shape, quark::per_channel{ax}, rng);
  }
  for (std::ptrdiff_t ax : {0, 1, 3}) {
    for (std::size_t bs : {1u, 2u, 3u, 4u, 8u}) {
      check_against_reference<D>(shape, quark::per_block{ax, bs}, rng);
    }
  }
  check_against_reference<D>({1000, 37}, quark::per_block{1, 16}, rng);
  check_against_reference<D>({37, 1000}, quark::per_block{0, 16}, rng);
  check_against_reference<D>({4099}, quark::per_tensor{}, rng);
  check_against_reference<D>({40001}, quark::per_tensor{}, rng);  // the prefetching long runs
  check_against_reference<D>({2, 20003}, quark::per_channel{0}, rng);
}

TEST_CASE("32-bit integer types use exact wide arithmetic") {
  const float s = 1.0f;
  const std::int32_t z = 2000000000;
  quark::tensor_qparams<std::int32_t> p{std::span(&s, 1), std::span(&z, 1)};
  std::vector<float> x{200000000.0f, -1.0f, 0.0f, NAN};
  std::vector<std::int32_t> q(4);
  quark::quantize<std::int32_t>(quark::tensor_shape{4}, x, p, std::span(q));
  CHECK(q == std::vector<std::int32_t>{2147483647, 1999999999, 2000000000, -2147483647 - 1});
  std::vector<float> y(4);
  quark::dequantize<std::int32_t>(quark::tensor_shape{4}, std::span<const std::int32_t>(q), p, y);
  CHECK(y[1] == -1.0f);
  std::vector<std::uint32_t> u(2);
  const float su = 1.0f;
  quark::tensor_qparams<std::uint32_t> pu{std::span(&su, 1)};
  quark::quantize<std::uint32_t>(quark::tensor_shape{2}, std::vector<float>{5e9f, -3.0f}, pu,
                                 std::span(u));
  CHECK(u == std::vector<std::uint32_t>{4294967295u, 0u});
}

TEST_CASE("float targets: FP8 / FP16 / BF16 / FP4 with a scale") {
  const float s = 0.5f;
  quark::tensor_qparams<quark::float8_e4m3fn> p{std::span(&s, 1)};
  std::vector<float> x{1.0f, 300.0f, -1000.0f, NAN, -0.0f, 0.3f};
  std::vector<quark::float8_e4m3fn> q(x.size());
  quark::quantize<quark::float8_e4m3fn>(quark::tensor_shape{x.size()}, x, p, std::span(q));
  CHECK(quark::to_float(q[0]) == 2.0f);
  CHECK(quark::to_float(q[1]) == 448.0f);  // saturate (ONNX default)
  CHECK(quark::to_float(q[2]) == -448.0f);
  CHECK(q[3].is_nan());
  CHECK(q[4].to_bits() == 0x80u);
  std::vector<float> y(x.size());
  quark::fake_quantize<quark::float8_e4m3fn>(quark::tensor_shape{x.size()}, x, p, y);
  CHECK(y[1] == 224.0f);
  CHECK(y[5] == 0.3125f);  // 0.6 -> 0.625 in E4M3
  const float s2 = 2.0f;
  quark::tensor_qparams<quark::bfloat16> pb{std::span(&s2, 1)};
  std::vector<float> xb{3.3f, -0.0f, 1e38f};
  std::vector<float> yb(3);
  quark::fake_quantize<quark::bfloat16>(quark::tensor_shape{3}, xb, pb, yb);
  CHECK(yb[0] == 3.296875f);
  CHECK(std::bit_cast<std::uint32_t>(yb[1]) == 0x80000000u);
  quark::tensor_qparams<quark::float16> ph{std::span(&s2, 1)};
  std::vector<quark::float16> qh(3);
  quark::quantize<quark::float16>(quark::tensor_shape{3},
                                  std::vector<float>{262016.0f, 0.1f, -1e9f}, ph, std::span(qh));
  CHECK(quark::to_float(qh[0]) == 65504.0f);  // saturate (quant_policy::float_overflow)
  CHECK(quark::to_float(qh[1]) == 0.0499877929688f);
  CHECK(quark::to_float(qh[2]) == -65504.0f);
  constexpr quark::quant_policy ieee_overflow{.float_overflow = quark::overflow::to_special};
  quark::quantize<quark::float16, ieee_overflow>(
      quark::tensor_shape{3}, std::vector<float>{262016.0f, 0.1f, -1e9f}, ph, std::span(qh));
  CHECK(qh[0].is_inf());
  quark::tensor_qparams<quark::float4_e2m1fn> p4{std::span(&s, 1)};
  std::vector<std::uint8_t> packed(3);
  quark::quantize_packed<quark::float4_e2m1fn>(
      quark::tensor_shape{5}, std::vector<float>{0.5f, 1.0f, -3.0f, 10.0f, 0.0f}, p4, packed);
  CHECK(packed == std::vector<std::uint8_t>{0x42, 0x7F, 0x00});  // codes 1.0, 2.0, -6, 6 (sat), 0
}

TEST_CASE_TEMPLATE(
    "properties: idempotent, monotone, exact on the grid, half a step inside the range", D,
    quark::int4, quark::uint4, std::int8_t, std::uint8_t, std::int16_t) {
  const auto seed = quark_test::test_seed();
  MESSAGE("seed " << seed << " (override with QUARK_TEST_SEED)");
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> ur(-50.0f, 50.0f);
  for (int trial = 0; trial < 40; ++trial) {
    float a = ur(rng);
    float b = ur(rng);
    if (a > b)
      std::swap(a, b);
    const auto symm = trial % 2 == 0 ? symmetry::asymmetric : symmetry::symmetric;
    const auto p = compute_qparams<D>({a, b}, {.sym = symm});
    const quark::fake_quant<D> fq(p);
    const float s = p.scale_value();
    std::vector<float> xs(2000);
    for (auto& v : xs)
      v = ur(rng);
    std::sort(xs.begin(), xs.end());
    float prev = -INFINITY;
    const float lo = static_cast<float>(p.qmin - p.zero_point) * s;
    const float hi = static_cast<float>(p.qmax - p.zero_point) * s;
    for (float v : xs) {
      const float y = fq(v);
      REQUIRE(fq(y) == y);  // idempotent
      REQUIRE(y >= prev);   // monotone
      prev = y;
      // Half a step, plus the float rounding of x / s and of level * s (a few ulps of |v|).
      const float slack = 4.0f * std::numeric_limits<float>::epsilon() * std::fabs(v);
      if (v >= lo && v <= hi)
        REQUIRE(std::fabs(y - v) <= 0.5f * s + slack);
    }
    const std::int64_t step = (p.qmax - p.qmin) / 4096 + 1;
    for (std::int64_t c = p.qmin; c <= p.qmax; c += step) {
      const float g = static_cast<float>(c - p.zero_point) * s;
      REQUIRE(fq(g) == g);  // exact on grid values
      // and dequantize(quantize(g)) gives the code back
      std::vector<D> q(1);
      const float sv = s;
      const std::int32_t zv = p.zero_point;
      quark::quantize<D>(quark::tensor_shape{1}, std::vector<float>{g},
                         quark::tensor_qparams<D>{std::span(&sv, 1), std::span(&zv, 1)},
                         std::span(q));
      REQUIRE(quark::detail::code_value(q[0]) == c);
    }
  }
}

TEST_CASE("bad arguments throw with stable ids") {
  const float s[2] = {1.0f, 0.0f};
  quark::tensor_qparams<std::int8_t> p{std::span(s, 1), {}, quark::per_channel{0}};
  std::vector<float> x(6), y(6);
  auto id_of = [&](auto&& f) {
    try {
      f();
    } catch (const quark::error& e) {
      return e.id();
    }
    return std::string("none");
  };
  CHECK(id_of([&] {
          quark::fake_quantize<std::int8_t>(quark::tensor_shape{2, 3}, x, p, y);
        }) == "quark.quant.param_count");
  p.scale = std::span(s, 2);
  CHECK(id_of([&] {
          quark::fake_quantize<std::int8_t>(quark::tensor_shape{2, 3}, x, p, y);
        }) == "quark.quant.bad_scale");
  p.gran = quark::per_channel{2};
  CHECK(id_of([&] {
          quark::fake_quantize<std::int8_t>(quark::tensor_shape{2, 3}, x, p, y);
        }) == "quark.quant.bad_axis");
  CHECK(id_of([&] { quark::tensor_shape({2, 3}, {1, 2}); }) == "quark.quant.non_contiguous");
  CHECK(id_of([&] { quark::tensor_shape({2, 3}, {3, 1}); }) == "none");
}

TEST_CASE("tensor_view overloads equal the span kernels and check shapes") {
  std::vector<float> x(2 * 3 * 4);
  for (std::size_t i = 0; i < x.size(); ++i)
    x[i] = static_cast<float>(i) * 0.37f - 4.0f;
  const std::vector<float> s{0.1f, 0.2f, 0.3f};
  const quark::tensor_qparams<std::int8_t> p{s, {}, quark::per_channel{1}};
  std::vector<float> y1(x.size()), y2(x.size());
  quark::fake_quantize<std::int8_t>(quark::tensor_view<const float>(x.data(), {2, 3, 4}), p,
                                    quark::tensor_view<float>(y1.data(), {2, 3, 4}));
  quark::fake_quantize<std::int8_t>(quark::tensor_shape{2, 3, 4}, x, p, y2);
  CHECK(y1 == y2);
  std::vector<std::int8_t> q(x.size());
  quark::tensor_view<std::int8_t> qv(q.data(), {2, 3, 4});
  quark::quantize<std::int8_t>(quark::tensor_view<const float>(x.data(), {2, 3, 4}), p, qv);
  std::vector<float> y3(x.size());
  quark::dequantize<std::int8_t>(quark::tensor_view<const std::int8_t>(qv), p,
                                 quark::tensor_view<float>(y3.data(), {2, 3, 4}));
  CHECK(y3 == y2);
  CHECK_THROWS_AS(
      quark::fake_quantize<std::int8_t>(quark::tensor_view<const float>(x.data(), {2, 3, 4}), p,
                                        quark::tensor_view<float>(y1.data(), {3, 2, 4})),
      quark::invalid_argument);
}
