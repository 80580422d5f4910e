// SPDX-License-Identifier: MIT
// The runtime's Loop and Scan (runtime/ops_control.cpp) beyond the ONNX conformance data: every
// combination of Loop's M and cond (cond_out ends the loop in each), zero iterations, bodies that
// read the enclosing scopes, Loop and If nested in a Loop body, Scan's axes and directions (opset
// 9+ and the batch form of opset 8), the observer seeing body values once per iteration, and the
// errors of malformed bodies and inputs, each naming its culprit. Models are written with the
// wire helper; every expected value is worked out by hand in the comments.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <doctest/doctest.h>

#include <quark/onnx/calib_data.hpp>
#include <quark/onnx/model.hpp>
#include <quark/onnx/presets.hpp>
#include <quark/onnx/quantizer.hpp>
#include <quark/onnx/runtime.hpp>

#include "io_wire.hpp"
#include "runtime_test_util.hpp"

namespace w = io_wire;
using namespace runtime_test;

namespace {

constexpr int FLOAT = 1, INT64 = 7, BOOL = 9;

tensor boolean(shape_t shape, const std::vector<bool>& v) {
  tensor t(dtype_id::boolean, std::move(shape));
  REQUIRE(t.size() == v.size());
  for (std::size_t i = 0; i < v.size(); ++i)
    t.data<bool>()[i] = v[i];
  return t;
}

tensor scalar_i64(std::int64_t v) {
  return i64({}, {v});
}

/// Counts how often each name is observed.
struct counter {
  std::map<std::string, int> seen;
  std::map<std::string, tensor, std::less<>> last;
  quark::onnx::value_observer observer() {
    return [this](std::string_view name, const tensor& t) {
      ++seen[std::string(name)];
      last[std::string(name)] = t;
    };
  }
};

// ---- Loop bodies ------------------------------------------------------------------------------

/// (i, c_in, s_in [1]) -> (c_out = c_in, s_out = s_in + float(i), e = s_out * step), where
/// `step` is a value of the enclosing graph.
w::graph accumulate_body() {
  w::graph b;
  b.add_input(w::value_info("i", INT64, {}));
  b.add_input(w::value_info("c_in", BOOL, {}));
  b.add_input(w::value_info("s_in", FLOAT, {1}));
  b.add_output(w::value_info("c_out", BOOL, {}));
  b.add_output(w::value_info("s_out", FLOAT, {1}));
  b.add_output(w::value_info("e", FLOAT, {1}));
  b.add_node(w::node("Identity", {"c_in"}, {"c_out"}, "keep_going"));
  b.add_node(w::node("Cast", {"i"}, {"i_f"}, "cast_i", {w::attr_int("to", FLOAT)}));
  b.add_node(w::node("Add", {"s_in", "i_f"}, {"s_out"}, "add_i"));
  b.add_node(w::node("Mul", {"s_out", "step"}, {"e"}, "times_step"));
  return b;
}

/// Loop(M, "", s0) with accumulate_body: outputs s_final [1], es [n, 1].
runtime accumulate_loop(std::int64_t opset) {
  w::graph g;
  g.add_input(w::value_info("M", INT64, {}));
  g.add_input(w::value_info("s0", FLOAT, {1}));
  g.add_input(w::value_info("step", FLOAT, {1}));
  g.add_output(w::value_info("s_final", FLOAT, {1}));
  g.add_output(w::value_info("es", FLOAT, {-1, 1}));
  g.add_node(w::node("Loop", {"M", "", "s0"}, {"s_final", "es"}, "loop",
                     {w::attr_graph("body", accumulate_body().m)}));
  return load(w::model(g, 8, {{"", opset}}));
}

/// (i, c_in, s_in [1]) -> (c_out = s_out < 5, s_out = s_in + 1, i): counts up to 5, returning
/// the iteration numbers as its scan output (a formal input returned as it is).
w::graph count_to_five_body() {
  w::graph b;
  b.add_input(w::value_info("i", INT64, {}));
  b.add_input(w::value_info("c_in", BOOL, {}));
  b.add_input(w::value_info("s_in", FLOAT, {1}));
  b.add_output(w::value_info("c_out", BOOL, {1}));
  b.add_output(w::value_info("s_out", FLOAT, {1}));
  b.add_output(w::value_info("i", INT64, {}));
  b.add_initializer(init<float>("one", FLOAT, {}, {1.0f}));
  b.add_initializer(init<float>("five", FLOAT, {}, {5.0f}));
  b.add_node(w::node("Add", {"s_in", "one"}, {"s_out"}, "plus_one"));
  b.add_node(w::node("Less", {"s_out", "five"}, {"c_out"}, "below_five"));
  return b;
}

/// Loop(M?, cond?, s0) with count_to_five_body; `m` and `cond` say which inputs are given.
runtime count_loop(bool m, bool cond) {
  w::graph g;
  if (m)
    g.add_input(w::value_info("M", INT64, {}));
  if (cond)
    g.add_input(w::value_info("cond", BOOL, {}));
  g.add_input(w::value_info("s0", FLOAT, {1}));
  g.add_output(w::value_info("s_final", FLOAT, {1}));
  g.add_output(w::value_info("is", INT64, {-1}));
  g.add_node(w::node("Loop", {m ? "M" : "", cond ? "cond" : "", "s0"}, {"s_final", "is"}, "loop",
                     {w::attr_graph("body", count_to_five_body().m)}));
  return load(w::model(g));
}

}  // namespace

TEST_CASE("Loop with M only: carried value, scan output and an outer-scope value") {
  for (std::int64_t opset : {11, 13, 16}) {
    CAPTURE(opset);
    const runtime rt = accumulate_loop(opset);
    // M = 4, s0 = 10: s = 10 + 0 = 10, + 1 = 11, + 2 = 13, + 3 = 16; e = 2 s = 20, 22, 26, 32.
    counter obs;
    const auto out = rt.run({{"M", scalar_i64(4)}, {"s0", f32({1}, {10})}, {"step", f32({1}, {2})}},
                            obs.observer());
    CHECK(values_of(out.at("s_final")) == std::vector<float>{16});
    CHECK(out.at("es").shape() == shape_t{4, 1});
    CHECK(values_of(out.at("es")) == std::vector<float>{20, 22, 26, 32});
    // Body values (formal inputs included) are observed once per iteration; the Loop's outputs
    // once.
    CHECK(obs.seen["i"] == 4);
    CHECK(obs.seen["s_in"] == 4);
    CHECK(obs.seen["s_out"] == 4);
    CHECK(obs.seen["e"] == 4);
    CHECK(obs.seen["es"] == 1);
    CHECK(values_of<std::int64_t>(obs.last.at("i")) == std::vector<std::int64_t>{3});
    CHECK(obs.last.at("i").shape() == shape_t{});
  }
}

