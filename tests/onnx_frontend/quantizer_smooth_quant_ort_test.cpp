// SPDX-License-Identifier: MIT
// algo_config smooth_quant (quark-spec §10.2). Oracles: the smoothing factors written into the
// model against the formula evaluated here in double precision from the calibration data and the
// float weights; ONNX Runtime 1.30 running the quantized models (and our runtime agreeing with
// it); the purpose of the method, measured in ORT: on activations with outlier channels the
// int8 model's error against the float model falls well below the error without smoothing.
// Excluded MatMuls, shared weights and bad configurations or data are checked too, with no
// file left behind.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include <doctest/doctest.h>

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

constexpr std::int64_t rows = 4, k = 8;
/// The spread of the activation's channels: two outliers (x50, x20) and a small one.
const std::vector<float> channel_scale{1.0f, 1.0f, 50.0f, 1.0f, 0.1f, 1.0f, 20.0f, 1.0f};

/// x[4, 8] -> n0 MatMul(W1[8, 6]) -> n1 Relu -> n2 MatMul(W3[6, 5]) -> y1;
/// x -> n3 MatMul(W2[8, 3]) -> y2 (the second reader of x);
/// x -> n4 MatMul(W4[8, 2]) -> y3 (excluded by the tests that exclude it);
/// x -> n5 MatMul(W5) -> y4 and x -> n6 MatMul(W5) -> y5 (one weight read twice).
::onnx::ModelProto model() {
  model_builder b(13, 7);
  b.input("x", onnx_type::float32, {rows, k});
  b.initializer("W1", onnx_type::float32, {k, 6}, random_floats(k * 6, 11, -0.5f, 0.5f));
  b.initializer("W2", onnx_type::float32, {k, 3}, random_floats(k * 3, 12, -0.5f, 0.5f));
  b.initializer("W3", onnx_type::float32, {6, 5}, random_floats(6 * 5, 13, -0.5f, 0.5f));
  b.initializer("W4", onnx_type::float32, {k, 2}, random_floats(k * 2, 14, -0.5f, 0.5f));
  b.initializer("W5", onnx_type::float32, {k, 4}, random_floats(k * 4, 15, -0.5f, 0.5f));
  b.node("MatMul", {"x", "W1"}, {"h1"});
  b.node("Relu", {"h1"}, {"r"});
  b.node("MatMul", {"r", "W3"}, {"y1"});
  b.node("MatMul", {"x", "W2"}, {"y2"});
  b.node("MatMul", {"x", "W4"}, {"y3"});
  b.node("MatMul", {"x", "W5"}, {"y4"});
  b.node("MatMul", {"x", "W5"}, {"y5"});
  b.output("y1", onnx_type::float32, {rows, 5});
  b.output("y2", onnx_type::float32, {rows, 3});
  b.output("y3", onnx_type::float32, {rows, 2});
  b.output("y4", onnx_type::float32, {rows, 4});
  b.output("y5", onnx_type::float32, {rows, 4});
  return b.build();
}

/// x[4, 8] -> n0 MatMul(V1[8, 6]) -> y1, x -> n1 MatMul(V2[8, 3]) -> y2, with the weight rows of
/// the outlier channels as much smaller as the channels are larger: every channel of x
/// contributes alike to the outputs, so the small channels' int8 error shows.
::onnx::ModelProto balanced_model() {
  model_builder b(13, 7);
  b.input("x", onnx_type::float32, {rows, k});
  for (const auto& [name, n, seed] :
       {std::tuple{"V1", std::int64_t{6}, 21u}, std::tuple{"V2", std::int64_t{3}, 22u}}) {
    std::vector<float> w = random_floats(static_cast<std::size_t>(k * n), seed, -0.5f, 0.5f);
    for (std::size_t i = 0; i < w.size(); ++i)
      w[i] /= channel_scale[i / static_cast<std::size_t>(n)];
    b.initializer(name, onnx_type::float32, {k, n}, w);
  }
  b.node("MatMul", {"x", "V1"}, {"y1"});
  b.node("MatMul", {"x", "V2"}, {"y2"});
  b.output("y1", onnx_type::float32, {rows, 6});
  b.output("y2", onnx_type::float32, {rows, 3});
  return b.build();
}

std::vector<float> sample_values(std::uint32_t seed) {
  std::vector<float> x = random_floats(rows * k, seed, -1.0f, 1.0f);
  for (std::size_t i = 0; i < x.size(); ++i)
    x[i] *= channel_scale[i % k];
  return x;
}

