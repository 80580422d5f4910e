// SPDX-License-Identifier: MIT
// Dynamic quantization (qconfig::use_dynamic_quant, preset UINT8_DYNAMIC_QUANT): MatMul and Conv
// rewritten as DynamicQuantizeLinear -> MatMulInteger / ConvInteger -> Cast -> Mul [-> Add].
// Oracles: ONNX Runtime 1.30 runs every quantized model (its DynamicQuantizeLinear, integer ops
// and float tail) and must agree with our runtime; the stored weight codes are ORT's own
// QuantizeLinear of the float weight with the model's scale and zero point; the scales and zero
// points are the hand-derived min/max formulas (quark-spec §1.2, weights §4.8) evaluated in
// double here; the outputs stay within what uint8 activations and weights allow of the float
// model's.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include <quark/metrics.hpp>
#include <quark/onnx/config.hpp>
#include <quark/onnx/presets.hpp>
#include <quark/onnx/quantizer.hpp>
#include <quark/onnx/runtime.hpp>

#include "support/model_files.hpp"
#include "support/ort.hpp"

namespace fs = std::filesystem;
namespace qo = quark::onnx;
using namespace quark::test;

namespace {

const std::vector<float>& conv_weight() {
  static const std::vector<float> w = random_floats(4 * 3 * 3 * 3, 21, -0.6f, 0.9f);
  return w;
}
const std::vector<float>& fc_weight() {
  static const std::vector<float> w = random_floats(144 * 5, 22, -0.3f, 0.2f);
  return w;
}

/// Conv(x[2,3,6,6], w[4,3,3,3], b, pads 1) -> Relu -> Flatten -> MatMul(w2[144,5]) -> Add(b2),
/// plus a MatMul of two activations (x2 . x2^T), opset 13.
::onnx::ModelProto cnn_model() {
  model_builder b(13, 7);
  b.input("x", onnx_type::float32, {2, 3, 6, 6});
  b.input("x2", onnx_type::float32, {3, 8});
  b.initializer("w", onnx_type::float32, {4, 3, 3, 3}, conv_weight());
  b.initializer("b", onnx_type::float32, {4}, random_floats(4, 23, -0.3f, 0.3f));
  b.initializer("w2", onnx_type::float32, {144, 5}, fc_weight());
  b.initializer("b2", onnx_type::float32, {5}, random_floats(5, 24, -0.2f, 0.2f));
  b.node("Conv", {"x", "w", "b"}, {"c"}, {attr_ints("pads", {1, 1, 1, 1})});
  b.node("Relu", {"c"}, {"r"});
  b.node("Flatten", {"r"}, {"f"}, {attr_int("axis", 1)});
  b.node("MatMul", {"f", "w2"}, {"m"});
  b.node("Add", {"m", "b2"}, {"y"});
  b.node("Transpose", {"x2"}, {"x2t"}, {attr_ints("perm", {1, 0})});
  b.node("MatMul", {"x2", "x2t"}, {"g"});
  b.output("y", onnx_type::float32, {2, 5});
  b.output("g", onnx_type::float32, {3, 3});
  return b.build();
}

qo::calib_sample inputs(std::uint32_t seed) {
  return {{"x", qo::tensor::from_floats({2, 3, 6, 6}, random_floats(2 * 3 * 36, seed))},
          {"x2", qo::tensor::from_floats({3, 8}, random_floats(24, seed + 1))}};
}

std::map<std::string, std::vector<float>> run_in_ort(const ::onnx::ModelProto& m,
                                                     const qo::calib_sample& s) {
  std::vector<npy_array> in;
  for (const char* name : {"x", "x2"}) {
    const qo::tensor& t = s.at(name);
    std::vector<std::size_t> shape(t.shape().begin(), t.shape().end());
    in.push_back(npy_array::from(t.data<float>(), shape));
  }
  std::map<std::string, std::vector<float>> out;
  for (const auto& [name, a] : run_ort(m, in))
    out[name] = a.values<float>();
  return out;
}

std::map<std::string, std::vector<float>> run_ours(const fs::path& model,
                                                   const qo::calib_sample& s) {
  std::map<std::string, std::vector<float>> out;
  for (const auto& [name, t] : qo::run_model(model, s)) {
    const auto d = t.data<float>();
    out[name] = {d.begin(), d.end()};
  }
  return out;
}

std::size_t count_ops(const ::onnx::ModelProto& m, const std::string& op) {
  return static_cast<std::size_t>(std::count_if(m.graph().node().begin(), m.graph().node().end(),
                                                [&](const auto& n) { return n.op_type() == op; }));
}

/// Raw bytes of an initializer as numbers of type T (raw_data or the typed field).
template <class T>
std::vector<double> values_of(const ::onnx::TensorProto& t) {
  std::vector<double> v;
  if (!t.raw_data().empty()) {
    std::vector<T> raw(t.raw_data().size() / sizeof(T));
    std::memcpy(raw.data(), t.raw_data().data(), raw.size() * sizeof(T));
    v.assign(raw.begin(), raw.end());
  } else if (t.float_data_size() > 0) {
    v.assign(t.float_data().begin(), t.float_data().end());
  } else {
    v.assign(t.int32_data().begin(), t.int32_data().end());
  }
  return v;
}

struct run_result {
  ::onnx::ModelProto model;
  qo::quantize_report report;
  fs::path path;
};

run_result quantize(const qo::qconfig& cfg, const std::string& tag) {
  const fs::path dir = work_dir();
  const fs::path fin = dir / (tag + "_float.onnx");
  save_proto(cnn_model(), fin);
  run_result r;
  r.path = dir / (tag + ".onnx");
  qo::memory_reader none({});
  r.report = qo::quantize_model(fin, r.path, cfg, none);
  r.model = load_proto(r.path);
  return r;
}

/// The quantized model's outputs in ORT, checked bit for bit against our runtime's where the
/// integer ops compute them (exact products, then the same float tail in both); an output left
/// float (`float_g`: a float MatMul, whose summation order differs) within float rounding.
std::map<std::string, std::vector<float>> ort_matching_ours(const run_result& r,
                                                            const qo::calib_sample& s,
                                                            bool float_g = false) {
  const auto ort = run_in_ort(r.model, s);
  const auto ours = run_ours(r.path, s);
  for (const std::string o : {"y", "g"}) {
    CAPTURE(o);
    REQUIRE(ort.at(o).size() == ours.at(o).size());
    if (o == "g" && float_g) {
      for (std::size_t i = 0; i < ort.at(o).size(); ++i)
        CHECK(static_cast<double>(ours.at(o)[i]) ==
              doctest::Approx(static_cast<double>(ort.at(o)[i])).epsilon(1e-6));
      continue;
    }
    std::size_t diff = 0;
    for (std::size_t i = 0; i < ort.at(o).size(); ++i)
      diff +=
          std::bit_cast<std::uint32_t>(ort.at(o)[i]) == std::bit_cast<std::uint32_t>(ours.at(o)[i])
              ? 0u
              : 1u;
    CHECK(diff == 0u);
  }
  return ort;
}

/// The weight codes are ORT's QuantizeLinear of the float weight with the stored scale / zero
/// point / axis: one graph computes both and the codes must be identical.
void check_codes_against_ort(const ::onnx::ModelProto& qm, const std::string& w,
                             const std::vector<float>& wf, const std::vector<std::int64_t>& dims,
                             std::int64_t axis, int code_type) {
  model_builder b(13, 7);
  b.input("wf", onnx_type::float32, dims);
  const auto* s = find_init(qm, w + "_scale");
  const auto* z = find_init(qm, w + "_zero_point");
  REQUIRE(s != nullptr);
  REQUIRE(z != nullptr);
  ::onnx::ModelProto m = b.build();
  *m.mutable_graph()->add_initializer() = *s;
  *m.mutable_graph()->add_initializer() = *z;
  *m.mutable_graph()->add_initializer() = *find_init(qm, w + "_quantized");
  auto* q = m.mutable_graph()->add_node();
  q->set_op_type("QuantizeLinear");
  q->set_name("oracle");
  q->add_input("wf");
  q->add_input(s->name());
  q->add_input(z->name());
  q->add_output("codes");
  if (axis >= 0) {
    auto* a = q->add_attribute();
    a->set_name("axis");
    a->set_type(::onnx::AttributeProto::INT);
    a->set_i(axis);
  }
  auto* id = m.mutable_graph()->add_node();
  id->set_op_type("Identity");
  id->set_name("stored");
  id->add_input(w + "_quantized");
  id->add_output("stored_codes");
  for (const char* o : {"codes", "stored_codes"}) {
    auto* vi = m.mutable_graph()->add_output();
    vi->set_name(o);
    vi->mutable_type()->mutable_tensor_type()->set_elem_type(code_type);
  }
  std::vector<std::size_t> shape(dims.begin(), dims.end());
  const auto out = run_ort(m, {npy_array::from(std::span<const float>(wf), shape)});
  CHECK(out.at("codes").bytes == out.at("stored_codes").bytes);
}

/// Hand-derived uint8 asymmetric parameters of one group (quark-spec §1.2: the range includes 0,
/// scale = (max - min) / 255, zero point = round(-min / scale)).
void check_uint8_params(const std::vector<float>& v, double scale, double zp) {
  const double lo = std::min(0.0, static_cast<double>(*std::min_element(v.begin(), v.end())));
  const double hi = std::max(0.0, static_cast<double>(*std::max_element(v.begin(), v.end())));
  const double s = (hi - lo) / 255.0;
  CHECK(scale == doctest::Approx(s).epsilon(1e-6));
  CHECK(zp == std::nearbyint(-lo / s));
}

}  // namespace

