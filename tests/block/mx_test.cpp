// SPDX-License-Identifier: MIT
// OCP MX: hand-derived vectors from OCP MX v1.0 (one set per element type: a block max just
// below a power of two, an all-zero block, element subnormals, Inf/NaN), quark-spec 12.7, an
// independent path through quark::convert, E8M0 scales against quark::convert<float8_e8m0fnu>,
// N-d blocking, packed storage and seeded properties.
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <type_traits>
#include <vector>

#include <doctest/doctest.h>

#include <quark/block/mx.hpp>
#include <quark/quant/two_stage.hpp>

#include "block/block_support.hpp"

// With quant/two_stage.hpp in scope, overload resolution of fake_quantize<B> instantiates
// block_format<...> itself: every format must be a complete type (a static_assert once looked up
// Element::magnitude_bits on minifloat elements, so this file failed to compile with it).
static_assert(sizeof(quark::mxfp4_e2m1) > 0 && sizeof(quark::mxfp6_e3m2) > 0 &&
              sizeof(quark::mxfp6_e2m3) > 0 && sizeof(quark::mxfp8_e4m3) > 0 &&
              sizeof(quark::mxfp8_e5m2) > 0 && sizeof(quark::mxint8) > 0);

using block_test::check_same;
using block_test::same;

namespace {

constexpr float inf = std::numeric_limits<float>::infinity();
constexpr float qnan = std::numeric_limits<float>::quiet_NaN();

/// Fake-quantizes `x` padded with zeros to one block of 32 and returns the first x.size() values.
template <class B>
std::vector<float> fq(std::vector<float> x, quark::mx_options o = {}) {
  const std::size_t n = x.size();
  x.resize(32, 0.0f);
  std::vector<float> y(32);
  quark::fake_quantize<B>(std::span<const float>(x), std::span<float>(y), o);
  y.resize(n);
  return y;
}

quark::mx_options quark_compat(quark::rounding r = quark::rounding::nearest_even) {
  quark::mx_options o;
  o.compat = quark::compat_mode::quark;
  o.element_rounding = r;
  return o;
}

}  // namespace

TEST_CASE("OCP MX FP4 E2M1: hand-derived blocks") {
  // amax 7.9: floor(log2) = 2, E = 2 - emax(2) = 0, X = 1; 7.9 saturates to 6, 0.26 > 0.25 -> 0.5.
  check_same(fq<quark::mxfp4_e2m1>({7.9f, 1.0f, -3.1f, 0.26f}), {6.0f, 1.0f, -3.0f, 0.5f});
  // rceil: E = ceil(log2(7.9 / 6)) = 1, X = 2: 3.95 -> 4, 0.5, -1.55 -> -1.5, 0.13 -> 0.
  quark::mx_options rc;
  rc.scale_mode = quark::e8m0_scale_mode::rceil;
  check_same(fq<quark::mxfp4_e2m1>({7.9f, 1.0f, -3.1f, 0.26f}, rc), {8.0f, 1.0f, -3.0f, 0.0f});
  // ceil: ceil(log2 7.9) = 3, E = 1 (same grid); even: 7.9 = 1.975 * 4 rounds up to 8, E = 1.
  rc.scale_mode = quark::e8m0_scale_mode::ceil;
  check_same(fq<quark::mxfp4_e2m1>({7.9f, 1.0f}, rc), {8.0f, 1.0f});
  rc.scale_mode = quark::e8m0_scale_mode::even;
  check_same(fq<quark::mxfp4_e2m1>({7.9f, 1.0f}, rc), {8.0f, 1.0f});
  // even keeps floor when the significand is below 1.75: 6.9 = 1.725 * 4 -> E = 0, 6.9 -> 6.
  check_same(fq<quark::mxfp4_e2m1>({6.9f}, rc), {6.0f});
  // All zero: every output is zero and keeps its sign (FP4 has -0).
  check_same(fq<quark::mxfp4_e2m1>({0.0f, -0.0f, 0.0f}), {0.0f, -0.0f, 0.0f});
  // Element subnormal 0.5: E = 0; 0.25 ties to 0 (even), 0.75 ties to 1.0 (even code), -0.3 ->
  // -0.5.
  check_same(fq<quark::mxfp4_e2m1>({6.0f, 0.5f, 0.25f, 0.75f, -0.3f}),
             {6.0f, 0.5f, 0.0f, 1.0f, -0.5f});
  // Inf/NaN: OCP makes the whole block NaN; Quark passes them through (E from 2: X = 0.5).
  const auto ocp = fq<quark::mxfp4_e2m1>({1.0f, inf, -2.0f, qnan, 0.3f});
  for (const float v : ocp)
    CHECK(std::isnan(v));
  check_same(fq<quark::mxfp4_e2m1>({1.0f, inf, -2.0f, qnan, 0.3f}, quark_compat()),
             {1.0f, inf, -2.0f, qnan, 0.25f});
}

