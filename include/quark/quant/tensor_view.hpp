// SPDX-License-Identifier: MIT
// tensor_view<T>: a small mdspan-like view (pointer + tensor_shape) of a row-major contiguous
// tensor, and overloads of quantize / dequantize / fake_quantize taking views, so that data and
// shape travel together and the shapes of input and output are checked to agree.
#pragma once

#include <cstddef>
#include <span>
#include <type_traits>

#include <quark/core/error.hpp>
#include <quark/quant/fake_quant.hpp>
#include <quark/quant/granularity.hpp>
#include <quark/quant/quantize.hpp>

namespace quark {

/// A non-owning view of a contiguous row-major tensor.
///
///     std::vector<float> w(64 * 128);
///     quark::tensor_view<float> v(w.data(), {64, 128});
///     quark::tensor_view<const float> cv = v;             // views convert to const
template <class T>
class tensor_view {
 public:
  using element_type = T;
  tensor_view(T* data, tensor_shape shape) noexcept : data_(data), shape_(shape) {}
  /// From a view of non-const elements.
  template <class U>
    requires(std::is_same_v<const U, T> && !std::is_same_v<U, T>)
  tensor_view(const tensor_view<U>& v)
  noexcept : data_(v.data()), shape_(v.shape()) {}

  T* data() const noexcept { return data_; }
  const tensor_shape& shape() const noexcept { return shape_; }
  std::size_t size() const noexcept { return shape_.size(); }
  std::span<T> span() const noexcept { return {data_, shape_.size()}; }

 private:
  T* data_;
  tensor_shape shape_;
};

namespace detail {
inline void check_same_shape(const tensor_shape& a, const tensor_shape& b) {
  bool same = a.rank() == b.rank();
  for (std::size_t k = 0; same && k < a.rank(); ++k)
    same = a[k] == b[k];
  if (!same) {
    QUARK_THROW(invalid_argument("quark.quant.size_mismatch", "input and output shapes differ"));
  }
}
}  // namespace detail

/// fake_quantize on views (the shapes must be equal).
///
///     quark::fake_quantize<std::int8_t>(quark::tensor_view<const float>(x.data(), {4, 16}), p,
///                                       quark::tensor_view<float>(y.data(), {4, 16}));
template <quantized_type D, quant_policy P = quant_policy{}>
  requires(P.round != rounding::stochastic)
void fake_quantize(tensor_view<const float> x, const tensor_qparams<D>& p, tensor_view<float> y,
                   threading t = {}) {
  detail::check_same_shape(x.shape(), y.shape());
  fake_quantize<D, P>(x.shape(), x.span(), p, y.span(), t);
}

/// quantize on views (the shapes must be equal).
template <quantized_type D, quant_policy P = quant_policy{}>
  requires(P.round != rounding::stochastic)
void quantize(tensor_view<const float> x, const tensor_qparams<D>& p, tensor_view<D> q,
              threading t = {}) {
  detail::check_same_shape(x.shape(), q.shape());
  quantize<D, P>(x.shape(), x.span(), p, q.span(), t);
}

/// dequantize on views (the shapes must be equal).
template <quantized_type D>
void dequantize(tensor_view<const D> q, const tensor_qparams<D>& p, tensor_view<float> y,
                threading t = {}) {
  detail::check_same_shape(q.shape(), y.shape());
  dequantize<D>(q.shape(), q.span(), p, y.span(), t);
}

}  // namespace quark
