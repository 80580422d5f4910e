// SPDX-License-Identifier: MIT
// GPTQ (Frantar et al. 2022; quark-spec §10.4): integer codes for the weight W [K, N] of a layer
// y = x W (an ONNX MatMul's B: K input features, N outputs, row-major) chosen so that the layer's
// output moves little, not so that each weight moves little.
//
// The measure. Over the calibration inputs x (rows of K features) the output error of a change
// D = W - What is sum over samples of |x D|^2, i.e. for every output column d of D the quadratic
// form d^T H d with H proportional to sum x^T x. Quark keeps the running mean
//
//     per batch of leading dimension t:  H <- H n / (n + t);  n <- n + t;  H <- H + (2 / n) X^T X,
//
// so H = (2 / n) X^T X over all batches (gptq_hessian, in double).
//
// The solver. The rows of W (one per input feature) are rounded one at a time, in order. Once
// row i is fixed at its codes, the best correction of the rows not yet fixed is known in closed
// form (the optimal brain surgeon step): with U the upper triangular factor of H^-1
// (U^T U = H^-1, positive diagonal), row i's error e = (w_i - what_i) / U_ii is spread to every
// later row j as w_j <- w_j - U_ij e. Fixed rows never change again, so the whole pass costs one
// factorisation. It also keeps an exact account: the final D = W - What equals U^T E with E the
// rows e, so sum over columns d^T H d = |E|^2 (reported as gptq_result::loss; H here is the
// damped Hessian the solver used).
//
// Refinements, all of standard GPTQ:
//  * a feature that never fired (H_kk = 0) gets H_kk = 1 and its row of W is set to 0 first;
//  * damping: perc_damp * mean(diag H) is added to the diagonal so that H is positive definite;
//  * act_order: rows are processed by descending diag(H) (most active features first; ties keep
//    their index order) and the permutation is undone in the output;
//  * lazy blocks of block_size rows: inside a block rows correct each other one by one, the rows
//    after the block receive the block's corrections in one matrix product (the same numbers in
//    exact arithmetic, a cache-friendly order).
//
// The grid. Codes q in [qmin, qmax] stand for s (q - z); a weight w gets
// clamp(RNE(w / s) + z, qmin, qmax) with the division in float32 (the library's rule). There is
// one (s, z) per output column (per channel) or one per tensor, for each group of group_size
// consecutive features (group_size -1: one group). Either the caller fixes them
// (gptq_fixed_params: GPTQ then only chooses codes) or they come from Quark's GPTQ rule
// (gptq_computed_params, gptq_find_params): xmin = min(x, 0), xmax = max(x, 0); symmetric:
// xmax = max(-xmin, xmax), and xmin = -xmax where xmin < 0; both 0 -> (-1, 1);
// s = (xmax - xmin) / maxq, z = (maxq + 1) / 2 if symmetric else RNE(-xmin / s), codes [0, maxq],
// maxq = 2^bits - 1; optionally the MSE search over 80 shrunk ranges p (xmin, xmax),
// p = 1 - i / 100, keeping per column the one with the least sum |q(x) - x|^2.4 (ties: the widest).
// Computed parameters use the current weights of the group (all earlier corrections applied)
// when its first row comes up. With act_order a group is the group_size consecutive features of
// the processing order, so the features sharing a scale need not be contiguous rows of W:
// gptq_result::group_index says which scale row each feature uses. Fixed parameters belong to
// the caller's layout: their group of feature k is k / group_size in any order.
// group_size need not divide K: the last group is shorter.
//
// gptq_static_groups computes every group's grid up front from the original weights instead
// (AutoGPTQ's static_groups), for act_order with contiguous groups.
//
// Differences from the reference GPTQ code (none with Quark's settings: group -1 or a group size
// that is a multiple of block_size): the grid of a group is computed after every earlier row's
// correction, even where a group starts inside a lazy block (the reference reads the weights
// without the corrections of its current block there), and the whole-tensor grid (group -1) is
// computed after dead rows are zeroed (the reference takes it from the original weights, so a
// dead row could widen the range). Decision 1 of the spec: bits and group_size are honoured
// (Quark's ONNX code fixes 8 bits and group -1).
//
// The factor U without forming H^-1. Reversing the index order (J = the exchange matrix) turns
// the lower-upper problem into a plain Cholesky: J H J = R^T R with R upper, then with S = R^-1,
// U = J S^T J (upper, U^T U = H^-1). Blocked Cholesky, blocked triangular inverse and the lazy
// block update all reduce to one packed, register-tiled product C -= A B whose inner loop runs
// along rows of B (vectorises without reassociation). All solver arithmetic is in double.
//
//     quark::gptq_hessian h(K);
//     for (auto& batch : batches) h.add(batch.data(), batch.rows, batch.t);   // rows x K floats
//     quark::gptq_computed_params grid;
//     grid.bits = 4;
//     grid.per_channel = true;
//     quark::gptq_options opt;
//     opt.group_size = 128;
//     quark::gptq_result r = quark::gptq_quantize(w, K, N, h, grid, opt);
//     // r.codes[k * N + n], r.scale(k, n), r.zero(k, n), r.dequantized[k * N + n]
#pragma once

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include <quark/config.hpp>
#include <quark/core/error.hpp>
#include <quark/quant/detail/element.hpp>

