// SPDX-License-Identifier: MIT
// float32 <-> minifloat code conversion for any fp_format, on bits. Encoding follows IEEE 754
// rounding of the exact input to the format's grid (subnormals included), then applies the
// overflow and NaN policy. Decoding is exact.
#pragma once

#include <bit>
#include <cstdint>

#include <quark/config.hpp>
#include <quark/core/bit.hpp>
#include <quark/core/policy.hpp>
#include <quark/dtype/detail/round_bits.hpp>
#include <quark/dtype/fp_format.hpp>

namespace quark::detail {

/// Result code for a NaN input under policy P.
template <fp_format F, conversion_policy P>
constexpr std::uint32_t nan_result(bool negative) noexcept {
  if constexpr (P.nan == nan_handling::to_zero) {
    return F.has_zero ? 0u : F.nan_code(false);
  } else if constexpr (F.has_nan()) {
    return F.nan_code(negative);
  } else {
    return F.max_finite_code();  // ONNX rule for formats with no NaN: NaN -> +max
  }
}

/// Result code for a value beyond max finite (before the sign is attached).
template <fp_format F, conversion_policy P>
constexpr std::uint32_t overflow_result(bool negative, bool input_is_inf,
                                        std::uint32_t* nan_out) noexcept {
  constexpr std::uint32_t maxc = F.max_finite_code();
  if constexpr (P.on_overflow == overflow::saturate) {
    return maxc;
  } else {
    // Directed rounding toward zero never produces Inf from a finite value (IEEE 754 7.4).
    constexpr bool tz = P.round == rounding::toward_zero;
    const bool directed_down = tz || (P.round == rounding::toward_negative && !negative) ||
                               (P.round == rounding::toward_positive && negative);
    if (!input_is_inf && directed_down)
      return maxc;
    if constexpr (F.has_inf()) {
      return F.inf_code();
    } else if constexpr (F.has_nan()) {
      *nan_out = F.nan_code(negative);
      return 0;
    } else {
      return maxc;
    }
  }
}

/// Encodes x into format F under policy P. `random` is used by stochastic rounding only.
///
/// Steps: (1) split x into sign, biased exponent and 24-bit significand; (2) choose the target
/// binade, clamped to the smallest normal one so that subnormals fall out of the same shift;
/// (3) round the significand by the shift; the unified code formula absorbs a carry into the next
/// binade; (4) overflow, NaN and signed-zero rules.
template <fp_format F, conversion_policy P>
QUARK_ALWAYS_INLINE constexpr std::uint32_t encode_fp_generic(float x,
                                                              std::uint32_t random = 0) noexcept {
  static_assert(F.mantissa_bits <= 22 && F.exponent_bits <= 8, "format wider than float32");
  static_assert(F.is_signed || !F.has_zero, "unsigned formats must be zero-free like E8M0");
  constexpr int M = F.mantissa_bits;
  const std::uint32_t u = float_bits(x);
  const bool negative = (u >> 31) != 0u;
  std::uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u)
    return nan_result<F, P>(negative);

  if constexpr (!F.has_zero) {
    // Zero-free formats (E8M0) check the range before rounding, as ONNX Cast-25 and ONNX Runtime
    // do: anything below the smallest value (zero, negatives, -Inf) or above the largest (+Inf)
    // saturates to the nearest end, or is NaN without saturation.
    constexpr std::uint32_t min_bits =
        float_bits(static_cast<float>(exp2i(F.min_normal_exponent())));
    constexpr std::uint32_t max_bits =
        float_bits(static_cast<float>(exp2i(F.max_normal_exponent()) * (2.0 - exp2i(-M))));
    const bool below = negative || a < min_bits;
    const bool above = !negative && a > max_bits;
    if (below || above) {
      if constexpr (P.on_overflow == overflow::saturate) {
        return below ? 0u : F.max_finite_code();
      } else {
        return F.nan_code(false);
      }
    }
  }

