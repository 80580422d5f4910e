// SPDX-License-Identifier: MIT
// Explicit SIMD bulk encoders float32 -> bfloat16 / float16 under round-to-nearest-even, for
// every overflow and NaN policy, giving exactly the bits of the scalar encoder (encode_fp_rne).
// The instruction set is chosen at compile time: AVX-512 (F, BW, VL), else AVX2 (+ F16C for
// float16); without them span convert keeps its scalar loop.
//
// Policy handling is done on the float input, so one rounding core serves every policy:
// - saturate: clamp to +-max finite first (values between max and the overflow threshold round
//   to max anyway, and Inf becomes max, as the scalar path does);
// - NaN: replace the lane by a float that encodes exactly to the policy's NaN result (the
//   canonical NaN with the input's sign, or +0).
// Rounding: bfloat16 by integer arithmetic on the bits, which handles subnormals like normals
// (VCVTNEPS2BF16 would flush subnormal inputs to zero); float16 by VCVTPS2PH with the rounding
// mode as an immediate (nearest-even, no exceptions), independent of MXCSR.
//
// Large arrays (see encode16_bulk): the input is software-prefetched ahead, 4 KiB into L2 and
// 1 KiB into L1 (a single core reaches DRAM bandwidth only with many misses in flight, and the
// hardware prefetcher alone leaves the loop read-latency bound: 0.5x memcpy without, 0.7x with an
// L1 prefetch alone, 0.8x with both on the benchmark host), and the output, aligned to a full
// vector, is written with non-temporal stores straight from registers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include <quark/config.hpp>
#include <quark/core/bit.hpp>
#include <quark/core/policy.hpp>
#include <quark/detail/prefetch.hpp>
#include <quark/detail/stream.hpp>
#include <quark/dtype/detail/convert_impl.hpp>
#include <quark/dtype/formats.hpp>

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#include <immintrin.h>
#define QUARK_SIMD_ENCODE16 512
#elif defined(__AVX2__)
#include <immintrin.h>
#define QUARK_SIMD_ENCODE16 256
#else
#define QUARK_SIMD_ENCODE16 0
#endif
#if QUARK_SIMD_ENCODE16 == 512 || (QUARK_SIMD_ENCODE16 == 256 && defined(__F16C__))
#define QUARK_SIMD_ENCODE16_F16 1
#else
#define QUARK_SIMD_ENCODE16_F16 0
#endif

