// SPDX-License-Identifier: MIT
// libFuzzer target for the ONNX model loader: parses arbitrary bytes as a ModelProto (and as a
// TensorProto), then exercises every read path of quark::onnx::model. The only acceptable failure
// is quark::onnx::frontend_error; anything else (crash, sanitizer report, other exception) is a
// bug. Build and run: see fuzz/README.md.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include <quark/onnx/io.hpp>
#include <quark/onnx/model.hpp>

namespace qo = quark::onnx;

namespace {

void exercise_model(std::string_view bytes) {
  auto m = qo::model::from_bytes(bytes);  // validates
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
  const auto again = qo::model::from_bytes(m.to_bytes());
  static_cast<void>(again.node_count());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  try {
    exercise_model(bytes);
  } catch (const qo::frontend_error&) {
  }
  try {
    static_cast<void>(qo::tensor_from_bytes(bytes));
  } catch (const qo::frontend_error&) {
  }
  return 0;
}
