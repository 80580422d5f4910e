// SPDX-License-Identifier: MIT
// Binning kernel of histogram_observer. Bin i holds edges[i] <= v < edges[i+1], the last bin also
// holds v == edges[n] and values outside [edges[0], edges[n]] are dropped (numpy.histogram's
// rule). The bin index comes from the uniform formula; the few values that fall within rounding
// distance of an edge are re-checked against the stored edges, so the result is exact for any
// edge vector close to uniform (linspace, or Quark's appended edges).
// The positions of a block are computed in one vectorised pass (AVX-512 intrinsics where the CPU
// has AVX-512F, else AVX2 ones where it has AVX2, chosen at run time: they carry a target
// attribute, so any x86 build has them; else a form the compiler vectorises), then counted into
// four 32-bit tables in turn, so
// repeated bins do not wait on each other's stores; the input is prefetched a few KiB ahead.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <type_traits>
#include <vector>

#include <quark/config.hpp>
#include <quark/detail/prefetch.hpp>
#include <quark/observer/detail/minmax_kernel.hpp>

namespace quark::detail {

/// What is binned: the value itself, its magnitude, or numpy nan_to_num of it.
enum class bin_transform : std::uint8_t { identity, absolute, to_finite };

template <bin_transform T, class Real = double>
QUARK_ALWAYS_INLINE Real bin_value(float v) noexcept {
  if constexpr (T == bin_transform::absolute) {
    return static_cast<Real>(std::fabs(v));
  } else if constexpr (T == bin_transform::to_finite) {
    constexpr float big = std::numeric_limits<float>::max();
    const float w = v != v ? 0.0f : (v > big ? big : (v < -big ? -big : v));
    return static_cast<Real>(w);
  } else {
    return static_cast<Real>(v);
  }
}

/// Numpy's linspace(start, stop, n + 1): e[i] = i * step + start, e[n] = stop.
inline std::vector<double> linspace_edges(double start, double stop, std::size_t n) {
  std::vector<double> e(n + 1);
  const double step = (stop - start) / static_cast<double>(n);
  for (std::size_t i = 0; i < n; ++i) {
    const double t = static_cast<double>(i) * step;
    e[i] = t + start;
  }
  e[n] = stop;
  return e;
}

/// Largest distance, in bins, between the stored edges and the uniform grid lo + i (hi - lo)/n.
/// It runs on every call of the kernel, so it is written in 8 lanes (a max reduction in one
/// variable is a serial chain of MAXSD without -ffast-math).
inline double edge_deviation(std::span<const double> edges) noexcept {
  const std::size_t n = edges.size() - 1;
  const double lo = edges.front();
  const double norm = static_cast<double>(n) / (edges.back() - lo);
  constexpr std::size_t lanes = 8;
  double dev = 0.0;
  std::size_t i = 0;
#if defined(__GNUC__)
  using vd = double __attribute__((vector_size(lanes * sizeof(double))));
  vd vdev{};
  vd vi;
  for (std::size_t j = 0; j < lanes; ++j)
    vi[j] = static_cast<double>(j);
  for (; i + lanes <= n + 1; i += lanes) {
    vd e;
    std::memcpy(&e, edges.data() + i, sizeof(e));
    vd d = (e - lo) * norm - vi;
    d = d < 0.0 ? -d : d;
    vdev = d > vdev ? d : vdev;
    vi += static_cast<double>(lanes);
  }
  for (std::size_t j = 0; j < lanes; ++j)
    dev = vdev[j] > dev ? vdev[j] : dev;
#endif
  for (; i <= n; ++i) {
    const double d = std::fabs((edges[i] - lo) * norm - static_cast<double>(i));
    dev = d > dev ? d : dev;
  }
  return dev;
}

/// Magic constant whose binade has unit spacing: adding it rounds to an integer held in the low
/// mantissa bits (1.5 * 2^52 for double, 1.5 * 2^23 for float).
template <class Real>
inline constexpr Real round_magic = sizeof(Real) == 8 ? Real(0x1.8p52) : Real(0x1.8p23);

/// Floor of the uniform position (v - lo) * norm through the round_magic trick, which
/// vectorises under -ftrapping-math, unlike a float -> int conversion. Returns true ("flagged")
/// for a value near an edge (frac within tol of 0 or 1), outside [lo, lo + n) or NaN. Whatever
/// the rounding mode, an unflagged value has frac in [tol, 1 - tol], so `idx` is floor(f) exactly.
template <bin_transform T, class Real>
QUARK_ALWAYS_INLINE std::int32_t bin_position(float raw, Real lo, Real norm, Real dn, Real tol,
                                              std::int32_t& idx) noexcept {
  using bits_t = std::conditional_t<sizeof(Real) == 8, std::uint64_t, std::uint32_t>;
  const Real f = (bin_value<T, Real>(raw) - lo) * norm;
  const bool in = (f >= Real(0)) & (f < dn);
  const Real fd = in ? f : Real(0);
  const Real t = (fd - Real(0.5)) + round_magic<Real>;
  const Real frac = fd - (t - round_magic<Real>);
  bits_t bits;
  std::memcpy(&bits, &t, sizeof(bits));
  idx = static_cast<std::int32_t>(static_cast<std::uint32_t>(bits) & 0x3fffffu);
  return static_cast<std::int32_t>(!in) | static_cast<std::int32_t>(frac < tol) |
         static_cast<std::int32_t>(frac > Real(1) - tol);
}

/// Pass 1 over one block; `sub_any[j]` is the OR of the flags of sub-block j (Sub values).
/// `avail` values are readable from `p`; one line `distance` values ahead is prefetched per
/// sub-block.
template <bin_transform T, class Real, std::size_t M, std::size_t Sub>
QUARK_ALWAYS_INLINE void bin_positions(const float* p, std::size_t avail, std::size_t distance,
                                       Real lo, Real norm, Real dn, Real tol, std::int32_t* idx,
                                       std::int32_t* sub_any) noexcept {
  for (std::size_t j = 0; j < M / Sub; ++j) {
    if (j * Sub + distance < avail)
      prefetch_read(p + j * Sub + distance);
    std::int32_t any = 0;
    for (std::size_t k = j * Sub; k < (j + 1) * Sub; ++k)
      any |= bin_position<T, Real>(p[k], lo, norm, dn, tol, idx[k]);
    sub_any[j] = any;
  }
}

/// The flagged values of a flagged sub-block (same formula as pass 1, so the same flags).
template <bin_transform T, class Real, class Exact>
QUARK_ALWAYS_INLINE void fix_flagged(const float* p, std::size_t count, Real lo, Real norm, Real dn,
                                     Real tol, std::int32_t* idx, Exact&& exact) noexcept {
  for (std::size_t k = 0; k < count; ++k) {
    std::int32_t ignored = 0;
    if (bin_position<T, Real>(p[k], lo, norm, dn, tol, ignored) != 0)
      idx[k] = exact(p[k]);
  }
}

/// Values per call of histogram_count: keeps every 32-bit table entry exact.
inline constexpr std::size_t histogram_max_chunk = std::size_t{1} << 30;

/// The four 32-bit count tables of the binning kernel (slot `bins` of each is a sink for dropped
/// values). One set per thread is reused across calls and kept zero between uses: fold_into()
/// and clear() leave it zero, so a call costs no allocation and no clearing up front.
class count_tables {
 public:
  /// Tables for `bins` bins, all zero.
  std::uint32_t* prepare(std::size_t bins) {
    if (stride_ != bins + 1) {
      t_.assign(4 * (bins + 1), 0u);
      stride_ = bins + 1;
    }
    dirty_ = true;
    return t_.data();
  }
  [[nodiscard]] std::size_t stride() const noexcept { return stride_; }
  /// Adds the four tables into `counts` (size bins, the bins of the last prepare()) and zeroes
  /// them. Nothing to do (and `counts` untouched) when nothing was counted since the last fold.
  void fold_into(std::span<std::uint64_t> counts) noexcept {
    if (!dirty_)
      return;
    std::uint32_t* t0 = t_.data();
    std::uint32_t* t1 = t0 + stride_;
    std::uint32_t* t2 = t1 + stride_;
    std::uint32_t* t3 = t2 + stride_;
    for (std::size_t i = 0; i < counts.size(); ++i) {
      counts[i] += std::uint64_t{t0[i]} + t1[i] + t2[i] + t3[i];
      t0[i] = t1[i] = t2[i] = t3[i] = 0u;
    }
    for (std::uint32_t* t : {t0, t1, t2, t3})
      t[stride_ - 1] = 0u;  // the sinks
    dirty_ = false;
    release_if_large();
  }
  /// Drops whatever was counted since prepare().
  void clear() noexcept {
    if (dirty_)
      std::fill(t_.begin(), t_.end(), 0u);
    dirty_ = false;
    release_if_large();
  }

