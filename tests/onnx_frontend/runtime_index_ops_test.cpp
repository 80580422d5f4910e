// SPDX-License-Identifier: MIT
// The runtime's index operators (runtime/ops_index.cpp) beyond the ONNX conformance data: bad
// indices and shapes fail with a frontend_error naming the node, and hand-computed values for
// cases the conformance data lacks (select_last_index with ties, CumSum exclusive + reverse on
// 2-D, TopK ties, OneHot out-of-range and negative indices per opset, GatherND negative indices).
// Models are written with the wire helper.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <map>
#include <span>
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

constexpr int FLOAT = 1, INT32 = 6, INT64 = 7, BOOL = 9;

}  // namespace

TEST_CASE("GatherElements: negative indices wrap, out-of-range ones fail naming the node") {
  w::graph g;
  g.add_input(w::value_info("x", FLOAT, {2, 3}));
  g.add_input(w::value_info("i", INT64, {2, 2}));
  g.add_output(w::value_info("y", FLOAT, {2, 2}));
  g.add_node(w::node("GatherElements", {"x", "i"}, {"y"}, "ge", {w::attr_int("axis", 1)}));
  const runtime rt = load(w::model(g));
  const tensor x = f32({2, 3}, {1, 2, 3, 4, 5, 6});
  const auto out = rt.run({{"x", x}, {"i", i64({2, 2}, {2, -3, -1, 0})}});
  CHECK(values_of<float>(out.at("y")) == std::vector<float>{3, 1, 6, 4});
  for (std::int64_t bad : {3, -4}) {
    const std::string e = run_error(rt, {{"x", x}, {"i", i64({2, 2}, {0, 1, bad, 0})}});
    CAPTURE(e);
    CHECK(has(e, "'ge'"));
    CHECK(has(e, "GatherElements"));
    CHECK(has(e, "out of range"));
  }
}

TEST_CASE("GatherND, ScatterND, Compress and ReverseSequence copy empty slices of empty data") {
  // Slices of 0 elements: the data's buffer is null, and memcpy used to get it (undefined
  // behaviour even for 0 bytes, reported by UBSan in the asan preset).
  {
    w::graph g;
    g.add_input(w::value_info("x", FLOAT, {}, false));
    g.add_input(w::value_info("i", INT64, {}, false));
    g.add_output(w::value_info("y", FLOAT, {}, false));
    g.add_node(w::node("GatherND", {"x", "i"}, {"y"}, "gnd"));
    const auto out =
        load(w::model(g)).run({{"x", f32({2, 0}, {})}, {"i", i64({3, 1}, {1, 0, -1})}});
    CHECK(out.at("y").shape() == shape_t{3, 0});
  }
  {
    w::graph g;
    g.add_input(w::value_info("x", FLOAT, {}, false));
    g.add_input(w::value_info("i", INT64, {}, false));
    g.add_input(w::value_info("u", FLOAT, {}, false));
    g.add_output(w::value_info("y", FLOAT, {}, false));
    g.add_node(w::node("ScatterND", {"x", "i", "u"}, {"y"}, "snd"));
    const auto out =
        load(w::model(g, 8, {{"", 16}}))
            .run({{"x", f32({4, 0}, {})}, {"i", i64({2, 1}, {1, 3})}, {"u", f32({2, 0}, {})}});
    CHECK(out.at("y").shape() == shape_t{4, 0});
  }
  {
    w::graph g;
    g.add_input(w::value_info("x", FLOAT, {}, false));
    g.add_input(w::value_info("c", BOOL, {}, false));
    g.add_output(w::value_info("y", FLOAT, {}, false));
    g.add_node(w::node("Compress", {"x", "c"}, {"y"}, "cmp", {w::attr_int("axis", 0)}));
    const auto out = load(w::model(g))
                         .run({{"x", f32({3, 0}, {})},
                               {"c", make(dtype_id::boolean, {3}, std::vector<bool>{1, 0, 1})}});
    CHECK(out.at("y").shape() == shape_t{2, 0});
  }
  {
    w::graph g;
    g.add_input(w::value_info("x", FLOAT, {}, false));
    g.add_input(w::value_info("l", INT64, {}, false));
    g.add_output(w::value_info("y", FLOAT, {}, false));
    g.add_node(w::node("ReverseSequence", {"x", "l"}, {"y"}, "rs",
                       {w::attr_int("batch_axis", 1), w::attr_int("time_axis", 0)}));
    const auto out = load(w::model(g)).run({{"x", f32({3, 2, 0}, {})}, {"l", i64({2}, {3, 2})}});
    CHECK(out.at("y").shape() == shape_t{3, 2, 0});
  }
}

