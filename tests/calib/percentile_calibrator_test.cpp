// SPDX-License-Identifier: MIT
#include <random>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include <quark/calib/percentile_calibrator.hpp>
#include <quark/core/error.hpp>

#include "calib/reference_data.hpp"

using quark::histogram_mode;

namespace {
quark::histogram_data build(histogram_mode mode, std::span<const float> x, std::size_t parts,
                            std::size_t bins = 2048) {
  quark::histogram_observer h{{.mode = mode, .num_bins = bins}};
  for (auto b : quark_test::split(x, parts))
    h.observe(b);
  return h.stats();
}
}  // namespace

TEST_CASE("percentile: thresholds match the numpy reference (|x| and signed, 1 and 7 batches)") {
  const auto a = quark_test::data_a();
  const auto& ref = quark_test::reference()["percentile"];
  for (std::size_t parts : {1u, 7u}) {
    const auto abs_h = build(histogram_mode::absolute, a, parts);
    const auto sig_h = build(histogram_mode::signed_symmetric, a, parts);
    CHECK(abs_h.bins() == ref["abs_bins_" + std::to_string(parts)].get<std::size_t>());
    CHECK(sig_h.bins() == ref["signed_bins_" + std::to_string(parts)].get<std::size_t>());
    for (const char* p : {"99.999", "99.9", "99.0"}) {
      CAPTURE(parts);
      CAPTURE(p);
      const quark::percentile_calibrator cal{std::stod(p)};
      const auto ra = cal(abs_h);
      const auto rs = cal(sig_h);
      const auto& ea = ref["abs_" + std::to_string(parts) + "_" + p];
      const auto& es = ref["signed_" + std::to_string(parts) + "_" + p];
      CHECK(ra.min == static_cast<float>(ea[0].get<double>()));
      CHECK(ra.max == static_cast<float>(ea[1].get<double>()));
      CHECK(rs.min == static_cast<float>(es[0].get<double>()));
      CHECK(rs.max == static_cast<float>(es[1].get<double>()));
    }
  }
}

TEST_CASE("percentile: hand-computed edges on a fixed histogram") {
  // |x| of {1..10}: 10 bins [1, 10], one count per bin (10 shares the last bin with 9).
  std::vector<float> x{1, -2, 3, -4, 5, 6, 7, 8, 9, 10};
  quark::histogram_observer h{{.mode = histogram_mode::absolute, .num_bins = 9}};
  h.observe(x);
  // cdf = 1/10, ..., 8/10, 10/10: 50 % is reached in bin 4 -> left edge 5.
  auto r = quark::percentile_calibrator{50.0}(h.stats());
  CHECK(r.min == -4.0f);  // -5 clamped to the observed minimum
  CHECK(r.max == 5.0f);
  r = quark::percentile_calibrator{100.0}(h.stats());
  CHECK(r.max == 9.0f);  // left edge of the last bin, as Quark
  CHECK_THROWS_AS(static_cast<void>(quark::percentile_calibrator{101.0}(h.stats())),
                  quark::config_error);
}

TEST_CASE("percentile: empty and all-NaN statistics throw stable ids") {
  quark::histogram_observer h;
  try {
    static_cast<void>(quark::percentile_calibrator{}(h.stats()));
    FAIL("expected an exception");
  } catch (const quark::invalid_argument& e) {
    CHECK(e.id() == "quark.calib.empty_input");
  }
  std::vector<float> nans(4, std::numeric_limits<float>::quiet_NaN());
  h.observe(nans);
  try {
    static_cast<void>(quark::percentile_calibrator{}(h.stats()));
    FAIL("expected an exception");
  } catch (const quark::invalid_argument& e) {
    CHECK(e.id() == "quark.calib.all_nan");
  }
}

