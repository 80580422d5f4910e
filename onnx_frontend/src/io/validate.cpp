// SPDX-License-Identifier: MIT
// Structural validation of a loaded model (names, tensor sizes, definitions, cycles), the
// dependency order of a graph, and the supported-op check. Every error names the tensor or node.
#include <algorithm>
#include <array>
#include <functional>
#include <limits>
#include <map>
#include <queue>
#include <string_view>
#include <unordered_map>

#include <onnx/defs/schema.h>

#include "config/text.hpp"
#include "io/graph_util.hpp"
#include "io/proto_access.hpp"
#include "io/tensor_proto.hpp"

namespace quark::onnx {
namespace {

using A = ::onnx::AttributeProto;
using name_set = std::set<std::string>;

/// Names a graph defines for its nodes: inputs, initializers (dense and sparse), node outputs.
void add_local_names(const ::onnx::GraphProto& g, name_set& out, bool with_node_outputs) {
  for (const auto& v : g.input())
    out.insert(v.name());
  for (const auto& t : g.initializer())
    out.insert(t.name());
  for (const auto& s : g.sparse_initializer())
    out.insert(s.values().name());
  if (with_node_outputs) {
    for (const auto& n : g.node()) {
      for (const auto& o : n.output()) {
        if (!o.empty())
          out.insert(o);
      }
    }
  }
}

/// Names a subgraph reads from enclosing scopes (its implicit inputs).
void free_names(const ::onnx::GraphProto& g, name_set& out) {
  name_set local;
  add_local_names(g, local, true);
  for (const auto& n : g.node()) {
    for (const auto& i : n.input()) {
      if (!i.empty() && !local.count(i))
        out.insert(i);
    }
    for_each_subgraph(n, [&](const ::onnx::GraphProto& sg) {
      name_set inner;
      free_names(sg, inner);
      for (const auto& s : inner) {
        if (!local.count(s))
          out.insert(s);
      }
    });
  }
  for (const auto& o : g.output()) {
    if (!local.count(o.name()))
      out.insert(o.name());
  }
}

void validate_graph(const ::onnx::GraphProto& g, const name_set& outer,
                    const std::filesystem::path& base_dir, const std::string& where, int opset);

/// The window attributes of the convolution and pooling family: ONNX shape inference and ONNX
/// Runtime refuse a stride, dilation or kernel size below 1 and negative pads or output padding.
/// (The shape inference of the linked libonnx 1.12 divides by a stride of 0: a crash, not an
/// error, so this check runs before any of it.)
void check_window_attributes(const ::onnx::NodeProto& n, std::size_t index) {
  static const std::set<std::string, std::less<>> ops{"Conv",          "ConvInteger", "QLinearConv",
                                                      "ConvTranspose", "DeformConv",  "MaxPool",
                                                      "AveragePool",   "LpPool",      "MaxUnpool"};
  if (!ops.contains(n.op_type()))
    return;
  for (const auto& a : n.attribute()) {
    const std::string& name = a.name();
    const bool positive = name == "strides" || name == "dilations" || name == "kernel_shape";
    if (!positive && name != "pads" && name != "output_padding")
      continue;
    for (const auto v : a.ints()) {
      if (v < (positive ? 1 : 0)) {
        throw frontend_error("quark.onnx.attribute", node_label(n, index) + " attribute '" + name +
                                                         "' holds " + std::to_string(v) +
                                                         ": its values must be " +
                                                         (positive ? "positive" : "non-negative"));
      }
    }
  }
}

/// The newest default-domain opset the linked libonnx has schemas for (17 for Debian 12's 1.12).
int known_opset() {
  static const int v = [] {
    const auto& m = ::onnx::OpSchemaRegistry::DomainToVersionRange::Instance().Map();
    const auto it = m.find("");
    return it == m.end() ? 0 : it->second.second;
  }();
  return v;
}

/// "takes 2 inputs", "takes 1 to 3 outputs", "takes at least 1 input".
std::string count_range(int lo, int hi, const char* what) {
  const std::string plural = std::string(what) + "s";
  if (hi == std::numeric_limits<int>::max())
    return "at least " + std::to_string(lo) + " " + (lo == 1 ? what : plural);
  if (lo == hi)
    return std::to_string(lo) + " " + (lo == 1 ? what : plural);
  return std::to_string(lo) + " to " + std::to_string(hi) + " " + plural;
}

/// "node 'a' (Add) has 1 input; Add at opset 9 takes 2 inputs" (quark.onnx.graph); `which`
/// names the schema ("at opset 9").
[[noreturn]] void count_error(const ::onnx::NodeProto& n, std::size_t index, const char* what,
                              int have, int lo, int hi, const std::string& which) {
  throw frontend_error("quark.onnx.graph", node_label(n, index) + " has " + std::to_string(have) +
                                               " " + what + (have == 1 ? "" : "s") + "; " +
                                               n.op_type() + " " + which + " takes " +
                                               count_range(lo, hi, what));
}

/// Input and output counts outside the schema's, and a required input left empty: ONNX Runtime
/// refuses such a node, and the linked libonnx's shape inference reads past the node's inputs.
void check_arity(const ::onnx::NodeProto& n, std::size_t index, int opset,
                 const ::onnx::OpSchema& schema) {
  const std::string which = "at opset " + std::to_string(opset);
  if (n.input_size() < schema.min_input() || n.input_size() > schema.max_input())
    count_error(n, index, "input", n.input_size(), schema.min_input(), schema.max_input(), which);
  if (n.output_size() < schema.min_output() || n.output_size() > schema.max_output()) {
    count_error(n, index, "output", n.output_size(), schema.min_output(), schema.max_output(),
                which);
  }
  const auto& formal = schema.inputs();
  for (int i = 0; i < n.input_size(); ++i) {
    const auto k = static_cast<std::size_t>(i);
    if (n.input(i).empty() && k < formal.size() &&
        formal[k].GetOption() == ::onnx::OpSchema::Single) {
      throw frontend_error("quark.onnx.graph", node_label(n, index) + ": input #" +
                                                   std::to_string(i) + " ('" + formal[k].GetName() +
                                                   "') is required by " + n.op_type() +
                                                   " but left empty");
    }
  }
}

/// Operators whose versions after opset 17 (ONNX 1.13 to 1.21: opsets 18 to 26) changed more
/// than their type constraints: an attribute, an input or the meaning of a value (Pad's axes and
/// wrap mode, Resize's new attributes, Split's num_outputs, the Reduce ops' axes input, Cast's
/// saturate and round_mode, QuantizeLinear's block_size and output_dtype, AveragePool's
/// dilations, ...). Every other operator of the opset-17 schemas changed at most its types after
/// 17 (opset 22 added bfloat16, opsets 19 to 25 the new float8 / 4-bit / 2-bit types to the
/// data-movement operators), so its opset-17 schema still says which attributes and how many
/// inputs and outputs it takes.
bool changed_past_17(std::string_view op) {
  static constexpr std::array<std::string_view, 26> ops{
      "AveragePool",      "Cast",           "CastLike",           "CenterCropPad", "DFT",
      "DequantizeLinear", "GridSample",     "GroupNormalization", "LpPool",        "Pad",
      "QLinearMatMul",    "QuantizeLinear", "ReduceL1",           "ReduceL2",      "ReduceLogSum",
      "ReduceLogSumExp",  "ReduceMax",      "ReduceMean",         "ReduceMin",     "ReduceProd",
      "ReduceSumSquare",  "Resize",         "ScatterElements",    "ScatterND",     "Split",
      "Attention"};
  return std::find(ops.begin(), ops.end(), op) != ops.end();
}

/// An attribute the operator's schema (at the model's opset) does not define: ONNX Runtime
/// refuses such a model ("Unrecognized attribute"). Checks the node's input and output counts
/// against the same schema (check_arity). Past the newest opset the linked libonnx knows (17),
/// its opset-17 schema serves the operators that changed only their types since; the others
/// (changed_past_17) and operators libonnx does not know are checked for their fewest inputs
/// only. `n` is a default-domain node.
void check_known_attributes(const ::onnx::NodeProto& n, std::size_t index, int opset) {
  if (opset <= 0)
    return;
  if (opset > known_opset() && changed_past_17(n.op_type())) {
    // libonnx's shape inference (the quantizer's first pass) applies its newest schema to a
    // newer opset and reads that many inputs: too few of them failed with protobuf's "CHECK
    // failed: (index) < (current_size_)". Only this is checked there: the rest of the schema
    // has changed. (A version that needs fewer inputs than its predecessor would be refused
    // wrongly; ONNX's changelog lists none from opset 18 to 26.)
    const ::onnx::OpSchema* newest = ::onnx::OpSchemaRegistry::Schema(n.op_type(), opset, "");
    if (newest != nullptr && n.input_size() < newest->min_input()) {
      count_error(n, index, "input", n.input_size(), newest->min_input(),
                  std::numeric_limits<int>::max(),
                  "(its opset-" + std::to_string(newest->since_version()) + " schema)");
    }
    return;
  }
  const ::onnx::OpSchema* schema = ::onnx::OpSchemaRegistry::Schema(n.op_type(), opset, "");
  if (schema == nullptr)
    return;
  for (const auto& a : n.attribute()) {
    // Names starting with "__" are internal to ONNX and never checked (as OpSchema::Verify).
    if (!a.name().starts_with("__") && !schema->attributes().contains(a.name())) {
      throw frontend_error("quark.onnx.attribute",
                           node_label(n, index) + " has attribute '" + a.name() + "', which " +
                               n.op_type() + " does not define at opset " + std::to_string(opset));
    }
  }
  check_arity(n, index, opset, *schema);
}

void validate_node_attributes(const ::onnx::NodeProto& n, std::size_t index, const name_set& scope,
                              const std::filesystem::path& base_dir, int opset) {
  if (is_default_domain(n.domain())) {
    check_window_attributes(n, index);
    check_known_attributes(n, index, opset);
  }
  for (const auto& a : n.attribute()) {
    const auto kind = attribute_kind(a);
    try {
      if (kind == A::TENSOR)
        validate_tensor(a.t(), base_dir);
      if (kind == A::TENSORS) {
        for (const auto& t : a.tensors())
          validate_tensor(t, base_dir);
      }
    } catch (const frontend_error& e) {
      throw frontend_error(e.id(),
                           node_label(n, index) + " attribute '" + a.name() + "': " + e.message());
    }
    if (kind == A::GRAPH)
      validate_graph(a.g(), scope, base_dir, node_label(n, index) + " body", opset);
    if (kind == A::GRAPHS) {
      for (const auto& sg : a.graphs()) {
        validate_graph(sg, scope, base_dir, node_label(n, index) + " body", opset);
      }
    }
  }
}

/// `opset`: the model's default-domain opset (0 when it imports none).
void validate_graph(const ::onnx::GraphProto& g, const name_set& outer,
                    const std::filesystem::path& base_dir, const std::string& where, int opset) {
  const std::string in = where.empty() ? std::string() : " in " + where;
  name_set inits;
  for (int i = 0; i < g.initializer_size(); ++i) {
    const auto& t = g.initializer(i);
    if (t.name().empty()) {
      throw frontend_error("quark.onnx.tensor",
                           "initializer #" + std::to_string(i) + in + " has no name");
    }
    if (!inits.insert(t.name()).second)
      graph_error("duplicate initializer '" + t.name() + "'" + in);
    validate_tensor(t, base_dir);
  }
  name_set inputs;
  for (const auto& v : g.input()) {
    if (v.name().empty())
      graph_error("graph input with an empty name" + in);
    if (!inputs.insert(v.name()).second)
      graph_error("duplicate graph input '" + v.name() + "'" + in);
  }
  for (int i = 0; i < g.node_size(); ++i) {
    const auto& n = g.node(i);
    if (n.op_type().empty())
      graph_error(node_label(n, static_cast<std::size_t>(i)) + " has no op_type" + in);
    for (const auto& o : n.output()) {
      if (!o.empty() && (inits.count(o) || inputs.count(o))) {
        std::string msg = node_label(n, static_cast<std::size_t>(i));
        msg += " output '" + o + "' has the name of a graph input or initializer" + in;
        graph_error(msg);
      }
    }
  }
  // Dependency order also rejects undefined inputs, duplicate producers and cycles.
  graph_topological_order(g, outer);

  name_set scope = outer;
  add_local_names(g, scope, true);
  for (int i = 0; i < g.node_size(); ++i) {
    validate_node_attributes(g.node(i), static_cast<std::size_t>(i), scope, base_dir, opset);
  }
  // A value may be listed as an output more than once (ONNX's checker and ONNX Runtime accept
  // it; each listing is one output of the model).
  for (const auto& o : g.output()) {
    if (o.name().empty())
      graph_error("graph output with an empty name" + in);
    if (!scope.count(o.name())) {
      graph_error("graph output '" + o.name() + "'" + in +
                  " is not produced by any node, graph input or initializer");
    }
  }
}

/// The main graph's declared types. Its inputs carry the type their data is fed as (ONNX
/// requires it there; subgraph inputs may leave it to inference); an input an initializer backs
/// (IR < 4) takes its type. No input, output or value_info declares element type 0 (UNDEFINED)
/// or a code past 26, the last ONNX defines: ONNX Runtime refuses both ("Invalid tensor data
/// type").
void check_declared_types(const ::onnx::GraphProto& g) {
  name_set inits;
  for (const auto& t : g.initializer())
    inits.insert(t.name());
  auto check = [](const ::onnx::ValueInfoProto& v, const std::string& what) {
    if (!v.type().has_tensor_type())
      return;
    const int t = v.type().tensor_type().elem_type();
    if (t == 0)
      graph_error(what + " declares element type 0 (UNDEFINED)");
    if (t < 0 || t > 26) {
      graph_error(what + " declares element type " + std::to_string(t) +
                  ", which ONNX does not define (its codes end at 26)");
    }
  };
  for (const auto& v : g.input()) {
    if (inits.count(v.name()))
      continue;
    if (v.type().value_case() == ::onnx::TypeProto::VALUE_NOT_SET)
      graph_error("graph input '" + v.name() + "' declares no type");
    check(v, "graph input '" + v.name() + "'");
  }
  for (const auto& v : g.output())
    check(v, "graph output '" + v.name() + "'");
  for (const auto& v : g.value_info())
    check(v, "the value_info of '" + v.name() + "'");
}

/// "tensor(float16)": ONNX's type string for a tensor element type ("" for one the linked
/// onnx 1.12 enum does not name).
std::string tensor_type_string(int elem_type) {
  if (!::onnx::TensorProto::DataType_IsValid(elem_type) || elem_type == 0)
    return {};
  return "tensor(" +
         lower(::onnx::TensorProto::DataType_Name(
             static_cast<::onnx::TensorProto::DataType>(elem_type))) +
         ")";
}

/// "float16": the name of an element type in messages.
std::string type_word(int elem_type) {
  const std::string s = tensor_type_string(elem_type);
  return s.empty() ? "element type " + std::to_string(elem_type) : s.substr(7, s.size() - 8);
}

/// The element type a "tensor(...)" string names, 0 for anything else.
int elem_type_of(const std::string& type_string) {
  if (!type_string.starts_with("tensor(") || !type_string.ends_with(")"))
    return 0;
  std::string name = type_string.substr(7, type_string.size() - 8);
  for (char& c : name)
    c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  ::onnx::TensorProto::DataType t{};
  return ::onnx::TensorProto::DataType_Parse(name, &t) ? static_cast<int>(t) : 0;
}

/// The element type of a Constant node's value, 0 when unknown.
int constant_elem_type(const ::onnx::NodeProto& n) {
  for (const auto& a : n.attribute()) {
    if (a.name() == "value")
      return a.t().data_type();
    if (a.name() == "value_float" || a.name() == "value_floats")
      return ::onnx::TensorProto::FLOAT;
    if (a.name() == "value_int" || a.name() == "value_ints")
      return ::onnx::TensorProto::INT64;
    if (a.name() == "value_string" || a.name() == "value_strings")
      return ::onnx::TensorProto::STRING;
  }
  return 0;
}

/// The element types the main graph's default-domain nodes receive, propagated from the graph
/// inputs, initializers and Constants through the schemas' type parameters, against those
/// schemas at the model's opset: two inputs bound to one type parameter must have one type, and
/// an input of a fixed type must have it. ONNX Runtime refuses such models ("Type parameter (T)
/// of Optype (BatchNormalization) bound to different types"); quark-cpp's runtime computes in
/// float32 what the model holds in float16, so it would calibrate them without a word. Only
/// types known this way are compared (values of other domains' nodes and of subgraphs are
/// skipped). Past the opsets the linked libonnx knows (1 to 17), only the bindings are checked,
/// against the newest schema it has: later versions widened the types a parameter allows and
/// turned fixed float types into parameters (DequantizeLinear-19's float16 scales), but kept
/// which inputs share a parameter; outputs then take a type only from a bound parameter or
/// Cast's `to`.
void check_type_bindings(const ::onnx::GraphProto& g, int opset) {
  if (opset <= 0)
    return;
  const bool bindings_only = opset > known_opset();
  const int schema_opset = std::min(opset, known_opset());
  std::unordered_map<std::string, int> types;
  std::unordered_map<std::string, std::size_t> producer;  // of the node outputs typed here
  for (const auto& t : g.initializer())
    types[t.name()] = t.data_type();
  for (const auto& t : g.sparse_initializer())
    types[t.values().name()] = t.values().data_type();
  for (const auto& v : g.input()) {
    if (v.type().has_tensor_type() && v.type().tensor_type().elem_type() != 0)
      types[v.name()] = v.type().tensor_type().elem_type();
  }
  for (const std::size_t index : graph_topological_order(g, {})) {
    const auto& n = g.node(static_cast<int>(index));
    if (!is_default_domain(n.domain()))
      continue;
    if (n.op_type() == "Constant") {
      if (n.output_size() == 1 && constant_elem_type(n) != 0)
        types[n.output(0)] = constant_elem_type(n);
      continue;
    }
    const ::onnx::OpSchema* schema =
        ::onnx::OpSchemaRegistry::Schema(n.op_type(), schema_opset, "");
    if (schema == nullptr)
      continue;
    std::map<std::string, const std::vector<std::string>*> params;  // -> the types allowed
    for (const auto& c : schema->typeConstraintParams())
      params.emplace(c.type_param_str, &c.allowed_type_strs);
    // A formal parameter: the i-th one, or the last when it is variadic and homogeneous.
    auto formal_of = [](const std::vector<::onnx::OpSchema::FormalParameter>& f,
                        int i) -> const ::onnx::OpSchema::FormalParameter* {
      const auto k = static_cast<std::size_t>(i);
      if (k < f.size() && f[k].GetOption() != ::onnx::OpSchema::Variadic)
        return &f[k];
      if (!f.empty() && k + 1 >= f.size() && f.back().GetOption() == ::onnx::OpSchema::Variadic &&
          f.back().GetIsHomogeneous())
        return &f.back();
      return nullptr;
    };
    std::map<std::string, std::pair<int, int>> bound;  // type parameter -> (type, input)
    for (int i = 0; i < n.input_size(); ++i) {
      const auto it = types.find(n.input(i));
      const auto* f = formal_of(schema->inputs(), i);
      if (n.input(i).empty() || it == types.end() || f == nullptr)
        continue;
      const std::string& want = f->GetTypeStr();
      const std::string have = tensor_type_string(it->second);
      if (have.empty())
        continue;
      auto input_label = [&](int k) {
        return "input #" + std::to_string(k) + " '" + n.input(k) + "' (" +
               type_word(types.at(n.input(k))) + ")";
      };
      const auto param = params.find(want);
      if (param == params.end()) {
        if (!bindings_only && want.starts_with("tensor(") && want != have) {
          throw frontend_error("quark.onnx.type", node_label(n, index) + ": " + input_label(i) +
                                                      ": " + n.op_type() + " at opset " +
                                                      std::to_string(opset) + " takes " + want +
                                                      " there");
        }
        continue;
      }
      const auto& allowed = *param->second;
      if (!bindings_only && !allowed.empty() &&
          std::find(allowed.begin(), allowed.end(), have) == allowed.end()) {
        std::string list;
        for (const auto& a : allowed)
          list += (list.empty() ? "" : ", ") + a;
        throw frontend_error("quark.onnx.type", node_label(n, index) + ": " + input_label(i) +
                                                    ": " + n.op_type() + " at opset " +
                                                    std::to_string(opset) + " takes " + list +
                                                    " there (type parameter " + want + ")");
      }
      const auto [b, fresh] = bound.emplace(want, std::pair{it->second, i});
      if (!fresh && b->second.first != it->second) {
        throw frontend_error("quark.onnx.type",
                             node_label(n, index) + ": " + input_label(b->second.second) + " and " +
                                 input_label(i) + " differ in type; " + n.op_type() + " at opset " +
                                 std::to_string(opset) + " binds both to its type parameter " +
                                 want);
      }
    }
    for (int o = 0; o < n.output_size(); ++o) {
      const auto* f = formal_of(schema->outputs(), o);
      if (n.output(o).empty() || f == nullptr)
        continue;
      const std::string& want = f->GetTypeStr();
      if (const auto b = bound.find(want); b != bound.end()) {
        types[n.output(o)] = b->second.first;
      } else if (bindings_only && n.op_type() != "Cast") {
        // a fixed or single-type output of the older schema may have become a parameter
      } else if (const auto param = params.find(want); param == params.end()) {
        if (elem_type_of(want) != 0)
          types[n.output(o)] = elem_type_of(want);
      } else if (param->second->size() == 1 && elem_type_of(param->second->front()) != 0) {
        types[n.output(o)] = elem_type_of(param->second->front());  // Shape's int64
      } else if (n.op_type() == "Cast" && o == 0) {
        for (const auto& a : n.attribute()) {
          if (a.name() == "to" && a.i() > 0 && a.i() <= std::numeric_limits<int>::max())
            types[n.output(o)] = static_cast<int>(a.i());
        }
      }
      if (types.count(n.output(o)))
        producer[n.output(o)] = index;
    }
  }
  // What the graph declares for the values its nodes make must be what they make: ONNX Runtime
  // refuses the model otherwise, and the quantized model would keep the declaration.
  auto check_declared = [&](const ::onnx::ValueInfoProto& v, const char* what) {
    const auto p = producer.find(v.name());
    if (p == producer.end() || !v.type().has_tensor_type())
      return;
    const int declared = v.type().tensor_type().elem_type();
    const int made = types.at(v.name());
    if (declared == 0 || declared == made || tensor_type_string(declared).empty())
      return;
    throw frontend_error("quark.onnx.type",
                         std::string(what) + " '" + v.name() + "' declares " + type_word(declared) +
                             ", but " + node_label(g.node(static_cast<int>(p->second)), p->second) +
                             " makes " + type_word(made));
  };
  for (const auto& v : g.output())
    check_declared(v, "graph output");
  for (const auto& v : g.value_info())
    check_declared(v, "the value_info of");
}

void collect_ops(const ::onnx::GraphProto& g, name_set& out) {
  for (const auto& n : g.node()) {
    out.insert(is_default_domain(n.domain()) ? n.op_type() : n.domain() + ":" + n.op_type());
    for_each_subgraph(n, [&](const ::onnx::GraphProto& sg) { collect_ops(sg, out); });
  }
}

void check_node_domains(const ::onnx::GraphProto& g, const name_set& domains) {
  for (int i = 0; i < g.node_size(); ++i) {
    const auto& n = g.node(i);
    const std::string d = is_default_domain(n.domain()) ? std::string() : n.domain();
    if (!domains.count(d)) {
      graph_error(node_label(n, static_cast<std::size_t>(i)) + " uses domain '" +
                  (d.empty() ? std::string("ai.onnx") : d) + "', which the model does not import");
    }
    for_each_subgraph(n, [&](const ::onnx::GraphProto& sg) { check_node_domains(sg, domains); });
  }
}

}  // namespace

::onnx::AttributeProto::AttributeType attribute_kind(const ::onnx::AttributeProto& a) {
  if (a.type() != A::UNDEFINED)
    return a.type();
  // Files from old exporters omit `type`: infer it from the one populated field.
  if (a.has_f())
    return A::FLOAT;
  if (a.has_i())
    return A::INT;
  if (a.has_s())
    return A::STRING;
  if (a.has_t())
    return A::TENSOR;
  if (a.has_g())
    return A::GRAPH;
  if (a.floats_size() > 0)
    return A::FLOATS;
  if (a.ints_size() > 0)
    return A::INTS;
  if (a.strings_size() > 0)
    return A::STRINGS;
  if (a.tensors_size() > 0)
    return A::TENSORS;
  if (a.graphs_size() > 0)
    return A::GRAPHS;
  return A::UNDEFINED;
}

std::set<std::string> node_implicit_inputs(const ::onnx::NodeProto& n) {
  name_set out;
  for_each_subgraph(n, [&](const ::onnx::GraphProto& sg) { free_names(sg, out); });
  return out;
}

value_users::value_users(const ::onnx::GraphProto& g) {
  for (int i = 0; i < g.node_size(); ++i) {
    const ::onnx::NodeProto& n = g.node(i);
    const auto k = static_cast<std::size_t>(i);
    for (const auto& o : n.output()) {
      if (!o.empty())
        producer_.try_emplace(o, k);
    }
    auto read = [&](const std::string& x) {
      auto& readers = consumers_[x];
      if (readers.empty() || readers.back() != k)
        readers.push_back(k);
    };
    for (const auto& x : n.input()) {
      if (!x.empty())
        read(x);
    }
    if (n.attribute_size() > 0) {
      for (const auto& x : node_implicit_inputs(n))
        read(x);
    }
  }
}

std::optional<std::size_t> value_users::producer(std::string_view name) const {
  auto it = producer_.find(name);
  return it == producer_.end() ? std::nullopt : std::optional<std::size_t>(it->second);
}

const std::vector<std::size_t>& value_users::consumers(std::string_view name) const {
  static const std::vector<std::size_t> none;
  auto it = consumers_.find(name);
  return it == consumers_.end() ? none : it->second;
}

void initializer_index::rebuild(const ::onnx::GraphProto& g) {
  index_.clear();
  size_ = g.initializer_size();
  for (int i = 0; i < size_; ++i)
    index_.try_emplace(g.initializer(i).name(), i);  // the first, as find_initializer
}

int initializer_index::find(const ::onnx::GraphProto& g, std::string_view name) {
  if (g.initializer_size() != size_)
    rebuild(g);
  auto it = index_.find(name);
  if (it != index_.end() && g.initializer(it->second).name() != name) {
    rebuild(g);  // an initializer renamed or moved
    it = index_.find(name);
  }
  return it == index_.end() ? -1 : it->second;
}

::onnx::TensorProto& initializer_index::get_or_add(::onnx::GraphProto& g, std::string_view name) {
  if (const int i = find(g, name); i >= 0)
    return *g.mutable_initializer(i);
  ::onnx::TensorProto& t = *g.add_initializer();
  t.set_name(std::string(name));
  index_.try_emplace(std::string(name), size_++);
  return t;
}

void initializer_index::add(::onnx::GraphProto& g, ::onnx::TensorProto&& t) {
  if (g.initializer_size() != size_)
    rebuild(g);
  index_.try_emplace(t.name(), size_++);
  *g.add_initializer() = std::move(t);
}

std::size_t remove_initializers(::onnx::ModelProto& p,
                                const std::set<std::string, std::less<>>& names) {
  auto* g = p.mutable_graph();
  std::set<std::string, std::less<>> gone;
  const std::size_t removed = erase_if(*g->mutable_initializer(), [&](const auto& t) {
    if (!names.contains(t.name()))
      return false;
    gone.insert(t.name());
    return true;
  });
  if (removed > 0 && p.ir_version() < 4)
    erase_if(*g->mutable_input(), [&](const auto& v) { return gone.contains(v.name()); });
  return removed;
}

int find_initializer(const ::onnx::GraphProto& g, std::string_view name) {
  for (int i = 0; i < g.initializer_size(); ++i) {
    if (g.initializer(i).name() == name)
      return i;
  }
  return -1;
}

std::string node_label(const ::onnx::NodeProto& n, std::size_t index) {
  std::string label = "node ";
  if (n.name().empty()) {
    label += '#';
    label += std::to_string(index);  // (not `"#" + to_string`: GCC 12 -Wrestrict false positive)
  } else {
    label += '\'';
    label += n.name();
    label += '\'';
  }
  label += " (";
  label += n.op_type();
  label += ')';
  return label;
}

std::vector<std::size_t> graph_topological_order(const ::onnx::GraphProto& g,
                                                 const name_set& outer) {
  const auto count = static_cast<std::size_t>(g.node_size());
  std::unordered_map<std::string, std::size_t> producer;
  for (std::size_t i = 0; i < count; ++i) {
    const auto& n = g.node(static_cast<int>(i));
    for (const auto& o : n.output()) {
      if (o.empty())
        continue;
      const auto [it, fresh] = producer.emplace(o, i);
      if (!fresh) {
        graph_error("tensor '" + o + "' is produced by both " +
                    node_label(g.node(static_cast<int>(it->second)), it->second) + " and " +
                    node_label(n, i));
      }
    }
  }
  name_set defined = outer;
  add_local_names(g, defined, false);

  std::vector<std::vector<std::size_t>> users(count);
  std::vector<std::size_t> pending(count, 0);
  for (std::size_t i = 0; i < count; ++i) {
    const auto& n = g.node(static_cast<int>(i));
    name_set deps(n.input().begin(), n.input().end());
    for_each_subgraph(n, [&](const ::onnx::GraphProto& sg) { free_names(sg, deps); });
    for (const auto& name : deps) {
      if (name.empty())
        continue;
      const auto it = producer.find(name);
      if (it != producer.end()) {
        users[it->second].push_back(i);
        ++pending[i];
      } else if (!defined.count(name)) {
        graph_error(node_label(n, i) + " input '" + name +
                    "' is not produced by any node, graph input or initializer");
      }
    }
  }
  std::priority_queue<std::size_t, std::vector<std::size_t>, std::greater<>> ready;
  for (std::size_t i = 0; i < count; ++i) {
    if (pending[i] == 0)
      ready.push(i);
  }
  std::vector<std::size_t> order;
  order.reserve(count);
  while (!ready.empty()) {
    const std::size_t i = ready.top();
    ready.pop();
    order.push_back(i);
    for (std::size_t u : users[i]) {
      if (--pending[u] == 0)
        ready.push(u);
    }
  }
  if (order.size() != count) {
    for (std::size_t i = 0; i < count; ++i) {
      if (pending[i] != 0) {
        graph_error("the graph has a cycle through " + node_label(g.node(static_cast<int>(i)), i));
      }
    }
  }
  return order;
}

void model::validate() const {
  const auto& p = proto_access::get(*this).proto;
  if (p.ir_version() <= 0) {
    graph_error("ir_version is missing or invalid (" + std::to_string(p.ir_version()) + ")");
  }
  name_set domains;
  int opset = 0;
  for (const auto& o : p.opset_import()) {
    const std::string d = is_default_domain(o.domain()) ? std::string() : o.domain();
    if (d.empty() && o.version() > 0 && o.version() <= 1000)
      opset = static_cast<int>(o.version());
    if (!domains.insert(d).second) {
      graph_error("opset_import lists domain '" + (d.empty() ? std::string("ai.onnx") : d) +
                  "' twice");
    }
    if (o.version() <= 0) {
      graph_error("opset_import version " + std::to_string(o.version()) + " for domain '" +
                  (d.empty() ? std::string("ai.onnx") : d) + "' is invalid");
    }
  }
  if (p.ir_version() >= 3 && domains.empty())
    graph_error("the model imports no opset");
  if (!p.has_graph())
    graph_error("the model has no graph");
  if (p.ir_version() >= 3)
    check_node_domains(p.graph(), domains);
  validate_graph(p.graph(), {}, proto_access::get(*this).base_dir, "", opset);
  check_declared_types(p.graph());
  check_type_bindings(p.graph(), opset);
}

std::vector<std::string> model::unsupported_ops(
    const std::set<std::string, std::less<>>& supported) const {
  name_set ops;
  collect_ops(proto_access::get(*this).proto.graph(), ops);
  std::vector<std::string> out;
  for (const auto& op : ops) {
    if (!supported.count(op))
      out.push_back(op);
  }
  return out;
}

void model::check_ops(const std::set<std::string, std::less<>>& supported) const {
  const auto missing = unsupported_ops(supported);
  if (missing.empty())
    return;
  std::string list;
  for (const auto& op : missing)
    list += (list.empty() ? "" : ", ") + op;
  // Name the first node of each missing op so the user can find it.
  std::string where;
  const auto& g = proto_access::get(*this).proto.graph();
  for (const auto& op : missing) {
    for (int i = 0; i < g.node_size(); ++i) {
      const auto& n = g.node(i);
      const std::string key =
          is_default_domain(n.domain()) ? n.op_type() : n.domain() + ":" + n.op_type();
      if (key == op) {
        where += (where.empty() ? "" : ", ") + node_label(n, static_cast<std::size_t>(i));
        break;
      }
    }
  }
  throw frontend_error(
      "quark.onnx.unsupported_op",
      "unsupported operators: " + list + (where.empty() ? "" : " (first use: " + where + ")"));
}

void check_runnable(const ::onnx::ModelProto& m) {
  for (const auto& o : m.opset_import()) {
    if (is_default_domain(o.domain()) && o.version() > newest_onnx_opset) {
      throw frontend_error("quark.onnx.opset", "the model imports operator set ai.onnx " +
                                                   std::to_string(o.version()) +
                                                   "; quark-cpp implements versions up to " +
                                                   std::to_string(newest_onnx_opset));
    }
  }
  if (m.graph().output_size() == 0)
    graph_error("the graph declares no outputs: there is nothing to run or quantize");
}

}  // namespace quark::onnx
