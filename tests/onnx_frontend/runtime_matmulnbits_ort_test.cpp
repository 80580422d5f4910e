// SPDX-License-Identifier: MIT
// com.microsoft MatMulNBits in our runtime against ONNX Runtime 1.30 and against a direct
// reading of the layout (reference_weights below: bit shifts on the bytes, double sums).
//
// What ONNX Runtime 1.30's CPU provider does, as these tests found it:
//  * bits 2, 4 and 8 run, with and without packed uint8 zero points, with a bias, for a 1-D,
//    2-D and 3-D A (a 1-D A gives a 1-D Y of N values); codes in the padding of the last block
//    (K not a multiple of block_size) and the unused bits of the last zero-point byte are ignored.
//  * float zero points run for bits 2 and 4 and dequantize as code * scale - zero_point * scale
//    (two roundings; (code - zero_point) * scale differs in the last bit for about half the
//    values), bit for bit on an identity A; for bits 8 ORT refuses them ("Only 2b and 4b
//    quantization is supported for unpacked compute"), so the runtime's 8-bit float zero points
//    are checked against the direct loop only.
//  * a g_idx input, even the trivial k / block_size, takes another path whose results differ
//    (packed zero points read in another layout, the default zero point applied in another
//    rounding); the runtime refuses a non-empty g_idx.
//  * accuracy_level 0 and 1 compute in fp32 (a relative error of 1e-7 of the magnitude sum);
//    level 4 quantizes A to int8 per block, so it is compared against the bound of that rounding
//    (half a step of A's largest magnitude per value) instead.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
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

enum class zp_kind { none, packed, floats };

/// One MatMulNBits node: A's shape (last dimension K), N, bits, block_size, the zero points,
/// whether it has a bias, accuracy_level.
struct nbits_case {
  std::vector<std::int64_t> a;
  std::int64_t n = 0;
  int bits = 4;
  std::int64_t block = 32;
  zp_kind zp = zp_kind::none;
  bool bias = false;
  std::int64_t level = 0;

  std::size_t k() const { return static_cast<std::size_t>(a.back()); }
  std::size_t cols() const { return static_cast<std::size_t>(n); }
  std::size_t rows() const {
    std::size_t m = 1;
    for (std::size_t i = 0; i + 1 < a.size(); ++i)
      m *= static_cast<std::size_t>(a[i]);
    return m;
  }
  std::size_t k_blocks() const {
    return (k() + static_cast<std::size_t>(block) - 1) / static_cast<std::size_t>(block);
  }
  std::size_t blob() const {
    return static_cast<std::size_t>(block) * static_cast<std::size_t>(bits) / 8;
  }
  std::size_t zp_bytes() const { return (k_blocks() * static_cast<std::size_t>(bits) + 7) / 8; }
};

/// A MatMulNBits node's inputs (B, scales and zero points as the quantizer stores them) and the
/// attributes it carries (changed by the error tests).
struct nbits_data {
  std::vector<float> a;
  std::vector<std::int64_t> b_shape;
  int b_type = onnx_type::uint8;
  std::vector<std::uint8_t> b;
  std::vector<float> scales;
  int zp_type = onnx_type::uint8;
  std::vector<std::uint8_t> zp_packed;
  std::vector<float> zp_floats;
  std::vector<std::int32_t> g_idx;
  bool with_g_idx = false;
  std::vector<float> bias;
  std::vector<attribute> attrs;
};

