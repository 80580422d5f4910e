// SPDX-License-Identifier: MIT
// Software prefetch for bulk kernels that stream a large input once. One core reaches DRAM read
// bandwidth only with many cache misses in flight; when the loop body is more than a load and a
// store, the hardware prefetcher alone runs too little ahead. Requesting the input a few KiB ahead
// of the loop (one hint per 64-byte line) keeps enough misses outstanding.
//
// Every helper clips to the end of the buffer, so no pointer past one-past-the-end is formed.
// Prefetches are hints: they never fault and never change results.
#pragma once

#include <cstddef>

#include <quark/config.hpp>

namespace quark::detail {

/// Cache line size assumed by the helpers (x86-64 and most AArch64 cores).
inline constexpr std::size_t prefetch_line_bytes = 64;
/// A distance that suits a streaming read on the benchmark host (docs/benchmarks.md): far enough
/// to cover DRAM latency at full bandwidth, near enough to stay well inside L1/L2.
inline constexpr std::size_t prefetch_default_distance_bytes = 4096;
/// Two-level streaming prefetch (prefetch_read_l2 far ahead, prefetch_read near): the distances
/// measured best for the float32 -> 16-bit encoders on the benchmark host (1 KiB + 4 KiB beat any
/// single distance by about 10 %; docs/benchmarks.md).
inline constexpr std::size_t prefetch_l1_distance_bytes = 1024;
inline constexpr std::size_t prefetch_l2_distance_bytes = 4096;

/// Hints that the line holding `p` will be read soon (into all cache levels).
QUARK_ALWAYS_INLINE void prefetch_read(const void* p) noexcept {
#if defined(__GNUC__) || defined(__clang__)
  __builtin_prefetch(p, 0, 3);
#else
  static_cast<void>(p);
#endif
}

/// Hints that the line holding `p` will be read later: fetched into L2 (and L3) only. An L2
/// prefetch is tracked by L2's larger miss queue rather than L1's few fill buffers, so a far L2
/// prefetch plus a near L1 prefetch keeps more lines in flight than either alone.
QUARK_ALWAYS_INLINE void prefetch_read_l2(const void* p) noexcept {
#if defined(__GNUC__) || defined(__clang__)
  __builtin_prefetch(p, 0, 2);
#else
  static_cast<void>(p);
#endif
}

/// Hints every line of [p, p + bytes).
QUARK_ALWAYS_INLINE void prefetch_range(const void* p, std::size_t bytes) noexcept {
  const auto* c = static_cast<const char*>(p);
  for (std::size_t b = 0; b < bytes; b += prefetch_line_bytes)
    prefetch_read(c + b);
}

/// For a loop at byte offset `pos` of a buffer of `total` bytes starting at `base`, hints the
/// `bytes` bytes that start `distance` bytes ahead of `pos` (clipped to the buffer). Call it once
/// per `bytes` of progress, so each line is requested once.
QUARK_ALWAYS_INLINE void prefetch_ahead(
    const void* base, std::size_t pos, std::size_t total, std::size_t bytes,
    std::size_t distance = prefetch_default_distance_bytes) noexcept {
  const std::size_t from = pos + distance;
  if (from >= total)
    return;
  const std::size_t len = total - from < bytes ? total - from : bytes;
  prefetch_range(static_cast<const char*>(base) + from, len);
}

/// Two-level form of prefetch_ahead for a loop streaming through a large buffer: hints the
/// `bytes` bytes at prefetch_l2_distance_bytes ahead of `pos` into L2 and those at
/// prefetch_l1_distance_bytes ahead into L1 (both clipped to the buffer). Call it once per
/// `bytes` of progress.
QUARK_ALWAYS_INLINE void prefetch_stream_ahead(const void* base, std::size_t pos, std::size_t total,
                                               std::size_t bytes) noexcept {
  const auto* c = static_cast<const char*>(base);
  std::size_t from = pos + prefetch_l2_distance_bytes;
  if (from < total) {
    const std::size_t len = total - from < bytes ? total - from : bytes;
    for (std::size_t b = 0; b < len; b += prefetch_line_bytes)
      prefetch_read_l2(c + from + b);
  }
  from = pos + prefetch_l1_distance_bytes;
  if (from < total) {
    const std::size_t len = total - from < bytes ? total - from : bytes;
    prefetch_range(c + from, len);
  }
}

}  // namespace quark::detail
