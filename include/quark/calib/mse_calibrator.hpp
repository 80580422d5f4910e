// SPDX-License-Identifier: MIT
// Float-scale MinMSE for weights (WeightCalibrateMethod = ExtendedCalibrationMethod.MinMSE,
// MinMSEModeFloatScale, quark-spec §4.8) and the weight calibrator that dispatches between it and
// MinMax (weights are one tensor already in memory, so these take a span), and its HistCenter
// search over a streamed activation histogram (float_minmse_hist_calibrator).
// Candidate ranges go through compute_scale_zp's float rule (float64 scale, then float32) and
// are scored by fake quantization on the caller's grid (signed weights: the symmetric table).
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include <quark/calib/calib_result.hpp>
#include <quark/calib/detail/grid.hpp>
#include <quark/observer/histogram_observer.hpp>

namespace quark {

/// MinMSEModeFloatScale (default Percentile; Quark falls back to Percentile for unknown names).
enum class minmse_float_mode : std::uint8_t { percentile, hist_center, all };

namespace detail {
/// numpy.percentile(x, q) with linear interpolation, on a sorted copy.
inline double sorted_percentile(std::span<const float> sorted, double q) noexcept {
  const double idx = q / 100.0 * static_cast<double>(sorted.size() - 1);
  const double lo = std::floor(idx);
  const double t = idx - lo;
  const auto i = static_cast<std::size_t>(lo);
  const auto a = static_cast<double>(sorted[i]);
  const auto b = static_cast<double>(sorted[std::min(i + 1, sorted.size() - 1)]);
  // numpy's lerp: a + (b - a) t below t = 0.5, b - (b - a)(1 - t) from 0.5 on.
  return t >= 0.5 ? b - (b - a) * (1.0 - t) : a + (b - a) * t;
}

/// Mean of (fq(v) - v)^2 over finite values, the squares summed in element order in double:
/// blocks of the errors come from fq_errors (vector lanes where it vectorises), so the sum is
/// that of one plain sequential loop ((-d)^2 = d^2 exactly).
inline double fq_mse(std::span<const float> x, float s, float zp, float qmin, float qmax) noexcept {
  constexpr std::size_t block = 256;
  std::array<double, block> err;
  double acc = 0.0;
  for (std::size_t b = 0; b < x.size(); b += block) {
    const std::size_t m = std::min(block, x.size() - b);
    fq_errors(x.data() + b, m, s, zp, qmin, qmax, err.data());
    for (std::size_t k = 0; k < m; ++k)
      acc += err[k] * err[k];
  }
  return acc / static_cast<double>(x.size());
}

/// Count-weighted squared fake-quantization error of the float32 bin centres `centre`
/// (float_bin_centres of d.edges, computed once per search), over the bins (Quark's HistCenter
/// error). Blocks of centres go through fq_errors; the terms count * e * e are summed in bin
/// order, as one plain loop over the bins would.
inline double hist_center_error(const histogram_data& d, std::span<const float> centre, float s,
                                float zp, float qmin, float qmax) noexcept {
  constexpr std::size_t block = 256;
  std::array<double, block> e;
  const std::size_t bins = d.counts.size();
  double err = 0.0;
  for (std::size_t b = 0; b < bins; b += block) {
    const std::size_t m = std::min(block, bins - b);
    fq_errors(centre.data() + b, m, s, zp, qmin, qmax, e.data());
    for (std::size_t k = 0; k < m; ++k)
      err += static_cast<double>(d.counts[b + k]) * e[k] * e[k];
  }
  return err / static_cast<double>(bins);
}

/// hist_center_error with the centres computed here.
inline double hist_center_error(const histogram_data& d, float s, float zp, float qmin,
                                float qmax) {
  return hist_center_error(d, float_bin_centres(d.edges), s, zp, qmin, qmax);
}

/// The HistCenter / All windows: for k = B/2 .. B-1 the window (c[left], c[right]) of the bin
/// centres, left = int((B - k) / 2), right = int(B - (B - k) / 2), as float32 ends;
/// `rule(lo, hi)` gives the window's grid_params (an invalid one, scale <= 0 or not finite, is
/// skipped) and `error(scale, zero_point)` its error; the first minimum wins. No valid window:
/// the result has no scale and the whole range (origin `range`).
template <class Rule, class Error>
calibrated_range minmse_windows_by(const histogram_data& d, Rule&& rule, Error&& error) {
  const std::size_t bins = d.counts.size();
  std::vector<double> c(bins);
  for (std::size_t i = 0; i < bins; ++i)
    c[i] = (d.edges[i] + d.edges[i + 1]) / 2.0;
  calibrated_range best;
  double best_err = std::numeric_limits<double>::infinity();
  const double b = static_cast<double>(bins);
  for (auto k = static_cast<std::size_t>(0.5 * b); k < bins; ++k) {
    const double half = (b - static_cast<double>(k)) / 2.0;
    const auto left = static_cast<std::size_t>(half);
    const auto right = std::min(static_cast<std::size_t>(b - half), bins - 1);
    const grid_params p = rule(c[left], c[right]);
    const auto s = static_cast<float>(p.scale);
    if (!(s > 0.0f) || !std::isfinite(s))
      continue;
    const double err = error(s, static_cast<float>(p.zero_point));
    if (err < best_err) {
      best_err = err;
      best.min = static_cast<float>(c[left]);
      best.max = static_cast<float>(c[right]);
      best.scale = s;
      best.zero_point = p.zero_point;
      best.origin = scale_origin::searched;
    }
  }
  if (!best.scale && bins > 0) {
    best.min = static_cast<float>(c.front());
    best.max = static_cast<float>(c.back());
  }
  return best;
}

/// The windows with compute_scale_zp's float rule on `grid`; `error(d, s, zp, qmin, qmax)`.
template <class Error>
calibrated_range minmse_windows(const histogram_data& d, int_grid grid, range_symmetry symmetry,
                                Error&& error) {
  const float qmin = static_cast<float>(grid.qmin);
  const float qmax = static_cast<float>(grid.qmax);
  return minmse_windows_by(
      d, [&](double lo, double hi) { return scale_zp(lo, hi, grid, symmetry); },
      [&](float s, float zp) { return error(d, s, zp, qmin, qmax); });
}
/// The windows scored by HistCenter's error, the bin centres computed once for all of them.
inline calibrated_range hist_center_windows(const histogram_data& d, int_grid grid,
                                            range_symmetry symmetry) {
  const std::vector<float> centre = float_bin_centres(d.edges);
  return minmse_windows(d, grid, symmetry,
                        [&](const histogram_data& h, float s, float zp, float qmin, float qmax) {
                          return hist_center_error(h, centre, s, zp, qmin, qmax);
                        });
}
}  // namespace detail

/// Float-scale MinMSE over one weight tensor.
///
/// ```cpp
/// quark::float_minmse_calibrator cal{.mode = quark::minmse_float_mode::percentile,
///                                    .grid = {-127, 127}};
/// quark::calibrated_range r = cal(weights);    // r.min, r.max, *r.scale, *r.zero_point
/// ```
/// Throws "quark.calib.empty_input" for an empty tensor and "quark.calib.non_finite_input" when
/// it holds NaN or Inf (Quark raises "NaN detected" for such weights).
struct float_minmse_calibrator {
  minmse_float_mode mode = minmse_float_mode::percentile;
  int_grid grid{-127, 127};
  range_symmetry symmetry = range_symmetry::symmetric;
  std::vector<double> percentiles{99.9, 99.99, 99.999, 99.9999};

