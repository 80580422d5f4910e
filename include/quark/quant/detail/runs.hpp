// SPDX-License-Identifier: MIT
// The inner loops shared by quantize, dequantize and fake_quantize: one run of elements with a
// constant parameter (stride 0) or with one parameter per element (stride 1). `elem(k, s, inv,
// zp)` is inlined into plain counted loops, which the compiler vectorises.
#pragma once

#include <cstddef>

#include <quark/config.hpp>

namespace quark::detail {

template <class Z, class Elem>
QUARK_ALWAYS_INLINE void for_run(std::size_t len, const float* s, const Z* zp, std::size_t p,
                                 int stride, Elem&& elem) {
  if (stride == 0) {
    const float sc = s[p];
    const float inv = 1.0f / sc;
    const Z z = zp != nullptr ? zp[p] : Z{};
    for (std::size_t k = 0; k < len; ++k) elem(k, sc, inv, z);
  } else if (zp != nullptr) {
    const float* sp = s + p;
    const Z* zpp = zp + p;
    for (std::size_t k = 0; k < len; ++k) elem(k, sp[k], 1.0f / sp[k], zpp[k]);
  } else {
    const float* sp = s + p;
    for (std::size_t k = 0; k < len; ++k) elem(k, sp[k], 1.0f / sp[k], Z{});
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
