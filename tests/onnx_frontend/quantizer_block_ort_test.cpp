// SPDX-License-Identifier: MIT
// Block specs in the quantizer (BFP16, MX4/6/9, OCP MX: quark-spec §7.5, §7.7, §8) and the
// runtime's com.amd.quark ops BFPQuantizeDequantize / MXQuantizeDequantize (§1.7-§1.11).
//
// Oracle: the header functions of include/quark/block/quark_ops.hpp, proven in tests/block
// against exhaustive and hand-derived references. A quantized model's output must equal the
// float model evaluated on inputs and weights fake-quantized by those functions along the axis
// §7.5 / §7.7 prescribe (bit-exact in our runtime, which runs the same float kernels), and the
// float half that ONNX Runtime can run (ORT has no com.amd.quark kernels) is checked in ORT.
#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include <quark/metrics.hpp>
#include <quark/onnx/calib_data.hpp>
#include <quark/onnx/config.hpp>
#include <quark/onnx/presets.hpp>
#include <quark/onnx/quantizer.hpp>
#include <quark/onnx/runtime.hpp>

#include "support/model_files.hpp"
#include "support/ort.hpp"
#include "support/quark_ops_oracle.hpp"

namespace qo = quark::onnx;
using namespace quark::test;

namespace {

/// BFPQuantizeDequantize through the header (the oracle).
std::vector<float> bfp_fq(const std::vector<float>& x, const std::vector<std::int64_t>& shape,
                          quark::bfp_op_attributes a, std::int64_t axis) {
  a.axis = axis;
  std::vector<float> y(x.size());
  quark::test::bfp_oracle(a, std::span<const float>(x), shape, std::span<float>(y));
  return y;
}

/// MXQuantizeDequantize through the header (the oracle).
std::vector<float> mx_fq(const std::vector<float>& x, const std::vector<std::int64_t>& shape,
                         quark::mx_op_attributes a, std::int64_t axis) {
  a.axis = axis;
  std::vector<float> y(x.size());
  quark::test::mx_oracle(a, std::span<const float>(x), shape, std::span<float>(y));
  return y;
}

quark::bfp_op_attributes bfp16_attrs(std::int64_t rounding) {
  quark::bfp_op_attributes a;  // op defaults: to_bfp, bit_width 16, block 8
  a.rounding_mode = rounding;
  return a;
}

quark::mx_op_attributes mxint8_attrs() {
  quark::mx_op_attributes a;  // DEFAULT_MICROSCALING_PARAMS: int8, block 32, rounding 2
  a.rounding_mode = 2;
  return a;
}

std::vector<float> values(const qo::tensor& t) {
  const auto d = t.data<float>();
  return {d.begin(), d.end()};
}

/// Runs a model in our runtime on one float input; returns output `out`.
std::vector<float> run_ours(const qo::model& m, const std::string& in, qo::shape_t shape,
                            const std::vector<float>& x, const std::string& out) {
  const qo::runtime rt(m);
  auto res = rt.run({{in, qo::tensor::from_floats(std::move(shape), x)}});
  REQUIRE(res.contains(out));
  return values(res.at(out));
}

struct fused {
  std::string op;
  std::map<std::string, std::int64_t> ints;
  std::map<std::string, std::string> strings;
};

/// The fused com.amd.quark nodes of `p`, by the tensor they read.
std::map<std::string, fused> fused_nodes(const ::onnx::ModelProto& p) {
  std::map<std::string, fused> r;
  for (const auto& n : p.graph().node()) {
    if (n.domain() != "com.amd.quark")
      continue;
    fused f;
    f.op = n.op_type();
    for (const auto& a : n.attribute()) {
      if (a.type() == ::onnx::AttributeProto::INT)
        f.ints[a.name()] = a.i();
      else
        f.strings[a.name()] = a.s();
    }
    r[n.input(0)] = f;
  }
  return r;
}

std::int64_t opset_of(const ::onnx::ModelProto& p, const std::string& domain) {
  for (const auto& o : p.opset_import()) {
    if (o.domain() == domain)
      return o.version();
  }
  return -1;
}

const std::vector<float>& x_values() {
  static const std::vector<float> x = random_floats(3 * 64, 11, -2.0f, 2.0f);
  return x;
}

const std::vector<float>& w_values() {
  static const std::vector<float> w = random_floats(64 * 8, 12, -0.5f, 0.5f);
  return w;
}

/// MatMul(x[1,3,64], w[64,8]) -> y, opset 13.
::onnx::ModelProto matmul_model(const std::vector<float>& w) {
  model_builder b(13, 8);
  b.input("x", onnx_type::float32, {1, 3, 64});
  b.initializer("w", onnx_type::float32, {64, 8}, w);
  b.node("MatMul", {"x", "w"}, {"y"});
  b.output("y", onnx_type::float32, {1, 3, 8});
  return b.build();
}

qo::model quantize(const ::onnx::ModelProto& p, const qo::qconfig& cfg, const std::string& in,
                   qo::shape_t shape, qo::quantize_report* report = nullptr) {
  std::vector<qo::calib_sample> samples;
  for (std::uint32_t s = 0; s < 3; ++s) {
    const std::size_t n = qo::element_count(shape);
    samples.push_back({{in, qo::tensor::from_floats(shape, random_floats(n, 50 + s))}});
  }
  qo::memory_reader reader(std::move(samples));
  return qo::quantize_model(to_model(p), cfg, reader, report);
}

}  // namespace

