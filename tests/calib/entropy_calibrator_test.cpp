// SPDX-License-Identifier: MIT
#include <algorithm>
#include <bit>
#include <cmath>
#include <vector>

#include <doctest/doctest.h>

#include <quark/calib/distribution_calibrator.hpp>
#include <quark/calib/entropy_calibrator.hpp>

#include "calib/reference_data.hpp"

using quark::histogram_mode;

TEST_CASE("entropy: 2048-bin scan matches the numpy reference (candidates, argmin, range)") {
  const auto a = quark_test::data_a();
  const auto& ref = quark_test::reference()["entropy_2048"];
  quark::histogram_observer h{{.mode = histogram_mode::signed_symmetric, .num_bins = 2048}};
  h.observe(a);
  const quark::entropy_calibrator cal{.num_quantized_bins = 128};
  const auto scan = cal.scan(h.stats());
  REQUIRE(scan.size() == ref["candidates"].get<std::size_t>());
  CHECK(scan.front().kl == doctest::Approx(ref["kl_first"].get<double>()).epsilon(1e-10));
  CHECK(scan.back().kl == doctest::Approx(ref["kl_last"].get<double>()).epsilon(1e-10));
  const auto best = ref["best"].get<std::size_t>();
  CHECK(scan[best].kl == doctest::Approx(ref["kl_best"].get<double>()).epsilon(1e-10));
  const auto r = cal(h.stats());
  CHECK(r.warnings.empty());
  CHECK(r.min == static_cast<float>(ref["range"][0].get<double>()));
  CHECK(r.max == static_cast<float>(ref["range"][1].get<double>()));
}

TEST_CASE("entropy: default 128/128 has one candidate and warns, growth adds candidates") {
  const auto a = quark_test::data_a();
  quark::histogram_observer h{{.mode = histogram_mode::signed_symmetric, .num_bins = 128}};
  h.observe(a);
  const auto r = quark::entropy_calibrator{}(h.stats());
  REQUIRE(r.warnings.size() == 1);
  CHECK(r.warnings[0].find("single candidate") != std::string::npos);
  CHECK(r.min == *std::min_element(a.begin(), a.end()));  // equals MinMax
  CHECK(r.max == *std::max_element(a.begin(), a.end()));

  const auto g = quark_test::data_grow();
  const auto& ref = quark_test::reference()["entropy_128_growing"];
  quark::histogram_observer hg{{.mode = histogram_mode::signed_symmetric, .num_bins = 128}};
  for (auto b : quark_test::split(g, 7))
    hg.observe(b);
  CHECK(hg.stats().bins() == ref["bins"].get<std::size_t>());
  const quark::entropy_calibrator cal;
  CHECK(cal.scan(hg.stats()).size() == ref["candidates"].get<std::size_t>());
  const auto rg = cal(hg.stats());
  CHECK(rg.warnings.empty());
  CHECK(rg.min == static_cast<float>(ref["range"][0].get<double>()));
  CHECK(rg.max == static_cast<float>(ref["range"][1].get<double>()));
}

TEST_CASE("entropy: hand-checked small scan and option errors") {
  // 8 bins, 4 quantized bins: candidates i = 2..4 (windows of 5, 7 and 8 bins).
  quark::histogram_data d;
  d.mode = histogram_mode::signed_symmetric;
  d.edges = {-4, -3, -2, -1, 0, 1, 2, 3, 4};
  d.counts = {1, 0, 4, 10, 10, 4, 0, 1};
  d.range = {-4.0f, 4.0f, 30, 0};
  const quark::entropy_calibrator cal{.num_quantized_bins = 4};
  const auto scan = cal.scan(d);
  REQUIRE(scan.size() == 3);
  CHECK(scan[0].start == 2);
  CHECK(scan[0].end == 7);
  CHECK(scan[2].start == 0);
  CHECK(scan[2].end == 8);
  // Window [2, 7): p = {5, 10, 10, 4, 1} (outside mass folded), m = 1, q = {4, 10, 10, 4, 0}
  // -> smoothing moves 1e-4 / 4 from each non-zero q to the zero one.
  const std::vector<double> p{5, 10, 10, 4, 1};
  const double e1 = 1e-4 / 4.0;
  const std::vector<double> q{4 - e1, 10 - e1, 10 - e1, 4 - e1, 1e-4};
  double sp = 30, sq = 0, kl = 0;
  for (double v : q)
    sq += v;
  for (std::size_t i = 0; i < 5; ++i)
    kl += p[i] / sp * std::log((p[i] / sp) / (q[i] / sq));
  CHECK(scan[0].kl == doctest::Approx(kl).epsilon(1e-12));
  CHECK_THROWS_AS(static_cast<void>(quark::entropy_calibrator{.num_quantized_bins = 20}.scan(d)),
                  quark::config_error);
  quark::histogram_data abs_d = d;
  abs_d.mode = histogram_mode::absolute;
  CHECK_THROWS_AS(static_cast<void>(cal.scan(abs_d)), quark::config_error);
}

TEST_CASE("distribution: mean and std of the bin centres (same and p3) match numpy") {
  const auto a = quark_test::data_a();
  const auto& ref = quark_test::reference()["distribution"];
  quark::histogram_observer h{{.mode = histogram_mode::signed_symmetric, .num_bins = 2048}};
  h.observe(a);
  const auto same = quark::distribution_calibrator{}(h.stats());
  CHECK(same.mean == doctest::Approx(ref["same"][0].get<double>()).epsilon(1e-12));
  CHECK(same.std_dev == doctest::Approx(ref["same"][1].get<double>()).epsilon(1e-12));
  const auto p3 =
      quark::distribution_calibrator{.scenario = quark::distribution_scenario::p3}(h.stats());
  CHECK(p3.mean == doctest::Approx(ref["p3"][0].get<double>()).epsilon(1e-12));
  CHECK(p3.std_dev == doctest::Approx(ref["p3"][1].get<double>()).epsilon(1e-12));
  quark::histogram_observer small{{.mode = histogram_mode::signed_symmetric, .num_bins = 128}};
  small.observe(a);
  CHECK_THROWS_AS(static_cast<void>(quark::distribution_calibrator{}(small.stats())),
                  quark::config_error);
}

TEST_CASE("entropy: the vectorised log is within 2 ulp of std::log") {
  std::vector<double> x;
  std::uint64_t state = 1;
  for (int i = 0; i < 200000; ++i) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    const double m = 1.0 + static_cast<double>(state >> 11) * 0x1p-53;
    x.push_back(std::ldexp(m, static_cast<int>((state >> 3) % 1200) - 600));
  }
  for (double v : {1.0, 2.0, 0.5, 1e-4, 0.9999, 1.0001, 3.0, 1e300, 1e-300})
    x.push_back(v);
  x.push_back(std::nextafter(1.0, 2.0));
  x.push_back(std::nextafter(1.0, 0.0));
  std::vector<double> y(x.size());
  quark::detail::log_positive(x.data(), y.data(), x.size());
  std::int64_t worst = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double r = std::log(x[i]);
    worst = std::max(worst,
                     std::abs(std::bit_cast<std::int64_t>(r) - std::bit_cast<std::int64_t>(y[i])));
  }
  CHECK(worst <= 2);
  CHECK(y[x.size() - 11] == 0.0);  // log 1 is exact
}
