// SPDX-License-Identifier: MIT
// Auto mixed precision towards a block format (auto_mixprecision with QBFP / QMX targets, the
// BF16_MIXED_* presets) and DedicateDQNode.
//
// Oracles: the numbers of a mixed Conv come from ONNX Runtime (the float Conv and the bfloat16
// Cast of its output) on inputs and weights fake-quantized by the header block functions
// (support/quark_ops_oracle.hpp, proven in tests/block) after a hand-written bfloat16 rounding;
// the wiring of larger graphs is checked node by node against the rule of Quark's mixing
// (written out in each case); DedicateDQNode is checked in ORT to leave the function unchanged.
#include <bit>
#include <cmath>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include <quark/onnx/calib_data.hpp>
#include <quark/onnx/config.hpp>
#include <quark/onnx/presets.hpp>
#include <quark/onnx/quantizer.hpp>
#include <quark/onnx/runtime.hpp>

#include "support/checks.hpp"
#include "support/model_files.hpp"
#include "support/ort.hpp"
#include "support/quark_ops_oracle.hpp"

namespace qo = quark::onnx;
using namespace quark::test;

namespace {

/// float -> bfloat16 -> float, round to nearest even (finite inputs): the upper 16 bits of the
/// float after adding half of the dropped part's unit (plus one for an odd kept part).
float bf16(float x) {
  auto u = std::bit_cast<std::uint32_t>(x);
  u += 0x7fffu + ((u >> 16) & 1u);
  return std::bit_cast<float>(u & 0xffff0000u);
}

std::vector<float> bf16(const std::vector<float>& x) {
  std::vector<float> y;
  for (const float v : x)
    y.push_back(bf16(v));
  return y;
}

std::vector<float> bfp16(const std::vector<float>& x, const std::vector<std::int64_t>& shape,
                         std::int64_t axis) {
  quark::bfp_op_attributes a;  // DEFAULT_BFP_PARAMS: to_bfp, 16 bits, block 8, rounding 2
  a.rounding_mode = 2;
  a.axis = axis;
  std::vector<float> y(x.size());
  bfp_oracle(a, std::span<const float>(x), shape, std::span<float>(y));
  return y;
}

std::vector<float> mxint8(const std::vector<float>& x, const std::vector<std::int64_t>& shape,
                          std::int64_t axis) {
  quark::mx_op_attributes a;  // DEFAULT_MICROSCALING_PARAMS: int8, block 32, rounding 2
  a.rounding_mode = 2;
  a.axis = axis;
  std::vector<float> y(x.size());
  mx_oracle(a, std::span<const float>(x), shape, std::span<float>(y));
  return y;
}

qo::model quantize(const ::onnx::ModelProto& p, const qo::qconfig& cfg, const std::string& in,
                   const qo::shape_t& shape, qo::quantize_report* report = nullptr) {
  std::vector<qo::calib_sample> samples;
  for (std::uint32_t s = 0; s < 2; ++s) {
    samples.push_back(
        {{in, qo::tensor::from_floats(shape, random_floats(qo::element_count(shape), 70 + s))}});
  }
  qo::memory_reader reader(std::move(samples));
  return qo::quantize_model(to_model(p), cfg, reader, report);
}

std::vector<float> run_ours(const qo::model& m, const std::string& in, const qo::shape_t& shape,
                            const std::vector<float>& x, const std::string& out) {
  const qo::runtime rt(m);
  const auto res = rt.run({{in, qo::tensor::from_floats(shape, x)}});
  REQUIRE(res.contains(out));
  const auto d = res.at(out).data<float>();
  return {d.begin(), d.end()};
}

/// The producer of `tensor` in `p`, or nullptr.
const ::onnx::NodeProto* producer(const ::onnx::ModelProto& p, const std::string& tensor) {
  for (const auto& n : p.graph().node()) {
    for (const auto& o : n.output()) {
      if (o == tensor)
        return &n;
    }
  }
  return nullptr;
}

std::int64_t int_attr(const ::onnx::NodeProto& n, const std::string& name) {
  for (const auto& a : n.attribute()) {
    if (a.name() == name)
      return a.i();
  }
  return -999;
}

std::size_t count_op(const ::onnx::ModelProto& p, const std::string& op) {
  std::size_t k = 0;
  for (const auto& n : p.graph().node())
    k += n.op_type() == op ? 1u : 0u;
  return k;
}

/// Conv(x[1,8,4,4], w[4,8,3,3], b, pads 1) -> y, opset 17.
::onnx::ModelProto conv_model(const std::vector<float>& w, const std::vector<float>& b) {
  model_builder mb(17, 8);
  mb.input("x", onnx_type::float32, {1, 8, 4, 4});
  mb.initializer("w", onnx_type::float32, {4, 8, 3, 3}, w);
  mb.initializer("b", onnx_type::float32, {4}, b);
  mb.node("Conv", {"x", "w", "b"}, {"y"}, {attr_ints("pads", {1, 1, 1, 1})});
  mb.output("y", onnx_type::float32, {1, 4, 4, 4});
  return mb.build();
}

/// The reference of a mixed Conv: the float Conv on the fake-quantized x and w, then the
/// bfloat16 pair of the output (a Cast pair, which ORT runs).
::onnx::ModelProto conv_reference(const std::vector<float>& w, const std::vector<float>& b) {
  model_builder mb(17, 8);
  mb.input("x", onnx_type::float32, {1, 8, 4, 4});
  mb.initializer("w", onnx_type::float32, {4, 8, 3, 3}, w);
  mb.initializer("b", onnx_type::float32, {4}, b);
  mb.node("Conv", {"x", "w", "b"}, {"c"}, {attr_ints("pads", {1, 1, 1, 1})});
  mb.node("Cast", {"c"}, {"c16"}, {attr_int("to", onnx_type::bfloat16)});
  mb.node("Cast", {"c16"}, {"y"}, {attr_int("to", onnx_type::float32)});
  mb.output("y", onnx_type::float32, {1, 4, 4, 4});
  return mb.build();
}

const std::vector<float>& conv_w() {
  static const std::vector<float> w = random_floats(4 * 8 * 9, 21, -0.5f, 0.5f);
  return w;
}
const std::vector<float>& conv_b() {
  static const std::vector<float> b = random_floats(4, 22, -0.2f, 0.2f);
  return b;
}

/// x -> Conv n0 (w1, b1) -> c1 -> Relu n1 -> r -> Conv n2 (w2) -> c2; Add n3 (c2, r) -> y.
/// Conv n2's weight w2 is also read by Conv n4 on r (a shared weight), whose output z is a
/// second graph output.
::onnx::ModelProto branch_model() {
  model_builder mb(17, 8);
  mb.input("x", onnx_type::float32, {1, 8, 4, 4});
  mb.initializer("w1", onnx_type::float32, {8, 8, 3, 3}, random_floats(576, 31, -0.3f, 0.3f));
  mb.initializer("b1", onnx_type::float32, {8}, random_floats(8, 32, -0.1f, 0.1f));
  mb.initializer("w2", onnx_type::float32, {8, 8, 1, 1}, random_floats(64, 33, -0.5f, 0.5f));
  mb.node("Conv", {"x", "w1", "b1"}, {"c1"}, {attr_ints("pads", {1, 1, 1, 1})});
  mb.node("Relu", {"c1"}, {"r"});
  mb.node("Conv", {"r", "w2"}, {"c2"});
  mb.node("Add", {"c2", "r"}, {"y"});
  mb.node("Conv", {"r", "w2"}, {"z"});
  mb.output("y", onnx_type::float32, {1, 8, 4, 4});
  mb.output("z", onnx_type::float32, {1, 8, 4, 4});
  return mb.build();
}

/// MatMul of two activations: a = x W, y = MatMul(a, x^T) (x: 1x4x16, W: 16x16).
::onnx::ModelProto two_activation_matmul() {
  model_builder mb(17, 8);
  mb.input("x", onnx_type::float32, {1, 4, 16});
  mb.initializer("W", onnx_type::float32, {16, 16}, random_floats(256, 41, -0.4f, 0.4f));
  mb.node("MatMul", {"x", "W"}, {"a"});
  mb.node("Transpose", {"x"}, {"xt"}, {attr_ints("perm", {0, 2, 1})});
  mb.node("MatMul", {"a", "xt"}, {"y"});
  mb.output("y", onnx_type::float32, {1, 4, 4});
  return mb.build();
}

/// The BF16_MIXED_* preset of `type` (QBFP / QMX) with dual_quant_nodes as asked.
qo::qconfig mixing(const char* type, bool dual) {
  qo::qconfig c = qo::get_default_config(std::string_view(type) == "QMX" ? "BF16_MIXED_MXINT8"
                                                                         : "BF16_MIXED_BFP16");
  c.algo_config.front().params.set("dual_quant_nodes", dual);
  return c;
}

}  // namespace

