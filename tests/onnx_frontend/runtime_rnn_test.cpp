// SPDX-License-Identifier: MIT
// The runtime's recurrent operators (runtime/ops_rnn.cpp) beyond the ONNX conformance data: every
// activation function with its default and given alpha / beta, sequence_lens shorter than the
// sequence in forward, reverse and bidirectional directions, layout 1 (states as [batch,
// num_directions, hidden]), clip, GRU's linear_before_reset, LSTM's input_forget, and bad inputs
// failing with a frontend_error that names the node and the culprit. Weights and inputs are small
// dyadic numbers, so most expected values are exact; each is derived in a comment. Models are
// written with the wire helper.
#include <algorithm>
#include <cstdint>
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

constexpr int FLOAT = 1, INT32 = 6;

/// One `op` node named "rnn" whose inputs are graph inputs of the same names ("" = absent);
/// input "L" (sequence_lens) is int32, the others float.
runtime rnn_model(std::string_view op, std::initializer_list<std::string_view> inputs,
                  std::initializer_list<std::string_view> outputs,
                  std::initializer_list<w::msg> attrs, std::int64_t opset = 14) {
  w::graph g;
  for (auto in : inputs) {
    if (!in.empty())
      g.add_input(w::value_info(in, in == "L" ? INT32 : FLOAT, {}, false));
  }
  for (auto out : outputs) {
    if (!out.empty())
      g.add_output(w::value_info(out, FLOAT, {}, false));
  }
  g.add_node(w::node(op, inputs, outputs, "rnn", attrs));
  return load(w::model(g, 8, {{"", opset}}));
}

void check_near(const std::vector<float>& got, const std::vector<double>& want) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i);
    CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-6));
  }
}

}  // namespace

TEST_CASE("RNN: every activation function, with its default and with given alpha / beta") {
  // W = 1, R = 0, no bias, one step: Y = f(x) for the five batch entries x below.
  struct act_case {
    std::string name;
    std::vector<float> alpha, beta;
    std::vector<double> want;
  };
  // x = -2, -0.5, 0, 0.5, 2. Constants: tanh(0.5) = 0.46211715726, tanh(2) = 0.96402758008,
  // e^-2 = 0.13533528324, e^-0.5 = 0.60653065971, tanh(0.25) = 0.24491866240,
  // tanh(1) = 0.76159415596.
  const std::vector<act_case> cases = {
      {"Relu", {}, {}, {0, 0, 0, 0.5, 2}},
      {"Tanh", {}, {}, {-0.96402758008, -0.46211715726, 0, 0.46211715726, 0.96402758008}},
      // 1 / (1 + e^-x): 1 / 8.3890561 = 0.11920292202, 1 / 2.6487212707 = 0.37754066880, ...
      {"Sigmoid", {}, {}, {0.11920292202, 0.37754066880, 0.5, 0.62245933120, 0.88079707798}},
      // Affine's defaults alpha 1, beta 0: the identity; 2x + 1 with alpha 2, beta 1.
      {"Affine", {}, {}, {-2, -0.5, 0, 0.5, 2}},
      {"Affine", {2}, {1}, {-3, 0, 1, 2, 5}},
      // LeakyRelu's default alpha 0.01: -2 -> -0.02, -0.5 -> -0.005.
      {"LeakyRelu", {}, {}, {-0.02, -0.005, 0, 0.5, 2}},
      {"LeakyRelu", {0.5}, {}, {-1, -0.25, 0, 0.5, 2}},
      // ThresholdedRelu: x if x >= alpha (default 1) else 0.
      {"ThresholdedRelu", {}, {}, {0, 0, 0, 0, 2}},
      {"ThresholdedRelu", {0.5}, {}, {0, 0, 0, 0.5, 2}},
      // ScaledTanh alpha tanh(beta x): with no values plain tanh; 2 tanh(x / 2): 2 tanh(1) =
      // 1.52318831191, 2 tanh(0.25) = 0.48983732481.
      {"ScaledTanh", {}, {}, {-0.96402758008, -0.46211715726, 0, 0.46211715726, 0.96402758008}},
      {"ScaledTanh", {2}, {0.5}, {-1.52318831191, -0.48983732481, 0, 0.48983732481, 1.52318831191}},
      // HardSigmoid min(max(alpha x + beta, 0), 1), defaults 0.2 and 0.5: 0.1, 0.4, 0.5, 0.6,
      // 0.9; with alpha 1, beta 0.5: -1.5 -> 0, 0 -> 0, 0.5, 1, 2.5 -> 1.
      {"HardSigmoid", {}, {}, {0.1, 0.4, 0.5, 0.6, 0.9}},
      {"HardSigmoid", {1}, {0.5}, {0, 0, 0.5, 1, 1}},
      // Elu alpha (e^x - 1) below 0, default alpha 1: e^-2 - 1 = -0.86466471676,
      // e^-0.5 - 1 = -0.39346934029; alpha 2 doubles them.
      {"Elu", {}, {}, {-0.86466471676, -0.39346934029, 0, 0.5, 2}},
      {"Elu", {2}, {}, {-1.72932943352, -0.78693868058, 0, 0.5, 2}},
      // x / (1 + |x|): -2/3, -1/3, 0, 1/3, 2/3.
      {"Softsign", {}, {}, {-2.0 / 3, -1.0 / 3, 0, 1.0 / 3, 2.0 / 3}},
      // log(1 + e^x): log(1.13533528324) = 0.12692801104, log(1.60653065971) = 0.47407698418,
      // log 2 = 0.69314718056, and log(1 + e^x) = x + log(1 + e^-x) for x > 0.
      {"Softplus",
       {},
       {},
       {0.12692801104, 0.47407698418, 0.69314718056, 0.97407698418, 2.12692801104}},
  };
  const std::map<std::string, tensor> feeds = {
      {"X", f32({1, 5, 1}, {-2, -0.5f, 0, 0.5f, 2})},
      {"W", f32({1, 1, 1}, {1})},
      {"R", f32({1, 1, 1}, {0})},
  };
  for (const auto& k : cases) {
    CAPTURE(k.name);
    CAPTURE(k.alpha.size());
    w::msg alpha = w::attr_floats("activation_alpha", {});
    w::msg beta = w::attr_floats("activation_beta", {});
    for (float a : k.alpha)
      alpha.f32(w::attr_f::floats, a);
    for (float b : k.beta)
      beta.f32(w::attr_f::floats, b);
    w::msg acts;
    acts.bytes(w::attr_f::name, "activations")
        .bytes(w::attr_f::strings, k.name)
        .varint(w::attr_f::type, 8);  // STRINGS
    const runtime rt = rnn_model("RNN", {"X", "W", "R"}, {"Y", "Yh"},
                                 {acts, alpha, beta, w::attr_int("hidden_size", 1)});
    const auto out = rt.run(feeds);
    check_near(values_of(out.at("Y")), k.want);
    check_near(values_of(out.at("Yh")), k.want);
  }
}

