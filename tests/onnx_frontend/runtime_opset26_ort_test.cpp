// SPDX-License-Identifier: MIT
// Operator sets 25 and 26 (ONNX 1.20 / 1.21) against ONNX Runtime 1.30, which runs both.
// Opset 25 adds the 2-bit types (int2, uint2) to Cast, CastLike, Constant, ConstantOfShape,
// QuantizeLinear, DequantizeLinear and the data-movement operators (Identity, Reshape, Transpose,
// Squeeze, Unsqueeze, Flatten, Pad, Shape, Size, If, Loop, Scan); opset 26 adds CumProd and
// BitCast. Every graph here is run by our runtime and by ORT and compared bit for bit; the Node
// binding cannot return 2-bit tensors, so they are cast to int8 inside the graph.
#include <cmath>
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
#include <quark/onnx/model.hpp>
#include <quark/onnx/runtime.hpp>

#include "support/ort.hpp"

namespace qo = quark::onnx;
using namespace quark::test;

namespace {

void require_ort() {
  if (!ort_available())
    FAIL("ONNX Runtime is required: " << ort_unavailable_reason());
}

qo::runtime runtime_of(const ::onnx::ModelProto& m) {
  return qo::runtime::from_bytes(std::as_bytes(std::span<const char>(m.SerializeAsString())), ".");
}

/// 2-bit codes (each -2..1 or 0..3) packed four to a byte, the first in the low bits.
std::vector<std::uint8_t> pack2(const std::vector<int>& codes) {
  std::vector<std::uint8_t> out((codes.size() + 3) / 4, 0);
  for (std::size_t i = 0; i < codes.size(); ++i)
    out[i / 4] = static_cast<std::uint8_t>(out[i / 4] | ((codes[i] & 3) << (2 * (i % 4))));
  return out;
}

/// Runs `m` in our runtime and `oracle` (default: `m`) in ORT on the float inputs `feeds` (graph
/// order) and requires every output to match byte for byte.
void check_same_as_ort(const ::onnx::ModelProto& m,
                       const std::vector<std::pair<std::string, std::vector<float>>>& feeds,
                       const std::vector<std::int64_t>& shape,
                       const ::onnx::ModelProto* oracle = nullptr) {
  std::map<std::string, qo::tensor> ours_in;
  std::vector<npy_array> ort_in;
  std::vector<std::size_t> ushape(shape.begin(), shape.end());
  for (const auto& [name, values] : feeds) {
    ours_in.emplace(name, qo::tensor::from_floats(shape, values));
    ort_in.push_back(npy_array::from(std::span<const float>(values), ushape));
  }
  const auto ours = runtime_of(m).run(ours_in);
  const auto ort = run_ort(oracle != nullptr ? *oracle : m, ort_in);
  REQUIRE(ort.size() == static_cast<std::size_t>(m.graph().output_size()));
  for (const auto& entry : ort) {
    const std::string& name = entry.first;
    const auto& theirs = entry.second;
    CAPTURE(name);
    REQUIRE(ours.count(name) == 1);
    const auto& t = ours.at(name);
    REQUIRE(t.byte_size() == theirs.bytes.size());
    if (std::memcmp(t.bytes().data(), theirs.bytes.data(), t.byte_size()) != 0) {
      const auto* a = reinterpret_cast<const std::uint8_t*>(t.bytes().data());
      for (std::size_t i = 0; i < t.byte_size(); ++i) {
        if (a[i] != theirs.bytes[i]) {
          FAIL_CHECK("first differing byte " << i << ": ours " << int(a[i]) << ", ORT "
                                             << int(theirs.bytes[i]));
          break;
        }
      }
    }
  }
}

/// Values over [-lim, lim] that hit the 2-bit rounding cases for scale `s`: exact ties of both
/// parities, their float neighbours, far out of range, -0.
std::vector<float> tie_values(std::size_t n, float s, unsigned seed) {
  std::mt19937 g(seed);
  std::uniform_int_distribution<int> k(-8, 8);
  std::uniform_int_distribution<int> kind(0, 4);
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    const float tie = (static_cast<float>(k(g)) + 0.5f) * s;
    switch (kind(g)) {
      case 0:
        v[i] = tie;
        break;
      case 1:
        v[i] = std::nextafter(tie, 100.0f);
        break;
      case 2:
        v[i] = std::nextafter(tie, -100.0f);
        break;
      case 3:
        v[i] = static_cast<float>(k(g)) * s;
        break;
      default:
        v[i] = static_cast<float>(k(g)) * 37.0f * s;
    }
  }
  v[0] = -0.0f;
  return v;
}

}  // namespace

