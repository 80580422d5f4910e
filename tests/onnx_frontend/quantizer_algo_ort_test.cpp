// SPDX-License-Identifier: MIT
// The algorithms of algo_config (quark-spec §10; onnx_frontend/src/quantizer/algo_*.cpp):
//  * Cross-Layer Equalization: the equalized FLOAT model computes the same function as the
//    original in ONNX Runtime 1.30 (and in our runtime), on Conv/Relu/Conv, Conv/depthwise/Conv,
//    Gemm/Relu/Gemm, Conv/ReduceMean/Gemm and Conv/Pad/LeakyRelu/Conv graphs; the new weights
//    equal hand-derived vectors: sqrt(r0*r1) for pairs, the bias-shrink rule, the cube-root rule
//    for triples; the stop rule of cle_steps -1; patterns CLE must leave alone are left alone.
//  * ReplaceClip6Relu: Clip(0, 6) becomes Relu with CLE only.
//  * Every quantized model with CLE runs in ORT and our runtime agrees with it.
//  * Bias correction: the int32 biases equal the numpy-derived vectors of
//    data/gen_bias_correction.py (an independent re-implementation of quark-spec §10.3 on a fixed
//    quantization that the test checks first), and the corrected model runs in ORT.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
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

/// A8W8 with a CLE entry (and extra CLEConfig parameters).
qo::qconfig cle_config(qo::option_value params = qo::option_value::object(),
                       const char* preset = "A8W8") {
  qo::qconfig cfg = qo::get_default_config(preset);
  cfg.algo_config.push_back({.name = qo::algo_name::cle, .params = std::move(params)});
  return cfg;
}

qo::option_value obj(std::initializer_list<std::pair<const char*, qo::option_value>> kv) {
  qo::option_value::object_type o;
  for (const auto& [k, v] : kv)
    o.push_back(qo::option_member{k, v});
  return qo::option_value(std::move(o));
}

std::vector<float> weights(const qo::model& m, const std::string& name) {
  const qo::tensor t = m.initializer(name);
  const auto d = t.data<float>();
  return {d.begin(), d.end()};
}

void check_values(const std::vector<float>& got, const std::vector<float>& want, double tol) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i);
    CHECK(std::fabs(static_cast<double>(got[i]) - static_cast<double>(want[i])) <=
          tol * std::max(1.0, std::fabs(static_cast<double>(want[i]))));
  }
}

/// Conv(1x1, 2 -> 3, no bias) -> Relu -> Conv(1x1, 3 -> 2). Head ranges per output channel
/// r0 = (4, 0.25, 1), tail ranges per input channel r1 = (1, 4, 9).
::onnx::ModelProto conv_relu_conv() {
  model_builder b(13);
  b.input("x", onnx_type::float32, {1, 2, 4, 4});
  b.initializer("w0", onnx_type::float32, {3, 2, 1, 1},
                std::vector<float>{4, -1, 0.25f, 0.125f, -1, 0.5f});
  b.initializer("w1", onnx_type::float32, {2, 3, 1, 1}, std::vector<float>{1, -4, 9, 0.5f, 2, -3});
  b.node("Conv", {"x", "w0"}, {"c0"});
  b.node("Relu", {"c0"}, {"r0"});
  b.node("Conv", {"r0", "w1"}, {"y"});
  b.output("y", onnx_type::float32, {1, 2, 4, 4});
  return b.build();
}

/// Conv(1x1, 1 -> 2, bias b) -> Relu -> Conv(1x1, 2 -> 1): head weights (1, 1), tail (8, 1) or
/// (16, 1).
::onnx::ModelProto biased_pair(std::vector<float> bias, std::vector<float> tail) {
  model_builder b(13);
  b.input("x", onnx_type::float32, {1, 1, 3, 3});
  b.initializer("w0", onnx_type::float32, {2, 1, 1, 1}, std::vector<float>{1, 1});
  b.initializer("b0", onnx_type::float32, {2}, std::move(bias));
  b.initializer("w1", onnx_type::float32, {1, 2, 1, 1}, std::move(tail));
  b.node("Conv", {"x", "w0", "b0"}, {"c0"});
  b.node("Relu", {"c0"}, {"r0"});
  b.node("Conv", {"r0", "w1"}, {"y"});
  b.output("y", onnx_type::float32, {1, 1, 3, 3});
  return b.build();
}

