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

namespace {

/// Position pos of the power-of-two scale of initializer `name` (2^-pos).
int position_of(const ::onnx::ModelProto& m, const std::string& name) {
  const qo::tensor s = to_model(m).initializer(name);
  REQUIRE(s.size() == 1);
  const double p = -std::log2(static_cast<double>(s.data<float>()[0]));
  REQUIRE(p == std::round(p));
  return static_cast<int>(p);
}

/// Position of the DequantizeLinear that writes `t`, and of the QuantizeLinear that reads it.
int dq_position(const ::onnx::ModelProto& m, const std::string& t) {
  for (const auto& n : m.graph().node()) {
    if (n.op_type() == "DequantizeLinear" && n.output(0) == t)
      return position_of(m, n.input(1));
  }
  FAIL("no DequantizeLinear writes " << t);
  return 0;
}
int q_position(const ::onnx::ModelProto& m, const std::string& t) {
  const auto* q = node_named(m, t + "_QuantizeLinear");  // (a graph output's Q reads a renamed t)
  REQUIRE_MESSAGE(q != nullptr, "no QuantizeLinear for " << t);
  return position_of(m, q->input(1));
}
const ::onnx::NodeProto& only(const ::onnx::ModelProto& m, const char* op) {
  const ::onnx::NodeProto* found = nullptr;
  for (const auto& n : m.graph().node()) {
    if (n.op_type() == op) {
      REQUIRE(found == nullptr);
      found = &n;
    }
  }
  REQUIRE(found != nullptr);
  return *found;
}

/// x [1, 2, 6, 6]: a Conv with tiny weights and a large bias (so the output's position is far
/// below weight + input: shift_cut > 16), a Relu after it; an Add of two branches 14 positions
/// apart (shift_read > 7); x * HardSigmoid(x) with alpha 1/6 on a wide input (ipos < 0).
::onnx::ModelProto npu_model() {
  model_builder b(13);
  b.input("x", onnx_type::float32, {1, 2, 6, 6});
  b.initializer("w", onnx_type::float32, {2, 2, 3, 3}, random_floats(36, 90, -0.004f, 0.004f));
  b.initializer("bias", onnx_type::float32, {2}, std::vector<float>{10.0f, -9.0f});
  b.initializer("tiny", onnx_type::float32, {}, std::vector<float>{0.0005f});
  b.initializer("huge", onnx_type::float32, {}, std::vector<float>{8.0f});
  b.initializer("wide", onnx_type::float32, {}, std::vector<float>{40.0f});
  b.node("Conv", {"x", "w", "bias"}, {"c"}, {attr_ints("pads", {1, 1, 1, 1})});
  b.node("Relu", {"c"}, {"r"});
  b.node("Mul", {"x", "tiny"}, {"t"});
  b.node("Mul", {"x", "huge"}, {"h"});
  b.node("Add", {"t", "h"}, {"s"});
  b.node("Mul", {"x", "wide"}, {"v"});
  b.node("HardSigmoid", {"v"}, {"g"}, {attr_float("alpha", 1.0f / 6.0f), attr_float("beta", 0.5f)});
  b.node("Mul", {"v", "g"}, {"sw"});
  b.output("r", onnx_type::float32, {1, 2, 6, 6});
  b.output("s", onnx_type::float32, {1, 2, 6, 6});
  b.output("sw", onnx_type::float32, {1, 2, 6, 6});
  return b.build();
}

struct npu_shifts {
  int cut, bias, read, write_add, hs_in, hs_out, swish;
};

/// The shifts of npu_model() quantized, read from its Q/DQ scales.
npu_shifts shifts_of(const ::onnx::ModelProto& m) {
  const auto& conv = only(m, "Conv");
  const int ipos = dq_position(m, conv.input(0));
  const int wpos = dq_position(m, conv.input(1));
  const int bpos = dq_position(m, conv.input(2));
  const int opos = q_position(m, "r");  // through the Relu: XINT8 removes the Q/DQ between
  const auto& add = only(m, "Add");
  const int a0 = dq_position(m, add.input(0)), a1 = dq_position(m, add.input(1));
  const int aout = q_position(m, "s");
  const auto& hs = only(m, "HardSigmoid");
  const int hin = dq_position(m, hs.input(0)), hout = q_position(m, "g");
  int swish = 0;
  for (const auto& n : m.graph().node()) {
    if (n.op_type() == "Mul" && n.input_size() == 2 && n.output(0) == "sw")
      swish = dq_position(m, n.input(0)) + dq_position(m, n.input(1)) - q_position(m, "sw");
  }
  return {wpos + ipos - opos,
          wpos + ipos - bpos,
          std::abs(a0 - a1),
          std::min(a0, a1) - aout,
          hin,
          hout,
          swish};
}

std::vector<qo::calib_sample> wide_samples() {
  std::vector<qo::calib_sample> calib;
  for (std::uint32_t s = 0; s < 2; ++s) {
    calib.push_back(
        {{"x", qo::tensor::from_floats({1, 2, 6, 6}, random_floats(72, 80 + s, -2.0f, 2.0f))}});
  }
  return calib;
}

::onnx::ModelProto quantize_npu(const qo::qconfig& cfg, const std::string& tag,
                                qo::quantize_report* report = nullptr) {
  const fs::path dir = work_dir();
  save_proto(npu_model(), dir / (tag + ".onnx"));
  qo::memory_reader reader(wide_samples());
  const auto r = qo::quantize_model(dir / (tag + ".onnx"), dir / (tag + "_q.onnx"), cfg, reader);
  if (report != nullptr)
    *report = r;
  return load_proto(dir / (tag + "_q.onnx"));
}

}  // namespace

