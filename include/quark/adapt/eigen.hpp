// SPDX-License-Identifier: MIT
// Eigen 3.4 adapter: quark's per-tensor functors drive Eigen expressions through unaryExpr (lazy,
// fused into Eigen's own loops), and tensor-level fake_quantize / quantize run on contiguous
// plain matrices and arrays (storage order decides the shape: RowMajor is {rows, cols},
// ColMajor is {cols, rows}). Not part of the umbrella header: include it explicitly.
#pragma once

#include <cstddef>
#include <span>

#include <Eigen/Core>

#include <quark/quant/fake_quant.hpp>
#include <quark/quant/quantize.hpp>

namespace Eigen::internal {
/// Cost model of the functor for Eigen's evaluators: a division, a few compares and adds.
template <quark::quantized_type D, quark::quant_policy P>
struct functor_traits<quark::fake_quant<D, P>> {
  enum { Cost = 8 * NumTraits<float>::AddCost + NumTraits<float>::MulCost, PacketAccess = false };
};
}  // namespace Eigen::internal

namespace quark {

/// A lazy Eigen expression applying `fq` to every coefficient of `e`.
///
///     Eigen::MatrixXf m = Eigen::MatrixXf::Random(4, 4);
///     quark::fake_quant<std::int8_t> fq(0.01f);
///     Eigen::MatrixXf q = quark::fake_quantize(m, fq);   // same as m.unaryExpr(fq)
template <class Derived, quantized_type D, quant_policy P>
auto fake_quantize(const Eigen::DenseBase<Derived>& e, const fake_quant<D, P>& fq) {
  return e.unaryExpr(fq);
}

/// The storage-order shape of a plain Eigen object: {rows, cols} if row-major, else {cols, rows}.
template <class Derived>
tensor_shape storage_shape(const Eigen::PlainObjectBase<Derived>& m) {
  const auto r = static_cast<std::size_t>(m.rows());
  const auto c = static_cast<std::size_t>(m.cols());
  if constexpr (Derived::IsRowMajor) {
    return tensor_shape{r, c};
  } else {
    return tensor_shape{c, r};
  }
}

/// Tensor-level fake quantization of a plain float matrix or array, in place or into `out`
/// (resized). Granularity axes refer to storage_shape(m).
///
///     Eigen::Matrix<float, -1, -1, Eigen::RowMajor> w(64, 256);
///     std::vector<float> s(64);  // one scale per row
///     quark::fake_quantize_plain<std::int8_t>(w, quark::tensor_qparams<std::int8_t>{s, {},
///     quark::per_channel{0}}, w);
template <quantized_type D, quant_policy P = quant_policy{}, class Derived, class OutDerived>
  requires std::same_as<typename Derived::Scalar, float> &&
      std::same_as<typename OutDerived::Scalar, float>
void fake_quantize_plain(const Eigen::PlainObjectBase<Derived>& m, const tensor_qparams<D>& p,
                         Eigen::PlainObjectBase<OutDerived>& out, threading t = {}) {
  if (static_cast<const void*>(&m) != static_cast<const void*>(&out))
    out.resize(m.rows(), m.cols());
  const auto n = static_cast<std::size_t>(m.size());
  fake_quantize<D, P>(storage_shape(m), std::span<const float>(m.data(), n), p,
                      std::span<float>(out.data(), n), t);
}

}  // namespace quark
