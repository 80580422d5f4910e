// SPDX-License-Identifier: MIT
// quantize_model with every element-wise tensor spec (issue 7): Int4/UInt4 (packed, opset 21),
// Int16/UInt16, Int32 weights, FP8 (opset 19), BFloat16/Float16 (Cast form), scale_type Int16,
// Group granularity (blocked DequantizeLinear) and Int16Bias. For each: the quantized model runs
// in ONNX Runtime 1.30 and in our runtime with agreeing outputs, and the stored weights are what
// independent computations give: ORT's own QuantizeLinear / Cast applied to the float weight
// with the model's scales (bit-exact), and hand-derived scales (formulas of quark-spec §1.2,
// §1.6, §2.3, §6.4 evaluated in double here).
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include <doctest/doctest.h>

#include <quark/metrics.hpp>
#include <quark/onnx/config.hpp>
#include <quark/onnx/quantizer.hpp>

#include "support/model_files.hpp"
#include "support/ort.hpp"

namespace fs = std::filesystem;
namespace qo = quark::onnx;
using namespace quark::test;

namespace {

const std::vector<float>& matmul_weight() {
  static const std::vector<float> w = random_floats(16 * 6, 7);
  return w;
}

/// MatMul(x[2,16], w[16,6]) -> Add(bias) -> Relu, opset 13.
::onnx::ModelProto matmul_model() {
  model_builder b(13, 7);
  b.input("x", onnx_type::float32, {2, 16});
  b.initializer("w", onnx_type::float32, {16, 6}, matmul_weight());
  b.initializer("bias", onnx_type::float32, {6}, random_floats(6, 8, -0.2f, 0.2f));
  b.node("MatMul", {"x", "w"}, {"m"});
  b.node("Add", {"m", "bias"}, {"a"});
  b.node("Relu", {"a"}, {"y"});
  b.output("y", onnx_type::float32, {2, 6});
  return b.build();
}

/// Conv(x[1,3,6,6], w[4,3,3,3], b) -> Sigmoid, opset 13.
::onnx::ModelProto conv_model(std::vector<float> w) {
  model_builder b(13, 7);
  b.input("x", onnx_type::float32, {1, 3, 6, 6});
  b.initializer("w", onnx_type::float32, {4, 3, 3, 3}, std::move(w));
  b.initializer("b", onnx_type::float32, {4}, random_floats(4, 2, -0.3f, 0.3f));
  b.node("Conv", {"x", "w", "b"}, {"c"}, {attr_ints("pads", {1, 1, 1, 1})});
  b.node("Sigmoid", {"c"}, {"y"});
  b.output("y", onnx_type::float32, {1, 4, 6, 6});
  return b.build();
}

qo::calib_sample sample_for(const std::string& name, qo::shape_t shape, std::uint32_t seed) {
  const std::size_t n = qo::element_count(shape);
  return {{name, qo::tensor::from_floats(std::move(shape), random_floats(n, seed))}};
}

std::vector<float> run_in_ort(const ::onnx::ModelProto& m, const qo::calib_sample& s) {
  const auto& t = s.begin()->second;
  std::vector<std::size_t> shape(t.shape().begin(), t.shape().end());
  auto out = run_ort(m, {npy_array::from(t.data<float>(), shape)});
  return out.begin()->second.values<float>();
}

const ::onnx::NodeProto* find_node(const ::onnx::ModelProto& m, const std::string& name) {
  for (const auto& n : m.graph().node()) {
    if (n.name() == name)
      return &n;
  }
  return nullptr;
}

std::int64_t opset_of(const ::onnx::ModelProto& m) {
  for (const auto& o : m.opset_import()) {
    if (o.domain().empty() || o.domain() == "ai.onnx")
      return o.version();
  }
  return 0;
}

struct quantized {
  ::onnx::ModelProto model;
  qo::quantize_report report;
  double ort_vs_ours = 0.0;  ///< cosine between the two runtimes on the quantized model
  double max_diff = 0.0;
  double vs_float = 0.0;  ///< cosine of ORT's quantized output against the float model
};

/// Quantizes `float_model` with `cfg`, runs the result in ORT and in our runtime.
quantized quantize_and_run(const ::onnx::ModelProto& float_model, const std::string& input,
                           const qo::shape_t& shape, const qo::qconfig& cfg,
                           const std::string& tag) {
  const fs::path dir = work_dir();
  const fs::path fin = dir / (tag + "_float.onnx");
  const fs::path fout = dir / (tag + ".onnx");
  save_proto(float_model, fin);
  std::vector<qo::calib_sample> calib;
  for (std::uint32_t i = 0; i < 4; ++i)
    calib.push_back(sample_for(input, shape, 100 + i));
  qo::memory_reader reader(calib);
  quantized q;
  q.report = qo::quantize_model(fin, fout, cfg, reader);
  q.model = load_proto(fout);
  const auto s = sample_for(input, shape, 999);
  const auto ours = qo::run_model(fout, s).begin()->second;
  const auto od = ours.data<float>();
  const std::vector<float> ours_v(od.begin(), od.end());
  if (!ort_available())
    return q;
  const auto ref = run_in_ort(float_model, s);
  const auto ort_v = run_in_ort(q.model, s);
  REQUIRE(ort_v.size() == ours_v.size());
  q.ort_vs_ours = quark::metrics::cosine(ort_v, ours_v);
  for (std::size_t i = 0; i < ort_v.size(); ++i) {
    q.max_diff = std::max(
        q.max_diff, std::fabs(static_cast<double>(ort_v[i]) - static_cast<double>(ours_v[i])));
  }
  q.vs_float = quark::metrics::cosine(ref, ort_v);
  MESSAGE(tag << ": cosine vs float " << q.vs_float << ", ORT vs ours max |diff| " << q.max_diff
              << ", opset " << q.report.opset_before << " -> " << q.report.opset_after);
  return q;
}

/// The stored weight decodes to what ORT's own quantizer gives: one graph computes
/// DequantizeLinear(stored) and DequantizeLinear(QuantizeLinear(float weight)) with the model's
/// scale, zero point, axis and block_size, and the two must be bit-identical. (Equal dequantized
/// values mean equal codes: the scale is non-zero.)
void check_weight_codes_against_ort(const ::onnx::ModelProto& qm, const std::string& w,
                                    const std::vector<float>& wf, std::vector<std::int64_t> dims) {
  if (!ort_available())
    return;
  const ::onnx::NodeProto* dq = find_node(qm, w + "_DequantizeLinear");
  REQUIRE(dq != nullptr);
  REQUIRE(dq->op_type() == "DequantizeLinear");
  ::onnx::ModelProto m = qm;
  auto* g = m.mutable_graph();
  g->clear_node();
  g->clear_input();
  g->clear_output();
  g->clear_value_info();
  auto add_io = [&](auto* vi, const std::string& name) {
    vi->set_name(name);
    auto* tt = vi->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(1);
    for (auto d : dims)
      tt->mutable_shape()->add_dim()->set_dim_value(d);
  };
  add_io(g->add_input(), "wf");
  *g->add_node() = *dq;
  g->mutable_node(0)->set_output(0, "stored");
  ::onnx::NodeProto q = *dq;
  q.set_op_type("QuantizeLinear");
  q.set_name("oracle_q");
  q.set_input(0, "wf");
  q.set_output(0, "oracle_codes");
  *g->add_node() = q;
  ::onnx::NodeProto dq2 = *dq;
  dq2.set_name("oracle_dq");
  dq2.set_input(0, "oracle_codes");
  dq2.set_output(0, "oracle");
  *g->add_node() = dq2;
  add_io(g->add_output(), "stored");
  add_io(g->add_output(), "oracle");
  std::vector<std::size_t> shape(dims.begin(), dims.end());
  auto out = run_ort(m, {npy_array::from(std::span<const float>(wf), shape)});
  const auto a = out.at("stored").values<float>();
  const auto b = out.at("oracle").values<float>();
  REQUIRE(a.size() == b.size());
  std::size_t diff = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    diff += std::bit_cast<std::uint32_t>(a[i]) == std::bit_cast<std::uint32_t>(b[i]) ? 0u : 1u;
  CHECK(diff == 0u);
}

/// Hand-derived group scales of matmul_weight() (16 x 6) in groups of 8 along axis 0: the
/// scale of group (b, n) is 2 absmax / `steps` over w[8b .. 8b + 7][n] alone. Returns how many
/// of `scale` (row-major 2 x 6) differ.
std::size_t bad_group_scales(const std::vector<float>& scale, double steps) {
  const auto& wv = matmul_weight();
  std::size_t bad = 0;
  for (std::size_t b = 0; b < 2; ++b) {
    for (std::size_t n = 0; n < 6; ++n) {
      double absmax = 0.0;
      for (std::size_t k = 8 * b; k < 8 * b + 8; ++k)
        absmax = std::max(absmax, std::fabs(static_cast<double>(wv[k * 6 + n])));
      const auto s = static_cast<float>(2.0 * absmax / steps);
      bad += std::fabs(scale.at(b * 6 + n) - s) <= 1e-6f * s ? 0u : 1u;
    }
  }
  return bad;
}

/// The integer attribute `attr` of node `node` (`fallback` when absent); fails when there is no
/// such node.
std::int64_t int_attr(const ::onnx::ModelProto& m, const char* node, const char* attr,
                      std::int64_t fallback) {
  const auto* n = find_node(m, node);
  REQUIRE_MESSAGE(n != nullptr, node);
  for (const auto& a : n->attribute()) {
    if (a.name() == attr)
      return a.i();
  }
  return fallback;
}

qo::qconfig config(qo::tensor_spec act, qo::tensor_spec weight) {
  qo::qconfig cfg;
  act.calibration_method = act.calibration_method == qo::calib_method::distribution
                               ? qo::calib_method::distribution
                               : qo::calib_method::min_max;
  cfg.global_config.input_tensors = act;
  cfg.global_config.weight = weight;
  return cfg;
}

}  // namespace

