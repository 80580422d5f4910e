// SPDX-License-Identifier: MIT
// quark/scale/dpu.hpp against hand-derived factors (quark-spec §9.2) and, for every window of up
// to 255 x 255 values, against an oracle in exact integer arithmetic: the error of k / 2^n
// against 1 / R compared as |k R - 2^n| / (2^n R) by cross-multiplication, no floating point.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <limits>

#include <doctest/doctest.h>

#include <quark/scale/dpu.hpp>

namespace dpu = quark::dpu;

// The header's examples hold at compile time.
static_assert(dpu::avg_pool_scale(3, 3) == 0.984375);
static_assert(dpu::leaky_relu_alpha(0.1f) == 0.1015625f);
static_assert(dpu::hard_sigmoid_scale == 1.0001220703125);

namespace {

/// (k, n) of the DPU mean over r values, the first n in [0, n_max) with the smallest error, in
/// integers only.
struct kn {
  std::int64_t k;
  int n;
};

kn oracle_mean(std::int64_t r) {
  int bits = 0;  // ceil(log2 r)
  while ((std::int64_t{1} << bits) < r)
    ++bits;
  kn best{0, -1};
  std::int64_t best_num = 0;  // |k r - 2^n|, the error times 2^n r
  for (int n = 0; n < 7 + bits; ++n) {
    const std::int64_t p = std::int64_t{1} << n;
    // round(p / r), half to even: the nearest integer, the even one on a tie.
    std::int64_t k = p / r;
    const std::int64_t twice_rem = 2 * (p % r);
    if (twice_rem > r || (twice_rem == r && k % 2 == 1))
      ++k;
    const std::int64_t num = std::llabs(k * r - p);
    // num / (p r) < best_num / (2^best.n r)  <=>  num * 2^best.n < best_num * p
    if (best.n < 0 || num * (std::int64_t{1} << best.n) < best_num * p) {
      best = {k, n};
      best_num = num;
    }
  }
  return best;
}

}  // namespace

TEST_CASE("dpu: average pool factors of quark-spec §9.2") {
  CHECK(dpu::avg_pool_scale(3, 3) == 9.0 * 7.0 / 64.0);
  CHECK(dpu::avg_pool_scale(5, 5) == 0.9765625);
  CHECK(dpu::avg_pool_scale(6, 6) == 0.984375);
  CHECK(dpu::avg_pool_scale(7, 7) == 1.0048828125);
  CHECK(dpu::avg_pool_scale(14, 14) == 1.0048828125);
  // Generic windows: 3 x 3 without its special case would be k = 57, n = 9.
  CHECK(dpu::mean_scale(9) == 57.0 / 512.0 * 9.0);
  CHECK(dpu::mean_scale(9) == 1.001953125);
  // 3 values: n in [0, 9); k = round(2^n / 3): 0, 1, 1, 3, 5, 11, 21, 43, 85; the errors
  // |k / 2^n - 1/3| are smallest for 85 / 256 (1/768), so the factor is 255 / 256.
  CHECK(dpu::mean_scale(3) == 255.0 / 256.0);
  // 2 x 3 = 6: n in [0, 10); n = 8 gives 43 / 256 (error 1/768 against 1/6), n = 9 gives
  // 85 / 512 (error 1/1536), so the factor is 510 / 512.
  CHECK(dpu::avg_pool_scale(2, 3) == 510.0 / 512.0);
  // Powers of two are exact; windows past 255 are not rescaled.
  for (const std::int64_t r : {1, 2, 4, 64, 1024, 65536})
    CHECK(dpu::mean_scale(r) == 1.0);
  CHECK(dpu::avg_pool_scale(256, 1) == 1.0);
  CHECK(dpu::avg_pool_scale(1, 300) == 1.0);
  CHECK(dpu::avg_pool_scale(255, 255) == dpu::mean_scale(255 * 255));
  // Outside the domain: factor 1.
  CHECK(dpu::mean_scale(0) == 1.0);
  CHECK(dpu::mean_scale(-5) == 1.0);
  CHECK(dpu::mean_scale(dpu::max_mean_count + 1) == 1.0);
}

