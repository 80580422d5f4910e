// SPDX-License-Identifier: MIT
// The category-1 graph conversions of seed 000 (ConvertBNToConv, ConvertClipToRelu,
// ConvertSplitToSlice, ConvertReduceMeanToGlobalAvgPool, SplitLargeKernelPool) in the
// quantizer. Each model is quantized with the VINT8 preset plus AddQDQPairToWeight (weights stay
// float behind a Q/DQ pair) and QuantizeBias false, so removing every QuantizeLinear ->
// DequantizeLinear pair from the result gives back the converted float graph. The oracle is ONNX
// Runtime 1.30: the converted float graph and the original model agree on random inputs (within
// float rounding; ConvertClipToRelu's documented deviation is asserted), and the quantized model
// runs in ORT and agrees with quark-cpp's runtime.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>

#include <doctest/doctest.h>

#include <quark/metrics.hpp>
#include <quark/onnx/config.hpp>
#include <quark/onnx/presets.hpp>
#include <quark/onnx/quantizer.hpp>

#include "support/model_files.hpp"
#include "support/ort.hpp"

namespace fs = std::filesystem;
namespace qo = quark::onnx;
using namespace quark::test;

namespace {

/// VINT8 with float weights behind Q/DQ pairs and float biases (see the file comment).
qo::qconfig strippable(const char* preset = "VINT8") {
  qo::qconfig cfg = qo::get_default_config(preset);
  cfg.extra_options.set("AddQDQPairToWeight", true);
  cfg.extra_options.set("QuantizeBias", false);
  return cfg;
}

/// Quantizes `fm` with `cfg` on two random samples of `shape` for input "x".
::onnx::ModelProto quantize(const ::onnx::ModelProto& fm, const qo::qconfig& cfg,
                            const qo::shape_t& shape, const std::string& tag,
                            qo::quantize_report* report = nullptr) {
  const fs::path dir = work_dir();
  save_proto(fm, dir / (tag + "_in.onnx"));
  std::vector<qo::calib_sample> calib;
  for (std::uint32_t s = 0; s < 2; ++s) {
    calib.push_back({{"x", qo::tensor::from_floats(shape, random_floats(qo::element_count(shape),
                                                                        7 + s, -3.0f, 3.0f))}});
  }
  qo::memory_reader reader(calib);
  const auto r =
      qo::quantize_model(dir / (tag + "_in.onnx"), dir / (tag + "_out.onnx"), cfg, reader);
  if (report != nullptr)
    *report = r;
  return load_proto(dir / (tag + "_out.onnx"));
}

/// The float graph behind a Q/DQ model: every QuantizeLinear -> DequantizeLinear pair removed
/// (readers of the DequantizeLinear read the QuantizeLinear's input again).
::onnx::ModelProto strip_qdq(::onnx::ModelProto m) {
  auto* g = m.mutable_graph();
  std::map<std::string, int> producer;
  for (int i = 0; i < g->node_size(); ++i) {
    for (const auto& o : g->node(i).output())
      producer[o] = i;
  }
  std::set<std::string> graph_outputs;
  for (const auto& o : g->output())
    graph_outputs.insert(o.name());
  std::map<std::string, std::string> alias;   // DequantizeLinear output -> float tensor
  std::map<std::string, std::string> rename;  // float tensor -> graph output it becomes
  std::vector<bool> dead(static_cast<std::size_t>(g->node_size()));
  for (int i = 0; i < g->node_size(); ++i) {
    const auto& dq = g->node(i);
    if (dq.op_type() != "DequantizeLinear")
      continue;
    auto p = producer.find(dq.input(0));
    REQUIRE(p != producer.end());  // quantized weights must keep their float Q/DQ pair
    const auto& q = g->node(p->second);
    REQUIRE(q.op_type() == "QuantizeLinear");
    dead[static_cast<std::size_t>(i)] = true;
    dead[static_cast<std::size_t>(p->second)] = true;
    if (graph_outputs.contains(dq.output(0)))
      rename[q.input(0)] = dq.output(0);
    else
      alias[dq.output(0)] = q.input(0);
  }
  ::google::protobuf::RepeatedPtrField<::onnx::NodeProto> kept;
  for (int i = 0; i < g->node_size(); ++i) {
    if (dead[static_cast<std::size_t>(i)])
      continue;
    ::onnx::NodeProto n = g->node(i);
    for (int k = 0; k < n.input_size(); ++k) {
      if (auto a = alias.find(n.input(k)); a != alias.end())
        n.set_input(k, a->second);
      if (auto r = rename.find(n.input(k)); r != rename.end())
        n.set_input(k, r->second);
    }
    for (int k = 0; k < n.output_size(); ++k) {
      if (auto r = rename.find(n.output(k)); r != rename.end())
        n.set_output(k, r->second);
    }
    *kept.Add() = std::move(n);
  }
  g->mutable_node()->Swap(&kept);
  g->clear_value_info();
  return m;
}

std::map<std::string, std::size_t> op_counts(const ::onnx::ModelProto& m) {
  std::map<std::string, std::size_t> c;
  for (const auto& n : m.graph().node())
    ++c[n.op_type()];
  return c;
}

std::size_t count(const ::onnx::ModelProto& m, const char* op) {
  const auto c = op_counts(m);
  auto it = c.find(op);
  return it == c.end() ? 0 : it->second;
}

/// Runs `a` and `b` in ORT on the same input; returns output name -> (values of a, values of b).
std::map<std::string, std::pair<std::vector<float>, std::vector<float>>> both_in_ort(
    const ::onnx::ModelProto& a, const ::onnx::ModelProto& b, const std::vector<float>& x,
    const std::vector<std::size_t>& dims) {
  const auto ra = run_ort(a, {npy_array::from(x, dims)});
  const auto rb = run_ort(b, {npy_array::from(x, dims)});
  std::map<std::string, std::pair<std::vector<float>, std::vector<float>>> out;
  for (const auto& kv : ra) {
    auto it = rb.find(kv.first);
    REQUIRE(it != rb.end());
    out[kv.first] = {kv.second.values<float>(), it->second.values<float>()};
  }
  return out;
}

/// The converted float graph computes what the original computes (largest difference at most
/// `tol` times the output's largest magnitude), and the quantized model runs in ORT and agrees
/// with quark-cpp's runtime.
void check_converted(const ::onnx::ModelProto& original, const ::onnx::ModelProto& quantized,
                     const qo::shape_t& shape, double tol) {
  if (!ort_available()) {
    MESSAGE("ONNX Runtime unavailable: " << ort_unavailable_reason());
    return;
  }
  const std::vector<float> x = random_floats(qo::element_count(shape), 99, -4.0f, 4.0f);
  const std::vector<std::size_t> dims(shape.begin(), shape.end());
  for (const auto& kv : both_in_ort(original, strip_qdq(quantized), x, dims)) {
    const std::string name = kv.first;  // (no structured binding: CAPTURE is a lambda)
    CAPTURE(name);
    const auto& [va, vb] = kv.second;
    REQUIRE(va.size() == vb.size());
    double peak = 0.0, err = 0.0;
    for (std::size_t i = 0; i < va.size(); ++i) {
      peak = std::max(peak, std::abs(static_cast<double>(va[i])));
      err = std::max(err, std::abs(static_cast<double>(va[i]) - static_cast<double>(vb[i])));
    }
    CHECK(peak > 0.01);
    CHECK(err <= tol * peak);
  }
  const fs::path p = work_dir() / "q.onnx";
  save_proto(quantized, p);
  const auto ours = qo::run_model(p, {{"x", qo::tensor::from_floats(shape, x)}});
  const auto theirs = run_ort(quantized, {npy_array::from(x, dims)});
  for (const auto& kv : ours) {
    const std::string name = kv.first;
    CAPTURE(name);
    const auto o = kv.second.data<float>();
    const auto t = theirs.at(name).values<float>();
    REQUIRE(o.size() == t.size());
    CHECK(quark::metrics::cosine(std::vector<float>(o.begin(), o.end()), t) >= 0.99999);
  }
}

}  // namespace

