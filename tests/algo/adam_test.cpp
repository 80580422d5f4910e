// SPDX-License-Identifier: MIT
// quark::adam against torch.optim.Adam's documented update: the first step by hand, three steps
// on a 2-parameter quadratic against tests/algo/data/gen_adam_reference.py (numpy, float64, in
// torch's arrangement of the bias correction), and the size checks.
#include <bit>
#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include <quark/algo/adam.hpp>

#include "support/checks.hpp"

using quark::test::error_id;

TEST_CASE("adam: torch's defaults") {
  const quark::adam_options o;
  CHECK(o.lr == 1e-3);
  CHECK(o.beta1 == 0.9);
  CHECK(o.beta2 == 0.999);
  CHECK(o.eps == 1e-8);
}

TEST_CASE("adam: the first step is lr * g / (|g| + eps) (hand-derived)") {
  // After one step m = (1 - b1) g and v = (1 - b2) g^2, so the bias-corrected moments are g and
  // g^2 and every parameter moves by lr g / (|g| + eps), whatever the size of g.
  quark::adam opt(4, {.lr = 0.05});
  std::vector<double> p{1.0, -2.0, 0.5, 3.0};
  const std::vector<double> g{4.0, -0.001, 0.0, 1e6};
  opt.step(p, g);
  CHECK(opt.steps() == 1);
  CHECK(p[0] == doctest::Approx(1.0 - 0.05 * 4.0 / (4.0 + 1e-8)).epsilon(1e-15));
  CHECK(p[1] == doctest::Approx(-2.0 + 0.05 * 0.001 / (0.001 + 1e-8)).epsilon(1e-15));
  CHECK(p[2] == 0.5);  // zero gradient: m = v = 0, no move
  CHECK(p[3] == doctest::Approx(3.0 - 0.05).epsilon(1e-15));
}

TEST_CASE("adam: three steps on a quadratic match the numpy reference") {
  // f(p) = (p0 - 3)^2 + 10 (p1 + 0.5)^2 from (1, 1), lr 0.1 (gen_adam_reference.py).
  const double ref[3][2] = {
      {1.0999999997500001, 0.90000000003333336},  // step 1
      {1.199833513884299, 0.80023906168378123},   // step 2
      {1.2993766079535349, 0.7009028695935593},   // step 3
  };
  quark::adam opt(2, {.lr = 0.1});
  std::vector<double> p{1.0, 1.0}, g(2);
  for (int t = 0; t < 3; ++t) {
    CAPTURE(t);
    g[0] = 2.0 * (p[0] - 3.0);
    g[1] = 20.0 * (p[1] + 0.5);
    opt.step(p, g);
    // Same formula, other rounding order: a few ulps.
    CHECK(p[0] == doctest::Approx(ref[t][0]).epsilon(1e-14));
    CHECK(p[1] == doctest::Approx(ref[t][1]).epsilon(1e-14));
  }
  // reset(): the next step is a first step again.
  opt.reset();
  CHECK(opt.steps() == 0);
  std::vector<double> q{1.0, 1.0};
  g = {-4.0, 30.0};
  opt.step(q, g);
  CHECK(q[0] == doctest::Approx(ref[0][0]).epsilon(1e-14));
  CHECK(q[1] == doctest::Approx(ref[0][1]).epsilon(1e-14));
}

TEST_CASE("adam: sizes other than the optimizer's are errors") {
  quark::adam opt(3);
  std::vector<double> p(3), g(2);
  CHECK(error_id([&] { opt.step(p, g); }) == "quark.algo.size_mismatch");
  std::vector<double> p2(2);
  CHECK(error_id([&] { opt.step(p2, g); }) == "quark.algo.size_mismatch");
  CHECK(opt.steps() == 0);
}

