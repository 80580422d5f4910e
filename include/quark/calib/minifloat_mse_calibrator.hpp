// SPDX-License-Identifier: MIT
// MinMSE for the small float types (FP8 E4M3FN / E4M3FNUZ / E5M2 / E5M2FNUZ, FP6, FP4): the
// scale that minimises the squared quantization error of a tensor's histogram. Quark maps every
// MinMSE activation to its integer power-of-two search (quark-spec §4.7, "anything else treated
// as Int8"), which has no meaning for a float grid; this is quark-cpp's reading of MinMSE on a
// float spec (docs/compatibility.md): the same searches as the integer ones, with the float
// type's own rounding and saturation in the error.
//   * Float32 scale: the HistCenter windows of float_minmse_hist_calibrator (bin centres from the
//     central half of the bins to all of them); each window's scale is compute_qparams<D>'s rule
//     (absmax / largest finite value, zero point 0).
//   * PowerOf2 scale: the five candidates 2^-(pos + i - 1), i = 0..4, of pof2_minmse_calibrator,
//     `pos` the position of the min/max scale (nearest power of two in log2, quark-spec §2.2).
// The error of a candidate is sum over bins of count * (c - fq(c))^2, c the float32 bin centre
// and fq quark::fake_quant<D> (saturating, round half to even: ONNX QuantizeLinear ->
// DequantizeLinear); the first minimum wins. The returned range reproduces the chosen scale
// when fed to compute_qparams<D> (and pof2_position is set for a power-of-two result).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include <quark/calib/calib_result.hpp>
#include <quark/calib/mse_calibrator.hpp>
#include <quark/calib/pof2_calibrator.hpp>
#include <quark/core/concepts.hpp>
#include <quark/dtype/traits.hpp>
#include <quark/observer/histogram_observer.hpp>
#include <quark/quant/fake_quant.hpp>
#include <quark/scale/qparams.hpp>

namespace quark {

/// MinMSE over a histogram for small float type D.
///
/// ```cpp
/// quark::histogram_observer h{{.mode = quark::histogram_mode::signed_extend}};
/// h.observe(batch);
/// quark::calibrated_range r =
/// quark::minifloat_minmse_calibrator<quark::float8_e4m3fn>{}(h.stats()); auto p =
/// quark::compute_qparams<quark::float8_e4m3fn>({r.min, r.max});   // p.scale == *r.scale
/// ```
/// Throws "quark.calib.empty_input" for a histogram that saw no value.
template <quantized_type D>
  requires(floating_data_type<D>&& dtype_traits<D>::bits <= 8)
struct minifloat_minmse_calibrator {
  /// PowerOf2 scale type: the five power-of-two candidates instead of the windows.
  bool power_of_two = false;

  [[nodiscard]] calibrated_range operator()(const histogram_data& h) const {
    if (h.empty() || h.edges.size() != h.counts.size() + 1)
      detail::throw_invalid("quark.calib.empty_input", "MinMSE: the histogram saw no value");
    const std::size_t bins = h.counts.size();
    std::vector<float> c(bins);
    for (std::size_t i = 0; i < bins; ++i)
      c[i] = static_cast<float>((h.edges[i] + h.edges[i + 1]) / 2.0);
    auto error = [&](float s) {
      const fake_quant<D> fq(s);
      double err = 0.0;
      for (std::size_t i = 0; i < bins; ++i) {
        if (h.counts[i] == 0)
          continue;
        const double e = static_cast<double>(fq(c[i])) - static_cast<double>(c[i]);
        err += static_cast<double>(h.counts[i]) * e * e;
      }
      return err;
    };
    constexpr double top = static_cast<double>(dtype_traits<D>::max());
    if (!power_of_two) {
      // The windows of float-scale MinMSE, each with this type's min/max rule.
      return detail::minmse_windows_by(
          h,
          [](double lo, double hi) {
            const float s =
                compute_qparams<D>(value_range{static_cast<float>(lo), static_cast<float>(hi)})
                    .scale.value;
            return detail::grid_params{static_cast<double>(s), 0};
          },
          [&](float s, float) { return error(s); });
    }
    calibrated_range best;
    best.origin = scale_origin::searched;
    double best_err = std::numeric_limits<double>::infinity();
    const double amax = std::fmax(std::fabs(h.edges.front()), std::fabs(h.edges.back()));
    const double s0 = amax / top;
    // The min/max position: rint(-log2 s) (quark-spec §2.2); an all-zero tensor gives 0.
    const int pos = s0 > 0.0 ? static_cast<int>(std::nearbyint(-std::log2(s0))) : 0;
    for (int i = 0; i < detail::pof2_candidates; ++i) {
      const float s = detail::candidate_scale(pos, i);
      const double err = error(s);
      if (err < best_err) {
        best_err = err;
        best.pof2_position = pos + i - 1;
        best.scale = s;
      }
    }
    const auto m = static_cast<float>(top * static_cast<double>(*best.scale));  // exact
    best.min = -m;
    best.max = m;
    best.zero_point = 0;
    return best;
  }

  /// The same search on the histogram of a tensor in memory (a weight, or one of its channels):
  /// `num_bins` bins over its [min, max]. NaN / Inf in `w` throw "quark.calib.non_finite_input".
  [[nodiscard]] calibrated_range operator()(std::span<const float> w,
                                            std::size_t num_bins = 2048) const {
    if (w.empty())
      detail::throw_invalid("quark.calib.empty_input", "MinMSE: empty tensor");
    for (const float v : w) {
      if (!std::isfinite(v))
        detail::throw_invalid("quark.calib.non_finite_input", "MinMSE: NaN or Inf in the tensor");
    }
    histogram_observer obs{{.mode = histogram_mode::signed_extend, .num_bins = num_bins}};
    obs.observe(w);
    return (*this)(obs.stats());
  }
};

}  // namespace quark
