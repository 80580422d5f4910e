// SPDX-License-Identifier: MIT
// Per-channel and per-group composition of any observer (style.md §3.9: composition, not a
// flag). A tensor of shape [d0, ..., dk] with axis a is viewed as [outer, C, inner]; per_channel
// keeps one observer per index along the axis (quark-spec §5.2), per_group one per block of
// `group_size` consecutive indices along the axis for every position of the other dimensions
// (quark-spec §5.3, ONNX blocked quantization). Batches are streamed; only the observers' state
// and a bounded gather buffer are kept.
#pragma once

#include <algorithm>
#include <cstddef>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <quark/observer/range_stats.hpp>

namespace quark {

/// A tensor shape seen as [outer, channels, inner] around one axis.
struct axis_layout {
  std::size_t outer = 1;
  std::size_t channels = 1;
  std::size_t inner = 1;

  /// Throws "quark.calib.bad_axis" if `axis` is not in [-rank, rank).
  static axis_layout from_shape(std::span<const std::size_t> shape, std::ptrdiff_t axis) {
    const auto rank = static_cast<std::ptrdiff_t>(shape.size());
    if (axis < -rank || axis >= rank) {
      detail::throw_invalid(
          "quark.calib.bad_axis",
          "axis " + std::to_string(axis) + " out of range for rank " + std::to_string(rank));
    }
    const auto a = static_cast<std::size_t>(axis < 0 ? axis + rank : axis);
    axis_layout l;
    for (std::size_t i = 0; i < a; ++i)
      l.outer *= shape[i];
    l.channels = shape[a];
    for (std::size_t i = a + 1; i < shape.size(); ++i)
      l.inner *= shape[i];
    return l;
  }
  [[nodiscard]] std::size_t size() const noexcept { return outer * channels * inner; }
  friend constexpr bool operator==(const axis_layout&, const axis_layout&) = default;
};

namespace detail {
inline void check_layout(const axis_layout& l, std::size_t n) {
  if (l.size() != n) {
    throw_invalid(
        "quark.calib.shape_mismatch",
        "data has " + std::to_string(n) + " values but the shape has " + std::to_string(l.size()));
  }
}
}  // namespace detail

/// One observer of type O per channel along an axis.
///
/// ```cpp
/// quark::per_channel_observer<quark::minmax_observer> obs{64};       // 64 output channels
/// std::size_t shape[] = {64, 3, 3, 3};
/// obs.observe(weights, shape, 0);                           // Conv weight, axis 0
/// quark::range_stats c5 = obs[5].stats();
/// ```
template <observer O>
class per_channel_observer {
 public:
  /// No channel yet (a target for deserialisation).
  per_channel_observer() = default;
  explicit per_channel_observer(std::size_t channels, const O& prototype = O{})
      : obs_(channels, prototype) {}
  /// From existing per-channel observers (e.g. restored from JSON).
  explicit per_channel_observer(std::vector<O> observers) : obs_(std::move(observers)) {}

  [[nodiscard]] std::size_t channels() const noexcept { return obs_.size(); }
  [[nodiscard]] const O& operator[](std::size_t c) const noexcept { return obs_[c]; }
  [[nodiscard]] O& operator[](std::size_t c) noexcept { return obs_[c]; }
  [[nodiscard]] std::span<const O> observers() const noexcept { return obs_; }

  /// Observes a batch of the given shape; shape[axis] must equal channels().
  void observe(std::span<const float> x, std::span<const std::size_t> shape, std::ptrdiff_t axis) {
    observe(x, axis_layout::from_shape(shape, axis));
  }

  void observe(std::span<const float> x, const axis_layout& l) {
    detail::check_layout(l, x.size());
    if (l.channels != obs_.size()) {
      detail::throw_invalid("quark.calib.shape_mismatch", "axis has " + std::to_string(l.channels) +
                                                              " channels, observer has " +
                                                              std::to_string(obs_.size()));
    }
    const std::size_t row = l.channels * l.inner;
    if (l.inner >= min_run) {
      // 1. Long contiguous runs: each goes straight to its channel's observer.
      for (std::size_t o = 0; o < l.outer; ++o) {
        for (std::size_t c = 0; c < l.channels; ++c)
          obs_[c].observe(x.subspan(o * row + c * l.inner, l.inner));
      }
      return;
    }
    // 2. Short runs: gather each channel's values into a bounded buffer.
    std::vector<float> buf;
    buf.reserve(std::min(gather_chunk, l.outer * l.inner));
    for (std::size_t c = 0; c < l.channels; ++c) {
      for (std::size_t o = 0; o < l.outer; ++o) {
        const float* p = x.data() + o * row + c * l.inner;
        buf.insert(buf.end(), p, p + l.inner);
        if (buf.size() >= gather_chunk) {
          obs_[c].observe(buf);
          buf.clear();
        }
      }
      if (!buf.empty()) {
        obs_[c].observe(buf);
        buf.clear();
      }
    }
  }

