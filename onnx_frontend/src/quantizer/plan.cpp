// SPDX-License-Identifier: MIT
// qconfig -> qz::plan: node selection (quark-spec §7.2), spec resolution, and the extra options
// the quantizer honours. Every explicitly set option that the quantizer does not honour raises
// not_implemented naming the key, so nothing is silently ignored.
#include "quantizer/plan.hpp"

#include <algorithm>
#include <charconv>
#include <map>

#include <quark/core/error.hpp>
#include <quark/onnx/config.hpp>

namespace quark::onnx::qz {

namespace {

[[noreturn]] void not_impl(const std::string& what) {
  throw quark::not_implemented("quark.config.not_implemented", what + " is not implemented yet");
}

const std::set<std::string>& qlinear_and_qdq_ops() {
  static const std::set<std::string> s = {
      // QLinearOps registry
      "ArgMax", "Conv", "Gemm", "MatMul", "Add", "Mul", "Relu", "Clip", "LeakyRelu", "Sigmoid",
      "MaxPool", "GlobalAveragePool", "Split", "Pad", "Reshape", "Squeeze", "Unsqueeze", "Resize",
      "AveragePool", "Concat", "Softmax", "Where", "Gather", "Transpose",
      // QDQ registry
      "ConvTranspose", "Tanh", "Gelu", "InstanceNormalization", "LayerNormalization"};
  return s;
}

const std::set<std::string>& npu_cnn_ops() {
  static const std::set<std::string> s = {"HardSigmoid",  "LayerNormalization",
                                          "Div",          "Erf",
                                          "Tanh",         "Sub",
                                          "Min",          "Max",
                                          "ReduceMean",   "DepthToSpace",
                                          "SpaceToDepth", "Slice",
                                          "PRelu",        "LpNormalization",
                                          "AveragePool"};
  return s;
}

/// Ops the quantizer never wraps in Q/DQ even under QuantizeAllOpTypes: they carry no float
/// activation worth quantizing (shape arithmetic, casts, Q/DQ themselves).
bool never_quantized(const std::string& op) {
  static const std::set<std::string> s = {"Shape",          "Cast",
                                          "QuantizeLinear", "DequantizeLinear",
                                          "Constant",       "ConstantOfShape",
                                          "Size",           "NonZero",
                                          "Range",          "If",
                                          "Loop",           "Scan",
                                          "EyeLike"};
  return s.contains(op);
}

bool is_fp8(dtype_id t) {
  return t == dtype_id::float8_e4m3fn || t == dtype_id::float8_e4m3fnuz ||
         t == dtype_id::float8_e5m2 || t == dtype_id::float8_e5m2fnuz;
}

/// A block spec: one com.amd.quark fused node per tensor (quark-spec §7.5), attributes from the
/// spec's block parameters (BFP16Spec: the op defaults; MX*: Quark's parameter blocks, §8).
tspec resolve_block(const tensor_spec& s) {
  tspec t;
  t.type = dtype_id::float32;  // the fused node reads and writes float
  t.method = act_method::none;
  t.axis = s.axis;
  block_op b;
  std::string label(spec_class_name(s.name));
  if (label.ends_with("Spec"))
    label.resize(label.size() - 4);
  b.label = label;
  b.block_size = s.block.block_size;
  b.rounding_mode = s.block.rounding_mode;
  if (s.block.method == block_method::ocp_mx) {
    b.op = "MXQuantizeDequantize";
    switch (s.name) {
      case spec_name::mxfp8_e5m2:
        b.element_dtype = "fp8_e5m2";
        break;
      case spec_name::mxfp8_e4m3:
        b.element_dtype = "fp8_e4m3";
        break;
      case spec_name::mxfp6_e3m2:
        b.element_dtype = "fp6_e3m2";
        break;
      case spec_name::mxfp6_e2m3:
        b.element_dtype = "fp6_e2m3";
        break;
      case spec_name::mxfp4_e2m1:
        b.element_dtype = "fp4_e2m1";
        break;
      default:
        b.element_dtype = "int8";
        break;
    }
  } else {
    b.op = "BFPQuantizeDequantize";
    b.bfp_method = s.block.method == block_method::to_bfp ? "to_bfp" : "to_bfp_prime";
    b.bit_width = s.block.bit_width;
    b.sub_block_size = s.block.sub_block_size;
    b.sub_block_shift_bits = s.block.sub_block_shift_bits;
  }
  t.block = std::move(b);
  return t;
}

/// Legacy BFPAttributes / MXAttributes (quark-spec §7.5, §8.2): each key present replaces that
/// attribute of every fused node of its op (BFPQuantizeDequantize / MXQuantizeDequantize); an
/// `axis` becomes the spec's explicit axis (it wins over RefineBlockAxis). Weights and biases
/// keep convert_to_bfloat_before_bfp 0, as Quark writes it for initializers. The registry
/// checked the keys and values (options.cpp).
void apply_legacy_block_attributes(tspec& t, const option_map& opts, bool activation) {
  if (!t.block)
    return;
  block_op& b = *t.block;
  const bool bfp = b.op == "BFPQuantizeDequantize";
  const option_value* v = opts.find(bfp ? "BFPAttributes" : "MXAttributes");
  if (v == nullptr || !v->is_object())
    return;
  for (const auto& [key, value] : v->as_object()) {
    if (key == "axis") {
      t.axis = value.as_int();
    } else if (key == "bfp_method") {
      b.bfp_method = value.as_string();
    } else if (key == "element_dtype") {
      b.element_dtype = value.as_string();
    } else if (key == "block_size") {
      b.block_size = value.as_int();
    } else if (key == "bit_width") {
      b.bit_width = value.as_int();
    } else if (key == "rounding_mode") {
      b.rounding_mode = value.as_int();
    } else if (key == "sub_block_size") {
      b.sub_block_size = value.as_int();
    } else if (key == "sub_block_shift_bits") {
      b.sub_block_shift_bits = value.as_int();
    } else if (key == "convert_to_bfloat_before_bfp") {
      b.convert_to_bfloat_before_bfp = activation ? value.as_int() : 0;
    } else if (key == "use_compiler_version_cpu_kernel") {
      b.use_compiler_version_cpu_kernel = value.as_int();
    }
  }
}

/// A tensor spec as the quantizer applies it. `activation`: input_tensors / output_tensors
/// (quantized by QuantizeLinear at run time), else a weight or bias (stored quantized).
tspec resolve(const tensor_spec& s, const char* role, bool activation) {
  tspec t;
  const std::string where = std::string(role) + " spec " + std::string(spec_class_name(s.name));
  if (s.is_block())
    return resolve_block(s);
  const bool fp16 = s.dtype == dtype_id::float16 || s.dtype == dtype_id::bfloat16;
  switch (s.dtype) {
    case dtype_id::int8:
    case dtype_id::uint8:
    case dtype_id::int16:
    case dtype_id::uint16:
    case dtype_id::int4:
    case dtype_id::uint4:
    case dtype_id::float16:
    case dtype_id::bfloat16:
    case dtype_id::float8_e4m3fn:
    case dtype_id::float8_e4m3fnuz:
    case dtype_id::float8_e5m2:
    case dtype_id::float8_e5m2fnuz:
      break;
    case dtype_id::int32:
      // ONNX QuantizeLinear has no int32 output; DequantizeLinear reads int32 (weights, bias).
      if (activation) {
        throw config_error("quark.config.unsupported_type",
                           where +
                               ": ONNX QuantizeLinear cannot produce int32, so activations "
                               "cannot use Int32Spec (weights and biases can)");
      }
      break;
    case dtype_id::uint32:
      throw config_error("quark.config.unsupported_type",
                         where +
                             ": ONNX QuantizeLinear / DequantizeLinear have no uint32 type "
                             "(Quark needs its com.amd.quark custom ops for it)");
    default:
      not_impl(where + " with element type " + std::string(dtype_name(s.dtype)));
  }
  t.type = s.dtype;
  t.symmetric = s.symmetric;
  t.int16_scale = s.scale_type == scale_kind::int16;
  t.pof2 = s.scale_type == scale_kind::power_of_2;
  switch (s.calibration_method) {
    case calib_method::min_max:
      t.method = t.pof2 ? act_method::pof2_minmax : act_method::minmax;
      break;
    case calib_method::percentile:
      t.method = act_method::percentile;
      break;
    case calib_method::entropy:
      t.method = act_method::entropy;
      break;
    case calib_method::layerwise_percentile:
      t.method = act_method::layerwise_percentile;
      break;
    case calib_method::min_mse:
      // MinMSE searches the scale that minimises the squared error: powers of two with a
      // PowerOf2 (or Int16, which Quark maps to it) scale, float scales with a Float32 one
      // (quark-spec "Decisions" 1, where Quark's code maps every MinMSE activation to
      // PowerOfTwoMethod.MinMSE; weights: WeightCalibrateMethod = MinMSE, §4.8).
      // FP8 specs (Float32 scale only) search a float scale with the float8 type's own
      // rounding in the error (quark::minifloat_minmse_calibrator, docs/compatibility.md).
      if (fp16) {
        not_impl(where + " with calibration_method MinMSE (integer and FP8 specs have it; a " +
                 "bfloat16 / float16 Cast has no scale to search)");
      }
      t.method = act_method::pof2_minmse;
      if (t.pof2 || t.int16_scale) {
        t.pof2 = true;
        t.int16_scale = false;
      } else if (std::string_view(role) != "weight") {
        t.method = act_method::float_minmse;
      }
      t.weight_minmse = true;
      break;
    case calib_method::distribution:
      t.method = act_method::distribution;  // config validation allows it for FP8 only
      break;
    default:
      not_impl(where + " with calibration_method " + std::string(to_string(s.calibration_method)));
  }
  if (fp16)
    t.method = act_method::none;  // unscaled: a plain cast; ActivationScaled re-enables it
  if (s.quant_granularity == granularity::group) {
    if (activation) {
      throw config_error("quark.config.group", where + ": Group granularity applies to weights");
    }
    t.group_size = s.group_size;
  }
  t.per_channel = s.quant_granularity == granularity::channel;
  t.axis = s.axis;
  return t;
}

/// Keys read below; any other explicitly set key is rejected.
const std::set<std::string>& honoured_keys() {
  static const std::set<std::string> s = {
      "OpTypesToQuantize", "NodesToQuantize", "ExtraOpTypesToQuantize", "QuantizeAllOpTypes",
      "DedicatedQDQPair", "AddQDQPairToWeight", "ForceQuantizeNoInputCheck", "MatMulConstBOnly",
      "EnableSubgraph", "WeightsOnly", "QuantizeBias", "Int32Bias",
      "OpTypesToExcludeOutputQuantization", "NodesToExcludeOutputQuantization",
      "QDQOpTypePerChannelSupportToAxis", "CalibTensorRangeSymmetric", "CalibMovingAverage",
      "CalibMovingAverageConstant", "Percentile", "NumBins", "NumQuantizedBins",
      "PercentileCandidates", "LWPMetric", "MinMSEModePof2Scale", "MinMSEModeFloatScale",
      "WeightCalibrateMethod", "SaveAndRestore", "UseRandomData", "RandomDataReaderInputShape",
      "RandomDataReaderInputDataRange", "CalibDataSize", "PrintSummary", "EnableNPUCnn",
      "ActivationSymmetric", "WeightSymmetric", "EvalMetrics", "IgnoreWarnings", "LogSeverityLevel",
      "ExecutionProviders", "UsePowerOf2Scale", "Int16Bias", "Int16Scale", "ActivationScaled",
      "WeightScaled", "EnableNPUTransformer", "EnableDualQuantNodePairs", "UseUnsignedReLU",
      "AlignEltwiseQuantType", "UseQDQContribOps", "InputNodes", "OutputNodes",
      "TensorQuantOverrides", "CalibPassthroughOpTypes", "AdjustBiasScale", "FixShapes",
      "EvalDataReader", "DebugMode", "FillAllValueInfo", "ReplaceClip6Relu", "CLEBalanceMethod",
      "CLESteps", "CLEWeightThreshold", "CLEScaleAppendBias", "CLEScaleUseThreshold",
      "CLETotalLayerDiffThreshold", "BiasCorrection", "TensorsRangeFile", "RefineBlockAxis",
      "SaveTensorHistFig", "CryptoMode", "EncryptionAlgorithm", "BFPAttributes", "MXAttributes",
      "UseMatMulNBits", "MatMulNBitsParams", "DedicateDQNode", "NPULimitationCheck", "MaxLoopNum",
      "AlignConcat", "AlignPool", "AlignPad", "AlignSlice", "AlignTranspose", "AlignReshape",
      "AdjustShiftCut", "AdjustShiftBias", "AdjustShiftRead", "AdjustShiftWrite",
      "AdjustHardSigmoid", "AdjustShiftSwish", "SimulateDPU", "ConvertLeakyReluToDPUVersion",
      "ConvertSigmoidToHardSigmoid", "ConvertHardSigmoidToDPUVersion", "ConvertAvgPoolToDPUVersion",
      "ConvertClipToDPUVersion", "ConvertReduceMeanToDPUVersion", "BF16WithClip", "BF16QDQToCast",
      "EnableVaimlBF16",
      // Accepted with any value, no effect in quark-cpp (docs/config.md says why): calibration
      // streams through the runtime's own thread pool and keeps memory flat, and nothing is
      // written to disk.
      "CalibWorkerNum", "CalibOptimizeMem", "CalibOptimizeDisk", "TmpDir"};
  return s;
}

/// Keys the graph passes read (graph_passes.cpp, read_pass_options).
bool graph_pass_key(const std::string& key) {
  static const std::set<std::string> s = {
      "OptimizeModel", "FoldBatchNorm", "RemoveQDQConvClip", "RemoveQDQConvRelu",
      "RemoveQDQConvLeakyRelu", "RemoveQDQConvPRelu", "RemoveQDQConvGelu", "RemoveQDQMulAdd",
      "RemoveQDQBetweenOps", "RemoveQDQInstanceNorm", "RemoveFusedQDQ",
      // conversions.cpp
      "ConvertBNToConv", "ConvertClipToRelu", "ConvertSplitToSlice",
      "ConvertReduceMeanToGlobalAvgPool", "SplitLargeKernelPool", "FoldRelu",
      // preprocess.cpp
      "SkipPreprocess", "ConvertOpsetVersion", "ConvertFP16ToFP32", "ConvertNCHWToNHWC",
      "RemoveInputInit", "CopySharedInit", "CopyBiasInit", "FuseInstanceNorm", "FuseL2Norm",
      "FuseGelu", "FuseLayerNorm",
      // simplify.cpp
      "SimplifyModel", "SimplifyModelOptions"};
  return s.contains(key);
}

/// Keys whose value only matters for graph rewrites quark-cpp does not perform yet; the presets
/// set them, so they are accepted at the values the presets use (the summary lists them).
bool accepted_preset_value(const std::string& key, const option_value& v) {
  static const std::set<std::string> bool_keys = {"ConvertSigmoidToHardSigmoid"};
  if (bool_keys.contains(key) && v.is_bool())
    return true;
  // QuantizeFP16 / UseFP32Scale: quantize_model takes float16 models (and QuantizeFP16 = true)
  // to fp16_model.cpp, which removes both keys; here they can only be false.
  return (key == "QuantizeFP16" || key == "UseFP32Scale") && v == option_value(false);
}

/// FixShapes: "name:[d0,d1,...];name:[...]" (the registry checked the syntax).
std::map<std::string, shape_t> parse_fix_shapes(const std::string& text) {
  std::map<std::string, shape_t> out;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t end = text.find(';', pos);
    if (end == std::string::npos)
      end = text.size();
    const std::string item = text.substr(pos, end - pos);
    pos = end + 1;
    const auto colon = item.rfind(':');
    if (colon == std::string::npos)
      continue;
    shape_t dims;
    std::size_t i = colon + 2;
    while (i < item.size() && item[i] != ']') {
      while (i < item.size() && item[i] == ' ')
        ++i;
      std::int64_t d = 0;
      const auto [ptr, ec] = std::from_chars(item.data() + i, item.data() + item.size(), d);
      if (ec != std::errc{} || d <= 0) {
        throw config_error(
            "quark.config.value",
            "FixShapes: a dimension of '" + item.substr(0, colon) + "' is not a positive integer");
      }
      dims.push_back(d);
      i = static_cast<std::size_t>(ptr - item.data());
      while (i < item.size() && (item[i] == ',' || item[i] == ' '))
        ++i;
    }
    out[item.substr(0, colon)] = dims;
  }
  return out;
}

}  // namespace

