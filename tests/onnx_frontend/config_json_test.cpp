// SPDX-License-Identifier: MIT
// The JSON spelling of qconfig: round trips, the example files, and every bad-input error with its
// JSON path.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <doctest/doctest.h>

#include <quark/onnx/presets.hpp>

using namespace quark::onnx;

namespace {

template <class E>
std::string error_of(auto&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "(no error)";
}

std::string config_error_of(std::string_view text) {
  return error_of<quark::error>([&] { (void)config_from_json(text); });
}

std::filesystem::path source_dir() {
  const char* s = std::getenv("QUARK_SOURCE_DIR");
  return s ? std::filesystem::path(s)
           : std::filesystem::path(__FILE__).parent_path().parent_path().parent_path();
}

qconfig rich_config() {
  qconfig c;
  c.global_config.weight->quant_granularity = granularity::channel;
  c.global_config.weight->axis = 0;
  c.global_config.output_tensors = uint8_spec();
  c.global_config.bias = int32_spec();
  layer_config l16{.input_tensors = int16_spec(),
                   .output_tensors = std::nullopt,
                   .weight = int8_spec(),
                   .bias = std::nullopt};
  c.specific_layer_config.push_back(
      {l16,
       {node_selector::parse("/conv1/Conv"), node_selector::parse("^/layer2/.*"),
        node_selector::from_subgraph({{"Conv1", "Conv2"}, {"Relu9"}})}});
  tensor_spec g = int4_spec();
  g.quant_granularity = granularity::group;
  g.group_size = 32;
  c.layer_type_config.push_back({layer_config{.input_tensors = std::nullopt,
                                              .output_tensors = std::nullopt,
                                              .weight = g,
                                              .bias = std::nullopt},
                                 {"MatMul"}});
  c.layer_type_config.push_back({std::nullopt, {"Softmax", "Resize"}});
  c.exclude = {node_selector::parse("/head/Concat"), node_selector::parse("^/post/.*"),
               node_selector::from_subgraph({{"/model.22/Concat_3"}, {"/model.22/Concat_5"}})};
  algo_entry cle{algo_name::cle, option_value::object()};
  cle.params.set("cle_steps", 2);
  c.algo_config.push_back(cle);
  c.use_external_data_format = true;
  c.extra_options.set("CalibMovingAverageConstant", 0.25);
  c.extra_options.set("Percentile", 99.99);
  c.extra_options.set("RandomDataReaderInputShape",
                      option_value::object().set("image", option_value::array({1, 3, 64, 64})));
  c.extra_options.set("NodesToQuantize", nullptr);
  c.extra_options.set(
      "TensorQuantOverrides",
      option_value::object().set(
          "/w",
          option_value::array({option_value::object().set("quant_type", "QInt8").set("axis", 1)})));
  c.extra_options.set("SimulateDPU", false);
  return c;
}

}  // namespace

TEST_CASE("round trip: every preset") {
  for (const auto& p : presets()) {
    CAPTURE(p.name);
    const qconfig c = get_default_config(p.name);
    const std::string text = to_json(c);
    const qconfig back = config_from_json(text);
    CHECK(back == c);
    CHECK(to_json(back) == text);
  }
}

TEST_CASE("use_dynamic_quant is written only when set") {
  const qconfig d = get_default_config("UINT8_DYNAMIC_QUANT");
  CHECK(to_json(d).find("\"use_dynamic_quant\": true") != std::string::npos);
  CHECK(to_json(get_default_config("U8U8_AAWA")).find("use_dynamic_quant") == std::string::npos);
  CHECK(config_from_json(R"({"use_dynamic_quant": false})") == qconfig{});
}

