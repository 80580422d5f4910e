// SPDX-License-Identifier: MIT
// PRIVATE: the calibration pass. Runs the float model through quark::onnx::runtime once per
// sample and folds every requested float activation into its observer as it is produced; the
// activation itself is never kept, so memory stays that of one inference plus the observers.
// Std-only interface (the runtime header is included by calibrate.cpp only).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <quark/onnx/calib_data.hpp>
#include <quark/onnx/model.hpp>
#include <quark/onnx/tensor.hpp>

#include "quantizer/plan.hpp"

namespace quark::onnx::qz {

/// What to observe for one tensor.
struct calib_request {
  act_method method = act_method::minmax;
  bool symmetric_range = false;    ///< CalibTensorRangeSymmetric (percentile: absolute histogram)
  dtype_id type = dtype_id::int8;  ///< the quantized type (MinMSE grid)
};

/// Calibrated facts of one tensor.
struct tensor_facts {
  dtype_id type = dtype_id::undefined;
  shape_t shape;  ///< shape in the first sample
  bool calibrated = false;
  float rmin = 0.0f;  ///< calibrated range (method applied)
  float rmax = 0.0f;
  double std_dev = 0.0;  ///< Distribution: the histogram's standard deviation (FP8 scale)
  /// Power-of-two position the method searched (pof2 MinMSE): the scale is 2^-position exactly.
  std::optional<int> pof2_position;
  std::vector<std::string> warnings;  ///< the calibrator's warnings (e.g. one Entropy candidate)
  /// SaveTensorHistFig (calib_params::keep_histograms): the first-pass histogram of a histogram
  /// method (edges, counts; `hist_absolute`: a histogram of |x|); empty for the other methods.
  std::vector<double> hist_edges;
  std::vector<std::uint64_t> hist_counts;
  bool hist_absolute = false;
  float data_min = 0.0f;  ///< with a histogram: the extrema of the observed values
  float data_max = 0.0f;
};

struct calib_output {
  std::map<std::string, tensor_facts> tensors;  ///< every value the runtime produced
  std::size_t samples = 0;
  std::vector<input_signature> inputs;
};

struct calib_params {
  double percentile = 99.999;
  std::optional<std::size_t> num_bins;  ///< NumBins if set (else each method's default)
  std::size_t num_quantized_bins = 128;
  bool moving_average = false;
  double moving_average_constant = 0.01;
  std::vector<double> percentile_candidates{99.99, 99.999, 99.99999};
  bool lwp_mse = false;
  bool minmse_most_common = false;
  /// SaveAndRestore: restore the calibration from this JSON file if it exists (no inference),
  /// else calibrate and save it there.
  std::optional<std::filesystem::path> ranges_file;
  /// Tensors of at least this many elements are observed on the runtime's worker threads
  /// (without background observation).
  std::size_t parallel_min_elements = std::size_t{1} << 16;
  /// Observe on a background thread while the runtime computes the next nodes (the statistics
  /// are the same either way; QUARK_CALIB_BACKGROUND=0 turns it off). Values waiting for their
  /// observer stay alive: at most `background_max_bytes` of them (4 MiB: on PaddleOCR det at
  /// 640x640, 4-13 MB more peak memory than observing in place; 8 MiB saved a little more time
  /// for 10-18 MB, docs/bench/quantizer.md).
  bool background = true;
  std::size_t background_max_bytes = std::size_t{4} << 20;
  /// Histograms (|x| ones after their first batch, signed ones after the batches whose extrema
  /// are found first) of values that a kernel streams (runtime chunk_sink: element-wise, Clip,
  /// Conv) are binned chunk by chunk by the thread that computed each chunk, while it is in
  /// cache; the node's observer call then only completes the batch (range growth: the tail
  /// beyond the old last edge, or a signed histogram binned again). Same counts as observing the
  /// whole value; QUARK_CALIB_FUSE=0 turns it off.
  bool fuse = true;
  /// Percentile on |x| histograms: once a histogram holds enough counts, the bins far below the
  /// percentile are lumped and later values in them only counted (histogram_options::
  /// lump_percentile), which makes binning them a compare and a popcount. The ranges are those
  /// of the unlumped histograms: a tensor whose percentile cannot be decided from the lumped one
  /// (its later samples far smaller than the first) is observed again unlumped in a second pass.
  /// Only with a reader that can_rewind(), and not with keep_histograms (the saved histograms
  /// are whole). QUARK_CALIB_LUMP=0 turns it off.
  bool lump = true;
  /// Power-of-two MinMSE histograms of a value that an element-wise node makes from another
  /// observed value and a scalar constant (x * c, x + c, x - c, c - x, x / c, and chains of
  /// them) are derived from that value's batch without reading the output
  /// (histogram_observer::observe_mapped): the same counts, and such a value no longer needs to
  /// be binned. A batch that cannot be derived exactly is observed as usual.
  /// QUARK_CALIB_DERIVE=0 turns it off.
  bool derive = true;
  std::optional<std::size_t> max_samples;
  /// SaveTensorHistFig: copy each histogram method's histogram into tensor_facts.
  bool keep_histograms = false;
  /// Called after each sample with (done, total or 0 if unknown).
  std::function<void(std::size_t, std::size_t)> progress;
  /// Called once, after the first sample, with the facts of every value the runtime produced
  /// (types and shapes; no ranges yet). Returns the requested tensors whose own range turned out
  /// not to be needed: they are no longer observed and come back with `calibrated` false.
  std::function<std::set<std::string>(const std::map<std::string, tensor_facts>&)>
      after_first_sample;
  /// Print the time of each phase to stderr (QUARK_CALIB_PROFILE; off under CryptoMode).
  bool profile = false;
};

/// Graph inputs of a serialized model, as the runtime sees them.
std::vector<input_signature> model_inputs(const std::string& model_bytes,
                                          const std::filesystem::path& base_dir);

/// Calibrates the tensors of `requests` of model `m` over the samples of `reader`. Throws
/// frontend_error "quark.calib_data.empty" when the reader yields no sample. The runtime is
/// built from `m` itself: no serialized copy of the model stays alive while the samples run.
calib_output calibrate(const model& m, const std::map<std::string, calib_request>& requests,
                       calibration_data_reader& reader, const calib_params& params);

/// Runs a serialized model on one sample and returns its outputs in graph output order.
std::vector<std::pair<std::string, tensor>> run_model(const std::string& model_bytes,
                                                      const std::filesystem::path& base_dir,
                                                      const calib_sample& sample);

}  // namespace quark::onnx::qz

#include <quark/onnx/quantizer.hpp>

namespace quark::onnx::qz {

/// Runs the float and the quantized model on up to `samples` samples of `reader` and compares
/// output 0 (cosine, L2, PSNR, SSIM: quark-spec §11.1).
eval_report compare_models(const std::string& float_bytes, const std::string& quant_bytes,
                           const std::filesystem::path& base_dir, calibration_data_reader& reader,
                           std::size_t samples);

}  // namespace quark::onnx::qz