TEST_CASE("Int4 / UInt4: packed two per byte, opset 21, ORT runs them") {
  SUBCASE("A8W4 per tensor, hand-derived scale and nibble order") {
    const auto q = quantize_and_run(matmul_model(), "x", {2, 16},
                                    config(qo::int8_spec(), qo::int4_spec()), "a8w4");
    CHECK(opset_of(q.model) == 21);
    CHECK(q.model.ir_version() >= 10);
    const auto* t = find_init(q.model, "w_quantized");
    REQUIRE(t != nullptr);
    CHECK(t->data_type() == onnx_type::int4);
    // 96 elements -> 48 bytes, element 2k in the low nibble of byte k (ONNX order).
    REQUIRE(t->raw_data().size() == 48u);
    const auto& w = matmul_weight();
    double absmax = 0.0;
    for (float v : w)
      absmax = std::max(absmax, std::fabs(static_cast<double>(v)));
    // quark-spec §1.2: INT4 keeps the full range -8..7 when symmetric: s = 2 absmax / 15.
    const auto s = static_cast<float>(2.0 * absmax / 15.0);
    const auto scale = floats_of(*find_init(q.model, "w_scale"));
    REQUIRE(scale.size() == 1u);
    CHECK(scale[0] == doctest::Approx(static_cast<double>(s)).epsilon(1e-6));
    std::size_t bad = 0;
    for (std::size_t i = 0; i < w.size(); ++i) {
      const auto byte = static_cast<std::uint8_t>(t->raw_data()[i / 2]);
      int nib = (i % 2 == 0) ? (byte & 0x0F) : (byte >> 4);
      if (nib >= 8)
        nib -= 16;
      const double r = std::nearbyint(static_cast<double>(w[i]) / static_cast<double>(scale[0]));
      const int expect = static_cast<int>(std::clamp(r, -8.0, 7.0));
      bad += nib == expect ? 0u : 1u;
    }
    CHECK(bad == 0u);
    check_weight_codes_against_ort(q.model, "w", w, {16, 6});
    if (ort_available()) {
      CHECK(q.ort_vs_ours >= 0.99999);
      CHECK(q.max_diff <= 1e-4);
      CHECK(q.vs_float >= 0.95);
    }
  }
  SUBCASE("UInt4 activations and UInt4 weights (asymmetric)") {
    const auto q = quantize_and_run(matmul_model(), "x", {2, 16},
                                    config(qo::uint4_spec(), qo::uint4_spec()), "u4u4");
    CHECK(opset_of(q.model) == 21);
    const auto* z = find_init(q.model, "x_zero_point");
    REQUIRE(z != nullptr);
    CHECK(z->data_type() == onnx_type::uint4);
    check_weight_codes_against_ort(q.model, "w", matmul_weight(), {16, 6});
    if (ort_available()) {
      CHECK(q.ort_vs_ours >= 0.99999);
      CHECK(q.max_diff <= 1e-4);
      CHECK(q.vs_float >= 0.8);
    }
  }
  SUBCASE("Int4 per-channel Conv weights") {
    auto w = qo::int4_spec();
    w.quant_granularity = qo::granularity::channel;
    const auto wv = random_floats(108, 1, -0.5f, 0.5f);
    const auto q =
        quantize_and_run(conv_model(wv), "x", {1, 3, 6, 6}, config(qo::int8_spec(), w), "a8w4_pc");
    CHECK(floats_of(*find_init(q.model, "w_scale")).size() == 4u);
    check_weight_codes_against_ort(q.model, "w", wv, {4, 3, 3, 3});
    if (ort_available()) {
      CHECK(q.ort_vs_ours >= 0.99999);
      CHECK(q.vs_float >= 0.99);
    }
  }
}

