// SPDX-License-Identifier: MIT
// The preprocessing of seed 000's category 1 (docs/config.md §7.3): ConvertOpsetVersion,
// ConvertFP16ToFP32, RemoveInputInit, CopySharedInit / CopyBiasInit, the Fuse* rewrites and
// SkipPreprocess. The float stage alone (equalize_model, which runs everything before
// calibration) is checked for the rewrite it should make, and ONNX Runtime 1.30 is the oracle of
// the function: the original and the rewritten graph give the same outputs in ORT, and quark-cpp's
// runtime agrees on the rewritten one (check_same_function).
#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include <quark/metrics.hpp>
#include <quark/onnx/config.hpp>
#include <quark/onnx/presets.hpp>
#include <quark/onnx/quantizer.hpp>

#include "support/checks.hpp"
#include "support/model_files.hpp"
#include "support/ort.hpp"

namespace fs = std::filesystem;
namespace qo = quark::onnx;
using namespace quark::test;

namespace {

constexpr int f32 = onnx_type::float32;

std::size_t count(const ::onnx::ModelProto& m, const char* op) {
  return static_cast<std::size_t>(std::count_if(m.graph().node().begin(), m.graph().node().end(),
                                                [&](const auto& n) { return n.op_type() == op; }));
}

/// The float stage of `cfg` on `fm`; `notes` receives its notes.
::onnx::ModelProto preprocessed(const ::onnx::ModelProto& fm, const qo::qconfig& cfg,
                                std::vector<std::string>* notes = nullptr) {
  return to_proto(qo::equalize_model(to_model(fm), cfg, notes));
}

bool has_note(const std::vector<std::string>& notes, const std::string& text) {
  return std::any_of(notes.begin(), notes.end(),
                     [&](const std::string& s) { return s.find(text) != std::string::npos; });
}

std::int64_t opset_of(const ::onnx::ModelProto& m) {
  for (const auto& o : m.opset_import()) {
    if (o.domain().empty() || o.domain() == "ai.onnx")
      return o.version();
  }
  return 0;
}

/// Two decomposed LayerNorms over the last axis of x [2, 5, 8]: the first with Pow, a 1-D gamma
/// and a beta; the second with Mul(d, d), eps as the first Add operand, gamma [1, 1, 8] and no
/// beta.
::onnx::ModelProto layer_norm_model(int opset) {
  model_builder b(opset);
  b.input("x", f32, {2, 5, 8});
  b.initializer("two", f32, {}, std::vector<float>{2.0f});
  b.initializer("eps", f32, {}, std::vector<float>{1e-5f});
  b.initializer("gamma", f32, {8}, random_floats(8, 3, 0.5f, 1.5f));
  b.initializer("beta", f32, {8}, random_floats(8, 4, -0.5f, 0.5f));
  b.initializer("gamma2", f32, {1, 1, 8}, random_floats(8, 5, 0.5f, 1.5f));
  const auto axes = attr_ints("axes", {-1});
  b.node("ReduceMean", {"x"}, {"m"}, {axes});
  b.node("Sub", {"x", "m"}, {"d"});
  b.node("Pow", {"d", "two"}, {"d2"});
  b.node("ReduceMean", {"d2"}, {"v"}, {axes});
  b.node("Add", {"v", "eps"}, {"ve"});
  b.node("Sqrt", {"ve"}, {"s"});
  b.node("Div", {"d", "s"}, {"n"});
  b.node("Mul", {"n", "gamma"}, {"g"});
  b.node("Add", {"g", "beta"}, {"y"});
  b.node("ReduceMean", {"y"}, {"m2"}, {axes});
  b.node("Sub", {"y", "m2"}, {"e"});
  b.node("Mul", {"e", "e"}, {"e2"});
  b.node("ReduceMean", {"e2"}, {"w"}, {axes});
  b.node("Add", {"eps", "w"}, {"we"});
  b.node("Sqrt", {"we"}, {"t"});
  b.node("Div", {"e", "t"}, {"q"});
  b.node("Mul", {"gamma2", "q"}, {"z"});
  b.output("z", f32, {2, 5, 8});
  return b.build();
}

/// Three erf Gelus of x [2, 16] in the three groupings of the products.
::onnx::ModelProto gelu_model(int opset) {
  model_builder b(opset);
  b.input("x", f32, {2, 16});
  b.initializer("sqrt2", f32, {}, std::vector<float>{1.41421356f});
  b.initializer("rsqrt2", f32, {}, std::vector<float>{0.70710678f});
  b.initializer("one", f32, {}, std::vector<float>{1.0f});
  b.initializer("half", f32, {}, std::vector<float>{0.5f});
  // x * (1 + erf(x / sqrt 2)) * 0.5
  b.node("Div", {"x", "sqrt2"}, {"a0"});
  b.node("Erf", {"a0"}, {"a1"});
  b.node("Add", {"a1", "one"}, {"a2"});
  b.node("Mul", {"x", "a2"}, {"a3"});
  b.node("Mul", {"a3", "half"}, {"y1"});
  // x * ((1 + erf(x * (1 / sqrt 2))) * 0.5)
  b.node("Mul", {"rsqrt2", "x"}, {"b0"});
  b.node("Erf", {"b0"}, {"b1"});
  b.node("Add", {"one", "b1"}, {"b2"});
  b.node("Mul", {"b2", "half"}, {"b3"});
  b.node("Mul", {"b3", "x"}, {"y2"});
  // (x * 0.5) * (1 + erf(x / sqrt 2))
  b.node("Mul", {"x", "half"}, {"c0"});
  b.node("Div", {"x", "sqrt2"}, {"c1"});
  b.node("Erf", {"c1"}, {"c2"});
  b.node("Add", {"c2", "one"}, {"c3"});
  b.node("Mul", {"c0", "c3"}, {"y3"});
  for (const char* y : {"y1", "y2", "y3"})
    b.output(y, f32, {2, 16});
  return b.build();
}

/// A8W8 without SimplifyModel: its subexpression elimination would merge the groupings these
/// test models repeat on purpose (the x / sqrt 2 of two Gelu forms), as onnxslim would.
qo::qconfig unsimplified() {
  qo::qconfig cfg = qo::get_default_config("A8W8");
  cfg.extra_options.set("SimplifyModel", false);
  return cfg;
}

}  // namespace

