// SPDX-License-Identifier: MIT
// The executor itself: observation hooks (each value once, as soon as it exists), dynamic shapes,
// int64 shape arithmetic, If branches reading the enclosing scope, and load-time errors (every
// unsupported op listed, cycles, dangling inputs). Models are written with the wire helper.
#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <doctest/doctest.h>

#include <quark/onnx/runtime.hpp>

#include "io_wire.hpp"

using quark::onnx::runtime;
using quark::onnx::tensor;
namespace w = io_wire;

namespace {

runtime load(const std::string& bytes) {
  return runtime::from_bytes(
      std::span<const std::byte>(reinterpret_cast<const std::byte*>(bytes.data()), bytes.size()));
}

std::string error_of(const std::string& bytes) {
  try {
    load(bytes);
  } catch (const quark::onnx::frontend_error& e) {
    return e.what();
  }
  return {};
}

}  // namespace

TEST_CASE("observer sees every value once, in order, and outputs are right") {
  // y = Relu(x) + Neg(Relu(x)) * 2 ; shape of y computed through Shape/Reshape
  w::graph g;
  g.add_input(w::value_info("x", 1, {-1, 3}));
  g.add_output(w::value_info("y", 1, {-1}));
  g.add_initializer(w::float_tensor("two", {}, {2.0f}));
  g.add_node(w::node("Relu", {"x"}, {"a"}, "relu"));
  g.add_node(w::node("Neg", {"a"}, {"b"}, "neg"));
  g.add_node(w::node("Mul", {"b", "two"}, {"c"}, "mul"));
  g.add_node(w::node("Add", {"a", "c"}, {"d"}, "add"));
  g.add_node(w::node("Constant", {}, {"flat"}, "flat_shape", {w::attr_tensor("value", [] {
                       w::msg t = w::tensor("", 7, {1});
                       t.i64(7, -1);  // int64_data
                       return t;
                     }())}));
  g.add_node(w::node("Reshape", {"d", "flat"}, {"y"}, "reshape"));
  const runtime rt = load(w::model(g));
  REQUIRE(rt.inputs().size() == 1);
  CHECK(rt.inputs()[0].shape == quark::onnx::shape_t{-1, 3});

  for (std::int64_t rows : {1, 4}) {
    std::vector<float> xs;
    for (std::int64_t i = 0; i < rows * 3; ++i)
      xs.push_back(static_cast<float>(i) - 4.0f);
    std::map<std::string, tensor> feeds;
    feeds["x"] = tensor::from_floats({rows, 3}, xs);
    std::vector<std::string> seen;
    const auto out = rt.run(feeds, [&](std::string_view name, const tensor& t) {
      seen.emplace_back(name);
      CHECK(t.type() == quark::dtype_id::float32);
    });
    CHECK(seen == std::vector<std::string>{"x", "a", "b", "c", "d", "y"});
    const auto y = out.at("y").data<float>();
    REQUIRE(y.size() == xs.size());
    for (std::size_t i = 0; i < xs.size(); ++i) {
      const float a = std::max(xs[i], 0.0f);
      CHECK(static_cast<double>(y[i]) == doctest::Approx(static_cast<double>(a - 2.0f * a)));
    }
  }
}

