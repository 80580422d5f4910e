// SPDX-License-Identifier: MIT
// PRIVATE: raising the default-domain opset of a model when a quantized type needs it
// (QuantizeLinear: 10; per-axis: 13; int16/uint16: 21). Operators whose signature changed on the
// way are rewritten (attributes that became inputs: Clip, Slice, Squeeze, Unsqueeze, Split, Pad,
// Reduce*; Softmax / LogSoftmax / Hardmax on a last axis keep it, on another axis (or one of
// unknown rank) become Flatten -> the operator -> Reshape, the old 2-D coercion), inside If / Loop
// / Scan bodies too; any other incompatible operator raises frontend_error "quark.quantize.opset"
// naming the node.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <onnx/onnx_pb.h>

namespace quark::onnx::qz {

/// Raises the default-domain opset of `m` from `from` to at least `to` (no-op if already there).
/// `ranks` gives the rank of the values seen at calibration (a Softmax whose axis is the last one
/// keeps its form). Returns notes.
std::vector<std::string> upgrade_opset(::onnx::ModelProto& m, std::int64_t from, std::int64_t to,
                                       const std::map<std::string, std::size_t>& ranks);

}  // namespace quark::onnx::qz