TEST_CASE("round trip: a configuration using every field") {
  const qconfig c = rich_config();
  CHECK_NOTHROW(c.validate());
  const std::string text = to_json(c);
  const qconfig back = config_from_json(text);
  CHECK(back == c);
  CHECK(back.exclude[1].kind() == selector_kind::regex);
  CHECK(back.exclude[2].kind() == selector_kind::subgraph);
  CHECK(back.layer_type_config[1].config == std::nullopt);
  CHECK(back.extra_options.get<double>("CalibMovingAverageConstant") == 0.25);
  CHECK(to_json(back) == text);
}

TEST_CASE("short forms: a spec name string and Quark's subgraph tuple") {
  const qconfig c = config_from_json(R"({
    "global_config": {"input_tensors": "UInt8Spec", "weight": {"spec": "Int8Spec",
                      "quant_granularity": "Channel"}},
    "exclude": [[["Conv1", "Conv2"], ["Relu9", "MatMul10"]]]
  })");
  CHECK(c.global_config.input_tensors->name == spec_name::uint8);
  CHECK(!c.global_config.input_tensors->symmetric);
  CHECK(c.global_config.weight->quant_granularity == granularity::channel);
  REQUIRE(c.exclude.size() == 1);
  CHECK(c.exclude[0].graph().start_nodes == std::vector<std::string>{"Conv1", "Conv2"});
  CHECK(c.exclude[0].graph().end_nodes == std::vector<std::string>{"Relu9", "MatMul10"});
  // Absent fields take QConfig's defaults; an empty object is Quark's default QConfig.
  CHECK(config_from_json("{}") == qconfig{});
}

TEST_CASE("the example files load, validate and round-trip") {
  const auto dir = source_dir() / "examples" / "configs";
  REQUIRE(std::filesystem::is_directory(dir));
  int count = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".json")
      continue;
    CAPTURE(entry.path().string());
    const qconfig c = load_config(entry.path().string());
    CHECK_NOTHROW(c.validate());
    CHECK(config_from_json(to_json(c)) == c);
    ++count;
  }
  CHECK(count >= 4);
}

TEST_CASE("the Vitis AI VINT8 recipe of seed 002") {
  // seed 002: get_default_config("VINT8") + Int32Bias False, enable_npu_cnn True,
  // DedicatedQDQPair True, QuantizeAllOpTypes True, UseRandomData True, subgraphs_to_exclude.
  const qconfig c =
      load_config((source_dir() / "examples" / "configs" / "vint8_vitis_ai.json").string());
  qconfig expected = get_default_config("VINT8");
  expected.extra_options.set("Int32Bias", false);
  expected.extra_options.set("EnableNPUCnn", true);
  expected.extra_options.set("DedicatedQDQPair", true);
  expected.extra_options.set("QuantizeAllOpTypes", true);
  expected.extra_options.set("UseRandomData", true);
  expected.exclude.push_back(
      node_selector::from_subgraph({{"/model.22/Concat_3"}, {"/model.22/Concat_5"}}));
  const auto eff = c.effective_options();
  const auto want = expected.effective_options();
  for (const auto& info : option_registry()) {
    CAPTURE(info.name);
    CHECK(eff.value(info.name) == want.value(info.name));
  }
  CHECK(c.global_config == expected.global_config);
  CHECK(c.exclude == expected.exclude);
  CHECK(eff.get<bool>("EnableNPUCnn"));
  CHECK(!eff.get<bool>("Int32Bias"));
}

TEST_CASE("save_config and load_config") {
  const auto path = std::filesystem::temp_directory_path() / "quark_config_json_test.json";
  save_config(rich_config(), path.string());
  CHECK(load_config(path.string()) == rich_config());
  std::filesystem::remove(path);
  CHECK_THROWS_WITH_AS(load_config("/nonexistent/dir/x.json"), doctest::Contains("quark.config.io"),
                       quark::config_error);
}