TEST_CASE("Loop with zero iterations returns its inputs and empty scan outputs") {
  const runtime rt = accumulate_loop(13);
  // M = 0 or negative: i < M fails at once. The body declares e as float [1], so es is [0, 1].
  for (std::int64_t m : {0, -3}) {
    CAPTURE(m);
    const auto out =
        rt.run({{"M", scalar_i64(m)}, {"s0", f32({1}, {10})}, {"step", f32({1}, {2})}});
    CHECK(values_of(out.at("s_final")) == std::vector<float>{10});
    CHECK(out.at("es").shape() == shape_t{0, 1});
    CHECK(out.at("es").type() == dtype_id::float32);
  }
  // cond false: no iteration either; the scan output i is declared int64 [] so is is int64 [0].
  const runtime counted = count_loop(false, true);
  const auto out = counted.run({{"cond", boolean({}, {false})}, {"s0", f32({1}, {1})}});
  CHECK(values_of(out.at("s_final")) == std::vector<float>{1});
  CHECK(out.at("is").shape() == shape_t{0});
  CHECK(out.at("is").type() == dtype_id::int64);
}

TEST_CASE("Loop with an undeclared scan element shape gives [0] after zero iterations") {
  // Same as accumulate_body, but e's shape has a symbolic dimension: nothing tells the element
  // shape, so the empty scan output is float [0].
  w::graph body;
  body.add_input(w::value_info("i", INT64, {}));
  body.add_input(w::value_info("c_in", BOOL, {}));
  body.add_input(w::value_info("s_in", FLOAT, {1}));
  body.add_output(w::value_info("c_out", BOOL, {}));
  body.add_output(w::value_info("s_out", FLOAT, {1}));
  body.add_output(w::value_info("e", FLOAT, {-1}));
  body.add_node(w::node("Identity", {"c_in"}, {"c_out"}, "keep_going"));
  body.add_node(w::node("Identity", {"s_in"}, {"s_out"}, "same"));
  body.add_node(w::node("Identity", {"s_in"}, {"e"}, "copy"));
  w::graph g;
  g.add_input(w::value_info("M", INT64, {}));
  g.add_input(w::value_info("s0", FLOAT, {1}));
  g.add_output(w::value_info("s_final", FLOAT, {1}));
  g.add_output(w::value_info("es", FLOAT, {-1}));
  g.add_node(
      w::node("Loop", {"M", "", "s0"}, {"s_final", "es"}, "loop", {w::attr_graph("body", body.m)}));
  const runtime rt = load(w::model(g));
  const auto out = rt.run({{"M", scalar_i64(0)}, {"s0", f32({1}, {3})}});
  CHECK(values_of(out.at("s_final")) == std::vector<float>{3});
  CHECK(out.at("es").shape() == shape_t{0});
  CHECK(out.at("es").type() == dtype_id::float32);
  // Two iterations: es = [[3], [3]].
  const auto two = rt.run({{"M", scalar_i64(2)}, {"s0", f32({1}, {3})}});
  CHECK(two.at("es").shape() == shape_t{2, 1});
  CHECK(values_of(two.at("es")) == std::vector<float>{3, 3});
}

TEST_CASE("Loop with cond only is a while loop ended by cond_out") {
  const runtime rt = count_loop(false, true);
  // s0 = 1: s = 2 (2 < 5), 3, 4, 5 (5 < 5 is false: stop after this iteration). is = 0..3.
  auto out = rt.run({{"cond", boolean({}, {true})}, {"s0", f32({1}, {1})}});
  CHECK(values_of(out.at("s_final")) == std::vector<float>{5});
  CHECK(out.at("is").shape() == shape_t{4});
  CHECK(values_of<std::int64_t>(out.at("is")) == std::vector<std::int64_t>{0, 1, 2, 3});
  // s0 = 7: one iteration (8 < 5 is false), like a do-while.
  out = rt.run({{"cond", boolean({}, {true})}, {"s0", f32({1}, {7})}});
  CHECK(values_of(out.at("s_final")) == std::vector<float>{8});
  CHECK(values_of<std::int64_t>(out.at("is")) == std::vector<std::int64_t>{0});
}

TEST_CASE("Loop with M and cond stops at whichever ends first") {
  const runtime rt = count_loop(true, true);
  const tensor yes = boolean({}, {true});
  // M = 10: cond_out ends it after 4 iterations (s = 5).
  auto out = rt.run({{"M", scalar_i64(10)}, {"cond", yes}, {"s0", f32({1}, {1})}});
  CHECK(values_of(out.at("s_final")) == std::vector<float>{5});
  CHECK(values_of<std::int64_t>(out.at("is")) == std::vector<std::int64_t>{0, 1, 2, 3});
  // M = 2: s = 2, 3.
  out = rt.run({{"M", scalar_i64(2)}, {"cond", yes}, {"s0", f32({1}, {1})}});
  CHECK(values_of(out.at("s_final")) == std::vector<float>{3});
  CHECK(values_of<std::int64_t>(out.at("is")) == std::vector<std::int64_t>{0, 1});
  // With M only, cond_out still ends the loop (as ONNX Runtime does): 4 iterations of 10.
  const runtime m_only = count_loop(true, false);
  out = m_only.run({{"M", scalar_i64(10)}, {"s0", f32({1}, {1})}});
  CHECK(values_of(out.at("s_final")) == std::vector<float>{5});
  CHECK(values_of<std::int64_t>(out.at("is")) == std::vector<std::int64_t>{0, 1, 2, 3});
}

TEST_CASE("Loop with neither M nor cond runs until cond_out is false") {
  const runtime rt = count_loop(false, false);
  counter obs;
  // s0 = 1: as the while loop, 4 iterations; the body's condition input is true in each.
  const auto out = rt.run({{"s0", f32({1}, {1})}}, obs.observer());
  CHECK(values_of(out.at("s_final")) == std::vector<float>{5});
  CHECK(values_of<std::int64_t>(out.at("is")) == std::vector<std::int64_t>{0, 1, 2, 3});
  CHECK(obs.seen["c_in"] == 4);
  CHECK(obs.last.at("c_in").data<bool>()[0]);
  // The last cond_out is the false one (5 < 5), of the declared shape [1].
  CHECK(obs.seen["c_out"] == 4);
  CHECK_FALSE(obs.last.at("c_out").data<bool>()[0]);
}

