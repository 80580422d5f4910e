// SPDX-License-Identifier: MIT
// Hardware float16 -> float32 conversion (F16C VCVTPH2PS) for the bulk decode path: exact, NaNs
// quieted with their payload kept. (The bulk encoders are in simd_encode16.hpp.)
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
