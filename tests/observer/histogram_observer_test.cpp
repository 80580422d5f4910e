// SPDX-License-Identifier: MIT
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include <doctest/doctest.h>

#include <quark/observer/histogram_observer.hpp>
#include <quark/observer/json.hpp>

#include "calib/reference_data.hpp"

using quark::histogram_mode;
using quark::histogram_observer;

static_assert(quark::mergeable_observer<histogram_observer>);

namespace {
histogram_observer observe_all(histogram_mode mode, std::size_t bins, std::span<const float> x,
                               std::size_t parts) {
  histogram_observer h{{.mode = mode,
                        .num_bins = bins,
                        .non_finite = mode == histogram_mode::signed_extend
                                          ? quark::non_finite_policy::to_finite
                                          : quark::non_finite_policy::reject_inf}};
  for (auto b : quark_test::split(x, parts))
    h.observe(b);
  return h;
}
}  // namespace

TEST_CASE("histogram: growth across 7 batches matches the numpy reference exactly") {
  const auto g = quark_test::data_grow();
  const auto& ref = quark_test::reference()["growth_histograms"];
  const std::pair<const char*, histogram_mode> modes[] = {
      {"abs", histogram_mode::absolute},
      {"signed", histogram_mode::signed_symmetric},
      {"extend", histogram_mode::signed_extend}};
  for (const auto& [name_, mode] : modes) {
    const char* name = name_;
    CAPTURE(name);
    const auto h = observe_all(mode, 64, g, 7);
    const auto& d = h.stats();
    const auto& r = ref[name];
    REQUIRE(d.bins() == r["bins"].get<std::size_t>());
    CHECK(d.edges.front() == r["edges"][0].get<double>());
    CHECK(d.edges[1] == r["edges"][1].get<double>());
    CHECK(d.edges.back() == r["edges"][2].get<double>());
    CHECK(d.counts == r["counts"].get<std::vector<std::uint64_t>>());
    // The state holds its bins and nothing more: growth must not leave the doubling capacity of
    // push_back behind (one such histogram per activation is the calibration's memory).
    CHECK(d.edges.capacity() == d.edges.size());
    CHECK(d.counts.capacity() == d.counts.size());
  }
}

TEST_CASE("histogram: streaming equals batch exactly when the first batch holds the extrema") {
  auto a = quark_test::data_a();
  // Move the global extrema to the front so no later batch grows the range.
  auto mn = std::min_element(a.begin(), a.end());
  std::iter_swap(a.begin(), mn);
  auto mx = std::max_element(a.begin() + 1, a.end());
  std::iter_swap(a.begin() + 1, mx);
  // ... and the smallest magnitude, where the |x| histogram starts.
  auto amin = std::min_element(a.begin() + 2, a.end(),
                               [](float u, float v) { return std::fabs(u) < std::fabs(v); });
  std::iter_swap(a.begin() + 2, amin);
  for (auto mode : {histogram_mode::absolute, histogram_mode::signed_symmetric,
                    histogram_mode::signed_extend}) {
    const auto whole = observe_all(mode, 2048, a, 1);
    for (std::size_t parts : {7u, 64u}) {
      // Batch 0 is the first ceil(n/parts) values and holds both extrema.
      CHECK(observe_all(mode, 2048, a, parts).stats() == whole.stats());
    }
  }
}

