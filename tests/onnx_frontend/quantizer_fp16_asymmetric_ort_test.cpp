// SPDX-License-Identifier: MIT
// Asymmetric scaled BFloat16 / Float16 (quark-spec §1.5: `symmetric: false` with
// ActivationScaled / WeightScaled): scale = (rmax - rmin) / (qmax - qmin) over +-2 (bfloat16) or
// +-65504 (float16), zero point RNE(qmin - rmin / scale) held in the type. Quark carries it in
// its custom QuantizeLinear (T(x / s + zp)) and DequantizeLinear ((float(y) - zp) * s); quark-cpp
// writes the standard form Div -> Add -> Cast -> Cast -> Sub -> Mul that ONNX Runtime runs.
// Oracles: the scales and zero points derived here in double from the data (the float16
// rounding of the zero point by hand: 11 significant bits), ONNX Runtime 1.30's own Div / Add /
// Cast for the stored weight codes, and ORT running every quantized model against the float one.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include <quark/dtype/formats.hpp>
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

constexpr int f32 = onnx_type::float32;
constexpr std::size_t k_in = 16, k_out = 6;

/// Skewed weights: min about -0.3, max about 1, so the asymmetric zero point is not 0.
const std::vector<float>& weight() {
  static const std::vector<float> w = random_floats(k_in * k_out, 31, -0.3f, 1.0f);
  return w;
}

/// MatMul(x[2, 16], w[16, 6]) -> Relu -> y, opset 13.
::onnx::ModelProto matmul_model() {
  model_builder b(13);
  b.input("x", f32, {2, k_in});
  b.initializer("w", f32, {k_in, k_out}, weight());
  b.node("MatMul", {"x", "w"}, {"m"});
  b.node("Relu", {"m"}, {"y"});
  b.output("y", f32, {2, k_out});
  return b.build();
}

/// Non-negative inputs in [0, 2): the calibrated rmin is 0 (ranges always include 0).
std::vector<float> input(std::uint32_t seed) {
  return random_floats(2 * k_in, seed, 0.0f, 2.0f);
}

/// Round-half-even of a double.
double rne(double v) {
  const double f = std::floor(v);
  const double d = v - f;
  if (d != 0.5)
    return std::floor(v + 0.5);
  return std::fmod(f, 2.0) == 0.0 ? f : f + 1.0;
}

/// An integer `z` rounded to float16 by hand: 11 significant bits, ties to even.
double to_half(double z) {
  const double a = std::fabs(z);
  if (a < 2048.0)
    return z;
  const double step = std::ldexp(1.0, static_cast<int>(std::floor(std::log2(a))) - 10);
  return std::copysign(rne(a / step) * step, z);
}

struct expected_params {
  double scale = 0.0;
  double zero_point = 0.0;
};

/// quark-spec §1.5 in double: scale over the reduced (bfloat16) or full (float16) range, zero
/// point RNE(qmin - rmin / scale) held in the type.
expected_params expected(double lo, double hi, bool bf16) {
  lo = std::min(lo, 0.0);
  hi = std::max(hi, 0.0);
  const double qmax = bf16 ? 2.0 : 65504.0;
  expected_params p;
  p.scale = (hi - lo) / (2.0 * qmax);
  p.zero_point = rne(-qmax - lo / p.scale);
  if (!bf16)
    p.zero_point = to_half(p.zero_point);
  return p;
}

qo::qconfig config(bool bf16, bool pair_on_weight) {
  qo::qconfig cfg = qo::get_default_config(bf16 ? "BF16" : "FP16");
  for (auto* s : {&cfg.global_config.input_tensors, &cfg.global_config.weight}) {
    REQUIRE(s->has_value());
    (*s)->symmetric = false;
  }
  cfg.extra_options.set("ActivationScaled", true);
  cfg.extra_options.set("WeightScaled", true);
  cfg.extra_options.set("AddQDQPairToWeight", pair_on_weight);
  return cfg;
}

::onnx::ModelProto quantize(const qo::qconfig& cfg, const std::string& tag) {
  const fs::path dir = work_dir();
  save_proto(matmul_model(), dir / (tag + ".onnx"));
  std::vector<qo::calib_sample> calib;
  for (std::uint32_t s = 0; s < 3; ++s)
    calib.push_back({{"x", qo::tensor::from_floats({2, k_in}, input(40 + s))}});
  qo::memory_reader reader(calib);
  qo::quantize_model(dir / (tag + ".onnx"), dir / (tag + "_q.onnx"), cfg, reader);
  return load_proto(dir / (tag + "_q.onnx"));
}

