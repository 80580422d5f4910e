// SPDX-License-Identifier: MIT
// PRIVATE: graph walking shared by model.cpp and validate.cpp (and usable by the runtime).
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <onnx/onnx_pb.h>

#include <quark/onnx/error.hpp>

namespace quark::onnx {

/// A graph that breaks ONNX's rules (quark.onnx.graph).
[[noreturn]] inline void graph_error(const std::string& what) {
  throw frontend_error("quark.onnx.graph", what);
}

/// The newest ai.onnx operator set quark-cpp's runtime and quantizer implement (ONNX Runtime 1.30
/// runs up to 26 and calls newer ones "under development").
inline constexpr int newest_onnx_opset = 26;

/// What running or quantizing `m` needs beyond validity (model::validate also accepts models
/// being built): throws quark.onnx.opset when `m` imports an ai.onnx operator set newer than
/// newest_onnx_opset (its operators' newer versions would run with older semantics, and the
/// quantized model would keep an operator set ONNX Runtime may refuse), and quark.onnx.graph
/// when its graph declares no output (ONNX Runtime fails on such a model).
void check_runnable(const ::onnx::ModelProto& m);

/// The attribute's type; for files that leave `type` unset, inferred from the populated field.
::onnx::AttributeProto::AttributeType attribute_kind(const ::onnx::AttributeProto& a);

/// The default operator set's domain: "" or "ai.onnx".
inline bool is_default_domain(std::string_view d) {
  return d.empty() || d == "ai.onnx";
}

/// Calls f(subgraph) for every graph-valued attribute of `n` (If / Loop / Scan bodies).
template <class F>
void for_each_subgraph(const ::onnx::NodeProto& n, F&& f) {
  for (const auto& a : n.attribute()) {
    const auto kind = attribute_kind(a);
    if (kind == ::onnx::AttributeProto::GRAPH)
      f(a.g());
    if (kind == ::onnx::AttributeProto::GRAPHS) {
      for (const auto& sg : a.graphs())
        f(sg);
    }
  }
}

/// The same, with each subgraph mutable.
template <class F>
void for_each_subgraph(::onnx::NodeProto& n, F&& f) {
  for (auto& a : *n.mutable_attribute()) {
    const auto kind = attribute_kind(a);
    if (kind == ::onnx::AttributeProto::GRAPH)
      f(*a.mutable_g());
    if (kind == ::onnx::AttributeProto::GRAPHS) {
      for (auto& sg : *a.mutable_graphs())
        f(sg);
    }
  }
}

/// Index of the initializer `name` of `g`, or -1.
int find_initializer(const ::onnx::GraphProto& g, std::string_view name);

/// "node 'conv1' (Conv)", or "node #3 (Conv)" for an unnamed node.
std::string node_label(const ::onnx::NodeProto& n, std::size_t index);

/// Names the subgraphs of `n` (If/Loop/Scan bodies) read from enclosing scopes; empty for nodes
/// without graph attributes.
std::set<std::string> node_implicit_inputs(const ::onnx::NodeProto& n);

/// Who writes and who reads each value of `g`, indexed once: the answers of model::producer and
/// model::consumers (the first node writing the value; the nodes reading it, in node order and
/// each once, counting the values an If / Loop / Scan body reads from `g`) in O(log n) instead
/// of a scan of every node each. Code that asks for many values builds one of these instead of
/// calling model::consumers in a loop, which made the quantizer quadratic in the node count
/// (20,000 nodes took 30 s). A snapshot: build another once nodes change. Empty names (omitted
/// optional inputs and outputs) are not indexed.
class value_users {
 public:
  explicit value_users(const ::onnx::GraphProto& g);
  [[nodiscard]] std::optional<std::size_t> producer(std::string_view name) const;
  /// Empty when nothing reads `name`.
  [[nodiscard]] const std::vector<std::size_t>& consumers(std::string_view name) const;