 private:
  void release_if_large() noexcept {
    if (t_.size() > keep_entries) {
      t_ = {};
      stride_ = 0;
    }
  }
  static constexpr std::size_t keep_entries = std::size_t{1} << 18;  // 1 MiB: up to 65535 bins
  std::vector<std::uint32_t> t_;
  std::size_t stride_ = 0;
  bool dirty_ = false;
};

/// This thread's count tables.
inline count_tables& thread_count_tables() noexcept {
  thread_local count_tables tables;
  return tables;
}

/// Clears a thread's count tables when it goes out of scope, unless they were folded: keeps them
/// zero for the next use even when the caller throws between counting and folding.
class count_tables_guard {
 public:
  explicit count_tables_guard(count_tables& t) noexcept : t_(t) {}
  count_tables_guard(const count_tables_guard&) = delete;
  count_tables_guard& operator=(const count_tables_guard&) = delete;
  ~count_tables_guard() { t_.clear(); }

 private:
  count_tables& t_;
};

/// Values ahead of the binning loop that it prefetches, one cache line per 16 values. One line
/// per vector, 2 KiB ahead, measured 1.4-1.6 G elem/s at 512 MiB where a burst of 64 lines per
/// 4 KiB block measured 1.0-1.3 in the same runs (docs/bench/calib.md).
inline constexpr std::size_t histogram_prefetch_distance = 512;

/// The smallest float whose value is at least `d` (+Inf beyond the largest float): for a float
/// v, double(v) >= d exactly when v >= float_at_least(d), and for a magnitude |v| (d > 0) when
/// bits(|v|) >= bits(float_at_least(d)).
inline float float_at_least(double d) noexcept {
  constexpr auto big = static_cast<double>(std::numeric_limits<float>::max());
  if (d > big)
    return std::numeric_limits<float>::infinity();
  if (d < -big)
    return -std::numeric_limits<float>::max();
  float f = static_cast<float>(d);
  if (static_cast<double>(f) < d)
    f = std::nextafter(f, std::numeric_limits<float>::infinity());
  return f;
}

/// Which code computes the bin positions: `automatic` is the AVX-512 form where the CPU has
/// AVX-512F (observer_avx512_usable(), checked at run time), else the AVX2 form where it has
/// AVX2 (observer_avx2_usable()), else the portable one; the tests run each explicitly where the
/// CPU allows.
enum class kernel_path : std::uint8_t { portable, avx512, avx2, automatic };

/// Values per block of the binning kernels.
inline constexpr std::size_t histogram_block = 1024;

/// The values a binning kernel flagged (watched_setup), each with its exact bin, up to a
/// fixed capacity reserved in advance: a full log drops later values and says so (`overflow`),
/// so adding never allocates. A derived histogram (histogram_observer::observe_mapped) corrects
/// its counts with them.
struct flag_log {
  std::vector<float> values;
  std::vector<std::int32_t> bins;
  bool overflow = false;

  explicit flag_log(std::size_t capacity = 0) {
    values.reserve(capacity);
    bins.reserve(capacity);
  }
  void add(float v, std::int32_t bin) noexcept {
    if (values.size() < values.capacity() && bins.size() < bins.capacity()) {
      values.push_back(v);  // within the reserved capacity: no allocation, no throw
      bins.push_back(bin);
    } else {
      overflow = true;
    }
  }
  void clear() noexcept {
    values.clear();
    bins.clear();
    overflow = false;
  }
};

/// What every binning form derives from the edges: the uniform position formula, its
/// tolerances (double and float), and the exact rule for flagged values.
template <bin_transform T>
struct bin_setup {
  std::size_t n;
  double lo;
  double hi;
  double norm;
  std::int32_t last;
  const double* e;
  double tol_d;
  float lo_f;
  double tol_f;
  bool use_float;

  explicit bin_setup(std::span<const double> edges) noexcept
      : n(edges.size() - 1),
        lo(edges.front()),
        hi(edges.back()),
        norm(static_cast<double>(n) / (hi - lo)),
        last(static_cast<std::int32_t>(n - 1)),
        e(edges.data()),
        lo_f(static_cast<float>(lo)) {
    // Tolerances, in bins, of the double and float position formulas. The float one covers the
    // rounding of lo, of the subtraction and of the product; it is used when it is small.
    const double dev = edge_deviation(edges) + 1e-9;
    const double span_bins = (std::fabs(lo) + std::fabs(hi)) * norm;
    tol_d = dev + 8.0 * std::numeric_limits<double>::epsilon() * span_bins;
    // Float error sources, in bins: lo -> lo_f; the subtraction (half an ulp of |v - lo_f| <= r);
    // the rounding of norm and of the product (half an ulp of a position <= n each).
    const double r = std::fmax(std::fabs(hi - static_cast<double>(lo_f)),
                               std::fabs(lo - static_cast<double>(lo_f)));
    const double half_ulp = 0.5 * static_cast<double>(std::numeric_limits<float>::epsilon());
    tol_f = dev + std::fabs(lo - static_cast<double>(lo_f)) * norm +
            2.0 * half_ulp * (r * norm + 2.0 * static_cast<double>(n)) + 1e-6;
    use_float = n < (std::size_t{1} << 21) && tol_f < 0.01;
  }

