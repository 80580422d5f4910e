// SPDX-License-Identifier: MIT
// Scale kinds: exact to_float, projections (quark-spec §2.2, §2.3, §2.4, §2.5, vectors §12.2-12.3).
#include <bit>
#include <cmath>

#include <doctest/doctest.h>

#include <quark/scale/e8m0_scale.hpp>
#include <quark/scale/fixed_point_scale.hpp>
#include <quark/scale/float_scale.hpp>
#include <quark/scale/pow2_scale.hpp>

using quark::scale_traits;

static_assert(quark::scale_type<quark::float_scale>);
static_assert(quark::scale_type<quark::float16_scale>);
static_assert(quark::scale_type<quark::pow2_scale>);
static_assert(quark::scale_type<quark::fixed_point_scale>);
static_assert(quark::scale_type<quark::e8m0_scale>);
static_assert(!quark::scale_type<float>);
static_assert(scale_traits<quark::pow2_scale>::is_power_of_two);
static_assert(scale_traits<quark::e8m0_scale>::is_power_of_two);
static_assert(!scale_traits<quark::fixed_point_scale>::is_power_of_two);
static_assert(scale_traits<quark::pow2_scale>::to_float({-7}) == 0.0078125f);

namespace {
quark::fixed_point_scale fx(float x, quark::fixed_point_fallback f = {}) {
  return scale_traits<quark::fixed_point_scale>::from_float(x, {.fixed_point = f});
}
int pos(float s, quark::pow2_rounding r = quark::pow2_rounding::nearest_log2) {
  return scale_traits<quark::pow2_scale>::from_float(s, {.pow2 = r}).position();
}
}  // namespace

TEST_CASE("pow2: Quark position rint(-log2 s) (spec 2.2, 12.2)") {
  CHECK(pos(2.6f / 127.0f) == 6);  // -log2 0.02047 = 5.61 -> 6
  CHECK(pos(1.4f / 127.0f) == 7);  // 6.503 -> 7 (clips 1.4)
  CHECK(pos(1.5f / 127.0f) == 6);
  CHECK(pos(0.9f / 127.0f) == 7);
  CHECK(pos(1.0f / 127.0f) == 7);
  CHECK(pos(2.0f / 127.0f) == 6);
  CHECK(pos(0.25f) == 2);  // exact powers stay
  CHECK(pos(1.0f) == 0);
  CHECK(pos(1e-40f) == 127);  // clamped at 2^-127
  CHECK(pos(1e38f) == -126);  // log2(1e38) = 126.2 -> 126
  CHECK(pos(3e38f) == -127);  // clamped at 2^127
  // The boundary: m^2 > 2 rounds up. sqrt(2) lies between two floats.
  const float below = 1.41421354f;  // largest float < sqrt 2
  const float above = std::nextafter(below, 2.0f);
  CHECK(pos(below) == 0);
  CHECK(pos(above) == -1);
}

TEST_CASE("pow2: non-overflow ceil never shrinks the scale") {
  using quark::pow2_rounding;
  CHECK(pos(1.4f / 127.0f, pow2_rounding::ceil) == 6);
  CHECK(pos(0.25f, pow2_rounding::ceil) == 2);
  CHECK(pos(std::nextafter(0.25f, 1.0f), pow2_rounding::ceil) == 1);
  for (float s = 1e-6f; s < 1e6f; s *= 1.37f) {
    const float p = quark::project_scale<quark::pow2_scale>(s, {.pow2 = pow2_rounding::ceil});
    CHECK(p >= s);
    CHECK(p < 2.0f * s);
  }
}

TEST_CASE("fixed point: Quark's find_int16_scale vectors (spec 12.3)") {
  auto check = [](float x, int m, int n) {
    const auto s = fx(x);
    CHECK(s.multiplier == m);
    CHECK(s.shift == n);
  };
  check(0.0123f, 403, 15);
  check(2.6f / 127.0f, 671, 15);
  check(3e-5f, 1, 15);
  check(0.75f, 3, 2);
  check(300.0f, 300, 0);
  check(0.0f, 0, 0);
}

TEST_CASE("fixed point: no collapse to 2^-14 (project decision), Quark collapse as option") {
  using quark::fixed_point_fallback;
  // 1e-6: Quark's N <= 16 gives M = 0; the extended search keeps 15 significant bits.
  const auto s = fx(1e-6f);
  CHECK(s.multiplier != 0);
  const float v = scale_traits<quark::fixed_point_scale>::to_float(s);
  CHECK(std::fabs(v - 1e-6f) / 1e-6f < 1e-4f);
  const auto c = fx(1e-6f, fixed_point_fallback::quark_collapse);
  CHECK(scale_traits<quark::fixed_point_scale>::to_float(c) == 0x1p-14f);
  CHECK(scale_traits<quark::fixed_point_scale>::to_float(
            fx(0x1p-17f, fixed_point_fallback::quark_collapse)) == 0x1p-14f);
  CHECK(scale_traits<quark::fixed_point_scale>::to_float(fx(0x1p-17f)) == 0x1p-17f);
  // 40000: no N in [0, 16] fits; a negative shift does.
  const auto big = fx(40000.0f);
  CHECK(scale_traits<quark::fixed_point_scale>::to_float(big) == 40000.0f);
  CHECK(big.shift < 0);
  CHECK(scale_traits<quark::fixed_point_scale>::to_float(
            fx(40000.0f, fixed_point_fallback::quark_collapse)) == 0x1p-14f);
}

TEST_CASE("e8m0: floor (OCP), ceil, nearest") {
  using quark::e8m0_rounding;
  auto p = [](float s, e8m0_rounding r) {
    return quark::project_scale<quark::e8m0_scale>(s, {.e8m0 = r});
  };
  CHECK(p(0.3f, e8m0_rounding::floor) == 0.25f);
  CHECK(p(0.3f, e8m0_rounding::ceil) == 0.5f);
  CHECK(p(0.3f, e8m0_rounding::nearest) == 0.25f);
  CHECK(p(0.4f, e8m0_rounding::nearest) == 0.5f);
  CHECK(p(0.25f, e8m0_rounding::ceil) == 0.25f);
  CHECK(p(1e-39f, e8m0_rounding::floor) == 0x1p-127f);  // saturates at the smallest
  CHECK(p(3e38f, e8m0_rounding::ceil) == 0x1p127f);     // and the largest
  CHECK(std::isnan(p(NAN, e8m0_rounding::floor)));
}

TEST_CASE("float16 scale: RNE to binary16") {
  CHECK(quark::project_scale<quark::float16_scale>(0.1f) == 0.0999755859375f);
  CHECK(quark::project_scale<quark::float16_scale>(1.0f) == 1.0f);
  CHECK(quark::project_scale<quark::float_scale>(0.1f) == 0.1f);
}
