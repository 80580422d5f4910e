// SPDX-License-Identifier: MIT
// The runtime's 3-D convolutions and pools, MaxPool's Indices output and integer inputs, LpPool,
// MaxUnpool, LRN and MeanVarianceNormalization against ONNX Runtime 1.30 on random inputs. The
// ONNX node tests cover only a few of these (one 3-D ConvTranspose, 3-D pools with default
// attributes, two Indices cases, one LRN, one MVN); these cases add strides, dilations, pads,
// groups, auto_pad, ceil_mode, count_include_pad, storage_order, output_padding / output_shape,
// even LRN windows and MVN axes. Float results agree within 1e-4 (absolute plus relative: the two
// runtimes sum in different orders); integer results and indices exactly.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <doctest/doctest.h>

// support/ort.hpp first: inside quark::test, "onnx::" must find ::onnx, not quark::onnx.
#include <quark/onnx/runtime.hpp>

#include "support/ort.hpp"

namespace qo = quark::onnx;
using namespace quark::test;

namespace {

std::size_t count(const std::vector<std::int64_t>& shape) {
  std::size_t n = 1;
  for (const auto d : shape)
    n *= static_cast<std::size_t>(d);
  return n;
}

std::vector<float> random_values(std::size_t n, unsigned seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v)
    x = normal(g);
  return v;
}

/// Runs `m` (float input "x" of `shape`, holding `x`) in both runtimes and compares every output.
void check_model(const ::onnx::ModelProto& m, const std::vector<std::int64_t>& shape,
                 const std::vector<float>& x) {
  const qo::runtime rt =
      qo::runtime::from_bytes(std::as_bytes(std::span<const char>(m.SerializeAsString())), ".");
  std::map<std::string, qo::tensor> feeds;
  feeds.emplace("x", qo::tensor::from_floats(shape, x));
  const auto ours = rt.run(feeds);
  const auto ort =
      run_ort(m, {npy_array::from(x, std::vector<std::size_t>(shape.begin(), shape.end()))});
  REQUIRE(ours.size() == ort.size());
  for (const auto& entry : ort) {  // no structured binding: clang 14 cannot capture one
    const std::string& name = entry.first;
    const npy_array& want = entry.second;
    CAPTURE(name);
    const qo::tensor& got = ours.at(name);
    REQUIRE(got.shape().size() == want.shape.size());
    for (std::size_t i = 0; i < want.shape.size(); ++i)
      REQUIRE(static_cast<std::size_t>(got.shape()[i]) == want.shape[i]);
    REQUIRE(got.byte_size() == want.bytes.size());
    if (want.descr != "<f4") {
      CHECK(std::memcmp(got.bytes().data(), want.bytes.data(), want.bytes.size()) == 0);
      continue;
    }
    const auto g = got.data<float>();
    std::vector<float> w(g.size());
    std::memcpy(w.data(), want.bytes.data(), want.bytes.size());
    std::size_t bad = 0;
    double worst = 0.0;
    for (std::size_t i = 0; i < g.size(); ++i) {
      const double err = std::fabs(static_cast<double>(g[i]) - static_cast<double>(w[i]));
      worst = std::max(worst, err);
      if (!(err <= 1e-4 * (1.0 + std::fabs(static_cast<double>(w[i])))))
        ++bad;
    }
    CAPTURE(worst);
    CHECK(bad == 0);
  }
}

/// One node on input "x" plus float initializers, outputs listed with their element types.
struct one_node {
  int opset = 13;
  std::string op{};
  std::vector<std::int64_t> x_shape{};
  std::vector<std::pair<std::string, std::vector<std::int64_t>>> weights{};  // name, shape
  std::vector<std::pair<std::string, int>> outputs{{"y", onnx_type::float32}};
  std::vector<attribute> attrs{};
  unsigned seed = 1;

  void check() const {
    model_builder b(opset);
    b.input("x", onnx_type::float32, x_shape);
    std::vector<std::string> inputs{"x"};
    unsigned s = seed;
    for (const auto& [name, shape] : weights) {
      b.initializer(name, onnx_type::float32, shape, random_values(count(shape), ++s));
      inputs.push_back(name);
    }
    std::vector<std::string> outs;
    for (const auto& [name, type] : outputs) {
      outs.push_back(name);
      b.output(name, type);
    }
    b.node(op, inputs, outs, attrs);
    check_model(b.build(), x_shape, random_values(count(x_shape), seed));
  }
};

}  // namespace

