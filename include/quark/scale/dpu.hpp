// SPDX-License-Identifier: MIT
// The DPU's fixed-point stand-ins for a few float operations, as Quark's SimulateDPU writes them
// into a quantized float graph (quark-spec §9.2), so that the graph computes what the NPU will:
//
//   clip_bound(b)           a Clip bound rounded (half to even) and clamped to [-128, 127]
//   leaky_relu_alpha(a)     LeakyRelu's slope is held in 1/256 steps: round(a * 256) / 256
//                           (half to even, as Python's round)
//   hard_sigmoid_scale      HardSigmoid(x / 6 + 1/2) multiplies by 2731 / 2^14, not 1/6:
//                           the graph gets a Mul by (2731 / 16384) * 6 = 16386 / 16384
//   mean_scale(R)           a mean over R values is sum * k >> n: among n = 0 .. 6 + ceil(log2 R)
//                           the first n whose k = round(2^n / R) is nearest 1 / R (in double,
//                           as Quark compares them); the graph gets a Mul by (k / 2^n) * R
//   avg_pool_scale(kh, kw)  mean_scale(kh * kw), except windows wider than 255 (factor 1) and
//                           the DPU's own constants for 3x3, 5x5, 6x6, 7x7 and 14x14
//
// All are constexpr and exact: k comes from integer division, the candidates' errors are the
// double expressions Quark evaluates.
//
//     static_assert(quark::dpu::avg_pool_scale(3, 3) == 0.984375);   // 9 * 7 / 64
//     float a = quark::dpu::leaky_relu_alpha(0.1f);                  // 26 / 256 = 0.1015625
#pragma once

#include <cstdint>

namespace quark::dpu {

/// The factor after a HardSigmoid(alpha = 1/6, beta = 0.5): 1.0001220703125.
inline constexpr double hard_sigmoid_scale = 16386.0 / 16384.0;

namespace detail {

/// x rounded to an integer, ties to even; x is returned as it is when it is already integral
/// (|x| >= 2^52), infinite or NaN.
constexpr double round_half_even(double x) noexcept {
  if (!(x > -4503599627370496.0 && x < 4503599627370496.0))
    return x;
  const auto t = static_cast<std::int64_t>(x);  // toward zero
  const double f = x - static_cast<double>(t);  // exact: |x| < 2^52
  std::int64_t r = t;
  if (f > 0.5 || (f == 0.5 && (t & 1) != 0))
    ++r;
  else if (f < -0.5 || (f == -0.5 && (t & 1) != 0))
    --r;
  return static_cast<double>(r);
}

constexpr double abs(double x) noexcept {
  return x < 0 ? -x : x;
}

}  // namespace detail

/// LeakyRelu's alpha as the DPU holds it (a multiple of 1/256, half to even); a non-finite alpha
/// comes back unchanged (the caller decides what that means).
[[nodiscard]] constexpr float leaky_relu_alpha(float alpha) noexcept {
  return static_cast<float>(detail::round_half_even(static_cast<double>(alpha) * 256.0) / 256.0);
}

/// A Clip bound as the DPU holds it: rounded half to even, clamped to [-128, 127] (an infinite
/// bound clamps too; NaN comes back NaN, which the caller refuses).
[[nodiscard]] constexpr float clip_bound(float b) noexcept {
  if (b != b)
    return b;
  const double r = detail::round_half_even(static_cast<double>(b));
  return static_cast<float>(r < -128.0 ? -128.0 : (r > 127.0 ? 127.0 : r));
}

/// The largest count mean_scale computes; above it the factor is 1 (no DPU window is that big).
inline constexpr std::int64_t max_mean_count = std::int64_t{1} << 48;

/// The factor the DPU's mean over `count` values is off by (1 for count <= 0 or past
/// max_mean_count, and for powers of two).
[[nodiscard]] constexpr double mean_scale(std::int64_t count) noexcept {
  if (count <= 0 || count > max_mean_count)
    return 1.0;
  int ceil_log2 = 0;
  while ((std::int64_t{1} << ceil_log2) < count)
    ++ceil_log2;
  const int n_max = 7 + ceil_log2;
  const double inv = 1.0 / static_cast<double>(count);
  double best_diff = 0.0;
  std::int64_t best_k = 0;
  int best_n = 0;
  for (int n = 0; n < n_max; ++n) {
    const std::int64_t p = std::int64_t{1} << n;
    // k = round(2^n / count), half to even, exactly.
    std::int64_t k = p / count;
    const std::int64_t r = p % count;
    if (2 * r > count || (2 * r == count && (k & 1) != 0))
      ++k;
    const double diff = detail::abs(static_cast<double>(k) / static_cast<double>(p) - inv);
    if (n == 0 || diff < best_diff) {
      best_diff = diff;
      best_k = k;
      best_n = n;
    }
  }
  return static_cast<double>(best_k) / static_cast<double>(std::int64_t{1} << best_n) *
         static_cast<double>(count);
}

/// The factor after an average pool with a kh x kw window (kh, kw >= 1).
[[nodiscard]] constexpr double avg_pool_scale(std::int64_t kh, std::int64_t kw) noexcept {
  if (kh > 255 || kw > 255)
    return 1.0;
  if (kh == kw) {
    switch (kh) {
      case 3:
        return 9.0 * 7.0 / 64.0;
      case 5:
        return 25.0 * 10.0 / 256.0;
      case 6:
        return 36.0 * 7.0 / 256.0;
      case 7:
        return 49.0 * 21.0 / 1024.0;
      case 14:
        return 196.0 * 21.0 / 4096.0;
      default:
        break;
    }
  }
  return mean_scale(kh * kw);
}

}  // namespace quark::dpu
