// SPDX-License-Identifier: MIT
// GraphProto -> rt::graph: attributes decoded once, Constant nodes folded into constants,
// Kahn topological order, and the release lists that free each value after its last consumer.
#include "runtime/proto_decode.hpp"

#include <algorithm>
#include <cstring>
#include <deque>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include <quark/dtype/convert.hpp>

#include "io/graph_util.hpp"
#include "io/tensor_proto.hpp"
#include "runtime/kernel.hpp"
#include "runtime/registry.hpp"

namespace quark::onnx::rt {

tensor widen_half(tensor t) {
  if (t.type() != dtype_id::float16 && t.type() != dtype_id::bfloat16)
    return t;
  tensor w(dtype_id::float32, t.shape());
  auto dst = w.data<float>();
  if (t.type() == dtype_id::float16) {
    quark::to_float(std::span<const quark::float16>(t.data<quark::float16>()), dst);
  } else {
    quark::to_float(std::span<const quark::bfloat16>(t.data<quark::bfloat16>()), dst);
  }
  return w;
}

tensor decode_tensor(const ::onnx::TensorProto& tp, const std::filesystem::path& base_dir) {
  return widen_half(read_tensor(tp, base_dir));
}

namespace {

attribute decode_attribute(const ::onnx::AttributeProto& a, int opset,
                           const std::filesystem::path& base_dir,
                           const std::vector<std::string>& visible, build_report& report) {
  attribute r;
  using A = ::onnx::AttributeProto;
  switch (attribute_kind(a)) {  // old exporters leave `type` unset: inferred from the field
    case A::INT:
      r.k = attribute::kind::i;
      r.i = a.i();
      break;
    case A::FLOAT:
      r.k = attribute::kind::f;
      r.f = a.f();
      break;
    case A::STRING:
      r.k = attribute::kind::s;
      r.s = a.s();
      break;
    case A::INTS:
      r.k = attribute::kind::ints;
      r.ints.assign(a.ints().begin(), a.ints().end());
      break;
    case A::FLOATS:
      r.k = attribute::kind::floats;
      r.floats.assign(a.floats().begin(), a.floats().end());
      break;
    case A::STRINGS:
      r.k = attribute::kind::strings;
      r.strings.assign(a.strings().begin(), a.strings().end());
      break;
    case A::TENSOR:
      r.k = attribute::kind::t;
      r.t = std::make_shared<tensor>(decode_tensor(a.t(), base_dir));
      break;
    case A::GRAPH:
      r.k = attribute::kind::g;
      r.g = build_graph(a.g(), opset, base_dir, visible, report);
      break;
    default:
      // Sparse tensors, type protos, graph lists: no kernel here reads them.
      break;
  }
  return r;
}

/// The tensor of a Constant node from whichever value_* attribute it carries.
tensor constant_value(const ::onnx::NodeProto& n, const std::filesystem::path& base_dir) {
  for (const auto& a : n.attribute()) {
    const auto& name = a.name();
    if (name == "value")
      return decode_tensor(a.t(), base_dir);
    if (name == "value_float") {
      const float v = a.f();
      return tensor::from_floats({}, std::span<const float>(&v, 1));
    }
    if (name == "value_floats") {
      std::vector<float> v(a.floats().begin(), a.floats().end());
      return tensor::from_floats({to_i64(v.size())}, v);
    }
    if (name == "value_int" || name == "value_ints") {
      std::vector<std::int64_t> v;
      if (name == "value_int") {
        v.push_back(a.i());
      } else {
        v.assign(a.ints().begin(), a.ints().end());
      }
      tensor t(dtype_id::int64, name == "value_int" ? shape_t{} : shape_t{to_i64(v.size())});
      std::copy(v.begin(), v.end(), t.data<std::int64_t>().begin());
      return t;
    }
  }
  throw frontend_error("quark.onnx.unsupported_op",
                       "node '" + n.name() + "' (Constant): no supported value attribute");
}

tensor_info decode_value_info(const ::onnx::ValueInfoProto& v) {
  tensor_info r;
  r.name = v.name();
  if (v.type().has_tensor_type()) {
    const auto& tt = v.type().tensor_type();
    r.type = dtype_from_onnx(tt.elem_type()).value_or(dtype_id::undefined);
    for (const auto& d : tt.shape().dim())
      r.shape.push_back(d.has_dim_value() ? d.dim_value() : -1);
  }
  return r;
}

}  // namespace

std::shared_ptr<graph> build_graph(const ::onnx::GraphProto& gp, int opset,
                                   const std::filesystem::path& base_dir,
                                   const std::vector<std::string>& outer, build_report& report) {
  auto g = std::make_shared<graph>();
  g->name = gp.name();
  for (const auto& init : gp.initializer()) {
    g->constants[init.name()] = std::make_shared<tensor>(decode_tensor(init, base_dir));
  }
  for (const auto& in : gp.input()) {
    if (!g->constants.count(in.name()))
      g->inputs.push_back(decode_value_info(in));
  }
  for (const auto& out : gp.output())
    g->outputs.push_back(decode_value_info(out));

  // Every name a subgraph may read from here: outer names, inputs, constants and node outputs.
  std::vector<std::string> visible = outer;
  for (const auto& in : gp.input())
    visible.push_back(in.name());
  for (const auto& init : gp.initializer())
    visible.push_back(init.name());
  for (const auto& n : gp.node()) {
    for (const auto& o : n.output())
      visible.push_back(o);
  }

  std::vector<node> nodes;
  for (const auto& np : gp.node()) {
    const bool default_domain = np.domain().empty() || np.domain() == "ai.onnx";
    if (default_domain && np.op_type() == "Constant" && np.input_size() == 0 &&
        np.output_size() == 1) {
      g->constants[np.output(0)] = std::make_shared<tensor>(constant_value(np, base_dir));
      continue;
    }
    node n;
    n.name = np.name().empty() ? (np.output_size() ? np.output(0) : np.op_type()) : np.name();
    n.op = np.op_type();
    n.opset = opset;
    n.inputs.assign(np.input().begin(), np.input().end());
    n.outputs.assign(np.output().begin(), np.output().end());
    for (const auto& a : np.attribute()) {
      n.attrs.emplace(a.name(), decode_attribute(a, opset, base_dir, visible, report));
    }
    // com.microsoft QuantizeLinear / DequantizeLinear (what UseQDQContribOps emits) have the
    // ONNX semantics with the types of opset 21, so the default-domain kernels run them.
    const bool contrib_qdq =
        np.domain() == "com.microsoft" && (n.op == "QuantizeLinear" || n.op == "DequantizeLinear");
    // AMD Quark's fused BFP / MX quantize-dequantize ops (ops_quark.cpp) and ONNX Runtime's
    // other contrib ops (ops_contrib.cpp: MatMulNBits) are registered as "domain:op".
    if (default_domain || contrib_qdq) {
      n.kernel = find_kernel(n.op);
    } else if (np.domain() == "com.amd.quark" || np.domain() == "com.microsoft") {
      n.kernel = find_kernel(np.domain() + ":" + n.op);
    }
    if (!n.kernel) {
      report.unsupported.push_back(default_domain ? n.op : np.domain() + ":" + n.op);
    }
    nodes.push_back(std::move(n));
  }

  // Names each node reads: its inputs plus what its subgraphs read from outside themselves.
  auto reads_of = [](const node& n) {
    std::vector<std::string> r;
    for (const auto& i : n.inputs) {
      if (!i.empty())
        r.push_back(i);
    }
    for (const auto& [key, a] : n.attrs) {
      if (a.g)
        r.insert(r.end(), a.g->outer_refs.begin(), a.g->outer_refs.end());
    }
    return r;
  };

  // Kahn's algorithm over the values produced by nodes of this graph.
  std::unordered_map<std::string, std::size_t> producer;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    for (const auto& o : nodes[i].outputs) {
      if (o.empty())
        continue;
      if (!producer.emplace(o, i).second || g->constants.count(o)) {
        throw frontend_error("quark.onnx.load",
                             "value '" + o + "' is produced twice (" + nodes[i].describe() + ")");
      }
    }
  }
  std::unordered_set<std::string> available(outer.begin(), outer.end());
  for (const auto& in : gp.input())
    available.insert(in.name());
  for (const auto& [name, t] : g->constants)
    available.insert(name);
  std::set<std::string> refs_outside;
  std::vector<std::size_t> missing(nodes.size(), 0);
  std::vector<std::vector<std::size_t>> waiting(nodes.size());
  std::deque<std::size_t> ready;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    for (const auto& r : reads_of(nodes[i])) {
      if (auto it = producer.find(r); it != producer.end()) {
        ++missing[i];
        waiting[it->second].push_back(i);
      } else if (!available.count(r)) {
        throw frontend_error("quark.onnx.load", nodes[i].describe() + ": input '" + r +
                                                    "' is not produced by any node, input or "
                                                    "initializer");
      } else if (!g->constants.count(r) &&
                 std::find(outer.begin(), outer.end(), r) != outer.end()) {
        bool is_input = false;
        for (const auto& in : gp.input())
          is_input = is_input || in.name() == r;
        if (!is_input)
          refs_outside.insert(r);
      }
    }
    if (missing[i] == 0)
      ready.push_back(i);
  }
  std::vector<std::size_t> order;
  while (!ready.empty()) {
    const std::size_t i = ready.front();
    ready.pop_front();
    order.push_back(i);
    for (std::size_t j : waiting[i]) {
      if (--missing[j] == 0)
        ready.push_back(j);
    }
  }
  if (order.size() != nodes.size()) {
    for (std::size_t i = 0; i < nodes.size(); ++i) {
      if (missing[i] != 0) {
        throw frontend_error("quark.onnx.load",
                             "the graph has a cycle through " + nodes[i].describe());
      }
    }
  }
  for (std::size_t i : order)
    g->nodes.push_back(std::move(nodes[i]));
  g->outer_refs.assign(refs_outside.begin(), refs_outside.end());

  // Lifetimes: a value produced or fed here dies after its last reader (or its producer).
  std::unordered_set<std::string> keep;
  for (const auto& o : g->outputs)
    keep.insert(o.name);
  std::unordered_map<std::string, std::size_t> last;
  for (std::size_t i = 0; i < g->nodes.size(); ++i) {
    for (const auto& o : g->nodes[i].outputs) {
      if (!o.empty())
        last[o] = i;
    }
    for (const auto& r : reads_of(g->nodes[i])) {
      if (g->constants.count(r))
        continue;
      last[r] = i;
    }
  }
  g->release.resize(g->nodes.size());
  std::unordered_set<std::string> own;
  for (const auto& in : g->inputs)
    own.insert(in.name);
  for (const auto& n : g->nodes) {
    for (const auto& o : n.outputs)
      own.insert(o);
  }
  for (const auto& [name, idx] : last) {
    if (own.count(name) && !keep.count(name))
      g->release[idx].push_back(name);
  }
  return g;
}

}  // namespace quark::onnx::rt
