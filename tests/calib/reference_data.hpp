// SPDX-License-Identifier: MIT
// The data of tests/calib/data/gen_reference.py, regenerated in C++ from the same 32-bit LCG,
// and the loader of the numpy reference results (reference.json).
#pragma once

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace quark_test {

/// Same arithmetic as lcg_data() in gen_reference.py: float64 throughout, one float32 rounding.
inline std::vector<float> lcg_data(std::size_t n, std::uint32_t seed, double sigma, double mu,
                                   std::size_t outlier_every = 97, double outlier_gain = 6.0) {
  std::uint32_t state = seed;
  std::vector<float> out(n);
  for (std::size_t k = 0; k < n; ++k) {
    double s = 0.0;
    for (int r = 0; r < 4; ++r) {
      state = state * 1664525u + 1013904223u;
      s += static_cast<double>(state >> 8) * 0x1p-24;
    }
    double v = (s - 2.0) * sigma + mu;
    if (k % outlier_every == 0)
      v *= outlier_gain;
    out[k] = static_cast<float>(v);
  }
  return out;
}

/// Dataset "a": 20000 values, sigma 1.5, mean 0.3, every 97th value x6.
inline std::vector<float> data_a() {
  return lcg_data(20000, 12345, 1.5, 0.3);
}
/// Dataset "grow": 7 batches of 3000 values with growing spread (the range grows per batch).
inline std::vector<float> data_grow() {
  std::vector<float> out;
  for (std::uint32_t b = 0; b < 7; ++b) {
    const auto part = lcg_data(3000, 777 + b, 0.5 * (1 + b), 0.1 * b);
    out.insert(out.end(), part.begin(), part.end());
  }
  return out;
}
/// Dataset "w": a 4096-value weight tensor with outliers.
inline std::vector<float> data_w() {
  return lcg_data(4096, 4242, 0.05, 0.0, 61, 9.0);
}

/// gen_reference.py's split(): parts of ceil(n / parts) values.
inline std::vector<std::span<const float>> split(std::span<const float> x, std::size_t parts) {
  std::vector<std::span<const float>> out;
  const std::size_t step = (x.size() + parts - 1) / parts;
  for (std::size_t i = 0; i < x.size(); i += step)
    out.push_back(x.subspan(i, std::min(step, x.size() - i)));
  return out;
}

inline const nlohmann::json& reference() {
  static const nlohmann::json j = [] {
    const char* root = std::getenv("QUARK_SOURCE_DIR");
    std::ifstream in(std::string(root ? root : ".") + "/tests/calib/data/reference.json");
    return nlohmann::json::parse(in);
  }();
  return j;
}

}  // namespace quark_test
