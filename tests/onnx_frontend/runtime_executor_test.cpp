// SPDX-License-Identifier: MIT
// The executor itself: observation hooks (each value once, as soon as it exists), dynamic shapes,
// int64 shape arithmetic, If branches reading the enclosing scope, and load-time errors (every
// unsupported op listed, cycles, dangling inputs), and the thread pool behind parallel_for.
// Models are written with the wire helper.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <doctest/doctest.h>

#include <quark/onnx/calib_data.hpp>
#include <quark/onnx/presets.hpp>
#include <quark/onnx/quantizer.hpp>
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

TEST_CASE("operator sets newer than 26 are refused by the runtime and the quantizer") {
  // A model mutated to opset 1000 (or 27: ONNX Runtime 1.30 runs up to 26) was calibrated with
  // the older operators' semantics and written out with its operator set unchanged.
  auto bytes = [](std::int64_t opset) {
    w::graph g;
    g.add_input(w::value_info("x", 1, {4}));
    g.add_output(w::value_info("y", 1, {4}));
    g.add_node(w::node("Relu", {"x"}, {"y"}, "r"));
    return w::model(g, 10, {{"", opset}});
  };
  CHECK(error_of(bytes(24)).empty());
  CHECK(error_of(bytes(25)).empty());
  CHECK(error_of(bytes(26)).empty());
  for (const std::int64_t opset : {27, 28, 1000}) {
    CAPTURE(opset);
    const std::string want = "quark.onnx.opset: the model imports operator set ai.onnx " +
                             std::to_string(opset) + "; quark-cpp implements versions up to 26";
    CHECK(error_of(bytes(opset)) == want);
    const auto m = quark::onnx::model::from_bytes(bytes(opset));
    quark::onnx::memory_reader reader(
        {{{"x", tensor::from_floats({4}, std::vector<float>{-1.0f, 0.5f, 2.0f, 3.0f})}}});
    CHECK_THROWS_WITH_AS(
        quark::onnx::quantize_model(m, quark::onnx::get_default_config("A8W8"), reader),
        want.c_str(), quark::onnx::frontend_error);
    CHECK_THROWS_WITH_AS(
        quark::onnx::quantize_model(quark::onnx::model(m), quark::onnx::get_default_config("A8W8"),
                                    reader),
        want.c_str(), quark::onnx::frontend_error);
    CHECK_THROWS_WITH_AS(quark::onnx::equalize_model(m, quark::onnx::get_default_config("A8W8")),
                         want.c_str(), quark::onnx::frontend_error);
  }
  const auto ok = quark::onnx::model::from_bytes(bytes(24));
  CHECK_NOTHROW(quark::onnx::equalize_model(ok, quark::onnx::get_default_config("A8W8")));
}

TEST_CASE("a graph without outputs is refused by the runtime and the quantizer") {
  // Found by a differential sweep against ONNX Runtime: a PaddleOCR cls stripped of its graph
  // output was "quantized" into a model that computes nothing (ORT fails on it: "OrtValue
  // indexes should have been populated"). Such a graph still loads: the model API edits graphs
  // that have no outputs yet.
  w::graph g;
  g.add_input(w::value_info("x", 1, {4}));
  g.add_node(w::node("Relu", {"x"}, {"y"}, "r"));
  const std::string want =
      "quark.onnx.graph: the graph declares no outputs: there is nothing to run or quantize";
  CHECK(error_of(w::model(g)) == want);
  const auto m = quark::onnx::model::from_bytes(w::model(g));
  quark::onnx::memory_reader reader(
      {{{"x", tensor::from_floats({4}, std::vector<float>{-1.0f, 0.5f, 2.0f, 3.0f})}}});
  CHECK_THROWS_WITH_AS(
      quark::onnx::quantize_model(m, quark::onnx::get_default_config("A8W8"), reader), want.c_str(),
      quark::onnx::frontend_error);
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
    sinks[name] = [&, name](std::size_t part, const quark::onnx::value_chunk& v) {
      const std::lock_guard guard(lock);
      CHECK(v.rows == 1);
      got[name].spans.emplace_back(v.data, v.size());
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

namespace {

/// Direct convolution (stride 1, symmetric padding `pad`, `group` groups) in double: an oracle
/// independent of the runtime's im2col / GEMM / depthwise kernels.
std::vector<float> naive_conv(const std::vector<float>& x, std::size_t c, std::size_t h,
                              std::size_t wd, const std::vector<float>& w, std::size_t m,
                              std::size_t k, std::size_t pad, std::size_t group,
                              const std::vector<float>& bias) {
  const std::size_t cg = c / group;
  const std::size_t mg = m / group;
  std::vector<float> y(m * h * wd);
  for (std::size_t o = 0; o < m; ++o) {
    const std::size_t gi = o / mg;
    for (std::size_t oy = 0; oy < h; ++oy) {
      for (std::size_t ox = 0; ox < wd; ++ox) {
        double acc = bias.empty() ? 0.0 : static_cast<double>(bias[o]);
        for (std::size_t ci = 0; ci < cg; ++ci) {
          for (std::size_t ky = 0; ky < k; ++ky) {
            for (std::size_t kx = 0; kx < k; ++kx) {
              const std::size_t iy = oy + ky;
              const std::size_t ix = ox + kx;
              if (iy < pad || ix < pad || iy - pad >= h || ix - pad >= wd)
                continue;
              const float xv = x[((gi * cg + ci) * h + iy - pad) * wd + ix - pad];
              const float wv = w[((o * cg + ci) * k + ky) * k + kx];
              acc += static_cast<double>(xv) * static_cast<double>(wv);
            }
          }
        }
        y[(o * h + oy) * wd + ox] = static_cast<float>(acc);
      }
    }
  }
  return y;
}

std::vector<float> pattern(std::size_t n, std::size_t period, float step, int offset) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i)
    v[i] = static_cast<float>(static_cast<int>(i % period) - offset) * step;
  return v;
}

}  // namespace

