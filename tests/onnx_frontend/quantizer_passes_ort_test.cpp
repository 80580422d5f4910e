// SPDX-License-Identifier: MIT
// The quantizer's graph passes (onnx_frontend/src/quantizer/graph_passes.cpp), through
// quantize_model:
//  * OptimizeModel / FoldBatchNorm (constant folding, Identity removal, BatchNormalization and
//    Conv + Mul / Add folds): with every node excluded from quantization the output is the
//    optimised float model. ONNX Runtime 1.30 runs the original and the optimised model on the
//    same input and they agree within float rounding; our runtime agrees too; the folded nodes are
//    gone.
//  * RemoveQDQConvRelu and friends: the Q/DQ pair between the producer and the consumer is gone,
//    the consumer's output keeps its own parameters, and the model still runs in ORT.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <doctest/doctest.h>

// support/ort.hpp first: inside quark::test, "onnx::" must find ::onnx, not quark::onnx.
#include <quark/onnx/config.hpp>
#include <quark/onnx/presets.hpp>
#include <quark/onnx/quantizer.hpp>

#include "support/model_files.hpp"
#include "support/ort.hpp"

namespace fs = std::filesystem;
namespace qo = quark::onnx;
using namespace quark::test;

namespace {

/// Every fold of OptimizeModel in one chain (opset 11, as PaddleOCR's det):
/// Conv(bias) -> BN -> Relu -> Conv(no bias) -> Mul(scalar) -> Add([1,8,1,1]) -> Identity
/// -> ConvTranspose(group 2, no bias) -> Add([1,4,1,1]) -> BN -> y, plus a Concat of two Convs
/// followed by BN (Concat folding) that is added to y through a Conv-free branch.
::onnx::ModelProto fold_model() {
  model_builder b(11);
  b.input("x", onnx_type::float32, {1, 4, 6, 6});
  b.initializer("w1", onnx_type::float32, {6, 4, 3, 3}, random_floats(216, 1, -0.4f, 0.4f));
  b.initializer("b1", onnx_type::float32, {6}, random_floats(6, 2, -0.2f, 0.2f));
  bn_params(b, "bn1", 6, 10);
  b.initializer("w2", onnx_type::float32, {8, 6, 1, 1}, random_floats(48, 3, -0.5f, 0.5f));
  b.initializer("k", onnx_type::float32, {1}, std::vector<float>{1.75f});
  b.initializer("sh", onnx_type::float32, {1, 8, 1, 1}, random_floats(8, 4, -0.3f, 0.3f));
  b.initializer("wt", onnx_type::float32, {8, 2, 2, 2}, random_floats(64, 5, -0.5f, 0.5f));
  b.initializer("tb", onnx_type::float32, {1, 4, 1, 1}, random_floats(4, 6, -0.3f, 0.3f));
  bn_params(b, "bn2", 4, 20);
  b.initializer("wa", onnx_type::float32, {3, 4, 1, 1}, random_floats(12, 7, -0.5f, 0.5f));
  b.initializer("ba", onnx_type::float32, {3}, random_floats(3, 8, -0.2f, 0.2f));
  b.initializer("wb", onnx_type::float32, {5, 4, 1, 1}, random_floats(20, 9, -0.5f, 0.5f));
  bn_params(b, "bn3", 8, 30);
  b.node("Conv", {"x", "w1", "b1"}, {"c1"}, {attr_ints("pads", {1, 1, 1, 1})});
  b.node("BatchNormalization", {"c1", "bn1_s", "bn1_b", "bn1_m", "bn1_v"}, {"n1"},
         {attr_float("epsilon", 1e-3f)});
  b.node("Relu", {"n1"}, {"r1"});
  b.node("Conv", {"r1", "w2"}, {"c2"});
  b.node("Mul", {"k", "c2"}, {"m2"});
  b.node("Add", {"m2", "sh"}, {"a2"});
  b.node("Identity", {"a2"}, {"i2"});
  b.node("ConvTranspose", {"i2", "wt"}, {"t3"},
         {attr_int("group", 2), attr_ints("strides", {2, 2})});
  b.node("Add", {"t3", "tb"}, {"a3"});
  b.node("BatchNormalization", {"a3", "bn2_s", "bn2_b", "bn2_m", "bn2_v"}, {"y"});
  b.node("Conv", {"x", "wa", "ba"}, {"ca"});
  b.node("Conv", {"x", "wb"}, {"cb"});
  b.node("Concat", {"ca", "cb"}, {"cc"}, {attr_int("axis", 1)});
  b.node("BatchNormalization", {"cc", "bn3_s", "bn3_b", "bn3_m", "bn3_v"}, {"z"});
  b.output("y", onnx_type::float32, {1, 4, 12, 12});
  b.output("z", onnx_type::float32, {1, 8, 6, 6});
  return b.build();
}

/// Gemm(transB, alpha, beta, bias) -> BN.
::onnx::ModelProto gemm_model() {
  model_builder b(11);
  b.input("x", onnx_type::float32, {3, 5});
  b.initializer("w", onnx_type::float32, {4, 5}, random_floats(20, 1));
  b.initializer("c", onnx_type::float32, {4}, random_floats(4, 2));
  bn_params(b, "bn", 4, 3);
  b.node("Gemm", {"x", "w", "c"}, {"g"},
         {attr_int("transB", 1), attr_float("alpha", 0.5f), attr_float("beta", 2.0f)});
  b.node("BatchNormalization", {"g", "bn_s", "bn_b", "bn_m", "bn_v"}, {"y"});
  b.output("y", onnx_type::float32, {3, 4});
  return b.build();
}

std::map<std::string, std::size_t> op_counts(const ::onnx::ModelProto& m) {
  std::map<std::string, std::size_t> c;
  for (const auto& n : m.graph().node())
    ++c[n.op_type()];
  return c;
}

qo::qconfig float_only(const char* preset) {
  qo::qconfig cfg = qo::get_default_config(preset);
  cfg.exclude.push_back(qo::node_selector::parse("^.*"));  // nothing quantized
  return cfg;
}

/// Runs the optimisation of `cfg` on `fm` and returns the optimised model.
::onnx::ModelProto optimise(const ::onnx::ModelProto& fm, const qo::qconfig& cfg,
                            const std::string& input, const qo::shape_t& shape,
                            const std::string& tag) {
  const fs::path dir = work_dir();
  save_proto(fm, dir / (tag + "_in.onnx"));
  std::vector<qo::calib_sample> calib;
  calib.push_back(
      {{input, qo::tensor::from_floats(shape, random_floats(qo::element_count(shape), 7))}});
  qo::memory_reader reader(calib);
  qo::quantize_model(dir / (tag + "_in.onnx"), dir / (tag + "_out.onnx"), cfg, reader);
  return load_proto(dir / (tag + "_out.onnx"));
}

/// Quantizes `m` (input x of `xshape`, one random sample) with `cfg` into
/// work_dir()/<tag>_q.onnx; returns quantize_model's frontend_error message ("" when it succeeds)
/// and whether the output file exists afterwards.
std::pair<std::string, bool> quantize_message(const ::onnx::ModelProto& m,
                                              const qo::shape_t& xshape, const qo::qconfig& cfg,
                                              const std::string& tag) {
  const fs::path dir = work_dir();
  const fs::path in = dir / (tag + ".onnx");
  const fs::path out = dir / (tag + "_q.onnx");
  save_proto(m, in);
  fs::remove(out);
  std::vector<qo::calib_sample> calib;
  calib.push_back(
      {{"x", qo::tensor::from_floats(xshape, random_floats(qo::element_count(xshape), 4))}});
  qo::memory_reader reader(calib);
  std::string message;
  try {
    qo::quantize_model(in, out, cfg, reader);
  } catch (const qo::frontend_error& e) {
    message = e.what();
  }
  return {message, fs::exists(out)};
}

std::size_t quantize_nodes_reading(const ::onnx::ModelProto& m, const std::string& x) {
  std::size_t k = 0;
  for (const auto& n : m.graph().node())
    k += n.op_type() == "QuantizeLinear" && n.input(0) == x ? 1u : 0u;
  return k;
}

}  // namespace

