// SPDX-License-Identifier: MIT
// PRIVATE: small graph and attribute queries shared by the quantizer's graph rewrites
// (graph_passes.cpp, conversions.cpp, algo_cle.cpp, opset.cpp, fp16_model.cpp).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <onnx/onnx_pb.h>

#include <quark/onnx/model.hpp>
#include <quark/onnx/tensor.hpp>

#include "io/graph_util.hpp"
#include "io/proto_access.hpp"

namespace quark::onnx::qz {

/// Whether `name` is a float32 initializer.
inline bool float_init(const model& m, const std::string& name) {
  return !name.empty() && m.has_initializer(name) &&
         m.initializer(name).type() == dtype_id::float32;
}

/// Who produces and who reads each value of one graph (node indices into `g.node()`), and which
/// values are graph outputs. A snapshot: rebuild it after editing the graph.
///
/// A value an If / Loop / Scan body reads from this graph (an implicit input, not in the node's
/// input list) counts as read by that node, and is also listed in `implicit`: a rewrite that
/// renames or removes it would have to reach into the body, so the passes leave such values be
/// (silero VAD's If branches read a main-graph Constant that constant folding retired).
struct graph_index {
  std::map<std::string, int> producer;
  std::map<std::string, std::vector<int>> consumers;
  std::set<std::string> outputs;
  std::set<std::string> implicit;  ///< values some subgraph of this graph reads

