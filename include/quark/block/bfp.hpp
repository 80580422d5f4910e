// SPDX-License-Identifier: MIT
// Block floating point as AMD Quark defines it (BFPQuantizeDequantize, bfp_method "to_bfp";
// quark-spec section 1.8). A block of 8 floats shares the largest biased float32 exponent field S
// (E = S - 127; Inf/NaN fields count as 0); each element keeps a sign and m = 7 magnitude bits in
// units of the quantum 2^(E - m + 1), so the block max lands on 64..127 quanta and rounding to 128
// clamps back to 127. Inf/NaN elements pass through. Options: three rounding modes (Quark's
// 0 = half away, 1 = half up, 2 = half even), rounding the input to bfloat16 first, and Quark's
// "compiler" variant (int8 grid [-128, 127]; the shared exponent is bumped once when an element
// rounds outside it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>

#include <quark/block/block_format.hpp>
#include <quark/block/detail/block_loop.hpp>
#include <quark/block/detail/mx_kernel.hpp>
#include <quark/block/shared_scale.hpp>
#include <quark/block/storage.hpp>
#include <quark/dtype/convert.hpp>
#include <quark/dtype/detail/round_bits.hpp>

namespace quark {

/// BFP16: 8 elements of sign + 7-bit magnitude share an 8-bit exponent: 9 bits/element.
using bfp16 = block_format<sign_magnitude<7>, float8_e8m0fnu, 8>;

/// Which of Quark's two BFP kernels to follow.
enum class bfp_variant : std::uint8_t {
  standard,  ///< sign-magnitude, clamp to 2^m - 1 quanta (BFPCPUKernel)
  compiler,  ///< int8 grid [-2^m, 2^m - 1]; bump the exponent once on overflow
};

/// What the kernel sees of the input.
enum class bfp_input : std::uint8_t {
  float32,         ///< the values as given
  bfloat16_first,  ///< each value rounded to bfloat16 (RNE) first (convert_to_bfloat_before_bfp)
};

/// Options of the BFP kernels. The default rounding is Quark's op default (half away from zero);
/// Quark's legacy BFP16 preset uses rounding::nearest_even.
///
///     quark::bfp_options o;
///     o.element_rounding = quark::rounding::nearest_even;
struct bfp_options {
  rounding element_rounding = rounding::nearest_away;  ///< any mode but stochastic
  bfp_input input = bfp_input::float32;
  bfp_variant variant = bfp_variant::standard;
};

namespace detail {

template <bfp_input In>
QUARK_ALWAYS_INLINE float bfp_load(float x) noexcept {
  if constexpr (In == bfp_input::bfloat16_first) {
    return to_float(convert<bfloat16, policies::ieee>(x));
  } else {
    return x;
  }
}

/// Rounded magnitude (in quanta of 2^(s - 127 - m + 1)) of x against block field s.
template <rounding R>
QUARK_ALWAYS_INLINE std::uint32_t bfp_quanta(std::uint32_t a, bool negative, int s,
                                             int m) noexcept {
  const int f = static_cast<int>(a >> 23);
  const std::uint32_t mant = (a & 0x7FFFFFu) | (f != 0 ? 0x800000u : 0u);
  const int e = f > 1 ? f : 1;
  int sh = s - e + 24 - m;  // >= 1 because s >= e or (s == 0, e == 1, m <= 22)
  sh = sh < 31 ? sh : 31;
  return round_shift<R>(mant, static_cast<std::uint32_t>(sh), negative);
}

/// Fake-quantizes one BFP block.
template <rounding R, bfp_input In, bfp_variant V, class Stride>
QUARK_ALWAYS_INLINE void bfp_block(const float* in, float* out, std::size_t n, Stride stride,
                                   int m) noexcept {
  // 1. Shared field S: the largest finite exponent field (Inf/NaN count as 0). One max pass;
  //    a second, finite-only pass runs only for blocks that hold Inf or NaN.
  std::uint32_t amax = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t a = float_bits(bfp_load<In>(in[i * stride])) & 0x7FFFFFFFu;
    amax = a > amax ? a : amax;
  }
  const bool special = amax >= 0x7F800000u;
  if (special) {
    amax = 0;
    for (std::size_t i = 0; i < n; ++i) {
      std::uint32_t a = float_bits(bfp_load<In>(in[i * stride])) & 0x7FFFFFFFu;
      a = a >= 0x7F800000u ? 0u : a;
      amax = a > amax ? a : amax;
    }
  }
  int s = static_cast<int>(amax >> 23);
  const std::uint32_t qmax = (std::uint32_t{1} << m) - 1u;
  // 2. Compiler variant: one exponent bump if an element rounds outside [-2^m, 2^m - 1].
  if constexpr (V == bfp_variant::compiler) {
    bool overflow = false;
    for (std::size_t i = 0; i < n; ++i) {
      const std::uint32_t u = float_bits(bfp_load<In>(in[i * stride]));
      const std::uint32_t a = u & 0x7FFFFFFFu;
      const bool neg = (u >> 31) != 0u;
      const std::uint32_t q = a >= 0x7F800000u ? 0u : bfp_quanta<R>(a, neg, s, m);
      overflow = overflow || q > qmax + (neg ? 1u : 0u);
    }
    s += overflow ? 1 : 0;
  }
  // 3. Elements: q quanta, clamped, times the quantum (exact: q < 2^24, quantum >= 2^-148).
  const float quantum = exp2f_exact(s - 127 - m + 1);
  const std::uint32_t lim_neg = V == bfp_variant::compiler ? qmax + 1u : qmax;
  for (std::size_t i = 0; i < n; ++i) {
    const float x = bfp_load<In>(in[i * stride]);
    const std::uint32_t u = float_bits(x);
    const std::uint32_t sign = u & 0x80000000u;
    const std::uint32_t a = u ^ sign;
    // Inf/NaN are replaced below; quantize them as 0 so that the shift stays in range.
    std::uint32_t q = bfp_quanta<R>(a >= 0x7F800000u ? 0u : a, sign != 0u, s, m);
    const std::uint32_t lim = sign != 0u ? lim_neg : qmax;
    q = q < lim ? q : lim;
    const float y = bits_float(float_bits(static_cast<float>(q) * quantum) | sign);
    out[i * stride] = a >= 0x7F800000u ? x : y;  // Inf/NaN pass through
  }
}

/// k whole contiguous blocks into dst (an L1 chunk buffer): the shared fields are spread to a
/// per-element array so that one flat loop vectorises; other blocks are redone by bfp_block.
template <rounding R, class BS>
QUARK_ALWAYS_INLINE void bfp_chunk(const float* src, float* dst, std::size_t k, BS bs,
                                   int m) noexcept {
  alignas(64) int s_e[block_chunk_floats];
  alignas(64) unsigned char slow_b[block_chunk_floats];
  bool any_slow = false;
  for (std::size_t j = 0; j < k; ++j) {
    const int s = static_cast<int>(max_abs_bits(src + j * bs, bs, unit_stride{}) >> 23);
    const bool fast = rounds_tiny_to_zero_v<R> && s != 0xFF && s >= m + 1;
    for (std::size_t i = 0; i < bs; ++i)
      s_e[j * bs + i] = fast ? s : 254;
    slow_b[j] = fast ? 0 : 1;
    any_slow = any_slow || !fast;
  }
  // Fast path: float32 subnormals (f == 0) lie below half a quantum (>= 2^-125), so giving them
  // the implicit one changes nothing: the shift is >= 25 and they round to zero.
  const std::uint32_t qmax = (std::uint32_t{1} << m) - 1u;
  const std::size_t n = k * bs;
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t u = float_bits(src[i]);
    const std::uint32_t sign = u & 0x80000000u;
    const int f = static_cast<int>((u << 1) >> 24);
    const std::uint32_t mant = (u & 0x7FFFFFu) | 0x800000u;
    const int s = s_e[i];
    int sh = s - f + 24 - m;
    sh = sh < 31 ? sh : 31;
    std::uint32_t q = round_shift<R>(mant, static_cast<std::uint32_t>(sh), sign != 0u);
    q = q < qmax ? q : qmax;
    const float quantum = bits_float(static_cast<std::uint32_t>(s - m + 1) << 23);
    dst[i] = bits_float(float_bits(static_cast<float>(q) * quantum) | sign);
  }
  if (any_slow) {
    for (std::size_t j = 0; j < k; ++j) {
      if (slow_b[j] != 0) {
        bfp_block<R, bfp_input::float32, bfp_variant::standard>(src + j * bs, dst + j * bs, bs,
                                                                unit_stride{}, m);
      }
    }
  }
}

