// SPDX-License-Identifier: MIT
// quark::adaround and the AdaRound formulas (include/quark/algo/adaround.hpp):
//  * h(alpha), alpha_init, the beta schedule, the warm start and the regulariser against values
//    derived by hand;
//  * the state: soft weights start at the float weights, per-channel and per-block parameters
//    reach the right elements, hard codes round up exactly where alpha >= 0 and stay inside
//    [qmin, qmax] (int8, uint8 with a zero point, int4);
//  * backward() against central finite differences of the loss plus the regulariser, including
//    elements clipped at qmax (zero reconstruction gradient);
//  * an exhaustive oracle: a 2x3 linear layer on 4 samples, all 2^6 down / up roundings
//    enumerated; AdaRound through the header (Quark's defaults: lr 0.1, reg 0.01, beta 20 -> 2,
//    warm start 0.2, 1000 iterations) is never worse than round-to-nearest, moves no code by
//    more than one step, and reaches the optimum in at least 12 of the 16 cases (8 seeds, per
//    tensor and per channel; 12 when written). With inputs all positive (strongly correlated)
//    the relaxation finds the optimum less often (4 of 16), still never worse than nearest.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include <quark/algo/adaround.hpp>
#include <quark/dtype/formats.hpp>

#include "support/checks.hpp"

using quark::test::error_id;
using quark::test::random_floats;

TEST_CASE("adaround_h: the rectified sigmoid at chosen points (hand-derived)") {
  // h(a) = 1.2 / (1 + e^-a) - 0.1: h(0) = 0.5; h(1) = 1.2 * 0.7310585786300049 - 0.1;
  // h(-1) = 1.2 * 0.2689414213699951 - 0.1; h = 0 for a <= -ln 11 and 1 for a >= ln 11.
  CHECK(quark::adaround_h(0.0) == doctest::Approx(0.5).epsilon(1e-15));
  CHECK(quark::adaround_h(1.0) == doctest::Approx(0.7772702943560059).epsilon(1e-14));
  CHECK(quark::adaround_h(-1.0) == doctest::Approx(0.2227297056439941).epsilon(1e-14));
  CHECK(quark::adaround_h(std::log(11.0)) == doctest::Approx(1.0).epsilon(1e-15));
  CHECK(quark::adaround_h(-2.5) == 0.0);
  CHECK(quark::adaround_h(2.5) == 1.0);
  CHECK(quark::adaround_h(-40.0) == 0.0);
  CHECK(quark::adaround_h(40.0) == 1.0);
  CHECK(quark::adaround_gamma == -0.1);
  CHECK(quark::adaround_zeta == 1.1);
}

TEST_CASE("adaround_alpha_init inverts h for fractions from 0 to 0.999") {
  // alpha = -ln(1.2 / (f + 0.1) - 1): f 0.5 -> -ln 1 = 0; 0.25 -> -ln(17/7); 0 -> -ln 11;
  // 0.9 -> -ln 0.2.
  CHECK(quark::adaround_alpha_init(0.5) == doctest::Approx(0.0));
  CHECK(quark::adaround_alpha_init(0.25) == doctest::Approx(-std::log(17.0 / 7.0)).epsilon(1e-14));
  CHECK(quark::adaround_alpha_init(0.0) == doctest::Approx(-std::log(11.0)).epsilon(1e-14));
  CHECK(quark::adaround_alpha_init(0.9) == doctest::Approx(-std::log(0.2)).epsilon(1e-14));
  for (int k = 0; k < 1000; ++k) {
    const double f = k / 1000.0;
    CAPTURE(f);
    CHECK(quark::adaround_h(quark::adaround_alpha_init(f)) == doctest::Approx(f).epsilon(1e-12));
  }
}

