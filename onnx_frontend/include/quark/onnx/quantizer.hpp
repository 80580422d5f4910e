// SPDX-License-Identifier: MIT
// The ONNX quantizer: Quark's ModelQuantizer(QConfig).quantize_model in C++. It calibrates the
// float model on the reader's samples with the calibration runtime (activations are folded into
// observers as they are produced, never kept), quantizes weights from the initializers, biases
// to int32 (scale = input scale x weight scale), and inserts standard QuantizeLinear /
// DequantizeLinear nodes (quark-spec §3-§7). docs/quantizer.md describes every rule.
//
//     auto cfg = quark::onnx::get_default_config("A8W8");
//     quark::onnx::npy_folder_reader calib("calib/");
//     auto report = quark::onnx::quantize_model("det.onnx", "det_q.onnx", cfg, calib);
//     std::cout << quark::onnx::summary_table(report);
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <quark/onnx/calib_data.hpp>
#include <quark/onnx/error.hpp>

namespace quark::onnx {

struct qconfig;
class model;

/// Per op type: nodes quantized and kept in float.
struct op_type_count {
  std::size_t quantized = 0;
  std::size_t kept_float = 0;
};

/// One quantized tensor: calibrated range (activations) or value range (weights), scale(s),
/// zero point(s), element type and role.
struct tensor_report {
  std::string name;
  std::string role;  ///< "activation", "weight", "bias"
  std::string type;  ///< "int8", "uint16", ...
  float rmin = 0.0f;
  float rmax = 0.0f;
  std::vector<float> scale;
  std::vector<std::int64_t> zero_point;
  std::int64_t axis = -1;  ///< per-channel axis, -1 when per tensor
};

/// Output-similarity metrics of the quantized model against the float model (output 0).
struct eval_report {
  std::size_t samples = 0;
  /// Samples whose cosine is undefined (an all-zero output of either model); the cosine mean and
  /// min are over the other samples (NaN when none is left).
  std::size_t cosine_undefined = 0;
  double cosine_mean = 0, cosine_min = 0, l2_mean = 0, l2_max = 0, psnr_mean = 0, psnr_min = 0,
         ssim_mean = 0, ssim_min = 0;
};

/// What quantize_model did.
struct quantize_report {
  std::map<std::string, op_type_count> op_types;
  std::map<std::string, std::size_t> tensors_per_type;  ///< "int8" -> tensors quantized
  std::vector<tensor_report> tensors;
  std::vector<std::string> notes;  ///< accepted-but-inert options, opset changes, warnings
  std::size_t calibration_samples = 0;
  bool dynamic = false;       ///< use_dynamic_quant: activations are quantized at run time
  bool matmul_nbits = false;  ///< UseMatMulNBits: MatMul weights only, MatMulNBits nodes
  std::int64_t opset_before = 0;
  std::int64_t opset_after = 0;
  std::optional<eval_report> eval;
};

/// Options of the run itself (not of the quantization).
struct quantize_run_options {
  /// Called as calibration advances: (samples done, total or 0 if unknown).
  std::function<void(std::size_t, std::size_t)> progress;
  /// Compare the quantized model with the float model on this many samples of the reader
  /// (rewound) after quantization; 0: only when the config's EvalMetrics asks for it.
  std::size_t eval_samples = 0;
};

/// Quantizes `in` (which is not modified) and returns the quantized model.
/// Throws config_error / not_implemented for configurations it cannot honour (naming the option),
/// frontend_error for models it cannot run ("quark.onnx.unsupported_op" lists the operators) and
/// for bad calibration data ("quark.calib_data.*" naming the input and sample).
model quantize_model(const model& in, const qconfig& cfg, calibration_data_reader& reader,
                     quantize_report* report = nullptr, const quantize_run_options& run = {});
/// Same, quantizing `in` itself instead of a copy: one copy of the weights less in memory
/// (quantize_model(path, path, ...) passes the model it loaded this way).
model quantize_model(model&& in, const qconfig& cfg, calibration_data_reader& reader,
                     quantize_report* report = nullptr, const quantize_run_options& run = {});

/// The float stage of quantize_model that precedes calibration, alone: constants become
/// initializers, the preprocessing runs (ConvertOpsetVersion, RemoveInputInit, Copy*Init), the
/// graph passes (OptimizeModel, FoldBatchNorm, ...), the Fuse* rewrites, then, when
/// cfg.algo_config has a "cle" entry, ReplaceClip6Relu (if set) and Cross-Layer Equalization of
/// the Conv / Gemm nodes cfg quantizes (quark-spec §10.1, Quark's cle_transforms). Without
/// ReplaceClip6Relu the result computes the same function as `in` up to float rounding.
/// `notes` receives what was done ("cle: 3 pairs, 1 triple, 1 step").
///
/// ```cpp
/// qconfig cfg = get_default_config("A8W8");
/// cfg.algo_config.push_back({.name = algo_name::cle});
/// model eq = equalize_model(m, cfg);
/// ```
model equalize_model(const model& in, const qconfig& cfg,
                     std::vector<std::string>* notes = nullptr);

/// File to file. The input is never overwritten ("quark.quantize.same_path"); the output is
/// written atomically, so a failure leaves no output file.
quantize_report quantize_model(const std::filesystem::path& model_in,
                               const std::filesystem::path& model_out, const qconfig& cfg,
                               calibration_data_reader& reader,
                               const quantize_run_options& run = {});

/// Uses UseRandomData / RandomDataReaderInputShape / RandomDataReaderInputDataRange /
/// CalibDataSize of `cfg` to build a random reader for `m` (Quark's behaviour when no reader is
/// given). Throws config_error "quark.quantize.no_data" when UseRandomData is off.
/// `seed` overrides the reader's default seed.
std::unique_ptr<calibration_data_reader> default_reader(const model& m, const qconfig& cfg,
                                                        std::optional<std::uint64_t> seed = {});
/// Same, loading the model's input signature from a file.
std::unique_ptr<calibration_data_reader> default_reader(const std::filesystem::path& model_path,
                                                        const qconfig& cfg,
                                                        std::optional<std::uint64_t> seed = {});

/// Runs a model file once with the calibration runtime (evaluation helper): outputs by name.
std::map<std::string, tensor> run_model(const std::filesystem::path& model_path,
                                        const calib_sample& sample);

/// Runs the model file on the next `samples` samples of `reader` with one runtime (no
/// observation) and returns the seconds spent in run() (the baseline of docs/bench/quantizer.md).
double time_inference(const std::filesystem::path& model_path, calibration_data_reader& reader,
                      std::size_t samples);

/// The PrintSummary table: per op type quantized / kept float, per data type tensor counts.
std::string summary_table(const quantize_report& r);
/// Per-tensor ranges and scales as JSON.
std::string tensors_json(const quantize_report& r);

}  // namespace quark::onnx
