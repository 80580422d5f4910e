// SPDX-License-Identifier: MIT
// The observers' bulk kernels, every form (portable, and AVX-512 where the CPU has it: the AVX-512
// forms carry a target attribute and are chosen at run time, so both builds of this test, the
// -march=native one and kernels_generic_test without -march, run them), against brute-force
// oracles written independently here: a plain scalar min/max and numpy's bin rule through
// std::upper_bound on the stored edges. The data mixes values on and next to every edge, NaN,
// +-Inf, values outside the range, and lengths that are not multiples of any block size.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <random>
#include <vector>

#include <doctest/doctest.h>

#include <quark/observer/detail/histogram_kernel.hpp>
#include <quark/observer/detail/minmax_kernel.hpp>

namespace {

using quark::detail::bin_transform;
using quark::detail::kernel_path;
using quark::detail::minmax_partial;

constexpr float qnan = std::numeric_limits<float>::quiet_NaN();
constexpr float inf = std::numeric_limits<float>::infinity();

/// Normal data with NaN / +-Inf sprinkled at random positions (rates per value).
std::vector<float> noisy(std::size_t n, unsigned seed, double nan_rate, double inf_rate) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.25f, 3.0f);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<float> v(n);
  for (float& x : v) {
    const double r = u(g);
    x = r < nan_rate ? qnan : (r < nan_rate + inf_rate ? (u(g) < 0.5 ? inf : -inf) : d(g));
  }
  return v;
}

minmax_partial oracle_minmax(std::span<const float> x) {
  minmax_partial o;
  for (const float v : x) {
    if (std::isnan(v)) {
      ++o.nan_count;
      continue;
    }
    o.min = std::min(o.min, v);
    o.max = std::max(o.max, v);
  }
  return o;
}

void check_same(const minmax_partial& got, const minmax_partial& want) {
  CHECK(got.nan_count == want.nan_count);
  CHECK(got.min == want.min);
  CHECK(got.max == want.max);
}

/// numpy.histogram's rule for one value on the stored edges: its bin, or the bin count when it
/// falls outside [e.front(), e.back()] (or is NaN).
std::size_t oracle_bin(double v, const std::vector<double>& e) {
  const std::size_t bins = e.size() - 1;
  if (!(v >= e.front() && v <= e.back()))
    return bins;
  const auto i = static_cast<std::size_t>(std::upper_bound(e.begin(), e.end(), v) - e.begin()) - 1;
  return i == bins ? bins - 1 : i;
}

/// numpy.histogram's rule on the stored edges, after the transform of the values.
std::vector<std::uint64_t> oracle_histogram(bin_transform t, std::span<const float> x,
                                            const std::vector<double>& e) {
  std::vector<std::uint64_t> c(e.size() - 1, 0);
  for (const float raw : x) {
    float f = raw;
    if (t == bin_transform::absolute) {
      f = std::fabs(raw);
    } else if (t == bin_transform::to_finite) {
      f = std::isnan(raw) ? 0.0f
                          : std::clamp(raw, -std::numeric_limits<float>::max(),
                                       std::numeric_limits<float>::max());
    }
    const std::size_t i = oracle_bin(static_cast<double>(f), e);
    if (i < c.size())
      ++c[i];
  }
  return c;
}

template <bin_transform T, kernel_path P>
void check_histogram(std::span<const float> x, const std::vector<double>& e) {
  std::vector<std::uint64_t> c(e.size() - 1, 0);
  const minmax_partial ext = quark::detail::histogram_add<T, P>(x, e, c);
  CHECK(c == oracle_histogram(T, x, e));
  check_same(ext, oracle_minmax(x));
}

