// SPDX-License-Identifier: MIT
// algo_config quarot (QuaRot's R1 rotation, quark-spec §10.6) on a small transformer-like float
// model: an embedding (MatMul or Gather) writing the residual stream, an RMS norm, a MatMul pair
// writing back into the stream, a second RMS norm and a Gemm head (transB) with a bias. Oracles:
// ONNX Runtime runs the original and the rotated float model on the same inputs (same function,
// to float rounding); the rotated embedding equals E R with R = H / sqrt(8) built here as a dense
// Sylvester matrix; the norm scales become 1. The quantized model runs in ORT and our runtime
// agrees. Bad pairs files and nodes are refused naming the culprit.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include <quark/onnx/config.hpp>
#include <quark/onnx/error.hpp>
#include <quark/onnx/presets.hpp>
#include <quark/onnx/quantizer.hpp>

#include "support/checks.hpp"
#include "support/model_files.hpp"
#include "support/ort.hpp"

namespace fs = std::filesystem;
namespace qo = quark::onnx;
using namespace quark::test;

namespace {

constexpr std::int64_t n = 8, vocab = 16, rows = 4;

/// x -> RMS norm -> out: Mul(x, x), ReduceMean over the last axis, + eps, Sqrt, Div, then the
/// scale `g` (the node named `name`).
void rms_norm(model_builder& b, const std::string& x, const std::string& name, const std::string& g,
              const std::string& out) {
  b.node("Mul", {x, x}, {name + "_sq"});
  b.node("ReduceMean", {name + "_sq"}, {name + "_ms"},
         {attr_ints("axes", {1}), attr_int("keepdims", 1)});
  b.node("Add", {name + "_ms", "eps"}, {name + "_mse"});
  b.node("Sqrt", {name + "_mse"}, {name + "_rms"});
  b.node("Div", {x, name + "_rms"}, {name + "_n"});
  b.node("Mul", {name + "_n", g}, {out});
}

/// The model; `gather`: the embedding is Gather(E, ids) with int64 ids [4], else MatMul(x, E)
/// with float x [4, 16]; `hidden` the residual stream's width. Node names: embed, norm1, q, o,
/// norm2, head.
::onnx::ModelProto model(bool gather, std::int64_t hidden = n) {
  const auto hz = static_cast<std::size_t>(hidden), vz = static_cast<std::size_t>(vocab);
  model_builder b(13, 7);
  if (gather) {
    b.input("ids", onnx_type::int64, {rows});
  } else {
    b.input("x", onnx_type::float32, {rows, vocab});
  }
  b.initializer("embed.weight", onnx_type::float32, {vocab, hidden}, random_floats(vz * hz, 61));
  b.initializer("eps", onnx_type::float32, {1}, std::vector<float>{1e-6f});
  b.initializer("g1", onnx_type::float32, {hidden}, random_floats(hz, 62, 0.5f, 1.5f));
  b.initializer("g2", onnx_type::float32, {hidden}, random_floats(hz, 63, 0.5f, 1.5f));
  b.initializer("Wq", onnx_type::float32, {hidden, hidden},
                random_floats(hz * hz, 64, -0.5f, 0.5f));
  b.initializer("Wo", onnx_type::float32, {hidden, hidden},
                random_floats(hz * hz, 65, -0.5f, 0.5f));
  b.initializer("Wh", onnx_type::float32, {vocab, hidden}, random_floats(vz * hz, 66, -0.5f, 0.5f));
  b.initializer("bh", onnx_type::float32, {vocab}, random_floats(vocab, 67, -0.1f, 0.1f));
  if (gather) {
    b.node("Gather", {"embed.weight", "ids"}, {"h0"});
  } else {
    b.node("MatMul", {"x", "embed.weight"}, {"h0"});
  }
  rms_norm(b, "h0", "norm1", "g1", "n1");
  b.node("MatMul", {"n1", "Wq"}, {"a"});
  b.node("Relu", {"a"}, {"r"});
  b.node("MatMul", {"r", "Wo"}, {"o"});
  b.node("Add", {"h0", "o"}, {"h1"});
  rms_norm(b, "h1", "norm2", "g2", "n2");
  b.node("Gemm", {"n2", "Wh", "bh"}, {"logits"}, {attr_int("transB", 1)});
  b.output("logits", onnx_type::float32, {rows, vocab});
  ::onnx::ModelProto m = b.build();
  // Names as the pairs file gives them.
  for (auto& nd : *m.mutable_graph()->mutable_node()) {
    if (nd.op_type() == "Gather" || (nd.op_type() == "MatMul" && nd.input(0) == "x"))
      nd.set_name("embed");
    else if (nd.output(0) == "n1")
      nd.set_name("norm1");
    else if (nd.output(0) == "n2")
      nd.set_name("norm2");
    else if (nd.output(0) == "a")
      nd.set_name("q");
    else if (nd.output(0) == "o")
      nd.set_name("o");
    else if (nd.output(0) == "logits")
      nd.set_name("head");
    else if (nd.output(0) == "norm1_sq")
      nd.set_name("norm1_sq");
  }
  return m;
}

const char* pairs_json =
    R"({"R1_pairs": [{"prev_nodes": ["embed", "o"], "next_nodes": ["q"], "norm_node": "norm1"},
                     {"prev_nodes": [], "next_nodes": ["head"], "norm_node": "norm2"}]})";

