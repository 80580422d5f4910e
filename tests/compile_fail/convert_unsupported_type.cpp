// SPDX-License-Identifier: MIT
// convert<> only accepts quark data types: a user struct is rejected by the concept.
#include <quark/quark.hpp>

struct not_a_dtype {};

int main() {
#ifdef QUARK_SHOULD_FAIL
  auto v = quark::convert<not_a_dtype>(1.0f);
#else
  auto v = quark::convert<quark::float8_e4m3fn>(1.0f);
#endif
  (void)v;
}
