// SPDX-License-Identifier: MIT
// UseMatMulNBits (seed 000 category 9, preset MATMUL_NBITS): the constant B of each MatMul
// stored block-wise in a com.microsoft::MatMulNBits node. Oracles: the stored scales against
// quark-spec §10.7's formulas evaluated here from the float weight; ONNX Runtime 1.30 reading the
// stored bytes (a product with the identity gives back its dequantized B, which must reproduce
// the block's largest value exactly and every other value within one step); ORT and our runtime
// agreeing on the outputs of every quantized model; hand-derived codes are in
// tests/quant/nbits_test.cpp. Bad configurations and weights fail naming the key or the node,
// with no file left behind.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include <quark/dtype/convert.hpp>
#include <quark/metrics.hpp>
#include <quark/onnx/config.hpp>
#include <quark/onnx/error.hpp>
#include <quark/onnx/presets.hpp>
#include <quark/onnx/quantizer.hpp>
#include <quark/onnx/runtime.hpp>

#include "support/model_files.hpp"
#include "support/ort.hpp"

namespace fs = std::filesystem;
namespace qo = quark::onnx;
using namespace quark::test;

namespace {

/// x[3, K] -> MatMul(B1[K, 24]) -> Relu -> MatMul(B2[24, 7]) -> y; MatMul(x, B1) again -> y2
/// (B1 read twice); x . x^T -> g (no constant B: stays float).
::onnx::ModelProto mlp(std::int64_t k) {
  model_builder b(13, 7);
  b.input("x", onnx_type::float32, {3, k});
  b.initializer("B1", onnx_type::float32, {k, 24},
                random_floats(static_cast<std::size_t>(k) * 24, 31, -0.8f, 0.6f));
  b.initializer("B2", onnx_type::float32, {24, 7}, random_floats(24 * 7, 32, -0.5f, 0.5f));
  b.node("MatMul", {"x", "B1"}, {"h"});
  b.node("Relu", {"h"}, {"r"});
  b.node("MatMul", {"r", "B2"}, {"y"});
  b.node("MatMul", {"x", "B1"}, {"y2"});
  b.node("Transpose", {"x"}, {"xt"}, {attr_ints("perm", {1, 0})});
  b.node("MatMul", {"x", "xt"}, {"g"});
  b.output("y", onnx_type::float32, {3, 7});
  b.output("y2", onnx_type::float32, {3, 24});
  b.output("g", onnx_type::float32, {3, 3});
  return b.build();
}

qo::qconfig nbits_config(std::int64_t group, bool symmetric) {
  qo::qconfig c = qo::get_default_config("MATMUL_NBITS");
  qo::option_value p = *c.extra_options.find("MatMulNBitsParams");
  p.set("GroupSize", group);
  p.set("Symmetric", symmetric);
  c.extra_options.set("MatMulNBitsParams", std::move(p));
  return c;
}

struct run_result {
  ::onnx::ModelProto model;
  qo::quantize_report report;
  fs::path path;
};

run_result quantize(const ::onnx::ModelProto& fm, const qo::qconfig& cfg, const std::string& tag) {
  const fs::path dir = work_dir();
  const fs::path fin = dir / (tag + "_float.onnx");
  save_proto(fm, fin);
  run_result r;
  r.path = dir / (tag + ".onnx");
  qo::memory_reader none({});
  r.report = qo::quantize_model(fin, r.path, cfg, none);
  r.model = load_proto(r.path);
  return r;
}

std::vector<const ::onnx::NodeProto*> nodes_of(const ::onnx::ModelProto& m, const std::string& op) {
  std::vector<const ::onnx::NodeProto*> out;
  for (const auto& n : m.graph().node()) {
    if (n.op_type() == op)
      out.push_back(&n);
  }
  return out;
}

std::int64_t attr_i(const ::onnx::NodeProto& n, const std::string& name) {
  for (const auto& a : n.attribute()) {
    if (a.name() == name)
      return a.i();
  }
  return -1;
}

/// ORT's and our runtime's outputs of `m` on `x` agree (float sums in different orders).
std::map<std::string, std::vector<float>> ort_matching_ours(const ::onnx::ModelProto& m,
                                                            const fs::path& path,
                                                            const std::vector<float>& x,
                                                            std::vector<std::size_t> shape) {
  const auto ort = run_ort(m, {npy_array::from(x, shape)});
  qo::calib_sample s;
  s.emplace(m.graph().input(0).name(),
            qo::tensor::from_floats(qo::shape_t(shape.begin(), shape.end()), x));
  const auto ours = qo::run_model(path, s);
  std::map<std::string, std::vector<float>> out;
  for (const auto& entry : ort) {
    const std::string& name = entry.first;
    CAPTURE(name);
    const std::vector<float> o = entry.second.values<float>();
    const auto d = ours.at(name).data<float>();
    REQUIRE(o.size() == d.size());
    double scale = 0.0;
    for (const float v : o)
      scale = std::max(scale, static_cast<double>(std::fabs(v)));
    for (std::size_t i = 0; i < o.size(); ++i)
      CHECK(std::fabs(static_cast<double>(d[i]) - static_cast<double>(o[i])) <= 1e-5 * scale);
    out[name] = o;
  }
  return out;
}

/// B [K, N] as stored by node `q`, dequantized by ONNX Runtime: the identity times B.
std::vector<float> dequantized_by_ort(const ::onnx::ModelProto& qm, const ::onnx::NodeProto& q,
                                      std::int64_t k) {
  model_builder b(13, 7);
  b.opset("com.microsoft", 1);
  b.input("eye", onnx_type::float32, {k, k});
  ::onnx::ModelProto m = b.build();
  auto* n = m.mutable_graph()->add_node();
  *n = q;
  n->set_input(0, "eye");
  n->set_output(0, "w");
  for (int i = 1; i < q.input_size(); ++i)
    *m.mutable_graph()->add_initializer() = *find_init(qm, q.input(i));
  auto* o = m.mutable_graph()->add_output();
  o->set_name("w");
  o->mutable_type()->mutable_tensor_type()->set_elem_type(onnx_type::float32);
  std::vector<float> eye(static_cast<std::size_t>(k * k), 0.0f);
  for (std::int64_t i = 0; i < k; ++i)
    eye[static_cast<std::size_t>(i * k + i)] = 1.0f;
  return run_ort(m,
                 {npy_array::from(eye, {static_cast<std::size_t>(k), static_cast<std::size_t>(k)})})
      .at("w")
      .values<float>();
}

/// The stored scales follow quark-spec §10.7 and ORT's dequantized B stays within one step of
/// the float B, reproducing each symmetric block's largest-magnitude value exactly.
void check_weight(const ::onnx::ModelProto& qm, const ::onnx::NodeProto& q,
                  const std::vector<float>& w, std::int64_t k, std::int64_t n, std::int64_t bs,
                  bool symmetric) {
  const std::int64_t kb = (k + bs - 1) / bs;
  CHECK(attr_i(q, "K") == k);
  CHECK(attr_i(q, "N") == n);
  CHECK(attr_i(q, "bits") == 4);
  CHECK(attr_i(q, "block_size") == bs);
  const auto* packed = find_init(qm, q.input(1));
  REQUIRE(packed != nullptr);
  CHECK(packed->data_type() == onnx_type::uint8);
  CHECK(std::vector<std::int64_t>(packed->dims().begin(), packed->dims().end()) ==
        std::vector<std::int64_t>{n, kb, bs / 2});
  const std::vector<float> scales = floats_of(*find_init(qm, q.input(2)));
  REQUIRE(scales.size() == static_cast<std::size_t>(n * kb));
  CHECK(q.input_size() == (symmetric ? 3 : 4));
  const std::vector<float> deq = dequantized_by_ort(qm, q, k);
  REQUIRE(deq.size() == w.size());
  for (std::int64_t col = 0; col < n; ++col) {
    for (std::int64_t b = 0; b < kb; ++b) {
      const std::int64_t r0 = b * bs, r1 = std::min(k, r0 + bs);
      float lo = w[static_cast<std::size_t>(r0 * n + col)], hi = lo;
      std::int64_t at_lo = r0, at_hi = r0;
      for (std::int64_t r = r0; r < r1; ++r) {
        const float v = w[static_cast<std::size_t>(r * n + col)];
        if (v < lo) {
          lo = v;
          at_lo = r;
        }
        if (v > hi) {
          hi = v;
          at_hi = r;
        }
      }
      const float s = scales[static_cast<std::size_t>(col * kb + b)];
      if (symmetric) {
        const bool take_hi = std::fabs(hi) > std::fabs(lo);
        CHECK(s == (take_hi ? hi : lo) / -8.0f);
        CHECK(deq[static_cast<std::size_t>((take_hi ? at_hi : at_lo) * n + col)] ==
              (take_hi ? hi : lo));
      } else {
        CHECK(s == (std::max(hi, 0.0f) - std::min(lo, 0.0f)) / 15.0f);
      }
      for (std::int64_t r = r0; r < r1; ++r) {
        const std::size_t i = static_cast<std::size_t>(r * n + col);
        CHECK(std::fabs(deq[i] - w[i]) <= std::fabs(s) * 1.0001f);
      }
    }
  }
}

}  // namespace