/// Every edge as a float, its two float neighbours, then `extra` noisy values spread over a
/// range 1.5x the edges' (so some fall outside).
std::vector<float> edge_data(const std::vector<double>& e, std::size_t extra, unsigned seed) {
  std::vector<float> x;
  for (const double edge : e) {
    const auto f = static_cast<float>(edge);
    x.push_back(f);
    x.push_back(std::nextafter(f, -inf));
    x.push_back(std::nextafter(f, inf));
    x.push_back(-f);
  }
  std::mt19937 g(seed);
  const double mid = 0.5 * (e.front() + e.back());
  const double half = 0.75 * (e.back() - e.front());
  std::uniform_real_distribution<double> u(mid - half, mid + half);
  for (std::size_t i = 0; i < extra; ++i)
    x.push_back(static_cast<float>(u(g)));
  std::shuffle(x.begin(), x.end(), g);
  // NaN and +-Inf at a few positions, some inside full blocks.
  for (const std::size_t at : {std::size_t{3}, std::size_t{1500}, std::size_t{2100}}) {
    if (at < x.size())
      x[at] = qnan;
  }
  if (x.size() > 4000) {
    x[3000] = inf;
    x[3001] = -inf;
  }
  return x;
}

/// Linspace edges of each range (7 and 2048 bins), then Quark's appended edges (equal widths
/// added one by one to [0, 3] in 128 bins: not exactly uniform).
std::vector<std::vector<double>> test_edge_sets(
    std::initializer_list<std::pair<double, double>> ranges) {
  std::vector<std::vector<double>> sets;
  for (const auto& r : ranges) {
    for (const std::size_t bins : {std::size_t{7}, std::size_t{2048}})
      sets.push_back(quark::detail::linspace_edges(r.first, r.second, bins));
  }
  auto grown = quark::detail::linspace_edges(0.0, 3.0, 128);
  const double w = grown[1] - grown[0];
  for (int i = 0; i < 300; ++i)
    grown.push_back(grown.back() + w);
  sets.push_back(grown);
  return sets;
}

template <kernel_path P>
void check_histograms(const std::vector<double>& e, std::span<const float> x) {
  check_histogram<bin_transform::identity, P>(x, e);
  check_histogram<bin_transform::absolute, P>(x, e);
  check_histogram<bin_transform::to_finite, P>(x, e);
}

}  // namespace

TEST_CASE("minmax kernel: every form equals the scalar oracle (NaN, Inf, odd lengths)") {
  const bool avx512 = quark::detail::observer_avx512_usable();
  MESSAGE("AVX-512 forms run: " << avx512);
  const std::size_t sizes[] = {0, 1, 15, 16, 17, 255, 256, 257, 1000, 1024, 4097, 70001, 300007};
  for (const std::size_t n : sizes) {
    CAPTURE(n);
    for (const double nan_rate : {0.0, 1e-3, 0.3}) {
      const auto v = noisy(n, static_cast<unsigned>(n) + 11u, nan_rate, 1e-4);
      const minmax_partial want = oracle_minmax(v);
      check_same(quark::detail::minmax_reduce_portable(v), want);
#if QUARK_OBSERVER_AVX512
      if (avx512)
        check_same(quark::detail::minmax_reduce_avx512(v), want);
#endif
      check_same(quark::detail::minmax_reduce(v), want);
      // Every offset of a short window, so each lane and tail position sees the extremes.
      if (n == 1000) {
        for (std::size_t off = 0; off < 40; ++off) {
          const auto s = std::span<const float>(v).subspan(off, 300 + off);
          check_same(quark::detail::minmax_reduce_portable(s), oracle_minmax(s));
#if QUARK_OBSERVER_AVX512
          if (avx512)
            check_same(quark::detail::minmax_reduce_avx512(s), oracle_minmax(s));
#endif
        }
      }
    }
  }
  const std::vector<float> all_nan(1030, qnan);
  const minmax_partial p = quark::detail::minmax_reduce(all_nan);
  CHECK(p.nan_count == 1030);
  CHECK(p.min == inf);
  CHECK(p.max == -inf);
}

