// SPDX-License-Identifier: MIT
// What an operator kernel sees (its node, inputs, outputs, the thread pool) and the helpers most
// kernels share: errors that name the node, axis normalisation, numpy broadcasting, type dispatch.
#pragma once

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <limits>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include <quark/core/saturate.hpp>
#include <quark/dtype/convert.hpp>
#include <quark/dtype/formats.hpp>
#include <quark/onnx/error.hpp>
#include <quark/onnx/runtime.hpp>
#include <quark/onnx/tensor.hpp>

#include "runtime/graph.hpp"
#include "runtime/thread_pool.hpp"

namespace quark::onnx::rt {

struct kernel_context {
  const node& n;
  std::vector<const tensor*> inputs;  ///< nullptr for an absent optional input
  std::vector<tensor> outputs;        ///< one per node output, filled by the kernel
  /// reusable[i]: input i as a mutable tensor when this node is its last consumer and nothing
  /// else refers to it, so a kernel may move it into an output and compute in place.
  std::vector<tensor*> reusable;
  thread_pool& pool;
  /// Runs a subgraph (If branches, Loop and Scan bodies) in the current scope with its formal
  /// inputs (graph::inputs) bound in order to `args` (empty for If); returns its outputs. The
  /// body owns `args`, so its nodes may compute in place in them.
  std::function<std::vector<tensor>(const graph&, std::vector<tensor> args)> run_subgraph;
  /// Where a kernel that streams its output 0 hands each computed chunk (chunk_sink), or null.
  const chunk_sink* chunks = nullptr;

  /// Hands `rows` runs of `cols` values of output 0 (run r at data + r * stride), just computed
  /// by the thread of `part`, to the chunk sink if there is one.
  void stream(std::size_t part, const float* data, std::size_t rows, std::size_t cols,
              std::size_t stride) const {
    if (chunks)
      (*chunks)(part, value_chunk{data, rows, cols, stride});
  }

  std::size_t input_count() const noexcept { return inputs.size(); }
  bool has_input(std::size_t i) const noexcept { return i < inputs.size() && inputs[i]; }
  const tensor& in(std::size_t i) const {
    if (!has_input(i))
      fail("quark.onnx.runtime", "missing input #" + std::to_string(i));
    return *inputs[i];
  }
  const tensor* opt(std::size_t i) const noexcept { return has_input(i) ? inputs[i] : nullptr; }
  /// An output buffer of `type` and `shape`: input i's own storage when it is reusable and has
  /// that type and shape (take element pointers of the inputs before calling this), else new.
  tensor output_like(std::initializer_list<std::size_t> candidates, dtype_id type,
                     const shape_t& shape) {
    for (std::size_t i : candidates) {
      tensor* r = i < reusable.size() ? reusable[i] : nullptr;
      if (r && r->type() == type && r->shape() == shape) {
        reusable[i] = nullptr;
        return std::move(*r);
      }
    }
    // A reused input holds old values, so callers overwrite every element: no zero fill.
    return tensor(type, shape, uninitialized);
  }
  tensor& out(std::size_t i) {
    if (i >= outputs.size())
      fail("quark.onnx.runtime", "missing output #" + std::to_string(i));
    return outputs[i];
  }
  std::size_t output_count() const noexcept { return outputs.size(); }
  [[noreturn]] void fail(const std::string& id, const std::string& message) const {
    throw frontend_error(id, n.describe() + ": " + message);
  }
};

/// Values per chunk of a streamed output (kernel_context::stream): large enough that a sink's
/// per-call setup stays small, small enough that a chunk is still in cache when it is handed on.
inline constexpr std::size_t stream_chunk = std::size_t{1} << 17;

/// Calls body(part, begin, end) for consecutive chunks of `per` items covering [0, n), taken in
/// turn by the pool's threads (a thread that starts late takes fewer). `part` < pool.size()
/// names the calling thread's share: one thread per part at a time, as a chunk_sink requires.
template <class F>
void for_each_chunk(thread_pool& pool, std::size_t n, std::size_t per, F&& body) {
  const std::size_t chunks = (n + per - 1) / per;
  std::atomic<std::size_t> next{0};
  pool.parallel_for(std::min<std::size_t>(pool.size(), chunks), 1,
                    [&](std::size_t lo, std::size_t hi) {
                      for (std::size_t part = lo; part < hi; ++part) {
                        for (std::size_t i = next.fetch_add(1, std::memory_order_relaxed);
                             i < chunks; i = next.fetch_add(1, std::memory_order_relaxed)) {
                          body(part, i * per, std::min(n, (i + 1) * per));
                        }
                      }
                    });
}

// ---- shapes -------------------------------------------------------------------------------

/// Fails unless the two operands have one element type.
inline void require_same_type(const kernel_context& c, const tensor& a, const tensor& b) {
  if (a.type() != b.type()) {
    c.fail("quark.onnx.runtime", "operand types differ: " + std::string(dtype_name(a.type())) +
                                     " and " + std::string(dtype_name(b.type())));
  }
}

inline std::string shape_string(const shape_t& s) {
  std::string r = "[";
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (i)
      r += ',';
    r += std::to_string(s[i]);  // (not `"," + to_string`: GCC 12 -Wrestrict false positive)
  }
  r += ']';
  return r;
}

