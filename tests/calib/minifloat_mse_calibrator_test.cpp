// SPDX-License-Identifier: MIT
// quark::minifloat_minmse_calibrator (MinMSE on FP8 / FP6 / FP4 specs) against an oracle written
// here: every candidate the method defines (the HistCenter windows, or the five powers of two) is
// scored with the slow reference encoder of tests/support/reference.hpp (round half to even,
// saturating: ONNX QuantizeLinear -> DequantizeLinear, x / s in float32), and the first minimum
// must be what the calibrator chose. Also: the chosen error is never above the min/max scale's,
// an outlier is clipped where the format is coarse (FP4), the returned range reproduces the
// scale through compute_qparams, the span form equals the histogram form, and bad input throws.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include <doctest/doctest.h>

#include <quark/calib/minifloat_mse_calibrator.hpp>
#include <quark/core/error.hpp>
#include <quark/dtype/formats.hpp>
#include <quark/observer/histogram_observer.hpp>
#include <quark/scale/qparams.hpp>

#include "support/checks.hpp"
#include "support/reference.hpp"

namespace ref = quark::test::ref;
using quark::test::error_id;

namespace {

/// dequantize(quantize(x)) for scale s by the reference encoder: x / s in float32, rounded to the
/// format (nearest even, saturating), decoded, times s in float32.
float ref_fq(const ref::format_def& f, float x, float s) {
  const float q = x / s;
  const std::uint32_t code =
      ref::encode(f, q,
                  quark::conversion_policy{.round = quark::rounding::nearest_even,
                                           .on_overflow = quark::overflow::saturate});
  return static_cast<float>(ref::decode(f, code).v) * s;
}

double ref_error(const ref::format_def& f, const quark::histogram_data& h, float s) {
  double err = 0.0;
  for (std::size_t i = 0; i < h.counts.size(); ++i) {
    const auto c = static_cast<float>((h.edges[i] + h.edges[i + 1]) / 2.0);
    const double e = static_cast<double>(ref_fq(f, c, s)) - static_cast<double>(c);
    err += static_cast<double>(h.counts[i]) * e * e;
  }
  return err;
}

/// The largest finite value of the format, from the reference decoder.
double ref_max(const ref::format_def& f) {
  double m = 0.0;
  for (std::uint32_t code = 0; code < (1u << f.bits()); ++code) {
    const ref::value v = ref::decode(f, code);
    if (v.kind == ref::value::number)
      m = std::fmax(m, v.v);
  }
  return m;
}

struct choice {
  float scale = 0.0f;
  double err = 0.0;
  std::size_t index = 0;
};

/// The windows of the method, scored by the reference: k = B/2 .. B-1, window of the bin centres
/// [left, right] with left = floor((B - k) / 2), right = min(floor(B - (B - k) / 2), B - 1),
/// scale = max(|c_left|, |c_right|) / largest value (double, then float).
choice ref_windows(const ref::format_def& f, const quark::histogram_data& h) {
  const std::size_t n = h.counts.size();
  choice best{0.0f, std::numeric_limits<double>::infinity(), 0};
  for (std::size_t k = n / 2; k < n; ++k) {
    const double half = static_cast<double>(n - k) / 2.0;
    const auto left = static_cast<std::size_t>(half);
    const std::size_t right =
        std::min(static_cast<std::size_t>(static_cast<double>(n) - half), n - 1);
    const auto lo =
        static_cast<double>(static_cast<float>((h.edges[left] + h.edges[left + 1]) / 2));
    const auto hi =
        static_cast<double>(static_cast<float>((h.edges[right] + h.edges[right + 1]) / 2));
    const auto s = static_cast<float>(std::fmax(std::fabs(lo), std::fabs(hi)) / ref_max(f));
    const double e = ref_error(f, h, s);
    if (e < best.err)
      best = {s, e, k};
  }
  return best;
}

/// The five powers of two around the min/max position, scored by the reference.
choice ref_pof2(const ref::format_def& f, const quark::histogram_data& h) {
  const double amax = std::fmax(std::fabs(h.edges.front()), std::fabs(h.edges.back()));
  const int pos = static_cast<int>(std::nearbyint(-std::log2(amax / ref_max(f))));
  choice best{0.0f, std::numeric_limits<double>::infinity(), 0};
  for (int i = 0; i < 5; ++i) {
    const float s = std::ldexp(1.0f, -(pos + i - 1));
    const double e = ref_error(f, h, s);
    if (e < best.err)
      best = {s, e, static_cast<std::size_t>(i)};
  }
  return best;
}

/// A histogram of 64 bins over [-8, 8): most counts near 0 (a bell), one count in the last bin.
quark::histogram_data bell_with_outlier() {
  quark::histogram_data h;
  h.mode = quark::histogram_mode::signed_extend;
  for (int i = 0; i <= 64; ++i)
    h.edges.push_back(-8.0 + 0.25 * i);
  for (int i = 0; i < 64; ++i) {
    const double c = -8.0 + 0.25 * (i + 0.5);
    h.counts.push_back(static_cast<std::uint64_t>(std::floor(1000.0 * std::exp(-c * c / 2.0))));
  }
  h.counts.back() = 1;
  return h;
}

template <class D>
void check_windows(const ref::format_def& f, const quark::histogram_data& h) {
  CAPTURE(f.name);
  const quark::calibrated_range r = quark::minifloat_minmse_calibrator<D>{}(h);
  const choice want = ref_windows(f, h);
  REQUIRE(r.scale.has_value());
  CHECK(*r.scale == want.scale);
  CHECK(r.origin == quark::scale_origin::searched);
  CHECK(r.zero_point == std::int64_t{0});
  // Never worse than the min/max scale (the widest window is among the candidates).
  const auto minmax_s = static_cast<float>(8.0 / ref_max(f));
  CHECK(ref_error(f, h, *r.scale) <= ref_error(f, h, minmax_s));
  // The range gives the same scale back.
  CHECK(quark::compute_qparams<D>(quark::value_range{r.min, r.max}).scale.value == *r.scale);
}

}  // namespace

