// SPDX-License-Identifier: MIT
// The quantization functors over Eigen expressions and xtensor containers give the same bits as
// the span kernels.
#include <cstdint>
#include <cstring>
#include <vector>

#include <doctest/doctest.h>

#include <quark/adapt/eigen.hpp>
#include <quark/adapt/xtensor.hpp>
#include <quark/scale/qparams.hpp>

namespace {
bool same_bits(const float* a, const float* b, std::size_t n) {
  return std::memcmp(a, b, n * sizeof(float)) == 0;
}
}  // namespace

TEST_CASE("Eigen: unaryExpr with fake_quant equals the span kernel") {
  Eigen::MatrixXf m = Eigen::MatrixXf::Random(7, 9) * 3.0f;
  m(0, 0) = std::numeric_limits<float>::quiet_NaN();
  const auto p =
      quark::compute_qparams<std::int8_t>({-3.0f, 3.0f}, {.sym = quark::symmetry::symmetric});
  const quark::fake_quant<std::int8_t> fq(p);
  Eigen::MatrixXf a = m.unaryExpr(fq);
  Eigen::MatrixXf b = quark::fake_quantize(m, fq);
  Eigen::MatrixXf c = (m * 2.0f).unaryExpr(fq);  // fused into an expression
  std::vector<float> ref(static_cast<std::size_t>(m.size()));
  const float s = p.scale_value();
  quark::fake_quantize<std::int8_t>(quark::tensor_shape{ref.size()},
                                    std::span<const float>(m.data(), ref.size()),
                                    {std::span(&s, 1)}, ref);
  CHECK(same_bits(a.data(), ref.data(), ref.size()));
  CHECK(same_bits(b.data(), ref.data(), ref.size()));
  CHECK(c(1, 1) == fq(2.0f * m(1, 1)));
}

TEST_CASE("Eigen: per-channel fake quantization of a row-major matrix") {
  Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> w =
      Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>::Random(4, 32);
  std::vector<float> s{0.01f, 0.02f, 0.03f, 0.04f};
  const quark::tensor_qparams<quark::int4> p{s, {}, quark::per_channel{0}};
  decltype(w) out;
  quark::fake_quantize_plain<quark::int4>(w, p, out);
  for (Eigen::Index r = 0; r < 4; ++r) {
    const quark::fake_quant<quark::int4> fq(s[static_cast<std::size_t>(r)]);
    for (Eigen::Index c = 0; c < 32; ++c)
      CHECK(out(r, c) == fq(w(r, c)));
  }
}

TEST_CASE("xtensor: vectorize and container kernels equal the span kernel") {
  xt::xarray<float> x = {{0.1f, 0.26f, -3.0f}, {0.5f, 1e30f, -0.0f}};
  const quark::fake_quant<std::int8_t> fq(0.1f);
  xt::xarray<float> y = quark::fake_quantize(x, fq);
  auto v = xt::vectorize(quark::xt_callable(fq));
  xt::xarray<float> y2 = v(x);
  CHECK(y(0, 1) == 0.3f);
  CHECK(y(1, 1) == 12.7f);
  CHECK(y == y2);
  std::vector<float> s{0.1f, 0.2f};
  xt::xarray<float> z;
  quark::fake_quantize_container<std::int8_t>(x, {s, {}, quark::per_channel{0}}, z);
  CHECK(z(1, 0) == 0.4f);
  CHECK(z(0, 1) == fq(0.26f));
  xt::xarray<std::int8_t> q;
  quark::quantize_container<std::int8_t>(x, {s, {}, quark::per_channel{0}}, q);
  CHECK(q(0, 2) == -30);
  CHECK(q(1, 1) == 127);
}
