// SPDX-License-Identifier: MIT
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include <doctest/doctest.h>

#include <quark/calib/distribution_calibrator.hpp>
#include <quark/calib/mse_calibrator.hpp>
#include <quark/calib/percentile_calibrator.hpp>
#include <quark/calib/pof2_calibrator.hpp>
#include <quark/calib/to_qparams.hpp>
#include <quark/dtype/formats.hpp>
#include <quark/quant/fake_quant.hpp>

#include "calib/reference_data.hpp"

static_assert(quark::grid_of<std::int8_t>(quark::range_table::symmetric) ==
              quark::int_grid{-127, 127});
static_assert(quark::grid_of<std::uint8_t>(quark::range_table::symmetric) ==
              quark::int_grid{0, 255});
static_assert(quark::grid_of<std::int16_t>(quark::range_table::full) ==
              quark::int_grid{-32768, 32767});

TEST_CASE("the calibrators' private grid helpers agree with compute_qparams and fake_quant") {
  const auto a = quark_test::lcg_data(400, 5, 3.0, 0.7);
  for (std::size_t i = 0; i + 1 < a.size(); i += 2) {
    const float lo = std::fmin(a[i], a[i + 1]);
    const float hi = std::fmax(a[i], a[i + 1]);
    // Symmetric INT8 / UINT8 / INT16: identical scale and zero point.
    {
      const auto g = quark::detail::scale_zp(static_cast<double>(lo), static_cast<double>(hi),
                                             {-127, 127}, quark::range_symmetry::symmetric);
      const auto p =
          quark::compute_qparams<std::int8_t>({lo, hi}, {.sym = quark::symmetry::symmetric});
      CHECK(static_cast<float>(g.scale) == p.scale_value());
      CHECK(g.zero_point == p.zero_point);
    }
    {
      const auto g = quark::detail::scale_zp(static_cast<double>(lo), static_cast<double>(hi),
                                             {0, 255}, quark::range_symmetry::symmetric);
      const auto p =
          quark::compute_qparams<std::uint8_t>({lo, hi}, {.sym = quark::symmetry::symmetric});
      CHECK(static_cast<float>(g.scale) == p.scale_value());
      CHECK(g.zero_point == p.zero_point);
    }
    // Asymmetric UINT8 and INT16.
    {
      const auto g = quark::detail::scale_zp(static_cast<double>(lo), static_cast<double>(hi),
                                             {0, 255}, quark::range_symmetry::asymmetric);
      const auto p = quark::compute_qparams<std::uint8_t>({lo, hi});
      CHECK(static_cast<float>(g.scale) == p.scale_value());
      CHECK(g.zero_point == p.zero_point);
    }
    {
      const auto g = quark::detail::scale_zp(static_cast<double>(lo), static_cast<double>(hi),
                                             {-32768, 32767}, quark::range_symmetry::asymmetric);
      const auto p = quark::compute_qparams<std::int16_t>({lo, hi});
      CHECK(static_cast<float>(g.scale) == p.scale_value());
      CHECK(g.zero_point == p.zero_point);
    }
    // Fake quantization on the grid: bit-identical to quant/fake_quant.hpp.
    const auto p =
        quark::compute_qparams<std::int8_t>({lo, hi}, {.sym = quark::symmetry::symmetric});
    const quark::fake_quant<std::int8_t> fq(p.scale_value(), 0, -127, 127);
    for (float x : {a[i], a[i + 1], a[i] * 0.5f, 1e6f, -1e6f, p.scale_value() * 2.5f,
                    p.scale_value() * -3.5f}) {
      CHECK(std::bit_cast<std::uint32_t>(quark::detail::fake_quant(
                x, p.scale_value(), 0.0f, -127.0f, 127.0f)) == std::bit_cast<std::uint32_t>(fq(x)));
    }
  }
}

TEST_CASE("to_qparams: searched scales are kept, ranges go through compute_qparams") {
  const auto g = quark_test::data_grow();
  // pof2 MinMSE -> power-of-two and float scales both equal 2^-position.
  quark::histogram_observer h{{.mode = quark::histogram_mode::signed_extend,
                               .num_bins = 2048,
                               .non_finite = quark::non_finite_policy::to_finite}};
  h.observe(g);
  const auto r = quark::pof2_minmse_calibrator{
      .grid = quark::grid_of<std::int8_t>(quark::range_table::symmetric)}(h.stats());
  const auto p2 =
      quark::to_qparams<std::int8_t, quark::pow2_scale>(r, {.sym = quark::symmetry::symmetric});
  CHECK(p2.scale.position() == *r.pof2_position);
  const auto pf = quark::to_qparams<std::int8_t>(r, {.sym = quark::symmetry::symmetric});
  CHECK(pf.scale_value() == std::ldexp(1.0f, -*r.pof2_position));
  CHECK(pf.zero_point == 0);
  // Float MinMSE -> the chosen float scale and zero point.
  const auto w = quark_test::data_w();
  const auto rm = quark::float_minmse_calibrator{.mode = quark::minmse_float_mode::all}(w);
  const auto pm = quark::to_qparams<std::int8_t>(
      rm, {.sym = quark::symmetry::symmetric, .clip = quark::clip_rule::quark_weight});
  CHECK(pm.scale_value() == *rm.scale);
  CHECK(pm.qmin == -127);
  // Percentile -> UINT8 asymmetric through compute_qparams.
  quark::histogram_observer ha{{.mode = quark::histogram_mode::absolute}};
  ha.observe(g);
  const auto rp = quark::percentile_calibrator{}(ha.stats());
  const auto pu = quark::to_qparams<std::uint8_t>(rp);
  CHECK(pu.scale_value() == quark::compute_qparams<std::uint8_t>({rp.min, rp.max}).scale_value());
  // Distribution -> FP8 scale = std / 100.0577...
  quark::histogram_observer hs{{.mode = quark::histogram_mode::signed_symmetric, .num_bins = 2048}};
  hs.observe(g);
  const auto d = quark::distribution_calibrator{}(hs.stats());
  const auto p8 = quark::to_qparams<quark::float8_e4m3fn>(d);
  CHECK(p8.scale_value() == doctest::Approx(d.std_dev / 100.0577).epsilon(1e-5));
  // NaN range -> compute_qparams' stable error.
  quark::calibrated_range bad;
  bad.min = std::numeric_limits<float>::quiet_NaN();
  CHECK_THROWS_AS(static_cast<void>(quark::to_qparams<std::int8_t>(bad)), quark::invalid_argument);
}

