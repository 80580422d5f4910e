// SPDX-License-Identifier: MIT
// Hand-derived cases for the runtime's signal operators (runtime/ops_signal.cpp): DFT by radix-2
// FFT (length 8), direct sum (lengths 6 and 7) and Bluestein (lengths 33 and 45) against closed
// forms, inverse and real-inverse transforms, onesided output, dft_length padding and
// truncation, axis as attribute (opset 17) and as input (opset 20); STFT with and without a
// window; the three windows, symmetric and periodic, at size 4; MelWeightMatrix on edges chosen
// so the mel points land on known bins; and the errors, each naming its culprit.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <map>
#include <numbers>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <doctest/doctest.h>

#include <quark/dtype/convert.hpp>
#include <quark/onnx/runtime.hpp>

#include "io_wire.hpp"
#include "runtime_test_util.hpp"

namespace w = io_wire;
using namespace runtime_test;

namespace {

constexpr int FLOAT = 1, INT32 = 6, INT64 = 7, FLOAT16 = 10, DOUBLE = 11;
constexpr double pi = std::numbers::pi;

/// An input or output of unknown shape.
w::msg any(std::string_view name, int type) {
  return w::value_info(name, type, {}, false);
}

/// One node `op` named "sig" with the given inputs ("" = absent), all of them graph inputs of
/// the given types, and one output y of type out_type.
runtime one_node(std::string_view op, const std::vector<std::pair<std::string, int>>& inputs,
                 int out_type, std::initializer_list<w::msg> attrs = {}, std::int64_t opset = 17) {
  w::graph g;
  w::msg node;
  for (const auto& [name, type] : inputs) {
    node.bytes(1, name);
    if (!name.empty())
      g.add_input(any(name, type));
  }
  node.bytes(2, "y").bytes(3, "sig").bytes(4, op);
  for (const auto& a : attrs)
    node.sub(5, a);
  g.add_node(node);
  g.add_output(any("y", out_type));
  return load(w::model(g, 8, {{"", opset}}));
}

/// Checks got[i] against want[i] within tol (transforms are exact only up to rounding).
void check_near(const std::vector<double>& got, const std::vector<double>& want,
                double tol = 1e-5) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i);
    CAPTURE(got[i]);
    CAPTURE(want[i]);
    CHECK(std::abs(got[i] - want[i]) <= tol);
  }
}

std::vector<double> as_doubles(const tensor& t) {
  std::vector<double> v;
  if (t.type() == dtype_id::float64) {
    for (double x : t.data<double>())
      v.push_back(x);
  } else if (t.type() == dtype_id::float16) {
    for (auto x : t.data<quark::float16>())
      v.push_back(static_cast<double>(quark::to_float(x)));
  } else {
    for (float x : t.data<float>())
      v.push_back(static_cast<double>(x));
  }
  return v;
}

/// The error of a run, checked to name the node and each of `parts`.
void check_error(const runtime& rt, const std::map<std::string, tensor>& feeds, std::string_view op,
                 std::initializer_list<std::string_view> parts) {
  const std::string e = run_error(rt, feeds);
  CAPTURE(e);
  CHECK(has(e, "node 'sig' (" + std::string(op) + ")"));
  for (auto p : parts)
    CHECK(has(e, p));
}

tensor scalar64(std::int64_t v) {
  return i64({}, {v});
}

/// DFT(x [, n]) at opset 17 with the given attributes.
runtime dft17(std::initializer_list<w::msg> attrs, bool with_length = false) {
  return one_node("DFT", {{"x", FLOAT}, {with_length ? "n" : "", INT64}}, FLOAT, attrs);
}

}  // namespace

// ---- DFT ------------------------------------------------------------------------------------

TEST_CASE("DFT length 8 (radix-2): a cosine and a shifted impulse") {
  // Line 0: cos(2 pi j / 8) = (e^(2 pi i j/8) + e^(-2 pi i j/8)) / 2, so X[1] = X[7] = 8/2 = 4
  // and every other bin is 0. Line 1: delta[j - 1], so X[k] = e^(-2 pi i k/8)
  // = (cos(pi k/4), -sin(pi k/4)).
  std::vector<float> x(16);
  for (int j = 0; j < 8; ++j)
    x[static_cast<std::size_t>(j)] = static_cast<float>(std::cos(2.0 * pi * j / 8.0));
  x[8 + 1] = 1.0f;
  const auto out = dft17({w::attr_int("axis", 1)}).run({{"x", f32({2, 8, 1}, x)}});
  REQUIRE(out.at("y").shape() == shape_t{2, 8, 2});
  const double h = std::sqrt(0.5);
  check_near(as_doubles(out.at("y")),
             {0, 0, 4, 0,  0, 0,  0,  0,  0,  0, 0,  0, 0, 0, 4, 0,  // the cosine
              1, 0, h, -h, 0, -1, -h, -h, -1, 0, -h, h, 0, 1, h, h});
}

