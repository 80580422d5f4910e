// SPDX-License-Identifier: MIT
// SimplifyModel (docs/config.md §7.3): quark-cpp's exact rewrites in place of onnxslim. One model
// holds every pattern; what must remain is derived by hand (a Conv with the Pad's padding, one
// Reshape, one Relu, the Add), and the simplified model, quantized, gives in ONNX Runtime 1.30
// the outputs of the same model quantized without simplification. SimplifyModelOptions switch
// each part off; unknown names are errors that name the key.
#include <algorithm>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include <quark/core/error.hpp>
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

const qo::shape_t x_shape{1, 2, 6, 6};

/// x [1, 2, 6, 6] -> Identity -> Cast(float) -> Pad(spatial 1, zeros) -> Conv 3x3 (no pads) ->
/// Transpose(0, 2, 3, 1) -> Transpose(0, 3, 1, 2) -> Reshape(to its own Shape) ->
/// Reshape([1, 4, 36]) -> Reshape([1, 144]) -> Concat (one input) -> {Relu -> Dropout, Relu} ->
/// Add -> `out_name`; Sigmoid(x) is read by nothing. With `identity_output` the Add is followed by
/// an Identity writing the graph output.
::onnx::ModelProto model(bool identity_output = false) {
  model_builder b(13);
  b.input("x", onnx_type::float32, {1, 2, 6, 6});
  b.initializer("w", onnx_type::float32, {4, 2, 3, 3}, random_floats(72, 5, -0.5f, 0.5f));
  b.initializer("bias", onnx_type::float32, {4}, std::vector<float>{0.1f, -0.2f, 0.05f, 0.3f});
  b.initializer("pads", onnx_type::int64, {8}, std::vector<std::int64_t>{0, 0, 1, 1, 0, 0, 1, 1});
  b.initializer("to3", onnx_type::int64, {3}, std::vector<std::int64_t>{1, 4, 36});
  b.initializer("to2", onnx_type::int64, {2}, std::vector<std::int64_t>{1, 144});
  b.node("Identity", {"x"}, {"i"});
  b.node("Cast", {"i"}, {"c"}, {attr_int("to", onnx_type::float32)});
  b.node("Pad", {"c", "pads"}, {"p"});
  b.node("Conv", {"p", "w", "bias"}, {"conv"});
  b.node("Transpose", {"conv"}, {"t1"}, {attr_ints("perm", {0, 2, 3, 1})});
  b.node("Transpose", {"t1"}, {"t2"}, {attr_ints("perm", {0, 3, 1, 2})});
  b.node("Shape", {"t2"}, {"s"});
  b.node("Reshape", {"t2", "s"}, {"r1"});
  b.node("Reshape", {"r1", "to3"}, {"r2"});
  b.node("Reshape", {"r2", "to2"}, {"r3"});
  b.node("Concat", {"r3"}, {"cc"}, {attr_int("axis", 1)});
  b.node("Relu", {"cc"}, {"a"});
  b.node("Dropout", {"a"}, {"da"});
  b.node("Relu", {"cc"}, {"bb"});
  b.node("Sigmoid", {"x"}, {"unused"});
  if (identity_output) {
    b.node("Add", {"da", "bb"}, {"sum"});
    b.node("Identity", {"sum"}, {"y"});
  } else {
    b.node("Add", {"da", "bb"}, {"y"});
  }
  b.output("y", onnx_type::float32, {1, 144});
  return b.build();
}

std::vector<qo::calib_sample> samples() {
  std::vector<qo::calib_sample> out;
  for (std::uint32_t s = 0; s < 2; ++s)
    out.push_back({{"x", qo::tensor::from_floats(x_shape, random_floats(72, 40 + s, -2, 2))}});
  return out;
}

/// Conv-only quantization, so the simplified and the plain graph quantize the same values.
qo::qconfig config() {
  qo::qconfig cfg = qo::get_default_config("A8W8");
  cfg.extra_options.set("OpTypesToQuantize", qo::option_value::array({"Conv"}));
  return cfg;
}

struct quantized {
  ::onnx::ModelProto model;
  qo::quantize_report report;
  fs::path path;
};

quantized quantize(const ::onnx::ModelProto& fm, const qo::qconfig& cfg, const std::string& tag) {
  const fs::path dir = work_dir();
  save_proto(fm, dir / (tag + ".onnx"));
  const auto calib = samples();
  qo::memory_reader reader(calib);
  quantized q;
  q.path = dir / (tag + "_q.onnx");
  q.report = qo::quantize_model(dir / (tag + ".onnx"), q.path, cfg, reader);
  q.model = load_proto(q.path);
  return q;
}