TEST_CASE("abs_min_reduce equals a scalar smallest-magnitude loop (NaN ignored, -0, odd lengths)") {
  for (const std::size_t n : {0u, 1u, 15u, 16u, 17u, 255u, 1000u, 4097u, 70001u}) {
    CAPTURE(n);
    for (const double nan_rate : {0.0, 1e-3, 0.3}) {
      auto v = noisy(n, static_cast<unsigned>(n) + 5u, nan_rate, 1e-4);
      float want = inf;
      for (const float x : v) {
        if (!std::isnan(x))
          want = std::min(want, std::fabs(x));
      }
      CHECK(quark::detail::abs_min_reduce(v) == want);
      if (n > 20) {
        // The smallest magnitude at the last position, negative: every lane and the tail see it.
        v.back() = -1e-30f;
        CHECK(quark::detail::abs_min_reduce(v) == 1e-30f);
        v[n / 2] = -0.0f;
        const float z = quark::detail::abs_min_reduce(v);
        CHECK(z == 0.0f);
        CHECK_FALSE(std::signbit(z));
      }
    }
  }
  const std::vector<float> all_nan(100, qnan);
  CHECK(quark::detail::abs_min_reduce(all_nan) == inf);
}

TEST_CASE("histogram kernel: every form follows numpy's bin rule on the stored edges") {
  // Linspace edges of several ranges (one far from 0, so the double formula is used), and
  // Quark's appended edges (equal widths added one by one, not exactly uniform).
  const auto edge_sets =
      test_edge_sets({{-12.0, 12.0}, {0.0, 9.5}, {0.1, 0.7}, {1000.0, 1000.5}, {-3e-5, 7e-5}});
  unsigned seed = 1;
  for (const auto& e : edge_sets) {
    CAPTURE(e.front());
    CAPTURE(e.back());
    CAPTURE(e.size());
    for (const std::size_t extra : {std::size_t{100}, std::size_t{9000}}) {
      const auto x = edge_data(e, extra, seed++);
      check_histograms<kernel_path::portable>(e, x);
#if QUARK_OBSERVER_AVX512
      if (quark::detail::observer_avx512_usable())
        check_histograms<kernel_path::avx512>(e, x);
      if (quark::detail::observer_avx2_usable())
        check_histograms<kernel_path::avx2>(e, x);
#endif
      check_histograms<kernel_path::automatic>(e, x);
    }
  }
}

TEST_CASE("histogram kernel: a heavy single bin and all-NaN blocks") {
  // ReLU-like data: most values exactly 0 (one bin hit back to back), the rest spread.
  auto x = noisy(50000, 5, 0.0, 0.0);
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (x[i] < 0.5f || i % 3 == 0)
      x[i] = 0.0f;
  }
  std::fill(x.begin() + 2048, x.begin() + 4096, qnan);
  const auto e = quark::detail::linspace_edges(0.0, 14.0, 2048);
  check_histograms<kernel_path::portable>(e, x);
#if QUARK_OBSERVER_AVX512
  if (quark::detail::observer_avx512_usable())
    check_histograms<kernel_path::avx512>(e, x);
  if (quark::detail::observer_avx2_usable())
    check_histograms<kernel_path::avx2>(e, x);
#endif
  check_histograms<kernel_path::automatic>(e, x);
}