TEST_CASE(
    "FuseLayerNorm: ReduceMean / Sub / Pow / Sqrt / Div / Mul / Add become LayerNormalization") {
  const auto fm = layer_norm_model(17);
  std::vector<std::string> notes;
  const auto eq = preprocessed(fm, qo::get_default_config("A8W8"), &notes);
  CHECK(count(eq, "LayerNormalization") == 2);
  CHECK(count(eq, "ReduceMean") == 0);
  CHECK(count(eq, "Div") == 0);
  CHECK(has_note(notes, "FuseLayerNorm: 2 fused into LayerNormalization"));
  // The fused nodes keep the last node's name and output; gamma [1, 1, 8] became a 1-D copy.
  const auto* second = node_named(eq, "n16");
  REQUIRE(second != nullptr);
  CHECK(second->op_type() == "LayerNormalization");
  CHECK(second->output(0) == "z");
  CHECK(second->input_size() == 2);
  CHECK(find_init(eq, "gamma2") == nullptr);
  check_same_function(fm, eq, {2, 5, 8}, 1e-5);

  SUBCASE("below opset 17 the patterns stay, and the notes say why") {
    std::vector<std::string> n13;
    const auto e13 = preprocessed(layer_norm_model(13), qo::get_default_config("A8W8"), &n13);
    CHECK(count(e13, "LayerNormalization") == 0);
    CHECK(has_note(n13,
                   "FuseLayerNorm: 2 pattern(s) left as they are: LayerNormalization needs "
                   "opset 17, the model has 13"));
  }
  SUBCASE("FuseLayerNorm false, or SkipPreprocess, keeps them") {
    qo::qconfig cfg = qo::get_default_config("A8W8");
    cfg.extra_options.set("FuseLayerNorm", false);
    CHECK(count(preprocessed(fm, cfg), "LayerNormalization") == 0);
    cfg = qo::get_default_config("A8W8");
    cfg.extra_options.set("SkipPreprocess", true);
    CHECK(count(preprocessed(fm, cfg), "LayerNormalization") == 0);
  }
  SUBCASE("a value read outside the pattern keeps it") {
    auto leaky = fm;
    auto* o = leaky.mutable_graph()->add_output();
    o->set_name("s");  // the first LayerNorm's Sqrt is a graph output now
    o->mutable_type()->mutable_tensor_type()->set_elem_type(f32);
    const auto e = preprocessed(leaky, qo::get_default_config("A8W8"));
    CHECK(count(e, "LayerNormalization") == 1);
    CHECK(count(e, "Sqrt") == 1);
  }
}

