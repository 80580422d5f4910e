// SPDX-License-Identifier: MIT
// PRIVATE: TensorProto -> tensor for the runtime, and GraphProto -> rt::graph.
#pragma once

#include <filesystem>

#include <onnx/onnx_pb.h>

#include <quark/onnx/tensor.hpp>

#include "runtime/graph.hpp"

namespace quark::onnx::rt {

/// Decodes a TensorProto (float16/bfloat16 are widened to float32: the runtime computes in
/// float32).
tensor decode_tensor(const ::onnx::TensorProto& tp, const std::filesystem::path& base_dir);

/// Builds the runtime graph of `g`. `opset` is the default-domain opset of the model. Names of
/// values visible from enclosing scopes are in `outer` (empty for the main graph). Unsupported
/// ops are collected into `report` instead of failing immediately.
std::shared_ptr<graph> build_graph(const ::onnx::GraphProto& g, int opset,
                                   const std::filesystem::path& base_dir,
                                   const std::vector<std::string>& outer, build_report& report);

/// Widens float16/bfloat16 tensors to float32 (the runtime's compute type); others unchanged.
tensor widen_half(tensor t);

}  // namespace quark::onnx::rt
