// SPDX-License-Identifier: MIT
// Errors raised at the ONNX boundary. Messages name the culprit: the file, node, tensor, option
// or operator, and the numeric data_type code where one is involved.
#pragma once

#include <string>

#include <quark/core/error.hpp>

namespace quark::onnx {

/// Any failure in the ONNX frontend (malformed model, unsupported op, I/O failure, ...).
/// id() is a stable prefix such as "quark.onnx.load", "quark.onnx.unsupported_op".
class frontend_error : public quark::error {
 public:
  using quark::error::error;
};

}  // namespace quark::onnx
