// SPDX-License-Identifier: MIT
// Calibration stops observing, after the first sample, the tensors whose own range never reaches
// the written model (quantize.cpp unneeded_ranges, docs/quantizer.md step 3): the input of a
// quantized Clip / Relu it alone reads (it takes the output's range, quark-spec §3.5) and the
// outputs of quantized data-movement ops (they take their input's parameters). The oracle is
// the quantizer observing every requested tensor (QUARK_CALIB_OBSERVE_ALL=1): the written bytes
// must be identical for every preset, and the report note must name the hand-counted tensors
// left out.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include <doctest/doctest.h>

// support/ort.hpp first: inside quark::test, "onnx::" must find ::onnx, not quark::onnx.
#include <quark/onnx/config.hpp>
#include <quark/onnx/presets.hpp>
#include <quark/onnx/quantizer.hpp>

#include "support/model_files.hpp"
#include "support/ort.hpp"

namespace fs = std::filesystem;
namespace qo = quark::onnx;
using namespace quark::test;

namespace {

/// Opset 13, x [1, 3, 8, 8]:
///   c1 = Conv(x)        r1 = Relu(c1)                       c1: Clip/Relu input (derived)
///   c2 = Conv(r1)       a2 = Add(c2, 3)   k2 = Clip(a2, 0, 6)  a2: derived
///   m2 = Mul(c2, k2)    d2 = Div(m2, 6)                     c2: two readers (own range)
///   p  = MaxPool(d2)                                        p: data-movement output (derived)
///   c3 = Conv(p)        k3 = Clip(c3, 0, 6)                 c3: derived
///   r3 = Relu(k3)                                           k3: a Clip output (chain, own range)
///   t  = Reshape(r3)                                        t: data-movement output (derived)
///   e  = Transpose(x)                                       e: input not produced by a node
::onnx::ModelProto derived_model() {
  model_builder b(13);
  b.input("x", onnx_type::float32, {1, 3, 8, 8});
  b.initializer("w1", onnx_type::float32, {4, 3, 3, 3}, random_floats(108, 1, -0.5f, 0.5f));
  b.initializer("b1", onnx_type::float32, {4}, random_floats(4, 2, -0.1f, 0.1f));
  b.initializer("w2", onnx_type::float32, {4, 4, 1, 1}, random_floats(16, 3, -0.8f, 0.8f));
  b.initializer("w3", onnx_type::float32, {4, 4, 1, 1}, random_floats(16, 4, -0.8f, 0.8f));
  b.initializer("three", onnx_type::float32, {}, std::vector<float>{3.0f});
  b.initializer("six", onnx_type::float32, {}, std::vector<float>{6.0f});
  b.initializer("lo", onnx_type::float32, {}, std::vector<float>{0.0f});
  b.initializer("shape", onnx_type::int64, {2}, std::vector<std::int64_t>{1, 64});
  b.node("Conv", {"x", "w1", "b1"}, {"c1"}, {attr_ints("pads", {1, 1, 1, 1})});
  b.node("Relu", {"c1"}, {"r1"});
  b.node("Conv", {"r1", "w2"}, {"c2"});
  b.node("Add", {"c2", "three"}, {"a2"});
  b.node("Clip", {"a2", "lo", "six"}, {"k2"});
  b.node("Mul", {"c2", "k2"}, {"m2"});
  b.node("Div", {"m2", "six"}, {"d2"});
  b.node("MaxPool", {"d2"}, {"p"},
         {attr_ints("kernel_shape", {2, 2}), attr_ints("strides", {2, 2})});
  b.node("Conv", {"p", "w3"}, {"c3"});
  b.node("Clip", {"c3", "lo", "six"}, {"k3"});
  b.node("Relu", {"k3"}, {"r3"});
  b.node("Reshape", {"r3", "shape"}, {"t"});
  b.node("Transpose", {"x"}, {"e"}, {attr_ints("perm", {0, 2, 3, 1})});
  b.output("t", onnx_type::float32, {1, 64});
  b.output("e", onnx_type::float32, {1, 8, 8, 3});
  return b.build();
}

/// Quantizes the model with `cfg` on 3 random samples (the ranges grow between them), observing
/// every requested tensor when `all`; returns the written bytes.
std::string quantize(const fs::path& in, const qo::qconfig& cfg, const std::string& tag, bool all,
                     qo::quantize_report& r) {
  if (all) {
    ::setenv("QUARK_CALIB_OBSERVE_ALL", "1", 1);
  } else {
    ::unsetenv("QUARK_CALIB_OBSERVE_ALL");
  }
  std::vector<qo::calib_sample> calib;
  for (std::uint32_t s = 0; s < 3; ++s) {
    const float w = 1.0f + static_cast<float>(s);
    calib.push_back(
        {{"x", qo::tensor::from_floats({1, 3, 8, 8}, random_floats(192, 60 + s, -w, w))}});
  }
  qo::memory_reader reader(calib);
  const fs::path out = in.parent_path() / (tag + (all ? "_all.onnx" : "_derived.onnx"));
  r = qo::quantize_model(in, out, cfg, reader);
  ::unsetenv("QUARK_CALIB_OBSERVE_ALL");
  return file_bytes(out);
}

bool has_note(const qo::quantize_report& r, const std::string& text) {
  for (const auto& n : r.notes) {
    if (n.find(text) != std::string::npos)
      return true;
  }
  return false;
}

}  // namespace