/// `Simd` false keeps to the portable chunk kernel (the tests compare the two).
template <rounding R, bfp_input In, bfp_variant V, bool Simd = true>
QUARK_BLOCK_KERNEL void bfp_fake_quantize_impl(const float* in, float* out, const block_layout& l,
                                               std::size_t block_size, int m) noexcept {
  const bool simd = Simd && In == bfp_input::float32 && V == bfp_variant::standard &&
                    avx512_rounding_v<R> && block_size == 8 && l.inner == 1 &&
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
            if (bfp_chunk8_avx512<R>(in + off, dst, k, m, slow, total - off)) {
              for (std::size_t j = 0; j < k; ++j) {
                if (slow[j] != 0) {
                  bfp_block<R, bfp_input::float32, bfp_variant::standard>(
                      in + off + 8 * j, dst + 8 * j, 8, unit_stride{}, m);
                }
              }
            }
            return;
          }
        }
#endif
        dispatch_block_size(block_size, [&](auto bs) {
          if constexpr (In == bfp_input::float32 && V == bfp_variant::standard) {
            bfp_chunk<R>(in + off, dst, k, bs, m);
          } else {
            for (std::size_t j = 0; j < k; ++j) {
              bfp_block<R, In, V>(in + off + j * bs, dst + j * bs, bs, unit_stride{}, m);
            }
          }
        });
      },
      [&](std::size_t off, std::size_t n, auto stride) {
        bfp_block<R, In, V>(in + off, out + off, n, stride, m);
      },
      simd);
}

}  // namespace detail

