// SPDX-License-Identifier: MIT
// The integer operators of dynamically quantized models: DynamicQuantizeLinear (opset 11),
// MatMulInteger (opset 10) and ConvInteger (opset 10). DynamicQuantizeLinear's numbers come from
// quark/quant/dynamic.hpp and quark::quantize; the two products subtract the zero points into
// int16 operands (8-bit values minus 8-bit zero points lie in [-255, 255]) and accumulate exactly
// in 32 bits, wrapping modulo 2^32 as the operator text allows (ONNX Runtime's int32 accumulators
// wrap the same way).
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <quark/observer/minmax_observer.hpp>
#include <quark/quant/dynamic.hpp>
#include <quark/quant/quantize.hpp>

#include "runtime/conv_geometry.hpp"
#include "runtime/kernel.hpp"
#include "runtime/matmul_shape.hpp"
#include "runtime/registry.hpp"

namespace quark::onnx::rt {
namespace {

// ---- DynamicQuantizeLinear ----------------------------------------------------------------

/// y, y_scale, y_zero_point = DynamicQuantizeLinear(x), bit for bit as ONNX Runtime 1.30 for
/// every finite x. Two inputs are refused, naming the node, where ONNX Runtime returns no usable
/// answer: x with a NaN (its min / max scan then depends on where the NaN sits: a NaN in the last
/// element gives scale NaN, one elsewhere may drop the true minimum of its SIMD lane), and a range
/// whose scale is Inf or 0 (an Inf in x, |max - min| beyond float's range, or a range below 255
/// subnormals), where every finite value collapses onto one code. An all-zero or empty x gives
/// scale 1 and zero point 0, as in ONNX Runtime.
void k_dynamic_quantize(kernel_context& c) {
  const tensor& x = float_input(c, 0);
  const std::span<const float> xs = x.data<float>();
  // 1. The range: one observer per pool thread, merged.
  std::vector<quark::minmax_observer> parts(c.pool.size());
  for_each_chunk(c.pool, xs.size(), std::size_t{1} << 16,
                 [&](std::size_t part, std::size_t b, std::size_t e) {
                   parts[part].observe(xs.subspan(b, e - b));
                 });
  quark::minmax_observer all;
  for (const auto& p : parts)
    all.merge(p);
  const quark::range_stats r = all.stats();
  if (r.nan_count > 0) {
    c.fail("quark.onnx.runtime", "input '" + c.n.inputs[0] + "' holds " +
                                     std::to_string(r.nan_count) +
                                     " NaN value(s): DynamicQuantizeLinear's scale is undefined "
                                     "(ONNX Runtime's depends on where the NaN sits)");
  }
  const quark::value_range range =
      r.has_values() ? quark::value_range{r.min, r.max} : quark::value_range{};
  const quark::dynamic_uint8_qparams p = quark::dynamic_qparams_onnx(range);
  if (!p.usable()) {
    c.fail("quark.onnx.runtime", "input '" + c.n.inputs[0] + "' has the range [" +
                                     std::to_string(range.min) + ", " + std::to_string(range.max) +
                                     "], which gives the scale " + std::to_string(p.scale) +
                                     ": no uint8 code can represent it (Inf or out-of-range "
                                     "input)");
  }
  // 2. y = quantize(x, scale, zero point), chunks on the pool.
  tensor y(dtype_id::uint8, x.shape(), uninitialized);  // every element is written below
  const std::span<std::uint8_t> ys = y.data<std::uint8_t>();
  const std::int32_t zp = p.zero_point;
  const quark::tensor_qparams<std::uint8_t> qp{{&p.scale, 1}, {&zp, 1}};
  c.pool.parallel_for(xs.size(), std::size_t{1} << 15, [&](std::size_t b, std::size_t e) {
    quark::quantize<std::uint8_t>(quark::tensor_shape{e - b}, xs.subspan(b, e - b), qp,
                                  ys.subspan(b, e - b));
  });
  tensor scale(dtype_id::float32, shape_t{}, uninitialized);
  scale.data<float>()[0] = p.scale;
  tensor zero_point(dtype_id::uint8, shape_t{}, uninitialized);
  zero_point.data<std::uint8_t>()[0] = p.zero_point;
  c.out(0) = std::move(y);
  c.out(1) = std::move(scale);
  c.out(2) = std::move(zero_point);
}

// ---- 8-bit operands with zero points --------------------------------------------------------

/// Input i, which must be uint8 or int8.
const tensor& byte_input(const kernel_context& c, std::size_t i) {
  const tensor& t = c.in(i);
  if (t.type() != dtype_id::uint8 && t.type() != dtype_id::int8) {
    c.fail("quark.onnx.runtime", "input '" + c.n.inputs[i] + "' is " +
                                     std::string(dtype_name(t.type())) +
                                     ", expected uint8 or int8");
  }
  return t;
}

/// The zero points of 8-bit input `of` (optional input `i`): empty when absent, else one value
/// (any shape of one element) or, when `per` > 0, 1-D of `per` values (`what` names them).
std::vector<std::int32_t> zero_points(const kernel_context& c, std::size_t i, const tensor& of,
                                      std::size_t per, const char* what) {
  const tensor* z = c.opt(i);
  if (!z)
    return {};
  if (z->type() != of.type()) {
    c.fail("quark.onnx.runtime", "zero point '" + c.n.inputs[i] + "' is " +
                                     std::string(dtype_name(z->type())) + ", its input is " +
                                     std::string(dtype_name(of.type())));
  }
  const bool one = z->size() == 1;
  if (!one && !(per > 0 && z->rank() == 1 && z->size() == per)) {
    c.fail("quark.onnx.shape",
           "zero point '" + c.n.inputs[i] + "' has shape " + shape_string(z->shape()) +
               ", expected a scalar" +
               (per > 0 ? " or 1-D of " + std::to_string(per) + " values (" + what + ")" : ""));
  }
  std::vector<std::int32_t> v(z->size());
  if (z->type() == dtype_id::uint8) {
    std::copy(z->data<std::uint8_t>().begin(), z->data<std::uint8_t>().end(), v.begin());
  } else {
    std::copy(z->data<std::int8_t>().begin(), z->data<std::int8_t>().end(), v.begin());
  }
  return v;
}

/// out[i] = t[i] - zp[zp_index(i)] as int16 for the uint8 or int8 tensor t (zp empty: 0).
template <class Index>
void shifted(const tensor& t, const std::vector<std::int32_t>& zp, Index zp_index,
             std::int16_t* out) {
  auto run = [&](const auto* src) {
    const std::size_t n = t.size();
    if (zp.size() <= 1) {
      const std::int32_t z = zp.empty() ? 0 : zp[0];
      for (std::size_t i = 0; i < n; ++i)
        out[i] = static_cast<std::int16_t>(src[i] - z);
    } else {
      for (std::size_t i = 0; i < n; ++i)
        out[i] = static_cast<std::int16_t>(src[i] - zp[zp_index(i)]);
    }
  };
  if (t.type() == dtype_id::uint8)
    run(t.data<std::uint8_t>().data());
  else
    run(t.data<std::int8_t>().data());
}

// ---- int16 x int16 -> int32 product -------------------------------------------------------

constexpr std::size_t panel = 8;  ///< columns of B per packed panel
constexpr std::size_t tile_rows = 4;

/// Values of the packed form of a [k, n] matrix: ceil(n / 8) panels of ceil(k / 2) row pairs,
/// each pair stored column by column as (b[2q][j], b[2q + 1][j]) (a zero row completes an odd k),
/// the operand order of pmaddwd.
std::size_t packed_size(std::size_t k, std::size_t n) {
  return (n + panel - 1) / panel * ((k + 1) / 2) * panel * 2;
}

/// Packs row-major b [k, n] (leading dim ldb) into panels, columns past n zero.
void pack_panels(const std::int16_t* b, std::size_t ldb, std::size_t k, std::size_t n,
                 std::int16_t* out) {
  for (std::size_t j0 = 0; j0 < n; j0 += panel) {
    const std::size_t w = std::min(panel, n - j0);
    for (std::size_t kk = 0; kk < k; kk += 2, out += 2 * panel) {
      std::fill(out, out + 2 * panel, std::int16_t{0});
      for (std::size_t j = 0; j < w; ++j) {
        out[2 * j] = b[kk * ldb + j0 + j];
        if (kk + 1 < k)
          out[2 * j + 1] = b[(kk + 1) * ldb + j0 + j];
      }
    }
  }
}

/// A's values kk and kk + 1 of one row (0 past k) as the int32 lane pmaddwd pairs with B's.
std::int32_t a_pair(const std::int16_t* row, std::size_t kk, std::size_t k) {
  const auto lo = static_cast<std::uint16_t>(row[kk]);
  const auto hi = kk + 1 < k ? static_cast<std::uint16_t>(row[kk + 1]) : std::uint16_t{0};
  return static_cast<std::int32_t>(static_cast<std::uint32_t>(lo) |
                                   (static_cast<std::uint32_t>(hi) << 16));
}

#if defined(__SSE2__)
/// C rows [0, mr) x columns [0, nr) (mr <= 4, nr <= 8) = A rows (leading dim lda) times one
/// packed panel: pmaddwd multiplies a pair of k per lane into int32 (|sum| <= 2 * 255^2, exact)
/// and paddd accumulates, wrapping modulo 2^32 in hardware (no C++ signed overflow).
void tile(const std::int16_t* a, std::size_t lda, std::size_t mr, const std::int16_t* bp,
          std::size_t k, std::int32_t* c, std::size_t ldc, std::size_t nr) {
  __m128i acc[tile_rows][2];
  for (auto& row : acc)
    row[0] = row[1] = _mm_setzero_si128();
  const std::int16_t* ar[tile_rows];
  for (std::size_t r = 0; r < tile_rows; ++r)
    ar[r] = a + std::min(r, mr - 1) * lda;  // rows past mr repeat the last (not stored)
  for (std::size_t kk = 0; kk < k; kk += 2, bp += 2 * panel) {
    const __m128i b0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(bp));
    const __m128i b1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(bp + panel));
    for (std::size_t r = 0; r < tile_rows; ++r) {
      const __m128i av = _mm_set1_epi32(a_pair(ar[r], kk, k));
      acc[r][0] = _mm_add_epi32(acc[r][0], _mm_madd_epi16(av, b0));
      acc[r][1] = _mm_add_epi32(acc[r][1], _mm_madd_epi16(av, b1));
    }
  }
  for (std::size_t r = 0; r < mr; ++r) {
    std::int32_t row[panel];
    _mm_storeu_si128(reinterpret_cast<__m128i*>(row), acc[r][0]);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(row + 4), acc[r][1]);
    std::copy_n(row, nr, c + r * ldc);
  }
}
#else
/// The same products lane by lane, in unsigned arithmetic (wrapping modulo 2^32).
void tile(const std::int16_t* a, std::size_t lda, std::size_t mr, const std::int16_t* bp,
          std::size_t k, std::int32_t* c, std::size_t ldc, std::size_t nr) {
  for (std::size_t r = 0; r < mr; ++r) {
    for (std::size_t j = 0; j < nr; ++j) {
      std::uint32_t acc = 0;
      for (std::size_t kk = 0; kk < k; ++kk) {
        const std::int16_t bv = bp[(kk / 2 * panel + j) * 2 + kk % 2];
        acc += static_cast<std::uint32_t>(static_cast<std::int32_t>(a[r * lda + kk])) *
               static_cast<std::uint32_t>(static_cast<std::int32_t>(bv));
      }
      c[r * ldc + j] = static_cast<std::int32_t>(acc);  // modular: exact since C++20
    }
  }
}
#endif

