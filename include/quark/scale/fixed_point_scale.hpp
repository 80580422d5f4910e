// SPDX-License-Identifier: MIT
// Int16 fixed-point scales M * 2^-N (quark-spec §2.3, Quark's `find_int16_scale`). Quark tries
// N = 0..16 and, for each, M = floor(x * 2^N) then ceil(x * 2^N), keeping a candidate only when
// its error is strictly smaller. When that finds no non-zero M (x <= 2^-17 or x > 32767) Quark
// collapses the scale to 2^-14; this project does not (decision 1 of quark-spec): by default the
// search continues over shifts outside [0, 16], which the int8 shift field holds.
#pragma once

#include <cstdint>

#include <quark/core/bit.hpp>
#include <quark/scale/traits.hpp>

namespace quark {

/// A scale multiplier * 2^-shift with an int16 multiplier.
///
///     quark::fixed_point_scale s{403, 15};  // 0.012298583984375
struct fixed_point_scale {
  std::int16_t multiplier = 1;
  std::int8_t shift = 0;
};

namespace detail {

/// Result of one fixed-point search: multiplier, shift and |M * 2^-N - x|.
struct fixed_point_candidate {
  std::int32_t multiplier = 0;
  int shift = 0;
  double error = 0.0;
  bool found = false;
};

constexpr double floor_small(double t) noexcept {  // |t| < 2^16, so the cast is in range
  const auto i = static_cast<double>(static_cast<std::int64_t>(t));
  return i > t ? i - 1.0 : i;
}

/// Quark's search over shifts [n_lo, n_hi]: floor then ceil, strictly smaller error wins.
constexpr fixed_point_candidate search_fixed_point(double x, int n_lo, int n_hi) noexcept {
  fixed_point_candidate best;
  for (int n = n_lo; n <= n_hi; ++n) {
    const double p = exp2i(n);
    const double t = x * p;  // exact: a power-of-two scaling of a float
    // 1. Skip shifts whose multiplier would not fit int16 (NaN and Inf fail both tests).
    if (!(t >= -32768.0 && t <= 32767.0))
      continue;
    // 2. Floor first, then ceil: on equal errors the earlier (smaller N, floor) stays.
    const double f = floor_small(t);
    const double cands[2] = {f, f == t ? f : f + 1.0};
    for (double m : cands) {
      const double d = m / p - x;
      const double err = d < 0.0 ? -d : d;
      if (!best.found || err < best.error) {
        best = {static_cast<std::int32_t>(m), n, err, true};
      }
    }
  }
  return best;
}

}  // namespace detail

template <>
struct scale_traits<fixed_point_scale> {
  using storage_type = std::int16_t;
  static constexpr std::string_view name = "int16_fixed_point";
  static constexpr bool is_power_of_two = false;
  static constexpr float to_float(fixed_point_scale s) noexcept {
    // M has at most 15 significant bits and N is in [-112, 127]: the product is an exact float.
    return static_cast<float>(static_cast<double>(s.multiplier) * detail::exp2i(-s.shift));
  }

  /// Steps: (1) Quark's search over N in [0, 16]; (2) if it yields M = 0 (or nothing), either
  /// collapse to 2^-14 (quark_collapse) or search N in [17, 127] for small |x| and [-112, -1]
  /// for large |x|; (3) an infinite x saturates to the largest representable magnitude.
  static constexpr fixed_point_scale from_float(float s, scale_projection p = {}) noexcept {
    const auto x = static_cast<double>(s);
    if (x == 0.0 || x != x)
      return {0, 0};
    // 1. Quark's search.
    detail::fixed_point_candidate c = detail::search_fixed_point(x, 0, 16);
    if (c.found && c.multiplier != 0)
      return make(c);
    // 2. Quark's fallback, or the extended search.
    if (p.fixed_point == fixed_point_fallback::quark_collapse)
      return {1, 14};
    const double ax = x < 0.0 ? -x : x;
    c = ax < 1.0 ? detail::search_fixed_point(x, 17, 127) : detail::search_fixed_point(x, -112, -1);
    if (c.found && c.multiplier != 0)
      return make(c);
    // 3. Beyond every shift: saturate (tiny magnitudes below 2^-128 round to zero above).
    if (ax >= 1.0)
      return {static_cast<std::int16_t>(x < 0.0 ? -32768 : 32767), -112};
    return {0, 0};
  }

 private:
  static constexpr fixed_point_scale make(detail::fixed_point_candidate c) noexcept {
    return {static_cast<std::int16_t>(c.multiplier), static_cast<std::int8_t>(c.shift)};
  }
};

}  // namespace quark