TEST_CASE("round_even: round half to even, as nearbyint in the default rounding mode") {
  // Every 1021st float bit pattern (both signs, every binade, subnormals, +-Inf, NaNs), and the
  // halves k + 0.5 around zero, in float and in double; the oracle is the FP environment's
  // round-to-nearest-even, which the tests run in.
  std::size_t checked = 0;
  auto same = [&checked](auto v) {
    const auto r = quark::detail::round_even(v);
    const auto want = std::nearbyint(v);
    ++checked;
    return std::isnan(want) ? std::isnan(r) : std::bit_cast<decltype(r)>(r) == want;
  };
  bool all = true;
  for (std::uint64_t b = 0; b <= 0xFFFFFFFFu; b += 1021) {
    const float v = std::bit_cast<float>(static_cast<std::uint32_t>(b));
    all = all && same(v) && same(static_cast<double>(v));
  }
  for (int k = -300000; k <= 300000; ++k) {
    const double h = static_cast<double>(k) + 0.5;
    all = all && same(static_cast<float>(h)) && same(h) && same(std::nextafter(h, 0.0)) &&
          same(std::nextafter(static_cast<float>(h), 0.0f));
  }
  CHECK(all);
  CHECK(checked > 10'000'000);
  CHECK(quark::detail::round_even(2.5f) == 2.0f);
  CHECK(quark::detail::round_even(-3.5) == -4.0);
  CHECK(quark::detail::round_even(-0.5f) == 0.0f);
  CHECK(quark::detail::round_even(0x1.fffffep22f) == 0x1p23f);  // 8388607.5: to the even 2^23
}

TEST_CASE("pof2_errors: x - fq(x) of each value, equal to quant/fake_quant's") {
  // The power-of-two searches' error kernel (8 lanes where it vectorises, the scalar formula on
  // a tail and on grids over 2^24 wide) against the independent per-tensor fake quantizer, on
  // normal data with outliers, values on and between grid steps, +-0, +-Inf and NaN (taken
  // through nan_to_num first), for scales around the data's, zero points inside the grid and
  // lengths that leave a tail.
  std::vector<float> x = quark_test::lcg_data(1003, 11, 0.4, 0.0);
  for (float v :
       {0.0f, -0.0f, 1e30f, -1e30f, 0.375f, -0.375f, 0.125f, -0.625f, 3.0e38f,
        std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
        std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::denorm_min()})
    x.push_back(v);
  struct grid_case {
    std::int64_t qmin, qmax, zp;
  };
  std::size_t mismatches = 0, compared = 0;
  auto run = [&]<class T>(const grid_case g, int pos) {
    const float s = std::ldexp(1.0f, -pos);
    const quark::fake_quant<T> fq(s, static_cast<T>(g.zp), g.qmin, g.qmax);
    for (std::size_t m : {x.size(), std::size_t{7}, std::size_t{9}}) {
      std::vector<double> err(m);
      quark::detail::pof2_errors(x.data(), m, s, static_cast<float>(g.zp),
                                 static_cast<float>(g.qmin), static_cast<float>(g.qmax),
                                 err.data());
      for (std::size_t k = 0; k < m; ++k) {
        const float v = quark::detail::to_finite(x[k]);
        const double want = static_cast<double>(v) - static_cast<double>(fq(v));
        mismatches +=
            std::bit_cast<std::uint64_t>(err[k]) == std::bit_cast<std::uint64_t>(want) ? 0u : 1u;
        ++compared;
      }
    }
  };
  for (int pos = -2; pos <= 12; ++pos) {
    run.template operator()<std::int8_t>({-127, 127, 0}, pos);
    run.template operator()<std::int8_t>({-128, 127, -109}, pos);
    run.template operator()<std::uint8_t>({0, 255, 128}, pos);
    run.template operator()<std::uint8_t>({0, 255, 3}, pos);
    run.template operator()<std::int16_t>({-32767, 32767, 0}, pos);
    run.template operator()<std::int32_t>({-2147483647, 2147483647, 0}, pos);  // scalar path
  }
  CHECK(compared == 15 * 6 * (x.size() + 16));
  CHECK(mismatches == 0);
}