/// C [m, n] (leading dim ldc) = A [m, k] (row-major, leading dim k) times B packed by
/// pack_panels, wrapping modulo 2^32. Tiles of 4 rows x 8 columns, panel by panel (a panel
/// stays in cache while all row tiles pass over it), split over `pool` unless it is null.
void gemm_s16(thread_pool* pool, std::size_t m, std::size_t n, std::size_t k, const std::int16_t* a,
              const std::int16_t* bp, std::int32_t* c, std::size_t ldc) {
  const std::size_t row_tiles = (m + tile_rows - 1) / tile_rows;
  const std::size_t tiles = row_tiles * ((n + panel - 1) / panel);
  const std::size_t panel_size = packed_size(k, panel);
  auto run = [&](std::size_t t0, std::size_t t1) {
    for (std::size_t t = t0; t < t1; ++t) {
      const std::size_t p = t / row_tiles;
      const std::size_t i0 = t % row_tiles * tile_rows;
      tile(a + i0 * k, k, std::min(tile_rows, m - i0), bp + p * panel_size, k,
           c + i0 * ldc + p * panel, ldc, std::min(panel, n - p * panel));
    }
  };
  const double work = static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  if (!pool || pool->size() == 1 || work < 1e6) {
    run(0, tiles);
    return;
  }
  pool->parallel_for(tiles, 1, run);
}