TEST_CASE("DFT lengths 6 and 7 (direct sum): a ramp and a complex exponential") {
  // The ramp x[j] = j + 1, j < 6: X[0] = 21 and, for k != 0, X[k] = -6 / (1 - e^(-2 pi i k/6))
  // (sum of j w^j with w^6 = 1). 1 - e^(-i pi/3) = e^(i pi/3), so X[1] = -6 e^(-i pi/3)
  // = -3 + 3 sqrt(3) i; 1 - e^(-2i pi/3) = sqrt(3) e^(i pi/6), so X[2] = -2 sqrt(3) e^(-i pi/6)
  // = -3 + sqrt(3) i; X[3] = -6 / 2 = -3; X[4], X[5] are the conjugates of X[2], X[1].
  const double r3 = std::sqrt(3.0);
  const std::vector<double> ramp6{21, 0, -3, 3 * r3, -3, r3, -3, 0, -3, -r3, -3, -3 * r3};
  const auto out = dft17({}).run({{"x", f32({1, 6, 1}, {1, 2, 3, 4, 5, 6})}});
  REQUIRE(out.at("y").shape() == shape_t{1, 6, 2});
  check_near(as_doubles(out.at("y")), ramp6);

  // x[j] = e^(2 pi i 3j/7) (complex input): X[k] = sum_j e^(2 pi i (3 - k) j/7) = 7 at k = 3, 0
  // elsewhere.
  std::vector<float> e(14);
  for (std::size_t j = 0; j < 7; ++j) {
    const double a = 2.0 * pi * 3.0 * static_cast<double>(j) / 7.0;
    e[2 * j] = static_cast<float>(std::cos(a));
    e[2 * j + 1] = static_cast<float>(std::sin(a));
  }
  const auto out7 = dft17({}).run({{"x", f32({1, 7, 2}, e)}});
  check_near(as_doubles(out7.at("y")), {0, 0, 0, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0});
}

TEST_CASE("DFT lengths 33 and 45 (Bluestein) against closed forms, in float64") {
  // delta[j - 2] at n = 33: X[k] = e^(-2 pi i 2k/33).
  std::vector<double> x(33, 0.0);
  x[2] = 1.0;
  runtime rt = one_node("DFT", {{"x", DOUBLE}}, DOUBLE, {w::attr_int("axis", 0)});
  auto out = rt.run({{"x", f64({33, 1}, x)}});
  std::vector<double> want;
  for (int k = 0; k < 33; ++k) {
    want.push_back(std::cos(2.0 * pi * 2 * k / 33.0));
    want.push_back(-std::sin(2.0 * pi * 2 * k / 33.0));
  }
  check_near(values_of<double>(out.at("y")), want, 1e-12);

  // cos(2 pi 3j/45): X[3] = X[42] = 45/2, 0 elsewhere.
  std::vector<double> c(45);
  for (int j = 0; j < 45; ++j)
    c[static_cast<std::size_t>(j)] = std::cos(2.0 * pi * 3 * j / 45.0);
  out = rt.run({{"x", f64({45, 1}, c)}});
  want.assign(90, 0.0);
  want[6] = want[84] = 22.5;  // the real parts of bins 3 and 42
  check_near(values_of<double>(out.at("y")), want, 1e-12);
}

TEST_CASE("DFT of the prime length 4099 (Bluestein over 8192 points): a shifted impulse") {
  // delta[j - 1]: X[k] = e^(-2 pi i k/4099); the chirp angles use k^2 mod 2n, so even the
  // last bins keep double accuracy.
  constexpr int n = 4099;
  std::vector<double> x(n, 0.0);
  x[1] = 1.0;
  const runtime rt = one_node("DFT", {{"x", DOUBLE}}, DOUBLE, {w::attr_int("axis", 0)});
  const auto out = rt.run({{"x", f64({n, 1}, x)}});
  std::vector<double> want;
  for (int k = 0; k < n; ++k) {
    want.push_back(std::cos(2.0 * pi * k / n));
    want.push_back(-std::sin(2.0 * pi * k / n));
  }
  check_near(values_of<double>(out.at("y")), want, 1e-11);
}