TEST_CASE("3-D Conv matches ONNX Runtime") {
  if (!ort_available())
    FAIL("ONNX Runtime is required: " << ort_unavailable_reason());
  SUBCASE("groups, pads, strides, dilations, bias") {
    one_node t{.op = "Conv",
               .x_shape = {2, 4, 5, 6, 7},
               .weights = {{"w", {6, 2, 3, 2, 3}}, {"b", {6}}},
               .attrs = {attr_int("group", 2), attr_ints("pads", {1, 0, 1, 0, 1, 1}),
                         attr_ints("strides", {1, 2, 1}), attr_ints("dilations", {2, 1, 1})}};
    t.check();
  }
  SUBCASE("auto_pad SAME_LOWER with stride 2, no bias") {
    one_node t{.op = "Conv",
               .x_shape = {1, 3, 4, 5, 6},
               .weights = {{"w", {5, 3, 2, 3, 3}}},
               .attrs = {attr_string("auto_pad", "SAME_LOWER"), attr_ints("strides", {2, 2, 2})}};
    t.check();
  }
  SUBCASE("large enough to split over threads (1x1x1 and 3x3x3 kernels)") {
    one_node t{.op = "Conv",
               .x_shape = {1, 8, 8, 16, 16},
               .weights = {{"w", {16, 8, 3, 3, 3}}, {"b", {16}}},
               .attrs = {attr_ints("pads", {1, 1, 1, 1, 1, 1})}};
    t.check();
    one_node p{.op = "Conv", .x_shape = {1, 8, 4, 16, 16}, .weights = {{"w", {4, 8, 1, 1, 1}}}};
    p.check();
  }
}

TEST_CASE("3-D ConvTranspose matches ONNX Runtime") {
  if (!ort_available())
    FAIL("ONNX Runtime is required: " << ort_unavailable_reason());
  SUBCASE("groups, strides, pads, output_padding, dilations, bias") {
    one_node t{
        .op = "ConvTranspose",
        .x_shape = {1, 4, 3, 4, 5},
        .weights = {{"w", {4, 3, 2, 3, 2}}, {"b", {6}}},
        .attrs = {attr_int("group", 2), attr_ints("strides", {2, 1, 2}),
                  attr_ints("pads", {0, 1, 0, 1, 0, 0}), attr_ints("output_padding", {1, 0, 1}),
                  attr_ints("dilations", {1, 2, 1})}};
    t.check();
  }
  SUBCASE("output_shape") {
    one_node t{.op = "ConvTranspose",
               .x_shape = {2, 3, 2, 3, 3},
               .weights = {{"w", {3, 2, 3, 3, 3}}},
               .attrs = {attr_ints("strides", {2, 2, 2}), attr_ints("output_shape", {6, 7, 8})}};
    t.check();
  }
}

TEST_CASE("3-D MaxPool and AveragePool match ONNX Runtime") {
  if (!ort_available())
    FAIL("ONNX Runtime is required: " << ort_unavailable_reason());
  SUBCASE("MaxPool with Indices, pads, dilations, ceil_mode") {
    one_node t{.opset = 12,
               .op = "MaxPool",
               .x_shape = {2, 3, 5, 6, 7},
               .outputs = {{"y", onnx_type::float32}, {"i", onnx_type::int64}},
               .attrs = {attr_ints("kernel_shape", {2, 3, 2}), attr_ints("strides", {2, 2, 1}),
                         attr_ints("pads", {1, 1, 0, 0, 1, 1}), attr_ints("dilations", {1, 1, 2}),
                         attr_int("ceil_mode", 1)}};
    t.check();
  }
  SUBCASE("AveragePool with count_include_pad and ceil_mode") {
    for (const std::int64_t include : {0, 1}) {
      CAPTURE(include);
      one_node t{.opset = 19,
                 .op = "AveragePool",
                 .x_shape = {1, 2, 5, 6, 7},
                 .attrs = {attr_ints("kernel_shape", {3, 2, 3}), attr_ints("strides", {2, 2, 2}),
                           attr_ints("pads", {1, 0, 1, 1, 1, 0}),
                           attr_int("count_include_pad", include), attr_int("ceil_mode", 1)}};
      t.check();
    }
  }
}