/// Fake-quantizes an N-d row-major tensor with BFP blocks of `block_size` along `axis`, each
/// element keeping a sign and `magnitude_bits` (1..22; Quark's bit_width - 9) bits. No
/// allocation. Throws quark::invalid_argument on bad arguments.
///
///     std::size_t shape[] = {2, 16};
///     quark::bfp_fake_quantize(x, y, shape, 1, 8, 7);  // BFP16 along the rows
inline void bfp_fake_quantize(std::span<const float> in, std::span<float> out,
                              std::span<const std::size_t> shape, std::size_t axis,
                              std::size_t block_size, int magnitude_bits,
                              const bfp_options& opt = {}) {
  if (block_size == 0) {
    QUARK_THROW(invalid_argument("quark.block.block_size", "block size must be positive"));
  }
  if (magnitude_bits < 1 || magnitude_bits > 22) {
    QUARK_THROW(invalid_argument("quark.block.bit_width",
                                 "BFP magnitude bits must be 1..22 (bit_width 10..31)"));
  }
  if (out.size() != in.size()) {
    QUARK_THROW(invalid_argument("quark.block.shape", "input and output sizes differ"));
  }
  const detail::block_layout l = detail::make_block_layout(shape, axis, in.size());
  detail::dispatch_rounding(opt.element_rounding, [&](auto r) {
    constexpr rounding R = decltype(r)::value;
    const auto run = [&](auto in_tag, auto var_tag) {
      detail::bfp_fake_quantize_impl<R, decltype(in_tag)::value, decltype(var_tag)::value>(
          in.data(), out.data(), l, block_size, magnitude_bits);
    };
    using f32 = std::integral_constant<bfp_input, bfp_input::float32>;
    using b16 = std::integral_constant<bfp_input, bfp_input::bfloat16_first>;
    using std_v = std::integral_constant<bfp_variant, bfp_variant::standard>;
    using cmp_v = std::integral_constant<bfp_variant, bfp_variant::compiler>;
    const bool b = opt.input == bfp_input::bfloat16_first;
    if (opt.variant == bfp_variant::standard) {
      b ? run(b16{}, std_v{}) : run(f32{}, std_v{});
    } else {
      b ? run(b16{}, cmp_v{}) : run(f32{}, cmp_v{});
    }
  });
}

/// Fake-quantizes a 1-D sequence in BFP blocks of B (the last block may be partial).
///
///     quark::fake_quantize<quark::bfp16>(std::span<const float>(x), std::span(y));
template <block_format_of<block_family::bfp> B>
void fake_quantize(std::span<const float> in, std::span<float> out, const bfp_options& opt = {}) {
  const std::size_t shape[1] = {in.size()};
  bfp_fake_quantize(in, out, shape, 0, static_cast<std::size_t>(block_traits<B>::block_size),
                    block_traits<B>::element_type::magnitude_bits, opt);
}

/// Fake-quantizes an N-d row-major tensor with BFP blocks of B along `axis`.
template <block_format_of<block_family::bfp> B>
void fake_quantize(std::span<const float> in, std::span<float> out,
                   std::span<const std::size_t> shape, std::size_t axis,
                   const bfp_options& opt = {}) {
  bfp_fake_quantize(in, out, shape, axis, static_cast<std::size_t>(block_traits<B>::block_size),
                    block_traits<B>::element_type::magnitude_bits, opt);
}

