// SPDX-License-Identifier: MIT
// MX4 / MX6 / MX9: block floating point with shared micro-exponents (Rouhani et al., "Shared
// Microexponents", arXiv 2302.08007), as AMD Quark computes them (BFPQuantizeDequantize with
// bfp_method "to_bfp_prime"; quark-spec section 1.9). A block of 16 shares the largest biased
// float32 exponent field S; each sub-block of 2 stores a 1-bit offset d = min(S - its own largest
// field, 1); each element keeps a sign and m = 2 / 4 / 7 magnitude bits in quanta of
// 2^(S - d - 127 - m + 1). float32 subnormals flush to zero and an Inf/NaN element makes the
// whole block NaN. Quark lets a magnitude round up to 2^m quanta (one more than m bits hold);
// compat_mode::standard clamps it to 2^m - 1, compat_mode::quark keeps Quark's values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>

#include <quark/block/block_format.hpp>
#include <quark/block/detail/block_loop.hpp>
#include <quark/block/detail/mx_kernel.hpp>
#include <quark/block/storage.hpp>
#include <quark/dtype/detail/round_bits.hpp>

namespace quark {

/// MX4: 16 x (sign + 2 bits) + 8-bit exponent + 8 x 1-bit micro-exponents = 4 bits/element.
using mx4 = block_format<sign_magnitude<2>, float8_e8m0fnu, 16, sub_block{2, 1}>;
/// MX6: sign + 4 magnitude bits per element: 6 bits/element.
using mx6 = block_format<sign_magnitude<4>, float8_e8m0fnu, 16, sub_block{2, 1}>;
/// MX9: sign + 7 magnitude bits per element: 9 bits/element.
using mx9 = block_format<sign_magnitude<7>, float8_e8m0fnu, 16, sub_block{2, 1}>;

/// Options of the MX4/6/9 kernels (Quark's presets round half to even).
///
///     quark::micro_exponent_options o;
///     o.compat = quark::compat_mode::quark;  // no clamp: MX9 turns 127.9 into 128
struct micro_exponent_options {
  rounding element_rounding = rounding::nearest_even;  ///< any mode but stochastic
  compat_mode compat = compat_mode::standard;
};

namespace detail {

/// One element against its sub-block base field b (= S - d): sign * q * 2^(b - 127 - m + 1).
template <rounding R>
QUARK_ALWAYS_INLINE float micro_element(float x, int b, int m, std::uint32_t qmax,
                                        float quantum) noexcept {
  const std::uint32_t u = float_bits(x);
  const std::uint32_t sign = u & 0x80000000u;
  const std::uint32_t a = u ^ sign;
  const int f = static_cast<int>(a >> 23);
  const std::uint32_t mant = f != 0 ? (a & 0x7FFFFFu) | 0x800000u : 0u;  // subnormals flush
  int sh = b - f + 24 - m;  // b >= f, so sh >= 24 - m >= 2
  sh = sh < 31 ? sh : 31;
  std::uint32_t q = round_shift<R>(mant, static_cast<std::uint32_t>(sh), sign != 0u);
  q = q < qmax ? q : qmax;
  return bits_float(float_bits(static_cast<float>(q) * quantum) | sign);
}

/// Fake-quantizes one block.
template <rounding R, class Stride>
QUARK_ALWAYS_INLINE void micro_block(const float* in, float* out, std::size_t n, Stride stride,
                                     std::size_t sub, int max_shift, int m,
                                     std::uint32_t qmax) noexcept {
  // 1. Shared field S over the whole block, Inf/NaN included: 0xFF makes the block NaN.
  const int s = static_cast<int>(max_abs_bits(in, n, stride) >> 23);
  if (s == 0xFF) {
    for (std::size_t i = 0; i < n; ++i)
      out[i * stride] = std::numeric_limits<float>::quiet_NaN();
    return;
  }
  // 2. Sub-blocks: offset d = min(S - sub max, 2^shift_bits - 1).
  for (std::size_t j = 0; j < n; j += sub) {
    const std::size_t k = n - j < sub ? n - j : sub;
    int fm = 0;
    for (std::size_t i = 0; i < k; ++i) {
      const int f = static_cast<int>((float_bits(in[(j + i) * stride]) >> 23) & 0xFFu);
      fm = f > fm ? f : fm;
    }
    const int d = s - fm < max_shift ? s - fm : max_shift;
    const int b = s - d;
    const float quantum = exp2f_exact(b - 127 - m + 1);
    for (std::size_t i = 0; i < k; ++i) {
      out[(j + i) * stride] = micro_element<R>(in[(j + i) * stride], b, m, qmax, quantum);
    }
  }
}

/// k whole contiguous blocks with pairs and 1 shift bit into dst (an L1 chunk buffer). Fast
/// blocks have S >= m + 2, so every base b >= m + 1: quanta are normal floats and float32
/// subnormals (flushed by definition) lie below half a quantum, so giving them the implicit one
/// still rounds them to zero. Other blocks are redone by micro_block.
template <rounding R, class BS>
QUARK_ALWAYS_INLINE void micro_chunk_pairs(const float* src, float* dst, std::size_t k, BS bs,
                                           int m, std::uint32_t qmax) noexcept {
  alignas(64) std::uint64_t s_p[block_chunk_floats / 2];
  alignas(64) std::uint32_t base[block_chunk_floats];
  alignas(64) unsigned char slow_b[block_chunk_floats];
  bool any_slow = false;
  // 1. Per block: S, spread to every pair of the block.
  for (std::size_t j = 0; j < k; ++j) {
    const int s = static_cast<int>(max_abs_bits(src + j * bs, bs, unit_stride{}) >> 23);
    const bool fast = rounds_tiny_to_zero_v<R> && s != 0xFF && s >= m + 2;
    for (std::size_t i = 0; i < bs / 2; ++i) {
      s_p[j * (bs / 2) + i] = static_cast<std::uint64_t>(fast ? s : 254);
    }
    slow_b[j] = fast ? 0 : 1;
    any_slow = any_slow || !fast;
  }
  // 2. Per pair, on 64-bit words (two floats): b = S - min(S - pair max, 1) for both halves.
  const std::size_t n = k * bs;
  for (std::size_t p = 0; p < n / 2; ++p) {
    std::uint64_t w = 0;
    std::memcpy(&w, src + 2 * p, sizeof w);
    const std::uint64_t f0 = (w >> 23) & 0xFFu;
    const std::uint64_t f1 = (w >> 55) & 0xFFu;
    const std::uint64_t fm = f0 > f1 ? f0 : f1;
    const std::uint64_t s = s_p[p];
    const std::uint64_t b = s - (s > fm ? 1u : 0u);
    const std::uint64_t bb = b | (b << 32);
    std::memcpy(base + 2 * p, &bb, sizeof bb);
  }
  // 3. Elements.
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t u = float_bits(src[i]);
    const std::uint32_t sign = u & 0x80000000u;
    const int f = static_cast<int>((u << 1) >> 24);
    const std::uint32_t mant = (u & 0x7FFFFFu) | 0x800000u;
    const int b = static_cast<int>(base[i]);
    int sh = b - f + 24 - m;
    sh = sh < 31 ? sh : 31;
    std::uint32_t q = round_shift<R>(mant, static_cast<std::uint32_t>(sh), sign != 0u);
    q = q < qmax ? q : qmax;
    const float quantum = bits_float(static_cast<std::uint32_t>(b - m + 1) << 23);
    dst[i] = bits_float(float_bits(static_cast<float>(q) * quantum) | sign);
  }
  if (any_slow) {
    for (std::size_t j = 0; j < k; ++j) {
      if (slow_b[j] != 0)
        micro_block<R>(src + j * bs, dst + j * bs, bs, unit_stride{}, 2, 1, m, qmax);
    }
  }
}

/// `Simd` false keeps to the portable chunk kernel (the tests compare the two).
template <rounding R, bool Simd = true>
QUARK_BLOCK_KERNEL void micro_fake_quantize_impl(const float* in, float* out, const block_layout& l,
                                                 std::size_t block_size, std::size_t sub,
                                                 int shift_bits, int m,
                                                 compat_mode compat) noexcept {
  const int max_shift = (1 << shift_bits) - 1;
  const std::uint32_t qmax = (std::uint32_t{1} << m) - (compat == compat_mode::standard ? 1u : 0u);
  const bool pairs = sub == 2 && shift_bits == 1 && block_size % 2 == 0;
  const bool simd = Simd && pairs && avx512_rounding_v<R> && block_size == 16 && l.inner == 1 &&
                    block_avx512_usable();
  const std::size_t total = l.outer * l.length * l.inner;
  static_cast<void>(total);
  for_each_block_chunked(
      in, out, l, block_size,
      [&](std::size_t off, std::size_t k, float* dst) {
#if QUARK_BLOCK_AVX512
        if constexpr (avx512_rounding_v<R>) {
          if (simd) {
            alignas(64) unsigned char slow[block_chunk_floats];
            if (micro_chunk16_avx512<R>(in + off, dst, k, m, qmax, slow, total - off)) {
              for (std::size_t j = 0; j < k; ++j) {
                if (slow[j] != 0)
                  micro_block<R>(in + off + 16 * j, dst + 16 * j, 16, unit_stride{}, 2, 1, m, qmax);
              }
            }
            return;
          }
        }
#endif
        dispatch_block_size(block_size, [&](auto bs) {
          if (pairs) {
            micro_chunk_pairs<R>(in + off, dst, k, bs, m, qmax);
          } else {
            for (std::size_t j = 0; j < k; ++j) {
              micro_block<R>(in + off + j * bs, dst + j * bs, bs, unit_stride{}, sub, max_shift, m,
                             qmax);
            }
          }
        });
      },
      [&](std::size_t off, std::size_t n, auto stride) {
        micro_block<R>(in + off, out + off, n, stride, sub, max_shift, m, qmax);
      },
      simd);
}

}  // namespace detail