qo::calib_sample sample(std::uint32_t seed) {
  qo::calib_sample s;
  s.emplace("x", qo::tensor::from_floats({rows, k}, sample_values(seed)));
  return s;
}

std::vector<qo::calib_sample> samples(std::uint32_t first, std::size_t n) {
  std::vector<qo::calib_sample> out;
  for (std::size_t i = 0; i < n; ++i)
    out.push_back(sample(first + static_cast<std::uint32_t>(i)));
  return out;
}

/// max |x_k| over the 8 calibration samples (seeds 100..107), per channel, in double.
std::vector<double> x_maxima() {
  std::vector<double> ax(k, 0.0);
  for (std::uint32_t seed = 100; seed < 108; ++seed) {
    const std::vector<float> x = sample_values(seed);
    for (std::size_t i = 0; i < x.size(); ++i)
      ax[i % k] = std::max(ax[i % k], std::fabs(static_cast<double>(x[i])));
  }
  return ax;
}

/// A8W8 with only the MatMuls quantized.
qo::qconfig matmuls_only() {
  qo::qconfig c = qo::get_default_config("A8W8");
  c.extra_options.set("OpTypesToQuantize", qo::option_value::array({"MatMul"}));
  return c;
}

qo::qconfig with_sq(qo::qconfig c, double alpha) {
  qo::option_value p = qo::option_value::object();
  p.set("alpha", alpha);
  c.algo_config.push_back({.name = qo::algo_name::smooth_quant, .params = p});
  return c;
}

struct result {
  ::onnx::ModelProto model;
  qo::quantize_report report;
  fs::path path;
};

result quantize(const qo::qconfig& cfg, const std::string& tag,
                const ::onnx::ModelProto& fm = model()) {
  const fs::path dir = work_dir();
  const fs::path fin = dir / (tag + "_float.onnx");
  save_proto(fm, fin);
  result r;
  r.path = dir / (tag + ".onnx");
  fs::remove(r.path);
  qo::memory_reader reader(samples(100, 8));
  r.report = qo::quantize_model(fin, r.path, cfg, reader);
  r.model = load_proto(r.path);
  return r;
}

/// The float weight `name` of the test model.
std::vector<float> float_weight(const std::string& name) {
  const ::onnx::ModelProto fm = model();
  return floats_of(*find_init(fm, name));
}

/// Relative L2 error of every output of `qm` against the float model, in ORT, over held-out
/// samples (also checks that our runtime agrees with ORT on `qm`).
double ort_error(const ::onnx::ModelProto& qm, const fs::path& qpath,
                 const ::onnx::ModelProto& fm = model()) {
  double num = 0.0, den = 0.0;
  for (std::uint32_t seed = 900; seed < 904; ++seed) {
    const std::vector<float> x = sample_values(seed);
    const auto f = run_ort(fm, {npy_array::from(x, {rows, k})});
    const auto q = run_ort(qm, {npy_array::from(x, {rows, k})});
    qo::calib_sample s;
    s.emplace("x", qo::tensor::from_floats({rows, k}, x));
    const auto ours = qo::run_model(qpath, s);
    for (const auto& entry : f) {
      const std::string& name = entry.first;
      CAPTURE(name);
      const std::vector<float> a = entry.second.values<float>();
      const std::vector<float> b = q.at(name).values<float>();
      const auto c = ours.at(name).data<float>();
      REQUIRE(a.size() == b.size());
      REQUIRE(c.size() == b.size());
      double scale = 0.0;
      for (const float v : b)
        scale = std::max(scale, static_cast<double>(std::fabs(v)));
      for (std::size_t i = 0; i < a.size(); ++i) {
        CHECK(std::fabs(static_cast<double>(c[i]) - static_cast<double>(b[i])) <=
              1e-5 * scale + 1e-6);
        const double d = static_cast<double>(b[i]) - static_cast<double>(a[i]);
        num += d * d;
        den += static_cast<double>(a[i]) * static_cast<double>(a[i]);
      }
    }
  }
  return std::sqrt(num / den);
}

}  // namespace