  /// Lumping (histogram_options::lump_percentile; the identity and absolute transforms): with
  /// lump_end > 0, a value whose binned value w (v or |v|) lies in [edges[begin],
  /// edges[lump_end]) (lump's arguments) is only counted, into bin lump_end - 1; every other value
  /// is binned as usual (for |v| the lumped bins start at 0, and a value below edges[0] is dropped
  /// as always). lump_lo and lump_hi are the smallest floats at or above those two edges, so
  /// lump_lo <= w < lump_hi decides it exactly, in floats (NaN fails both). 0: no lumping.
  std::size_t lump_end = 0;
  float lump_lo = 0.0f;
  float lump_hi = 0.0f;

  /// Lumps bins [begin, end) (begin < end <= n) as lump_end describes.
  void lump(std::size_t begin, std::size_t end) noexcept {
    lump_end = end;
    lump_lo = float_at_least(e[begin]);
    lump_hi = float_at_least(e[end]);
  }

  /// Whether the forms log their flagged values (watched_setup).
  static constexpr bool logs = false;

  [[nodiscard]] std::int32_t sink() const noexcept { return static_cast<std::int32_t>(n); }

  /// Exact bin of a value against the stored edges (numpy's rule), or the sink.
  [[nodiscard]] std::int32_t exact(float raw) const noexcept { return exact_bin(raw); }
  [[nodiscard]] std::int32_t exact_bin(float raw) const noexcept {
    const double v = bin_value<T>(raw);
    if (!((v >= lo) & (v <= hi)))
      return sink();  // outside, or NaN
    auto i = static_cast<std::int32_t>(
        std::fmin(std::fmax((v - lo) * norm, 0.0), static_cast<double>(last)));
    while (i > 0 && v < e[i])
      --i;
    while (i < last && v >= e[i + 1])
      ++i;
    return i;
  }
};

/// A bin_setup whose forms log every value they flag, with its exact bin, where a value is
/// flagged also when its position lies within `margin` bins of an edge (beyond the formulas'
/// own error): so every value within `margin` bins of an edge is logged. The forms keep no memo
/// of the last flagged value with it (a memo hit would bypass the log). A type of its own, so
/// the forms compiled for bin_setup carry no logging code. Not with lumping.
template <bin_transform T>
struct watched_setup : bin_setup<T> {
  static constexpr bool logs = true;
  flag_log* log;

