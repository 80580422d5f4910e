// SPDX-License-Identifier: MIT
// quark::adaquant (include/quark/algo/adaquant.hpp):
//  * the fake-quantized weights are s (clamp(round_half_even(w / s) + zp, qmin, qmax) - zp),
//    computed here from the definition, per tensor and per channel, int8 and uint8;
//  * the straight-through mask at hand-chosen points around qmin - 0.5 / qmax + 0.5;
//  * one step moves each unmasked weight (and the bias) by lr * sign(g) (Adam's first step),
//    masked weights not at all;
//  * five steps on a 2x3 linear layer (weights and bias) against a numpy implementation of the
//    definition (tests/algo/data/gen_adaquant_reference.py): learned weights, bias and codes;
//  * size errors.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include <quark/algo/adaquant.hpp>

#include "support/checks.hpp"

using quark::test::error_id;

TEST_CASE("adaquant fake weights: s (clamp(rne(w / s) + zp, qmin, qmax) - zp)") {
  {
    // Per channel along axis 0 (rows), int8 [-127, 127]: 0.25 / 0.1 = 2.5 -> 2 (ties to even),
    // 0.35 / 0.1 = 3.5 -> 4, 20 / 0.1 -> 127; row 2 at s 0.5: -0.75 -> -1.5 -> -2, 1.3 -> 2.6 -> 3,
    // -100 -> -127.
    const std::vector<float> w{0.25f, 0.35f, 20.0f, -0.75f, 1.3f, -100.0f};
    const float s[2] = {0.1f, 0.5f};
    quark::tensor_qparams<std::int8_t> p{s, {}, quark::per_channel{0}, -127, 127};
    quark::adaquant<std::int8_t> aq(quark::tensor_shape{2, 3}, w, p);
    const auto wq = aq.fake_weights();
    const double want[6] = {2, 4, 127, -2, 3, -127};
    for (std::size_t i = 0; i < 6; ++i) {
      CAPTURE(i);
      const double si = static_cast<double>(s[i / 3]);
      // 0.25f / 0.1f and 0.35f / 0.1f are not exactly 2.5 / 3.5 in float: check the definition.
      const double v = std::nearbyint(static_cast<double>(w[i] / s[i / 3]));
      CHECK(wq[i] == std::clamp(v, -127.0, 127.0) * si);
      if (i >= 2)
        CHECK(wq[i] == want[i] * si);
    }
    std::int8_t q[6];
    aq.codes(q);
    CHECK(q[2] == 127);
    CHECK(q[5] == -127);
  }
  {
    // uint8 with zero point 100, s 0.02: 1.0 -> 50 + 100 = 150; -3 -> -150 + 100 -> 0;
    // 4 -> 200 + 100 -> 255. Dequantized (code - 100) 0.02.
    const std::vector<float> w{1.0f, -3.0f, 4.0f};
    const float s = 0.02f;
    const std::int32_t zp = 100;
    quark::tensor_qparams<std::uint8_t> p{std::span(&s, 1), std::span(&zp, 1)};
    quark::adaquant<std::uint8_t> aq(quark::tensor_shape{3}, w, p);
    const auto wq = aq.fake_weights();
    CHECK(wq[0] == doctest::Approx(50 * 0.02).epsilon(1e-6));
    CHECK(wq[1] == doctest::Approx(-100 * 0.02).epsilon(1e-6));
    CHECK(wq[2] == doctest::Approx(155 * 0.02).epsilon(1e-6));
    std::uint8_t q[3];
    aq.codes(q);
    CHECK(q[0] == 150);
    CHECK(q[1] == 0);
    CHECK(q[2] == 255);
  }
}

TEST_CASE("adaquant straight-through mask and one Adam step (hand-derived)") {
  // s 1, clip [-3, 3]: the gradient passes for w in [-3.5, 3.5].
  const std::vector<float> w{-3.6f, -3.4f, 0.2f, 3.4f, 3.6f, -3.5f};
  const float s = 1.0f;
  quark::tensor_qparams<std::int8_t> p{std::span(&s, 1), {}, quark::per_tensor{}, -3, 3};
  const std::vector<double> bias{0.5, -0.5};
  quark::adaquant<std::int8_t> aq(quark::tensor_shape{6}, w, p, bias, {.lr = 0.01});
  std::vector<double> g{1.0, 1.0, -2.0, 0.5, 1.0, 3.0};
  const std::vector<double> gb{-0.25, 4.0};
  aq.step(g, gb);
  CHECK(g == std::vector<double>{0.0, 1.0, -2.0, 0.5, 0.0, 3.0});
  // First Adam step: lr g / (|g| + eps).
  auto d = [](float v) { return static_cast<double>(v); };
  const double want[6] = {d(-3.6f),       d(-3.4f) - 0.01, d(0.2f) + 0.01,
                          d(3.4f) - 0.01, d(3.6f),         d(-3.5f) - 0.01};
  for (std::size_t i = 0; i < 6; ++i) {
    CAPTURE(i);
    CHECK(aq.weights()[i] == doctest::Approx(want[i]).epsilon(1e-9));
  }
  CHECK(aq.weights()[0] == static_cast<double>(-3.6f));
  CHECK(aq.bias()[0] == doctest::Approx(0.51).epsilon(1e-9));
  CHECK(aq.bias()[1] == doctest::Approx(-0.51).epsilon(1e-9));
  // No bias: bias() is empty and the bias gradient is ignored.
  quark::adaquant<std::int8_t> nb(quark::tensor_shape{6}, w, p);
  CHECK(nb.bias().empty());
  std::vector<double> g2(6, 1.0);
  nb.step(g2, {});
}

