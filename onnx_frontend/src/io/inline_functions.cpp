// SPDX-License-Identifier: MIT
// Model-local functions replaced by their bodies (see inline_functions.hpp).
#include "io/inline_functions.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <google/protobuf/unknown_field_set.h>

#include <quark/onnx/error.hpp>

#include "io/graph_util.hpp"

namespace quark::onnx {
namespace {

using google::protobuf::UnknownField;
using google::protobuf::UnknownFieldSet;

[[noreturn]] void function_error(const std::string& what) {
  throw frontend_error("quark.onnx.function", what);
}

/// "domain:name", or "name" for the default domain.
std::string label(const ::onnx::FunctionProto& f) {
  return (f.domain().empty() ? "" : f.domain() + ":") + f.name();
}

/// A string field protobuf kept as unknown: fields newer than the onnx 1.12 schema this build
/// compiles against (FunctionProto.overload 13, NodeProto.overload 8; IR 10).
std::string unknown_string(const google::protobuf::Message& msg, int number) {
  const UnknownFieldSet& u = msg.GetReflection()->GetUnknownFields(msg);
  for (int i = 0; i < u.field_count(); ++i) {
    if (u.field(i).number() == number && u.field(i).type() == UnknownField::TYPE_LENGTH_DELIMITED)
      return u.field(i).length_delimited();
  }
  return {};
}

/// FunctionProto.attribute_proto (field 11, IR 9): the attributes with their default values.
std::map<std::string, ::onnx::AttributeProto> attribute_defaults(const ::onnx::FunctionProto& f) {
  std::map<std::string, ::onnx::AttributeProto> out;
  const UnknownFieldSet& u = f.GetReflection()->GetUnknownFields(f);
  for (int i = 0; i < u.field_count(); ++i) {
    if (u.field(i).number() != 11 || u.field(i).type() != UnknownField::TYPE_LENGTH_DELIMITED)
      continue;
    ::onnx::AttributeProto a;
    if (!a.ParseFromString(u.field(i).length_delimited())) {
      function_error("function '" + label(f) +
                     "': a default attribute (attribute_proto) does not parse");
    }
    const std::string name = a.name();
    out.insert_or_assign(name, std::move(a));
  }
  return out;
}

/// FunctionProto.value_info (field 12, IR 10): the types of values inside the body.
std::vector<::onnx::ValueInfoProto> body_value_info(const ::onnx::FunctionProto& f) {
  std::vector<::onnx::ValueInfoProto> out;
  const UnknownFieldSet& u = f.GetReflection()->GetUnknownFields(f);
  for (int i = 0; i < u.field_count(); ++i) {
    if (u.field(i).number() != 12 || u.field(i).type() != UnknownField::TYPE_LENGTH_DELIMITED)
      continue;
    ::onnx::ValueInfoProto v;
    if (!v.ParseFromString(u.field(i).length_delimited()))
      function_error("function '" + label(f) + "': a value_info entry does not parse");
    out.push_back(std::move(v));
  }
  return out;
}

using function_key = std::tuple<std::string, std::string, std::string>;  // domain, name, overload

function_key key_of(const ::onnx::NodeProto& n) {
  return {is_default_domain(n.domain()) ? std::string() : n.domain(), n.op_type(),
          unknown_string(n, 8)};
}

/// The domains of the nodes of `g` and of its subgraphs.
void node_domains(const ::onnx::GraphProto& g, std::set<std::string>& out) {
  for (const auto& n : g.node()) {
    out.insert(n.domain());
    for_each_subgraph(n, [&](const ::onnx::GraphProto& sg) { node_domains(sg, out); });
  }
}

class inliner {
 public:
  explicit inliner(::onnx::ModelProto& m) : m_(m), names_(m.graph()) {
    for (const auto& f : m.functions()) {
      const function_key k{is_default_domain(f.domain()) ? std::string() : f.domain(), f.name(),
                           unknown_string(f, 13)};
      if (!functions_.emplace(k, &f).second)
        function_error("two functions are named '" + label(f) + "'");
    }
  }

  std::size_t run() {
    if (!functions_.empty())
      inline_graph(*m_.mutable_graph());
    return calls_;
  }

