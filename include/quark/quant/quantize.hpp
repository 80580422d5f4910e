// SPDX-License-Identifier: MIT
// quantize (float32 -> storage) and dequantize (storage -> float32) of N-d contiguous tensors,
// per tensor, per channel or per block (quark-spec §1.3, §5; ONNX QuantizeLinear /
// DequantizeLinear opset 21). Integer targets: q = clamp(round(x / s) + zp, qmin, qmax) in the
// float domain, then the cast; dequantize: (q - zp) * s. Float targets (FP8, FP16, BF16, FP6,
// FP4): q = convert(x / s [+ zp]) saturating; dequantize (float(q) - zp) * s. Sub-byte types are
// stored unpacked (std::span<int4>) or packed in ONNX order (quantize_packed).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>

#include <quark/config.hpp>
#include <quark/core/concepts.hpp>
#include <quark/dtype/convert.hpp>
#include <quark/dtype/pack.hpp>
#include <quark/quant/detail/element.hpp>
#include <quark/quant/detail/packed_io.hpp>
#include <quark/quant/detail/parallel.hpp>
#include <quark/quant/detail/runs.hpp>
#include <quark/quant/granularity.hpp>
#include <quark/quant/quant_policy.hpp>
#include <quark/quant/tensor_qparams.hpp>

