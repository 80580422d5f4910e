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
// SmoothQuant (algo_smooth_quant.cpp, §10.2): runs on the float model after CLE and before
// calibration, on the calibration data. Each quantized MatMul with a 2-D float weight W [K, N]
// gets a Mul by 1 / s in front of its activation input and W's rows multiplied by s, with
// s_k = max|x_k|^alpha / max_n|W[k, n]|^(1 - alpha): the activation's outlier channels move into
// the weight. The float model computes the same function afterwards (up to float rounding).
//
// Bias correction (algo_bias_correction.cpp, §10.3): runs on the quantized model. For each
// quantized Conv / Gemm with a bias, the mean per-channel difference between the float node (plus
// its Relu / Clip) and the quantized chain, on the quantized model's own inputs over the
// calibration data, is added to the bias (damped), which is then re-quantized.
//
// Fast finetune (algo_finetune.cpp, §10.5): AdaRound / AdaQuant on the quantized model, one
// Conv / Gemm / MatMul at a time, after quantization and before bias correction. The module's
// inputs come from the quantized model, its target is the float model's output of the same node;
// AdaRound learns whether each weight rounds down or up, AdaQuant learns the float weight behind
// the fake quantizer. A module keeps the new integers only if its reconstruction error improved.
//
//     const qz::algo_options a = qz::read_algo_options(cfg);
//     if (a.cle && a.replace_clip6_relu) qz::replace_clip6_relu(m);
//     ... plan ...
//     if (a.cle) qz::cross_layer_equalize(m, *a.cle, [&](const std::string& n) { ... });
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <quark/algo/gptq.hpp>
#include <quark/dtype/dtype_id.hpp>
#include <quark/onnx/calib_data.hpp>
#include <quark/onnx/model.hpp>
#include <quark/onnx/quantizer.hpp>

#include "quantizer/plan.hpp"

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

/// SmoothQuantConfig (quark-spec §10.2).
struct smooth_quant_options {
  double alpha = 0.5;  ///< share of the activation's range moved into the weight, in [0, 1]
};

/// GPTQConfig (quark-spec §10.4), validated: bits 2..16, group_size -1 or >= 1 (not with
/// act_order: DequantizeLinear cannot store the permuted groups), block_size >= 1.
struct gptq_config {
  int bits = 8;
  std::size_t block_size = 128;
  std::int64_t group_size = -1;
  double perc_damp = 0.01;
  bool act_order = false;
  bool per_channel = false;
  bool mse = false;
  bool symmetric = true;  ///< weight_symmetric
};

/// QuarotConfig (quark-spec §10.6): R1 only, as Quark's ONNX QuaRot.
struct quarot_options {
  std::size_t dim = 4096;   ///< r_matrix_dim: the residual stream's width
  bool random = false;      ///< use_random_had: random signs (a fixed seed)
  std::string config_path;  ///< r_config_path: the R1 pairs (required)
};

