// SPDX-License-Identifier: MIT
// QuaRot's R1 rotation (Ashkboos et al. 2024; quark-spec §10.6): an orthogonal R applied to the
// residual stream of a transformer spreads its outlier channels over all channels, so that the
// activations and weights quantize better, without changing the model's function: every layer
// that writes into the stream gets W <- W R (its output rotated), every layer that reads from it
// (after an RMS norm, whose scale is folded into the readers first) gets W <- R^T W (its input
// rotated back). RMS normalisation commutes with an orthogonal R (it keeps the norm).
//
// R = H D / sqrt(n): H an n x n Hadamard matrix (entries +-1, H H^T = n I), D = I, or a diagonal
// of random signs (UseRandomHad) drawn from a seeded generator. For n a power of two H is
// Sylvester's ([[H', H'], [H', -H']], symmetric) and products with R are fast Walsh-Hadamard
// transforms, O(n log n) per vector. Other orders n = m 2^k take H = P (x) S, S Sylvester's of
// order 2^k and P a Paley matrix of order m: q + 1 for a prime q = 3 mod 4 (Paley I: I + the
// skew conference matrix built on the quadratic residues mod q) or 2 (q + 1) for a prime
// q = 1 mod 4 (Paley II: the symmetric conference matrix C, C (x) [[1, 1], [1, -1]] + I (x)
// [[1, -1], [-1, -1]]), with the largest 2^k that leaves such an m (768 = 12 x 64, 2560 = 20 x
// 128, 14336 = 28 x 512); a product costs n log 2^k + n m. Quark's QuaRot takes its
// non-power-of-two matrices from tables of its own; any Hadamard matrix gives an exact rotation,
// but the rotated weights differ from Quark's for those sizes. Orders with no such m (e.g. 172 x 64
// = 11008) are refused.
//
//     std::vector<double> v = ...;                 // a vector of n values
//     quark::hadamard_rotate(v, signs);            // v <- v R (a row vector times R)
//     quark::hadamard_rotate_transposed(v, signs); // v <- v R^T (the inverse)
#pragma once

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <quark/core/error.hpp>

namespace quark {

/// True for n = 1, 2, 4, ...: the sizes of Sylvester Hadamard matrices.
constexpr bool is_power_of_two(std::size_t n) noexcept {
  return n != 0 && (n & (n - 1)) == 0;
}

/// In place, v <- v H (the unnormalised Sylvester Hadamard matrix; v H = H v, H symmetric).
/// Throws for a size that is not a power of two.
inline void walsh_hadamard(std::span<double> v) {
  const std::size_t n = v.size();
  if (!is_power_of_two(n)) {
    throw invalid_argument("quark.rotation.size", "a Hadamard transform of " + std::to_string(n) +
                                                      " values (a power of two is needed)");
  }
  for (std::size_t h = 1; h < n; h *= 2) {
    for (std::size_t i = 0; i < n; i += 2 * h) {
      for (std::size_t j = i; j < i + h; ++j) {
        const double a = v[j], b = v[j + h];
        v[j] = a + b;
        v[j + h] = a - b;
      }
    }
  }
}

/// A Hadamard matrix of order n = m 2^k (see the file comment): P (x) S with P of Paley's
/// constructions (m = 1: Sylvester's alone). apply() multiplies a row vector by H or H^T without
/// forming H.
class hadamard_matrix {
 public:
  /// The largest Paley order used: a product costs n m, and larger m serve no common width.
  static constexpr std::size_t max_paley = 256;

  /// The Paley order m of n (the largest 2^k dividing n that leaves m = 1 or a Paley order of at
  /// most max_paley), 0 when there is none.
  static std::size_t paley_order(std::size_t n) noexcept {
    if (n == 0)
      return 0;
    for (std::size_t s = n & (~n + 1); s >= 1; s /= 2) {
      const std::size_t m = n / s;
      if (m > max_paley)
        break;
      if (m == 1 || paley_kind(m) != 0)
        return m;
    }
    return 0;
  }

  /// Throws invalid_argument "quark.rotation.size" when n has no Paley order.
  explicit hadamard_matrix(std::size_t n) : n_(n), m_(paley_order(n)) {
    if (m_ == 0) {
      throw invalid_argument("quark.rotation.size",
                             "no Hadamard matrix of order " + std::to_string(n) +
                                 " here (n = m 2^k with m = 1, q + 1 for a prime q = 3 mod 4 "
                                 "or 2 (q + 1) for a prime q = 1 mod 4)");
    }
    s_ = n_ / m_;
    if (m_ > 1)
      build();
  }