TEST_CASE("UseMatMulNBits: MatMul weights as 4-bit blocks that ONNX Runtime reads") {
  if (!ort_available()) {
    MESSAGE("skipped: ONNX Runtime (tests/ort) is not installed");
    return;
  }
  struct variant {
    std::int64_t k, group;
    bool symmetric;
  };
  // K a multiple of the block, K with a short last block, an odd K; both symmetries.
  for (const variant v : {variant{64, 32, true}, variant{40, 16, false}, variant{40, 16, true},
                          variant{33, 16, true}, variant{33, 16, false}}) {
    CAPTURE(v.k);
    CAPTURE(v.group);
    CAPTURE(v.symmetric);
    const ::onnx::ModelProto fm = mlp(v.k);
    const run_result r = quantize(fm, nbits_config(v.group, v.symmetric),
                                  "nbits_" + std::to_string(v.k) + "_" + std::to_string(v.group) +
                                      (v.symmetric ? "_s" : "_a"));
    const ::onnx::ModelProto& qm = r.model;
    // Graph: three MatMulNBits (B1 twice, stored once), the activation product stays MatMul.
    const auto q = nodes_of(qm, "MatMulNBits");
    REQUIRE(q.size() == 3);
    CHECK(nodes_of(qm, "MatMul").size() == 1);
    for (const auto* n : q)
      CHECK(n->domain() == "com.microsoft");
    CHECK(q[0]->name() == "n0_Q4");
    CHECK(q[0]->input(1) == "B1_Q4");
    CHECK(q[0]->input(2) == "B1_scales");
    CHECK(q[2]->input(1) == "B1_Q4");  // shared
    CHECK(q[1]->input(1) == "B2_Q4");
    CHECK((find_init(qm, "B1_zero_points") != nullptr) == !v.symmetric);
    CHECK(find_init(qm, "B1") == nullptr);  // the float weights are gone
    CHECK(find_init(qm, "B2") == nullptr);
    CHECK(attr_i(*q[0], "accuracy_level") == 1);  // the preset's AccuracyLevel
    bool ms = false;
    for (const auto& o : qm.opset_import())
      ms = ms || (o.domain() == "com.microsoft" && o.version() == 1);
    CHECK(ms);
    CHECK(r.report.matmul_nbits);
    CHECK(r.report.calibration_samples == 0);
    CHECK(r.report.op_types.at("MatMul").quantized == 3);
    CHECK(r.report.op_types.at("MatMul").kept_float == 1);
    CHECK(qo::summary_table(r.report).starts_with(
        "Quantization summary (MatMulNBits: MatMul weights only, no calibration, opset 13)\n"));

    check_weight(qm, *q[0], random_floats(static_cast<std::size_t>(v.k) * 24, 31, -0.8f, 0.6f), v.k,
                 24, v.group, v.symmetric);
    check_weight(qm, *q[1], random_floats(24 * 7, 32, -0.5f, 0.5f), 24, 7, v.group, v.symmetric);

    // Outputs: ORT and our runtime agree; 4-bit weights keep the float model's direction.
    const std::vector<float> x = random_floats(static_cast<std::size_t>(3 * v.k), 33);
    const auto outs = ort_matching_ours(qm, r.path, x, {3, static_cast<std::size_t>(v.k)});
    const auto fouts = run_ort(fm, {npy_array::from(x, {3, static_cast<std::size_t>(v.k)})});
    for (const char* o : {"y", "y2"}) {
      CAPTURE(o);
      const double c = quark::metrics::cosine(std::span<const float>(outs.at(o)),
                                              std::span<const float>(fouts.at(o).values<float>()));
      CHECK(c > 0.98);
      CHECK(c < 1.0);
    }
    CHECK(outs.at("g") == fouts.at("g").values<float>());
  }
}