TEST_CASE(
    "BFP16 preset on a MatMul: fused nodes on x and w with refined axes, output = float "
    "model on header-fake-quantized x and w") {
  qo::quantize_report report;
  const qo::model q =
      quantize(matmul_model(w_values()), qo::get_default_config("BFP16"), "x", {1, 3, 64}, &report);
  const auto p = to_proto(q);
  // Structure: one BFPQuantizeDequantize per quantized tensor (x, w and the output y, which
  // the activation spec also covers), nothing else inserted.
  const auto f = fused_nodes(p);
  REQUIRE(f.size() == 3);
  REQUIRE(f.contains("x"));
  REQUIRE(f.contains("w"));
  REQUIRE(f.contains("y_QuantizeLinear_Input"));  // a graph output keeps its name
  CHECK(p.graph().node_size() == 4);
  for (const auto& entry : f) {
    const std::string& t = entry.first;  // named: CAPTURE cannot take a structured binding
    const fused& n = entry.second;
    CAPTURE(t);
    CHECK(n.op == "BFPQuantizeDequantize");
    CHECK(n.strings.at("bfp_method") == "to_bfp");
    CHECK(n.ints.at("bit_width") == 16);
    CHECK(n.ints.at("block_size") == 8);
    CHECK(n.ints.at("rounding_mode") == 0);  // BFP16Spec: the op default (quark-spec §8.1)
  }
  // RefineBlockAxis (§7.7): MatMul A (activation) -1, B (initializer of rank 2) rank - 2 = 0.
  CHECK(f.at("x").ints.at("axis") == -1);
  CHECK(f.at("w").ints.at("axis") == 0);
  CHECK(f.at("y_QuantizeLinear_Input").ints.at("axis") == -1);  // MatMul output follows A
  CHECK(opset_of(p, "com.amd.quark") == 1);
  CHECK(opset_of(p, "") == 13);  // no Q/DQ: the default opset is untouched
  // The weight stays a float initializer with its original values (AddQDQPairToWeight forced).
  CHECK(values(q.initializer("w")) == w_values());
  CHECK(report.calibration_samples == 1);  // nothing needs a range: one sample for the types
  CHECK(report.tensors_per_type.at("BFP16") == 3);

  // Oracle.
  const auto a = bfp16_attrs(0);
  const std::vector<float> xq = bfp_fq(x_values(), {1, 3, 64}, a, 2);
  const std::vector<float> wq = bfp_fq(w_values(), {64, 8}, a, 0);
  const qo::model ref = to_model(matmul_model(wq));
  const auto y_ref = run_ours(ref, "x", {1, 3, 64}, xq, "y");
  const auto got = run_ours(q, "x", {1, 3, 64}, x_values(), "y");
  CHECK(got == bfp_fq(y_ref, {1, 3, 8}, a, 2));
  // The quantization did something (the oracle is not the float model).
  CHECK(xq != x_values());
  CHECK(wq != w_values());
  // ORT evaluates the float reference on the same fake-quantized values.
  auto ort = run_ort(matmul_model(wq), {npy_array::from(std::span<const float>(xq), {1, 3, 64})});
  const auto ort_y = ort.begin()->second.values<float>();
  REQUIRE(ort_y.size() == y_ref.size());
  for (std::size_t i = 0; i < y_ref.size(); ++i)
    CHECK(y_ref[i] == doctest::Approx(static_cast<double>(ort_y[i])).epsilon(1e-5));
}

TEST_CASE("RefineBlockAxis false: every fused node blocks along axis 1 (the op default)") {
  qo::qconfig cfg = qo::get_default_config("BFP16");
  cfg.extra_options.set("RefineBlockAxis", false);
  const qo::model q = quantize(matmul_model(w_values()), cfg, "x", {1, 3, 64});
  const auto f = fused_nodes(to_proto(q));
  CHECK(f.at("x").ints.at("axis") == 1);
  CHECK(f.at("w").ints.at("axis") == 1);
  CHECK(f.at("y_QuantizeLinear_Input").ints.at("axis") == 1);
  const auto a = bfp16_attrs(0);
  const qo::model ref = to_model(matmul_model(bfp_fq(w_values(), {64, 8}, a, 1)));
  const auto y_ref = run_ours(ref, "x", {1, 3, 64}, bfp_fq(x_values(), {1, 3, 64}, a, 1), "y");
  CHECK(run_ours(q, "x", {1, 3, 64}, x_values(), "y") == bfp_fq(y_ref, {1, 3, 8}, a, 1));
}

TEST_CASE("an explicit spec axis wins over RefineBlockAxis") {
  qo::qconfig cfg = qo::get_default_config("MXINT8");
  cfg.global_config.weight->axis = 1;
  const auto f = fused_nodes(to_proto(quantize(matmul_model(w_values()), cfg, "x", {1, 3, 64})));
  CHECK(f.at("w").ints.at("axis") == 1);
  CHECK(f.at("x").ints.at("axis") == -1);
}

