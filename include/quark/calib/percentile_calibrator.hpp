// SPDX-License-Identifier: MIT
// Percentile and LayerwisePercentile calibrators (quark-spec §4.2, §4.5). Both read a
// histogram_observer: `absolute` mode gives Quark's symmetric percentile (left edge of the bin
// where the CDF first reaches p/100, range (-t, t)), a signed mode the two-sided cut of
// (100 - p)/200 on each side. The result is clamped to the observed [min, max] (Quark's choice,
// kept: decision 2).
#pragma once

#include <cstddef>
#include <functional>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include <quark/calib/calib_result.hpp>
#include <quark/calib/detail/grid.hpp>
#include <quark/observer/histogram_observer.hpp>

namespace quark {

namespace detail {
/// First bin index whose normalised cumulative count is >= q (numpy searchsorted, side left),
/// in [0, n].
inline std::size_t cdf_search(std::span<const std::uint64_t> counts, double total,
                              double q) noexcept {
  std::uint64_t acc = 0;
  for (std::size_t i = 0; i < counts.size(); ++i) {
    acc += counts[i];
    if (static_cast<double>(acc) / total >= q)
      return i;
  }
  return counts.size();
}

inline void require_histogram(const histogram_data& h) {
  require_values(h.range);
  if (h.total() == 0)
    throw_invalid("quark.calib.empty_input", "the histogram holds no count");
}
}  // namespace detail

namespace detail {
/// Bins whose left edges are the thresholds of `percentile`: `absolute` mode uses `upper`
/// only (the range is (-edge, edge)), a signed mode both.
struct percentile_bins_t {
  std::size_t lower = 0;
  std::size_t upper = 0;
};
inline percentile_bins_t percentile_bins(const histogram_data& h, double percentile) noexcept {
  const double total = static_cast<double>(h.total());
  if (h.mode == histogram_mode::absolute)
    return {0, cdf_search(h.counts, total, percentile / 100.0)};
  const double cut = (100.0 - percentile) / 200.0;
  return {cdf_search(h.counts, total, cut), cdf_search(h.counts, total, 1.0 - cut)};
}

/// Whether a search that ends at bin `i` ends where the unlumped histogram's would.
inline bool settled(const histogram_data& h, std::size_t i) noexcept {
  return h.lump_end == 0 || i <= h.lump_begin || i >= h.lump_end;
}

inline bool settled(const histogram_data& h, percentile_bins_t b) noexcept {
  return settled(h, b.upper) && (h.mode == histogram_mode::absolute || settled(h, b.lower));
}
}  // namespace detail

/// Whether `percentile` of `h` is the one its unlumped histogram gives (histogram_data::
/// lump_begin, lump_end): always, unless the histogram is lumped and a threshold's bin lies in
/// the lumped bins. Prefix sums before the lumped bins, and from their last on, are exact; the
/// ones inside are at most the true ones. So a search (first bin whose CDF reaches q) that ends
/// at lump_begin or before, or at lump_end or above, ends where the true search does; one that
/// ends further inside cannot be confirmed (the true one may end before it).
[[nodiscard]] inline bool percentile_decided(const histogram_data& h, double percentile) noexcept {
  if (h.lump_end == 0 || h.total() == 0)
    return true;
  return detail::settled(h, detail::percentile_bins(h, percentile));
}

/// Percentile calibrator (defaults: Percentile 99.999; the histogram decides symmetric or not:
/// `histogram_mode::absolute` is Quark's symmetric default, CalibTensorRangeSymmetric=True).
///
/// ```cpp
/// quark::histogram_observer h{{.mode = quark::histogram_mode::absolute, .num_bins = 2048}};
/// h.observe(batch);
/// quark::calibrated_range r = quark::percentile_calibrator{.percentile = 99.999}(h.stats());
/// ```
struct percentile_calibrator {
  double percentile = 99.999;

