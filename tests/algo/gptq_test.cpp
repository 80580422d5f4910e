// SPDX-License-Identifier: MIT
// quark::gptq_quantize, gptq_hessian, gptq_find_params and gptq_code
// (include/quark/algo/gptq.hpp), each against an oracle that does not use the header's solver:
//  * a 2 x 2 case worked out by hand (codes, the corrected second row through the loss);
//  * the grid rule and the rounding on hand-derived values (float32 effects included);
//  * a diagonal Hessian: no error feedback, so the codes are plain round-to-nearest computed here;
//  * nine cases from tests/algo/data/gen_gptq.py (a textbook numpy float64 GPTQ: explicit inverse,
//    numpy Cholesky, one row at a time): codes, scales, zero points and groups exactly, the loss
//    to 1e-9, each with lazy blocks of 128, 5 and 3 rows;
//  * the inverse Cholesky factor: U upper, U^T U H = I, the same for every panel size;
//  * the result does not depend on block_size (act_order and groups starting inside blocks);
//  * the reported loss equals sum over columns of D^T (H + damp I) D computed here;
//  * GPTQ lowers |X W - X What|^2 below round-to-nearest on correlated inputs (4 seeds);
//  * the Hessian against (2 / n) sum X^T X for two batches of different leading dimension;
//  * dead features, a last short group, and every error.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include <quark/algo/gptq.hpp>

#include "support/checks.hpp"

using quark::test::error_id;
using quark::test::error_text;
using quark::test::random_floats;

namespace {

std::vector<double> identity(std::size_t k) {
  std::vector<double> h(k * k, 0.0);
  for (std::size_t i = 0; i < k; ++i)
    h[i * k + i] = 1.0;
  return h;
}

/// Round half to even in double, independent of the header.
double rne(double v) {
  const double f = std::floor(v);
  const double d = v - f;
  if (d > 0.5)
    return f + 1.0;
  if (d < 0.5)
    return f;
  return std::fmod(f, 2.0) == 0.0 ? f : f + 1.0;
}

/// Correlated inputs: x = z M, M mixing each feature with its two predecessors, plus a common
/// factor shared by all features.
std::vector<float> correlated_inputs(std::size_t rows, std::size_t k, std::uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<double> nd(0.0, 1.0);
  std::vector<float> x(rows * k);
  for (std::size_t r = 0; r < rows; ++r) {
    std::vector<double> z(k);
    for (double& v : z)
      v = nd(g);
    const double common = nd(g);
    for (std::size_t j = 0; j < k; ++j) {
      double v = z[j] + 0.6 * common;
      if (j >= 1)
        v += 0.8 * z[j - 1];
      if (j >= 2)
        v += 0.5 * z[j - 2];
      x[r * k + j] = static_cast<float>(v);
    }
  }
  return x;
}

std::vector<float> normal_weights(std::size_t count, std::uint32_t seed, double sigma) {
  std::mt19937 g(seed);
  std::normal_distribution<double> nd(0.0, sigma);
  std::vector<float> w(count);
  for (float& v : w)
    v = static_cast<float>(nd(g));
  return w;
}

/// |X (W - V)|^2 in double for X rows x K, W and V K x N.
double output_error(const std::vector<float>& x, std::size_t rows, std::size_t k,
                    const std::vector<float>& w, const std::vector<float>& v, std::size_t n) {
  double total = 0.0;
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::size_t j = 0; j < n; ++j) {
      double a = 0.0;
      for (std::size_t i = 0; i < k; ++i) {
        a += static_cast<double>(x[r * k + i]) *
             (static_cast<double>(w[i * n + j]) - static_cast<double>(v[i * n + j]));
      }
      total += a * a;
    }
  }
  return total;
}

std::string data_file() {
  const char* env = std::getenv("QUARK_SOURCE_DIR");
  if (env != nullptr && *env != '\0')
    return std::string(env) + "/tests/algo/data/gptq_cases.txt";
  std::string here = __FILE__;
  return here.substr(0, here.find_last_of('/')) + "/data/gptq_cases.txt";
}

struct fixture_case {
  std::string name;
  bool computed = true;
  quark::gptq_computed_params cp;
  std::int32_t qmin = 0;
  std::int32_t qmax = 0;
  quark::gptq_options opt;
  long dead = -1;
  std::vector<float> scales;
  std::vector<std::int32_t> zeros;
  std::vector<std::int32_t> gidx;
  std::vector<std::int32_t> codes;
  double loss = 0.0;
};

struct fixture {
  std::size_t k = 0, n = 0, rows = 0;
  std::vector<std::size_t> batches;  // r0 r1 t triples
  std::vector<float> x, w;
  std::vector<fixture_case> cases;
};

template <class T>
std::vector<T> read_values(std::ifstream& f, std::size_t count) {
  std::vector<T> v(count);
  for (T& e : v)
    f >> e;
  return v;
}

