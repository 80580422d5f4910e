// SPDX-License-Identifier: MIT
// The runtime's own view of an ONNX graph: nodes in topological order with decoded attributes,
// constant tensors (initializers and folded Constant nodes), and for every node the values whose
// last consumer it is. Built once from a GraphProto; protobuf is not needed after that.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include <quark/onnx/error.hpp>
#include <quark/onnx/runtime.hpp>
#include <quark/onnx/tensor.hpp>

namespace quark::onnx::rt {

struct graph;
struct kernel_context;
using kernel_fn = void (*)(kernel_context&);

struct attribute {
  enum class kind { none, i, f, s, t, g, ints, floats, strings };
  kind k = kind::none;
  std::int64_t i = 0;
  float f = 0.0f;
  std::string s;
  std::vector<std::int64_t> ints;
  std::vector<float> floats;
  std::vector<std::string> strings;
  std::shared_ptr<const tensor> t;
  std::shared_ptr<const graph> g;
};

struct node {
  std::string name;
  std::string op;
  int opset = 0;
  std::vector<std::string> inputs;   ///< "" for an absent optional input
  std::vector<std::string> outputs;  ///< "" for an unused optional output
  std::map<std::string, attribute, std::less<>> attrs;
  kernel_fn kernel = nullptr;

  const attribute* find(std::string_view attr) const {
    auto it = attrs.find(attr);
    return it == attrs.end() ? nullptr : &it->second;
  }
  bool has(std::string_view attr) const { return find(attr) != nullptr; }
  // Typed reads: an attribute of another type (an int given as a list or a string, ...) is
  // refused naming the node, as ONNX Runtime refuses it, instead of being read as 0 / empty.
  // An empty list may arrive untyped (old exporters leave `type` unset).
  std::int64_t attr_i(std::string_view attr, std::int64_t fallback) const {
    const auto* a = typed(attr, attribute::kind::i, "an int");
    return a ? a->i : fallback;
  }
  float attr_f(std::string_view attr, float fallback) const {
    const auto* a = typed(attr, attribute::kind::f, "a float");
    return a ? a->f : fallback;
  }
  std::string attr_s(std::string_view attr, std::string fallback) const {
    const auto* a = typed(attr, attribute::kind::s, "a string");
    return a ? a->s : fallback;
  }
  std::vector<std::int64_t> attr_ints(std::string_view attr,
                                      std::vector<std::int64_t> fallback = {}) const {
    const auto* a = typed(attr, attribute::kind::ints, "a list of ints");
    return a ? a->ints : fallback;
  }
  std::vector<float> attr_floats(std::string_view attr, std::vector<float> fallback = {}) const {
    const auto* a = typed(attr, attribute::kind::floats, "a list of floats");
    return a ? a->floats : fallback;
  }
  /// "node 'name' (Op)" for error messages.
  std::string describe() const { return "node '" + name + "' (" + op + ")"; }

 private:
  /// The attribute `attr` if present and of kind `k` (an untyped one reads as an empty list);
  /// nullptr if absent; throws quark.onnx.load naming the node if of another type.
  const attribute* typed(std::string_view attr, attribute::kind k, const char* what) const {
    const auto* a = find(attr);
    if (a == nullptr || a->k == k)
      return a;
    if (a->k == attribute::kind::none &&
        (k == attribute::kind::ints || k == attribute::kind::floats))
      return a;
    throw frontend_error("quark.onnx.load",
                         describe() + ": attribute '" + std::string(attr) + "' must be " + what);
  }
};

struct graph {
  std::string name;
  std::vector<node> nodes;  ///< topological order
  std::unordered_map<std::string, std::shared_ptr<const tensor>> constants;
  std::vector<tensor_info> inputs;  ///< inputs to feed (for subgraphs: the formal parameters)
  std::vector<tensor_info> outputs;
  /// release[i]: values produced in this graph (or fed to it) that are dead after nodes[i].
  std::vector<std::vector<std::string>> release;
  /// Names this graph reads from enclosing scopes (subgraphs only).
  std::vector<std::string> outer_refs;
};

/// Unsupported operators found while building (sorted, unique), so the caller reports all at once.
struct build_report {
  std::vector<std::string> unsupported;
};

}  // namespace quark::onnx::rt