TEST_CASE("FuseGelu: x * 0.5 * (1 + erf(x / sqrt 2)) becomes Gelu in every grouping") {
  const auto fm = gelu_model(20);
  std::vector<std::string> notes;
  const auto eq = preprocessed(fm, unsimplified(), &notes);
  CHECK(count(eq, "Gelu") == 3);
  CHECK(count(eq, "Erf") == 0);
  CHECK(count(eq, "Mul") == 0);
  CHECK(has_note(notes, "FuseGelu: 3 fused into Gelu"));
  check_same_function(fm, eq, {2, 16}, 1e-5);

  std::vector<std::string> n18;
  const auto e18 = preprocessed(gelu_model(18), unsimplified(), &n18);
  CHECK(count(e18, "Gelu") == 0);
  CHECK(has_note(n18, "Gelu needs opset 20, the model has 18"));
}

TEST_CASE("FuseInstanceNorm: the GlobalAveragePool form becomes InstanceNormalization") {
  model_builder b(13);
  b.input("x", f32, {1, 3, 5, 5});
  b.initializer("eps", f32, {}, std::vector<float>{1e-5f});
  b.initializer("gamma", f32, {1, 3, 1, 1}, random_floats(3, 7, 0.5f, 1.5f));
  b.initializer("beta", f32, {1, 3, 1, 1}, random_floats(3, 8, -0.5f, 0.5f));
  b.node("GlobalAveragePool", {"x"}, {"m"});
  b.node("Sub", {"x", "m"}, {"d"});
  b.node("Mul", {"d", "d"}, {"d2"});
  b.node("GlobalAveragePool", {"d2"}, {"v"});
  b.node("Add", {"v", "eps"}, {"ve"});
  b.node("Sqrt", {"ve"}, {"s"});
  b.node("Reciprocal", {"s"}, {"r"});
  b.node("Mul", {"r", "gamma"}, {"k"});
  b.node("Mul", {"x", "k"}, {"xk"});
  b.node("Mul", {"m", "k"}, {"mk"});
  b.node("Sub", {"beta", "mk"}, {"sh"});
  b.node("Add", {"xk", "sh"}, {"y"});
  b.node("Relu", {"y"}, {"z"});
  b.output("z", f32, {1, 3, 5, 5});
  const auto fm = b.build();
  std::vector<std::string> notes;
  const auto eq = preprocessed(fm, qo::get_default_config("A8W8"), &notes);
  CHECK(count(eq, "InstanceNormalization") == 1);
  CHECK(count(eq, "GlobalAveragePool") == 0);
  CHECK(count(eq, "Reciprocal") == 0);
  CHECK(has_note(notes, "FuseInstanceNorm: 1 fused into InstanceNormalization"));
  check_same_function(fm, eq, {1, 3, 5, 5}, 1e-5);
}

