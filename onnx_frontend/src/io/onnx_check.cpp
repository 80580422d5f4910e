// SPDX-License-Identifier: MIT
// model::run_onnx_checker(): the reference checker of the linked libonnx, as an optional extra
// after validate(). libonnx 1.12 knows IR versions up to 8, opsets up to 17 and data types up to
// BFLOAT16 (16), so newer models fail it even when they are valid; validate() has no such limit.
#include <onnx/checker.h>

#include "io/proto_access.hpp"

namespace quark::onnx {

void model::run_onnx_checker() const {
  try {
    ::onnx::checker::check_model(proto_access::get(*this).proto);
  } catch (const std::exception& e) {
    throw frontend_error("quark.onnx.check",
                         std::string("the ONNX checker rejects the model: ") + e.what());
  }
}

}  // namespace quark::onnx
