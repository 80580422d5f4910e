// SPDX-License-Identifier: MIT
// The numbers of cross-layer equalization (quark-spec §10.1, Quark's cle_transforms): per-channel
// weight ranges along the output or input channel of a Conv / Gemm weight, the head range with
// the bias column and Quark's shrink rule, the pair scales s = r1 / sqrt(r0 r1) with the
// weight-threshold rule, the triple scales by cube root (Conv, depthwise Conv, Conv), and their
// application to weights and biases. Graph matching (which layers form a pair, what may sit
// between them) is the caller's business; everything here works on flat spans of one weight with
// an explicit weight_layout. Ranges and scales are computed in double, weights are rescaled in
// double and rounded once to their element type.
#pragma once

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <quark/config.hpp>
#include <quark/core/error.hpp>

namespace quark::cle {

/// How the elements of one weight tensor map to output and input channels.
///
/// `channels_first`: shape [out, in / groups, kernel...] (ONNX Conv, Gemm with transB = 1,
/// a grouped or depthwise Conv with groups > 1); `kernel` is the product of the spatial
/// dimensions (1 for Gemm). `in_major`: shape [in, out] (Gemm with transB = 0, MatMul B).
struct weight_layout {
  enum class order : std::uint8_t { channels_first, in_major };
  order storage = order::channels_first;
  std::size_t out_channels = 0;
  std::size_t in_channels = 0;  ///< over all groups
  std::size_t groups = 1;
  std::size_t kernel = 1;

