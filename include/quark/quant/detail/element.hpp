// SPDX-License-Identifier: MIT
// Per-element arithmetic of the quantization kernels, written so that loops over it
// auto-vectorise: rounding through the explicit round-to-integral builtins (each names its tie
// rule, so nothing depends on the floating-point environment), clamping with comparisons whose
// NaN outcome is chosen on purpose, and float -> int casts only after the clamp.
#pragma once

#include <cstdint>

#include <quark/config.hpp>
#include <quark/core/concepts.hpp>
#include <quark/dtype/convert.hpp>
#include <quark/quant/quant_policy.hpp>

namespace quark::detail {

/// x rounded to an integral float by R; NaN and +-Inf pass through. Stochastic rounding needs
/// random bits and has no kernel form.
template <rounding R>
QUARK_ALWAYS_INLINE float round_to_integral(float x) noexcept {
  static_assert(R != rounding::stochastic, "stochastic rounding has no kernel form; use convert");
  if constexpr (R == rounding::nearest_even) {
    return __builtin_roundevenf(x);  // roundps imm 8: ties to even, regardless of MXCSR
  } else if constexpr (R == rounding::nearest_away) {
    return __builtin_roundf(x);
  } else if constexpr (R == rounding::toward_zero) {
    return __builtin_truncf(x);
  } else if constexpr (R == rounding::toward_positive) {
    return __builtin_ceilf(x);
  } else if constexpr (R == rounding::toward_negative) {
    return __builtin_floorf(x);
  } else {
    // nearest_up: floor, then up when the exact fraction x - floor(x) is at least 1/2. The
    // subtraction is exact except for x in (-1, 0), where a rounded result still decides right.
    const float f = __builtin_floorf(x);
    return (x - f >= 0.5f) ? f + 1.0f : f;
  }
}

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

/// The integer code, as an integral float in [lo, hi] (or NaN under nan_output::propagate).
/// Exact for types of at most 16 bits (every code and zero point is a float integer).
///
/// Steps: (1) x / s; (2) round by P.round; (3) + zero point; (4) clamp, NaN handled by P.nan.
template <quant_policy P>
QUARK_ALWAYS_INLINE float int_code(float x, float s, float inv_s, float zp, float lo,
                                   float hi) noexcept {
  float v = round_to_integral<P.round>(apply_scale<P>(x, s, inv_s)) + zp;
  if constexpr (P.nan == nan_output::to_zero_point) {
    v = v != v ? zp : v;
  }
  if constexpr (P.nan == nan_output::propagate) {
    v = v < lo ? lo : v;  // NaN fails both comparisons and stays NaN
    v = v > hi ? hi : v;
  } else {
    v = v > lo ? v : lo;  // NaN -> lo (maxps order)
    v = v < hi ? v : hi;
  }
  return v;
}

/// Same for 32-bit types: the zero point and bounds are exact only in double.
template <quant_policy P>
QUARK_ALWAYS_INLINE double int_code_wide(float x, float s, float inv_s, double zp, double lo,
                                         double hi) noexcept {
  const float r = round_to_integral<P.round>(apply_scale<P>(x, s, inv_s));
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
  if (zp != 0.0f) v += zp;
  return convert<D, float_target_policy<P>>(v);
}

/// Narrows an in-range integral value to the storage of integer type D.
template <quantized_type D, class V>
QUARK_ALWAYS_INLINE D to_storage(V v) noexcept {
  if constexpr (requires { D::from_bits(std::uint8_t{}); } && !floating_data_type<D>) {
    return D(static_cast<int>(v));  // int_n
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