TEST_CASE("DFT inverse: the ramp's spectrum back to the ramp, and a Bluestein round trip") {
  // The spectrum of x[j] = j + 1 (see the length-6 case) with inverse=1 gives back 1..6, real.
  const double r3 = std::sqrt(3.0);
  const std::vector<double> spec{21, 0, -3, 3 * r3, -3, r3, -3, 0, -3, -r3, -3, -3 * r3};
  std::vector<float> specf(spec.begin(), spec.end());
  auto out = dft17({w::attr_int("inverse", 1)}).run({{"x", f32({1, 6, 2}, specf)}});
  check_near(as_doubles(out.at("y")), {1, 0, 2, 0, 3, 0, 4, 0, 5, 0, 6, 0});

  // DFT then inverse DFT at n = 50 (Bluestein) gives the input back.
  w::graph g;
  g.add_input(any("x", FLOAT));
  g.add_output(any("z", FLOAT));
  g.add_node(w::node("DFT", {"x"}, {"y"}, "fwd"));
  g.add_node(w::node("DFT", {"y"}, {"z"}, "inv", {w::attr_int("inverse", 1)}));
  const runtime rt = load(w::model(g, 8, {{"", 17}}));
  std::vector<float> x(100);
  for (std::size_t i = 0; i < x.size(); ++i)
    x[i] = static_cast<float>((i * 37) % 11) - 5.0f;  // any values
  out = rt.run({{"x", f32({1, 50, 2}, x)}});
  check_near(as_doubles(out.at("z")), std::vector<double>(x.begin(), x.end()));
}

TEST_CASE("DFT onesided: the first n/2 + 1 bins, with inverse, a real signal from them") {
  // The ramp 1..6: bins 0..3 of the length-6 case.
  const double r3 = std::sqrt(3.0);
  auto out = dft17({w::attr_int("onesided", 1)}).run({{"x", f32({1, 6, 1}, {1, 2, 3, 4, 5, 6})}});
  REQUIRE(out.at("y").shape() == shape_t{1, 4, 2});
  check_near(as_doubles(out.at("y")), {21, 0, -3, 3 * r3, -3, r3, -3, 0});
  // Length 7: 7 / 2 + 1 = 4 bins; constant 1 gives X[0] = 7, 0 elsewhere.
  out = dft17({w::attr_int("onesided", 1)}).run({{"x", f32({1, 7, 1}, std::vector<float>(7, 1))}});
  REQUIRE(out.at("y").shape() == shape_t{1, 4, 2});
  check_near(as_doubles(out.at("y")), {7, 0, 0, 0, 0, 0, 0, 0});

  // IRFFT: x = 1, 2, 3, 4 has X[0] = 10, X[1] = 1 - 2i - 3 + 4i = -2 + 2i, X[2] = 1 - 2 + 3 - 4
  // = -2. The half spectrum [10, -2+2i, -2] (3 bins) gives n = 2 (3 - 1) = 4 real values.
  const runtime irfft = dft17({w::attr_int("onesided", 1), w::attr_int("inverse", 1)});
  out = irfft.run({{"x", f32({1, 3, 2}, {10, 0, -2, 2, -2, 0})}});
  REQUIRE(out.at("y").shape() == shape_t{1, 4, 1});
  check_near(as_doubles(out.at("y")), {1, 2, 3, 4});
}

TEST_CASE("DFT dft_length zero-pads and truncates") {
  const runtime rt = dft17({}, true);
  // [1, 1] padded to 4: X[k] = 1 + e^(-i pi k/2) = 2, 1 - i, 0, 1 + i.
  auto out = rt.run({{"x", f32({1, 2, 1}, {1, 1})}, {"n", scalar64(4)}});
  REQUIRE(out.at("y").shape() == shape_t{1, 4, 2});
  check_near(as_doubles(out.at("y")), {2, 0, 1, -1, 0, 0, 1, 1});
  // 1..6 truncated to its first 2 values [1, 2]: X = 3, -1.
  out = rt.run({{"x", f32({1, 6, 1}, {1, 2, 3, 4, 5, 6})}, {"n", scalar64(2)}});
  REQUIRE(out.at("y").shape() == shape_t{1, 2, 2});
  check_near(as_doubles(out.at("y")), {3, 0, -1, 0});
  // dft_length as int32 works too.
  const runtime rt32 = one_node("DFT", {{"x", FLOAT}, {"n", INT32}}, FLOAT);
  out = rt32.run({{"x", f32({1, 2, 1}, {1, 1})}, {"n", i32({}, {4})}});
  check_near(as_doubles(out.at("y")), {2, 0, 1, -1, 0, 0, 1, 1});
}

