// SPDX-License-Identifier: MIT
// Reading and writing runs of sub-byte codes at any element offset of a packed stream (ONNX
// order: element 0 in the low bits of byte 0). Writes are read-modify-write, so consecutive runs
// may share a byte; threads split the stream at multiples of 64 elements, i.e. at byte
// boundaries for every width of 1..8 bits.
#pragma once

#include <cstddef>
#include <cstdint>

#include <quark/config.hpp>

namespace quark::detail {

/// Stores codes[0..n) (low `bits` bits each) as elements first..first+n of `out`.
inline void write_packed(const std::uint8_t* codes, std::size_t n, int bits, std::uint8_t* out,
                         std::size_t first) noexcept {
  const auto b = static_cast<std::size_t>(bits);
  const std::uint32_t mask = (1u << bits) - 1u;
  std::size_t k = 0;
  if (bits == 4) {
    // 1. A head element in a high nibble; 2. whole bytes; 3. a tail element in a low nibble.
    if (first % 2 != 0 && n > 0) {
      std::uint8_t& byte = out[first / 2];
      byte = static_cast<std::uint8_t>((byte & 0x0Fu) | ((codes[0] & 0xFu) << 4));
      k = 1;
    }
    std::uint8_t* dst = out + (first + k) / 2;
    for (; k + 1 < n; k += 2) {
      *dst++ = static_cast<std::uint8_t>((codes[k] & 0xFu) | ((codes[k + 1] & 0xFu) << 4));
    }
    if (k < n)
      *dst = static_cast<std::uint8_t>((*dst & 0xF0u) | (codes[k] & 0xFu));
    return;
  }
  for (; k < n; ++k) {
    const std::size_t pos = (first + k) * b;
    const std::size_t byte = pos / 8u;
    const unsigned off = static_cast<unsigned>(pos % 8u);
    const std::uint32_t v = codes[k] & mask;
    out[byte] =
        static_cast<std::uint8_t>((out[byte] & ~((mask << off) & 0xFFu)) | ((v << off) & 0xFFu));
    if (off + b > 8u) {
      const unsigned spill = 8u - off;
      out[byte + 1] = static_cast<std::uint8_t>((out[byte + 1] & ~(mask >> spill)) | (v >> spill));
    }
  }
}

/// Loads elements first..first+n of a packed stream into codes[0..n) (zero-extended).
inline void read_packed(const std::uint8_t* in, std::size_t first, std::size_t n, int bits,
                        std::uint8_t* codes) noexcept {
  const auto b = static_cast<std::size_t>(bits);
  const std::uint32_t mask = (1u << bits) - 1u;
  if (bits == 4) {
    for (std::size_t k = 0; k < n; ++k) {
      const std::size_t e = first + k;
      codes[k] = static_cast<std::uint8_t>((in[e / 2] >> ((e % 2) * 4)) & 0xFu);
    }
    return;
  }
  for (std::size_t k = 0; k < n; ++k) {
    const std::size_t pos = (first + k) * b;
    const std::size_t byte = pos / 8u;
    const unsigned off = static_cast<unsigned>(pos % 8u);
    std::uint32_t v = static_cast<std::uint32_t>(in[byte]) >> off;
    if (off + b > 8u)
      v |= static_cast<std::uint32_t>(in[byte + 1]) << (8u - off);
    codes[k] = static_cast<std::uint8_t>(v & mask);
  }
}

}  // namespace quark::detail
