// SPDX-License-Identifier: MIT
// AVX-512 forms of the contiguous chunk kernels of the common block shapes (OCP MX with blocks of
// 32, BFP with blocks of 8, MX4/6/9 with blocks of 16 and pairs). They compute exactly what the
// portable chunk kernels compute (the same integer steps, lane by lane), but keep a block in
// registers from load to store: the block maximum is a few in-register max/shuffle steps instead
// of a pass over memory, and no per-element constant arrays are written and re-read. Blocks off
// the fast path (Inf/NaN, tiny exponents) are redone by the portable per-block code.
//
// The functions carry a target attribute and are chosen at run time (block_avx512_usable()), so
// a build without -mavx512f still uses them on a machine that has AVX-512, and its tests cover
// them. Each also requests the input `prefetch_distance_floats` ahead, one hint per 64-byte line
// as it goes, which keeps a single core's DRAM reads in flight while it computes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>

#include <quark/block/block_format.hpp>
#include <quark/block/detail/block_loop.hpp>
#include <quark/block/shared_scale.hpp>
#include <quark/config.hpp>
#include <quark/core/policy.hpp>
#include <quark/detail/prefetch.hpp>

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define QUARK_BLOCK_AVX512 1
#define QUARK_TARGET_AVX512 __attribute__((target("avx512f")))
// GCC 12 at -O1 reports the intrinsics' own _mm512_undefined_epi32() (a self-initialised
// variable) as maybe-uninitialized once they are inlined; the reports are false.
#if defined(__GNUC__) && !defined(__clang__)
#define QUARK_AVX512_WARNINGS_PUSH \
  _Pragma("GCC diagnostic push") _Pragma("GCC diagnostic ignored \"-Wmaybe-uninitialized\"")
#define QUARK_AVX512_WARNINGS_POP _Pragma("GCC diagnostic pop")
#else
#define QUARK_AVX512_WARNINGS_PUSH
#define QUARK_AVX512_WARNINGS_POP
#endif
#else
#define QUARK_BLOCK_AVX512 0
#endif