TEST_CASE("histogram: streaming with growth stays within one bin of the batch result") {
  // Documented tolerance: with growth, bins move by at most one old bin width, so the CDF of the
  // streamed histogram at any edge differs from the one-batch histogram by the mass of one bin.
  const auto g = quark_test::data_grow();
  for (auto mode : {histogram_mode::absolute, histogram_mode::signed_symmetric,
                    histogram_mode::signed_extend}) {
    const auto whole = observe_all(mode, 2048, g, 1);
    for (std::size_t parts : {7u, 64u}) {
      const auto s = observe_all(mode, 2048, g, parts);
      CHECK(s.stats().range == whole.stats().range);
      if (mode == histogram_mode::absolute) {
        // Quark's |x| histogram starts at the first batch's min|x| and drops smaller values
        // of later batches (quark-spec §4.2): a handful here.
        CHECK(s.stats().total() <= whole.stats().total());
        CHECK(s.stats().total() + 100 >= whole.stats().total());
      } else {
        CHECK(s.stats().total() == whole.stats().total());
      }
      // Every percentile threshold moves by at most one (grown) bin.
      quark::histogram_data a = whole.stats(), b = s.stats();
      const double wa = a.edges[1] - a.edges[0];
      const double wb = b.edges[1] - b.edges[0];
      for (double q : {0.01, 0.5, 0.99, 0.99999}) {
        auto edge_at = [q](const quark::histogram_data& d) {
          const double t = static_cast<double>(d.total());
          std::uint64_t acc = 0;
          for (std::size_t i = 0; i < d.bins(); ++i) {
            acc += d.counts[i];
            if (static_cast<double>(acc) / t >= q)
              return d.edges[i];
          }
          return d.edges.back();
        };
        CHECK(std::fabs(edge_at(a) - edge_at(b)) <= 2.0 * std::max(wa, wb) + 1e-12);
      }
    }
  }
}

TEST_CASE("histogram: merge equals sequential for equal ranges") {
  std::vector<float> x = quark_test::data_a();
  std::vector<float> y = quark_test::lcg_data(5000, 99, 1.0, 0.0);
  y[0] = *std::min_element(x.begin(), x.end());
  y[1] = *std::max_element(x.begin(), x.end());
  x[0] = y[0];
  x[1] = y[1];
  x[2] = y[2] = 0.0f;  // same min|x| for the |x| histograms
  for (auto mode : {histogram_mode::absolute, histogram_mode::signed_symmetric,
                    histogram_mode::signed_extend}) {
    histogram_observer seq{{.mode = mode, .num_bins = 512}};
    seq.observe(x);
    seq.observe(y);
    histogram_observer p1{{.mode = mode, .num_bins = 512}}, p2{{.mode = mode, .num_bins = 512}};
    p1.observe(x);
    p2.observe(y);
    REQUIRE(p1.stats().edges == p2.stats().edges);
    p1.merge(p2);
    CHECK(p1.stats() == seq.stats());
  }
  // Different ranges: approximate merge keeps every count.
  histogram_observer a{{.mode = histogram_mode::signed_symmetric, .num_bins = 128}},
      b{{.mode = histogram_mode::signed_symmetric, .num_bins = 128}};
  a.observe(std::span<const float>(x).first(100));
  b.observe(y);
  a.merge(b);
  CHECK(a.stats().total() == 100 + y.size());
}

TEST_CASE("histogram: bad and degenerate input") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  histogram_observer h{{.mode = histogram_mode::signed_symmetric, .num_bins = 8}};
  h.observe({});
  CHECK(h.stats().empty());
  std::vector<float> nans(5, nan);
  h.observe(nans);
  CHECK(h.stats().empty());
  CHECK(h.stats().range.nan_count == 5);
  std::vector<float> zeros(10, 0.0f);
  h.observe(zeros);  // numpy widens (0, 0) to (-0.5, 0.5)
  CHECK(h.stats().edges.front() == -0.5);
  CHECK(h.stats().counts[4] == 10);
  std::vector<float> more{1.0f, -2.0f};
  h.observe(more);  // ORT's old-threshold-zero path: counts stay, edges re-made on (-2, 2)
  CHECK(h.stats().edges.back() == 2.0);
  CHECK(h.stats().total() == 12);
  std::vector<float> with_inf{1.0f, inf};
  try {
    h.observe(with_inf);
    FAIL("expected an exception");
  } catch (const quark::invalid_argument& e) {
    CHECK(e.id() == "quark.calib.infinite_input");
  }
  histogram_observer f{{.mode = histogram_mode::signed_extend,
                        .num_bins = 4,
                        .non_finite = quark::non_finite_policy::to_finite}};
  std::vector<float> nf{nan, 1.0f, -1.0f};
  f.observe(nf);
  CHECK(f.stats().counts == std::vector<std::uint64_t>{1, 0, 1, 1});  // NaN -> 0 in bin [0, 0.5)
  std::vector<float> c(7, 3.0f);
  histogram_observer k{{.mode = histogram_mode::absolute, .num_bins = 4}};
  k.observe(c);
  CHECK(k.stats().edges.front() == 2.5);
  CHECK(k.stats().edges.back() == 3.5);
  histogram_observer tiny{{.mode = histogram_mode::absolute, .num_bins = 4, .max_bins = 100}};
  std::vector<float> s1{0.0f, 1.0f}, s2{1000.0f};
  tiny.observe(s1);
  CHECK_THROWS_AS(tiny.observe(s2), quark::invalid_argument);
  CHECK_THROWS_AS(histogram_observer({.num_bins = 0}), quark::config_error);
}

