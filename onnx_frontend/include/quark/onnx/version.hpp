// SPDX-License-Identifier: MIT
// Version of the compiled ONNX frontend (same as the header library).
#pragma once

#include <quark/version.hpp>

namespace quark::onnx {
/// The library version the frontend was built with.
const char* frontend_version() noexcept;
}  // namespace quark::onnx
