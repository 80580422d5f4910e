// SPDX-License-Identifier: MIT
// Auto mixed precision (algo_config "auto_mixprecision", quark-spec §10.10; algo_auto_mp.cpp).
//
// The fixture is a chain of four 1x1 convolutions whose one sensitive tensor is known by
// construction: conv A multiplies channel 1 by 1000 (per-channel weights keep that exact), conv B
// reads only channel 0 of A's output. B's input therefore has a 1000x wider range than the values
// B uses: one int8 step of that tensor (~7.9) swallows them, int16 (~0.03) keeps them; the inputs
// of A, C and D span about 1. The algorithm must pick exactly B's input, in both directions:
//  * A8W8 (per-channel weights) + act_target_quant_type QInt16 raises B alone (l2_target,
//    top1_acc_target, num_target 1);
//  * A16W8 + act_target_quant_type QInt8 lowers A, C and D and keeps B (l2_target, num_target 3).
// The metric the quantizer reports equals the average L2 computed from ONNX Runtime 1.30's outputs
// of the float and the produced model on the same samples; every produced model runs in ORT and
// agrees with our runtime; the Q/DQ types in the file are checked directly; bad parameters are
// errors naming the parameter.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>

#include <doctest/doctest.h>

// support/ort.hpp first: inside quark::test, "onnx::" must find ::onnx, not quark::onnx.
#include <quark/metrics.hpp>
#include <quark/onnx/config.hpp>
#include <quark/onnx/model.hpp>
#include <quark/onnx/presets.hpp>
#include <quark/onnx/quantizer.hpp>

#include "support/model_files.hpp"
#include "support/ort.hpp"

namespace fs = std::filesystem;
namespace qo = quark::onnx;
using namespace quark::test;