namespace {

/// `got` (our runtime) against `ref` (ONNX Runtime) for a Conv whose output is rounded to
/// bfloat16: the two sum the Conv in another order, so each value is at most one bfloat16 step
/// from the reference and at least 90% are equal.
void check_bf16_conv_output(const std::vector<float>& got, const std::vector<float>& ref) {
  REQUIRE(got.size() == ref.size());
  std::size_t exact = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const float step = std::ldexp(1.0f, std::ilogb(std::fabs(ref[i]) + 1e-30f) - 7);
    CHECK(std::fabs(got[i] - ref[i]) <= step);
    exact += got[i] == ref[i] ? 1u : 0u;
  }
  CHECK(exact * 10 >= got.size() * 9);
}

}  // namespace

TEST_CASE(
    "BF16_MIXED_BFP16 / _MXINT8 on a Conv: output = bfloat16(Conv(block(bfloat16(x)), "
    "block(w)) + b) in ONNX Runtime") {
  for (const char* preset : {"BF16_MIXED_BFP16", "BF16_MIXED_MXINT8"}) {
    CAPTURE(preset);
    const bool mx = std::string_view(preset) == "BF16_MIXED_MXINT8";
    qo::quantize_report report;
    const qo::model q = quantize(conv_model(conv_w(), conv_b()), qo::get_default_config(preset),
                                 "x", {1, 8, 4, 4}, &report);
    const auto p = to_proto(q);
    // Quark's rule: the weight's pair becomes one fused node on the float weight (axis 1: the
    // input channels; convert_to_bfloat_before_bfp 0); the input keeps its bfloat16 Cast pair
    // and a fused node follows it (dual quant nodes); the bias stays float (QuantizeBias False).
    const char* op = mx ? "MXQuantizeDequantize" : "BFPQuantizeDequantize";
    CHECK(count_op(p, op) == 2);
    const ::onnx::NodeProto* conv = nullptr;
    for (const auto& n : p.graph().node()) {
      if (n.op_type() == "Conv")
        conv = &n;
    }
    REQUIRE(conv != nullptr);
    const auto* fx = producer(p, conv->input(0));
    const auto* fw = producer(p, conv->input(1));
    REQUIRE(fx != nullptr);
    REQUIRE(fw != nullptr);
    CHECK(fx->op_type() == op);
    CHECK(fw->op_type() == op);
    CHECK(fx->domain() == "com.amd.quark");
    CHECK(fw->input(0) == "w");  // the float initializer itself
    CHECK(int_attr(*fx, "axis") == 1);
    CHECK(int_attr(*fw, "axis") == 1);
    CHECK(int_attr(*fx, "rounding_mode") == 2);
    CHECK(int_attr(*fw, "block_size") == (mx ? 32 : 8));
    const auto* pair_dq = producer(p, fx->input(0));
    REQUIRE(pair_dq != nullptr);
    CHECK(pair_dq->op_type() == "Cast");  // the bfloat16 pair stays in front
    CHECK(int_attr(*producer(p, pair_dq->input(0)), "to") == onnx_type::bfloat16);
    CHECK(conv->input(2) == "b");
    // The weight, labelled as the spec with the same attributes (BFP16Spec has rounding 0).
    CHECK(report.tensors_per_type.at(mx ? "MXInt8" : "QBFP") == 1);

    // Oracle: block formats by the header, bfloat16 by hand, Conv and the output Cast in ORT.
    const std::vector<float> x = random_floats(128, 23, -2.0f, 2.0f);
    const std::vector<std::int64_t> xs{1, 8, 4, 4}, ws{4, 8, 3, 3};
    const std::vector<float> xq = mx ? mxint8(bf16(x), xs, 1) : bfp16(bf16(x), xs, 1);
    const std::vector<float> wq = mx ? mxint8(conv_w(), ws, 1) : bfp16(conv_w(), ws, 1);
    CHECK(xq != bf16(x));  // the block format did something on top of bfloat16
    auto ort = run_ort(conv_reference(wq, conv_b()),
                       {npy_array::from(std::span<const float>(xq), {1, 8, 4, 4})});
    const auto ref = ort.begin()->second.values<float>();
    check_bf16_conv_output(run_ours(q, "x", {1, 8, 4, 4}, x, "y"), ref);
  }
}