TEST_CASE("AdaQuant on a 2x3 linear layer: 5 steps match the numpy reference") {
  // tests/algo/data/gen_adaquant_reference.py: y = W x + b on 4 samples, s 0.125, clip [-8, 7],
  // lr 1e-3, weights and bias trained; L = (1/4) sum_s sum_o (Wq x_s + b - (W x_s + b0))_o^2.
  const std::vector<float> w{0.30f, -0.47f, 0.7875f, 1.20f, -0.20f, 0.0375f};
  const std::vector<float> x{0.9f,  -0.3f, 0.5f, 0.2f, 0.8f, -0.6f,
                             -0.7f, 0.4f,  0.1f, 0.6f, 0.6f, 0.9f};
  const std::vector<double> b0{0.1, -0.2};
  const double ref_w[6] = {0.30499600141537231, -0.46502507067786908, 0.79249552469579387,
                           1.2000000476837158,  -0.19501539250652655, 0.04249872493286698};
  const double ref_b[2] = {0.10498364418798953, -0.19500423623204832};
  const std::int8_t ref_q[6] = {2, -4, 6, 7, -2, 0};
  const float s = 0.125f;
  quark::tensor_qparams<std::int8_t> p{std::span(&s, 1), {}, quark::per_tensor{}, -8, 7};
  quark::adaquant<std::int8_t> aq(quark::tensor_shape{2, 3}, w, p, b0, {.lr = 1e-3});
  std::vector<double> gw(6), gb(2);
  for (int it = 0; it < 5; ++it) {
    const auto wq = aq.fake_weights();
    const auto b = aq.bias();
    std::fill(gw.begin(), gw.end(), 0.0);
    std::fill(gb.begin(), gb.end(), 0.0);
    for (std::size_t smp = 0; smp < 4; ++smp) {
      for (std::size_t o = 0; o < 2; ++o) {
        double d = b[o] - b0[o];
        for (std::size_t k = 0; k < 3; ++k)
          d += static_cast<double>(x[smp * 3 + k]) *
               (wq[o * 3 + k] - static_cast<double>(w[o * 3 + k]));
        for (std::size_t k = 0; k < 3; ++k)
          gw[o * 3 + k] += 2.0 * d * static_cast<double>(x[smp * 3 + k]) / 4.0;
        gb[o] += 2.0 * d / 4.0;
      }
    }
    aq.step(gw, gb);
  }
  for (std::size_t i = 0; i < 6; ++i) {
    CAPTURE(i);
    CHECK(aq.weights()[i] == doctest::Approx(ref_w[i]).epsilon(1e-13));
  }
  CHECK(aq.weights()[3] == static_cast<double>(1.20f));  // outside the clip range: never moved
  CHECK(aq.bias()[0] == doctest::Approx(ref_b[0]).epsilon(1e-13));
  CHECK(aq.bias()[1] == doctest::Approx(ref_b[1]).epsilon(1e-13));
  std::int8_t q[6];
  aq.codes(q);
  for (std::size_t i = 0; i < 6; ++i)
    CHECK(q[i] == ref_q[i]);
}

TEST_CASE("adaquant: sizes other than the weight's are errors") {
  const float s = 0.1f;
  quark::tensor_qparams<std::int8_t> p{std::span(&s, 1)};
  const std::vector<float> w{0.1f, 0.2f, 0.3f};
  CHECK(error_id([&] { quark::adaquant<std::int8_t>(quark::tensor_shape{2}, w, p); }) ==
        "quark.quant.size_mismatch");
  const std::vector<double> bias{0.0};
  quark::adaquant<std::int8_t> aq(quark::tensor_shape{3}, w, p, bias);
  std::vector<double> g(3), gb(2);
  CHECK(error_id([&] { aq.step(g, gb); }) == "quark.algo.size_mismatch");
  std::vector<double> g2(2);
  CHECK(error_id([&] { aq.straight_through(g2); }) == "quark.algo.size_mismatch");
  std::int8_t q[2];
  CHECK(error_id([&] { aq.codes(q); }) == "quark.algo.size_mismatch");
}
