// SPDX-License-Identifier: MIT
// Hand-derived cases for the runtime's loss operators (runtime/ops_loss.cpp):
// NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss with each reduction, class weights with
// ignore_index (the mean divides by the weights of the counted targets only), the k-dimensional
// layout [N, C, d1, ...], float64, the log_prob output, a numerically stable log-softmax, and
// the errors (target out of range naming its position and value, shapes, types, reduction).
// Models are written with the wire helper.
#include <cmath>
#include <cstdint>
#include <initializer_list>
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

constexpr int FLOAT = 1, INT32 = 6, INT64 = 7, DOUBLE = 11;

/// z (, lp) = op(x, t [, w]) in node "loss"; weight_type 0 leaves the weight out. Shapes are not
/// declared, so one model takes inputs of any shape.
runtime loss_model(std::string_view op, std::initializer_list<w::msg> attrs, int x_type = FLOAT,
                   int t_type = INT64, int weight_type = 0, bool log_prob = false,
                   std::int64_t opset = 13) {
  w::graph g;
  g.add_input(w::value_info("x", x_type, {}, false));
  g.add_input(w::value_info("t", t_type, {}, false));
  if (weight_type != 0)
    g.add_input(w::value_info("w", weight_type, {}, false));
  g.add_output(w::value_info("z", x_type, {}, false));
  if (log_prob)
    g.add_output(w::value_info("lp", x_type, {}, false));
  if (weight_type != 0 && log_prob) {
    g.add_node(w::node(op, {"x", "t", "w"}, {"z", "lp"}, "loss", attrs));
  } else if (weight_type != 0) {
    g.add_node(w::node(op, {"x", "t", "w"}, {"z"}, "loss", attrs));
  } else if (log_prob) {
    g.add_node(w::node(op, {"x", "t"}, {"z", "lp"}, "loss", attrs));
  } else {
    g.add_node(w::node(op, {"x", "t"}, {"z"}, "loss", attrs));
  }
  return load(w::model(g, 8, {{"", opset}}));
}

constexpr std::string_view nll = "NegativeLogLikelihoodLoss";
constexpr std::string_view sce = "SoftmaxCrossEntropyLoss";

void check_near(const std::vector<float>& got, const std::vector<double>& want) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i);
    CHECK(static_cast<double>(got[i]) == doctest::Approx(want[i]).epsilon(1e-6));
  }
}

}  // namespace

TEST_CASE("NegativeLogLikelihoodLoss: none, sum and mean (the default) on [N, C]") {
  // x = [[-1, -2, -3], [-0.5, -1.5, -2.5]], t = [2, 0]: losses -x[0][2] = 3, -x[1][0] = 0.5.
  const std::map<std::string, tensor> feeds{{"x", f32({2, 3}, {-1, -2, -3, -0.5f, -1.5f, -2.5f})},
                                            {"t", i64({2}, {2, 0})}};
  const auto none = loss_model(nll, {w::attr_string("reduction", "none")}).run(feeds).at("z");
  CHECK(none.shape() == shape_t{2});
  CHECK(values_of<float>(none) == std::vector<float>{3.0f, 0.5f});
  const auto sum = loss_model(nll, {w::attr_string("reduction", "sum")}).run(feeds).at("z");
  CHECK(sum.shape() == shape_t{});
  CHECK(values_of<float>(sum) == std::vector<float>{3.5f});  // 3 + 0.5
  const auto mean = loss_model(nll, {w::attr_string("reduction", "mean")}).run(feeds).at("z");
  CHECK(values_of<float>(mean) == std::vector<float>{1.75f});  // 3.5 / 2
  const auto dflt = loss_model(nll, {}).run(feeds).at("z");
  CHECK(values_of<float>(dflt) == std::vector<float>{1.75f});
}