TEST_CASE("errors name the JSON path") {
  CHECK(config_error_of(
            R"({"global_config": {"weight": {"spec": "Int8Spec", "symmetric": "yes"}}})") ==
        "quark.config.type: global_config.weight.symmetric: expected a boolean, got \"yes\"");
  CHECK(config_error_of(R"({"extra_options": {"Int32Bias": 1}})") ==
        "quark.config.type: extra_options.Int32Bias: expected a boolean, got 1");
  CHECK(config_error_of(R"({"use_external_data_format": "no"})")
            .find("quark.config.type: use_external_data_format: expected a boolean") == 0);
  CHECK(config_error_of(R"({"use_dynamic_quant": 1})")
            .find("quark.config.type: use_dynamic_quant: expected a boolean") == 0);
  CHECK(config_error_of(R"({"global_config": {"input_tensors": {"spec": "Int8Spec",
        "scale_type": "PowerOfTwo"}}})")
            .find("quark.config.value: global_config.input_tensors.scale_type: unknown value "
                  "\"PowerOfTwo\" (valid: Float32, PowerOf2, Int16)") == 0);
  CHECK(config_error_of(R"({"specific_layer_config": [{"config": {}, "layers": [5]}]})")
            .find("specific_layer_config[0].layers[0]: expected a node name") != std::string::npos);
  CHECK(config_error_of(R"({"exclude": [[["a"]]]})").find("exclude[0]") != std::string::npos);
}

TEST_CASE("a key repeated in one object is an error naming it and the object") {
  // nlohmann (and Python's json) would keep the last copy without a word.
  CHECK(config_error_of(R"({"extra_options": {"Percentile": 99.9, "Percentile": 99.99}})") ==
        "quark.config.duplicate_key: key \"Percentile\" appears twice in \"extra_options\"");
  CHECK(config_error_of(R"({"exclude": [], "exclude": ["a"]})") ==
        "quark.config.duplicate_key: key \"exclude\" appears twice in the top level");
  CHECK(config_error_of(R"({"specific_layer_config": [{"layers": ["a"],
        "config": {"input_tensors": "Int16Spec", "input_tensors": "Int8Spec"}}]})") ==
        "quark.config.duplicate_key: key \"input_tensors\" appears twice in \"config\"");
  CHECK(config_error_of(R"({"extra_options": {"TensorQuantOverrides": {"t": [{"quant_type":
        "QInt8", "quant_type": "QInt16"}]}}})") ==
        "quark.config.duplicate_key: key \"quant_type\" appears twice in an entry of \"t\"");
  // The same key in sibling objects, or again after its object closed, is no repeat.
  CHECK_NOTHROW((void)config_from_json(R"({"global_config": {"input_tensors": "Int8Spec",
        "weight": "Int8Spec"}, "specific_layer_config": [{"config": {"input_tensors": "Int16Spec"},
        "layers": ["a"]}, {"config": {"input_tensors": "Int16Spec"}, "layers": ["b"]}]})"));
}

TEST_CASE("unknown keys, with suggestions") {
  auto msg = config_error_of(R"({"extra_options": {"DedicatedQDQPairs": true}})");
  CHECK(msg.find("quark.config.unknown_key: extra_options.") == 0);
  CHECK(msg.find("did you mean \"DedicatedQDQPair\"") != std::string::npos);
  msg = config_error_of(R"({"global_confg": {}})");
  CHECK(msg ==
        "quark.config.unknown_key: global_confg: unknown key; did you mean "
        "\"global_config\"? (legacy names map as follows: enable_npu_cnn -> "
        "extra_options.EnableNPUCnn, enable_npu_transformer -> "
        "extra_options.EnableNPUTransformer, subgraphs_to_exclude and nodes_to_exclude -> "
        "exclude; see docs/config.md)");
  msg = config_error_of(R"({"subgraphs_to_exclude": []})");
  CHECK(msg.find("subgraphs_to_exclude and nodes_to_exclude -> exclude") != std::string::npos);
  msg = config_error_of(R"({"global_config": {"weights": "Int8Spec"}})");
  CHECK(msg.find("global_config.weights: unknown key; did you mean \"weight\"?") !=
        std::string::npos);
  msg = config_error_of(
      R"({"global_config": {"weight": {"spec": "Int8Spec", "granularity": "Tensor"}}})");
  CHECK(msg.find("global_config.weight.granularity: unknown key; did you mean "
                 "\"quant_granularity\"?") != std::string::npos);
}