TEST_CASE("histogram: JSON round trip restores a calibration that continues identically") {
  // Plain, and lumped (the lumped bins and the lumping options travel with the state).
  const auto g = quark_test::data_grow();
  const auto parts = quark_test::split(g, 7);
  for (const double lump : {0.0, 99.9}) {
    CAPTURE(lump);
    histogram_observer h{{.mode = histogram_mode::signed_symmetric,
                          .num_bins = 256,
                          .lump_percentile = lump,
                          .lump_min_values = 1000}};
    for (std::size_t i = 0; i < 3; ++i)
      h.observe(parts[i]);
    CHECK((h.stats().lump_end != 0) == (lump > 0.0));
    const nlohmann::json j = h;
    auto restored = nlohmann::json::parse(j.dump()).get<histogram_observer>();
    CHECK(restored.stats() == h.stats());
    CHECK(restored.options().lump_percentile == lump);
    for (std::size_t i = 3; i < parts.size(); ++i) {
      h.observe(parts[i]);
      restored.observe(parts[i]);
    }
    CHECK(restored.stats() == h.stats());
  }
  quark::minmax_observer m;
  const nlohmann::json jm = m;  // empty: +-Inf survive as strings
  CHECK(nlohmann::json::parse(jm.dump()).get<quark::minmax_observer>().state() == m.state());
  quark::per_channel_observer<quark::minmax_observer> pc{3};
  std::size_t shape[] = {3, 7};
  pc.observe(std::span<const float>(g).first(21), shape, 0);
  const nlohmann::json jp = pc;
  const auto pc2 =
      nlohmann::json::parse(jp.dump()).get<quark::per_channel_observer<quark::minmax_observer>>();
  REQUIRE(pc2.channels() == 3);
  for (std::size_t c = 0; c < 3; ++c)
    CHECK(pc2[c].state() == pc[c].state());
  quark::moving_average_observer ema{0.25f};
  ema.observe(parts[0]);
  const nlohmann::json je = ema;
  CHECK(nlohmann::json::parse(je.dump()).get<quark::moving_average_observer>().state() ==
        ema.state());
}