namespace quark {

/// Quark's GPTQ grid rule (quark-spec §10.4): codes [0, 2^bits - 1], scale and zero point from
/// the weights (see the file comment).
struct gptq_computed_params {
  int bits = 8;              ///< 2 .. 16
  bool symmetric = true;     ///< Quark's weight_symmetric: zero point (maxq + 1) / 2
  bool per_channel = false;  ///< one (scale, zero) per output column instead of per tensor
  bool mse = false;          ///< shrink the range by Quark's MSE search (100 steps, 0.8, 2.4)
};

/// A grid chosen by the caller: GPTQ only chooses the codes. `scales` holds groups x channels
/// values row-major (channels = 1 per tensor or N per output column; groups = ceil(K /
/// group_size), 1 for group_size -1); `zeros` the same count, or empty for zero points 0.
/// Codes lie in [qmin, qmax] (a range of at most 16 bits: -65536 <= qmin < qmax <= 65535).
struct gptq_fixed_params {
  std::span<const float> scales;
  std::span<const std::int32_t> zeros;
  std::int32_t qmin = -127;
  std::int32_t qmax = 127;
};

/// The solver's settings (Quark's GPTQConfig defaults).
struct gptq_options {
  std::ptrdiff_t group_size = -1;  ///< features per grid group; -1: one group; need not divide K
  std::size_t block_size = 128;    ///< rows per lazy block (changes speed, not the result)
  double perc_damp = 0.01;         ///< damping, as a fraction of mean(diag H)
  bool act_order = false;          ///< process features by descending diag(H)
};

/// What gptq_quantize returns. Matrices are row-major K x N like W.
struct gptq_result {
  std::size_t k = 0;
  std::size_t n = 0;
  std::size_t groups = 0;    ///< rows of the grid
  std::size_t channels = 0;  ///< columns of the grid: 1 (per tensor) or N (per channel)
  std::int32_t qmin = 0;
  std::int32_t qmax = 0;
  std::vector<std::int32_t> codes;        ///< K x N, in [qmin, qmax]
  std::vector<float> scales;              ///< groups x channels
  std::vector<std::int32_t> zeros;        ///< groups x channels
  std::vector<std::int32_t> group_index;  ///< K: the grid row of feature k
  std::vector<std::size_t> order;         ///< K: the features in processing order
  std::vector<float> dequantized;         ///< K x N: scale * (code - zero), float32
  /// sum of e^2 over all rows and columns = sum over columns of D^T H D, D = W - What (W with
  /// dead rows zeroed, H damped): the proxy loss of the result.
  double loss = 0.0;