fixture read_fixture() {
  std::ifstream f(data_file());
  REQUIRE(f.good());
  fixture fx;
  std::string tok;
  while (f >> tok) {
    if (tok[0] == '#') {
      std::getline(f, tok);
    } else if (tok == "shape") {
      f >> fx.k >> fx.n >> fx.rows;
    } else if (tok == "batches") {
      std::size_t count = 0;
      f >> count;
      fx.batches = read_values<std::size_t>(f, 3 * count);
    } else if (tok == "x") {
      fx.x = read_values<float>(f, fx.rows * fx.k);
    } else if (tok == "w") {
      fx.w = read_values<float>(f, fx.k * fx.n);
    } else if (tok == "case") {
      fixture_case c;
      f >> c.name;
      while (f >> tok && tok != "end") {
        if (tok == "computed") {
          int sym = 0, pc = 0, mse = 0;
          f >> c.cp.bits >> sym >> pc >> mse;
          c.cp.symmetric = sym != 0;
          c.cp.per_channel = pc != 0;
          c.cp.mse = mse != 0;
        } else if (tok == "fixed") {
          c.computed = false;
          f >> c.qmin >> c.qmax;
        } else if (tok == "options") {
          int act = 0;
          f >> c.opt.group_size >> act >> c.dead >> c.opt.perc_damp;
          c.opt.act_order = act != 0;
        } else if (tok == "scales") {
          std::size_t count = 0;
          f >> count;
          c.scales = read_values<float>(f, count);
        } else if (tok == "zeros") {
          std::size_t count = 0;
          f >> count;
          c.zeros = read_values<std::int32_t>(f, count);
        } else if (tok == "gidx") {
          c.gidx = read_values<std::int32_t>(f, fx.k);
        } else if (tok == "codes") {
          c.codes = read_values<std::int32_t>(f, fx.k * fx.n);
        } else if (tok == "loss") {
          f >> c.loss;
        } else {
          FAIL("unknown token " << tok);
        }
      }
      fx.cases.push_back(c);
    } else {
      FAIL("unknown token " << tok);
    }
  }
  return fx;
}

}  // namespace

TEST_CASE("gptq: a 2 x 2 case worked out by hand") {
  // H = [[2, 1], [1, 2]], no damping: H^-1 = [[2, -1], [-1, 2]] / 3, whose upper factor is
  // U = [[sqrt(2/3), -1/sqrt(6)], [0, 1/sqrt(2)]] (U^T U: 2/3; -1/3; 1/6 + 1/2 = 2/3).
  // Grid: scale 1, zero 0, codes [-8, 7].
  // Column 0, W = (0.4, 0.35): row 0 rounds to 0, e0 = 0.4 / sqrt(2/3); row 1 becomes
  // 0.35 - U01 e0 = 0.35 + 0.4 (1/sqrt(6)) sqrt(3/2) = 0.35 + 0.2 = 0.55, which rounds to 1
  // (round-to-nearest of 0.35 would give 0); e1 = (0.55 - 1) / (1/sqrt(2)) = -0.45 sqrt(2).
  // Loss: e0^2 + e1^2 = 0.24 + 0.405 = 0.645 = D^T H D with D = (0.4, -0.65):
  // 2 (0.16) + 2 (0.4225) + 2 (0.4) (-0.65) = 0.645.
  // Column 1, W = (-0.4, 0.1): row 0 -> 0, row 1 becomes 0.1 - 0.2 = -0.1 -> 0;
  // loss 0.24 + (0.1 sqrt(2))^2 = 0.26. Total 0.905.
  const std::vector<double> h = {2.0, 1.0, 1.0, 2.0};
  const std::vector<float> w = {0.4f, -0.4f, 0.35f, 0.1f};
  const std::vector<float> s = {1.0f};
  quark::gptq_fixed_params grid;
  grid.scales = s;
  grid.qmin = -8;
  grid.qmax = 7;
  quark::gptq_options opt;
  opt.perc_damp = 0.0;
  const quark::gptq_result r = quark::gptq_quantize(w, 2, 2, h, grid, opt);
  CHECK(r.codes == std::vector<std::int32_t>{0, 0, 1, 0});
  CHECK(r.dequantized == std::vector<float>{0.0f, 0.0f, 1.0f, 0.0f});
  CHECK(r.loss == doctest::Approx(0.905).epsilon(1e-6));  // float inputs: 0.35f, 0.4f
  CHECK(r.groups == 1);
  CHECK(r.channels == 1);
  CHECK(r.group_index == std::vector<std::int32_t>{0, 0});
  CHECK(r.order == std::vector<std::size_t>{0, 1});
  // The exact account with the float inputs: D^T H D per column.
  double want = 0.0;
  for (std::size_t j = 0; j < 2; ++j) {
    const double d0 = static_cast<double>(w[j]) - static_cast<double>(r.dequantized[j]);
    const double d1 = static_cast<double>(w[2 + j]) - static_cast<double>(r.dequantized[2 + j]);
    want += 2.0 * d0 * d0 + 2.0 * d1 * d1 + 2.0 * d0 * d1;
  }
  CHECK(r.loss == doctest::Approx(want).epsilon(1e-13));

  // act_order with H = [[1, 0.5], [0.5, 3]]: feature 1 (diag 3) first. In processing order
  // Hp = [[3, 0.5], [0.5, 1]], Hp^-1 = [[1, -0.5], [-0.5, 3]] / 2.75; fixing the first processed
  // feature with d = w - q moves the second by -(Hp^-1)_01 / (Hp^-1)_00 d = +0.5 d.
  // Column 0: feature 1 (0.35) -> 0, feature 0 becomes 0.4 + 0.175 = 0.575 -> 1 (nearest: 0).
  // Column 1: feature 1 (0.1) -> 0, feature 0 becomes -0.4 + 0.05 = -0.35 -> 0.
  // Loss D^T H D: column 0, D = (0.4 - 1, 0.35) over features (0, 1):
  // 1 (0.36) + 3 (0.1225) + 2 (0.5) (-0.6) (0.35) = 0.5175; column 1, D = (-0.4, 0.1):
  // 0.16 + 0.03 - 0.04 = 0.15. Total 0.6675.
  const std::vector<double> h2 = {1.0, 0.5, 0.5, 3.0};
  opt.act_order = true;
  const quark::gptq_result r2 = quark::gptq_quantize(w, 2, 2, h2, grid, opt);
  CHECK(r2.order == std::vector<std::size_t>{1, 0});
  CHECK(r2.codes == std::vector<std::int32_t>{1, 0, 0, 0});
  CHECK(r2.loss == doctest::Approx(0.6675).epsilon(1e-6));
}