fs::path write_file(const std::string& name, const std::string& text) {
  const fs::path p = work_dir() / name;
  std::ofstream(p) << text;
  return p;
}

qo::qconfig with_quarot(const fs::path& pairs, std::int64_t dim, bool random = false) {
  qo::qconfig c = qo::get_default_config("A8W8");
  qo::option_value p = qo::option_value::object();
  p.set("r_matrix_dim", dim);
  p.set("use_random_had", random);
  p.set("r_config_path", pairs.string());
  c.algo_config.push_back({.name = qo::algo_name::quarot, .params = p});
  return c;
}

/// ORT's outputs of `a` and `b` on the same int64 ids agree.
void check_same_on_ids(const ::onnx::ModelProto& a, const ::onnx::ModelProto& b) {
  const std::vector<std::int64_t> ids{3, 0, 15, 7};
  const auto ra = run_ort(a, {npy_array::from(ids, {rows})}).at("logits").values<float>();
  const auto rb = run_ort(b, {npy_array::from(ids, {rows})}).at("logits").values<float>();
  REQUIRE(ra.size() == rb.size());
  for (std::size_t i = 0; i < ra.size(); ++i)
    CHECK(std::fabs(ra[i] - rb[i]) <= 1e-5f * (1.0f + std::fabs(ra[i])));
}

}  // namespace