namespace {

/// x [4, 8] -> QuantizeLinear -> q -> DequantizeLinear -> y, and q cast to int8 (q8), with
/// `type` zero points. `per` is "tensor", "axis" (8 scales along axis 1), "axis-as-blocks" (the
/// same parameters spelled as blocks of 1 over a [4, 8] scale: ORT's blocked path) or "blocks"
/// (blocks of 3 along axis 1).
::onnx::ModelProto qdq2_model(int type, const std::string& per) {
  const bool is_signed = type == onnx_type::int2;
  model_builder b(25);
  b.input("x", onnx_type::float32, {4, 8});
  std::vector<std::int64_t> sdims;
  std::vector<float> sv;
  std::vector<int> zv;
  auto param = [&](std::size_t i) {
    sv.push_back(0.1f + 0.05f * static_cast<float>(i));
    zv.push_back(is_signed ? static_cast<int>(i % 4) - 2 : static_cast<int>(i % 4));
  };
  if (per == "tensor") {
    param(1);
  } else if (per == "axis") {
    sdims = {8};
    for (std::size_t c = 0; c < 8; ++c)
      param(c);
  } else if (per == "axis-as-blocks") {
    sdims = {4, 8};
    for (std::size_t r = 0; r < 4; ++r)
      for (std::size_t c = 0; c < 8; ++c)
        param(c);
  } else {
    sdims = {4, 3};
    for (std::size_t i = 0; i < 12; ++i)
      param(i);
  }
  b.initializer("s", onnx_type::float32, sdims, sv);
  const auto zp = pack2(zv);
  b.initializer_raw("z", type, sdims, zp.data(), zp.size());
  std::vector<attribute> attrs;
  if (per != "tensor")
    attrs.push_back(attr_int("axis", 1));
  if (per == "axis-as-blocks")
    attrs.push_back(attr_int("block_size", 1));
  if (per == "blocks")
    attrs.push_back(attr_int("block_size", 3));
  b.node("QuantizeLinear", {"x", "s", "z"}, {"q"}, attrs);
  b.node("DequantizeLinear", {"q", "s", "z"}, {"y"}, attrs);
  b.node("Cast", {"q"}, {"q8"}, {attr_int("to", onnx_type::int8)});
  b.output("y", onnx_type::float32, {4, 8});
  b.output("q8", onnx_type::int8, {4, 8});
  return b.build();
}

}  // namespace

TEST_CASE("opset 25: int2 / uint2 QuantizeLinear and DequantizeLinear match ONNX Runtime") {
  require_ort();
  const std::vector<std::int64_t> shape{4, 8};
  for (const int type : {onnx_type::int2, onnx_type::uint2}) {
    CAPTURE(type);
    const auto x = tie_values(32, 0.2f, 2);
    check_same_as_ort(qdq2_model(type, "tensor"), {{"x", tie_values(32, 0.15f, 1)}}, shape);
    check_same_as_ort(qdq2_model(type, "blocks"), {{"x", x}}, shape);
    // ORT 1.30's per-axis QuantizeLinear reads 2-bit zero points and scales at the wrong
    // channel (its DequantizeLinear and blocked forms are right), so the per-axis model is
    // checked against ORT running the same parameters as blocks of one element.
    const auto as_blocks = qdq2_model(type, "axis-as-blocks");
    check_same_as_ort(qdq2_model(type, "axis"), {{"x", x}}, shape, &as_blocks);
  }
}

