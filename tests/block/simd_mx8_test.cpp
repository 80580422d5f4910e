// SPDX-License-Identifier: MIT
// The AVX-512 OCP MX kernels against the portable ones, bit for bit (see simd_test.cpp): both FP8
// element types and INT8, every rounding, compat and E8M0 scale mode.
#include <cstdint>
#include <random>

#include <doctest/doctest.h>

#include <quark/block/mx.hpp>

#include "block/block_support.hpp"
#include "block/simd_support.hpp"

TEST_CASE("AVX-512 OCP MX kernels (FP8, INT8), blocks of 32, agree with the portable ones") {
  const std::uint32_t seed = block_test::seed();
  INFO("seed " << seed);
  std::mt19937 rng = simd_test::start(seed);
  const auto x = simd_test::mixed_tensor(rng, simd_test::kElements, 32);
  simd_test::check_mx<quark::float8_e4m3fn>(x, "fp8 e4m3");
  simd_test::check_mx<quark::float8_e5m2>(x, "fp8 e5m2");
  simd_test::check_mx<std::int8_t>(x, "int8");
}
