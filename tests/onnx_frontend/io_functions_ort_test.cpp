// SPDX-License-Identifier: MIT
// Model-local functions (ModelProto.functions): our runtime runs them as their bodies, as ONNX
// Runtime 1.30 does, and the quantizer inlines them so that the operators inside are quantized.
// Oracles: the output computed by hand from the functions' definitions, and ORT on the same
// model (the original with its functions, and the quantized one).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include <quark/metrics.hpp>
#include <quark/onnx/presets.hpp>
#include <quark/onnx/quantizer.hpp>
#include <quark/onnx/runtime.hpp>

#include "support/model_files.hpp"
#include "support/ort.hpp"

namespace qo = quark::onnx;
using namespace quark::test;

namespace {

constexpr int n = 4;  // x [1, 4], w [4, 4]

::onnx::AttributeProto float_attr(const std::string& name, float v) {
  ::onnx::AttributeProto a;
  a.set_name(name);
  a.set_type(::onnx::AttributeProto::FLOAT);
  a.set_f(v);
  return a;
}

::onnx::NodeProto* body_node(::onnx::FunctionProto& f, const std::string& op,
                             std::vector<std::string> in, std::vector<std::string> out,
                             const std::string& domain = "") {
  auto* node = f.add_node();
  node->set_op_type(op);
  if (!domain.empty())
    node->set_domain(domain);
  for (auto& s : in)
    node->add_input(s);
  for (auto& s : out)
    node->add_output(s);
  return node;
}

::onnx::ValueInfoProto tensor_value_info(const std::string& name, int elem_type,
                                         std::vector<std::int64_t> dims) {
  ::onnx::ValueInfoProto v;
  v.set_name(name);
  auto* t = v.mutable_type()->mutable_tensor_type();
  t->set_elem_type(elem_type);
  for (auto d : dims)
    t->mutable_shape()->add_dim()->set_dim_value(d);
  return v;
}

::onnx::FunctionProto function(const std::string& name, std::vector<std::string> in,
                               std::vector<std::string> out, int opset = 18) {
  ::onnx::FunctionProto f;
  f.set_name(name);
  f.set_domain("local");
  for (auto& s : in)
    f.add_input(s);
  for (auto& s : out)
    f.add_output(s);
  auto* o = f.add_opset_import();
  o->set_domain("");
  o->set_version(opset);
  auto* l = f.add_opset_import();
  l->set_domain("local");
  l->set_version(1);
  return f;
}

/// local.MatMulScaleRelu(X, W) -> (Y, Unused), attribute alpha (default 2.0, IR 9
/// attribute_proto): Y = Relu(alpha * (X @ W)), Unused = Neg(X @ W) (every call names both
/// outputs: ONNX Runtime refuses a call that leaves one out).
/// local.Twice(X, W) -> Y: MatMulScaleRelu twice, alpha left to its default.
/// local.ClipOpt(X, Lo, Hi) -> Y = Clip(X, Lo, Hi) (called with X alone: no bounds).
/// Main graph: h = MatMulScaleRelu(x, w; alpha = 0.5) [node "block1"], g = Twice(h, w)
/// [node "block2"], y = ClipOpt(g) [node "block3"].
::onnx::ModelProto function_model(int inner_opset = 18) {
  model_builder b(18);
  b.opset("local", 1);
  b.input("x", onnx_type::float32, {1, n});
  b.initializer("w", onnx_type::float32, {n, n}, random_floats(n * n, 3, -0.2f, 0.8f));
  b.node("MatMulScaleRelu", {"x", "w"}, {"h", "h_neg"}, {attr_float("alpha", 0.5f)}, "local");
  b.node("Twice", {"h", "w"}, {"g"}, {}, "local");
  b.node("ClipOpt", {"g"}, {"y"}, {}, "local");
  b.output("y", onnx_type::float32, {1, n});
  ::onnx::ModelProto m = b.build();
  const char* names[] = {"block1", "block2", "block3"};
  for (int i = 0; i < 3; ++i)
    m.mutable_graph()->mutable_node(i)->set_name(names[i]);

  auto f = function("MatMulScaleRelu", {"X", "W"}, {"Y", "Unused"}, inner_opset);
  f.add_attribute("alpha");  // (onnx 1.13+ lists defaulted ones in attribute_proto only)
  body_node(f, "MatMul", {"X", "W"}, {"M"});
  auto* c = body_node(f, "Constant", {}, {"A"});
  auto* ref = c->add_attribute();
  ref->set_name("value_float");
  ref->set_type(::onnx::AttributeProto::FLOAT);
  ref->set_ref_attr_name("alpha");
  body_node(f, "Mul", {"M", "A"}, {"S"});
  body_node(f, "Relu", {"S"}, {"Y"});
  body_node(f, "Neg", {"M"}, {"Unused"});
  // attribute_proto (field 11) is newer than the onnx 1.12 schema: written as an unknown field.
  f.mutable_unknown_fields()->AddLengthDelimited(11, float_attr("alpha", 2.0f).SerializeAsString());
  // So is value_info (field 12, IR 10): M's type; Y's (a formal output, the caller's to
  // declare) and one for a name the body does not define are left out when inlined.
  for (const char* name : {"M", "Y", "NotInBody"}) {
    f.mutable_unknown_fields()->AddLengthDelimited(
        12, tensor_value_info(name, ::onnx::TensorProto::FLOAT, {1, n}).SerializeAsString());
  }
  *m.add_functions() = f;

  auto t = function("Twice", {"X", "W"}, {"Y"});
  body_node(t, "MatMulScaleRelu", {"X", "W"}, {"H", "N1"}, "local");
  body_node(t, "MatMulScaleRelu", {"H", "W"}, {"Y", "N2"}, "local");
  *m.add_functions() = t;

  auto k = function("ClipOpt", {"X", "Lo", "Hi"}, {"Y"});
  body_node(k, "Clip", {"X", "Lo", "Hi"}, {"Y"});
  *m.add_functions() = k;
  return m;
}

/// y by hand: relu(2 * (relu(2 * (relu(0.5 * (x @ w)) @ w)) @ w)).
std::vector<float> expected_y(const std::vector<float>& x) {
  const auto w = random_floats(n * n, 3, -0.2f, 0.8f);
  auto step = [&](const std::vector<float>& v, float alpha) {
    std::vector<float> out(n);
    for (int j = 0; j < n; ++j) {
      double s = 0.0;
      for (int i = 0; i < n; ++i)
        s += static_cast<double>(v[static_cast<std::size_t>(i)]) *
             static_cast<double>(w[static_cast<std::size_t>(i * n + j)]);
      out[static_cast<std::size_t>(j)] = std::max(0.0f, alpha * static_cast<float>(s));
    }
    return out;
  };
  return step(step(step(x, 0.5f), 2.0f), 2.0f);
}

/// Element by element, |a - b| within `eps` relative (absolute near 0).
void check_close(const std::vector<float>& a, const std::vector<float>& b, double eps) {
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    CAPTURE(i);
    CHECK(static_cast<double>(a[i]) == doctest::Approx(static_cast<double>(b[i])).epsilon(eps));
  }
}