TEST_CASE("OCP MX FP8 E4M3: hand-derived blocks") {
  // amax 255.9: E = 7 - 8 = -1, X = 0.5; 511.8 saturates to 448 -> 224; -200 is 12.5 steps of
  // 16 in [128, 256) and ties to 12 -> -192 -> -96.
  check_same(fq<quark::mxfp8_e4m3>({255.9f, 1.0f, -100.0f}), {224.0f, 1.0f, -96.0f});
  check_same(fq<quark::mxfp8_e4m3>({0.0f, 0.0f}), {0.0f, 0.0f});
  // E = 0; element subnormal step 2^-9: 2^-7 exact, 1.5 * 2^-9 ties to 2 * 2^-9, 2^-10 ties to 0.
  check_same(fq<quark::mxfp8_e4m3>({448.0f, 0x1p-7f, 0x3p-10f, 0x1p-10f}),
             {448.0f, 0x1p-7f, 0x1p-8f, 0.0f});
  for (const float v : fq<quark::mxfp8_e4m3>({1.0f, -inf}))
    CHECK(std::isnan(v));
}

TEST_CASE("OCP MX FP8 E5M2: hand-derived blocks") {
  // amax 65535: E = 15 - 15 = 0; 65535 saturates to 57344 (no Inf from overflow).
  check_same(fq<quark::mxfp8_e5m2>({65535.0f, -1.0f}), {57344.0f, -1.0f});
  check_same(fq<quark::mxfp8_e5m2>({0.0f}), {0.0f});
  // E = 0; subnormal step 2^-16: 1.5 * 2^-16 -> 2^-15, 2.5 * 2^-16 -> 2 * 2^-16 (even).
  check_same(fq<quark::mxfp8_e5m2>({32768.0f, 0x3p-17f, 0x5p-17f}), {32768.0f, 0x1p-15f, 0x1p-15f});
  for (const float v : fq<quark::mxfp8_e5m2>({qnan, 1.0f}))
    CHECK(std::isnan(v));
}

TEST_CASE("OCP MX FP6 E3M2 and E2M3: hand-derived blocks") {
  // E3M2, amax 31.9: E = 4 - 4 = 0; 31.9 -> 28 (max), 5.1 -> 5 (step 1 in [4, 8)).
  check_same(fq<quark::mxfp6_e3m2>({31.9f, 5.1f}), {28.0f, 5.0f});
  // E3M2 subnormal step 2^-4: 1.5 and 2.5 steps tie to 2 steps.
  check_same(fq<quark::mxfp6_e3m2>({16.0f, 0.09375f, 0.15625f}), {16.0f, 0.125f, 0.125f});
  check_same(fq<quark::mxfp6_e3m2>({0.0f}), {0.0f});
  // E2M3, amax 7.99: E = 0; 7.99, 7.6, -7.7 saturate to +-7.5.
  check_same(fq<quark::mxfp6_e2m3>({7.99f, 7.6f, -7.7f}), {7.5f, 7.5f, -7.5f});
  // E2M3 subnormal step 2^-3: 0.5, 1.5, 2.5 steps -> 0, 2, 2 steps.
  check_same(fq<quark::mxfp6_e2m3>({4.0f, 0.0625f, 0.1875f, 0.3125f}), {4.0f, 0.0f, 0.25f, 0.25f});
  for (const float v : fq<quark::mxfp6_e2m3>({inf}))
    CHECK(std::isnan(v));
}

