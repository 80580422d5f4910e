// SPDX-License-Identifier: MIT
// quark/algo/cle.hpp against hand-derived vectors (pair scales where the square root is exact,
// each branch of Quark's bias shrink rule, the zero-weight rules of the bias column) and against
// properties that do not use our own output: after a pair step both ranges equal sqrt(r0 r1);
// after a triple step all three equal cbrt(m0 m1 m2); Conv -> Relu -> Conv (dense, grouped,
// Gemm in both layouts) and Conv -> Relu -> depthwise Conv -> Relu -> Conv computed by a naive
// reference convolution give the same outputs before and after equalization.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include <doctest/doctest.h>

#include <quark/algo/cle.hpp>
#include <quark/core/error.hpp>

#include "support/checks.hpp"

using quark::test::error_id;

namespace cle = quark::cle;
using cle::weight_layout;

namespace {

/// Deterministic floats in [lo, hi) (a 64-bit LCG, independent of the standard library).
std::vector<float> rnd(std::size_t n, std::uint64_t seed, float lo, float hi) {
  std::vector<float> v(n);
  std::uint64_t s = seed * 6364136223846793005ULL + 1442695040888963407ULL;
  for (auto& x : v) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    const double u = static_cast<double>(s >> 11) / 9007199254740992.0;
    x = static_cast<float>(static_cast<double>(lo) + static_cast<double>(hi - lo) * u);
  }
  return v;
}

/// Naive 1-D grouped convolution, stride 1, no padding, in double: x [in, len] -> y [out,
/// len - k + 1], w [out, in / groups, k], y += b.
std::vector<double> conv1d(const std::vector<double>& x, std::size_t in, std::size_t len,
                           const std::vector<float>& w, const std::vector<float>& b,
                           std::size_t out, std::size_t k, std::size_t groups) {
  const std::size_t ol = len - k + 1, in_g = in / groups, out_g = out / groups;
  std::vector<double> y(out * ol, 0.0);
  for (std::size_t o = 0; o < out; ++o) {
    const std::size_t g = o / out_g;
    for (std::size_t t = 0; t < ol; ++t) {
      double acc = b.empty() ? 0.0 : static_cast<double>(b[o]);
      for (std::size_t i = 0; i < in_g; ++i)
        for (std::size_t j = 0; j < k; ++j)
          acc += static_cast<double>(w[(o * in_g + i) * k + j]) * x[(g * in_g + i) * len + t + j];
      y[o * ol + t] = acc;
    }
  }
  return y;
}

std::vector<double> relu(std::vector<double> v) {
  for (auto& x : v)
    x = std::max(x, 0.0);
  return v;
}

std::vector<double> as_double(const std::vector<float>& v) {
  return {v.begin(), v.end()};
}

void check_close(const std::vector<double>& a, const std::vector<double>& b, double tol) {
  REQUIRE(a.size() == b.size());
  double scale = 0.0;
  for (const double x : a)
    scale = std::max(scale, std::fabs(x));
  for (std::size_t i = 0; i < a.size(); ++i)
    CHECK(std::fabs(a[i] - b[i]) <= tol * scale);
}

std::vector<double> out_range(const std::vector<float>& w, const weight_layout& l) {
  std::vector<double> r(l.out_channels);
  cle::out_channel_absmax<float>(w, l, r);
  return r;
}

std::vector<double> in_range(const std::vector<float>& w, const weight_layout& l) {
  std::vector<double> r(l.in_channels);
  cle::in_channel_absmax<float>(w, l, r);
  return r;
}

std::vector<double> head_range(const std::vector<float>& w, const weight_layout& l,
                               const std::vector<float>& b) {
  std::vector<double> r(l.out_channels);
  cle::head_range_with_bias<float>(w, l, b, r);
  return r;
}

}  // namespace

