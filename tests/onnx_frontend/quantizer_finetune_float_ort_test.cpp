// SPDX-License-Identifier: MIT
// AdaQuant on weights that are not integers (quark-spec §10.5: Quark's torch replicas of the
// float16 / bfloat16 casts and of the BFP / MX ops; onnx_frontend/src/quantizer/algo_finetune.cpp,
// weight_chain), on an 8 x 32 Gemm with weights only quantized:
//  * bfloat16 and float16 (Cast pairs): the fine-tuned and the plain model run in ONNX Runtime
//    1.30; the loss of ORT's outputs against x W^T + b (computed here in double) falls, and it
//    is the reconstruction error the quantizer's note reports before / after;
//  * BFP16, MX6 and MXFP4 (com.amd.quark ops, which ORT cannot run): the stored float weights go
//    through the block-op oracle (tests/support/quark_ops_oracle.hpp) and the loss computed here
//    falls and matches the note; the learned weights stay within the span Adam can move them;
//  * AdaRound on such weights skips the module with a reason naming the format;
//  * the BF16_ADAQUANT / FP16_ADAQUANT presets on a small Conv net: ORT runs the result and our
//    runtime gives the same outputs.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <sstream>
#include <variant>

#include <doctest/doctest.h>

// support/ort.hpp first: inside quark::test, "onnx::" must find ::onnx, not quark::onnx.
#include <quark/onnx/config.hpp>
#include <quark/onnx/model.hpp>
#include <quark/onnx/presets.hpp>
#include <quark/onnx/quantizer.hpp>

#include "support/model_files.hpp"
#include "support/ort.hpp"
#include "support/quark_ops_oracle.hpp"

using namespace quark::test;
namespace qo = quark::onnx;
namespace fs = std::filesystem;

