// SPDX-License-Identifier: MIT
// Presets: every field each preset sets, hand-checked against quark-spec.md §8.1 / §8.2 (line
// numbers below are lines of /work/shared/docs/quark-spec.md) and seed 000 / seed 002.
#include <algorithm>
#include <deque>
#include <string>

#include <doctest/doctest.h>

#include <quark/onnx/presets.hpp>

using namespace quark::onnx;

namespace {

struct expected_preset {
  std::string_view name;
  spec_name act;
  bool act_symmetric;
  calib_method act_calib;
  spec_name weight;
  bool weight_symmetric;
  calib_method weight_calib;
  std::vector<option_member> options;  // exactly the explicit extra_options, in order
  std::size_t algos;
};

option_member opt(const char* k, option_value v) {
  return option_member{k, std::move(v)};
}

}  // namespace

TEST_CASE("every preset's specs and extra options") {
  using sn = spec_name;
  using cm = calib_method;
  std::deque<std::string> names;  // stable storage for the variants' names
  std::vector<expected_preset> table = {
      // §8.1 line 910: XInt8Spec both; ForceQuantizeNoInputCheck True.
      {"XINT8",
       sn::xint8,
       true,
       cm::min_mse,
       sn::xint8,
       true,
       cm::min_mse,
       {opt("ForceQuantizeNoInputCheck", true)},
       0},
      // §8.1 line 911: + AdaRound / AdaQuant.
      {"XINT8_ADAROUND",
       sn::xint8,
       true,
       cm::min_mse,
       sn::xint8,
       true,
       cm::min_mse,
       {opt("ForceQuantizeNoInputCheck", true)},
       1},
      {"XINT8_ADAQUANT",
       sn::xint8,
       true,
       cm::min_mse,
       sn::xint8,
       true,
       cm::min_mse,
       {opt("ForceQuantizeNoInputCheck", true)},
       1},
      // §8.2 line 929 (VINT8, PowerOfTwoMethod.MinMSE, QInt8/QInt8 -> XInt8Spec), in its order;
      // ReplaceClip6Relu is omitted (it acts only with algo_config cle, which VINT8 leaves off).
      {"VINT8",
       sn::xint8,
       true,
       cm::min_mse,
       sn::xint8,
       true,
       cm::min_mse,
       {opt("OptimizeModel", false), opt("ActivationSymmetric", true), opt("UseRandomData", true),
        opt("ConvertBNToConv", true), opt("ConvertSigmoidToHardSigmoid", false),
        opt("ConvertClipToRelu", true), opt("ConvertSplitToSlice", true),
        opt("SplitLargeKernelPool", false), opt("ConvertReduceMeanToGlobalAvgPool", false),
        opt("RemoveQDQConvClip", false), opt("RemoveQDQConvPRelu", false),
        opt("RemoveQDQConvRelu", false), opt("RemoveQDQConvLeakyRelu", false),
        opt("Int32Bias", false), opt("DedicatedQDQPair", true), opt("QuantizeAllOpTypes", true)},
       0},
      // §8.1 line 912.
      {"A8W8",
       sn::int8,
       true,
       cm::percentile,
       sn::int8,
       true,
       cm::percentile,
       {opt("ForceQuantizeNoInputCheck", true), opt("AlignSlice", false), opt("FoldRelu", true),
        opt("AlignConcat", true)},
       0},
      // §8.1 line 913.
      {"A16W8",
       sn::int16,
       true,
       cm::percentile,
       sn::int8,
       true,
       cm::percentile,
       {opt("ForceQuantizeNoInputCheck", true), opt("AlignSlice", false), opt("FoldRelu", true),
        opt("AlignConcat", true), opt("AlignEltwiseQuantType", true)},
       0},
      // §8.2 line 930: QInt8/QInt8, activations asymmetric (AAWS, §3.2), Percentile 99.9999.
      {"S8S8_AAWS",
       sn::int8,
       false,
       cm::percentile,
       sn::int8,
       true,
       cm::percentile,
       {opt("Percentile", 99.9999), opt("ForceQuantizeNoInputCheck", true)},
       0},
      // §8.2 line 931.
      {"U8S8_AAWS",
       sn::uint8,
       false,
       cm::percentile,
       sn::int8,
       true,
       cm::percentile,
       {opt("ForceQuantizeNoInputCheck", true)},
       0},
      // §8.2 line 932.
      {"U8U8_AAWA",
       sn::uint8,
       false,
       cm::percentile,
       sn::uint8,
       false,
       cm::percentile,
       {opt("ActivationSymmetric", false), opt("WeightSymmetric", false),
        opt("ForceQuantizeNoInputCheck", true)},
       0},
      // §8.2 line 927: use_dynamic_quant, weight QUInt8 (asymmetric: WeightSymmetric defaults
      // to the weight type's signedness), activations forced to uint8; MinMax, the legacy
      // calibrate_method default.
      {"UINT8_DYNAMIC_QUANT", sn::uint8, false, cm::min_max, sn::uint8, false, cm::min_max, {}, 0},
      // §8.2 line 933.
      {"S16S8_ASWS",
       sn::int16,
       true,
       cm::percentile,
       sn::int8,
       true,
       cm::percentile,
       {opt("ActivationSymmetric", true), opt("ForceQuantizeNoInputCheck", true)},
       0},
      // §8.2 line 934.
      {"U16S8_AAWS",
       sn::uint16,
       false,
       cm::percentile,
       sn::int8,
       true,
       cm::percentile,
       {opt("ForceQuantizeNoInputCheck", true)},
       0},
      // §8.2 lines 948-951.
      {"INT8_CNN_DEFAULT",
       sn::uint8,
       false,
       cm::min_max,
       sn::int8,
       true,
       cm::min_max,
       {opt("ForceQuantizeNoInputCheck", true)},
       0},
      {"INT16_CNN_DEFAULT",
       sn::uint16,
       false,
       cm::min_max,
       sn::int16,
       true,
       cm::min_max,
       {opt("ForceQuantizeNoInputCheck", true)},
       0},
      {"INT8_TRANSFORMER_DEFAULT",
       sn::uint8,
       false,
       cm::min_max,
       sn::int8,
       true,
       cm::min_max,
       {opt("EnableNPUTransformer", true), opt("CalibMovingAverage", true)},
       0},
      {"INT16_TRANSFORMER_DEFAULT",
       sn::uint16,
       false,
       cm::min_max,
       sn::int16,
       true,
       cm::min_max,
       {opt("EnableNPUTransformer", true), opt("CalibMovingAverage", true)},
       0},
      // §8.2 lines 952-954: Percentile calibration, Percentile 99.9999, FastFinetune =
      // DEFAULT_ADAROUND_PARAMS (one adaround entry, checked below); the CNN ones with
      // ForceQuantizeNoInputCheck as the CNN defaults, the transformer ones with the NPU flow.
      {"INT8_CNN_ACCURATE",
       sn::uint8,
       false,
       cm::percentile,
       sn::int8,
       true,
       cm::percentile,
       {opt("Percentile", 99.9999), opt("ForceQuantizeNoInputCheck", true)},
       1},
      {"INT16_CNN_ACCURATE",
       sn::uint16,
       false,
       cm::percentile,
       sn::int16,
       true,
       cm::percentile,
       {opt("Percentile", 99.9999), opt("ForceQuantizeNoInputCheck", true)},
       1},
      {"INT8_TRANSFORMER_ACCURATE",
       sn::uint8,
       false,
       cm::percentile,
       sn::int8,
       true,
       cm::percentile,
       {opt("Percentile", 99.9999), opt("EnableNPUTransformer", true)},
       1},
      {"INT16_TRANSFORMER_ACCURATE",
       sn::uint16,
       false,
       cm::percentile,
       sn::int16,
       true,
       cm::percentile,
       {opt("Percentile", 99.9999), opt("EnableNPUTransformer", true)},
       1},
      // §8.2 line 942.
      {"S16S16_MIXED_S8S8",
       sn::int16,
       true,
       cm::percentile,
       sn::int16,
       true,
       cm::percentile,
       {opt("Percentile", 99.9999), opt("Int32Bias", false), opt("Int16Bias", false),
        opt("ForceQuantizeNoInputCheck", true)},
       1},
      // §8.1 line 914 + seed 000 line 189 (BF16_CONFIG sets QuantizeAllOpTypes True).
      {"BF16",
       sn::bfloat16,
       true,
       cm::min_max,
       sn::bfloat16,
       true,
       cm::min_max,
       {opt("ForceQuantizeNoInputCheck", true), opt("QuantizeAllOpTypes", true)},
       0},
      // §8.2 line 937.
      {"FP16",
       sn::float16,
       true,
       cm::min_max,
       sn::float16,
       true,
       cm::min_max,
       {opt("ForceQuantizeNoInputCheck", true)},
       0},
      // §8.1 lines 915-917, §8.2 lines 945-947.
      {"BFP16", sn::bfp16, true, cm::min_max, sn::bfp16, true, cm::min_max, {}, 0},
      {"BF16_BFP16", sn::bfloat16, true, cm::min_max, sn::bfp16, true, cm::min_max, {}, 0},
      {"BF16_MXINT8", sn::bfloat16, true, cm::min_max, sn::mxint8, true, cm::min_max, {}, 0},
      {"MX4", sn::mx4, true, cm::min_max, sn::mx4, true, cm::min_max, {}, 0},
      {"MX6", sn::mx6, true, cm::min_max, sn::mx6, true, cm::min_max, {}, 0},
      {"MX9", sn::mx9, true, cm::min_max, sn::mx9, true, cm::min_max, {}, 0},
      {"MX9_INT8", sn::mx9, true, cm::min_max, sn::int8, true, cm::min_max, {}, 0},
      {"MXFP8E5M2", sn::mxfp8_e5m2, true, cm::min_max, sn::mxfp8_e5m2, true, cm::min_max, {}, 0},
      {"MXFP8E4M3", sn::mxfp8_e4m3, true, cm::min_max, sn::mxfp8_e4m3, true, cm::min_max, {}, 0},
      {"MXFP6E3M2", sn::mxfp6_e3m2, true, cm::min_max, sn::mxfp6_e3m2, true, cm::min_max, {}, 0},
      {"MXFP6E2M3", sn::mxfp6_e2m3, true, cm::min_max, sn::mxfp6_e2m3, true, cm::min_max, {}, 0},
      {"MXFP4E2M1", sn::mxfp4_e2m1, true, cm::min_max, sn::mxfp4_e2m1, true, cm::min_max, {}, 0},
      {"MXINT8", sn::mxint8, true, cm::min_max, sn::mxint8, true, cm::min_max, {}, 0},
  };
  // §8.2 line 943-944 (Quark's BF16_MIXED_* configs): QBFloat16 both, MinMax; the options in
  // Quark's order; one auto_mixprecision entry (checked below), the _ADAQUANT ones also
  // DEFAULT_ADAQUANT_PARAMS.
  for (const char* name : {"BF16_MIXED_BFP16", "BF16_MIXED_BFP16_ADAQUANT", "BF16_MIXED_MXINT8",
                           "BF16_MIXED_MXINT8_ADAQUANT"}) {
    const bool mx = std::string_view(name).find("MXINT8") != std::string_view::npos;
    option_value attrs = option_value::object();
    if (mx) {
      attrs.set("element_dtype", "int8")
          .set("axis", 1)
          .set("block_size", 32)
          .set("rounding_mode", 2);
    } else {
      attrs.set("bfp_method", "to_bfp")
          .set("axis", 1)
          .set("bit_width", 16)
          .set("block_size", 8)
          .set("rounding_mode", 2);
    }
    table.push_back(
        {name,
         sn::bfloat16,
         true,
         cm::min_max,
         sn::bfloat16,
         true,
         cm::min_max,
         {opt("ActivationSymmetric", true), opt("QuantizeBias", false), opt("DedicateDQNode", true),
          opt("CalibDataSize", 1), opt(mx ? "MXAttributes" : "BFPAttributes", attrs)},
         std::string_view(name).ends_with("_ADAQUANT") ? 2u : 1u});
  }
  // Quark's DefaultConfigMapping: the four AAWS / ASWS presets with FastFinetune =
  // DEFAULT_ADAROUND_PARAMS / DEFAULT_ADAQUANT_PARAMS (one entry, checked below), otherwise the
  // base preset's fields.
  // Integer presets get both variants; the float and block ones AdaQuant only (AdaRound needs
  // integer weights).
  const std::pair<const char*, bool> variant_bases[] = {
      {"S8S8_AAWS", true},  {"U8S8_AAWS", true},  {"S16S8_ASWS", true}, {"U16S8_AAWS", true},
      {"A8W8", true},       {"A16W8", true},      {"FP16", false},      {"BF16", false},
      {"BFP16", false},     {"MX4", false},       {"MX6", false},       {"MX9", false},
      {"MXFP8E5M2", false}, {"MXFP8E4M3", false}, {"MXFP6E3M2", false}, {"MXFP6E2M3", false},
      {"MXFP4E2M1", false}, {"MXINT8", false}};
  auto entry_of = [&](const char* base) {
    const auto it = std::find_if(table.begin(), table.end(),
                                 [&](const expected_preset& e) { return e.name == base; });
    REQUIRE(it != table.end());
    return *it;  // a copy: push_back below moves the elements
  };
  for (const auto& [base, both] : variant_bases) {
    const expected_preset found = entry_of(base);
    for (const char* suffix : {"_ADAROUND", "_ADAQUANT"}) {
      if (!both && std::string_view(suffix) == "_ADAROUND")
        continue;
      expected_preset v = found;
      names.push_back(std::string(base) + suffix);
      v.name = names.back();
      v.algos = 1;
      table.push_back(v);
    }
  }
  // §8.2 XINT8 row: WEIGHTSONLY_ADAROUND adds WeightsOnly True and DEFAULT_ADAROUND_PARAMS.
  {
    expected_preset v = entry_of("XINT8");
    v.name = "XINT8_WEIGHTSONLY_ADAROUND";
    v.options.push_back(opt("WeightsOnly", true));
    v.algos = 1;
    table.push_back(v);
  }
  // MATMUL_NBITS sets no tensor spec: its own test case below.
  CHECK(table.size() + 1 == presets().size());
  for (const auto& e : table) {
    CAPTURE(e.name);
    REQUIRE(find_preset(e.name) != nullptr);
    const qconfig c = get_default_config(e.name);
    REQUIRE(c.global_config.input_tensors);
    REQUIRE(c.global_config.weight);
    CHECK(!c.global_config.output_tensors);
    CHECK(!c.global_config.bias);
    const auto& a = *c.global_config.input_tensors;
    const auto& w = *c.global_config.weight;
    CHECK(a.name == e.act);
    CHECK(a.symmetric == e.act_symmetric);
    CHECK(a.calibration_method == e.act_calib);
    CHECK(a.quant_granularity == granularity::tensor);
    CHECK(w.name == e.weight);
    CHECK(w.symmetric == e.weight_symmetric);
    CHECK(w.calibration_method == e.weight_calib);
    CHECK(w.quant_granularity == granularity::tensor);
    CHECK(c.extra_options.entries() == e.options);
    CHECK(c.algo_config.size() == e.algos);
    CHECK(c.specific_layer_config.empty());
    CHECK(c.layer_type_config.empty());
    CHECK(c.exclude.empty());
    CHECK(!c.use_external_data_format);
    CHECK(c.use_dynamic_quant == (e.name == "UINT8_DYNAMIC_QUANT"));
    CHECK_NOTHROW(c.validate());
  }
}

