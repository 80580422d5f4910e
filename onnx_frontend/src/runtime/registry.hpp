// SPDX-License-Identifier: MIT
// The operator registry: op type (default ONNX domain, else "domain:op") -> kernel. Each op
// family registers its kernels from its own source file; find_kernel returns nullptr for unknown
// ops so the graph builder can list every unsupported op of a model at once.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/graph.hpp"

namespace quark::onnx::rt {

using registry_map = std::map<std::string, kernel_fn, std::less<>>;

void register_elementwise(registry_map& r);
void register_linalg(registry_map& r);
void register_conv(registry_map& r);
void register_pool(registry_map& r);
void register_norm(registry_map& r);
void register_reduce(registry_map& r);
void register_shape_ops(registry_map& r);
void register_index_ops(registry_map& r);  ///< ArgMax, TopK, GatherElements, Scatter*, ...
void register_misc_ops(registry_map& r);   ///< Dropout, Mod, Mean, IsInf, trigonometry, ...
void register_resize(registry_map& r);     ///< Resize, Upsample, GridSample
void register_einsum(registry_map& r);
void register_detection(registry_map& r);  ///< NonMaxSuppression, RoiAlign
void register_signal(registry_map& r);     ///< DFT, STFT, window functions, MelWeightMatrix
void register_loss(registry_map& r);       ///< NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss
void register_quant(registry_map& r);
void register_integer(registry_map& r);  ///< DynamicQuantizeLinear, MatMulInteger, ConvInteger
void register_rnn(registry_map& r);
void register_control(registry_map& r);
void register_quark_ops(registry_map& r);  ///< keys "com.amd.quark:<op>"
void register_contrib(registry_map& r);    ///< keys "com.microsoft:<op>": MatMulNBits

/// The kernel of `op` in the default domain ("com.amd.quark:<op>" for Quark's custom ops,
/// "com.microsoft:<op>" for ONNX Runtime's contrib ops), or nullptr.
kernel_fn find_kernel(std::string_view op);
std::vector<std::string> registered_ops();

}  // namespace quark::onnx::rt
