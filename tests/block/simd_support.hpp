// SPDX-License-Identifier: MIT
// What the AVX-512-against-portable block kernel tests share (tests/block/simd*_test.cpp): seeded
// tensors that mix every case the kernels branch on, the rounding modes, and the OCP MX check. The
// tests are split over several files only so that their many kernel instantiations compile in
// parallel.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include <quark/block/bfp.hpp>
#include <quark/block/micro_exponent.hpp>
#include <quark/block/mx.hpp>

#include "block/block_support.hpp"

namespace simd_test {

using block_test::check_same;

/// n floats in blocks of `bs`: each block draws a magnitude class, then elements within it, with
/// specials and ties sprinkled in.
inline std::vector<float> mixed_tensor(std::mt19937& rng, std::size_t n, std::size_t bs) {
  std::uniform_int_distribution<int> cls(0, 9);
  std::uniform_int_distribution<int> pick(0, 63);
  std::uniform_int_distribution<int> spread(-12, 0);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (std::size_t b = 0; b < n; b += bs) {
    int top = 0;
    switch (cls(rng)) {
      case 0:
        top = 126;
        break;  // near FLT_MAX
      case 1:
        top = -120;
        break;  // near the float32 normal minimum
      case 2:
        top = -140;
        break;  // float32 subnormals only
      case 3:
        top = 100;
        break;
      case 4:
        top = -100;
        break;
      default:
        top = std::uniform_int_distribution<int>(-30, 30)(rng);
        break;
    }
    for (std::size_t i = b; i < b + bs && i < n; ++i) {
      const int p = pick(rng);
      float x = std::ldexp(d(rng), top + spread(rng));
      if (p == 0)
        x = 0.0f;
      if (p == 1)
        x = -0.0f;
      if (p == 2)
        x = std::numeric_limits<float>::infinity();
      if (p == 3)
        x = -std::numeric_limits<float>::infinity();
      if (p == 4)
        x = std::numeric_limits<float>::quiet_NaN();
      if (p == 5)
        x = std::numeric_limits<float>::denorm_min() * static_cast<float>(pick(rng) + 1);
      if (p >= 6 && p < 10)
        x = std::ldexp(static_cast<float>(2 * pick(rng) + 1), top - 8);  // ties
      v[i] = x;
    }
  }
  return v;
}

inline constexpr quark::rounding kModes[] = {
    quark::rounding::nearest_even,    quark::rounding::nearest_away,
    quark::rounding::nearest_up,      quark::rounding::toward_zero,
    quark::rounding::toward_positive, quark::rounding::toward_negative};

template <class Element>
void check_mx(const std::vector<float>& x, const std::string& name) {
  const quark::detail::block_layout l{1, x.size(), 1};
  std::vector<float> a(x.size()), b(x.size());
  for (const quark::rounding r : kModes) {
    for (const auto c : {quark::compat_mode::standard, quark::compat_mode::quark}) {
      for (const auto m : {quark::e8m0_scale_mode::floor, quark::e8m0_scale_mode::ceil,
                           quark::e8m0_scale_mode::even, quark::e8m0_scale_mode::rceil}) {
        quark::detail::dispatch_rounding(r, [&](auto rt) {
          constexpr quark::rounding R = decltype(rt)::value;
          if (c == quark::compat_mode::standard) {
            quark::detail::mx_fake_quantize_impl<Element, R, quark::compat_mode::standard, true>(
                x.data(), a.data(), l, 32, m);
            quark::detail::mx_fake_quantize_impl<Element, R, quark::compat_mode::standard, false>(
                x.data(), b.data(), l, 32, m);
          } else {
            quark::detail::mx_fake_quantize_impl<Element, R, quark::compat_mode::quark, true>(
                x.data(), a.data(), l, 32, m);
            quark::detail::mx_fake_quantize_impl<Element, R, quark::compat_mode::quark, false>(
                x.data(), b.data(), l, 32, m);
          }
        });
        check_same(a, b,
                   name + " rounding " + std::to_string(static_cast<int>(r)) + " compat " +
                       std::to_string(static_cast<int>(c)) + " scale mode " +
                       std::to_string(static_cast<int>(m)));
      }
    }
  }
}

/// Elements per test tensor: several chunks, and a partial last block for blocks of 32 and 16.
inline constexpr std::size_t kElements = 32 * 700 + 8 * 3;

/// The seeded generator of one test case (the seed is printed; QUARK_TEST_SEED overrides it).
inline std::mt19937 start(std::uint32_t seed) {
  if (!quark::detail::block_avx512_usable())
    MESSAGE("no AVX-512 on this CPU: both sides run the portable kernels");
  return std::mt19937(seed);
}

}  // namespace simd_test
