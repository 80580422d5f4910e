// SPDX-License-Identifier: MIT
// Opset raising for quantized models (see opset.hpp). Only signature changes are handled here;
// operators whose numeric behaviour changed between the two versions are refused.
#include "quantizer/opset.hpp"

#include <map>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include <quark/onnx/error.hpp>

#include "quantizer/graph_util.hpp"

namespace quark::onnx::qz {

namespace {

void drop_attr(::onnx::NodeProto& n, const std::string& name) {
  auto* as = n.mutable_attribute();
  for (int i = 0; i < as->size(); ++i) {
    if (as->Get(i).name() == name) {
      as->DeleteSubrange(i, 1);
      return;
    }
  }
}

/// A fresh initializer name for `g`: none of its initializers, node inputs or node outputs (in a
/// subgraph a new initializer shadows an outer value of the same name, so it must not be one the
/// subgraph reads).
std::string unique_name(const ::onnx::GraphProto& g, const std::string& base) {
  std::set<std::string> names;
  for (const auto& t : g.initializer())
    names.insert(t.name());
  for (const auto& n : g.node()) {
    names.insert(n.input().begin(), n.input().end());
    names.insert(n.output().begin(), n.output().end());
  }
  std::string n = base;
  for (int k = 1; names.contains(n); ++k)
    n = base + "_" + std::to_string(k);
  return n;
}

std::string add_ints(::onnx::GraphProto& g, const std::string& base,
                     const std::vector<std::int64_t>& v) {
  auto* t = g.add_initializer();
  const std::string name = unique_name(g, base);
  t->set_name(name);
  t->set_data_type(7);
  t->add_dims(static_cast<std::int64_t>(v.size()));
  for (auto x : v)
    t->add_int64_data(x);
  return name;
}

std::string add_float(::onnx::GraphProto& g, const std::string& base, float v) {
  auto* t = g.add_initializer();
  const std::string name = unique_name(g, base);
  t->set_name(name);
  t->set_data_type(1);
  t->add_float_data(v);
  return name;
}

/// A 1-D float initializer holding `v` (possibly empty).
std::string add_floats(::onnx::GraphProto& g, const std::string& base,
                       const std::vector<float>& v) {
  auto* t = g.add_initializer();
  const std::string name = unique_name(g, base);
  t->set_name(name);
  t->set_data_type(1);
  t->add_dims(static_cast<std::int64_t>(v.size()));
  for (const float x : v)
    t->add_float_data(x);
  return name;
}

void add_str_attr(::onnx::NodeProto& n, const std::string& name, const std::string& v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(::onnx::AttributeProto::STRING);
  a->set_s(v);
}

void add_int_attr(::onnx::NodeProto& n, const std::string& name, std::int64_t v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(::onnx::AttributeProto::INT);
  a->set_i(v);
}

std::vector<std::int64_t> ints(const ::onnx::AttributeProto* a) {
  if (a == nullptr)
    return {};
  return {a->ints().begin(), a->ints().end()};
}

/// Moves an ints attribute to input slot `slot` (padding skipped optional inputs with "").
void attr_to_input(::onnx::GraphProto& g, ::onnx::NodeProto& n, const std::string& attr, int slot) {
  const auto* a = find_attr(n, attr);
  if (a == nullptr)
    return;
  const std::string name = add_ints(g, n.name() + "_" + attr, ints(a));
  drop_attr(n, attr);
  while (n.input_size() < slot)
    n.add_input("");
  if (n.input_size() == slot) {
    n.add_input(name);
  } else {
    n.set_input(slot, name);
  }
}

/// `why`, when given, says what the node has that the newer versions cannot express.
[[noreturn]] void refuse(const ::onnx::NodeProto& n, std::int64_t from, std::int64_t to,
                         const std::string& why = {}) {
  throw frontend_error(
      "quark.quantize.opset",
      "node '" + n.name() + "' (" + n.op_type() + ") cannot be carried from opset " +
          std::to_string(from) + " to " + std::to_string(to) + ", which the quantized types need" +
          (why.empty() ? "" : ": " + why) + "; this conversion is not implemented yet");
}

/// Rewrites the nodes of `g` and, recursively, of the subgraphs of its If / Loop / Scan nodes
/// (one opset import covers them all); a subgraph's new initializers go into that subgraph.
void upgrade_nodes(::onnx::GraphProto& g, std::int64_t from, std::int64_t to,
                   const std::map<std::string, std::size_t>& ranks) {
  auto crosses = [&](std::int64_t v) { return from < v && to >= v; };
  static const std::set<std::string> reduce18 = {
      "ReduceMean", "ReduceMax",    "ReduceMin",       "ReduceProd",     "ReduceL1",
      "ReduceL2",   "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"};
  // Nodes to insert around node i (Softmax's 2-D form, below), applied after the loop.
  std::map<int, std::pair<std::vector<::onnx::NodeProto>, std::vector<::onnx::NodeProto>>> around;
  std::optional<name_pool> names;
  int index = -1;
  for (auto& n : *g.mutable_node()) {
    ++index;
    if (!n.domain().empty() && n.domain() != "ai.onnx")
      continue;
    const std::string& op = n.op_type();
    // Attributes the old versions had and the new ones reject: consumed_inputs (gone in 6) and
    // is_test (Dropout / BatchNormalization, gone in 7; inference is what both run).
    if (crosses(6))
      drop_attr(n, "consumed_inputs");
    if (crosses(7) && (op == "Dropout" || op == "BatchNormalization"))
      drop_attr(n, "is_test");
    if (op == "Clip" && crosses(11)) {
      const auto* lo = find_attr(n, "min");
      const auto* hi = find_attr(n, "max");
      const std::string lo_name = lo ? add_float(g, n.name() + "_min", lo->f()) : "";
      const std::string hi_name = hi ? add_float(g, n.name() + "_max", hi->f()) : "";
      drop_attr(n, "min");
      drop_attr(n, "max");
      if (!hi_name.empty()) {
        n.add_input(lo_name);
        n.add_input(hi_name);
      } else if (!lo_name.empty()) {
        n.add_input(lo_name);
      }
    } else if (op == "Slice" && crosses(10)) {
      const auto starts = ints(find_attr(n, "starts"));
      const auto ends = ints(find_attr(n, "ends"));
      const auto axes = ints(find_attr(n, "axes"));
      n.add_input(add_ints(g, n.name() + "_starts", starts));
      n.add_input(add_ints(g, n.name() + "_ends", ends));
      if (!axes.empty())
        n.add_input(add_ints(g, n.name() + "_axes", axes));
      drop_attr(n, "starts");
      drop_attr(n, "ends");
      drop_attr(n, "axes");
    } else if ((op == "Softmax" || op == "LogSoftmax" || op == "Hardmax") && crosses(13)) {
      const auto* a = find_attr(n, "axis");
      std::int64_t axis = a ? a->i() : 1;
      if (n.input_size() < 1 || n.output_size() < 1)
        refuse(n, from, to);
      auto it = ranks.find(n.input(0));
      if (it != ranks.end() && axis < 0)
        axis += static_cast<std::int64_t>(it->second);
      const bool last =
          (it != ranks.end() && axis == static_cast<std::int64_t>(it->second) - 1) || axis == -1;
      drop_attr(n, "axis");
      if (last) {
        add_int_attr(n, "axis", axis);
      } else {
        // The old operator works on the 2-D coercion [prod(dims < axis), prod(dims >= axis)]:
        // Flatten(axis) -> the new operator on the last axis -> Reshape back to Shape(x). Exact
        // for any rank, so the rank need not be known.
        if (!names)
          names.emplace(g);
        const std::string x = n.input(0), y = n.output(0);
        const std::string flat = names->fresh(y + "_2d_in"), out2 = names->fresh(y + "_2d");
        const std::string shape = names->fresh(y + "_shape");
        ::onnx::NodeProto f, sh, re;
        f.set_op_type("Flatten");
        f.set_name(names->fresh(n.name() + "_flatten"));
        f.add_input(x);
        f.add_output(flat);
        add_int_attr(f, "axis", axis);
        sh.set_op_type("Shape");
        sh.set_name(names->fresh(n.name() + "_shape"));
        sh.add_input(x);
        sh.add_output(shape);
        re.set_op_type("Reshape");
        re.set_name(names->fresh(n.name() + "_reshape"));
        re.add_input(out2);
        re.add_input(shape);
        re.add_output(y);
        n.set_input(0, flat);
        n.set_output(0, out2);
        add_int_attr(n, "axis", -1);
        around[index] = {{std::move(f), std::move(sh)}, {std::move(re)}};
      }
    } else if ((op == "Squeeze" || op == "Unsqueeze") && crosses(13)) {
      attr_to_input(g, n, "axes", 1);
    } else if (op == "ReduceSum" && crosses(13)) {
      attr_to_input(g, n, "axes", 1);
    } else if (reduce18.contains(op) && crosses(18)) {
      attr_to_input(g, n, "axes", 1);
    } else if (op == "Split" && (crosses(13) || crosses(18))) {
      if (crosses(13))
        attr_to_input(g, n, "split", 1);
      // From 18 an equal split must say into how many parts (num_outputs).
      const bool has_split = n.input_size() > 1 && !n.input(1).empty();
      if (crosses(18) && !has_split && find_attr(n, "num_outputs") == nullptr)
        add_int_attr(n, "num_outputs", n.output_size());
    } else if (op == "TopK" && crosses(10)) {
      const auto* k = find_attr(n, "k");
      if (k == nullptr)
        refuse(n, from, to);
      n.add_input(add_ints(g, n.name() + "_k", {k->i()}));
      drop_attr(n, "k");
    } else if (op == "Scatter" && crosses(11)) {
      n.set_op_type("ScatterElements");  // the same operator, renamed in 11
    } else if (op == "BatchNormalization" && crosses(9)) {
      const auto* spatial = find_attr(n, "spatial");
      if (spatial != nullptr && spatial->i() != 1)
        refuse(n, from, to, "spatial = 0 (per-activation statistics, gone after opset 9)");
      drop_attr(n, "spatial");
    } else if (op == "Pad" && crosses(11)) {
      const auto* v = find_attr(n, "value");
      const float value = v ? v->f() : 0.0f;
      attr_to_input(g, n, "pads", 1);
      if (value != 0.0f)
        n.add_input(add_float(g, n.name() + "_value", value));
      drop_attr(n, "value");
    } else if (op == "Dropout" && crosses(12)) {
      drop_attr(n, "ratio");
    } else if ((op == "Upsample" && crosses(10)) || (op == "Resize" && crosses(11))) {
      // Upsample (7: scales attribute; 9: scales input) and Resize-10 map output coordinates
      // back as x / scale (asymmetric) and take the nearest input below (floor): Resize-10 has
      // the same rules; Resize-11 says so explicitly, with an empty roi. (The runtime reads the
      // old forms the same way; ONNX's version converter writes the same attributes for Resize
      // 10 -> 11.)
      const auto* m = find_attr(n, "mode");
      const std::string mode = m != nullptr ? m->s() : "nearest";
      if (mode != "nearest" && mode != "linear")
        refuse(n, from, to, "mode '" + mode + "' (only nearest and linear carry over)");
      if (n.input_size() < 1 || n.output_size() < 1)
        refuse(n, from, to);
      std::string scales;
      if (n.input_size() >= 2 && !n.input(1).empty()) {
        scales = n.input(1);
      } else if (const auto* sa = find_attr(n, "scales"); sa != nullptr && op == "Upsample") {
        scales = add_floats(g, n.name() + "_scales", {sa->floats().begin(), sa->floats().end()});
      } else {
        refuse(n, from, to, "no scales");
      }
      const std::string x = n.input(0);
      n.clear_input();
      n.add_input(x);
      n.set_op_type("Resize");
      n.clear_attribute();
      add_str_attr(n, "mode", mode);
      if (to < 11) {
        // Resize-10 (X, scales) has exactly the old rules.
        n.add_input(scales);
      } else {
        n.add_input(add_floats(g, n.name() + "_roi", {}));
        n.add_input(scales);
        add_str_attr(n, "coordinate_transformation_mode", "asymmetric");
        if (mode == "nearest")
          add_str_attr(n, "nearest_mode", "floor");
      }
    } else if ((op == "Scan" && from < 9) || (op == "Loop" && from < 11)) {
      // Scan-8's batch form and Loop before 11 differ from their later versions; If and the
      // later Loop / Scan versions only widened their value types to sequences and optionals.
      refuse(n, from, to);
    }
    for (auto& a : *n.mutable_attribute()) {
      if (a.has_g())
        upgrade_nodes(*a.mutable_g(), from, to, ranks);
      for (auto& sub : *a.mutable_graphs())
        upgrade_nodes(sub, from, to, ranks);
    }
  }
  if (around.empty())
    return;
  ::google::protobuf::RepeatedPtrField<::onnx::NodeProto> nodes;
  for (int i = 0; i < g.node_size(); ++i) {
    auto it = around.find(i);
    if (it != around.end()) {
      for (auto& b : it->second.first)
        *nodes.Add() = std::move(b);
    }
    *nodes.Add() = std::move(*g.mutable_node(i));
    if (it != around.end()) {
      for (auto& a : it->second.second)
        *nodes.Add() = std::move(a);
    }
  }
  g.mutable_node()->Swap(&nodes);
}

}  // namespace

std::vector<std::string> upgrade_opset(::onnx::ModelProto& m, std::int64_t from, std::int64_t to,
                                       const std::map<std::string, std::size_t>& ranks) {
  std::vector<std::string> notes;
  if (from >= to)
    return notes;
  upgrade_nodes(*m.mutable_graph(), from, to, ranks);
  for (auto& o : *m.mutable_opset_import()) {
    if (o.domain().empty() || o.domain() == "ai.onnx")
      o.set_version(to);
  }
  if (m.ir_version() < 7 && to >= 13)
    m.set_ir_version(7);
  if (to >= 21 && m.ir_version() < 10)
    m.set_ir_version(10);
  notes.push_back("opset raised from " + std::to_string(from) + " to " + std::to_string(to) +
                  " for the quantized types");
  return notes;
}

}  // namespace quark::onnx::qz
