// SPDX-License-Identifier: MIT
// PRIVATE: the preprocessing steps of seed 000's category 1 that Quark runs before its graph
// optimizations, in its order (quark-spec §9.1):
//   ConvertOpsetVersion -> (ConvertFP16ToFP32, quantize.cpp) -> ConvertNCHWToNHWC ->
//   RemoveInputInit -> CopySharedInit
//   -> CopyBiasInit -> [optimize_graph: constant folding, ...] -> FuseInstanceNorm -> FuseL2Norm
//   -> FuseLayerNorm -> FuseGelu -> [BatchNormalization folding, the Convert* rewrites].
// SkipPreprocess turns all of them off (read_pass_options). Every fusion replaces a chain of
// nodes that computes the fused operator exactly in real arithmetic (in float32 the two differ by
// rounding), and only when no value inside the chain is read elsewhere.
//
//     auto notes = qz::preprocess_model(m, o);   // m after constants_to_initializers()
//     ... qz::optimize_graph(m, o) ...
//     auto more = qz::fuse_patterns(m, o);
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <quark/onnx/model.hpp>

#include "quantizer/graph_passes.hpp"

namespace quark::onnx::qz {

/// ConvertOpsetVersion, RemoveInputInit, CopySharedInit and CopyBiasInit as `o` asks. Returns
/// one note per step that changed something. Throws config_error "quark.config.opset" when the
/// model cannot be converted to the requested opset (naming the reason).
std::vector<std::string> preprocess_model(model& m, const graph_pass_options& o);

/// The Fuse* rewrites `o` enables. Returns notes ("FuseLayerNorm: 5 fused", or why a pattern
/// found was left as it is: the opset the fused operator needs).
std::vector<std::string> fuse_patterns(model& m, const graph_pass_options& o);

/// Converts the default-domain opset of `m` to `target` (ONNX's version converter; above the
/// newest opset it knows, quark-cpp's own upgrade). Returns a note.
std::string convert_opset_version(model& m, std::int64_t target);

/// ConvertNCHWToNHWC (Quark's convert_nchw_to_nhwc): graph inputs that name an initializer are
/// removed first; every other 4-D graph input with static C, H and W becomes [N, H, W, C] and
/// feeds the graph through Transpose(perm 0, 3, 1, 2); every such graph output is followed by
/// Transpose(perm 0, 2, 3, 1), whose output `<out>_transpose` becomes the graph output. Others
/// are left as they are (a note lists them). Returns the notes.
std::vector<std::string> convert_nchw_to_nhwc(model& m);

/// Removes the graph inputs that name an initializer; returns how many.
std::size_t remove_input_initializers(model& m);

/// Gives every reader of a shared initializer among the nodes of `op_types` (all op types when
/// empty) its own copy, except the first reader in node order, which keeps the original.
/// `bias_only`: only the bias input (slot 2) of Conv / ConvTranspose / Gemm. Returns the number
/// of copies made.
std::size_t copy_shared_initializers(model& m, const std::vector<std::string>& op_types,
                                     bool bias_only);

}  // namespace quark::onnx::qz