namespace quark::detail {

/// Whether a SIMD bulk encoder exists for format F under policy P in this build.
template <fp_format F, conversion_policy P>
inline constexpr bool has_simd_encode16 = QUARK_SIMD_ENCODE16 != 0 &&
                                          P.round == rounding::nearest_even &&
                                          (F == formats::bfloat16 ||
                                           (F == formats::float16 && QUARK_SIMD_ENCODE16_F16 != 0));

/// Policy constants of the SIMD encoders, as float bit patterns.
template <fp_format F, conversion_policy P>
struct encode16_consts {
  /// Largest finite value of F as float bits (the saturation bound).
  static constexpr std::uint32_t max_bits = [] {
    if constexpr (F == formats::bfloat16) {
      return F.max_finite_code() << 16;
    } else {
      return float_bits(65504.0f);
    }
  }();
  /// A float that encodes exactly to `code` (a NaN code or zero) of F.
  static constexpr std::uint32_t float_for(std::uint32_t code) {
    if constexpr (F == formats::bfloat16) {
      return code << 16;
    } else {
      // float16 NaN codes: quiet bit set, payload in the top mantissa bits.
      const std::uint32_t sign = (code & 0x8000u) << 16;
      const std::uint32_t mag = code & 0x7FFFu;
      if (mag == 0u)
        return sign;
      return sign | 0x7F800000u | ((mag & 0x3FFu) << 13);
    }
  }
  static constexpr std::uint32_t nan_pos = float_for(nan_result<F, P>(false));
  static constexpr std::uint32_t nan_neg = float_for(nan_result<F, P>(true));
  static_assert((nan_pos ^ nan_neg) == 0u || (nan_pos ^ nan_neg) == 0x80000000u,
                "the NaN results differ only by the sign");
  /// Sign bits of the input to carry into a NaN replacement.
  static constexpr std::uint32_t nan_sign_mask = nan_pos ^ nan_neg;
  static constexpr bool saturate = P.on_overflow == overflow::saturate;
};

#if QUARK_SIMD_ENCODE16 == 512

/// 32 floats -> 32 codes of F under P (the AVX-512 core).
template <fp_format F, conversion_policy P>
QUARK_ALWAYS_INLINE __m512i encode16_x32(const float* x) noexcept {
  using c = encode16_consts<F, P>;
  // Full-mask (maskz) forms where GCC 12's plain intrinsics start from an "undefined" vector that
  // -Wmaybe-uninitialized reports; they compile to the same unmasked instructions.
  constexpr __mmask16 all = 0xFFFF;
  __m512 v[2] = {_mm512_loadu_ps(x), _mm512_loadu_ps(x + 16)};
  const __m512i sign_bits = _mm512_set1_epi32(static_cast<int>(c::nan_sign_mask));
  const __m512i nan_base = _mm512_set1_epi32(static_cast<int>(c::nan_pos));
  for (auto& w : v) {
    const __mmask16 nan = _mm512_cmp_ps_mask(w, w, _CMP_UNORD_Q);
    // NaN lanes: nan_pos with the input's sign where the policy keeps it (ternary: a | (b & c)).
    const __m512i repl =
        _mm512_ternarylogic_epi32(nan_base, _mm512_castps_si512(w), sign_bits, 0xF8);
    if constexpr (c::saturate) {
      const __m512 mx = _mm512_castsi512_ps(_mm512_set1_epi32(static_cast<int>(c::max_bits)));
      w = _mm512_maskz_max_ps(all, _mm512_maskz_min_ps(all, w, mx),
                              _mm512_sub_ps(_mm512_setzero_ps(), mx));
    }
    w = _mm512_mask_mov_ps(w, nan, _mm512_castsi512_ps(repl));
  }
  if constexpr (F == formats::bfloat16) {
    // RNE on the bits: + 0x7FFF + lsb of the kept part; the code is the high half.
    const __m512i bias = _mm512_set1_epi32(0x7FFF);
    const __m512i one = _mm512_set1_epi32(1);
    __m512i r[2];
    for (int k = 0; k < 2; ++k) {
      const __m512i u = _mm512_castps_si512(v[k]);
      const __m512i lsb = _mm512_and_si512(_mm512_maskz_srli_epi32(all, u, 16), one);
      r[k] = _mm512_add_epi32(_mm512_add_epi32(u, bias), lsb);
    }
    // Odd 16-bit words of r[0] then of r[1]: the 32 codes in order.
    const __m512i odd =
        _mm512_set_epi16(63, 61, 59, 57, 55, 53, 51, 49, 47, 45, 43, 41, 39, 37, 35, 33, 31, 29, 27,
                         25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
    return _mm512_permutex2var_epi16(r[0], odd, r[1]);
  } else {
    constexpr int rne = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
    const __m256i lo = _mm512_maskz_cvtps_ph(all, v[0], rne);
    const __m256i hi = _mm512_maskz_cvtps_ph(all, v[1], rne);
    return _mm512_maskz_inserti64x4(0xFF, _mm512_castsi256_si512(lo), hi, 1);
  }
}

inline constexpr std::size_t encode16_width = 32;

template <fp_format F, conversion_policy P, bool Stream>
QUARK_ALWAYS_INLINE void encode16_step(const float* x, std::uint16_t* y) noexcept {
  const __m512i codes = encode16_x32<F, P>(x);
  if constexpr (Stream) {
    _mm512_stream_si512(reinterpret_cast<__m512i*>(y), codes);
  } else {
    _mm512_storeu_si512(reinterpret_cast<void*>(y), codes);
  }
}

#elif QUARK_SIMD_ENCODE16 == 256

/// 16 floats -> 16 codes of F under P (the AVX2 core).
template <fp_format F, conversion_policy P>
QUARK_ALWAYS_INLINE __m256i encode16_x16(const float* x) noexcept {
  using c = encode16_consts<F, P>;
  __m256 v[2] = {_mm256_loadu_ps(x), _mm256_loadu_ps(x + 8)};
  const __m256 sign_bits =
      _mm256_castsi256_ps(_mm256_set1_epi32(static_cast<int>(c::nan_sign_mask)));
  const __m256 nan_base = _mm256_castsi256_ps(_mm256_set1_epi32(static_cast<int>(c::nan_pos)));
  for (auto& w : v) {
    const __m256 nan = _mm256_cmp_ps(w, w, _CMP_UNORD_Q);
    const __m256 repl = _mm256_or_ps(nan_base, _mm256_and_ps(w, sign_bits));
    if constexpr (c::saturate) {
      const __m256 mx = _mm256_castsi256_ps(_mm256_set1_epi32(static_cast<int>(c::max_bits)));
      w = _mm256_max_ps(_mm256_min_ps(w, mx), _mm256_sub_ps(_mm256_setzero_ps(), mx));
    }
    w = _mm256_blendv_ps(w, repl, nan);
  }
  if constexpr (F == formats::bfloat16) {
    const __m256i bias = _mm256_set1_epi32(0x7FFF);
    const __m256i one = _mm256_set1_epi32(1);
    __m256i r[2];
    for (int k = 0; k < 2; ++k) {
      const __m256i u = _mm256_castps_si256(v[k]);
      const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), one);
      r[k] = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, bias), lsb), 16);
    }
    // packus works per 128-bit lane: [r0 lo, r1 lo, r0 hi, r1 hi] -> reorder the quadwords.
    return _mm256_permute4x64_epi64(_mm256_packus_epi32(r[0], r[1]), 0xD8);
  } else {
#if QUARK_SIMD_ENCODE16_F16
    const __m128i lo = _mm256_cvtps_ph(v[0], _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m128i hi = _mm256_cvtps_ph(v[1], _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    return _mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1);
#else
    static_assert(F == formats::bfloat16, "float16 needs F16C");
    return _mm256_setzero_si256();
#endif
  }
}