TEST_CASE("OCP MX INT8: 1.6 fixed point, asymmetric range") {
  // amax 1.999: E = 0; 127.936 -> 128 -> clamped to 127; 32.5 ties to 32 (RNE).
  check_same(fq<quark::mxint8>({1.999f, 0.5078125f, -1.5f}), {1.984375f, 0.5f, -1.5f});
  // -1.999 -> -127.936 -> -128: -2.0 exists.
  check_same(fq<quark::mxint8>({-1.999f, 1.0f}), {-2.0f, 1.0f});
  // Zeros from rounding are unsigned; 1.5/64 -> 2/64.
  check_same(fq<quark::mxint8>({1.0f, -0x1p-7f, 0x3p-7f}), {1.0f, 0.0f, 0x1p-5f});
  check_same(fq<quark::mxint8>({0.0f, 0.0f}), {0.0f, 0.0f});
  // The asymmetric range breaks idempotence: amax 2042.96 gives E = 10 (quantum 16), the max
  // rounds to -128 quanta = -2048, and the second pass sees E = 11 (quantum 32): -16 -> -0.5
  // quanta -> 0.
  const auto once = fq<quark::mxint8>({-2042.96f, -15.7878f});
  check_same(once, {-2048.0f, -16.0f});
  check_same(fq<quark::mxint8>(once), {-2048.0f, 0.0f});
}

TEST_CASE("quark-spec 12.7 vectors (Quark's MXQuantizeDequantize, rounding_mode 2)") {
  const std::vector<float> v16 = {0.1f,  -0.25f, 3.3f,  100.0f, -7.77f, 0.0f, 1e-3f, 2.5f,
                                  0.75f, -1.5f,  12.0f, 0.3f,   -64.0f, 5.0f, 0.01f, 33.0f};
  const auto o = quark_compat();
  check_same(fq<quark::mxfp8_e5m2>(v16, o),
             {0.09375f, -0.25f, 3.5f, 96.0f, -8.0f, 0.0f, 0.0009765625f, 2.5f, 0.75f, -1.5f, 12.0f,
              0.3125f, -64.0f, 5.0f, 0.009765625f, 32.0f});
  check_same(fq<quark::mxfp8_e4m3>(v16, o),
             {0.1015625f, -0.25f, 3.25f, 96.0f, -8.0f, 0.0f, 0.0009765625f, 2.5f, 0.75f, -1.5f,
              12.0f, 0.3125f, -64.0f, 5.0f, 0.009765625f, 32.0f});
  check_same(fq<quark::mxfp6_e3m2>(v16, o),
             {0.0f, -0.25f, 3.5f, 96.0f, -8.0f, 0.0f, 0.0f, 2.5f, 0.75f, -1.5f, 12.0f, 0.25f,
              -64.0f, 5.0f, 0.0f, 32.0f});
  check_same(fq<quark::mxfp6_e2m3>(v16, o), {0.0f, 0.0f, 4.0f, 96.0f, -8.0f, 0.0f, 0.0f, 2.0f, 0.0f,
                                             -2.0f, 12.0f, 0.0f, -64.0f, 4.0f, 0.0f, 32.0f});
  check_same(fq<quark::mxfp4_e2m1>(v16, o), {0.0f, 0.0f, 0.0f, 96.0f, -8.0f, 0.0f, 0.0f, 0.0f, 0.0f,
                                             0.0f, 16.0f, 0.0f, -64.0f, 8.0f, 0.0f, 32.0f});
  check_same(fq<quark::mxint8>(v16, o), {0.0f, 0.0f, 3.0f, 100.0f, -8.0f, 0.0f, 0.0f, 2.0f, 1.0f,
                                         -2.0f, 12.0f, 0.0f, -64.0f, 5.0f, 0.0f, 33.0f});
  // Standard mode gives the same magnitudes; FP zeros keep their sign (-0.25 -> -0 in E2M3).
  const auto s = fq<quark::mxfp6_e2m3>(v16);
  CHECK(block_test::bits(s[1]) == 0x80000000u);
  // Edge cases.
  check_same(fq<quark::mxfp4_e2m1>({7.0f}, o), {6.0f});
  check_same(fq<quark::mxfp8_e4m3>({492.8f}, o), {448.0f});
  check_same(fq<quark::mxfp4_e2m1>({-0.01f, 1.0f}, o), {0.0f, 1.0f});  // sign dropped
  check_same(fq<quark::mxfp4_e2m1>({-0.01f, 1.0f}), {-0.0f, 1.0f});    // OCP keeps it
  check_same(fq<quark::mxfp8_e4m3>({inf, 1.0f, -3.0f, qnan}, o), {inf, 1.0f, -3.0f, qnan});
  check_same(
      fq<quark::mxint8>({1.9921875f, -1.0f, 0.5f}, quark_compat(quark::rounding::nearest_away)),
      {1.984375f, -1.0f, 0.5f});
  // E of an all-zero FP4 block: -129 in Quark's op, clamped to E8M0's -127 by OCP.
  constexpr auto el = quark::mx_element_info_v<quark::float4_e2m1fn>;
  CHECK(quark::detail::mx_shared_exponent(0u, el, quark::e8m0_scale_mode::floor,
                                          quark::compat_mode::quark) == -129);
  CHECK(quark::detail::mx_shared_exponent(0u, el, quark::e8m0_scale_mode::floor,
                                          quark::compat_mode::standard) == -127);
}

