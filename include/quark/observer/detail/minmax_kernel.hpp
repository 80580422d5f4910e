// SPDX-License-Identifier: MIT
// The min/max/NaN-count reduction behind minmax_observer. Written as lane-parallel element-wise
// updates (16 independent accumulators) so that the compiler maps it to packed min/max without
// -ffast-math: `v < m ? v : m` has exactly the semantics of x86 MINPS (NaN -> keep m).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>

namespace quark::detail {

struct minmax_partial {
  float min = std::numeric_limits<float>::infinity();
  float max = -std::numeric_limits<float>::infinity();
  std::uint64_t nan_count = 0;
};

/// One pass over `x`: NaN values are counted and do not affect min/max.
inline minmax_partial minmax_reduce(std::span<const float> x) noexcept {
  constexpr std::size_t lanes = 16;
  constexpr std::size_t chunk = std::size_t{1} << 20;  // keeps the 32-bit NaN lanes exact
  minmax_partial out;
  const float* p = x.data();
  std::size_t n = x.size();
  while (n >= lanes) {
    // 1. Reduce one chunk into 16 lanes.
    std::array<float, lanes> mn;
    std::array<float, lanes> mx;
    std::array<std::uint32_t, lanes> nan{};
    mn.fill(std::numeric_limits<float>::infinity());
    mx.fill(-std::numeric_limits<float>::infinity());
    const std::size_t m = (n < chunk ? n : chunk) / lanes * lanes;
    for (std::size_t i = 0; i < m; i += lanes) {
      for (std::size_t j = 0; j < lanes; ++j) {
        const float v = p[i + j];
        mn[j] = v < mn[j] ? v : mn[j];
        mx[j] = v > mx[j] ? v : mx[j];
        nan[j] += static_cast<std::uint32_t>(v != v);
      }
    }
    // 2. Fold the lanes into the running result.
    for (std::size_t j = 0; j < lanes; ++j) {
      out.min = mn[j] < out.min ? mn[j] : out.min;
      out.max = mx[j] > out.max ? mx[j] : out.max;
      out.nan_count += nan[j];
    }
    p += m;
    n -= m;
  }
  // 3. Tail.
  for (std::size_t i = 0; i < n; ++i) {
    const float v = p[i];
    out.min = v < out.min ? v : out.min;
    out.max = v > out.max ? v : out.max;
    out.nan_count += static_cast<std::uint64_t>(v != v);
  }
  return out;
}

}  // namespace quark::detail
