// SPDX-License-Identifier: MIT
// From a calibrator's result to quantization parameters of any data type and scale kind, through
// compute_qparams (scale/qparams.hpp, quark-spec §3). Methods that searched a scale themselves
// (origin == scale_origin::searched) keep it exactly: the float MinMSE scale and zero point, the
// pof2 MinMSE position. Other results (NonOverflow included: its position is the same rint rule
// compute_qparams applies, or ceil through qparam_options::projection) follow their range. Also the
// bridge from data types to the integer grids the searching calibrators take.
#pragma once

#include <cstdint>

#include <quark/calib/calib_result.hpp>
#include <quark/core/concepts.hpp>
#include <quark/scale/pow2_scale.hpp>
#include <quark/scale/qparams.hpp>
#include <quark/scale/qrange.hpp>

namespace quark {

/// The integer grid of D for one of Quark's tables (pof2 MinMSE uses range_table::symmetric).
///
/// ```cpp
/// constexpr quark::int_grid g = quark::grid_of<std::int8_t>(quark::range_table::symmetric);  //
/// -127..127
/// ```
template <integral_data_type D>
constexpr int_grid grid_of(range_table t) noexcept {
  const int_range r = quant_range<D>(t);
  return {r.min, r.max};
}

/// Quantization parameters of D with scale kind Scale from a calibrated range.
///
/// ```cpp
/// quark::calibrated_range r = quark::percentile_calibrator{}(hist.stats());
/// auto p = quark::to_qparams<std::uint8_t>(r);                                   // float scale
/// auto q = quark::to_qparams<std::int8_t, quark::pow2_scale>(r, {.sym =
/// quark::symmetry::symmetric});
/// ```
/// Throws "quark.qparams.nan_range" for a NaN range (from compute_qparams).
template <quantized_type D, scale_type Scale = float_scale>
auto to_qparams(const calibrated_range& r, const qparam_options& o = {}) {
  auto p = compute_qparams<D, Scale>(value_range{r.min, r.max}, o);
  if constexpr (integral_data_type<D>) {
    if (r.origin != scale_origin::searched)
      return p;
    // The float MinMSE search chose the scale and zero point on the grid it was given.
    if (r.scale && r.zero_point) {
      p.scale = scale_traits<Scale>::from_float(*r.scale, o.projection);
      p.zero_point = static_cast<std::int32_t>(*r.zero_point);
    }
    // A pof2 search chose the position: keep it whatever projection the options ask for.
    if constexpr (std::is_same_v<Scale, pow2_scale>) {
      if (r.pof2_position)
        p.scale = pow2_scale::from_position(*r.pof2_position);
    }
  }
  return p;
}

/// FP8 quantization parameters from the Distribution calibrator (scale = std / std of the grid).
///
/// ```cpp
/// auto d = quark::distribution_calibrator{}(hist.stats());
/// auto p = quark::to_qparams<quark::float8_e4m3fn>(d);
/// ```
template <quantized_type D, scale_type Scale = float_scale>
  requires(floating_data_type<D>&& dtype_traits<D>::bits <= 8)
auto to_qparams(const distribution_stats& d, const qparam_options& o = {}) {
  return compute_fp8_qparams_from_std<D, Scale>(d.std_dev, o);
}

}  // namespace quark
