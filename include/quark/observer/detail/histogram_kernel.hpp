// SPDX-License-Identifier: MIT
// Binning kernel of histogram_observer. Bin i holds edges[i] <= v < edges[i+1], the last bin also
// holds v == edges[n] and values outside [edges[0], edges[n]] are dropped (numpy.histogram's
// rule). The bin index comes from the uniform formula, then one comparison against the stored
// edges on each side makes it exact for any edge vector within one bin of uniform.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include <quark/config.hpp>

namespace quark::detail {

/// What is binned: the value itself, its magnitude, or numpy nan_to_num of it.
enum class bin_transform : std::uint8_t { identity, absolute, to_finite };

template <bin_transform T>
QUARK_ALWAYS_INLINE double bin_value(float v) noexcept {
  if constexpr (T == bin_transform::absolute) {
    return static_cast<double>(std::fabs(v));
  } else if constexpr (T == bin_transform::to_finite) {
    constexpr float big = std::numeric_limits<float>::max();
    const float w = v != v ? 0.0f : (v > big ? big : (v < -big ? -big : v));
    return static_cast<double>(w);
  } else {
    return static_cast<double>(v);
  }
}

/// Numpy's linspace(start, stop, n + 1): e[i] = i * step + start, e[n] = stop.
inline std::vector<double> linspace_edges(double start, double stop, std::size_t n) {
  std::vector<double> e(n + 1);
  const double step = (stop - start) / static_cast<double>(n);
  for (std::size_t i = 0; i < n; ++i) {
    const double t = static_cast<double>(i) * step;
    e[i] = t + start;
  }
  e[n] = stop;
  return e;
}

/// Adds the values of `x` to `counts` (size edges.size() - 1).
template <bin_transform T>
void histogram_add(std::span<const float> x, std::span<const double> edges,
                   std::span<std::uint64_t> counts) {
  constexpr std::size_t block = 512;
  constexpr std::size_t ways = 4;  // independent count tables hide store-to-load latency
  constexpr std::size_t max_chunk = std::size_t{1} << 30;
  const std::size_t n = counts.size();
  const double lo = edges.front();
  const double hi = edges.back();
  const double norm = static_cast<double>(n) / (hi - lo);
  const double top = static_cast<double>(n - 1);
  const std::int32_t last = static_cast<std::int32_t>(n - 1);
  std::vector<std::uint32_t> tables(ways * n);
  const double* e = edges.data();
  std::array<std::int32_t, block> idx;
  std::size_t done = 0;
  while (done < x.size()) {
    const std::size_t chunk_end = std::min(x.size(), done + max_chunk);
    for (std::size_t b = done; b < chunk_end; b += block) {
      const std::size_t m = std::min(block, chunk_end - b);
      const float* p = x.data() + b;
      // 1. Approximate index from the uniform formula, clamped in the float domain
      //    (NaN compares false and lands on 0; it is rejected in step 2).
      for (std::size_t k = 0; k < m; ++k) {
        double f = (bin_value<T>(p[k]) - lo) * norm;
        f = f > 0.0 ? f : 0.0;
        f = f < top ? f : top;
        idx[k] = static_cast<std::int32_t>(f);
      }
      // 2. Exact correction against the stored edges, then count (out-of-range adds 0).
      for (std::size_t k = 0; k < m; ++k) {
        const double v = bin_value<T>(p[k]);
        std::int32_t i = idx[k];
        i -= static_cast<std::int32_t>((i > 0) & (v < e[i]));
        i += static_cast<std::int32_t>((i < last) & (v >= e[i + 1]));
        const bool inside = (v >= lo) & (v <= hi);
        tables[(k % ways) * n + static_cast<std::size_t>(i)] += static_cast<std::uint32_t>(inside);
      }
    }
    // 3. Fold the 32-bit tables into the 64-bit counts.
    for (std::size_t w = 0; w < ways; ++w) {
      for (std::size_t i = 0; i < n; ++i) {
        counts[i] += tables[w * n + i];
        tables[w * n + i] = 0;
      }
    }
    done = chunk_end;
  }
}

}  // namespace quark::detail
