// SPDX-License-Identifier: MIT
// An owning, dense, row-major tensor of any ONNX element type: the value type exchanged between
// model I/O, the calibration runtime and the quantizer. Elements are stored unpacked in their
// quark C++ type (int4 as quark::int4, one per byte; float16 as quark::float16; ...), so callers
// can view them as std::span<const T>. Packing to ONNX's sub-byte layout happens only in I/O.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <quark/dtype/dtype_id.hpp>
#include <quark/dtype/visit.hpp>
#include <quark/onnx/error.hpp>

namespace quark::onnx {

using shape_t = std::vector<std::int64_t>;

/// Number of elements of a shape (1 for a scalar, rank 0).
inline std::size_t element_count(const shape_t& shape) {
  std::size_t n = 1;
  for (auto d : shape)
    n *= static_cast<std::size_t>(d);
  return n;
}

/// Bytes one element occupies in memory (unpacked: sub-byte types take one byte).
inline std::size_t element_size(dtype_id t) {
  return quark::visit_dtype(t, [](auto id) { return sizeof(typename decltype(id)::type); });
}

namespace detail {
/// std::allocator whose value-less construct() default-initialises (leaves the bytes as they
/// are) instead of zeroing, so a buffer that is about to be overwritten is not written twice.
template <class T>
struct default_init_allocator : std::allocator<T> {
  using value_type = T;
  template <class U>
  struct rebind {
    using other = default_init_allocator<U>;
  };
  default_init_allocator() noexcept = default;
  template <class U>
  default_init_allocator(const default_init_allocator<U>&) noexcept {}  // NOLINT
  template <class U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
  template <class U, class... A>
  void construct(U* p, A&&... a) {
    std::construct_at(p, std::forward<A>(a)...);
  }
};
}  // namespace detail

/// Tag of tensor's constructor that leaves the elements uninitialised.
struct uninitialized_t {
  explicit uninitialized_t() = default;
};
inline constexpr uninitialized_t uninitialized{};

class tensor {
 public:
  tensor() = default;
  /// A tensor of zeros.
  tensor(dtype_id type, shape_t shape)
      : type_(type),
        shape_(std::move(shape)),
        data_(element_count(shape_) * element_size(type_), std::byte{0}) {}
  /// A tensor whose elements are indeterminate: for outputs the caller overwrites entirely
  /// (saves the zero fill, a sizeable part of a convolutional network's inference time).
  tensor(dtype_id type, shape_t shape, uninitialized_t)
      : type_(type), shape_(std::move(shape)), data_(element_count(shape_) * element_size(type_)) {}

  /// A float32 tensor holding `values` (size must match the shape).
  static tensor from_floats(shape_t shape, std::span<const float> values) {
    tensor t(dtype_id::float32, std::move(shape));
    if (values.size() != t.size()) {
      throw frontend_error("quark.onnx.shape", "from_floats: " + std::to_string(values.size()) +
                                                   " values for " + std::to_string(t.size()) +
                                                   " elements");
    }
    auto dst = t.data<float>();
    for (std::size_t i = 0; i < values.size(); ++i)
      dst[i] = values[i];
    return t;
  }

  dtype_id type() const noexcept { return type_; }
  const shape_t& shape() const noexcept { return shape_; }
  std::size_t rank() const noexcept { return shape_.size(); }
  std::size_t size() const noexcept { return element_count(shape_); }
  std::size_t byte_size() const noexcept { return data_.size(); }

  /// Typed views; T must be the C++ type of type() (checked).
  template <class T>
  std::span<T> data() {
    check<T>();
    return {reinterpret_cast<T*>(data_.data()), size()};
  }
  template <class T>
  std::span<const T> data() const {
    check<T>();
    return {reinterpret_cast<const T*>(data_.data()), size()};
  }
  std::span<std::byte> bytes() noexcept { return data_; }
  std::span<const std::byte> bytes() const noexcept { return data_; }

  /// Changes the shape without touching the data (element count must match).
  void reshape(shape_t shape) {
    if (element_count(shape) != size()) {
      throw frontend_error("quark.onnx.shape", "reshape changes the element count");
    }
    shape_ = std::move(shape);
  }

 private:
  template <class T>
  void check() const {
    const bool ok = quark::visit_dtype(type_, [](auto id) {
      return std::is_same_v<typename decltype(id)::type, std::remove_const_t<T>>;
    });
    if (!ok) {
      throw frontend_error("quark.onnx.dtype", "tensor of type " + std::string(dtype_name(type_)) +
                                                   " viewed as another element type");
    }
  }

  dtype_id type_ = dtype_id::float32;
  shape_t shape_;
  std::vector<std::byte, detail::default_init_allocator<std::byte>> data_;
};

}  // namespace quark::onnx