TEST_CASE("OptimizeModel folds BatchNormalization, Conv+Mul/Add and Identity exactly") {
  if (!ort_available()) {
    MESSAGE("skipped: " << ort_unavailable_reason());
    return;
  }
  const auto fm = fold_model();
  const auto om = optimise(fm, float_only("A8W8"), "x", {1, 4, 6, 6}, "fold");
  const auto c = op_counts(om);
  CHECK(c.count("BatchNormalization") == 0);
  CHECK(c.count("Mul") == 0);
  CHECK(c.count("Add") == 0);
  CHECK(c.count("Identity") == 0);
  CHECK(c.at("Conv") == 4);
  CHECK(c.at("ConvTranspose") == 1);
  CHECK(c.at("Concat") == 1);
  CHECK(c.at("Relu") == 1);
  // The BN / Mul / Add parameters no node reads any more are gone from the file.
  for (const auto& t : om.graph().initializer()) {
    CHECK(t.name().rfind("bn", 0) != 0);
    CHECK(t.name() != "k");
  }
  check_same_function(fm, om, {1, 4, 6, 6}, 1e-5);

  SUBCASE("FoldBatchNorm false keeps BatchNormalization, OptimizeModel false keeps everything") {
    auto cfg = float_only("A8W8");
    cfg.extra_options.set("FoldBatchNorm", false);
    const auto c2 = op_counts(optimise(fm, cfg, "x", {1, 4, 6, 6}, "nobn"));
    CHECK(c2.at("BatchNormalization") == 3);
    CHECK(c2.count("Mul") == 0);
    cfg.extra_options.set("OptimizeModel", false);
    cfg.extra_options.set("SimplifyModel", false);  // it would remove the Identity
    CHECK(op_counts(optimise(fm, cfg, "x", {1, 4, 6, 6}, "noopt")) == op_counts(fm));
    // VINT8 sets OptimizeModel false (seed 000): nothing is folded.
    auto vint8 = float_only("VINT8");
    vint8.extra_options.set("SimplifyModel", false);
    CHECK(op_counts(optimise(fm, vint8, "x", {1, 4, 6, 6}, "vint8")) == op_counts(fm));
  }
}