TEST_CASE("layerwise percentile: candidates and the scoring match the numpy reference") {
  const auto a = quark_test::data_a();
  const auto& ref = quark_test::reference()["lwp"];
  const auto h = build(histogram_mode::absolute, a, 7);
  const quark::layerwise_percentile_calibrator cal;
  const auto cands = cal.candidates(h);
  REQUIRE(cands.size() == 3);
  for (std::size_t i = 0; i < 3; ++i) {
    CHECK(cands[i].min == static_cast<float>(ref["candidates"][i][0].get<double>()));
    CHECK(cands[i].max == static_cast<float>(ref["candidates"][i][1].get<double>()));
  }
  for (auto [name, metric] :
       {std::pair{"mae", quark::lwp_metric::mae}, std::pair{"mse", quark::lwp_metric::mse}}) {
    quark::lwp_scorer score{cands, {-128, 127}, metric};
    for (auto b : quark_test::split(a, 7))
      score.observe(b);
    for (std::size_t i = 0; i < 3; ++i) {
      // The numpy reference casts per candidate exactly as we do; differences are summation order.
      CHECK(score.errors()[i] ==
            doctest::Approx(ref["errors"][name][i].get<double>()).epsilon(1e-9));
    }
    const auto best = cal.select(
        cands, [&](std::size_t i, const quark::calibrated_range&) { return score.errors()[i]; });
    CHECK(best.max == cands[ref["best"][name].get<std::size_t>()].max);
  }
  // The callback decides: a metric preferring the widest candidate picks it.
  const auto widest = cal(
      h, [](std::size_t, const quark::calibrated_range& c) { return -static_cast<double>(c.max); });
  CHECK(widest.max == cands[1].max);  // first of the equal widest ones
}

namespace {
/// The counts outside the lumped bins [a, b) with their sum in between: where a lumped
/// histogram must agree with the unlumped one.
std::vector<std::uint64_t> exact_part(const std::vector<std::uint64_t>& counts, std::size_t a,
                                      std::size_t b) {
  std::vector<std::uint64_t> out;
  for (std::size_t i = 0; i < counts.size(); ++i) {
    if (i < a || i >= b)
      out.push_back(counts[i]);
    else if (i == a)
      out.push_back(counts[i]);
    else
      out.back() += counts[i];
  }
  return out;
}
}  // namespace

TEST_CASE("percentile, lumped histograms: the numpy reference thresholds over 7 batches") {
  // Lumping for 99.9 (tail shares of 100 * 0.1% = 10%) starts after the first batch; 99.9 and
  // 99.999 must give numpy's thresholds exactly as the unlumped histograms do, |x| and signed
  // (which grows between batches, moving the lumped bins with its counts).
  const auto a = quark_test::data_a();
  const auto& ref = quark_test::reference()["percentile"];
  for (const auto mode : {histogram_mode::absolute, histogram_mode::signed_symmetric}) {
    quark::histogram_observer h{
        {.mode = mode, .num_bins = 2048, .lump_percentile = 99.9, .lump_min_values = 64}};
    for (auto b : quark_test::split(a, 7))
      h.observe(b);
    REQUIRE(h.stats().lump_end > 0);
    for (const char* p : {"99.999", "99.9"}) {
      CAPTURE(p);
      CAPTURE(static_cast<int>(mode));
      REQUIRE(quark::percentile_decided(h.stats(), std::stod(p)));
      const auto r = quark::percentile_calibrator{std::stod(p)}(h.stats());
      const auto& e =
          ref[std::string(mode == histogram_mode::absolute ? "abs_7_" : "signed_7_") + p];
      CHECK(r.min == static_cast<float>(e[0].get<double>()));
      CHECK(r.max == static_cast<float>(e[1].get<double>()));
    }
  }
}

