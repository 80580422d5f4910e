// SPDX-License-Identifier: MIT
#include <cmath>
#include <limits>
#include <vector>

#include <doctest/doctest.h>

#include <quark/calib/tensor_calibrator.hpp>
#include <quark/calib/to_qparams.hpp>
#include <quark/observer/json.hpp>

#include "calib/reference_data.hpp"

namespace {
quark::calibrated_range run(const quark::calib_options& o, std::span<const float> x,
                            std::size_t parts) {
  quark::tensor_calibrator cal{o};
  const auto batches = quark_test::split(x, parts);
  for (auto b : batches)
    cal.observe(b);
  if (cal.needs_second_pass()) {
    cal.begin_second_pass();
    for (auto b : batches)
      cal.observe_second(b);
  }
  return cal.result();
}
}  // namespace

TEST_CASE("tensor_calibrator: every method reproduces the typed calibrators and the references") {
  const auto a = quark_test::data_a();
  const auto g = quark_test::data_grow();
  const auto& ref = quark_test::reference();
  using m = quark::calib_method;
  // MinMax (asymmetric default) and symmetric.
  auto r = run({.method = m::minmax}, a, 7);
  CHECK(r.min == *std::min_element(a.begin(), a.end()));
  r = run({.method = m::minmax, .symmetry = quark::range_symmetry::symmetric}, a, 7);
  CHECK(r.min == -r.max);
  // Percentile: symmetric default -> |x| histogram.
  r = run({.method = m::percentile}, a, 7);
  CHECK(r.max == static_cast<float>(ref["percentile"]["abs_7_99.999"][1].get<double>()));
  r = run(
      {.method = m::percentile, .symmetry = quark::range_symmetry::asymmetric, .percentile = 99.9},
      a, 7);
  CHECK(r.min == static_cast<float>(ref["percentile"]["signed_7_99.9"][0].get<double>()));
  // Entropy with 2048 bins; default 128 warns.
  r = run({.method = m::entropy, .num_bins = 2048}, a, 1);
  CHECK(r.max == static_cast<float>(ref["entropy_2048"]["range"][1].get<double>()));
  CHECK(run({.method = m::entropy}, a, 1).warnings.size() == 1);
  // pof2 MinMSE: histogram, raw (two passes), MostCommon.
  CHECK(*run({.method = m::pof2_minmse}, a, 7).pof2_position == ref["pof2"]["hist_a"].get<int>());
  CHECK(*run({.method = m::pof2_minmse, .num_bins = 0}, a, 7).pof2_position ==
        ref["pof2"]["raw_a"].get<int>());
  CHECK(*run({.method = m::pof2_minmse, .minmse_mode = quark::pof2_minmse_mode::most_common}, g, 7)
             .pof2_position == ref["pof2"]["most_common"].get<int>());
  // LayerwisePercentile scored on the tensor itself.
  r = run({.method = m::layerwise_percentile}, a, 7);
  CHECK(
      r.max ==
      static_cast<float>(
          ref["lwp"]["candidates"][ref["lwp"]["best"]["mae"].get<std::size_t>()][1].get<double>()));
  // Distribution.
  quark::tensor_calibrator d{{.method = m::distribution}};
  d.observe(a);
  CHECK(d.distribution().std_dev ==
        doctest::Approx(ref["distribution"]["same"][1].get<double>()).epsilon(1e-12));
  // NonOverflow: the position follows the range, and to_qparams agrees with it.
  r = run({.method = m::pof2_non_overflow}, a, 7);
  CHECK(r.origin == quark::scale_origin::range);
  const auto p =
      quark::to_qparams<std::int8_t, quark::pow2_scale>(r, {.sym = quark::symmetry::symmetric});
  CHECK(p.scale.position() == *quark::pof2_non_overflow_calibrator{.grid = {-127, 127}}([&] {
                                 quark::minmax_observer o;
                                 o.observe(a);
                                 return o.stats();
                               }())
                                   .pof2_position);
  // Moving average: documented EMA over the batches.
  r = run({.method = m::minmax, .average = quark::moving_average::on}, a, 7);
  CHECK(r.min > *std::min_element(a.begin(), a.end()));
}

