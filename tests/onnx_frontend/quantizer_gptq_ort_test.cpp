// SPDX-License-Identifier: MIT
// algo_config gptq (quark-spec §10.4) in the static flow. Oracles: ONNX Runtime 1.30 runs every
// model (our runtime agrees); the stored grid follows the GPTQ rule evaluated here from the float
// weight (symmetric: scale 2 max|w| / (2^bits - 1), zero point 2^(bits - 1)); against the same
// stored grid with round-to-nearest codes written here (so the only difference is GPTQ's choice
// of codes), the model's output error in ORT on held-out correlated inputs is lower; the codes
// equal quark::gptq_quantize's (tests/algo/gptq_test.cpp checks it against numpy) on the Hessian
// of all calibration samples, built here from the float activations. Layouts (uint4 / uint8,
// per tensor, per channel, blocks), skipped weights and the errors are checked too.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include <doctest/doctest.h>

#include <quark/algo/gptq.hpp>
#include <quark/dtype/pack.hpp>
#include <quark/onnx/config.hpp>
#include <quark/onnx/error.hpp>
#include <quark/onnx/presets.hpp>
#include <quark/onnx/quantizer.hpp>
#include <quark/onnx/runtime.hpp>

#include "support/checks.hpp"
#include "support/model_files.hpp"
#include "support/ort.hpp"

namespace fs = std::filesystem;
namespace qo = quark::onnx;
using namespace quark::test;

