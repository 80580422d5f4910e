// SPDX-License-Identifier: MIT
// TensorProto reading and writing for every ONNX data_type code 1..26 (including 17..26, which
// Debian's onnx 1.12 enum lacks): raw_data, the typed fields, sub-byte packing, and rejection of
// inconsistent tensors.
#include <cstdint>
#include <cstring>

#include <doctest/doctest.h>

// The onnx headers (which bring in dtype_id.hpp) come first: GCC 12's -Wshadow misfires on the
// scoped dtype_id enumerators when the same-named format types are declared before them.
#include <quark/onnx/io.hpp>
#include <quark/onnx/model.hpp>
// (a separate include block, so clang-format keeps this order)

#include <quark/dtype/formats.hpp>
#include <quark/dtype/traits.hpp>

#include "onnx_frontend/io_wire.hpp"

namespace qo = quark::onnx;
using namespace io_wire;

namespace {

/// A tensor of type `id` and shape {3, 5} whose elements walk through many bit patterns.
qo::tensor sample_tensor(quark::dtype_id id) {
  qo::tensor t(id, {3, 5});
  quark::visit_dtype(id, [&](auto tag) {
    using T = typename decltype(tag)::type;
    auto d = t.data<T>();
    for (std::size_t i = 0; i < d.size(); ++i) {
      if constexpr (std::is_same_v<T, bool>) {
        d[i] = i % 3 == 1;
      } else if constexpr (std::is_floating_point_v<T>) {
        d[i] = static_cast<T>(static_cast<int>(i) - 7) * static_cast<T>(0.375);
      } else if constexpr (requires { T::from_bits(0); }) {
        using S = typename T::storage_type;
        constexpr auto bits = static_cast<unsigned>(quark::dtype_traits<T>::bits);
        const auto mask = bits >= 16 ? 0xFFFFu : ((1u << bits) - 1u);
        d[i] = T::from_bits(static_cast<S>((i * 37u + 5u) & mask));
      } else {
        d[i] = static_cast<T>(static_cast<long long>(i) * 17 - 50);
      }
    }
  });
  return t;
}

bool same(const qo::tensor& a, const qo::tensor& b) {
  if (a.type() != b.type() || a.shape() != b.shape() || a.byte_size() != b.byte_size())
    return false;
  return (a.byte_size() == 0 ||
          std::memcmp(a.bytes().data(), b.bytes().data(), a.byte_size()) == 0);
}

bool numeric_code(int code) {
  return code != 8 && code != 14 && code != 15;
}

}  // namespace

TEST_CASE("every numeric data_type code 1..26 round-trips through model save and load") {
  scratch_dir dir;
  qo::model m;
  for (int code = 1; code <= 26; ++code) {
    if (!numeric_code(code))
      continue;
    const auto id = *quark::dtype_from_onnx(code);
    m.set_initializer("w" + std::to_string(code), sample_tensor(id));
  }
  m.save(dir / "all.onnx");
  const auto back = qo::model::load(dir / "all.onnx");
  const auto again = qo::model::from_bytes(m.to_bytes());
  for (int code = 1; code <= 26; ++code) {
    if (!numeric_code(code))
      continue;
    CAPTURE(code);
    const auto id = *quark::dtype_from_onnx(code);
    const auto want = sample_tensor(id);
    CHECK(same(back.initializer("w" + std::to_string(code)), want));
    CHECK(same(again.initializer("w" + std::to_string(code)), want));
  }
}

TEST_CASE("every numeric data_type code round-trips through raw_data and the typed fields") {
  for (int code = 1; code <= 26; ++code) {
    if (!numeric_code(code))
      continue;
    CAPTURE(code);
    const auto t = sample_tensor(*quark::dtype_from_onnx(code));
    for (auto enc : {qo::tensor_encoding::raw, qo::tensor_encoding::typed}) {
      const auto bytes = qo::tensor_to_bytes(t, "t", enc);
      const auto back = qo::tensor_from_bytes(bytes);
      CHECK(back.name == "t");
      CHECK(same(back.value, t));
    }
    CHECK(qo::tensor_to_bytes(t, "t", qo::tensor_encoding::raw) !=
          qo::tensor_to_bytes(t, "t", qo::tensor_encoding::typed));
  }
}

