// SPDX-License-Identifier: MIT
// The span overloads of convert / to_float take SIMD bulk paths (bfloat16 / float16 encoders for
// every round-to-nearest-even policy, detail/simd_encode16.hpp; F16C decode) and switch to
// streaming stores for outputs of 8 MiB and more (detail/stream.hpp). Every path must give exactly
// the scalar results (the scalar encoder is checked against a slow reference and ONNX Runtime
// elsewhere), including all special values, ties, subnormals, misaligned input and output
// pointers and lengths that are not a multiple of the vector width or the block.
//
// This file is built twice (tests/CMakeLists.txt): dtype_bulk_test with -march=native (AVX-512
// on the benchmark host) and dtype_bulk_avx2_test with AVX-512 disabled (the AVX2/F16C path);
// every other test executable is built for the baseline ISA, where span convert is scalar.
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include <quark/quark.hpp>

namespace {

using quark::detail::bits_float;
using quark::detail::float_bits;

std::string hex(std::uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

std::vector<float> random_floats(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<float> x(n);
  for (auto& v : x)
    v = bits_float(static_cast<std::uint32_t>(rng()));
  return x;
}

/// Special values and the inputs around every rounding decision of bfloat16 and float16: both
/// signs of zero, subnormals, extremes, infinities, NaNs with several payloads, exact ties (even
/// and odd kept part) and their neighbours, and the overflow thresholds.
std::vector<float> edge_floats() {
  std::vector<std::uint32_t> mags = {
      0x00000000u, 0x00000001u, 0x00007FFFu, 0x00008000u, 0x00008001u, 0x00018000u, 0x007FFFFFu,
      0x00800000u, 0x00808000u, 0x00818000u, 0x3F800000u, 0x3F808000u, 0x3F818000u, 0x3F80FFFFu,
      0x7F7F7FFFu, 0x7F7F8000u, 0x7F7FFFFFu, 0x7F800000u, 0x7F800001u, 0x7F80FFFFu, 0x7FBFFFFFu,
      0x7FC00000u, 0x7FC00001u, 0x7FFFFFFFu, 0x7FE00000u, 0x7F801000u};
  // float16: max 65504, overflow threshold 65520 (a tie that rounds to Inf), subnormal quantum
  // 2^-24 and its ties, smallest normal 2^-14.
  for (float f : {65504.0f, 65519.996f, 65520.0f, 65536.0f, 0x1p-24f, 0x1p-25f, 0x3p-25f, 0x5p-25f,
                  0x1p-26f, 0x1p-14f, 0x1.ffcp-15f, 0x1.ffep-15f, 0x1.002p-14f, 1.00048828125f,
                  1.00146484375f, 2049.0f, 2051.0f}) {
    const std::uint32_t b = float_bits(f);
    for (std::uint32_t d : {0u, 1u, 0xFFFFFFFFu})
      mags.push_back(b + d);
  }
  std::vector<float> out;
  for (std::uint32_t m : mags) {
    out.push_back(bits_float(m));
    out.push_back(bits_float(m | 0x80000000u));
  }
  return out;
}

/// Every float exponent and sign with every top-10 mantissa pattern and the low patterns that
/// decide the rounding of both formats (4 Mi values), then edge values and random bit patterns.
std::vector<float> test_inputs(std::size_t total) {
  std::vector<float> x;
  x.reserve(total);
  const std::uint32_t lows[] = {0u, 1u, 0xFFFu, 0x1000u, 0x1001u, 0x1FFFu, 0x7FFFu, 0x8000u};
  for (std::uint32_t sign = 0; sign < 2; ++sign) {
    for (std::uint32_t e = 0; e < 256; ++e) {
      for (std::uint32_t top = 0; top < 1024; ++top) {
        for (std::uint32_t low : lows) {
          const std::uint32_t mant = ((top << 13) ^ low) & 0x7FFFFFu;
          x.push_back(bits_float((sign << 31) | (e << 23) | mant));
        }
      }
    }
  }
  for (float f : edge_floats())
    x.push_back(f);
  const auto r = random_floats(total > x.size() ? total - x.size() : 0, 99u);
  x.insert(x.end(), r.begin(), r.end());
  return x;
}

/// The bit pattern type of T (what to_bits() returns).
template <class T>
using code_t = decltype(T{}.to_bits());

/// The scalar converter's encoding of every element of x: the reference of check_encode's passes.
template <class T, quark::conversion_policy P>
std::vector<code_t<T>> scalar_encodings(const std::vector<float>& x) {
  std::vector<code_t<T>> want(x.size());
  for (std::size_t i = 0; i < x.size(); ++i)
    want[i] = quark::convert<T, P>(x[i]).to_bits();
  return want;
}

/// Converts x[in_off, in_off + n) into out[out_off, ...) with the span overload and compares
/// every element with the scalar converter's encoding (want, as scalar_encodings gives it);
/// returns the number of mismatches.
template <class T, quark::conversion_policy P>
std::size_t bulk_mismatches(const std::vector<float>& x, const std::vector<code_t<T>>& want,
                            std::size_t n, std::size_t in_off, std::size_t out_off) {
  std::vector<T> out(n + out_off);
  quark::convert<T, P>(std::span<const float>(x).subspan(in_off, n),
                       std::span<T>(out).subspan(out_off, n));
  std::size_t bad = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const code_t<T> got = out[out_off + i].to_bits();
    if (got != want[in_off + i]) {
      if (bad < 4) {
        MESSAGE("input " << hex(float_bits(x[in_off + i])) << ": bulk " << hex(got) << ", scalar "
                         << hex(want[in_off + i]));
      }
      ++bad;
    }
  }
  return bad;
}

template <class T, quark::conversion_policy P>
void check_encode(const std::vector<float>& x) {
  // Each input is encoded once by the scalar converter; the bulk passes below compare with that.
  const std::vector<code_t<T>> want = scalar_encodings<T, P>(x);
  const auto mismatches = [&](std::size_t n, std::size_t in_off, std::size_t out_off) {
    return bulk_mismatches<T, P>(x, want, n, in_off, out_off);
  };
  // 4 Mi + edges + random: > 8 MiB of 16-bit output (and > 4 MiB of 8-bit output), so the
  // streamed path with prefetch runs for the 16-bit formats.
  const std::size_t big = x.size() - 8;
  CHECK(mismatches(big, 0, 0) == 0u);
  CHECK(mismatches(big, 1, 3) == 0u);  // misaligned input, odd output head
  CHECK(mismatches(big - 5, 7, 1) == 0u);
  // Cached path: the edge values and the start of the sweep, lengths around the vector width.
  const std::size_t edges_at = std::size_t{1} << 22;
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{15}, std::size_t{31},
                        std::size_t{33}, std::size_t{64}, std::size_t{1000}}) {
    CHECK(mismatches(n, edges_at, 0) == 0u);
    CHECK(mismatches(n, edges_at + 1, 5) == 0u);
  }
  CHECK(mismatches(300000, 0, 1) == 0u);
  CHECK(mismatches(x.size() - edges_at, edges_at, 2) == 0u);
}

