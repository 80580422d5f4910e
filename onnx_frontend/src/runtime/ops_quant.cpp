// SPDX-License-Identifier: MIT
// QuantizeLinear / DequantizeLinear with ONNX semantics: per-tensor, per-axis and blocked
// (opset 21) scales. The numbers come from quark::convert (round half to even, saturate).
#include <cmath>

#include <quark/core/concepts.hpp>
#include <quark/dtype/convert.hpp>

#include "runtime/kernel.hpp"
#include "runtime/registry.hpp"

namespace quark::onnx::rt {
namespace {

/// Maps each element of x to the index of its scale (and zero point).
struct scale_map {
  enum class kind { tensor, axis, block } k = kind::tensor;
  std::size_t inner = 1, dim = 1, block = 1, outer = 1, scale_dim = 1;

  std::size_t operator()(std::size_t i) const {
    switch (k) {
      case kind::tensor:
        return 0;
      case kind::axis:
        return (i / inner) % dim;
      case kind::block: {
        const std::size_t in = i % inner;
        const std::size_t a = (i / inner) % dim;
        const std::size_t o = i / (inner * dim);
        return (o * scale_dim + a / block) * inner + in;
      }
    }
    return 0;
  }
};

scale_map make_scale_map(const kernel_context& c, const tensor& x, const tensor& scale) {
  scale_map m;
  if (scale.size() == 1 && scale.rank() <= 1)
    return m;
  const std::size_t axis = norm_axis(c, c.n.attr_i("axis", 1), x.rank());
  m.dim = to_size(x.shape()[axis]);
  m.inner = 1;
  for (std::size_t d = axis + 1; d < x.rank(); ++d)
    m.inner *= to_size(x.shape()[d]);
  const std::int64_t block = c.n.attr_i("block_size", 0);
  if (block > 0) {
    m.k = scale_map::kind::block;
    m.block = to_size(block);
    if (scale.rank() != x.rank())
      c.fail("quark.onnx.shape", "blocked scale must have x's rank");
    m.scale_dim = to_size(scale.shape()[axis]);
    if (m.scale_dim != (m.dim + m.block - 1) / m.block) {
      c.fail("quark.onnx.shape", "blocked scale " + shape_string(scale.shape()) +
                                     " does not match x " + shape_string(x.shape()));
    }
    return m;
  }
  if (scale.rank() != 1 || to_size(scale.shape()[0]) != m.dim) {
    c.fail("quark.onnx.shape", "per-axis scale " + shape_string(scale.shape()) +
                                   " does not match axis " + std::to_string(axis) + " of " +
                                   shape_string(x.shape()));
  }
  m.k = scale_map::kind::axis;
  return m;
}

template <class T>
float as_float(T v) {
  if constexpr (std::is_arithmetic_v<T>) {
    return static_cast<float>(v);
  } else {
    return quark::to_float(v);
  }
}

void k_quantize(kernel_context& c) {
  const tensor& x = float_input(c, 0);
  const tensor& scale = float_input(c, 1);
  const tensor* zp = c.opt(2);
  dtype_id out_type = dtype_id::uint8;
  if (zp) {
    out_type = zp->type();
  } else if (c.n.has("output_dtype") && c.n.attr_i("output_dtype", 0) != 0) {
    out_type = dtype_from_onnx(static_cast<std::int32_t>(c.n.attr_i("output_dtype", 0)))
                   .value_or(dtype_id::undefined);
  }
  const bool saturate = c.n.attr_i("saturate", 1) != 0;
  const scale_map map = make_scale_map(c, x, scale);
  if (zp && zp->size() != scale.size())
    c.fail("quark.onnx.shape", "zero point and scale differ");
  tensor out(out_type, x.shape());
  const float* px = x.data<float>().data();
  const float* ps = scale.data<float>().data();
  quark::visit_dtype(out_type, [&](auto id) {
    using T = typename decltype(id)::type;
    if constexpr (quark::quantized_type<T>) {
      auto dst = out.data<T>();
      const T* pz = zp ? zp->data<T>().data() : nullptr;
      for (std::size_t i = 0; i < dst.size(); ++i) {
        const std::size_t s = map(i);
        const float v = px[i] / ps[s];
        if constexpr (quark::integral_data_type<T>) {
          // round(x / scale) first, then add the zero point, then saturate (ONNX order).
          const auto r = quark::convert<std::int32_t, quark::policies::onnx_quantize>(v);
          const float z = pz ? as_float(pz[s]) : 0.0f;
          dst[i] = quark::convert<T, quark::policies::onnx_quantize>(static_cast<float>(r) + z);
        } else {
          const float z = pz ? as_float(pz[s]) : 0.0f;
          dst[i] = saturate ? quark::convert<T, quark::policies::onnx_saturate>(v + z)
                            : quark::convert<T, quark::policies::onnx_no_saturate>(v + z);
        }
      }
    } else {
      c.fail("quark.onnx.runtime", "cannot quantize to " + std::string(dtype_name(out_type)));
    }
  });
  c.out(0) = std::move(out);
}

void k_dequantize(kernel_context& c) {
  const tensor& x = c.in(0);
  const tensor& scale = float_input(c, 1);
  const tensor* zp = c.opt(2);
  if (zp && zp->type() != x.type())
    c.fail("quark.onnx.runtime", "zero point type differs from x");
  const scale_map map = make_scale_map(c, x, scale);
  tensor out(dtype_id::float32, x.shape());
  const float* ps = scale.data<float>().data();
  float* dst = out.data<float>().data();
  quark::visit_dtype(x.type(), [&](auto id) {
    using T = typename decltype(id)::type;
    auto src = x.data<T>();
    const T* pz = zp ? zp->data<T>().data() : nullptr;
    for (std::size_t i = 0; i < src.size(); ++i) {
      const std::size_t s = map(i);
      const float z = pz ? as_float(pz[s]) : 0.0f;
      dst[i] = (as_float(src[i]) - z) * ps[s];
    }
  });
  c.out(0) = std::move(out);
}

}  // namespace

void register_quant(registry_map& r) {
  r["QuantizeLinear"] = k_quantize;
  r["DequantizeLinear"] = k_dequantize;
}

}  // namespace quark::onnx::rt
