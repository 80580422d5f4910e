// SPDX-License-Identifier: MIT
// Finding NaN / +-Inf in a span of floating-point values (float, double, or a type such as
// quark::float16 that converts to float): how many there are, where the first one is, and its
// name for a message. The float count is branch-free on the exponent bits, so it vectorises: the
// checks that every calibration sample passes cost less than a memcpy of it.
//
//     if (const auto i = quark::first_non_finite(std::span<const float>(v)))
//       throw ... quark::non_finite_name(v[*i]) ... " at element " << *i;
#pragma once

#include <bit>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

namespace quark {

namespace detail {

template <class T>
double finite_probe(T x) noexcept {
  if constexpr (std::floating_point<T>)
    return static_cast<double>(x);  // a double past FLT_MAX stays finite
  else
    return static_cast<double>(static_cast<float>(x));
}

}  // namespace detail

/// Number of NaN / +-Inf values in `v`.
template <class T>
std::size_t count_non_finite(std::span<const T> v) noexcept {
  std::size_t n = 0;
  if constexpr (std::same_as<T, float>) {
    for (const float x : v)
      n += (std::bit_cast<std::uint32_t>(x) & 0x7f800000u) == 0x7f800000u;
  } else {
    for (const T x : v)
      n += !std::isfinite(detail::finite_probe(x));
  }
  return n;
}

/// Index of the first NaN / +-Inf value of `v`, or nullopt when every value is finite.
template <class T>
std::optional<std::size_t> first_non_finite(std::span<const T> v) noexcept {
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (!std::isfinite(detail::finite_probe(v[i])))
      return i;
  }
  return std::nullopt;
}

/// "NaN", "+Inf" or "-Inf" for a non-finite `x` (a finite one gives "finite").
template <class T>
const char* non_finite_name(T x) noexcept {
  const double d = detail::finite_probe(x);
  return std::isnan(d) ? "NaN" : std::isinf(d) ? (d > 0 ? "+Inf" : "-Inf") : "finite";
}

}  // namespace quark