TEST_CASE(
    "MXINT8 preset on Conv + bias -> Sigmoid: bias blocks along axis 0, partial blocks of "
    "16 channels, output = float model on header-fake-quantized tensors") {
  const std::vector<float> w = random_floats(8 * 16 * 9, 21, -0.4f, 0.4f);
  const std::vector<float> bias = random_floats(8, 22, -0.3f, 0.3f);
  const std::vector<float> x = random_floats(16 * 25, 23, -3.0f, 3.0f);
  auto conv = [](const std::vector<float>& wv, const std::vector<float>& bv, bool sigmoid) {
    model_builder b(13, 8);
    b.input("x", onnx_type::float32, {1, 16, 5, 5});
    b.initializer("w", onnx_type::float32, {8, 16, 3, 3}, wv);
    b.initializer("b", onnx_type::float32, {8}, bv);
    b.node("Conv", {"x", "w", "b"}, {"c"}, {attr_ints("pads", {1, 1, 1, 1})});
    if (sigmoid) {
      b.node("Sigmoid", {"c"}, {"y"});
      b.output("y", onnx_type::float32, {1, 8, 5, 5});
    } else {
      b.output("c", onnx_type::float32, {1, 8, 5, 5});
    }
    return b.build();
  };
  const qo::model q =
      quantize(conv(w, bias, true), qo::get_default_config("MXINT8"), "x", {1, 16, 5, 5});
  const auto p = to_proto(q);
  const auto f = fused_nodes(p);
  // x, c (read by the quantized Sigmoid), y (its output), weight and bias.
  CHECK(f.size() == 5);
  REQUIRE(f.contains("y_QuantizeLinear_Input"));
  CHECK(f.at("y_QuantizeLinear_Input").ints.at("axis") == 1);
  for (const char* t : {"x", "w", "b", "c"}) {
    CAPTURE(t);
    REQUIRE(f.contains(t));
    CHECK(f.at(t).op == "MXQuantizeDequantize");
    CHECK(f.at(t).strings.at("element_dtype") == "int8");
    CHECK(f.at(t).ints.at("block_size") == 32);
    CHECK(f.at(t).ints.at("rounding_mode") == 2);
  }
  CHECK(f.at("x").ints.at("axis") == 1);
  CHECK(f.at("w").ints.at("axis") == 1);  // Conv: the input-channel (reduction) axis
  CHECK(f.at("b").ints.at("axis") == 0);  // rank 1 (quark-spec §7.5)
  CHECK(f.at("c").ints.at("axis") == 1);

  const auto a = mxint8_attrs();
  const qo::model ref_conv =
      to_model(conv(mx_fq(w, {8, 16, 3, 3}, a, 1), mx_fq(bias, {8}, a, 0), false));
  const auto c = run_ours(ref_conv, "x", {1, 16, 5, 5}, mx_fq(x, {1, 16, 5, 5}, a, 1), "c");
  const auto cq = mx_fq(c, {1, 8, 5, 5}, a, 1);
  model_builder sb(13, 8);
  sb.input("c", onnx_type::float32, {1, 8, 5, 5});
  sb.node("Sigmoid", {"c"}, {"y"});
  sb.output("y", onnx_type::float32, {1, 8, 5, 5});
  const auto y = run_ours(to_model(sb.build()), "c", {1, 8, 5, 5}, cq, "y");
  const auto got = run_ours(q, "x", {1, 16, 5, 5}, x, "y");
  CHECK(got == mx_fq(y, {1, 8, 5, 5}, a, 1));
  CHECK(cq != c);
}

TEST_CASE("Gemm and Softmax readers: RefineBlockAxis follows transB and the Softmax axis") {
  const std::vector<float> w = random_floats(64 * 8, 31);
  auto gemm = [&](bool trans_b) {
    model_builder b(13, 8);
    b.input("x", onnx_type::float32, {2, 64});
    b.initializer("w", onnx_type::float32,
                  trans_b ? std::vector<std::int64_t>{8, 64} : std::vector<std::int64_t>{64, 8}, w);
    b.node("Gemm", {"x", "w"}, {"g"}, {attr_int("transB", trans_b ? 1 : 0)});
    b.node("Softmax", {"g"}, {"y"}, {attr_int("axis", 0)});
    b.output("y", onnx_type::float32, {2, 8});
    return b.build();
  };
  for (const bool trans_b : {false, true}) {
    CAPTURE(trans_b);
    const qo::model q = quantize(gemm(trans_b), qo::get_default_config("MX6"), "x", {2, 64});
    const auto f = fused_nodes(to_proto(q));
    CHECK(f.at("x").ints.at("axis") == 1);
    CHECK(f.at("w").ints.at("axis") == (trans_b ? 1 : 0));
    CHECK(f.at("g").ints.at("axis") == 0);  // Softmax(axis 0) reads g
    CHECK(f.at("w").strings.at("bfp_method") == "to_bfp_prime");
    CHECK(f.at("w").ints.at("bit_width") == 13);
    CHECK(f.at("w").ints.at("sub_block_size") == 2);
    CHECK(f.at("w").ints.at("sub_block_shift_bits") == 1);
    CHECK(f.at("w").ints.at("block_size") == 16);
  }
}

