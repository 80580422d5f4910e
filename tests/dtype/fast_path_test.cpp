// SPDX-License-Identifier: MIT
// The branch-free round-to-nearest-even encoder (detail::encode_fp_rne, used by convert<> for RNE)
// must give the same bits as the generic bit-by-bit encoder (detail::encode_fp_generic, which
// tests/dtype/exhaustive_test.cpp checks against the slow reference). A full 2^32 sweep of every
// format and both overflow policies found 0 mismatches (run by hand, see docs/benchmarks.md);
// this test covers every float exponent, every combination of the top 10 mantissa bits and the
// low-bit patterns that decide ties (0, 1, half-1, half, half+1, all ones) for each format.
#include <cstdint>
#include <ios>

#include <doctest/doctest.h>

#include <quark/quark.hpp>

namespace {

template <quark::fp_format F, quark::conversion_policy P>
std::uint64_t count_mismatches() {
  constexpr int M = F.mantissa_bits;
  constexpr std::uint32_t tail_bits = 13;  // below the top 10 mantissa bits
  // Low patterns relative to the rounding position of this format (23 - M bits are dropped for
  // normal results; subnormal results drop more, covered by the full exponent sweep).
  constexpr std::uint32_t sh = 23u - static_cast<std::uint32_t>(M);
  const std::uint32_t half = 1u << (sh - 1u);
  const std::uint32_t lows[] = {
      0u, 1u, half - 1u, half, half + 1u, (1u << sh) - 1u, (1u << tail_bits) - 1u, 0x155u};
  std::uint64_t bad = 0;
  for (std::uint32_t sign = 0; sign < 2; ++sign) {
    for (std::uint32_t e = 0; e < 256; ++e) {
      for (std::uint32_t top = 0; top < 1024; ++top) {
        for (std::uint32_t low : lows) {
          const std::uint32_t mant =
              ((top << tail_bits) | (low & ((1u << tail_bits) - 1u))) | (low & 0x7FFFFFu);
          const std::uint32_t bits = (sign << 31) | (e << 23) | (mant & 0x7FFFFFu);
          const float x = quark::detail::bits_float(bits);
          const auto fast = quark::detail::encode_fp_rne<F, P>(x);
          const auto generic = quark::detail::encode_fp_generic<F, P>(x);
          if (fast != generic) {
            if (bad < 4) {
              MESSAGE("input bits 0x" << std::hex << bits << ": fast 0x" << fast << ", generic 0x"
                                      << generic);
            }
            ++bad;
          }
        }
      }
    }
  }
  return bad;
}

}  // namespace

TEST_CASE_TEMPLATE("branch-free RNE encoder equals the generic encoder", T, quark::float16,
                   quark::bfloat16, quark::float8_e4m3fn, quark::float8_e4m3fnuz,
                   quark::float8_e5m2, quark::float8_e5m2fnuz, quark::float6_e3m2fn,
                   quark::float6_e2m3fn, quark::float4_e2m1fn) {
  CHECK(count_mismatches<T::format, quark::policies::onnx_saturate>() == 0u);
  CHECK(count_mismatches<T::format, quark::policies::onnx_no_saturate>() == 0u);
}

TEST_CASE_TEMPLATE("fast decoders equal the generic decoder on every encoding", T, quark::float16,
                   quark::bfloat16, quark::float8_e4m3fn, quark::float8_e4m3fnuz,
                   quark::float8_e5m2, quark::float8_e5m2fnuz, quark::float6_e3m2fn,
                   quark::float6_e2m3fn, quark::float4_e2m1fn, quark::float8_e8m0fnu) {
  constexpr auto F = T::format;
  std::uint64_t bad = 0;
  for (std::uint32_t c = 0; c < (1u << F.total_bits()); ++c) {
    const auto v = T::from_bits(static_cast<typename T::storage_type>(c));
    const float fast = quark::to_float(v);
    const float slow = quark::detail::decode_fp<F>(c);
    const bool same = (fast != fast && slow != slow) ||
                      quark::detail::float_bits(fast) == quark::detail::float_bits(slow);
    if (!same)
      ++bad;
  }
  CHECK(bad == 0u);
}
