// SPDX-License-Identifier: MIT
// PRIVATE: the accuracy algorithms of algo_config that quark-cpp implements (quark-spec §10).
//
// Cross-Layer Equalization (algo_cle.cpp, §10.1): runs on the float model after the graph passes
// and before calibration. It rescales the output channels of a Conv / Gemm and the matching input
// channels of the Conv / Gemm after it (through single-consumer Relu / LeakyRelu / ReduceMean /
// Pad), and Conv -> depthwise Conv -> Conv triples, so the per-channel weight ranges meet. The
// float model computes the same function afterwards (up to float rounding). ReplaceClip6Relu goes
// with it: Clip(0, 6) with constant bounds becomes Relu first (this one changes the function).
//
// Bias correction (algo_bias_correction.cpp, §10.3): runs on the quantized model. For each
// quantized Conv / Gemm with a bias, the mean per-channel difference between the float node (plus
// its Relu / Clip) and the quantized chain, on the quantized model's own inputs over the
// calibration data, is added to the bias (damped), which is then re-quantized.
//
//     const qz::algo_options a = qz::read_algo_options(cfg);
//     if (a.cle && a.replace_clip6_relu) qz::replace_clip6_relu(m);
//     ... plan ...
//     if (a.cle) qz::cross_layer_equalize(m, *a.cle, [&](const std::string& n) { ... });
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <quark/dtype/dtype_id.hpp>
#include <quark/onnx/calib_data.hpp>
#include <quark/onnx/model.hpp>
#include <quark/onnx/quantizer.hpp>

namespace quark::onnx {
struct qconfig;
}  // namespace quark::onnx

namespace quark::onnx::qz {

/// CLEConfig (quark-spec §10.1).
struct cle_options {
  int steps = 1;  ///< cle_steps: passes to run; -1 iterates until the stop rule
  double weight_threshold = 0.5;
  bool scale_append_bias = true;
  bool scale_use_threshold = true;
  double total_layer_diff_threshold = 1.9e-7;
};

/// AutoMixprecisionConfig (quark-spec §10.10), validated. A null type leaves that role alone.
struct auto_mp_options {
  std::size_t data_size = 10000000;
  std::vector<std::string> target_op_types{"Conv", "ConvTranspose", "Gemm", "MatMul"};
  std::optional<dtype_id> act_type, weight_type, bias_type;
  bool dual_quant_nodes = false;
  std::size_t output_index = 0;
  std::optional<double> l2_target = 0.5;
  std::optional<double> top1_acc_target;
  std::size_t num_target = 0;
  std::vector<std::string> target_tensors;
  std::vector<std::size_t> target_indices, exclude_indices;
  bool no_input_qdq_shared = true;
  std::vector<std::string> notes;  ///< decisions taken while reading (l2_target dropped, ...)
};

/// The algorithms a configuration asks for.
struct algo_options {
  std::optional<cle_options> cle;          ///< algo_config "cle"
  bool replace_clip6_relu = false;         ///< ReplaceClip6Relu (only with CLE, as in Quark)
  bool bias_correction = false;            ///< algo_config "bias_correction"
  std::optional<auto_mp_options> auto_mp;  ///< algo_config "auto_mixprecision"
};

/// Reads algo_config and the extra options that go with it. The configuration is validated.
algo_options read_algo_options(const qconfig& cfg);

struct cle_stats {
  std::size_t pairs = 0;    ///< head -> tail pairs equalized
  std::size_t triples = 0;  ///< Conv -> depthwise Conv -> Conv triples equalized
  std::size_t steps = 0;    ///< passes run
  std::size_t skipped = 0;  ///< patterns left alone (shared weights, channel mismatch, ...)
};

/// Replaces every Clip whose bounds are constants close to 0 and 6 (np.allclose tolerances) by a
/// Relu with the same name and output. Returns how many.
std::size_t replace_clip6_relu(model& m);

/// Cross-Layer Equalization of `m` (constants already initializers). `quantized(node name)` says
/// whether a node is quantized: only quantized Conv / Gemm take part, as in Quark.
cle_stats cross_layer_equalize(model& m, const cle_options& o,
                               const std::function<bool(const std::string&)>& quantized);

struct bias_correction_stats {
  std::size_t corrected = 0;  ///< biases changed
  std::size_t skipped = 0;    ///< quantized Conv / Gemm without a bias or with another output rank
  std::size_t samples = 0;
};

/// Bias correction of the quantized model `qm` against `float_model` (the float model the
/// quantizer started from, after the graph passes and CLE), on the samples of `reader` (rewound
/// first; at most `max_samples` when set). Node names are shared by the two models.
bias_correction_stats correct_bias(model& qm, const model& float_model,
                                   calibration_data_reader& reader,
                                   std::optional<std::size_t> max_samples);

/// One tensor whose Q/DQ auto mixed precision changed (for the summary).
struct auto_mp_change {
  std::string tensor;  ///< activation / weight / bias name as in quantize_report::tensors
  std::string role;    ///< "activation", "weight", "bias"
  std::string node;    ///< the target node (module) it belongs to
  dtype_id from = dtype_id::undefined, to = dtype_id::undefined;
  std::vector<float> scale;
  std::vector<std::int64_t> zero_point;
  bool added = false;  ///< a second pair (dual_quant_nodes) rather than a changed one
};

struct auto_mp_result {
  std::size_t modules = 0;     ///< target nodes with quantized inputs (Quark's module list)
  std::size_t candidates = 0;  ///< modules analysed / eligible
  std::size_t shared_skipped = 0;
  std::size_t samples = 0;
  bool raised = false;               ///< the target types are wider than the model's
  std::vector<std::string> changed;  ///< node names whose inputs took the target types, in order
  double metric_before = 0.0, metric_after = 0.0;  ///< average L2, or top-1 loss
  std::vector<auto_mp_change> tensors;
  std::vector<std::string> notes;
};

/// Auto mixed precision (algo_config "auto_mixprecision", quark-spec §10.10) on the quantized
/// model `qm`: per target node, the Q/DQ of input 0 (activation), 1 (weight) and 2 (bias) are
/// switched to the target types (scales derived from the existing ones, weights and biases
/// re-quantized from `float_model`'s values), most harmless first while the metric against the
/// float model on the first data_size samples of `reader` holds (or, with wider target types,
/// most helpful first until it is met). Returns what changed; `qm` is rewritten in place.
auto_mp_result auto_mixed_precision(model& qm, const model& float_model,
                                    calibration_data_reader& reader, const auto_mp_options& o);

/// Brings the summary of a quantization (types, scales, per-type counts, notes) in line with
/// what auto mixed precision changed.
void report_auto_mp(quantize_report& report, const auto_mp_result& r);

/// The integer types auto mixed precision may write (the opset must carry them).
std::vector<dtype_id> auto_mp_types(const auto_mp_options& o);

}  // namespace quark::onnx::qz