TEST_CASE("UseMatMulNBits Algorithm GPTQ: blocks ORT reads, GPTQ's grid, a lower output error") {
  if (!ort_available()) {
    MESSAGE("skipped: " << ort_unavailable_reason());
    return;
  }
  // x [3, 64] with correlated features (x = z A), so that the Hessian is far from diagonal.
  constexpr std::int64_t k = 64;
  auto sample_x = [](std::uint32_t seed) { return correlated_floats(3, k, seed, 77); };
  // 64 samples of 3 rows: more rows than K, so that the Hessian has full rank (with fewer, GPTQ
  // fits the calibration subspace and held-out inputs outside it lose).
  std::vector<qo::calib_sample> calib;
  for (std::uint32_t seed = 300; seed < 364; ++seed) {
    qo::calib_sample s;
    s.emplace("x", qo::tensor::from_floats({3, k}, sample_x(seed)));
    calib.push_back(std::move(s));
  }
  const ::onnx::ModelProto fm = mlp(k);
  const fs::path dir = work_dir();
  save_proto(fm, dir / "nbits_gptq_float.onnx");
  auto run_with = [&](const char* algorithm, bool symmetric, const std::string& tag) {
    qo::qconfig c = nbits_config(32, symmetric);
    qo::option_value p = *c.extra_options.find("MatMulNBitsParams");
    p.set("Algorithm", std::string(algorithm));
    c.extra_options.set("MatMulNBitsParams", std::move(p));
    qo::memory_reader reader(calib);
    run_result r;
    r.path = dir / (tag + ".onnx");
    r.report = qo::quantize_model(dir / "nbits_gptq_float.onnx", r.path, c, reader);
    r.model = load_proto(r.path);
    return r;
  };
  for (const bool symmetric : {true, false}) {
    CAPTURE(symmetric);
    const run_result g = run_with("GPTQ", symmetric, symmetric ? "nbits_gptq_s" : "nbits_gptq_a");
    const run_result d =
        run_with("DEFAULT", symmetric, symmetric ? "nbits_default_s" : "nbits_default_a");
    bool noted = false;
    for (const auto& note : g.report.notes)
      noted = noted || note.find("GPTQ codes (proxy loss") != std::string::npos;
    CHECK(noted);
    // Quark's GPTQ grid, per block of 32 rows of each column of B1: symmetric, scale
    // 2 max|w| / 15 (positive; zero point 8 implicit); asymmetric, (max - min) / 15 over the
    // range including 0, with a zero point input. The first block's grid comes from the float
    // weights; the second's from the weights GPTQ has updated by then (not checked here).
    const auto q = nodes_of(g.model, "MatMulNBits");
    REQUIRE(q.size() == 3);  // B1 read twice, B2
    const ::onnx::NodeProto& q1 = *q[0];
    CHECK(q1.input_size() == (symmetric ? 3 : 4));
    const std::vector<float> w = floats_of(*find_init(fm, "B1"));
    const std::vector<float> scales = floats_of(*find_init(g.model, q1.input(2)));
    REQUIRE(scales.size() == 24 * 2);
    for (std::size_t col = 0; col < 24; ++col) {
      CHECK(scales[col * 2 + 1] > 0.0f);
      for (std::size_t b = 0; b < 1; ++b) {
        float lo = 0.0f, hi = 0.0f;
        for (std::size_t r = b * 32; r < b * 32 + 32; ++r) {
          lo = std::min(lo, w[r * 24 + col]);
          hi = std::max(hi, w[r * 24 + col]);
        }
        const float m = std::max(-lo, hi);
        CHECK(scales[col * 2 + b] == (symmetric ? (m + m) / 15.0f : (hi - lo) / 15.0f));
      }
    }
    // ORT runs both; on held-out correlated inputs GPTQ's output error is the lower one.
    double e_gptq = 0.0, e_default = 0.0;
    for (std::uint32_t seed = 900; seed < 904; ++seed) {
      const std::vector<float> x = sample_x(seed);
      const auto f = run_ort(fm, {npy_array::from(x, {3, static_cast<std::size_t>(k)})});
      const auto og = ort_matching_ours(g.model, g.path, x, {3, static_cast<std::size_t>(k)});
      const auto od = run_ort(d.model, {npy_array::from(x, {3, static_cast<std::size_t>(k)})});
      for (const char* out : {"y", "y2"}) {
        const std::vector<float> fv = f.at(out).values<float>();
        const std::vector<float> dv = od.at(out).values<float>();
        const std::vector<float>& gv = og.at(out);
        for (std::size_t i = 0; i < fv.size(); ++i) {
          e_gptq += std::pow(static_cast<double>(gv[i]) - static_cast<double>(fv[i]), 2.0);
          e_default += std::pow(static_cast<double>(dv[i]) - static_cast<double>(fv[i]), 2.0);
        }
      }
    }
    MESSAGE("squared output error in ORT: DEFAULT " << e_default << ", GPTQ " << e_gptq);
    CHECK(e_gptq < e_default);
  }
}

