// SPDX-License-Identifier: MIT
// quark::onnx::model: versions, graph inputs/outputs, initializers, node editing, the Constant
// pass, the op check, and models beyond protobuf's default 64 MB parse limit.
#include <algorithm>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include <quark/onnx/model.hpp>

#include "onnx_frontend/io_wire.hpp"

namespace qo = quark::onnx;
using namespace io_wire;

TEST_CASE("a default model has IR 8, opset 13 and round-trips through bytes") {
  qo::model m;
  CHECK(m.ir_version() == 8);
  CHECK(m.opset("") == 13);
  CHECK(m.opset("ai.onnx") == 13);
  CHECK(m.node_count() == 0);
  const auto back = qo::model::from_bytes(m.to_bytes());
  CHECK(back.ir_version() == 8);
}

TEST_CASE("opset bookkeeping per domain") {
  auto m = qo::model::from_bytes(model(relu_graph(), 7, {{"", 11}, {"com.microsoft", 1}}));
  CHECK(m.ir_version() == 7);
  CHECK(m.opset("") == 11);
  CHECK(m.opset("com.microsoft") == 1);
  CHECK_FALSE(m.opset("ai.onnx.ml").has_value());
  CHECK(m.ensure_opset("", 10) == 11);
  CHECK(m.ensure_opset("ai.onnx", 17) == 17);
  CHECK(m.opset("") == 17);
  m.set_opset("com.microsoft", 2);
  m.ensure_opset("ai.onnx.ml", 3);
  m.set_ir_version(9);
  const auto back = qo::model::from_bytes(m.to_bytes());
  CHECK(back.ir_version() == 9);
  CHECK(back.opsets().size() == 3);
  CHECK(back.opset("com.microsoft") == 2);
  CHECK(back.opset("ai.onnx.ml") == 3);
  CHECK_THROWS_AS(m.set_opset("", 0), qo::frontend_error);
}

TEST_CASE("inputs and outputs report shapes with dynamic dims as -1 and their symbols") {
  graph g;
  g.add_input(value_info("x", 1, {-1, 3, 224, -2}));
  g.add_input(value_info("w", 1, {2}));  // an initializer listed as input: not a real input
  g.add_initializer(float_tensor("w", {2}, {1, 2}));
  g.add_input(value_info("r", 7, {}, false));
  g.add_output(value_info("y", 10, {-1}));
  g.add_node(node("Foo", {"x", "w", "r"}, {"y"}, "foo"));
  const auto m = qo::model::from_bytes(model(g));
  const auto in = m.inputs();
  REQUIRE(in.size() == 2);
  CHECK(in[0].name == "x");
  CHECK(in[0].elem_type == 1);
  CHECK(in[0].has_shape);
  CHECK(in[0].shape == qo::shape_t{-1, 3, 224, -1});
  CHECK(in[0].dim_params == std::vector<std::string>{"d1", "", "", "d2"});
  CHECK(in[1].name == "r");
  CHECK_FALSE(in[1].has_shape);
  const auto out = m.outputs();
  REQUIRE(out.size() == 1);
  CHECK(out[0].elem_type == 10);
  CHECK(out[0].shape == qo::shape_t{-1});
}

TEST_CASE("initializers: get, set, replace, remove") {
  auto m = qo::model::from_bytes(model(relu_graph()));
  CHECK_FALSE(m.has_initializer("w"));
  CHECK_THROWS_WITH_AS(m.initializer("w"), doctest::Contains("no initializer named 'w'"),
                       qo::frontend_error);
  const float v[] = {1, 2, 3};
  m.set_initializer("w", qo::tensor::from_floats({3}, v));
  CHECK(m.has_initializer("w"));
  CHECK(m.initializer("w").data<float>()[2] == 3.0f);
  const float v2[] = {4};
  m.set_initializer("w", qo::tensor::from_floats({1}, v2));
  CHECK(m.initializer_names() == std::vector<std::string>{"w"});
  CHECK(m.initializer("w").shape() == qo::shape_t{1});
  CHECK(m.remove_initializer("w"));
  CHECK_FALSE(m.remove_initializer("w"));
  CHECK(m.initializer_names().empty());
}

