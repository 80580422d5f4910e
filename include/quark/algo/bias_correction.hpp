// SPDX-License-Identifier: MIT
// The numbers of bias correction (quark-spec §10.3, Quark's bias_correction): the streaming
// per-channel mean of (float output - quantized output) of one layer over the calibration
// samples, and Quark's damped update of the bias, b' = b + k d with k = 1 unless the mean error
// is large against the bias (max|d| > max|b| / 256 and max|d| > 0.1: then k = (max|b| / 256) /
// max|d|). Running the float and the quantized layer is the caller's business; an integer bias is
// quantized again with the caller's scale by quark::quantize.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <quark/config.hpp>
#include <quark/core/error.hpp>

namespace quark::bias_correction {

namespace detail {
[[noreturn]] inline void throw_bc(const char* id, const std::string& what) {
  QUARK_THROW(invalid_argument(id, what));
}
}  // namespace detail

/// The per-channel mean of (reference - quantized) over outputs of shape [N, C, ...] (channel
/// axis 1: NC, NCHW, NCL, ...), streamed sample by sample. Memory: one double per channel.
///
/// ```cpp
/// quark::bias_correction::mean_difference d;
/// for (auto& s : samples) d.observe(float_out(s), quant_out(s), shape);   // shape {1, C, H, W}
/// std::vector<double> m = d.mean();                                        // C values
/// ```
class mean_difference {
 public:
  /// Adds one output pair. The first call fixes the channel count; a later shape with another
  /// channel count throws "quark.bias_correction.channel_mismatch".
  void observe(std::span<const float> reference, std::span<const float> quantized,
               std::span<const std::size_t> shape) {
    if (shape.size() < 2) {
      detail::throw_bc("quark.bias_correction.bad_rank",
                       "output of rank " + std::to_string(shape.size()) +
                           " has no channel axis (rank >= 2, axis 1)");
    }
    std::size_t n = 1;
    for (const std::size_t d : shape)
      n *= d;
    if (reference.size() != n || quantized.size() != n) {
      detail::throw_bc("quark.bias_correction.size_mismatch",
                       "reference has " + std::to_string(reference.size()) + " and quantized " +
                           std::to_string(quantized.size()) + " values, the shape " +
                           std::to_string(n));
    }
    const std::size_t c = shape[1];
    if (sum_.empty()) {
      sum_.assign(c, 0.0);
    } else if (sum_.size() != c) {
      detail::throw_bc("quark.bias_correction.channel_mismatch", "output has " + std::to_string(c) +
                                                                     " channels, earlier outputs " +
                                                                     std::to_string(sum_.size()));
    }
    if (n == 0)
      return;
    std::size_t inner = 1;
    for (std::size_t k = 2; k < shape.size(); ++k)
      inner *= shape[k];
    const std::size_t images = shape[0];
    for (std::size_t img = 0; img < images; ++img) {
      for (std::size_t ch = 0; ch < c; ++ch) {
        double acc = sum_[ch];
        const std::size_t at = (img * c + ch) * inner;
        for (std::size_t j = at; j < at + inner; ++j)
          acc += static_cast<double>(reference[j]) - static_cast<double>(quantized[j]);
        sum_[ch] = acc;
      }
    }
    count_ += static_cast<double>(n / c);
  }

  /// Channels (0 before the first observation).
  [[nodiscard]] std::size_t channels() const noexcept { return sum_.size(); }
  /// Elements accumulated per channel.
  [[nodiscard]] double count() const noexcept { return count_; }
  /// The mean difference per channel; throws "quark.bias_correction.empty_input" when nothing
  /// was observed.
  [[nodiscard]] std::vector<double> mean() const {
    if (sum_.empty() || count_ == 0.0)
      detail::throw_bc("quark.bias_correction.empty_input", "no output was observed");
    std::vector<double> m(sum_.size());
    for (std::size_t c = 0; c < m.size(); ++c)
      m[c] = sum_[c] / count_;
    return m;
  }

 private:
  std::vector<double> sum_;
  double count_ = 0.0;
};

/// Quark's damping factor k from max |d| and max |b|: 1, or (max_b / 256) / max_d when
/// max_d > max_b / 256 and max_d > 0.1.
///
///     quark::bias_correction::gain(0.05, 1.0) == 1.0      // small error: full correction
///     quark::bias_correction::gain(1.0, 256.0) == 1.0     // error below max|b| / 256
///     quark::bias_correction::gain(2.0, 256.0) == 0.5
inline double gain(double max_abs_diff, double max_abs_bias) noexcept {
  if (max_abs_diff > max_abs_bias / 256.0 && max_abs_diff > 0.1)
    return (max_abs_bias / 256.0) / max_abs_diff;
  return 1.0;
}

/// out[c] = float(b[c] + k d[c]) with k = gain(max |d|, max |b|): the corrected bias in float
/// (quantize it with the bias's scale afterwards when the bias is integer).
///
///     std::vector<float> b_new(c);
///     quark::bias_correction::correct(b, d.mean(), b_new);
inline void correct(std::span<const double> bias, std::span<const double> mean_diff,
                    std::span<float> out) {
  if (mean_diff.size() != bias.size() || out.size() != bias.size()) {
    detail::throw_bc("quark.bias_correction.channel_mismatch",
                     "bias has " + std::to_string(bias.size()) + " channels, the mean difference " +
                         std::to_string(mean_diff.size()) + ", the output " +
                         std::to_string(out.size()));
  }
  double max_d = 0.0, max_b = 0.0;
  for (std::size_t c = 0; c < bias.size(); ++c) {
    max_d = std::max(max_d, std::fabs(mean_diff[c]));
    max_b = std::max(max_b, std::fabs(bias[c]));
  }
  const double k = gain(max_d, max_b);
  for (std::size_t c = 0; c < bias.size(); ++c)
    out[c] = static_cast<float>(bias[c] + k * mean_diff[c]);
}

/// The real value of an integer bias code, (code - zero_point) * scale, computed in double: the
/// code is exact and the product rounds once (a large int32 code is not first rounded to float).
///
///     quark::bias_correction::dequantized(1000001, 0, 0.5f) == 500000.5
constexpr double dequantized(std::int64_t code, std::int64_t zero_point, float scale) noexcept {
  return static_cast<double>(code - zero_point) * static_cast<double>(scale);
}

}  // namespace quark::bias_correction