TEST_CASE("opset 25: Cast to and from int2 / uint2 follows ONNX (ORT where it agrees)") {
  require_ort();
  // In range and away from ties ORT 1.30 and ONNX's rule agree: compared bit for bit.
  std::vector<float> x;
  for (int k = -3; k <= 4; ++k)
    for (const float d : {-0.4f, -0.1f, 0.0f, 0.2f, 0.49f})
      x.push_back(static_cast<float>(k) + d);
  const std::vector<std::int64_t> shape{static_cast<std::int64_t>(x.size())};
  model_builder b(25);
  b.input("x", onnx_type::float32, shape);
  for (const int type : {onnx_type::int2, onnx_type::uint2}) {
    const std::string t = std::to_string(type);
    const bool is_signed = type == onnx_type::int2;
    // Clip the input to the type's range first (ORT wraps out-of-range values, ONNX saturates).
    b.initializer("lo" + t, onnx_type::float32, {}, std::vector<float>{is_signed ? -2.4f : -0.4f});
    b.initializer("hi" + t, onnx_type::float32, {}, std::vector<float>{is_signed ? 1.4f : 3.4f});
    b.node("Clip", {"x", "lo" + t, "hi" + t}, {"xc" + t});
    b.node("Cast", {"xc" + t}, {"c" + t}, {attr_int("to", type)});
    b.node("Cast", {"c" + t}, {"c" + t + "_f"}, {attr_int("to", onnx_type::float32)});
    b.node("Cast", {"c" + t}, {"c" + t + "_i32"}, {attr_int("to", onnx_type::int32)});
    b.node("Cast", {"c" + t}, {"c" + t + "_h"}, {attr_int("to", onnx_type::float16)});
    b.node("Cast", {"c" + t + "_h"}, {"c" + t + "_hf"}, {attr_int("to", onnx_type::float32)});
    b.output("c" + t + "_f", onnx_type::float32, shape);
    b.output("c" + t + "_i32", onnx_type::int32, shape);
    b.output("c" + t + "_hf", onnx_type::float32, shape);
    // integer source: int8 in range -> 2-bit -> int8
    b.node("Cast", {"c" + t + "_i32"}, {"i8" + t}, {attr_int("to", onnx_type::int8)});
    b.node("Cast", {"i8" + t}, {"i2" + t}, {attr_int("to", type)});
    b.node("Cast", {"i2" + t}, {"i2" + t + "_i8"}, {attr_int("to", onnx_type::int8)});
    b.output("i2" + t + "_i8", onnx_type::int8, shape);
    // CastLike to a 2-bit constant's type
    const auto like = pack2({0});
    b.initializer_raw("like" + t, type, {}, like.data(), like.size());
    b.node("CastLike", {"xc" + t, "like" + t}, {"cl" + t});
    b.node("Cast", {"cl" + t}, {"cl" + t + "_i8"}, {attr_int("to", onnx_type::int8)});
    b.output("cl" + t + "_i8", onnx_type::int8, shape);
  }
  check_same_as_ort(b.build(), {{"x", x}}, shape);
}

TEST_CASE("opset 25: Cast to int2 / uint2 rounds ties to even and saturates, as ONNX's reference") {
  // ONNX's reference implementation clips to the type's range and rounds half to even; ORT 1.30
  // rounds half away from zero and keeps the low two bits (2.5 -> -1, 100 -> 0, Inf -> 0), as
  // it does for int4 (docs/compatibility.md). Hand-derived expectations.
  const std::vector<float> x{-3.0f, -2.5f, -1.5f, -0.5f, 0.5f,  1.5f,  2.5f,
                             3.5f,  100.f, -1e9f, 1e30f, -0.0f, 0.49f, -2.0f};
  const std::vector<float> s2{-2.f, -2.f, -2.f, -0.f, 0.f, 1.f, 1.f,
                              1.f,  1.f,  -2.f, 1.f,  0.f, 0.f, -2.f};
  const std::vector<float> u2{0.f, 0.f, 0.f, 0.f, 0.f, 2.f, 2.f, 3.f, 3.f, 0.f, 3.f, 0.f, 0.f, 0.f};
  const std::vector<std::int64_t> shape{static_cast<std::int64_t>(x.size())};
  model_builder b(25);
  b.input("x", onnx_type::float32, shape);
  b.node("Cast", {"x"}, {"s"}, {attr_int("to", onnx_type::int2)});
  b.node("Cast", {"s"}, {"sf"}, {attr_int("to", onnx_type::float32)});
  b.node("Cast", {"x"}, {"u"}, {attr_int("to", onnx_type::uint2)});
  b.node("Cast", {"u"}, {"uf"}, {attr_int("to", onnx_type::float32)});
  b.output("sf", onnx_type::float32, shape);
  b.output("uf", onnx_type::float32, shape);
  std::map<std::string, qo::tensor> feeds;
  feeds.emplace("x", qo::tensor::from_floats(shape, x));
  const auto out = runtime_of(b.build()).run(feeds);
  const auto sf = out.at("sf").data<float>();
  const auto uf = out.at("uf").data<float>();
  for (std::size_t i = 0; i < x.size(); ++i) {
    CAPTURE(x[i]);
    CHECK(sf[i] == s2[i]);
    CHECK(uf[i] == u2[i]);
  }
}

