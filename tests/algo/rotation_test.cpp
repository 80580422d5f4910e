// SPDX-License-Identifier: MIT
// quark/algo/rotation.hpp (QuaRot's R1, quark-spec §10.6): the rows of R = H D / 2 for n = 4 by
// hand, R orthogonal (the transposed rotation undoes it, norms kept), random signs reproducible
// and both signs present; Paley / Kronecker orders: H H^T = n I checked entry by entry, the first
// row and column of Paley I's order 12 by hand, apply() against the entries; orders with no
// Hadamard matrix here refused.
#include <algorithm>
#include <cmath>
#include <vector>

#include <doctest/doctest.h>

#include <quark/algo/rotation.hpp>

#include "support/checks.hpp"

using quark::test::error_id;

TEST_CASE("rotation: e_i R is row i of the Sylvester matrix over sqrt(n), with its signs") {
  // H_4 = [[1, 1, 1, 1], [1, -1, 1, -1], [1, 1, -1, -1], [1, -1, -1, 1]]; R = H D / 2.
  const double h[4][4] = {{1, 1, 1, 1}, {1, -1, 1, -1}, {1, 1, -1, -1}, {1, -1, -1, 1}};
  const std::vector<double> d{1.0, -1.0, -1.0, 1.0};
  for (int i = 0; i < 4; ++i) {
    CAPTURE(i);
    std::vector<double> v(4, 0.0);
    v[static_cast<std::size_t>(i)] = 1.0;
    quark::hadamard_rotate(v, d);
    for (int j = 0; j < 4; ++j)
      CHECK(v[static_cast<std::size_t>(j)] == h[i][j] * d[static_cast<std::size_t>(j)] / 2.0);
  }
  CHECK(quark::is_power_of_two(1));
  CHECK(quark::is_power_of_two(4096));
  CHECK_FALSE(quark::is_power_of_two(0));
  CHECK_FALSE(quark::is_power_of_two(12));
}

TEST_CASE("rotation: R is orthogonal, random signs reproducible") {
  const std::vector<double> d = quark::hadamard_signs(64, true, 7);
  CHECK(d == quark::hadamard_signs(64, true, 7));
  CHECK(d != quark::hadamard_signs(64, true, 8));
  int minus = 0;
  for (const double x : d) {
    CHECK((x == 1.0 || x == -1.0));
    minus += x < 0 ? 1 : 0;
  }
  CHECK(minus > 0);
  CHECK(minus < 64);
  CHECK(quark::hadamard_signs(4, false, 7) == std::vector<double>(4, 1.0));
  const std::vector<float> f = quark::test::random_floats(64, 3);
  std::vector<double> v(f.begin(), f.end());
  const std::vector<double> orig = v;
  quark::hadamard_rotate(v, d);
  double n0 = 0.0, n1 = 0.0;
  for (std::size_t i = 0; i < v.size(); ++i) {
    n0 += orig[i] * orig[i];
    n1 += v[i] * v[i];
  }
  CHECK(n1 == doctest::Approx(n0).epsilon(1e-12));
  quark::hadamard_rotate_transposed(v, d);
  for (std::size_t i = 0; i < v.size(); ++i)
    CHECK(v[i] == doctest::Approx(orig[i]).epsilon(1e-12));
}

TEST_CASE("rotation: orders without a Hadamard matrix here, and mismatched signs") {
  std::vector<double> v(12, 1.0);
  CHECK(error_id([&] { quark::walsh_hadamard(v); }) == "quark.rotation.size");  // Sylvester only
  std::vector<double> six(6, 1.0);
  CHECK(error_id([&] { quark::hadamard_rotate(six, std::vector<double>(6, 1.0)); }) ==
        "quark.rotation.size");
  std::vector<double> w(8, 1.0);
  CHECK(error_id([&] { quark::hadamard_rotate(w, std::vector<double>(4, 1.0)); }) ==
        "quark.rotation.size");
}

TEST_CASE("rotation: a matrix's rows or columns, as vectors") {
  // 2 x 4: rows rotated (axis 1) are e_i R; 4 x 2: columns rotated (axis 0) are R's rows too.
  const std::vector<double> d(4, 1.0);
  std::vector<float> rows{1, 0, 0, 0, 0, 0, 1, 0};  // e0, e2
  quark::hadamard_rotate_matrix(rows, 2, 4, 1, d);
  CHECK(rows == std::vector<float>{0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, -0.5f, -0.5f});
  std::vector<float> cols{1, 0, 0, 0, 0, 1, 0, 0};  // columns e0, e2 of a 4 x 2 matrix
  quark::hadamard_rotate_matrix(cols, 4, 2, 0, d);
  CHECK(cols == std::vector<float>{0.5f, 0.5f, 0.5f, 0.5f, 0.5f, -0.5f, 0.5f, -0.5f});
  CHECK(error_id([&] { quark::hadamard_rotate_matrix(rows, 3, 4, 1, d); }) ==
        "quark.rotation.size");
}