namespace {

constexpr std::int64_t rows = 8, k = 16, h = 12, n = 6;

/// x[8, 16] -> mm1 MatMul(W1[16, 12]) -> relu Relu -> mm2 MatMul(W2[12, 6]) -> y;
/// x -> mm3 MatMul(W3[16, 4]) -> y3 and x -> mm4 MatMul(W3) -> y4 (one weight read twice).
::onnx::ModelProto model() {
  model_builder b(13, 7);
  b.input("x", onnx_type::float32, {rows, k});
  b.initializer("W1", onnx_type::float32, {k, h}, random_floats(k * h, 41, -0.6f, 0.6f));
  b.initializer("W2", onnx_type::float32, {h, n}, random_floats(h * n, 42, -0.6f, 0.6f));
  b.initializer("W3", onnx_type::float32, {k, 4}, random_floats(k * 4, 43, -0.6f, 0.6f));
  b.node("MatMul", {"x", "W1"}, {"h1"});
  b.node("Relu", {"h1"}, {"r"});
  b.node("MatMul", {"r", "W2"}, {"y"});
  b.node("MatMul", {"x", "W3"}, {"y3"});
  b.node("MatMul", {"x", "W3"}, {"y4"});
  b.output("y", onnx_type::float32, {rows, n});
  b.output("y3", onnx_type::float32, {rows, 4});
  b.output("y4", onnx_type::float32, {rows, 4});
  auto m = b.build();
  const char* names[] = {"mm1", "relu", "mm2", "mm3", "mm4"};
  for (int i = 0; i < 5; ++i)
    m.mutable_graph()->mutable_node(i)->set_name(names[i]);
  return m;
}

/// Correlated inputs: x = z A with A a fixed mixing matrix, so the Hessian is far from diagonal
/// and GPTQ has something to compensate.
std::vector<float> sample_values(std::uint32_t seed) {
  return correlated_floats(rows, k, seed, 7);
}

std::vector<qo::calib_sample> samples(std::uint32_t first, std::size_t count) {
  std::vector<qo::calib_sample> out;
  for (std::size_t i = 0; i < count; ++i) {
    qo::calib_sample s;
    s.emplace("x", qo::tensor::from_floats({rows, k},
                                           sample_values(first + static_cast<std::uint32_t>(i))));
    out.push_back(std::move(s));
  }
  return out;
}

qo::qconfig with_gptq(qo::option_value params) {
  qo::qconfig c = qo::get_default_config("A8W8");
  c.algo_config.push_back({.name = qo::algo_name::gptq, .params = std::move(params)});
  return c;
}

qo::option_value params(int bits, bool per_channel, std::int64_t group = -1) {
  qo::option_value p = qo::option_value::object();
  p.set("bits", static_cast<std::int64_t>(bits));
  p.set("per_channel", per_channel);
  p.set("group_size", group);
  return p;
}

struct result {
  ::onnx::ModelProto model;
  qo::quantize_report report;
  fs::path path;
};

result quantize(const qo::qconfig& cfg, const std::string& tag) {
  const fs::path dir = work_dir();
  const fs::path fin = dir / (tag + "_float.onnx");
  save_proto(model(), fin);
  result r;
  r.path = dir / (tag + ".onnx");
  fs::remove(r.path);
  qo::memory_reader reader(samples(100, 8));
  r.report = qo::quantize_model(fin, r.path, cfg, reader);
  r.model = load_proto(r.path);
  return r;
}

/// The DequantizeLinear that produces MatMul `mm`'s weight.
const ::onnx::NodeProto& weight_dq(const ::onnx::ModelProto& m, const std::string& mm) {
  const auto* node = node_named(m, mm);
  REQUIRE(node != nullptr);
  for (const auto& x : m.graph().node()) {
    if (x.op_type() == "DequantizeLinear" && x.output(0) == node->input(1))
      return x;
  }
  FAIL("no DequantizeLinear feeds " << mm << "'s weight");
  return *node;
}

std::int64_t attr_or(const ::onnx::NodeProto& nd, const std::string& name, std::int64_t dflt) {
  for (const auto& a : nd.attribute()) {
    if (a.name() == name)
      return a.i();
  }
  return dflt;
}

/// Integer values of an unsigned initializer (uint4 unpacked).
std::vector<std::int32_t> ints_of(const ::onnx::TensorProto& t) {
  std::size_t count = 1;
  for (const auto d : t.dims())
    count *= static_cast<std::size_t>(d);
  std::vector<std::int32_t> out(count);
  const auto* raw = reinterpret_cast<const std::uint8_t*>(t.raw_data().data());
  if (t.data_type() == onnx_type::uint4) {
    for (std::size_t i = 0; i < count; ++i)
      out[i] = (raw[i / 2] >> (4 * (i % 2))) & 0xF;
  } else if (t.data_type() == onnx_type::uint8) {
    for (std::size_t i = 0; i < count; ++i)
      out[i] = raw[i];
  } else {
    FAIL("unexpected code type " << t.data_type());
  }
  return out;
}

std::vector<float> float_weight(const std::string& name) {
  const auto m = model();
  return floats_of(*find_init(m, name));
}

/// Relative L2 error of output y of `qm` against the float model in ORT on held-out inputs (our
/// runtime must agree with ORT on `qm`).
double ort_error(const ::onnx::ModelProto& qm, const fs::path& qpath) {
  const auto fm = model();
  double num = 0.0, den = 0.0;
  for (std::uint32_t seed = 900; seed < 906; ++seed) {
    const std::vector<float> x = sample_values(seed);
    const auto f = run_ort(fm, {npy_array::from(x, {rows, k})}).at("y").values<float>();
    const auto q = run_ort(qm, {npy_array::from(x, {rows, k})}).at("y").values<float>();
    if (!qpath.empty()) {
      qo::calib_sample s;
      s.emplace("x", qo::tensor::from_floats({rows, k}, x));
      const auto outs = qo::run_model(qpath, s);  // held: data() views it
      const auto ours = outs.at("y").data<float>();
      REQUIRE(ours.size() == q.size());
      for (std::size_t i = 0; i < q.size(); ++i)
        CHECK(std::fabs(ours[i] - q[i]) <= 1e-5f * (1.0f + std::fabs(q[i])));
    }
    for (std::size_t i = 0; i < f.size(); ++i) {
      const double d = static_cast<double>(q[i]) - static_cast<double>(f[i]);
      num += d * d;
      den += static_cast<double>(f[i]) * static_cast<double>(f[i]);
    }
  }
  return std::sqrt(num / den);
}

/// `qm` with MatMul `mm`'s codes replaced by round-to-nearest on the stored grid (per tensor or
/// per channel along axis 1): clamp(RNE(w / s) + z, 0, 2^bits - 1).
::onnx::ModelProto with_rtn_codes(::onnx::ModelProto qm, const std::string& mm,
                                  const std::string& w_name, int bits) {
  const ::onnx::NodeProto& dq = weight_dq(qm, mm);
  const std::vector<float> s = floats_of(*find_init(qm, dq.input(1)));
  const std::vector<std::int32_t> z = ints_of(*find_init(qm, dq.input(2)));
  const std::vector<float> w = float_weight(w_name);
  auto* codes = const_cast<::onnx::TensorProto*>(find_init(qm, dq.input(0)));
  const std::size_t cols = static_cast<std::size_t>(codes->dims(1));
  const std::int32_t maxq = (1 << bits) - 1;
  std::string raw(codes->raw_data().size(), '\0');
  auto* out = reinterpret_cast<std::uint8_t*>(raw.data());
  for (std::size_t i = 0; i < w.size(); ++i) {
    const std::size_t c = s.size() == 1 ? 0 : i % cols;
    const float q = std::nearbyint(w[i] / s[c]) + static_cast<float>(z[c]);
    const auto v = static_cast<std::uint8_t>(std::clamp(q, 0.0f, static_cast<float>(maxq)));
    if (codes->data_type() == onnx_type::uint4)
      out[i / 2] = static_cast<std::uint8_t>(out[i / 2] | (v << (4 * (i % 2))));
    else
      out[i] = v;
  }
  codes->set_raw_data(raw);
  return qm;
}

}  // namespace

