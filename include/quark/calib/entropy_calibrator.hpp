// SPDX-License-Identifier: MIT
// Entropy (KL divergence) calibrator: the ORT/Quark candidate scan of quark-spec §4.3 over a
// signed histogram (histogram_mode::signed_symmetric). Candidate i (NumQuantizedBins/2 <= i <=
// bins/2) is the window of bins [bins/2 - i, bins/2 + i] around the zero bin; the reference
// distribution p folds the outside mass into the window's end bins, q merges the window into
// NumQuantizedBins bins and spreads each merged count (truncated to an integer) uniformly over
// its non-empty source bins; both are smoothed with eps = 1e-4 and compared with KL(p || q)
// (natural log). The first minimum wins; the range is clamped to the observed [min, max].
// Arithmetic is float64 throughout (ORT smooths in float32).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <quark/calib/calib_result.hpp>
#include <quark/calib/detail/log.hpp>
#include <quark/calib/percentile_calibrator.hpp>
#include <quark/observer/histogram_observer.hpp>

namespace quark {

/// One evaluated threshold window of the entropy scan.
struct entropy_candidate {
  std::size_t start = 0;  ///< first bin of the window
  std::size_t end = 0;    ///< one past the last bin
  double kl = 0.0;        ///< KL(p || q); +Inf when a distribution cannot be smoothed
};

/// Entropy calibrator (defaults: NumQuantizedBins 128, CalibTensorRangeSymmetric False).
///
/// ```cpp
/// quark::histogram_observer h{{.mode = quark::histogram_mode::signed_symmetric, .num_bins =
/// 2048}}; h.observe(batch); quark::calibrated_range r =
/// quark::entropy_calibrator{.num_quantized_bins = 128}(h.stats());
/// ```
/// With the seed defaults (128 bins, 128 quantized bins) the scan has one candidate, the whole
/// histogram, and `r.warnings` says so.
struct entropy_calibrator {
  std::size_t num_quantized_bins = 128;
  range_symmetry symmetry = default_range_symmetry(calib_method::entropy);

  /// Every candidate with its divergence, in scan order.
  [[nodiscard]] std::vector<entropy_candidate> scan(const histogram_data& h) const {
    // 1. Validate.
    detail::require_histogram(h);
    if (h.mode == histogram_mode::absolute) {
      detail::throw_config("quark.calib.bad_option", "Entropy needs a signed histogram");
    }
    const std::size_t n = h.bins();
    const std::size_t nq = num_quantized_bins;
    if (nq == 0 || nq / 2 > n / 2) {
      detail::throw_config("quark.calib.bad_option", "NumQuantizedBins (" + std::to_string(nq) +
                                                         ") must lie in [1, NumBins (" +
                                                         std::to_string(n) + ")]");
    }
    // 2. Prefix sums for the outside mass and the merged bins.
    std::vector<double> prefix(n + 1, 0.0);
    for (std::size_t i = 0; i < n; ++i)
      prefix[i + 1] = prefix[i] + static_cast<double>(h.counts[i]);
    const std::size_t zero_bin = n / 2;
    std::vector<entropy_candidate> out;
    out.reserve(zero_bin - nq / 2 + 1);
    std::vector<double> p;
    std::vector<double> q;
    std::vector<double> w;
    std::vector<double> t;
    for (std::size_t i = nq / 2; i <= zero_bin; ++i) {
      entropy_candidate c;
      c.start = zero_bin - i;
      c.end = std::min(zero_bin + i + 1, n);
      c.kl = divergence(h.counts, prefix, c.start, c.end, p, q, w, t);
      out.push_back(c);
    }
    return out;
  }

  [[nodiscard]] calibrated_range operator()(const histogram_data& h) const {
    const std::vector<entropy_candidate> cands = scan(h);
    // 3. First minimum (strictly smaller wins).
    std::size_t best = 0;
    for (std::size_t k = 1; k < cands.size(); ++k) {
      if (cands[k].kl < cands[best].kl)
        best = k;
    }
    calibrated_range r;
    if (cands.size() == 1) {
      r.warnings.push_back(
          "entropy calibration evaluated a single candidate threshold (NumBins " +
          std::to_string(h.bins()) + ", NumQuantizedBins " + std::to_string(num_quantized_bins) +
          "): the result equals MinMax; raise NumBins (e.g. 2048) for a real search");
    }
    r.min = static_cast<float>(h.edges[cands[best].start]);
    r.max = static_cast<float>(h.edges[cands[best].end]);
    // 4. Clamp to the observed extrema, then optional symmetry.
    r.min = r.min > h.range.min ? r.min : h.range.min;
    r.max = r.max < h.range.max ? r.max : h.range.max;
    if (symmetry == range_symmetry::symmetric)
      detail::symmetrize(r);
    return r;
  }