namespace {

/// max |(H H^T)[i][j] - n delta_ij| over every entry, in exact integers.
long long orthogonality_defect(const quark::hadamard_matrix& h) {
  const std::size_t n = h.size();
  long long worst = 0;
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = 0; j < n; ++j) {
      long long dot = 0;
      for (std::size_t k = 0; k < n; ++k)
        dot += h.entry(i, k) * h.entry(j, k);
      const long long want = i == j ? static_cast<long long>(n) : 0;
      worst = std::max(worst, dot > want ? dot - want : want - dot);
    }
  }
  return worst;
}

}  // namespace

TEST_CASE("rotation: Paley orders and their Kronecker products are Hadamard matrices") {
  // The orders: m 2^k with m = 1, q + 1 (prime q = 3 mod 4) or 2 (q + 1) (prime q = 1 mod 4).
  CHECK(quark::hadamard_matrix::paley_order(4096) == 1);
  CHECK(quark::hadamard_matrix::paley_order(12) == 12);      // q = 11
  CHECK(quark::hadamard_matrix::paley_order(768) == 12);     // 12 x 64
  CHECK(quark::hadamard_matrix::paley_order(2560) == 20);    // q = 19
  CHECK(quark::hadamard_matrix::paley_order(14336) == 28);   // Paley II, q = 13
  CHECK(quark::hadamard_matrix::paley_order(13824) == 108);  // q = 107
  CHECK(quark::hadamard_matrix::paley_order(11008) == 0);    // 172 x 64: 171, 85 not prime
  CHECK(quark::hadamard_matrix::paley_order(6) == 0);
  CHECK(quark::hadamard_matrix::paley_order(0) == 0);
  // Every Paley order up to 200 (both kinds), and products with Sylvester factors.
  int checked = 0;
  for (std::size_t m = 3; m <= 200; ++m) {
    if (quark::hadamard_matrix::paley_order(m) != m)
      continue;
    CAPTURE(m);
    CHECK(orthogonality_defect(quark::hadamard_matrix(m)) == 0);
    ++checked;
  }
  CHECK(checked == 19);  // 12, 20, 28, 36, 44, 60, 68, 76, 84, 108, ... (24 = 12 x 2 is not one)
  for (const std::size_t n : {24u, 40u, 56u, 96u, 112u}) {
    CAPTURE(n);
    CHECK(orthogonality_defect(quark::hadamard_matrix(n)) == 0);
  }
  // Paley I of order 12 by hand: first row +1, first column -1 below it, diagonal +1 (I + S,
  // S skew with a zero diagonal); row 1 is 1 + chi(j - 1) mod 11 on the diagonal, chi elsewhere
  // (squares mod 11: 1, 3, 4, 5, 9).
  const quark::hadamard_matrix h12(12);
  const int chi[11] = {0, 1, -1, 1, 1, 1, -1, -1, -1, 1, -1};
  for (std::size_t j = 0; j < 12; ++j) {
    CHECK(h12.entry(0, j) == 1);
    CHECK(h12.entry(j, j) == 1);
    if (j > 0)
      CHECK(h12.entry(j, 0) == -1);
    if (j > 1)
      CHECK(h12.entry(1, j) == chi[j - 1]);
  }
  // apply(): e_i H is row i, e_i H^T column i (768 = 12 x 64: the Kronecker path).
  const quark::hadamard_matrix h(768);
  for (const std::size_t i : {0u, 5u, 64u, 700u}) {
    CAPTURE(i);
    std::vector<double> r(768, 0.0), c(768, 0.0);
    r[i] = c[i] = 1.0;
    h.apply(r);
    h.apply(c, true);
    for (std::size_t j = 0; j < 768; ++j) {
      CHECK(r[j] == static_cast<double>(h.entry(i, j)));
      CHECK(c[j] == static_cast<double>(h.entry(j, i)));
    }
  }
  // R = H D / sqrt(n) is orthogonal: the transposed rotation undoes it, norms are kept.
  const std::vector<double> d = quark::hadamard_signs(768, true, 5);
  const std::vector<float> f = quark::test::random_floats(768, 9);
  std::vector<double> v(f.begin(), f.end());
  const std::vector<double> orig = v;
  quark::hadamard_rotate(v, d, h);
  double n0 = 0.0, n1 = 0.0;
  for (std::size_t i = 0; i < v.size(); ++i) {
    n0 += orig[i] * orig[i];
    n1 += v[i] * v[i];
  }
  CHECK(n1 == doctest::Approx(n0).epsilon(1e-12));
  quark::hadamard_rotate_transposed(v, d, h);
  for (std::size_t i = 0; i < v.size(); ++i)
    CHECK(v[i] == doctest::Approx(orig[i]).epsilon(1e-12));
}