  watched_setup(const bin_setup<T>& plain, double margin, flag_log* to) noexcept
      : bin_setup<T>(plain), log(to) {
    this->tol_d += margin;
    this->tol_f += margin;
    this->lump_end = 0;
  }
  [[nodiscard]] std::int32_t exact(float raw) const noexcept {
    const std::int32_t i = this->exact_bin(raw);
    log->add(raw, i);
    return i;
  }
};

/// Folds a partial min/max/NaN count into `ext`.
QUARK_ALWAYS_INLINE void merge_partial(minmax_partial& ext, const minmax_partial& part) noexcept {
  ext.min = part.min < ext.min ? part.min : ext.min;
  ext.max = part.max > ext.max ? part.max : ext.max;
  ext.nan_count += part.nan_count;
}

/// A short tail (< one block): min/max, then the exact bin of every value into `t0`.
template <class Setup>
QUARK_ALWAYS_INLINE void count_tail(const Setup& s, const float* p, std::size_t m,
                                    std::uint32_t* t0, minmax_partial& ext) noexcept {
  merge_partial(ext, minmax_reduce(std::span<const float>(p, m)));
  for (std::size_t k = 0; k < m; ++k)
    ++t0[s.exact(p[k])];
}

/// Portable positions of one full block into `idx` (float formula when its tolerance is small;
/// the input is prefetched ahead line by line), exact bins for the flagged values, and the
/// block's min/max folded into `ext`.
template <bin_transform T, class Setup>
QUARK_ALWAYS_INLINE void positions_portable(const Setup& s, const float* p, std::size_t avail,
                                            std::int32_t* idx, minmax_partial& ext) noexcept {
  constexpr std::size_t block = histogram_block;
  constexpr std::size_t sub = 16;
  std::array<std::int32_t, block / sub> sub_any;
  merge_partial(ext, minmax_reduce_portable(std::span<const float>(p, block)));
  const auto n_f = static_cast<float>(s.n);
  const auto norm_f = static_cast<float>(s.norm);
  const auto tol_f = static_cast<float>(s.tol_f);
  const auto n_d = static_cast<double>(s.n);
  if (s.use_float) {
    bin_positions<T, float, block, sub>(p, avail, histogram_prefetch_distance, s.lo_f, norm_f, n_f,
                                        tol_f, idx, sub_any.data());
  } else {
    bin_positions<T, double, block, sub>(p, avail, histogram_prefetch_distance, s.lo, s.norm, n_d,
                                         s.tol_d, idx, sub_any.data());
  }
  // The last flagged value and its bin: runs of an equal value on an edge (the zeros of a ReLU
  // output) take the exact path once per block. Equal floats have the same bin, NaN equals none.
  float memo_v = std::numeric_limits<float>::quiet_NaN();
  std::int32_t memo_i = 0;
  auto exact = [&s, &memo_v, &memo_i](float raw) {
    if (raw == memo_v)
      return memo_i;
    const std::int32_t bin = s.exact(raw);
    if constexpr (!Setup::logs) {
      memo_i = bin;
      memo_v = raw;
    }
    return bin;
  };
  for (std::size_t j = 0; j < block / sub; ++j) {
    if (sub_any[j] == 0)
      continue;
    if (s.use_float) {
      fix_flagged<T, float>(p + j * sub, sub, s.lo_f, norm_f, n_f, tol_f, idx + j * sub, exact);
    } else {
      fix_flagged<T, double>(p + j * sub, sub, s.lo, s.norm, n_d, s.tol_d, idx + j * sub, exact);
    }
  }
}

/// Counts one block of positions into the four tables in turn.
QUARK_ALWAYS_INLINE void count_block(const std::int32_t* idx, std::uint32_t* t0, std::uint32_t* t1,
                                     std::uint32_t* t2, std::uint32_t* t3) noexcept {
  for (std::size_t k = 0; k < histogram_block; k += 4) {
    ++t0[idx[k]];
    ++t1[idx[k + 1]];
    ++t2[idx[k + 2]];
    ++t3[idx[k + 3]];
  }
}

/// The portable form of histogram_count.
template <bin_transform T, class Setup>
minmax_partial histogram_count_portable(std::span<const float> x, const Setup& s,
                                        count_tables& tables) {
  constexpr std::size_t block = histogram_block;
  minmax_partial ext;
  // Four count tables hide store-to-load latency; slot n of each is a sink for dropped values.
  const std::size_t stride = s.n + 1;
  std::uint32_t* t0 = tables.prepare(s.n);
  alignas(64) std::array<std::int32_t, block> idx;
  for (std::size_t b = 0; b < x.size(); b += block) {
    const std::size_t m = std::min(block, x.size() - b);
    const float* p = x.data() + b;
    if (m < block) {
      count_tail(s, p, m, t0, ext);
      continue;
    }
    positions_portable<T>(s, p, x.size() - b, idx.data(), ext);
    count_block(idx.data(), t0, t0 + stride, t0 + 2 * stride, t0 + 3 * stride);
  }
  return ext;
}

/// Values that the lumped kernels gather (those binned as usual) before binning them.
inline constexpr std::size_t lump_buffer = histogram_block;

/// The lumping rule for one value (both lumped kernels): adds 1 to `lumped` when the value
/// falls in the lumped bins, and returns whether it is binned as usual instead: |v| at or above
/// the lumped bins (below them it is dropped), v outside them.
template <bin_transform T>
QUARK_ALWAYS_INLINE bool lump_one(const bin_setup<T>& s, float v, std::uint64_t& lumped) noexcept {
  const float a = T == bin_transform::absolute ? std::fabs(v) : v;
  const bool ge = a >= s.lump_lo;
  const bool lt = a < s.lump_hi;
  lumped += ge && lt ? 1u : 0u;
  return T == bin_transform::absolute ? !lt : !(ge && lt);
}

/// Bins `m` gathered values with the unlumped setup `plain` and adds their NaN count to `ext`
/// (a gathered value's min/max is already in it).
template <bin_transform T>
QUARK_ALWAYS_INLINE void lump_flush_portable(const float* buf, std::size_t m,
                                             const bin_setup<T>& plain, count_tables& tables,
                                             minmax_partial& ext) {
  ext.nan_count +=
      histogram_count_portable<T>(std::span<const float>(buf, m), plain, tables).nan_count;
}

/// The portable form of histogram_count for a lumping setup (s.lump_end > 0): one pass counts
/// the lumped values and gathers the others, which the plain kernel then bins.
template <bin_transform T>
minmax_partial histogram_count_lumped_portable(std::span<const float> x, const bin_setup<T>& s,
                                               count_tables& tables) {
  constexpr std::size_t sub = 256;
  bin_setup<T> plain = s;
  plain.lump_end = 0;
  std::array<float, lump_buffer + sub> buf;
  std::size_t used = 0;
  std::uint64_t lumped = 0;
  minmax_partial ext;
  for (std::size_t b = 0; b < x.size(); b += sub) {
    const std::size_t m = std::min(sub, x.size() - b);
    const float* p = x.data() + b;
    const minmax_partial part = minmax_reduce_portable(std::span<const float>(p, m));
    ext.min = part.min < ext.min ? part.min : ext.min;  // NaN: counted by the plain kernel
    ext.max = part.max > ext.max ? part.max : ext.max;
    for (std::size_t k = 0; k < m; ++k) {
      if (lump_one(s, p[k], lumped))
        buf[used++] = p[k];
    }
    if (used >= lump_buffer) {
      lump_flush_portable<T>(buf.data(), used, plain, tables, ext);
      used = 0;
    }
  }
  if (used > 0)
    lump_flush_portable<T>(buf.data(), used, plain, tables, ext);
  tables.prepare(s.n)[s.lump_end - 1] += static_cast<std::uint32_t>(lumped);
  return ext;
}

#if QUARK_OBSERVER_AVX512
QUARK_OBSERVER_AVX512_PUSH
/// Constants of the float position formula, broadcast.
struct avx512_positions {
  __m512 lo;
  __m512 norm;
  __m512 half_in;  ///< 0.5 - tol, rounded down (with a margin for rounding |frac - 0.5|)
  __m512i bins;
  __m512i table;  ///< lane j counts into table j % 4: its offset (j % 4) * (bins + 1)
};

/// The bound of |frac - 0.5| below which a lane's fraction is surely in [tol, 1 - tol]:
/// 0.5 - tol less 2^-23 (frac - 0.5 rounds by at most 2^-25 when frac < 0.25), as a float
/// rounded toward zero. A lane passing it also passes the two compares it replaces.
inline float centred_limit(double tol) noexcept {
  const double limit = 0.5 - tol - 0x1p-23;
  auto f = static_cast<float>(limit);
  if (static_cast<double>(f) > limit)
    f = std::nextafter(f, 0.0f);
  return f;
}

/// The offsets of the four count tables, lane j on table j % 4.
QUARK_OBSERVER_TARGET_AVX512 inline __m512i table_offsets(std::size_t stride) noexcept {
  const auto s = static_cast<std::int32_t>(stride);
  return _mm512_setr_epi32(0, s, 2 * s, 3 * s, 0, s, 2 * s, 3 * s, 0, s, 2 * s, 3 * s, 0, s, 2 * s,
                           3 * s);
}

/// Counts `m` entries of the four tables (entry = table offset + position).
QUARK_ALWAYS_INLINE void count_entries(const std::int32_t* idx, std::size_t m,
                                       std::uint32_t* t) noexcept {
  std::size_t k = 0;
  for (; k + 4 <= m; k += 4) {
    ++t[idx[k]];
    ++t[idx[k + 1]];
    ++t[idx[k + 2]];
    ++t[idx[k + 3]];
  }
  for (; k < m; ++k)
    ++t[idx[k]];
}

/// Table entries computed but not yet counted: the previous block's positions, counted `Lanes`
/// at a time while the next block's positions are computed, one vector per step. Interleaved,
/// the scalar increments and the vector arithmetic run side by side; one after the other (all
/// positions of a block, then all its increments) the increments waited for the arithmetic.
/// The same counts end up in the tables, in another order. calib_bench, L2-resident normal
/// data on the AVX-512 EPYC of session 43: 2.2 -> 2.9 G elem/s (docs/bench/calib.md).
struct pending_entries {
  const std::int32_t* idx = nullptr;
  std::size_t left = 0;
  std::uint32_t* t = nullptr;
  template <std::size_t Lanes>
  QUARK_ALWAYS_INLINE void count() noexcept {
    if (left >= Lanes) {
      count_entries(idx, Lanes, t);
      idx += Lanes;
      left -= Lanes;
    }
  }
  /// Counts what is left and queues `m` entries at `next`.
  QUARK_ALWAYS_INLINE void flush(const std::int32_t* next = nullptr, std::size_t m = 0) noexcept {
    count_entries(idx, left, t);
    idx = next;
    left = m;
  }
};

/// The two position buffers of a block pipeline (pending_entries), each a block plus one
/// vector (the last compressed store), with 2 KiB between them. Back to back, the same position
/// in the two buffers lies one page and one vector apart, so a load from one matched the low 12
/// address bits of the store just made into the other, and the CPU took it for dependent on that
/// store (4K aliasing). With the gap they lie half a page apart: 2.66 -> 2.92 G elem/s.
inline constexpr std::size_t position_buffer_stride = histogram_block + 16 + 512;

/// Positions of `M` values (float formula), and the raw values' min/max into `mn` / `mx`.
/// Zeros (+0 and -0, whatever the edges: they all have the bin of 0) are only counted, into
/// `zeros`; the positions of the other values are appended to `idx` in order and their number
/// is returned. The count loop (one table increment per value) is the slow part of the kernel;
/// after a ReLU about half the values are 0, and they cost one popcount per 16 lanes instead.
/// A lane is exact unless its fraction lies within `tol` (plus 2^-23) of an integer or its index
/// is not in [0, bins) (which covers NaN, +-Inf and positions in (-1, 0): their fraction is
/// negative); the other lanes take `exact(v)`; `nans` receives the number of NaN values (all
/// flagged).
/// `avail` is the number of values readable from `p` (the prefetch stays inside them).
/// `memo_v` / `memo_i` hold the last flagged non-NaN value and its exact bin (in every lane):
/// a lane equal to it takes that bin without the scalar path. Equal floats have the same bin
/// (+0 and -0 included), so this is exact; it matters for runs of an equal value on an edge.
template <bin_transform T, std::size_t M, class Setup>
QUARK_OBSERVER_TARGET_AVX512 QUARK_ALWAYS_INLINE std::size_t bin_block_avx512(
    const float* p, std::size_t avail, const avx512_positions& c, std::int32_t* idx, __m512& mn,
    __m512& mx, const Setup& s, __m512& memo_v, __m512i& memo_i, std::uint64_t& zeros,
    std::uint64_t& nans, pending_entries& pending) noexcept {
  std::size_t w = 0;
  const __m512 zero = _mm512_setzero_ps();
  for (std::size_t k = 0; k < M; k += 16) {
    if (k + histogram_prefetch_distance < avail)
      prefetch_read(p + k + histogram_prefetch_distance);
    pending.count<16>();
    const __m512 v = _mm512_loadu_ps(p + k);
    mn = min512(v, mn);  // a NaN v keeps mn
    mx = max512(v, mx);
    const __m512 a = T == bin_transform::absolute ? _mm512_abs_ps(v) : v;
    const __m512 f = _mm512_mul_ps(_mm512_sub_ps(a, c.lo), c.norm);
    __m512i i = _mm512_maskz_cvttps_epi32(0xFFFF, f);
    const __m512 frac = _mm512_sub_ps(f, _mm512_maskz_cvtepi32_ps(0xFFFF, i));
    // A lane is exact when it is inside [0, bins) and its fraction lies within 0.5 - tol of
    // 0.5 (two mask compares). NaN, +-Inf and negative positions fail one of them. Every vector
    // then goes through the zero / memo masks, without a branch: on the det tensors 12% of the
    // vectors hold a zero or a value on an edge (the saturated outputs of Clip / ReLU6), and a
    // branch around the masks, mispredicted for those, cost more than the masks do now that
    // the count loop runs beside this arithmetic (pending_entries; XINT8 on det 3% faster).
    const __m512 centred = _mm512_abs_ps(_mm512_sub_ps(frac, _mm512_set1_ps(0.5f)));
    __mmask16 ok =
        _mm512_cmplt_epu32_mask(i, c.bins) & _mm512_cmp_ps_mask(centred, c.half_in, _CMP_LE_OQ);
    const __mmask16 is_zero = _mm512_cmp_ps_mask(v, zero, _CMP_EQ_OQ);
    const __mmask16 same = _mm512_cmp_ps_mask(v, memo_v, _CMP_EQ_OQ);
    i = _mm512_mask_mov_epi32(i, same, memo_i);
    ok = static_cast<__mmask16>(ok | same | is_zero);
    if (ok != 0xFFFF) [[unlikely]] {
      alignas(64) std::int32_t lanes[16];
      _mm512_store_si512(lanes, i);
      auto bad = static_cast<std::uint32_t>(static_cast<__mmask16>(~ok));
      while (bad != 0) {
        const auto j = static_cast<std::size_t>(__builtin_ctz(bad));
        bad &= bad - 1;
        const float r = p[k + j];
        nans += static_cast<std::uint64_t>(r != r);
        const std::int32_t bin = s.exact(r);
        lanes[j] = bin;
        if (r == r && !Setup::logs) {
          memo_v = _mm512_set1_ps(r);
          memo_i = _mm512_set1_epi32(bin);
        }
      }
      i = _mm512_load_si512(lanes);
    }
    const auto keep = static_cast<__mmask16>(~is_zero);
    i = _mm512_add_epi32(i, c.table);
    _mm512_storeu_si512(idx + w, _mm512_maskz_compress_epi32(keep, i));
    w += static_cast<std::size_t>(__builtin_popcount(static_cast<std::uint32_t>(keep)));
    zeros += static_cast<std::uint64_t>(16 - __builtin_popcount(static_cast<std::uint32_t>(keep)));
  }
  return w;
}

/// The AVX-512 form of histogram_count (positions in 16 lanes when the float formula applies,
/// else the portable positions compiled for AVX-512); call it only where
/// observer_avx512_usable().
template <bin_transform T, class Setup>
QUARK_OBSERVER_TARGET_AVX512 minmax_partial histogram_count_avx512(std::span<const float> x,
                                                                   const Setup& s,
                                                                   count_tables& tables) {
  constexpr std::size_t block = histogram_block;
  minmax_partial ext;
  const std::size_t stride = s.n + 1;
  std::uint32_t* t0 = tables.prepare(s.n);
  alignas(64) std::array<std::int32_t, 2 * position_buffer_stride> idx;
  std::size_t cur = 0;
  pending_entries pending{idx.data(), 0, t0};
  const avx512_positions pos{_mm512_set1_ps(s.lo_f), _mm512_set1_ps(static_cast<float>(s.norm)),
                             _mm512_set1_ps(centred_limit(s.tol_f)),
                             _mm512_set1_epi32(static_cast<std::int32_t>(s.n)),
                             table_offsets(stride)};
  __m512 memo_v = _mm512_set1_ps(std::numeric_limits<float>::quiet_NaN());  // equals nothing
  __m512i memo_i = _mm512_setzero_si512();
  std::uint64_t zeros = 0;  // at most histogram_max_chunk: fits a table entry
  for (std::size_t b = 0; b < x.size(); b += block) {
    const std::size_t m = std::min(block, x.size() - b);
    const float* p = x.data() + b;
    if (m < block && !s.use_float) {
      count_tail(s, p, m, t0, ext);
      continue;
    }
    if (s.use_float) {
      __m512 mn = _mm512_set1_ps(std::numeric_limits<float>::infinity());
      __m512 mx = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
      std::int32_t* out = idx.data() + cur * position_buffer_stride;
      std::size_t w = 0;
      if (m == block) {
        w = bin_block_avx512<T, block>(p, x.size() - b, pos, out, mn, mx, s, memo_v, memo_i, zeros,
                                       ext.nan_count, pending);
      } else {
        // A short span (a row of a convolution's output block, the end of a chunk): whole
        // vectors here, the last m % 16 values exactly.
        const std::size_t m16 = m / 16 * 16;
        for (std::size_t k = 0; k < m16; k += 16) {
          w += bin_block_avx512<T, 16>(p + k, m - k, pos, out + w, mn, mx, s, memo_v, memo_i, zeros,
                                       ext.nan_count, pending);
        }
        count_tail(s, p + m16, m - m16, t0, ext);
      }
      alignas(64) float lmn[16];
      alignas(64) float lmx[16];
      _mm512_store_ps(lmn, mn);
      _mm512_store_ps(lmx, mx);
      fold_lanes(lmn, lmx, ext);
      pending.flush(out, w);
      cur ^= 1u;
    } else {
      // (use_float holds for every block of a call or for none: nothing is pending here.)
      positions_portable<T>(s, p, x.size() - b, idx.data(), ext);
      count_block(idx.data(), t0, t0 + stride, t0 + 2 * stride, t0 + 3 * stride);
    }
  }
  pending.flush();
  if (zeros != 0)
    t0[s.exact_bin(0.0f)] += static_cast<std::uint32_t>(zeros);
  return ext;
}

/// lump_flush_portable with the AVX-512 kernel.
template <bin_transform T>
QUARK_OBSERVER_TARGET_AVX512 QUARK_ALWAYS_INLINE void lump_flush_avx512(const float* buf,
                                                                        std::size_t m,
                                                                        const bin_setup<T>& plain,
                                                                        count_tables& tables,
                                                                        minmax_partial& ext) {
  ext.nan_count +=
      histogram_count_avx512<T>(std::span<const float>(buf, m), plain, tables).nan_count;
}

/// The AVX-512 form of histogram_count_lumped_portable: per 16 values two mask compares and a
/// popcount; the few values binned as usual are compressed into a buffer. No table store for a
/// lumped value, so this runs at several times the plain kernel's speed (docs/bench/calib.md).
template <bin_transform T>
QUARK_OBSERVER_TARGET_AVX512 minmax_partial histogram_count_lumped_avx512(std::span<const float> x,
                                                                          const bin_setup<T>& s,
                                                                          count_tables& tables) {
  bin_setup<T> plain = s;
  plain.lump_end = 0;
  alignas(64) std::array<float, lump_buffer + 16> buf;  // + 16: the last compressed store
  std::size_t used = 0;
  std::uint64_t lumped = 0;
  minmax_partial ext;  // NaN values are gathered: the plain kernel counts them
  const float* p = x.data();
  const std::size_t n = x.size();
  const __m512 lo = _mm512_set1_ps(s.lump_lo);
  const __m512 hi = _mm512_set1_ps(s.lump_hi);
  __m512 mn = _mm512_set1_ps(std::numeric_limits<float>::infinity());
  __m512 mx = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  std::size_t k = 0;
  for (; k + 16 <= n; k += 16) {
    if (k + histogram_prefetch_distance < n)
      prefetch_read(p + k + histogram_prefetch_distance);
    const __m512 v = _mm512_loadu_ps(p + k);
    mn = min512(v, mn);
    mx = max512(v, mx);
    const __m512 a = T == bin_transform::absolute ? _mm512_abs_ps(v) : v;
    const __mmask16 lt = _mm512_cmp_ps_mask(a, hi, _CMP_LT_OQ);
    const __mmask16 in = _mm512_mask_cmp_ps_mask(lt, a, lo, _CMP_GE_OQ);
    // Binned as usual (lump_one's rule): |v| at or above the lumped bins, v outside them.
    const auto up = static_cast<__mmask16>(T == bin_transform::absolute ? ~lt : ~in);
    lumped += static_cast<std::uint64_t>(__builtin_popcount(static_cast<std::uint32_t>(in)));
    // Stored whether or not a lane is gathered: a branch on it would be mispredicted for a
    // sizeable share of vectors (a lane of 16 is outside with chance 15-28%).
    _mm512_storeu_ps(buf.data() + used, _mm512_maskz_compress_ps(up, v));
    used += static_cast<std::size_t>(__builtin_popcount(static_cast<std::uint32_t>(up)));
    if (used >= lump_buffer) [[unlikely]] {
      lump_flush_avx512<T>(buf.data(), used, plain, tables, ext);
      used = 0;
    }
  }
  alignas(64) float lmn[16];
  alignas(64) float lmx[16];
  _mm512_store_ps(lmn, mn);
  _mm512_store_ps(lmx, mx);
  fold_lanes(lmn, lmx, ext);
  for (; k < n; ++k) {  // the last n % 16 values (the buffer has room for 16 more)
    const float v = p[k];
    ext.min = v < ext.min ? v : ext.min;
    ext.max = v > ext.max ? v : ext.max;
    if (lump_one(s, v, lumped))
      buf[used++] = v;
  }
  if (used > 0)
    lump_flush_avx512<T>(buf.data(), used, plain, tables, ext);
  tables.prepare(s.n)[s.lump_end - 1] += static_cast<std::uint32_t>(lumped);
  return ext;
}
QUARK_OBSERVER_AVX512_POP
#endif

#if QUARK_OBSERVER_AVX512
QUARK_OBSERVER_AVX512_PUSH
/// Lane compression for AVX2 (which has no compress instruction): entry m lists, four bits per
/// index from the lowest, the lanes of the set bits of m in order (the rest 0).
inline constexpr std::array<std::uint32_t, 256> compress8_table = [] {
  std::array<std::uint32_t, 256> t{};
  for (std::uint32_t m = 0; m < 256; ++m) {
    std::uint32_t packed = 0;
    std::uint32_t k = 0;
    for (std::uint32_t j = 0; j < 8; ++j) {
      if (((m >> j) & 1u) != 0)
        packed |= j << (4 * k++);
    }
    t[m] = packed;
  }
  return t;
}();

/// The permutation that moves the lanes of `mask` (8 bits) to the front, in order.
QUARK_OBSERVER_TARGET_AVX2 QUARK_ALWAYS_INLINE __m256i compress8(std::uint32_t mask) noexcept {
  const __m256i packed = _mm256_set1_epi32(static_cast<std::int32_t>(compress8_table[mask]));
  const __m256i shifts = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
  return _mm256_and_si256(_mm256_srlv_epi32(packed, shifts), _mm256_set1_epi32(7));
}

/// Constants of the float position formula in 8 lanes (avx512_positions' counterpart).
struct avx2_positions {
  __m256 lo;
  __m256 norm;
  __m256 half_in;  ///< centred_limit(tol)
  __m256i last;    ///< bins - 1: a lane is inside when its index, unsigned, is at most this
  __m256i table;   ///< lane j counts into table j % 4: its offset (j % 4) * (bins + 1)
};

/// bin_block_avx512 in 8 lanes: the same formula, flags, zero counting and memo, with a table
/// permutation (compress8) in place of the compressed store and a movemask + popcount for the
/// zeros. The prefetch stays one line per 16 values.
template <bin_transform T, std::size_t M, class Setup>
QUARK_OBSERVER_TARGET_AVX2 QUARK_ALWAYS_INLINE std::size_t bin_block_avx2(
    const float* p, std::size_t avail, const avx2_positions& c, std::int32_t* idx, __m256& mn,
    __m256& mx, const Setup& s, __m256& memo_v, __m256i& memo_i, std::uint64_t& zeros,
    std::uint64_t& nans, pending_entries& pending) noexcept {
  std::size_t w = 0;
  const __m256 zero = _mm256_setzero_ps();
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256 half = _mm256_set1_ps(0.5f);
  for (std::size_t k = 0; k < M; k += 8) {
    if (k % 16 == 0 && k + histogram_prefetch_distance < avail)
      prefetch_read(p + k + histogram_prefetch_distance);
    pending.count<8>();
    const __m256 v = _mm256_loadu_ps(p + k);
    mn = _mm256_min_ps(v, mn);  // MINPS returns its second operand on NaN: a NaN v keeps mn
    mx = _mm256_max_ps(v, mx);
    const __m256 a = T == bin_transform::absolute ? _mm256_andnot_ps(sign, v) : v;
    const __m256 f = _mm256_mul_ps(_mm256_sub_ps(a, c.lo), c.norm);
    __m256i i = _mm256_cvttps_epi32(f);  // NaN and |f| >= 2^31: 0x80000000, outside
    const __m256 frac = _mm256_sub_ps(f, _mm256_cvtepi32_ps(i));
    const __m256 centred = _mm256_andnot_ps(sign, _mm256_sub_ps(frac, half));
    const __m256i inside = _mm256_cmpeq_epi32(_mm256_min_epu32(i, c.last), i);
    const __m256 near = _mm256_cmp_ps(centred, c.half_in, _CMP_LE_OQ);
    auto ok = static_cast<std::uint32_t>(
        _mm256_movemask_ps(_mm256_and_ps(_mm256_castsi256_ps(inside), near)));
    if (ok == 0xFFu) [[likely]] {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(idx + w), _mm256_add_epi32(i, c.table));
      w += 8;
      continue;
    }
    const auto is_zero =
        static_cast<std::uint32_t>(_mm256_movemask_ps(_mm256_cmp_ps(v, zero, _CMP_EQ_OQ)));
    const __m256 same = _mm256_cmp_ps(v, memo_v, _CMP_EQ_OQ);
    i = _mm256_blendv_epi8(i, memo_i, _mm256_castps_si256(same));
    ok |= static_cast<std::uint32_t>(_mm256_movemask_ps(same)) | is_zero;
    if (ok != 0xFFu) [[unlikely]] {
      alignas(32) std::int32_t lanes[8];
      _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), i);
      std::uint32_t bad = ~ok & 0xFFu;
      while (bad != 0) {
        const auto j = static_cast<std::size_t>(__builtin_ctz(bad));
        bad &= bad - 1;
        const float r = p[k + j];
        nans += static_cast<std::uint64_t>(r != r);
        const std::int32_t bin = s.exact(r);
        lanes[j] = bin;
        if (r == r && !Setup::logs) {
          memo_v = _mm256_set1_ps(r);
          memo_i = _mm256_set1_epi32(bin);
        }
      }
      i = _mm256_load_si256(reinterpret_cast<const __m256i*>(lanes));
    }
    const std::uint32_t keep = ~is_zero & 0xFFu;
    i = _mm256_permutevar8x32_epi32(_mm256_add_epi32(i, c.table), compress8(keep));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(idx + w), i);
    const auto kept = static_cast<std::size_t>(__builtin_popcount(keep));
    w += kept;
    zeros += 8 - kept;
  }
  return w;
}