/// AdaRoundConfig / AdaQuantConfig (quark-spec §10.5). Parameters that do nothing on a CPU
/// (pin_memory, num_workers, parallel, mem_opt_level, cache_dir, log_period, dynamic_batch,
/// select_max_mem_layer) are validated and otherwise ignored; see docs/config.md.
struct finetune_options {
  bool adaquant = false;                    ///< false: AdaRound
  std::optional<std::uint64_t> fixed_seed;  ///< nullopt: a random seed
  std::optional<std::size_t> data_size;     ///< samples at most (nullopt: all)
  std::size_t batch_size = 1;               ///< samples per mini-batch
  std::size_t num_batches = 1;              ///< the module data is num_batches * batch_size samples
  std::size_t num_iterations = 1000;
  double learning_rate = 0.1;
  /// lr_adjust (threshold, lr): a module whose reconstruction MSE (mean over every output
  /// element of every sample, with its initial weights) exceeds the threshold trains with lr
  /// instead of learning_rate (Quark's ModelOptimizer.run; each module starts from
  /// learning_rate again, Quark's parameters being parsed anew per module).
  std::optional<std::pair<double, double>> lr_adjust;
  bool early_stop = false;
  std::size_t log_period = 100;             ///< early stop window
  std::vector<std::string> target_op_type;  ///< node types to fine-tune
  bool update_bias = false;                 ///< AdaQuant: the bias is trained too
  double drop_ratio = 1.0;   ///< share of module inputs taken from the quantized model
  double reg_param = 0.01;   ///< AdaRound rounding regulariser weight
  double beta_start = 20.0;  ///< beta_range[0]
  double beta_end = 2.0;     ///< beta_range[1]
  double warm_start = 0.2;   ///< share of iterations without the regulariser
  /// Keep a module's new weights only if the average L2 distance of the whole quantized model's
  /// output 0 to the reference model's, over the samples, falls (Quark's selective_update).
  bool selective_update = false;
  /// The module's output goes through its output QuantizeLinear / DequantizeLinear during
  /// training (Quark's Subgraph.find_end with OutputQDQ: the subgraph ends after the DQ).
  bool output_qdq = false;
  /// The reference (float) model: another file with the same graph (node names, weight shapes)
  /// whose node outputs are the targets and whose weights are rounded; empty: the float model.
  std::string ref_model_path;
  /// Only these nodes (names) are fine-tuned; empty: every target_op_type node.
  std::vector<std::string> only_nodes;
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
  /// auto_mix_use_fast_ft: each candidate, once mixed, is fine-tuned alone with these options
  /// before its metric is measured (the fine-tuned weights serve the ranking only, as in Quark).
  std::optional<finetune_options> fast_ft;
  /// QBFP / QMX targets: the fused node every target node's inputs take (BFPQuantizeDequantize
  /// / MXQuantizeDequantize with the op defaults and BFPAttributes / MXAttributes; the spec's
  /// axis, default 1). Then mix_block_format() runs instead of the measured selection, and only
  /// target_op_types and dual_quant_nodes apply.
  std::optional<tspec> block;
};

