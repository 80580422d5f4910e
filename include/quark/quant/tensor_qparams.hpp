// SPDX-License-Identifier: MIT
// tensor_qparams<D>: a non-owning view of the scales, zero points, granularity and clip bounds
// that quantize / dequantize / fake_quantize apply to one tensor, plus the argument checks the
// kernels rely on (bad runtime input throws quark::invalid_argument; the kernels then never fail).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include <quark/core/concepts.hpp>
#include <quark/core/error.hpp>
#include <quark/dtype/traits.hpp>
#include <quark/quant/granularity.hpp>
#include <quark/scale/qparams.hpp>

namespace quark {

namespace detail {
template <quantized_type D>
constexpr std::int64_t type_min() noexcept {
  if constexpr (integral_data_type<D>)
    return dtype_traits<D>::min_value;
  else
    return 0;
}
template <quantized_type D>
constexpr std::int64_t type_max() noexcept {
  if constexpr (integral_data_type<D>)
    return dtype_traits<D>::max_value;
  else
    return 0;
}
}  // namespace detail

/// The parameters of one tensor's quantization. Scales are float32 values (convert any scale
/// kind with `scale_traits<S>::to_float`); an empty `zero_point` means 0 everywhere.
///
///     float s[3] = {0.1f, 0.2f, 0.4f};
///     std::int32_t z[3] = {0, 0, 0};
///     quark::tensor_qparams<std::int8_t> p{s, z, quark::per_channel{0}};
template <quantized_type D>
struct tensor_qparams {
  std::span<const float> scale;
  std::span<const zero_point_t<D>> zero_point = {};
  granularity gran = per_tensor{};
  /// Integer clip bounds (inside the type range); ignored for float types.
  std::int64_t qmin = detail::type_min<D>();
  std::int64_t qmax = detail::type_max<D>();
};

namespace detail {

/// Checks sizes, scales and bounds; returns the layout the kernels walk.
template <quantized_type D>
qdq_layout check_qdq(const tensor_shape& shape, const tensor_qparams<D>& p, std::size_t in_size,
                     std::size_t out_size, std::size_t expected_out) {
  const qdq_layout l = make_layout(shape, p.gran);
  if (in_size != l.size || out_size < expected_out) {
    QUARK_THROW(invalid_argument(
        "quark.quant.size_mismatch",
        "input has " + std::to_string(in_size) + " elements, shape " + std::to_string(l.size) +
            "; output " + std::to_string(out_size) + " < " + std::to_string(expected_out)));
  }
  if (p.scale.size() != l.params) {
    QUARK_THROW(invalid_argument(
        "quark.quant.param_count",
        "expected " + std::to_string(l.params) + " scales, got " + std::to_string(p.scale.size())));
  }
  if (!p.zero_point.empty() && p.zero_point.size() != l.params) {
    QUARK_THROW(
        invalid_argument("quark.quant.param_count", "zero points and scales differ in count"));
  }
  for (float s : p.scale) {
    if (!(s != 0.0f && s - s == 0.0f)) {
      QUARK_THROW(invalid_argument("quark.quant.bad_scale", "scales must be finite and non-zero"));
    }
  }
  if constexpr (integral_data_type<D>) {
    if (p.qmin > p.qmax || p.qmin < type_min<D>() || p.qmax > type_max<D>()) {
      QUARK_THROW(invalid_argument("quark.quant.bad_clip", "clip bounds outside the type range"));
    }
    for (auto z : p.zero_point) {
      if (z < type_min<D>() || z > type_max<D>()) {
        QUARK_THROW(
            invalid_argument("quark.quant.bad_zero_point", "zero point outside the type range"));
      }
    }
  }
  return l;
}

/// Checks `p` for `n` elements of `shape` (as check_qdq) and writes each element's scale and zero
/// point (0 when there are none) into `scale` and `zp` (size n each), for per-element algorithms.
template <quantized_type D>
void expand_qparams(const tensor_shape& shape, const tensor_qparams<D>& p, std::size_t n,
                    std::span<double> scale, std::span<double> zp) {
  const qdq_layout l = check_qdq(shape, p, n, n, n);
  for_each_run(l, 0, l.size, [&](std::size_t i, std::size_t len, std::size_t pi, int st) {
    for (std::size_t k = 0; k < len; ++k) {
      const std::size_t c = pi + (st != 0 ? k : 0);
      scale[i + k] = static_cast<double>(p.scale[c]);
      zp[i + k] = p.zero_point.empty() ? 0.0 : static_cast<double>(p.zero_point[c]);
    }
  });
}

}  // namespace detail
}  // namespace quark