TEST_CASE("MaxPool Indices with storage_order, and 8-bit integer MaxPool, match ONNX Runtime") {
  if (!ort_available())
    FAIL("ONNX Runtime is required: " << ort_unavailable_reason());
  for (const std::int64_t order : {0, 1}) {
    CAPTURE(order);
    one_node t{.opset = 12,
               .op = "MaxPool",
               .x_shape = {2, 3, 7, 9},
               .outputs = {{"y", onnx_type::float32}, {"i", onnx_type::int64}},
               .attrs = {attr_ints("kernel_shape", {3, 2}), attr_ints("strides", {2, 2}),
                         attr_ints("pads", {1, 0, 1, 1}), attr_int("storage_order", order)}};
    t.check();
  }
  // int8 / uint8 inputs: x arrives as float and is cast inside the graph, so both runtimes see
  // the same integers (Cast truncates; the values are within range).
  for (const int type : {onnx_type::int8, onnx_type::uint8}) {
    CAPTURE(type);
    model_builder b(12);
    const std::vector<std::int64_t> shape{1, 2, 6, 7};
    b.input("x", onnx_type::float32, shape);
    b.node("Cast", {"x"}, {"q"}, {attr_int("to", type)});
    b.node("MaxPool", {"q"}, {"y"},
           {attr_ints("kernel_shape", {2, 3}), attr_ints("pads", {1, 1, 1, 1})});
    b.output("y", type);
    std::vector<float> x = random_values(count(shape), 7);
    for (auto& v : x) {
      v = std::round(v * 40.0f) + (type == onnx_type::uint8 ? 120.0f : 0.0f);
      v = type == onnx_type::uint8 ? std::clamp(v, 0.0f, 255.0f) : std::clamp(v, -128.0f, 127.0f);
    }
    check_model(b.build(), shape, x);
  }
}

TEST_CASE("LpPool, GlobalLpPool and MaxUnpool match ONNX Runtime") {
  if (!ort_available())
    FAIL("ONNX Runtime is required: " << ort_unavailable_reason());
  SUBCASE("LpPool 2-D p 3 and 3-D p 2 with pads and strides") {
    one_node t{.opset = 11,
               .op = "LpPool",
               .x_shape = {1, 3, 6, 7},
               .attrs = {attr_ints("kernel_shape", {3, 2}), attr_ints("strides", {2, 1}),
                         attr_ints("pads", {1, 0, 1, 1}), attr_int("p", 3)}};
    t.check();
    one_node u{.opset = 11,
               .op = "LpPool",
               .x_shape = {2, 2, 4, 5, 6},
               .attrs = {attr_ints("kernel_shape", {2, 2, 3}), attr_int("p", 2)}};
    u.check();
  }
  SUBCASE("GlobalLpPool") {
    for (const std::int64_t p : {1, 2, 3}) {
      CAPTURE(p);
      one_node t{.op = "GlobalLpPool", .x_shape = {2, 3, 5, 4}, .attrs = {attr_int("p", p)}};
      t.check();
    }
  }
  SUBCASE("MaxPool's Indices into MaxUnpool, with and without output_shape") {
    for (const bool with_shape : {false, true}) {
      CAPTURE(with_shape);
      model_builder b(11);
      const std::vector<std::int64_t> shape{2, 3, 6, 8};
      b.input("x", onnx_type::float32, shape);
      const std::vector<attribute> win{attr_ints("kernel_shape", {2, 2}),
                                       attr_ints("strides", {2, 2})};
      b.node("MaxPool", {"x"}, {"p", "i"}, win);
      if (with_shape) {
        b.initializer("s", onnx_type::int64, {4}, std::vector<std::int64_t>{2, 3, 7, 9});
        b.node("MaxUnpool", {"p", "i", "s"}, {"y"}, win);
      } else {
        b.node("MaxUnpool", {"p", "i"}, {"y"}, win);
      }
      b.output("y", onnx_type::float32);
      check_model(b.build(), shape, random_values(count(shape), 3));
    }
  }
}

TEST_CASE("LRN and MeanVarianceNormalization match ONNX Runtime") {
  if (!ort_available())
    FAIL("ONNX Runtime is required: " << ort_unavailable_reason());
  SUBCASE("LRN with odd windows (ORT refuses even ones)") {
    for (const std::int64_t size : {1, 3, 5}) {
      CAPTURE(size);
      one_node t{.op = "LRN",
                 .x_shape = {2, 7, 4, 5},
                 .attrs = {attr_int("size", size), attr_float("alpha", 0.02f),
                           attr_float("beta", 0.6f), attr_float("bias", 1.5f)}};
      t.check();
    }
  }
  SUBCASE("MeanVarianceNormalization, default and explicit axes") {
    one_node t{.op = "MeanVarianceNormalization", .x_shape = {2, 3, 4, 5}};
    t.check();
    one_node u{.op = "MeanVarianceNormalization",
               .x_shape = {2, 3, 4, 5},
               .attrs = {attr_ints("axes", {1, -1})}};
    u.check();
  }
}