/// Conv(1x1, 1 -> 2) -> Relu -> depthwise Conv(3x3, 2 channels, pads 1) -> Relu ->
/// Conv(1x1, 2 -> 1). m0 = (8, 1), m1 = (1, 8), m2 = (1, 1).
::onnx::ModelProto dw_triple(bool biases) {
  model_builder b(13);
  b.input("x", onnx_type::float32, {1, 1, 5, 5});
  b.initializer("w0", onnx_type::float32, {2, 1, 1, 1}, std::vector<float>{8, -1});
  std::vector<float> wd(18, 0.0f);
  wd[4] = 1.0f;  // channel 0: centre tap 1, others smaller
  wd[0] = -0.5f;
  wd[9 + 4] = 8.0f;  // channel 1: centre tap 8
  wd[9 + 8] = 2.0f;
  b.initializer("wd", onnx_type::float32, {2, 1, 3, 3}, wd);
  b.initializer("wp", onnx_type::float32, {1, 2, 1, 1}, std::vector<float>{1, -1});
  if (biases) {
    b.initializer("b0", onnx_type::float32, {2}, std::vector<float>{0.5f, 0.25f});
    b.initializer("bd", onnx_type::float32, {2}, std::vector<float>{-0.25f, 1.0f});
  }
  b.node("Conv",
         biases ? std::vector<std::string>{"x", "w0", "b0"} : std::vector<std::string>{"x", "w0"},
         {"c0"}, {attr_int("group", 1)});
  b.node("Relu", {"c0"}, {"r0"});
  b.node("Conv",
         biases ? std::vector<std::string>{"r0", "wd", "bd"} : std::vector<std::string>{"r0", "wd"},
         {"c1"}, {attr_int("group", 2), attr_ints("pads", {1, 1, 1, 1})});
  b.node("Relu", {"c1"}, {"r1"});
  b.node("Conv", {"r1", "wp"}, {"y"});
  b.output("y", onnx_type::float32, {1, 1, 5, 5});
  return b.build();
}

std::vector<double> row_absmax(const std::vector<float>& w, std::size_t rows) {
  std::vector<double> r(rows, 0.0);
  const std::size_t per = w.size() / rows;
  for (std::size_t i = 0; i < w.size(); ++i)
    r[i / per] = std::max(r[i / per], std::fabs(static_cast<double>(w[i])));
  return r;
}

}  // namespace

