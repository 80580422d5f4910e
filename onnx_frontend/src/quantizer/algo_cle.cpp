// SPDX-License-Identifier: MIT
// Cross-Layer Equalization and ReplaceClip6Relu (quark-spec §10.1; see algorithms.hpp).
//
// Where quark-cpp departs from Quark's code (docs/compatibility.md): a pattern whose weight or
// bias initializer is shared with another node, whose head output is also a graph output, or
// whose channel counts do not line up is skipped (Quark would rescale it anyway and change the
// function); ReduceMean must keep the channel axis and Pad must not pad it (with a zero constant
// or reflect / edge mode); Gemm heads are scaled along their own output axis (Quark reads the
// tail's transB there); a Conv without a group attribute is group 1 for triples too; the
// first pattern is applied once per pass (Quark's ordering applies it twice).
#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include <quark/algo/cle.hpp>

#include "io/proto_access.hpp"
#include "quantizer/algorithms.hpp"
#include "quantizer/graph_util.hpp"

namespace quark::onnx::qz {

namespace {

using ::onnx::GraphProto;
using ::onnx::NodeProto;

/// How a weighted node's weight is laid out.
enum class layer_kind : std::uint8_t { dense_conv, depthwise_conv, gemm };

/// A Conv / Gemm that CLE can rescale.
struct layer {
  int node = -1;
  layer_kind kind = layer_kind::dense_conv;
  bool trans_b = false;
  std::string w, b;  ///< weight and bias initializers (b empty: none)
  std::size_t out_ch = 0, in_ch = 0;
};

/// The layer view of node `i`, or nullopt when CLE cannot use it: a float weight initializer of
/// rank >= 3 (Conv, group 1 or depthwise) or 2 (Gemm without transA), not empty, a per-channel
/// float bias initializer or none, and neither shared with another node.
std::optional<layer> as_layer(const model& m, const GraphProto& g, const graph_index& ix, int i) {
  const NodeProto& n = g.node(i);
  const std::string& op = n.op_type();
  if ((op != "Conv" && op != "Gemm") || n.input_size() < 2 || n.output_size() != 1 ||
      !float_init(m, n.input(1)) || ix.uses(n.input(1)) != 1)
    return std::nullopt;
  layer l;
  l.node = i;
  l.w = n.input(1);
  const shape_t ws = m.initializer(l.w).shape();
  if (op == "Conv") {
    if (ws.size() < 3)
      return std::nullopt;
    const std::int64_t group = attr_i(n, "group", 1);
    if (group == 1) {
      l.kind = layer_kind::dense_conv;
      l.out_ch = static_cast<std::size_t>(ws[0]);
      l.in_ch = static_cast<std::size_t>(ws[1]);
    } else if (ws[1] == 1 && group == ws[0]) {
      l.kind = layer_kind::depthwise_conv;
      l.out_ch = l.in_ch = static_cast<std::size_t>(ws[0]);
    } else {
      return std::nullopt;
    }
  } else {
    if (ws.size() != 2 || attr_i(n, "transA", 0) != 0)
      return std::nullopt;
    l.kind = layer_kind::gemm;
    l.trans_b = attr_i(n, "transB", 0) != 0;
    l.out_ch = static_cast<std::size_t>(l.trans_b ? ws[0] : ws[1]);
    l.in_ch = static_cast<std::size_t>(l.trans_b ? ws[1] : ws[0]);
  }
  // An empty weight (a dimension 0) has nothing to equalise; the runtime judges the node.
  if (l.out_ch == 0 || l.in_ch == 0 || m.initializer(l.w).size() == 0)
    return std::nullopt;
  if (n.input_size() >= 3 && !n.input(2).empty()) {
    if (!float_init(m, n.input(2)) || ix.uses(n.input(2)) != 1 ||
        m.initializer(n.input(2)).size() != l.out_ch)
      return std::nullopt;
    l.b = n.input(2);
  }
  return l;
}

/// The header's view of a layer's weight layout (quark/algo/cle.hpp).
cle::weight_layout layout_of(const layer& l, const tensor& w) {
  switch (l.kind) {
    case layer_kind::dense_conv:
      return cle::weight_layout::conv(l.out_ch, l.in_ch, w.size() / (l.out_ch * l.in_ch));
    case layer_kind::depthwise_conv:
      return cle::weight_layout::conv(l.out_ch, l.in_ch, w.size() / l.out_ch, l.out_ch);
    case layer_kind::gemm:
      break;
  }
  return l.trans_b ? cle::weight_layout::out_in(l.out_ch, l.in_ch)
                   : cle::weight_layout::in_out(l.in_ch, l.out_ch);
}

struct pattern {
  std::vector<layer> layers;  ///< 2 (pair) or 3 (Conv, depthwise Conv, Conv)
};

/// Is node `n` (reading `value` as its input 0) one CLE may pass through in a pair? Relu and
/// LeakyRelu (positively homogeneous), ReduceMean over axes other than the channel axis, Pad that
/// leaves the channel axis alone with a zero constant or reflect / edge mode.
bool passes_channels(const model& m, const NodeProto& n, const std::string& value) {
  if (n.input_size() < 1 || n.input(0) != value || n.output_size() != 1)
    return false;
  const std::string& op = n.op_type();
  if (op == "Relu" || op == "LeakyRelu")
    return true;
  if (op == "ReduceMean") {
    std::vector<std::int64_t> axes;
    if (const auto* a = find_attr(n, "axes"))
      axes.assign(a->ints().begin(), a->ints().end());
    else if (n.input_size() >= 2 && !n.input(1).empty()) {
      if (!m.has_initializer(n.input(1)))
        return false;
      const tensor t = m.initializer(n.input(1));
      if (t.type() != dtype_id::int64)
        return false;
      for (auto x : t.data<std::int64_t>())
        axes.push_back(x);
    }
    if (axes.empty())
      return false;  // every axis, the channel axis included
    return std::none_of(axes.begin(), axes.end(), [](std::int64_t a) { return a == 1; });
  }
  if (op == "Pad") {
    const auto* mode = find_attr(n, "mode");
    const std::string md = mode == nullptr ? "constant" : mode->s();
    std::vector<std::int64_t> pads;
    if (const auto* a = find_attr(n, "pads")) {
      pads.assign(a->ints().begin(), a->ints().end());
      const auto* v = find_attr(n, "value");
      if (md == "constant" && v != nullptr && v->f() != 0.0f)
        return false;
    } else {
      if (n.input_size() < 2 || !m.has_initializer(n.input(1)))
        return false;
      const tensor t = m.initializer(n.input(1));
      if (t.type() != dtype_id::int64)
        return false;
      for (auto x : t.data<std::int64_t>())
        pads.push_back(x);
      if (n.input_size() >= 3 && !n.input(2).empty()) {
        if (!float_init(m, n.input(2)))
          return false;
        const tensor v = m.initializer(n.input(2));
        if (md == "constant" && v.size() >= 1 && v.data<float>()[0] != 0.0f)
          return false;
      }
      if (n.input_size() >= 4 && !n.input(3).empty())
        return false;  // axes input: not handled
    }
    if (md != "constant" && md != "reflect" && md != "edge")
      return false;
    const std::size_t r = pads.size() / 2;
    return pads.size() % 2 == 0 && r >= 2 && pads[1] == 0 && pads[r + 1] == 0;
  }
  return false;
}

/// Follows single consumers from `i`'s output through nodes accepted by `through` and returns
/// the first other node and the value it reads, or -1.
template <class Through>
std::pair<int, std::string> next_weighted(const GraphProto& g, const graph_index& ix, int i,
                                          Through&& through) {
  std::string value = g.node(i).output(0);
  for (;;) {
    const auto only = ix.only_consumer(value);
    if (!only)
      return {-1, {}};
    const int c = *only;
    const NodeProto& n = g.node(c);
    if (n.op_type() == "Conv" || n.op_type() == "Gemm")
      return {c, value};
    if (!through(n, value))
      return {-1, {}};
    value = n.output(0);
  }
}

bool reads_as_data(const NodeProto& n, const std::string& value) {
  return n.input_size() >= 1 && n.input(0) == value &&
         std::count(n.input().begin(), n.input().end(), value) == 1;
}

/// The CLE patterns of the graph, in node order of their heads (pairs before triples).
std::vector<pattern> find_patterns(const model& m,
                                   const std::function<bool(const std::string&)>& quantized,
                                   std::size_t& skipped) {
  const GraphProto& g = proto(m).graph();
  const graph_index ix(g);
  std::vector<pattern> out;
  auto is_q = [&](int i) { return quantized(g.node(i).name()); };
  for (int i = 0; i < g.node_size(); ++i) {
    const NodeProto& n = g.node(i);
    if ((n.op_type() != "Conv" && n.op_type() != "Gemm") || !is_q(i))
      continue;
    // Pair: head -> (Relu | LeakyRelu | ReduceMean | Pad)* -> tail.
    auto [t, value] = next_weighted(g, ix, i, [&](const NodeProto& x, const std::string& v) {
      return passes_channels(m, x, v);
    });
    if (t >= 0 && is_q(t) && reads_as_data(g.node(t), value)) {
      auto h = as_layer(m, g, ix, i);
      auto tl = as_layer(m, g, ix, t);
      if (h && tl && h->out_ch == tl->in_ch)
        out.push_back(pattern{{*h, *tl}});
      else
        ++skipped;
    }
    // Triple: Conv(group 1) -> Relu* -> depthwise Conv -> Relu* -> Conv(group 1).
    if (n.op_type() != "Conv")
      continue;
    auto relu_only = [&](const NodeProto& x, const std::string& v) {
      return x.op_type() == "Relu" && x.input_size() == 1 && x.input(0) == v;
    };
    auto [d, dv] = next_weighted(g, ix, i, relu_only);
    if (d < 0 || g.node(d).op_type() != "Conv" || !is_q(d) || !reads_as_data(g.node(d), dv))
      continue;
    auto [p, pv] = next_weighted(g, ix, d, relu_only);
    if (p < 0 || g.node(p).op_type() != "Conv" || !is_q(p) || !reads_as_data(g.node(p), pv))
      continue;
    auto l0 = as_layer(m, g, ix, i);
    auto l1 = as_layer(m, g, ix, d);
    auto l2 = as_layer(m, g, ix, p);
    if (!l0 || !l1 || !l2 || l0->kind != layer_kind::dense_conv ||
        l1->kind != layer_kind::depthwise_conv || l2->kind != layer_kind::dense_conv)
      continue;
    if (l0->out_ch != l1->in_ch || l1->out_ch != l2->in_ch) {
      ++skipped;
      continue;
    }
    out.push_back(pattern{{*l0, *l1, *l2}});
  }
  return out;
}

using weight_store = std::map<std::string, tensor>;

tensor& get(weight_store& s, const model& m, const std::string& name) {
  auto it = s.find(name);
  if (it == s.end())
    it = s.emplace(name, m.initializer(name)).first;
  return it->second;
}

cle::layer_ref<float> ref(const model& m, weight_store& s, const layer& l) {
  tensor& w = get(s, m, l.w);
  cle::layer_ref<float> r{w.data<float>(), layout_of(l, w)};
  if (!l.b.empty())
    r.bias = get(s, m, l.b).data<float>();
  return r;
}

void equalize_pair(const model& m, weight_store& s, const layer& h, const layer& t,
                   const cle_options& o) {
  const cle::pair_options po{.append_bias = o.scale_append_bias,
                             .use_threshold = o.scale_use_threshold,
                             .weight_threshold = o.weight_threshold};
  // Every tensor is in the store before the spans are taken (std::map keeps its nodes).
  const cle::layer_ref<float> head = ref(m, s, h);
  const cle::layer_ref<float> tail = ref(m, s, t);
  cle::equalize_pair(head, tail, po);
}

void equalize_triple(const model& m, weight_store& s, const layer& l0, const layer& l1,
                     const layer& l2) {
  cle::equalize_triple(ref(m, s, l0), ref(m, s, l1), ref(m, s, l2));
}

bool allclose(const tensor& t, double target) {
  if (t.type() != dtype_id::float32 || t.size() == 0)
    return false;
  for (float x : t.data<float>()) {
    if (!(std::fabs(static_cast<double>(x) - target) <= 1e-8 + 1e-5 * std::fabs(target)))
      return false;
  }
  return true;
}

}  // namespace

std::size_t replace_clip6_relu(model& m) {
  GraphProto& g = *proto(m).mutable_graph();
  std::size_t replaced = 0;
  std::set<std::string> bounds;
  for (auto& n : *g.mutable_node()) {
    if (n.op_type() != "Clip" || !n.domain().empty() || n.input_size() < 1)
      continue;
    bool zero = false, six = false;
    const auto* amin = find_attr(n, "min");
    const auto* amax = find_attr(n, "max");
    if (amin != nullptr || amax != nullptr) {  // opset < 11: attributes
      zero = amin != nullptr && std::fabs(static_cast<double>(amin->f())) <= 1e-8;
      six = amax != nullptr && std::fabs(static_cast<double>(amax->f()) - 6.0) <= 1e-8 + 6e-5;
    } else if (n.input_size() >= 3 && m.has_initializer(n.input(1)) &&
               m.has_initializer(n.input(2))) {
      zero = allclose(m.initializer(n.input(1)), 0.0);
      six = allclose(m.initializer(n.input(2)), 6.0);
    }
    if (!zero || !six)
      continue;
    for (int k = 1; k < n.input_size(); ++k)
      bounds.insert(n.input(k));
    const std::string x = n.input(0);
    n.set_op_type("Relu");
    n.clear_input();
    n.add_input(x);
    n.clear_attribute();
    ++replaced;
  }
  const graph_index ix(g);
  for (const auto& b : bounds) {
    if (!b.empty() && ix.uses(b) == 0 && m.has_initializer(b))
      m.remove_initializer(b);
  }
  return replaced;
}

cle_stats cross_layer_equalize(model& m, const cle_options& o,
                               const std::function<bool(const std::string&)>& quantized) {
  cle_stats st;
  const std::vector<pattern> patterns = find_patterns(m, quantized, st.skipped);
  for (const auto& p : patterns)
    (p.layers.size() == 2 ? st.pairs : st.triples) += 1;
  if (patterns.empty())
    return st;
  weight_store store;
  std::set<std::string> weights;
  for (const auto& p : patterns) {
    for (const auto& l : p.layers)
      weights.insert(l.w);
  }
  // The stop rule of quark-spec §10.1: change = sum over the weights of mean |W_prev - W_new|.
  cle::stop_rule rule(o.total_layer_diff_threshold, o.steps);
  while (rule.more()) {
    std::map<std::string, std::vector<float>> prev;
    for (const auto& w : weights) {
      const auto v = get(store, m, w).data<float>();
      prev.emplace(w, std::vector<float>(v.begin(), v.end()));
    }
    for (const auto& p : patterns) {
      if (p.layers.size() == 2)
        equalize_pair(m, store, p.layers[0], p.layers[1], o);
      else
        equalize_triple(m, store, p.layers[0], p.layers[1], p.layers[2]);
    }
    double change = 0.0;
    for (const auto& w : weights) {
      const std::vector<float>& before = prev.at(w);
      change += cle::mean_abs_change<float>(before, store.at(w).data<float>());
    }
    rule.record(change);
    ++st.steps;
  }
  for (const auto& [name, t] : store)
    m.set_initializer(name, t);
  return st;
}

}  // namespace quark::onnx::qz
