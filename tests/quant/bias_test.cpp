// SPDX-License-Identifier: MIT
// quantize_bias_int32 (quark-spec §6.2): RNE of the double quotient, int32 saturation counted.
// Expected codes are exact: power-of-two scales (every quotient representable), or a quotient
// computed with exact rational arithmetic outside this project (Python fractions.Fraction).
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include <doctest/doctest.h>

#include <quark/quant/bias.hpp>

TEST_CASE("quantize_bias_int32: the double quotient, not the float32 one") {
  // s = float32(float32(1/65535) * float32(1/32767)) has the bits 0x30000180
  // (4.656826035898121e-10); 0.5 / s = 1073692674.2499 exactly (Fraction(0.5) / Fraction(s)),
  // so RNE gives 1073692674. A float32 quotient is a multiple of 64 there: 1073692672.
  const float s = std::bit_cast<float>(std::uint32_t{0x30000180});
  CHECK(s == static_cast<float>(1.0 / 65535.0) * static_cast<float>(1.0 / 32767.0));
  const float b = 0.5f;
  std::int32_t q = 0;
  const auto r = quark::quantize_bias_int32({&b, 1}, {&s, 1}, {&q, 1});
  CHECK(q == 1073692674);
  CHECK(r.clipped == 0u);
  CHECK(r.worst_steps == 0.0);
}

TEST_CASE("quantize_bias_int32: half-way cases round to even, per element scales") {
  // Scales 0.5 and 0.25: 1.25 / 0.5 = 2.5 -> 2, 1.75 / 0.5 = 3.5 -> 4, -1.25 / 0.5 = -2.5 -> -2,
  // 0.625 / 0.25 = 2.5 -> 2.
  const std::vector<float> b{1.25f, 1.75f, -1.25f, 0.625f};
  const std::vector<float> s{0.5f, 0.5f, 0.5f, 0.25f};
  std::vector<std::int32_t> q(4);
  quark::quantize_bias_int32(b, s, q);
  CHECK(q == std::vector<std::int32_t>{2, 4, -2, 2});
}

TEST_CASE("quantize_bias_int32: saturation at the int32 range is counted") {
  // s = 2^-30: 1.5 -> 1.5 * 2^30 = 1610612736; 2 -> 2^31, one past the maximum: 2147483647;
  // -2 -> -2^31, the minimum itself (not clipped); -2.5 -> -2.5 * 2^30: clipped to -2^31.
  const float s = std::ldexp(1.0f, -30);
  const std::vector<float> b{1.5f, 2.0f, -2.0f, -2.5f};
  std::vector<std::int32_t> q(4);
  const auto r = quark::quantize_bias_int32(b, {&s, 1}, q);
  CHECK(q == std::vector<std::int32_t>{1610612736, std::numeric_limits<std::int32_t>::max(),
                                       std::numeric_limits<std::int32_t>::min(),
                                       std::numeric_limits<std::int32_t>::min()});
  CHECK(r.clipped == 2u);
  CHECK(r.worst_steps == 2.5 * std::ldexp(1.0, 30));
}

TEST_CASE("quantize_bias_int32: narrower bounds (Int16Bias) saturate and count there") {
  // s = 2^-10: 31.999 -> 32766.976 -> 32767 fits; 32 -> 32768 clips to 32767; -32 -> -32768
  // fits; -40 -> -40960 clips to -32768 (|b / s| = 40960 is the worst).
  const float s = std::ldexp(1.0f, -10);
  const std::vector<float> b{31.999f, 32.0f, -32.0f, -40.0f};
  std::vector<std::int32_t> q(4);
  const auto r = quark::quantize_bias_int32(b, {&s, 1}, q, -32768, 32767);
  CHECK(q == std::vector<std::int32_t>{32767, 32767, -32768, -32768});
  CHECK(r.clipped == 2u);
  CHECK(r.worst_steps == 40960.0);
  CHECK_THROWS_AS(quark::quantize_bias_int32(b, {&s, 1}, q, 5, 4), quark::invalid_argument);
  CHECK_THROWS_AS(quark::quantize_bias_int32(b, {&s, 1}, q, 0, std::int64_t{1} << 40),
                  quark::invalid_argument);
}

TEST_CASE("quantize_bias_int32: bad input is refused, naming the element") {
  const std::vector<float> b{1.0f, std::nanf(""), 3.0f};
  const float one = 1.0f, zero = 0.0f;
  std::vector<std::int32_t> q(3), short_out(2);
  CHECK_THROWS_WITH_AS(quark::quantize_bias_int32(b, {&one, 1}, q), doctest::Contains("element 1"),
                       quark::invalid_argument);
  const std::vector<float> fine{1.0f, 2.0f, 3.0f};
  CHECK_THROWS_WITH_AS(quark::quantize_bias_int32(fine, {&zero, 1}, q),
                       doctest::Contains("element 0"), quark::invalid_argument);
  CHECK_THROWS_AS(quark::quantize_bias_int32(fine, {&one, 1}, short_out), quark::invalid_argument);
  const std::vector<float> two_scales{1.0f, 1.0f};
  CHECK_THROWS_AS(quark::quantize_bias_int32(fine, two_scales, q), quark::invalid_argument);
}
