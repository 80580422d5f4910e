// SPDX-License-Identifier: MIT
// The int32 bias of a quantized Conv / Gemm / MatMul (quark-spec §6.2, ONNX Runtime's
// quantize_bias_static_impl): scale = input scale x weight scale (a float32 product, per
// channel when the weight is), zero point 0, and the codes q = RNE(double(b) / double(s))
// clipped to the int32 range (or a narrower one). The division is in double: a float32 quotient is
// a multiple of 64 beyond 2^30 and off by one in rare half-way cases much lower, which a bias of an
// int16 model (small product scales) reaches.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>

#include <quark/core/error.hpp>

namespace quark {

/// What quantize_bias_int32 did: how many codes were clipped, and the largest |b / s| among them
/// (in steps; 0 when none was clipped).
struct bias_clip_report {
  std::size_t clipped = 0;
  double worst_steps = 0.0;
};

/// Quantizes `bias` with one scale (`scales.size() == 1`) or one per element, into `out`
/// (same size). Codes beyond [qmin, qmax] (default the int32 range; [-32768, 32767] for
/// Quark's Int16Bias, quark-spec §6.4, which saturates the int32 codes to int16) saturate and
/// are counted. Non-finite biases or scales, a scale that is not positive, sizes that do not
/// match or bounds outside int32 throw quark::invalid_argument.
///
/// ```cpp
/// const float s = input_scale * weight_scale;
/// std::int32_t q[3];
/// auto r = quark::quantize_bias_int32(bias, {&s, 1}, q);   // r.clipped == 0 normally
/// ```
inline bias_clip_report quantize_bias_int32(
    std::span<const float> bias, std::span<const float> scales, std::span<std::int32_t> out,
    std::int64_t qmin = std::numeric_limits<std::int32_t>::min(),
    std::int64_t qmax = std::numeric_limits<std::int32_t>::max()) {
  if (qmin > qmax || qmin < std::numeric_limits<std::int32_t>::min() ||
      qmax > std::numeric_limits<std::int32_t>::max()) {
    throw invalid_argument(
        "quark.quant.bad_range",
        "quantize_bias_int32: bounds [" + std::to_string(qmin) + ", " + std::to_string(qmax) + "]");
  }
  if (out.size() != bias.size() || (scales.size() != 1 && scales.size() != bias.size())) {
    throw invalid_argument("quark.quant.shape_mismatch",
                           "quantize_bias_int32: " + std::to_string(bias.size()) + " values, " +
                               std::to_string(scales.size()) + " scales, " +
                               std::to_string(out.size()) + " outputs");
  }
  const double lo = static_cast<double>(qmin);
  const double hi = static_cast<double>(qmax);
  bias_clip_report r;
  for (std::size_t k = 0; k < bias.size(); ++k) {
    const double s = static_cast<double>(scales[scales.size() == 1 ? 0 : k]);
    const double b = static_cast<double>(bias[k]);
    if (!std::isfinite(b) || !std::isfinite(s) || !(s > 0.0)) {
      throw invalid_argument("quark.quant.bad_value",
                             "quantize_bias_int32: element " + std::to_string(k) + " has bias " +
                                 std::to_string(b) + " and scale " + std::to_string(s));
    }
    const double q = std::nearbyint(b / s);  // round half to even (default rounding mode)
    if (q < lo || q > hi) {
      ++r.clipped;
      r.worst_steps = std::fmax(r.worst_steps, std::fabs(b / s));
    }
    out[k] = static_cast<std::int32_t>(q < lo ? lo : (q > hi ? hi : q));
  }
  return r;
}

}  // namespace quark
