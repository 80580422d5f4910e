// SPDX-License-Identifier: MIT
// The quantization kernels have no stochastic rounding (it needs caller random bits per element).
#include <cstdint>

#include <quark/quant/fake_quant.hpp>

int main() {
  const float s = 0.5f;
  float x[4] = {0.1f, 0.2f, 0.3f, 0.4f};
  float y[4] = {};
  const quark::tensor_qparams<std::int8_t> p{std::span(&s, 1)};
#ifdef QUARK_SHOULD_FAIL
  constexpr quark::quant_policy P{.round = quark::rounding::stochastic};
#else
  constexpr quark::quant_policy P{.round = quark::rounding::nearest_away};
#endif
  quark::fake_quantize<std::int8_t, P>(quark::tensor_shape{4}, x, p, y);
}
