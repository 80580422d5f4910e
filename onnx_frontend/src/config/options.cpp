// SPDX-License-Identifier: MIT
// The extra_options registry (every key of seed 000 plus the keys quark-spec.md names), the value
// checks per key, and option_map.
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <quark/onnx/options.hpp>

#include "config/text.hpp"

namespace quark::onnx {

namespace {

using cat = option_category;
using ty = option_type;

option_info fixed(std::string_view name, cat c, ty t, bool nullable, option_value def,
                  std::string_view default_doc, std::string_view doc) {
  return option_info{name,
                     c,
                     t,
                     nullable,
                     option_default::fixed,
                     std::move(def),
                     default_doc,
                     option_support::implemented,
                     option_value{},
                     doc};
}

option_info context(std::string_view name, cat c, ty t, bool nullable, std::string_view default_doc,
                    std::string_view doc) {
  return option_info{name,
                     c,
                     t,
                     nullable,
                     option_default::context,
                     option_value{},
                     default_doc,
                     option_support::implemented,
                     option_value{},
                     doc};
}

/// A key quark-cpp does not implement yet: only `inert` is accepted.
option_info todo(std::string_view name, cat c, ty t, bool nullable, option_value def,
                 std::string_view default_doc, option_value inert, std::string_view doc) {
  return option_info{name,
                     c,
                     t,
                     nullable,
                     option_default::fixed,
                     std::move(def),
                     default_doc,
                     option_support::not_implemented,
                     std::move(inert),
                     doc};
}

option_value strings(std::initializer_list<const char*> items) {
  option_value::array_type a;
  for (const char* s : items)
    a.emplace_back(s);
  return option_value(std::move(a));
}

std::vector<option_info> build_registry() {
  const auto B = ty::boolean;
  const auto I = ty::integer;
  const auto N = ty::number;
  const auto S = ty::string;
  const auto SL = ty::string_list;
  const bool nul = true;
  const bool nonnull = false;
  std::vector<option_info> r;
  // -- seed 000, in its order ------------------------------------------------------------------
  r.push_back(todo("PreprocessYAML", cat::preprocessing, S, nul, nullptr, "None", nullptr,
                   "Preprocess the graph with a Shapeshifter YAML file or a named recipe."));
  r.push_back(fixed("SkipPreprocess", cat::preprocessing, B, nonnull, false, "False",
                    "Skip every preprocessing graph rewrite (initializer handling, fusions, "
                    "folding, the Convert* rewrites)."));
  r.push_back(fixed("OpTypesToQuantize", cat::target_selection, SL, nul, option_value::array({}),
                    "[] (every supported op type)",
                    "Quantize only these op types (empty: every supported op type)."));
  r.push_back(fixed("NodesToQuantize", cat::target_selection, SL, nul, nullptr, "None (every node)",
                    "Quantize only these nodes."));
  r.push_back(fixed("ExtraOpTypesToQuantize", cat::target_selection, SL, nul,
                    option_value::array({}), "[]",
                    "Op types added to the quantized set on top of the default ones."));
  r.push_back(fixed("ExecutionProviders", cat::runtime, SL, nonnull,
                    strings({"CPUExecutionProvider"}), "[\"CPUExecutionProvider\"]",
                    "Where calibration runs; quark-cpp calibrates with its own CPU runtime, so "
                    "only [\"CPUExecutionProvider\"] is accepted."));
  r.push_back(fixed("OptimizeModel", cat::preprocessing, B, nonnull, true, "True",
                    "Fuse operators before quantization: constant folding, BatchNormalization "
                    "and constant per-channel Mul/Add into the Conv before them, Identity "
                    "removal."));
  r.push_back(fixed("ConvertFP16ToFP32", cat::preprocessing, B, nonnull, false, "False",
                    "Convert a float16 model to float32 before quantization (the result is a "
                    "float32 model)."));
  r.push_back(fixed("ConvertNCHWToNHWC", cat::preprocessing, B, nonnull, false, "False",
                    "Make a model with NCHW inputs / outputs take and return NHWC (a Transpose "
                    "after each 4-D input, before each 4-D output; docs/config.md §7.3)."));
  r.push_back(fixed("DebugMode", cat::debug_and_eval, B, nonnull, false, "False",
                    "Print every debugging message."));
  r.push_back(fixed("CryptoMode", cat::runtime, B, nonnull, false, "False",
                    "Block messages and keep intermediate model data off the disk (refuses "
                    "the options that write side files)."));
  r.push_back(fixed("PrintSummary", cat::debug_and_eval, B, nonnull, true, "True",
                    "Print a summary of the quantization."));
  r.push_back(
      fixed("IgnoreWarnings", cat::debug_and_eval, B, nonnull, true, "True", "Suppress warnings."));
  r.push_back(fixed("ActivationScaled", cat::scale_and_type, B, nonnull, false, "False",
                    "Scale activations into a reduced range before casting (floating-point "
                    "types only, e.g. BFloat16 maps into [-2, 2])."));
  r.push_back(fixed("WeightScaled", cat::scale_and_type, B, nonnull, false, "False",
                    "Scale weights into a reduced range before casting (floating-point types "
                    "only)."));
  r.push_back(fixed("QuantizeFP16", cat::scale_and_type, B, nonnull, false,
                    "False (the quantizer enables it for float16 models)",
                    "The input model is float16; it is quantized through a float32 copy and "
                    "stays float16."));
  r.push_back(context("UseFP32Scale", cat::scale_and_type, B, nonnull, "= QuantizeFP16",
                      "Float32 scales (with Casts) instead of float16 ones (needs "
                      "QuantizeFP16)."));
  r.push_back(fixed("UseUnsignedReLU", cat::calibration, B, nonnull, false, "False",
                    "Quantize the outputs of ReLU and Clip(min=0) asymmetrically."));
  r.push_back(fixed("QuantizeBias", cat::bias, B, nonnull, true, "True",
                    "Quantize Conv/ConvTranspose/Gemm biases."));
  r.push_back(context("Int32Bias", cat::bias, B, nonnull,
                      "True, except False when EnableNPUCnn is True or the weight spec is a "
                      "float or block type",
                      "Quantize biases to int32 with scale input_scale * weight_scale; False: "
                      "like a weight."));
  r.push_back(fixed("Int16Bias", cat::bias, B, nonnull, false, "False",
                    "Quantize biases to int16 (through int32, then saturated; needs opset 21)."));
  r.push_back(fixed("RemoveInputInit", cat::preprocessing, B, nonnull, true, "True",
                    "Remove initializers from the graph inputs, so they are constants."));
  r.push_back(fixed("SimplifyModel", cat::preprocessing, B, nonnull, true, "True",
                    "Simplify the model before quantization (quark-cpp's exact rewrites in place "
                    "of onnxslim: Shape and constant folding, no-op removal, Transpose / Reshape "
                    "chains, Pad into Conv, common subexpressions, dead nodes)."));
  r.push_back(fixed("SimplifyModelOptions", cat::preprocessing, ty::object, nul,
                    option_value::object(), "{}",
                    "onnxslim's options that apply: skip_fusion_patterns, no_constant_folding, "
                    "no_shape_infer, skip_optimizations, verbose, model_check (false)."));
  r.push_back(fixed("EnableSubgraph", cat::target_selection, B, nonnull, false, "False",
                    "Quantize the nodes of If / Loop / Scan bodies too (dynamic quantization "
                    "only, as in Quark)."));
  r.push_back(fixed("EnableDualQuantNodePairs", cat::qdq_management, B, nonnull, false, "False",
                    "Insert a second Q/DQ pair where two precisions meet (mixed precision)."));
  r.push_back(fixed("ForceQuantizeNoInputCheck", cat::qdq_management, B, nonnull, false, "False",
                    "Quantize latent ops (MaxPool, Transpose, ...) even when their input is "
                    "not quantized."));
  r.push_back(context("MatMulConstBOnly", cat::target_selection, B, nonnull,
                      "True for dynamic quantization, else = EnableNPUTransformer",
                      "Quantize only MatMul nodes whose B input is a constant."));
  r.push_back(context("AddQDQPairToWeight", cat::qdq_management, B, nonnull,
                      "True for float16/bfloat16 weights (forced for BFP/MX), else False",
                      "Keep float weights and insert a Q/DQ pair (False: store quantized "
                      "weights feeding a DequantizeLinear)."));
  r.push_back(fixed("OpTypesToExcludeOutputQuantization", cat::target_selection, SL, nul,
                    option_value::array({}), "[]",
                    "Do not quantize the outputs of these op types."));
  r.push_back(fixed("NodesToExcludeOutputQuantization", cat::target_selection, SL, nul,
                    option_value::array({}), "[]", "Do not quantize the outputs of these nodes."));
  r.push_back(fixed("DedicatedQDQPair", cat::qdq_management, B, nonnull, false, "False",
                    "Give every consumer its own Q/DQ pair instead of sharing one."));
  r.push_back(fixed("DedicateDQNode", cat::qdq_management, B, nonnull, false, "False",
                    "After quantizing, give every reader of a shared DequantizeLinear its own "
                    "copy (a shared constant's QuantizeLinear is copied too)."));
  r.push_back(fixed("QDQOpTypePerChannelSupportToAxis", cat::qdq_management, ty::string_int_map,
                    nonnull, option_value::object(), "{}",
                    "Per-channel axis per op type, e.g. {\"MatMul\": 1}."));
  r.push_back(context("CalibTensorRangeSymmetric", cat::calibration, B, nonnull,
                      "True for MinMSE, Percentile, LayerwisePercentile and power-of-two MinMax; "
                      "False for float MinMax, Entropy, Distribution",
                      "Make calibrated ranges symmetric around 0."));
  r.push_back(fixed("CalibMovingAverage", cat::calibration, B, nonnull, false, "False",
                    "MinMax: average the per-batch minima and maxima."));
  r.push_back(fixed("CalibMovingAverageConstant", cat::calibration, N, nonnull, 0.01, "0.01",
                    "Smoothing constant of CalibMovingAverage, in [0, 1]."));
  r.push_back(fixed("Percentile", cat::calibration, N, nonnull, 99.999, "99.999",
                    "Percentile calibration: the percentile kept, in (0, 100]."));
  r.push_back(fixed("LWPMetric", cat::calibration, S, nonnull, "mae", "\"mae\"",
                    "LayerwisePercentile: the metric that picks the percentile (mae or mse)."));
  r.push_back(fixed("PercentileCandidates", cat::calibration, ty::number_list, nonnull,
                    option_value::array({99.99, 99.999, 99.99999}), "[99.99, 99.999, 99.99999]",
                    "LayerwisePercentile: the candidate percentiles."));
  r.push_back(fixed("UseRandomData", cat::calibration, B, nonnull, false, "False",
                    "Calibrate on random inputs instead of a data reader."));
  r.push_back(fixed("RandomDataReaderInputShape", cat::calibration, ty::shape_map, nonnull,
                    option_value::object(), "{}",
                    "Random data: the shape of each input, {name: [dims]}."));
  r.push_back(fixed("RandomDataReaderInputDataRange", cat::calibration, ty::range_map, nul, nullptr,
                    "None (uniform in [0, 1))", "Random data: [min, max] for every input."));
  r.push_back(fixed("Int16Scale", cat::scale_and_type, B, nonnull, false, "False",
                    "Replace float scales by M * 2^-N with int16 M."));
  r.push_back(fixed("MinMSEModePof2Scale", cat::calibration, S, nonnull, "All", "\"All\"",
                    "Power-of-two MinMSE: \"All\" data at once or \"MostCommon\" per batch."));
  r.push_back(context("NumBins", cat::calibration, I, nonnull, "128 for Entropy, else 2048",
                      "Histogram bins of the histogram-based calibration methods."));
  r.push_back(fixed("ConvertOpsetVersion", cat::preprocessing, I, nul, nullptr, "None",
                    "Convert the model to this default-domain opset before quantization."));
  r.push_back(context("ConvertBNToConv", cat::preprocessing, B, nonnull,
                      "True for the NPU-CNN, NPU-transformer and extended-QDQ flows, else False",
                      "Convert BatchNormalization to a depthwise Conv."));
  r.push_back(context("ConvertReduceMeanToGlobalAvgPool", cat::preprocessing, B, nonnull,
                      "as ConvertBNToConv", "Convert ReduceMean to GlobalAveragePool."));
  r.push_back(context("SplitLargeKernelPool", cat::preprocessing, B, nonnull, "as ConvertBNToConv",
                      "Split large-kernel global average pooling into two poolings."));
  r.push_back(context("ConvertSplitToSlice", cat::preprocessing, B, nonnull, "as ConvertBNToConv",
                      "Convert Split to Slice."));
  r.push_back(fixed("FuseInstanceNorm", cat::preprocessing, B, nonnull, true, "True",
                    "Fuse an instance norm built from GlobalAveragePool, Sub, Mul, Sqrt and "
                    "Reciprocal into InstanceNormalization."));
  r.push_back(fixed("FuseL2Norm", cat::preprocessing, B, nonnull, true, "True",
                    "Fuse x / sqrt(max(ReduceSum(x * x), eps)) into LpNormalization(p = 2)."));
  r.push_back(fixed("FuseGelu", cat::preprocessing, B, nonnull, true, "True",
                    "Fuse x * 0.5 * (1 + erf(x / sqrt(2))) into Gelu (opset 20 or later)."));
  r.push_back(fixed("FuseLayerNorm", cat::preprocessing, B, nonnull, true, "True",
                    "Fuse a LayerNormalization built from ReduceMean, Sub, Pow, Sqrt and Div "
                    "into LayerNormalization (opset 17 or later)."));
  r.push_back(fixed("ConvertClipToRelu", cat::preprocessing, B, nonnull, false, "False",
                    "Convert Clip with min 0 to Relu."));
  r.push_back(fixed("SimulateDPU", cat::npu_adaptation, B, nonnull, true, "True",
                    "After Q/DQ insertion, replace some ops by the DPU's fixed-point versions "
                    "(the Convert*ToDPUVersion keys; docs/config.md §7.5)."));
  r.push_back(context("ConvertLeakyReluToDPUVersion", cat::npu_adaptation, B, nonnull,
                      "True in the NPU-CNN flow (EnableNPUCnn), else False",
                      "LeakyRelu alpha rounded to a multiple of 1/256."));
  r.push_back(context("ConvertSigmoidToHardSigmoid", cat::npu_adaptation, B, nonnull,
                      "True in the NPU-CNN flow (EnableNPUCnn), else False",
                      "Replace Sigmoid by HardSigmoid(1/6, 0.5)."));
  r.push_back(context("ConvertHardSigmoidToDPUVersion", cat::npu_adaptation, B, nonnull,
                      "True in the NPU-CNN flow (EnableNPUCnn), else False",
                      "Scale HardSigmoid(1/6, 0.5) by the DPU's fixed-point 1/6."));
  r.push_back(context("ConvertAvgPoolToDPUVersion", cat::npu_adaptation, B, nonnull,
                      "True in the NPU-CNN flow (EnableNPUCnn), else False",
                      "Scale average pooling by the DPU's fixed-point 1/k."));
  r.push_back(fixed("ConvertClipToDPUVersion", cat::npu_adaptation, B, nonnull, false, "False",
                    "Round Clip bounds to integers in [-128, 127]."));
  r.push_back(context("ConvertReduceMeanToDPUVersion", cat::npu_adaptation, B, nonnull,
                      "True in the NPU-CNN flow (EnableNPUCnn), else False",
                      "Scale ReduceMean by the DPU's fixed-point 1/k."));
  r.push_back(todo("ConvertSoftmaxToDPUVersion", cat::npu_adaptation, B, nonnull, false, "False",
                   false, "Replace Softmax by the DPU softmax subgraph."));
  r.push_back(fixed("NPULimitationCheck", cat::npu_adaptation, B, nonnull, true, "True",
                    "Adjust quantization to the NPU's limits: the Align* and Adjust* rules "
                    "(docs/config.md §7.4)."));
  r.push_back(fixed("MaxLoopNum", cat::npu_adaptation, I, nonnull, 5, "5",
                    "Maximum passes of the alignment loop (at least 1)."));
  for (const char* k : {"AdjustShiftCut", "AdjustShiftBias", "AdjustShiftRead", "AdjustShiftWrite",
                        "AdjustHardSigmoid", "AdjustShiftSwish"}) {
    r.push_back(fixed(k, cat::npu_adaptation, B, nonnull, true, "True",
                      "An NPU position adjustment rule for power-of-two scales (quark-spec §9.3; "
                      "docs/config.md §7.4)."));
  }
  for (const char* k : {"AlignConcat", "AlignPool", "AlignPad", "AlignSlice"}) {
    r.push_back(context(k, cat::npu_adaptation, B, nonnull,
                        "True with power-of-two activation scales, else False",
                        "Align the quantization of an op's inputs and outputs (quark-spec §9.3, "
                        "§9.4; docs/config.md §7.4)."));
  }
  for (const char* k : {"AlignTranspose", "AlignReshape"}) {
    r.push_back(fixed(k, cat::npu_adaptation, B, nonnull, false, "False",
                      "Give the op's input the quantization of its output (quark-spec §9.4; "
                      "docs/config.md §7.4)."));
  }
  r.push_back(fixed("AdjustBiasScale", cat::bias, B, nonnull, true, "True",
                    "Re-align int32 bias scales to input_scale * weight_scale."));
  r.push_back(fixed("SaveAndRestore", cat::calibration, S, nul, nullptr, "None",
                    "A .json file that saves calibrated ranges, or restores them if it "
                    "exists."));
  r.push_back(fixed("ReplaceClip6Relu", cat::preprocessing, B, nonnull, false, "False",
                    "Replace Clip(0, 6) by Relu before CLE (only with algo_config cle)."));
  r.push_back(fixed("CopySharedInit", cat::preprocessing, SL, nul, nullptr, "None",
                    "Give each node of these op types its own copy of an initializer it shares "
                    "with other nodes ([]: every op type; None: no copies)."));
  r.push_back(fixed("CopyBiasInit", cat::preprocessing, SL, nul,
                    strings({"Conv", "ConvTranspose", "Gemm"}),
                    "[\"Conv\", \"ConvTranspose\", \"Gemm\"] (acts only when activations and "
                    "weights are both 8- or 16-bit integers)",
                    "As CopySharedInit, for the bias inputs of these op types only."));
  r.push_back(fixed("RemoveQDQConvClip", cat::qdq_management, B, nonnull, true, "True",
                    "Remove the Q/DQ between Conv/Add/Gemm and a following Clip."));
  r.push_back(fixed("RemoveQDQConvRelu", cat::qdq_management, B, nonnull, true, "True",
                    "Remove the Q/DQ between Conv/Add/Gemm and a following Relu."));
  r.push_back(fixed("RemoveQDQConvLeakyRelu", cat::qdq_management, B, nonnull, true, "True",
                    "Remove the Q/DQ between Conv/Add/Gemm and a following LeakyRelu."));
  r.push_back(fixed("RemoveQDQConvPRelu", cat::qdq_management, B, nonnull, true, "True",
                    "Remove the Q/DQ between Conv/Add/Gemm and a following PRelu."));
  r.push_back(fixed("RemoveQDQConvGelu", cat::qdq_management, B, nonnull, false, "False",
                    "Remove the Q/DQ between Conv/Add/Gemm and a following Gelu."));
  r.push_back(fixed("RemoveQDQMulAdd", cat::qdq_management, B, nonnull, false, "False",
                    "Remove the Q/DQ between Mul and a following Add."));
  r.push_back(fixed("RemoveQDQBetweenOps", cat::qdq_management, ty::op_type_pairs, nul, nullptr,
                    "None", "Remove the Q/DQ between these (producer, consumer) op types."));
  r.push_back(fixed("RemoveQDQInstanceNorm", cat::qdq_management, B, nonnull, false, "False",
                    "Remove the Q/DQ between InstanceNormalization and a following "
                    "Relu/LeakyRelu/PRelu."));
  r.push_back(fixed("RemoveFusedQDQ", cat::qdq_management, B, nonnull, false, "False",
                    "Also remove fused BFP/MX quantize-dequantize nodes in the removals above."));
  r.push_back(context("FoldBatchNorm", cat::preprocessing, B, nonnull, "= OptimizeModel",
                      "Fold BatchNormalization into Conv/ConvTranspose/Gemm (also after a "
                      "channel Concat of such nodes)."));
  r.push_back(fixed("BF16WithClip", cat::block_formats, B, nonnull, false, "False",
                    "Clip activations to +-3.38953139e38 (the bfloat16 range) before their "
                    "bfloat16 pair (docs/config.md §7.6)."));
  r.push_back(fixed("BF16QDQToCast", cat::block_formats, B, nonnull, false, "False",
                    "Quark's Cast form of the bfloat16 pairs: a scaled pair multiplies by 1/scale "
                    "(docs/config.md §7.6)."));
  r.push_back(context("RefineBlockAxis", cat::block_formats, B, nonnull,
                      "True when a BFP/MX spec is used, else False",
                      "Move BFP/MX block axes onto the reduction dimension."));
  r.push_back(fixed("FixShapes", cat::runtime, S, nul, nullptr, "None",
                    "Fix input/output shapes: \"name:[1,224,224,3];out:[1,1000]\"."));
  r.push_back(fixed("FoldRelu", cat::qdq_management, B, nonnull, false, "False",
                    "Fold Relu into the preceding Conv (extended QDQ format)."));
  r.push_back(fixed("CalibDataSize", cat::calibration, I, nul, nullptr, "None (all data)",
                    "Number of calibration samples used."));
  r.push_back(fixed("CalibWorkerNum", cat::calibration, I, nonnull, 1, "1",
                    "Parallel calibration workers."));
  r.push_back(context("CalibOptimizeMem", cat::calibration, B, nonnull,
                      "True, except False for LayerwisePercentile",
                      "Keep memory flat during calibration (cache on disk where needed)."));
  r.push_back(fixed("CalibOptimizeDisk", cat::calibration, B, nonnull, true, "True",
                    "LayerwisePercentile: recompute instead of caching activations."));
  r.push_back(fixed("SaveTensorHistFig", cat::calibration, B, nonnull, false, "False",
                    "Save each histogram-calibrated tensor's histogram (JSON and SVG) into "
                    "tensor_hist/ in the working directory."));
  r.push_back(fixed("QuantizeAllOpTypes", cat::target_selection, B, nonnull, false, "False",
                    "Quantize every op type present in the model."));
  r.push_back(fixed("WeightsOnly", cat::target_selection, B, nonnull, false, "False",
                    "Quantize weights only."));
  r.push_back(fixed("AlignEltwiseQuantType", cat::scale_and_type, B, nonnull, false, "False",
                    "Quantize constant inputs of Mul/Add/Sub/Div/Min/Max with the activation "
                    "type."));
  r.push_back(fixed("EnableVaimlBF16", cat::block_formats, B, nonnull, false, "False",
                    "BF16QDQToCast, then the activation Cast pairs removed and bfloat16 weights "
                    "stored as float32 holding bfloat16 values (docs/config.md §7.6)."));
  r.push_back(fixed("UseMatMulNBits", cat::matmul_nbits, B, nonnull, false, "False",
                    "Quantize only the constant weights of MatMul nodes, block-wise to 4 bits, "
                    "into com.microsoft MatMulNBits nodes (no calibration)."));
  r.push_back(fixed("MatMulNBitsParams", cat::matmul_nbits, ty::object, nul, nullptr,
                    "{Algorithm: DEFAULT, GroupSize: 128, Symmetric: True, Bits: 4, "
                    "AccuracyLevel: 0}",
                    "Settings of the MatMulNBits quantizer: Algorithm (DEFAULT), GroupSize "
                    "(block size along K, a power of two >= 16), Symmetric, Bits (4), "
                    "AccuracyLevel (0-4, the node's accuracy_level)."));
  r.push_back(fixed("EvalMetrics", cat::debug_and_eval, B, nonnull, false, "False",
                    "Evaluate the quantized model against the float model (cosine, L2, PSNR, "
                    "SSIM)."));
  r.push_back(fixed("EvalDataReader", cat::debug_and_eval, S, nul, nullptr,
                    "None (the calibration data)",
                    "Folder of evaluation data (.npy/.npz) for EvalMetrics."));
  r.push_back(fixed("TmpDir", cat::runtime, S, nul, nullptr, "None (system temp dir)",
                    "Directory for intermediate files."));
  r.push_back(todo("UserCustomOpLibPath", cat::runtime, S, nul, nullptr, "None", nullptr,
                   "Directory of custom-op libraries for the float model."));
  r.push_back(fixed("EncryptionAlgorithm", cat::runtime, S, nul, nullptr, "None",
                    "Crypto mode encryption algorithm: \"AES-256\" or None (nothing is "
                    "written to encrypt)."));
  r.push_back(context("WeightCalibrateMethod", cat::calibration, S, nul,
                      "None: MinMSE when the weight spec calibrates with MinMSE and a Float32 "
                      "scale, else MinMax",
                      "How weight ranges are chosen: MinMax or MinMSE."));
  r.push_back(fixed("MinMSEModeFloatScale", cat::calibration, S, nonnull, "Percentile",
                    "\"Percentile\"", "Float MinMSE for weights: Percentile, HistCenter or All."));
  r.push_back(fixed("TensorQuantOverrides", cat::calibration, ty::tensor_overrides, nonnull,
                    option_value::object(), "{}",
                    "Per-tensor overrides: quant_type, axis, scale, zero_point, symmetric, "
                    "reduce_range, rmax, rmin."));
  r.push_back(fixed("CalibPassthroughOpTypes", cat::calibration, SL, nonnull,
                    option_value::array({}), "[]",
                    "Op types whose outputs copy the range of their input instead of being "
                    "calibrated."));
  r.push_back(fixed("FillAllValueInfo", cat::runtime, B, nonnull, false, "False",
                    "Write value_info (type and shape) for every tensor of the output model."));
  // -- keys quark-spec.md names that seed 000 does not list -------------------------------------
  r.push_back(context("ActivationSymmetric", cat::scale_and_type, B, nonnull,
                      "= global_config.input_tensors.symmetric",
                      "Symmetric activations (must agree with the input_tensors spec)."));
  r.push_back(context("WeightSymmetric", cat::scale_and_type, B, nonnull,
                      "= global_config.weight.symmetric",
                      "Symmetric weights (must agree with the weight spec)."));
  r.push_back(fixed("UsePowerOf2Scale", cat::scale_and_type, B, nonnull, true, "True",
                    "Power-of-two calibration methods (a PowerOf2 scale type) give power-of-two "
                    "scales; false: float scales from the ranges they calibrate (a MinMSE "
                    "weight search still tries powers of two, as Quark's)."));
  r.push_back(fixed("NumQuantizedBins", cat::calibration, I, nonnull, 128, "128",
                    "Entropy: number of quantized bins."));
  r.push_back(fixed("TensorsRangeFile", cat::calibration, S, nul, nullptr, "None",
                    "A file of precomputed tensor ranges (SaveAndRestore's format) used instead "
                    "of calibrating those tensors."));
  r.push_back(fixed("InputNodes", cat::target_selection, SL, nonnull, option_value::array({}), "[]",
                    "Exclude every node before these nodes."));
  r.push_back(fixed("OutputNodes", cat::target_selection, SL, nonnull, option_value::array({}),
                    "[]", "Exclude every node after these nodes."));
  r.push_back(context("EnableNPUCnn", cat::target_selection, B, nonnull,
                      "True when input_tensors and weight are both XInt8Spec",
                      "The XINT8 / Vitis AI NPU-CNN flow (Quark's enable_npu_cnn)."));
  r.push_back(fixed("EnableNPUTransformer", cat::target_selection, B, nonnull, false, "False",
                    "The NPU transformer flow: quantize Gemm and MatMul only (Quark's "
                    "enable_npu_transformer)."));
  r.push_back(fixed("UseQDQContribOps", cat::qdq_management, B, nonnull, false, "False",
                    "Emit com.microsoft Q/DQ instead of the default domain."));
  r.push_back(fixed("LogSeverityLevel", cat::debug_and_eval, I, nonnull, 1, "1",
                    "0 debug, 1 info, 2 warning, 3 error, 4 fatal."));
  // Legacy names of CLEConfig / BiasCorrectionConfig (quark-spec §10.1, §10.3): the CLE* keys
  // tune CLE when algo_config has a "cle" entry; BiasCorrection enables bias correction.
  r.push_back(fixed("CLEBalanceMethod", cat::preprocessing, S, nonnull, "max", "\"max\"",
                    "CLE balance method (= CLEConfig cle_balance_method; only \"max\")."));
  r.push_back(fixed("CLESteps", cat::preprocessing, I, nonnull, 1, "1",
                    "CLE passes, -1: until the stop rule (= CLEConfig cle_steps)."));
  r.push_back(fixed("CLEWeightThreshold", cat::preprocessing, N, nonnull, 0.5, "0.5",
                    "CLE leaves channels with r0 + r1 below this alone (= cle_weight_threshold)."));
  r.push_back(fixed("CLEScaleAppendBias", cat::preprocessing, B, nonnull, true, "True",
                    "CLE counts the shrunk bias in the head's range (= cle_scale_append_bias)."));
  r.push_back(fixed("CLEScaleUseThreshold", cat::preprocessing, B, nonnull, true, "True",
                    "CLE applies CLEWeightThreshold (= cle_scale_use_threshold)."));
  r.push_back(fixed("CLETotalLayerDiffThreshold", cat::preprocessing, N, nonnull, 1.9e-7, "1.9e-7",
                    "CLE stop rule: summed mean weight change (= "
                    "cle_total_layer_diff_threshold)."));
  r.push_back(fixed("BiasCorrection", cat::bias, B, nonnull, false, "False",
                    "Bias correction after quantization (= algo_config bias_correction)."));
  r.push_back(fixed("BFPAttributes", cat::block_formats, ty::object, nul, nullptr, "None",
                    "Legacy attributes of every BFPQuantizeDequantize (BFP16, MX4/6/9 specs): "
                    "each key given replaces the spec's."));
  r.push_back(fixed("MXAttributes", cat::block_formats, ty::object, nul, nullptr, "None",
                    "Legacy attributes of every MXQuantizeDequantize (OCP MX specs): each key "
                    "given replaces the spec's."));
  r.push_back(todo("ConvertInstanceNormToDPUVersion", cat::npu_adaptation, B, nonnull, false,
                   "False", false, "Replace InstanceNormalization by the DPU version."));
  return r;
}

const std::vector<option_info>& registry() {
  static const std::vector<option_info> r = build_registry();
  return r;
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j)
    prev[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

[[noreturn]] void throw_value(std::string_view where, const std::string& what) {
  throw config_error("quark.config.value", std::string(where) + ": " + what);
}

bool is_one_of(std::string_view s, std::initializer_list<std::string_view> allowed) {
  return std::find(allowed.begin(), allowed.end(), s) != allowed.end();
}

/// Shape check against the registry type.
void check_shape(const option_info& info, const option_value& v, std::string_view where) {
  detail::check_option_value(info.type, info.nullable, v, where);
}

/// BFPAttributes / MXAttributes: the attributes of the op (quark-spec §1.8-§1.11), each with its
/// type and range; an unknown key is an error naming it.
void check_block_attributes(bool bfp, const option_value& v, std::string_view where) {
  static const std::vector<std::string> bfp_int = {"axis",
                                                   "bit_width",
                                                   "block_size",
                                                   "rounding_mode",
                                                   "sub_block_size",
                                                   "sub_block_shift_bits",
                                                   "convert_to_bfloat_before_bfp",
                                                   "use_compiler_version_cpu_kernel"};
  static const std::vector<std::string> mx_int = {"axis", "block_size", "rounding_mode"};
  const auto& ints = bfp ? bfp_int : mx_int;
  for (const auto& m : v.as_object()) {
    const std::string at = std::string(where) + "." + m.key;
    if (std::find(ints.begin(), ints.end(), m.key) != ints.end()) {
      if (!m.value.is_int())
        throw_value(at, "must be an integer, got " + to_string(m.value));
      const std::int64_t i = m.value.as_int();
      const bool ok =
          m.key == "axis"            ? true
          : m.key == "rounding_mode" ? (i >= 0 && i <= 2)
          : m.key == "bit_width"     ? (i >= 10 && i <= 32)
          : m.key == "convert_to_bfloat_before_bfp" || m.key == "use_compiler_version_cpu_kernel"
              ? (i == 0 || i == 1)
          : m.key == "sub_block_shift_bits" ? (i >= 0 && i <= 8)
                                            : i >= 1;
      if (!ok)
        throw_value(at, "is out of range: " + to_string(m.value));
    } else if (bfp && m.key == "bfp_method") {
      if (!m.value.is_string() || !is_one_of(m.value.as_string(), {"to_bfp", "to_bfp_prime"}))
        throw_value(at, "must be \"to_bfp\" or \"to_bfp_prime\", got " + to_string(m.value));
    } else if (!bfp && m.key == "element_dtype") {
      if (!m.value.is_string() ||
          !is_one_of(m.value.as_string(),
                     {"int8", "fp8_e4m3", "fp8_e5m2", "fp6_e3m2", "fp6_e2m3", "fp4_e2m1"})) {
        throw_value(at,
                    "must be one of int8, fp8_e4m3, fp8_e5m2, fp6_e3m2, fp6_e2m3, fp4_e2m1; got " +
                        to_string(m.value));
      }
    } else {
      throw config_error("quark.config.value",
                         at + ": unknown attribute of " +
                             (bfp ? "BFPQuantizeDequantize" : "MXQuantizeDequantize"));
    }
  }
}

/// MatMulNBitsParams (seed 000 category 9): each key with its type and range; an unknown key is
/// an error naming it.
void check_matmul_nbits_params(const option_value& v, std::string_view where) {
  for (const auto& m : v.as_object()) {
    const std::string at = std::string(where) + "." + m.key;
    if (m.key == "Algorithm") {
      if (!m.value.is_string())
        throw_value(at, "must be a string, got " + to_string(m.value));
      const std::string& a = m.value.as_string();
      if (a != "DEFAULT" && a != "GPTQ" && a != "HQQ")
        throw_value(at, "must be one of DEFAULT, GPTQ, HQQ; got \"" + a + "\"");
    } else if (m.key == "GroupSize") {
      const std::int64_t g = m.value.is_int() ? m.value.as_int() : 0;
      if (!m.value.is_int() || g < 16 || g > (std::int64_t{1} << 31) || (g & (g - 1)) != 0) {
        throw_value(at, "must be a power of two in [16, 2^31] (MatMulNBits' block_size), got " +
                            to_string(m.value));
      }
    } else if (m.key == "Symmetric") {
      if (!m.value.is_bool())
        throw_value(at, "must be a boolean, got " + to_string(m.value));
    } else if (m.key == "Bits") {
      if (!m.value.is_int())
        throw_value(at, "must be an integer, got " + to_string(m.value));
      if (m.value.as_int() != 4) {
        throw_value(at,
                    "must be 4 (Quark: \"Only 4b quantization is supported for "
                    "inference\"), got " +
                        to_string(m.value));
      }
    } else if (m.key == "AccuracyLevel") {
      if (!m.value.is_int() || m.value.as_int() < 0 || m.value.as_int() > 4) {
        throw_value(at,
                    "must be an integer in 0..4 (0 unset, 1 fp32, 2 fp16, 3 bf16, 4 int8), "
                    "got " +
                        to_string(m.value));
      }
    } else {
      throw config_error("quark.config.value",
                         at + ": unknown key of MatMulNBitsParams (Algorithm, GroupSize, "
                              "Symmetric, Bits, AccuracyLevel)");
    }
  }
}

/// Value checks beyond the shape (ranges, enumerated strings).
void check_value(const option_info& info, const option_value& v, std::string_view where) {
  if (v.is_null())
    return;
  const std::string_view k = info.name;
  if (k == "ExecutionProviders") {
    const auto eps = option_cast<std::vector<std::string>>(v, where);
    for (const auto& ep : eps) {
      if (ep != "CPUExecutionProvider") {
        throw not_implemented("quark.config.not_implemented",
                              std::string(where) + ": execution provider \"" + ep +
                                  "\" is not implemented yet; quark-cpp calibrates on its own "
                                  "CPU runtime (use [\"CPUExecutionProvider\"])");
      }
    }
  } else if (k == "MaxLoopNum") {
    if (v.as_int() < 1)
      throw_value(where, "must be at least 1, got " + to_string(v));
  } else if (k == "CalibMovingAverageConstant") {
    const double c = v.as_number();
    if (!(c >= 0.0 && c <= 1.0))
      throw_value(where, "must be in [0, 1], got " + to_string(v));
  } else if (k == "Percentile") {
    const double p = v.as_number();
    if (!(p > 0.0 && p <= 100.0))
      throw_value(where, "must be in (0, 100], got " + to_string(v));
  } else if (k == "PercentileCandidates") {
    const auto ps = option_cast<std::vector<double>>(v, where);
    if (ps.empty())
      throw_value(where, "must not be empty");
    for (double p : ps) {
      if (!(p > 0.0 && p <= 100.0)) {
        throw_value(where, "every candidate must be in (0, 100], got " + to_string(v));
      }
    }
  } else if (k == "BFPAttributes" || k == "MXAttributes") {
    check_block_attributes(k == "BFPAttributes", v, where);
  } else if (k == "MatMulNBitsParams") {
    check_matmul_nbits_params(v, where);
  } else if (k == "EncryptionAlgorithm") {
    if (v.as_string() != "AES-256")
      throw_value(where, "must be \"AES-256\" or null; got \"" + v.as_string() + "\"");
  } else if (k == "LWPMetric") {
    if (!is_one_of(v.as_string(), {"mae", "mse"})) {
      throw_value(where, "must be one of mae, mse; got \"" + v.as_string() + "\"");
    }
  } else if (k == "MinMSEModePof2Scale") {
    if (!is_one_of(v.as_string(), {"All", "MostCommon"})) {
      throw_value(where,
                  "must be one of All, MostCommon (case-sensitive); got \"" + v.as_string() + "\"");
    }
  } else if (k == "MinMSEModeFloatScale") {
    if (!is_one_of(v.as_string(), {"Percentile", "HistCenter", "All"})) {
      throw_value(where, "must be one of " + join({"Percentile", "HistCenter", "All"}) +
                             " (case-sensitive); got \"" + v.as_string() + "\"");
    }
  } else if (k == "WeightCalibrateMethod") {
    if (!is_one_of(
            v.as_string(),
            {"MinMax", "MinMSE", "CalibrationMethod.MinMax", "quark.onnx.CalibrationMethod.MinMax",
             "ExtendedCalibrationMethod.MinMSE", "quark.onnx.ExtendedCalibrationMethod.MinMSE"})) {
      throw_value(where,
                  "must be MinMax or MinMSE (optionally spelled "
                  "quark.onnx.CalibrationMethod.MinMax / "
                  "quark.onnx.ExtendedCalibrationMethod.MinMSE); got \"" +
                      v.as_string() + "\"");
    }
  } else if (k == "NumBins" || k == "NumQuantizedBins") {
    if (v.as_int() < 0)
      throw_value(where, "must be >= 0, got " + to_string(v));
  } else if (k == "CalibDataSize" || k == "CalibWorkerNum") {
    if (v.as_int() < 1)
      throw_value(where, "must be >= 1, got " + to_string(v));
  } else if (k == "LogSeverityLevel") {
    if (v.as_int() < 0 || v.as_int() > 4)
      throw_value(where, "must be in 0..4, got " + to_string(v));
  } else if (k == "RandomDataReaderInputShape") {
    for (const auto& [name, dims] :
         option_cast<std::map<std::string, std::vector<std::int64_t>>>(v, where)) {
      for (auto d : dims) {
        if (d <= 0)
          throw_value(std::string(where) + "." + name, "dimensions must be positive");
      }
    }
  } else if (k == "RandomDataReaderInputDataRange") {
    for (const auto& [name, range] :
         option_cast<std::map<std::string, std::pair<double, double>>>(v, where)) {
      if (!(range.first < range.second)) {
        throw_value(std::string(where) + "." + name, "expected [min, max] with min < max");
      }
    }
  } else if (k == "FixShapes") {
    // "name:[d,d,...];name:[...]"
    const std::string& s = v.as_string();
    std::size_t pos = 0;
    while (pos < s.size()) {
      std::size_t end = s.find(';', pos);
      if (end == std::string::npos)
        end = s.size();
      const std::string item = s.substr(pos, end - pos);
      const auto colon = item.rfind(':');
      const bool ok = colon != std::string::npos && colon > 0 && item.size() > colon + 2 &&
                      item[colon + 1] == '[' && item.back() == ']';
      if (!ok) {
        throw_value(where, "expected \"name:[d0,d1,...];name:[...]\", got item \"" + item + "\"");
      }
      // Each dimension: optional spaces, digits, optional spaces; positive and at most 2^31
      // (the runtime's element bound), so the quantizer's parser cannot meet a bad one.
      const std::string list = item.substr(colon + 2, item.size() - colon - 3);
      std::size_t at = 0;
      while (at <= list.size()) {
        const std::size_t comma = std::min(list.find(',', at), list.size());
        const std::string d = list.substr(at, comma - at);
        const auto b = d.find_first_not_of(' ');
        const auto e = d.find_last_not_of(' ');
        const std::string digits = b == std::string::npos ? std::string{} : d.substr(b, e - b + 1);
        std::int64_t value = 0;
        const auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
        if (digits.empty() || ec != std::errc{} || ptr != digits.data() + digits.size() ||
            value <= 0 || value > (std::int64_t{1} << 31)) {
          throw_value(where, "dimension \"" + digits + "\" of \"" + item.substr(0, colon) +
                                 "\" must be an integer in [1, 2^31]");
        }
        at = comma + 1;
      }
      pos = end + 1;
    }
  }
}

}  // namespace

std::string_view category_title(option_category c) noexcept {
  switch (c) {
    case cat::preprocessing:
      return "Preprocessing & Graph Optimization";
    case cat::target_selection:
      return "Quantization Target Selection";
    case cat::qdq_management:
      return "QDQ Node Management";
    case cat::calibration:
      return "Calibration Configuration";
    case cat::bias:
      return "Bias Handling";
    case cat::scale_and_type:
      return "Scale & Numeric Type";
    case cat::npu_adaptation:
      return "DPU/NPU Hardware Adaptation";
    case cat::block_formats:
      return "BF16 / BFP / MX Quantization";
    case cat::matmul_nbits:
      return "MatMul NBits (LLM Weight-Only)";
    case cat::runtime:
      return "Runtime & Infrastructure";
    case cat::debug_and_eval:
      return "Debug, Logging & Evaluation";
  }
  return "?";
}

std::string_view describe(option_type t) noexcept {
  switch (t) {
    case ty::boolean:
      return "a boolean";
    case ty::integer:
      return "an integer";
    case ty::number:
      return "a number";
    case ty::string:
      return "a string";
    case ty::string_list:
      return "a list of strings";
    case ty::number_list:
      return "a list of numbers";
    case ty::string_int_map:
      return "an object of integers";
    case ty::shape_map:
      return "an object of integer lists";
    case ty::range_map:
      return "an object of [min, max] pairs";
    case ty::op_type_pairs:
      return "a list of [op_type, op_type] pairs";
    case ty::tensor_overrides:
      return "an object of override lists";
    case ty::object:
      return "an object";
  }
  return "?";
}

std::span<const option_info> option_registry() noexcept {
  return registry();
}

const option_info* find_option(std::string_view name) noexcept {
  for (const auto& info : registry()) {
    if (info.name == name)
      return &info;
  }
  return nullptr;
}

std::string_view closest_option(std::string_view name) noexcept {
  const std::string needle = lower(name);
  std::string_view best;
  std::size_t best_d = std::string::npos;
  for (const auto& info : registry()) {
    const std::string known = lower(info.name);
    std::size_t d = edit_distance(needle, known);
    // A fragment of a known key ("Percentile" in "PercentileCandidates") is a near miss too.
    if (needle.size() >= 6 && known.find(needle) != std::string::npos) {
      d = std::min<std::size_t>(d, 2);
    }
    if (d < best_d) {
      best_d = d;
      best = info.name;
    }
  }
  const std::size_t limit = std::max<std::size_t>(2, name.size() / 3);
  return best_d <= limit ? best : std::string_view{};
}

// ---- TensorQuantOverrides --------------------------------------------------------------------

std::optional<override_quant_type> parse_override_quant_type(std::string_view s) noexcept {
  for (std::string_view prefix : {"QuantType.", "ExtendedQuantType.", "quark.onnx.QuantType.",
                                  "quark.onnx.ExtendedQuantType."}) {
    if (s.substr(0, prefix.size()) == prefix) {
      s.remove_prefix(prefix.size());
      break;
    }
  }
  if (!s.empty() && s.front() == 'Q')
    s.remove_prefix(1);
  const std::string l = lower(s);
  using q = override_quant_type;
  static constexpr std::pair<std::string_view, q> names[] = {{"int8", q::int8},
                                                             {"uint8", q::uint8},
                                                             {"int16", q::int16},
                                                             {"uint16", q::uint16},
                                                             {"int32", q::int32},
                                                             {"uint32", q::uint32},
                                                             {"int4", q::int4},
                                                             {"uint4", q::uint4},
                                                             {"float16", q::float16},
                                                             {"bfloat16", q::bfloat16},
                                                             {"float8e4m3fn", q::float8_e4m3fn},
                                                             {"bfp", q::bfp},
                                                             {"mx", q::mx}};
  for (const auto& [n, t] : names) {
    if (l == n)
      return t;
  }
  return std::nullopt;
}

std::string_view to_string(override_quant_type t) noexcept {
  using q = override_quant_type;
  switch (t) {
    case q::int8:
      return "QInt8";
    case q::uint8:
      return "QUInt8";
    case q::int16:
      return "QInt16";
    case q::uint16:
      return "QUInt16";
    case q::int32:
      return "QInt32";
    case q::uint32:
      return "QUInt32";
    case q::int4:
      return "QInt4";
    case q::uint4:
      return "QUInt4";
    case q::float16:
      return "QFloat16";
    case q::bfloat16:
      return "QBFloat16";
    case q::float8_e4m3fn:
      return "QFLOAT8E4M3FN";
    case q::bfp:
      return "QBFP";
    case q::mx:
      return "QMX";
  }
  return "?";
}

namespace detail {

void check_option_value(option_type type, bool nullable, const option_value& v,
                        std::string_view where) {
  if (v.is_null()) {
    if (!nullable)
      detail::throw_option_type(where, describe(type), v);
    return;
  }
  switch (type) {
    case ty::boolean:
      (void)option_cast<bool>(v, where);
      break;
    case ty::integer:
      (void)option_cast<std::int64_t>(v, where);
      break;
    case ty::number:
      (void)option_cast<double>(v, where);
      break;
    case ty::string:
      (void)option_cast<std::string>(v, where);
      break;
    case ty::string_list:
      (void)option_cast<std::vector<std::string>>(v, where);
      break;
    case ty::number_list:
      (void)option_cast<std::vector<double>>(v, where);
      break;
    case ty::string_int_map:
      (void)option_cast<std::map<std::string, std::int64_t>>(v, where);
      break;
    case ty::shape_map:
      (void)option_cast<std::map<std::string, std::vector<std::int64_t>>>(v, where);
      break;
    case ty::range_map:
      (void)option_cast<std::map<std::string, std::pair<double, double>>>(v, where);
      break;
    case ty::op_type_pairs:
      (void)option_cast<std::vector<std::pair<std::string, std::string>>>(v, where);
      break;
    case ty::tensor_overrides:
      (void)option_cast<tensor_quant_overrides>(v, where);
      break;
    case ty::object:
      if (!v.is_object())
        detail::throw_option_type(where, describe(type), v);
      break;
  }
}

namespace {
/// The keys an override may pair with its quant_type: axis is for integer types (seed 000); the
/// Cast form of float16 / bfloat16 has no scale, zero point or range; an FP8 override takes its
/// range (rmin / rmax, symmetric) but not a fixed scale / zero point yet.
void check_override_type_keys(const tensor_override& o, const std::string& epath) {
  if (!o.quant_type)
    return;
  const auto t = *o.quant_type;
  const bool cast_form = t == override_quant_type::float16 || t == override_quant_type::bfloat16;
  const bool fp8 = t == override_quant_type::float8_e4m3fn;
  if ((cast_form || fp8) && o.axis) {
    throw_value(epath + ".axis", "per-channel overrides are for integer types only, not " +
                                     std::string(to_string(t)));
  }
  if (cast_form && (o.scale || o.zero_point || o.symmetric || o.reduce_range || o.rmin || o.rmax)) {
    throw_value(epath, std::string(to_string(t)) +
                           " is a plain cast (no scale): it takes no scale, zero_point, "
                           "symmetric, reduce_range, rmin or rmax");
  }
  if (is_block_type(t) &&
      (o.scale || o.zero_point || o.symmetric || o.reduce_range || o.rmin || o.rmax)) {
    throw_value(epath, std::string(to_string(t)) +
                           " is a block format (one fused node, a shared exponent per block): "
                           "it takes an axis only, no scale, zero_point, symmetric, "
                           "reduce_range, rmin or rmax");
  }
  if (fp8 && o.zero_point && *o.zero_point != 0) {
    throw_value(epath + ".zero_point", std::string(to_string(t)) +
                                           " has no zero point to move (the float8 zero point "
                                           "is 0), got " +
                                           std::to_string(*o.zero_point));
  }
  if (fp8 && o.reduce_range.value_or(false))
    throw_value(epath + ".reduce_range", std::string(reduce_range_fp8_why));
}
}  // namespace

tensor_quant_overrides to_tensor_overrides(const option_value& v, std::string_view where) {
  if (!v.is_object())
    throw_option_type(where, "an object of override lists", v);
  tensor_quant_overrides out;
  for (const auto& [tensor, list] : v.as_object()) {
    const std::string tpath = std::string(where) + "." + tensor;
    if (!list.is_array())
      throw_option_type(tpath, "a list of override objects", list);
    if (list.as_array().empty())
      throw_value(tpath, "the override list must not be empty");
    std::vector<tensor_override> items;
    std::size_t i = 0;
    for (const auto& entry : list.as_array()) {
      const std::string epath = tpath + "[" + std::to_string(i++) + "]";
      if (!entry.is_object())
        throw_option_type(epath, "an object", entry);
      tensor_override o;
      for (const auto& [key, value] : entry.as_object()) {
        const std::string kpath = epath + "." + key;
        if (key == "quant_type") {
          const auto name = option_cast<std::string>(value, kpath);
          o.quant_type = parse_override_quant_type(name);
          if (!o.quant_type) {
            throw_value(kpath, "unknown quant type \"" + name +
                                   "\" (QInt8, QUInt8, QInt16, QUInt16, QInt32, QUInt32, QInt4, "
                                   "QUInt4, QFloat16, QBFloat16, QFLOAT8E4M3FN, QBFP, QMX)");
          }
        } else if (key == "axis") {
          o.axis = option_cast<std::int64_t>(value, kpath);
        } else if (key == "scale") {
          o.scale = option_cast<double>(value, kpath);
        } else if (key == "zero_point") {
          o.zero_point = option_cast<std::int64_t>(value, kpath);
        } else if (key == "symmetric") {
          o.symmetric = option_cast<bool>(value, kpath);
        } else if (key == "reduce_range") {
          o.reduce_range = option_cast<bool>(value, kpath);
        } else if (key == "rmax") {
          o.rmax = option_cast<double>(value, kpath);
        } else if (key == "rmin") {
          o.rmin = option_cast<double>(value, kpath);
        } else {
          throw config_error("quark.config.unknown_key",
                             kpath +
                                 ": unknown override key (quant_type, axis, scale, "
                                 "zero_point, symmetric, reduce_range, rmax, rmin)");
        }
      }
      if (o.scale.has_value() != o.zero_point.has_value()) {
        throw_value(epath, "scale and zero_point must be given together");
      }
      if (o.scale && (o.symmetric || o.reduce_range || o.rmax || o.rmin)) {
        throw_value(epath,
                    "symmetric, reduce_range, rmax and rmin are invalid together with scale and "
                    "zero_point");
      }
      // The quantizer works in float32: a value float32 cannot hold would become inf or 0.
      constexpr auto float_min = static_cast<double>(std::numeric_limits<float>::min());
      constexpr auto float_max = static_cast<double>(std::numeric_limits<float>::max());
      if (o.scale && !(*o.scale >= float_min && *o.scale <= float_max)) {
        throw_value(epath + ".scale",
                    "must be positive, finite and a normal float32 value (1.18e-38 to 3.4e38)");
      }
      for (const auto& [key, bound] : {std::pair{"rmin", o.rmin}, std::pair{"rmax", o.rmax}}) {
        if (bound && !(std::abs(*bound) <= float_max))
          throw_value(epath + "." + key, "must be finite and within the float32 range");
      }
      if (o.rmin && o.rmax && !(*o.rmin <= *o.rmax)) {
        throw_value(epath, "rmin must not exceed rmax");
      }
      check_override_type_keys(o, epath);
      if (!items.empty() && items.front().quant_type && is_block_type(*items.front().quant_type)) {
        throw_value(epath, std::string(to_string(*items.front().quant_type)) +
                               " takes one entry: the fused node covers the whole tensor");
      }
      // Per-channel entries: the tensor-wide keys are read from entry 0, so a later entry may
      // omit them or repeat them, but not contradict them.
      const auto differs = [](const auto& first, const auto& later) {
        return later && first != later;
      };
      if (!items.empty() &&
          (differs(items.front().quant_type, o.quant_type) || differs(items.front().axis, o.axis) ||
           differs(items.front().symmetric, o.symmetric) ||
           differs(items.front().reduce_range, o.reduce_range))) {
        throw_value(epath,
                    "quant_type, axis, symmetric and reduce_range apply to the whole tensor: give "
                    "them in entry 0 (a later entry may repeat them, not change them)");
      }
      items.push_back(o);
    }
    out.emplace(tensor, std::move(items));
  }
  return out;
}

}  // namespace detail

// ---- option_map ------------------------------------------------------------------------------

namespace {

const option_info& known_option(std::string_view key) {
  const option_info* info = find_option(key);
  if (info == nullptr) {
    std::string msg = "unknown extra option \"" + std::string(key) + "\"";
    const auto near = closest_option(key);
    if (!near.empty())
      msg += "; did you mean \"" + std::string(near) + "\"?";
    msg += " (docs/config.md lists every key)";
    throw config_error("quark.config.unknown_key", msg);
  }
  return *info;
}

}  // namespace

void option_map::set(std::string_view key, option_value value) {
  const option_info& info = known_option(key);
  check_shape(info, value, key);
  if (info.support == option_support::not_implemented && !(value == info.inert_value)) {
    throw not_implemented("quark.config.not_implemented",
                          std::string(key) + " = " + to_string(value) +
                              " is not implemented yet (category " +
                              std::to_string(static_cast<int>(info.category)) + ", " +
                              std::string(category_title(info.category)) +
                              "); the only accepted value is " + to_string(info.inert_value));
  }
  check_value(info, value, key);
  for (auto& m : entries_) {
    if (m.key == key) {
      m.value = std::move(value);
      return;
    }
  }
  entries_.push_back(option_member{std::string(key), std::move(value)});
}

void option_map::erase(std::string_view key) {
  std::erase_if(entries_, [&](const option_member& m) { return m.key == key; });
}

const option_value* option_map::find(std::string_view key) const noexcept {
  for (const auto& m : entries_) {
    if (m.key == key)
      return &m.value;
  }
  return nullptr;
}

option_value option_map::value(std::string_view key) const {
  const option_info& info = known_option(key);
  if (const auto* v = find(key))
    return *v;
  if (info.support == option_support::not_implemented)
    return info.inert_value;
  if (info.default_rule == option_default::context) {
    throw config_error("quark.config.context_default",
                       std::string(key) +
                           " was not set and its default depends on the rest of "
                           "the configuration (" +
                           std::string(info.default_doc) +
                           "); read it from qconfig::effective_options()");
  }
  return info.default_value;
}

}  // namespace quark::onnx