TEST_CASE("smooth_quant: factors from the calibration data, Quark's names, one Mul per MatMul") {
  if (!ort_available()) {
    MESSAGE("skipped: " << ort_unavailable_reason());
    return;
  }
  qo::qconfig cfg = matmuls_only();
  cfg.exclude.push_back(qo::node_selector::parse("n4"));
  const result r = quantize(with_sq(cfg, 0.5), "sq_matmul_only");
  const std::string& note = r.report.notes.back();
  CAPTURE(note);
  CHECK(note.find("smooth_quant: alpha 0.50, 3 MatMuls smoothed (2 activations, 8 samples)") == 0);
  CHECK(note.find("n5 (its weight 'W5' is shared with another node)") != std::string::npos);
  CHECK(note.find("n6 (its weight 'W5' is shared with another node)") != std::string::npos);
  // No Mul in front of the excluded n4 or the shared-weight readers.
  CHECK(node_named(r.model, "x_n4_smooth_mul") == nullptr);
  CHECK(node_named(r.model, "x_n5_smooth_mul") == nullptr);

  // The factors, in double from the data: a_k = max |x_k| over the 8 calibration samples,
  // w_k = max_n |W[k, n]|, s_k = sqrt(a_k / w_k); the Mul multiplies by 1 / s_k.
  const std::vector<double> ax = x_maxima();
  // r = Relu(x W1) is the activation of n2: its maxima computed here in double.
  std::vector<double> ar(6, 0.0);
  {
    const std::vector<float> w1 = float_weight("W1");
    for (std::uint32_t seed = 100; seed < 108; ++seed) {
      const std::vector<float> x = sample_values(seed);
      for (std::int64_t i = 0; i < rows; ++i) {
        for (std::size_t c = 0; c < 6; ++c) {
          double acc = 0.0;
          for (std::size_t j = 0; j < static_cast<std::size_t>(k); ++j)
            acc += static_cast<double>(x[static_cast<std::size_t>(i * k) + j]) *
                   static_cast<double>(w1[j * 6 + c]);
          ar[c] = std::max(ar[c], std::max(acc, 0.0));
        }
      }
    }
  }
  struct expect {
    std::string x, node, weight;
    std::size_t n;
    const std::vector<double>* amax;
  };
  for (const expect& e : {expect{"x", "n0", "W1", 6, &ax}, expect{"r", "n2", "W3", 5, &ar},
                          expect{"x", "n3", "W2", 3, &ax}}) {
    CAPTURE(e.node);
    const auto* mul = node_named(r.model, e.x + "_" + e.node + "_smooth_mul");
    REQUIRE(mul != nullptr);
    CHECK(mul->op_type() == "Mul");
    // x itself has a Q/DQ pair (n5 and n6 read it quantized): the Mul reads its output then.
    CHECK((mul->input(0) == e.x || mul->input(0) == e.x + "_DequantizeLinear_Output"));
    CHECK(mul->input(1) == e.x + "_" + e.node + "_smooth_scale");
    CHECK(mul->output(0) == e.x + "_" + e.node + "_smooth_output");
    const auto* mm = node_named(r.model, e.node);
    REQUIRE(mm != nullptr);
    // The MatMul reads the Mul's output (through its activation Q/DQ pair).
    const ::onnx::NodeProto* dq = nullptr;
    for (const auto& n : r.model.graph().node()) {
      if (!n.output().empty() && n.output(0) == mm->input(0))
        dq = &n;
    }
    REQUIRE(dq != nullptr);
    CHECK(dq->op_type() == "DequantizeLinear");
    const auto* init = find_init(r.model, mul->input(1));
    REQUIRE(init != nullptr);
    const std::vector<float> inv = floats_of(*init);
    const std::vector<float> w = float_weight(e.weight);
    REQUIRE(inv.size() == e.amax->size());
    for (std::size_t j = 0; j < inv.size(); ++j) {
      CAPTURE(j);
      double wmax = 0.0;
      for (std::size_t c = 0; c < e.n; ++c)
        wmax = std::max(wmax, std::fabs(static_cast<double>(w[j * e.n + c])));
      const double s = std::sqrt((*e.amax)[j] / wmax);
      // float32 statistics and factors (a few ulp), and r's maxima summed in another order.
      CHECK(static_cast<double>(inv[j]) == doctest::Approx(1.0 / s).epsilon(1e-5));
    }
  }
  CHECK(ort_error(r.model, r.path) < 0.05);
}

