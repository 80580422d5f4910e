// SPDX-License-Identifier: MIT
// The two-stage specs of Quark's PyTorch configuration (seed 004):
//  * ProgressiveSpec: the second stage quantizes the output of the first (e.g. FP8 E4M3 per
//    tensor, then INT4 per channel on the result);
//  * ScaleQuantSpec: the second stage quantizes the first stage's scales (e.g. FP4 per group of
//    16 whose scales are themselves FP8 E4M3 per tensor).
// Both run as dynamic fake quantization: every stage takes its parameters from the data it sees.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include <quark/core/concepts.hpp>
#include <quark/quant/fake_quant.hpp>
#include <quark/quant/range.hpp>
#include <quark/scale/float_scale.hpp>
#include <quark/scale/qparams.hpp>

namespace quark {

/// One quantization stage: target type D, scale kind S, granularity and qparam options.
///
///     quark::quant_stage<quark::float8_e4m3fn> fp8_tensor{};
///     quark::quant_stage<quark::int4> int4_channel{quark::per_channel{0}};
template <quantized_type D, scale_type S = float_scale, quant_policy P = quant_policy{}>
struct quant_stage {
  using dtype = D;
  using scale = S;
  static constexpr quant_policy policy = P;
  granularity gran = per_tensor{};
  qparam_options options = {};
};

/// A type made by quant_stage<...>.
template <class T>
concept quant_stage_type = requires(const T& t) {
  typename T::dtype;
  typename T::scale;
  requires quantized_type<typename T::dtype>;
  requires scale_type<typename T::scale>;
  { t.gran } -> std::convertible_to<granularity>;
  { t.options } -> std::convertible_to<qparam_options>;
};

/// Quark's ProgressiveSpec: `second` quantizes what `first` produced.
///
///     quark::progressive_spec spec{quark::quant_stage<quark::float8_e4m3fn>{},
///                                  quark::quant_stage<quark::int4>{quark::per_channel{0}}};
///     quark::fake_quantize(spec, shape, x, y);
template <quant_stage_type First, quant_stage_type Second>
struct progressive_spec {
  First first;
  Second second;
};

template <quant_stage_type First, quant_stage_type Second>
progressive_spec(First, Second) -> progressive_spec<First, Second>;

/// Quark's ScaleQuantSpec: `second` quantizes the scales of `first`.
///
///     quark::scale_quant_spec spec{
///         quark::quant_stage<quark::float4_e2m1fn>{quark::per_block{-1, 16}},
///         quark::quant_stage<quark::float8_e4m3fn>{}};
///     quark::fake_quantize(spec, shape, x, y);
template <quant_stage_type First, quant_stage_type Second>
struct scale_quant_spec {
  First first;
  Second second;
};

template <quant_stage_type First, quant_stage_type Second>
scale_quant_spec(First, Second) -> scale_quant_spec<First, Second>;

/// Dynamic fake quantization of one stage: parameters from x's own ranges, then fake_quantize.
template <quant_stage_type Stage>
void fake_quantize(const Stage& st, const tensor_shape& shape, std::span<const float> x,
                   std::span<float> y, threading t = {}) {
  using D = typename Stage::dtype;
  const std::size_t n = param_count(shape, st.gran);
  std::vector<float> s(n);
  std::vector<zero_point_t<D>> z(n);
  dynamic_qparams<D, typename Stage::scale>(shape, x, st.gran, st.options, s, z);
  fake_quantize<D, Stage::policy>(shape, x, tensor_qparams<D>{s, z, st.gran}, y, t);
}

/// ProgressiveSpec: y = second(first(x)); x and y may be the same buffer.
template <quant_stage_type First, quant_stage_type Second>
void fake_quantize(const progressive_spec<First, Second>& spec, const tensor_shape& shape,
                   std::span<const float> x, std::span<float> y, threading t = {}) {
  fake_quantize(spec.first, shape, x, y, t);
  fake_quantize(spec.second, shape, std::span<const float>(y), y, t);
}

namespace detail {
/// The smallest positive value of a stage's grid before scaling: 1 for integers, the smallest
/// positive code for float types.
template <quantized_type D>
float smallest_positive() noexcept {
  if constexpr (integral_data_type<D>) {
    return 1.0f;
  } else {
    return to_float(
        D::from_bits(static_cast<typename D::storage_type>(D::format.has_zero ? 1 : 0)));
  }
}
}  // namespace detail

/// ScaleQuantSpec. Steps: (1) the first stage's scales and zero points from x; (2) the scales,
/// seen as a 1-D tensor, are fake-quantized by the second stage (parameters from the scales);
/// (3) a scale that the second stage sends to 0 is raised to the smallest positive value of its
/// grid (Quark would divide by zero there); (4) x is fake-quantized with the quantized scales.
template <quant_stage_type First, quant_stage_type Second>
void fake_quantize(const scale_quant_spec<First, Second>& spec, const tensor_shape& shape,
                   std::span<const float> x, std::span<float> y, threading t = {}) {
  using D1 = typename First::dtype;
  using D2 = typename Second::dtype;
  // 1. First-stage parameters.
  const std::size_t n = param_count(shape, spec.first.gran);
  std::vector<float> s(n);
  std::vector<zero_point_t<D1>> z(n);
  dynamic_qparams<D1, typename First::scale>(shape, x, spec.first.gran, spec.first.options, s, z);
  // 2. Quantize the scales (the second stage's own parameters come from the scales).
  const tensor_shape sshape{n};
  const std::size_t n2 = param_count(sshape, spec.second.gran);
  std::vector<float> s2(n2);
  std::vector<zero_point_t<D2>> z2(n2);
  dynamic_qparams<D2, typename Second::scale>(sshape, s, spec.second.gran, spec.second.options, s2,
                                              z2);
  std::vector<float> sq(n);
  fake_quantize<D2, Second::policy>(sshape, s, tensor_qparams<D2>{s2, z2, spec.second.gran}, sq);
  // 3. Keep every scale positive.
  const float floor_value = detail::smallest_positive<D2>();
  const detail::qdq_layout l2 = detail::make_layout(sshape, spec.second.gran);
  detail::for_each_run(l2, 0, n, [&](std::size_t i, std::size_t len, std::size_t p, int st) {
    for (std::size_t k = 0; k < len; ++k) {
      if (!(sq[i + k] > 0.0f))
        sq[i + k] = floor_value * s2[st == 0 ? p : p + k];
    }
  });
  // 4. The tensor with the quantized scales.
  fake_quantize<D1, First::policy>(shape, x, tensor_qparams<D1>{sq, z, spec.first.gran}, y, t);
}

}  // namespace quark