TEST_CASE("UINT8_DYNAMIC_QUANT: MatMul and Conv become integer ops that ONNX Runtime runs") {
  const qo::qconfig cfg = qo::get_default_config("UINT8_DYNAMIC_QUANT");
  const run_result r = quantize(cfg, "dyn_preset");
  const ::onnx::ModelProto& qm = r.model;

  // Graph: one DynamicQuantizeLinear per activation read by a rewritten node; the MatMul of two
  // activations stays float (MatMulConstBOnly defaults to True in dynamic mode, seed 000).
  CHECK(count_ops(qm, "DynamicQuantizeLinear") == 2);
  CHECK(count_ops(qm, "ConvInteger") == 1);
  CHECK(count_ops(qm, "MatMulInteger") == 1);
  CHECK(count_ops(qm, "MatMul") == 1);
  CHECK(count_ops(qm, "Conv") == 0);
  CHECK(find_init(qm, "w") == nullptr);  // the float weights are gone
  CHECK(find_init(qm, "w2") == nullptr);
  CHECK(r.report.op_types.at("Conv").quantized == 1);
  CHECK(r.report.op_types.at("MatMul").quantized == 1);
  CHECK(r.report.op_types.at("MatMul").kept_float == 1);
  CHECK(r.report.opset_after == 13);
  CHECK(r.report.dynamic);
  CHECK(qo::summary_table(r.report).starts_with(
      "Quantization summary (dynamic: activations quantized at run time, opset 13)\n"));

  // Stored weights: uint8, per tensor, hand-derived parameters, ORT's codes.
  for (const auto& entry :
       std::map<std::string, std::vector<float>>{{"w", conv_weight()}, {"w2", fc_weight()}}) {
    const std::string& name = entry.first;
    const std::vector<float>& values = entry.second;
    CAPTURE(name);
    const auto* s = find_init(qm, name + "_scale");
    const auto* z = find_init(qm, name + "_zero_point");
    const auto* q = find_init(qm, name + "_quantized");
    REQUIRE(s != nullptr);
    REQUIRE(z != nullptr);
    REQUIRE(q != nullptr);
    CHECK(q->data_type() == onnx_type::uint8);
    CHECK(s->dims_size() == 0);
    CHECK(z->dims_size() == 0);
    check_uint8_params(values, values_of<float>(*s).at(0), values_of<std::uint8_t>(*z).at(0));
    if (ort_available()) {
      check_codes_against_ort(
          qm, name, values,
          name == "w" ? std::vector<std::int64_t>{4, 3, 3, 3} : std::vector<std::int64_t>{144, 5},
          -1, onnx_type::uint8);
    }
  }

  // Outputs: ORT and our runtime agree; both stay near the float model.
  if (!ort_available())
    return;
  for (std::uint32_t seed : {5u, 6u}) {
    CAPTURE(seed);
    const qo::calib_sample s = inputs(seed);
    const auto ref = run_in_ort(cnn_model(), s);
    const auto ort = ort_matching_ours(r, s, true);
    CHECK(ort.at("g") == ref.at("g"));  // left float
    CHECK(quark::metrics::cosine(ref.at("y"), ort.at("y")) > 0.999);
  }
}

