// SPDX-License-Identifier: MIT
// The bfloat16 options of seed 000's category 8 (docs/config.md §7.6): BF16WithClip,
// BF16QDQToCast and EnableVaimlBF16. Oracles: the bfloat16 range by hand (its largest finite
// value is 0x7F7F0000 = 3.3895313892515355e38; float32 3.4e38 lies above the midpoint to 2^128,
// so a Cast to bfloat16 makes it +inf), and ONNX Runtime 1.30's own Cast for the bfloat16
// rounding of the weights EnableVaimlBF16 stores as float32.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include <quark/onnx/config.hpp>
#include <quark/onnx/presets.hpp>
#include <quark/onnx/quantizer.hpp>

#include "support/checks.hpp"
#include "support/model_files.hpp"
#include "support/ort.hpp"

namespace fs = std::filesystem;
namespace qo = quark::onnx;
using namespace quark::test;

namespace {

constexpr int f32 = onnx_type::float32;
const float bf16_max = std::bit_cast<float>(0x7F7F0000U);

std::size_t count(const ::onnx::ModelProto& m, const char* op) {
  return static_cast<std::size_t>(std::count_if(m.graph().node().begin(), m.graph().node().end(),
                                                [&](const auto& n) { return n.op_type() == op; }));
}

bool has_note(const qo::quantize_report& r, const std::string& text) {
  return std::any_of(r.notes.begin(), r.notes.end(),
                     [&](const std::string& n) { return n.find(text) != std::string::npos; });
}

/// Quantizes `fm` with `cfg` on two samples of x (shape `shape`); returns the written model.
::onnx::ModelProto quantize(const ::onnx::ModelProto& fm, const qo::qconfig& cfg,
                            const qo::shape_t& shape, const std::string& tag,
                            qo::quantize_report* report = nullptr) {
  const fs::path dir = work_dir();
  save_proto(fm, dir / (tag + ".onnx"));
  std::vector<qo::calib_sample> calib;
  for (std::uint32_t s = 0; s < 2; ++s) {
    calib.push_back({{"x", qo::tensor::from_floats(
                               shape, random_floats(qo::element_count(shape), 80 + s, -2, 2))}});
  }
  qo::memory_reader reader(calib);
  const auto r = qo::quantize_model(dir / (tag + ".onnx"), dir / (tag + "_q.onnx"), cfg, reader);
  if (report != nullptr)
    *report = r;
  return load_proto(dir / (tag + "_q.onnx"));
}

/// x [1, 4] -> Relu -> y.
::onnx::ModelProto relu_model() {
  model_builder b(13);
  b.input("x", f32, {1, 4});
  b.node("Relu", {"x"}, {"y"});
  b.output("y", f32, {1, 4});
  return b.build();
}

}  // namespace

TEST_CASE("BF16WithClip: activations beyond the bfloat16 range saturate instead of overflowing") {
  const auto fm = relu_model();
  qo::qconfig cfg = qo::get_default_config("BF16");
  const auto plain = quantize(fm, cfg, {1, 4}, "bf16_noclip");
  CHECK(count(plain, "Clip") == 0);
  cfg.extra_options.set("BF16WithClip", true);
  const auto clipped = quantize(fm, cfg, {1, 4}, "bf16_clip");
  CHECK(count(clipped, "Clip") == 2);  // before the pairs of x and y
  const auto* clip = node_named(clipped, "x_Clip");
  REQUIRE(clip != nullptr);
  CHECK(floats_of(*find_init(clipped, clip->input(1))) == std::vector<float>{-bf16_max});
  CHECK(floats_of(*find_init(clipped, clip->input(2))) == std::vector<float>{bf16_max});
  // With BF16QDQToCast too, Quark's clip pass finds no custom QuantizeLinear left: no Clip.
  cfg.extra_options.set("BF16QDQToCast", true);
  CHECK(count(quantize(fm, cfg, {1, 4}, "bf16_clip_cast"), "Clip") == 0);
  if (!ort_available()) {
    MESSAGE("skipped ORT comparison: " << ort_unavailable_reason());
    return;
  }
  const std::vector<float> x{3.4e38f, -1.0f, 1.5f, -3.4e38f};
  const auto y0 = run_ort(plain, {npy_array::from(x, {1, 4})}).at("y").values<float>();
  const auto y1 = run_ort(clipped, {npy_array::from(x, {1, 4})}).at("y").values<float>();
  CHECK(y0[0] == std::numeric_limits<float>::infinity());
  CHECK(y1[0] == bf16_max);
  CHECK(y0[2] == 1.5f);
  CHECK(y1[2] == 1.5f);
  CHECK(y1[1] == 0.0f);
  CHECK(y1[3] == 0.0f);
}

