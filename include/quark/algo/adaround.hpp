// SPDX-License-Identifier: MIT
// AdaRound (Nagel et al. 2020; quark-spec §10.5): learn, per weight, whether it rounds down or up.
// A weight w with scale s and zero point zp is soft-quantized as
//
//     wq = s (clamp(floor(w / s) + h(alpha) + zp, qmin, qmax) - zp),
//     h(alpha) = clamp(sigmoid(alpha) (zeta - gamma) + gamma, 0, 1),  zeta = 1.1, gamma = -0.1,
//
// alpha starts where h(alpha) is the fractional part of w / s (so wq starts at w), an optimizer
// lowers the caller's reconstruction loss plus the rounding regulariser
// weight * sum(1 - |2 h(alpha) - 1|^beta) (beta annealed from beta_start to beta_end by a cosine
// after a warm start without it), and the hard codes round up where alpha >= 0.
//
// The reconstruction loss (the layer's output against the float one over samples) belongs to the
// caller: it supplies dL/dwq for the soft weights, the state turns it into dL/dalpha.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <numbers>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <quark/algo/adam.hpp>
#include <quark/config.hpp>
#include <quark/core/concepts.hpp>
#include <quark/core/error.hpp>
#include <quark/quant/detail/element.hpp>
#include <quark/quant/granularity.hpp>
#include <quark/quant/tensor_qparams.hpp>

namespace quark {

/// The stretch of AdaRound's rectified sigmoid (Quark's gamma / zeta).
inline constexpr double adaround_gamma = -0.1;
inline constexpr double adaround_zeta = 1.1;

/// h(alpha) = clamp(sigmoid(alpha) (zeta - gamma) + gamma, 0, 1).
inline double adaround_h(double alpha) noexcept {
  const double sig = 1.0 / (1.0 + std::exp(-alpha));
  return std::clamp(sig * (adaround_zeta - adaround_gamma) + adaround_gamma, 0.0, 1.0);
}

/// The alpha with h(alpha) = frac, for frac in [0, 1): -log((zeta - gamma) / (frac - gamma) - 1).
inline double adaround_alpha_init(double frac) noexcept {
  return -std::log((adaround_zeta - adaround_gamma) / (frac - adaround_gamma) - 1.0);
}

/// Beta at iteration `it` of `n`: `start` at the end of the warm start (warm_start * n), then a
/// cosine down to `end` at iteration n: end + (start - end) (1 + cos(pi rel)) / 2,
/// rel = (it - warm_start n) / (n - warm_start n).
inline double adaround_beta(std::size_t it, std::size_t n, double warm_start, double start,
                            double end) noexcept {
  const double warm = warm_start * static_cast<double>(n);
  const double rel = (static_cast<double>(it) - warm) / (static_cast<double>(n) - warm);
  return end + 0.5 * (start - end) * (1.0 + std::cos(std::numbers::pi * rel));
}

/// The iterations without the regulariser: ceil(warm_start * n). The regulariser (and the beta
/// schedule) applies from this iteration on.
inline std::size_t adaround_warm_iterations(std::size_t n, double warm_start) noexcept {
  return static_cast<std::size_t>(std::ceil(warm_start * static_cast<double>(n)));
}

/// The rounding regulariser sum(1 - |2 h - 1|^beta) over the values h (unweighted).
inline double adaround_regularizer(std::span<const double> h, double beta) noexcept {
  double sum = 0.0;
  for (const double v : h) {
    const double au = std::fabs(2.0 * v - 1.0);
    sum += 1.0 - (au == 1.0 ? 1.0 : std::pow(au, beta));  // pow(1, beta) = 1
  }
  return sum;
}

/// The regulariser of one iteration: weight (Quark's reg_param) and beta.
struct adaround_reg {
  double weight = 0.01;
  double beta = 20.0;
};

/// AdaRound over one weight tensor quantized to the integer type D with per-tensor or
/// per-channel parameters (per-block works too: every element gets its own scale). Buffers are
/// allocated by the constructor only. The state keeps the alpha variables, the float division
/// w / s (float32, as quark::quantize) floored, and per element the scale and zero point.
///
///     // W: 2 x 3 float weights, one scale per row, int8 codes in [-127, 127].
///     float s[2] = {0.05f, 0.1f};
///     quark::tensor_qparams<std::int8_t> p{s, {}, quark::per_channel{0}, -127, 127};
///     quark::adaround<std::int8_t> ar(quark::tensor_shape{2, 3}, w, p, {.lr = 0.01});
///     std::vector<double> g(6);
///     for (std::size_t it = 0; it < n; ++it) {
///       std::span<const double> wq = ar.soft_weights();  // the layer uses these
///       double loss = my_loss_and_gradient(wq, g);          // g = dL/dwq
///       std::optional<quark::adaround_reg> reg;
///       if (it >= quark::adaround_warm_iterations(n, 0.2))
///         reg = quark::adaround_reg{0.01, quark::adaround_beta(it, n, 0.2, 20.0, 2.0)};
///       ar.step(g, loss, reg);
///     }
///     std::int8_t q[6];
///     ar.hard_codes(q);
template <quantized_type D>
  requires integral_data_type<D>
class adaround {
 public:
  /// `w` holds shape.size() float weights; `p` their scales, zero points, granularity and clip
  /// bounds (checked as quark::quantize checks them: "quark.quant.*" errors). Non-finite
  /// weights throw "quark.algo.bad_weight".
  adaround(const tensor_shape& shape, std::span<const float> w, const tensor_qparams<D>& p,
           const adam_options& opt = {})
      : base_(w.size()),
        alpha_(w.size()),
        scale_(w.size()),
        zp_(w.size()),
        wq_(w.size()),
        h_(w.size()),
        dh_(w.size()),
        inside_(w.size()),
        grad_(w.size()),
        qmin_(static_cast<double>(p.qmin)),
        qmax_(static_cast<double>(p.qmax)),
        adam_(w.size(), opt) {
    detail::expand_qparams(shape, p, w.size(), std::span<double>(scale_), std::span<double>(zp_));
    for (std::size_t i = 0; i < w.size(); ++i) {
      if (!std::isfinite(w[i])) {
        QUARK_THROW(invalid_argument("quark.algo.bad_weight",
                                     "weight " + std::to_string(i) + " is not finite"));
      }
      const float v = w[i] / static_cast<float>(scale_[i]);  // float32 division, as quantize
      base_[i] = std::floor(static_cast<double>(v));
      alpha_[i] = adaround_alpha_init(static_cast<double>(v) - base_[i]);
    }
  }

