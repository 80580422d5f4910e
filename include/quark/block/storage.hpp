// SPDX-License-Identifier: MIT
// Real storage of block formats. A tensor of `rows` x `row_length` floats is stored with its
// blocks along each row (the last, contiguous axis; axis_storage.hpp stores a tensor blocked along
// any other axis as the tensor with that axis moved last). Three byte streams, no headers:
//   * scales:     one byte per block, row-major: byte r * blocks_per_row + b. OCP MX: the E8M0
//                 code (E + 127, 0xFF = NaN block); BFP and MX4/6/9: the biased float32 exponent
//                 field of the block's largest magnitude (0xFF = NaN block).
//   * elements:   one code per value, packed LSB-first (quark::pack_codes order: element i
//                 starts at bit i * element_bits; two FP4 per byte, low nibble first); partial
//                 blocks are not padded. MX codes are the element dtype's codes (MXINT8: two's
//                 complement); BFP and MX4/6/9 codes are sign_magnitude<m> (sign bit above the
//                 magnitude), except BFP's compiler variant, which stores int8 two's complement.
//   * sub_shifts: MX4/6/9 only: one `shift_bits` code per sub-block, packed LSB-first, row-major
//                 (a partial block has ceil(count / sub_block_size) sub-blocks).
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include <quark/block/block_format.hpp>
#include <quark/block/detail/block_loop.hpp>
#include <quark/config.hpp>
#include <quark/core/error.hpp>
#include <quark/dtype/pack.hpp>

namespace quark {

/// Sizes of the three storage streams of a rows x row_length tensor in some block format.
struct block_storage_layout {
  std::size_t rows = 0;
  std::size_t row_length = 0;
  std::size_t blocks_per_row = 0;
  std::size_t sub_blocks_per_row = 0;
  std::size_t element_bytes = 0;
  std::size_t scale_bytes = 0;
  std::size_t sub_shift_bytes = 0;
  /// Total bytes of all three streams.
  constexpr std::size_t total_bytes() const noexcept {
    return element_bytes + scale_bytes + sub_shift_bytes;
  }
};

/// The storage layout of `rows` rows of `row_length` values in format B.
///
///     auto l = quark::block_storage_layout_for<quark::mxfp4_e2m1>(1, 64);
///     // l.element_bytes == 32, l.scale_bytes == 2
template <block_format_type B>
constexpr block_storage_layout block_storage_layout_for(std::size_t rows,
                                                        std::size_t row_length) noexcept {
  using tr = block_traits<B>;
  constexpr auto bs = static_cast<std::size_t>(tr::block_size);
  block_storage_layout l;
  l.rows = rows;
  l.row_length = row_length;
  l.blocks_per_row = (row_length + bs - 1) / bs;
  if constexpr (tr::sub_block_size > 0) {
    constexpr auto ss = static_cast<std::size_t>(tr::sub_block_size);
    l.sub_blocks_per_row = (row_length + ss - 1) / ss;  // block size is a multiple of ss
    l.sub_shift_bytes = packed_size(rows * l.sub_blocks_per_row, tr::sub_block_shift_bits);
  }
  l.element_bytes = packed_size(rows * row_length, tr::element_bits);
  l.scale_bytes = rows * l.blocks_per_row;
  return l;
}

/// Mutable views of the three streams (sub_shifts may be empty for formats without sub-blocks).
struct block_buffers {
  std::span<std::uint8_t> elements;
  std::span<std::uint8_t> scales;
  std::span<std::uint8_t> sub_shifts;
};

/// Read-only views of the three streams.
struct block_const_buffers {
  std::span<const std::uint8_t> elements;
  std::span<const std::uint8_t> scales;
  std::span<const std::uint8_t> sub_shifts;
};

/// An owning packed tensor of format B (rows x row_length values).
///
///     auto t = quark::make_block_tensor<quark::mxfp4_e2m1>(data, 64);  // see mx.hpp
///     std::vector<float> back(data.size());
///     quark::dequantize(t, std::span(back));
template <block_format_type B>
struct block_tensor {
  block_storage_layout layout;
  std::vector<std::uint8_t> elements;
  std::vector<std::uint8_t> scales;
  std::vector<std::uint8_t> sub_shifts;