/// The algorithms a configuration asks for.
struct algo_options {
  std::optional<cle_options> cle;                    ///< algo_config "cle"
  std::optional<smooth_quant_options> smooth_quant;  ///< algo_config "smooth_quant"
  std::optional<gptq_config> gptq;                   ///< algo_config "gptq"
  std::optional<quarot_options> quarot;              ///< algo_config "quarot"
  bool replace_clip6_relu = false;           ///< ReplaceClip6Relu (only with CLE, as in Quark)
  bool bias_correction = false;              ///< algo_config "bias_correction"
  std::optional<auto_mp_options> auto_mp;    ///< algo_config "auto_mixprecision"
  std::optional<finetune_options> finetune;  ///< algo_config "adaround" / "adaquant"
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

/// QuaRot's R1 rotation (algo_config "quarot", quark-spec §10.6) of the float model `m`, as the
/// rotation config file of `o` names the pairs (algo_quarot.cpp); the function stays the same
/// (to float rounding). Returns the report's note. Throws config_error "quark.config.value"
/// naming the file, key or node at fault.
std::string rotate_r1(model& m, const quarot_options& o);

struct smooth_quant_stats {
  std::size_t matmuls = 0;      ///< MatMul nodes smoothed (one Mul each)
  std::size_t activations = 0;  ///< distinct activation inputs among them
  std::size_t channels = 0;     ///< input channels rescaled, over all smoothed MatMuls
  /// Channels left at s = 1: never nonzero in the data, a non-finite maximum, an all-zero
  /// weight row, or an s that over- or underflows float32.
  std::size_t channels_kept = 0;
  std::size_t samples = 0;
  std::vector<std::string> mul_nodes;  ///< names of the Mul nodes inserted
  std::vector<std::string> skipped;    ///< "node (reason)" for quantized MatMuls left alone
};

/// SmoothQuant (quark-spec §10.2) of the float model `m` on at most `max_samples` samples of
/// `reader` (rewound first and after): every MatMul `quantized(name)` accepts whose input 1 is
/// a float32 initializer [K, N] read by no other node and whose input 0 is an activation gets
/// Mul(x, 1 / (s + 1e-9)) in front (initializer "<x>_<node>_smooth_scale", node
/// "<x>_<node>_smooth_mul", output "<x>_<node>_smooth_output", as in Quark) and W <- s W row by
/// row, in float32 as Quark's numpy code. The caller keeps the Muls float (quantizing their
/// input would undo the smoothing). Throws config_error "quark.quantize.no_data" when the
/// reader yields nothing and "quark.config.value" when it cannot be read twice.
smooth_quant_stats smooth_quant(model& m, const smooth_quant_options& o,
                                calibration_data_reader& reader,
                                std::optional<std::size_t> max_samples,
                                const std::function<bool(const std::string&)>& quantized);

/// One line for the quantize report.
std::string smooth_quant_note(const smooth_quant_options& o, const smooth_quant_stats& s);

struct gptq_stats {
  std::size_t matmuls = 0;  ///< weights rewritten
  std::size_t samples = 0;
  double loss = 0.0;  ///< sum over the weights of GPTQ's proxy loss (gptq_result::loss)
  std::vector<std::string> skipped;  ///< "node (reason)"
  /// The weights rewritten, as the summary lists them (name = the float weight's).
  std::vector<tensor_report> weights;
};

/// Receives one activation of one sample as rows of K values (its last dimension), with t its
/// leading dimension (1 for a vector).
using activation_fold =
    std::function<void(const std::string& name, std::span<const float> rows, std::size_t t)>;

/// Runs `m` (float32 or float16 values, the latter widened) over at most `max_samples` samples of
/// `reader` (rewound before and after) and folds every value named in `features` (name -> its
/// last dimension K) into `fold`. Returns the samples run. Errors start with `who`:
/// frontend_error "quark.onnx.shape" for a value of another shape, "quark.quantize.non_finite"
/// for a quark::error of `fold` (NaN / Inf), config_error "quark.quantize.no_data" when the
/// reader yields nothing. (SmoothQuant's maxima, GPTQ's Hessians.)
std::size_t for_each_activation(const model& m, const std::map<std::string, std::size_t>& features,
                                calibration_data_reader& reader,
                                std::optional<std::size_t> max_samples, const std::string& who,
                                const activation_fold& fold);

/// GPTQ Hessians (quark/algo/gptq.hpp) of activations of `m`, by value name.
struct hessian_set {
  std::map<std::string, std::unique_ptr<gptq_hessian>> h;
  std::size_t samples = 0;
};

/// Runs `m` (float32 or float16 values) over at most `max_samples` samples of `reader` (rewound
/// before and after) and accumulates, for each value named in `features` (name -> its last
/// dimension K), the Hessian of its rows. `who` starts the error messages. Throws config_error
/// "quark.quantize.no_data" when the reader yields nothing.
hessian_set collect_hessians(const model& m, const std::map<std::string, std::size_t>& features,
                             calibration_data_reader& reader,
                             std::optional<std::size_t> max_samples, const std::string& who);

/// UseMatMulNBits with Algorithm "GPTQ": for each B the MatMulNBits rewriter may store (a 2-D
/// float32 / float16 constant of a MatMul in `m` or its bodies), the Hessian (K x K) of the
/// activations that read it, summed over them, from `m` as given over the calibration data.
/// A B whose activations were never computed is left out. Adds a note.
std::map<std::string, std::vector<double>> gptq_nbits_hessians(
    const model& m, calibration_data_reader& reader, std::optional<std::size_t> max_samples,
    std::vector<std::string>& notes);

/// The opset the codes and grid of `o` need (21 for 4- or 16-bit codes and blocks, 13 per
/// channel, 10 otherwise).
std::int64_t gptq_opset(const gptq_config& o);

/// GPTQ (algo_config "gptq", quark-spec §10.4) on the quantized model `qm`: every MatMul whose
/// weight is a DequantizeLinear of integers read by nothing else, with a 2-D float32 weight in
/// `float_model` (the same node name), gets GPTQ's codes and grid in place of its weight's
/// storage; the Hessians come from the float model's MatMul inputs over at most `max_samples`
/// samples of `reader` (rewound before and after). The opset must already be gptq_opset(o).
gptq_stats gptq_weights(model& qm, const model& float_model, calibration_data_reader& reader,
                        const gptq_config& o, std::optional<std::size_t> max_samples);

/// The note, and the summary's weights and per-type counts brought in line with GPTQ's storage.
void report_gptq(quantize_report& report, const gptq_config& o, const gptq_stats& s);

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

/// What mix_block_format() did.
struct block_mix_result {
  std::size_t nodes = 0;        ///< target nodes that read a fused node
  std::size_t weights = 0;      ///< constant inputs (weights, biases) now fused
  std::size_t activations = 0;  ///< activation inputs given a fused node
  std::size_t chains = 0;       ///< fused -> Q -> DQ -> fused chains collapsed
  std::vector<std::string> notes;
  /// Constant inputs now quantized by a fused node: the name its pair had in the summary
  /// (tensors entries with role "weight" / "bias") and the new label.
  std::vector<std::pair<std::string, std::string>> retyped;
};

/// Auto mixed precision towards a block format (auto_mp_options::block; Quark's mixing of QBFP /
/// QMX, used by the BF16_MIXED_* presets): every target node's constant inputs (1 and 2; for
/// MatMul any constant input) lose their Q/DQ to one fused node reading the float constant
/// (axis 0 for a MatMul constant and for a bias, else the spec's axis; a DequantizeLinear of
/// stored integer codes is dequantized first). Its activation inputs (input 0; for MatMul any
/// non-constant input) behind a Q/DQ pair get a fused node after the pair (dual_quant_nodes:
/// the pair stays, other readers keep reading the pair) or instead of it. A fused -> Q -> DQ ->
/// fused chain loses its first fused node and the pair. `qm` is rewritten in place.
block_mix_result mix_block_format(model& qm, const auto_mp_options& o);

/// DedicateDQNode (Quark's post-processing): a DequantizeLinear fed by a QuantizeLinear and read
/// by several nodes (a graph output counts as the first reader) is copied for every reader but
/// the first (`<name>_<k>`, output `<output>_<k>`); when the QuantizeLinear reads a constant it
/// is copied too. Returns the number of nodes added.
std::size_t dedicate_dq_nodes(model& qm);

/// Brings the summary of a quantization (types, scales, per-type counts, notes) in line with
/// what auto mixed precision changed.
void report_auto_mp(quantize_report& report, const auto_mp_result& r);

/// The integer types auto mixed precision may write (the opset must carry them).
std::vector<dtype_id> auto_mp_types(const auto_mp_options& o);

/// `v` quantized to the integer type `t` (int8 / int16 / int32) with `scale` / `zero_point`
/// through quark::quantize (one scale: per tensor; else per channel along axis 0); the full range
/// of `t` bounds the codes. Used for biases.
tensor requantize(const std::vector<float>& v, dtype_id t, const std::vector<float>& scale,
                  const std::vector<std::int64_t>& zero_point);

struct finetune_stats {
  std::size_t improved = 0;  ///< modules whose weights changed
  std::size_t dropped = 0;   ///< selective_update: improved modules undone (whole-model L2 rose)
  double l2_before = 0.0, l2_after = 0.0;  ///< selective_update: average L2 of output 0
  std::size_t unchanged = 0;    ///< fine-tuned but not better than round-to-nearest: kept as it was
  std::size_t lr_adjusted = 0;  ///< modules trained at lr_adjust's rate
  std::size_t samples = 0;
  std::vector<std::string> skipped;  ///< "node (reason)" for targets left alone
  double loss_before = 0.0;          ///< sum over modules of the reconstruction error
  double loss_after = 0.0;
  double collect_seconds = 0.0;  ///< running the models for the module data
  double train_seconds = 0.0;    ///< Gram matrices and the optimisation
};

/// AdaRound / AdaQuant on the quantized model `qm` against `float_model` (the float model the
/// quantizer started from), on at most `max_samples` samples of `reader` (rewound first). The
/// per-element numerics (rectified sigmoid, regulariser, straight-through estimator, Adam) are
/// include/quark/algo/adaround.hpp, adaquant.hpp and adam.hpp.
finetune_stats fast_finetune(model& qm, const model& float_model, calibration_data_reader& reader,
                             const finetune_options& o, std::optional<std::size_t> max_samples);

/// One line for the quantize report: modules improved / unchanged / skipped, losses.
std::string finetune_note(const finetune_options& o, const finetune_stats& s);

}  // namespace quark::onnx::qz
