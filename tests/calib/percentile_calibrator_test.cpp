// SPDX-License-Identifier: MIT
#include <vector>

#include <doctest/doctest.h>

#include <quark/calib/percentile_calibrator.hpp>

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