TEST_CASE("FuseL2Norm: x / sqrt(max(sum(x^2), eps)) becomes LpNormalization(p = 2)") {
  model_builder b(13);
  b.input("x", f32, {3, 6});
  b.initializer("eps", f32, {}, std::vector<float>{1e-12f});
  b.initializer("ax1", onnx_type::int64, {1}, std::vector<std::int64_t>{1});
  b.initializer("ax0", onnx_type::int64, {1}, std::vector<std::int64_t>{0});
  b.node("Mul", {"x", "x"}, {"sq"});
  b.node("ReduceSum", {"sq", "ax1"}, {"s"});
  b.node("Max", {"s", "eps"}, {"mx"});
  b.node("Sqrt", {"mx"}, {"n"});
  b.node("Reciprocal", {"n"}, {"r"});
  b.node("Mul", {"x", "r"}, {"y"});
  b.node("Mul", {"x", "x"}, {"sq0"});
  b.node("ReduceSum", {"sq0", "ax0"}, {"s0"});
  b.node("Max", {"eps", "s0"}, {"mx0"});
  b.node("Sqrt", {"mx0"}, {"n0"});
  b.node("Div", {"x", "n0"}, {"y0"});
  b.output("y", f32, {3, 6});
  b.output("y0", f32, {3, 6});
  const auto fm = b.build();
  const auto eq = preprocessed(fm, unsimplified());
  CHECK(count(eq, "LpNormalization") == 2);
  CHECK(count(eq, "ReduceSum") == 0);
  const auto* n = node_named(eq, "n10");
  REQUIRE(n != nullptr);
  CHECK(n->op_type() == "LpNormalization");
  check_same_function(fm, eq, {3, 6}, 1e-5);
}

TEST_CASE("LpNormalization in quark-cpp's runtime matches ONNX Runtime, zero vectors included") {
  if (!ort_available()) {
    MESSAGE("skipped: " << ort_unavailable_reason());
    return;
  }
  for (const std::int64_t p : {1, 2}) {
    for (const std::int64_t axis : {-1, 0}) {
      CAPTURE(p);
      CAPTURE(axis);
      model_builder b(13);
      b.input("x", f32, {3, 4});
      b.node("LpNormalization", {"x"}, {"y"}, {attr_int("p", p), attr_int("axis", axis)});
      b.output("y", f32, {3, 4});
      const std::vector<float> x = {0, 0, 0, 0, 3, -4, 0, 1, 0.5f, 2, -1, 0};
      const auto theirs = run_ort(b.build(), {npy_array::from(x, {3, 4})}).at("y").values<float>();
      const fs::path path = work_dir() / "lp.onnx";
      save_proto(b.build(), path);
      const auto ours = qo::run_model(path, {{"x", qo::tensor::from_floats({3, 4}, x)}});
      const auto o = ours.at("y").data<float>();
      REQUIRE(o.size() == theirs.size());
      for (std::size_t i = 0; i < o.size(); ++i)
        CHECK(o[i] == doctest::Approx(static_cast<double>(theirs[i])).epsilon(1e-6));
    }
  }
}

TEST_CASE("RemoveInputInit: an initializer listed as a graph input becomes a constant") {
  model_builder b(13);
  b.input("x", f32, {1, 4});
  b.input("w", f32, {4});
  b.initializer("w", f32, {4}, std::vector<float>{1.0f, -2.0f, 3.0f, 0.5f});
  b.node("Neg", {"w"}, {"nw"});
  b.node("Add", {"x", "nw"}, {"y"});
  b.output("y", f32, {1, 4});
  const auto fm = b.build();
  std::vector<std::string> notes;
  const auto eq = preprocessed(fm, qo::get_default_config("A8W8"), &notes);
  CHECK(eq.graph().input_size() == 1);
  CHECK(count(eq, "Neg") == 0);  // folded: w is a constant now
  CHECK(has_note(notes, "RemoveInputInit: 1 graph input(s) removed"));
  check_same_function(fm, eq, {1, 4});

  qo::qconfig keep = qo::get_default_config("A8W8");
  keep.extra_options.set("RemoveInputInit", false);
  const auto kept = preprocessed(fm, keep);
  CHECK(kept.graph().input_size() == 2);
  CHECK(count(kept, "Neg") == 1);  // an overridable default is not folded
}

