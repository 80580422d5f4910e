// SPDX-License-Identifier: MIT
// PRIVATE: dynamic quantization (qconfig::use_dynamic_quant; Quark's UINT8_DYNAMIC_QUANT, ONNX
// Runtime's quantize_dynamic). No calibration: each selected MatMul and Conv is rewritten as
//
//   x -> DynamicQuantizeLinear -> (x_q, x_scale, x_zp)
//   MatMulInteger(x_q, w_q, x_zp, w_zp) | ConvInteger(...) -> int32 -> Cast(float)
//   -> Mul(., x_scale * w_scale) [-> Add(., bias) for a Conv with a bias] -> y
//
// with the weight stored quantized (uint8 or int8, per tensor or per channel) by the headers'
// quark::quantize. One DynamicQuantizeLinear serves every rewritten node reading the same value.
#pragma once

#include <quark/onnx/model.hpp>
#include <quark/onnx/quantizer.hpp>

#include "quantizer/plan.hpp"

namespace quark::onnx::qz {

/// Rewrites `m` (a float32 model after the float stage: prepare_float_model) as above for the
/// nodes `pl` selects (pl.nodes aligned with m.nodes()). Fills `report` (op counts, weight
/// parameters, notes). Throws frontend_error / config_error naming the node for what the ops
/// cannot express (per-channel Conv weights with a zero point other than 0, say).
void quantize_dynamic(model& m, const plan& pl, quantize_report& report);

}  // namespace quark::onnx::qz