/// Op type -> count, Q/DQ nodes left out.
std::map<std::string, int> float_ops(const ::onnx::ModelProto& m) {
  std::map<std::string, int> c;
  for (const auto& n : m.graph().node()) {
    if (n.op_type() != "QuantizeLinear" && n.op_type() != "DequantizeLinear")
      ++c[n.op_type()];
  }
  return c;
}

bool has_note(const qo::quantize_report& r, const std::string& text) {
  return std::any_of(r.notes.begin(), r.notes.end(),
                     [&](const std::string& n) { return n.find(text) != std::string::npos; });
}

std::vector<std::int64_t> ints_attr(const ::onnx::NodeProto& n, const std::string& name) {
  for (const auto& a : n.attribute()) {
    if (a.name() == name)
      return {a.ints().begin(), a.ints().end()};
  }
  return {};
}

const ::onnx::NodeProto* only(const ::onnx::ModelProto& m, const std::string& op) {
  const ::onnx::NodeProto* found = nullptr;
  for (const auto& n : m.graph().node()) {
    if (n.op_type() == op) {
      REQUIRE_MESSAGE(found == nullptr, "more than one " << op);
      found = &n;
    }
  }
  return found;
}

/// ORT's output `y` of `m` on a fixed input.
std::vector<float> ort_y(const ::onnx::ModelProto& m) {
  const auto x = random_floats(72, 77, -2.0f, 2.0f);
  return run_ort(m, {npy_array::from(x, {1, 2, 6, 6})}).at("y").values<float>();
}

}  // namespace

TEST_CASE("SimplifyModel (default true): every pattern of the model, outputs unchanged in ORT") {
  const auto fm = model();
  const auto simple = quantize(fm, config(), "simplified");
  // Hand-derived: Identity, the no-op Cast, the Pad (into the Conv), both Transposes (they
  // cancel), the Shape (folded: [1, 4, 6, 6]), the Reshape to it, the first of the two
  // constant Reshapes, the one-input Concat, the Dropout, the second Relu (the same as the
  // first) and the unread Sigmoid all go.
  CHECK(float_ops(simple.model) ==
        std::map<std::string, int>{{"Conv", 1}, {"Reshape", 1}, {"Relu", 1}, {"Add", 1}});
  const auto* conv = only(simple.model, "Conv");
  REQUIRE(conv != nullptr);
  CHECK(ints_attr(*conv, "pads") == std::vector<std::int64_t>{1, 1, 1, 1});
  const auto* reshape = only(simple.model, "Reshape");
  REQUIRE(reshape != nullptr);
  CHECK(reshape->input(1) == "to2");
  const auto* add = only(simple.model, "Add");
  REQUIRE(add != nullptr);
  CHECK(add->input(0) == add->input(1));  // both Relus are one
  for (const auto& t : simple.model.graph().initializer()) {
    CHECK(t.name() != "pads");
    CHECK(t.name() != "to3");
  }
  for (const char* note :
       {"SimplifyModel: Identity / Dropout removed: 2",
        "SimplifyModel: Casts to the same type "
        "removed: 1",
        "SimplifyModel: Pads fused into Conv: 1", "SimplifyModel: Transposes merged or removed: 1",
        "SimplifyModel: Shape / Size folded: 1", "SimplifyModel: Reshapes merged or removed: 2",
        "SimplifyModel: single-input Concats removed: 1",
        "SimplifyModel: common subexpressions merged: 1", "SimplifyModel: dead nodes removed: 1"}) {
    CAPTURE(note);
    CHECK(has_note(simple.report, note));
  }

  qo::qconfig off = config();
  off.extra_options.set("SimplifyModel", false);
  const auto plain = quantize(fm, off, "plain");
  const auto ops = float_ops(plain.model);
  CHECK(ops.at("Pad") == 1);
  CHECK(ops.at("Transpose") == 2);
  CHECK(ops.at("Reshape") == 3);
  CHECK(ops.at("Relu") == 2);
  if (!ort_available()) {
    MESSAGE("skipped ORT comparison: " << ort_unavailable_reason());
    return;
  }
  const auto a = ort_y(simple.model);
  const auto b = ort_y(plain.model);
  REQUIRE(a.size() == b.size());
  double worst = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i)
    worst = std::max(worst, static_cast<double>(std::abs(a[i] - b[i])));
  CHECK(worst <= 1e-5);
  CHECK(quark::metrics::cosine(a, ort_y(fm)) >= 0.99);
}