TEST_CASE("nodes: view, insert, rewire, rename, order") {
  graph g;
  g.add_input(value_info("x", 1, {2}));
  g.add_output(value_info("y", 1, {2}));
  // Deliberately out of order: Relu reads t which the later Neg produces.
  g.add_node(node("Relu", {"t"}, {"y"}, "relu"));
  // Attributes Neg does not define: the op is in a domain of the test's own, whose schemas
  // validate() cannot know (an ONNX Neg with them is refused, see below).
  g.add_node(node("Neg", {"x"}, {"t"}, "neg", {attr_int("foo", 3), attr_floats("bar", {1.5f})},
                  "quark.test"));
  auto m = qo::model::from_bytes(model(g, 8, {{"", 13}, {"quark.test", 1}}));
  CHECK(m.node_count() == 2);
  const auto n1 = m.node(1);
  CHECK(n1.op_type == "Neg");
  CHECK(n1.inputs == std::vector<std::string>{"x"});
  REQUIRE(n1.attributes.size() == 2);
  CHECK(std::get<std::int64_t>(n1.attributes[0].value) == 3);
  CHECK(std::get<std::vector<float>>(n1.attributes[1].value) == std::vector<float>{1.5f});
  CHECK(m.topological_order() == std::vector<std::size_t>{1, 0});
  CHECK(m.producer("t") == 1u);
  CHECK(m.consumers("t") == std::vector<std::size_t>{0});

  // Insert QuantizeLinear/DequantizeLinear on t, the way the quantizer does.
  m.set_initializer("s", qo::tensor::from_floats({}, std::vector<float>{0.1f}));
  m.insert_node(1, {.name = "q",
                    .op_type = "QuantizeLinear",
                    .inputs = {"t", "s"},
                    .outputs = {"t_q"},
                    .attributes = {{"axis", std::int64_t{0}}}});
  m.insert_node(
      2,
      {.name = "dq", .op_type = "DequantizeLinear", .inputs = {"t_q", "s"}, .outputs = {"t_dq"}});
  CHECK(m.node_count() == 4);
  CHECK(m.node(1).name == "q");
  CHECK(m.node(3).name == "neg");
  m.set_node_input(0, 0, "t_dq");
  m.validate();
  const auto order = m.topological_order();
  CHECK(order == std::vector<std::size_t>{3, 1, 2, 0});

  CHECK(m.rename_edge("y", "out") == 2);  // Relu output + graph output
  CHECK(m.outputs()[0].name == "out");
  m.validate();
  m.remove_node(2);
  CHECK_THROWS_WITH_AS(m.validate(), doctest::Contains("input 't_dq' is not produced"),
                       qo::frontend_error);
  CHECK_THROWS_AS(m.node(10), qo::frontend_error);
  CHECK_THROWS_AS(m.set_node_input(0, 5, "z"), qo::frontend_error);

  // A tensor attribute survives insert and save.
  const auto back = qo::model::from_bytes(m.to_bytes(), {}, {.validate = false});
  CHECK(std::get<std::int64_t>(back.node(1).attributes[0].value) == 0);
}

TEST_CASE("constants_to_initializers converts every Constant form (PaddleOCR style)") {
  for (std::int64_t ir : {8, 3}) {
    CAPTURE(ir);
    graph g;
    g.add_input(value_info("x", 1, {2}));
    g.add_output(value_info("y", 1, {2}));
    g.add_node(
        node("Constant", {}, {"c0"}, "c0", {attr_tensor("value", float_tensor("", {2}, {1, 2}))}));
    g.add_node(node("Constant", {}, {"c1"}, "c1", {attr_float("value_float", 3.0f)}));
    g.add_node(node("Constant", {}, {"c2"}, "c2", {attr_floats("value_floats", {1.0f, 2.0f})}));
    g.add_node(node("Constant", {}, {"c3"}, "c3", {attr_int("value_int", 4)}));
    g.add_node(node("Constant", {}, {"c4"}, "c4", {attr_ints("value_ints", {5, 6, 7})}));
    g.add_node(node("Constant", {}, {"c5"}, "c5", {attr_string("value_string", "hi")}));
    g.add_node(node("Add", {"x", "c0"}, {"t0"}, "add0"));
    g.add_node(node("Mul", {"t0", "c2"}, {"y"}, "mul0"));
    // Opset 13 at IR 3 too: the value_float / value_int(s) / value_string forms are Constant-12's.
    auto m = qo::model::from_bytes(model(g, ir, {{"", 13}}));
    CHECK(m.constants_to_initializers() == 6);
    CHECK(m.node_count() == 2);
    CHECK(m.node(0).name == "add0");
    CHECK(m.node(1).name == "mul0");
    CHECK(m.initializer("c0").data<float>()[1] == 2.0f);
    CHECK(m.initializer("c1").shape().empty());
    CHECK(m.initializer("c1").data<float>()[0] == 3.0f);
    CHECK(m.initializer("c2").shape() == qo::shape_t{2});
    CHECK(m.initializer("c3").data<std::int64_t>()[0] == 4);
    CHECK(m.initializer("c4").data<std::int64_t>()[2] == 7);
    CHECK(m.has_initializer("c5"));
    // IR < 4 requires initializers to be graph inputs; inputs() still hides them.
    CHECK(m.inputs().size() == 1);
    m.validate();
    auto back = qo::model::from_bytes(m.to_bytes());
    CHECK(back.initializer_names().size() == 6);
    CHECK(back.constants_to_initializers() == 0);
  }
}