TEST_CASE("adaround_beta and the warm start (hand-derived)") {
  // 100 iterations, warm start 0.2, beta 20 -> 2: beta = 2 + 9 (1 + cos(pi rel)),
  // rel = (it - 20) / 80: it 20 -> 20, 40 -> 2 + 9 (1 + cos(pi / 4)), 60 (midpoint) -> 11,
  // 100 -> 2.
  CHECK(quark::adaround_beta(20, 100, 0.2, 20, 2) == doctest::Approx(20.0).epsilon(1e-15));
  CHECK(quark::adaround_beta(40, 100, 0.2, 20, 2) ==
        doctest::Approx(2.0 + 9.0 * (1.0 + std::sqrt(0.5))).epsilon(1e-15));
  CHECK(quark::adaround_beta(60, 100, 0.2, 20, 2) == doctest::Approx(11.0).epsilon(1e-15));
  CHECK(quark::adaround_beta(100, 100, 0.2, 20, 2) == doctest::Approx(2.0).epsilon(1e-15));
  // No warm start: beta starts at `start` on iteration 0.
  CHECK(quark::adaround_beta(0, 10, 0.0, 20, 2) == doctest::Approx(20.0).epsilon(1e-15));
  CHECK(quark::adaround_beta(5, 10, 0.0, 20, 2) == doctest::Approx(11.0).epsilon(1e-15));
  // ceil(warm_start * n).
  CHECK(quark::adaround_warm_iterations(100, 0.2) == 20);
  CHECK(quark::adaround_warm_iterations(7, 0.2) == 2);  // 1.4 -> 2
  CHECK(quark::adaround_warm_iterations(10, 0.0) == 0);
  CHECK(quark::adaround_warm_iterations(10, 1.0) == 10);
}

TEST_CASE("adaround_regularizer: sum(1 - |2h - 1|^beta) (hand-derived)") {
  const std::vector<double> h{0.0, 0.5, 1.0, 0.25};
  // beta 2: 0 + 1 + 0 + (1 - 0.25); beta 1: 0 + 1 + 0 + 0.5; beta 20: 0 + 1 + 0 + (1 - 2^-20).
  CHECK(quark::adaround_regularizer(h, 2.0) == doctest::Approx(1.75).epsilon(1e-15));
  CHECK(quark::adaround_regularizer(h, 1.0) == doctest::Approx(1.5).epsilon(1e-15));
  CHECK(quark::adaround_regularizer(h, 20.0) ==
        doctest::Approx(2.0 - std::ldexp(1.0, -20)).epsilon(1e-15));
  CHECK(quark::adaround_regularizer({}, 2.0) == 0.0);
}

TEST_CASE("adaround state: soft weights start at w, per-channel scales, hard codes") {
  // 2 x 3 weights with one scale per column (axis 1) and per row (axis 0).
  const std::vector<float> w{0.13f, -0.27f, 0.049f, 0.71f, -0.0049f, 0.33f};
  const float col_s[3] = {0.1f, 0.05f, 0.02f};
  const float row_s[2] = {0.04f, 0.3f};
  for (const bool by_column : {true, false}) {
    CAPTURE(by_column);
    quark::tensor_qparams<std::int8_t> p{
        by_column ? std::span<const float>(col_s) : std::span<const float>(row_s),
        {},
        quark::per_channel{by_column ? 1 : 0},
        -127,
        127};
    quark::adaround<std::int8_t> ar(quark::tensor_shape{2, 3}, w, p);
    REQUIRE(ar.size() == 6);
    const auto wq = ar.soft_weights();
    std::int8_t q[6];
    ar.hard_codes(q);
    for (std::size_t i = 0; i < 6; ++i) {
      CAPTURE(i);
      const float s = by_column ? col_s[i % 3] : row_s[i / 3];
      // s (floor(v) + h(alpha_init(frac))) = s v, v = w / s in float, up to the inversion's
      // rounding; so w up to float's.
      CHECK(wq[i] ==
            doctest::Approx(static_cast<double>(s) * static_cast<double>(w[i] / s)).epsilon(1e-12));
      CHECK(wq[i] == doctest::Approx(static_cast<double>(w[i])).epsilon(1e-6));
      // Round up exactly when the fraction is at least 0.5 (none of these is 0.5 exactly).
      const double v = static_cast<double>(w[i] / s);
      const double up = v - std::floor(v) >= 0.5 ? 1.0 : 0.0;
      CHECK(static_cast<double>(q[i]) == std::floor(v) + up);
      CHECK((ar.alpha()[i] >= 0.0) == (up == 1.0));
    }
  }
}

