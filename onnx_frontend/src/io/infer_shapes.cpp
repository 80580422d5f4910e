// SPDX-License-Identifier: MIT
// Guarded ONNX shape inference (see infer_shapes.hpp).
#include "io/infer_shapes.hpp"

#include <mutex>
#include <set>

#include <onnx/defs/schema.h>
#include <onnx/defs/shape_inference.h>
#include <onnx/shape_inference/implementation.h>

// Outside quark::onnx: fail_shape_inference names ONNX_NAMESPACE (onnx), which quark::onnx hides.
namespace {

/// The rank of a tensor type with a shape, else -1.
int known_rank(const ::onnx::TypeProto* t) {
  if (t == nullptr || !t->has_tensor_type() || !t->tensor_type().has_shape())
    return -1;
  return t->tensor_type().shape().dim_size();
}

/// ConvTranspose's weight is (C, M / group, k1, ..., kn) for an input (N, C, d1, ..., dn): at
/// least 3 dims, as many as the input's.
void check_conv_transpose_ranks(::onnx::InferenceContext& ctx) {
  if (ctx.getNumInputs() < 2)
    return;
  const int x = known_rank(ctx.getInputType(0));
  const int w = known_rank(ctx.getInputType(1));
  if (w >= 0 && w < 3)
    fail_shape_inference("ConvTranspose's weight has rank ", w, "; it needs at least 3");
  if (w >= 0 && x >= 0 && w != x)
    fail_shape_inference("ConvTranspose's weight has rank ", w, ", its input ", x);
}

}  // namespace

namespace quark::onnx {

void guard_libonnx_inference() {
  static std::once_flag once;
  std::call_once(once, [] {
    std::set<const ::onnx::OpSchema*> done;
    for (int version = 1; version <= 17; ++version) {
      const auto* s = ::onnx::OpSchemaRegistry::Schema("ConvTranspose", version, "");
      if (s == nullptr || !done.insert(s).second)
        continue;
      // The registry owns its schemas as mutable objects and hands them out const.
      auto* schema = const_cast<::onnx::OpSchema*>(s);
      auto original = schema->GetTypeAndShapeInferenceFunction();
      schema->TypeAndShapeInferenceFunction([original](::onnx::InferenceContext& ctx) {
        check_conv_transpose_ranks(ctx);
        if (original)
          original(ctx);
      });
    }
  });
}

void infer_shapes(::onnx::ModelProto& m) {
  guard_libonnx_inference();
  ::onnx::shape_inference::InferShapes(m);
}

}  // namespace quark::onnx