TEST_CASE("unsupported ops are listed and named by check_ops") {
  graph g = relu_graph();
  g.add_node(node("Gelu", {"x"}, {"g"}, "gelu0", {}, "com.microsoft"));
  g.add_node(node("Mystery", {"g"}, {"h"}, "m0"));
  const auto m = qo::model::from_bytes(model(g, 8, {{"", 13}, {"com.microsoft", 1}}));
  const std::set<std::string, std::less<>> supported{"Relu", "Add"};
  CHECK(m.unsupported_ops(supported) == std::vector<std::string>{"Mystery", "com.microsoft:Gelu"});
  CHECK_THROWS_WITH_AS(
      m.check_ops(supported),
      "quark.onnx.unsupported_op: unsupported operators: Mystery, com.microsoft:Gelu "
      "(first use: node 'm0' (Mystery), node 'gelu0' (Gelu))",
      qo::frontend_error);
  CHECK_NOTHROW(m.check_ops({"Relu", "Mystery", "com.microsoft:Gelu"}));
}

TEST_CASE("subgraphs may read outer-scope tensors and are ordered after their producers") {
  graph body;
  body.add_output(value_info("b_out", 1, {2}));
  body.add_node(node("Identity", {"t"}, {"b_out"}, "inner"));
  graph g;
  g.add_input(value_info("x", 1, {2}));
  g.add_input(value_info("cond", 9, {}));
  g.add_output(value_info("y", 1, {2}));
  g.add_node(node("If", {"cond"}, {"y"}, "if0",
                  {attr_graph("then_branch", body.m), attr_graph("else_branch", body.m)}));
  g.add_node(node("Neg", {"x"}, {"t"}, "neg"));
  auto m = qo::model::from_bytes(model(g));
  CHECK(m.topological_order() == std::vector<std::size_t>{1, 0});
  CHECK(m.unsupported_ops({"If", "Neg"}) == std::vector<std::string>{"Identity"});
  CHECK(m.consumers("t") == std::vector<std::size_t>{0});  // read inside the If bodies
  CHECK(m.rename_edge("t", "t2") == 3);                    // Neg output + one read per body
  m.validate();
  CHECK(m.consumers("t2") == std::vector<std::size_t>{0});
}

TEST_CASE("a model beyond protobuf's default 64 MB limit loads") {
  scratch_dir dir;
  qo::model m;
  qo::tensor big(quark::dtype_id::uint8, {66 * 1024 * 1024});
  big.data<std::uint8_t>()[12345] = 7;
  m.set_initializer("big", big);
  m.save(dir / "big.onnx");
  CHECK(std::filesystem::file_size(dir / "big.onnx") > 66u * 1024 * 1024);
  const auto back = qo::model::load(dir / "big.onnx");
  CHECK(back.initializer("big").data<std::uint8_t>()[12345] == 7);
}

TEST_CASE("the libonnx reference checker is available as an extra check") {
  const auto m = qo::model::from_bytes(model(relu_graph()));
  CHECK_NOTHROW(m.run_onnx_checker());
  // validate() accepts nodes out of topological order (the runtime and the quantizer sort
  // them); the checker, as ONNX Runtime, requires the file's order to be one.
  graph g;
  g.add_input(value_info("x", 1, {-1, 3}));
  g.add_output(value_info("y", 1, {-1, 3}));
  g.add_node(node("Relu", {"t"}, {"y"}, "second"));
  g.add_node(node("Neg", {"x"}, {"t"}, "first"));
  const auto bad = qo::model::from_bytes(model(g));
  CHECK_THROWS_WITH_AS(bad.run_onnx_checker(), doctest::Contains("quark.onnx.check: "),
                       qo::frontend_error);
}

