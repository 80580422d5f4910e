// SPDX-License-Identifier: MIT
// quantize targets a quark data type (int2..int32, uint2..uint32, minifloats), never float itself.
#include <cstdint>

#include <quark/quant/quantize.hpp>

int main() {
  const float s = 0.5f;
  float x[2] = {0.1f, 0.2f};
#ifdef QUARK_SHOULD_FAIL
  double q[2] = {};
  quark::quantize<double>(quark::tensor_shape{2}, x,
                          quark::tensor_qparams<double>{std::span(&s, 1)}, std::span(q));
#else
  std::int16_t q[2] = {};
  quark::quantize<std::int16_t>(quark::tensor_shape{2}, x,
                                quark::tensor_qparams<std::int16_t>{std::span(&s, 1)},
                                std::span(q));
#endif
}
