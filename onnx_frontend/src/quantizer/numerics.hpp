// SPDX-License-Identifier: MIT
// PRIVATE: the quantizer's bridge to the numeric headers. Scales and zero points come from
// quark::compute_qparams (scale/qparams.hpp), weights are quantized by quark::quantize
// (quant/quantize.hpp) and activation ranges by the observers and calibrators (observer/,
// calib/). The only arithmetic here is the power-of-two MinMSE candidate search of quark-spec
// §4.7 / §4.8, which calib/ does not provide yet (TODO(issue 5): switch to its pof2 MinMSE
// calibrator when it lands).
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include <quark/calib/percentile_calibrator.hpp>
#include <quark/dtype/dtype_id.hpp>
#include <quark/dtype/visit.hpp>
#include <quark/observer/histogram_observer.hpp>
#include <quark/quant/quantize.hpp>
#include <quark/scale/fixed_point_scale.hpp>
#include <quark/scale/pow2_scale.hpp>
#include <quark/scale/qparams.hpp>

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
inline qp qparams_for(dtype_id t, scale_choice sc, bool symmetric, float rmin, float rmax,
                      bool weight, std::string_view name) {
  qparam_options o;
  o.sym = symmetric ? symmetry::symmetric : symmetry::asymmetric;
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

/// Quark's five pof2 candidates around the min/max position (2s, s, s/2, s/4, s/8), scored by
/// `cost(scale)`; the first strictly smaller cost wins. Returns the chosen scale.
template <class Cost>
float pof2_candidate_search(float base_scale, Cost&& cost) {
  const int pos = scale_traits<pow2_scale>::from_float(base_scale, {}).position();
  float best = base_scale;
  double best_cost = std::numeric_limits<double>::infinity();
  for (int i = 0; i < 5; ++i) {
    const float s = std::ldexp(1.0f, -(pos + i - 1));
    const double c = cost(s);
    if (c < best_cost) {
      best_cost = c;
      best = s;
    }
  }
  return best;
}

/// Squared error of fake-quantizing value `x` (weight `count`) with scale s, zp, [qmin, qmax]
/// (RNE of x / s, the ONNX QuantizeLinear rule).
inline double fq_error(double x, double count, float s, std::int32_t zp, std::int64_t qmin,
                       std::int64_t qmax) {
  double q = std::nearbyint(x / static_cast<double>(s)) + zp;
  q = q < static_cast<double>(qmin) ? static_cast<double>(qmin) : q;
  q = q > static_cast<double>(qmax) ? static_cast<double>(qmax) : q;
  const double d = x - (q - zp) * static_cast<double>(s);
  return count * d * d;
}

/// Activation PowerOfTwoMethod.MinMSE (quark-spec §4.7, "All" mode with a histogram): returns
/// the range ((qmin - zp) s*, (qmax - zp) s*) of the best candidate.
inline value_range pof2_minmse_from_histogram(const histogram_data& h, dtype_id t,
                                              std::string_view name) {
  if (h.empty())
    return {0.0f, 0.0f};
  const auto base = qparams_for(t, true, true, static_cast<float>(h.edges.front()),
                                static_cast<float>(h.edges.back()), false, name);
  const auto sym = qparams_for(t, true, true, -1.0f, 1.0f, true, name);  // symmetric table
  const float best = pof2_candidate_search(base.scale, [&](float s) {
    double c = 0.0;
    for (std::size_t b = 0; b < h.counts.size(); ++b) {
      if (h.counts[b] == 0)
        continue;
      const auto centre = static_cast<float>((h.edges[b] + h.edges[b + 1]) / 2.0);
      c += fq_error(static_cast<double>(centre), static_cast<double>(h.counts[b]), s,
                    base.zero_point, sym.qmin, sym.qmax);
    }
    return c;
  });
  return {static_cast<float>(static_cast<double>(sym.qmin - base.zero_point) *
                             static_cast<double>(best)),
          static_cast<float>(static_cast<double>(sym.qmax - base.zero_point) *
                             static_cast<double>(best))};
}

/// Weight PowerOfTwoMethod.MinMSE on the raw values (quark-spec §4.8): the chosen scale.
inline float pof2_minmse_weight(std::span<const float> w, const qp& base) {
  return pof2_candidate_search(base.scale, [&](float s) {
    double c = 0.0;
    for (const float x : w)
      c += fq_error(static_cast<double>(x), 1.0, s, base.zero_point, base.qmin, base.qmax);
    return c;
  });
}

}  // namespace quark::onnx::qz
