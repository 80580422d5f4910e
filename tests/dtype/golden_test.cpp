// SPDX-License-Identifier: MIT
// Tier 2 evidence: golden vectors from the specs, each citing its source.
//  [ONNX-Cast]   onnx/docs/Operators.md, Cast (opset 19+): the float8 conversion table for
//                saturate=1 (out of range and +-Inf -> +-max) and saturate=0 (-> NaN, or +-Inf for
//                E5M2); -0 -> +0 for the fnuz types.
//  [ONNX-QL]     onnx backend node tests for QuantizeLinear (test_quantizelinear_e4m3fn: 100000/2
//                -> 448; test_quantizelinear_e5m2: 50000 -> 49152; test_quantizelinear_float4e2m1:
//                1.25 -> 1, 4.3 -> 4, -10 -> -6).
//  [ONNX-FP4]    onnx/docs/docs/technical/float4.md: RNE inside +-6, clamp outside, +-Inf -> +-6,
//                NaN -> +6.
//  [ONNX-E8M0]   onnx/docs/Operators.md, Cast-25 to FLOAT8E8M0: round_mode up (default) / down /
//                nearest, saturate; below 2^-127 (incl. 0, negatives, -Inf) -> 2^-127 or NaN,
//                above 2^127 -> 2^127 or NaN, checked before rounding (as ONNX Runtime 1.30 does).
//  [OFP8]        OCP 8-bit Floating Point Specification rev 1.0, Table 1 (E4M3 max 448,
//                S.1111.111 NaN; E5M2 max 57344, IEEE specials).
//  [MX]          OCP Microscaling Formats v1.0 §5.3 (FP6/FP4 element encodings, no NaN/Inf).
//  [IEEE]        IEEE 754-2019 §4.3.1 (roundTiesToEven), §7.4 (overflow).
//  [ONNX-INT4]   onnx/docs/docs/technical/int4.md: two 4-bit values per byte, element 0 in the low
//                nibble, odd counts padded with zero; INT2/UINT2 (ONNX 1.20): four per byte,
//                element 0 in the lowest bits.
//  [ONNX-TYPES]  onnx/onnx.proto, TensorProto.DataType codes 1..26.
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include <doctest/doctest.h>

#include <quark/quark.hpp>

namespace {

using quark::conversion_policy;
using quark::nan_handling;
using quark::overflow;
using quark::rounding;
namespace pol = quark::policies;

constexpr float inf = std::numeric_limits<float>::infinity();
const float qnan = std::numeric_limits<float>::quiet_NaN();

template <class T, conversion_policy P>
unsigned bits(float x) {
  return static_cast<unsigned>(quark::convert<T, P>(x).to_bits());
}
template <class T, conversion_policy P>
float value(float x) {
  return quark::to_float(quark::convert<T, P>(x));
}

constexpr conversion_policy e8m0_up_nosat{rounding::toward_positive, overflow::to_special,
                                          nan_handling::propagate};
constexpr conversion_policy e8m0_down_nosat{rounding::toward_zero, overflow::to_special,
                                            nan_handling::propagate};
constexpr conversion_policy e8m0_nearest_nosat{rounding::nearest_away, overflow::to_special,
                                               nan_handling::propagate};

}  // namespace

