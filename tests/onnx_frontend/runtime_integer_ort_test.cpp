// SPDX-License-Identifier: MIT
// The integer operators of dynamically quantized models (DynamicQuantizeLinear, MatMulInteger,
// ConvInteger) in our runtime against ONNX Runtime 1.30, bit for bit: scale, zero point and codes
// of DynamicQuantizeLinear on random data, ties, all-zero / all-positive / all-negative / tiny
// ranges and tensors split over the thread pool; int32 products for every uint8 / int8 pairing
// with per-tensor and per-column zero points, 2-D, 1-D and broadcast 3-D / 4-D shapes, and sums
// that wrap modulo 2^32; convolutions with pads, strides, dilations, groups and auto_pad. The
// zero-point shapes ONNX allows and ORT 1.30 refuses (per-row a_zero_point, per-channel
// w_zero_point) are checked against a direct loop here. Bad inputs must fail naming the node.
// (ORT's uint8 x int8 kernel can saturate on CPUs without VNNI; the machines these run on have
// it.)
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <doctest/doctest.h>

// support/ort.hpp first: inside quark::test, "onnx::" must find ::onnx, not quark::onnx.
#include <quark/onnx/error.hpp>
#include <quark/onnx/runtime.hpp>

#include "support/ort.hpp"

namespace qo = quark::onnx;
using namespace quark::test;

namespace {

qo::runtime load(const ::onnx::ModelProto& m) {
  return qo::runtime::from_bytes(std::as_bytes(std::span<const char>(m.SerializeAsString())), ".");
}

qo::tensor to_tensor(const npy_array& a) {
  const quark::dtype_id type = a.descr == "<f4"   ? quark::dtype_id::float32
                               : a.descr == "|u1" ? quark::dtype_id::uint8
                                                  : quark::dtype_id::int8;
  qo::tensor t(type, qo::shape_t(a.shape.begin(), a.shape.end()));
  if (!a.bytes.empty())
    std::memcpy(t.bytes().data(), a.bytes.data(), a.bytes.size());
  return t;
}

/// Our outputs for `inputs`, bound to the graph inputs in order.
std::map<std::string, qo::tensor> run_ours(const ::onnx::ModelProto& m,
                                           const std::vector<npy_array>& inputs) {
  std::map<std::string, qo::tensor> feeds;
  for (std::size_t i = 0; i < inputs.size(); ++i)
    feeds.emplace(m.graph().input(static_cast<int>(i)).name(), to_tensor(inputs[i]));
  return load(m).run(feeds);
}

/// Every graph output of ours equals ONNX Runtime's, byte for byte.
void check_against_ort(const ::onnx::ModelProto& m, const std::vector<npy_array>& inputs) {
  const auto ours = run_ours(m, inputs);
  const auto ort = run_ort(m, inputs);
  for (const auto& o : m.graph().output()) {
    CAPTURE(o.name());
    const qo::tensor& t = ours.at(o.name());
    const npy_array& r = ort.at(o.name());
    REQUIRE(t.shape() == qo::shape_t(r.shape.begin(), r.shape.end()));
    REQUIRE(t.byte_size() == r.bytes.size());
    CHECK(std::memcmp(t.bytes().data(), r.bytes.data(), r.bytes.size()) == 0);
  }
}

template <class T>
std::vector<T> random_ints(std::size_t n, unsigned seed) {
  std::mt19937 g(seed);
  std::uniform_int_distribution<int> d(std::numeric_limits<T>::min(),
                                       std::numeric_limits<T>::max());
  std::vector<T> v(n);
  for (auto& x : v)
    x = static_cast<T>(d(g));
  return v;
}

std::vector<std::size_t> dims(const std::vector<std::int64_t>& s) {
  return {s.begin(), s.end()};
}

std::size_t count(const std::vector<std::int64_t>& s) {
  std::size_t n = 1;
  for (const auto d : s)
    n *= static_cast<std::size_t>(d);
  return n;
}

/// Random 8-bit data of ONNX type `type` (uint8 or int8).
npy_array random_bytes(int type, const std::vector<std::int64_t>& shape, unsigned seed) {
  const std::size_t n = count(shape);
  if (type == onnx_type::uint8)
    return npy_array::from<std::uint8_t>(random_ints<std::uint8_t>(n, seed), dims(shape));
  return npy_array::from<std::int8_t>(random_ints<std::int8_t>(n, seed), dims(shape));
}

/// int8 values in [-64, 63]: no pair of uint8 x int8 products reaches the int16 range, so ORT's
/// saturating kernel (ort_u8s8_saturates) computes them exactly.
std::vector<std::int8_t> seven_bit_ints(std::size_t n, unsigned seed) {
  std::vector<std::int8_t> v = random_ints<std::int8_t>(n, seed);
  for (auto& x : v)
    x = static_cast<std::int8_t>(x / 2);
  return v;
}

/// An 8-bit zero-point initializer of `values` (stored as `type`): a scalar for one value, else
/// 1-D.
void zero_point_init(model_builder& b, const std::string& name, int type,
                     const std::vector<int>& values) {
  std::vector<std::uint8_t> raw;
  for (const int v : values)
    raw.push_back(static_cast<std::uint8_t>(v));
  std::vector<std::int64_t> shape;
  if (values.size() != 1)
    shape.push_back(static_cast<std::int64_t>(values.size()));
  b.initializer(name, type, shape, raw);
}

::onnx::ModelProto dql_model(const std::vector<std::int64_t>& shape) {
  model_builder b(11);
  b.input("x", onnx_type::float32, shape)
      .node("DynamicQuantizeLinear", {"x"}, {"y", "y_scale", "y_zero_point"})
      .output("y", onnx_type::uint8, shape)
      .output("y_scale", onnx_type::float32)
      .output("y_zero_point", onnx_type::uint8);
  return b.build();
}

void check_dql(const std::vector<float>& x) {
  const std::vector<std::int64_t> shape{static_cast<std::int64_t>(x.size())};
  check_against_ort(dql_model(shape), {npy_array::from<float>(x, dims(shape))});
}

}  // namespace