namespace {

/// An "activations" attribute.
w::msg activations(std::initializer_list<std::string_view> names) {
  w::msg a;
  a.bytes(w::attr_f::name, "activations");
  for (auto n : names)
    a.bytes(w::attr_f::strings, n);
  a.varint(w::attr_f::type, 8);  // STRINGS
  return a;
}

}  // namespace

TEST_CASE("RNN bidirectional: Relu forward, LeakyRelu reverse, a batch entry shorter") {
  // hidden 1, input 1, batch 2, seq 3, sequence_lens [3, 2]; W = [1] forward, [-1] reverse,
  // R = 0.5 both, no bias. x of entry 0: 1, 2, -4; of entry 1: 2, 3, (8, past its length).
  // Forward, f = Relu, H starts at 0:
  //   entry 0: relu(1) = 1; relu(2 + 0.5) = 2.5; relu(-4 + 1.25) = 0.       Y_h 0
  //   entry 1: relu(2) = 2; relu(3 + 1) = 4; t2 past the length: Y 0.      Y_h 4
  // Reverse, f = LeakyRelu with alpha 0.5, each entry starts at its last valid step:
  //   entry 0: t2: -(-4) = 4; t1: -2 + 0.5 * 4 = 0; t0: -1 + 0 = -1 -> -0.5. Y_h -0.5
  //   entry 1: t2 skipped (Y 0); t1: -3 -> -1.5; t0: -2 + 0.5 * -1.5 = -2.75 -> -1.375.
  const std::map<std::string, tensor> feeds = {
      {"X", f32({3, 2, 1}, {1, 2, 2, 3, -4, 8})},
      {"W", f32({2, 1, 1}, {1, -1})},
      {"R", f32({2, 1, 1}, {0.5f, 0.5f})},
      {"L", i32({2}, {3, 2})},
  };
  for (std::int64_t opset : {7, 14}) {
    CAPTURE(opset);
    const runtime rt =
        rnn_model("RNN", {"X", "W", "R", "", "L"}, {"Y", "Yh"},
                  {w::attr_string("direction", "bidirectional"), activations({"Relu", "LeakyRelu"}),
                   w::attr_floats("activation_alpha", {0.5f})},
                  opset);
    const auto out = rt.run(feeds);
    CHECK(out.at("Y").shape() == shape_t{3, 2, 2, 1});
    // Y[t][direction][entry]
    CHECK(values_of(out.at("Y")) ==
          std::vector<float>{1, 2, -0.5f, -1.375f, 2.5f, 4, 0, -1.5f, 0, 0, 4, 0});
    CHECK(out.at("Yh").shape() == shape_t{2, 2, 1});
    CHECK(values_of(out.at("Yh")) == std::vector<float>{0, 4, -0.5f, -1.375f});
  }
  // One direction's list serves both directions (names match case-insensitively). Relu in
  // reverse: entry 0: 4, relu(-2 + 2) = 0, relu(-1 + 0) = 0; entry 1: relu(-3) = 0,
  // relu(-2 + 0) = 0. The forward direction is unchanged.
  const runtime both =
      rnn_model("RNN", {"X", "W", "R", "", "L"}, {"", "Yh"},
                {w::attr_string("direction", "bidirectional"), activations({"relu"})});
  CHECK(values_of(both.run(feeds).at("Yh")) == std::vector<float>{0, 4, 0, 0});
}