  /// The grid entry of feature k, output n.
  std::size_t grid_at(std::size_t k_, std::size_t n_) const noexcept {
    return static_cast<std::size_t>(group_index[k_]) * channels + (channels == 1 ? 0 : n_);
  }
  float scale(std::size_t k_, std::size_t n_) const noexcept { return scales[grid_at(k_, n_)]; }
  std::int32_t zero(std::size_t k_, std::size_t n_) const noexcept {
    return zeros[grid_at(k_, n_)];
  }
};

namespace detail::gptq {

[[noreturn]] inline void fail(const char* id, const std::string& what) {
  QUARK_THROW(invalid_argument(id, what));
}

/// Doubles per vector register the tile kernel assumes: 4 with AVX, else 2 (SSE2, NEON).
#if defined(__AVX__)
inline constexpr std::size_t lanes = 4;
#else
inline constexpr std::size_t lanes = 2;
#endif
/// Register tile (mr x nr: 12 vector accumulators) and cache blocks (kc deep, nc wide) of the
/// product kernel.
inline constexpr std::size_t mr = 6;
inline constexpr std::size_t nr = 2 * lanes;
inline constexpr std::size_t kc = 256;
inline constexpr std::size_t nc = 128;
static_assert(nc % nr == 0);

/// The packing buffers of gemm (allocated once per solver call).
struct workspace {
  std::vector<double> a = std::vector<double>(kc * mr);
  std::vector<double> b = std::vector<double>(kc * nc);
};

/// One mr x nr tile: acc = sum_p ap[p][:] (x) bp[p][:], then C (+|-)= acc on rows x cols.
/// With GCC and Clang the accumulators are vectors of the compilers' vector extension, one
/// register wide (12 of them fit the 16 registers of AVX2 or SSE2; plain arrays of this size
/// were spilled to memory by GCC 12), elsewhere plain loops.
template <bool Subtract>
QUARK_ALWAYS_INLINE void micro(const double* QUARK_RESTRICT ap, const double* QUARK_RESTRICT bp,
                               std::size_t kd, double* QUARK_RESTRICT c, std::size_t ldc,
                               std::size_t rows, std::size_t cols) noexcept {
  double out[mr][nr];
#if defined(__GNUC__) || defined(__clang__)
  using vec = double __attribute__((vector_size(lanes * sizeof(double)), aligned(8)));
  constexpr std::size_t nv = nr / lanes;
  vec acc[mr][nv];
  for (std::size_t r = 0; r < mr; ++r) {
    for (std::size_t v = 0; v < nv; ++v)
      acc[r][v] = vec{};
  }
  for (std::size_t p = 0; p < kd; ++p) {
    const double* a = ap + p * mr;
    vec b[nv];
    for (std::size_t v = 0; v < nv; ++v)
      std::memcpy(&b[v], bp + p * nr + v * lanes, sizeof(vec));
    for (std::size_t r = 0; r < mr; ++r) {
      for (std::size_t v = 0; v < nv; ++v)
        acc[r][v] += a[r] * b[v];
    }
  }
  static_assert(sizeof(acc) == sizeof(out));
  std::memcpy(out, acc, sizeof(out));
#else
  for (std::size_t r = 0; r < mr; ++r) {
    for (std::size_t j = 0; j < nr; ++j)
      out[r][j] = 0.0;
  }
  for (std::size_t p = 0; p < kd; ++p) {
    for (std::size_t r = 0; r < mr; ++r) {
      for (std::size_t j = 0; j < nr; ++j)
        out[r][j] += ap[p * mr + r] * bp[p * nr + j];
    }
  }
#endif
  for (std::size_t r = 0; r < rows; ++r) {
    double* cr = c + r * ldc;
    for (std::size_t j = 0; j < cols; ++j)
      cr[j] = Subtract ? cr[j] - out[r][j] : cr[j] + out[r][j];
  }
}

/// C[i][j] (+|-)= sum_{p < kd} A(i, p) B[p][j] for i < m, j < n, where A(i, p) =
/// a[i * ars + p * aps] (any strides) and B is row-major with leading dimension ldb. A and B are
/// packed into the workspace (B in nr-wide strips of kc x nc blocks, A in mr-row strips), so the
/// tile kernel reads both contiguously whatever the strides.
template <bool Subtract>
void gemm(double* c, std::size_t ldc, std::size_t m, std::size_t n, const double* a,
          std::size_t ars, std::size_t aps, const double* b, std::size_t ldb, std::size_t kd,
          workspace& ws) {
  for (std::size_t p0 = 0; p0 < kd; p0 += kc) {
    const std::size_t kb = std::min(kc, kd - p0);
    for (std::size_t j0 = 0; j0 < n; j0 += nc) {
      const std::size_t nb = std::min(nc, n - j0);
      double* bp = ws.b.data();
      for (std::size_t js = 0; js < nb; js += nr) {
        const std::size_t w = std::min(nr, nb - js);
        double* dst = bp + js * kb;
        for (std::size_t p = 0; p < kb; ++p) {
          const double* src = b + (p0 + p) * ldb + j0 + js;
          for (std::size_t j = 0; j < w; ++j)
            dst[p * nr + j] = src[j];
          for (std::size_t j = w; j < nr; ++j)
            dst[p * nr + j] = 0.0;
        }
      }
      double* ap = ws.a.data();
      for (std::size_t i0 = 0; i0 < m; i0 += mr) {
        const std::size_t h = std::min(mr, m - i0);
        for (std::size_t p = 0; p < kb; ++p) {
          for (std::size_t r = 0; r < mr; ++r)
            ap[p * mr + r] = r < h ? a[(i0 + r) * ars + (p0 + p) * aps] : 0.0;
        }
        for (std::size_t js = 0; js < nb; js += nr) {
          micro<Subtract>(ap, bp + js * kb, kb, c + i0 * ldc + j0 + js, ldc, h,
                          std::min(nr, nb - js));
        }
      }
    }
  }
}

/// In place: the symmetric a (k x k, its upper triangle is read) becomes R, upper triangular
/// with R^T R = a and a zero strict lower triangle, by a right-looking Cholesky in panels of
/// `panel` rows. Returns k on success, else the index of the first pivot that is not positive
/// (or not above k * epsilon times its original diagonal: numerically singular), with the pivot
/// in `pivot`.
inline std::size_t cholesky_upper(double* a, std::size_t k, std::size_t panel, workspace& ws,
                                  double& pivot) {
  std::vector<double> diag0(k);
  for (std::size_t i = 0; i < k; ++i)
    diag0[i] = a[i * k + i];
  const double tol = static_cast<double>(k) * std::numeric_limits<double>::epsilon();
  for (std::size_t k0 = 0; k0 < k; k0 += panel) {
    const std::size_t k1 = std::min(k0 + panel, k);
    for (std::size_t p = k0; p < k1; ++p) {
      double* rp = a + p * k;
      const double d = rp[p];
      if (!(d > tol * diag0[p]) || !(d <= std::numeric_limits<double>::max())) {
        pivot = d;
        return p;
      }
      const double r = std::sqrt(d);
      rp[p] = r;
      for (std::size_t j = p + 1; j < k; ++j)
        rp[j] /= r;
      for (std::size_t i = p + 1; i < k1; ++i) {
        const double f = rp[i];
        double* ri = a + i * k;
        for (std::size_t j = i; j < k; ++j)
          ri[j] -= f * rp[j];
      }
    }
    // Rows and columns after the panel: a[i][j] -= sum_p R[p][i] R[p][j], upper part only
    // (row strips from their diagonal on; the strip's own lower corner is scratch).
    for (std::size_t i0 = k1; i0 < k; i0 += nc) {
      const std::size_t h = std::min(nc, k - i0);
      gemm<true>(a + i0 * k + i0, k, h, k - i0, a + k0 * k + i0, 1, k, a + k0 * k + i0, k, k1 - k0,
                 ws);
    }
  }
  for (std::size_t i = 1; i < k; ++i)
    std::fill(a + i * k, a + i * k + i, 0.0);
  return k;
}

/// In place: the upper triangular r (k x k, zero strict lower triangle, positive diagonal)
/// becomes S = r^-1 (upper), by back substitution in row blocks of `panel`, last block first:
/// the block's rows against the finished rows below are one product, the block itself is solved
/// row by row.
inline void invert_upper(double* a, std::size_t k, std::size_t panel, workspace& ws) {
  std::vector<double> t(panel * k);
  std::vector<double> v(k);
  std::size_t i1 = k;
  while (i1 > 0) {
    const std::size_t i0 = i1 > panel ? i1 - panel : 0;
    const std::size_t nb = i1 - i0;
    const std::size_t rest = k - i1;
    // t[r][j - i1] = -sum_{p >= i1} R[i0 + r][p] S[p][j] for j >= i1; S is upper, so columns
    // [j0, j1) need p < j1 only.
    std::fill(t.begin(), t.begin() + static_cast<std::ptrdiff_t>(nb * rest), 0.0);
    for (std::size_t j0 = i1; j0 < k; j0 += nc) {
      const std::size_t j1 = std::min(j0 + nc, k);
      gemm<true>(t.data() + (j0 - i1), rest, nb, j1 - j0, a + i0 * k + i1, k, 1, a + i1 * k + j0, k,
                 j1 - i1, ws);
    }
    for (std::size_t i = i1; i-- > i0;) {
      std::fill(v.begin() + static_cast<std::ptrdiff_t>(i),
                v.begin() + static_cast<std::ptrdiff_t>(i1), 0.0);
      std::copy(t.begin() + static_cast<std::ptrdiff_t>((i - i0) * rest),
                t.begin() + static_cast<std::ptrdiff_t>((i - i0 + 1) * rest),
                v.begin() + static_cast<std::ptrdiff_t>(i1));
      v[i] += 1.0;
      const double* ri = a + i * k;
      for (std::size_t p = i + 1; p < i1; ++p) {
        const double f = ri[p];
        const double* sp = a + p * k;
        for (std::size_t j = p; j < k; ++j)
          v[j] -= f * sp[j];
      }
      const double d = ri[i];
      double* si = a + i * k;
      for (std::size_t j = i; j < k; ++j)
        si[j] = v[j] / d;
    }
    i1 = i0;
  }
}

/// In place transpose of the square a (k x k), tile by tile.
inline void transpose(double* a, std::size_t k) {
  constexpr std::size_t tile = 32;
  for (std::size_t i0 = 0; i0 < k; i0 += tile) {
    const std::size_t i1 = std::min(i0 + tile, k);
    for (std::size_t j0 = i0; j0 < k; j0 += tile) {
      const std::size_t j1 = std::min(j0 + tile, k);
      for (std::size_t i = i0; i < i1; ++i) {
        for (std::size_t j = std::max(j0, i + 1); j < j1; ++j)
          std::swap(a[i * k + j], a[j * k + i]);
      }
    }
  }
}

/// In place: the symmetric positive definite h (k x k) becomes U, upper triangular with
/// U^T U = h^-1 (see the file comment: U = J S^T J, S = R^-1, R^T R = J h J). Throws
/// "quark.gptq.not_positive_definite" naming the failing feature position.
inline void inverse_cholesky_upper(double* a, std::size_t k, std::size_t panel = 96) {
  workspace ws;
  std::reverse(a, a + k * k);
  double pivot = 0.0;
  const std::size_t bad = cholesky_upper(a, k, panel, ws, pivot);
  if (bad != k) {
    fail("quark.gptq.not_positive_definite",
         "the damped Hessian is not positive definite (Cholesky pivot " + std::to_string(pivot) +
             " at processing position " + std::to_string(k - 1 - bad) +
             "); raise perc_damp or give more calibration data");
  }
  invert_upper(a, k, panel, ws);
  std::reverse(a, a + k * k);
  transpose(a, k);
}

/// A double weight as float32, saturated at +-FLT_MAX (the double -> float cast stays defined).
inline float to_float(double v) noexcept {
  constexpr double big = static_cast<double>(std::numeric_limits<float>::max());
  return static_cast<float>(v > big ? big : (v < -big ? -big : v));
}
inline float to_float(float v) noexcept {
  return v;
}

/// A scale that stays usable: 0 (a range so small that it underflows) becomes the smallest
/// positive float, +inf (a range so wide that it overflows) the largest.
inline float usable_scale(float s) noexcept {
  if (!(s > 0.0f))
    return std::numeric_limits<float>::denorm_min();
  return std::min(s, std::numeric_limits<float>::max());
}

/// The float32 product a b as a value of its own: the volatile store keeps compilers from fusing
/// it into a later subtraction (GCC contracts p * x - p * y into an FMA even in ISO mode on FMA
/// targets, which would skip one of the roundings Quark's float32 arithmetic has).
inline float rounded_product(float a, float b) noexcept {
  volatile float p = a * b;
  return p;
}

/// RNE of a value already inside [0, 65535] or so (|v| <= 2^22).
inline float rne(float v) noexcept {
  return quark::detail::round_half_even_small(v);
}

/// Quark's base range -> (scale, zero) (see the file comment); xmin, xmax as observed.
inline void base_params(float& xmin, float& xmax, std::int32_t maxq, bool symmetric, float& s,
                        float& z) noexcept {
  xmin = std::min(xmin, 0.0f);
  xmax = std::max(xmax, 0.0f);
  if (symmetric) {
    xmax = std::max(-xmin, xmax);
    if (xmin < 0.0f)
      xmin = -xmax;
  }
  if (xmin == 0.0f && xmax == 0.0f) {
    xmin = -1.0f;
    xmax = 1.0f;
  }
  const float fq = static_cast<float>(maxq);
  s = usable_scale((xmax - xmin) / fq);
  if (symmetric) {
    z = static_cast<float>((maxq + 1) / 2);
  } else {
    const float v = -xmin / s;
    z = rne(v > fq ? fq : (v > 0.0f ? v : 0.0f));
  }
}

/// Scratch of find_params (sized once per solver call).
struct params_scratch {
  std::vector<float> lo, hi, s, z, best_s, best_z;
  std::vector<double> err, best;
  void resize(std::size_t c) {
    best_s.resize(c);
    best_z.resize(c);
    lo.resize(c);
    hi.resize(c);
    s.resize(c);
    z.resize(c);
    err.resize(c);
    best.resize(c);
  }
};

/// Quark's GPTQ grid for `rows` x `n` weights (leading dimension ld), per column or for all,
/// into scales[0 .. c) and zeros[0 .. c) (c = n or 1).
template <class T>
void find_params(const T* w, std::size_t ld, std::size_t rows, std::size_t n,
                 const gptq_computed_params& p, float* scales, std::int32_t* zeros,
                 params_scratch& sc) {
  const std::size_t c = p.per_channel ? n : 1;
  const std::int32_t maxq = static_cast<std::int32_t>((std::int64_t{1} << p.bits) - 1);
  sc.resize(c);
  std::fill(sc.lo.begin(), sc.lo.end(), std::numeric_limits<float>::infinity());
  std::fill(sc.hi.begin(), sc.hi.end(), -std::numeric_limits<float>::infinity());
  for (std::size_t r = 0; r < rows; ++r) {
    const T* wr = w + r * ld;
    if (p.per_channel) {
      for (std::size_t j = 0; j < n; ++j) {
        const float x = to_float(wr[j]);
        sc.lo[j] = std::min(sc.lo[j], x);
        sc.hi[j] = std::max(sc.hi[j], x);
      }
    } else {
      for (std::size_t j = 0; j < n; ++j) {
        const float x = to_float(wr[j]);
        sc.lo[0] = std::min(sc.lo[0], x);
        sc.hi[0] = std::max(sc.hi[0], x);
      }
    }
  }
  for (std::size_t j = 0; j < c; ++j)
    base_params(sc.lo[j], sc.hi[j], maxq, p.symmetric, sc.s[j], sc.z[j]);
  if (p.mse) {
    // 80 candidates p = 1 - i / 100 (Quark: grid 100, maxshrink 0.8), error sum |q(x) - x|^2.4.
    std::copy(sc.s.begin(), sc.s.end(), sc.best_s.begin());
    std::copy(sc.z.begin(), sc.z.end(), sc.best_z.begin());
    std::fill(sc.best.begin(), sc.best.end(), std::numeric_limits<double>::infinity());
    const float fq = static_cast<float>(maxq);
    for (int i = 0; i < 80; ++i) {
      const float shrink = static_cast<float>(1.0 - i / 100.0);
      for (std::size_t j = 0; j < c; ++j) {
        const float lo = rounded_product(shrink, sc.lo[j]);
        const float hi = rounded_product(shrink, sc.hi[j]);
        sc.s[j] = usable_scale((hi - lo) / fq);
        if (p.symmetric) {
          sc.z[j] = static_cast<float>((maxq + 1) / 2);
        } else {
          const float v = -lo / sc.s[j];
          sc.z[j] = rne(v > fq ? fq : (v > 0.0f ? v : 0.0f));
        }
      }
      std::fill(sc.err.begin(), sc.err.end(), 0.0);
      for (std::size_t r = 0; r < rows; ++r) {
        const T* wr = w + r * ld;
        for (std::size_t j = 0; j < n; ++j) {
          const std::size_t cj = p.per_channel ? j : 0;
          const float x = to_float(wr[j]);
          const float s = sc.s[cj];
          const float z = sc.z[cj];
          float v = x / s;
          v = v > -z ? v : -z;
          v = v < fq - z ? v : fq - z;
          const float deq = s * rne(v);  // only widened below: nothing to fuse with
          sc.err[cj] += std::pow(std::fabs(static_cast<double>(deq) - static_cast<double>(x)), 2.4);
        }
      }
      for (std::size_t j = 0; j < c; ++j) {
        if (sc.err[j] < sc.best[j]) {
          sc.best[j] = sc.err[j];
          sc.best_s[j] = sc.s[j];
          sc.best_z[j] = sc.z[j];
        }
      }
    }
    std::swap(sc.s, sc.best_s);
    std::swap(sc.z, sc.best_z);
  }
  for (std::size_t j = 0; j < c; ++j) {
    scales[j] = sc.s[j];
    zeros[j] = static_cast<std::int32_t>(sc.z[j]);
  }
}

inline void check_bits(int bits) {
  if (bits < 2 || bits > 16) {
    fail("quark.gptq.bad_bits", "bits " + std::to_string(bits) + " outside 2 .. 16");
  }
}

}  // namespace detail::gptq

/// The code of w on the grid (scale s > 0, zero point z, codes [qmin, qmax]):
/// clamp(RNE(w / s) + z, qmin, qmax), the division in float32. For ranges of up to 16 bits.
inline std::int32_t gptq_code(float w, float s, std::int32_t z, std::int32_t qmin,
                              std::int32_t qmax) noexcept {
  const float lo = static_cast<float>(qmin - z);
  const float hi = static_cast<float>(qmax - z);
  float v = w / s;
  v = v > lo ? v : lo;  // NaN -> qmin
  v = v < hi ? v : hi;
  return static_cast<std::int32_t>(detail::gptq::rne(v)) + z;
}

/// Quark's GPTQ grid (gptq_computed_params) for the `rows` x `n` weights w (row-major): one
/// (scale, zero) per column into scales[n], zeros[n] when p.per_channel, else one into
/// scales[0], zeros[0]. Codes are [0, 2^bits - 1]. Throws "quark.gptq.bad_bits",
/// "quark.gptq.bad_shape" (sizes), "quark.gptq.bad_weight" (NaN or Inf).
inline void gptq_find_params(std::span<const float> w, std::size_t rows, std::size_t n,
                             const gptq_computed_params& p, std::span<float> scales,
                             std::span<std::int32_t> zeros) {
  detail::gptq::check_bits(p.bits);
  const std::size_t c = p.per_channel ? n : 1;
  if (rows == 0 || n == 0 || w.size() != rows * n || scales.size() != c || zeros.size() != c) {
    detail::gptq::fail("quark.gptq.bad_shape",
                       std::to_string(w.size()) + " weights for " + std::to_string(rows) + " x " +
                           std::to_string(n) + ", " + std::to_string(scales.size()) +
                           " scales and " + std::to_string(zeros.size()) + " zero points (want " +
                           std::to_string(c) + ")");
  }
  for (const float x : w) {
    if (!std::isfinite(x))
      detail::gptq::fail("quark.gptq.bad_weight", "a weight is NaN or infinite");
  }
  detail::gptq::params_scratch sc;
  detail::gptq::find_params(w.data(), n, rows, n, p, scales.data(), zeros.data(), sc);
}

/// A grid computed up front (gptq_static_groups), owned; params() views it for gptq_quantize.
struct gptq_static_grid {
  std::vector<float> scales;        ///< groups x channels
  std::vector<std::int32_t> zeros;  ///< groups x channels
  std::int32_t qmin = 0;
  std::int32_t qmax = 0;
  [[nodiscard]] gptq_fixed_params params() const noexcept {
    return {.scales = scales, .zeros = zeros, .qmin = qmin, .qmax = qmax};
  }
};

/// Static groups (AutoGPTQ's static_groups): Quark's grid (gptq_find_params) of every group of
/// group_size consecutive features of w (K x N row-major; -1: one group; the last group may be
/// shorter), from the weights as given, before GPTQ changes any. Passed to gptq_quantize as a
/// fixed grid, feature k keeps group k / group_size's row in any processing order: with
/// act_order the groups stay contiguous rows of W, which a blocked DequantizeLinear can store
/// (computed groups follow the processing order instead). Throws "quark.gptq.bad_shape",
/// "bad_group_size", "bad_bits", "bad_weight".
inline gptq_static_grid gptq_static_groups(std::span<const float> w, std::size_t k, std::size_t n,
                                           const gptq_computed_params& p,
                                           std::ptrdiff_t group_size) {
  detail::gptq::check_bits(p.bits);
  if (group_size == 0 || group_size < -1) {
    detail::gptq::fail("quark.gptq.bad_group_size",
                       "group_size " + std::to_string(group_size) + " (want -1 or >= 1)");
  }
  if (k == 0 || n == 0 || w.size() != k * n) {
    detail::gptq::fail("quark.gptq.bad_shape", std::to_string(w.size()) + " weights for " +
                                                   std::to_string(k) + " x " + std::to_string(n));
  }
  const std::size_t gs = group_size < 0 ? k : std::min(k, static_cast<std::size_t>(group_size));
  const std::size_t groups = (k + gs - 1) / gs;
  const std::size_t c = p.per_channel ? n : 1;
  gptq_static_grid g;
  g.scales.resize(groups * c);
  g.zeros.resize(groups * c);
  g.qmax = static_cast<std::int32_t>((std::int64_t{1} << p.bits) - 1);
  for (std::size_t gi = 0; gi < groups; ++gi) {
    const std::size_t r0 = gi * gs;
    const std::size_t rows = std::min(gs, k - r0);
    gptq_find_params(w.subspan(r0 * n, rows * n), rows, n, p,
                     std::span<float>(g.scales).subspan(gi * c, c),
                     std::span<std::int32_t>(g.zeros).subspan(gi * c, c));
  }
  return g;
}

/// Quark's running Hessian of one layer input with K features, in double (the file comment has
/// the update). Memory: K x K doubles.
class gptq_hessian {
 public:
  /// Throws "quark.gptq.bad_shape" for k == 0.
  explicit gptq_hessian(std::size_t k) : k_(k) {
    if (k == 0)
      detail::gptq::fail("quark.gptq.bad_shape", "a Hessian needs at least one feature");
    h_.assign(k * k, 0.0);
  }

