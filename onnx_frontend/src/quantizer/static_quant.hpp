// SPDX-License-Identifier: MIT
// PRIVATE: the static quantization flow (static_quant.cpp) and the two helpers it shares with
// quantize_model (quantize.cpp), which prepares the float model and makes the plan first.
#pragma once

#include <cstddef>
#include <string>

#include <quark/onnx/calib_data.hpp>
#include <quark/onnx/model.hpp>
#include <quark/onnx/quantizer.hpp>

#include "quantizer/algorithms.hpp"
#include "quantizer/plan.hpp"

namespace quark::onnx::qz {

/// Quantizes the prepared float32 model `m` (graph passes, conversions, CLE, QuaRot and
/// SmoothQuant done; `pl` made on it) with calibration on `reader`: Q/DQ nodes in, the opset
/// raised as the types need, then GPTQ, fast finetune, bias correction and auto mixed precision
/// as `algos` asks, DedicateDQNode, DebugMode notes and the evaluation against the float model.
/// Notes, counts and per-tensor parameters go to `report`.
model quantize_static(model m, const qconfig& cfg, const plan& pl, const algo_options& algos,
                      calibration_data_reader& reader, quantize_report& report,
                      const quantize_run_options& run);

/// A folder of loose .npy files feeds a single-input model: tell the reader its input's name.
void name_single_input(const model& m, calibration_data_reader& reader);

/// Evaluation against the float model (EvalMetrics / run.eval_samples), on EvalDataReader's
/// folder when given, else on the calibration data (`default_n` samples with EvalMetrics alone).
void evaluate_against_float(quantize_report& report, const settings& opt,
                            const std::string& float_bytes, const model& m,
                            calibration_data_reader& reader, const quantize_run_options& run,
                            std::size_t default_n);

}  // namespace quark::onnx::qz