bool default_quantized_op(const std::string& op_type, bool npu_cnn) {
  if (qlinear_and_qdq_ops().contains(op_type))
    return true;
  return npu_cnn && npu_cnn_ops().contains(op_type);
}

namespace {

/// What the extra options say about choosing a node and its specs (read once by read_options,
/// applied per node by choose_node).
struct node_rules {
  bool int16_scale = false;            ///< Int16Scale
  bool act_scaled = false;             ///< ActivationScaled
  bool weight_scaled = false;          ///< WeightScaled
  std::optional<bool> weight_minmse;   ///< WeightCalibrateMethod, if set (Float32 weights only)
  std::optional<bool> act_sym, w_sym;  ///< ActivationSymmetric / WeightSymmetric, if set
  std::vector<std::string> op_types, extra_ops, nodes_to_quantize;
};

/// The extra options (effective values `eff`) into the settings `o`; returns the per-node rules.
node_rules read_options(const qconfig& cfg, const option_map& eff, settings& o) {
  node_rules r;
  auto get_bool = [&](const char* k, bool dflt) {
    const option_value v = eff.find(k) ? *eff.find(k) : option_value(dflt);
    return v.is_bool() ? v.as_bool() : dflt;
  };
  if (get_bool("NPULimitationCheck", true)) {
    o.align.concat = get_bool("AlignConcat", false);
    o.align.pool = get_bool("AlignPool", false);
    o.align.pad = get_bool("AlignPad", false);
    o.align.slice = get_bool("AlignSlice", false);
    o.align.transpose = get_bool("AlignTranspose", false);
    o.align.reshape = get_bool("AlignReshape", false);
    o.align.shift_cut = get_bool("AdjustShiftCut", true);
    o.align.shift_bias = get_bool("AdjustShiftBias", true);
    o.align.shift_read = get_bool("AdjustShiftRead", true);
    o.align.shift_write = get_bool("AdjustShiftWrite", true);
    o.align.hard_sigmoid = get_bool("AdjustHardSigmoid", true);
    o.align.shift_swish = get_bool("AdjustShiftSwish", true);
  }
  o.vaiml_bf16 = get_bool("EnableVaimlBF16", false);
  {
    // Quark reads BF16QDQToCast with EnableVaimlBF16 as its default.
    const option_value* v = cfg.extra_options.find("BF16QDQToCast");
    o.bf16_qdq_to_cast = v != nullptr && v->is_bool() ? v->as_bool() : o.vaiml_bf16;
  }
  o.bf16_with_clip = get_bool("BF16WithClip", false);
  if (get_bool("SimulateDPU", true)) {
    o.simulate.leaky_relu = get_bool("ConvertLeakyReluToDPUVersion", false);
    o.simulate.sigmoid = get_bool("ConvertSigmoidToHardSigmoid", false);
    o.simulate.hard_sigmoid = get_bool("ConvertHardSigmoidToDPUVersion", false);
    o.simulate.avg_pool = get_bool("ConvertAvgPoolToDPUVersion", false);
    o.simulate.clip = get_bool("ConvertClipToDPUVersion", false);
    o.simulate.reduce_mean = get_bool("ConvertReduceMeanToDPUVersion", false);
  }
  if (const option_value* v = eff.find("MaxLoopNum"); v != nullptr && v->is_int())
    o.align.max_loops = static_cast<int>(std::min<std::int64_t>(v->as_int(), 1000));
  o.dedicated_qdq_pair = get_bool("DedicatedQDQPair", false);
  o.dedicate_dq_node = get_bool("DedicateDQNode", false);
  o.add_qdq_pair_to_weight = get_bool("AddQDQPairToWeight", false);
  o.force_quantize_no_input_check = get_bool("ForceQuantizeNoInputCheck", false);
  o.matmul_const_b_only = get_bool("MatMulConstBOnly", false);
  o.enable_subgraph = get_bool("EnableSubgraph", false);
  o.weights_only = get_bool("WeightsOnly", false);
  o.quantize_bias = get_bool("QuantizeBias", true);
  o.int32_bias = get_bool("Int32Bias", true);
  o.int16_bias = get_bool("Int16Bias", false);
  o.use_pof2_scale = get_bool("UsePowerOf2Scale", true);
  if (o.int16_bias)
    o.int32_bias = true;  // quark-spec §6.4: Int16Bias goes through the int32 bias path
  r.int16_scale = get_bool("Int16Scale", false);
  r.act_scaled = get_bool("ActivationScaled", false);
  r.weight_scaled = get_bool("WeightScaled", false);
  o.quantize_all_op_types = get_bool("QuantizeAllOpTypes", false);
  o.use_random_data = get_bool("UseRandomData", false);
  o.print_summary = get_bool("PrintSummary", true);
  o.save_tensor_hist_fig = get_bool("SaveTensorHistFig", false);
  o.crypto_mode = get_bool("CryptoMode", false);
  o.enable_npu_cnn = get_bool("EnableNPUCnn", false);
  o.external_data = cfg.use_external_data_format;
  o.dynamic = cfg.use_dynamic_quant;
  o.matmul_nbits = get_bool("UseMatMulNBits", false);
  {
    const layer_config& g = cfg.global_config;
    o.nbits_unused_specs =
        o.matmul_nbits && (g.input_tensors || g.weight || g.output_tensors || g.bias);
  }
  if (const auto* v = eff.find("MatMulNBitsParams"); v && v->is_object()) {
    if (const auto* g = v->find("GroupSize"))
      o.nbits_block_size = g->as_int();
    if (const auto* b = v->find("Symmetric"))
      o.nbits_symmetric = b->as_bool();
    if (const auto* b = v->find("Bits"))
      o.nbits_bits = static_cast<int>(b->as_int());
    if (const auto* a = v->find("AccuracyLevel"))
      o.nbits_accuracy_level = a->as_int();
    if (const auto* a = v->find("Algorithm")) {
      o.nbits_algo = a->as_string() == "GPTQ"  ? nbits_algorithm::gptq
                     : a->as_string() == "HQQ" ? nbits_algorithm::hqq
                                               : nbits_algorithm::rtn;
    }
  }
  if (const auto* v = cfg.extra_options.find("CalibTensorRangeSymmetric")) {
    o.calib_range_symmetric = option_cast<bool>(*v, "CalibTensorRangeSymmetric");
  }
  if (const auto* v = eff.find("Percentile"); v && v->is_number())
    o.percentile = v->as_number();
  if (const auto* v = eff.find("NumBins"); v && v->is_int()) {
    o.num_bins = option_cast<std::size_t>(*v, "NumBins");
  }
  if (const auto* v = cfg.extra_options.find("NumBins"))
    o.num_bins_explicit = option_cast<std::size_t>(*v, "NumBins");
  if (const auto* v = eff.find("NumQuantizedBins"); v && v->is_int())
    o.num_quantized_bins = option_cast<std::size_t>(*v, "NumQuantizedBins");
  o.moving_average = get_bool("CalibMovingAverage", false);
  if (const auto* v = eff.find("CalibMovingAverageConstant"); v && v->is_number())
    o.moving_average_constant = v->as_number();
  if (const auto* v = eff.find("PercentileCandidates"); v && !v->is_null())
    o.percentile_candidates = option_cast<std::vector<double>>(*v, "PercentileCandidates");
  if (const auto* v = eff.find("LWPMetric"); v && v->is_string())
    o.lwp_mse = v->as_string() == "mse";
  if (const auto* v = eff.find("MinMSEModePof2Scale"); v && v->is_string())
    o.minmse_most_common = v->as_string() == "MostCommon";
  if (const auto* v = eff.find("MinMSEModeFloatScale"); v && v->is_string())
    o.minmse_float_mode = v->as_string();
  if (const auto* v = cfg.extra_options.find("WeightCalibrateMethod"); v && v->is_string())
    r.weight_minmse = v->as_string().find("MinMSE") != std::string::npos;
  if (const auto* v = eff.find("SaveAndRestore"); v && v->is_string())
    o.save_and_restore = v->as_string();
  if (const auto* v = eff.find("TensorsRangeFile"); v && v->is_string())
    o.tensors_range_file = v->as_string();
  if (const auto* v = eff.find("CalibDataSize"); v && !v->is_null()) {
    o.calib_data_size = option_cast<std::size_t>(*v, "CalibDataSize");
  }
  auto strings = [&](const char* k) {
    const auto* v = eff.find(k);
    return v && !v->is_null() ? option_cast<std::vector<std::string>>(*v, k)
                              : std::vector<std::string>{};
  };
  for (auto& s : strings("OpTypesToExcludeOutputQuantization"))
    o.op_types_to_exclude_output.insert(s);
  for (auto& s : strings("NodesToExcludeOutputQuantization"))
    o.nodes_to_exclude_output.insert(s);
  if (const auto* v = eff.find("QDQOpTypePerChannelSupportToAxis"); v && !v->is_null()) {
    o.per_channel_axis =
        option_cast<std::map<std::string, int>>(*v, "QDQOpTypePerChannelSupportToAxis");
  }
  if (const auto* v = eff.find("RandomDataReaderInputShape"); v && !v->is_null()) {
    o.random_shapes = option_cast<std::map<std::string, shape_t>>(*v, "RandomDataReaderInputShape");
  }
  if (const auto* v = eff.find("RandomDataReaderInputDataRange"); v && !v->is_null()) {
    o.random_ranges = option_cast<std::map<std::string, std::pair<double, double>>>(
        *v, "RandomDataReaderInputDataRange");
  }
  if (const auto* v = eff.find("EvalMetrics"); v && v->is_bool() && v->as_bool()) {
    o.eval_metrics = {"cosine", "l2"};
  } else if (v && v->is_array()) {
    o.eval_metrics = option_cast<std::vector<std::string>>(*v, "EvalMetrics");
  }
  o.enable_npu_transformer = get_bool("EnableNPUTransformer", false);
  o.enable_dual_quant_node_pairs = get_bool("EnableDualQuantNodePairs", false);
  o.use_unsigned_relu = get_bool("UseUnsignedReLU", false);
  o.align_eltwise_quant_type = get_bool("AlignEltwiseQuantType", false);
  o.use_qdq_contrib_ops = get_bool("UseQDQContribOps", false);
  o.debug_mode = get_bool("DebugMode", false);
  o.fill_all_value_info = get_bool("FillAllValueInfo", false);
  if (const auto* v = eff.find("LogSeverityLevel"); v && v->is_int())
    o.log_severity = static_cast<int>(v->as_int());
  o.input_nodes = strings("InputNodes");
  o.output_nodes = strings("OutputNodes");
  if (const auto* v = eff.find("TensorQuantOverrides"); v && !v->is_null())
    o.overrides = option_cast<tensor_quant_overrides>(*v, "TensorQuantOverrides");
  for (auto& s : strings("CalibPassthroughOpTypes"))
    o.calib_passthrough.insert(s);
  if (const auto* v = eff.find("FixShapes"); v && v->is_string())
    o.fix_shapes = parse_fix_shapes(v->as_string());
  if (const auto* v = eff.find("EvalDataReader"); v && v->is_string())
    o.eval_data_dir = v->as_string();
  r.op_types = strings("OpTypesToQuantize");
  r.extra_ops = strings("ExtraOpTypesToQuantize");
  r.nodes_to_quantize = strings("NodesToQuantize");
  if (const auto* v = cfg.extra_options.find("ActivationSymmetric"))
    r.act_sym = option_cast<bool>(*v, "ActivationSymmetric");
  if (const auto* v = cfg.extra_options.find("WeightSymmetric"))
    r.w_sym = option_cast<bool>(*v, "WeightSymmetric");
  return r;
}

/// Node `n`: whether it is quantized and with which specs (quark-spec §7.2: op type selection,
/// then exclude / specific_layer_config / layer_type_config / global, then the options that
/// adjust the specs).
void choose_node(const qconfig& cfg, const settings& o, const node_rules& r, const node_ref& n,
                 const node_query& info, node_choice& c) {
  // 1. Op type selection (quark-spec §7.2; MatMul alone with UseMatMulNBits, §10.7).
  bool selected;
  if (o.matmul_nbits) {
    selected = n.op_type == "MatMul";
  } else if (never_quantized(n.op_type)) {
    selected = false;
  } else if (o.quantize_all_op_types) {
    selected = true;
  } else if (!r.op_types.empty()) {
    selected = std::find(r.op_types.begin(), r.op_types.end(), n.op_type) != r.op_types.end();
  } else if (o.enable_npu_transformer) {
    // quark-spec §7.2: the NPU transformer registry is {Gemm, MatMul}.
    selected = n.op_type == "Gemm" || n.op_type == "MatMul";
  } else {
    selected = default_quantized_op(n.op_type, o.enable_npu_cnn);
  }
  if (std::find(r.extra_ops.begin(), r.extra_ops.end(), n.op_type) != r.extra_ops.end())
    selected = true;
  if (!r.nodes_to_quantize.empty() &&
      std::find(r.nodes_to_quantize.begin(), r.nodes_to_quantize.end(), n.name) ==
          r.nodes_to_quantize.end()) {
    selected = false;
    c.reason = "not in NodesToQuantize";
    c.simulate = false;
  }
  if (!selected) {
    if (c.reason.empty())
      c.reason = "op type not quantized";
    if (c.simulate && o.simulate.hard_sigmoid && n.op_type == "HardSigmoid")
      c.simulate = plan_node(cfg, info).decision != node_decision::excluded;
    return;
  }
  // 2. exclude / specific_layer_config / layer_type_config / global.
  const node_plan np = plan_node(cfg, info);
  c.simulate = np.decision != node_decision::excluded;
  if (!np.quantized()) {
    c.reason = np.decision == node_decision::excluded ? "excluded" : "op type excluded";
    return;
  }
  if (o.matmul_nbits) {
    c.quantize = true;  // MatMulNBitsParams, not the specs, describe the weight
    return;
  }
  const layer_config& layer = *np.config;
  if (auto s = effective_spec(cfg, layer, tensor_role::input))
    c.input = resolve(*s, "input_tensors", true);
  if (auto s = effective_spec(cfg, layer, tensor_role::output))
    c.output = resolve(*s, "output_tensors", true);
  if (auto s = effective_spec(cfg, layer, tensor_role::weight))
    c.weight = resolve(*s, "weight", false);
  if (auto s = effective_spec(cfg, layer, tensor_role::bias))
    c.bias = resolve(*s, "bias", false);
  // Int16Scale (quark-spec §2.3): float scales of integer types become M * 2^-N, except in
  // the NPU CNN flow; ActivationScaled / WeightScaled scale BFloat16 / Float16 (§1.5).
  for (auto* t : {&c.input, &c.output, &c.weight, &c.bias}) {
    if (!*t)
      continue;
    tspec& ts = **t;
    const bool fp16 = ts.type == dtype_id::float16 || ts.type == dtype_id::bfloat16;
    if (r.int16_scale && !o.enable_npu_cnn && !fp16 && !is_fp8(ts.type) && !ts.pof2)
      ts.int16_scale = true;
    const bool scaled = (t == &c.input || t == &c.output) ? r.act_scaled : r.weight_scaled;
    if (fp16 && scaled) {
      ts.fp_scaled = true;
      ts.method = act_method::minmax;
    }
  }
  if (r.act_sym) {
    if (c.input)
      c.input->symmetric = *r.act_sym;
    if (c.output)
      c.output->symmetric = *r.act_sym;
  }
  if (r.w_sym && c.weight)
    c.weight->symmetric = *r.w_sym;
  for (auto* t : {&c.input, &c.output, &c.weight, &c.bias}) {
    if (*t)
      apply_legacy_block_attributes(**t, cfg.extra_options, t == &c.input || t == &c.output);
  }
  if (r.weight_minmse && c.weight && !c.weight->pof2)
    c.weight->weight_minmse = *r.weight_minmse;
  if (!o.use_pof2_scale) {
    // UsePowerOf2Scale = false (quark-spec §3.1 step 10): compute_scale_zp returns the float
    // scale of the range a PowerOfTwoMethod calibrated. NonOverflow's range is the min / max;
    // MinMSE's is the searched (qmin - zp) * 2^-pos .. (qmax - zp) * 2^-pos, whose float scale
    // on the symmetric int8 / int16 grid is that power of two again (on other grids it is
    // not). A weight's MinMSE search (quantize_data, §4.8) tries powers of two whatever the
    // option says, so MinMSE weights and biases keep it; an initializer activation searched
    // the same way keeps its power of two in static_quantizer::params_of.
    for (auto* t : {&c.input, &c.output, &c.weight, &c.bias}) {
      if (!*t || !(*t)->pof2)
        continue;
      const bool activation = t == &c.input || t == &c.output;
      if ((*t)->method == act_method::pof2_minmax ||
          ((*t)->method == act_method::pof2_minmse && activation)) {
        (*t)->pof2 = false;
        (*t)->pof2_method_float_scale = true;
      }
    }
  }
  c.quantize = c.input || c.output || c.weight;
  if (!c.quantize)
    c.reason = "no spec";
}

}  // namespace