TEST_CASE("ScatterND: an out-of-range index or a wrong updates shape fails naming the node") {
  w::graph g;
  g.add_input(w::value_info("x", FLOAT, {4}));
  g.add_input(w::value_info("i", INT64, {-1, 1}));
  g.add_input(w::value_info("u", FLOAT, {-2}));
  g.add_output(w::value_info("y", FLOAT, {4}));
  g.add_node(w::node("ScatterND", {"x", "i", "u"}, {"y"}, "snd"));
  const runtime rt = load(w::model(g, 8, {{"", 16}}));
  const tensor x = f32({4}, {1, 2, 3, 4});
  const auto out = rt.run({{"x", x}, {"i", i64({2, 1}, {-1, 0})}, {"u", f32({2}, {9, 8})}});
  CHECK(values_of<float>(out.at("y")) == std::vector<float>{8, 2, 3, 9});

  std::string e = run_error(rt, {{"x", x}, {"i", i64({1, 1}, {4})}, {"u", f32({1}, {9})}});
  CAPTURE(e);
  CHECK(has(e, "'snd'"));
  CHECK(has(e, "ScatterND"));
  CHECK(has(e, "index 4 out of range"));
  e = run_error(rt, {{"x", x}, {"i", i64({2, 1}, {0, 1})}, {"u", f32({3}, {9, 8, 7})}});
  CHECK(has(e, "'snd'"));
  CHECK(has(e, "updates have shape [3], expected [2]"));
}

TEST_CASE("GatherND: negative indices wrap, out-of-range ones fail naming the node") {
  w::graph g;
  g.add_input(w::value_info("x", FLOAT, {2, 2}));
  g.add_input(w::value_info("i", INT64, {-1, 2}));
  g.add_output(w::value_info("y", FLOAT, {-1}));
  g.add_node(w::node("GatherND", {"x", "i"}, {"y"}, "gnd"));
  const runtime rt = load(w::model(g));
  const tensor x = f32({2, 2}, {0, 1, 2, 3});
  const auto out = rt.run({{"x", x}, {"i", i64({2, 2}, {-1, -2, 0, -1})}});
  CHECK(values_of<float>(out.at("y")) == std::vector<float>{2, 1});
  const std::string e = run_error(rt, {{"x", x}, {"i", i64({1, 2}, {0, 2})}});
  CHECK(has(e, "'gnd'"));
  CHECK(has(e, "out of range"));
}

TEST_CASE("TopK: k larger than the axis fails naming the node, ties keep the lower index first") {
  for (std::int64_t largest : {1, 0}) {
    w::graph g;
    g.add_input(w::value_info("x", FLOAT, {2, 4}));
    g.add_input(w::value_info("k", INT64, {1}));
    g.add_output(w::value_info("v", FLOAT, {2, -1}));
    g.add_output(w::value_info("i", INT64, {2, -1}));
    g.add_node(w::node("TopK", {"x", "k"}, {"v", "i"}, "topk",
                       {w::attr_int("axis", -1), w::attr_int("largest", largest)}));
    const runtime rt = load(w::model(g, 8, {{"", 11}}));
    const tensor x = f32({2, 4}, {1, 3, 3, 2, 2, 1, 1, 3});
    const auto out = rt.run({{"x", x}, {"k", i64({1}, {2})}});
    if (largest) {
      CHECK(values_of<float>(out.at("v")) == std::vector<float>{3, 3, 3, 2});
      CHECK(values_of<std::int64_t>(out.at("i")) == std::vector<std::int64_t>{1, 2, 3, 0});
    } else {
      CHECK(values_of<float>(out.at("v")) == std::vector<float>{1, 2, 1, 1});
      CHECK(values_of<std::int64_t>(out.at("i")) == std::vector<std::int64_t>{0, 3, 1, 2});
    }
    const std::string e = run_error(rt, {{"x", x}, {"k", i64({1}, {5})}});
    CAPTURE(e);
    CHECK(has(e, "'topk'"));
    CHECK(has(e, "TopK"));
    CHECK(has(e, "k = 5 outside [0, 4]"));
  }
}