TEST_CASE("DFT axis: 0 and negative as an attribute (opset 17), as an input (opset 20)") {
  // x = [[1, 2, 3], [4, 5, 6]] (shape [2, 3, 1]). Along axis 0 (length 2): X[0] = the column
  // sums 5, 7, 9 and X[1] = the differences -3, -3, -3. Along axis 1 (length 3): row [1, 2, 3]
  // gives 6, 1 + 2w + 3w^2 with w = e^(-2 pi i/3) = -1/2 - (sqrt 3/2) i: -3/2 + (sqrt 3/2) i,
  // and its conjugate; row [4, 5, 6] = row 1 + 3 adds 9 at bin 0 only.
  const tensor x = f32({2, 3, 1}, {1, 2, 3, 4, 5, 6});
  const double h = std::sqrt(3.0) / 2;
  const std::vector<double> along0{5, 0, 7, 0, 9, 0, -3, 0, -3, 0, -3, 0};
  const std::vector<double> along1{6, 0, -1.5, h, -1.5, -h, 15, 0, -1.5, h, -1.5, -h};
  check_near(as_doubles(dft17({w::attr_int("axis", 0)}).run({{"x", x}}).at("y")), along0);
  check_near(as_doubles(dft17({w::attr_int("axis", -3)}).run({{"x", x}}).at("y")), along0);
  check_near(as_doubles(dft17({w::attr_int("axis", -2)}).run({{"x", x}}).at("y")), along1);

  // Opset 20: the default axis is -2; an axis input overrides it.
  const runtime dflt = one_node("DFT", {{"x", FLOAT}}, FLOAT, {}, 20);
  check_near(as_doubles(dflt.run({{"x", x}}).at("y")), along1);
  const runtime with_axis =
      one_node("DFT", {{"x", FLOAT}, {"", INT64}, {"axis", INT64}}, FLOAT, {}, 20);
  check_near(as_doubles(with_axis.run({{"x", x}, {"axis", scalar64(0)}}).at("y")), along0);
  check_error(with_axis, {{"x", x}, {"axis", scalar64(2)}}, "DFT",
              {"axis 2 out of range", "[2,3,1]"});
}

TEST_CASE("DFT errors name the culprit") {
  check_error(dft17({}), {{"x", f32({1, 2, 3}, std::vector<float>(6))}}, "DFT",
              {"last dimension", "[1,2,3]", "1 (real) or 2 (complex)"});
  check_error(dft17({}), {{"x", f32({2}, {1, 2})}}, "DFT", {"rank 2 or more", "[2]"});
  for (std::int64_t axis : {2, -1, -4}) {
    CAPTURE(axis);
    check_error(dft17({w::attr_int("axis", axis)}), {{"x", f32({1, 2, 1}, {1, 2})}}, "DFT",
                {"axis " + std::to_string(axis) + " out of range", "[1,2,1]"});
  }
  check_error(dft17({}, true), {{"x", f32({1, 2, 1}, {1, 2})}, {"n", scalar64(0)}}, "DFT",
              {"dft_length must be positive, got 0"});
  check_error(dft17({}, true), {{"x", f32({1, 2, 1}, {1, 2})}, {"n", i64({2}, {4, 4})}}, "DFT",
              {"dft_length must be a scalar", "[2]"});
  check_error(dft17({w::attr_int("onesided", 1)}), {{"x", f32({1, 2, 2}, {1, 2, 3, 4})}}, "DFT",
              {"onesided=1", "real input", "[1,2,2]"});
  check_error(dft17({w::attr_int("onesided", 1), w::attr_int("inverse", 1)}),
              {{"x", f32({1, 2, 1}, {1, 2})}}, "DFT", {"onesided=1 with inverse=1", "[1,2,1]"});
  check_error(dft17({w::attr_int("inverse", 2)}), {{"x", f32({1, 2, 1}, {1, 2})}}, "DFT",
              {"'inverse' must be 0 or 1, got 2"});
  check_error(dft17({}), {{"x", f32({1, 0, 1}, {})}}, "DFT", {"DFT length", "[1,0,1]", "is 0"});
  // The IRFFT of a single bin has no default length (2 (1 - 1) = 0).
  check_error(dft17({w::attr_int("onesided", 1), w::attr_int("inverse", 1)}),
              {{"x", f32({1, 1, 2}, {1, 0})}}, "DFT", {"is 0", "give dft_length"});
  check_error(one_node("DFT", {{"x", INT32}}, FLOAT),
              {{"x", make<std::int32_t>(dtype_id::int32, {1, 2, 1}, {1, 2})}}, "DFT",
              {"int32", "not supported"});
}

