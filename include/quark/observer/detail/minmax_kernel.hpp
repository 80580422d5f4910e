// SPDX-License-Identifier: MIT
// The min/max/NaN-count reduction behind minmax_observer. Two forms with the same result:
// - portable: 16 independent lanes, so it maps to packed min/max without -ffast-math
//   (`v < m ? v : m` has exactly the semantics of x86 MINPS: a NaN v keeps m);
// - AVX-512: four accumulators of 16 lanes; NaN lanes counted by a self-compare and a masked add
//   per vector into a 16-lane counter. It carries a target attribute, so every x86-64 build
//   compiles it (no -mavx512f needed) and minmax_reduce() picks it at run time when the CPU has
//   AVX-512F (observer_avx512_usable()).
// Both walk large inputs in 1 KiB blocks with a software prefetch a few KiB ahead: a single core
// reads DRAM at full speed only with more misses in flight than the hardware prefetcher keeps.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>

#include <quark/config.hpp>
#include <quark/detail/prefetch.hpp>

// QUARK_OBSERVER_AVX512: the AVX-512 forms are compiled (x86 with GCC or Clang, any -march);
// they run only where observer_avx512_usable() says the CPU has AVX-512F.
#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define QUARK_OBSERVER_AVX512 1
#define QUARK_OBSERVER_TARGET_AVX512 __attribute__((target("avx512f")))
// The AVX2 forms of the histogram kernels, for CPUs without AVX-512F (picked at run time too).
#define QUARK_OBSERVER_TARGET_AVX2 __attribute__((target("avx2")))
// GCC 12 at -O1 reports the intrinsics' own _mm512_undefined_*() (a self-initialised variable)
// as maybe-uninitialized once they are inlined; the reports are false.
#if defined(__GNUC__) && !defined(__clang__)
#define QUARK_OBSERVER_AVX512_PUSH \
  _Pragma("GCC diagnostic push") _Pragma("GCC diagnostic ignored \"-Wmaybe-uninitialized\"")
#define QUARK_OBSERVER_AVX512_POP _Pragma("GCC diagnostic pop")
#else
#define QUARK_OBSERVER_AVX512_PUSH
#define QUARK_OBSERVER_AVX512_POP
#endif
#else
#define QUARK_OBSERVER_AVX512 0
#endif