  /// Merges channel by channel (O must be mergeable).
  void merge(const per_channel_observer& other) requires mergeable_observer<O> {
    if (other.obs_.size() != obs_.size()) {
      detail::throw_invalid("quark.calib.merge_mismatch", "different channel counts");
    }
    for (std::size_t c = 0; c < obs_.size(); ++c)
      obs_[c].merge(other.obs_[c]);
  }

  void reset() {
    for (O& o : obs_)
      o.reset();
  }

 private:
  static constexpr std::size_t min_run = 64;
  static constexpr std::size_t gather_chunk = 8192;
  std::vector<O> obs_;
};

/// One observer per block of `group_size` consecutive indices along an axis (the last block may
/// be shorter), for every position of the other dimensions. Block b of the layout
/// [outer, C, inner] is (o, g, i) -> b = (o * G + g) * inner + i with G = ceil(C / group_size).
///
/// ```cpp
/// quark::per_group_observer<quark::minmax_observer> obs{128};        // MatMulNBits-style groups
/// of 128 std::size_t shape[] = {4096, 11008}; obs.observe(w, shape, 0); // blocks along K = axis 0
/// ```
template <observer O>
class per_group_observer {
 public:
  explicit per_group_observer(std::size_t group_size, const O& prototype = O{})
      : group_size_(group_size), prototype_(prototype) {
    if (group_size == 0)
      detail::throw_config("quark.calib.bad_option", "group size must be positive");
  }

  [[nodiscard]] std::size_t group_size() const noexcept { return group_size_; }
  [[nodiscard]] std::size_t groups() const noexcept { return obs_.size(); }
  [[nodiscard]] const O& operator[](std::size_t b) const noexcept { return obs_[b]; }
  [[nodiscard]] std::span<const O> observers() const noexcept { return obs_; }
  [[nodiscard]] const axis_layout& layout() const noexcept { return layout_; }

  /// Observes a batch; every batch must have the same shape (else "quark.calib.shape_mismatch").
  void observe(std::span<const float> x, std::span<const std::size_t> shape, std::ptrdiff_t axis) {
    observe(x, axis_layout::from_shape(shape, axis));
  }

  void observe(std::span<const float> x, const axis_layout& l) {
    detail::check_layout(l, x.size());
    const std::size_t g = (l.channels + group_size_ - 1) / group_size_;
    if (obs_.empty()) {
      layout_ = l;
      obs_.assign(l.outer * g * l.inner, prototype_);
    } else if (!(l == layout_)) {
      detail::throw_invalid("quark.calib.shape_mismatch", "per_group batches must keep one shape");
    }
    const std::size_t row = l.channels * l.inner;
    std::vector<float> buf;
    for (std::size_t o = 0; o < l.outer; ++o) {
      for (std::size_t k = 0; k < g; ++k) {
        const std::size_t c0 = k * group_size_;
        const std::size_t c1 = std::min(l.channels, c0 + group_size_);
        if (l.inner == 1) {
          obs_[o * g + k].observe(x.subspan(o * row + c0, c1 - c0));
          continue;
        }
        for (std::size_t i = 0; i < l.inner; ++i) {
          buf.clear();
          for (std::size_t c = c0; c < c1; ++c)
            buf.push_back(x[o * row + c * l.inner + i]);
          obs_[(o * g + k) * l.inner + i].observe(buf);
        }
      }
    }
  }

  void merge(const per_group_observer& other) requires mergeable_observer<O> {
    if (other.obs_.empty())
      return;
    if (obs_.empty()) {
      *this = other;
      return;
    }
    if (!(other.layout_ == layout_) || other.group_size_ != group_size_) {
      detail::throw_invalid("quark.calib.merge_mismatch",
                            "per_group observers of different layouts");
    }
    for (std::size_t b = 0; b < obs_.size(); ++b)
      obs_[b].merge(other.obs_[b]);
  }

  void reset() { obs_.clear(); }

 private:
  std::size_t group_size_;
  O prototype_;
  axis_layout layout_{};
  std::vector<O> obs_;
};

}  // namespace quark
