// SPDX-License-Identifier: MIT
// quark/algo/bias_correction.hpp: a linear layer whose quantization error is known by
// construction (Wq = W + E, so float - quantized = -E x and its mean is -E mean(x)), an NCHW
// output whose per-channel offset is known, Quark's damping rule on hand-derived values, and the
// errors.
#include <cmath>
#include <cstddef>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include <quark/algo/bias_correction.hpp>
#include <quark/core/error.hpp>

#include "support/checks.hpp"

using quark::test::error_id;

namespace bc = quark::bias_correction;

TEST_CASE("bias_correction: a linear layer with a known weight error") {
  // y = W x + b, 2 outputs, 3 inputs; the "quantized" weight is W + E with
  // E = [[0.125, 0, 0], [0, -0.25, 0.0625]]. The samples x have mean m = (1, 2, 4), so the mean
  // of float - quantized is -E m = (-0.125, 0.5 - 0.25) = (-0.125, 0.25).
  const double w[2][3] = {{0.5, -1, 2}, {1.5, 0.25, -0.75}};
  const double e[2][3] = {{0.125, 0, 0}, {0, -0.25, 0.0625}};
  const double b[2] = {0.5, -1};
  const std::vector<std::vector<double>> xs = {{0, 1, 3}, {2, 3, 5}, {1, 2, 4}, {1, 2, 4}};
  bc::mean_difference d;
  const std::size_t shape[2] = {1, 2};
  auto layer = [&](const std::vector<double>& x, bool quantized, const double* bias) {
    std::vector<float> y(2);
    for (std::size_t o = 0; o < 2; ++o) {
      double a = bias[o];
      for (std::size_t i = 0; i < 3; ++i)
        a += (w[o][i] + (quantized ? e[o][i] : 0.0)) * x[i];
      y[o] = static_cast<float>(a);
    }
    return y;
  };
  for (const auto& x : xs)
    d.observe(layer(x, false, b), layer(x, true, b), shape);
  CHECK(d.channels() == 2);
  CHECK(d.count() == 4.0);
  const std::vector<double> m = d.mean();
  CHECK(m == std::vector<double>{-0.125, 0.25});  // every value here is exact in float
  // The corrected bias: max|d| = 0.25 is above 0.1 and above max|b| / 256 = 1 / 256, so Quark
  // damps the step: k = (1 / 256) / 0.25 = 1 / 64.
  std::vector<float> nb(2);
  const std::vector<double> bias(b, b + 2);
  bc::correct(bias, m, nb);
  CHECK(nb == std::vector<float>{static_cast<float>(0.5 - 0.125 / 64),
                                 static_cast<float>(-1 + 0.25 / 64)});
  // With a large bias (max|b| = 256, so max|b| / 256 = 1 > max|d|) k = 1 and the quantized layer
  // with the corrected bias has the float layer's mean output.
  const double big[2] = {256, -3};
  std::vector<float> nb2(2);
  bc::correct(std::vector<double>(big, big + 2), m, nb2);
  CHECK(nb2 == std::vector<float>{255.875f, -2.75f});
  const double fixed[2] = {static_cast<double>(nb2[0]), static_cast<double>(nb2[1])};
  double mean_f[2] = {0, 0}, mean_q[2] = {0, 0};
  for (const auto& x : xs) {
    const auto f = layer(x, false, big), q = layer(x, true, fixed);
    for (std::size_t o = 0; o < 2; ++o) {
      mean_f[o] += static_cast<double>(f[o]) / 4;
      mean_q[o] += static_cast<double>(q[o]) / 4;
    }
  }
  CHECK(mean_q[0] == doctest::Approx(mean_f[0]).epsilon(1e-9));
  CHECK(mean_q[1] == doctest::Approx(mean_f[1]).epsilon(1e-9));
}

TEST_CASE("bias_correction: NCHW outputs, per-channel offsets known by construction") {
  // Two samples of shape [2 images, 3 channels, 2 x 2]: quantized = reference - delta_c + n,
  // where n alternates +-1 / 8 within each channel (sums to zero): the mean is delta exactly.
  const double delta[3] = {0.5, -0.25, 2};
  bc::mean_difference d;
  const std::size_t shape[4] = {2, 3, 2, 2};
  for (int s = 0; s < 2; ++s) {
    std::vector<float> ref(24), q(24);
    for (std::size_t i = 0; i < 24; ++i) {
      const std::size_t c = (i / 4) % 3;
      ref[i] = static_cast<float>(i) * 0.5f + static_cast<float>(s);
      const double noise = (i % 2 == 0) ? 0.125 : -0.125;
      q[i] = static_cast<float>(static_cast<double>(ref[i]) - delta[c] + noise);
    }
    d.observe(ref, q, shape);
  }
  CHECK(d.count() == 16.0);  // 2 samples x 2 images x 4 positions per channel
  CHECK(d.mean() == std::vector<double>{0.5, -0.25, 2});
}

TEST_CASE("bias_correction: gain, Quark's damping rule") {
  CHECK(bc::gain(0.05, 1.0) == 1.0);   // max|d| <= 0.1
  CHECK(bc::gain(1.0, 256.0) == 1.0);  // max|d| <= max|b| / 256
  CHECK(bc::gain(2.0, 256.0) == 0.5);  // (256 / 256) / 2
  CHECK(bc::gain(0.2, 2.56) == (2.56 / 256.0) / 0.2);
  CHECK(bc::gain(0.0, 0.0) == 1.0);
  CHECK(bc::dequantized(1000001, 0, 0.5f) == 500000.5);
  CHECK(bc::dequantized(-3, 5, 0.25f) == -2.0);
  // An int32 code float32 cannot hold: the double product keeps it.
  CHECK(bc::dequantized(16777217, 0, 1.0f) == 16777217.0);
}

TEST_CASE("bias_correction: bad input names the culprit") {
  bc::mean_difference d;
  CHECK(error_id([&] { (void)d.mean(); }) == "quark.bias_correction.empty_input");
  std::vector<float> a(4), b(4), c(3);
  const std::size_t s1[1] = {4}, s2[2] = {2, 2}, s3[2] = {1, 4};
  CHECK(error_id([&] { d.observe(a, b, s1); }) == "quark.bias_correction.bad_rank");
  CHECK(error_id([&] { d.observe(a, c, s2); }) == "quark.bias_correction.size_mismatch");
  d.observe(a, b, s2);
  CHECK(error_id([&] { d.observe(a, b, s3); }) == "quark.bias_correction.channel_mismatch");
  std::vector<double> bias(2), diff(3);
  std::vector<float> out(2);
  CHECK(error_id([&] { bc::correct(bias, diff, out); }) ==
        "quark.bias_correction.channel_mismatch");
}