TEST_CASE("CopyBiasInit / CopySharedInit give each Conv its own copy of a shared initializer") {
  model_builder b(13);
  b.input("x", f32, {1, 2, 5, 5});
  b.initializer("W", f32, {3, 2, 3, 3}, random_floats(54, 11, -0.5f, 0.5f));
  b.initializer("B", f32, {3}, random_floats(3, 12, -0.5f, 0.5f));
  b.node("Conv", {"x", "W", "B"}, {"c1"});
  b.node("Relu", {"x"}, {"rx"});
  b.node("Conv", {"rx", "W", "B"}, {"c2"});
  b.node("Add", {"c1", "c2"}, {"y"});
  b.output("y", f32, {1, 3, 3, 3});
  const auto fm = b.build();
  auto conv_inputs = [](const ::onnx::ModelProto& m) {
    const auto* c = node_named(m, "n2");
    REQUIRE(c != nullptr);
    return std::make_pair(c->input(1), c->input(2));
  };
  // A8W8: CopyBiasInit's default copies the bias for the second Conv; the weight stays shared.
  std::vector<std::string> notes;
  const auto eq = preprocessed(fm, qo::get_default_config("A8W8"), &notes);
  CHECK(conv_inputs(eq) == std::make_pair(std::string("W"), std::string("B_duplicated")));
  CHECK(has_note(notes, "CopyBiasInit: 1 bias copies"));
  check_same_function(fm, eq, {1, 2, 5, 5});
  // CopySharedInit ["Conv"] copies the weight as well.
  qo::qconfig cfg = qo::get_default_config("A8W8");
  cfg.extra_options.set("CopySharedInit", qo::option_value::array({"Conv"}));
  CHECK(conv_inputs(preprocessed(fm, cfg)) ==
        std::make_pair(std::string("W_duplicated"), std::string("B_duplicated")));
  // Off: CopyBiasInit null, or a configuration that is not 8/16-bit integer (BF16).
  cfg = qo::get_default_config("A8W8");
  cfg.extra_options.set("CopyBiasInit", qo::option_value());
  CHECK(conv_inputs(preprocessed(fm, cfg)) == std::make_pair(std::string("W"), std::string("B")));
  CHECK(conv_inputs(preprocessed(fm, qo::get_default_config("BF16"))) ==
        std::make_pair(std::string("W"), std::string("B")));

  SUBCASE("quantized with A8W8, each Conv gets an int32 bias of its own scale, and ORT agrees") {
    const fs::path dir = work_dir();
    save_proto(fm, dir / "shared.onnx");
    std::vector<qo::calib_sample> calib;
    for (std::uint32_t s = 0; s < 2; ++s)
      calib.push_back({{"x", qo::tensor::from_floats({1, 2, 5, 5}, random_floats(50, 20 + s))}});
    qo::memory_reader reader(calib);
    qo::quantize_model(dir / "shared.onnx", dir / "shared_q.onnx", qo::get_default_config("A8W8"),
                       reader);
    const auto qm = load_proto(dir / "shared_q.onnx");
    std::vector<std::string> biases;
    for (const auto& n : qm.graph().node()) {
      if (n.op_type() == "Conv")
        biases.push_back(n.input(2));
    }
    REQUIRE(biases.size() == 2);
    CHECK(biases[0] != biases[1]);
    if (ort_available()) {
      const auto x = random_floats(50, 30);
      const auto theirs = run_ort(qm, {npy_array::from(x, {1, 2, 5, 5})}).at("y").values<float>();
      const auto ours =
          qo::run_model(dir / "shared_q.onnx", {{"x", qo::tensor::from_floats({1, 2, 5, 5}, x)}});
      const auto o = ours.at("y").data<float>();
      CHECK(quark::metrics::cosine(std::vector<float>(o.begin(), o.end()), theirs) >= 0.99999);
    }
  }
}