TEST_CASE("float8 vectors from the ONNX QuantizeLinear tests and the Cast table") {
  using quark::float8_e4m3fn;
  using quark::float8_e4m3fnuz;
  using quark::float8_e5m2;
  using quark::float8_e5m2fnuz;
  // [ONNX-QL] test_quantizelinear_e4m3fn: x = [0, 1, 2, 100000, 200], scale 2.
  CHECK(value<float8_e4m3fn, pol::onnx_saturate>(0.0f) == 0.0f);
  CHECK(value<float8_e4m3fn, pol::onnx_saturate>(0.5f) == 0.5f);
  CHECK(value<float8_e4m3fn, pol::onnx_saturate>(1.0f) == 1.0f);
  CHECK(value<float8_e4m3fn, pol::onnx_saturate>(100000.0f / 2) == 448.0f);
  CHECK(value<float8_e4m3fn, pol::onnx_saturate>(100.0f) == 96.0f);
  CHECK(bits<float8_e4m3fn, pol::onnx_saturate>(100000.0f) == 0x7Eu);
  // [ONNX-Cast] saturate=0: out of range -> NaN (E4M3FN keeps the sign: S.1111.111).
  CHECK(bits<float8_e4m3fn, pol::onnx_no_saturate>(100000.0f) == 0x7Fu);
  CHECK(bits<float8_e4m3fn, pol::onnx_no_saturate>(-100000.0f) == 0xFFu);
  CHECK(bits<float8_e4m3fn, pol::onnx_no_saturate>(464.0f) == 0x7Eu);  // tie -> even 448
  CHECK(bits<float8_e4m3fn, pol::onnx_no_saturate>(465.0f) == 0x7Fu);
  // [ONNX-Cast] +-Inf: +-max with saturate, NaN without.
  CHECK(bits<float8_e4m3fn, pol::onnx_saturate>(inf) == 0x7Eu);
  CHECK(bits<float8_e4m3fn, pol::onnx_saturate>(-inf) == 0xFEu);
  CHECK(bits<float8_e4m3fn, pol::onnx_no_saturate>(inf) == 0x7Fu);
  CHECK(bits<float8_e4m3fn, pol::onnx_saturate>(qnan) == 0x7Fu);
  // [ONNX-QL] test_quantizelinear_e5m2: 50000 -> 49152.
  CHECK(value<float8_e5m2, pol::onnx_saturate>(50000.0f) == 49152.0f);
  CHECK(bits<float8_e5m2, pol::onnx_saturate>(1e6f) == 0x7Bu);         // 57344
  CHECK(bits<float8_e5m2, pol::onnx_no_saturate>(1e6f) == 0x7Cu);      // +Inf
  CHECK(bits<float8_e5m2, pol::onnx_no_saturate>(-1e6f) == 0xFCu);     // -Inf
  CHECK(bits<float8_e5m2, pol::onnx_no_saturate>(61440.0f) == 0x7Cu);  // tie past max -> Inf
  CHECK(bits<float8_e5m2, pol::onnx_saturate>(inf) == 0x7Bu);
  CHECK(bits<float8_e5m2, pol::onnx_no_saturate>(-inf) == 0xFCu);
  // fnuz: max 240 / 57344, the single NaN 0x80, no -0 [ONNX-Cast].
  CHECK(value<float8_e4m3fnuz, pol::onnx_saturate>(1000.0f) == 240.0f);
  CHECK(bits<float8_e4m3fnuz, pol::onnx_no_saturate>(248.0f) == 0x80u);
  CHECK(bits<float8_e4m3fnuz, pol::onnx_no_saturate>(-1000.0f) == 0x80u);
  CHECK(bits<float8_e4m3fnuz, pol::onnx_saturate>(-0.0f) == 0x00u);
  CHECK(bits<float8_e4m3fnuz, pol::onnx_saturate>(-0x1p-12f) == 0x00u);  // rounds to -0 -> +0
  CHECK(bits<float8_e5m2fnuz, pol::onnx_saturate>(-0.0f) == 0x00u);
  CHECK(bits<float8_e5m2fnuz, pol::onnx_saturate>(qnan) == 0x80u);
  CHECK(bits<float8_e5m2fnuz, pol::onnx_saturate>(-qnan) == 0x80u);
  CHECK(bits<float8_e4m3fn, pol::onnx_saturate>(-0.0f) == 0x80u);  // E4M3FN keeps -0
  CHECK(bits<float8_e5m2, pol::onnx_saturate>(-0.0f) == 0x80u);
  // Decoding [OFP8]: max, min subnormal, NaN patterns.
  CHECK(quark::to_float(float8_e4m3fn::from_bits(0x7E)) == 448.0f);
  CHECK(quark::to_float(float8_e4m3fn::from_bits(0x01)) == 0x1p-9f);
  CHECK(quark::to_float(float8_e5m2::from_bits(0x7B)) == 57344.0f);
  CHECK(quark::to_float(float8_e5m2::from_bits(0x01)) == 0x1p-16f);
  CHECK(std::isinf(quark::to_float(float8_e5m2::from_bits(0x7C))));
  CHECK(std::isnan(quark::to_float(float8_e4m3fn::from_bits(0x7F))));
  CHECK(std::isnan(quark::to_float(float8_e4m3fnuz::from_bits(0x80))));
}