  explicit graph_index(const ::onnx::GraphProto& g) {
    for (int i = 0; i < g.node_size(); ++i) {
      const ::onnx::NodeProto& n = g.node(i);
      for (const auto& o : n.output())
        producer[o] = i;
      for (const auto& x : n.input()) {
        if (!x.empty())
          consumers[x].push_back(i);
      }
      for (const auto& x : node_implicit_inputs(n)) {
        if (std::find(n.input().begin(), n.input().end(), x) == n.input().end())
          consumers[x].push_back(i);
        implicit.insert(x);
      }
    }
    for (const auto& o : g.output())
      outputs.insert(o.name());
  }
  /// How many node inputs read `name` (a subgraph's reads count once for its node), plus one if
  /// it is a graph output.
  std::size_t uses(const std::string& name) const {
    auto it = consumers.find(name);
    return (it == consumers.end() ? 0 : it->second.size()) + (outputs.contains(name) ? 1 : 0);
  }
  /// The single node reading `name` (nullopt if it has several readers, is a graph output or is
  /// read by a subgraph).
  std::optional<int> only_consumer(const std::string& name) const {
    auto it = consumers.find(name);
    if (outputs.contains(name) || implicit.contains(name) || it == consumers.end() ||
        it->second.size() != 1)
      return std::nullopt;
    return it->second.front();
  }
};

/// The name a Q/DQ pair has in the quantizer's summary: its DequantizeLinear's name up to
/// "_DequantizeLinear" (the whole name when it has no such suffix).
inline std::string pair_report_name(const ::onnx::NodeProto& dq) {
  const std::string& n = dq.name();
  const auto k = n.rfind("_DequantizeLinear");
  return k == std::string::npos ? n : n.substr(0, k);
}

/// Removes the initializers among `candidates` that no node reads and no graph output names.
inline void drop_unused_initializers(model& m, const std::set<std::string>& candidates) {
  const graph_index ix(proto(m).graph());
  std::set<std::string, std::less<>> unused;
  for (const auto& name : candidates) {
    if (ix.uses(name) == 0)
      unused.insert(name);
  }
  // One pass (one remove_initializer each was quadratic); the model's index of initializers
  // starts over (a removal followed by as many additions would keep its length).
  if (remove_initializers(proto(m), unused) > 0)
    proto_access::get(m).inits.clear();
}

/// Drops the nodes of `g` marked dead, keeping the order of the others.
inline void compact_nodes(::onnx::GraphProto& g, const std::vector<bool>& dead) {
  ::google::protobuf::RepeatedPtrField<::onnx::NodeProto> kept;
  for (int i = 0; i < g.node_size(); ++i) {
    if (!dead[static_cast<std::size_t>(i)])
      *kept.Add() = std::move(*g.mutable_node(i));
  }
  g.mutable_node()->Swap(&kept);
}

/// The values of an int64 / int32 initializer, nullopt if `name` is not one.
inline std::optional<std::vector<std::int64_t>> int_values(const model& m,
                                                           const std::string& name) {
  if (name.empty() || !m.has_initializer(name))
    return std::nullopt;
  const tensor t = m.initializer(name);
  std::vector<std::int64_t> out;
  if (t.type() == dtype_id::int64) {
    for (auto v : t.data<std::int64_t>())
      out.push_back(v);
  } else if (t.type() == dtype_id::int32) {
    for (auto v : t.data<std::int32_t>())
      out.push_back(v);
  } else {
    return std::nullopt;
  }
  return out;
}

/// A float scalar initializer's value (one element), nullopt otherwise.
inline std::optional<float> float_scalar(const model& m, const std::string& name) {
  if (name.empty() || !m.has_initializer(name))
    return std::nullopt;
  const tensor t = m.initializer(name);
  if (t.type() != dtype_id::float32 || t.size() != 1)
    return std::nullopt;
  return t.data<float>()[0];
}

/// How many nodes the If / Loop / Scan bodies of `g`'s nodes hold, nested bodies included.
inline std::size_t body_node_count(const ::onnx::GraphProto& g) {
  std::size_t k = 0;
  auto count = [&](const ::onnx::GraphProto& b) {
    k += static_cast<std::size_t>(b.node_size()) + body_node_count(b);
  };
  for (const auto& n : g.node()) {
    for (const auto& a : n.attribute()) {
      if (a.has_g())
        count(a.g());
      for (const auto& b : a.graphs())
        count(b);
    }
  }
  return k;
}

/// The attribute `name` of `n`, or nullptr.
inline const ::onnx::AttributeProto* find_attr(const ::onnx::NodeProto& n, std::string_view name) {
  for (const auto& a : n.attribute()) {
    if (a.name() == name)
      return &a;
  }
  return nullptr;
}
inline ::onnx::AttributeProto* find_attr(::onnx::NodeProto& n, std::string_view name) {
  for (auto& a : *n.mutable_attribute()) {
    if (a.name() == name)
      return &a;
  }
  return nullptr;
}

/// Integer / float attribute `name` of `n`, or `dflt` when absent.
inline std::int64_t attr_i(const ::onnx::NodeProto& n, std::string_view name, std::int64_t dflt) {
  const auto* a = find_attr(n, name);
  return a == nullptr ? dflt : a->i();
}
inline float attr_f(const ::onnx::NodeProto& n, std::string_view name, float dflt) {
  const auto* a = find_attr(n, name);
  return a == nullptr ? dflt : a->f();
}

/// The axes of a Reduce* node: its `axes` attribute (before opset 18, 13 for ReduceSum) or its
/// constant second input; nullopt when they are not constant or absent (every axis).
inline std::optional<std::vector<std::int64_t>> reduce_axes(const model& m,
                                                            const ::onnx::NodeProto& n) {
  if (const auto* a = find_attr(n, "axes"))
    return std::vector<std::int64_t>(a->ints().begin(), a->ints().end());
  if (n.input_size() < 2 || n.input(1).empty())
    return std::nullopt;
  return int_values(m, n.input(1));
}

/// Per-channel y = a x + b.
struct channel_affine {
  std::vector<double> a, b;
};

/// The affine map an inference-mode BatchNormalization applies per channel, in double:
/// a = scale / sqrt(var + eps), b = bias - mean * a. The four float32 tensors have one value per
/// channel (the caller checks their sizes).
inline channel_affine batchnorm_affine(const tensor& scale, const tensor& bias, const tensor& mean,
                                       const tensor& var, double eps) {
  channel_affine f;
  const std::size_t c = scale.size();
  f.a.resize(c);
  f.b.resize(c);
  for (std::size_t i = 0; i < c; ++i) {
    f.a[i] = static_cast<double>(scale.data<float>()[i]) /
             std::sqrt(static_cast<double>(var.data<float>()[i]) + eps);
    f.b[i] = static_cast<double>(bias.data<float>()[i]) -
             static_cast<double>(mean.data<float>()[i]) * f.a[i];
  }
  return f;
}

}  // namespace quark::onnx::qz
