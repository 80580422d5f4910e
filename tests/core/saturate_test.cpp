// SPDX-License-Identifier: MIT
// quark::saturate_cast: truncation toward zero, saturation at both ends, NaN -> 0, against
// hand-derived values and, for the types up to 16 bits, an integer-arithmetic reference over
// every value of the range and a margin beyond it.
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>

#include <doctest/doctest.h>

#include <quark/core/saturate.hpp>

namespace {

/// Reference: trunc(n + f) for an integer n and f in (-1, 1), clamped, by integer arithmetic.
template <class T>
std::int64_t reference(std::int64_t n, double f) {
  std::int64_t t = n;
  if (n > 0 && f < 0.0)
    t = n - 1;  // trunc(n - 0.5) = n - 1 for n >= 1
  if (n < 0 && f > 0.0)
    t = n + 1;  // trunc(n + 0.5) = n + 1 for n <= -1
  const auto lo = static_cast<std::int64_t>(std::numeric_limits<T>::lowest());
  const auto hi = static_cast<std::int64_t>(std::numeric_limits<T>::max());
  return t < lo ? lo : (t > hi ? hi : t);
}

template <class T>
void sweep() {
  const auto lo = static_cast<std::int64_t>(std::numeric_limits<T>::lowest());
  const auto hi = static_cast<std::int64_t>(std::numeric_limits<T>::max());
  for (std::int64_t n = lo - 3; n <= hi + 3; ++n) {
    for (const double f : {-0.5, 0.0, 0.5}) {
      const double v = static_cast<double>(n) + f;
      CAPTURE(v);
      CHECK(static_cast<std::int64_t>(quark::saturate_cast<T>(v)) == reference<T>(n, f));
    }
  }
}

}  // namespace

TEST_CASE("saturate_cast: hand-derived values") {
  CHECK(quark::saturate_cast<std::int8_t>(1e300) == 127);
  CHECK(quark::saturate_cast<std::int8_t>(-1e300) == -128);
  CHECK(quark::saturate_cast<std::int8_t>(127.9) == 127);
  CHECK(quark::saturate_cast<std::int8_t>(-128.9) == -128);
  CHECK(quark::saturate_cast<std::int32_t>(-2.9) == -2);
  CHECK(quark::saturate_cast<std::uint16_t>(-3.7) == 0);
  CHECK(quark::saturate_cast<std::uint16_t>(65535.99) == 65535);
  CHECK(quark::saturate_cast<std::int8_t>(std::nan("")) == 0);
  CHECK(quark::saturate_cast<std::int32_t>(-std::numeric_limits<double>::infinity()) ==
        std::numeric_limits<std::int32_t>::lowest());
  // 64-bit ends: 2^63 is past int64's max (= 2^63 - 1), and the largest double below 2^63 is
  // 2^63 - 1024, which converts exactly; -2^63 is int64's lowest.
  CHECK(quark::saturate_cast<std::int64_t>(std::ldexp(1.0, 63)) ==
        std::numeric_limits<std::int64_t>::max());
  CHECK(quark::saturate_cast<std::int64_t>(std::nextafter(std::ldexp(1.0, 63), 0.0)) ==
        std::numeric_limits<std::int64_t>::max() - 1023);
  CHECK(quark::saturate_cast<std::int64_t>(-std::ldexp(1.0, 63)) ==
        std::numeric_limits<std::int64_t>::lowest());
  CHECK(quark::saturate_cast<std::uint64_t>(std::ldexp(1.0, 64)) ==
        std::numeric_limits<std::uint64_t>::max());
  CHECK(quark::saturate_cast<std::uint64_t>(-1.0) == 0u);
  CHECK(quark::saturate_cast<float>(0.1) == 0.1f);
}

TEST_CASE("saturate_cast: every value of the 8- and 16-bit types and 3 past each end") {
  sweep<std::int8_t>();
  sweep<std::uint8_t>();
  sweep<std::int16_t>();
  sweep<std::uint16_t>();
}
