// SPDX-License-Identifier: MIT
// A mergeable, streaming histogram observer with the three range-growth rules of Quark/ORT
// (quark-spec §4.2, §4.7, §4.9). Memory is O(bins): the data of a batch is binned and dropped.
// Bin edges are kept explicitly in double precision (Quark computes them in the input dtype,
// float32; values within one float32 ulp of an edge may land in the neighbouring bin).
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include <quark/observer/detail/histogram_kernel.hpp>
#include <quark/observer/detail/minmax_kernel.hpp>
#include <quark/observer/range_stats.hpp>

namespace quark {

/// Which values are binned and how the range grows when a batch exceeds it.
enum class histogram_mode : std::uint8_t {
  /// |x| on [min|x|, max|x|] of the first batch, grown to the right by equal-width bins;
  /// later values below the first edge are dropped (Percentile symmetric, LayerwisePercentile).
  absolute,
  /// x on (-T, T), T = max|x| of the first batch; grown symmetrically by whole strides,
  /// old counts centred (ORT merge_histogram: Percentile asymmetric, Entropy, Distribution).
  signed_symmetric,
  /// x on [min, max] of the first batch; grown by whole bins on either side, edges regenerated
  /// over the extended range, old counts shifted (Quark's pof2 MinMSE collector).
  signed_extend,
};

/// Options of histogram_observer. `num_bins` is NumBins (2048 for Percentile, 128 for Entropy).
struct histogram_options {
  histogram_mode mode = histogram_mode::absolute;
  std::size_t num_bins = 2048;
  non_finite_policy non_finite = non_finite_policy::reject_inf;
  /// Growth beyond this many bins throws "quark.calib.histogram_too_large" (an outlier 1e6x the
  /// first batch's range would otherwise allocate billions of bins, as it does in Quark).
  std::size_t max_bins = std::size_t{1} << 24;
  /// `absolute` and `signed_symmetric` modes: the smallest percentile that will be asked of the
  /// histogram (Percentile: 99.999), or 0 (the default) for every count exact. When set, once the
  /// histogram holds at least lump_min_values counts, the bins between its top `lump_tail_share`
  /// of counts and (signed) its bottom one, which is at least 100 times the 1 - p/100 the
  /// percentile leaves outside, are lumped: later values in them are only counted, into the
  /// highest of them (histogram_data::lump_begin, lump_end). A percentile that lands outside the
  /// lumped bins is the same as without lumping (percentile_decided()), and the binning of most
  /// values becomes two compares and a popcount.
  double lump_percentile = 0.0;
  double lump_tail_share = 0.01;
  std::size_t lump_min_values = std::size_t{1} << 14;
  /// `signed_extend` mode without lumping: when > 0, the observer keeps its last batch for the
  /// histograms derived from it (observe_mapped): the batch's counts and every value its kernel
  /// flagged, with its bin, where any value within `derive_margin` bins of an edge is flagged.
  /// The counts are the same; the kernel takes the exact path for a few more values. 0 (the
  /// default): nothing is kept.
  double derive_margin = 0.0;
};

/// What observe_mapped works out from the edges of a source and a derived histogram, kept
/// between batches (recomputed when either histogram's edges change).
struct histogram_map {
  double x_lo = 0.0;
  double x_hi = 0.0;
  double y_lo = 0.0;
  double y_hi = 0.0;
  std::size_t x_bins = 0;
  std::size_t y_bins = 0;
  bool valid = false;
  /// The derived bin of the source bin's values that were not flagged.
  std::vector<std::int32_t> to;
  /// The smallest float at or above each derived edge, +Inf for the last: a derived value v
  /// lies in bin j exactly when y_floor[j] <= v < y_floor[j + 1] (the last bin is closed, and
  /// holds every value up to the range's end).
  std::vector<float> y_floor;
};

/// The statistic of a histogram observer: edges (size n + 1), counts (size n), the signed
/// observed extrema, and the ORT threshold T (signed_symmetric mode; it may be 0 while the edges
/// are numpy's (-0.5, 0.5)).
struct histogram_data {
  histogram_mode mode = histogram_mode::absolute;
  std::vector<double> edges;
  std::vector<std::uint64_t> counts;
  range_stats range;
  double threshold = 0.0;
  /// Lumped bins [lump_begin, lump_end) (histogram_options::lump_percentile; lump_end 0: none):
  /// the counts of the bins outside them are exact; bin lump_end - 1 holds every count of the
  /// lumped bins that bins lump_begin..lump_end-2 do not, and those hold only the counts of the
  /// batches before the lumping began. So every prefix sum outside the lumped bins, and the one
  /// that ends with them, is exact; the ones inside are at most the true ones. An |x|
  /// histogram's lumped bins start at 0.
  std::size_t lump_begin = 0;
  std::size_t lump_end = 0;

  [[nodiscard]] bool empty() const noexcept { return counts.empty(); }
  [[nodiscard]] std::size_t bins() const noexcept { return counts.size(); }
  [[nodiscard]] std::uint64_t total() const noexcept {
    std::uint64_t t = 0;
    for (const std::uint64_t c : counts)
      t += c;
    return t;
  }
  friend bool operator==(const histogram_data&, const histogram_data&) = default;
};

/// One batch observed in parts (e.g. one per thread) by histogram_observer::observe_piece,
/// grow_pieces, finish_piece and add_pieces, which together give exactly the state of
/// observe(batch). Make it with histogram_observer::begin_pieces.
class histogram_pieces {
 public:
  /// What phase 2 (finish_piece) did to the batch, counted over batches.
  struct tally {
    std::size_t tail = 0;    ///< |x| histogram grew: only |x| >= the old last edge read again
    std::size_t binned = 0;  ///< signed histogram grew (edges regenerated): binned again
  };
  [[nodiscard]] std::size_t size() const noexcept { return pieces_.size(); }
  /// Whether the batch grew the range (or was the first batch); valid after grow_pieces.
  [[nodiscard]] bool grew() const noexcept { return grew_; }
  [[nodiscard]] const tally& work() const noexcept { return tally_; }