namespace {

/// The data-movement operators of opset 25 on a `type` tensor (int2, or int8 for ORT's twin:
/// ORT 1.30 has no int2 kernel for Identity, Reshape, Squeeze, Unsqueeze, Flatten, Pad, Shape,
/// Size or Constant; values in [-2, 1] are the same in both), each result cast to int8.
::onnx::ModelProto movement_model(int type) {
  const std::vector<std::int64_t> shape{2, 3, 4};
  auto raw = [&](const std::vector<int>& v) {
    if (type == onnx_type::int2) {
      const auto p = pack2(v);
      return std::string(p.begin(), p.end());
    }
    std::string s;
    for (const int e : v)
      s.push_back(static_cast<char>(e));
    return s;
  };
  model_builder b(25);
  b.input("x", onnx_type::float32, shape);
  b.node("Cast", {"x"}, {"q"}, {attr_int("to", type)});
  auto out8 = [&](const std::string& v, std::vector<std::int64_t> s) {
    b.node("Cast", {v}, {v + "_i8"}, {attr_int("to", onnx_type::int8)});
    b.output(v + "_i8", onnx_type::int8, std::move(s));
  };
  b.node("Identity", {"q"}, {"id"});
  out8("id", shape);
  b.initializer("rs", onnx_type::int64, {2}, std::vector<std::int64_t>{6, 4});
  b.node("Reshape", {"q", "rs"}, {"re"});
  out8("re", {6, 4});
  b.node("Transpose", {"q"}, {"tr"}, {attr_ints("perm", {2, 0, 1})});
  out8("tr", {4, 2, 3});
  b.initializer("ax0", onnx_type::int64, {1}, std::vector<std::int64_t>{0});
  b.node("Unsqueeze", {"q", "ax0"}, {"un"});
  out8("un", {1, 2, 3, 4});
  b.node("Squeeze", {"un", "ax0"}, {"sq"});
  out8("sq", shape);
  b.node("Flatten", {"q"}, {"fl"}, {attr_int("axis", 2)});
  out8("fl", {6, 4});
  b.initializer("pads", onnx_type::int64, {6}, std::vector<std::int64_t>{0, 1, 0, 0, 0, 1});
  const std::string pv = raw({-2});
  b.initializer_raw("pv", type, {}, pv.data(), pv.size());
  b.node("Pad", {"q", "pads", "pv"}, {"pd"});
  out8("pd", {2, 4, 5});
  b.node("Shape", {"q"}, {"sh"});
  b.output("sh", onnx_type::int64, {3});
  b.node("Size", {"q"}, {"sz"});
  b.output("sz", onnx_type::int64, {});
  b.node("Constant", {}, {"k"});
  b.node("ConstantOfShape", {"sh"}, {"cs"});
  out8("k", {5});
  out8("cs", shape);
  auto m = b.build();
  for (auto& n : *m.mutable_graph()->mutable_node()) {
    if (n.op_type() != "Constant" && n.op_type() != "ConstantOfShape")
      continue;
    auto* a = n.add_attribute();
    a->set_name("value");
    a->set_type(::onnx::AttributeProto::TENSOR);
    a->mutable_t()->set_data_type(type);
    const bool k = n.op_type() == "Constant";
    a->mutable_t()->add_dims(k ? 5 : 1);
    a->mutable_t()->set_raw_data(k ? raw({1, -2, 0, -1, 1}) : raw({-1}));
  }
  return m;
}

}  // namespace