namespace quark::detail {

/// How far ahead of the element being computed the chunk kernels request input (4 KiB).
inline constexpr std::size_t prefetch_distance_floats = prefetch_default_distance_bytes / 4;

#if QUARK_BLOCK_AVX512

QUARK_AVX512_WARNINGS_PUSH

/// True when the CPU runs AVX-512 F (checked once).
inline bool block_avx512_usable() noexcept {
  static const bool ok = __builtin_cpu_supports("avx512f") != 0;
  return ok;
}

/// The rounding modes the vector kernels implement (the ones under which the fast paths apply).
template <rounding R>
inline constexpr bool avx512_rounding_v = rounds_tiny_to_zero_v<R>;

/// round_shift<R> on 16 lanes: mant / 2^sh rounded; sh in [1, 31]; `neg` marks negative values.
template <rounding R>
QUARK_TARGET_AVX512 QUARK_ALWAYS_INLINE __m512i v_round_shift(__m512i mant, __m512i sh,
                                                              __mmask16 neg) noexcept {
  const __m512i one = _mm512_set1_epi32(1);
  const __m512i q = _mm512_srlv_epi32(mant, sh);
  if constexpr (R == rounding::toward_zero) {
    static_cast<void>(neg);
    return q;
  } else {
    const __m512i half = _mm512_sllv_epi32(one, _mm512_sub_epi32(sh, one));
    if constexpr (R == rounding::nearest_even) {
      static_cast<void>(neg);
      const __m512i bias = _mm512_add_epi32(_mm512_sub_epi32(half, one), _mm512_and_si512(q, one));
      return _mm512_srlv_epi32(_mm512_add_epi32(mant, bias), sh);
    } else {
      const __m512i rem = _mm512_and_si512(mant, _mm512_sub_epi32(_mm512_sllv_epi32(one, sh), one));
      __mmask16 up = 0;
      if constexpr (R == rounding::nearest_away) {
        static_cast<void>(neg);
        up = _mm512_cmpge_epu32_mask(rem, half);
      } else {
        static_assert(R == rounding::nearest_up);
        up = static_cast<__mmask16>((neg & _mm512_cmpgt_epu32_mask(rem, half)) |
                                    (~neg & _mm512_cmpge_epu32_mask(rem, half)));
      }
      return _mm512_mask_add_epi32(q, up, q, one);
    }
  }
}

/// The maximum of each group of 2^k adjacent lanes, in every lane of the group (k = 1..4).
template <int K>
QUARK_TARGET_AVX512 QUARK_ALWAYS_INLINE __m512i v_group_max(__m512i m) noexcept {
  m = _mm512_max_epu32(m, _mm512_shuffle_epi32(m, static_cast<_MM_PERM_ENUM>(0xB1)));
  if constexpr (K >= 2)
    m = _mm512_max_epu32(m, _mm512_shuffle_epi32(m, static_cast<_MM_PERM_ENUM>(0x4E)));
  if constexpr (K >= 3)
    m = _mm512_max_epu32(m, _mm512_shuffle_i32x4(m, m, 0xB1));
  if constexpr (K >= 4)
    m = _mm512_max_epu32(m, _mm512_shuffle_i32x4(m, m, 0x4E));
  return m;
}

/// Hints the input line `ahead` floats past p when it lies before `end`.
QUARK_ALWAYS_INLINE void prefetch_if_before(const float* p, std::size_t ahead,
                                            std::size_t left) noexcept {
  if (ahead < left)
    prefetch_read(p + ahead);
}

/// One OCP MX fast-path vector (mx_element_fast on 16 lanes).
template <class Element, rounding R, compat_mode Compat>
QUARK_TARGET_AVX512 QUARK_ALWAYS_INLINE __m512 v_mx_element(__m512i u, __m512i lo, __m512 lim_pos,
                                                            __m512 lim_neg) noexcept {
  constexpr mx_element_info el = mx_element_info_v<Element>;
  constexpr int mb = el.mbits;
  const __m512i sign = _mm512_and_si512(u, _mm512_set1_epi32(static_cast<int>(0x80000000u)));
  const __mmask16 neg = _mm512_test_epi32_mask(u, _mm512_set1_epi32(static_cast<int>(0x80000000u)));
  const __m512i f = _mm512_srli_epi32(_mm512_slli_epi32(u, 1), 24);
  const __m512i mant = _mm512_or_si512(_mm512_and_si512(u, _mm512_set1_epi32(0x7FFFFF)),
                                       _mm512_set1_epi32(0x800000));
  const __m512i t = _mm512_max_epi32(f, lo);
  const __m512i sh = _mm512_min_epi32(
      _mm512_add_epi32(_mm512_sub_epi32(t, f), _mm512_set1_epi32(23 - mb)), _mm512_set1_epi32(31));
  const __m512i q = v_round_shift<R>(mant, sh, neg);
  const __m512 step =
      _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_sub_epi32(t, _mm512_set1_epi32(mb)), 23));
  __m512 out = _mm512_mul_ps(_mm512_cvtepi32_ps(q), step);
  if constexpr (el.max_pos == el.max_neg) {
    static_cast<void>(lim_neg);
    out = _mm512_min_ps(out, lim_pos);
  } else {
    out = _mm512_min_ps(out, _mm512_mask_blend_ps(neg, lim_pos, lim_neg));
  }
  __m512i s = sign;
  if constexpr (el.is_integer || Compat == compat_mode::quark)
    s = _mm512_maskz_mov_epi32(_mm512_test_epi32_mask(q, q), sign);
  return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(out), s));
}