 private:
  static constexpr std::size_t max_depth = 64;  // calls inside calls

  std::string fresh(const std::string& base) { return names_.fresh(base); }

  void inline_graph(::onnx::GraphProto& g) {
    ::onnx::GraphProto* const enclosing = graph_;
    graph_ = &g;
    google::protobuf::RepeatedPtrField<::onnx::NodeProto> out;
    for (auto& n : *g.mutable_node())
      emit(std::move(n), out);
    g.mutable_node()->Swap(&out);
    graph_ = enclosing;
  }

  /// Appends `n` to `out`, or the body it calls; calls in its subgraphs are inlined first.
  void emit(::onnx::NodeProto n, google::protobuf::RepeatedPtrField<::onnx::NodeProto>& out) {
    for_each_subgraph(n, [this](::onnx::GraphProto& sg) { inline_graph(sg); });
    const auto it = functions_.find(key_of(n));
    if (it == functions_.end()) {
      *out.Add() = std::move(n);
      return;
    }
    expand(n, *it->second, out);
  }

  void check_opsets(const ::onnx::FunctionProto& f) {
    for (const auto& o : f.opset_import()) {
      const bool dflt = is_default_domain(o.domain());
      ::onnx::OperatorSetIdProto* have = nullptr;
      for (auto& mo : *m_.mutable_opset_import()) {
        if (dflt ? is_default_domain(mo.domain()) : mo.domain() == o.domain())
          have = &mo;
      }
      if (have == nullptr) {
        *m_.add_opset_import() = o;
      } else if (have->version() != o.version()) {
        function_error("function '" + label(f) + "' imports operator set '" + o.domain() +
                       "' version " + std::to_string(o.version()) + " and the model version " +
                       std::to_string(have->version()) +
                       ": inlined, its nodes would run at the model's version");
      }
    }
  }

  /// The body of `f` for the call `call`, appended to `out` with fresh names.
  void expand(const ::onnx::NodeProto& call, const ::onnx::FunctionProto& f,
              google::protobuf::RepeatedPtrField<::onnx::NodeProto>& out) {
    const std::string fname = label(f);
    if (std::find(active_.begin(), active_.end(), &f) != active_.end()) {
      std::string chain;
      for (const auto* a : active_)
        chain += label(*a) + " -> ";
      function_error("function '" + fname + "' calls itself (" + chain + fname +
                     "): recursion cannot be inlined");
    }
    if (active_.size() >= max_depth) {
      function_error("function '" + fname + "' is called " + std::to_string(max_depth) +
                     " levels deep");
    }
    if (call.input_size() > f.input_size() || call.output_size() > f.output_size()) {
      function_error("node '" + call.name() + "' calls function '" + fname + "' with " +
                     std::to_string(call.input_size()) + " inputs and " +
                     std::to_string(call.output_size()) + " outputs; it declares " +
                     std::to_string(f.input_size()) + " and " + std::to_string(f.output_size()));
    }
    check_opsets(f);
    ++calls_;
    const std::string prefix = (call.name().empty() ? f.name() : call.name()) + "/";
    std::map<std::string, std::string> names;  // body name -> graph name
    for (int i = 0; i < f.input_size(); ++i)
      names[f.input(i)] = i < call.input_size() ? call.input(i) : std::string();
    for (int i = 0; i < f.output_size(); ++i) {
      names[f.output(i)] = i < call.output_size() && !call.output(i).empty()
                               ? call.output(i)
                               : fresh(prefix + f.output(i));
    }
    std::map<std::string, const ::onnx::AttributeProto*> given;
    for (const auto& a : call.attribute())
      given[a.name()] = &a;
    const auto defaults = attribute_defaults(f);
    const scope s{names, given, defaults, prefix};
    active_.push_back(&f);
    for (const auto& b : f.node()) {
      ::onnx::NodeProto n = b;
      instantiate(n, s);
      emit(std::move(n), out);
    }
    active_.pop_back();
    // The body's value types go with its values into the graph the call is in; those of the
    // formal inputs and outputs are the caller's to declare.
    std::set<std::string> body_values;
    for (const auto& b : f.node())
      body_values.insert(b.output().begin(), b.output().end());
    for (const auto& v : f.output())
      body_values.erase(v);
    body_values.erase(std::string());
    for (auto& v : body_value_info(f)) {
      if (!body_values.count(v.name()))
        continue;
      v.set_name(names.at(v.name()));
      *graph_->add_value_info() = std::move(v);
    }
  }