  [[nodiscard]] calibrated_range operator()(const histogram_data& h) const {
    // 1. Validate.
    detail::require_histogram(h);
    if (!(percentile >= 0.0 && percentile <= 100.0)) {
      detail::throw_config("quark.calib.bad_option", "Percentile must lie in [0, 100]");
    }
    // 2. Threshold edges: left edge of the crossing bin, searched once.
    const detail::percentile_bins_t bins = detail::percentile_bins(h, percentile);
    if (!detail::settled(h, bins)) {
      detail::throw_invalid("quark.calib.lumped",
                            "the percentile lies in the lumped bins of the histogram: observe "
                            "the data again without lumping");
    }
    calibrated_range r;
    if (h.mode == histogram_mode::absolute) {
      const double t = h.edges[bins.upper];
      r.min = static_cast<float>(-t);
      r.max = static_cast<float>(t);
    } else {
      r.min = static_cast<float>(h.edges[bins.lower]);
      r.max = static_cast<float>(h.edges[bins.upper]);
    }
    // 3. Clamp to the observed signed extrema.
    r.min = r.min > h.range.min ? r.min : h.range.min;
    r.max = r.max < h.range.max ? r.max : h.range.max;
    return r;
  }
};

/// LWPMetric.
enum class lwp_metric : std::uint8_t { mae, mse };

/// LayerwisePercentile (quark-spec §4.5): percentile candidates on the same histogram; the
/// candidate with the smallest caller-measured error wins (first on ties). The error needs model
/// outputs or a second pass over the data, so it comes from a callback, or from `lwp_scorer`
/// which reproduces Quark's per-tensor scoring in one streaming pass.
///
/// ```cpp
/// quark::layerwise_percentile_calibrator cal;              // {99.99, 99.999, 99.99999}, mae
/// auto cands = cal.candidates(h.stats());
/// quark::lwp_scorer score{cands, {-128, 127}, cal.metric};
/// for (auto sample : samples) score.observe(sample);       // second pass
/// quark::calibrated_range r = cal.select(cands, [&](std::size_t i, const auto&) { return
/// score.errors()[i]; });
/// ```
struct layerwise_percentile_calibrator {
  std::vector<double> percentile_candidates{99.99, 99.999, 99.99999};
  lwp_metric metric = lwp_metric::mae;

  [[nodiscard]] std::vector<calibrated_range> candidates(const histogram_data& h) const {
    if (percentile_candidates.empty()) {
      detail::throw_config("quark.calib.bad_option", "PercentileCandidates is empty");
    }
    std::vector<calibrated_range> out;
    out.reserve(percentile_candidates.size());
    for (const double p : percentile_candidates)
      out.push_back(percentile_calibrator{p}(h));
    return out;
  }

  /// `error(index, candidate)` returns the candidate's error (lower is better).
  template <class Eval>
    requires std::is_invocable_r_v<double, Eval&, std::size_t, const calibrated_range&>
  [[nodiscard]] calibrated_range select(const std::vector<calibrated_range>& cands,
                                        Eval&& error) const {
    if (cands.empty())
      detail::throw_config("quark.calib.bad_option", "no candidate to select from");
    std::size_t best = 0;
    double best_err = std::numeric_limits<double>::infinity();
    for (std::size_t i = 0; i < cands.size(); ++i) {
      const double e = static_cast<double>(error(i, cands[i]));
      if (e < best_err) {
        best_err = e;
        best = i;
      }
    }
    return cands[best];
  }

  template <class Eval>
    requires std::is_invocable_r_v<double, Eval&, std::size_t, const calibrated_range&>
  [[nodiscard]] calibrated_range operator()(const histogram_data& h, Eval&& error) const {
    return select(candidates(h), std::forward<Eval>(error));
  }
};

/// Quark's LayerwisePercentile scoring for one tensor, streamed: per calibration sample and
/// candidate, the mean |x - x^| (mae) or (x - x^)^2 (mse) on the full asymmetric grid with
/// scale = (max - min)/(qmax - qmin) + 1e-6 and zpL = RNE(min/scale - qmin), summed over samples.
///
/// ```cpp
/// quark::lwp_scorer s{cands, {-128, 127}, quark::lwp_metric::mae};
/// s.observe(sample);   // one calibration sample of this tensor
/// ```
class lwp_scorer {
 public:
  lwp_scorer(const std::vector<calibrated_range>& cands, int_grid grid, lwp_metric metric)
      : grid_(grid), metric_(metric), errors_(cands.size(), 0.0) {
    for (const calibrated_range& c : cands) {
      const double scale = (static_cast<double>(c.max) - static_cast<double>(c.min)) /
                               static_cast<double>(grid.qmax - grid.qmin) +
                           1e-6;
      const double zp =
          detail::round_even(static_cast<double>(c.min) / scale - static_cast<double>(grid.qmin));
      params_.push_back({scale, zp});
    }
  }

  /// Scores one sample (an empty sample adds nothing).
  void observe(std::span<const float> x) {
    if (x.empty())
      return;
    const double qmin = static_cast<double>(grid_.qmin);
    const double qmax = static_cast<double>(grid_.qmax);
    for (std::size_t k = 0; k < params_.size(); ++k) {
      const auto [scale, zp] = params_[k];
      double sum = 0.0;
      for (const float v : x) {
        const auto xv = static_cast<double>(v);
        double q = detail::round_even(xv / scale - zp);
        q = q < qmin ? qmin : (q > qmax ? qmax : q);
        const double d = xv - (q + zp) * scale;
        sum += metric_ == lwp_metric::mae ? std::fabs(d) : d * d;
      }
      errors_[k] += sum / static_cast<double>(x.size());
    }
  }
  [[nodiscard]] std::span<const double> errors() const noexcept { return errors_; }

 private:
  struct grid_point {
    double scale;
    double zp;
  };
  int_grid grid_;
  lwp_metric metric_;
  std::vector<grid_point> params_;
  std::vector<double> errors_;
};

}  // namespace quark
