// SPDX-License-Identifier: MIT
// Example 1: convert float32 values to FP8 E4M3 under two ONNX policies and back.
#include <cstdio>

#include <quark/quark.hpp>

int main() {
  const float xs[] = {0.1f, 1.3f, 300.0f, 464.0f, 465.0f, 1e6f};
  for (float x : xs) {
    const auto sat = quark::convert<quark::float8_e4m3fn, quark::policies::onnx_saturate>(x);
    const auto raw = quark::convert<quark::float8_e4m3fn, quark::policies::onnx_no_saturate>(x);
    std::printf("%10.4f -> saturate: 0x%02X = %g   no saturate: 0x%02X = %g\n",
                static_cast<double>(x), sat.to_bits(), static_cast<double>(quark::to_float(sat)),
                raw.to_bits(), static_cast<double>(quark::to_float(raw)));
  }
  return 0;
}