inline constexpr quark::conversion_policy saturate_nan_zero{
    quark::rounding::nearest_even, quark::overflow::saturate, quark::nan_handling::to_zero};
inline constexpr quark::conversion_policy special_nan_zero{
    quark::rounding::nearest_even, quark::overflow::to_special, quark::nan_handling::to_zero};

template <class T, quark::conversion_policy P>
void check_bulk(std::size_t n, std::size_t offset) {
  const auto x = random_floats(n + offset, 1234u);
  CHECK(bulk_mismatches<T, P>(x, scalar_encodings<T, P>(x), n, offset, offset) == 0u);
  std::vector<T> out(n);
  quark::convert<T, P>(std::span<const float>(x).subspan(offset), std::span<T>(out));
  std::vector<float> back(n + offset);
  quark::to_float(std::span<const T>(out), std::span<float>(back).subspan(offset));
  std::size_t bad = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const float a = back[offset + i];
    const float b = quark::to_float(out[i]);
    bad += (float_bits(a) != float_bits(b)) ? 1u : 0u;
  }
  CHECK(bad == 0u);
}

}  // namespace

TEST_CASE("the SIMD encoders compiled in are the expected ones") {
  MESSAGE("QUARK_SIMD_ENCODE16 = " << QUARK_SIMD_ENCODE16);
#ifdef QUARK_TEST_NO_AVX512
  CHECK(QUARK_SIMD_ENCODE16 != 512);
#endif
#if QUARK_SIMD_ENCODE16 != 0
  CHECK(quark::detail::has_simd_encode16<quark::formats::bfloat16, quark::policies::ieee>);
  CHECK(quark::detail::has_simd_encode16<quark::formats::bfloat16, saturate_nan_zero>);
#endif
#if QUARK_SIMD_ENCODE16 == 512
  CHECK(quark::detail::has_simd_encode8<quark::formats::float8_e4m3fn,
                                        quark::policies::onnx_saturate>);
  CHECK(quark::detail::has_simd_encode8<quark::formats::float4_e2m1fn, special_nan_zero>);
#endif
  CHECK_FALSE(
      quark::detail::has_simd_encode8<quark::formats::float8_e8m0fnu,
                                      quark::conversion_policy{quark::rounding::stochastic}>);
  CHECK_FALSE(
      quark::detail::has_simd_encode16<quark::formats::bfloat16,
                                       quark::conversion_policy{quark::rounding::toward_zero}>);
  CHECK_FALSE(quark::detail::has_simd_encode16<quark::formats::float8_e4m3fn,
                                               quark::policies::onnx_saturate>);
}