  [[nodiscard]] std::size_t size() const noexcept { return n_; }
  [[nodiscard]] std::size_t paley_size() const noexcept { return m_; }
  /// H[i][j] (+1 or -1).
  [[nodiscard]] int entry(std::size_t i, std::size_t j) const noexcept {
    const int pij = m_ == 1 ? 1 : static_cast<int>(p_[(i / s_) * m_ + j / s_]);
    return pij * sylvester(i % s_, j % s_);
  }

  /// v <- v H, or v H^T with `transpose` (unnormalised). v has size() values.
  void apply(std::span<double> v, bool transpose = false) const {
    if (v.size() != n_)
      throw invalid_argument("quark.rotation.size", "a vector of " + std::to_string(v.size()) +
                                                        " values for a Hadamard matrix of order " +
                                                        std::to_string(n_));
    for (std::size_t a = 0; a < m_; ++a)
      walsh_hadamard(v.subspan(a * s_, s_));
    if (m_ == 1)
      return;
    // (v H)[c, d] = sum_a P[a][c] w[a, d]; with H^T, P[c][a].
    std::vector<double> col(m_);
    for (std::size_t d = 0; d < s_; ++d) {
      for (std::size_t a = 0; a < m_; ++a)
        col[a] = v[a * s_ + d];
      for (std::size_t c = 0; c < m_; ++c) {
        double acc = 0.0;
        for (std::size_t a = 0; a < m_; ++a)
          acc += (transpose ? p(c, a) : p(a, c)) * col[a];
        v[c * s_ + d] = acc;
      }
    }
  }

 private:
  static bool is_prime(std::size_t q) noexcept {
    if (q < 2)
      return false;
    for (std::size_t d = 2; d * d <= q; ++d) {
      if (q % d == 0)
        return false;
    }
    return true;
  }
  /// 1: Paley I (m = q + 1, q = 3 mod 4), 2: Paley II (m = 2 (q + 1), q = 1 mod 4), 0: neither.
  static int paley_kind(std::size_t m) noexcept {
    if (m >= 4 && is_prime(m - 1) && (m - 1) % 4 == 3)
      return 1;
    if (m >= 12 && m % 2 == 0 && is_prime(m / 2 - 1) && (m / 2 - 1) % 4 == 1)
      return 2;
    return 0;
  }
  static int sylvester(std::size_t i, std::size_t j) noexcept {
    return (std::popcount(static_cast<unsigned long long>(i & j)) & 1) != 0 ? -1 : 1;
  }
  [[nodiscard]] double p(std::size_t i, std::size_t j) const noexcept {
    return m_ == 1 ? 1.0 : static_cast<double>(p_[i * m_ + j]);
  }

  void build() {
    const int kind = paley_kind(m_);
    const std::size_t q = kind == 1 ? m_ - 1 : m_ / 2 - 1;
    // chi: the quadratic character mod q (0 at 0, +1 on the nonzero squares, -1 elsewhere).
    std::vector<signed char> chi(q, -1);
    chi[0] = 0;
    for (std::size_t x = 1; x < q; ++x)
      chi[(x * x) % q] = 1;
    auto jac = [&](std::size_t i, std::size_t j) {  // Jacobsthal Q[i][j] = chi(j - i)
      return static_cast<int>(chi[(j + q - i) % q]);
    };
    p_.assign(m_ * m_, 0);
    if (kind == 1) {
      // H = I + [[0, 1^T], [-1, Q]] (Q skew-symmetric).
      for (std::size_t i = 0; i < m_; ++i) {
        for (std::size_t j = 0; j < m_; ++j) {
          int v = 0;
          if (i == 0)
            v = 1;
          else if (j == 0)
            v = -1;
          else
            v = jac(i - 1, j - 1) + (i == j ? 1 : 0);
          p_[i * m_ + j] = static_cast<signed char>(v);
        }
      }
    } else {
      // C = [[0, 1^T], [1, Q]] (Q symmetric); each entry of C becomes a 2 x 2 block: c [[1, 1],
      // [1, -1]] off the diagonal, [[1, -1], [-1, -1]] on it.
      const std::size_t c = q + 1;
      for (std::size_t i = 0; i < c; ++i) {
        for (std::size_t j = 0; j < c; ++j) {
          const int cij = i == j ? 0 : (i == 0 || j == 0) ? 1 : jac(i - 1, j - 1);
          for (std::size_t a = 0; a < 2; ++a) {
            for (std::size_t b = 0; b < 2; ++b) {
              const int v =
                  i == j ? (a == 0 && b == 0 ? 1 : -1) : cij * (a == 1 && b == 1 ? -1 : 1);
              p_[(2 * i + a) * m_ + 2 * j + b] = static_cast<signed char>(v);
            }
          }
        }
      }
    }
  }

