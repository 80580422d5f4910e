// SPDX-License-Identifier: MIT
// TensorsRangeFile (see range_file.hpp).
#include "quantizer/range_file.hpp"

#include <cmath>
#include <fstream>

#include <nlohmann/json.hpp>

#include <quark/observer/json.hpp>
#include <quark/onnx/error.hpp>

namespace quark::onnx::qz {

std::map<std::string, file_range> load_range_file(const std::filesystem::path& file,
                                                  const std::set<std::string>& values) {
  const std::string where = "TensorsRangeFile '" + file.string() + "'";
  auto fail = [&](const std::string& what) {
    throw frontend_error("quark.calib.range_file", where + ": " + what);
  };
  std::error_code ec;
  if (!std::filesystem::is_regular_file(file, ec))
    fail("no such file");
  std::ifstream in(file);
  if (!in)
    fail("cannot be opened");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    fail(std::string("not valid JSON: ") + e.what());
  }
  if (!j.is_object() || !j.contains("tensors") || !j.at("tensors").is_object())
    fail("not a calibration file (no \"tensors\" object; SaveAndRestore writes the format)");
  if (j.contains("format") && j.at("format") != "quark-cpp calibration")
    fail("format " + j.at("format").dump() + " is not \"quark-cpp calibration\"");
  std::map<std::string, file_range> out;
  for (const auto& [name, e] : j.at("tensors").items()) {
    if (!values.contains(name))
      fail("tensor '" + name + "' is not a value of the model");
    if (!e.is_object() || !e.contains("range"))
      continue;
    calibrated_range r;
    try {
      r = e.at("range").get<calibrated_range>();
    } catch (const nlohmann::json::exception& x) {
      fail("tensor '" + name + "': malformed range: " + x.what());
    } catch (const quark::invalid_argument& x) {
      fail("tensor '" + name + "': malformed range: " + x.message());
    }
    if (const std::string bad = bad_pof2_position(r.pof2_position); !bad.empty())
      fail("tensor '" + name + "': " + bad);
    if (std::isnan(r.min) || std::isnan(r.max))
      fail("tensor '" + name + "' has a NaN range");
    if (!std::isfinite(r.min) || !std::isfinite(r.max))
      fail("tensor '" + name + "' has an infinite range");
    if (r.min > r.max) {
      fail("tensor '" + name + "' has min " + std::to_string(r.min) + " > max " +
           std::to_string(r.max));
    }
    out[name] = {r.min, r.max, r.pof2_position};
  }
  return out;
}

std::string bad_pof2_position(const std::optional<int>& position) {
  if (!position || (*position >= -127 && *position <= 127))
    return {};
  return "pof2_position " + std::to_string(*position) +
         " is outside [-127, 127] (power-of-two scales 2^-127 .. 2^127, as Quark's scale2pos "
         "clamps them)";
}

}  // namespace quark::onnx::qz