TEST_CASE(
    "block mixing wiring: shared activation pairs, non-target readers, shared weights and "
    "DedicateDQNode (BF16_MIXED_BFP16 rule)") {
  const qo::model q =
      quantize(branch_model(), qo::get_default_config("BF16_MIXED_BFP16"), "x", {1, 8, 4, 4});
  const auto p = to_proto(q);
  // Node names of branch_model(): n0 Conv, n1 Relu, n2 Conv, n3 Add, n4 Conv.
  const auto* n0 = node_named(p, "n0");
  const auto* n2 = node_named(p, "n2");
  const auto* n3 = node_named(p, "n3");
  const auto* n4 = node_named(p, "n4");
  REQUIRE((n0 && n2 && n3 && n4));
  // Conv n0: input through the pair of x and a fused node; weight w1 by a fused node (axis 1).
  const auto* f0 = producer(p, n0->input(0));
  REQUIRE(f0 != nullptr);
  CHECK(f0->op_type() == "BFPQuantizeDequantize");
  CHECK(producer(p, f0->input(0))->op_type() == "Cast");
  CHECK(producer(p, n0->input(1))->input(0) == "w1");
  // r (the Relu output) is read by two Convs and the Add: the two Convs share one fused node
  // after r's pair; the Add (not a target op) reads the pair itself, through its own copy of
  // the DequantizeLinear (DedicateDQNode).
  CHECK(n2->input(0) == n4->input(0));
  const auto* fr = producer(p, n2->input(0));
  REQUIRE(fr != nullptr);
  CHECK(fr->op_type() == "BFPQuantizeDequantize");
  const auto* dq_fr = producer(p, fr->input(0));
  const auto* dq_add = producer(p, n3->input(1));
  REQUIRE((dq_fr && dq_add));
  CHECK(dq_fr->op_type() == "Cast");
  CHECK(dq_add->op_type() == "Cast");
  CHECK(dq_fr != dq_add);                         // dedicated
  CHECK(dq_fr->input(0) == dq_add->input(0));     // one QuantizeLinear (an activation's: shared)
  CHECK(dq_add->name() == dq_fr->name() + "_1");  // Quark's naming: the second reader's copy
  // The shared weight w2: one fused node serves both Convs.
  CHECK(n2->input(1) == n4->input(1));
  CHECK(producer(p, n2->input(1))->input(0) == "w2");
  CHECK(count_op(p, "BFPQuantizeDequantize") == 4);  // x, r, w1, w2
  // The graph runs and stays close to the float model.
  const std::vector<float> x = random_floats(128, 5, -1.0f, 1.0f);
  const qo::model f = to_model(branch_model());
  for (const char* out : {"y", "z"}) {
    CAPTURE(out);
    const auto a = run_ours(f, "x", {1, 8, 4, 4}, x, out);
    const auto b = run_ours(q, "x", {1, 8, 4, 4}, x, out);
    double num = 0, den = 0;
    for (std::size_t i = 0; i < a.size(); ++i) {
      const auto d = static_cast<double>(a[i] - b[i]);
      num += d * d;
      den += static_cast<double>(a[i]) * static_cast<double>(a[i]);
    }
    CHECK(std::sqrt(num / den) < 0.02);
    CHECK(a != b);
  }
}