TEST_CASE("a Loop nested in a Loop body reads the enclosing body's values") {
  // Inner body (ii, ic, x) -> (ic, x + w), where w = float(oi) is computed in the outer body.
  w::graph inner;
  inner.add_input(w::value_info("ii", INT64, {}));
  inner.add_input(w::value_info("ic", BOOL, {}));
  inner.add_input(w::value_info("x", FLOAT, {}));
  inner.add_output(w::value_info("ic_out", BOOL, {}));
  inner.add_output(w::value_info("x_out", FLOAT, {}));
  inner.add_node(w::node("Identity", {"ic"}, {"ic_out"}, "inner_keep"));
  inner.add_node(w::node("Add", {"x", "w"}, {"x_out"}, "inner_add"));
  // Outer body (oi, oc, acc) -> (oc, Loop(2, "", acc) with the inner body, the same as a scan).
  w::graph outer;
  outer.add_input(w::value_info("oi", INT64, {}));
  outer.add_input(w::value_info("oc", BOOL, {}));
  outer.add_input(w::value_info("acc", FLOAT, {}));
  outer.add_output(w::value_info("oc_out", BOOL, {}));
  outer.add_output(w::value_info("acc_out", FLOAT, {}));
  outer.add_output(w::value_info("acc_e", FLOAT, {}));
  outer.add_initializer(init<std::int64_t>("two", INT64, {}, {2}));
  outer.add_node(w::node("Identity", {"oc"}, {"oc_out"}, "outer_keep"));
  outer.add_node(w::node("Cast", {"oi"}, {"w"}, "weight", {w::attr_int("to", FLOAT)}));
  outer.add_node(w::node("Loop", {"two", "", "acc"}, {"acc_out"}, "inner_loop",
                         {w::attr_graph("body", inner.m)}));
  outer.add_node(w::node("Identity", {"acc_out"}, {"acc_e"}, "record"));
  w::graph g;
  g.add_input(w::value_info("M", INT64, {}));
  g.add_input(w::value_info("a0", FLOAT, {}));
  g.add_output(w::value_info("a_final", FLOAT, {}));
  g.add_output(w::value_info("a_all", FLOAT, {-1}));
  g.add_node(w::node("Loop", {"M", "", "a0"}, {"a_final", "a_all"}, "outer_loop",
                     {w::attr_graph("body", outer.m)}));
  const runtime rt = load(w::model(g));
  // Outer iteration oi adds w = oi twice: 0 + 0 = 0, 0 + 2 = 2, 2 + 4 = 6.
  counter obs;
  const auto out = rt.run({{"M", scalar_i64(3)}, {"a0", f32({}, {0})}}, obs.observer());
  CHECK(values_of(out.at("a_final")) == std::vector<float>{6});
  CHECK(out.at("a_all").shape() == shape_t{3});
  CHECK(values_of(out.at("a_all")) == std::vector<float>{0, 2, 6});
  // The inner body ran 2 times in each of 3 outer iterations.
  CHECK(obs.seen["x_out"] == 6);
  CHECK(obs.seen["acc_out"] == 3);
}

TEST_CASE("an If in a Loop body chooses its branch per iteration") {
  // then: s_in + 10 (i < 2); else: s_in + 1. Branches read the body's input and constants.
  w::graph then_g;
  then_g.add_output(w::value_info("t_out", FLOAT, {}));
  then_g.add_node(w::node("Add", {"s_in", "ten"}, {"t_out"}, "then_add"));
  w::graph else_g;
  else_g.add_output(w::value_info("e_out", FLOAT, {}));
  else_g.add_node(w::node("Add", {"s_in", "one"}, {"e_out"}, "else_add"));
  w::graph body;
  body.add_input(w::value_info("i", INT64, {}));
  body.add_input(w::value_info("c_in", BOOL, {}));
  body.add_input(w::value_info("s_in", FLOAT, {}));
  body.add_output(w::value_info("c_out", BOOL, {}));
  body.add_output(w::value_info("s_out", FLOAT, {}));
  body.add_output(w::value_info("e", FLOAT, {}));
  body.add_initializer(init<std::int64_t>("two", INT64, {}, {2}));
  body.add_initializer(init<float>("ten", FLOAT, {}, {10.0f}));
  body.add_initializer(init<float>("one", FLOAT, {}, {1.0f}));
  body.add_node(w::node("Identity", {"c_in"}, {"c_out"}, "keep_going"));
  body.add_node(w::node("Less", {"i", "two"}, {"small"}, "is_small"));
  body.add_node(
      w::node("If", {"small"}, {"s_out"}, "choose",
              {w::attr_graph("then_branch", then_g.m), w::attr_graph("else_branch", else_g.m)}));
  body.add_node(w::node("Identity", {"s_out"}, {"e"}, "record"));
  w::graph g;
  g.add_input(w::value_info("M", INT64, {}));
  g.add_input(w::value_info("s0", FLOAT, {}));
  g.add_output(w::value_info("s_final", FLOAT, {}));
  g.add_output(w::value_info("es", FLOAT, {-1}));
  g.add_node(
      w::node("Loop", {"M", "", "s0"}, {"s_final", "es"}, "loop", {w::attr_graph("body", body.m)}));
  const runtime rt = load(w::model(g));
  // i = 0, 1: + 10 -> 10, 20; i = 2, 3: + 1 -> 21, 22.
  const auto out = rt.run({{"M", scalar_i64(4)}, {"s0", f32({}, {0})}});
  CHECK(values_of(out.at("s_final")) == std::vector<float>{22});
  CHECK(values_of(out.at("es")) == std::vector<float>{10, 20, 21, 22});
}

TEST_CASE("Loop: a held value is not overwritten and gives the same results") {
  // A shared_value_observer holding every value (as the background observer of calibration
  // may) turns off in-place reuse in the body; the outputs and held values must be unchanged.
  const runtime rt = accumulate_loop(13);
  const std::map<std::string, tensor> feeds = {
      {"M", scalar_i64(3)}, {"s0", f32({1}, {1})}, {"step", f32({1}, {-1})}};
  std::vector<std::pair<std::string, std::shared_ptr<const tensor>>> held;
  const auto out = rt.run(feeds, [&](std::string_view name, std::shared_ptr<const tensor> v) {
    if (name != "M" && name != "s0" && name != "step")  // feeds must not be held past run()
      held.emplace_back(std::string(name), std::move(v));
  });
  // s = 1, 2, 4; e = -s.
  CHECK(values_of(out.at("s_final")) == std::vector<float>{4});
  CHECK(values_of(out.at("es")) == std::vector<float>{-1, -2, -4});
  std::vector<float> s_outs;
  for (const auto& [name, v] : held) {
    if (name == "s_out")
      s_outs.push_back(v->data<float>()[0]);
  }
  CHECK(s_outs == std::vector<float>{1, 2, 4});
  const auto plain = rt.run(feeds);
  CHECK(values_of(plain.at("es")) == values_of(out.at("es")));
}