TEST_CASE("dynamic quantization with per-channel int8 weights and both MatMul inputs at run time") {
  qo::qconfig cfg = qo::get_default_config("UINT8_DYNAMIC_QUANT");
  cfg.global_config.weight = qo::make_spec(qo::spec_name::int8);
  cfg.global_config.weight->quant_granularity = qo::granularity::channel;
  cfg.extra_options.set("MatMulConstBOnly", false);
  const run_result r = quantize(cfg, "dyn_channel");
  const ::onnx::ModelProto& qm = r.model;
  CHECK(count_ops(qm, "MatMulInteger") == 2);
  CHECK(count_ops(qm, "MatMul") == 0);
  // x2 and its transpose: two more DynamicQuantizeLinear.
  CHECK(count_ops(qm, "DynamicQuantizeLinear") == 4);

  // MatMul: N scales and zero points (per column of B); Conv: M scales shaped [M, 1, 1] for the
  // float tail, one zero point 0 (ConvInteger takes one).
  const auto* s2 = find_init(qm, "w2_scale");
  REQUIRE(s2 != nullptr);
  CHECK(std::vector<std::int64_t>(s2->dims().begin(), s2->dims().end()) ==
        std::vector<std::int64_t>{5});
  const auto* s1 = find_init(qm, "w_scale");
  REQUIRE(s1 != nullptr);
  CHECK(std::vector<std::int64_t>(s1->dims().begin(), s1->dims().end()) ==
        std::vector<std::int64_t>{4, 1, 1});
  const auto* z1 = find_init(qm, "w_zero_point");
  REQUIRE(z1 != nullptr);
  CHECK(z1->dims_size() == 0);
  // Symmetric int8 per channel: scale = max |w| of the channel / 127 (Quark's weight clip).
  const std::vector<double> sc = values_of<float>(*s1);
  for (std::size_t c = 0; c < 4; ++c) {
    float m = 0.0f;
    for (std::size_t k = 0; k < 27; ++k)
      m = std::max(m, std::fabs(conv_weight()[c * 27 + k]));
    CHECK(sc.at(c) == doctest::Approx(2.0 * static_cast<double>(m) / 254.0).epsilon(1e-6));
  }
  if (!ort_available())
    return;
  const qo::calib_sample s = inputs(9);
  const auto ref = run_in_ort(cnn_model(), s);
  if (ort_u8s8_saturates()) {
    // ORT's uint8 x int8 kernels saturate on this CPU (no VNNI), so its MatMulInteger /
    // ConvInteger of full-range int8 weights are not the exact products: our runtime, exact,
    // is checked against the float model instead (bit-exactness with ORT: the uint8 cases).
    const auto ours = run_ours(r.path, s);
    for (const char* o : {"y", "g"}) {
      CAPTURE(o);
      CHECK(quark::metrics::cosine(ref.at(o), ours.at(o)) > 0.999);
    }
    return;
  }
  const auto ort = ort_matching_ours(r, s);
  for (const char* o : {"y", "g"}) {
    CAPTURE(o);
    CHECK(quark::metrics::cosine(ref.at(o), ort.at(o)) > 0.999);
  }
}

