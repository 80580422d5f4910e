// SPDX-License-Identifier: MIT
// Power-of-two scales 2^k (quark-spec §2.2). Quark stores the DPU "position" p = -k and chooses
// p = rint(-log2 s) for a real scale s clamped to [2^-127, 2^127]: the nearest power in the log
// domain, which may be smaller than s by up to sqrt(2) and then clips the calibrated range. The
// `pow2_rounding::ceil` option is the true non-overflow rule: the smallest 2^k >= s.
#pragma once

#include <cstdint>

#include <quark/core/bit.hpp>
#include <quark/scale/traits.hpp>

namespace quark {

/// A power-of-two scale 2^exponent; `position()` is Quark's fix position (-exponent).
///
///     quark::pow2_scale s{-7};               // 2^-7 = 0.0078125, position 7
///     auto p = quark::scale_traits<quark::pow2_scale>::from_float(0.011f, {});  // exponent -7
struct pow2_scale {
  std::int8_t exponent = 0;
  constexpr int position() const noexcept { return -exponent; }
  static constexpr pow2_scale from_position(int pos) noexcept {
    return {static_cast<std::int8_t>(pos < -127 ? 127 : (pos > 127 ? -127 : -pos))};
  }
};

template <>
struct scale_traits<pow2_scale> {
  using storage_type = std::int8_t;
  static constexpr std::string_view name = "power_of_two";
  static constexpr bool is_power_of_two = true;
  static constexpr float to_float(pow2_scale s) noexcept { return detail::exp2f_exact(s.exponent); }

  /// Projects s > 0 onto 2^k, k in [-127, 127]. NaN or s <= 0 gives 2^0 (the zero-range scale).
  ///
  /// Steps: (1) clamp s to [2^-127, 2^127] as Quark's scale2pos does; (2) write s = m * 2^e with
  /// m in [1, 2) exactly from the bits; (3) nearest_log2: log2 s = e + log2 m rounds up iff
  /// log2 m > 1/2, i.e. m^2 > 2 (m has 24 bits, so m^2 is exact in double and log2 m is never
  /// exactly 1/2); ceil: round up iff m > 1.
  static constexpr pow2_scale from_float(float s, scale_projection p = {}) noexcept {
    if (!(s > 0.0f))
      return {0};
    // 1. Clamp to Quark's range (2^127 is the largest power of two a float holds).
    const float lo = detail::exp2f_exact(-127);
    const float hi = detail::exp2f_exact(127);
    s = s < lo ? lo : (s > hi ? hi : s);
    // 2. s = m * 2^e, m in [1, 2).
    const int e = detail::ilogb_exact(s);
    const double m = static_cast<double>(s) / detail::exp2i(e);
    // 3. Round the exponent.
    const bool up = p.pow2 == pow2_rounding::nearest_log2 ? (m * m > 2.0) : (m > 1.0);
    int k = e + (up ? 1 : 0);
    k = k > 127 ? 127 : (k < -127 ? -127 : k);
    return {static_cast<std::int8_t>(k)};
  }
};

}  // namespace quark
