// SPDX-License-Identifier: MIT
// Packed storage of a tensor blocked along any axis. The packed layout (storage.hpp) is defined
// for rows blocked along their last axis; a tensor blocked along another axis is stored as the
// tensor with that axis moved last (the other axes keep their order): rows = the product of the
// other extents, row_length = the blocked extent, the last block of each row possibly partial.
// This is the layout AMD Quark's custom ops compute in (axis moved last), so the scales of row r
// belong to the r-th position of the other axes in row-major order. A blocked axis other than the
// last costs one moved copy of the tensor (allocated here: storage is not a streaming kernel).
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include <quark/block/bfp.hpp>
#include <quark/block/detail/block_loop.hpp>
#include <quark/block/micro_exponent.hpp>
#include <quark/block/mx.hpp>
#include <quark/block/storage.hpp>

namespace quark {

namespace detail {
/// Copies a tensor seen as outer x length x inner to (outer * inner) rows of `length` values
/// (to_last) or back. src and dst must not overlap.
inline void move_blocked_axis(const float* src, float* dst, const block_layout& l,
                              bool to_last) noexcept {
  for (std::size_t o = 0; o < l.outer; ++o) {
    for (std::size_t a = 0; a < l.length; ++a) {
      for (std::size_t i = 0; i < l.inner; ++i) {
        const std::size_t t = (o * l.length + a) * l.inner + i;  // tensor order
        const std::size_t r = (o * l.inner + i) * l.length + a;  // axis-last order
        if (to_last) {
          dst[r] = src[t];
        } else {
          dst[t] = src[r];
        }
      }
    }
  }
}

inline block_layout layout_of_shape(std::span<const std::size_t> shape, std::size_t axis) {
  std::size_t n = 1;
  for (const std::size_t d : shape)
    n *= d;
  return make_block_layout(shape, axis, n);
}
}  // namespace detail

/// The storage layout of a row-major tensor of `shape` blocked along `axis` in format B. Throws
/// quark::invalid_argument ("quark.block.axis") for an axis out of range.
///
///     std::size_t shape[] = {64, 40};
///     auto l = quark::block_storage_layout_along<quark::mxfp4_e2m1>(shape, 0);  // 40 rows of 64
template <block_format_type B>
block_storage_layout block_storage_layout_along(std::span<const std::size_t> shape,
                                                std::size_t axis) {
  const detail::block_layout l = detail::layout_of_shape(shape, axis);
  return block_storage_layout_for<B>(l.outer * l.inner, l.length);
}

/// Quantizes a row-major tensor blocked along `axis` into packed storage (layout above); `opt` is
/// the family's options (mx_options, bfp_options or micro_exponent_options). Throws as quantize.
///
///     std::size_t shape[] = {64, 40};
///     auto l = quark::block_storage_layout_along<quark::mxfp4_e2m1>(shape, 0);
///     std::vector<std::uint8_t> e(l.element_bytes), s(l.scale_bytes);
///     quark::quantize_along<quark::mxfp4_e2m1>(x, shape, 0, {e, s, {}});
template <block_format_type B, class... Options>
  requires(sizeof...(Options) <= 1)
void quantize_along(std::span<const float> in, std::span<const std::size_t> shape, std::size_t axis,
                    block_buffers out, const Options&... opt) {
  const detail::block_layout l = detail::make_block_layout(shape, axis, in.size());
  if (l.inner == 1) {
    quantize<B>(in, l.length, out, opt...);
    return;
  }
  std::vector<float> moved(in.size());
  detail::move_blocked_axis(in.data(), moved.data(), l, true);
  quantize<B>(std::span<const float>(moved), l.length, out, opt...);
}

/// Dequantizes packed storage of a tensor blocked along `axis` back to its row-major order.
template <block_format_type B>
void dequantize_along(block_const_buffers in, std::span<const std::size_t> shape, std::size_t axis,
                      std::span<float> out) {
  const detail::block_layout l = detail::make_block_layout(shape, axis, out.size());
  if (l.inner == 1) {
    dequantize<B>(in, l.length, out);
    return;
  }
  std::vector<float> moved(out.size());
  dequantize<B>(in, l.length, std::span<float>(moved));
  detail::move_blocked_axis(moved.data(), out.data(), l, false);
}

}  // namespace quark
