// SPDX-License-Identifier: MIT
// Small helpers every test group shares, with no dependency beyond the core headers (the header
// and ONNX tests alike include it):
//
//     using namespace quark::test;
//     CHECK(error_id([&] { quark::adam(2).step(p, g3); }) == "quark.algo.size_mismatch");
//     const std::vector<float> w = random_floats(96, 7, -0.5f, 0.5f);
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <quark/core/error.hpp>

namespace quark::test {

/// True in a build with AddressSanitizer (the CI's Clang ASan + UBSan build). The few tests that
/// repeat one check over a large matrix of settings (each a whole quantization, 10-80 s under
/// the sanitizers) run a covering subset there: every setting once, not every combination; the
/// dev build runs them all.
#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool sanitized_build = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool sanitized_build = true;
#else
inline constexpr bool sanitized_build = false;
#endif
#else
inline constexpr bool sanitized_build = false;
#endif

/// The id of the quark::error `f` throws, or "none" when it throws none.
template <class F>
std::string error_id(F&& f) {
  try {
    f();
  } catch (const quark::error& e) {
    return std::string(e.id());
  }
  return "none";
}

/// what() of the quark::error `f` throws ("id: message"), or "" when it throws none.
template <class F>
std::string error_text(F&& f) {
  try {
    f();
  } catch (const quark::error& e) {
    return e.what();
  }
  return {};
}

/// `n` floats uniform in [lo, hi) from std::mt19937 seeded with `seed` (deterministic per seed).
inline std::vector<float> random_floats(std::size_t n, std::uint32_t seed, float lo = -1.0f,
                                        float hi = 1.0f) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v)
    x = u(g);
  return v;
}

/// `rows` x `k` floats with correlated columns: z A, z from random_floats(rows * k, seed) and the
/// k x k mixing matrix A from random_floats(k * k, mix_seed), summed in double. Calibration data
/// whose Hessian X^T X is far from diagonal (GPTQ's tests).
inline std::vector<float> correlated_floats(std::size_t rows, std::size_t k, std::uint32_t seed,
                                            std::uint32_t mix_seed) {
  const std::vector<float> a = random_floats(k * k, mix_seed);
  const std::vector<float> z = random_floats(rows * k, seed);
  std::vector<float> x(rows * k);
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::size_t j = 0; j < k; ++j) {
      double acc = 0.0;
      for (std::size_t i = 0; i < k; ++i)
        acc += static_cast<double>(z[r * k + i]) * static_cast<double>(a[i * k + j]);
      x[r * k + j] = static_cast<float>(acc);
    }
  }
  return x;
}

}  // namespace quark::test