TEST_CASE("RNN reverse with layout 1, clip, a bias, initial_h and Affine") {
  // layout 1: X [batch 2, seq 2, input 2], initial_h [batch, 1, 1], Y [batch, seq, 1, 1].
  // W = [1, -1], R = 0.5, Wb + Rb = 0.25 + 0.25, clip 2.5, f(v) = 2 v + 0.5.
  // Entry 0 (x: t0 [1, 0], t1 [2, 1]; H = 1), from t1:
  //   t1: 2 - 1 + 0.5 * 1 + 0.5 = 2 (not clipped) -> 4.5
  //   t0: 1 + 0.5 * 4.5 + 0.5 = 3.75 -> clipped to 2.5 -> 5.5
  // Entry 1 (x: t0 [0, 3], t1 [4, 0]; H = -2):
  //   t1: 4 + 0.5 * -2 + 0.5 = 3.5 -> 2.5 -> 5.5
  //   t0: -3 + 0.5 * 5.5 + 0.5 = 0.25 -> 1
  const runtime rt = rnn_model(
      "RNN", {"X", "W", "R", "B", "", "H0"}, {"Y", "Yh"},
      {w::attr_string("direction", "reverse"), w::attr_int("layout", 1),
       w::attr_float("clip", 2.5f), activations({"Affine"}),
       w::attr_floats("activation_alpha", {2}), w::attr_floats("activation_beta", {0.5f})});
  const auto out = rt.run({
      {"X", f32({2, 2, 2}, {1, 0, 2, 1, 0, 3, 4, 0})},
      {"W", f32({1, 1, 2}, {1, -1})},
      {"R", f32({1, 1, 1}, {0.5f})},
      {"B", f32({1, 2}, {0.25f, 0.25f})},
      {"H0", f32({2, 1, 1}, {1, -2})},
  });
  CHECK(out.at("Y").shape() == shape_t{2, 2, 1, 1});
  CHECK(values_of(out.at("Y")) == std::vector<float>{5.5f, 4.5f, 1, 5.5f});
  CHECK(out.at("Yh").shape() == shape_t{2, 1, 1});
  CHECK(values_of(out.at("Yh")) == std::vector<float>{5.5f, 1});
}

TEST_CASE("RNN: an entry of length 0 gives zeros in Y and Y_h") {
  // Entry 1 has length 0: nothing is computed for it; Y_h is 0 (as in ONNX Runtime), not its
  // initial state 7. Entry 0: tanh is not involved (Relu): relu(3 + 0.5 * 1) = 3.5.
  const runtime rt = rnn_model("RNN", {"X", "W", "R", "", "L", "H0"}, {"Y", "Yh"},
                               {w::attr_string("direction", "reverse"), activations({"Relu"})});
  const auto out = rt.run({
      {"X", f32({1, 2, 1}, {3, 5})},
      {"W", f32({1, 1, 1}, {1})},
      {"R", f32({1, 1, 1}, {0.5f})},
      {"L", i32({2}, {1, 0})},
      {"H0", f32({1, 2, 1}, {1, 7})},
  });
  CHECK(values_of(out.at("Y")) == std::vector<float>{3.5f, 0});
  CHECK(values_of(out.at("Yh")) == std::vector<float>{3.5f, 0});
}