std::vector<float> run_ours(const ::onnx::ModelProto& m, const std::vector<float>& x) {
  qo::runtime rt(to_model(m));
  const auto out = rt.run({{"x", qo::tensor::from_floats({1, n}, x)}});
  const auto y = out.at("y").data<float>();
  return {y.begin(), y.end()};
}

}  // namespace

TEST_CASE("model-local functions run as their bodies: attribute references, defaults, nesting") {
  const auto m = function_model();
  const std::vector<float> x{0.9f, -0.4f, 1.3f, 0.2f};
  const auto want = expected_y(x);
  const auto ours = run_ours(m, x);
  check_close(ours, want, 1e-5);
  CHECK(std::any_of(want.begin(), want.end(), [](float v) { return v > 0.0f; }));
  // The same through the model's own pass: five calls (block1, block2, block2's two inside
  // Twice, block3), no function left, a model that validates and runs alike.
  qo::model inlined = to_model(m);
  CHECK(inlined.inline_functions() == 5u);
  CHECK(to_proto(inlined).functions_size() == 0);
  CHECK_NOTHROW(inlined.validate());
  CHECK(run_ours(to_proto(inlined), x) == ours);
  CHECK(inlined.inline_functions() == 0u);
  // MatMulScaleRelu's value_info goes with each of its three calls: M's type, under the name
  // its MatMul writes there.
  const ::onnx::ModelProto proto = to_proto(inlined);
  const auto& g = proto.graph();
  std::vector<std::string> matmul_outputs, typed;
  for (const auto& node : g.node()) {
    if (node.op_type() == "MatMul")
      matmul_outputs.push_back(node.output(0));
  }
  for (const auto& v : g.value_info()) {
    typed.push_back(v.name());
    CHECK(v.type().tensor_type().elem_type() == ::onnx::TensorProto::FLOAT);
    CHECK(v.type().tensor_type().shape().dim_size() == 2);
  }
  CHECK(matmul_outputs.size() == 3u);
  CHECK(typed == matmul_outputs);
  if (!ort_available()) {
    MESSAGE("skipped ORT comparison: " << ort_unavailable_reason());
    return;
  }
  const auto ort = run_ort(m, {npy_array::from(x, {1, n})}).at("y").values<float>();
  check_close(ours, ort, 1e-5);
}

