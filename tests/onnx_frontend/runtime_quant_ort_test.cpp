// SPDX-License-Identifier: MIT
// QuantizeLinear / DequantizeLinear of our runtime against ONNX Runtime 1.30, bit for bit, on
// tensors large enough (4 x 8 x 64 x 64) to be split over the thread pool: per tensor and per
// channel (axis 1), to int8 / uint8 / int16 / uint16 (the runtime's branch-free form), with
// zero points, on values that hit every rounding case: exact ties
// (k + 0.5) * scale of both parities, their float neighbours, values far beyond the type's
// range, +-Inf and -0. NaN is checked against ONNX's rule (round(NaN) = 0: the zero point),
// since ONNX Runtime's result for NaN is not specified.
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <doctest/doctest.h>

// support/ort.hpp first: inside quark::test, "onnx::" must find ::onnx, not quark::onnx.
#include <quark/onnx/runtime.hpp>

#include "support/ort.hpp"

namespace qo = quark::onnx;
using namespace quark::test;

namespace {

constexpr std::int64_t kC = 8;
const std::vector<std::int64_t> kShape = {4, kC, 64, 64};

std::vector<float> scales(bool per_channel) {
  if (!per_channel)
    return {0.037f};
  std::vector<float> s;
  for (std::int64_t c = 0; c < kC; ++c)
    s.push_back(0.011f * static_cast<float>(c + 1) + 0.0003f);
  return s;
}

/// Values whose quotient by the scale of their channel lands on ties, next to them, far out.
std::vector<float> values(const std::vector<float>& sc) {
  std::size_t n = 1;
  for (const auto d : kShape)
    n *= static_cast<std::size_t>(d);
  const std::size_t inner = 64 * 64;
  std::mt19937 g(11);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::uniform_int_distribution<int> kind(0, 9);
  std::uniform_int_distribution<int> k(-40000, 40000);
  constexpr float inf = std::numeric_limits<float>::infinity();
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    const float s = sc[sc.size() == 1 ? 0 : (i / inner) % sc.size()];
    const float tie = (static_cast<float>(k(g)) + 0.5f) * s;
    switch (kind(g)) {
      case 0:
      case 1:
        v[i] = tie;
        break;
      case 2:
        v[i] = std::nextafter(tie, inf);
        break;
      case 3:
        v[i] = std::nextafter(tie, -inf);
        break;
      case 4:
        v[i] = normal(g) * 1e6f;
        break;
      default:
        v[i] = normal(g);
    }
  }
  v[5] = inf;
  v[6] = -inf;
  v[7] = -0.0f;
  v[8] = 3e38f;
  v[9] = -3e38f;
  v[10] = 2.1e9f;
  v[11] = -2.2e9f;
  return v;
}

template <class T>
std::vector<T> zero_points(std::size_t count) {
  std::vector<T> z;
  for (std::size_t i = 0; i < count; ++i) {
    const auto lo = static_cast<long long>(std::numeric_limits<T>::min());
    const auto hi = static_cast<long long>(std::numeric_limits<T>::max());
    z.push_back(static_cast<T>(lo + (hi - lo) * static_cast<long long>(i + 3) / 13));
  }
  return z;
}

/// x -> QuantizeLinear -> q (output) -> DequantizeLinear -> y (output).
template <class T>
::onnx::ModelProto qdq_model(int type, const std::vector<float>& sc, const std::vector<T>& zp) {
  model_builder b(21);
  b.input("x", onnx_type::float32, kShape);
  const std::vector<std::int64_t> dims =
      sc.size() == 1 ? std::vector<std::int64_t>{} : std::vector<std::int64_t>{kC};
  b.initializer("s", onnx_type::float32, dims, sc);
  b.initializer("z", type, dims, zp);
  b.node("QuantizeLinear", {"x", "s", "z"}, {"q"}, {attr_int("axis", 1)});
  b.node("DequantizeLinear", {"q", "s", "z"}, {"y"}, {attr_int("axis", 1)});
  b.output("q", type, kShape);
  b.output("y", onnx_type::float32, kShape);
  return b.build();
}

template <class T>
void check_against_ort(int type) {
  for (const bool per_channel : {false, true}) {
    CAPTURE(per_channel);
    const auto sc = scales(per_channel);
    const auto zp = zero_points<T>(sc.size());
    const auto m = qdq_model<T>(type, sc, zp);
    const auto x = values(sc);
    const qo::runtime rt =
        qo::runtime::from_bytes(std::as_bytes(std::span<const char>(m.SerializeAsString())), ".");
    std::map<std::string, qo::tensor> feeds;
    feeds.emplace("x", qo::tensor::from_floats(kShape, x));
    const auto ours = rt.run(feeds);
    std::vector<std::size_t> shape(kShape.begin(), kShape.end());
    const auto ort = run_ort(m, {npy_array::from(std::span<const float>(x), shape)});
    const auto& q = ours.at("q");
    REQUIRE(q.byte_size() == ort.at("q").bytes.size());
    CHECK(std::memcmp(q.bytes().data(), ort.at("q").bytes.data(), q.byte_size()) == 0);
    const auto& y = ours.at("y");
    REQUIRE(y.byte_size() == ort.at("y").bytes.size());
    CHECK(std::memcmp(y.bytes().data(), ort.at("y").bytes.data(), y.byte_size()) == 0);
    // NaN (every 97th element): ONNX leaves the code unspecified; ORT 1.30 stores the lowest
    // code, and so must we (the headers' policies::onnx_qdq says the same).
    auto xn = x;
    for (std::size_t i = 0; i < xn.size(); i += 97)
      xn[i] = std::numeric_limits<float>::quiet_NaN();
    std::map<std::string, qo::tensor> nan_feeds;
    nan_feeds.emplace("x", qo::tensor::from_floats(kShape, xn));
    const auto with_nan = rt.run(nan_feeds);
    const auto ort_nan = run_ort(m, {npy_array::from(std::span<const float>(xn), shape)});
    const auto& qn = with_nan.at("q");
    REQUIRE(qn.byte_size() == ort_nan.at("q").bytes.size());
    CHECK(std::memcmp(qn.bytes().data(), ort_nan.at("q").bytes.data(), qn.byte_size()) == 0);
    const auto codes = qn.template data<T>();
    for (std::size_t i = 0; i < xn.size(); i += 97) {
      if (codes[i] != std::numeric_limits<T>::min()) {
        FAIL_CHECK("NaN at element " << i << " -> " << static_cast<long long>(codes[i]));
        break;
      }
    }
  }
}

}  // namespace

TEST_CASE("QuantizeLinear / DequantizeLinear match ONNX Runtime bit for bit on large tensors") {
  if (!ort_available())
    FAIL("ONNX Runtime is required: " << ort_unavailable_reason());
  SUBCASE("int8") {
    check_against_ort<std::int8_t>(onnx_type::int8);
  }
  SUBCASE("uint8") {
    check_against_ort<std::uint8_t>(onnx_type::uint8);
  }
  SUBCASE("int16") {
    check_against_ort<std::int16_t>(onnx_type::int16);
  }
  SUBCASE("uint16") {
    check_against_ort<std::uint16_t>(onnx_type::uint16);
  }
}
