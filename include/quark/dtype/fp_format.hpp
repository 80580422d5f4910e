// SPDX-License-Identifier: MIT
// The floating-point format descriptor: one structural aggregate that every minifloat is built
// from (float16, bfloat16, the four OFP8 variants, OCP MX FP6/FP4 and E8M0). All derived facts
// (max finite code, NaN/Inf codes, subnormals) are constexpr member functions, so there is one
// place to read them and one place to test them.
#pragma once

#include <cstdint>

namespace quark {

/// Where a format keeps its special values.
enum class specials : std::uint8_t {
  ieee,                  ///< all-ones exponent: Inf (mantissa 0) and NaN (float16, bfloat16, e5m2)
  nan_only,              ///< only the all-ones magnitude is NaN, no Inf ("fn": e4m3fn, e8m0fnu)
  nan_at_negative_zero,  ///< the negative-zero pattern is the one NaN, no Inf, no -0 ("fnuz")
  none,                  ///< every pattern is a finite number (OCP MX FP6 and FP4)
};

/// Describes a binary floating-point format of at most 16 bits.
struct fp_format {
  int exponent_bits;
  int mantissa_bits;
  int bias;
  bool is_signed = true;
  specials special = specials::ieee;
  /// false: the zero exponent field is an ordinary binade (E8M0 has no zero and no subnormals).
  bool has_zero = true;

  constexpr bool operator==(const fp_format&) const = default;

  constexpr int total_bits() const { return (is_signed ? 1 : 0) + exponent_bits + mantissa_bits; }
  constexpr std::uint32_t magnitude_mask() const {
    return (std::uint32_t{1} << (exponent_bits + mantissa_bits)) - 1u;
  }
  constexpr std::uint32_t sign_mask() const {
    return is_signed ? std::uint32_t{1} << (exponent_bits + mantissa_bits) : 0u;
  }
  constexpr std::uint32_t mantissa_mask() const { return (std::uint32_t{1} << mantissa_bits) - 1u; }
  constexpr int max_exponent_field() const { return (1 << exponent_bits) - 1; }
  constexpr bool has_inf() const { return special == specials::ieee; }
  constexpr bool has_nan() const { return special != specials::none; }
  constexpr bool has_negative_zero() const {
    return is_signed && has_zero && special != specials::nan_at_negative_zero;
  }
  constexpr bool has_subnormals() const { return has_zero && mantissa_bits > 0; }
  /// Magnitude code of the largest finite value.
  constexpr std::uint32_t max_finite_code() const {
    switch (special) {
      case specials::ieee:
        return (static_cast<std::uint32_t>(max_exponent_field() - 1) << mantissa_bits) |
               mantissa_mask();
      case specials::nan_only:
        return magnitude_mask() - 1u;
      default:
        return magnitude_mask();
    }
  }
  /// Magnitude code of +Inf (only meaningful when has_inf()).
  constexpr std::uint32_t inf_code() const {
    return static_cast<std::uint32_t>(max_exponent_field()) << mantissa_bits;
  }
  /// Full code of the canonical NaN for the given sign (quiet NaN for IEEE formats).
  constexpr std::uint32_t nan_code(bool negative) const {
    switch (special) {
      case specials::ieee:
        return inf_code() | (std::uint32_t{1} << (mantissa_bits - 1)) |
               (negative ? sign_mask() : 0u);
      case specials::nan_only:
        return magnitude_mask() | (negative ? sign_mask() : 0u);
      case specials::nan_at_negative_zero:
        return sign_mask();
      default:
        return 0u;
    }
  }
  /// True if the full code is a NaN.
  constexpr bool is_nan_code(std::uint32_t code) const {
    const std::uint32_t mag = code & magnitude_mask();
    switch (special) {
      case specials::ieee:
        return (mag >> mantissa_bits) == static_cast<std::uint32_t>(max_exponent_field()) &&
               (mag & mantissa_mask()) != 0;
      case specials::nan_only:
        return mag == magnitude_mask();
      case specials::nan_at_negative_zero:
        return code == sign_mask();
      default:
        return false;
    }
  }
  constexpr bool is_inf_code(std::uint32_t code) const {
    return has_inf() && (code & magnitude_mask()) == inf_code();
  }
  /// Unbiased exponent of the smallest normal binade.
  constexpr int min_normal_exponent() const { return (has_zero ? 1 : 0) - bias; }
  /// Unbiased exponent of the largest finite binade.
  constexpr int max_normal_exponent() const {
    return static_cast<int>(max_finite_code() >> mantissa_bits) - bias;
  }
};

}  // namespace quark