TEST_CASE(
    "block mixing without dual quant nodes: fused nodes replace the activation pairs "
    "(BF16_MIXED_BFP16_ADAQUANT's rule), MatMul mixes both activation inputs") {
  const qo::model q = quantize(two_activation_matmul(), mixing("QBFP", false), "x", {1, 4, 16});
  const auto p = to_proto(q);
  // MatMul n0 (x, W): x's pair is replaced by a fused node on x itself; W's by one on W with
  // axis 0 (a MatMul constant). MatMul n2 (a, xt): both activations' pairs replaced (axis 1).
  const auto* n0 = node_named(p, "n0");
  const auto* n2 = node_named(p, "n2");
  REQUIRE((n0 && n2));
  const auto* fx = producer(p, n0->input(0));
  const auto* fw = producer(p, n0->input(1));
  REQUIRE((fx && fw));
  CHECK(fx->op_type() == "BFPQuantizeDequantize");
  CHECK(fx->input(0) == "x");
  CHECK(fw->input(0) == "W");
  CHECK(int_attr(*fw, "axis") == 0);
  CHECK(int_attr(*fx, "axis") == 1);
  for (int k = 0; k < 2; ++k) {
    const auto* f = producer(p, n2->input(k));
    REQUIRE(f != nullptr);
    CHECK(f->op_type() == "BFPQuantizeDequantize");
    CHECK(int_attr(*f, "axis") == 1);
    CHECK(producer(p, f->input(0))->op_type() != "Cast");  // no pair left in front
  }
  // The Transpose reads x's fused node too (the pair it read is gone): x has no Cast pair.
  const auto* tr = node_named(p, "n1");
  REQUIRE(tr != nullptr);
  CHECK(producer(p, tr->input(0)) == fx);
  // Numbers: y = bf16(MatMul(bfp(a), bfp(t))) with a = MatMul(bfp(x), bfp(W)) and t =
  // Transpose(bfp(x)): the pairs of x, a and t are gone, y's (a graph output, not read by a
  // target node) stays; computed here step by step.
  const std::vector<float> x = random_floats(64, 8, -1.0f, 1.0f);
  const std::vector<float> xb = bfp16(x, {1, 4, 16}, 1);
  const ::onnx::ModelProto fp = two_activation_matmul();
  const auto* winit = find_init(fp, "W");
  REQUIRE(winit != nullptr);
  const std::vector<float> wb = bfp16(floats_of(*winit), {16, 16}, 0);
  std::vector<float> a(64, 0.0f);
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 16; ++j) {
      float s = 0.0f;
      for (int k = 0; k < 16; ++k)
        s += xb[static_cast<std::size_t>(i * 16 + k)] * wb[static_cast<std::size_t>(k * 16 + j)];
      a[static_cast<std::size_t>(i * 16 + j)] = s;
    }
  }
  std::vector<float> t(64);
  for (int i = 0; i < 4; ++i) {
    for (int k = 0; k < 16; ++k)
      t[static_cast<std::size_t>(k * 4 + i)] = xb[static_cast<std::size_t>(i * 16 + k)];
  }
  const std::vector<float> aq = bfp16(a, {1, 4, 16}, 1);
  const std::vector<float> tq = bfp16(t, {1, 16, 4}, 1);
  std::vector<float> y(16);
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 4; ++j) {
      float s = 0.0f;
      for (int k = 0; k < 16; ++k)
        s += aq[static_cast<std::size_t>(i * 16 + k)] * tq[static_cast<std::size_t>(k * 4 + j)];
      y[static_cast<std::size_t>(i * 4 + j)] = bf16(s);
    }
  }
  const auto got = run_ours(q, "x", {1, 4, 16}, x, "y");
  REQUIRE(got.size() == y.size());
  for (std::size_t i = 0; i < y.size(); ++i) {
    const float step = std::ldexp(1.0f, std::ilogb(std::fabs(y[i]) + 1e-30f) - 7);
    CHECK(std::fabs(got[i] - y[i]) <= step);
  }
}

