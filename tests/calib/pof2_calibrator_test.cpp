// SPDX-License-Identifier: MIT
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include <doctest/doctest.h>

#include <quark/calib/minmax_calibrator.hpp>
#include <quark/calib/mse_calibrator.hpp>
#include <quark/calib/pof2_calibrator.hpp>
#include <quark/calib/tensor_calibrator.hpp>
#include <quark/core/error.hpp>
#include <quark/observer/histogram_observer.hpp>
#include <quark/observer/minmax_observer.hpp>

#include "calib/reference_data.hpp"

using quark::histogram_mode;

namespace {
quark::histogram_data extend_hist(std::span<const float> x, std::size_t parts) {
  quark::histogram_observer h{{.mode = histogram_mode::signed_extend,
                               .num_bins = 2048,
                               .non_finite = quark::non_finite_policy::to_finite}};
  for (auto b : quark_test::split(x, parts))
    h.observe(b);
  return h.stats();
}
}  // namespace

TEST_CASE("pof2 MinMSE: positions match the numpy reference (histogram, raw, most common)") {
  const auto g = quark_test::data_grow();
  const auto a = quark_test::data_a();
  const auto& ref = quark_test::reference()["pof2"];
  const quark::pof2_minmse_calibrator cal{.grid = {-127, 127}};
  for (std::size_t parts : {1u, 7u}) {
    const auto r = cal(extend_hist(g, parts));
    CHECK(*r.pof2_position == ref["hist_" + std::to_string(parts)].get<int>());
    CHECK(r.max == std::ldexp(127.0f, -*r.pof2_position));
    CHECK(r.min == -r.max);
  }
  const auto ha = extend_hist(a, 7);
  CHECK(*cal(ha).pof2_position == ref["hist_a"].get<int>());
  CHECK(*quark::pof2_minmse_calibrator{.grid = {-32767, 32767}}(ha).pof2_position ==
        ref["hist_a_int16"].get<int>());

  // Raw mode: a min/max pass, then the squared-error pass, batch by batch.
  for (auto [data, key, grid] : {std::tuple{&a, "raw_a", quark::int_grid{-127, 127}},
                                 std::tuple{&g, "raw", quark::int_grid{-127, 127}},
                                 std::tuple{&g, "raw_uint8", quark::int_grid{0, 255}}}) {
    quark::minmax_observer mm;
    for (auto b : quark_test::split(*data, 7))
      mm.observe(b);
    quark::pof2_sse_observer sse{mm.stats(), grid};
    for (auto b : quark_test::split(*data, 7))
      sse.observe(b);
    CHECK(*sse.result().pof2_position == ref[key].get<int>());
    // streaming equals batch: the SSE sums the same terms
    quark::pof2_sse_observer one{mm.stats(), grid};
    one.observe(*data);
    CHECK(*one.result().pof2_position == *sse.result().pof2_position);
    for (std::size_t i = 0; i < 5; ++i)
      CHECK(one.stats()[i] == doctest::Approx(sse.stats()[i]).epsilon(1e-12));
  }
  const auto r8 = [&] {
    quark::minmax_observer mm;
    mm.observe(g);
    quark::pof2_sse_observer s{mm.stats(), {0, 255}};
    s.observe(g);
    return s.result();
  }();
  CHECK(r8.min == std::ldexp(-128.0f, -*r8.pof2_position));  // zero point 128
  CHECK(r8.max == std::ldexp(127.0f, -*r8.pof2_position));

  quark::pof2_most_common_observer mc{{-127, 127}};
  for (auto b : quark_test::split(g, 7))
    mc.observe(b);
  CHECK(*mc.result().pof2_position == ref["most_common"].get<int>());
  for (const auto& [pos, n] : ref["votes"].items())
    CHECK(mc.stats().at(std::stoi(pos)) == n.get<std::uint64_t>());
}