TEST_CASE("adaround state with per-block parameters (ONNX blocked layout)") {
  // 2 x 4 weights, blocks of 2 along axis 1: element (r, c) takes scale r * 2 + c / 2 and zero
  // point likewise (uint8).
  const std::vector<float> w{0.13f, -0.27f, 0.049f, 0.71f, -0.0049f, 0.33f, 1.9f, -0.6f};
  const float s[4] = {0.1f, 0.05f, 0.02f, 0.3f};
  const std::int32_t zp[4] = {100, 120, 140, 160};
  quark::tensor_qparams<std::uint8_t> p{s, zp, quark::per_block{.axis = 1, .block_size = 2}};
  quark::adaround<std::uint8_t> ar(quark::tensor_shape{2, 4}, w, p);
  const auto wq = ar.soft_weights();
  std::uint8_t q[8];
  ar.hard_codes(q);
  for (std::size_t i = 0; i < 8; ++i) {
    CAPTURE(i);
    const std::size_t k = (i / 4) * 2 + (i % 4) / 2;
    CHECK(wq[i] == doctest::Approx(static_cast<double>(w[i])).epsilon(1e-6));
    const double v = static_cast<double>(w[i] / s[k]);
    const double up = v - std::floor(v) >= 0.5 ? 1.0 : 0.0;
    CHECK(static_cast<double>(q[i]) == std::floor(v) + up + zp[k]);
  }
}

TEST_CASE("adaround hard codes stay inside qmin..qmax (int8, uint8 with zero point, int4)") {
  {
    // s 0.01, int8 clip [-127, 127]: 500 -> 127, -500 -> -127, 0 -> 0, 1.49 -> 1, 126.7 -> 127.
    const std::vector<float> w{5.0f, -5.0f, 0.0f, 0.0149f, 1.267f};
    const float s = 0.01f;
    quark::tensor_qparams<std::int8_t> p{std::span(&s, 1), {}, quark::per_tensor{}, -127, 127};
    quark::adaround<std::int8_t> ar(quark::tensor_shape{5}, w, p);
    std::int8_t q[5];
    ar.hard_codes(q);
    CHECK(q[0] == 127);
    CHECK(q[1] == -127);
    CHECK(q[2] == 0);
    CHECK(q[3] == 1);
    CHECK(q[4] == 127);
    // Every alpha pushed to +-40: still inside.
    for (const double a : {-40.0, 40.0}) {
      for (double& x : ar.alpha())
        x = a;
      ar.hard_codes(q);
      for (const auto c : q) {
        CHECK(c >= -127);
        CHECK(c <= 127);
      }
    }
    // Clipped soft weights: (clamp(v) - zp) s.
    const auto wq = ar.soft_weights();
    CHECK(wq[0] == doctest::Approx(127 * 0.01).epsilon(1e-6));
    CHECK(wq[1] == doctest::Approx(-127 * 0.01).epsilon(1e-6));
  }
  {
    // uint8, zero point 128, s 0.01: -3 -> -300 + 128 -> 0; 3 -> 428 -> 255; 0.004 -> 128 (0.4
    // down); 0.006 -> 129 (0.6 up).
    const std::vector<float> w{-3.0f, 3.0f, 0.004f, 0.006f};
    const float s = 0.01f;
    const std::int32_t zp = 128;
    quark::tensor_qparams<std::uint8_t> p{std::span(&s, 1), std::span(&zp, 1)};
    quark::adaround<std::uint8_t> ar(quark::tensor_shape{4}, w, p);
    std::uint8_t q[4];
    ar.hard_codes(q);
    CHECK(q[0] == 0);
    CHECK(q[1] == 255);
    CHECK(q[2] == 128);
    CHECK(q[3] == 129);
  }
  {
    // int4 [-8, 7], s 1: 7.6 -> 7 (up, clipped), -8.6 -> floor -9 + 0 (0.4) -> -8, 2.7 -> 3.
    const std::vector<float> w{7.6f, -8.6f, 2.7f};
    const float s = 1.0f;
    quark::tensor_qparams<quark::int4> p{std::span(&s, 1)};
    quark::adaround<quark::int4> ar(quark::tensor_shape{3}, w, p);
    quark::int4 q[3];
    ar.hard_codes(q);
    CHECK(q[0].value() == 7);
    CHECK(q[1].value() == -8);
    CHECK(q[2].value() == 3);
  }
}