inline constexpr std::size_t encode16_width = 16;

template <fp_format F, conversion_policy P, bool Stream>
QUARK_ALWAYS_INLINE void encode16_step(const float* x, std::uint16_t* y) noexcept {
  const __m256i codes = encode16_x16<F, P>(x);
  if constexpr (Stream) {
    _mm256_stream_si256(reinterpret_cast<__m256i*>(y), codes);
  } else {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y), codes);
  }
}

#endif

#if QUARK_SIMD_ENCODE16 != 0

/// Whole vectors of [0, n): returns how many elements were converted (a multiple of the width).
/// With Stream, `y` must be aligned to the vector size and the input is prefetched ahead.
template <fp_format F, conversion_policy P, bool Stream>
inline std::size_t encode16_vectors(const float* x, std::uint16_t* y, std::size_t n) noexcept {
  constexpr std::size_t w = encode16_width;
  const std::size_t whole = n - n % w;
  std::size_t i = 0;
  if constexpr (Stream) {
    // Request the input ahead, into L2 far and into L1 near: one hint of each per line, as the
    // loop crosses it.
    constexpr std::size_t near = prefetch_l1_distance_bytes / sizeof(float);
    constexpr std::size_t far = prefetch_l2_distance_bytes / sizeof(float);
    constexpr std::size_t line = prefetch_line_bytes / sizeof(float);
    static_assert(near < far && w % line == 0);
    for (; i + far + w <= whole; i += w) {
      for (std::size_t l = 0; l < w; l += line) {
        prefetch_read_l2(x + i + far + l);
        prefetch_read(x + i + near + l);
      }
      encode16_step<F, P, true>(x + i, y + i);
    }
  }
  for (; i < whole; i += w)
    encode16_step<F, P, Stream>(x + i, y + i);
  return whole;
}

/// Converts n floats to codes of F under P. Outputs at or above the streaming threshold are
/// written with non-temporal stores (after a scalar head that aligns the output).
template <fp_format F, conversion_policy P>
inline void encode16_bulk(const float* x, std::uint16_t* y, std::size_t n) noexcept {
  constexpr std::size_t vec_bytes = encode16_width * sizeof(std::uint16_t);
  std::size_t done = 0;
  if (n * sizeof(std::uint16_t) >= streaming_threshold_bytes) {
    const std::size_t mis = reinterpret_cast<std::uintptr_t>(y) % vec_bytes;
    std::size_t head = mis == 0 ? 0 : (vec_bytes - mis) / sizeof(std::uint16_t);
    head = head > n ? n : head;
    for (; done < head; ++done)
      y[done] = static_cast<std::uint16_t>(encode_fp_rne<F, P>(x[done]));
    done += encode16_vectors<F, P, true>(x + done, y + done, n - done);
    stream_fence();
  } else {
    done = encode16_vectors<F, P, false>(x, y, n);
  }
  for (; done < n; ++done)
    y[done] = static_cast<std::uint16_t>(encode_fp_rne<F, P>(x[done]));
}

#endif

}  // namespace quark::detail
