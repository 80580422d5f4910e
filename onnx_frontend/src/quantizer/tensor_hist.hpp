// SPDX-License-Identifier: MIT
// PRIVATE: SaveTensorHistFig. Per calibrated tensor of a histogram method (Percentile, Entropy,
// Distribution, LayerwisePercentile, power-of-two MinMSE "All"), a JSON file with the histogram
// (bin edges, counts) and the chosen range, and an SVG bar plot of it, written atomically into
// a folder (Quark: "tensor_hist" in the working directory).
//
//     auto w = qz::write_tensor_hists(std::filesystem::current_path() / "tensor_hist", cal, req);
//     // w.written: tensors written; w.without_histogram: calibrated by a non-histogram method
#pragma once

#include <cstddef>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "quantizer/calibrate.hpp"

namespace quark::onnx::qz {

struct tensor_hist_result {
  std::size_t written = 0;                     ///< tensors with a .json and an .svg
  std::vector<std::string> without_histogram;  ///< calibrated tensors of other methods
};

/// The file stem of `tensor` in the folder: '/', '.', ':' and every other character outside
/// [A-Za-z0-9_-] become '_' (Quark replaces '/', '.', ':').
std::string hist_file_stem(const std::string& tensor);

/// Writes `<dir>/<stem>.json` and `<dir>/<stem>.svg` for every tensor of `cal` that has a
/// histogram (creating `dir`); two tensors with the same stem get "_2", "_3", ... in name order.
/// `requests` gives each tensor's method for the files. Throws frontend_error
/// "quark.calib.hist_file" naming the path that cannot be created or written (each file is
/// written to a temporary and renamed, so no half-written file is left).
tensor_hist_result write_tensor_hists(const std::filesystem::path& dir, const calib_output& cal,
                                      const std::map<std::string, calib_request>& requests);

}  // namespace quark::onnx::qz