TEST_CASE("validate refuses the attributes ONNX Runtime refuses, naming node and attribute") {
  auto load = [](const msg& n, std::int64_t opset = 13) {
    graph g;
    g.add_input(value_info("x", 1, {1, 2, 8, 8}));
    g.add_output(value_info("y", 1, {-1, -1, -1, -1}));
    g.add_initializer(float_tensor("w", {2, 2, 3, 3}, std::vector<float>(36, 0.5f)));
    g.add_node(n);
    return qo::model::from_bytes(model(g, 8, {{"", opset}}));
  };
  // An attribute the operator does not define (ORT: "Unrecognized attribute").
  CHECK_THROWS_WITH_AS(
      load(node("Relu", {"x"}, {"y"}, "r", {attr_int("bogus", 1)})),
      "quark.onnx.attribute: node 'r' (Relu) has attribute 'bogus', which Relu does not define "
      "at opset 13",
      qo::frontend_error);
  // Input and output counts outside the schema's, and a required input left empty: ORT refuses
  // them, and libonnx 1.12's shape inference (the quantizer's first pass) read past the inputs
  // ("CHECK failed: (index) < (current_size_)").
  CHECK_THROWS_WITH_AS(load(node("Relu", {"x", "x"}, {"y"}, "r")),
                       "quark.onnx.graph: node 'r' (Relu) has 2 inputs; Relu at opset 13 takes 1 "
                       "input",
                       qo::frontend_error);
  CHECK_THROWS_WITH_AS(load(node("Add", {"x"}, {"y"}, "a")),
                       "quark.onnx.graph: node 'a' (Add) has 1 input; Add at opset 13 takes 2 "
                       "inputs",
                       qo::frontend_error);
  CHECK_THROWS_WITH_AS(load(node("GlobalAveragePool", {}, {"y"}, "g")),
                       "quark.onnx.graph: node 'g' (GlobalAveragePool) has 0 inputs; "
                       "GlobalAveragePool at opset 13 takes 1 input",
                       qo::frontend_error);
  CHECK_THROWS_WITH_AS(load(node("Conv", {"x"}, {"y"}, "c")),
                       "quark.onnx.graph: node 'c' (Conv) has 1 input; Conv at opset 13 takes 2 "
                       "to 3 inputs",
                       qo::frontend_error);
  CHECK_THROWS_WITH_AS(load(node("Concat", {}, {"y"}, "cat", {attr_int("axis", 0)})),
                       "quark.onnx.graph: node 'cat' (Concat) has 0 inputs; Concat at opset 13 "
                       "takes at least 1 input",
                       qo::frontend_error);
  CHECK_THROWS_WITH_AS(load(node("Relu", {"x"}, {"y", "y2"}, "r")),
                       "quark.onnx.graph: node 'r' (Relu) has 2 outputs; Relu at opset 13 takes 1 "
                       "output",
                       qo::frontend_error);
  CHECK_THROWS_WITH_AS(load(node("Conv", {"", "w"}, {"y"}, "c")),
                       "quark.onnx.graph: node 'c' (Conv): input #0 ('X') is required by Conv but "
                       "left empty",
                       qo::frontend_error);
  // Past the opsets the linked libonnx knows (17): an operator that changed only its types since
  // (most of them; opset 22 added bfloat16) is checked against its opset-17 schema in full, as
  // ONNX Runtime checks it. A mutated PaddleOCR det at opset 26 with a Mul of three inputs, or a
  // Sigmoid carrying HardSigmoid's alpha, was quantized and ORT refused the result.
  CHECK_THROWS_WITH_AS(load(node("GlobalAveragePool", {}, {"y"}, "g"), 19),
                       "quark.onnx.graph: node 'g' (GlobalAveragePool) has 0 inputs; "
                       "GlobalAveragePool at opset 19 takes 1 input",
                       qo::frontend_error);
  CHECK_THROWS_WITH_AS(load(node("Conv", {"x"}, {"y"}, "c"), 21),
                       "quark.onnx.graph: node 'c' (Conv) has 1 input; Conv at opset 21 takes 2 "
                       "to 3 inputs",
                       qo::frontend_error);
  CHECK_THROWS_WITH_AS(load(node("Mul", {"x", "x", "x"}, {"y"}, "m"), 26),
                       "quark.onnx.graph: node 'm' (Mul) has 3 inputs; Mul at opset 26 takes 2 "
                       "inputs",
                       qo::frontend_error);
  CHECK_THROWS_WITH_AS(load(node("Sigmoid", {"x"}, {"y"}, "s", {attr_float("alpha", 0.2f)}), 26),
                       "quark.onnx.attribute: node 's' (Sigmoid) has attribute 'alpha', which "
                       "Sigmoid does not define at opset 26",
                       qo::frontend_error);
  // An operator whose later versions add attributes or inputs keeps the fewest-inputs check only
  // (its opset-17 schema no longer describes it): Resize-18's antialias, AveragePool-19's
  // dilations and Pad-18's axes input are accepted, too few inputs are not.
  CHECK_NOTHROW(load(node("Resize", {"x", "", "w"}, {"y"}, "r", {attr_int("antialias", 0)}), 19));
  CHECK_NOTHROW(load(node("AveragePool", {"x"}, {"y"}, "p",
                          {attr_ints("kernel_shape", {1}), attr_ints("dilations", {1})}),
                     19));
  CHECK_NOTHROW(load(node("Pad", {"x", "w", "", "w"}, {"y"}, "p"), 21));
  CHECK_THROWS_WITH_AS(load(node("Pad", {"x"}, {"y"}, "p"), 21),
                       "quark.onnx.graph: node 'p' (Pad) has 1 input; Pad (its opset-13 schema) "
                       "takes at least 2 inputs",
                       qo::frontend_error);
  // Omitted optional inputs, trailing or inside, and omitted optional outputs stay valid.
  CHECK_NOTHROW(load(node("Conv", {"x", "w", ""}, {"y"}, "c")));
  CHECK_NOTHROW(load(node("Clip", {"x", "", "w"}, {"y"}, "clip")));
  CHECK_NOTHROW(load(node("Dropout", {"x"}, {"y"}, "d")));
  CHECK_NOTHROW(load(node("Dropout", {"x"}, {"y", "mask"}, "d")));
  // Conv's output_padding is ConvTranspose's.
  CHECK_THROWS_WITH_AS(
      load(node("Conv", {"x", "w"}, {"y"}, "c", {attr_ints("output_padding", {1, 1})})),
      doctest::Contains("'output_padding', which Conv does not define"), qo::frontend_error);
  // Window values ONNX shape inference refuses; a stride of 0 made libonnx 1.12's shape
  // inference divide by zero (SIGFPE) before this check.
  CHECK_THROWS_WITH_AS(
      load(node("Conv", {"x", "w"}, {"y"}, "c", {attr_ints("strides", {0, 1})})),
      "quark.onnx.attribute: node 'c' (Conv) attribute 'strides' holds 0: its values must be "
      "positive",
      qo::frontend_error);
  CHECK_THROWS_WITH_AS(
      load(node("MaxPool", {"x"}, {"y"}, "p",
                {attr_ints("kernel_shape", {2, 2}), attr_ints("strides", {1, 0})})),
      doctest::Contains("(MaxPool) attribute 'strides' holds 0"), qo::frontend_error);
  CHECK_THROWS_WITH_AS(
      load(node("AveragePool", {"x"}, {"y"}, "p", {attr_ints("kernel_shape", {-2, 2})})),
      doctest::Contains("'kernel_shape' holds -2: its values must be positive"),
      qo::frontend_error);
  CHECK_THROWS_WITH_AS(load(node("Conv", {"x", "w"}, {"y"}, "c", {attr_ints("dilations", {1, 0})})),
                       doctest::Contains("'dilations' holds 0"), qo::frontend_error);
  CHECK_THROWS_WITH_AS(
      load(node("ConvTranspose", {"x", "w"}, {"y"}, "t", {attr_ints("pads", {0, 0, -1, 0})})),
      doctest::Contains("(ConvTranspose) attribute 'pads' holds -1: its values must be "
                        "non-negative"),
      qo::frontend_error);
  CHECK_THROWS_WITH_AS(
      load(node("ConvTranspose", {"x", "w"}, {"y"}, "t", {attr_ints("output_padding", {-1, 0})})),
      doctest::Contains("'output_padding' holds -1"), qo::frontend_error);
  // What stays accepted: valid windows, ONNX's internal "__" attributes, attributes a newer
  // opset defines (QuantizeLinear-19's saturate, beyond the linked libonnx's schemas), and the
  // schema's own version at an older opset.
  CHECK_NOTHROW(load(node("Conv", {"x", "w"}, {"y"}, "c",
                          {attr_ints("strides", {2, 1}), attr_ints("pads", {1, 1, 1, 1}),
                           attr_ints("dilations", {1, 2}), attr_ints("kernel_shape", {3, 3})})));
  CHECK_NOTHROW(load(node("Relu", {"x"}, {"y"}, "r", {attr_int("__internal", 1)})));
  graph q;
  q.add_input(value_info("x", 1, {4}));
  q.add_output(value_info("y", 3, {4}));
  q.add_initializer(float_tensor("s", {}, {0.5f}));
  q.add_node(node("QuantizeLinear", {"x", "s"}, {"y"}, "q", {attr_int("saturate", 1)}));
  CHECK_NOTHROW(qo::model::from_bytes(model(q, 10, {{"", 21}})));
  CHECK_NOTHROW(load(node("Softmax", {"x"}, {"y"}, "sm", {attr_int("axis", 1)}), 11));
}

