// SPDX-License-Identifier: MIT
// A minimal protobuf wire-format writer for the I/O tests: it builds ONNX ModelProto / TensorProto
// bytes field by field (field numbers from onnx.proto), including malformed ones the protobuf API
// would refuse to produce, without linking protobuf into the tests.
#pragma once

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

#include <unistd.h>

namespace io_wire {

/// One message under construction.
struct msg {
  std::string buf;

  msg& varint(int field, std::uint64_t v) {
    tag(field, 0);
    put_varint(v);
    return *this;
  }
  msg& i64(int field, std::int64_t v) { return varint(field, static_cast<std::uint64_t>(v)); }
  msg& f32(int field, float v) {
    tag(field, 5);
    char b[4];
    std::memcpy(b, &v, 4);
    buf.append(b, 4);
    return *this;
  }
  msg& f64(int field, double v) {
    tag(field, 1);
    char b[8];
    std::memcpy(b, &v, 8);
    buf.append(b, 8);
    return *this;
  }
  msg& bytes(int field, std::string_view s) {
    tag(field, 2);
    put_varint(s.size());
    buf.append(s);
    return *this;
  }
  msg& sub(int field, const msg& m) { return bytes(field, m.buf); }

 private:
  void tag(int field, int wire) {
    put_varint((static_cast<std::uint64_t>(field) << 3) | static_cast<std::uint64_t>(wire));
  }
  void put_varint(std::uint64_t v) {
    while (v >= 0x80) {
      buf.push_back(static_cast<char>((v & 0x7F) | 0x80));
      v >>= 7;
    }
    buf.push_back(static_cast<char>(v));
  }
};

// Field numbers (onnx.proto).
namespace tensor_f {
inline constexpr int dims = 1, data_type = 2, segment = 3, float_data = 4, int32_data = 5,
                     string_data = 6, int64_data = 7, name = 8, raw_data = 9, double_data = 10,
                     uint64_data = 11, external_data = 13, data_location = 14;
}  // namespace tensor_f
namespace attr_f {
inline constexpr int name = 1, f = 2, i = 3, s = 4, t = 5, g = 6, floats = 7, ints = 8, strings = 9,
                     type = 20;
inline constexpr int FLOAT = 1, INT = 2, STRING = 3, TENSOR = 4, GRAPH = 5, FLOATS = 6, INTS = 7;
}  // namespace attr_f

/// A TensorProto header: name, data_type, dims.
inline msg tensor(std::string_view name, int data_type, std::initializer_list<std::int64_t> dims) {
  msg m;
  for (auto d : dims)
    m.i64(tensor_f::dims, d);
  m.varint(tensor_f::data_type, static_cast<std::uint64_t>(data_type));
  m.bytes(tensor_f::name, name);
  return m;
}

/// A float32 tensor with raw_data.
inline msg float_tensor(std::string_view name, std::initializer_list<std::int64_t> dims,
                        const std::vector<float>& v) {
  msg m = tensor(name, 1, dims);
  std::string raw(v.size() * 4, '\0');
  if (!v.empty())
    std::memcpy(raw.data(), v.data(), raw.size());
  m.bytes(tensor_f::raw_data, raw);
  return m;
}

/// external_data entries + data_location = EXTERNAL.
inline msg& external(msg& t, std::string_view location, std::string_view offset = {},
                     std::string_view length = {}) {
  auto kv = [&](std::string_view k, std::string_view v) {
    msg e;
    e.bytes(1, k).bytes(2, v);
    t.sub(tensor_f::external_data, e);
  };
  kv("location", location);
  if (!offset.empty())
    kv("offset", offset);
  if (!length.empty())
    kv("length", length);
  t.varint(tensor_f::data_location, 1);
  return t;
}

/// ValueInfoProto for a tensor; dims < 0 are written as dim_param "d<k>" (k = -dim).
inline msg value_info(std::string_view name, int elem_type,
                      std::initializer_list<std::int64_t> dims, bool with_shape = true) {
  msg shape;
  for (auto d : dims) {
    msg dim;
    if (d >= 0) {
      dim.i64(1, d);
    } else {
      dim.bytes(2, "d" + std::to_string(-d));
    }
    shape.sub(1, dim);
  }
  msg tt;
  tt.varint(1, static_cast<std::uint64_t>(elem_type));
  if (with_shape)
    tt.sub(2, shape);
  msg type;
  type.sub(1, tt);
  msg v;
  v.bytes(1, name).sub(2, type);
  return v;
}

inline msg attr_int(std::string_view name, std::int64_t v) {
  msg a;
  a.bytes(attr_f::name, name).i64(attr_f::i, v).varint(attr_f::type, attr_f::INT);
  return a;
}
inline msg attr_float(std::string_view name, float v) {
  msg a;
  a.bytes(attr_f::name, name).f32(attr_f::f, v).varint(attr_f::type, attr_f::FLOAT);
  return a;
}
inline msg attr_ints(std::string_view name, std::initializer_list<std::int64_t> v) {
  msg a;
  a.bytes(attr_f::name, name);
  for (auto x : v)
    a.i64(attr_f::ints, x);
  a.varint(attr_f::type, attr_f::INTS);
  return a;
}
inline msg attr_floats(std::string_view name, std::initializer_list<float> v) {
  msg a;
  a.bytes(attr_f::name, name);
  for (auto x : v)
    a.f32(attr_f::floats, x);
  a.varint(attr_f::type, attr_f::FLOATS);
  return a;
}
inline msg attr_string(std::string_view name, std::string_view v) {
  msg a;
  a.bytes(attr_f::name, name).bytes(attr_f::s, v).varint(attr_f::type, attr_f::STRING);
  return a;
}
inline msg attr_tensor(std::string_view name, const msg& t) {
  msg a;
  a.bytes(attr_f::name, name).sub(attr_f::t, t).varint(attr_f::type, attr_f::TENSOR);
  return a;
}
inline msg attr_graph(std::string_view name, const msg& g) {
  msg a;
  a.bytes(attr_f::name, name).sub(attr_f::g, g).varint(attr_f::type, attr_f::GRAPH);
  return a;
}

/// NodeProto.
inline msg node(std::string_view op, std::initializer_list<std::string_view> inputs,
                std::initializer_list<std::string_view> outputs, std::string_view name = {},
                std::initializer_list<msg> attrs = {}, std::string_view domain = {}) {
  msg n;
  for (auto s : inputs)
    n.bytes(1, s);
  for (auto s : outputs)
    n.bytes(2, s);
  if (!name.empty())
    n.bytes(3, name);
  n.bytes(4, op);
  for (const auto& a : attrs)
    n.sub(5, a);
  if (!domain.empty())
    n.bytes(7, domain);
  return n;
}

/// GraphProto builder.
struct graph {
  msg m;
  graph() { m.bytes(2, "g"); }
  graph& add_node(const msg& n) {
    m.sub(1, n);
    return *this;
  }
  graph& add_initializer(const msg& t) {
    m.sub(5, t);
    return *this;
  }
  graph& add_input(const msg& v) {
    m.sub(11, v);
    return *this;
  }
  graph& add_output(const msg& v) {
    m.sub(12, v);
    return *this;
  }
  graph& add_value_info(const msg& v) {
    m.sub(13, v);
    return *this;
  }
};

/// ModelProto bytes: ir_version, opset imports (domain, version), graph.
inline std::string model(const graph& g, std::int64_t ir_version = 8,
                         std::initializer_list<std::pair<std::string_view, std::int64_t>> opsets = {
                             {"", 13}}) {
  msg m;
  m.i64(1, ir_version);
  for (const auto& [d, v] : opsets) {
    msg o;
    o.bytes(1, d).i64(2, v);
    m.sub(8, o);
  }
  m.sub(7, g.m);
  return m.buf;
}

/// The graph y = Relu(x) with x: float[N,3] (N symbolic), a model every test can start from.
inline graph relu_graph() {
  graph g;
  g.add_input(value_info("x", 1, {-1, 3}));
  g.add_output(value_info("y", 1, {-1, 3}));
  g.add_node(node("Relu", {"x"}, {"y"}, "relu"));
  return g;
}

/// A fresh temporary folder, removed with its contents at scope exit.
struct scratch_dir {
  std::filesystem::path path;
  scratch_dir() {
    static int counter = 0;
    path = std::filesystem::temp_directory_path() /
           ("quark_io_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~scratch_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::filesystem::path operator/(std::string_view name) const { return path / name; }
};

inline void write_file(const std::filesystem::path& p, std::string_view bytes) {
  std::ofstream(p, std::ios::binary)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace io_wire