TEST_CASE("sub-byte raw_data is packed LSB-first (ONNX order)") {
  qo::tensor t(quark::dtype_id::int4, {3});
  auto d = t.data<quark::int4>();
  d[0] = quark::int4::from_bits(0x1);
  d[1] = quark::int4::from_bits(0xF);
  d[2] = quark::int4::from_bits(0x7);
  msg want = tensor("t", 22, {3});
  want.bytes(tensor_f::raw_data, std::string("\xF1\x07", 2));
  CHECK(same(qo::tensor_from_bytes(want.buf).value, t));

  qo::tensor u(quark::dtype_id::uint2, {5});
  auto e = u.data<quark::uint2>();
  for (std::size_t i = 0; i < 5; ++i)
    e[i] = quark::uint2::from_bits(static_cast<std::uint8_t>(i % 4));
  msg want2 = tensor("u", 25, {5});
  want2.bytes(tensor_f::raw_data, std::string("\xE4\x00", 2));  // 0,1,2,3 | 0
  CHECK(same(qo::tensor_from_bytes(want2.buf).value, u));
}

TEST_CASE("typed fields are read as the ONNX spec assigns them") {
  SUBCASE("int8 in int32_data") {
    msg t = tensor("a", 3, {3});
    t.i64(tensor_f::int32_data, -128).i64(tensor_f::int32_data, 5).i64(tensor_f::int32_data, 127);
    const auto v = qo::tensor_from_bytes(t.buf).value;
    CHECK(v.data<std::int8_t>()[0] == -128);
    CHECK(v.data<std::int8_t>()[2] == 127);
  }
  SUBCASE("float16 bit patterns in int32_data") {
    msg t = tensor("h", 10, {2});
    t.varint(tensor_f::int32_data, 0x3C00).varint(tensor_f::int32_data, 0xC000);
    const auto v = qo::tensor_from_bytes(t.buf).value;
    CHECK(v.data<quark::float16>()[0].to_bits() == 0x3C00);
    CHECK(v.data<quark::float16>()[1].to_bits() == 0xC000);
  }
  SUBCASE("float8e4m3fn (code 17) and e8m0 (code 24) in int32_data") {
    msg t = tensor("f8", 17, {1});
    t.varint(tensor_f::int32_data, 0x38);
    CHECK(qo::tensor_from_bytes(t.buf).value.data<quark::float8_e4m3fn>()[0].to_bits() == 0x38);
    msg s = tensor("e8", 24, {1});
    s.varint(tensor_f::int32_data, 127);
    CHECK(qo::tensor_from_bytes(s.buf).value.data<quark::float8_e8m0fnu>()[0].to_bits() == 127);
  }
  SUBCASE("int4 packed two per int32_data entry") {
    msg t = tensor("q", 22, {3});
    t.varint(tensor_f::int32_data, 0xF1).varint(tensor_f::int32_data, 0x07);
    const auto v = qo::tensor_from_bytes(t.buf).value;
    CHECK(v.data<quark::int4>()[0].to_bits() == 0x1);
    CHECK(v.data<quark::int4>()[1].to_bits() == 0xF);
    CHECK(v.data<quark::int4>()[2].to_bits() == 0x7);
  }
  SUBCASE("uint32 in uint64_data, int64 in int64_data, double in double_data, bool in int32_data") {
    msg a = tensor("u32", 12, {1});
    a.varint(tensor_f::uint64_data, 4294967295u);
    CHECK(qo::tensor_from_bytes(a.buf).value.data<std::uint32_t>()[0] == 4294967295u);
    msg b = tensor("i64", 7, {1});
    b.i64(tensor_f::int64_data, -5);
    CHECK(qo::tensor_from_bytes(b.buf).value.data<std::int64_t>()[0] == -5);
    msg c = tensor("f64", 11, {1});
    c.f64(tensor_f::double_data, 2.5);
    CHECK(qo::tensor_from_bytes(c.buf).value.data<double>()[0] == 2.5);
    msg d = tensor("b", 9, {2});
    d.varint(tensor_f::int32_data, 1).varint(tensor_f::int32_data, 0);
    CHECK(qo::tensor_from_bytes(d.buf).value.data<bool>()[0]);
    CHECK_FALSE(qo::tensor_from_bytes(d.buf).value.data<bool>()[1]);
  }
  SUBCASE("float in float_data") {
    msg t = tensor("f", 1, {2});
    t.f32(tensor_f::float_data, 1.5f).f32(tensor_f::float_data, -2.0f);
    const auto v = qo::tensor_from_bytes(t.buf).value;
    CHECK(v.data<float>()[0] == 1.5f);
    CHECK(v.data<float>()[1] == -2.0f);
  }
}

