// SPDX-License-Identifier: MIT
// Malformed attributes and inputs of the runtime's shape, normalisation and resize operators
// (runtime/ops_shape.cpp, ops_norm.cpp, ops_resize.cpp) are refused by name before anything is
// allocated or copied. Each case below was a defect found by bench/onnx/mutation_sweep.py --ops
// under ASan + UBSan (docs/bench/robustness.md, session 34): a Transpose perm naming an axis
// twice read past its input, Split copied sizes past the axis before checking their sum,
// Pad / Tile / Expand / ConstantOfShape / Range sized outputs of 2^40 elements and more (an
// allocation failure or a 20 s fill), Range divided by a zero delta, DepthToSpace multiplied
// blocksize 2^40 by itself, LayerNormalization took broadcast strides of a scale of higher rank
// than the normalised shape and read a bias it never checked, Softmax offset a null pointer on
// an empty input, and Resize converted an infinite or NaN output size or source coordinate (a
// NaN roi, sizes for an empty dimension) to an integer. Valid
// inputs next to each bound still run (hand-derived expected values).
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <doctest/doctest.h>

#include <quark/onnx/runtime.hpp>

#include "io_wire.hpp"
#include "runtime_test_util.hpp"

namespace w = io_wire;
using namespace runtime_test;

namespace {

constexpr int f32_type = 1, i64_type = 7;
constexpr std::int64_t huge = std::int64_t{1} << 40;

/// One node named "op" reading x (float) and the given int64 initializers, writing y.
runtime one_node(std::string_view op, std::initializer_list<std::int64_t> xdims,
                 std::initializer_list<std::string_view> inputs, const std::vector<w::msg>& inits,
                 std::initializer_list<w::msg> attrs = {}, std::int64_t opset = 13,
                 std::initializer_list<std::string_view> outputs = {"y"}) {
  w::graph g;
  g.add_input(w::value_info("x", f32_type, xdims));
  for (const auto& t : inits)
    g.add_initializer(t);
  for (const auto o : outputs)
    g.add_output(w::value_info(o, f32_type, {}, false));
  g.add_node(w::node(op, inputs, outputs, "op", attrs));
  return load(w::model(g, 8, {{"", opset}}));
}

std::map<std::string, tensor> feed_x(shape_t shape) {
  std::size_t n = 1;
  for (const auto d : shape)
    n *= static_cast<std::size_t>(d);
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i)
    v[i] = static_cast<float>(i);
  return {{"x", f32(std::move(shape), v)}};
}

w::msg ints(std::string_view name, std::initializer_list<std::int64_t> dims,
            const std::vector<std::int64_t>& v) {
  return init(name, i64_type, dims, v);
}

}  // namespace

TEST_CASE("Transpose refuses a perm that names an axis twice") {
  const auto err = run_error(
      one_node("Transpose", {2, 3}, {"x"}, {}, {w::attr_ints("perm", {0, 0})}), feed_x({2, 3}));
  CHECK(has(err, "'op' (Transpose)"));
  CHECK(has(err, "perm names axis 0 twice"));
  const auto y = one_node("Transpose", {2, 3}, {"x"}, {}, {w::attr_ints("perm", {1, 0})})
                     .run(feed_x({2, 3}))
                     .at("y");
  CHECK(y.shape() == shape_t{3, 2});
  CHECK(values_of<float>(y) == std::vector<float>{0, 3, 1, 4, 2, 5});
}

TEST_CASE("Split checks its sizes before copying") {
  const auto split = [](std::vector<std::int64_t> sizes, std::int64_t axis) {
    return one_node("Split", {2, 3}, {"x", "s"}, {ints("s", {2}, sizes)},
                    {w::attr_int("axis", axis)}, 13, {"y", "z"});
  };
  const auto past = run_error(split({2, 2}, 0), feed_x({2, 3}));
  CHECK(has(past, "'op' (Split)"));
  CHECK(has(past, "split sizes do not add up to the axis length"));  // 2 + 2 on an axis of 2
  CHECK(has(run_error(split({4, -1}, 1), feed_x({2, 3})), "split size 4 is outside [0, 3]"));
  CHECK(has(run_error(split({-1, 4}, 1), feed_x({2, 3})), "split size -1 is outside [0, 3]"));
  const auto out = split({1, 2}, 1).run(feed_x({2, 3}));
  CHECK(values_of<float>(out.at("y")) == std::vector<float>{0, 3});
  CHECK(values_of<float>(out.at("z")) == std::vector<float>{1, 2, 4, 5});
  const auto zero =
      one_node("Split", {2, 3}, {"x"}, {}, {w::attr_int("axis", 1), w::attr_int("num_outputs", 0)},
               18, {"y", "z"});
  CHECK(has(run_error(zero, feed_x({2, 3})), "num_outputs must be positive, got 0"));
  const auto many =
      one_node("Split", {2, 3}, {"x"}, {},
               {w::attr_int("axis", 1), w::attr_int("num_outputs", huge)}, 18, {"y", "z"});
  CHECK(
      has(run_error(many, feed_x({2, 3})), "num_outputs 1099511627776 differs from the 2 outputs"));
}