TEST_CASE("tensors with a derived range are not observed and the written model is unchanged") {
  const fs::path dir = work_dir();
  save_proto(derived_model(), dir / "derived.onnx");
  // Hand count: c1, a2 and c3 are Clip / Relu inputs with no other reader (k3 feeds a Relu but
  // is itself a Clip output whose own range c3 takes, c2 has two readers); p, t and e are the
  // outputs of a MaxPool, a Reshape and a Transpose whose inputs d2, r3 and x are quantized, so
  // they take those inputs' parameters (every preset: x is the first Conv's input; d2 is the
  // Div's output or, where Div stays float, the MaxPool's own quantized input).
  for (const std::string preset : {"A8W8", "XINT8", "VINT8", "A16W8", "S8S8", "U8S8"}) {
    CAPTURE(preset);
    const qo::qconfig cfg = qo::get_default_config(preset);
    qo::quantize_report all, derived;
    const std::string a = quantize(dir / "derived.onnx", cfg, preset, true, all);
    const std::string d = quantize(dir / "derived.onnx", cfg, preset, false, derived);
    CHECK(!a.empty());
    CHECK(a == d);
    CHECK(!has_note(all, "take their range from another"));
    CHECK(has_note(derived,
                   "8 tensors observed after the first sample; 6 take their range from "
                   "another (3 Clip / Relu inputs, 3 data-movement outputs)"));
    REQUIRE(all.tensors.size() == derived.tensors.size());
    for (std::size_t i = 0; i < all.tensors.size(); ++i) {
      CAPTURE(all.tensors[i].name);
      CHECK(all.tensors[i].name == derived.tensors[i].name);
      CHECK(all.tensors[i].rmin == derived.tensors[i].rmin);
      CHECK(all.tensors[i].rmax == derived.tensors[i].rmax);
      CHECK(all.tensors[i].scale == derived.tensors[i].scale);
    }
  }
}

