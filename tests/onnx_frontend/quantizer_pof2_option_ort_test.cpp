// SPDX-License-Identifier: MIT
// UsePowerOf2Scale = false (docs/config.md §7.1; quark-spec §3.1 step 10): the power-of-two
// methods calibrate as before and the scale is the float scale of the range they calibrated.
// Expected values are derived by hand: a symmetric int8 range [-1.4, 1.4] has the float scale
// 2.8 / 254 (power of two: 2^-7, quark-spec §2.2's example); MinMSE's searched range
// +-127 * 2^-p gives 2^-p again, on the uint8 grid (zero point 128) (-128, 127) * 2^-p gives
// 256 * 2^-p / 255; a MinMSE weight or Mul constant keeps its power of two (quantize_data tries
// powers of two whatever the option). Every model runs in ONNX Runtime 1.30 and agrees with
// quark-cpp's runtime.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include <quark/core/error.hpp>
#include <quark/metrics.hpp>
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

const qo::shape_t x_shape{1, 2, 4, 4};

/// The weights: their largest magnitude is 0.9 (w[5] = -0.9, the rest within +-0.5).
std::vector<float> weights() {
  auto w = random_floats(4 * 2 * 3 * 3, 11, -0.5f, 0.5f);
  w[5] = -0.9f;
  return w;
}

/// x [1, 2, 4, 4] -> Conv (4 channels, 3x3, pads 1, bias) -> c -> Mul by k [1, 4, 1, 1] -> y.
::onnx::ModelProto model() {
  model_builder b(13);
  b.input("x", onnx_type::float32, {1, 2, 4, 4});
  b.initializer("w", onnx_type::float32, {4, 2, 3, 3}, weights());
  b.initializer("bias", onnx_type::float32, {4}, std::vector<float>{0.1f, -0.2f, 0.05f, 0.3f});
  b.initializer("k", onnx_type::float32, {1, 4, 1, 1},
                std::vector<float>{0.3f, -0.7f, 1.3f, 0.45f});
  b.node("Conv", {"x", "w", "bias"}, {"c"}, {attr_ints("pads", {1, 1, 1, 1})});
  b.node("Mul", {"c", "k"}, {"y"}, {});
  b.output("y", onnx_type::float32, {1, 4, 4, 4});
  ::onnx::ModelProto m = b.build();
  m.mutable_graph()->mutable_node(0)->set_name("conv");
  m.mutable_graph()->mutable_node(1)->set_name("mul");
  return m;
}

/// One calibration sample whose largest magnitude is exactly 1.4.
std::vector<float> sample() {
  auto v = random_floats(32, 21, -1.0f, 1.0f);
  v[7] = 1.4f;
  return v;
}

/// A8W8 with PowerOf2 scales, `method` for the activations and `weight_method` for the weights;
/// OptimizeModel off so the Conv and Mul stay as built.
qo::qconfig config(qo::calib_method method, qo::calib_method weight_method, bool pof2_scale,
                   qo::spec_name act = qo::spec_name::int8) {
  qo::qconfig cfg = qo::get_default_config("A8W8");
  auto& g = cfg.global_config;
  for (auto* s : {&g.input_tensors, &g.output_tensors}) {
    **s = qo::make_spec(act);
    (*s)->symmetric = true;
    (*s)->scale_type = qo::scale_kind::power_of_2;
    (*s)->calibration_method = method;
  }
  g.weight->scale_type = qo::scale_kind::power_of_2;
  g.weight->calibration_method = weight_method;
  cfg.extra_options.set("OptimizeModel", qo::option_value(false));
  cfg.extra_options.set("UsePowerOf2Scale", qo::option_value(pof2_scale));
  return cfg;
}

struct quantized {
  ::onnx::ModelProto model;
  qo::quantize_report report;
};

quantized quantize(const qo::qconfig& cfg, const std::string& tag) {
  const fs::path dir = work_dir();
  save_proto(model(), dir / (tag + ".onnx"));
  std::vector<qo::calib_sample> calib{{{"x", qo::tensor::from_floats(x_shape, sample())}}};
  qo::memory_reader reader(calib);
  quantized q;
  q.report = qo::quantize_model(dir / (tag + ".onnx"), dir / (tag + "_q.onnx"), cfg, reader);
  q.model = load_proto(dir / (tag + "_q.onnx"));
  return q;
}

const qo::tensor_report& tensor(const qo::quantize_report& r, const std::string& name) {
  const auto it = std::find_if(r.tensors.begin(), r.tensors.end(),
                               [&](const qo::tensor_report& t) { return t.name == name; });
  REQUIRE_MESSAGE(it != r.tensors.end(), name);
  REQUIRE(it->scale.size() == 1u);
  return *it;
}

float scale_of(const qo::quantize_report& r, const std::string& name) {
  return tensor(r, name).scale[0];
}

bool power_of_two(float s) {
  int e = 0;
  return s > 0.0f && std::frexp(s, &e) == 0.5f;
}

