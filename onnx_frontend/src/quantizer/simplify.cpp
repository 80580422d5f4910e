// SPDX-License-Identifier: MIT
// SimplifyModel (see simplify.hpp).
#include "quantizer/simplify.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include <quark/onnx/error.hpp>

#include "io/proto_access.hpp"
#include "quantizer/conversions.hpp"
#include "quantizer/graph_passes.hpp"
#include "quantizer/graph_util.hpp"
#include "quantizer/tensor_build.hpp"

namespace quark::onnx::qz {

namespace {

using ::onnx::GraphProto;
using ::onnx::NodeProto;

constexpr std::string_view p_identity = "EliminationIdentity";
constexpr std::string_view p_cast = "EliminationCast";
constexpr std::string_view p_transpose = "EliminationTranspose";
constexpr std::string_view p_reshape = "EliminationReshape";
constexpr std::string_view p_concat = "EliminationConcat";
constexpr std::string_view p_pad_conv = "FusionPadConv";

const std::vector<std::string_view>& optimization_names() {
  static const std::vector<std::string_view> n = {"constant_folding", "dead_node_elimination",
                                                  "subexpression_elimination", "graph_fusion"};
  return n;
}

std::string joined(const std::vector<std::string_view>& names) {
  std::string s;
  for (const auto n : names)
    s += (s.empty() ? "" : ", ") + std::string(n);
  return s;
}

[[noreturn]] void bad_option(const std::string& key, const std::string& what) {
  throw config_error("quark.config.value", "SimplifyModelOptions." + key + ": " + what);
}

bool bool_of(const option_member& m) {
  if (!m.value.is_bool())
    bad_option(m.key, "expected a boolean, got " + to_string(m.value));
  return m.value.as_bool();
}

/// A list of names, each one of `known`.
std::set<std::string> names_of(const option_member& m, const std::vector<std::string_view>& known) {
  if (!m.value.is_array())
    bad_option(m.key, "expected a list of names, got " + to_string(m.value));
  std::set<std::string> out;
  for (const auto& v : m.value.as_array()) {
    if (!v.is_string())
      bad_option(m.key, "expected names, got " + to_string(v));
    if (std::find(known.begin(), known.end(), v.as_string()) == known.end())
      bad_option(m.key, "unknown name \"" + v.as_string() + "\" (known: " + joined(known) + ")");
    out.insert(v.as_string());
  }
  return out;
}

/// Static shapes and element types of the values of `m` (conversions.hpp's infer_values).
struct value_facts {
  inferred_values v;

  [[nodiscard]] const std::vector<std::int64_t>* static_shape(const std::string& name) const {
    auto it = v.shape.find(name);
    if (it == v.shape.end() ||
        std::any_of(it->second.begin(), it->second.end(), [](auto d) { return d < 0; }))
      return nullptr;
    return &it->second;
  }
  /// The rank of `name`, 0 when unknown (a scalar counts as unknown: nothing here wants one).
  [[nodiscard]] std::size_t rank(const std::string& name) const {
    auto it = v.shape.find(name);
    return it == v.shape.end() ? 0 : it->second.size();
  }
  [[nodiscard]] int elem_type(const std::string& name) const {
    auto it = v.elem.find(name);
    return it == v.elem.end() ? 0 : it->second;
  }
};

/// Every node input naming `from` reads `to` instead.
void rename_reads(GraphProto& g, const std::string& from, const std::string& to) {
  for (auto& n : *g.mutable_node()) {
    for (auto& x : *n.mutable_input()) {
      if (x == from)
        x = to;
    }
  }
}

/// Attribute `name` of `n` is absent or of type `t` (a wrongly typed one makes the node invalid:
/// the rewrites leave such a node for the runtime to name).
bool attr_type_ok(const NodeProto& n, std::string_view name,
                  ::onnx::AttributeProto::AttributeType t) {
  const auto* a = find_attr(n, name);
  return a == nullptr || a->type() == t;
}

/// Sets the INTS attribute `name` of `n` to `v` (added when absent).
void set_ints(NodeProto& n, const char* name, const std::vector<std::int64_t>& v) {
  auto* a = find_attr(n, name);
  if (a == nullptr) {
    a = n.add_attribute();
    a->set_name(name);
    a->set_type(::onnx::AttributeProto::INTS);
  }
  a->clear_ints();
  for (const auto x : v)
    a->add_ints(x);
}

bool default_domain(const NodeProto& n) {
  return n.domain().empty() || n.domain() == "ai.onnx";
}

bool has_subgraph(const NodeProto& n) {
  return std::any_of(n.attribute().begin(), n.attribute().end(),
                     [](const auto& a) { return a.has_g() || a.graphs_size() > 0; });
}

/// One sweep of the rewrites over the graph; `dead` marks removed nodes (compacted by finish()).
class sweep {
 public:
  explicit sweep(model& m) : g_(*proto(m).mutable_graph()), ix_(g_) {
    dead_.assign(static_cast<std::size_t>(g_.node_size()), false);
  }