TEST_CASE("Loop errors name the node and the culprit") {
  std::string id;
  SUBCASE("a body with the wrong number of inputs") {
    w::graph body;
    body.add_input(w::value_info("i", INT64, {}));
    body.add_input(w::value_info("c_in", BOOL, {}));
    body.add_output(w::value_info("c_out", BOOL, {}));
    body.add_output(w::value_info("s_out", FLOAT, {1}));
    body.add_node(w::node("Identity", {"c_in"}, {"c_out"}, "keep_going"));
    body.add_node(w::node("Identity", {"s0"}, {"s_out"}, "copy"));
    w::graph g;
    g.add_input(w::value_info("M", INT64, {}));
    g.add_input(w::value_info("s0", FLOAT, {1}));
    g.add_output(w::value_info("s_final", FLOAT, {1}));
    g.add_node(
        w::node("Loop", {"M", "", "s0"}, {"s_final"}, "loop", {w::attr_graph("body", body.m)}));
    const runtime rt = load(w::model(g));
    // Zero iterations still check the body: 2 inputs, 3 expected (i, cond, one carried value).
    const std::string e = run_error(rt, {{"M", scalar_i64(0)}, {"s0", f32({1}, {1})}}, &id);
    CAPTURE(e);
    CHECK(id == "quark.onnx.runtime");
    CHECK(has(e, "'loop' (Loop)"));
    CHECK(has(e, "body has 2 inputs, expected 3"));
  }
  SUBCASE("a body with the wrong number of outputs") {
    w::graph body;
    body.add_input(w::value_info("i", INT64, {}));
    body.add_input(w::value_info("c_in", BOOL, {}));
    body.add_input(w::value_info("s_in", FLOAT, {1}));
    body.add_output(w::value_info("c_out", BOOL, {}));
    body.add_node(w::node("Identity", {"c_in"}, {"c_out"}, "keep_going"));
    w::graph g;
    g.add_input(w::value_info("M", INT64, {}));
    g.add_input(w::value_info("s0", FLOAT, {1}));
    g.add_output(w::value_info("s_final", FLOAT, {1}));
    g.add_node(
        w::node("Loop", {"M", "", "s0"}, {"s_final"}, "loop", {w::attr_graph("body", body.m)}));
    const runtime rt = load(w::model(g));
    // 1 output; cond_out plus one per Loop output makes 2.
    const std::string e = run_error(rt, {{"M", scalar_i64(1)}, {"s0", f32({1}, {1})}});
    CAPTURE(e);
    CHECK(has(e, "'loop' (Loop)"));
    CHECK(has(e, "body has 1 outputs, expected 2"));
  }
  SUBCASE("M with two elements, or of a float type") {
    w::graph g;
    g.add_input(w::value_info("M", INT64, {-1}));
    g.add_input(w::value_info("s0", FLOAT, {1}));
    g.add_input(w::value_info("step", FLOAT, {1}));
    g.add_output(w::value_info("s_final", FLOAT, {1}));
    g.add_output(w::value_info("es", FLOAT, {-1, 1}));
    g.add_node(w::node("Loop", {"M", "", "s0"}, {"s_final", "es"}, "loop",
                       {w::attr_graph("body", accumulate_body().m)}));
    const runtime rt = load(w::model(g));
    std::string e = run_error(
        rt, {{"M", i64({2}, {1, 2})}, {"s0", f32({1}, {1})}, {"step", f32({1}, {1})}}, &id);
    CAPTURE(e);
    CHECK(id == "quark.onnx.runtime");
    CHECK(has(e, "'loop' (Loop)"));
    CHECK(has(e, "trip count M ('M') must hold one element, has shape [2]"));
    // A one-element M of rank 1 is accepted: 1 iteration, s = 1 + 0.
    const auto out = rt.run({{"M", i64({1}, {1})}, {"s0", f32({1}, {1})}, {"step", f32({1}, {1})}});
    CHECK(values_of(out.at("s_final")) == std::vector<float>{1});

    w::graph gf;
    gf.add_input(w::value_info("M", FLOAT, {}));
    gf.add_input(w::value_info("s0", FLOAT, {1}));
    gf.add_input(w::value_info("step", FLOAT, {1}));
    gf.add_output(w::value_info("s_final", FLOAT, {1}));
    gf.add_output(w::value_info("es", FLOAT, {-1, 1}));
    gf.add_node(w::node("Loop", {"M", "", "s0"}, {"s_final", "es"}, "loop",
                        {w::attr_graph("body", accumulate_body().m)}));
    const runtime rtf = load(w::model(gf));
    e = run_error(rtf, {{"M", f32({}, {2})}, {"s0", f32({1}, {1})}, {"step", f32({1}, {1})}});
    CHECK(has(e, "trip count M ('M') must be int64, is float32"));
  }
  SUBCASE("cond with two elements") {
    w::graph g;
    g.add_input(w::value_info("cond", BOOL, {-1}));
    g.add_input(w::value_info("s0", FLOAT, {1}));
    g.add_output(w::value_info("s_final", FLOAT, {1}));
    g.add_output(w::value_info("is", INT64, {-1}));
    g.add_node(w::node("Loop", {"", "cond", "s0"}, {"s_final", "is"}, "loop",
                       {w::attr_graph("body", count_to_five_body().m)}));
    const runtime rt = load(w::model(g));
    const std::string e =
        run_error(rt, {{"cond", boolean({2}, {true, true})}, {"s0", f32({1}, {1})}});
    CAPTURE(e);
    CHECK(has(e, "'loop' (Loop)"));
    CHECK(has(e, "condition 'cond' must hold one element, has shape [2]"));
  }
  SUBCASE("a cond_out with two elements") {
    // cond_out = s_out < [5, 6]: shape [2].
    w::graph body;
    body.add_input(w::value_info("i", INT64, {}));
    body.add_input(w::value_info("c_in", BOOL, {}));
    body.add_input(w::value_info("s_in", FLOAT, {1}));
    body.add_output(w::value_info("c_out", BOOL, {2}));
    body.add_output(w::value_info("s_out", FLOAT, {1}));
    body.add_initializer(init<float>("limits", FLOAT, {2}, {5.0f, 6.0f}));
    body.add_node(w::node("Identity", {"s_in"}, {"s_out"}, "same"));
    body.add_node(w::node("Less", {"s_out", "limits"}, {"c_out"}, "below"));
    w::graph g;
    g.add_input(w::value_info("s0", FLOAT, {1}));
    g.add_output(w::value_info("s_final", FLOAT, {1}));
    g.add_node(
        w::node("Loop", {"", "", "s0"}, {"s_final"}, "loop", {w::attr_graph("body", body.m)}));
    const runtime rt = load(w::model(g));
    const std::string e = run_error(rt, {{"s0", f32({1}, {1})}});
    CAPTURE(e);
    CHECK(has(e, "'loop' (Loop)"));
    CHECK(has(e, "body output 'c_out' in iteration 0 must hold one element, has shape [2]"));
  }
  SUBCASE("a scan output whose shape changes between iterations") {
    // s_out = Concat(s_in, [1]) grows by one each iteration (a carried value may); e = s_out
    // is [2] in iteration 0 and [3] in iteration 1, which a scan output may not.
    w::graph body;
    body.add_input(w::value_info("i", INT64, {}));
    body.add_input(w::value_info("c_in", BOOL, {}));
    body.add_input(w::value_info("s_in", FLOAT, {-1}));
    body.add_output(w::value_info("c_out", BOOL, {}));
    body.add_output(w::value_info("s_out", FLOAT, {-1}));
    body.add_output(w::value_info("e", FLOAT, {-1}));
    body.add_initializer(init<float>("one", FLOAT, {1}, {1.0f}));
    body.add_node(w::node("Identity", {"c_in"}, {"c_out"}, "keep_going"));
    body.add_node(w::node("Concat", {"s_in", "one"}, {"s_out"}, "grow", {w::attr_int("axis", 0)}));
    body.add_node(w::node("Identity", {"s_out"}, {"e"}, "record"));
    w::graph g;
    g.add_input(w::value_info("M", INT64, {}));
    g.add_input(w::value_info("s0", FLOAT, {-1}));
    g.add_output(w::value_info("s_final", FLOAT, {-1}));
    g.add_output(w::value_info("es", FLOAT, {-1, -2}));
    g.add_node(w::node("Loop", {"M", "", "s0"}, {"s_final", "es"}, "loop",
                       {w::attr_graph("body", body.m)}));
    const runtime rt = load(w::model(g));
    // M = 1: s_final = [0, 1], es = [[0, 1]].
    const auto out = rt.run({{"M", scalar_i64(1)}, {"s0", f32({1}, {0})}});
    CHECK(values_of(out.at("s_final")) == std::vector<float>{0, 1});
    CHECK(out.at("es").shape() == shape_t{1, 2});
    const std::string e = run_error(rt, {{"M", scalar_i64(2)}, {"s0", f32({1}, {0})}});
    CAPTURE(e);
    CHECK(has(e, "'loop' (Loop)"));
    CHECK(has(e, "scan output 'es' is float32 [3] in iteration 1 but float32 [2] in iteration 0"));
  }
  SUBCASE("a carried value whose type changes") {
    w::graph body;
    body.add_input(w::value_info("i", INT64, {}));
    body.add_input(w::value_info("c_in", BOOL, {}));
    body.add_input(w::value_info("s_in", FLOAT, {1}));
    body.add_output(w::value_info("c_out", BOOL, {}));
    body.add_output(w::value_info("s_out", INT64, {1}));
    body.add_node(w::node("Identity", {"c_in"}, {"c_out"}, "keep_going"));
    body.add_node(w::node("Cast", {"s_in"}, {"s_out"}, "to_int", {w::attr_int("to", INT64)}));
    w::graph g;
    g.add_input(w::value_info("M", INT64, {}));
    g.add_input(w::value_info("s0", FLOAT, {1}));
    g.add_output(w::value_info("s_final", FLOAT, {1}));
    g.add_node(
        w::node("Loop", {"M", "", "s0"}, {"s_final"}, "loop", {w::attr_graph("body", body.m)}));
    const runtime rt = load(w::model(g));
    const std::string e = run_error(rt, {{"M", scalar_i64(3)}, {"s0", f32({1}, {1})}});
    CAPTURE(e);
    CHECK(has(e, "'loop' (Loop)"));
    CHECK(has(e,
              "loop-carried value #0 ('s0') is float32 but the body returns int64 in "
              "iteration 0"));
  }
}