 private:
  friend class histogram_observer;
  enum class action : std::uint8_t { none, tail, bin };
  struct piece {
    std::vector<std::uint64_t> counts;  ///< empty: nothing binned
    detail::minmax_partial extrema;     ///< raw min, max (NaN excluded), NaN count
    float abs_min = std::numeric_limits<float>::infinity();  ///< first |x| batch only
    std::size_t size = 0;
    detail::flag_log log;  ///< histogram_options::derive_margin: the part's flagged values
  };
  histogram_pieces(std::size_t n, bool extrema_first) : pieces_(n), extrema_first_(extrema_first) {}

  std::vector<piece> pieces_;
  bool extrema_first_ = false;
  bool grew_ = false;
  action next_ = action::none;
  std::size_t old_bins_ = 0;
  double old_last_ = 0.0;
  tally tally_;
};

/// Streaming histogram with Quark's growth rules.
///
/// ```cpp
/// quark::histogram_observer h{{.mode = quark::histogram_mode::absolute, .num_bins = 2048}};
/// for (auto batch : batches) h.observe(batch);
/// const quark::histogram_data& d = h.stats();   // feed a percentile/entropy calibrator
/// ```
/// Observing one batch or the same data split in several batches gives identical counts when no
/// batch grows the range; growth changes the edges (this is Quark's behaviour), see the tests for
/// the measured tolerance.
class histogram_observer {
 public:
  using state_type = histogram_data;

  explicit histogram_observer(histogram_options opt = {}) : opt_(opt) {
    if (opt_.num_bins == 0 || opt_.num_bins > hard_max_bins) {
      detail::throw_config("quark.calib.bad_option", "NumBins must lie in [1, 2^30]");
    }
    if (!(opt_.derive_margin >= 0.0 && opt_.derive_margin < 0.01) ||
        (opt_.derive_margin > 0.0 &&
         (opt_.mode != histogram_mode::signed_extend || opt_.lump_percentile > 0.0))) {
      detail::throw_config("quark.calib.bad_option",
                           "derive_margin must lie in [0, 0.01), and be 0 unless the mode is "
                           "signed_extend without lumping");
    }
    if (!(opt_.lump_percentile >= 0.0 && opt_.lump_percentile <= 100.0) ||
        !(opt_.lump_tail_share > 0.0 && opt_.lump_tail_share <= 1.0)) {
      detail::throw_config("quark.calib.bad_option",
                           "lump_percentile must lie in [0, 100] and lump_tail_share in (0, 1]");
    }
    data_.mode = opt_.mode;
  }
  histogram_observer(histogram_options opt, state_type s) : histogram_observer(opt) {
    opt_.mode = s.mode;
    data_ = std::move(s);
  }

  [[nodiscard]] const histogram_options& options() const noexcept { return opt_; }
  [[nodiscard]] const histogram_data& stats() const noexcept { return data_; }
  [[nodiscard]] const state_type& state() const noexcept { return data_; }
  void reset() noexcept {
    data_.edges.clear();
    data_.counts.clear();
    data_.range = range_stats{};
    data_.threshold = 0.0;
    data_.lump_begin = 0;
    data_.lump_end = 0;
    kept_.usable = false;
  }

  /// Bins one batch. Throws "quark.calib.infinite_input" for +-Inf under reject_inf.
  /// Once the range is set, a batch that does not grow it is read from memory once.
  void observe(std::span<const float> x) {
    kept_.usable = false;
    if (!data_.counts.empty()) {
      // 1. Optimistic pass: count on the current edges (kept if the range does not grow).
      detail::minmax_partial p;
      if (observe_within(x, p))
        return;
      // 2. The batch grows the range: grow, then bin again on the new edges.
      const batch_extrema b = summarize(x.size(), p);
      account(b, x.size());
      grow(b, x);
      bin_kept(x);
      maybe_lump();
      return;
    }
    // First batch: extrema, edges, bins.
    const batch_extrema b = summarize(x.size(), detail::minmax_reduce(x));
    if (b.valid == 0) {
      data_.range.nan_count += x.size();
      return;
    }
    account(b, x.size());
    grow(b, x);
    bin_kept(x);
    maybe_lump();
  }

  /// observe(x) when the histogram has a range and `x` does not grow it: the same state as
  /// observe(x) afterwards, and true. Otherwise false and the state is unchanged. Either way
  /// `extrema` receives the batch's raw min, max (NaN excluded) and NaN count, which is all the
  /// growth of observe(x) depends on (after a first batch). One pass over `x`.
  [[nodiscard]] bool observe_within(std::span<const float> x, detail::minmax_partial& extrema) {
    kept_.usable = false;
    if (data_.counts.empty()) {
      extrema = detail::minmax_reduce(x);
      return false;
    }
    batch_extrema b{};
    if (x.size() <= detail::histogram_max_chunk) {
      // Count into the thread's 32-bit tables, folded only if the range does not grow.
      detail::count_tables& tables = detail::thread_count_tables();
      const detail::count_tables_guard guard(tables);  // drops the tables unless folded
      detail::flag_log log(derives() ? flag_log_capacity : 0);
      extrema = count_into(x, tables, derives() ? &log : nullptr);
      b = summarize(x.size(), extrema);
      if (b.valid != 0 && !would_grow(b)) {
        account(b, x.size());
        if (derives()) {
          kept_.counts.assign(data_.counts.size(), 0);
          tables.fold_into(kept_.counts);
          for (std::size_t i = 0; i < kept_.counts.size(); ++i)
            data_.counts[i] += kept_.counts[i];
          kept_.values.assign(log.values.begin(), log.values.end());
          kept_.bins.assign(log.bins.begin(), log.bins.end());
          keep(extrema, x.size(), !log.overflow);
        } else {
          tables.fold_into(data_.counts);
        }
        maybe_lump();
        return true;
      }
    } else {
      std::vector<std::uint64_t> tmp(data_.counts.size(), 0);  // beyond one table chunk
      extrema = bin_into(x, tmp);
      b = summarize(x.size(), extrema);
      if (b.valid != 0 && !would_grow(b)) {
        account(b, x.size());
        for (std::size_t i = 0; i < tmp.size(); ++i)
          data_.counts[i] += tmp[i];
        maybe_lump();
        return true;
      }
    }
    if (b.valid == 0) {
      data_.range.nan_count += x.size();
      return true;
    }
    return false;
  }