TEST_CASE("SimplifyModel keeps graph output names and honours SimplifyModelOptions") {
  SUBCASE("an Identity writing a graph output stays; the rest is simplified") {
    const auto q = quantize(model(true), config(), "identity_out");
    const auto ops = float_ops(q.model);
    CHECK(ops.at("Identity") == 1);
    CHECK(q.model.graph().output(0).name() == "y");
    if (ort_available())
      CHECK(ort_y(q.model).size() == 144u);
  }
  SUBCASE("skip_fusion_patterns and skip_optimizations") {
    qo::qconfig cfg = config();
    qo::option_value o = qo::option_value::object();
    o.set("skip_fusion_patterns", qo::option_value::array({"FusionPadConv", "EliminationCast"}));
    o.set("skip_optimizations", qo::option_value::array({"dead_node_elimination"}));
    cfg.extra_options.set("SimplifyModelOptions", o);
    const auto q = quantize(model(), cfg, "skips");
    const auto ops = float_ops(q.model);
    CHECK(ops.at("Pad") == 1);
    CHECK(ops.at("Cast") == 1);
    CHECK(ops.at("Sigmoid") == 1);
    CHECK(ops.count("Transpose") == 0);
    CHECK(ops.count("Identity") == 0);
  }
  SUBCASE("no_constant_folding keeps the Shape and the Reshape reading it") {
    qo::qconfig cfg = config();
    qo::option_value o = qo::option_value::object();
    o.set("no_constant_folding", true);
    cfg.extra_options.set("SimplifyModelOptions", o);
    const auto q = quantize(model(), cfg, "no_folding");
    CHECK_FALSE(has_note(q.report, "Shape / Size folded"));
    // The Reshape to an unknown shape is not known to be valid, so no Reshape is merged.
    const auto ops = float_ops(q.model);
    CHECK(ops.at("Shape") == 1);
    CHECK(ops.at("Reshape") == 3);
    CHECK(has_note(q.report, "SimplifyModel: dead nodes removed: 1"));
  }
  SUBCASE("skip_optimizations subexpression_elimination and graph_fusion, no_shape_infer") {
    qo::qconfig cfg = config();
    qo::option_value o = qo::option_value::object();
    o.set("skip_optimizations",
          qo::option_value::array({"subexpression_elimination", "graph_fusion"}));
    cfg.extra_options.set("SimplifyModelOptions", o);
    const auto q = quantize(model(), cfg, "no_cse_fusion");
    const auto ops = float_ops(q.model);
    CHECK(ops.at("Relu") == 2);       // not merged
    CHECK(ops.at("Transpose") == 2);  // no pattern runs
    CHECK(ops.at("Pad") == 1);
    qo::qconfig ni = config();
    qo::option_value o2 = qo::option_value::object();
    o2.set("no_shape_infer", true);
    ni.extra_options.set("SimplifyModelOptions", o2);
    const auto q2 = quantize(model(), ni, "no_shape_infer");
    const auto ops2 = float_ops(q2.model);
    CHECK(ops2.at("Shape") == 1);      // no Shape folding
    CHECK(ops2.at("Transpose") == 2);  // the shape-checked rewrites need inference
    CHECK(ops2.at("Relu") == 1);       // subexpression elimination needs none
  }
  SUBCASE("SkipPreprocess leaves the model as it is (as in Quark)") {
    qo::qconfig cfg = config();
    cfg.extra_options.set("SkipPreprocess", true);
    const auto q = quantize(model(), cfg, "skip_pre");
    CHECK(float_ops(q.model).at("Transpose") == 2);
  }
}

TEST_CASE("SimplifyModelOptions: unknown keys and names are errors naming them") {
  const fs::path dir = work_dir();
  save_proto(model(), dir / "bad.onnx");
  auto attempt = [&](const qo::option_value& o) {
    qo::qconfig cfg = config();
    cfg.extra_options.set("SimplifyModelOptions", o);
    const auto calib = samples();
    qo::memory_reader reader(calib);
    const fs::path out = dir / "bad_q.onnx";
    const std::string text =
        error_text([&] { (void)qo::quantize_model(dir / "bad.onnx", out, cfg, reader); });
    CHECK_FALSE(fs::exists(out));
    return text;
  };
  qo::option_value o = qo::option_value::object();
  o.set("skip_fusion_patterns", qo::option_value::array({"FusionBogus"}));
  std::string t = attempt(o);
  CHECK(t.find("quark.config.value") != std::string::npos);
  CHECK(t.find("SimplifyModelOptions.skip_fusion_patterns") != std::string::npos);
  CHECK(t.find("FusionBogus") != std::string::npos);
  CHECK(t.find("FusionPadConv") != std::string::npos);  // the known names are listed
  qo::option_value k = qo::option_value::object();
  k.set("input_shapes", qo::option_value::array({"x:1,2,6,6"}));
  t = attempt(k);
  CHECK(t.find("SimplifyModelOptions.input_shapes") != std::string::npos);
  qo::option_value c = qo::option_value::object();
  c.set("model_check", true);
  t = attempt(c);
  CHECK(t.find("SimplifyModelOptions.model_check") != std::string::npos);
  qo::option_value w = qo::option_value::object();
  w.set("no_shape_infer", "yes");
  t = attempt(w);
  CHECK(t.find("expected a boolean") != std::string::npos);
}