TEST_CASE("block mixing of integer pairs: a stored int8 weight is dequantized for its fused node") {
  // A8W8 stores w as int8 codes feeding a DequantizeLinear; mixing gives the fused node the
  // float values (code - zero point) * scale, and the activation keeps its int8 pair in front.
  qo::qconfig c = qo::get_default_config("A8W8");
  qo::algo_entry a{qo::algo_name::auto_mixprecision, qo::option_value::object()};
  a.params.set("act_target_quant_type", "QMX");
  a.params.set("dual_quant_nodes", true);
  c.algo_config.push_back(a);
  const qo::model plain =
      quantize(conv_model(conv_w(), conv_b()), qo::get_default_config("A8W8"), "x", {1, 8, 4, 4});
  const auto pp = to_proto(plain);
  const qo::model q = quantize(conv_model(conv_w(), conv_b()), c, "x", {1, 8, 4, 4});
  const auto p = to_proto(q);
  const ::onnx::NodeProto* conv = nullptr;
  for (const auto& n : p.graph().node()) {
    if (n.op_type() == "Conv")
      conv = &n;
  }
  REQUIRE(conv != nullptr);
  const auto* fw = producer(p, conv->input(1));
  REQUIRE(fw != nullptr);
  CHECK(fw->op_type() == "MXQuantizeDequantize");
  const auto* deq = find_init(p, fw->input(0));
  REQUIRE(deq != nullptr);
  // The codes, scale and zero point of the weight's DequantizeLinear in the unmixed model.
  const ::onnx::NodeProto* wdq = nullptr;
  for (const auto& n : pp.graph().node()) {
    if (n.op_type() == "Conv")
      wdq = producer(pp, n.input(1));
  }
  REQUIRE(wdq != nullptr);
  const auto* codes = find_init(pp, wdq->input(0));
  const auto* scale = find_init(pp, wdq->input(1));
  REQUIRE((codes && scale));
  REQUIRE(codes->data_type() == onnx_type::int8);
  const std::string& raw = codes->raw_data();
  const float s = floats_of(*scale).at(0);  // per tensor, symmetric: zero point 0
  const std::vector<float> got = floats_of(*deq);
  REQUIRE(got.size() == raw.size());
  for (std::size_t i = 0; i < raw.size(); ++i)
    CHECK(got[i] == static_cast<float>(static_cast<std::int8_t>(raw[i])) * s);
  // The activation: int8 pair, then the fused node.
  const auto* fx = producer(p, conv->input(0));
  REQUIRE(fx != nullptr);
  CHECK(fx->op_type() == "MXQuantizeDequantize");
  CHECK(producer(p, fx->input(0))->op_type() == "DequantizeLinear");
}