TEST_CASE("a value held by a shared_value_observer is not overwritten in place") {
  // a = Relu(x), b = Exp(a), c = Sqrt(b), y = Relu(c): each value dies at the next node, whose
  // output takes its storage in place unless something else holds it. The copies made as each
  // value appears are the oracle.
  w::graph g;
  g.add_input(w::value_info("x", 1, {6}));
  g.add_output(w::value_info("y", 1, {6}));
  g.add_node(w::node("Relu", {"x"}, {"a"}, "relu1"));
  g.add_node(w::node("Exp", {"a"}, {"b"}, "exp"));
  g.add_node(w::node("Sqrt", {"b"}, {"c"}, "sqrt"));
  g.add_node(w::node("Relu", {"c"}, {"y"}, "relu2"));
  const runtime rt = load(w::model(g));
  const std::vector<float> xs{-2, -1, 0, 1, 2, 3};
  std::map<std::string, tensor> feeds;
  feeds["x"] = tensor::from_floats({6}, xs);
  std::map<std::string, std::vector<float>> copies;
  std::map<std::string, std::shared_ptr<const tensor>> held;
  const auto out = rt.run(feeds, [&](std::string_view name, std::shared_ptr<const tensor> value) {
    const auto v = value->data<float>();
    copies[std::string(name)] = std::vector<float>(v.begin(), v.end());
    if (name != "x")  // a graph input is the caller's feed: not held past run()
      held[std::string(name)] = std::move(value);
  });
  REQUIRE(held.size() == 4);
  for (const auto& entry : held) {
    const std::string& name = entry.first;
    CAPTURE(name);
    const auto v = entry.second->data<float>();
    CHECK(std::vector<float>(v.begin(), v.end()) == copies.at(name));
  }
  const auto y = out.at("y").data<float>();
  REQUIRE(y.size() == xs.size());
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const double want = std::sqrt(std::exp(std::max(static_cast<double>(xs[i]), 0.0)));
    CHECK(static_cast<double>(y[i]) == doctest::Approx(want).epsilon(1e-6));
    CHECK(copies.at("a")[i] == std::max(xs[i], 0.0f));
  }
  // Without holders the same graph computes in place, with the same outputs.
  const auto plain = rt.run(feeds);
  const auto y2 = plain.at("y").data<float>();
  CHECK(std::vector<float>(y2.begin(), y2.end()) == std::vector<float>(y.begin(), y.end()));
}

TEST_CASE("If runs the branch chosen at run time with outer-scope values") {
  w::graph then_g;
  then_g.add_output(w::value_info("t_out", 1, {}));
  then_g.add_node(w::node("Relu", {"x"}, {"t_out"}, "then_relu"));
  w::graph else_g;
  else_g.add_output(w::value_info("e_out", 1, {}));
  else_g.add_node(w::node("Neg", {"x"}, {"e_out"}, "else_neg"));
  w::graph g;
  g.add_input(w::value_info("x", 1, {2}));
  g.add_input(w::value_info("c", 9, {}));
  g.add_output(w::value_info("y", 1, {2}));
  g.add_node(
      w::node("If", {"c"}, {"y"}, "if",
              {w::attr_graph("then_branch", then_g.m), w::attr_graph("else_branch", else_g.m)}));
  const runtime rt = load(w::model(g));
  for (bool cond : {true, false}) {
    std::map<std::string, tensor> feeds;
    feeds["x"] = tensor::from_floats({2}, std::vector<float>{-1.0f, 3.0f});
    tensor c(quark::dtype_id::boolean, {});
    c.data<bool>()[0] = cond;
    feeds["c"] = c;
    std::vector<std::string> seen;
    const auto out =
        rt.run(feeds, [&](std::string_view n, const tensor&) { seen.emplace_back(n); });
    const auto y = out.at("y").data<float>();
    if (cond) {
      CHECK(y[0] == 0.0f);
      CHECK(y[1] == 3.0f);
      CHECK(std::count(seen.begin(), seen.end(), "t_out") == 1);
    } else {
      CHECK(y[0] == 1.0f);
      CHECK(y[1] == -3.0f);
      CHECK(std::count(seen.begin(), seen.end(), "e_out") == 1);
    }
  }
}

TEST_CASE("load errors name every unsupported op, cycles and dangling inputs") {
  {
    w::graph g;
    g.add_input(w::value_info("x", 1, {2}));
    g.add_output(w::value_info("z", 1, {2}));
    g.add_node(w::node("FancyOp", {"x"}, {"y"}, "n1"));
    g.add_node(w::node("OtherOp", {"y"}, {"z"}, "n2"));
    g.add_node(w::node("Relu", {"x"}, {"r"}, "n3"));
    const auto msg = error_of(w::model(g));
    CHECK(msg.find("quark.onnx.unsupported_op") == 0);
    CHECK(msg.find("FancyOp") != std::string::npos);
    CHECK(msg.find("OtherOp") != std::string::npos);
  }
  {
    w::graph g;
    g.add_input(w::value_info("x", 1, {2}));
    g.add_output(w::value_info("b", 1, {2}));
    g.add_node(w::node("Add", {"x", "b"}, {"a"}, "first"));
    g.add_node(w::node("Relu", {"a"}, {"b"}, "second"));
    const auto msg = error_of(w::model(g));
    CHECK(msg.find("cycle") != std::string::npos);
  }
  {
    w::graph g;
    g.add_input(w::value_info("x", 1, {2}));
    g.add_output(w::value_info("a", 1, {2}));
    g.add_node(w::node("Add", {"x", "ghost"}, {"a"}, "adder"));
    const auto msg = error_of(w::model(g));
    CHECK(msg.find("ghost") != std::string::npos);
    CHECK(msg.find("adder") != std::string::npos);
  }
}

