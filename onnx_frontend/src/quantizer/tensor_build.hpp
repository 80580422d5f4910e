// SPDX-License-Identifier: MIT
// PRIVATE: building the tensors and nodes the quantizer writes (static_quant.cpp, dynamic.cpp):
// quantized weights (through quark::quantize), scale and zero-point initializers, Cast and
// binary nodes.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include <onnx/onnx_pb.h>

#include <quark/core/finite.hpp>
#include <quark/dtype/convert.hpp>
#include <quark/dtype/dtype_id.hpp>
#include <quark/dtype/visit.hpp>
#include <quark/onnx/error.hpp>
#include <quark/onnx/tensor.hpp>
#include <quark/quant/granularity.hpp>
#include <quark/quant/quantize.hpp>

namespace quark::onnx::qz {

/// An integer tensor of type `t` and `shape` holding `v` (already in range).
inline tensor int_tensor(dtype_id t, const shape_t& shape, const std::vector<std::int64_t>& v) {
  tensor out(t, shape);
  quark::visit_dtype(t, [&](auto id) {
    using D = typename decltype(id)::type;
    if constexpr (std::is_integral_v<D>) {
      auto d = out.data<D>();
      for (std::size_t i = 0; i < v.size() && i < d.size(); ++i)
        d[i] = static_cast<D>(v[i]);
    } else if constexpr (integral_data_type<D>) {  // int4 / uint4
      auto d = out.data<D>();
      for (std::size_t i = 0; i < v.size() && i < d.size(); ++i)
        d[i] = D(static_cast<int>(v[i]));
    }
  });
  return out;
}

/// A 1-D int64 tensor holding `v` (shapes, axes, Slice bounds).
inline tensor int64_tensor(const std::vector<std::int64_t>& v) {
  tensor t(dtype_id::int64, shape_t{static_cast<std::int64_t>(v.size())});
  std::copy(v.begin(), v.end(), t.data<std::int64_t>().begin());
  return t;
}

/// quantize(x) into a tensor of type t via quark::quantize: per tensor (axis < 0), per channel
/// (block 0) or per block of `block` along `axis`.
inline tensor quantize_values(const tensor& x, dtype_id t, std::span<const float> scales,
                              std::span<const std::int32_t> zps, std::int64_t axis,
                              std::int64_t qmin, std::int64_t qmax, std::int64_t block = 0) {
  tensor out(t, x.shape());
  std::vector<std::size_t> dims;
  for (auto d : x.shape())
    dims.push_back(static_cast<std::size_t>(d));
  const quark::tensor_shape shape{std::span<const std::size_t>(dims)};
  quark::granularity g = quark::per_tensor{};
  if (axis >= 0 && block > 0) {
    g = per_block{axis, static_cast<std::size_t>(block)};
  } else if (axis >= 0) {
    g = per_channel{axis};
  }
  bool done = false;
  quark::visit_dtype(t, [&](auto id) {
    using D = typename decltype(id)::type;
    if constexpr (quantized_type<D>) {
      std::vector<zero_point_t<D>> z;
      for (const auto v : zps)
        z.push_back(static_cast<zero_point_t<D>>(v));
      tensor_qparams<D> p{scales, z, g};
      if constexpr (integral_data_type<D>) {
        p.qmin = qmin;
        p.qmax = qmax;
      }
      quark::quantize<D>(shape, x.data<float>(), p, out.data<D>());
      done = true;
    }
  });
  if (!done) {
    throw not_implemented("quark.quantize.type", "storing " + std::string(dtype_name(t)) +
                                                     " weights is not implemented yet");
  }
  return out;
}

/// A zero-point tensor of type t holding `zps` (shape [] when scalar, `shape` when given).
inline tensor zero_point_tensor(dtype_id t, const std::vector<std::int32_t>& zps, bool scalar,
                                const shape_t& shape = {}) {
  tensor z(t, !shape.empty() ? shape
              : scalar       ? shape_t{}
                             : shape_t{static_cast<std::int64_t>(zps.size())});
  quark::visit_dtype(t, [&](auto id) {
    using T = typename decltype(id)::type;
    if constexpr (integral_data_type<T>) {
      auto d = z.data<T>();
      for (std::size_t i = 0; i < zps.size(); ++i)
        d[i] = static_cast<T>(zps[i]);
    } else if constexpr (floating_data_type<T>) {
      auto d = z.data<T>();
      for (std::size_t i = 0; i < zps.size(); ++i)
        d[i] = quark::convert<T, quark::policies::onnx_saturate>(static_cast<float>(zps[i]));
    }
  });
  return z;
}

inline tensor scale_tensor(const std::vector<float>& s, bool scalar, const shape_t& shape = {}) {
  tensor t(dtype_id::float32, !shape.empty() ? shape
                              : scalar       ? shape_t{}
                                             : shape_t{static_cast<std::int64_t>(s.size())});
  std::copy(s.begin(), s.end(), t.data<float>().begin());
  return t;
}

/// A node `op` named `name` reading `in`, writing `out`, with no attribute.
inline ::onnx::NodeProto make_op(const std::string& op, const std::string& name,
                                 std::initializer_list<std::string> in,
                                 std::initializer_list<std::string> out) {
  ::onnx::NodeProto n;
  n.set_op_type(op);
  n.set_name(name);
  for (const auto& i : in)
    n.add_input(i);
  for (const auto& o : out)
    n.add_output(o);
  return n;
}

/// "weight 'w' of node 'n' (Conv) holds NaN at element 5" for the first non-finite value of `v`,
/// the float input `name` (`role` "weight", "bias" or "initializer") of the node labelled `node`
/// (io/graph_util.hpp node_label), or "" when all are finite.
inline std::string non_finite_values(std::span<const float> v, const std::string& node,
                                     const std::string& name, const char* role) {
  const auto bad = quark::first_non_finite(v);
  if (!bad)
    return {};
  return std::string(role) + " '" + name + "' of " + node + " holds " +
         quark::non_finite_name(v[*bad]) + " at element " + std::to_string(*bad);
}

/// Adds the int attribute `name` = `v` to `n`.
inline void add_int_attribute(::onnx::NodeProto& n, const char* name, std::int64_t v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(::onnx::AttributeProto::INT);
  a->set_i(v);
}

/// Adds the ints attribute `name` = `v` to `n`.
inline void add_ints_attribute(::onnx::NodeProto& n, const char* name,
                               const std::vector<std::int64_t>& v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(::onnx::AttributeProto::INTS);
  for (const auto x : v)
    a->add_ints(x);
}

/// Adds the float attribute `name` = `v` to `n`.
inline void add_float_attribute(::onnx::NodeProto& n, const char* name, float v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(::onnx::AttributeProto::FLOAT);
  a->set_f(v);
}

/// Cast(in, to) -> out (`to` an ONNX TensorProto data type).
inline ::onnx::NodeProto make_cast(const std::string& name, const std::string& in,
                                   const std::string& out, dtype_id to) {
  ::onnx::NodeProto n = make_op("Cast", name, {in}, {out});
  add_int_attribute(n, "to", static_cast<std::int64_t>(to));  // dtype_id values are ONNX codes
  return n;
}

inline ::onnx::NodeProto make_binary(const std::string& op, const std::string& name,
                                     const std::string& a, const std::string& b,
                                     const std::string& out) {
  return make_op(op, name, {a, b}, {out});
}

/// A warning when one per-tensor scale sends most of the weight's non-zero values `v` to the code
/// of zero (`codes`, as quantize_values wrote them, equal to the zero point `zp`): a few large
/// channels set the scale and the others vanish (silero VAD's last encoder Conv: 97%, channel
/// maxima 0.09 to 54.9), which wrecks the model with every per-tensor preset. Empty when at most
/// half vanish, or for a non-integer type.
inline std::string zeroed_weight_note(std::span<const float> v, const tensor& codes,
                                      std::int32_t zp, float scale, const std::string& name,
                                      const std::string& node, const std::string& op_type) {
  std::size_t nonzero = 0, zeroed = 0;
  quark::visit_dtype(codes.type(), [&](auto id) {
    using D = typename decltype(id)::type;
    if constexpr (integral_data_type<D>) {
      const auto q = codes.data<D>();
      const auto z = static_cast<D>(zp);
      for (std::size_t i = 0; i < v.size(); ++i) {
        if (v[i] == 0.0f)
          continue;
        ++nonzero;
        zeroed += q[i] == z ? 1u : 0u;
      }
    }
  });
  if (nonzero == 0 || zeroed * 2 <= nonzero)
    return {};
  const auto pct = static_cast<long long>(
      std::floor(100.0 * static_cast<double>(zeroed) / static_cast<double>(nonzero)));
  std::ostringstream os;
  os << "weight '" << name << "' of node '" << node << "' (" << op_type << "): " << pct
     << "% of its non-zero values quantize to 0 with one per-tensor scale (" << scale
     << "); per-channel weights (quant_granularity Channel) or a wider weight type keep them";
  return os.str();
}

}  // namespace quark::onnx::qz
