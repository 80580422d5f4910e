// SPDX-License-Identifier: MIT
// Rounding of an integer significand by a right shift, for every rounding mode, without the
// floating-point environment. The nearest-even form is branch-free so loops vectorise.
#pragma once

#include <cstdint>

#include <quark/config.hpp>
#include <quark/core/bit.hpp>
#include <quark/core/policy.hpp>

namespace quark::detail {

/// Returns m / 2^shift rounded by mode R; `negative` is the sign of the value m represents and
/// `random` supplies the entropy for stochastic rounding (its top `shift` bits are used).
/// Precondition: 1 <= shift <= 31.
template <rounding R>
QUARK_ALWAYS_INLINE constexpr std::uint32_t round_shift(std::uint32_t m, std::uint32_t shift,
                                                        bool negative,
                                                        std::uint32_t random = 0) noexcept {
  const std::uint32_t q = m >> shift;
  const std::uint32_t rem = m & ((std::uint32_t{1} << shift) - 1u);
  const std::uint32_t half = std::uint32_t{1} << (shift - 1u);
  if constexpr (R == rounding::nearest_even) {
    // Adding half-1 plus the lsb of the quotient carries exactly when rem > half, or rem == half
    // with an odd quotient.
    return (m + (half - 1u) + (q & 1u)) >> shift;
  } else if constexpr (R == rounding::nearest_away) {
    return q + (rem >= half ? 1u : 0u);
  } else if constexpr (R == rounding::nearest_up) {
    return q + ((negative ? rem > half : rem >= half) ? 1u : 0u);
  } else if constexpr (R == rounding::toward_zero) {
    return q;
  } else if constexpr (R == rounding::toward_positive) {
    return q + ((!negative && rem != 0u) ? 1u : 0u);
  } else if constexpr (R == rounding::toward_negative) {
    return q + ((negative && rem != 0u) ? 1u : 0u);
  } else {
    static_assert(R == rounding::stochastic);
    // Carry out of rem + r, with r uniform in [0, 2^shift): probability rem / 2^shift.
    return q + ((rem + (random >> (32u - shift))) >> shift);
  }
}

}  // namespace quark::detail