/// The embedded rounding of the floating-point element form, for the modes it serves.
template <rounding R>
inline constexpr int v_embedded_rounding_v = R == rounding::nearest_even
                                                 ? (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
                                             : R == rounding::toward_zero
                                                 ? (_MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC)
                                                 : -1;

/// v_mx_element by floating-point addition, for nearest-even and toward-zero rounding: with
/// C = 2^(t + 23 - mbits) (t = max(f, lo) in field units), |x| + C lies in [C, 2C), where the
/// float32 spacing is exactly the element step, so one addition rounds |x| to the step (the
/// embedded rounding mode ignores MXCSR) and subtracting C is exact. Precondition (checked per
/// block by the caller): t + 23 - mbits <= 254, i.e. C is finite.
template <class Element, rounding R, compat_mode Compat>
QUARK_TARGET_AVX512 QUARK_ALWAYS_INLINE __m512 v_mx_element_fp(__m512i u, __m512i lo_field,
                                                               __m512 lim_pos,
                                                               __m512 lim_neg) noexcept {
  constexpr mx_element_info el = mx_element_info_v<Element>;
  constexpr int mode = v_embedded_rounding_v<R>;
  static_assert(mode >= 0, "v_mx_element_fp serves nearest-even and toward-zero rounding");
  const __m512i sign_bit = _mm512_set1_epi32(static_cast<int>(0x80000000u));
  const __m512 a = _mm512_castsi512_ps(_mm512_andnot_si512(sign_bit, u));
  const __m512i t = _mm512_max_epi32(_mm512_and_si512(u, _mm512_set1_epi32(0x7F800000)), lo_field);
  const __m512 c =
      _mm512_castsi512_ps(_mm512_add_epi32(t, _mm512_set1_epi32((23 - el.mbits) << 23)));
  __m512 out = _mm512_sub_round_ps(_mm512_add_round_ps(a, c, mode), c, mode);
  if constexpr (el.max_pos == el.max_neg) {
    static_cast<void>(lim_neg);
    out = _mm512_min_ps(out, lim_pos);
  } else {
    out = _mm512_min_ps(
        out, _mm512_mask_blend_ps(_mm512_test_epi32_mask(u, sign_bit), lim_pos, lim_neg));
  }
  __m512i s = _mm512_and_si512(u, sign_bit);
  if constexpr (el.is_integer || Compat == compat_mode::quark) {
    const __m512i ob = _mm512_castps_si512(out);
    s = _mm512_maskz_mov_epi32(_mm512_test_epi32_mask(ob, ob), s);
  }
  return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(out), s));
}

/// Elements of sign + m magnitude bits in quanta of 2^(base - 127 - m + 1) (BFP and MX4/6/9
/// fast paths): q = round(|x| / quantum) clamped to qmax, times the quantum, with x's sign.
template <rounding R>
QUARK_TARGET_AVX512 QUARK_ALWAYS_INLINE __m512 v_quanta_element(__m512i u, __m512i base, int m,
                                                                __m512i qmax) noexcept {
  const __m512i sign = _mm512_and_si512(u, _mm512_set1_epi32(static_cast<int>(0x80000000u)));
  const __mmask16 neg = _mm512_test_epi32_mask(u, _mm512_set1_epi32(static_cast<int>(0x80000000u)));
  const __m512i f = _mm512_srli_epi32(_mm512_slli_epi32(u, 1), 24);
  const __m512i mant = _mm512_or_si512(_mm512_and_si512(u, _mm512_set1_epi32(0x7FFFFF)),
                                       _mm512_set1_epi32(0x800000));
  const __m512i sh =
      _mm512_min_epi32(_mm512_add_epi32(_mm512_sub_epi32(base, f), _mm512_set1_epi32(24 - m)),
                       _mm512_set1_epi32(31));
  const __m512i q = _mm512_min_epu32(v_round_shift<R>(mant, sh, neg), qmax);
  const __m512 quantum =
      _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(base, _mm512_set1_epi32(1 - m)), 23));
  const __m512 y = _mm512_mul_ps(_mm512_cvtepi32_ps(q), quantum);
  return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(y), sign));
}