TEST_CASE("gptq_code: round half to even of w / s in float32, + zero, clamp") {
  CHECK(quark::gptq_code(0.5f, 1.0f, 0, -8, 7) == 0);
  CHECK(quark::gptq_code(1.5f, 1.0f, 0, -8, 7) == 2);
  CHECK(quark::gptq_code(-2.5f, 1.0f, 0, -8, 7) == -2);
  CHECK(quark::gptq_code(-3.5f, 1.0f, 0, -8, 7) == -4);
  CHECK(quark::gptq_code(100.0f, 1.0f, 0, -8, 7) == 7);
  CHECK(quark::gptq_code(-100.0f, 1.0f, 0, -8, 7) == -8);
  CHECK(quark::gptq_code(0.25f, 0.1f, 5, 0, 15) == 7);     // 2.5 -> 2, + 5
  CHECK(quark::gptq_code(-1.0f, 0.1f, 5, 0, 15) == 0);     // -10 + 5 clamps to 0
  CHECK(quark::gptq_code(1e30f, 1e-30f, 8, 0, 15) == 15);  // w / s = inf, clamped
  CHECK(quark::gptq_code(std::numeric_limits<float>::quiet_NaN(), 1.0f, 8, 0, 15) == 0);
}

TEST_CASE("gptq_find_params: Quark's GPTQ rule on hand-derived values") {
  std::vector<float> s(1);
  std::vector<std::int32_t> z(1);
  quark::gptq_computed_params p;
  p.bits = 4;
  // (-0.5, 0.25, 1): symmetric range (-1, 1): s = 2 / 15, z = 8.
  const std::vector<float> a = {-0.5f, 0.25f, 1.0f};
  quark::gptq_find_params(a, 1, 3, p, s, z);
  CHECK(s[0] == 2.0f / 15.0f);
  CHECK(z[0] == 8);
  // Asymmetric: (-0.5, 1): s = 1.5 / 15 = 0.1 (float), z = RNE(0.5 / 0.1f) = 5.
  p.symmetric = false;
  quark::gptq_find_params(a, 1, 3, p, s, z);
  CHECK(s[0] == 1.5f / 15.0f);
  CHECK(z[0] == 5);
  // All zero: range (-1, 1); asymmetric z = RNE(1 / (2 / 15 in float32)): 1 / 0.13333334f is
  // 7.4999995f in float32, which rounds to 7, not to the 8 of the exact 7.5.
  const std::vector<float> zero3 = {0.0f, 0.0f, 0.0f};
  quark::gptq_find_params(zero3, 3, 1, p, s, z);
  CHECK(s[0] == 2.0f / 15.0f);
  CHECK(z[0] == 7);
  // Symmetric with only positive weights: xmin stays 0 (Quark's rule), so s = 0.6 / 15 and the
  // zero point is still 8: codes above 15 clip at 7 s = 0.28.
  p.symmetric = true;
  const std::vector<float> pos = {0.2f, 0.6f};
  quark::gptq_find_params(pos, 2, 1, p, s, z);
  CHECK(s[0] == 0.6f / 15.0f);
  CHECK(z[0] == 8);
  // Per channel: columns (-0.5, 0.25) and (0.25, 1) of a 2 x 2; 8 bits symmetric: range
  // (-0.5, 0.5) -> s = 1 / 255; the positive column keeps xmin = 0, so (1 - 0) / 255.
  p.per_channel = true;
  p.bits = 8;
  std::vector<float> s2(2);
  std::vector<std::int32_t> z2(2);
  const std::vector<float> b = {-0.5f, 0.25f, 0.25f, 1.0f};
  quark::gptq_find_params(b, 2, 2, p, s2, z2);
  CHECK(s2[0] == 1.0f / 255.0f);
  CHECK(s2[1] == 1.0f / 255.0f);
  CHECK(z2 == std::vector<std::int32_t>{128, 128});
  // MSE, 3 bits symmetric: 40 values in [-0.5, 0.5] and one at 2 (range (-2, 2), s = 4 / 7).
  // Quark's search (as gen_gptq.py's column_grid computes it) keeps p = 0.85:
  // s = (0.85 * 2 - 0.85 * -2) / 7 in float32, zero point 4.
  p.per_channel = false;
  p.mse = true;
  p.bits = 3;
  std::vector<float> out = {2.0f};
  for (int i = 0; i < 40; ++i)
    out.push_back(static_cast<float>(0.05 * (i % 21) - 0.5));
  quark::gptq_find_params(out, out.size(), 1, p, s, z);
  CHECK(s[0] == (0.85f * 2.0f - 0.85f * -2.0f) / 7.0f);
  CHECK(z[0] == 4);
  p.mse = false;
  quark::gptq_find_params(out, out.size(), 1, p, s, z);
  CHECK(s[0] == 4.0f / 7.0f);
}