namespace {

constexpr std::size_t n_samples = 4;
const std::vector<std::int64_t> x_shape{1, 2, 4, 4};

/// x -> A (diag(1, 1000)) -> a -> B (reads channel 0 only) -> b -> C -> c -> D -> y; D's first
/// bias is `d_bias0`.
::onnx::ModelProto chain(float d_bias0 = 0.0f) {
  model_builder b(13);
  b.input("x", onnx_type::float32, x_shape);
  auto conv = [&](const char* name, const char* in, const char* out, std::vector<float> w,
                  std::vector<float> bias) {
    const std::string wn = std::string(name) + "_w", bn = std::string(name) + "_b";
    b.initializer(wn, onnx_type::float32, {2, 2, 1, 1}, std::move(w));
    b.initializer(bn, onnx_type::float32, {2}, std::move(bias));
    b.node("Conv", {in, wn, bn}, {out});
  };
  conv("A", "x", "a", {1, 0, 0, 1000}, {0.1f, -0.2f});
  conv("B", "a", "b", {1, 0, 0.5f, 0}, {0.05f, 0.0f});
  conv("C", "b", "c", {0.7f, 0.3f, -0.4f, 0.9f}, {0.0f, 0.1f});
  conv("D", "c", "y", {1, 1, 1, -1}, {d_bias0, 0.0f});
  b.output("y", onnx_type::float32, x_shape);
  ::onnx::ModelProto m = b.build();
  for (int i = 0; i < 4; ++i)
    m.mutable_graph()->mutable_node(i)->set_name(std::string(1, static_cast<char>('A' + i)));
  return m;
}

std::vector<float> sample(std::uint32_t k) {
  return random_floats(32, 700 + k, -1.0f, 1.0f);
}

std::vector<qo::calib_sample> samples() {
  std::vector<qo::calib_sample> out;
  for (std::uint32_t k = 0; k < n_samples; ++k)
    out.push_back({{"x", qo::tensor::from_floats(x_shape, sample(k))}});
  return out;
}

qo::option_value obj(std::initializer_list<std::pair<const char*, qo::option_value>> kv) {
  qo::option_value::object_type o;
  for (const auto& [k, v] : kv)
    o.push_back(qo::option_member{k, v});
  return qo::option_value(std::move(o));
}

/// `preset` with per-channel weights and an auto_mixprecision entry.
qo::qconfig mp_config(const char* preset, qo::option_value params) {
  qo::qconfig cfg = qo::get_default_config(preset);
  cfg.global_config.weight->quant_granularity = qo::granularity::channel;
  cfg.algo_config.push_back(
      {.name = qo::algo_name::auto_mixprecision, .params = std::move(params)});
  return cfg;
}

struct result {
  ::onnx::ModelProto float_model;
  ::onnx::ModelProto model;
  qo::quantize_report report;
  fs::path path;
};

result quantize(const qo::qconfig& cfg, const std::string& tag, float d_bias0 = 0.0f) {
  const fs::path dir = work_dir();
  result r;
  r.float_model = chain(d_bias0);
  save_proto(r.float_model, dir / "chain.onnx");
  qo::memory_reader reader(samples());
  r.path = dir / ("chain_" + tag + ".onnx");
  r.report = qo::quantize_model(dir / "chain.onnx", r.path, cfg, reader);
  r.model = load_proto(r.path);
  return r;
}

/// The node writing each tensor of `m`, by its first output.
std::map<std::string, const ::onnx::NodeProto*> producers(const ::onnx::ModelProto& m) {
  std::map<std::string, const ::onnx::NodeProto*> out;
  for (const auto& n : m.graph().node())
    out[n.output(0)] = &n;
  return out;
}

/// Element type of the zero point of the DequantizeLinear that feeds node `node`'s input `slot`;
/// for a Cast pair (Cast(to T) -> Cast(to FLOAT), or a T initializer -> Cast(to FLOAT)), T.
int input_type(const ::onnx::ModelProto& m, const std::string& node, int slot) {
  const auto producer = producers(m);
  auto cast_to = [](const ::onnx::NodeProto& c) {
    REQUIRE(c.attribute_size() == 1);
    return static_cast<int>(c.attribute(0).i());
  };
  for (const auto& n : m.graph().node()) {
    if (n.name() != node)
      continue;
    const auto* dq = producer.count(n.input(slot)) ? producer.at(n.input(slot)) : nullptr;
    REQUIRE(dq != nullptr);
    if (dq->op_type() == "Cast") {
      REQUIRE(cast_to(*dq) == onnx_type::float32);
      for (const auto& t : m.graph().initializer()) {
        if (t.name() == dq->input(0))
          return t.data_type();
      }
      const auto* q = producer.count(dq->input(0)) ? producer.at(dq->input(0)) : nullptr;
      REQUIRE(q != nullptr);
      REQUIRE(q->op_type() == "Cast");
      return cast_to(*q);
    }
    REQUIRE(dq->op_type() == "DequantizeLinear");
    for (const auto& t : m.graph().initializer()) {
      if (t.name() == dq->input(2))
        return t.data_type();
    }
  }
  FAIL("node or zero point not found: " << node);
  return 0;
}

/// The last auto_mixprecision summary note: "... <metric> <before> -> <after> (...)".
std::pair<double, double> reported_metric(const qo::quantize_report& r) {
  for (auto it = r.notes.rbegin(); it != r.notes.rend(); ++it) {
    if (it->find("target nodes lowered") == std::string::npos &&
        it->find("target nodes raised") == std::string::npos)
      continue;
    const auto semi = it->find("; ");
    const auto arrow = it->find(" -> ", semi);
    REQUIRE(arrow != std::string::npos);
    const std::string before = it->substr(0, arrow);
    const auto sp = before.rfind(' ');
    const double b = std::stod(before.substr(sp + 1));
    std::istringstream rest(it->substr(arrow + 4));
    double a = 0;
    rest >> a;
    return {b, a};
  }
  FAIL("no auto_mixprecision summary note");
  return {0, 0};
}

std::vector<std::string> changed_nodes(const qo::quantize_report& r) {
  for (auto it = r.notes.rbegin(); it != r.notes.rend(); ++it) {
    const auto open = it->find(" (");
    if (it->find("auto_mixprecision: ") != 0 || it->find("target nodes ") == std::string::npos)
      continue;
    std::vector<std::string> out;
    if (open == std::string::npos || it->back() != ')')
      return out;
    std::string list = it->substr(it->rfind(" (") + 2);
    list.pop_back();
    std::istringstream is(list);
    std::string name;
    while (std::getline(is, name, ',')) {
      while (!name.empty() && name.front() == ' ')
        name.erase(name.begin());
      out.push_back(name);
    }
    return out;
  }
  return {};
}

/// Average L2 between ORT's outputs of the float model and of `q` over the calibration samples
/// (quark-spec §11.1: Euclidean norm of the difference, averaged over samples); also checks that
/// our runtime agrees with ORT on `q`.
double ort_l2(const result& q) {
  // No initializer is left behind by a changed pair (ORT would warn and drop it).
  std::set<std::string> read;
  for (const auto& n : q.model.graph().node())
    read.insert(n.input().begin(), n.input().end());
  for (const auto& t : q.model.graph().initializer()) {
    CAPTURE(t.name());
    CHECK(read.contains(t.name()));
  }
  const auto& fm = q.float_model;
  const std::vector<std::size_t> dims(x_shape.begin(), x_shape.end());
  double sum = 0.0;
  for (std::uint32_t k = 0; k < n_samples; ++k) {
    const std::vector<float> x = sample(k);
    const auto f = run_ort(fm, {npy_array::from(x, dims)}).at("y").values<float>();
    const auto y = run_ort(q.model, {npy_array::from(x, dims)}).at("y").values<float>();
    REQUIRE(f.size() == y.size());
    double s = 0.0;
    for (std::size_t i = 0; i < f.size(); ++i) {
      const double d = static_cast<double>(f[i]) - static_cast<double>(y[i]);
      s += d * d;
    }
    sum += std::sqrt(s);
    const auto ours = qo::run_model(q.path, {{"x", qo::tensor::from_floats(x_shape, x)}});
    const auto o = ours.at("y").data<float>();
    REQUIRE(o.size() == y.size());
    for (std::size_t i = 0; i < y.size(); ++i) {
      CAPTURE(i);
      CHECK(std::fabs(o[i] - y[i]) <= 1e-4f * std::max(1.0f, std::fabs(y[i])));
    }
  }
  return sum / n_samples;
}

/// The one float of a scalar float initializer (float_data or raw_data).
float scalar_float(const ::onnx::TensorProto& t) {
  REQUIRE(t.data_type() == onnx_type::float32);
  if (t.float_data_size() == 1)
    return t.float_data(0);
  REQUIRE(t.raw_data().size() == sizeof(float));
  float v = 0.0f;
  std::memcpy(&v, t.raw_data().data(), sizeof v);
  return v;
}

/// Initializer `name` of `m` (the test fails without it).
const ::onnx::TensorProto& init_of(const ::onnx::ModelProto& m, const std::string& name) {
  const ::onnx::TensorProto* t = find_init(m, name);
  REQUIRE_MESSAGE(t != nullptr, "no initializer " << name);
  return *t;
}

/// The chain's output scaled by 64 and cast to `to`, at `opset`.
::onnx::ModelProto cast_chain(int to, std::int64_t opset) {
  ::onnx::ModelProto m = chain();
  m.mutable_opset_import(0)->set_version(opset);
  m.mutable_graph()->mutable_output(0)->set_name("y_float");
  for (auto& n : *m.mutable_graph()->mutable_node()) {
    for (auto& o : *n.mutable_output())
      if (o == "y")
        o = "y_float";
  }
  auto* k = m.mutable_graph()->add_initializer();
  k->set_name("k64");
  k->set_data_type(onnx_type::float32);
  k->add_float_data(64.0f);
  auto* mul = m.mutable_graph()->add_node();
  mul->set_op_type("Mul");
  mul->set_name("scale");
  mul->add_input("y_float");
  mul->add_input("k64");
  mul->add_output("y64");
  auto* cast = m.mutable_graph()->add_node();
  cast->set_op_type("Cast");
  cast->set_name("to_type");
  cast->add_input("y64");
  cast->add_output("y");
  auto* a = cast->add_attribute();
  a->set_name("to");
  a->set_type(::onnx::AttributeProto::INT);
  a->set_i(to);
  m.mutable_graph()->clear_output();
  auto* out = m.mutable_graph()->add_output();
  out->set_name("y");
  out->mutable_type()->mutable_tensor_type()->set_elem_type(to);
  return m;
}

constexpr int i8 = onnx_type::int8;
constexpr int i16 = onnx_type::int16;

}  // namespace