TEST_CASE("inconsistent tensors are rejected with the tensor's name and code") {
  auto error_of = [](const std::string& bytes) {
    try {
      qo::tensor_from_bytes(bytes);
    } catch (const qo::frontend_error& e) {
      CHECK(e.id() == "quark.onnx.tensor");
      return std::string(e.what());
    }
    return std::string("no error");
  };
  msg a = tensor("big", 3, {3});
  a.i64(tensor_f::int32_data, 300).i64(tensor_f::int32_data, 0).i64(tensor_f::int32_data, 0);
  CHECK(error_of(a.buf).find("tensor 'big' (data_type 3): int32_data holds 300") !=
        std::string::npos);

  msg b = tensor("short", 1, {4});
  b.bytes(tensor_f::raw_data, std::string(12, '\0'));
  CHECK(error_of(b.buf).find(
            "tensor 'short' (data_type 1): raw_data holds 12 bytes, shape needs 16") !=
        std::string::npos);

  msg c = tensor("code27", 27, {1});
  CHECK(error_of(c.buf).find("data_type 27 is not an ONNX type") != std::string::npos);

  msg d = tensor("neg", 1, {2, -3});
  CHECK(error_of(d.buf).find("tensor 'neg' (data_type 1): negative dim -3 at axis 1") !=
        std::string::npos);

  msg e = tensor("wrongfield", 3, {1});
  e.f32(tensor_f::float_data, 1.0f);
  CHECK(error_of(e.buf).find("float_data is not the field for data_type 3") != std::string::npos);

  msg f = tensor("nodata", 1, {5});
  CHECK(error_of(f.buf).find("float_data holds 0 entries, shape needs 5") != std::string::npos);

  msg g = tensor("huge", 1, {1LL << 40, 1LL << 40});
  CHECK(error_of(g.buf).find("element count overflows") != std::string::npos);

  msg h = tensor("fp16", 10, {1});
  h.varint(tensor_f::int32_data, 0x10000);
  CHECK(error_of(h.buf).find("not a bit pattern") != std::string::npos);

  CHECK(error_of("\xff\xff\xff").find("not a valid TensorProto") != std::string::npos);

  msg s = tensor("str", 8, {1});
  s.bytes(tensor_f::string_data, "hello");
  CHECK(error_of(s.buf).find("tensor 'str' (data_type 8): no quark::onnx::tensor representation") !=
        std::string::npos);
}

TEST_CASE("string and complex initializers survive a model round trip untouched") {
  graph g = relu_graph();
  msg s = tensor("s", 8, {2});
  s.bytes(tensor_f::string_data, "ab").bytes(tensor_f::string_data, "c");
  msg c64 = tensor("c64", 14, {1});
  c64.bytes(tensor_f::raw_data, std::string(8, '\x01'));
  msg c128 = tensor("c128", 15, {1});
  c128.f64(tensor_f::double_data, 1.0).f64(tensor_f::double_data, -1.0);
  g.add_initializer(s).add_initializer(c64).add_initializer(c128);
  const auto m = qo::model::from_bytes(model(g));
  scratch_dir dir;
  m.save(dir / "m.onnx", {.external_data = true, .external_threshold = 0});
  const auto back = qo::model::load(dir / "m.onnx");
  CHECK(back.initializer_names() == std::vector<std::string>{"s", "c64", "c128"});
  CHECK(qo::model::from_bytes(back.to_bytes()).to_bytes() == back.to_bytes());
  CHECK_THROWS_WITH_AS(back.initializer("s"), doctest::Contains("(data_type 8)"),
                       qo::frontend_error);
  CHECK_THROWS_WITH_AS(back.initializer("c128"), doctest::Contains("(data_type 15)"),
                       qo::frontend_error);
}

