// SPDX-License-Identifier: MIT
// quark::smooth_quant_* against hand-derived factors and against numpy written from quark-spec
// §10.2 (tests/algo/data/gen_smooth_quant_reference.py: the maxima of two batches bit for bit,
// the factors for three alphas within the float32 roundings of Quark's arithmetic), the
// channels kept at 1, and the argument checks.
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <utility>
#include <vector>

#include <doctest/doctest.h>

#include <quark/algo/smooth_quant.hpp>

#include "support/checks.hpp"

using quark::test::error_id;

namespace {

std::vector<float> from_bits(std::span<const std::uint32_t> b) {
  std::vector<float> out;
  for (const std::uint32_t v : b)
    out.push_back(std::bit_cast<float>(v));
  return out;
}

std::vector<std::uint32_t> to_bits(std::span<const float> f) {
  std::vector<std::uint32_t> out;
  for (const float v : f)
    out.push_back(std::bit_cast<std::uint32_t>(v));
  return out;
}

}  // namespace

TEST_CASE("smooth_quant: factors by hand") {
  // amax (4, 1, 9), row maxima of W (1, 4, 1); alpha 0.5: s = sqrt(a) / sqrt(w):
  // 2 / 1 = 2, 1 / 2 = 0.5, 3 / 1 = 3 (the 1e-9 guards vanish below half an ulp of these).
  const std::vector<float> amax{4.0f, 1.0f, 9.0f};
  const std::vector<float> w{1.0f, -0.5f, 0.25f, -4.0f, 0.0f, 1.0f};  // 3 x 2
  std::vector<float> s(3), inv(3);
  CHECK(quark::smooth_quant_factors(amax, w, 2, 0.5, s, inv) == 0);
  CHECK(s == std::vector<float>{2.0f, 0.5f, 3.0f});
  CHECK(inv[0] == 0.5f);
  CHECK(inv[1] == 2.0f);
  CHECK(inv[2] == 1.0f / 3.0f);
  // alpha 1: s = a (every bit of the range moves into the weight); alpha 0: s = 1 / w.
  CHECK(quark::smooth_quant_factors(amax, w, 2, 1.0, s, inv) == 0);
  CHECK(s == amax);
  CHECK(quark::smooth_quant_factors(amax, w, 2, 0.0, s, inv) == 0);
  CHECK(s == std::vector<float>{1.0f, 0.25f, 1.0f});
  std::vector<float> ws = w;
  quark::smooth_quant_scale_rows(ws, 2, std::vector<float>{2.0f, 0.5f, 3.0f});
  CHECK(ws == std::vector<float>{2.0f, -1.0f, 0.125f, -2.0f, 0.0f, 3.0f});
}

TEST_CASE("smooth_quant: running maxima ignore NaN, keep Inf and the sign") {
  std::vector<float> amax(3, 0.0f);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  quark::smooth_quant_observe(std::vector<float>{-2.0f, nan, 0.5f, 1.0f, 3.0f, -0.75f}, 3, amax);
  CHECK(amax == std::vector<float>{2.0f, 3.0f, 0.75f});
  quark::smooth_quant_observe(std::vector<float>{1.0f, 1.0f, -inf}, 3, amax);
  CHECK(amax[0] == 2.0f);
  CHECK(amax[1] == 3.0f);
  CHECK(amax[2] == inf);
}

TEST_CASE("smooth_quant: channels without a usable statistic keep s = 1") {
  const float inf = std::numeric_limits<float>::infinity();
  // Channel 0 never nonzero, channel 1 infinite, channel 2 an all-zero weight row, channel 3
  // regular (sqrt(16) / sqrt(4) = 2).
  const std::vector<float> amax{0.0f, inf, 5.0f, 16.0f};
  const std::vector<float> w{1.0f, 1.0f, 0.0f, 4.0f};  // 4 x 1
  std::vector<float> s(4), inv(4);
  CHECK(quark::smooth_quant_factors(amax, w, 1, 0.5, s, inv) == 3);
  CHECK(s == std::vector<float>{1.0f, 1.0f, 1.0f, 2.0f});
  CHECK(inv == std::vector<float>{1.0f, 1.0f, 1.0f, 0.5f});
}