TEST_CASE("Int16 / UInt16 and Int32 weights") {
  SUBCASE("A16W16") {
    const auto q = quantize_and_run(matmul_model(), "x", {2, 16},
                                    config(qo::uint16_spec(), qo::int16_spec()), "a16w16");
    CHECK(opset_of(q.model) == 21);
    check_weight_codes_against_ort(q.model, "w", matmul_weight(), {16, 6});
    if (ort_available()) {
      CHECK(q.ort_vs_ours >= 0.999999);
      CHECK(q.vs_float >= 0.9999);
    }
  }
  SUBCASE("Int32 weights are stored int32 behind a DequantizeLinear (no QuantizeLinear)") {
    const auto q = quantize_and_run(matmul_model(), "x", {2, 16},
                                    config(qo::int16_spec(), qo::int32_spec()), "a16w32");
    const auto* t = find_init(q.model, "w_quantized");
    REQUIRE(t != nullptr);
    CHECK(t->data_type() == 6);
    const auto scale = floats_of(*find_init(q.model, "w_scale"));
    double absmax = 0.0;
    for (float v : matmul_weight())
      absmax = std::max(absmax, std::fabs(static_cast<double>(v)));
    // quark-spec §1.2: symmetric INT32 uses -(2^31 - 1)..2^31 - 1.
    CHECK(scale[0] == doctest::Approx(2.0 * absmax / (2.0 * 2147483647.0)).epsilon(1e-6));
    if (ort_available()) {
      CHECK(q.ort_vs_ours >= 0.999999);
      CHECK(q.vs_float >= 0.9999);
    }
  }
  SUBCASE("Int32 and UInt32 activations are refused with a clear error") {
    const fs::path dir = work_dir();
    save_proto(matmul_model(), dir / "m32.onnx");
    qo::memory_reader r({sample_for("x", {2, 16}, 1)});
    for (auto spec : {qo::int32_spec(), qo::uint32_spec()}) {
      std::string id;
      try {
        qo::quantize_model(dir / "m32.onnx", dir / "m32_q.onnx", config(spec, qo::int8_spec()), r);
      } catch (const quark::error& e) {
        id = e.id();
      }
      CHECK(id == "quark.config.unsupported_type");
      CHECK(!fs::exists(dir / "m32_q.onnx"));
    }
  }
}