TEST_CASE("gptq: a diagonal Hessian gives round-to-nearest (computed here)") {
  const std::size_t k = 13, n = 6;
  const std::vector<float> w = random_floats(k * n, 11, -0.3f, 0.3f);
  const std::vector<double> h = identity(k);

  SUBCASE("fixed int8 per-channel grid") {
    std::vector<float> s(n);
    for (std::size_t j = 0; j < n; ++j)
      s[j] = 0.002f * static_cast<float>(j + 1);
    quark::gptq_fixed_params grid;
    grid.scales = s;
    const quark::gptq_result r = quark::gptq_quantize(w, k, n, h, grid);
    REQUIRE(r.channels == n);
    for (std::size_t i = 0; i < k; ++i) {
      for (std::size_t j = 0; j < n; ++j) {
        const double q = std::clamp(rne(static_cast<double>(w[i * n + j] / s[j])), -127.0, 127.0);
        CAPTURE(i);
        CAPTURE(j);
        CHECK(r.codes[i * n + j] == static_cast<std::int32_t>(q));
        CHECK(r.dequantized[i * n + j] == s[j] * static_cast<float>(q));
      }
    }
  }

  SUBCASE("computed 4-bit asymmetric per channel in groups of 5 (5, 5, 3)") {
    quark::gptq_computed_params grid;
    grid.bits = 4;
    grid.symmetric = false;
    grid.per_channel = true;
    quark::gptq_options opt;
    opt.group_size = 5;
    opt.block_size = 4;
    const quark::gptq_result r = quark::gptq_quantize(w, k, n, h, grid, opt);
    REQUIRE(r.groups == 3);
    for (std::size_t g = 0; g < 3; ++g) {
      const std::size_t r0 = g * 5, r1 = std::min(k, r0 + 5);
      for (std::size_t j = 0; j < n; ++j) {
        float lo = 0.0f, hi = 0.0f;
        for (std::size_t i = r0; i < r1; ++i) {
          lo = std::min(lo, w[i * n + j]);
          hi = std::max(hi, w[i * n + j]);
        }
        const float s = (hi - lo) / 15.0f;
        const double z = rne(static_cast<double>(-lo / s));
        CAPTURE(g);
        CAPTURE(j);
        CHECK(r.scales[g * n + j] == s);
        CHECK(r.zeros[g * n + j] == static_cast<std::int32_t>(z));
        for (std::size_t i = r0; i < r1; ++i) {
          const double q = std::clamp(rne(static_cast<double>(w[i * n + j] / s)) + z, 0.0, 15.0);
          CHECK(r.codes[i * n + j] == static_cast<std::int32_t>(q));
          CHECK(r.group_index[i] == static_cast<std::int32_t>(g));
        }
      }
    }
  }
}

TEST_CASE("gptq: the numpy reference cases (tests/algo/data/gen_gptq.py)") {
  const fixture fx = read_fixture();
  REQUIRE(fx.k == 24);
  REQUIRE(fx.cases.size() == 9);
  for (const fixture_case& c : fx.cases) {
    std::vector<float> x = fx.x;
    if (c.dead >= 0) {
      for (std::size_t r = 0; r < fx.rows; ++r)
        x[r * fx.k + static_cast<std::size_t>(c.dead)] = 0.0f;
    }
    quark::gptq_hessian h(fx.k);
    for (std::size_t b = 0; b + 2 < fx.batches.size(); b += 3) {
      h.add(x.data() + fx.batches[b] * fx.k, fx.batches[b + 1] - fx.batches[b], fx.batches[b + 2]);
    }
    for (const std::size_t block : {std::size_t{128}, std::size_t{5}, std::size_t{3}}) {
      CAPTURE(c.name);
      CAPTURE(block);
      quark::gptq_options opt = c.opt;
      opt.block_size = block;
      quark::gptq_result r;
      if (c.computed) {
        r = quark::gptq_quantize(fx.w, fx.k, fx.n, h, c.cp, opt);
      } else {
        quark::gptq_fixed_params grid;
        grid.scales = c.scales;
        grid.zeros = c.zeros;
        grid.qmin = c.qmin;
        grid.qmax = c.qmax;
        r = quark::gptq_quantize(fx.w, fx.k, fx.n, h, grid, opt);
      }
      CHECK(r.codes == c.codes);
      CHECK(r.scales == c.scales);
      CHECK(r.zeros == c.zeros);
      CHECK(r.group_index == c.gidx);
      CHECK(r.loss == doctest::Approx(c.loss).epsilon(1e-9));
      for (std::size_t i = 0; i < fx.k * fx.n; ++i) {
        const std::size_t row = i / fx.n, col = i % fx.n;
        REQUIRE(r.dequantized[i] ==
                r.scale(row, col) * static_cast<float>(r.codes[i] - r.zero(row, col)));
      }
      if (c.dead >= 0) {
        const std::size_t d = static_cast<std::size_t>(c.dead);
        for (std::size_t j = 0; j < fx.n; ++j)
          CHECK(r.dequantized[d * fx.n + j] == 0.0f);
      }
    }
  }
}

