// SPDX-License-Identifier: MIT
// Splitting an element range over std::threads. Pieces start at multiples of 64 elements (a
// byte boundary for every packed width) and the calling thread takes the last piece.
#pragma once

#include <array>
#include <cstddef>
#include <thread>

#include <quark/quant/quant_policy.hpp>

namespace quark::detail {

/// Calls body(begin, end) over [0, n) on up to t.threads threads (at most 64).
template <class Body>
void parallel_for(std::size_t n, threading t, const Body& body) {
  std::size_t want = t.threads == 0 ? 1 : t.threads;
  want = want > 64 ? 64 : want;
  const std::size_t per = t.min_elements_per_thread == 0 ? 1 : t.min_elements_per_thread;
  const std::size_t by_size = n / per;
  const std::size_t count = by_size < want ? (by_size == 0 ? 1 : by_size) : want;
  if (count <= 1) {
    body(std::size_t{0}, n);
    return;
  }
  std::size_t chunk = (n + count - 1) / count;
  chunk = (chunk + 63u) / 64u * 64u;
  std::array<std::thread, 64> workers;
  std::size_t started = 0;
  std::size_t begin = 0;
  for (; started + 1 < count && begin + chunk < n; ++started, begin += chunk) {
    const std::size_t b = begin;
    const std::size_t e = begin + chunk;
    workers[started] = std::thread([&body, b, e] { body(b, e); });
  }
  body(begin, n);
  for (std::size_t k = 0; k < started; ++k)
    workers[k].join();
}

}  // namespace quark::detail
