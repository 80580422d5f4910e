// SPDX-License-Identifier: MIT
// quantize_model on small graphs: every quantized model loads and runs in ONNX Runtime 1.30, our
// runtime agrees with ORT on it, the outputs stay close to the float model, and bad inputs give
// clear errors with no output file left behind.
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <set>
#include <tuple>

#include <doctest/doctest.h>

// support/ort.hpp first: inside quark::test, "onnx::" must find ::onnx, not quark::onnx.
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

/// MatMul -> Add -> Softmax at opset 11 (the quantizer must raise the opset for 16-bit types).
::onnx::ModelProto matmul_model() {
  model_builder b(11, 6);
  b.input("x", onnx_type::float32, {2, 8});
  b.initializer("w", onnx_type::float32, {8, 6}, random_floats(48, 7));
  b.initializer("bias", onnx_type::float32, {6}, random_floats(6, 8, -0.2f, 0.2f));
  b.node("MatMul", {"x", "w"}, {"m"});
  b.node("Add", {"m", "bias"}, {"a"});
  b.node("Softmax", {"a"}, {"y"}, {attr_int("axis", 1)});
  b.output("y", onnx_type::float32, {2, 6});
  return b.build();
}

qo::calib_sample sample_for(const std::string& name, qo::shape_t shape, std::uint32_t seed) {
  const std::size_t n = qo::element_count(shape);
  return {{name, qo::tensor::from_floats(std::move(shape), random_floats(n, seed))}};
}

std::vector<float> run_ours(const fs::path& p, const qo::calib_sample& s) {
  auto out = qo::run_model(p, s);  // our runtime
  const auto d = out.begin()->second.data<float>();
  return {d.begin(), d.end()};
}

std::vector<float> run_in_ort(const fs::path& p, const qo::calib_sample& s) {
  const auto& t = s.begin()->second;
  std::vector<std::size_t> shape(t.shape().begin(), t.shape().end());
  auto out = run_ort(load_proto(p), {npy_array::from(t.data<float>(), shape)});
  return out.begin()->second.values<float>();
}

/// The error quantizing `fin` to `fout` with `preset` on one sample of x, or "" when it succeeds.
std::string quantize_error(const fs::path& fin, const fs::path& fout, const char* preset,
                           const qo::calib_sample& sample) {
  qo::memory_reader reader({sample});
  try {
    (void)qo::quantize_model(fin, fout, qo::get_default_config(preset), reader);
  } catch (const std::exception& e) {
    return e.what();
  }
  return {};
}

struct case_t {
  const char* preset;
  bool per_channel;
  double min_cosine;
};

void check_quantized(const ::onnx::ModelProto& float_model, const std::string& input,
                     const qo::shape_t& shape, const case_t& c) {
  const std::string preset_name = c.preset;
  CAPTURE(preset_name);
  CAPTURE(c.per_channel);
  const fs::path dir = work_dir();
  const fs::path fin = dir / "float.onnx";
  const fs::path fout = dir / (std::string(c.preset) + (c.per_channel ? "_pc" : "") + ".onnx");
  save_proto(float_model, fin);
  qo::qconfig cfg = qo::get_default_config(c.preset);
  if (c.per_channel)
    cfg.global_config.weight->quant_granularity = qo::granularity::channel;
  std::vector<qo::calib_sample> calib;
  for (std::uint32_t i = 0; i < 4; ++i)
    calib.push_back(sample_for(input, shape, 100 + i));
  qo::memory_reader reader(calib);
  const qo::quantize_report r = qo::quantize_model(fin, fout, cfg, reader);
  CHECK(r.calibration_samples == 4u);
  const auto qm = load_proto(fout);
  int q_nodes = 0;
  for (const auto& n : qm.graph().node())
    q_nodes += n.op_type() == "DequantizeLinear" ? 1 : 0;
  CHECK(q_nodes > 0);
  if (!ort_available()) {
    MESSAGE("ONNX Runtime unavailable: " << ort_unavailable_reason());
    return;
  }
  const auto s = sample_for(input, shape, 999);
  const auto ref = run_in_ort(fin, s);
  const auto ort_q = run_in_ort(fout, s);
  const auto ours_q = run_ours(fout, s);
  REQUIRE(ort_q.size() == ours_q.size());
  // Our runtime and ORT agree on the quantized model.
  CHECK(quark::metrics::cosine(ort_q, ours_q) >= 0.99999);
  double max_diff = 0.0;
  for (std::size_t i = 0; i < ort_q.size(); ++i) {
    max_diff = std::max(max_diff,
                        std::fabs(static_cast<double>(ort_q[i]) - static_cast<double>(ours_q[i])));
  }
  CHECK(max_diff <= 2e-2);
  // The quantized model stays close to the float model.
  const double cos = quark::metrics::cosine(ref, ort_q);
  MESSAGE(std::string(c.preset) << std::string(c.per_channel ? " per-channel" : "")
                                << ": cosine vs float " << cos << ", opset " << r.opset_before
                                << " -> " << r.opset_after);
  CHECK(cos >= c.min_cosine);
}

/// x 1x4x5x5 -> ConvTranspose 3x3, group 2, stride 2 (weight 4x3x3x3: C_out = 6) + bias -> y.
/// The weight's axis-1 channel j serves output channels j and j + 3; its three channels differ
/// in size by 4x steps, so a bias scale taken from the wrong weight channel shows in the output.
::onnx::ModelProto grouped_conv_transpose_model() {
  model_builder b(13, 8);
  b.input("x", onnx_type::float32, {1, 4, 5, 5});
  std::vector<float> w = random_floats(4 * 3 * 9, 21);
  for (std::size_t i = 0; i < w.size(); ++i)
    w[i] *= static_cast<float>(1u << (2 * ((i / 9) % 3)));  // channel j (axis 1): x1, x4, x16
  b.initializer("w", onnx_type::float32, {4, 3, 3, 3}, w);
  b.initializer("b", onnx_type::float32, {6},
                std::vector<float>{0.5f, -1.0f, 2.0f, -0.25f, 1.5f, -3.0f});
  b.node("ConvTranspose", {"x", "w", "b"}, {"y"},
         {attr_int("group", 2), attr_ints("strides", {2, 2})});
  b.output("y", onnx_type::float32, {1, 6, 11, 11});
  return b.build();
}

/// x 2x4x3x5 -> InstanceNormalization (scale / B of 4) -> LayerNormalization over the last axis
/// (scale / B of 5) -> y, opset 17.
const std::vector<float> in_scale{0.5f, 1.25f, -0.75f, 2.0f}, in_bias{0.1f, -0.3f, 0.25f, 0.0f};
const std::vector<float> ln_scale{1.0f, 0.8f, 1.2f, -0.6f, 0.9f},
    ln_bias{0.05f, -0.2f, 0.4f, 0.0f, 0.3f};

::onnx::ModelProto norm_model() {
  model_builder b(17);
  b.input("x", onnx_type::float32, {2, 4, 3, 5});
  b.initializer("s_in", onnx_type::float32, {4}, in_scale);
  b.initializer("b_in", onnx_type::float32, {4}, in_bias);
  b.initializer("s_ln", onnx_type::float32, {5}, ln_scale);
  b.initializer("b_ln", onnx_type::float32, {5}, ln_bias);
  b.node("InstanceNormalization", {"x", "s_in", "b_in"}, {"n"}, {attr_float("epsilon", 1e-5f)});
  b.node("LayerNormalization", {"n", "s_ln", "b_ln"}, {"y"}, {attr_int("axis", -1)});
  b.output("y", onnx_type::float32, {2, 4, 3, 5});
  return b.build();
}

std::vector<std::int64_t> codes_of(const qo::tensor& t) {
  std::vector<std::int64_t> v;
  for (std::size_t i = 0; i < t.size(); ++i) {
    switch (t.type()) {
      case quark::dtype_id::int8:
        v.push_back(t.data<std::int8_t>()[i]);
        break;
      case quark::dtype_id::int32:
        v.push_back(t.data<std::int32_t>()[i]);
        break;
      default:
        FAIL("unexpected type");
    }
  }
  return v;
}

/// Symmetric int8 weight codes of `v` with scale `s`: rne(v / s) clipped to +-127.
std::vector<std::int64_t> int8_codes(const std::vector<float>& v, const std::vector<float>& s) {
  std::vector<std::int64_t> c;
  for (std::size_t i = 0; i < v.size(); ++i)
    c.push_back(std::clamp<std::int64_t>(
        static_cast<std::int64_t>(std::nearbyint(v[i] / s[s.size() == 1 ? 0 : i])), -127, 127));
  return c;
}

}  // namespace

TEST_CASE("conv graph: presets load and run in ORT and match our runtime") {
  for (const case_t& c :
       {case_t{"A8W8", false, 0.99}, case_t{"U8S8", false, 0.99}, case_t{"XINT8", false, 0.99},
        case_t{"VINT8", false, 0.99}, case_t{"S8S8", true, 0.99}, case_t{"A16W8", false, 0.999}}) {
    check_quantized(conv_model(), "x", {1, 3, 8, 8}, c);
  }
}