TEST_CASE("quarot: the rotated float model computes the same function, E becomes E R") {
  if (!ort_available()) {
    MESSAGE("skipped: " << ort_unavailable_reason());
    return;
  }
  const fs::path pairs = write_file("quarot_pairs.json", pairs_json);
  // R = H / sqrt(8), H the Sylvester matrix: H_1 = [1], H_2k = [[H_k, H_k], [H_k, -H_k]].
  std::vector<double> h{1.0};
  for (std::size_t size = 1; size < static_cast<std::size_t>(n); size *= 2) {
    std::vector<double> next(4 * size * size);
    for (std::size_t i = 0; i < size; ++i) {
      for (std::size_t j = 0; j < size; ++j) {
        const double v = h[i * size + j];
        next[i * 2 * size + j] = v;
        next[i * 2 * size + j + size] = v;
        next[(i + size) * 2 * size + j] = v;
        next[(i + size) * 2 * size + j + size] = -v;
      }
    }
    h = std::move(next);
  }
  for (const bool gather : {false, true}) {
    CAPTURE(gather);
    const ::onnx::ModelProto fm = model(gather);
    std::vector<std::string> notes;
    const ::onnx::ModelProto rm =
        to_proto(qo::equalize_model(to_model(fm), with_quarot(pairs, n), &notes));
    REQUIRE(!notes.empty());
    CHECK(notes.front().find("quarot: R1 (8 x 8 Hadamard) over 2 pairs: 2 writers rotated, 2 "
                             "readers rotated back, 2 norm scales folded") == 0);
    if (gather)
      check_same_on_ids(fm, rm);
    else
      check_same_function(fm, rm, {rows, vocab}, 1e-5);
    // The embedding's rows times R.
    const std::vector<float> e = floats_of(*find_init(fm, "embed.weight"));
    const std::vector<float> er = floats_of(*find_init(rm, "embed.weight"));
    for (std::size_t r = 0; r < static_cast<std::size_t>(vocab); ++r) {
      for (std::size_t j = 0; j < static_cast<std::size_t>(n); ++j) {
        double acc = 0.0;
        for (std::size_t i = 0; i < static_cast<std::size_t>(n); ++i)
          acc += static_cast<double>(e[r * n + i]) * h[i * n + j] / std::sqrt(8.0);
        CHECK(static_cast<double>(er[r * n + j]) == doctest::Approx(acc).epsilon(1e-6));
      }
    }
    CHECK(floats_of(*find_init(rm, "g1")) == std::vector<float>(n, 1.0f));
    CHECK(floats_of(*find_init(rm, "g2")) == std::vector<float>(n, 1.0f));
  }
  // Random signs: another R, the same function.
  const ::onnx::ModelProto fm = model(false);
  const ::onnx::ModelProto rnd =
      to_proto(qo::equalize_model(to_model(fm), with_quarot(pairs, n, true)));
  check_same_function(fm, rnd, {rows, vocab}, 1e-5);
  CHECK(floats_of(*find_init(rnd, "Wq")) !=
        floats_of(
            *find_init(to_proto(qo::equalize_model(to_model(fm), with_quarot(pairs, n))), "Wq")));
}

TEST_CASE("quarot: the quantized rotated model runs in ORT and our runtime agrees") {
  if (!ort_available()) {
    MESSAGE("skipped: " << ort_unavailable_reason());
    return;
  }
  const fs::path pairs = write_file("quarot_pairs_q.json", pairs_json);
  const fs::path fin = work_dir() / "quarot_float.onnx";
  save_proto(model(false), fin);
  const fs::path out = work_dir() / "quarot_a8w8.onnx";
  // Calibration inputs from the distribution check_same_function feeds (uniform in [-2, 2]).
  std::vector<qo::calib_sample> samples;
  for (std::uint32_t seed = 10; seed < 18; ++seed) {
    qo::calib_sample s;
    s.emplace("x", qo::tensor::from_floats({rows, vocab},
                                           random_floats(rows * vocab, seed, -2.0f, 2.0f)));
    samples.push_back(std::move(s));
  }
  qo::memory_reader reader(std::move(samples));
  const qo::quantize_report r = qo::quantize_model(fin, out, with_quarot(pairs, n), reader);
  bool noted = false;
  for (const auto& note : r.notes)
    noted = noted || note.find("quarot: R1") == 0;
  CHECK(noted);
  check_same_function(model(false), load_proto(out), {rows, vocab}, 0.2);
}