  /// A batch observed in parts, with exactly the state of observe(batch) at the end. Part k
  /// (k < parts) is whatever spans of the batch observe_piece(b, k, next) pulls from its
  /// generator `next` (a callable returning the next span, or an empty span when done); every
  /// value of the batch must be pulled exactly once over all parts, in any order. Phase 2 does the
  /// same with finish_piece, where the batch may be split among the parts differently.
  /// observe_piece and finish_piece only read the observer and write their own part, so the parts
  /// may run on different threads at once (e.g. pulling chunks from a shared atomic counter, which
  /// balances threads that start late); grow_pieces and add_pieces run alone.
  /// ```cpp
  /// quark::histogram_pieces b = h.begin_pieces(parts);
  /// for (k...) h.observe_piece(b, k, next);                          // in parallel
  /// if (h.grow_pieces(b)) for (k...) h.finish_piece(b, k, next2);   // in parallel
  /// h.add_pieces(b);                                                 // h as after observe(batch)
  /// ```
  /// Phase 1 bins each part on the current edges (one fold of the thread's count tables per
  /// part) and records its extrema; usually the batch does not grow the range and the counts just
  /// add up (one read of the data). A batch that grows the range grows it once from the parts'
  /// extrema; then an |x| histogram (its growth only appends edges, so a value below the old last
  /// edge keeps its bin) reads again only its values with |x| at or above the old last edge, and a
  /// signed one is binned again on the new edges. `extrema_first` makes phase 1 find the extrema
  /// only and phase 2 bin once on the final edges: cheaper for a batch expected to grow a signed
  /// histogram (the first batch is always observed so).
  [[nodiscard]] histogram_pieces begin_pieces(std::size_t parts, bool extrema_first = false) const {
    histogram_pieces b(parts, extrema_first || data_.counts.empty());
    if (derives()) {
      for (histogram_pieces::piece& p : b.pieces_)
        p.log = detail::flag_log(flag_log_capacity);
    }
    return b;
  }

  /// Phase 1 of part `k` (see begin_pieces).
  template <class Next>
  void observe_piece(histogram_pieces& b, std::size_t k, Next&& next) const {
    histogram_pieces::piece& p = b.pieces_.at(k);
    if (b.extrema_first_) {
      const bool need_min = opt_.mode == histogram_mode::absolute && data_.counts.empty();
      for (std::span<const float> x = next(); !x.empty(); x = next()) {
        p.size += x.size();
        merge_extrema(p.extrema, detail::minmax_reduce(x));
        if (need_min) {
          const float m = detail::abs_min_reduce(x);  // NaN ignored
          p.abs_min = m < p.abs_min ? m : p.abs_min;
        }
      }
      return;
    }
    if (p.counts.empty())
      p.counts.assign(data_.counts.size(), 0);
    count_parts(std::forward<Next>(next), p, derives() ? &p.log : nullptr);
  }

  /// Grows the range as observe(batch) would, from the extrema of every part; returns whether
  /// phase 2 (finish_piece on every part) is needed. Throws "quark.calib.infinite_input" as
  /// observe(batch) does, the state unchanged.
  [[nodiscard]] bool grow_pieces(histogram_pieces& b) {
    detail::minmax_partial all;
    std::size_t size = 0;
    float abs_min = std::numeric_limits<float>::infinity();
    for (const histogram_pieces::piece& p : b.pieces_) {
      merge_extrema(all, p.extrema);
      abs_min = p.abs_min < abs_min ? p.abs_min : abs_min;
      size += p.size;
    }
    const bool first = data_.counts.empty();
    const batch_extrema e = summarize(size, all);
    b.grew_ = false;
    b.next_ = histogram_pieces::action::none;
    if (e.valid == 0) {  // nothing but NaN (or nothing): no count
      data_.range.nan_count += size;
      for (histogram_pieces::piece& p : b.pieces_)
        p.counts.clear();
      return false;
    }
    b.old_bins_ = data_.counts.size();
    b.old_last_ = first ? 0.0 : data_.edges.back();
    account(e, size);
    if (first || would_grow(e)) {
      b.grew_ = true;
      grow_to(e, abs_min);
    }
    if (b.extrema_first_) {
      b.next_ = histogram_pieces::action::bin;
    } else if (b.grew_ && opt_.mode == histogram_mode::absolute) {
      b.next_ = histogram_pieces::action::tail;
      ++b.tally_.tail;
    } else if (b.grew_) {
      b.next_ = histogram_pieces::action::bin;  // signed growth regenerates the edges
      ++b.tally_.binned;
    }
    // Every part's counts on the final edges: zero to bin again, else extended by the bins an
    // |x| histogram appended (phase 2 adds the tail).
    for (histogram_pieces::piece& p : b.pieces_) {
      if (b.next_ == histogram_pieces::action::bin) {
        p.counts.assign(bins(), 0);
      } else {
        p.counts.resize(bins(), 0);
      }
    }
    return b.next_ != histogram_pieces::action::none;
  }