// ---- Scan -------------------------------------------------------------------------------------

namespace {

/// (sum_in [2], col [2]) -> (sum_out = sum_in + col, a = sum_out, b = sum_out).
w::graph sum_body(std::int64_t element = 2) {
  w::graph b;
  b.add_input(w::value_info("sum_in", FLOAT, {element}));
  b.add_input(w::value_info("col", FLOAT, {element}));
  b.add_output(w::value_info("sum_out", FLOAT, {element}));
  b.add_output(w::value_info("ea", FLOAT, {element}));
  b.add_output(w::value_info("eb", FLOAT, {element}));
  b.add_node(w::node("Add", {"sum_in", "col"}, {"sum_out"}, "acc"));
  b.add_node(w::node("Identity", {"sum_out"}, {"ea"}, "copy_a"));
  b.add_node(w::node("Identity", {"sum_out"}, {"eb"}, "copy_b"));
  return b;
}

/// Scan(init [2], x [2, n]) over axis 1 with sum_body and the given attributes (opset 11).
runtime sum_scan(std::initializer_list<w::msg> attrs) {
  w::graph g;
  g.add_input(w::value_info("init", FLOAT, {2}));
  g.add_input(w::value_info("x", FLOAT, {2, -1}));
  g.add_output(w::value_info("y", FLOAT, {2}));
  g.add_output(w::value_info("a", FLOAT, {-1, -2}));
  g.add_output(w::value_info("b", FLOAT, {-1, -2}));
  w::msg n = w::node("Scan", {"init", "x"}, {"y", "a", "b"}, "scan",
                     {w::attr_graph("body", sum_body().m)});
  for (const auto& a : attrs)
    n.sub(5, a);
  g.add_node(n);
  return load(w::model(g, 8, {{"", 11}}));
}

runtime reverse_sum_scan() {
  return sum_scan({w::attr_int("num_scan_inputs", 1), w::attr_ints("scan_input_axes", {1}),
                   w::attr_ints("scan_input_directions", {1}),
                   w::attr_ints("scan_output_axes", {0, -1}),
                   w::attr_ints("scan_output_directions", {0, 1})});
}

}  // namespace

TEST_CASE("Scan with a reversed input along axis 1 and outputs along axes 0 and -1") {
  const runtime rt = reverse_sum_scan();
  // x = [[1, 2, 3], [4, 5, 6]]: the columns [1, 4], [2, 5], [3, 6] in reverse, summed from
  // [0, 0]: [3, 6], [5, 11], [6, 15]. a stacks them as rows: [[3, 6], [5, 11], [6, 15]]; b as
  // columns (axis -1 of a rank-2 output is 1), the first iteration last:
  // [[6, 5, 3], [15, 11, 6]].
  counter obs;
  const auto out =
      rt.run({{"init", f32({2}, {0, 0})}, {"x", f32({2, 3}, {1, 2, 3, 4, 5, 6})}}, obs.observer());
  CHECK(values_of(out.at("y")) == std::vector<float>{6, 15});
  CHECK(out.at("a").shape() == shape_t{3, 2});
  CHECK(values_of(out.at("a")) == std::vector<float>{3, 6, 5, 11, 6, 15});
  CHECK(out.at("b").shape() == shape_t{2, 3});
  CHECK(values_of(out.at("b")) == std::vector<float>{6, 5, 3, 15, 11, 6});
  // The body's slice input is observed per iteration: the last one is column 0.
  CHECK(obs.seen["col"] == 3);
  CHECK(values_of(obs.last.at("col")) == std::vector<float>{1, 4});
}

