// SPDX-License-Identifier: MIT
// PRIVATE: TensorsRangeFile, precomputed activation ranges read instead of calibrating.
//
// The file has the format SaveAndRestore writes (calibrate.cpp):
//
//     {"format": "quark-cpp calibration", "version": 1, "samples": 4,
//      "tensors": {"c1": {"type": "float32", "shape": [1, 4, 8, 8],
//                         "range": {"min": -1.5, "max": 2.25, "pof2_position": 6}}, ...}}
//
// Entries without "range" (non-float values SaveAndRestore lists) cover nothing; "format",
// "version", "samples", "type" and "shape" are optional, so a hand-written file needs only
// "tensors" and each range's "min" and "max".
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string>

namespace quark::onnx::qz {

struct file_range {
  float rmin = 0.0f;
  float rmax = 0.0f;
  std::optional<int> pof2_position;  ///< the power-of-two position a pof2 MinMSE search chose
};

/// The ranges of `file`. Throws frontend_error "quark.calib.range_file" naming the file (and the
/// tensor) for a missing file, invalid JSON, a file of another format, a tensor that is not one
/// of `values` (the model's inputs and node outputs), and a NaN, infinite or reversed range.
std::map<std::string, file_range> load_range_file(const std::filesystem::path& file,
                                                  const std::set<std::string>& values);

/// Empty when a restored power-of-two position is absent or in [-127, 127] (the scales
/// 2^-127 .. 2^127 pow2_scale holds, as Quark's scale2pos clamps them); else what is wrong with
/// it (a position of 2^31 - 1 made the scale 0, and negating INT_MIN overflowed).
std::string bad_pof2_position(const std::optional<int>& position);

}  // namespace quark::onnx::qz
