// SPDX-License-Identifier: MIT
// Adam (Kingma & Ba) over spans of doubles, with the defaults and the bias correction of
// torch.optim.Adam (no weight decay, no amsgrad): the optimizer of fast finetune (quark-spec
// §10.5), usable for any parameter vector.
#pragma once

#include <cmath>
#include <cstddef>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include <quark/config.hpp>
#include <quark/core/error.hpp>

namespace quark {

/// Adam's hyper-parameters; the defaults are torch.optim.Adam's.
struct adam_options {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
};

/// Adam over `n` parameters. Each step, for every element:
///
///     m = beta1 m + (1 - beta1) g,   v = beta2 v + (1 - beta2) g^2,
///     p -= lr (m / (1 - beta1^t)) / (sqrt(v / (1 - beta2^t)) + eps)
///
/// with t the step number (from 1). The moment buffers are allocated once, by the constructor.
///
///     quark::adam opt(2, {.lr = 0.1});
///     std::vector<double> p{1.0, -1.0}, g(2);
///     for (int it = 0; it < 100; ++it) {
///       g[0] = 2 * p[0];  g[1] = 2 * p[1];  // gradient of p0^2 + p1^2
///       opt.step(p, g);
///     }
class adam {
 public:
  adam() = default;
  explicit adam(std::size_t n, const adam_options& o = {}) : o_(o), m_(n, 0.0), v_(n, 0.0) {}

  /// Number of parameters.
  std::size_t size() const noexcept { return m_.size(); }
  /// Steps taken so far.
  std::size_t steps() const noexcept { return t_; }
  const adam_options& options() const noexcept { return o_; }

  /// One update of `p` with the gradient `g`; both have size() elements, else
  /// "quark.algo.size_mismatch" is thrown. `g` may alias `p` only if you mean it.
  void step(std::span<double> p, std::span<const double> g) {
    if (p.size() != m_.size() || g.size() != m_.size()) {
      QUARK_THROW(invalid_argument("quark.algo.size_mismatch",
                                   "adam over " + std::to_string(m_.size()) + " parameters got " +
                                       std::to_string(p.size()) + " parameters and " +
                                       std::to_string(g.size()) + " gradients"));
    }
    ++t_;
    const double b1 = o_.beta1, b2 = o_.beta2;
    const double c1 = 1.0 - std::pow(b1, static_cast<double>(t_));
    const double c2 = 1.0 - std::pow(b2, static_cast<double>(t_));
    const double lr = o_.lr, eps = o_.eps;
    double* pp = p.data();
    const double* gg = g.data();
    const std::size_t n = p.size();
    const std::less<const double*> before;  // a total order, also for unrelated arrays
    const bool overlap = gg != pp && before(gg, pp + n) && before(pp, gg + n);
    // Blocks in three passes, each element through the same operations in the same order (no
    // contraction: -ffp-contract=off), so the numbers of one plain loop: the moments and
    // v / c2, then the square roots (sqrt may set errno, which keeps that pass scalar), then
    // the update. The first and last passes vectorise, where one loop with the sqrt in it would
    // not. A g that is a shifted view of p (overlapping, not equal) must be read as the plain
    // loop reads it, after the elements before it moved: blocks of one element.
    const std::size_t block = overlap ? 1 : max_block;
    double* QUARK_RESTRICT m = m_.data();
    double* QUARK_RESTRICT v = v_.data();
    alignas(64) double r[max_block];
    for (std::size_t b = 0; b < n; b += block) {
      const std::size_t e = n - b < block ? n - b : block;
      const double* gb = gg + b;  // may be p itself (exactly: read before written)
      double* QUARK_RESTRICT mb = m + b;
      double* QUARK_RESTRICT vb = v + b;
      for (std::size_t k = 0; k < e; ++k) {
        const double gi = gb[k];
        mb[k] = b1 * mb[k] + (1.0 - b1) * gi;
        vb[k] = b2 * vb[k] + (1.0 - b2) * gi * gi;
        r[k] = vb[k] / c2;
      }
      for (std::size_t k = 0; k < e; ++k)
        r[k] = std::sqrt(r[k]);
      double* pb = pp + b;
      for (std::size_t k = 0; k < e; ++k)
        pb[k] -= lr * (mb[k] / c1) / (r[k] + eps);
    }
  }

  /// Back to step 0 with zero moments (the size is kept).
  void reset() noexcept {
    t_ = 0;
    for (std::size_t i = 0; i < m_.size(); ++i) {
      m_[i] = 0.0;
      v_[i] = 0.0;
    }
  }

 private:
  static constexpr std::size_t max_block = 256;
  adam_options o_{};
  std::vector<double> m_, v_;
  std::size_t t_ = 0;
};

}  // namespace quark
