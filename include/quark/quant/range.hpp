// SPDX-License-Identifier: MIT
// Per-group ranges of a tensor and the parameters computed from them ("dynamic" quantization,
// is_dynamic=True in Quark's specs): the min and max of each parameter group of a granularity,
// then compute_qparams per group. NaN propagates into the range (so compute_qparams reports
// "quark.qparams.nan_range", as Quark's min/max path raises "NaN detected").
#pragma once

#include <cstddef>
#include <limits>
#include <span>
#include <vector>

#include <quark/core/concepts.hpp>
#include <quark/quant/granularity.hpp>
#include <quark/quant/tensor_qparams.hpp>
#include <quark/scale/qparams.hpp>

namespace quark {

/// Number of parameter groups (scales) of granularity `g` on `shape`.
///
///     auto n = quark::param_count(quark::tensor_shape{8, 256}, quark::per_block{1, 128});  // 16
inline std::size_t param_count(const tensor_shape& shape, const granularity& g) {
  return detail::make_layout(shape, g).params;
}

/// The [min, max] of every parameter group of x; `out.size()` must be param_count(shape, g).
///
///     std::vector<quark::value_range> r(quark::param_count(shape, g));
///     quark::group_ranges(shape, x, g, r);
/// Throws "quark.quant.size_mismatch" / "quark.quant.param_count" on bad sizes.
inline void group_ranges(const tensor_shape& shape, std::span<const float> x, const granularity& g,
                         std::span<value_range> out) {
  const detail::qdq_layout l = detail::make_layout(shape, g);
  if (x.size() != l.size) {
    QUARK_THROW(invalid_argument("quark.quant.size_mismatch", "input size differs from shape"));
  }
  if (out.size() != l.params) {
    QUARK_THROW(invalid_argument("quark.quant.param_count", "one range per parameter group"));
  }
  constexpr float inf = std::numeric_limits<float>::infinity();
  for (auto& r : out)
    r = {inf, -inf};
  // NaN-propagating min / max: once a group holds NaN it stays NaN.
  auto update = [](value_range& r, float v) {
    if (v != v || r.min != r.min) {
      r = {v + r.min, v + r.max};  // NaN
      return;
    }
    r.min = v < r.min ? v : r.min;
    r.max = v > r.max ? v : r.max;
  };
  detail::for_each_run(l, 0, l.size, [&](std::size_t i, std::size_t len, std::size_t p, int st) {
    for (std::size_t k = 0; k < len; ++k)
      update(out[st == 0 ? p : p + k], x[i + k]);
  });
  for (auto& r : out) {
    if (r.min > r.max)
      r = {0.0f, 0.0f};  // empty group (zero-size axis)
  }
}

/// Parameters of every group from the tensor's own ranges, written as float scale values and
/// zero points (`scales.size() == zero_points.size() == param_count(shape, g)`).
///
///     std::vector<float> s(n); std::vector<std::int32_t> z(n);
///     quark::dynamic_qparams<std::int8_t>(shape, x, quark::per_channel{0}, {}, s, z);
template <quantized_type D, scale_type Scale = float_scale>
void dynamic_qparams(const tensor_shape& shape, std::span<const float> x, const granularity& g,
                     const qparam_options& o, std::span<float> scales,
                     std::span<zero_point_t<D>> zero_points) {
  std::vector<value_range> ranges(param_count(shape, g));
  group_ranges(shape, x, g, ranges);
  if (scales.size() != ranges.size() || zero_points.size() != ranges.size()) {
    QUARK_THROW(invalid_argument("quark.quant.param_count", "one scale per parameter group"));
  }
  for (std::size_t k = 0; k < ranges.size(); ++k) {
    const auto p = compute_qparams<D, Scale>(ranges[k], o);
    scales[k] = p.scale_value();
    zero_points[k] = p.zero_point;
  }
}

}  // namespace quark
