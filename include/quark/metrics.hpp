// SPDX-License-Identifier: MIT
// Output-similarity metrics of quark-spec §11 (Quark's EvalMetrics and its evaluate tool):
// cosine similarity, L2 distance, L1 distance, PSNR and SSIM between a float baseline x and a
// quantized result y (same number of elements). Accumulation is in double.
//
// SSIM uses the standard formula of Wang et al. (2004) with the covariance, as decided in
// quark-spec "Decisions" item 1 (Quark's stand-alone tool used E[xy] without subtracting the
// means; docs/compatibility.md): a Gaussian window (11x11, sigma 1.5) over 2-D planes, or one
// global window.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include <quark/config.hpp>
#include <quark/core/error.hpp>

namespace quark::metrics {

namespace detail {
inline void check_sizes(std::span<const float> x, std::span<const float> y, const char* what) {
  if (x.size() != y.size()) {
    QUARK_THROW(invalid_argument("quark.metrics.size", std::string(what) + ": " +
                                                           std::to_string(x.size()) + " vs " +
                                                           std::to_string(y.size()) + " elements"));
  }
}
}  // namespace detail

/// Cosine similarity x.y / (|x| |y|); NaN when a norm is 0 (Quark adds no epsilon).
///
///     float a[] = {1, 2}, b[] = {2, 4};
///     double c = quark::metrics::cosine(a, b);   // 1.0
inline double cosine(std::span<const float> x, std::span<const float> y) {
  detail::check_sizes(x, y, "cosine");
  double xy = 0.0, xx = 0.0, yy = 0.0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const auto a = static_cast<double>(x[i]);
    const auto b = static_cast<double>(y[i]);
    xy += a * b;
    xx += a * a;
    yy += b * b;
  }
  return xy / (std::sqrt(xx) * std::sqrt(yy));
}

/// Euclidean norm of the difference (not a mean).
inline double l2_distance(std::span<const float> x, std::span<const float> y) {
  detail::check_sizes(x, y, "l2_distance");
  double s = 0.0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double d = static_cast<double>(x[i]) - static_cast<double>(y[i]);
    s += d * d;
  }
  return std::sqrt(s);
}

/// Sum of absolute differences.
inline double l1_distance(std::span<const float> x, std::span<const float> y) {
  detail::check_sizes(x, y, "l1_distance");
  double s = 0.0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    s += std::fabs(static_cast<double>(x[i]) - static_cast<double>(y[i]));
  }
  return s;
}

/// PSNR in dB with Quark's peak: 20 log10(max(x)) - 10 log10(mse); an mse of exactly 0 becomes
/// 1e-10 and a peak <= 0 becomes 1e-10 (quark-spec §11.1).
inline double psnr(std::span<const float> x, std::span<const float> y) {
  detail::check_sizes(x, y, "psnr");
  if (x.empty())
    return std::numeric_limits<double>::quiet_NaN();
  double mse = 0.0;
  double peak = -std::numeric_limits<double>::infinity();
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double d = static_cast<double>(x[i]) - static_cast<double>(y[i]);
    mse += d * d;
    peak = std::max(peak, static_cast<double>(x[i]));
  }
  mse /= static_cast<double>(x.size());
  if (mse == 0.0)
    mse = 1e-10;
  if (peak <= 0.0)
    peak = 1e-10;
  return 20.0 * std::log10(peak) - 10.0 * std::log10(mse);
}

/// SSIM constants: dynamic range L (255 as Quark), k1 = 0.01, k2 = 0.03.
struct ssim_options {
  double dynamic_range = 255.0;
  double k1 = 0.01;
  double k2 = 0.03;
};

/// SSIM over one global window: (2 mx my + c1)(2 cov + c2) / ((mx^2 + my^2 + c1)(vx + vy + c2))
/// with population variances and covariance.
inline double ssim_global(std::span<const float> x, std::span<const float> y,
                          const ssim_options& o = {}) {
  detail::check_sizes(x, y, "ssim");
  if (x.empty())
    return std::numeric_limits<double>::quiet_NaN();
  const auto n = static_cast<double>(x.size());
  double mx = 0.0, my = 0.0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    mx += static_cast<double>(x[i]);
    my += static_cast<double>(y[i]);
  }
  mx /= n;
  my /= n;
  double vx = 0.0, vy = 0.0, cxy = 0.0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double a = static_cast<double>(x[i]) - mx;
    const double b = static_cast<double>(y[i]) - my;
    vx += a * a;
    vy += b * b;
    cxy += a * b;
  }
  vx /= n;
  vy /= n;
  cxy /= n;
  const double c1 = (o.k1 * o.dynamic_range) * (o.k1 * o.dynamic_range);
  const double c2 = (o.k2 * o.dynamic_range) * (o.k2 * o.dynamic_range);
  return (2.0 * mx * my + c1) * (2.0 * cxy + c2) / ((mx * mx + my * my + c1) * (vx + vy + c2));
}

