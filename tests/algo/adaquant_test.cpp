// SPDX-License-Identifier: MIT
// quark::adaquant (include/quark/algo/adaquant.hpp):
//  * the fake-quantized weights are s (clamp(round_half_even(w / s) + zp, qmin, qmax) - zp),
//    computed here from the definition, per tensor and per channel, int8 and uint8;
//  * the straight-through mask at hand-chosen points around qmin - 0.5 / qmax + 0.5;
//  * one step moves each unmasked weight (and the bias) by lr * sign(g) (Adam's first step),
//    masked weights not at all;
//  * five steps on a 2x3 linear layer (weights and bias) against a numpy implementation of the
//    definition (tests/algo/data/gen_adaquant_reference.py): learned weights, bias and codes;
//  * size errors;
//  * adaquant_fq (any fake quantizer): bfloat16 fake weights at hand-chosen points (ties to
//    even), the identity straight-through step, float_weights; an MXFP4 1x32 layer where the
//    learned weights stay on the MX grid (fq(wq) == wq) and beat round-to-nearest, and reach the
//    exactly representable weights the target was made from.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include <quark/algo/adaquant.hpp>
#include <quark/block/quark_ops.hpp>
#include <quark/dtype/formats.hpp>

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

TEST_CASE("adaquant_fq with a bfloat16 cast: fake weights, identity straight-through, one step") {
  // bfloat16 has 7 fraction bits: the step above 1 is u = 2^-7, below 1 it is 2^-8.
  const double u = 1.0 / 128.0;
  const std::vector<float> w{static_cast<float>(1.0 + 0.6 * u), static_cast<float>(1.0 + 0.5 * u),
                             static_cast<float>(1.0 + 1.5 * u), static_cast<float>(-1.0 - 0.4 * u),
                             3.0e38f};
  auto fq = [](std::span<const float> in, std::span<float> out) {
    for (std::size_t i = 0; i < in.size(); ++i)
      out[i] = static_cast<float>(quark::bfloat16(in[i]));
  };
  const std::vector<double> bias{0.25};
  quark::adaquant_fq aq(w, fq, bias, {.lr = 0.001});
  CHECK(aq.size() == 5);
  auto wq = aq.fake_weights();
  CHECK(wq[0] == 1.0 + u);        // nearest
  CHECK(wq[1] == 1.0);            // tie: even
  CHECK(wq[2] == 1.0 + 2.0 * u);  // tie: even
  CHECK(wq[3] == -1.0);           // nearest
  // 3.0e38 = 1.7632 x 2^127; bfloat16 steps there are 2^120 = 2^127 / 128, and 0.7632 x 128 =
  // 97.69 rounds to 98: 1.765625 x 2^127 (0x7F62).
  CHECK(wq[4] == static_cast<double>(3.00405527047391e38f));
  // Adam's first step moves every weight by lr sign(g), whatever its place: no mask.
  const std::vector<double> g{1.0, -2.0, 0.5, -1.0, 1.0};
  const std::vector<double> gb{-3.0};
  aq.step(g, gb);
  for (std::size_t i = 0; i < 5; ++i) {
    CAPTURE(i);
    const double sign = g[i] > 0 ? 1.0 : -1.0;
    CHECK(aq.weights()[i] ==
          doctest::Approx(static_cast<double>(w[i]) - 0.001 * sign).epsilon(1e-9));
    CHECK(aq.float_weights()[i] == static_cast<float>(aq.weights()[i]));
  }
  CHECK(aq.bias()[0] == doctest::Approx(0.251).epsilon(1e-9));
  // 1 + 0.6u - 0.001 = 1 + 0.47u: now nearest to 1; 1 + 0.5u + 0.001 = 1 + 0.63u: 1 + u.
  CHECK(aq.fake_weights()[0] == 1.0);
  CHECK(aq.fake_weights()[1] == 1.0 + u);
  std::vector<double> bad(4);
  CHECK(error_id([&] { aq.step(bad, gb); }) == "quark.algo.size_mismatch");
  std::vector<double> bad_b(2);
  CHECK(error_id([&] { aq.step(g, bad_b); }) == "quark.algo.size_mismatch");
}