TEST_CASE("NegativeLogLikelihoodLoss: weights with ignore_index, the mean's divisor") {
  // x = [[-1, -2], [-3, -4], [-5, -6]], t = [1, 0, 1], w = [2, 0.25].
  // Without ignore_index: losses 2 * 0.25 = 0.5, 3 * 2 = 6, 6 * 0.25 = 1.5; sum 8;
  // mean 8 / (0.25 + 2 + 0.25) = 3.2.
  // ignore_index 0 drops position 1 and its weight: losses [0.5, 0, 1.5], sum 2,
  // mean 2 / (0.25 + 0.25) = 4.
  const std::map<std::string, tensor> feeds{{"x", f32({3, 2}, {-1, -2, -3, -4, -5, -6})},
                                            {"t", i64({3}, {1, 0, 1})},
                                            {"w", f32({2}, {2.0f, 0.25f})}};
  auto run = [&](const char* red, std::initializer_list<std::int64_t> ignore) {
    std::vector<w::msg> attrs{w::attr_string("reduction", red)};
    for (auto i : ignore)
      attrs.push_back(w::attr_int("ignore_index", i));
    const runtime rt = attrs.size() == 1
                           ? loss_model(nll, {attrs[0]}, FLOAT, INT64, FLOAT)
                           : loss_model(nll, {attrs[0], attrs[1]}, FLOAT, INT64, FLOAT);
    return values_of<float>(rt.run(feeds).at("z"));
  };
  CHECK(run("none", {}) == std::vector<float>{0.5f, 6.0f, 1.5f});
  CHECK(run("sum", {}) == std::vector<float>{8.0f});
  CHECK(run("mean", {}) == std::vector<float>{3.2f});
  CHECK(run("none", {0}) == std::vector<float>{0.5f, 0.0f, 1.5f});
  CHECK(run("sum", {0}) == std::vector<float>{2.0f});
  CHECK(run("mean", {0}) == std::vector<float>{4.0f});
}

TEST_CASE("NegativeLogLikelihoodLoss: a negative ignore_index outside the class range is skipped") {
  // t = [-1, 1] with ignore_index -1: only position 1 counts, loss -x[1][1] = 4; no weights,
  // so the mean divides by the one counted target: 4.
  const runtime rt = loss_model(nll, {w::attr_int("ignore_index", -1)});
  const auto out = rt.run({{"x", f32({2, 2}, {-1, -2, -3, -4})}, {"t", i64({2}, {-1, 1})}}).at("z");
  CHECK(values_of<float>(out) == std::vector<float>{4.0f});
}

TEST_CASE("NegativeLogLikelihoodLoss: every target ignored makes the mean 0 / 0 = NaN") {
  const runtime rt = loss_model(nll, {w::attr_int("ignore_index", 1)});
  const auto out = rt.run({{"x", f32({2, 2}, {-1, -2, -3, -4})}, {"t", i64({2}, {1, 1})}});
  CHECK(std::isnan(values_of<float>(out.at("z"))[0]));
}

TEST_CASE("NegativeLogLikelihoodLoss: the k-dimensional layout [N, C, d1] with int32 targets") {
  // x[n][c][d]: n0: c0 [-1, -2], c1 [-3, -4]; n1: c0 [-5, -6], c1 [-7, -8].
  // t = [[1, 0], [0, 1]] picks x[0][1][0] = -3, x[0][0][1] = -2, x[1][0][0] = -5,
  // x[1][1][1] = -8: losses [[3, 2], [5, 8]], sum 18, mean 4.5.
  const std::map<std::string, tensor> feeds{{"x", f32({2, 2, 2}, {-1, -2, -3, -4, -5, -6, -7, -8})},
                                            {"t", i32({2, 2}, {1, 0, 0, 1})}};
  const auto none =
      loss_model(nll, {w::attr_string("reduction", "none")}, FLOAT, INT32).run(feeds).at("z");
  CHECK(none.shape() == shape_t{2, 2});
  CHECK(values_of<float>(none) == std::vector<float>{3, 2, 5, 8});
  const auto sum =
      loss_model(nll, {w::attr_string("reduction", "sum")}, FLOAT, INT32).run(feeds).at("z");
  CHECK(values_of<float>(sum) == std::vector<float>{18});
  const auto mean = loss_model(nll, {}, FLOAT, INT32).run(feeds).at("z");
  CHECK(values_of<float>(mean) == std::vector<float>{4.5f});
}

TEST_CASE("NegativeLogLikelihoodLoss: float64 input and weight, opset 12") {
  // x = [[-0.1, -0.2], [-0.3, -0.4]], t = [0, 1], w = [3, 1]: losses 0.3, 0.4 (up to rounding of
  // 0.1 * 3), sum 0.7, mean 0.7 / 4 = 0.175.
  const std::map<std::string, tensor> feeds{{"x", f64({2, 2}, {-0.1, -0.2, -0.3, -0.4})},
                                            {"t", i64({2}, {0, 1})},
                                            {"w", f64({2}, {3.0, 1.0})}};
  const runtime rt = loss_model(nll, {}, DOUBLE, INT64, DOUBLE, false, 12);
  const auto out = rt.run(feeds).at("z");
  REQUIRE(out.type() == dtype_id::float64);
  CHECK(values_of<double>(out)[0] == doctest::Approx(0.175).epsilon(1e-14));
}