TEST_CASE("smooth_quant: numpy reference, maxima bit for bit, factors to the float32 roundings") {
  // tests/algo/data/gen_smooth_quant_reference.py
  constexpr std::size_t k = 6, n = 5;
  const std::vector<std::uint32_t> x_bits{
      0x3ea2e3ff, 0xc08b6572, 0xbf0a9ef7, 0x3bcbee47, 0xc103a88c, 0x3f72bbba, 0x3f28dca1,
      0xbf7afb3c, 0xbf81bcde, 0x3d444d96, 0x408cb712, 0x40a18ba1, 0xbf353394, 0x40e25324,
      0xbf184e3f, 0xbc181709, 0x41512426, 0xbf8cb0ac, 0xbeb15d21, 0x400d9052, 0xbf3c7b98,
      0x3c9e4a83, 0xc1ce1bc8, 0x40803a42, 0xbf233e3a, 0x41571358, 0x3c870d2d, 0xbb2817e8,
      0x417684f4, 0x3fa25944, 0xbef565ee, 0x40ff6c58, 0x400420df, 0x3c712faa, 0x42063187,
      0xc09848b7, 0xbf5d5d79, 0xc020440e, 0xbfa59108, 0xbc888672, 0x40d10e80, 0xc01722f3,
      0xbeef5585, 0xc0b71fac, 0x3fddec18, 0x3bf5042e, 0xc1e27460, 0x3f82fc24, 0xbea9e09e,
      0xbea5b7bd, 0x3f80c47e, 0x3c77303c, 0xc0d59b92, 0x3f196541, 0xbe77b8c0, 0x40facbe6,
      0xbf82e04b, 0xbd4f91c4, 0xc12b1f4b, 0x3fa5385c, 0xbeddfd60, 0x416e50dc, 0x3f00bab6,
      0xbc6cf1b4, 0xc16146cf, 0x4004884c, 0x3ec547f0, 0xc08d3c4b, 0x3e87805e, 0x3c326473,
      0x4057acf8, 0x4043d67d, 0xbf1204d8, 0xc0f89640, 0x3f7f2988, 0xbcaf8d78, 0x413955fe,
      0x403e811d, 0x3f065bbe, 0x40837954, 0x3f7b9921, 0xbcd6f57f, 0x400a0bc3, 0xbee780f9};
  const std::vector<std::uint32_t> w_bits{
      0x3eb18a51, 0x3f0b8e3b, 0x3f1e0c58, 0xbead6070, 0xbed96f55, 0xbddc0a21,
      0xbdd000ea, 0xbe80540f, 0x3ccb0fa5, 0xbe66362c, 0xbea11cf9, 0x3e8ce994,
      0xbdbcda70, 0x3f2a3f44, 0xbd97c979, 0x3e3c3c2c, 0x3e5d8e70, 0xbc5498d9,
      0xbe8fd920, 0xbb781c3d, 0xbde8f97b, 0xbe470035, 0x3bce028a, 0x3d61330d,
      0xbe646db7, 0xbe9aecff, 0x3e41fef3, 0xbe12e66e, 0xbea17cf4, 0x3d4994a9};
  const std::vector<std::uint32_t> amax_bits{0x3f5d5d79, 0x416e50dc, 0x400420df,
                                             0x3d4f91c4, 0x42063187, 0x40a18ba1};
  // The factors as float64 values of the formula on these statistics.
  const std::vector<std::pair<double, std::vector<double>>> cases{
      {0.5,
       {1.1834769438259307, 7.7088598041877372, 1.7619281192908212, 0.42470222487452863,
        12.263387577111821, 4.0007099245624058}},
      {0.8,
       {0.98035973304614299, 11.445001377674178, 1.937693156741453, 0.1186085034060754,
        22.430917054736319, 4.5998285758652804}},
      {0.25,
       {1.3845386442917484, 5.5458579632848481, 1.6276992920610494, 1.2294903272128701,
        7.4144679364349964, 3.5615024902586367}},
  };
  const std::vector<float> x = from_bits(x_bits);
  const std::vector<float> w = from_bits(w_bits);
  std::vector<float> amax(k, 0.0f);
  const std::size_t half = x.size() / 2;  // two batches
  quark::smooth_quant_observe(std::span(x).first(half), k, amax);
  quark::smooth_quant_observe(std::span(x).subspan(half), k, amax);
  CHECK(to_bits(amax) == amax_bits);
  for (const auto& [alpha, exact] : cases) {
    const double a = alpha;
    CAPTURE(a);
    std::vector<float> s(k), inv(k);
    CHECK(quark::smooth_quant_factors(amax, w, n, alpha, s, inv) == 0);
    std::vector<float> ws = w;
    quark::smooth_quant_scale_rows(ws, n, s);
    for (std::size_t j = 0; j < k; ++j) {
      CAPTURE(j);
      // Two float32 powers rounded to nearest and a float32 division: within 1.5 ulp.
      const double rel = std::fabs(static_cast<double>(s[j]) - exact[j]) / exact[j];
      CHECK(rel <= 1.5 * 0x1p-23);
      // The activation's factor is 1 / (s + 1e-9) in float32 (the guard is below half an ulp).
      CHECK(inv[j] == 1.0f / s[j]);
      for (std::size_t c = 0; c < n; ++c)
        CHECK(ws[j * n + c] == s[j] * w[j * n + c]);
    }
  }
}

TEST_CASE("smooth_quant: argument checks") {
  std::vector<float> amax(2, 0.0f), s(2), inv(2);
  const std::vector<float> w(6, 1.0f);
  CHECK(error_id([&] { quark::smooth_quant_observe(std::vector<float>(5), 2, amax); }) ==
        "quark.smooth_quant.shape");
  CHECK(error_id([&] { quark::smooth_quant_observe(std::vector<float>(4), 0, amax); }) ==
        "quark.smooth_quant.shape");
  CHECK(error_id([&] { quark::smooth_quant_factors(amax, w, 2, 0.5, s, inv); }) ==
        "quark.smooth_quant.shape");
  CHECK(error_id([&] { quark::smooth_quant_factors(amax, w, 3, 1.5, s, inv); }) ==
        "quark.smooth_quant.alpha");
  CHECK(error_id([&] {
          quark::smooth_quant_factors(amax, w, 3, std::numeric_limits<double>::quiet_NaN(), s, inv);
        }) == "quark.smooth_quant.alpha");
  std::vector<float> wm = w;
  CHECK(error_id([&] { quark::smooth_quant_scale_rows(wm, 2, s); }) == "quark.smooth_quant.shape");
}
