// SPDX-License-Identifier: MIT
// SimulateDPU (docs/config.md §7.5; quark-spec §9.2). The expected edits are derived by hand from
// the spec: LeakyRelu 0.1 -> 26/256, a Sigmoid becomes HardSigmoid(1/6), every HardSigmoid(1/6,
// 0.5) is followed by a Mul by 16386/16384, a 3x3 AveragePool and a GlobalAveragePool over 6x6 by
// 0.984375 (the DPU's 9*7/64 and 36*7/256), a ReduceMean over 4 values by 1 (a power of two), Clip
// bounds -0.4 / 200.7 -> 0 / 127. Every quantized model runs in ONNX Runtime 1.30 and agrees with
// quark-cpp's runtime.
#include <algorithm>
#include <cmath>
#include <filesystem>
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

/// x [1, 2, 6, 6] -> Conv (4 channels, 3x3, pads 1) -> LeakyRelu(0.1) -> AveragePool 3x3 (stride
/// 1, pads 1) -> Relu -> {Sigmoid, HardSigmoid(1/6, 0.5)} -> Add -> {GlobalAveragePool -> g,
/// ReduceMean over axis 1 -> Clip(-0.4, 200.7) -> y}. `dynamic` leaves H and W symbolic.
::onnx::ModelProto dpu_model(float leaky_alpha = 0.1f, bool dynamic = false) {
  model_builder b(13);
  if (dynamic)
    b.input("x", onnx_type::float32, {1, 2, -1, -1});
  else
    b.input("x", onnx_type::float32, {1, 2, 6, 6});
  b.initializer("w", onnx_type::float32, {4, 2, 3, 3}, random_floats(72, 5, -0.5f, 0.5f));
  b.initializer("bias", onnx_type::float32, {4}, std::vector<float>{0.1f, -0.2f, 0.05f, 0.0f});
  b.initializer("lo", onnx_type::float32, {}, std::vector<float>{-0.4f});
  b.initializer("hi", onnx_type::float32, {}, std::vector<float>{200.7f});
  b.node("Conv", {"x", "w", "bias"}, {"c"}, {attr_ints("pads", {1, 1, 1, 1})});
  b.node("LeakyRelu", {"c"}, {"l"}, {attr_float("alpha", leaky_alpha)});
  b.node("AveragePool", {"l"}, {"p"},
         {attr_ints("kernel_shape", {3, 3}), attr_ints("pads", {1, 1, 1, 1})});
  b.node("Relu", {"p"}, {"r"}, {});
  b.node("Sigmoid", {"r"}, {"s"}, {});
  b.node("HardSigmoid", {"r"}, {"h"}, {attr_float("alpha", 1.0f / 6.0f), attr_float("beta", 0.5f)});
  b.node("Add", {"s", "h"}, {"a"}, {});
  b.node("GlobalAveragePool", {"a"}, {"g"}, {});
  b.node("ReduceMean", {"a"}, {"m"}, {attr_ints("axes", {1})});
  b.node("Clip", {"m", "lo", "hi"}, {"y"}, {});
  b.output("g", onnx_type::float32, {1, 4, 1, 1});
  b.output("y", onnx_type::float32, {1, 1, dynamic ? -1 : 6, dynamic ? -1 : 6});
  ::onnx::ModelProto m = b.build();
  const char* names[] = {"conv", "leaky", "pool", "relu", "sigmoid",
                         "hsig", "add",   "gap",  "mean", "clip"};
  for (int i = 0; i < m.graph().node_size(); ++i)
    m.mutable_graph()->mutable_node(i)->set_name(names[i]);
  return m;
}

struct quantized {
  ::onnx::ModelProto model;
  qo::quantize_report report;
};

quantized quantize(const ::onnx::ModelProto& fm, const qo::qconfig& cfg, const std::string& tag) {
  const fs::path dir = work_dir();
  save_proto(fm, dir / (tag + ".onnx"));
  std::vector<qo::calib_sample> calib;
  for (std::uint32_t s = 0; s < 2; ++s) {
    calib.push_back({{"x", qo::tensor::from_floats(x_shape, random_floats(72, 40 + s, -2, 2))}});
  }
  qo::memory_reader reader(calib);
  quantized q;
  q.report = qo::quantize_model(dir / (tag + ".onnx"), dir / (tag + "_q.onnx"), cfg, reader);
  q.model = load_proto(dir / (tag + "_q.onnx"));
  return q;
}