TEST_CASE("tensor files save atomically and load") {
  scratch_dir dir;
  const auto t = sample_tensor(quark::dtype_id::float8_e5m2fnuz);
  qo::save_tensor(dir / "t.pb", t, "x", qo::tensor_encoding::typed);
  const auto back = qo::load_tensor(dir / "t.pb");
  CHECK(back.name == "x");
  CHECK(same(back.value, t));
  CHECK_THROWS_AS(qo::load_tensor(dir / "missing.pb"), qo::frontend_error);
}

TEST_CASE(
    "tensor storage: zeroed, aligned for every element type, deep copies, moves leave it empty") {
  namespace qo = quark::onnx;
  qo::tensor a(quark::dtype_id::float32, {3, 5});
  REQUIRE(a.byte_size() == 60);
  CHECK(reinterpret_cast<std::uintptr_t>(a.bytes().data()) % 64 == 0);
  for (const float x : a.data<float>())
    CHECK(x == 0.0f);
  for (std::size_t i = 0; i < a.size(); ++i)
    a.data<float>()[i] = static_cast<float>(i) + 0.5f;

  qo::tensor b = a;  // copy: same values, its own bytes
  CHECK(b.bytes().data() != a.bytes().data());
  CHECK(reinterpret_cast<std::uintptr_t>(b.bytes().data()) % 64 == 0);
  b.data<float>()[7] = -1.0f;
  CHECK(a.data<float>()[7] == 7.5f);
  CHECK(b.data<float>()[8] == 8.5f);

  qo::tensor c(quark::dtype_id::int8, {2});
  c = a;  // copy-assignment replaces type, shape and bytes
  CHECK(c.type() == quark::dtype_id::float32);
  CHECK(c.byte_size() == 60);
  CHECK(c.data<float>()[14] == 14.5f);
  const qo::tensor& self = c;
  c = self;  // self-assignment keeps the values
  CHECK(c.data<float>()[3] == 3.5f);

  const std::byte* where = a.bytes().data();
  qo::tensor d = std::move(a);  // move: the bytes change owner, the source holds none
  CHECK(d.bytes().data() == where);
  CHECK(a.byte_size() == 0);  // NOLINT(bugprone-use-after-move): checking the moved-from state
  CHECK(d.data<float>()[14] == 14.5f);

  // Small (heap) and large (mmapped) allocations alike; every byte is usable (ASan checks the
  // padding in front stays outside).
  for (const std::int64_t n : {1, 17, 63, 64, 4097, 1 << 20, (3 << 20) + 5}) {
    CAPTURE(n);
    qo::tensor t(quark::dtype_id::uint8, {n});
    CHECK(reinterpret_cast<std::uintptr_t>(t.bytes().data()) % 64 == 0);
    std::memset(t.bytes().data(), 0xab, t.bytes().size());
    const qo::tensor u = t;
    CHECK(reinterpret_cast<std::uintptr_t>(u.bytes().data()) % 64 == 0);
    CHECK(std::memcmp(u.bytes().data(), t.bytes().data(), t.bytes().size()) == 0);
  }

  const qo::tensor empty(quark::dtype_id::float32, {0, 4});
  CHECK(empty.byte_size() == 0);
  CHECK(empty.data<float>().empty());
  const qo::tensor copy_of_empty = empty;
  CHECK(copy_of_empty.byte_size() == 0);
}
