// SPDX-License-Identifier: MIT
// The OCP MX block kernel on float32 bits: x/X rounded onto the element grid (OCP MX v1.0
// section 6.3) without a division, because X = 2^E only moves the grid. For an element of
// binade b (x in [2^b, 2^(b+1))) the element step is 2^(max(b, E + emin) - mbits); the 24-bit
// significand of x is rounded by a right shift to that step, rebuilt as q * step in the element
// domain, saturated to the element's max, then multiplied by X (exact, or Quark's single rounding
// when X is a float32 subnormal).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>

#include <quark/block/block_format.hpp>
#include <quark/block/detail/block_avx512.hpp>
#include <quark/block/detail/block_loop.hpp>
#include <quark/block/shared_scale.hpp>
#include <quark/config.hpp>
#include <quark/core/bit.hpp>
#include <quark/dtype/detail/round_bits.hpp>

namespace quark::detail {

/// Per-block constants of the element loop.
struct mx_block_constants {
  int lo;       ///< biased exponent (float32 field units) of the element's smallest normal step
  int ef;       ///< E + 127: the shared exponent in float32 field units (may be <= 0)
  float scale;  ///< X = 2^E
};

enum class mx_path : std::uint8_t {
  fast,   ///< lo >= 1: float32 subnormal inputs fall below the element's normal range
  exact,  ///< lo <= 0: float32 subnormals are normalised first; Inf/NaN pass through (Quark)
};

/// One element of an MX block on the fast path: lo >= mbits + 2, no Inf/NaN in the block and a
/// rounding mode of rounds_tiny_to_zero_v. `lim` is the element max times X (per sign).
///
/// Steps: (1) field f and significand with the implicit one (a float32 subnormal, f == 0, is
/// then treated as 2^-127-ish: it lies below half of the smallest step 2^(lo - 127 - mbits) and
/// rounds to zero either way); (2) the step exponent t = max(f, lo) - mbits; (3) round the
/// significand by t - f + 23 - mbits bits; (4) q * 2^(t - 127 - mbits), a normal float since
/// t - mbits >= 2; (5) saturate and restore the sign.
template <class Element, rounding R, compat_mode Compat>
QUARK_ALWAYS_INLINE float mx_element_fast(float x, int lo, float lim_pos, float lim_neg) noexcept {
  constexpr mx_element_info el = mx_element_info_v<Element>;
  constexpr int mb = el.mbits;
  const std::uint32_t u = float_bits(x);
  const std::uint32_t sign = u & 0x80000000u;
  const int f = static_cast<int>((u << 1) >> 24);
  const std::uint32_t mant = (u & 0x7FFFFFu) | 0x800000u;
  const int t = f > lo ? f : lo;
  int sh = t - f + 23 - mb;
  sh = sh < 31 ? sh : 31;
  const std::uint32_t q = round_shift<R>(mant, static_cast<std::uint32_t>(sh), sign != 0u);
  float out = static_cast<float>(q) * bits_float(static_cast<std::uint32_t>(t - mb) << 23);
  if constexpr (el.max_pos == el.max_neg) {
    out = out < lim_pos ? out : lim_pos;
  } else {
    const float lim = sign != 0u ? lim_neg : lim_pos;
    out = out < lim ? out : lim;
  }
  std::uint32_t s = sign;
  if constexpr (el.is_integer || Compat == compat_mode::quark)
    s = q != 0u ? sign : 0u;
  return bits_float(float_bits(out) | s);
}

/// One element of an MX block. `Element` gives emin/mbits/max; R is the element rounding.
template <class Element, rounding R, mx_path Path, compat_mode Compat>
QUARK_ALWAYS_INLINE float mx_element(float x, const mx_block_constants& c) noexcept {
  constexpr mx_element_info el = mx_element_info_v<Element>;
  constexpr int mb = el.mbits;
  const std::uint32_t u = float_bits(x);
  const std::uint32_t sign = u & 0x80000000u;
  const std::uint32_t a = u ^ sign;
  const int f = static_cast<int>(a >> 23);
  // 1. Significand and binade of |x|: value = mant * 2^(e - 150).
  std::uint32_t mant = (a & 0x7FFFFFu) | (f != 0 ? 0x800000u : 0u);
  int e = f > 1 ? f : 1;
  if constexpr (Path == mx_path::exact) {
    if (f == 0 && mant != 0u) {  // float32 subnormal: put the leading one at bit 23
      const int lz = std::countl_zero(mant) - 8;
      mant <<= lz;
      e = 1 - lz;
    }
  }
  // 2. The element step is 2^(t - mbits) in field units; t >= e, so the shift is >= 23 - mbits.
  const int t = e > c.lo ? e : c.lo;
  int sh = t - e + 23 - mb;
  sh = sh < 31 ? sh : 31;
  const std::uint32_t q = round_shift<R>(mant, static_cast<std::uint32_t>(sh), sign != 0u);
  // 3. Element-domain value q * 2^(t - ef - mbits); t - ef lies in [emin, emax + 1].
  const float unit = bits_float(static_cast<std::uint32_t>(t - c.ef - mb + 127) << 23);
  float v = static_cast<float>(q) * unit;
  // 4. Saturate to the element's max (MXINT8 is asymmetric: -2.0 exists, +2.0 does not).
  if constexpr (el.max_pos == el.max_neg) {
    v = v < el.max_pos ? v : el.max_pos;
  } else {
    const float lim = sign != 0u ? el.max_neg : el.max_pos;
    v = v < lim ? v : lim;
  }
  // 5. Back to the tensor's scale and sign. Integer zeros are unsigned; Quark also drops the
  //    sign of floating-point elements that round to zero.
  float out = v * c.scale;
  std::uint32_t s = sign;
  if constexpr (el.is_integer || Compat == compat_mode::quark)
    s = q != 0u ? sign : 0u;
  out = bits_float(float_bits(out) | s);
  if constexpr (Path == mx_path::exact) {
    if (a >= 0x7F800000u)
      out = x;  // only reachable in Quark mode: Inf/NaN pass through
  }
  return out;
}

/// The shared exponent of one block as Ef = E + 127, or std::nullopt-like INT_MIN for a NaN
/// block (standard mode with an Inf/NaN element). Also reports whether Inf/NaN are present.
template <class Element, class Stride>
QUARK_ALWAYS_INLINE int mx_block_exponent(const float* in, std::size_t n, Stride stride,
                                          e8m0_scale_mode mode, compat_mode compat,
                                          bool& has_special) noexcept {
  constexpr mx_element_info el = mx_element_info_v<Element>;
  std::uint32_t amax = max_abs_bits(in, n, stride);
  has_special = amax >= 0x7F800000u;
  if (has_special) {
    if (compat == compat_mode::standard)
      return std::numeric_limits<int>::min();
    amax = max_finite_abs_bits(in, n, stride);
  }
  return mx_shared_exponent(amax, el, mode, compat) + 127;
}

/// Fake-quantizes one block given its biased exponent ef (see mx_block_exponent).
template <class Element, rounding R, compat_mode Compat, class Stride>
QUARK_ALWAYS_INLINE void mx_block_apply(const float* in, float* out, std::size_t n, Stride stride,
                                        int ef, bool has_special) noexcept {
  constexpr mx_element_info el = mx_element_info_v<Element>;
  if (ef == std::numeric_limits<int>::min()) {  // OCP: a NaN scale makes every element NaN
    for (std::size_t i = 0; i < n; ++i)
      out[i * stride] = std::numeric_limits<float>::quiet_NaN();
    return;
  }
  const mx_block_constants c{ef + el.emin, ef, exp2f_exact(ef - 127)};
  if (rounds_tiny_to_zero_v<R> && c.lo >= el.mbits + 2 && !has_special) {
    const float lim_pos = el.max_pos * c.scale;  // exact: X is a normal power of two here
    const float lim_neg = el.max_neg * c.scale;
    for (std::size_t i = 0; i < n; ++i) {
      out[i * stride] = mx_element_fast<Element, R, Compat>(in[i * stride], c.lo, lim_pos, lim_neg);
    }
  } else {
    for (std::size_t i = 0; i < n; ++i) {
      out[i * stride] = mx_element<Element, R, mx_path::exact, Compat>(in[i * stride], c);
    }
  }
}

#if QUARK_BLOCK_AVX512
QUARK_AVX512_WARNINGS_PUSH

/// mx_chunk for blocks of 32: k blocks from src into dst (64-byte aligned); `left` is the number
/// of input floats from src to the end of the input (prefetches stay inside it).
template <class Element, rounding R, compat_mode Compat>
QUARK_TARGET_AVX512 void mx_chunk32_avx512(const float* src, float* dst, std::size_t k,
                                           e8m0_scale_mode mode, std::size_t left) noexcept {
  constexpr mx_element_info el = mx_element_info_v<Element>;
  const __m512i abs_mask = _mm512_set1_epi32(0x7FFFFFFF);
  for (std::size_t j = 0; j < k; ++j) {
    const float* p = src + 32 * j;
    prefetch_if_before(p, prefetch_distance_floats, left - 32 * j);
    prefetch_if_before(p, prefetch_distance_floats + 16, left - 32 * j);
    const __m512i u0 = _mm512_loadu_si512(p);
    const __m512i u1 = _mm512_loadu_si512(p + 16);
    const __m512i m = v_group_max<4>(
        _mm512_max_epu32(_mm512_and_si512(u0, abs_mask), _mm512_and_si512(u1, abs_mask)));
    const auto amax = static_cast<std::uint32_t>(_mm_cvtsi128_si32(_mm512_castsi512_si128(m)));
    // The shared exponent exactly as mx_block_exponent computes it for a block without Inf/NaN.
    const int ef = amax >= 0x7F800000u ? std::numeric_limits<int>::min()
                                       : mx_shared_exponent(amax, el, mode, Compat) + 127;
    if (amax >= 0x7F800000u || ef + el.emin < el.mbits + 2) {
      bool special = false;
      const int e = mx_block_exponent<Element>(p, 32, unit_stride{}, mode, Compat, special);
      mx_block_apply<Element, R, Compat>(p, dst + 32 * j, 32, unit_stride{}, e, special);
      continue;
    }
    const int lo = ef + el.emin;
    const __m512 x = _mm512_castsi512_ps(_mm512_set1_epi32(ef << 23));
    const __m512 lim_pos = _mm512_mul_ps(_mm512_set1_ps(el.max_pos), x);
    const __m512 lim_neg = _mm512_mul_ps(_mm512_set1_ps(el.max_neg), x);
    if constexpr (v_embedded_rounding_v<R> >= 0) {
      const auto fmax = static_cast<int>(amax >> 23);
      if ((fmax > lo ? fmax : lo) + 23 - el.mbits <= 254) {
        const __m512i lo_field = _mm512_set1_epi32(lo << 23);
        _mm512_store_ps(dst + 32 * j,
                        v_mx_element_fp<Element, R, Compat>(u0, lo_field, lim_pos, lim_neg));
        _mm512_store_ps(dst + 32 * j + 16,
                        v_mx_element_fp<Element, R, Compat>(u1, lo_field, lim_pos, lim_neg));
        continue;
      }
    }
    const __m512i lo_v = _mm512_set1_epi32(lo);
    _mm512_store_ps(dst + 32 * j, v_mx_element<Element, R, Compat>(u0, lo_v, lim_pos, lim_neg));
    _mm512_store_ps(dst + 32 * j + 16,
                    v_mx_element<Element, R, Compat>(u1, lo_v, lim_pos, lim_neg));
  }
}

QUARK_AVX512_WARNINGS_POP
#endif

/// k whole contiguous blocks of `bs` floats from src into dst (an L1 chunk buffer). The block
/// constants are first spread to per-element arrays so that the element loop is one flat loop
/// that vectorises at any vector width; blocks off the fast path are redone exactly afterwards.
template <class Element, rounding R, compat_mode Compat, class BS>
QUARK_ALWAYS_INLINE void mx_chunk(const float* src, float* dst, std::size_t k, BS bs,
                                  e8m0_scale_mode mode) noexcept {
  constexpr mx_element_info el = mx_element_info_v<Element>;
  alignas(64) int lo_e[block_chunk_floats];
  alignas(64) float lp_e[block_chunk_floats];
  alignas(64) float ln_e[el.max_pos == el.max_neg ? 1 : block_chunk_floats];
  alignas(64) int ef_b[block_chunk_floats];
  alignas(64) unsigned char slow_b[block_chunk_floats];
  bool any_slow = false;
  // 1. Per block: the shared exponent and whether the fast element path applies.
  for (std::size_t j = 0; j < k; ++j) {
    bool special = false;
    const int ef =
        mx_block_exponent<Element>(src + j * bs, bs, unit_stride{}, mode, Compat, special);
    const bool fast = rounds_tiny_to_zero_v<R> && ef != std::numeric_limits<int>::min() &&
                      !special && ef + el.emin >= el.mbits + 2;
    const int lo = fast ? ef + el.emin : 255;
    const float x = fast ? exp2f_exact(ef - 127) : 1.0f;
    for (std::size_t i = 0; i < bs; ++i) {
      lo_e[j * bs + i] = lo;
      lp_e[j * bs + i] = el.max_pos * x;
      if constexpr (el.max_pos != el.max_neg)
        ln_e[j * bs + i] = el.max_neg * x;
    }
    ef_b[j] = ef;
    slow_b[j] = static_cast<unsigned char>(fast ? 0 : (special ? 2 : 1));
    any_slow = any_slow || !fast;
  }
  // 2. Every element on the fast path.
  const std::size_t n = k * bs;
  for (std::size_t i = 0; i < n; ++i) {
    if constexpr (el.max_pos == el.max_neg) {
      dst[i] = mx_element_fast<Element, R, Compat>(src[i], lo_e[i], lp_e[i], lp_e[i]);
    } else {
      dst[i] = mx_element_fast<Element, R, Compat>(src[i], lo_e[i], lp_e[i], ln_e[i]);
    }
  }
  // 3. The other blocks (NaN blocks, tiny exponents, Inf/NaN in Quark mode, directed rounding).
  if (any_slow) {
    for (std::size_t j = 0; j < k; ++j) {
      if (slow_b[j] != 0) {
        mx_block_apply<Element, R, Compat>(src + j * bs, dst + j * bs, bs, unit_stride{}, ef_b[j],
                                           slow_b[j] == 2);
      }
    }
  }
}

/// Fake-quantizes a whole tensor: blocks of `block_size` along the layout's axis. `Simd` false
/// keeps to the portable chunk kernel (the tests compare the two).
template <class Element, rounding R, compat_mode Compat, bool Simd = true>
QUARK_BLOCK_KERNEL void mx_fake_quantize_impl(const float* in, float* out, const block_layout& l,
                                              std::size_t block_size,
                                              e8m0_scale_mode mode) noexcept {
  const bool simd =
      Simd && avx512_rounding_v<R> && block_size == 32 && l.inner == 1 && block_avx512_usable();
  const std::size_t total = l.outer * l.length * l.inner;
  static_cast<void>(total);
  for_each_block_chunked(
      in, out, l, block_size,
      [&](std::size_t off, std::size_t k, float* dst) {
#if QUARK_BLOCK_AVX512
        if constexpr (avx512_rounding_v<R>) {
          if (simd) {
            mx_chunk32_avx512<Element, R, Compat>(in + off, dst, k, mode, total - off);
            return;
          }
        }
#endif
        dispatch_block_size(
            block_size, [&](auto bs) { mx_chunk<Element, R, Compat>(in + off, dst, k, bs, mode); });
      },
      [&](std::size_t off, std::size_t n, auto stride) {
        bool special = false;
        const int ef = mx_block_exponent<Element>(in + off, n, stride, mode, Compat, special);
        mx_block_apply<Element, R, Compat>(in + off, out + off, n, stride, ef, special);
      },
      simd);
}

/// Runtime rounding -> compile-time rounding.
template <class Fn>
void dispatch_rounding(rounding r, Fn&& fn) {
  switch (r) {
    case rounding::nearest_even:
      fn(std::integral_constant<rounding, rounding::nearest_even>{});
      break;
    case rounding::nearest_away:
      fn(std::integral_constant<rounding, rounding::nearest_away>{});
      break;
    case rounding::nearest_up:
      fn(std::integral_constant<rounding, rounding::nearest_up>{});
      break;
    case rounding::toward_zero:
      fn(std::integral_constant<rounding, rounding::toward_zero>{});
      break;
    case rounding::toward_positive:
      fn(std::integral_constant<rounding, rounding::toward_positive>{});
      break;
    case rounding::toward_negative:
      fn(std::integral_constant<rounding, rounding::toward_negative>{});
      break;
    case rounding::stochastic:
      QUARK_THROW(invalid_argument("quark.block.rounding",
                                   "stochastic rounding is not offered for block formats"));
  }
}

}  // namespace quark::detail