TEST_CASE("dpu: every mean over 1 .. 65025 values against the integer oracle") {
  std::int64_t mismatches = 0;
  for (std::int64_t r = 1; r <= 255 * 255; ++r) {
    const kn o = oracle_mean(r);
    // k r < 2^53, so k r / 2^n is exact in double, as the header's (k / 2^n) * r is.
    const double expected =
        static_cast<double>(o.k * r) / static_cast<double>(std::int64_t{1} << o.n);
    if (dpu::mean_scale(r) != expected) {
      ++mismatches;
      if (mismatches <= 5)
        CHECK_MESSAGE(false, "R = " << r << ": " << dpu::mean_scale(r) << " vs " << expected);
    }
  }
  CHECK(mismatches == 0);
  // A few large counts (a 640 x 640 mean, a 2^20 + 1 one).
  for (const std::int64_t r : {std::int64_t{409600}, (std::int64_t{1} << 20) + 1}) {
    const kn o = oracle_mean(r);
    CHECK(dpu::mean_scale(r) ==
          static_cast<double>(o.k * r) / static_cast<double>(std::int64_t{1} << o.n));
  }
}

TEST_CASE("dpu: Clip bounds rounded half to even and clamped to [-128, 127]") {
  CHECK(dpu::clip_bound(-0.4f) == 0.0f);
  CHECK(dpu::clip_bound(200.7f) == 127.0f);
  CHECK(dpu::clip_bound(6.0f) == 6.0f);
  CHECK(dpu::clip_bound(2.5f) == 2.0f);
  CHECK(dpu::clip_bound(3.5f) == 4.0f);
  CHECK(dpu::clip_bound(-2.5f) == -2.0f);
  CHECK(dpu::clip_bound(-128.6f) == -128.0f);
  CHECK(dpu::clip_bound(-1e30f) == -128.0f);
  CHECK(dpu::clip_bound(std::numeric_limits<float>::infinity()) == 127.0f);
  CHECK(dpu::clip_bound(-std::numeric_limits<float>::infinity()) == -128.0f);
  CHECK(std::isnan(dpu::clip_bound(std::numeric_limits<float>::quiet_NaN())));
  // Every multiple of 1/4 in [-140, 140]: the nearest integer (even on ties), clamped.
  for (int i = -560; i <= 560; ++i) {
    const float b = static_cast<float>(i) / 4.0f;
    int q = i / 4;
    const int rem = i - 4 * q;
    if (rem == 3 || (rem == 2 && q % 2 != 0))
      ++q;
    else if (rem == -3 || (rem == -2 && q % 2 != 0))
      --q;
    CHECK(dpu::clip_bound(b) == static_cast<float>(std::clamp(q, -128, 127)));
  }
}

TEST_CASE("dpu: LeakyRelu alpha in 1/256 steps, half to even") {
  CHECK(dpu::leaky_relu_alpha(0.1f) == 26.0f / 256.0f);
  CHECK(dpu::leaky_relu_alpha(0.01f) == 3.0f / 256.0f);
  CHECK(dpu::leaky_relu_alpha(0.2f) == 51.0f / 256.0f);
  CHECK(dpu::leaky_relu_alpha(0.0f) == 0.0f);
  // Exact halves go to the even multiple, as Python's round does.
  CHECK(dpu::leaky_relu_alpha(1.5f / 256.0f) == 2.0f / 256.0f);
  CHECK(dpu::leaky_relu_alpha(2.5f / 256.0f) == 2.0f / 256.0f);
  CHECK(dpu::leaky_relu_alpha(-1.5f / 256.0f) == -2.0f / 256.0f);
  CHECK(dpu::leaky_relu_alpha(-2.5f / 256.0f) == -2.0f / 256.0f);
  // Already a multiple: unchanged; large values stay integral multiples.
  CHECK(dpu::leaky_relu_alpha(0.25f) == 0.25f);
  CHECK(dpu::leaky_relu_alpha(3.0e10f) == 3.0e10f);
  // Every multiple of 1/1024 in [-4, 4]: the nearest multiple of 1/256, even on ties.
  for (int i = -4096; i <= 4096; ++i) {
    const float a = static_cast<float>(i) / 1024.0f;
    int q = i / 4;  // toward zero
    const int rem = i - 4 * q;
    if (rem == 3 || (rem == 2 && q % 2 != 0))
      ++q;
    else if (rem == -3 || (rem == -2 && q % 2 != 0))
      --q;
    CHECK(dpu::leaky_relu_alpha(a) == static_cast<float>(q) / 256.0f);
  }
  const float inf = std::numeric_limits<float>::infinity();
  CHECK(dpu::leaky_relu_alpha(inf) == inf);
  CHECK(dpu::leaky_relu_alpha(std::numeric_limits<float>::quiet_NaN()) !=
        dpu::leaky_relu_alpha(std::numeric_limits<float>::quiet_NaN()));
}