/// The node writing `value`, or nullptr.
const ::onnx::NodeProto* producer(const ::onnx::ModelProto& m, const std::string& value) {
  for (const auto& n : m.graph().node()) {
    if (std::find(n.output().begin(), n.output().end(), value) != n.output().end())
      return &n;
  }
  return nullptr;
}

/// The factor of the DPU Mul inserted after node `name`, or NaN when there is none. Checks the
/// wiring: the node writes `<y>_Mul`, a Mul of that name reads it and a Constant, writes `<y>`
/// (which the Q/DQ pair quantizes; for a graph output `<y>` is the Q's renamed input).
double dpu_factor(const ::onnx::ModelProto& m, const std::string& name) {
  const auto* n = node_named(m, name);
  REQUIRE_MESSAGE(n != nullptr, name);
  const std::string mid = n->output(0);
  const auto* mul = node_named(m, mid);
  if (mul == nullptr || mul->op_type() != "Mul")
    return std::nan("");
  REQUIRE(mid.size() > 4);
  CHECK(mid.substr(mid.size() - 4) == "_Mul");
  REQUIRE(mul->input_size() == 2);
  CHECK(mul->input(0) == mid);
  CHECK(mul->output(0) == mid.substr(0, mid.size() - 4));
  const auto* c = producer(m, mul->input(1));
  REQUIRE(c != nullptr);
  REQUIRE(c->op_type() == "Constant");
  const auto& t = c->attribute(0).t();
  CHECK(t.dims_size() == 0);
  REQUIRE(t.float_data_size() == 1);
  return static_cast<double>(t.float_data(0));
}

float float_attribute(const ::onnx::NodeProto& n, const std::string& name) {
  for (const auto& a : n.attribute()) {
    if (a.name() == name)
      return a.f();
  }
  return std::nanf("");
}

std::size_t count_op(const ::onnx::ModelProto& m, const std::string& op) {
  return static_cast<std::size_t>(
      std::count_if(m.graph().node().begin(), m.graph().node().end(),
                    [&](const ::onnx::NodeProto& n) { return n.op_type() == op; }));
}

bool has_note(const qo::quantize_report& r, const std::string& text) {
  return std::any_of(r.notes.begin(), r.notes.end(),
                     [&](const std::string& n) { return n.find(text) != std::string::npos; });
}

/// ORT runs `qm` and agrees with quark-cpp's runtime on both outputs.
void check_in_ort(const ::onnx::ModelProto& qm) {
  if (!ort_available()) {
    MESSAGE("skipped ORT comparison: " << ort_unavailable_reason());
    return;
  }
  const auto x = random_floats(72, 77, -2.0f, 2.0f);
  const auto theirs = run_ort(qm, {npy_array::from(x, {1, 2, 6, 6})});
  const fs::path p = work_dir() / "simulated.onnx";
  save_proto(qm, p);
  const auto ours = qo::run_model(p, {{"x", qo::tensor::from_floats(x_shape, x)}});
  for (const char* out : {"g", "y"}) {
    CAPTURE(out);
    const auto t = theirs.at(out).values<float>();
    const auto o = ours.at(out).data<float>();
    REQUIRE(o.size() == t.size());
    CHECK(quark::metrics::cosine(std::vector<float>(o.begin(), o.end()), t) >= 0.9999);
  }
}

}  // namespace

