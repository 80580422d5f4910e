// SPDX-License-Identifier: MIT
// The com.amd.quark block ops (BFPQuantizeDequantize, MXQuantizeDequantize) on float32 tensors,
// as the runtime's kernels run them, for the rest of the library (AdaQuant's weight chain).
// quark/block/quark_ops.hpp instantiates its kernels for every element format, block size and
// rounding mode; calling it from one translation unit (ops_quark.cpp) compiles that set once
// (algo_finetune.cpp compiled it a second time: 56 s of GCC, 139 s of Clang ASan + UBSan).
#pragma once

#include <cstdint>
#include <span>

#include <quark/block/quark_ops.hpp>

namespace quark::onnx::rt {

/// quark::bfp_quantize_dequantize on float32 (validates `a`; throws quark::invalid_argument).
void bfp_quantize_dequantize_f32(const quark::bfp_op_attributes& a, std::span<const float> in,
                                 std::span<const std::int64_t> shape, std::span<float> out);

/// quark::mx_quantize_dequantize on float32 (validates `a`; throws quark::invalid_argument).
void mx_quantize_dequantize_f32(const quark::mx_op_attributes& a, std::span<const float> in,
                                std::span<const std::int64_t> shape, std::span<float> out);

}  // namespace quark::onnx::rt