// ---- MatMulInteger ------------------------------------------------------------------------

/// C [rows, n] (leading dim n) = A' [rows, k] (int16, zero point already taken) times B raw
/// (uint8 or int8 [k, n], row-major) minus B's zero points: for the few-row products (one
/// token, a 1-D A) where packing B would cost more than the product. Per column,
/// sum_k a'(b - zb) = sum_k a' b - zb sum_k a', all modulo 2^32 (unsigned, no overflow UB);
/// columns split over the pool.
void gemm_few_rows(thread_pool& pool, std::size_t rows, std::size_t n, std::size_t k,
                   const std::int16_t* a, const tensor& b, const std::vector<std::int32_t>& zb,
                   std::int32_t* c) {
  constexpr std::size_t block = 256;  // columns per task: a row of accumulators in L1
  const std::size_t blocks = (n + block - 1) / block;
  auto run = [&](const auto* bd) {
    pool.parallel_for(blocks, 1, [&](std::size_t b0, std::size_t b1) {
      std::uint32_t acc[block];
      for (std::size_t blk = b0; blk < b1; ++blk) {
        const std::size_t j0 = blk * block, nj = std::min(block, n - j0);
        for (std::size_t r = 0; r < rows; ++r) {
          const std::int16_t* ar = a + r * k;
          std::fill_n(acc, nj, 0u);
          std::uint32_t asum = 0;
          for (std::size_t kk = 0; kk < k; ++kk) {
            const std::int32_t av = ar[kk];
            asum += static_cast<std::uint32_t>(av);
            const auto* brow = bd + kk * n + j0;
            for (std::size_t j = 0; j < nj; ++j)
              acc[j] += static_cast<std::uint32_t>(av * static_cast<std::int32_t>(brow[j]));
          }
          for (std::size_t j = 0; j < nj; ++j) {
            const std::int32_t z = zb.empty() ? 0 : zb[zb.size() == 1 ? 0 : j0 + j];
            const std::uint32_t v = acc[j] - static_cast<std::uint32_t>(z) * asum;
            c[r * n + j0 + j] = static_cast<std::int32_t>(v);
          }
        }
      }
    });
  };
  if (b.type() == dtype_id::uint8)
    run(b.data<std::uint8_t>().data());
  else
    run(b.data<std::int8_t>().data());
}