TEST_CASE("DedicateDQNode alone: copies per reader, same function in ONNX Runtime") {
  // A8W8 on branch_model(): r's pair is read by n2, n3 and n4; the shared weight w2's pair by n2
  // and n4 (its Q reads the float constant with AddQDQPairToWeight, so the Q is copied too).
  qo::qconfig c = qo::get_default_config("A8W8");
  c.extra_options.set("AddQDQPairToWeight", true);
  const qo::model plain = quantize(branch_model(), c, "x", {1, 8, 4, 4});
  c.extra_options.set("DedicateDQNode", true);
  qo::quantize_report report;
  const qo::model q = quantize(branch_model(), c, "x", {1, 8, 4, 4}, &report);
  const auto p = to_proto(q);
  const auto pp = to_proto(plain);
  // Every DequantizeLinear fed by a QuantizeLinear has one reader.
  std::map<std::string, int> readers;
  for (const auto& n : p.graph().node()) {
    for (const auto& i : n.input())
      ++readers[i];
  }
  for (const auto& o : p.graph().output())
    ++readers[o.name()];
  for (const auto& n : p.graph().node()) {
    if (n.op_type() == "DequantizeLinear" && producer(p, n.input(0)) &&
        producer(p, n.input(0))->op_type() == "QuantizeLinear") {
      CAPTURE(n.name());
      CHECK(readers[n.output(0)] == 1);
    }
  }
  // r's DQ: 3 readers -> 2 copies; w2's Q/DQ: 2 readers -> 1 copy of each.
  CHECK(count_op(p, "DequantizeLinear") == count_op(pp, "DequantizeLinear") + 3);
  CHECK(count_op(p, "QuantizeLinear") == count_op(pp, "QuantizeLinear") + 1);
  CHECK(node_named(p, "n2")->input(1) != node_named(p, "n4")->input(1));
  bool noted = false;
  for (const auto& n : report.notes)
    noted = noted || n.find("DedicateDQNode: 4") == 0;
  CHECK(noted);
  // The same function: ORT gives the same bits with and without the copies.
  const std::vector<float> x = random_floats(128, 9, -1.0f, 1.0f);
  const auto in = npy_array::from(std::span<const float>(x), {1, 8, 4, 4});
  auto a = run_ort(pp, {in});
  auto b = run_ort(p, {in});
  for (const char* out : {"y", "z"}) {
    CAPTURE(out);
    CHECK(a.at(out).values<float>() == b.at(out).values<float>());
  }
  CHECK(a.at("y").values<float>() != run_ours(to_model(branch_model()), "x", {1, 8, 4, 4}, x, "y"));
}