TEST_CASE("histogram kernel: runs of equal values on and next to edges, and outside the range") {
  // The kernels remember the last value that took the exact path; runs of such values (on an
  // edge, one float below it, outside the range, +0 / -0, NaN) interleaved with ordinary ones
  // must still follow numpy's rule value by value.
  const auto e = quark::detail::linspace_edges(0.0, 14.0, 2048);
  const float on_edge = static_cast<float>(e[1024]);
  const float below_edge = std::nextafter(static_cast<float>(e[700]), -inf);
  const float specials[] = {0.0f, -0.0f, on_edge, below_edge, -1.0f, 20.0f, qnan, -on_edge};
  std::mt19937 g(77);
  std::uniform_real_distribution<float> u(0.0f, 14.0f);
  std::uniform_int_distribution<int> pick(0, 7);
  std::uniform_int_distribution<int> run(1, 300);
  std::vector<float> x;
  while (x.size() < 60000) {
    const float s = specials[pick(g)];
    const int r = run(g);
    for (int i = 0; i < r; ++i)
      x.push_back(s);
    for (int i = 0; i < run(g) / 10; ++i)
      x.push_back(u(g));
  }
  check_histograms<kernel_path::portable>(e, x);
#if QUARK_OBSERVER_AVX512
  if (quark::detail::observer_avx512_usable())
    check_histograms<kernel_path::avx512>(e, x);
  if (quark::detail::observer_avx2_usable())
    check_histograms<kernel_path::avx2>(e, x);
#endif
  check_histograms<kernel_path::automatic>(e, x);
}

TEST_CASE("histogram kernel: zeros inside a bin, on an edge, outside the range, and +-0") {
  // The AVX-512 form counts zeros apart (one bin for +0 and -0, taken from the stored edges):
  // 0 strictly inside a bin, on the first edge, on a middle edge, outside the range (dropped),
  // with 30% zeros of both signs among ordinary values, NaN and +-Inf, every transform.
  const std::pair<double, double> ranges[] = {{-3e-5, 7e-5}, {0.0, 9.5},   {-12.0, 12.0},
                                              {0.1, 0.7},    {-0.7, -0.1}, {-5.0, 3.3}};
  std::mt19937 g(123);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (const auto& r : ranges) {
    for (const std::size_t bins : {std::size_t{7}, std::size_t{2048}}) {
      const auto e = quark::detail::linspace_edges(r.first, r.second, bins);
      CAPTURE(e.front());
      CAPTURE(e.back());
      auto x = edge_data(e, 20000, 9);
      for (float& v : x) {
        const double p = u(g);
        if (p < 0.15)
          v = 0.0f;
        else if (p < 0.3)
          v = -0.0f;
      }
      check_histograms<kernel_path::portable>(e, x);
#if QUARK_OBSERVER_AVX512
      if (quark::detail::observer_avx512_usable())
        check_histograms<kernel_path::avx512>(e, x);
      if (quark::detail::observer_avx2_usable())
        check_histograms<kernel_path::avx2>(e, x);
#endif
      check_histograms<kernel_path::automatic>(e, x);
    }
  }
}

TEST_CASE("histogram kernel: short spans (whole vectors, then a scalar tail) follow numpy's rule") {
  // A convolution hands its output block row by row (151 values for a 3x3 conv of 96 input
  // channels): spans shorter than a kernel block take 16- or 8-lane vectors and an exact tail.
  // Every length around a vector and a block, on edge values, zeros of both signs, NaN and +-Inf.
  const std::pair<double, double> ranges[] = {{-12.0, 12.0}, {0.0, 9.5}, {0.1, 0.7}};
  const std::size_t lengths[] = {1,  7,  8,   9,   15,   16,   17,   31,
                                 32, 33, 151, 606, 1023, 1025, 1040, 2047};
  for (const auto& r : ranges) {
    const auto e = quark::detail::linspace_edges(r.first, r.second, 2048);
    auto x = edge_data(e, 3000, 21);
    for (std::size_t i = 0; i < x.size(); i += 7)
      x[i] = i % 2 == 0 ? 0.0f : -0.0f;
    x[40] = inf;
    x[41] = -inf;
    for (const std::size_t n : lengths) {
      CAPTURE(r.first);
      CAPTURE(n);
      for (std::size_t off = 0; off + n <= x.size(); off += n + 5) {
        const auto s = std::span<const float>(x).subspan(off, n);
        check_histograms<kernel_path::portable>(e, s);
#if QUARK_OBSERVER_AVX512
        if (quark::detail::observer_avx512_usable())
          check_histograms<kernel_path::avx512>(e, s);
        if (quark::detail::observer_avx2_usable())
          check_histograms<kernel_path::avx2>(e, s);
#endif
      }
    }
  }
}