namespace {

constexpr std::size_t rows = 16, out = 8, in = 32;
/// One Adam step moves a weight by at most lr (1 - beta1) / sqrt(1 - beta2) = 3.16 lr (beta1 0.9,
/// beta2 0.999), plus float32 rounding of the stored weight.
constexpr double adam_bound = 3.17;

qo::option_value obj(std::initializer_list<std::pair<const char*, qo::option_value>> kv) {
  qo::option_value::object_type o;
  for (const auto& [k, v] : kv)
    o.push_back(qo::option_member{k, v});
  return qo::option_value(std::move(o));
}

/// y = x W^T + b, W 8 x 32, and four samples of positive inputs (as after a Relu), so the
/// weights' rounding errors add up along each row.
struct gemm_case {
  std::vector<float> w;
  std::vector<float> b = random_floats(out, 62, -0.5f, 0.5f);
  std::vector<std::vector<float>> xs;
  std::vector<qo::calib_sample> calib;
  qo::model fm;
  /// Weights uniform in [w_lo, w_hi).
  explicit gemm_case(float w_lo = -1.0f, float w_hi = 1.0f)
      : w(random_floats(out * in, 61, w_lo, w_hi)) {
    model_builder mb(13);
    mb.input("x", onnx_type::float32, {rows, in});
    mb.initializer("w", onnx_type::float32, {out, in}, w);
    mb.initializer("b", onnx_type::float32, {out}, b);
    mb.node("Gemm", {"x", "w", "b"}, {"y"}, {attr_int("transB", 1)});
    mb.output("y", onnx_type::float32, {rows, out});
    fm = to_model(mb.build());
    for (std::uint32_t s = 0; s < 4; ++s) {
      xs.push_back(random_floats(rows * in, 70 + s, 0.0f, 1.0f));
      calib.push_back({{"x", qo::tensor::from_floats({rows, in}, xs.back())}});
    }
  }
  /// Mean over the samples of the squared error of y against the float Gemm, summed over the
  /// outputs and averaged over the rows (the module's reconstruction loss).
  [[nodiscard]] double loss(const std::vector<std::vector<double>>& ys) const {
    double sum = 0.0;
    for (std::size_t s = 0; s < xs.size(); ++s) {
      for (std::size_t r = 0; r < rows; ++r) {
        for (std::size_t o = 0; o < out; ++o) {
          double t = static_cast<double>(b[o]);
          for (std::size_t k = 0; k < in; ++k)
            t += static_cast<double>(xs[s][r * in + k]) * static_cast<double>(w[o * in + k]);
          const double d = ys[s][r * out + o] - t;
          sum += d * d;
        }
      }
    }
    return sum / static_cast<double>(rows * xs.size());
  }
  /// y = x Wq^T + bq for every sample, in double.
  [[nodiscard]] std::vector<std::vector<double>> outputs(const std::vector<float>& wq,
                                                         const std::vector<float>& bq) const {
    std::vector<std::vector<double>> ys;
    for (const auto& x : xs) {
      std::vector<double> y(rows * out);
      for (std::size_t r = 0; r < rows; ++r) {
        for (std::size_t o = 0; o < out; ++o) {
          double t = static_cast<double>(bq[o]);
          for (std::size_t k = 0; k < in; ++k)
            t += static_cast<double>(x[r * in + k]) * static_cast<double>(wq[o * in + k]);
          y[r * out + o] = t;
        }
      }
      ys.push_back(std::move(y));
    }
    return ys;
  }
};

/// ORT's outputs y of model `m` on every sample of `g`.
std::vector<std::vector<double>> ort_outputs(const gemm_case& g, const qo::model& m) {
  std::vector<std::vector<double>> ys;
  for (const auto& x : g.xs) {
    const auto res = run_ort(to_proto(m), {npy_array::from(x, {rows, in})});
    const auto y = res.at("y").values<float>();
    ys.emplace_back(y.begin(), y.end());
  }
  return ys;
}

/// `preset`'s weight spec only (WeightsOnly) with `algo` (num_iterations `iters`, learning rate
/// `lr`, all four samples per batch).
qo::qconfig weights_only(const char* preset, const char* algo, std::size_t iters, double lr) {
  qo::qconfig cfg = qo::get_default_config(preset);
  cfg.extra_options.set("WeightsOnly", true);
  cfg.algo_config.clear();
  if (algo != nullptr) {
    cfg.algo_config.push_back({.name = *qo::parse_algo_name(algo),
                               .params = obj({{"num_iterations", static_cast<std::int64_t>(iters)},
                                              {"learning_rate", lr},
                                              {"batch_size", 4}})});
  }
  return cfg;
}

/// The before / after reconstruction errors of the fast-finetune note.
std::pair<double, double> note_losses(const qo::quantize_report& rep) {
  for (const auto& n : rep.notes) {
    const auto at = n.find("reconstruction error ");
    if (at == std::string::npos)
      continue;
    std::istringstream is(n.substr(at + 21));
    double a = 0.0, c = 0.0;
    std::string arrow;
    is >> a >> arrow >> c;
    return {a, c};
  }
  FAIL("no fast finetune note");
  return {};
}

bool near(double a, double b, double rel) {
  return std::fabs(a - b) <= rel * std::max(std::fabs(a), std::fabs(b)) + 1e-12;
}

/// The losses of ORT's outputs of the plain model `pm` and the fine-tuned `qm`, checked against
/// the before / after reconstruction errors of the quantizer's note `rep`.
std::pair<double, double> ort_losses(const gemm_case& g, const qo::model& pm, const qo::model& qm,
                                     const qo::quantize_report& rep, const char* preset) {
  const double plain = g.loss(ort_outputs(g, pm));
  const double tuned = g.loss(ort_outputs(g, qm));
  const auto [before, after] = note_losses(rep);
  MESSAGE(std::string(preset) << ": ORT loss plain " << plain << ", fine-tuned " << tuned
                              << "; note " << before << " -> " << after);
  CHECK(near(before, plain, 2e-3));
  CHECK(near(after, tuned, 2e-3));
  return {plain, tuned};
}

const qo::node_info& producer_of(const std::vector<qo::node_info>& nodes, const std::string& v) {
  const auto it = std::find_if(nodes.begin(), nodes.end(), [&](const auto& n) {
    return std::find(n.outputs.begin(), n.outputs.end(), v) != n.outputs.end();
  });
  REQUIRE(it != nodes.end());
  return *it;
}

std::int64_t attr_i(const qo::node_info& n, const char* key, std::int64_t dflt) {
  for (const auto& a : n.attributes) {
    if (a.name == key)
      return std::get<std::int64_t>(a.value);
  }
  return dflt;
}

std::string attr_s(const qo::node_info& n, const char* key, std::string dflt) {
  for (const auto& a : n.attributes) {
    if (a.name == key)
      return std::get<std::string>(a.value);
  }
  return dflt;
}

/// Value `v` of `m` as the model computes it when it is a float initializer or a block op on
/// one (the oracle evaluates the op); `init` receives the float initializer's name.
std::vector<float> block_value(const qo::model& m, const std::string& v, std::string* init) {
  if (m.has_initializer(v)) {
    if (init != nullptr)
      *init = v;
    const qo::tensor t = m.initializer(v);
    return {t.data<float>().begin(), t.data<float>().end()};
  }
  const auto nodes = m.nodes();
  const qo::node_info& n = producer_of(nodes, v);
  REQUIRE(n.domain == "com.amd.quark");
  const qo::tensor t = m.initializer(n.inputs.at(0));
  if (init != nullptr)
    *init = n.inputs.at(0);
  std::vector<std::int64_t> shape(t.shape().begin(), t.shape().end());
  std::vector<float> y(t.size());
  if (n.op_type == "BFPQuantizeDequantize") {
    quark::bfp_op_attributes a;
    a.bfp_method = attr_s(n, "bfp_method", a.bfp_method);
    a.axis = attr_i(n, "axis", a.axis);
    a.bit_width = attr_i(n, "bit_width", a.bit_width);
    a.block_size = attr_i(n, "block_size", a.block_size);
    a.rounding_mode = attr_i(n, "rounding_mode", a.rounding_mode);
    a.sub_block_size = attr_i(n, "sub_block_size", a.sub_block_size);
    a.sub_block_shift_bits = attr_i(n, "sub_block_shift_bits", a.sub_block_shift_bits);
    bfp_oracle(a, t.data<float>(), shape, y);
  } else {
    REQUIRE(n.op_type == "MXQuantizeDequantize");
    quark::mx_op_attributes a;
    a.element_dtype = attr_s(n, "element_dtype", a.element_dtype);
    a.axis = attr_i(n, "axis", a.axis);
    a.block_size = attr_i(n, "block_size", a.block_size);
    a.rounding_mode = attr_i(n, "rounding_mode", a.rounding_mode);
    mx_oracle(a, t.data<float>(), shape, y);
  }
  return y;
}

}  // namespace