TEST_CASE("quantize_model inlines model-local functions and quantizes the MatMuls inside") {
  const auto m = function_model();
  std::vector<qo::calib_sample> calib;
  for (std::uint32_t s = 0; s < 4; ++s)
    calib.push_back({{"x", qo::tensor::from_floats({1, n}, random_floats(n, 50 + s, 0.0f, 1.5f))}});
  qo::memory_reader reader(calib);
  const qo::model q = qo::quantize_model(to_model(m), qo::get_default_config("A8W8"), reader);
  const auto qp = to_proto(q);
  CHECK(qp.functions_size() == 0);
  for (const auto& o : qp.opset_import())
    CHECK(o.domain() != "local");  // only the functions used it
  int matmuls = 0, dq_weights = 0;
  for (const auto& node : qp.graph().node()) {
    CHECK(node.domain() != "local");
    if (node.op_type() == "MatMul") {
      ++matmuls;
      CHECK(node.name().find('/') != std::string::npos);  // "block1/MatMul", "block2/..."
    }
    if (node.op_type() == "DequantizeLinear" && node.input(0).rfind("w", 0) == 0)
      ++dq_weights;
  }
  CHECK(matmuls == 3);  // one in block1, one in each of block2's two calls
  CHECK(dq_weights >= 1);
  CHECK(node_named(qp, "block1/MatMul") != nullptr);
  CHECK(node_named(qp, "block2/MatMulScaleRelu_1/MatMul") != nullptr);
  const std::vector<float> x{0.9f, -0.4f, 1.3f, 0.2f};
  const auto ours = run_ours(qp, x);
  CHECK(quark::metrics::cosine(ours, expected_y(x)) >= 0.99);
  if (!ort_available()) {
    MESSAGE("skipped ORT comparison: " << ort_unavailable_reason());
    return;
  }
  const auto ort = run_ort(qp, {npy_array::from(x, {1, n})}).at("y").values<float>();
  check_close(ours, ort, 1e-4);
}

