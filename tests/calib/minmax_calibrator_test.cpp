// SPDX-License-Identifier: MIT
#include <limits>
#include <vector>

#include <doctest/doctest.h>

#include <quark/calib/minmax_calibrator.hpp>
#include <quark/calib/mse_calibrator.hpp>
#include <quark/observer/json.hpp>
#include <quark/observer/minmax_observer.hpp>

#include "calib/reference_data.hpp"
#include "support/checks.hpp"

using quark::test::error_id;

static_assert(quark::default_range_symmetry(quark::calib_method::percentile) ==
              quark::range_symmetry::symmetric);
static_assert(quark::default_range_symmetry(quark::calib_method::minmax) ==
              quark::range_symmetry::asymmetric);
static_assert(quark::default_range_symmetry(quark::calib_method::pof2_minmse) ==
              quark::range_symmetry::symmetric);
static_assert(quark::default_range_symmetry(quark::calib_method::entropy) ==
              quark::range_symmetry::asymmetric);

TEST_CASE("minmax calibrator: range, CalibTensorRangeSymmetric and bad input") {
  quark::minmax_observer obs;
  std::vector<float> x{-0.5f, 2.0f, 1.0f};
  obs.observe(x);
  auto r = quark::minmax_calibrator{}(obs.stats());
  CHECK(r.min == -0.5f);
  CHECK(r.max == 2.0f);
  r = quark::minmax_calibrator{quark::range_symmetry::symmetric}(obs.stats());
  CHECK(r.min == -2.0f);
  CHECK(r.max == 2.0f);
  quark::minmax_observer empty;
  CHECK(error_id([&] { static_cast<void>(quark::minmax_calibrator{}(empty.stats())); }) ==
        "quark.calib.empty_input");
  std::vector<float> nans(3, std::numeric_limits<float>::quiet_NaN());
  quark::minmax_observer ign{quark::nan_policy::ignore};
  ign.observe(nans);
  CHECK(error_id([&] { static_cast<void>(quark::minmax_calibrator{}(ign.stats())); }) ==
        "quark.calib.all_nan");
  quark::minmax_observer prop;
  prop.observe(x);
  prop.observe(nans);
  CHECK(error_id([&] { static_cast<void>(quark::minmax_calibrator{}(prop.stats())); }) ==
        "quark.calib.nan_range");
  std::vector<float> same(5, 3.0f);
  quark::minmax_observer c;
  c.observe(same);
  r = quark::minmax_calibrator{}(c.stats());
  CHECK(r.min == 3.0f);  // compute_scale_zp later widens to [0, 3]
  std::vector<float> inf{1.0f, std::numeric_limits<float>::infinity()};
  quark::minmax_observer i;
  i.observe(inf);
  CHECK(
      std::isinf(quark::minmax_calibrator{}(i.stats()).max));  // passed through, clamped by qparams
  const nlohmann::json j = quark::minmax_calibrator{}(i.stats());
  CHECK(std::isinf(nlohmann::json::parse(j.dump()).get<quark::calibrated_range>().max));
}

TEST_CASE("float MinMSE: Percentile / HistCenter / All match the numpy reference") {
  const auto w = quark_test::data_w();
  const auto& ref = quark_test::reference()["float_minmse"];
  for (auto [name_, mode] : {std::pair{"Percentile", quark::minmse_float_mode::percentile},
                             std::pair{"HistCenter", quark::minmse_float_mode::hist_center},
                             std::pair{"All", quark::minmse_float_mode::all}}) {
    const char* name = name_;
    CAPTURE(name);
    const auto r = quark::float_minmse_calibrator{.mode = mode, .grid = {-127, 127}}(w);
    CHECK(r.min == static_cast<float>(ref[name][0].get<double>()));
    CHECK(r.max == static_cast<float>(ref[name][1].get<double>()));
    CHECK(*r.scale == static_cast<float>(ref[name][2].get<double>()));
    CHECK(*r.zero_point == ref[name][3].get<std::int64_t>());
  }
}

TEST_CASE("weight calibrator: MinMax default, MinMSE, bad input") {
  std::vector<float> w{-0.25f, 0.5f, 0.125f};
  auto r = quark::calibrate_weight(w, quark::weight_calibrate_method::minmax);
  CHECK(r.min == -0.25f);
  CHECK(r.max == 0.5f);
  r = quark::calibrate_weight({}, quark::weight_calibrate_method::minmax);
  CHECK(r.min == 0.0f);
  CHECK(r.max == 0.0f);
  r = quark::calibrate_weight(w, quark::weight_calibrate_method::minmse);
  CHECK(r.scale.has_value());
  std::vector<float> bad{1.0f, std::numeric_limits<float>::quiet_NaN()};
  CHECK(error_id([&] {
          static_cast<void>(quark::calibrate_weight(bad, quark::weight_calibrate_method::minmax));
        }) == "quark.calib.nan_range");
  CHECK(error_id([&] {
          static_cast<void>(quark::calibrate_weight(bad, quark::weight_calibrate_method::minmse));
        }) == "quark.calib.non_finite_input");
  CHECK(error_id([&] {
          static_cast<void>(quark::calibrate_weight({}, quark::weight_calibrate_method::minmse));
        }) == "quark.calib.empty_input");
  std::vector<float> same(10, 0.0f);
  r = quark::calibrate_weight(same, quark::weight_calibrate_method::minmse);
  CHECK(*r.scale == 1.0f);  // zero range: compute_scale_zp's scale 1
}
