// SPDX-License-Identifier: MIT
// double -> arithmetic T without undefined behaviour: a floating-point value converted to an
// integer type whose range does not hold it is undefined in C++ (UBSan float-cast-overflow), so
// the value is truncated toward zero and clamped to T's range first; NaN gives 0.
#pragma once

#include <cmath>
#include <limits>
#include <type_traits>

namespace quark {

/// `v` truncated toward zero and saturated to T's range (NaN -> 0) for an integer T; a plain
/// conversion for a floating-point T.
///
///     quark::saturate_cast<std::int8_t>(1e300);   // 127
///     quark::saturate_cast<std::uint16_t>(-3.7);  // 0
///     quark::saturate_cast<std::int32_t>(-2.9);   // -2
template <class T>
  requires std::is_arithmetic_v<T>
[[nodiscard]] T saturate_cast(double v) noexcept {
  if constexpr (std::is_floating_point_v<T>) {
    return static_cast<T>(v);
  } else {
    if (v != v)
      return T(0);
    const double t = std::trunc(v);
    // lowest() is 0 or -2^k and max() + 1 is 2^k: both exact in a double.
    if (t <= static_cast<double>(std::numeric_limits<T>::lowest()))
      return std::numeric_limits<T>::lowest();
    if (t >= std::ldexp(1.0, std::numeric_limits<T>::digits))
      return std::numeric_limits<T>::max();
    return static_cast<T>(t);
  }
}

}  // namespace quark