  [[nodiscard]] calibrated_range operator()(std::span<const float> w) const {
    // 1. Validate.
    if (w.empty())
      detail::throw_invalid("quark.calib.empty_input", "empty weight tensor");
    for (const float v : w) {
      if (!std::isfinite(v))
        detail::throw_invalid("quark.calib.non_finite_input", "weight holds NaN or Inf");
    }
    const float qmin = static_cast<float>(grid.qmin);
    const float qmax = static_cast<float>(grid.qmax);
    calibrated_range best;
    double best_err = std::numeric_limits<double>::infinity();
    std::vector<float> seen;
    // 2. Float scale of a candidate range; take() keeps the first strictly smaller error.
    auto consider = [&](double lo, double hi) {
      const detail::grid_params p = detail::scale_zp(lo, hi, grid, symmetry);
      const float s = static_cast<float>(p.scale);
      return std::pair{s, static_cast<float>(p.zero_point)};
    };
    auto take = [&](double lo, double hi, float s, float zp, double err) {
      if (err < best_err) {
        best_err = err;
        best.min = static_cast<float>(lo);
        best.max = static_cast<float>(hi);
        best.scale = s;
        best.zero_point = static_cast<std::int64_t>(zp);
        best.origin = scale_origin::searched;
      }
    };
    if (mode == minmse_float_mode::percentile) {
      // 3a. Two-sided percentiles of the signed data; a scale already scored is skipped.
      std::vector<float> sorted(w.begin(), w.end());
      std::sort(sorted.begin(), sorted.end());
      for (const double pc : percentiles) {
        const double lo = detail::sorted_percentile(sorted, (100.0 - pc) / 2.0);
        const double hi = detail::sorted_percentile(sorted, 100.0 - (100.0 - pc) / 2.0);
        const auto [s, zp] = consider(lo, hi);
        if (std::find(seen.begin(), seen.end(), s) != seen.end())
          continue;
        seen.push_back(s);
        take(lo, hi, s, zp, detail::fq_mse(w, s, zp, qmin, qmax));
      }
      return best;
    }
    // 3b. HistCenter / All: B = min(2048, size) signed bins over [min, max]; windows of the bin
    //     centres from the central half up to the whole range (detail::minmse_windows).
    const std::size_t bins = std::min<std::size_t>(2048, w.size());
    histogram_observer h{{.mode = histogram_mode::signed_extend, .num_bins = bins}};
    h.observe(w);
    if (mode == minmse_float_mode::hist_center)
      return detail::hist_center_windows(h.stats(), grid, symmetry);
    return detail::minmse_windows(h.stats(), grid, symmetry,
                                  [&](const histogram_data&, float s, float zp, float lo,
                                      float hi) { return detail::fq_mse(w, s, zp, lo, hi); });
  }
};

/// Float-scale MinMSE of a streamed activation (quark-cpp's reading of CalibMethod.MinMSE with a
/// Float32 scale, quark-spec "Decisions" 1: "search for a float scale that minimizes MSE"): the
/// HistCenter search of the weights' float MinMSE on the tensor's signed [min, max] histogram
/// (`histogram_mode::signed_extend`, NumBins bins): windows of the bin centres from the central
/// half of the bins to all of them, each window's float scale (compute_scale_zp's rule on
/// `grid`), error = the count-weighted squared fake-quantization error of the bin centres, first
/// minimum. The result's range reproduces the chosen scale when fed to compute_qparams.
///
/// ```cpp
/// quark::histogram_observer h{{.mode = quark::histogram_mode::signed_extend}};
/// h.observe(batch);
/// quark::calibrated_range r = quark::float_minmse_hist_calibrator{{-127, 127}}(h.stats());
/// ```
/// Throws "quark.calib.empty_input" for a histogram that saw no value.
struct float_minmse_hist_calibrator {
  int_grid grid{-127, 127};
  range_symmetry symmetry = range_symmetry::symmetric;