TEST_CASE("pof2 MinMSE: histogram costs match numpy, streaming within tolerance") {
  const auto g = quark_test::data_grow();
  const auto& ref = quark_test::reference()["pof2"];
  // The calibrator does not expose costs; recompute the first and the chosen from the reference
  // to check that 1 and 7 batches choose the same candidate.
  CHECK(ref["hist_cost_1"][1].get<double>() ==
        doctest::Approx(ref["hist_cost_7"][1].get<double>()).epsilon(1e-3));
  const quark::pof2_minmse_calibrator cal;
  const auto h1 = extend_hist(g, 1);
  for (std::size_t parts : {7u, 64u})
    CHECK(*cal(extend_hist(g, parts)).pof2_position == *cal(h1).pof2_position);
}

TEST_CASE("pof2 MinMSE: asymmetric search keeps the min/max zero point (hand-derived)") {
  // INT8 full table -128..127, x in [-0.2, 2.5]: s = 2.7 / 255 = 0.010588, -log2 s = 6.56 ->
  // rint 7 (2^-7); zp = RNE(-128 + 0.2 / s) = RNE(-109.11) = -109. With zp fixed:
  //  * 2^-6: x * 64 = -12.8, 3.2, 44.8, 83.2, 160 -> q = -122 .. 51, no clip; error 0.2 / 64
  //    on four values: SSE 4 * 0.04 / 4096 = 3.9e-5;
  //  * 2^-5: errors 0.4 / 32 on four values: 6.25e-4;
  //  * 2^-7 (the nearest power of two) clips 2.5 to (127 + 109) / 128 = 1.84: 0.43.
  // So 2^-6, and the returned range is ((-128 + 109) / 64, (127 + 109) / 64).
  const std::vector<float> x{-0.2f, 0.05f, 0.7f, 1.3f, 2.5f};
  const auto a = quark::pof2_minmse_search(x, {-128, 127}, quark::range_symmetry::asymmetric);
  CHECK(*a.pof2_position == 6);
  CHECK(a.min == -19.0f / 64.0f);
  CHECK(a.max == 236.0f / 64.0f);
  // Symmetric on the same values: absmax 2.5, s = 5 / 254, -log2 s = 5.67 -> 2^-6, whose grid
  // ends at 127 / 64 = 1.98 and clips 2.5 (0.27); 2^-5 rounds to 0.4 / 32 (6.25e-4) -> 2^-5.
  const auto sy = quark::pof2_minmse_search(x, {-127, 127});
  CHECK(*sy.pof2_position == 5);
  CHECK(sy.max == 127.0f / 32.0f);
  // A caller-given start (Quark's asymmetric signed weights: scale and zero point from the full
  // table, values clipped to -127..127): start 2^-7, zp -109 -> the same 2^-6.
  const auto w = quark::pof2_minmse_search(x, {-127, 127}, 7, -109);
  CHECK(*w.pof2_position == 6);
  CHECK(w.min == -18.0f / 64.0f);
  // Other starts, zero points and clip tables (some clipping most values) against a
  // brute-force SSE of the five candidates, written out independently here (first strict
  // minimum wins).
  const auto brute = [&](int start, int zp, int qmin, int qmax) {
    double best = 0.0;
    int pos = 0;
    for (int i = 0; i < 5; ++i) {
      const double s = std::ldexp(1.0, -(start + i - 1));
      double sse = 0.0;
      for (const float v : x) {
        double q = std::nearbyint(static_cast<double>(v) / s) + zp;
        q = std::clamp(q, static_cast<double>(qmin), static_cast<double>(qmax));
        const double d = static_cast<double>(v) - (q - zp) * s;
        sse += d * d;
      }
      if (i == 0 || sse < best) {
        best = sse;
        pos = start + i - 1;
      }
    }
    return pos;
  };
  for (int start = 3; start <= 9; ++start) {
    for (const int zp : {-109, -20, 0, 30}) {
      for (const int lo : {-128, -127, -8}) {
        const int hi = lo == -8 ? 7 : 127;  // INT8 full, INT8 symmetric, INT4
        CAPTURE(start);
        CAPTURE(zp);
        CAPTURE(lo);
        CHECK(*quark::pof2_minmse_search(x, {lo, hi}, start, zp).pof2_position ==
              brute(start, zp, lo, hi));
      }
    }
  }
  CHECK_THROWS_AS(static_cast<void>(quark::pof2_minmse_search({}, {-127, 127}, 7, 0)),
                  quark::invalid_argument);
}

