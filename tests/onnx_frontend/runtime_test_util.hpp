// SPDX-License-Identifier: MIT
// What the runtime's hand-derived operator tests share: loading a model written with io_wire,
// initializers and typed input tensors, reading outputs back, and the error message of a failing
// run.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <doctest/doctest.h>

#include <quark/onnx/error.hpp>
#include <quark/onnx/runtime.hpp>

#include "io_wire.hpp"

namespace runtime_test {

using quark::dtype_id;
using quark::onnx::runtime;
using quark::onnx::shape_t;
using quark::onnx::tensor;

inline runtime load(const std::string& bytes) {
  return runtime::from_bytes(
      std::span<const std::byte>(reinterpret_cast<const std::byte*>(bytes.data()), bytes.size()));
}

/// A tensor of `type` and `shape` holding `v` (T must be the type's element type).
template <class T>
tensor make(dtype_id type, shape_t shape, const std::vector<T>& v) {
  tensor t(type, std::move(shape));
  REQUIRE(t.size() == v.size());
  std::copy(v.begin(), v.end(), t.data<T>().begin());
  return t;
}
inline tensor f32(shape_t shape, const std::vector<float>& v) {
  return make(dtype_id::float32, std::move(shape), v);
}
inline tensor f64(shape_t shape, const std::vector<double>& v) {
  return make(dtype_id::float64, std::move(shape), v);
}
inline tensor i32(shape_t shape, const std::vector<std::int32_t>& v) {
  return make(dtype_id::int32, std::move(shape), v);
}
inline tensor i64(shape_t shape, const std::vector<std::int64_t>& v) {
  return make(dtype_id::int64, std::move(shape), v);
}

template <class T = float>
std::vector<T> values_of(const tensor& t) {
  const auto d = t.data<T>();
  return std::vector<T>(d.begin(), d.end());
}

/// An initializer named `name` of ONNX element type `type` holding `v` (raw_data).
template <class T>
io_wire::msg init(std::string_view name, int type, std::initializer_list<std::int64_t> dims,
                  const std::vector<T>& v) {
  io_wire::msg m = io_wire::tensor(name, type, dims);
  std::string raw(v.size() * sizeof(T), '\0');
  if (!v.empty())
    std::memcpy(raw.data(), v.data(), raw.size());
  m.bytes(io_wire::tensor_f::raw_data, raw);
  return m;
}

/// The frontend_error message of one run, or "" when the run succeeds; `id` receives its id.
inline std::string run_error(const runtime& rt, const std::map<std::string, tensor>& feeds,
                             std::string* id = nullptr) {
  try {
    (void)rt.run(feeds);
  } catch (const quark::onnx::frontend_error& e) {
    if (id)
      *id = e.id();
    return e.what();
  }
  return {};
}

inline bool has(const std::string& s, std::string_view part) {
  return s.find(part) != std::string::npos;
}

}  // namespace runtime_test
