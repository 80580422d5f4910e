// SPDX-License-Identifier: MIT
// One runtime-configured calibrator per activation tensor: the method and options of Quark's
// extra options (quark-spec §4, seed 000) pick the observer(s), batches are streamed in, and the
// result is a calibrated_range (or FP8 Distribution statistics) for to_qparams. This is what a
// runtime-configured caller such as the ONNX quantizer drives; the typed observers and
// calibrators remain available directly.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <vector>

#include <quark/calib/calib_result.hpp>
#include <quark/calib/distribution_calibrator.hpp>
#include <quark/calib/entropy_calibrator.hpp>
#include <quark/calib/minmax_calibrator.hpp>
#include <quark/calib/mse_calibrator.hpp>
#include <quark/calib/percentile_calibrator.hpp>
#include <quark/calib/pof2_calibrator.hpp>
#include <quark/observer/histogram_observer.hpp>
#include <quark/observer/minmax_observer.hpp>

namespace quark {

/// CalibMovingAverage.
enum class moving_average : std::uint8_t { off, on };

/// The calibration options of one tensor (Quark's extra options; unset optionals take the
/// method's default of quark-spec §4.0).
struct calib_options {
  calib_method method = calib_method::minmax;
  std::optional<range_symmetry> symmetry = std::nullopt;  ///< CalibTensorRangeSymmetric
  moving_average average = moving_average::off;
  float moving_average_constant = 0.01f;  ///< CalibMovingAverageConstant
  std::optional<std::size_t> num_bins =
      std::nullopt;                      ///< NumBins (2048; Entropy 128; pof2 MinMSE 0 = raw)
  std::size_t num_quantized_bins = 128;  ///< NumQuantizedBins
  double percentile = 99.999;            ///< Percentile
  std::vector<double> percentile_candidates{99.99, 99.999, 99.99999};  ///< PercentileCandidates
  lwp_metric metric = lwp_metric::mae;                                 ///< LWPMetric
  pof2_minmse_mode minmse_mode = pof2_minmse_mode::all;                ///< MinMSEModePof2Scale
  distribution_scenario scenario = distribution_scenario::same;
  /// Full integer grid of the activation type (e.g. grid_of<std::uint8_t>(range_table::full)):
  /// LayerwisePercentile scores on it, the pof2 methods on its symmetric table.
  int_grid grid{-128, 127};
};

/// Streams the batches of one tensor and calibrates it.
///
/// ```cpp
/// quark::tensor_calibrator cal{{.method = quark::calib_method::percentile}};
/// for (auto batch : batches) cal.observe(batch);
/// if (cal.needs_second_pass()) { cal.begin_second_pass(); for (auto b : batches)
/// cal.observe_second(b); } quark::calibrated_range r = cal.result(); auto p =
/// quark::to_qparams<std::uint8_t>(r);
/// ```
/// LayerwisePercentile's second pass scores the candidates on this tensor's values (Quark's
/// per-tensor metric); `lwp_candidates()` + `layerwise_percentile_calibrator::select` take a
/// model-output metric instead.
class tensor_calibrator {
 public:
  explicit tensor_calibrator(calib_options o) : opt_(std::move(o)) {
    const range_symmetry sym = symmetry();
    switch (opt_.method) {
      case calib_method::minmax:
      case calib_method::pof2_non_overflow:
        if (opt_.average == moving_average::on) {
          ema_.emplace(opt_.moving_average_constant);
        } else {
          mm_.emplace();
        }
        break;
      case calib_method::percentile:
      case calib_method::layerwise_percentile:
        hist_.emplace(histogram_options{.mode = sym == range_symmetry::symmetric
                                                    ? histogram_mode::absolute
                                                    : histogram_mode::signed_symmetric,
                                        .num_bins = opt_.num_bins.value_or(2048)});
        break;
      case calib_method::entropy:
      case calib_method::distribution:
        hist_.emplace(histogram_options{
            .mode = histogram_mode::signed_symmetric,
            .num_bins = opt_.num_bins.value_or(opt_.method == calib_method::entropy ? 128 : 2048)});
        break;
      case calib_method::pof2_minmse:
        detail::require_symmetric(sym);
        if (opt_.minmse_mode == pof2_minmse_mode::most_common) {
          mc_.emplace(pof2_grid());
        } else if (opt_.num_bins.value_or(2048) == 0) {
          mm_.emplace(nan_policy::ignore);
        } else {
          hist_.emplace(histogram_options{.mode = histogram_mode::signed_extend,
                                          .num_bins = opt_.num_bins.value_or(2048),
                                          .non_finite = non_finite_policy::to_finite});
        }
        break;
      case calib_method::float_minmse:
        // Activations: the HistCenter search on a signed [min, max] histogram
        // (float_minmse_hist_calibrator); weights take float_minmse_calibrator directly.
        if (opt_.num_bins.value_or(2048) == 0) {
          detail::throw_config("quark.calib.bad_option",
                               "float-scale MinMSE searches a histogram: NumBins must be positive "
                               "(NumBins 0, raw data, is power-of-two MinMSE's)");
        }
        hist_.emplace(histogram_options{.mode = histogram_mode::signed_extend,
                                        .num_bins = opt_.num_bins.value_or(2048)});
        break;
    }
  }

  [[nodiscard]] const calib_options& options() const noexcept { return opt_; }
  [[nodiscard]] range_symmetry symmetry() const noexcept {
    return opt_.symmetry.value_or(default_range_symmetry(opt_.method));
  }

