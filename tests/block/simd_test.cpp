// SPDX-License-Identifier: MIT
// The AVX-512 chunk kernels (block/detail/block_avx512.hpp) against the portable chunk kernels,
// bit for bit, over seeded tensors that mix every case the kernels branch on: zeros, float32
// subnormals, Inf and NaN, blocks near the top and bottom of the float32 range, ties, and block
// maxima that saturate. The portable kernels are the ones the hand-derived vectors and the
// double-precision references of the other block tests were first checked against; every public
// call in those tests now runs the AVX-512 kernels on a machine that has them. This file: BFP and
// MX4/6/9; simd_mx_test.cpp and simd_mx8_test.cpp: OCP MX (tests/block/simd_support.hpp).
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include <quark/block/bfp.hpp>
#include <quark/block/micro_exponent.hpp>

#include "block/block_support.hpp"
#include "block/simd_support.hpp"

using simd_test::check_same;
using simd_test::kModes;

TEST_CASE("AVX-512 BFP kernels, blocks of 8, magnitude bits 1..22, agree with the portable ones") {
  const std::uint32_t seed = block_test::seed();
  INFO("seed " << seed);
  std::mt19937 rng = simd_test::start(seed);
  const auto x = simd_test::mixed_tensor(rng, simd_test::kElements, 8);
  const quark::detail::block_layout l{1, x.size(), 1};
  std::vector<float> a(x.size()), b(x.size());
  for (const int m : {1, 2, 4, 7, 12, 22}) {
    for (const quark::rounding r : kModes) {
      quark::detail::dispatch_rounding(r, [&](auto rt) {
        constexpr quark::rounding R = decltype(rt)::value;
        using quark::bfp_input;
        using quark::bfp_variant;
        quark::detail::bfp_fake_quantize_impl<R, bfp_input::float32, bfp_variant::standard, true>(
            x.data(), a.data(), l, 8, m);
        quark::detail::bfp_fake_quantize_impl<R, bfp_input::float32, bfp_variant::standard, false>(
            x.data(), b.data(), l, 8, m);
      });
      check_same(a, b,
                 "bfp m " + std::to_string(m) + " rounding " + std::to_string(static_cast<int>(r)));
    }
  }
}

TEST_CASE("AVX-512 MX4/6/9 kernels, blocks of 16 with pairs, agree with the portable ones") {
  const std::uint32_t seed = block_test::seed();
  INFO("seed " << seed);
  std::mt19937 rng = simd_test::start(seed);
  const auto x = simd_test::mixed_tensor(rng, simd_test::kElements, 16);
  const quark::detail::block_layout l{1, x.size(), 1};
  std::vector<float> a(x.size()), b(x.size());
  for (const int m : {2, 4, 7, 12}) {
    for (const quark::rounding r : kModes) {
      for (const auto c : {quark::compat_mode::standard, quark::compat_mode::quark}) {
        quark::detail::dispatch_rounding(r, [&](auto rt) {
          constexpr quark::rounding R = decltype(rt)::value;
          quark::detail::micro_fake_quantize_impl<R, true>(x.data(), a.data(), l, 16, 2, 1, m, c);
          quark::detail::micro_fake_quantize_impl<R, false>(x.data(), b.data(), l, 16, 2, 1, m, c);
        });
        check_same(a, b,
                   "mx m " + std::to_string(m) + " rounding " +
                       std::to_string(static_cast<int>(r)) + " compat " +
                       std::to_string(static_cast<int>(c)));
      }
    }
  }
}