TEST_CASE("OCP MX: tiny blocks, float32 subnormals and the E8M0 floor") {
  // amax 2^-120 (FP4): E = -122, X = 2^-122: x / X = 4, 0.5 (element subnormal), 0.75 -> 1.
  check_same(fq<quark::mxfp4_e2m1>({0x1p-120f, 0x1p-123f, 0x3p-124f}),
             {0x1p-120f, 0x1p-123f, 0x1p-122f});
  // All float32 subnormal: OCP clamps E to -127 (X = 2^-127); E4M3 step at x/X ~ 2^-9.
  const float d = 0x1p-136f;  // x / X = 2^-9: the smallest E4M3 subnormal
  check_same(fq<quark::mxfp8_e4m3>({d, 0x1p-137f, 0x3p-137f}), {d, 0.0f, 0x1p-135f});
  // Quark: E = -127 - 8 = -135, X = 2^-135: 2^-136 / X = 0.5 exactly (E4M3 normal range).
  check_same(fq<quark::mxfp8_e4m3>({d, 0x1p-137f}, quark_compat()), {d, 0x1p-137f});
}

TEST_CASE("MXFP8 / MXINT8 / FP6 / FP4 elements agree with quark::convert of x / X") {
  const std::uint32_t seed = block_test::seed();
  INFO("seed " << seed);
  std::mt19937 rng(seed);
  const auto x = block_test::random_tensor(rng, 32 * 512, -30, 30);
  const auto check = [&](auto elem_tag, auto block_tag) {
    using elem = typename decltype(elem_tag)::type;
    using B = typename decltype(block_tag)::type;
    std::vector<float> y(x.size());
    quark::fake_quantize<B>(std::span<const float>(x), std::span<float>(y));
    for (std::size_t b = 0; b < x.size(); b += 32) {
      float amax = 0.0f;
      for (std::size_t i = b; i < b + 32; ++i)
        amax = std::fmax(amax, std::fabs(x[i]));
      const auto s = quark::choose_e8m0_scale<elem>(amax);
      const float scale = quark::to_float(s);
      for (std::size_t i = b; i < b + 32; ++i) {
        float want = 0.0f;
        if constexpr (std::is_same_v<elem, std::int8_t>) {
          const auto q =
              quark::convert<std::int8_t, quark::policies::onnx_quantize>(x[i] / scale * 64.0f);
          want = static_cast<float>(q) / 64.0f * scale;
        } else {
          want =
              quark::to_float(quark::convert<elem, quark::policies::ocp_mx_element>(x[i] / scale)) *
              scale;
        }
        if (!same(y[i], want)) {
          INFO("block " << b / 32 << " x " << x[i] << " X " << scale << " got " << y[i] << " want "
                        << want);
          REQUIRE(same(y[i], want));
        }
      }
    }
  };
  check(std::type_identity<quark::float8_e4m3fn>{}, std::type_identity<quark::mxfp8_e4m3>{});
  check(std::type_identity<quark::float8_e5m2>{}, std::type_identity<quark::mxfp8_e5m2>{});
  check(std::type_identity<quark::float6_e3m2fn>{}, std::type_identity<quark::mxfp6_e3m2>{});
  check(std::type_identity<quark::float6_e2m3fn>{}, std::type_identity<quark::mxfp6_e2m3>{});
  check(std::type_identity<quark::float4_e2m1fn>{}, std::type_identity<quark::mxfp4_e2m1>{});
  check(std::type_identity<std::int8_t>{}, std::type_identity<quark::mxint8>{});
}