TEST_CASE("model-local functions that cannot be inlined are named") {
  const std::vector<float> x{1, 2, 3, 4};
  // A function importing another version of the default operator set than the model.
  CHECK_THROWS_WITH_AS(run_ours(function_model(17), x),
                       doctest::Contains("function 'local:MatMulScaleRelu' imports operator set "
                                         "'' version 17 and the model version 18"),
                       qo::frontend_error);
  // A function calling itself.
  auto self = function_model();
  auto* twice = self.mutable_functions(1);
  twice->mutable_node(1)->set_op_type("Twice");
  CHECK_THROWS_WITH_AS(run_ours(self, x),
                       doctest::Contains("function 'local:Twice' calls itself (local:Twice -> "
                                         "local:Twice): recursion cannot be inlined"),
                       qo::frontend_error);
  // More inputs than the function declares.
  auto extra = function_model();
  extra.mutable_graph()->mutable_node(0)->add_input("x");
  extra.mutable_graph()->mutable_node(0)->add_input("x");
  CHECK_THROWS_WITH_AS(run_ours(extra, x),
                       doctest::Contains("node 'block1' calls function 'local:MatMulScaleRelu' "
                                         "with 4 inputs and 2 outputs; it declares 2 and 2"),
                       qo::frontend_error);
  // Two functions of one name.
  auto twin = function_model();
  *twin.add_functions() = twin.functions(2);
  CHECK_THROWS_WITH_AS(run_ours(twin, x),
                       doctest::Contains("two functions are named 'local:ClipOpt'"),
                       qo::frontend_error);
  // A default attribute (attribute_proto) that is not an AttributeProto.
  auto bad_default = function_model();
  bad_default.mutable_functions(0)->mutable_unknown_fields()->AddLengthDelimited(11, "\xff\xff");
  CHECK_THROWS_WITH_AS(run_ours(bad_default, x),
                       doctest::Contains("'local:MatMulScaleRelu': a default attribute "
                                         "(attribute_proto) does not parse"),
                       qo::frontend_error);
  // A chain of 65 distinct functions, each calling the next: past the 64 levels inlined.
  model_builder b(18);
  b.opset("local", 1);
  b.input("x", onnx_type::float32, {1, n});
  b.node("F0", {"x"}, {"y"}, {}, "local");
  b.output("y", onnx_type::float32, {1, n});
  auto chain = b.build();
  for (int i = 0; i <= 64; ++i) {
    auto f = function("F" + std::to_string(i), {"X"}, {"Y"});
    if (i < 64)
      body_node(f, "F" + std::to_string(i + 1), {"X"}, {"Y"}, "local");
    else
      body_node(f, "Relu", {"X"}, {"Y"});
    *chain.add_functions() = f;
  }
  CHECK_THROWS_WITH_AS(run_ours(chain, x),
                       doctest::Contains("function 'local:F64' is called 64 levels deep"),
                       qo::frontend_error);
  chain.mutable_functions()->DeleteSubrange(1, 64);  // F0 alone calls F1, now undefined
  *chain.mutable_functions(0)->mutable_node(0) = chain.functions(0).node(0);
  chain.mutable_functions(0)->mutable_node(0)->set_op_type("Relu");
  chain.mutable_functions(0)->mutable_node(0)->clear_domain();
  CHECK(run_ours(chain, x) == std::vector<float>{1, 2, 3, 4});  // one level: Relu(x)
}

TEST_CASE("calls inside If bodies are inlined too, reading the enclosing graph's values") {
  model_builder b(18);
  b.opset("local", 1);
  b.input("x", onnx_type::float32, {1, n});
  b.input("c", onnx_type::boolean, {1});
  b.initializer("w", onnx_type::float32, {n, n}, random_floats(n * n, 3, -0.2f, 0.8f));
  b.node("If", {"c"}, {"y"});
  b.output("y", onnx_type::float32, {1, n});
  ::onnx::ModelProto m = b.build();
  *m.add_functions() = function_model().functions(0);  // MatMulScaleRelu, alpha default 2.0
  auto branch = [](const std::string& out) {
    ::onnx::GraphProto g;
    g.set_name(out + "_branch");
    auto* o = g.add_output();
    o->set_name(out);
    o->mutable_type()->mutable_tensor_type()->set_elem_type(onnx_type::float32);
    return g;
  };
  ::onnx::GraphProto then_g = branch("t");
  auto* call = then_g.add_node();
  call->set_op_type("MatMulScaleRelu");
  call->set_domain("local");
  call->set_name("inner");
  call->add_input("x");
  call->add_input("w");
  call->add_output("t");
  call->add_output("t_neg");
  ::onnx::GraphProto else_g = branch("e");
  auto* id = else_g.add_node();
  id->set_op_type("Identity");
  id->add_input("x");
  id->add_output("e");
  auto* node = m.mutable_graph()->mutable_node(0);
  for (auto [name, g] : {std::pair{"then_branch", &then_g}, std::pair{"else_branch", &else_g}}) {
    auto* a = node->add_attribute();
    a->set_name(name);
    a->set_type(::onnx::AttributeProto::GRAPH);
    *a->mutable_g() = *g;
  }

  const std::vector<float> x{0.9f, -0.4f, 1.3f, 0.2f};
  // c true: Relu(2 * (x @ w)) (the default alpha); c false: x.
  const auto w = random_floats(n * n, 3, -0.2f, 0.8f);
  std::vector<float> want(n);
  for (int j = 0; j < n; ++j) {
    double s = 0.0;
    for (int i = 0; i < n; ++i)
      s += static_cast<double>(x[static_cast<std::size_t>(i)]) *
           static_cast<double>(w[static_cast<std::size_t>(i * n + j)]);
    want[static_cast<std::size_t>(j)] = std::max(0.0f, 2.0f * static_cast<float>(s));
  }
  qo::runtime rt(to_model(m));
  for (const bool c : {true, false}) {
    CAPTURE(c);
    qo::tensor cond(quark::dtype_id::boolean, {1});
    cond.data<bool>()[0] = c;
    const auto out = rt.run({{"x", qo::tensor::from_floats({1, n}, x)}, {"c", cond}});
    const auto y = out.at("y").data<float>();
    check_close({y.begin(), y.end()}, c ? want : x, 1e-5);
  }
  if (!ort_available()) {
    MESSAGE("skipped ORT comparison: " << ort_unavailable_reason());
    return;
  }
  const auto ort = run_ort(m, {npy_array::from(x, {1, n}),
                               npy_array::from(std::vector<std::uint8_t>{1}, {1}, "|b1")})
                       .at("y")
                       .values<float>();
  check_close(ort, want, 1e-5);
}