TEST_CASE("LRN with an even window sums one more channel after than before") {
  // size 2: channel c sums c .. c + 1 (floor((2 - 1) / 2) = 0 before, ceil(1 / 2) = 1 after).
  // x = {1, 2} over two channels, alpha 2 (alpha / size = 1), beta 1, bias 1:
  // y0 = 1 / (1 + 1 + 4) = 1/6, y1 = 2 / (1 + 4) = 0.4 (channel 2 does not exist).
  model_builder b(13);
  b.input("x", onnx_type::float32, {1, 2, 1, 1});
  b.node("LRN", {"x"}, {"y"},
         {attr_int("size", 2), attr_float("alpha", 2.0f), attr_float("beta", 1.0f),
          attr_float("bias", 1.0f)});
  b.output("y", onnx_type::float32);
  const auto& m = b.build();
  const qo::runtime rt =
      qo::runtime::from_bytes(std::as_bytes(std::span<const char>(m.SerializeAsString())), ".");
  std::map<std::string, qo::tensor> feeds;
  const std::vector<float> x{1.0f, 2.0f};
  feeds.emplace("x", qo::tensor::from_floats({1, 2, 1, 1}, x));
  const auto outs = rt.run(feeds);
  const auto y = outs.at("y").data<float>();
  CHECK(y[0] == doctest::Approx(1.0 / 6.0));
  CHECK(y[1] == doctest::Approx(0.4));
}

