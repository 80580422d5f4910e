// SPDX-License-Identifier: MIT
// Category-1 preprocessing before calibration (preprocess.hpp).
#include "quantizer/preprocess.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <optional>
#include <set>

#include <onnx/defs/schema.h>
#include <onnx/shape_inference/implementation.h>
#include <onnx/version_converter/convert.h>

#include <quark/onnx/config.hpp>

#include "io/infer_shapes.hpp"
#include "io/proto_access.hpp"
#include "quantizer/graph_util.hpp"
#include "quantizer/opset.hpp"
#include "quantizer/tensor_build.hpp"

namespace quark::onnx::qz {

namespace {

using ::onnx::GraphProto;
using ::onnx::NodeProto;

// ---- small queries ----------------------------------------------------------------------------

/// The value of a one-element float32 initializer.
std::optional<double> scalar(const model& m, const std::string& name) {
  const auto v = float_scalar(m, name);
  return v ? std::optional<double>(static_cast<double>(*v)) : std::nullopt;
}

/// `v` is `want` to float32 precision (exporters write sqrt(2), 1/sqrt(2) as float32 constants).
bool near(std::optional<double> v, double want) {
  return v && std::fabs(*v - want) <= 1e-6 * std::fabs(want);
}

/// A Reduce* node over the single axis `axis` that keeps its dimensions.
bool reduces_one_axis(const model& m, const NodeProto& n, const char* op, std::int64_t& axis) {
  if (n.op_type() != op || attr_i(n, "keepdims", 1) != 1)
    return false;
  const auto axes = reduce_axes(m, n);
  if (!axes || axes->size() != 1)
    return false;
  axis = axes->front();
  return true;
}

/// Matching state of one graph: its index, where each node sits, and the nodes already claimed
/// by a fusion (a node joins at most one).
struct matcher {
  model& m;
  GraphProto& g;
  graph_index ix;
  std::map<const NodeProto*, int> at;  // replacing a node's contents keeps its address
  std::vector<bool> claimed, dead;
  std::set<std::string> retired_inputs;  // inputs of the removed nodes (initializers may go)

  explicit matcher(model& mm)
      : m(mm),
        g(*proto(mm).mutable_graph()),
        ix(g),
        claimed(static_cast<std::size_t>(g.node_size()), false),
        dead(static_cast<std::size_t>(g.node_size()), false) {
    for (int i = 0; i < g.node_size(); ++i)
      at.emplace(&g.node(i), i);
  }