/// Fake-quantizes an N-d row-major tensor with shared-micro-exponent blocks of `block_size`
/// along `axis`: sub-blocks of `sub_block_size` (counted from each block's start; the last may
/// be partial) with `shift_bits` (0..7) bits of offset, `magnitude_bits` (1..22; Quark's
/// bit_width - 9) per element. No allocation. Throws quark::invalid_argument on bad arguments.
///
///     std::size_t shape[] = {32};
///     quark::micro_exponent_fake_quantize(x, y, shape, 0, 16, 2, 1, 7);  // MX9
inline void micro_exponent_fake_quantize(std::span<const float> in, std::span<float> out,
                                         std::span<const std::size_t> shape, std::size_t axis,
                                         std::size_t block_size, std::size_t sub_block_size,
                                         int shift_bits, int magnitude_bits,
                                         const micro_exponent_options& opt = {}) {
  if (block_size == 0) {
    QUARK_THROW(invalid_argument("quark.block.block_size", "block size must be positive"));
  }
  if (sub_block_size == 0) {
    QUARK_THROW(invalid_argument("quark.block.sub_block_size", "sub-block size must be positive"));
  }
  if (shift_bits < 0 || shift_bits > 7) {
    QUARK_THROW(invalid_argument("quark.block.sub_block_shift_bits", "shift bits must be 0..7"));
  }
  if (magnitude_bits < 1 || magnitude_bits > 22) {
    QUARK_THROW(invalid_argument("quark.block.bit_width",
                                 "magnitude bits must be 1..22 (bit_width 10..31)"));
  }
  if (out.size() != in.size()) {
    QUARK_THROW(invalid_argument("quark.block.shape", "input and output sizes differ"));
  }
  const detail::block_layout l = detail::make_block_layout(shape, axis, in.size());
  detail::dispatch_rounding(opt.element_rounding, [&](auto r) {
    detail::micro_fake_quantize_impl<decltype(r)::value>(in.data(), out.data(), l, block_size,
                                                         sub_block_size, shift_bits, magnitude_bits,
                                                         opt.compat);
  });
}