TEST_CASE("validate refuses undefined declared types, as ONNX Runtime does") {
  auto load = [](const msg& in) {
    graph g;
    g.add_input(in);
    g.add_output(value_info("y", 1, {1, 4}));
    g.add_node(node("Relu", {"x"}, {"y"}, "r"));
    return qo::model::from_bytes(model(g, 8, {{"", 13}}));
  };
  // ORT: "Model input (x) does not have type information." / "Invalid tensor data type 0."
  // Before, the calibration data check reported "input 'x' is float32, the model expects
  // undefined".
  msg untyped;
  untyped.bytes(1, "x");
  CHECK_THROWS_WITH_AS(load(untyped), "quark.onnx.graph: graph input 'x' declares no type",
                       qo::frontend_error);
  CHECK_THROWS_WITH_AS(load(value_info("x", 0, {1, 4})),
                       "quark.onnx.graph: graph input 'x' declares element type 0 (UNDEFINED)",
                       qo::frontend_error);
  CHECK_THROWS_WITH_AS(load(value_info("x", 99, {1, 4})),
                       "quark.onnx.graph: graph input 'x' declares element type 99, which ONNX "
                       "does not define (its codes end at 26)",
                       qo::frontend_error);
  CHECK_NOTHROW(load(value_info("x", 1, {1, 4})));
  CHECK_NOTHROW(load(value_info("x", 1, {}, false)));  // a type without a shape is enough
  // Outputs and value_info entries too (ORT: "Invalid tensor data type 0.").
  auto with_output = [](const msg& out, const msg* vi = nullptr) {
    graph g;
    g.add_input(value_info("x", 1, {1, 4}));
    g.add_output(out);
    if (vi != nullptr)
      g.add_value_info(*vi);
    g.add_node(node("Relu", {"x"}, {"r"}, "r1"));
    g.add_node(node("Relu", {"r"}, {"y"}, "r2"));
    return qo::model::from_bytes(model(g, 8, {{"", 13}}));
  };
  CHECK_THROWS_WITH_AS(with_output(value_info("y", 0, {1, 4})),
                       "quark.onnx.graph: graph output 'y' declares element type 0 (UNDEFINED)",
                       qo::frontend_error);
  const msg vi_bad = value_info("r", 30, {1, 4});
  CHECK_THROWS_WITH_AS(with_output(value_info("y", 1, {1, 4}), &vi_bad),
                       "quark.onnx.graph: the value_info of 'r' declares element type 30, which "
                       "ONNX does not define (its codes end at 26)",
                       qo::frontend_error);
  // A declared type other than the one the node makes (ORT: "Type (tensor(int8)) of output arg
  // (y) of node (r2) does not match expected type (tensor(float))"): the quantized model kept
  // the declaration, for ORT to refuse.
  CHECK_THROWS_WITH_AS(with_output(value_info("y", 3, {1, 4})),
                       "quark.onnx.type: graph output 'y' declares int8, but node 'r2' (Relu) "
                       "makes float",
                       qo::frontend_error);
  const msg vi_int = value_info("r", 6, {1, 4});
  CHECK_THROWS_WITH_AS(with_output(value_info("y", 1, {1, 4}), &vi_int),
                       "quark.onnx.type: the value_info of 'r' declares int32, but node 'r1' "
                       "(Relu) makes float",
                       qo::frontend_error);
  const msg vi_ok = value_info("r", 1, {1, 4});
  CHECK_NOTHROW(with_output(value_info("y", 1, {1, 4}), &vi_ok));
  // An input an initializer backs (IR 3 style) takes the initializer's type.
  graph g;
  g.add_input(value_info("x", 1, {1, 4}));
  msg w;
  w.bytes(1, "w");
  g.add_input(w);
  g.add_initializer(float_tensor("w", {1, 4}, std::vector<float>(4, 1.0f)));
  g.add_output(value_info("y", 1, {1, 4}));
  g.add_node(node("Add", {"x", "w"}, {"y"}, "a"));
  CHECK_NOTHROW(qo::model::from_bytes(model(g, 3, {{"", 9}})));
}