TEST_CASE("percentile, lumped histograms: decided percentiles equal the unlumped ones") {
  // Random batch sequences (scales that grow the range and shrink again, zeros, NaN), observed
  // whole or in pieces into |x| and signed histograms lumped for 99.99 with the default tail
  // share or a wider one: the bins outside the lumped ones and their sum equal the unlumped
  // histogram's, and every percentile the lumped one says it decides is the unlumped one's. In
  // every fourth round a small wide first batch sets the lumped bins and 200 times as many narrow
  // values follow, which leaves the lower percentiles inside them (undecided).
  std::mt19937 gen(11);
  std::size_t decided = 0;
  std::size_t undecided = 0;
  for (int round = 0; round < 80; ++round) {
    const double share = round % 3 == 0 ? 0.05 : 0.01;
    const bool skewed = round % 4 == 1;
    const auto mode = round < 40 ? histogram_mode::absolute : histogram_mode::signed_symmetric;
    quark::histogram_observer plain{{.mode = mode, .num_bins = 512}};
    quark::histogram_observer lumped{{.mode = mode,
                                      .num_bins = 512,
                                      .lump_percentile = 99.99,
                                      .lump_tail_share = share,
                                      .lump_min_values = 1000}};
    std::uniform_real_distribution<float> scale(0.2f, 3.0f);
    for (int b = 0; b < 6; ++b) {
      std::normal_distribution<float> d(0.3f, skewed && b == 0 ? 8.0f : scale(gen));
      std::vector<float> x(skewed ? (b == 0 ? 2000 : 80000)
                                  : 3000 + 97 * static_cast<std::size_t>(b));
      for (float& v : x)
        v = d(gen);
      for (std::size_t i = 0; i < x.size(); i += 13)
        x[i] = 0.0f;
      x[5] = std::numeric_limits<float>::quiet_NaN();
      plain.observe(x);
      if (b % 2 == 0) {
        lumped.observe(x);
      } else {
        quark::histogram_pieces pc = lumped.begin_pieces(2);
        const std::span<const float> xs(x);
        // Part k reads one half of the batch, once.
        const auto half_of = [xs](std::size_t k) {
          return [xs, k, done = false]() mutable -> std::span<const float> {
            if (done)
              return {};
            done = true;
            return k == 0 ? xs.first(xs.size() / 2) : xs.subspan(xs.size() / 2);
          };
        };
        for (std::size_t k = 0; k < 2; ++k)
          lumped.observe_piece(pc, k, half_of(k));
        if (lumped.grow_pieces(pc)) {
          for (std::size_t k = 0; k < 2; ++k)
            lumped.finish_piece(pc, k, half_of(k));
        }
        lumped.add_pieces(pc);
      }
    }
    const auto& hp = plain.stats();
    const auto& hl = lumped.stats();
    REQUIRE(hl.lump_end > 0);
    REQUIRE(hl.edges == hp.edges);
    CHECK(hl.range == hp.range);
    CHECK(exact_part(hl.counts, hl.lump_begin, hl.lump_end) ==
          exact_part(hp.counts, hl.lump_begin, hl.lump_end));
    for (const double p : {99.99, 99.995, 99.999, 99.9999, 100.0}) {
      CAPTURE(round);
      CAPTURE(p);
      if (!quark::percentile_decided(hl, p)) {
        ++undecided;
        CHECK_THROWS_WITH_AS(static_cast<void>(quark::percentile_calibrator{p}(hl)),
                             doctest::Contains("lumped"), quark::error);
        continue;
      }
      ++decided;
      const auto rl = quark::percentile_calibrator{p}(hl);
      const auto rp = quark::percentile_calibrator{p}(hp);
      CHECK(rl.min == rp.min);
      CHECK(rl.max == rp.max);
    }
  }
  CHECK(decided > 200);
  CHECK(undecided > 10);  // the skewed rounds
}