TEST_CASE("FP8: QuantizeLinear / DequantizeLinear with a float8 zero point at opset 19") {
  // ORT 1.30's CPU provider runs all four FP8 types in QuantizeLinear / DequantizeLinear.
  const std::pair<qo::spec_name, int> types[] = {
      {qo::spec_name::fp8_e4m3fn, onnx_type::float8e4m3fn},
      {qo::spec_name::fp8_e4m3fnuz, onnx_type::float8e4m3fnuz},
      {qo::spec_name::fp8_e5m2, onnx_type::float8e5m2},
      {qo::spec_name::fp8_e5m2fnuz, onnx_type::float8e5m2fnuz}};
  for (const auto& [name, code] : types) {
    const std::string tag(qo::spec_class_name(name));
    CAPTURE(tag);
    const auto spec = qo::make_spec(name);
    const auto q = quantize_and_run(matmul_model(), "x", {2, 16}, config(spec, spec), tag);
    CHECK(opset_of(q.model) == 19);
    const auto* z = find_init(q.model, "x_zero_point");
    REQUIRE(z != nullptr);
    CHECK(z->data_type() == code);
    CHECK(find_init(q.model, "w_quantized")->data_type() == code);
    // ORT's weight rule (quark-spec §1.6): scale = np.std(w) / std_fp8, where std_fp8 is the
    // standard deviation of every finite value of the type (100.0577... for E4M3FN).
    if (name == qo::spec_name::fp8_e4m3fn) {
      const auto& w = matmul_weight();
      double mean = 0.0;
      for (float v : w)
        mean += static_cast<double>(v);
      mean /= static_cast<double>(w.size());
      double var = 0.0;
      for (float v : w)
        var += (static_cast<double>(v) - mean) * (static_cast<double>(v) - mean);
      const double sd = std::sqrt(var / static_cast<double>(w.size()));
      CHECK(floats_of(*find_init(q.model, "w_scale"))[0] ==
            doctest::Approx(sd / 100.057724).epsilon(1e-6));
    }
    check_weight_codes_against_ort(q.model, "w", matmul_weight(), {16, 6});
    if (ort_available()) {
      CHECK(q.ort_vs_ours >= 0.99999);
      CHECK(q.max_diff <= 1e-4);
      CHECK(q.vs_float >= 0.99);
    }
  }
}

TEST_CASE("BFloat16 / Float16: the Cast form ORT runs") {
  for (const auto& spec : {qo::bfloat16_spec(), qo::float16_spec()}) {
    const std::string tag(qo::spec_class_name(spec.name));
    CAPTURE(tag);
    qo::qconfig cfg;
    cfg.global_config.input_tensors = spec;
    cfg.global_config.weight = spec;
    const auto q = quantize_and_run(matmul_model(), "x", {2, 16}, cfg, tag);
    int casts = 0, qdq = 0;
    for (const auto& n : q.model.graph().node()) {
      casts += n.op_type() == "Cast" ? 1 : 0;
      qdq += n.op_type() == "QuantizeLinear" || n.op_type() == "DequantizeLinear" ? 1 : 0;
    }
    CHECK(qdq == 0);
    CHECK(casts >= 4);
    if (ort_available()) {
      CHECK(q.ort_vs_ours >= 0.999999);
      CHECK(q.max_diff == 0.0);
      CHECK(q.vs_float >= 0.9999);
    }
  }
  SUBCASE("ActivationScaled: BFloat16 data divided into [-2, 2] and multiplied back") {
    qo::qconfig cfg;
    cfg.global_config.input_tensors = qo::bfloat16_spec();
    cfg.global_config.weight = qo::bfloat16_spec();
    cfg.extra_options.set("ActivationScaled", true);
    const auto q = quantize_and_run(matmul_model(), "x", {2, 16}, cfg, "bf16_scaled");
    const auto* s = find_init(q.model, "x_scale");
    REQUIRE(s != nullptr);
    // Symmetric scaled BF16: scale = absmax / 2 (quark-spec §1.5); the calibration samples are
    // uniform in [-1, 1), so absmax is just below 1.
    const float sx = floats_of(*s)[0];
    CHECK(sx > 0.45f);
    CHECK(sx <= 0.5f);
    if (ort_available()) {
      CHECK(q.ort_vs_ours >= 0.999999);
      CHECK(q.vs_float >= 0.9999);
    }
  }
}