TEST_CASE("TensorQuantOverrides naming a tensor SimplifyModel merged away says so") {
  // "bb" is the second Relu's output: subexpression elimination merges it into "a".
  qo::option_value ov = qo::option_value::object();
  qo::option_value entry = qo::option_value::object();
  entry.set("symmetric", false);
  ov.set("bb", qo::option_value::array({entry}));
  qo::qconfig cfg = config();
  cfg.extra_options.set("OpTypesToQuantize", qo::option_value::array({"Conv", "Relu"}));
  cfg.extra_options.set("TensorQuantOverrides", ov);
  const fs::path dir = work_dir();
  save_proto(model(), dir / "ov.onnx");
  const auto calib = samples();
  qo::memory_reader reader(calib);
  const std::string text = error_text(
      [&] { (void)qo::quantize_model(dir / "ov.onnx", dir / "ov_q.onnx", cfg, reader); });
  CHECK(text.find("TensorQuantOverrides.bb: no tensor of that name") != std::string::npos);
  CHECK(text.find("SimplifyModel") != std::string::npos);
  CHECK_FALSE(fs::exists(dir / "ov_q.onnx"));
  // Without SimplifyModel the tensor is there and the override applies.
  cfg.extra_options.set("SimplifyModel", false);
  qo::memory_reader again(calib);
  const auto r = qo::quantize_model(dir / "ov.onnx", dir / "ov_q.onnx", cfg, again);
  const auto it = std::find_if(r.tensors.begin(), r.tensors.end(),
                               [](const qo::tensor_report& t) { return t.name == "bb"; });
  REQUIRE(it != r.tensors.end());
  CHECK(it->type == "int8");
}

TEST_CASE("SimplifyModel does not repair malformed nodes: the error names them as before") {
  // Two rank-2 permutations of a rank-4 value cancel on paper; a Reshape to 100 of 72 values
  // followed by a valid Reshape merges on paper. Both models are invalid and stay refused.
  const fs::path dir = work_dir();
  auto refused = [&](const ::onnx::ModelProto& m, const std::string& tag) {
    save_proto(m, dir / (tag + ".onnx"));
    const auto calib = samples();
    qo::memory_reader reader(calib);
    const fs::path out = dir / (tag + "_q.onnx");
    const std::string text =
        error_text([&] { (void)qo::quantize_model(dir / (tag + ".onnx"), out, config(), reader); });
    CHECK_FALSE(fs::exists(out));
    return text;
  };
  {
    model_builder b(13);
    b.input("x", onnx_type::float32, {1, 2, 6, 6});
    b.node("Transpose", {"x"}, {"t1"}, {attr_ints("perm", {1, 0})});
    b.node("Transpose", {"t1"}, {"t2"}, {attr_ints("perm", {1, 0})});
    b.node("Relu", {"t2"}, {"y"});
    b.output("y", onnx_type::float32, {1, 2, 6, 6});
    const std::string text = refused(b.build(), "bad_perm");
    CAPTURE(text);
    CHECK(text.find("Transpose") != std::string::npos);
  }
  {
    model_builder b(13);
    b.input("x", onnx_type::float32, {1, 2, 6, 6});
    b.initializer("bad", onnx_type::int64, {2}, std::vector<std::int64_t>{1, 100});
    b.initializer("good", onnx_type::int64, {2}, std::vector<std::int64_t>{1, 72});
    b.node("Reshape", {"x", "bad"}, {"r1"});
    b.node("Reshape", {"r1", "good"}, {"y"});
    b.output("y", onnx_type::float32, {1, 72});
    const std::string text = refused(b.build(), "bad_reshape");
    CAPTURE(text);
    CHECK(text.find("Reshape") != std::string::npos);
  }
  {
    // A one-input Concat whose axis is a float attribute: malformed, not removed.
    model_builder b(13);
    b.input("x", onnx_type::float32, {1, 2, 6, 6});
    b.node("Concat", {"x"}, {"c"}, {attr_float("axis", 1.0f)});
    b.node("Relu", {"c"}, {"y"});
    b.output("y", onnx_type::float32, {1, 2, 6, 6});
    const std::string text = refused(b.build(), "bad_concat");
    CAPTURE(text);
    CHECK(text.find("Concat") != std::string::npos);
  }
}

