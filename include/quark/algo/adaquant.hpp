// SPDX-License-Identifier: MIT
// AdaQuant (Hubara et al. 2020; quark-spec §10.5): learn the float weights (and optionally the
// bias) behind a fixed fake quantizer. The layer sees wq = s (quantize(w) - zp) with the weight's
// own scale / zero point / clip bounds; the gradient reaches w straight through the rounding
// where w / s + zp lies within [qmin - 0.5, qmax + 0.5] and is zero outside; Adam updates w.
// The final codes are quark::quantize of the learned weights, i.e. what a quantizer writes for
// them.
//
// The reconstruction loss belongs to the caller: it supplies dL/dwq (and dL/db).
#pragma once

#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <quark/algo/adam.hpp>
#include <quark/config.hpp>
#include <quark/core/concepts.hpp>
#include <quark/core/error.hpp>
#include <quark/quant/detail/element.hpp>
#include <quark/quant/granularity.hpp>
#include <quark/quant/quantize.hpp>
#include <quark/quant/tensor_qparams.hpp>

namespace quark {

namespace detail {
inline void adaquant_check_size(std::size_t got, std::size_t want, const char* what) {
  if (got != want) {
    QUARK_THROW(invalid_argument(
        "quark.algo.size_mismatch",
        "adaquant expected " + std::to_string(want) + " " + what + ", got " + std::to_string(got)));
  }
}
}  // namespace detail

/// AdaQuant over one weight tensor quantized to the integer type D (per tensor, per channel or
/// per block), with an optional bias trained alongside. The parameters are copied, and every
/// buffer (weights, codes, fake-quantized weights, gradients, Adam's moments) is allocated by
/// the constructor only.
///
///     float s = 0.02f;
///     quark::tensor_qparams<std::int8_t> p{std::span(&s, 1), {}, quark::per_tensor{}, -127, 127};
///     quark::adaquant<std::int8_t> aq(quark::tensor_shape{4, 8}, w, p, bias, {.lr = 1e-5});
///     std::vector<double> gw(32), gb(4);
///     for (std::size_t it = 0; it < n; ++it) {
///       std::span<const double> wq = aq.fake_weights();   // the layer uses wq and aq.bias()
///       my_loss_and_gradient(wq, aq.bias(), gw, gb);      // gw = dL/dwq, gb = dL/db
///       aq.step(gw, gb);
///     }
///     std::int8_t q[32];
///     aq.codes(q);
template <quantized_type D>
  requires integral_data_type<D>
class adaquant {
 public:
  /// `w` holds shape.size() float weights, `p` their parameters (checked as quark::quantize
  /// checks them: "quark.quant.*" errors); `bias` the starting bias (empty: no bias is trained).
  adaquant(const tensor_shape& shape, std::span<const float> w, const tensor_qparams<D>& p,
           std::span<const double> bias = {}, const adam_options& opt = {})
      : shape_(shape),
        scale_param_(p.scale.begin(), p.scale.end()),
        zp_param_(p.zero_point.begin(), p.zero_point.end()),
        gran_(p.gran),
        qmin_(p.qmin),
        qmax_(p.qmax),
        w_(w.begin(), w.end()),
        bias_(bias.begin(), bias.end()),
        wf_(w.size()),
        codes_(w.size()),
        scale_(w.size()),
        zp_(w.size()),
        wq_(w.size()),
        adam_w_(w.size(), opt),
        adam_b_(bias.size(), opt) {
    detail::expand_qparams(shape, p, w.size(), std::span<double>(scale_), std::span<double>(zp_));
  }

  /// Number of weights.
  std::size_t size() const noexcept { return w_.size(); }
  /// The continuous weights being learned.
  std::span<const double> weights() const noexcept { return w_; }
  /// The bias being learned (empty when none was given).
  std::span<const double> bias() const noexcept { return bias_; }

  /// The fake-quantized weights s (quantize(float(w)) - zp) the layer computes with.
  std::span<const double> fake_weights() {
    quantize_codes();
    for (std::size_t i = 0; i < w_.size(); ++i)
      wq_[i] = (static_cast<double>(detail::code_value(codes_[i])) - zp_[i]) * scale_[i];
    return wq_;
  }

  /// The straight-through estimator, in place: dL/dwq becomes dL/dw (zero where w / s + zp is
  /// outside [qmin - 0.5, qmax + 0.5]).
  void straight_through(std::span<double> grad) const {
    detail::adaquant_check_size(grad.size(), w_.size(), "weight gradients");
    const double lo = static_cast<double>(qmin_) - 0.5, hi = static_cast<double>(qmax_) + 0.5;
    for (std::size_t i = 0; i < w_.size(); ++i) {
      const double v = w_[i] / scale_[i] + zp_[i];
      if (v < lo || v > hi)
        grad[i] = 0.0;
    }
  }

  /// One update: the straight-through estimator on `grad_wq` (modified in place), Adam on the
  /// weights, and Adam on the bias with `grad_bias` when a bias is trained (`grad_bias` is
  /// ignored otherwise and may be empty).
  void step(std::span<double> grad_wq, std::span<const double> grad_bias) {
    detail::adaquant_check_size(grad_wq.size(), w_.size(), "weight gradients");
    if (!bias_.empty())
      detail::adaquant_check_size(grad_bias.size(), bias_.size(), "bias gradients");
    straight_through(grad_wq);
    adam_w_.step(w_, grad_wq);
    if (!bias_.empty())
      adam_b_.step(bias_, grad_bias);
  }

