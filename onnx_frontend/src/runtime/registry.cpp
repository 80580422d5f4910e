// SPDX-License-Identifier: MIT
#include "runtime/registry.hpp"

#include <algorithm>

#include "runtime/kernel.hpp"

namespace quark::onnx::rt {
namespace {
const registry_map& registry() {
  static const registry_map r = [] {
    registry_map m;
    register_elementwise(m);
    register_linalg(m);
    register_conv(m);
    register_pool(m);
    register_norm(m);
    register_reduce(m);
    register_shape_ops(m);
    register_index_ops(m);
    register_misc_ops(m);
    register_resize(m);
    register_einsum(m);
    register_detection(m);
    register_signal(m);
    register_loss(m);
    register_quant(m);
    register_integer(m);
    register_rnn(m);
    register_control(m);
    register_quark_ops(m);
    register_contrib(m);
    return m;
  }();
  return r;
}
}  // namespace

kernel_fn find_kernel(std::string_view op) {
  const auto& r = registry();
  auto it = r.find(op);
  return it == r.end() ? nullptr : it->second;
}

std::vector<std::string> registered_ops() {
  std::vector<std::string> ops;
  for (const auto& [name, fn] : registry())
    ops.push_back(name);
  return ops;
}

// ---- shared helpers declared in kernel.hpp -----------------------------------------------

shape_t broadcast_shapes(const kernel_context& c, const shape_t& a, const shape_t& b) {
  const std::size_t r = std::max(a.size(), b.size());
  shape_t out(r);
  for (std::size_t i = 0; i < r; ++i) {
    const std::int64_t da = i + a.size() >= r ? a[i + a.size() - r] : 1;
    const std::int64_t db = i + b.size() >= r ? b[i + b.size() - r] : 1;
    if (da == db || db == 1) {
      out[i] = da;
    } else if (da == 1) {
      out[i] = db;
    } else {
      c.fail("quark.onnx.shape",
             "shapes " + shape_string(a) + " and " + shape_string(b) + " do not broadcast");
    }
  }
  return out;
}

std::vector<std::size_t> broadcast_strides(const shape_t& in, const shape_t& out) {
  std::vector<std::size_t> st(out.size(), 0);
  const auto own = strides_of(in);
  const std::size_t off = out.size() - in.size();
  for (std::size_t i = 0; i < in.size(); ++i)
    st[i + off] = in[i] == 1 ? 0 : own[i];
  return st;
}

std::vector<std::int64_t> read_ints(const kernel_context& c, const tensor& t) {
  std::vector<std::int64_t> v;
  v.reserve(t.size());
  if (t.type() == dtype_id::int64) {
    for (auto x : t.data<std::int64_t>())
      v.push_back(x);
  } else if (t.type() == dtype_id::int32) {
    for (auto x : t.data<std::int32_t>())
      v.push_back(x);
  } else {
    c.fail("quark.onnx.runtime",
           "expected an int64 or int32 tensor, got " + std::string(dtype_name(t.type())));
  }
  return v;
}

std::vector<double> read_doubles(const tensor& t) {
  std::vector<double> v(t.size());
  quark::visit_dtype(t.type(), [&](auto id) {
    using T = typename decltype(id)::type;
    auto d = t.data<T>();
    for (std::size_t i = 0; i < d.size(); ++i) {
      if constexpr (std::is_arithmetic_v<T>) {
        v[i] = static_cast<double>(d[i]);
      } else {
        v[i] = static_cast<double>(quark::to_float(d[i]));
      }
    }
  });
  return v;
}

}  // namespace quark::onnx::rt
