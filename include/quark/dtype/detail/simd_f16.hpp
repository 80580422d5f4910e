// SPDX-License-Identifier: MIT
// Hardware float32 -> float16 conversion (F16C VCVTPS2PH) for the bulk path. The rounding mode is
// an immediate (nearest-even, exceptions suppressed), so the result does not depend on MXCSR; it
// rounds subnormals and overflows to Inf exactly as IEEE 754, which is quark's `policies::ieee`.
// NaNs are rewritten to quark's canonical NaN so the bulk path gives exactly the scalar bits.
#pragma once

#include <cstddef>
#include <cstdint>

#if defined(__F16C__) && defined(__AVX2__)
#include <immintrin.h>
#define QUARK_HAS_F16C 1
#else
#define QUARK_HAS_F16C 0
#endif

namespace quark::detail {

#if QUARK_HAS_F16C
/// Converts n floats to float16 bits with RNE and IEEE overflow; NaN -> 0x7E00 | sign.
inline void f16c_encode(const float* x, std::uint16_t* y, std::size_t n) noexcept {
  std::size_t i = 0;
  const __m256i abs_mask = _mm256_set1_epi32(0x7FFFFFFF);
  const __m256i inf_bits = _mm256_set1_epi32(0x7F800000);
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    // NaN lanes: canonical quiet NaN with the input's sign.
    const __m256i bits = _mm256_castps_si256(v);
    const __m256i is_nan = _mm256_cmpgt_epi32(_mm256_and_si256(bits, abs_mask), inf_bits);
    const __m256i canon = _mm256_or_si256(
        _mm256_srli_epi32(_mm256_andnot_si256(abs_mask, bits), 16), _mm256_set1_epi32(0x7E00));
    const __m256i fix32 = _mm256_and_si256(is_nan, canon);
    const __m128i fix =
        _mm_packus_epi32(_mm256_castsi256_si128(fix32), _mm256_extracti128_si256(fix32, 1));
    const __m128i nan16 =
        _mm_packs_epi32(_mm256_castsi256_si128(is_nan), _mm256_extracti128_si256(is_nan, 1));
    h = _mm_or_si128(_mm_andnot_si128(nan16, h), fix);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i), h);
  }
  for (; i < n; ++i) {
    const __m128i h = _mm_cvtps_ph(_mm_set_ss(x[i]), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    std::uint16_t r = static_cast<std::uint16_t>(_mm_extract_epi16(h, 0));
    std::uint32_t b;
    __builtin_memcpy(&b, &x[i], 4);
    if ((b & 0x7FFFFFFFu) > 0x7F800000u)
      r = static_cast<std::uint16_t>(((b >> 16) & 0x8000u) | 0x7E00u);
    y[i] = r;
  }
}

/// Converts n float16 bit patterns to float, exactly (NaNs quieted with their payload kept, as
/// decode_fp_fast does).
inline void f16c_decode(const std::uint16_t* x, float* y, std::size_t n) noexcept {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i));
    _mm256_storeu_ps(y + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; ++i) {
    y[i] = _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(x[i])));
  }
}
#endif

}  // namespace quark::detail
