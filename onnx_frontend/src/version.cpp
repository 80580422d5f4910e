// SPDX-License-Identifier: MIT
#include <quark/onnx/version.hpp>

namespace quark::onnx {
const char* frontend_version() noexcept {
  return "0.1.0";
}
}  // namespace quark::onnx