TEST_CASE("UseMatMulNBits Algorithm HQQ: float zero points ORT reads, values within a step") {
  if (!ort_available()) {
    MESSAGE("skipped: " << ort_unavailable_reason());
    return;
  }
  // HQQ's numbers are tests/quant/nbits_test.cpp's (numpy reference); here the storage: packed
  // codes, scales and float zero points that ONNX Runtime dequantizes (a product with the
  // identity) to within one step of every float weight, and the runtimes agree on the outputs.
  constexpr std::int64_t k = 72;  // blocks of 32: 32, 32 and 8 rows (a padded last block)
  const ::onnx::ModelProto fm = mlp(k);
  qo::qconfig c = nbits_config(32, true);
  qo::option_value p = *c.extra_options.find("MatMulNBitsParams");
  p.set("Algorithm", std::string("HQQ"));
  c.extra_options.set("MatMulNBitsParams", std::move(p));
  const run_result r = quantize(fm, c, "nbits_hqq");
  bool noted = false;
  for (const auto& note : r.report.notes)
    noted = noted || note.find("HQQ codes and float zero points") != std::string::npos;
  CHECK(noted);
  const auto q = nodes_of(r.model, "MatMulNBits");
  REQUIRE(q.size() == 3);
  const ::onnx::NodeProto& q1 = *q[0];
  REQUIRE(q1.input_size() == 4);
  const auto* zp = find_init(r.model, q1.input(3));
  REQUIRE(zp != nullptr);
  CHECK(zp->data_type() == onnx_type::float32);
  CHECK(zp->dims_size() == 1);
  CHECK(zp->dims(0) == 24 * 3);
  const std::vector<float> w = floats_of(*find_init(fm, "B1"));
  const std::vector<float> scales = floats_of(*find_init(r.model, q1.input(2)));
  const std::vector<float> deq = dequantized_by_ort(r.model, q1, k);
  REQUIRE(deq.size() == w.size());
  for (std::size_t i = 0; i < w.size(); ++i) {
    const std::size_t col = i % 24, blk = (i / 24) / 32;
    CHECK(std::fabs(deq[i] - w[i]) <= 1.0001f * scales[col * 3 + blk]);
  }
  std::vector<float> x = random_floats(3 * k, 5, -1.0f, 1.0f);
  ort_matching_ours(r.model, r.path, x, {3, static_cast<std::size_t>(k)});
}

