// SPDX-License-Identifier: MIT
// ONNX Runtime's contrib operators of domain com.microsoft that quantized models carry (keys
// "com.microsoft:<op>"): MatMulNBits version 1, the weight-only quantized MatMul that ONNX
// Runtime's and AMD Quark's MatMulNBits quantizers emit. Y = A W (+ bias) with W [K, N] stored
// column by column as 2-, 4- or 8-bit codes in blocks of block_size along K, one scale (and
// zero point) per block. The kernel dequantizes a panel of W's columns at a time into float
// (quark::dequantize_nbits_column, include/quark/quant/nbits.hpp, the storage quark-cpp's
// UseMatMulNBits writes) and multiplies it with the float GEMM; products of at most 4 rows of
// 4-bit codes with integer zero points (a decoding step) read the codes directly instead
// (quark::nbits_dot_column). Always fp32, whatever accuracy_level asks for (a level only picks
// ONNX Runtime's compute precision; level 4 quantizes A to int8 there). A non-empty g_idx
// is refused: ONNX Runtime 1.30 takes another path for it, whose results differ from the block
// layout even for the trivial g_idx k / block_size (zero points read in another layout).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <quark/quant/nbits.hpp>

#include "runtime/gemm.hpp"
#include "runtime/kernel.hpp"
#include "runtime/registry.hpp"

