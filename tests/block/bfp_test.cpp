// SPDX-License-Identifier: MIT
// BFP (Quark's "to_bfp", BFP16 by default): quark-spec 12.5 vectors (re-derived by hand in the
// comments), rounding modes, bfloat16-first input, the compiler variant, an independent
// double-precision reference over random tensors, storage and seeded properties.
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include <doctest/doctest.h>

#include <quark/block/bfp.hpp>

#include "block/block_support.hpp"

using block_test::check_same;
using block_test::same;

namespace {

constexpr float inf = std::numeric_limits<float>::infinity();
constexpr float qnan = std::numeric_limits<float>::quiet_NaN();

std::vector<float> fq(std::vector<float> x, quark::rounding r,
                      quark::bfp_variant v = quark::bfp_variant::standard,
                      quark::bfp_input in = quark::bfp_input::float32) {
  const std::size_t n = x.size();
  x.resize(8, 0.0f);
  std::vector<float> y(8);
  quark::bfp_options o;
  o.element_rounding = r;
  o.variant = v;
  o.input = in;
  quark::fake_quantize<quark::bfp16>(std::span<const float>(x), std::span<float>(y), o);
  y.resize(n);
  return y;
}

/// Reference BFP in double: E = floor(log2 max finite |x|), quantum 2^(E - m + 1), round, clamp.
std::vector<float> reference(const std::vector<float>& x, int m, quark::rounding r) {
  std::vector<float> y(x.size());
  for (std::size_t b = 0; b < x.size(); b += 8) {
    const std::size_t n = std::min<std::size_t>(8, x.size() - b);
    double amax = 0.0;
    for (std::size_t i = b; i < b + n; ++i) {
      if (std::isfinite(x[i]))
        amax = std::max(amax, std::fabs(static_cast<double>(x[i])));
    }
    const int e = amax >= 0x1p-126 ? std::ilogb(amax) : -127;
    const double quantum = std::ldexp(1.0, e - m + 1);
    for (std::size_t i = b; i < b + n; ++i) {
      if (!std::isfinite(x[i])) {
        y[i] = x[i];
        continue;
      }
      const double v = std::fabs(static_cast<double>(x[i])) / quantum;
      const double fl = std::floor(v);
      const double frac = v - fl;
      double q = fl;
      if (frac > 0.5) {
        q = fl + 1;
      } else if (frac == 0.5) {
        if (r == quark::rounding::nearest_away)
          q = fl + 1;
        if (r == quark::rounding::nearest_up)
          q = x[i] < 0 ? fl : fl + 1;
        if (r == quark::rounding::nearest_even)
          q = std::fmod(fl, 2.0) == 0.0 ? fl : fl + 1;
      }
      q = std::min(q, std::ldexp(1.0, m) - 1);
      y[i] = static_cast<float>(std::copysign(q * quantum, static_cast<double>(x[i])));
    }
  }
  return y;
}

}  // namespace

TEST_CASE("quark-spec 12.5 BFP16 vectors") {
  using quark::rounding;
  // Shared E = 6 (100 is in [64, 128)), quantum 2^(6-6) = 1.
  const std::vector<float> x = {0.1f, -0.25f, 3.3f, 100.0f, -7.77f, 0.0f, 1e-3f, 2.5f};
  check_same(fq(x, rounding::nearest_away), {0.0f, -0.0f, 3.0f, 100.0f, -8.0f, 0.0f, 0.0f, 3.0f});
  check_same(fq(x, rounding::nearest_even), {0.0f, -0.0f, 3.0f, 100.0f, -8.0f, 0.0f, 0.0f, 2.0f});
  // Half up (DPU round): 2.5 -> 3, and -2.5 -> -2.
  check_same(fq({100.0f, 2.5f, -2.5f}, rounding::nearest_up), {100.0f, 3.0f, -2.0f});
  // E = 7, quantum 2: 127.95 -> 128 quanta -> clamped to 127 -> 254; 0.5 quanta -> 1 (away).
  check_same(fq({255.9f, 1.0f}, rounding::nearest_away), {254.0f, 2.0f});
  // Inf/NaN pass through; E from the finite values (3.75 -> E = 1), quantum 2^-5.
  check_same(fq({1.0f, inf, qnan, -2.0f, 0.5f, 3.75f, -0.126f, 1e-8f}, rounding::nearest_away),
             {1.0f, inf, qnan, -2.0f, 0.5f, 3.75f, -0.125f, 0.0f});
  check_same(fq({0.0f, 0.0f, 0.0f}, rounding::nearest_away), {0.0f, 0.0f, 0.0f});
}

TEST_CASE("BFP16 options: bfloat16 first and the compiler variant") {
  using quark::rounding;
  // E = 1 (3.3 in [2, 4)), quantum 2^-5. Plain: 3.3 -> 105.6 -> 106 quanta = 3.3125;
  // 1.01171875 -> 32.375 -> 32 = 1.0. bfloat16 first: 3.3 -> 3.296875 = 105.5 quanta -> 106
  // (away); 1.01171875 = 1 + 1.5/128 ties to 1.015625 in bfloat16 = 32.5 quanta -> 33 = 1.03125.
  check_same(fq({3.3f, 1.01171875f}, rounding::nearest_away), {3.3125f, 1.0f});
  check_same(fq({3.3f, 1.01171875f}, rounding::nearest_away, quark::bfp_variant::standard,
                quark::bfp_input::bfloat16_first),
             {3.3125f, 1.03125f});
  // Compiler variant: 255.9 (E = 7) rounds to 128 quanta of 2: outside [-128, 127], so the
  // exponent is bumped once: quantum 4, 255.9 -> 64 quanta -> 256; 1.0 -> 0.25 -> 0.
  check_same(fq({255.9f, 1.0f}, rounding::nearest_away, quark::bfp_variant::compiler),
             {256.0f, 0.0f});
  // -128 quanta fits the int8 grid: -255.9 -> -128 * 2 = -256 without a bump.
  check_same(fq({-255.9f, 1.0f}, rounding::nearest_away, quark::bfp_variant::compiler),
             {-256.0f, 2.0f});
  // No overflow, no bump: same as the standard kernel.
  check_same(fq({100.0f, 2.5f}, rounding::nearest_even, quark::bfp_variant::compiler),
             {100.0f, 2.0f});
}