/// Folds 8-lane min / max accumulators into `ext`.
QUARK_OBSERVER_TARGET_AVX2 QUARK_ALWAYS_INLINE void fold_lanes8(__m256 mn, __m256 mx,
                                                                minmax_partial& ext) noexcept {
  alignas(32) float lmn[8];
  alignas(32) float lmx[8];
  _mm256_store_ps(lmn, mn);
  _mm256_store_ps(lmx, mx);
  for (std::size_t j = 0; j < 8; ++j) {
    ext.min = lmn[j] < ext.min ? lmn[j] : ext.min;
    ext.max = lmx[j] > ext.max ? lmx[j] : ext.max;
  }
}

/// The AVX2 form of histogram_count (histogram_count_avx512 in 8 lanes; the double formula, for
/// edges far from 0, is the portable one compiled for AVX2); call it only where
/// observer_avx2_usable().
template <bin_transform T, class Setup>
QUARK_OBSERVER_TARGET_AVX2 minmax_partial histogram_count_avx2(std::span<const float> x,
                                                               const Setup& s,
                                                               count_tables& tables) {
  constexpr std::size_t block = histogram_block;
  minmax_partial ext;
  const std::size_t stride = s.n + 1;
  std::uint32_t* t0 = tables.prepare(s.n);
  alignas(64) std::array<std::int32_t, 2 * position_buffer_stride> idx;
  std::size_t cur = 0;
  pending_entries pending{idx.data(), 0, t0};
  const auto st = static_cast<std::int32_t>(stride);
  const avx2_positions pos{_mm256_set1_ps(s.lo_f), _mm256_set1_ps(static_cast<float>(s.norm)),
                           _mm256_set1_ps(centred_limit(s.tol_f)),
                           _mm256_set1_epi32(static_cast<std::int32_t>(s.n) - 1),
                           _mm256_setr_epi32(0, st, 2 * st, 3 * st, 0, st, 2 * st, 3 * st)};
  __m256 memo_v = _mm256_set1_ps(std::numeric_limits<float>::quiet_NaN());  // equals nothing
  __m256i memo_i = _mm256_setzero_si256();
  std::uint64_t zeros = 0;  // at most histogram_max_chunk: fits a table entry
  for (std::size_t b = 0; b < x.size(); b += block) {
    const std::size_t m = std::min(block, x.size() - b);
    const float* p = x.data() + b;
    if (m < block && !s.use_float) {
      count_tail(s, p, m, t0, ext);
      continue;
    }
    if (s.use_float) {
      __m256 mn = _mm256_set1_ps(std::numeric_limits<float>::infinity());
      __m256 mx = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
      std::int32_t* out = idx.data() + cur * position_buffer_stride;
      std::size_t w = 0;
      if (m == block) {
        w = bin_block_avx2<T, block>(p, x.size() - b, pos, out, mn, mx, s, memo_v, memo_i, zeros,
                                     ext.nan_count, pending);
      } else {
        const std::size_t m8 = m / 8 * 8;
        for (std::size_t k = 0; k < m8; k += 8) {
          w += bin_block_avx2<T, 8>(p + k, m - k, pos, out + w, mn, mx, s, memo_v, memo_i, zeros,
                                    ext.nan_count, pending);
        }
        count_tail(s, p + m8, m - m8, t0, ext);
      }
      fold_lanes8(mn, mx, ext);
      pending.flush(out, w);
      cur ^= 1u;
    } else {
      // (use_float holds for every block of a call or for none: nothing is pending here.)
      positions_portable<T>(s, p, x.size() - b, idx.data(), ext);
      count_block(idx.data(), t0, t0 + stride, t0 + 2 * stride, t0 + 3 * stride);
    }
  }
  pending.flush();
  if (zeros != 0)
    t0[s.exact_bin(0.0f)] += static_cast<std::uint32_t>(zeros);
  return ext;
}