/// The op types along the chain that ends in `value`, from the first node.
std::vector<std::string> chain_to(const ::onnx::ModelProto& m, std::string value) {
  std::vector<std::string> ops;
  for (;;) {
    const auto& nodes = m.graph().node();
    const auto it = std::find_if(nodes.begin(), nodes.end(), [&](const auto& n) {
      return n.output_size() > 0 && n.output(0) == value;
    });
    if (it == nodes.end())
      break;
    ops.insert(ops.begin(), it->op_type());
    value = it->input(0);
  }
  return ops;
}

float scalar(const ::onnx::ModelProto& m, const std::string& name) {
  const auto* t = find_init(m, name);
  REQUIRE_MESSAGE(t != nullptr, name);
  const auto v = floats_of(*t);
  REQUIRE(v.size() == 1);
  return v[0];
}

/// The 16-bit codes of a bfloat16 / float16 initializer decoded to float.
std::vector<float> half_values(const ::onnx::TensorProto& t, bool bf16) {
  std::vector<std::uint16_t> bits;
  if (!t.raw_data().empty()) {
    bits.resize(t.raw_data().size() / 2);
    std::memcpy(bits.data(), t.raw_data().data(), bits.size() * 2);
  } else {
    for (const auto v : t.int32_data())
      bits.push_back(static_cast<std::uint16_t>(v));
  }
  std::vector<float> out;
  for (const auto b : bits) {
    out.push_back(bf16 ? std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16)
                       : static_cast<float>(quark::float16::from_bits(b)));
  }
  return out;
}

}  // namespace

TEST_CASE("Asymmetric scaled BFloat16 / Float16: the zero point around the Cast pair") {
  for (const bool bf16 : {true, false}) {
    for (const bool pair_on_weight : {true, false}) {
      const std::string tag =
          std::string(bf16 ? "bf16" : "fp16") + "_asym" + (pair_on_weight ? "_pair" : "_stored");
      CAPTURE(tag);
      const auto qm = quantize(config(bf16, pair_on_weight), tag);
      // The input x: data in [0, 2), rmin 0 -> zero point qmin itself.
      CHECK(scalar(qm, "x_zero_point") == (bf16 ? -2.0f : -65504.0f));
      CHECK(chain_to(qm, "x_DequantizeLinear_Output") ==
            std::vector<std::string>{"Div", "Add", "Cast", "Cast", "Sub", "Mul"});
      // The weight, from its own min / max.
      const auto& w = weight();
      const auto [lo, hi] = std::minmax_element(w.begin(), w.end());
      const expected_params e = expected(static_cast<double>(*lo), static_cast<double>(*hi), bf16);
      CHECK(e.zero_point != 0.0);
      CHECK(static_cast<double>(scalar(qm, "w_scale")) == doctest::Approx(e.scale).epsilon(1e-7));
      CHECK(static_cast<double>(scalar(qm, "w_zero_point")) == e.zero_point);
      if (pair_on_weight) {
        CHECK(chain_to(qm, "w_DequantizeLinear_Output") ==
              std::vector<std::string>{"Div", "Add", "Cast", "Cast", "Sub", "Mul"});
      } else {
        CHECK(chain_to(qm, "w_DequantizeLinear_Output") ==
              std::vector<std::string>{"Cast", "Sub", "Mul"});
      }
      if (!ort_available()) {
        MESSAGE("skipped ORT checks: " << ort_unavailable_reason());
        continue;
      }
      if (!pair_on_weight) {
        // The stored codes are ORT's T(w / s + zp) with the model's s and zp, and decode to
        // within half a step of T (relative 2^-8 / 2^-11 of the shifted value) of w.
        model_builder c(13);
        c.input("w", f32, {k_in, k_out});
        c.initializer("s", f32, {}, std::vector<float>{scalar(qm, "w_scale")});
        c.initializer("z", f32, {}, std::vector<float>{scalar(qm, "w_zero_point")});
        c.node("Div", {"w", "s"}, {"d"});
        c.node("Add", {"d", "z"}, {"a"});
        c.node("Cast", {"a"}, {"h"},
               {attr_int("to", bf16 ? onnx_type::bfloat16 : onnx_type::float16)});
        c.node("Cast", {"h"}, {"r"}, {attr_int("to", f32)});
        c.output("r", f32, {k_in, k_out});
        const auto oracle =
            run_ort(c.build(), {npy_array::from(w, {k_in, k_out})}).at("r").values<float>();
        const auto* stored = find_init(qm, "w_quantized");
        REQUIRE(stored != nullptr);
        const auto codes = half_values(*stored, bf16);
        CHECK(codes == oracle);
        const float s = scalar(qm, "w_scale");
        const float z = scalar(qm, "w_zero_point");
        const double rel = bf16 ? 0x1p-8 : 0x1p-11;
        for (std::size_t i = 0; i < w.size(); ++i) {
          const double sd = static_cast<double>(s);
          const double back = (static_cast<double>(codes[i]) - static_cast<double>(z)) * sd;
          CHECK(std::fabs(back - static_cast<double>(w[i])) <=
                rel * std::fabs(static_cast<double>(codes[i])) * sd + 1e-12);
        }
      }
      // ORT runs the model; its output is the float model's, and our runtime agrees.
      const auto x = input(99);
      const auto theirs = run_ort(qm, {npy_array::from(x, {2, k_in})}).at("y").values<float>();
      const auto ref =
          run_ort(matmul_model(), {npy_array::from(x, {2, k_in})}).at("y").values<float>();
      const fs::path p = work_dir() / (tag + "_run.onnx");
      save_proto(qm, p);
      const auto ours = qo::run_model(p, {{"x", qo::tensor::from_floats({2, k_in}, x)}});
      const auto o = ours.at("y").data<float>();
      REQUIRE(o.size() == theirs.size());
      for (std::size_t i = 0; i < o.size(); ++i)
        CHECK(o[i] == theirs[i]);
      const double cos = quark::metrics::cosine(theirs, ref);
      MESSAGE(tag << ": cosine vs float " << cos);
      CHECK(cos >= 0.9999);
    }
  }
}

