// SPDX-License-Identifier: MIT
// node_selector, qconfig::validate (the rules Quark enforces), qconfig::effective_options (the
// context-dependent defaults) and the per-node resolution used by the quantizer.
#include <string>
#include <vector>

#include <quark/onnx/config.hpp>

namespace quark::onnx {

// ---- node_selector ---------------------------------------------------------------------------

namespace {

// std::regex matches by backtracking, recursing once per character or more: a pattern such as
// "^.*b" overflowed the stack on a node name of 100,000 characters (libstdc++ 12), and nested
// repetitions ("^(a+)+b") take exponential time. libstdc++'s __polynomial flag selects its
// breadth-first matcher instead (stack depth bounded by the pattern, time polynomial); it
// refuses back-references, which keep the backtracking matcher with a bound on the name length.
#if defined(__GLIBCXX__)
constexpr std::regex::flag_type linear_matcher = std::regex_constants::__polynomial;
#else
constexpr std::regex::flag_type linear_matcher = {};
#endif
/// The longest node name the backtracking matcher is given (it recursed fine to 10,000).
constexpr std::size_t backtracking_name_limit = 1000;

bool backtracks(const std::regex& r) {
  return linear_matcher == std::regex::flag_type{} || (r.flags() & linear_matcher) == 0;
}

}  // namespace

node_selector node_selector::parse(std::string_view s) {
  node_selector sel;
  sel.text_ = std::string(s);
  if (s.empty()) {
    throw config_error("quark.config.value", "a node selector must not be an empty string");
  }
  if (s.front() == '^') {
    sel.kind_ = selector_kind::regex;
    try {
      try {
        sel.regex_ =
            std::make_shared<const std::regex>(sel.text_, std::regex::ECMAScript | linear_matcher);
      } catch (const std::regex_error& e) {
        if (e.code() != std::regex_constants::error_complexity)
          throw;
        sel.regex_ = std::make_shared<const std::regex>(sel.text_, std::regex::ECMAScript);
      }
    } catch (const std::regex_error& e) {
      throw config_error("quark.config.regex",
                         "invalid regular expression \"" + sel.text_ + "\": " + e.what());
    }
  } else {
    sel.kind_ = selector_kind::name;
  }
  return sel;
}

node_selector node_selector::from_subgraph(subgraph g) {
  if (g.start_nodes.empty() || g.end_nodes.empty()) {
    throw config_error("quark.config.value",
                       "a subgraph needs at least one start node and one end node");
  }
  node_selector sel;
  sel.kind_ = selector_kind::subgraph;
  sel.graph_ = std::move(g);
  return sel;
}

bool node_selector::matches_name(std::string_view node_name) const {
  switch (kind_) {
    case selector_kind::name:
      return node_name == text_;
    case selector_kind::regex:
      if (node_name.size() > backtracking_name_limit && backtracks(*regex_)) {
        throw config_error("quark.config.regex",
                           "regular expression \"" + text_ +
                               "\" needs the backtracking matcher (a back-reference), which "
                               "takes node names of at most " +
                               std::to_string(backtracking_name_limit) + " characters; node '" +
                               std::string(node_name.substr(0, 64)) + "...' has " +
                               std::to_string(node_name.size()));
      }
      return std::regex_search(node_name.begin(), node_name.end(), *regex_);
    case selector_kind::subgraph:
      return false;
  }
  return false;
}

// ---- validation ------------------------------------------------------------------------------

namespace {

[[noreturn]] void bad_value(const std::string& where, const std::string& what) {
  throw config_error("quark.config.value", where + ": " + what);
}

[[noreturn]] void conflict(const std::string& what) {
  throw config_error("quark.config.conflict", what);
}

std::string spec_label(const tensor_spec& s) {
  return std::string(spec_class_name(s.name));
}

void check_spec(const tensor_spec& s, const std::string& where, tensor_role role) {
  const tensor_spec ref = make_spec(s.name);
  if (s.dtype != ref.dtype) {
    bad_value(where, "dtype " + std::string(dtype_name(s.dtype)) + " does not match " +
                         spec_label(s) + " (" + std::string(dtype_name(ref.dtype)) + ")");
  }
  const bool activation = role == tensor_role::input || role == tensor_role::output;
  if (s.quant_granularity == granularity::group) {
    if (!is_integer_spec(s))
      bad_value(where, "Group granularity needs an integer spec");
    if (s.group_size <= 0)
      bad_value(where, "Group granularity needs group_size > 0");
  } else if (s.group_size != 0) {
    bad_value(where, "group_size is only used with Group granularity");
  }
  if (activation && s.quant_granularity != granularity::tensor) {
    bad_value(where, "activations are quantized per tensor; " +
                         std::string(to_string(s.quant_granularity)) +
                         " granularity applies to weights and biases only (quark-spec §5.2)");
  }
  if (s.scale_type != scale_kind::float32 && !is_integer_spec(s)) {
    bad_value(where, "scale_type " + std::string(to_string(s.scale_type)) +
                         " needs an integer spec, not " + spec_label(s));
  }
  if (s.calibration_method == calib_method::distribution) {
    const bool fp8 = s.name == spec_name::fp8_e4m3fn || s.name == spec_name::fp8_e4m3fnuz ||
                     s.name == spec_name::fp8_e5m2 || s.name == spec_name::fp8_e5m2fnuz;
    if (!fp8)
      bad_value(where, "the Distribution calibration method supports FP8 specs only");
  }
  if (s.is_block() || ref.is_block()) {
    if (s.block.method != ref.block.method) {
      bad_value(where, spec_label(s) + " uses block method " +
                           std::string(to_string(ref.block.method)) + ", not " +
                           std::string(to_string(s.block.method)));
    }
    if (s.quant_granularity != granularity::tensor) {
      bad_value(where,
                "block specs take their granularity from the block parameters; "
                "quant_granularity must be Tensor");
    }
    if (s.block.block_size <= 0)
      bad_value(where + ".block.block_size", "must be > 0");
    if (s.block.rounding_mode < 0 || s.block.rounding_mode > 2) {
      bad_value(where + ".block.rounding_mode", "must be 0, 1 or 2");
    }
    if (s.block.method == block_method::to_bfp || s.block.method == block_method::to_bfp_prime) {
      if (s.block.bit_width < 10 || s.block.bit_width > 16) {
        bad_value(where + ".block.bit_width",
                  "must be in 10..16 (1 sign + 8 exponent bits + "
                  "at least 1 mantissa bit)");
      }
    }
    if (s.block.method == block_method::to_bfp_prime) {
      if (s.block.sub_block_size <= 0 || s.block.block_size % s.block.sub_block_size != 0) {
        bad_value(where + ".block.sub_block_size", "must be > 0 and divide block_size");
      }
      if (s.block.sub_block_shift_bits < 1 || s.block.sub_block_shift_bits > 7) {
        bad_value(where + ".block.sub_block_shift_bits", "must be in 1..7");
      }
    }
  } else {
    if (s.axis && s.quant_granularity == granularity::tensor) {
      bad_value(where, "axis is only used with Channel or Group granularity or with block specs");
    }
  }
}

void check_layer(const layer_config& l, const std::string& where) {
  if (l.input_tensors)
    check_spec(*l.input_tensors, where + ".input_tensors", tensor_role::input);
  if (l.output_tensors) {
    check_spec(*l.output_tensors, where + ".output_tensors", tensor_role::output);
  }
  if (l.weight)
    check_spec(*l.weight, where + ".weight", tensor_role::weight);
  if (l.bias)
    check_spec(*l.bias, where + ".bias", tensor_role::bias);
}

void check_selector(const node_selector& s, const std::string& where) {
  if (s.kind() != selector_kind::subgraph && s.text().empty()) {
    bad_value(where, "empty node name");
  }
  if (s.kind() == selector_kind::subgraph &&
      (s.graph().start_nodes.empty() || s.graph().end_nodes.empty())) {
    bad_value(where, "a subgraph needs start and end nodes");
  }
}

bool flag(const option_map& eff, std::string_view key) {
  return eff.get<bool>(key);
}

bool explicit_flag(const option_map& o, std::string_view key, bool value) {
  const auto* v = o.find(key);
  return v != nullptr && v->is_bool() && v->as_bool() == value;
}

}  // namespace

/// use_dynamic_quant: what DynamicQuantizeLinear + MatMulInteger / ConvInteger can express
/// (quark-spec §7.1: dynamic quantization forces uint8 activations and the IntegerOps registry).
void validate_dynamic(const qconfig& c, const option_map& eff) {
  const auto& act = c.global_config.input_tensors;
  if (act && (act->dtype != dtype_id::uint8 || act->symmetric)) {
    conflict(
        "use_dynamic_quant: activations are quantized at run time by DynamicQuantizeLinear, "
        "which produces asymmetric uint8; global_config.input_tensors must be "
        "UInt8Spec(symmetric=false) or null");
  }
  const auto& w = c.global_config.weight;
  if (!w || (w->dtype != dtype_id::uint8 && w->dtype != dtype_id::int8) ||
      w->scale_type != scale_kind::float32 || w->quant_granularity == granularity::group) {
    conflict(
        "use_dynamic_quant: global_config.weight must be an Int8Spec or UInt8Spec with a "
        "Float32 scale, per tensor or per channel (MatMulInteger / ConvInteger)");
  }
  if (c.global_config.output_tensors || c.global_config.bias) {
    conflict(
        "use_dynamic_quant: global_config.output_tensors and bias must be null (the "
        "products come out of MatMulInteger / ConvInteger as float; a bias stays float)");
  }
  for (std::size_t i = 0; i < c.specific_layer_config.size(); ++i) {
    conflict("use_dynamic_quant: specific_layer_config[" + std::to_string(i) +
             "] is not supported with dynamic quantization (use exclude to keep nodes float)");
  }
  for (std::size_t i = 0; i < c.layer_type_config.size(); ++i) {
    if (c.layer_type_config[i].config) {
      conflict("use_dynamic_quant: layer_type_config[" + std::to_string(i) +
               "] sets a config; only null entries (keep these op types float) are supported");
    }
  }
  if (!c.algo_config.empty()) {
    conflict("use_dynamic_quant: algo_config[0] (" +
             std::string(to_string(c.algo_config.front().name)) +
             ") needs static quantization; dynamic quantization runs no algorithm");
  }
  for (const char* key : {"WeightsOnly", "EnableNPUCnn", "EnableNPUTransformer", "QuantizeFP16"}) {
    if (flag(eff, key))
      conflict(std::string("use_dynamic_quant: extra_options.") + key +
               " needs static quantization");
  }
}

/// UseMatMulNBits (seed 000 category 9): Quark then runs only its MatMulNBits weight-only
/// quantizer; what would go unused is refused, naming it (global_config's specs are reported as
/// unused by the quantizer instead: presets and Quark scripts set them as a matter of course).
void validate_matmul_nbits(const qconfig& c, const option_map& eff) {
  if (c.use_dynamic_quant) {
    conflict(
        "extra_options.UseMatMulNBits = true and use_dynamic_quant: choose one (MatMulNBits "
        "quantizes weights only; dynamic quantization rewrites MatMul into MatMulInteger)");
  }
  for (std::size_t i = 0; i < c.specific_layer_config.size(); ++i) {
    conflict("UseMatMulNBits: specific_layer_config[" + std::to_string(i) +
             "] has no effect on MatMulNBits quantization (use exclude to keep nodes float)");
  }
  for (std::size_t i = 0; i < c.layer_type_config.size(); ++i) {
    if (c.layer_type_config[i].config) {
      conflict("UseMatMulNBits: layer_type_config[" + std::to_string(i) +
               "] sets a config; only null entries (keep these op types float) are supported");
    }
  }
  if (!c.algo_config.empty()) {
    conflict("UseMatMulNBits: algo_config[0] (" +
             std::string(to_string(c.algo_config.front().name)) +
             ") does not apply; MatMulNBitsParams.Algorithm chooses the weight algorithm");
  }
  // (UseFP32Scale needs QuantizeFP16, which is refused here: Quark's "must be False".)
  for (const char* key : {"WeightsOnly", "EnableNPUCnn", "EnableNPUTransformer", "QuantizeFP16"}) {
    if (flag(eff, key)) {
      conflict(std::string("UseMatMulNBits: extra_options.") + key +
               " = true does not apply to MatMulNBits quantization");
    }
  }
}

void qconfig::validate() const {
  check_layer(global_config, "global_config");
  bool any_spec = global_config.input_tensors || global_config.weight ||
                  global_config.output_tensors || global_config.bias;
  for (std::size_t i = 0; i < specific_layer_config.size(); ++i) {
    const std::string where = "specific_layer_config[" + std::to_string(i) + "]";
    check_layer(specific_layer_config[i].config, where + ".config");
    if (specific_layer_config[i].layers.empty())
      bad_value(where + ".layers", "must not be empty");
    for (std::size_t j = 0; j < specific_layer_config[i].layers.size(); ++j) {
      check_selector(specific_layer_config[i].layers[j],
                     where + ".layers[" + std::to_string(j) + "]");
    }
    any_spec = true;
  }
  for (std::size_t i = 0; i < layer_type_config.size(); ++i) {
    const std::string where = "layer_type_config[" + std::to_string(i) + "]";
    if (layer_type_config[i].config) {
      check_layer(*layer_type_config[i].config, where + ".config");
      any_spec = true;
    }
    if (layer_type_config[i].op_types.empty()) {
      bad_value(where + ".op_types", "must not be empty");
    }
    for (const auto& t : layer_type_config[i].op_types) {
      if (t.empty())
        bad_value(where + ".op_types", "empty op type");
    }
  }
  for (std::size_t i = 0; i < exclude.size(); ++i) {
    check_selector(exclude[i], "exclude[" + std::to_string(i) + "]");
  }
  // UseMatMulNBits needs no spec: MatMulNBitsParams describes the weights.
  const option_value* nbits = extra_options.find("UseMatMulNBits");
  const bool use_nbits = nbits != nullptr && nbits->is_bool() && nbits->as_bool();
  if (!any_spec && !use_nbits) {
    bad_value("global_config", "no tensor spec is set anywhere: nothing would be quantized");
  }

  // algo_config: structure, duplicates, AdaRound xor AdaQuant (quark-spec §10.5).
  bool adaround = false;
  bool adaquant = false;
  for (std::size_t i = 0; i < algo_config.size(); ++i) {
    const std::string where = "algo_config[" + std::to_string(i) + "]";
    check_algo_params(algo_config[i].name, algo_config[i].params, where);
    for (std::size_t j = 0; j < i; ++j) {
      if (algo_config[j].name == algo_config[i].name) {
        conflict(where + ": algorithm " + std::string(to_string(algo_config[i].name)) +
                 " is listed twice");
      }
    }
    adaround = adaround || algo_config[i].name == algo_name::adaround;
    adaquant = adaquant || algo_config[i].name == algo_name::adaquant;
  }
  if (adaround && adaquant)
    conflict("algo_config: AdaRound and AdaQuant cannot both be used");

  const option_map& o = extra_options;
  const option_map eff = effective_options();
  const auto& act = global_config.input_tensors;
  const auto& w = global_config.weight;

  // §3.2: the new API writes ActivationSymmetric / WeightSymmetric from the specs.
  if (const auto* v = o.find("ActivationSymmetric"); v && act && v->as_bool() != act->symmetric) {
    conflict("extra_options.ActivationSymmetric = " + to_string(*v) +
             " contradicts global_config.input_tensors.symmetric = " +
             (act->symmetric ? "true" : "false") + " (set the spec's symmetric instead)");
  }
  if (const auto* v = o.find("WeightSymmetric"); v && w && v->as_bool() != w->symmetric) {
    conflict("extra_options.WeightSymmetric = " + to_string(*v) +
             " contradicts global_config.weight.symmetric = " + (w->symmetric ? "true" : "false") +
             " (set the spec's symmetric instead)");
  }

  // CryptoMode: nothing about the model may reach the disk besides the output model, so the
  // options that write side files are refused (docs/config.md).
  if (flag(eff, "CryptoMode")) {
    if (flag(eff, "SaveTensorHistFig")) {
      conflict(
          "CryptoMode forbids SaveTensorHistFig: it writes the tensors' histograms into "
          "tensor_hist/");
    }
    if (const auto* v = eff.find("SaveAndRestore"); v && !v->is_null()) {
      conflict("CryptoMode forbids SaveAndRestore: it writes the calibrated ranges to '" +
               v->as_string() + "'");
    }
  }

  if (flag(eff, "EnableNPUCnn") && flag(eff, "EnableNPUTransformer")) {
    conflict("EnableNPUCnn and EnableNPUTransformer cannot both be true");
  }

  // §1.4: the XINT8 / NPU-CNN quantizer's requirements.
  if (flag(eff, "EnableNPUCnn")) {
    const std::string flow = "the NPU-CNN (XINT8/VINT8) flow";
    if (!w || w->dtype != dtype_id::int8) {
      conflict(flow + " needs an int8 weight spec (global_config.weight)");
    }
    if (w->quant_granularity != granularity::tensor) {
      conflict(flow + " needs per-tensor weights; global_config.weight.quant_granularity is " +
               std::string(to_string(w->quant_granularity)));
    }
    auto per_channel_weight = [](const layer_config& l) {
      return l.weight && l.weight->quant_granularity != granularity::tensor;
    };
    for (std::size_t i = 0; i < specific_layer_config.size(); ++i) {
      if (per_channel_weight(specific_layer_config[i].config)) {
        conflict(flow + " needs per-tensor weights; specific_layer_config[" + std::to_string(i) +
                 "].config.weight is not per tensor");
      }
    }
    for (std::size_t i = 0; i < layer_type_config.size(); ++i) {
      if (layer_type_config[i].config && per_channel_weight(*layer_type_config[i].config)) {
        conflict(flow + " needs per-tensor weights; layer_type_config[" + std::to_string(i) +
                 "].config.weight is not per tensor");
      }
    }
    if (!w->symmetric || (act && !act->symmetric)) {
      conflict(flow + " needs symmetric input_tensors and weight specs");
    }
    if (w->scale_type == scale_kind::int16 || (act && act->scale_type == scale_kind::int16)) {
      conflict(flow + " uses power-of-two scales; scale_type Int16 is not allowed");
    }
    if (explicit_flag(o, "Int16Scale", true))
      conflict(flow + " does not allow Int16Scale");
    if (explicit_flag(o, "UsePowerOf2Scale", false)) {
      conflict(flow +
               " uses power-of-two scales (its NPU rules work on power-of-two positions); "
               "UsePowerOf2Scale = false is not allowed");
    }
    if (!eff.get<std::map<std::string, std::int64_t>>("QDQOpTypePerChannelSupportToAxis").empty()) {
      conflict(flow +
               " does not support per-channel quantization; "
               "QDQOpTypePerChannelSupportToAxis must be {}");
    }
    for (const auto& [tensor, list] : eff.get<tensor_quant_overrides>("TensorQuantOverrides")) {
      for (const auto& ov : list) {
        if (ov.reduce_range.value_or(false)) {
          conflict(flow + " forbids reduce_range (TensorQuantOverrides." + tensor + ")");
        }
      }
    }
  }

  // §6.1: bias options.
  const bool weight_float_or_block = w && (is_float_spec(*w) || w->is_block());
  const bool act_block = act && act->is_block();
  if (explicit_flag(o, "Int32Bias", true) && (weight_float_or_block || act_block)) {
    conflict(
        "Int32Bias = true needs integer weight and activation specs (bias quantization "
        "follows the weight for float and block types)");
  }
  if (explicit_flag(o, "Int16Bias", true) && explicit_flag(o, "Int32Bias", false)) {
    conflict(
        "Int16Bias = true goes through the int32 bias path; it contradicts Int32Bias = "
        "false");
  }
  if (global_config.bias) {
    if (explicit_flag(o, "QuantizeBias", false)) {
      conflict("global_config.bias is set but QuantizeBias is false");
    }
    if (explicit_flag(o, "Int16Bias", true)) {
      conflict("global_config.bias and Int16Bias = true both choose the bias type");
    }
    if (explicit_flag(o, "Int32Bias", true) && global_config.bias->dtype != dtype_id::int32) {
      conflict("Int32Bias = true contradicts global_config.bias = " +
               spec_label(*global_config.bias));
    }
  }

  // §2.3: Int16Scale replaces float scales of integer types by M * 2^-N.
  if (explicit_flag(o, "Int16Scale", true)) {
    for (const auto* s : {&act, &w}) {
      if (*s && (*s)->scale_type == scale_kind::power_of_2) {
        conflict("Int16Scale = true contradicts the PowerOf2 scale_type of " + spec_label(**s));
      }
    }
    if (!(act && is_integer_spec(*act)) && !(w && is_integer_spec(*w))) {
      conflict("Int16Scale = true needs an integer input_tensors or weight spec");
    }
  }
  // §2.4: UseFP32Scale only acts on float16 scales.
  if (explicit_flag(o, "UseFP32Scale", true) && !flag(eff, "QuantizeFP16")) {
    conflict("UseFP32Scale = true only applies with QuantizeFP16 = true");
  }
  // §1.5: "scaled" float types.
  if (explicit_flag(o, "ActivationScaled", true) && !(act && is_float_spec(*act))) {
    conflict(
        "ActivationScaled = true needs a floating-point input_tensors spec "
        "(BFloat16Spec, Float16Spec)");
  }
  if (explicit_flag(o, "WeightScaled", true) && !(w && is_float_spec(*w))) {
    conflict(
        "WeightScaled = true needs a floating-point weight spec (BFloat16Spec, "
        "Float16Spec)");
  }
  // §4.1 / seed: moving averages are not supported by the power-of-two methods.
  if (explicit_flag(o, "CalibMovingAverage", true) && act &&
      (act->scale_type == scale_kind::power_of_2 ||
       act->calibration_method == calib_method::min_mse)) {
    conflict(
        "CalibMovingAverage = true is not supported with power-of-two / MinMSE activation "
        "calibration");
  }
  if (explicit_flag(o, "CalibMovingAverage", true) && act &&
      act->calibration_method != calib_method::min_max) {
    conflict("CalibMovingAverage applies to MinMax calibration only; input_tensors uses " +
             std::string(to_string(act->calibration_method)));
  }
  // §4.0: LayerwisePercentile: optimize_disk and optimize_mem are mutually exclusive.
  if (act && act->calibration_method == calib_method::layerwise_percentile &&
      flag(eff, "CalibOptimizeDisk") && explicit_flag(o, "CalibOptimizeMem", true)) {
    conflict(
        "LayerwisePercentile: CalibOptimizeDisk and CalibOptimizeMem are mutually "
        "exclusive; set one of them to false");
  }
  if (eff.get<std::int64_t>("NumBins") == 0 && act &&
      act->calibration_method != calib_method::min_mse &&
      act->calibration_method != calib_method::min_max) {
    bad_value("extra_options.NumBins", "0 is only meaningful for MinMSE; " +
                                           std::string(to_string(act->calibration_method)) +
                                           " needs a positive bin count");
  }
  if (o.contains("EvalDataReader") && !o.find("EvalDataReader")->is_null() &&
      !flag(eff, "EvalMetrics")) {
    conflict("EvalDataReader is set but EvalMetrics is false");
  }
  // UseMatMulNBits first: its refusals name the real reason (no weight spec is expected).
  if (flag(eff, "UseMatMulNBits"))
    validate_matmul_nbits(*this, eff);
  else if (const auto* v = o.find("MatMulNBitsParams"); v && !v->is_null())
    conflict("extra_options.MatMulNBitsParams is set but UseMatMulNBits is false");
  if (flag(eff, "WeightsOnly") && !w) {
    bool layer_weight = false;
    for (const auto& r : specific_layer_config)
      layer_weight = layer_weight || r.config.weight;
    if (!layer_weight)
      conflict("WeightsOnly = true but no weight spec is set");
  }
  if (flag(eff, "UseRandomData") && o.contains("RandomDataReaderInputDataRange")) {
    // Ranges are validated per input when the model is known; nothing else to check here.
  }
  if (use_dynamic_quant)
    validate_dynamic(*this, eff);
  if (flag(eff, "EnableSubgraph") && !use_dynamic_quant) {
    conflict(
        "extra_options.EnableSubgraph = true needs use_dynamic_quant: Quark quantizes "
        "If / Loop / Scan bodies in dynamic mode only (static quantization covers the main "
        "graph)");
  }
}

// ---- effective options -----------------------------------------------------------------------

option_map qconfig::effective_options() const {
  option_map eff = extra_options;
  const auto& act = global_config.input_tensors;
  const auto& w = global_config.weight;
  auto put = [&](std::string_view key, option_value v) {
    if (!eff.contains(key))
      eff.set(key, std::move(v));
  };
  // Fixed defaults of implemented keys first, so the context rules below can read them.
  for (const auto& info : option_registry()) {
    if (info.support == option_support::implemented && info.default_rule == option_default::fixed) {
      put(info.name, info.default_value);
    }
  }
  put("EnableNPUCnn", act && w && act->name == spec_name::xint8 && w->name == spec_name::xint8);
  const bool npu_cnn = eff.get<bool>("EnableNPUCnn");
  put("ActivationSymmetric", act ? act->symmetric : false);
  put("WeightSymmetric", w ? w->symmetric : false);
  const bool w_float_or_block = w && (is_float_spec(*w) || w->is_block());
  const bool a_block = act && act->is_block();
  put("Int32Bias", !npu_cnn && !w_float_or_block && !a_block);
  put("AddQDQPairToWeight",
      w && (w->dtype == dtype_id::float16 || w->dtype == dtype_id::bfloat16 || w->is_block()));
  put("MatMulConstBOnly", use_dynamic_quant || eff.get<bool>("EnableNPUTransformer"));
  put("RefineBlockAxis", a_block || (w && w->is_block()));
  bool range_symmetric = false;
  if (act) {
    switch (act->calibration_method) {
      case calib_method::min_mse:
        // Power-of-two MinMSE needs a symmetric range (quark-spec §4.7); the float-scale search
        // (Float32 scale) follows the spec's symmetry, as the weights' float MinMSE does.
        range_symmetric = act->scale_type != scale_kind::float32 || act->symmetric;
        break;
      case calib_method::percentile:
      case calib_method::layerwise_percentile:
        range_symmetric = true;
        break;
      case calib_method::min_max:
        range_symmetric = act->scale_type == scale_kind::power_of_2;
        break;
      case calib_method::entropy:
      case calib_method::distribution:
        range_symmetric = false;
        break;
    }
  }
  put("CalibTensorRangeSymmetric", range_symmetric);
  put("NumBins",
      std::int64_t{act && act->calibration_method == calib_method::entropy ? 128 : 2048});
  put("CalibOptimizeMem", !(act && act->calibration_method == calib_method::layerwise_percentile));
  put("UseFP32Scale", eff.get<bool>("QuantizeFP16"));
  put("FoldBatchNorm", eff.get<bool>("OptimizeModel"));
  // quark-spec §9.1: these conversions default to true in the NPU-CNN and NPU-transformer flows
  // and in the extended QDQ format (activations or weights of a type other than int8 / uint8),
  // unless BF16QDQToCast or EnableVaimlBF16 is set.
  {
    auto int8_like = [](const std::optional<tensor_spec>& s) {
      return s && (s->dtype == dtype_id::int8 || s->dtype == dtype_id::uint8) && !s->is_block();
    };
    auto on = [&](const char* k) {
      const option_value* v = eff.find(k);
      return v != nullptr && v->is_bool() && v->as_bool();
    };
    const bool extended = (act || w) && !(int8_like(act) && int8_like(w));
    const bool convert = npu_cnn || on("EnableNPUTransformer") ||
                         (extended && !on("BF16QDQToCast") && !on("EnableVaimlBF16"));
    for (const char* k : {"ConvertBNToConv", "ConvertReduceMeanToGlobalAvgPool",
                          "SplitLargeKernelPool", "ConvertSplitToSlice"})
      put(k, convert);
  }
  // quark-spec §9.2: Quark's NPU-CNN quantizer turns these SimulateDPU conversions on unless the
  // key says otherwise; its other quantizers leave them off.
  for (const char* k : {"ConvertLeakyReluToDPUVersion", "ConvertSigmoidToHardSigmoid",
                        "ConvertHardSigmoidToDPUVersion", "ConvertAvgPoolToDPUVersion",
                        "ConvertReduceMeanToDPUVersion"})
    put(k, npu_cnn);
  // Seed 000: the Align* rules of NPULimitationCheck default to true with power-of-two scales.
  {
    const bool pof2 = act && act->scale_type == scale_kind::power_of_2 && !act->is_block();
    for (const char* k : {"AlignConcat", "AlignPool", "AlignPad", "AlignSlice"})
      put(k, pof2);
  }
  put("WeightCalibrateMethod",
      w && w->calibration_method == calib_method::min_mse ? "MinMSE" : "MinMax");
  return eff;
}

// ---- per-node resolution ---------------------------------------------------------------------

namespace {

bool selector_matches(const node_selector& s, const node_query& node) {
  if (s.kind() != selector_kind::subgraph)
    return s.matches_name(node.name);
  if (!node.in_subgraph) {
    throw config_error("quark.config.value",
                       "a subgraph selector needs node_query::in_subgraph (node \"" +
                           std::string(node.name) + "\")");
  }
  return node.in_subgraph(s.graph());
}

}  // namespace

node_plan plan_node(const qconfig& cfg, const node_query& node) {
  for (const auto& s : cfg.exclude) {
    if (selector_matches(s, node))
      return {node_decision::excluded, nullptr};
  }
  for (auto it = cfg.specific_layer_config.rbegin(); it != cfg.specific_layer_config.rend(); ++it) {
    for (const auto& s : it->layers) {
      if (selector_matches(s, node))
        return {node_decision::specific, &it->config};
    }
  }
  for (auto it = cfg.layer_type_config.rbegin(); it != cfg.layer_type_config.rend(); ++it) {
    for (const auto& t : it->op_types) {
      if (t == node.op_type) {
        if (!it->config)
          return {node_decision::excluded_by_op_type, nullptr};
        return {node_decision::by_op_type, &*it->config};
      }
    }
  }
  return {node_decision::global, &cfg.global_config};
}

std::optional<tensor_spec> effective_spec(const qconfig& cfg, const layer_config& layer,
                                          tensor_role role) {
  const layer_config& g = cfg.global_config;
  switch (role) {
    case tensor_role::input:
      return layer.input_tensors ? layer.input_tensors : g.input_tensors;
    case tensor_role::output:
      if (layer.output_tensors)
        return layer.output_tensors;
      if (g.output_tensors)
        return g.output_tensors;
      return layer.input_tensors ? layer.input_tensors : g.input_tensors;
    case tensor_role::weight:
      return layer.weight ? layer.weight : g.weight;
    case tensor_role::bias:
      return layer.bias ? layer.bias : g.bias;
  }
  return std::nullopt;
}

}  // namespace quark::onnx