TEST_CASE("CLE pair Conv/Relu/Conv: ranges meet at sqrt(r0*r1), same function") {
  const auto fm = conv_relu_conv();
  std::vector<std::string> notes;
  const qo::model eq = qo::equalize_model(to_model(fm), cle_config(), &notes);
  // s = sqrt(r1 / r0) = (0.5, 4, 3): head rows times s, tail columns divided by s.
  check_values(weights(eq, "w0"), {2, -0.5f, 1, 0.5f, -3, 1.5f}, 1e-6);
  check_values(weights(eq, "w1"), {2, -1, 3, 1, 0.5f, -1}, 1e-6);
  REQUIRE(!notes.empty());
  CHECK(notes.back() == "cle: 1 pairs, 0 triples, 1 steps");
  check_same_function(fm, to_proto(eq), {1, 2, 4, 4});

  SUBCASE("cle_steps -1 iterates until nothing changes: the second pass has s = 1") {
    std::vector<std::string> n2;
    const qo::model e2 =
        qo::equalize_model(to_model(fm), cle_config(obj({{"cle_steps", -1}})), &n2);
    CHECK(n2.back() == "cle: 1 pairs, 0 triples, 2 steps");
    check_values(weights(e2, "w0"), weights(eq, "w0"), 1e-6);
  }
  SUBCASE("cle_steps 0 changes nothing; cle_weight_threshold above r0 + r1 keeps s = 1") {
    const qo::model e0 = qo::equalize_model(to_model(fm), cle_config(obj({{"cle_steps", 0}})));
    check_values(weights(e0, "w0"), {4, -1, 0.25f, 0.125f, -1, 0.5f}, 0.0);
    // r0 + r1 = (5, 4.25, 10): a threshold of 6 leaves channels 0 and 1 alone.
    const qo::model et =
        qo::equalize_model(to_model(fm), cle_config(obj({{"cle_weight_threshold", 6.0}})));
    check_values(weights(et, "w0"), {4, -1, 0.25f, 0.125f, -3, 1.5f}, 1e-6);
    check_values(weights(et, "w1"), {1, -4, 3, 0.5f, 2, -1}, 1e-6);
  }
  SUBCASE("without a cle entry, or with the nodes excluded, the weights stay") {
    const qo::model e = qo::equalize_model(to_model(fm), qo::get_default_config("A8W8"));
    check_values(weights(e, "w0"), {4, -1, 0.25f, 0.125f, -1, 0.5f}, 0.0);
    qo::qconfig cfg = cle_config();
    cfg.exclude.push_back(qo::node_selector::parse("n2"));
    const qo::model ex = qo::equalize_model(to_model(fm), cfg);
    check_values(weights(ex, "w1"), {1, -4, 9, 0.5f, 2, -3}, 0.0);
  }
}

TEST_CASE("CLE bias column: the shrink rule of cle_scale_append_bias") {
  // Head weights (1, 1), bias (4, 0): factor |b|/|w| = (4, 0), median 2, max|b| 4 < 10 and
  // 4 / 1 < 20 -> shrink 2: r0 = (max(1, 4/2), 1) = (2, 1); tail r1 = (8, 1) -> s = (2, 1).
  const auto small = biased_pair({4, 0}, {8, 1});
  const qo::model e1 = qo::equalize_model(to_model(small), cle_config());
  check_values(weights(e1, "w0"), {2, 1}, 1e-6);
  check_values(weights(e1, "b0"), {8, 0}, 1e-6);
  check_values(weights(e1, "w1"), {4, 1}, 1e-6);
  check_same_function(small, to_proto(e1), {1, 1, 3, 3});
  // Bias (40, 0): max|b| >= 10, median 20 > 15 -> shrink 10: r0 = (4, 1); tail (16, 1) ->
  // s = (2, 1).
  const auto big = biased_pair({40, 0}, {16, 1});
  const qo::model e2 = qo::equalize_model(to_model(big), cle_config());
  check_values(weights(e2, "w0"), {2, 1}, 1e-6);
  check_values(weights(e2, "b0"), {80, 0}, 1e-5);
  check_values(weights(e2, "w1"), {8, 1}, 1e-6);
  check_same_function(big, to_proto(e2), {1, 1, 3, 3});
  // cle_scale_append_bias false: r0 = (1, 1), s = (sqrt(16), 1) = (4, 1).
  const qo::model e3 =
      qo::equalize_model(to_model(big), cle_config(obj({{"cle_scale_append_bias", false}})));
  check_values(weights(e3, "w0"), {4, 1}, 1e-6);
  check_values(weights(e3, "w1"), {4, 1}, 1e-6);
}