TEST_CASE("AdaQuant on bfloat16 / float16 weights: ORT's outputs get closer to the float Gemm") {
  if (!ort_available()) {
    MESSAGE("skipped: " << ort_unavailable_reason());
    return;
  }
  const gemm_case g;
  for (const char* preset : {"BF16", "FP16"}) {
    CAPTURE(std::string(preset));
    // Adam moves every weight of a row by about lr per iteration in the same direction (the
    // inputs are positive), so the row's rounding errors are taken back a few weights at a time
    // only when lr is far below the format's step (bfloat16 near 0.5: 2^-9; float16: 2^-12).
    const double lr = 1e-6;
    qo::memory_reader r1(g.calib), r2(g.calib);
    qo::quantize_report rep;
    const qo::model qm =
        qo::quantize_model(g.fm, weights_only(preset, "adaquant", 200, lr), r1, &rep);
    const qo::model pm = qo::quantize_model(g.fm, weights_only(preset, nullptr, 0, 0.0), r2);
    for (const auto& n : rep.notes)
      MESSAGE(n);
    // ORT runs both on every sample.
    const auto [plain, tuned] = ort_losses(g, pm, qm, rep, preset);
    CHECK(tuned < 0.9 * plain);
    // The weight is still a Cast pair on a float initializer, and the initializer changed.
    const auto nodes = qm.nodes();
    const auto gemm =
        std::find_if(nodes.begin(), nodes.end(), [](const auto& n) { return n.op_type == "Gemm"; });
    REQUIRE(gemm != nodes.end());
    const qo::node_info& dq = producer_of(nodes, gemm->inputs.at(1));
    CHECK(dq.op_type == "Cast");
    const qo::node_info& q = producer_of(nodes, dq.inputs.at(0));
    CHECK(q.op_type == "Cast");
    const qo::tensor wt = qm.initializer(q.inputs.at(0));
    REQUIRE(wt.size() == g.w.size());
    std::size_t moved = 0;
    for (std::size_t i = 0; i < g.w.size(); ++i) {
      const double d = std::fabs(static_cast<double>(wt.data<float>()[i] - g.w[i]));
      CHECK(d <= 200 * lr * adam_bound);
      moved += d > 0.0 ? 1U : 0U;
    }
    CHECK(moved > 0);
  }
}