TEST_CASE("Pad, Tile, Expand and ConstantOfShape refuse outputs beyond 2^31 elements") {
  const auto pad = [](std::vector<std::int64_t> pads) {
    return one_node("Pad", {2, 2}, {"x", "p"}, {ints("p", {4}, pads)});
  };
  CHECK(has(run_error(pad({0, huge, 0, 0}), feed_x({2, 2})), "pads must be within [-2^31, 2^31]"));
  // The lowest int64 (whose absolute value does not exist) is refused the same way.
  CHECK(has(run_error(pad({std::numeric_limits<std::int64_t>::min(), 0, 0, 0}), feed_x({2, 2})),
            "pads must be within [-2^31, 2^31]"));
  CHECK(has(run_error(pad({1 << 20, 1 << 20, 0, 0}), feed_x({2, 2})),
            "exceeds the supported maximum of 2^31 elements"));
  CHECK(pad({1, 0, 0, 1}).run(feed_x({2, 2})).at("y").shape() == shape_t{3, 3});

  const auto tile = [](std::vector<std::int64_t> reps) {
    return one_node("Tile", {2, 2}, {"x", "r"}, {ints("r", {2}, reps)});
  };
  CHECK(has(run_error(tile({huge, 1}), feed_x({2, 2})), "repeats must be in [0, 2^31]"));
  CHECK(has(run_error(tile({-1, 1}), feed_x({2, 2})), "repeats must be in [0, 2^31]"));
  CHECK(has(run_error(tile({1 << 20, 1 << 20}), feed_x({2, 2})), "exceeds the supported maximum"));
  CHECK(values_of<float>(tile({1, 2}).run(feed_x({2, 2})).at("y")) ==
        std::vector<float>{0, 1, 0, 1, 2, 3, 2, 3});

  const auto expand = one_node("Expand", {1, 1}, {"x", "s"}, {ints("s", {2}, {huge, 1 << 4})});
  CHECK(has(run_error(expand, feed_x({1, 1})), "exceeds the supported maximum"));

  const auto cos = [](std::vector<std::int64_t> shape, bool with_value = false) {
    w::graph g;
    g.add_input(w::value_info("x", f32_type, {1}));
    g.add_initializer(ints("s", {static_cast<std::int64_t>(shape.size())}, shape));
    g.add_output(w::value_info("y", f32_type, {}, false));
    if (with_value) {
      g.add_node(w::node("ConstantOfShape", {"s"}, {"y"}, "op",
                         {w::attr_tensor("value", w::float_tensor("v", {1}, {2.5f}))}));
    } else {
      g.add_node(w::node("ConstantOfShape", {"s"}, {"y"}, "op"));
    }
    return load(w::model(g));
  };
  CHECK(has(run_error(cos({huge, 2}), feed_x({1})), "exceeds the supported maximum"));
  CHECK(has(run_error(cos({3, -2}), feed_x({1})), "negative dimension in [3,-2]"));
  CHECK(values_of<float>(cos({2, 3}).run(feed_x({1})).at("y")) == std::vector<float>(6, 0.0f));
  // The value fills by doubling copies: 1, 2, 4, 8, then the last 3 of 11 (a partial copy).
  CHECK(values_of<float>(cos({11}, true).run(feed_x({1})).at("y")) == std::vector<float>(11, 2.5f));
}

TEST_CASE("Range refuses a zero or NaN delta and more than 2^31 values") {
  const auto range = [](float start, float limit, float delta) {
    w::graph g;
    g.add_input(w::value_info("x", f32_type, {1}));
    g.add_initializer(w::float_tensor("s", {}, {start}));
    g.add_initializer(w::float_tensor("l", {}, {limit}));
    g.add_initializer(w::float_tensor("d", {}, {delta}));
    g.add_output(w::value_info("y", f32_type, {}, false));
    g.add_node(w::node("Range", {"s", "l", "d"}, {"y"}, "op"));
    return load(w::model(g, 8, {{"", 11}}));
  };
  CHECK(has(run_error(range(0.0f, 4.0f, 0.0f), feed_x({1})), "delta must be a non-zero number"));
  CHECK(has(run_error(range(0.0f, 4.0f, std::numeric_limits<float>::quiet_NaN()), feed_x({1})),
            "delta must be a non-zero number"));
  CHECK(has(run_error(range(0.0f, 1e12f, 1.0f), feed_x({1})), "more than 2^31 values"));
  CHECK(has(run_error(range(0.0f, std::numeric_limits<float>::infinity(), 1.0f), feed_x({1})),
            "more than 2^31 values"));
  CHECK(values_of<float>(range(1.0f, 2.0f, 0.25f).run(feed_x({1})).at("y")) ==
        std::vector<float>{1.0f, 1.25f, 1.5f, 1.75f});
  CHECK(range(4.0f, 0.0f, 1.0f).run(feed_x({1})).at("y").size() == 0);  // empty, not an error
}