TEST_CASE("JSON states: integer fields take JSON integers in range, enumerators their values") {
  // A calibration file is user input: a float where an integer belongs (1e300 used to be cast,
  // undefined behaviour under UBSan), an integer past the field's type (2^40 wrapped silently
  // into an int) or an enumerator past the last one is refused naming the field.
  histogram_observer h{{.mode = histogram_mode::signed_symmetric, .num_bins = 16}};
  h.observe(quark_test::data_grow());
  const nlohmann::json good = h;
  REQUIRE_NOTHROW(static_cast<void>(good.get<histogram_observer>()));
  struct bad_case {
    const char* field;
    nlohmann::json value;
    const char* message;
  };
  const bad_case hist_cases[] = {
      {"num_bins", 1e300, "'num_bins' must be an integer in [0, "},
      {"num_bins", -1, "'num_bins' must be an integer in [0, "},
      {"num_bins", 16.5, "'num_bins' must be an integer"},
      {"max_bins", "16", "'max_bins' must be an integer"},
      {"mode", 3, "'mode' must be in 0..2, got 3"},
      {"mode", -1, "'mode' must be in 0..2, got -1"},
      {"mode", 4294967296.0, "'mode' must be an integer in [-2147483648, 2147483647]"},
      {"non_finite", 7, "'non_finite' must be in 0..2, got 7"},
      {"lump_end", -5, "'lump_end' must be an integer"},
  };
  for (const bad_case& c : hist_cases) {
    CAPTURE(c.field);
    CAPTURE(c.value.dump());
    nlohmann::json j = good;
    j[c.field] = c.value;
    CHECK_THROWS_WITH_AS(static_cast<void>(j.get<histogram_observer>()),
                         doctest::Contains(c.message), quark::invalid_argument);
  }
  {
    nlohmann::json j = good;
    j["counts"][0] = -3;
    CHECK_THROWS_WITH_AS(static_cast<void>(j.get<histogram_observer>()),
                         doctest::Contains("'counts' must be an integer in [0, "),
                         quark::invalid_argument);
    j["range"]["count"] = 1e300;
    j["counts"][0] = 3;
    CHECK_THROWS_WITH_AS(static_cast<void>(j.get<histogram_observer>()),
                         doctest::Contains("'count' must be an integer"), quark::invalid_argument);
  }
  quark::minmax_observer m;
  m.observe(quark_test::data_grow());
  const nlohmann::json jm = m;
  for (const nlohmann::json& v : {nlohmann::json(2), nlohmann::json(0.5), nlohmann::json(-1)}) {
    CAPTURE(v.dump());
    nlohmann::json j = jm;
    j["nan_policy"] = v;
    CHECK_THROWS_AS(static_cast<void>(j.get<quark::minmax_observer>()), quark::invalid_argument);
  }
  // calibrated_range: pof2_position is an int, zero_point an int64.
  const nlohmann::json r = {{"min", -1.0}, {"max", 1.0}, {"pof2_position", 7}, {"zero_point", 3}};
  const auto back = r.get<quark::calibrated_range>();
  CHECK(back.pof2_position == 7);
  CHECK(back.zero_point == 3);
  const bad_case range_cases[] = {
      {"pof2_position", 1e300, "'pof2_position' must be an integer in [-2147483648, 2147483647]"},
      {"pof2_position", std::int64_t{1} << 40, "'pof2_position' must be an integer in"},
      {"pof2_position", 2.0, "'pof2_position' must be an integer"},
      {"zero_point", -1e300, "'zero_point' must be an integer in [-9223372036854775808, "},
      {"zero_point", std::uint64_t{1} << 63, "'zero_point' must be an integer"},
  };
  for (const bad_case& c : range_cases) {
    CAPTURE(c.field);
    CAPTURE(c.value.dump());
    nlohmann::json j = r;
    j[c.field] = c.value;
    CHECK_THROWS_WITH_AS(static_cast<void>(j.get<quark::calibrated_range>()),
                         doctest::Contains(c.message), quark::invalid_argument);
  }
}

TEST_CASE(
    "histogram: JSON with lumped bins outside the histogram, and bad lump options, are "
    "refused by name") {
  // A valid lumped |x| state, then each way its lumped bins can be wrong.
  histogram_observer h{{.mode = histogram_mode::absolute,
                        .num_bins = 64,
                        .lump_percentile = 99.9,
                        .lump_min_values = 1000}};
  h.observe(quark_test::data_grow());
  REQUIRE(h.stats().lump_end != 0);
  const nlohmann::json good = h;
  const std::size_t n = h.stats().counts.size();
  struct bad_case {
    const char* what;
    std::size_t begin;
    std::size_t end;
    const char* mode;
  };
  const bad_case cases[] = {
      {"end past the bins", 0, n + 1, nullptr},
      {"begin at end", 5, 5, nullptr},
      {"begin past end", 9, 5, nullptr},
      {"|x| lumped bins not starting at 0", 1, 5, nullptr},
  };
  for (const bad_case& c : cases) {
    CAPTURE(c.what);
    nlohmann::json j = good;
    j["lump_begin"] = c.begin;
    j["lump_end"] = c.end;
    CHECK_THROWS_WITH_AS(static_cast<void>(j.get<histogram_observer>()),
                         doctest::Contains("histogram lumped bins outside its bins"),
                         quark::invalid_argument);
  }
  // Taken apart from its lump fields, the state loads (the check above is on them alone).
  nlohmann::json plain = good;
  plain["lump_begin"] = 0;
  plain["lump_end"] = 0;
  CHECK(plain.get<histogram_observer>().stats().lump_end == 0);

  for (const double p : {-1.0, 100.5, std::numeric_limits<double>::quiet_NaN()}) {
    CAPTURE(p);
    CHECK_THROWS_WITH_AS(histogram_observer({.lump_percentile = p}),
                         doctest::Contains("lump_percentile must lie in [0, 100]"),
                         quark::config_error);
  }
  for (const double share : {0.0, -0.5, 1.5}) {
    CAPTURE(share);
    CHECK_THROWS_WITH_AS(histogram_observer({.lump_percentile = 99.9, .lump_tail_share = share}),
                         doctest::Contains("lump_tail_share in (0, 1]"), quark::config_error);
  }
}