TEST_CASE("pof2 MinMSE: hand-computed five-candidate search") {
  // absmax 1.4 on INT8 symmetric: s = 1.4/127, pos = 7; candidates 2^-6 .. 2^-10.
  std::vector<float> x{1.4f, -1.4f, 0.01f, 0.02f, -0.03f};
  const auto r = quark::pof2_minmse_search(x, {-127, 127});
  // 2^-6 keeps 1.4 (127 * 2^-6 = 1.98) with error <= 2^-7 per value; 2^-7 clips 1.4 to 0.992.
  CHECK(*r.pof2_position == 6);
  CHECK(r.max == 127.0f / 64.0f);
  // 40000 values evenly spread on [-0.9, 0.9] and one outlier 1.4: the grid error
  // N * step^2 / 12 is 0.81 for 2^-6 and 0.20 for 2^-7, which clips the outlier by 0.41
  // (0.17): 2^-7 wins. 2^-8 clips everything above 0.496.
  std::vector<float> spread(40001);
  for (std::size_t i = 0; i < 40000; ++i)
    spread[i] = -0.9f + 1.8f * static_cast<float>(i) / 40000.0f;
  spread[40000] = 1.4f;
  CHECK(*quark::pof2_minmse_search(spread, {-127, 127}).pof2_position == 7);
  CHECK_THROWS_AS(static_cast<void>(quark::pof2_minmse_calibrator{
                      .symmetry = quark::range_symmetry::asymmetric}(extend_hist(x, 1))),
                  quark::config_error);
  quark::pof2_most_common_observer none{{-127, 127}};
  CHECK_THROWS_AS(static_cast<void>(none.result()), quark::invalid_argument);
}

TEST_CASE("pof2 MinMSE: NaN reads as 0 (Quark's nan_to_num), leaving the finite values' search") {
  // absmax 1.4 on INT8 symmetric: position 6, as in the hand-computed case above.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> with_nan{1.4f, -1.4f, nan, 0.01f, nan};
  CHECK(*quark::pof2_minmse_calibrator{}(extend_hist(with_nan, 1)).pof2_position == 6);
}

TEST_CASE("pof2 NonOverflow: quark-spec §2.2 examples and the ceil option") {
  quark::minmax_observer obs;
  std::vector<float> x{-1.4f, 0.3f};
  obs.observe(x);
  const quark::pof2_non_overflow_calibrator cal{.grid = {-127, 127}};
  auto r = cal(obs.stats());
  CHECK(r.min == -1.4f);
  CHECK(r.max == 1.4f);
  CHECK(*r.pof2_position == 7);  // rint(6.503): clips 1.4 to 0.992
  r = quark::pof2_non_overflow_calibrator{.grid = {-127, 127},
                                          .rounding = quark::pow2_rounding::ceil}(obs.stats());
  CHECK(*r.pof2_position == 6);  // covers 1.4
  std::vector<float> y{1.5f};
  quark::minmax_observer o2;
  o2.observe(y);
  CHECK(*cal(o2.stats()).pof2_position == 6);
}

namespace {

/// The window search of float-scale MinMSE written out plainly (an oracle apart from the
/// header's): B bins over [lo, hi] with `counts`, windows (c[left], c[right]) for k = B/2 .. B-1,
/// each window's uint8 asymmetric scale (rmin clamped to <= 0, rmax to >= 0, scale = (rmax -
/// rmin) / 255, zp = round(-rmin / scale)), error = sum count * (fq(c) - c)^2 in double;
/// returns the index of the first smallest window.
std::size_t oracle_window(const std::vector<double>& c, const std::vector<std::uint64_t>& counts,
                          std::vector<std::pair<double, double>>& windows) {
  const std::size_t b = c.size();
  std::size_t best = 0;
  double best_err = 1e300;
  for (std::size_t k = b / 2; k < b; ++k) {
    const double half = static_cast<double>(b - k) / 2.0;
    const auto left = static_cast<std::size_t>(half);
    const auto right = static_cast<std::size_t>(static_cast<double>(b) - half);
    const double rmin = std::min(c[left], 0.0);
    const double rmax = std::max(c[right], 0.0);
    const double scale = static_cast<double>(static_cast<float>(rmax - rmin)) / 255.0;
    const double zp = std::nearbyint(-rmin / scale);
    double err = 0.0;
    for (std::size_t i = 0; i < b; ++i) {
      const double q = std::clamp(std::nearbyint(c[i] / scale) + zp, 0.0, 255.0);
      const double d = (q - zp) * scale - c[i];
      err += static_cast<double>(counts[i]) * d * d;
    }
    windows.emplace_back(c[left], c[right]);
    if (err < best_err) {
      best_err = err;
      best = windows.size() - 1;
    }
  }
  return best;
}

}  // namespace