  /// Phase 2 of part `k` (see begin_pieces and grow_pieces).
  template <class Next>
  void finish_piece(histogram_pieces& b, std::size_t k, Next&& next) const {
    histogram_pieces::piece& p = b.pieces_.at(k);
    switch (b.next_) {
      case histogram_pieces::action::none:
        return;
      case histogram_pieces::action::bin: {
        histogram_pieces::piece q;
        q.counts = std::move(p.counts);
        p.log.clear();
        count_parts(std::forward<Next>(next), q, derives() ? &p.log : nullptr);
        p.counts = std::move(q.counts);
        return;
      }
      case histogram_pieces::action::tail:
        move_tail(std::forward<Next>(next), b.old_last_, b.old_bins_, p.counts);
        return;
    }
  }

  /// Adds the parts' counts: the state is that of observe(batch). (A part's bin may have wrapped
  /// below zero in phase 2, when it read again a value on the old last edge that another part
  /// had counted; unsigned sums are exact modulo 2^64, so the total is right.)
  /// A part whose counts do not match the current edges (made before the histogram grew in
  /// another way) throws "quark.calib.pieces" and nothing is added.
  void add_pieces(histogram_pieces& b) {
    for (const histogram_pieces::piece& p : b.pieces_) {
      if (!p.counts.empty() && p.counts.size() != data_.counts.size()) {
        detail::throw_invalid("quark.calib.pieces",
                              "a part's counts do not match the current edges (made before the "
                              "histogram grew, or not finished after growth)");
      }
    }
    for (const histogram_pieces::piece& p : b.pieces_) {
      for (std::size_t i = 0; i < p.counts.size(); ++i)
        data_.counts[i] += p.counts[i];
    }
    maybe_lump();
    kept_.usable = false;
    if (derives()) {
      // The batch, for the histograms derived from this one: usable when it kept the edges.
      kept_.counts.assign(data_.counts.size(), 0);
      kept_.values.clear();
      kept_.bins.clear();
      detail::minmax_partial all;
      std::size_t size = 0;
      bool whole = true;
      for (histogram_pieces::piece& p : b.pieces_) {
        merge_extrema(all, p.extrema);
        size += p.size;
        whole = whole && !p.log.overflow && !p.counts.empty();
        for (std::size_t i = 0; i < p.counts.size(); ++i)
          kept_.counts[i] += p.counts[i];
        // Only the entries used (a part's log reserves room for many more), and the part's
        // room freed now.
        kept_.values.insert(kept_.values.end(), p.log.values.begin(), p.log.values.end());
        kept_.bins.insert(kept_.bins.end(), p.log.bins.begin(), p.log.bins.end());
        p.log = detail::flag_log();
      }
      keep(all, size, whole);
    }
  }

  /// Observes the batch that `f` makes of the last batch of `x`, without reading it: `f` must be
  /// monotone (non-decreasing or non-increasing) on floats and give exactly the values the
  /// derived tensor holds (y[i] = f(x[i]), e.g. x * c, x + c, x / c in float arithmetic, and
  /// their compositions). The state afterwards is that of observe(y) when this returns true; it
  /// returns false, the state unchanged, when it cannot be sure (observe y instead):
  /// - both histograms `signed_extend` without lumping, `x` with a derive_margin, and x's last
  ///   batch observed whole, without NaN or +-Inf, its flagged values all logged;
  /// - y's extrema (f of x's) finite and not zero (the sign of a zero extremum is not f's to
  ///   tell); y's range grows to them as observe(y) would grow it;
  /// - every value of an x bin that the kernel could leave unflagged (more than 0.9 margin
  ///   from its edges) lands in one y bin (checked at the ends of that stretch, f being
  ///   monotone), and so do +0 and -0 (counted apart by the kernels).
  /// Then y's counts are x's, each bin moved to its y bin, corrected by the flagged values of
  /// x (each one's y bin computed exactly). `map` keeps the bin map between batches. Each batch
  /// of x is to be derived once: a second call adds it again.
  template <class F>
  [[nodiscard]] bool observe_mapped(const histogram_observer& x, F&& f, histogram_map& map) {
    constexpr auto T = detail::bin_transform::identity;
    const kept_batch& k = x.kept_;
    if (opt_.mode != histogram_mode::signed_extend ||
        x.opt_.mode != histogram_mode::signed_extend || !(x.opt_.derive_margin > 0.0) ||
        opt_.lump_percentile > 0.0 || data_.lump_end != 0 || !k.usable || k.size == 0 ||
        k.extrema.nan_count != 0 || !std::isfinite(k.extrema.min) ||
        !std::isfinite(k.extrema.max) || k.counts.size() + 1 != x.data_.edges.size())
      return false;
    // Every value of x and y is finite (f of finite extrema, monotone): the non-finite policies
    // (reject_inf, to_finite) bin them alike.
    const float a = f(k.extrema.min);
    const float c = f(k.extrema.max);
    if (!std::isfinite(a) || !std::isfinite(c) || a == 0.0f || c == 0.0f)
      return false;
    const batch_extrema e{a < c ? a : c, a < c ? c : a, k.size};
    // observe(y) grows the range to the batch's extrema first (and only from them); undone if
    // the batch cannot be derived.
    std::optional<histogram_data> before;
    if (data_.counts.empty() || would_grow(e)) {
      before.emplace(data_);
      try {
        grow_to(e, 0.0f);
      } catch (const std::exception&) {  // too many bins, or no memory for them
        data_ = std::move(*before);
        return false;  // observe(y) reports it, naming y
      }
    }
    auto decline = [&] {
      if (before)
        data_ = std::move(*before);
      return false;
    };
    const std::vector<double>& ex = x.data_.edges;
    const std::vector<double>& ey = data_.edges;
    const detail::bin_setup<T> ys(ey);
    const auto sink = ys.sink();
    const std::size_t nx = ex.size() - 1;
    if (!map.valid || map.x_lo != ex.front() || map.x_hi != ex.back() || map.x_bins != nx ||
        map.y_lo != ey.front() || map.y_hi != ey.back() || map.y_bins != ey.size() - 1) {
      map.valid = false;
      map.to.assign(nx, 0);
      const double d =
          0.9 * x.opt_.derive_margin * (ex.back() - ex.front()) / static_cast<double>(nx);
      for (std::size_t b = 0; b < nx; ++b) {
        const float lo = detail::float_at_least(ex[b] + d);
        const float hi = -detail::float_at_least(-(ex[b + 1] - d));
        if (!(lo <= hi))
          continue;  // every value of the bin is flagged
        const std::int32_t yl = ys.exact_bin(f(lo));
        if (yl == sink || ys.exact_bin(f(hi)) != yl)
          return decline();
        map.to[b] = yl;
      }
      if (ex.front() <= 0.0 && ex.back() >= 0.0) {
        const detail::bin_setup<T> xs(ex);
        const std::int32_t z = map.to[static_cast<std::size_t>(xs.exact_bin(0.0f))];
        if (ys.exact_bin(f(0.0f)) != z || ys.exact_bin(f(-0.0f)) != z)
          return decline();
      }
      map.y_floor.resize(ey.size());
      for (std::size_t j = 0; j + 1 < ey.size(); ++j)
        map.y_floor[j] = detail::float_at_least(ey[j]);
      map.y_floor.back() = std::numeric_limits<float>::infinity();
      map.x_lo = ex.front();
      map.x_hi = ex.back();
      map.x_bins = nx;
      map.y_lo = ey.front();
      map.y_hi = ey.back();
      map.y_bins = ey.size() - 1;
      map.valid = true;
    }
    std::vector<std::uint64_t> add(data_.counts.size(), 0);
    for (std::size_t b = 0; b < nx; ++b)
      add[static_cast<std::size_t>(map.to[b])] += k.counts[b];
    // Unsigned sums are exact modulo 2^64: a bin may dip below zero on the way.
    for (std::size_t i = 0; i < k.values.size(); ++i) {
      const auto bx = static_cast<std::size_t>(k.bins[i]);
      if (bx >= nx)
        return decline();  // cannot happen with no NaN and x's range covering its batch
      const float v = f(k.values[i]);
      const auto to = static_cast<std::size_t>(map.to[bx]);
      if (v >= map.y_floor[to] && v < map.y_floor[to + 1])
        continue;  // in the bin its x bin maps to (most flagged values)
      const std::int32_t by = ys.exact_bin(v);
      if (by == sink)
        return decline();
      --add[to];
      ++add[static_cast<std::size_t>(by)];
    }
    account(e, k.size);
    for (std::size_t i = 0; i < add.size(); ++i)
      data_.counts[i] += add[i];
    kept_.usable = false;
    return true;
  }