TEST_CASE("CLE triple Conv -> depthwise Conv -> Conv: the cube-root rule") {
  // One pass applies, in order: the pair (c0, dw) with s = sqrt(r1/r0) = (sqrt(1/8), sqrt(8)),
  // leaving m0 = m1 = (sqrt 8, sqrt 8); the triple with g = cbrt(m0 m1 m2) = cbrt(8) = 2,
  // s12 = m0/g = sqrt 2, s23 = g/m2 = 2, leaving every range at 2; the pair (dw, pw) then has
  // r0 = r1 = 2 and s = 1.
  const auto fm = dw_triple(false);
  std::vector<std::string> notes;
  const qo::model eq = qo::equalize_model(to_model(fm), cle_config(), &notes);
  CHECK(notes.back() == "cle: 2 pairs, 1 triples, 1 steps");
  check_values(weights(eq, "w0"), {2, -2}, 1e-6);
  std::vector<float> wd(18, 0.0f);
  wd[4] = 2.0f;
  wd[0] = -1.0f;
  wd[9 + 4] = 2.0f;
  wd[9 + 8] = 0.5f;
  check_values(weights(eq, "wd"), wd, 1e-6);
  check_values(weights(eq, "wp"), {2, -2}, 1e-6);
  check_same_function(fm, to_proto(eq), {1, 1, 5, 5});
  // With biases: the function is still the same.
  const auto fb = dw_triple(true);
  check_same_function(fb, to_proto(qo::equalize_model(to_model(fb), cle_config())), {1, 1, 5, 5});
}

TEST_CASE("CLE through Gemm, ReduceMean, Pad and LeakyRelu keeps the function") {
  SUBCASE("Gemm(transB 1, bias) -> Relu -> Gemm(transB 0, bias)") {
    model_builder b(13);
    b.input("x", onnx_type::float32, {3, 6});
    std::vector<float> w0 = random_floats(8 * 6, 1);
    for (std::size_t i = 0; i < 6; ++i)
      w0[2 * 6 + i] *= 20.0f;  // output channel 2 of the head is 20x larger
    b.initializer("w0", onnx_type::float32, {8, 6}, w0);
    b.initializer("b0", onnx_type::float32, {8}, random_floats(8, 2, -0.1f, 0.1f));
    b.initializer("w1", onnx_type::float32, {8, 5}, random_floats(8 * 5, 3));
    b.initializer("b1", onnx_type::float32, {5}, random_floats(5, 4));
    b.node("Gemm", {"x", "w0", "b0"}, {"g0"}, {attr_int("transB", 1)});
    b.node("Relu", {"g0"}, {"r0"});
    b.node("Gemm", {"r0", "w1", "b1"}, {"y"}, {attr_int("transB", 0)});
    b.output("y", onnx_type::float32, {3, 5});
    const auto fm = b.build();
    const qo::model eq =
        qo::equalize_model(to_model(fm), cle_config(obj({{"cle_scale_append_bias", false}})));
    check_same_function(fm, to_proto(eq), {3, 6});
    // Per channel, the head row range and the tail row range both become sqrt(r0 * r1).
    const auto r0 = row_absmax(w0, 8);
    const auto r1 = row_absmax(random_floats(8 * 5, 3), 8);
    const auto h = row_absmax(weights(eq, "w0"), 8);
    const auto t = row_absmax(weights(eq, "w1"), 8);
    for (std::size_t c = 0; c < 8; ++c) {
      CAPTURE(c);
      CHECK(h[c] == doctest::Approx(std::sqrt(r0[c] * r1[c])).epsilon(1e-6));
      CHECK(t[c] == doctest::Approx(std::sqrt(r0[c] * r1[c])).epsilon(1e-6));
    }
  }
  SUBCASE("Conv -> ReduceMean(axes 2, 3, keepdims 0) -> Gemm; Conv -> Pad -> LeakyRelu -> Conv") {
    model_builder b(13);
    b.input("x", onnx_type::float32, {1, 3, 4, 4});
    std::vector<float> w0 = random_floats(4 * 3 * 9, 5);
    for (std::size_t i = 0; i < 27; ++i)
      w0[27 + i] *= 10.0f;
    b.initializer("w0", onnx_type::float32, {4, 3, 3, 3}, w0);
    b.initializer("b0", onnx_type::float32, {4}, random_floats(4, 6));
    b.initializer("wg", onnx_type::float32, {5, 4}, random_floats(20, 7));
    b.initializer("pads", onnx_type::int64, {8}, std::vector<std::int64_t>{0, 0, 1, 1, 0, 0, 1, 1});
    std::vector<float> w2 = random_floats(4 * 3 * 9, 8);
    for (std::size_t i = 0; i < 27; ++i)
      w2[i] *= 0.05f;
    b.initializer("w2", onnx_type::float32, {4, 3, 3, 3}, w2);
    b.initializer("w3", onnx_type::float32, {2, 4, 3, 3}, random_floats(72, 9));
    b.node("Conv", {"x", "w0", "b0"}, {"c0"}, {attr_ints("pads", {1, 1, 1, 1})});
    b.node("ReduceMean", {"c0"}, {"m0"}, {attr_ints("axes", {2, 3}), attr_int("keepdims", 0)});
    b.node("Gemm", {"m0", "wg"}, {"y"}, {attr_int("transB", 1)});
    b.node("Conv", {"x", "w2"}, {"c2"});
    b.node("Pad", {"c2", "pads"}, {"p2"});
    b.node("LeakyRelu", {"p2"}, {"l2"}, {attr_float("alpha", 0.1f)});
    b.node("Conv", {"l2", "w3"}, {"z"});
    b.output("y", onnx_type::float32, {1, 5});
    b.output("z", onnx_type::float32, {1, 2, 2, 2});
    const auto fm = b.build();
    std::vector<std::string> notes;
    const qo::model eq = qo::equalize_model(to_model(fm), cle_config(), &notes);
    CHECK(notes.back() == "cle: 2 pairs, 0 triples, 1 steps");
    CHECK(weights(eq, "w0") != w0);
    CHECK(weights(eq, "w2") != w2);
    check_same_function(fm, to_proto(eq), {1, 3, 4, 4});
  }
}