TEST_CASE("RNN with no input features or an empty sequence") {
  const runtime rt =
      rnn_model("RNN", {"X", "W", "R", "B", "", "H0"}, {"Y", "Yh"}, {activations({"Relu"})});
  // input_size 0: H = relu(0 + 0.5 * 2 + 0.25 + 0.25) = 1.5.
  auto out = rt.run({
      {"X", f32({1, 1, 0}, {})},
      {"W", f32({1, 1, 0}, {})},
      {"R", f32({1, 1, 1}, {0.5f})},
      {"B", f32({1, 2}, {0.25f, 0.25f})},
      {"H0", f32({1, 1, 1}, {2})},
  });
  CHECK(values_of(out.at("Y")) == std::vector<float>{1.5f});
  CHECK(values_of(out.at("Yh")) == std::vector<float>{1.5f});
  // seq_length 0: Y is empty, and every entry has length 0, so Y_h is 0.
  out = rt.run({
      {"X", f32({0, 2, 1}, {})},
      {"W", f32({1, 1, 1}, {1})},
      {"R", f32({1, 1, 1}, {0.5f})},
      {"B", f32({1, 2}, {0.25f, 0.25f})},
      {"H0", f32({1, 2, 1}, {2, 3})},
  });
  CHECK(out.at("Y").shape() == shape_t{0, 1, 2, 1});
  CHECK(values_of(out.at("Yh")) == std::vector<float>{0, 0});
}

TEST_CASE("GRU: linear_before_reset 0 and 1 with HardSigmoid and Relu") {
  // hidden 1, input 1, batch 1, seq 2, H0 = 1. Gates z, r, h: W = [1, 1, 1], R = [-1, -2, 2],
  // B = [Wb 0, 0, 0.5 | Rb 0, 0, 1]. f = HardSigmoid(0.25, 0.5), g = Relu. x = 2, then 1.
  // linear_before_reset 0: n = g(x + (r H) 2 + 1 + 0.5)
  //   t0: z = f(2 - 1) = 0.75, r = f(2 - 2) = 0.5, n = relu(2 + 1 + 1.5) = 4.5,
  //       H = 0.25 * 4.5 + 0.75 * 1 = 1.875
  //   t1: z = f(1 - 1.875) = 0.28125, r = f(1 - 3.75) = f(-2.75) = 0 (clamped),
  //       n = relu(1 + 0 + 1.5) = 2.5, H = 0.71875 * 2.5 + 0.28125 * 1.875 = 2.32421875
  // linear_before_reset 1: n = g(x + r (H 2 + 1) + 0.5)
  //   t0: z = 0.75, r = 0.5, n = relu(2 + 0.5 * 3 + 0.5) = 4, H = 0.25 * 4 + 0.75 = 1.75
  //   t1: z = f(1 - 1.75) = 0.3125, r = f(1 - 3.5) = 0, n = relu(1 + 0 + 0.5) = 1.5,
  //       H = 0.6875 * 1.5 + 0.3125 * 1.75 = 1.578125
  const std::map<std::string, tensor> feeds = {
      {"X", f32({2, 1, 1}, {2, 1})},      {"W", f32({1, 3, 1}, {1, 1, 1})},
      {"R", f32({1, 3, 1}, {-1, -2, 2})}, {"B", f32({1, 6}, {0, 0, 0.5f, 0, 0, 1})},
      {"H0", f32({1, 1, 1}, {1})},
  };
  for (std::int64_t lbr : {0, 1}) {
    CAPTURE(lbr);
    const runtime rt = rnn_model(
        "GRU", {"X", "W", "R", "B", "", "H0"}, {"Y", "Yh"},
        {w::attr_int("hidden_size", 1), w::attr_int("linear_before_reset", lbr),
         activations({"HardSigmoid", "Relu"}), w::attr_floats("activation_alpha", {0.25f}),
         w::attr_floats("activation_beta", {0.5f})});
    const auto out = rt.run(feeds);
    const std::vector<float> y =
        lbr ? std::vector<float>{1.75f, 1.578125f} : std::vector<float>{1.875f, 2.32421875f};
    CHECK(values_of(out.at("Y")) == y);
    CHECK(values_of(out.at("Yh")) == std::vector<float>{y[1]});
  }
}

