// SPDX-License-Identifier: MIT
// PRIVATE: the quantizer's bridge to the numeric headers. Scales and zero points come from
// quark::compute_qparams (scale/qparams.hpp), weights are quantized by quark::quantize
// (quant/quantize.hpp) and activation ranges by the observers and calibrators (observer/,
// calib/, driven by calibrate.cpp). No numeric search lives here.
#pragma once

#include <cstdint>
#include <optional>

#include <quark/calib/minifloat_mse_calibrator.hpp>
#include <quark/dtype/dtype_id.hpp>
#include <quark/dtype/visit.hpp>
#include <quark/quant/quantize.hpp>
#include <quark/scale/fixed_point_scale.hpp>
#include <quark/scale/pow2_scale.hpp>
#include <quark/scale/qparams.hpp>
#include <quark/scale/qrange_id.hpp>

namespace quark::onnx::qz {

/// Scale, zero point and clip bounds of one group, in plain numbers.
struct qp {
  float scale = 1.0f;
  std::int32_t zero_point = 0;
  std::int64_t qmin = 0;
  std::int64_t qmax = 0;
};

/// How a scale is represented (tspec's pof2 / int16_scale / fp_scaled).
struct scale_choice {
  bool pof2 = false;       ///< 2^-pos
  bool int16 = false;      ///< M * 2^-N with int16 M (quark-spec §2.3)
  bool fp_scaled = false;  ///< BFloat16 / Float16: ActivationScaled / WeightScaled (§1.5)
};

/// compute_qparams for the type `t` (integer: int4 ... int32, uint4 ... uint32; float: float16,
/// bfloat16, the four FP8 types). `weight` selects Quark's weight clip rule (INT8 weights clip
/// to +-127). Float types keep qmin = qmax = 0 and a zero point that is an integer value.
/// `reduce` selects the reduced table (TensorQuantOverrides reduce_range).
inline qp qparams_for(dtype_id t, scale_choice sc, bool symmetric, float rmin, float rmax,
                      bool weight, std::string_view name, bool reduce = false) {
  qparam_options o;
  o.sym = symmetric ? symmetry::symmetric : symmetry::asymmetric;
  o.reduce = reduce ? range_reduction::reduced : range_reduction::full;
  o.clip = weight ? clip_rule::quark_weight : clip_rule::full_range;
  o.fp_scaling = sc.fp_scaled ? float_scaling::scaled : float_scaling::unscaled;
  o.tensor_name = name;
  qp out;
  auto fill = [&](auto p) {
    out.scale = p.scale_value();
    out.zero_point = static_cast<std::int32_t>(p.zero_point);
    out.qmin = p.qmin;
    out.qmax = p.qmax;
  };
  quark::visit_dtype(t, [&](auto id) {
    using D = typename decltype(id)::type;
    if constexpr (integral_data_type<D>) {
      if (sc.pof2) {
        fill(compute_qparams<D, pow2_scale>(value_range{rmin, rmax}, o));
      } else if (sc.int16) {
        fill(compute_qparams<D, fixed_point_scale>(value_range{rmin, rmax}, o));
      } else {
        fill(compute_qparams<D, float_scale>(value_range{rmin, rmax}, o));
      }
    } else if constexpr (floating_data_type<D>) {
      fill(compute_qparams<D, float_scale>(value_range{rmin, rmax}, o));
    }
  });
  return out;
}

/// The integer-only form used by the calibration searches: float or power-of-two scale.
inline qp qparams_for(dtype_id t, bool pof2, bool symmetric, float rmin, float rmax, bool weight,
                      std::string_view name) {
  return qparams_for(t, scale_choice{.pof2 = pof2}, symmetric, rmin, rmax, weight, name);
}

/// ORT's FP8 rule (quark-spec §1.6): scale = std / std_fp8 of the FP8 type `t`, zero point 0.
inline qp fp8_qparams_from_std(dtype_id t, double std_dev, std::string_view name) {
  qp out;
  qparam_options o;
  o.tensor_name = name;
  quark::visit_dtype(t, [&](auto id) {
    using D = typename decltype(id)::type;
    if constexpr (floating_data_type<D> && dtype_traits<D>::bits == 8) {
      out.scale = compute_fp8_qparams_from_std<D>(std_dev, o).scale_value();
    }
  });
  return out;
}

/// MinMSE of an FP8 spec: quark::minifloat_minmse_calibrator of type `t` (Float32 scale: the
/// window search) over a histogram or over the values of a weight (channel); nullopt when `t` is
/// not a small float type.
template <class Data>
std::optional<calibrated_range> minifloat_minmse(dtype_id t, const Data& d) {
  std::optional<calibrated_range> r;
  quark::visit_dtype(t, [&](auto id) {
    using D = typename decltype(id)::type;
    if constexpr (quantized_type<D> && floating_data_type<D> && dtype_traits<D>::bits <= 8)
      r = minifloat_minmse_calibrator<D>{}(d);
  });
  return r;
}

/// Population standard deviation of `v` (np.std: the mean first, then the squared deviations).
inline double population_std(std::span<const float> v) {
  if (v.empty())
    return 0.0;
  double sum = 0.0;
  for (const float x : v)
    sum += static_cast<double>(x);
  const double mean = sum / static_cast<double>(v.size());
  double sq = 0.0;
  for (const float x : v)
    sq += (static_cast<double>(x) - mean) * (static_cast<double>(x) - mean);
  return std::sqrt(sq / static_cast<double>(v.size()));
}

}  // namespace quark::onnx::qz
