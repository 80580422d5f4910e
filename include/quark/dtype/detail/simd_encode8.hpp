// SPDX-License-Identifier: MIT
// AVX-512 bulk encoder float32 -> 8-bit-or-narrower minifloats (float8 e4m3fn/e4m3fnuz/e5m2/
// e5m2fnuz, float6, float4; one code per byte) under round-to-nearest-even, for every overflow and
// NaN policy; and float32 -> float8_e8m0fnu under every deterministic rounding (the ONNX round
// modes). It is encode_fp_rne (convert_impl.hpp) written on 16 lanes with mask registers, step
// for step, so it gives the same bits (tests/dtype/bulk_test.cpp compares the two on every
// exponent, tie pattern and special value). Without AVX-512 the compiler's own vectorisation of
// the scalar loop is used (GCC picks 256-bit vectors and leaves the selects as blends, about
// 1 G elements/s on the benchmark host; this kernel is several times faster and the encode then
// runs at memory speed).
#pragma once

#include <cstddef>
#include <cstdint>

#include <quark/config.hpp>
#include <quark/core/bit.hpp>
#include <quark/core/policy.hpp>
#include <quark/detail/prefetch.hpp>
#include <quark/detail/stream.hpp>
#include <quark/dtype/detail/convert_impl.hpp>
#include <quark/dtype/fp_format.hpp>

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#include <immintrin.h>
#define QUARK_SIMD_ENCODE8 1
#else
#define QUARK_SIMD_ENCODE8 0
#endif

