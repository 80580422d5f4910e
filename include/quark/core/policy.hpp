// SPDX-License-Identifier: MIT
// Conversion policies: rounding, overflow and NaN handling as three independent named axes,
// bundled in one structural value usable as a template argument, plus named presets that
// reproduce external semantics exactly (ONNX Cast/QuantizeLinear, OCP MX, ml_dtypes).
#pragma once

#include <cstdint>

namespace quark {

/// How a value between two representable neighbours is resolved.
enum class rounding : std::uint8_t {
  nearest_even,     ///< ties to even (IEEE default, ONNX, numpy)
  nearest_away,     ///< ties away from zero (C `round`, microxcaling, ggml reference)
  nearest_up,       ///< ties toward +Inf ("DPU round": 2.5 -> 3, -2.5 -> -2)
  toward_zero,      ///< truncation
  toward_positive,  ///< ceiling
  toward_negative,  ///< floor
  stochastic,       ///< round up with probability equal to the fraction; needs caller random bits
};

/// What a finite value beyond the largest finite value becomes.
enum class overflow : std::uint8_t {
  saturate,    ///< clamp to +-max finite (ONNX saturate=1, OCP MX elements)
  to_special,  ///< +-Inf where the format has it, else NaN, else +-max (IEEE, ONNX saturate=0)
};

/// What a NaN input becomes.
enum class nan_handling : std::uint8_t {
  propagate,  ///< the format's NaN; formats with no NaN give +max finite (ONNX float4 rule);
              ///< integers give 0
  to_zero,    ///< +0
};

/// A complete conversion policy. Structural, so it can be a template argument.
struct conversion_policy {
  rounding round = rounding::nearest_even;
  overflow on_overflow = overflow::to_special;
  nan_handling nan = nan_handling::propagate;
};

/// Named presets, so call sites read as intent.
namespace policies {
/// IEEE-754 semantics: RNE, overflow to Inf (or NaN for formats without Inf). ml_dtypes' default.
inline constexpr conversion_policy ieee{};
inline constexpr conversion_policy ml_dtypes{};
/// ONNX Cast / QuantizeLinear to float8 with saturate=1 (the ONNX default).
inline constexpr conversion_policy onnx_saturate{rounding::nearest_even, overflow::saturate,
                                                 nan_handling::propagate};
/// ONNX Cast / QuantizeLinear to float8 with saturate=0.
inline constexpr conversion_policy onnx_no_saturate{rounding::nearest_even, overflow::to_special,
                                                    nan_handling::propagate};
/// OCP MX v1.0 element conversion: RNE, saturate to the element's max normal.
inline constexpr conversion_policy ocp_mx_element{rounding::nearest_even, overflow::saturate,
                                                  nan_handling::propagate};
/// ONNX Cast to float8e8m0 (opset 25 `round_mode`), saturate=1 unless stated.
inline constexpr conversion_policy onnx_e8m0_up{rounding::toward_positive, overflow::saturate,
                                                nan_handling::propagate};
inline constexpr conversion_policy onnx_e8m0_down{rounding::toward_zero, overflow::saturate,
                                                  nan_handling::propagate};
inline constexpr conversion_policy onnx_e8m0_nearest{rounding::nearest_away, overflow::saturate,
                                                     nan_handling::propagate};
/// Integer quantization as ONNX QuantizeLinear does it: RNE, saturate to the type's range.
inline constexpr conversion_policy onnx_quantize{rounding::nearest_even, overflow::saturate,
                                                 nan_handling::to_zero};
}  // namespace policies

}  // namespace quark
