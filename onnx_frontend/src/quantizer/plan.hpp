// SPDX-License-Identifier: MIT
// PRIVATE: the quantizer's resolved view of a qconfig, in std types only, so the graph code
// (which includes model.hpp) and the configuration code (config.hpp) live in separate
// translation units. make_plan() reads the qconfig once: per node whether it is quantized and
// with which specs, and every extra option the quantizer honours, with its effective value.
// Options the quantizer does not honour yet are rejected there with "quark.config.not_implemented".
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <quark/dtype/dtype_id.hpp>
#include <quark/onnx/options.hpp>
#include <quark/onnx/tensor.hpp>

namespace quark::onnx {
struct qconfig;
}  // namespace quark::onnx

namespace quark::onnx::qz {

/// How an activation range is calibrated (quark-spec §4.0 mapping of (CalibMethod, ScaleType)).
enum class act_method : std::uint8_t {
  minmax,        ///< CalibrationMethod.MinMax
  pof2_minmax,   ///< PowerOfTwoMethod.NonOverflow (min/max, symmetric range by default)
  percentile,    ///< CalibrationMethod.Percentile
  pof2_minmse,   ///< PowerOfTwoMethod.MinMSE
  float_minmse,  ///< MinMSE with a Float32 scale: a float scale search (quark-spec "Decisions" 1)
  distribution,  ///< CalibrationMethod.Distribution (FP8: scale = std / std_fp8, quark-spec §4.4)
  none,          ///< no calibration (unscaled BFloat16 / Float16: a plain cast, quark-spec §1.5)
  entropy,       ///< CalibrationMethod.Entropy
  layerwise_percentile,  ///< LayerWiseMethod.LayerWisePercentile
};

/// A block spec (BFP16, MX4/6/9, OCP MX): the com.amd.quark fused quantize-dequantize op that
/// replaces the Q/DQ pair, with its attributes (quark-spec §1.7-§1.10, §7.5).
struct block_op {
  std::string op;             ///< "BFPQuantizeDequantize" or "MXQuantizeDequantize"
  std::string label;          ///< the spec's short name for reports: "BFP16", "MX9", "MXINT8", ...
  std::string bfp_method;     ///< BFP: "to_bfp" / "to_bfp_prime"
  std::string element_dtype;  ///< MX: "int8", "fp8_e4m3", ...
  std::int64_t block_size = 0;
  std::int64_t bit_width = 0;
  std::int64_t sub_block_size = 0;
  std::int64_t sub_block_shift_bits = 0;
  std::int64_t rounding_mode = 0;
  std::int64_t convert_to_bfloat_before_bfp = 0;     ///< BFP, activations only (legacy)
  std::int64_t use_compiler_version_cpu_kernel = 0;  ///< BFP (legacy BFPAttributes)
  friend bool operator==(const block_op&, const block_op&) = default;
};

/// A resolved tensor spec.
struct tspec {
  dtype_id type = dtype_id::int8;
  bool symmetric = true;
  bool pof2 = false;  ///< power-of-two scale
  /// UsePowerOf2Scale = false cleared `pof2`: the power-of-two method still calibrates (and a
  /// constant is still searched over powers of two), the range gives a float scale.
  bool pof2_method_float_scale = false;
  bool int16_scale = false;  ///< M * 2^-N scale (ScaleType.Int16 / Int16Scale, quark-spec §2.3)
  bool fp_scaled = false;    ///< ActivationScaled / WeightScaled for BFloat16 / Float16 (§1.5)
  act_method method = act_method::minmax;
  /// Weights: MinMSE search (quark-spec §4.8): the five pof2 candidates with a PowerOf2 scale,
  /// float_minmse_calibrator (MinMSEModeFloatScale) with a Float32 scale.
  bool weight_minmse = false;
  bool per_channel = false;
  int group_size = 0;  ///< > 0: per-group (blocked) weights along the group axis
  std::optional<int> axis;
  /// Block specs: quantized by one fused node, no calibration (type float32, method none).
  std::optional<block_op> block;
  friend bool operator==(const tspec&, const tspec&) = default;
};

/// One graph node as the planner sees it.
struct node_ref {
  std::string name;
  std::string op_type;
};

/// The decision for one node.
struct node_choice {
  bool quantize = false;
  std::optional<tspec> input;   ///< activations read by the node
  std::optional<tspec> output;  ///< activations it produces
  std::optional<tspec> weight;
  std::optional<tspec> bias;  ///< explicit bias spec (else QuantizeBias / Int32Bias rule)
  std::string reason;         ///< why it is not quantized (summary)
  /// Not excluded by name and within NodesToQuantize (Quark's should_simulate_node: SimulateDPU
  /// scales a HardSigmoid whose op type is not quantized too).
  bool simulate = true;
};

/// Every extra option the quantizer honours, effective values.
/// MatMulNBitsParams.Algorithm: "DEFAULT" (round to nearest, ONNX Runtime's block rule),
/// "GPTQ", "HQQ".
enum class nbits_algorithm : std::uint8_t { rtn, gptq, hqq };

struct settings {
  bool dedicated_qdq_pair = false;
  bool dedicate_dq_node = false;  ///< DedicateDQNode: copy shared DequantizeLinear per reader
  bool add_qdq_pair_to_weight = false;
  bool force_quantize_no_input_check = false;
  bool matmul_const_b_only = false;
  bool weights_only = false;
  bool quantize_bias = true;
  bool int32_bias = true;
  bool int16_bias = false;  ///< Int16Bias: int32 bias saturated to int16 (quark-spec §6.4)
  /// UsePowerOf2Scale (quark-spec §3.1 step 10): false turns the power-of-two methods' scales
  /// into float scales of the ranges they calibrate (choose_node clears tspec::pof2).
  bool use_pof2_scale = true;
  bool quantize_all_op_types = false;
  bool use_random_data = false;
  bool print_summary = true;
  bool save_tensor_hist_fig = false;  ///< SaveTensorHistFig
  bool crypto_mode = false;           ///< CryptoMode (no side files; checked in static_quant.cpp)
  bool enable_npu_cnn = false;
  bool external_data = false;    ///< qconfig::use_external_data_format
  bool dynamic = false;          ///< qconfig::use_dynamic_quant (dynamic.hpp)
  bool enable_subgraph = false;  ///< EnableSubgraph: bodies too (dynamic quantization only)
  /// UseMatMulNBits with MatMulNBitsParams (nbits.hpp): MatMul weights only, block-wise.
  bool matmul_nbits = false;
  std::int64_t nbits_block_size = 128;                ///< GroupSize
  bool nbits_symmetric = true;                        ///< Symmetric
  int nbits_bits = 4;                                 ///< Bits
  std::int64_t nbits_accuracy_level = 0;              ///< AccuracyLevel (the node's accuracy_level)
  nbits_algorithm nbits_algo = nbits_algorithm::rtn;  ///< Algorithm
  bool nbits_unused_specs = false;  ///< global_config sets specs UseMatMulNBits does not use
  std::optional<bool> calib_range_symmetric;  ///< CalibTensorRangeSymmetric if set explicitly
  double percentile = 99.999;
  std::size_t num_bins = 2048;  ///< NumBins as the global activation method resolves it
  std::optional<std::size_t> num_bins_explicit;  ///< NumBins if set (else each method's default)
  std::size_t num_quantized_bins = 128;          ///< NumQuantizedBins (Entropy)
  bool moving_average = false;                   ///< CalibMovingAverage
  double moving_average_constant = 0.01;         ///< CalibMovingAverageConstant
  std::vector<double> percentile_candidates{99.99, 99.999, 99.99999};  ///< PercentileCandidates
  bool lwp_mse = false;                           ///< LWPMetric "mse" (else "mae")
  bool minmse_most_common = false;                ///< MinMSEModePof2Scale "MostCommon" (else "All")
  std::string minmse_float_mode = "Percentile";   ///< MinMSEModeFloatScale (weights)
  std::optional<std::string> save_and_restore;    ///< SaveAndRestore: ranges file
  std::optional<std::string> tensors_range_file;  ///< TensorsRangeFile: precomputed ranges
  std::optional<std::size_t> calib_data_size;
  std::set<std::string> nodes_to_exclude_output;
  std::set<std::string> op_types_to_exclude_output;
  std::map<std::string, int> per_channel_axis;  ///< QDQOpTypePerChannelSupportToAxis
  std::map<std::string, shape_t> random_shapes;
  std::map<std::string, std::pair<double, double>> random_ranges;
  std::vector<std::string> eval_metrics;  ///< EvalMetrics (empty: none)
  // -- target selection, QDQ management, calibration options (seed 000 categories 2-4) --------
  bool enable_npu_transformer = false;        ///< EnableNPUTransformer
  bool enable_dual_quant_node_pairs = false;  ///< EnableDualQuantNodePairs
  bool use_unsigned_relu = false;             ///< UseUnsignedReLU
  bool align_eltwise_quant_type = false;      ///< AlignEltwiseQuantType
  bool use_qdq_contrib_ops = false;           ///< UseQDQContribOps
  std::vector<std::string> input_nodes;       ///< InputNodes
  std::vector<std::string> output_nodes;      ///< OutputNodes
  tensor_quant_overrides overrides;           ///< TensorQuantOverrides
  std::set<std::string> calib_passthrough;    ///< CalibPassthroughOpTypes
  std::map<std::string, shape_t> fix_shapes;  ///< FixShapes
  std::optional<std::string> eval_data_dir;   ///< EvalDataReader (a folder of .npy / .npz)
  bool debug_mode = false;                    ///< DebugMode
  bool fill_all_value_info = false;           ///< FillAllValueInfo
  int log_severity = 1;                       ///< LogSeverityLevel
  bool refine_block_axis = false;  ///< RefineBlockAxis (default: true when a block spec is used)
  /// NPULimitationCheck's Align* rules (static_quant.cpp, align_params) and MaxLoopNum.
  /// NPULimitationCheck's AdjustShift* / AdjustHardSigmoid rules (power-of-two positions).
  struct align_rules {
    bool concat = false, pool = false, pad = false, slice = false, transpose = false,
         reshape = false;
    bool shift_cut = false, shift_bias = false, shift_read = false, shift_write = false,
         hard_sigmoid = false, shift_swish = false;
    int max_loops = 5;
    [[nodiscard]] bool any() const noexcept {
      return concat || pool || pad || slice || transpose || reshape || shift_cut || shift_bias ||
             shift_read || shift_write || hard_sigmoid || shift_swish;
    }
  } align;
  /// Category 8 (docs/config.md §7.6): BF16QDQToCast (EnableVaimlBF16 implies it unless set),
  /// EnableVaimlBF16, BF16WithClip.
  bool bf16_qdq_to_cast = false, vaiml_bf16 = false, bf16_with_clip = false;
  /// SimulateDPU's conversions (quark-spec §9.2; static_quant.cpp, plan_dpu_simulation).
  struct dpu_conversions {
    bool leaky_relu = false, sigmoid = false, hard_sigmoid = false, avg_pool = false, clip = false,
         reduce_mean = false;
    [[nodiscard]] bool any() const noexcept {
      return leaky_relu || sigmoid || hard_sigmoid || avg_pool || clip || reduce_mean;
    }
  } simulate;
  /// Some spec or TensorQuantOverrides entry asks for a block format (BFP / MX).
  bool any_block = false;
};

struct plan {
  settings opt;
  std::vector<node_choice> nodes;  ///< aligned with the node list given to make_plan
};

/// Nodes of the subgraph (start nodes, end nodes), as a mask over the node list.
using subgraph_fn = std::function<std::vector<bool>(const std::vector<std::string>& starts,
                                                    const std::vector<std::string>& ends)>;

/// UseMatMulNBits is set to true (read before the options are resolved: the float16 path
/// removes keys the resolution would refuse).
bool uses_matmul_nbits(const qconfig& cfg);

/// Resolves `cfg` for `nodes`. Throws config_error / not_implemented naming the option.
plan make_plan(const qconfig& cfg, const std::vector<node_ref>& nodes, const subgraph_fn& subgraph);

/// The fused stage a TensorQuantOverrides quant_type QBFP / QMX asks for (quark-spec §7.5): the
/// op's default attributes (BFP_OP_DEFAULT_ATTRS §1.8, MX_OP_DEFAULT_ATTRS §1.7), then the keys
/// of BFPAttributes / MXAttributes, then the entry's `axis`. Labelled as the spec with the same
/// attributes would be (BFP16, MX9, MXInt8, ...), else "QBFP" / "QMX".
tspec override_block_spec(override_quant_type t, const qconfig& cfg, bool activation,
                          std::optional<std::int64_t> axis);

/// Op types quantized by default (quark-spec §7.2: QLinearOps ∪ QDQ registry, plus the NPU CNN
/// registry when `npu_cnn`).
bool default_quantized_op(const std::string& op_type, bool npu_cnn);

}  // namespace quark::onnx::qz