  int index(const NodeProto* n) const { return at.at(n); }
  /// Node i when it is unclaimed and of op type `op` (where a fusion's pattern is anchored).
  const NodeProto* anchor(int i, std::string_view op) const {
    const NodeProto& n = g.node(i);
    return !claimed[static_cast<std::size_t>(i)] && n.op_type() == op ? &n : nullptr;
  }
  /// The unclaimed node producing `name` with op type `op` (any op type when `op` is empty).
  const NodeProto* producer(const std::string& name, std::string_view op = {}) const {
    auto it = ix.producer.find(name);
    if (it == ix.producer.end() || claimed[static_cast<std::size_t>(it->second)])
      return nullptr;
    const NodeProto& n = g.node(it->second);
    return op.empty() || n.op_type() == op ? &n : nullptr;
  }
  /// `name` is read only by the nodes `readers` (each possibly several times), is no graph
  /// output and no subgraph reads it.
  bool internal(const std::string& name, std::initializer_list<const NodeProto*> readers) const {
    if (ix.outputs.contains(name) || ix.implicit.contains(name))
      return false;
    auto it = ix.consumers.find(name);
    if (it == ix.consumers.end())
      return false;
    return std::all_of(it->second.begin(), it->second.end(), [&](int c) {
      return std::any_of(readers.begin(), readers.end(),
                         [&](const NodeProto* r) { return r != nullptr && index(r) == c; });
    });
  }
  /// The single unclaimed reader of `name` with op type `op` (a node reading it twice, as
  /// Mul(d, d), is not single).
  const NodeProto* only_reader(const std::string& name, std::string_view op) const {
    const auto c = ix.only_consumer(name);
    if (!c || claimed[static_cast<std::size_t>(*c)])
      return nullptr;
    const NodeProto& n = g.node(*c);
    return n.op_type() == op ? &n : nullptr;
  }
  /// Replaces `last` by `fused` (same position, so the order stays topological: every input of
  /// the chain is computed before its first node) and retires the other `chain` nodes.
  void replace(const NodeProto* last, NodeProto fused,
               std::initializer_list<const NodeProto*> chain) {
    for (const NodeProto* n : chain) {
      if (n == nullptr)
        continue;
      const auto i = static_cast<std::size_t>(index(n));
      claimed[i] = true;
      retired_inputs.insert(n->input().begin(), n->input().end());
      if (n != last)
        dead[i] = true;
    }
    const int i = index(last);
    claimed[static_cast<std::size_t>(i)] = true;
    *g.mutable_node(i) = std::move(fused);
  }
  /// Drops the retired nodes and the initializers only they read.
  void finish() {
    compact_nodes(g, dead);
    at.clear();
    drop_unused_initializers(m, retired_inputs);
  }
};

/// The other input of a two-input node.
const std::string& other(const NodeProto& n, const std::string& x) {
  return n.input(0) == x ? n.input(1) : n.input(0);
}

/// A float32 initializer holding one value per channel: shaped [c] or [1, ..., 1, c]
/// (per-last-axis), or [c, 1, ..., 1] / [1, c, 1, ..., 1] (per-channel, `channel` true, rank 3 or
/// more). `as_1d()` names it as a one-dimensional initializer: itself when already 1-D, else a
/// new reshaped copy (made only then, when the fusion is applied).
struct vec_ref {
  std::string name;
  std::int64_t size = 0;
  bool reshape = false;
};
std::optional<vec_ref> per_axis_values(const model& m, const std::string& name, bool channel) {
  if (name.empty() || !m.has_initializer(name))
    return std::nullopt;
  const tensor t = m.initializer(name);
  if (t.type() != dtype_id::float32 || t.rank() == 0 || (channel && t.rank() != 1 && t.rank() < 3))
    return std::nullopt;
  const shape_t& s = t.shape();
  const std::size_t big = !channel ? s.size() - 1 : (s.size() >= 3 && s[0] == 1 ? 1 : 0);
  for (std::size_t d = 0; d < s.size(); ++d) {
    if (d != big && s[d] != 1)
      return std::nullopt;
  }
  return vec_ref{name, s[big], s.size() != 1};
}
std::string as_1d(model& m, name_pool& names, const vec_ref& v) {
  if (!v.reshape)
    return v.name;
  const tensor t = m.initializer(v.name);
  std::string fresh = names.fresh(v.name + "_1d");
  m.set_initializer(fresh, tensor::from_floats({v.size}, t.data<float>()));
  return fresh;
}

NodeProto make_node(const std::string& op, const std::string& name,
                    std::initializer_list<std::string> inputs, const std::string& output) {
  NodeProto n;
  n.set_op_type(op);
  n.set_name(name);
  for (const auto& x : inputs)
    n.add_input(x);
  n.add_output(output);
  return n;
}
// ---- the fusions ------------------------------------------------------------------------------

/// (x - mean) / sqrt(var + eps) * gamma (+ beta) over the last axis -> LayerNormalization, with
/// mean = ReduceMean(x, [-1]), var = ReduceMean((x - mean)^2, [-1]), the square a Pow(., 2) or
/// a Mul(d, d), anchored at the Div.
std::size_t fuse_layer_norm(matcher& mt, name_pool& names, bool apply) {
  std::size_t found = 0;
  for (int i = 0; i < mt.g.node_size(); ++i) {
    const NodeProto* div = mt.anchor(i, "Div");
    if (div == nullptr)
      continue;
    const std::string& d = div->input(0);
    const NodeProto* sqrt = mt.producer(div->input(1), "Sqrt");
    const NodeProto* add_eps = sqrt ? mt.producer(sqrt->input(0), "Add") : nullptr;
    if (add_eps == nullptr)
      continue;
    const bool eps_second = scalar(mt.m, add_eps->input(1)).has_value();
    const std::string& var = eps_second ? add_eps->input(0) : add_eps->input(1);
    const auto eps = scalar(mt.m, eps_second ? add_eps->input(1) : add_eps->input(0));
    const NodeProto* red_var = mt.producer(var, "ReduceMean");
    std::int64_t axis_var = 0, axis_mean = 0;
    if (!eps || red_var == nullptr || !reduces_one_axis(mt.m, *red_var, "ReduceMean", axis_var) ||
        axis_var != -1)
      continue;
    const NodeProto* square = mt.producer(red_var->input(0));
    if (square == nullptr ||
        !((square->op_type() == "Pow" && square->input(0) == d &&
           near(scalar(mt.m, square->input(1)), 2.0)) ||
          (square->op_type() == "Mul" && square->input(0) == d && square->input(1) == d)))
      continue;
    const NodeProto* sub = mt.producer(d, "Sub");
    if (sub == nullptr)
      continue;
    const std::string& x = sub->input(0);
    const NodeProto* red_mean = mt.producer(sub->input(1), "ReduceMean");
    if (red_mean == nullptr || red_mean->input(0) != x ||
        !reduces_one_axis(mt.m, *red_mean, "ReduceMean", axis_mean) || axis_mean != -1)
      continue;
    const NodeProto* mul = mt.only_reader(div->output(0), "Mul");
    if (mul == nullptr)
      continue;
    const auto gamma = per_axis_values(mt.m, other(*mul, div->output(0)), false);
    if (!gamma)
      continue;
    const NodeProto* add = mt.only_reader(mul->output(0), "Add");
    std::optional<vec_ref> beta;
    if (add != nullptr)
      beta = per_axis_values(mt.m, other(*add, mul->output(0)), false);
    if (!beta)
      add = nullptr;
    // Everything inside the chain is read only inside it.
    if (!mt.internal(sub->input(1), {sub}) || !mt.internal(d, {square, div}) ||
        !mt.internal(square->output(0), {red_var}) || !mt.internal(var, {add_eps}) ||
        !mt.internal(add_eps->output(0), {sqrt}) || !mt.internal(sqrt->output(0), {div}))
      continue;
    ++found;
    if (!apply)
      continue;
    const NodeProto* last = add != nullptr ? add : mul;
    const std::string g = as_1d(mt.m, names, *gamma);
    NodeProto ln = beta ? make_node("LayerNormalization", last->name(),
                                    {x, g, as_1d(mt.m, names, *beta)}, last->output(0))
                        : make_node("LayerNormalization", last->name(), {x, g}, last->output(0));
    add_int_attribute(ln, "axis", -1);
    add_float_attribute(ln, "epsilon", static_cast<float>(*eps));
    mt.replace(last, std::move(ln), {red_mean, sub, square, red_var, add_eps, sqrt, div, mul, add});
  }
  return found;
}

/// x * 0.5 * (1 + erf(x / sqrt(2))) in any association of the two Muls (x / sqrt(2) may be a
/// Mul by 1 / sqrt(2)) -> Gelu, anchored at the Erf.
std::size_t fuse_gelu(matcher& mt, bool apply) {
  std::size_t found = 0;
  for (int i = 0; i < mt.g.node_size(); ++i) {
    const NodeProto* erf = mt.anchor(i, "Erf");
    if (erf == nullptr)
      continue;
    const NodeProto* scale = mt.producer(erf->input(0));
    if (scale == nullptr)
      continue;
    const bool by_half_root =
        scale->op_type() == "Mul" && near(scalar(mt.m, scale->input(0)), std::sqrt(0.5));
    const std::string& x = by_half_root ? scale->input(1) : scale->input(0);
    if (!by_half_root &&
        !((scale->op_type() == "Div" && near(scalar(mt.m, scale->input(1)), std::sqrt(2.0))) ||
          (scale->op_type() == "Mul" && near(scalar(mt.m, scale->input(1)), std::sqrt(0.5)))))
      continue;
    const NodeProto* add = mt.only_reader(erf->output(0), "Add");
    if (add == nullptr || !near(scalar(mt.m, other(*add, erf->output(0))), 1.0))
      continue;
    const NodeProto* m1 = mt.only_reader(add->output(0), "Mul");
    if (m1 == nullptr)
      continue;
    const std::string& o1 = other(*m1, add->output(0));
    const NodeProto* last = nullptr;
    const NodeProto* half = nullptr;  // Mul(x, 0.5) feeding m1 (third form)
    if (const NodeProto* m2 = mt.only_reader(m1->output(0), "Mul");
        m2 != nullptr && ((o1 == x && near(scalar(mt.m, other(*m2, m1->output(0))), 0.5)) ||
                          (near(scalar(mt.m, o1), 0.5) && other(*m2, m1->output(0)) == x))) {
      last = m2;
    } else if (const NodeProto* h = mt.producer(o1, "Mul");
               h != nullptr && (h->input(0) == x || h->input(1) == x) &&
               near(scalar(mt.m, other(*h, x)), 0.5) && mt.internal(o1, {m1})) {
      last = m1;
      half = h;
    }
    if (last == nullptr || !mt.internal(scale->output(0), {erf}))
      continue;
    ++found;
    if (apply) {
      mt.replace(last, make_node("Gelu", last->name(), {x}, last->output(0)),
                 {scale, erf, add, m1, half, last});
    }
  }
  return found;
}

/// Instance normalization written with GlobalAveragePool (Quark's pattern):
///   mean = GAP(x), d = x - mean, k = gamma / sqrt(GAP(d * d) + eps),
///   y = x * k + (beta - mean * k)  -> InstanceNormalization(x, gamma, beta), anchored at the
/// final Add.
std::size_t fuse_instance_norm(matcher& mt, name_pool& names, bool apply) {
  std::size_t found = 0;
  for (int i = 0; i < mt.g.node_size(); ++i) {
    const NodeProto* out = mt.anchor(i, "Add");
    if (out == nullptr)
      continue;
    const NodeProto* mx = mt.producer(out->input(0), "Mul");
    const NodeProto* shift = mt.producer(out->input(1), "Sub");
    if (mx == nullptr || shift == nullptr) {
      mx = mt.producer(out->input(1), "Mul");
      shift = mt.producer(out->input(0), "Sub");
    }
    if (mx == nullptr || shift == nullptr)
      continue;
    const NodeProto* mean_k = mt.producer(shift->input(1), "Mul");
    if (mean_k == nullptr)
      continue;
    // k is the operand mx and mean_k share; mx's other operand is x, mean_k's is GAP(x).
    std::string k;
    for (const auto& a : mx->input()) {
      if (a == mean_k->input(0) || a == mean_k->input(1))
        k = a;
    }
    if (k.empty())
      continue;
    const std::string& x = other(*mx, k);
    const NodeProto* mean = mt.producer(other(*mean_k, k), "GlobalAveragePool");
    const NodeProto* kn = mt.producer(k, "Mul");
    if (mean == nullptr || mean->input(0) != x || kn == nullptr)
      continue;
    const NodeProto* recip = mt.producer(kn->input(0), "Reciprocal");
    const std::string* gamma_name = &kn->input(1);
    if (recip == nullptr) {
      recip = mt.producer(kn->input(1), "Reciprocal");
      gamma_name = &kn->input(0);
    }
    const NodeProto* sqrt = recip ? mt.producer(recip->input(0), "Sqrt") : nullptr;
    const NodeProto* add_eps = sqrt ? mt.producer(sqrt->input(0), "Add") : nullptr;
    if (add_eps == nullptr)
      continue;
    const bool eps_second = scalar(mt.m, add_eps->input(1)).has_value();
    const auto eps = scalar(mt.m, eps_second ? add_eps->input(1) : add_eps->input(0));
    const NodeProto* var =
        mt.producer(eps_second ? add_eps->input(0) : add_eps->input(1), "GlobalAveragePool");
    const NodeProto* square = var ? mt.producer(var->input(0), "Mul") : nullptr;
    if (!eps || square == nullptr || square->input(0) != square->input(1))
      continue;
    const NodeProto* sub = mt.producer(square->input(0), "Sub");
    if (sub == nullptr || sub->input(0) != x)
      continue;
    const NodeProto* mean2 = mt.producer(sub->input(1), "GlobalAveragePool");
    if (mean2 == nullptr || mean2->input(0) != x)
      continue;
    const auto gamma = per_axis_values(mt.m, *gamma_name, true);
    const auto beta = per_axis_values(mt.m, shift->input(0), true);
    if (!gamma || !beta)
      continue;
    // The chain's values stay inside it (mean may be shared by the Sub and the Mul when the
    // model computes GAP(x) once).
    const bool one_mean = mean == mean2;
    if (!mt.internal(mx->output(0), {out}) || !mt.internal(shift->output(0), {out}) ||
        !mt.internal(mean_k->output(0), {shift}) || !mt.internal(k, {mx, mean_k}) ||
        !mt.internal(recip->output(0), {kn}) || !mt.internal(sqrt->output(0), {recip}) ||
        !mt.internal(add_eps->output(0), {sqrt}) || !mt.internal(var->output(0), {add_eps}) ||
        !mt.internal(square->output(0), {var}) || !mt.internal(sub->output(0), {square}) ||
        !(one_mean
              ? mt.internal(mean->output(0), {mean_k, sub})
              : mt.internal(mean->output(0), {mean_k}) && mt.internal(mean2->output(0), {sub})))
      continue;
    ++found;
    if (!apply)
      continue;
    NodeProto in =
        make_node("InstanceNormalization", out->name(),
                  {x, as_1d(mt.m, names, *gamma), as_1d(mt.m, names, *beta)}, out->output(0));
    add_float_attribute(in, "epsilon", static_cast<float>(*eps));
    mt.replace(out, std::move(in),
               {mx, shift, mean_k, kn, recip, sqrt, add_eps, var, square, sub, mean,
                one_mean ? nullptr : mean2, out});
  }
  return found;
}

/// x * Reciprocal(Sqrt(Max(ReduceSum(x * x, [a]), eps))) (or x / Sqrt(Max(...))) ->
/// LpNormalization(x, axis = a, p = 2), anchored at the Sqrt. The fused form has no eps: the two
/// differ only where the squared norm is below eps and not 0 (a zero vector gives zeros in both).
std::size_t fuse_l2_norm(matcher& mt, bool apply) {
  std::size_t found = 0;
  for (int i = 0; i < mt.g.node_size(); ++i) {
    const NodeProto* sqrt = mt.anchor(i, "Sqrt");
    if (sqrt == nullptr)
      continue;
    const NodeProto* mx = mt.producer(sqrt->input(0), "Max");
    if (mx == nullptr || mx->input_size() != 2)
      continue;
    const bool eps_second = scalar(mt.m, mx->input(1)).has_value();
    const NodeProto* sum = mt.producer(eps_second ? mx->input(0) : mx->input(1));
    std::int64_t axis = 0;
    if (!scalar(mt.m, eps_second ? mx->input(1) : mx->input(0)) || sum == nullptr ||
        !reduces_one_axis(mt.m, *sum, "ReduceSum", axis))
      continue;
    const NodeProto* square = mt.producer(sum->input(0), "Mul");
    if (square == nullptr || square->input(0) != square->input(1))
      continue;
    const std::string& x = square->input(0);
    const NodeProto* last = nullptr;
    const NodeProto* recip = mt.only_reader(sqrt->output(0), "Reciprocal");
    if (recip != nullptr) {
      const NodeProto* mul = mt.only_reader(recip->output(0), "Mul");
      if (mul != nullptr && other(*mul, recip->output(0)) == x)
        last = mul;
    } else if (const NodeProto* div = mt.only_reader(sqrt->output(0), "Div");
               div != nullptr && div->input(0) == x && div->input(1) == sqrt->output(0)) {
      last = div;
    }
    if (last == nullptr || !mt.internal(square->output(0), {sum}) ||
        !mt.internal(sum->output(0), {mx}) || !mt.internal(mx->output(0), {sqrt}))
      continue;
    ++found;
    if (!apply)
      continue;
    NodeProto lp = make_node("LpNormalization", last->name(), {x}, last->output(0));
    add_int_attribute(lp, "axis", axis);
    add_int_attribute(lp, "p", 2);
    mt.replace(last, std::move(lp), {square, sum, mx, sqrt, recip, last});
  }
  return found;
}

/// Runs one fusion over `m` and reports it; `need_opset` is the default-domain opset the fused
/// operator needs (0: any).
template <class Fuse>
void run_fusion(model& m, const char* key, std::int64_t need_opset, const char* op,
                std::vector<std::string>& notes, Fuse&& fuse) {
  const std::int64_t have = m.opset("").value_or(1);
  const bool apply = have >= need_opset;
  matcher mt(m);
  name_pool names(mt.g);
  const std::size_t k = fuse(mt, names, apply);
  if (k == 0)
    return;
  if (!apply) {
    notes.push_back(std::string(key) + ": " + std::to_string(k) + " pattern(s) left as they are: " +
                    op + " needs opset " + std::to_string(need_opset) + ", the model has " +
                    std::to_string(have) + " (ConvertOpsetVersion can raise it)");
    return;
  }
  mt.finish();
  notes.push_back(std::string(key) + ": " + std::to_string(k) + " fused into " + op);
}

/// `mp` carried to `opset` by ONNX's version converter (throws what it throws).
::onnx::ModelProto onnx_converted(const ::onnx::ModelProto& mp, std::int64_t opset) {
  // The converter's graph import handles an initializer (an adapter that turns it into an
  // attribute erases it) only when it is also a graph input, as IR < 4 writes it: list each one
  // there for the conversion, and take the added entries out again afterwards.
  ::onnx::ModelProto in = mp;
  std::set<std::string> listed, added;
  for (const auto& v : in.graph().input())
    listed.insert(v.name());
  for (const auto& t : in.graph().initializer()) {
    if (listed.contains(t.name()))
      continue;
    auto* v = in.mutable_graph()->add_input();
    v->set_name(t.name());
    auto* tt = v->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(t.data_type());
    auto* shape = tt->mutable_shape();
    for (auto d : t.dims())
      shape->add_dim()->set_dim_value(d);
    added.insert(t.name());
  }
  // Some adapters (Softmax 12 -> 13) need the rank of their input: shape inference first.
  try {
    infer_shapes(in);
  } catch (const std::exception&) {
    // Partial shapes are still there; an adapter that needs a missing one says so.
  }
  ::onnx::ModelProto out = ::onnx::version_conversion::ConvertVersion(in, static_cast<int>(opset));
  // The inferred value_info served the conversion; the model keeps the one it had.
  *out.mutable_graph()->mutable_value_info() = mp.graph().value_info();
  ::google::protobuf::RepeatedPtrField<::onnx::ValueInfoProto> inputs;
  for (auto& v : *out.mutable_graph()->mutable_input()) {
    if (!added.contains(v.name()))
      *inputs.Add() = std::move(v);
  }
  out.mutable_graph()->mutable_input()->Swap(&inputs);
  return out;
}

}  // namespace

std::string convert_opset_version(model& m, std::int64_t target) {
  ::onnx::ModelProto& mp = proto(m);
  const std::int64_t from = m.opset("").value_or(1);
  const std::string what = "ConvertOpsetVersion = " + std::to_string(target);
  if (from == target)
    return what + ": the model already has it";
  const std::int64_t newest = ::onnx::OpSchemaRegistry::DomainToVersionRange::Instance()
                                  .Map()
                                  .at(::onnx::ONNX_DOMAIN)
                                  .second;
  constexpr std::int64_t highest = newest_onnx_opset;
  if (target < 7 || target > highest) {
    throw config_error("quark.config.opset",
                       what + ": quark-cpp converts to opsets 7 to " + std::to_string(highest));
  }
  // ONNX's converter (what Quark calls) up to the newest opset it knows, then quark-cpp's own
  // upgrade (opset.cpp). An upgrade ONNX's converter cannot make (its Softmax 12 -> 13 adapter
  // needs shapes that inference may not find) goes through quark-cpp's upgrade alone.
  if (target < from && from > newest) {
    throw config_error("quark.config.opset",
                       what + ": the model has opset " + std::to_string(from) +
                           ", newer than the newest ONNX's version converter knows (" +
                           std::to_string(newest) + "); it cannot carry it down");
  }
  // Up from an opset past the converter's newest: quark-cpp's upgrade alone.
  const std::int64_t step = from >= newest ? from : std::min(target, newest);
  std::string converter_error;
  if (step != from) {
    try {
      mp = onnx_converted(mp, step);
    } catch (const std::exception& e) {
      converter_error = e.what();
    }
  }
  const std::int64_t reached = converter_error.empty() ? step : from;
  if (!converter_error.empty() && target < from) {
    throw config_error("quark.config.opset", what +
                                                 ": ONNX's version converter cannot carry the "
                                                 "model from opset " +
                                                 std::to_string(from) + " to " +
                                                 std::to_string(step) + ": " + converter_error);
  }
  if (target > reached) {
    try {
      upgrade_opset(mp, reached, target, {});
    } catch (const std::exception& e) {
      throw config_error(
          "quark.config.opset",
          what + ": " + e.what() +
              (converter_error.empty() ? std::string()
                                       : " (ONNX's version converter: " + converter_error + ")"));
    }
  }
  return what + ": converted from opset " + std::to_string(from) +
         (converter_error.empty()
              ? std::string()
              : " (by quark-cpp's upgrade; ONNX's version converter: " + converter_error + ")");
}

std::size_t remove_input_initializers(model& m) {
  GraphProto& g = *proto(m).mutable_graph();
  std::set<std::string> inits;
  for (const auto& t : g.initializer())
    inits.insert(t.name());
  const auto removed = static_cast<std::size_t>(
      std::count_if(g.input().begin(), g.input().end(),
                    [&](const ::onnx::ValueInfoProto& v) { return inits.contains(v.name()); }));
  if (removed == 0)
    return 0;
  ::google::protobuf::RepeatedPtrField<::onnx::ValueInfoProto> kept;
  for (auto& v : *g.mutable_input()) {
    if (!inits.contains(v.name()))
      *kept.Add() = std::move(v);
  }
  g.mutable_input()->Swap(&kept);
  return removed;
}

std::size_t copy_shared_initializers(model& m, const std::vector<std::string>& op_types,
                                     bool bias_only) {
  GraphProto& g = *proto(m).mutable_graph();
  const graph_index ix(g);
  std::map<std::string, int> init_at;
  for (int i = 0; i < g.initializer_size(); ++i)
    init_at.emplace(g.initializer(i).name(), i);
  auto listed = [&](const NodeProto& n) {
    return op_types.empty() ||
           std::find(op_types.begin(), op_types.end(), n.op_type()) != op_types.end();
  };
  name_pool names(g);
  // (initializer, first reader seen) -> every later listed reader gets a copy.
  std::set<std::string> seen;
  std::size_t copies = 0;
  for (int i = 0; i < g.node_size(); ++i) {
    NodeProto& n = *g.mutable_node(i);
    for (int s = 0; s < n.input_size(); ++s) {
      const std::string x = n.input(s);
      auto it = init_at.find(x);
      if (x.empty() || it == init_at.end() || ix.implicit.contains(x) || ix.uses(x) < 2)
        continue;
      const bool bias_slot = s == 2 && (n.op_type() == "Conv" || n.op_type() == "ConvTranspose" ||
                                        n.op_type() == "Gemm");
      const bool wanted = listed(n) && (!bias_only || bias_slot);
      if (seen.insert(x).second || !wanted)
        continue;  // the first reader keeps the original; unlisted readers share it
      const std::string name = names.fresh(x + "_duplicated");
      ::onnx::TensorProto copy = g.initializer(it->second);
      copy.set_name(name);
      *g.add_initializer() = std::move(copy);
      n.set_input(s, name);
      ++copies;
    }
  }
  return copies;
}

std::vector<std::string> convert_nchw_to_nhwc(model& m) {
  std::vector<std::string> notes;
  remove_input_initializers(m);  // as Quark's conversion does first
  GraphProto& g = *proto(m).mutable_graph();
  const graph_index ix(g);
  name_pool names(g);
  // C, H, W of a 4-D value with those three dims static; nullopt otherwise.
  auto chw = [](const ::onnx::ValueInfoProto& v) -> std::optional<std::array<std::int64_t, 3>> {
    if (!v.type().has_tensor_type() || !v.type().tensor_type().has_shape())
      return std::nullopt;
    const auto& shape = v.type().tensor_type().shape();
    if (shape.dim_size() != 4)
      return std::nullopt;
    std::array<std::int64_t, 3> d{};
    for (int k = 1; k < 4; ++k) {
      if (!shape.dim(k).has_dim_value())
        return std::nullopt;
      d[static_cast<std::size_t>(k - 1)] = shape.dim(k).dim_value();
    }
    return d;
  };
  auto to_nhwc = [](::onnx::ValueInfoProto& v, const std::array<std::int64_t, 3>& d) {
    auto& shape = *v.mutable_type()->mutable_tensor_type()->mutable_shape();
    shape.mutable_dim(1)->set_dim_value(d[1]);
    shape.mutable_dim(2)->set_dim_value(d[2]);
    shape.mutable_dim(3)->set_dim_value(d[0]);
  };
  auto dims = [](const std::array<std::int64_t, 3>& d, bool nhwc) {
    const auto s = [](std::int64_t x) { return std::to_string(x); };
    return nhwc ? "[N, " + s(d[1]) + ", " + s(d[2]) + ", " + s(d[0]) + "]"
                : "[N, " + s(d[0]) + ", " + s(d[1]) + ", " + s(d[2]) + "]";
  };
  std::vector<NodeProto> front;
  std::vector<std::string> skipped, not_image;
  for (auto& v : *g.mutable_input()) {
    const auto d = chw(v);
    if (!d || ix.implicit.contains(v.name())) {
      skipped.push_back(v.name());
      continue;
    }
    if (!((*d)[1] > (*d)[0] && (*d)[2] > (*d)[0]))
      not_image.push_back(v.name());
    const std::string t = names.fresh(v.name() + "_transpose");
    for (auto& n : *g.mutable_node()) {
      for (int k = 0; k < n.input_size(); ++k) {
        if (n.input(k) == v.name())
          n.set_input(k, t);
      }
    }
    for (auto& o : *g.mutable_output()) {
      if (o.name() == v.name())
        o.set_name(t);  // an input passed straight through stays NCHW at the output
    }
    NodeProto tr = make_op("Transpose", t, {v.name()}, {t});
    add_ints_attribute(tr, "perm", {0, 3, 1, 2});
    front.push_back(std::move(tr));
    notes.push_back("ConvertNCHWToNHWC: input '" + v.name() + "' " + dims(*d, false) + " -> " +
                    dims(*d, true));
    to_nhwc(v, *d);
  }
  std::vector<NodeProto> back;
  for (auto& v : *g.mutable_output()) {
    const auto d = chw(v);
    if (!d || !ix.producer.contains(v.name())) {
      skipped.push_back(v.name());
      continue;
    }
    if (!((*d)[1] > (*d)[0] && (*d)[2] > (*d)[0]))
      not_image.push_back(v.name());
    const std::string t = names.fresh(v.name() + "_transpose");
    NodeProto tr = make_op("Transpose", t, {v.name()}, {t});
    add_ints_attribute(tr, "perm", {0, 2, 3, 1});
    back.push_back(std::move(tr));
    notes.push_back("ConvertNCHWToNHWC: output '" + v.name() + "' " + dims(*d, false) + " -> '" +
                    t + "' " + dims(*d, true));
    v.set_name(t);
    to_nhwc(v, *d);
  }
  if (!front.empty()) {
    std::vector<NodeProto> all(std::make_move_iterator(front.begin()),
                               std::make_move_iterator(front.end()));
    for (auto& n : *g.mutable_node())
      all.push_back(std::move(n));
    g.clear_node();
    for (auto& n : all)
      *g.add_node() = std::move(n);
  }
  for (auto& n : back)
    *g.add_node() = std::move(n);
  auto list = [](const std::vector<std::string>& v) {
    std::string s;
    for (const auto& x : v)
      s += (s.empty() ? "'" : ", '") + x + "'";
    return s;
  };
  if (!skipped.empty()) {
    notes.push_back("ConvertNCHWToNHWC: left as they are (not 4-D with static C, H and W): " +
                    list(skipped));
  }
  if (!not_image.empty()) {
    notes.push_back("ConvertNCHWToNHWC: H or W is not larger than C for " + list(not_image) +
                    "; check that the model is NCHW");
  }
  return notes;
}

std::vector<std::string> preprocess_model(model& m, const graph_pass_options& o) {
  std::vector<std::string> notes;
  if (o.opset)
    notes.push_back(convert_opset_version(m, *o.opset));
  if (o.nchw_to_nhwc) {
    for (auto& note : convert_nchw_to_nhwc(m))
      notes.push_back(std::move(note));
  }
  if (o.remove_input_init) {
    if (const std::size_t k = remove_input_initializers(m); k > 0)
      notes.push_back("RemoveInputInit: " + std::to_string(k) + " graph input(s) removed");
  }
  if (o.simplify) {
    for (auto& note : simplify_model(m, *o.simplify))
      notes.push_back(std::move(note));
  }
  if (o.copy_shared) {
    if (const std::size_t k = copy_shared_initializers(m, *o.copy_shared, false); k > 0)
      notes.push_back("CopySharedInit: " + std::to_string(k) + " initializer copies");
  }
  if (o.copy_bias) {
    if (const std::size_t k = copy_shared_initializers(m, *o.copy_bias, true); k > 0)
      notes.push_back("CopyBiasInit: " + std::to_string(k) + " bias copies");
  }
  return notes;
}

std::vector<std::string> fuse_patterns(model& m, const graph_pass_options& o) {
  std::vector<std::string> notes;
  if (o.fuse_instance_norm) {
    run_fusion(m, "FuseInstanceNorm", 0, "InstanceNormalization", notes,
               [](matcher& mt, name_pool& names, bool apply) {
                 return fuse_instance_norm(mt, names, apply);
               });
  }
  if (o.fuse_l2_norm) {
    run_fusion(m, "FuseL2Norm", 0, "LpNormalization", notes,
               [](matcher& mt, name_pool&, bool apply) { return fuse_l2_norm(mt, apply); });
  }
  if (o.fuse_layer_norm) {
    run_fusion(m, "FuseLayerNorm", 17, "LayerNormalization", notes,
               [](matcher& mt, name_pool& names, bool apply) {
                 return fuse_layer_norm(mt, names, apply);
               });
  }
  if (o.fuse_gelu) {
    run_fusion(m, "FuseGelu", 20, "Gelu", notes,
               [](matcher& mt, name_pool&, bool apply) { return fuse_gelu(mt, apply); });
  }
  return notes;
}

}  // namespace quark::onnx::qz