TEST_CASE("adaround backward matches central finite differences") {
  // L(alpha) = 0.5 sum (wq - t)^2 + weight * sum(1 - |2 h - 1|^beta); dL/dwq = wq - t. Clip
  // [-3, 3] with s 0.5: element 5 (w / s = 3.4: floor 3, any h > 0 is clipped) has no
  // reconstruction gradient, only the regulariser's.
  const std::vector<float> w{0.12f, -0.61f, 0.93f, -1.27f, 0.4f, 1.7f};
  const std::vector<double> target{0.2, -0.5, 1.0, -1.5, 0.3, 1.2};
  const std::vector<double> alpha{0.3, -1.1, 1.7, -0.2, 0.9, 0.6};
  const float s = 0.5f;
  quark::tensor_qparams<std::int8_t> p{std::span(&s, 1), {}, quark::per_tensor{}, -3, 3};
  quark::adaround<std::int8_t> ar(quark::tensor_shape{2, 3}, w, p);
  const quark::adaround_reg reg{0.05, 3.0};
  auto loss_at = [&](const std::vector<double>& a, std::vector<double>* grad_wq) {
    std::copy(a.begin(), a.end(), ar.alpha().begin());
    const auto wq = ar.soft_weights();
    double l = 0.0;
    for (std::size_t i = 0; i < wq.size(); ++i) {
      l += 0.5 * (wq[i] - target[i]) * (wq[i] - target[i]);
      if (grad_wq != nullptr)
        (*grad_wq)[i] = wq[i] - target[i];
    }
    return l;
  };
  for (const bool with_reg : {false, true}) {
    CAPTURE(with_reg);
    const std::optional<quark::adaround_reg> r =
        with_reg ? std::optional<quark::adaround_reg>(reg) : std::nullopt;
    auto full = [&](const std::vector<double>& a) {
      const double l = loss_at(a, nullptr);
      return with_reg ? l + reg.weight * quark::adaround_regularizer(ar.h(), reg.beta) : l;
    };
    std::vector<double> g(6);
    const double l0 = loss_at(alpha, &g);
    const double total = ar.backward(g, l0, r, g);  // in place
    CHECK(total == doctest::Approx(full(alpha)).epsilon(1e-14));
    for (std::size_t i = 0; i < 6; ++i) {
      CAPTURE(i);
      const double eps = 1e-6;
      std::vector<double> a = alpha;
      a[i] += eps;
      const double up = full(a);
      a[i] = alpha[i] - eps;
      const double down = full(a);
      const double fd = (up - down) / (2.0 * eps);
      CHECK(g[i] == doctest::Approx(fd).epsilon(1e-6).scale(1e-9));
    }
    // Element 5 is clipped: no reconstruction gradient.
    if (!with_reg)
      CHECK(g[5] == 0.0);
    else
      CHECK(g[5] != 0.0);
  }
}

namespace {

/// A 2 x 3 linear layer y = W x on 4 samples: L(Wq) = (1/4) sum_s sum_o (sum_k x_sk (Wq - W))^2,
/// the reconstruction loss of quark-spec §10.5 (summed over outputs, averaged over samples).
struct tiny_linear {
  static constexpr std::size_t out = 2, in = 3, samples = 4;
  std::vector<float> w, x;
  double loss(std::span<const double> wq, std::span<double> grad = {}) const {
    double l = 0.0;
    for (double& g : grad)
      g = 0.0;
    for (std::size_t s = 0; s < samples; ++s) {
      for (std::size_t o = 0; o < out; ++o) {
        double d = 0.0;
        for (std::size_t k = 0; k < in; ++k)
          d += static_cast<double>(x[s * in + k]) *
               (wq[o * in + k] - static_cast<double>(w[o * in + k]));
        l += d * d;
        if (!grad.empty()) {
          for (std::size_t k = 0; k < in; ++k)
            grad[o * in + k] += 2.0 * d * static_cast<double>(x[s * in + k]) / samples;
        }
      }
    }
    return l / samples;
  }
};

}  // namespace