/// Random codes (every byte of B random, the padding of the last block included), scales of
/// both signs (as symmetric quantization gives), random packed zero points (unused bits of the
/// last byte random too) or float zero points in [0, 2^bits), a bias and an A of N(0, 1).
nbits_data make_data(const nbits_case& s, unsigned seed) {
  std::mt19937 g(seed);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> magnitude(0.01f, 0.1f);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  nbits_data d;
  d.b_shape = {s.n, static_cast<std::int64_t>(s.k_blocks()), static_cast<std::int64_t>(s.blob())};
  d.b.resize(s.cols() * s.k_blocks() * s.blob());
  for (auto& v : d.b)
    v = static_cast<std::uint8_t>(byte(g));
  d.scales.resize(s.cols() * s.k_blocks());
  for (auto& v : d.scales)
    v = byte(g) % 2 == 0 ? magnitude(g) : -magnitude(g);
  if (s.zp == zp_kind::packed) {
    d.zp_packed.resize(s.cols() * s.zp_bytes());
    for (auto& v : d.zp_packed)
      v = static_cast<std::uint8_t>(byte(g));
  } else if (s.zp == zp_kind::floats) {
    std::uniform_real_distribution<float> z(0.0f, static_cast<float>(1 << s.bits));
    d.zp_floats.resize(s.cols() * s.k_blocks());
    for (auto& v : d.zp_floats)
      v = z(g);
  }
  if (s.bias) {
    d.bias.resize(s.cols());
    for (auto& v : d.bias)
      v = normal(g);
  }
  d.a.resize(s.rows() * s.k());
  for (auto& v : d.a)
    v = normal(g);
  d.attrs = {attr_int("K", s.a.back()), attr_int("N", s.n), attr_int("bits", s.bits),
             attr_int("block_size", s.block), attr_int("accuracy_level", s.level)};
  return d;
}

std::int64_t size_of(std::size_t n) {
  return static_cast<std::int64_t>(n);
}

/// Y = MatMulNBits(A, B, scales[, zero_points][, g_idx][, bias]): A a graph input, the rest
/// initializers, absent optional inputs left as "".
::onnx::ModelProto nbits_model(const nbits_case& s, const nbits_data& d) {
  model_builder b(21);
  b.opset("com.microsoft", 1);
  b.input("A", onnx_type::float32, s.a);
  b.initializer("B", d.b_type, d.b_shape, d.b);
  b.initializer("scales", onnx_type::float32, {size_of(d.scales.size())}, d.scales);
  std::vector<std::string> ins{"A", "B", "scales", "", "", ""};
  if (!d.zp_packed.empty()) {
    b.initializer("zero_points", d.zp_type, {size_of(d.zp_packed.size())}, d.zp_packed);
    ins[3] = "zero_points";
  } else if (!d.zp_floats.empty()) {
    b.initializer("zero_points", onnx_type::float32, {size_of(d.zp_floats.size())}, d.zp_floats);
    ins[3] = "zero_points";
  }
  if (d.with_g_idx) {
    b.initializer("g_idx", onnx_type::int32, {size_of(d.g_idx.size())}, d.g_idx);
    ins[4] = "g_idx";
  }
  if (!d.bias.empty()) {
    b.initializer("bias", onnx_type::float32, {size_of(d.bias.size())}, d.bias);
    ins[5] = "bias";
  }
  while (ins.back().empty())
    ins.pop_back();
  std::vector<std::int64_t> out = s.a;
  if (!out.empty())  // (a scalar A, refused, gets a Y of unknown shape)
    out.back() = s.n;
  b.node("MatMulNBits", ins, {"Y"}, d.attrs, "com.microsoft").output("Y", onnx_type::float32, out);
  return b.build();
}

/// W [K, N] read directly from the layout: code k of column n is bits [k bits, (k + 1) bits) of
/// the column's byte stream; zero point j of column n likewise in its zero-point bytes.
std::vector<float> reference_weights(const nbits_case& s, const nbits_data& d) {
  const std::size_t k = s.k(), n = s.cols(), kb = s.k_blocks();
  const std::size_t bits = static_cast<std::size_t>(s.bits);
  const unsigned mask = (1u << bits) - 1u;
  const std::size_t col = kb * s.blob();
  std::vector<float> w(k * n);
  for (std::size_t j = 0; j < n; ++j) {
    for (std::size_t i = 0; i < k; ++i) {
      const std::size_t at = i * bits;
      const unsigned code = (static_cast<unsigned>(d.b[j * col + at / 8]) >> (at % 8)) & mask;
      const std::size_t blk = i / static_cast<std::size_t>(s.block);
      const float scale = d.scales[j * kb + blk];
      if (!d.zp_floats.empty()) {
        const float zero = d.zp_floats[j * kb + blk];
        const float scaled = static_cast<float>(code) * scale;
        const float offset = zero * scale;
        w[i * n + j] = scaled - offset;
        continue;
      }
      unsigned zero = 1u << (bits - 1);
      if (!d.zp_packed.empty()) {
        const std::size_t zat = blk * bits;
        zero = (static_cast<unsigned>(d.zp_packed[j * s.zp_bytes() + zat / 8]) >> (zat % 8)) & mask;
      }
      w[i * n + j] = static_cast<float>(static_cast<int>(code) - static_cast<int>(zero)) * scale;
    }
  }
  return w;
}