/// The conv graph imported at opset 25 (ONNX 1.20) and 26 (ONNX 1.21, with a CumProd after the
/// Sigmoid): quantized, the model keeps its opset, loads and runs in ORT and matches our runtime.
TEST_CASE("models at opsets 25 and 26 quantize, keep their opset and run in ORT") {
  for (const int opset : {25, 26}) {
    CAPTURE(opset);
    auto m = conv_model();
    m.set_ir_version(11);
    m.mutable_opset_import(0)->set_version(opset);
    if (opset == 26) {
      auto* g = m.mutable_graph();
      g->mutable_node(g->node_size() - 1)->set_output(0, "s");
      auto* cp = g->add_node();
      cp->set_op_type("CumProd");
      cp->set_name("cumprod");
      cp->add_input("s");
      cp->add_input("axis");
      cp->add_output("y");
      auto* axis = g->add_initializer();
      axis->set_name("axis");
      axis->set_data_type(onnx_type::int64);
      const std::int64_t one = 1;
      axis->set_raw_data(std::string(reinterpret_cast<const char*>(&one), sizeof one));
    }
    for (const char* preset : {"A8W8", "XINT8", "A16W8"}) {
      check_quantized(m, "x", {1, 3, 8, 8}, {preset, false, 0.99});
      const auto qm = load_proto(work_dir() / (std::string(preset) + ".onnx"));
      for (const auto& o : qm.opset_import()) {
        if (o.domain().empty() || o.domain() == "ai.onnx")
          CHECK(o.version() == opset);
      }
    }
  }
}

TEST_CASE("grouped ConvTranspose with a bias and per-channel weights (bias scale per group)") {
  // The weight has C_out / group = 3 scales on axis 1; the int32 bias needs 6, one per output
  // channel o, from weight channel o % 3. ORT runs the result; our runtime agrees with it.
  for (const case_t& c : {case_t{"A8W8", true, 0.99}, case_t{"A16W8", true, 0.999}}) {
    check_quantized(grouped_conv_transpose_model(), "x", {1, 4, 5, 5}, c);
    // In QDQ form any bias scale dequantizes well; an integer kernel adds the bias to the
    // x * w accumulator, so the written scales must satisfy s_b[o] = s_x * s_w[o % 3].
    const auto qm = load_proto(work_dir() / (std::string(c.preset) + "_pc.onnx"));
    const auto& g = qm.graph();
    auto floats = [&](const std::string& name) {
      for (const auto& t : g.initializer()) {
        if (t.name() != name)
          continue;
        if (t.float_data_size() > 0)
          return std::vector<float>(t.float_data().begin(), t.float_data().end());
        std::vector<float> v(t.raw_data().size() / sizeof(float));
        std::memcpy(v.data(), t.raw_data().data(), v.size() * sizeof(float));
        return v;
      }
      FAIL("no initializer " << name);
      return std::vector<float>{};
    };
    auto dq_scale_of = [&](const std::string& value) {
      for (const auto& n : g.node()) {
        if (n.op_type() == "DequantizeLinear" && n.output(0) == value)
          return floats(n.input(1));
      }
      FAIL("no DequantizeLinear writes " << value);
      return std::vector<float>{};
    };
    const ::onnx::NodeProto* ct = nullptr;
    for (const auto& n : g.node()) {
      if (n.op_type() == "ConvTranspose")
        ct = &n;
    }
    REQUIRE(ct != nullptr);
    REQUIRE(ct->input_size() == 3);
    const auto sx = dq_scale_of(ct->input(0));
    const auto sw = dq_scale_of(ct->input(1));
    const auto sb = dq_scale_of(ct->input(2));
    REQUIRE(sx.size() == 1);
    REQUIRE(sw.size() == 3);
    REQUIRE(sb.size() == 6);
    for (std::size_t o = 0; o < 6; ++o) {
      CAPTURE(o);
      CHECK(sb[o] == sx[0] * sw[o % 3]);
    }
  }
}

TEST_CASE("matmul graph at opset 11: int8 keeps the opset, 16-bit raises it to 21") {
  check_quantized(matmul_model(), "x", {2, 8}, {"A8W8", false, 0.99});
  check_quantized(matmul_model(), "x", {2, 8}, {"A16W8", false, 0.999});
}

/// Old operator signatures that a raised opset must carry: each model runs at its own opset in
/// ORT, and its A16W8 form (opset 21) must load there and agree with our runtime. Found by
/// quantizing the ONNX node tests: an equal Split from opset 13 had no num_outputs at 21.
TEST_CASE("raising the opset to 21 carries Split, TopK, Scatter, Dropout and BatchNormalization") {
  const auto w = random_floats(8 * 4, 31);
  SUBCASE("Split without 'split' (opset 11) gets num_outputs") {
    model_builder b(11, 6);
    b.input("x", onnx_type::float32, {2, 8});
    b.node("Split", {"x"}, {"s0", "s1"}, {attr_int("axis", 1)});
    b.node("Concat", {"s1", "s0"}, {"c"}, {attr_int("axis", 1)});
    b.initializer("w", onnx_type::float32, {8, 4}, w);
    b.node("MatMul", {"c", "w"}, {"y"});
    b.output("y", onnx_type::float32, {2, 4});
    check_quantized(b.build(), "x", {2, 8}, {"A16W8", false, 0.999});
  }
  SUBCASE("Split with a 'split' attribute (opset 11) gets the input") {
    model_builder b(11, 6);
    b.input("x", onnx_type::float32, {2, 8});
    b.node("Split", {"x"}, {"s0", "s1"}, {attr_int("axis", 1), attr_ints("split", {3, 5})});
    b.node("Concat", {"s1", "s0"}, {"c"}, {attr_int("axis", 1)});
    b.initializer("w", onnx_type::float32, {8, 4}, w);
    b.node("MatMul", {"c", "w"}, {"y"});
    b.output("y", onnx_type::float32, {2, 4});
    check_quantized(b.build(), "x", {2, 8}, {"A16W8", false, 0.999});
  }
  SUBCASE("TopK's k attribute (opset 9) becomes an input") {
    model_builder b(9, 6);
    b.input("x", onnx_type::float32, {2, 8});
    b.node("TopK", {"x"}, {"v", "i"}, {attr_int("k", 4), attr_int("axis", 1)});
    b.initializer("w", onnx_type::float32, {4, 8}, w);
    b.node("MatMul", {"v", "w"}, {"y"});
    b.output("y", onnx_type::float32, {2, 8});
    check_quantized(b.build(), "x", {2, 8}, {"A16W8", false, 0.999});
  }
  SUBCASE("Scatter (opset 9) becomes ScatterElements") {
    model_builder b(9, 6);
    b.input("x", onnx_type::float32, {2, 8});
    b.initializer("idx", onnx_type::int64, {2, 2}, std::vector<std::int64_t>{1, 6, 0, 7});
    b.initializer("upd", onnx_type::float32, {2, 2}, std::vector<float>{0.5f, -0.25f, 1.0f, 0.75f});
    b.node("Scatter", {"x", "idx", "upd"}, {"s"}, {attr_int("axis", 1)});
    b.initializer("w", onnx_type::float32, {8, 4}, w);
    b.node("MatMul", {"s", "w"}, {"y"});
    b.output("y", onnx_type::float32, {2, 4});
    check_quantized(b.build(), "x", {2, 8}, {"A16W8", false, 0.999});
  }
  SUBCASE("BatchNormalization's spatial and Dropout's ratio (opset 7) are dropped") {
    model_builder b(7, 3);
    b.input("x", onnx_type::float32, {1, 2, 2, 2});
    b.initializer("g", onnx_type::float32, {2}, std::vector<float>{1.5f, 0.5f});
    b.initializer("be", onnx_type::float32, {2}, std::vector<float>{0.1f, -0.2f});
    b.initializer("mu", onnx_type::float32, {2}, std::vector<float>{0.4f, 0.6f});
    b.initializer("var", onnx_type::float32, {2}, std::vector<float>{0.8f, 1.2f});
    b.node("BatchNormalization", {"x", "g", "be", "mu", "var"}, {"n"}, {attr_int("spatial", 1)});
    b.node("Reshape", {"n", "shape"}, {"r"});
    b.initializer("shape", onnx_type::int64, {2}, std::vector<std::int64_t>{1, 8});
    b.node("Dropout", {"r"}, {"d"}, {attr_float("ratio", 0.5f)});
    b.initializer("w", onnx_type::float32, {8, 4}, w);
    b.node("MatMul", {"d", "w"}, {"y"});
    b.output("y", onnx_type::float32, {1, 4});
    check_quantized(b.build(), "x", {1, 2, 2, 2}, {"A16W8", false, 0.999});
  }
}