  /// Adds another observer's histogram. Exact (counts add) when both have the same edges, which
  /// is the case for observers that saw batches of the same range; otherwise this histogram grows
  /// with its own rule to cover the other's range and each of the other's bins is added to the
  /// bin holding its centre (approximate by up to one bin).
  void merge(const histogram_observer& other) {
    kept_.usable = false;
    const histogram_data& o = other.data_;
    if (o.mode != data_.mode) {
      detail::throw_invalid("quark.calib.merge_mismatch", "histograms of different modes");
    }
    if (o.counts.empty()) {
      data_.range.nan_count += o.range.nan_count;
      return;
    }
    if (data_.counts.empty()) {
      const std::uint64_t nans = data_.range.nan_count;
      data_ = o;
      data_.range.nan_count += nans;
      return;
    }
    range_stats& r = data_.range;
    r.min = o.range.min < r.min ? o.range.min : r.min;
    r.max = o.range.max > r.max ? o.range.max : r.max;
    r.count += o.range.count;
    r.nan_count += o.range.nan_count;
    if (o.edges == data_.edges) {
      for (std::size_t i = 0; i < o.counts.size(); ++i)
        data_.counts[i] += o.counts[i];
      // The union of the lumped bins: prefix sums stay exact outside it and at its end.
      if (o.lump_end != 0) {
        data_.lump_begin =
            data_.lump_end != 0 ? std::min(data_.lump_begin, o.lump_begin) : o.lump_begin;
        data_.lump_end = std::max(data_.lump_end, o.lump_end);
      }
      return;
    }
    if (o.lump_end != 0 || data_.lump_end != 0) {
      detail::throw_invalid("quark.calib.merge_mismatch",
                            "lumped histograms merge only on the same edges");
    }
    // Grow to cover the other's edges, then rebin its counts by bin centre.
    switch (data_.mode) {
      case histogram_mode::absolute:
        append_right(o.edges.back());
        break;
      case histogram_mode::signed_symmetric:
        grow_symmetric_to(o.threshold);
        break;
      case histogram_mode::signed_extend:
        grow_extend(o.edges.front(), o.edges.back());
        break;
    }
    const std::vector<double>& e = data_.edges;
    for (std::size_t i = 0; i < o.counts.size(); ++i) {
      if (o.counts[i] == 0)
        continue;
      const double c = 0.5 * (o.edges[i] + o.edges[i + 1]);
      data_.counts[locate(e, c)] += o.counts[i];
    }
  }

 private:
  /// The last batch, for observe_mapped (histogram_options::derive_margin).
  struct kept_batch {
    std::vector<std::uint64_t> counts;
    std::vector<float> values;       ///< the flagged values of the batch
    std::vector<std::int32_t> bins;  ///< and their bins
    detail::minmax_partial extrema;
    std::size_t size = 0;
    bool usable = false;
  };
  /// Flagged values one log holds (then the batch is not kept): about 2e-3 of the values are
  /// flagged with a 2048-bin histogram and the default margin.
  static constexpr std::size_t flag_log_capacity = std::size_t{1} << 14;

  [[nodiscard]] bool derives() const noexcept { return opt_.derive_margin > 0.0; }
  void keep(const detail::minmax_partial& extrema, std::size_t size, bool usable) noexcept {
    kept_.extrema = extrema;
    kept_.size = size;
    kept_.usable = usable;
  }