TEST_CASE("UseMatMulNBits: exclusion, op types, a B that is not a constant") {
  const ::onnx::ModelProto fm = mlp(64);
  SUBCASE("exclude a node by name") {
    qo::qconfig c = nbits_config(32, true);
    c.exclude.push_back(qo::node_selector::parse("n2"));
    const run_result r = quantize(fm, c, "nbits_exclude");
    CHECK(nodes_of(r.model, "MatMulNBits").size() == 2);
    CHECK(nodes_of(r.model, "MatMul").size() == 2);
    CHECK(find_init(r.model, "B2") != nullptr);
  }
  SUBCASE("a null layer_type_config keeps every MatMul float") {
    qo::qconfig c = nbits_config(32, true);
    c.layer_type_config.push_back({.config = std::nullopt, .op_types = {"MatMul"}});
    const run_result r = quantize(fm, c, "nbits_types");
    CHECK(nodes_of(r.model, "MatMulNBits").empty());
    bool noted = false;
    for (const auto& n : r.report.notes)
      noted =
          noted || n.find("no MatMul with a 2-D float32 / float16 constant B") != std::string::npos;
    CHECK(noted);
  }
  SUBCASE("an empty B stays float") {
    model_builder e(13, 7);
    e.input("x", onnx_type::float32, {3, 0});
    e.initializer("B", onnx_type::float32, {0, 5}, std::vector<float>{});
    e.node("MatMul", {"x", "B"}, {"y"});
    e.output("y", onnx_type::float32, {3, 5});
    const run_result r = quantize(e.build(), nbits_config(32, true), "nbits_empty");
    CHECK(nodes_of(r.model, "MatMulNBits").empty());
    CHECK(nodes_of(r.model, "MatMul").size() == 1);
  }
  SUBCASE("global specs are reported unused, the activation product noted as float") {
    qo::qconfig c = nbits_config(32, true);
    c.global_config.input_tensors = qo::make_spec(qo::spec_name::int8);
    c.global_config.weight = qo::make_spec(qo::spec_name::int8);
    const run_result r = quantize(fm, c, "nbits_specs");
    CHECK(nodes_of(r.model, "QuantizeLinear").empty());
    std::string notes;
    for (const auto& n : r.report.notes)
      notes += n + "\n";
    CHECK(notes.find("global_config's tensor specs are not used") != std::string::npos);
    CHECK(notes.find("1 MatMul nodes stay float") != std::string::npos);
  }
}

