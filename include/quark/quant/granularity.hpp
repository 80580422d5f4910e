// SPDX-License-Identifier: MIT
// Granularity (quark-spec §5) and the tensor shapes the quantization kernels walk. A tensor is
// N-dimensional and row-major contiguous; around the quantization axis it is seen as
// [outer, channels, inner]. Per-channel parameters have `channels` entries; per-block parameters
// follow ONNX opset 21 blocked Q/DQ: the parameter tensor has the input's shape with the axis
// dimension replaced by ceil(channels / block_size) (the last block may be partial).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <variant>

#include <quark/config.hpp>
#include <quark/core/error.hpp>

namespace quark {

/// One scale and zero point for the whole tensor.
struct per_tensor {};
/// One scale and zero point per index of `axis` (negative axes count from the end).
struct per_channel {
  std::ptrdiff_t axis = 0;
};
/// One scale and zero point per `block_size` consecutive indices of `axis` (ONNX blocked Q/DQ;
/// Quark's per-group). The last block of the axis may be shorter.
struct per_block {
  std::ptrdiff_t axis = -1;
  std::size_t block_size = 32;
};

/// The granularity of a tensor's quantization parameters.
///
///     quark::granularity g = quark::per_block{.axis = -1, .block_size = 128};
using granularity = std::variant<per_tensor, per_channel, per_block>;

/// The shape of a row-major contiguous tensor of rank <= 8.
///
///     quark::tensor_shape s{2, 3, 4};                  // 24 elements
///     quark::tensor_shape t({2, 3}, {3, 1});           // strides checked: contiguous
class tensor_shape {
 public:
  static constexpr std::size_t max_rank = 8;

  tensor_shape() = default;
  tensor_shape(std::initializer_list<std::size_t> dims) { assign(dims); }
  explicit tensor_shape(std::span<const std::size_t> dims) { assign(dims); }
  /// Shape plus element strides; throws "quark.quant.non_contiguous" unless the strides are the
  /// row-major contiguous ones (a dimension of extent 1 may carry any stride).
  tensor_shape(std::span<const std::size_t> dims, std::span<const std::ptrdiff_t> strides) {
    assign(dims);
    if (strides.size() != dims.size()) {
      QUARK_THROW(invalid_argument("quark.quant.bad_shape", "strides and shape differ in rank"));
    }
    std::ptrdiff_t expect = 1;
    for (std::size_t k = dims.size(); k-- > 0;) {
      if (dims[k] != 1 && strides[k] != expect) {
        QUARK_THROW(invalid_argument("quark.quant.non_contiguous",
                                     "the kernels need a row-major contiguous tensor"));
      }
      expect *= static_cast<std::ptrdiff_t>(dims[k]);
    }
  }
  tensor_shape(std::initializer_list<std::size_t> dims,
               std::initializer_list<std::ptrdiff_t> strides)
      : tensor_shape(std::span<const std::size_t>(dims.begin(), dims.size()),
                     std::span<const std::ptrdiff_t>(strides.begin(), strides.size())) {}

  std::size_t rank() const noexcept { return rank_; }
  std::size_t operator[](std::size_t k) const noexcept { return dims_[k]; }
  /// Number of elements (1 for rank 0).
  std::size_t size() const noexcept {
    std::size_t n = 1;
    for (std::size_t k = 0; k < rank_; ++k)
      n *= dims_[k];
    return n;
  }
  /// `axis` in [-rank, rank) made non-negative; throws "quark.quant.bad_axis" otherwise.
  std::size_t normalize_axis(std::ptrdiff_t axis) const {
    const auto r = static_cast<std::ptrdiff_t>(rank_);
    if (axis < -r || axis >= r) {
      QUARK_THROW(invalid_argument(
          "quark.quant.bad_axis",
          "axis " + std::to_string(axis) + " out of range for rank " + std::to_string(rank_)));
    }
    return static_cast<std::size_t>(axis < 0 ? axis + r : axis);
  }