TEST_CASE("unknown spec, bad regex, unknown algorithm, not-implemented key, bad JSON") {
  auto msg = config_error_of(R"({"global_config": {"weight": {"spec": "Int9Spec"}}})");
  CHECK(msg.find("quark.config.unknown_spec: global_config.weight.spec: unknown tensor spec "
                 "\"Int9Spec\"; valid: Int8Spec") == 0);
  msg = config_error_of(R"({"global_config": {"weight": "Int9Spec"}})");
  CHECK(msg.find("quark.config.unknown_spec: global_config.weight: unknown tensor spec") == 0);
  msg = config_error_of(R"({"exclude": ["^/layer(0/.*"]})");
  CHECK(msg.find("quark.config.regex: exclude[0]: invalid regular expression \"^/layer(0/.*\"") ==
        0);
  msg = config_error_of(R"({"algo_config": [{"name": "SmoothQuantz"}]})");
  CHECK(msg.find("quark.config.unknown_algorithm: algo_config[0].name: unknown algorithm "
                 "\"SmoothQuantz\"") == 0);
  msg = config_error_of(R"({"algo_config": [{"name": "CLEConfig", "cle_step": 2}]})");
  CHECK(msg.find("quark.config.unknown_key: algo_config[0].cle_step: unknown parameter of "
                 "CLEConfig") == 0);
  msg = config_error_of(R"({"algo_config": [{"name": "gptq", "bits": "8"}]})");
  CHECK(msg.find("quark.config.type: algo_config[0].bits: expected an integer") == 0);
  CHECK_THROWS_WITH_AS(
      config_from_json(R"({"extra_options": {"ConvertSoftmaxToDPUVersion": true}})"),
      doctest::Contains("quark.config.not_implemented: "
                        "extra_options.ConvertSoftmaxToDPUVersion = true is not implemented"),
      quark::not_implemented);
  msg = config_error_of(R"({"global_config": )");
  CHECK(msg.find("quark.config.json: malformed JSON") == 0);
  // A number beyond the double range: nlohmann throws out_of_range, not parse_error (found by
  // fuzz/config_fuzz.cpp).
  msg = config_error_of(R"({"extra_options": {"Percentile": 1e999}})");
  CHECK(msg.find("quark.config.json: malformed JSON") == 0);
  CHECK(msg.find("1e999") != std::string::npos);
  msg = config_error_of("[1, 2]");
  CHECK(msg.find("quark.config.type: (root): expected an object") == 0);
}

TEST_CASE("known algorithms parse with their Quark class names") {
  const qconfig c = config_from_json(R"({"algo_config": [
      {"name": "CLEConfig", "cle_steps": 2, "cle_scale_append_bias": false},
      {"name": "SmoothQuantConfig", "alpha": 0.6},
      {"name": "BiasCorrectionConfig"},
      {"name": "GPTQConfig", "bits": 4, "group_size": 128},
      {"name": "AdaRoundConfig", "learning_rate": 0.05, "target_op_type": ["Conv"]},
      {"name": "QuarotConfig", "r_config_path": null},
      {"name": "AutoMixprecisionConfig", "l2_target": 0.3}]})");
  REQUIRE(c.algo_config.size() == 7);
  CHECK(c.algo_config[0].name == algo_name::cle);
  CHECK(algo_param(c.algo_config[0], "cle_steps") == option_value(2));
  CHECK(algo_param(c.algo_config[0], "cle_weight_threshold") == option_value(0.5));
  CHECK(algo_param(c.algo_config[4], "num_iterations") == option_value(1000));
  CHECK_NOTHROW(c.validate());
}