TEST_CASE("adaquant_fq on an MXFP4 1x32 layer: on the grid, better than round-to-nearest") {
  // Target weights w* on the MXFP4 grid of one block (shared scale 2^-2: elements 0.5 x
  // {0, 0.5, ..., 6}): w* = 0.25 * fp4 values; the block's largest |w*| is 1.5 (6 x 2^-2), so the
  // shared exponent stays 2^-2 for any start below 2 in magnitude. The start moves each weight
  // 0.6 of its grid step away from w*, so round-to-nearest lands on the wrong neighbour.
  const float fp4[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  std::vector<float> target(32), w(32);
  for (std::size_t i = 0; i < 32; ++i) {
    const std::size_t k = 1 + i % 6;  // 0.5 .. 4: never the top (6) nor 0
    const float sgn = i % 2 == 0 ? 1.0f : -1.0f;
    target[i] = sgn * 0.25f * fp4[k];
    const float up = 0.25f * (fp4[k + 1] - fp4[k]);
    w[i] = sgn * (0.25f * fp4[k] + 0.6f * up);
  }
  target[31] = 1.5f;  // pins the shared exponent
  w[31] = 1.5f;
  const quark::mx_op_attributes attrs{"fp4_e2m1", 1, 32, 2};
  const std::int64_t shape[] = {1, 32};
  auto fq = [&](std::span<const float> in, std::span<float> out) {
    quark::mx_quantize_dequantize(attrs, in, shape, out);
  };
  // y = w . x over 64 random-sign samples; L = mean over samples of (y - y*)^2.
  std::vector<double> x(64 * 32);
  std::uint32_t state = 12345;
  for (auto& v : x) {
    state = state * 1664525u + 1013904223u;
    v = (state >> 31) != 0 ? 1.0 : -1.0;
  }
  auto loss_grad = [&](std::span<const double> wq, std::vector<double>* g) {
    double l = 0.0;
    if (g != nullptr)
      std::fill(g->begin(), g->end(), 0.0);
    for (std::size_t smp = 0; smp < 64; ++smp) {
      double d = 0.0;
      for (std::size_t k = 0; k < 32; ++k)
        d += x[smp * 32 + k] * (wq[k] - static_cast<double>(target[k]));
      l += d * d / 64.0;
      if (g != nullptr) {
        for (std::size_t k = 0; k < 32; ++k)
          (*g)[k] += 2.0 * d * x[smp * 32 + k] / 64.0;
      }
    }
    return l;
  };
  quark::adaquant_fq aq(w, fq, {}, {.lr = 0.01});
  const double rtn = loss_grad(aq.fake_weights(), nullptr);
  CHECK(rtn > 0.1);
  std::vector<double> g(32);
  for (int it = 0; it < 300; ++it) {
    loss_grad(aq.fake_weights(), &g);
    aq.step(g, {});
  }
  const auto wq = aq.fake_weights();
  CHECK(loss_grad(wq, nullptr) < rtn);
  // On the grid: the op leaves the learned fake weights where they are.
  std::vector<float> wqf(wq.begin(), wq.end()), again(32);
  quark::mx_quantize_dequantize(attrs, std::span<const float>(wqf), shape, std::span(again));
  CHECK(again == wqf);
  // The stored float weights give the same fake weights.
  std::vector<float> from_float(32);
  const auto lw = aq.float_weights();
  quark::mx_quantize_dequantize(attrs, lw, shape, std::span(from_float));
  CHECK(from_float == wqf);
  // And they are the target: the loss has its unique minimum 0 there.
  std::size_t exact = 0;
  for (std::size_t i = 0; i < 32; ++i)
    exact += wqf[i] == target[i] ? 1U : 0U;
  CHECK(exact == 32);
}
