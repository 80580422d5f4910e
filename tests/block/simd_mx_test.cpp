// SPDX-License-Identifier: MIT
// The AVX-512 OCP MX kernels against the portable ones, bit for bit (see simd_test.cpp): FP4 and
// both FP6 element types, every rounding, compat and E8M0 scale mode.
#include <cstdint>
#include <random>

#include <doctest/doctest.h>

#include <quark/block/mx.hpp>

#include "block/block_support.hpp"
#include "block/simd_support.hpp"

TEST_CASE("AVX-512 OCP MX kernels (FP4, FP6), blocks of 32, agree with the portable ones") {
  const std::uint32_t seed = block_test::seed();
  INFO("seed " << seed);
  std::mt19937 rng = simd_test::start(seed);
  const auto x = simd_test::mixed_tensor(rng, simd_test::kElements, 32);
  simd_test::check_mx<quark::float4_e2m1fn>(x, "fp4");
  simd_test::check_mx<quark::float6_e2m3fn>(x, "fp6 e2m3");
  simd_test::check_mx<quark::float6_e3m2fn>(x, "fp6 e3m2");
}