TEST_CASE(
    "BF16_BFP16: bfloat16 Cast pairs on activations, BFP16 weights (rounding 2), the "
    "BF16 half checked in ONNX Runtime") {
  const std::vector<float> w = random_floats(8 * 16 * 9, 41, -0.4f, 0.4f);
  const std::vector<float> bias = random_floats(8, 42, -0.3f, 0.3f);
  const std::vector<float> x = random_floats(16 * 25, 43, -3.0f, 3.0f);
  auto conv = [](const std::vector<float>& wv, const std::vector<float>& bv) {
    model_builder b(13, 8);
    b.input("x", onnx_type::float32, {1, 16, 5, 5});
    b.initializer("w", onnx_type::float32, {8, 16, 3, 3}, wv);
    b.initializer("b", onnx_type::float32, {8}, bv);
    b.node("Conv", {"x", "w", "b"}, {"c"}, {attr_ints("pads", {1, 1, 1, 1})});
    b.node("Sigmoid", {"c"}, {"y"});
    b.output("y", onnx_type::float32, {1, 8, 5, 5});
    return b.build();
  };
  const qo::model q =
      quantize(conv(w, bias), qo::get_default_config("BF16_BFP16"), "x", {1, 16, 5, 5});
  const auto p = to_proto(q);
  const auto f = fused_nodes(p);
  CHECK(f.size() == 2);
  CHECK(f.at("w").ints.at("rounding_mode") == 2);  // legacy DEFAULT_BFP_PARAMS
  CHECK(f.at("b").ints.at("axis") == 0);
  std::size_t casts = 0;
  for (const auto& n : p.graph().node())
    casts += n.op_type() == "Cast" ? 1U : 0U;
  CHECK(casts == 6);  // x, c and y: Cast to bfloat16 and back

  // Reference ORT can run: the float model with header-fake-quantized weight and bias, its
  // activations quantized by the same BFloat16 spec (weights left float).
  const auto a = bfp16_attrs(2);
  qo::qconfig bf16 = qo::get_default_config("BF16_BFP16");
  bf16.global_config.weight.reset();
  const qo::model ref = quantize(conv(bfp_fq(w, {8, 16, 3, 3}, a, 1), bfp_fq(bias, {8}, a, 0)),
                                 bf16, "x", {1, 16, 5, 5});
  CHECK(fused_nodes(to_proto(ref)).empty());
  const auto got = run_ours(q, "x", {1, 16, 5, 5}, x, "y");
  CHECK(got == run_ours(ref, "x", {1, 16, 5, 5}, x, "y"));
  auto ort = run_ort(to_proto(ref), {npy_array::from(std::span<const float>(x), {1, 16, 5, 5})});
  const auto ort_y = ort.begin()->second.values<float>();
  REQUIRE(ort_y.size() == got.size());
  // Conv sums in another order can move c across a bfloat16 rounding boundary (2^-8 relative);
  // Sigmoid's slope is at most 1/4.
  for (std::size_t i = 0; i < got.size(); ++i)
    CHECK(std::abs(got[i] - ort_y[i]) <= 4e-3f);
  CHECK(quark::metrics::cosine(std::span<const float>(got), std::span<const float>(ort_y)) >=
        0.99999);
}

TEST_CASE(
    "MX9_INT8: MX9 activations, int8 weights through DequantizeLinear, ORT cannot run the "
    "fused op, our runtime matches the header on the activation") {
  const qo::model q =
      quantize(matmul_model(w_values()), qo::get_default_config("MX9_INT8"), "x", {1, 3, 64});
  const auto p = to_proto(q);
  const auto f = fused_nodes(p);
  REQUIRE(f.size() == 2);  // x and the output y
  CHECK(f.at("x").ints.at("bit_width") == 16);
  CHECK(f.at("x").ints.at("axis") == -1);
  std::size_t dq = 0;
  for (const auto& n : p.graph().node())
    dq += n.op_type() == "DequantizeLinear" ? 1U : 0U;
  CHECK(dq == 1);
  CHECK(opset_of(p, "com.amd.quark") == 1);
  // The int8 weight dequantized by hand (per tensor, zero point 0), the MX9 activations by the
  // header.
  const qo::tensor wq = q.initializer("w_quantized");
  const float scale = q.initializer("w_scale").data<float>()[0];
  std::vector<float> wd;
  for (const std::int8_t v : wq.data<std::int8_t>())
    wd.push_back(static_cast<float>(v) * scale);
  quark::bfp_op_attributes mx9;
  mx9.bfp_method = "to_bfp_prime";
  mx9.block_size = 16;
  mx9.rounding_mode = 2;
  const auto y_ref = run_ours(to_model(matmul_model(wd)), "x", {1, 3, 64},
                              bfp_fq(x_values(), {1, 3, 64}, mx9, 2), "y");
  CHECK(run_ours(q, "x", {1, 3, 64}, x_values(), "y") == bfp_fq(y_ref, {1, 3, 8}, mx9, 2));
}

TEST_CASE(
    "runtime: BFPQuantizeDequantize / MXQuantizeDequantize nodes equal the header on "
    "float32 and float16, along the attribute axis") {
  const std::vector<float> x = random_floats(4 * 40, 61, -8.0f, 8.0f);
  struct op_case {
    const char* op;
    std::vector<attribute> attrs;
    std::vector<float> expect;
  };
  quark::bfp_op_attributes mx6;
  mx6.bfp_method = "to_bfp_prime";
  mx6.bit_width = 13;
  mx6.block_size = 16;
  mx6.rounding_mode = 2;
  quark::mx_op_attributes fp4;
  fp4.element_dtype = "fp4_e2m1";
  const std::vector<op_case> cases = {
      {"BFPQuantizeDequantize", {attr_int("axis", 0)}, bfp_fq(x, {4, 40}, {}, 0)},
      {"BFPQuantizeDequantize",
       {attr_string("bfp_method", "to_bfp_prime"), attr_int("bit_width", 13),
        attr_int("block_size", 16), attr_int("rounding_mode", 2)},
       bfp_fq(x, {4, 40}, mx6, 1)},
      {"MXQuantizeDequantize",
       {attr_string("element_dtype", "fp4_e2m1")},
       mx_fq(x, {4, 40}, fp4, 1)},
      {"MXQuantizeDequantize", {attr_int("axis", -2), attr_int("block_size", 2)}, [&] {
         quark::mx_op_attributes m;
         m.block_size = 2;
         return mx_fq(x, {4, 40}, m, 0);
       }()}};
  for (const auto& c : cases) {
    CAPTURE(c.op);
    model_builder b(13, 8);
    b.opset("com.amd.quark", 1);
    b.input("x", onnx_type::float32, {4, 40});
    b.node(c.op, {"x"}, {"y"}, c.attrs, "com.amd.quark");
    b.output("y", onnx_type::float32, {4, 40});
    const auto got = run_ours(to_model(b.build()), "x", {4, 40}, x, "y");
    CHECK(got == c.expect);
    CHECK(got != x);
  }
  // float16 in and out: the header's float16 overload (widen, process, round back).
  std::vector<quark::float16> h(x.size());
  for (std::size_t i = 0; i < x.size(); ++i)
    h[i] = quark::convert<quark::float16, quark::policies::ieee>(x[i]);
  std::vector<quark::float16> hy(x.size());
  quark::test::bfp_oracle(bfp16_attrs(0), std::span<const quark::float16>(h),
                          std::vector<std::int64_t>{4, 40}, std::span<quark::float16>(hy));
  model_builder b(13, 8);
  b.opset("com.amd.quark", 1);
  b.input("x", onnx_type::float16, {4, 40});
  b.node("BFPQuantizeDequantize", {"x"}, {"y"}, {}, "com.amd.quark");
  b.output("y", onnx_type::float16, {4, 40});
  const qo::runtime rt(to_model(b.build()));
  qo::tensor in(quark::dtype_id::float16, {4, 40});
  std::copy(h.begin(), h.end(), in.data<quark::float16>().begin());
  const auto res = rt.run({{"x", in}});
  const auto y = res.at("y").data<quark::float16>();
  REQUIRE(y.size() == hy.size());
  for (std::size_t i = 0; i < y.size(); ++i)
    CHECK(quark::to_float(y[i]) == quark::to_float(hy[i]));
}