  struct scope {
    std::map<std::string, std::string>& names;
    const std::map<std::string, const ::onnx::AttributeProto*>& given;
    const std::map<std::string, ::onnx::AttributeProto>& defaults;
    const std::string& prefix;
  };

  std::string rename(const std::string& name, const scope& s) {
    if (name.empty())
      return name;
    const auto it = s.names.find(name);
    if (it != s.names.end())
      return it->second;
    const std::string fresh_name = fresh(s.prefix + name);
    s.names.emplace(name, fresh_name);
    return fresh_name;
  }

  /// Renames a body node's values, node name and subgraphs and resolves its attribute
  /// references, for one call.
  void instantiate(::onnx::NodeProto& n, const scope& s) {
    for (auto& v : *n.mutable_input())
      v = rename(v, s);
    for (auto& v : *n.mutable_output())
      v = rename(v, s);
    n.set_name(fresh(s.prefix + (n.name().empty() ? n.op_type() : n.name())));
    google::protobuf::RepeatedPtrField<::onnx::AttributeProto> attrs;
    for (auto& a : *n.mutable_attribute()) {
      if (!a.ref_attr_name().empty()) {
        const auto g = s.given.find(a.ref_attr_name());
        const ::onnx::AttributeProto* value = g != s.given.end() ? g->second : nullptr;
        if (value == nullptr) {
          const auto d = s.defaults.find(a.ref_attr_name());
          value = d != s.defaults.end() ? &d->second : nullptr;
        }
        if (value == nullptr)
          continue;  // neither given nor defaulted: the attribute is left out
        const std::string name = a.name();
        a = *value;
        a.set_name(name);
      }
      *attrs.Add() = std::move(a);
    }
    n.mutable_attribute()->Swap(&attrs);
    for_each_subgraph(n, [&](::onnx::GraphProto& sg) { instantiate_graph(sg, s); });
  }

  void instantiate_graph(::onnx::GraphProto& g, const scope& s) {
    for (auto& v : *g.mutable_input())
      v.set_name(rename(v.name(), s));
    for (auto& v : *g.mutable_output())
      v.set_name(rename(v.name(), s));
    for (auto& v : *g.mutable_value_info())
      v.set_name(rename(v.name(), s));
    for (auto& t : *g.mutable_initializer())
      t.set_name(rename(t.name(), s));
    for (auto& t : *g.mutable_sparse_initializer())
      t.mutable_values()->set_name(rename(t.values().name(), s));
    for (auto& n : *g.mutable_node())
      instantiate(n, s);
  }

  ::onnx::ModelProto& m_;
  std::map<function_key, const ::onnx::FunctionProto*> functions_;
  name_pool names_;  // every name the model uses, values and nodes alike
  std::vector<const ::onnx::FunctionProto*>
      active_;  // the functions being expanded, outermost first
  std::size_t calls_ = 0;
  ::onnx::GraphProto* graph_ = nullptr;  // the graph whose nodes are being inlined
};

}  // namespace

std::size_t inline_local_functions(::onnx::ModelProto& m) {
  if (m.functions_size() == 0)
    return 0;
  const std::size_t calls = inliner(m).run();
  if (calls == 0)
    return 0;
  // The operator sets that only named functions ("local", torch's "__main__") go with them.
  std::set<std::string> function_domains, used;
  for (const auto& f : m.functions())
    function_domains.insert(f.domain());
  m.clear_functions();
  node_domains(m.graph(), used);
  erase_if(*m.mutable_opset_import(), [&](const ::onnx::OperatorSetIdProto& o) {
    return !is_default_domain(o.domain()) && function_domains.count(o.domain()) != 0 &&
           used.count(o.domain()) == 0;
  });
  return calls;
}

}  // namespace quark::onnx