namespace quark::detail {

struct minmax_partial {
  float min = std::numeric_limits<float>::infinity();
  float max = -std::numeric_limits<float>::infinity();
  std::uint64_t nan_count = 0;
};

/// Floats per prefetch step of the bulk loops (1 KiB: 16 cache lines).
inline constexpr std::size_t observer_block = 256;

/// Folds 16 lane values into `out` in lane order (the same order in every form).
QUARK_ALWAYS_INLINE void fold_lanes(const float* mn, const float* mx,
                                    minmax_partial& out) noexcept {
  for (std::size_t j = 0; j < 16; ++j) {
    out.min = mn[j] < out.min ? mn[j] : out.min;
    out.max = mx[j] > out.max ? mx[j] : out.max;
  }
}

/// Scalar tail: folds [p, p + n) into `out`.
QUARK_ALWAYS_INLINE void minmax_tail(const float* p, std::size_t n, minmax_partial& out) noexcept {
  for (std::size_t i = 0; i < n; ++i) {
    const float v = p[i];
    out.min = v < out.min ? v : out.min;
    out.max = v > out.max ? v : out.max;
    out.nan_count += static_cast<std::uint64_t>(v != v);
  }
}

/// Vector width of the portable form: the widest the target has (16 lanes in all cases).
inline constexpr std::size_t portable_vector_bytes =
#if defined(__AVX512F__)
    64;
#elif defined(__AVX__)
    32;
#else
    16;
#endif

/// One pass over `x`, portable form: NaN values are counted and do not affect min/max.
inline minmax_partial minmax_reduce_portable(std::span<const float> x) noexcept {
  constexpr std::size_t lanes = 16;
  constexpr std::size_t chunk = std::size_t{1} << 20;  // keeps the 32-bit NaN lanes exact
  minmax_partial out;
  const float* const base = x.data();
  const std::size_t bytes = x.size() * sizeof(float);
  const float* p = base;
  std::size_t n = x.size();
  while (n >= lanes) {
    const std::size_t m = (n < chunk ? n : chunk) / lanes * lanes;
    float mn[lanes];
    float mx[lanes];
    std::uint32_t nan[lanes];
#if defined(__GNUC__)
    // 1. GCC/Clang vector extension (GCC's SLP pass does not vectorise the lane form below), in
    //    vectors of the target's width: a 64-byte vector type on an SSE2 or AVX2 target is
    //    lowered to scalar code by GCC 12 (0.9 G elem/s, where 4 x 16-byte vectors run at 9).
    using vf = float __attribute__((vector_size(portable_vector_bytes)));
    using vi = std::int32_t __attribute__((vector_size(portable_vector_bytes)));
    constexpr std::size_t vl = portable_vector_bytes / sizeof(float);  // lanes per vector
    constexpr std::size_t nv = lanes / vl;
    vf vmn[nv];
    vf vmx[nv];
    vi vnan[nv];
    // Whole-vector initialisation (a scalar operand broadcasts): GCC 12 -O3 reports lane-wise
    // stores into a fresh vector as maybe-uninitialized.
    for (std::size_t v = 0; v < nv; ++v) {
      vnan[v] = vi{};
      vmn[v] = vf{} + std::numeric_limits<float>::infinity();
      vmx[v] = vf{} - std::numeric_limits<float>::infinity();
    }
    const auto pos = static_cast<std::size_t>(p - base);
    for (std::size_t i0 = 0; i0 < m; i0 += observer_block) {
      prefetch_ahead(base, (pos + i0) * sizeof(float), bytes, observer_block * sizeof(float));
      const std::size_t end = m - i0 < observer_block ? m : i0 + observer_block;
      for (std::size_t i = i0; i < end; i += lanes) {
        for (std::size_t v = 0; v < nv; ++v) {
          vf a;
          std::memcpy(&a, p + i + v * vl, sizeof(a));
          vmn[v] = a < vmn[v] ? a : vmn[v];
          vmx[v] = a > vmx[v] ? a : vmx[v];
          vnan[v] -= (a != a);  // true lanes are -1
        }
      }
    }
    for (std::size_t v = 0; v < nv; ++v) {
      for (std::size_t j = 0; j < vl; ++j) {
        mn[v * vl + j] = vmn[v][j];
        mx[v * vl + j] = vmx[v][j];
        nan[v * vl + j] = static_cast<std::uint32_t>(vnan[v][j]);
      }
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
    fold_lanes(mn, mx, out);
    for (std::size_t j = 0; j < lanes; ++j)
      out.nan_count += nan[j];
    p += m;
    n -= m;
  }
  // 3. Tail.
  minmax_tail(p, n, out);
  return out;
}

/// The smallest |v| over `x` (NaN ignored; +Inf when `x` holds no number), in vectors of the
/// target's width like minmax_reduce_portable (a scalar `a < m ? a : m` loop is a serial chain).
inline float abs_min_reduce(std::span<const float> x) noexcept {
  constexpr std::size_t lanes = 16;
  float m = std::numeric_limits<float>::infinity();
  std::size_t i = 0;
#if defined(__GNUC__)
  using vf = float __attribute__((vector_size(portable_vector_bytes)));
  using vu = std::uint32_t __attribute__((vector_size(portable_vector_bytes)));
  constexpr std::size_t vl = portable_vector_bytes / sizeof(float);
  constexpr std::size_t nv = lanes / vl;
  vf vm[nv];
  for (std::size_t v = 0; v < nv; ++v)
    vm[v] = vf{} + std::numeric_limits<float>::infinity();
  const vu mask = vu{} + 0x7fffffffu;
  for (; i + lanes <= x.size(); i += lanes) {
    for (std::size_t v = 0; v < nv; ++v) {
      vu bits;
      std::memcpy(&bits, x.data() + i + v * vl, sizeof(bits));
      bits &= mask;
      vf a;
      std::memcpy(&a, &bits, sizeof(a));
      vm[v] = a < vm[v] ? a : vm[v];  // a NaN a keeps the minimum
    }
  }
  for (std::size_t v = 0; v < nv; ++v) {
    for (std::size_t j = 0; j < vl; ++j)
      m = vm[v][j] < m ? vm[v][j] : m;
  }
#endif
  for (; i < x.size(); ++i) {
    const float a = std::fabs(x[i]);
    m = a < m ? a : m;
  }
  return m;
}

/// True when the AVX-512 forms are compiled and the CPU runs AVX-512F (checked once).
inline bool observer_avx512_usable() noexcept {
#if QUARK_OBSERVER_AVX512
  static const bool ok = __builtin_cpu_supports("avx512f") != 0;
  return ok;
#else
  return false;
#endif
}

/// True when the AVX2 forms are compiled and the CPU runs AVX2 (checked once).
inline bool observer_avx2_usable() noexcept {
#if QUARK_OBSERVER_AVX512
  static const bool ok = __builtin_cpu_supports("avx2") != 0;
  return ok;
#else
  return false;
#endif
}

#if QUARK_OBSERVER_AVX512
QUARK_OBSERVER_AVX512_PUSH
// GCC 12 reports -Wmaybe-uninitialized inside the unmasked AVX-512 intrinsics that pass
// _mm512_undefined_*() through; the all-lanes zero-masked forms compile to the same instructions.
/// Lane-wise MINPS: a NaN `v` keeps `m` (MINPS returns its second operand on NaN).
QUARK_OBSERVER_TARGET_AVX512 QUARK_ALWAYS_INLINE __m512 min512(__m512 v, __m512 m) noexcept {
  return _mm512_maskz_min_ps(0xFFFF, v, m);
}
/// Lane-wise MAXPS, NaN as min512.
QUARK_OBSERVER_TARGET_AVX512 QUARK_ALWAYS_INLINE __m512 max512(__m512 v, __m512 m) noexcept {
  return _mm512_maskz_max_ps(0xFFFF, v, m);
}

/// Number of NaN values among the 16 lanes of `v`.
QUARK_OBSERVER_TARGET_AVX512 QUARK_ALWAYS_INLINE std::uint64_t count_nan16(__m512 v) noexcept {
  const auto m = static_cast<std::uint32_t>(_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q));
  return static_cast<std::uint64_t>(__builtin_popcount(m));
}

/// Sum of the 16 unsigned 32-bit lanes of `v` (stored and added: GCC 12 reports
/// _mm512_reduce_add_epi32 as reading an uninitialised value).
QUARK_OBSERVER_TARGET_AVX512 QUARK_ALWAYS_INLINE std::uint64_t sum_lanes(__m512i v) noexcept {
  alignas(64) std::uint32_t lanes[16];
  _mm512_store_si512(lanes, v);
  std::uint64_t s = 0;
  for (const std::uint32_t x : lanes)
    s += x;
  return s;
}

/// Lane-wise min and max of two accumulator pairs, stored to `mn` / `mx` (16 floats each).
QUARK_OBSERVER_TARGET_AVX512 QUARK_ALWAYS_INLINE void store_lanes(__m512 mn0, __m512 mn1,
                                                                  __m512 mx0, __m512 mx1, float* mn,
                                                                  float* mx) noexcept {
  _mm512_storeu_ps(mn, min512(mn1, mn0));
  _mm512_storeu_ps(mx, max512(mx1, mx0));
}

/// One pass over `x`, AVX-512 form; same result as minmax_reduce_portable except that the sign of
/// a zero extremum may differ when both +0 and -0 occur (neither form specifies which it keeps).
QUARK_OBSERVER_TARGET_AVX512 inline minmax_partial minmax_reduce_avx512(
    std::span<const float> x) noexcept {
  minmax_partial out;
  const float* const p = x.data();
  const std::size_t n = x.size();
  const std::size_t bytes = n * sizeof(float);
  __m512 mn0 = _mm512_set1_ps(std::numeric_limits<float>::infinity());
  __m512 mn1 = mn0;
  __m512 mn2 = mn0;
  __m512 mn3 = mn0;
  __m512 mx0 = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  __m512 mx1 = mx0;
  __m512 mx2 = mx0;
  __m512 mx3 = mx0;
  std::size_t i = 0;
  __m512i nan_lanes = _mm512_setzero_si512();
  const __m512i one = _mm512_set1_epi32(1);
  // NaN lanes are flushed into the 64-bit count every nan_flush values (per-lane counts < 2^31).
  constexpr std::size_t nan_flush = std::size_t{1} << 24;
  // 1. 1 KiB blocks, each prefetching the block a few KiB ahead.
  for (; i + observer_block <= n; i += observer_block) {
    prefetch_ahead(p, i * sizeof(float), bytes, observer_block * sizeof(float));
    for (std::size_t k = i; k < i + observer_block; k += 64) {
      const __m512 a = _mm512_loadu_ps(p + k);
      const __m512 b = _mm512_loadu_ps(p + k + 16);
      const __m512 c = _mm512_loadu_ps(p + k + 32);
      const __m512 d = _mm512_loadu_ps(p + k + 48);
      mn0 = min512(a, mn0);
      mx0 = max512(a, mx0);
      mn1 = min512(b, mn1);
      mx1 = max512(b, mx1);
      mn2 = min512(c, mn2);
      mx2 = max512(c, mx2);
      mn3 = min512(d, mn3);
      mx3 = max512(d, mx3);
      // NaN lanes of the four vectors, counted per lane (a masked add each).
      nan_lanes =
          _mm512_mask_add_epi32(nan_lanes, _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q), nan_lanes, one);
      nan_lanes =
          _mm512_mask_add_epi32(nan_lanes, _mm512_cmp_ps_mask(b, b, _CMP_UNORD_Q), nan_lanes, one);
      nan_lanes =
          _mm512_mask_add_epi32(nan_lanes, _mm512_cmp_ps_mask(c, c, _CMP_UNORD_Q), nan_lanes, one);
      nan_lanes =
          _mm512_mask_add_epi32(nan_lanes, _mm512_cmp_ps_mask(d, d, _CMP_UNORD_Q), nan_lanes, one);
    }
    if ((i & (nan_flush - 1)) == 0) {
      out.nan_count += sum_lanes(nan_lanes);
      nan_lanes = _mm512_setzero_si512();
    }
  }
  out.nan_count += sum_lanes(nan_lanes);
  // 2. Whole vectors of the tail.
  for (; i + 16 <= n; i += 16) {
    const __m512 a = _mm512_loadu_ps(p + i);
    mn0 = min512(a, mn0);
    mx0 = max512(a, mx0);
    out.nan_count += count_nan16(a);
  }
  // 3. Fold the accumulators, then the last values.
  alignas(64) float mn[16];
  alignas(64) float mx[16];
  store_lanes(min512(mn2, mn0), min512(mn3, mn1), max512(mx2, mx0), max512(mx3, mx1), mn, mx);
  fold_lanes(mn, mx, out);
  minmax_tail(p + i, n - i, out);
  return out;
}
QUARK_OBSERVER_AVX512_POP
#endif

/// One pass over `x`: NaN values are counted and do not affect min/max. The AVX-512 form where
/// the CPU has it, else the portable one (the same result).
inline minmax_partial minmax_reduce(std::span<const float> x) noexcept {
#if QUARK_OBSERVER_AVX512
  if (observer_avx512_usable())
    return minmax_reduce_avx512(x);
#endif
  return minmax_reduce_portable(x);
}

}  // namespace quark::detail