/// bfp_chunk for blocks of 8 (two blocks per vector). Blocks off the fast path are left to the
/// caller: their indices get slow[j] = 1 and the function returns whether there is any.
template <rounding R>
QUARK_TARGET_AVX512 bool bfp_chunk8_avx512(const float* src, float* dst, std::size_t k, int m,
                                           unsigned char* slow, std::size_t left) noexcept {
  const __m512i abs_mask = _mm512_set1_epi32(0x7FFFFFFF);
  const __m512i qmax = _mm512_set1_epi32(static_cast<int>((std::uint32_t{1} << m) - 1u));
  const __m512i s_min = _mm512_set1_epi32(m + 1);
  const __m512i s_nan = _mm512_set1_epi32(0xFF);
  bool any_slow = false;
  std::size_t j = 0;
  for (; j + 2 <= k; j += 2) {
    const float* p = src + 8 * j;
    prefetch_if_before(p, prefetch_distance_floats, left - 8 * j);
    const __m512i u = _mm512_loadu_si512(p);
    const __m512i s = _mm512_srli_epi32(v_group_max<3>(_mm512_and_si512(u, abs_mask)), 23);
    const __mmask16 fast = static_cast<__mmask16>(_mm512_cmpge_epi32_mask(s, s_min) &
                                                  _mm512_cmpneq_epi32_mask(s, s_nan));
    _mm512_store_ps(dst + 8 * j, v_quanta_element<R>(u, s, m, qmax));
    if (fast != 0xFFFF) {
      slow[j] = (fast & 0x00FFu) != 0x00FFu ? 1 : 0;
      slow[j + 1] = (fast & 0xFF00u) != 0xFF00u ? 1 : 0;
      any_slow = true;
    } else {
      slow[j] = 0;
      slow[j + 1] = 0;
    }
  }
  for (; j < k; ++j) {  // an odd last block: the portable per-block kernel
    slow[j] = 1;
    any_slow = true;
  }
  return any_slow;
}

/// micro_chunk_pairs for blocks of 16 with pairs and 1 shift bit (one block per vector); same
/// contract as bfp_chunk8_avx512 for the blocks off the fast path.
template <rounding R>
QUARK_TARGET_AVX512 bool micro_chunk16_avx512(const float* src, float* dst, std::size_t k, int m,
                                              std::uint32_t qmax_value, unsigned char* slow,
                                              std::size_t left) noexcept {
  const __m512i abs_mask = _mm512_set1_epi32(0x7FFFFFFF);
  const __m512i qmax = _mm512_set1_epi32(static_cast<int>(qmax_value));
  const __m512i one = _mm512_set1_epi32(1);
  bool any_slow = false;
  for (std::size_t j = 0; j < k; ++j) {
    const float* p = src + 16 * j;
    prefetch_if_before(p, prefetch_distance_floats, left - 16 * j);
    const __m512i u = _mm512_loadu_si512(p);
    const __m512i pair = v_group_max<1>(_mm512_and_si512(u, abs_mask));
    const __m512i s = _mm512_srli_epi32(v_group_max<4>(pair), 23);
    const __m512i fm = _mm512_srli_epi32(pair, 23);
    const auto sv = static_cast<int>(_mm_cvtsi128_si32(_mm512_castsi512_si128(s)));
    if (sv == 0xFF || sv < m + 2) {
      slow[j] = 1;
      any_slow = true;
      continue;
    }
    slow[j] = 0;
    const __m512i base = _mm512_mask_sub_epi32(s, _mm512_cmpgt_epi32_mask(s, fm), s, one);
    _mm512_store_ps(dst + 16 * j, v_quanta_element<R>(u, base, m, qmax));
  }
  return any_slow;
}

QUARK_AVX512_WARNINGS_POP

#else

inline bool block_avx512_usable() noexcept {
  return false;
}

template <rounding R>
inline constexpr bool avx512_rounding_v = false;

#endif

}  // namespace quark::detail