TEST_CASE("SimulateDPU in the XINT8 flow: LeakyRelu, Sigmoid, HardSigmoid, pools, ReduceMean") {
  const auto fm = dpu_model();
  const auto q = quantize(fm, qo::get_default_config("XINT8"), "dpu_xint8");
  const auto& m = q.model;
  // LeakyRelu's alpha in 1/256 steps.
  const auto* leaky = node_named(m, "leaky");
  REQUIRE(leaky != nullptr);
  CHECK(float_attribute(*leaky, "alpha") == 26.0f / 256.0f);
  // The Sigmoid is a HardSigmoid(1/6) under its own name, scaled like the other HardSigmoid.
  const auto* sig = node_named(m, "sigmoid");
  REQUIRE(sig != nullptr);
  CHECK(sig->op_type() == "HardSigmoid");
  CHECK(float_attribute(*sig, "alpha") == static_cast<float>(1.0 / 6.0));
  CHECK(count_op(m, "Sigmoid") == 0);
  CHECK(count_op(m, "HardSigmoid") == 2);
  CHECK(sig->output(0) == "s_Mul");
  CHECK(dpu_factor(m, "sigmoid") == 16386.0 / 16384.0);
  CHECK(dpu_factor(m, "hsig") == 16386.0 / 16384.0);
  // Pools: 3x3 kernel and a 6x6 global pool; ReduceMean over 4 channels (a power of two).
  CHECK(dpu_factor(m, "pool") == 0.984375);
  CHECK(dpu_factor(m, "gap") == 0.984375);
  CHECK(dpu_factor(m, "mean") == 1.0);
  // The pool's Q/DQ pair quantizes the scaled value.
  CHECK(node_named(m, "p_QuantizeLinear")->input(0) == "p");
  // ConvertClipToDPUVersion is off by default: the bounds are the float ones.
  const auto* clip = node_named(m, "clip");
  REQUIRE(clip != nullptr);
  CHECK(floats_of(*find_init(m, clip->input(1))) == std::vector<float>{-0.4f});
  CHECK(has_note(q.report,
                 "SimulateDPU: 1 LeakyRelu with alpha in 1/256 steps, 1 Sigmoid -> "
                 "HardSigmoid(1/6, 0.5), 2 HardSigmoids scaled by 16386/16384, "
                 "2 average pools scaled by the DPU's 1/k, 1 ReduceMean"));
  // No marker is left behind.
  for (const auto& n : m.graph().node()) {
    for (const auto& a : n.attribute())
      CHECK(a.name() != "quark_cpp_dpu_edit");
  }
  check_in_ort(m);

  SUBCASE("the NPU rules see the converted Sigmoid as a HardSigmoid (AdjustHardSigmoid)") {
    // AdjustHardSigmoid: input position in [0, 15], output position >= 7 (quark-spec §9.3).
    const auto pos = [&](const std::string& t) {
      const auto* qn = node_named(m, t + "_QuantizeLinear");
      REQUIRE_MESSAGE(qn != nullptr, t);
      return -static_cast<int>(std::lround(std::log2(floats_of(*find_init(m, qn->input(1)))[0])));
    };
    CHECK(pos("s") >= 7);
    CHECK(pos("r") >= 0);
    CHECK(pos("r") <= 15);
  }
}

