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
/// quark::histogram_observer h{{.mode = quark::histogram_mode::signed_symmetric, .num_bins = 2048}};
/// h.observe(batch);
/// quark::calibrated_range r = quark::entropy_calibrator{.num_quantized_bins = 128}(h.stats());
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
                                                         ") must lie in [1, NumBins (" + std::to_string(n) + ")]");
    }
    // 2. Prefix sums for the outside mass and the merged bins.
    std::vector<double> prefix(n + 1, 0.0);
    for (std::size_t i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + static_cast<double>(h.counts[i]);
    const std::size_t zero_bin = n / 2;
    std::vector<entropy_candidate> out;
    out.reserve(zero_bin - nq / 2 + 1);
    std::vector<double> p;
    std::vector<double> q;
    for (std::size_t i = nq / 2; i <= zero_bin; ++i) {
      entropy_candidate c;
      c.start = zero_bin - i;
      c.end = std::min(zero_bin + i + 1, n);
      c.kl = divergence(h.counts, prefix, c.start, c.end, p, q);
      out.push_back(c);
    }
    return out;
  }

  [[nodiscard]] calibrated_range operator()(const histogram_data& h) const {
    const std::vector<entropy_candidate> cands = scan(h);
    // 3. First minimum (strictly smaller wins).
    std::size_t best = 0;
    for (std::size_t k = 1; k < cands.size(); ++k) {
      if (cands[k].kl < cands[best].kl) best = k;
    }
    calibrated_range r;
    if (cands.size() == 1) {
      r.warnings.push_back("entropy calibration evaluated a single candidate threshold (NumBins " +
                           std::to_string(h.bins()) + ", NumQuantizedBins " + std::to_string(num_quantized_bins) +
                           "): the result equals MinMax; raise NumBins (e.g. 2048) for a real search");
    }
    r.min = static_cast<float>(h.edges[cands[best].start]);
    r.max = static_cast<float>(h.edges[cands[best].end]);
    // 4. Clamp to the observed extrema, then optional symmetry.
    r.min = r.min > h.range.min ? r.min : h.range.min;
    r.max = r.max < h.range.max ? r.max : h.range.max;
    if (symmetry == range_symmetry::symmetric) detail::symmetrize(r);
    return r;
  }

 private:
  static constexpr double eps = 1e-4;

  /// Smooths in place: zeros get +eps, non-zeros -eps * zeros / non-zeros. Returns false when
  /// every entry is zero or the correction reaches 1 (ORT returns None: KL = +Inf).
  static bool smooth(std::vector<double>& v) noexcept {
    std::size_t zeros = 0;
    for (const double x : v) zeros += static_cast<std::size_t>(x == 0.0);
    const std::size_t nonzeros = v.size() - zeros;
    if (nonzeros == 0) return false;
    const double eps1 = eps * static_cast<double>(zeros) / static_cast<double>(nonzeros);
    if (eps1 >= 1.0) return false;
    for (double& x : v) x = x == 0.0 ? eps : x - eps1;
    return true;
  }

  double divergence(const std::vector<std::uint64_t>& hist, const std::vector<double>& prefix,
                    std::size_t start, std::size_t end, std::vector<double>& p,
                    std::vector<double>& q) const {
    const std::size_t len = end - start;
    const std::size_t nq = num_quantized_bins;
    const std::size_t n = hist.size();
    // 1. Reference p: the window with the outside mass folded into its end bins.
    p.assign(len, 0.0);
    for (std::size_t j = 0; j < len; ++j) p[j] = static_cast<double>(hist[start + j]);
    p[0] += prefix[start];
    p[len - 1] += prefix[n] - prefix[end];
    // 2. Candidate q: merge into nq bins (remainder into the last), expand back uniformly over
    //    the bins where p is non-zero, truncated to an integer as ORT's int64 array does.
    const std::size_t m = len / nq;
    q.assign(len, 0.0);
    for (std::size_t k = 0; k < nq; ++k) {
      const std::size_t b0 = k * m;
      const std::size_t b1 = b0 + m;
      double merged = prefix[start + b1] - prefix[start + b0];
      if (k + 1 == nq) merged += prefix[end] - prefix[start + nq * m];
      std::size_t norm = 0;
      for (std::size_t j = b0; j < b1; ++j) norm += static_cast<std::size_t>(p[j] != 0.0);
      if (norm == 0) continue;
      const double spread = std::trunc(merged / static_cast<double>(norm));
      for (std::size_t j = b0; j < b1; ++j) q[j] = spread;
    }
    // 3. Smooth and compare: KL = sum P log(P/Q) with P, Q normalised.
    if (!smooth(p) || !smooth(q)) return std::numeric_limits<double>::infinity();
    double sp = 0.0;
    double sq = 0.0;
    for (std::size_t j = 0; j < len; ++j) {
      sp += p[j];
      sq += q[j];
    }
    double acc = 0.0;
    for (std::size_t j = 0; j < len; ++j) {
      if (q[j] <= 0.0) return std::numeric_limits<double>::infinity();
      acc += p[j] * std::log(p[j] / q[j]);
    }
    return acc / sp + std::log(sq / sp);
  }
};

}  // namespace quark