TEST_CASE("cle: channel ranges of each layout, read by hand") {
  // Conv [out 2, in 3, k 2]: element (o, i, j) = 100 o + 10 i + j, so out range = 100 o + 21,
  // in range over o = 1 = 100 + 10 i + 1.
  std::vector<float> w(12);
  for (std::size_t o = 0; o < 2; ++o)
    for (std::size_t i = 0; i < 3; ++i)
      for (std::size_t j = 0; j < 2; ++j)
        w[(o * 3 + i) * 2 + j] = static_cast<float>(100 * o + 10 * i + j);
  const auto conv = weight_layout::conv(2, 3, 2);
  CHECK(out_range(w, conv) == std::vector<double>{21, 121});
  CHECK(in_range(w, conv) == std::vector<double>{101, 111, 121});
  // The same 12 values as Gemm B [in 4, out 3] (transB = 0): element (i, o) = w[i * 3 + o].
  const auto io = weight_layout::in_out(4, 3);
  // Flat values 0 1 10 11 20 21 100 101 110 111 120 121: column o holds elements o, 3 + o, ...
  CHECK(out_range(w, io) == std::vector<double>{111, 120, 121});
  CHECK(in_range(w, io) == std::vector<double>{10, 21, 110, 121});
  // Grouped Conv, 4 outputs, 6 inputs, 2 groups, k 1: [4, 3]; outputs 0-1 read inputs 0-2,
  // outputs 2-3 read inputs 3-5.
  std::vector<float> g = {1, -2, 3, 4, 5, -6, -7, 8, 9, 10, 11, 12};
  const auto grouped = weight_layout::conv(4, 6, 1, 2);
  CHECK(out_range(g, grouped) == std::vector<double>{3, 6, 9, 12});
  CHECK(in_range(g, grouped) == std::vector<double>{4, 5, 6, 10, 11, 12});
  // Depthwise [3, 1, k 2]: in channel == out channel.
  std::vector<float> d = {1, -5, 2, 3, -4, 0.5f};
  const auto dw = weight_layout::conv(3, 3, 2, 3);
  CHECK(out_range(d, dw) == std::vector<double>{5, 3, 4});
  CHECK(in_range(d, dw) == std::vector<double>{5, 3, 4});
}

TEST_CASE("cle: pair scales where sqrt is exact") {
  std::vector<double> s(3);
  // r0 = {4, 1, 0.25}, r1 = {1, 4, 0.0625}: sqrt(r0 r1) = {2, 2, 0.125}, s = r1 / that.
  const std::vector<double> r0 = {4, 1, 0.25}, r1 = {1, 4, 0.0625};
  cle::pair_scales(r0, r1, s, {.use_threshold = false});
  CHECK(s == std::vector<double>{0.5, 2, 0.5});
  // With the threshold (0.5): channel 2 has r0 + r1 = 0.3125 < 0.5 and keeps scale 1.
  cle::pair_scales(r0, r1, s, {});
  CHECK(s == std::vector<double>{0.5, 2, 1});
  cle::pair_scales(r0, r1, s, {.weight_threshold = 5.5});
  CHECK(s == std::vector<double>{1, 1, 1});
  // A zero range: scale 1.
  const std::vector<double> z0 = {0, 3}, z1 = {3, 0};
  std::vector<double> s2(2);
  cle::pair_scales(z0, z1, s2, {});
  CHECK(s2 == std::vector<double>{1, 1});
}

TEST_CASE("cle: a 2-channel pair equalized by hand") {
  // Head Conv [2, 1, 1]: r0 = {4, 1}; tail Conv [1, 2, 1]: r1 = {1, 4}. s = {1/2, 2}; both
  // layers end at range 2 in every channel, every value exact.
  std::vector<float> hw = {4, -1}, hb = {2, 3}, tw = {1, -4};
  cle::equalize_pair<float>({hw, weight_layout::conv(2, 1, 1), hb},
                            {tw, weight_layout::conv(1, 2, 1)}, {.append_bias = false});
  CHECK(hw == std::vector<float>{2, -2});
  CHECK(hb == std::vector<float>{1, 6});
  CHECK(tw == std::vector<float>{2, -2});
}

TEST_CASE("cle: bias_shrink, each branch") {
  // Small bias (max_b < 10 and max_b / max_w < 20).
  CHECK(cle::bias_shrink(1, 1, 100, 1000) == 2.0);
  CHECK(cle::bias_shrink(1, 1, 100.5, 0) == 5.0);
  CHECK(cle::bias_shrink(1, 1, 0, 1000.5) == 5.0);
  // max_b >= 10, or max_b / max_w >= 20.
  CHECK(cle::bias_shrink(10, 100, 30.5, 0) == 20.0);
  CHECK(cle::bias_shrink(1, 0.05, 0, 500.5) == 20.0);
  CHECK(cle::bias_shrink(10, 100, 15.5, 0) == 10.0);
  CHECK(cle::bias_shrink(10, 100, 30, 100.5) == 10.0);
  CHECK(cle::bias_shrink(10, 100, 15, 100) == 5.0);
}