void k_matmul_integer(kernel_context& c) {
  const tensor& a = byte_input(c, 0);
  const tensor& b = byte_input(c, 1);
  const matmul_shape s = plan_matmul(c, a.shape(), b.shape());
  // a_zero_point: per tensor or per row of A (M values); b_zero_point: per tensor or per column
  // of B (N values). ONNX Runtime 1.30 takes per-tensor a_zero_point only.
  const auto za = zero_points(c, 2, a, s.m, "one per row of A");
  const auto zb = zero_points(c, 3, b, s.n, "one per column of B");
  check_output_elements(c, s.out);
  std::vector<std::int16_t> a16(a.size());
  const std::size_t m = s.m, k = s.k, n = s.n;
  shifted(
      a, za, [&](std::size_t i) { return i / std::max<std::size_t>(k, 1) % m; }, a16.data());
  const std::size_t batches = s.a_index.size();
  // One B for every batch and A's matrices in output order: one product of batches * m rows.
  bool fold = true;
  for (std::size_t bi = 0; bi < batches; ++bi)
    fold = fold && s.b_index[bi] == s.b_index[0] && s.a_index[bi] == bi;
  if (fold && b.size() == k * n && batches * m <= tile_rows && k > 0) {
    tensor out(dtype_id::int32, s.out, uninitialized);  // every element is written
    gemm_few_rows(c.pool, batches * m, n, k, a16.data(), b, zb, out.data<std::int32_t>().data());
    c.out(0) = std::move(out);
    return;
  }
  std::vector<std::int16_t> b16(b.size());
  shifted(
      b, zb, [&](std::size_t i) { return i % n; }, b16.data());
  // B's matrices, packed once each.
  const std::size_t nb_b = k * n == 0 ? 0 : b.size() / (k * n);
  const std::size_t psize = packed_size(k, n);
  std::vector<std::int16_t> packed(psize * nb_b);
  c.pool.parallel_for(nb_b, 1, [&](std::size_t i0, std::size_t i1) {
    for (std::size_t i = i0; i < i1; ++i)
      pack_panels(b16.data() + i * k * n, n, k, n, packed.data() + i * psize);
  });
  tensor out(dtype_id::int32, s.out, uninitialized);  // every element is written below
  std::int32_t* po = out.data<std::int32_t>().data();
  if (k == 0) {
    std::fill_n(po, out.size(), 0);
  } else if (fold) {
    if (batches > 0) {
      gemm_s16(&c.pool, batches * m, n, k, a16.data(), packed.data() + s.b_index[0] * psize, po, n);
    }
  } else {
    for (std::size_t bi = 0; bi < batches; ++bi) {
      gemm_s16(&c.pool, m, n, k, a16.data() + s.a_index[bi] * m * k,
               packed.data() + s.b_index[bi] * psize, po + bi * m * n, n);
    }
  }
  c.out(0) = std::move(out);
}