TEST_CASE("auto MP raises exactly the sensitive tensor (A8W8 + act_target_quant_type QInt16)") {
  if (!ort_available()) {
    MESSAGE("skipped: " << ort_unavailable_reason());
    return;
  }
  // Default l2_target 0.5.
  const result q = quantize(mp_config("A8W8", obj({{"act_target_quant_type", "QInt16"}})), "raise");
  CHECK(changed_nodes(q.report) == std::vector<std::string>{"B"});
  CHECK(input_type(q.model, "A", 0) == i8);
  CHECK(input_type(q.model, "B", 0) == i16);
  CHECK(input_type(q.model, "C", 0) == i8);
  CHECK(input_type(q.model, "D", 0) == i8);
  CHECK(input_type(q.model, "B", 1) == i8);  // weights keep their type (no weight target)
  CHECK(q.model.opset_import(0).version() >= 21);
  const auto [before, after] = reported_metric(q.report);
  MESSAGE("raise: average L2 " << before << " -> " << after);
  CHECK(before > 0.5);
  CHECK(after <= 0.5);
  const double l2 = ort_l2(q);
  CHECK(after == doctest::Approx(l2).epsilon(1e-3));
  // The summary counts one int16 activation.
  CHECK(q.report.tensors_per_type.at("int16") == 1);

  SUBCASE("num_target 1 and top1_acc_target 0 pick the same node") {
    const result n = quantize(
        mp_config("A8W8", obj({{"act_target_quant_type", "QInt16"}, {"num_target", 1}})), "n1");
    CHECK(changed_nodes(n.report) == std::vector<std::string>{"B"});
    const result t = quantize(mp_config("A8W8", obj({{"act_target_quant_type", "QInt16"},
                                                     {"l2_target", nullptr},
                                                     {"top1_acc_target", 0.0}})),
                              "top1");
    CHECK(changed_nodes(t.report) == std::vector<std::string>{"B"});
    CHECK(reported_metric(t.report).second == 0.0);
    CHECK(input_type(t.model, "B", 0) == i16);
    ort_l2(t);
  }
  SUBCASE("target_tensors and target_indices change what they name, unmeasured") {
    const result tt =
        quantize(mp_config("A8W8", obj({{"act_target_quant_type", "QInt16"},
                                        {"target_tensors", qo::option_value::array({"c"})}})),
                 "tensors");
    CHECK(input_type(tt.model, "D", 0) == i16);
    CHECK(input_type(tt.model, "B", 0) == i8);
    ort_l2(tt);
    const result ti =
        quantize(mp_config("A8W8", obj({{"act_target_quant_type", "QInt16"},
                                        {"target_indices", qo::option_value::array({0, 2})}})),
                 "indices");
    CHECK(changed_nodes(ti.report) == std::vector<std::string>{"A", "C"});
    CHECK(input_type(ti.model, "A", 0) == i16);
    CHECK(input_type(ti.model, "B", 0) == i8);
    CHECK(input_type(ti.model, "C", 0) == i16);
    ort_l2(ti);
  }
}

TEST_CASE("auto MP raises the sensitive tensor to bfloat16 (act_target_quant_type QBFloat16)") {
  if (!ort_available()) {
    MESSAGE("skipped: " << ort_unavailable_reason());
    return;
  }
  // B's input becomes Cast(bfloat16) -> Cast(float), unscaled (a BFloat16Spec's pair): its values
  // near 1 keep 8 significant bits instead of one int8 step of ~7.9.
  const result q =
      quantize(mp_config("A8W8", obj({{"act_target_quant_type", "QBFloat16"}})), "bf16");
  CHECK(changed_nodes(q.report) == std::vector<std::string>{"B"});
  CHECK(input_type(q.model, "A", 0) == i8);
  CHECK(input_type(q.model, "B", 0) == onnx_type::bfloat16);
  CHECK(input_type(q.model, "C", 0) == i8);
  CHECK(input_type(q.model, "B", 1) == i8);
  const auto [before, after] = reported_metric(q.report);
  MESSAGE("raise to bfloat16: average L2 " << before << " -> " << after);
  CHECK(after <= 0.5);
  CHECK(after == doctest::Approx(ort_l2(q)).epsilon(1e-3));
  CHECK(q.report.tensors_per_type.at("bfloat16") == 1);

  SUBCASE("weights too (target_indices [0]): A's weight stored as bfloat16 behind a Cast") {
    const result w =
        quantize(mp_config("A8W8", obj({{"act_target_quant_type", "QBFloat16"},
                                        {"weight_target_quant_type", "QBFloat16"},
                                        {"target_indices", qo::option_value::array({0})}})),
                 "bf16w");
    CHECK(input_type(w.model, "A", 0) == onnx_type::bfloat16);
    CHECK(input_type(w.model, "A", 1) == onnx_type::bfloat16);
    CHECK(input_type(w.model, "B", 1) == i8);
    // A's weight {1, 0, 0, 1000}: every value is a bfloat16 exactly (1000 = 0x447A -> 0x447A0000).
    const auto producer = producers(w.model);
    const ::onnx::NodeProto* a = node_named(w.model, "A");
    REQUIRE(a != nullptr);
    const ::onnx::NodeProto* cast = producer.at(a->input(1));
    const ::onnx::TensorProto* stored = find_init(w.model, cast->input(0));
    REQUIRE(stored != nullptr);
    REQUIRE(stored->raw_data().size() == 8);
    std::vector<std::uint16_t> bits(4);
    std::memcpy(bits.data(), stored->raw_data().data(), 8);
    CHECK(bits == std::vector<std::uint16_t>{0x3F80, 0x0000, 0x0000, 0x447A});
    ort_l2(w);
  }
  SUBCASE("QFloat16: the same node, a float16 Cast pair") {
    const result h =
        quantize(mp_config("A8W8", obj({{"act_target_quant_type", "QFloat16"}})), "fp16");
    CHECK(changed_nodes(h.report) == std::vector<std::string>{"B"});
    CHECK(input_type(h.model, "B", 0) == onnx_type::float16);
    CHECK(reported_metric(h.report).second == doctest::Approx(ort_l2(h)).epsilon(1e-3));
  }
  SUBCASE("dual_quant_nodes: B's int8 pair stays, a bfloat16 Cast pair follows it") {
    const result d = quantize(mp_config("A8W8", obj({{"act_target_quant_type", "QBFloat16"},
                                                     {"dual_quant_nodes", true}})),
                              "bf16dual");
    CHECK(input_type(d.model, "B", 0) == onnx_type::bfloat16);
    const auto producer = producers(d.model);
    const ::onnx::NodeProto* b = node_named(d.model, "B");
    REQUIRE(b != nullptr);
    const auto* back = producer.at(b->input(0));
    const auto* to_bf16 = producer.at(back->input(0));
    CHECK(producer.at(to_bf16->input(0))->op_type() == "DequantizeLinear");  // a's int8 pair
    CHECK(reported_metric(d.report).second == doctest::Approx(ort_l2(d)).epsilon(1e-3));
  }
}

