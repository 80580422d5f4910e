// SPDX-License-Identifier: MIT
// MinMax and power-of-two NonOverflow calibrators (quark-spec §4.1, §4.6, §2.2): the observed
// range, optionally made symmetric (CalibTensorRangeSymmetric), and for NonOverflow the
// power-of-two position of the resulting scale.
#pragma once

#include <cmath>
#include <string>

#include <quark/calib/calib_result.hpp>
#include <quark/calib/detail/grid.hpp>
#include <quark/observer/range_stats.hpp>
#include <quark/scale/pow2_scale.hpp>

namespace quark {

namespace detail {
inline calibrated_range checked_range(const range_stats& s) {
  require_values(s);
  if (std::isnan(s.min) || std::isnan(s.max)) {
    throw_invalid(
        "quark.calib.nan_range",
        std::to_string(s.nan_count) + " NaN value(s) were observed (nan_policy::propagate)");
  }
  calibrated_range r;
  r.min = s.min;
  r.max = s.max;
  return r;
}
}  // namespace detail

/// MinMax: the observed [min, max] (from minmax_observer or moving_average_observer).
/// Infinite extrema are passed through (compute_scale_zp clamps them to +-FLT_MAX/2).
///
/// ```cpp
/// quark::minmax_observer obs;  obs.observe(batch);
/// quark::calibrated_range r = quark::minmax_calibrator{}(obs.stats());
/// ```
/// Throws "quark.calib.empty_input", "quark.calib.all_nan" or "quark.calib.nan_range".
struct minmax_calibrator {
  range_symmetry symmetry = default_range_symmetry(calib_method::minmax);

  [[nodiscard]] calibrated_range operator()(const range_stats& s) const {
    calibrated_range r = detail::checked_range(s);
    if (symmetry == range_symmetry::symmetric)
      detail::symmetrize(r);
    return r;
  }
};

/// Power-of-two NonOverflow: MinMax (symmetric by default), then the position
/// rint(-log2 s) of the float scale on `grid` (quark-spec §2.2: the nearest power of two, which
/// may clip by up to sqrt(2); `pow2_rounding::ceil` gives a true non-overflow position).
///
/// ```cpp
/// quark::pof2_non_overflow_calibrator cal{.grid = {-128, 127}};
/// auto r = cal(obs.stats());   // *r.pof2_position == 7 for absmax 1.4 (quark-spec §2.2)
/// ```
struct pof2_non_overflow_calibrator {
  int_grid grid{-128, 127};
  range_symmetry symmetry = default_range_symmetry(calib_method::pof2_non_overflow);
  pow2_rounding rounding = pow2_rounding::nearest_log2;

  [[nodiscard]] calibrated_range operator()(const range_stats& s) const {
    calibrated_range r = minmax_calibrator{symmetry}(s);
    const double lo = std::isinf(r.min)
                          ? -static_cast<double>(std::numeric_limits<float>::max()) / 2.0
                          : static_cast<double>(r.min);
    const double hi = std::isinf(r.max)
                          ? static_cast<double>(std::numeric_limits<float>::max()) / 2.0
                          : static_cast<double>(r.max);
    const detail::grid_params p = detail::scale_zp(lo, hi, grid, symmetry);
    scale_projection proj;
    proj.pow2 = rounding;
    r.pof2_position =
        scale_traits<pow2_scale>::from_float(static_cast<float>(p.scale), proj).position();
    return r;
  }
};

}  // namespace quark