TEST_CASE("SoftmaxCrossEntropyLoss: log_prob and the loss on [N, C]") {
  // x = [0, ln 3]: softmax [1/4, 3/4], log_prob [ln(1/4), ln(3/4)] = [-1.3862944, -0.2876821];
  // t = 0: loss -ln(1/4) = ln 4 = 1.3862944.
  const runtime rt = loss_model(sce, {}, FLOAT, INT64, 0, true);
  const auto out =
      rt.run({{"x", f32({1, 2}, {0.0f, static_cast<float>(std::log(3.0))})}, {"t", i64({1}, {0})}});
  CHECK(out.at("lp").shape() == shape_t{1, 2});
  check_near(values_of<float>(out.at("lp")), {std::log(0.25), std::log(0.75)});
  check_near(values_of<float>(out.at("z")), {std::log(4.0)});
}

TEST_CASE("SoftmaxCrossEntropyLoss: the log-softmax is stable for scores of +-1000") {
  // Each row holds two equal scores: log_prob -ln 2 = -0.6931472 for both classes, whatever
  // the scores' size (exp(1000) overflows and exp(-1000) underflows without the max shift).
  const runtime rt = loss_model(sce, {w::attr_string("reduction", "none")}, FLOAT, INT64, 0, true);
  const auto out =
      rt.run({{"x", f32({2, 2}, {1000, 1000, -1000, -1000})}, {"t", i64({2}, {0, 1})}});
  check_near(values_of<float>(out.at("z")), {std::log(2.0), std::log(2.0)});
  const double h = -std::log(2.0);
  check_near(values_of<float>(out.at("lp")), {h, h, h, h});
}

TEST_CASE("SoftmaxCrossEntropyLoss: [N, C, d1] with weights, ignore_index and log_prob") {
  // x[0][c][d]: c0 [0, 0], c1 [0, ln 2], c2 [0, ln 5].
  // d0: scores [0, 0, 0], log_prob -ln 3 each. d1: softmax [1/8, 2/8, 5/8], log_prob
  // [-ln 8, -ln 4, ln(5/8)]. t = [[2, 1]], w = [1, 2, 3].
  // Losses: d0 (class 2, weight 3) 3 ln 3 = 3.2958369; d1 (class 1, weight 2) 2 ln 4 = 2.7725887.
  // sum 6.0684256, mean 6.0684256 / (3 + 2) = 1.2136851.
  // ignore_index 2 drops d0: losses [0, 2 ln 4], mean 2 ln 4 / 2 = ln 4 = 1.3862944.
  const std::map<std::string, tensor> feeds{
      {"x", f32({1, 3, 2}, {0, 0, 0, static_cast<float>(std::log(2.0)), 0,
                            static_cast<float>(std::log(5.0))})},
      {"t", i64({1, 2}, {2, 1})},
      {"w", f32({3}, {1, 2, 3})}};
  const double l3 = std::log(3.0), l4 = std::log(4.0);
  auto run = [&](std::initializer_list<w::msg> attrs) {
    return loss_model(sce, attrs, FLOAT, INT64, FLOAT, true).run(feeds);
  };
  const auto none = run({w::attr_string("reduction", "none")});
  CHECK(none.at("z").shape() == shape_t{1, 2});
  check_near(values_of<float>(none.at("z")), {3 * l3, 2 * l4});
  CHECK(none.at("lp").shape() == shape_t{1, 3, 2});
  check_near(values_of<float>(none.at("lp")),
             {-l3, -std::log(8.0), -l3, -l4, -l3, std::log(5.0 / 8.0)});
  check_near(values_of<float>(run({w::attr_string("reduction", "sum")}).at("z")),
             {3 * l3 + 2 * l4});
  check_near(values_of<float>(run({}).at("z")), {(3 * l3 + 2 * l4) / 5});
  const auto ignored = run({w::attr_string("reduction", "none"), w::attr_int("ignore_index", 2)});
  check_near(values_of<float>(ignored.at("z")), {0.0, 2 * l4});
  check_near(values_of<float>(run({w::attr_int("ignore_index", 2)}).at("z")), {l4});
}

TEST_CASE("SoftmaxCrossEntropyLoss: float64 scores without the log_prob output") {
  // x = [[1, 1, 1]] (log_prob -ln 3 each), t = [2]: loss ln 3 = 1.0986122886681098.
  const runtime rt = loss_model(sce, {}, DOUBLE);
  const auto out = rt.run({{"x", f64({1, 3}, {1, 1, 1})}, {"t", i64({1}, {2})}}).at("z");
  REQUIRE(out.type() == dtype_id::float64);
  CHECK(values_of<double>(out)[0] == doctest::Approx(std::log(3.0)).epsilon(1e-14));
}