TEST_CASE("gptq: the inverse Cholesky factor (U upper, U^T U H = I, any panel size)") {
  const std::size_t k = 203;
  const std::vector<float> b = random_floats(k * k, 5);
  std::vector<double> h(k * k);
  for (std::size_t i = 0; i < k; ++i) {
    for (std::size_t j = 0; j < k; ++j) {
      double a = 0.0;
      for (std::size_t p = 0; p < k; ++p)
        a += static_cast<double>(b[i * k + p]) * static_cast<double>(b[j * k + p]);
      h[i * k + j] = a + (i == j ? 1.0 : 0.0);
    }
  }
  std::vector<double> first;
  for (const std::size_t panel : {std::size_t{203}, std::size_t{7}, std::size_t{64}}) {
    CAPTURE(panel);
    std::vector<double> u = h;
    quark::detail::gptq::inverse_cholesky_upper(u.data(), k, panel);
    bool lower_zero = true, diag_positive = true;
    for (std::size_t i = 0; i < k; ++i) {
      diag_positive = diag_positive && u[i * k + i] > 0.0;
      for (std::size_t j = 0; j < i; ++j)
        lower_zero = lower_zero && u[i * k + j] == 0.0;
    }
    CHECK(lower_zero);
    CHECK(diag_positive);
    // M = U^T U, then the largest entry of M H - I.
    std::vector<double> m(k * k, 0.0);
    for (std::size_t p = 0; p < k; ++p) {
      for (std::size_t i = 0; i < k; ++i) {
        for (std::size_t j = 0; j < k; ++j)
          m[i * k + j] += u[p * k + i] * u[p * k + j];
      }
    }
    double worst = 0.0;
    for (std::size_t i = 0; i < k; ++i) {
      for (std::size_t j = 0; j < k; ++j) {
        double a = 0.0;
        for (std::size_t p = 0; p < k; ++p)
          a += m[i * k + p] * h[p * k + j];
        worst = std::max(worst, std::fabs(a - (i == j ? 1.0 : 0.0)));
      }
    }
    CHECK(worst < 1e-9);
    if (first.empty()) {
      first = u;
    } else {
      double diff = 0.0, scale = 0.0;
      for (std::size_t i = 0; i < k * k; ++i) {
        diff = std::max(diff, std::fabs(u[i] - first[i]));
        scale = std::max(scale, std::fabs(first[i]));
      }
      CHECK(diff <= 1e-12 * scale);
    }
  }
}

TEST_CASE("gptq: GPTQ beats round-to-nearest on correlated inputs, the loss is D^T H D") {
  const std::size_t k = 64, n = 24, rows = 256;
  for (const std::uint32_t seed : {1u, 2u, 3u, 4u}) {
    CAPTURE(seed);
    const std::vector<float> x = correlated_inputs(rows, k, seed);
    const std::vector<float> w = normal_weights(k * n, seed + 100, 0.05);
    quark::gptq_hessian h(k);
    h.add(x, rows);
    quark::gptq_computed_params grid;
    grid.bits = 4;
    grid.per_channel = true;
    const quark::gptq_result r = quark::gptq_quantize(w, k, n, h, grid);
    // Round to nearest on the same grid (one group: computed from the original weights).
    std::vector<float> rtn(k * n);
    for (std::size_t i = 0; i < k; ++i) {
      for (std::size_t j = 0; j < n; ++j) {
        const float s = r.scales[j];
        const double z = r.zeros[j];
        const double q = std::clamp(rne(static_cast<double>(w[i * n + j] / s)) + z, 0.0, 15.0);
        rtn[i * n + j] = s * static_cast<float>(q - z);
      }
    }
    const double e_gptq = output_error(x, rows, k, w, r.dequantized, n);
    const double e_rtn = output_error(x, rows, k, w, rtn, n);
    // When written: GPTQ 8.6, 9.2, 9.8, 9.2 against nearest 20.5, 20.2, 24.1, 22.7.
    CAPTURE(e_gptq);
    CAPTURE(e_rtn);
    CHECK(e_gptq < 0.6 * e_rtn);

    // The loss is sum over columns of D^T (H + damp I) D, damp = 0.01 mean(diag H).
    const std::span<const double> hm = h.matrix();
    double mean = 0.0;
    for (std::size_t i = 0; i < k; ++i)
      mean += hm[i * k + i];
    const double damp = 0.01 * mean / static_cast<double>(k);
    double want = 0.0;
    for (std::size_t j = 0; j < n; ++j) {
      for (std::size_t a = 0; a < k; ++a) {
        const double da =
            static_cast<double>(w[a * n + j]) - static_cast<double>(r.dequantized[a * n + j]);
        for (std::size_t b = 0; b < k; ++b) {
          const double db =
              static_cast<double>(w[b * n + j]) - static_cast<double>(r.dequantized[b * n + j]);
          want += da * (hm[a * k + b] + (a == b ? damp : 0.0)) * db;
        }
      }
    }
    CHECK(r.loss == doctest::Approx(want).epsilon(1e-9));
  }
}