TEST_CASE("cle: head_range_with_bias, each shrink branch through the factors") {
  // No zero weight. Channels {1, 2} b 1 and {0.5, 0.5} b 3: factors 1, 0.5, 6, 6; median 3.5,
  // mean 3.375, max_b 3, max_w 2: shrink 2. r = {max(2, 0.5), max(0.5, 1.5)}.
  CHECK(head_range({1, 2, 0.5f, 0.5f}, weight_layout::out_in(2, 2), {1, 3}) ==
        std::vector<double>{2, 1.5});
  // Median 9000 > 100 in the small branch (max_b 9 < 10, max_b / max_w 9 < 20): shrink 5.
  CHECK(head_range({1, 0.001f, 0.001f}, weight_layout::out_in(1, 3), {9}) ==
        std::vector<double>{9.0 / 5.0});
  // max_b >= 10: median 40 -> 20, median 20 -> 10, median 12 -> 5.
  CHECK(head_range({1, 1}, weight_layout::out_in(1, 2), {40}) == std::vector<double>{2});
  CHECK(head_range({1, 1}, weight_layout::out_in(1, 2), {20}) == std::vector<double>{2});
  CHECK(head_range({1, 1}, weight_layout::out_in(1, 2), {12}) == std::vector<double>{12.0 / 5});
  // Gemm B [in, out] layout: the bias column is per output (column).
  CHECK(head_range({1, 0.5f, 2, 0.5f}, weight_layout::in_out(2, 2), {1, 3}) ==
        std::vector<double>{2, 1.5});
}

TEST_CASE("cle: head_range_with_bias, the zero-weight rules") {
  // A zero inside a partly non-zero channel counts as that channel's smallest non-zero
  // magnitude: factors all 8, mean 8, shrink 2, r = 4 in both channels. (Counted as 1e-7 the
  // mean would be 2e7 and the shrink 5.)
  CHECK(head_range({1, 1, 0, 1}, weight_layout::out_in(2, 2), {8, 8}) == std::vector<double>{4, 4});
  // An all-zero channel loses its bias (r = 0, not 8 / shrink); factors {8, 8, 0, 0}: median 4.
  CHECK(head_range({1, 1, 0, 0}, weight_layout::out_in(2, 2), {8, 8}) == std::vector<double>{4, 0});
}

TEST_CASE("cle: pair property, both ranges become sqrt(r0 r1), function unchanged") {
  // Conv(4 -> 6, k 3) + bias -> Relu -> Conv(6 -> 5, k 2), on a length-12 input.
  std::vector<float> w0 = rnd(6 * 4 * 3, 1, -1, 1), b0 = rnd(6, 2, -0.5f, 0.5f);
  std::vector<float> w1 = rnd(5 * 6 * 2, 3, -1, 1), b1 = rnd(5, 4, -0.5f, 0.5f);
  for (std::size_t k = 0; k < 4 * 3; ++k)
    w0[2 * 4 * 3 + k] *= 8.0f;  // channel 2 much wider than the others
  const auto l0 = weight_layout::conv(6, 4, 3), l1 = weight_layout::conv(5, 6, 2);
  const std::vector<double> x = as_double(rnd(4 * 12, 5, -2, 2));
  auto run = [&] {
    return conv1d(relu(conv1d(x, 4, 12, w0, b0, 6, 3, 1)), 6, 10, w1, b1, 5, 2, 1);
  };
  const std::vector<double> before = run();
  const std::vector<double> r0 = out_range(w0, l0), r1 = in_range(w1, l1);
  cle::equalize_pair<float>({w0, l0, b0}, {w1, l1}, {.append_bias = false});
  const std::vector<double> a0 = out_range(w0, l0), a1 = in_range(w1, l1);
  for (std::size_t c = 0; c < 6; ++c) {
    const double want = std::sqrt(r0[c] * r1[c]);
    CHECK(a0[c] == doctest::Approx(want).epsilon(1e-6));
    CHECK(a1[c] == doctest::Approx(want).epsilon(1e-6));
  }
  check_close(before, run(), 1e-6);
  // With the bias column and repeated steps the function stays the same too.
  for (int step = 0; step < 5; ++step)
    cle::equalize_pair<float>({w0, l0, b0}, {w1, l1}, {});
  check_close(before, run(), 1e-5);
}

