// SPDX-License-Identifier: MIT
// Private quantize-a-candidate helpers for the calibrators that search scales (MinMSE,
// LayerwisePercentile scoring) on a runtime integer grid. tests/calib/to_qparams_test.cpp checks
// them against compute_qparams and fake_quant of scale/ and quant/. They follow quark-spec §3.1
// (float64 scale and zero point, then a float32 scale), §2.2 (pof2 position = rint(-log2 s)) and
// the Q/DQ rule of style.md §3.6 (float32 division, round half to even, + zero point, clamp in the
// float domain, - zero point, times scale). Rounding is explicit, never the ambient FP mode.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <vector>

#include <quark/calib/calib_result.hpp>
#include <quark/config.hpp>
#include <quark/scale/pow2_scale.hpp>

namespace quark::detail {

/// Round half to even without the floating-point environment, and without branches: the
/// searches call it on every value of a tensor for each candidate, where a branch on the
/// fraction mispredicts half the time. f - 2 floor(f / 2) is f's parity, exact while f has
/// a unit in its last place of at most 1; beyond that v is an integer and d is 0.
/// +-Inf stays +-Inf and NaN stays NaN (d is NaN, so no increment).
template <class F>
QUARK_ALWAYS_INLINE F round_even(F v) noexcept {
  const F f = std::floor(v);
  const F d = v - f;  // exact
  const bool odd = (f - F(2) * std::floor(f * F(0.5))) != F(0);
  const bool up = (d > F(0.5)) | ((d == F(0.5)) & odd);
  return f + (up ? F(1) : F(0));
}

/// Float scale and zero point of quark-spec §3.1 (steps 2, 4, 5, 7, 8, 9). No NaN/Inf handling:
/// callers pass finite ranges.
struct grid_params {
  double scale = 1.0;  ///< float64 scale (the float32 one is static_cast<float>(scale))
  std::int64_t zero_point = 0;
};

inline grid_params scale_zp(double rmin_in, double rmax_in, int_grid g,
                            range_symmetry sym) noexcept {
  // Calibrated ranges are float32 and their width is a float32 subtraction (numpy on float32
  // ranges; the same rule as compute_qparams in scale/qparams.hpp).
  float rmin = std::fmin(static_cast<float>(rmin_in), 0.0f);
  float rmax = std::fmax(static_cast<float>(rmax_in), 0.0f);
  if (sym == range_symmetry::symmetric) {
    const float m = std::fmax(std::fabs(rmin), std::fabs(rmax));
    rmin = -m;
    rmax = m;
  }
  const double scale = static_cast<double>(rmax - rmin) /
                       (static_cast<double>(g.qmax) - static_cast<double>(g.qmin));
  if (!(scale >= static_cast<double>(std::numeric_limits<float>::min())))
    return {1.0, 0};
  grid_params p;
  p.scale = scale;
  p.zero_point = static_cast<std::int64_t>(
      round_even(static_cast<double>(g.qmin) - static_cast<double>(rmin) / scale));
  if (sym == range_symmetry::symmetric && g.qmin == 0 && g.qmax == 255 && p.zero_point == 127) {
    p.zero_point = 128;  // quark-spec §3.3
  }
  return p;
}

/// quark-spec §2.2: pos = int(rint(-log2(clamp(s, 2^-127, 2^127)))) of the float32 scale, via
/// the pow2_scale projection of scale/pow2_scale.hpp.
inline int scale_to_position(double s) noexcept {
  return scale_traits<pow2_scale>::from_float(static_cast<float>(s)).position();
}

/// Fake-quantizes one value on the grid (scale s, zero point zp).
inline float fake_quant(float x, float s, float zp, float qmin, float qmax) noexcept {
  float q = round_even(x / s) + zp;
  q = q < qmin ? qmin : (q > qmax ? qmax : q);
  return (q - zp) * s;
}

/// The float32 centres of the bins of `edges` (edges.size() - 1 of them): (e[i] + e[i+1]) / 2 in
/// double, then rounded to float, as the MinMSE searches score them.
inline std::vector<float> float_bin_centres(std::span<const double> edges) {
  std::vector<float> c(edges.empty() ? 0 : edges.size() - 1);
  for (std::size_t i = 0; i < c.size(); ++i)
    c[i] = static_cast<float>((edges[i] + edges[i + 1]) / 2.0);
  return c;
}

/// NaN to 0, +-Inf to +-FLT_MAX (numpy.nan_to_num on float32).
inline float to_finite(float v) noexcept {
  constexpr float big = std::numeric_limits<float>::max();
  return v != v ? 0.0f : (v > big ? big : (v < -big ? -big : v));
}

/// err[k] = v - fq(v) in double for v = to_finite(p[k]), k < m, with fq fake_quant on the
/// grid (any float scale s): the same numbers as the scalar formula. Where the compiler has vector
/// extensions and the grid is at most 2^24 wide, 8 lanes at a time: x / s is clamped to one step
/// beyond the grid before rounding (the result clamps to the same end either way), which keeps it
/// in int32 range, so the floor is a truncation and half-to-even reads the parity of an integer.
inline void fq_errors(const float* p, std::size_t m, float s, float zp, float qmin, float qmax,
                      double* err) noexcept {
  std::size_t k = 0;
#if defined(__GNUC__)
  constexpr float wide = 0x1p24f;
  if (qmax - zp + 1.0f < wide && qmin - zp - 1.0f > -wide) {
    constexpr std::size_t lanes = 8;
    using vf = float __attribute__((vector_size(lanes * sizeof(float))));
    using vi = std::int32_t __attribute__((vector_size(lanes * sizeof(std::int32_t))));
    using vd = double __attribute__((vector_size(lanes * sizeof(double))));
    constexpr float big = std::numeric_limits<float>::max();
    const float lo = qmin - zp - 1.0f;  // integers: exact
    const float hi = qmax - zp + 1.0f;
    const vf zero{};
    for (; k + lanes <= m; k += lanes) {
      vf v;
      std::memcpy(&v, p + k, sizeof(v));
      v = v == v ? v : zero;  // nan_to_num
      v = v > big ? big : v;
      v = v < -big ? -big : v;
      vf q = v / s;
      q = q < lo ? lo : q;
      q = q > hi ? hi : q;
      const vi t = __builtin_convertvector(q, vi);             // toward zero
      const vi fl = t + (__builtin_convertvector(t, vf) > q);  // floor (true is -1)
      const vf d = q - __builtin_convertvector(fl, vf);        // exact, in [0, 1)
      const vi odd = -(fl & 1);
      const vi up = (d > 0.5f) | ((d == 0.5f) & odd);
      vf r = __builtin_convertvector(fl - up, vf) + zp;  // round half to even, + zp
      r = r < qmin ? qmin : r;
      r = r > qmax ? qmax : r;
      const vf dq = (r - zp) * s;
      const vd e = __builtin_convertvector(v, vd) - __builtin_convertvector(dq, vd);
      std::memcpy(err + k, &e, sizeof(e));
    }
  }
#endif
  for (; k < m; ++k) {
    const float v = to_finite(p[k]);
    err[k] = static_cast<double>(v) - static_cast<double>(fake_quant(v, s, zp, qmin, qmax));
  }
}

}  // namespace quark::detail
