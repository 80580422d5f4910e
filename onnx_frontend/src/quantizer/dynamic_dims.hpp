// SPDX-License-Identifier: MIT
// PRIVATE: dynamic input dims in messages. Random calibration data sets each dynamic dim that
// RandomDataReaderInputShape does not give to 1; the reader's note and the error a runtime
// failure gets during calibration both say so, through these two helpers.
#pragma once

#include <cstddef>
#include <string>

#include <quark/onnx/tensor.hpp>

namespace quark::onnx::qz {

/// "[?x3x?x?]": `s` with its dynamic (negative) dims as '?'.
inline std::string dims_text(const shape_t& s) {
  std::string out = "[";
  for (std::size_t i = 0; i < s.size(); ++i) {
    // Appended piece by piece: `"x" + std::string&&` made GCC 12 -O3 report a false -Wrestrict.
    if (i)
      out += 'x';
    out += s[i] < 0 ? std::string("?") : std::to_string(s[i]);
  }
  return out + "]";
}

/// Whether `actual` is 1 in a dim `declared` leaves dynamic, past the batch: a batch of 1 is the
/// norm, so the first dim counts only in a rank-1 shape.
inline bool dynamic_dim_at_one(const shape_t& declared, const shape_t& actual) {
  for (std::size_t d = actual.size() > 1 ? 1 : 0; d < actual.size() && d < declared.size(); ++d) {
    if (declared[d] < 0 && actual[d] == 1)
      return true;
  }
  return false;
}

}  // namespace quark::onnx::qz
