// SPDX-License-Identifier: MIT
// quark/scale/retype.hpp against hand-computed cases: span ratios (int8 -> int16 is 255 / 65535),
// scales where the ratio is exact (int16 <-> int8 is 257), power-of-two scales staying powers of
// two for every pair of integer types, zero points mapped from range to range, and moves onto small
// float types keeping the range the codes span (absmax over the largest finite value).
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <string>

#include <doctest/doctest.h>

#include <quark/core/error.hpp>
#include <quark/scale/retype.hpp>

#include "support/checks.hpp"

using quark::dtype_id;
using quark::test::error_id;

TEST_CASE("retype: code span ratios") {
  CHECK(quark::code_span_ratio(dtype_id::int8, dtype_id::int16) == 255.0 / 65535.0);
  CHECK(quark::code_span_ratio(dtype_id::int16, dtype_id::int8) == 257.0);
  CHECK(quark::code_span_ratio(dtype_id::uint8, dtype_id::int4) == 17.0);
  CHECK(quark::code_span_ratio(dtype_id::int32, dtype_id::uint32) == 1.0);
}

TEST_CASE("retype: scales") {
  // 0.75 is not a power of two: int8 -> int16 divides by 257, int16 -> int8 multiplies.
  CHECK(quark::retype_scale(192.75f, dtype_id::int8, dtype_id::int16) == 0.75f);
  CHECK(quark::retype_scale(0.75f, dtype_id::int16, dtype_id::int8) == 192.75f);
  // Powers of two: 2^-3 / 257 = 2^-11.006 -> 2^-11; 0.5 * 257 = 2^7.006 -> 2^7;
  // uint8 -> int4: 2^-4 * 17 = 2^0.087 -> 1; 2^-2 * (15 / 255) = 2^-6.09 -> 2^-6.
  CHECK(quark::retype_scale(0.125f, dtype_id::int8, dtype_id::int16) == 0x1p-11f);
  CHECK(quark::retype_scale(0.5f, dtype_id::int16, dtype_id::int8) == 128.0f);
  CHECK(quark::retype_scale(0x1p-4f, dtype_id::uint8, dtype_id::int4) == 1.0f);
  CHECK(quark::retype_scale(0.25f, dtype_id::int4, dtype_id::uint8) == 0x1p-6f);
  // Every power-of-two scale between every pair of integer types stays a power of two, the one
  // nearest in log2 to s * ratio.
  const dtype_id types[] = {dtype_id::int4,  dtype_id::uint4,  dtype_id::int8,  dtype_id::uint8,
                            dtype_id::int16, dtype_id::uint16, dtype_id::int32, dtype_id::uint32};
  for (const dtype_id a : types) {
    for (const dtype_id b : types) {
      for (int e = -30; e <= 10; ++e) {
        const float s = std::ldexp(1.0f, e);
        const float r = quark::retype_scale(s, a, b);
        int ex = 0;
        CHECK(std::frexp(r, &ex) == 0.5f);
        const double want = std::log2(static_cast<double>(s) * quark::code_span_ratio(a, b));
        CHECK(std::fabs(std::log2(static_cast<double>(r)) - want) <= 0.5);
      }
    }
  }
}

TEST_CASE("retype: zero points") {
  // uint8 128 -> uint16: 128 * 65535 / 255 = 128 * 257 = 32896.
  CHECK(quark::retype_code(128, dtype_id::uint8, dtype_id::uint16) == 32896);
  // uint16 32768 -> uint8: 32768 / 257 = 127.502 -> 128; 32639 / 257 = 127.0 -> 127;
  // 32767 / 257 = 127.498 -> 127.
  CHECK(quark::retype_code(32768, dtype_id::uint16, dtype_id::uint8) == 128);
  CHECK(quark::retype_code(32639, dtype_id::uint16, dtype_id::uint8) == 127);
  CHECK(quark::retype_code(32767, dtype_id::uint16, dtype_id::uint8) == 127);
  // Signed: int8 0 is 128 steps above -128: 128 * 257 - 32768 = 128; int16 0 -> int8:
  // 32768 / 257 - 128 = -0.498 -> 0.
  CHECK(quark::retype_code(0, dtype_id::int8, dtype_id::int16) == 128);
  CHECK(quark::retype_code(0, dtype_id::int16, dtype_id::int8) == 0);
  // Range ends map to range ends; uint8 -> int8 shifts by -128.
  CHECK(quark::retype_code(-128, dtype_id::int8, dtype_id::int16) == -32768);
  CHECK(quark::retype_code(127, dtype_id::int8, dtype_id::int16) == 32767);
  CHECK(quark::retype_code(200, dtype_id::uint8, dtype_id::int8) == 72);
  // Every span is 2^n - 1 (odd), so (z - min) * span_to / span_from never ends in exactly .5:
  // the rounding never meets a tie. uint8 -> int4 is z / 17 - 8: 8 / 17 = 0.47 -> -8, 9 / 17 =
  // 0.53 -> -7.
  CHECK(quark::retype_code(8, dtype_id::uint8, dtype_id::int4) == -8);
  CHECK(quark::retype_code(9, dtype_id::uint8, dtype_id::int4) == -7);
}