TEST_CASE("AdaRound on a 2x3 linear layer reaches the exhaustive optimum of the 64 roundings") {
  const std::size_t n = 1000;
  const double warm = 0.2;
  int reached = 0, cases = 0;
  for (const std::uint32_t seed : {1u, 2u, 3u, 4u, 5u, 6u, 7u, 8u}) {
    for (const bool per_channel : {false, true}) {
      CAPTURE(seed);
      CAPTURE(per_channel);
      tiny_linear layer{random_floats(6, seed, -1.0f, 1.0f),
                        random_floats(12, seed + 100, -1.0f, 1.0f)};
      const float s_tensor = 0.125f;
      const float s_rows[2] = {0.1f, 0.15f};
      quark::tensor_qparams<std::int8_t> p{
          per_channel ? std::span<const float>(s_rows) : std::span<const float>(&s_tensor, 1),
          {},
          per_channel ? quark::granularity{quark::per_channel{0}}
                      : quark::granularity{quark::per_tensor{}},
          -127,
          127};
      auto scale = [&](std::size_t i) { return per_channel ? s_rows[i / 3] : s_tensor; };
      auto dequant = [&](const auto& codes) {
        std::vector<double> d(6);
        for (std::size_t i = 0; i < 6; ++i)
          d[i] = static_cast<double>(codes[i]) * static_cast<double>(scale(i));
        return d;
      };
      // The oracle: every floor / floor + 1 choice.
      double best = std::numeric_limits<double>::infinity();
      std::vector<double> codes(6);
      for (unsigned mask = 0; mask < 64; ++mask) {
        for (std::size_t i = 0; i < 6; ++i)
          codes[i] = std::floor(static_cast<double>(layer.w[i] / scale(i))) + ((mask >> i) & 1u);
        best = std::min(best, layer.loss(dequant(codes)));
      }
      for (std::size_t i = 0; i < 6; ++i)
        codes[i] = std::nearbyint(static_cast<double>(layer.w[i] / scale(i)));
      const double nearest = layer.loss(dequant(codes));

      quark::adaround<std::int8_t> ar(quark::tensor_shape{2, 3}, layer.w, p, {.lr = 0.1});
      std::vector<double> g(6);
      for (std::size_t it = 0; it < n; ++it) {
        const double l = layer.loss(ar.soft_weights(), g);
        std::optional<quark::adaround_reg> reg;
        if (it >= quark::adaround_warm_iterations(n, warm))
          reg = quark::adaround_reg{0.01, quark::adaround_beta(it, n, warm, 20.0, 2.0)};
        ar.step(g, l, reg);
      }
      std::int8_t q[6];
      ar.hard_codes(q);
      const double got = layer.loss(dequant(q));
      MESSAGE("seed " << seed << std::string(per_channel ? " per channel" : " per tensor")
                      << ": adaround " << got << ", nearest " << nearest << ", optimum " << best);
      CHECK(got <= nearest * (1.0 + 1e-12));
      for (std::size_t i = 0; i < 6; ++i)
        CHECK(std::fabs(static_cast<double>(q[i]) - codes[i]) <= 1.0);
      ++cases;
      if (got <= best * (1.0 + 1e-12))
        ++reached;
    }
  }
  MESSAGE("optimum reached in " << reached << " of " << cases);
  CHECK(reached >= 12);
}

TEST_CASE("adaround: bad input is an error naming the problem") {
  const float s = 0.1f;
  quark::tensor_qparams<std::int8_t> p{std::span(&s, 1)};
  const std::vector<float> w{0.1f, 0.2f, 0.3f};
  CHECK(error_id([&] { quark::adaround<std::int8_t>(quark::tensor_shape{4}, w, p); }) ==
        "quark.quant.size_mismatch");
  const float zero = 0.0f;
  quark::tensor_qparams<std::int8_t> bad{std::span(&zero, 1)};
  CHECK(error_id([&] { quark::adaround<std::int8_t>(quark::tensor_shape{3}, w, bad); }) ==
        "quark.quant.bad_scale");
  const std::vector<float> nan_w{0.1f, std::numeric_limits<float>::quiet_NaN(), 0.3f};
  CHECK(error_id([&] { quark::adaround<std::int8_t>(quark::tensor_shape{3}, nan_w, p); }) ==
        "quark.algo.bad_weight");
  quark::adaround<std::int8_t> ar(quark::tensor_shape{3}, w, p);
  std::vector<double> g(2);
  CHECK(error_id([&] { ar.step(g, 0.0); }) == "quark.algo.size_mismatch");
  std::int8_t q[2];
  CHECK(error_id([&] { ar.hard_codes(q); }) == "quark.algo.size_mismatch");
}