TEST_CASE("UseMatMulNBits: MatMul inside an If body, B from the enclosing graph") {
  if (!ort_available()) {
    MESSAGE("skipped: ONNX Runtime (tests/ort) is not installed");
    return;
  }
  model_builder b(13, 7);
  b.input("x", onnx_type::float32, {2, 32});
  b.input("flag", onnx_type::float32, {1});
  b.initializer("Bo", onnx_type::float32, {32, 5}, random_floats(32 * 5, 41));
  b.initializer("zero", onnx_type::float32, {1}, std::vector<float>{0.0f});
  b.node("Greater", {"flag", "zero"}, {"c1"});
  b.node("Squeeze", {"c1"}, {"cond"});
  b.node("If", {"cond"}, {"y"});
  b.output("y", onnx_type::float32, {2, 5});
  ::onnx::ModelProto fm = b.build();
  auto branch = [](const char* name, const char* op) {
    ::onnx::GraphProto g;
    g.set_name(name);
    auto* n = g.add_node();
    n->set_op_type("MatMul");
    n->set_name(std::string(name) + "_mm");
    n->add_input("x");
    n->add_input("Bo");
    n->add_output(std::string(name) + "_p");
    auto* u = g.add_node();
    u->set_op_type(op);
    u->set_name(std::string(name) + "_act");
    u->add_input(std::string(name) + "_p");
    u->add_output(std::string(name) + "_y");
    auto* o = g.add_output();
    o->set_name(std::string(name) + "_y");
    o->mutable_type()->mutable_tensor_type()->set_elem_type(onnx_type::float32);
    return g;
  };
  auto* ifn = fm.mutable_graph()->mutable_node(2);
  for (const auto& [attr, g] : {std::pair{"then_branch", branch("then", "Relu")},
                                std::pair{"else_branch", branch("else", "Neg")}}) {
    auto* a = ifn->add_attribute();
    a->set_name(attr);
    a->set_type(::onnx::AttributeProto::GRAPH);
    *a->mutable_g() = g;
  }
  const run_result r = quantize(fm, nbits_config(16, false), "nbits_if");
  CHECK(r.report.op_types.at("MatMul").quantized == 2);
  CHECK(find_init(r.model, "Bo") == nullptr);
  const auto& then_g = r.model.graph().node(2).attribute(0).g();
  CHECK(then_g.node(0).op_type() == "MatMulNBits");
  for (const float flag : {1.0f, -1.0f}) {
    CAPTURE(flag);
    const std::vector<float> x = random_floats(64, 42);
    const std::vector<npy_array> in{npy_array::from(x, {2, 32}),
                                    npy_array::from(std::vector<float>{flag}, {1})};
    const auto ort = run_ort(r.model, in).at("y").values<float>();
    const auto ref = run_ort(fm, in).at("y").values<float>();
    qo::calib_sample s;
    s.emplace("x", qo::tensor::from_floats({2, 32}, x));
    s.emplace("flag", qo::tensor::from_floats({1}, std::vector<float>{flag}));
    const auto outs = qo::run_model(r.path, s);  // kept: `ours` views its tensor
    const auto ours = outs.at("y").data<float>();
    REQUIRE(ours.size() == ort.size());
    for (std::size_t i = 0; i < ort.size(); ++i)
      CHECK(static_cast<double>(ours[i]) ==
            doctest::Approx(static_cast<double>(ort[i])).epsilon(1e-5));
    CHECK(quark::metrics::cosine(std::span<const float>(ort), std::span<const float>(ref)) > 0.98);
  }
}

