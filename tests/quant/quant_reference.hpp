// SPDX-License-Identifier: MIT
// A slow, obviously right reference for the quantization kernels (tests only): every element
// finds its parameter from its multi-index, then follows the textbook formula in double-free
// scalar code with std::nearbyint in the default rounding mode.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <vector>

#include <doctest/doctest.h>

#include <quark/quant/granularity.hpp>

namespace quark_test {

/// Index of the parameter of flat element i.
inline std::size_t param_index(const std::vector<std::size_t>& shape, const quark::granularity& g,
                               std::size_t i) {
  if (std::holds_alternative<quark::per_tensor>(g))
    return 0;
  const auto r = static_cast<std::ptrdiff_t>(shape.size());
  std::ptrdiff_t ax = std::holds_alternative<quark::per_channel>(g)
                          ? std::get<quark::per_channel>(g).axis
                          : std::get<quark::per_block>(g).axis;
  if (ax < 0)
    ax += r;
  const auto a = static_cast<std::size_t>(ax);
  std::vector<std::size_t> idx(shape.size());
  std::size_t rem = i;
  for (std::size_t k = shape.size(); k-- > 0;) {
    idx[k] = rem % shape[k];
    rem /= shape[k];
  }
  if (std::holds_alternative<quark::per_channel>(g))
    return idx[a];
  const std::size_t bs = std::get<quark::per_block>(g).block_size;
  // parameter tensor: shape with dim a -> ceil(shape[a] / bs), row-major
  std::size_t p = 0;
  for (std::size_t k = 0; k < shape.size(); ++k) {
    const std::size_t ext = k == a ? (shape[k] + bs - 1) / bs : shape[k];
    const std::size_t v = k == a ? idx[k] / bs : idx[k];
    p = p * ext + v;
  }
  return p;
}

inline std::size_t param_count(const std::vector<std::size_t>& shape, const quark::granularity& g) {
  if (std::holds_alternative<quark::per_tensor>(g))
    return 1;
  const auto r = static_cast<std::ptrdiff_t>(shape.size());
  std::ptrdiff_t ax = std::holds_alternative<quark::per_channel>(g)
                          ? std::get<quark::per_channel>(g).axis
                          : std::get<quark::per_block>(g).axis;
  if (ax < 0)
    ax += r;
  const auto a = static_cast<std::size_t>(ax);
  if (std::holds_alternative<quark::per_channel>(g))
    return shape[a];
  const std::size_t bs = std::get<quark::per_block>(g).block_size;
  std::size_t n = 1;
  for (std::size_t k = 0; k < shape.size(); ++k)
    n *= k == a ? (shape[k] + bs - 1) / bs : shape[k];
  return n;
}

/// Reference integer quantization: NaN -> qmin (the default policy).
inline std::int64_t ref_quantize(float x, float s, std::int32_t zp, std::int64_t lo,
                                 std::int64_t hi) {
  const float v = x / s;
  if (std::isnan(v))
    return lo;
  const double r = static_cast<double>(std::nearbyint(v)) + zp;
  if (r <= static_cast<double>(lo))
    return lo;
  if (r >= static_cast<double>(hi))
    return hi;
  return static_cast<std::int64_t>(r);
}

inline float ref_dequantize(std::int64_t q, float s, std::int32_t zp) {
  return static_cast<float>(q - zp) * s;
}

/// The test seed: QUARK_TEST_SEED or a fixed default; printed by every property test.
inline std::uint64_t test_seed() {
  const char* e = std::getenv("QUARK_TEST_SEED");
  return e != nullptr ? std::strtoull(e, nullptr, 10) : 20261122u;
}

/// Random data with ties, +-0, subnormals, huge values, +-Inf and NaN mixed in.
inline std::vector<float> nasty_data(std::size_t n, float scale, std::mt19937_64& rng) {
  std::vector<float> v(n);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::uniform_int_distribution<int> pick(0, 15);
  std::uniform_int_distribution<int> code(-300, 300);
  for (auto& x : v) {
    switch (pick(rng)) {
      case 0:
        x = static_cast<float>(code(rng)) * 0.5f * scale;
        break;  // ties on the grid
      case 1:
        x = 0.0f;
        break;
      case 2:
        x = -0.0f;
        break;
      case 3:
        x = 1e-40f * u(rng);
        break;
      case 4:
        x = 3e38f * u(rng);
        break;
      case 5:
        x = u(rng) < 0 ? -INFINITY : INFINITY;
        break;
      case 6:
        x = NAN;
        break;
      default:
        x = u(rng) * 150.0f * scale;
    }
  }
  return v;
}

}  // namespace quark_test
