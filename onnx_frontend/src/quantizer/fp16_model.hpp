// SPDX-License-Identifier: MIT
// PRIVATE: QuantizeFP16 / UseFP32Scale (seed 000; quark-spec §2.4). A float16 model is quantized
// as Quark does it: a float32 copy is calibrated and quantized, then the result goes back to
// float16: its float16 tensors (graph inputs / outputs, weights, value_info, the Casts to float16)
// are float16 again and the Q/DQ scales are float16, or, with UseFP32Scale, float32 with a Cast to
// float32 before each QuantizeLinear and a Cast to float16 after each DequantizeLinear.
//
//     qz::fp16_record r = qz::to_float32(m);   // m: constants already initializers
//     ... quantize m (calibration data through qz::float32_reader) ...
//     qz::to_float16(q, r, use_fp32_scale);
#pragma once

#include <functional>
#include <optional>
#include <set>
#include <string>

#include <quark/onnx/calib_data.hpp>
#include <quark/onnx/model.hpp>
#include <quark/onnx/quantizer.hpp>

namespace quark::onnx::qz {

/// A float16 tensor's values as float32 (exact), and float32 values rounded to float16.
tensor float16_to_float32(const tensor& h);
tensor float32_to_float16(const tensor& f);

/// A model output's values as float32, for measuring a distance between two models' outputs:
/// float32 as is, every other numeric type (float16 / bfloat16, integers, bool, float8, int4)
/// converted value by value. std::nullopt for string and complex tensors (nothing to measure).
std::optional<tensor> numeric_as_float32(tensor v);

/// Whether `m` is a float16 model: some graph input, output or initializer is float16 and no
/// graph input or output is float32.
bool is_float16_model(const model& m);

/// What to_float32 changed, so to_float16 can restore it.
struct fp16_record {
  std::set<std::string> io;             ///< float16 graph inputs / outputs
  std::set<std::string> float32_inits;  ///< initializers that were float32 already (kept)
  std::set<std::string> casts;          ///< outputs of Cast(to = FLOAT16) nodes
  std::set<std::string> float_casts;    ///< outputs of the model's own Cast(to = FLOAT) nodes
};

/// Turns the float16 model `m` into float32: initializers, graph inputs / outputs, value_info,
/// Cast(to = FLOAT16) and ConstantOfShape values.
fp16_record to_float32(model& m);

/// Turns the quantized float32 model `m` back into float16 (see the file comment). Raises the
/// default-domain opset to 19 when float16 scales meet standard QuantizeLinear / DequantizeLinear.
void to_float16(model& m, const fp16_record& r, bool fp32_scales);

/// Hands out the samples of another reader with float16 tensors converted to float32.
class float32_reader final : public calibration_data_reader {
 public:
  explicit float32_reader(calibration_data_reader& inner) : inner_(inner) {}
  std::optional<calib_sample> next() override;
  void rewind() override { inner_.rewind(); }
  [[nodiscard]] bool can_rewind() const noexcept override { return inner_.can_rewind(); }
  std::optional<std::size_t> size() const override { return inner_.size(); }
  std::vector<std::string> notes() const override { return inner_.notes(); }

 private:
  calibration_data_reader& inner_;
};

/// The quantizer of float32 models (quantize.cpp, static_quant.cpp).
using float32_quantizer =
    std::function<model(const model&, const qconfig&, calibration_data_reader&, quantize_report*,
                        const quantize_run_options&)>;

/// Whether `in` goes through the float16 path: it is a float16 model (QuantizeFP16 is then on,
/// as Quark enables it for float16 models). Throws config_error "quark.quantize.fp16" when
/// QuantizeFP16 is set on a model that is not float16.
bool float16_path(const model& in, const qconfig& cfg);

/// ConvertFP16ToFP32 = true and `in` is a float16 model: it is quantized as float32 and stays so.
/// Throws config_error "quark.config.conflict" when QuantizeFP16 = true is set as well.
bool converts_float16(const model& in, const qconfig& cfg);

/// Quantizes the float16 model `in`: to_float32, `quantize` with QuantizeFP16 / UseFP32Scale
/// removed and OptimizeModel false (Quark forces it off for float16 models), to_float16 with
/// float32 scales when UseFP32Scale is true or unset (its default is QuantizeFP16).
model quantize_float16_model(const model& in, const qconfig& cfg, calibration_data_reader& reader,
                             quantize_report* report, const quantize_run_options& run,
                             const float32_quantizer& quantize);

}  // namespace quark::onnx::qz