qo::runtime load(const ::onnx::ModelProto& m, unsigned threads = 0) {
  qo::runtime_options o;
  o.threads = threads;
  return qo::runtime::from_bytes(std::as_bytes(std::span<const char>(m.SerializeAsString())), ".",
                                 o);
}

qo::tensor a_tensor(const nbits_case& s, const nbits_data& d) {
  qo::tensor t(quark::dtype_id::float32, qo::shape_t(s.a.begin(), s.a.end()));
  std::copy(d.a.begin(), d.a.end(), t.data<float>().begin());
  return t;
}

/// Our Y, on `threads` threads.
std::vector<float> run_ours(const nbits_case& s, const nbits_data& d, unsigned threads = 0) {
  const auto y = load(nbits_model(s, d), threads).run({{"A", a_tensor(s, d)}}).at("Y");
  qo::shape_t expect(s.a.begin(), s.a.end());
  expect.back() = s.n;
  REQUIRE(y.shape() == expect);
  return {y.data<float>().begin(), y.data<float>().end()};
}

/// ONNX Runtime's Y.
std::vector<float> run_onnxruntime(const nbits_case& s, const nbits_data& d) {
  const auto out =
      run_ort(nbits_model(s, d),
              {npy_array::from<float>(d.a, std::vector<std::size_t>(s.a.begin(), s.a.end()))});
  const npy_array& y = out.at("Y");
  std::vector<std::size_t> expect(s.a.begin(), s.a.end());
  expect.back() = s.cols();
  REQUIRE(y.shape == expect);
  return y.values<float>();
}

/// Per output value: the exact product (in double, from the reference weights), the sum of the
/// magnitudes of its terms, and the largest |A| of its row (the int8 rounding bound of level 4).
struct expected_y {
  std::vector<double> value, magnitude, w_abs_sum, a_max;
};

expected_y expect(const nbits_case& s, const nbits_data& d) {
  const std::vector<float> w = reference_weights(s, d);
  const std::size_t m = s.rows(), k = s.k(), n = s.cols();
  expected_y e;
  e.value.resize(m * n);
  e.magnitude.resize(m * n);
  e.w_abs_sum.resize(m * n);
  e.a_max.resize(m * n);
  for (std::size_t r = 0; r < m; ++r) {
    const float* ar = d.a.data() + r * k;
    double a_max = 0.0;
    for (std::size_t i = 0; i < k; ++i)
      a_max = std::max(a_max, std::fabs(static_cast<double>(ar[i])));
    for (std::size_t j = 0; j < n; ++j) {
      double v = d.bias.empty() ? 0.0 : static_cast<double>(d.bias[j]);
      double mag = std::fabs(v);
      double w_abs = 0.0;
      for (std::size_t i = 0; i < k; ++i) {
        const double t = static_cast<double>(ar[i]) * static_cast<double>(w[i * n + j]);
        v += t;
        mag += std::fabs(t);
        w_abs += std::fabs(static_cast<double>(w[i * n + j]));
      }
      e.value[r * n + j] = v;
      e.magnitude[r * n + j] = mag;
      e.w_abs_sum[r * n + j] = w_abs;
      e.a_max[r * n + j] = a_max;
    }
  }
  return e;
}

/// y agrees with the exact values within `rel` of each value's magnitude sum.
void check_close(const std::vector<float>& y, const expected_y& e, double rel, const char* who) {
  REQUIRE(y.size() == e.value.size());
  std::size_t bad = 0;
  double worst = 0.0;
  for (std::size_t i = 0; i < y.size(); ++i) {
    const double err = std::fabs(static_cast<double>(y[i]) - e.value[i]);
    worst = std::max(worst, err / std::max(e.magnitude[i], 1e-30));
    if (!(err <= rel * e.magnitude[i] + 1e-30))
      ++bad;
  }
  CAPTURE(who);
  CAPTURE(worst);
  CHECK(bad == 0);
}

