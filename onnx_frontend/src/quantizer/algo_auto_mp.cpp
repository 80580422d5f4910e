// SPDX-License-Identifier: MIT
// Auto mixed precision (quark-spec §10.10; see algorithms.hpp and docs/quantizer.md).
//
// A module is one node of target_op_type whose inputs come out of DequantizeLinear nodes (Quark's
// subgraph per compute node). Mixing a module switches the Q/DQ of its input 0 (activation), 1
// (weight) and 2 (bias) to the target types, as Quark's "replace" does: the scale becomes
// scale * (source code span / target code span) (a power-of-two scale stays a power of two), the
// zero point is mapped the same way, and a constant is quantized again. Quark remaps the stored
// integers; quark-cpp quantizes the float weight of the float model with the new scale, so a
// wider type gains precision. An int32 bias keeps its type and takes scale = input scale *
// weight scale again. With dual_quant_nodes the activation keeps its pair and a second pair of
// the target type is inserted before the node (Quark's "insert").
//
// Selection (Quark's auto_mixprecision): with target_tensors, the named tensors' pairs change and
// nothing is measured; with target_indices / exclude_indices the listed (or all other) modules
// change; otherwise every candidate is measured alone (average L2 of output output_index against
// the float model over the samples, or the top-1 loss), sorted ascending, and applied in that
// order: num_target modules, or while the metric stays within the target (lowering). When the
// target types are wider than the model's (raising, a quark-cpp extension), the same order puts
// the most helpful module first and modules are applied until the metric meets the target.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <sstream>
#include <type_traits>

#include <quark/onnx/runtime.hpp>
#include <quark/scale/retype.hpp>

#include "io/proto_access.hpp"
#include "quantizer/algorithms.hpp"
#include "quantizer/fp16_model.hpp"
#include "quantizer/graph_util.hpp"
#include "quantizer/numerics.hpp"
#include "quantizer/tensor_build.hpp"

