// SPDX-License-Identifier: MIT
// The parameters of ONNX DynamicQuantizeLinear (opset 11): a uint8 scale and zero point computed
// from the tensor's own range, as ONNX Runtime 1.30 computes them in float32:
//
//     x_min = min(0, min x),  x_max = max(0, max x)
//     scale = x_max == x_min ? 1 : (x_max - x_min) / 255
//     zero_point = round_half_even(clamp(0 - x_min / scale, 0, 255))
//
// and y = saturate(round_half_even(x / scale) + zero_point), which is quark::quantize<uint8_t>
// with the default policy (policies::onnx_qdq). An all-zero (or empty) tensor gets scale 1 and
// zero point 0, as in ONNX Runtime; the ONNX reference implementation gives 1/255 there, and the
// operator text leaves it open.
#pragma once

#include <cstdint>

#include <quark/core/policy.hpp>
#include <quark/dtype/convert.hpp>
#include <quark/scale/qparams.hpp>

namespace quark {

/// Scale and zero point of one DynamicQuantizeLinear.
struct dynamic_uint8_qparams {
  float scale = 1.0f;
  std::uint8_t zero_point = 0;

  /// False when the scale is zero, Inf or NaN (an Inf in the data, a range wider than float's,
  /// or one narrower than 255 times the smallest subnormal): y would hold no information.
  [[nodiscard]] constexpr bool usable() const noexcept {
    return scale != 0.0f && scale - scale == 0.0f;
  }
};

/// DynamicQuantizeLinear's parameters from the data's range (NaN-free: ONNX Runtime's own range
/// of a tensor with NaN depends on where the NaN sits, so callers refuse such data first).
///
///     auto p = quark::dynamic_qparams_onnx({-1.0f, 2.0f});  // scale 3/255, zero point 85
/// Total: for an Inf scale the zero point comes out as ONNX Runtime's does (a NaN quotient
/// clamps to 255 there, as std::min / std::max order it).
[[nodiscard]] inline dynamic_uint8_qparams dynamic_qparams_onnx(value_range r) noexcept {
  const float lo = r.min < 0.0f ? r.min : 0.0f;
  const float hi = r.max > 0.0f ? r.max : 0.0f;
  dynamic_uint8_qparams p;
  p.scale = hi == lo ? 1.0f : (hi - lo) / 255.0f;
  const float initial = 0.0f - lo / p.scale;
  // std::max(0, std::min(255, initial)): a NaN quotient becomes 255, as in ONNX Runtime.
  const float upper = initial < 255.0f ? initial : 255.0f;
  const float clamped = upper > 0.0f ? upper : 0.0f;
  p.zero_point = convert<std::uint8_t, policies::onnx_quantize>(clamped);
  return p;
}

}  // namespace quark