/// lump_flush_portable with the AVX2 kernel.
template <bin_transform T>
QUARK_OBSERVER_TARGET_AVX2 QUARK_ALWAYS_INLINE void lump_flush_avx2(const float* buf, std::size_t m,
                                                                    const bin_setup<T>& plain,
                                                                    count_tables& tables,
                                                                    minmax_partial& ext) {
  ext.nan_count += histogram_count_avx2<T>(std::span<const float>(buf, m), plain, tables).nan_count;
}

/// histogram_count_lumped_avx512 in 8 lanes (two compares, two movemasks and a popcount per 8
/// values; the values binned as usual are moved to the front by compress8 and stored).
template <bin_transform T>
QUARK_OBSERVER_TARGET_AVX2 minmax_partial histogram_count_lumped_avx2(std::span<const float> x,
                                                                      const bin_setup<T>& s,
                                                                      count_tables& tables) {
  bin_setup<T> plain = s;
  plain.lump_end = 0;
  alignas(32) std::array<float, lump_buffer + 8> buf;  // + 8: the last permuted store
  std::size_t used = 0;
  std::uint64_t lumped = 0;
  minmax_partial ext;  // NaN values are gathered: the plain kernel counts them
  const float* p = x.data();
  const std::size_t n = x.size();
  const __m256 lo = _mm256_set1_ps(s.lump_lo);
  const __m256 hi = _mm256_set1_ps(s.lump_hi);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 mn = _mm256_set1_ps(std::numeric_limits<float>::infinity());
  __m256 mx = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  std::size_t k = 0;
  for (; k + 8 <= n; k += 8) {
    if (k % 16 == 0 && k + histogram_prefetch_distance < n)
      prefetch_read(p + k + histogram_prefetch_distance);
    const __m256 v = _mm256_loadu_ps(p + k);
    mn = _mm256_min_ps(v, mn);
    mx = _mm256_max_ps(v, mx);
    const __m256 a = T == bin_transform::absolute ? _mm256_andnot_ps(sign, v) : v;
    const __m256 lt = _mm256_cmp_ps(a, hi, _CMP_LT_OQ);
    const __m256 in = _mm256_and_ps(lt, _mm256_cmp_ps(a, lo, _CMP_GE_OQ));
    const auto lt_m = static_cast<std::uint32_t>(_mm256_movemask_ps(lt));
    const auto in_m = static_cast<std::uint32_t>(_mm256_movemask_ps(in));
    // Binned as usual (lump_one's rule): |v| at or above the lumped bins, v outside them.
    const std::uint32_t up = (T == bin_transform::absolute ? ~lt_m : ~in_m) & 0xFFu;
    lumped += static_cast<std::uint64_t>(__builtin_popcount(in_m));
    _mm256_storeu_ps(buf.data() + used, _mm256_permutevar8x32_ps(v, compress8(up)));
    used += static_cast<std::size_t>(__builtin_popcount(up));
    if (used >= lump_buffer) [[unlikely]] {
      lump_flush_avx2<T>(buf.data(), used, plain, tables, ext);
      used = 0;
    }
  }
  fold_lanes8(mn, mx, ext);
  for (; k < n; ++k) {  // the last n % 8 values (the buffer has room for 8 more)
    const float v = p[k];
    ext.min = v < ext.min ? v : ext.min;
    ext.max = v > ext.max ? v : ext.max;
    if (lump_one(s, v, lumped))
      buf[used++] = v;
  }
  if (used > 0)
    lump_flush_avx2<T>(buf.data(), used, plain, tables, ext);
  tables.prepare(s.n)[s.lump_end - 1] += static_cast<std::uint32_t>(lumped);
  return ext;
}
QUARK_OBSERVER_AVX512_POP
#endif