// ---- STFT -----------------------------------------------------------------------------------

namespace {

/// STFT(signal, step, window?, length?) at opset 17.
runtime stft(bool window, bool length, std::initializer_list<w::msg> attrs = {}) {
  return one_node(
      "STFT",
      {{"s", FLOAT}, {"step", INT64}, {window ? "w" : "", FLOAT}, {length ? "len" : "", INT64}},
      FLOAT, attrs);
}

}  // namespace

TEST_CASE("STFT without a window: frames of a ramp") {
  // Signal 0..7, frame_length 4, frame_step 2: (8 - 4) / 2 + 1 = 3 frames, 4 / 2 + 1 = 3 bins.
  // Frame t is 2t + [0, 1, 2, 3]: X[0] = 8t + 6; the constant 2t adds nothing elsewhere, so
  // X[1] = 0 - i - 2 + 3i = -2 + 2i and X[2] = 0 - 1 + 2 - 3 = -2.
  const tensor s = f32({1, 8, 1}, {0, 1, 2, 3, 4, 5, 6, 7});
  const auto out = stft(false, true).run({{"s", s}, {"step", scalar64(2)}, {"len", scalar64(4)}});
  REQUIRE(out.at("y").shape() == shape_t{1, 3, 3, 2});
  check_near(as_doubles(out.at("y")),
             {6, 0, -2, 2, -2, 0, 14, 0, -2, 2, -2, 0, 22, 0, -2, 2, -2, 0});

  // onesided=0 adds bin 3 = conj(X[1]) = -2 - 2i.
  const auto full = stft(false, true, {w::attr_int("onesided", 0)})
                        .run({{"s", s}, {"step", scalar64(2)}, {"len", scalar64(4)}});
  REQUIRE(full.at("y").shape() == shape_t{1, 3, 4, 2});
  check_near(as_doubles(full.at("y")), {6,  0, -2, 2,  -2, 0, -2, -2, 14, 0, -2, 2,
                                        -2, 0, -2, -2, 22, 0, -2, 2,  -2, 0, -2, -2});
}

TEST_CASE("STFT with a window, alone or with a matching frame_length, and a batch of two") {
  // Window [0, 1, 1, 0] on frame t = 2t + [0, 1, 2, 3] leaves [0, 2t+1, 2t+2, 0]:
  // X[0] = 4t + 3, X[1] = -i (2t+1) - (2t+2) = -(2t+2) - (2t+1) i, X[2] = -(2t+1) + (2t+2) = 1.
  // Batch 1 is the same ramp negated, so its spectrum is negated.
  std::vector<float> sig{0, 1, 2, 3, 4, 5, 6, 7, 0, -1, -2, -3, -4, -5, -6, -7};
  const tensor s = f32({2, 8, 1}, sig);
  const tensor win = f32({4}, {0, 1, 1, 0});
  const std::vector<double> want{3,  0, -2, -1, 1,  0, 7,  0, -4, -3, 1,  0, 11,  0, -6, -5, 1,  0,
                                 -3, 0, 2,  1,  -1, 0, -7, 0, 4,  3,  -1, 0, -11, 0, 6,  5,  -1, 0};
  auto out = stft(true, false).run({{"s", s}, {"step", scalar64(2)}, {"w", win}});
  REQUIRE(out.at("y").shape() == shape_t{2, 3, 3, 2});
  check_near(as_doubles(out.at("y")), want);
  out = stft(true, true).run({{"s", s}, {"step", scalar64(2)}, {"w", win}, {"len", scalar64(4)}});
  check_near(as_doubles(out.at("y")), want);
}

TEST_CASE("STFT of a complex signal with onesided=0") {
  // x[j] = i^j = e^(2 pi i j/4): one frame of 4 gives X[1] = 4, 0 elsewhere.
  const tensor s = f32({1, 4, 2}, {1, 0, 0, 1, -1, 0, 0, -1});
  const auto out = stft(false, true, {w::attr_int("onesided", 0)})
                       .run({{"s", s}, {"step", scalar64(4)}, {"len", scalar64(4)}});
  REQUIRE(out.at("y").shape() == shape_t{1, 1, 4, 2});
  check_near(as_doubles(out.at("y")), {0, 0, 4, 0, 0, 0, 0, 0});
}