TEST_CASE("SimplifyModel: opset-12 Dropout with constant ratio and training_mode inputs") {
  // training_mode false: an identity in inference, removed; true: a training Dropout, kept, and
  // the runtime refuses it by name.
  auto build = [](bool training) {
    model_builder b(13);
    b.input("x", onnx_type::float32, {1, 2, 6, 6});
    b.initializer("ratio", onnx_type::float32, {}, std::vector<float>{0.3f});
    b.initializer("train", onnx_type::boolean, {},
                  std::vector<std::uint8_t>{static_cast<std::uint8_t>(training ? 1 : 0)});
    b.initializer("w", onnx_type::float32, {2, 2, 1, 1}, random_floats(4, 8, -1.0f, 1.0f));
    b.node("Conv", {"x", "w"}, {"c"});
    b.node("Dropout", {"c", "ratio", "train"}, {"d"});
    b.node("Relu", {"d"}, {"y"});
    b.output("y", onnx_type::float32, {1, 2, 6, 6});
    return b.build();
  };
  const auto q = quantize(build(false), config(), "dropout_eval");
  CHECK(float_ops(q.model).count("Dropout") == 0);
  CHECK(has_note(q.report, "SimplifyModel: Identity / Dropout removed: 1"));
  const fs::path dir = work_dir();
  save_proto(build(true), dir / "dropout_train.onnx");
  const auto calib = samples();
  qo::memory_reader reader(calib);
  const std::string text = error_text([&] {
    (void)qo::quantize_model(dir / "dropout_train.onnx", dir / "dropout_train_q.onnx", config(),
                             reader);
  });
  CAPTURE(text);
  CHECK(text.find("Dropout") != std::string::npos);
  CHECK_FALSE(fs::exists(dir / "dropout_train_q.onnx"));
}

TEST_CASE("SimplifyModel: Shape with opset 15's start / end folds to the dimensions asked for") {
  // Shape(x, start = -2) of x [1, 2, 6, 6] is [6, 6] (hand-derived); Expand(c, [6, 6]) is added
  // to the Conv's output by broadcasting.
  model_builder b(15);
  b.input("x", onnx_type::float32, {1, 2, 6, 6});
  b.initializer("w", onnx_type::float32, {2, 2, 1, 1}, random_floats(4, 8, -1.0f, 1.0f));
  b.initializer("cst", onnx_type::float32, {1}, std::vector<float>{0.25f});
  b.node("Conv", {"x", "w"}, {"c"});
  b.node("Shape", {"x"}, {"s"}, {attr_int("start", -2)});
  b.node("Expand", {"cst", "s"}, {"e"});
  b.node("Add", {"c", "e"}, {"y"});
  b.output("y", onnx_type::float32, {1, 2, 6, 6});
  const auto fm = b.build();
  const auto q = quantize(fm, config(), "shape_start");
  CHECK(float_ops(q.model).count("Shape") == 0);
  CHECK(has_note(q.report, "SimplifyModel: Shape / Size folded: 1"));
  // The Expand read the folded shape and was folded in turn: a constant [6, 6] of 0.25.
  CHECK(float_ops(q.model).count("Expand") == 0);
  const auto* e = find_init(q.model, "e");
  REQUIRE(e != nullptr);
  CHECK(std::vector<std::int64_t>(e->dims().begin(), e->dims().end()) ==
        std::vector<std::int64_t>{6, 6});
  if (ort_available()) {
    const auto got = ort_y(q.model);
    REQUIRE(got.size() == 72u);
    qo::qconfig off = config();
    off.extra_options.set("SimplifyModel", false);
    const auto plain = quantize(fm, off, "shape_start_plain");
    const auto want = ort_y(plain.model);
    REQUIRE(want.size() == got.size());
    for (std::size_t i = 0; i < got.size(); ++i)
      CHECK(static_cast<double>(got[i]) ==
            doctest::Approx(static_cast<double>(want[i])).epsilon(1e-6));
  }
}
