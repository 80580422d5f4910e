// SPDX-License-Identifier: MIT
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include <doctest/doctest.h>

#include <quark/calib/distribution_calibrator.hpp>
#include <quark/calib/mse_calibrator.hpp>
#include <quark/calib/percentile_calibrator.hpp>
#include <quark/calib/pof2_calibrator.hpp>
#include <quark/calib/to_qparams.hpp>
#include <quark/dtype/formats.hpp>
#include <quark/observer/histogram_observer.hpp>
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

TEST_CASE("fq_errors: x - fq(x) of each value, equal to quant/fake_quant's") {
  // The MinMSE searches' error kernel (8 lanes where it vectorises, the scalar formula on a tail
  // and on grids over 2^24 wide) against the independent per-tensor fake quantizer, on normal
  // data with outliers, values on and between grid steps, +-0, +-Inf and NaN (taken through
  // nan_to_num first), for power-of-two scales around the data's and float scales between them
  // (the float MinMSE windows), zero points inside the grid and lengths that leave a tail.
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
  auto run = [&]<class T>(const grid_case g, int pos, float factor) {
    const float s = std::ldexp(1.0f, -pos) * factor;
    const quark::fake_quant<T> fq(s, static_cast<T>(g.zp), g.qmin, g.qmax);
    for (std::size_t m : {x.size(), std::size_t{7}, std::size_t{9}}) {
      std::vector<double> err(m);
      quark::detail::fq_errors(x.data(), m, s, static_cast<float>(g.zp), static_cast<float>(g.qmin),
                               static_cast<float>(g.qmax), err.data());
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
    for (const float factor : {1.0f, 0.7312189f, 1.3f, 1.0000001f}) {
      run.template operator()<std::int8_t>({-127, 127, 0}, pos, factor);
      run.template operator()<std::int8_t>({-128, 127, -109}, pos, factor);
      run.template operator()<std::uint8_t>({0, 255, 128}, pos, factor);
      run.template operator()<std::uint8_t>({0, 255, 3}, pos, factor);
      run.template operator()<std::int16_t>({-32767, 32767, 0}, pos, factor);
      run.template operator()<std::int32_t>({-2147483647, 2147483647, 0}, pos,
                                            factor);  // scalar path
    }
  }
  CHECK(compared == 15 * 4 * 6 * (x.size() + 16));
  CHECK(mismatches == 0);
}

TEST_CASE("fq_mse: the mean of one sequential loop's squared errors, bit for bit") {
  // The float MinMSE error (blocks of fq_errors, then the squares summed in element order)
  // against the plain loop over the independent per-tensor fake quantizer, for lengths around
  // the block of 256 and float scales on the grids the weight searches use.
  std::vector<float> all = quark_test::lcg_data(2000, 29, 0.8, 0.0);
  for (float v : {0.0f, -0.0f, 40.0f, -40.0f, 0.375f, std::numeric_limits<float>::denorm_min()})
    all.push_back(v);
  std::size_t mismatches = 0, compared = 0;
  auto run = [&]<class T>(std::int64_t qmin, std::int64_t qmax, std::int64_t zp, float s) {
    const quark::fake_quant<T> fq(s, static_cast<T>(zp), qmin, qmax);
    for (const std::size_t n : {std::size_t{1}, std::size_t{7}, std::size_t{255}, std::size_t{256},
                                std::size_t{257}, std::size_t{513}, all.size()}) {
      const std::span<const float> x(all.data() + (all.size() - n), n);
      double acc = 0.0;
      for (const float v : x) {
        const double d = static_cast<double>(fq(v)) - static_cast<double>(v);
        acc += d * d;
      }
      const double want = acc / static_cast<double>(n);
      const double got = quark::detail::fq_mse(x, s, static_cast<float>(zp),
                                               static_cast<float>(qmin), static_cast<float>(qmax));
      mismatches +=
          std::bit_cast<std::uint64_t>(got) == std::bit_cast<std::uint64_t>(want) ? 0u : 1u;
      ++compared;
    }
  };
  for (const float s : {0.0031f, 0.0173f, 0.125f, 0.31f, 2.7f}) {
    run.template operator()<std::int8_t>(-127, 127, 0, s);
    run.template operator()<std::int8_t>(-128, 127, 5, s);
    run.template operator()<std::uint8_t>(0, 255, 131, s);
    run.template operator()<std::int16_t>(-32767, 32767, 0, s);
  }
  CHECK(compared == 5 * 4 * 7);
  CHECK(mismatches == 0);
}

TEST_CASE("hist_center_error: one plain loop over the bins, bit for bit") {
  // HistCenter's count-weighted error of the float32 bin centres against the plain loop over
  // the independent fake quantizer, on histograms of 2048, 257 and 3 bins and one whose range
  // grew (appended bins), for float scales on int8 / uint8 grids.
  std::vector<quark::histogram_data> hists;
  for (const std::size_t bins : {std::size_t{2048}, std::size_t{257}, std::size_t{3}}) {
    quark::histogram_observer h{{.mode = quark::histogram_mode::signed_extend, .num_bins = bins}};
    h.observe(quark_test::lcg_data(5000, 31, 1.1, 0.2));
    hists.push_back(h.stats());
    if (bins == 2048) {
      h.observe(quark_test::lcg_data(500, 37, 6.0, 0.0));  // grows the range
      hists.push_back(h.stats());
    }
  }
  std::size_t mismatches = 0, compared = 0;
  auto run = [&]<class T>(const quark::histogram_data& d, std::int64_t qmin, std::int64_t qmax,
                          std::int64_t zp, float s) {
    const quark::fake_quant<T> fq(s, static_cast<T>(zp), qmin, qmax);
    double acc = 0.0;
    for (std::size_t i = 0; i < d.counts.size(); ++i) {
      const auto c = static_cast<float>((d.edges[i] + d.edges[i + 1]) / 2.0);
      const double e = static_cast<double>(fq(c)) - static_cast<double>(c);
      acc += static_cast<double>(d.counts[i]) * e * e;
    }
    const double want = acc / static_cast<double>(d.counts.size());
    const double got = quark::detail::hist_center_error(
        d, s, static_cast<float>(zp), static_cast<float>(qmin), static_cast<float>(qmax));
    const double got_once = quark::detail::hist_center_error(
        d, quark::detail::float_bin_centres(d.edges), s, static_cast<float>(zp),
        static_cast<float>(qmin), static_cast<float>(qmax));
    mismatches += std::bit_cast<std::uint64_t>(got) == std::bit_cast<std::uint64_t>(want) ? 0u : 1u;
    mismatches +=
        std::bit_cast<std::uint64_t>(got_once) == std::bit_cast<std::uint64_t>(want) ? 0u : 1u;
    compared += 2;
  };
  for (const quark::histogram_data& d : hists) {
    for (const float s : {0.0047f, 0.021f, 0.09f, 1.7f}) {
      run.template operator()<std::int8_t>(d, -127, 127, 0, s);
      run.template operator()<std::uint8_t>(d, 0, 255, 117, s);
    }
  }
  CHECK(hists.front().counts.size() < hists[1].counts.size());
  CHECK(compared == 4 * 4 * 2 * 2);
  CHECK(mismatches == 0);
  // The whole HistCenter search (centres computed once) chooses what the plain loop chooses.
  for (const quark::histogram_data& d : hists) {
    for (const quark::int_grid g : {quark::int_grid{-127, 127}, quark::int_grid{0, 255}}) {
      const auto sym =
          g.qmin == 0 ? quark::range_symmetry::asymmetric : quark::range_symmetry::symmetric;
      const quark::calibrated_range got = quark::detail::hist_center_windows(d, g, sym);
      const quark::calibrated_range want = quark::detail::minmse_windows(
          d, g, sym, [](const quark::histogram_data& h, float s, float zp, float qmin, float qmax) {
            double acc = 0.0;
            for (std::size_t i = 0; i < h.counts.size(); ++i) {
              const auto c = static_cast<float>((h.edges[i] + h.edges[i + 1]) / 2.0);
              float q = std::nearbyint(c / s) + zp;
              q = std::clamp(q, qmin, qmax);
              const double e = static_cast<double>((q - zp) * s) - static_cast<double>(c);
              acc += static_cast<double>(h.counts[i]) * e * e;
            }
            return acc / static_cast<double>(h.counts.size());
          });
      REQUIRE(got.scale.has_value());
      REQUIRE(want.scale.has_value());
      CHECK(*got.scale == *want.scale);
      CHECK(got.zero_point == want.zero_point);
      CHECK(got.min == want.min);
      CHECK(got.max == want.max);
    }
  }
}
