// SPDX-License-Identifier: MIT
// include/quark/metrics.hpp against an independent numpy implementation (data/
// gen_metrics_reference.py: direct 2-D windowed SSIM, float64) and hand-derived vectors.
#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include <quark/metrics.hpp>

#include "support/npy.hpp"

namespace qm = quark::metrics;

namespace {

std::string data_dir() {
  const char* s = std::getenv("QUARK_SOURCE_DIR");
  return std::string(s ? s : ".") + "/tests/metrics/data/";
}

std::map<std::string, double> reference_values() {
  std::ifstream f(data_dir() + "metrics_reference.txt");
  REQUIRE(f);
  std::map<std::string, double> m;
  std::string name;
  double v = 0;
  while (f >> name >> v)
    m[name] = v;
  return m;
}

void check_rel(double got, double want, double tol = 1e-12) {
  CHECK(std::fabs(got - want) <= tol * std::fabs(want));
}

}  // namespace

TEST_CASE("metrics: every metric matches the numpy reference on two 16x20 planes") {
  const auto x = quark::test::read_npy(data_dir() + "metrics_x.npy").values<float>();
  const auto y = quark::test::read_npy(data_dir() + "metrics_y.npy").values<float>();
  REQUIRE(x.size() == 2u * 16u * 20u);
  const auto ref = reference_values();
  REQUIRE(ref.size() == 6u);
  check_rel(qm::cosine(x, y), ref.at("cosine"));
  check_rel(qm::l2_distance(x, y), ref.at("l2"));
  check_rel(qm::l1_distance(x, y), ref.at("l1"));
  check_rel(qm::psnr(x, y), ref.at("psnr"));
  check_rel(qm::ssim_global(x, y), ref.at("ssim_global"));
  // Separable filtering (quark-cpp) vs the direct 2-D window (numpy): equal up to rounding.
  check_rel(qm::ssim(x, y, 2, 16, 20), ref.at("ssim"), 1e-10);
}

TEST_CASE("metrics: hand-derived values") {
  const std::vector<float> a{1, 2}, b{2, 4}, e0{1, 0}, e1{0, 1}, neg{-1, -2}, zero{0, 0};
  CHECK(qm::cosine(a, b) == doctest::Approx(1.0).epsilon(1e-15));
  CHECK(qm::cosine(e0, e1) == 0.0);
  CHECK(qm::cosine(a, neg) == doctest::Approx(-1.0).epsilon(1e-15));
  CHECK(std::isnan(qm::cosine(a, zero)));  // Quark adds no epsilon: undefined, not 0 or 1

  const std::vector<float> o{0, 0}, p{3, 4};
  CHECK(qm::l2_distance(o, p) == 5.0);
  CHECK(qm::l1_distance(o, p) == 7.0);

  // mse = (1^2 + 0^2) / 2 = 0.5, peak max(x) = 2: 20 log10 2 - 10 log10 0.5 = 30 log10 2.
  const std::vector<float> x{2, 0}, y{1, 0};
  CHECK(qm::psnr(x, y) == doctest::Approx(30.0 * std::log10(2.0)).epsilon(1e-14));
  // Identical inputs: mse 0 becomes 1e-10 (quark-spec §11.1): 20 log10 2 + 100.
  CHECK(qm::psnr(x, x) == doctest::Approx(20.0 * std::log10(2.0) + 100.0).epsilon(1e-14));
  // A peak <= 0 becomes 1e-10: 20 log10 1e-10 - 10 log10 0.5.
  const std::vector<float> nx{-2, -1}, ny{-1, -1};
  CHECK(qm::psnr(nx, ny) == doctest::Approx(-200.0 - 10.0 * std::log10(0.5)).epsilon(1e-14));

  // x = {1, 3}, y = {3, 1}: means 2 and 2, variances 1 and 1, covariance -1, L = 255:
  // (2*4 + c1)(-2 + c2) / ((8 + c1)(2 + c2)) = (c2 - 2) / (c2 + 2), c2 = (0.03 * 255)^2.
  const std::vector<float> s{1, 3}, t{3, 1};
  const double c2 = (0.03 * 255) * (0.03 * 255);
  CHECK(qm::ssim_global(s, t) == doctest::Approx((c2 - 2) / (c2 + 2)).epsilon(1e-14));
  CHECK(qm::ssim_global(s, s) == doctest::Approx(1.0).epsilon(1e-15));
  // Planes smaller than the 11x11 window fall back to the global window.
  CHECK(qm::ssim(s, t, 1, 1, 2) == qm::ssim_global(s, t));
  std::vector<float> img(3 * 12 * 13);
  for (std::size_t i = 0; i < img.size(); ++i)
    img[i] = static_cast<float>((i * 37) % 251);
  CHECK(qm::ssim(img, img, 3, 12, 13) == doctest::Approx(1.0).epsilon(1e-14));
}

TEST_CASE("metrics: bad sizes are errors naming the metric") {
  const std::vector<float> a{1, 2}, b{1, 2, 3};
  CHECK_THROWS_AS(static_cast<void>(qm::cosine(a, b)), quark::invalid_argument);
  CHECK_THROWS_WITH(static_cast<void>(qm::psnr(a, b)), doctest::Contains("psnr: 2 vs 3"));
  CHECK_THROWS_WITH(static_cast<void>(qm::ssim(a, a, 2, 1, 2)),
                    doctest::Contains("planes x h x w"));
}

TEST_CASE("metrics::summary: undefined (NaN) samples are counted apart") {
  qm::summary s;
  s.add(0.5);
  s.add(std::numeric_limits<double>::quiet_NaN());
  s.add(0.9);
  CHECK(s.count == 2u);
  CHECK(s.undefined == 1u);
  CHECK(s.mean() == doctest::Approx(0.7));
  CHECK(s.min == 0.5);
  CHECK(s.max == 0.9);
  qm::summary none;
  none.add(std::numeric_limits<double>::quiet_NaN());
  CHECK(none.count == 0u);
  CHECK(std::isnan(none.mean()));
}