TEST_CASE("CLE leaves alone what it cannot rescale exactly") {
  // ReduceMean over the channel axis; a head whose output is also a graph output; a tail whose
  // weight another node shares (counted as skipped); Clip (not positively homogeneous) between
  // the two.
  model_builder b(13);
  b.input("x", onnx_type::float32, {1, 2, 3, 3});
  const std::vector<float> big{8, 1, 1, 0.5f}, small{0.1f, 4, 1, 1};
  for (const char* w : {"wa", "wc", "we", "wg"})
    b.initializer(w, onnx_type::float32, {2, 2, 1, 1}, big);
  for (const char* w : {"wd", "wf", "wh"})
    b.initializer(w, onnx_type::float32, {2, 2, 1, 1}, small);
  b.initializer("wb", onnx_type::float32, {2, 1, 1, 1}, std::vector<float>{0.1f, 4});
  b.initializer("lo", onnx_type::float32, {}, std::vector<float>{0});
  b.initializer("hi", onnx_type::float32, {}, std::vector<float>{5});
  b.node("Conv", {"x", "wa"}, {"ca"});
  b.node("ReduceMean", {"ca"}, {"ma"}, {attr_ints("axes", {1})});
  b.node("Conv", {"ma", "wb"}, {"ya"});
  b.node("Conv", {"x", "wc"}, {"cc"});  // cc is a graph output too
  b.node("Relu", {"cc"}, {"rc"});
  b.node("Conv", {"rc", "wd"}, {"yc"});
  b.node("Conv", {"x", "we"}, {"ce"});
  b.node("Relu", {"ce"}, {"re"});
  b.node("Conv", {"re", "wf"}, {"ye"});
  b.node("Conv", {"x", "wf"}, {"yf"});  // shares wf
  b.node("Conv", {"x", "wg"}, {"cg"});
  b.node("Clip", {"cg", "lo", "hi"}, {"kg"});
  b.node("Conv", {"kg", "wh"}, {"yg"});
  for (const char* y : {"ya", "cc", "yc", "ye", "yf", "yg"})
    b.output(y, onnx_type::float32, {});
  const auto fm = b.build();
  std::vector<std::string> notes;
  const qo::model eq = qo::equalize_model(to_model(fm), cle_config(), &notes);
  CHECK(notes.back() == "cle: 0 pairs, 0 triples, 0 steps, 1 patterns skipped");
  for (const char* w : {"wa", "wb", "wc", "wd", "we", "wf", "wg", "wh"})
    CHECK(weights(eq, w) == weights(to_model(fm), w));
}