TEST_CASE("opset 25: int2 through Constant, ConstantOfShape and the data-movement operators") {
  require_ort();
  std::vector<float> x(24);
  for (std::size_t i = 0; i < x.size(); ++i)
    x[i] = static_cast<float>(static_cast<int>(i * 7 % 4) - 2);
  const auto twin = movement_model(onnx_type::int8);
  check_same_as_ort(movement_model(onnx_type::int2), {{"x", x}}, {2, 3, 4}, &twin);
}

TEST_CASE("opset 26: CumProd matches ONNX Runtime (float, int32, int64, exclusive, reverse)") {
  require_ort();
  const std::vector<std::int64_t> shape{3, 4, 5};
  std::vector<float> x(60);
  std::mt19937 g(7);
  std::uniform_real_distribution<float> u(-1.6f, 1.6f);
  for (auto& v : x)
    v = u(g);
  x[7] = 0.0f;
  x[11] = -0.0f;
  model_builder b(26);
  b.input("x", onnx_type::float32, shape);
  b.node("Mul", {"x", "three"}, {"x3"});
  b.initializer("three", onnx_type::float32, {}, std::vector<float>{3.0f});
  b.node("Cast", {"x3"}, {"xi"}, {attr_int("to", onnx_type::int32)});
  b.node("Cast", {"x3"}, {"xl"}, {attr_int("to", onnx_type::int64)});
  int k = 0;
  for (const std::int64_t axis : {0, 1, -1}) {
    for (const int exclusive : {0, 1}) {
      for (const int reverse : {0, 1}) {
        const std::string a = "a" + std::to_string(k);
        if (axis == 1)  // an int32 axis, as the schema allows
          b.initializer(a, onnx_type::int32, {}, std::vector<std::int32_t>{1});
        else
          b.initializer(a, onnx_type::int64, {}, std::vector<std::int64_t>{axis});
        for (const char* in : {"x", "xi", "xl"}) {
          const std::string o = std::string("cp_") + in + std::to_string(k);
          b.node("CumProd", {in, a}, {o},
                 {attr_int("exclusive", exclusive), attr_int("reverse", reverse)});
          b.output(o,
                   in[1] == 'i'   ? onnx_type::int32
                   : in[1] == 'l' ? onnx_type::int64
                                  : onnx_type::float32,
                   shape);
        }
        ++k;
      }
    }
  }
  const auto m = b.build();
  check_same_as_ort(m, {{"x", x}}, shape);
}

TEST_CASE("opset 26: BitCast matches ONNX Runtime between types of one width") {
  require_ort();
  std::vector<float> x{
      1.0f, -2.5f, 0.0f, -0.0f, 3.4e38f, 1e-40f, std::numeric_limits<float>::infinity(), 123.456f};
  const std::vector<std::int64_t> shape{static_cast<std::int64_t>(x.size())};
  model_builder b(26);
  b.input("x", onnx_type::float32, shape);
  auto bitcast = [&](const std::string& in, const std::string& out, int to) {
    b.node("BitCast", {in}, {out}, {attr_int("to", to)});
  };
  // 32 bits: float <-> int32 / uint32, and back
  bitcast("x", "f_i32", onnx_type::int32);
  bitcast("x", "f_u32", onnx_type::uint32);
  bitcast("f_u32", "f_u32_f", onnx_type::float32);
  b.output("f_i32", onnx_type::int32, shape);
  b.output("f_u32", onnx_type::uint32, shape);
  b.output("f_u32_f", onnx_type::float32, shape);
  // 64 bits: int64 <-> double (through the float's int32 bits widened)
  b.node("Cast", {"f_i32"}, {"l"}, {attr_int("to", onnx_type::int64)});
  bitcast("l", "l_d", onnx_type::float64);
  bitcast("l_d", "l_d_l", onnx_type::int64);
  b.output("l_d_l", onnx_type::int64, shape);
  // 16 bits: int16 -> uint16, int16 -> float16 / bfloat16 (read back as float); the narrow
  // integers are cast from values in range (ONNX leaves overflow undefined)
  b.initializer("lo", onnx_type::float32, {}, std::vector<float>{-100.0f});
  b.initializer("hi", onnx_type::float32, {}, std::vector<float>{100.0f});
  b.node("Clip", {"x", "lo", "hi"}, {"xs"});
  b.node("Cast", {"xs"}, {"s"}, {attr_int("to", onnx_type::int16)});
  bitcast("s", "s_u16", onnx_type::uint16);
  bitcast("s", "s_h", onnx_type::float16);
  bitcast("s", "s_b", onnx_type::bfloat16);
  b.node("Cast", {"s_h"}, {"s_hf"}, {attr_int("to", onnx_type::float32)});
  b.node("Cast", {"s_b"}, {"s_bf"}, {attr_int("to", onnx_type::float32)});
  b.output("s_u16", onnx_type::uint16, shape);
  b.output("s_hf", onnx_type::float32, shape);
  b.output("s_bf", onnx_type::float32, shape);
  // 8 bits: int8 -> uint8
  b.node("Cast", {"xs"}, {"c"}, {attr_int("to", onnx_type::int8)});
  bitcast("c", "c_u8", onnx_type::uint8);
  b.output("c_u8", onnx_type::uint8, shape);
  check_same_as_ort(b.build(), {{"x", x}}, shape);
}