plan make_plan(const qconfig& cfg, const std::vector<node_ref>& nodes,
               const subgraph_fn& subgraph) {
  cfg.validate();
  // Every algorithm of algo_config is implemented (algorithms.hpp).

  for (const auto& m : cfg.extra_options.entries()) {
    // Keys the registry marks not implemented only accept their inert value (checked when they
    // were set), which asks for nothing: they are fine here.
    const option_info* info = find_option(m.key);
    const bool inert = info != nullptr && info->support == option_support::not_implemented;
    if (!inert && !honoured_keys().contains(m.key) && !graph_pass_key(m.key) &&
        !accepted_preset_value(m.key, m.value)) {
      not_impl("extra option '" + m.key + "' (value " + to_string(m.value) + ")");
    }
  }
  const option_map eff = cfg.effective_options();
  plan p;
  const node_rules rules = read_options(cfg, eff, p.opt);
  // Subgraph masks are computed once per (starts, ends).
  std::map<std::pair<std::vector<std::string>, std::vector<std::string>>, std::vector<bool>> masks;
  p.nodes.resize(nodes.size());
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    const node_ref& n = nodes[i];
    node_query info{
        .name = n.name, .op_type = n.op_type, .in_subgraph = [&, i](const struct subgraph& g) {
          auto key = std::make_pair(g.start_nodes, g.end_nodes);
          auto it = masks.find(key);
          if (it == masks.end())
            it = masks.emplace(key, subgraph(g.start_nodes, g.end_nodes)).first;
          return it->second[i];
        }};
    choose_node(cfg, p.opt, rules, n, info, p.nodes[i]);
  }
  // RefineBlockAxis (quark-spec §7.7): on by default when a block spec is used.
  {
    bool any_block = false;
    for (const auto& c : p.nodes) {
      for (const auto* t : {&c.input, &c.output, &c.weight, &c.bias})
        any_block = any_block || (*t && (*t)->block);
    }
    for (const auto& [tensor, entries] : p.opt.overrides) {
      const auto type = entries.front().quant_type;
      any_block = any_block || (type && is_block_type(*type));
    }
    p.opt.any_block = any_block;
    const option_value* v = cfg.extra_options.find("RefineBlockAxis");
    p.opt.refine_block_axis =
        v && !v->is_null() ? option_cast<bool>(*v, "RefineBlockAxis") : any_block;
  }
  return p;
}