TEST_CASE("streamed kernels: per-channel binary, unary, Clip and Conv hand on final values") {
  // x [1, 16, 128, 128] (2^18 values, the smallest streamed size):
  //   p = Mul(x, s[1,16,1,1])  (two-level broadcast)   r = Relu(p)   q = Clip(r, 0.05, 3)
  //   d = Conv(q) depthwise 3x3 + bias          e = Conv(d) 16 -> 32, 3x3 + bias (im2col)
  //   f = Conv(e) 32 -> 24, 1x1 + bias (pointwise)   g = Conv(f) 1x1, group 2, no bias
  //   y = Add(g, t[1,24,1,128])  (three-level broadcast: not streamed)
  // Every sink must get its output exactly once, in chunks holding the final values (bias
  // included) from parts < threads(); y's sink nothing. The values themselves are checked
  // against plain loops (bit-exact) and a direct double-precision convolution.
  constexpr std::size_t hw = 128;
  constexpr std::size_t plane = hw * hw;
  const std::vector<float> xs = pattern(16 * plane, 997, 0.013f, 450);
  const std::vector<float> sv = pattern(16, 16, 0.25f, 5);
  const std::vector<float> wdw = pattern(16 * 9, 13, 0.09f, 6);
  const std::vector<float> bdw = pattern(16, 7, 0.1f, 3);
  const std::vector<float> w3 = pattern(32 * 16 * 9, 29, 0.011f, 14);
  const std::vector<float> b3 = pattern(32, 9, 0.05f, 4);
  const std::vector<float> w1 = pattern(24 * 32, 31, 0.02f, 15);
  const std::vector<float> b1 = pattern(24, 5, 0.2f, 2);
  const std::vector<float> wg = pattern(24 * 12, 11, 0.04f, 5);
  const std::vector<float> tv = pattern(24 * hw, 37, 0.01f, 18);
  w::graph g;
  g.add_input(w::value_info("x", 1, {1, 16, 128, 128}));
  g.add_output(w::value_info("y", 1, {1, 24, 128, 128}));
  g.add_initializer(w::float_tensor("s", {1, 16, 1, 1}, sv));
  g.add_initializer(w::float_tensor("lo", {}, {0.05f}));
  g.add_initializer(w::float_tensor("hi", {}, {3.0f}));
  g.add_initializer(w::float_tensor("wdw", {16, 1, 3, 3}, wdw));
  g.add_initializer(w::float_tensor("bdw", {16}, bdw));
  g.add_initializer(w::float_tensor("w3", {32, 16, 3, 3}, w3));
  g.add_initializer(w::float_tensor("b3", {32}, b3));
  g.add_initializer(w::float_tensor("w1", {24, 32, 1, 1}, w1));
  g.add_initializer(w::float_tensor("b1", {24}, b1));
  g.add_initializer(w::float_tensor("wg", {24, 12, 1, 1}, wg));
  g.add_initializer(w::float_tensor("t", {1, 24, 1, 128}, tv));
  g.add_node(w::node("Mul", {"x", "s"}, {"p"}, "mul"));
  g.add_node(w::node("Relu", {"p"}, {"r"}, "relu"));
  g.add_node(w::node("Clip", {"r", "lo", "hi"}, {"q"}, "clip"));
  g.add_node(w::node("Conv", {"q", "wdw", "bdw"}, {"d"}, "dw",
                     {w::attr_int("group", 16), w::attr_ints("pads", {1, 1, 1, 1})}));
  g.add_node(
      w::node("Conv", {"d", "w3", "b3"}, {"e"}, "conv3", {w::attr_ints("pads", {1, 1, 1, 1})}));
  g.add_node(w::node("Conv", {"e", "w1", "b1"}, {"f"}, "conv1"));
  g.add_node(w::node("Conv", {"f", "wg"}, {"g"}, "grouped", {w::attr_int("group", 2)}));
  g.add_node(w::node("Add", {"g", "t"}, {"y"}, "add"));
  const std::vector<std::string> names{"p", "r", "q", "d", "e", "f", "g", "y"};

  for (const unsigned threads : {2u, 3u}) {
    CAPTURE(threads);
    const std::string bytes = w::model(g);
    const runtime rt = runtime::from_bytes(
        std::span<const std::byte>(reinterpret_cast<const std::byte*>(bytes.data()), bytes.size()),
        {}, {.threads = threads});
    struct chunk_copy {
      const float* at;
      std::size_t rows, cols, stride, part;
      std::vector<float> values;
    };
    std::map<std::string, std::vector<chunk_copy>> got;
    std::mutex lock;
    std::map<std::string, quark::onnx::chunk_sink> sinks;
    for (const std::string& name : names) {
      sinks[name] = [&, name](std::size_t part, const quark::onnx::value_chunk& v) {
        chunk_copy cc{v.data, v.rows, v.cols, v.stride, part, {}};
        for (std::size_t r = 0; r < v.rows; ++r)
          cc.values.insert(cc.values.end(), v.row(r).begin(), v.row(r).end());
        const std::lock_guard guard(lock);
        got[name].push_back(std::move(cc));
      };
    }
    std::map<std::string, std::vector<float>> values;
    std::map<std::string, std::string> coverage;  // per value: "" or what went wrong
    std::map<std::string, tensor> feeds;
    feeds["x"] = tensor::from_floats({1, 16, 128, 128}, xs);
    (void)rt.run(
        feeds,
        [&](std::string_view name, std::shared_ptr<const tensor> value) {
          const auto v = value->data<float>();
          values[std::string(name)] = std::vector<float>(v.begin(), v.end());
          // Each element once, with the value the observer sees now.
          std::vector<int> seen(v.size(), 0);
          std::string bad;
          for (const chunk_copy& cc : got[std::string(name)]) {
            if (cc.part >= rt.threads())
              bad = "part out of range";
            const auto base = static_cast<std::size_t>(cc.at - v.data());
            std::size_t k = 0;
            for (std::size_t r = 0; r < cc.rows; ++r) {
              for (std::size_t j = 0; j < cc.cols; ++j, ++k) {
                const std::size_t i = base + r * cc.stride + j;
                if (i >= v.size()) {
                  bad = "chunk outside the value";
                  continue;
                }
                ++seen[i];
                if (cc.values[k] != v[i])
                  bad = "element " + std::to_string(i) + " handed on before its final value";
              }
            }
          }
          if (!got[std::string(name)].empty() &&
              std::any_of(seen.begin(), seen.end(), [](int s) { return s != 1; }))
            bad += " not every element exactly once";
          coverage[std::string(name)] = bad;
        },
        [&](std::string_view name) -> const quark::onnx::chunk_sink* {
          auto it = sinks.find(std::string(name));
          return it == sinks.end() ? nullptr : &it->second;
        });
    for (const std::string& name : names) {
      CAPTURE(name);
      CHECK(coverage.at(name) == "");
      if (name == "y") {
        CHECK(got[name].empty());
      } else {
        CHECK(got[name].size() >= 2);
      }
    }
    CHECK(got["e"].front().rows == 32);  // im2col blocks: columns of every output channel

    // The values: plain loops for the element-wise nodes (bit-exact), direct convolutions.
    std::vector<float> q(xs.size());
    for (std::size_t i = 0; i < xs.size(); ++i) {
      const float p = xs[i] * sv[i / plane];
      const float r = p > 0.0f ? p : 0.0f;
      q[i] = std::min(std::max(r, 0.05f), 3.0f);
      if (values["p"][i] != p || values["r"][i] != r || values["q"][i] != q[i]) {
        FAIL_CHECK("element " << i);
        break;
      }
    }
    const auto close = [](const std::vector<float>& got_v, const std::vector<float>& want) {
      REQUIRE(got_v.size() == want.size());
      for (std::size_t i = 0; i < want.size(); ++i) {
        if (std::fabs(got_v[i] - want[i]) > 1e-4f * (1.0f + std::fabs(want[i])))
          return "element " + std::to_string(i) + ": " + std::to_string(got_v[i]) + " want " +
                 std::to_string(want[i]);
      }
      return std::string();
    };
    // Each stage from the runtime's own input to it, so errors do not compound.
    CHECK(close(values["d"], naive_conv(q, 16, hw, hw, wdw, 16, 3, 1, 16, bdw)) == "");
    CHECK(close(values["e"], naive_conv(values["d"], 16, hw, hw, w3, 32, 3, 1, 1, b3)) == "");
    CHECK(close(values["f"], naive_conv(values["e"], 32, hw, hw, w1, 24, 1, 0, 1, b1)) == "");
    CHECK(close(values["g"], naive_conv(values["f"], 24, hw, hw, wg, 24, 1, 0, 2, {})) == "");
  }
}