TEST_CASE("gptq: 4-bit per-channel weights, the grid rule, codes from all samples") {
  if (!ort_available()) {
    MESSAGE("skipped: " << ort_unavailable_reason());
    return;
  }
  const result r = quantize(with_gptq(params(4, true)), "gptq_4pc");
  const std::string& note = r.report.notes.back();
  CAPTURE(note);
  CHECK(note.find("gptq: 2 MatMul weights (4 bits, symmetric, per channel) on 8 samples") == 0);
  CHECK(note.find("mm3 (its weight's tensors are shared with another node)") != std::string::npos);
  CHECK(r.model.opset_import(0).version() >= 21);

  // The float activations: x for mm1, r = Relu(x W1) for mm2, in double here.
  quark::gptq_hessian hx(k), hr(h);
  const std::vector<float> w1 = float_weight("W1");
  for (std::uint32_t seed = 100; seed < 108; ++seed) {
    const std::vector<float> x = sample_values(seed);
    std::vector<float> rv(rows * h);
    for (std::size_t i = 0; i < static_cast<std::size_t>(rows); ++i) {
      for (std::size_t c = 0; c < static_cast<std::size_t>(h); ++c) {
        double acc = 0.0;
        for (std::size_t j = 0; j < static_cast<std::size_t>(k); ++j)
          acc += static_cast<double>(x[i * k + j]) * static_cast<double>(w1[j * h + c]);
        rv[i * h + c] = static_cast<float>(std::max(acc, 0.0));
      }
    }
    hx.add(x, rows);
    hr.add(rv, rows);
  }
  quark::gptq_computed_params grid;
  grid.bits = 4;
  grid.per_channel = true;
  for (const auto& [mm, w_name, kk, nn, hess] :
       {std::tuple{"mm1", "W1", k, h, &hx}, std::tuple{"mm2", "W2", h, n, &hr}}) {
    const std::string node = mm;  // (clang: no structured binding in CAPTURE's lambda)
    CAPTURE(node);
    const ::onnx::NodeProto& dq = weight_dq(r.model, mm);
    CHECK(attr_or(dq, "axis", -100) == 1);
    CHECK(attr_or(dq, "block_size", 0) == 0);
    const auto* codes = find_init(r.model, dq.input(0));
    REQUIRE(codes != nullptr);
    CHECK(codes->data_type() == onnx_type::uint4);
    const std::vector<float> s = floats_of(*find_init(r.model, dq.input(1)));
    const std::vector<std::int32_t> z = ints_of(*find_init(r.model, dq.input(2)));
    REQUIRE(s.size() == static_cast<std::size_t>(nn));
    // Symmetric: zero point 8, scale 2 max|w| / 15 over the column (no dead feature here).
    const std::vector<float> w = float_weight(w_name);
    for (std::size_t c = 0; c < static_cast<std::size_t>(nn); ++c) {
      float m = 0.0f;
      for (std::size_t j = 0; j < static_cast<std::size_t>(kk); ++j)
        m = std::max(m, std::fabs(w[j * static_cast<std::size_t>(nn) + c]));
      CHECK(z[c] == 8);
      CHECK(s[c] == (m + m) / 15.0f);
    }
    // The codes: GPTQ on the Hessian of all 8 samples.
    const quark::gptq_result expect = quark::gptq_quantize(
        w, static_cast<std::size_t>(kk), static_cast<std::size_t>(nn), *hess, grid);
    CHECK(ints_of(*codes) == expect.codes);
  }
  // GPTQ's codes beat round-to-nearest on the same grid, in ORT, on inputs it did not see.
  const double e_gptq = ort_error(r.model, r.path);
  const auto rtn = with_rtn_codes(with_rtn_codes(r.model, "mm1", "W1", 4), "mm2", "W2", 4);
  const double e_rtn = ort_error(rtn, {});
  MESSAGE("relative L2 error of y in ORT: round-to-nearest " << e_rtn << ", GPTQ " << e_gptq);
  CHECK(e_gptq < e_rtn);
}