  explicit block_tensor(const block_storage_layout& l)
      : layout(l),
        elements(l.element_bytes),
        scales(l.scale_bytes),
        sub_shifts(l.sub_shift_bytes) {}
  block_buffers buffers() noexcept { return {elements, scales, sub_shifts}; }
  block_const_buffers buffers() const noexcept { return {elements, scales, sub_shifts}; }
};

/// Unpacks the element codes of a packed stream, one code per byte (codes.size() elements).
///
///     std::vector<std::uint8_t> codes(64);
///     quark::unpack_block_elements<quark::mxfp4_e2m1>(t.elements, codes);
template <block_format_type B>
void unpack_block_elements(std::span<const std::uint8_t> packed,
                           std::span<std::uint8_t> codes) noexcept {
  static_assert(block_traits<B>::element_bits <= 8, "element codes wider than a byte");
  unpack_codes(packed, block_traits<B>::element_bits, codes);
}

/// Packs element codes (one per byte) into the LSB-first element stream.
template <block_format_type B>
void pack_block_elements(std::span<const std::uint8_t> codes,
                         std::span<std::uint8_t> packed) noexcept {
  static_assert(block_traits<B>::element_bits <= 8, "element codes wider than a byte");
  pack_codes(codes, block_traits<B>::element_bits, packed);
}

namespace detail {
/// Writes `bits` (<= 8) of `code` at stream index i of an LSB-first stream (bytes pre-zeroed).
inline void put_code(std::span<std::uint8_t> s, std::size_t i, int bits,
                     std::uint32_t code) noexcept {
  const std::size_t bit = i * static_cast<std::size_t>(bits);
  const std::size_t byte = bit / 8u;
  const auto off = static_cast<unsigned>(bit % 8u);
  const std::uint32_t v = code & ((1u << bits) - 1u);
  s[byte] = static_cast<std::uint8_t>(s[byte] | ((v << off) & 0xFFu));
  if (off + static_cast<unsigned>(bits) > 8u) {
    s[byte + 1] = static_cast<std::uint8_t>(s[byte + 1] | (v >> (8u - off)));
  }
}
/// Reads `bits` (<= 8) at stream index i of an LSB-first stream.
inline std::uint32_t get_code(std::span<const std::uint8_t> s, std::size_t i, int bits) noexcept {
  const std::size_t bit = i * static_cast<std::size_t>(bits);
  const std::size_t byte = bit / 8u;
  const auto off = static_cast<unsigned>(bit % 8u);
  std::uint32_t v = static_cast<std::uint32_t>(s[byte]) >> off;
  if (off + static_cast<unsigned>(bits) > 8u) {
    v |= static_cast<std::uint32_t>(s[byte + 1]) << (8u - off);
  }
  return v & ((1u << bits) - 1u);
}
/// Writes the sign_magnitude<m> code of v, a value on the grid of quanta 2^(base - 127 - m + 1)
/// (base: a biased float32 exponent field) with at most m magnitude bits, at stream index i.
inline void put_sign_magnitude(std::span<std::uint8_t> s, std::size_t i, int m, int base,
                               float v) noexcept {
  const float qf = mul_pow2(v, -(base - 127 - m + 1));  // an exact small integer
  const bool neg = (float_bits(qf) >> 31) != 0u;
  const auto mag = static_cast<std::uint32_t>(neg ? -qf : qf);
  put_code(s, i, m + 1, mag | (neg ? (1u << m) : 0u));
}
/// Reads the sign_magnitude<m> code at stream index i as a value in quanta of
/// 2^(base - 127 - m + 1); a base of 0xFF (a NaN block) gives NaN.
inline float get_sign_magnitude(std::span<const std::uint8_t> s, std::size_t i, int m,
                                int base) noexcept {
  if (base == 0xFF)
    return std::numeric_limits<float>::quiet_NaN();
  const std::uint32_t code = get_code(s, i, m + 1);
  const float mag = static_cast<float>(code & ((1u << m) - 1u));
  return mul_pow2(with_sign(mag, ((code >> m) & 1u) != 0u), base - 127 - m + 1);
}
/// Throws quark::invalid_argument when the buffers are smaller than the layout needs.
inline void check_buffers(const block_storage_layout& l, std::size_t values, std::size_t elements,
                          std::size_t scales, std::size_t sub_shifts) {
  if (values != l.rows * l.row_length || elements < l.element_bytes || scales < l.scale_bytes ||
      sub_shifts < l.sub_shift_bytes) {
    QUARK_THROW(invalid_argument("quark.block.storage_size",
                                 "buffers do not match the block storage layout"));
  }
}
}  // namespace detail

/// Dequantizes an owning packed tensor; out.size() must be rows * row_length.
template <block_format_type B>
void dequantize(const block_tensor<B>& t, std::span<float> out) {
  dequantize<B>(t.buffers(), t.layout.row_length, out);
}

}  // namespace quark
