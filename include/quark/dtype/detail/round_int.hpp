// SPDX-License-Identifier: MIT
// Rounding a float to an integral float under an explicit mode, independent of the floating-point
// environment: truncate through an integer conversion (exact below 2^23), then adjust from the
// exact fraction.
#pragma once

#include <cstdint>

#include <quark/config.hpp>
#include <quark/core/bit.hpp>
#include <quark/core/policy.hpp>

namespace quark::detail {

/// x rounded to an integral value by mode R. NaN and Inf pass through unchanged.
template <rounding R>
QUARK_ALWAYS_INLINE constexpr float round_integral(float x, std::uint32_t random = 0) noexcept {
  const float ax = x < 0.0f ? -x : x;
  if (!(ax < 8388608.0f))
    return x;  // |x| >= 2^23 is already integral (or NaN / Inf)
  const float t = static_cast<float>(static_cast<std::int32_t>(x));  // toward zero, exact
  const float frac = x - t;                                          // exact, in (-1, 1)
  const float af = frac < 0.0f ? -frac : frac;
  const float step = x < 0.0f ? -1.0f : 1.0f;
  if constexpr (R == rounding::toward_zero) {
    return t;
  } else if constexpr (R == rounding::nearest_even) {
    const bool odd = (static_cast<std::int32_t>(t) & 1) != 0;
    return (af > 0.5f || (af == 0.5f && odd)) ? t + step : t;
  } else if constexpr (R == rounding::nearest_away) {
    return af >= 0.5f ? t + step : t;
  } else if constexpr (R == rounding::nearest_up) {
    return (x < 0.0f ? af > 0.5f : af >= 0.5f) ? t + step : t;
  } else if constexpr (R == rounding::toward_positive) {
    return (frac > 0.0f) ? t + 1.0f : t;
  } else if constexpr (R == rounding::toward_negative) {
    return (frac < 0.0f) ? t - 1.0f : t;
  } else {
    static_assert(R == rounding::stochastic);
    // Up (away from zero) with probability |frac|: compare against 24 random bits.
    const auto threshold = static_cast<std::uint32_t>(af * 16777216.0f);  // exact: af < 1
    return ((random >> 8) < threshold) ? t + step : t;
  }
}

}  // namespace quark::detail