TEST_CASE("a derived range is only assumed where it holds (excluded producer, passthrough)") {
  const fs::path dir = work_dir();
  save_proto(derived_model(), dir / "derived.onnx");
  SUBCASE("the MaxPool left float: p is observed (a Conv reads it with its own range)") {
    // Without ForceQuantizeNoInputCheck a MaxPool is quantized only when its input is; with the
    // Div (n6) excluded, d2 stays float, so the MaxPool does too (d2 is requested, as a planned
    // node's input, but left float) and p is the last Conv's input with its own range; c1, a2,
    // c3, t and e are still derived. Observed: x, r1, c2, k2, m2, p, k3, r3.
    qo::qconfig cfg = qo::get_default_config("XINT8");
    cfg.extra_options.set("ForceQuantizeNoInputCheck", qo::option_value(false));
    cfg.exclude.push_back(qo::node_selector::parse("n6"));  // the Div (nodes are n0, n1, ...)
    qo::quantize_report all, derived;
    const std::string a = quantize(dir / "derived.onnx", cfg, "excl", true, all);
    const std::string d = quantize(dir / "derived.onnx", cfg, "excl", false, derived);
    CHECK(a == d);
    CHECK(has_note(derived,
                   "8 tensors observed after the first sample; 5 take their range from "
                   "another (3 Clip / Relu inputs, 2 data-movement outputs); 1 left "
                   "float"));
  }
  SUBCASE("CalibPassthroughOpTypes copies ranges by producer: nothing is left out") {
    qo::qconfig cfg = qo::get_default_config("A8W8");
    cfg.extra_options.set("CalibPassthroughOpTypes", qo::option_value::array({"Relu"}));
    qo::quantize_report all, derived;
    const std::string a = quantize(dir / "derived.onnx", cfg, "pass", true, all);
    const std::string d = quantize(dir / "derived.onnx", cfg, "pass", false, derived);
    CHECK(a == d);
    CHECK(!has_note(derived, "take their range from another"));
  }
}

TEST_CASE("a Softmax output is not observed, and the Distribution method keeps every own range") {
  // x -> Conv -> c -> Relu -> r -> Softmax(axis 1) -> s. Under A8W8, c takes r's range (a Relu
  // input) and s is [0, 1]: only x and r are observed after the first sample. Under FP8 with the
  // Distribution method the scale comes from each tensor's own standard deviation, which no
  // rule replaces: nothing is left out.
  model_builder b(13);
  b.input("x", onnx_type::float32, {1, 3, 8, 8});
  b.initializer("w", onnx_type::float32, {5, 3, 1, 1}, random_floats(15, 7, -0.8f, 0.8f));
  b.node("Conv", {"x", "w"}, {"c"});
  b.node("Relu", {"c"}, {"r"});
  b.node("Softmax", {"r"}, {"s"}, {attr_int("axis", 1)});
  b.output("s", onnx_type::float32, {1, 5, 8, 8});
  const fs::path dir = work_dir();
  save_proto(b.build(), dir / "softmax.onnx");
  {
    const qo::qconfig cfg = qo::get_default_config("A8W8");
    qo::quantize_report all, derived;
    const std::string a = quantize(dir / "softmax.onnx", cfg, "sm", true, all);
    const std::string d = quantize(dir / "softmax.onnx", cfg, "sm", false, derived);
    CHECK(!a.empty());
    CHECK(a == d);
    CHECK(has_note(derived,
                   "2 tensors observed after the first sample; 2 take their range from "
                   "another (1 Clip / Relu inputs, 0 data-movement outputs, 1 Softmax "
                   "outputs)"));
  }
  {
    qo::qconfig cfg;
    qo::tensor_spec act = qo::make_spec(qo::spec_name::fp8_e4m3fn);
    act.calibration_method = qo::calib_method::distribution;
    cfg.global_config.input_tensors = act;
    cfg.global_config.weight = qo::make_spec(qo::spec_name::fp8_e4m3fn);
    qo::quantize_report all, derived;
    const std::string a = quantize(dir / "softmax.onnx", cfg, "dist", true, all);
    const std::string d = quantize(dir / "softmax.onnx", cfg, "dist", false, derived);
    CHECK(!a.empty());
    CHECK(a == d);
    CHECK(!has_note(derived, "tensors observed after the first sample"));
  }
}