TEST_CASE("bulk bfloat16 encode equals the scalar encoder under every nearest-even policy") {
  const auto x = test_inputs((std::size_t{9} << 19) + 37);
  check_encode<quark::bfloat16, quark::policies::ieee>(x);
  check_encode<quark::bfloat16, quark::policies::onnx_saturate>(x);
  check_encode<quark::bfloat16, saturate_nan_zero>(x);
  check_encode<quark::bfloat16, special_nan_zero>(x);
}

TEST_CASE("bulk float16 encode equals the scalar encoder under every nearest-even policy") {
  const auto x = test_inputs((std::size_t{9} << 19) + 37);
  check_encode<quark::float16, quark::policies::ieee>(x);
  check_encode<quark::float16, quark::policies::onnx_saturate>(x);
  check_encode<quark::float16, saturate_nan_zero>(x);
  check_encode<quark::float16, special_nan_zero>(x);
}

TEST_CASE_TEMPLATE("bulk narrow minifloat encode equals the scalar encoder", T,
                   quark::float8_e4m3fn, quark::float8_e4m3fnuz, quark::float8_e5m2,
                   quark::float8_e5m2fnuz, quark::float6_e3m2fn, quark::float6_e2m3fn,
                   quark::float4_e2m1fn) {
  MESSAGE("AVX-512 narrow encoder: "
          << quark::detail::has_simd_encode8<T::format, quark::policies::onnx_saturate>);
  const auto x = test_inputs((std::size_t{9} << 20) + 37);  // > 8 MiB of output: streamed
  check_encode<T, quark::policies::onnx_saturate>(x);
  check_encode<T, quark::policies::onnx_no_saturate>(x);
  check_encode<T, saturate_nan_zero>(x);
  check_encode<T, special_nan_zero>(x);
}

TEST_CASE("bulk float8_e8m0fnu encode equals the scalar encoder under every ONNX round mode") {
  using quark::rounding;
  using T = quark::float8_e8m0fnu;
  MESSAGE("AVX-512 E8M0 encoder: "
          << quark::detail::has_simd_encode8<T::format, quark::policies::onnx_e8m0_up>);
  const auto x = test_inputs((std::size_t{9} << 20) + 37);
  check_encode<T, quark::policies::onnx_e8m0_up>(x);
  check_encode<T, quark::policies::onnx_e8m0_down>(x);
  check_encode<T, quark::policies::onnx_e8m0_nearest>(x);
  constexpr auto no_sat = quark::overflow::to_special;
  check_encode<T, quark::conversion_policy{rounding::toward_positive, no_sat}>(x);
  check_encode<T, quark::conversion_policy{rounding::toward_zero, no_sat}>(x);
  check_encode<T, quark::conversion_policy{rounding::nearest_away, no_sat}>(x);
  check_encode<T, quark::conversion_policy{rounding::nearest_even, no_sat}>(x);
  check_encode<T, quark::conversion_policy{rounding::nearest_up, quark::overflow::saturate,
                                           quark::nan_handling::to_zero}>(x);
  check_encode<T, quark::conversion_policy{rounding::toward_negative}>(x);
}

TEST_CASE("bulk conversion equals scalar conversion, streamed and cached paths") {
  // 5 Mi + 13 elements: 10 MiB of 16-bit output (streamed), 20 MiB of float (streamed back).
  const std::size_t big = (std::size_t{5} << 20) + 13;
  check_bulk<quark::bfloat16, quark::policies::ieee>(big, 1);
  check_bulk<quark::float16, quark::policies::ieee>(big, 3);
  // Directed rounding has no SIMD encoder: the scalar loop, streamed.
  check_bulk<quark::bfloat16, quark::conversion_policy{quark::rounding::toward_zero}>(big, 2);
  // 9 Mi + 5 one-byte elements: streamed; and a small array: cached stores.
  check_bulk<quark::float8_e4m3fn, quark::policies::onnx_saturate>((std::size_t{9} << 20) + 5, 7);
  check_bulk<quark::float8_e5m2, quark::policies::onnx_no_saturate>(1000, 0);
}

TEST_CASE("bulk float16 decode equals the scalar decoder on every encoding") {
  std::vector<quark::float16> all(65536);
  for (std::uint32_t c = 0; c < 65536; ++c) {
    all[c] = quark::float16::from_bits(static_cast<std::uint16_t>(c));
  }
  std::vector<float> out(all.size());
  quark::to_float(std::span<const quark::float16>(all), std::span<float>(out));
  std::size_t bad = 0;
  for (std::uint32_t c = 0; c < 65536; ++c) {
    bad += float_bits(out[c]) != float_bits(quark::to_float(all[c])) ? 1u : 0u;
  }
  CHECK(bad == 0u);
}