/// Counts the values of `x` (at most histogram_max_chunk of them) into `tables`, for the bins of
/// `s` (a bin_setup of the edges: O(bins) to make, so a caller binning many spans on the same
/// edges makes it once), and returns the min/max/NaN count of the raw values, computed block by
/// block while they are in L1 (one pass over memory). `tables.fold_into(counts)` then adds them
/// to a histogram; `tables.clear()` drops them. Every path gives the same counts and extrema.
template <bin_transform T, kernel_path Path = kernel_path::automatic,
          std::derived_from<bin_setup<T>> Setup>
minmax_partial histogram_count(std::span<const float> x, const Setup& s, count_tables& tables) {
  static_assert((Path != kernel_path::avx512 && Path != kernel_path::avx2) || QUARK_OBSERVER_AVX512,
                "the AVX-512 and AVX2 paths are compiled for x86 with GCC or Clang only");
  constexpr bool lumps = T != bin_transform::to_finite && !Setup::logs;
#if QUARK_OBSERVER_AVX512
  if (Path == kernel_path::avx512 || (Path == kernel_path::automatic && observer_avx512_usable())) {
    if constexpr (lumps) {
      if (s.lump_end != 0)
        return histogram_count_lumped_avx512<T>(x, s, tables);
    }
    return histogram_count_avx512<T>(x, s, tables);
  }
  if (Path == kernel_path::avx2 || (Path == kernel_path::automatic && observer_avx2_usable())) {
    if constexpr (lumps) {
      if (s.lump_end != 0)
        return histogram_count_lumped_avx2<T>(x, s, tables);
    }
    return histogram_count_avx2<T>(x, s, tables);
  }
#endif
  if constexpr (lumps) {
    if (s.lump_end != 0)
      return histogram_count_lumped_portable<T>(x, s, tables);
  }
  return histogram_count_portable<T>(x, s, tables);
}