TEST_CASE("UseMatMulNBits on a float16 model: float16 scales, the rest of the graph untouched") {
  if (!ort_available()) {
    MESSAGE("skipped: ONNX Runtime (tests/ort) is not installed");
    return;
  }
  // x[3, 64] float16 -> MatMul(B[64, 24] float16) -> Relu -> y. ONNX Runtime's quantizer keeps
  // the weight's type for the scales; MatMulNBits then runs with a float16 A.
  const auto half = [](float f) { return quark::convert<quark::float16>(f); };
  const std::vector<float> wf = random_floats(64 * 24, 51, -0.7f, 0.9f);
  std::vector<std::uint16_t> wh;
  for (const float v : wf)
    wh.push_back(half(v).to_bits());
  model_builder b(13, 7);
  b.input("x", onnx_type::float16, {3, 64});
  b.initializer("B", onnx_type::float16, {64, 24}, wh);
  b.node("MatMul", {"x", "B"}, {"h"});
  b.node("Relu", {"h"}, {"y"});
  b.output("y", onnx_type::float16, {3, 24});
  const ::onnx::ModelProto fm = b.build();
  for (const bool symmetric : {true, false}) {
    CAPTURE(symmetric);
    const run_result r =
        quantize(fm, nbits_config(32, symmetric), symmetric ? "nbits_fp16_s" : "nbits_fp16_a");
    const auto q = nodes_of(r.model, "MatMulNBits");
    REQUIRE(q.size() == 1);
    CHECK(nodes_of(r.model, "Relu").size() == 1);
    CHECK(nodes_of(r.model, "Cast").empty());  // no float32 copy, no Casts
    CHECK(r.model.graph().input(0).type().tensor_type().elem_type() == onnx_type::float16);
    const auto* sc = find_init(r.model, "B_scales");
    REQUIRE(sc != nullptr);
    CHECK(sc->data_type() == onnx_type::float16);
    // Each scale is the §10.7 formula on the float16 weights, rounded to float16.
    std::vector<std::uint16_t> sb(sc->raw_data().size() / 2);
    std::memcpy(sb.data(), sc->raw_data().data(), sb.size() * 2);
    REQUIRE(sb.size() == 24 * 2);
    for (std::size_t col = 0; col < 24; ++col) {
      for (std::size_t blk = 0; blk < 2; ++blk) {
        float lo = 1e30f, hi = -1e30f;
        for (std::size_t k = blk * 32; k < blk * 32 + 32; ++k) {
          const float v = quark::to_float(half(wf[k * 24 + col]));
          lo = std::min(lo, v);
          hi = std::max(hi, v);
        }
        const float expected = symmetric ? (std::fabs(hi) > std::fabs(lo) ? hi : lo) / -8.0f
                                         : (std::max(hi, 0.0f) - std::min(lo, 0.0f)) / 15.0f;
        CHECK(sb[col * 2 + blk] == half(expected).to_bits());
      }
    }
    // ORT runs it; our runtime agrees to float16 precision; 4-bit weights keep the direction.
    std::vector<std::uint16_t> xb;
    std::vector<float> xf;
    for (const float v : random_floats(3 * 64, 52)) {
      xb.push_back(half(v).to_bits());
      xf.push_back(quark::to_float(half(v)));
    }
    const auto in = npy_array::from(xb, {3, 64}, "<f2");
    const auto widen = [](const std::vector<std::uint16_t>& h) {
      std::vector<float> f;
      for (const auto v : h)
        f.push_back(quark::to_float(quark::float16::from_bits(v)));
      return f;
    };
    const auto ort = widen(run_ort(r.model, {in}).at("y").values<std::uint16_t>());
    const auto ref = widen(run_ort(fm, {in}).at("y").values<std::uint16_t>());
    qo::tensor xt(quark::dtype_id::float16, {3, 64});
    for (std::size_t i = 0; i < xb.size(); ++i)
      xt.data<quark::float16>()[i] = quark::float16::from_bits(xb[i]);
    const qo::tensor yt = qo::run_model(r.path, {{"x", xt}}).at("y");
    REQUIRE(yt.type() == quark::dtype_id::float16);
    float peak = 0.0f;
    for (const float v : ort)
      peak = std::max(peak, std::fabs(v));
    for (std::size_t i = 0; i < ort.size(); ++i) {
      const float ours = quark::to_float(yt.data<quark::float16>()[i]);
      CHECK(std::fabs(ours - ort[i]) <= 2e-3f * peak);
    }
    CHECK(quark::metrics::cosine(std::span<const float>(ort), std::span<const float>(ref)) > 0.98);

    // --eval on the float16 model: its float16 outputs are compared in float32.
    qo::memory_reader two({{{"x", xt}}, {{"x", xt}}});
    qo::quantize_run_options run;
    run.eval_samples = 2;
    const fs::path fin = work_dir() / "nbits_fp16_eval_float.onnx";
    save_proto(fm, fin);
    const qo::quantize_report er = qo::quantize_model(fin, work_dir() / "nbits_fp16_eval.onnx",
                                                      nbits_config(32, symmetric), two, run);
    REQUIRE(er.eval);
    CHECK(er.eval->samples == 2);
    CHECK(er.eval->cosine_mean > 0.98);
    CHECK(er.eval->cosine_mean < 1.0);
  }
}

