// SPDX-License-Identifier: MIT
// One pass of the float model over the calibration data that hands named activations, as rows,
// to the algorithms that need statistics of them (SmoothQuant's maxima, GPTQ's Hessians; see
// algorithms.hpp).
#include <quark/onnx/runtime.hpp>

#include "quantizer/algorithms.hpp"
#include "quantizer/fp16_model.hpp"

namespace quark::onnx::qz {

std::size_t for_each_activation(const model& m, const std::map<std::string, std::size_t>& features,
                                calibration_data_reader& reader,
                                std::optional<std::size_t> max_samples, const std::string& who,
                                const activation_fold& fold) {
  std::size_t samples = 0;
  reader.rewind();
  {
    const runtime rt(m);
    while (!max_samples || samples < *max_samples) {
      std::optional<calib_sample> s = reader.next();
      if (!s)
        break;
      rt.run(*s, [&](std::string_view name, const tensor& value) {
        const auto it = features.find(std::string(name));
        if (it == features.end())
          return;
        const std::size_t k = it->second;
        const tensor v = value.type() == dtype_id::float16 ? float16_to_float32(value) : value;
        const shape_t& shape = v.shape();
        if (v.type() != dtype_id::float32 || shape.empty() ||
            static_cast<std::size_t>(shape.back()) != k) {
          throw frontend_error("quark.onnx.shape",
                               who + ": activation '" + it->first +
                                   "' is not a float tensor whose last dimension is the "
                                   "weight's " +
                                   std::to_string(k) + " rows");
        }
        const std::size_t t = shape.size() >= 2 ? static_cast<std::size_t>(shape.front()) : 1;
        if (v.size() == 0 || t == 0)
          return;
        try {
          fold(it->first, v.data<float>(), t);
        } catch (const quark::error& e) {
          throw frontend_error("quark.quantize.non_finite",
                               who + ": activation '" + it->first + "': " + e.what());
        }
      });
      ++samples;
    }
  }
  reader.rewind();
  if (samples == 0) {
    throw config_error("quark.quantize.no_data",
                       who +
                           ": the calibration data is empty (its statistics come from the "
                           "activations; give a reader, a folder or UseRandomData)");
  }
  return samples;
}

}  // namespace quark::onnx::qz
