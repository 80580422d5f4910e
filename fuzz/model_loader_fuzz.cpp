// SPDX-License-Identifier: MIT
// libFuzzer target for the ONNX model loader: parses arbitrary bytes as a ModelProto (and as a
// TensorProto), then exercises every read path of quark::onnx::model. The only acceptable failure
// is quark::onnx::frontend_error; anything else (crash, sanitizer report, other exception) is a
// bug. Build and run: see fuzz/README.md.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include <quark/onnx/io.hpp>
#include <quark/onnx/model.hpp>

#include <unistd.h>

namespace qo = quark::onnx;

namespace {

/// A folder holding a 64-byte "weights.bin", so external-data references can resolve.
std::filesystem::path data_dir;

void exercise_model(std::string_view bytes, const std::filesystem::path& base_dir) {
  auto m = qo::model::from_bytes(bytes, base_dir);  // validates
  static_cast<void>(m.inputs());
  static_cast<void>(m.outputs());
  static_cast<void>(m.opsets());
  static_cast<void>(m.topological_order());
  static_cast<void>(m.unsupported_ops({"Relu", "Conv", "Add"}));
  for (const auto& name : m.initializer_names()) {
    try {
      static_cast<void>(m.initializer(name));
    } catch (const qo::frontend_error&) {
    }
  }
  try {
    static_cast<void>(m.nodes());
  } catch (const qo::frontend_error&) {
  }
  m.constants_to_initializers();
  m.validate();
  // Inlining the model-local functions of a valid model gives a model that validates (or names
  // the function it cannot inline).
  try {
    auto inlined = m;
    if (inlined.inline_functions() > 0)
      inlined.validate();
  } catch (const qo::frontend_error&) {
  }
  const auto again = qo::model::from_bytes(m.to_bytes());
  static_cast<void>(again.node_count());
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  data_dir =
      std::filesystem::temp_directory_path() / ("quark_fuzz_data_" + std::to_string(::getpid()));
  std::filesystem::create_directories(data_dir);
  std::ofstream(data_dir / "weights.bin", std::ios::binary) << std::string(64, '\x3c');
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  for (const auto& dir : {std::filesystem::path(), data_dir}) {
    try {
      exercise_model(bytes, dir);
    } catch (const qo::frontend_error&) {
    }
  }
  try {
    static_cast<void>(qo::tensor_from_bytes(bytes, data_dir));
  } catch (const qo::frontend_error&) {
  }
  return 0;
}