TEST_CASE("scale_type Int16: scales are M * 2^-N with int16 M") {
  // absmax 1.5621 -> symmetric INT8 weight scale 1.5621 / 127 = 0.0123 -> (403, 15) (quark-spec
  // §2.3 example): 403 / 32768.
  std::vector<float> w = random_floats(108, 11, -1.0f, 1.0f);
  w[5] = 1.5621f;
  auto ws = qo::int8_spec();
  ws.scale_type = qo::scale_kind::int16;
  auto as = qo::int8_spec();
  as.scale_type = qo::scale_kind::int16;
  const auto q = quantize_and_run(conv_model(w), "x", {1, 3, 6, 6}, config(as, ws), "int16scale");
  CHECK(floats_of(*find_init(q.model, "w_scale"))[0] == 403.0f / 32768.0f);
  for (const std::string n : {"x_scale", "c_scale"}) {
    const auto* t = find_init(q.model, n);
    REQUIRE(t != nullptr);
    const double s = static_cast<double>(floats_of(*t)[0]);
    // Some int16 M and shift N in [0, 16] reproduce it exactly, M odd or N == 0 (reduced form).
    bool found = false;
    for (int sh = 0; sh <= 16 && !found; ++sh) {
      const double m = s * std::ldexp(1.0, sh);
      found = m == std::floor(m) && std::fabs(m) <= 32767.0;
    }
    CHECK(found);
  }
  if (ort_available()) {
    CHECK(q.ort_vs_ours >= 0.99999);
    CHECK(q.vs_float >= 0.99);
  }
}

TEST_CASE("Group granularity: blocked DequantizeLinear along the reduction axis") {
  for (const auto& [spec_, tag_] : {std::pair{qo::int4_spec(), std::string("g_int4")},
                                    std::pair{qo::int8_spec(), std::string("g_int8")},
                                    std::pair{qo::uint4_spec(), std::string("g_uint4")}}) {
    const qo::tensor_spec spec = spec_;
    const std::string tag = tag_;
    CAPTURE(tag);
    auto w = spec;
    w.quant_granularity = qo::granularity::group;
    w.group_size = 8;
    const auto q = quantize_and_run(matmul_model(), "x", {2, 16}, config(qo::int8_spec(), w), tag);
    CHECK(opset_of(q.model) == 21);
    CHECK(int_attr(q.model, "w_DequantizeLinear", "axis", -1) == 0);
    CHECK(int_attr(q.model, "w_DequantizeLinear", "block_size", 0) == 8);
    const auto* st = find_init(q.model, "w_scale");
    REQUIRE(st != nullptr);
    REQUIRE(st->dims_size() == 2);
    CHECK(st->dims(0) == 2);
    CHECK(st->dims(1) == 6);
    // Hand-derived: the scale of group (b, n) comes from w[8b .. 8b + 7][n] alone.
    if (spec.name == qo::spec_name::int4) {
      CHECK(bad_group_scales(floats_of(*st), 15.0) == 0u);
    }
    check_weight_codes_against_ort(q.model, "w", matmul_weight(), {16, 6});
    if (ort_available()) {
      CHECK(q.ort_vs_ours >= 0.99999);
      CHECK(q.vs_float >= 0.95);
    }
  }
}

TEST_CASE(
    "Group granularity with TensorQuantOverrides: the weight's type changes, its groups stay, "
    "keys with no per-group meaning are refused") {
  auto w = qo::int4_spec();
  w.quant_granularity = qo::granularity::group;
  w.group_size = 8;
  auto cfg = config(qo::int8_spec(), w);
  auto override_w = [&](qo::option_value entry) {
    cfg.extra_options.set(
        "TensorQuantOverrides",
        qo::option_value::object().set("w", qo::option_value::array({std::move(entry)})));
  };
  override_w(qo::option_value::object().set("quant_type", "QUInt8"));
  const auto q = quantize_and_run(matmul_model(), "x", {2, 16}, cfg, "g_override_u8");
  CHECK(int_attr(q.model, "w_DequantizeLinear", "block_size", 0) == 8);
  const auto* zp = find_init(q.model, "w_zero_point");
  REQUIRE(zp != nullptr);
  CHECK(zp->data_type() == ::onnx::TensorProto::UINT8);
  // Hand-derived: uint8, symmetric as the Int4 spec is (no entry sets symmetric); symmetric
  // uint8 spans [-absmax, absmax] over 0..255 with zero point 128 (quark-spec §3.2), so group
  // (b, n) has scale 2 absmax / 255 over w[8b .. 8b + 7][n].
  std::vector<int> zps;
  for (const int z : zp->int32_data())
    zps.push_back(z);
  for (const char c : zp->raw_data())
    zps.push_back(static_cast<std::uint8_t>(c));
  CHECK(zps == std::vector<int>(12, 128));
  const auto* st = find_init(q.model, "w_scale");
  REQUIRE(st != nullptr);
  REQUIRE(floats_of(*st).size() == 12);
  CHECK(bad_group_scales(floats_of(*st), 255.0) == 0u);
  check_weight_codes_against_ort(q.model, "w", matmul_weight(), {16, 6});
  if (ort_available()) {
    CHECK(q.ort_vs_ours >= 0.99999);
    CHECK(q.vs_float >= 0.99);
  }
  // QInt32: the groups stay, stored int32 behind a blocked DequantizeLinear as Int32Spec with
  // Group is; symmetric int32 spans -(2^31 - 1)..2^31 - 1, so scale 2 absmax / (2^32 - 2).
  override_w(qo::option_value::object().set("quant_type", "QInt32"));
  {
    const auto q32 = quantize_and_run(matmul_model(), "x", {2, 16}, cfg, "g_override_i32");
    CHECK(int_attr(q32.model, "w_DequantizeLinear", "block_size", 0) == 8);
    const auto* t = find_init(q32.model, "w_quantized");
    REQUIRE(t != nullptr);
    CHECK(t->data_type() == ::onnx::TensorProto::INT32);
    const auto* s32 = find_init(q32.model, "w_scale");
    REQUIRE(s32 != nullptr);
    REQUIRE(floats_of(*s32).size() == 12);
    CHECK(bad_group_scales(floats_of(*s32), 4294967294.0) == 0u);
    if (ort_available()) {
      CHECK(q32.ort_vs_ours >= 0.99999);
      CHECK(q32.vs_float >= 0.9999);
    }
  }
  // A block format replaces the groups with one fused node.
  override_w(qo::option_value::object().set("quant_type", "QBFP"));
  {
    const fs::path dir = work_dir();
    save_proto(matmul_model(), dir / "g_bfp_float.onnx");
    qo::memory_reader r({sample_for("x", {2, 16}, 1)});
    (void)qo::quantize_model(dir / "g_bfp_float.onnx", dir / "g_bfp.onnx", cfg, r);
    const auto m = load_proto(dir / "g_bfp.onnx");
    CHECK(find_node(m, "w_DequantizeLinear") == nullptr);
    const auto* f = find_node(m, "w_BFPQuantizeDequantize");
    REQUIRE(f != nullptr);
    CHECK(f->domain() == "com.amd.quark");
  }
  // Keys with no per-group meaning, and a type with no Group form.
  auto error_of = [&](qo::option_value entry) {
    override_w(std::move(entry));
    const fs::path dir = work_dir();
    save_proto(matmul_model(), dir / "g_err_float.onnx");
    qo::memory_reader r({sample_for("x", {2, 16}, 1)});
    return error_text(
        [&] { (void)qo::quantize_model(dir / "g_err_float.onnx", dir / "g_err.onnx", cfg, r); });
  };
  for (const auto& entry :
       {qo::option_value::object().set("axis", 0), qo::option_value::object().set("rmax", 1.0),
        qo::option_value::object().set("scale", 0.1).set("zero_point", 0)}) {
    CAPTURE(qo::to_string(entry));
    CHECK(error_of(entry).find("quark.config.value: TensorQuantOverrides.w: a group-quantized "
                               "weight takes one entry with quant_type and symmetric only") !=
          std::string::npos);
  }
  // Float8 has no Group form, as for the specs (Group needs an integer spec).
  CHECK(error_of(qo::option_value::object().set("quant_type", "QFLOAT8E4M3FN"))
            .find("quark.config.value: TensorQuantOverrides.w: quant_type QFLOAT8E4M3FN on a "
                  "group-quantized weight: Group granularity needs an integer type") !=
        std::string::npos);
  CHECK(!fs::exists(work_dir() / "g_err.onnx"));
}