  /// Extrema of a batch after the non-finite policy; `valid` values enter the histogram.
  struct batch_extrema {
    float min;
    float max;
    std::uint64_t valid;
  };

  batch_extrema summarize(std::size_t size, detail::minmax_partial p) const {
    std::uint64_t valid = size - p.nan_count;
    if (opt_.non_finite == non_finite_policy::to_finite) {
      constexpr float big = std::numeric_limits<float>::max();
      if (p.nan_count > 0) {
        p.min = std::fmin(p.min, 0.0f);
        p.max = std::fmax(p.max, 0.0f);
        valid = size;
      }
      p.min = std::fmax(p.min, -big);
      p.max = std::fmin(p.max, big);
    } else if (valid > 0 && (std::isinf(p.min) || std::isinf(p.max))) {
      detail::throw_invalid("quark.calib.infinite_input", "histogram of data containing +-Inf");
    }
    return {p.min, p.max, valid};
  }

  void account(const batch_extrema& b, std::size_t size) noexcept {
    range_stats& r = data_.range;
    r.nan_count += size - b.valid;
    r.count += b.valid;
    r.min = b.min < r.min ? b.min : r.min;
    r.max = b.max > r.max ? b.max : r.max;
  }

  [[nodiscard]] bool would_grow(const batch_extrema& b) const noexcept {
    const auto lo = static_cast<double>(b.min);
    const auto hi = static_cast<double>(b.max);
    switch (opt_.mode) {
      case histogram_mode::absolute:
        return std::fmax(std::fabs(lo), std::fabs(hi)) > data_.edges.back();
      case histogram_mode::signed_symmetric:
        return std::fmax(std::fabs(lo), std::fabs(hi)) > data_.threshold;
      case histogram_mode::signed_extend:
        return lo < data_.edges.front() || hi > data_.edges.back();
    }
    return true;
  }

  void grow(const batch_extrema& b, std::span<const float> x) {
    const bool need_min = opt_.mode == histogram_mode::absolute && data_.counts.empty();
    grow_to(b, need_min ? detail::abs_min_reduce(x) : 0.0f);  // NaN ignored
  }

  /// Grows the range to cover a batch with extrema `b`; `abs_min` is the batch's smallest |x|
  /// (NaN ignored), read only by the first batch of an |x| histogram.
  void grow_to(const batch_extrema& b, float abs_min) {
    switch (opt_.mode) {
      case histogram_mode::absolute: {
        const double amax =
            std::fmax(std::fabs(static_cast<double>(b.min)), std::fabs(static_cast<double>(b.max)));
        if (data_.counts.empty()) {
          create(static_cast<double>(abs_min), amax);
        } else {
          append_right(amax);
        }
        break;
      }
      case histogram_mode::signed_symmetric: {
        detail::minmax_partial p;
        p.min = b.min;
        p.max = b.max;
        grow_symmetric(p);
        break;
      }
      case histogram_mode::signed_extend:
        grow_extend(static_cast<double>(b.min), static_cast<double>(b.max));
        break;
    }
  }

  [[nodiscard]] std::size_t bins() const noexcept { return data_.counts.size(); }

  static void merge_extrema(detail::minmax_partial& to, const detail::minmax_partial& p) noexcept {
    to.min = p.min < to.min ? p.min : to.min;
    to.max = p.max > to.max ? p.max : to.max;
    to.nan_count += p.nan_count;
  }

  /// Calls fn(t) with the kernel's bin transform of this histogram as a std::integral_constant.
  template <class Fn>
  void with_transform(Fn&& fn) const {
    using detail::bin_transform;
    if (opt_.mode == histogram_mode::absolute) {
      fn(std::integral_constant<bin_transform, bin_transform::absolute>{});
    } else if (opt_.non_finite == non_finite_policy::to_finite) {
      fn(std::integral_constant<bin_transform, bin_transform::to_finite>{});
    } else {
      fn(std::integral_constant<bin_transform, bin_transform::identity>{});
    }
  }

  /// Counts every span `next` yields into the thread's count tables on the current edges (the
  /// kernel's setup made once) and folds them into p.counts once (or whenever the 32-bit entries
  /// could overflow).
  template <class Next>
  void count_parts(Next&& next, histogram_pieces::piece& p, detail::flag_log* log = nullptr) const {
    with_setup(log, [&](auto t, const auto& setup) {
      constexpr detail::bin_transform T = decltype(t)::value;
      detail::count_tables& tables = detail::thread_count_tables();
      const detail::count_tables_guard guard(tables);  // zero again even if a kernel throws
      std::size_t pending = 0;
      for (std::span<const float> x = next(); !x.empty(); x = next()) {
        p.size += x.size();
        while (!x.empty()) {
          if (pending == detail::histogram_max_chunk) {
            tables.fold_into(p.counts);
            pending = 0;
          }
          const std::size_t m = std::min(x.size(), detail::histogram_max_chunk - pending);
          merge_extrema(p.extrema, detail::histogram_count<T>(x.first(m), setup, tables));
          pending += m;
          x = x.subspan(m);
        }
      }
      if (pending > 0)
        tables.fold_into(p.counts);
    });
  }