TEST_CASE("ties exactly halfway round to even [IEEE]") {
  using quark::float8_e4m3fn;
  // E4M3 near 16: spacing 2; 17 is the tie between 16 (m=000) and 18 (m=001) -> 16;
  // 19 between 18 (odd) and 20 (even) -> 20.
  CHECK(value<float8_e4m3fn, pol::onnx_saturate>(17.0f) == 16.0f);
  CHECK(value<float8_e4m3fn, pol::onnx_saturate>(19.0f) == 20.0f);
  CHECK(value<float8_e4m3fn, pol::onnx_saturate>(-17.0f) == -16.0f);
  // Subnormal tie: 2^-10 lies halfway between 0 and 2^-9 -> 0; 3 * 2^-10 -> 2 * 2^-9.
  CHECK(bits<float8_e4m3fn, pol::onnx_saturate>(0x1p-10f) == 0x00u);
  CHECK(bits<float8_e4m3fn, pol::onnx_saturate>(-0x1p-10f) == 0x80u);
  CHECK(bits<float8_e4m3fn, pol::onnx_saturate>(0x3p-10f) == 0x02u);
  // float16: 1 + 2^-11 -> 1; 1 + 3 * 2^-11 -> 1 + 2^-9; 65520 (max + half ulp) -> Inf.
  CHECK(bits<quark::float16, pol::ieee>(1.0f + 0x1p-11f) == 0x3C00u);
  CHECK(bits<quark::float16, pol::ieee>(1.0f + 0x3p-11f) == 0x3C02u);
  CHECK(bits<quark::float16, pol::ieee>(65520.0f) == 0x7C00u);
  CHECK(bits<quark::float16, pol::ieee>(65519.996f) == 0x7BFFu);
  // bfloat16: 1 + 2^-8 -> 1; 1 + 3 * 2^-8 -> 1 + 2^-6.
  CHECK(bits<quark::bfloat16, pol::ieee>(1.0f + 0x1p-8f) == 0x3F80u);
  CHECK(bits<quark::bfloat16, pol::ieee>(1.0f + 0x3p-8f) == 0x3F82u);
  // The other nearest modes on the same tie (17 in E4M3): away -> 18, up -> 18 / -16.
  constexpr conversion_policy away{rounding::nearest_away, overflow::saturate,
                                   nan_handling::propagate};
  constexpr conversion_policy up{rounding::nearest_up, overflow::saturate, nan_handling::propagate};
  CHECK(value<float8_e4m3fn, away>(17.0f) == 18.0f);
  CHECK(value<float8_e4m3fn, away>(-17.0f) == -18.0f);
  CHECK(value<float8_e4m3fn, up>(17.0f) == 18.0f);
  CHECK(value<float8_e4m3fn, up>(-17.0f) == -16.0f);
  // Integers: ONNX QuantizeLinear rounds half to even.
  CHECK(quark::convert<std::int8_t>(2.5f) == 2);
  CHECK(quark::convert<std::int8_t>(3.5f) == 4);
  CHECK(quark::convert<std::int8_t>(-2.5f) == -2);
  CHECK(quark::convert<quark::int4>(7.5f).value() == 7);  // saturates
  CHECK(quark::convert<quark::int4>(-8.5f).value() == -8);
  CHECK(quark::convert<quark::uint4>(-1.0f).value() == 0);
}