TEST_CASE("GRU bidirectional with layout 1, initial_h and a shorter entry") {
  // hidden 1, input 1, batch 2, seq 3, sequence_lens [3, 1]. W = R = [0, 0, 1] in both
  // directions, no bias: z and r are f(0). The alphas / betas are consumed in list order by the
  // functions that take them: forward HardSigmoid(0.25, 0.5), Relu; reverse HardSigmoid(0.5,
  // 0.25), Affine(2, -1). So forward: z = r = 0.5, n = relu(x + 0.5 H), H' = 0.5 n + 0.5 H;
  // reverse: z = r = 0.25, n = 2 (x + 0.25 H) - 1, H' = 0.75 n + 0.25 H.
  // initial_h is [batch, directions, 1]: entry 0 [2, 4], entry 1 [-2, 8].
  // Forward, entry 0 (x 1, 2, 3): n = relu(1 + 1) = 2, H = 2; n = relu(2 + 1) = 3, H = 2.5;
  //   n = relu(3 + 1.25) = 4.25, H = 3.375.
  // Forward, entry 1 (x 4): n = relu(4 - 1) = 3, H = 1.5 - 1 = 0.5; then Y 0.
  // Reverse, entry 0 from t2: n = 2 (3 + 1) - 1 = 7, H = 5.25 + 1 = 6.25;
  //   t1: n = 2 (2 + 1.5625) - 1 = 6.125, H = 4.59375 + 1.5625 = 6.15625;
  //   t0: n = 2 (1 + 1.5390625) - 1 = 4.078125, H = 3.05859375 + 1.5390625 = 4.59765625.
  // Reverse, entry 1 from t0: n = 2 (4 + 2) - 1 = 11, H = 8.25 + 2 = 10.25.
  const runtime rt =
      rnn_model("GRU", {"X", "W", "R", "", "L", "H0"}, {"Y", "Yh"},
                {w::attr_string("direction", "bidirectional"), w::attr_int("layout", 1),
                 activations({"HardSigmoid", "Relu", "HardSigmoid", "Affine"}),
                 w::attr_floats("activation_alpha", {0.25f, 0.5f, 2}),
                 w::attr_floats("activation_beta", {0.5f, 0.25f, -1})});
  const auto out = rt.run({
      {"X", f32({2, 3, 1}, {1, 2, 3, 4, 100, 100})},
      {"W", f32({2, 3, 1}, {0, 0, 1, 0, 0, 1})},
      {"R", f32({2, 3, 1}, {0, 0, 1, 0, 0, 1})},
      {"L", i32({2}, {3, 1})},
      {"H0", f32({2, 2, 1}, {2, 4, -2, 8})},
  });
  // Y [batch, seq, direction, 1]
  CHECK(out.at("Y").shape() == shape_t{2, 3, 2, 1});
  CHECK(values_of(out.at("Y")) == std::vector<float>{2, 4.59765625f, 2.5f, 6.15625f, 3.375f, 6.25f,
                                                     0.5f, 10.25f, 0, 0, 0, 0});
  CHECK(out.at("Yh").shape() == shape_t{2, 2, 1});
  CHECK(values_of(out.at("Yh")) == std::vector<float>{3.375f, 4.59765625f, 0.5f, 10.25f});
}

TEST_CASE("GRU with only Y_h and the default activations") {
  // W = R = 0, B = 0: z = r = sigmoid(0) = 0.5, n = tanh(0) = 0, so every step halves H:
  // H0 = 3 -> 1.5 -> 0.75 after two steps. Y is absent from the node.
  const runtime rt =
      rnn_model("GRU", {"X", "W", "R", "", "", "H0"}, {"", "Yh"}, {w::attr_int("hidden_size", 1)});
  const auto out = rt.run({
      {"X", f32({2, 1, 1}, {5, -5})},
      {"W", f32({1, 3, 1}, {0, 0, 0})},
      {"R", f32({1, 3, 1}, {0, 0, 0})},
      {"H0", f32({1, 1, 1}, {3})},
  });
  CHECK(out.count("Y") == 0);
  CHECK(values_of(out.at("Yh")) == std::vector<float>{0.75f});
}