TEST_CASE("ReplaceClip6Relu: Clip(0, 6) becomes Relu before CLE, only with CLE") {
  model_builder b(13);
  b.input("x", onnx_type::float32, {1, 2, 3, 3});
  b.initializer("w0", onnx_type::float32, {2, 2, 1, 1}, std::vector<float>{8, 1, 1, 0.5f});
  b.initializer("w1", onnx_type::float32, {2, 2, 1, 1}, std::vector<float>{0.1f, 4, 1, 1});
  b.initializer("lo", onnx_type::float32, {}, std::vector<float>{0});
  b.initializer("hi", onnx_type::float32, {}, std::vector<float>{6});
  b.initializer("hi5", onnx_type::float32, {}, std::vector<float>{5});
  b.node("Conv", {"x", "w0"}, {"c0"});
  b.node("Clip", {"c0", "lo", "hi"}, {"k0"});
  b.node("Conv", {"k0", "w1"}, {"y"});
  b.node("Clip", {"x", "lo", "hi5"}, {"z"});
  b.output("y", onnx_type::float32, {1, 2, 3, 3});
  b.output("z", onnx_type::float32, {1, 2, 3, 3});
  const auto fm = b.build();
  auto op_types = [](const qo::model& m) {
    std::vector<std::string> ops;
    for (const auto& n : m.nodes())
      ops.push_back(n.op_type);
    return ops;
  };
  qo::qconfig cfg = cle_config();
  cfg.extra_options.set("ReplaceClip6Relu", true);
  std::vector<std::string> notes;
  const qo::model eq = qo::equalize_model(to_model(fm), cfg, &notes);
  CHECK(op_types(eq) == std::vector<std::string>{"Conv", "Relu", "Conv", "Clip"});
  CHECK(!eq.has_initializer("hi"));
  CHECK(notes.back() == "cle: 1 pairs, 0 triples, 1 steps");
  // Without CLE the option does nothing (seed 000: only available when CLE is enabled).
  qo::qconfig no_cle = qo::get_default_config("A8W8");
  no_cle.extra_options.set("ReplaceClip6Relu", true);
  CHECK(op_types(qo::equalize_model(to_model(fm), no_cle)) ==
        std::vector<std::string>{"Conv", "Clip", "Conv", "Clip"});
  // Without ReplaceClip6Relu, the Clip blocks the pair.
  std::vector<std::string> n2;
  qo::equalize_model(to_model(fm), cle_config(), &n2);
  CHECK(n2.back() == "cle: 0 pairs, 0 triples, 0 steps");
}

TEST_CASE("legacy extra options CLE* tune the cle entry, without one they are a conflict") {
  const auto fm = conv_relu_conv();
  qo::qconfig cfg = cle_config();
  cfg.extra_options.set("CLEWeightThreshold", 6.0);
  check_values(weights(qo::equalize_model(to_model(fm), cfg), "w0"),
               {4, -1, 0.25f, 0.125f, -3, 1.5f}, 1e-6);
  cfg.extra_options.set("CLESteps", -1);
  std::vector<std::string> notes;
  qo::equalize_model(to_model(fm), cfg, &notes);
  CHECK(notes.back() == "cle: 1 pairs, 0 triples, 2 steps");
  // A parameter of the entry wins over its legacy option.
  qo::qconfig both = cle_config(obj({{"cle_weight_threshold", 0.5}}));
  both.extra_options.set("CLEWeightThreshold", 6.0);
  check_values(weights(qo::equalize_model(to_model(fm), both), "w0"), {2, -0.5f, 1, 0.5f, -3, 1.5f},
               1e-6);
  qo::qconfig no_cle = qo::get_default_config("A8W8");
  no_cle.extra_options.set("CLESteps", 2);
  CHECK(error_id([&] { qo::equalize_model(to_model(fm), no_cle); }) == "quark.config.conflict");
}