TEST_CASE("dynamic quantization: --eval compares with the float model on the data given") {
  const fs::path fin = work_dir() / "dyn_evalok_float.onnx";
  save_proto(cnn_model(), fin);
  qo::memory_reader data({inputs(11), inputs(12)});
  qo::quantize_run_options run;
  run.eval_samples = 2;
  const qo::quantize_report r =
      qo::quantize_model(fin, work_dir() / "dyn_evalok.onnx",
                         qo::get_default_config("UINT8_DYNAMIC_QUANT"), data, run);
  REQUIRE(r.eval.has_value());
  CHECK(r.eval->samples == 2u);
  // Output 0 is y, the rewritten path; uint8 weights and activations keep it close.
  CHECK(r.eval->cosine_min > 0.999);
  CHECK(r.eval->cosine_min < 1.0);  // it is quantized: not the float output
}

namespace {
/// UINT8_DYNAMIC_QUANT on `fm` fails with a frontend_error containing `message` and writes no
/// output file.
void dynamic_refused(const ::onnx::ModelProto& fm, const std::string& message) {
  const fs::path fin = work_dir() / "dyn_refused_float.onnx";
  const fs::path fout = work_dir() / "dyn_refused.onnx";
  fs::remove(fout);
  save_proto(fm, fin);
  qo::memory_reader none({});
  CHECK_THROWS_WITH_AS(
      qo::quantize_model(fin, fout, qo::get_default_config("UINT8_DYNAMIC_QUANT"), none),
      doctest::Contains(message.c_str()), quark::onnx::frontend_error);
  CHECK(!fs::exists(fout));
}
}  // namespace