TEST_CASE("AdaQuant on asymmetric scaled bfloat16 / float16 weights (Div, Add, Sub, Mul)") {
  if (!ort_available()) {
    MESSAGE("skipped: " << ort_unavailable_reason());
    return;
  }
  // Weights in [-0.25, 1): min -0.25, max 1, so the zero point is RNE(-2 + 0.25 / 0.3125) = -1
  // for bfloat16 (and about -39305 for float16). The fine-tuner must read the chain with its zero
  // point: its loss before tuning is the plain model's in ORT.
  const gemm_case g(-0.25f, 1.0f);
  for (const char* preset : {"BF16", "FP16"}) {
    CAPTURE(std::string(preset));
    auto cfg = [&](const char* algo, std::size_t iters, double lr) {
      qo::qconfig c = weights_only(preset, algo, iters, lr);
      REQUIRE(c.global_config.weight.has_value());
      c.global_config.weight->symmetric = false;
      c.extra_options.set("WeightScaled", true);
      return c;
    };
    // The float16 grid here is scale 1.25 / 131008 times a float16 spacing, down to about
    // 1e-5 / 2^10 near code 0: only a smaller learning rate finds a better rounding.
    const double lr = std::string(preset) == "BF16" ? 1e-6 : 1e-7;
    qo::memory_reader r1(g.calib), r2(g.calib);
    qo::quantize_report rep;
    const qo::model qm = qo::quantize_model(g.fm, cfg("adaquant", 200, lr), r1, &rep);
    for (const auto& n : rep.notes)
      MESSAGE(n);
    const qo::model pm = qo::quantize_model(g.fm, cfg(nullptr, 0, 0.0), r2);
    const auto [plain, tuned] = ort_losses(g, pm, qm, rep, preset);
    CHECK(tuned < plain);
    // Div -> Add -> Cast -> Cast -> Sub -> Mul on the float initializer, whose values moved.
    const auto nodes = qm.nodes();
    const auto gemm =
        std::find_if(nodes.begin(), nodes.end(), [](const auto& n) { return n.op_type == "Gemm"; });
    REQUIRE(gemm != nodes.end());
    std::vector<std::string> ops;
    std::string v = gemm->inputs.at(1);
    while (!qm.has_initializer(v)) {
      const qo::node_info& n = producer_of(nodes, v);
      ops.insert(ops.begin(), n.op_type);
      v = n.inputs.at(0);
    }
    CHECK(ops == std::vector<std::string>{"Div", "Add", "Cast", "Cast", "Sub", "Mul"});
    const qo::tensor wt = qm.initializer(v);
    REQUIRE(wt.size() == g.w.size());
    std::size_t moved = 0;
    for (std::size_t i = 0; i < g.w.size(); ++i)
      moved += wt.data<float>()[i] != g.w[i] ? 1U : 0U;
    CHECK(moved > 0);
  }
}

TEST_CASE("AdaQuant on BFP16 / MX6 / MXFP4 weights: the block-op oracle's loss falls") {
  const gemm_case g;
  for (const auto& [preset_name, lr_value] :
       {std::pair{"BFP16", 1e-5}, std::pair{"MX6", 1e-5}, std::pair{"MXFP4E2M1", 1e-3}}) {
    // (plain copies: clang does not let lambdas / CAPTURE refer to structured bindings)
    const char* preset = preset_name;
    const double lr = lr_value;
    CAPTURE(std::string(preset));
    qo::memory_reader r1(g.calib), r2(g.calib);
    qo::quantize_report rep;
    const qo::model qm =
        qo::quantize_model(g.fm, weights_only(preset, "adaquant", 200, lr), r1, &rep);
    const qo::model pm = qo::quantize_model(g.fm, weights_only(preset, nullptr, 0, 0.0), r2);
    auto oracle_loss = [&](const qo::model& m, std::vector<float>* stored) {
      const auto nodes = m.nodes();
      const auto gemm = std::find_if(nodes.begin(), nodes.end(),
                                     [](const auto& n) { return n.op_type == "Gemm"; });
      REQUIRE(gemm != nodes.end());
      std::string init;
      const std::vector<float> wq = block_value(m, gemm->inputs.at(1), &init);
      CHECK(init != gemm->inputs.at(1));  // behind a block op
      const std::vector<float> bq = block_value(m, gemm->inputs.at(2), nullptr);
      if (stored != nullptr) {
        const qo::tensor t = m.initializer(init);
        stored->assign(t.data<float>().begin(), t.data<float>().end());
      }
      return g.loss(g.outputs(wq, bq));
    };
    std::vector<float> learned;
    const double plain = oracle_loss(pm, nullptr);
    const double tuned = oracle_loss(qm, &learned);
    const auto [before, after] = note_losses(rep);
    MESSAGE(std::string(preset) << ": oracle loss plain " << plain << ", fine-tuned " << tuned
                                << "; note " << before << " -> " << after);
    CHECK(near(before, plain, 1e-3));
    CHECK(near(after, tuned, 1e-3));
    CHECK(tuned < 0.9 * plain);
    REQUIRE(learned.size() == g.w.size());
    for (std::size_t i = 0; i < g.w.size(); ++i)
      CHECK(std::fabs(static_cast<double>(learned[i] - g.w[i])) <= 200 * lr * adam_bound);
  }
}