TEST_CASE("gptq: 8-bit per tensor and 4-bit groups: the stored layouts ORT runs") {
  if (!ort_available()) {
    MESSAGE("skipped: " << ort_unavailable_reason());
    return;
  }
  {
    const result r = quantize(with_gptq(params(8, false)), "gptq_8pt");
    CHECK(r.model.opset_import(0).version() < 21);  // uint8 per tensor needs no opset 21
    const ::onnx::NodeProto& dq = weight_dq(r.model, "mm1");
    CHECK(attr_or(dq, "axis", -100) == -100);
    const auto* codes = find_init(r.model, dq.input(0));
    CHECK(codes->data_type() == onnx_type::uint8);
    const auto* scale = find_init(r.model, dq.input(1));
    CHECK(scale->dims_size() == 0);
    CHECK(ints_of(*find_init(r.model, dq.input(2))) == std::vector<std::int32_t>{128});
    const std::vector<float> w = float_weight("W1");
    float m = 0.0f;
    for (const float v : w)
      m = std::max(m, std::fabs(v));
    CHECK(floats_of(*scale)[0] == (m + m) / 255.0f);
    CHECK(ort_error(r.model, r.path) < 0.05);
    // The summary lists the stored type and grid.
    bool found = false;
    for (const auto& t : r.report.tensors) {
      if (t.name == "W1" && t.role == "weight") {
        found = true;
        CHECK(t.type == "uint8");
        CHECK(t.zero_point == std::vector<std::int64_t>{128});
      }
    }
    CHECK(found);
  }
  {
    // Groups of 8 rows of K: a blocked DequantizeLinear, scales [K / 8, N] (per tensor within a
    // group: the same value along N), each group's scale from its own rows.
    const result r = quantize(with_gptq(params(4, false, 8)), "gptq_4g8");
    const ::onnx::NodeProto& dq = weight_dq(r.model, "mm1");
    CHECK(attr_or(dq, "axis", -100) == 0);
    CHECK(attr_or(dq, "block_size", 0) == 8);
    const auto* scale = find_init(r.model, dq.input(1));
    REQUIRE(scale->dims_size() == 2);
    CHECK(scale->dims(0) == 2);
    CHECK(scale->dims(1) == h);
    const std::vector<float> s = floats_of(*scale);
    for (std::size_t gi = 0; gi < 2; ++gi) {
      for (std::size_t c = 1; c < static_cast<std::size_t>(h); ++c)
        CHECK(s[gi * h + c] == s[gi * h]);
    }
    CHECK(s[0] != s[h]);
    CHECK(ort_error(r.model, r.path) < 0.5);
  }
}