TEST_CASE("dynamic quantization refuses what its ops cannot express, naming the culprit") {
  SUBCASE("per-channel uint8 Conv weights") {
    qo::qconfig cfg = qo::get_default_config("UINT8_DYNAMIC_QUANT");
    cfg.global_config.weight->quant_granularity = qo::granularity::channel;
    CHECK_THROWS_WITH_AS(quantize(cfg, "dyn_bad_channel"),
                         doctest::Contains("node 'n0' (Conv): per-channel weights need Int8Spec"),
                         quark::config_error);
  }
  SUBCASE("int8 activations") {
    qo::qconfig cfg = qo::get_default_config("UINT8_DYNAMIC_QUANT");
    cfg.global_config.input_tensors = qo::make_spec(qo::spec_name::int8);
    CHECK_THROWS_WITH_AS(cfg.validate(), doctest::Contains("DynamicQuantizeLinear"),
                         quark::config_error);
  }
  SUBCASE("what the integer ops cannot express, each named") {
    struct bad {
      const char* what;
      std::function<void(qo::qconfig&)> edit;
    };
    const bad cases[] = {
        {"global_config.weight must be an Int8Spec or UInt8Spec",
         [](qo::qconfig& c) { c.global_config.weight = qo::make_spec(qo::spec_name::int16); }},
        {"global_config.weight must be an Int8Spec or UInt8Spec",
         [](qo::qconfig& c) { c.global_config.weight->scale_type = qo::scale_kind::power_of_2; }},
        {"output_tensors and bias must be null",
         [](qo::qconfig& c) {
           c.global_config.output_tensors = qo::make_spec(qo::spec_name::uint8);
         }},
        {"specific_layer_config[0] is not supported",
         [](qo::qconfig& c) {
           c.specific_layer_config.push_back({c.global_config, {qo::node_selector::parse("n0")}});
         }},
        {"layer_type_config[0] sets a config",
         [](qo::qconfig& c) {
           c.layer_type_config.push_back({c.global_config, {"Conv"}});
         }},
        {"extra_options.WeightsOnly needs static quantization",
         [](qo::qconfig& c) { c.extra_options.set("WeightsOnly", true); }},
    };
    for (const bad& b : cases) {
      CAPTURE(std::string(b.what));
      qo::qconfig cfg = qo::get_default_config("UINT8_DYNAMIC_QUANT");
      b.edit(cfg);
      CHECK_THROWS_WITH_AS(cfg.validate(), doctest::Contains(b.what), quark::config_error);
    }
    // A null layer_type_config entry (keep an op type float) is fine.
    qo::qconfig ok = qo::get_default_config("UINT8_DYNAMIC_QUANT");
    ok.layer_type_config.push_back({std::nullopt, {"Conv"}});
    CHECK_NOTHROW(ok.validate());
    const run_result r = quantize(ok, "dyn_no_conv");
    CHECK(count_ops(r.model, "ConvInteger") == 0);
    CHECK(count_ops(r.model, "MatMulInteger") == 1);
  }
  SUBCASE("a Conv bias that is not a constant") {
    model_builder b(13, 7);
    b.input("x", onnx_type::float32, {1, 3, 6, 6});
    b.input("bias", onnx_type::float32, {4});
    b.initializer("w", onnx_type::float32, {4, 3, 3, 3}, conv_weight());
    b.node("Conv", {"x", "w", "bias"}, {"y"});
    b.output("y", onnx_type::float32, {1, 4, 4, 4});
    dynamic_refused(b.build(), "node 'n0' (Conv): the bias 'bias' is not a float32 constant");
  }
  SUBCASE("a Conv weight or bias of the wrong shape (nothing runs the model first)") {
    // Before the check, a scalar weight read its dimension 0 from an empty shape and a bias of
    // 5 values was copied into 4 (a heap overflow under ASan).
    struct bad {
      std::vector<std::int64_t> w, bias;
      const char* what;
    };
    const bad cases[] = {
        {{}, {4}, "the weight 'w' (rank 0) is not [M, C / group, k...] with M >= 1"},
        {{4, 27}, {4}, "the weight 'w' (rank 2) is not [M, C / group, k...] with M >= 1"},
        {{0, 3, 3, 3}, {0}, "the weight 'w' (rank 4) is not [M, C / group, k...] with M >= 1"},
        {{4, 3, 3, 3}, {5}, "the bias 'b' holds 5 values for 4 output channels"},
        {{4, 3, 3, 3}, {3}, "the bias 'b' holds 3 values for 4 output channels"},
    };
    for (const bad& c : cases) {
      CAPTURE(std::string(c.what));
      model_builder b(13, 7);
      b.input("x", onnx_type::float32, {1, 3, 6, 6});
      std::size_t wn = 1;
      for (const auto d : c.w)
        wn *= static_cast<std::size_t>(d);
      b.initializer("w", onnx_type::float32, c.w, std::vector<float>(wn, 0.25f));
      b.initializer("b", onnx_type::float32, c.bias,
                    std::vector<float>(static_cast<std::size_t>(c.bias[0]), 0.5f));
      b.node("Conv", {"x", "w", "b"}, {"y"});
      b.output("y", onnx_type::float32, {1, 4, 4, 4});
      dynamic_refused(b.build(), std::string("node 'n0' (Conv): ") + c.what);
    }
  }
  SUBCASE("an algorithm") {
    qo::qconfig cfg = qo::get_default_config("UINT8_DYNAMIC_QUANT");
    cfg.algo_config.push_back({qo::algo_name::cle, qo::option_value::object()});
    CHECK_THROWS_WITH_AS(cfg.validate(), doctest::Contains("algo_config[0] (cle)"),
                         quark::config_error);
  }
  SUBCASE("a NaN weight") {
    ::onnx::ModelProto m = cnn_model();
    for (auto& t : *m.mutable_graph()->mutable_initializer()) {
      if (t.name() == "w2") {
        std::string raw = t.raw_data();
        const float nan = std::nanf("");
        std::memcpy(raw.data() + 4 * 7, &nan, 4);
        t.set_raw_data(raw);
      }
    }
    const fs::path fin = work_dir() / "dyn_nan_float.onnx";
    const fs::path fout = work_dir() / "dyn_nan.onnx";
    fs::remove(fout);
    save_proto(m, fin);
    qo::memory_reader none({});
    CHECK_THROWS_WITH_AS(
        qo::quantize_model(fin, fout, qo::get_default_config("UINT8_DYNAMIC_QUANT"), none),
        doctest::Contains("weight 'w2' of node 'n3' (MatMul) holds NaN at element 7"),
        quark::onnx::frontend_error);
    CHECK(!fs::exists(fout));
  }
  SUBCASE("evaluation without data") {
    const fs::path fin = work_dir() / "dyn_eval_float.onnx";
    save_proto(cnn_model(), fin);
    qo::memory_reader none({});
    qo::quantize_run_options run;
    run.eval_samples = 2;
    CHECK_THROWS_WITH_AS(
        qo::quantize_model(fin, work_dir() / "dyn_eval.onnx",
                           qo::get_default_config("UINT8_DYNAMIC_QUANT"), none, run),
        doctest::Contains("evaluation (EvalMetrics / --eval) needs data"), quark::config_error);
  }
}