  /// Number of weights.
  std::size_t size() const noexcept { return alpha_.size(); }
  /// The variables (Quark's alpha); the optimizer updates them.
  std::span<double> alpha() noexcept { return alpha_; }
  std::span<const double> alpha() const noexcept { return alpha_; }
  /// h(alpha) of the last soft_weights() call.
  std::span<const double> h() const noexcept { return h_; }

  /// The soft-quantized weights of the current alpha (dequantized, per element). Also records
  /// what backward() needs: call it before backward() / step() in every iteration.
  std::span<const double> soft_weights() noexcept {
    constexpr double stretch = adaround_zeta - adaround_gamma;
    // Beyond |alpha| = 3 the rectified sigmoid is clamped with room to spare (sigmoid(-3) 1.2
    // - 0.1 = -0.043, sigmoid(3) 1.2 - 0.1 = 1.043): h is 0 or 1 and dh 0 without the exp,
    // which most weights reach once the regulariser has pulled them.
    for (std::size_t i = 0; i < alpha_.size(); ++i) {
      const double a = alpha_[i];
      if (a < -3.0 || a > 3.0) {
        h_[i] = a > 0.0 ? 1.0 : 0.0;
        dh_[i] = 0.0;
      } else {
        const double sig = 1.0 / (1.0 + std::exp(-a));
        const double raw = sig * stretch + adaround_gamma;
        h_[i] = std::clamp(raw, 0.0, 1.0);
        dh_[i] = raw > 0.0 && raw < 1.0 ? sig * (1.0 - sig) * stretch : 0.0;
      }
      const double v = base_[i] + h_[i] + zp_[i];
      inside_[i] = v >= qmin_ && v <= qmax_ ? 1.0 : 0.0;
      wq_[i] = (std::clamp(v, qmin_, qmax_) - zp_[i]) * scale_[i];
    }
    return wq_;
  }

  /// The gradient with respect to alpha of loss(wq) + reg.weight * regulariser(reg.beta), given
  /// `grad_wq` = dloss/dwq at the last soft_weights(); written to `grad_alpha`, which may be
  /// `grad_wq` itself. Returns `loss` plus the weighted regulariser (added term by term). Sizes
  /// other than size() throw "quark.algo.size_mismatch".
  double backward(std::span<const double> grad_wq, double loss,
                  const std::optional<adaround_reg>& reg, std::span<double> grad_alpha) const {
    if (grad_wq.size() != size() || grad_alpha.size() != size()) {
      QUARK_THROW(invalid_argument("quark.algo.size_mismatch",
                                   "adaround over " + std::to_string(size()) + " weights got " +
                                       std::to_string(grad_wq.size()) + " gradients"));
    }
    for (std::size_t i = 0; i < size(); ++i) {
      double gh = grad_wq[i] * scale_[i] * inside_[i];
      if (reg) {
        const double u = 2.0 * h_[i] - 1.0;
        const double au = std::fabs(u);
        // |2h - 1| is exactly 1 where the rectified sigmoid is clamped (h = 0 or 1), as most
        // weights are once the regulariser has pulled them: pow(1, y) = 1, no call needed.
        const bool edge = au == 1.0;
        loss += reg->weight * (1.0 - (edge ? 1.0 : std::pow(au, reg->beta)));
        if (au > 0.0) {
          const double d = edge ? 1.0 : std::pow(au, reg->beta - 1.0);
          gh += reg->weight * (-reg->beta * d * (u > 0.0 ? 2.0 : -2.0));
        }
      }
      grad_alpha[i] = gh * dh_[i];
    }
    return loss;
  }

  /// backward() into the state's own buffer, then one Adam step on alpha. Returns the loss with
  /// the regulariser.
  double step(std::span<const double> grad_wq, double loss,
              const std::optional<adaround_reg>& reg = std::nullopt) {
    const double total = backward(grad_wq, loss, reg, grad_);
    adam_.step(alpha_, grad_);
    return total;
  }

  /// The hard codes: floor(w / s) + (alpha >= 0) + zp, clamped to [qmin, qmax] (so always inside
  /// the type). `q` has size() elements, else "quark.algo.size_mismatch".
  void hard_codes(std::span<D> q) const {
    if (q.size() != size()) {
      QUARK_THROW(invalid_argument("quark.algo.size_mismatch",
                                   "adaround over " + std::to_string(size()) + " weights got " +
                                       std::to_string(q.size()) + " codes to write"));
    }
    for (std::size_t i = 0; i < size(); ++i) {
      const double v = base_[i] + (alpha_[i] >= 0.0 ? 1.0 : 0.0) + zp_[i];
      q[i] = detail::to_storage<D>(std::clamp(v, qmin_, qmax_));
    }
  }

 private:
  std::vector<double> base_, alpha_, scale_, zp_, wq_, h_, dh_, inside_, grad_;
  double qmin_, qmax_;
  adam adam_;
};

}  // namespace quark