TEST_CASE("Scan over zero elements returns the initial state and empty scan outputs") {
  const runtime rt = reverse_sum_scan();
  // x is [2, 0]: no iteration; the body declares the elements as float [2], so a (axis 0) is
  // [0, 2] and b (axis -1) is [2, 0].
  const auto out = rt.run({{"init", f32({2}, {7, 8})}, {"x", tensor(dtype_id::float32, {2, 0})}});
  CHECK(values_of(out.at("y")) == std::vector<float>{7, 8});
  CHECK(out.at("a").shape() == shape_t{0, 2});
  CHECK(out.at("b").shape() == shape_t{2, 0});
}

TEST_CASE("Scan over an input with an empty dimension besides the scan axis") {
  w::graph body;
  body.add_input(w::value_info("e", FLOAT, {0}));
  body.add_output(w::value_info("o", FLOAT, {0}));
  body.add_node(w::node("Identity", {"e"}, {"o"}, "same"));
  w::graph g;
  g.add_input(w::value_info("x", FLOAT, {0, -1}));
  g.add_output(w::value_info("y", FLOAT, {-1, 0}));
  g.add_node(w::node("Scan", {"x"}, {"y"}, "scan",
                     {w::attr_graph("body", body.m), w::attr_int("num_scan_inputs", 1),
                      w::attr_ints("scan_input_axes", {1}), w::attr_ints("scan_output_axes", {0}),
                      w::attr_ints("scan_output_directions", {1})}));
  const runtime rt = load(w::model(g, 8, {{"", 11}}));
  // x [0, 3] scanned along axis 1: three empty elements [0], stacked along axis 0: [3, 0].
  const auto out = rt.run({{"x", tensor(dtype_id::float32, {0, 3})}});
  CHECK(out.at("y").shape() == shape_t{3, 0});
}

TEST_CASE("Scan zips two inputs in opposite directions without state") {
  w::graph body;
  body.add_input(w::value_info("xe", FLOAT, {}));
  body.add_input(w::value_info("ye", FLOAT, {}));
  body.add_output(w::value_info("s", FLOAT, {}));
  body.add_node(w::node("Add", {"xe", "ye"}, {"s"}, "add"));
  w::graph g;
  g.add_input(w::value_info("x", FLOAT, {-1}));
  g.add_input(w::value_info("y", FLOAT, {-2}));
  g.add_output(w::value_info("z", FLOAT, {-1}));
  g.add_node(w::node("Scan", {"x", "y"}, {"z"}, "zip",
                     {w::attr_graph("body", body.m), w::attr_int("num_scan_inputs", 2),
                      w::attr_ints("scan_input_directions", {0, 1})}));
  const runtime rt = load(w::model(g, 8, {{"", 16}}));
  // x forward, y backward: 1 + 30, 2 + 20, 3 + 10.
  const auto out = rt.run({{"x", f32({3}, {1, 2, 3})}, {"y", f32({3}, {10, 20, 30})}});
  CHECK(values_of(out.at("z")) == std::vector<float>{31, 22, 13});
  // Lengths 3 and 4 along the scan axes.
  std::string id;
  const std::string e =
      run_error(rt, {{"x", f32({3}, {1, 2, 3})}, {"y", f32({4}, {1, 2, 3, 4})}}, &id);
  CAPTURE(e);
  CHECK(id == "quark.onnx.runtime");
  CHECK(has(e, "'zip' (Scan)"));
  CHECK(has(e, "scan input 'y' has 4 elements along axis 0, scan input 'x' has 3"));
}

TEST_CASE("Scan opset 8: one scan per batch entry, reverse directions, sequence_lens") {
  auto model = [](bool lens, std::initializer_list<std::int64_t> directions) {
    w::graph g;
    if (lens)
      g.add_input(w::value_info("lens", INT64, {2}));
    g.add_input(w::value_info("init", FLOAT, {2, 2}));
    g.add_input(w::value_info("x", FLOAT, {2, 3, 2}));
    g.add_output(w::value_info("y", FLOAT, {2, 2}));
    g.add_output(w::value_info("z", FLOAT, {2, 3, 2}));
    w::graph body;
    body.add_input(w::value_info("sum_in", FLOAT, {2}));
    body.add_input(w::value_info("row", FLOAT, {2}));
    body.add_output(w::value_info("sum_out", FLOAT, {2}));
    body.add_output(w::value_info("e", FLOAT, {2}));
    body.add_node(w::node("Add", {"sum_in", "row"}, {"sum_out"}, "acc"));
    body.add_node(w::node("Identity", {"sum_out"}, {"e"}, "record"));
    w::msg n = w::node("Scan", {lens ? "lens" : "", "init", "x"}, {"y", "z"}, "scan8",
                       {w::attr_graph("body", body.m), w::attr_int("num_scan_inputs", 1)});
    if (directions.size() != 0)
      n.sub(5, w::attr_ints("directions", directions));
    g.add_node(n);
    return load(w::model(g, 8, {{"", 8}}));
  };
  const tensor init = f32({2, 2}, {0, 0, 1, 1});
  const tensor x = f32({2, 3, 2}, {1, 2, 3, 4, 5, 6, 1, 1, 1, 1, 1, 1});
  // Batch 0 from [0, 0]: [1, 2], [4, 6], [9, 12]; batch 1 from [1, 1]: [2, 2], [3, 3], [4, 4].
  auto out = model(false, {}).run({{"init", init}, {"x", x}});
  CHECK(values_of(out.at("y")) == std::vector<float>{9, 12, 4, 4});
  CHECK(out.at("z").shape() == shape_t{2, 3, 2});
  CHECK(values_of(out.at("z")) == std::vector<float>{1, 2, 4, 6, 9, 12, 2, 2, 3, 3, 4, 4});
  // Reversed: batch 0 sums [5, 6], [3, 4], [1, 2]: [5, 6], [8, 10], [9, 12]; outputs forward.
  out = model(false, {1}).run({{"init", init}, {"x", x}});
  CHECK(values_of(out.at("y")) == std::vector<float>{9, 12, 4, 4});
  CHECK(values_of(out.at("z")) == std::vector<float>{5, 6, 8, 10, 9, 12, 2, 2, 3, 3, 4, 4});
  // sequence_lens equal to the length: the same as without.
  const runtime with_lens = model(true, {});
  out = with_lens.run({{"lens", i64({2}, {3, 3})}, {"init", init}, {"x", x}});
  CHECK(values_of(out.at("y")) == std::vector<float>{9, 12, 4, 4});
  // A shorter sequence is refused by name; a longer one is bad input.
  std::string id;
  std::string e = run_error(with_lens, {{"lens", i64({2}, {3, 2})}, {"init", init}, {"x", x}}, &id);
  CAPTURE(e);
  CHECK(id == "quark.onnx.unsupported_op");
  CHECK(has(e, "'scan8' (Scan)"));
  CHECK(has(e, "sequence_lens[1] = 2 is shorter than the sequence (3)"));
  e = run_error(with_lens, {{"lens", i64({2}, {4, 3})}, {"init", init}, {"x", x}}, &id);
  CHECK(id == "quark.onnx.runtime");
  CHECK(has(e, "sequence_lens[0] = 4 is outside [0, 3]"));
}

