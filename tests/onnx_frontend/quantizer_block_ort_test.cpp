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