  GraphProto& graph() { return g_; }
  const graph_index& index() const { return ix_; }
  bool is_dead(int i) const { return dead_[static_cast<std::size_t>(i)]; }

  /// Whether `v` may be renamed away: not a graph output, not read by a subgraph, not yet
  /// touched in this sweep (the index is a snapshot).
  bool replaceable(const std::string& v) const {
    return !v.empty() && !ix_.outputs.contains(v) && !ix_.implicit.contains(v) &&
           !touched_.contains(v);
  }

  /// Node `i` computes `out` = `in`: its readers read `in`, the node goes.
  bool bypass(int i, const std::string& in, const std::string& out) {
    if (in.empty() || !replaceable(out) || touched_.contains(in))
      return false;
    rename_reads(g_, out, in);
    kill(i);
    touched_.insert(in);
    return true;
  }

  void kill(int i) {
    dead_[static_cast<std::size_t>(i)] = true;
    for (const auto& o : g_.node(i).output())
      touched_.insert(o);
  }
  void touch(const std::string& v) { touched_.insert(v); }
  bool touched(const std::string& v) const { return touched_.contains(v); }

  /// The node that alone reads `v` (and is alive), if any.
  std::optional<int> only_reader(const std::string& v) const {
    if (touched_.contains(v))
      return std::nullopt;
    auto c = ix_.only_consumer(v);
    if (!c || is_dead(*c))
      return std::nullopt;
    return c;
  }

  /// Drops the removed nodes; true when there were any.
  bool finish() {
    if (std::none_of(dead_.begin(), dead_.end(), [](bool d) { return d; }))
      return false;
    compact_nodes(g_, dead_);
    return true;
  }

