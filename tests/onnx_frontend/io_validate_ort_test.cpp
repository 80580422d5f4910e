// SPDX-License-Identifier: MIT
// Load-time validation against its oracle: every malformed model quark-cpp refuses (when it
// loads the model or when its runtime prepares it), ONNX Runtime 1.30 refuses too; the borderline
// models it accepts (omitted optional inputs and outputs, a type without a shape, opsets past
// the linked libonnx's 17), ORT and our runtime both run.
#include <cstdint>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include <quark/onnx/model.hpp>
#include <quark/onnx/runtime.hpp>

#include "onnx_frontend/io_wire.hpp"
#include "support/ort.hpp"

namespace qo = quark::onnx;
namespace w = io_wire;
using namespace quark::test;

namespace {

struct graph_case {
  const char* what;
  w::msg node;
  std::int64_t opset = 13;
  w::msg input = w::value_info("x", 1, {1, 2, 8, 8});
  std::vector<w::msg> initializers = {};
  bool output = true;
  bool output_twice = false;
  int output_type = 1;
  std::vector<w::msg> before = {};  // nodes ahead of `node`
};

/// A float16 scalar 1.
w::msg half_scalar(std::string_view name) {
  w::msg t = w::tensor(name, 10, {});
  t.bytes(w::tensor_f::raw_data, std::string("\x00\x3c", 2));
  return t;
}

/// An int8 scalar 0.
w::msg int8_zero(std::string_view name) {
  w::msg t = w::tensor(name, 3, {});
  t.bytes(w::tensor_f::raw_data, std::string(1, '\0'));
  return t;
}

/// A float16 tensor of ones.
w::msg half_ones(std::string_view name, std::int64_t n) {
  w::msg t = w::tensor(name, 10, {n});
  std::string raw;
  for (std::int64_t i = 0; i < n; ++i)
    raw += std::string("\x00\x3c", 2);
  t.bytes(w::tensor_f::raw_data, raw);
  return t;
}

std::string bytes_of(const graph_case& c) {
  w::graph g;
  g.add_input(c.input);
  if (c.output)
    g.add_output(w::value_info("y", c.output_type, {-1, -1, -1, -1}));
  if (c.output_twice)
    g.add_output(w::value_info("y", 1, {-1, -1, -1, -1}));
  g.add_initializer(w::float_tensor("w", {2, 2, 3, 3}, std::vector<float>(36, 0.5f)));
  for (const auto& t : c.initializers)
    g.add_initializer(t);
  for (const auto& n : c.before)
    g.add_node(n);
  g.add_node(c.node);
  return w::model(g, 8, {{"", c.opset}});
}

/// Our error loading `bytes` and running it on x, or "" when it runs.
std::string our_error(const std::string& bytes) {
  try {
    qo::runtime rt(qo::model::from_bytes(bytes));
    rt.run({{"x", qo::tensor::from_floats({1, 2, 8, 8}, std::vector<float>(128, 0.25f))}});
  } catch (const qo::frontend_error& e) {
    return e.what();
  }
  return {};
}

/// ORT's error creating a session for `bytes` and running it on x, or "" when it runs.
std::string ort_error(const std::string& bytes) {
  ::onnx::ModelProto p;
  REQUIRE(p.ParseFromString(bytes));
  try {
    run_ort(p, {npy_array::from(std::vector<float>(128, 0.25f), {1, 2, 8, 8})});
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return {};
}

}  // namespace

TEST_CASE("models that validation refuses ONNX Runtime refuses, and those it accepts ORT runs") {
  if (!ort_available()) {
    MESSAGE("skipped: " << ort_unavailable_reason());
    return;
  }
  w::msg untyped;
  untyped.bytes(1, "x");
  const std::vector<graph_case> refused = {
      {"an attribute Relu does not define",
       w::node("Relu", {"x"}, {"y"}, "r", {w::attr_int("bogus", 1)})},
      {"Relu with 2 inputs", w::node("Relu", {"x", "x"}, {"y"}, "r")},
      {"Add with 1 input", w::node("Add", {"x"}, {"y"}, "a")},
      {"GlobalAveragePool without input", w::node("GlobalAveragePool", {}, {"y"}, "g")},
      {"Conv with 1 input", w::node("Conv", {"x"}, {"y"}, "c")},
      {"Concat without input", w::node("Concat", {}, {"y"}, "cat", {w::attr_int("axis", 0)})},
      {"Relu with 2 outputs", w::node("Relu", {"x"}, {"y", "y2"}, "r")},
      {"Conv with its X left empty", w::node("Conv", {"", "w"}, {"y"}, "c")},
      {"GlobalAveragePool without input, opset 19", w::node("GlobalAveragePool", {}, {"y"}, "g"),
       19},
      {"Conv with 1 input, opset 21", w::node("Conv", {"x"}, {"y"}, "c"), 21},
      {"Conv strides 0",
       w::node("Conv", {"x", "w"}, {"y"}, "c", {w::attr_ints("strides", {0, 1})})},
      {"MaxPool strides 0",
       w::node("MaxPool", {"x"}, {"y"}, "p",
               {w::attr_ints("kernel_shape", {2, 2}), w::attr_ints("strides", {1, 0})})},
      {"AveragePool kernel_shape -2",
       w::node("AveragePool", {"x"}, {"y"}, "p", {w::attr_ints("kernel_shape", {-2, 2})})},
      {"ConvTranspose pads -1",
       w::node("ConvTranspose", {"x", "w"}, {"y"}, "t", {w::attr_ints("pads", {0, 0, -1, 0})})},
      {"operator set 1000", w::node("Relu", {"x"}, {"y"}, "r"), 1000},
      {"a graph input without type", w::node("Relu", {"x"}, {"y"}, "r"), 13, untyped},
      {"a graph input of element type 0", w::node("Relu", {"x"}, {"y"}, "r"), 13,
       w::value_info("x", 0, {1, 2, 8, 8})},
      {"BatchNormalization-9 with a float16 mean",
       w::node("BatchNormalization", {"x", "s", "b", "m", "v"}, {"y"}, "bn"),
       9,
       w::value_info("x", 1, {1, 2, 8, 8}),
       {w::float_tensor("s", {2}, {1.0f, 1.0f}), w::float_tensor("b", {2}, {0.0f, 0.0f}),
        half_ones("m", 2), w::float_tensor("v", {2}, {1.0f, 1.0f})}},
      {"Add of float and float16",
       w::node("Add", {"x", "h"}, {"y"}, "a"),
       13,
       w::value_info("x", 1, {1, 2, 8, 8}),
       {half_ones("h", 1)}},
      {"no graph output",
       w::node("Relu", {"x"}, {"y"}, "r"),
       13,
       w::value_info("x", 1, {1, 2, 8, 8}),
       {},
       false},
      {"a graph output declared int8 for Relu's float",
       w::node("Relu", {"x"}, {"y"}, "r"),
       13,
       w::value_info("x", 1, {1, 2, 8, 8}),
       {},
       true,
       false,
       3},
      // Found by bench/onnx/ort_differential_sweep.py --node-edits (session 53): our runtime
      // read the first value of a non-scalar Clip bound, and took the kernel off W whatever
      // kernel_shape said; ORT refuses both when it runs the model.
      {"Conv kernel_shape 2x2 for a 3x3 weight",
       w::node("Conv", {"x", "w"}, {"y"}, "c", {w::attr_ints("kernel_shape", {2, 2})})},
      {"ConvTranspose kernel_shape 1x1 for a 3x3 weight",
       w::node("ConvTranspose", {"x", "w"}, {"y"}, "t", {w::attr_ints("kernel_shape", {1, 1})})},
      {"Clip with a min of 2 values",
       w::node("Clip", {"x", "lo", ""}, {"y"}, "clip"),
       13,
       w::value_info("x", 1, {1, 2, 8, 8}),
       {w::float_tensor("lo", {2}, {0.0f, 0.0f})}},
      {"Clip with a max of shape [1, 1]",
       w::node("Clip", {"x", "", "hi"}, {"y"}, "clip"),
       13,
       w::value_info("x", 1, {1, 2, 8, 8}),
       {w::float_tensor("hi", {1, 1}, {1.0f})}},
      // Past opset 17 (the newest the linked libonnx knows) the bindings are still checked.
      {"Add of float and float16 at opset 21",
       w::node("Add", {"x", "h"}, {"y"}, "a"),
       21,
       w::value_info("x", 1, {1, 2, 8, 8}),
       {half_ones("h", 1)}},
      {"Add of float and a Cast to float16 at opset 21",
       w::node("Add", {"x", "c"}, {"y"}, "a"),
       21,
       w::value_info("x", 1, {1, 2, 8, 8}),
       {},
       true,
       false,
       1,
       {w::node("Cast", {"x"}, {"c"}, "cast", {w::attr_int("to", 10)})}},
      // Found by the --opset 26 node-edit sweep (session 54): past opset 17 the opset-17 schema
      // of an operator that changed only its types since is checked in full.
      {"Mul with 3 inputs at opset 26", w::node("Mul", {"x", "x", "x"}, {"y"}, "m"), 26},
      {"Sigmoid with HardSigmoid's alpha at opset 26",
       w::node("Sigmoid", {"x"}, {"y"}, "s", {w::attr_float("alpha", 0.2f)}), 26},
      {"an attribute Relu does not define, opset 21",
       w::node("Relu", {"x"}, {"y"}, "r", {w::attr_int("bogus", 1)}), 21},
      {"Conv with 4 inputs at opset 25", w::node("Conv", {"x", "w", "", "x"}, {"y"}, "c"), 25},
      {"a graph output of element type 99",
       w::node("Relu", {"x"}, {"y"}, "r"),
       13,
       w::value_info("x", 1, {1, 2, 8, 8}),
       {},
       true,
       false,
       99},
  };
  for (const auto& c : refused) {
    CAPTURE(c.what);
    const std::string bytes = bytes_of(c);
    CHECK(our_error(bytes).rfind("quark.onnx.", 0) == 0);
    CHECK_FALSE(ort_error(bytes).empty());
  }
  const std::vector<graph_case> accepted = {
      {"Conv with its bias left empty", w::node("Conv", {"x", "w", ""}, {"y"}, "c")},
      {"Clip with its min left empty", w::node("Clip", {"x", "", ""}, {"y"}, "clip")},
      {"Clip with a max of shape [1]",
       w::node("Clip", {"x", "", "hi"}, {"y"}, "clip"),
       13,
       w::value_info("x", 1, {1, 2, 8, 8}),
       {w::float_tensor("hi", {1}, {1.0f})}},
      {"Conv with a kernel_shape that matches the weight",
       w::node("Conv", {"x", "w"}, {"y"}, "c", {w::attr_ints("kernel_shape", {3, 3})})},
      // Operators whose later versions add attributes keep them past 17: Resize-18's antialias,
      // AveragePool-19's dilations (libonnx 1.12 knows neither).
      {"Resize with antialias at opset 19",
       w::node("Resize", {"x", "", "sc"}, {"y"}, "r", {w::attr_int("antialias", 0)}),
       19,
       w::value_info("x", 1, {1, 2, 8, 8}),
       {w::float_tensor("sc", {4}, {1.0f, 1.0f, 2.0f, 2.0f})}},
      {"AveragePool with dilations at opset 19",
       w::node("AveragePool", {"x"}, {"y"}, "p",
               {w::attr_ints("kernel_shape", {2, 2}), w::attr_ints("dilations", {1, 1})}),
       19},
      {"Relu at opset 26", w::node("Relu", {"x"}, {"y"}, "r"), 26},
      // Past opset 17 the older schema's fixed float types are not imposed: DequantizeLinear-21
      // takes a float16 scale and makes float16.
      {"a DequantizeLinear with a float16 scale into a float16 Add at opset 21",
       w::node("Cast", {"a"}, {"y"}, "cast", {w::attr_int("to", 1)}),
       21,
       w::value_info("x", 1, {1, 2, 8, 8}),
       {w::float_tensor("s", {}, {1.0f}), half_scalar("s16"), int8_zero("zp"), half_ones("h", 1)},
       true,
       false,
       1,
       {w::node("QuantizeLinear", {"x", "s", "zp"}, {"q"}, "ql"),
        w::node("DequantizeLinear", {"q", "s16", "zp"}, {"d"}, "dql"),
        w::node("Add", {"d", "h"}, {"a"}, "add")}},
      {"Dropout without its mask", w::node("Dropout", {"x"}, {"y"}, "d")},
      {"Dropout with its mask", w::node("Dropout", {"x"}, {"y", "mask"}, "d")},
      {"a graph input with a type but no shape", w::node("Relu", {"x"}, {"y"}, "r"), 13,
       w::value_info("x", 1, {}, false)},
      {"Relu at opset 19", w::node("Relu", {"x"}, {"y"}, "r"), 19},
      {"Conv at opset 21", w::node("Conv", {"x", "w"}, {"y"}, "c"), 21},
      {"BatchNormalization-15 with a float16 mean and variance",
       w::node("BatchNormalization", {"x", "s", "b", "m", "v"}, {"y"}, "bn"),
       15,
       w::value_info("x", 1, {1, 2, 8, 8}),
       {w::float_tensor("s", {2}, {1.0f, 1.0f}), w::float_tensor("b", {2}, {0.0f, 0.0f}),
        half_ones("m", 2), half_ones("v", 2)}},
      {"a value listed twice as a graph output",
       w::node("Relu", {"x"}, {"y"}, "r"),
       13,
       w::value_info("x", 1, {1, 2, 8, 8}),
       {},
       true,
       true},
  };
  for (const auto& c : accepted) {
    CAPTURE(c.what);
    const std::string bytes = bytes_of(c);
    CHECK(our_error(bytes) == "");
    CHECK(ort_error(bytes) == "");
  }
}

TEST_CASE("the runtime's kernel_shape and Clip refusals name the node and what disagrees") {
  auto check_error = [](w::msg node, std::vector<w::msg> inits, const std::string& want) {
    graph_case c{"", std::move(node)};
    c.initializers = std::move(inits);
    const std::string e = our_error(bytes_of(c));
    CAPTURE(e);
    CHECK(e.starts_with(want));
  };
  check_error(w::node("Conv", {"x", "w"}, {"y"}, "c", {w::attr_ints("kernel_shape", {2, 2})}), {},
              "quark.onnx.shape: node 'c' (Conv): kernel_shape [2,2] disagrees with the weight "
              "[2,2,3,3]");
  check_error(
      w::node("ConvTranspose", {"x", "w"}, {"y"}, "t", {w::attr_ints("kernel_shape", {3, 1})}), {},
      "quark.onnx.shape: node 't' (ConvTranspose): kernel_shape [3,1] disagrees with the weight "
      "[2,2,3,3]");
  check_error(w::node("Clip", {"x", "lo", ""}, {"y"}, "clip"),
              {w::float_tensor("lo", {2}, {0.0f, 0.0f})},
              "quark.onnx.shape: node 'clip' (Clip): min must be a scalar, got [2]");
  check_error(w::node("Clip", {"x", "", "hi"}, {"y"}, "clip"),
              {w::float_tensor("hi", {1, 1}, {1.0f})},
              "quark.onnx.shape: node 'clip' (Clip): max must be a scalar, got [1,1]");
}
