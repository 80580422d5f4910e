// SPDX-License-Identifier: MIT
// The inner loops shared by quantize, dequantize and fake_quantize: one run of elements with a
// constant parameter (stride 0) or with one parameter per element (stride 1). `elem(k, s, inv,
// zp)` is inlined into plain counted loops, which the compiler vectorises.
#pragma once

#include <cstddef>

#include <quark/config.hpp>

namespace quark::detail {

/// Long constant-parameter runs are walked in blocks with a software prefetch of the input some
/// blocks ahead (`src`: the run's input, `src_size` bytes per element, or nullptr): the hardware
/// prefetcher alone keeps too few lines in flight once the loop body is more than a load and a
/// store. Used by quantize, whose narrow output leaves the loop read-bound (5-10 % on 64 MiB on
/// the benchmark host, docs/bench/quant.md; within noise for fake_quantize, so it is not used
/// there).
inline constexpr std::size_t prefetch_block = 1024;
inline constexpr std::size_t prefetch_distance = 2048;

template <class Z, class Elem>
QUARK_ALWAYS_INLINE void for_run(std::size_t len, const float* s, const Z* zp, std::size_t p,
                                 int stride, Elem&& elem, const void* src = nullptr,
                                 std::size_t src_size = 4) {
  if (stride == 0) {
    const float sc = s[p];
    const float inv = 1.0f / sc;
    const Z z = zp != nullptr ? zp[p] : Z{};
    std::size_t k0 = 0;
    if (src != nullptr && len >= 4 * prefetch_distance) {
      for (; k0 + prefetch_distance + prefetch_block <= len; k0 += prefetch_block) {
        const char* ahead = static_cast<const char*>(src) + (k0 + prefetch_distance) * src_size;
        for (std::size_t b = 0; b < prefetch_block * src_size; b += 64)
          __builtin_prefetch(ahead + b);
        for (std::size_t k = k0; k < k0 + prefetch_block; ++k)
          elem(k, sc, inv, z);
      }
    }
    for (std::size_t k = k0; k < len; ++k)
      elem(k, sc, inv, z);
  } else if (zp != nullptr) {
    const float* sp = s + p;
    const Z* zpp = zp + p;
    for (std::size_t k = 0; k < len; ++k)
      elem(k, sp[k], 1.0f / sp[k], zpp[k]);
  } else {
    const float* sp = s + p;
    for (std::size_t k = 0; k < len; ++k)
      elem(k, sp[k], 1.0f / sp[k], Z{});
  }
}

/// Splits a run into chunks of at most `Chunk` elements: chunk(offset, count, param, stride).
template <std::size_t Chunk, class F>
QUARK_ALWAYS_INLINE void for_chunks(std::size_t len, std::size_t p, int stride, F&& chunk) {
  for (std::size_t off = 0; off < len; off += Chunk) {
    const std::size_t n = len - off < Chunk ? len - off : Chunk;
    chunk(off, n, stride == 0 ? p : p + off, stride);
  }
}

}  // namespace quark::detail
