// SPDX-License-Identifier: MIT
// qconfig -> graph_pass_options (its own translation unit: config.hpp and model.hpp are kept
// apart, as in plan.cpp).
#include <quark/onnx/config.hpp>

#include "quantizer/graph_passes.hpp"

namespace quark::onnx::qz {

namespace {

/// An 8- or 16-bit integer spec (CopyBiasInit acts only when activations and weights use one).
bool int8_or_int16(const std::optional<tensor_spec>& s) {
  if (!s)
    return false;
  switch (s->dtype) {
    case dtype_id::int8:
    case dtype_id::uint8:
    case dtype_id::int16:
    case dtype_id::uint16:
      return !s->is_block();
    default:
      return false;
  }
}

std::optional<std::vector<std::string>> op_type_list(const option_map& eff, const char* key) {
  const option_value* v = eff.find(key);
  if (v == nullptr || v->is_null())
    return std::nullopt;
  std::vector<std::string> out;
  for (const auto& x : v->as_array())
    out.push_back(x.as_string());
  return out;
}

/// SkipPreprocess, ConvertOpsetVersion, ConvertFP16ToFP32, ConvertNCHWToNHWC, RemoveInputInit,
/// CopySharedInit, CopyBiasInit and Fuse* (preprocess.hpp).
void read_preprocess_options(const qconfig& cfg, const option_map& eff, graph_pass_options& o) {
  auto get_bool = [&](const char* k, bool dflt) {
    const option_value* v = eff.find(k);
    return v != nullptr && v->is_bool() ? v->as_bool() : dflt;
  };
  o.skip = get_bool("SkipPreprocess", false);
  if (const option_value* v = eff.find("ConvertOpsetVersion"); v != nullptr && v->is_int())
    o.opset = v->as_int();
  o.fp16_to_fp32 = get_bool("ConvertFP16ToFP32", false);
  o.nchw_to_nhwc = get_bool("ConvertNCHWToNHWC", false);
  if (o.skip && (o.opset || o.fp16_to_fp32 || o.nchw_to_nhwc)) {
    throw config_error("quark.config.conflict",
                       std::string("SkipPreprocess = true skips every preprocessing step, but ") +
                           (o.opset          ? "ConvertOpsetVersion"
                            : o.fp16_to_fp32 ? "ConvertFP16ToFP32"
                                             : "ConvertNCHWToNHWC") +
                           " asks for one; drop one of the two");
  }
  o.remove_input_init = get_bool("RemoveInputInit", true);
  if (get_bool("SimplifyModel", true) && !o.skip && !get_bool("UseMatMulNBits", false)) {
    const option_value* v = eff.find("SimplifyModelOptions");
    o.simplify = read_simplify_options(v != nullptr ? *v : option_value());
  }
  o.copy_shared = op_type_list(eff, "CopySharedInit");
  const layer_config& g = cfg.global_config;
  if (int8_or_int16(g.input_tensors) && int8_or_int16(g.weight))
    o.copy_bias = op_type_list(eff, "CopyBiasInit");
  o.fuse_instance_norm = get_bool("FuseInstanceNorm", true);
  o.fuse_l2_norm = get_bool("FuseL2Norm", true);
  o.fuse_gelu = get_bool("FuseGelu", true);
  o.fuse_layer_norm = get_bool("FuseLayerNorm", true);
}

}  // namespace

graph_pass_options read_pass_options(const qconfig& cfg) {
  const option_map eff = cfg.effective_options();
  auto get_bool = [&](const char* k, bool dflt) {
    const option_value* v = eff.find(k);
    return v != nullptr && v->is_bool() ? v->as_bool() : dflt;
  };
  graph_pass_options o;
  read_preprocess_options(cfg, eff, o);
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
  if (o.skip) {
    o.remove_input_init = false;
    o.copy_shared = o.copy_bias = std::nullopt;
    o.fuse_instance_norm = o.fuse_l2_norm = o.fuse_gelu = o.fuse_layer_norm = false;
    o.fold_constants = o.remove_identity = o.fuse_conv_affine = o.fold_batch_norm = false;
    o.bn_to_conv = o.clip_to_relu = o.split_to_slice = o.reduce_mean_to_gap = false;
    o.split_large_kernel_pool = false;
  }
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