/// Windowed SSIM of `planes` consecutive h x w planes (row-major): Gaussian window 11x11,
/// sigma 1.5, evaluated at every position where the window fits, averaged over positions and
/// planes. Planes smaller than the window use ssim_global.
///
///     double s = quark::metrics::ssim(x, y, 3, 64, 64);   // a 3x64x64 image
inline double ssim(std::span<const float> x, std::span<const float> y, std::size_t planes,
                   std::size_t h, std::size_t w, const ssim_options& o = {}) {
  detail::check_sizes(x, y, "ssim");
  if (planes * h * w != x.size()) {
    QUARK_THROW(invalid_argument("quark.metrics.size", "ssim: planes x h x w != element count"));
  }
  constexpr std::size_t k = 11;
  if (h < k || w < k)
    return ssim_global(x, y, o);
  // 1. The normalised 1-D Gaussian (the 2-D window is its outer product).
  double g[k];
  double gs = 0.0;
  for (std::size_t i = 0; i < k; ++i) {
    const double d = static_cast<double>(i) - 5.0;
    g[i] = std::exp(-(d * d) / (2.0 * 1.5 * 1.5));
    gs += g[i];
  }
  for (double& v : g)
    v /= gs;
  const double c1 = (o.k1 * o.dynamic_range) * (o.k1 * o.dynamic_range);
  const double c2 = (o.k2 * o.dynamic_range) * (o.k2 * o.dynamic_range);
  // 2. Separable filtering of x, y, x^2, y^2, xy: rows first into (h x ow), then columns.
  const std::size_t oh = h - k + 1, ow = w - k + 1;
  std::vector<double> rows(5 * h * ow);
  double total = 0.0;
  for (std::size_t p = 0; p < planes; ++p) {
    const float* xp = x.data() + p * h * w;
    const float* yp = y.data() + p * h * w;
    for (std::size_t r = 0; r < h; ++r) {
      for (std::size_t c = 0; c < ow; ++c) {
        double a[5] = {0, 0, 0, 0, 0};
        for (std::size_t t = 0; t < k; ++t) {
          const auto xv = static_cast<double>(xp[r * w + c + t]);
          const auto yv = static_cast<double>(yp[r * w + c + t]);
          a[0] += g[t] * xv;
          a[1] += g[t] * yv;
          a[2] += g[t] * xv * xv;
          a[3] += g[t] * yv * yv;
          a[4] += g[t] * xv * yv;
        }
        for (std::size_t m = 0; m < 5; ++m)
          rows[(m * h + r) * ow + c] = a[m];
      }
    }
    double plane = 0.0;
    for (std::size_t r = 0; r < oh; ++r) {
      for (std::size_t c = 0; c < ow; ++c) {
        double a[5] = {0, 0, 0, 0, 0};
        for (std::size_t t = 0; t < k; ++t) {
          for (std::size_t m = 0; m < 5; ++m)
            a[m] += g[t] * rows[(m * h + r + t) * ow + c];
        }
        // 3. Local statistics: variances and covariance subtract the squared means.
        const double mx = a[0], my = a[1];
        const double vx = a[2] - mx * mx, vy = a[3] - my * my, cxy = a[4] - mx * my;
        plane +=
            (2.0 * mx * my + c1) * (2.0 * cxy + c2) / ((mx * mx + my * my + c1) * (vx + vy + c2));
      }
    }
    total += plane / static_cast<double>(oh * ow);
  }
  return total / static_cast<double>(planes);
}

/// Running mean / min / max of one metric over samples (the lines the evaluate tool prints).
/// Running mean / min / max of per-sample metric values. A NaN value (a cosine with an all-zero
/// output, a metric of an empty tensor) is counted in `undefined` and left out of the others, so
/// one degenerate sample neither hides the rest (NaN mean) nor passes unnoticed.
struct summary {
  double sum = 0.0;
  double min = std::numeric_limits<double>::infinity();
  double max = -std::numeric_limits<double>::infinity();
  std::size_t count = 0;      ///< defined values
  std::size_t undefined = 0;  ///< NaN values
  void add(double v) noexcept {
    if (std::isnan(v)) {
      ++undefined;
      return;
    }
    sum += v;
    min = std::min(min, v);
    max = std::max(max, v);
    ++count;
  }
  /// Mean of the defined values; NaN when there are none.
  double mean() const noexcept {
    return count ? sum / static_cast<double>(count) : std::numeric_limits<double>::quiet_NaN();
  }
};

}  // namespace quark::metrics