  std::size_t n_ = 0, m_ = 0, s_ = 0;
  std::vector<signed char> p_;  ///< m x m, row-major
};

/// The diagonal of D: all +1, or (random) signs from std::mt19937_64 seeded with `seed`.
inline std::vector<double> hadamard_signs(std::size_t n, bool random, std::uint64_t seed) {
  std::vector<double> d(n, 1.0);
  if (random) {
    std::mt19937_64 g(seed);
    for (auto& x : d)
      x = (g() & 1u) != 0 ? -1.0 : 1.0;
  }
  return d;
}

/// v <- v R with R = H D / sqrt(n) (`signs` the diagonal of D, size n), H of order v.size().
inline void hadamard_rotate(std::span<double> v, std::span<const double> signs,
                            const hadamard_matrix& h) {
  if (signs.size() != v.size())
    throw invalid_argument("quark.rotation.size", "signs and vector sizes differ");
  h.apply(v);
  const double f = 1.0 / std::sqrt(static_cast<double>(v.size()));
  for (std::size_t i = 0; i < v.size(); ++i)
    v[i] *= f * signs[i];
}
inline void hadamard_rotate(std::span<double> v, std::span<const double> signs) {
  hadamard_rotate(v, signs, hadamard_matrix(v.size()));
}

/// v <- v R^T = v D H^T / sqrt(n) (the inverse of hadamard_rotate: R is orthogonal).
inline void hadamard_rotate_transposed(std::span<double> v, std::span<const double> signs,
                                       const hadamard_matrix& h) {
  if (signs.size() != v.size())
    throw invalid_argument("quark.rotation.size", "signs and vector sizes differ");
  for (std::size_t i = 0; i < v.size(); ++i)
    v[i] *= signs[i];
  h.apply(v, true);
  const double f = 1.0 / std::sqrt(static_cast<double>(v.size()));
  for (auto& x : v)
    x *= f;
}
inline void hadamard_rotate_transposed(std::span<double> v, std::span<const double> signs) {
  hadamard_rotate_transposed(v, signs, hadamard_matrix(v.size()));
}

/// v <- v R (hadamard_rotate) for every vector of the row-major float32 matrix `w` [rows, cols]
/// along `axis` (1: each row, of cols values; 0: each column, of rows values), computed in double
/// and stored as float32. The weights of a layer writing into a rotated stream (W R: rows of a
/// MatMul's B, a Gather's table) or reading from it (R^T W: columns of B).
inline void hadamard_rotate_matrix(std::span<float> w, std::size_t rows, std::size_t cols, int axis,
                                   std::span<const double> signs) {
  if (w.size() != rows * cols || (axis != 0 && axis != 1)) {
    throw invalid_argument("quark.rotation.size", "a matrix of " + std::to_string(w.size()) +
                                                      " values is not " + std::to_string(rows) +
                                                      " x " + std::to_string(cols) +
                                                      ", or the axis is not 0 or 1");
  }
  const std::size_t n = axis == 1 ? cols : rows, count = axis == 1 ? rows : cols;
  const std::size_t step = axis == 1 ? 1 : cols, stride = axis == 1 ? cols : 1;
  const hadamard_matrix h(n);
  std::vector<double> v(n);
  for (std::size_t i = 0; i < count; ++i) {
    float* base = w.data() + i * stride;
    for (std::size_t k = 0; k < n; ++k)
      v[k] = static_cast<double>(base[k * step]);
    hadamard_rotate(v, signs, h);
    for (std::size_t k = 0; k < n; ++k)
      base[k * step] = static_cast<float>(v[k]);
  }
}

}  // namespace quark
