// SPDX-License-Identifier: MIT
// xtensor 0.24 adapter (flat include paths, <xtensor/xarray.hpp>): quark's per-tensor functors as
// xt::vectorize'd lazy expressions, and tensor-level fake_quantize / quantize on row-major
// contiguous containers (xarray, xtensor), whose shape is the container's shape. Not part of the
// umbrella header: include it explicitly.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include <xtensor/xarray.hpp>
#include <xtensor/xvectorize.hpp>

#include <quark/quant/fake_quant.hpp>
#include <quark/quant/quantize.hpp>

namespace quark {

/// The functor as a plain float(float) callable that xt::vectorize can deduce.
///
///     auto v = xt::vectorize(quark::xt_callable(fq));
///     xt::xarray<float> y = v(x);
template <quantized_type D, quant_policy P>
auto xt_callable(const fake_quant<D, P>& fq) {
  return [fq](float x) -> float { return fq(x); };
}

/// A lazy xtensor expression applying `fq` to every element of `e`.
///
///     xt::xarray<float> x = {{0.1f, 0.26f}, {-3.0f, 0.5f}};
///     xt::xarray<float> y = quark::fake_quantize(x, quark::fake_quant<std::int8_t>(0.1f));
template <class E, quantized_type D, quant_policy P>
requires xt::is_xexpression<std::decay_t<E>>::value auto fake_quantize(E&& e,
                                                                       const fake_quant<D, P>& fq) {
  return xt::vectorize(xt_callable(fq))(std::forward<E>(e));
}

/// The shape of a container as a tensor_shape.
template <class C>
tensor_shape container_shape(const C& c) {
  std::vector<std::size_t> dims(c.shape().begin(), c.shape().end());
  return tensor_shape(std::span<const std::size_t>(dims.data(), dims.size()));
}

/// Tensor-level fake quantization of a row-major float container (xarray / xtensor); `out` is
/// resized to x's shape; x and out may be the same container.
///
///     xt::xarray<float> w = xt::random::randn<float>({16, 128});
///     std::vector<float> s(16 * 4, 0.05f);
///     quark::fake_quantize_container<quark::int4>(w, {s, {}, quark::per_block{1, 32}}, w);
template <quantized_type D, quant_policy P = quant_policy{}, class C, class Out>
void fake_quantize_container(const C& x, const tensor_qparams<D>& p, Out& out, threading t = {}) {
  static_assert(std::is_same_v<typename C::value_type, float>, "float containers only");
  if (x.layout() != xt::layout_type::row_major) {
    QUARK_THROW(invalid_argument("quark.quant.non_contiguous", "row-major containers only"));
  }
  const tensor_shape shape = container_shape(x);
  if (static_cast<const void*>(&x) != static_cast<const void*>(&out))
    out.resize(x.shape());
  fake_quantize<D, P>(shape, std::span<const float>(x.data(), x.size()), p,
                      std::span<float>(out.data(), out.size()), t);
}

/// Tensor-level quantization of a row-major float container into a container of D codes.
template <quantized_type D, quant_policy P = quant_policy{}, class C, class Out>
void quantize_container(const C& x, const tensor_qparams<D>& p, Out& out, threading t = {}) {
  static_assert(std::is_same_v<typename C::value_type, float>, "float containers only");
  static_assert(std::is_same_v<typename Out::value_type, D>, "the output holds D codes");
  if (x.layout() != xt::layout_type::row_major) {
    QUARK_THROW(invalid_argument("quark.quant.non_contiguous", "row-major containers only"));
  }
  out.resize(x.shape());
  quantize<D, P>(container_shape(x), std::span<const float>(x.data(), x.size()), p,
                 std::span<D>(out.data(), out.size()), t);
}

}  // namespace quark