TEST_CASE(
    "block mixing collapses fused -> Q -> DQ -> fused: a model that already quantizes its Conv "
    "input with a fused node keeps only the new one") {
  // x -> BFPQuantizeDequantize (already in the float model) -> xb -> Conv. BF16 puts a bfloat16
  // pair on xb; mixing with dual quant nodes adds a fused node after it, so the chain is
  // fused -> Cast -> Cast -> fused. Quark's refinement (docs/quantizer.md): the first fused node
  // and the pair go, the new fused node reads x. Oracle: the rule's graph in numbers, i.e.
  // bfloat16(Conv(bfp(x), bfp(w)) + b), with the Conv and the output Cast in ONNX Runtime.
  model_builder mb(17, 8);
  mb.opset("com.amd.quark", 1);
  mb.input("x", onnx_type::float32, {1, 8, 4, 4});
  mb.initializer("w", onnx_type::float32, {4, 8, 3, 3}, conv_w());
  mb.initializer("b", onnx_type::float32, {4}, conv_b());
  mb.node("BFPQuantizeDequantize", {"x"}, {"xb"},
          {attr_string("bfp_method", "to_bfp"), attr_int("axis", 1), attr_int("bit_width", 16),
           attr_int("block_size", 8), attr_int("rounding_mode", 2)},
          "com.amd.quark");
  mb.node("Conv", {"xb", "w", "b"}, {"y"}, {attr_ints("pads", {1, 1, 1, 1})});
  mb.output("y", onnx_type::float32, {1, 4, 4, 4});
  qo::quantize_report report;
  const qo::model q = quantize(mb.build(), mixing("QBFP", true), "x", {1, 8, 4, 4}, &report);
  const auto p = to_proto(q);
  const auto* conv = node_named(p, "n1");
  REQUIRE(conv != nullptr);
  const auto* fx = producer(p, conv->input(0));
  REQUIRE(fx != nullptr);
  CHECK(fx->op_type() == "BFPQuantizeDequantize");
  CHECK(fx->input(0) == "x");                        // the chain is gone
  CHECK(node_named(p, "n0") == nullptr);             // the model's own fused node too
  CHECK(count_op(p, "BFPQuantizeDequantize") == 2);  // x's and w's
  CHECK(count_op(p, "Cast") == 2);                   // only y's pair is left
  bool noted = false;
  for (const auto& n : report.notes)
    noted = noted || n.find("1 chains collapsed") != std::string::npos;
  CHECK(noted);

  const std::vector<float> x = random_floats(128, 29, -2.0f, 2.0f);
  const std::vector<std::int64_t> xs{1, 8, 4, 4}, ws{4, 8, 3, 3};
  // The fused node's own bfloat16 conversion, if its attributes ask for one.
  const bool to_bf16 = int_attr(*fx, "convert_to_bfloat_before_bfp") == 1;
  const std::vector<float> xq = bfp16(to_bf16 ? bf16(x) : x, xs, 1);
  const std::vector<float> wq = bfp16(conv_w(), ws, 1);
  auto ort = run_ort(conv_reference(wq, conv_b()),
                     {npy_array::from(std::span<const float>(xq), {1, 8, 4, 4})});
  const auto ref = ort.begin()->second.values<float>();
  check_bf16_conv_output(run_ours(q, "x", {1, 8, 4, 4}, x, "y"), ref);
}