TEST_CASE("DynamicQuantizeLinear matches ONNX Runtime bit for bit") {
  if (!ort_available())
    FAIL("ONNX Runtime is required: " << ort_unavailable_reason());
  std::mt19937 g(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  SUBCASE("random data on a 4-D tensor split over the pool") {
    const std::vector<std::int64_t> shape{4, 8, 64, 64};
    std::vector<float> x(count(shape));
    for (auto& v : x)
      v = normal(g) * 3.0f + 0.5f;
    check_against_ort(dql_model(shape), {npy_array::from<float>(x, dims(shape))});
  }
  SUBCASE("ties: values (k + 0.5) * scale and their neighbours") {
    // min -1.5 and max 2.3 fix the scale; the quotients of most values then land on ties.
    const float scale = (2.3f + 1.5f) / 255.0f;
    std::vector<float> x{-1.5f, 2.3f};
    std::uniform_int_distribution<int> k(-120, 150);
    for (int i = 0; i < 30000; ++i) {
      const float t = (static_cast<float>(k(g)) + 0.5f) * scale;
      x.push_back(i % 3 == 0 ? t : std::nextafter(t, i % 3 == 1 ? 10.0f : -10.0f));
    }
    check_dql(x);
  }
  SUBCASE("all zero, all positive, all negative, one value, tiny and huge ranges") {
    check_dql({0.0f, 0.0f, -0.0f, 0.0f});
    check_dql({0.5f, 3.0f, 1e-3f, 7.25f, 2.0f});
    check_dql({-0.5f, -3.0f, -1e-3f, -7.25f, -2.0f});
    check_dql({-4.0f});
    check_dql({1e-40f, -1e-40f, 3e-41f});  // a subnormal scale
    check_dql({1e38f, -1e38f, 5e37f});     // a width of 2e38: still a finite scale
    check_dql({1.0f, 255.0f, 128.0f});     // scale exactly 1
  }
  SUBCASE("a large tensor (3 M values)") {
    std::vector<float> x(3'000'000);
    for (auto& v : x)
      v = normal(g) * 0.02f - 0.01f;
    check_dql(x);
  }
}

TEST_CASE("DynamicQuantizeLinear refuses NaN and a non-finite scale, naming the node") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  // ONNX Runtime 1.30: a NaN in the last element gives scale NaN, one in the middle of a
  // 16-value tensor may drop the minimum; an Inf gives scale Inf (every finite value -> the zero
  // point). Neither is a usable quantization, so the runtime refuses both.
  const std::vector<std::pair<std::vector<float>, const char*>> cases = {
      {{1.0f, nan, -1.0f}, "NaN"},
      {{1.0f, inf, -1.0f}, "scale"},
      {{-inf, 2.0f}, "scale"},
      {{3e38f, -3e38f}, "scale"},  // max - min overflows to Inf
      {{1e-45f, 0.0f}, "scale"}};  // (max - min) / 255 underflows to 0
  for (const auto& c : cases) {
    const std::vector<float>& x = c.first;
    const char* what = c.second;
    CAPTURE(x[0]);
    const auto m = dql_model({static_cast<std::int64_t>(x.size())});
    const std::vector<npy_array> in{npy_array::from<float>(x, {x.size()})};
    CHECK_THROWS_WITH_AS((void)run_ours(m, in),
                         doctest::Contains("node 'n0' (DynamicQuantizeLinear)"),
                         qo::frontend_error);
    CHECK_THROWS_WITH_AS((void)run_ours(m, in), doctest::Contains(what), qo::frontend_error);
  }
}