TEST_CASE("gptq: block_size changes nothing (act_order, groups starting inside blocks)") {
  const std::size_t k = 150, n = 20, rows = 300;
  const std::vector<float> x = correlated_inputs(rows, k, 9);
  const std::vector<float> w = normal_weights(k * n, 19, 0.1);
  quark::gptq_hessian h(k);
  h.add(x, rows);
  for (const bool per_channel : {true, false}) {
    quark::gptq_computed_params grid;
    grid.bits = 4;
    grid.symmetric = !per_channel;
    grid.per_channel = per_channel;
    quark::gptq_options opt;
    opt.group_size = per_channel ? 32 : 20;
    opt.act_order = per_channel;
    opt.block_size = 1;  // no lazy blocks at all
    const quark::gptq_result ref = quark::gptq_quantize(w, k, n, h, grid, opt);
    for (const std::size_t block : {std::size_t{7}, std::size_t{128}, std::size_t{1000}}) {
      CAPTURE(per_channel);
      CAPTURE(block);
      opt.block_size = block;
      const quark::gptq_result r = quark::gptq_quantize(w, k, n, h, grid, opt);
      CHECK(r.codes == ref.codes);
      CHECK(r.scales == ref.scales);
      CHECK(r.zeros == ref.zeros);
      CHECK(r.group_index == ref.group_index);
      CHECK(r.loss == doctest::Approx(ref.loss).epsilon(1e-10));
    }
    if (per_channel) {
      // act_order groups: 32 consecutive features of the processing order share a grid row.
      for (std::size_t p = 0; p < k; ++p)
        CHECK(ref.group_index[ref.order[p]] == static_cast<std::int32_t>(p / 32));
    }
  }
}

TEST_CASE("gptq_hessian: two batches against (2 / n) sum X^T X") {
  for (const std::size_t k : {std::size_t{5}, std::size_t{150}}) {
    CAPTURE(k);
    const std::size_t rows1 = 6, rows2 = 9, t1 = 2, t2 = 3;
    const std::vector<float> x1 = random_floats(rows1 * k, 21, -2.0f, 2.0f);
    const std::vector<float> x2 = random_floats(rows2 * k, 22, -1.0f, 3.0f);
    quark::gptq_hessian h(k);
    CHECK(h.features() == k);
    CHECK(h.samples() == 0);
    h.add(x1.data(), rows1, t1);
    h.add(x2, t2);
    CHECK(h.samples() == 5);
    const std::span<const double> m = h.matrix();
    REQUIRE(m.size() == k * k);
    double worst = 0.0;
    for (std::size_t i = 0; i < k; ++i) {
      for (std::size_t j = 0; j < k; ++j) {
        long double a = 0.0L;
        for (std::size_t r = 0; r < rows1; ++r)
          a += static_cast<long double>(x1[r * k + i]) * static_cast<long double>(x1[r * k + j]);
        for (std::size_t r = 0; r < rows2; ++r)
          a += static_cast<long double>(x2[r * k + i]) * static_cast<long double>(x2[r * k + j]);
        const double want = static_cast<double>(2.0L / 5.0L * a);
        worst = std::max(worst, std::fabs(m[i * k + j] - want) / (1.0 + std::fabs(want)));
        if (i > j)
          REQUIRE(m[i * k + j] == m[j * k + i]);
      }
    }
    CHECK(worst < 1e-13);
  }
}

TEST_CASE("gptq: dead features and a last short group") {
  // Feature 2 never fires: its row is zeroed and quantizes to the zero point.
  const std::size_t k = 7, n = 3, rows = 20;
  std::vector<float> x = correlated_inputs(rows, k, 31);
  for (std::size_t r = 0; r < rows; ++r)
    x[r * k + 2] = 0.0f;
  const std::vector<float> w = normal_weights(k * n, 32, 0.2);
  quark::gptq_hessian h(k);
  h.add(x, 4);
  REQUIRE(h.matrix()[2 * k + 2] == 0.0);
  quark::gptq_computed_params grid;
  grid.bits = 4;
  grid.symmetric = false;
  grid.per_channel = true;
  quark::gptq_options opt;
  opt.group_size = 3;  // groups of 3, 3, 1
  const quark::gptq_result r = quark::gptq_quantize(w, k, n, h, grid, opt);
  CHECK(r.groups == 3);
  CHECK(r.scales.size() == 9);
  CHECK(r.group_index == std::vector<std::int32_t>{0, 0, 0, 1, 1, 1, 2});
  for (std::size_t j = 0; j < n; ++j) {
    CHECK(r.codes[2 * n + j] == r.zero(2, j));
    CHECK(r.dequantized[2 * n + j] == 0.0f);
  }
  // A one-row group: its grid spans that row's (corrected) values with 0, so nothing clips.
  for (std::size_t j = 0; j < n; ++j) {
    CHECK(r.codes[6 * n + j] >= 0);
    CHECK(r.codes[6 * n + j] <= 15);
  }
  // Every feature dead: all codes are zero points.
  const std::vector<double> zero(k * k, 0.0);
  const quark::gptq_result z = quark::gptq_quantize(w, k, n, zero, grid, opt);
  for (std::size_t i = 0; i < k * n; ++i)
    CHECK(z.dequantized[i] == 0.0f);
}

