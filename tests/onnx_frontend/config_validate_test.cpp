// SPDX-License-Identifier: MIT
// qconfig::validate (quark-spec §1.4, §3.2, §4.0, §5.2, §6, seed 000 constraints),
// effective_options and per-node resolution.
#include <doctest/doctest.h>

#include <quark/onnx/presets.hpp>

using namespace quark::onnx;

namespace {

std::string validate_error(const qconfig& c) {
  try {
    c.validate();
  } catch (const quark::error& e) {
    return e.what();
  }
  return "(no error)";
}

bool has(const std::string& s, std::string_view part) {
  return s.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("the default QConfig is Quark's: Int8Spec activations and weights") {
  const qconfig c;
  REQUIRE(c.global_config.input_tensors);
  CHECK(c.global_config.input_tensors->name == spec_name::int8);
  CHECK(c.global_config.weight->name == spec_name::int8);
  CHECK(!c.global_config.output_tensors);
  CHECK(!c.global_config.bias);
  CHECK(!c.use_external_data_format);
  CHECK(c.extra_options.empty());
  CHECK_NOTHROW(c.validate());
}

TEST_CASE("XINT8 constraints (quark-spec §1.4)") {
  qconfig c = get_default_config("XINT8");
  c.global_config.weight->quant_granularity = granularity::channel;
  auto msg = validate_error(c);
  CHECK(has(msg, "quark.config.conflict: the NPU-CNN (XINT8/VINT8) flow needs per-tensor weights"));

  c = get_default_config("XINT8");
  tensor_spec pc = xint8_spec();
  pc.quant_granularity = granularity::channel;
  c.layer_type_config.push_back({layer_config{.input_tensors = std::nullopt,
                                              .output_tensors = std::nullopt,
                                              .weight = pc,
                                              .bias = std::nullopt},
                                 {"Conv"}});
  CHECK(has(validate_error(c), "layer_type_config[0].config.weight is not per tensor"));

  c = get_default_config("XINT8");
  c.global_config.input_tensors->symmetric = false;
  CHECK(has(validate_error(c), "needs symmetric input_tensors and weight specs"));

  c = get_default_config("XINT8");
  c.extra_options.set("QDQOpTypePerChannelSupportToAxis", option_value::object().set("Conv", 0));
  CHECK(has(validate_error(c), "QDQOpTypePerChannelSupportToAxis must be {}"));

  c = get_default_config("XINT8");
  c.extra_options.set("Int16Scale", true);
  CHECK(has(validate_error(c), "does not allow Int16Scale"));

  c = get_default_config("XINT8");
  c.extra_options.set(
      "TensorQuantOverrides",
      option_value::object().set(
          "t", option_value::array({option_value::object().set("reduce_range", true)})));
  CHECK(has(validate_error(c), "forbids reduce_range"));

  // EnableNPUCnn set explicitly with a non-int8 weight.
  c = qconfig{};
  c.global_config.weight = int16_spec();
  c.extra_options.set("EnableNPUCnn", true);
  CHECK(has(validate_error(c), "needs an int8 weight spec"));

  c = qconfig{};
  c.extra_options.set("EnableNPUCnn", true);
  c.extra_options.set("EnableNPUTransformer", true);
  CHECK(has(validate_error(c), "cannot both be true"));
}

TEST_CASE("symmetric flags must agree with the specs (quark-spec §3.2)") {
  qconfig c;
  c.extra_options.set("ActivationSymmetric", false);
  CHECK(has(validate_error(c),
            "extra_options.ActivationSymmetric = false contradicts "
            "global_config.input_tensors.symmetric = true"));
  c = qconfig{};
  c.global_config.weight = uint8_spec();
  c.extra_options.set("WeightSymmetric", true);
  CHECK(has(validate_error(c), "WeightSymmetric"));
  // Defaults follow the specs: UInt8Spec is asymmetric (seed 000 line 77).
  c = qconfig{};
  c.global_config.input_tensors = uint8_spec();
  CHECK(!c.effective_options().get<bool>("ActivationSymmetric"));
}

TEST_CASE("spec rules") {
  qconfig c;
  c.global_config.input_tensors->quant_granularity = granularity::channel;
  CHECK(
      has(validate_error(c), "global_config.input_tensors: activations are quantized per tensor"));

  c = qconfig{};
  c.global_config.weight->quant_granularity = granularity::group;
  CHECK(has(validate_error(c), "global_config.weight: Group granularity needs group_size > 0"));
  c.global_config.weight->group_size = 64;
  CHECK_NOTHROW(c.validate());

  c = qconfig{};
  c.global_config.weight->group_size = 64;
  CHECK(has(validate_error(c), "group_size is only used with Group granularity"));

  c = qconfig{};
  c.global_config.weight->axis = 1;
  CHECK(has(validate_error(c), "axis is only used with"));

  c = qconfig{};
  c.global_config.input_tensors = bfloat16_spec();
  c.global_config.input_tensors->scale_type = scale_kind::power_of_2;
  CHECK(has(validate_error(c), "scale_type PowerOf2 needs an integer spec"));

  c = qconfig{};
  c.global_config.input_tensors->calibration_method = calib_method::distribution;
  CHECK(has(validate_error(c), "Distribution calibration method supports FP8 specs only"));
  c.global_config.input_tensors = make_spec(spec_name::fp8_e4m3fn);
  c.global_config.weight = make_spec(spec_name::fp8_e4m3fn);
  CHECK_NOTHROW(c.validate());

  c = qconfig{};
  c.global_config.weight->dtype = quark::dtype_id::int16;
  CHECK(has(validate_error(c), "dtype int16 does not match Int8Spec"));

  c = get_default_config("MX6");
  c.global_config.weight->block.sub_block_size = 3;
  CHECK(has(validate_error(c), "global_config.weight.block.sub_block_size"));
  c = get_default_config("BFP16");
  c.global_config.weight->block.bit_width = 8;
  CHECK(has(validate_error(c), "block.bit_width"));
  c = get_default_config("MXINT8");
  c.global_config.weight->quant_granularity = granularity::channel;
  CHECK(has(validate_error(c), "quant_granularity must be Tensor"));

  c = qconfig{};
  c.global_config = layer_config{};
  CHECK(has(validate_error(c), "nothing would be quantized"));
}

TEST_CASE("bias rules (quark-spec §6.1)") {
  qconfig c = get_default_config("BF16");
  c.extra_options.set("Int32Bias", true);
  CHECK(has(validate_error(c), "Int32Bias = true needs integer weight and activation specs"));
  c = qconfig{};
  c.extra_options.set("Int32Bias", false);
  c.extra_options.set("Int16Bias", true);
  CHECK(has(validate_error(c), "contradicts Int32Bias = false"));
  c = qconfig{};
  c.global_config.bias = int8_spec();
  c.extra_options.set("QuantizeBias", false);
  CHECK(has(validate_error(c), "global_config.bias is set but QuantizeBias is false"));
  c = qconfig{};
  c.global_config.bias = int8_spec();
  c.extra_options.set("Int32Bias", true);
  CHECK(has(validate_error(c), "Int32Bias = true contradicts global_config.bias = Int8Spec"));
}

TEST_CASE("option combination rules") {
  qconfig c;
  c.extra_options.set("UseFP32Scale", true);
  CHECK(has(validate_error(c), "UseFP32Scale = true only applies with QuantizeFP16 = true"));
  c.extra_options.set("QuantizeFP16", true);
  CHECK_NOTHROW(c.validate());

  c = qconfig{};
  c.global_config.input_tensors = xint16_spec();
  c.extra_options.set("Int16Scale", true);
  CHECK(has(validate_error(c), "Int16Scale = true contradicts the PowerOf2 scale_type"));
  c = get_default_config("BF16");
  c.extra_options.set("Int16Scale", true);
  CHECK(has(validate_error(c), "Int16Scale = true needs an integer"));
  c = qconfig{};
  c.extra_options.set("Int16Scale", true);
  CHECK_NOTHROW(c.validate());

  c = qconfig{};
  c.extra_options.set("ActivationScaled", true);
  CHECK(has(validate_error(c), "ActivationScaled = true needs a floating-point"));
  c = get_default_config("BF16");
  c.extra_options.set("ActivationScaled", true);
  c.extra_options.set("WeightScaled", true);
  CHECK_NOTHROW(c.validate());

  c = get_default_config("XINT8");
  c.extra_options.set("CalibMovingAverage", true);
  CHECK(has(validate_error(c), "CalibMovingAverage = true is not supported with power-of-two"));
  c = qconfig{};  // Percentile
  c.extra_options.set("CalibMovingAverage", true);
  CHECK(has(validate_error(c), "applies to MinMax calibration only"));

  c = qconfig{};
  c.global_config.input_tensors->calibration_method = calib_method::layerwise_percentile;
  c.extra_options.set("CalibOptimizeMem", true);
  CHECK(has(validate_error(c), "mutually exclusive"));

  c = qconfig{};
  c.extra_options.set("NumBins", 0);
  CHECK(has(validate_error(c), "extra_options.NumBins: 0 is only meaningful for MinMSE"));

  c = qconfig{};
  c.extra_options.set("EvalDataReader", "/data/eval");
  CHECK(has(validate_error(c), "EvalDataReader is set but EvalMetrics is false"));

  c = qconfig{};
  c.global_config.weight.reset();
  c.extra_options.set("WeightsOnly", true);
  CHECK(has(validate_error(c), "WeightsOnly = true but no weight spec is set"));

  c = qconfig{};
  c.algo_config.push_back({algo_name::adaround, option_value::object()});
  c.algo_config.push_back({algo_name::adaquant, option_value::object()});
  CHECK(has(validate_error(c), "AdaRound and AdaQuant cannot both be used"));
  c.algo_config.pop_back();
  c.algo_config.push_back({algo_name::adaround, option_value::object()});
  CHECK(has(validate_error(c), "listed twice"));
}

TEST_CASE("effective options: context defaults (seed 000, quark-spec §3.6, §4.0)") {
  qconfig c;
  c.global_config.input_tensors->calibration_method = calib_method::entropy;
  auto e = c.effective_options();
  CHECK(e.get<std::int64_t>("NumBins") == 128);      // seed 000 NumBins: 128 for Entropy
  CHECK(!e.get<bool>("CalibTensorRangeSymmetric"));  // §3.6: Entropy -> False
  CHECK(e.get<bool>("CalibOptimizeMem"));
  c.global_config.input_tensors->calibration_method = calib_method::layerwise_percentile;
  e = c.effective_options();
  CHECK(e.get<std::int64_t>("NumBins") == 2048);
  CHECK(!e.get<bool>("CalibOptimizeMem"));  // seed 000 line 186-187
  c.global_config.input_tensors->calibration_method = calib_method::min_max;
  c.global_config.input_tensors->scale_type = scale_kind::power_of_2;
  CHECK(c.effective_options().get<bool>("CalibTensorRangeSymmetric"));  // NonOverflow -> True
  c.global_config.weight->calibration_method = calib_method::min_mse;
  CHECK(c.effective_options().get<std::string>("WeightCalibrateMethod") == "MinMSE");
  c.extra_options.set("QuantizeFP16", true);
  CHECK(c.effective_options().get<bool>("UseFP32Scale"));  // mirrors QuantizeFP16
  // Explicit values win over derived ones; every implemented key has a value.
  c.extra_options.set("NumBins", 512);
  e = c.effective_options();
  CHECK(e.get<std::int64_t>("NumBins") == 512);
  for (const auto& info : option_registry()) {
    CAPTURE(info.name);
    CHECK_NOTHROW((void)e.value(info.name));
  }
}

TEST_CASE("per-node resolution") {
  qconfig c;
  layer_config l16{.input_tensors = int16_spec(),
                   .output_tensors = std::nullopt,
                   .weight = std::nullopt,
                   .bias = std::nullopt};
  c.specific_layer_config.push_back({l16, {node_selector::parse("^/enc/.*")}});
  layer_config l_u8{.input_tensors = uint8_spec(),
                    .output_tensors = std::nullopt,
                    .weight = std::nullopt,
                    .bias = std::nullopt};
  c.specific_layer_config.push_back({l_u8, {node_selector::parse("/enc/conv2")}});
  c.layer_type_config.push_back({std::nullopt, {"Softmax"}});
  layer_config bf{.input_tensors = bfloat16_spec(),
                  .output_tensors = std::nullopt,
                  .weight = bfloat16_spec(),
                  .bias = std::nullopt};
  c.layer_type_config.push_back({bf, {"LayerNormalization"}});
  c.exclude.push_back(node_selector::parse("/head/conv"));
  c.exclude.push_back(node_selector::from_subgraph({{"/post/a"}, {"/post/z"}}));
  CHECK_NOTHROW(c.validate());

  auto in_post = [](const subgraph& g) { return g.start_nodes[0] == "/post/a"; };
  auto plan = [&](std::string_view name, std::string_view op, bool post = false) {
    return plan_node(
        c, node_query{name, op, [&, post](const subgraph& g) { return post && in_post(g); }});
  };
  CHECK(plan("/head/conv", "Conv").decision == node_decision::excluded);
  CHECK(plan("/x", "Conv", true).decision == node_decision::excluded);
  CHECK(plan("/enc/conv1", "Conv").decision == node_decision::specific);
  CHECK(plan("/enc/conv1", "Conv").config->input_tensors->name == spec_name::int16);
  // The later rule wins.
  CHECK(plan("/enc/conv2", "Conv").config->input_tensors->name == spec_name::uint8);
  // specific_layer_config is more specific than layer_type_config.
  CHECK(plan("/enc/sm", "Softmax").decision == node_decision::specific);
  CHECK(plan("/dec/sm", "Softmax").decision == node_decision::excluded_by_op_type);
  CHECK(!plan("/dec/sm", "Softmax").quantized());
  CHECK(plan("/dec/ln", "LayerNormalization").decision == node_decision::by_op_type);
  const auto g = plan("/dec/conv", "Conv");
  CHECK(g.decision == node_decision::global);
  CHECK(g.config == &c.global_config);

  // Role fallback: the layer's spec, else the global one; outputs fall back to input_tensors.
  const auto p = plan("/enc/conv1", "Conv");
  CHECK(effective_spec(c, *p.config, tensor_role::input)->name == spec_name::int16);
  CHECK(effective_spec(c, *p.config, tensor_role::weight)->name == spec_name::int8);
  CHECK(effective_spec(c, *p.config, tensor_role::output)->name == spec_name::int16);
  CHECK(!effective_spec(c, *p.config, tensor_role::bias));

  // A subgraph selector without graph information is an error, not a silent miss.
  CHECK_THROWS_WITH_AS(plan_node(c, node_query{"/x", "Conv", {}}),
                       doctest::Contains("needs node_query::in_subgraph"), quark::config_error);
}

TEST_CASE("selectors") {
  CHECK(node_selector::parse("/a/b").kind() == selector_kind::name);
  CHECK(node_selector::parse("/a/b").matches_name("/a/b"));
  CHECK(!node_selector::parse("/a/b").matches_name("/a/bc"));
  const auto r = node_selector::parse("^/layer0/.*");
  CHECK(r.kind() == selector_kind::regex);
  CHECK(r.matches_name("/layer0/Conv"));
  CHECK(!r.matches_name("/x/layer0/Conv"));
  CHECK_THROWS_WITH_AS(node_selector::parse("^/a[/.*"), doctest::Contains("quark.config.regex"),
                       quark::config_error);
  CHECK_THROWS_AS(node_selector::parse(""), quark::config_error);
  CHECK_THROWS_AS(node_selector::from_subgraph({{"a"}, {}}), quark::config_error);
}

TEST_CASE(
    "regex selectors on very long node names neither overflow the stack nor backtrack "
    "exponentially") {
  // A backtracking matcher recursed once per character: "^.*b" on 100,000 characters crashed
  // with SIGSEGV (libstdc++ 12), and "^(a+)+b" on 40 characters would run for days.
  const std::string long_name(200000, 'a');
  CHECK(!node_selector::parse("^.*b").matches_name(long_name));
  CHECK(node_selector::parse("^(a|b)*$").matches_name(long_name));
  CHECK(node_selector::parse("^.*a$").matches_name(long_name));
  CHECK(!node_selector::parse("^(a+)+b").matches_name(std::string(40, 'a')));
  CHECK(node_selector::parse("^/layer0/.*").matches_name("/layer0/" + long_name));
  // Back-references keep the backtracking matcher, on names of up to 1,000 characters.
  const auto backref = node_selector::parse("^/(\\w+)/\\1/.*");
  CHECK(backref.matches_name("/conv/conv/Relu"));
  CHECK(!backref.matches_name("/conv/relu/Relu"));
  CHECK(backref.matches_name("/a/a/" + std::string(990, 'x')));
  CHECK_THROWS_WITH_AS(
      backref.matches_name("/a/a/" + long_name),
      doctest::Contains("quark.config.regex: regular expression \"^/(\\w+)/\\1/.*\" "
                        "needs the backtracking matcher"),
      quark::config_error);
}