TEST_CASE("auto MP raises the sensitive tensor to float8 (act_target_quant_type QFLOAT8E4M3FN)") {
  if (!ort_available()) {
    MESSAGE("skipped: " << ort_unavailable_reason());
    return;
  }
  // B's input becomes a float8 E4M3FN Q/DQ pair keeping the range its int8 codes spanned:
  // scale = 128 s / 448 (int8 codes reach -128), zero point 0. The values near 1 that B reads
  // keep 3 mantissa bits instead of falling into one int8 step of ~7.9.
  const result q =
      quantize(mp_config("A8W8", obj({{"act_target_quant_type", "QFLOAT8E4M3FN"}})), "fp8");
  CHECK(changed_nodes(q.report) == std::vector<std::string>{"B"});
  CHECK(input_type(q.model, "A", 0) == i8);
  CHECK(input_type(q.model, "B", 0) == onnx_type::float8e4m3fn);
  CHECK(input_type(q.model, "C", 0) == i8);
  CHECK(input_type(q.model, "B", 1) == i8);
  CHECK(q.model.opset_import(0).version() >= 19);
  CHECK(q.model.ir_version() >= 9);
  const auto [before, after] = reported_metric(q.report);
  MESSAGE("raise to float8: average L2 " << before << " -> " << after);
  CHECK(after <= 0.5);
  CHECK(after == doctest::Approx(ort_l2(q)).epsilon(1e-3));
  CHECK(q.report.tensors_per_type.at("float8_e4m3fn") == 1);

  SUBCASE("the float8 scale is 128 / 448 of the int8 one, the zero point a float8 +0") {
    const auto producer = producers(q.model);
    const ::onnx::NodeProto* b = node_named(q.model, "B");
    REQUIRE(b != nullptr);
    const ::onnx::NodeProto* dq = producer.at(b->input(0));
    REQUIRE(dq->op_type() == "DequantizeLinear");
    const ::onnx::NodeProto* ql = producer.at(dq->input(0));
    REQUIRE(ql->op_type() == "QuantizeLinear");
    // The int8 scale of the same tensor in the model without auto MP (same calibration).
    qo::qconfig plain_cfg = qo::get_default_config("A8W8");
    plain_cfg.global_config.weight->quant_granularity = qo::granularity::channel;
    const result plain = quantize(plain_cfg, "fp8_plain");
    const ::onnx::NodeProto* b0 = node_named(plain.model, "B");
    REQUIRE(b0 != nullptr);
    const ::onnx::NodeProto* dq0 = producers(plain.model).at(b0->input(0));
    const float s8 = scalar_float(init_of(plain.model, dq0->input(1)));
    const float s_fp8 = scalar_float(init_of(q.model, dq->input(1)));
    MESSAGE("int8 scale " << s8 << ", float8 scale " << s_fp8);
    CHECK(s_fp8 == static_cast<float>(128.0 * static_cast<double>(s8) / 448.0));
    const ::onnx::TensorProto& z = init_of(q.model, dq->input(2));
    CHECK(z.data_type() == onnx_type::float8e4m3fn);
    CHECK(ql->input(1) == dq->input(1));
  }
  SUBCASE("weights too (target_indices [0]): A's weight stored as float8 codes") {
    const result w =
        quantize(mp_config("A8W8", obj({{"act_target_quant_type", "QFLOAT8E4M3FN"},
                                        {"weight_target_quant_type", "QFLOAT8E4M3FN"},
                                        {"target_indices", qo::option_value::array({0})}})),
                 "fp8w");
    CHECK(input_type(w.model, "A", 0) == onnx_type::float8e4m3fn);
    CHECK(input_type(w.model, "A", 1) == onnx_type::float8e4m3fn);
    CHECK(input_type(w.model, "B", 1) == i8);
    // A's weight {1, 0, 0, 1000}, per channel: int8 scales max|w| / 127, so float8 scales
    // 128 max|w| / (127 * 448); 1 / that = 127 * 448 / 128 = 444.5, which E4M3FN rounds to 448
    // (its neighbours are 416 and 448): code 0x7E; 0 is 0x00.
    const ::onnx::NodeProto* a = node_named(w.model, "A");
    REQUIRE(a != nullptr);
    const ::onnx::NodeProto* dq = producers(w.model).at(a->input(1));
    const ::onnx::TensorProto& codes = init_of(w.model, dq->input(0));
    CHECK(codes.data_type() == onnx_type::float8e4m3fn);
    CHECK(codes.raw_data() == std::string("\x7E\x00\x00\x7E", 4));
    ort_l2(w);
  }
  SUBCASE("dual_quant_nodes: B's int8 pair stays, a float8 pair follows it") {
    const result d = quantize(mp_config("A8W8", obj({{"act_target_quant_type", "QFLOAT8E4M3FN"},
                                                     {"dual_quant_nodes", true}})),
                              "fp8dual");
    CHECK(input_type(d.model, "B", 0) == onnx_type::float8e4m3fn);
    const auto producer = producers(d.model);
    const ::onnx::NodeProto* b = node_named(d.model, "B");
    REQUIRE(b != nullptr);
    const auto* dq = producer.at(b->input(0));
    const auto* ql = producer.at(dq->input(0));
    REQUIRE(ql->op_type() == "QuantizeLinear");
    CHECK(producer.at(ql->input(0))->op_type() == "DequantizeLinear");  // a's int8 pair
    CHECK(reported_metric(d.report).second == doctest::Approx(ort_l2(d)).epsilon(1e-3));
  }
  SUBCASE("with UseQDQContribOps: a clear error (com.microsoft Q/DQ have no float8)") {
    qo::qconfig cfg = mp_config("A8W8", obj({{"act_target_quant_type", "QFLOAT8E4M3FN"}}));
    cfg.extra_options.set("UseQDQContribOps", true);
    const fs::path dir = work_dir();
    save_proto(chain(), dir / "chain.onnx");
    const std::string e = error_text([&] {
      qo::memory_reader reader(samples());
      qo::quantize_model(dir / "chain.onnx", dir / "fp8_contrib.onnx", cfg, reader);
    });
    CHECK(e.find("quark.config.unsupported_type") == 0);
    CHECK(e.find("act_target_quant_type") != std::string::npos);
    CHECK(!fs::exists(dir / "fp8_contrib.onnx"));
  }
}