TEST_CASE("OneHot: out-of-range indices give all-off rows, negative ones wrap from opset 11") {
  for (std::int64_t opset : {9, 11}) {
    w::graph g;
    g.add_input(w::value_info("i", INT64, {5}));
    g.add_input(w::value_info("vals", FLOAT, {-1}));
    g.add_initializer(init<float>("depth", FLOAT, {}, {3.0f}));
    g.add_output(w::value_info("y", FLOAT, {5, 3}));
    g.add_node(w::node("OneHot", {"i", "depth", "vals"}, {"y"}, "oh"));
    const runtime rt = load(w::model(g, 8, {{"", opset}}));
    const tensor idx = i64({5}, {0, -1, 3, -4, 2});
    const auto out = rt.run({{"i", idx}, {"vals", f32({2}, {0, 5})}});
    // rows: 0 -> hot 0; -1 -> hot 2 (opset 11) or off; 3 and -4 -> off; 2 -> hot 2
    const float m = opset >= 11 ? 5.0f : 0.0f;
    CHECK(values_of<float>(out.at("y")) ==
          std::vector<float>{5, 0, 0, 0, 0, m, 0, 0, 0, 0, 0, 0, 0, 0, 5});
    const std::string e = run_error(rt, {{"i", idx}, {"vals", f32({3}, {0, 5, 6})}});
    CAPTURE(e);
    CHECK(has(e, "'oh'"));
    CHECK(has(e, "OneHot"));
    CHECK(has(e, "values must be [off_value, on_value]"));
  }
}

TEST_CASE("ArgMax / ArgMin: select_last_index picks the last of tied extremes") {
  for (const char* op : {"ArgMax", "ArgMin"}) {
    for (std::int64_t last : {0, 1}) {
      w::graph g;
      g.add_input(w::value_info("x", FLOAT, {2, 3}));
      g.add_output(w::value_info("y", INT64, {2}));
      g.add_node(w::node(op, {"x"}, {"y"}, "arg",
                         {w::attr_int("axis", 1), w::attr_int("keepdims", 0),
                          w::attr_int("select_last_index", last)}));
      const runtime rt = load(w::model(g));
      const auto out = rt.run({{"x", f32({2, 3}, {1, 3, 3, 2, 2, 2})}});
      CAPTURE(op);
      CAPTURE(last);
      std::vector<std::int64_t> want;
      if (std::string_view(op) == "ArgMax") {
        want = last ? std::vector<std::int64_t>{2, 2} : std::vector<std::int64_t>{1, 0};
      } else {
        want = last ? std::vector<std::int64_t>{0, 2} : std::vector<std::int64_t>{0, 0};
      }
      CHECK(values_of<std::int64_t>(out.at("y")) == want);
    }
  }
}

TEST_CASE("CumSum: exclusive + reverse on a 2-D int32 input along either axis") {
  w::graph g;
  g.add_input(w::value_info("x", INT32, {2, 3}));
  g.add_input(w::value_info("axis", INT32, {}));
  g.add_output(w::value_info("y", INT32, {2, 3}));
  g.add_node(w::node("CumSum", {"x", "axis"}, {"y"}, "cs",
                     {w::attr_int("exclusive", 1), w::attr_int("reverse", 1)}));
  const runtime rt = load(w::model(g, 8, {{"", 14}}));
  const tensor x = make<std::int32_t>(dtype_id::int32, {2, 3}, {1, 2, 3, 4, 5, 6});
  auto run = [&](std::int32_t axis) {
    const auto out = rt.run({{"x", x}, {"axis", make<std::int32_t>(dtype_id::int32, {}, {axis})}});
    return values_of<std::int32_t>(out.at("y"));
  };
  CHECK(run(1) == std::vector<std::int32_t>{5, 3, 0, 11, 6, 0});
  CHECK(run(-1) == std::vector<std::int32_t>{5, 3, 0, 11, 6, 0});
  CHECK(run(0) == std::vector<std::int32_t>{4, 5, 6, 0, 0, 0});
  const std::string e =
      run_error(rt, {{"x", x}, {"axis", make<std::int32_t>(dtype_id::int32, {}, {2})}});
  CHECK(has(e, "'cs'"));
  CHECK(has(e, "axis 2 out of range"));
}

TEST_CASE("Hardmax: coerced to 2-D before opset 13, along one axis from opset 13") {
  for (std::int64_t opset : {11, 13}) {
    w::graph g;
    g.add_input(w::value_info("x", FLOAT, {2, 2, 2}));
    g.add_output(w::value_info("y", FLOAT, {2, 2, 2}));
    g.add_node(w::node("Hardmax", {"x"}, {"y"}, "hm", {w::attr_int("axis", 1)}));
    const runtime rt = load(w::model(g, 8, {{"", opset}}));
    const auto out = rt.run({{"x", f32({2, 2, 2}, {1, 4, 3, 2, 5, 0, 0, 6})}});
    CAPTURE(opset);
    // opset 11: rows [1,4,3,2] and [5,0,0,6]; opset 13: columns of each [2,2] matrix
    CHECK(values_of<float>(out.at("y")) == (opset < 13
                                                ? std::vector<float>{0, 1, 0, 0, 0, 0, 0, 1}
                                                : std::vector<float>{0, 1, 1, 0, 1, 0, 0, 1}));
  }
}