TEST_CASE("STFT errors name the culprit") {
  const tensor s = f32({1, 8, 1}, std::vector<float>(8, 1));
  check_error(stft(false, true), {{"s", s}, {"step", scalar64(2)}, {"len", scalar64(9)}}, "STFT",
              {"frame_length 9 exceeds the signal length", "[1,8,1]"});
  check_error(stft(false, true), {{"s", s}, {"step", scalar64(0)}, {"len", scalar64(4)}}, "STFT",
              {"frame_step must be positive, got 0"});
  check_error(stft(false, true), {{"s", s}, {"step", scalar64(1)}, {"len", scalar64(-2)}}, "STFT",
              {"frame_length must be positive, got -2"});
  check_error(stft(false, false), {{"s", s}, {"step", scalar64(2)}}, "STFT",
              {"window or a frame_length"});
  check_error(stft(true, true),
              {{"s", s}, {"step", scalar64(2)}, {"w", f32({3}, {1, 1, 1})}, {"len", scalar64(4)}},
              "STFT", {"window length 3 differs from frame_length 4"});
  check_error(stft(true, false),
              {{"s", s}, {"step", scalar64(2)}, {"w", f32({2, 2}, {1, 1, 1, 1})}}, "STFT",
              {"window must have rank 1", "[2,2]"});
  check_error(
      stft(false, true),
      {{"s", f32({1, 4, 2}, std::vector<float>(8))}, {"step", scalar64(1)}, {"len", scalar64(2)}},
      "STFT", {"onesided=1 needs a real signal", "[1,4,2]"});
  check_error(
      stft(false, true),
      {{"s", f32({8, 1}, std::vector<float>(8))}, {"step", scalar64(1)}, {"len", scalar64(2)}},
      "STFT", {"signal must have shape [batch, length, 1 or 2]", "[8,1]"});
  check_error(
      stft(false, true),
      {{"s", f32({1, 2, 3}, std::vector<float>(6))}, {"step", scalar64(1)}, {"len", scalar64(2)}},
      "STFT", {"[1,2,3]"});
}

// ---- windows --------------------------------------------------------------------------------

namespace {

std::vector<double> window(std::string_view op, std::int64_t size, std::int64_t periodic) {
  const runtime rt = one_node(op, {{"n", INT64}}, FLOAT, {w::attr_int("periodic", periodic)});
  const auto out = rt.run({{"n", scalar64(size)}});
  REQUIRE(out.at("y").shape() == shape_t{size});
  return as_doubles(out.at("y"));
}

}  // namespace

TEST_CASE("HannWindow, HammingWindow, BlackmanWindow at size 4, periodic and symmetric") {
  // w[k] = a0 - a1 cos(2 pi k/N) + a2 cos(4 pi k/N); periodic N = 4 (cos(pi k/2) = 1, 0, -1, 0
  // and cos(pi k) = 1, -1, 1, -1), symmetric N = 3 (cos(2 pi k/3) = 1, -1/2, -1/2, 1 and
  // cos(4 pi k/3) = 1, -1/2, -1/2, 1).
  // Hann (1/2, 1/2, 0): periodic 0, 1/2, 1, 1/2; symmetric 0, 3/4, 3/4, 0.
  check_near(window("HannWindow", 4, 1), {0, 0.5, 1, 0.5}, 1e-7);
  check_near(window("HannWindow", 4, 0), {0, 0.75, 0.75, 0}, 1e-7);
  // Hamming (25/46, 21/46, 0): periodic 4/46, 25/46, 1, 25/46; symmetric 4/46,
  // 25/46 + 21/92 = 71/92, 71/92, 4/46.
  check_near(window("HammingWindow", 4, 1), {4.0 / 46, 25.0 / 46, 1, 25.0 / 46}, 1e-7);
  check_near(window("HammingWindow", 4, 0), {4.0 / 46, 71.0 / 92, 71.0 / 92, 4.0 / 46}, 1e-7);
  // Blackman (0.42, 0.5, 0.08): periodic 0, 0.42 - 0.08 = 0.34, 1, 0.34; symmetric 0,
  // 0.42 + 0.25 - 0.04 = 0.63, 0.63, 0.
  check_near(window("BlackmanWindow", 4, 1), {0, 0.34, 1, 0.34}, 1e-7);
  check_near(window("BlackmanWindow", 4, 0), {0, 0.63, 0.63, 0}, 1e-7);
  // Size 1: periodic N = 1 gives w[0] = a0 - a1 + a2 (0 for Hann, 4/46 for Hamming); the
  // symmetric N = 0 is defined as the one-point window 1.
  check_near(window("HannWindow", 1, 1), {0}, 1e-7);
  check_near(window("HammingWindow", 1, 1), {4.0 / 46}, 1e-7);
  check_near(window("BlackmanWindow", 1, 0), {1}, 1e-7);
}