namespace quark::onnx::qz {

namespace {

using ::onnx::GraphProto;
using ::onnx::NodeProto;

/// The types auto MP moves tensors between (Quark's QInt4 ... QUInt32 quant types): the integer
/// quantization types of 4 bits or more.
bool integer_type(dtype_id t) {
  return quark::quant_range(t).has_value() && quark::dtype_bits(t) >= 4;
}

/// bfloat16 / float16: a target auto MP writes as a Cast pair (to the type and back to float,
/// unscaled: what a BFloat16Spec / Float16Spec without ActivationScaled gives).
bool half_type(dtype_id t) {
  return t == dtype_id::bfloat16 || t == dtype_id::float16;
}

/// float8 E4M3FN (QFLOAT8E4M3FN): a target auto MP writes as a Q/DQ pair of the type whose scale
/// keeps the range the integer codes spanned (quark::retype_scale_to_float), zero point 0.
bool fp8_type(dtype_id t) {
  return t == dtype_id::float8_e4m3fn;
}

/// Turns node `n` into Cast(to = `to`) of its first input, keeping its name and output.
void make_cast_in_place(NodeProto& n, dtype_id to) {
  NodeProto c = make_cast(n.name(), n.input(0), n.output(0), to);
  n = std::move(c);
}

/// The integer value of one element of integer type D (a built-in integer or int4 / uint4).
template <class D>
std::int64_t int_value(D v) {
  if constexpr (std::is_integral_v<D>)
    return static_cast<std::int64_t>(v);
  else
    return static_cast<std::int64_t>(v.value());
}

int bits_of(dtype_id t) {
  return quark::dtype_bits(t);
}

std::string type_str(dtype_id t) {
  return std::string(dtype_name(t));
}

std::vector<float> floats_of(const tensor& t) {
  const auto d = t.data<float>();
  return {d.begin(), d.end()};
}

std::vector<std::int64_t> ints_of(const tensor& t) {
  std::vector<std::int64_t> out;
  quark::visit_dtype(t.type(), [&](auto id) {
    using D = typename decltype(id)::type;
    if constexpr (integral_data_type<D>) {
      for (const auto v : t.data<D>())
        out.push_back(int_value(v));
    }
  });
  return out;
}

tensor float_tensor(const shape_t& shape, const std::vector<float>& v) {
  tensor out(dtype_id::float32, shape);
  auto d = out.data<float>();
  for (std::size_t i = 0; i < v.size() && i < d.size(); ++i)
    d[i] = v[i];
  return out;
}

/// Quark's scale rule, element by element: quark::retype_scale (scale * source span / target
/// span; a power-of-two scale stays one).
std::vector<float> derive_scale(const std::vector<float>& s, dtype_id from, dtype_id to) {
  std::vector<float> out;
  for (const float x : s)
    out.push_back(quark::retype_scale(x, from, to));
  return out;
}

/// The scales of `from` (scales `s`, zero points `z`: one, or one per scale) moved to `to`: by
/// the code span ratio between integer types, by the range the codes span onto float8.
std::vector<float> moved_scales(const std::vector<float>& s, const std::vector<std::int64_t>& z,
                                dtype_id from, dtype_id to) {
  if (!fp8_type(to))
    return derive_scale(s, from, to);
  std::vector<float> out;
  for (std::size_t i = 0; i < s.size(); ++i)
    out.push_back(
        quark::retype_scale_to_float(s[i], z.empty() ? 0 : z[i < z.size() ? i : 0], from, to));
  return out;
}

/// The zero points of `from` moved to `to`: mapped code to code between integer types, 0 (as a
/// float8 value) for float8.
tensor moved_zero_points(const tensor& z0, dtype_id from, dtype_id to) {
  if (fp8_type(to))
    return tensor(to, z0.shape());  // all zero bits: +0
  std::vector<std::int64_t> z;
  for (const auto v : ints_of(z0))
    z.push_back(quark::retype_code(v, from, to));
  return int_tensor(to, z0.shape(), z);
}

/// `x` (shape `shape`) quantized to type `t` by quark::quantize with scales `s` and zero points
/// `z` (empty: 0), per tensor or, when `s` has several values, per channel along `axis`.
tensor quantize_floats(const std::vector<float>& x, const shape_t& shape,
                       const std::vector<float>& s, const std::vector<std::int64_t>& z,
                       std::int64_t axis, dtype_id t) {
  tensor out(t, shape);
  std::vector<std::size_t> dims;
  for (const auto d : shape)
    dims.push_back(static_cast<std::size_t>(d));
  const quark::tensor_shape ts{std::span<const std::size_t>(dims)};
  const auto rank = static_cast<std::int64_t>(shape.size());
  const quark::granularity g = s.size() > 1
                                   ? quark::granularity{per_channel{axis < 0 ? axis + rank : axis}}
                                   : quark::granularity{per_tensor{}};
  quark::visit_dtype(t, [&](auto id) {
    using D = typename decltype(id)::type;
    if constexpr (integral_data_type<D>) {
      std::vector<zero_point_t<D>> zp;
      for (std::size_t c = 0; c < (z.empty() ? 0 : s.size()); ++c)
        zp.push_back(static_cast<zero_point_t<D>>(z[c < z.size() ? c : 0]));
      const tensor_qparams<D> p{s, zp, g};
      quark::quantize<D>(ts, std::span<const float>(x), p, out.data<D>());
    }
  });
  return out;
}

std::int64_t int_attr(const NodeProto& n, const char* name, std::int64_t fallback) {
  for (const auto& a : n.attribute()) {
    if (a.name() == name)
      return a.i();
  }
  return fallback;
}

/// One Q/DQ on an input of a module's node (indices into the graph's nodes).
struct pair_ref {
  int dq = -1;
  int q = -1;             ///< QuantizeLinear feeding the DQ, -1 when folded into a constant
  bool constant = false;  ///< the DQ reads an integer initializer
  std::string report_name;
};

struct mp_module {
  int node = -1;
  std::string name;
  std::optional<pair_ref> act, weight, bias;
  bool shared = false;  ///< input 0 has other readers
};

class mixer {
 public:
  mixer(const model& qm, const model& fm, const auto_mp_options& o) : base_(qm), fm_(fm), o_(o) {
    const GraphProto& g = proto(base_).graph();
    std::map<std::string, int> producer;
    std::map<std::string, int> readers;
    for (int i = 0; i < g.node_size(); ++i) {
      for (const auto& out : g.node(i).output())
        producer[out] = i;
      for (const auto& in : g.node(i).input())
        ++readers[in];
    }
    for (const auto& out : g.output())
      ++readers[out.name()];
    std::set<std::string> inits;
    for (const auto& t : g.initializer())
      inits.insert(t.name());
    auto pair_at = [&](const NodeProto& n, int slot) -> std::optional<pair_ref> {
      if (slot >= n.input_size() || n.input(slot).empty())
        return std::nullopt;
      auto it = producer.find(n.input(slot));
      if (it == producer.end() || g.node(it->second).op_type() != "DequantizeLinear" ||
          g.node(it->second).input_size() < 3 || int_attr(g.node(it->second), "block_size", 0) != 0)
        return std::nullopt;
      pair_ref p;
      p.dq = it->second;
      const NodeProto& dq = g.node(p.dq);
      p.report_name = pair_report_name(dq);
      if (inits.contains(dq.input(0))) {
        p.constant = true;
      } else if (auto q = producer.find(dq.input(0));
                 q != producer.end() && g.node(q->second).op_type() == "QuantizeLinear") {
        p.q = q->second;
      } else {
        return std::nullopt;
      }
      return p;
    };
    const std::set<std::string> ops(o.target_op_types.begin(), o.target_op_types.end());
    for (int i = 0; i < g.node_size(); ++i) {
      const NodeProto& n = g.node(i);
      if (!ops.contains(n.op_type()))
        continue;
      mp_module m;
      m.node = i;
      m.name = n.name();
      m.act = pair_at(n, 0);
      m.weight = pair_at(n, 1);
      m.bias = pair_at(n, 2);
      if (m.act && m.act->constant)
        m.act.reset();
      if (!m.act && !m.weight)
        continue;
      m.shared = !n.input(0).empty() && readers[n.input(0)] != 1;
      mods_.push_back(std::move(m));
    }
    for (const auto& n : proto(fm_).graph().node())
      float_nodes_[n.name()] = &n;
  }

  const std::vector<mp_module>& modules() const { return mods_; }
  std::size_t widened_biases() const { return widened_; }

  /// The types a module's pairs have now and would take.
  dtype_id type_of(const model& m, const pair_ref& p) const {
    const NodeProto& dq = proto(m).graph().node(p.dq);
    if (dq.op_type() == "Cast") {  // a pair made a bfloat16 / float16 Cast pair by this apply
      if (m.has_initializer(dq.input(0)))
        return m.initializer(dq.input(0)).type();
      return static_cast<dtype_id>(int_attr(proto(m).graph().node(p.q), "to", 0));
    }
    return m.initializer(dq.input(2)).type();
  }
  dtype_id act_target(const mp_module& md) const {
    return o_.act_type && md.act ? *o_.act_type
                                 : (md.act ? type_of(base_, *md.act) : dtype_id::undefined);
  }
  /// Input 1's target: the weight type for a constant, the activation type for an activation
  /// (Add / Mul / MatMul with two activations; Quark gives it the weight type).
  dtype_id weight_target(const mp_module& md) const {
    if (!md.weight)
      return dtype_id::undefined;
    if (!md.weight->constant)
      return o_.act_type ? *o_.act_type : type_of(base_, *md.weight);
    return o_.weight_type ? *o_.weight_type : type_of(base_, *md.weight);
  }
  dtype_id bias_target(const mp_module& md) const {
    if (!md.bias)
      return dtype_id::undefined;
    if (o_.bias_type)
      return *o_.bias_type;
    const dtype_id now = type_of(base_, *md.bias);
    if (now == dtype_id::int32 || now == dtype_id::uint32)
      return now;  // Int32Bias: the bias keeps its type, its scale follows input and weight
    return weight_target(md);
  }
  /// Whether a pair can move to another type: an integer Q/DQ pair (a float8 or bfloat16 /
  /// float16 one has no integer codes to move).
  bool mixable(const pair_ref& p) const {
    return proto(base_).graph().node(p.dq).op_type() == "DequantizeLinear" &&
           integer_type(type_of(base_, p));
  }
  /// Whether mixing the module changes anything.
  bool would_change(const mp_module& md) const {
    return (md.act && act_target(md) != type_of(base_, *md.act) && mixable(*md.act)) ||
           (md.weight && weight_target(md) != type_of(base_, *md.weight) && mixable(*md.weight));
  }
  /// Whether the module asks for a change that its pairs cannot make (not integer pairs).
  bool stuck(const mp_module& md) const {
    return (md.act && act_target(md) != type_of(base_, *md.act) && !mixable(*md.act)) ||
           (md.weight && weight_target(md) != type_of(base_, *md.weight) && !mixable(*md.weight));
  }