/// Fake-quantizes a 1-D sequence in blocks of B (the last block may be partial).
///
///     quark::fake_quantize<quark::mx9>(std::span<const float>(x), std::span(y));
template <block_format_of<block_family::micro_exponent> B>
void fake_quantize(std::span<const float> in, std::span<float> out,
                   const micro_exponent_options& opt = {}) {
  using tr = block_traits<B>;
  const std::size_t shape[1] = {in.size()};
  micro_exponent_fake_quantize(in, out, shape, 0, static_cast<std::size_t>(tr::block_size),
                               static_cast<std::size_t>(tr::sub_block_size),
                               tr::sub_block_shift_bits, tr::element_type::magnitude_bits, opt);
}

/// Fake-quantizes an N-d row-major tensor with blocks of B along `axis`.
template <block_format_of<block_family::micro_exponent> B>
void fake_quantize(std::span<const float> in, std::span<float> out,
                   std::span<const std::size_t> shape, std::size_t axis,
                   const micro_exponent_options& opt = {}) {
  using tr = block_traits<B>;
  micro_exponent_fake_quantize(in, out, shape, axis, static_cast<std::size_t>(tr::block_size),
                               static_cast<std::size_t>(tr::sub_block_size),
                               tr::sub_block_shift_bits, tr::element_type::magnitude_bits, opt);
}