tspec override_block_spec(override_quant_type t, const qconfig& cfg, bool activation,
                          std::optional<std::int64_t> axis) {
  const bool bfp = t == override_quant_type::bfp;  // else mx (is_block_type)
  tspec s = resolve_block(make_spec(bfp ? spec_name::bfp16 : spec_name::mxint8));
  s.block->rounding_mode = 0;  // both ops' default; the MX specs' parameter blocks say 2
  apply_legacy_block_attributes(s, cfg.extra_options, activation);
  if (axis)
    s.axis = static_cast<int>(*axis);
  // The label of the spec whose fused node carries the same attributes, if one does.
  s.block->label = bfp ? "QBFP" : "QMX";
  for (const spec_name n : all_spec_names()) {
    const tensor_spec candidate = make_spec(n);
    if (!candidate.is_block())
      continue;
    block_op b = *resolve_block(candidate).block;
    const std::string label = b.label;
    b.label = s.block->label;
    b.convert_to_bfloat_before_bfp = s.block->convert_to_bfloat_before_bfp;
    b.use_compiler_version_cpu_kernel = s.block->use_compiler_version_cpu_kernel;
    if (b == *s.block) {
      s.block->label = label;
      break;
    }
  }
  return s;
}

}  // namespace quark::onnx::qz

namespace quark::onnx::qz {

bool uses_matmul_nbits(const qconfig& cfg) {
  const option_value* v = cfg.extra_options.find("UseMatMulNBits");
  return v != nullptr && v->is_bool() && v->as_bool();
}

settings read_settings(const qconfig& cfg) {
  return make_plan(cfg, {}, {}).opt;
}

}  // namespace quark::onnx::qz