TEST_CASE("smooth_quant: int8 error on outlier channels falls, in ONNX Runtime") {
  if (!ort_available()) {
    MESSAGE("skipped: " << ort_unavailable_reason());
    return;
  }
  // The per-tensor int8 activation x loses its small channels to the x50 / x20 outliers;
  // smoothing moves the spread into the per-tensor int8 weights, whose outlier rows are small.
  const ::onnx::ModelProto fm = balanced_model();
  const qo::qconfig cfg = matmuls_only();
  const result plain = quantize(cfg, "sq_none", fm);
  const result smooth = quantize(with_sq(cfg, 0.5), "sq_half", fm);
  const double e_plain = ort_error(plain.model, plain.path, fm);
  const double e_smooth = ort_error(smooth.model, smooth.path, fm);
  MESSAGE("MatMuls int8, relative L2 error in ORT: no smoothing " << e_plain << ", alpha 0.5 "
                                                                  << e_smooth);
  CHECK(e_smooth < 0.5 * e_plain);
  // The whole A8W8 preset: the smoothing Muls stay float (quantizing their input would undo the
  // smoothing), everything else as the preset says.
  const qo::qconfig a8w8 = qo::get_default_config("A8W8");
  const result full_plain = quantize(a8w8, "sq_a8w8_none", fm);
  const result full = quantize(with_sq(a8w8, 0.5), "sq_a8w8", fm);
  CHECK(node_named(full.model, "x_n0_smooth_mul") != nullptr);
  const double f_plain = ort_error(full_plain.model, full_plain.path, fm);
  const double f_smooth = ort_error(full.model, full.path, fm);
  MESSAGE("A8W8: no smoothing " << f_plain << ", alpha 0.5 " << f_smooth);
  CHECK(f_smooth < 0.5 * f_plain);
  for (const auto& n : full.model.graph().node()) {
    if (n.op_type() == "Mul") {
      CAPTURE(n.name());
      CHECK(n.input(0) == "x");                             // no Q/DQ in front
      CHECK(find_init(full.model, n.input(1)) != nullptr);  // its factors float
    }
  }
}

TEST_CASE("smooth_quant: alpha 0 and 1 are the two ends") {
  if (!ort_available()) {
    MESSAGE("skipped: " << ort_unavailable_reason());
    return;
  }
  qo::qconfig cfg = matmuls_only();
  const std::vector<float> w1 = float_weight("W1");
  for (const double alpha : {0.0, 1.0}) {
    CAPTURE(alpha);
    const result r = quantize(with_sq(cfg, alpha), alpha == 0.0 ? "sq_a0" : "sq_a1");
    const std::vector<float> inv = floats_of(*find_init(r.model, "x_n0_smooth_scale"));
    for (std::size_t j = 0; j < inv.size(); ++j) {
      CAPTURE(j);
      if (alpha == 1.0) {
        // s = max |x_j|: the activation's channels all end with range 1.
        CHECK(static_cast<double>(inv[j]) == doctest::Approx(1.0 / x_maxima()[j]).epsilon(1e-6));
      } else {
        // s = 1 / max_n |W1[j, n]|: the Mul multiplies by the weight row's maximum.
        double wmax = 0.0;
        for (std::size_t c = 0; c < 6; ++c)
          wmax = std::max(wmax, std::fabs(static_cast<double>(w1[j * 6 + c])));
        CHECK(static_cast<double>(inv[j]) == doctest::Approx(wmax).epsilon(1e-6));
      }
    }
    CHECK(ort_error(r.model, r.path) < 0.5);
  }
}

TEST_CASE("smooth_quant: bad alpha, empty or one-pass data: named errors, no file left") {
  const fs::path dir = work_dir();
  const fs::path fin = dir / "sq_bad_float.onnx";
  save_proto(model(), fin);
  const fs::path out = dir / "sq_bad.onnx";
  fs::remove(out);
  qo::memory_reader reader(samples(100, 2));
  CHECK(error_id([&] {
          qo::quantize_model(fin, out, with_sq(qo::get_default_config("A8W8"), 1.5), reader);
        }) == "quark.config.value");
  CHECK(error_id([&] {
          qo::quantize_model(fin, out, with_sq(qo::get_default_config("A8W8"), -0.1), reader);
        }) == "quark.config.value");
  CHECK_FALSE(fs::exists(out));
  qo::memory_reader empty({});
  CHECK(error_id([&] {
          qo::quantize_model(fin, out, with_sq(qo::get_default_config("A8W8"), 0.5), empty);
        }) == "quark.quantize.no_data");
  CHECK_FALSE(fs::exists(out));
  // A reader that cannot start again: the factors would use up the calibration data.
  struct once : qo::calibration_data_reader {
    std::vector<qo::calib_sample> s = samples(100, 2);
    std::size_t i = 0;
    std::optional<qo::calib_sample> next() override {
      return i < s.size() ? std::optional<qo::calib_sample>(s[i++]) : std::nullopt;
    }
  } one_pass;
  const std::string msg = error_text([&] {
    qo::quantize_model(fin, out, with_sq(qo::get_default_config("A8W8"), 0.5), one_pass);
  });
  CHECK(msg.find("smooth_quant") != std::string::npos);
  CHECK(msg.find("rewind") != std::string::npos);
  CHECK_FALSE(fs::exists(out));
}