TEST_CASE("loss operators: a target outside the class range fails naming its position and value") {
  for (std::string_view op : {nll, sce}) {
    CAPTURE(op);
    const runtime rt = loss_model(op, {});
    std::string id;
    std::string e =
        run_error(rt, {{"x", f32({2, 3}, {-1, -2, -3, -4, -5, -6})}, {"t", i64({2}, {1, 3})}}, &id);
    CAPTURE(e);
    CHECK(id == "quark.onnx.runtime");
    CHECK(has(e, "node 'loss' (" + std::string(op) + ")"));
    CHECK(has(e, "target 't'[1] is 3, outside [0, 3) (no ignore_index)"));
  }
  // k-dimensional: the multi-index; a negative target that is not the ignore_index.
  const runtime rt = loss_model(nll, {w::attr_int("ignore_index", -100)});
  const std::string e = run_error(
      rt, {{"x", f32({1, 2, 3}, {-1, -2, -3, -4, -5, -6})}, {"t", i64({1, 3}, {0, -100, -1})}});
  CAPTURE(e);
  CHECK(has(e, "target 't'[0,2] is -1, outside [0, 2) and not ignore_index -100"));
}

TEST_CASE("loss operators: shape mismatches fail naming the input and both shapes") {
  const runtime rt = loss_model(nll, {});
  std::string id;
  // target [3] for input [2, 3]
  std::string e = run_error(
      rt, {{"x", f32({2, 3}, {-1, -2, -3, -4, -5, -6})}, {"t", i64({3}, {0, 1, 2})}}, &id);
  CAPTURE(e);
  CHECK(id == "quark.onnx.shape");
  CHECK(has(e, "node 'loss'"));
  CHECK(has(e, "target 't' has shape [3], expected [2] for input 'x' of shape [2,3]"));
  // target rank 1 for input [1, 2, 3] (expected [1, 3])
  e = run_error(rt, {{"x", f32({1, 2, 3}, {-1, -2, -3, -4, -5, -6})}, {"t", i64({1}, {0})}});
  CHECK(has(e, "target 't' has shape [1], expected [1,3]"));
  // input of rank 1
  e = run_error(rt, {{"x", f32({3}, {-1, -2, -3})}, {"t", i64({1}, {0})}});
  CHECK(has(e, "input 'x' has shape [3], expected [N, C] or [N, C, d1, ..., dk]"));
  // weight [2] for C = 3
  const runtime weighted = loss_model(sce, {}, FLOAT, INT64, FLOAT);
  e = run_error(weighted,
                {{"x", f32({1, 3}, {1, 2, 3})}, {"t", i64({1}, {0})}, {"w", f32({2}, {1, 1})}},
                &id);
  CAPTURE(e);
  CHECK(id == "quark.onnx.shape");
  CHECK(has(e, "weight 'w' has shape [2], expected [3]"));
}

TEST_CASE("loss operators: wrong element types and an unknown reduction fail naming them") {
  std::string id;
  // float targets
  std::string e = run_error(loss_model(nll, {}, FLOAT, FLOAT),
                            {{"x", f32({1, 2}, {-1, -2})}, {"t", f32({1}, {0})}}, &id);
  CAPTURE(e);
  CHECK(id == "quark.onnx.runtime");
  CHECK(has(e, "target 't' is float32, expected int32 or int64"));
  // a float64 weight for float32 scores
  e = run_error(loss_model(sce, {}, FLOAT, INT64, DOUBLE),
                {{"x", f32({1, 2}, {1, 2})}, {"t", i64({1}, {0})}, {"w", f64({2}, {1, 1})}});
  CHECK(has(e, "weight 'w' is float64, expected float32 like input 'x'"));
  // integer scores
  e = run_error(loss_model(nll, {}, INT32), {{"x", i32({1, 2}, {-1, -2})}, {"t", i64({1}, {0})}});
  CHECK(has(e, "input 'x' is int32, expected float32 or float64"));
  // reduction "avg"
  for (std::string_view op : {nll, sce}) {
    e = run_error(loss_model(op, {w::attr_string("reduction", "avg")}),
                  {{"x", f32({1, 2}, {-1, -2})}, {"t", i64({1}, {0})}}, &id);
    CAPTURE(e);
    CHECK(id == "quark.onnx.runtime");
    CHECK(has(e, "node 'loss' (" + std::string(op) + ")"));
    CHECK(has(e, "attribute 'reduction' is 'avg', expected none, sum or mean"));
  }
}