TEST_CASE("validate refuses inputs whose types break the schema's type parameters, as ORT does") {
  // quark-cpp's runtime computes float16 values in float32, so a model that mixes them where
  // the schema binds one type (a mutated PaddleOCR cls with a float16 BatchNormalization mean)
  // was calibrated and written out; ONNX Runtime refuses it ("Type parameter (T) of Optype
  // (BatchNormalization) bound to different types").
  auto half = [](std::string_view name, std::initializer_list<std::int64_t> dims, std::size_t n) {
    msg t = tensor(name, 10, dims);
    std::string raw;
    for (std::size_t i = 0; i < n; ++i)
      raw += std::string("\x00\x3c", 2);  // 1.0
    t.bytes(tensor_f::raw_data, raw);
    return t;
  };
  auto load = [](graph g, std::int64_t opset = 13) {
    g.add_input(value_info("x", 1, {1, 2, 4, 4}));
    g.add_output(value_info("y", 1, {}, false));
    return qo::model::from_bytes(model(g, 8, {{"", opset}}));
  };
  {
    auto bn = [&](bool half_variance) {
      graph g;
      g.add_initializer(float_tensor("s", {2}, {1.0f, 1.0f}));
      g.add_initializer(float_tensor("b", {2}, {0.0f, 0.0f}));
      g.add_initializer(half("m", {2}, 2));
      g.add_initializer(half_variance ? half("v", {2}, 2) : float_tensor("v", {2}, {1.0f, 1.0f}));
      g.add_node(node("BatchNormalization", {"x", "s", "b", "m", "v"}, {"y"}, "bn"));
      return g;
    };
    CHECK_THROWS_WITH_AS(load(bn(false), 9),
                         "quark.onnx.type: node 'bn' (BatchNormalization): input #0 'x' (float) "
                         "and input #3 'm' (float16) differ in type; BatchNormalization at opset "
                         "9 binds both to its type parameter T",
                         qo::frontend_error);
    // BatchNormalization-15 gives the mean and variance a type parameter of their own (T2),
    // which binds them to each other.
    CHECK_THROWS_WITH_AS(load(bn(false), 15),
                         doctest::Contains("binds both to its type parameter T2"),
                         qo::frontend_error);
    CHECK_NOTHROW(load(bn(true), 15));
  }
  {
    // A type the schema does not allow: Conv on int64.
    graph g;
    g.add_node(node("Cast", {"x"}, {"i"}, "c", {attr_int("to", 7)}));
    msg wi = tensor("wi", 7, {1, 2, 1, 1});
    wi.bytes(tensor_f::raw_data, std::string(16, '\0'));
    g.add_initializer(wi);
    g.add_node(node("Conv", {"i", "wi"}, {"y"}, "conv"));
    CHECK_THROWS_WITH_AS(load(g),
                         "quark.onnx.type: node 'conv' (Conv): input #0 'i' (int64): Conv at "
                         "opset 13 takes tensor(float16), tensor(float), tensor(double) there "
                         "(type parameter T)",
                         qo::frontend_error);
  }
  {
    // Types propagate: Cast's `to`, a type parameter's binding (Relu's output is x's type),
    // and an output of a fixed type (Shape's int64).
    graph g;
    g.add_node(node("Cast", {"x"}, {"h"}, "c", {attr_int("to", 10)}));
    g.add_node(node("Relu", {"x"}, {"r"}, "relu"));
    g.add_node(node("Add", {"r", "h"}, {"y"}, "add"));
    CHECK_THROWS_WITH_AS(load(g),
                         "quark.onnx.type: node 'add' (Add): input #0 'r' (float) and input #1 "
                         "'h' (float16) differ in type; Add at opset 13 binds both to its type "
                         "parameter T",
                         qo::frontend_error);
    graph k;
    k.add_node(node("Shape", {"x"}, {"s"}, "shape"));
    k.add_node(node("Mul", {"x", "s"}, {"y"}, "mul"));
    CHECK_THROWS_WITH_AS(load(k), doctest::Contains("input #1 's' (int64) differ in type"),
                         qo::frontend_error);
  }
  {
    // A fixed input type: DequantizeLinear-13's scale is float32 (19 allows float16).
    graph g;
    g.add_initializer(half("sc", {}, 1));
    g.add_node(node("QuantizeLinear", {"x", "zp_scale"}, {"q"}, "ql"));
    g.add_initializer(float_tensor("zp_scale", {}, {0.5f}));
    g.add_node(node("DequantizeLinear", {"q", "sc"}, {"y"}, "dq"));
    CHECK_THROWS_WITH_AS(load(g),
                         "quark.onnx.type: node 'dq' (DequantizeLinear): input #1 'sc' (float16): "
                         "DequantizeLinear at opset 13 takes tensor(float) there",
                         qo::frontend_error);
    // Past opset 17 (the linked libonnx's newest) the older schema's fixed types are not
    // imposed, nor is the float output it gives DequantizeLinear: at 19 the float16 scale is
    // right, and the float16 value it makes may meet another float16.
    g.add_initializer(half("h", {}, 1));
    g.add_node(node("Add", {"y", "h"}, {"z"}, "add"));
    CHECK_NOTHROW(load(g, 19));
  }
  {
    // What is not refused: types of matching inputs, values of unknown type (another domain's
    // outputs).
    graph g;
    g.add_initializer(float_tensor("w", {1}, {2.0f}));
    g.add_node(node("Mul", {"x", "w"}, {"y"}, "mul"));
    CHECK_NOTHROW(load(g));
    // Past opset 17 the bindings are still checked, against the newest schema libonnx has.
    graph k;
    k.add_node(node("Cast", {"x"}, {"h"}, "c", {attr_int("to", 10)}));
    k.add_node(node("Add", {"x", "h"}, {"y"}, "add"));
    CHECK_THROWS_WITH_AS(load(k, 19),
                         "quark.onnx.type: node 'add' (Add): input #0 'x' (float) and input #1 "
                         "'h' (float16) differ in type; Add at opset 19 binds both to its type "
                         "parameter T",
                         qo::frontend_error);
  }
}

