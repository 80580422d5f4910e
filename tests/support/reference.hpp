// SPDX-License-Identifier: MIT
// The slow, obviously-right reference for every element format, written from the format
// definitions and independent of quark's fp_format / encoder:
//
//  * a table of format definitions typed in from the specs (exponent bits, mantissa bits, bias,
//    where the specials are);
//  * decode(): sign * 2^(e - bias) * (1 + m / 2^M) (normal) or sign * 2^(1 - bias) * (m / 2^M)
//    (subnormal), evaluated in double (exact for every format here);
//  * encode(): lists every finite code of the format sorted by value, finds the two neighbours of
//    the input, compares the input with their exact midpoint and applies the rounding mode's tie
//    rule; then the overflow, NaN and zero rules of the policy;
//  * encode_int(): the same for integers, with std::floor / std::ceil.
//
// Sources: IEEE 754-2019 §3.6 (binary16; bfloat16 is binary32 with 16 fraction bits dropped);
// OCP 8-bit Floating Point Specification (OFP8) rev 1.0 Table 1 (E4M3: bias 7, S.1111.111 = NaN,
// no Inf; E5M2: bias 15, IEEE specials); the "fnuz" variants as defined by ONNX (bias + 1, the
// negative-zero pattern 0x80 is the only NaN, no Inf); OCP Microscaling Formats (MX) v1.0 §5.3
// (FP6 E3M2 bias 3, FP6 E2M3 bias 1, FP4 E2M1 bias 1, no Inf / NaN) and §5.4 (E8M0: bias 127,
// 0xFF = NaN, no zero, no sign).
//
// The reference encoder's conventions (the same ones quark promises, stated here independently):
//  * overflow: a value beyond the largest finite one (after rounding with an unbounded exponent)
//    saturates, or becomes Inf / NaN / max (whichever the format has first) under to_special; a
//    directed rounding toward smaller magnitude gives max, never Inf (IEEE 754 §7.4);
//  * NaN input: +0 under nan_handling::to_zero (NaN for E8M0, which has no zero); otherwise the
//    format's NaN with the input's sign (the single NaN for fnuz / E8M0), or +max for formats
//    without NaN (ONNX float4 rule);
//  * E8M0 (no zero) checks the range before rounding (ONNX Cast-25): below 2^-127 (including zero,
//    negatives and -Inf) gives 2^-127 (saturate) or NaN; above 2^127 gives 2^127 or NaN;
//  * fnuz formats have no -0: a zero result is +0.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <string_view>
#include <utility>
#include <vector>

#include <quark/core/policy.hpp>

