// SPDX-License-Identifier: MIT
// Quantization parameters (scale, zero point, clip bounds) from a calibrated range, as Quark's
// compute_scale_zp / compute_scale_zp_fp do (quark-spec §3, §1.5, §1.6, §2.2, §2.3). The scale is
// computed in double from the float32 range width and cast to float32 last; the zero point comes
// from the double scale. The scale kind (float, float16, power of two, fixed point, E8M0) is the
// `Scale` template argument: the float scale is projected onto it at the end.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

#include <quark/core/concepts.hpp>
#include <quark/core/error.hpp>
#include <quark/dtype/convert.hpp>
#include <quark/scale/float_scale.hpp>
#include <quark/scale/qrange.hpp>
#include <quark/scale/traits.hpp>

namespace quark {

/// A calibrated real range [min, max] (min <= max is not required: 0 is forced in anyway).
struct value_range {
  float min = 0.0f;
  float max = 0.0f;
};

enum class symmetry : std::uint8_t { asymmetric, symmetric };
/// Quark's reduce_range: choose the reduced integer table (and "scaled" BF16's +-2 range).
enum class range_reduction : std::uint8_t { full, reduced };
/// Zero point of a symmetric unsigned type, whose middle (2^b - 1) / 2 is a half integer.
enum class unsigned_symmetric_zero_point : std::uint8_t {
  upper_middle,  ///< 128 for UINT8 (Quark, ORT >= 1.16: round half to even of 127.5)
  lower_middle,  ///< 127 for UINT8 (the older convention, kept as an option)
};
/// ActivationScaled / WeightScaled for FLOAT16 and BFLOAT16 (quark-spec §1.5).
enum class float_scaling : std::uint8_t { unscaled, scaled };
/// The clip bounds the kernels saturate to.
enum class clip_rule : std::uint8_t {
  full_range,    ///< the whole type range (ONNX QuantizeLinear; Quark activations; ORT weights)
  quark_weight,  ///< Quark's weights: the symmetric table for signed 8/16/32-bit (INT8 +-127)
};

/// Options of compute_qparams. Defaults reproduce Quark's activation path for a float32 scale.
struct qparam_options {
  symmetry sym = symmetry::asymmetric;
  range_reduction reduce = range_reduction::full;
  unsigned_symmetric_zero_point unsigned_zero_point = unsigned_symmetric_zero_point::upper_middle;
  float_scaling fp_scaling = float_scaling::unscaled;
  clip_rule clip = clip_rule::full_range;
  scale_projection projection = {};
  /// ORT's MinimumRealRange: rmax >= rmin + this (applied after 0 is forced in). 0: off.
  float minimum_real_range = 0.0f;
  /// Replace the calibrated min / max (TensorQuantOverrides rmin / rmax).
  std::optional<float> rmin_override = std::nullopt;
  std::optional<float> rmax_override = std::nullopt;
  /// Named in error messages.
  std::string_view tensor_name = {};
};

/// Zero-point type: int32 for integer types, float for float types (FP16/BF16 keep a float zp).
template <quantized_type D>
using zero_point_t = std::conditional_t<integral_data_type<D>, std::int32_t, float>;

/// Scale, zero point and the integer clip bounds [qmin, qmax] of one quantization group.
///
///     auto p = quark::compute_qparams<std::int8_t>({-1.3f, 2.6f}, {.sym =
///     quark::symmetry::symmetric});
///     // p.scale.value == 0.020472441f, p.zero_point == 0, p.qmin == -128, p.qmax == 127
template <scale_type Scale, class ZeroPoint = std::int32_t>
struct quant_params {
  Scale scale{};
  ZeroPoint zero_point{};
  std::int64_t qmin = 0;  ///< clip bounds for integer types (unused for float types)
  std::int64_t qmax = 0;
  constexpr float scale_value() const noexcept { return scale_traits<Scale>::to_float(scale); }
};

namespace detail {

/// Round half to even in double, for |v| < 2^52 (the zero-point formula's range).
constexpr double round_half_even_d(double v) noexcept {
  const auto t = static_cast<double>(static_cast<std::int64_t>(v));  // toward zero, exact
  const double f = v - t;
  const double af = f < 0.0 ? -f : f;
  const double step = v < 0.0 ? -1.0 : 1.0;
  const bool odd = (static_cast<std::int64_t>(t) & 1) != 0;
  return (af > 0.5 || (af == 0.5 && odd)) ? t + step : t;
}

/// Steps 0-4 of quark-spec §3.1 shared by every type: overrides, NaN, force 0 in, clamp +-Inf
/// to +-FLT_MAX/2, MinimumRealRange, symmetric widening.
inline value_range prepare_range(value_range r, const qparam_options& o) {
  // 0. Overrides (TensorQuantOverrides).
  if (o.rmin_override)
    r.min = *o.rmin_override;
  if (o.rmax_override)
    r.max = *o.rmax_override;
  // 1. NaN cannot produce a scale (Quark raises "NaN detected").
  if (r.min != r.min || r.max != r.max) {
    std::string what = "NaN in the calibrated range";
    if (!o.tensor_name.empty())
      what += " of tensor '" + std::string(o.tensor_name) + "'";
    QUARK_THROW(invalid_argument("quark.qparams.nan_range", what));
  }
  // 2. Zero must be representable.
  r.min = r.min < 0.0f ? r.min : 0.0f;
  r.max = r.max > 0.0f ? r.max : 0.0f;
  // 3. Infinite or huge ends: +-FLT_MAX/2 keeps rmax - rmin finite in float32.
  constexpr float half_max = std::numeric_limits<float>::max() / 2.0f;
  r.min = r.min < -half_max ? -half_max : r.min;
  r.max = r.max > half_max ? half_max : r.max;
  // 4. ORT's MinimumRealRange (float32 addition, as numpy does on float32 ranges).
  if (o.minimum_real_range > 0.0f) {
    const float floor_max = r.min + o.minimum_real_range;
    r.max = r.max > floor_max ? r.max : floor_max;
  }
  // 5. Symmetric: [-absmax, absmax].
  if (o.sym == symmetry::symmetric) {
    const float a = -r.min > r.max ? -r.min : r.max;
    r = {-a, a};
  }
  return r;
}

}  // namespace detail

/// Quantization parameters of an integer type D from a calibrated range (quark-spec §3.1).
///
/// Steps: (1) prepare the range (detail::prepare_range); (2) choose the table: reduced, else
/// symmetric if the type has one, else full; (3) scale = double(f32(rmax - rmin)) / (qmax - qmin);
/// (4) scale < FLT_MIN -> scale 1, zero point 0; (5) zero point: symmetric -> the exact middle
/// (qmin + qmax) / 2 rounded half to even (unsigned: upper or lower middle by option);
/// asymmetric -> RNE(qmin - rmin / scale) in double; (6) cast the scale to float32 and project it
/// onto `Scale`; (7) clip bounds by `clip_rule`.
///
///     auto p = quark::compute_qparams<std::uint8_t>({-1.0f, 1.0f});  // zp 128, s = 2/255
///     auto q = quark::compute_qparams<std::int8_t, quark::pow2_scale>(
///         {-1.3f, 2.6f}, {.sym = quark::symmetry::symmetric});       // 2^-6
/// Throws quark::invalid_argument "quark.qparams.nan_range" for a NaN range.
template <quantized_type D, scale_type Scale = float_scale>
  requires integral_data_type<D> quant_params<Scale, std::int32_t> compute_qparams(
      value_range range, const qparam_options& o = {}) {
    // 1. Range.
    const value_range r = detail::prepare_range(range, o);
    // 2. Table.
    const range_table table = o.reduce == range_reduction::reduced ? range_table::reduced
                              : o.sym == symmetry::symmetric       ? range_table::symmetric
                                                                   : range_table::full;
    const int_range q = quant_range<D>(table);
    const int_range clip = o.clip == clip_rule::quark_weight
                               ? quant_range<D>(range_table::symmetric)
                               : quant_range<D>(range_table::full);
    quant_params<Scale, std::int32_t> out;
    out.qmin = clip.min;
    out.qmax = clip.max;
    // 3. Scale in double from the float32 width.
    const float width = r.max - r.min;
    const double scale =
        static_cast<double>(width) / (static_cast<double>(q.max) - static_cast<double>(q.min));
    // 4. Zero range.
    if (!(scale >= static_cast<double>(std::numeric_limits<float>::min()))) {
      out.scale = scale_traits<Scale>::from_float(1.0f, o.projection);
      out.zero_point = 0;
      return out;
    }
    // 5. Zero point.
    double zp;
    if (o.sym == symmetry::symmetric) {
      const std::int64_t sum = q.min + q.max;
      if (sum % 2 == 0) {
        zp = static_cast<double>(sum / 2);
      } else {
        const double lower = static_cast<double>((sum - 1) / 2);  // sum >= 0 when odd here
        const bool upper = o.unsigned_zero_point == unsigned_symmetric_zero_point::upper_middle;
        zp = upper ? lower + 1.0 : lower;
      }
    } else {
      zp = detail::round_half_even_d(static_cast<double>(q.min) -
                                     static_cast<double>(r.min) / scale);
    }
    zp = zp < static_cast<double>(q.min) ? static_cast<double>(q.min) : zp;
    zp = zp > static_cast<double>(q.max) ? static_cast<double>(q.max) : zp;
    out.zero_point = static_cast<std::int32_t>(zp);
    // 6. float32 scale, then the scale kind's projection (the zero point is unchanged: quark-spec
    //    §2.2 step 4 recomputes it to the same value).
    out.scale = scale_traits<Scale>::from_float(static_cast<float>(scale), o.projection);
    return out;
  }

/// Overload taking the two ends.
template <quantized_type D, scale_type Scale = float_scale>
quant_params<Scale, zero_point_t<D>> compute_qparams(float rmin, float rmax,
                                                     const qparam_options& o = {}) {
  return compute_qparams<D, Scale>(value_range{rmin, rmax}, o);
}

/// Quantization parameters of a float type D (FLOAT16, BFLOAT16, FP8, FP6, FP4).
///
/// FLOAT16 / BFLOAT16 (quark-spec §1.5): unscaled -> scale 1, zero point 0 (a plain cast);
/// scaled -> qrange +-2 (BF16) or +-65504 (FP16), scale = (rmax - rmin) / (qmax - qmin) in double,
/// zero point 0 if symmetric else RNE(qmin - rmin / scale), a float rounded to D (where it is
/// stored).
/// Other float types (FP8, FP6, FP4): scale = absmax / max_finite, zero point 0 (the min-max rule
/// of Quark's torch FP8 specs; the range is always made symmetric). The ORT std rule for FP8 is
/// compute_fp8_qparams_from_std.
///
///     auto p = quark::compute_qparams<quark::float8_e4m3fn>({-3.0f, 4.48f});  // scale 0.01
template <quantized_type D, scale_type Scale = float_scale>
  requires floating_data_type<D> quant_params<Scale, float> compute_qparams(
      value_range range, const qparam_options& opt = {}) {
    constexpr bool is_16 = dtype_traits<D>::bits == 16;
    qparam_options o = opt;
    if constexpr (!is_16)
      o.sym = symmetry::symmetric;
    const value_range r = detail::prepare_range(range, o);
    quant_params<Scale, float> out;
    out.scale = scale_traits<Scale>::from_float(1.0f, o.projection);
    out.zero_point = 0.0f;
    if (is_16 && o.fp_scaling == float_scaling::unscaled)
      return out;
    double qmin = static_cast<double>(dtype_traits<D>::lowest());
    double qmax = static_cast<double>(dtype_traits<D>::max());
    if constexpr (std::is_same_v<D, bfloat16>) {
      if (o.reduce == range_reduction::reduced || o.fp_scaling == float_scaling::scaled) {
        qmin = -2.0;  // Quark's "scaled" BF16 maps data into [-2, 2]
        qmax = 2.0;
      }
    }
    const double scale = static_cast<double>(r.max - r.min) / (qmax - qmin);
    if (!(scale >= static_cast<double>(std::numeric_limits<float>::min())))
      return out;
    if (o.sym == symmetry::asymmetric) {
      // The zero point is stored as a D value (the Q/DQ zero-point tensor has the quantized
      // type), so it is the integer RNE(qmin - rmin / s) rounded to D: exact for BF16's
      // [-2, 2]; FP16's [-65504, 65504] keeps 11 significant bits (-21835 -> -21840).
      const auto zp =
          static_cast<float>(detail::round_half_even_d(qmin - static_cast<double>(r.min) / scale));
      out.zero_point = static_cast<float>(D(zp));
    }
    out.scale = scale_traits<Scale>::from_float(static_cast<float>(scale), o.projection);
    return out;
  }

/// Population standard deviation of every finite value of float type D (ORT's std_fp8:
/// 100.0577... for FLOAT8E4M3FN; +-0 are both counted).
template <quantized_type D>
  requires(floating_data_type<D>&& dtype_traits<D>::bits <= 8)
double finite_value_std() noexcept {
  double sum = 0.0;
  double sum_sq = 0.0;
  double n = 0.0;
  for (std::uint32_t c = 0; c < (1u << dtype_traits<D>::bits); ++c) {
    const float v = to_float(D::from_bits(static_cast<typename D::storage_type>(c)));
    if (!std::isfinite(v))
      continue;
    sum += static_cast<double>(v);
    sum_sq += static_cast<double>(v) * static_cast<double>(v);
    n += 1.0;
  }
  const double mean = sum / n;
  return std::sqrt(sum_sq / n - mean * mean);
}

/// ORT's FP8 rule (quark-spec §1.6): scale = std / std_fp8, zero point 0, where `std` is the
/// Distribution calibrator's standard deviation (or np.std of a weight).
///
///     auto p = quark::compute_fp8_qparams_from_std<quark::float8_e4m3fn>(1.0);  // s = 1/100.0577
template <quantized_type D, scale_type Scale = float_scale>
  requires(floating_data_type<D>&& dtype_traits<D>::bits <= 8)
quant_params<Scale, float> compute_fp8_qparams_from_std(double std_dev,
                                                        const qparam_options& o = {}) {
  if (std_dev != std_dev) {
    std::string what = "NaN standard deviation";
    if (!o.tensor_name.empty())
      what += " of tensor '" + std::string(o.tensor_name) + "'";
    QUARK_THROW(invalid_argument("quark.qparams.nan_range", what));
  }
  quant_params<Scale, float> out;
  const double scale = std_dev / finite_value_std<D>();
  const float s = scale >= static_cast<double>(std::numeric_limits<float>::min())
                      ? static_cast<float>(scale)
                      : 1.0f;
  out.scale = scale_traits<Scale>::from_float(s, o.projection);
  out.zero_point = 0.0f;
  return out;
}

}  // namespace quark