TEST_CASE("SimulateDPU: switches, flows and exclusion") {
  const auto fm = dpu_model();
  SUBCASE("SimulateDPU false keeps the graph as quantized") {
    qo::qconfig cfg = qo::get_default_config("XINT8");
    cfg.extra_options.set("SimulateDPU", false);
    const auto q = quantize(fm, cfg, "dpu_off");
    CHECK(count_op(q.model, "Sigmoid") == 1);
    CHECK(count_op(q.model, "Constant") == 0);
    CHECK(float_attribute(*node_named(q.model, "leaky"), "alpha") == 0.1f);
    CHECK(!has_note(q.report, "SimulateDPU"));
  }
  SUBCASE("each conversion has its own key") {
    qo::qconfig cfg = qo::get_default_config("XINT8");
    cfg.extra_options.set("ConvertSigmoidToHardSigmoid", false);
    cfg.extra_options.set("ConvertAvgPoolToDPUVersion", false);
    const auto q = quantize(fm, cfg, "dpu_some");
    CHECK(count_op(q.model, "Sigmoid") == 1);
    CHECK(std::isnan(dpu_factor(q.model, "sigmoid")));
    CHECK(std::isnan(dpu_factor(q.model, "pool")));
    CHECK(std::isnan(dpu_factor(q.model, "gap")));
    CHECK(dpu_factor(q.model, "hsig") == 16386.0 / 16384.0);
    CHECK(dpu_factor(q.model, "mean") == 1.0);
    check_in_ort(q.model);
  }
  SUBCASE("A8W8 converts nothing unless asked; an unquantized HardSigmoid is scaled too") {
    const auto q0 = quantize(fm, qo::get_default_config("A8W8"), "dpu_a8w8");
    CHECK(count_op(q0.model, "Constant") == 0);
    qo::qconfig cfg = qo::get_default_config("A8W8");
    cfg.extra_options.set("ConvertHardSigmoidToDPUVersion", true);
    cfg.extra_options.set("ConvertAvgPoolToDPUVersion", true);
    const auto q = quantize(fm, cfg, "dpu_a8w8_on");
    // HardSigmoid is not among A8W8's quantized op types; Quark's should_simulate_node still
    // scales it. The pools are quantized, so they are scaled.
    CHECK(dpu_factor(q.model, "hsig") == 16386.0 / 16384.0);
    CHECK(dpu_factor(q.model, "pool") == 0.984375);
    CHECK(dpu_factor(q.model, "gap") == 0.984375);
    CHECK(std::isnan(dpu_factor(q.model, "sigmoid")));  // Sigmoid stays (its key is off here)
    check_in_ort(q.model);
  }
  SUBCASE("nodes excluded by name are left alone") {
    qo::qconfig cfg = qo::get_default_config("XINT8");
    cfg.exclude.push_back(qo::node_selector::parse("hsig"));
    cfg.exclude.push_back(qo::node_selector::parse("pool"));
    const auto q = quantize(fm, cfg, "dpu_excluded");
    CHECK(std::isnan(dpu_factor(q.model, "hsig")));
    CHECK(std::isnan(dpu_factor(q.model, "pool")));
    CHECK(dpu_factor(q.model, "sigmoid") == 16386.0 / 16384.0);
    check_in_ort(q.model);
  }
  SUBCASE("ConvertClipToDPUVersion: integer bounds in [-128, 127], of the Clip's own") {
    qo::qconfig cfg = qo::get_default_config("XINT8");
    cfg.extra_options.set("ConvertClipToDPUVersion", true);
    const auto q = quantize(fm, cfg, "dpu_clip");
    const auto* clip = node_named(q.model, "clip");
    REQUIRE(clip != nullptr);
    REQUIRE(clip->input_size() == 3);
    CHECK(clip->input(1) == "clip_dpu_min");
    CHECK(floats_of(*find_init(q.model, clip->input(1))) == std::vector<float>{0.0f});
    CHECK(floats_of(*find_init(q.model, clip->input(2))) == std::vector<float>{127.0f});
    CHECK(find_init(q.model, "lo") == nullptr);  // no other reader: dropped
    CHECK(has_note(q.report, "SimulateDPU: 1 Clip with integer bounds"));
    check_in_ort(q.model);
  }
  SUBCASE("ConvertClipToDPUVersion leaves a Clip whose bound is computed alone, with a note") {
    model_builder b(13);
    b.input("x", onnx_type::float32, {1, 2, 6, 6});
    b.initializer("lo", onnx_type::float32, {}, std::vector<float>{-0.4f});
    b.node("ReduceMax", {"x"}, {"mx"}, {attr_int("keepdims", 0)});
    b.node("Clip", {"x", "lo", "mx"}, {"y"});
    b.output("y", onnx_type::float32, {1, 2, 6, 6});
    qo::qconfig cfg = qo::get_default_config("XINT8");
    cfg.extra_options.set("ConvertClipToDPUVersion", true);
    const auto q = quantize(b.build(), cfg, "dpu_clip_computed");
    const auto* clip = node_named(q.model, "n1");
    REQUIRE(clip != nullptr);
    CHECK(clip->input(1) != "n1_dpu_min");
    CHECK(has_note(q.report, "SimulateDPU: 1 Clip left as they are (node 'n1' (Clip)"));
    CHECK(has_note(q.report, "needs bounds given as float initializers"));
  }
  SUBCASE("LeakyRelu alpha 0.01 -> 3/256; 1.5/256 -> 2/256 (half to even)") {
    for (const auto& [alpha, expected] :
         {std::pair{0.01f, 3.0f / 256.0f}, std::pair{1.5f / 256.0f, 2.0f / 256.0f}}) {
      const auto q = quantize(dpu_model(alpha), qo::get_default_config("XINT8"), "dpu_alpha");
      CHECK(float_attribute(*node_named(q.model, "leaky"), "alpha") == expected);
    }
  }
}

TEST_CASE("SimulateDPU: unknown sizes and bad input") {
  SUBCASE("a global pool over a symbolic H x W is left unscaled, with a note") {
    const auto fm = dpu_model(0.1f, true);
    const auto q = quantize(fm, qo::get_default_config("XINT8"), "dpu_dynamic");
    CHECK(std::isnan(dpu_factor(q.model, "gap")));
    CHECK(dpu_factor(q.model, "pool") == 0.984375);  // the kernel is known
    CHECK(dpu_factor(q.model, "mean") == 1.0);       // 4 channels are known
    CHECK(has_note(q.report, "SimulateDPU: 1 average pool left unscaled (node 'gap'"));
    check_in_ort(q.model);
  }
  SUBCASE("a non-finite LeakyRelu alpha is an error naming the node; nothing is written") {
    const auto fm = dpu_model(std::nanf(""));
    const fs::path out = work_dir() / "dpu_nan_q.onnx";
    fs::remove(out);
    std::string msg;
    try {
      (void)quantize(fm, qo::get_default_config("XINT8"), "dpu_nan");
    } catch (const quark::error& e) {
      msg = e.what();
    }
    CHECK(msg.find("quark.quantize.non_finite") != std::string::npos);
    CHECK(msg.find("node 'leaky' (LeakyRelu)") != std::string::npos);
    CHECK(!fs::exists(out));
  }
}
