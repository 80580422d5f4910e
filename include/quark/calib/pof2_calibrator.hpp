// SPDX-License-Identifier: MIT
// Power-of-two MinMSE (quark-spec §4.7, §4.8): five candidate scales 2^-(pos + i - 1),
// i = 0..4 (2s, s, s/2, s/4, s/8 around the min/max position `pos`), zero point fixed, the
// candidate with the smallest squared error wins (first on ties), and the returned range
// ((qmin - zp) s*, (qmax - zp) s*) reproduces s* when fed back to compute_scale_zp.
// Three ways to get the error, all in constant memory:
//   * histogram mode (MinMSEModePof2Scale "All", NumBins > 0): pof2_minmse_calibrator over a
//     histogram_observer in signed_extend mode with non_finite_policy::to_finite;
//   * raw mode ("All", NumBins = 0): a min/max pass, then pof2_sse_observer over the same batches;
//   * "MostCommon": pof2_most_common_observer, one search per batch, most frequent scale wins.
// Values go through numpy nan_to_num (NaN -> 0, +-Inf -> +-FLT_MAX) as in Quark's collector.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <span>
#include <vector>

#include <quark/calib/calib_result.hpp>
#include <quark/calib/detail/grid.hpp>
#include <quark/calib/percentile_calibrator.hpp>
#include <quark/observer/histogram_observer.hpp>

namespace quark {

/// MinMSEModePof2Scale.
enum class pof2_minmse_mode : std::uint8_t { all, most_common };

namespace detail {
inline constexpr int pof2_candidates = 5;

/// Position and zero point of the min/max scale for [lo, hi] on `g`.
struct pof2_start {
  int pos = 0;
  std::int64_t zp = 0;
};
inline pof2_start pof2_from_range(double lo, double hi, int_grid g,
                                  range_symmetry sym = range_symmetry::symmetric) noexcept {
  const grid_params p = scale_zp(lo, hi, g, sym);
  return {scale_to_position(p.scale), p.zero_point};
}

inline float candidate_scale(int pos, int i) noexcept {
  return std::ldexp(1.0f, -(pos + i - 1));
}

/// Adds sum (x - fq(x))^2 of every candidate. Blocks of the input get the errors of all
/// five candidates (fq_errors), then each candidate's sum runs over its block in
/// element order, so the sums are those of one plain sequential loop per candidate.
inline void pof2_sse(std::span<const float> x, pof2_start st, int_grid g,
                     std::array<double, pof2_candidates>& sse) noexcept {
  constexpr std::size_t block = 256;
  const float zp = static_cast<float>(st.zp);
  const float qmin = static_cast<float>(g.qmin);
  const float qmax = static_cast<float>(g.qmax);
  std::array<double, pof2_candidates> acc{};
  std::array<double, block> err;
  for (std::size_t b = 0; b < x.size(); b += block) {
    const std::size_t m = std::min(block, x.size() - b);
    for (int i = 0; i < pof2_candidates; ++i) {
      fq_errors(x.data() + b, m, candidate_scale(st.pos, i), zp, qmin, qmax, err.data());
      double a = acc[static_cast<std::size_t>(i)];
      for (std::size_t k = 0; k < m; ++k)
        a += err[k] * err[k];
      acc[static_cast<std::size_t>(i)] = a;
    }
  }
  for (std::size_t i = 0; i < acc.size(); ++i)
    sse[i] += acc[i];
}

inline int pof2_argmin(const std::array<double, pof2_candidates>& sse) noexcept {
  int best = 0;
  for (int i = 1; i < pof2_candidates; ++i) {
    if (sse[static_cast<std::size_t>(i)] < sse[static_cast<std::size_t>(best)])
      best = i;
  }
  return best;
}

inline calibrated_range pof2_range(int pos, std::int64_t zp, int_grid g) {
  const double s = std::ldexp(1.0, -pos);
  calibrated_range r;
  r.min = static_cast<float>(static_cast<double>(g.qmin - zp) * s);
  r.max = static_cast<float>(static_cast<double>(g.qmax - zp) * s);
  r.pof2_position = pos;
  r.origin = scale_origin::searched;
  return r;
}

inline void require_symmetric(range_symmetry s) {
  if (s != range_symmetry::symmetric) {
    throw_config("quark.calib.bad_option",
                 "power-of-two MinMSE requires CalibTensorRangeSymmetric=True");
  }
}
}  // namespace detail

/// Histogram-mode pof2 MinMSE. `grid` is the symmetric table of the activation type
/// (INT8 -127..127, UINT8 0..255, INT16 -32767..32767).
///
/// ```cpp
/// quark::histogram_observer h{{.mode = quark::histogram_mode::signed_extend, .num_bins = 2048,
///                              .non_finite = quark::non_finite_policy::to_finite}};
/// h.observe(batch);
/// auto r = quark::pof2_minmse_calibrator{.grid = {-127, 127}}(h.stats());   // *r.pof2_position
/// ```
struct pof2_minmse_calibrator {
  int_grid grid{-127, 127};
  range_symmetry symmetry = default_range_symmetry(calib_method::pof2_minmse);