namespace {

/// y = If(flag > 0) then MatMul(x, w_outer) else MatMul(MatMul(x, w_const), w_body): the three
/// places a body's weight can live (an outer initializer, a Constant node of the body, an
/// initializer of the body), opset 13.
::onnx::ModelProto if_model() {
  auto tensor_of = [](const std::string& name, std::vector<std::int64_t> dims,
                      const std::vector<float>& v) {
    ::onnx::TensorProto t;
    t.set_name(name);
    t.set_data_type(onnx_type::float32);
    for (auto d : dims)
      t.add_dims(d);
    t.set_raw_data(std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float)));
    return t;
  };
  model_builder then_b(13, 7);
  then_b.node("MatMul", {"x", "w_outer"}, {"y_then"});
  then_b.output("y_then", onnx_type::float32, {2, 4});
  ::onnx::GraphProto then_g = then_b.build().graph();
  then_g.set_name("then");
  then_g.mutable_node(0)->set_name("then_mm");

  model_builder else_b(13, 7);
  else_b.node("MatMul", {"x", "w_const"}, {"h"});
  else_b.node("MatMul", {"h", "w_body"}, {"y_else"});
  else_b.output("y_else", onnx_type::float32, {2, 4});
  ::onnx::GraphProto else_g = else_b.build().graph();
  else_g.set_name("else");
  else_g.mutable_node(0)->set_name("else_mm0");
  else_g.mutable_node(1)->set_name("else_mm1");
  ::onnx::NodeProto c;
  c.set_op_type("Constant");
  c.set_name("else_const");
  c.add_output("w_const");
  auto* va = c.add_attribute();
  va->set_name("value");
  va->set_type(::onnx::AttributeProto::TENSOR);
  *va->mutable_t() = tensor_of("", {8, 4}, random_floats(32, 32));
  *else_g.mutable_node()->Add() = c;
  else_g.mutable_node()->SwapElements(0, 2);  // the Constant first
  else_g.mutable_node()->SwapElements(1, 2);
  *else_g.add_initializer() = tensor_of("w_body", {4, 4}, random_floats(16, 33));

  model_builder b(13, 7);
  b.input("x", onnx_type::float32, {2, 8});
  b.input("flag", onnx_type::float32, {1});
  b.initializer("w_outer", onnx_type::float32, {8, 4}, random_floats(32, 31));
  b.initializer("zero", onnx_type::float32, {1}, std::vector<float>{0.0f});
  b.node("Greater", {"flag", "zero"}, {"cond"});
  b.node("If", {"cond"}, {"y"});
  b.output("y", onnx_type::float32, {2, 4});
  ::onnx::ModelProto m = b.build();
  auto* n = m.mutable_graph()->mutable_node(1);
  auto* t = n->add_attribute();
  t->set_name("then_branch");
  t->set_type(::onnx::AttributeProto::GRAPH);
  *t->mutable_g() = then_g;
  auto* e = n->add_attribute();
  e->set_name("else_branch");
  e->set_type(::onnx::AttributeProto::GRAPH);
  *e->mutable_g() = else_g;
  return m;
}