TEST_CASE("float4 e2m1 vectors [ONNX-QL] [ONNX-FP4] [MX]") {
  using quark::float4_e2m1fn;
  CHECK(value<float4_e2m1fn, pol::onnx_saturate>(1.25f) == 1.0f);  // tie -> even (m=0)
  CHECK(value<float4_e2m1fn, pol::onnx_saturate>(4.3f) == 4.0f);
  CHECK(value<float4_e2m1fn, pol::onnx_saturate>(-10.0f) == -6.0f);
  CHECK(bits<float4_e2m1fn, pol::onnx_saturate>(qnan) == 0x7u);   // NaN -> +6
  CHECK(bits<float4_e2m1fn, pol::onnx_saturate>(-qnan) == 0x7u);  // also +6
  CHECK(bits<float4_e2m1fn, pol::onnx_saturate>(inf) == 0x7u);
  CHECK(bits<float4_e2m1fn, pol::onnx_saturate>(-inf) == 0xFu);
  CHECK(bits<float4_e2m1fn, pol::onnx_no_saturate>(inf) == 0x7u);  // no Inf/NaN: still max
  // More ties: 0.25 -> 0, 0.75 -> 1, 1.75 -> 2, 2.5 -> 2, 3.5 -> 4, 5 -> 4.
  CHECK(value<float4_e2m1fn, pol::onnx_saturate>(0.25f) == 0.0f);
  CHECK(value<float4_e2m1fn, pol::onnx_saturate>(0.75f) == 1.0f);
  CHECK(value<float4_e2m1fn, pol::onnx_saturate>(1.75f) == 2.0f);
  CHECK(value<float4_e2m1fn, pol::onnx_saturate>(2.5f) == 2.0f);
  CHECK(value<float4_e2m1fn, pol::onnx_saturate>(3.5f) == 4.0f);
  CHECK(value<float4_e2m1fn, pol::onnx_saturate>(5.0f) == 4.0f);
  CHECK(value<float4_e2m1fn, pol::onnx_saturate>(7.0f) == 6.0f);  // past max: clamp
  // [MX] Table: every E2M1 magnitude code.
  constexpr float mags[] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  for (unsigned c = 0; c < 8; ++c) {
    CHECK(quark::to_float(float4_e2m1fn::from_bits(static_cast<std::uint8_t>(c))) == mags[c]);
    CHECK(quark::to_float(float4_e2m1fn::from_bits(static_cast<std::uint8_t>(c | 8u))) == -mags[c]);
  }
  // FP6 maxima [MX]: E3M2 28 (0x1F), E2M3 7.5 (0x1F).
  CHECK(bits<quark::float6_e3m2fn, pol::ocp_mx_element>(100.0f) == 0x1Fu);
  CHECK(bits<quark::float6_e2m3fn, pol::ocp_mx_element>(-100.0f) == 0x3Fu);
  CHECK(value<quark::float6_e2m3fn, pol::ocp_mx_element>(0.125f) == 0.125f);  // min subnormal
}