TEST_CASE("BF16QDQToCast: a scaled bfloat16 pair multiplies by the reciprocal scale") {
  const auto fm = relu_model();
  qo::qconfig cfg = qo::get_default_config("BF16");
  cfg.extra_options.set("ActivationScaled", true);
  const auto div_form = quantize(fm, cfg, {1, 4}, "bf16_scaled");
  CHECK(count(div_form, "Div") == 2);
  cfg.extra_options.set("BF16QDQToCast", true);
  const auto mul_form = quantize(fm, cfg, {1, 4}, "bf16_scaled_cast");
  CHECK(count(mul_form, "Div") == 0);
  const auto* mul = node_named(mul_form, "x_QuantizeLinear_Mul");
  REQUIRE(mul != nullptr);
  const float s = floats_of(*find_init(mul_form, "x_scale"))[0];
  CHECK(s != 1.0f);
  CHECK(floats_of(*find_init(mul_form, mul->input(1))) == std::vector<float>{1.0f / s});
  if (ort_available()) {
    const std::vector<float> x{0.3f, -1.0f, 1.5f, 0.01f};
    const auto a = run_ort(div_form, {npy_array::from(x, {1, 4})}).at("y").values<float>();
    const auto b = run_ort(mul_form, {npy_array::from(x, {1, 4})}).at("y").values<float>();
    for (std::size_t i = 0; i < x.size(); ++i)
      CHECK(static_cast<double>(b[i]) ==
            doctest::Approx(static_cast<double>(a[i])).epsilon(1e-2));  // one bfloat16 step at most
  }
}

TEST_CASE("EnableVaimlBF16: no activation Casts, bfloat16 weights stored as float32") {
  model_builder b(13);
  b.input("x", f32, {2, 4});
  b.initializer("w", f32, {4, 3}, random_floats(12, 90, -1.0f, 1.0f));
  b.initializer("bias", f32, {3}, random_floats(3, 91, -1.0f, 1.0f));
  b.node("Gemm", {"x", "w", "bias"}, {"g"});
  b.node("Relu", {"g"}, {"y"});
  b.output("y", f32, {2, 3});
  const auto fm = b.build();
  qo::qconfig cfg = qo::get_default_config("BF16");
  cfg.extra_options.set("EnableVaimlBF16", true);
  qo::quantize_report report;
  const auto qm = quantize(fm, cfg, {2, 4}, "bf16_vaiml", &report);
  CHECK(has_note(report,
                 "EnableVaimlBF16: bfloat16 Cast pairs removed: 1 on activations, "
                 "1 before graph outputs; 2 weight(s)"));
  // Left: the graph input's pair (no node produces x), then Gemm -> Relu writing y.
  CHECK(count(qm, "Cast") == 2);
  const auto* gemm = node_named(qm, "n0");
  REQUIRE(gemm != nullptr);
  CHECK(gemm->input(1) == "w_bf16");
  CHECK(gemm->input(2) == "bias_bf16");
  CHECK(node_named(qm, "n1")->output(0) == "y");
  CHECK(find_init(qm, "w") == nullptr);
  const auto w_bf16 = floats_of(*find_init(qm, "w_bf16"));
  if (!ort_available()) {
    MESSAGE("skipped ORT comparison: " << ort_unavailable_reason());
    return;
  }
  // ORT's Cast rounds the original weights to the same values.
  model_builder c(13);
  c.input("w", f32, {4, 3});
  c.node("Cast", {"w"}, {"h"}, {attr_int("to", onnx_type::bfloat16)});
  c.node("Cast", {"h"}, {"r"}, {attr_int("to", f32)});
  c.output("r", f32, {4, 3});
  const auto rounded =
      run_ort(c.build(), {npy_array::from(random_floats(12, 90, -1.0f, 1.0f), {4, 3})})
          .at("r")
          .values<float>();
  CHECK(w_bf16 == rounded);
  const auto x = random_floats(8, 92, -2.0f, 2.0f);
  const auto theirs = run_ort(qm, {npy_array::from(x, {2, 4})}).at("y").values<float>();
  const fs::path p = work_dir() / "vaiml.onnx";
  save_proto(qm, p);
  const auto ours = qo::run_model(p, {{"x", qo::tensor::from_floats({2, 4}, x)}});
  const auto o = ours.at("y").data<float>();
  REQUIRE(o.size() == theirs.size());
  for (std::size_t i = 0; i < o.size(); ++i)
    CHECK(static_cast<double>(o[i]) ==
          doctest::Approx(static_cast<double>(theirs[i])).epsilon(1e-6));
}