TEST_CASE(
    "runtime: a fused node computing in place (its input's last reader) on NCHW along "
    "axis 1 equals the header") {
  const std::vector<float> x = random_floats(2 * 40 * 3 * 5, 81, -4.0f, 4.0f);
  const std::vector<std::int64_t> shape = {2, 40, 3, 5};
  quark::mx_op_attributes fp8;
  fp8.element_dtype = "fp8_e4m3";
  quark::bfp_op_attributes mx6;
  mx6.bfp_method = "to_bfp_prime";
  mx6.bit_width = 13;
  mx6.block_size = 16;
  for (const bool mx : {false, true}) {
    CAPTURE(mx);
    model_builder b(13, 8);
    b.opset("com.amd.quark", 1);
    b.input("x", onnx_type::float32, shape);
    b.node("Neg", {"x"}, {"n"});  // a value the fused node may overwrite
    if (mx) {
      b.node("MXQuantizeDequantize", {"n"}, {"y"}, {attr_string("element_dtype", "fp8_e4m3")},
             "com.amd.quark");
    } else {
      b.node("BFPQuantizeDequantize", {"n"}, {"y"},
             {attr_string("bfp_method", "to_bfp_prime"), attr_int("bit_width", 13),
              attr_int("block_size", 16)},
             "com.amd.quark");
    }
    b.output("y", onnx_type::float32, shape);
    std::vector<float> neg(x.size());
    std::transform(x.begin(), x.end(), neg.begin(), [](float v) { return -v; });
    const auto expect = mx ? mx_fq(neg, shape, fp8, 1) : bfp_fq(neg, shape, mx6, 1);
    CHECK(run_ours(to_model(b.build()), "x", {2, 40, 3, 5}, x, "y") == expect);
  }
}

TEST_CASE("runtime: bad com.amd.quark attributes name the node and the attribute") {
  struct bad {
    const char* op;
    attribute attr;
    const char* culprit;
  };
  const std::vector<bad> cases = {
      {"BFPQuantizeDequantize", attr_int("rounding_mode", 3), "rounding_mode"},
      {"BFPQuantizeDequantize", attr_string("bfp_method", "to_fp"), "bfp_method"},
      {"BFPQuantizeDequantize", attr_int("bit_width", 40), "bit_width"},
      {"BFPQuantizeDequantize", attr_int("block_size", 0), "block_size"},
      {"BFPQuantizeDequantize", attr_int("axis", 2), "axis"},
      {"BFPQuantizeDequantize", attr_string("axis", "1"), "axis"},  // wrong attribute kind
      {"BFPQuantizeDequantize", attr_int("element_dtype", 1), "element_dtype"},  // MX only
      {"MXQuantizeDequantize", attr_string("element_dtype", "int4"), "element_dtype"},
      {"MXQuantizeDequantize", attr_int("rounding_mode", -1), "rounding_mode"},
      {"MXQuantizeDequantize", attr_int("bit_width", 16), "bit_width"},  // BFP only
  };
  for (const auto& c : cases) {
    CAPTURE(c.culprit);
    model_builder b(13, 8);
    b.opset("com.amd.quark", 1);
    b.input("x", onnx_type::float32, {2, 8});
    b.node(c.op, {"x"}, {"y"}, {c.attr}, "com.amd.quark");
    b.output("y", onnx_type::float32, {2, 8});
    const qo::runtime rt(to_model(b.build()));
    const qo::calib_sample feeds = {{"x", qo::tensor::from_floats({2, 8}, random_floats(16, 71))}};
    const std::string node = "node 'n0' (" + std::string(c.op) + ")";
    const std::string attr = "'" + std::string(c.culprit) + "'";
    CHECK_THROWS_WITH_AS((void)rt.run(feeds), doctest::Contains(node.c_str()), qo::frontend_error);
    CHECK_THROWS_WITH_AS((void)rt.run(feeds), doctest::Contains(attr.c_str()), qo::frontend_error);
  }
  // An unknown op of the domain is listed as unsupported when the model is prepared.
  model_builder b(13, 8);
  b.opset("com.amd.quark", 1);
  b.input("x", onnx_type::float32, {2, 8});
  b.node("ExtendedLSTM", {"x"}, {"y"}, {}, "com.amd.quark");
  b.output("y", onnx_type::float32, {2, 8});
  CHECK_THROWS_WITH_AS(qo::runtime(to_model(b.build())),
                       doctest::Contains("com.amd.quark:ExtendedLSTM"), qo::frontend_error);
}