namespace {
/// torch.optim.Adam's update written out one element at a time (the oracle for the blocked,
/// vectorised step): the same operations in the same order on every element.
void textbook_adam(std::vector<double>& p, const std::vector<double>& g, std::vector<double>& m,
                   std::vector<double>& v, int t, const quark::adam_options& o) {
  const double c1 = 1.0 - std::pow(o.beta1, t);
  const double c2 = 1.0 - std::pow(o.beta2, t);
  for (std::size_t i = 0; i < p.size(); ++i) {
    m[i] = o.beta1 * m[i] + (1.0 - o.beta1) * g[i];
    v[i] = o.beta2 * v[i] + (1.0 - o.beta2) * g[i] * g[i];
    p[i] -= o.lr * (m[i] / c1) / (std::sqrt(v[i] / c2) + o.eps);
  }
}
}  // namespace

TEST_CASE(
    "adam: long vectors (blocks and a tail) equal the element-by-element update bit for bit") {
  // 1000 parameters: three full blocks of 256 and a tail; gradients of mixed sign and size,
  // zeros among them; five steps. Then g aliasing p exactly (allowed: each element's gradient
  // is read before it moves) against the same oracle.
  const quark::adam_options o{.lr = 0.01};
  const std::size_t n = 1000;
  std::vector<double> p(n), q(n), g(n), m(n, 0.0), v(n, 0.0);
  for (std::size_t i = 0; i < n; ++i) {
    p[i] = q[i] = std::sin(static_cast<double>(i) * 0.37) * 3.0;
  }
  quark::adam opt(n, o);
  bool same = true;
  for (int t = 1; t <= 5; ++t) {
    for (std::size_t i = 0; i < n; ++i)
      g[i] = i % 17 == 0 ? 0.0
                         : std::cos(static_cast<double>(i * static_cast<std::size_t>(t))) *
                               std::pow(10.0, static_cast<double>(i % 7) - 3.0);
    opt.step(p, g);
    textbook_adam(q, g, m, v, t, o);
    for (std::size_t i = 0; i < n; ++i)
      same = same && std::bit_cast<std::uint64_t>(p[i]) == std::bit_cast<std::uint64_t>(q[i]);
  }
  CHECK(same);
  // g is p.
  quark::adam self(n, o);
  std::vector<double> a = p, b = p, ma(n, 0.0), va(n, 0.0);
  for (int t = 1; t <= 3; ++t) {
    self.step(a, a);
    const std::vector<double> gb = b;
    textbook_adam(b, gb, ma, va, t, o);
  }
  bool alias_same = true;
  for (std::size_t i = 0; i < n; ++i)
    alias_same =
        alias_same && std::bit_cast<std::uint64_t>(a[i]) == std::bit_cast<std::uint64_t>(b[i]);
  CHECK(alias_same);
}

TEST_CASE("adam: a gradient that is a shifted view of the parameters is read in element order") {
  // g = p + 1 and g = p - 1 (overlapping, not equal): the update reads each gradient element
  // as it stands when its parameter is updated, as the plain loop does.
  const quark::adam_options o{.lr = 0.1};
  for (const int shift : {1, -1}) {
    CAPTURE(shift);
    std::vector<double> buf(302), ref(302), m(300, 0.0), v(300, 0.0);
    for (std::size_t i = 0; i < buf.size(); ++i)
      buf[i] = ref[i] = 0.5 + static_cast<double>(i % 13) * 0.25;
    quark::adam opt(300, o);
    std::span<double> p(buf.data() + 1, 300);
    std::span<const double> g(buf.data() + 1 + shift, 300);
    opt.step(p, g);
    const double c1 = 1.0 - o.beta1, c2 = 1.0 - o.beta2;
    for (std::size_t i = 0; i < 300; ++i) {
      const double gi = ref[static_cast<std::size_t>(static_cast<int>(i) + 1 + shift)];
      m[i] = o.beta1 * m[i] + (1.0 - o.beta1) * gi;
      v[i] = o.beta2 * v[i] + (1.0 - o.beta2) * gi * gi;
      ref[i + 1] -= o.lr * (m[i] / c1) / (std::sqrt(v[i] / c2) + o.eps);
    }
    bool same = true;
    for (std::size_t i = 0; i < buf.size(); ++i)
      same = same && std::bit_cast<std::uint64_t>(buf[i]) == std::bit_cast<std::uint64_t>(ref[i]);
    CHECK(same);
  }
}