  const int exp_f = static_cast<int>(a >> 23);
  std::uint32_t mant = (a & 0x7FFFFFu) | (exp_f != 0 ? 0x800000u : 0u);
  int e_in = exp_f != 0 ? exp_f : 1;
  if constexpr (F.min_normal_exponent() < -126) {
    // The smallest binade of F lies below float32's normal range (E8M0 reaches 2^-127): normalise
    // a subnormal input so the binade choice below sees its true exponent.
    if (exp_f == 0 && mant != 0u) {
      const int lz = std::countl_zero(mant) - 8;
      mant <<= lz;
      e_in -= lz;
    }
  }
  const int et = e_in - 127 + F.bias;  // target exponent field if the result were normal
  constexpr int emin_field = F.has_zero ? 1 : 0;
  const int e_eff = et > emin_field ? et : emin_field;
  int shift = 23 - M + (e_eff - et);
  shift = shift > 31 ? 31 : shift;
  const std::uint32_t n =
      round_shift<P.round>(mant, static_cast<std::uint32_t>(shift), negative, random);
  // Normal: (field << M) + (n - 2^M); subnormal (e_eff == 1, n < 2^M): n. A carry (n == 2^(M+1))
  // moves to the next binade by itself.
  std::uint32_t code = (static_cast<std::uint32_t>(e_eff) << M) + n - (std::uint32_t{1} << M);

  if (code > F.max_finite_code()) {
    std::uint32_t nan_code = 0xFFFFFFFFu;
    code = overflow_result<F, P>(negative, a == 0x7F800000u, &nan_code);
    if (nan_code != 0xFFFFFFFFu)
      return nan_code;
  }
  if constexpr (F.is_signed) {
    if constexpr (F.special == specials::nan_at_negative_zero) {
      if (code == 0u)
        return 0u;  // no negative zero: -0 becomes +0
    }
    return code | (negative ? F.sign_mask() : 0u);
  } else {
    return code;
  }
}

/// Round-to-nearest-even encoder without branches, for formats with zero and subnormals; gives the
/// same bits as encode_fp_generic (proven by tests/dtype/fast_path_test.cpp).
///
/// (1) Normal results: adding half-1 plus the quotient's lsb to the float bits rounds the mantissa
///     to M bits with carries into the exponent; rebias the exponent field. (2) Subnormal results:
///     adding 2^k, whose ulp equals the target's subnormal quantum, rounds |x| to that quantum
///     exactly (an exact float operation in the default round-to-nearest environment); the bits
///     above 2^k count quanta, which is the subnormal code. (3) Overflow, NaN and the sign are
///     selected, not branched, so loops vectorise.
template <fp_format F, conversion_policy P>
QUARK_ALWAYS_INLINE constexpr std::uint32_t encode_fp_rne(float x) noexcept {
  static_assert(F.has_zero && F.mantissa_bits >= 1 && F.mantissa_bits <= 22);
  constexpr int M = F.mantissa_bits;
  constexpr std::uint32_t sh = static_cast<std::uint32_t>(23 - M);
  constexpr int emin = F.min_normal_exponent();
  // Smallest normal of F as float bits; below it the result is subnormal (or zero).
  constexpr std::uint32_t min_normal_bits = static_cast<std::uint32_t>(emin + 127) << 23;
  constexpr float magic = exp2f_exact(emin - M + 23);
  constexpr std::uint32_t magic_bits = float_bits(magic);
  constexpr std::uint32_t rebias = static_cast<std::uint32_t>(127 - F.bias) << M;
  constexpr std::uint32_t maxc = F.max_finite_code();

  const std::uint32_t u = float_bits(x);
  const std::uint32_t a = u & 0x7FFFFFFFu;
  const bool negative = (u >> 31) != 0u;
  const bool is_nan = a > 0x7F800000u;
  const bool is_inf = a == 0x7F800000u;

  std::uint32_t code;
  if constexpr (F.exponent_bits == 8 && F.bias == 127) {
    // Same exponent range as float32 (bfloat16): float subnormals are target subnormals and the
    // integer rounding below handles them too, so there is no separate subnormal path.
    code = (a + ((std::uint32_t{1} << (sh - 1u)) - 1u) + ((a >> sh) & 1u)) >> sh;
  } else {
    // (1) normal path (meaningful when a >= min_normal_bits and finite)
    const std::uint32_t an = a < min_normal_bits ? min_normal_bits : a;
    const std::uint32_t rounded = an + ((std::uint32_t{1} << (sh - 1u)) - 1u) + ((an >> sh) & 1u);
    const std::uint32_t normal_code = (rounded >> sh) - rebias;
    // (2) subnormal path (meaningful when a < min_normal_bits)
    const float ax = bits_float(a < min_normal_bits ? a : 0u);
    const std::uint32_t sub_code = float_bits(ax + magic) - magic_bits;
    code = a < min_normal_bits ? sub_code : normal_code;
  }
  // (3) overflow, NaN, sign
  std::uint32_t over;
  if constexpr (P.on_overflow == overflow::saturate) {
    over = maxc;
  } else if constexpr (F.has_inf()) {
    over = F.inf_code();
  } else if constexpr (F.has_nan()) {
    over = F.nan_code(false) & F.magnitude_mask();
  } else {
    over = maxc;
  }
  const bool overflowed = is_inf || (!is_nan && a > 0x7F7FFFFFu) || code > maxc;
  code = overflowed ? over : code;
  std::uint32_t sign = negative ? F.sign_mask() : 0u;
  if constexpr (F.special == specials::nan_at_negative_zero) {
    sign = code == 0u ? 0u : sign;  // no negative zero
    if constexpr (P.on_overflow != overflow::saturate) {
      // an overflow to NaN is the single NaN pattern, whatever the sign
      const bool nan_over = overflowed;
      code = nan_over ? 0u : code;
      sign = nan_over ? F.sign_mask() : sign;
    }
  }
  constexpr std::uint32_t nan_pos = nan_result<F, P>(false);
  constexpr std::uint32_t nan_neg = nan_result<F, P>(true);
  const std::uint32_t nan_code = negative ? nan_neg : nan_pos;
  return is_nan ? nan_code : (code | sign);
}