TEST_CASE("gptq: com.microsoft DequantizeLinear nodes keep their weights (no 4-bit codes there)") {
  qo::qconfig c = with_gptq(params(4, true));
  c.extra_options.set("UseQDQContribOps", true);
  const result r = quantize(c, "gptq_contrib");
  const std::string& note = r.report.notes.back();
  CAPTURE(note);
  CHECK(note.find("gptq: 0 MatMul weights") == 0);
  CHECK(note.find("mm1 (its DequantizeLinear is com.microsoft's") != std::string::npos);
}

TEST_CASE("gptq: bad parameters, combinations and data: named errors, no file left") {
  const fs::path dir = work_dir();
  const fs::path fin = dir / "gptq_bad_float.onnx";
  save_proto(model(), fin);
  const fs::path out = dir / "gptq_bad.onnx";
  fs::remove(out);
  qo::memory_reader reader(samples(100, 2));
  auto run = [&](const qo::qconfig& c, qo::calibration_data_reader& rd) {
    return error_id([&] { qo::quantize_model(fin, out, c, rd); });
  };
  CHECK(run(with_gptq(params(1, false)), reader) == "quark.config.value");
  CHECK(run(with_gptq(params(17, false)), reader) == "quark.config.value");
  CHECK(run(with_gptq(params(4, false, 0)), reader) == "quark.config.value");
  qo::option_value damp = params(4, false);
  damp.set("perc_damp", -1.0);
  CHECK(run(with_gptq(damp), reader) == "quark.config.value");
  qo::qconfig both = with_gptq(params(4, false));
  both.algo_config.push_back({.name = qo::algo_name::adaround});
  CHECK(run(both, reader) == "quark.config.conflict");
  qo::memory_reader empty({});
  // Calibration reads the data first and names the empty reader.
  CHECK(run(with_gptq(params(4, false)), empty) == "quark.calib_data.empty");
  CHECK_FALSE(fs::exists(out));
}

TEST_CASE("gptq: act_order with groups keeps each group's rows together (static groups)") {
  if (!ort_available()) {
    MESSAGE("skipped: " << ort_unavailable_reason());
    return;
  }
  qo::option_value ao = params(4, true, 8);
  ao.set("act_order", true);
  const result r = quantize(with_gptq(ao), "gptq_act_g8");
  const ::onnx::NodeProto& dq = weight_dq(r.model, "mm1");
  CHECK(attr_or(dq, "axis", -100) == 0);
  CHECK(attr_or(dq, "block_size", 0) == 8);
  const auto* scale = find_init(r.model, dq.input(1));
  REQUIRE(scale->dims_size() == 2);
  CHECK(scale->dims(0) == 2);
  CHECK(scale->dims(1) == h);
  // Each group's grid from the float weight's own 8 rows, per column, by Quark's symmetric rule
  // (range [min(w, 0), max(w, 0)], mirrored where the minimum is negative; scale range / 15, zero
  // point 8), whatever order GPTQ processed the features in.
  const std::vector<float> s = floats_of(*scale);
  const std::vector<std::int32_t> z = ints_of(*find_init(r.model, dq.input(2)));
  const std::vector<float> w = float_weight("W1");
  for (std::size_t gi = 0; gi < 2; ++gi) {
    for (std::size_t c = 0; c < static_cast<std::size_t>(h); ++c) {
      float lo = 0.0f, hi = 0.0f;
      for (std::size_t j = gi * 8; j < gi * 8 + 8; ++j) {
        lo = std::min(lo, w[j * static_cast<std::size_t>(h) + c]);
        hi = std::max(hi, w[j * static_cast<std::size_t>(h) + c]);
      }
      const float top = std::max(-lo, hi);
      CHECK(s[gi * h + c] == (top - (lo < 0.0f ? -top : 0.0f)) / 15.0f);
      CHECK(z[gi * h + c] == 8);
    }
  }
  const std::string& note = r.report.notes.back();
  CHECK(note.find("act_order") != std::string::npos);
  CHECK(ort_error(r.model, r.path) < 0.5);
}