namespace {

/// The lumped kernel (bin_setup::lump(a, b)) against the oracle: the bins outside [a, b) as
/// numpy's rule gives them, bin b - 1 the sum of the oracle's bins a..b-1, bins a..b-2 empty.
template <bin_transform T, kernel_path P>
void check_lumped(const std::vector<double>& e, std::size_t a, std::size_t b,
                  std::span<const float> x) {
  const auto want_all = oracle_histogram(T, x, e);
  std::vector<std::uint64_t> want(want_all.size(), 0);
  for (std::size_t i = 0; i < want_all.size(); ++i)
    want[i >= a && i < b ? b - 1 : i] += want_all[i];
  quark::detail::bin_setup<T> s(e);
  s.lump(a, b);
  std::vector<std::uint64_t> got(e.size() - 1, 0);
  const minmax_partial ext = quark::detail::histogram_add<T, P>(x, s, got);
  CHECK(got == want);
  check_same(ext, oracle_minmax(x));
}

/// check_lumped on `x`, on short prefixes of it (the scalar end), with every kernel form.
template <bin_transform T>
void check_lumped_forms(const std::vector<double>& e, std::size_t a, std::size_t b,
                        std::span<const float> x) {
  for (const std::size_t len :
       {x.size(), std::size_t{1}, std::size_t{9}, std::size_t{17}, std::size_t{1029}}) {
    if (len > x.size())
      continue;
    const auto part = x.first(len);
    check_lumped<T, kernel_path::portable>(e, a, b, part);
#if QUARK_OBSERVER_AVX512
    if (quark::detail::observer_avx512_usable())
      check_lumped<T, kernel_path::avx512>(e, a, b, part);
    if (quark::detail::observer_avx2_usable())
      check_lumped<T, kernel_path::avx2>(e, a, b, part);
#endif
    check_lumped<T, kernel_path::automatic>(e, a, b, part);
  }
}

}  // namespace

TEST_CASE("lumped kernel: bins outside the lumped ones follow numpy's rule, those count in one") {
  // |x| (lumped from bin 0) and signed histograms (lumped in the middle) on linspace edges,
  // numpy's widened (v - 0.5, v + 0.5), and Quark's appended edges; lumped bins from one pair to
  // all. The data holds every edge, its neighbours and negations, values below the first edge
  // and beyond the last, zeros of both signs, NaN and +-Inf, at lengths that are not multiples
  // of 16 (the scalar end) and with thousands of values outside the lumped bins (the gathering
  // buffer is binned many times).
  const auto edge_sets = test_edge_sets(
      {{0.0, 9.5}, {0.1, 0.7}, {1000.0, 1000.5}, {2e-5, 7e-5}, {-0.3, 0.7}, {-12.0, 12.0}});
  unsigned seed = 100;
  for (const auto& e : edge_sets) {
    const std::size_t n = e.size() - 1;
    CAPTURE(e.front());
    CAPTURE(e.size());
    for (const std::size_t extra : {std::size_t{100}, std::size_t{9001}}) {
      auto x = edge_data(e, extra, seed++);
      for (std::size_t i = 0; i < x.size(); i += 11)
        x[i] = i % 2 == 0 ? 0.0f : -0.0f;
      for (const std::size_t b : {std::size_t{2}, n / 2, n - 1, n}) {
        CAPTURE(b);
        if (b >= 2)
          check_lumped_forms<bin_transform::absolute>(e, 0, b, x);
        for (const std::size_t a : {std::size_t{0}, std::size_t{1}, n / 3}) {
          CAPTURE(a);
          if (a + 2 <= b)
            check_lumped_forms<bin_transform::identity>(e, a, b, x);
        }
      }
    }
  }
}