  /// The quantized model with the modules `chosen` mixed; `out` receives what changed. With
  /// `only`, just the pairs of those tensors change (target_tensors).
  model apply(const std::vector<std::size_t>& chosen, std::vector<auto_mp_change>* out,
              const std::set<std::string>* only = nullptr) const {
    widened_ = 0;
    retired_.clear();
    model t = base_;
    std::vector<auto_mp_change> changes;
    std::set<int> retyped;  // DQ nodes whose type changed
    struct insertion {
      int after = -1;
      std::vector<NodeProto> nodes;
    };
    std::vector<insertion> inserts;
    std::map<int, std::vector<float>> act_scale;  // module node -> scale of its (new) input pair
    for (const std::size_t k : chosen) {
      const mp_module& md = mods_[k];
      if (only != nullptr) {
        // Quark's target_tensors: the named pairs take the activation target type.
        const dtype_id to = o_.act_type ? *o_.act_type : *o_.weight_type;
        for (const auto& [p, slot] : {std::pair{md.act, 0}, std::pair{md.weight, 1}}) {
          if (p && only->contains(p->report_name) &&
              retype(t, *p, slot == 1 && o_.weight_type ? *o_.weight_type : to, md, slot,
                     p->constant ? "weight" : "activation", changes))
            retyped.insert(p->dq);
        }
        continue;
      }
      if (md.act && act_target(md) != type_of(t, *md.act)) {
        if (o_.dual_quant_nodes)
          inserts.push_back({md.act->dq, dual_pair(t, md, changes, act_scale[md.node])});
        else if (retype(t, *md.act, act_target(md), md, 0, "activation", changes))
          retyped.insert(md.act->dq);
      }
      if (md.weight && weight_target(md) != type_of(t, *md.weight) &&
          retype(t, *md.weight, weight_target(md), md, 1,
                 md.weight->constant ? "weight" : "activation", changes))
        retyped.insert(md.weight->dq);
      if (md.bias) {
        const dtype_id bt = bias_target(md);
        if (bt != dtype_id::int32 && bt != dtype_id::uint32 && bt != type_of(t, *md.bias))
          retype(t, *md.bias, bt, md, 2, "bias", changes);
      }
    }
    // An int32 bias follows its node's input and weight scales (every node reading a changed
    // pair, chosen or not).
    auto cast_pair = [&](const std::optional<pair_ref>& p) {
      return p && proto(t).graph().node(p->dq).op_type() == "Cast";
    };
    for (const mp_module& md : mods_) {
      if (!md.bias || !md.weight || type_of(t, *md.bias) != dtype_id::int32)
        continue;
      // An input or weight made a bfloat16 / float16 Cast pair has no scale: the bias keeps the
      // codes and scale it had (the same values).
      if (cast_pair(md.act) || cast_pair(md.weight))
        continue;
      const bool dual = act_scale.contains(md.node);
      if (!dual && !(md.act && retyped.contains(md.act->dq)) && !retyped.contains(md.weight->dq))
        continue;
      const std::vector<float> sa =
          dual ? act_scale.at(md.node)
               : (md.act ? floats_of(t.initializer(proto(t).graph().node(md.act->dq).input(1)))
                         : std::vector<float>{});
      if (sa.size() != 1)
        continue;
      const std::vector<float> sw =
          floats_of(t.initializer(proto(t).graph().node(md.weight->dq).input(1)));
      std::vector<float> sb;
      for (const float w : sw)
        sb.push_back(sa.front() * w);
      rescale_bias(t, md, sb, changes);
    }
    // Dual pairs go right after the pair they follow (descending, so indices stay valid).
    std::sort(inserts.begin(), inserts.end(),
              [](const insertion& a, const insertion& b) { return a.after > b.after; });
    GraphProto& g = *proto(t).mutable_graph();
    for (const auto& ins : inserts) {
      ::google::protobuf::RepeatedPtrField<NodeProto> nodes;
      for (int i = 0; i < g.node_size(); ++i) {
        *nodes.Add() = g.node(i);
        if (i == ins.after) {
          for (const auto& n : ins.nodes)
            *nodes.Add() = n;
        }
      }
      g.mutable_node()->Swap(&nodes);
    }
    drop_unused_initializers(t, retired_);  // the old scales, zero points and codes
    if (out != nullptr)
      *out = std::move(changes);
    return t;
  }

 private:
  std::string fresh(const model& t, const std::string& base) const {
    std::string name = base + "_mp";
    for (int k = 1; t.has_initializer(name); ++k)
      name = base + "_mp" + std::to_string(k);
    return name;
  }

  /// The float value of a module's input `slot` in the float model (same node name), if any.
  std::optional<tensor> float_input(const mp_module& md, int slot) const {
    auto it = float_nodes_.find(md.name);
    if (it == float_nodes_.end() || slot >= it->second->input_size())
      return std::nullopt;
    const std::string& name = it->second->input(slot);
    if (!fm_.has_initializer(name))
      return std::nullopt;
    tensor v = fm_.initializer(name);
    if (v.type() != dtype_id::float32)
      return std::nullopt;
    return v;
  }