  /// Adds one batch: x holds rows x K floats row-major (all of the batch's samples and
  /// positions), t is the batch's leading dimension (Quark's inp.shape[0]), t >= 1. Throws
  /// "quark.gptq.bad_batch" for t == 0 and "quark.gptq.bad_input" for NaN or Inf in x (the
  /// state is then unchanged).
  void add(const float* x, std::size_t rows, std::size_t t) {
    if (t == 0)
      detail::gptq::fail("quark.gptq.bad_batch", "a batch with leading dimension 0");
    const std::size_t count = rows * k_;
    for (std::size_t i = 0; i < count; ++i) {
      if (!std::isfinite(x[i])) {
        detail::gptq::fail("quark.gptq.bad_input",
                           "input value " + std::to_string(i) + " of the batch is NaN or infinite");
      }
    }
    if (n_ > 0) {
      const double keep = static_cast<double>(n_) / static_cast<double>(n_ + t);
      for (double& v : h_)
        v *= keep;
    }
    n_ += t;
    const double f = std::sqrt(2.0 / static_cast<double>(n_));
    xd_.resize(count);
    for (std::size_t i = 0; i < count; ++i)
      xd_[i] = f * static_cast<double>(x[i]);
    // H += xd^T xd: the upper triangle in row strips, then mirrored.
    const double* xd = xd_.data();
    double* h = h_.data();
    for (std::size_t i0 = 0; i0 < k_; i0 += detail::gptq::nc) {
      const std::size_t hgt = std::min(detail::gptq::nc, k_ - i0);
      detail::gptq::gemm<false>(h + i0 * k_ + i0, k_, hgt, k_ - i0, xd + i0, 1, k_, xd + i0, k_,
                                rows, ws_);
    }
    for (std::size_t i = 1; i < k_; ++i) {
      for (std::size_t j = 0; j < i; ++j)
        h[i * k_ + j] = h[j * k_ + i];
    }
  }