TEST_CASE("bad attributes of the N-D pools and convolutions name the problem") {
  const auto fails_with = [](const model_builder& b, const std::vector<std::int64_t>& shape,
                             const std::string& needle) {
    const auto& m = b.build();
    std::string message;
    try {
      const qo::runtime rt =
          qo::runtime::from_bytes(std::as_bytes(std::span<const char>(m.SerializeAsString())), ".");
      std::map<std::string, qo::tensor> feeds;
      feeds.emplace("x", qo::tensor::from_floats(shape, random_values(count(shape), 1)));
      (void)rt.run(feeds);
    } catch (const std::exception& e) {
      message = e.what();
    }
    CAPTURE(message);
    CHECK(message.find(needle) != std::string::npos);
  };
  {
    model_builder b(13);
    b.input("x", onnx_type::float32, {1, 1, 2, 3, 4, 5});
    b.node("MaxPool", {"x"}, {"y"}, {attr_ints("kernel_shape", {1, 1, 1, 1})});
    b.output("y", onnx_type::float32);
    fails_with(b, {1, 1, 2, 3, 4, 5}, "only 1-D, 2-D and 3-D pooling");
  }
  for (const auto& [attr, needle] : {std::pair<std::string, std::string>{
                                         "strides", "strides and dilations must be at most 2^31"},
                                     {"pads", "pads must be at most 2^31"}}) {
    // 3-D Conv: a stride or pad of 2^40 (the extent arithmetic's bound).
    const std::int64_t huge = std::int64_t{1} << 40;
    model_builder b(13);
    b.input("x", onnx_type::float32, {1, 1, 4, 4, 4});
    b.initializer("w", onnx_type::float32, {1, 1, 2, 2, 2}, std::vector<float>(8, 1.0f));
    b.node("Conv", {"x", "w"}, {"y"},
           {attr == "pads" ? attr_ints("pads", {0, 0, huge, 0, 0, 0})
                           : attr_ints("strides", {1, huge, 1})});
    b.output("y", onnx_type::float32);
    fails_with(b, {1, 1, 4, 4, 4}, needle);
  }
  {
    model_builder b(13);
    b.input("x", onnx_type::float32, {1, 1, 4, 4, 4});
    b.node("AveragePool", {"x"}, {"y"},
           {attr_ints("kernel_shape", {2, 2, 2}), attr_ints("strides", {1, 0, 1})});
    b.output("y", onnx_type::float32);
    fails_with(b, {1, 1, 4, 4, 4}, "must be positive");
  }
  {
    model_builder b(13);
    b.input("x", onnx_type::float32, {1, 2, 3, 3, 3});
    b.initializer("w", onnx_type::float32, {2, 2, 2, 2, 2}, random_values(32, 2));
    b.node("Conv", {"x", "w"}, {"y"}, {attr_ints("pads", {0, 0, 0})});
    b.output("y", onnx_type::float32);
    fails_with(b, {1, 2, 3, 3, 3}, "wrong length for a 3-D convolution");
  }
  {
    model_builder b(13);
    b.input("x", onnx_type::float32, {1, 4, 3, 3});
    b.node("LRN", {"x"}, {"y"}, {attr_int("size", 0)});
    b.output("y", onnx_type::float32);
    fails_with(b, {1, 4, 3, 3}, "size must be at least 1");
  }
  {
    model_builder b(11);
    b.input("x", onnx_type::float32, {1, 1, 2, 2});
    b.initializer("i", onnx_type::int64, {1, 1, 2, 2}, std::vector<std::int64_t>{0, 1, 2, 99});
    b.node("MaxUnpool", {"x", "i"}, {"y"},
           {attr_ints("kernel_shape", {2, 2}), attr_ints("strides", {2, 2})});
    b.output("y", onnx_type::float32);
    fails_with(b, {1, 1, 2, 2}, "index 99 at position 3 is outside the output of 16 values");
  }
  {
    // Pads of a whole kernel or more (ONNX Runtime refuses them too): pads of 2^40 used to ask
    // for an output of 2^80 values.
    const std::int64_t huge = std::int64_t{1} << 40;
    model_builder b(11);
    b.input("x", onnx_type::float32, {1, 1, 5, 5});
    b.node("AveragePool", {"x"}, {"y"},
           {attr_ints("kernel_shape", {3, 3}), attr_ints("pads", {huge, huge, huge, huge})});
    b.output("y", onnx_type::float32);
    fails_with(b, {1, 1, 5, 5},
               "pads must be smaller than kernel_shape (dimension 0: pads " + std::to_string(huge));
  }
  {
    model_builder b(11);
    b.input("x", onnx_type::float32, {1, 1, 5, 5});
    b.node("MaxPool", {"x"}, {"y"},
           {attr_ints("kernel_shape", {2, 3}), attr_ints("pads", {0, 3, 0, 0})});
    b.output("y", onnx_type::float32);
    fails_with(b, {1, 1, 5, 5}, "(dimension 1: pads 3, 0, kernel_shape 3)");
  }
  {
    // A window extent that overflows 64 bits: (2^40 - 1) * 2^40 + 1.
    const std::int64_t huge = std::int64_t{1} << 40;
    model_builder b(11);
    b.input("x", onnx_type::float32, {1, 1, 5, 5});
    b.node("MaxPool", {"x"}, {"y"},
           {attr_ints("kernel_shape", {huge, 2}), attr_ints("dilations", {huge, 1})});
    b.output("y", onnx_type::float32);
    fails_with(b, {1, 1, 5, 5}, "window extent (kernel_shape - 1) * dilations + 1 exceeds 2^31");
  }
  // 1-D / 2-D Conv and ConvTranspose: a list of the wrong length was read past its end, a
  // stride of 0 divided by zero, and pads, strides or dilations of 2^40 asked for outputs of
  // 2^44 bytes and more.
  const std::int64_t huge = std::int64_t{1} << 40;
  const auto conv_fails = [&](const char* op, const std::vector<std::int64_t>& attr_values,
                              const char* attr, const std::string& needle) {
    CAPTURE(op);
    CAPTURE(attr);
    model_builder b(11);
    b.input("x", onnx_type::float32, {1, 1, 5, 5});
    b.initializer("w", onnx_type::float32, {1, 1, 3, 3}, random_values(9, 3));
    b.node(op, {"x", "w"}, {"y"}, {attr_ints(attr, attr_values)});
    b.output("y", onnx_type::float32);
    fails_with(b, {1, 1, 5, 5}, needle);
  };
  for (const char* op : {"Conv", "ConvTranspose"}) {
    conv_fails(op, {2}, "strides", "strides has 1 values for a 2-D input (expected 2)");
    conv_fails(op, {1}, "dilations", "dilations has 1 values for a 2-D input (expected 2)");
    conv_fails(op, {0, 0}, "strides", "strides must be in [1, 2^31], got 0");
    conv_fails(op, {huge, huge}, "dilations",
               "dilations must be in [1, 2^31], got " + std::to_string(huge));
    conv_fails(op, {1, 1, 1}, "pads", "pads has 3 values for a 2-D input (expected 4)");
  }
  conv_fails("Conv", {huge, huge, huge, huge}, "pads", "pads must be in [-2^31, 2^31]");
  conv_fails("Conv", {1 << 20, 1 << 20, 1 << 20, 1 << 20}, "pads",
             "exceeds the supported maximum of 2^31 elements");
  conv_fails("ConvTranspose", {1 << 20, 1 << 20}, "strides",
             "exceeds the supported maximum of 2^31 elements");
  conv_fails("ConvTranspose", {1}, "output_padding",
             "output_padding has 1 values for a 2-D input (expected 2)");
  conv_fails("ConvTranspose", {7}, "output_shape", "output_shape has 1 values for a 2-D input");
  {
    model_builder b(11);
    b.input("x", onnx_type::float32, {1, 1, 2, 2});
    b.initializer("i", onnx_type::int64, {1, 1, 2, 2}, std::vector<std::int64_t>{0, 1, 2, 3});
    b.node("MaxUnpool", {"x", "i"}, {"y"}, {attr_ints("kernel_shape", {huge, huge})});
    b.output("y", onnx_type::float32);
    fails_with(b, {1, 1, 2, 2}, "kernel_shape and strides must be in [1, 2^31]");
  }
  {
    model_builder b(11);
    b.input("x", onnx_type::float32, {1, 1, 2, 2});
    b.initializer("i", onnx_type::int64, {1, 1, 2, 2}, std::vector<std::int64_t>{0, 1, 2, 3});
    b.node("MaxUnpool", {"x", "i"}, {"y"},
           {attr_ints("kernel_shape", {2, 2}), attr_ints("strides", {1 << 20, 1 << 20})});
    b.output("y", onnx_type::float32);
    fails_with(b, {1, 1, 2, 2}, "exceeds the supported maximum of 2^31 elements");
  }
}