TEST_CASE(
    "block mixing leaves a blockwise-quantized weight's DequantizeLinear in place and says so") {
  // A8W8 with the weight per group of 8 (a blocked DequantizeLinear, opset 21): the fused node
  // cannot take the codes' float values as a per-tensor / per-channel dequantization gives them,
  // so the weight keeps its DequantizeLinear (unchanged) and a note names the input; the
  // activation is mixed as usual (a fused node after its int8 pair).
  model_builder mb(17, 8);
  mb.input("x", onnx_type::float32, {1, 4, 16});
  mb.initializer("W", onnx_type::float32, {16, 16}, random_floats(256, 43, -0.4f, 0.4f));
  mb.node("MatMul", {"x", "W"}, {"y"});
  mb.output("y", onnx_type::float32, {1, 4, 16});
  const ::onnx::ModelProto fp = mb.build();
  qo::qconfig c = qo::get_default_config("A8W8");
  c.global_config.weight->quant_granularity = qo::granularity::group;
  c.global_config.weight->group_size = 8;
  const qo::model plain = quantize(fp, c, "x", {1, 4, 16});
  qo::algo_entry a{qo::algo_name::auto_mixprecision, qo::option_value::object()};
  a.params.set("act_target_quant_type", "QMX");
  a.params.set("dual_quant_nodes", true);
  c.algo_config.push_back(a);
  qo::quantize_report report;
  const qo::model q = quantize(fp, c, "x", {1, 4, 16}, &report);
  const auto pp = to_proto(plain);
  const auto p = to_proto(q);
  const auto* mm = node_named(p, "n0");
  const auto* mm_plain = node_named(pp, "n0");
  REQUIRE((mm && mm_plain));
  const auto* wdq = producer(p, mm->input(1));
  const auto* wdq_plain = producer(pp, mm_plain->input(1));
  REQUIRE((wdq && wdq_plain));
  CHECK(wdq->op_type() == "DequantizeLinear");
  CHECK(int_attr(*wdq, "block_size") == 8);
  for (int k = 0; k < wdq->input_size(); ++k) {  // the same codes, scales and zero points
    const auto* t = find_init(p, wdq->input(k));
    const auto* u = find_init(pp, wdq_plain->input(k));
    REQUIRE((t && u));
    CHECK(t->raw_data() == u->raw_data());
  }
  const auto* fx = producer(p, mm->input(0));
  REQUIRE(fx != nullptr);
  CHECK(fx->op_type() == "MXQuantizeDequantize");
  CHECK(producer(p, fx->input(0))->op_type() == "DequantizeLinear");
  CHECK(count_op(p, "MXQuantizeDequantize") == 1);
  bool noted = false;
  for (const auto& n : report.notes) {
    noted = noted || (n.find("input 1 of 'n0' keeps its DequantizeLinear") != std::string::npos &&
                      n.find("not integers per tensor or per channel") != std::string::npos);
  }
  CHECK(noted);
}