 private:
  static constexpr double eps = 1e-4;
  static double sum4(const double* x, std::size_t n) noexcept {
    double a0 = 0.0;
    double a1 = 0.0;
    double a2 = 0.0;
    double a3 = 0.0;
    std::size_t j = 0;
    for (; j + 4 <= n; j += 4) {
      a0 += x[j];
      a1 += x[j + 1];
      a2 += x[j + 2];
      a3 += x[j + 3];
    }
    for (; j < n; ++j)
      a0 += x[j];
    return (a0 + a1) + (a2 + a3);
  }

  /// KL(p || q) of one window. Smoothing (zeros get +eps, non-zeros -eps * zeros / non-zeros;
  /// ORT gives up, KL = +Inf, when all entries are zero or the correction reaches 1) keeps the
  /// sums, so with P = p/sp and Q = q/sq:
  ///   KL = (sum p' log p' - sum p' log q') / sp + log(sq / sp),
  /// where q' is constant on each merged bin: one log per non-zero p and per merged bin.
  double divergence(const std::vector<std::uint64_t>& hist, const std::vector<double>& prefix,
                    std::size_t start, std::size_t end, std::vector<double>& p,
                    std::vector<double>& q, std::vector<double>& w, std::vector<double>& t) const {
    const std::size_t len = end - start;
    const std::size_t nq = num_quantized_bins;
    const std::size_t n = hist.size();
    // 1. Reference p: the window with the outside mass folded into its end bins.
    p.assign(len, 0.0);
    for (std::size_t j = 0; j < len; ++j)
      p[j] = static_cast<double>(hist[start + j]);
    p[0] += prefix[start];
    p[len - 1] += prefix[n] - prefix[end];
    std::size_t p_zeros = 0;
    for (const double v : p)
      p_zeros += static_cast<std::size_t>(v == 0.0);
    // 2. Candidate q, one value per merged bin: the merged count (remainder into the last)
    //    spread over the bins where p is non-zero, truncated to an integer as ORT's int64 array
    //    does; the remainder bins beyond nq * m stay 0.
    const std::size_t m = len / nq;
    q.assign(nq, 0.0);
    std::size_t q_zeros = len - nq * m;
    double sq = 0.0;
    for (std::size_t k = 0; k < nq; ++k) {
      const std::size_t b0 = k * m;
      double merged = prefix[start + b0 + m] - prefix[start + b0];
      if (k + 1 == nq)
        merged += prefix[end] - prefix[start + nq * m];
      std::size_t norm = 0;
      for (std::size_t j = b0; j < b0 + m; ++j)
        norm += static_cast<std::size_t>(p[j] != 0.0);
      q[k] = norm == 0 ? 0.0 : std::trunc(merged / static_cast<double>(norm));
      if (q[k] == 0.0)
        q_zeros += m;
      sq += q[k] * static_cast<double>(m);
    }
    // 3. Smoothing corrections; ORT returns None (KL = +Inf) in the degenerate cases.
    if (p_zeros == len || q_zeros == len)
      return std::numeric_limits<double>::infinity();
    const double ep = eps * static_cast<double>(p_zeros) / static_cast<double>(len - p_zeros);
    const double eq = eps * static_cast<double>(q_zeros) / static_cast<double>(len - q_zeros);
    if (ep >= 1.0 || eq >= 1.0)
      return std::numeric_limits<double>::infinity();
    const double log_eps = std::log(eps);
    // 4. Smoothed p' and p' log p' per bin (vectorised log; zeros give eps log eps).
    w.resize(len);
    t.resize(len);
    for (std::size_t j = 0; j < len; ++j)
      w[j] = p[j] == 0.0 ? 1.0 : p[j] - ep;
    detail::log_positive(w.data(), t.data(), len);
    for (std::size_t j = 0; j < len; ++j) {
      const bool zero = p[j] == 0.0;
      t[j] = zero ? eps * log_eps : w[j] * t[j];
      w[j] = zero ? eps : w[j];
    }
    // 5. Sums, with four partial sums to shorten the dependency chains: sum p' log p', and
    //    sum p' log q' merged bin by merged bin (q' is constant on each).
    const double sp = prefix[n];
    const double plogp = sum4(t.data(), len);
    double plogq = 0.0;
    for (std::size_t k = 0; k <= nq; ++k) {
      const std::size_t b0 = k * m;
      const std::size_t b1 = k < nq ? b0 + m : len;
      if (b1 == b0)
        continue;
      const double qs = k < nq && q[k] != 0.0 ? q[k] - eq : eps;
      plogq += sum4(w.data() + b0, b1 - b0) * std::log(qs);
    }
    return (plogp - plogq) / sp + std::log(sq / sp);
  }
};

}  // namespace quark