  /// The codes of the current weights, quark::quantize(float(w)) (within [qmin, qmax]).
  void codes(std::span<D> q) {
    detail::adaquant_check_size(q.size(), w_.size(), "codes to write");
    quantize_codes();
    for (std::size_t i = 0; i < q.size(); ++i)
      q[i] = codes_[i];
  }

 private:
  void quantize_codes() {
    for (std::size_t i = 0; i < w_.size(); ++i)
      wf_[i] = static_cast<float>(w_[i]);
    tensor_qparams<D> p{scale_param_, zp_param_, gran_, qmin_, qmax_};
    quantize<D>(shape_, std::span<const float>(wf_), p, std::span<D>(codes_));
  }

  tensor_shape shape_;
  std::vector<float> scale_param_;
  std::vector<zero_point_t<D>> zp_param_;
  granularity gran_;
  std::int64_t qmin_, qmax_;
  std::vector<double> w_, bias_;
  std::vector<float> wf_;
  std::vector<D> codes_;
  std::vector<double> scale_, zp_, wq_;
  adam adam_w_, adam_b_;
};

/// A fake quantizer over a whole float32 weight tensor: `fq(w, out)` writes the value every
/// element of `w` has after quantization and dequantization (same size). Float16 / bfloat16
/// casts, BFP and MX blocks (quark::bfp_quantize_dequantize, quark::mx_quantize_dequantize) are
/// such functions; blocks need the whole tensor, which is why the quantizer sees all of it.
template <class F>
concept weight_fake_quantizer = std::invocable<F&, std::span<const float>, std::span<float>>;

/// AdaQuant behind any fake quantizer (quark-spec §10.5: Quark's torch replicas of the float16 /
/// bfloat16 casts and of the BFP / MX ops): the layer sees wq = fq(float(w)); the gradient
/// reaches w straight through (the identity: these formats have no clip range the integer
/// estimator could mask); Adam updates w. What the model stores is float(w), the float weight
/// its own fake-quantization node (a Cast pair, BFPQuantizeDequantize, MXQuantizeDequantize)
/// turns into wq, or fq's storage of it. Buffers are allocated by the constructor only; `fq`
/// must not allocate if the loop is to stay allocation-free.
///
///     auto fq = [&](std::span<const float> w, std::span<float> out) {
///       quark::mx_quantize_dequantize(attrs, w, shape, out);
///     };
///     quark::adaquant_fq aq(w, fq, {}, {.lr = 1e-5});
///     for (std::size_t it = 0; it < n; ++it) {
///       my_loss_and_gradient(aq.fake_weights(), gw);   // gw = dL/dwq
///       aq.step(gw, {});
///     }
///     std::span<const float> learned = aq.float_weights();
template <weight_fake_quantizer F>
class adaquant_fq {
 public:
  /// `w` holds the starting float weights; `bias` the starting bias (empty: none is trained).
  adaquant_fq(std::span<const float> w, F fq, std::span<const double> bias = {},
              const adam_options& opt = {})
      : fq_(std::move(fq)),
        w_(w.begin(), w.end()),
        bias_(bias.begin(), bias.end()),
        wf_(w.begin(), w.end()),
        out_(w.size()),
        wq_(w.size()),
        adam_w_(w.size(), opt),
        adam_b_(bias.size(), opt) {}

  /// Number of weights.
  std::size_t size() const noexcept { return w_.size(); }
  /// The continuous weights being learned.
  std::span<const double> weights() const noexcept { return w_; }
  /// The bias being learned (empty when none was given).
  std::span<const double> bias() const noexcept { return bias_; }

  /// The fake-quantized weights fq(float(w)) the layer computes with.
  std::span<const double> fake_weights() {
    round_weights();
    fq_(std::span<const float>(wf_), std::span<float>(out_));
    for (std::size_t i = 0; i < w_.size(); ++i)
      wq_[i] = static_cast<double>(out_[i]);
    return wq_;
  }

  /// One update: Adam on the weights with `grad_wq` = dL/dwq (the straight-through estimator
  /// makes it dL/dw), and on the bias with `grad_bias` when a bias is trained (`grad_bias` is
  /// ignored otherwise and may be empty).
  void step(std::span<const double> grad_wq, std::span<const double> grad_bias) {
    detail::adaquant_check_size(grad_wq.size(), w_.size(), "weight gradients");
    if (!bias_.empty())
      detail::adaquant_check_size(grad_bias.size(), bias_.size(), "bias gradients");
    adam_w_.step(w_, grad_wq);
    if (!bias_.empty())
      adam_b_.step(bias_, grad_bias);
  }

  /// The learned weights as float32: what the model stores in front of its quantization node.
  std::span<const float> float_weights() {
    round_weights();
    return wf_;
  }

 private:
  void round_weights() {
    for (std::size_t i = 0; i < w_.size(); ++i)
      wf_[i] = static_cast<float>(w_[i]);
  }

  F fq_;
  std::vector<double> w_, bias_;
  std::vector<float> wf_, out_;
  std::vector<double> wq_;
  adam adam_w_, adam_b_;
};

}  // namespace quark