TEST_CASE("initializer lookups by name stay right through every kind of edit (random sequences)") {
  // The model indexes its initializers by name (a scan per lookup made quantizing N nodes take
  // O(N^2)). Oracles: initializer_names(), which lists the protobuf in order without the index,
  // and the values the test itself last stored under each name. Edits: set (new and existing
  // names), remove, rename_edge, Constant nodes converted, copies and assignments of the model.
  for (const std::int64_t ir : {8, 3}) {
    CAPTURE(ir);
    std::mt19937 rng(static_cast<std::uint32_t>(ir));
    graph g;
    g.add_input(value_info("x", 1, {2}));
    g.add_output(value_info("y", 1, {2}));
    g.add_node(node("Relu", {"x"}, {"y"}, "relu"));
    auto m = qo::model::from_bytes(model(g, ir));
    std::map<std::string, float> want;  // name -> first element of its value
    auto pick = [&](int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng); };
    auto name = [&] { return "w" + std::to_string(pick(40)); };
    auto check_all = [&](const qo::model& x, const std::map<std::string, float>& w, int step) {
      CAPTURE(step);
      const auto names = x.initializer_names();
      REQUIRE(names.size() == w.size());
      for (int k = 0; k < 40; ++k) {
        for (const std::string& n : {"w" + std::to_string(k), "v" + std::to_string(k)}) {
          const bool listed = std::find(names.begin(), names.end(), n) != names.end();
          REQUIRE(listed == w.contains(n));
          REQUIRE(x.has_initializer(n) == listed);
          if (listed)
            REQUIRE(x.initializer(n).data<float>()[0] == w.at(n));
        }
      }
      CHECK(x.inputs().size() == 1);  // initializers listed as inputs at IR 3 stay hidden
    };
    for (int step = 0; step < 400; ++step) {
      const auto v = static_cast<float>(step);
      switch (pick(6)) {
        case 0:
        case 1: {
          const std::string n = name();
          m.set_initializer(n, qo::tensor::from_floats({2}, std::vector<float>{v, -v}));
          want[n] = v;
          break;
        }
        case 2: {
          const std::string n = name();
          CHECK(m.remove_initializer(n) == (want.erase(n) == 1));
          break;
        }
        case 3: {  // rename in place: "wK" -> "vK" when "vK" is free
          const std::string from = name();
          const std::string to = "v" + from.substr(1);
          if (want.contains(from) && !want.contains(to)) {
            CHECK(m.rename_edge(from, to) >= 1);
            CHECK(m.has_initializer(to));  // asked first: no lookup of `from` re-indexes before
            want[to] = want[from];
            want.erase(from);
          }
          break;
        }
        case 4: {  // a copy, edited, must not disturb the original (nor the original the copy)
          qo::model c = m;
          auto cw = want;
          const std::string n = name();
          c.remove_initializer(n);
          cw.erase(n);
          m.set_initializer("v39", qo::tensor::from_floats({2}, std::vector<float>{v, -v}));
          want["v39"] = v;
          check_all(c, cw, step);
          if (pick(2) == 0) {
            m = c;
            want = cw;
          }
          break;
        }
        case 5: {  // a Constant node becomes an initializer
          const std::string n = name();
          if (!want.contains(n)) {
            m.insert_node(0, {.name = "const_" + n,
                              .op_type = "Constant",
                              .outputs = {n},
                              .attributes = {{"value_floats", std::vector<float>{v, -v}}}});
            CHECK(m.constants_to_initializers() == 1);
            want[n] = v;
          }
          break;
        }
      }
      check_all(m, want, step);
    }
  }
}