TEST_CASE("FoldBatchNorm folds into Gemm with alpha, beta and transB") {
  if (!ort_available()) {
    MESSAGE("skipped: " << ort_unavailable_reason());
    return;
  }
  const auto fm = gemm_model();
  const auto om = optimise(fm, float_only("A8W8"), "x", {3, 5}, "gemm");
  CHECK(op_counts(om).count("BatchNormalization") == 0);
  check_same_function(fm, om, {3, 5}, 1e-5);
}

TEST_CASE("OptimizeModel folds nodes whose inputs are all constant") {
  if (!ort_available()) {
    MESSAGE("skipped: " << ort_unavailable_reason());
    return;
  }
  // y = Reshape(x * (a + b), Concat(s0, s1)): the Add and the int64 Concat are constant; the
  // result folds to an initializer; x's Mul and the Reshape stay.
  model_builder b(13);
  b.input("x", onnx_type::float32, {2, 6});
  b.initializer("a", onnx_type::float32, {6}, random_floats(6, 1));
  b.initializer("b", onnx_type::float32, {6}, random_floats(6, 2));
  b.initializer("s0", onnx_type::int64, {1}, std::vector<std::int64_t>{3});
  b.initializer("s1", onnx_type::int64, {1}, std::vector<std::int64_t>{4});
  b.node("Add", {"a", "b"}, {"ab"});
  b.node("Mul", {"x", "ab"}, {"m"});
  b.node("Concat", {"s0", "s1"}, {"shape"}, {attr_int("axis", 0)});
  b.node("Reshape", {"m", "shape"}, {"y"});
  b.output("y", onnx_type::float32, {3, 4});
  const auto fm = b.build();
  const auto om = optimise(fm, float_only("A8W8"), "x", {2, 6}, "constfold");
  const auto c = op_counts(om);
  CHECK(c.count("Add") == 0);
  CHECK(c.count("Concat") == 0);
  CHECK(c.at("Mul") == 1);
  CHECK(c.at("Reshape") == 1);
  bool folded_value = false;
  for (const auto& t : om.graph().initializer())
    folded_value = folded_value || t.name() == "ab";
  CHECK(folded_value);
  check_same_function(fm, om, {2, 6}, 1e-6);
}

