// SPDX-License-Identifier: MIT
// PRIVATE: the quantizer's block-format pieces (BFP16, MX4/6/9, OCP MX specs): the fused
// com.amd.quark node that replaces a Q/DQ pair (quark-spec §7.5) and the block axis it gets,
// refined per consumer by RefineBlockAxis (§7.7).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <onnx/onnx_pb.h>

#include <quark/onnx/model.hpp>

#include "quantizer/plan.hpp"

namespace quark::onnx::qz {

/// The opset domain and version of the fused ops.
inline constexpr const char* block_domain = "com.amd.quark";
inline constexpr std::int64_t block_domain_version = 1;

/// BFPQuantizeDequantize / MXQuantizeDequantize(in) -> out with every attribute of `b` and `axis`.
::onnx::NodeProto make_block_node(const block_op& b, const std::string& name, const std::string& in,
                                  const std::string& out, std::int64_t axis);

/// The block axis of the fused node on `tensor` as read by the nodes `readers` (indices into
/// `nodes`): an explicit spec axis wins; else, with RefineBlockAxis, the first reader whose
/// reduction axis §7.7 fixes (MatMul, Gemm, Softmax) decides, and a MatMul output follows its A
/// input (-1); else 1. `rank` is the tensor's rank when known (initializers): rank <= 1 gives 0,
/// and MatMul axes on initializers are positive.
std::int64_t block_axis(const model& m, const std::vector<node_info>& nodes,
                        const std::string& tensor, const std::vector<std::size_t>& readers,
                        const tspec& spec, bool refine, std::optional<std::size_t> rank);

}  // namespace quark::onnx::qz