TEST_CASE("auto MP lowers all but the sensitive tensor (A16W8 + act_target_quant_type QInt8)") {
  if (!ort_available()) {
    MESSAGE("skipped: " << ort_unavailable_reason());
    return;
  }
  const result q = quantize(mp_config("A16W8", obj({{"act_target_quant_type", "QInt8"}})), "lower");
  auto names = changed_nodes(q.report);
  std::sort(names.begin(), names.end());
  CHECK(names == std::vector<std::string>{"A", "C", "D"});
  CHECK(input_type(q.model, "A", 0) == i8);
  CHECK(input_type(q.model, "B", 0) == i16);
  CHECK(input_type(q.model, "C", 0) == i8);
  CHECK(input_type(q.model, "D", 0) == i8);
  const auto [before, after] = reported_metric(q.report);
  MESSAGE("lower: average L2 " << before << " -> " << after);
  CHECK(after <= 0.5);
  CHECK(after == doctest::Approx(ort_l2(q)).epsilon(1e-3));

  SUBCASE("num_target 3: the three least sensitive, whatever the metric") {
    const result n = quantize(
        mp_config(
            "A16W8",
            obj({{"act_target_quant_type", "QInt8"}, {"l2_target", nullptr}, {"num_target", 3}})),
        "lower3");
    auto nn = changed_nodes(n.report);
    std::sort(nn.begin(), nn.end());
    CHECK(nn == std::vector<std::string>{"A", "C", "D"});
  }
  SUBCASE("exclude_indices [1]: every other node lowered, unmeasured") {
    const result e =
        quantize(mp_config("A16W8", obj({{"act_target_quant_type", "QInt8"},
                                         {"exclude_indices", qo::option_value::array({1})}})),
                 "exclude");
    CHECK(changed_nodes(e.report) == std::vector<std::string>{"A", "C", "D"});
    CHECK(input_type(e.model, "B", 0) == i16);
  }
  SUBCASE("dual_quant_nodes: a second int8 pair after the int16 one") {
    const result d = quantize(
        mp_config("A16W8", obj({{"act_target_quant_type", "QInt8"}, {"dual_quant_nodes", true}})),
        "dual");
    // Each lowered node reads an int8 pair whose input is the int16 pair's output.
    CHECK(input_type(d.model, "A", 0) == i8);
    CHECK(input_type(d.model, "B", 0) == i16);
    int pairs = 0;
    for (const auto& n : d.model.graph().node())
      pairs += n.op_type() == "QuantizeLinear" ? 1 : 0;
    CHECK(pairs == 5 + 3);  // x, a, b, c, y at int16, plus three int8 pairs
    CHECK(reported_metric(d.report).second == doctest::Approx(ort_l2(d)).epsilon(1e-3));
  }
  SUBCASE("weights too: weight_target_quant_type QInt16 from A8W8 re-quantizes the weights") {
    // Raising with num_target and no metric target: the num_target most helpful nodes.
    const result w = quantize(mp_config("A8W8", obj({{"act_target_quant_type", "QInt16"},
                                                     {"weight_target_quant_type", "QInt16"},
                                                     {"l2_target", nullptr},
                                                     {"num_target", 4}})),
                              "weights16");
    for (const char* n : {"A", "B", "C", "D"}) {
      CAPTURE(std::string(n));
      CHECK(input_type(w.model, n, 0) == i16);
      CHECK(input_type(w.model, n, 1) == i16);
      CHECK(input_type(w.model, n, 2) == onnx_type::int32);
    }
    // Every input int16 (the output y keeps its int8 pair): far closer than the int8 model.
    const auto [b, a] = reported_metric(w.report);
    CHECK(a < b / 10);
    CHECK(a == doctest::Approx(ort_l2(w)).epsilon(1e-3));
  }
}

/// The values of a packed int4 / uint4 initializer (two per byte, low nibble first).
std::vector<int> nibbles(const ::onnx::TensorProto& t, bool is_signed) {
  std::vector<int> out;
  for (const char c : t.raw_data()) {
    const auto byte = static_cast<unsigned char>(c);
    for (const int u : {byte & 0xF, byte >> 4}) {
      out.push_back(is_signed && u >= 8 ? u - 16 : u);
    }
  }
  return out;
}

TEST_CASE("auto MP lowers weights to int4 (weight_target_quant_type QInt4 from A8W8)") {
  // target_indices [2, 3]: C and D take int4 weights, unmeasured. The per-channel int8 scale
  // max|w| / 127 becomes (max|w| / 127) * 255 / 15 (code span ratio), and the weight is
  // quantized again from the float model onto [-8, 7]. C's weight [[0.7, 0.3], [-0.4, 0.9]]:
  // channel 0 scale 0.7 * 17 / 127 = 0.0937, codes RNE(7.47) = 7, RNE(3.20) = 3; channel 1
  // 0.9 * 17 / 127 = 0.1205, codes RNE(-3.32) = -3, RNE(7.47) = 7.
  const result q =
      quantize(mp_config("A8W8", obj({{"weight_target_quant_type", "QInt4"},
                                      {"l2_target", nullptr},
                                      {"target_indices", qo::option_value::array({2, 3})}})),
               "int4w");
  CHECK(input_type(q.model, "A", 1) == i8);
  CHECK(input_type(q.model, "B", 1) == i8);
  CHECK(input_type(q.model, "C", 1) == onnx_type::int4);
  CHECK(input_type(q.model, "D", 1) == onnx_type::int4);
  CHECK(input_type(q.model, "C", 0) == i8);  // activations unchanged
  bool opset21 = false;
  for (const auto& o : q.model.opset_import())
    opset21 = opset21 || ((o.domain().empty() || o.domain() == "ai.onnx") && o.version() >= 21);
  CHECK(opset21);
  const auto producer = producers(q.model);
  const ::onnx::NodeProto* c = node_named(q.model, "C");
  REQUIRE(c != nullptr);
  const ::onnx::NodeProto* dq = producer.at(c->input(1));
  const auto codes = nibbles(init_of(q.model, dq->input(0)), true);
  REQUIRE(codes.size() >= 4);
  CHECK(std::vector<int>(codes.begin(), codes.begin() + 4) == std::vector<int>{7, 3, -3, 7});
  const auto scale = floats_of(init_of(q.model, dq->input(1)));
  REQUIRE(scale.size() == 2);
  CHECK(static_cast<double>(scale[0]) == doctest::Approx(0.7 / 127 * 17).epsilon(1e-6));
  CHECK(static_cast<double>(scale[1]) == doctest::Approx(0.9 / 127 * 17).epsilon(1e-6));
  if (ort_available()) {
    const double l2 = ort_l2(q);  // ORT runs it and agrees with our runtime
    MESSAGE("int4 weights on C, D: average L2 " << l2);
  }
  SUBCASE("with UseQDQContribOps: com.microsoft int4 at the model's opset, IR 10") {
    qo::qconfig cfg = mp_config("A8W8", obj({{"weight_target_quant_type", "QInt4"},
                                             {"l2_target", nullptr},
                                             {"target_indices", qo::option_value::array({2, 3})}}));
    cfg.extra_options.set("UseQDQContribOps", true);
    const result cq = quantize(cfg, "int4w_contrib");
    CHECK(input_type(cq.model, "C", 1) == onnx_type::int4);
    CHECK(cq.report.opset_after == 13);
    CHECK(cq.model.ir_version() >= 10);
    if (ort_available())
      CHECK(ort_l2(cq) == doctest::Approx(ort_l2(q)).epsilon(1e-6));  // the same numbers
  }
}