TEST_CASE("opset 26: BitCast to float8, 4-bit and 2-bit types and bool, hand-derived") {
  // ORT 1.30 has no BitCast kernel for these; the expected values are the codes' meanings.
  const std::vector<float> x{56.0f, 60.0f, -128.0f, 127.0f, -1.0f, 0.0f};
  const std::vector<std::int64_t> shape{6};
  model_builder b(26);
  b.input("x", onnx_type::float32, shape);
  b.node("Cast", {"x"}, {"c"}, {attr_int("to", onnx_type::int8)});
  b.node("BitCast", {"c"}, {"e4"}, {attr_int("to", onnx_type::float8e4m3fn)});
  b.node("BitCast", {"c"}, {"e5"}, {attr_int("to", onnx_type::float8e5m2)});
  b.node("BitCast", {"c"}, {"bo"}, {attr_int("to", onnx_type::boolean)});
  b.node("Cast", {"e4"}, {"e4f"}, {attr_int("to", onnx_type::float32)});
  b.node("Cast", {"e5"}, {"e5f"}, {attr_int("to", onnx_type::float32)});
  b.node("Cast", {"bo"}, {"bof"}, {attr_int("to", onnx_type::float32)});
  // int4 -1 (code 0xF) -> uint4 15; int2 -1 (code 3) -> uint2 3; uint4 15 -> int4 -1
  b.node("Cast", {"x"}, {"n4"}, {attr_int("to", onnx_type::int4)});
  b.node("BitCast", {"n4"}, {"u4"}, {attr_int("to", onnx_type::uint4)});
  b.node("BitCast", {"u4"}, {"n4b"}, {attr_int("to", onnx_type::int4)});
  b.node("Cast", {"u4"}, {"u4f"}, {attr_int("to", onnx_type::float32)});
  b.node("Cast", {"n4b"}, {"n4bf"}, {attr_int("to", onnx_type::float32)});
  b.node("Clip", {"x", "lo", "hi"}, {"xc"});
  b.initializer("lo", onnx_type::float32, {}, std::vector<float>{-2.0f});
  b.initializer("hi", onnx_type::float32, {}, std::vector<float>{1.0f});
  b.node("Cast", {"xc"}, {"n2"}, {attr_int("to", onnx_type::int2)});
  b.node("BitCast", {"n2"}, {"u2"}, {attr_int("to", onnx_type::uint2)});
  b.node("Cast", {"u2"}, {"u2f"}, {attr_int("to", onnx_type::float32)});
  for (const char* o : {"e4f", "e5f", "bof", "u4f", "n4bf", "u2f"})
    b.output(o, onnx_type::float32, shape);
  std::map<std::string, qo::tensor> feeds;
  feeds.emplace("x", qo::tensor::from_floats(shape, x));
  const auto out = runtime_of(b.build()).run(feeds);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // e4m3fn: 0x38 = 1, 0x3C = 1.5, 0x80 = -0, 0x7F = NaN, 0xFF = NaN, 0x00 = 0
  // e5m2:   0x38 = 0.5, 0x3C = 1, 0x80 = -0, 0x7F = NaN, 0xFF = NaN, 0x00 = 0
  const std::map<std::string, std::vector<float>> want{
      {"e4f", {1.0f, 1.5f, -0.0f, nan, nan, 0.0f}},
      {"e5f", {0.5f, 1.0f, -0.0f, nan, nan, 0.0f}},
      {"bof", {1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 0.0f}},
      // int4 of 56, 60, -128, 127 saturates to 7, 7, -8, 7 (codes 7, 7, 8, 7); -1 is code 15
      {"u4f", {7.0f, 7.0f, 8.0f, 7.0f, 15.0f, 0.0f}},
      {"n4bf", {7.0f, 7.0f, -8.0f, 7.0f, -1.0f, 0.0f}},
      // int2 of the clipped values 1, 1, -2, 1, -1, 0: codes 1, 1, 2, 1, 3, 0
      {"u2f", {1.0f, 1.0f, 2.0f, 1.0f, 3.0f, 0.0f}}};
  for (const auto& entry : want) {
    const std::string& name = entry.first;
    const auto& w = entry.second;
    CAPTURE(name);
    const auto got = out.at(name).data<float>();
    for (std::size_t i = 0; i < w.size(); ++i) {
      CAPTURE(i);
      if (std::isnan(w[i]))
        CHECK(std::isnan(got[i]));
      else
        CHECK(std::memcmp(&got[i], &w[i], sizeof(float)) == 0);
    }
  }
}

