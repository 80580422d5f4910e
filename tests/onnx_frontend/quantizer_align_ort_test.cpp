// SPDX-License-Identifier: MIT
// NPULimitationCheck's Align* rules (docs/config.md §7.4; quark-spec §9.3, §9.4). The expected
// scales are derived from a run with the rules off: with float scales the aligned inputs take the
// output's scale and zero point (Concat) or the outputs take the input's (pools, Slice); with
// power-of-two scales every tensor of a Concat, and the input and output of a pool, take the
// smallest position, i.e. the largest of their scales. ONNX Runtime 1.30 runs every aligned model
// and agrees with quark-cpp's runtime.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include <doctest/doctest.h>

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

/// Two branches of very different ranges (x * 0.05 and x * 4) concatenated, then an
/// AveragePool and a MaxPool of the concatenation: x [1, 2, 6, 6].
::onnx::ModelProto concat_pool_model() {
  model_builder b(13);
  b.input("x", onnx_type::float32, {1, 2, 6, 6});
  b.initializer("small", onnx_type::float32, {}, std::vector<float>{0.05f});
  b.initializer("large", onnx_type::float32, {}, std::vector<float>{4.0f});
  b.node("Mul", {"x", "small"}, {"a"});
  b.node("Mul", {"x", "large"}, {"b"});
  b.node("Concat", {"a", "b"}, {"c"}, {attr_int("axis", 1)});
  b.node("AveragePool", {"c"}, {"p"},
         {attr_ints("kernel_shape", {2, 2}), attr_ints("strides", {2, 2})});
  b.node("Relu", {"p"}, {"y"});
  b.output("y", onnx_type::float32, {1, 4, 3, 3});
  return b.build();
}

struct quantized {
  ::onnx::ModelProto model;
  qo::quantize_report report;
};

quantized quantize(const ::onnx::ModelProto& fm, const qo::qconfig& cfg, const std::string& tag) {
  const fs::path dir = work_dir();
  save_proto(fm, dir / (tag + ".onnx"));
  std::vector<qo::calib_sample> calib;
  for (std::uint32_t s = 0; s < 2; ++s) {
    calib.push_back(
        {{"x", qo::tensor::from_floats({1, 2, 6, 6}, random_floats(72, 60 + s, -2.0f, 2.0f))}});
  }
  qo::memory_reader reader(calib);
  quantized q;
  q.report = qo::quantize_model(dir / (tag + ".onnx"), dir / (tag + "_q.onnx"), cfg, reader);
  q.model = load_proto(dir / (tag + "_q.onnx"));
  return q;
}

/// Scale and zero point of the Q/DQ pair on activation `t` (its QuantizeLinear).
std::pair<float, std::int64_t> qparams(const ::onnx::ModelProto& m, const std::string& t) {
  const auto* q = node_named(m, t + "_QuantizeLinear");
  REQUIRE_MESSAGE(q != nullptr, t);
  const qo::model mm = to_model(m);
  const qo::tensor s = mm.initializer(q->input(1));
  const qo::tensor z = mm.initializer(q->input(2));
  REQUIRE(s.size() == 1);
  const std::int64_t zp = z.type() == quark::dtype_id::int8    ? z.data<std::int8_t>()[0]
                          : z.type() == quark::dtype_id::uint8 ? z.data<std::uint8_t>()[0]
                                                               : z.data<std::int16_t>()[0];
  return {s.data<float>()[0], zp};
}

/// The quantized model runs in ORT and agrees with quark-cpp's runtime: y is Relu of the pool's
/// dequantized output, so the two may differ only where the pool's float sum (summed in another
/// order) sits on a rounding boundary, by one step of its scale.
void check_in_ort(const ::onnx::ModelProto& qm) {
  if (!ort_available()) {
    MESSAGE("skipped ORT comparison: " << ort_unavailable_reason());
    return;
  }
  const auto x = random_floats(72, 77, -2.0f, 2.0f);
  const auto theirs = run_ort(qm, {npy_array::from(x, {1, 2, 6, 6})}).at("y").values<float>();
  const fs::path p = work_dir() / "aligned.onnx";
  save_proto(qm, p);
  const auto ours = qo::run_model(p, {{"x", qo::tensor::from_floats({1, 2, 6, 6}, x)}});
  const auto o = ours.at("y").data<float>();
  REQUIRE(o.size() == theirs.size());
  const float step = qparams(qm, "p").first;
  std::size_t off = 0;
  for (std::size_t i = 0; i < o.size(); ++i) {
    const float d = std::fabs(o[i] - theirs[i]);
    CHECK(d <= step * 1.001f);
    off += d > 0.0f ? 1U : 0U;
  }
  CHECK(off <= o.size() / 10);
  CHECK(quark::metrics::cosine(std::vector<float>(o.begin(), o.end()), theirs) >= 0.9999);
}

}  // namespace