// gen_torch_functions.py: PyTorch 1.13's export with export_modules_as_functions, two calls of a
// residual Block function whose weights are function inputs.
TEST_CASE("a PyTorch export with module functions quantizes as its inlined graph, in ORT too") {
  const auto path = detail::source_dir() / "tests" / "onnx_frontend" / "data" / "functions" /
                    "torch_functions.onnx";
  const ::onnx::ModelProto fm = load_proto(path);
  REQUIRE(fm.functions_size() == 1);
  REQUIRE(fm.functions(0).name() == "Block");
  std::vector<qo::calib_sample> calib;
  for (std::uint32_t s = 0; s < 4; ++s) {
    calib.push_back(
        {{"x", qo::tensor::from_floats({1, 3, 16, 16}, random_floats(768, 60 + s, -1.0f, 1.0f))}});
  }
  qo::memory_reader reader(calib);
  const auto qp =
      to_proto(qo::quantize_model(qo::model::load(path), qo::get_default_config("A8W8"), reader));
  CHECK(qp.functions_size() == 0);
  for (const auto& o : qp.opset_import())
    CHECK(o.domain() != "__main__");
  int convs = 0;
  for (const auto& node : qp.graph().node()) {
    CHECK(node.domain() != "__main__");
    if (node.op_type() == "Conv") {
      ++convs;
      CHECK(node.input(1).find("DequantizeLinear") != std::string::npos);  // int8 weights
    }
  }
  CHECK(convs == 3);  // the stem's and one in each Block call
  CHECK(node_named(qp, "/b2/Block/Conv_0") != nullptr);

  const auto x = random_floats(768, 99, -1.0f, 1.0f);
  auto ours = [&](const ::onnx::ModelProto& m) {
    qo::runtime rt(to_model(m));
    const auto out = rt.run({{"x", qo::tensor::from_floats({1, 3, 16, 16}, x)}});
    const auto y = out.at("y").data<float>();
    return std::vector<float>(y.begin(), y.end());
  };
  const auto float_ours = ours(fm);
  const auto q_ours = ours(qp);
  REQUIRE(float_ours.size() == 4u);
  CHECK(quark::metrics::cosine(float_ours, q_ours) >= 0.99);
  if (!ort_available()) {
    MESSAGE("skipped ORT comparison: " << ort_unavailable_reason());
    return;
  }
  for (const auto* m : {&fm, &qp}) {
    const auto ort = run_ort(*m, {npy_array::from(x, {1, 3, 16, 16})}).at("y").values<float>();
    check_close(m == &fm ? float_ours : q_ours, ort, 1e-4);
  }
}