TEST_CASE("window output_datatype: double, float16, int32 (truncated), size as int32") {
  auto run = [](int code, int out_type) {
    const runtime rt =
        one_node("HannWindow", {{"n", INT32}}, out_type, {w::attr_int("output_datatype", code)});
    return rt.run({{"n", i32({}, {4})}}).at("y");
  };
  const tensor d = run(DOUBLE, DOUBLE);
  REQUIRE(d.type() == dtype_id::float64);
  check_near(values_of<double>(d), {0, 0.5, 1, 0.5}, 1e-15);
  const tensor h = run(FLOAT16, FLOAT16);  // 0, 1/2, 1 are exact in float16
  REQUIRE(h.type() == dtype_id::float16);
  check_near(as_doubles(h), {0, 0.5, 1, 0.5}, 0.0);
  const tensor i = run(INT32, INT32);
  REQUIRE(i.type() == dtype_id::int32);
  CHECK(values_of<std::int32_t>(i) == std::vector<std::int32_t>{0, 0, 1, 0});
}

TEST_CASE("window errors name the culprit") {
  for (const char* op : {"HannWindow", "HammingWindow", "BlackmanWindow"}) {
    CAPTURE(op);
    const runtime rt = one_node(op, {{"n", INT64}}, FLOAT);
    check_error(rt, {{"n", scalar64(0)}}, op, {"size must be positive, got 0"});
    check_error(rt, {{"n", scalar64(-3)}}, op, {"size must be positive, got -3"});
    check_error(rt, {{"n", i64({2}, {4, 4})}}, op, {"size must be a scalar", "[2]"});
    check_error(one_node(op, {{"n", FLOAT}}, FLOAT), {{"n", f32({}, {4})}}, op, {"int64 or int32"});
    check_error(one_node(op, {{"n", INT64}}, FLOAT, {w::attr_int("periodic", 2)}),
                {{"n", scalar64(4)}}, op, {"'periodic' must be 0 or 1, got 2"});
    check_error(one_node(op, {{"n", INT64}}, FLOAT, {w::attr_int("output_datatype", 9)}),
                {{"n", scalar64(4)}}, op, {"'output_datatype' 9"});
    // A size past 2^24 is refused before any allocation (2^31 - 1, an int32 input's maximum,
    // used to allocate 24 GB and run for minutes).
    check_error(rt, {{"n", scalar64((std::int64_t{1} << 24) + 1)}}, op,
                {"size 16777217 exceeds the supported maximum 16777216"});
    check_error(rt, {{"n", scalar64(std::int64_t{1} << 40)}}, op, {"exceeds the supported"});
  }
}

// ---- MelWeightMatrix --------------------------------------------------------------------------

namespace {

runtime mel(std::initializer_list<w::msg> attrs = {}, int out_type = FLOAT) {
  return one_node("MelWeightMatrix",
                  {{"bins", INT64}, {"dft", INT64}, {"rate", INT64}, {"lo", FLOAT}, {"hi", FLOAT}},
                  out_type, attrs);
}

std::map<std::string, tensor> mel_feeds(std::int64_t bins, std::int64_t dft, std::int64_t rate,
                                        double lo, double hi) {
  return {{"bins", scalar64(bins)},
          {"dft", scalar64(dft)},
          {"rate", scalar64(rate)},
          {"lo", f32({}, {static_cast<float>(lo)})},
          {"hi", f32({}, {static_cast<float>(hi)})}};
}

/// The upper edge that puts mel point i (of `points`, from 0 Hz) at 700 (q^i - 1) Hz:
/// mel(700 (q^i - 1)) = 2595 i log10(q), evenly spaced, and the step is mel(upper) / points.
double upper_for(double q, int points) {
  return 700.0 * (std::pow(q, points) - 1.0);
}

}  // namespace

