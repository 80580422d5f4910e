// SPDX-License-Identifier: MIT
// E8M0 scales (OCP MX v1.0 §5.4.1): an unsigned 8-bit exponent, value 2^(e - 127), NaN at 0xFF,
// no zero. A thin wrapper over float8_e8m0fnu; the projection reuses the data type's encoder
// with a directed or nearest rounding, saturating at 2^-127 and 2^127.
#pragma once

#include <quark/core/policy.hpp>
#include <quark/dtype/convert.hpp>
#include <quark/dtype/formats.hpp>
#include <quark/scale/traits.hpp>

namespace quark {

/// An E8M0 scale.
///
///     auto s = quark::scale_traits<quark::e8m0_scale>::from_float(0.3f, {});  // 0.25 (floor)
struct e8m0_scale {
  float8_e8m0fnu value = float8_e8m0fnu::from_bits(127);  // 2^0
};

template <>
struct scale_traits<e8m0_scale> {
  using storage_type = float8_e8m0fnu;
  static constexpr std::string_view name = "e8m0";
  static constexpr bool is_power_of_two = true;
  static constexpr float to_float(e8m0_scale s) noexcept { return quark::to_float(s.value); }

  /// floor (OCP default), ceil or nearest; out-of-range values saturate; NaN stays NaN (0xFF).
  static constexpr e8m0_scale from_float(float s, scale_projection p = {}) noexcept {
    constexpr conversion_policy down{rounding::toward_negative, overflow::saturate,
                                     nan_handling::propagate};
    constexpr conversion_policy up{rounding::toward_positive, overflow::saturate,
                                   nan_handling::propagate};
    constexpr conversion_policy nearest{rounding::nearest_even, overflow::saturate,
                                        nan_handling::propagate};
    switch (p.e8m0) {
      case e8m0_rounding::ceil:
        return {convert<float8_e8m0fnu, up>(s)};
      case e8m0_rounding::nearest:
        return {convert<float8_e8m0fnu, nearest>(s)};
      case e8m0_rounding::floor:
        break;
    }
    return {convert<float8_e8m0fnu, down>(s)};
  }
};

}  // namespace quark