TEST_CASE("E8M0 scales agree with quark::convert<float8_e8m0fnu> for the matching mode") {
  const std::uint32_t seed = block_test::seed();
  INFO("seed " << seed);
  std::mt19937 rng(seed);
  std::uniform_int_distribution<std::uint32_t> bits_d(0x00800000u, 0x7F7FFFFFu);  // normal floats
  using quark::e8m0_scale_mode;
  const auto run = [&](auto elem_tag) {
    using elem = typename decltype(elem_tag)::type;
    constexpr auto el = quark::mx_element_info_v<elem>;
    for (int i = 0; i < 20000; ++i) {
      const float amax = std::bit_cast<float>(bits_d(rng));
      const float shifted = std::ldexp(amax, -el.emax);  // exact when normal
      if (std::fpclassify(shifted) != FP_NORMAL)
        continue;
      INFO("amax " << amax);
      // floor <-> ONNX round_mode "down"; ceil <-> "up".
      CHECK(quark::choose_e8m0_scale<elem>(amax, e8m0_scale_mode::floor).to_bits() ==
            quark::convert<quark::float8_e8m0fnu, quark::policies::onnx_e8m0_down>(shifted)
                .to_bits());
      CHECK(
          quark::choose_e8m0_scale<elem>(amax, e8m0_scale_mode::ceil).to_bits() ==
          quark::convert<quark::float8_e8m0fnu, quark::policies::onnx_e8m0_up>(shifted).to_bits());
      // rceil <-> "up" of amax / max, where that division is exact in float32.
      const double ratio = static_cast<double>(amax) / static_cast<double>(el.max_pos);
      const auto rf = static_cast<float>(ratio);
      if (static_cast<double>(rf) == ratio && std::fpclassify(rf) == FP_NORMAL) {
        CHECK(quark::choose_e8m0_scale<elem>(amax, e8m0_scale_mode::rceil).to_bits() ==
              quark::convert<quark::float8_e8m0fnu, quark::policies::onnx_e8m0_up>(rf).to_bits());
      }
      // rceil, always: the smallest power of two with amax <= max * 2^E (double arithmetic).
      const int e = quark::choose_e8m0_scale<elem>(amax, e8m0_scale_mode::rceil).to_bits() - 127;
      if (e > -127 && e < 127) {
        CHECK(static_cast<double>(amax) <= static_cast<double>(el.max_pos) * std::ldexp(1.0, e));
        CHECK(static_cast<double>(amax) > static_cast<double>(el.max_pos) * std::ldexp(1.0, e - 1));
      }
      // even: floor of amax rounded (ties up) to the element's mantissa width: an independent
      // path through the minifloat encoder with an 8-bit exponent and `mbits` mantissa bits.
      constexpr quark::fp_format rounded_fmt{8, el.mbits, 127, true, quark::specials::ieee};
      constexpr quark::conversion_policy away{quark::rounding::nearest_away,
                                              quark::overflow::to_special,
                                              quark::nan_handling::propagate};
      const float r =
          quark::detail::decode_fp<rounded_fmt>(quark::detail::encode_fp<rounded_fmt, away>(amax));
      int want = std::isinf(r) ? 128 - el.emax : quark::detail::ilogb_exact(r) - el.emax;
      want = want < -127 ? -127 : (want > 127 ? 127 : want);
      CHECK(quark::choose_e8m0_scale<elem>(amax, e8m0_scale_mode::even).to_bits() == want + 127);
    }
    // Specials: zero -> the smallest scale; Inf/NaN -> NaN scale.
    CHECK(quark::choose_e8m0_scale<elem>(0.0f).to_bits() == 0);
    CHECK(quark::choose_e8m0_scale<elem>(inf).to_bits() == 0xFF);
    CHECK(quark::choose_e8m0_scale<elem>(qnan).to_bits() == 0xFF);
  };
  run(std::type_identity<quark::float8_e4m3fn>{});
  run(std::type_identity<quark::float8_e5m2>{});
  run(std::type_identity<quark::float6_e3m2fn>{});
  run(std::type_identity<quark::float6_e2m3fn>{});
  run(std::type_identity<quark::float4_e2m1fn>{});
  run(std::type_identity<std::int8_t>{});
}