namespace {

struct matmul_case {
  std::vector<std::int64_t> a, b, out;
};

/// MatMulInteger(A, B[, a_zero_point, b_zero_point]); `za` / `zb` empty: input left out; one
/// value: a scalar; more: 1-D.
::onnx::ModelProto matmul_model(const matmul_case& s, int ta, int tb, const std::vector<int>& za,
                                const std::vector<int>& zb) {
  model_builder b(10);
  b.input("A", ta, s.a).input("B", tb, s.b);
  std::vector<std::string> ins{"A", "B"};
  if (!za.empty() || !zb.empty()) {
    zero_point_init(b, "a_zp", ta, za.empty() ? std::vector<int>{0} : za);
    ins.push_back("a_zp");
  }
  if (!zb.empty()) {
    zero_point_init(b, "b_zp", tb, zb);
    ins.push_back("b_zp");
  }
  b.node("MatMulInteger", ins, {"Y"}).output("Y", onnx_type::int32, s.out);
  return b.build();
}

}  // namespace

TEST_CASE("MatMulInteger matches ONNX Runtime bit for bit") {
  if (!ort_available())
    FAIL("ONNX Runtime is required: " << ort_unavailable_reason());
  const std::vector<matmul_case> shapes = {
      {{37, 300}, {300, 45}, {37, 45}},           // edges of every tile
      {{2, 5, 64}, {64, 33}, {2, 5, 33}},         // 3-D A, shared B: one product
      {{2, 1, 5, 24}, {3, 24, 7}, {2, 3, 5, 7}},  // 4-D broadcast of both
      {{3, 6, 20}, {3, 20, 9}, {3, 6, 9}},        // batched both
      {{40}, {40, 18}, {18}},                     // 1-D A
      {{6, 40}, {40}, {6}},                       // 1-D B
      {{128, 768}, {768, 256}, {128, 256}},       // a transformer projection
      {{3, 300}, {300, 600}, {3, 600}},           // few rows: B read directly, 3 column blocks
      {{1, 2, 50}, {50, 257}, {1, 2, 257}},       // few rows of a batch, a partial block
  };
  unsigned seed = 1;
  for (const int ta : {onnx_type::uint8, onnx_type::int8}) {
    for (const int tb : {onnx_type::uint8, onnx_type::int8}) {
      for (const auto& s : shapes) {
        CAPTURE(ta);
        CAPTURE(tb);
        CAPTURE(s.a.size());
        CAPTURE(s.b.back());
        // uint8 x int8 where ORT saturates: B within 7 bits, so ORT stays the exact product
        // (the full range is checked against a direct loop in the per-row case below).
        const bool narrow = ta == onnx_type::uint8 && tb == onnx_type::int8 && ort_u8s8_saturates();
        const std::vector<npy_array> in{
            random_bytes(ta, s.a, seed),
            narrow ? npy_array::from<std::int8_t>(seven_bit_ints(count(s.b), seed + 1), dims(s.b))
                   : random_bytes(tb, s.b, seed + 1)};
        seed += 2;
        const int za = ta == onnx_type::uint8 ? 131 : -7;
        const int zb = tb == onnx_type::uint8 ? 119 : 5;
        check_against_ort(matmul_model(s, ta, tb, {}, {}), in);
        check_against_ort(matmul_model(s, ta, tb, {za}, {zb}), in);
        if (s.b.size() == 2) {  // per-column b_zero_point (ORT: of a 2-D B only)
          std::vector<int> zcol;
          for (std::int64_t j = 0; j < s.b.back(); ++j)
            zcol.push_back(static_cast<int>((j * 37) % 200) - (tb == onnx_type::int8 ? 100 : 0));
          check_against_ort(matmul_model(s, ta, tb, {za}, zcol), in);
        }
      }
    }
  }
  SUBCASE("sums beyond int32 wrap modulo 2^32") {
    // 255 * 255 * 40000 = 2.6e9 > 2^31 - 1.
    const matmul_case s{{1, 40000}, {40000, 2}, {1, 2}};
    const std::vector<npy_array> in{
        npy_array::from<std::uint8_t>(std::vector<std::uint8_t>(40000, 255), {1, 40000}),
        npy_array::from<std::uint8_t>(std::vector<std::uint8_t>(80000, 255), {40000, 2})};
    const auto m = matmul_model(s, onnx_type::uint8, onnx_type::uint8, {}, {});
    check_against_ort(m, in);
    const auto ours = run_ours(m, in);
    CHECK(ours.at("Y").data<std::int32_t>()[0] ==
          static_cast<std::int32_t>(std::uint32_t{65025} * 40000u));
  }
}