TEST_CASE("opset 26: BitCast, CumProd and opsets past 26 are refused with clear errors") {
  auto message_of = [](const ::onnx::ModelProto& m, const std::vector<std::int64_t>& shape) {
    try {
      std::map<std::string, qo::tensor> feeds;
      feeds.emplace("x", qo::tensor::from_floats(shape, std::vector<float>(4, 1.0f)));
      (void)runtime_of(m).run(feeds);
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  {
    model_builder b(26);
    b.input("x", onnx_type::float32, {4});
    b.node("BitCast", {"x"}, {"y"}, {attr_int("to", onnx_type::int64)});
    b.output("y", onnx_type::int64, {4});
    const auto m = message_of(b.build(), {4});
    CHECK(m.find("float32 (32 bits) to int64 (64 bits)") != std::string::npos);
  }
  {
    // a float16 value lives widened to float32 in the runtime: its bits cannot be read back
    model_builder b(26);
    b.input("x", onnx_type::float32, {4});
    b.node("Cast", {"x"}, {"h"}, {attr_int("to", onnx_type::float16)});
    b.node("BitCast", {"h"}, {"y"}, {attr_int("to", onnx_type::int16)});
    b.output("y", onnx_type::int16, {4});
    const auto m = message_of(b.build(), {4});
    CHECK(m.find("BitCast of a float16 or bfloat16 value is not implemented") != std::string::npos);
  }
  {
    model_builder b(26);
    b.input("x", onnx_type::float32, {4});
    b.node("BitCast", {"x"}, {"y"}, {attr_int("to", 8)});  // string
    b.output("y", 8, {4});
    const auto m = message_of(b.build(), {4});
    CHECK(m.find("BitCast to data_type 8 is not supported") != std::string::npos);
  }
  {
    model_builder b(24);
    b.input("x", onnx_type::float32, {4});
    b.initializer("a", onnx_type::int64, {}, std::vector<std::int64_t>{0});
    b.node("CumProd", {"x", "a"}, {"y"});
    b.output("y", onnx_type::float32, {4});
    const auto m = message_of(b.build(), {4});
    CHECK(m.find("CumProd is an operator of opset 26") != std::string::npos);
  }
  {
    model_builder b(27);
    b.input("x", onnx_type::float32, {4});
    b.node("Relu", {"x"}, {"y"});
    b.output("y", onnx_type::float32, {4});
    const auto m = message_of(b.build(), {4});
    CHECK(m.find("ai.onnx 27") != std::string::npos);
    CHECK(m.find("up to 26") != std::string::npos);
  }
}