namespace quark::test::ref {

/// Where the special values of a format are.
enum class specials_rule {
  ieee,           ///< exponent all ones: mantissa 0 is Inf, anything else NaN
  all_ones,       ///< only exponent and mantissa all ones is NaN ("fn"); no Inf
  negative_zero,  ///< the pattern 1000...0 is the only NaN; no Inf, no -0 ("fnuz")
  none,           ///< every pattern is a number (FP6, FP4)
  e8m0,           ///< unsigned, no zero, 0xFF is NaN
};

struct format_def {
  std::string_view name;
  int exponent_bits;
  int mantissa_bits;
  int bias;
  bool has_sign;
  specials_rule rule;
  int bits() const { return (has_sign ? 1 : 0) + exponent_bits + mantissa_bits; }
};

// Typed in from the specs listed in the file comment.
inline constexpr format_def float16{"float16", 5, 10, 15, true, specials_rule::ieee};
inline constexpr format_def bfloat16{"bfloat16", 8, 7, 127, true, specials_rule::ieee};
inline constexpr format_def float8_e4m3fn{"float8_e4m3fn", 4, 3, 7, true, specials_rule::all_ones};
inline constexpr format_def float8_e4m3fnuz{"float8_e4m3fnuz",           4, 3, 8, true,
                                            specials_rule::negative_zero};
inline constexpr format_def float8_e5m2{"float8_e5m2", 5, 2, 15, true, specials_rule::ieee};
inline constexpr format_def float8_e5m2fnuz{"float8_e5m2fnuz",           5, 2, 16, true,
                                            specials_rule::negative_zero};
inline constexpr format_def float6_e3m2fn{"float6_e3m2fn", 3, 2, 3, true, specials_rule::none};
inline constexpr format_def float6_e2m3fn{"float6_e2m3fn", 2, 3, 1, true, specials_rule::none};
inline constexpr format_def float4_e2m1fn{"float4_e2m1fn", 2, 1, 1, true, specials_rule::none};
inline constexpr format_def float8_e8m0fnu{"float8_e8m0fnu", 8, 0, 127, false, specials_rule::e8m0};

/// A decoded value: a number (with the sign of zero kept in `v`), an infinity or a NaN.
struct value {
  enum kind_t { number, infinity, nan } kind = number;
  double v = 0.0;         ///< the number, or +-1 for an infinity
  bool negative = false;  ///< sign bit (for NaN: the code's sign bit)
};

/// Decodes `code` from the definition alone.
inline value decode(const format_def& f, std::uint32_t code) {
  const int M = f.mantissa_bits;
  const int E = f.exponent_bits;
  const std::uint32_t m = code & ((1u << M) - 1u);
  const std::uint32_t e = (code >> M) & ((1u << E) - 1u);
  const bool s = f.has_sign && ((code >> (E + M)) & 1u) != 0u;
  const std::uint32_t e_ones = (1u << E) - 1u;
  const std::uint32_t m_ones = (1u << M) - 1u;
  value r;
  r.negative = s;
  switch (f.rule) {
    case specials_rule::ieee:
      if (e == e_ones) {
        r.kind = m == 0u ? value::infinity : value::nan;
        r.v = s ? -1.0 : 1.0;
        return r;
      }
      break;
    case specials_rule::all_ones:
      if (e == e_ones && m == m_ones) {
        r.kind = value::nan;
        return r;
      }
      break;
    case specials_rule::negative_zero:
      if (s && e == 0u && m == 0u) {
        r.kind = value::nan;
        return r;
      }
      break;
    case specials_rule::e8m0:
      if (e == e_ones) {
        r.kind = value::nan;
        return r;
      }
      r.v = std::ldexp(1.0, static_cast<int>(e) - f.bias);
      return r;
    case specials_rule::none:
      break;
  }
  double mag;
  if (e == 0u) {
    mag = std::ldexp(static_cast<double>(m), 1 - f.bias - M);  // subnormal or zero
  } else {
    mag = std::ldexp(1.0 + std::ldexp(static_cast<double>(m), -M), static_cast<int>(e) - f.bias);
  }
  r.v = s ? -mag : mag;
  return r;
}

/// Every non-negative finite value of the format with its code, ascending, plus one "virtual"
/// entry just past the largest finite value: the next grid point an unbounded exponent range
/// would have (code max+1, so ties keep their parity rule).
struct grid {
  std::vector<std::pair<double, std::uint32_t>> points;  // finite, ascending
  double virtual_next = 0.0;
  std::uint32_t max_code = 0;
  std::uint32_t sign_bit = 0;
};

inline const grid& grid_of(const format_def& f) {
  static std::map<std::string_view, grid> cache;
  auto it = cache.find(f.name);
  if (it != cache.end())
    return it->second;
  grid g;
  const int mag_bits = f.exponent_bits + f.mantissa_bits;
  g.sign_bit = f.has_sign ? (1u << mag_bits) : 0u;
  for (std::uint32_t c = 0; c < (1u << mag_bits); ++c) {
    const value d = decode(f, c);
    if (d.kind == value::number)
      g.points.emplace_back(d.v, c);
  }
  std::sort(g.points.begin(), g.points.end());
  g.max_code = g.points.back().second;
  // The spacing of the top binade: 2^(exponent of max - M).
  const double mx = g.points.back().first;
  const int ex = std::ilogb(mx);
  g.virtual_next = mx + std::ldexp(1.0, ex - f.mantissa_bits);
  return cache.emplace(f.name, std::move(g)).first->second;
}

/// Canonical NaN code for the given sign (quiet NaN for IEEE formats).
inline std::uint32_t nan_code(const format_def& f, bool negative) {
  const int M = f.mantissa_bits;
  const int E = f.exponent_bits;
  const std::uint32_t sign = (negative && f.has_sign) ? (1u << (E + M)) : 0u;
  switch (f.rule) {
    case specials_rule::ieee:
      return sign | (((1u << E) - 1u) << M) | (1u << (M - 1));
    case specials_rule::all_ones:
      return sign | ((1u << (E + M)) - 1u);
    case specials_rule::negative_zero:
      return 1u << (E + M);
    case specials_rule::e8m0:
      return 0xFFu;
    case specials_rule::none:
      break;
  }
  return 0u;
}

/// Rounds magnitude `ax` (finite, >= the smallest grid value) to the grid. Returns the code, or
/// grid.max_code + 1 for "overflowed". `up_bias` is the stochastic fraction threshold (see encode).
inline std::uint32_t round_magnitude(const format_def& f, double ax, bool negative, rounding r,
                                     std::uint32_t random) {
  const grid& g = grid_of(f);
  const auto& p = g.points;
  // Largest i with p[i].first <= ax.
  auto it =
      std::upper_bound(p.begin(), p.end(), ax, [](double x, const auto& e) { return x < e.first; });
  const std::size_t i = static_cast<std::size_t>(it - p.begin()) - 1;
  if (p[i].first == ax)
    return p[i].second;
  const double lo = p[i].first;
  const std::uint32_t lo_code = p[i].second;
  const bool at_top = i + 1 == p.size();
  const double hi = at_top ? g.virtual_next : p[i + 1].first;
  const std::uint32_t hi_code = at_top ? g.max_code + 1 : p[i + 1].second;
  const bool beyond = at_top && ax >= hi;  // past the virtual point: any rounding overflows
  // Which neighbour each mode picks, by magnitude.
  bool pick_hi = false;
  const double mid = (lo + hi) / 2;  // exact: both are short binary fractions
  switch (r) {
    case rounding::nearest_even:
      // Ties go to the even code. With no mantissa bits (E8M0) both neighbours have significand 1
      // and IEEE's "even digit" rule cannot choose: the tie goes up, as in ml_dtypes.
      pick_hi = ax > mid || (ax == mid && (f.mantissa_bits == 0 || (hi_code & 1u) == 0u));
      break;
    case rounding::nearest_away:
      pick_hi = ax >= mid;
      break;
    case rounding::nearest_up:
      pick_hi = ax > mid || (ax == mid && !negative);
      break;
    case rounding::toward_zero:
      pick_hi = false;
      break;
    case rounding::toward_positive:
      pick_hi = !negative;
      break;
    case rounding::toward_negative:
      pick_hi = negative;
      break;
    case rounding::stochastic: {
      // Up with probability frac = (ax - lo) / (hi - lo): up iff frac + random / 2^32 >= 1.
      // Exact in long double while frac has at most 31 significant fraction bits.
      const long double frac = (static_cast<long double>(ax) - static_cast<long double>(lo)) /
                               (static_cast<long double>(hi) - static_cast<long double>(lo));
      pick_hi = frac + std::ldexp(static_cast<long double>(random), -32) >= 1.0L;
      break;
    }
  }
  if (beyond) {
    // Every mode that rounds toward larger magnitude overflows; the others give max.
    const bool down = r == rounding::toward_zero || (r == rounding::toward_positive && negative) ||
                      (r == rounding::toward_negative && !negative);
    return down ? g.max_code : g.max_code + 1;
  }
  return pick_hi ? hi_code : lo_code;
}

/// Encodes float x into format f under policy p (random: stochastic rounding bits).
inline std::uint32_t encode(const format_def& f, float x, conversion_policy p,
                            std::uint32_t random = 0) {
  const grid& g = grid_of(f);
  const bool negative = std::signbit(x);
  const bool saturate = p.on_overflow == overflow::saturate;
  const std::uint32_t sign = negative ? g.sign_bit : 0u;
  if (std::isnan(x)) {
    if (p.nan == nan_handling::to_zero) {
      return f.rule == specials_rule::e8m0 ? nan_code(f, false) : 0u;
    }
    return f.rule == specials_rule::none ? g.max_code : nan_code(f, negative);
  }
  if (f.rule == specials_rule::e8m0) {
    const double lo = g.points.front().first;
    const double hi = g.points.back().first;
    if (negative || static_cast<double>(x) < lo)
      return saturate ? g.points.front().second : 0xFFu;
    if (static_cast<double>(x) > hi)
      return saturate ? g.max_code : 0xFFu;
  }
  // The value that stands for "overflowed", per the policy.
  const auto overflowed = [&]() -> std::uint32_t {
    if (saturate)
      return g.max_code | sign;
    switch (f.rule) {
      case specials_rule::ieee:
        return sign | (((1u << f.exponent_bits) - 1u) << f.mantissa_bits);  // Inf
      case specials_rule::all_ones:
      case specials_rule::negative_zero:
      case specials_rule::e8m0:
        return nan_code(f, negative);
      case specials_rule::none:
        break;
    }
    return g.max_code | sign;
  };
  if (std::isinf(x))
    return overflowed();
  const std::uint32_t mag =
      round_magnitude(f, std::fabs(static_cast<double>(x)), negative, p.round, random);
  if (mag == g.max_code + 1)
    return overflowed();
  if (mag == 0u && f.rule == specials_rule::negative_zero)
    return 0u;  // no -0
  return mag | sign;
}

/// The reference integer conversion: round by mode, clamp to [lo, hi], NaN -> 0.
/// Stochastic: up (away from zero) iff (random >> 8) < floor(|frac| * 2^24), a 24-bit threshold.
inline long long encode_int(float x, long long lo, long long hi, rounding r,
                            std::uint32_t random = 0) {
  if (std::isnan(x))
    return 0;
  const double d = static_cast<double>(x);
  if (std::isinf(x))
    return x > 0 ? hi : lo;
  const double fl = std::floor(d);
  const double ce = std::ceil(d);
  double v = fl;
  if (fl != ce) {
    const double dist_lo = d - fl;  // exact for float inputs
    const bool neg = d < 0;
    switch (r) {
      case rounding::nearest_even:
        v = dist_lo < 0.5 ? fl : dist_lo > 0.5 ? ce : (std::fmod(fl, 2.0) == 0.0 ? fl : ce);
        break;
      case rounding::nearest_away:
        v = dist_lo < 0.5 ? fl : dist_lo > 0.5 ? ce : (neg ? fl : ce);
        break;
      case rounding::nearest_up:
        v = dist_lo < 0.5 ? fl : ce;
        break;
      case rounding::toward_zero:
        v = neg ? ce : fl;
        break;
      case rounding::toward_positive:
        v = ce;
        break;
      case rounding::toward_negative:
        v = fl;
        break;
      case rounding::stochastic: {
        const double af = neg ? ce - d : d - fl;  // distance from the value toward zero
        const double toward_zero_v = neg ? ce : fl;
        const double away_v = neg ? fl : ce;
        v = static_cast<double>(random >> 8) < std::floor(std::ldexp(af, 24)) ? away_v
                                                                              : toward_zero_v;
        break;
      }
    }
  }
  if (v <= static_cast<double>(lo))
    return lo;
  if (v >= static_cast<double>(hi))
    return hi;
  return static_cast<long long>(v);
}

}  // namespace quark::test::ref