TEST_CASE("MatMulInteger with a per-row a_zero_point (ORT 1.30 refuses it) against a direct loop") {
  const matmul_case s{{2, 7, 30}, {30, 11}, {2, 7, 11}};
  std::vector<int> za;
  for (int i = 0; i < 7; ++i)
    za.push_back(i * 31);
  std::vector<int> zb;
  for (int j = 0; j < 11; ++j)
    zb.push_back(j * 9 - 50);
  const auto a = random_ints<std::uint8_t>(2 * 7 * 30, 5);
  const auto b = random_ints<std::int8_t>(30 * 11, 6);
  const auto m = matmul_model(s, onnx_type::uint8, onnx_type::int8, za, zb);
  const auto y = run_ours(m, {npy_array::from<std::uint8_t>(a, {2, 7, 30}),
                              npy_array::from<std::int8_t>(b, {30, 11})})
                     .at("Y");
  const auto got = y.data<std::int32_t>();
  for (std::size_t bi = 0; bi < 2; ++bi) {
    for (std::size_t i = 0; i < 7; ++i) {
      for (std::size_t j = 0; j < 11; ++j) {
        std::int32_t want = 0;
        for (std::size_t k = 0; k < 30; ++k)
          want += (a[(bi * 7 + i) * 30 + k] - za[i]) * (b[k * 11 + j] - zb[j]);
        REQUIRE(got[(bi * 7 + i) * 11 + j] == want);
      }
    }
  }
}

namespace {

struct conv_case {
  std::vector<std::int64_t> x, w, y;
  std::vector<attribute> attrs;
};

::onnx::ModelProto conv_model(const conv_case& s, int tx, int tw,
                              const std::vector<std::uint8_t>& w, int zx,
                              const std::vector<int>& zw) {
  model_builder b(10);
  b.input("x", tx, s.x);
  b.initializer("w", tw, s.w, w);
  zero_point_init(b, "x_zp", tx, {zx});
  zero_point_init(b, "w_zp", tw, zw);
  b.node("ConvInteger", {"x", "w", "x_zp", "w_zp"}, {"y"}, s.attrs);
  b.output("y", onnx_type::int32, s.y);
  return b.build();
}

}  // namespace