TEST_CASE("Group granularity on a tensor without a block axis is refused") {
  model_builder b(13, 7);
  b.input("x", onnx_type::float32, {2, 4});
  b.initializer("g", onnx_type::float32, {4}, random_floats(4, 3));
  b.initializer("bb", onnx_type::float32, {4}, random_floats(4, 4));
  b.node("Mul", {"x", "g"}, {"m"});
  b.node("MatMul", {"m", "g"}, {"y"});  // rank-1 B: no block axis
  b.output("y", onnx_type::float32, {2});
  const fs::path dir = work_dir();
  save_proto(b.build(), dir / "nogroup.onnx");
  auto w = qo::int4_spec();
  w.quant_granularity = qo::granularity::group;
  w.group_size = 2;
  qo::memory_reader r({sample_for("x", {2, 4}, 1)});
  std::string id, what;
  try {
    qo::quantize_model(dir / "nogroup.onnx", dir / "nogroup_q.onnx", config(qo::int8_spec(), w), r);
  } catch (const quark::error& e) {
    id = e.id();
    what = e.what();
  }
  CHECK(id == "quark.quantize.group");
  CHECK(what.find("'g'") != std::string::npos);
  CHECK(!fs::exists(dir / "nogroup_q.onnx"));
}

TEST_CASE("Int16Bias: the int32 bias saturated to int16, same scale, opset 21") {
  std::vector<float> w = random_floats(108, 1, -0.5f, 0.5f);
  auto cfg = config(qo::int8_spec(), qo::int8_spec());
  cfg.extra_options.set("Int16Bias", true);
  model_builder b(13, 7);
  b.input("x", onnx_type::float32, {1, 3, 6, 6});
  b.initializer("w", onnx_type::float32, {4, 3, 3, 3}, w);
  // One bias far beyond int16 * scale, so it saturates.
  b.initializer("b", onnx_type::float32, {4}, std::vector<float>{0.05f, -0.1f, 0.2f, 500.0f});
  b.node("Conv", {"x", "w", "b"}, {"c"}, {attr_ints("pads", {1, 1, 1, 1})});
  b.output("c", onnx_type::float32, {1, 4, 6, 6});
  const auto q = quantize_and_run(b.build(), "x", {1, 3, 6, 6}, cfg, "int16bias");
  CHECK(opset_of(q.model) == 21);
  const auto* bq = find_init(q.model, "b_quantized");
  REQUIRE(bq != nullptr);
  CHECK(bq->data_type() == 5);  // INT16
  const float sx = floats_of(*find_init(q.model, "x_scale"))[0];
  const float sw = floats_of(*find_init(q.model, "w_scale"))[0];
  const float sb = floats_of(*find_init(q.model, "b_scale"))[0];
  CHECK(sb == sx * sw);  // quark-spec §6.2: float32 product, kept by §6.4
  std::vector<std::int16_t> codes(4);
  REQUIRE(bq->raw_data().size() == 8u);
  std::memcpy(codes.data(), bq->raw_data().data(), 8);
  const float bias[4] = {0.05f, -0.1f, 0.2f, 500.0f};
  for (int i = 0; i < 4; ++i) {
    const double r = std::nearbyint(static_cast<double>(bias[i]) / static_cast<double>(sb));
    CHECK(codes[static_cast<std::size_t>(i)] ==
          static_cast<std::int16_t>(std::clamp(r, -32768.0, 32767.0)));
  }
  CHECK(codes[3] == 32767);
  // The clipping is reported, naming the bias and the count (quark-spec §6.2's warning).
  CHECK(std::count_if(q.report.notes.begin(), q.report.notes.end(), [](const std::string& n) {
          return n.find("bias 'b'") != std::string::npos &&
                 n.find("1 of 4 values clipped to the int16 range") != std::string::npos;
        }) == 1);
  if (ort_available())
    CHECK(q.ort_vs_ours >= 0.99999);
}