TEST_CASE("cle: pair into a grouped Conv, function unchanged") {
  // Conv(3 -> 4, k 1) -> Relu -> Conv(4 -> 6, k 3, groups 2).
  std::vector<float> w0 = rnd(4 * 3, 11, -3, 3), b0 = rnd(4, 12, -1, 1);
  std::vector<float> w1 = rnd(6 * 2 * 3, 13, -0.2f, 0.2f), b1 = rnd(6, 14, -1, 1);
  const auto l0 = weight_layout::conv(4, 3, 1), l1 = weight_layout::conv(6, 4, 3, 2);
  const std::vector<double> x = as_double(rnd(3 * 9, 15, -2, 2));
  auto run = [&] { return conv1d(relu(conv1d(x, 3, 9, w0, b0, 4, 1, 1)), 4, 9, w1, b1, 6, 3, 2); };
  const std::vector<double> before = run();
  const std::vector<double> r0 = out_range(w0, l0), r1 = in_range(w1, l1);
  cle::equalize_pair<float>({w0, l0, b0}, {w1, l1}, {.append_bias = false});
  const std::vector<double> a0 = out_range(w0, l0), a1 = in_range(w1, l1);
  for (std::size_t c = 0; c < 4; ++c) {
    CHECK(a0[c] == doctest::Approx(std::sqrt(r0[c] * r1[c])).epsilon(1e-6));
    CHECK(a1[c] == doctest::Approx(std::sqrt(r0[c] * r1[c])).epsilon(1e-6));
  }
  check_close(before, run(), 1e-6);
}

TEST_CASE("cle: Gemm pair, B as [in, out] then [out, in], function unchanged") {
  // y = W1^T relu(W0^T x + b0) + b1 with W0 stored [in 5, out 7] and W1 [out 3, in 7].
  std::vector<float> w0 = rnd(5 * 7, 21, -2, 2), b0 = rnd(7, 22, -1, 1);
  std::vector<float> w1 = rnd(3 * 7, 23, -0.1f, 0.1f);
  const auto l0 = weight_layout::in_out(5, 7), l1 = weight_layout::out_in(3, 7);
  const std::vector<float> x = rnd(5, 24, -1, 1);
  auto run = [&] {
    std::vector<double> h(7), y(3);
    for (std::size_t o = 0; o < 7; ++o) {
      auto a = static_cast<double>(b0[o]);
      for (std::size_t i = 0; i < 5; ++i)
        a += static_cast<double>(w0[i * 7 + o]) * static_cast<double>(x[i]);
      h[o] = std::max(a, 0.0);
    }
    for (std::size_t o = 0; o < 3; ++o)
      for (std::size_t i = 0; i < 7; ++i)
        y[o] += static_cast<double>(w1[o * 7 + i]) * h[i];
    return y;
  };
  const std::vector<double> before = run();
  cle::equalize_pair<float>({w0, l0, b0}, {w1, l1}, {});
  check_close(before, run(), 1e-6);
}

TEST_CASE("cle: triple, all three ranges become cbrt(m0 m1 m2), function unchanged") {
  // Conv(3 -> 5, k 1) -> Relu -> depthwise Conv(5, k 3) -> Relu -> Conv(5 -> 4, k 1).
  std::vector<float> w0 = rnd(5 * 3, 31, -2, 2), b0 = rnd(5, 32, -1, 1);
  std::vector<float> w1 = rnd(5 * 3, 33, -0.3f, 0.3f), b1 = rnd(5, 34, -1, 1);
  std::vector<float> w2 = rnd(4 * 5, 35, -5, 5), b2 = rnd(4, 36, -1, 1);
  const auto l0 = weight_layout::conv(5, 3, 1), l1 = weight_layout::conv(5, 5, 3, 5),
             l2 = weight_layout::conv(4, 5, 1);
  const std::vector<double> x = as_double(rnd(3 * 8, 37, -2, 2));
  auto run = [&] {
    const auto h0 = relu(conv1d(x, 3, 8, w0, b0, 5, 1, 1));
    const auto h1 = relu(conv1d(h0, 5, 8, w1, b1, 5, 3, 5));
    return conv1d(h1, 5, 6, w2, b2, 4, 1, 1);
  };
  const std::vector<double> before = run();
  const std::vector<double> m0 = out_range(w0, l0), m1 = out_range(w1, l1), m2 = in_range(w2, l2);
  cle::equalize_triple<float>({w0, l0, b0}, {w1, l1, b1}, {w2, l2, b2});
  const std::vector<double> a0 = out_range(w0, l0), a1 = out_range(w1, l1), a2 = in_range(w2, l2);
  for (std::size_t c = 0; c < 5; ++c) {
    const double g = std::cbrt(m0[c] * m1[c] * m2[c]);
    CHECK(a0[c] == doctest::Approx(g).epsilon(1e-6));
    CHECK(a1[c] == doctest::Approx(g).epsilon(1e-6));
    CHECK(a2[c] == doctest::Approx(g).epsilon(1e-6));
  }
  check_close(before, run(), 1e-6);
}