TEST_CASE("ConvertBNToConv: a standalone BatchNormalization becomes a depthwise 1x1 Conv") {
  // Rank 4 (Relu -> BN, epsilon given) and rank 3 (Reshape -> BN, ONNX's default epsilon).
  model_builder b(13);
  b.input("x", onnx_type::float32, {1, 4, 6, 6});
  bn_params(b, "bn1", 4, 10);
  bn_params(b, "bn2", 4, 20);
  b.initializer("shape3", onnx_type::int64, {3}, std::vector<std::int64_t>{1, 4, 36});
  b.node("Relu", {"x"}, {"r"});
  b.node("BatchNormalization", {"r", "bn1_s", "bn1_b", "bn1_m", "bn1_v"}, {"y"},
         {attr_float("epsilon", 1e-3f)});
  b.node("Reshape", {"x", "shape3"}, {"x3"});
  b.node("BatchNormalization", {"x3", "bn2_s", "bn2_b", "bn2_m", "bn2_v"}, {"z"});
  b.output("y", onnx_type::float32, {1, 4, 6, 6});
  b.output("z", onnx_type::float32, {1, 4, 36});
  ::onnx::ModelProto fm = b.build();
  fm.mutable_graph()->mutable_node(1)->set_name("bn_a");
  fm.mutable_graph()->mutable_node(3)->set_name("bn_b");
  qo::quantize_report report;
  const auto qm = quantize(fm, strippable(), {1, 4, 6, 6}, "bn", &report);
  CHECK(count(qm, "BatchNormalization") == 0);
  CHECK(count(qm, "Conv") == 2);
  for (const char* name : {"bn_a", "bn_b"}) {
    CAPTURE(name);
    const auto* n = node_named(qm, name);
    REQUIRE(n != nullptr);
    CHECK(n->op_type() == "Conv");
    for (const auto& a : n->attribute()) {
      if (a.name() == "group")
        CHECK(a.i() == 4);
    }
  }
  // The BN parameters are gone; the Conv weights are new initializers.
  for (const auto& t : qm.graph().initializer())
    CHECK(t.name().rfind("bn", 0) != 0);
  CHECK(std::any_of(report.notes.begin(), report.notes.end(), [](const std::string& s) {
    return s.find("BatchNormalization converted to Conv: 2") != std::string::npos;
  }));
  check_converted(fm, qm, {1, 4, 6, 6}, 1e-5);

  SUBCASE("excluded nodes and ConvertBNToConv false keep the BatchNormalization") {
    qo::qconfig cfg = strippable();
    cfg.exclude.push_back(qo::node_selector::parse("bn_a"));
    CHECK(count(quantize(fm, cfg, {1, 4, 6, 6}, "bn_ex"), "BatchNormalization") == 1);
    cfg = strippable();
    cfg.extra_options.set("ConvertBNToConv", false);
    CHECK(count(quantize(fm, cfg, {1, 4, 6, 6}, "bn_off"), "BatchNormalization") == 2);
  }
}