TEST_CASE("ConvertOpsetVersion: up and down, then the fusions the new opset allows") {
  // Opset 13 -> 17: ONNX's converter; the LayerNorms fuse at 17.
  qo::qconfig cfg = unsimplified();
  cfg.extra_options.set("ConvertOpsetVersion", 17);
  std::vector<std::string> notes;
  const auto fm = layer_norm_model(13);
  const auto eq = preprocessed(fm, cfg, &notes);
  CHECK(opset_of(eq) == 17);
  CHECK(count(eq, "LayerNormalization") == 2);
  CHECK(has_note(notes, "ConvertOpsetVersion = 17: converted from opset 13"));
  check_same_function(fm, eq, {2, 5, 8}, 1e-5);
  // 13 -> 20: past the converter's newest opset quark-cpp's upgrade goes on; Gelu fuses.
  cfg.extra_options.set("ConvertOpsetVersion", 20);
  const auto g13 = gelu_model(13);
  const auto g20 = preprocessed(g13, cfg);
  CHECK(opset_of(g20) == 20);
  CHECK(count(g20, "Gelu") == 3);
  check_same_function(g13, g20, {2, 16}, 1e-5);
  // 13 -> 11: Squeeze's axes input becomes an attribute again.
  model_builder b(13);
  b.input("x", f32, {1, 4, 1});
  b.initializer("axes", onnx_type::int64, {1}, std::vector<std::int64_t>{2});
  b.node("Squeeze", {"x", "axes"}, {"y"});
  b.output("y", f32, {1, 4});
  const auto sq = b.build();
  cfg.extra_options.set("ConvertOpsetVersion", 11);
  const auto s11 = preprocessed(sq, cfg);
  CHECK(opset_of(s11) == 11);
  const auto* squeeze = node_named(s11, "n0");
  REQUIRE(squeeze != nullptr);
  CHECK(squeeze->input_size() == 1);
  CHECK(s11.graph().input_size() == 1);
  check_same_function(sq, s11, {1, 4, 1});
  // ONNX's converter has no way down for Relu 13 (it only added bfloat16): an error naming it,
  // where Quark would warn and quantize the model at its own opset.
  model_builder r(13);
  r.input("x", f32, {1, 4});
  r.node("Relu", {"x"}, {"y"});
  r.output("y", f32, {1, 4});
  CHECK_THROWS_WITH_AS(preprocessed(r.build(), cfg),
                       doctest::Contains("ConvertOpsetVersion = 11: ONNX's version converter "
                                         "cannot carry the model from opset 13 to 11"),
                       quark::config_error);

  SUBCASE("impossible targets and conflicts are errors that name the key") {
    cfg.extra_options.set("ConvertOpsetVersion", 5);
    CHECK_THROWS_WITH_AS(preprocessed(sq, cfg),
                         doctest::Contains("quark.config.opset: ConvertOpsetVersion = 5"),
                         quark::config_error);
    cfg.extra_options.set("ConvertOpsetVersion", 99);
    CHECK_THROWS_WITH_AS(preprocessed(sq, cfg),
                         doctest::Contains("quark.config.opset: ConvertOpsetVersion = 99"),
                         quark::config_error);
    // Down from an opset newer than ONNX's converter knows (17 with libonnx 1.12); up from one
    // is quark-cpp's upgrade alone.
    model_builder b18(18);
    b18.input("x", f32, {1, 4});
    b18.node("Relu", {"x"}, {"y"});
    b18.output("y", f32, {1, 4});
    cfg.extra_options.set("ConvertOpsetVersion", 17);
    CHECK_THROWS_WITH_AS(preprocessed(b18.build(), cfg),
                         doctest::Contains("the model has opset 18, newer than the newest ONNX's "
                                           "version converter knows (17)"),
                         quark::config_error);
    cfg.extra_options.set("ConvertOpsetVersion", 21);
    CHECK(opset_of(preprocessed(b18.build(), cfg)) == 21);
    cfg.extra_options.set("ConvertOpsetVersion", 17);
    cfg.extra_options.set("SkipPreprocess", true);
    CHECK_THROWS_WITH_AS(preprocessed(sq, cfg),
                         doctest::Contains("SkipPreprocess = true skips every preprocessing step, "
                                           "but ConvertOpsetVersion asks for one"),
                         quark::config_error);
    cfg.extra_options.erase("ConvertOpsetVersion");
    cfg.extra_options.set("ConvertFP16ToFP32", true);
    CHECK_THROWS_WITH_AS(preprocessed(sq, cfg),
                         doctest::Contains("but ConvertFP16ToFP32 asks for one"),
                         quark::config_error);
  }
}