TEST_CASE("cle: triple scales by hand") {
  // m = (8, 1, 1): g = 2, s01 = 4, s12 = 2, s_dw = 2. m = (0, 1, 1): g = 0, s01 = 0/0 -> 1,
  // s12 = 0 -> 1.
  const std::vector<double> m0 = {8, 0}, m1 = {1, 1}, m2 = {1, 1};
  std::vector<double> a(2), b(2), d(2);
  cle::triple_scales(m0, m1, m2, a, b, d);
  CHECK(a == std::vector<double>{4, 1});
  CHECK(b == std::vector<double>{2, 1});
  CHECK(d == std::vector<double>{2, 1});
}

TEST_CASE("cle: double weights are equalized in double") {
  std::vector<double> hw = {4, -1}, tw = {1, -4};
  cle::equalize_pair<double>({hw, weight_layout::conv(2, 1, 1)}, {tw, weight_layout::conv(1, 2, 1)},
                             {});
  CHECK(hw == std::vector<double>{2, -2});
  CHECK(tw == std::vector<double>{2, -2});
}

TEST_CASE("cle: bad layouts and sizes name the problem") {
  std::vector<float> w(6);
  std::vector<double> r(2);
  CHECK(error_id([&] { cle::out_channel_absmax<float>(w, weight_layout::conv(2, 2, 2), r); }) ==
        "quark.cle.shape_mismatch");
  CHECK(error_id([&] { cle::out_channel_absmax<float>(w, weight_layout::conv(2, 3, 1, 2), r); }) ==
        "quark.cle.bad_layout");
  CHECK(error_id([&] { cle::in_channel_absmax<float>(w, weight_layout::conv(2, 3, 1), r); }) ==
        "quark.cle.channel_mismatch");
  std::vector<float> tail(4);
  CHECK(error_id([&] {
          cle::equalize_pair<float>({w, weight_layout::conv(2, 3, 1)},
                                    {tail, weight_layout::conv(1, 4, 1)}, {});
        }) == "quark.cle.channel_mismatch");
}

TEST_CASE("cle: mean_abs_change and the stop rule, by hand") {
  const std::vector<float> a = {1, -2, 3, 0.5f}, b = {1.5f, -2, 2, 0.5f};
  CHECK(cle::mean_abs_change<float>(a, b) == 0.375);  // (0.5 + 0 + 1 + 0) / 4
  CHECK(cle::mean_abs_change<float>(std::vector<float>{}, std::vector<float>{}) == 0.0);
  // cle_steps 1 (the default): one pass.
  cle::stop_rule one(1e-6, 1);
  CHECK(one.more());
  one.record(3.0);
  CHECK_FALSE(one.more());
  CHECK(one.steps() == 1);
  // cle_steps 0: none; a threshold of 10 or more: none (the change starts at 10).
  CHECK_FALSE(cle::stop_rule(1e-6, 0).more());
  CHECK_FALSE(cle::stop_rule(10.0, -1).more());
  // cle_steps -1: until the change is at most the threshold ...
  cle::stop_rule until(0.01, -1);
  for (const double c : {1.0, 0.1, 0.02})
    until.record(c);
  CHECK(until.more());
  until.record(0.01);
  CHECK_FALSE(until.more());
  CHECK(until.steps() == 4);
  // ... or 20 passes in a row repeat the last change (within 1e-9).
  cle::stop_rule stuck(0.01, -1);
  stuck.record(0.5);
  for (int k = 0; k < 19; ++k) {
    stuck.record(0.5 + 1e-10);
    CHECK(stuck.more());
  }
  stuck.record(0.5);
  CHECK_FALSE(stuck.more());
  CHECK(stuck.steps() == 21);
  // A change moving by more than 1e-9 resets the count.
  cle::stop_rule moving(0.01, 30);
  for (int k = 0; k < 29; ++k)
    moving.record(0.5 + 1e-8 * (k % 2));
  CHECK(moving.more());
  moving.record(0.5);
  CHECK_FALSE(moving.more());  // the step limit, not the repetition
}
