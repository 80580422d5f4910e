// SPDX-License-Identifier: MIT
// PRIVATE: graph rewrites around quantization.
//
// Before calibration (Quark's OptimizeModel / FoldBatchNorm, i.e. what ONNX Runtime's basic-level
// optimizer does that matters for quantization): constant folding (evaluated by quark-cpp's
// runtime), Identity removal, BatchNormalization folded
// into the Conv / ConvTranspose / Gemm before it (or into each Conv / ConvTranspose / Gemm
// producer of a Concat on the channel axis), Conv / ConvTranspose followed by a Mul / Add with a
// constant per-channel operand folded into the weight / bias. Each rewrite is exact in real
// arithmetic; in float32 it differs from the original graph by rounding only.
//
// After Q/DQ insertion (category 3 of the extra options): the Q/DQ pair between a producer and a
// consumer of the listed op types is removed, so the consumer reads the producer's float output
// (RemoveQDQConvRelu and friends). The consumer's own output keeps its calibrated parameters.
//
//     qz::graph_pass_options o = qz::read_pass_options(cfg);
//     auto notes = qz::optimize_graph(m, o);       // m after constants_to_initializers()
//     ... calibrate, insert Q/DQ ...
//     auto gone = qz::remove_qdq_pairs(m, o);      // tensors that are no longer quantized
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <quark/onnx/model.hpp>

#include "quantizer/simplify.hpp"

namespace quark::onnx {
struct qconfig;
}  // namespace quark::onnx

namespace quark::onnx::qz {

struct graph_pass_options {
  // Before calibration: preprocess.hpp (SkipPreprocess turns every pass below off).
  bool skip = false;                  ///< SkipPreprocess
  std::optional<std::int64_t> opset;  ///< ConvertOpsetVersion
  bool fp16_to_fp32 = false;          ///< ConvertFP16ToFP32
  bool nchw_to_nhwc = false;          ///< ConvertNCHWToNHWC
  bool remove_input_init = true;      ///< RemoveInputInit
  /// SimplifyModel (default true; off with SkipPreprocess or UseMatMulNBits, as in Quark) with
  /// SimplifyModelOptions; after RemoveInputInit (simplify.hpp).
  std::optional<simplify_options> simplify;
  /// CopySharedInit (empty: every op type); CopyBiasInit (only when activations and weights are
  /// 8- or 16-bit integers, else nullopt).
  std::optional<std::vector<std::string>> copy_shared, copy_bias;
  bool fuse_instance_norm = true;  ///< FuseInstanceNorm
  bool fuse_l2_norm = true;        ///< FuseL2Norm
  bool fuse_gelu = true;           ///< FuseGelu
  bool fuse_layer_norm = true;     ///< FuseLayerNorm
  // Before calibration.
  bool fold_constants = true;    ///< OptimizeModel: nodes whose inputs are all constant
  bool remove_identity = true;   ///< OptimizeModel
  bool fuse_conv_affine = true;  ///< OptimizeModel: Conv + Mul / Add with constant operands
  bool fold_batch_norm = true;   ///< FoldBatchNorm (default: OptimizeModel)
  // Category-1 conversions (conversions.hpp), after the folds.
  bool clip_to_relu = false;             ///< ConvertClipToRelu
  bool bn_to_conv = false;               ///< ConvertBNToConv (remaining BatchNormalization)
  bool split_to_slice = false;           ///< ConvertSplitToSlice
  bool reduce_mean_to_gap = false;       ///< ConvertReduceMeanToGlobalAvgPool
  bool split_large_kernel_pool = false;  ///< SplitLargeKernelPool
  // After Q/DQ insertion.
  bool fold_relu = false;  ///< FoldRelu (conversions.hpp)
  // After Q/DQ insertion: (producer op type, consumer op type) pairs whose Q/DQ is removed.
  std::set<std::pair<std::string, std::string>> remove_qdq_between;
  /// RemoveFusedQDQ: the fused BFP/MX nodes between those op types are removed as well.
  bool remove_fused = false;
};

/// The effective pass options of `cfg` (extra options OptimizeModel, FoldBatchNorm,
/// ConvertClipToRelu, ConvertBNToConv, ConvertSplitToSlice, ConvertReduceMeanToGlobalAvgPool,
/// SplitLargeKernelPool, FoldRelu, RemoveQDQConv*, RemoveQDQMulAdd, RemoveQDQInstanceNorm,
/// RemoveQDQBetweenOps, RemoveFusedQDQ with their documented defaults).
graph_pass_options read_pass_options(const qconfig& cfg);

/// Constant folding (OptimizeModel's first step, SimplifyModel's too): every node whose inputs
/// are all initializers is run once in quark-cpp's runtime and replaced by initializers holding
/// its outputs (nodes the runtime cannot run stay). The folded nodes' inputs go into `retired`.
/// Returns how many nodes were folded.
int fold_constant_nodes(model& m, std::set<std::string>& retired);

/// Applies the pre-calibration rewrites to `m` (constants already initializers). Returns one
/// note per kind of rewrite done ("folded 3 BatchNormalization", ...).
std::vector<std::string> optimize_graph(model& m, const graph_pass_options& o);

/// Removes the QuantizeLinear / DequantizeLinear pairs (and, with `o.remove_fused`, the fused
/// BFPQuantizeDequantize / MXQuantizeDequantize nodes) between the producer / consumer op types
/// of `o.remove_qdq_between`, and the scale / zero-point initializers left unused. Returns the
/// activations that lost every Q/DQ pair (no longer quantized).
std::set<std::string> remove_qdq_pairs(model& m, const graph_pass_options& o);

/// What remove_bf16_casts removed.
struct bf16_cast_removal {
  std::size_t activations = 0;  ///< Cast(bfloat16) -> Cast(float) pairs after a node
  std::size_t weights = 0;      ///< pairs on an initializer, now a float32 one of bfloat16 values
  std::size_t outputs = 0;      ///< pairs before a graph output
};

/// EnableVaimlBF16 (docs/config.md §7.6; Quark's remove_bf16_cast), on the quantized graph: a
/// Cast(to = bfloat16) -> Cast(to = float) pair that is the only reader of a node's output is
/// removed (its readers read that output); one on a float initializer becomes a float32
/// initializer `<name>_bf16` holding the values rounded to bfloat16 (half to even); one before a
/// graph output is removed, the node writing the output directly. Values read by an If / Loop /
/// Scan body are left as they are.
bf16_cast_removal remove_bf16_casts(model& m);

}  // namespace quark::onnx::qz
