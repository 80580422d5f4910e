// SPDX-License-Identifier: MIT
// The min/max/NaN-count reduction behind minmax_observer: 16 independent lanes, so it maps to
// packed min/max without -ffast-math (`v < m ? v : m` has exactly the semantics of x86 MINPS:
// a NaN v keeps m).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
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
    const std::size_t m = (n < chunk ? n : chunk) / lanes * lanes;
    float mn[lanes];
    float mx[lanes];
    std::uint32_t nan[lanes];
#if defined(__GNUC__)
    // 1. GCC/Clang vector extension: GCC's SLP pass does not vectorise the lane form below.
    using vf = float __attribute__((vector_size(lanes * sizeof(float))));
    using vi = std::int32_t __attribute__((vector_size(lanes * sizeof(float))));
    vf vmn;
    vf vmx;
    vi vnan{};
    for (std::size_t j = 0; j < lanes; ++j) {
      vmn[j] = std::numeric_limits<float>::infinity();
      vmx[j] = -std::numeric_limits<float>::infinity();
    }
    for (std::size_t i = 0; i < m; i += lanes) {
      vf v;
      std::memcpy(&v, p + i, sizeof(v));
      vmn = v < vmn ? v : vmn;
      vmx = v > vmx ? v : vmx;
      vnan -= (v != v);  // true lanes are -1
    }
    for (std::size_t j = 0; j < lanes; ++j) {
      mn[j] = vmn[j];
      mx[j] = vmx[j];
      nan[j] = static_cast<std::uint32_t>(vnan[j]);
    }
#else
    // 1. Portable lane form.
    for (std::size_t j = 0; j < lanes; ++j) {
      mn[j] = std::numeric_limits<float>::infinity();
      mx[j] = -std::numeric_limits<float>::infinity();
      nan[j] = 0;
    }
    for (std::size_t i = 0; i < m; i += lanes) {
      for (std::size_t j = 0; j < lanes; ++j) {
        const float v = p[i + j];
        mn[j] = v < mn[j] ? v : mn[j];
        mx[j] = v > mx[j] ? v : mx[j];
        nan[j] += static_cast<std::uint32_t>(v != v);
      }
    }
#endif
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