/// ORT runs `qm` and agrees with quark-cpp's runtime.
void check_in_ort(const ::onnx::ModelProto& qm) {
  if (!ort_available()) {
    MESSAGE("skipped ORT comparison: " << ort_unavailable_reason());
    return;
  }
  const auto x = random_floats(32, 77, -1.2f, 1.2f);
  const auto theirs = run_ort(qm, {npy_array::from(x, {1, 2, 4, 4})});
  const fs::path p = work_dir() / "pof2_option.onnx";
  save_proto(qm, p);
  const auto ours = qo::run_model(p, {{"x", qo::tensor::from_floats(x_shape, x)}});
  const auto t = theirs.at("y").values<float>();
  const auto o = ours.at("y").data<float>();
  REQUIRE(o.size() == t.size());
  CHECK(quark::metrics::cosine(std::vector<float>(o.begin(), o.end()), t) >= 0.9999);
}

}  // namespace

TEST_CASE("UsePowerOf2Scale false: NonOverflow (MinMax, PowerOf2) gives the float min/max scales") {
  using qo::calib_method;
  const auto pof2 = quantize(config(calib_method::min_max, calib_method::min_max, true), "nov_t");
  const auto flt = quantize(config(calib_method::min_max, calib_method::min_max, false), "nov_f");
  // The input: [-1.4, 1.4] on the symmetric int8 grid -127..127.
  CHECK(scale_of(pof2.report, "x") == 0.0078125f);
  CHECK(scale_of(flt.report, "x") == static_cast<float>(2.8 / 254.0));
  CHECK(tensor(flt.report, "x").zero_point[0] == 0);
  // The weight: [-0.9, 0.9] -> 1.8 / 254 (power of two: rint(-log2(0.0070866)) = 7).
  CHECK(scale_of(pof2.report, "w") == 0.0078125f);
  CHECK(scale_of(flt.report, "w") == static_cast<float>(1.8 / 254.0));
  // The int32 bias: input scale x weight scale.
  CHECK(scale_of(flt.report, "bias") == scale_of(flt.report, "x") * scale_of(flt.report, "w"));
  // The Conv output and the Mul constant: float scales of their own min / max.
  CHECK_FALSE(power_of_two(scale_of(flt.report, "c")));
  const float kmax = 1.3f;
  CHECK(scale_of(flt.report, "k") == static_cast<float>(2.0 * static_cast<double>(kmax) / 254.0));
  CHECK(power_of_two(scale_of(pof2.report, "c")));
  check_in_ort(flt.model);
  check_in_ort(pof2.model);
}

TEST_CASE("UsePowerOf2Scale false: MinMSE's searched range gives a float scale") {
  using qo::calib_method;
  SUBCASE("int8: +-127 * 2^-p over 254 steps is 2^-p, the model bytes are the same") {
    const auto t = quantize(config(calib_method::min_mse, calib_method::min_mse, true), "mse_t");
    const auto f = quantize(config(calib_method::min_mse, calib_method::min_mse, false), "mse_f");
    for (const char* n : {"x", "c", "y", "w", "k"}) {
      CAPTURE(n);
      CHECK(power_of_two(scale_of(t.report, n)));
      CHECK(scale_of(f.report, n) == scale_of(t.report, n));
    }
    CHECK(t.model.graph().SerializeAsString() == f.model.graph().SerializeAsString());
    check_in_ort(f.model);
  }
  SUBCASE("uint8, zero point 128: (-128, 127) * 2^-p gives 256 * 2^-p / 255") {
    const auto t = quantize(
        config(calib_method::min_mse, calib_method::min_mse, true, qo::spec_name::uint8), "u8_t");
    const auto f = quantize(
        config(calib_method::min_mse, calib_method::min_mse, false, qo::spec_name::uint8), "u8_f");
    for (const char* n : {"x", "c", "y"}) {
      CAPTURE(n);
      const float p = scale_of(t.report, n);
      REQUIRE(power_of_two(p));
      CHECK(tensor(t.report, n).zero_point[0] == 128);
      CHECK(scale_of(f.report, n) == static_cast<float>(256.0 * static_cast<double>(p) / 255.0));
      // RNE(0 - (-128 p) / (256 p / 255)) = RNE(127.5) = 128.
      CHECK(tensor(f.report, n).zero_point[0] == 128);
    }
    // The weight and the Mul constant are searched as quantize_data searches: powers of two.
    CHECK(scale_of(f.report, "w") == scale_of(t.report, "w"));
    CHECK(scale_of(f.report, "k") == scale_of(t.report, "k"));
    CHECK(power_of_two(scale_of(f.report, "k")));
    check_in_ort(f.model);
  }
}

TEST_CASE("UsePowerOf2Scale false is refused in the NPU-CNN flow") {
  qo::qconfig cfg = qo::get_default_config("XINT8");
  cfg.extra_options.set("UsePowerOf2Scale", qo::option_value(false));
  const fs::path dir = work_dir();
  save_proto(model(), dir / "npu.onnx");
  std::vector<qo::calib_sample> calib{{{"x", qo::tensor::from_floats(x_shape, sample())}}};
  qo::memory_reader reader(calib);
  const fs::path out = dir / "npu_q.onnx";
  const std::string text =
      error_text([&] { (void)qo::quantize_model(dir / "npu.onnx", out, cfg, reader); });
  CHECK(text.find("quark.config.conflict") != std::string::npos);
  CHECK(text.find("UsePowerOf2Scale = false") != std::string::npos);
  CHECK_FALSE(fs::exists(out));
  // The default (true) is accepted there.
  cfg.extra_options.set("UsePowerOf2Scale", qo::option_value(true));
  qo::memory_reader again(calib);
  CHECK_NOTHROW((void)qo::quantize_model(dir / "npu.onnx", out, cfg, again));
}