TEST_CASE("Int32 bias beyond the int32 range is clipped with a note naming it") {
  // UInt16 activations and Int16 weights make the product scale tiny: x in [0, 1] gives
  // s_x = 1 / 65535 (asymmetric, zp 0), w = 1 (one weight, symmetric int16) s_w = 1 / 32767, so
  // s_b = 4.66e-10 (float32 product) and a bias of 2 needs 4.29e9 steps > 2^31 - 1: clipped to
  // 2147483647 (quark-spec §6.2). 0.5 needs 1.07e9 steps and fits.
  auto cfg = config(qo::uint16_spec(), qo::int16_spec());
  model_builder b(13, 7);
  b.input("x", onnx_type::float32, {1, 1, 4, 4});
  b.initializer("w", onnx_type::float32, {2, 1, 1, 1}, std::vector<float>{1.0f, 1.0f});
  b.initializer("b", onnx_type::float32, {2}, std::vector<float>{0.5f, 2.0f});
  b.node("Conv", {"x", "w", "b"}, {"c"});
  b.output("c", onnx_type::float32, {1, 2, 4, 4});
  const fs::path dir = work_dir();
  save_proto(b.build(), dir / "bias32_float.onnx");
  std::vector<float> ramp(16);
  for (std::size_t i = 0; i < ramp.size(); ++i)
    ramp[i] = static_cast<float>(i) / 15.0f;  // exactly [0, 1]
  std::vector<qo::calib_sample> calib{{{"x", qo::tensor::from_floats({1, 1, 4, 4}, ramp)}}};
  qo::memory_reader reader(calib);
  const auto report =
      qo::quantize_model(dir / "bias32_float.onnx", dir / "bias32.onnx", cfg, reader);
  const auto m = load_proto(dir / "bias32.onnx");
  const float sx = floats_of(*find_init(m, "x_scale"))[0];
  const float sw = floats_of(*find_init(m, "w_scale"))[0];
  CHECK(sx == static_cast<float>(1.0 / 65535.0));
  CHECK(sw == static_cast<float>(1.0 / 32767.0));
  const auto* bq = find_init(m, "b_quantized");
  REQUIRE(bq != nullptr);
  REQUIRE(bq->raw_data().size() == 8u);
  std::int32_t codes[2];
  std::memcpy(codes, bq->raw_data().data(), 8);
  const float sb = sx * sw;
  CHECK(codes[0] == static_cast<std::int32_t>(std::nearbyint(0.5 / static_cast<double>(sb))));
  CHECK(codes[1] == 2147483647);
  CHECK(std::count_if(report.notes.begin(), report.notes.end(), [](const std::string& n) {
          return n.find("bias 'b' of node") != std::string::npos &&
                 n.find("1 of 2 values clipped to the int32 range") != std::string::npos;
        }) == 1);
}

TEST_CASE("An int32 bias scale that underflows to zero is an error naming the bias") {
  // x in [0, 1e-30] (uint8: s_x = 1e-30 / 255 = 3.9e-33) and w = 1e-20 (int8 symmetric:
  // s_w = 7.9e-23): the float32 product 3.1e-55 is 0, so no int32 code exists for b = 0.5.
  auto cfg = config(qo::uint8_spec(), qo::int8_spec());
  model_builder b(13, 7);
  b.input("x", onnx_type::float32, {1, 1, 2, 2});
  b.initializer("w", onnx_type::float32, {1, 1, 1, 1}, std::vector<float>{1e-20f});
  b.initializer("b", onnx_type::float32, {1}, std::vector<float>{0.5f});
  b.node("Conv", {"x", "w", "b"}, {"c"});
  b.output("c", onnx_type::float32, {1, 1, 2, 2});
  const fs::path dir = work_dir();
  save_proto(b.build(), dir / "tinyscale.onnx");
  std::vector<qo::calib_sample> calib{
      {{"x",
        qo::tensor::from_floats({1, 1, 2, 2}, std::vector<float>{0.0f, 1e-30f, 5e-31f, 0.0f})}}};
  qo::memory_reader r(calib);
  std::string id, what;
  try {
    qo::quantize_model(dir / "tinyscale.onnx", dir / "tinyscale_q.onnx", cfg, r);
  } catch (const quark::error& e) {
    id = e.id();
    what = e.what();
  }
  CHECK(id == "quark.quantize.bias");
  CHECK(what.find("bias 'b'") != std::string::npos);
  CHECK(!fs::exists(dir / "tinyscale_q.onnx"));
}