TEST_CASE(
    "tensor_calibrator: merge of two halves equals one stream (min/max, equal-range histograms)") {
  const auto a = quark_test::data_a();
  std::span<const float> s(a);
  for (auto method : {quark::calib_method::minmax, quark::calib_method::pof2_minmse}) {
    quark::tensor_calibrator one{{.method = method}}, h1{{.method = method}},
        h2{{.method = method}};
    one.observe(s);
    h1.observe(s);  // same data twice vs two calibrators of the same data: same edges
    h2.observe(s);
    h1.merge(h2);
    one.observe(s);
    CHECK(h1.result().max == one.result().max);
    CHECK(h1.result().pof2_position == one.result().pof2_position);
  }
}

TEST_CASE("tensor_calibrator: bad input and misuse") {
  quark::tensor_calibrator cal{{.method = quark::calib_method::percentile}};
  try {
    static_cast<void>(cal.result());
    FAIL("expected an exception");
  } catch (const quark::invalid_argument& e) {
    CHECK(e.id() == "quark.calib.empty_input");
  }
  quark::tensor_calibrator lwp{{.method = quark::calib_method::layerwise_percentile}};
  std::vector<float> x{1.0f, 2.0f};
  lwp.observe(x);
  CHECK(lwp.needs_second_pass());
  CHECK_THROWS_AS(static_cast<void>(lwp.result()), quark::invalid_argument);
  CHECK_THROWS_AS(quark::tensor_calibrator({.method = quark::calib_method::pof2_minmse,
                                            .symmetry = quark::range_symmetry::asymmetric}),
                  quark::config_error);
  // Float-scale MinMSE searches a histogram: raw data (NumBins 0) is power-of-two MinMSE's.
  CHECK_THROWS_AS(
      quark::tensor_calibrator({.method = quark::calib_method::float_minmse, .num_bins = 0}),
      quark::config_error);
  // JSON of a searched result keeps its origin.
  quark::tensor_calibrator p2{{.method = quark::calib_method::pof2_minmse}};
  p2.observe(x);
  const nlohmann::json j = p2.result();
  CHECK(nlohmann::json::parse(j.dump()).get<quark::calibrated_range>().origin ==
        quark::scale_origin::searched);
}

TEST_CASE(
    "tensor_calibrator: all-equal, all-zero, single-value, NaN and Inf input for every method") {
  using m = quark::calib_method;
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> constant(100, 3.0f), zeros(100, 0.0f), single{-2.5f};
  std::vector<float> with_nan(50, 1.0f);
  with_nan[7] = nan;
  std::vector<float> with_inf(50, 1.0f);
  with_inf[3] = inf;
  for (auto method : {m::minmax, m::pof2_non_overflow, m::percentile, m::entropy, m::distribution,
                      m::layerwise_percentile, m::pof2_minmse}) {
    CAPTURE(static_cast<int>(method));
    for (const auto* data : {&constant, &zeros, &single}) {
      const auto r = run({.method = method}, *data, 1);
      CHECK(std::isfinite(r.min));
      CHECK(std::isfinite(r.max));
      CHECK(r.min <= r.max);
      // compute_qparams turns every such range into a usable scale.
      const auto p = quark::to_qparams<std::int8_t>(r, {.sym = quark::symmetry::symmetric});
      CHECK(p.scale_value() > 0.0f);
    }
    // A single NaN: ORT's MinMax propagates it (stable error); histograms skip it.
    if (method == m::minmax || method == m::pof2_non_overflow) {
      CHECK_THROWS_AS(static_cast<void>(run({.method = method}, with_nan, 1)),
                      quark::invalid_argument);
      const auto r = run({.method = method}, with_inf, 1);
      CHECK(std::isinf(r.max));  // passed through; compute_qparams clamps to FLT_MAX/2
    } else if (method == m::pof2_minmse) {
      CHECK(std::isfinite(run({.method = method}, with_nan, 1).max));  // nan_to_num
      // Inf -> FLT_MAX: the position is defined (about -121); 127 * 2^-pos may round to Inf in
      // float32, which compute_qparams clamps, while to_qparams keeps the searched position.
      CHECK(run({.method = method}, with_inf, 1).pof2_position.has_value());
    } else {
      CHECK(std::isfinite(run({.method = method}, with_nan, 1).max));
      try {
        static_cast<void>(run({.method = method}, with_inf, 1));
        FAIL("expected an exception");
      } catch (const quark::invalid_argument& e) {
        CHECK(e.id() == "quark.calib.infinite_input");
      }
    }
  }
}