TEST_CASE("ConvInteger matches ONNX Runtime bit for bit") {
  if (!ort_available())
    FAIL("ONNX Runtime is required: " << ort_unavailable_reason());
  const std::vector<conv_case> shapes = {
      {{2, 6, 17, 19},
       {8, 3, 3, 3},
       {2, 8, 9, 17},
       {attr_int("group", 2), attr_ints("pads", {1, 2, 0, 1}), attr_ints("strides", {2, 1}),
        attr_ints("dilations", {1, 2})}},
      {{1, 16, 40, 40}, {32, 16, 3, 3}, {1, 32, 40, 40}, {attr_string("auto_pad", "SAME_UPPER")}},
      {{1, 8, 12, 12},
       {8, 1, 3, 3},
       {1, 8, 6, 6},  // depthwise
       {attr_int("group", 8), attr_ints("pads", {1, 1, 1, 1}), attr_ints("strides", {2, 2}),
        attr_ints("kernel_shape", {3, 3})}},
      {{2, 32, 10, 10}, {24, 32, 1, 1}, {2, 24, 10, 10}, {}},            // pointwise
      {{3, 4, 50}, {5, 4, 5}, {3, 5, 24}, {attr_ints("strides", {2})}},  // 1-D
  };
  unsigned seed = 20;
  for (const int tx : {onnx_type::uint8, onnx_type::int8}) {
    for (const int tw : {onnx_type::uint8, onnx_type::int8}) {
      for (const auto& s : shapes) {
        CAPTURE(tx);
        CAPTURE(tw);
        CAPTURE(s.x[1]);
        // uint8 x int8 where ORT saturates (ort_u8s8_saturates; its GEMM multiplies the
        // weights by the image columns, so either may be the int8 side): the int8 operand
        // within 7 bits (the full range is checked against a direct loop in the per-channel
        // case below).
        const bool mixed_signs = (tx == onnx_type::uint8) != (tw == onnx_type::uint8);
        const bool narrow = mixed_signs && ort_u8s8_saturates();
        std::vector<std::uint8_t> w = random_ints<std::uint8_t>(count(s.w), seed++);
        if (narrow && tw == onnx_type::int8) {
          for (auto& v : w)
            v = static_cast<std::uint8_t>(static_cast<std::int8_t>(v) / 2);
        }
        const std::vector<npy_array> in{
            narrow && tx == onnx_type::int8
                ? npy_array::from<std::int8_t>(seven_bit_ints(count(s.x), seed++), dims(s.x))
                : random_bytes(tx, s.x, seed++)};
        const int zx = tx == onnx_type::uint8 ? 128 : -3;
        const int zw = tw == onnx_type::uint8 ? 121 : 2;
        check_against_ort(conv_model(s, tx, tw, w, zx, {zw}), in);
        check_against_ort(conv_model(s, tx, tw, w, 0, {0}), in);
      }
    }
  }
}

TEST_CASE(
    "ConvInteger with a per-channel w_zero_point (ORT 1.30 refuses it) against a direct loop") {
  // x [1, 4, 7, 6], w [6, 2, 3, 2], group 2, pads 1, stride 2: y [1, 6, 4, 4].
  const conv_case s{
      {1, 4, 7, 6},
      {6, 2, 3, 2},
      {1, 6, 4, 4},
      {attr_int("group", 2), attr_ints("pads", {1, 1, 1, 1}), attr_ints("strides", {2, 2})}};
  const auto x = random_ints<std::uint8_t>(count(s.x), 41);
  const auto w = random_ints<std::int8_t>(count(s.w), 42);
  const std::vector<int> zw{-3, 0, 7, 100, -128, 127};
  const int zx = 77;
  std::vector<std::uint8_t> wraw(w.size());
  std::memcpy(wraw.data(), w.data(), w.size());
  const auto m = conv_model(s, onnx_type::uint8, onnx_type::int8, wraw, zx, zw);
  const auto y = run_ours(m, {npy_array::from<std::uint8_t>(x, dims(s.x))}).at("y");
  const auto got = y.data<std::int32_t>();
  for (int oc = 0; oc < 6; ++oc) {
    const int gi = oc / 3;
    for (int oy = 0; oy < 4; ++oy) {
      for (int ox = 0; ox < 4; ++ox) {
        std::int32_t want = 0;
        for (int ci = 0; ci < 2; ++ci) {
          for (int ky = 0; ky < 3; ++ky) {
            for (int kx = 0; kx < 2; ++kx) {
              const int iy = oy * 2 + ky - 1;
              const int ix = ox * 2 + kx - 1;
              const int xv = (iy < 0 || iy >= 7 || ix < 0 || ix >= 6)
                                 ? zx
                                 : x[static_cast<std::size_t>(((gi * 2 + ci) * 7 + iy) * 6 + ix)];
              want += (xv - zx) * (w[static_cast<std::size_t>(((oc * 2 + ci) * 3 + ky) * 2 + kx)] -
                                   zw[static_cast<std::size_t>(oc)]);
            }
          }
        }
        REQUIRE(got[static_cast<std::size_t>((oc * 4 + oy) * 4 + ox)] == want);
      }
    }
  }
}