  /// Conv weight [out, in / groups, k...] (depthwise: groups == out == in).
  static constexpr weight_layout conv(std::size_t out, std::size_t in, std::size_t kernel,
                                      std::size_t groups = 1) noexcept {
    return {order::channels_first, out, in, groups, kernel};
  }
  /// Gemm B with transB = 1: [out, in].
  static constexpr weight_layout out_in(std::size_t out, std::size_t in) noexcept {
    return {order::channels_first, out, in, 1, 1};
  }
  /// Gemm B with transB = 0 / MatMul B: [in, out].
  static constexpr weight_layout in_out(std::size_t in, std::size_t out) noexcept {
    return {order::in_major, out, in, 1, 1};
  }
  /// Elements the layout describes.
  [[nodiscard]] constexpr std::size_t size() const noexcept {
    return groups == 0 ? 0 : out_channels * (in_channels / groups) * kernel;
  }
};

/// Multiply or divide a tensor by per-channel scales.
enum class scale_op : std::uint8_t { multiply, divide };

/// Quark's pair options (quark-spec §10.1 CLE options).
struct pair_options {
  /// Fold the head's bias into its range (Quark's scale_append_bias; head_range_with_bias).
  bool append_bias = true;
  /// Keep scale 1 where r0 + r1 < weight_threshold (Quark's scale_use_threshold).
  bool use_threshold = true;
  double weight_threshold = 0.5;
};

namespace detail {

[[noreturn]] inline void throw_cle(const char* id, const std::string& what) {
  QUARK_THROW(invalid_argument(id, what));
}

inline void check_layout(const weight_layout& l, std::size_t n) {
  if (l.groups == 0 || l.out_channels % l.groups != 0 || l.in_channels % l.groups != 0 ||
      (l.storage == weight_layout::order::in_major && (l.groups != 1 || l.kernel != 1))) {
    throw_cle("quark.cle.bad_layout", "out " + std::to_string(l.out_channels) + ", in " +
                                          std::to_string(l.in_channels) + ", groups " +
                                          std::to_string(l.groups) + ", kernel " +
                                          std::to_string(l.kernel) + " is not a weight layout");
  }
  if (l.size() != n || n == 0) {
    throw_cle("quark.cle.shape_mismatch", "weight has " + std::to_string(n) +
                                              " values but its layout has " +
                                              std::to_string(l.size()));
  }
}

inline void check_channels(std::size_t got, std::size_t want, const char* what) {
  if (got != want) {
    throw_cle("quark.cle.channel_mismatch", std::string(what) + " has " + std::to_string(got) +
                                                " channels, expected " + std::to_string(want));
  }
}

/// Calls fn(output channel, element index) for every element, in element order.
template <class F>
void for_each_out(const weight_layout& l, F&& fn) {
  if (l.storage == weight_layout::order::in_major) {
    std::size_t e = 0;
    for (std::size_t i = 0; i < l.in_channels; ++i)
      for (std::size_t o = 0; o < l.out_channels; ++o)
        fn(o, e++);
    return;
  }
  const std::size_t per = (l.in_channels / l.groups) * l.kernel;
  std::size_t e = 0;
  for (std::size_t o = 0; o < l.out_channels; ++o)
    for (std::size_t j = 0; j < per; ++j)
      fn(o, e++);
}

/// Calls fn(input channel, element index) for every element, in element order.
template <class F>
void for_each_in(const weight_layout& l, F&& fn) {
  if (l.storage == weight_layout::order::in_major) {
    std::size_t e = 0;
    for (std::size_t i = 0; i < l.in_channels; ++i)
      for (std::size_t o = 0; o < l.out_channels; ++o)
        fn(i, e++);
    return;
  }
  const std::size_t in_g = l.in_channels / l.groups;
  const std::size_t out_g = l.out_channels / l.groups;
  std::size_t e = 0;
  for (std::size_t o = 0; o < l.out_channels; ++o) {
    const std::size_t first = (o / out_g) * in_g;
    for (std::size_t i = 0; i < in_g; ++i)
      for (std::size_t k = 0; k < l.kernel; ++k)
        fn(first + i, e++);
  }
}

template <std::floating_point T>
void scale_one(T& v, double s, scale_op op) noexcept {
  const auto x = static_cast<double>(v);
  v = static_cast<T>(op == scale_op::divide ? x / s : x * s);
}

/// The median of v (mean of the two middle values for an even count); reorders v.
inline double median(std::span<double> v) {
  if (v.empty())
    return 0.0;
  const std::size_t mid = v.size() / 2;
  const auto at = v.begin() + static_cast<std::ptrdiff_t>(mid);
  std::nth_element(v.begin(), at, v.end());
  const double hi = *at;
  if (v.size() % 2 == 1)
    return hi;
  return (*std::max_element(v.begin(), at) + hi) / 2.0;
}

}  // namespace detail

/// r[c] = max |w| over output channel c (r.size() == l.out_channels).
///
///     std::vector<double> r(16);
///     quark::cle::out_channel_absmax<float>(w, quark::cle::weight_layout::conv(16, 8, 9), r);
template <std::floating_point T>
void out_channel_absmax(std::span<const T> w, const weight_layout& l, std::span<double> r) {
  detail::check_layout(l, w.size());
  detail::check_channels(r.size(), l.out_channels, "the output range");
  std::fill(r.begin(), r.end(), 0.0);
  detail::for_each_out(l, [&](std::size_t c, std::size_t e) {
    r[c] = std::max(r[c], std::fabs(static_cast<double>(w[e])));
  });
}

/// r[c] = max |w| over input channel c (r.size() == l.in_channels).
template <std::floating_point T>
void in_channel_absmax(std::span<const T> w, const weight_layout& l, std::span<double> r) {
  detail::check_layout(l, w.size());
  detail::check_channels(r.size(), l.in_channels, "the input range");
  std::fill(r.begin(), r.end(), 0.0);
  detail::for_each_in(l, [&](std::size_t c, std::size_t e) {
    r[c] = std::max(r[c], std::fabs(static_cast<double>(w[e])));
  });
}

/// w *= s (or /= s) along the output channel; each element computed in double, rounded once.
template <std::floating_point T>
void scale_out_channels(std::span<T> w, const weight_layout& l, std::span<const double> s,
                        scale_op op) {
  detail::check_layout(l, w.size());
  detail::check_channels(s.size(), l.out_channels, "the scale");
  detail::for_each_out(l, [&](std::size_t c, std::size_t e) { detail::scale_one(w[e], s[c], op); });
}

/// w *= s (or /= s) along the input channel.
template <std::floating_point T>
void scale_in_channels(std::span<T> w, const weight_layout& l, std::span<const double> s,
                       scale_op op) {
  detail::check_layout(l, w.size());
  detail::check_channels(s.size(), l.in_channels, "the scale");
  detail::for_each_in(l, [&](std::size_t c, std::size_t e) { detail::scale_one(w[e], s[c], op); });
}

/// b[c] *= s[c] (or /= s[c]): a bias (or any per-channel vector).
template <std::floating_point T>
void scale_channels(std::span<T> b, std::span<const double> s, scale_op op) {
  detail::check_channels(b.size(), s.size(), "the bias");
  for (std::size_t c = 0; c < b.size(); ++c)
    detail::scale_one(b[c], s[c], op);
}

/// Quark's shrink divisor for the bias column (its _combine_weight_and_bias), from the largest
/// |bias|, the largest clamped |weight|, and the median and mean of |bias_c| / |w| over the
/// weight elements:
///
/// | max_b < 10 and max_b / max_w < 20 | median > 100 or mean > 1000 | 5, else 2 |
/// | otherwise                         | median > 30 or mean > 500   | 20        |
/// |                                   | median > 15 or mean > 100   | 10        |
/// |                                   | else                        | 5         |
///
///     quark::cle::bias_shrink(1.0, 1.0, 0.5, 0.5) == 2.0
inline double bias_shrink(double max_b, double max_w, double median, double mean) noexcept {
  if (max_b < 10.0 && max_b / max_w < 20.0)
    return (median > 100.0 || mean > 1000.0) ? 5.0 : 2.0;
  if (median > 30.0 || mean > 500.0)
    return 20.0;
  if (median > 15.0 || mean > 100.0)
    return 10.0;
  return 5.0;
}

/// The head's per-output-channel range with its bias as an extra column (quark-spec §10.1):
/// r[c] = max(max |w_c|, |b'_c| / shrink), shrink = bias_shrink(...) over the factors
/// |b'_c| / |w'_e|. As in Quark, when some weight is zero: an all-zero channel's bias b'_c is 0
/// and its weights count as 1e-7, a zero inside a partly non-zero channel counts as that channel's
/// smallest non-zero magnitude; any |w'| below 1e-7 counts as 1e-7. Allocates one double per
/// weight element (the factors whose median is taken) before its loops.
///
///     std::vector<double> r0(out);
///     quark::cle::head_range_with_bias<float>(w, layout, bias, r0);
template <std::floating_point T>
void head_range_with_bias(std::span<const T> w, const weight_layout& l, std::span<const T> b,
                          std::span<double> r) {
  detail::check_layout(l, w.size());
  detail::check_channels(b.size(), l.out_channels, "the bias");
  detail::check_channels(r.size(), l.out_channels, "the output range");
  const std::size_t n = w.size();
  const std::size_t per = n / l.out_channels;
  std::vector<std::size_t> nonzero(l.out_channels, 0);
  std::vector<double> min_nonzero(l.out_channels, HUGE_VAL);
  std::vector<double> factor(n);
  std::size_t total_nonzero = 0;
  detail::for_each_out(l, [&](std::size_t c, std::size_t e) {
    if (w[e] != T{0}) {
      ++nonzero[c];
      ++total_nonzero;
      min_nonzero[c] = std::min(min_nonzero[c], std::fabs(static_cast<double>(w[e])));
    }
  });
  const bool any_zero = total_nonzero != n;
  auto bias_of = [&](std::size_t c) {
    return (any_zero && nonzero[c] == 0) ? 0.0 : static_cast<double>(b[c]);
  };
  double max_w = 0.0;
  detail::for_each_out(l, [&](std::size_t c, std::size_t e) {
    auto v = static_cast<double>(w[e]);
    if (any_zero) {
      if (nonzero[c] == 0)
        v = 1e-7;
      else if (nonzero[c] != per && v == 0.0)
        v = -min_nonzero[c];
    }
    if (std::fabs(v) < 1e-7)
      v = 1e-7;
    max_w = std::max(max_w, std::fabs(v));
    factor[e] = std::fabs(bias_of(c)) / std::fabs(v);
  });
  double max_b = 0.0;
  for (const T x : b)
    max_b = std::max(max_b, std::fabs(static_cast<double>(x)));
  double mean = 0.0;
  for (const double f : factor)
    mean += f;
  mean /= static_cast<double>(n);
  const double shrink = bias_shrink(max_b, max_w, detail::median(factor), mean);
  out_channel_absmax(w, l, r);
  for (std::size_t c = 0; c < l.out_channels; ++c)
    r[c] = std::max(r[c], std::fabs(bias_of(c) / shrink));
}

/// The pair scales from the head's output range r0 and the tail's input range r1:
/// s[c] = r1 / sqrt(r0 r1) (so r0 s = r1 / s = sqrt(r0 r1)), 1 where r0 r1 == 0, and 1 where
/// r0 + r1 < weight_threshold when use_threshold. The head is multiplied by s (weights along
/// the output channel and bias), the tail divided along its input channel.
///
///     quark::cle::pair_scales(r0, r1, s, {});   // r0 = {4}, r1 = {1}: s = {0.5}
inline void pair_scales(std::span<const double> r0, std::span<const double> r1, std::span<double> s,
                        const pair_options& o) {
  detail::check_channels(r1.size(), r0.size(), "the tail");
  detail::check_channels(s.size(), r0.size(), "the scale");
  for (std::size_t c = 0; c < r0.size(); ++c) {
    const double root = std::sqrt(r0[c] * r1[c]);
    s[c] = root != 0.0 ? r1[c] / root : 1.0;
    if (o.use_threshold && r0[c] + r1[c] < o.weight_threshold)
      s[c] = 1.0;
  }
}

/// The three scale vectors of a Conv -> depthwise Conv -> Conv triple (Quark's
/// _cross_layer_equalization_depthwise) from m0 (first Conv, output range), m1 (depthwise,
/// output range) and m2 (last Conv, input range): g = cbrt(m0 m1 m2), s01 = m0 / g,
/// s12 = g / m2, s_dw = s01 / s12 (a non-finite or zero s01 / s12 becomes 1). Applied as:
/// W0, b0 /= s01 (output channel); W1 *= s_dw (output channel), b1 /= s12; W2 *= s12 (input
/// channel). Afterwards each of the three ranges equals g.
inline void triple_scales(std::span<const double> m0, std::span<const double> m1,
                          std::span<const double> m2, std::span<double> s01, std::span<double> s12,
                          std::span<double> s_dw) {
  const std::size_t c = m0.size();
  detail::check_channels(m1.size(), c, "the depthwise range");
  detail::check_channels(m2.size(), c, "the last range");
  detail::check_channels(s01.size(), c, "the scale");
  detail::check_channels(s12.size(), c, "the scale");
  detail::check_channels(s_dw.size(), c, "the scale");
  auto fix = [](double v) { return (std::isfinite(v) && v != 0.0) ? v : 1.0; };
  for (std::size_t k = 0; k < c; ++k) {
    const double g = std::cbrt(m0[k] * m1[k] * m2[k]);
    s01[k] = fix(m0[k] / g);
    s12[k] = fix(g / m2[k]);
    s_dw[k] = s01[k] / s12[k];
  }
}

/// One weighted layer of a pattern: its weight, layout and optional bias (empty: none).
template <std::floating_point T>
struct layer_ref {
  std::span<T> weight;
  weight_layout layout;
  std::span<T> bias = {};
};

/// One equalization step of a pair head -> tail (head output channels == tail input channels):
/// ranges, pair_scales, then head *= s and tail /= s. Returns nothing; the caller iterates
/// (Quark repeats until the weights stop changing, quark-spec §10.1).
///
///     quark::cle::equalize_pair<float>({w0, quark::cle::weight_layout::conv(32, 16, 9), b0},
///                                      {w1, quark::cle::weight_layout::conv(8, 32, 1)}, {});
template <std::floating_point T>
void equalize_pair(const layer_ref<T>& head, const layer_ref<T>& tail, const pair_options& o) {
  const std::size_t c = head.layout.out_channels;
  detail::check_channels(tail.layout.in_channels, c, "the tail");
  std::vector<double> r0(c), r1(c), s(c);
  if (o.append_bias && !head.bias.empty())
    head_range_with_bias<T>(head.weight, head.layout, head.bias, r0);
  else
    out_channel_absmax<T>(head.weight, head.layout, r0);
  in_channel_absmax<T>(tail.weight, tail.layout, r1);
  pair_scales(r0, r1, s, o);
  scale_out_channels(head.weight, head.layout, std::span<const double>(s), scale_op::multiply);
  if (!head.bias.empty())
    scale_channels(head.bias, std::span<const double>(s), scale_op::multiply);
  scale_in_channels(tail.weight, tail.layout, std::span<const double>(s), scale_op::divide);
}

/// One equalization step of a Conv -> depthwise Conv -> Conv triple (see triple_scales).
template <std::floating_point T>
void equalize_triple(const layer_ref<T>& first, const layer_ref<T>& depthwise,
                     const layer_ref<T>& last) {
  const std::size_t c = first.layout.out_channels;
  detail::check_channels(depthwise.layout.out_channels, c, "the depthwise layer");
  detail::check_channels(depthwise.layout.in_channels, c, "the depthwise layer");
  detail::check_channels(last.layout.in_channels, c, "the last layer");
  std::vector<double> m0(c), m1(c), m2(c), s01(c), s12(c), s_dw(c);
  out_channel_absmax<T>(first.weight, first.layout, m0);
  out_channel_absmax<T>(depthwise.weight, depthwise.layout, m1);
  in_channel_absmax<T>(last.weight, last.layout, m2);
  triple_scales(m0, m1, m2, s01, s12, s_dw);
  const std::span<const double> a(s01), b(s12), d(s_dw);
  scale_out_channels(first.weight, first.layout, a, scale_op::divide);
  if (!first.bias.empty())
    scale_channels(first.bias, a, scale_op::divide);
  scale_out_channels(depthwise.weight, depthwise.layout, d, scale_op::multiply);
  if (!depthwise.bias.empty())
    scale_channels(depthwise.bias, b, scale_op::divide);
  scale_in_channels(last.weight, last.layout, b, scale_op::multiply);
}

/// mean |after - before| over the elements (in double; 0 for empty spans): one weight's term of
/// the stop rule.
template <std::floating_point T>
double mean_abs_change(std::span<const T> before, std::span<const T> after) {
  detail::check_channels(after.size(), before.size(), "the weight after the step");
  if (before.empty())
    return 0.0;
  double sum = 0.0;
  for (std::size_t k = 0; k < before.size(); ++k)
    sum += std::fabs(static_cast<double>(before[k]) - static_cast<double>(after[k]));
  return sum / static_cast<double>(before.size());
}

/// Quark's rule for repeating CLE passes (quark-spec §10.1, cle_steps and
/// cle_total_layer_diff_threshold): the change of a pass is the sum over the equalized weights of
/// mean_abs_change; passes go on while the last distinct change (10 before the first pass) is
/// above `threshold`, fewer than 20 passes in a row repeated it (within 1e-9), and fewer than
/// `max_steps` passes ran (a negative `max_steps`: no limit).
///
/// ```cpp
/// quark::cle::stop_rule rule(1e-6, -1);
/// while (rule.more()) {
///   // save the weights, equalize every pattern once, then:
///   rule.record(sum_of_mean_abs_changes);
/// }
/// ```
class stop_rule {
 public:
  stop_rule(double threshold, std::int64_t max_steps) noexcept
      : threshold_(threshold), max_steps_(max_steps) {}
  /// Whether another pass should run.
  [[nodiscard]] bool more() const noexcept {
    return diff_ > threshold_ && unchanged_ < 20 &&
           (max_steps_ < 0 || steps_ < static_cast<std::uint64_t>(max_steps_));
  }
  /// Records the change of the pass that just ran.
  void record(double change) noexcept {
    if (std::fabs(diff_ - change) > 1e-9) {
      unchanged_ = 0;
      diff_ = change;
    } else {
      ++unchanged_;
    }
    ++steps_;
  }
  /// Passes recorded.
  [[nodiscard]] std::uint64_t steps() const noexcept { return steps_; }

 private:
  double threshold_;
  std::int64_t max_steps_;
  double diff_ = 10.0;
  int unchanged_ = 0;
  std::uint64_t steps_ = 0;
};

}  // namespace quark::cle
