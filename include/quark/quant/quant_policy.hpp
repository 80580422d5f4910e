// SPDX-License-Identifier: MIT
// The arithmetic choices of quantize / dequantize / fake_quantize, as named enums bundled in one
// structural value (usable as a template argument). The default is Quark's and ONNX's: divide by
// the float32 scale, round half to even, add the zero point, saturate in the float domain.
#pragma once

#include <cstddef>
#include <cstdint>

#include <quark/core/policy.hpp>

namespace quark {

/// How x is brought onto the integer grid.
enum class scale_application : std::uint8_t {
  divide,               ///< x / s in float32 (Quark, ONNX Runtime)
  multiply_reciprocal,  ///< x * f32(1 / s) (PyTorch/FBGEMM, ggml); differs near ties
};

/// What a NaN input becomes.
enum class nan_output : std::uint8_t {
  to_qmin,        ///< the lower clip bound (ONNX Runtime's MLAS kernels: max(NaN, lo) = lo)
  to_zero_point,  ///< the zero point, i.e. real 0
  propagate,      ///< fake_quantize returns NaN; quantize stores the zero point
};

/// The quantization arithmetic.
///
///     constexpr quark::quant_policy torch_like{.apply =
///     quark::scale_application::multiply_reciprocal}; quark::fake_quantize<std::int8_t,
///     torch_like>(shape, in, out, params);
struct quant_policy {
  rounding round = rounding::nearest_even;
  scale_application apply = scale_application::divide;
  nan_output nan = nan_output::to_qmin;
  /// Float targets (FP8, FP16, BF16, FP4/FP6): what a value beyond max finite becomes.
  overflow float_overflow = overflow::saturate;
};

/// Named presets.
namespace policies {
/// ONNX QuantizeLinear as ONNX Runtime 1.30 computes it on x86 (the default).
inline constexpr quant_policy onnx_qdq{};
/// PyTorch fake_quantize_per_tensor_affine: multiply by the float reciprocal, round half even.
inline constexpr quant_policy torch_fake_quant{rounding::nearest_even,
                                               scale_application::multiply_reciprocal,
                                               nan_output::to_qmin, overflow::saturate};
}  // namespace policies

/// How many threads a kernel may use. Small tensors always run on the calling thread.
///
///     quark::fake_quantize<std::int8_t>(shape, in, out, params, quark::threading{2});
struct threading {
  unsigned threads = 1;
  std::size_t min_elements_per_thread = std::size_t{1} << 18;
};

}  // namespace quark