/// Our Y (on 1 and 3 threads) and ONNX Runtime's agree with the exact product within 1e-5 of
/// each value's magnitude sum (level 4: ORT within its int8 rounding of A), and with each other.
void check_case(const nbits_case& s, unsigned seed) {
  CAPTURE(s.a.size());
  CAPTURE(s.k());
  CAPTURE(s.n);
  CAPTURE(s.bits);
  CAPTURE(s.block);
  CAPTURE(static_cast<int>(s.zp));
  CAPTURE(s.bias);
  CAPTURE(s.level);
  const nbits_data d = make_data(s, seed);
  const expected_y e = expect(s, d);
  const std::vector<float> ours = run_ours(s, d, 1);
  check_close(ours, e, 1e-5, "ours, 1 thread");
  check_close(run_ours(s, d, 3), e, 1e-5, "ours, 3 threads");
  const std::vector<float> ort = run_onnxruntime(s, d);
  if (s.level == 4) {
    // A quantized to int8 per block (scale max|A_block| / 127): each value of A moves by at
    // most half a step, max|A_row| / 254.
    std::size_t bad = 0;
    for (std::size_t i = 0; i < ort.size(); ++i) {
      const double err = std::fabs(static_cast<double>(ort[i]) - e.value[i]);
      const double bound = e.a_max[i] / 254.0 * e.w_abs_sum[i] * 1.001 + 1e-5 * e.magnitude[i];
      if (!(err <= bound))
        ++bad;
    }
    CHECK(bad == 0);
    return;
  }
  check_close(ort, e, 1e-5, "ONNX Runtime");
  std::size_t far = 0;
  for (std::size_t i = 0; i < ours.size(); ++i) {
    if (!(std::fabs(static_cast<double>(ours[i]) - static_cast<double>(ort[i])) <=
          1e-5 * e.magnitude[i] + 1e-30))
      ++far;
  }
  CHECK(far == 0);
}

/// A = the K x K identity: Y = W, which both runtimes must give exactly (one nonzero term per
/// sum), equal bit for bit to the reference weights.
void check_identity(nbits_case s, unsigned seed, bool with_ort) {
  CAPTURE(s.k());
  CAPTURE(s.n);
  CAPTURE(s.bits);
  CAPTURE(s.block);
  CAPTURE(static_cast<int>(s.zp));
  nbits_data d = make_data(s, seed);
  const std::size_t k = s.k();
  s.a = {s.a.back(), s.a.back()};
  d.a.assign(k * k, 0.0f);
  for (std::size_t i = 0; i < k; ++i)
    d.a[i * k + i] = 1.0f;
  const std::vector<float> w = reference_weights(s, d);
  CHECK(run_ours(s, d, 1) == w);
  CHECK(run_ours(s, d, 3) == w);
  if (with_ort)
    CHECK(run_onnxruntime(s, d) == w);
}

}  // namespace

TEST_CASE("MatMulNBits: A = identity gives W exactly, the layout read as ONNX Runtime reads it") {
  if (!ort_available())
    FAIL("ONNX Runtime is required: " << ort_unavailable_reason());
  unsigned seed = 100;
  for (const int bits : {2, 4, 8}) {
    for (const zp_kind zp : {zp_kind::none, zp_kind::packed, zp_kind::floats}) {
      // K = 100, block 16: 7 blocks (an odd count, the last zero-point nibble unused), 12
      // padding codes; 8-bit float zero points: ONNX Runtime refuses them.
      const bool ort = !(bits == 8 && zp == zp_kind::floats);
      check_identity({{100}, 7, bits, 16, zp}, seed++, ort);
      check_identity({{64}, 5, bits, 32, zp}, seed++, ort);
    }
  }
}