  /// Switches a pair to type `to` (Quark's "replace"). Returns whether it changed.
  bool retype(model& t, const pair_ref& p, dtype_id to, const mp_module& md, int slot,
              const char* role, std::vector<auto_mp_change>& changes) const {
    GraphProto& g = *proto(t).mutable_graph();
    NodeProto& dq = *g.mutable_node(p.dq);
    if (dq.op_type() != "DequantizeLinear")
      return false;  // already a Cast pair
    if (half_type(to))
      return to_cast_pair(t, p, to, md, slot, role, changes);
    const tensor s0 = t.initializer(dq.input(1));
    const tensor z0 = t.initializer(dq.input(2));
    const dtype_id from = z0.type();
    if (from == to || !integer_type(from) || !(integer_type(to) || fp8_type(to)))
      return false;
    if (fp8_type(to) && p.q < 0) {
      const auto f = float_input(md, slot);
      if (!f || f->size() != t.initializer(dq.input(0)).size())
        return false;  // no float values to store as float8: left as it is
    }
    const std::vector<std::int64_t> z_from = ints_of(z0);
    const std::vector<float> s = moved_scales(floats_of(s0), z_from, from, to);
    const tensor z_to = moved_zero_points(z0, from, to);
    const std::vector<std::int64_t> z =
        fp8_type(to) ? std::vector<std::int64_t>(z_from.size(), 0) : ints_of(z_to);
    const std::string sn = fresh(t, dq.input(1)), zn = fresh(t, dq.input(2));
    t.set_initializer(sn, float_tensor(s0.shape(), s));
    t.set_initializer(zn, z_to);
    const std::string old_s = dq.input(1), old_z = dq.input(2);
    retired_.insert({old_s, old_z});
    dq.set_input(1, sn);
    dq.set_input(2, zn);
    std::string retyped_value;
    if (p.q >= 0) {
      NodeProto& q = *g.mutable_node(p.q);
      if (q.input_size() >= 3 && q.input(1) == old_s && q.input(2) == old_z) {
        q.set_input(1, sn);
        q.set_input(2, zn);
      } else if (q.input_size() >= 3) {
        const tensor qs = t.initializer(q.input(1));
        const tensor qz = t.initializer(q.input(2));
        const std::string qsn = fresh(t, q.input(1)), qzn = fresh(t, q.input(2));
        retired_.insert({q.input(1), q.input(2)});
        t.set_initializer(
            qsn, float_tensor(qs.shape(), moved_scales(floats_of(qs), ints_of(qz), from, to)));
        t.set_initializer(qzn, moved_zero_points(qz, from, to));
        q.set_input(1, qsn);
        q.set_input(2, qzn);
      }
      retyped_value = q.output(0);
    } else {
      // A folded constant: quantized again from the float model (else its codes are remapped
      // between integer types; float8 needs the float values, checked before anything changed).
      const tensor data = t.initializer(dq.input(0));
      const std::int64_t axis = int_attr(dq, "axis", 1);
      tensor q;
      if (auto f = float_input(md, slot); f && f->size() == data.size() && fp8_type(to)) {
        const auto rank = static_cast<std::int64_t>(data.shape().size());
        q = quantize_values(*f, to, s, {}, s.size() > 1 ? (axis < 0 ? axis + rank : axis) : -1, 0,
                            0);
      } else if (f && f->size() == data.size()) {
        q = quantize_floats(floats_of(*f), data.shape(), s, z, axis, to);
      } else {
        std::vector<std::int64_t> codes;
        for (const auto v : ints_of(data))
          codes.push_back(quark::retype_code(v, from, to));
        q = int_tensor(to, data.shape(), codes);
      }
      const std::string dn = fresh(t, dq.input(0));
      retired_.insert(dq.input(0));
      t.set_initializer(dn, q);
      dq.set_input(0, dn);
      retyped_value = dn;
    }
    drop_value_info(g, retyped_value);
    changes.push_back({p.report_name, role, md.name, from, to, s, z, false});
    return true;
  }

  /// Replaces an integer pair by the Cast pair of bfloat16 / float16 `to`: the QuantizeLinear
  /// becomes Cast(to) and the DequantizeLinear Cast(to FLOAT); a folded constant is stored as
  /// `to` (the float model's values rounded to it) behind the Cast. A
  /// QuantizeLinear whose output another node reads too, and a constant the float model does not
  /// hold under the node's name, are left alone (returns false).
  bool to_cast_pair(model& t, const pair_ref& p, dtype_id to, const mp_module& md, int slot,
                    const char* role, std::vector<auto_mp_change>& changes) const {
    GraphProto& g = *proto(t).mutable_graph();
    const NodeProto& dq0 = g.node(p.dq);
    const dtype_id from = t.initializer(dq0.input(2)).type();
    if (!integer_type(from))
      return false;
    const std::set<std::string> old{dq0.input(0), dq0.input(1), dq0.input(2)};
    std::string retyped_value;
    if (p.q >= 0) {
      const std::string qv = g.node(p.q).output(0);
      if (graph_index(g).only_consumer(qv) != p.dq)
        return false;
      for (int k = 1; k < g.node(p.q).input_size(); ++k)
        retired_.insert(g.node(p.q).input(k));
      make_cast_in_place(*g.mutable_node(p.q), to);
      retyped_value = qv;
    } else {
      const tensor data = t.initializer(dq0.input(0));
      const auto f = float_input(md, slot);
      if (!f || f->size() != data.size())
        return false;          // no float values to store: left as it is
      const float one = 1.0f;  // unscaled: the float weight rounded to the type
      const tensor h = quantize_values(*f, to, {&one, 1}, {}, -1, 0, 0);
      const std::string dn = fresh(t, dq0.input(0));
      t.set_initializer(dn, h);
      g.mutable_node(p.dq)->set_input(0, dn);
      retyped_value = dn;
    }
    make_cast_in_place(*g.mutable_node(p.dq), dtype_id::float32);
    retired_.insert(old.begin(), old.end());
    drop_value_info(g, retyped_value);
    changes.push_back({p.report_name, role, md.name, from, to, {1.0f}, {0}, false});
    return true;
  }