TEST_CASE("RNN, GRU and LSTM with a batch of 0 give empty outputs") {
  // The step loops used to offset their empty per-batch buffers' null data (undefined
  // behaviour, reported by UBSan in the asan preset).
  for (const char* op : {"RNN", "GRU", "LSTM"}) {
    CAPTURE(op);
    const std::int64_t gates = std::string_view(op) == "RNN" ? 1 : op[0] == 'G' ? 3 : 4;
    const auto g = static_cast<std::size_t>(gates);
    for (std::int64_t layout : {0, 1}) {
      CAPTURE(layout);
      const runtime rt = rnn_model(op, {"X", "W", "R", "B"}, {"Y", "Yh"},
                                   {w::attr_int("hidden_size", 2), w::attr_int("layout", layout)});
      const auto out = rt.run({
          {"X", layout == 1 ? f32({0, 3, 1}, {}) : f32({3, 0, 1}, {})},
          {"W", f32({1, 2 * gates, 1}, std::vector<float>(2 * g, 0.5f))},
          {"R", f32({1, 2 * gates, 2}, std::vector<float>(4 * g, 0.5f))},
          {"B", f32({1, 4 * gates}, std::vector<float>(4 * g, 0.25f))},
      });
      CHECK(out.at("Y").shape() == (layout == 1 ? shape_t{0, 3, 1, 2} : shape_t{3, 1, 0, 2}));
      CHECK(out.at("Yh").shape() == (layout == 1 ? shape_t{0, 1, 2} : shape_t{1, 0, 2}));
    }
  }
}

TEST_CASE("LSTM bidirectional with non-default activations and a shorter entry") {
  // hidden 1, input 1, batch 2, seq 2, sequence_lens [2, 1], R = 0, no bias or initial state.
  // Gates i, o, f, c. Forward: W = [1, 1, -1, 1], f = HardSigmoid(0.25, 0.5), g = h = Relu.
  // Reverse: W = [1, 0.5, 1, -1], f = HardSigmoid(0.5, 0.5), g = Affine(2, 1),
  // h = LeakyRelu(0.25). x of entry 0: 2, 0; of entry 1: 1, (100 past its length).
  // Forward, entry 0: t0: i = o = f(2) = 1, f = f(-2) = 0, c = relu(2) = 2: C = 2, H = 2;
  //   t1: i = o = f = f(0) = 0.5, c = 0: C = 1, H = 0.5 relu(1) = 0.5.
  // Forward, entry 1: t0: i = o = f(1) = 0.75, f = f(-1) = 0.25, c = 1: C = 0.75,
  //   H = 0.75 * 0.75 = 0.5625.
  // Reverse, entry 0 from t1 (x 0): i = o = f = 0.5, c = g(0) = 1: C = 0.5, H = 0.5 * 0.5 =
  //   0.25; t0 (x 2): i = f(2) = 1, o = f(1) = 1, f = f(2) = 1, c = g(-2) = -3:
  //   C = 0.5 - 3 = -2.5, H = leaky(-2.5) = -0.625.
  // Reverse, entry 1 from t0 (x 1): i = f(1) = 1, o = f(0.5) = 0.75, f = 1, c = g(-1) = -1:
  //   C = -1, H = 0.75 * -0.25 = -0.1875.
  const runtime rt =
      rnn_model("LSTM", {"X", "W", "R", "", "L"}, {"Y", "Yh", "Yc"},
                {w::attr_string("direction", "bidirectional"), w::attr_int("hidden_size", 1),
                 activations({"HardSigmoid", "Relu", "Relu", "HardSigmoid", "Affine", "LeakyRelu"}),
                 w::attr_floats("activation_alpha", {0.25f, 0.5f, 2, 0.25f}),
                 w::attr_floats("activation_beta", {0.5f, 0.5f, 1})});
  const auto out = rt.run({
      {"X", f32({2, 2, 1}, {2, 1, 0, 100})},
      {"W", f32({2, 4, 1}, {1, 1, -1, 1, 1, 0.5f, 1, -1})},
      {"R", f32({2, 4, 1}, {0, 0, 0, 0, 0, 0, 0, 0})},
      {"L", i32({2}, {2, 1})},
  });
  // Y[t][direction][entry]
  CHECK(values_of(out.at("Y")) ==
        std::vector<float>{2, 0.5625f, -0.625f, -0.1875f, 0.5f, 0, 0.25f, 0});
  CHECK(values_of(out.at("Yh")) == std::vector<float>{0.5f, 0.5625f, -0.625f, -0.1875f});
  CHECK(values_of(out.at("Yc")) == std::vector<float>{1, 0.75f, -2.5f, -1});
}