TEST_CASE("percentile, lumped histograms: no lumping where it could not pay or decide") {
  // Lumping for 99 asks for a tail share of 100%: never lumped. Too few values: not yet.
  std::vector<float> x(20000);
  for (std::size_t i = 0; i < x.size(); ++i)
    x[i] = static_cast<float>(i % 1000) * 0.01f;
  quark::histogram_observer low{
      {.mode = histogram_mode::absolute, .num_bins = 256, .lump_percentile = 99.0}};
  low.observe(x);
  low.observe(x);
  CHECK(low.stats().lump_end == 0);
  quark::histogram_observer small{{.mode = histogram_mode::absolute,
                                   .num_bins = 256,
                                   .lump_percentile = 99.999,
                                   .lump_min_values = 30000}};
  small.observe(x);
  CHECK(small.stats().lump_end == 0);
  small.observe(x);  // 40000 counts now
  CHECK(small.stats().lump_end > 0);
  CHECK(small.stats().lump_begin == 0);
  // pof2 MinMSE's histograms (every bin counts in its cost) are never lumped; a signed one whose
  // threshold is 0 (all zeros so far: ORT's growth then re-edges without moving counts) is not.
  quark::histogram_observer ext{
      {.mode = histogram_mode::signed_extend, .num_bins = 256, .lump_percentile = 99.999}};
  ext.observe(x);
  ext.observe(x);
  CHECK(ext.stats().lump_end == 0);
  const std::vector<float> zeros(20000, 0.0f);
  quark::histogram_observer sig{
      {.mode = histogram_mode::signed_symmetric, .num_bins = 256, .lump_percentile = 99.999}};
  sig.observe(zeros);
  CHECK(sig.stats().lump_end == 0);
  sig.observe(x);
  sig.observe(x);
  CHECK(sig.stats().lump_end > 0);
  CHECK(sig.stats().lump_begin > 0);
  CHECK_THROWS_AS(quark::histogram_observer({.lump_percentile = 101.0}), quark::error);
  CHECK_THROWS_AS(quark::histogram_observer({.lump_tail_share = 0.0}), quark::error);
}

TEST_CASE("percentile_decided: every true histogram the lumped one stands for gives its result") {
  // A lumped histogram stands for every histogram with the same counts outside the lumped bins
  // [a, b), at least its counts in bins a..b-2, and the same sum over [a, b). For random small
  // histograms, lumped ranges and such truths (the lumped counts piled at either end, or
  // spread), every percentile on a fine grid that percentile_decided() accepts must give the
  // truths' thresholds, and the calibrator must refuse the others.
  std::mt19937 gen(5);
  std::uniform_int_distribution<int> count(0, 9);
  std::size_t decided = 0;
  std::size_t refused = 0;
  for (int round = 0; round < 300; ++round) {
    const auto mode = round % 2 == 0 ? histogram_mode::absolute : histogram_mode::signed_symmetric;
    const std::size_t n = 6 + static_cast<std::size_t>(round % 7);
    quark::histogram_data h;
    h.mode = mode;
    h.edges = mode == histogram_mode::absolute ? quark::detail::linspace_edges(0.0, 6.0, n)
                                               : quark::detail::linspace_edges(-6.0, 6.0, n);
    h.range = {.min = mode == histogram_mode::absolute ? 0.0f : -6.0f, .max = 6.0f, .count = 1};
    h.counts.resize(n);
    for (auto& c : h.counts)
      c = static_cast<std::uint64_t>(count(gen));
    const std::size_t a =
        mode == histogram_mode::absolute ? 0 : 1 + static_cast<std::size_t>(round) % (n / 2);
    const std::size_t b = std::min(n - 1, a + 2 + static_cast<std::size_t>(round) % 3);
    h.lump_begin = a;
    h.lump_end = b;
    h.counts[b - 1] += 20;  // the lumped counts not in bins a..b-2
    std::vector<std::vector<std::uint64_t>> truths;
    for (int t = 0; t < 4; ++t) {
      auto c = h.counts;
      c[b - 1] -= 20;
      if (t == 0)
        c[a] += 20;  // all at the start of the lumped bins
      else if (t == 1)
        c[b - 1] += 20;  // all at the end (the lumped histogram itself)
      else
        for (int k = 0; k < 20; ++k)
          ++c[a + static_cast<std::size_t>(gen()) % (b - a)];
      truths.push_back(std::move(c));
    }
    for (double p = 50.0; p <= 100.0; p += 0.25) {
      CAPTURE(round);
      CAPTURE(p);
      const quark::percentile_calibrator cal{p};
      if (!quark::percentile_decided(h, p)) {
        ++refused;
        CHECK_THROWS_AS(static_cast<void>(cal(h)), quark::error);
        continue;
      }
      ++decided;
      const auto r = cal(h);
      for (const auto& c : truths) {
        quark::histogram_data t = h;
        t.counts = c;
        t.lump_begin = t.lump_end = 0;
        const auto rt = cal(t);
        CHECK(r.min == rt.min);
        CHECK(r.max == rt.max);
      }
    }
  }
  CHECK(decided > 10000);
  CHECK(refused > 1000);
}