/// Upsample (opset 7: scales attribute, 9: scales input) and Resize-10 become Resize-11+ with
/// asymmetric coordinates and, for nearest, floor rounding. Oracle: ONNX Runtime runs the old
/// node alone at its own opset and the written Resize alone at opset 21 on the same input; the
/// outputs are identical (nearest and linear, integer and fractional scales).
TEST_CASE("raising the opset carries Upsample and Resize-10 to Resize (the same values in ORT)") {
  struct variant {
    const char* op;
    int opset;
    const char* mode;
  };
  const std::vector<float> scales{1.0f, 1.0f, 2.0f, 1.5f};
  for (const variant v : {variant{"Upsample", 7, "nearest"}, variant{"Upsample", 9, "nearest"},
                          variant{"Upsample", 9, "linear"}, variant{"Resize", 10, "nearest"},
                          variant{"Resize", 10, "linear"}}) {
    CAPTURE(std::string(v.op));
    CAPTURE(v.opset);
    CAPTURE(std::string(v.mode));
    // The old node on its own, at its opset.
    auto old_node = [&](model_builder& b, const std::string& in, const std::string& out) {
      if (v.opset == 7) {
        b.node(v.op, {in}, {out}, {attr_floats("scales", scales), attr_string("mode", v.mode)});
      } else {
        b.initializer("sc", onnx_type::float32, {4}, scales);
        b.node(v.op, {in, "sc"}, {out}, {attr_string("mode", v.mode)});
      }
    };
    // x -> Conv -> Upsample / Resize -> Relu, quantized with int16 activations (opset 21).
    model_builder fb(v.opset, v.opset <= 8 ? 3 : 5);
    fb.input("x", onnx_type::float32, {1, 2, 3, 3});
    fb.initializer("w", onnx_type::float32, {2, 2, 1, 1},
                   std::vector<float>{0.5f, -0.3f, 0.8f, 0.2f});
    fb.node("Conv", {"x", "w"}, {"c"});
    old_node(fb, "c", "u");
    fb.node("Relu", {"u"}, {"y"});
    fb.output("y", onnx_type::float32, {1, 2, 6, 4});
    const fs::path dir = work_dir();
    save_proto(fb.build(), dir / "upsample_float.onnx");
    // A16W8 raises the model to 21 (Resize-11+ form); A8W8 only to 10, where Resize-10 (X,
    // scales) already has the old rules.
    for (const char* preset : {"A16W8", "A8W8"}) {
      CAPTURE(std::string(preset));
      std::vector<qo::calib_sample> calib{sample_for("x", {1, 2, 3, 3}, 100)};
      qo::memory_reader reader(calib);
      const auto r = qo::quantize_model(dir / "upsample_float.onnx", dir / "upsample_q.onnx",
                                        qo::get_default_config(preset), reader);
      const std::int64_t to = std::string(preset) == "A16W8" ? 21 : std::max(10, v.opset);
      CHECK(r.opset_after == to);
      const auto qm = load_proto(dir / "upsample_q.onnx");
      const ::onnx::NodeProto* rs = nullptr;
      for (const auto& n : qm.graph().node())
        rs = n.op_type() == "Resize" ? &n : rs;
      REQUIRE(rs != nullptr);
      REQUIRE(rs->input_size() == (to >= 11 ? 3 : 2));
      std::map<std::string, std::string> attrs;
      for (const auto& a : rs->attribute())
        attrs[a.name()] = a.s();
      CHECK(attrs["mode"] == v.mode);
      if (to >= 11) {
        CHECK(attrs["coordinate_transformation_mode"] == "asymmetric");
        CHECK(attrs.contains("nearest_mode") == (std::string(v.mode) == "nearest"));
      } else {
        CHECK(attrs.size() == 1);
      }
      if (!ort_available()) {
        MESSAGE("skipped ORT comparison: " << ort_unavailable_reason());
        continue;
      }
      // The written Resize alone at the written opset, with its roi and scales.
      model_builder nb(static_cast<int>(to));
      nb.input("in", onnx_type::float32, {1, 2, 3, 3});
      nb.output("out", onnx_type::float32, {1, 2, 6, 4});
      ::onnx::ModelProto alone = nb.build();
      for (int k = 1; k < rs->input_size(); ++k) {
        const auto* t = find_init(qm, rs->input(k));
        REQUIRE_MESSAGE(t != nullptr, rs->input(k));
        *alone.mutable_graph()->add_initializer() = *t;
      }
      ::onnx::NodeProto& copy = *alone.mutable_graph()->add_node();
      copy = *rs;
      copy.set_input(0, "in");
      copy.set_output(0, "out");
      model_builder ob(v.opset, v.opset <= 8 ? 3 : 5);
      ob.input("in", onnx_type::float32, {1, 2, 3, 3});
      old_node(ob, "in", "out");
      ob.output("out", onnx_type::float32, {1, 2, 6, 4});
      const auto x = random_floats(18, 77, -2.0f, 2.0f);
      const auto want =
          run_ort(ob.build(), {npy_array::from(x, {1, 2, 3, 3})}).at("out").values<float>();
      const auto got = run_ort(alone, {npy_array::from(x, {1, 2, 3, 3})}).at("out").values<float>();
      CHECK(got == want);
    }
  }
}

TEST_CASE("an Upsample the opset raise cannot carry (mode 'cubic') is an error naming it") {
  // Upsample knows nearest and linear only; the error comes before any file is written.
  model_builder fb(9, 5);
  fb.input("x", onnx_type::float32, {1, 2, 3, 3});
  fb.initializer("w", onnx_type::float32, {2, 2, 1, 1},
                 std::vector<float>{0.5f, -0.3f, 0.8f, 0.2f});
  fb.node("Conv", {"x", "w"}, {"c"});
  fb.initializer("sc", onnx_type::float32, {4}, std::vector<float>{1.0f, 1.0f, 2.0f, 2.0f});
  fb.node("Upsample", {"c", "sc"}, {"y"}, {attr_string("mode", "cubic")});
  fb.output("y", onnx_type::float32, {1, 2, 6, 6});
  ::onnx::ModelProto m = fb.build();
  m.mutable_graph()->mutable_node(1)->set_name("up1");
  const fs::path dir = work_dir();
  save_proto(m, dir / "upsample_cubic.onnx");
  const fs::path out = dir / "upsample_cubic_q.onnx";
  fs::remove(out);
  qo::memory_reader r({sample_for("x", {1, 2, 3, 3}, 1)});
  const std::string text = error_text([&] {
    qo::quantize_model(dir / "upsample_cubic.onnx", out, qo::get_default_config("A16W8"), r);
  });
  CAPTURE(text);
  CHECK(text.find("up1") != std::string::npos);
  CHECK(text.find("cubic") != std::string::npos);
  CHECK(!fs::exists(out));
}

/// A Loop body at opset 11 holds nodes whose signatures change on the way to 21 (Unsqueeze and
/// Squeeze take their axes as an input from 13): the raise must rewrite the body too, or ORT
/// refuses the model. The body also reads a value of the main graph.
TEST_CASE("raising the opset to 21 rewrites the nodes inside a Loop body") {
  model_builder body(11, 6);
  body.input("i", onnx_type::int64, {});
  body.input("c", onnx_type::boolean, {});
  body.input("s", onnx_type::float32, {2, 4});
  body.node("Unsqueeze", {"s"}, {"u"}, {attr_ints("axes", {0})});
  body.node("Squeeze", {"u"}, {"q"}, {attr_ints("axes", {0})});
  body.node("Add", {"q", "m"}, {"s_next"});  // m: the main graph's MatMul output
  body.node("Identity", {"c"}, {"c_next"});
  body.output("c_next", onnx_type::boolean, {});
  body.output("s_next", onnx_type::float32, {2, 4});
  model_builder b(11, 6);
  b.input("x", onnx_type::float32, {2, 8});
  b.initializer("w", onnx_type::float32, {8, 4}, random_floats(8 * 4, 31));
  b.initializer("trips", onnx_type::int64, {}, std::vector<std::int64_t>{3});
  b.node("MatMul", {"x", "w"}, {"m"});
  b.node("Loop", {"trips", "", "m"}, {"y"});
  b.output("y", onnx_type::float32, {2, 4});
  ::onnx::ModelProto m = b.build();
  auto* attr = m.mutable_graph()->mutable_node(1)->add_attribute();
  attr->set_name("body");
  attr->set_type(::onnx::AttributeProto::GRAPH);
  ::onnx::GraphProto& g = *attr->mutable_g();
  g = body.build().graph();
  // The iteration number and the conditions are scalars (a known shape of rank 0: ORT insists).
  g.mutable_input(0)->mutable_type()->mutable_tensor_type()->mutable_shape();
  g.mutable_input(1)->mutable_type()->mutable_tensor_type()->mutable_shape();
  g.mutable_output(0)->mutable_type()->mutable_tensor_type()->mutable_shape();
  check_quantized(m, "x", {2, 8}, {"A16W8", false, 0.999});
}

/// An If at opset 13 whose branches hold ReduceMean / ReduceMax with an axes attribute: crossing
/// 18 (A16W8 raises to 21) those take the axes as an input, inside the branches too.
TEST_CASE("raising the opset past 18 rewrites the Reduce nodes inside If branches") {
  auto branch = [](const std::string& op, const std::string& out) {
    model_builder br(13, 7);
    br.node(op, {"m"}, {out}, {attr_ints("axes", {1}), attr_int("keepdims", 1)});
    br.output(out, onnx_type::float32, {2, 1});
    return br.build().graph();
  };
  model_builder b(13, 7);
  b.input("x", onnx_type::float32, {2, 8});
  b.initializer("w", onnx_type::float32, {8, 4}, random_floats(8 * 4, 33));
  b.initializer("cond", onnx_type::boolean, {}, std::vector<std::uint8_t>{1});
  b.node("MatMul", {"x", "w"}, {"m"});
  b.node("If", {"cond"}, {"y"});
  b.output("y", onnx_type::float32, {2, 1});
  ::onnx::ModelProto m = b.build();
  auto* node = m.mutable_graph()->mutable_node(1);
  for (const auto& [name, op] : {std::pair<std::string, std::string>{"then_branch", "ReduceMean"},
                                 {"else_branch", "ReduceMax"}}) {
    auto* attr = node->add_attribute();
    attr->set_name(name);
    attr->set_type(::onnx::AttributeProto::GRAPH);
    *attr->mutable_g() = branch(op, name + "_out");
  }
  check_quantized(m, "x", {2, 8}, {"A16W8", false, 0.999});
}

