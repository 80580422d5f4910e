// SPDX-License-Identifier: MIT
// Stochastic rounding without caller-supplied random bits is an illegal policy use.
#include <quark/quark.hpp>

inline constexpr quark::conversion_policy sr{quark::rounding::stochastic, quark::overflow::saturate,
                                             quark::nan_handling::propagate};
int main() {
#ifdef QUARK_SHOULD_FAIL
  auto v = quark::convert<quark::float8_e4m3fn, sr>(1.0f);
#else
  auto v = quark::convert<quark::float8_e4m3fn, sr>(1.0f, 0x12345678u);
#endif
  (void)v;
}