TEST_CASE("gptq_static_groups: each group's grid from its own rows, kept under act_order") {
  // K = 4, N = 2, groups of 2 rows, 8 bits symmetric (zero point 128, scale 2 max|w| / 255).
  const std::vector<float> w = {0.5f, -0.25f, -1.0f, 0.125f, 2.0f, 0.5f, 0.25f, -1.5f};
  quark::gptq_computed_params grid;
  const quark::gptq_static_grid t = quark::gptq_static_groups(w, 4, 2, grid, 2);
  CHECK(t.scales == std::vector<float>{2.0f / 255.0f, 4.0f / 255.0f});
  CHECK(t.zeros == std::vector<std::int32_t>{128, 128});
  CHECK(t.qmin == 0);
  CHECK(t.qmax == 255);
  // Per column. Quark's rule mirrors the range only where the minimum is negative: a column
  // whose values are all >= 0 keeps [0, max] (rows 2-3 of column 0: 2 / 255, not 4 / 255).
  grid.per_channel = true;
  const quark::gptq_static_grid c = quark::gptq_static_groups(w, 4, 2, grid, 2);
  CHECK(c.scales == std::vector<float>{2.0f / 255.0f, 0.5f / 255.0f, 2.0f / 255.0f, 3.0f / 255.0f});
  // group_size 3: rows 0-2 (column 0 [-1, 2] -> +-2, column 1 [-0.25, 0.5] -> +-0.5) and the
  // short group of row 3 (0.25 alone: [0, 0.25]; -1.5: +-1.5); -1: one group.
  CHECK(quark::gptq_static_groups(w, 4, 2, grid, 3).scales ==
        std::vector<float>{4.0f / 255.0f, 1.0f / 255.0f, 0.25f / 255.0f, 3.0f / 255.0f});
  CHECK(quark::gptq_static_groups(w, 4, 2, grid, -1).scales ==
        std::vector<float>{4.0f / 255.0f, 3.0f / 255.0f});

  // act_order with diag(H) rising along K: features run 3, 2, 1, 0. Computed groups follow that
  // order (features 3 and 2 share the first grid row); static groups keep k / 2.
  const std::vector<double> hd = {1.0, 0.0, 0.0, 0.0, 0.0, 2.0, 0.0, 0.0,
                                  0.0, 0.0, 3.0, 0.0, 0.0, 0.0, 0.0, 4.0};
  quark::gptq_options opt;
  opt.group_size = 2;
  opt.act_order = true;
  const quark::gptq_result computed = quark::gptq_quantize(w, 4, 2, hd, grid, opt);
  CHECK(computed.order == std::vector<std::size_t>{3, 2, 1, 0});
  CHECK(computed.group_index == std::vector<std::int32_t>{1, 1, 0, 0});
  const quark::gptq_result kept = quark::gptq_quantize(w, 4, 2, hd, c.params(), opt);
  CHECK(kept.group_index == std::vector<std::int32_t>{0, 0, 1, 1});
  CHECK(kept.scales == c.scales);
  // A diagonal Hessian: nothing to compensate, so the codes are round-to-nearest on the grid.
  for (std::size_t i = 0; i < 4; ++i) {
    for (std::size_t j = 0; j < 2; ++j) {
      const float s = c.scales[(i / 2) * 2 + j];
      CHECK(kept.codes[i * 2 + j] == quark::gptq_code(w[i * 2 + j], s, 128, 0, 255));
      CHECK(kept.dequantized[i * 2 + j] == s * static_cast<float>(kept.codes[i * 2 + j] - 128));
    }
  }
  CHECK(quark::test::error_id([&] { (void)quark::gptq_static_groups(w, 4, 2, grid, 0); }) ==
        "quark.gptq.bad_group_size");
  CHECK(quark::test::error_id([&] { (void)quark::gptq_static_groups(w, 3, 2, grid, 2); }) ==
        "quark.gptq.bad_shape");
}