TEST_CASE("SkipPreprocess: no fold, no fusion, no initializer handling") {
  model_builder b(13);
  b.input("x", f32, {1, 4, 6, 6});
  b.input("W", f32, {4, 4, 1, 1});
  b.initializer("W", f32, {4, 4, 1, 1}, random_floats(16, 41, -0.5f, 0.5f));
  bn_params(b, "bn", 4, 42);
  b.node("Conv", {"x", "W"}, {"c"});
  b.node("BatchNormalization", {"c", "bn_s", "bn_b", "bn_m", "bn_v"}, {"y"});
  b.output("y", f32, {1, 4, 6, 6});
  const auto fm = b.build();
  qo::qconfig cfg = qo::get_default_config("XINT8");  // its flow also converts BN to Conv
  cfg.extra_options.set("RemoveInputInit", true);
  const auto folded = preprocessed(fm, cfg);
  CHECK(count(folded, "BatchNormalization") == 0);
  CHECK(folded.graph().input_size() == 1);
  cfg.extra_options.set("SkipPreprocess", true);
  const auto kept = preprocessed(fm, cfg);
  CHECK(count(kept, "BatchNormalization") == 1);
  CHECK(kept.graph().input_size() == 2);
  CHECK(kept.graph().node_size() == fm.graph().node_size());
}

TEST_CASE("ConvertOpsetVersion also applies to MATMUL_NBITS, which has no other graph pass") {
  model_builder b(13);
  b.input("x", f32, {2, 32});
  b.initializer("w", f32, {32, 16}, random_floats(512, 51, -0.5f, 0.5f));
  b.node("MatMul", {"x", "w"}, {"y"});
  b.output("y", f32, {2, 16});
  const fs::path dir = work_dir();
  save_proto(b.build(), dir / "mm.onnx");
  qo::qconfig cfg = qo::get_default_config("MATMUL_NBITS");
  cfg.extra_options.set("ConvertOpsetVersion", 17);
  qo::memory_reader none(std::vector<qo::calib_sample>{});
  const auto report = qo::quantize_model(dir / "mm.onnx", dir / "mm_q.onnx", cfg, none);
  CHECK(has_note(report.notes, "ConvertOpsetVersion = 17: converted from opset 13"));
  const auto qm = load_proto(dir / "mm_q.onnx");
  CHECK(opset_of(qm) == 17);
  CHECK(count(qm, "MatMulNBits") == 1);
}

namespace {

/// x [1, 3, 8, 8] -> Conv (4 channels, 3x3, pads 1) -> Relu -> y [1, 4, 8, 8], and
/// GlobalAveragePool(y) -> z [1, 4, 1, 1].
::onnx::ModelProto nchw_model(bool dynamic = false) {
  model_builder b(13);
  b.input(
      "x", f32,
      dynamic ? std::vector<std::int64_t>{-1, 3, -1, -1} : std::vector<std::int64_t>{1, 3, 8, 8});
  b.initializer("w", f32, {4, 3, 3, 3}, random_floats(108, 61, -0.5f, 0.5f));
  b.node("Conv", {"x", "w"}, {"c"}, {attr_ints("pads", {1, 1, 1, 1})});
  b.node("Relu", {"c"}, {"y"});
  b.node("GlobalAveragePool", {"y"}, {"z"});
  b.output("y", f32, {1, 4, 8, 8});
  b.output("z", f32, {1, 4, 1, 1});
  return b.build();
}

/// v [1, C, H, W] as [1, H, W, C] (`to_nhwc`) or back.
std::vector<float> permute(const std::vector<float>& v, std::int64_t c, std::int64_t h,
                           std::int64_t w, bool to_nhwc) {
  std::vector<float> out(v.size());
  for (std::int64_t ci = 0; ci < c; ++ci) {
    for (std::int64_t hi = 0; hi < h; ++hi) {
      for (std::int64_t wi = 0; wi < w; ++wi) {
        const auto nchw = static_cast<std::size_t>((ci * h + hi) * w + wi);
        const auto nhwc = static_cast<std::size_t>((hi * w + wi) * c + ci);
        if (to_nhwc)
          out[nhwc] = v[nchw];
        else
          out[nchw] = v[nhwc];
      }
    }
  }
  return out;
}

}  // namespace