TEST_CASE("ConvertClipToRelu: Clip with min 0 and no max becomes Relu, exactly") {
  // Clip(0) -> y (converted); Clip(0, 2) -> z (kept: dropping the max, as Quark's code does,
  // would change the function); Clip(-1, 1) -> w and Clip(0.5) -> v (kept: min is not 0).
  model_builder b(13);
  b.input("x", onnx_type::float32, {1, 2, 4, 4});
  b.initializer("zero", onnx_type::float32, {}, std::vector<float>{0.0f});
  b.initializer("two", onnx_type::float32, {}, std::vector<float>{2.0f});
  b.initializer("m1", onnx_type::float32, {}, std::vector<float>{-1.0f});
  b.initializer("p1", onnx_type::float32, {}, std::vector<float>{1.0f});
  b.initializer("half", onnx_type::float32, {}, std::vector<float>{0.5f});
  b.node("Clip", {"x", "zero"}, {"y"});
  b.node("Clip", {"x", "zero", "two"}, {"z"});
  b.node("Clip", {"x", "m1", "p1"}, {"w"});
  b.node("Clip", {"x", "half"}, {"v"});
  for (const char* o : {"y", "z", "w", "v"})
    b.output(o, onnx_type::float32, {1, 2, 4, 4});
  ::onnx::ModelProto fm = b.build();
  for (int i = 0; i < fm.graph().node_size(); ++i)
    fm.mutable_graph()->mutable_node(i)->set_name("clip" + std::to_string(i));
  const auto qm = quantize(fm, strippable(), {1, 2, 4, 4}, "clip");
  CHECK(count(qm, "Relu") == 1);
  CHECK(count(qm, "Clip") == 3);
  const auto* relu = node_named(qm, "clip0");
  REQUIRE(relu != nullptr);
  CHECK(relu->op_type() == "Relu");
  CHECK(relu->input_size() == 1);
  check_converted(fm, qm, {1, 2, 4, 4}, 0.0);
  // Opset 6: bounds as attributes; min 0 without max converts, with max it does not.
  model_builder b6(6);
  b6.input("x", onnx_type::float32, {1, 2, 4, 4});
  b6.node("Clip", {"x"}, {"y"}, {attr_float("min", 0.0f)});
  b6.node("Clip", {"x"}, {"z"}, {attr_float("min", 0.0f), attr_float("max", 6.0f)});
  b6.output("y", onnx_type::float32, {1, 2, 4, 4});
  b6.output("z", onnx_type::float32, {1, 2, 4, 4});
  const ::onnx::ModelProto fm6 = b6.build();
  const auto qm6 = quantize(fm6, strippable(), {1, 2, 4, 4}, "clip6");
  CHECK(count(qm6, "Relu") == 1);
  CHECK(count(qm6, "Clip") == 1);
  check_converted(fm6, qm6, {1, 2, 4, 4}, 0.0);
}

