// SPDX-License-Identifier: MIT
// Sub-byte packing in ONNX order: a little-endian bit stream, element 0 in the lowest bits of
// byte 0. For 2- and 4-bit types this is exactly ONNX's INT4/UINT4/FLOAT4E2M1 (low nibble first)
// and INT2/UINT2 layout. 3-bit integers and 6-bit floats have no ONNX layout; quark stores them
// in the same LSB-first stream, so an element may straddle two bytes (8 int3 in 3 bytes,
// 4 float6 in 3 bytes). Packed size is ceil(n * bits / 8); unused high bits of the last byte are 0.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include <quark/config.hpp>
#include <quark/core/concepts.hpp>

namespace quark {

/// Bytes needed to store n elements of `bits` bits.
constexpr std::size_t packed_size(std::size_t n, int bits) noexcept {
  return (n * static_cast<std::size_t>(bits) + 7u) / 8u;
}

/// Packs n codes of `bits` (1..8) bits each into out (packed_size(n, bits) bytes).
inline void pack_codes(std::span<const std::uint8_t> codes, int bits,
                       std::span<std::uint8_t> out) noexcept {
  QUARK_ASSERT(bits >= 1 && bits <= 8, "pack_codes: bits must be 1..8");
  QUARK_ASSERT(out.size() >= packed_size(codes.size(), bits), "pack_codes: output too small");
  const std::size_t n = codes.size();
  const std::uint32_t mask = (1u << bits) - 1u;
  if (bits == 4) {
    for (std::size_t i = 0; i + 1 < n; i += 2) {
      out[i / 2] = static_cast<std::uint8_t>((codes[i] & 0xFu) | ((codes[i + 1] & 0xFu) << 4));
    }
    if (n % 2 != 0)
      out[n / 2] = static_cast<std::uint8_t>(codes[n - 1] & 0xFu);
    return;
  }
  if (bits == 8) {
    for (std::size_t i = 0; i < n; ++i)
      out[i] = codes[i];
    return;
  }
  const std::size_t nbytes = packed_size(n, bits);
  for (std::size_t b = 0; b < nbytes; ++b)
    out[b] = 0;
  std::size_t bitpos = 0;
  for (std::size_t i = 0; i < n; ++i, bitpos += static_cast<std::size_t>(bits)) {
    const std::uint32_t v = codes[i] & mask;
    const std::size_t byte = bitpos / 8u;
    const unsigned off = static_cast<unsigned>(bitpos % 8u);
    out[byte] = static_cast<std::uint8_t>(out[byte] | ((v << off) & 0xFFu));
    if (off + static_cast<unsigned>(bits) > 8u) {
      out[byte + 1] = static_cast<std::uint8_t>(out[byte + 1] | (v >> (8u - off)));
    }
  }
}

/// Unpacks n = codes.size() codes of `bits` bits from a packed stream.
inline void unpack_codes(std::span<const std::uint8_t> in, int bits,
                         std::span<std::uint8_t> codes) noexcept {
  QUARK_ASSERT(bits >= 1 && bits <= 8, "unpack_codes: bits must be 1..8");
  QUARK_ASSERT(in.size() >= packed_size(codes.size(), bits), "unpack_codes: input too small");
  const std::size_t n = codes.size();
  const std::uint32_t mask = (1u << bits) - 1u;
  std::size_t bitpos = 0;
  for (std::size_t i = 0; i < n; ++i, bitpos += static_cast<std::size_t>(bits)) {
    const std::size_t byte = bitpos / 8u;
    const unsigned off = static_cast<unsigned>(bitpos % 8u);
    std::uint32_t v = static_cast<std::uint32_t>(in[byte]) >> off;
    if (off + static_cast<unsigned>(bits) > 8u) {
      v |= static_cast<std::uint32_t>(in[byte + 1]) << (8u - off);
    }
    codes[i] = static_cast<std::uint8_t>(v & mask);
  }
}

/// Packs values of a sub-byte type (int2..uint4, float4_e2m1fn, float6_*).
///
///     quark::int4 v[3] = {quark::int4(1), quark::int4(-1), quark::int4(7)};
///     std::uint8_t out[2];
///     quark::pack(std::span<const quark::int4>(v), std::span(out));  // {0xF1, 0x07}
template <quantized_type T>
  requires(dtype_traits<T>::bits < 8)
void pack(std::span<const T> values, std::span<std::uint8_t> out) noexcept {
  constexpr int bits = dtype_traits<T>::bits;
  QUARK_ASSERT(out.size() >= packed_size(values.size(), bits), "pack: output too small");
  const std::size_t n = values.size();
  if constexpr (bits == 4) {
    for (std::size_t i = 0; i + 1 < n; i += 2) {
      out[i / 2] = static_cast<std::uint8_t>((values[i].to_bits() & 0xFu) |
                                             ((values[i + 1].to_bits() & 0xFu) << 4));
    }
    if (n % 2 != 0)
      out[n / 2] = static_cast<std::uint8_t>(values[n - 1].to_bits() & 0xFu);
  } else {
    std::size_t bitpos = 0;
    const std::size_t nbytes = packed_size(n, bits);
    for (std::size_t b = 0; b < nbytes; ++b)
      out[b] = 0;
    for (std::size_t i = 0; i < n; ++i, bitpos += bits) {
      const std::uint32_t v = values[i].to_bits() & ((1u << bits) - 1u);
      const std::size_t byte = bitpos / 8u;
      const unsigned off = static_cast<unsigned>(bitpos % 8u);
      out[byte] = static_cast<std::uint8_t>(out[byte] | ((v << off) & 0xFFu));
      if (off + bits > 8u)
        out[byte + 1] = static_cast<std::uint8_t>(out[byte + 1] | (v >> (8u - off)));
    }
  }
}

/// Unpacks values.size() values of a sub-byte type.
template <quantized_type T>
  requires(dtype_traits<T>::bits < 8)
void unpack(std::span<const std::uint8_t> in, std::span<T> values) noexcept {
  constexpr int bits = dtype_traits<T>::bits;
  QUARK_ASSERT(in.size() >= packed_size(values.size(), bits), "unpack: input too small");
  std::size_t bitpos = 0;
  for (std::size_t i = 0; i < values.size(); ++i, bitpos += bits) {
    const std::size_t byte = bitpos / 8u;
    const unsigned off = static_cast<unsigned>(bitpos % 8u);
    std::uint32_t v = static_cast<std::uint32_t>(in[byte]) >> off;
    if (off + bits > 8u)
      v |= static_cast<std::uint32_t>(in[byte + 1]) << (8u - off);
    values[i] = T::from_bits(static_cast<typename T::storage_type>(v & ((1u << bits) - 1u)));
  }
}

}  // namespace quark
