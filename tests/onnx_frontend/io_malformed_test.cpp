// SPDX-License-Identifier: MIT
// Malformed models: every case fails at load with a frontend_error whose stable id and message
// name the file, node or tensor at fault; none may crash.
#include <doctest/doctest.h>

#include <quark/onnx/model.hpp>

#include "onnx_frontend/io_wire.hpp"

namespace qo = quark::onnx;
using namespace io_wire;

namespace {

/// "id: message" of the error from_bytes raises, or "no error".
std::string error_of(const std::string& bytes) {
  try {
    qo::model::from_bytes(bytes);
  } catch (const qo::frontend_error& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST_CASE("files that are not ONNX models") {
  scratch_dir dir;
  const auto good = model(relu_graph());
  write_file(dir / "trunc.onnx", good.substr(0, good.size() - 7));
  CHECK_THROWS_WITH_AS(
      qo::model::load(dir / "trunc.onnx"),
      doctest::Contains("trunc.onnx': not a valid ONNX protobuf (truncated or corrupt)"),
      qo::frontend_error);
  write_file(dir / "text.onnx", "hello, this is not protobuf\n");
  CHECK_THROWS_WITH_AS(qo::model::load(dir / "text.onnx"), doctest::Contains("quark.onnx.load: '"),
                       qo::frontend_error);
  write_file(dir / "empty.onnx", "");
  CHECK_THROWS_WITH_AS(qo::model::load(dir / "empty.onnx"), doctest::Contains("empty input"),
                       qo::frontend_error);
  CHECK_THROWS_WITH_AS(qo::model::load(dir / "missing.onnx"),
                       doctest::Contains("missing.onnx': cannot open file"), qo::frontend_error);
  CHECK_THROWS_WITH_AS(qo::model::load(dir.path), doctest::Contains("is a directory"),
                       qo::frontend_error);
  // Valid protobuf messages that are not models.
  msg producer_only;
  producer_only.bytes(2, "someone");
  CHECK(error_of(producer_only.buf).find("not an ONNX model (no ir_version)") != std::string::npos);
  CHECK(error_of(float_tensor("w", {1}, {1}).buf).find("quark.onnx.load: <bytes>: ") == 0);
  msg only_ir;
  only_ir.i64(1, 8);
  CHECK(error_of(only_ir.buf).find("not an ONNX model (no graph)") != std::string::npos);
}

TEST_CASE("missing tensors are named with the node that reads them") {
  graph g = relu_graph();
  g.add_node(node("Add", {"y", "bias"}, {"z"}, "add1"));
  CHECK(error_of(model(g)) ==
        "quark.onnx.graph: node 'add1' (Add) input 'bias' is not produced by any node, graph input "
        "or initializer");
  graph h;
  h.add_input(value_info("x", 1, {1}));
  h.add_output(value_info("nothing", 1, {1}));
  h.add_node(node("Relu", {"x"}, {"y"}));
  CHECK(error_of(model(h)) ==
        "quark.onnx.graph: graph output 'nothing' is not produced by any node, graph input or "
        "initializer");
  // Unnamed nodes are identified by index.
  graph k;
  k.add_input(value_info("x", 1, {1}));
  k.add_node(node("Relu", {"x"}, {"y"}));
  k.add_node(node("Neg", {"q"}, {"z"}));
  CHECK(error_of(model(k)).find("node #1 (Neg) input 'q'") != std::string::npos);
  // Inside a subgraph.
  graph body;
  body.add_output(value_info("o", 1, {1}));
  body.add_node(node("Identity", {"ghost"}, {"o"}, "inner"));
  graph s;
  s.add_input(value_info("c", 9, {}));
  s.add_output(value_info("y", 1, {1}));
  s.add_node(node("If", {"c"}, {"y"}, "if0", {attr_graph("then_branch", body.m)}));
  CHECK(error_of(model(s)).find("node 'if0' (If) input 'ghost'") != std::string::npos);
}

TEST_CASE("wrong data sizes name the tensor and its data_type") {
  graph g = relu_graph();
  msg w = tensor("w", 1, {2, 3});
  w.bytes(tensor_f::raw_data, std::string(20, '\0'));
  g.add_initializer(w);
  CHECK(error_of(model(g)) ==
        "quark.onnx.tensor: tensor 'w' (data_type 1): raw_data holds 20 bytes, shape needs 24");
  graph h = relu_graph();
  msg q = tensor("q4", 22, {5});  // 5 int4 need 3 packed bytes
  q.bytes(tensor_f::raw_data, std::string(2, '\0'));
  h.add_initializer(q);
  CHECK(error_of(model(h)).find(
            "tensor 'q4' (data_type 22): raw_data holds 2 bytes, shape needs 3") !=
        std::string::npos);
  graph k = relu_graph();
  msg t = tensor("t", 7, {3});
  t.i64(tensor_f::int64_data, 1);
  k.add_initializer(t);
  CHECK(error_of(model(k)).find(
            "tensor 't' (data_type 7): int64_data holds 1 entries, shape needs 3") !=
        std::string::npos);
  // A Constant node's tensor is checked too and names the node.
  graph c = relu_graph();
  msg bad = tensor("", 1, {4});
  bad.bytes(tensor_f::raw_data, "abc");
  c.add_node(node("Constant", {}, {"k"}, "const0", {attr_tensor("value", bad)}));
  CHECK(error_of(model(c)).find(
            "node 'const0' (Constant) attribute 'value': tensor '' (data_type 1): "
            "raw_data holds 3 bytes") != std::string::npos);
}

TEST_CASE("cycles are reported with a node on the cycle") {
  graph g;
  g.add_input(value_info("x", 1, {1}));
  g.add_output(value_info("y", 1, {1}));
  g.add_node(node("Add", {"x", "b"}, {"a"}, "n1"));
  g.add_node(node("Relu", {"a"}, {"b"}, "n2"));
  g.add_node(node("Neg", {"a"}, {"y"}, "n3"));
  CHECK(error_of(model(g)) == "quark.onnx.graph: the graph has a cycle through node 'n1' (Add)");
  graph self;
  self.add_input(value_info("x", 1, {1}));
  self.add_node(node("Add", {"x", "s"}, {"s"}, "loop"));
  CHECK(error_of(model(self)).find("cycle through node 'loop'") != std::string::npos);
}

TEST_CASE("duplicate names") {
  graph a = relu_graph();
  a.add_initializer(float_tensor("w", {1}, {1}));
  a.add_initializer(float_tensor("w", {1}, {2}));
  CHECK(error_of(model(a)) == "quark.onnx.graph: duplicate initializer 'w'");
  graph b = relu_graph();
  b.add_node(node("Neg", {"x"}, {"y"}, "neg"));
  CHECK(error_of(model(b)) ==
        "quark.onnx.graph: tensor 'y' is produced by both node 'relu' (Relu) and node 'neg' (Neg)");
  graph c = relu_graph();
  c.add_input(value_info("x", 1, {1}));
  CHECK(error_of(model(c)) == "quark.onnx.graph: duplicate graph input 'x'");
  graph d = relu_graph();
  d.add_node(node("Neg", {"y"}, {"x"}, "neg"));
  CHECK(error_of(model(d)).find("node 'neg' (Neg) output 'x' has the name of a graph input") !=
        std::string::npos);
  // A value listed twice as a graph output is two outputs (ONNX's checker and ONNX Runtime
  // accept it; io_validate_ort_test runs one in ORT).
  graph e = relu_graph();
  e.add_output(value_info("y", 1, {1}));
  CHECK(error_of(model(e)) == "no error");
  CHECK(error_of(model(relu_graph(), 8, {{"", 13}, {"ai.onnx", 12}})) ==
        "quark.onnx.graph: opset_import lists domain 'ai.onnx' twice");
}

TEST_CASE("negative dims and bad data_type codes") {
  graph g = relu_graph();
  msg w = tensor("w", 1, {-2});
  g.add_initializer(w);
  CHECK(error_of(model(g)) ==
        "quark.onnx.tensor: tensor 'w' (data_type 1): negative dim -2 at axis 0");
  graph h = relu_graph();
  msg u = tensor("u", 0, {1});
  h.add_initializer(u);
  CHECK(error_of(model(h)).find("tensor 'u' (data_type 0): data_type 0 is not an ONNX type") !=
        std::string::npos);
  graph k = relu_graph();
  msg v = tensor("v", 40, {1});
  k.add_initializer(v);
  CHECK(error_of(model(k)).find("data_type 40") != std::string::npos);
}

TEST_CASE("opset and domain problems") {
  CHECK(error_of(model(relu_graph(), 8, {})) == "quark.onnx.graph: the model imports no opset");
  CHECK(error_of(model(relu_graph(), 8, {{"", 0}})).find("opset_import version 0") !=
        std::string::npos);
  CHECK(error_of(model(relu_graph(), -3)).find("ir_version is missing or invalid (-3)") !=
        std::string::npos);
  graph g = relu_graph();
  g.add_node(node("Gelu", {"x"}, {"g"}, "gelu", {}, "com.microsoft"));
  CHECK(
      error_of(model(g)) ==
      "quark.onnx.graph: node 'gelu' (Gelu) uses domain 'com.microsoft', which the model does not "
      "import");
  graph h;
  h.add_input(value_info("x", 1, {1}));
  h.add_node(node("", {"x"}, {"y"}, "noop"));
  CHECK(error_of(model(h)).find("node 'noop' () has no op_type") != std::string::npos);
}

TEST_CASE("validation can be deferred, and validate() then reports the same error") {
  graph g = relu_graph();
  g.add_node(node("Add", {"y", "bias"}, {"z"}, "add1"));
  const auto m = qo::model::from_bytes(model(g), {}, {.validate = false});
  CHECK_THROWS_WITH_AS(m.validate(), doctest::Contains("input 'bias'"), qo::frontend_error);
  CHECK_THROWS_AS(m.topological_order(), qo::frontend_error);
}