TEST_CASE("MatMulInteger and ConvInteger refuse bad inputs, naming the node") {
  struct bad {
    const char* what;
    ::onnx::ModelProto model;
    std::vector<npy_array> inputs;
    const char* message;
  };
  const auto u8 = [](std::vector<std::int64_t> s) { return random_bytes(onnx_type::uint8, s, 9); };
  std::vector<bad> cases;
  {
    model_builder b(10);
    b.input("A", onnx_type::float32, {2, 3}).input("B", onnx_type::uint8, {3, 2});
    b.node("MatMulInteger", {"A", "B"}, {"Y"}).output("Y", onnx_type::int32);
    cases.push_back({"float A",
                     b.build(),
                     {npy_array::from<float>(std::vector<float>(6, 1.0f), {2, 3}), u8({3, 2})},
                     "expected uint8 or int8"});
  }
  {
    model_builder b(10);
    b.input("A", onnx_type::uint8, {2, 3}).input("B", onnx_type::uint8, {4, 2});
    b.node("MatMulInteger", {"A", "B"}, {"Y"}).output("Y", onnx_type::int32);
    cases.push_back({"inner dims", b.build(), {u8({2, 3}), u8({4, 2})}, "inner dimensions"});
  }
  {
    model_builder b(10);
    b.input("A", onnx_type::uint8, {2, 3}).input("B", onnx_type::uint8, {3, 2});
    zero_point_init(b, "a_zp", onnx_type::uint8, {1});
    zero_point_init(b, "b_zp", onnx_type::uint8, {1, 2, 3});
    b.node("MatMulInteger", {"A", "B", "a_zp", "b_zp"}, {"Y"}).output("Y", onnx_type::int32);
    cases.push_back({"b_zp length", b.build(), {u8({2, 3}), u8({3, 2})}, "one per column of B"});
  }
  {
    model_builder b(10);
    b.input("A", onnx_type::uint8, {2, 3}).input("B", onnx_type::uint8, {3, 2});
    zero_point_init(b, "a_zp", onnx_type::int8, {1});
    b.node("MatMulInteger", {"A", "B", "a_zp"}, {"Y"}).output("Y", onnx_type::int32);
    cases.push_back({"a_zp type", b.build(), {u8({2, 3}), u8({3, 2})}, "its input is uint8"});
  }
  {
    model_builder b(10);
    b.input("x", onnx_type::uint8, {1, 2, 4, 4});
    b.initializer("w", onnx_type::uint8, {3, 2, 2, 2}, std::vector<std::uint8_t>(24, 1));
    zero_point_init(b, "x_zp", onnx_type::uint8, {1, 2});
    b.node("ConvInteger", {"x", "w", "x_zp"}, {"y"}).output("y", onnx_type::int32);
    cases.push_back({"per-channel x_zp", b.build(), {u8({1, 2, 4, 4})}, "expected a scalar"});
  }
  {
    model_builder b(10);
    b.input("x", onnx_type::uint8, {1, 2, 4, 4});
    b.initializer("w", onnx_type::uint8, {3, 2, 2, 2}, std::vector<std::uint8_t>(24, 1));
    zero_point_init(b, "x_zp", onnx_type::uint8, {1});
    zero_point_init(b, "w_zp", onnx_type::uint8, {1, 2});
    b.node("ConvInteger", {"x", "w", "x_zp", "w_zp"}, {"y"}).output("y", onnx_type::int32);
    cases.push_back({"w_zp length", b.build(), {u8({1, 2, 4, 4})}, "one per output channel"});
  }
  {
    model_builder b(10);
    b.input("x", onnx_type::uint8, {1, 2, 4, 4});
    b.initializer("w", onnx_type::uint8, {3, 3, 2, 2}, std::vector<std::uint8_t>(36, 1));
    b.node("ConvInteger", {"x", "w"}, {"y"}).output("y", onnx_type::int32);
    cases.push_back({"channels", b.build(), {u8({1, 2, 4, 4})}, "disagree"});
  }
  {
    model_builder b(10);
    b.input("x", onnx_type::uint8, {1, 2, 4, 4, 4});
    b.initializer("w", onnx_type::uint8, {3, 2, 2, 2, 2}, std::vector<std::uint8_t>(48, 1));
    b.node("ConvInteger", {"x", "w"}, {"y"}).output("y", onnx_type::int32);
    cases.push_back({"3-D", b.build(), {u8({1, 2, 4, 4, 4})}, "only 1-D and 2-D"});
  }
  for (const auto& c : cases) {
    CAPTURE(c.what);
    const std::string op = c.model.graph().node(0).op_type();
    const std::string node = "node 'n0' (" + op + ")";
    CHECK_THROWS_WITH_AS((void)run_ours(c.model, c.inputs), doctest::Contains(node.c_str()),
                         qo::frontend_error);
    CHECK_THROWS_WITH_AS((void)run_ours(c.model, c.inputs), doctest::Contains(c.message),
                         qo::frontend_error);
  }
}
