// SPDX-License-Identifier: MIT
// PRIVATE: model-local functions (ModelProto.functions, IR 8+) replaced by their bodies, as ONNX
// Runtime does before it runs a model. The runtime and the quantizer see plain operators then:
// the MatMul inside a function gets quantized like any other.
#pragma once

#include <cstddef>

#include <onnx/onnx_pb.h>

namespace quark::onnx {

/// Replaces every node of `m` (main graph and subgraphs, recursively) that calls one of `m`'s
/// functions by the function's nodes, then drops the functions. Values and nodes of a body get
/// fresh names prefixed with the calling node's name ("call/..."); formal inputs and outputs
/// become the call's (an omitted optional input becomes ""); attribute references take the
/// call's attribute, else the function's default (IR 9 attribute_proto), else are left out.
/// Calls inside a body are inlined too (recursion is an error). A function that imports an
/// operator set at a version other than the model's is refused: one graph runs one version.
/// Returns the number of calls inlined (0: `m` is unchanged, its functions kept).
/// Throws frontend_error "quark.onnx.function" naming the function and the culprit.
std::size_t inline_local_functions(::onnx::ModelProto& m);

}  // namespace quark::onnx
