// SPDX-License-Identifier: MIT
// Auto mixed precision towards a block format (QBFP / QMX targets; the BF16_MIXED_* presets) and
// DedicateDQNode; see algorithms.hpp and docs/quantizer.md ("Block mixing").
//
// Quark mixes a block format into a quantized model (usually a bfloat16 one) without measuring
// anything: every target node's constants are quantized by one fused node instead of their Q/DQ,
// and its activations are quantized by a fused node after their pair (dual quant nodes) or
// instead of it. quark-cpp follows that rule with three differences, all where Quark's graph
// would be broken (docs/compatibility.md): an activation pair read by several target nodes gets
// one fused node they share (Quark writes one per node but keeps only the last), a QuantizeLinear
// another pair still reads stays, and a fused node whose output has other readers is not removed
// from a fused -> Q -> DQ -> fused chain.
#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <quark/dtype/visit.hpp>

#include "io/proto_access.hpp"
#include "quantizer/algorithms.hpp"
#include "quantizer/block_nodes.hpp"
#include "quantizer/graph_util.hpp"
#include "quantizer/numerics.hpp"

namespace quark::onnx::qz {

namespace {

using ::onnx::GraphProto;
using ::onnx::NodeProto;

// ONNX TensorProto element types of the Cast pairs (FLOAT, FLOAT16, BFLOAT16).

/// A quantizing node: QuantizeLinear, or the Cast to bfloat16 / float16 that stands for one
/// (BFloat16Spec / Float16Spec write a Cast pair: docs/quantizer.md).
bool is_q(const NodeProto& n) {
  if (n.op_type() == "Cast") {
    const std::int64_t to = attr_i(n, "to", 0);
    return to == ::onnx::TensorProto::BFLOAT16 || to == ::onnx::TensorProto::FLOAT16;
  }
  return n.op_type() == "QuantizeLinear" || n.op_type() == "ExtendedQuantizeLinear";
}
/// A dequantizing node: DequantizeLinear, or a Cast back to float (a pair's second half when
/// its input is a bfloat16 / float16 Cast or constant; pair_of checks).
bool is_dq(const NodeProto& n) {
  if (n.op_type() == "Cast")
    return attr_i(n, "to", 0) == ::onnx::TensorProto::FLOAT;
  return n.op_type() == "DequantizeLinear" || n.op_type() == "ExtendedDequantizeLinear";
}
bool is_fused(const NodeProto& n) {
  return n.domain() == block_domain &&
         (n.op_type() == "BFPQuantizeDequantize" || n.op_type() == "MXQuantizeDequantize");
}

/// The DequantizeLinear producing input `slot` of `n` and the QuantizeLinear feeding it (-1 when
/// absent).
struct input_pair {
  int dq = -1;
  int q = -1;
};

input_pair pair_of(const GraphProto& g, const graph_index& ix, const NodeProto& n, int slot) {
  input_pair p;
  if (slot >= n.input_size() || n.input(slot).empty())
    return p;
  const auto d = ix.producer.find(n.input(slot));
  if (d == ix.producer.end() || !is_dq(g.node(d->second)))
    return p;
  const NodeProto& dq = g.node(d->second);
  if (dq.input_size() == 0)
    return p;
  if (const auto q = ix.producer.find(dq.input(0));
      q != ix.producer.end() && is_q(g.node(q->second)) &&
      (g.node(q->second).op_type() == "Cast") == (dq.op_type() == "Cast"))
    p.q = q->second;
  // A Cast to float is a pair's second half only after a Cast to bfloat16 / float16 or on a
  // bfloat16 / float16 constant.
  if (dq.op_type() == "Cast" && p.q < 0) {
    const bool low =
        std::any_of(g.initializer().begin(), g.initializer().end(), [&](const auto& t) {
          return t.name() == dq.input(0) && (t.data_type() == ::onnx::TensorProto::BFLOAT16 ||
                                             t.data_type() == ::onnx::TensorProto::FLOAT16);
        });
    if (!low)
      return p;
  }
  p.dq = d->second;
  return p;
}

/// The float values of a DequantizeLinear over stored integer codes (per tensor or along its
/// axis; quark::dequantize, the operator's float(code - zero point) * scale), or of a Cast of a
/// bfloat16 / float16 constant (exactly). Empty when the codes are another type or blocked.
std::vector<float> dequantized(const model& m, const NodeProto& dq) {
  const tensor codes = m.initializer(dq.input(0));
  std::vector<float> out(codes.size());
  if (dq.op_type() == "Cast") {
    bool done = false;
    quark::visit_dtype(codes.type(), [&](auto id) {
      using D = typename decltype(id)::type;
      if constexpr (!std::is_integral_v<D>) {
        const auto v = codes.data<D>();
        for (std::size_t i = 0; i < v.size(); ++i)
          out[i] = static_cast<float>(v[i]);
        done = true;
      }
    });
    return done ? out : std::vector<float>{};
  }
  if (attr_i(dq, "block_size", 0) != 0 || dq.input_size() < 2)
    return {};
  const tensor s = m.initializer(dq.input(1));
  if (s.type() != dtype_id::float32)
    return {};
  const auto scale = s.data<float>();
  std::vector<std::size_t> dims;
  for (const auto d : codes.shape())
    dims.push_back(static_cast<std::size_t>(d));
  const auto rank = static_cast<std::int64_t>(dims.size());
  std::int64_t axis = attr_i(dq, "axis", 1);
  axis = axis < 0 ? axis + rank : axis;
  if (scale.size() > 1 &&
      (axis < 0 || axis >= rank || dims[static_cast<std::size_t>(axis)] != scale.size()))
    return {};
  const quark::granularity g =
      scale.size() > 1 ? quark::granularity{per_channel{axis}} : quark::granularity{per_tensor{}};
  const std::optional<tensor> z = dq.input_size() > 2 && !dq.input(2).empty()
                                      ? std::optional<tensor>(m.initializer(dq.input(2)))
                                      : std::nullopt;
  bool done = false;
  quark::visit_dtype(codes.type(), [&](auto id) {
    using D = typename decltype(id)::type;
    if constexpr (std::is_integral_v<D> && integral_data_type<D>) {  // 8 bits and wider
      std::vector<zero_point_t<D>> zp;
      if (z && z->type() == codes.type()) {
        for (const auto v : z->data<D>())
          zp.push_back(static_cast<zero_point_t<D>>(v));
      }
      const tensor_qparams<D> p{scale, zp, g};  // views: scale and zp outlive it
      quark::dequantize<D>(quark::tensor_shape{std::span<const std::size_t>(dims)}, codes.data<D>(),
                           p, std::span<float>(out));
      done = true;
    }
  });
  return done ? out : std::vector<float>{};
}

/// Puts the nodes of `m` in topological order (stable where the graph allows).
void sort_nodes(model& m) {
  const std::vector<std::size_t> order = m.topological_order();
  GraphProto& g = *proto(m).mutable_graph();
  ::google::protobuf::RepeatedPtrField<NodeProto> sorted;
  for (const std::size_t i : order)
    *sorted.Add() = g.node(static_cast<int>(i));
  g.mutable_node()->Swap(&sorted);
}

}  // namespace

block_mix_result mix_block_format(model& qm, const auto_mp_options& o) {
  block_mix_result r;
  const tspec& spec = *o.block;
  const block_op& act_op = *spec.block;
  block_op weight_op = act_op;
  weight_op.convert_to_bfloat_before_bfp = 0;  // constants: as Quark writes them
  const std::int64_t axis = spec.axis.value_or(1);
  const std::set<std::string> ops(o.target_op_types.begin(), o.target_op_types.end());

  GraphProto& g = *proto(qm).mutable_graph();
  const graph_index ix(g);
  std::set<std::string> inits;
  for (const auto& t : g.initializer())
    inits.insert(t.name());

  std::set<int> removed;         // Q / DQ nodes the fused nodes replace
  std::vector<NodeProto> added;  // the fused nodes
  name_pool names(g);
  std::set<std::string> dropped_inits;
  std::set<int> mixed_nodes;
  auto add = [&](NodeProto n) { added.push_back(std::move(n)); };
  auto retire = [&](int i) {
    removed.insert(i);
    for (const auto& x : g.node(i).input())
      dropped_inits.insert(x);
  };

  // Constants: the fused node reads the float constant and writes the DequantizeLinear's output.
  std::set<int> weight_dq;
  for (int i = 0; i < g.node_size(); ++i) {
    const NodeProto& n = g.node(i);
    if (!ops.contains(n.op_type()))
      continue;
    for (int k = 0; k < n.input_size(); ++k) {
      if (n.op_type() != "MatMul" && k == 0)
        continue;
      const input_pair p = pair_of(g, ix, n, k);
      if (p.dq < 0)
        continue;
      if (weight_dq.contains(p.dq)) {
        mixed_nodes.insert(i);  // a shared constant: its fused node serves this node too
        continue;
      }
      const NodeProto& dq = g.node(p.dq);
      std::string src = p.q >= 0 ? g.node(p.q).input(0) : dq.input(0);
      if (!inits.contains(src))
        continue;  // an activation (MatMul), or a computed weight: left alone
      if (p.q < 0) {
        // Stored codes: the fused node reads their float values.
        const std::vector<float> v = dequantized(qm, dq);
        if (v.empty()) {
          r.notes.push_back("auto_mixprecision: input " + std::to_string(k) + " of '" + n.name() +
                            "' keeps its DequantizeLinear (its stored codes are not integers "
                            "per tensor or per channel)");
          continue;
        }
        const tensor codes = qm.initializer(src);
        src = names.fresh(src + "_dequantized");
        qm.set_initializer(src, tensor::from_floats(codes.shape(), v));
      }
      const std::int64_t a = (n.op_type() == "MatMul" || k == 2) ? 0 : axis;
      add(make_block_node(weight_op,
                          names.fresh(n.name() + "_" + act_op.op + "_" + std::to_string(k)), src,
                          dq.output(0), a));
      weight_dq.insert(p.dq);
      retire(p.dq);
      if (p.q >= 0)
        retire(p.q);
      r.retyped.emplace_back(pair_report_name(dq), act_op.label);
      ++r.weights;
      mixed_nodes.insert(i);
    }
  }

  // Activations: a fused node after the pair (dual) or instead of it.
  std::map<int, std::string> fused_after;  // DQ index -> output of its fused node
  for (int i = 0; i < g.node_size(); ++i) {
    const NodeProto& n = g.node(i);
    if (!ops.contains(n.op_type()))
      continue;
    for (int k = 0; k < n.input_size(); ++k) {
      if (n.op_type() != "MatMul" && k != 0)
        continue;
      const input_pair p = pair_of(g, ix, n, k);
      if (p.dq < 0 || p.q < 0 || weight_dq.contains(p.dq) || removed.contains(p.q))
        continue;
      const NodeProto& dq = g.node(p.dq);
      const NodeProto& q = g.node(p.q);
      const std::int64_t a = n.op_type() == "ReduceMean" ? 3 : axis;
      mixed_nodes.insert(i);
      if (fused_after.contains(p.dq))
        continue;  // shared by an earlier target node: the re-pointing below reaches this one

      const std::string name = names.fresh(n.name() + "_" + act_op.op + "_" + std::to_string(k));
      if (o.dual_quant_nodes) {
        const std::string out = names.fresh(name + "_output");
        add(make_block_node(act_op, name, dq.output(0), out, a));
        fused_after[p.dq] = out;
      } else {
        add(make_block_node(act_op, name, q.input(0), dq.output(0), a));
        fused_after[p.dq] = dq.output(0);
        retire(p.dq);
        // The QuantizeLinear goes unless another DequantizeLinear still reads it.
        bool other = false;
        if (const auto c = ix.consumers.find(q.output(0)); c != ix.consumers.end()) {
          for (const int reader : c->second)
            other = other || reader != p.dq;
        }
        if (!other && !ix.outputs.contains(q.output(0)))
          retire(p.q);
      }
      ++r.activations;
    }
  }
  if (o.dual_quant_nodes) {
    // Every target node reading a mixed pair reads its fused node; other readers keep the pair.
    for (int i = 0; i < g.node_size(); ++i) {
      NodeProto& n = *g.mutable_node(i);
      if (!ops.contains(n.op_type()))
        continue;
      for (int k = 0; k < n.input_size(); ++k) {
        if (const auto it = ix.producer.find(n.input(k));
            it != ix.producer.end() && fused_after.contains(it->second)) {
          n.set_input(k, fused_after.at(it->second));
          mixed_nodes.insert(i);
        }
      }
    }
  }
  r.nodes = mixed_nodes.size();

  // Rebuild the node list: the replaced pairs out, the fused nodes in.
  ::google::protobuf::RepeatedPtrField<NodeProto> kept;
  for (int i = 0; i < g.node_size(); ++i) {
    if (!removed.contains(i))
      *kept.Add() = g.node(i);
  }
  for (auto& n : added)
    *kept.Add() = std::move(n);
  g.mutable_node()->Swap(&kept);

  // fused -> Q -> DQ -> fused: the first fused node and the pair go (Quark's refinement), when
  // nothing else reads them.
  for (bool again = true; again;) {
    again = false;
    const graph_index jx(g);
    for (int i = 0; i < g.node_size() && !again; ++i) {
      const NodeProto& f = g.node(i);
      if (!is_fused(f) || f.input_size() == 0)
        continue;
      const input_pair p = pair_of(g, jx, f, 0);
      if (p.dq < 0 || p.q < 0 || jx.uses(g.node(p.dq).output(0)) != 1 ||
          jx.uses(g.node(p.q).output(0)) != 1)
        continue;
      const auto parent = jx.producer.find(g.node(p.q).input(0));
      if (parent == jx.producer.end() || !is_fused(g.node(parent->second)) ||
          jx.uses(g.node(parent->second).output(0)) != 1)
        continue;
      const std::string source = g.node(parent->second).input(0);
      g.mutable_node(i)->set_input(0, source);
      std::set<int> gone{parent->second, p.q, p.dq};
      for (const int k : gone) {
        for (const auto& x : g.node(k).input())
          dropped_inits.insert(x);
      }
      ::google::protobuf::RepeatedPtrField<NodeProto> rest;
      for (int k = 0; k < g.node_size(); ++k) {
        if (!gone.contains(k))
          *rest.Add() = g.node(k);
      }
      g.mutable_node()->Swap(&rest);
      ++r.chains;
      again = true;
    }
  }
  drop_unused_initializers(qm, dropped_inits);
  if (!added.empty() || r.weights + r.activations > 0)
    qm.ensure_opset(block_domain, block_domain_version);
  sort_nodes(qm);

  r.notes.push_back("auto_mixprecision: " + act_op.label + " mixed into " +
                    std::to_string(r.nodes) + " target nodes without measuring (as in Quark): " +
                    std::to_string(r.weights) + " constant inputs quantized by a fused node, " +
                    std::to_string(r.activations) + " activation inputs given one " +
                    (o.dual_quant_nodes ? "after their Q/DQ pair (dual_quant_nodes)"
                                        : "instead of their Q/DQ pair") +
                    (r.chains > 0 ? ", " + std::to_string(r.chains) + " chains collapsed" : ""));
  return r;
}

std::size_t dedicate_dq_nodes(model& qm) {
  GraphProto& g = *proto(qm).mutable_graph();
  const graph_index ix(g);
  std::set<std::string> inits;
  for (const auto& t : g.initializer())
    inits.insert(t.name());
  std::vector<NodeProto> added;
  name_pool names(g);
  for (int i = 0; i < g.node_size(); ++i) {
    const NodeProto dq = g.node(i);
    if (!is_dq(dq) || dq.input_size() == 0 || dq.output_size() == 0 ||
        ix.implicit.contains(dq.output(0)))
      continue;  // (a value an If / Loop body reads is left alone)
    const auto qp = ix.producer.find(dq.input(0));
    if (qp == ix.producer.end() || !is_q(g.node(qp->second)))
      continue;
    const NodeProto q = g.node(qp->second);
    // Readers in graph order, each once; a graph output holds the first place.
    std::vector<int> readers;
    if (const auto c = ix.consumers.find(dq.output(0)); c != ix.consumers.end()) {
      for (const int r : c->second) {
        if (std::find(readers.begin(), readers.end(), r) == readers.end())
          readers.push_back(r);
      }
    }
    const bool output = ix.outputs.contains(dq.output(0));
    if (readers.size() + (output ? 1 : 0) < 2)
      continue;
    const bool copy_q = inits.contains(q.input(0));  // a shared constant: its Q is copied too
    for (std::size_t k = output ? 0 : 1; k < readers.size(); ++k) {
      // (Appended, not "_" + to_string(...): GCC 12 at -O3 reports a false -Wrestrict there.)
      std::string sfx = "_";
      sfx += std::to_string(output ? k + 1 : k);
      NodeProto d = dq;
      d.set_name(names.fresh(dq.name() + sfx));
      d.set_output(0, names.fresh(dq.output(0) + sfx));
      if (copy_q) {
        NodeProto qc = q;
        qc.set_name(names.fresh(q.name() + sfx));
        qc.set_output(0, names.fresh(q.output(0) + sfx));
        d.set_input(0, qc.output(0));
        added.push_back(std::move(qc));
      }
      NodeProto& reader = *g.mutable_node(readers[k]);
      for (int s = 0; s < reader.input_size(); ++s) {
        if (reader.input(s) == dq.output(0))
          reader.set_input(s, d.output(0));
      }
      added.push_back(std::move(d));
    }
  }
  for (auto& n : added)
    *g.add_node() = std::move(n);
  if (!added.empty())
    sort_nodes(qm);
  return added.size();
}

}  // namespace quark::onnx::qz
