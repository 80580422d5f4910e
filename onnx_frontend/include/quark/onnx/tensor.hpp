// SPDX-License-Identifier: MIT
// An owning, dense, row-major tensor of any ONNX element type: the value type exchanged between
// model I/O, the calibration runtime and the quantizer. Elements are stored unpacked in their
// quark C++ type (int4 as quark::int4, one per byte; float16 as quark::float16; ...), so callers
// can view them as std::span<const T>. Packing to ONNX's sub-byte layout happens only in I/O.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
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
/// An owning byte buffer aligned to 64 bytes (a cache line, an AVX-512 vector). Allocation leaves
/// the bytes indeterminate; copying is one memcpy and destruction one free at every optimisation
/// level. (A std::vector<std::byte> with a default-initialising allocator did the same only once
/// inlined: unoptimised, it constructed, copied and destroyed byte by byte, which made a Debug or
/// sanitizer build spend a quarter of a real-model quantization in those loops.)
///
/// The alignment comes from a plain allocation of up to 48 bytes more, not from aligned operator
/// new: glibc's memalign bypasses the thread caches and splits chunks, and with it quantizing
/// PP-OCRv4 det with 32 samples peaked at 165 MB instead of 94 MB (32 plain inferences: 106 MB
/// instead of 64 MB).
class byte_buffer {
 public:
  static constexpr std::size_t alignment = 64;

  byte_buffer() noexcept = default;
  explicit byte_buffer(std::size_t n) : n_(n) {
    if (n == 0)
      return;
    raw_.reset(static_cast<std::byte*>(::operator new(n + padding)));
    const auto at = reinterpret_cast<std::uintptr_t>(raw_.get());
    p_ = raw_.get() + ((alignment - at % alignment) % alignment);
  }
  byte_buffer(const byte_buffer& o) : byte_buffer(o.n_) {
    if (n_ != 0)
      std::memcpy(p_, o.p_, n_);
  }
  byte_buffer(byte_buffer&& o) noexcept
      : raw_(std::move(o.raw_)), p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  byte_buffer& operator=(const byte_buffer& o) {
    if (this != &o)
      *this = byte_buffer(o);
    return *this;
  }
  byte_buffer& operator=(byte_buffer&& o) noexcept {
    raw_ = std::move(o.raw_);
    p_ = std::exchange(o.p_, nullptr);
    n_ = std::exchange(o.n_, 0);
    return *this;
  }
  ~byte_buffer() = default;

  std::byte* data() noexcept { return p_; }
  const std::byte* data() const noexcept { return p_; }
  std::size_t size() const noexcept { return n_; }

 private:
  /// operator new returns __STDCPP_DEFAULT_NEW_ALIGNMENT__-aligned memory (16 on x86-64).
  static constexpr std::size_t padding = alignment - __STDCPP_DEFAULT_NEW_ALIGNMENT__;
  struct release {
    void operator()(std::byte* p) const noexcept { ::operator delete(p); }
  };

  std::unique_ptr<std::byte, release> raw_;
  std::byte* p_ = nullptr;
  std::size_t n_ = 0;
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
      : type_(type), shape_(std::move(shape)), data_(element_count(shape_) * element_size(type_)) {
    if (data_.size() != 0)
      std::memset(data_.data(), 0, data_.size());
  }
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
  std::span<std::byte> bytes() noexcept { return {data_.data(), data_.size()}; }
  std::span<const std::byte> bytes() const noexcept { return {data_.data(), data_.size()}; }

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
  detail::byte_buffer data_;
};

}  // namespace quark::onnx
