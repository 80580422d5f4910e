// SPDX-License-Identifier: MIT
// PRIVATE: graph walking shared by model.cpp and validate.cpp (and usable by the runtime).
#pragma once

#include <cstddef>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <onnx/onnx_pb.h>

namespace quark::onnx {

/// The attribute's type; for files that leave `type` unset, inferred from the populated field.
::onnx::AttributeProto::AttributeType attribute_kind(const ::onnx::AttributeProto& a);

/// Index of the initializer `name` of `g`, or -1.
int find_initializer(const ::onnx::GraphProto& g, std::string_view name);

/// "node 'conv1' (Conv)", or "node #3 (Conv)" for an unnamed node.
std::string node_label(const ::onnx::NodeProto& n, std::size_t index);

/// Names the subgraphs of `n` (If/Loop/Scan bodies) read from enclosing scopes; empty for nodes
/// without graph attributes.
std::set<std::string> node_implicit_inputs(const ::onnx::NodeProto& n);

/// Node indices of `g` in dependency order (stable: file order where free). `outer` holds the
/// names visible from enclosing graphs. Throws frontend_error("quark.onnx.graph") naming the
/// node for an undefined input or a cycle.
std::vector<std::size_t> graph_topological_order(const ::onnx::GraphProto& g,
                                                 const std::set<std::string>& outer);

}  // namespace quark::onnx