namespace {

/// The flagged-value log of a watched setup (watched_setup) against the oracle: the counts
/// are unchanged; every logged value has its exact bin; and every finite nonzero value within
/// `margin` bins of an edge is logged (zeros are counted apart by the vector forms).
template <kernel_path P>
void check_watched(const std::vector<double>& e, std::span<const float> x, double margin) {
  constexpr auto T = bin_transform::identity;
  quark::detail::flag_log log(x.size() + 16);
  const quark::detail::watched_setup<T> s(quark::detail::bin_setup<T>(e), margin, &log);
  quark::detail::count_tables& tables = quark::detail::thread_count_tables();
  std::vector<std::uint64_t> c(e.size() - 1, 0);
  (void)quark::detail::histogram_count<T, P>(x, s, tables);
  tables.fold_into(c);
  CHECK(c == oracle_histogram(T, x, e));
  REQUIRE_FALSE(log.overflow);
  REQUIRE(log.values.size() == log.bins.size());
  const std::span<const double> edges(e);
  std::vector<float> logged;
  for (std::size_t i = 0; i < log.values.size(); ++i) {
    const float v = log.values[i];
    CHECK(log.bins[i] == static_cast<std::int32_t>(oracle_bin(static_cast<double>(v), e)));
    if (!std::isnan(v))
      logged.push_back(v);
  }
  std::sort(logged.begin(), logged.end());
  std::vector<float> sorted_x(x.begin(), x.end());
  std::erase_if(sorted_x, [](float v) { return std::isnan(v); });
  std::sort(sorted_x.begin(), sorted_x.end());
  const double norm = static_cast<double>(e.size() - 1) / (e.back() - e.front());
  std::size_t near = 0;
  for (const float v : x) {
    if (!std::isfinite(v) || v == 0.0f)
      continue;
    const auto d = static_cast<double>(v);
    const auto it = std::lower_bound(edges.begin(), edges.end(), d);
    double dist = std::numeric_limits<double>::infinity();
    if (it != edges.end())
      dist = std::fabs(*it - d);
    if (it != edges.begin())
      dist = std::min(dist, std::fabs(d - *(it - 1)));
    if (dist * norm < margin) {
      ++near;
      CAPTURE(dist * norm);
      CAPTURE(v);
      // As often as it occurs: a repeated value is logged each time (no memo).
      const auto [first, last] = std::equal_range(logged.begin(), logged.end(), v);
      const auto [xf, xl] = std::equal_range(sorted_x.begin(), sorted_x.end(), v);
      CHECK(last - first == xl - xf);
    }
  }
  CHECK(near > 0);
}

}  // namespace

TEST_CASE("histogram kernel: a watched setup logs every value near an edge, with its bin") {
  const auto edge_sets = test_edge_sets({{-12.0, 12.0}, {0.1, 0.7}, {1000.0, 1000.5}});
  unsigned seed = 40;
  for (const auto& e : edge_sets) {
    CAPTURE(e.front());
    CAPTURE(e.back());
    CAPTURE(e.size());
    for (const double margin : {1e-4, 3e-3}) {
      CAPTURE(margin);
      auto x = edge_data(e, 9000, seed++);
      // Values at fractions of the margin from each edge, on both sides.
      const double w = (e.back() - e.front()) / static_cast<double>(e.size() - 1);
      for (const double edge : e) {
        for (const double f : {-0.9, -0.5, -0.1, 0.1, 0.5, 0.9}) {
          x.push_back(static_cast<float>(edge + f * margin * w));
          x.push_back(static_cast<float>(edge + f * margin * w));  // a run of two
        }
      }
      check_watched<kernel_path::portable>(e, x, margin);
#if QUARK_OBSERVER_AVX512
      if (quark::detail::observer_avx512_usable())
        check_watched<kernel_path::avx512>(e, x, margin);
      if (quark::detail::observer_avx2_usable())
        check_watched<kernel_path::avx2>(e, x, margin);
#endif
      check_watched<kernel_path::automatic>(e, x, margin);
    }
  }
}