TEST_CASE("AdjustShift* / AdjustHardSigmoid (XINT8): every NPU shift ends in its range") {
  // Without the rules the model breaks the shift_cut, shift_read and HardSigmoid limits (so the
  // check below can fail); with XINT8's defaults every shift is within quark-spec §9.3's ranges.
  qo::qconfig off = qo::get_default_config("XINT8");
  for (const char* k : {"AdjustShiftCut", "AdjustShiftBias", "AdjustShiftRead", "AdjustShiftWrite",
                        "AdjustHardSigmoid", "AdjustShiftSwish"})
    off.extra_options.set(k, false);
  const npu_shifts before = shifts_of(quantize_npu(off, "npu_off"));
  CAPTURE(before.cut);
  CAPTURE(before.read);
  CAPTURE(before.hs_in);
  CHECK((before.cut > 16 || before.read > 7 || before.hs_in < 0));
  qo::quantize_report rep;
  const auto qm = quantize_npu(qo::get_default_config("XINT8"), "npu_on", &rep);
  const npu_shifts s = shifts_of(qm);
  CAPTURE(s.cut);
  CAPTURE(s.bias);
  CAPTURE(s.read);
  CAPTURE(s.write_add);
  CAPTURE(s.hs_in);
  CAPTURE(s.hs_out);
  CAPTURE(s.swish);
  CHECK((s.cut >= 0 && s.cut <= 16));
  CHECK((s.bias >= std::min(0, s.cut - 16) && s.bias <= 15));
  CHECK(s.read <= 7);
  CHECK((s.write_add >= -7 && s.write_add <= 25));
  CHECK((s.hs_in >= 0 && s.hs_in <= 15));
  CHECK(s.hs_out >= 7);
  CHECK(14 + s.hs_in - s.hs_out > 0);
  CHECK((s.swish >= 0 && s.swish <= 15));
  CHECK(std::any_of(rep.notes.begin(), rep.notes.end(), [](const std::string& n) {
    return n.find("NPULimitationCheck: ") != std::string::npos;
  }));
  if (ort_available()) {
    const auto x = random_floats(72, 99, -2.0f, 2.0f);
    const auto theirs = run_ort(qm, {npy_array::from(x, {1, 2, 6, 6})});
    const fs::path p = work_dir() / "npu_on_q.onnx";
    const auto ours = qo::run_model(p, {{"x", qo::tensor::from_floats({1, 2, 6, 6}, x)}});
    for (const char* out : {"r", "s", "sw"}) {
      CAPTURE(out);
      const auto o = ours.at(out).data<float>();
      const auto t = theirs.at(out).values<float>();
      CHECK(quark::metrics::cosine(std::vector<float>(o.begin(), o.end()), t) >= 0.9999);
    }
  }
}

TEST_CASE("AlignPad, AlignSlice, AlignTranspose, AlignReshape with float scales (A8W8)") {
  // x * 4 -> Pad (constant 30, so the padded tensor's range grows) -> Slice -> Transpose ->
  // Reshape: each rule makes its two tensors share one scale; off, Pad's two differ.
  model_builder b(13);
  b.input("x", onnx_type::float32, {1, 2, 6, 6});
  b.initializer("four", onnx_type::float32, {}, std::vector<float>{4.0f});
  b.initializer("pads", onnx_type::int64, {8}, std::vector<std::int64_t>{0, 0, 1, 1, 0, 0, 1, 1});
  b.initializer("pv", onnx_type::float32, {}, std::vector<float>{30.0f});
  b.initializer("st", onnx_type::int64, {1}, std::vector<std::int64_t>{1});
  b.initializer("en", onnx_type::int64, {1}, std::vector<std::int64_t>{7});
  b.initializer("ax", onnx_type::int64, {1}, std::vector<std::int64_t>{2});
  b.initializer("shape", onnx_type::int64, {2}, std::vector<std::int64_t>{1, -1});
  b.node("Mul", {"x", "four"}, {"a"});
  b.node("Pad", {"a", "pads", "pv"}, {"p"});
  b.node("Slice", {"p", "st", "en", "ax"}, {"sl"});
  b.node("Transpose", {"sl"}, {"t"}, {attr_ints("perm", {0, 1, 3, 2})});
  b.node("Reshape", {"t", "shape"}, {"r"});
  b.node("Relu", {"r"}, {"y"});
  b.output("y", onnx_type::float32, {1, 96});
  const auto fm = b.build();
  const auto q0 = quantize(fm, qo::get_default_config("A8W8"), "moves_off");
  CHECK(qparams(q0.model, "a") != qparams(q0.model, "p"));
  qo::qconfig cfg = qo::get_default_config("A8W8");
  for (const char* k : {"AlignPad", "AlignSlice", "AlignTranspose", "AlignReshape"})
    cfg.extra_options.set(k, true);
  const auto q1 = quantize(fm, cfg, "moves_on");
  const auto pad = qparams(q1.model, "p");
  CHECK(qparams(q1.model, "a") == pad);  // AlignPad: the output's to the input
  for (const char* t : {"sl", "t", "r"}) {
    CAPTURE(t);
    CHECK(qparams(q1.model, t) == pad);
  }
}