/// If branches read main-graph values that no main-graph node reads once the float passes and
/// the weight quantization are done (silero VAD's decoder If reads a Constant whose other readers
/// constant folding removes): a Constant retired by folding (k), the output of an Identity the
/// passes remove (mi) and a float weight the quantizer replaces by its codes (w). Each must
/// stay, with its name, for the branch; ORT refused or we failed on each before.
TEST_CASE("values read only inside If branches survive the graph passes and weight quantization") {
  const std::vector<float> k{0.5f, -1.0f, 2.0f, 0.25f}, k2{1.5f, 0.5f, -0.5f, 2.0f};
  model_builder then_b(13, 7);
  then_b.node("Add", {"mi", "k"}, {"t1"});
  then_b.node("MatMul", {"x", "w"}, {"t2"});
  then_b.node("Add", {"t1", "t2"}, {"then_out"});
  then_b.output("then_out", onnx_type::float32, {2, 4});
  model_builder else_b(13, 7);
  else_b.node("Mul", {"mi", "k"}, {"else_out"});
  else_b.output("else_out", onnx_type::float32, {2, 4});
  model_builder b(13, 7);
  b.input("x", onnx_type::float32, {2, 8});
  b.initializer("w", onnx_type::float32, {8, 4}, random_floats(8 * 4, 35));
  b.initializer("cond", onnx_type::boolean, {}, std::vector<std::uint8_t>{1});
  b.node("Constant", {}, {"k"}, {attr_floats("value_floats", k)});
  b.node("Constant", {}, {"k2"}, {attr_floats("value_floats", k2)});
  b.node("Mul", {"k", "k2"}, {"kk"});  // folded: k has no main-graph reader after it
  b.node("MatMul", {"x", "w"}, {"m"});
  b.node("Identity", {"m"}, {"mi"});  // read by the branches only
  b.node("Add", {"m", "kk"}, {"a"});
  b.node("If", {"cond"}, {"yi"});
  b.node("Add", {"yi", "a"}, {"y"});
  b.output("y", onnx_type::float32, {2, 4});
  ::onnx::ModelProto m = b.build();
  auto* node = m.mutable_graph()->mutable_node(6);
  REQUIRE(node->op_type() == "If");
  for (const auto& [name, g] :
       {std::pair<std::string, ::onnx::GraphProto>{"then_branch", then_b.build().graph()},
        {"else_branch", else_b.build().graph()}}) {
    auto* attr = node->add_attribute();
    attr->set_name(name);
    attr->set_type(::onnx::AttributeProto::GRAPH);
    *attr->mutable_g() = g;
  }
  check_quantized(m, "x", {2, 8}, {"A8W8", false, 0.99});
  check_quantized(m, "x", {2, 8}, {"A16W8", true, 0.999});
}

/// A model whose only quantizable node sits in an If branch: nothing is quantized (static
/// quantization covers the main graph, as in Quark), and the summary says so instead of an empty
/// list: the branch's node count (1 MatMul + 1 Identity) and a "none" line.
TEST_CASE("a model whose work sits inside an If is written float, and the summary says why") {
  model_builder then_b(13, 7);
  then_b.node("MatMul", {"x", "w"}, {"then_out"});
  then_b.output("then_out", onnx_type::float32, {2, 4});
  model_builder else_b(13, 7);
  else_b.node("Identity", {"z"}, {"else_out"});
  else_b.output("else_out", onnx_type::float32, {2, 4});
  model_builder b(13, 7);
  b.input("x", onnx_type::float32, {2, 8});
  b.initializer("w", onnx_type::float32, {8, 4}, random_floats(8 * 4, 36));
  b.initializer("z", onnx_type::float32, {2, 4}, std::vector<float>(8, 0.0f));
  b.initializer("cond", onnx_type::boolean, {}, std::vector<std::uint8_t>{1});
  b.node("If", {"cond"}, {"y"});
  b.output("y", onnx_type::float32, {2, 4});
  ::onnx::ModelProto m = b.build();
  for (const auto& [name, g] :
       {std::pair<std::string, ::onnx::GraphProto>{"then_branch", then_b.build().graph()},
        {"else_branch", else_b.build().graph()}}) {
    auto* attr = m.mutable_graph()->mutable_node(0)->add_attribute();
    attr->set_name(name);
    attr->set_type(::onnx::AttributeProto::GRAPH);
    *attr->mutable_g() = g;
  }
  const fs::path dir = work_dir();
  save_proto(m, dir / "if_only.onnx");
  std::vector<qo::calib_sample> calib{sample_for("x", {2, 8}, 9)};
  qo::memory_reader reader(calib);
  const qo::quantize_report r = qo::quantize_model(dir / "if_only.onnx", dir / "if_only_q.onnx",
                                                   qo::get_default_config("A8W8"), reader);
  CHECK(r.tensors.empty());
  const std::string table = qo::summary_table(r);
  CHECK(table.find("note: graph: 2 nodes inside If / Loop / Scan bodies stay float") !=
        std::string::npos);
  CHECK(table.find("  none: the model is written unchanged") != std::string::npos);
  const ::onnx::ModelProto q = load_proto(dir / "if_only_q.onnx");
  REQUIRE(q.graph().node_size() == 1);
  CHECK(q.graph().node(0).op_type() == "If");
}

/// A per-tensor weight whose largest value sets a scale that sends most others to code 0 gets a
/// note naming it. Hand-derived: A8W8 weights are symmetric int8 from min / max, so the scale of
/// {127, 0.3, -0.4, 0.6, 0.2, 0.1, -0.5, 0.7} is 127 / 127 = 1, and |w| <= 0.5 (0.5 rounds half
/// to even, to 0) vanishes: 5 of the 8 non-zero values, 62%. With per-channel weights (columns
/// of the MatMul weight: axis 1) or without the large value no note.
TEST_CASE("a per-tensor weight that quantizes mostly to zero is named in a note") {
  auto notes_for = [](const std::vector<float>& w, bool per_channel) {
    model_builder b(13, 7);
    b.input("x", onnx_type::float32, {1, 4});
    b.initializer("w", onnx_type::float32, {4, 2}, w);
    b.node("MatMul", {"x", "w"}, {"y"});
    b.output("y", onnx_type::float32, {1, 2});
    const fs::path dir = work_dir();
    save_proto(b.build(), dir / "zeroed.onnx");
    qo::qconfig cfg = qo::get_default_config("A8W8");
    if (per_channel)
      cfg.global_config.weight->quant_granularity = qo::granularity::channel;
    std::vector<qo::calib_sample> calib{sample_for("x", {1, 4}, 7)};
    qo::memory_reader reader(calib);
    const qo::quantize_report r =
        qo::quantize_model(dir / "zeroed.onnx", dir / "zeroed_q.onnx", cfg, reader);
    std::vector<std::string> hits;
    for (const auto& n : r.notes) {
      if (n.find("quantize to 0") != std::string::npos)
        hits.push_back(n);
    }
    return hits;
  };
  const std::vector<float> w{127.0f, 0.3f, -0.4f, 0.6f, 0.2f, 0.1f, -0.5f, 0.7f};
  const auto hits = notes_for(w, false);
  REQUIRE(hits.size() == 1);
  CHECK(hits[0].starts_with("weight 'w' of node 'n0' (MatMul): 62% of its non-zero values"));
  CHECK(hits[0].find("per-tensor scale (1)") != std::string::npos);
  CHECK(notes_for(w, true).empty());
  std::vector<float> small = w;
  small[0] = 0.9f;  // scale 0.9 / 127: nothing vanishes
  CHECK(notes_for(small, false).empty());
}

TEST_CASE("value_info entries that contradict the computed shapes are not kept") {
  // Found by bench/onnx/ort_differential_sweep.py: a PaddleOCR cls with an intermediate's
  // value_info declared rank 1 (and its input's shape left out) was quantized with the entry
  // kept, and ONNX Runtime refused the quantized model ("Input tensor must have at least 3
  // dimensions"). A stale fixed dimension is dropped too; an entry that agrees is kept.
  model_builder b(13, 7);
  b.input("x", onnx_type::float32, {1, 2, 8, 8});
  b.initializer("w", onnx_type::float32, {2, 2, 3, 3}, random_floats(36, 4));
  b.node("Conv", {"x", "w"}, {"c"}, {attr_ints("pads", {1, 1, 1, 1})});
  b.node("Relu", {"c"}, {"r"});
  b.node("Conv", {"r", "w"}, {"c2"}, {attr_ints("pads", {1, 1, 1, 1})});
  b.node("Relu", {"c2"}, {"y0"});
  b.node("Sigmoid", {"x"}, {"s"});
  b.node("Add", {"y0", "s"}, {"y"});
  b.output("y", onnx_type::float32, {1, 2, 8, 8});
  ::onnx::ModelProto fm = b.build();
  fm.mutable_graph()->mutable_input(0)->mutable_type()->mutable_tensor_type()->clear_shape();
  auto declare = [&](const std::string& name, std::vector<std::int64_t> dims) {
    auto* v = fm.mutable_graph()->add_value_info();
    v->set_name(name);
    auto* t = v->mutable_type()->mutable_tensor_type();
    t->set_elem_type(onnx_type::float32);
    for (const auto d : dims)
      t->mutable_shape()->add_dim()->set_dim_value(d);
  };
  declare("r", {1});            // rank 1 for a rank-4 value
  declare("c2", {1, 2, 6, 6});  // a stale fixed dimension
  declare("s", {1, 2, 8, 8});   // right
  qo::memory_reader reader({sample_for("x", {1, 2, 8, 8}, 3)});
  qo::quantize_report r;
  const ::onnx::ModelProto qm =
      to_proto(qo::quantize_model(to_model(fm), qo::get_default_config("A8W8"), reader, &r));
  std::vector<std::string> kept;
  for (const auto& v : qm.graph().value_info())
    kept.push_back(v.name());
  CHECK(kept == std::vector<std::string>{"s"});
  CHECK(std::count_if(r.notes.begin(), r.notes.end(), [](const std::string& n) {
          return n.starts_with(
              "value_info: 2 entries dropped whose shape contradicts what the "
              "model computes ('r' declared [1], computed [1x2x8x8]");
        }) == 1);
  if (!ort_available())
    return;
  const auto in = npy_array::from(random_floats(128, 5), {1, 2, 8, 8});
  CHECK_THROWS(run_ort(fm, {in}));  // ORT refuses the float model for the rank-1 declaration
  CHECK_NOTHROW(run_ort(qm, {in}));
}