TEST_CASE(
    "histogram kernel: exact bins for values at and next to every edge (float and double paths)") {
  // Brute force: bin i holds e[i] <= v < e[i+1], the last bin also v == e[n].
  auto brute = [](const std::vector<double>& e, const std::vector<float>& x) {
    std::vector<std::uint64_t> c(e.size() - 1, 0);
    for (const float f : x) {
      const auto v = static_cast<double>(f);
      if (!(v >= e.front() && v <= e.back()))
        continue;
      auto it = std::upper_bound(e.begin(), e.end(), v);
      auto i = static_cast<std::size_t>(it - e.begin()) - 1;
      if (i == c.size())
        --i;
      ++c[i];
    }
    return c;
  };
  const std::pair<double, double> ranges[] = {
      {-12.0, 12.0}, {0.1, 0.7}, {1000.0, 1000.5}, {-3e-5, 7e-5}};
  for (const auto& [lo_, hi_] : ranges) {
    const double lo = lo_;
    const double hi = hi_;
    for (std::size_t n : {7u, 2048u}) {
      const auto e = quark::detail::linspace_edges(lo, hi, n);
      std::vector<float> x;
      for (const double edge : e) {
        const auto f = static_cast<float>(edge);
        x.push_back(f);
        x.push_back(std::nextafter(f, -std::numeric_limits<float>::infinity()));
        x.push_back(std::nextafter(f, std::numeric_limits<float>::infinity()));
      }
      const auto extra = quark_test::lcg_data(5000, 7, (hi - lo) / 3.0, (hi + lo) / 2.0);
      x.insert(x.end(), extra.begin(), extra.end());
      x.push_back(std::numeric_limits<float>::quiet_NaN());
      std::vector<std::uint64_t> c(n, 0);
      quark::detail::histogram_add<quark::detail::bin_transform::identity>(x, e, c);
      CAPTURE(lo);
      CAPTURE(n);
      CHECK(c == brute(e, x));
    }
  }
}

TEST_CASE("histogram: memory does not depend on the number of batches") {
  const auto a = quark_test::data_a();
  histogram_observer h{{.mode = histogram_mode::signed_symmetric, .num_bins = 2048}};
  h.observe(a);
  const std::size_t bins = h.stats().bins();
  for (int i = 0; i < 500; ++i)
    h.observe(std::span<const float>(a).subspan(static_cast<std::size_t>(i) * 37, 40));
  CHECK(h.stats().bins() == bins);
  CHECK(h.stats().edges.size() == bins + 1);
}