TEST_CASE("the legacy FastFinetune block of the ACCURATE and AAWS / ASWS fine-tuning presets") {
  // quark-spec §8 (lines 898-899): DEFAULT_ADAROUND_PARAMS = DataSize 1000, FixedSeed
  // 1705472343, BatchSize 2, NumIterations 1000, LearningRate 0.1, EarlyStop True;
  // DEFAULT_ADAQUANT_PARAMS the same with LearningRate 1e-5 and adaquant.
  for (const char* name : {"INT8_CNN_ACCURATE",
                           "INT16_CNN_ACCURATE",
                           "INT8_TRANSFORMER_ACCURATE",
                           "INT16_TRANSFORMER_ACCURATE",
                           "S8S8_AAWS_ADAROUND",
                           "S8S8_AAWS_ADAQUANT",
                           "U8S8_AAWS_ADAROUND",
                           "U8S8_AAWS_ADAQUANT",
                           "S16S8_ASWS_ADAROUND",
                           "S16S8_ASWS_ADAQUANT",
                           "U16S8_AAWS_ADAROUND",
                           "U16S8_AAWS_ADAQUANT",
                           "A8W8_ADAROUND",
                           "A8W8_ADAQUANT",
                           "A16W8_ADAROUND",
                           "A16W8_ADAQUANT",
                           "FP16_ADAQUANT",
                           "BF16_ADAQUANT",
                           "BFP16_ADAQUANT",
                           "MX6_ADAQUANT",
                           "MXFP4E2M1_ADAQUANT",
                           "MXINT8_ADAQUANT",
                           "XINT8_WEIGHTSONLY_ADAROUND"}) {
    CAPTURE(std::string(name));
    const qconfig c = get_default_config(name);
    REQUIRE(c.algo_config.size() == 1u);
    const algo_entry& a = c.algo_config[0];
    const bool quant = std::string_view(name).ends_with("_ADAQUANT");
    CHECK(a.name == (quant ? algo_name::adaquant : algo_name::adaround));
    const std::vector<option_member> want = {opt("data_size", 1000),
                                             opt("fixed_seed", 1705472343),
                                             opt("batch_size", 2),
                                             opt("num_iterations", 1000),
                                             opt("learning_rate", quant ? 1e-5 : 0.1),
                                             opt("early_stop", true)};
    CHECK(a.params.as_object() == want);
  }
  // The variants are their base preset plus the one entry.
  qconfig base = get_default_config("U16S8_AAWS");
  qconfig variant = get_default_config("U16S8_AAWS_ADAQUANT");
  variant.algo_config.clear();
  CHECK(variant == base);
}