  /// Same, with rows = x.size() / K ("quark.gptq.bad_shape" when K does not divide x.size()).
  void add(std::span<const float> x, std::size_t t) {
    if (x.size() % k_ != 0) {
      detail::gptq::fail("quark.gptq.bad_shape", std::to_string(x.size()) +
                                                     " input values are not rows of " +
                                                     std::to_string(k_) + " features");
    }
    add(x.data(), x.size() / k_, t);
  }

  /// K, the number of input features.
  std::size_t features() const noexcept { return k_; }
  /// n, the sum of the leading dimensions t of the batches seen.
  std::size_t samples() const noexcept { return n_; }
  /// H, K x K row-major (symmetric).
  std::span<const double> matrix() const noexcept { return h_; }

 private:
  std::size_t k_;
  std::size_t n_ = 0;
  std::vector<double> h_;
  std::vector<double> xd_;
  detail::gptq::workspace ws_;
};

namespace detail::gptq {

inline gptq_result solve(std::span<const float> w, std::size_t k, std::size_t n,
                         std::span<const double> h, const gptq_computed_params* cp,
                         const gptq_fixed_params* fp, const gptq_options& opt) {
  if (k == 0 || n == 0 || w.size() != k * n) {
    fail("quark.gptq.bad_shape", std::to_string(w.size()) + " weights for K = " +
                                     std::to_string(k) + ", N = " + std::to_string(n));
  }
  if (h.size() != k * k) {
    fail("quark.gptq.bad_shape", "a Hessian of " + std::to_string(h.size()) +
                                     " values for K = " + std::to_string(k) + " (want K x K)");
  }
  if (opt.group_size == 0 || opt.group_size < -1) {
    fail("quark.gptq.bad_group_size",
         "group_size " + std::to_string(opt.group_size) + " (want -1 or >= 1)");
  }
  if (opt.block_size == 0)
    fail("quark.gptq.bad_block_size", "block_size 0");
  if (!(opt.perc_damp >= 0.0) || !std::isfinite(opt.perc_damp)) {
    fail("quark.gptq.bad_damp",
         "perc_damp " + std::to_string(opt.perc_damp) + " (want a finite value >= 0)");
  }
  for (const float x : w) {
    if (!std::isfinite(x))
      fail("quark.gptq.bad_weight", "a weight is NaN or infinite");
  }
  for (const double x : h) {
    if (!std::isfinite(x))
      fail("quark.gptq.bad_hessian", "a Hessian entry is NaN or infinite");
  }

  const std::size_t gs =
      opt.group_size < 0 ? k : std::min(k, static_cast<std::size_t>(opt.group_size));
  const std::size_t groups = (k + gs - 1) / gs;
  gptq_result res;
  res.k = k;
  res.n = n;
  res.groups = groups;
  if (fp != nullptr) {
    if (fp->scales.size() == groups) {
      res.channels = 1;
    } else if (fp->scales.size() == groups * n) {
      res.channels = n;
    } else {
      fail("quark.gptq.bad_params", std::to_string(fp->scales.size()) + " scales for " +
                                        std::to_string(groups) + " groups and " +
                                        std::to_string(n) + " outputs (want groups or groups x N)");
    }
    if (!fp->zeros.empty() && fp->zeros.size() != fp->scales.size()) {
      fail("quark.gptq.bad_params", std::to_string(fp->zeros.size()) + " zero points for " +
                                        std::to_string(fp->scales.size()) + " scales");
    }
    if (!(fp->qmin < fp->qmax) || fp->qmin < -65536 || fp->qmax > 65535) {
      fail("quark.gptq.bad_params", "code range [" + std::to_string(fp->qmin) + ", " +
                                        std::to_string(fp->qmax) +
                                        "] (want qmin < qmax within 16 bits)");
    }
    for (const float s : fp->scales) {
      if (!(s > 0.0f) || !std::isfinite(s))
        fail("quark.gptq.bad_params", "scale " + std::to_string(s) + " (want finite > 0)");
    }
    for (const std::int32_t z : fp->zeros) {
      if (z < fp->qmin || z > fp->qmax) {
        fail("quark.gptq.bad_params",
             "zero point " + std::to_string(z) + " outside the code range");
      }
    }
    res.qmin = fp->qmin;
    res.qmax = fp->qmax;
    res.scales.assign(fp->scales.begin(), fp->scales.end());
    if (fp->zeros.empty())
      res.zeros.assign(res.scales.size(), 0);
    else
      res.zeros.assign(fp->zeros.begin(), fp->zeros.end());
  } else {
    check_bits(cp->bits);
    res.channels = cp->per_channel ? n : 1;
    res.qmin = 0;
    res.qmax = static_cast<std::int32_t>((std::int32_t{1} << cp->bits) - 1);
    res.scales.assign(groups * res.channels, 0.0f);
    res.zeros.assign(groups * res.channels, 0);
  }

  // Dead features, processing order, damping.
  std::vector<double> diag(k);
  std::vector<char> dead(k, 0);
  for (std::size_t i = 0; i < k; ++i) {
    diag[i] = h[i * k + i];
    if (diag[i] == 0.0) {
      dead[i] = 1;
      diag[i] = 1.0;
    }
  }
  res.order.resize(k);
  std::iota(res.order.begin(), res.order.end(), std::size_t{0});
  if (opt.act_order) {
    std::stable_sort(res.order.begin(), res.order.end(),
                     [&](std::size_t x, std::size_t y) { return diag[x] > diag[y]; });
  }
  const std::vector<std::size_t>& order = res.order;
  double mean = 0.0;
  for (const double d : diag)
    mean += d;
  mean /= static_cast<double>(k);
  const double damp = opt.perc_damp * mean;

  std::vector<double> u(k * k);
  for (std::size_t i = 0; i < k; ++i) {
    const double* hr = h.data() + order[i] * k;
    double* ur = u.data() + i * k;
    for (std::size_t j = 0; j < k; ++j)
      ur[j] = hr[order[j]];
    ur[i] = diag[order[i]] + damp;
  }
  inverse_cholesky_upper(u.data(), k);

  std::vector<double> wp(k * n);
  for (std::size_t i = 0; i < k; ++i) {
    const std::size_t src = order[i];
    double* wr = wp.data() + i * n;
    if (dead[src] != 0) {
      std::fill(wr, wr + n, 0.0);
    } else {
      for (std::size_t j = 0; j < n; ++j)
        wr[j] = static_cast<double>(w[src * n + j]);
    }
  }

  res.group_index.resize(k);
  for (std::size_t i = 0; i < k; ++i) {
    const std::size_t g = fp != nullptr ? order[i] / gs : i / gs;
    res.group_index[order[i]] = static_cast<std::int32_t>(g);
  }
  res.codes.assign(k * n, 0);
  res.dequantized.assign(k * n, 0.0f);

  const std::size_t bs = std::min(opt.block_size, k);
  std::vector<double> e(bs * n);
  workspace ws;
  params_scratch sc;
  constexpr std::size_t cw = 128;  // columns per in-block chunk (the block's rows stay cached)
  const std::size_t cstep = res.channels == 1 ? 0 : 1;
  double loss = 0.0;
  std::size_t i1 = 0;
  while (i1 < k) {
    std::size_t i2 = std::min(i1 + bs, k);
    if (cp != nullptr) {
      // A group starts only at a block start, so its grid sees every earlier correction.
      if (i1 % gs == 0) {
        const std::size_t g = i1 / gs;
        find_params(wp.data() + i1 * n, n, std::min(gs, k - i1), n, *cp,
                    res.scales.data() + g * res.channels, res.zeros.data() + g * res.channels, sc);
      }
      i2 = std::min(i2, (i1 / gs + 1) * gs);
    }
    for (std::size_t c0 = 0; c0 < n; c0 += cw) {
      const std::size_t c1 = std::min(c0 + cw, n);
      for (std::size_t i = i1; i < i2; ++i) {
        const std::size_t src = order[i];
        const std::size_t g = static_cast<std::size_t>(res.group_index[src]);
        const float* sg = res.scales.data() + g * res.channels;
        const std::int32_t* zg = res.zeros.data() + g * res.channels;
        const double d = u[i * k + i];
        double* wr = wp.data() + i * n;
        double* er = e.data() + (i - i1) * n;
        std::int32_t* qr = res.codes.data() + src * n;
        float* dq = res.dequantized.data() + src * n;
        for (std::size_t j = c0; j < c1; ++j) {
          const float s = sg[j * cstep];
          const std::int32_t z = zg[j * cstep];
          const std::int32_t q = gptq_code(to_float(wr[j]), s, z, res.qmin, res.qmax);
          const float v = s * static_cast<float>(q - z);
          qr[j] = q;
          dq[j] = v;
          const double ej = (wr[j] - static_cast<double>(v)) / d;
          er[j] = ej;
          loss += ej * ej;
        }
        const double* ui = u.data() + i * k;
        for (std::size_t r = i + 1; r < i2; ++r) {
          const double f = ui[r];
          double* wq = wp.data() + r * n;
          for (std::size_t j = c0; j < c1; ++j)
            wq[j] -= f * er[j];
        }
      }
    }
    if (i2 < k) {
      gemm<true>(wp.data() + i2 * n, n, k - i2, n, u.data() + i1 * k + i2, 1, k, e.data(), n,
                 i2 - i1, ws);
    }
    i1 = i2;
  }
  if (!std::isfinite(loss)) {
    fail("quark.gptq.not_finite",
         "the error feedback overflowed (an ill-conditioned Hessian?); raise perc_damp");
  }
  res.loss = loss;
  return res;
}

}  // namespace detail::gptq

/// GPTQ of the weight w (K x N row-major, MatMul's B) with the Hessian h (K x K row-major,
/// symmetric) on Quark's computed grid. Throws quark::invalid_argument with the ids
/// "quark.gptq.bad_shape", "bad_weight", "bad_hessian", "bad_bits", "bad_group_size",
/// "bad_block_size", "bad_damp", "not_positive_definite" (raise perc_damp), "not_finite".
inline gptq_result gptq_quantize(std::span<const float> w, std::size_t k, std::size_t n,
                                 std::span<const double> h, const gptq_computed_params& grid,
                                 const gptq_options& opt = {}) {
  return detail::gptq::solve(w, k, n, h, &grid, nullptr, opt);
}

/// Same on the caller's grid ("quark.gptq.bad_params" for a bad grid).
inline gptq_result gptq_quantize(std::span<const float> w, std::size_t k, std::size_t n,
                                 std::span<const double> h, const gptq_fixed_params& grid,
                                 const gptq_options& opt = {}) {
  return detail::gptq::solve(w, k, n, h, nullptr, &grid, opt);
}

/// Same with an accumulated Hessian ("quark.gptq.bad_shape" when its K differs,
/// "quark.gptq.no_samples" when it has seen no batch).
template <class Grid>
  requires std::same_as<Grid, gptq_computed_params> || std::same_as<Grid, gptq_fixed_params>
      gptq_result gptq_quantize(std::span<const float> w, std::size_t k, std::size_t n,
                                const gptq_hessian& h, const Grid& grid,
                                const gptq_options& opt = {}) {
    if (h.features() != k) {
      detail::gptq::fail("quark.gptq.bad_shape", "a Hessian of " + std::to_string(h.features()) +
                                                     " features for K = " + std::to_string(k));
    }
    if (h.samples() == 0)
      detail::gptq::fail("quark.gptq.no_samples", "the Hessian has seen no calibration batch");
    return gptq_quantize(w, k, n, h.matrix(), grid, opt);
  }

}  // namespace quark