  [[nodiscard]] calibrated_range operator()(const histogram_data& h) const {
    detail::require_symmetric(symmetry);
    detail::require_histogram(h);
    // 1. Start position from the histogram's outer edges.
    const detail::pof2_start st = detail::pof2_from_range(h.edges.front(), h.edges.back(), grid);
    // 2. Squared error of the five candidates on the float32 bin centres, weighted by counts
    //    (empty bins add nothing).
    const float zp = static_cast<float>(st.zp);
    const float qmin = static_cast<float>(grid.qmin);
    const float qmax = static_cast<float>(grid.qmax);
    const std::vector<float> centre = detail::float_bin_centres(h.edges);
    std::vector<double> err(h.bins());
    std::array<double, detail::pof2_candidates> cost{};
    for (int i = 0; i < detail::pof2_candidates; ++i) {
      detail::fq_errors(centre.data(), centre.size(), detail::candidate_scale(st.pos, i), zp, qmin,
                        qmax, err.data());
      double acc = 0.0;
      for (std::size_t b = 0; b < h.bins(); ++b) {
        if (h.counts[b] != 0)
          acc += static_cast<double>(h.counts[b]) * err[b] * err[b];
      }
      cost[static_cast<std::size_t>(i)] = acc;
    }
    // 3. First minimum.
    return detail::pof2_range(st.pos + detail::pof2_argmin(cost) - 1, st.zp, grid);
  }
};

/// Raw-data pof2 MinMSE (NumBins = 0), second pass: the start position comes from the global
/// range of a first minmax_observer pass, then every batch adds its squared errors.
///
/// ```cpp
/// quark::pof2_sse_observer sse{minmax.stats(), {-127, 127}};
/// for (auto batch : batches) sse.observe(batch);
/// quark::calibrated_range r = sse.result();
/// ```
class pof2_sse_observer {
 public:
  /// `symmetry` picks the zero point of the start (asymmetric: quark-spec §3.1's
  /// RNE(qmin - rmin / s)); the candidates keep it fixed.
  pof2_sse_observer(const range_stats& global, int_grid grid,
                    range_symmetry symmetry = range_symmetry::symmetric)
      : grid_(grid) {
    detail::require_values(global);
    start_ =
        detail::pof2_from_range(static_cast<double>(detail::to_finite(global.min)),
                                static_cast<double>(detail::to_finite(global.max)), grid, symmetry);
  }
  /// A given start: the candidates are 2^-(start_position + i - 1), i = 0..4, on `grid` with
  /// `zero_point` fixed. For a caller whose scale table and clip table differ (Quark's signed
  /// weights: the scale from the full table, values clipped to the symmetric one, §1.3).
  pof2_sse_observer(int start_position, std::int64_t zero_point, int_grid grid) noexcept
      : grid_(grid), start_{start_position, zero_point} {}
  void observe(std::span<const float> x) noexcept { detail::pof2_sse(x, start_, grid_, sse_); }
  void merge(const pof2_sse_observer& o) noexcept {
    for (std::size_t i = 0; i < sse_.size(); ++i)
      sse_[i] += o.sse_[i];
  }
  void reset() noexcept { sse_ = {}; }
  [[nodiscard]] const std::array<double, detail::pof2_candidates>& stats() const noexcept {
    return sse_;
  }
  [[nodiscard]] calibrated_range result() const {
    return detail::pof2_range(start_.pos + detail::pof2_argmin(sse_) - 1, start_.zp, grid_);
  }