TEST_CASE("E8M0 round_mode up/down/nearest with saturate on and off [ONNX-E8M0]") {
  using quark::float8_e8m0fnu;
  using T = float8_e8m0fnu;
  // Exact powers of two in every mode.
  CHECK(bits<T, pol::onnx_e8m0_up>(1.0f) == 127u);
  CHECK(bits<T, pol::onnx_e8m0_down>(1.0f) == 127u);
  CHECK(bits<T, pol::onnx_e8m0_nearest>(1.0f) == 127u);
  CHECK(bits<T, pol::onnx_e8m0_up>(0x1p127f) == 254u);
  CHECK(bits<T, pol::onnx_e8m0_up>(0x1p-127f) == 0u);
  // Between powers: up -> next, down -> previous, nearest -> linear midpoint, ties up.
  CHECK(bits<T, pol::onnx_e8m0_up>(1.5f) == 128u);
  CHECK(bits<T, pol::onnx_e8m0_down>(1.5f) == 127u);
  CHECK(bits<T, pol::onnx_e8m0_nearest>(1.5f) == 128u);
  CHECK(bits<T, pol::onnx_e8m0_nearest>(1.49f) == 127u);
  CHECK(bits<T, pol::onnx_e8m0_nearest>(3.0f) == 129u);  // tie between 2 and 4 -> 4
  CHECK(bits<T, pol::onnx_e8m0_down>(3.0f) == 128u);
  CHECK(bits<T, pol::onnx_e8m0_up>(1.0000001f) == 128u);
  // Float32 subnormal inputs inside the E8M0 range.
  CHECK(bits<T, pol::onnx_e8m0_nearest>(1.25f * 0x1p-127f) == 0u);
  CHECK(bits<T, pol::onnx_e8m0_up>(1.25f * 0x1p-127f) == 1u);
  CHECK(bits<T, pol::onnx_e8m0_down>(1.75f * 0x1p-127f) == 0u);
  // Below the range (zero, negatives, -Inf, 2^-128): 2^-127 with saturate, NaN without, in
  // every mode (the range check precedes rounding).
  for (const float x : {0.0f, -0.0f, -1.0f, -inf, 0x1p-128f, 0x1p-149f}) {
    CHECK(bits<T, pol::onnx_e8m0_up>(x) == 0u);
    CHECK(bits<T, pol::onnx_e8m0_down>(x) == 0u);
    CHECK(bits<T, pol::onnx_e8m0_nearest>(x) == 0u);
    CHECK(bits<T, e8m0_up_nosat>(x) == 0xFFu);
    CHECK(bits<T, e8m0_down_nosat>(x) == 0xFFu);
    CHECK(bits<T, e8m0_nearest_nosat>(x) == 0xFFu);
  }
  // Above the range (1.5 * 2^127, FLT_MAX, +Inf): 2^127 with saturate, NaN without, even "down".
  for (const float x : {0x1.8p127f, std::numeric_limits<float>::max(), inf}) {
    CHECK(bits<T, pol::onnx_e8m0_up>(x) == 254u);
    CHECK(bits<T, pol::onnx_e8m0_down>(x) == 254u);
    CHECK(bits<T, pol::onnx_e8m0_nearest>(x) == 254u);
    CHECK(bits<T, e8m0_up_nosat>(x) == 0xFFu);
    CHECK(bits<T, e8m0_down_nosat>(x) == 0xFFu);
    CHECK(bits<T, e8m0_nearest_nosat>(x) == 0xFFu);
  }
  // NaN -> NaN (0xFF) always.
  CHECK(bits<T, pol::onnx_e8m0_up>(qnan) == 0xFFu);
  CHECK(bits<T, e8m0_nearest_nosat>(-qnan) == 0xFFu);
  // Decoding: 0 -> 2^-127, 254 -> 2^127, 255 -> NaN.
  CHECK(quark::to_float(T::from_bits(0)) == 0x1p-127f);
  CHECK(quark::to_float(T::from_bits(254)) == 0x1p127f);
  CHECK(std::isnan(quark::to_float(T::from_bits(255))));
}