TEST_CASE("auto MP widens an int32 bias scale that cannot hold the bias (int16 input and weight)") {
  if (!ort_available()) {
    MESSAGE("skipped: " << ort_unavailable_reason());
    return;
  }
  // D's first bias, 1e4, fits A8W8's bias scale (input scale * weight scale, about |c|max / 127 /
  // 127: codes ~1e8). Raising D's input and weights to int16 shrinks that product about 66000x:
  // the codes would reach ~1e13, far past int32. Hand-derived expectation: that channel's scale
  // becomes the smallest that holds 1e4 (1e4 / 2147483520, the largest float32 <= 2^31 - 1), the
  // other channel (bias 0) keeps input scale * weight scale exactly.
  constexpr float big = 1e4f;
  const result w = quantize(mp_config("A8W8", obj({{"act_target_quant_type", "QInt16"},
                                                   {"weight_target_quant_type", "QInt16"},
                                                   {"l2_target", nullptr},
                                                   {"num_target", 4}})),
                            "widen", big);
  CHECK(input_type(w.model, "D", 0) == i16);
  CHECK(input_type(w.model, "D", 1) == i16);
  CHECK(input_type(w.model, "D", 2) == onnx_type::int32);
  CHECK(std::any_of(w.report.notes.begin(), w.report.notes.end(), [](const std::string& n) {
    return n.find("auto_mixprecision: 1 int32 bias channels take a wider scale") == 0;
  }));

  const qo::model m = to_model(w.model);
  const auto producer = producers(w.model);
  const ::onnx::NodeProto* d = node_named(w.model, "D");
  REQUIRE(d != nullptr);
  auto floats = [&](int slot, int arg) {
    const auto* dq = producer.at(d->input(slot));
    const auto t = m.initializer(dq->input(arg));
    const auto v = t.data<float>();
    return std::vector<float>(v.begin(), v.end());
  };
  const std::vector<float> s_in = floats(0, 1), s_w = floats(1, 1), s_b = floats(2, 1);
  REQUIRE(s_in.size() == 1);
  REQUIRE(s_w.size() == 2);
  REQUIRE(s_b.size() == 2);
  const auto codes_t = m.initializer(producer.at(d->input(2))->input(0));
  const auto codes = codes_t.data<std::int32_t>();
  REQUIRE(codes.size() == 2);
  // Channel 1: untouched product.
  CHECK(s_b[1] == s_in[0] * s_w[1]);
  CHECK(codes[1] == 0);
  // Channel 0: the holding scale, and its code dequantizes to the bias within half a step.
  const double holding = static_cast<double>(big) / 2147483520.0;
  CHECK(s_b[0] > s_in[0] * s_w[0]);
  CHECK(static_cast<double>(s_b[0]) == doctest::Approx(holding).epsilon(1e-6));
  CHECK(std::abs(static_cast<double>(codes[0])) <= 2147483520.0);
  const auto sb0 = static_cast<double>(s_b[0]), b = static_cast<double>(big);
  CHECK(std::fabs(codes[0] * sb0 - b) <= 0.5 * sb0 + 1e-7 * b);
  // The model runs in ORT and agrees with our runtime. Its error stays within what y's own int8
  // pair allows (half a step on each of the 32 outputs, plus 1 for the int16 pairs), while a bias
  // that had wrapped or saturated would be off by thousands on 16 of them.
  const double l2 = ort_l2(w);
  const auto* ydq = producer.at("y");
  REQUIRE(ydq->op_type() == "DequantizeLinear");
  const double s_y = static_cast<double>(m.initializer(ydq->input(1)).data<float>()[0]);
  MESSAGE("widened bias: average L2 " << l2 << ", y step " << s_y);
  CHECK(l2 <= 0.5 * s_y * std::sqrt(32.0) + 1.0);
  CHECK(reported_metric(w.report).second == doctest::Approx(l2).epsilon(1e-3));
}

TEST_CASE("auto_mix_use_fast_ft: candidates fine-tuned before measured, weights not kept") {
  if (!ort_available()) {
    MESSAGE("skipped: " << ort_unavailable_reason());
    return;
  }
  // Quark fine-tunes each candidate once mixed, measures it, and restores the weights: the
  // ranking may change, the written model's weights are those of round-to-nearest.
  const result plain =
      quantize(mp_config("A8W8", obj({{"act_target_quant_type", "QInt16"}})), "ft_off");
  qo::qconfig cfg =
      mp_config("A8W8", obj({{"act_target_quant_type", "QInt16"}, {"auto_mix_use_fast_ft", true}}));
  const result ft = quantize(cfg, "ft_on");  // no adaround entry: AdaRound at its defaults
  const auto note = std::find_if(ft.report.notes.begin(), ft.report.notes.end(), [](const auto& n) {
    return n.find(
               "auto_mix_use_fast_ft: each candidate fine-tuned alone (adaround, 1000 "
               "iterations)") != std::string::npos;
  });
  REQUIRE(note != ft.report.notes.end());
  MESSAGE(*note);
  for (const auto& n : ft.report.notes) {
    if (n.find("rank ") != std::string::npos)
      MESSAGE(n);
  }
  CHECK(changed_nodes(ft.report) == std::vector<std::string>{"B"});
  CHECK(input_type(ft.model, "B", 0) == i16);
  // The weights as written equal the run without fast finetuning.
  for (const auto& a : plain.model.graph().initializer()) {
    for (const auto& b : ft.model.graph().initializer()) {
      if (a.name() == b.name()) {
        CAPTURE(a.name());
        CHECK(a.raw_data() == b.raw_data());
      }
    }
  }
  CHECK(reported_metric(ft.report).second == doctest::Approx(ort_l2(ft)).epsilon(1e-3));
}

