// SPDX-License-Identifier: MIT
// std::numeric_limits for every minifloat (one partial specialization computed from the format)
// and for the sub-byte integers.
#pragma once

#include <limits>

#include <quark/dtype/formats.hpp>

namespace std {

template <quark::fp_format F>
class numeric_limits<quark::minifloat<F>> {
  using T = quark::minifloat<F>;
  static constexpr T bits(std::uint32_t c) noexcept {
    return T::from_bits(static_cast<typename T::storage_type>(c));
  }

 public:
  static constexpr bool is_specialized = true;
  static constexpr bool is_signed = F.is_signed;
  static constexpr bool is_integer = false;
  static constexpr bool is_exact = false;
  static constexpr bool has_infinity = F.has_inf();
  static constexpr bool has_quiet_NaN = F.has_nan();
  static constexpr bool has_signaling_NaN = false;
  static constexpr float_denorm_style has_denorm =
      F.has_subnormals() ? denorm_present : denorm_absent;
  static constexpr bool has_denorm_loss = false;
  static constexpr float_round_style round_style = round_to_nearest;
  static constexpr bool is_iec559 = false;
  static constexpr bool is_bounded = true;
  static constexpr bool is_modulo = false;
  static constexpr int digits = F.mantissa_bits + 1;
  // The decimal members as the standard defines them (30103 / 100000 approximates log10(2)
  // closely enough for these widths; the formulas give float's 6, 9, -37 and 38):
  // digits10 = floor((digits - 1) log10 2), max_digits10 = ceil(1 + digits log10 2),
  // min_exponent10 = ceil(log10(min normal)), max_exponent10 = floor(log10(max finite)).
  static constexpr int digits10 = (digits - 1) * 30103 / 100000;
  static constexpr int max_digits10 = 2 + digits * 30103 / 100000;
  static constexpr int radix = 2;
  static constexpr int min_exponent = F.min_normal_exponent() + 1;
  static constexpr int min_exponent10 = -((1 - min_exponent) * 30103 / 100000);
  static constexpr int max_exponent = F.max_normal_exponent() + 1;
  static constexpr int max_exponent10 = [] {
    const double mx = static_cast<double>(quark::detail::decode_fp<F>(F.max_finite_code()));
    int k = 0;
    for (double p = 10.0; p <= mx; p *= 10.0)
      ++k;
    return k;
  }();
  static constexpr bool traps = false;
  static constexpr bool tinyness_before = false;

  /// Smallest positive normal value.
  static constexpr T min() noexcept {
    return bits(F.has_zero ? (std::uint32_t{1} << F.mantissa_bits) : 0u);
  }
  static constexpr T max() noexcept { return bits(F.max_finite_code()); }
  static constexpr T lowest() noexcept {
    return F.is_signed ? bits(F.max_finite_code() | F.sign_mask()) : min();
  }
  /// Difference between 1 and the next value (2^-mantissa_bits).
  static constexpr T epsilon() noexcept {
    return T(quark::detail::bits_float(static_cast<std::uint32_t>(127 - F.mantissa_bits) << 23));
  }
  static constexpr T round_error() noexcept { return T(0.5f); }
  static constexpr T infinity() noexcept { return bits(F.has_inf() ? F.inf_code() : 0u); }
  static constexpr T quiet_NaN() noexcept { return bits(F.has_nan() ? F.nan_code(false) : 0u); }
  static constexpr T signaling_NaN() noexcept { return quiet_NaN(); }
  static constexpr T denorm_min() noexcept { return bits(F.has_subnormals() ? 1u : 0u); }
};

template <int B, bool S>
class numeric_limits<quark::int_n<B, S>> {
  using T = quark::int_n<B, S>;

 public:
  static constexpr bool is_specialized = true;
  static constexpr bool is_signed = S;
  static constexpr bool is_integer = true;
  static constexpr bool is_exact = true;
  static constexpr bool has_infinity = false;
  static constexpr bool has_quiet_NaN = false;
  static constexpr bool has_signaling_NaN = false;
  static constexpr bool is_bounded = true;
  static constexpr bool is_modulo = false;
  static constexpr int digits = S ? B - 1 : B;
  static constexpr int radix = 2;
  static constexpr T min() noexcept { return T(T::min_value); }
  static constexpr T max() noexcept { return T(T::max_value); }
  static constexpr T lowest() noexcept { return T(T::min_value); }
};

}  // namespace std