TEST_CASE("MatMulNBits matches ONNX Runtime for 4-bit weights") {
  if (!ort_available())
    FAIL("ONNX Runtime is required: " << ort_unavailable_reason());
  const std::vector<nbits_case> cases = {
      {{1, 64}, 8, 4, 32},                               // one token, K = 2 blocks
      {{5, 100}, 7, 4, 16, zp_kind::packed},             // padding, 7 blocks, odd N
      {{2, 3, 256}, 33, 4, 128, zp_kind::packed, true},  // 3-D A, block 128, bias
      {{6, 255}, 9, 4, 32, zp_kind::floats},             // odd K, float zero points
      {{48}, 5, 4, 16, zp_kind::packed, true},           // 1-D A: Y is [N]
      {{7, 96}, 16, 4, 32, zp_kind::packed, false, 1},   // accuracy_level 1
      {{37, 512}, 300, 4, 32, zp_kind::packed, true},    // several panels, rows split
      {{1, 256}, 1000, 4, 64, zp_kind::none, true},      // one token, many columns
      {{200, 128}, 16, 4, 16, zp_kind::packed},          // one panel, rows split over threads
      {{3, 1, 300}, 11, 4, 128, zp_kind::floats, true},  // K = 2 blocks + 44: padding of 84
      {{9, 64}, 12, 4, 16, zp_kind::packed, true, 4},    // accuracy_level 4: int8 A in ORT
      {{1, 200}, 10, 4, 32, zp_kind::none, false, 4},    // level 4, one token, padding
      // At most 4 rows read the codes directly (quark::nbits_dot_column): odd K (a lone last
      // code), blocks long enough for its 16-lane loop, both zero-point forms, bias.
      {{3, 37}, 6, 4, 16, zp_kind::packed},            // 3 rows, K odd, short last block
      {{4, 129}, 5, 4, 64, zp_kind::none, true},       // 4 rows, 64-code blocks, K odd
      {{2, 1, 255}, 9, 4, 32, zp_kind::packed, true},  // 3-D A of 2 rows, K odd
  };
  unsigned seed = 1;
  for (const auto& s : cases)
    check_case(s, seed++);
}

TEST_CASE("MatMulNBits matches ONNX Runtime for 8-bit and 2-bit weights") {
  if (!ort_available())
    FAIL("ONNX Runtime is required: " << ort_unavailable_reason());
  const std::vector<nbits_case> cases = {
      {{1, 64}, 8, 8, 32},                               // default zero point 128
      {{5, 100}, 7, 8, 16, zp_kind::packed},             // one zero point byte per block
      {{2, 3, 256}, 33, 8, 128, zp_kind::packed, true},  // 3-D A, bias
      {{40}, 5, 8, 16, zp_kind::none, true},             // 1-D A
      {{6, 255}, 9, 8, 32, zp_kind::packed, false, 1},   // odd K, level 1
      {{9, 64}, 12, 8, 16, zp_kind::packed, true, 4},    // level 4
      {{1, 64}, 8, 2, 32},                               // 2 bits: default zero point 2
      {{5, 100}, 7, 2, 16, zp_kind::packed, true},       // 7 blocks: 2 zero-point bytes
      {{2, 2, 130}, 6, 2, 64, zp_kind::floats},          // 2-bit float zero points
  };
  unsigned seed = 50;
  for (const auto& s : cases)
    check_case(s, seed++);
}

TEST_CASE("MatMulNBits with 8-bit float zero points agrees with the direct loop") {
  // ONNX Runtime 1.30 refuses them (see the top of the file): the runtime computes them as the
  // 2- and 4-bit ones, code * scale - zero_point * scale.
  const nbits_case s{{6, 100}, 9, 8, 16, zp_kind::floats, true};
  const nbits_data d = make_data(s, 77);
  const expected_y e = expect(s, d);
  check_close(run_ours(s, d, 1), e, 1e-5, "ours, 1 thread");
  check_close(run_ours(s, d, 3), e, 1e-5, "ours, 3 threads");
}

TEST_CASE("MatMulNBits takes an empty g_idx and M = 0 rows") {
  const nbits_case s{{4, 64}, 6, 4, 32, zp_kind::packed};
  nbits_data d = make_data(s, 3);
  const std::vector<float> without = run_ours(s, d);
  d.with_g_idx = true;  // g_idx of shape [0]
  CHECK(run_ours(s, d) == without);
  const nbits_case empty{{0, 64}, 6, 4, 32};
  CHECK(run_ours(empty, make_data(empty, 4)).empty());
}