TEST_CASE("Range over int64 with a delta near the type's range computes without overflow") {
  // The last element, s + 3 * d, fits int64, but 3 * d alone does not: a signed product
  // overflowed (undefined behaviour); the runtime now computes modulo 2^64, exact here.
  w::graph g;
  g.add_input(w::value_info("x", f32_type, {1}));
  const std::int64_t s = std::numeric_limits<std::int64_t>::min() + 5;
  const std::int64_t d = std::int64_t{1} << 62;
  g.add_initializer(ints("s", {}, {s}));
  g.add_initializer(ints("l", {}, {std::numeric_limits<std::int64_t>::max()}));
  g.add_initializer(ints("d", {}, {d}));
  g.add_output(w::value_info("y", i64_type, {}, false));
  g.add_node(w::node("Range", {"s", "l", "d"}, {"y"}, "op"));
  const auto y = load(w::model(g, 8, {{"", 11}})).run(feed_x({1})).at("y");
  // ceil((2^63 - 1 - (-2^63 + 5)) / 2^62) = ceil((2^64 - 6) / 2^62) = 4 values.
  CHECK(values_of<std::int64_t>(y) ==
        std::vector<std::int64_t>{s, -(std::int64_t{1} << 62) + 5, 5, (std::int64_t{1} << 62) + 5});
}

TEST_CASE("DepthToSpace and SpaceToDepth refuse a blocksize beyond 2^31") {
  for (const char* op : {"DepthToSpace", "SpaceToDepth"}) {
    CAPTURE(std::string(op));
    const auto err =
        run_error(one_node(op, {1, 4, 2, 2}, {"x"}, {}, {w::attr_int("blocksize", huge)}),
                  feed_x({1, 4, 2, 2}));
    CHECK(has(err, "blocksize must be in [1, 2^31]"));
  }
  const auto y = one_node("DepthToSpace", {1, 4, 1, 1}, {"x"}, {}, {w::attr_int("blocksize", 2)})
                     .run(feed_x({1, 4, 1, 1}))
                     .at("y");
  CHECK(y.shape() == shape_t{1, 1, 2, 2});
  CHECK(values_of<float>(y) == std::vector<float>{0, 1, 2, 3});
}

TEST_CASE("LayerNormalization checks scale and bias against the normalised shape") {
  const auto ln = [](std::initializer_list<std::int64_t> sdims, std::vector<float> sv,
                     std::initializer_list<std::int64_t> bdims, std::vector<float> bv) {
    w::graph g;
    g.add_input(w::value_info("x", f32_type, {2, 3}));
    g.add_initializer(init("s", f32_type, sdims, sv));
    g.add_initializer(init("b", f32_type, bdims, bv));
    g.add_output(w::value_info("y", f32_type, {}, false));
    g.add_node(w::node("LayerNormalization", {"x", "s", "b"}, {"y"}, "op",
                       {w::attr_float("epsilon", 0.0f)}));
    return load(w::model(g, 8, {{"", 17}}));
  };
  const auto rank_up = run_error(ln({1, 1, 3}, {1, 1, 1}, {3}, {0, 0, 0}), feed_x({2, 3}));
  CHECK(has(rank_up, "'op' (LayerNormalization)"));
  CHECK(has(rank_up, "scale does not broadcast to [3]"));
  // A bias of 0 values (broadcast's own message: [0] and [3] do not broadcast).
  const auto empty_bias = run_error(ln({3}, {1, 1, 1}, {0}, {}), feed_x({2, 3}));
  CHECK(has(empty_bias, "'op' (LayerNormalization)"));
  CHECK(has(empty_bias, "broadcast"));
  // Rows [0, 1, 2] and [3, 4, 5]: mean 1 / 4, variance 2/3, so (x - mean) * sqrt(3/2) * 2 + 1.
  const auto y = values_of<float>(ln({3}, {2, 2, 2}, {1}, {1}).run(feed_x({2, 3})).at("y"));
  const float k = 2.0f * std::sqrt(1.5f);
  REQUIRE(y.size() == 6);
  for (std::size_t i = 0; i < 6; ++i)
    CHECK(static_cast<double>(y[i]) ==
          doctest::Approx(
              static_cast<double>(static_cast<int>(i % 3) - 1) * static_cast<double>(k) + 1.0));
}

