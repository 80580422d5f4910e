// SPDX-License-Identifier: MIT
// ONNX Runtime's contrib operators of domain com.microsoft that quantized models carry (keys
// "com.microsoft:<op>"): MatMulNBits version 1, the weight-only quantized MatMul that ONNX
// Runtime's and AMD Quark's MatMulNBits quantizers emit. Y = A W (+ bias) with W [K, N] stored
// column by column as 2-, 4- or 8-bit codes in blocks of block_size along K, one scale (and
// zero point) per block. The kernel dequantizes a panel of W's columns at a time into float
// (quark::unpack_codes reads the codes: MatMulNBits packs them LSB first, as ONNX packs INT4)
// and multiplies it with the float GEMM in fp32 whatever accuracy_level asks for (a level only
// picks ONNX Runtime's compute precision; level 4 quantizes A to int8 there). A non-empty g_idx
// is refused: ONNX Runtime 1.30 takes another path for it, whose results differ from the block
// layout even for the trivial g_idx k / block_size (zero points read in another layout).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <quark/dtype/pack.hpp>

#include "runtime/gemm.hpp"
#include "runtime/kernel.hpp"
#include "runtime/registry.hpp"

namespace quark::onnx::rt {
namespace {

// ---- MatMulNBits --------------------------------------------------------------------------

/// The sizes one MatMulNBits node's attributes fix.
struct nbits_layout {
  std::size_t k = 0, n = 0;     ///< W is [K, N]
  int bits = 4;                 ///< bits per code
  std::size_t block = 0;        ///< block_size: codes per scale along K
  std::size_t k_blocks = 0;     ///< blocks per column, ceil(K / block_size)
  std::size_t col_bytes = 0;    ///< B's bytes per column: k_blocks * block_size * bits / 8
  std::size_t zp_bytes = 0;     ///< packed zero points' bytes per column: ceil(k_blocks bits / 8)
  std::uint8_t default_zp = 0;  ///< 2^(bits - 1), the zero point when the input is absent
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

nbits_layout read_layout(const kernel_context& c) {
  nbits_layout l;
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
  l.k_blocks = (l.k + l.block - 1) / l.block;
  l.col_bytes = l.k_blocks * quark::packed_size(l.block, l.bits);
  l.zp_bytes = quark::packed_size(l.k_blocks, l.bits);
  l.default_zp = static_cast<std::uint8_t>(1u << (l.bits - 1));
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
std::string layout_text(const nbits_layout& l) {
  return "K " + std::to_string(l.k) + ", N " + std::to_string(l.n) + ", bits " +
         std::to_string(l.bits) + ", block_size " + std::to_string(l.block);
}

/// What dequantizes one column of W: the checked inputs of a MatMulNBits node.
struct nbits_weights {
  nbits_layout l;
  const std::uint8_t* b = nullptr;         ///< codes, col_bytes per column
  const float* scales = nullptr;           ///< k_blocks per column
  const std::uint8_t* zp_codes = nullptr;  ///< packed zero points, zp_bytes per column, or null
  const float* zp_floats = nullptr;        ///< float zero points, k_blocks per column, or null

  /// Column n of W (K values) into w, with `codes` (K + k_blocks bytes) and `offsets`
  /// (k_blocks floats) as scratch.
  void dequantize_column(std::size_t n, float* w, std::vector<std::uint8_t>& codes,
                         std::vector<float>& offsets) const {
    quark::unpack_codes(std::span<const std::uint8_t>(b + n * l.col_bytes, l.col_bytes), l.bits,
                        std::span<std::uint8_t>(codes.data(), l.k));
    const float* s = scales + n * l.k_blocks;
    if (zp_floats) {
      // ONNX Runtime 1.30 dequantizes with a float zero point as code * scale - zero_point *
      // scale, rounded after each operation (not (code - zero_point) * scale, which differs in
      // the last bit for about half the values; runtime_matmulnbits_ort_test checks every
      // value of W bit for bit). Two statements, so that no FMA fuses them: Clang contracts
      // within one expression only, GCC not at all under -std=c++20 (ISO mode).
      const float* z = zp_floats + n * l.k_blocks;
      for (std::size_t j = 0; j < l.k_blocks; ++j)
        offsets[j] = z[j] * s[j];
      for (std::size_t k = 0; k < l.k; ++k) {
        const float scaled = static_cast<float>(codes[k]) * s[k / l.block];
        w[k] = scaled - offsets[k / l.block];
      }
      return;
    }
    // Integer zero points (packed like B, or 2^(bits - 1) when absent): (code - zero_point) *
    // scale, the difference exact, as ONNX Runtime computes it.
    std::uint8_t* z = codes.data() + l.k;
    if (zp_codes) {
      quark::unpack_codes(std::span<const std::uint8_t>(zp_codes + n * l.zp_bytes, l.zp_bytes),
                          l.bits, std::span<std::uint8_t>(z, l.k_blocks));
    } else {
      std::fill_n(z, l.k_blocks, l.default_zp);
    }
    for (std::size_t k = 0; k < l.k; ++k) {
      const std::size_t j = k / l.block;
      w[k] = static_cast<float>(static_cast<int>(codes[k]) - static_cast<int>(z[j])) * s[j];
    }
  }
};

/// Y [..., N] = A [..., K] W (+ bias). Inputs: A, B, scales, zero_points?, g_idx?, bias?.
void k_matmul_nbits(kernel_context& c) {
  const nbits_layout l = read_layout(c);
  const tensor& a = float_input(c, 0);
  if (a.rank() == 0 || to_size(a.shape().back()) != l.k) {
    c.fail("quark.onnx.shape", "input '" + c.n.inputs[0] + "' has shape " +
                                   shape_string(a.shape()) +
                                   ", its last dimension must be K = " + std::to_string(l.k));
  }
  nbits_weights w{l};
  w.b = sized_input(c, 1, dtype_id::uint8, l.n * l.col_bytes,
                    "B, [N, ceil(K / block_size), block_size * bits / 8] for " + layout_text(l))
            .data<std::uint8_t>()
            .data();
  w.scales = sized_input(c, 2, dtype_id::float32, l.n * l.k_blocks,
                         "scales, N * ceil(K / block_size) for " + layout_text(l))
                 .data<float>()
                 .data();
  if (const tensor* z = c.opt(3)) {
    if (z->type() == dtype_id::float32) {
      w.zp_floats = sized_input(c, 3, dtype_id::float32, l.n * l.k_blocks,
                                "float zero_points, the size of scales for " + layout_text(l))
                        .data<float>()
                        .data();
    } else if (z->type() == dtype_id::uint8) {
      w.zp_codes =
          sized_input(
              c, 3, dtype_id::uint8, l.n * l.zp_bytes,
              "packed zero_points, N * ceil(ceil(K / block_size) * bits / 8) for " + layout_text(l))
              .data<std::uint8_t>()
              .data();
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
    thread_local std::vector<std::uint8_t> codes;
    thread_local std::vector<float> offsets;
    panel.resize(width * l.k);
    codes.resize(l.k + l.k_blocks);
    offsets.resize(l.k_blocks);
    for (std::size_t t = t0; t < t1; ++t) {
      const std::size_t n0 = t % panels * width, n1 = std::min(l.n, n0 + width);
      const std::size_t r0 = t / panels * rows, r1 = std::min(m, r0 + rows);
      if (r0 >= r1)
        continue;
      for (std::size_t n = n0; n < n1; ++n)
        w.dequantize_column(n, panel.data() + (n - n0) * l.k, codes, offsets);
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