TEST_CASE("run-time errors name the node and the shapes") {
  w::graph g;
  g.add_input(w::value_info("x", 1, {-1}));
  g.add_input(w::value_info("y", 1, {-1}));
  g.add_output(w::value_info("z", 1, {-1}));
  g.add_node(w::node("Add", {"x", "y"}, {"z"}, "the_add"));
  const runtime rt = load(w::model(g));
  std::map<std::string, tensor> feeds;
  feeds["x"] = tensor::from_floats({2}, std::vector<float>{1, 2});
  feeds["y"] = tensor::from_floats({3}, std::vector<float>{1, 2, 3});
  try {
    (void)rt.run(feeds);
    FAIL("expected a shape error");
  } catch (const quark::onnx::frontend_error& e) {
    CHECK(e.id() == "quark.onnx.shape");
    CHECK(std::string(e.what()).find("the_add") != std::string::npos);
  }
  feeds.erase("y");
  CHECK_THROWS_AS((void)rt.run(feeds), quark::onnx::frontend_error);
}

TEST_CASE("supported_ops covers the issue's operator list") {
  const auto ops = runtime::supported_ops();
  for (const char* op : {"Conv",
                         "ConvTranspose",
                         "Gemm",
                         "MatMul",
                         "Add",
                         "Sub",
                         "Mul",
                         "Div",
                         "Pow",
                         "Sqrt",
                         "Exp",
                         "Log",
                         "Abs",
                         "Neg",
                         "Reciprocal",
                         "Erf",
                         "Tanh",
                         "Sigmoid",
                         "HardSigmoid",
                         "HardSwish",
                         "Relu",
                         "LeakyRelu",
                         "PRelu",
                         "Clip",
                         "Elu",
                         "Selu",
                         "Softplus",
                         "Gelu",
                         "Softmax",
                         "LogSoftmax",
                         "BatchNormalization",
                         "InstanceNormalization",
                         "LayerNormalization",
                         "ReduceMean",
                         "ReduceSum",
                         "ReduceMax",
                         "ReduceMin",
                         "GlobalAveragePool",
                         "GlobalMaxPool",
                         "AveragePool",
                         "MaxPool",
                         "Resize",
                         "Upsample",
                         "Concat",
                         "Split",
                         "Slice",
                         "Reshape",
                         "Flatten",
                         "Transpose",
                         "Squeeze",
                         "Unsqueeze",
                         "Gather",
                         "Shape",
                         "Cast",
                         "Constant",
                         "ConstantOfShape",
                         "Identity",
                         "Pad",
                         "Expand",
                         "Tile",
                         "Where",
                         "Equal",
                         "Less",
                         "Greater",
                         "Not",
                         "And",
                         "Range",
                         "Min",
                         "Max",
                         "DepthToSpace",
                         "SpaceToDepth",
                         "QuantizeLinear",
                         "DequantizeLinear",
                         "LSTM",
                         "If"}) {
    CHECK_MESSAGE(std::binary_search(ops.begin(), ops.end(), op), op);
  }
}