TEST_CASE("RemoveQDQConvRelu / RemoveQDQConvClip drop the Q/DQ between Conv and Relu/Clip") {
  if (!ort_available()) {
    MESSAGE("skipped: " << ort_unavailable_reason());
    return;
  }
  // Conv -> Relu -> Conv -> Clip(0, 6) -> y, opset 13.
  model_builder b(13);
  b.input("x", onnx_type::float32, {1, 3, 8, 8});
  b.initializer("w1", onnx_type::float32, {4, 3, 3, 3}, random_floats(108, 1, -0.5f, 0.5f));
  b.initializer("b1", onnx_type::float32, {4}, random_floats(4, 2, -0.1f, 0.1f));
  b.initializer("w2", onnx_type::float32, {4, 4, 1, 1}, random_floats(16, 3, -0.8f, 0.8f));
  b.initializer("lo", onnx_type::float32, {}, std::vector<float>{0.0f});
  b.initializer("hi", onnx_type::float32, {}, std::vector<float>{6.0f});
  b.node("Conv", {"x", "w1", "b1"}, {"c1"}, {attr_ints("pads", {1, 1, 1, 1})});
  b.node("Relu", {"c1"}, {"r1"});
  b.node("Conv", {"r1", "w2"}, {"c2"});
  b.node("Clip", {"c2", "lo", "hi"}, {"y"});
  b.output("y", onnx_type::float32, {1, 4, 8, 8});
  const auto fm = b.build();
  const fs::path dir = work_dir();
  save_proto(fm, dir / "relu.onnx");
  auto quantize = [&](qo::qconfig cfg, const std::string& tag, qo::quantize_report& r) {
    std::vector<qo::calib_sample> calib;
    for (std::uint32_t s = 0; s < 2; ++s) {
      calib.push_back({{"x", qo::tensor::from_floats({1, 3, 8, 8}, random_floats(192, 50 + s))}});
    }
    qo::memory_reader reader(calib);
    r = qo::quantize_model(dir / "relu.onnx", dir / (tag + ".onnx"), cfg, reader);
    return load_proto(dir / (tag + ".onnx"));
  };
  auto has_tensor = [](const qo::quantize_report& r, const std::string& n) {
    return std::any_of(r.tensors.begin(), r.tensors.end(),
                       [&](const auto& t) { return t.name == n; });
  };
  for (const char* preset : {"A8W8", "XINT8"}) {
    CAPTURE(preset);
    qo::quantize_report r;
    const auto qm = quantize(qo::get_default_config(preset), preset, r);
    // Defaults (seed 000): both removals on. The producers' outputs are float, the consumers'
    // outputs quantized with their own parameters.
    CHECK(quantize_nodes_reading(qm, "c1") == 0);
    CHECK(quantize_nodes_reading(qm, "c2") == 0);
    CHECK(quantize_nodes_reading(qm, "r1") == 1);
    CHECK(!has_tensor(r, "c1"));
    CHECK(!has_tensor(r, "c2"));
    CHECK(has_tensor(r, "r1"));
    bool scale_kept = false, scale_dropped = true;
    for (const auto& t : qm.graph().initializer()) {
      scale_kept = scale_kept || t.name() == "r1_scale";
      scale_dropped = scale_dropped && t.name() != "c1_scale";
    }
    CHECK(scale_kept);
    CHECK(scale_dropped);
    // The result runs in ORT and stays close to the float model.
    const std::vector<float> x = random_floats(192, 7);
    const auto a = run_ort(fm, {npy_array::from(x, {1, 3, 8, 8})}).at("y").values<float>();
    const auto q = run_ort(qm, {npy_array::from(x, {1, 3, 8, 8})}).at("y").values<float>();
    double dot = 0, na = 0, nq = 0;
    for (std::size_t i = 0; i < a.size(); ++i) {
      dot += static_cast<double>(a[i]) * static_cast<double>(q[i]);
      na += static_cast<double>(a[i]) * static_cast<double>(a[i]);
      nq += static_cast<double>(q[i]) * static_cast<double>(q[i]);
    }
    CHECK(dot / std::sqrt(na * nq) > 0.98);
  }
  SUBCASE("switched off, or only for the listed pairs") {
    auto cfg = qo::get_default_config("A8W8");
    cfg.extra_options.set("RemoveQDQConvRelu", false);
    qo::quantize_report r;
    auto qm = quantize(cfg, "off", r);
    CHECK(quantize_nodes_reading(qm, "c1") == 1);
    CHECK(quantize_nodes_reading(qm, "c2") == 0);
    cfg.extra_options.set("RemoveQDQConvClip", false);
    qm = quantize(cfg, "off2", r);
    CHECK(quantize_nodes_reading(qm, "c2") == 1);
    qo::option_value::array_type pairs;
    pairs.emplace_back(qo::option_value::array({"Conv", "Relu"}));
    cfg.extra_options.set("RemoveQDQBetweenOps", qo::option_value(pairs));
    qm = quantize(cfg, "pairs", r);
    CHECK(quantize_nodes_reading(qm, "c1") == 0);
    CHECK(quantize_nodes_reading(qm, "c2") == 1);
  }
  SUBCASE("VINT8 keeps them (its preset switches the removals off); dedicated pairs") {
    qo::quantize_report r;
    const auto qm = quantize(qo::get_default_config("VINT8"), "vint8", r);
    CHECK(quantize_nodes_reading(qm, "c1") == 1);
    auto cfg = qo::get_default_config("VINT8");
    cfg.extra_options.set("RemoveQDQConvRelu", true);
    const auto qm2 = quantize(cfg, "vint8_rm", r);
    CHECK(quantize_nodes_reading(qm2, "c1") == 0);
    const std::vector<float> x = random_floats(192, 7);
    CHECK(run_ort(qm2, {npy_array::from(x, {1, 3, 8, 8})}).at("y").values<float>().size() == 256u);
  }
}