TEST_CASE("ConvertSplitToSlice: Split becomes one Slice per output, exactly") {
  SUBCASE("opset 13, sizes as an input, and an equal split on a negative axis") {
    model_builder b(13);
    b.input("x", onnx_type::float32, {1, 6, 4, 4});
    b.initializer("sizes", onnx_type::int64, {3}, std::vector<std::int64_t>{2, 3, 1});
    b.node("Split", {"x", "sizes"}, {"a", "b", "c"}, {attr_int("axis", 1)});
    b.node("Split", {"x"}, {"d", "e"}, {attr_int("axis", -1)});
    b.output("a", onnx_type::float32, {1, 2, 4, 4});
    b.output("b", onnx_type::float32, {1, 3, 4, 4});
    b.output("c", onnx_type::float32, {1, 1, 4, 4});
    b.output("d", onnx_type::float32, {1, 6, 4, 2});
    b.output("e", onnx_type::float32, {1, 6, 4, 2});
    const ::onnx::ModelProto fm = b.build();
    const auto qm = quantize(fm, strippable(), {1, 6, 4, 4}, "split13");
    CHECK(count(qm, "Split") == 0);
    CHECK(count(qm, "Slice") == 5);
    check_converted(fm, qm, {1, 6, 4, 4}, 0.0);
  }
  SUBCASE("opset 11, sizes as an attribute") {
    model_builder b(11);
    b.input("x", onnx_type::float32, {1, 6, 4, 4});
    b.node("Split", {"x"}, {"a", "b"}, {attr_int("axis", 2), attr_ints("split", {1, 3})});
    b.output("a", onnx_type::float32, {1, 6, 1, 4});
    b.output("b", onnx_type::float32, {1, 6, 3, 4});
    const ::onnx::ModelProto fm = b.build();
    const auto qm = quantize(fm, strippable(), {1, 6, 4, 4}, "split11");
    CHECK(count(qm, "Split") == 0);
    CHECK(count(qm, "Slice") == 2);
    check_converted(fm, qm, {1, 6, 4, 4}, 0.0);
  }
}

TEST_CASE("ConvertReduceMeanToGlobalAvgPool and SplitLargeKernelPool") {
  // ReduceMean over H, W with keepdims 1 and 0 on a 1x2x32x24 input: 768 > 512 elements, so
  // SplitLargeKernelPool makes each pool AveragePool 4x4 (stride 4) then a global pool over 8x6.
  model_builder b(13);
  b.input("x", onnx_type::float32, {1, 2, 32, 24});
  b.node("ReduceMean", {"x"}, {"k1"}, {attr_ints("axes", {2, 3})});
  b.node("ReduceMean", {"x"}, {"k0"}, {attr_ints("axes", {-1, -2}), attr_int("keepdims", 0)});
  b.node("ReduceMean", {"x"}, {"c"}, {attr_ints("axes", {1})});  // not spatial: kept
  b.output("k1", onnx_type::float32, {1, 2, 1, 1});
  b.output("k0", onnx_type::float32, {1, 2});
  b.output("c", onnx_type::float32, {1, 1, 32, 24});
  const ::onnx::ModelProto fm = b.build();
  const qo::shape_t shape{1, 2, 32, 24};
  SUBCASE("conversion only") {
    qo::qconfig cfg = strippable();
    cfg.extra_options.set("ConvertReduceMeanToGlobalAvgPool", true);
    const auto qm = quantize(fm, cfg, shape, "rm");
    CHECK(count(qm, "ReduceMean") == 1);
    CHECK(count(qm, "GlobalAveragePool") == 2);
    CHECK(count(qm, "Squeeze") == 1);
    CHECK(count(qm, "AveragePool") == 0);
    check_converted(fm, qm, shape, 1e-5);
  }
  SUBCASE("conversion and split (the XINT8 defaults)") {
    qo::qconfig cfg = strippable("XINT8");
    const auto qm = quantize(fm, cfg, shape, "rm_split");
    CHECK(count(qm, "ReduceMean") == 1);
    CHECK(count(qm, "GlobalAveragePool") == 2);
    REQUIRE(count(qm, "AveragePool") == 2);
    for (const auto& n : qm.graph().node()) {
      if (n.op_type() != "AveragePool")
        continue;
      for (const auto& a : n.attribute()) {
        if (a.name() == "kernel_shape" || a.name() == "strides")
          CHECK(std::vector<std::int64_t>(a.ints().begin(), a.ints().end()) ==
                std::vector<std::int64_t>{4, 4});
      }
    }
    check_converted(fm, qm, shape, 1e-5);
  }
}
