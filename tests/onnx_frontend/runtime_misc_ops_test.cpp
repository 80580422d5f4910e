// SPDX-License-Identifier: MIT
// Hand-derived cases for the runtime's miscellaneous operators (runtime/ops_misc.cpp): Dropout
// refuses training mode and is the identity otherwise, Mod's sign rules and division by zero,
// BitShift dropping the bits shifted out. Models are written with the wire helper.
#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <doctest/doctest.h>

#include <quark/onnx/runtime.hpp>

#include "io_wire.hpp"
#include "runtime_test_util.hpp"

namespace w = io_wire;
using namespace runtime_test;

namespace {

/// z = op(x, y) on elem_type[n] inputs, one node named "op".
runtime binary_model(std::string_view op, int elem_type, std::int64_t n,
                     std::initializer_list<w::msg> attrs = {}, std::int64_t opset = 13) {
  w::graph g;
  g.add_input(w::value_info("x", elem_type, {n}));
  g.add_input(w::value_info("y", elem_type, {-1}));
  g.add_output(w::value_info("z", elem_type, {n}));
  g.add_node(w::node(op, {"x", "y"}, {"z"}, "op", attrs));
  return load(w::model(g, 8, {{"", opset}}));
}

/// Dropout(x, r, t) -> (y, mask), opset 13, node "drop".
runtime dropout13() {
  w::graph g;
  g.add_input(w::value_info("x", 1, {4}));
  g.add_input(w::value_info("r", 1, {}));
  g.add_input(w::value_info("t", 9, {}));
  g.add_output(w::value_info("y", 1, {4}));
  g.add_output(w::value_info("mask", 9, {4}));
  g.add_node(w::node("Dropout", {"x", "r", "t"}, {"y", "mask"}, "drop"));
  return load(w::model(g));
}

std::map<std::string, tensor> dropout_feeds(float ratio, bool training) {
  std::map<std::string, tensor> f;
  f["x"] = tensor::from_floats({4}, std::vector<float>{-1.5f, 0.0f, 2.0f, 3.25f});
  f["r"] = tensor::from_floats({}, std::vector<float>{ratio});
  f["t"] = make<bool>(dtype_id::boolean, {}, {training});
  return f;
}

}  // namespace

TEST_CASE("Dropout in training mode with a non-zero ratio fails naming the node") {
  const runtime rt = dropout13();
  std::string id;
  const std::string err = run_error(rt, dropout_feeds(0.5f, true), &id);
  CHECK(id == "quark.onnx.runtime");
  CHECK(err.find("node 'drop' (Dropout)") != std::string::npos);
  CHECK(err.find("training mode") != std::string::npos);
}

TEST_CASE("Dropout is the identity with an all-true mask in inference or with ratio 0") {
  const runtime rt = dropout13();
  for (const auto& [ratio, training] : {std::pair{0.5f, false}, std::pair{0.0f, true}}) {
    const auto out = rt.run(dropout_feeds(ratio, training));
    CHECK(values_of<float>(out.at("y")) == std::vector<float>{-1.5f, 0.0f, 2.0f, 3.25f});
    REQUIRE(out.at("mask").type() == dtype_id::boolean);
    CHECK(values_of<bool>(out.at("mask")) == std::vector<bool>{true, true, true, true});
  }
}

TEST_CASE("Dropout before opset 7 infers whatever is_test says") {
  auto model = [](std::initializer_list<w::msg> attrs) {
    w::graph g;
    g.add_input(w::value_info("x", 1, {2}));
    g.add_output(w::value_info("y", 1, {2}));
    g.add_node(w::node("Dropout", {"x"}, {"y"}, "old", attrs));
    return load(w::model(g, 3, {{"", 6}}));
  };
  std::map<std::string, tensor> feeds;
  feeds["x"] = tensor::from_floats({2}, std::vector<float>{1.0f, -2.0f});
  // The calibration runtime always infers (is_test 0 is the attribute's default).
  for (std::int64_t is_test : {0, 1}) {
    const auto out = model({w::attr_int("is_test", is_test)}).run(feeds);
    CHECK(values_of<float>(out.at("y")) == std::vector<float>{1.0f, -2.0f});
  }
  CHECK(values_of<float>(model({}).run(feeds).at("y")) == std::vector<float>{1.0f, -2.0f});
}

TEST_CASE("integer Mod by zero fails naming the node") {
  for (std::int64_t fmod : {0, 1}) {
    const runtime rt = binary_model("Mod", 6, 2, {w::attr_int("fmod", fmod)});
    std::map<std::string, tensor> feeds;
    feeds["x"] = make<std::int32_t>(dtype_id::int32, {2}, {5, 6});
    feeds["y"] = make<std::int32_t>(dtype_id::int32, {2}, {2, 0});
    const std::string err = run_error(rt, feeds);
    CHECK(err.find("node 'op' (Mod)") != std::string::npos);
    CHECK(err.find("by zero") != std::string::npos);
  }
}

