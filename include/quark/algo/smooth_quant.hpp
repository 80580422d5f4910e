// SPDX-License-Identifier: MIT
// SmoothQuant (Xiao et al. 2023; quark-spec §10.2): move the outlier channels of a matrix
// product's activation into its weight. For y = x W with x [.., K] and W [K, N], and a positive
// factor s_k per input channel k,
//
//     y = (x diag(1/s)) (diag(s) W),
//
// so the activation is divided by s and the weight's rows multiplied by s without changing y.
// With a_k = max |x_k| over the calibration data and w_k = max_n |W[k, n]|,
//
//     s_k = a_k^alpha / (w_k + 1e-9)^(1 - alpha),
//
// which leaves both ranges at a_k^alpha w_k^(1 - alpha): alpha = 1 moves everything into the
// weight, alpha = 0 nothing of the activation. The factors follow Quark's numpy code in float32
// (each power rounded to float32, a float32 division, the 1e-9 guards added in float32), and the
// activation is multiplied by 1 / (s_k + 1e-9), also as Quark.
//
// One departure (docs/compatibility.md): where a_k is 0 (a channel that is zero on all the
// calibration data), a_k or s_k is not a finite positive number, or w_k is 0, quark-cpp keeps
// s_k = 1 (no change). Quark would compute s_k = 0 for a zero channel, multiply that channel of x
// by 1e9 and zero the weight row, which is exact only if the channel stays zero after calibration.
//
//     std::vector<float> amax(K);                        // running max |x_k|, starts at 0
//     quark::smooth_quant_observe(x, K, amax);           // once per calibration batch
//     std::vector<float> s(K), inv(K);
//     quark::smooth_quant_factors(amax, w, N, 0.5, s, inv);
//     quark::smooth_quant_scale_rows(w, N, s);           // W <- diag(s) W
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <span>
#include <string>

#include <quark/core/error.hpp>

namespace quark {

/// Folds one batch `x` (rows of `k` values, row-major; its size a multiple of k) into the running
/// per-channel maxima `amax` (size k): amax[j] = max(amax[j], |x[r, j]|). NaN values are ignored;
/// an infinite value makes its channel's maximum infinite (smooth_quant_factors keeps s = 1
/// there).
inline void smooth_quant_observe(std::span<const float> x, std::size_t k, std::span<float> amax) {
  if (k == 0 || amax.size() != k || x.size() % k != 0) {
    throw invalid_argument("quark.smooth_quant.shape",
                           "smooth_quant_observe: " + std::to_string(x.size()) +
                               " values are not rows of " + std::to_string(k) +
                               " channels, or the maxima hold " + std::to_string(amax.size()));
  }
  const std::size_t rows = x.size() / k;
  float* const m = amax.data();
  for (std::size_t r = 0; r < rows; ++r) {
    const float* const row = x.data() + r * k;
    for (std::size_t j = 0; j < k; ++j) {
      const float a = std::fabs(row[j]);
      m[j] = a > m[j] ? a : m[j];  // false for NaN: the maximum stays
    }
  }
}

/// The smoothing factors of one weight `w` [k, n] (row-major; k = amax.size()) from the
/// activation maxima `amax`: s[j] as in the header comment and inv[j] = 1 / (s[j] + 1e-9), both
/// in float32. Returns how many channels were kept at s = 1 (see the header comment).
inline std::size_t smooth_quant_factors(std::span<const float> amax, std::span<const float> w,
                                        std::size_t n, double alpha, std::span<float> s,
                                        std::span<float> inv) {
  const std::size_t k = amax.size();
  if (n == 0 || w.size() != k * n || s.size() != k || inv.size() != k) {
    throw invalid_argument("quark.smooth_quant.shape",
                           "smooth_quant_factors: a weight of " + std::to_string(w.size()) +
                               " values is not " + std::to_string(k) + " x " + std::to_string(n) +
                               ", or the outputs do not hold " + std::to_string(k) + " factors");
  }
  if (!(alpha >= 0.0 && alpha <= 1.0)) {
    throw invalid_argument(
        "quark.smooth_quant.alpha",
        "smooth_quant_factors: alpha must be in [0, 1], got " + std::to_string(alpha));
  }
  // numpy: float32 ** python float stays float32; (1 - alpha) is computed in double first. Each
  // power is taken in double and rounded once to float32: numpy's own float32 power is not
  // correctly rounded and differs by an ulp between its SIMD paths, so Quark's factors are only
  // defined to about an ulp; this rounding is the nearest to the exact value.
  const double a_exp = static_cast<double>(static_cast<float>(alpha));
  const double w_exp = static_cast<double>(static_cast<float>(1.0 - alpha));
  const auto powf_rounded = [](float b, double e) {
    return static_cast<float>(std::pow(static_cast<double>(b), e));
  };
  const float eps = 1e-9f;
  std::size_t kept = 0;
  for (std::size_t j = 0; j < k; ++j) {
    const float* const row = w.data() + j * n;
    float wmax = 0.0f;
    for (std::size_t c = 0; c < n; ++c) {
      const float v = std::fabs(row[c]);
      wmax = v > wmax ? v : wmax;
    }
    float f = 1.0f;
    bool keep = true;
    if (amax[j] > 0.0f && std::isfinite(amax[j]) && wmax > 0.0f && std::isfinite(wmax)) {
      f = powf_rounded(amax[j], a_exp) / powf_rounded(wmax + eps, w_exp);
      keep = !(f > 0.0f) || !std::isfinite(f);
      if (keep)
        f = 1.0f;
    }
    kept += keep ? 1 : 0;
    s[j] = f;
    inv[j] = 1.0f / (f + eps);
  }
  return kept;
}

/// W <- diag(s) W for `w` [s.size(), n] (row-major), in float32.
inline void smooth_quant_scale_rows(std::span<float> w, std::size_t n, std::span<const float> s) {
  if (w.size() != s.size() * n) {
    throw invalid_argument("quark.smooth_quant.shape",
                           "smooth_quant_scale_rows: " + std::to_string(w.size()) +
                               " values are not " + std::to_string(s.size()) + " rows of " +
                               std::to_string(n));
  }
  for (std::size_t j = 0; j < s.size(); ++j) {
    float* const row = w.data() + j * n;
    const float f = s[j];
    for (std::size_t c = 0; c < n; ++c)
      row[c] *= f;
  }
}

}  // namespace quark