 private:
  std::map<std::string, std::size_t, std::less<>> producer_;
  std::map<std::string, std::vector<std::size_t>, std::less<>> consumers_;
};

/// The initializers of a graph by name, for code that looks up or adds many (a scan of the whole
/// list per lookup made the quantizer quadratic in the node count). It checks itself: it indexes
/// again when the list's length changed or a name found no longer matches, so additions made
/// around it through the protobuf are seen. Edits that can keep the length (a removal, then an
/// addition; a rename) call clear(): model's own methods do, and so do the quantizer's helpers
/// that remove initializers through the protobuf.
class initializer_index {
 public:
  /// Index into g.initializer() of the first initializer named `name`, or -1.
  [[nodiscard]] int find(const ::onnx::GraphProto& g, std::string_view name);
  /// The initializer `name`, appended (named, otherwise empty) when there is none.
  ::onnx::TensorProto& get_or_add(::onnx::GraphProto& g, std::string_view name);
  /// Appends `t` (whose name the caller knows is new).
  void add(::onnx::GraphProto& g, ::onnx::TensorProto&& t);
  void clear() noexcept {
    index_.clear();
    size_ = -1;
  }

 private:
  void rebuild(const ::onnx::GraphProto& g);
  std::map<std::string, int, std::less<>> index_;
  int size_ = -1;
};

/// Removes the elements of a protobuf repeated field for which `gone(element)` holds, keeping
/// the others in order, in one pass (DeleteSubrange per element is quadratic). Returns how many
/// it removed.
template <class List, class Pred>
std::size_t erase_if(List& list, Pred gone) {
  int keep = 0;
  for (int i = 0; i < list.size(); ++i) {
    if (gone(list.Get(i)))
      continue;
    if (keep != i)
      list.SwapElements(keep, i);
    ++keep;
  }
  const auto removed = static_cast<std::size_t>(list.size() - keep);
  list.DeleteSubrange(keep, list.size() - keep);
  return removed;
}

/// Removes the initializers of `p`'s main graph named in `names` in one pass (and, below IR
/// version 4, their graph inputs), as model::remove_initializer does one at a time. Returns how
/// many it removed.
std::size_t remove_initializers(::onnx::ModelProto& p,
                                const std::set<std::string, std::less<>>& names);

/// Node indices of `g` in dependency order (stable: file order where free). `outer` holds the
/// names visible from enclosing graphs. Throws frontend_error("quark.onnx.graph") naming the
/// node for an undefined input or a cycle.
std::vector<std::size_t> graph_topological_order(const ::onnx::GraphProto& g,
                                                 const std::set<std::string>& outer);

/// Names nothing in a graph uses yet (graph inputs and outputs, value_info, initializers, nodes,
/// their inputs and outputs, in the graph and in every If / Loop / Scan body, so a new name never
/// shadows an outer one): fresh(base) is `base`, or `base` + "_<k>" for the first k that is free,
/// and reserves it. One pool per rewrite: made once, O(log n) per name.
class name_pool {
 public:
  explicit name_pool(const ::onnx::GraphProto& g) { collect(g); }
  std::string fresh(const std::string& base) {
    std::string name = base;
    for (int k = 1; !used_.insert(name).second; ++k)
      name = base + "_" + std::to_string(k);
    return name;
  }

 private:
  void collect(const ::onnx::GraphProto& g) {
    for (const auto& v : g.input())
      used_.insert(v.name());
    for (const auto& v : g.output())
      used_.insert(v.name());
    for (const auto& v : g.value_info())
      used_.insert(v.name());
    for (const auto& t : g.initializer())
      used_.insert(t.name());
    for (const auto& t : g.sparse_initializer())
      used_.insert(t.values().name());
    for (const auto& n : g.node()) {
      used_.insert(n.name());
      used_.insert(n.input().begin(), n.input().end());
      used_.insert(n.output().begin(), n.output().end());
      for_each_subgraph(n, [this](const ::onnx::GraphProto& sg) { collect(sg); });
    }
  }
  std::set<std::string> used_;
};

}  // namespace quark::onnx