TEST_CASE("LSTM: clip bounds the gate inputs but not the cell state, and input_forget") {
  // One step, x = 2, W = [1, 1, -3, 1], C0 = 3, H0 = 0, identity activations (Affine with its
  // defaults), clip 0.5: i = o = c = clip(2) = 0.5, f = clip(-6) = -0.5.
  //   input_forget 0: C = -0.5 * 3 + 0.5 * 0.5 = -1.25, H = 0.5 * -1.25 = -0.625
  //   input_forget 1: f = 1 - i = 0.5: C = 1.5 + 0.25 = 1.75 (beyond the clip),
  //   H = 0.5 * 1.75 = 0.875
  for (std::int64_t input_forget : {0, 1}) {
    CAPTURE(input_forget);
    const runtime rt =
        rnn_model("LSTM", {"X", "W", "R", "", "", "H0", "C0"}, {"Y", "Yh", "Yc"},
                  {w::attr_float("clip", 0.5f), w::attr_int("input_forget", input_forget),
                   activations({"Affine", "Affine", "Affine"})});
    const auto out = rt.run({
        {"X", f32({1, 1, 1}, {2})},
        {"W", f32({1, 4, 1}, {1, 1, -3, 1})},
        {"R", f32({1, 4, 1}, {0, 0, 0, 0})},
        {"H0", f32({1, 1, 1}, {0})},
        {"C0", f32({1, 1, 1}, {3})},
    });
    const float c = input_forget ? 1.75f : -1.25f;
    CHECK(values_of(out.at("Yc")) == std::vector<float>{c});
    CHECK(values_of(out.at("Yh")) == std::vector<float>{0.5f * c});
    CHECK(values_of(out.at("Y")) == std::vector<float>{0.5f * c});
  }
}

TEST_CASE("LSTM bidirectional with layout 1 reads and writes states as [batch, directions]") {
  // W = R = 0, no bias, default activations: i = o = f = sigmoid(0) = 0.5, c = tanh(0) = 0, so
  // one step gives C = 0.5 C0 and H = 0.5 tanh(C). C0 [batch, direction]: [[4, 8], [-2, 6]] ->
  // C [[2, 4], [-1, 3]]; tanh(2) = 0.96402758008, tanh(4) = 0.99932929974,
  // tanh(1) = 0.76159415596, tanh(3) = 0.99505475369.
  const runtime rt =
      rnn_model("LSTM", {"X", "W", "R", "", "", "H0", "C0"}, {"Y", "Yh", "Yc"},
                {w::attr_string("direction", "bidirectional"), w::attr_int("layout", 1)});
  const auto out = rt.run({
      {"X", f32({2, 1, 1}, {1, 1})},
      {"W", f32({2, 4, 1}, std::vector<float>(8, 0.0f))},
      {"R", f32({2, 4, 1}, std::vector<float>(8, 0.0f))},
      {"H0", f32({2, 2, 1}, {9, 9, 9, 9})},
      {"C0", f32({2, 2, 1}, {4, 8, -2, 6})},
  });
  CHECK(out.at("Yc").shape() == shape_t{2, 2, 1});
  CHECK(values_of(out.at("Yc")) == std::vector<float>{2, 4, -1, 3});
  const std::vector<double> h{0.5 * 0.96402758008, 0.5 * 0.99932929974, 0.5 * -0.76159415596,
                              0.5 * 0.99505475369};
  check_near(values_of(out.at("Yh")), h);
  CHECK(out.at("Y").shape() == shape_t{2, 1, 2, 1});
  check_near(values_of(out.at("Y")), h);
}