  /// Quark's "insert": a second pair of the target type after the activation's pair, read by
  /// this node only. Returns the new nodes; `scale` receives the new scale.
  std::vector<NodeProto> dual_pair(model& t, const mp_module& md,
                                   std::vector<auto_mp_change>& changes,
                                   std::vector<float>& scale) const {
    GraphProto& g = *proto(t).mutable_graph();
    const NodeProto& dq = g.node(md.act->dq);
    const tensor z0 = t.initializer(dq.input(2));
    const dtype_id from = z0.type(), to = act_target(md);
    if (half_type(to)) {
      // A Cast pair of the type, no scale (`scale` stays empty: an int32 bias keeps its own).
      const std::string base = md.act->report_name + "_" + md.name + "_mixed";
      std::vector<NodeProto> nodes{
          make_cast(base + "_QuantizeLinear", dq.output(0), base + "_QuantizeLinear_Output", to),
          make_cast(base + "_DequantizeLinear", base + "_QuantizeLinear_Output",
                    base + "_DequantizeLinear_Output", dtype_id::float32)};
      g.mutable_node(md.node)->set_input(0, base + "_DequantizeLinear_Output");
      changes.push_back({base, "activation", md.name, from, to, {1.0f}, {0}, true});
      scale.clear();
      return nodes;
    }
    const tensor s0 = t.initializer(dq.input(1));
    scale = moved_scales(floats_of(s0), ints_of(z0), from, to);
    const tensor z_to = moved_zero_points(z0, from, to);
    const std::vector<std::int64_t> z =
        fp8_type(to) ? std::vector<std::int64_t>(z0.size(), 0) : ints_of(z_to);
    const std::string base = md.act->report_name + "_" + md.name + "_mixed";
    t.set_initializer(base + "_scale", float_tensor(s0.shape(), scale));
    t.set_initializer(base + "_zero_point", z_to);
    std::vector<NodeProto> nodes(2);
    nodes[0].set_op_type("QuantizeLinear");
    nodes[0].set_name(base + "_QuantizeLinear");
    nodes[0].add_input(dq.output(0));
    nodes[0].add_input(base + "_scale");
    nodes[0].add_input(base + "_zero_point");
    nodes[0].add_output(base + "_QuantizeLinear_Output");
    nodes[1].set_op_type("DequantizeLinear");
    nodes[1].set_name(base + "_DequantizeLinear");
    nodes[1].add_input(base + "_QuantizeLinear_Output");
    nodes[1].add_input(base + "_scale");
    nodes[1].add_input(base + "_zero_point");
    nodes[1].add_output(base + "_DequantizeLinear_Output");
    if (!dq.domain().empty()) {
      nodes[0].set_domain(dq.domain());
      nodes[1].set_domain(dq.domain());
    }
    g.mutable_node(md.node)->set_input(0, base + "_DequantizeLinear_Output");
    changes.push_back({base, "activation", md.name, from, to, scale, z, true});
    return nodes;
  }

  void rescale_bias(model& t, const mp_module& md, std::vector<float> sb,
                    std::vector<auto_mp_change>& changes) const {
    GraphProto& g = *proto(t).mutable_graph();
    NodeProto& dq = *g.mutable_node(md.bias->dq);
    const tensor data = t.initializer(dq.input(0));
    const auto f = float_input(md, 2);
    if (!f || f->size() != data.size())
      return;  // no float bias to quantize again: left as it is
    // A bias whose codes would pass the int32 range (int16 input and weight scales make tiny
    // products) takes the smallest scale that holds it: exact in Q/DQ, noted as a deviation from
    // scale = input scale * weight scale.
    const std::vector<float> fb = floats_of(*f);
    if (sb.empty() || fb.size() % sb.size() != 0)
      return;  // scales that do not split the bias into channels: left as it is
    widened_ += quark::widen_to_hold(sb, fb, dtype_id::int32);
    const std::vector<std::int64_t> z(sb.size(), 0);
    const tensor codes = quantize_floats(fb, data.shape(), sb, z, 0, dtype_id::int32);
    const std::string sn = fresh(t, dq.input(1)), zn = fresh(t, dq.input(2)),
                      dn = fresh(t, dq.input(0));
    retired_.insert({dq.input(0), dq.input(1), dq.input(2)});
    const shape_t shape =
        sb.size() == 1 ? shape_t{} : shape_t{static_cast<std::int64_t>(sb.size())};
    t.set_initializer(sn, float_tensor(shape, sb));
    t.set_initializer(zn, int_tensor(dtype_id::int32, shape, z));
    t.set_initializer(dn, codes);
    dq.set_input(0, dn);
    dq.set_input(1, sn);
    dq.set_input(2, zn);
    bool has_axis = false;
    for (auto& a : *dq.mutable_attribute()) {
      if (a.name() == "axis") {
        a.set_i(0);
        has_axis = true;
      }
    }
    if (sb.size() > 1 && !has_axis) {
      auto* a = dq.add_attribute();
      a->set_name("axis");
      a->set_type(::onnx::AttributeProto::INT);
      a->set_i(0);
    }
    changes.push_back(
        {md.bias->report_name, "bias", md.name, dtype_id::int32, dtype_id::int32, sb, z, false});
  }

  static void drop_value_info(GraphProto& g, const std::string& name) {
    auto* vi = g.mutable_value_info();
    for (int i = vi->size() - 1; i >= 0; --i) {
      if (vi->Get(i).name() == name)
        vi->DeleteSubrange(i, 1);
    }
  }