  /// First pass: one calibration batch of this tensor.
  void observe(std::span<const float> x) {
    if (mm_)
      mm_->observe(x);
    if (ema_)
      ema_->observe(x);
    if (hist_)
      hist_->observe(x);
    if (mc_)
      mc_->observe(x);
  }

  /// Combines another calibrator's first pass (same options), e.g. from another thread.
  void merge(const tensor_calibrator& o) {
    if (ema_)
      detail::throw_config("quark.calib.merge_unsupported", "moving averages cannot be merged");
    if (mm_ && o.mm_)
      mm_->merge(*o.mm_);
    if (hist_ && o.hist_)
      hist_->merge(*o.hist_);
    if (mc_ && o.mc_)
      mc_->merge(*o.mc_);
  }

  /// pof2 MinMSE on raw data (NumBins = 0) and LayerwisePercentile need the batches twice.
  [[nodiscard]] bool needs_second_pass() const noexcept {
    return opt_.method == calib_method::layerwise_percentile ||
           (opt_.method == calib_method::pof2_minmse && mm_.has_value());
  }
  void begin_second_pass() {
    if (opt_.method == calib_method::layerwise_percentile) {
      cands_ = lwp().candidates(hist_->stats());
      scorer_.emplace(cands_, opt_.grid, opt_.metric);
    } else if (needs_second_pass()) {
      sse_.emplace(mm_->stats(), pof2_grid());
    }
  }
  void observe_second(std::span<const float> x) {
    if (scorer_)
      scorer_->observe(x);
    if (sse_)
      sse_->observe(x);
  }

  /// The LayerwisePercentile candidates (after the first pass).
  [[nodiscard]] std::vector<calibrated_range> lwp_candidates() const {
    return lwp().candidates(hist_->stats());
  }

  /// The calibrated range. Throws the calibrators' stable errors (empty input, all NaN, ...).
  [[nodiscard]] calibrated_range result() const {
    const range_symmetry sym = symmetry();
    switch (opt_.method) {
      case calib_method::minmax:
        return minmax_calibrator{sym}(first_range());
      case calib_method::pof2_non_overflow:
        return pof2_non_overflow_calibrator{pof2_grid(), sym}(first_range());
      case calib_method::percentile:
        return percentile_calibrator{opt_.percentile}(hist_->stats());
      case calib_method::entropy:
        return entropy_calibrator{opt_.num_quantized_bins, sym}(hist_->stats());
      case calib_method::layerwise_percentile: {
        if (!scorer_)
          detail::throw_invalid("quark.calib.second_pass_missing",
                                "LayerwisePercentile needs begin_second_pass()");
        return lwp().select(
            cands_, [&](std::size_t i, const calibrated_range&) { return scorer_->errors()[i]; });
      }
      case calib_method::pof2_minmse:
        if (mc_)
          return mc_->result();
        if (hist_)
          return pof2_minmse_calibrator{pof2_grid(), sym}(hist_->stats());
        if (!sse_)
          detail::throw_invalid("quark.calib.second_pass_missing",
                                "raw pof2 MinMSE needs begin_second_pass()");
        return sse_->result();
      case calib_method::distribution: {
        // Distribution has no range; report the observed one (FP8 uses distribution()).
        calibrated_range r = detail::checked_range(hist_->stats().range);
        if (sym == range_symmetry::symmetric)
          detail::symmetrize(r);
        return r;
      }
      case calib_method::float_minmse:
        return float_minmse_hist_calibrator{
            sym == range_symmetry::symmetric ? pof2_grid() : opt_.grid, sym}(hist_->stats());
    }
    detail::throw_config("quark.calib.bad_option", "unsupported method");
  }

  /// FP8 Distribution statistics (method distribution).
  [[nodiscard]] distribution_stats distribution() const {
    if (!hist_)
      detail::throw_config("quark.calib.bad_option",
                           "distribution() needs calib_method::distribution");
    return distribution_calibrator{opt_.scenario}(hist_->stats());
  }

  /// The first-pass observers, for serialisation (observer/json.hpp) or inspection.
  [[nodiscard]] const std::optional<minmax_observer>& minmax() const noexcept { return mm_; }
  [[nodiscard]] const std::optional<histogram_observer>& histogram() const noexcept {
    return hist_;
  }

 private:
  [[nodiscard]] layerwise_percentile_calibrator lwp() const {
    return {opt_.percentile_candidates, opt_.metric};
  }
  [[nodiscard]] range_stats first_range() const { return mm_ ? mm_->stats() : ema_->stats(); }
  /// The symmetric table of the grid (signed >= 8 bits: -qmax..qmax), quark-spec §1.2.
  [[nodiscard]] int_grid pof2_grid() const noexcept {
    const int_grid g = opt_.grid;
    return g.qmin == -g.qmax - 1 && g.qmax >= 127 ? int_grid{-g.qmax, g.qmax} : g;
  }

  calib_options opt_;
  std::optional<minmax_observer> mm_;
  std::optional<moving_average_observer> ema_;
  std::optional<histogram_observer> hist_;
  std::optional<pof2_most_common_observer> mc_;
  std::optional<pof2_sse_observer> sse_;
  std::optional<lwp_scorer> scorer_;
  std::vector<calibrated_range> cands_;
};

}  // namespace quark