TEST_CASE("BFP agrees with a double-precision reference over random tensors") {
  const std::uint32_t seed = block_test::seed();
  INFO("seed " << seed);
  std::mt19937 rng(seed);
  auto x = block_test::random_tensor(rng, 8 * 2000 + 5, -40, 40);
  x[17] = inf;
  x[100] = -qnan;
  x[301] = 0x1p-140f;  // float32 subnormals, alone and with a tiny block max
  x[302] = 0x1p-130f;
  for (std::size_t i = 400; i < 408; ++i)
    x[i] = std::ldexp(x[i], -100);
  for (const auto r : {quark::rounding::nearest_even, quark::rounding::nearest_away,
                       quark::rounding::nearest_up}) {
    INFO("rounding " << static_cast<int>(r));
    std::vector<float> y(x.size());
    quark::bfp_options o;
    o.element_rounding = r;
    quark::fake_quantize<quark::bfp16>(std::span<const float>(x), std::span<float>(y), o);
    check_same(y, reference(x, 7, r), "bfp16");
    // Other widths through the runtime entry point (Quark's bit_width - 9).
    for (const int m : {1, 3, 12, 22}) {
      const std::size_t shape[] = {x.size()};
      quark::bfp_fake_quantize(x, y, shape, 0, 8, m, o);
      check_same(y, reference(x, m, r), "m = " + std::to_string(m));
    }
  }
}

TEST_CASE("BFP: axes, storage and properties") {
  const std::uint32_t seed = block_test::seed();
  INFO("seed " << seed);
  std::mt19937 rng(seed);
  const auto x = block_test::random_tensor(rng, 4 * 13 * 3, -12, 12);
  // Blocks along axis 1 of [4, 13, 3] (8 + partial 5) equal 1-D calls on the gathered columns.
  const std::size_t shape[] = {4, 13, 3};
  std::vector<float> y(x.size());
  quark::fake_quantize<quark::bfp16>(std::span<const float>(x), std::span<float>(y), shape, 1);
  for (std::size_t o = 0; o < 4; ++o) {
    for (std::size_t i = 0; i < 3; ++i) {
      std::vector<float> col(13), got(13), want(13);
      for (std::size_t j = 0; j < 13; ++j) {
        col[j] = x[(o * 13 + j) * 3 + i];
        got[j] = y[(o * 13 + j) * 3 + i];
      }
      quark::fake_quantize<quark::bfp16>(std::span<const float>(col), std::span<float>(want));
      check_same(got, want, "column");
    }
  }
  // Storage: scale byte = shared field, sign-magnitude codes; round trip equals fake-quantize.
  std::vector<float> rows(x.begin(), x.begin() + 3 * 13), want(3 * 13), got(3 * 13);
  const std::size_t rshape[] = {3, 13};
  quark::fake_quantize<quark::bfp16>(std::span<const float>(rows), std::span<float>(want), rshape,
                                     1);
  const auto t = quark::make_block_tensor<quark::bfp16>(rows, 13);
  CHECK(t.scales.size() == 6);
  CHECK(t.elements.size() == 39);
  quark::dequantize(t, std::span<float>(got));
  check_same(got, want, "storage");
  const std::vector<float> v = {100.0f, -3.0f};
  const auto t2 = quark::make_block_tensor<quark::bfp16>(v, 2);
  CHECK(t2.scales[0] == 133);  // 127 + 6
  CHECK(t2.elements[0] == 100);
  CHECK(t2.elements[1] == 0x83);  // sign bit 7, magnitude 3
  quark::bfp_options c;
  c.variant = quark::bfp_variant::compiler;
  CHECK_THROWS_AS(quark::make_block_tensor<quark::bfp16>(v, 2, c), quark::invalid_argument);
  // Properties: idempotent, power-of-two scale invariant, monotone within a block.
  const auto big = block_test::random_tensor(rng, 8 * 512, -10, 10);
  std::vector<float> a(big.size()), b(big.size()), s(big.size()), sa(big.size());
  quark::fake_quantize<quark::bfp16>(std::span<const float>(big), std::span<float>(a));
  quark::fake_quantize<quark::bfp16>(std::span<const float>(a), std::span<float>(b));
  check_same(b, a, "idempotence");
  for (std::size_t i = 0; i < big.size(); ++i)
    s[i] = std::ldexp(big[i], 9);
  quark::fake_quantize<quark::bfp16>(std::span<const float>(s), std::span<float>(sa));
  for (std::size_t i = 0; i < big.size(); ++i)
    REQUIRE(same(sa[i], std::ldexp(a[i], 9)));
  for (std::size_t blk = 0; blk < big.size(); blk += 8) {
    for (std::size_t i = blk; i < blk + 8; ++i) {
      for (std::size_t j = blk; j < blk + 8; ++j) {
        if (big[i] <= big[j])
          REQUIRE(a[i] <= a[j]);
      }
    }
  }
}