/// Quantizes rows x row_length floats into packed BFP storage (layout in storage.hpp). Inf/NaN
/// have no encoding: a block holding one stores scale 0xFF (it decodes to NaN). Only the
/// standard variant has a sign-magnitude encoding; bfp_variant::compiler throws
/// quark::invalid_argument ("quark.block.storage_variant").
///
///     auto t = quark::make_block_tensor<quark::bfp16>(x, 8);
template <block_format_of<block_family::bfp> B>
void quantize(std::span<const float> in, std::size_t row_length, block_buffers out,
              const bfp_options& opt = {}) {
  using tr = block_traits<B>;
  constexpr auto bs = static_cast<std::size_t>(tr::block_size);
  constexpr int m = tr::element_type::magnitude_bits;
  if (opt.variant != bfp_variant::standard) {
    QUARK_THROW(
        invalid_argument("quark.block.storage_variant",
                         "packed BFP storage is sign-magnitude: use bfp_variant::standard"));
  }
  const std::size_t rows = row_length == 0 ? 0 : in.size() / row_length;
  const block_storage_layout l = block_storage_layout_for<B>(rows, row_length);
  detail::check_buffers(l, in.size(), out.elements.size(), out.scales.size(), 0);
  for (std::size_t i = 0; i < l.element_bytes; ++i)
    out.elements[i] = 0;
  float tmp[bs];
  for (std::size_t row = 0; row < rows; ++row) {
    for (std::size_t b = 0; b < l.blocks_per_row; ++b) {
      // 1. Fake-quantize the block; its values are q * 2^(S - 127 - m + 1) exactly.
      const std::size_t off = row * row_length + b * bs;
      const std::size_t n = row_length - b * bs < bs ? row_length - b * bs : bs;
      const std::size_t shape[1] = {n};
      bfp_fake_quantize(in.subspan(off, n), std::span<float>(tmp, n), shape, 0, bs, m, opt);
      // 2. S: the largest finite exponent field of the (optionally bfloat16-rounded) inputs.
      std::uint32_t amax = 0;
      bool special = false;
      for (std::size_t i = 0; i < n; ++i) {
        const float x = opt.input == bfp_input::bfloat16_first
                            ? detail::bfp_load<bfp_input::bfloat16_first>(in[off + i])
                            : in[off + i];
        std::uint32_t a = detail::float_bits(x) & 0x7FFFFFFFu;
        special = special || a >= 0x7F800000u;
        a = a >= 0x7F800000u ? 0u : a;
        amax = a > amax ? a : amax;
      }
      const int s = static_cast<int>(amax >> 23);
      out.scales[row * l.blocks_per_row + b] = static_cast<std::uint8_t>(special ? 0xFF : s);
      if (special)
        continue;
      // 3. Sign-magnitude codes (the quanta count is an exact small integer).
      for (std::size_t i = 0; i < n; ++i)
        detail::put_sign_magnitude(out.elements, off + i, m, s, tmp[i]);
    }
  }
}

/// Dequantizes packed BFP storage (layout in storage.hpp) to rows x row_length floats.
template <block_format_of<block_family::bfp> B>
void dequantize(block_const_buffers in, std::size_t row_length, std::span<float> out) {
  using tr = block_traits<B>;
  using elem = typename tr::element_type;
  constexpr auto bs = static_cast<std::size_t>(tr::block_size);
  constexpr int m = elem::magnitude_bits;
  const std::size_t rows = row_length == 0 ? 0 : out.size() / row_length;
  const block_storage_layout l = block_storage_layout_for<B>(rows, row_length);
  detail::check_buffers(l, out.size(), in.elements.size(), in.scales.size(), 0);
  for (std::size_t row = 0; row < rows; ++row) {
    for (std::size_t i = 0; i < row_length; ++i) {
      const int s = in.scales[row * l.blocks_per_row + i / bs];
      const std::size_t idx = row * row_length + i;
      out[idx] = detail::get_sign_magnitude(in.elements, idx, m, s);
    }
  }
}

/// Quantizes rows x row_length floats into an owning packed BFP tensor.
template <block_format_of<block_family::bfp> B>
block_tensor<B> make_block_tensor(std::span<const float> in, std::size_t row_length,
                                  const bfp_options& opt = {}) {
  const std::size_t rows = row_length == 0 ? 0 : in.size() / row_length;
  block_tensor<B> t(block_storage_layout_for<B>(rows, row_length));
  quantize<B>(in, row_length, t.buffers(), opt);
  return t;
}

}  // namespace quark