TEST_CASE("gptq: errors") {
  const std::vector<float> w = {0.1f, 0.2f, 0.3f, 0.4f};
  const std::vector<double> h = identity(2);
  quark::gptq_computed_params grid;
  quark::gptq_options opt;

  // Not positive definite: [[1, 2], [2, 1]] has eigenvalue -1; damping 0.
  const std::vector<double> bad = {1.0, 2.0, 2.0, 1.0};
  opt.perc_damp = 0.0;
  CHECK(error_id([&] { quark::gptq_quantize(w, 2, 2, bad, grid, opt); }) ==
        "quark.gptq.not_positive_definite");
  CHECK(error_text([&] { quark::gptq_quantize(w, 2, 2, bad, grid, opt); }).find("perc_damp") !=
        std::string::npos);
  // Singular without damping ([[1, 1], [1, 1]]), fine with the default damping.
  const std::vector<double> singular = {1.0, 1.0, 1.0, 1.0};
  CHECK(error_id([&] { quark::gptq_quantize(w, 2, 2, singular, grid, opt); }) ==
        "quark.gptq.not_positive_definite");
  opt.perc_damp = 0.01;
  CHECK(error_id([&] { quark::gptq_quantize(w, 2, 2, singular, grid, opt); }) == "none");
  opt.perc_damp = -1.0;
  CHECK(error_id([&] { quark::gptq_quantize(w, 2, 2, h, grid, opt); }) == "quark.gptq.bad_damp");
  opt.perc_damp = std::numeric_limits<double>::quiet_NaN();
  CHECK(error_id([&] { quark::gptq_quantize(w, 2, 2, h, grid, opt); }) == "quark.gptq.bad_damp");
  opt = {};

  // NaN and Inf.
  std::vector<float> wn = w;
  wn[3] = std::numeric_limits<float>::quiet_NaN();
  CHECK(error_id([&] { quark::gptq_quantize(wn, 2, 2, h, grid); }) == "quark.gptq.bad_weight");
  wn[3] = std::numeric_limits<float>::infinity();
  CHECK(error_id([&] { quark::gptq_quantize(wn, 2, 2, h, grid); }) == "quark.gptq.bad_weight");
  std::vector<double> hn = h;
  hn[1] = std::numeric_limits<double>::quiet_NaN();
  CHECK(error_id([&] { quark::gptq_quantize(w, 2, 2, hn, grid); }) == "quark.gptq.bad_hessian");
  quark::gptq_hessian acc(2);
  const std::vector<float> xn = {1.0f, std::numeric_limits<float>::quiet_NaN()};
  CHECK(error_id([&] { acc.add(xn, 1); }) == "quark.gptq.bad_input");
  CHECK(acc.samples() == 0);
  CHECK(error_id([&] { acc.add(w, 0); }) == "quark.gptq.bad_batch");
  const std::vector<float> three = {1.0f, 2.0f, 3.0f};
  CHECK(error_id([&] { acc.add(three, 1); }) == "quark.gptq.bad_shape");
  CHECK(error_id([] { quark::gptq_hessian none(0); }) == "quark.gptq.bad_shape");
  CHECK(error_id([&] { quark::gptq_quantize(w, 2, 2, acc, grid); }) == "quark.gptq.no_samples");

  // Shapes.
  CHECK(error_id([&] { quark::gptq_quantize(w, 2, 3, h, grid); }) == "quark.gptq.bad_shape");
  CHECK(error_id([&] { quark::gptq_quantize(w, 4, 1, h, grid); }) == "quark.gptq.bad_shape");
  CHECK(error_id([&] { quark::gptq_quantize(w, 0, 0, h, grid); }) == "quark.gptq.bad_shape");
  acc.add(w, 2);
  CHECK(error_id([&] { quark::gptq_quantize(w, 2, 2, acc, grid); }) == "none");
  CHECK(error_id([&] { quark::gptq_quantize(w, 1, 4, acc, grid); }) == "quark.gptq.bad_shape");

  // Bits, group size, block size.
  for (const int bits : {0, 1, 17, 32}) {
    grid.bits = bits;
    CAPTURE(bits);
    CHECK(error_id([&] { quark::gptq_quantize(w, 2, 2, h, grid); }) == "quark.gptq.bad_bits");
  }
  for (const int bits : {2, 16}) {
    grid.bits = bits;
    CHECK(error_id([&] { quark::gptq_quantize(w, 2, 2, h, grid); }) == "none");
  }
  grid = {};
  for (const std::ptrdiff_t g : {std::ptrdiff_t{0}, std::ptrdiff_t{-2}}) {
    opt.group_size = g;
    CHECK(error_id([&] { quark::gptq_quantize(w, 2, 2, h, grid, opt); }) ==
          "quark.gptq.bad_group_size");
  }
  opt.group_size = 5;  // larger than K: one group
  CHECK(quark::gptq_quantize(w, 2, 2, h, grid, opt).groups == 1);
  opt = {};
  opt.block_size = 0;
  CHECK(error_id([&] { quark::gptq_quantize(w, 2, 2, h, grid, opt); }) ==
        "quark.gptq.bad_block_size");
  opt = {};

  // Fixed grids.
  const std::vector<float> three_scales = {0.1f, 0.1f, 0.1f};
  quark::gptq_fixed_params fixed;
  fixed.scales = three_scales;
  CHECK(error_id([&] { quark::gptq_quantize(w, 2, 2, h, fixed); }) == "quark.gptq.bad_params");
  const std::vector<float> neg = {-0.1f};
  fixed.scales = neg;
  CHECK(error_id([&] { quark::gptq_quantize(w, 2, 2, h, fixed); }) == "quark.gptq.bad_params");
  const std::vector<float> one = {0.1f};
  const std::vector<std::int32_t> z_out = {200};
  fixed.scales = one;
  fixed.zeros = z_out;
  CHECK(error_id([&] { quark::gptq_quantize(w, 2, 2, h, fixed); }) == "quark.gptq.bad_params");
  const std::vector<std::int32_t> z_two = {0, 0};
  fixed.zeros = z_two;
  CHECK(error_id([&] { quark::gptq_quantize(w, 2, 2, h, fixed); }) == "quark.gptq.bad_params");
  fixed.zeros = {};
  fixed.qmin = 5;
  fixed.qmax = 5;
  CHECK(error_id([&] { quark::gptq_quantize(w, 2, 2, h, fixed); }) == "quark.gptq.bad_params");
  fixed.qmin = 0;
  fixed.qmax = 70000;
  CHECK(error_id([&] { quark::gptq_quantize(w, 2, 2, h, fixed); }) == "quark.gptq.bad_params");

  // gptq_find_params.
  std::vector<float> s(1);
  std::vector<std::int32_t> z(1);
  CHECK(error_id([&] { quark::gptq_find_params(w, 2, 3, grid, s, z); }) == "quark.gptq.bad_shape");
  CHECK(error_id([&] { quark::gptq_find_params(wn, 2, 2, grid, s, z); }) ==
        "quark.gptq.bad_weight");
  grid.per_channel = true;
  CHECK(error_id([&] { quark::gptq_find_params(w, 2, 2, grid, s, z); }) == "quark.gptq.bad_shape");
}