/// Encodes x into format F under policy P (dispatches to the branch-free path for RNE).
template <fp_format F, conversion_policy P>
QUARK_ALWAYS_INLINE constexpr std::uint32_t encode_fp(float x, std::uint32_t random = 0) noexcept {
  if constexpr (P.round == rounding::nearest_even && F.has_zero && F.mantissa_bits >= 1) {
    return encode_fp_rne<F, P>(x);
  } else {
    return encode_fp_generic<F, P>(x, random);
  }
}

/// Decodes a code of format F to float32, exactly, without branches (formats with zero).
template <fp_format F>
QUARK_ALWAYS_INLINE constexpr float decode_fp_fast(std::uint32_t code) noexcept {
  static_assert(F.has_zero && F.mantissa_bits >= 1);
  constexpr int M = F.mantissa_bits;
  const std::uint32_t mag = code & F.magnitude_mask();
  const std::uint32_t sign = (code & F.sign_mask()) != 0u ? 0x80000000u : 0u;
  const std::uint32_t field = mag >> M;
  const std::uint32_t normal = (mag << (23 - M)) + (static_cast<std::uint32_t>(127 - F.bias) << 23);
  const float sub = static_cast<float>(mag) * exp2f_exact(1 - F.bias - M);  // exact
  std::uint32_t bits = field == 0u ? float_bits(sub) : normal;
  if constexpr (F.special == specials::ieee) {
    const bool special = field == static_cast<std::uint32_t>(F.max_exponent_field());
    bits = special ? (0x7F800000u | ((mag & F.mantissa_mask()) << (23 - M)) |
                      ((mag & F.mantissa_mask()) != 0u ? 0x00400000u : 0u))
                   : bits;
  }
  return bits_float(bits | sign);
}

/// Decodes a code of format F to float32, exactly.
template <fp_format F>
constexpr float decode_fp(std::uint32_t code) noexcept {
  constexpr int M = F.mantissa_bits;
  if (F.is_nan_code(code)) {
    // The sign bit of the code is kept, so the fnuz NaN (0x80) decodes to -NaN as in ONNX Runtime.
    const bool neg = F.is_signed && (code & F.sign_mask()) != 0u;
    return bits_float(0x7FC00000u | (neg ? 0x80000000u : 0u));
  }
  const std::uint32_t sign = (code & F.sign_mask()) != 0u ? 0x80000000u : 0u;
  const std::uint32_t mag = code & F.magnitude_mask();
  if (F.is_inf_code(code))
    return bits_float(sign | 0x7F800000u);
  const int field = static_cast<int>(mag >> M);
  const std::uint32_t frac = mag & F.mantissa_mask();
  std::uint32_t sig;
  int e;
  if (field == 0 && F.has_zero) {
    sig = frac;  // subnormal or zero
    e = 1 - F.bias - M;
  } else {
    sig = frac | (std::uint32_t{1} << M);
    e = field - F.bias - M;
  }
  // sig * 2^e is exactly representable in float32 for every supported format.
  const double v = static_cast<double>(sig) * exp2i(e);
  return bits_float(float_bits(static_cast<float>(v)) | sign);
}

}  // namespace quark::detail