TEST_CASE("UseMatMulNBits: bad parameters and weights are refused, naming the culprit") {
  const fs::path dir = work_dir();
  const fs::path fin = dir / "nbits_bad_float.onnx";
  save_proto(mlp(64), fin);
  qo::memory_reader none({});
  auto refused = [&](const qo::qconfig& c, const std::string& needle) {
    const fs::path out = dir / "nbits_bad.onnx";
    fs::remove(out);
    CHECK_THROWS_WITH(qo::quantize_model(fin, out, c, none), doctest::Contains(needle.c_str()));
    CHECK(!fs::exists(out));
  };
  // A bad MatMulNBitsParams is refused as soon as it is set (the option map checks values);
  // the message is what the caller sees.
  auto with_param = [](const char* key, qo::option_value v) {
    qo::qconfig c = qo::get_default_config("MATMUL_NBITS");
    qo::option_value p = *c.extra_options.find("MatMulNBitsParams");
    p.set(key, std::move(v));
    c.extra_options.set("MatMulNBitsParams", std::move(p));
    return c;
  };
  auto refused_param = [&](const char* key, qo::option_value v, const std::string& needle) {
    CHECK_THROWS_WITH(with_param(key, std::move(v)), doctest::Contains(needle.c_str()));
  };
  refused_param("Bits", std::int64_t{8}, "MatMulNBitsParams.Bits: must be 4");
  refused_param("GroupSize", std::int64_t{24}, "MatMulNBitsParams.GroupSize");
  refused_param("GroupSize", std::int64_t{8}, "power of two in [16, 2^31]");
  refused_param("GroupSize", std::int64_t{1} << 40, "power of two in [16, 2^31]");
  {
    // 2^31 is a valid block size, but B1 (64 x 24) would need 24 blocks of 2^30 bytes: refused
    // by name instead of allocated (the first MatMul's weight is the first one stored).
    const qo::qconfig c = with_param("GroupSize", std::int64_t{1} << 31);
    refused(c,
            "MatMulNBitsParams.GroupSize 2147483648 on a 64 x 24 weight needs 25769803776 "
            "bytes of codes (at most 2^31)");
  }
  refused_param("AccuracyLevel", std::int64_t{5}, "MatMulNBitsParams.AccuracyLevel");
  refused_param("Symmetric", std::int64_t{1}, "MatMulNBitsParams.Symmetric");
  refused_param("Algorithm", std::string("RTN"), "must be one of DEFAULT, GPTQ, HQQ");
  refused_param("BlockSize", std::int64_t{32}, "MatMulNBitsParams.BlockSize: unknown key");
  {
    qo::qconfig c = qo::get_default_config("A8W8");
    qo::option_value p = qo::option_value::object();
    p.set("GroupSize", std::int64_t{32});
    c.extra_options.set("MatMulNBitsParams", std::move(p));
    refused(c, "MatMulNBitsParams is set but UseMatMulNBits is false");
  }
  {
    qo::qconfig c = qo::get_default_config("MATMUL_NBITS");
    c.use_dynamic_quant = true;
    refused(c, "choose one");
  }
  {
    qo::qconfig c = qo::get_default_config("MATMUL_NBITS");
    c.algo_config.push_back({.name = qo::algo_name::cle});
    refused(c, "UseMatMulNBits: algo_config[0]");
  }
  {
    qo::qconfig c = qo::get_default_config("MATMUL_NBITS");
    c.extra_options.set("WeightsOnly", true);
    refused(c, "UseMatMulNBits: extra_options.WeightsOnly");
  }
  {
    qo::qconfig c = qo::get_default_config("MATMUL_NBITS");
    c.extra_options.set("QuantizeFP16", true);
    c.extra_options.set("UseFP32Scale", true);
    refused(c, "UseMatMulNBits: extra_options.QuantizeFP16 = true does not apply");
  }
  {
    qo::qconfig c = qo::get_default_config("MATMUL_NBITS");
    c.specific_layer_config.push_back(
        {.config = qo::layer_config{}, .layers = {qo::node_selector::parse("n0")}});
    refused(c, "UseMatMulNBits: specific_layer_config[0]");
  }
  {
    qo::qconfig c = qo::get_default_config("MATMUL_NBITS");
    qo::layer_config weights;
    weights.weight = qo::make_spec(qo::spec_name::int8);
    c.layer_type_config.push_back({.config = weights, .op_types = {"MatMul"}});
    refused(c, "UseMatMulNBits: layer_type_config[0] sets a config");
  }
  {
    // Algorithm GPTQ needs calibration data.
    qo::qconfig c = with_param("Algorithm", std::string("GPTQ"));
    refused(c, "Algorithm \"GPTQ\" needs calibration data");
  }
  refused_param("Algorithm", std::int64_t{1}, "MatMulNBitsParams.Algorithm: must be a string");
  refused_param("Bits", std::string("4"), "MatMulNBitsParams.Bits: must be an integer");
  {
    // A NaN in B: the node and the weight are named.
    ::onnx::ModelProto m = mlp(64);
    auto* t = m.mutable_graph()->mutable_initializer(1);  // B2
    std::vector<float> v = floats_of(*t);
    v[5] = std::nanf("");
    t->set_raw_data(std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float)));
    const fs::path nan_in = dir / "nbits_nan_float.onnx";
    save_proto(m, nan_in);
    const fs::path out = dir / "nbits_nan.onnx";
    fs::remove(out);
    CHECK_THROWS_WITH(qo::quantize_model(nan_in, out, qo::get_default_config("MATMUL_NBITS"), none),
                      doctest::Contains("weight 'B2' of node 'n2'"));
    CHECK(!fs::exists(out));
  }
}
