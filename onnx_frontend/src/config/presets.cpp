// SPDX-License-Identifier: MIT
// Presets by name (quark-spec §8.1 new-API QConfig presets; §8.2 legacy presets for the names
// only the legacy API has, expressed with tensor specs). docs/config.md documents every field.
#include <cctype>
#include <string>
#include <vector>

#include <quark/onnx/presets.hpp>

namespace quark::onnx {

namespace {

constexpr std::string_view clip6_reason =
    "acts only together with algo_config cle, which Quark's legacy API runs by default "
    "(include_cle) and quark-cpp's presets do not; set both explicitly to follow Quark (it turns "
    "the Clip(0, 6) of a hardswish into Relu)";

std::vector<preset_info> build_presets() {
  std::vector<preset_info> p;
  p.push_back({"XINT8",
               {},
               "INT8 for the NPU: XInt8Spec activations and weights (symmetric, "
               "power-of-two scales, MinMSE), NPU-CNN flow",
               {}});
  p.push_back({"XINT8_ADAROUND", {}, "XINT8 plus AdaRound fine-tuning", {}});
  p.push_back({"XINT8_ADAQUANT", {}, "XINT8 plus AdaQuant fine-tuning", {}});
  p.push_back({"VINT8",
               {},
               "Vitis AI INT8: XInt8Spec activations and weights with the Vitis AI extra options",
               {{"ReplaceClip6Relu", true, clip6_reason}}});
  p.push_back(
      {"A8W8", {}, "Int8Spec activations and weights (symmetric, float scales, Percentile)", {}});
  p.push_back({"A16W8", {}, "Int16Spec activations, Int8Spec weights", {}});
  p.push_back({"S8S8_AAWS",
               {"S8S8"},
               "int8 asymmetric activations, int8 symmetric weights, Percentile 99.9999",
               {}});
  p.push_back({"U8S8_AAWS",
               {"U8S8"},
               "uint8 asymmetric activations, int8 symmetric weights, Percentile",
               {}});
  p.push_back({"U8U8_AAWA", {"U8U8"}, "uint8 asymmetric activations and weights, Percentile", {}});
  p.push_back({"S16S8_ASWS",
               {"S16S8"},
               "int16 symmetric activations, int8 symmetric weights, Percentile",
               {}});
  p.push_back({"U16S8_AAWS",
               {"U16S8"},
               "uint16 asymmetric activations, int8 symmetric weights, Percentile",
               {}});
  p.push_back({"INT8_CNN_DEFAULT", {}, "uint8 activations, int8 weights, MinMax", {}});
  p.push_back({"INT16_CNN_DEFAULT", {}, "uint16 activations, int16 weights, MinMax", {}});
  p.push_back({"INT8_TRANSFORMER_DEFAULT",
               {},
               "uint8 activations, int8 weights, MinMax with moving average, NPU transformer "
               "flow (Gemm/MatMul only)",
               {}});
  p.push_back({"INT16_TRANSFORMER_DEFAULT",
               {},
               "uint16 activations, int16 weights, MinMax with moving average, NPU transformer "
               "flow",
               {}});
  p.push_back({"UINT8_DYNAMIC_QUANT",
               {},
               "dynamic quantization: MatMul / Conv weights stored as uint8 (asymmetric, per "
               "tensor), activations quantized to uint8 at run time (DynamicQuantizeLinear, "
               "MatMulInteger, ConvInteger); no calibration data",
               {}});
  p.push_back({"MATMUL_NBITS",
               {},
               "weight-only: the constant B of every MatMul stored as 4-bit symmetric blocks "
               "of 128 along K in com.microsoft MatMulNBits nodes (accuracy_level 1); "
               "activations stay float; no calibration data",
               {}});
  p.push_back({"INT8_CNN_ACCURATE",
               {},
               "uint8 activations, int8 weights, Percentile 99.9999, AdaRound (Quark's "
               "DEFAULT_ADAROUND_PARAMS)",
               {}});
  p.push_back({"INT16_CNN_ACCURATE",
               {},
               "uint16 activations, int16 weights, Percentile 99.9999, AdaRound",
               {}});
  p.push_back({"INT8_TRANSFORMER_ACCURATE",
               {},
               "uint8 activations, int8 weights, Percentile 99.9999, AdaRound, NPU transformer "
               "flow",
               {}});
  p.push_back({"INT16_TRANSFORMER_ACCURATE",
               {},
               "uint16 activations, int16 weights, Percentile 99.9999, AdaRound, NPU "
               "transformer flow",
               {}});
  // The legacy fine-tuning variants of the four AAWS / ASWS presets.
  p.push_back({"S8S8_AAWS_ADAROUND", {}, "S8S8_AAWS plus AdaRound", {}});
  p.push_back({"S8S8_AAWS_ADAQUANT", {}, "S8S8_AAWS plus AdaQuant", {}});
  p.push_back({"U8S8_AAWS_ADAROUND", {}, "U8S8_AAWS plus AdaRound", {}});
  p.push_back({"U8S8_AAWS_ADAQUANT", {}, "U8S8_AAWS plus AdaQuant", {}});
  p.push_back({"S16S8_ASWS_ADAROUND", {}, "S16S8_ASWS plus AdaRound", {}});
  p.push_back({"S16S8_ASWS_ADAQUANT", {}, "S16S8_ASWS plus AdaQuant", {}});
  p.push_back({"U16S8_AAWS_ADAROUND", {}, "U16S8_AAWS plus AdaRound", {}});
  p.push_back({"U16S8_AAWS_ADAQUANT", {}, "U16S8_AAWS plus AdaQuant", {}});
  p.push_back({"S16S16_MIXED_S8S8",
               {},
               "int16 activations and weights with auto mixed precision towards int8",
               {}});
  p.push_back({"BF16", {}, "bfloat16 activations and weights (a cast; no calibration needed)", {}});
  p.push_back({"FP16", {}, "float16 activations and weights", {}});
  p.push_back({"BFP16", {}, "BFP16 block floating point (block 8) activations and weights", {}});
  p.push_back({"BF16_BFP16", {}, "bfloat16 activations, BFP16 weights", {}});
  p.push_back({"BF16_MXINT8", {}, "bfloat16 activations, MXINT8 weights", {}});
  p.push_back({"MX4", {}, "MX4 (shared micro-exponents, 11-bit BFP) activations and weights", {}});
  p.push_back({"MX6", {}, "MX6 (13-bit BFP) activations and weights", {}});
  p.push_back({"MX9", {}, "MX9 (16-bit BFP) activations and weights", {}});
  p.push_back({"MX9_INT8", {}, "MX9 activations, int8 weights", {}});
  p.push_back({"MXFP8E5M2", {}, "OCP MXFP8 E5M2 activations and weights", {}});
  p.push_back({"MXFP8E4M3", {}, "OCP MXFP8 E4M3 activations and weights", {}});
  p.push_back({"MXFP6E3M2", {}, "OCP MXFP6 E3M2 activations and weights", {}});
  p.push_back({"MXFP6E2M3", {}, "OCP MXFP6 E2M3 activations and weights", {}});
  p.push_back({"MXFP4E2M1", {}, "OCP MXFP4 E2M1 activations and weights", {}});
  p.push_back({"MXINT8", {}, "OCP MXINT8 activations and weights", {}});
  // Quark's fine-tuning variants of A8W8 / A16W8 (DEFAULT_ADAROUND / ADAQUANT_PARAMS) and the
  // AdaQuant variants of the float and block presets (AdaQuant through the format's fake
  // quantizer; AdaRound needs integer weights).
  p.push_back({"A8W8_ADAROUND", {}, "A8W8 plus AdaRound", {}});
  p.push_back({"A8W8_ADAQUANT", {}, "A8W8 plus AdaQuant", {}});
  p.push_back({"A16W8_ADAROUND", {}, "A16W8 plus AdaRound", {}});
  p.push_back({"A16W8_ADAQUANT", {}, "A16W8 plus AdaQuant", {}});
  p.push_back({"FP16_ADAQUANT", {}, "FP16 plus AdaQuant", {}});
  p.push_back({"BF16_ADAQUANT", {}, "BF16 plus AdaQuant", {}});
  p.push_back({"BFP16_ADAQUANT", {}, "BFP16 plus AdaQuant", {}});
  p.push_back({"MX4_ADAQUANT", {}, "MX4 plus AdaQuant", {}});
  p.push_back({"MX6_ADAQUANT", {}, "MX6 plus AdaQuant", {}});
  p.push_back({"MX9_ADAQUANT", {}, "MX9 plus AdaQuant", {}});
  p.push_back({"MXFP8E5M2_ADAQUANT", {}, "MXFP8E5M2 plus AdaQuant", {}});
  p.push_back({"MXFP8E4M3_ADAQUANT", {}, "MXFP8E4M3 plus AdaQuant", {}});
  p.push_back({"MXFP6E3M2_ADAQUANT", {}, "MXFP6E3M2 plus AdaQuant", {}});
  p.push_back({"MXFP6E2M3_ADAQUANT", {}, "MXFP6E2M3 plus AdaQuant", {}});
  p.push_back({"MXFP4E2M1_ADAQUANT", {}, "MXFP4E2M1 plus AdaQuant", {}});
  p.push_back({"MXINT8_ADAQUANT", {}, "MXINT8 plus AdaQuant", {}});
  p.push_back({"BF16_MIXED_BFP16",
               {},
               "bfloat16 Q/DQ everywhere, BFP16 mixed into every Conv / ConvTranspose / Gemm / "
               "MatMul (after the activation's pair; weights BFP16 only)",
               {}});
  p.push_back({"BF16_MIXED_BFP16_ADAQUANT",
               {},
               "BF16_MIXED_BFP16 with BFP16 instead of the activation pairs, plus AdaQuant",
               {}});
  p.push_back({"BF16_MIXED_MXINT8", {}, "BF16_MIXED_BFP16 with MXINT8 instead of BFP16", {}});
  p.push_back({"BF16_MIXED_MXINT8_ADAQUANT", {}, "BF16_MIXED_MXINT8 plus AdaQuant", {}});
  p.push_back({"XINT8_WEIGHTSONLY_ADAROUND",
               {"WEIGHTSONLY_ADAROUND"},
               "XINT8 weights only (activations stay float) plus AdaRound",
               {}});
  return p;
}

std::string upper(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

tensor_spec with_calib(tensor_spec s, calib_method m) {
  s.calibration_method = m;
  return s;
}

tensor_spec asymmetric(tensor_spec s) {
  s.symmetric = false;
  return s;
}

qconfig two_specs(tensor_spec act, tensor_spec weight) {
  qconfig c;
  c.global_config = layer_config{
      .input_tensors = act, .output_tensors = std::nullopt, .weight = weight, .bias = std::nullopt};
  return c;
}

/// Quark's DEFAULT_ADAROUND_PARAMS / DEFAULT_ADAQUANT_PARAMS (quark-spec §8): the legacy
/// FastFinetune block of the *_ACCURATE presets and the legacy _ADAROUND / _ADAQUANT variants.
/// (XINT8_ADAROUND / _ADAQUANT are new-API presets with their own two parameters.)
algo_entry legacy_fast_finetune(algo_name n) {
  algo_entry a{n, option_value::object()};
  a.params.set("data_size", 1000);
  a.params.set("fixed_seed", 1705472343);
  a.params.set("batch_size", 2);
  a.params.set("num_iterations", 1000);
  a.params.set("learning_rate", n == algo_name::adaround ? 0.1 : 1e-5);
  a.params.set("early_stop", true);
  return a;
}

qconfig build(std::string_view name) {
  const auto i8 = int8_spec();
  if (!name.starts_with("XINT8") && !name.starts_with("BF16_MIXED_") &&
      (name.ends_with("_ADAROUND") || name.ends_with("_ADAQUANT"))) {
    // S8S8_AAWS_ADAROUND, ...: the base preset plus the legacy fine-tuning block.
    qconfig c = build(name.substr(0, name.size() - std::string_view("_ADAROUND").size()));
    c.algo_config.push_back(legacy_fast_finetune(
        name.ends_with("_ADAROUND") ? algo_name::adaround : algo_name::adaquant));
    return c;
  }
  if (name.starts_with("BF16_MIXED_")) {
    // §8.2 (Quark's BF16_MIXED_* configs): bfloat16 activations and weights, MinMax, symmetric
    // activations, no bias quantization, DedicateDQNode, one calibration sample, and auto mixed
    // precision towards QBFP (DEFAULT_BFP_PARAMS) or QMX (DEFAULT_MICROSCALING_PARAMS) with
    // dual quant nodes, which BF16_MIXED_BFP16_ADAQUANT alone leaves out.
    const bool mx = name.find("MXINT8") != std::string_view::npos;
    const bool adaquant = name.ends_with("_ADAQUANT");
    qconfig c = two_specs(with_calib(bfloat16_spec(), calib_method::min_max),
                          with_calib(bfloat16_spec(), calib_method::min_max));
    auto& o = c.extra_options;
    o.set("ActivationSymmetric", true);
    o.set("QuantizeBias", false);
    o.set("DedicateDQNode", true);
    o.set("CalibDataSize", 1);
    option_value attrs = option_value::object();
    if (mx) {
      attrs.set("element_dtype", "int8");
      attrs.set("axis", 1);
      attrs.set("block_size", 32);
      attrs.set("rounding_mode", 2);
      o.set("MXAttributes", attrs);
    } else {
      attrs.set("bfp_method", "to_bfp");
      attrs.set("axis", 1);
      attrs.set("bit_width", 16);
      attrs.set("block_size", 8);
      attrs.set("rounding_mode", 2);
      o.set("BFPAttributes", attrs);
    }
    algo_entry a{algo_name::auto_mixprecision, option_value::object()};
    a.params.set("act_target_quant_type", mx ? "QMX" : "QBFP");
    a.params.set("weight_target_quant_type", mx ? "QMX" : "QBFP");
    a.params.set("dual_quant_nodes", !(adaquant && !mx));
    a.params.set("output_index", 0);
    c.algo_config.push_back(a);
    if (adaquant)
      c.algo_config.push_back(legacy_fast_finetune(algo_name::adaquant));
    return c;
  }
  if (name.ends_with("_ACCURATE")) {
    // §8.2: Percentile calibration, QUInt8 / QInt8 (QUInt16 / QInt16), Percentile 99.9999,
    // FastFinetune = DEFAULT_ADAROUND_PARAMS; the CNN ones with ForceQuantizeNoInputCheck
    // (as the CNN defaults), the transformer ones with the NPU transformer flow.
    const bool wide = name.starts_with("INT16");
    qconfig c = two_specs(wide ? uint16_spec() : uint8_spec(), wide ? int16_spec() : i8);
    c.extra_options.set("Percentile", 99.9999);
    if (name.find("TRANSFORMER") != std::string_view::npos)
      c.extra_options.set("EnableNPUTransformer", true);
    else
      c.extra_options.set("ForceQuantizeNoInputCheck", true);
    c.algo_config.push_back(legacy_fast_finetune(algo_name::adaround));
    return c;
  }
  if (name == "XINT8_WEIGHTSONLY_ADAROUND") {
    // §8.2: XINT8 with WeightsOnly and FastFinetune = DEFAULT_ADAROUND_PARAMS.
    qconfig c = build("XINT8");
    c.extra_options.set("WeightsOnly", true);
    c.algo_config.push_back(legacy_fast_finetune(algo_name::adaround));
    return c;
  }
  if (name == "XINT8" || name == "XINT8_ADAROUND" || name == "XINT8_ADAQUANT") {
    // §8.1: XInt8Spec both; ForceQuantizeNoInputCheck; EnableNPUCnn is derived from the specs.
    qconfig c = two_specs(xint8_spec(), xint8_spec());
    c.extra_options.set("ForceQuantizeNoInputCheck", true);
    if (name == "XINT8_ADAROUND") {
      algo_entry a{algo_name::adaround, option_value::object()};
      a.params.set("learning_rate", 0.1);
      a.params.set("num_iterations", 1000);
      c.algo_config.push_back(a);
    } else if (name == "XINT8_ADAQUANT") {
      algo_entry a{algo_name::adaquant, option_value::object()};
      a.params.set("learning_rate", 1e-5);
      a.params.set("num_iterations", 3000);
      c.algo_config.push_back(a);
    }
    return c;
  }
  if (name == "VINT8") {
    // §8.2 VINT8 row: PowerOfTwoMethod.MinMSE, QInt8/QInt8, ActivationSymmetric True -> XInt8Spec.
    qconfig c = two_specs(xint8_spec(), xint8_spec());
    auto& o = c.extra_options;
    o.set("OptimizeModel", false);
    o.set("ActivationSymmetric", true);
    o.set("UseRandomData", true);
    o.set("ConvertBNToConv", true);
    o.set("ConvertSigmoidToHardSigmoid", false);
    o.set("ConvertClipToRelu", true);
    o.set("ConvertSplitToSlice", true);
    o.set("SplitLargeKernelPool", false);
    o.set("ConvertReduceMeanToGlobalAvgPool", false);
    o.set("RemoveQDQConvClip", false);
    o.set("RemoveQDQConvPRelu", false);
    o.set("RemoveQDQConvRelu", false);
    o.set("RemoveQDQConvLeakyRelu", false);
    o.set("Int32Bias", false);
    o.set("DedicatedQDQPair", true);
    o.set("QuantizeAllOpTypes", true);
    return c;
  }
  if (name == "A8W8" || name == "A16W8") {
    // §8.1: Int8Spec (or Int16Spec) activations, Int8Spec weights.
    qconfig c = two_specs(name == "A8W8" ? i8 : int16_spec(), i8);
    auto& o = c.extra_options;
    o.set("ForceQuantizeNoInputCheck", true);
    o.set("AlignSlice", false);
    o.set("FoldRelu", true);
    o.set("AlignConcat", true);
    if (name == "A16W8")
      o.set("AlignEltwiseQuantType", true);
    return c;
  }
  if (name == "S8S8_AAWS") {
    qconfig c = two_specs(asymmetric(i8), i8);
    c.extra_options.set("Percentile", 99.9999);
    c.extra_options.set("ForceQuantizeNoInputCheck", true);
    return c;
  }
  if (name == "U8S8_AAWS" || name == "U16S8_AAWS") {
    qconfig c = two_specs(name == "U8S8_AAWS" ? uint8_spec() : uint16_spec(), i8);
    c.extra_options.set("ForceQuantizeNoInputCheck", true);
    return c;
  }
  if (name == "UINT8_DYNAMIC_QUANT") {
    // Legacy: use_dynamic_quant True, weight QUInt8 (asymmetric, per tensor, MinMax); the
    // activation type is forced to uint8 (DynamicQuantizeLinear).
    qconfig c = two_specs(with_calib(uint8_spec(), calib_method::min_max),
                          with_calib(uint8_spec(), calib_method::min_max));
    c.use_dynamic_quant = true;
    return c;
  }
  if (name == "MATMUL_NBITS") {
    // No tensor spec: UseMatMulNBits quantizes MatMul weights only (quark-spec §9, §10.7).
    qconfig c;
    c.global_config = layer_config{};
    c.extra_options.set("UseMatMulNBits", true);
    option_value params = option_value::object();
    params.set("GroupSize", std::int64_t{128});
    params.set("Symmetric", true);
    params.set("Bits", std::int64_t{4});
    params.set("AccuracyLevel", std::int64_t{1});
    c.extra_options.set("MatMulNBitsParams", std::move(params));
    return c;
  }
  if (name == "U8U8_AAWA") {
    qconfig c = two_specs(uint8_spec(), uint8_spec());
    c.extra_options.set("ActivationSymmetric", false);
    c.extra_options.set("WeightSymmetric", false);
    c.extra_options.set("ForceQuantizeNoInputCheck", true);
    return c;
  }
  if (name == "S16S8_ASWS") {
    qconfig c = two_specs(int16_spec(), i8);
    c.extra_options.set("ActivationSymmetric", true);
    c.extra_options.set("ForceQuantizeNoInputCheck", true);
    return c;
  }
  if (name == "INT8_CNN_DEFAULT" || name == "INT16_CNN_DEFAULT" ||
      name == "INT8_TRANSFORMER_DEFAULT" || name == "INT16_TRANSFORMER_DEFAULT") {
    const bool wide = name.starts_with("INT16");
    qconfig c = two_specs(with_calib(wide ? uint16_spec() : uint8_spec(), calib_method::min_max),
                          with_calib(wide ? int16_spec() : i8, calib_method::min_max));
    if (name.find("TRANSFORMER") != std::string_view::npos) {
      c.extra_options.set("EnableNPUTransformer", true);
      c.extra_options.set("CalibMovingAverage", true);
    } else {
      c.extra_options.set("ForceQuantizeNoInputCheck", true);
    }
    return c;
  }
  if (name == "S16S16_MIXED_S8S8") {
    qconfig c = two_specs(int16_spec(), int16_spec());
    auto& o = c.extra_options;
    o.set("Percentile", 99.9999);
    o.set("Int32Bias", false);
    o.set("Int16Bias", false);
    o.set("ForceQuantizeNoInputCheck", true);
    algo_entry a{algo_name::auto_mixprecision, option_value::object()};
    a.params.set("act_target_quant_type", "QInt8");
    a.params.set("weight_target_quant_type", "QInt8");
    a.params.set("output_index", 0);
    c.algo_config.push_back(a);
    return c;
  }
  if (name == "BF16") {
    // §8.1 plus seed 000 (QuantizeAllOpTypes: "BF16_CONFIG ... set this to True explicitly").
    qconfig c = two_specs(bfloat16_spec(), bfloat16_spec());
    c.extra_options.set("ForceQuantizeNoInputCheck", true);
    c.extra_options.set("QuantizeAllOpTypes", true);
    return c;
  }
  if (name == "FP16") {
    qconfig c = two_specs(float16_spec(), float16_spec());
    c.extra_options.set("ForceQuantizeNoInputCheck", true);
    return c;
  }
  if (name == "BF16_BFP16" || name == "BF16_MXINT8") {
    tensor_spec w = name == "BF16_BFP16" ? bfp16_spec() : make_spec(spec_name::mxint8);
    if (name == "BF16_BFP16")
      w.block.rounding_mode = 2;  // legacy DEFAULT_BFP_PARAMS
    return two_specs(bfloat16_spec(), w);
  }
  if (name == "MX9_INT8")
    return two_specs(make_spec(spec_name::mx9), with_calib(i8, calib_method::min_max));
  // Block formats with the same spec for activations and weights.
  const std::pair<std::string_view, spec_name> same[] = {{"BFP16", spec_name::bfp16},
                                                         {"MX4", spec_name::mx4},
                                                         {"MX6", spec_name::mx6},
                                                         {"MX9", spec_name::mx9},
                                                         {"MXFP8E5M2", spec_name::mxfp8_e5m2},
                                                         {"MXFP8E4M3", spec_name::mxfp8_e4m3},
                                                         {"MXFP6E3M2", spec_name::mxfp6_e3m2},
                                                         {"MXFP6E2M3", spec_name::mxfp6_e2m3},
                                                         {"MXFP4E2M1", spec_name::mxfp4_e2m1},
                                                         {"MXINT8", spec_name::mxint8}};
  for (const auto& [n, s] : same) {
    if (n == name)
      return two_specs(make_spec(s), make_spec(s));
  }
  return qconfig{};
}

}  // namespace

std::span<const preset_info> presets() {
  static const std::vector<preset_info> p = build_presets();
  return p;
}

const preset_info* find_preset(std::string_view name) {
  const std::string u = upper(name);
  for (const auto& p : presets()) {
    if (p.name == u)
      return &p;
    for (auto a : p.aliases) {
      if (a == u)
        return &p;
    }
  }
  return nullptr;
}

qconfig get_default_config(std::string_view name) {
  const preset_info* p = find_preset(name);
  if (p == nullptr) {
    std::string names;
    for (const auto& q : presets()) {
      if (!names.empty())
        names += ", ";
      names += q.name;
      for (auto a : q.aliases)
        names += " (" + std::string(a) + ")";
    }
    throw config_error("quark.config.unknown_preset",
                       "unknown preset \"" + std::string(name) + "\"; valid: " + names);
  }
  return build(p->name);
}

}  // namespace quark::onnx