TEST_CASE("Asymmetric scaled BFloat16 with BF16WithClip and BF16QDQToCast: still clipped") {
  // Quark's clip pass finds the custom QuantizeLinear nodes BF16QDQToCast left: the asymmetric
  // ones. The input x (zero point -2) is clipped; with symmetric specs nothing is.
  qo::qconfig cfg = config(true, true);
  cfg.extra_options.set("BF16WithClip", true);
  cfg.extra_options.set("BF16QDQToCast", true);
  const auto qm = quantize(cfg, "bf16_asym_clip");
  CHECK(chain_to(qm, "x_DequantizeLinear_Output") ==
        std::vector<std::string>{"Clip", "Div", "Add", "Cast", "Cast", "Sub", "Mul"});
  for (auto* s : {&cfg.global_config.input_tensors, &cfg.global_config.weight})
    (*s)->symmetric = true;
  const auto sym = quantize(cfg, "bf16_sym_clip");
  CHECK(chain_to(sym, "x_DequantizeLinear_Output") ==
        std::vector<std::string>{"Mul", "Cast", "Cast", "Mul"});
}

TEST_CASE("Asymmetric scaled BFloat16: BF16QDQToCast and EnableVaimlBF16 keep the zero point") {
  // Quark's BF16QDQToCast rewrites only pairs with a zero zero point, and EnableVaimlBF16's cast
  // removal follows it: the asymmetric pairs stay quantize-dequantize (Div, Add, Sub).
  for (const char* key : {"BF16QDQToCast", "EnableVaimlBF16"}) {
    CAPTURE(std::string(key));
    qo::qconfig cfg = config(true, true);
    cfg.extra_options.set(key, true);
    const auto qm = quantize(cfg, std::string("bf16_asym_") + key);
    CHECK(chain_to(qm, "x_DequantizeLinear_Output") ==
          std::vector<std::string>{"Div", "Add", "Cast", "Cast", "Sub", "Mul"});
    CHECK(chain_to(qm, "w_DequantizeLinear_Output") ==
          std::vector<std::string>{"Div", "Add", "Cast", "Cast", "Sub", "Mul"});
    if (ort_available()) {
      const auto x = input(98);
      const auto theirs = run_ort(qm, {npy_array::from(x, {2, k_in})}).at("y").values<float>();
      const auto ref =
          run_ort(matmul_model(), {npy_array::from(x, {2, k_in})}).at("y").values<float>();
      CHECK(quark::metrics::cosine(theirs, ref) >= 0.9999);
    }
  }
}