TEST_CASE("ConvertNCHWToNHWC: NHWC inputs and outputs, the same quantized function") {
  const auto fm = nchw_model();
  const fs::path dir = work_dir();
  save_proto(fm, dir / "nchw.onnx");
  std::vector<qo::calib_sample> nchw, nhwc;
  for (std::uint32_t s = 0; s < 3; ++s) {
    const auto v = random_floats(192, 70 + s, -2.0f, 2.0f);
    nchw.push_back({{"x", qo::tensor::from_floats({1, 3, 8, 8}, v)}});
    nhwc.push_back({{"x", qo::tensor::from_floats({1, 8, 8, 3}, permute(v, 3, 8, 8, true))}});
  }
  qo::qconfig cfg = qo::get_default_config("A8W8");
  qo::memory_reader r0(nchw);
  (void)qo::quantize_model(dir / "nchw.onnx", dir / "nchw_q.onnx", cfg, r0);
  cfg.extra_options.set("ConvertNCHWToNHWC", true);
  qo::memory_reader r1(nhwc);
  const auto report = qo::quantize_model(dir / "nchw.onnx", dir / "nhwc_q.onnx", cfg, r1);
  CHECK(has_note(report.notes, "ConvertNCHWToNHWC: input 'x' [N, 3, 8, 8] -> [N, 8, 8, 3]"));
  CHECK(has_note(report.notes,
                 "ConvertNCHWToNHWC: output 'y' [N, 4, 8, 8] -> 'y_transpose' [N, 8, 8, 4]"));
  // z's H and W (1) are not larger than C (4): converted, with a warning.
  CHECK(has_note(report.notes, "H or W is not larger than C for 'z'"));
  const auto qm = load_proto(dir / "nhwc_q.onnx");
  const auto dims = [](const ::onnx::ValueInfoProto& v) {
    std::vector<std::int64_t> d;
    for (const auto& x : v.type().tensor_type().shape().dim())
      d.push_back(x.dim_value());
    return d;
  };
  REQUIRE(qm.graph().input_size() == 1);
  CHECK(dims(qm.graph().input(0)) == std::vector<std::int64_t>{1, 8, 8, 3});
  REQUIRE(qm.graph().output_size() == 2);
  CHECK(qm.graph().output(0).name() == "y_transpose");
  CHECK(dims(qm.graph().output(0)) == std::vector<std::int64_t>{1, 8, 8, 4});
  CHECK(qm.graph().output(1).name() == "z_transpose");
  CHECK(dims(qm.graph().output(1)) == std::vector<std::int64_t>{1, 1, 1, 4});
  CHECK(count(qm, "Transpose") == 3);
  if (!ort_available()) {
    MESSAGE("skipped ORT comparison: " << ort_unavailable_reason());
    return;
  }
  // Calibrated on the same values, the two models quantize every tensor alike: ORT gives the
  // NCHW model's outputs, transposed, bit for bit.
  const auto x = random_floats(192, 99, -2.0f, 2.0f);
  const auto a = run_ort(load_proto(dir / "nchw_q.onnx"), {npy_array::from(x, {1, 3, 8, 8})});
  const auto b = run_ort(qm, {npy_array::from(permute(x, 3, 8, 8, true), {1, 8, 8, 3})});
  CHECK(permute(b.at("y_transpose").values<float>(), 4, 8, 8, false) == a.at("y").values<float>());
  CHECK(b.at("z_transpose").values<float>() == a.at("z").values<float>());
  const auto ours =
      qo::run_model(dir / "nhwc_q.onnx",
                    {{"x", qo::tensor::from_floats({1, 8, 8, 3}, permute(x, 3, 8, 8, true))}});
  const auto oy = ours.at("y_transpose").data<float>();
  CHECK(std::vector<float>(oy.begin(), oy.end()) == b.at("y_transpose").values<float>());
}

TEST_CASE("ConvertNCHWToNHWC: symbolic sizes are left alone, SkipPreprocess conflicts") {
  std::vector<std::string> notes;
  qo::qconfig cfg = qo::get_default_config("A8W8");
  cfg.extra_options.set("ConvertNCHWToNHWC", true);
  const auto pm = preprocessed(nchw_model(true), cfg, &notes);
  CHECK(count(pm, "Transpose") == 2);  // the outputs' (static); the input's H, W are symbolic
  CHECK(has_note(notes,
                 "ConvertNCHWToNHWC: left as they are (not 4-D with static C, H and W): "
                 "'x'"));
  cfg.extra_options.set("SkipPreprocess", true);
  CHECK_THROWS_WITH_AS((void)preprocessed(nchw_model(), cfg),
                       doctest::Contains("ConvertNCHWToNHWC asks for one"), quark::config_error);
}