TEST_CASE("FoldBatchNorm leaves malformed producers to the runtime's error (no crash)") {
  // A ConvTranspose whose group does not divide its input channels (or is 0 or negative), a Conv
  // or ConvTranspose whose bias has another size than its output channels, and a ConvTranspose
  // without input channels, each followed by a BatchNormalization that OptimizeModel would fold
  // into it. The fold divided by C_in / group (0 here: SIGFPE; found by clang-tidy's analyzer)
  // and read the bias per output channel (past its end), and the runtime's 2-D ConvTranspose read
  // a short bias past its end too. Now the fold skips such producers and the runtime refuses the
  // node by name during calibration, leaving no output file; the channel-less ConvTranspose (well
  // formed) is quantized.
  struct variant {
    const char* name;
    const char* op;
    std::vector<std::int64_t> wshape;
    std::int64_t group;
    std::int64_t bias;   // bias length, 0 for none
    std::int64_t bn;     // BatchNormalization channels
    bool valid = false;  // degenerate but well formed: quantized, not refused
  };
  const variant variants[] = {
      {"group_not_dividing_cin", "ConvTranspose", {1, 2, 1, 1}, 2, 0, 4},
      {"group_zero", "ConvTranspose", {4, 2, 1, 1}, 0, 0, 2},
      {"group_negative", "ConvTranspose", {4, 2, 1, 1}, -2, 0, 4},
      {"conv_bias_too_short", "Conv", {4, 3, 1, 1}, 1, 3, 4},
      {"conv_transpose_bias_too_short", "ConvTranspose", {3, 4, 1, 1}, 1, 2, 4},
      {"conv_transpose_no_input_channels", "ConvTranspose", {0, 2, 1, 1}, 1, 0, 2, true},
  };
  for (const variant& v : variants) {
    const std::string name = v.name;
    CAPTURE(name);
    const std::int64_t cin = std::string_view(v.op) == "Conv" ? v.wshape[1] : v.wshape[0];
    model_builder b(13);
    b.input("x", onnx_type::float32, {1, cin, 4, 4});
    std::size_t wn = 1;
    for (const auto d : v.wshape)
      wn *= static_cast<std::size_t>(d);
    b.initializer("w", onnx_type::float32, v.wshape, random_floats(wn, 1, -0.5f, 0.5f));
    std::vector<std::string> inputs{"x", "w"};
    if (v.bias > 0) {
      b.initializer("c", onnx_type::float32, {v.bias},
                    random_floats(static_cast<std::size_t>(v.bias), 2));
      inputs.emplace_back("c");
    }
    bn_params(b, "bn", v.bn, 3);
    b.node(v.op, inputs, {"t"}, {attr_int("group", v.group)});
    b.node("BatchNormalization", {"t", "bn_s", "bn_b", "bn_m", "bn_v"}, {"y"});
    b.output("y", onnx_type::float32, {1, v.bn, 4, 4});
    // A8W8: OptimizeModel and FoldBatchNorm on.
    const auto [message, written] = quantize_message(
        b.build(), {1, cin, 4, 4}, qo::get_default_config("A8W8"), "malformed_fold_" + name);
    MESSAGE(name << ": " << (message.empty() ? "quantized" : message));
    if (v.valid) {
      // No input channels: the ConvTranspose computes its bias (none: zeros); nothing to refuse.
      CHECK(message.empty());
      CHECK(written);
    } else {
      CHECK(message.find("node 'n0' (" + std::string(v.op) + ")") != std::string::npos);
      CHECK_FALSE(written);
    }
  }
}

