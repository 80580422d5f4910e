// SPDX-License-Identifier: MIT
// quark::adam against torch.optim.Adam's documented update: the first step by hand, three steps
// on a 2-parameter quadratic against tests/algo/data/gen_adam_reference.py (numpy, float64, in
// torch's arrangement of the bias correction), and the size checks.
#include <cmath>
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