TEST_CASE("MelWeightMatrix: two triangles over known bins") {
  // 2 mel bins = 4 points with q = 703/700: 0 Hz, 3 Hz, 700 (q^2 - 1) = 4209/700 = 6.013 Hz,
  // 700 (q^3 - 1) = 9.039 Hz (the upper edge is point 4, 700 (q^4 - 1) = 12.077 Hz). With
  // dft_length 16 and sample_rate 16, bin = floor(17 f / 16): 0, 3 (3.19), 6 (6.39), 9 (9.60).
  // 16 / 2 + 1 = 9 rows. Band 0 rises over rows 0..3 as (j - 0) / 3 and falls over rows 3..5
  // as (6 - j) / 3; band 1 rises over rows 3..6 as (j - 3) / 3 and falls over rows 6..8 as
  // (9 - j) / 3.
  const double t = 1.0 / 3, u = 2.0 / 3;
  const auto out = mel().run(mel_feeds(2, 16, 16, 0.0, upper_for(703.0 / 700, 4)));
  REQUIRE(out.at("y").shape() == shape_t{9, 2});
  check_near(as_doubles(out.at("y")), {0, 0, t, 0, u, 0, 1, 0, u, t, t, u, 0, 1, 0, u, 0, t}, 1e-6);
}

TEST_CASE("MelWeightMatrix: a band past the Nyquist row is cut, a one-bin band is a single 1") {
  // 1 mel bin = 3 points with q = 703/700: 0, 3, 6.013 Hz; dft_length 8 and sample_rate 8 give
  // bin = floor(9 f / 8) = 0, 3, 6 and 8 / 2 + 1 = 5 rows. The band rises 0, 1/3, 2/3, 1 over
  // rows 0..3, then falls (6 - j) / 3: row 4 = 2/3, row 5 (1/3) does not exist.
  auto out = mel().run(mel_feeds(1, 8, 8, 0.0, upper_for(703.0 / 700, 3)));
  REQUIRE(out.at("y").shape() == shape_t{5, 1});
  check_near(as_doubles(out.at("y")), {0, 1.0 / 3, 2.0 / 3, 1, 2.0 / 3}, 1e-6);
  // q = 700.5/700: points 0, 0.5, 1.0004 Hz, bins floor(9 f / 8) = 0, 0, 1. Left = centre:
  // row 0 is 1; the fall from row 0 to row 1 is (1 - j) / 1 = 1 at row 0 only.
  out = mel().run(mel_feeds(1, 8, 8, 0.0, upper_for(700.5 / 700, 3)));
  check_near(as_doubles(out.at("y")), {1, 0, 0, 0, 0}, 0.0);
}

TEST_CASE("MelWeightMatrix output_datatype double and errors that name the culprit") {
  const auto out = mel({w::attr_int("output_datatype", DOUBLE)}, DOUBLE)
                       .run(mel_feeds(1, 8, 8, 0.0, upper_for(700.5 / 700, 3)));
  REQUIRE(out.at("y").type() == dtype_id::float64);
  CHECK(values_of<double>(out.at("y")) == std::vector<double>{1, 0, 0, 0, 0});

  const runtime rt = mel();
  const std::string_view op = "MelWeightMatrix";
  check_error(rt, mel_feeds(0, 8, 8, 0, 4), op, {"num_mel_bins must be positive, got 0"});
  check_error(rt, mel_feeds(2, -8, 8, 0, 4), op, {"dft_length must be positive, got -8"});
  check_error(rt, mel_feeds(2, 8, 0, 0, 4), op, {"sample_rate must be positive, got 0"});
  check_error(rt, mel_feeds(2, 8, 8, 5, 4), op, {"lower_edge_hertz 5", "upper_edge_hertz 4"});
  check_error(rt, mel_feeds(2, 8, 8, -1, 4), op, {"lower_edge_hertz -1"});
  auto feeds = mel_feeds(2, 8, 8, 0, 4);
  feeds["bins"] = i64({2}, {2, 2});
  check_error(rt, feeds, op, {"num_mel_bins must be a scalar", "[2]"});
  check_error(mel({w::attr_int("output_datatype", 8)}), mel_feeds(2, 8, 8, 0, 4), op,
              {"'output_datatype' 8"});
  // Each length within 2^24 but the [dft_length / 2 + 1, num_mel_bins] output past it.
  check_error(rt, mel_feeds(1 << 20, 1 << 20, 8, 0, 4), op,
              {"the output's element count", "exceeds the supported maximum 16777216"});
}
