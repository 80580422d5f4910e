// SPDX-License-Identifier: MIT
// Distribution calibrator for FP8 (quark-spec §4.4): mean and standard deviation of a signed
// histogram's bin centres weighted by the counts; scenario "p3" first maps each centre v to
// sign(v) |v|^(1/3). The FP8 scale is then std / (std of the FP8 grid) (quark-spec §1.6).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include <quark/calib/calib_result.hpp>
#include <quark/calib/percentile_calibrator.hpp>
#include <quark/observer/histogram_observer.hpp>

namespace quark {

/// The Distribution "scenario" option.
enum class distribution_scenario : std::uint8_t { same, p3 };

/// Distribution calibrator (NumBins >= 512 required, default 2048; scenario "same").
///
/// ```cpp
/// quark::histogram_observer h{{.mode = quark::histogram_mode::signed_symmetric, .num_bins =
/// 2048}}; h.observe(batch); quark::distribution_stats d =
/// quark::distribution_calibrator{}(h.stats());   // d.mean, d.std_dev
/// ```
struct distribution_calibrator {
  distribution_scenario scenario = distribution_scenario::same;
  std::size_t min_bins = 512;

  [[nodiscard]] distribution_stats operator()(const histogram_data& h) const {
    detail::require_histogram(h);
    if (h.bins() < min_bins) {
      detail::throw_config("quark.calib.bad_option", "Distribution needs NumBins >= 512");
    }
    // 1. Weighted first and second moments of the (transformed) centres.
    double s0 = 0.0;
    double s1 = 0.0;
    double s2 = 0.0;
    for (std::size_t i = 0; i < h.bins(); ++i) {
      double v = (h.edges[i] + h.edges[i + 1]) / 2.0;
      if (scenario == distribution_scenario::p3)
        v = std::copysign(std::pow(std::fabs(v), 1.0 / 3.0), v);
      const double c = static_cast<double>(h.counts[i]);
      s0 += c;
      s1 += c * v;
      s2 += c * v * v;
    }
    // 2. Mean and population standard deviation (variance clamped at 0 against rounding).
    distribution_stats d;
    d.mean = s1 / s0;
    const double var = s2 / s0 - d.mean * d.mean;
    d.std_dev = std::sqrt(var > 0.0 ? var : 0.0);
    return d;
  }
};

}  // namespace quark