TEST_CASE("PaddleOCR cls with the BFP16 and MXINT8 presets runs in our runtime") {
  const char* c = std::getenv("QUARK_DATA_CACHE");
  const char* s = std::getenv("QUARK_SOURCE_DIR");
  const std::filesystem::path cache =
      c && *c ? std::filesystem::path(c) : std::filesystem::path(s ? s : ".") / ".cache";
  const auto file =
      cache / "models" / "ocr-models" / "assets" / "ch_ppocr_mobile_v2.0_cls_infer.onnx";
  if (!std::filesystem::exists(file)) {
    MESSAGE("PaddleOCR cls model not found (scripts/fetch-models.sh): skipped");
    return;
  }
  const qo::model m = qo::model::load(file);
  // Floors just under what these random [0, 1) samples give (regression guards; the text-image
  // figures are in docs/bench/quantizer.md, "Block formats").
  const std::pair<const char*, double> presets[] = {{"BFP16", 0.995}, {"MXINT8", 0.99}};
  for (const auto& entry : presets) {
    const std::string name = entry.first;
    const double min_cos = entry.second;
    CAPTURE(name);
    std::vector<qo::calib_sample> samples;
    for (std::uint32_t k = 0; k < 3; ++k) {
      samples.push_back(
          {{"x", qo::tensor::from_floats({1, 3, 48, 192},
                                         random_floats(3 * 48 * 192, 90 + k, 0.0f, 1.0f))}});
    }
    qo::memory_reader reader(std::move(samples));
    qo::quantize_report report;
    qo::quantize_run_options run;
    run.eval_samples = 3;
    const qo::model q = qo::quantize_model(m, qo::get_default_config(name), reader, &report, run);
    CHECK(report.calibration_samples == 1);
    CHECK(report.tensors_per_type.size() == 1);
    CHECK(report.tensors_per_type.at(name == "BFP16" ? "BFP16" : "MXInt8") > 100);
    REQUIRE(report.eval);
    MESSAGE(name << " cls cosine mean " << report.eval->cosine_mean << " min "
                 << report.eval->cosine_min);
    CHECK(report.eval->cosine_mean >= min_cos);
    const auto p = to_proto(q);
    CHECK(opset_of(p, "com.amd.quark") == 1);
  }
}

namespace {

qo::option_value override_list(std::initializer_list<std::pair<const char*, qo::option_value>> kv) {
  qo::option_value entry = qo::option_value::object();
  for (const auto& [k, v] : kv)
    entry.set(k, v);
  return qo::option_value::array({entry});
}

/// A8W8 on matmul_model() with the MatMul output left float and TensorQuantOverrides
/// {"x": [x_entry], "w": [w_entry]}.
qo::qconfig a8w8_overriding(
    std::initializer_list<std::pair<const char*, qo::option_value>> x_entry,
    std::initializer_list<std::pair<const char*, qo::option_value>> w_entry) {
  qo::qconfig cfg = qo::get_default_config("A8W8");
  cfg.extra_options.set("OpTypesToExcludeOutputQuantization", qo::option_value::array({"MatMul"}));
  cfg.extra_options.set(
      "TensorQuantOverrides",
      qo::option_value::object().set("x", override_list(x_entry)).set("w", override_list(w_entry)));
  return cfg;
}

/// The oracle for a8w8_overriding() with x in BFP `a` and w in MX `m` (along `w_axis`): q's
/// output equals the float model evaluated on x and w fake-quantized by the header functions
/// (x blocked along its last axis, MatMul A's reduction axis).
void check_block_overrides(const qo::model& q, const quark::bfp_op_attributes& a,
                           const quark::mx_op_attributes& m, std::int64_t w_axis) {
  const std::vector<float> xq = bfp_fq(x_values(), {1, 3, 64}, a, 2);
  const std::vector<float> wq = mx_fq(w_values(), {64, 8}, m, w_axis);
  CHECK(xq != x_values());  // the quantization did something
  CHECK(wq != w_values());
  const auto y_ref = run_ours(to_model(matmul_model(wq)), "x", {1, 3, 64}, xq, "y");
  CHECK(run_ours(q, "x", {1, 3, 64}, x_values(), "y") == y_ref);
}

/// The op types of `p`'s nodes.
std::multiset<std::string> op_types(const ::onnx::ModelProto& p) {
  std::multiset<std::string> r;
  for (const auto& n : p.graph().node())
    r.insert(n.op_type());
  return r;
}

}  // namespace