TEST_CASE("malformed node patterns the passes read first: the node's error, no crash") {
  // Found by bench/onnx/pass_mutation_sweep.py (docs/bench/robustness.md, session 34) under ASan
  // + UBSan: a Conv kernel dimension 0 divided by zero in the runtime's im2col blocking, CLE
  // divided by an empty weight's channels, Split copied sizes past the axis before checking
  // their sum, and FoldRelu converted a NaN Clip bound to an integer code.
  const auto x4 = [](model_builder& b) { b.input("x", onnx_type::float32, {1, 4, 6, 6}); };
  struct variant {
    const char* name;
    const char* preset;
    bool cle;
    std::function<void(model_builder&)> build;
    const char* expect;  // part of the error message; "" when the model quantizes
  };
  const std::vector<variant> variants = {
      {"conv_empty_kernel", "A8W8", false,
       [&](model_builder& b) {
         x4(b);
         b.initializer("w", onnx_type::float32, {6, 4, 0, 3}, std::vector<float>{});
         b.node("Conv", {"x", "w"}, {"y"});
       },
       "node 'n0' (Conv): weight [6,4,0,3] has an empty kernel"},
      {"conv_transpose_empty_kernel", "A8W8", false,
       [&](model_builder& b) {
         x4(b);
         b.initializer("w", onnx_type::float32, {4, 2, 2, 0}, std::vector<float>{});
         b.node("ConvTranspose", {"x", "w"}, {"y"});
       },
       "node 'n0' (ConvTranspose): weight [4,2,2,0] has an empty kernel"},
      {"cle_empty_weight", "A8W8", true,
       [&](model_builder& b) {
         x4(b);
         b.initializer("w1", onnx_type::float32, {8, 0, 3, 3}, std::vector<float>{});
         b.initializer("w2", onnx_type::float32, {6, 8, 1, 1}, random_floats(48, 1));
         b.node("Conv", {"x", "w1"}, {"c1"});
         b.node("Relu", {"c1"}, {"r1"});
         b.node("Conv", {"r1", "w2"}, {"y"});
       },
       "node 'n0' (Conv)"},
      {"split_sizes_past_the_axis", "A8W8", false,
       [&](model_builder& b) {
         x4(b);
         b.initializer("s", onnx_type::int64, {2}, std::vector<std::int64_t>{2, 2});
         b.node("Split", {"x", "s"}, {"y", "z"}, {attr_int("axis", 0)});
       },
       "node 'n0' (Split): split size 2 is outside [0, 1]"},
      {"split_num_outputs_zero", "A8W8", false,
       [&](model_builder& b) {
         x4(b);
         b.node("Split", {"x"}, {"y", "z"}, {attr_int("axis", 1), attr_int("num_outputs", 0)});
       },
       "node 'n0' (Split): num_outputs must be positive"},
      {"clip_nan_bound_fold_relu", "A8W8", false,
       [&](model_builder& b) {
         x4(b);
         b.initializer("w", onnx_type::float32, {4, 4, 1, 1}, random_floats(16, 2));
         b.initializer("lo", onnx_type::float32, {}, std::vector<float>{std::nanf("")});
         b.node("Conv", {"x", "w"}, {"c"});
         b.node("Clip", {"c", "lo"}, {"y"});
       },
       ""},
  };
  for (const variant& v : variants) {
    const std::string name = v.name;
    CAPTURE(name);
    model_builder b(18);
    v.build(b);
    for (const char* o : {"y", "z"}) {
      if (name.rfind("split", 0) == 0 || std::string_view(o) == "y")
        b.output(o, onnx_type::float32, {});
    }
    qo::qconfig cfg = qo::get_default_config(v.preset);
    if (v.cle)
      cfg.algo_config.push_back({qo::algo_name::cle, qo::option_value::object()});
    const auto [message, written] =
        quantize_message(b.build(), {1, 4, 6, 6}, cfg, "malformed_pattern_" + name);
    MESSAGE(name << ": " << (message.empty() ? "quantized" : message));
    if (*v.expect == '\0') {
      CHECK(message.empty());
      CHECK(written);
    } else {
      CHECK(message.find(v.expect) != std::string::npos);
      CHECK_FALSE(written);
    }
  }
}