  mutable std::size_t widened_ = 0;  ///< bias scales widened to hold the int32 codes (last apply)
  mutable std::set<std::string> retired_;  ///< initializers a changed pair stopped reading
  const model& base_;
  const model& fm_;
  const auto_mp_options& o_;
  std::vector<mp_module> mods_;
  std::map<std::string, const NodeProto*> float_nodes_;
};

/// The metric of a quantized model against the float model on the cached samples.
class evaluator {
 public:
  evaluator(const model& float_model, calibration_data_reader& reader, const auto_mp_options& o)
      : o_(o) {
    reader.rewind();
    while (samples_.size() < o.data_size) {
      auto s = reader.next();
      if (!s)
        break;
      samples_.push_back(std::move(*s));
    }
    if (samples_.empty()) {
      throw frontend_error("quark.calib.empty_input",
                           "auto_mixprecision: the calibration data reader gave no sample");
    }
    ref_ = outputs(float_model);
  }

  std::size_t samples() const { return samples_.size(); }

  double measure(const model& m) const { return score(outputs(m)); }

 private:
  std::vector<tensor> outputs(const model& m) const {
    const runtime rt(m);
    if (o_.output_index >= rt.outputs().size()) {
      throw config_error(
          "quark.config.value",
          "algo_config auto_mixprecision.output_index: " + std::to_string(o_.output_index) +
              " but the model has " + std::to_string(rt.outputs().size()) + " output(s)");
    }
    const std::string name = rt.outputs()[o_.output_index].name;
    std::vector<tensor> out;
    for (const auto& s : samples_) {
      auto r = rt.run(s);
      out.push_back(as_float32(std::move(r.at(name)), name));
    }
    return out;
  }

  /// An integer, bool, float8 or int4 output (ArgMax, a Cast, a comparison) is measured by its
  /// values converted to float (Quark's numpy subtraction would wrap unsigned values and refuse
  /// bool); string and complex values, which the runtime does not make, are refused by name.
  static tensor as_float32(tensor v, const std::string& name) {
    const dtype_id t = v.type();
    auto f = numeric_as_float32(std::move(v));
    if (!f) {
      throw frontend_error("quark.quantize.auto_mp",
                           "auto_mixprecision: output '" + name + "' is " +
                               std::string(dtype_name(t)) +
                               ", which has no distance to measure (output_index picks another)");
    }
    return std::move(*f);
  }

  double score(const std::vector<tensor>& q) const {
    double total = 0.0;
    std::size_t rows_total = 0;
    for (std::size_t i = 0; i < q.size(); ++i) {
      const auto a = ref_[i].data<float>();
      const auto b = q[i].data<float>();
      if (a.size() != b.size()) {
        throw frontend_error("quark.quantize.auto_mp",
                             "auto_mixprecision: the quantized output has another size");
      }
      if (o_.top1_acc_target) {
        // Top-1 along the last axis of each row; the float model's choice is the reference.
        const std::size_t last =
            ref_[i].shape().empty() ? 1 : static_cast<std::size_t>(ref_[i].shape().back());
        for (std::size_t r = 0; last > 0 && r + last <= a.size(); r += last) {
          const auto fa = std::max_element(a.begin() + static_cast<std::ptrdiff_t>(r),
                                           a.begin() + static_cast<std::ptrdiff_t>(r + last));
          const auto fb = std::max_element(b.begin() + static_cast<std::ptrdiff_t>(r),
                                           b.begin() + static_cast<std::ptrdiff_t>(r + last));
          if (fa - a.begin() != fb - b.begin())
            total += 1.0;
          ++rows_total;
        }
      } else {
        double sum = 0.0;
        for (std::size_t k = 0; k < a.size(); ++k) {
          const float d = a[k] - b[k];
          sum += static_cast<double>(d) * static_cast<double>(d);
        }
        total += std::sqrt(sum);
      }
    }
    if (o_.top1_acc_target)
      return rows_total == 0 ? 0.0
                             : std::round(total / static_cast<double>(rows_total) * 1e4) / 1e4;
    return total / static_cast<double>(q.size());
  }