TEST_CASE("OCP MX: blocks along any axis with a partial last block") {
  const std::uint32_t seed = block_test::seed();
  INFO("seed " << seed);
  std::mt19937 rng(seed);
  // Shape [3, 40, 5], blocks of 32 along axis 1: per (outer, inner) a block of 32 and one of 8.
  const std::size_t shape[] = {3, 40, 5};
  const auto x = block_test::random_tensor(rng, 3 * 40 * 5);
  std::vector<float> y(x.size());
  quark::fake_quantize<quark::mxfp4_e2m1>(std::span<const float>(x), std::span<float>(y), shape, 1);
  for (std::size_t o = 0; o < 3; ++o) {
    for (std::size_t i = 0; i < 5; ++i) {
      std::vector<float> col(40), want(40), got(40);
      for (std::size_t j = 0; j < 40; ++j) {
        col[j] = x[(o * 40 + j) * 5 + i];
        got[j] = y[(o * 40 + j) * 5 + i];
      }
      quark::fake_quantize<quark::mxfp4_e2m1>(std::span<const float>(col), std::span<float>(want));
      check_same(got, want, "column");
    }
  }
  // The partial block equals a zero-padded full block (zeros never change the scale).
  std::vector<float> padded(x.begin(), x.begin() + 40), p_out(64), direct(40);
  padded.resize(64, 0.0f);
  quark::fake_quantize<quark::mxfp4_e2m1>(std::span<const float>(padded), std::span<float>(p_out));
  quark::fake_quantize<quark::mxfp4_e2m1>(std::span<const float>(x.data(), 40),
                                          std::span<float>(direct));
  check_same(std::span<const float>(p_out.data(), 40), direct, "padding");
  // Any block size, and in == out.
  std::vector<float> z = x, w(x.size());
  const std::size_t flat[] = {x.size()};
  quark::mx_fake_quantize<quark::float8_e4m3fn>(x, w, flat, 0, 7);
  quark::mx_fake_quantize<quark::float8_e4m3fn>(z, z, flat, 0, 7);
  check_same(z, w, "in place");
  CHECK_THROWS_AS(quark::mx_fake_quantize<quark::float8_e4m3fn>(x, w, flat, 1, 32),
                  quark::invalid_argument);
  CHECK_THROWS_AS(quark::mx_fake_quantize<quark::float8_e4m3fn>(x, w, flat, 0, 0),
                  quark::invalid_argument);
}

TEST_CASE("OCP MX: large tensors take the streaming path and agree with small calls") {
  const std::uint32_t seed = block_test::seed();
  INFO("seed " << seed);
  std::mt19937 rng(seed);
  const auto x = block_test::random_tensor(rng, (std::size_t{9} << 20) / 4 + 40);  // > 8 MiB
  std::vector<float> y(x.size()), z(4096 + 40);
  quark::fake_quantize<quark::mxfp8_e4m3>(std::span<const float>(x), std::span<float>(y));
  const std::size_t tail = x.size() - z.size();  // a multiple of 32: same block boundaries
  REQUIRE(tail % 32 == 0);
  quark::fake_quantize<quark::mxfp8_e4m3>(std::span<const float>(x.data() + tail, z.size()),
                                          std::span<float>(z));
  check_same(std::span<const float>(y.data() + tail, z.size()), z, "tail");
}

TEST_CASE("OCP MX: packed storage round-trips to the fake-quantized values") {
  const std::uint32_t seed = block_test::seed();
  INFO("seed " << seed);
  std::mt19937 rng(seed);
  auto x = block_test::random_tensor(rng, 3 * 70);
  x[5] = inf;  // block 0 of row 0 becomes a NaN block
  const auto run = [&](auto tag) {
    using B = typename decltype(tag)::type;
    std::vector<float> want(x.size()), got(x.size());
    const std::size_t shape[] = {3, 70};
    quark::fake_quantize<B>(std::span<const float>(x), std::span<float>(want), shape, 1);
    const auto t = quark::make_block_tensor<B>(x, 70);
    CHECK(t.layout.blocks_per_row == 3);
    CHECK(t.scales.size() == 9);
    CHECK(t.scales[0] == 0xFF);
    CHECK(t.elements.size() == quark::packed_size(210, quark::block_traits<B>::element_bits));
    quark::dequantize(t, std::span<float>(got));
    check_same(got, want, std::string(quark::dtype_traits<quark::float8_e8m0fnu>::name));
    // Unpacked codes decode to the same element values.
    std::vector<std::uint8_t> codes(210);
    quark::unpack_block_elements<B>(t.elements, codes);
    std::vector<std::uint8_t> repacked(t.elements.size());
    quark::pack_block_elements<B>(codes, repacked);
    CHECK(repacked == t.elements);
  };
  run(std::type_identity<quark::mxfp8_e4m3>{});
  run(std::type_identity<quark::mxfp8_e5m2>{});
  run(std::type_identity<quark::mxfp6_e3m2>{});
  run(std::type_identity<quark::mxfp6_e2m3>{});
  run(std::type_identity<quark::mxfp4_e2m1>{});
  run(std::type_identity<quark::mxint8>{});
  // FP4 codes: two per byte, element 0 in the low nibble; 6.0 = 0b0111, -1.0 = 0b1010.
  const std::vector<float> v = {6.0f, -1.0f};
  const auto t = quark::make_block_tensor<quark::mxfp4_e2m1>(v, 2);
  CHECK(t.elements[0] == 0xA7);
  CHECK(t.scales[0] == 127);
  quark::mx_options q;
  q.compat = quark::compat_mode::quark;
  CHECK_THROWS_AS(quark::make_block_tensor<quark::mxfp4_e2m1>(v, 2, q), quark::invalid_argument);
}