  /// Phase 2 of an |x| part binned on edges that then grew by appending: its values with
  /// |x| >= old_last (the batch's new maxima) go to their bins on the grown edges; one at
  /// old_last had been counted in the old last bin (old_bins - 1), now bin old_bins. Every other
  /// value keeps its bin. One integer compare per value; the tail is binned from a stack buffer
  /// into the thread's count tables (the kernel's setup made once), folded once at the end.
  template <class Next>
  void move_tail(Next&& next, double old_last, std::size_t old_bins,
                 std::span<std::uint64_t> counts) const {
    constexpr auto T = detail::bin_transform::absolute;
    // The smallest float >= old_last (> 0): |v| >= limit exactly when double(|v|) >= old_last,
    // and for |v| (sign bit clear) that is bits(|v|) >= bits(limit), NaN (above +Inf) excluded.
    const float limit = detail::float_at_least(old_last);
    const std::uint32_t lo_bits = std::bit_cast<std::uint32_t>(limit);
    constexpr std::uint32_t inf_bits = 0x7f800000u;
    const detail::bin_setup<T> setup(data_.edges);
    detail::count_tables& tables = detail::thread_count_tables();
    const detail::count_tables_guard guard(tables);
    constexpr std::size_t block = 64;
    constexpr std::size_t cap = 2048;
    std::array<float, cap> tail;
    std::size_t used = 0;
    std::size_t pending = 0;
    std::uint64_t on_edge = 0;
    auto flush = [&] {
      if (used == 0)
        return;
      if (pending + used > detail::histogram_max_chunk) {
        tables.fold_into(counts);
        pending = 0;
      }
      (void)detail::histogram_count<T>(std::span<const float>(tail.data(), used), setup, tables);
      pending += used;
      used = 0;
    };
    for (std::span<const float> x = next(); !x.empty(); x = next()) {
      for (std::size_t i = 0; i < x.size(); i += block) {
        const std::size_t m = std::min(block, x.size() - i);
        const float* q = x.data() + i;
        std::uint32_t any = 0;
        for (std::size_t j = 0; j < m; ++j) {
          const std::uint32_t a = std::bit_cast<std::uint32_t>(q[j]) & 0x7fffffffu;
          any |=
              static_cast<std::uint32_t>(a >= lo_bits) & static_cast<std::uint32_t>(a <= inf_bits);
        }
        if (any == 0)
          continue;
        if (used + block > cap)
          flush();
        for (std::size_t j = 0; j < m; ++j) {
          const float a = std::fabs(q[j]);
          if (a >= limit) {
            tail[used++] = q[j];
            on_edge += static_cast<double>(a) == old_last ? 1u : 0u;
          }
        }
      }
    }
    flush();
    if (pending > 0)
      tables.fold_into(counts);
    counts[old_bins - 1] -= on_edge;
  }

  /// The kernel's setup for the current edges, lumping as data_ says.
  template <detail::bin_transform T>
  [[nodiscard]] detail::bin_setup<T> make_setup() const noexcept {
    detail::bin_setup<T> s(data_.edges);
    if (T != detail::bin_transform::to_finite && data_.lump_end != 0)
      s.lump(data_.lump_begin, data_.lump_end);
    return s;
  }

  /// Calls fn(t, setup) with the kernel's bin transform of this histogram as a
  /// std::integral_constant and the setup for the current edges: a watched one logging into
  /// `log` (derive_margin) when `log` is set (signed histograms only), else the plain one.
  template <class Fn>
  void with_setup(detail::flag_log* log, Fn&& fn) const {
    with_transform([&](auto t) {
      constexpr detail::bin_transform T = decltype(t)::value;
      if constexpr (T != detail::bin_transform::absolute) {
        if (log != nullptr) {
          fn(t, detail::watched_setup<T>(make_setup<T>(), opt_.derive_margin, log));
          return;
        }
      }
      fn(t, make_setup<T>());
    });
  }

  /// Starts lumping (histogram_options::lump_percentile) once the counts allow it: the lumped
  /// bins end at the highest bin b whose counts from b up are at least share * total, and start
  /// at 0 (|x|) or at the lowest bin a whose counts below a are at least as many (signed; its
  /// threshold must not be 0, where ORT's growth re-edges without moving the counts). Later
  /// batches add to the other bins only what they would add anyway.
  void maybe_lump() noexcept {
    const bool absolute = opt_.mode == histogram_mode::absolute;
    if (!(absolute || (opt_.mode == histogram_mode::signed_symmetric && data_.threshold > 0.0)) ||
        !(opt_.lump_percentile > 0.0) || data_.lump_end != 0 || data_.counts.empty())
      return;
    const double share =
        std::fmax(opt_.lump_tail_share, 100.0 * (1.0 - opt_.lump_percentile / 100.0));
    const std::uint64_t total = data_.total();
    if (!(share < 0.5) || total < opt_.lump_min_values)
      return;
    const double need = share * static_cast<double>(total);
    const std::size_t n = data_.counts.size();
    std::uint64_t tail = 0;
    std::size_t b = n;
    while (b > 0 && static_cast<double>(tail) < need)
      tail += data_.counts[--b];
    std::size_t a = 0;
    if (!absolute) {
      std::uint64_t head = 0;
      while (a < n && static_cast<double>(head) < need)
        head += data_.counts[a++];
    }
    // At least two bins lumped; an |x| cut above 0 (numpy's widened first batch may start below).
    if (b >= a + 2 && (!absolute || data_.edges[b] > 0.0)) {
      data_.lump_begin = a;
      data_.lump_end = b;
    }
  }

  detail::minmax_partial count_into(std::span<const float> x, detail::count_tables& t,
                                    detail::flag_log* log = nullptr) const {
    detail::minmax_partial ext;
    with_setup(log, [&](auto tr, const auto& setup) {
      ext = detail::histogram_count<decltype(tr)::value>(x, setup, t);
    });
    return ext;
  }

  detail::minmax_partial bin_into(std::span<const float> x, std::span<std::uint64_t> counts,
                                  detail::flag_log* log = nullptr) const {
    detail::minmax_partial ext;
    with_setup(log, [&](auto tr, const auto& setup) {
      ext = detail::histogram_add<decltype(tr)::value>(x, setup, counts);
    });
    return ext;
  }

  /// bin_into(x, counts), the batch kept for derived histograms when derives().
  void bin_kept(std::span<const float> x) {
    if (!derives()) {
      bin_into(x, data_.counts);
      return;
    }
    detail::flag_log log(flag_log_capacity);
    kept_.counts.assign(data_.counts.size(), 0);
    const detail::minmax_partial ext = bin_into(x, kept_.counts, &log);
    for (std::size_t i = 0; i < kept_.counts.size(); ++i)
      data_.counts[i] += kept_.counts[i];
    kept_.values.assign(log.values.begin(), log.values.end());
    kept_.bins.assign(log.bins.begin(), log.bins.end());
    keep(ext, x.size(), !log.overflow);
  }