TEST_CASE("recurrent ops: bad shapes, lengths and attributes fail naming the node and culprit") {
  // A valid RNN / GRU / LSTM input set (hidden 2, input 3, batch 2, seq 3) that each case breaks.
  struct op_case {
    std::string op;
    std::int64_t gates;
  };
  for (const op_case& k : {op_case{"RNN", 1}, op_case{"GRU", 3}, op_case{"LSTM", 4}}) {
    // (no structured binding: clang 14 cannot capture one in the lambdas below)
    const std::string op = k.op;
    const std::int64_t g = k.gates;
    CAPTURE(op);
    auto feeds = [&] {
      return std::map<std::string, tensor>{
          {"X", f32({3, 2, 3}, std::vector<float>(18, 0.5f))},
          {"W", f32({1, 2 * g, 3}, std::vector<float>(static_cast<std::size_t>(6 * g), 0.1f))},
          {"R", f32({1, 2 * g, 2}, std::vector<float>(static_cast<std::size_t>(4 * g), 0.1f))},
          {"B", f32({1, 4 * g}, std::vector<float>(static_cast<std::size_t>(4 * g), 0.0f))},
          {"L", i32({2}, {3, 1})},
          {"H0", f32({1, 2, 2}, {0, 0, 0, 0})},
      };
    };
    auto model = [&](std::initializer_list<w::msg> attrs) {
      return rnn_model(op, {"X", "W", "R", "B", "L", "H0"}, {"Y", "Yh"}, attrs);
    };
    const runtime good = model({w::attr_int("hidden_size", 2)});
    REQUIRE(run_error(good, feeds()).empty());
    auto expect = [&](const runtime& rt, const std::map<std::string, tensor>& f,
                      std::string_view culprit) {
      const std::string e = run_error(rt, f);
      CAPTURE(e);
      CHECK(has(e, "node 'rnn' (" + op + ")"));
      CHECK(has(e, culprit));
    };
    auto with = [&](const std::string& name, tensor t) {
      auto f = feeds();
      f[name] = std::move(t);
      return f;
    };
    expect(good, with("W", f32({2 * g, 3}, std::vector<float>(static_cast<std::size_t>(6 * g)))),
           "W [" + std::to_string(2 * g) + ",3] is not 3-D");
    expect(good, with("X", f32({6, 3}, std::vector<float>(18))), "X [6,3] is not 3-D");
    expect(good, with("R", f32({1, 2 * g, 3}, std::vector<float>(static_cast<std::size_t>(6 * g)))),
           "R has shape [1," + std::to_string(2 * g) + ",3], expected [1," + std::to_string(2 * g) +
               ",2]");
    expect(good, with("W", f32({1, 2 * g, 2}, std::vector<float>(static_cast<std::size_t>(4 * g)))),
           "W has shape [1," + std::to_string(2 * g) + ",2], expected [1," + std::to_string(2 * g) +
               ",3]");
    expect(good, with("B", f32({1, 2 * g}, std::vector<float>(static_cast<std::size_t>(2 * g)))),
           "B has shape [1," + std::to_string(2 * g) + "], expected [1," + std::to_string(4 * g) +
               "]");
    expect(good, with("H0", f32({2, 1, 2}, {0, 0, 0, 0})),
           "initial_h has shape [2,1,2], expected [1,2,2]");
    expect(good, with("L", i32({2}, {3, 4})), "sequence_lens[1] = 4 is outside [0, 3]");
    expect(good, with("L", i32({2}, {-1, 2})), "sequence_lens[0] = -1 is outside [0, 3]");
    expect(good, with("L", i32({3}, {1, 1, 1})), "sequence_lens has shape [3], expected [2]");
    // hidden_size 3 needs W of dimension 1 = gates * 3.
    expect(model({w::attr_int("hidden_size", 3)}), feeds(),
           "hidden_size 3 disagrees with W [1," + std::to_string(2 * g) + ",3]");
    expect(model({w::attr_int("hidden_size", 2), activations({"Swish"})}), feeds(),
           "unknown activation 'Swish'");
    expect(model({w::attr_int("hidden_size", 2),
                  activations({"Relu", "Relu", "Relu", "Relu", "Relu"})}),
           feeds(), "activations holds 5 names, expected " + std::to_string(g == 1 ? 1 : g - 1));
    expect(model({w::attr_string("direction", "sideways")}), feeds(),
           "direction 'sideways' is not forward, reverse or bidirectional");
    // A bidirectional op needs W for two directions.
    expect(model({w::attr_string("direction", "bidirectional")}), feeds(),
           "W has shape [1," + std::to_string(2 * g) + ",3], expected [2,");
    expect(model({w::attr_int("layout", 2)}), feeds(), "layout 2 is not 0 or 1");
    expect(model({w::attr_float("clip", -1.0f)}), feeds(), "clip -1.000000 is not positive");
  }
}

TEST_CASE("LSTM: a wrong initial_c or P shape fails naming the input") {
  const runtime rt = rnn_model("LSTM", {"X", "W", "R", "", "", "", "C0", "P"}, {"Y"}, {});
  auto feeds = [] {
    return std::map<std::string, tensor>{
        {"X", f32({1, 1, 1}, {1})},          {"W", f32({1, 4, 1}, {0, 0, 0, 0})},
        {"R", f32({1, 4, 1}, {0, 0, 0, 0})}, {"C0", f32({1, 1, 1}, {0})},
        {"P", f32({1, 3}, {0, 0, 0})},
    };
  };
  REQUIRE(run_error(rt, feeds()).empty());
  auto f = feeds();
  f["C0"] = f32({1, 2, 1}, {0, 0});
  std::string e = run_error(rt, f);
  CHECK(has(e, "node 'rnn' (LSTM)"));
  CHECK(has(e, "initial_c has shape [1,2,1], expected [1,1,1]"));
  f = feeds();
  f["P"] = f32({1, 4}, {0, 0, 0, 0});
  e = run_error(rt, f);
  CHECK(has(e, "P has shape [1,4], expected [1,3]"));
}