TEST_CASE(
    "TensorQuantOverrides QBFP / QMX (seed 000's example): one fused node per named tensor "
    "with the op defaults, no calibration, output = float model on header-fake-quantized "
    "x and w") {
  const qo::qconfig cfg = a8w8_overriding({{"quant_type", "ExtendedQuantType.QBFP"}},
                                          {{"quant_type", "QMX"}, {"axis", 1}});
  qo::quantize_report report;
  const qo::model q = quantize(matmul_model(w_values()), cfg, "x", {1, 3, 64}, &report);
  const auto p = to_proto(q);
  const auto f = fused_nodes(p);
  REQUIRE(f.size() == 2);
  REQUIRE(f.contains("x"));
  REQUIRE(f.contains("w"));
  // BFP_OP_DEFAULT_ATTRS (quark-spec §1.8), blocked along MatMul A's reduction axis
  // (RefineBlockAxis is on once an override asks for a block format, §7.7).
  CHECK(f.at("x").op == "BFPQuantizeDequantize");
  CHECK(f.at("x").strings.at("bfp_method") == "to_bfp");
  CHECK(f.at("x").ints.at("bit_width") == 16);
  CHECK(f.at("x").ints.at("block_size") == 8);
  CHECK(f.at("x").ints.at("rounding_mode") == 0);
  CHECK(f.at("x").ints.at("axis") == -1);
  // MX_OP_DEFAULT_ATTRS (§1.7) with the entry's axis, which wins over RefineBlockAxis (0).
  CHECK(f.at("w").op == "MXQuantizeDequantize");
  CHECK(f.at("w").strings.at("element_dtype") == "int8");
  CHECK(f.at("w").ints.at("block_size") == 32);
  CHECK(f.at("w").ints.at("rounding_mode") == 0);
  CHECK(f.at("w").ints.at("axis") == 1);
  const auto ops = op_types(p);
  CHECK(ops.count("QuantizeLinear") == 0);
  CHECK(ops.count("DequantizeLinear") == 0);
  CHECK(opset_of(p, "com.amd.quark") == 1);
  CHECK(values(q.initializer("w")) == w_values());  // the fused node quantizes at run time
  CHECK(report.tensors_per_type.at("BFP16") == 1);  // the same attributes as BFP16Spec
  CHECK(report.tensors_per_type.at("QMX") == 1);    // MXInt8Spec rounds half to even (2)

  check_block_overrides(q, bfp16_attrs(0), quark::mx_op_attributes{}, 1);

  // With MatMul's output overridden too, no activation needs a range: one calibration sample
  // gives the tensor types (three without the overrides).
  qo::qconfig all = qo::get_default_config("A8W8");
  all.extra_options.set("TensorQuantOverrides",
                        qo::option_value::object()
                            .set("x", override_list({{"quant_type", "QBFP"}}))
                            .set("y", override_list({{"quant_type", "QBFP"}})));
  qo::quantize_report all_report;
  (void)quantize(matmul_model(w_values()), all, "x", {1, 3, 64}, &all_report);
  CHECK(all_report.calibration_samples == 1);
  qo::quantize_report plain_report;
  (void)quantize(matmul_model(w_values()), qo::get_default_config("A8W8"), "x", {1, 3, 64},
                 &plain_report);
  CHECK(plain_report.calibration_samples == 3);
}

TEST_CASE(
    "TensorQuantOverrides QBFP / QMX take BFPAttributes / MXAttributes, and are labelled as "
    "the spec with the same attributes") {
  qo::qconfig cfg = a8w8_overriding({{"quant_type", "QBFP"}}, {{"quant_type", "QMX"}});
  // Quark's MX9 parameters (quark-spec §1.9) and an fp8 MX element with half-even rounding.
  cfg.extra_options.set("BFPAttributes", qo::option_value::object()
                                             .set("bfp_method", "to_bfp_prime")
                                             .set("block_size", 16)
                                             .set("rounding_mode", 2));
  cfg.extra_options.set(
      "MXAttributes",
      qo::option_value::object().set("element_dtype", "fp8_e4m3").set("rounding_mode", 2));
  qo::quantize_report report;
  const qo::model q = quantize(matmul_model(w_values()), cfg, "x", {1, 3, 64}, &report);
  const auto f = fused_nodes(to_proto(q));
  REQUIRE(f.size() == 2);
  CHECK(f.at("x").strings.at("bfp_method") == "to_bfp_prime");
  CHECK(f.at("x").ints.at("block_size") == 16);
  CHECK(f.at("x").ints.at("sub_block_size") == 2);
  CHECK(f.at("x").ints.at("sub_block_shift_bits") == 1);
  CHECK(f.at("w").strings.at("element_dtype") == "fp8_e4m3");
  CHECK(f.at("w").ints.at("axis") == 0);  // RefineBlockAxis: MatMul B of rank 2
  CHECK(report.tensors_per_type.at("MX9") == 1);
  CHECK(report.tensors_per_type.at("MXFP8E4M3") == 1);

  quark::bfp_op_attributes a;
  a.bfp_method = "to_bfp_prime";
  a.block_size = 16;
  a.rounding_mode = 2;
  quark::mx_op_attributes m;
  m.element_dtype = "fp8_e4m3";
  m.rounding_mode = 2;
  check_block_overrides(q, a, m, 0);
}