namespace quark::onnx::rt {
namespace {

// ---- MatMulNBits --------------------------------------------------------------------------

/// The sizes one MatMulNBits node's attributes fix (quark::nbits_layout) in this file's units.
struct nbits_sizes {
  quark::nbits_layout l;
  std::size_t k = 0, n = 0;   ///< W is [K, N]
  std::size_t block = 0;      ///< block_size: codes per scale along K
  std::size_t k_blocks = 0;   ///< blocks per column, ceil(K / block_size)
  std::size_t col_bytes = 0;  ///< B's bytes per column: k_blocks * block_size * bits / 8
  std::size_t zp_bytes = 0;   ///< packed zero points' bytes per column: ceil(k_blocks bits / 8)
  int bits = 4;
};

/// Required int attribute `name` in [1, 2^31].
std::size_t size_attribute(const kernel_context& c, const char* name) {
  if (!c.n.has(name))
    c.fail("quark.onnx.runtime", "attribute '" + std::string(name) + "' is required");
  const std::int64_t v = c.n.attr_i(name, 0);
  if (v < 1 || v > max_extent) {
    c.fail("quark.onnx.runtime", "attribute '" + std::string(name) + "' is " + std::to_string(v) +
                                     ", expected 1 to 2^31");
  }
  return to_size(v);
}

nbits_sizes read_layout(const kernel_context& c) {
  nbits_sizes l;
  l.k = size_attribute(c, "K");
  l.n = size_attribute(c, "N");
  const std::int64_t bits = c.n.attr_i("bits", 4);
  if (bits != 2 && bits != 4 && bits != 8) {
    c.fail("quark.onnx.unsupported_op",
           "attribute 'bits' is " + std::to_string(bits) + ", expected 2, 4 or 8");
  }
  l.bits = static_cast<int>(bits);
  l.block = size_attribute(c, "block_size");
  if (l.block < 16 || (l.block & (l.block - 1)) != 0) {
    c.fail("quark.onnx.runtime", "attribute 'block_size' is " + std::to_string(l.block) +
                                     ", expected a power of 2 of at least 16");
  }
  const std::int64_t level = c.n.attr_i("accuracy_level", 0);
  if (level < 0 || level > 4) {
    c.fail("quark.onnx.runtime",
           "attribute 'accuracy_level' is " + std::to_string(level) + ", expected 0 to 4");
  }
  l.l = quark::nbits_layout{to_i64(l.k), to_i64(l.n), l.bits, to_i64(l.block)};
  l.k_blocks = to_size(l.l.k_blocks());
  l.col_bytes = l.k_blocks * to_size(l.l.blob_size());
  l.zp_bytes = to_size(l.l.zero_point_bytes_per_column());
  return l;
}

/// Input i (its role `what`) must hold `count` elements of `type`.
const tensor& sized_input(const kernel_context& c, std::size_t i, dtype_id type, std::size_t count,
                          const std::string& what) {
  const tensor& t = c.in(i);
  if (t.type() != type) {
    c.fail("quark.onnx.runtime", "input '" + c.n.inputs[i] + "' (" + what + ") is " +
                                     std::string(dtype_name(t.type())) + ", expected " +
                                     std::string(dtype_name(type)));
  }
  if (t.size() != count) {
    c.fail("quark.onnx.shape", "input '" + c.n.inputs[i] + "' (" + what + ") has shape " +
                                   shape_string(t.shape()) + ", expected " + std::to_string(count) +
                                   " values");
  }
  return t;
}

/// The layout's description for size errors.
std::string layout_text(const nbits_sizes& l) {
  return "K " + std::to_string(l.k) + ", N " + std::to_string(l.n) + ", bits " +
         std::to_string(l.bits) + ", block_size " + std::to_string(l.block);
}

/// Y [..., N] = A [..., K] W (+ bias). Inputs: A, B, scales, zero_points?, g_idx?, bias?.
void k_matmul_nbits(kernel_context& c) {
  const nbits_sizes l = read_layout(c);
  const tensor& a = float_input(c, 0);
  if (a.rank() == 0 || to_size(a.shape().back()) != l.k) {
    c.fail("quark.onnx.shape", "input '" + c.n.inputs[0] + "' has shape " +
                                   shape_string(a.shape()) +
                                   ", its last dimension must be K = " + std::to_string(l.k));
  }
  const std::span<const std::uint8_t> b =
      sized_input(c, 1, dtype_id::uint8, l.n * l.col_bytes,
                  "B, [N, ceil(K / block_size), block_size * bits / 8] for " + layout_text(l))
          .data<std::uint8_t>();
  const std::span<const float> scales =
      sized_input(c, 2, dtype_id::float32, l.n * l.k_blocks,
                  "scales, N * ceil(K / block_size) for " + layout_text(l))
          .data<float>();
  quark::nbits_zero_points zp;
  if (const tensor* z = c.opt(3)) {
    if (z->type() == dtype_id::float32) {
      zp.floats = sized_input(c, 3, dtype_id::float32, l.n * l.k_blocks,
                              "float zero_points, the size of scales for " + layout_text(l))
                      .data<float>();
    } else if (z->type() == dtype_id::uint8) {
      zp.packed = sized_input(c, 3, dtype_id::uint8, l.n * l.zp_bytes,
                              "packed zero_points, N * ceil(ceil(K / block_size) * bits / 8) for " +
                                  layout_text(l))
                      .data<std::uint8_t>();
    } else {
      c.fail("quark.onnx.runtime", "input '" + c.n.inputs[3] + "' (zero_points) is " +
                                       std::string(dtype_name(z->type())) +
                                       ", expected uint8 (packed) or float32");
    }
  }
  if (const tensor* g = c.opt(4); g && g->size() > 0) {
    c.fail("quark.onnx.unsupported_op",
           "input '" + c.n.inputs[4] +
               "' (g_idx) is not supported: only blocks of consecutive rows of B are");
  }
  const float* bias = nullptr;
  if (c.opt(5))
    bias = sized_input(c, 5, dtype_id::float32, l.n, "bias, N values").data<float>().data();

  shape_t out_shape = a.shape();
  out_shape.back() = to_i64(l.n);
  check_output_elements(c, out_shape);
  tensor y(dtype_id::float32, out_shape, uninitialized);  // every element is written below
  const std::size_t m = a.size() / l.k;
  if (m == 0) {
    c.out(0) = std::move(y);
    return;
  }
  const float* pa = a.data<float>().data();
  float* py = y.data<float>().data();

  // A few rows of 4-bit codes with integer zero points (a decoding step): the product straight
  // from the codes (quark::nbits_dot_column), reading 1/8 of the float weight's bytes and
  // dequantizing nothing.
  if (m <= 4 && l.bits == 4 && zp.floats.empty()) {
    const std::size_t half = (l.k + 1) / 2;
    std::vector<float> prepared(m * (2 * half + l.k_blocks));
    std::vector<quark::nbits_row> rows_of_a(m);
    for (std::size_t r = 0; r < m; ++r) {
      float* even = prepared.data() + r * (2 * half + l.k_blocks);
      float* odd = even + half;
      float* sums = odd + half;
      quark::nbits_prepare_row(std::span<const float>(pa + r * l.k, l.k), l.l,
                               std::span<float>(even, half), std::span<float>(odd, l.k / 2),
                               std::span<float>(sums, l.k_blocks));
      rows_of_a[r] = {std::span<const float>(even, half), std::span<const float>(odd, l.k / 2),
                      std::span<const float>(sums, l.k_blocks)};
    }
    c.pool.parallel_for(l.n, 64, [&](std::size_t n0, std::size_t n1) {
      for (std::size_t n = n0; n < n1; ++n) {
        for (std::size_t r = 0; r < m; ++r) {
          const float v =
              quark::nbits_dot_column(rows_of_a[r], b, scales, zp.packed, l.l, to_i64(n));
          py[r * l.n + n] = bias ? v + bias[n] : v;
        }
      }
    });
    c.out(0) = std::move(y);
    return;
  }

  // Tasks: panels of columns (a panel of W about 256 KB, at least 16 columns, and at least as
  // many panels as threads when N allows) times row blocks when there are fewer panels than
  // threads and rows enough (each row block dequantizes its panel again, a small cost next to
  // the 16+ rows it multiplies).
  const std::size_t threads = c.pool.size();
  std::size_t width = std::max<std::size_t>(16, (std::size_t{1} << 16) / l.k / 16 * 16);
  width = std::min(width, std::max<std::size_t>(16, (l.n + threads - 1) / threads + 15) / 16 * 16);
  const std::size_t panels = (l.n + width - 1) / width;
  const std::size_t row_blocks =
      panels >= threads ? 1 : std::max<std::size_t>(1, std::min(threads / panels, m / 16));
  const std::size_t rows = (m + row_blocks - 1) / row_blocks;
  c.pool.parallel_for(panels * row_blocks, 1, [&](std::size_t t0, std::size_t t1) {
    thread_local std::vector<float> panel;
    panel.resize(width * l.k);
    for (std::size_t t = t0; t < t1; ++t) {
      const std::size_t n0 = t % panels * width, n1 = std::min(l.n, n0 + width);
      const std::size_t r0 = t / panels * rows, r1 = std::min(m, r0 + rows);
      if (r0 >= r1)
        continue;
      for (std::size_t n = n0; n < n1; ++n)
        quark::dequantize_nbits_column(b, scales, zp, l.l, to_i64(n),
                                       panel.data() + (n - n0) * l.k);
      // Y[r0:r1, n0:n1] = A[r0:r1, :] times the panel read as W^T [n1 - n0, K].
      gemm(nullptr, false, true, r1 - r0, n1 - n0, l.k, 1.0f, pa + r0 * l.k, l.k, panel.data(), l.k,
           0.0f, py + r0 * l.n + n0, l.n);
      if (bias) {
        for (std::size_t r = r0; r < r1; ++r) {
          float* yr = py + r * l.n;
          for (std::size_t n = n0; n < n1; ++n)
            yr[n] += bias[n];
        }
      }
    }
  });
  c.out(0) = std::move(y);
}

}  // namespace

void register_contrib(registry_map& r) {
  r["com.microsoft:MatMulNBits"] = k_matmul_nbits;
}

}  // namespace quark::onnx::rt