  [[nodiscard]] calibrated_range operator()(const histogram_data& h) const {
    if (h.empty() || h.edges.size() != h.counts.size() + 1)
      detail::throw_invalid("quark.calib.empty_input", "float MinMSE: the histogram saw no value");
    return detail::hist_center_windows(h, grid, symmetry);
  }
};

/// WeightCalibrateMethod.
enum class weight_calibrate_method : std::uint8_t { minmax, minmse };

/// Weight range (quark-spec §4.8): MinMax gives [min(w), max(w)] ((0, 0) for an empty tensor, as
/// Quark); MinMSE runs float_minmse_calibrator. NaN in a weight throws "quark.calib.nan_range".
///
/// ```cpp
/// quark::calibrated_range r = quark::calibrate_weight(w, quark::weight_calibrate_method::minmax);
/// ```
inline calibrated_range calibrate_weight(std::span<const float> w, weight_calibrate_method method,
                                         const float_minmse_calibrator& minmse = {}) {
  if (method == weight_calibrate_method::minmse)
    return minmse(w);
  calibrated_range r;
  if (w.empty())
    return r;
  r.min = std::numeric_limits<float>::infinity();
  r.max = -std::numeric_limits<float>::infinity();
  for (const float v : w) {
    if (v != v)
      detail::throw_invalid("quark.calib.nan_range", "weight holds NaN");
    r.min = v < r.min ? v : r.min;
    r.max = v > r.max ? v : r.max;
  }
  return r;
}

}  // namespace quark