namespace {

/// The message of our runtime's refusal of `m` on input x of `shape` ("" when it runs), and
/// whether ONNX Runtime refuses it too.
std::pair<std::string, bool> both_refuse(const ::onnx::ModelProto& m,
                                         const std::vector<std::int64_t>& shape) {
  const std::vector<float> x = random_values(count(shape), 3);
  std::string ours;
  try {
    const qo::runtime rt =
        qo::runtime::from_bytes(std::as_bytes(std::span<const char>(m.SerializeAsString())), ".");
    std::map<std::string, qo::tensor> feeds;
    feeds.emplace("x", qo::tensor::from_floats(shape, x));
    (void)rt.run(feeds);
  } catch (const std::exception& e) {
    ours = e.what();
  }
  bool ort_refused = false;
  try {
    (void)run_ort(m, {npy_array::from(x, std::vector<std::size_t>(shape.begin(), shape.end()))});
  } catch (const std::runtime_error&) {
    ort_refused = true;
  }
  return {ours, ort_refused};
}

}  // namespace

/// The refusals that say "as ONNX Runtime" are checked against it: pads of a whole kernel (one
/// less runs, and matches ORT), and an attribute of the wrong type (the runtime read it as 0).
TEST_CASE("pads of a whole kernel and a wrongly typed attribute: refused, as ONNX Runtime does") {
  one_node ok{.opset = 11,
              .op = "MaxPool",
              .x_shape = {1, 1, 5, 5},
              .attrs = {attr_ints("kernel_shape", {2, 3}), attr_ints("pads", {0, 2, 0, 0})}};
  ok.check();
  {
    model_builder b(11);
    b.input("x", onnx_type::float32, {1, 1, 5, 5});
    b.node("MaxPool", {"x"}, {"y"},
           {attr_ints("kernel_shape", {2, 3}), attr_ints("pads", {0, 3, 0, 0})});
    b.output("y", onnx_type::float32);
    const auto [ours, ort_refused] = both_refuse(b.build(), {1, 1, 5, 5});
    CHECK(ort_refused);
    CHECK(ours.find("pads must be smaller than kernel_shape") != std::string::npos);
  }
  {
    model_builder b(13);
    b.input("x", onnx_type::float32, {2, 3, 4});
    b.node("Flatten", {"x"}, {"y"}, {attr_ints("axis", {2})});
    b.output("y", onnx_type::float32);
    const auto [ours, ort_refused] = both_refuse(b.build(), {2, 3, 4});
    CHECK(ort_refused);
    CHECK(ours.find("attribute 'axis' must be an int") != std::string::npos);
  }
}