TEST_CASE("FP8 per-channel Conv weights and WeightScaled BFloat16 weights") {
  SUBCASE("FP8E4M3FN per channel: one std / std_fp8 scale per output channel") {
    auto w = qo::make_spec(qo::spec_name::fp8_e4m3fn);
    w.quant_granularity = qo::granularity::channel;
    const auto wv = random_floats(108, 21, -0.5f, 0.5f);
    const auto q = quantize_and_run(conv_model(wv), "x", {1, 3, 6, 6},
                                    config(qo::make_spec(qo::spec_name::fp8_e4m3fn), w), "fp8_pc");
    const auto scale = floats_of(*find_init(q.model, "w_scale"));
    REQUIRE(scale.size() == 4u);
    for (std::size_t c = 0; c < 4; ++c) {
      double mean = 0.0;
      for (std::size_t k = 0; k < 27; ++k)
        mean += static_cast<double>(wv[c * 27 + k]);
      mean /= 27.0;
      double var = 0.0;
      for (std::size_t k = 0; k < 27; ++k) {
        const double d = static_cast<double>(wv[c * 27 + k]) - mean;
        var += d * d;
      }
      CHECK(scale[c] == doctest::Approx(std::sqrt(var / 27.0) / 100.057724).epsilon(1e-6));
    }
    check_weight_codes_against_ort(q.model, "w", wv, {4, 3, 3, 3});
    if (ort_available()) {
      CHECK(q.ort_vs_ours >= 0.99999);
      CHECK(q.vs_float >= 0.99);
    }
  }
  SUBCASE("WeightScaled: bf16 weight codes times absmax / 2") {
    qo::qconfig cfg;
    cfg.global_config.input_tensors = qo::bfloat16_spec();
    cfg.global_config.weight = qo::bfloat16_spec();
    cfg.extra_options.set("WeightScaled", true);
    cfg.extra_options.set("AddQDQPairToWeight", false);
    const auto q = quantize_and_run(matmul_model(), "x", {2, 16}, cfg, "bf16_wscaled");
    const auto* t = find_init(q.model, "w_quantized");
    REQUIRE(t != nullptr);
    CHECK(t->data_type() == onnx_type::bfloat16);
    double absmax = 0.0;
    for (float v : matmul_weight())
      absmax = std::max(absmax, std::fabs(static_cast<double>(v)));
    // quark-spec §1.5: symmetric scaled BF16 maps [-absmax, absmax] onto [-2, 2].
    CHECK(floats_of(*find_init(q.model, "w_scale"))[0] ==
          doctest::Approx(absmax / 2.0).epsilon(1e-6));
    if (ort_available()) {
      CHECK(q.ort_vs_ours >= 0.999999);
      CHECK(q.vs_float >= 0.9999);
    }
  }
}

TEST_CASE("Group granularity with 16-bit weights") {
  for (const auto& s : {qo::int16_spec(), qo::uint16_spec()}) {
    const std::string tag = "g_" + std::string(qo::spec_class_name(s.name));
    CAPTURE(tag);
    auto w = s;
    w.quant_granularity = qo::granularity::group;
    w.group_size = 4;
    const auto q = quantize_and_run(matmul_model(), "x", {2, 16}, config(qo::int16_spec(), w), tag);
    check_weight_codes_against_ort(q.model, "w", matmul_weight(), {16, 6});
    if (ort_available()) {
      CHECK(q.ort_vs_ours >= 0.999999);
      CHECK(q.vs_float >= 0.9999);
    }
  }
}

TEST_CASE("Group granularity on Conv: blocks along input channels, the bias stays float") {
  auto w = qo::int4_spec();
  w.quant_granularity = qo::granularity::group;
  w.group_size = 2;  // 3 input channels: blocks {0, 1} and {2} (the last one partial)
  const auto wv = random_floats(108, 5, -0.5f, 0.5f);
  const auto q =
      quantize_and_run(conv_model(wv), "x", {1, 3, 6, 6}, config(qo::int8_spec(), w), "g_conv");
  const auto* st = find_init(q.model, "w_scale");
  REQUIRE(st != nullptr);
  REQUIRE(st->dims_size() == 4);
  CHECK(st->dims(0) == 4);
  CHECK(st->dims(1) == 2);
  CHECK(st->dims(2) == 3);
  CHECK(st->dims(3) == 3);
  CHECK(find_init(q.model, "b_quantized") == nullptr);
  CHECK(find_init(q.model, "b") != nullptr);
  bool noted = false;
  for (const auto& n : q.report.notes)
    noted = noted || n.find("'b'") != std::string::npos;
  CHECK(noted);
  check_weight_codes_against_ort(q.model, "w", wv, {4, 3, 3, 3});
  if (ort_available()) {
    CHECK(q.ort_vs_ours >= 0.99999);
    CHECK(q.vs_float >= 0.99);
  }
}
