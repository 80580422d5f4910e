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
// A Gather from a constant table gathers stored codes and dequantizes them.
//
// quantize_matmul_nbits (UseMatMulNBits) shares the rewriter: weight-only 4-bit MatMul.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include <quark/onnx/model.hpp>
#include <quark/onnx/quantizer.hpp>

#include "quantizer/plan.hpp"

namespace quark::onnx::qz {

/// The node choices for the nodes of an If / Loop / Scan body (make_plan on them).
using body_planner = std::function<plan(const std::vector<node_ref>&)>;

/// Rewrites `m` (a float32 model after the float stage: prepare_float_model) as above for the
/// nodes `pl` selects (pl.nodes aligned with m.nodes()) and, when `bodies` is given
/// (EnableSubgraph), for the nodes of every If / Loop / Scan body it selects, recursively: their
/// weights may be body initializers, Constant nodes of the body, or outer constants. Fills
/// `report` (op counts, weight parameters, notes). Throws frontend_error / config_error naming
/// the node for what the ops cannot express (per-channel uint8 Conv weights, say).
void quantize_dynamic(model& m, const plan& pl, const body_planner* bodies,
                      quantize_report& report);

/// UseMatMulNBits (quark-spec §10.7): every MatMul `pl` selects whose B is a 2-D float32
/// constant becomes com.microsoft::MatMulNBits with B stored block-wise by
/// quark::quantize_nbits (MatMulNBitsParams: GroupSize, Symmetric, Bits, AccuracyLevel), in the
/// main graph and, as ONNX Runtime's quantizer does, in If / Loop / Scan bodies (`bodies`).
/// Nothing else changes; no calibration. Fills `report`.
/// With Algorithm "GPTQ", `hessians` maps each B (value name) to the K x K Hessian of the
/// activations that read it (gptq_nbits_hessians) and the codes come from quark::gptq_quantize.
void quantize_matmul_nbits(model& m, const plan& pl, const body_planner& bodies,
                           quantize_report& report,
                           const std::map<std::string, std::vector<double>>* hessians = nullptr);

}  // namespace quark::onnx::qz