std::size_t count_ops_deep(const ::onnx::GraphProto& g, const std::string& op) {
  std::size_t k = 0;
  for (const auto& n : g.node()) {
    k += n.op_type() == op ? 1u : 0u;
    for (const auto& a : n.attribute()) {
      if (a.has_g())
        k += count_ops_deep(a.g(), op);
    }
  }
  return k;
}

}  // namespace

TEST_CASE("EnableSubgraph: MatMul nodes inside If branches, weights from every scope") {
  const fs::path fin = work_dir() / "dyn_if_float.onnx";
  const fs::path fout = work_dir() / "dyn_if.onnx";
  save_proto(if_model(), fin);
  qo::qconfig cfg = qo::get_default_config("UINT8_DYNAMIC_QUANT");
  cfg.extra_options.set("EnableSubgraph", true);
  qo::memory_reader none({});
  const qo::quantize_report r = qo::quantize_model(fin, fout, cfg, none);
  const ::onnx::ModelProto qm = load_proto(fout);
  CHECK(r.op_types.at("MatMul").quantized == 3);
  CHECK(count_ops_deep(qm.graph(), "MatMulInteger") == 3);
  CHECK(count_ops_deep(qm.graph(), "MatMul") == 0);
  CHECK(count_ops_deep(qm.graph(), "Constant") == 0);  // the body's float weight is gone
  CHECK(find_init(qm, "w_outer") == nullptr);          // read by no one any more
  if (!ort_available())
    return;
  const std::vector<float> x = random_floats(16, 34);
  for (const float flag : {1.0f, -1.0f}) {
    CAPTURE(flag);
    const std::vector<npy_array> in = {npy_array::from(std::span<const float>(x), {2, 8}),
                                       npy_array::from(std::vector<float>{flag}, {1})};
    const auto ref = run_ort(if_model(), in).at("y").values<float>();
    const auto ort = run_ort(qm, in).at("y").values<float>();
    const std::vector<float> flag_v{flag};
    const qo::calib_sample feed{{"x", qo::tensor::from_floats({2, 8}, x)},
                                {"flag", qo::tensor::from_floats({1}, flag_v)}};
    const qo::tensor ours = qo::run_model(fout, feed).at("y");
    const auto od = ours.data<float>();
    REQUIRE(od.size() == ort.size());
    for (std::size_t i = 0; i < ort.size(); ++i)
      CHECK(std::bit_cast<std::uint32_t>(od[i]) == std::bit_cast<std::uint32_t>(ort[i]));
    CHECK(quark::metrics::cosine(ref, ort) > 0.999);
  }
  // Static quantization covers the main graph only (as Quark): EnableSubgraph needs dynamic.
  qo::qconfig st = qo::get_default_config("A8W8");
  st.extra_options.set("EnableSubgraph", true);
  CHECK_THROWS_WITH_AS(st.validate(), doctest::Contains("EnableSubgraph = true needs use_dynamic"),
                       quark::config_error);
}