inline std::size_t to_size(std::int64_t v) {
  return static_cast<std::size_t>(v);
}
inline std::int64_t to_i64(std::size_t v) {
  return static_cast<std::int64_t>(v);
}

/// Strides, dilations, pads and kernel sizes above this are refused: no input is 2^31 wide, and
/// the bound keeps every extent computation ((k - 1) d + 1, s (in - 1)) far from overflow.
inline constexpr std::int64_t max_extent = std::int64_t{1} << 31;

/// Refuses an output of more than 2^31 elements before it is allocated: strides, pads or
/// kernel sizes of 2^40 from a malformed model asked for outputs of 2^44 bytes and more.
inline void check_output_elements(const kernel_context& c, const shape_t& shape) {
  double n = 1.0;
  for (const auto d : shape)
    n *= static_cast<double>(d);
  if (n > static_cast<double>(max_extent)) {
    c.fail("quark.onnx.unsupported_op", "output shape " + shape_string(shape) +
                                            " exceeds the supported maximum of 2^31 elements");
  }
}

/// Row-major strides in elements.
inline std::vector<std::size_t> strides_of(const shape_t& s) {
  std::vector<std::size_t> st(s.size());
  std::size_t acc = 1;
  for (std::size_t i = s.size(); i-- > 0;) {
    st[i] = acc;
    acc *= to_size(s[i]);
  }
  return st;
}

/// Normalises a possibly negative axis against `rank`; fails outside [-rank, rank).
inline std::size_t norm_axis(const kernel_context& c, std::int64_t axis, std::size_t rank) {
  const auto r = to_i64(rank);
  if (axis < -r || axis >= r) {
    c.fail("quark.onnx.shape",
           "axis " + std::to_string(axis) + " out of range for rank " + std::to_string(rank));
  }
  return to_size(axis < 0 ? axis + r : axis);
}

/// The numpy broadcast of two shapes; fails naming both.
shape_t broadcast_shapes(const kernel_context& c, const shape_t& a, const shape_t& b);

/// Strides of `in` as seen from an output of shape `out` (0 on broadcast dimensions).
std::vector<std::size_t> broadcast_strides(const shape_t& in, const shape_t& out);

/// Reads an int64 or int32 tensor as int64 values (shape/axes/pads inputs).
std::vector<std::int64_t> read_ints(const kernel_context& c, const tensor& t);

/// Reads a float-like scalar or tensor as doubles (any numeric type).
std::vector<double> read_doubles(const tensor& t);

// ---- type dispatch ------------------------------------------------------------------------

template <class T>
inline constexpr bool is_float_v = std::is_same_v<T, float> || std::is_same_v<T, double>;

/// Calls f(std::type_identity<T>{}) for the plain numeric types the kernels compute in.
template <class F>
decltype(auto) dispatch_numeric(const kernel_context& c, dtype_id t, F&& f) {
  switch (t) {
    case dtype_id::float32:
      return f(std::type_identity<float>{});
    case dtype_id::float64:
      return f(std::type_identity<double>{});
    case dtype_id::int8:
      return f(std::type_identity<std::int8_t>{});
    case dtype_id::uint8:
      return f(std::type_identity<std::uint8_t>{});
    case dtype_id::int16:
      return f(std::type_identity<std::int16_t>{});
    case dtype_id::uint16:
      return f(std::type_identity<std::uint16_t>{});
    case dtype_id::int32:
      return f(std::type_identity<std::int32_t>{});
    case dtype_id::uint32:
      return f(std::type_identity<std::uint32_t>{});
    case dtype_id::int64:
      return f(std::type_identity<std::int64_t>{});
    case dtype_id::uint64:
      return f(std::type_identity<std::uint64_t>{});
    default:
      break;
  }
  c.fail("quark.onnx.runtime", "element type " + std::string(dtype_name(t)) + " not supported");
}

/// float32 and float64 only.
template <class F>
decltype(auto) dispatch_float(const kernel_context& c, dtype_id t, F&& f) {
  switch (t) {
    case dtype_id::float32:
      return f(std::type_identity<float>{});
    case dtype_id::float64:
      return f(std::type_identity<double>{});
    default:
      break;
  }
  c.fail("quark.onnx.runtime",
         "element type " + std::string(dtype_name(t)) + " not supported (float32/float64 only)");
}

/// double -> integer T: truncates, saturates to T's range, NaN -> 0 (quark/core/saturate.hpp).
using quark::saturate_cast;

/// Every element type a tensor can hold, for data movement kernels (copy by bytes).
inline std::size_t elem_bytes(const tensor& t) {
  return element_size(t.type());
}

/// Requires a float32 input.
inline const tensor& float_input(const kernel_context& c, std::size_t i) {
  const tensor& t = c.in(i);
  if (t.type() != dtype_id::float32) {
    c.fail("quark.onnx.runtime", "input '" + c.n.inputs[i] + "' is " +
                                     std::string(dtype_name(t.type())) + ", expected float32");
  }
  return t;
}

}  // namespace quark::onnx::rt