TEST_CASE("Softmax and LogSoftmax of an empty input are empty") {
  for (const char* op : {"Softmax", "LogSoftmax"}) {
    CAPTURE(std::string(op));
    const auto y = one_node(op, {0, 3}, {"x"}, {}, {w::attr_int("axis", 0)}).run(feed_x({0, 3}));
    CHECK(y.at("y").shape() == shape_t{0, 3});
  }
}

TEST_CASE("Resize refuses infinite, NaN, zero and oversized scales") {
  const auto resize = [](float sh, float sw) {
    w::graph g;
    g.add_input(w::value_info("x", f32_type, {1, 1, 2, 2}));
    g.add_initializer(w::float_tensor("roi", {0}, {}));
    g.add_initializer(w::float_tensor("sc", {4}, {1.0f, 1.0f, sh, sw}));
    g.add_output(w::value_info("y", f32_type, {}, false));
    g.add_node(w::node("Resize", {"x", "roi", "sc"}, {"y"}, "op"));
    return load(w::model(g));
  };
  for (const float bad : {std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN(), 0.0f, -2.0f, 1e12f}) {
    CAPTURE(bad);
    const auto err = run_error(resize(bad, 1.0f), feed_x({1, 1, 2, 2}));
    CHECK(has(err, "'op' (Resize)"));
    CHECK(has(err, "scales must be positive and give at most 2^31 per dimension"));
  }
  CHECK(has(run_error(resize(40000.0f, 40000.0f), feed_x({1, 1, 2, 2})),
            "exceeds the supported maximum of 2^31 elements"));
  // A NaN roi (tf_crop_and_resize reads it) and sizes for an empty input dimension give
  // non-finite source coordinates, which were converted to integers.
  {
    w::graph g;
    g.add_input(w::value_info("x", f32_type, {1, 1, 2, 2}));
    g.add_initializer(w::float_tensor(
        "roi", {8}, {0, 0, 0, 0, 1, 1, std::numeric_limits<float>::quiet_NaN(), 1}));
    g.add_initializer(w::float_tensor("sc", {4}, {1.0f, 1.0f, 2.0f, 2.0f}));
    g.add_output(w::value_info("y", f32_type, {}, false));
    g.add_node(w::node("Resize", {"x", "roi", "sc"}, {"y"}, "op",
                       {w::attr_string("coordinate_transformation_mode", "tf_crop_and_resize")}));
    CHECK(has(run_error(load(w::model(g)), feed_x({1, 1, 2, 2})), "roi or scales not finite"));
  }
  {
    w::graph g;
    g.add_input(w::value_info("x", f32_type, {1, 1, 2, 0}));
    g.add_initializer(w::float_tensor("roi", {0}, {}));
    g.add_initializer(w::float_tensor("sc", {0}, {}));
    g.add_initializer(ints("sz", {4}, {1, 1, 2, 3}));
    g.add_output(w::value_info("y", f32_type, {}, false));
    g.add_node(w::node("Resize", {"x", "roi", "sc", "sz"}, {"y"}, "op"));
    CHECK(has(run_error(load(w::model(g)), feed_x({1, 1, 2, 0})),
              "cannot resize an empty dimension (3) to 3"));
  }
  // Sizes instead of scales: a negative one, and one past the element bound.
  const auto sized = [](std::int64_t h) {
    w::graph g;
    g.add_input(w::value_info("x", f32_type, {1, 1, 2, 2}));
    g.add_initializer(w::float_tensor("roi", {0}, {}));
    g.add_initializer(w::float_tensor("sc", {0}, {}));
    g.add_initializer(ints("sz", {4}, {1, 1, h, 2}));
    g.add_output(w::value_info("y", f32_type, {}, false));
    g.add_node(w::node("Resize", {"x", "roi", "sc", "sz"}, {"y"}, "op"));
    return load(w::model(g));
  };
  CHECK(has(run_error(sized(-3), feed_x({1, 1, 2, 2})), "negative output size -3"));
  CHECK(has(run_error(sized(huge), feed_x({1, 1, 2, 2})), "exceeds the supported maximum"));
  CHECK(sized(4).run(feed_x({1, 1, 2, 2})).at("y").shape() == shape_t{1, 1, 4, 2});
  // Nearest (the default mode), scale 2: each value repeated in a 2 x 2 block.
  CHECK(values_of<float>(resize(2.0f, 2.0f).run(feed_x({1, 1, 2, 2})).at("y")) ==
        std::vector<float>{0, 0, 1, 1, 0, 0, 1, 1, 2, 2, 3, 3, 2, 2, 3, 3});
}