TEST_CASE("algo_config: quarot without its pairs file, bad CLE parameters named") {
  const auto fm = conv_relu_conv();
  qo::qconfig rot = qo::get_default_config("A8W8");
  rot.algo_config.push_back({.name = qo::algo_name::quarot});
  CHECK(error_text([&] {
          qo::equalize_model(to_model(fm), rot);
        }).find("quark.config.value: algo_config quarot: r_config_path is required") == 0);
  CHECK(error_id([&] {
          qo::equalize_model(to_model(fm), cle_config(obj({{"cle_balance_method", "min"}})));
        }) == "quark.config.value");
  CHECK(error_id([&] {
          qo::equalize_model(to_model(fm), cle_config(obj({{"cle_steps", -2}})));
        }) == "quark.config.value");
}

TEST_CASE("quantized models with CLE run in ORT and our runtime agrees") {
  if (!ort_available()) {
    MESSAGE("skipped: " << ort_unavailable_reason());
    return;
  }
  const auto fm = dw_triple(true);
  const fs::path dir = work_dir();
  save_proto(fm, dir / "triple.onnx");
  for (const char* preset : {"A8W8", "XINT8", "A16W8"}) {
    CAPTURE(std::string(preset));
    std::vector<qo::calib_sample> calib;
    for (std::uint32_t i = 0; i < 4; ++i) {
      calib.push_back(
          {{"x", qo::tensor::from_floats({1, 1, 5, 5}, random_floats(25, 200 + i, -2.0f, 2.0f))}});
    }
    qo::memory_reader reader(calib);
    const fs::path out = dir / (std::string("triple_") + preset + ".onnx");
    const auto r = qo::quantize_model(dir / "triple.onnx", out,
                                      cle_config(qo::option_value::object(), preset), reader);
    CHECK(std::find(r.notes.begin(), r.notes.end(), "cle: 2 pairs, 1 triples, 1 steps") !=
          r.notes.end());
    const std::vector<float> x = random_floats(25, 999, -2.0f, 2.0f);
    const auto ort = run_ort(load_proto(out), {npy_array::from(x, {1, 1, 5, 5})});
    const auto ours = qo::run_model(out, {{"x", qo::tensor::from_floats({1, 1, 5, 5}, x)}});
    const auto a = ort.begin()->second.values<float>();
    const auto o = ours.begin()->second.data<float>();
    REQUIRE(a.size() == o.size());
    const std::vector<float> ov(o.begin(), o.end());
    CHECK(quark::metrics::cosine(a, ov) >= 0.99999);
  }
}

namespace {

/// The int32 bias each Conv of `m` reads through a DequantizeLinear, by the float bias name
/// (the Conv's node name + "_b" in the fixture).
std::map<std::string, std::vector<std::int64_t>> int_biases(const ::onnx::ModelProto& m) {
  std::map<std::string, const ::onnx::NodeProto*> producer;
  for (const auto& n : m.graph().node())
    producer[n.output(0)] = &n;
  std::map<std::string, std::vector<std::int64_t>> out;
  for (const auto& n : m.graph().node()) {
    if (n.op_type() != "Conv" || n.input_size() < 3)
      continue;
    const auto* dq = producer.count(n.input(2)) ? producer.at(n.input(2)) : nullptr;
    REQUIRE(dq != nullptr);
    REQUIRE(dq->op_type() == "DequantizeLinear");
    for (const auto& t : m.graph().initializer()) {
      if (t.name() != dq->input(0))
        continue;
      REQUIRE(t.data_type() == onnx_type::int32);
      std::vector<std::int32_t> v(static_cast<std::size_t>(t.dims(0)));
      REQUIRE(t.raw_data().size() == v.size() * 4);
      std::memcpy(v.data(), t.raw_data().data(), t.raw_data().size());
      out[n.name() + "_b"] = std::vector<std::int64_t>(v.begin(), v.end());
    }
  }
  return out;
}

}  // namespace

