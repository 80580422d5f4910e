// SPDX-License-Identifier: MIT
// quark/algo/rotation.hpp (QuaRot's R1, quark-spec §10.6): the rows of R = H D / 2 for n = 4 by
// hand, R orthogonal (the transposed rotation undoes it, norms kept), random signs reproducible
// and both signs present, sizes that are not powers of two refused.
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

TEST_CASE("rotation: sizes that are not powers of two, and mismatched signs") {
  std::vector<double> v(12, 1.0);
  CHECK(error_id([&] { quark::walsh_hadamard(v); }) == "quark.rotation.size");
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