TEST_CASE("adaround: h, soft weights and the gradient equal the formulas for every alpha") {
  // The state skips the exp where |alpha| > 3 (h clamped to 0 or 1 there) and the pow where
  // |2h - 1| = 1. Against the formulas evaluated in full (sigmoid, clamp, the regulariser's pow)
  // on alphas from -8 to 8 in steps of 1/64 (so 3 and -3 exactly, and their neighbours), bit
  // for bit: h, the soft weights, the loss and dL/dalpha.
  std::vector<double> alphas;
  for (int k = -512; k <= 512; ++k)
    alphas.push_back(static_cast<double>(k) / 64.0);
  for (const double a : {3.0, -3.0})
    alphas.insert(alphas.end(), {std::nextafter(a, 0.0), std::nextafter(a, 10.0 * a)});
  const std::size_t n = alphas.size();
  std::vector<float> w(n);
  for (std::size_t i = 0; i < n; ++i)
    w[i] = static_cast<float>(i % 23) * 0.37f - 4.0f;  // inside [-127, 127] * s
  const float s = 0.25f;
  quark::tensor_qparams<std::int8_t> p{std::span(&s, 1), {}, quark::per_tensor{}, -127, 127};
  quark::adaround<std::int8_t> ar(quark::tensor_shape{n}, w, p);
  std::copy(alphas.begin(), alphas.end(), ar.alpha().begin());
  const auto wq = ar.soft_weights();
  std::vector<double> grad_wq(n), grad(n);
  for (std::size_t i = 0; i < n; ++i)
    grad_wq[i] = std::cos(static_cast<double>(i));
  const quark::adaround_reg reg{0.01, 7.5};
  const double loss = ar.backward(grad_wq, 0.5, reg, grad);
  constexpr double stretch = quark::adaround_zeta - quark::adaround_gamma;
  double want_loss = 0.5;
  std::size_t wrong = 0, saturated = 0;
  auto bits = [](double x) { return std::bit_cast<std::uint64_t>(x); };
  for (std::size_t i = 0; i < n; ++i) {
    const double sig = 1.0 / (1.0 + std::exp(-alphas[i]));
    const double raw = sig * stretch + quark::adaround_gamma;
    const double h = std::clamp(raw, 0.0, 1.0);
    const double dh = raw > 0.0 && raw < 1.0 ? sig * (1.0 - sig) * stretch : 0.0;
    const double base = std::floor(static_cast<double>(w[i] / s));
    const double want_wq = std::clamp(base + h, -127.0, 127.0) * static_cast<double>(s);
    const double u = 2.0 * h - 1.0;
    const double au = std::fabs(u);
    want_loss += reg.weight * (1.0 - std::pow(au, reg.beta));
    double gh = grad_wq[i] * static_cast<double>(s);
    if (au > 0.0)
      gh += reg.weight * (-reg.beta * std::pow(au, reg.beta - 1.0) * (u > 0.0 ? 2.0 : -2.0));
    saturated += dh == 0.0 ? 1u : 0u;
    wrong +=
        bits(ar.h()[i]) != bits(h) || bits(wq[i]) != bits(want_wq) || bits(grad[i]) != bits(gh * dh)
            ? 1u
            : 0u;
  }
  CHECK(wrong == 0);
  CHECK(bits(loss) == bits(want_loss));
  CHECK(saturated > n / 2);  // the shortcuts were taken
  // The regulariser function alone, on h values 0, 1 and between.
  const std::vector<double> hs{0.0, 1.0, 0.25, 0.5, 1.0, 0.0, 0.875};
  double want = 0.0;
  for (const double h : hs)
    want += 1.0 - std::pow(std::fabs(2.0 * h - 1.0), 4.0);
  CHECK(bits(quark::adaround_regularizer(hs, 4.0)) == bits(want));
}
