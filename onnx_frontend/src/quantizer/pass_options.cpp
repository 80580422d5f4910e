// SPDX-License-Identifier: MIT
// qconfig -> graph_pass_options (its own translation unit: config.hpp and model.hpp are kept
// apart, as in plan.cpp).
#include <quark/onnx/config.hpp>

#include "quantizer/graph_passes.hpp"

namespace quark::onnx::qz {

graph_pass_options read_pass_options(const qconfig& cfg) {
  const option_map eff = cfg.effective_options();
  auto get_bool = [&](const char* k, bool dflt) {
    const option_value* v = eff.find(k);
    return v != nullptr && v->is_bool() ? v->as_bool() : dflt;
  };
  graph_pass_options o;
  const bool optimize = get_bool("OptimizeModel", true);
  o.fold_constants = optimize;
  o.remove_identity = optimize;
  o.fuse_conv_affine = optimize;
  o.fold_batch_norm = get_bool("FoldBatchNorm", optimize);
  // Category 1 (seed 000; effective_options() gives ConvertBNToConv, ConvertSplitToSlice,
  // ConvertReduceMeanToGlobalAvgPool and SplitLargeKernelPool their context default: true in
  // the NPU-CNN, NPU-transformer and extended-QDQ flows).
  o.bn_to_conv = get_bool("ConvertBNToConv", false);
  o.clip_to_relu = get_bool("ConvertClipToRelu", false);
  o.split_to_slice = get_bool("ConvertSplitToSlice", false);
  o.reduce_mean_to_gap = get_bool("ConvertReduceMeanToGlobalAvgPool", false);
  o.split_large_kernel_pool = get_bool("SplitLargeKernelPool", false);
  o.fold_relu = get_bool("FoldRelu", false);
  // Seed 000 category 3: QDQ between these producers and consumers is removed.
  auto pairs = [&](const char* key, bool dflt, std::initializer_list<const char*> producers,
                   std::initializer_list<const char*> consumers) {
    if (!get_bool(key, dflt))
      return;
    for (const char* p : producers) {
      for (const char* c : consumers)
        o.remove_qdq_between.emplace(p, c);
    }
  };
  pairs("RemoveQDQConvClip", true, {"Conv", "Add", "Gemm"}, {"Clip"});
  pairs("RemoveQDQConvRelu", true, {"Conv", "Add", "Gemm"}, {"Relu"});
  pairs("RemoveQDQConvLeakyRelu", true, {"Conv", "Add", "Gemm"}, {"LeakyRelu"});
  pairs("RemoveQDQConvPRelu", true, {"Conv", "Add", "Gemm"}, {"PRelu"});
  pairs("RemoveQDQConvGelu", false, {"Conv", "Add", "Gemm"}, {"Gelu"});
  pairs("RemoveQDQMulAdd", false, {"Mul"}, {"Add"});
  pairs("RemoveQDQInstanceNorm", false, {"InstanceNormalization"}, {"Relu", "LeakyRelu", "PRelu"});
  if (const option_value* v = eff.find("RemoveQDQBetweenOps"); v != nullptr && v->is_array()) {
    for (const auto& pair : v->as_array()) {
      if (pair.is_array() && pair.as_array().size() == 2 && pair.as_array()[0].is_string() &&
          pair.as_array()[1].is_string()) {
        o.remove_qdq_between.emplace(pair.as_array()[0].as_string(),
                                     pair.as_array()[1].as_string());
      }
    }
  }
  o.remove_fused = get_bool("RemoveFusedQDQ", false);
  return o;
}

}  // namespace quark::onnx::qz