TEST_CASE("an initializer read as a weight by one node and as an activation by another") {
  // Found by bench/onnx/ort_differential_sweep.py --node-edits: a PaddleOCR det whose Conv
  // weight was also wired into an Add was quantized with two nodes both writing
  // '<weight>_DequantizeLinear_Output', a model ONNX Runtime refuses. The weight's pair serves
  // both readers, as in Quark (a weight's registration wins over an activation's).
  model_builder b(13, 7);
  b.input("x", onnx_type::float32, {8, 8});
  b.initializer("w", onnx_type::float32, {8, 8}, random_floats(64, 11));
  b.node("MatMul", {"x", "w"}, {"m"});
  b.node("Add", {"m", "w"}, {"y"});  // w read as the Add's activation input
  b.output("y", onnx_type::float32, {8, 8});
  const ::onnx::ModelProto fm = b.build();
  for (const char* preset : {"A8W8", "XINT8", "U8S8", "A16W8", "BF16"}) {
    CAPTURE(std::string(preset));
    qo::memory_reader reader({sample_for("x", {8, 8}, 3), sample_for("x", {8, 8}, 4)});
    const ::onnx::ModelProto qm =
        to_proto(qo::quantize_model(to_model(fm), qo::get_default_config(preset), reader));
    std::set<std::string> produced;
    bool unique = true;
    std::string matmul_w, add_w;
    for (const auto& n : qm.graph().node()) {
      for (const auto& o : n.output())
        unique = produced.insert(o).second && unique;
      if (n.op_type() == "MatMul")
        matmul_w = n.input(1);
      if (n.op_type() == "Add")
        add_w = n.input(1);
    }
    CHECK(unique);
    CHECK(matmul_w != "w");    // the weight is quantized...
    CHECK(add_w == matmul_w);  // ...and the Add reads the same dequantized value
    if (!ort_available())
      continue;
    const auto in = npy_array::from(random_floats(64, 99), {8, 8});
    const auto ref = run_ort(fm, {in}).begin()->second.values<float>();
    const auto got = run_ort(qm, {in}).begin()->second.values<float>();
    CHECK(quark::metrics::cosine(ref, got) >= 0.99);
  }
}

TEST_CASE("a float model computing +-Inf is refused by every preset, power-of-two MinMSE too") {
  // Found by bench/onnx/ort_differential_sweep.py --node-edits (a PaddleOCR cls whose Mul became
  // a Div by zero): power-of-two MinMSE maps +-Inf to +-FLT_MAX as Quark's collector does, and
  // VINT8 / XINT8 wrote the value's scale as +Inf (and a weight scale of 2^-127 aligned to it).
  // d = (x - 0.5) / (x - x) is +-Inf everywhere.
  model_builder b(13, 7);
  b.input("x", onnx_type::float32, {1, 2, 4, 4});
  b.initializer("half", onnx_type::float32, {}, std::vector<float>{0.5f});
  b.initializer("w", onnx_type::float32, {2, 2, 1, 1}, std::vector<float>{1.0f, 0.5f, 0.25f, 2.0f});
  b.node("Sub", {"x", "x"}, {"z"});
  b.node("Sub", {"x", "half"}, {"s"});
  b.node("Div", {"s", "z"}, {"d"});
  b.node("Conv", {"d", "w"}, {"c"});
  b.node("Relu", {"c"}, {"y"});
  b.output("y", onnx_type::float32, {1, 2, 4, 4});
  const qo::model fm = to_model(b.build());
  for (const char* preset : {"VINT8", "XINT8", "A8W8", "S8S8"}) {
    CAPTURE(std::string(preset));
    qo::memory_reader reader({sample_for("x", {1, 2, 4, 4}, 3)});
    CHECK_THROWS_WITH_AS(qo::quantize_model(fm, qo::get_default_config(preset), reader),
                         doctest::Contains("quark.calib.infinite_input: calibrating tensor 'd': "
                                           "histogram of data containing +-Inf"),
                         qo::frontend_error);
  }
}

/// Per-activation BatchNormalization (opset 7's spatial 0): neither converted to a depthwise Conv
/// nor folded (both once took its [C,H,W] parameters for C channels), refused by name.
TEST_CASE("BatchNormalization with spatial 0 is refused, naming the node") {
  model_builder b(7, 3);
  b.input("x", onnx_type::float32, {1, 2, 2, 2});
  for (const char* n : {"g", "be", "mu", "var"})
    b.initializer(n, onnx_type::float32, {2, 2, 2}, random_floats(8, 50, 0.5f, 1.5f));
  b.node("BatchNormalization", {"x", "g", "be", "mu", "var"}, {"n"}, {attr_int("spatial", 0)});
  b.node("Relu", {"n"}, {"y"});
  b.output("y", onnx_type::float32, {1, 2, 2, 2});
  const fs::path dir = work_dir();
  const fs::path fin = dir / "bn_spatial0.onnx";
  const fs::path fout = dir / "bn_spatial0_a16w8.onnx";
  save_proto(b.build(), fin);
  const std::string msg = quantize_error(fin, fout, "A16W8", sample_for("x", {1, 2, 2, 2}, 1));
  CHECK(msg.find("quark.onnx.unsupported_op") == 0);
  CHECK(msg.find("node 'n0' (BatchNormalization)") != std::string::npos);
  CHECK(msg.find("spatial 0") != std::string::npos);
  CHECK_FALSE(fs::exists(fout));
}

/// Found by the node-edit sweep at opset 21 (session 54): a PaddleOCR det whose ConvTranspose
/// read a scalar Constant as its weight crashed quark_quantize inside libonnx 1.12's shape
/// inference (it reads dim(1) of the weight whatever its rank). ORT refuses such a model too.
TEST_CASE("a ConvTranspose whose weight rank is wrong is refused, not a crash") {
  for (const std::vector<std::int64_t>& dims :
       std::vector<std::vector<std::int64_t>>{{}, {2}, {2, 2}, {2, 2, 2}, {2, 2, 2, 2, 2}}) {
    CAPTURE(dims.size());
    std::size_t n = 1;
    for (const auto d : dims)
      n *= static_cast<std::size_t>(d);
    for (const int opset : {11, 21}) {
      CAPTURE(opset);
      model_builder b(opset);
      b.input("x", onnx_type::float32, {1, 2, 4, 4});
      b.initializer("w", onnx_type::float32, dims, random_floats(n, 3));
      b.node("ConvTranspose", {"x", "w"}, {"y"});
      b.output("y", onnx_type::float32);
      const fs::path dir = work_dir();
      const fs::path fin = dir / "ct_rank.onnx";
      const fs::path fout = dir / "ct_rank_q.onnx";
      save_proto(b.build(), fin);
      const std::string msg = quantize_error(fin, fout, "A8W8", sample_for("x", {1, 2, 4, 4}, 1));
      CHECK(msg.find("quark.onnx.shape") == 0);
      CHECK(msg.find("(ConvTranspose): weight rank differs from input rank") != std::string::npos);
      CHECK_FALSE(fs::exists(fout));
      if (ort_available()) {
        CHECK_THROWS_AS(run_ort(b.build(), {npy_array::from(random_floats(32, 1), {1, 2, 4, 4})}),
                        std::runtime_error);
      }
    }
  }
}

/// ORT has no kernels for these versions: it runs only the quantized model (opset 21).
TEST_CASE("raising the opset from 5 drops consumed_inputs and is_test") {
  model_builder b(5, 3);
  b.input("x", onnx_type::float32, {2, 8});
  b.node("Relu", {"x"}, {"r"}, {attr_ints("consumed_inputs", {0})});
  b.initializer("g", onnx_type::float32, {8}, random_floats(8, 42, 0.5f, 1.5f));
  b.initializer("be", onnx_type::float32, {8}, random_floats(8, 43, -0.2f, 0.2f));
  b.initializer("mu", onnx_type::float32, {8}, random_floats(8, 44, -0.2f, 0.2f));
  b.initializer("var", onnx_type::float32, {8}, random_floats(8, 45, 0.5f, 1.5f));
  b.node("BatchNormalization", {"r", "g", "be", "mu", "var"}, {"n"},
         {attr_int("is_test", 1), attr_ints("consumed_inputs", {0, 0, 0, 1, 1})});
  b.node("Dropout", {"n"}, {"d"}, {attr_int("is_test", 1), attr_float("ratio", 0.5f)});
  b.initializer("w", onnx_type::float32, {8, 4}, random_floats(32, 41));
  b.node("MatMul", {"d", "w"}, {"y"});
  b.output("y", onnx_type::float32, {2, 4});
  const fs::path dir = work_dir();
  const fs::path fin = dir / "relu_opset5.onnx";
  const fs::path fout = dir / "relu_opset5_a16w8.onnx";
  save_proto(b.build(), fin);
  qo::memory_reader reader({sample_for("x", {2, 8}, 1), sample_for("x", {2, 8}, 2)});
  const auto r = qo::quantize_model(fin, fout, qo::get_default_config("A16W8"), reader);
  CHECK(r.opset_after == 21);
  const ::onnx::ModelProto qm = load_proto(fout);
  for (const auto& n : qm.graph().node()) {
    for (const auto& a : n.attribute()) {
      CHECK(a.name() != "consumed_inputs");
      CHECK(a.name() != "is_test");
    }
  }
  if (!ort_available())
    return;
  const auto s = sample_for("x", {2, 8}, 9);
  const auto ort_q = run_in_ort(fout, s);
  const auto ours_q = run_ours(fout, s);
  CHECK(quark::metrics::cosine(ort_q, ours_q) >= 0.99999);
}

namespace {

/// A reader that fails the test if it is ever read: for checks that must come before calibration.
struct untouched_reader : qo::calibration_data_reader {
  std::optional<qo::calib_sample> next() override {
    FAIL("the calibration data was read");
    return std::nullopt;
  }
};

}  // namespace