TEST_CASE("MatMulNBits refuses malformed nodes, naming the node") {
  const nbits_case s{{3, 100}, 7, 4, 16, zp_kind::packed, true};
  const nbits_data good = make_data(s, 9);
  // Each case: a change to the node and a word its message must contain.
  auto refused = [&](nbits_data d, const std::string& what, const nbits_case& shape) {
    CAPTURE(what);
    qo::tensor a(quark::dtype_id::float32, qo::shape_t(shape.a.begin(), shape.a.end()));
    auto run = [&] { (void)load(nbits_model(shape, d)).run({{"A", a}}); };
    CHECK_THROWS_WITH_AS(run(), doctest::Contains("node 'n0' (MatMulNBits)"), qo::frontend_error);
    CHECK_THROWS_WITH_AS(run(), doctest::Contains(what.c_str()), qo::frontend_error);
  };
  auto with_attr = [&](const std::string& name, std::int64_t v) {
    nbits_data d = good;
    for (auto& a : d.attrs) {
      if (a.name == name)
        a.value = v;
    }
    return d;
  };
  auto without_attr = [&](const std::string& name) {
    nbits_data d = good;
    d.attrs.erase(std::remove_if(d.attrs.begin(), d.attrs.end(),
                                 [&](const attribute& a) { return a.name == name; }),
                  d.attrs.end());
    return d;
  };
  refused(without_attr("K"), "attribute 'K' is required", s);
  refused(without_attr("N"), "attribute 'N' is required", s);
  refused(without_attr("block_size"), "attribute 'block_size' is required", s);
  refused(with_attr("K", 0), "attribute 'K' is 0", s);
  refused(with_attr("N", -7), "attribute 'N' is -7", s);
  refused(with_attr("bits", 3), "attribute 'bits' is 3", s);
  refused(with_attr("bits", 16), "attribute 'bits' is 16", s);
  refused(with_attr("block_size", 24), "attribute 'block_size' is 24", s);
  refused(with_attr("block_size", 8), "attribute 'block_size' is 8", s);
  refused(with_attr("accuracy_level", 5), "attribute 'accuracy_level' is 5", s);
  {
    nbits_data d = good;
    d.attrs.push_back(attr_float("K", 100.0f));
    d.attrs.erase(d.attrs.begin());  // K given as a float
    refused(d, "attribute 'K' must be an int", s);
  }
  {  // A's last dimension is not K
    nbits_case other = s;
    other.a = {3, 99};
    refused(good, "last dimension must be K = 100", other);
    other.a = {};
    refused(good, "last dimension must be K = 100", other);
  }
  {  // K and N disagree with B's size
    nbits_case wider = s;
    wider.a = {3, 200};
    refused(with_attr("K", 200), "input 'B'", wider);
    refused(with_attr("N", 8), "input 'B'", s);
    refused(with_attr("block_size", 32), "input 'B'", s);
    refused(with_attr("bits", 8), "input 'B'", s);
    nbits_data d = good;
    d.b.pop_back();
    d.b_shape = {size_of(d.b.size())};
    refused(d, "input 'B'", s);
    d = good;
    d.b_type = onnx_type::int8;
    refused(d, "expected uint8", s);
  }
  {
    nbits_data d = good;
    d.scales.push_back(1.0f);
    refused(d, "input 'scales'", s);
  }
  {
    nbits_data d = good;
    d.zp_packed.pop_back();
    refused(d, "input 'zero_points'", s);
    d = good;
    d.zp_type = onnx_type::int8;
    refused(d, "expected uint8 (packed) or float32", s);
    d = good;
    d.zp_packed.clear();
    d.zp_floats.assign(good.scales.size() - 1, 8.0f);
    refused(d, "input 'zero_points'", s);
  }
  {
    nbits_data d = good;
    d.with_g_idx = true;
    for (std::int32_t k = 0; k < 100; ++k)
      d.g_idx.push_back(k / 16);
    refused(d, "g_idx", s);
  }
  {
    nbits_data d = good;
    d.bias.pop_back();
    refused(d, "input 'bias'", s);
  }
}