TEST_CASE("derived options of the NPU presets") {
  // §1.4: both specs XInt8Spec -> EnableNPUCnn; seed 000 line 106: Int32Bias False with it.
  const auto x = get_default_config("XINT8").effective_options();
  CHECK(x.get<bool>("EnableNPUCnn"));
  CHECK(!x.get<bool>("Int32Bias"));
  CHECK(x.get<bool>("ActivationSymmetric"));
  CHECK(x.get<bool>("CalibTensorRangeSymmetric"));  // §3.6: PowerOfTwoMethod.MinMSE -> True
  const auto v = get_default_config("VINT8").effective_options();
  CHECK(v.get<bool>("EnableNPUCnn"));
  CHECK(v.get<bool>("DedicatedQDQPair"));
  CHECK(v.get<bool>("UseRandomData"));
  // §9.1: ConvertBNToConv, ConvertSplitToSlice, ConvertReduceMeanToGlobalAvgPool and
  // SplitLargeKernelPool default to True with enable_npu_cnn (VINT8 sets two of them False).
  for (const char* k : {"ConvertBNToConv", "ConvertSplitToSlice",
                        "ConvertReduceMeanToGlobalAvgPool", "SplitLargeKernelPool"}) {
    CAPTURE(k);
    CHECK(x.get<bool>(k));
  }
  CHECK(v.get<bool>("ConvertBNToConv"));
  CHECK(v.get<bool>("ConvertClipToRelu"));
  CHECK(v.get<bool>("ConvertSplitToSlice"));
  CHECK(!v.get<bool>("ConvertReduceMeanToGlobalAvgPool"));
  CHECK(!v.get<bool>("SplitLargeKernelPool"));
  CHECK(!x.get<bool>("ConvertClipToRelu"));  // seed 000: default False, presets set it
  // A8W8: int32 bias, not NPU, Percentile range symmetric (§3.6), 2048 bins (§4.0).
  const auto a = get_default_config("A8W8").effective_options();
  CHECK(!a.get<bool>("EnableNPUCnn"));
  CHECK(a.get<bool>("Int32Bias"));
  CHECK(a.get<bool>("CalibTensorRangeSymmetric"));
  CHECK(a.get<std::int64_t>("NumBins") == 2048);
  CHECK(!a.get<bool>("AddQDQPairToWeight"));
  CHECK(a.get<std::string>("WeightCalibrateMethod") == "MinMax");
  CHECK(!a.get<bool>("ConvertBNToConv"));  // int8 / int8: plain QDQ, no NPU flag
  CHECK(a.get<bool>("FoldRelu"));
  // A16W8: int16 activations use the extended QDQ format (quark-spec §7.1), so §9.1's
  // conversions default to True.
  CHECK(get_default_config("A16W8").effective_options().get<bool>("ConvertBNToConv"));
  // BF16: float weights -> Q/DQ pair kept on weights, no int32 bias (§6.1, §7.3).
  const auto b = get_default_config("BF16").effective_options();
  CHECK(b.get<bool>("AddQDQPairToWeight"));
  CHECK(!b.get<bool>("Int32Bias"));
  CHECK(!b.get<bool>("CalibTensorRangeSymmetric"));  // MinMax float -> False
  // MinMSE with a Float32 scale: the float search follows the spec's symmetry; with PowerOf2 the
  // range is symmetric (quark-spec §4.7).
  {
    auto c = get_default_config("U8S8");  // UInt8 asymmetric activations
    c.global_config.input_tensors->calibration_method = calib_method::min_mse;
    CHECK(!c.effective_options().get<bool>("CalibTensorRangeSymmetric"));
    c.global_config.input_tensors->symmetric = true;
    CHECK(c.effective_options().get<bool>("CalibTensorRangeSymmetric"));
    c.global_config.input_tensors->symmetric = false;
    c.global_config.input_tensors->scale_type = scale_kind::power_of_2;
    CHECK(c.effective_options().get<bool>("CalibTensorRangeSymmetric"));
  }
  // Transformer preset: MatMulConstBOnly follows EnableNPUTransformer (seed 000 line 115).
  CHECK(get_default_config("INT8_TRANSFORMER_DEFAULT")
            .effective_options()
            .get<bool>("MatMulConstBOnly"));
  // BFP16 keeps the op default rounding 0; BF16_BFP16 uses the legacy rounding 2 (§13 item 12).
  CHECK(get_default_config("BFP16").global_config.weight->block.rounding_mode == 0);
  CHECK(get_default_config("BF16_BFP16").global_config.weight->block.rounding_mode == 2);
}