/// Quantizes rows x row_length floats into packed storage (layout in storage.hpp): scale byte
/// S (0xFF for a NaN block), one offset per sub-block, sign-magnitude elements. Storage follows
/// the clamped format; compat_mode::quark throws ("quark.block.storage_compat").
///
///     auto t = quark::make_block_tensor<quark::mx6>(x, 16);
template <block_format_of<block_family::micro_exponent> B>
void quantize(std::span<const float> in, std::size_t row_length, block_buffers out,
              const micro_exponent_options& opt = {}) {
  using tr = block_traits<B>;
  constexpr auto bs = static_cast<std::size_t>(tr::block_size);
  constexpr auto ss = static_cast<std::size_t>(tr::sub_block_size);
  constexpr int m = tr::element_type::magnitude_bits;
  constexpr int max_shift = (1 << tr::sub_block_shift_bits) - 1;
  if (opt.compat != compat_mode::standard) {
    QUARK_THROW(invalid_argument("quark.block.storage_compat",
                                 "packed MX4/6/9 storage is clamped: use compat_mode::standard"));
  }
  const std::size_t rows = row_length == 0 ? 0 : in.size() / row_length;
  const block_storage_layout l = block_storage_layout_for<B>(rows, row_length);
  detail::check_buffers(l, in.size(), out.elements.size(), out.scales.size(),
                        out.sub_shifts.size());
  for (std::size_t i = 0; i < l.element_bytes; ++i)
    out.elements[i] = 0;
  for (std::size_t i = 0; i < l.sub_shift_bytes; ++i)
    out.sub_shifts[i] = 0;
  float tmp[bs];
  for (std::size_t row = 0; row < rows; ++row) {
    for (std::size_t b = 0; b < l.blocks_per_row; ++b) {
      // 1. Fake-quantize the block; S and the offsets are recomputed from the inputs.
      const std::size_t off = row * row_length + b * bs;
      const std::size_t n = row_length - b * bs < bs ? row_length - b * bs : bs;
      const std::size_t shape[1] = {n};
      micro_exponent_fake_quantize(in.subspan(off, n), std::span<float>(tmp, n), shape, 0, bs, ss,
                                   tr::sub_block_shift_bits, m, opt);
      const int s =
          static_cast<int>(detail::max_abs_bits(in.data() + off, n, detail::unit_stride{}) >> 23);
      out.scales[row * l.blocks_per_row + b] = static_cast<std::uint8_t>(s);
      if (s == 0xFF)
        continue;
      // 2. Per sub-block: the offset code and the sign-magnitude element codes.
      for (std::size_t j = 0; j < n; j += ss) {
        const std::size_t k = n - j < ss ? n - j : ss;
        const int fm = static_cast<int>(
            detail::max_abs_bits(in.data() + off + j, k, detail::unit_stride{}) >> 23);
        const int d = s - fm < max_shift ? s - fm : max_shift;
        const std::size_t sub_index = row * l.sub_blocks_per_row + (b * bs + j) / ss;
        detail::put_code(out.sub_shifts, sub_index, tr::sub_block_shift_bits,
                         static_cast<std::uint32_t>(d));
        for (std::size_t i = j; i < j + k; ++i)
          detail::put_sign_magnitude(out.elements, off + i, m, s - d, tmp[i]);
      }
    }
  }
}

/// Dequantizes packed MX4/6/9 storage (layout in storage.hpp) to rows x row_length floats.
template <block_format_of<block_family::micro_exponent> B>
void dequantize(block_const_buffers in, std::size_t row_length, std::span<float> out) {
  using tr = block_traits<B>;
  using elem = typename tr::element_type;
  constexpr auto bs = static_cast<std::size_t>(tr::block_size);
  constexpr auto ss = static_cast<std::size_t>(tr::sub_block_size);
  constexpr int m = elem::magnitude_bits;
  const std::size_t rows = row_length == 0 ? 0 : out.size() / row_length;
  const block_storage_layout l = block_storage_layout_for<B>(rows, row_length);
  detail::check_buffers(l, out.size(), in.elements.size(), in.scales.size(), in.sub_shifts.size());
  for (std::size_t row = 0; row < rows; ++row) {
    for (std::size_t i = 0; i < row_length; ++i) {
      const int s = in.scales[row * l.blocks_per_row + i / bs];
      const std::size_t idx = row * row_length + i;
      const auto d = static_cast<int>(detail::get_code(
          in.sub_shifts, row * l.sub_blocks_per_row + i / ss, tr::sub_block_shift_bits));
      out[idx] = detail::get_sign_magnitude(in.elements, idx, m, s == 0xFF ? 0xFF : s - d);
    }
  }
}

/// Quantizes rows x row_length floats into an owning packed MX4/6/9 tensor.
template <block_format_of<block_family::micro_exponent> B>
block_tensor<B> make_block_tensor(std::span<const float> in, std::size_t row_length,
                                  const micro_exponent_options& opt = {}) {
  const std::size_t rows = row_length == 0 ? 0 : in.size() / row_length;
  block_tensor<B> t(block_storage_layout_for<B>(rows, row_length));
  quantize<B>(in, row_length, t.buffers(), opt);
  return t;
}

}  // namespace quark
