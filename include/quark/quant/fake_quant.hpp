// SPDX-License-Identifier: MIT
// Fake quantization (quantize then dequantize, float32 -> float32) without materialising the
// codes: per tensor, per channel or per block on N-d contiguous tensors, and the per-tensor
// `fake_quant` functor that adapters (Eigen unaryExpr, xt::vectorize) apply element by element.
// Bit-identical to ONNX QuantizeLinear -> DequantizeLinear under the default policy.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include <quark/config.hpp>
#include <quark/core/concepts.hpp>
#include <quark/quant/quantize.hpp>
#include <quark/scale/qparams.hpp>
#include <quark/scale/traits.hpp>

namespace quark {

namespace detail {

/// quantize-dequantize of one element.
template <quantized_type D, quant_policy P>
struct fake_of {
  float lo, hi;
  double wlo, whi;
  QUARK_ALWAYS_INLINE float operator()(float x, float s, float inv,
                                       zero_point_t<D> z) const noexcept {
    if constexpr (narrow_int_v<D>) {
      // (q - zp) * s with q - zp computed exactly as the clamped, rounded level.
      const float zf = static_cast<float>(z);
      return int_level<P>(x, s, inv, lo - zf, hi - zf) * s;
    } else if constexpr (integral_data_type<D>) {
      const double v = int_code_wide<P>(x, s, inv, static_cast<double>(z), wlo, whi);
      if constexpr (P.nan == nan_output::propagate) {
        if (v != v)
          return x;  // NaN in, NaN out
      }
      return static_cast<float>(static_cast<std::int64_t>(v) - static_cast<std::int64_t>(z)) * s;
    } else {
      return (to_float(float_code<D, P>(x, s, inv, z)) - z) * s;
    }
  }
};

}  // namespace detail

/// y = dequantize(quantize(x)) with the parameters of `p`; x and y may be the same buffer.
///
///     float s[2] = {0.1f, 0.05f};
///     quark::tensor_qparams<quark::int4> p{s, {}, quark::per_channel{0}};
///     quark::fake_quantize<quark::int4>(quark::tensor_shape{2, 64}, x, p, y);
/// Throws quark::invalid_argument on size, scale, zero-point or clip-bound errors.
template <quantized_type D, quant_policy P = quant_policy{}>
  requires(P.round != rounding::stochastic)
void fake_quantize(const tensor_shape& shape, std::span<const float> x, const tensor_qparams<D>& p,
                   std::span<float> y, threading t = {}) {
  const detail::qdq_layout l = detail::check_qdq(shape, p, x.size(), y.size(), x.size());
  const detail::fake_of<D, P> fq{static_cast<float>(p.qmin), static_cast<float>(p.qmax),
                                 static_cast<double>(p.qmin), static_cast<double>(p.qmax)};
  const float* xs = x.data();
  float* ys = y.data();
  const float* s = p.scale.data();
  const zero_point_t<D>* zp = p.zero_point.empty() ? nullptr : p.zero_point.data();
  detail::parallel_for(l.size, t, [&](std::size_t b, std::size_t e) {
    detail::for_each_run(l, b, e, [&](std::size_t i, std::size_t len, std::size_t pi, int st) {
      const float* xi = xs + i;
      float* yi = ys + i;
      detail::for_run(len, s, zp, pi, st, [&](std::size_t k, float sc, float inv, auto z) {
        yi[k] = fq(xi[k], sc, inv, z);
      });
    });
  });
}

/// A per-tensor fake quantizer: a regular, copyable functor float -> float. Idempotent,
/// monotone (non-decreasing for a positive scale) and exact on grid values.
///
///     auto p = quark::compute_qparams<std::int8_t>({-1.f, 1.f}, {.sym =
///     quark::symmetry::symmetric}); quark::fake_quant<std::int8_t> fq(p); float y = fq(0.3f); //
///     0.29921258f (38 * 2/254) m.unaryExpr(fq);                            // Eigen, via
///     quark/adapt/eigen.hpp
template <quantized_type D, quant_policy P = quant_policy{}>
  requires(P.round != rounding::stochastic)
class fake_quant {
 public:
  using zero_point_type = zero_point_t<D>;

  /// Precondition: scale finite and non-zero; qmin <= zero point <= qmax inside the type range.
  constexpr explicit fake_quant(float scale, zero_point_type zero_point = zero_point_type{},
                                std::int64_t qmin = detail::type_min<D>(),
                                std::int64_t qmax = detail::type_max<D>()) noexcept
      : scale_(scale),
        inv_scale_(1.0f / scale),
        zero_point_(zero_point),
        fq_{static_cast<float>(qmin), static_cast<float>(qmax), static_cast<double>(qmin),
            static_cast<double>(qmax)} {}

  /// From compute_qparams' result (any scale kind: its exact float value is used).
  template <scale_type S>
  constexpr explicit fake_quant(const quant_params<S, zero_point_type>& p) noexcept
      : fake_quant(p.scale_value(), p.zero_point, integral_data_type<D> ? p.qmin : 0,
                   integral_data_type<D> ? p.qmax : 0) {}

  QUARK_ALWAYS_INLINE float operator()(float x) const noexcept {
    return fq_(x, scale_, inv_scale_, zero_point_);
  }

  /// Span overload; `out.size()` must equal `in.size()` (in and out may alias exactly).
  void operator()(std::span<const float> in, std::span<float> out) const noexcept {
    QUARK_ASSERT(in.size() == out.size(), "fake_quant: size mismatch");
    const float* xs = in.data();
    float* ys = out.data();
    const std::size_t n = in.size();
    for (std::size_t k = 0; k < n; ++k)
      ys[k] = (*this)(xs[k]);
  }

  constexpr float scale() const noexcept { return scale_; }
  constexpr zero_point_type zero_point() const noexcept { return zero_point_; }

 private:
  float scale_;
  float inv_scale_;
  zero_point_type zero_point_;
  detail::fake_of<D, P> fq_;
};

}  // namespace quark