TEST_CASE("bias correction matches the numpy-derived vectors (data/gen_bias_correction.py)") {
  const fs::path data =
      quark::test::detail::source_dir() / "tests/onnx_frontend/data/bias_correction";
  // expected.txt: "<bias> <values...>   # before <values...>, k <k>"
  std::map<std::string, std::vector<std::int64_t>> want, before;
  {
    std::ifstream f(data / "expected.txt");
    std::string line;
    while (std::getline(f, line)) {
      std::istringstream is(line.substr(0, line.find('#')));
      std::string name;
      is >> name;
      for (std::int64_t v; is >> v;)
        want[name].push_back(v);
      std::istringstream bs(line.substr(line.find("before") + 6));
      for (std::int64_t v; bs >> v;) {
        before[name].push_back(v);
        if (bs.peek() == ',')
          break;
      }
    }
  }
  REQUIRE(want.size() == 2);
  qo::qconfig cfg = qo::get_default_config("A8W8");
  cfg.global_config.input_tensors->calibration_method = qo::calib_method::min_max;
  cfg.extra_options.set("OpTypesToExcludeOutputQuantization", qo::option_value::array({"Conv"}));
  const fs::path dir = work_dir();
  auto quantize = [&](const qo::qconfig& c, const std::string& tag, qo::quantize_report& r) {
    qo::npy_folder_reader reader(data / "calib");
    r = qo::quantize_model(data / "model.onnx", dir / (tag + ".onnx"), c, reader);
    return load_proto(dir / (tag + ".onnx"));
  };
  // Without bias correction: the quantization the generator assumed.
  qo::quantize_report r0;
  const auto q0 = quantize(cfg, "bc_off", r0);
  for (const auto& t : r0.tensors) {
    if (t.name == "x")
      CHECK(t.scale.front() == 1.0f);
  }
  CHECK(int_biases(q0) == before);
  // With it: the generator's vectors, within one unit of float rounding. Quark's legacy option
  // BiasCorrection = True asks for the same thing.
  qo::qconfig legacy = cfg;
  legacy.extra_options.set("BiasCorrection", true);
  qo::quantize_report rl;
  const auto ql = quantize(legacy, "bc_legacy", rl);
  cfg.algo_config.push_back({.name = qo::algo_name::bias_correction});
  qo::quantize_report r1;
  const auto q1 = quantize(cfg, "bc_on", r1);
  CHECK(std::find(r1.notes.begin(), r1.notes.end(),
                  "bias_correction: 2 biases corrected on 4 samples") != r1.notes.end());
  const auto got = int_biases(q1);
  CHECK(int_biases(ql) == got);
  REQUIRE(got.size() == want.size());
  for (const auto& kv : want) {
    const std::string name = kv.first;
    const auto& w = kv.second;
    CAPTURE(name);
    const auto& g = got.at(name);
    REQUIRE(g.size() == w.size());
    for (std::size_t i = 0; i < w.size(); ++i) {
      CAPTURE(i);
      CHECK(std::llabs(g[i] - w[i]) <= 1);
    }
  }
  // The corrected model runs in ORT and our runtime agrees.
  if (ort_available()) {
    std::vector<float> x(100);
    for (std::size_t i = 0; i < x.size(); ++i)
      x[i] = static_cast<float>(60 + (i * 37) % 60) + 0.3f;
    const auto ort = run_ort(q1, {npy_array::from(x, {1, 4, 5, 5})});
    const auto ours =
        qo::run_model(dir / "bc_on.onnx", {{"x", qo::tensor::from_floats({1, 4, 5, 5}, x)}});
    for (const auto& kv : ort) {
      const std::string name = kv.first;
      CAPTURE(name);
      const auto a = kv.second.values<float>();
      const auto o = ours.at(name).data<float>();
      REQUIRE(a.size() == o.size());
      for (std::size_t i = 0; i < a.size(); ++i)
        CHECK(std::fabs(a[i] - o[i]) <= 1e-3f * std::max(1.0f, std::fabs(a[i])));
    }
  }
}
