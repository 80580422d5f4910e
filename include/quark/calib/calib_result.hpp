// SPDX-License-Identifier: MIT
// What a calibrator returns: a calibrated range (rmin, rmax) ready for compute_scale_zp
// (quark-spec §3.1), warnings the user can see, and, for methods that search scales themselves
// (MinMSE power-of-two, MinMSE float scale), the scale they chose. Also the per-method defaults
// of CalibTensorRangeSymmetric (quark-spec §3.6) and the integer grid type.
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <quark/observer/range_stats.hpp>

namespace quark {

/// The calibration methods of quark-spec §4 (internal Quark enums).
enum class calib_method : std::uint8_t {
  minmax,                ///< CalibrationMethod.MinMax
  percentile,            ///< CalibrationMethod.Percentile
  entropy,               ///< CalibrationMethod.Entropy
  distribution,          ///< CalibrationMethod.Distribution (FP8)
  layerwise_percentile,  ///< LayerWiseMethod.LayerWisePercentile
  pof2_non_overflow,     ///< PowerOfTwoMethod.NonOverflow
  pof2_minmse,           ///< PowerOfTwoMethod.MinMSE
  float_minmse,          ///< MinMSE with a float scale (weights: ExtendedCalibrationMethod.MinMSE)
};

/// Whether the calibrator returns a range symmetric around 0 (CalibTensorRangeSymmetric).
enum class range_symmetry : std::uint8_t { asymmetric, symmetric };

/// Quark's default CalibTensorRangeSymmetric per method (quark-spec §3.6).
///
/// ```cpp
/// static_assert(quark::default_range_symmetry(quark::calib_method::percentile) ==
///               quark::range_symmetry::symmetric);
/// ```
constexpr range_symmetry default_range_symmetry(calib_method m) noexcept {
  switch (m) {
    case calib_method::pof2_non_overflow:
    case calib_method::pof2_minmse:
    case calib_method::float_minmse:
    case calib_method::percentile:
    case calib_method::layerwise_percentile:
      return range_symmetry::symmetric;
    default:
      return range_symmetry::asymmetric;
  }
}

/// An integer grid [qmin, qmax] (e.g. INT8 symmetric table -127..127).
struct int_grid {
  std::int64_t qmin = -128;
  std::int64_t qmax = 127;
  friend constexpr bool operator==(const int_grid&, const int_grid&) = default;
};

/// Whether a result's scale was searched by the method (MinMSE) or only follows from its range.
enum class scale_origin : std::uint8_t {
  range,     ///< compute_qparams derives the scale from [min, max]
  searched,  ///< the method chose the scale; to_qparams keeps it exactly
};

/// Result of a calibrator.
///
/// ```cpp
/// quark::calibrated_range r = quark::minmax_calibrator{}(obs.stats());
/// for (const auto& w : r.warnings) std::clog << w << '\n';
/// ```
struct calibrated_range {
  float min = 0.0f;
  float max = 0.0f;
  /// Human-readable warnings (e.g. an Entropy scan with a single candidate).
  std::vector<std::string> warnings;
  /// Power-of-two position (scale = 2^-position) of the pof2 methods.
  std::optional<int> pof2_position;
  /// `searched` for MinMSE results: to_qparams keeps pof2_position / scale and zero_point.
  scale_origin origin = scale_origin::range;
  /// Float scale and zero point chosen by the method, when it searched one (float MinMSE).
  std::optional<float> scale;
  std::optional<std::int64_t> zero_point;
};

/// FP8 Distribution statistics (quark-spec §4.4).
struct distribution_stats {
  double mean = 0.0;
  double std_dev = 0.0;
};

namespace detail {
/// (-m, m) with m = max(|min|, |max|); NaN stays NaN.
inline void symmetrize(calibrated_range& r) noexcept {
  const float m = std::fmax(std::fabs(r.min), std::fabs(r.max));
  if (std::isnan(r.min) || std::isnan(r.max))
    return;
  r.min = -m;
  r.max = m;
}

/// Throws the stable errors for a statistic without values.
inline void require_values(const range_stats& s) {
  if (s.count == 0) {
    if (s.nan_count > 0)
      throw_invalid("quark.calib.all_nan", "every observed value is NaN");
    throw_invalid("quark.calib.empty_input", "no value was observed");
  }
}
}  // namespace detail

}  // namespace quark