TEST_CASE("parallel_for: each index once, nested calls inline, errors rethrown, two callers") {
  // The pool's threads poll for the next call for ~50 us before sleeping, and the caller polls
  // for the workers: back-to-back calls with tiny bodies take the polling path, the pauses every
  // 64 rounds the sleeping one. Each call must cover [0, n) exactly once, in at most threads()
  // chunks, whichever way the threads woke up.
  w::graph g;
  g.add_input(w::value_info("x", 1, {1}));
  g.add_output(w::value_info("y", 1, {1}));
  g.add_node(w::node("Relu", {"x"}, {"y"}, "relu"));
  const std::string bytes = w::model(g);
  for (const unsigned threads : {1u, 2u, 3u, 4u}) {
    CAPTURE(threads);
    const runtime rt = runtime::from_bytes(
        std::span<const std::byte>(reinterpret_cast<const std::byte*>(bytes.data()), bytes.size()),
        {}, {.threads = threads});
    REQUIRE(rt.threads() == threads);

    // Coverage and chunk counts, over sizes below, at and above the thread count.
    std::size_t bad = 0;
    std::size_t split_calls = 0;  // calls that ran on more than one thread
    for (int round = 0; round < 500; ++round) {
      for (const std::size_t n : {std::size_t{1}, std::size_t{2}, std::size_t{3}, std::size_t{7},
                                  std::size_t{64}, std::size_t{1000}}) {
        for (const std::size_t grain : {std::size_t{1}, std::size_t{5}, std::size_t{100}}) {
          std::vector<std::atomic<int>> hits(n);
          std::mutex m;
          std::vector<std::thread::id> who;
          std::size_t chunks = 0;
          rt.parallel_for(n, grain, [&](std::size_t b, std::size_t e) {
            for (std::size_t i = b; i < e; ++i)
              hits[i].fetch_add(1, std::memory_order_relaxed);
            const std::lock_guard lock(m);
            ++chunks;
            if (std::find(who.begin(), who.end(), std::this_thread::get_id()) == who.end())
              who.push_back(std::this_thread::get_id());
          });
          const std::size_t most = std::min<std::size_t>(threads, (n + grain - 1) / grain);
          bad += static_cast<std::size_t>(
              std::any_of(hits.begin(), hits.end(), [](const auto& h) { return h.load() != 1; }));
          bad += static_cast<std::size_t>(chunks == 0 || chunks > most || who.size() > chunks);
          split_calls += static_cast<std::size_t>(who.size() > 1);
        }
      }
      if (round % 64 == 63)
        std::this_thread::sleep_for(std::chrono::microseconds(300));  // workers fall asleep
    }
    CHECK(bad == 0);
    if (threads > 1) {
      CHECK(split_calls > 0);  // the workers do take chunks
    } else {
      CHECK(split_calls == 0);
    }

    // A call from inside a chunk runs inline on that thread and still covers its range.
    std::vector<std::atomic<int>> inner(4 * 100);
    rt.parallel_for(4, 1, [&](std::size_t b, std::size_t e) {
      for (std::size_t o = b; o < e; ++o) {
        rt.parallel_for(100, 1, [&](std::size_t ib, std::size_t ie) {
          for (std::size_t i = ib; i < ie; ++i)
            inner[o * 100 + i].fetch_add(1);
        });
      }
    });
    CHECK(std::all_of(inner.begin(), inner.end(), [](const auto& h) { return h.load() == 1; }));

    // An exception in the caller's chunk (the first) or in a worker's (the last) reaches the
    // caller after every other chunk ran; the pool then works as before.
    for (const bool in_first : {true, false}) {
      CAPTURE(in_first);
      std::vector<std::atomic<int>> hits(64);
      const std::size_t thrower = in_first ? 0 : 63;
      CHECK_THROWS_WITH_AS(rt.parallel_for(64, 1,
                                           [&](std::size_t b, std::size_t e) {
                                             for (std::size_t i = b; i < e; ++i)
                                               hits[i].fetch_add(1);
                                             if (b <= thrower && thrower < e)
                                               throw std::runtime_error("chunk failed");
                                           }),
                           "chunk failed", std::runtime_error);
      CHECK(std::all_of(hits.begin(), hits.end(), [](const auto& h) { return h.load() == 1; }));
      std::atomic<std::size_t> sum = 0;
      rt.parallel_for(64, 1, [&](std::size_t b, std::size_t e) {
        for (std::size_t i = b; i < e; ++i)
          sum.fetch_add(i);
      });
      CHECK(sum.load() == 64 * 63 / 2);
    }

    // Two threads calling at once (the background observer beside the graph): the call that
    // finds the pool busy runs inline; both stay exact.
    std::atomic<std::size_t> wrong = 0;
    auto caller = [&] {
      for (int r = 0; r < 400; ++r) {
        std::vector<std::atomic<int>> hits(257);
        rt.parallel_for(hits.size(), 1, [&](std::size_t b, std::size_t e) {
          for (std::size_t i = b; i < e; ++i)
            hits[i].fetch_add(1);
        });
        wrong += static_cast<std::size_t>(
            std::any_of(hits.begin(), hits.end(), [](const auto& h) { return h.load() != 1; }));
      }
    };
    std::thread other(caller);
    caller();
    other.join();
    CHECK(wrong.load() == 0);
  }
}