namespace quark::detail {

/// The exponent-only format (E8M0) under any deterministic rounding.
template <fp_format F, conversion_policy P>
inline constexpr bool is_simd_e8m0 = (F.exponent_bits == 8) && (F.mantissa_bits == 0) &&
                                     (F.bias == 127) && (!F.has_zero) && (!F.is_signed) &&
                                     (P.round != rounding::stochastic);

/// A format with zero and subnormals, one byte wide, under round-to-nearest-even.
template <fp_format F, conversion_policy P>
inline constexpr bool is_simd_rne8 = (P.round == rounding::nearest_even) && (F.has_zero) &&
                                     (F.mantissa_bits >= 1) && (F.total_bits() <= 8);

/// Whether the AVX-512 narrow encoder handles format F under policy P in this build.
template <fp_format F, conversion_policy P>
inline constexpr bool has_simd_encode8 = (QUARK_SIMD_ENCODE8 != 0) &&
                                         (is_simd_rne8<F, P> || is_simd_e8m0<F, P>);

#if QUARK_SIMD_ENCODE8

/// 16 floats -> 16 codes of F under P, one per 32-bit lane (encode_fp_rne on vectors).
template <fp_format F, conversion_policy P>
QUARK_ALWAYS_INLINE __m512i encode_rne8_x16(__m512 x) noexcept {
  constexpr int M = F.mantissa_bits;
  constexpr unsigned sh = static_cast<unsigned>(23 - M);
  constexpr int emin = F.min_normal_exponent();
  constexpr std::uint32_t min_normal_bits = static_cast<std::uint32_t>(emin + 127) << 23;
  constexpr float magic = exp2f_exact(emin - M + 23);
  constexpr std::uint32_t magic_bits = float_bits(magic);
  constexpr std::uint32_t rebias = static_cast<std::uint32_t>(127 - F.bias) << M;
  constexpr std::uint32_t maxc = F.max_finite_code();
  constexpr std::uint32_t over = [] {
    if constexpr (P.on_overflow == overflow::saturate) {
      return maxc;
    } else if constexpr (F.has_inf()) {
      return F.inf_code();
    } else if constexpr (F.has_nan()) {
      return F.nan_code(false) & F.magnitude_mask();
    } else {
      return maxc;
    }
  }();
  constexpr std::uint32_t nan_pos = nan_result<F, P>(false);
  constexpr std::uint32_t nan_neg = nan_result<F, P>(true);
  const auto set1 = [](std::uint32_t v) { return _mm512_set1_epi32(static_cast<int>(v)); };
  constexpr __mmask16 all = 0xFFFF;  // maskz forms: see simd_encode16.hpp (GCC 12 warnings)

  const __m512i u = _mm512_castps_si512(x);
  const __m512i a = _mm512_and_si512(u, set1(0x7FFFFFFFu));
  const __mmask16 negative = _mm512_cmplt_epi32_mask(u, _mm512_setzero_si512());
  const __mmask16 is_nan = _mm512_cmpgt_epu32_mask(a, set1(0x7F800000u));
  const __mmask16 is_inf = _mm512_cmpeq_epi32_mask(a, set1(0x7F800000u));
  const __mmask16 small = _mm512_cmplt_epu32_mask(a, set1(min_normal_bits));

  // (1) normal results: integer rounding of the bits, then rebias.
  const __m512i an = _mm512_maskz_max_epu32(all, a, set1(min_normal_bits));
  const __m512i lsb = _mm512_and_si512(_mm512_maskz_srli_epi32(all, an, sh), set1(1u));
  const __m512i rounded = _mm512_add_epi32(_mm512_add_epi32(an, set1((1u << (sh - 1u)) - 1u)), lsb);
  const __m512i normal_code =
      _mm512_sub_epi32(_mm512_maskz_srli_epi32(all, rounded, sh), set1(rebias));
  // (2) subnormal results: the exact float add of 2^k rounds to the subnormal quantum.
  const __m512 ax = _mm512_castsi512_ps(_mm512_maskz_mov_epi32(small, a));
  const __m512i sub_code = _mm512_sub_epi32(
      _mm512_castps_si512(_mm512_add_ps(ax, _mm512_set1_ps(magic))), set1(magic_bits));
  __m512i code = _mm512_mask_blend_epi32(small, normal_code, sub_code);
  // (3) overflow, NaN, sign.
  const __mmask16 big = _mm512_cmpgt_epu32_mask(a, set1(0x7F7FFFFFu));
  const __mmask16 overflowed = static_cast<__mmask16>(
      is_inf | (static_cast<__mmask16>(~is_nan) & big) | _mm512_cmpgt_epu32_mask(code, set1(maxc)));
  code = _mm512_mask_blend_epi32(overflowed, code, set1(over));
  __mmask16 signed_lanes = negative;
  if constexpr (F.special == specials::nan_at_negative_zero) {
    signed_lanes = static_cast<__mmask16>(signed_lanes &
                                          _mm512_cmpneq_epi32_mask(code, _mm512_setzero_si512()));
    if constexpr (P.on_overflow != overflow::saturate) {
      code = _mm512_mask_blend_epi32(overflowed, code, _mm512_setzero_si512());
      signed_lanes = static_cast<__mmask16>(signed_lanes | overflowed);
    }
  }
  code = _mm512_mask_or_epi32(code, signed_lanes, code, set1(F.sign_mask()));
  const __m512i nan_code = _mm512_mask_blend_epi32(negative, set1(nan_pos), set1(nan_neg));
  return _mm512_mask_blend_epi32(is_nan, code, nan_code);
}

/// 16 floats -> 16 E8M0 codes under P: encode_fp_generic's zero-free path on vectors. The range
/// check comes first (below 2^-127, negative, or above 2^127: saturate to the nearest end or NaN);
/// in range, the code is the float's exponent field (subnormal inputs, 2^-127 up to 2^-126, have
/// field 0) plus the rounding increment of the mantissa below the implicit bit. With a single
/// significand bit the kept quotient is always odd, so every nearest mode rounds ties up.
template <fp_format F, conversion_policy P>
QUARK_ALWAYS_INLINE __m512i encode_e8m0_x16(__m512 x) noexcept {
  constexpr std::uint32_t min_bits = float_bits(static_cast<float>(exp2i(F.min_normal_exponent())));
  constexpr std::uint32_t max_bits = float_bits(static_cast<float>(exp2i(F.max_normal_exponent())));
  constexpr std::uint32_t maxc = F.max_finite_code();
  constexpr std::uint32_t nan_pos = nan_result<F, P>(false);
  constexpr std::uint32_t nan_neg = nan_result<F, P>(true);
  const auto set1 = [](std::uint32_t v) { return _mm512_set1_epi32(static_cast<int>(v)); };
  constexpr __mmask16 all = 0xFFFF;

  const __m512i u = _mm512_castps_si512(x);
  const __m512i a = _mm512_and_si512(u, set1(0x7FFFFFFFu));
  const __mmask16 negative = _mm512_cmplt_epi32_mask(u, _mm512_setzero_si512());
  const __mmask16 is_nan = _mm512_cmpgt_epu32_mask(a, set1(0x7F800000u));
  const __mmask16 below =
      static_cast<__mmask16>(negative | _mm512_cmplt_epu32_mask(a, set1(min_bits)));
  const __mmask16 above =
      static_cast<__mmask16>(~negative & _mm512_cmpgt_epu32_mask(a, set1(max_bits)));

  const __m512i field = _mm512_maskz_srli_epi32(all, a, 23);
  const __m512i m = _mm512_and_si512(a, set1(0x7FFFFFu));
  const __mmask16 sub = _mm512_cmpeq_epi32_mask(field, _mm512_setzero_si512());
  // Bits below the implicit bit (a subnormal input is normalised by one place).
  const __m512i rem =
      _mm512_mask_and_epi32(m, sub, _mm512_maskz_slli_epi32(all, m, 1), set1(0x7FFFFFu));
  __m512i code = field;
  if constexpr (P.round == rounding::toward_positive) {
    code = _mm512_mask_add_epi32(code, _mm512_cmpneq_epi32_mask(rem, _mm512_setzero_si512()), code,
                                 set1(1u));
  } else if constexpr (P.round == rounding::nearest_even || P.round == rounding::nearest_away ||
                       P.round == rounding::nearest_up) {
    code =
        _mm512_mask_add_epi32(code, _mm512_cmpge_epu32_mask(rem, set1(0x400000u)), code, set1(1u));
  } else {
    static_assert(P.round == rounding::toward_zero || P.round == rounding::toward_negative);
  }
  if constexpr (P.on_overflow == overflow::saturate) {
    code = _mm512_mask_blend_epi32(below, code, _mm512_setzero_si512());
    code = _mm512_mask_blend_epi32(above, code, set1(maxc));
  } else {
    code = _mm512_mask_blend_epi32(static_cast<__mmask16>(below | above), code,
                                   set1(F.nan_code(false)));
  }
  const __m512i nan_code = _mm512_mask_blend_epi32(negative, set1(nan_pos), set1(nan_neg));
  return _mm512_mask_blend_epi32(is_nan, code, nan_code);
}

/// 16 floats -> 16 codes of F under P, one per 32-bit lane.
template <fp_format F, conversion_policy P>
QUARK_ALWAYS_INLINE __m512i encode8_x16(__m512 x) noexcept {
  if constexpr (is_simd_e8m0<F, P>) {
    return encode_e8m0_x16<F, P>(x);
  } else {
    return encode_rne8_x16<F, P>(x);
  }
}

/// 64 floats -> 64 one-byte codes.
template <fp_format F, conversion_policy P>
QUARK_ALWAYS_INLINE __m512i encode8_x64(const float* x) noexcept {
  constexpr __mmask16 all = 0xFFFF;
  const __m128i c0 = _mm512_maskz_cvtepi32_epi8(all, encode8_x16<F, P>(_mm512_loadu_ps(x)));
  const __m128i c1 = _mm512_maskz_cvtepi32_epi8(all, encode8_x16<F, P>(_mm512_loadu_ps(x + 16)));
  const __m128i c2 = _mm512_maskz_cvtepi32_epi8(all, encode8_x16<F, P>(_mm512_loadu_ps(x + 32)));
  const __m128i c3 = _mm512_maskz_cvtepi32_epi8(all, encode8_x16<F, P>(_mm512_loadu_ps(x + 48)));
  const __m256i lo = _mm256_inserti128_si256(_mm256_castsi128_si256(c0), c1, 1);
  const __m256i hi = _mm256_inserti128_si256(_mm256_castsi128_si256(c2), c3, 1);
  return _mm512_maskz_inserti64x4(0xFF, _mm512_castsi256_si512(lo), hi, 1);
}

/// Encodes n floats into one-byte codes of F under P. As encode16_bulk: outputs at or above the
/// streaming threshold are aligned by a scalar head, written with non-temporal stores straight
/// from registers, and the input is prefetched ahead (L2 far, L1 near) as the loop crosses it.
template <fp_format F, conversion_policy P>
inline void encode8_bulk(const float* x, std::uint8_t* y, std::size_t n) noexcept {
  std::size_t i = 0;
  if (n >= streaming_threshold_bytes) {
    const std::size_t mis = reinterpret_cast<std::uintptr_t>(y) % 64u;
    const std::size_t head = mis == 0 ? 0 : 64u - mis;
    for (; i < head; ++i)
      y[i] = static_cast<std::uint8_t>(encode_fp<F, P>(x[i]));
    constexpr std::size_t near = prefetch_l1_distance_bytes / sizeof(float);
    constexpr std::size_t far = prefetch_l2_distance_bytes / sizeof(float);
    for (; i + far + 64 <= n; i += 64) {
      for (std::size_t l = 0; l < 64; l += 16) {
        prefetch_read_l2(x + i + far + l);
        prefetch_read(x + i + near + l);
      }
      _mm512_stream_si512(reinterpret_cast<__m512i*>(y + i), encode8_x64<F, P>(x + i));
    }
    for (; i + 64 <= n; i += 64)
      _mm512_stream_si512(reinterpret_cast<__m512i*>(y + i), encode8_x64<F, P>(x + i));
    stream_fence();
  }
  for (; i + 64 <= n; i += 64)
    _mm512_storeu_si512(reinterpret_cast<void*>(y + i), encode8_x64<F, P>(x + i));
  for (; i + 16 <= n; i += 16) {
    const __m128i c = _mm512_maskz_cvtepi32_epi8(0xFFFF, encode8_x16<F, P>(_mm512_loadu_ps(x + i)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i), c);
  }
  if (i < n) {
    // Tail: masked load and store, so every element goes through the same code.
    const auto rest = static_cast<__mmask16>((1u << (n - i)) - 1u);
    const __m128i c =
        _mm512_maskz_cvtepi32_epi8(0xFFFF, encode8_x16<F, P>(_mm512_maskz_loadu_ps(rest, x + i)));
    _mm_mask_storeu_epi8(y + i, rest, c);
  }
}

#endif

}  // namespace quark::detail