TEST_CASE("quarot: bad pairs files, nodes and sizes are refused naming the culprit") {
  const ::onnx::ModelProto fm = model(false);
  auto text = [&](const std::string& json, std::int64_t dim = n) {
    const fs::path p = write_file("quarot_bad.json", json);
    return error_text([&] { qo::equalize_model(to_model(fm), with_quarot(p, dim)); });
  };
  CHECK(text("{").find("is not JSON") != std::string::npos);
  CHECK(text(R"({"R2_pairs": []})").find("unknown key \"R2_pairs\"") != std::string::npos);
  CHECK(text(R"({"R1_pairs": [{"prev_nodes": ["nope"]}]})")
            .find("prev node \"nope\" is not a node") != std::string::npos);
  CHECK(text(R"({"R1_pairs": [{"prev_nodes": ["embed"], "next_nodes": ["embed"]}]})")
            .find("named twice") != std::string::npos);
  CHECK(text(R"({"R1_pairs": [{"next_nodes": ["q"], "norm_node": "norm1_sq"}]})")
            .find("norm node \"norm1_sq\"") != std::string::npos);
  CHECK(text(R"({"R1_pairs": [{"prev_nodes": ["norm1"]}]})").find("is a Mul") != std::string::npos);
  CHECK(text(pairs_json, 16).find("r_matrix_dim is 16") != std::string::npos);
  CHECK(text(pairs_json, 6).find("quark.config.not_implemented") == 0);
  CHECK(error_text([&] {
          qo::equalize_model(to_model(fm), with_quarot(work_dir() / "no_such.json", n));
        }).find("cannot be read") != std::string::npos);
  // A weight another node reads: q reads Wo too.
  ::onnx::ModelProto shared = fm;
  for (auto& nd : *shared.mutable_graph()->mutable_node()) {
    if (nd.name() == "q")
      nd.set_input(1, "Wo");
  }
  const fs::path p = write_file("quarot_shared.json", pairs_json);
  CHECK(error_text([&] {
          qo::equalize_model(to_model(shared), with_quarot(p, n));
        }).find("'Wo' is shared with another node") != std::string::npos);
  // A LayerNormalization norm: its mean subtraction does not commute with R.
  ::onnx::ModelProto ln = fm;
  auto* lnode = ln.mutable_graph()->add_node();
  lnode->set_op_type("LayerNormalization");
  lnode->set_name("ln");
  lnode->add_input("h0");
  lnode->add_input("g1");
  lnode->add_output("ln_out");
  const fs::path lp =
      write_file("quarot_ln.json", R"({"R1_pairs": [{"next_nodes": ["q"], "norm_node": "ln"}]})");
  // (The added node feeds nothing: SimplifyModel would drop it as dead.)
  qo::qconfig ln_cfg = with_quarot(lp, n);
  ln_cfg.extra_options.set("SimplifyModel", false);
  CHECK(error_text([&] { qo::equalize_model(to_model(ln), ln_cfg); })
            .find("quark.config.not_implemented: algo_config quarot: norm node \"ln\" is a "
                  "LayerNormalization") == 0);
}

TEST_CASE("quarot: a width that is not a power of two (12: a Paley matrix) keeps the function") {
  if (!ort_available()) {
    MESSAGE("skipped: " << ort_unavailable_reason());
    return;
  }
  const fs::path pairs = write_file("quarot_pairs_12.json", pairs_json);
  const ::onnx::ModelProto fm = model(false, 12);
  std::vector<std::string> notes;
  const ::onnx::ModelProto rm =
      to_proto(qo::equalize_model(to_model(fm), with_quarot(pairs, 12), &notes));
  REQUIRE(!notes.empty());
  CHECK(notes.front().find("quarot: R1 (12 x 12 Hadamard)") == 0);
  check_same_function(fm, rm, {rows, vocab}, 1e-5);
  // R is orthogonal: every embedding row keeps its length, and the rows did change.
  const std::vector<float> e = floats_of(*find_init(fm, "embed.weight"));
  const std::vector<float> er = floats_of(*find_init(rm, "embed.weight"));
  CHECK(e != er);
  for (std::size_t r = 0; r < static_cast<std::size_t>(vocab); ++r) {
    double a = 0.0, b = 0.0;
    for (std::size_t j = 0; j < 12; ++j) {
      a += static_cast<double>(e[r * 12 + j]) * static_cast<double>(e[r * 12 + j]);
      b += static_cast<double>(er[r * 12 + j]) * static_cast<double>(er[r * 12 + j]);
    }
    CHECK(b == doctest::Approx(a).epsilon(1e-6));
  }
  CHECK(floats_of(*find_init(rm, "g1")) == std::vector<float>(12, 1.0f));
}