TEST_CASE("float32 fed to a float16 / bfloat16 input takes that type's nearest values") {
  // x (half) -> Cast(float) -> y. Hand-derived roundings to nearest, ties to even:
  //   bfloat16 (8 significant bits): 3.3 -> 3.296875; 1 + 2^-8 (a tie) -> 1; 1 + 3 * 2^-8 (a tie)
  //   -> 1 + 2^-6; float16 (11 bits): 3.3 -> 3.30078125; 1 + 2^-11 -> 1; 1 + 3 * 2^-11 -> 1 + 2^-9.
  const std::vector<float> fed{3.3f, 1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, -2.5f};
  const std::vector<float> fed16{3.3f, 1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, -2.5f};
  auto bytes = [](int elem_type) {
    w::graph g;
    g.add_input(w::value_info("x", elem_type, {1, 4}));
    g.add_output(w::value_info("y", 1, {1, 4}));
    g.add_node(w::node("Cast", {"x"}, {"xf"}, "c", {w::attr_int("to", 1)}));
    g.add_node(w::node("Relu", {"xf"}, {"y"}, "r"));
    return w::model(g, 8, {{"", 13}});
  };
  for (const int type : {16, 10}) {  // BFLOAT16, FLOAT16
    CAPTURE(type);
    const std::vector<float>& x = type == 16 ? fed : fed16;
    const std::vector<float> want =
        type == 16 ? std::vector<float>{3.296875f, 1.0f, 1.0f + 0x1p-6f, 0.0f}
                   : std::vector<float>{3.30078125f, 1.0f, 1.0f + 0x1p-9f, 0.0f};
    const runtime rt = load(bytes(type));
    const auto out = rt.run({{"x", tensor::from_floats({1, 4}, x)}});
    const auto y = out.at("y").data<float>();
    REQUIRE(y.size() == want.size());
    for (std::size_t i = 0; i < want.size(); ++i) {
      CAPTURE(i);
      CHECK(y[i] == want[i]);
    }
    // The quantizer takes such calibration data (numpy has no bfloat16) and calibrates on the
    // rounded values: MinMax on the Cast's output ends at the rounded 3.3.
    quark::onnx::qconfig cfg = quark::onnx::get_default_config("A8W8");
    cfg.global_config.input_tensors->calibration_method = quark::onnx::calib_method::min_max;
    quark::onnx::memory_reader reader({{{"x", tensor::from_floats({1, 4}, x)}}});
    const auto m = quark::onnx::model::from_bytes(bytes(type));
    quark::onnx::quantize_report rep;
    const auto q = quark::onnx::quantize_model(m, cfg, reader, &rep);
    const auto it = std::find_if(rep.tensors.begin(), rep.tensors.end(),
                                 [](const auto& t) { return t.name == "xf"; });
    REQUIRE(it != rep.tensors.end());
    CHECK(it->rmax == want[0]);
  }
}