TEST_CASE(
    "TensorQuantOverrides out of a block format: QInt8 on a BFP16 tensor is a Q/DQ pair "
    "with a MinMax symmetric scale, an axis alone moves the block axis") {
  qo::qconfig cfg = qo::get_default_config("BFP16");
  qo::option_value ov = qo::option_value::object();
  ov.set("x", override_list({{"quant_type", "QInt8"}}));
  ov.set("w", override_list({{"quant_type", "QInt8"}}));
  cfg.extra_options.set("TensorQuantOverrides", ov);
  qo::quantize_report report;
  const qo::model q = quantize(matmul_model(w_values()), cfg, "x", {1, 3, 64}, &report);
  const auto p = to_proto(q);
  const auto f = fused_nodes(p);
  REQUIRE(f.size() == 1);  // y keeps BFP16
  CHECK(f.contains("y_QuantizeLinear_Input"));
  CHECK(report.calibration_samples == 3);  // x needs its range now
  // The scales by hand: the BFP16 spec is symmetric, MinMax over the three samples the
  // quantize() helper feeds (seeds 50-52), int8's symmetric table -127..127 (quark-spec §1.2).
  float x_absmax = 0.0f;
  for (std::uint32_t s = 0; s < 3; ++s) {
    for (const float v : random_floats(3 * 64, 50 + s))
      x_absmax = std::max(x_absmax, std::abs(v));
  }
  float w_absmax = 0.0f;
  for (const float v : w_values())
    w_absmax = std::max(w_absmax, std::abs(v));
  auto init = [&](const std::string& name) { return q.initializer(name); };
  const float sx = init("x_scale").data<float>()[0];
  const float sw = init("w_scale").data<float>()[0];
  CHECK(sx == doctest::Approx(2.0 * static_cast<double>(x_absmax) / 254.0).epsilon(1e-6));
  CHECK(sw == doctest::Approx(2.0 * static_cast<double>(w_absmax) / 254.0).epsilon(1e-6));
  CHECK(init("x_zero_point").data<std::int8_t>()[0] == 0);
  CHECK(init("w_zero_point").data<std::int8_t>()[0] == 0);
  CHECK(opset_of(p, "") == 13);

  // Oracle: QuantizeLinear of x (RNE, saturated to -128..127), weights clipped to -127..127.
  auto qdq = [](const std::vector<float>& v, float s, float lo) {
    std::vector<float> r;
    for (const float e : v)
      r.push_back(std::clamp(std::nearbyint(e / s), lo, 127.0f) * s);
    return r;
  };
  const std::vector<float> xq = qdq(x_values(), sx, -128.0f);
  const std::vector<float> wq = qdq(w_values(), sw, -127.0f);
  const auto y_ref = run_ours(to_model(matmul_model(wq)), "x", {1, 3, 64}, xq, "y");
  CHECK(run_ours(q, "x", {1, 3, 64}, x_values(), "y") ==
        bfp_fq(y_ref, {1, 3, 8}, bfp16_attrs(0), 2));

  // An axis alone on a block tensor: the block axis (RefineBlockAxis would give 0).
  qo::qconfig axis_only = qo::get_default_config("BFP16");
  axis_only.extra_options.set("TensorQuantOverrides",
                              qo::option_value::object().set("w", override_list({{"axis", 1}})));
  const auto fa =
      fused_nodes(to_proto(quantize(matmul_model(w_values()), axis_only, "x", {1, 3, 64})));
  CHECK(fa.at("w").ints.at("axis") == 1);
  CHECK(fa.at("x").ints.at("axis") == -1);
}

TEST_CASE(
    "TensorQuantOverrides QBFP on a Conv input keeps that Conv's bias float (int32 bias needs "
    "an input scale), a range on a block tensor is refused by name") {
  qo::qconfig cfg = qo::get_default_config("A8W8");
  cfg.extra_options.set("OptimizeModel", false);
  cfg.extra_options.set("RemoveQDQConvRelu", false);  // c1 keeps its Q/DQ pair
  cfg.extra_options.set("TensorQuantOverrides",
                        qo::option_value::object()
                            .set("r1", override_list({{"quant_type", "QBFP"}}))
                            .set("a", override_list({{"quant_type", "QMX"}})));
  const qo::model q = quantize(conv_model(), cfg, "x", {1, 3, 8, 8});
  const auto p = to_proto(q);
  const auto f = fused_nodes(p);
  CHECK(f.size() == 3);
  REQUIRE(f.contains("r1"));
  CHECK(f.at("r1").ints.at("axis") == 1);  // a Conv reader fixes no axis: the op default
  // MaxPool's output shares its input's quantization (quark-spec §7.3), so it follows a into
  // the same fused node.
  REQUIRE(f.contains("a"));
  REQUIRE(f.contains("p"));
  CHECK(f.at("p").op == "MXQuantizeDequantize");
  // Relu's input keeps its own calibrated range: r1 (now BFP) has none to give it (§3.5). A
  // Conv output of this size spans a few units: an int8 step far below 0.1, not the step of
  // an empty range.
  const float c1_scale = q.initializer("c1_scale").data<float>()[0];
  CHECK(c1_scale > 0.001f);
  CHECK(c1_scale < 0.1f);
  bool b1_dq = false;
  bool b2_dq = false;
  for (const auto& n : p.graph().node()) {
    if (n.op_type() == "DequantizeLinear") {
      b1_dq = b1_dq || n.input(0).starts_with("b1");
      b2_dq = b2_dq || n.input(0).starts_with("b2");
    }
  }
  CHECK(b1_dq);   // conv1: int8 input and weight, int32 bias
  CHECK(!b2_dq);  // conv2 reads r1 through the fused node
  CHECK(q.initializer("b2").type() == quark::dtype_id::float32);
  const auto x = random_floats(3 * 64, 77);
  const auto got = run_ours(q, "x", {1, 3, 8, 8}, x, "y");
  const auto ref = run_ours(to_model(conv_model()), "x", {1, 3, 8, 8}, x, "y");
  CHECK(quark::metrics::cosine(std::span<const float>(got), std::span<const float>(ref)) >= 0.99);

  qo::qconfig range = qo::get_default_config("BFP16");
  range.extra_options.set("TensorQuantOverrides",
                          qo::option_value::object().set("x", override_list({{"rmax", 1.0}})));
  CHECK(error_id([&] {
          (void)quantize(matmul_model(w_values()), range, "x", {1, 3, 64});
        }) == "quark.config.value");
  CHECK(error_text([&] {
          (void)quantize(matmul_model(w_values()), range, "x", {1, 3, 64});
        })
            .find("TensorQuantOverrides.x: the tensor takes the block format BFP16, which has no "
                  "scale") != std::string::npos);
}