TEST_CASE("large element-wise binary nodes: split over threads, streamed to a chunk sink") {
  // Outputs of 2^18 + 5 elements take the split path (chunks of 2^17 on the pool's threads):
  // a = x * k (scalar), b = a + x, c = b / k2 (scalar), d = c - x, m = Greater(d, x) (bool). The
  // oracle is the same arithmetic in a plain loop (float32 throughout, so bit-equal).
  constexpr std::int64_t n = (std::int64_t{1} << 18) + 5;
  w::graph g;
  g.add_input(w::value_info("x", 1, {n}));
  g.add_output(w::value_info("d", 1, {n}));
  g.add_output(w::value_info("m", 9, {n}));
  g.add_initializer(w::float_tensor("k", {}, {1.75f}));
  g.add_initializer(w::float_tensor("k2", {1}, {3.0f}));
  g.add_node(w::node("Mul", {"x", "k"}, {"a"}, "mul"));
  g.add_node(w::node("Add", {"a", "x"}, {"b"}, "add"));
  g.add_node(w::node("Div", {"b", "k2"}, {"c"}, "div"));
  g.add_node(w::node("Sub", {"c", "x"}, {"d"}, "sub"));
  g.add_node(w::node("Greater", {"d", "x"}, {"m"}, "greater"));
  const runtime rt = load(w::model(g));
  std::vector<float> xs(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < xs.size(); ++i)
    xs[i] = static_cast<float>(static_cast<int>(i % 1999) - 999) * 0.37f;
  std::map<std::string, tensor> feeds;
  feeds["x"] = tensor::from_floats({n}, xs);

  // Sinks for b and c record what they received (per part, in order) and from which parts.
  struct received {
    std::vector<std::pair<const float*, std::size_t>> spans;
    std::vector<std::size_t> parts;
  };
  std::map<std::string, received> got;
  std::mutex lock;
  std::map<std::string, quark::onnx::chunk_sink> sinks;
  for (const std::string name : {"b", "c"}) {
    sinks[name] = [&, name](std::size_t part, std::span<const float> v) {
      const std::lock_guard guard(lock);
      got[name].spans.emplace_back(v.data(), v.size());
      got[name].parts.push_back(part);
    };
  }
  std::map<std::string, std::vector<float>> copies;
  std::map<std::string, std::shared_ptr<const tensor>> held;
  const auto out = rt.run(
      feeds,
      [&](std::string_view name, std::shared_ptr<const tensor> value) {
        if (value->type() == quark::dtype_id::float32) {
          const auto v = value->data<float>();
          copies[std::string(name)] = std::vector<float>(v.begin(), v.end());
        }
        if (name == "b" || name == "c")
          held[std::string(name)] = std::move(value);  // keep the storage the spans point into
      },
      [&](std::string_view name) -> const quark::onnx::chunk_sink* {
        auto it = sinks.find(std::string(name));
        return it == sinks.end() ? nullptr : &it->second;
      });

  const auto d = out.at("d").data<float>();
  const auto m = out.at("m").data<bool>();
  REQUIRE(d.size() == xs.size());
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const float a = xs[i] * 1.75f;
    const float b = a + xs[i];
    const float c = b / 3.0f;
    const float want = c - xs[i];
    if (d[i] != want || copies.at("b")[i] != b || m[i] != (want > xs[i])) {
      FAIL_CHECK("element " << i << ": d " << d[i] << " (want " << want << ")");
      break;
    }
  }
  // Each sink got its node's output exactly once, in chunks taken by the pool's threads.
  for (const std::string name : {"b", "c"}) {
    CAPTURE(name);
    const received& r = got.at(name);
    const float* base = held.at(name)->data<float>().data();
    std::vector<std::pair<std::size_t, std::size_t>> ranges;
    for (const auto& [p, size] : r.spans)
      ranges.emplace_back(static_cast<std::size_t>(p - base), size);
    std::sort(ranges.begin(), ranges.end());
    std::size_t next = 0;
    for (const auto& [at, size] : ranges) {
      CHECK(at == next);
      next = at + size;
    }
    CHECK(next == xs.size());
    CHECK(r.spans.size() == 3);  // ceil((2^18 + 5) / 2^17)
    for (const std::size_t part : r.parts)
      CHECK(part < rt.threads());
  }
  CHECK_FALSE(got.contains("a"));  // no sink asked for: nothing streamed
  // The plain run (no sink, no holder) computes the same.
  const auto plain = rt.run(feeds);
  const auto d2 = plain.at("d").data<float>();
  CHECK(std::vector<float>(d2.begin(), d2.end()) == std::vector<float>(d.begin(), d.end()));
}