TEST_CASE("Scan errors name the node and the culprit") {
  const std::map<std::string, tensor> feeds = {{"init", f32({2}, {0, 0})},
                                               {"x", f32({2, 3}, {1, 2, 3, 4, 5, 6})}};
  struct bad_case {
    std::vector<w::msg> attrs;
    std::string want;
  };
  const std::vector<bad_case> cases = {
      {{w::attr_int("num_scan_inputs", 1), w::attr_ints("scan_input_directions", {2})},
       "attribute 'scan_input_directions'[0] is 2, expected 0 (forward) or 1 (reverse)"},
      {{w::attr_int("num_scan_inputs", 1), w::attr_ints("scan_output_directions", {0, -1})},
       "attribute 'scan_output_directions'[1] is -1"},
      {{w::attr_int("num_scan_inputs", 1), w::attr_ints("scan_input_axes", {2})},
       "scan_input_axes[0] = 2 is out of range for scan input 'x' of shape [2,3]"},
      {{w::attr_int("num_scan_inputs", 1), w::attr_ints("scan_input_axes", {-3})},
       "scan_input_axes[0] = -3 is out of range"},
      // Elements are [2], so an output has rank 2: axis 2 is outside [-2, 2).
      {{w::attr_int("num_scan_inputs", 1), w::attr_ints("scan_input_axes", {1}),
        w::attr_ints("scan_output_axes", {0, 2})},
       "scan_output_axes[1] = 2 is out of range for scan output 'b' of rank 2"},
      {{w::attr_int("num_scan_inputs", 1), w::attr_ints("scan_input_axes", {1}),
        w::attr_ints("scan_output_axes", {0})},
       "attribute 'scan_output_axes' has 1 entries, expected 2"},
      {{}, "attribute 'num_scan_inputs' is missing"},
      {{w::attr_int("num_scan_inputs", 3)}, "attribute 'num_scan_inputs' is 3, expected 1 to 2"},
  };
  for (const auto& k : cases) {
    CAPTURE(k.want);
    w::graph g;
    g.add_input(w::value_info("init", FLOAT, {2}));
    g.add_input(w::value_info("x", FLOAT, {2, -1}));
    g.add_output(w::value_info("y", FLOAT, {2}));
    g.add_output(w::value_info("a", FLOAT, {-1, -2}));
    g.add_output(w::value_info("b", FLOAT, {-1, -2}));
    w::msg n = w::node("Scan", {"init", "x"}, {"y", "a", "b"}, "scan",
                       {w::attr_graph("body", sum_body().m)});
    for (const auto& a : k.attrs)
      n.sub(5, a);
    g.add_node(n);
    const runtime rt = load(w::model(g, 8, {{"", 11}}));
    const std::string e = run_error(rt, feeds);
    CAPTURE(e);
    CHECK(has(e, "'scan' (Scan)"));
    CHECK(has(e, k.want));
  }
  SUBCASE("a body with the wrong number of inputs or a state that changes type") {
    w::graph body;
    body.add_input(w::value_info("sum_in", FLOAT, {2}));
    body.add_output(w::value_info("sum_out", FLOAT, {2}));
    body.add_node(w::node("Identity", {"sum_in"}, {"sum_out"}, "same"));
    w::graph g;
    g.add_input(w::value_info("init", FLOAT, {2}));
    g.add_input(w::value_info("x", FLOAT, {2, -1}));
    g.add_output(w::value_info("y", FLOAT, {2}));
    g.add_node(w::node("Scan", {"init", "x"}, {"y"}, "scan",
                       {w::attr_graph("body", body.m), w::attr_int("num_scan_inputs", 1)}));
    const runtime rt = load(w::model(g, 8, {{"", 11}}));
    std::string e = run_error(rt, feeds);
    CAPTURE(e);
    CHECK(has(e, "'scan' (Scan)"));
    CHECK(has(e, "body has 1 inputs, expected 2 (1 state variables and 1 scan inputs)"));

    w::graph cast_body;
    cast_body.add_input(w::value_info("sum_in", FLOAT, {2}));
    cast_body.add_input(w::value_info("row", FLOAT, {3}));
    cast_body.add_output(w::value_info("sum_out", INT64, {2}));
    cast_body.add_node(w::node("Cast", {"sum_in"}, {"sum_out"}, "to_int", {w::attr_int("to", 7)}));
    w::graph g2;
    g2.add_input(w::value_info("init", FLOAT, {2}));
    g2.add_input(w::value_info("x", FLOAT, {2, -1}));
    g2.add_output(w::value_info("y", FLOAT, {2}));
    g2.add_node(w::node("Scan", {"init", "x"}, {"y"}, "scan",
                        {w::attr_graph("body", cast_body.m), w::attr_int("num_scan_inputs", 1)}));
    const runtime rt2 = load(w::model(g2, 8, {{"", 11}}));
    e = run_error(rt2, feeds);
    CHECK(has(e, "'scan' (Scan)"));
    CHECK(has(e,
              "state variable #0 ('init') is float32 but the body returns int64 in "
              "iteration 0"));
  }
}

