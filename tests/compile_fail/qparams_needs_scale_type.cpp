// SPDX-License-Identifier: MIT
// compute_qparams takes a scale kind (float_scale, pow2_scale, ...), not a raw float type.
#include <cstdint>

#include <quark/scale/qparams.hpp>

int main() {
#ifdef QUARK_SHOULD_FAIL
  auto p = quark::compute_qparams<std::int8_t, float>({-1.0f, 1.0f});
#else
  auto p = quark::compute_qparams<std::int8_t, quark::float_scale>({-1.0f, 1.0f});
#endif
  (void)p;
}
