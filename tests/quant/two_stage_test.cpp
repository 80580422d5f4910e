// SPDX-License-Identifier: MIT
// ProgressiveSpec and ScaleQuantSpec (seed 004), dynamic ranges and parameters.
#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include <doctest/doctest.h>

#include <quark/quant/range.hpp>
#include <quark/quant/two_stage.hpp>

#include "quant/quant_reference.hpp"

TEST_CASE("group_ranges per tensor / channel / block, NaN propagates") {
  const quark::tensor_shape shape{2, 5};
  const std::vector<float> x{1, -2, 3, 4, 5, -6, 7, 8, 9, 10};
  std::vector<quark::value_range> r(2);
  quark::group_ranges(shape, x, quark::per_channel{0}, r);
  CHECK(r[0].min == -2.0f);
  CHECK(r[0].max == 5.0f);
  CHECK(r[1].min == -6.0f);
  CHECK(r[1].max == 10.0f);
  std::vector<quark::value_range> b(4);
  quark::group_ranges(shape, x, quark::per_block{1, 3}, b);  // blocks {0..2}, {3, 4} per row
  CHECK(b[1].min == 4.0f);
  CHECK(b[1].max == 5.0f);
  CHECK(b[2].min == -6.0f);
  std::vector<float> xn = x;
  xn[3] = NAN;
  std::vector<quark::value_range> t(1);
  quark::group_ranges(shape, xn, quark::per_tensor{}, t);
  CHECK(std::isnan(t[0].min));
  std::vector<float> s(1);
  std::vector<std::int32_t> z(1);
  CHECK_THROWS_AS(quark::dynamic_qparams<std::int8_t>(shape, xn, quark::per_tensor{}, {}, s, z),
                  quark::invalid_argument);
}

TEST_CASE("ProgressiveSpec: FP8 per tensor, then INT4 per channel on the result") {
  std::mt19937_64 rng(quark_test::test_seed());
  MESSAGE("seed " << quark_test::test_seed());
  std::normal_distribution<float> d(0.0f, 2.0f);
  const quark::tensor_shape shape{8, 64};
  std::vector<float> x(512);
  for (auto& v : x)
    v = d(rng);
  const quark::progressive_spec spec{
      quark::quant_stage<quark::float8_e4m3fn>{},
      quark::quant_stage<quark::int4>{quark::per_channel{0}, {.sym = quark::symmetry::asymmetric}}};
  std::vector<float> y(512);
  quark::fake_quantize(spec, shape, x, y);
  // The same by hand.
  std::vector<float> y1(512), y2(512);
  quark::fake_quantize(spec.first, shape, x, y1);
  quark::fake_quantize(spec.second, shape, y1, y2);
  CHECK(y == y2);
  // The first stage is FP8 per tensor with scale amax / 448.
  float amax = 0;
  for (float v : x)
    amax = std::max(amax, std::fabs(v));
  const float s8 = static_cast<float>(static_cast<double>(amax) / 448.0);
  for (std::size_t i = 0; i < x.size(); ++i) {
    const float e =
        quark::to_float(
            quark::convert<quark::float8_e4m3fn, quark::policies::onnx_saturate>(x[i] / s8)) *
        s8;
    REQUIRE(y1[i] == e);
  }
  // At most 16 distinct values per row (INT4).
  for (std::size_t r = 0; r < 8; ++r) {
    std::vector<float> row(y.begin() + static_cast<std::ptrdiff_t>(r * 64),
                           y.begin() + static_cast<std::ptrdiff_t>(r * 64 + 64));
    std::sort(row.begin(), row.end());
    CHECK(std::unique(row.begin(), row.end()) - row.begin() <= 16);
  }
}

TEST_CASE("ScaleQuantSpec: FP4 per group of 16 with FP8 E4M3 scales") {
  std::mt19937_64 rng(quark_test::test_seed());
  std::normal_distribution<float> d(0.0f, 1.0f);
  const quark::tensor_shape shape{4, 64};
  std::vector<float> x(256);
  for (std::size_t i = 0; i < x.size(); ++i)
    x[i] = d(rng) * static_cast<float>(1 + i / 16);
  std::fill(x.begin(), x.begin() + 16, 0.0f);  // a zero group: its scale stays positive
  x[20] = 1e-6f;
  const quark::scale_quant_spec spec{
      quark::quant_stage<quark::float4_e2m1fn>{quark::per_block{-1, 16}},
      quark::quant_stage<quark::float8_e4m3fn>{}};
  std::vector<float> y(256);
  quark::fake_quantize(spec, shape, x, y);
  for (std::size_t i = 0; i < 16; ++i)
    CHECK(y[i] == 0.0f);
  // Recompute: group scales amax/6, their FP8 quantization with scale max(s)/448.
  std::vector<float> s(16);
  std::vector<float> z(16);
  quark::dynamic_qparams<quark::float4_e2m1fn>(shape, x, quark::per_block{-1, 16}, {}, s, z);
  float smax = 0;
  for (float v : s)
    smax = std::max(smax, v);
  const float s2 = static_cast<float>(static_cast<double>(smax) / 448.0);
  for (std::size_t g = 1; g < 16; ++g) {
    const float sq =
        quark::to_float(
            quark::convert<quark::float8_e4m3fn, quark::policies::onnx_saturate>(s[g] / s2)) *
        s2;
    REQUIRE(sq > 0.0f);
    for (std::size_t k = 0; k < 16; ++k) {
      const std::size_t i = g * 16 + k;
      const float e =
          quark::to_float(
              quark::convert<quark::float4_e2m1fn, quark::policies::onnx_saturate>(x[i] / sq)) *
          sq;
      REQUIRE(y[i] == e);
    }
  }
}