TEST_CASE("minifloat MinMSE, Float32 scale: the reference's first minimum over the windows") {
  const quark::histogram_data h = bell_with_outlier();
  check_windows<quark::float8_e4m3fn>(ref::float8_e4m3fn, h);
  check_windows<quark::float8_e5m2>(ref::float8_e5m2, h);
  check_windows<quark::float6_e2m3fn>(ref::float6_e2m3fn, h);
  check_windows<quark::float4_e2m1fn>(ref::float4_e2m1fn, h);
  // FP4 (largest value 6, three steps above 2) gives the outlier up: its window is narrower
  // than the full range, and its error is strictly below the min/max scale's.
  const quark::calibrated_range r4 = quark::minifloat_minmse_calibrator<quark::float4_e2m1fn>{}(h);
  CHECK(*r4.scale < static_cast<float>(8.0 / 6.0));
  CHECK(ref_error(ref::float4_e2m1fn, h, *r4.scale) <
        ref_error(ref::float4_e2m1fn, h, static_cast<float>(8.0 / 6.0)));
  MESSAGE(
      "FP4 window scale " << *r4.scale << " (min/max " << 8.0 / 6.0 << "), E4M3FN "
                          << *quark::minifloat_minmse_calibrator<quark::float8_e4m3fn>{}(h).scale);
}

TEST_CASE("minifloat MinMSE, PowerOf2 scale: the reference's first minimum of five powers of two") {
  const quark::histogram_data h = bell_with_outlier();
  auto check = [&](auto tag, const ref::format_def& f) {
    using D = decltype(tag);
    CAPTURE(f.name);
    const quark::calibrated_range r =
        quark::minifloat_minmse_calibrator<D>{.power_of_two = true}(h);
    const choice want = ref_pof2(f, h);
    REQUIRE(r.scale.has_value());
    CHECK(*r.scale == want.scale);
    REQUIRE(r.pof2_position.has_value());
    CHECK(std::ldexp(1.0f, -*r.pof2_position) == *r.scale);
    CHECK(quark::compute_qparams<D>(quark::value_range{r.min, r.max}).scale.value == *r.scale);
  };
  check(quark::float8_e4m3fn{}, ref::float8_e4m3fn);
  check(quark::float8_e5m2{}, ref::float8_e5m2);
  check(quark::float6_e3m2fn{}, ref::float6_e3m2fn);
  check(quark::float4_e2m1fn{}, ref::float4_e2m1fn);
  // By hand for E4M3FN: amax 8 -> 8 / 448 = 2^-5.807 -> position 6; candidates 2^-5 .. 2^-9.
  // 2^-5 and 2^-6 hold 8 (8 / 2^-6 = 512 saturates to 448 = 7 * 2^-6 ... 7); with 3 mantissa
  // bits the error of the bell is relative, so the largest scale that does not clip the outlier
  // (2^-5: 8 / 2^-5 = 256, exact) wins over 2^-6, which clips it to 7.
  const auto r8 = quark::minifloat_minmse_calibrator<quark::float8_e4m3fn>{.power_of_two = true}(h);
  CHECK(*r8.pof2_position == 5);
}

TEST_CASE("minifloat MinMSE: a tensor in memory is its histogram's search") {
  std::vector<float> w;
  for (int i = 0; i < 4096; ++i)
    w.push_back(static_cast<float>(std::sin(0.37 * i) * std::exp(0.001 * i)));
  w[17] = 40.0f;  // an outlier
  quark::histogram_observer obs{{.mode = quark::histogram_mode::signed_extend, .num_bins = 512}};
  obs.observe(w);
  for (const bool pof2 : {false, true}) {
    const quark::minifloat_minmse_calibrator<quark::float4_e2m1fn> cal{.power_of_two = pof2};
    const quark::calibrated_range a = cal(w, 512);
    const quark::calibrated_range b = cal(obs.stats());
    CHECK(*a.scale == *b.scale);
    CHECK(a.min == b.min);
    CHECK(a.max == b.max);
  }
}

TEST_CASE("minifloat MinMSE: bad input") {
  const quark::minifloat_minmse_calibrator<quark::float8_e4m3fn> cal;
  CHECK(error_id([&] { (void)cal(quark::histogram_data{}); }) == "quark.calib.empty_input");
  CHECK(error_id([&] { (void)cal(std::span<const float>{}); }) == "quark.calib.empty_input");
  const float bad[] = {1.0f, std::numeric_limits<float>::quiet_NaN()};
  CHECK(error_id([&] { (void)cal(std::span<const float>(bad)); }) ==
        "quark.calib.non_finite_input");
  const float inf[] = {1.0f, std::numeric_limits<float>::infinity()};
  CHECK(error_id([&] { (void)cal(std::span<const float>(inf)); }) ==
        "quark.calib.non_finite_input");
  // An all-zero tensor: numpy's histogram of [0, 0] spans [-0.5, 0.5], every candidate is
  // exact on the zeros, so the first window's positive finite scale is kept.
  const float zeros[] = {0.0f, 0.0f, 0.0f};
  const quark::calibrated_range z = cal(std::span<const float>(zeros));
  REQUIRE(z.scale.has_value());
  CHECK(*z.scale > 0.0f);
  CHECK(std::isfinite(*z.scale));
}
