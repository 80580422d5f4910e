// SPDX-License-Identifier: MIT
// Moving a quantized tensor between integer types by the ratio of their code spans (Quark's
// auto mixed precision, quark-spec §10.10): the scale becomes s * (span(from) / span(to)), a
// power-of-two scale stays a power of two (the nearest one, in log2), and a zero point (or any
// code) maps linearly from one full range onto the other, rounded half to even. Moving onto a
// small float type (FP8 / FP6 / FP4) keeps the range the codes span instead: that type's scale
// is the range's absmax over its largest finite value, the zero point is 0.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include <quark/config.hpp>
#include <quark/core/error.hpp>
#include <quark/dtype/dtype_id.hpp>
#include <quark/scale/qparams.hpp>
#include <quark/scale/qrange_id.hpp>

namespace quark {

namespace detail {
inline int_range retype_range(dtype_id id) {
  const auto r = quant_range(id);
  if (!r) {
    QUARK_THROW(
        invalid_argument("quark.scale.not_integer_type",
                         std::string(dtype_name(id)) + " is not an integer quantization type"));
  }
  return *r;
}

/// `y`, the scale derived from `s`; when s is a power of two, the power of two nearest to y in
/// log2 (a power-of-two scale stays one).
inline float keep_pow2(float s, float y) noexcept {
  int e = 0;
  const bool pow2 = s > 0.0f && std::frexp(s, &e) == 0.5f;
  return pow2 ? std::exp2(std::nearbyint(std::log2(y))) : y;
}
}  // namespace detail

/// span(from) / span(to) over the full code ranges, e.g. int8 -> int16: 255 / 65535.
///
///     quark::code_span_ratio(quark::dtype_id::int16, quark::dtype_id::int8) == 65535.0 / 255.0
inline double code_span_ratio(dtype_id from, dtype_id to) {
  const int_range a = detail::retype_range(from), b = detail::retype_range(to);
  return static_cast<double>(a.max - a.min) / static_cast<double>(b.max - b.min);
}

/// The scale of a tensor moved from `from` to `to`: float(s * code_span_ratio(from, to)); when s
/// is a power of two, the power of two nearest to that in log2 (ties to even exponent).
///
///     quark::retype_scale(0.5f, quark::dtype_id::int16, quark::dtype_id::int8) == 128.0f
inline float retype_scale(float s, dtype_id from, dtype_id to) {
  return detail::keep_pow2(s,
                           static_cast<float>(static_cast<double>(s) * code_span_ratio(from, to)));
}

/// The scale of small float type `to` (FP8 / FP6 / FP4: zero point 0) for a tensor of integer
/// type `from` with scale s and zero point z: compute_qparams<to> of the range its codes span,
/// [(qmin - z) s, (qmax - z) s], i.e. max(|qmin - z|, |qmax - z|) s / max_finite(to); when s is
/// a power of two, the power of two nearest to that in log2 (as retype_scale).
///
///     quark::retype_scale_to_float(1.0f, 0, quark::dtype_id::int8,
///                                  quark::dtype_id::float8_e4m3fn) == 128.0f / 448.0f
inline float retype_scale_to_float(float s, std::int64_t z, dtype_id from, dtype_id to) {
  const int_range a = detail::retype_range(from);
  const auto lo = static_cast<float>(static_cast<double>(a.min - z) * static_cast<double>(s));
  const auto hi = static_cast<float>(static_cast<double>(a.max - z) * static_cast<double>(s));
  std::optional<float> y;
  visit_dtype(to, [&](auto tag) {
    using D = typename decltype(tag)::type;
    if constexpr (floating_data_type<D> && dtype_traits<D>::bits <= 8)
      y = compute_qparams<D>(value_range{lo, hi}).scale.value;
  });
  if (!y) {
    QUARK_THROW(invalid_argument(
        "quark.scale.not_small_float_type",
        std::string(dtype_name(to)) + " is not a small float type (FP8 / FP6 / FP4)"));
  }
  return detail::keep_pow2(s, *y);
}

/// A code (typically the zero point) of `from` mapped onto `to`: round((z - min_from) *
/// span(to) / span(from)) + min_to, half to even, clamped to `to`'s range.
///
///     quark::retype_code(128, quark::dtype_id::uint8, quark::dtype_id::uint16) == 32896
inline std::int64_t retype_code(std::int64_t z, dtype_id from, dtype_id to) {
  const int_range a = detail::retype_range(from), b = detail::retype_range(to);
  const double ratio = static_cast<double>(b.max - b.min) / static_cast<double>(a.max - a.min);
  const double v =
      std::nearbyint(static_cast<double>(z - a.min) * ratio) + static_cast<double>(b.min);
  return std::clamp(static_cast<std::int64_t>(v), b.min, b.max);
}

/// The smallest scale whose codes of type `t` hold every value of magnitude up to `max_abs`:
/// max_abs / q, q the largest float32 not above t's qmax (2147483520 for int32: float32 cannot
/// hold 2^31 - 1, and x / s is computed in float32). Auto MP widens a retyped bias scale to this
/// when scale = input scale * weight scale is too small for the bias's codes.
///
///     quark::holding_scale(254.0, quark::dtype_id::int8) == 2.0
inline double holding_scale(double max_abs, dtype_id t) {
  const int_range r = detail::retype_range(t);
  auto top = static_cast<float>(r.max);
  if (static_cast<double>(top) > static_cast<double>(r.max))
    top = std::nextafter(top, 0.0f);
  return max_abs / static_cast<double>(top);
}

/// Widens each scale to holding_scale() of its channel's largest |value| where it is smaller,
/// and returns how many were widened. The values split evenly into scales.size() channels of
/// consecutive elements (a [C] bias per channel, or one scale over all of them); NaN is ignored.
///
///     float s[] = {1.0f, 1.0f};
///     const float b[] = {254.0f, -3.0f};
///     quark::widen_to_hold(s, b, quark::dtype_id::int8);   // 1; s == {2, 1}
inline std::size_t widen_to_hold(std::span<float> scales, std::span<const float> values,
                                 dtype_id t) {
  if (scales.empty())
    return 0;
  const std::size_t per = values.size() / scales.size();
  if (per * scales.size() != values.size()) {
    QUARK_THROW(invalid_argument("quark.scale.size_mismatch",
                                 std::to_string(values.size()) + " values for " +
                                     std::to_string(scales.size()) + " scales"));
  }
  std::size_t widened = 0;
  for (std::size_t c = 0; c < scales.size(); ++c) {
    double m = 0.0;
    for (const float v : values.subspan(c * per, per))
      m = std::fmax(m, std::fabs(static_cast<double>(v)));
    const double need = holding_scale(m, t);
    if (static_cast<double>(scales[c]) < need) {
      scales[c] = static_cast<float>(need);
      ++widened;
    }
  }
  return widened;
}

}  // namespace quark