namespace {

template <class T>
std::vector<std::uint8_t> packed(const std::vector<T>& v) {
  std::vector<std::uint8_t> out(quark::packed_size(v.size(), quark::dtype_traits<T>::bits), 0xAA);
  quark::pack(std::span<const T>(v), std::span<std::uint8_t>(out));
  return out;
}

template <class T>
std::vector<T> unpacked(const std::vector<std::uint8_t>& bytes, std::size_t n) {
  std::vector<T> v(n);
  quark::unpack(std::span<const std::uint8_t>(bytes), std::span<T>(v));
  return v;
}

template <class T>
std::vector<T> ints(std::initializer_list<int> xs) {
  std::vector<T> v;
  for (const int x : xs)
    v.push_back(T(x));
  return v;
}

template <class T>
std::vector<T> floats(std::initializer_list<float> xs) {
  std::vector<T> v;
  for (const float x : xs)
    v.push_back(quark::convert<T, pol::ocp_mx_element>(x));
  return v;
}

template <class T>
bool same_codes(const std::vector<T>& a, const std::vector<T>& b) {
  if (a.size() != b.size())
    return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i].to_bits() != b[i].to_bits())
      return false;
  }
  return true;
}

using bytes = std::vector<std::uint8_t>;

}  // namespace

TEST_CASE("pack / unpack in ONNX order with hand-derived bytes [ONNX-INT4]") {
  // int4 {1, -1, 7}: codes 0x1, 0xF, 0x7 -> byte0 = F|1 = 0xF1, byte1 = 0x07 (padding 0).
  const auto i4 = ints<quark::int4>({1, -1, 7});
  CHECK(packed(i4) == bytes{0xF1, 0x07});
  CHECK(same_codes(unpacked<quark::int4>(bytes{0xF1, 0x07}, 3), i4));
  // int4 {-8, 7, 0, -1}: 0x8, 0x7, 0x0, 0xF -> 0x78, 0xF0.
  const auto i4b = ints<quark::int4>({-8, 7, 0, -1});
  CHECK(packed(i4b) == bytes{0x78, 0xF0});
  CHECK(unpacked<quark::int4>(bytes{0x78, 0xF0}, 4)[0].value() == -8);
  // uint4 {1, 2, 15} -> 0x21, 0x0F.
  const auto u4 = ints<quark::uint4>({1, 2, 15});
  CHECK(packed(u4) == bytes{0x21, 0x0F});
  CHECK(same_codes(unpacked<quark::uint4>(bytes{0x21, 0x0F}, 3), u4));
  // int2 {1, -1, -2, 0}: codes 01, 11, 10, 00 from the low bits up -> 0b00'10'11'01 = 0x2D.
  const auto i2 = ints<quark::int2>({1, -1, -2, 0});
  CHECK(packed(i2) == bytes{0x2D});
  CHECK(same_codes(unpacked<quark::int2>(bytes{0x2D}, 4), i2));
  // uint2 {3, 0, 1, 2, 3}: 0b10'01'00'11 = 0x93, then 0x03.
  const auto u2 = ints<quark::uint2>({3, 0, 1, 2, 3});
  CHECK(packed(u2) == bytes{0x93, 0x03});
  CHECK(same_codes(unpacked<quark::uint2>(bytes{0x93, 0x03}, 5), u2));
  // int3 {1, -1, 3, -4, 0, 2, -2, -3}: codes 001 111 011 100 000 010 110 101 in a little-endian
  // bit stream (element i at bits 3i..3i+2): bits 0,3,4,5,6,7 | 11 | 16,19,20,21,23
  // -> 0xF9, 0x08, 0xB9.
  const auto i3 = ints<quark::int3>({1, -1, 3, -4, 0, 2, -2, -3});
  CHECK(packed(i3) == bytes{0xF9, 0x08, 0xB9});
  CHECK(same_codes(unpacked<quark::int3>(bytes{0xF9, 0x08, 0xB9}, 8), i3));
  // fp4 e2m1 {1.0, -0.5, 6.0}: codes 0x2, 0x9, 0x7 -> 0x92, 0x07.
  const auto f4 = floats<quark::float4_e2m1fn>({1.0f, -0.5f, 6.0f});
  CHECK(packed(f4) == bytes{0x92, 0x07});
  CHECK(same_codes(unpacked<quark::float4_e2m1fn>(bytes{0x92, 0x07}, 3), f4));
  // fp6 e2m3 {1.0, -7.5, 0.125, 2.0}: codes 0x08, 0x3F, 0x01, 0x10 at bits 0, 6, 12, 18:
  // bits 3,6,7 | 8..12 | 22 -> 0xC8, 0x1F, 0x40.
  const auto f6 = floats<quark::float6_e2m3fn>({1.0f, -7.5f, 0.125f, 2.0f});
  CHECK(packed(f6) == bytes{0xC8, 0x1F, 0x40});
  CHECK(same_codes(unpacked<quark::float6_e2m3fn>(bytes{0xC8, 0x1F, 0x40}, 4), f6));
  // The code-level helpers agree.
  const bytes codes = {0x1, 0xF, 0x7};
  bytes out(2, 0xAA);
  quark::pack_codes(codes, 4, out);
  CHECK(out == bytes{0xF1, 0x07});
  bytes back(3);
  quark::unpack_codes(out, 4, back);
  CHECK(back == codes);
  CHECK(quark::packed_size(3, 4) == 2u);
  CHECK(quark::packed_size(8, 3) == 3u);
  CHECK(quark::packed_size(5, 2) == 2u);
}

