// SPDX-License-Identifier: MIT
// Helpers shared by the block-format tests: bitwise float comparison, a seeded RNG whose seed is
// printed (override with QUARK_TEST_SEED) and random tensors with a wide spread of magnitudes.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <ios>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <doctest/doctest.h>

namespace block_test {

inline std::uint32_t bits(float f) {
  return std::bit_cast<std::uint32_t>(f);
}

/// True when a and b have the same bits, or are both NaN.
inline bool same(float a, float b) {
  return bits(a) == bits(b) || (a != a && b != b);
}

/// Checks two spans bitwise (NaN equals NaN); reports the first mismatch.
inline void check_same(std::span<const float> got, std::span<const float> want,
                       const std::string& what = "") {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (!same(got[i], want[i])) {
      INFO(what << " index " << i << ": got " << got[i] << " (0x" << std::hex << bits(got[i])
                << ") want " << want[i] << " (0x" << bits(want[i]) << std::dec << ")");
      CHECK(same(got[i], want[i]));
      return;
    }
  }
}

inline void check_same(std::span<const float> got, std::initializer_list<float> want,
                       const std::string& what = "") {
  check_same(got, std::span<const float>(want.begin(), want.size()), what);
}

/// The test seed: QUARK_TEST_SEED or a fixed default; printed with every failure.
inline std::uint32_t seed() {
  const char* s = std::getenv("QUARK_TEST_SEED");
  return s != nullptr ? static_cast<std::uint32_t>(std::strtoul(s, nullptr, 10)) : 20261122u;
}

/// n floats: normal values times 2^k with k uniform in [lo, hi], some exact zeros.
inline std::vector<float> random_tensor(std::mt19937& rng, std::size_t n, int lo = -20,
                                        int hi = 20) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::uniform_int_distribution<int> e(lo, hi);
  std::uniform_int_distribution<int> z(0, 31);
  std::vector<float> v(n);
  for (auto& x : v) {
    x = z(rng) == 0 ? 0.0f : std::ldexp(d(rng), e(rng));
  }
  return v;
}

}  // namespace block_test