TEST_CASE("AdaRound on a bfloat16 / MX weight skips the module, naming the format") {
  const gemm_case g;
  for (const auto& [preset_name, format_name] :
       {std::pair{"BF16", "bfloat16 Cast"}, std::pair{"MXFP4E2M1", "MXQuantizeDequantize"}}) {
    const std::string preset = preset_name, format = format_name;
    CAPTURE(preset);
    qo::memory_reader r(g.calib);
    qo::quantize_report rep;
    const qo::model qm =
        qo::quantize_model(g.fm, weights_only(preset.c_str(), "adaround", 10, 0.1), r, &rep);
    std::string all;
    for (const auto& n : rep.notes)
      all += n + "\n";
    CAPTURE(all);
    CHECK(all.find("AdaRound needs integer weights") != std::string::npos);
    CHECK(all.find(format) != std::string::npos);
    // Nothing changed: the weight initializer is the float model's.
    const auto nodes = qm.nodes();
    const auto gemm =
        std::find_if(nodes.begin(), nodes.end(), [](const auto& n) { return n.op_type == "Gemm"; });
    REQUIRE(gemm != nodes.end());
    std::string root = producer_of(nodes, gemm->inputs.at(1)).inputs.at(0);
    if (!qm.has_initializer(root))
      root = producer_of(nodes, root).inputs.at(0);
    const qo::tensor t = qm.initializer(root);
    CHECK(std::equal(g.w.begin(), g.w.end(), t.data<float>().begin()));
  }
}