TEST_CASE("OCP MX properties: idempotent, power-of-two scale invariant, monotone in a block") {
  const std::uint32_t seed = block_test::seed();
  INFO("seed " << seed);
  std::mt19937 rng(seed);
  const auto x = block_test::random_tensor(rng, 32 * 256, -10, 10);
  const auto run = [&](auto tag, quark::e8m0_scale_mode mode, quark::rounding r) {
    using B = typename decltype(tag)::type;
    quark::mx_options o;
    o.scale_mode = mode;
    o.element_rounding = r;
    std::vector<float> y(x.size()), yy(x.size()), xs(x.size()), ys(x.size());
    quark::fake_quantize<B>(std::span<const float>(x), std::span<float>(y), o);
    // Idempotence: floor keeps the block's exponent under every rounding (the element grid
    // holds 2^emax and saturation stays in the binade). even and rceil keep it under the
    // nearest modes only (directed rounding can pull amax below the rounding threshold, so the
    // second pass picks a smaller scale and saturates). ceil moves exact powers of two.
    quark::fake_quantize<B>(std::span<const float>(y), std::span<float>(yy), o);
    // MXINT8 is excluded: its -128 lets a negative amax round up to the next binade (below).
    const bool nearest = r == quark::rounding::nearest_even || r == quark::rounding::nearest_away;
    const bool int8 = std::is_same_v<B, quark::mxint8>;
    if (!int8 && (mode == quark::e8m0_scale_mode::floor ||
                  (nearest && mode != quark::e8m0_scale_mode::ceil))) {
      check_same(yy, y, "idempotence");
    }
    // Scaling by 2^k scales the result by 2^k (away from E8M0's limits).
    for (const int k : {-7, 3, 19}) {
      for (std::size_t i = 0; i < x.size(); ++i)
        xs[i] = std::ldexp(x[i], k);
      quark::fake_quantize<B>(std::span<const float>(xs), std::span<float>(ys), o);
      for (std::size_t i = 0; i < x.size(); ++i) {
        if (!same(ys[i], std::ldexp(y[i], k))) {
          INFO("k " << k << " i " << i);
          REQUIRE(same(ys[i], std::ldexp(y[i], k)));
        }
      }
    }
    // Monotone: within a block, x_i <= x_j implies q(x_i) <= q(x_j).
    for (std::size_t b = 0; b < x.size(); b += 32) {
      for (std::size_t i = b; i < b + 32; ++i) {
        for (std::size_t j = b; j < b + 32; ++j) {
          if (x[i] <= x[j] && !(y[i] <= y[j])) {
            INFO("block " << b / 32 << " " << x[i] << " <= " << x[j]);
            REQUIRE(y[i] <= y[j]);
          }
        }
      }
    }
  };
  for (const auto mode : {quark::e8m0_scale_mode::floor, quark::e8m0_scale_mode::ceil,
                          quark::e8m0_scale_mode::even, quark::e8m0_scale_mode::rceil}) {
    for (const auto r : {quark::rounding::nearest_even, quark::rounding::nearest_away,
                         quark::rounding::toward_zero, quark::rounding::toward_positive}) {
      run(std::type_identity<quark::mxfp4_e2m1>{}, mode, r);
      run(std::type_identity<quark::mxfp8_e4m3>{}, mode, r);
      run(std::type_identity<quark::mxfp6_e2m3>{}, mode, r);
      run(std::type_identity<quark::mxint8>{}, mode, r);
    }
  }
}
