// SPDX-License-Identifier: MIT
// A natural logarithm for positive normal doubles that the compiler vectorises (std::log is a
// library call per element): x = m 2^e with m in [sqrt(1/2), sqrt(2)), then
// log m = 2 atanh(s) = 2 (s + s^3/3 + s^5/5 + ...), s = (m - 1)/(m + 1), |s| <= 0.1716, summed to
// s^21 (the next term is below 2^-60 of the result), and log x = e ln2_hi + (e ln2_lo + log m)
// with ln2 split so that e ln2_hi is exact. Accurate to a few ulp (tests/calib: <= 4 ulp against
// std::log); used by the entropy scan, whose argmin tolerates that.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace quark::detail {

/// out[i] = log(in[i]) for positive, normal, finite in[i] (other inputs give unspecified values).
inline void log_positive(const double* in, double* out, std::size_t n) noexcept {
  constexpr double ln2_hi = 0x1.62e42p-1;           // 20 significant bits: e * ln2_hi exact
  constexpr double ln2_lo = 0x1.fdf473de6af28p-22;  // ln 2 - ln2_hi
  constexpr double sqrt2 = 0x1.6a09e667f3bcdp+0;
  constexpr std::uint64_t mantissa = (std::uint64_t{1} << 52) - 1;
  constexpr std::uint64_t one_bits = std::uint64_t{1023} << 52;
  for (std::size_t i = 0; i < n; ++i) {
    // 1. x = m 2^e, m in [1, 2), read from the bits.
    std::uint64_t bits;
    std::memcpy(&bits, &in[i], sizeof(bits));
    const std::uint64_t m_bits = (bits & mantissa) | one_bits;
    double m;
    std::memcpy(&m, &m_bits, sizeof(m));
    // e as a double through the 1.5 * 2^52 trick (no int -> double conversion needed).
    const std::uint64_t e_bits = std::uint64_t{0x4338000000000000} + (bits >> 52) - 1023;
    double e;
    std::memcpy(&e, &e_bits, sizeof(e));
    e -= 0x1.8p52;
    // 2. m in [sqrt(1/2), sqrt(2)).
    const bool big = m >= sqrt2;
    m = big ? m * 0.5 : m;
    e = big ? e + 1.0 : e;
    // 3. log m = 2s + 2s r(s^2).
    const double f = m - 1.0;
    const double s = f / (2.0 + f);
    const double z = s * s;
    double r = 1.0 / 21;
    r = r * z + 1.0 / 19;
    r = r * z + 1.0 / 17;
    r = r * z + 1.0 / 15;
    r = r * z + 1.0 / 13;
    r = r * z + 1.0 / 11;
    r = r * z + 1.0 / 9;
    r = r * z + 1.0 / 7;
    r = r * z + 1.0 / 5;
    r = r * z + 1.0 / 3;
    r = r * z;
    const double log_m = 2.0 * s + 2.0 * s * r;
    // 4. log x = e ln2_hi + (e ln2_lo + log m).
    out[i] = e * ln2_hi + (e * ln2_lo + log_m);
  }
}

}  // namespace quark::detail