  const auto_mp_options& o_;
  std::vector<calib_sample> samples_;
  std::vector<tensor> ref_;
};

std::string fmt(double v) {
  std::ostringstream os;
  os.precision(6);
  os << v;
  return os.str();
}

}  // namespace

auto_mp_result auto_mixed_precision(model& qm, const model& float_model,
                                    calibration_data_reader& reader, const auto_mp_options& o) {
  auto_mp_result r;
  r.notes = o.notes;
  const mixer mx(qm, float_model, o);
  const std::vector<mp_module>& mods = mx.modules();
  r.modules = mods.size();
  const char* metric_name = o.top1_acc_target ? "top-1 loss" : "average L2";

  // target_tensors: the named tensors' pairs change, nothing is measured.
  std::vector<std::size_t> chosen;
  std::vector<auto_mp_change> changes;
  const std::set<std::string> only(o.target_tensors.begin(), o.target_tensors.end());
  if (!o.target_tensors.empty()) {
    for (const auto& name : o.target_tensors) {
      bool found = false;
      for (std::size_t k = 0; k < mods.size(); ++k) {
        const mp_module& md = mods[k];
        const bool act = md.act && md.act->report_name == name;
        const bool w = md.weight && md.weight->report_name == name;
        if (act || w) {
          found = true;
          if (std::find(chosen.begin(), chosen.end(), k) == chosen.end())
            chosen.push_back(k);
        }
      }
      if (!found) {
        throw config_error("quark.config.value",
                           "algo_config auto_mixprecision.target_tensors: '" + name +
                               "' is not a quantized input of a target_op_type node");
      }
    }
  } else if (!o.target_indices.empty() || !o.exclude_indices.empty()) {
    for (const auto& [list, key] : {std::pair{&o.target_indices, "target_indices"},
                                    std::pair{&o.exclude_indices, "exclude_indices"}}) {
      for (const std::size_t i : *list) {
        if (i >= mods.size()) {
          throw config_error("quark.config.value",
                             std::string("algo_config auto_mixprecision.") + key + ": index " +
                                 std::to_string(i) + " but the model has " +
                                 std::to_string(mods.size()) + " target nodes");
        }
      }
    }
    if (!o.target_indices.empty()) {
      chosen = o.target_indices;
    } else {
      for (std::size_t k = 0; k < mods.size(); ++k) {
        if (std::find(o.exclude_indices.begin(), o.exclude_indices.end(), k) ==
            o.exclude_indices.end())
          chosen.push_back(k);
      }
    }
  }
  if (mods.empty()) {
    // Nothing can change type: no measurement, the model stays as quantized (a model of
    // comparisons or integer arithmetic must not fail for having no candidate).
    r.notes.push_back(
        "auto_mixprecision: the model has no target node with quantized inputs "
        "(target_op_type); nothing to mix");
    return r;
  }
  const evaluator ev(float_model, reader, o);
  r.samples = ev.samples();
  r.metric_before = ev.measure(qm);
  auto within = [&](double m) {
    return o.top1_acc_target ? m <= *o.top1_acc_target : (!o.l2_target || m <= *o.l2_target);
  };
  auto has_target = static_cast<bool>(o.top1_acc_target) || static_cast<bool>(o.l2_target);
  // Target nodes whose Q/DQ pairs are float8 or bfloat16 / float16 cannot change type (only
  // integer pairs move): an error when no node is left to mix, else a note.
  auto refuse_stuck = [&](std::size_t stuck, bool none_left) {
    if (stuck == 0)
      return;
    const std::string what = std::to_string(stuck) + " target node(s) whose Q/DQ pairs are not " +
                             "integer (float8 or bfloat16 / float16) cannot change type; " +
                             "auto_mixprecision moves integer pairs only (QBFP / QMX mix into any)";
    if (none_left)
      throw not_implemented("quark.config.not_implemented",
                            "algo_config auto_mixprecision: " + what);
    r.notes.push_back("auto_mixprecision: " + what + ": left as they are");
  };

  if (chosen.empty() && o.target_tensors.empty() && o.target_indices.empty() &&
      o.exclude_indices.empty()) {
    // Candidates: modules whose types would change, input 0 not shared when so asked.
    std::vector<std::size_t> cand;
    std::size_t stuck = 0;
    for (std::size_t k = 0; k < mods.size(); ++k) {
      if (mx.stuck(mods[k]) && !mx.would_change(mods[k]))
        ++stuck;
      if (!mx.would_change(mods[k]))
        continue;
      if (o.no_input_qdq_shared && mods[k].shared) {
        ++r.shared_skipped;
        continue;
      }
      cand.push_back(k);
    }
    r.candidates = cand.size();
    refuse_stuck(stuck, cand.empty());
    if (!cand.empty()) {
      const mp_module& first = mods[cand.front()];
      const dtype_id now =
          first.act && o.act_type ? mx.type_of(qm, *first.act) : mx.type_of(qm, *first.weight);
      const dtype_id to = first.act && o.act_type ? *o.act_type : *o.weight_type;
      // A float8 target of an int8 tensor is a raise too: the same width, a far wider range
      // (the switch is made for accuracy, so the sensitive modules are the ones to change).
      r.raised = bits_of(to) > bits_of(now) ||
                 (bits_of(to) == bits_of(now) && fp8_type(to) && integer_type(now));
    }
    r.notes.push_back("auto_mixprecision: " + std::to_string(cand.size()) + " of " +
                      std::to_string(mods.size()) + " target nodes are candidates (" +
                      std::to_string(r.shared_skipped) + " skipped: shared input), " +
                      std::to_string(r.samples) + " samples, " + metric_name + " " +
                      fmt(r.metric_before) + " before");
    const bool top1_already_failed = !r.raised && o.top1_acc_target && o.num_target == 0 &&
                                     *o.top1_acc_target <= r.metric_before;
    const bool nothing_to_do = r.raised && has_target && within(r.metric_before);
    if (top1_already_failed) {
      r.notes.push_back("auto_mixprecision: the top-1 loss " + fmt(r.metric_before) +
                        " already reaches top1_acc_target; nothing changed (as in Quark)");
      cand.clear();
    }
    if (nothing_to_do) {
      r.notes.push_back("auto_mixprecision: the target is met already; nothing raised");
      cand.clear();
    }
    // Lowering (Quark): from the model as it is, each candidate mixed alone. Raising: from the
    // model with every candidate raised, each candidate left at its original type alone (the
    // cost of not raising it); then Quark's lowering runs back from that model, so the modules
    // that stay raised are the sensitive ones.
    auto model_with = [&](const std::vector<std::size_t>& ks) {
      if (!r.raised)
        return mx.apply(ks, nullptr);
      std::vector<std::size_t> up;
      for (const std::size_t c : cand) {
        if (std::find(ks.begin(), ks.end(), c) == ks.end())
          up.push_back(c);
      }
      return mx.apply(up, nullptr);
    };
    double now = r.metric_before;
    if (r.raised && !cand.empty()) {
      now = ev.measure(model_with({}));
      r.notes.push_back("auto_mixprecision: every candidate raised: " + std::string(metric_name) +
                        " " + fmt(now) +
                        (has_target && !within(now) ? " (over the target: all stay raised)" : ""));
    }
    // auto_mix_use_fast_ft (Quark): the candidate, once mixed, is fine-tuned alone before it is
    // measured; the fine-tuned weights serve the ranking only and are not kept.
    std::size_t tuned = 0;
    auto score_of = [&](std::size_t k) {
      model mk = model_with({k});
      if (o.fast_ft && !mods[k].name.empty()) {
        finetune_options f = *o.fast_ft;
        f.only_nodes = {mods[k].name};
        const finetune_stats fs = fast_finetune(mk, float_model, reader, f, o.data_size);
        tuned += fs.improved;
      }
      return ev.measure(mk);
    };
    std::vector<std::pair<std::size_t, double>> scored;
    for (const std::size_t k : cand)
      scored.emplace_back(k, score_of(k));
    if (o.fast_ft && !cand.empty()) {
      r.notes.push_back(
          "auto_mixprecision: auto_mix_use_fast_ft: each candidate fine-tuned alone (" +
          std::string(o.fast_ft->adaquant ? "adaquant" : "adaround") + ", " +
          std::to_string(o.fast_ft->num_iterations) + " iterations) before it " + "was measured, " +
          std::to_string(tuned) + " of " + std::to_string(cand.size()) +
          " improved by it; the fine-tuned weights are not kept (as in Quark)");
    }
    std::stable_sort(scored.begin(), scored.end(),
                     [](const auto& a, const auto& b) { return a.second < b.second; });
    for (std::size_t i = 0; i < scored.size(); ++i) {
      if (i < 10 || i + 3 >= scored.size()) {
        r.notes.push_back("auto_mixprecision: rank " + std::to_string(i) + ": " +
                          mods[scored[i].first].name +
                          (r.raised ? " alone at its type -> " : " alone -> ") + metric_name + " " +
                          fmt(scored[i].second));
      }
    }
    std::vector<std::size_t> low;  // modules at the lower type (raising: not raised)
    // Raising with num_target keeps the num_target most sensitive raised.
    std::size_t keep_low = scored.size();
    if (r.raised && o.num_target > 0)
      keep_low = o.num_target >= scored.size() ? 0 : scored.size() - o.num_target;
    for (const auto& sc : scored) {
      const std::size_t k = sc.first;
      std::vector<std::size_t> trial = low;
      trial.push_back(k);
      if (o.num_target > 0) {
        // Quark: num_target decides, the metric is not checked.
        if (!r.raised) {
          low = trial;
          if (low.size() >= o.num_target)
            break;
        } else if (low.size() < keep_low) {
          low = trial;
        }
        continue;
      }
      if (r.raised && has_target && !within(now))
        break;  // the target cannot be met: every candidate stays raised
      const double m = ev.measure(model_with(trial));
      if (!within(m)) {
        r.notes.push_back("auto_mixprecision: " + mods[k].name + " " +
                          (r.raised ? "left at its type" : "lowered") + " would take the " +
                          metric_name + " to " + fmt(m) + ", over the target: stop");
        break;
      }
      low = trial;
      r.notes.push_back("auto_mixprecision: step " + std::to_string(low.size()) + ": " +
                        mods[k].name + (r.raised ? " left at its type, " : " lowered, ") +
                        metric_name + " " + fmt(now) + " -> " + fmt(m));
      now = m;
    }
    if (!r.raised) {
      chosen = low;
    } else {
      for (const auto& sc : scored) {
        if (std::find(low.begin(), low.end(), sc.first) == low.end())
          chosen.push_back(sc.first);
      }
    }
  } else {
    // Named nodes (target_tensors, target_indices, exclude_indices) whose pairs cannot move.
    std::vector<std::size_t> movable;
    std::size_t stuck = 0;
    for (const std::size_t k : chosen) {
      if (mx.stuck(mods[k]) && !mx.would_change(mods[k]))
        ++stuck;
      else
        movable.push_back(k);
    }
    refuse_stuck(stuck, movable.empty());
    chosen = std::move(movable);
    r.candidates = chosen.size();
    if (!chosen.empty()) {
      const mp_module& first = mods[chosen.front()];
      const dtype_id now = first.act && o.act_type ? mx.type_of(qm, *first.act)
                                                   : (first.weight ? mx.type_of(qm, *first.weight)
                                                                   : dtype_id::undefined);
      const dtype_id to =
          first.act && o.act_type ? *o.act_type : (o.weight_type ? *o.weight_type : now);
      // A float8 target of an int8 tensor is a raise too: the same width, a far wider range
      // (the switch is made for accuracy, so the sensitive modules are the ones to change).
      r.raised = bits_of(to) > bits_of(now) ||
                 (bits_of(to) == bits_of(now) && fp8_type(to) && integer_type(now));
    }
  }
  model out = mx.apply(chosen, &changes, o.target_tensors.empty() ? nullptr : &only);
  r.metric_after = ev.measure(out);
  if (mx.widened_biases() > 0) {
    r.notes.push_back("auto_mixprecision: " + std::to_string(mx.widened_biases()) +
                      " int32 bias channels take a wider scale than input scale * weight scale "
                      "(their codes would pass the int32 range)");
  }
  for (const std::size_t k : chosen)
    r.changed.push_back(mods[k].name);
  r.tensors = std::move(changes);
  std::string names;
  for (std::size_t i = 0; i < r.changed.size(); ++i)
    names += (i ? ", " : "") + r.changed[i];
  r.notes.push_back(
      "auto_mixprecision: " + std::to_string(r.changed.size()) + " of " +
      std::to_string(mods.size()) + " target nodes " + (r.raised ? "raised" : "lowered") +
      " to activation " + (o.act_type ? type_str(*o.act_type) : std::string("(unchanged)")) +
      ", weight " + (o.weight_type ? type_str(*o.weight_type) : std::string("(unchanged)")) + "; " +
      metric_name + " " + fmt(r.metric_before) + " -> " + fmt(r.metric_after) +
      (names.empty() ? "" : " (" + names + ")"));
  qm = std::move(out);
  return r;
}

void report_auto_mp(quantize_report& report, const auto_mp_result& r) {
  for (const auto& c : r.tensors) {
    if (c.added) {
      report.tensors.push_back(
          {c.tensor, c.role, type_str(c.to), 0.0f, 0.0f, c.scale, c.zero_point, -1});
      ++report.tensors_per_type[type_str(c.to)];
      continue;
    }
    for (auto& t : report.tensors) {
      if (t.name != c.tensor || t.role != c.role)
        continue;
      if (t.type != type_str(c.to)) {
        if (auto it = report.tensors_per_type.find(t.type);
            it != report.tensors_per_type.end() && it->second > 0)
          --it->second;
        ++report.tensors_per_type[type_str(c.to)];
      }
      t.type = type_str(c.to);
      t.scale = c.scale;
      t.zero_point = c.zero_point;
      break;
    }
  }
  report.notes.insert(report.notes.end(), r.notes.begin(), r.notes.end());
}

std::vector<dtype_id> auto_mp_types(const auto_mp_options& o) {
  std::vector<dtype_id> out;
  for (const auto& t : {o.act_type, o.weight_type, o.bias_type}) {
    if (t)
      out.push_back(*t);
  }
  return out;
}

}  // namespace quark::onnx::qz