TEST_CASE(
    "histogram: the per-thread count tables stay clean across throws, NaN batches and "
    "other observers") {
  // numpy's rule on the edges each batch was binned on, as the oracle (no growth after the first
  // batch of `h`; `g` grows once, by appending bins).
  auto brute = [](const std::vector<double>& e, std::span<const float> x, bool absolute) {
    std::vector<std::uint64_t> c(e.size() - 1, 0);
    for (const float f : x) {
      const auto v = static_cast<double>(absolute ? std::fabs(f) : f);
      if (!(v >= e.front() && v <= e.back()))
        continue;
      auto i = static_cast<std::size_t>(std::upper_bound(e.begin(), e.end(), v) - e.begin()) - 1;
      c[std::min(i, c.size() - 1)] += 1;
    }
    return c;
  };
  const auto a = quark_test::data_a();
  const std::span<const float> s(a);
  histogram_observer h{{.mode = histogram_mode::signed_symmetric, .num_bins = 2048}};
  histogram_observer g{{.mode = histogram_mode::absolute, .num_bins = 128}};
  h.observe(s);
  g.observe(s.first(3000));
  const std::vector<double> g_first_edges = g.stats().edges;
  std::vector<float> wide(s.begin(), s.begin() + 4000);
  for (float& v : wide)
    v *= 3.0f;
  g.observe(wide);  // grows: counted once on the old edges, dropped, counted again
  std::vector<float> with_inf(s.begin(), s.begin() + 2500);
  with_inf[1200] = std::numeric_limits<float>::infinity();
  CHECK_THROWS_AS(h.observe(with_inf), quark::invalid_argument);  // counted, then dropped
  const std::vector<float> nans(3000, std::numeric_limits<float>::quiet_NaN());
  h.observe(nans);
  h.observe(s.first(5000));
  std::vector<float> seen(a);
  seen.insert(seen.end(), s.begin(), s.begin() + 5000);
  CHECK(h.stats().counts == brute(h.stats().edges, seen, false));
  CHECK(h.stats().range.nan_count == 3000);
  // g: the first batch on its own edges (the largest |x| sits on the last one, inclusive there),
  // the growing batch on the final edges.
  std::vector<std::uint64_t> g_want = brute(g.stats().edges, wide, true);
  const auto g_first = brute(g_first_edges, s.first(3000), true);
  for (std::size_t i = 0; i < g_first.size(); ++i)
    g_want[i] += g_first[i];
  CHECK(g.stats().edges.size() > g_first_edges.size());
  CHECK(g.stats().counts == g_want);
}

TEST_CASE("histogram: observe_within bins only a batch inside the range, else leaves the state") {
  // data_grow's 7 batches grow the range several times in every mode; each is observed twice,
  // so the second time it lies inside. A batch either stays inside (observe_within must equal
  // observe) or grows the range (false, state untouched); the extrema it reports are the
  // batch's own either way (checked against a scalar loop).
  const auto g = quark_test::data_grow();
  std::vector<std::span<const float>> batches;
  for (const auto b : quark_test::split(g, 7)) {
    batches.push_back(b);
    batches.push_back(b);
  }
  for (auto mode : {histogram_mode::absolute, histogram_mode::signed_symmetric,
                    histogram_mode::signed_extend}) {
    CAPTURE(static_cast<int>(mode));
    histogram_observer ref{{.mode = mode,
                            .num_bins = 64,
                            .non_finite = mode == histogram_mode::signed_extend
                                              ? quark::non_finite_policy::to_finite
                                              : quark::non_finite_policy::reject_inf}};
    histogram_observer h = ref;
    int inside = 0;
    int grew = 0;
    for (std::size_t i = 0; i < batches.size(); ++i) {
      const auto b = batches[i];
      float lo = std::numeric_limits<float>::infinity();
      float hi = -lo;
      for (const float v : b) {
        lo = std::min(lo, v);
        hi = std::max(hi, v);
      }
      const histogram_observer before = h;
      quark::detail::minmax_partial ext;
      const bool ok = h.observe_within(b, ext);
      ref.observe(b);
      CHECK(ext.min == lo);
      CHECK(ext.max == hi);
      CHECK(ext.nan_count == 0u);
      if (ok) {
        ++inside;
        CHECK(h.stats() == ref.stats());
      } else {
        CHECK(h.stats() == before.stats());
        // The first batch of an empty histogram always reports false.
        if (i > 0)
          ++grew;
        h.observe(b);
        CHECK(h.stats() == ref.stats());
      }
    }
    CHECK(inside > 0);
    CHECK(grew > 0);
  }
}