TEST_CASE("bad inputs: clear errors and no output file") {
  const fs::path dir = work_dir();
  const fs::path fin = dir / "float_bad.onnx";
  save_proto(conv_model(), fin);
  const qo::qconfig cfg = qo::get_default_config("A8W8");
  const fs::path out = dir / "bad_out.onnx";
  SUBCASE("unknown input name in a sample") {
    qo::memory_reader r({{{"nope", qo::tensor::from_floats({1}, std::vector<float>{1.0f})}}});
    CHECK(error_id([&] { qo::quantize_model(fin, out, cfg, r); }) == "quark.calib_data.input");
  }
  SUBCASE("wrong shape") {
    qo::memory_reader r({sample_for("x", {1, 3, 9, 9}, 1)});
    CHECK(error_id([&] { qo::quantize_model(fin, out, cfg, r); }) == "quark.calib_data.shape");
  }
  SUBCASE("NaN or Inf in a calibration sample, for every kind of calibration") {
    // Without the check, NaN passes without a word (the Percentile histograms of A8W8 and
    // U8S8 skip it, XINT8's pof2 MinMSE reads it as 0) and +Inf fails later, in the histogram
    // of 'x', without naming the sample or the element.
    for (const std::string preset : {"A8W8", "XINT8", "U8S8"}) {
      for (const float v :
           {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
        CAPTURE(preset);
        CAPTURE(v);
        qo::calib_sample bad = sample_for("x", {1, 3, 8, 8}, 2);
        bad.at("x").data<float>()[70] = v;  // [0, 1, 0, 6]
        qo::memory_reader r({sample_for("x", {1, 3, 8, 8}, 1), bad});
        const std::string text =
            error_text([&] { qo::quantize_model(fin, out, qo::get_default_config(preset), r); });
        CAPTURE(text);
        CHECK(text.rfind("quark.calib_data.non_finite: calibration sample 1: input 'x' holds ",
                         0) == 0);
        CHECK(text.find(" at element 70 [0, 1, 0, 6] (1 non-finite value in all)") !=
              std::string::npos);
      }
    }
  }
  SUBCASE("empty calibration set") {
    qo::memory_reader r({});
    CHECK(error_id([&] { qo::quantize_model(fin, out, cfg, r); }) == "quark.calib_data.empty");
  }
  SUBCASE("output folder missing") {
    qo::memory_reader r({sample_for("x", {1, 3, 8, 8}, 1)});
    CHECK(error_id([&] { qo::quantize_model(fin, dir / "missing" / "q.onnx", cfg, r); }) ==
          "quark.quantize.output_dir");
    CHECK_FALSE(fs::exists(dir / "missing"));
  }
  SUBCASE("output folder a file, output a folder, output folder unwritable: before calibrating") {
    untouched_reader r;  // each check comes before calibration
    const fs::path file = dir / "a_file";
    std::ofstream(file) << "x";
    CHECK(error_text([&] { qo::quantize_model(fin, file / "q.onnx", cfg, r); }) ==
          "quark.quantize.output_dir: output folder '" + file.string() + "' is not a folder");
    const fs::path folder = dir / "a_folder.onnx";
    fs::create_directories(folder);
    CHECK(error_text([&] { qo::quantize_model(fin, folder, cfg, r); }) ==
          "quark.quantize.output_dir: output '" + folder.string() +
              "' is a folder, not a file path");
    // procfs takes no new file (whoever runs the test, root included).
    const std::string text = error_text([&] { qo::quantize_model(fin, "/proc/q.onnx", cfg, r); });
    CHECK(text.rfind("quark.onnx.save: '/proc/q.onnx': cannot create a temporary file in its "
                     "folder: ",
                     0) == 0);
    CHECK(fs::is_empty(folder));
  }
  SUBCASE("a missing or empty evaluation folder: named as such, before calibrating") {
    untouched_reader r;
    const fs::path empty = dir / "empty_eval";
    fs::create_directories(empty);
    qo::qconfig c = cfg;
    c.extra_options.set("EvalMetrics", true);
    c.extra_options.set("EvalDataReader", empty.string());
    CHECK(error_text([&] { qo::quantize_model(fin, out, c, r); }) ==
          "quark.calib_data.empty: evaluation folder '" + empty.string() +
              "' holds no sample (.npy files, .npz files or one sub-folder per sample)");
    c.extra_options.set("EvalDataReader", (dir / "no_such_eval").string());
    CHECK(error_text([&] { qo::quantize_model(fin, out, c, r); }) ==
          "quark.calib_data.folder: evaluation folder '" + (dir / "no_such_eval").string() +
              "' does not exist");
  }
  SUBCASE("input path as output") {
    qo::memory_reader r({sample_for("x", {1, 3, 8, 8}, 1)});
    CHECK(error_id([&] { qo::quantize_model(fin, fin, cfg, r); }) == "quark.quantize.same_path");
  }
  SUBCASE("unsupported operator") {
    model_builder b(13);
    b.input("x", onnx_type::float32, {4});
    b.node("NoSuchOp", {"x"}, {"y"});
    b.output("y", onnx_type::float32, {4});
    const fs::path bad = dir / "unsupported.onnx";
    save_proto(b.build(), bad);
    qo::memory_reader r({sample_for("x", {4}, 1)});
    CHECK(error_id([&] { qo::quantize_model(bad, out, cfg, r); }) == "quark.onnx.unsupported_op");
  }
  SUBCASE("NaN or Inf in a weight or bias") {
    // Without the check, a NaN weight quantizes to the zero point and the written model
    // silently computes something else than the float model (which outputs NaN). Here the
    // non-finite values reach the activations and calibration fails first: the error names
    // the initializer all the same.
    for (const auto& [name, index, value, what] :
         {std::tuple<std::string, std::size_t, float, std::string>{
              "w2", 5, std::numeric_limits<float>::quiet_NaN(),
              "'w2' of node 'conv2' (Conv) holds NaN at element 5"},
          {"b1", 2, -std::numeric_limits<float>::infinity(),
           "'b1' of node 'conv1' (Conv) holds -Inf at element 2"}}) {
      ::onnx::ModelProto m = conv_model();
      for (auto& init : *m.mutable_graph()->mutable_initializer()) {
        if (init.name() != name)
          continue;
        std::vector<float> v(init.raw_data().size() / sizeof(float));
        REQUIRE(index < v.size());
        std::memcpy(v.data(), init.raw_data().data(), init.raw_data().size());
        v[index] = value;
        init.set_raw_data(
            std::string(reinterpret_cast<const char*>(v.data()), init.raw_data().size()));
      }
      const fs::path bad = dir / ("non_finite_" + name + ".onnx");
      save_proto(m, bad);
      qo::memory_reader r({sample_for("x", {1, 3, 8, 8}, 1)});
      const std::string text = error_text([&] { qo::quantize_model(bad, out, cfg, r); });
      CAPTURE(text);
      CHECK(text.rfind("quark.quantize.non_finite: ", 0) == 0);
      CHECK(text.find(what) != std::string::npos);
    }
  }
  SUBCASE("NaN in a quantized weight that calibration never sees") {
    // x -> Conv(w) -> y with w[3] NaN: y holds NaN, which A8W8's Percentile histogram skips
    // (as numpy's histogram does), so calibration passes and the weight stage refuses w.
    model_builder b(13);
    b.input("x", onnx_type::float32, {1, 2, 4, 4});
    std::vector<float> w = random_floats(8, 9, -0.5f, 0.5f);
    w[3] = std::numeric_limits<float>::quiet_NaN();
    b.initializer("w", onnx_type::float32, {4, 2, 1, 1}, w);
    b.node("Conv", {"x", "w"}, {"y"});
    b.output("y", onnx_type::float32, {1, 4, 4, 4});
    ::onnx::ModelProto m = b.build();
    m.mutable_graph()->mutable_node(0)->set_name("conv");
    const fs::path bad = dir / "nan_weight.onnx";
    save_proto(m, bad);
    qo::memory_reader r({sample_for("x", {1, 2, 4, 4}, 1)});
    const std::string text = error_text([&] { qo::quantize_model(bad, out, cfg, r); });
    CAPTURE(text);
    CHECK(text.rfind("quark.quantize.non_finite: weight 'w' of node 'conv' (Conv) holds NaN at "
                     "element 3: ",
                     0) == 0);
  }
  SUBCASE("an initializer that is entirely -Inf leaves its node float, as in Quark") {
    // y = Add(Conv(x), mask) with mask all -Inf (an additive mask): the Add stays float, the
    // Conv is quantized, and the model is written. One finite element in the mask makes it a
    // constant that needs a scale: quark.quantize.non_finite.
    for (const bool all : {true, false}) {
      CAPTURE(all);
      model_builder b(13);
      b.input("x", onnx_type::float32, {1, 2, 4, 4});
      b.initializer("w", onnx_type::float32, {4, 2, 1, 1}, random_floats(8, 9, -0.5f, 0.5f));
      std::vector<float> mask(64, -std::numeric_limits<float>::infinity());
      if (!all)
        mask[7] = 0.0f;
      b.initializer("mask", onnx_type::float32, {1, 4, 4, 4}, mask);
      b.node("Conv", {"x", "w"}, {"c"});
      b.node("Add", {"c", "mask"}, {"y"});
      b.output("y", onnx_type::float32, {1, 4, 4, 4});
      ::onnx::ModelProto m = b.build();
      m.mutable_graph()->mutable_node(0)->set_name("conv");
      m.mutable_graph()->mutable_node(1)->set_name("add");
      const fs::path in = dir / (all ? "mask_all.onnx" : "mask_some.onnx");
      save_proto(m, in);
      qo::qconfig q = qo::get_default_config("A8W8");
      q.extra_options.set("QuantizeAllOpTypes", true);
      q.extra_options.set("DebugMode", true);
      qo::memory_reader r({sample_for("x", {1, 2, 4, 4}, 1)});
      if (all) {
        const fs::path written = dir / "mask_all_q.onnx";
        const qo::quantize_report rep = qo::quantize_model(in, written, q, r);
        CHECK(rep.op_types.at("Add").kept_float == 1);
        CHECK(std::any_of(rep.notes.begin(), rep.notes.end(), [](const std::string& n) {
          return n == "debug: node 'add' (Add): float (reads 'mask', entirely +-Inf)";
        }));
        CHECK(rep.op_types.at("Conv").quantized == 1);
        const ::onnx::ModelProto qm = load_proto(written);
        for (const auto& n : qm.graph().node()) {
          if (n.op_type() == "QuantizeLinear")
            CHECK(n.input(0) != "mask");
        }
        if (ort_available()) {
          const auto s = sample_for("x", {1, 2, 4, 4}, 7);
          for (const auto& outs : {run_in_ort(written, s), run_ours(written, s)}) {
            REQUIRE(outs.size() == 64);
            for (const float v : outs)
              CHECK(v == -std::numeric_limits<float>::infinity());
          }
        }
      } else {
        const std::string text = error_text([&] { qo::quantize_model(in, out, q, r); });
        CAPTURE(text);
        CHECK(text.rfind("quark.quantize.non_finite: ", 0) == 0);
        CHECK(text.find("'mask' of node 'add' (Add) holds -Inf at element 0") != std::string::npos);
      }
    }
  }
  SUBCASE("random data on dynamic dims a pooling window outgrows: the error says why") {
    // x [?, 2, ?, ?] -> MaxPool 3x3 (no padding). Random data puts 1 in each dynamic dim, so
    // the 3x3 window cannot fit a 1x1 input: the runtime's error names the MaxPool, and
    // calibration adds the sample, its shapes and the missing RandomDataReaderInputShape. A
    // 2x2 shape still fails, but has no 1 past the batch, so no such hint; 3x3 quantizes.
    const auto pool_model = [&](std::int64_t k) {
      model_builder b(13);
      b.input("x", onnx_type::float32, {-1, 2, -1, -1});
      b.node("MaxPool", {"x"}, {"y"}, {attr_ints("kernel_shape", {k, k})});
      b.output("y", onnx_type::float32);
      const fs::path p = dir / ("dynamic_pool" + std::to_string(k) + ".onnx");
      save_proto(b.build(), p);
      return p;
    };
    const fs::path dyn = pool_model(3);
    qo::qconfig q = qo::get_default_config("A8W8");
    q.extra_options.set("UseRandomData", true);
    const auto with_shape = [&](long long h, long long w) {
      qo::qconfig c = q;
      c.extra_options.set(
          "RandomDataReaderInputShape",
          qo::option_value::object().set("x", qo::option_value::array({1, 2, h, w})));
      return c;
    };
    const auto text_of = [&](const qo::qconfig& c) {
      return error_text([&] {
        const auto reader = qo::default_reader(dyn, c);
        qo::quantize_model(dyn, out, c, *reader);
      });
    };
    const std::string unset = text_of(q);
    CAPTURE(unset);
    CHECK(unset.rfind("quark.onnx.shape: ", 0) == 0);
    CHECK(unset.find("MaxPool") != std::string::npos);
    CHECK(unset.find("(calibration sample 0, inputs 'x' [1x2x1x1]; the model leaves dims of 'x' "
                     "dynamic ([?x2x?x?])") != std::string::npos);
    CHECK(unset.find("RandomDataReaderInputShape") != std::string::npos);
    const std::string small = text_of(with_shape(2, 2));
    CAPTURE(small);
    CHECK(small.find("(calibration sample 0, inputs 'x' [1x2x2x2])") != std::string::npos);
    CHECK(small.find("RandomDataReaderInputShape") == std::string::npos);
    const fs::path fits = dir / "dynamic_pool_q.onnx";
    const qo::qconfig c = with_shape(3, 3);
    const auto reader = qo::default_reader(dyn, c);
    qo::quantize_report rep;
    CHECK_NOTHROW(rep = qo::quantize_model(dyn, fits, c, *reader));
    CHECK(fs::exists(fits));
    const auto dims_note = [](const qo::quantize_report& r) {
      return std::count_if(r.notes.begin(), r.notes.end(), [](const std::string& n) {
        return n.rfind("calibration data: input 'x' has dynamic dims ([?x2x?x?])", 0) == 0;
      });
    };
    CHECK(dims_note(rep) == 0);
    // The same graph with a 1x1 window runs on the 1x1 default: written, with a note that
    // the random data was [1x2x1x1].
    const fs::path dyn1 = pool_model(1);
    const auto reader1 = qo::default_reader(dyn1, q);
    const qo::quantize_report rep1 =
        qo::quantize_model(dyn1, dir / "dynamic_pool1_q.onnx", q, *reader1);
    CHECK(dims_note(rep1) == 1);
  }
  SUBCASE("unknown config key") {
    CHECK(error_id([] {
            (void)qo::config_from_json(R"({"extra_options": {"Int32Bais": false}})");
          }) == "quark.config.unknown_key");
  }
  CHECK_FALSE(fs::exists(out));
}

TEST_CASE("quantize_model: moving the model in gives the bytes and report of the copying form") {
  // quantize_model(path, path, ...) moves the model it loaded into the quantizer (one copy of
  // the weights less); the copying overload is the oracle and must leave its argument alone.
  const fs::path fin = work_dir() / "move_float.onnx";
  save_proto(matmul_model(), fin);
  std::vector<qo::calib_sample> calib;
  for (std::uint32_t i = 0; i < 3; ++i)
    calib.push_back(sample_for("x", {2, 8}, 40 + i));
  for (const char* preset : {"A8W8", "XINT8", "A16W8"}) {
    const std::string name = preset;
    CAPTURE(name);
    qo::qconfig cfg = qo::get_default_config(preset);
    const qo::model in = qo::model::load(fin);
    const std::string before = in.to_bytes();
    qo::memory_reader r1(calib);
    qo::quantize_report rep1;
    const qo::model copied = qo::quantize_model(in, cfg, r1, &rep1);
    CHECK(in.to_bytes() == before);
    qo::memory_reader r2(calib);
    qo::quantize_report rep2;
    const qo::model moved = qo::quantize_model(qo::model::load(fin), cfg, r2, &rep2);
    CHECK(moved.to_bytes() == copied.to_bytes());
    CHECK(qo::summary_table(rep2) == qo::summary_table(rep1));
    CHECK(copied.to_bytes() != before);  // it did quantize
  }
}

TEST_CASE(
    "normalizations: the scale a weight, InstanceNormalization's B an int32 bias, "
    "LayerNormalization's B a weight") {
  // Quark's QDQ registry: InstanceNormalization is ONNX Runtime's QDQNormalization (input 0 an
  // activation, the scale a weight, B an int32 bias with scale input scale x weight scale),
  // LayerNormalization Quark's QDQLayerNorm (the scale and B both weights, B per tensor, even
  // with QuantizeBias false). Scales and codes derived here from the A8W8 rule (int8 symmetric,
  // scale max|v| / 127).
  std::vector<qo::calib_sample> calib;
  for (std::uint32_t i = 0; i < 4; ++i)
    calib.push_back(sample_for("x", {2, 4, 3, 5}, 100 + i));
  auto quantize = [&](const qo::qconfig& cfg) {
    qo::memory_reader reader(calib);
    return qo::quantize_model(to_model(norm_model()), cfg, reader);
  };
  auto floats = [](const qo::model& m, const std::string& n) {
    const qo::tensor t = m.initializer(n);
    const auto d = t.data<float>();
    return std::vector<float>(d.begin(), d.end());
  };
  auto reads = [](const qo::model& m, const std::string& op, std::size_t k) {
    for (const auto& n : m.nodes()) {
      if (n.op_type == op)
        return n.inputs.at(k);
    }
    return std::string();
  };
  SUBCASE("per tensor, QuantizeBias true and false") {
    for (const bool quantize_bias : {true, false}) {
      CAPTURE(quantize_bias);
      qo::qconfig cfg = qo::get_default_config("A8W8");
      cfg.extra_options.set("QuantizeBias", quantize_bias);
      const qo::model q = quantize(cfg);
      CHECK(reads(q, "InstanceNormalization", 1) == "s_in_DequantizeLinear_Output");
      CHECK(reads(q, "LayerNormalization", 1) == "s_ln_DequantizeLinear_Output");
      CHECK(reads(q, "LayerNormalization", 2) == "b_ln_DequantizeLinear_Output");
      const std::vector<float> s_in{2.0f / 127.0f}, s_ln{1.2f / 127.0f}, s_bln{0.4f / 127.0f};
      CHECK(floats(q, "s_in_scale") == s_in);
      CHECK(codes_of(q.initializer("s_in_quantized")) == int8_codes(in_scale, s_in));
      CHECK(floats(q, "s_ln_scale") == s_ln);
      CHECK(codes_of(q.initializer("s_ln_quantized")) == int8_codes(ln_scale, s_ln));
      CHECK(floats(q, "b_ln_scale") == s_bln);
      CHECK(codes_of(q.initializer("b_ln_quantized")) == int8_codes(ln_bias, s_bln));
      if (quantize_bias) {
        CHECK(reads(q, "InstanceNormalization", 2) == "b_in_DequantizeLinear_Output");
        const float sb = floats(q, "x_scale").at(0) * s_in[0];
        CHECK(floats(q, "b_in_scale") == std::vector<float>{sb});
        const auto c = codes_of(q.initializer("b_in_quantized"));
        REQUIRE(c.size() == 4);
        CHECK(q.initializer("b_in_quantized").type() == quark::dtype_id::int32);
        for (std::size_t i = 0; i < 4; ++i)
          CHECK(c[i] == static_cast<std::int64_t>(std::nearbyint(in_bias[i] / sb)));
      } else {
        CHECK(reads(q, "InstanceNormalization", 2) == "b_in");
        CHECK(floats(q, "b_in") == in_bias);
      }
    }
  }
  SUBCASE("per channel: one scale per element on axis 0, the int32 bias per channel") {
    qo::qconfig cfg = qo::get_default_config("A8W8");
    cfg.global_config.weight->quant_granularity = qo::granularity::channel;
    const qo::model q = quantize(cfg);
    std::vector<float> s_in;
    for (const float v : in_scale)
      s_in.push_back(std::fabs(v) / 127.0f);
    CHECK(floats(q, "s_in_scale") == s_in);
    CHECK(codes_of(q.initializer("s_in_quantized")) ==
          std::vector<std::int64_t>{127, 127, -127, 127});
    const float sx = floats(q, "x_scale").at(0);
    const auto sb = floats(q, "b_in_scale");
    REQUIRE(sb.size() == 4);
    for (std::size_t i = 0; i < 4; ++i)
      CHECK(sb[i] == sx * s_in[i]);
    CHECK(floats(q, "s_ln_scale").size() == 5);
    CHECK(floats(q, "b_ln_scale") == std::vector<float>{0.4f / 127.0f});  // B per tensor
  }
  SUBCASE("every form runs in ONNX Runtime and our runtime agrees") {
    for (const case_t& c :
         {case_t{"A8W8", false, 0.99}, case_t{"A8W8", true, 0.99}, case_t{"XINT8", false, 0.98},
          case_t{"A16W8", false, 0.999}, case_t{"U8S8", false, 0.99}}) {
      check_quantized(norm_model(), "x", {2, 4, 3, 5}, c);
    }
  }
}

TEST_CASE("a tensor read as Range's limit stays float there: the output keeps its length") {
  // Found by bench/onnx/node_test_sweep.py --runner quark with MXFP4E2M1: the expanded
  // HannWindow tests compute a float window length that Sub / Mul read (quantized) and Range
  // reads as its limit; the shared DequantizeLinear output turned 10 into 8 and the window lost
  // two values. Range (and the other shape / count slots, shape_slot in static_quant.cpp) reads
  // the float tensor; the other readers keep the pair. With int8 the length moved too: a limit
  // of 7 calibrated against 10 comes back as 7.0079, and Range makes 8 values.
  model_builder b(13, 7);
  b.input("s", onnx_type::float32, {});
  b.initializer("zero", onnx_type::float32, {}, std::vector<float>{0.0f});
  b.initializer("one", onnx_type::float32, {}, std::vector<float>{1.0f});
  b.initializer("k", onnx_type::float32, {}, std::vector<float>{0.5f});
  b.node("Mul", {"s", "k"}, {"t"});              // a quantized reader of s
  b.node("Range", {"zero", "s", "one"}, {"r"});  // s as the limit
  b.node("Relu", {"s"}, {"u"});                  // u: quantized output that only Range reads
  b.node("Range", {"zero", "u", "one"}, {"r2"});
  b.node("Add", {"r", "t"}, {"y"});
  b.node("Add", {"r2", "t"}, {"y2"});
  b.node("Range", {"zero", "t", "one"}, {"r3"});  // t, a graph output, as the limit
  b.node("Add", {"r3", "one"}, {"y3"});
  b.output("y", onnx_type::float32, {-1});
  b.output("y2", onnx_type::float32, {-1});
  b.output("y3", onnx_type::float32, {-1});
  b.output("t", onnx_type::float32, {});
  const ::onnx::ModelProto fm = b.build();
  for (const char* preset : {"A8W8", "XINT8", "U8S8", "A16W8", "A8W8+DedicatedQDQPair"}) {
    CAPTURE(std::string(preset));
    const bool dedicated = std::string(preset).ends_with("+DedicatedQDQPair");
    qo::qconfig cfg = qo::get_default_config(dedicated ? "A8W8" : preset);
    if (dedicated)
      cfg.extra_options.set("DedicatedQDQPair", true);
    qo::memory_reader reader({{{"s", qo::tensor::from_floats({}, std::vector<float>{10.0f})}}});
    qo::quantize_report rep;
    const ::onnx::ModelProto qm = to_proto(qo::quantize_model(to_model(fm), cfg, reader, &rep));
    std::map<std::string, std::string> range_limit;  // Range output -> its limit input
    std::string mul_in;
    for (const auto& n : qm.graph().node()) {
      if (n.op_type() == "Range")
        range_limit[n.output(0)] = n.input(1);
      if (n.op_type() == "Mul")
        mul_in = n.input(0);
      CHECK(!n.name().starts_with("u_QuantizeLinear"));  // nothing but Range reads u: no pair
    }
    CHECK(range_limit["r"] == "s");
    CHECK(range_limit["r2"] == "u");
    // The graph output t keeps its name on the DequantizeLinear; Range reads the Mul's output.
    CHECK(range_limit["r3"] == (dedicated ? "t" : "t_QuantizeLinear_Input"));
    CHECK(mul_in.starts_with("s_DequantizeLinear_Output"));  // the Mul still reads s quantized
    CHECK(std::any_of(rep.notes.begin(), rep.notes.end(), [](const std::string& n) {
      return n.find("graph: tensor 's' stays float where Range") == 0;
    }));
    if (!ort_available())
      continue;
    for (const float s : {7.0f, 3.0f, 9.0f, 10.0f}) {
      CAPTURE(s);
      npy_array in = npy_array::from(std::vector<float>{s});
      in.shape.clear();  // a scalar
      const auto ref = run_ort(fm, {in});
      const auto got = run_ort(qm, {in});
      // y2's length may move: u is computed from the quantized s (the Relu reads the pair).
      REQUIRE(got.at("y").shape == ref.at("y").shape);  // the float model's length
      CHECK(quark::metrics::cosine(ref.at("y").values<float>(), got.at("y").values<float>()) >=
            0.99);
    }
  }
}

TEST_CASE("sizes computed from a tensor's shape stay float: another input size keeps its shape") {
  // An exported `interpolate(scale_factor=1.7)`: Shape -> Slice -> Cast(float) -> Mul 1.7 ->
  // Cast(int64) -> Concat -> Resize sizes. The Mul is an op every preset quantizes; calibrated on
  // 10x10 its range is [0, 17], so a 20x20 input (34 wanted) was clipped to 17 and resized to
  // 17x17. The size arithmetic stays float (shape_computed_values in static_quant.cpp), and a
  // size mixed into data (the Div) is read float while the data is quantized.
  model_builder b(13, 7);
  b.input("x", onnx_type::float32, {1, 3, -1, -1});
  b.initializer("st", onnx_type::int64, {1}, std::vector<std::int64_t>{2});
  b.initializer("en", onnx_type::int64, {1}, std::vector<std::int64_t>{4});
  b.initializer("k", onnx_type::float32, {1}, std::vector<float>{1.7f});
  b.initializer("nc", onnx_type::int64, {2}, std::vector<std::int64_t>{1, 3});
  b.initializer("w", onnx_type::float32, {4, 3, 3, 3}, random_floats(108, 21));
  b.initializer("i1", onnx_type::int64, {}, std::vector<std::int64_t>{1});
  b.node("Shape", {"x"}, {"s"});
  b.node("Slice", {"s", "st", "en"}, {"hw"});
  b.node("Cast", {"hw"}, {"hwf"}, {attr_int("to", onnx_type::float32)});
  b.node("Mul", {"hwf", "k"}, {"hwk"});
  b.node("Cast", {"hwk"}, {"hwi"}, {attr_int("to", onnx_type::int64)});
  b.node("Concat", {"nc", "hwi"}, {"sz"}, {attr_int("axis", 0)});
  b.node("Resize", {"x", "", "", "sz"}, {"r"}, {attr_string("mode", "nearest")});
  b.node("Conv", {"r", "w"}, {"c"}, {attr_ints("pads", {1, 1, 1, 1})});
  b.node("Gather", {"hwf", "i1"}, {"wf"}, {attr_int("axis", 0)});  // the width, a float scalar
  b.node("Div", {"c", "wf"}, {"y"});                               // data divided by a size
  b.output("y", onnx_type::float32, {1, 4, -1, -1});
  const ::onnx::ModelProto fm = b.build();
  for (const char* preset : {"A8W8", "XINT8", "U8S8", "A16W8", "BF16"}) {
    CAPTURE(std::string(preset));
    std::vector<qo::calib_sample> calib;
    for (std::uint32_t i = 0; i < 2; ++i)
      calib.push_back(sample_for("x", {1, 3, 10, 10}, 40 + i));
    qo::memory_reader reader(calib);
    qo::quantize_report rep;
    const ::onnx::ModelProto qm =
        to_proto(qo::quantize_model(to_model(fm), qo::get_default_config(preset), reader, &rep));
    for (const auto& n : qm.graph().node()) {
      CAPTURE(n.name());
      if (n.op_type() == "Mul")
        CHECK(n.input(0) == "hwf");  // no pair on the size arithmetic
      if (n.op_type() == "Cast" && n.output(0) == "hwi")
        CHECK(n.input(0) == "hwk");
      if (n.op_type() == "Div") {
        CHECK(n.input(0) != "c");   // the data is quantized...
        CHECK(n.input(1) == "wf");  // ...the size it is divided by is not
      }
    }
    CHECK(std::any_of(rep.notes.begin(), rep.notes.end(), [](const std::string& n) {
      return n.starts_with("graph: ") && n.find("from tensor shapes only") != std::string::npos &&
             n.find("(Mul") != std::string::npos;
    }));
    if (!ort_available())
      continue;
    for (const std::size_t side : {10u, 20u, 7u}) {
      CAPTURE(side);
      const auto in = npy_array::from(random_floats(3 * side * side, 70), {1, 3, side, side});
      const auto ref = run_ort(fm, {in}).at("y");
      const auto got = run_ort(qm, {in}).at("y");
      REQUIRE(got.shape == ref.shape);  // 1x4x17x17 at 10, 34x34 at 20, 11x11 at 7
      CHECK(quark::metrics::cosine(ref.values<float>(), got.values<float>()) >= 0.98);
    }
  }
}