 private:
  int_grid grid_;
  detail::pof2_start start_{};
  std::array<double, detail::pof2_candidates> sse_{};
};

/// The weight-style five-candidate search on one tensor (quark-spec §4.8, pof2 MinMSE weights
/// and constants), symmetric or with the asymmetric zero point of the min/max range held fixed.
///
/// ```cpp
/// auto r = quark::pof2_minmse_search(weights, {-127, 127});   // *r.pof2_position
/// auto a = quark::pof2_minmse_search(values, {-128, 127}, quark::range_symmetry::asymmetric);
/// ```
inline calibrated_range pof2_minmse_search(std::span<const float> x, int_grid grid,
                                           range_symmetry symmetry = range_symmetry::symmetric) {
  range_stats s;
  for (const float raw : x) {
    const float v = detail::to_finite(raw);
    s.min = v < s.min ? v : s.min;
    s.max = v > s.max ? v : s.max;
  }
  s.count = x.size();
  pof2_sse_observer o{s, grid, symmetry};
  o.observe(x);
  return o.result();
}

/// The same search from a start the caller computed (its position and zero point), the values
/// clipped to `grid`: the form for Quark's asymmetric signed weights, whose scale and zero point
/// come from the full table while quantize_nparray clips to the symmetric one (quark-spec §1.3).
///
/// ```cpp
/// auto r = quark::pof2_minmse_search(weights, {-127, 127}, /*start_position=*/7, /*zp=*/-109);
/// ```
inline calibrated_range pof2_minmse_search(std::span<const float> x, int_grid grid,
                                           int start_position, std::int64_t zero_point) {
  if (x.empty())
    detail::throw_invalid("quark.calib.empty_input", "no value to search a scale for");
  pof2_sse_observer o{start_position, zero_point, grid};
  o.observe(x);
  return o.result();
}

/// MinMSEModePof2Scale "MostCommon": one search per batch; the most frequent position wins
/// (ties: the smallest scale, i.e. the largest position, as Quark's sorted unique values do).
///
/// ```cpp
/// quark::pof2_most_common_observer mc{{-127, 127}};
/// for (auto batch : batches) mc.observe(batch);
/// quark::calibrated_range r = mc.result();
/// ```
class pof2_most_common_observer {
 public:
  explicit pof2_most_common_observer(int_grid grid) : grid_(grid) {}
  void observe(std::span<const float> x) {
    if (x.empty())
      return;
    const calibrated_range r = pof2_minmse_search(x, grid_);
    ++votes_[*r.pof2_position];
  }
  void merge(const pof2_most_common_observer& o) {
    for (const auto& [pos, n] : o.votes_)
      votes_[pos] += n;
  }
  void reset() noexcept { votes_.clear(); }
  /// Position -> number of batches that chose it.
  [[nodiscard]] const std::map<int, std::uint64_t>& stats() const noexcept { return votes_; }
  [[nodiscard]] calibrated_range result() const {
    if (votes_.empty())
      detail::throw_invalid("quark.calib.empty_input", "no batch was observed");
    int best = votes_.begin()->first;
    std::uint64_t most = 0;
    for (const auto& [pos, n] : votes_) {
      if (n >= most) {  // ascending positions: ">=" lets the largest position win ties
        most = n;
        best = pos;
      }
    }
    const std::int64_t zp =
        detail::scale_zp(-1.0, 1.0, grid_, range_symmetry::symmetric).zero_point;
    return detail::pof2_range(best, zp, grid_);
  }

 private:
  int_grid grid_;
  std::map<int, std::uint64_t> votes_;
};

}  // namespace quark
