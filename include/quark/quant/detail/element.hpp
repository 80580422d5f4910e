// SPDX-License-Identifier: MIT
// Per-element arithmetic of the quantization kernels, written so that loops over it
// auto-vectorise: clamp first (comparisons whose NaN outcome is chosen on purpose), then round
// the clamped value with plain float arithmetic, and cast float -> int only after the clamp.
#pragma once

#include <bit>
#include <cstdint>

#include <quark/config.hpp>
#include <quark/core/concepts.hpp>
#include <quark/dtype/convert.hpp>
#include <quark/dtype/detail/round_int.hpp>
#include <quark/quant/quant_policy.hpp>

namespace quark::detail {

/// x brought onto the grid: x / s or x * inv_s (inv_s = 1 / s, precomputed by the caller).
template <quant_policy P>
QUARK_ALWAYS_INLINE float apply_scale(float x, float s, float inv_s) noexcept {
  if constexpr (P.apply == scale_application::divide) {
    static_cast<void>(inv_s);
    return x / s;
  } else {
    static_cast<void>(s);
    return x * inv_s;
  }
}

/// x rounded to an integral float by R, for |x| < 2^23 and not NaN (the caller clamps first).
/// Branch-free on purpose: truncation through int32 (a conversion that ignores the rounding
/// mode), then a correction from the exact fraction, so the loop vectorises with any compiler.
template <rounding R>
QUARK_ALWAYS_INLINE float round_clamped(float x) noexcept {
  static_assert(R != rounding::stochastic, "stochastic rounding has no kernel form; use convert");
  const std::int32_t i = static_cast<std::int32_t>(x);  // toward zero; |x| < 2^23 is in range
  const float t = static_cast<float>(i);
  const float f = x - t;  // exact, in (-1, 1)
  if constexpr (R == rounding::toward_zero) {
    return t;
  } else if constexpr (R == rounding::toward_negative) {
    return f < 0.0f ? t - 1.0f : t;
  } else if constexpr (R == rounding::toward_positive) {
    return f > 0.0f ? t + 1.0f : t;
  } else if constexpr (R == rounding::nearest_away) {
    const float up = f >= 0.5f ? 1.0f : 0.0f;
    const float down = f <= -0.5f ? 1.0f : 0.0f;
    return t + up - down;
  } else if constexpr (R == rounding::nearest_up) {
    const float up = f >= 0.5f ? 1.0f : 0.0f;
    const float down = f < -0.5f ? 1.0f : 0.0f;
    return t + up - down;
  } else {
    // nearest_even: a half goes away from zero only when the truncated value is odd.
    const bool odd = (i & 1) != 0;
    const float up = (f > 0.5f || (f == 0.5f && odd)) ? 1.0f : 0.0f;
    const float down = (f < -0.5f || (f == -0.5f && odd)) ? 1.0f : 0.0f;
    return t + up - down;
  }
}

/// Round half to even for |x| <= 2^22 in two additions: adding 1.5 * 2^23 leaves no fraction
/// bits, so the sum is rounded by IEEE 754's default mode (round to nearest, ties to even), and
/// subtracting it back is exact. This relies on the default floating-point environment (which
/// the library assumes: no fesetround, no -ffast-math); `round_clamped<nearest_even>` is the
/// mode-independent equivalent. Zero results are +0.
QUARK_ALWAYS_INLINE float round_half_even_small(float x) noexcept {
  constexpr float magic = 12582912.0f;  // 1.5 * 2^23
  return (x + magic) - magic;
}

/// The integer level q - zp as an integral float in [lo - zp, hi - zp] (or NaN under
/// nan_output::propagate), for types of at most 16 bits (every code and zero point is an exact
/// float integer). `vlo` = lo - zp and `vhi` = hi - zp.
///
/// Steps: (1) v = x / s; (2) NaN by P.nan; (3) clamp v to [vlo, vhi] (integers, so clamping
/// before rounding equals clamping after it, and |v| < 2^17 keeps the rounding exact and any
/// int32 cast in range); (4) round by P.round.
template <quant_policy P>
QUARK_ALWAYS_INLINE float int_level(float x, float s, float inv_s, float vlo, float vhi) noexcept {
  const float v0 = apply_scale<P>(x, s, inv_s);
  float v = v0;
  if constexpr (P.nan == nan_output::to_zero_point) {
    v = v != v ? 0.0f : v;
  }
  v = v > vlo ? v : vlo;  // NaN -> vlo, i.e. qmin
  v = v < vhi ? v : vhi;
  float r;
  if constexpr (P.round == rounding::nearest_even) {
    r = round_half_even_small(v);
  } else {
    r = round_clamped<P.round>(v);
  }
  if constexpr (P.nan == nan_output::propagate) {
    r = v0 != v0 ? v0 : r;
  }
  return r;
}

/// The integer code q as int32 for types of at most 16 bits, with round half to even: after the
/// clamp, v + 1.5 * 2^23 lies in [2^23, 2^24), where the float's low mantissa bits are the
/// rounded integer plus 2^22, so subtracting the bits of 1.5 * 2^23 yields round(v) exactly and
/// the zero point joins that one integer subtraction (`bias` = bits(1.5 * 2^23) - zp).
template <quant_policy P>
QUARK_ALWAYS_INLINE std::int32_t int_code_even_i32(float x, float s, float inv_s, float vlo,
                                                   float vhi, std::int32_t bias) noexcept {
  static_assert(P.round == rounding::nearest_even && P.nan != nan_output::propagate);
  float v = apply_scale<P>(x, s, inv_s);
  if constexpr (P.nan == nan_output::to_zero_point) {
    v = v != v ? 0.0f : v;
  }
  v = v > vlo ? v : vlo;
  v = v < vhi ? v : vhi;
  return std::bit_cast<std::int32_t>(v + 12582912.0f) - bias;
}

/// The integer code q = level + zp as an integral float in [lo, hi].
template <quant_policy P>
QUARK_ALWAYS_INLINE float int_code(float x, float s, float inv_s, float zp, float lo,
                                   float hi) noexcept {
  return int_level<P>(x, s, inv_s, lo - zp, hi - zp) + zp;
}

/// Same for 32-bit types: the zero point and bounds are exact only in double.
template <quant_policy P>
QUARK_ALWAYS_INLINE double int_code_wide(float x, float s, float inv_s, double zp, double lo,
                                         double hi) noexcept {
  const float r = round_integral<P.round>(apply_scale<P>(x, s, inv_s));
  double v = static_cast<double>(r) + zp;
  if constexpr (P.nan == nan_output::to_zero_point) {
    v = v != v ? zp : v;
  }
  if constexpr (P.nan == nan_output::propagate) {
    v = v < lo ? lo : v;
    v = v > hi ? hi : v;
  } else {
    v = v > lo ? v : lo;
    v = v < hi ? v : hi;
  }
  return v;
}

/// The conversion policy float targets use under P.
template <quant_policy P>
inline constexpr conversion_policy float_target_policy{P.round, P.float_overflow,
                                                       nan_handling::propagate};

/// Float target (FP8, FP16, BF16, FP6, FP4): convert x / s (+ zp when non-zero, so -0 stays -0).
template <quantized_type D, quant_policy P>
QUARK_ALWAYS_INLINE D float_code(float x, float s, float inv_s, float zp) noexcept {
  float v = apply_scale<P>(x, s, inv_s);
  if (zp != 0.0f)
    v += zp;
  return convert<D, float_target_policy<P>>(v);
}

/// Narrows an in-range integral value to the storage of integer type D.
template <quantized_type D, class V>
QUARK_ALWAYS_INLINE D to_storage(V v) noexcept {
  if constexpr (requires { D::from_bits(std::uint8_t{}); } && !floating_data_type<D>) {
    return D(static_cast<int>(v));  // int_n
  } else if constexpr (sizeof(D) <= 2) {
    return static_cast<D>(static_cast<std::int32_t>(v));  // in range: one cvttps2dq
  } else {
    return static_cast<D>(static_cast<std::int64_t>(v));
  }
}

/// The integer value of a stored code as int32 (exact for every type up to 32 bits, except
/// uint32 above 2^31 which goes through int64 by the wide path).
template <quantized_type D>
QUARK_ALWAYS_INLINE std::int64_t code_value(D q) noexcept {
  if constexpr (requires { q.value(); }) {
    return q.value();
  } else {
    return static_cast<std::int64_t>(q);
  }
}

}  // namespace quark::detail