/// histogram_count for the bins of `edges`.
template <bin_transform T, kernel_path Path = kernel_path::automatic>
minmax_partial histogram_count(std::span<const float> x, std::span<const double> edges,
                               count_tables& tables) {
  return histogram_count<T, Path>(x, bin_setup<T>(edges), tables);
}

/// Adds the values of `x` to `counts` (size s.n) and returns the min/max/NaN count of the raw
/// values (histogram_count, then fold, per chunk of histogram_max_chunk values).
template <bin_transform T, kernel_path Path = kernel_path::automatic,
          std::derived_from<bin_setup<T>> Setup>
minmax_partial histogram_add(std::span<const float> x, const Setup& s,
                             std::span<std::uint64_t> counts) {
  count_tables& tables = thread_count_tables();
  const count_tables_guard guard(tables);
  minmax_partial ext;
  for (std::size_t done = 0; done < x.size(); done += histogram_max_chunk) {
    const std::size_t m = std::min(histogram_max_chunk, x.size() - done);
    const minmax_partial part = histogram_count<T, Path>(x.subspan(done, m), s, tables);
    ext.min = part.min < ext.min ? part.min : ext.min;
    ext.max = part.max > ext.max ? part.max : ext.max;
    ext.nan_count += part.nan_count;
    tables.fold_into(counts);
  }
  return ext;
}

/// histogram_add for the bins of `edges`.
template <bin_transform T, kernel_path Path = kernel_path::automatic>
minmax_partial histogram_add(std::span<const float> x, std::span<const double> edges,
                             std::span<std::uint64_t> counts) {
  return histogram_add<T, Path>(x, bin_setup<T>(edges), counts);
}

}  // namespace quark::detail
