// SPDX-License-Identifier: MIT
// PRIVATE: the category-1 graph conversions of seed 000 that run before calibration, and the
// FoldRelu fold that runs after Q/DQ insertion.
//
// Before calibration (after optimize_graph), each on the nodes `convert(i)` allows (the quantizer
// passes "would the node this one becomes be quantized", Quark's should_quantize_node):
//   ConvertBNToConv                  BatchNormalization on a rank-3/4 input -> depthwise Conv with
//                                    a 1 (x 1) kernel: w = scale / sqrt(var + epsilon),
//                                    b = bias - mean * w (exact in real arithmetic)
//   ConvertReduceMeanToGlobalAvgPool ReduceMean over axes {2, 3} of a rank-4 input (or {2} of a
//                                    rank-3 one) -> GlobalAveragePool (+ Squeeze if keepdims = 0)
//   SplitLargeKernelPool             GlobalAveragePool over more than 512 elements ->
//                                    AveragePool (kernel = stride = a factor of H and of W) then
//                                    GlobalAveragePool (exact: a mean of equal-sized block means)
//   ConvertSplitToSlice              Split -> one Slice per output (exact)
//   ConvertClipToRelu                Clip with min exactly 0 and no finite max -> Relu (exact;
//                                    a Clip with a finite max, e.g. Clip(0, 6), is kept, where
//                                    Quark's code drops the max)
// Shapes come from ONNX shape inference on a copy of the model; a node whose shape is needed and
// unknown is left as it is.
//
// After Q/DQ insertion, FoldRelu: a Relu (or Clip with min 0 and no effective max) whose output
// is read only by QuantizeLinear nodes that already clamp every negative value to zero (zero
// point = the type's lowest code, i.e. an asymmetric range starting at 0) is removed; its
// producer writes the Relu's output directly. The result is bit-identical to the graph before.
//
//     auto notes = qz::convert_graph(m, opts, [&](std::size_t i) { return quantized[i]; });
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <quark/onnx/model.hpp>

namespace quark::onnx::qz {

struct graph_pass_options;

/// What ONNX shape inference on a copy of `m` knows of its values (graph inputs, outputs,
/// value_info and initializers): dims (-1 unknown) and element types (TensorProto codes).
struct inferred_values {
  std::map<std::string, std::vector<std::int64_t>> shape;
  std::map<std::string, int> elem;
};
inferred_values infer_values(const model& m);

/// infer_values(m).shape.
std::map<std::string, std::vector<std::int64_t>> inferred_shapes(const model& m);

/// The op type node `op_type` takes under the conversions `o` enables ("" if none applies).
std::string converted_op_type(const std::string& op_type, const graph_pass_options& o);

/// Applies the enabled pre-calibration conversions to the nodes for which `convert(index)` is
/// true (indices into the node list as it is on entry). Returns one note per kind of rewrite.
std::vector<std::string> convert_graph(model& m, const graph_pass_options& o,
                                       const std::function<bool(std::size_t)>& convert);

/// FoldRelu (see above). Returns the tensors that are no longer quantized (the Relu inputs whose
/// Q/DQ pair went with the Relu) and counts the folded nodes in `folded`.
std::set<std::string> fold_relu(model& m, std::size_t& folded);

}  // namespace quark::onnx::qz