TEST_CASE("omitted settings are listed on the preset") {
  const auto* v = find_preset("VINT8");
  REQUIRE(v);
  REQUIRE(v->omitted.size() == 1);
  CHECK(v->omitted[0].key == "ReplaceClip6Relu");
  CHECK(find_preset("A8W8")->omitted.empty());  // AlignConcat is implemented (session 37)
  // Setting a not-implemented option explicitly is a not_implemented error, never silently
  // ignored.
  auto c = get_default_config("A8W8");
  CHECK_THROWS_AS(c.extra_options.set("ConvertSoftmaxToDPUVersion", true), quark::not_implemented);
}

TEST_CASE("aliases and case") {
  CHECK(find_preset("S8S8")->name == "S8S8_AAWS");
  CHECK(find_preset("u8s8")->name == "U8S8_AAWS");
  CHECK(find_preset("S16S8")->name == "S16S8_ASWS");
  CHECK(find_preset("U16S8")->name == "U16S8_AAWS");
  CHECK(get_default_config("xint8") == get_default_config("XINT8"));
}

TEST_CASE("unknown and unsupported presets") {
  CHECK_THROWS_WITH_AS(get_default_config("INT7"),
                       doctest::Contains("quark.config.unknown_preset: unknown preset \"INT7\"; "
                                         "valid: XINT8, XINT8_ADAROUND"),
                       quark::config_error);
  CHECK_THROWS_WITH_AS(get_default_config("INT7"), doctest::Contains("S8S8_AAWS (S8S8)"),
                       quark::config_error);
  // Quark's weights-only AdaRound preset, under both of its names.
  CHECK(get_default_config("WEIGHTSONLY_ADAROUND") ==
        get_default_config("XINT8_WEIGHTSONLY_ADAROUND"));
}