TEST_CASE("retype: non-integer types are rejected by name") {
  CHECK(error_id([] { (void)quark::retype_scale(1.0f, dtype_id::float16, dtype_id::int8); }) ==
        "quark.scale.not_integer_type");
}

TEST_CASE("retype: onto a small float type the range of the codes is kept") {
  // int8, s 0.75, z 0: codes -128..127 span [-96, 95.25]; absmax 96 over E4M3FN's 448 = 3 / 14.
  CHECK(quark::retype_scale_to_float(0.75f, 0, dtype_id::int8, dtype_id::float8_e4m3fn) ==
        static_cast<float>(3.0 / 14.0));
  // uint8, s 0.75, z 128: [(0 - 128) 0.75, (255 - 128) 0.75] = [-96, 95.25]; 96 / 57344 (E5M2).
  CHECK(quark::retype_scale_to_float(0.75f, 128, dtype_id::uint8, dtype_id::float8_e5m2) ==
        static_cast<float>(96.0 / 57344.0));
  // uint8, s 0.1, z 0: [0, 25.5]: the zero point of the float type is 0, so absmax 25.5.
  CHECK(quark::retype_scale_to_float(0.1f, 0, dtype_id::uint8, dtype_id::float8_e4m3fn) ==
        static_cast<float>(static_cast<double>(255 * 0.1f) / 448.0));
  // FP4 E2M1 (largest value 6): int8, s 0.75: absmax 96 -> 16; int16, s 2^-10: absmax 32 ->
  // 32 / 6 = 2^2.415, a power-of-two source, so 2^2.
  CHECK(quark::retype_scale_to_float(0.75f, 0, dtype_id::int8, dtype_id::float4_e2m1fn) == 16.0f);
  CHECK(quark::retype_scale_to_float(0x1p-10f, 0, dtype_id::int16, dtype_id::float4_e2m1fn) ==
        4.0f);
  // A power-of-two scale stays one: int8 s 2^-3 gives 16 / 448 = 2^-4.807 -> 2^-5; s 1 gives
  // 128 / 448 = 2^-1.807 -> 2^-2.
  CHECK(quark::retype_scale_to_float(0.125f, 0, dtype_id::int8, dtype_id::float8_e4m3fn) ==
        0x1p-5f);
  CHECK(quark::retype_scale_to_float(1.0f, 0, dtype_id::int8, dtype_id::float8_e4m3fn) == 0.25f);
  // Only integer sources and small float targets.
  CHECK(error_id([] {
          (void)quark::retype_scale_to_float(1.0f, 0, dtype_id::int8, dtype_id::int16);
        }) == "quark.scale.not_small_float_type");
  CHECK(error_id([] {
          (void)quark::retype_scale_to_float(1.0f, 0, dtype_id::int8, dtype_id::float16);
        }) == "quark.scale.not_small_float_type");
  CHECK(error_id([] {
          (void)quark::retype_scale_to_float(1.0f, 0, dtype_id::float8_e4m3fn,
                                             dtype_id::float8_e5m2);
        }) == "quark.scale.not_integer_type");
}

TEST_CASE("retype: the smallest scale that holds a magnitude") {
  CHECK(quark::holding_scale(254.0, dtype_id::int8) == 2.0);
  CHECK(quark::holding_scale(65535.0, dtype_id::uint16) == 1.0);
  // int32: 2^31 - 1 is not a float32; the largest float32 below it is 2^31 - 128.
  CHECK(quark::holding_scale(2147483520.0, dtype_id::int32) == 1.0);
  CHECK(quark::holding_scale(1.0, dtype_id::int32) == 1.0 / 2147483520.0);
  // The scale really holds: max_abs / s in float32 stays at or below qmax.
  const double s = quark::holding_scale(12345.678, dtype_id::int32);
  CHECK(static_cast<double>(12345.678f / static_cast<float>(s)) <= 2147483647.0);
}

TEST_CASE("retype: scales widened to hold their channel's values") {
  // Hand values, int8 (qmax 127): channel 0 {254, -3} needs 2, channel 1 {1, -0.5} needs 1/127,
  // channel 2 {-12.7, 0} needs 0.1 and already has 0.5.
  float s[] = {1.0f, 0.001f, 0.5f};
  const float v[] = {254.0f, -3.0f, 1.0f, -0.5f, -12.7f, 0.0f};
  CHECK(quark::widen_to_hold(s, v, dtype_id::int8) == 2);
  CHECK(s[0] == 2.0f);
  CHECK(s[1] == static_cast<float>(1.0 / 127.0));
  CHECK(s[2] == 0.5f);
  // One scale over all values (per tensor), NaN ignored; int32 holds up to 2^31 - 128.
  float one[] = {1e-9f};
  const float w[] = {3.0f, std::numeric_limits<float>::quiet_NaN(), -4.0f};
  CHECK(quark::widen_to_hold(one, w, dtype_id::int32) == 1);
  CHECK(one[0] == static_cast<float>(4.0 / 2147483520.0));
  // Values that do not split evenly into the channels, and non-integer types, are errors.
  CHECK(error_id([&] { quark::widen_to_hold(s, std::span<const float>(v, 5), dtype_id::int8); }) ==
        "quark.scale.size_mismatch");
  CHECK(error_id([&] { quark::widen_to_hold(s, v, dtype_id::float16); }) ==
        "quark.scale.not_integer_type");
}
