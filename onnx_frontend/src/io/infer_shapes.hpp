// SPDX-License-Identifier: MIT
// PRIVATE: ONNX shape inference through the linked libonnx, guarded against its inference
// functions that index past a malformed node's shapes.
#pragma once

#include <onnx/onnx_pb.h>

namespace quark::onnx {

/// Replaces, once per process, the inference functions of the linked libonnx that read past a
/// malformed node's shapes with ones that check the shapes first and fail inference (an
/// InferenceError, which every caller of shape inference catches) instead of crashing the
/// process. libonnx 1.12's ConvTranspose reads dim(1) of its weight and as many kernel sizes as
/// the input has spatial dims, whatever the weight's rank: a scalar weight crashed
/// quark_quantize (found by bench/onnx/ort_differential_sweep.py --node-edits, session 54).
void guard_libonnx_inference();

/// ::onnx::shape_inference::InferShapes on `m` after guard_libonnx_inference().
void infer_shapes(::onnx::ModelProto& m);

}  // namespace quark::onnx