TEST_CASE("dtype_from_onnx and visit_dtype for ONNX codes 1..26 [ONNX-TYPES]") {
  struct row {
    int code;
    std::string_view name;
    int bits;  // 0: visit_dtype must throw (string, complex)
  };
  constexpr row table[] = {{1, "float32", 32},       {2, "uint8", 8},
                           {3, "int8", 8},           {4, "uint16", 16},
                           {5, "int16", 16},         {6, "int32", 32},
                           {7, "int64", 64},         {8, "string", 0},
                           {9, "bool", 8},           {10, "float16", 16},
                           {11, "float64", 64},      {12, "uint32", 32},
                           {13, "uint64", 64},       {14, "complex64", 0},
                           {15, "complex128", 0},    {16, "bfloat16", 16},
                           {17, "float8_e4m3fn", 8}, {18, "float8_e4m3fnuz", 8},
                           {19, "float8_e5m2", 8},   {20, "float8_e5m2fnuz", 8},
                           {21, "uint4", 4},         {22, "int4", 4},
                           {23, "float4_e2m1fn", 4}, {24, "float8_e8m0fnu", 8},
                           {25, "uint2", 2},         {26, "int2", 2}};
  for (const auto& r : table) {
    CAPTURE(r.code);
    const auto id = quark::dtype_from_onnx(r.code);
    REQUIRE(id.has_value());
    CHECK(quark::dtype_name(*id) == r.name);
    CHECK(quark::onnx_code(*id) == std::optional<std::int32_t>(r.code));
    if (r.bits == 0) {
      CHECK_THROWS_AS(quark::visit_dtype(*id, [](auto) { return 0; }), quark::invalid_argument);
    } else {
      const int b = quark::visit_dtype(
          *id, [](auto t) { return quark::dtype_traits<typename decltype(t)::type>::bits; });
      CHECK(b == r.bits);
      const std::string_view n = quark::visit_dtype(
          *id, [](auto t) { return quark::dtype_traits<typename decltype(t)::type>::name; });
      CHECK(n == r.name);
    }
  }
  for (const int bad : {0, 27, -1, 1001})
    CHECK_FALSE(quark::dtype_from_onnx(bad).has_value());
  CHECK_FALSE(quark::onnx_code(quark::dtype_id::int3).has_value());
  CHECK_FALSE(quark::onnx_code(quark::dtype_id::float6_e2m3fn).has_value());
  CHECK(quark::dtype_from_name("FLOAT8E4M3FN") == quark::dtype_id::float8_e4m3fn);
  CHECK(quark::dtype_from_name("float8_e8m0fnu") == quark::dtype_id::float8_e8m0fnu);
  CHECK_THROWS_AS(quark::visit_dtype(quark::dtype_id::undefined, [](auto) { return 0; }),
                  quark::invalid_argument);
}