 private:
  GraphProto& g_;
  graph_index ix_;
  std::vector<bool> dead_;
  std::set<std::string> touched_;
};

/// The int64 tensor `v` (1-D).
/// Shape / Size of a value whose shape inference knows every dimension become initializers.
int fold_shapes(model& m, const value_facts& f) {
  sweep s(m);
  int k = 0;
  for (int i = 0; i < s.graph().node_size(); ++i) {
    const NodeProto& n = s.graph().node(i);
    if (!default_domain(n) || n.input_size() != 1 || n.output_size() != 1 ||
        (n.op_type() != "Shape" && n.op_type() != "Size") || !s.replaceable(n.output(0)))
      continue;
    const auto* d = f.static_shape(n.input(0));
    if (d == nullptr || !attr_type_ok(n, "start", ::onnx::AttributeProto::INT) ||
        !attr_type_ok(n, "end", ::onnx::AttributeProto::INT))
      continue;
    const auto rank = static_cast<std::int64_t>(d->size());
    if (n.op_type() == "Shape") {
      // Opset 15's start / end: negative counts from the back, both clamped to [0, rank].
      auto clamp = [&](std::int64_t x) {
        return std::clamp(x < 0 ? x + rank : x, std::int64_t{0}, rank);
      };
      const std::int64_t b = clamp(attr_i(n, "start", 0));
      const std::int64_t e = clamp(attr_i(n, "end", rank));
      std::vector<std::int64_t> dims;
      for (std::int64_t j = b; j < e; ++j)
        dims.push_back((*d)[static_cast<std::size_t>(j)]);
      m.set_initializer(n.output(0), int64_tensor(dims));
    } else {
      tensor t(dtype_id::int64, shape_t{});
      t.data<std::int64_t>()[0] = static_cast<std::int64_t>(element_count(*d));
      m.set_initializer(n.output(0), std::move(t));
    }
    s.kill(i);
    ++k;
  }
  s.finish();
  return k;
}

/// EliminationIdentity: Identity, and Dropout in inference (no training_mode, its mask unread).
int remove_identities(model& m) {
  // Dropout before opset 7 runs in training mode unless is_test = 1.
  const bool old_dropout = m.opset("").value_or(1) < 7;
  sweep s(m);
  int k = 0;
  for (int i = 0; i < s.graph().node_size(); ++i) {
    const NodeProto& n = s.graph().node(i);
    if (!default_domain(n) || n.input_size() < 1 || n.output_size() < 1)
      continue;
    bool identity = n.op_type() == "Identity";
    if (n.op_type() == "Dropout") {
      const bool mask_read = n.output_size() > 1 && s.index().uses(n.output(1)) > 0;
      // Opset 12's inputs: training_mode absent or a constant false, ratio absent or a constant.
      bool training = false;
      if (n.input_size() > 2 && !n.input(2).empty()) {
        training = true;
        if (m.has_initializer(n.input(2))) {
          const tensor t = m.initializer(n.input(2));
          training = t.type() != dtype_id::boolean || t.size() != 1 ||
                     std::to_integer<int>(t.bytes()[0]) != 0;
        }
      }
      // A ratio outside [0, 1) makes the node invalid: left for the runtime to name.
      float ratio = attr_f(n, "ratio", 0.5f);
      bool ratio_ok = true;
      if (n.input_size() > 1 && !n.input(1).empty()) {
        const auto r = float_scalar(m, n.input(1));
        ratio_ok = r.has_value();
        ratio = r.value_or(0.5f);
      }
      identity = !mask_read && !training && ratio_ok && ratio >= 0.0f && ratio < 1.0f &&
                 attr_type_ok(n, "ratio", ::onnx::AttributeProto::FLOAT) &&
                 attr_type_ok(n, "is_test", ::onnx::AttributeProto::INT) &&
                 attr_i(n, "is_test", old_dropout ? 0 : 1) != 0 &&
                 (n.output_size() < 2 || n.output(1).empty() || s.replaceable(n.output(1)));
    }
    if (identity && s.bypass(i, n.input(0), n.output(0)))
      ++k;
  }
  s.finish();
  return k;
}

/// EliminationCast: a Cast to the type its input already has.
int remove_noop_casts(model& m, const value_facts& f) {
  sweep s(m);
  int k = 0;
  for (int i = 0; i < s.graph().node_size(); ++i) {
    const NodeProto& n = s.graph().node(i);
    if (!default_domain(n) || n.op_type() != "Cast" || n.input_size() != 1)
      continue;
    const int from = f.elem_type(n.input(0));
    if (from != 0 && from == attr_i(n, "to", -1) && s.bypass(i, n.input(0), n.output(0)))
      ++k;
  }
  s.finish();
  return k;
}

std::optional<std::vector<std::int64_t>> perm_of(const NodeProto& n) {
  const auto* a = find_attr(n, "perm");
  if (a == nullptr)
    return std::nullopt;  // the default reverses the dimensions: rank-dependent, left alone
  return std::vector<std::int64_t>(a->ints().begin(), a->ints().end());
}

bool is_identity_perm(const std::vector<std::int64_t>& p) {
  for (std::size_t j = 0; j < p.size(); ++j) {
    if (p[j] != static_cast<std::int64_t>(j))
      return false;
  }
  return true;
}

/// Whether `p` is a permutation of 0 .. rank - 1.
bool is_permutation(const std::vector<std::int64_t>& p, std::size_t rank) {
  if (p.size() != rank)
    return false;
  std::vector<bool> seen(rank, false);
  for (const auto v : p) {
    if (v < 0 || v >= static_cast<std::int64_t>(rank) || seen[static_cast<std::size_t>(v)])
      return false;
    seen[static_cast<std::size_t>(v)] = true;
  }
  return true;
}

/// EliminationTranspose: an identity permutation goes; Transpose -> Transpose (the first read by
/// the second alone) becomes one Transpose (or nothing when they cancel). Only valid permutations
/// of an input of known rank: a malformed node is left for the runtime to name.
int merge_transposes(model& m, const value_facts& f) {
  sweep s(m);
  int k = 0;
  for (int i = 0; i < s.graph().node_size(); ++i) {
    NodeProto& n = *s.graph().mutable_node(i);
    if (s.is_dead(i) || !default_domain(n) || n.op_type() != "Transpose" || n.input_size() != 1)
      continue;
    const auto p1 = perm_of(n);
    const std::size_t rank = f.rank(n.input(0));
    if (!p1 || rank == 0 || !is_permutation(*p1, rank))
      continue;
    if (is_identity_perm(*p1)) {
      if (s.bypass(i, n.input(0), n.output(0)))
        ++k;
      continue;
    }
    const auto r = s.only_reader(n.output(0));
    if (!r)
      continue;
    NodeProto& t = *s.graph().mutable_node(*r);
    if (!default_domain(t) || t.op_type() != "Transpose" || t.input(0) != n.output(0))
      continue;
    const auto p2 = perm_of(t);
    if (!p2 || !is_permutation(*p2, rank))
      continue;
    // y = T2(T1(x)): y's axis j is T1's output axis p2[j], which is x's axis p1[p2[j]].
    std::vector<std::int64_t> p(rank);
    for (std::size_t j = 0; j < rank; ++j)
      p[j] = (*p1)[static_cast<std::size_t>((*p2)[j])];
    const std::string x = n.input(0);
    s.kill(i);
    // Cancelling permutations remove the second Transpose too, unless its output must keep its
    // name (a graph output): then it stays, reading x with the (identity) composed perm.
    if (!is_identity_perm(p) || !s.bypass(*r, x, t.output(0))) {
      t.set_input(0, x);
      set_ints(t, "perm", p);
      s.touch(t.output(0));
    }
    ++k;
  }
  s.finish();
  return k;
}

/// EliminationReshape: Reshape -> Reshape (the first read by the second alone and valid: its
/// input and output shapes known with the same element count; the second's shape constant and
/// free of 0, which would copy a dimension of its input) reads the first's input; a Reshape whose
/// input and output shapes are the same known shape goes.
int merge_reshapes(model& m, const value_facts& f) {
  sweep s(m);
  int k = 0;
  for (int i = 0; i < s.graph().node_size(); ++i) {
    NodeProto& n = *s.graph().mutable_node(i);
    if (s.is_dead(i) || !default_domain(n) || n.op_type() != "Reshape" || n.input_size() != 2)
      continue;
    const auto* a = f.static_shape(n.input(0));
    const auto* b = f.static_shape(n.output(0));
    if (a == nullptr || b == nullptr || element_count(*a) != element_count(*b) ||
        !attr_type_ok(n, "allowzero", ::onnx::AttributeProto::INT))
      continue;
    if (*a == *b) {
      if (s.bypass(i, n.input(0), n.output(0)))
        ++k;
      continue;
    }
    const auto r = s.only_reader(n.output(0));
    if (!r)
      continue;
    NodeProto& t = *s.graph().mutable_node(*r);
    if (!default_domain(t) || t.op_type() != "Reshape" || t.input_size() != 2 ||
        t.input(0) != n.output(0))
      continue;
    const auto shape = int_values(m, t.input(1));
    if (!shape || (attr_i(t, "allowzero", 0) == 0 &&
                   std::find(shape->begin(), shape->end(), 0) != shape->end()))
      continue;
    t.set_input(0, n.input(0));
    s.kill(i);
    s.touch(t.output(0));
    ++k;
  }
  s.finish();
  return k;
}

/// EliminationConcat: a Concat of one input (its axis valid for the input's known rank) is that
/// input.
int remove_single_concats(model& m, const value_facts& f) {
  sweep s(m);
  int k = 0;
  for (int i = 0; i < s.graph().node_size(); ++i) {
    const NodeProto& n = s.graph().node(i);
    if (!default_domain(n) || n.op_type() != "Concat" || n.input_size() != 1)
      continue;
    const auto rank = static_cast<std::int64_t>(f.rank(n.input(0)));
    const auto* axis = find_attr(n, "axis");
    if (rank > 0 && axis != nullptr && axis->type() == ::onnx::AttributeProto::INT &&
        axis->i() >= -rank && axis->i() < rank && s.bypass(i, n.input(0), n.output(0)))
      ++k;
  }
  s.finish();
  return k;
}

/// FusionPadConv: a constant-mode Pad by zero, on the spatial axes only, read by one Conv alone
/// (explicit padding) moves into the Conv's pads.
int fuse_pad_conv(model& m, const value_facts& f) {
  const std::int64_t opset = m.opset("").value_or(1);
  sweep s(m);
  int k = 0;
  for (int i = 0; i < s.graph().node_size(); ++i) {
    const NodeProto& p = s.graph().node(i);
    if (s.is_dead(i) || !default_domain(p) || p.op_type() != "Pad" || p.input_size() < 1)
      continue;
    const auto* mode = find_attr(p, "mode");
    if (mode != nullptr && mode->s() != "constant")
      continue;
    std::optional<std::vector<std::int64_t>> pads;
    if (opset < 11) {
      if (const auto* a = find_attr(p, "pads"))
        pads = std::vector<std::int64_t>(a->ints().begin(), a->ints().end());
      if (attr_f(p, "value", 0.0f) != 0.0f ||
          !attr_type_ok(p, "value", ::onnx::AttributeProto::FLOAT))
        continue;
    } else {
      if (p.input_size() < 2)
        continue;
      pads = int_values(m, p.input(1));
      if (p.input_size() > 2 && !p.input(2).empty()) {
        if (!m.has_initializer(p.input(2)))
          continue;
        const tensor c = m.initializer(p.input(2));
        if (c.type() != dtype_id::float32 || c.size() != 1 || c.data<float>()[0] != 0.0f)
          continue;
      }
      if (p.input_size() > 3 && !p.input(3).empty())
        continue;  // axes (opset 18): left alone
    }
    if (!pads || pads->size() < 6 || pads->size() % 2 != 0)
      continue;
    const std::size_t rank = pads->size() / 2;
    if (f.rank(p.input(0)) != rank)
      continue;
    if (std::any_of(pads->begin(), pads->end(), [](auto v) { return v < 0; }) || (*pads)[0] != 0 ||
        (*pads)[1] != 0 || (*pads)[rank] != 0 || (*pads)[rank + 1] != 0)
      continue;
    const auto r = s.only_reader(p.output(0));
    if (!r)
      continue;
    NodeProto& c = *s.graph().mutable_node(*r);
    if (!default_domain(c) || c.op_type() != "Conv" || c.input(0) != p.output(0))
      continue;
    if (const auto* a = find_attr(c, "auto_pad"); a != nullptr && a->s() != "NOTSET")
      continue;
    const std::size_t sp = rank - 2;
    std::vector<std::int64_t> cp(2 * sp, 0);
    if (const auto* a = find_attr(c, "pads")) {
      if (static_cast<std::size_t>(a->ints_size()) != 2 * sp)
        continue;
      cp.assign(a->ints().begin(), a->ints().end());
    }
    for (std::size_t j = 0; j < sp; ++j) {
      cp[j] += (*pads)[2 + j];
      cp[sp + j] += (*pads)[rank + 2 + j];
    }
    set_ints(c, "pads", cp);
    c.set_input(0, p.input(0));
    s.kill(i);
    s.touch(c.output(0));
    ++k;
  }
  s.finish();
  return k;
}

/// Subexpression elimination: a node computing what an earlier node computes (same op, domain,
/// inputs and attributes; not random, no subgraph) is replaced by it.
int merge_subexpressions(model& m) {
  static const std::set<std::string> random = {
      "RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
      "Multinomial",  "Bernoulli",     "Dropout"};
  sweep s(m);
  std::map<std::string, int> first;
  int k = 0;
  for (int i = 0; i < s.graph().node_size(); ++i) {
    const NodeProto& n = s.graph().node(i);
    if (n.input_size() == 0 || n.output_size() == 0 || random.contains(n.op_type()) ||
        has_subgraph(n))
      continue;
    std::string key = n.domain() + '\x1f' + n.op_type();
    for (const auto& x : n.input())
      key += '\x1f' + x;
    std::vector<std::string> attrs;
    for (const auto& a : n.attribute())
      attrs.push_back(a.SerializeAsString());
    std::sort(attrs.begin(), attrs.end());
    for (const auto& a : attrs)
      key += '\x1e' + a;
    const auto [it, fresh] = first.emplace(key, i);
    if (fresh)
      continue;
    const NodeProto& e = s.graph().node(it->second);
    if (e.output_size() != n.output_size())
      continue;
    bool ok = true;
    for (int j = 0; j < n.output_size(); ++j) {
      ok = ok && (n.output(j).empty() || (s.replaceable(n.output(j)) && !e.output(j).empty()));
    }
    if (!ok)
      continue;
    for (int j = 0; j < n.output_size(); ++j) {
      if (!n.output(j).empty())
        rename_reads(s.graph(), n.output(j), e.output(j));
    }
    s.kill(i);
    ++k;
  }
  s.finish();
  return k;
}

/// Dead nodes: those no graph output depends on (the graph is topologically sorted).
int remove_dead_nodes(model& m) {
  GraphProto& g = *proto(m).mutable_graph();
  std::set<std::string> live;
  for (const auto& o : g.output())
    live.insert(o.name());
  std::vector<bool> dead(static_cast<std::size_t>(g.node_size()), false);
  int k = 0;
  for (int i = g.node_size() - 1; i >= 0; --i) {
    const NodeProto& n = g.node(i);
    const bool needed = std::any_of(n.output().begin(), n.output().end(),
                                    [&](const std::string& o) { return live.contains(o); });
    if (!needed) {
      dead[static_cast<std::size_t>(i)] = true;
      ++k;
      continue;
    }
    for (const auto& x : n.input())
      live.insert(x);
    for (const auto& x : node_implicit_inputs(n))
      live.insert(x);
  }
  if (k > 0)
    compact_nodes(g, dead);
  return k;
}

/// Initializers nothing reads (and that are not graph inputs) are dropped.
int drop_unread_initializers(model& m) {
  const GraphProto& g = proto(m).graph();
  const graph_index ix(g);
  std::set<std::string> inputs;
  for (const auto& v : g.input())
    inputs.insert(v.name());
  std::vector<std::string> unread;
  for (const auto& t : g.initializer()) {
    if (ix.uses(t.name()) == 0 && !inputs.contains(t.name()))
      unread.push_back(t.name());
  }
  for (const auto& n : unread)
    m.remove_initializer(n);
  return static_cast<int>(unread.size());
}

/// value_info entries of values the rewrites removed are dropped.
void drop_stale_value_info(model& m) {
  GraphProto& g = *proto(m).mutable_graph();
  std::set<std::string> names;
  for (const auto& n : g.node())
    names.insert(n.output().begin(), n.output().end());
  for (const auto& v : g.input())
    names.insert(v.name());
  for (const auto& t : g.initializer())
    names.insert(t.name());
  auto* vi = g.mutable_value_info();
  vi->erase(
      std::remove_if(vi->begin(), vi->end(),
                     [&](const ::onnx::ValueInfoProto& v) { return !names.contains(v.name()); }),
      vi->end());
}

}  // namespace

const std::vector<std::string_view>& simplify_patterns() {
  static const std::vector<std::string_view> p = {p_identity, p_cast,   p_transpose,
                                                  p_reshape,  p_concat, p_pad_conv};
  return p;
}

simplify_options read_simplify_options(const option_value& v) {
  simplify_options o;
  if (v.is_null())
    return o;
  if (!v.is_object())
    throw config_error("quark.config.type",
                       "SimplifyModelOptions: expected an object, got " + to_string(v));
  for (const auto& m : v.as_object()) {
    if (m.key == "skip_fusion_patterns") {
      o.skip_patterns = names_of(m, simplify_patterns());
    } else if (m.key == "no_constant_folding") {
      o.constant_folding = !bool_of(m);
    } else if (m.key == "no_shape_infer") {
      o.shape_inference = !bool_of(m);
    } else if (m.key == "skip_optimizations") {
      const auto skip = names_of(m, optimization_names());
      o.constant_folding = o.constant_folding && !skip.contains("constant_folding");
      o.dead_nodes = !skip.contains("dead_node_elimination");
      o.subexpressions = !skip.contains("subexpression_elimination");
      o.fusion = !skip.contains("graph_fusion");
    } else if (m.key == "verbose") {
      (void)bool_of(m);  // the summary lists every kind of rewrite anyway
    } else if (m.key == "model_check") {
      if (bool_of(m))
        bad_option(m.key,
                   "true is not supported: quark-cpp's rewrites are exact (no output check "
                   "against a runtime); use EvalMetrics to compare the quantized model");
    } else {
      bad_option(m.key,
                 "not an option of quark-cpp's simplifier (known: skip_fusion_patterns, "
                 "no_constant_folding, no_shape_infer, skip_optimizations, verbose, "
                 "model_check)");
    }
  }
  return o;
}

std::vector<std::string> simplify_model(model& m, const simplify_options& o) {
  std::map<std::string, int> counts;
  auto on = [&](std::string_view p) {
    return o.fusion && !o.skip_patterns.contains(std::string(p));
  };
  // Each round may enable another (a folded Shape makes its Gather constant, a removed Cast
  // lets two Reshapes meet); a handful of rounds reaches the fixed point on real models.
  for (int round = 0; round < 8; ++round) {
    int changed = 0;
    auto count = [&](const char* what, int k) {
      counts[what] += k;
      changed += k;
    };
    std::optional<value_facts> f;
    if (o.shape_inference)
      f = value_facts{infer_values(m)};
    if (o.constant_folding && f)
      count("Shape / Size folded", fold_shapes(m, *f));
    if (o.constant_folding) {
      std::set<std::string> retired;
      count("constant nodes folded", fold_constant_nodes(m, retired));
    }
    if (on(p_identity))
      count("Identity / Dropout removed", remove_identities(m));
    if (on(p_cast) && f)
      count("Casts to the same type removed", remove_noop_casts(m, *f));
    if (on(p_transpose) && f)
      count("Transposes merged or removed", merge_transposes(m, *f));
    if (on(p_reshape) && f)
      count("Reshapes merged or removed", merge_reshapes(m, *f));
    if (on(p_concat) && f)
      count("single-input Concats removed", remove_single_concats(m, *f));
    if (on(p_pad_conv) && f)
      count("Pads fused into Conv", fuse_pad_conv(m, *f));
    if (o.subexpressions)
      count("common subexpressions merged", merge_subexpressions(m));
    if (o.dead_nodes)
      count("dead nodes removed", remove_dead_nodes(m));
    if (changed == 0)
      break;
  }
  if (o.dead_nodes)
    counts["unread initializers dropped"] += drop_unread_initializers(m);
  drop_stale_value_info(m);
  std::vector<std::string> notes;
  for (const auto& [what, k] : counts) {
    if (k > 0)
      notes.push_back("SimplifyModel: " + what + ": " + std::to_string(k));
  }
  return notes;
}

}  // namespace quark::onnx::qz
