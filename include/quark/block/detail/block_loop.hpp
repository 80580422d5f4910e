// SPDX-License-Identifier: MIT
// The iteration shared by every block format: an N-d row-major tensor is seen as
// outer x length x inner around the blocked axis; blocks are `block_size` consecutive positions
// along the axis (the last one may be partial), each at a stride of `inner` floats. Contiguous
// blocks (inner == 1) get a compile-time unit stride so that the kernels vectorise.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>

#include <quark/config.hpp>
#include <quark/core/bit.hpp>
#include <quark/core/error.hpp>
#include <quark/core/policy.hpp>
#include <quark/detail/stream.hpp>

/// Kernels whose loops are written for auto-vectorisation ask GCC for full-width AVX-512
/// vectors where the target has them (GCC otherwise prefers 256-bit vectors on many Intel
/// targets). Other compilers follow their own -mprefer-vector-width.
#if defined(__AVX512F__) && defined(__GNUC__) && !defined(__clang__)
#define QUARK_BLOCK_KERNEL __attribute__((target("prefer-vector-width=512")))
#else
#define QUARK_BLOCK_KERNEL
#endif

namespace quark::detail {

/// True for the rounding modes under which a value below half an element step becomes zero; the
/// fast kernels rely on it to skip the float32-subnormal special case.
template <rounding R>
inline constexpr bool rounds_tiny_to_zero_v =
    R == rounding::nearest_even || R == rounding::nearest_away || R == rounding::nearest_up ||
    R == rounding::toward_zero;

/// A tensor seen around one axis: `outer` slabs of `length` x `inner` floats.
struct block_layout {
  std::size_t outer = 1;
  std::size_t length = 0;
  std::size_t inner = 1;
};

using unit_stride = std::integral_constant<std::size_t, 1>;

/// Builds the layout of a row-major tensor around `axis`; throws quark::invalid_argument
/// ("quark.block.axis", "quark.block.shape") when the axis or the element count is wrong.
inline block_layout make_block_layout(std::span<const std::size_t> shape, std::size_t axis,
                                      std::size_t element_count) {
  std::size_t total = 1;
  for (const std::size_t d : shape)
    total *= d;
  if (total != element_count) {
    QUARK_THROW(invalid_argument("quark.block.shape", "shape holds " + std::to_string(total) +
                                                          " elements, data has " +
                                                          std::to_string(element_count)));
  }
  if (shape.empty())
    return block_layout{1, element_count, 1};  // a scalar: one block of one
  if (axis >= shape.size()) {
    QUARK_THROW(invalid_argument(
        "quark.block.axis",
        "axis " + std::to_string(axis) + " out of range for rank " + std::to_string(shape.size())));
  }
  block_layout l;
  for (std::size_t i = 0; i < axis; ++i)
    l.outer *= shape[i];
  l.length = shape[axis];
  for (std::size_t i = axis + 1; i < shape.size(); ++i)
    l.inner *= shape[i];
  return l;
}

/// Calls fn(offset, count, stride) for every block, stride being unit_stride{} when blocks are
/// contiguous and a std::size_t otherwise.
template <class Fn>
QUARK_BLOCK_KERNEL void for_each_block(const block_layout& l, std::size_t block_size, Fn&& fn) {
  QUARK_ASSERT(block_size >= 1, "block size must be positive");
  for (std::size_t o = 0; o < l.outer; ++o) {
    const std::size_t slab = o * l.length * l.inner;
    for (std::size_t start = 0; start < l.length; start += block_size) {
      const std::size_t count = l.length - start < block_size ? l.length - start : block_size;
      if (l.inner == 1) {
        fn(slab + start, count, unit_stride{});
      } else {
        for (std::size_t i = 0; i < l.inner; ++i)
          fn(slab + start * l.inner + i, count, l.inner);
      }
    }
  }
}

/// Calls fn(bs) with bs a compile-time constant for the common block sizes, so that the block
/// loops have constant trip counts and vectorise without remainder code.
template <class Fn>
QUARK_ALWAYS_INLINE void dispatch_block_size(std::size_t bs, Fn&& fn) {
  switch (bs) {
    case 8:
      fn(std::integral_constant<std::size_t, 8>{});
      break;
    case 16:
      fn(std::integral_constant<std::size_t, 16>{});
      break;
    case 32:
      fn(std::integral_constant<std::size_t, 32>{});
      break;
    default:
      fn(bs);
      break;
  }
}

/// Requests the next chunk of input while the current one is computed: a single core reaches
/// DRAM bandwidth only with many misses in flight, and the compute between loads otherwise
/// keeps the hardware prefetcher from running far enough ahead.
QUARK_ALWAYS_INLINE void prefetch_next(const float* p, std::size_t available) noexcept {
#if defined(__GNUC__) || defined(__clang__)
  const std::size_t n = available < 2048 ? available : 2048;
  for (std::size_t i = 0; i < n; i += 16)
    __builtin_prefetch(p + i, 0, 3);
#else
  static_cast<void>(p);
  static_cast<void>(available);
#endif
}

/// Floats per chunk of the contiguous driver (8 KiB: the chunk buffer stays in L1).
inline constexpr std::size_t block_chunk_floats = 2048;

/// Like for_each_block, but contiguous full blocks go in chunks through an L1 buffer:
/// full(offset, block_count, dst) computes `block_count` whole blocks starting at `offset` into
/// dst, which is then copied to the output (with streaming stores when the output is large, so
/// the destination is not read for ownership). Partial and strided blocks go to
/// any(offset, count, stride), which writes the output directly.
/// `kernel_prefetches`: full() requests its input ahead itself (the AVX-512 kernels, which
/// spread one hint per line over their loop); otherwise the driver requests the next chunk.
template <class Full, class Any>
QUARK_BLOCK_KERNEL void for_each_block_chunked(const float* in, float* out, const block_layout& l,
                                               std::size_t block_size, Full&& full, Any&& any,
                                               bool kernel_prefetches = false) {
  const std::size_t total = l.outer * l.length * l.inner;
  if (l.inner != 1 || block_size > block_chunk_floats) {
    for_each_block(l, block_size, any);
    return;
  }
  const bool stream = l.outer * l.length * sizeof(float) >= streaming_threshold_bytes;
  alignas(64) float buf[block_chunk_floats];
  const std::size_t per_chunk = block_chunk_floats / block_size;
  for (std::size_t o = 0; o < l.outer; ++o) {
    const std::size_t slab = o * l.length;
    const std::size_t whole = l.length / block_size;
    for (std::size_t b = 0; b < whole; b += per_chunk) {
      const std::size_t k = whole - b < per_chunk ? whole - b : per_chunk;
      const std::size_t off = slab + b * block_size;
      if (stream && !kernel_prefetches)
        prefetch_next(in + off + k * block_size, total - (off + k * block_size));
      full(off, k, static_cast<float*>(buf));
      if (stream) {
        stream_copy(out + off, buf, k * block_size * sizeof(float));
      } else {
        std::memcpy(out + off, buf, k * block_size * sizeof(float));
      }
    }
    const std::size_t rest = l.length % block_size;
    if (rest != 0)
      any(slab + whole * block_size, rest, unit_stride{});
  }
  if (stream)
    stream_fence();
}

/// Largest float32 magnitude bits |x| over a block (unsigned compare of the bit patterns orders
/// finite magnitudes; Inf and NaN compare above every finite value).
template <class Stride>
QUARK_ALWAYS_INLINE std::uint32_t max_abs_bits(const float* QUARK_RESTRICT in, std::size_t n,
                                               Stride stride) noexcept {
  std::uint32_t m = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t a = float_bits(in[i * stride]) & 0x7FFFFFFFu;
    m = a > m ? a : m;
  }
  return m;
}

/// Largest finite magnitude bits over a block, Inf and NaN counting as zero (Quark's rule).
template <class Stride>
QUARK_ALWAYS_INLINE std::uint32_t max_finite_abs_bits(const float* QUARK_RESTRICT in, std::size_t n,
                                                      Stride stride) noexcept {
  std::uint32_t m = 0;
  for (std::size_t i = 0; i < n; ++i) {
    std::uint32_t a = float_bits(in[i * stride]) & 0x7FFFFFFFu;
    a = a >= 0x7F800000u ? 0u : a;
    m = a > m ? a : m;
  }
  return m;
}

/// v * 2^k for |k| up to ~250, exact whenever the result is representable (two exact steps).
QUARK_ALWAYS_INLINE constexpr float mul_pow2(float v, int k) noexcept {
  const int a = k / 2;
  return v * exp2f_exact(a) * exp2f_exact(k - a);
}

/// |v| with the sign bit set when `negative` (so a zero magnitude gives -0.0).
QUARK_ALWAYS_INLINE constexpr float with_sign(float v, bool negative) noexcept {
  return bits_float(float_bits(v) | (negative ? 0x80000000u : 0u));
}

}  // namespace quark::detail