TEST_CASE("auto MP: bad parameters are errors naming the parameter") {
  const fs::path dir = work_dir();
  save_proto(chain(), dir / "chain.onnx");
  auto run = [&](qo::option_value params) {
    return error_text([&] {
      qo::memory_reader reader(samples());
      qo::quantize_model(dir / "chain.onnx", dir / "bad.onnx", mp_config("A8W8", params), reader);
    });
  };
  const std::string unknown = run(obj({{"act_target_quant_type", "QInt7"}}));
  CHECK(unknown.find("quark.config.value") == 0);
  CHECK(unknown.find("act_target_quant_type") != std::string::npos);
  const std::string none = run(obj({{"weight_target_quant_type", nullptr}}));
  CHECK(none.find("act_target_quant_type or weight_target_quant_type") != std::string::npos);
  const std::string both_null = run(obj(
      {{"act_target_quant_type", "QInt16"}, {"l2_target", nullptr}, {"top1_acc_target", nullptr}}));
  CHECK(both_null.find("quark.config.value") == 0);
  CHECK(both_null.find("l2_target") != std::string::npos);
  const std::string negative = run(obj({{"act_target_quant_type", "QInt16"}, {"num_target", -1}}));
  CHECK(negative.find("quark.config.value") == 0);
  CHECK(negative.find("num_target") != std::string::npos);
  const std::string index = run(
      obj({{"act_target_quant_type", "QInt16"}, {"target_indices", qo::option_value::array({9})}}));
  CHECK(index.find("target_indices") != std::string::npos);
  const std::string tensor = run(obj(
      {{"act_target_quant_type", "QInt16"}, {"target_tensors", qo::option_value::array({"zz"})}}));
  CHECK(tensor.find("target_tensors") != std::string::npos);
  CHECK(run(obj({{"act_target_quant_type", "QInt16"}, {"output_index", 3}})).find("output_index") !=
        std::string::npos);
  // Type names are read as TensorQuantOverrides' quant_type (prefix and case free): this one gets
  // as far as the output_index check.
  CHECK(run(obj({{"act_target_quant_type", "ExtendedQuantType.QINT16"}, {"output_index", 3}}))
            .find("output_index") != std::string::npos);
  // E5M2 has no quant type name in ONNX Runtime or Quark (QFLOAT8E4M3FN is the float8 one).
  const std::string e5m2 = run(obj({{"act_target_quant_type", "QFloat8E5M2"}}));
  CHECK(e5m2.find("quark.config.value") == 0);
  CHECK(e5m2.find("QFLOAT8E4M3FN") != std::string::npos);
  // QBFP / QMX (block mixing): activation and weight targets together, no selection parameters.
  const std::string mixed =
      run(obj({{"act_target_quant_type", "QBFP"}, {"weight_target_quant_type", "QInt8"}}));
  CHECK(mixed.find("quark.config.value") == 0);
  CHECK(mixed.find("weight_target_quant_type: must be null or QBFP") != std::string::npos);
  const std::string weight_only =
      run(obj({{"act_target_quant_type", nullptr}, {"weight_target_quant_type", "QMX"}}));
  CHECK(weight_only.find("auto_mixprecision.weight_target_quant_type") != std::string::npos);
  CHECK(weight_only.find("set act_target_quant_type") != std::string::npos);
  const std::string selection = run(obj({{"act_target_quant_type", "QMX"}, {"num_target", 2}}));
  CHECK(selection.find("auto_mixprecision.num_target: has no use with QBFP / QMX") !=
        std::string::npos);
  CHECK(run(obj({{"act_target_quant_type", "QInt16"}, {"evaluate_function", "f"}}))
            .find("quark.config.not_implemented") == 0);
  CHECK(run(obj({{"act_target_quant_type", "QInt32"}})).find("act_target_quant_type") !=
        std::string::npos);
  // Float8 pairs have no integer codes to move: nothing can change, so an error rather than a
  // report of nodes "raised" that kept their type (before: 3 of 4 "raised", the same model).
  {
    qo::qconfig fp8 = mp_config(
        "A8W8",
        obj({{"act_target_quant_type", "QInt16"}, {"l2_target", nullptr}, {"num_target", 2}}));
    qo::tensor_spec spec = qo::make_spec(qo::spec_name::fp8_e4m3fn);
    spec.calibration_method = qo::calib_method::min_max;
    fp8.global_config.input_tensors = spec;
    fp8.global_config.weight = spec;
    const std::string e = error_text([&] {
      qo::memory_reader reader(samples());
      qo::quantize_model(dir / "chain.onnx", dir / "bad.onnx", fp8, reader);
    });
    CHECK(e.find("quark.config.not_implemented") == 0);
    CHECK(e.find("not integer") != std::string::npos);
  }
  // No file is left behind.
  CHECK(!fs::exists(dir / "bad.onnx"));
}