TEST_CASE("Mod: the sign of the divisor (integers), the sign of the dividend with fmod") {
  // -7 = 3 * -3 + 2 (floor division) and -7 = 3 * -2 - 1 (truncating division), and so on.
  const std::vector<std::int32_t> x{-7, 7, -7, 7, 6, 0};
  const std::vector<std::int32_t> y{3, 3, -3, -3, -3, -5};
  const std::vector<std::int32_t> python{2, 1, -1, -2, 0, 0};
  const std::vector<std::int32_t> c_fmod{-1, 1, -1, 1, 0, 0};
  auto feeds_int = [&] {
    std::map<std::string, tensor> f;
    f["x"] = make(dtype_id::int32, {6}, x);
    f["y"] = make(dtype_id::int32, {6}, y);
    return f;
  };
  CHECK(values_of<std::int32_t>(binary_model("Mod", 6, 6).run(feeds_int()).at("z")) == python);
  CHECK(values_of<std::int32_t>(
            binary_model("Mod", 6, 6, {w::attr_int("fmod", 1)}).run(feeds_int()).at("z")) ==
        c_fmod);

  std::map<std::string, tensor> ff;
  ff["x"] = tensor::from_floats({6}, std::vector<float>{-7, 7, -7, 7, 6, 0});
  ff["y"] = tensor::from_floats({6}, std::vector<float>{3, 3, -3, -3, -3, -5});
  const auto got =
      values_of<float>(binary_model("Mod", 1, 6, {w::attr_int("fmod", 1)}).run(ff).at("z"));
  CHECK(got == std::vector<float>{-1, 1, -1, 1, 0, 0});
  // Floating-point Mod requires fmod=1.
  CHECK(run_error(binary_model("Mod", 1, 6), ff).find("fmod=1") != std::string::npos);
}

TEST_CASE("Mod broadcasts and handles the int8 lowest value divided by -1") {
  const runtime rt = binary_model("Mod", 3, 3);
  std::map<std::string, tensor> feeds;
  feeds["x"] = make<std::int8_t>(dtype_id::int8, {3}, {-128, 127, -5});
  feeds["y"] = make<std::int8_t>(dtype_id::int8, {1}, {-1});
  CHECK(values_of<std::int8_t>(rt.run(feeds).at("z")) == std::vector<std::int8_t>{0, 0, 0});
  feeds["y"] = make<std::int8_t>(dtype_id::int8, {1}, {4});
  CHECK(values_of<std::int8_t>(rt.run(feeds).at("z")) == std::vector<std::int8_t>{0, 3, 3});
}

TEST_CASE("BitShift on uint8 drops the bits shifted out") {
  std::map<std::string, tensor> feeds;
  feeds["x"] = make<std::uint8_t>(dtype_id::uint8, {5}, {255, 1, 128, 3, 0x81});
  feeds["y"] = make<std::uint8_t>(dtype_id::uint8, {5}, {1, 7, 1, 8, 4});
  const auto left =
      binary_model("BitShift", 2, 5, {w::attr_string("direction", "LEFT")}, 11).run(feeds);
  CHECK(values_of<std::uint8_t>(left.at("z")) == std::vector<std::uint8_t>{254, 128, 0, 0, 0x10});
  const auto right =
      binary_model("BitShift", 2, 5, {w::attr_string("direction", "RIGHT")}, 11).run(feeds);
  CHECK(values_of<std::uint8_t>(right.at("z")) == std::vector<std::uint8_t>{127, 0, 64, 0, 0x08});
  // A shift amount broadcast from one element; a signed input is refused.
  feeds["y"] = make<std::uint8_t>(dtype_id::uint8, {1}, {2});
  const auto one =
      binary_model("BitShift", 2, 5, {w::attr_string("direction", "LEFT")}, 11).run(feeds);
  CHECK(values_of<std::uint8_t>(one.at("z")) == std::vector<std::uint8_t>{252, 4, 0, 12, 0x04});
  feeds["x"] = make<std::int8_t>(dtype_id::int8, {5}, {1, 2, 3, 4, 5});
  feeds["y"] = make<std::int8_t>(dtype_id::int8, {1}, {1});
  CHECK(run_error(binary_model("BitShift", 3, 5, {w::attr_string("direction", "LEFT")}, 11), feeds)
            .find("not supported") != std::string::npos);
}

namespace {

/// x [2, 3, 4] -> Flatten (node 'flat', the given attributes) -> y, opset 13.
runtime flatten_model(std::initializer_list<w::msg> attrs) {
  w::graph g;
  g.add_input(w::value_info("x", 1, {2, 3, 4}));
  g.add_output(w::value_info("y", 1, {}));
  g.add_node(w::node("Flatten", {"x"}, {"y"}, "flat", attrs));
  return load(w::model(g, 8, {{"", 13}}));
}

std::map<std::string, tensor> flatten_feeds() {
  std::map<std::string, tensor> feeds;
  feeds["x"] = tensor::from_floats({2, 3, 4}, std::vector<float>(24, 1.0f));
  return feeds;
}

}  // namespace

TEST_CASE("an attribute of the wrong type is refused naming the node and the attribute") {
  // An int given as a list (or as a string) was read as 0: Flatten ran with axis 0.
  for (const w::msg& a : {w::attr_ints("axis", {2}), w::attr_string("axis", "2")}) {
    std::string id;
    const std::string err = run_error(flatten_model({a}), flatten_feeds(), &id);
    CHECK(id == "quark.onnx.load");
    CHECK(err.find("node 'flat' (Flatten)") != std::string::npos);
    CHECK(err.find("attribute 'axis' must be an int") != std::string::npos);
  }
  // The right type runs: axis 2 of [2, 3, 4] gives [6, 4].
  CHECK(flatten_model({w::attr_int("axis", 2)}).run(flatten_feeds()).at("y").shape() ==
        shape_t{6, 4});
}

TEST_CASE("an attribute without its type field (old exporters) is read from its value") {
  w::msg untyped;  // AttributeProto with name and i only
  untyped.bytes(w::attr_f::name, "axis").i64(w::attr_f::i, 2);
  CHECK(flatten_model({untyped}).run(flatten_feeds()).at("y").shape() == shape_t{6, 4});
}
