// SPDX-License-Identifier: MIT
// Block-wise streaming for bulk kernels whose output is far larger than cache: each block is
// computed into an L1-resident buffer, then written out with non-temporal stores, which skip the
// read-for-ownership of the destination (about a third of the traffic of a float -> 16-bit
// conversion). Small outputs use ordinary stores, since streaming evicts them from cache.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include <quark/detail/prefetch.hpp>

#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#define QUARK_HAS_STREAM_STORE 1
#else
#define QUARK_HAS_STREAM_STORE 0
#endif

namespace quark::detail {

/// Outputs at least this large are written with streaming stores.
inline constexpr std::size_t streaming_threshold_bytes = std::size_t{8} << 20;
/// Elements per block: the block buffer stays in L1.
inline constexpr std::size_t stream_block_bytes = 8192;
/// Input bytes per kernel call inside a streamed block when the input is prefetched (each call
/// first requests the input it will need a few KiB later, detail/prefetch.hpp).
inline constexpr std::size_t stream_prefetch_chunk_bytes = 1024;

/// Copies `bytes` from an L1 buffer to `dst` with non-temporal stores where the target supports
/// them (unaligned head and tail with ordinary stores). Call stream_fence() after the last block.
inline void stream_copy(void* dst, const void* src, std::size_t bytes) noexcept {
#if QUARK_HAS_STREAM_STORE
  auto* d = static_cast<unsigned char*>(dst);
  const auto* s = static_cast<const unsigned char*>(src);
  const std::size_t mis = reinterpret_cast<std::uintptr_t>(d) & 31u;
  std::size_t head = mis == 0 ? 0 : 32u - mis;
  if (head > bytes)
    head = bytes;
  std::memcpy(d, s, head);
  d += head;
  s += head;
  bytes -= head;
  for (; bytes >= 32; bytes -= 32, d += 32, s += 32) {
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d),
                        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s)));
  }
  std::memcpy(d, s, bytes);
#else
  std::memcpy(dst, src, bytes);
#endif
}

/// Orders the streaming stores before any later store (required before another thread reads).
inline void stream_fence() noexcept {
#if QUARK_HAS_STREAM_STORE
  _mm_sfence();
#endif
}

/// Runs `kernel(first, count, out)` over [0, n) writing `Out` elements; for large outputs the
/// kernel writes into an L1 buffer that is then streamed to `out`.
template <class Out, class Kernel>
inline void for_each_block_streamed(std::size_t n, Out* out, Kernel&& kernel) {
  if (n * sizeof(Out) < streaming_threshold_bytes) {
    kernel(std::size_t{0}, n, out);
    return;
  }
  constexpr std::size_t block = stream_block_bytes / sizeof(Out);
  alignas(64) Out buffer[block];
  for (std::size_t first = 0; first < n; first += block) {
    const std::size_t count = n - first < block ? n - first : block;
    kernel(first, count, buffer);
    stream_copy(out + first, buffer, count * sizeof(Out));
  }
  stream_fence();
}

/// As above, for a kernel that reads `In` elements of `in` in step with the output: in the
/// streamed case each block is computed in chunks, and before each chunk the input is
/// prefetched ahead (prefetch_stream_ahead), which a single core needs to approach DRAM read
/// bandwidth.
template <class In, class Out, class Kernel>
inline void for_each_block_streamed(const In* in, std::size_t n, Out* out, Kernel&& kernel) {
  if (n * sizeof(Out) < streaming_threshold_bytes) {
    kernel(std::size_t{0}, n, out);
    return;
  }
  constexpr std::size_t block = stream_block_bytes / sizeof(Out);
  constexpr std::size_t chunk_raw = stream_prefetch_chunk_bytes / sizeof(In);
  constexpr std::size_t chunk = chunk_raw < block ? chunk_raw : block;
  static_assert(chunk > 0 && block % chunk == 0);
  const std::size_t total = n * sizeof(In);
  alignas(64) Out buffer[block];
  for (std::size_t first = 0; first < n; first += block) {
    const std::size_t count = n - first < block ? n - first : block;
    for (std::size_t c = 0; c < count; c += chunk) {
      const std::size_t m = count - c < chunk ? count - c : chunk;
      prefetch_stream_ahead(in, (first + c) * sizeof(In), total, m * sizeof(In));
      kernel(first + c, m, buffer + c);
    }
    stream_copy(out + first, buffer, count * sizeof(Out));
  }
  stream_fence();
}

}  // namespace quark::detail