TEST_CASE("float MinMSE on an activation histogram: the window a plain search picks") {
  // Values at the centres of 8 bins over [0, 16] (1, 3, ..., 15): many below 13, a few at 15.
  // Windows: (c2, c6) = (5, 13), (c1, c6) = (3, 13), (c1, c7) = (3, 15), (c0, c7) = (1, 15);
  // on the uint8 grid rmin clamps to 0, so the search weighs clipping the outliers at 13
  // against the step of each range (with 15 / 255 = 1 / 17 every odd centre is on the grid).
  for (const std::uint64_t outliers : {std::uint64_t{1}, std::uint64_t{5000}}) {
    CAPTURE(outliers);
    std::vector<float> x;
    for (int v = 1; v <= 13; v += 2) {
      for (int r = 0; r < 1000; ++r)
        x.push_back(static_cast<float>(v));
    }
    for (std::uint64_t r = 0; r < outliers; ++r)
      x.push_back(15.0f);
    x.push_back(0.0f);   // the histogram's range is [0, 16]
    x.push_back(16.0f);  // (two values at the outer edges)
    quark::histogram_observer h{{.mode = quark::histogram_mode::signed_extend, .num_bins = 8}};
    h.observe(x);
    const quark::histogram_data& d = h.stats();
    REQUIRE(d.edges.front() == 0.0);
    REQUIRE(d.edges.back() == 16.0);
    std::vector<double> c;
    for (std::size_t i = 0; i < 8; ++i)
      c.push_back((d.edges[i] + d.edges[i + 1]) / 2.0);
    std::vector<std::pair<double, double>> windows;
    const std::size_t want = oracle_window(c, d.counts, windows);
    const quark::calibrated_range r =
        quark::float_minmse_hist_calibrator{{0, 255}, quark::range_symmetry::asymmetric}(d);
    CHECK(static_cast<double>(r.max) == windows[want].second);
    CHECK(r.origin == quark::scale_origin::searched);
    REQUIRE(r.scale.has_value());
    CHECK(static_cast<double>(*r.scale) ==
          doctest::Approx(static_cast<double>(r.max) / 255.0).epsilon(1e-6));
    // Many outliers: clipping them at 13 would cost 5000 * 2^2, more than any step saves.
    if (outliers > 1)
      CHECK(r.max == 15.0f);
  }
  // Through tensor_calibrator, streamed in two batches, the same result as one histogram.
  quark::tensor_calibrator t{{.method = quark::calib_method::float_minmse,
                              .symmetry = quark::range_symmetry::asymmetric,
                              .num_bins = 8,
                              .grid = {0, 255}}};
  std::vector<float> a{0.0f, 1.0f, 3.0f, 16.0f}, b{5.0f, 7.0f, 9.0f, 15.0f};
  t.observe(a);
  t.observe(b);
  quark::histogram_observer h{{.mode = quark::histogram_mode::signed_extend, .num_bins = 8}};
  std::vector<float> ab{0.0f, 1.0f, 3.0f, 16.0f, 5.0f, 7.0f, 9.0f, 15.0f};
  h.observe(ab);
  CHECK(t.result().max ==
        quark::float_minmse_hist_calibrator{{0, 255}, quark::range_symmetry::asymmetric}(h.stats())
            .max);
  CHECK_THROWS_AS(static_cast<void>(quark::float_minmse_hist_calibrator{}(quark::histogram_data{})),
                  quark::invalid_argument);
}