TEST_CASE("calibration observes a Loop body once per iteration and quantizes around it") {
  // x [1, 4] -> MatMul(W1) -> h; Loop(3) adds h to an accumulator (the body reads h from the
  // enclosing scope, so its values repeat a name per iteration) -> acc -> MatMul(W2) -> y.
  w::graph body;
  body.add_input(w::value_info("i", INT64, {}));
  body.add_input(w::value_info("c_in", BOOL, {}));
  body.add_input(w::value_info("acc_in", FLOAT, {1, 4}));
  body.add_output(w::value_info("c_out", BOOL, {}));
  body.add_output(w::value_info("acc_out", FLOAT, {1, 4}));
  body.add_node(w::node("Identity", {"c_in"}, {"c_out"}, "keep_going"));
  body.add_node(w::node("Add", {"acc_in", "h"}, {"acc_out"}, "accumulate"));
  w::graph g;
  g.add_input(w::value_info("x", FLOAT, {1, 4}));
  g.add_output(w::value_info("y", FLOAT, {1, 4}));
  std::vector<float> eye(16, 0.0f);
  for (std::size_t i = 0; i < 4; ++i)
    eye[i * 5] = 0.5f;
  g.add_initializer(w::float_tensor("W1", {4, 4}, eye));
  g.add_initializer(w::float_tensor("W2", {4, 4}, eye));
  g.add_initializer(init<std::int64_t>("three", INT64, {}, {3}));
  g.add_initializer(w::float_tensor("zero", {1, 4}, {0, 0, 0, 0}));
  g.add_node(w::node("MatMul", {"x", "W1"}, {"h"}, "mm1"));
  g.add_node(
      w::node("Loop", {"three", "", "zero"}, {"acc"}, "loop", {w::attr_graph("body", body.m)}));
  g.add_node(w::node("MatMul", {"acc", "W2"}, {"y"}, "mm2"));
  const std::string bytes = w::model(g);
  // In float: h = x / 2, acc = 3 h = 1.5 x, y = acc / 2 = 0.75 x.
  const runtime rt = load(bytes);
  const auto out = rt.run({{"x", f32({1, 4}, {1, -2, 3, 4})}});
  CHECK(values_of(out.at("y")) == std::vector<float>{0.75f, -1.5f, 2.25f, 3.0f});

  const quark::onnx::model m = quark::onnx::model::from_bytes(std::string_view(bytes));
  std::vector<quark::onnx::calib_sample> samples;
  samples.push_back({{"x", f32({1, 4}, {1, -2, 3, 4})}});
  samples.push_back({{"x", f32({1, 4}, {-4, 2, 0.5f, 1})}});
  quark::onnx::memory_reader reader(std::move(samples));
  quark::onnx::quantize_report report;
  const quark::onnx::model q =
      quark::onnx::quantize_model(m, quark::onnx::get_default_config("A8W8"), reader, &report);
  CHECK(report.calibration_samples == 2);
  // The quantized model still runs in the runtime, close to the float result.
  const runtime qrt(q);
  const auto qout = qrt.run({{"x", f32({1, 4}, {1, -2, 3, 4})}});
  const auto y = values_of(qout.at("y"));
  const std::vector<float> want = {0.75f, -1.5f, 2.25f, 3.0f};
  REQUIRE(y.size() == want.size());
  // int8 steps: acc in [-6, 6] has a step of 12 / 255 = 0.047, y one of 6 / 255 = 0.024.
  for (std::size_t i = 0; i < y.size(); ++i)
    CHECK(std::abs(y[i] - want[i]) <= 0.1f);
}

namespace {

/// y = Relu(x) at the bottom of `depth` nested If nodes on one condition c: each level's
/// then_branch holds the next level, its else_branch is Identity(x). With c true y = Relu(x),
/// with c false y = x.
w::msg nested_if_graph(int depth) {
  w::graph g;
  g.m = w::msg{};
  g.m.bytes(2, "level0");
  g.add_output(w::value_info("r0", FLOAT, {1, 4}));
  g.add_node(w::node("Relu", {"x"}, {"r0"}, "relu0"));
  for (int d = 1; d <= depth; ++d) {
    const std::string out = "o" + std::to_string(d), alt = "e" + std::to_string(d);
    w::graph other;
    other.add_output(w::value_info(alt, FLOAT, {1, 4}));
    other.add_node(w::node("Identity", {"x"}, {alt}, "id" + std::to_string(d)));
    w::graph level;
    level.add_output(w::value_info(out, FLOAT, {1, 4}));
    level.add_node(
        w::node("If", {"c"}, {out}, "if" + std::to_string(d),
                {w::attr_graph("then_branch", g.m), w::attr_graph("else_branch", other.m)}));
    g = level;
  }
  return g.m;
}

std::string nested_if_model(int depth) {
  w::graph top = w::graph{};
  top.m = nested_if_graph(depth);
  top.add_input(w::value_info("x", FLOAT, {1, 4}));
  top.add_input(w::value_info("c", BOOL, {}));
  return w::model(top);
}

}  // namespace

// protobuf parses at most 100 nested messages by default, and ONNX Runtime 1.30 keeps that limit:
// it runs this model with 31 levels of If and refuses 32 ("Protobuf parsing failed", checked
// with onnxruntime-node). Model: 2 messages, each If level: node, attribute, graph (3 more).
TEST_CASE("If bodies nested 31 deep run, and 32 deep are refused at load naming the nesting") {
  const std::string ok = nested_if_model(31);
  const std::string deep = nested_if_model(32);
  w::scratch_dir dir;
  w::write_file(dir / "ok.onnx", ok);
  w::write_file(dir / "deep.onnx", deep);
  runtime rt(dir / "ok.onnx");
  const auto x = f32({1, 4}, {-1, 2, -3, 4});
  CHECK(rt.run({{"x", x}, {"c", boolean({}, {true})}}).at("o31").data<float>()[0] == 0.0f);
  CHECK(rt.run({{"x", x}, {"c", boolean({}, {false})}}).at("o31").data<float>()[0] == -1.0f);
  CHECK_NOTHROW(quark::onnx::model::from_bytes(ok));

  const auto bytes = std::as_bytes(std::span(deep.data(), deep.size()));
  const std::string why = "messages nested deeper than protobuf's limit of 100";
  CHECK_THROWS_WITH_AS(quark::onnx::model::load(dir / "deep.onnx"),
                       doctest::Contains(("deep.onnx': " + why).c_str()),
                       quark::onnx::frontend_error);
  CHECK_THROWS_WITH_AS(quark::onnx::model::from_bytes(deep),
                       doctest::Contains(("<bytes>: " + why).c_str()), quark::onnx::frontend_error);
  CHECK_THROWS_WITH_AS(runtime(dir / "deep.onnx"),
                       doctest::Contains(("deep.onnx': " + why).c_str()),
                       quark::onnx::frontend_error);
  CHECK_THROWS_WITH_AS(runtime::from_bytes(bytes), doctest::Contains(why.c_str()),
                       quark::onnx::frontend_error);
  // Cut short, the same model is corrupt, not too deep.
  w::write_file(dir / "cut.onnx", deep.substr(0, deep.size() - 9));
  CHECK_THROWS_WITH_AS(
      quark::onnx::model::load(dir / "cut.onnx"),
      doctest::Contains("cut.onnx': not a valid ONNX protobuf (truncated or corrupt)"),
      quark::onnx::frontend_error);
  CHECK_THROWS_WITH_AS(runtime(dir / "cut.onnx"), doctest::Contains("(truncated or corrupt)"),
                       quark::onnx::frontend_error);
}