 private:
  template <class Range>
  void assign(const Range& dims) {
    if (dims.size() > max_rank) {
      QUARK_THROW(invalid_argument("quark.quant.bad_shape", "rank above 8"));
    }
    rank_ = dims.size();
    std::size_t k = 0;
    for (std::size_t d : dims)
      dims_[k++] = d;
  }
  std::array<std::size_t, max_rank> dims_{};
  std::size_t rank_ = 0;
};

namespace detail {

/// The tensor seen around one axis, and how parameters are indexed.
struct qdq_layout {
  enum class kind : std::uint8_t { tensor, channel, block } k = kind::tensor;
  std::size_t size = 0;  ///< elements
  std::size_t outer = 1;
  std::size_t channels = 1;  ///< extent of the axis
  std::size_t inner = 1;
  std::size_t block = 1;   ///< block size (per_block)
  std::size_t blocks = 1;  ///< ceil(channels / block)
  std::size_t params = 1;  ///< number of scales expected
};

inline qdq_layout make_layout(const tensor_shape& shape, const granularity& g) {
  qdq_layout l;
  l.size = shape.size();
  if (std::holds_alternative<per_tensor>(g))
    return l;
  const std::ptrdiff_t axis_in = std::holds_alternative<per_channel>(g)
                                     ? std::get<per_channel>(g).axis
                                     : std::get<per_block>(g).axis;
  const std::size_t axis = shape.normalize_axis(axis_in);
  for (std::size_t k = 0; k < axis; ++k)
    l.outer *= shape[k];
  l.channels = shape[axis];
  for (std::size_t k = axis + 1; k < shape.rank(); ++k)
    l.inner *= shape[k];
  if (std::holds_alternative<per_channel>(g)) {
    l.k = qdq_layout::kind::channel;
    l.params = l.channels;
  } else {
    l.k = qdq_layout::kind::block;
    l.block = std::get<per_block>(g).block_size;
    if (l.block == 0) {
      QUARK_THROW(invalid_argument("quark.quant.bad_block_size", "block_size must be positive"));
    }
    l.blocks = (l.channels + l.block - 1) / l.block;
    l.params = l.outer * l.blocks * l.inner;
  }
  return l;
}

/// Calls f(first, count, param_index, param_stride) for every run of elements in
/// [begin, end) that shares one parameter (stride 0) or walks the parameters one per element
/// (stride 1). Runs never cross the range ends, so threads can split [0, size) freely.
template <class F>
QUARK_ALWAYS_INLINE void for_each_run(const qdq_layout& l, std::size_t begin, std::size_t end,
                                      F&& f) {
  using kind = qdq_layout::kind;
  std::size_t i = begin;
  if (l.k == kind::tensor) {
    if (begin < end)
      f(begin, end - begin, std::size_t{0}, 0);
    return;
  }
  const std::size_t C = l.channels;
  const std::size_t inner = l.inner;
  while (i < end) {
    std::size_t len;
    if (l.k == kind::channel) {
      if (inner == 1) {  // the axis is the last one: parameters vary per element
        const std::size_t c = i % C;
        len = C - c < end - i ? C - c : end - i;
        f(i, len, c, 1);
      } else {
        const std::size_t oc = i / inner;
        const std::size_t j = i - oc * inner;
        len = inner - j < end - i ? inner - j : end - i;
        f(i, len, oc % C, 0);
      }
    } else {
      if (inner == 1) {  // blocks are contiguous runs of the last axis
        const std::size_t row = i / C;
        const std::size_t c = i - row * C;
        const std::size_t b = c / l.block;
        const std::size_t stop = (b + 1) * l.block < C ? (b + 1) * l.block : C;
        len = stop - c < end - i ? stop - c : end - i;
        f(i, len, row * l.blocks + b, 0);
      } else {
        const std::size_t oc = i / inner;
        const std::size_t j = i - oc * inner;
        const std::size_t o = oc / C;
        const std::size_t c = oc - o * C;
        len = inner - j < end - i ? inner - j : end - i;
        f(i, len, (o * l.blocks + c / l.block) * inner + j, 1);
      }
    }
    i += len;
  }
}

}  // namespace detail
}  // namespace quark