TEST_CASE("BF16_ADAQUANT / FP16_ADAQUANT on a Conv net: ORT runs the model and agrees with ours") {
  if (!ort_available()) {
    MESSAGE("skipped: " << ort_unavailable_reason());
    return;
  }
  // x 1x3x8x8 -> Conv 3x3 (8) -> Relu -> depthwise Conv 3x3 -> GlobalAveragePool -> Flatten ->
  // Gemm (5): activations and weights in the preset's type, AdaQuant on the three weights.
  model_builder mb(13);
  mb.input("x", onnx_type::float32, {1, 3, 8, 8});
  mb.initializer("w1", onnx_type::float32, {8, 3, 3, 3}, random_floats(216, 81, -0.5f, 0.5f));
  mb.initializer("b1", onnx_type::float32, {8}, random_floats(8, 82, -0.2f, 0.2f));
  mb.initializer("w2", onnx_type::float32, {8, 1, 3, 3}, random_floats(72, 83, -0.8f, 0.8f));
  mb.initializer("w3", onnx_type::float32, {5, 8}, random_floats(40, 84, -1.0f, 1.0f));
  mb.initializer("b3", onnx_type::float32, {5}, random_floats(5, 85, -0.2f, 0.2f));
  mb.node("Conv", {"x", "w1", "b1"}, {"c1"}, {attr_ints("pads", {1, 1, 1, 1})});
  mb.node("Relu", {"c1"}, {"r1"});
  mb.node("Conv", {"r1", "w2"}, {"c2"}, {attr_int("group", 8), attr_ints("pads", {1, 1, 1, 1})});
  mb.node("GlobalAveragePool", {"c2"}, {"p"});
  mb.node("Flatten", {"p"}, {"f"});
  mb.node("Gemm", {"f", "w3", "b3"}, {"y"}, {attr_int("transB", 1)});
  mb.output("y", onnx_type::float32, {1, 5});
  const qo::model fm = to_model(mb.build());
  std::vector<qo::calib_sample> calib;
  for (std::uint32_t i = 0; i < 4; ++i)
    calib.push_back(
        {{"x", qo::tensor::from_floats({1, 3, 8, 8}, random_floats(192, 400 + i, -1.0f, 1.0f))}});
  const std::vector<float> x = random_floats(192, 499, -1.0f, 1.0f);
  const auto dir = work_dir();
  for (const char* preset : {"BF16_ADAQUANT", "FP16_ADAQUANT"}) {
    CAPTURE(std::string(preset));
    qo::qconfig cfg = qo::get_default_config(preset);
    REQUIRE(cfg.algo_config.size() == 1);
    cfg.algo_config.front().params.set("num_iterations", 100);
    cfg.algo_config.front().params.set("learning_rate", 1e-6);
    qo::memory_reader reader(calib);
    qo::quantize_report rep;
    const qo::model qm = qo::quantize_model(fm, cfg, reader, &rep);
    std::string note;
    for (const auto& n : rep.notes) {
      if (n.starts_with("adaquant: "))
        note = n;
    }
    MESSAGE(note);
    CHECK(note.find("skipped") == std::string::npos);  // all three modules were trained
    CHECK(note.find(" 0 modules improved") == std::string::npos);
    const fs::path file = dir / (std::string(preset) + ".onnx");
    qm.save(file);
    const auto ort = run_ort(to_proto(qm), {npy_array::from(x, {1, 3, 8, 8})});
    const auto ours = qo::run_model(file, {{"x", qo::tensor::from_floats({1, 3, 8, 8}, x)}});
    const auto a = ort.at("y").values<float>();
    const auto o = ours.at("y").data<float>();
    REQUIRE(a.size() == o.size());
    for (std::size_t i = 0; i < a.size(); ++i)
      CHECK(std::fabs(a[i] - o[i]) <= 1e-4f * std::max(1.0f, std::fabs(a[i])));
  }
}

TEST_CASE("update_bias trains a bias behind a bfloat16 Cast pair / a BFP op (the full presets)") {
  // BF16 and MX9 with activations quantized too: the Gemm's bias goes through the preset's
  // fake quantizer (a Cast pair, a BFPQuantizeDequantize), and update_bias trains it.
  const gemm_case g;
  for (const char* name : {"BF16", "MX9"}) {
    const std::string preset = name;
    CAPTURE(preset);
    qo::qconfig cfg = qo::get_default_config(name);
    cfg.algo_config.push_back({.name = qo::algo_name::adaquant,
                               .params = obj({{"num_iterations", 200},
                                              {"learning_rate", 1e-6},
                                              {"batch_size", 4},
                                              {"update_bias", true}})});
    qo::memory_reader reader(g.calib);
    qo::quantize_report rep;
    const qo::model qm = qo::quantize_model(g.fm, cfg, reader, &rep);
    std::string all;
    for (const auto& n : rep.notes)
      all += n + "\n";
    CAPTURE(all);
    CHECK(all.find("adaquant: 1 modules improved") != std::string::npos);
    // The bias initializer behind the Gemm's bias chain moved, by at most Adam's bound.
    const auto nodes = qm.nodes();
    const auto gemm =
        std::find_if(nodes.begin(), nodes.end(), [](const auto& n) { return n.op_type == "Gemm"; });
    REQUIRE(gemm != nodes.end());
    std::string root = producer_of(nodes, gemm->inputs.at(2)).inputs.at(0);
    if (!qm.has_initializer(root))
      root = producer_of(nodes, root).inputs.at(0);  // Cast(to float) <- Cast(to bf16) <- init
    const qo::tensor bt = qm.initializer(root);
    REQUIRE(bt.size() == g.b.size());
    std::size_t moved = 0;
    for (std::size_t o = 0; o < g.b.size(); ++o) {
      const double d = std::fabs(static_cast<double>(bt.data<float>()[o] - g.b[o]));
      CHECK(d <= 200 * 1e-6 * adam_bound + 1e-2);  // + the start: the bias as the model had it
      moved += d > 0.0 ? 1U : 0U;
    }
    CHECK(moved > 0);
  }
}