// ---- ConvInteger --------------------------------------------------------------------------

void k_conv_integer(kernel_context& c) {
  const tensor& x = byte_input(c, 0);
  const tensor& w = byte_input(c, 1);
  if (x.rank() != 3 && x.rank() != 4) {
    c.fail("quark.onnx.shape",
           "only 1-D and 2-D ConvInteger is supported, input is " + shape_string(x.shape()));
  }
  const geometry g = conv_geometry(c, x, w);
  // conv_geometry checked kernel_shape against the weight.
  // x_zero_point: per tensor; w_zero_point: per tensor or per output channel (M values). ONNX
  // Runtime 1.30 takes per-tensor w_zero_point only ("Non per-tensor quantization is not
  // supported now").
  const auto zx = zero_points(c, 2, x, 0, "");
  const auto zw = zero_points(c, 3, w, g.m, "one per output channel");
  shape_t out_shape{to_i64(g.n), to_i64(g.m)};
  if (x.rank() == 4)
    out_shape.push_back(to_i64(g.oh));
  out_shape.push_back(to_i64(g.ow));
  check_output_elements(c, out_shape);
  const std::size_t cg = g.c / g.group;
  const std::size_t mg = g.m / g.group;
  const std::size_t kdim = cg * g.kh * g.kw;
  const std::size_t npix = g.oh * g.ow;
  // Zero points subtracted first: a padded position then holds 0, i.e. x_zero_point.
  std::vector<std::int16_t> x16(x.size());
  std::vector<std::int16_t> w16(w.size());
  shifted(
      x, zx, [](std::size_t) { return std::size_t{0}; }, x16.data());
  shifted(
      w, zw, [&](std::size_t i) { return i / std::max<std::size_t>(kdim, 1); }, w16.data());
  tensor out(dtype_id::int32, out_shape, uninitialized);  // every element is written below
  std::int32_t* py = out.data<std::int32_t>().data();
  if (kdim == 0) {
    std::fill_n(py, out.size(), 0);
    c.out(0) = std::move(out);
    return;
  }
  // Blocks of output pixels (multiples of the panel width): each thread expands one block of the
  // im2col matrix, packs it and multiplies every output channel of the group against it.
  const std::size_t block =
      std::clamp<std::size_t>((std::size_t{1} << 17) / kdim / panel * panel, 64, 4096);
  for (std::size_t img = 0; img < g.n; ++img) {
    for (std::size_t gi = 0; gi < g.group; ++gi) {
      const std::int16_t* xg = x16.data() + (img * g.c + gi * cg) * g.h * g.w;
      const std::int16_t* wg = w16.data() + gi * mg * kdim;
      std::int32_t* yg = py + (img * g.m + gi * mg) * npix;
      for_each_chunk(c.pool, npix, block, [&](std::size_t, std::size_t p0, std::size_t p1) {
        thread_local std::vector<std::int16_t> col, packed;
        col.resize(kdim * (p1 - p0));
        packed.resize(packed_size(kdim, p1 - p0));
        im2col(g, xg, kdim, p0, p1, col.data());
        pack_panels(col.data(), p1 - p0, kdim, p1 - p0, packed.data());
        gemm_s16(nullptr, mg, p1 - p0, kdim, wg, packed.data(), yg + p0, npix);
      });
    }
  }
  c.out(0) = std::move(out);
}

}  // namespace

void register_integer(registry_map& r) {
  r["DynamicQuantizeLinear"] = k_dynamic_quantize;
  r["MatMulInteger"] = k_matmul_integer;
  r["ConvInteger"] = k_conv_integer;
}

}  // namespace quark::onnx::rt