TEST_CASE("the BF16_MIXED_* presets: auto mixed precision towards QBFP / QMX") {
  // Quark's configs: ActTargetQuantType = WeightTargetQuantType = QBFP / QMX, OutputIndex 0 and
  // DualQuantNodes True, except BF16_MIXED_BFP16_ADAQUANT, which leaves DualQuantNodes out; the
  // _ADAQUANT ones add FastFinetune = DEFAULT_ADAQUANT_PARAMS.
  for (const char* name : {"BF16_MIXED_BFP16", "BF16_MIXED_BFP16_ADAQUANT", "BF16_MIXED_MXINT8",
                           "BF16_MIXED_MXINT8_ADAQUANT"}) {
    CAPTURE(name);
    const std::string_view n(name);
    const qconfig c = get_default_config(name);
    REQUIRE(!c.algo_config.empty());
    const algo_entry& a = c.algo_config.front();
    CHECK(a.name == algo_name::auto_mixprecision);
    const char* type = n.find("MXINT8") != std::string_view::npos ? "QMX" : "QBFP";
    CHECK(algo_param(a, "act_target_quant_type").as_string() == type);
    CHECK(algo_param(a, "weight_target_quant_type").as_string() == type);
    CHECK(algo_param(a, "output_index").as_int() == 0);
    CHECK(algo_param(a, "dual_quant_nodes").as_bool() == (n != "BF16_MIXED_BFP16_ADAQUANT"));
    if (n.ends_with("_ADAQUANT")) {
      REQUIRE(c.algo_config.size() == 2);
      CHECK(c.algo_config[1].name == algo_name::adaquant);
      CHECK(algo_param(c.algo_config[1], "learning_rate").as_number() == 1e-5);
      CHECK(algo_param(c.algo_config[1], "num_iterations").as_int() == 1000);
    }
  }
}

TEST_CASE("MATMUL_NBITS: UseMatMulNBits with quark-spec §9's parameters, no tensor spec") {
  const qconfig c = get_default_config("MATMUL_NBITS");
  CHECK_NOTHROW(c.validate());
  CHECK(!c.global_config.input_tensors);
  CHECK(!c.global_config.weight);
  CHECK(c.extra_options.get<bool>("UseMatMulNBits"));
  const auto* p = c.extra_options.find("MatMulNBitsParams");
  REQUIRE(p != nullptr);
  CHECK(p->find("GroupSize")->as_int() == 128);
  CHECK(p->find("Symmetric")->as_bool());
  CHECK(p->find("Bits")->as_int() == 4);
  CHECK(p->find("AccuracyLevel")->as_int() == 1);
}