TEST_CASE(
    "auto MP: integer and float8 outputs are measured, a model without target nodes is left as "
    "is") {
  if (!ort_available()) {
    MESSAGE("skipped: " << ort_unavailable_reason());
    return;
  }
  const fs::path dir = work_dir();
  const std::vector<std::size_t> dims(x_shape.begin(), x_shape.end());
  SUBCASE("the chain's output scaled by 64 and cast to int32") {
    const ::onnx::ModelProto m = cast_chain(onnx_type::int32, 13);
    save_proto(m, dir / "chain_int.onnx");
    qo::memory_reader reader(samples());
    const qo::quantize_report rep = qo::quantize_model(
        dir / "chain_int.onnx", dir / "chain_int_mp.onnx",
        mp_config("A8W8", obj({{"act_target_quant_type", "QInt16"}, {"num_target", 1}})), reader);
    // B's input is the sensitive one whatever the output's type (the fixture's construction).
    CHECK(changed_nodes(rep) == std::vector<std::string>{"B"});
    const ::onnx::ModelProto q = load_proto(dir / "chain_int_mp.onnx");
    CHECK(input_type(q, "B", 0) == i16);
    CHECK(input_type(q, "C", 0) == i8);
    // The reported metric is the average L2 of the int32 outputs, as ONNX Runtime computes them.
    double sum = 0.0;
    for (std::uint32_t s = 0; s < n_samples; ++s) {
      const std::vector<float> x = sample(s);
      const auto f = run_ort(m, {npy_array::from(x, dims)}).at("y").values<std::int32_t>();
      const auto y = run_ort(q, {npy_array::from(x, dims)}).at("y").values<std::int32_t>();
      REQUIRE(f.size() == y.size());
      double e = 0.0;
      for (std::size_t i = 0; i < f.size(); ++i) {
        const double d = static_cast<double>(f[i]) - static_cast<double>(y[i]);
        e += d * d;
      }
      sum += std::sqrt(e);
    }
    const auto [before, after] = reported_metric(rep);
    MESSAGE("int32 output: average L2 " << before << " -> " << after);
    CHECK(before > after);
    CHECK(after == doctest::Approx(sum / n_samples).epsilon(1e-3));
  }
  SUBCASE("the same cast to float8 E4M3FN: measured through the float8 decoder") {
    save_proto(cast_chain(onnx_type::float8e4m3fn, 19), dir / "chain_f8.onnx");
    qo::memory_reader reader(samples());
    const qo::quantize_report rep = qo::quantize_model(
        dir / "chain_f8.onnx", dir / "chain_f8_mp.onnx",
        mp_config("A8W8", obj({{"act_target_quant_type", "QInt16"}, {"num_target", 1}})), reader);
    CHECK(changed_nodes(rep) == std::vector<std::string>{"B"});
    const auto [before, after] = reported_metric(rep);
    CHECK(before > after);
    CHECK(input_type(load_proto(dir / "chain_f8_mp.onnx"), "B", 0) == i16);
  }
  SUBCASE("no Conv / Gemm / MatMul: nothing to mix, the model is written") {
    model_builder b(13);
    b.input("x", onnx_type::float32, x_shape);
    b.node("Relu", {"x"}, {"r"});
    b.node("Greater", {"r", "x"}, {"y"});
    b.output("y", onnx_type::boolean, x_shape);
    save_proto(b.build(), dir / "compare.onnx");
    qo::memory_reader reader(samples());
    const qo::quantize_report rep =
        qo::quantize_model(dir / "compare.onnx", dir / "compare_mp.onnx",
                           mp_config("A8W8", obj({{"act_target_quant_type", "QInt16"}})), reader);
    CHECK(std::any_of(rep.notes.begin(), rep.notes.end(), [](const std::string& n) {
      return n.find("auto_mixprecision: the model has no target node") == 0;
    }));
    CHECK(changed_nodes(rep).empty());
    REQUIRE(fs::exists(dir / "compare_mp.onnx"));
    const std::vector<float> x = sample(0);
    const auto y = run_ort(load_proto(dir / "compare_mp.onnx"), {npy_array::from(x, dims)});
    CHECK(y.at("y").values<std::uint8_t>().size() == x.size());
  }
}

TEST_CASE("EvalMetrics: an integer output is compared by its values, as in ONNX Runtime") {
  if (!ort_available()) {
    MESSAGE("skipped: " << ort_unavailable_reason());
    return;
  }
  const fs::path dir = work_dir();
  const std::vector<std::size_t> dims(x_shape.begin(), x_shape.end());
  const ::onnx::ModelProto m = cast_chain(onnx_type::int32, 13);
  save_proto(m, dir / "eval_int.onnx");
  qo::qconfig cfg = qo::get_default_config("A8W8");
  cfg.extra_options.set("EvalMetrics", true);
  qo::memory_reader reader(samples());
  const qo::quantize_report rep =
      qo::quantize_model(dir / "eval_int.onnx", dir / "eval_int_q.onnx", cfg, reader);
  REQUIRE(rep.eval);
  CHECK(rep.eval->samples == n_samples);
  // The cosine and L2 distance of the two models' int32 outputs as ONNX Runtime computes them.
  const ::onnx::ModelProto q = load_proto(dir / "eval_int_q.onnx");
  double cos_sum = 0.0, l2_sum = 0.0;
  for (std::uint32_t s = 0; s < n_samples; ++s) {
    const std::vector<float> x = sample(s);
    const auto f = run_ort(m, {npy_array::from(x, dims)}).at("y").values<std::int32_t>();
    const auto y = run_ort(q, {npy_array::from(x, dims)}).at("y").values<std::int32_t>();
    REQUIRE(f.size() == y.size());
    double xy = 0.0, xx = 0.0, yy = 0.0, d2 = 0.0;
    for (std::size_t i = 0; i < f.size(); ++i) {
      const auto a = static_cast<double>(f[i]);
      const auto b = static_cast<double>(y[i]);
      xy += a * b;
      xx += a * a;
      yy += b * b;
      d2 += (a - b) * (a - b);
    }
    cos_sum += xy / std::sqrt(xx * yy);
    l2_sum += std::sqrt(d2);
  }
  MESSAGE("int32 output: cosine " << rep.eval->cosine_mean << ", L2 " << rep.eval->l2_mean);
  CHECK(l2_sum > 0.0);  // the quantization changed some values: the comparison is not trivial
  CHECK(rep.eval->cosine_mean == doctest::Approx(cos_sum / n_samples).epsilon(1e-6));
  CHECK(rep.eval->l2_mean == doctest::Approx(l2_sum / n_samples).epsilon(1e-3));
}

TEST_CASE("EvalMetrics: outputs of another size are an error naming the output") {
  // NonZero of quantized data: 0.01 next to 10 rounds to 0 in int8 (scale 10/127), so the
  // quantized model finds fewer non-zero values than the float one; there is nothing to compare
  // value by value, and no model is written.
  model_builder b(13);
  b.input("x", onnx_type::float32, {8});
  b.initializer("k", onnx_type::float32, {}, std::vector<float>{1.0f});
  b.node("Mul", {"x", "k"}, {"m"});
  b.node("NonZero", {"m"}, {"nz"});
  b.output("nz", onnx_type::int64, {1, -1});
  const fs::path dir = work_dir();
  save_proto(b.build(), dir / "nonzero.onnx");
  qo::qconfig cfg = qo::get_default_config("A8W8");
  cfg.extra_options.set("EvalMetrics", true);
  const std::vector<float> x{10.0f, 0.01f, -0.01f, 5.0f, 0.02f, -3.0f, 0.015f, 1.0f};
  qo::memory_reader reader({{{"x", qo::tensor::from_floats({8}, x)}}});
  const fs::path out = dir / "nonzero_q.onnx";
  fs::remove(out);
  CHECK_THROWS_WITH(
      qo::quantize_model(dir / "nonzero.onnx", out, cfg, reader),
      doctest::Contains("quark.eval.shape: output 'nz': the float model gives 8 values, the "
                        "quantized model 4"));
  CHECK_FALSE(fs::exists(out));
}