TEST_CASE("AlignConcat with float scales (A8W8): the Concat inputs take the output's scale") {
  const auto fm = concat_pool_model();
  qo::qconfig off = qo::get_default_config("A8W8");
  off.extra_options.set("AlignConcat", false);
  const auto q0 = quantize(fm, off, "concat_off");
  const auto [sa0, za0] = qparams(q0.model, "a");
  const auto [sc0, zc0] = qparams(q0.model, "c");
  CHECK(sa0 < sc0 / 10);  // the small branch has a scale of its own without the rule
  // A8W8 sets AlignConcat (as Quark's preset does).
  const auto q1 = quantize(fm, qo::get_default_config("A8W8"), "concat_on");
  const auto [sc, zc] = qparams(q1.model, "c");
  CHECK(sc == sc0);  // the output keeps its own
  CHECK(zc == zc0);
  for (const char* t : {"a", "b"}) {
    CAPTURE(t);
    const auto [s, z] = qparams(q1.model, t);
    CHECK(s == sc);
    CHECK(z == zc);
  }
  CHECK(std::any_of(q1.report.notes.begin(), q1.report.notes.end(), [](const std::string& n) {
    return n.find("NPULimitationCheck: ") != std::string::npos;
  }));
  check_in_ort(q1.model);
  // A8W8 leaves the pools alone (AlignPool's default is false with float scales).
  CHECK(qparams(q1.model, "p") == qparams(q0.model, "p"));

  SUBCASE("NPULimitationCheck false turns every Align* rule off") {
    qo::qconfig cfg = qo::get_default_config("A8W8");
    cfg.extra_options.set("NPULimitationCheck", false);
    const auto q = quantize(fm, cfg, "concat_check_off");
    CHECK(qparams(q.model, "a").first == sa0);
  }
  SUBCASE("AlignPool copies the pool input's parameters to its output") {
    qo::qconfig cfg = qo::get_default_config("A8W8");
    cfg.extra_options.set("AlignPool", true);
    const auto q = quantize(fm, cfg, "pool_on");
    CHECK(qparams(q.model, "p") == qparams(q.model, "c"));
    check_in_ort(q.model);
  }
}

TEST_CASE("Align* with power-of-two scales (XINT8): the smallest position wins") {
  const auto fm = concat_pool_model();
  qo::qconfig off = qo::get_default_config("XINT8");
  for (const char* k : {"AlignConcat", "AlignPool", "AlignPad", "AlignSlice"})
    off.extra_options.set(k, false);
  const auto q0 = quantize(fm, off, "pof2_off");
  float largest = 0.0f;
  for (const char* t : {"a", "b", "c"})
    largest = std::max(largest, qparams(q0.model, t).first);
  CHECK(qparams(q0.model, "a").first < largest);
  // XINT8's defaults (power-of-two scales): AlignConcat and AlignPool on.
  const auto q1 = quantize(fm, qo::get_default_config("XINT8"), "pof2_on");
  for (const char* t : {"a", "b", "c"}) {
    CAPTURE(t);
    CHECK(qparams(q1.model, t).first == largest);
  }
  // The AveragePool's output and its input (the Concat output) share the smaller position.
  const float p0 = qparams(q0.model, "p").first;
  CHECK(qparams(q1.model, "p").first == std::max(p0, largest));
  check_in_ort(q1.model);
}

TEST_CASE("MaxLoopNum must be at least 1") {
  qo::qconfig cfg = qo::get_default_config("A8W8");
  CHECK_THROWS_WITH_AS(cfg.extra_options.set("MaxLoopNum", 0),
                       doctest::Contains("MaxLoopNum: must be at least 1"), quark::config_error);
  cfg.extra_options.set("MaxLoopNum", 1);
  const auto q = quantize(concat_pool_model(), cfg, "loop1");
  CHECK(qparams(q.model, "a") == qparams(q.model, "c"));
}