namespace quark {

namespace detail {

template <quantized_type D>
inline constexpr bool narrow_int_v = integral_data_type<D> && (dtype_traits<D>::bits <= 16);

/// quantize never stores a NaN code: propagate means "the zero point" there.
template <quant_policy P>
inline constexpr quant_policy storing_policy{
    P.round, P.apply, P.nan == nan_output::propagate ? nan_output::to_zero_point : P.nan,
    P.float_overflow};

/// The code of one element as D (the policy already made storable).
template <quantized_type D, quant_policy P>
struct code_of {
  float lo, hi;
  double wlo, whi;
  QUARK_ALWAYS_INLINE D operator()(float x, float s, float inv, zero_point_t<D> z) const noexcept {
    if constexpr (narrow_int_v<D> && P.round == rounding::nearest_even) {
      const float zf = static_cast<float>(z);
      const std::int32_t bias = std::bit_cast<std::int32_t>(12582912.0f) - z;
      return to_storage<D>(int_code_even_i32<P>(x, s, inv, lo - zf, hi - zf, bias));
    } else if constexpr (narrow_int_v<D>) {
      return to_storage<D>(int_code<P>(x, s, inv, static_cast<float>(z), lo, hi));
    } else if constexpr (integral_data_type<D>) {
      return to_storage<D>(int_code_wide<P>(x, s, inv, static_cast<double>(z), wlo, whi));
    } else {
      return float_code<D, P>(x, s, inv, z);
    }
  }
};

template <quantized_type D, quant_policy P>
code_of<D, P> make_code_of(const tensor_qparams<D>& p) noexcept {
  return {static_cast<float>(p.qmin), static_cast<float>(p.qmax), static_cast<double>(p.qmin),
          static_cast<double>(p.qmax)};
}

/// The real value of one stored code.
template <quantized_type D>
QUARK_ALWAYS_INLINE float value_of(D q, float s, zero_point_t<D> z) noexcept {
  if constexpr (narrow_int_v<D>) {
    return static_cast<float>(static_cast<std::int32_t>(code_value(q)) - z) * s;
  } else if constexpr (integral_data_type<D>) {
    return static_cast<float>(code_value(q) - static_cast<std::int64_t>(z)) * s;
  } else {
    return (to_float(q) - z) * s;
  }
}

template <quantized_type D>
QUARK_ALWAYS_INLINE std::uint8_t bits_of(D q) noexcept {
  return static_cast<std::uint8_t>(q.to_bits());
}

}  // namespace detail

/// Quantizes x (shape `shape`) into q, element i of q for element i of x.
///
///     float s = 0.1f;
///     quark::tensor_qparams<std::int8_t> p{std::span(&s, 1)};
///     quark::quantize<std::int8_t>(quark::tensor_shape{4}, x, p, std::span(q));
/// Throws quark::invalid_argument on size, scale, zero-point or clip-bound errors.
template <quantized_type D, quant_policy P = quant_policy{}>
  requires(P.round != rounding::stochastic)
void quantize(const tensor_shape& shape, std::span<const float> x, const tensor_qparams<D>& p,
              std::span<D> q, threading t = {}) {
  const detail::qdq_layout l = detail::check_qdq(shape, p, x.size(), q.size(), x.size());
  constexpr quant_policy PS = detail::storing_policy<P>;
  const auto code = detail::make_code_of<D, PS>(p);
  const float* xs = x.data();
  D* qs = q.data();
  const float* s = p.scale.data();
  const zero_point_t<D>* zp = p.zero_point.empty() ? nullptr : p.zero_point.data();
  detail::parallel_for(l.size, t, [&](std::size_t b, std::size_t e) {
    detail::for_each_run(l, b, e, [&](std::size_t i, std::size_t len, std::size_t pi, int st) {
      const float* xi = xs + i;
      D* qi = qs + i;
      detail::for_run(
          len, s, zp, pi, st,
          [&](std::size_t k, float sc, float inv, auto z) { qi[k] = code(xi[k], sc, inv, z); }, xi);
    });
  });
}

/// Quantizes a sub-byte type straight into its packed ONNX layout (packed_size(n, bits) bytes;
/// unused high bits of the last byte are cleared).
///
///     std::vector<std::uint8_t> packed(quark::packed_size(n, 4));
///     quark::quantize_packed<quark::int4>(shape, x, p, packed);
template <quantized_type D, quant_policy P = quant_policy{}>
  requires(dtype_traits<D>::bits < 8 && P.round != rounding::stochastic)
void quantize_packed(const tensor_shape& shape, std::span<const float> x,
                     const tensor_qparams<D>& p, std::span<std::uint8_t> packed, threading t = {}) {
  constexpr int bits = dtype_traits<D>::bits;
  const detail::qdq_layout l =
      detail::check_qdq(shape, p, x.size(), packed.size(), packed_size(x.size(), bits));
  constexpr quant_policy PS = detail::storing_policy<P>;
  const auto code = detail::make_code_of<D, PS>(p);
  const float* xs = x.data();
  std::uint8_t* out = packed.data();
  const float* s = p.scale.data();
  const zero_point_t<D>* zp = p.zero_point.empty() ? nullptr : p.zero_point.data();
  detail::parallel_for(l.size, t, [&](std::size_t b, std::size_t e) {
    std::uint8_t buf[256];
    detail::for_each_run(l, b, e, [&](std::size_t i, std::size_t len, std::size_t pi, int st) {
      detail::for_chunks<256>(
          len, pi, st, [&](std::size_t off, std::size_t n, std::size_t pj, int sj) {
            const float* xi = xs + i + off;
            detail::for_run(n, s, zp, pj, sj, [&](std::size_t k, float sc, float inv, auto z) {
              buf[k] = detail::bits_of(code(xi[k], sc, inv, z));
            });
            detail::write_packed(buf, n, bits, out, i + off);
          });
    });
  });
  const std::size_t used = l.size * static_cast<std::size_t>(bits);
  if (used % 8u != 0u) {
    out[used / 8u] = static_cast<std::uint8_t>(out[used / 8u] & ((1u << (used % 8u)) - 1u));
  }
}

/// Dequantizes q into y: (q - zp) * s for integers, (float(q) - zp) * s for float types.
///
///     quark::dequantize<std::int8_t>(shape, std::span<const std::int8_t>(q), p, std::span(y));
template <quantized_type D>
void dequantize(const tensor_shape& shape, std::span<const D> q, const tensor_qparams<D>& p,
                std::span<float> y, threading t = {}) {
  const detail::qdq_layout l = detail::check_qdq(shape, p, q.size(), y.size(), q.size());
  const D* qs = q.data();
  float* ys = y.data();
  const float* s = p.scale.data();
  const zero_point_t<D>* zp = p.zero_point.empty() ? nullptr : p.zero_point.data();
  detail::parallel_for(l.size, t, [&](std::size_t b, std::size_t e) {
    detail::for_each_run(l, b, e, [&](std::size_t i, std::size_t len, std::size_t pi, int st) {
      const D* qi = qs + i;
      float* yi = ys + i;
      detail::for_run(len, s, zp, pi, st, [&](std::size_t k, float sc, float, auto z) {
        yi[k] = detail::value_of<D>(qi[k], sc, z);
      });
    });
  });
}

/// Dequantizes a packed sub-byte tensor (ONNX order).
template <quantized_type D>
  requires(dtype_traits<D>::bits < 8)
void dequantize_packed(const tensor_shape& shape, std::span<const std::uint8_t> packed,
                       const tensor_qparams<D>& p, std::span<float> y, threading t = {}) {
  constexpr int bits = dtype_traits<D>::bits;
  const detail::qdq_layout l = detail::make_layout(shape, p.gran);
  if (packed.size() < packed_size(l.size, bits)) {
    QUARK_THROW(invalid_argument("quark.quant.size_mismatch", "packed input too small"));
  }
  static_cast<void>(detail::check_qdq(shape, p, l.size, y.size(), l.size));
  const std::uint8_t* in = packed.data();
  float* ys = y.data();
  const float* s = p.scale.data();
  const zero_point_t<D>* zp = p.zero_point.empty() ? nullptr : p.zero_point.data();
  detail::parallel_for(l.size, t, [&](std::size_t b, std::size_t e) {
    std::uint8_t buf[256];
    detail::for_each_run(l, b, e, [&](std::size_t i, std::size_t len, std::size_t pi, int st) {
      detail::for_chunks<256>(
          len, pi, st, [&](std::size_t off, std::size_t n, std::size_t pj, int sj) {
            detail::read_packed(in, i + off, n, bits, buf);
            float* yi = ys + i + off;
            detail::for_run(n, s, zp, pj, sj, [&](std::size_t k, float sc, float, auto z) {
              yi[k] = detail::value_of<D>(D::from_bits(buf[k]), sc, z);
            });
          });
    });
  });
}

}  // namespace quark
