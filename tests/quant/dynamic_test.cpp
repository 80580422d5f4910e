// SPDX-License-Identifier: MIT
// quark::dynamic_qparams_onnx (DynamicQuantizeLinear's parameters) on hand-derived ranges: the
// ONNX formula evaluated by hand (scale = (max(0, hi) - min(0, lo)) / 255, zero point =
// round(-min(0, lo) / scale)), and the codes quark::quantize<uint8_t> then gives. ONNX Runtime
// as the oracle on large and tie-heavy data is tests/onnx_frontend/runtime_integer_ort_test.cpp.
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include <doctest/doctest.h>

#include <quark/quant/dynamic.hpp>
#include <quark/quant/quantize.hpp>

TEST_CASE("dynamic_qparams_onnx: hand-derived ranges") {
  struct row {
    float lo, hi;
    float scale;
    int zero_point;
  };
  for (const row& r : {
           row{-1.0f, 2.0f, 3.0f / 255.0f, 85},    // 1 / (3 / 255) = 85
           row{1.0f, 5.0f, 5.0f / 255.0f, 0},      // the range takes in 0: [0, 5]
           row{-4.0f, -1.0f, 4.0f / 255.0f, 255},  // [-4, 0]: zero at the top code
           row{0.0f, 0.0f, 1.0f, 0},               // all zero: scale 1, as ONNX Runtime
           // Width 255/256: scale exactly 1/256, so -lo / scale is an exact tie, and the zero
           // point rounds half to even: 2.5 -> 2, 3.5 -> 4.
           row{-2.5f / 256.0f, 252.5f / 256.0f, 1.0f / 256.0f, 2},
           row{-3.5f / 256.0f, 251.5f / 256.0f, 1.0f / 256.0f, 4},
           // [-0.5, 0.5]: 1/255 rounds up to the float 0.0039215688593..., so 0.5 / it is
           // 127.4999925..., not a tie: 127.
           row{-0.5f, 0.5f, 1.0f / 255.0f, 127},
       }) {
    CAPTURE(r.lo);
    CAPTURE(r.hi);
    const quark::dynamic_uint8_qparams p = quark::dynamic_qparams_onnx({r.lo, r.hi});
    CHECK(p.scale == r.scale);
    CHECK(static_cast<int>(p.zero_point) == r.zero_point);
    CHECK(p.usable());
  }
  // An Inf in the data gives an Inf scale: no usable quantization.
  const float inf = std::numeric_limits<float>::infinity();
  CHECK(!quark::dynamic_qparams_onnx({-1.0f, inf}).usable());
  CHECK(!quark::dynamic_qparams_onnx({-3e38f, 3e38f}).usable());  // the width overflows
}

TEST_CASE("dynamic_qparams_onnx: the codes of [-1, 2]") {
  const quark::dynamic_uint8_qparams p = quark::dynamic_qparams_onnx({-1.0f, 2.0f});
  const std::vector<float> x = {-1.0f, 0.0f, 1.0f, 2.0f, 0.5f};
  std::vector<std::uint8_t> y(x.size());
  const std::vector<float> s{p.scale};
  const std::vector<quark::zero_point_t<std::uint8_t>> z{p.zero_point};
  const quark::tensor_qparams<std::uint8_t> tp{s, z, quark::per_tensor{}};
  quark::quantize<std::uint8_t>(quark::tensor_shape{x.size()}, x, tp, std::span(y));
  // x / (3/255) + 85: -85 + 85, 85, 85 + 85, 170 + 85, 42.5 (half to even: 42) + 85.
  CHECK(y == std::vector<std::uint8_t>{0, 85, 170, 255, 127});
}