  static constexpr std::size_t hard_max_bins = std::size_t{1} << 30;  // 32-bit bin indices

  static std::size_t locate(const std::vector<double>& e, double v) noexcept {
    const std::size_t n = e.size() - 1;
    std::size_t lo = 0;
    std::size_t hi = n;  // bin index in [lo, hi)
    if (v <= e.front())
      return 0;
    if (v >= e.back())
      return n - 1;
    while (hi - lo > 1) {
      const std::size_t mid = (lo + hi) / 2;
      if (v < e[mid])
        hi = mid;
      else
        lo = mid;
    }
    return lo;
  }

  void check_bins(double bins) const {
    const double cap = static_cast<double>(std::min(opt_.max_bins, hard_max_bins));
    if (!(bins <= cap)) {
      detail::throw_invalid("quark.calib.histogram_too_large",
                            "range growth needs " + std::to_string(bins) + " bins (max_bins " +
                                std::to_string(opt_.max_bins) + ")");
    }
  }

  void create(double lo, double hi) {
    // numpy widens an empty range to (lo - 0.5, hi + 0.5).
    if (lo == hi) {
      lo -= 0.5;
      hi += 0.5;
    }
    data_.edges = detail::linspace_edges(lo, hi, opt_.num_bins);
    data_.counts.assign(opt_.num_bins, 0);
  }

  /// Appends equal-width bins (last + w, last + 2w, ...) until the last edge covers `amax`.
  void append_right(double amax) {
    std::vector<double>& e = data_.edges;
    if (!(amax > e.back()))
      return;
    const double w = e[1] - e[0];
    check_bins(static_cast<double>(e.size()) + (amax - e.back()) / w);
    // Both vectors get exactly the new size: left to push_back and resize, their capacity would
    // double, and a histogram that grew once would hold up to twice its bins (on PP-OCRv4 det,
    // 228 such histograms were 13 MB of the calibration's peak memory). Growth is rare, so the
    // extra copies cost nothing measurable.
    std::size_t added = 0;
    for (double last = e.back(); amax > last; last += w)
      ++added;
    e.reserve(e.size() + added);
    for (std::size_t i = 0; i < added; ++i)
      e.push_back(e.back() + w);
    data_.counts.reserve(e.size() - 1);
    data_.counts.resize(e.size() - 1, 0);
  }

  void grow_symmetric(const detail::minmax_partial& p) {
    const float thr = std::fmax(std::fabs(p.min), std::fabs(p.max));
    if (data_.counts.empty()) {
      data_.threshold = static_cast<double>(thr);
      create(-static_cast<double>(thr), static_cast<double>(thr));
      return;
    }
    grow_symmetric_to(static_cast<double>(thr));
  }

  /// Python's float floor division a // b for a >= 0, b > 0.
  static double py_floordiv(double a, double b) noexcept {
    const double mod = std::fmod(a, b);
    const double div = (a - mod) / b;
    double fl = std::floor(div);
    if (div - fl > 0.5)
      fl += 1.0;
    return fl;
  }

  void grow_symmetric_to(double new_thr) {
    const double old_thr = data_.threshold;
    if (new_thr <= old_thr)
      return;
    const std::size_t n = data_.counts.size();
    if (old_thr == 0.0) {
      // ORT keeps the old counts in place and re-edges over the new threshold.
      data_.threshold = new_thr;
      data_.edges = detail::linspace_edges(-new_thr, new_thr, n);
      return;
    }
    // 1. Whole strides of the old bin width on each side.
    const double stride = 2.0 * old_thr / static_cast<double>(n);
    const double half = py_floordiv(new_thr - old_thr, stride) + 1.0;
    check_bins(static_cast<double>(n) + 2.0 * half);
    const std::size_t h = static_cast<std::size_t>(half);
    // 2. New threshold and edges; the old counts move to the centre slice.
    const double thr = static_cast<double>(h) * stride + old_thr;
    std::vector<std::uint64_t> counts(n + 2 * h, 0);
    for (std::size_t i = 0; i < n; ++i)
      counts[h + i] = data_.counts[i];
    data_.counts = std::move(counts);
    data_.edges = detail::linspace_edges(-thr, thr, n + 2 * h);
    data_.threshold = thr;
    if (data_.lump_end != 0) {  // the lumped bins move with their counts
      data_.lump_begin += h;
      data_.lump_end += h;
    }
  }

  void grow_extend(double lo_new, double hi_new) {
    if (data_.counts.empty()) {
      create(lo_new, hi_new);
      return;
    }
    const double lo = data_.edges.front();
    const double hi = data_.edges.back();
    if (lo_new >= lo && hi_new <= hi)
      return;
    // 1. Whole bins of the current width on each side.
    const double w = data_.edges[1] - data_.edges[0];
    const double left = lo_new < lo ? std::ceil((lo - lo_new) / w) : 0.0;
    const double right = hi_new > hi ? std::ceil((hi_new - hi) / w) : 0.0;
    const std::size_t n = data_.counts.size();
    check_bins(static_cast<double>(n) + left + right);
    const std::size_t l = static_cast<std::size_t>(left);
    const std::size_t rgt = static_cast<std::size_t>(right);
    // 2. Edges regenerated over the extended range; old counts shifted by `l`.
    data_.edges = detail::linspace_edges(lo - left * w, hi + right * w, n + l + rgt);
    std::vector<std::uint64_t> counts(n + l + rgt, 0);
    for (std::size_t i = 0; i < n; ++i)
      counts[l + i] = data_.counts[i];
    data_.counts = std::move(counts);
  }

  histogram_options opt_;
  histogram_data data_;
  kept_batch kept_;
};

}  // namespace quark
