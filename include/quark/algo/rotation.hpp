// SPDX-License-Identifier: MIT
// QuaRot's R1 rotation (Ashkboos et al. 2024; quark-spec §10.6): an orthogonal R applied to the
// residual stream of a transformer spreads its outlier channels over all channels, so that the
// activations and weights quantize better, without changing the model's function: every layer
// that writes into the stream gets W <- W R (its output rotated), every layer that reads from it
// (after an RMS norm, whose scale is folded into the readers first) gets W <- R^T W (its input
// rotated back). RMS normalisation commutes with an orthogonal R (it keeps the norm).
//
// R = H D / sqrt(n): H the n x n Sylvester Hadamard matrix (n a power of two; H = [[H', H'],
// [H', -H']], symmetric, H H = n I), D = I, or a diagonal of random signs (UseRandomHad) drawn
// from a seeded generator. Products with R are fast Walsh-Hadamard transforms: O(n log n) per
// vector, never an n x n matrix.
//
//     std::vector<double> v = ...;                 // a vector of n values
//     quark::hadamard_rotate(v, signs);            // v <- v R (a row vector times R)
//     quark::hadamard_rotate_transposed(v, signs); // v <- v R^T (the inverse)
#pragma once

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

/// v <- v R with R = H D / sqrt(n) (`signs` the diagonal of D, size n).
inline void hadamard_rotate(std::span<double> v, std::span<const double> signs) {
  if (signs.size() != v.size())
    throw invalid_argument("quark.rotation.size", "signs and vector sizes differ");
  walsh_hadamard(v);
  const double f = 1.0 / std::sqrt(static_cast<double>(v.size()));
  for (std::size_t i = 0; i < v.size(); ++i)
    v[i] *= f * signs[i];
}

/// v <- v R^T = v D H / sqrt(n) (the inverse of hadamard_rotate: R is orthogonal).
inline void hadamard_rotate_transposed(std::span<double> v, std::span<const double> signs) {
  if (signs.size() != v.size())
    throw invalid_argument("quark.rotation.size", "signs and vector sizes differ");
  for (std::size_t i = 0; i < v.size(); ++i)
    v[i] *= signs[i];
  walsh_hadamard(v);
  const double f = 1.0 / std::sqrt(static_cast<double>(v.size()));
  for (auto& x : v)
    x *= f;
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
  std::vector<double> v(n);
  for (std::size_t i = 0; i < count; ++i) {
    float* base = w.data() + i * stride;
    for (std::size_t k = 0; k < n; ++k)
      v[k] = static_cast<double>(base[k * step]);
    hadamard_rotate(v, signs);
    for (std::size_t k = 0; k < n; ++k)
      base[k * step] = static_cast<float>(v[k]);
  }
}

}  // namespace quark