TEST_CASE("dynamic quantization of Gather: an embedding table stored as uint8 codes") {
  // ids [2, 5] -> Gather(table [50, 16]) -> MatMul(w [16, 8]) -> y; and a Gather from an
  // activation (x's rows), which stays float.
  model_builder b(13, 7);
  b.input("ids", onnx_type::int64, {2, 5});
  b.input("x", onnx_type::float32, {4, 8});
  b.initializer("table", onnx_type::float32, {50, 16}, random_floats(800, 41, -2.0f, 1.5f));
  b.initializer("w", onnx_type::float32, {16, 8}, random_floats(128, 42));
  b.initializer("rows", onnx_type::int64, {2}, std::vector<std::int64_t>{3, 1});
  b.node("Gather", {"table", "ids"}, {"e"});
  b.node("MatMul", {"e", "w"}, {"y"});
  b.node("Gather", {"x", "rows"}, {"g"});
  b.output("y", onnx_type::float32, {2, 5, 8});
  b.output("g", onnx_type::float32, {2, 8});
  const ::onnx::ModelProto fm = b.build();
  const fs::path fin = work_dir() / "dyn_gather_float.onnx";
  const fs::path fout = work_dir() / "dyn_gather.onnx";
  save_proto(fm, fin);
  qo::memory_reader none({});
  const qo::quantize_report r =
      qo::quantize_model(fin, fout, qo::get_default_config("UINT8_DYNAMIC_QUANT"), none);
  const ::onnx::ModelProto qm = load_proto(fout);
  CHECK(r.op_types.at("Gather").quantized == 1);
  CHECK(r.op_types.at("Gather").kept_float == 1);
  CHECK(find_init(qm, "table") == nullptr);
  const auto* codes = find_init(qm, "table_quantized");
  REQUIRE(codes != nullptr);
  CHECK(codes->data_type() == onnx_type::uint8);
  const auto* s = find_init(qm, "table_scale");
  const auto* z = find_init(qm, "table_zero_point");
  REQUIRE(s != nullptr);
  REQUIRE(z != nullptr);
  check_uint8_params(random_floats(800, 41, -2.0f, 1.5f), values_of<float>(*s).at(0),
                     values_of<std::uint8_t>(*z).at(0));
  if (!ort_available())
    return;
  check_codes_against_ort(qm, "table", random_floats(800, 41, -2.0f, 1.5f), {50, 16}, -1,
                          onnx_type::uint8);
  std::vector<std::int64_t> ids = {0, 7, 49, 3, 3, 12, 25, 1, 40, 8};
  const std::vector<float> x = random_floats(32, 43);
  const std::vector<npy_array> in = {npy_array::from(std::span<const std::int64_t>(ids), {2, 5}),
                                     npy_array::from(std::span<const float>(x), {4, 8})};
  const auto ref = run_ort(fm, in);
  const auto ort = run_ort(qm, in);
  qo::tensor ids_t(quark::dtype_id::int64, {2, 5});
  std::copy(ids.begin(), ids.end(), ids_t.data<std::int64_t>().begin());
  const auto ours =
      qo::run_model(fout, {{"ids", ids_t}, {"x", qo::tensor::from_floats({4, 8}, x)}});
  for (const char* o : {"y", "g"}) {
    CAPTURE(std::string(o));
    const auto a = ort.at(o).values<float>();
    const auto d = ours.at(o).data<float>();
    REQUIRE(a.size() == d.size());
    for (std::size_t i = 0; i < a.size(); ++i)
      CHECK(std::bit_cast<std::uint32_t>(a[i]) == std::bit_cast<std::uint32_t>(d[i]));
  }
  CHECK(ort.at("g").values<float>() == ref.at("g").values<float>());  // left float
  CHECK(quark::metrics::cosine(ref.at("y").values<float>(), ort.at("y").values<float>()) > 0.999);
}
