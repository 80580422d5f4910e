// SPDX-License-Identifier: MIT
// int_n covers 2..7 bits; wider integers are the std types.
#include <quark/quark.hpp>

int main() {
#ifdef QUARK_SHOULD_FAIL
  quark::int_n<9, true> v{3};
#else
  quark::int_n<4, true> v{3};
#endif
  (void)v;
}
