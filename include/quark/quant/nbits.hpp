// SPDX-License-Identifier: MIT
// Block-wise n-bit weights in the layout of ONNX Runtime's com.microsoft::MatMulNBits: the
// weight-only quantization of a constant MatMul weight B [K, N] that AMD Quark's UseMatMulNBits
// (algorithm "DEFAULT") and ONNX Runtime's MatMulNBitsQuantizer perform (quark-spec §10.7).
//
// B is cut, column by column, into blocks of `block_size` consecutive rows (the last block of a
// column is shorter when block_size does not divide K). Each block gets one scale and, when
// asymmetric, one zero point, computed in float32 from the block's own range as ONNX Runtime's
// block quantizer (MLAS) computes them, with Q = 2^bits - 1 and mid = 2^(bits-1):
//
//     symmetric:  m = the block value of largest magnitude (the minimum on a tie),
//                 scale = -m / mid (negative for a positive m), zero point mid (implicit)
//     asymmetric: lo = min(min, 0), hi = max(max, 0), scale = (hi - lo) / Q,
//                 zero point = roundf(clamp(0 - lo / scale, 0, Q))   (0 when scale is 0)
//     code = clamp(roundf(v * (1 / scale) + zero point), 0, Q)   (the code is the zero point
//            when scale is 0); roundf rounds half away from zero
//
// and dequantization is (code - zero point) * scale. The negative symmetric scale maps the
// largest-magnitude value onto code 0, the end of the range that has one more step.
//
// Storage (what MatMulNBits reads): codes column-major, `packed` [N][k_blocks][blob_size] bytes
// with blob_size = block_size * bits / 8, element k of a block in bits (k * bits) % 8 and up
// of byte k * bits / 8 (for 4 bits: even k low nibble, odd k high nibble); `scales`
// [N][k_blocks]; asymmetric zero points packed the same way, ceil(k_blocks * bits / 8) bytes per
// column. Bytes of the padding past K are 0, except one nibble ONNX Runtime leaves behind and
// quark::quantize_nbits reproduces so that the bytes match (see nbits_padding_code).
//
// The input must be free of NaN and Inf (a NaN never compares in the range scan and an Inf gives
// an Inf or NaN scale); callers check first. Nothing here allocates but quantize_nbits_hqq (one
// copy of B's groups).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <vector>

#include <quark/dtype/convert.hpp>

// QUARK_NBITS_AVX512: nbits_dot_column's AVX-512F block kernel is compiled (x86 with GCC or
// Clang, any -march: it carries a target attribute) and runs where the CPU has AVX-512F.
#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define QUARK_NBITS_AVX512 1
#define QUARK_NBITS_TARGET_AVX512 __attribute__((target("avx512f")))
// GCC 12 at -O1 reports the intrinsics' own _mm512_undefined_*() as maybe-uninitialized once
// they are inlined; the reports are false.
#if defined(__GNUC__) && !defined(__clang__)
#define QUARK_NBITS_AVX512_PUSH \
  _Pragma("GCC diagnostic push") _Pragma("GCC diagnostic ignored \"-Wmaybe-uninitialized\"")
#define QUARK_NBITS_AVX512_POP _Pragma("GCC diagnostic pop")
#else
#define QUARK_NBITS_AVX512_PUSH
#define QUARK_NBITS_AVX512_POP
#endif
#else
#define QUARK_NBITS_AVX512 0
#endif

namespace quark {

/// The shape of one MatMulNBits weight: B is K x N, `bits` 2, 4 or 8, `block_size` a power of
/// two >= 16 (the operator's own requirement).
struct nbits_layout {
  std::int64_t k = 0;
  std::int64_t n = 0;
  int bits = 4;
  std::int64_t block_size = 128;

  [[nodiscard]] constexpr std::int64_t k_blocks() const noexcept {
    return (k + block_size - 1) / block_size;
  }
  /// Bytes of one block of codes.
  [[nodiscard]] constexpr std::int64_t blob_size() const noexcept { return block_size * bits / 8; }
  /// Bytes of all codes: N * k_blocks * blob_size.
  [[nodiscard]] constexpr std::int64_t packed_bytes() const noexcept {
    return n * k_blocks() * blob_size();
  }
  /// Number of scales (and of zero points): N * k_blocks.
  [[nodiscard]] constexpr std::int64_t scale_count() const noexcept { return n * k_blocks(); }
  /// Bytes of packed zero points of one column.
  [[nodiscard]] constexpr std::int64_t zero_point_bytes_per_column() const noexcept {
    return (k_blocks() * bits + 7) / 8;
  }
  [[nodiscard]] constexpr std::int64_t zero_point_bytes() const noexcept {
    return n * zero_point_bytes_per_column();
  }
  [[nodiscard]] constexpr int max_code() const noexcept { return (1 << bits) - 1; }
  /// The implicit zero point of symmetric blocks, 2^(bits-1).
  [[nodiscard]] constexpr int mid_code() const noexcept { return 1 << (bits - 1); }
  [[nodiscard]] constexpr bool valid() const noexcept {
    return k > 0 && n > 0 && (bits == 2 || bits == 4 || bits == 8) && block_size >= 16 &&
           (block_size & (block_size - 1)) == 0;
  }
};

/// Scale and zero point of one block.
struct nbits_block_params {
  float scale = 0.0f;
  std::uint8_t zero_point = 0;
};

/// Symmetric block parameters from the block's minimum and maximum (see the file comment).
[[nodiscard]] inline nbits_block_params nbits_symmetric_params(float lo, float hi,
                                                               int bits) noexcept {
  const float m = std::fabs(hi) > std::fabs(lo) ? hi : lo;
  const float mid = static_cast<float>(1 << (bits - 1));
  return {-m / mid, static_cast<std::uint8_t>(1 << (bits - 1))};
}

/// Asymmetric block parameters from the block's minimum and maximum (see the file comment).
[[nodiscard]] inline nbits_block_params nbits_asymmetric_params(float lo, float hi,
                                                                int bits) noexcept {
  lo = lo < 0.0f ? lo : 0.0f;
  hi = hi > 0.0f ? hi : 0.0f;
  const float q = static_cast<float>((1 << bits) - 1);
  const float scale = (hi - lo) / q;
  // With scale 0 the range is [0, 0] and the zero point is lo's value, 0.
  const float z = scale != 0.0f ? 0.0f - lo / scale : lo;
  std::uint8_t zp = 0;
  if (z > q)
    zp = static_cast<std::uint8_t>((1 << bits) - 1);
  else if (z >= 0.0f)
    zp = static_cast<std::uint8_t>(std::round(z));
  return {scale, zp};
}

namespace detail {

/// clamp(roundf(x), 0, q) for |x| < 2^31, rounding half away from zero from the exact fraction
/// of x. No float selects: under the default -ftrapping-math a compiler will not if-convert a
/// float conditional, and the integer form lets a loop over a row vectorize.
inline std::int32_t nbits_round_clamp(float x, std::int32_t q) noexcept {
  const auto t = static_cast<std::int32_t>(x);   // toward zero
  const float frac = x - static_cast<float>(t);  // exact
  std::int32_t r =
      t + static_cast<std::int32_t>(frac >= 0.5f) - static_cast<std::int32_t>(frac <= -0.5f);
  r = r < 0 ? 0 : r;
  return r > q ? q : r;
}

}  // namespace detail

/// The code of `v` in a block with parameters `p` (1 / scale is computed by the caller once per
/// block: `inv_scale` = scale != 0 ? 1 / scale : 0): clamp(roundf(v * inv_scale + zero point),
/// 0, 2^bits - 1) for finite v. (The sum is clamped to [-1, 2^bits] first, which leaves the
/// result unchanged and any v safe; quantize_nbits skips that, its values lie in their block.)
[[nodiscard]] inline std::uint8_t nbits_code(float v, float inv_scale, std::uint8_t zero_point,
                                             int bits) noexcept {
  const std::int32_t q = (1 << bits) - 1;
  float x = v * inv_scale + static_cast<float>(zero_point);
  if (x != x)
    x = static_cast<float>(zero_point);  // 0 * Inf: an inverse scale that overflowed
  x = x < -1.0f ? -1.0f : x;
  x = x > static_cast<float>(q + 1) ? static_cast<float>(q + 1) : x;
  return static_cast<std::uint8_t>(detail::nbits_round_clamp(x, q));
}

/// The code ONNX Runtime leaves in the unused upper half of the last 4-bit byte of a column
/// when K is odd: its quantizer packs codes in pairs from a buffer it reuses within a strip of
/// 2 * block_size rows, so that nibble repeats the second code of the previous pair, i.e. the
/// code of row K - 2, unless row K - 1 opens a strip (then 0). Harmless for the product (the
/// operator never reads past K); reproduced so that quantized models match byte for byte.
[[nodiscard]] constexpr bool nbits_padding_repeats_previous(const nbits_layout& l) noexcept {
  return l.bits == 4 && l.k % 2 == 1 && (l.k - 1) % (2 * l.block_size) != 0;
}

/// Quantizes B (`w`, row-major K x N, finite) into MatMulNBits storage. `zero_points` must be
/// empty for symmetric blocks (the operator then uses mid_code()) and hold
/// l.zero_point_bytes() bytes otherwise; `packed` l.packed_bytes(), `scales` l.scale_count().
/// `float16_scales`: the scales will be stored as float16 (a float16 weight's): each is rounded
/// to float16 before the codes are computed from it, so `scales` holds float16 values.
/// Throws std::invalid_argument on an invalid layout or wrong buffer sizes.
inline void quantize_nbits(std::span<const float> w, const nbits_layout& l, bool symmetric,
                           std::span<std::uint8_t> packed, std::span<float> scales,
                           std::span<std::uint8_t> zero_points, bool float16_scales = false) {
  if (!l.valid())
    throw std::invalid_argument("quantize_nbits: invalid layout (bits 2/4/8, block_size >= 16)");
  if (static_cast<std::int64_t>(w.size()) != l.k * l.n ||
      static_cast<std::int64_t>(packed.size()) != l.packed_bytes() ||
      static_cast<std::int64_t>(scales.size()) != l.scale_count() ||
      static_cast<std::int64_t>(zero_points.size()) != (symmetric ? 0 : l.zero_point_bytes())) {
    throw std::invalid_argument("quantize_nbits: buffer sizes do not match the layout");
  }
  const std::int64_t kb = l.k_blocks();
  const std::int64_t blob = l.blob_size();
  const std::int64_t zcol = l.zero_point_bytes_per_column();
  const int per_byte = 8 / l.bits;
  const auto mask = static_cast<std::uint8_t>((1 << l.bits) - 1);
  for (auto& b : packed)
    b = 0;
  for (auto& b : zero_points)
    b = 0;
  // B is row-major and its blocks run down columns: a tile of adjacent columns is processed
  // together, so that every row of a block is read as one contiguous run, and the tile's blobs
  // are assembled in a local buffer (writing them in place would hit addresses kb * blob bytes
  // apart, which share a handful of cache sets) and copied out once per block.
  constexpr std::int64_t tile = 256;
  constexpr std::int64_t local_bytes = 16384;
  alignas(64) std::uint8_t local[local_bytes];
  float lo[tile], hi[tile], inv[tile];
  float zpf[tile];
  std::uint8_t codes[tile];
  const std::int32_t max_code = l.max_code();
  const bool local_fits = blob <= local_bytes;
  const std::int64_t tile_width = local_fits ? std::min(tile, local_bytes / blob) : 1;
  for (std::int64_t c0 = 0; c0 < l.n; c0 += tile_width) {
    const std::int64_t width = std::min(tile_width, l.n - c0);
    for (std::int64_t b = 0; b < kb; ++b) {
      const std::int64_t r0 = b * l.block_size;
      const std::int64_t r1 = std::min(r0 + l.block_size, l.k);
      const float* first = w.data() + r0 * l.n + c0;
      for (std::int64_t j = 0; j < width; ++j)
        lo[j] = hi[j] = first[j];
      for (std::int64_t r = r0 + 1; r < r1; ++r) {
        const float* row = w.data() + r * l.n + c0;
        for (std::int64_t j = 0; j < width; ++j) {
          lo[j] = row[j] < lo[j] ? row[j] : lo[j];
          hi[j] = row[j] > hi[j] ? row[j] : hi[j];
        }
      }
      for (std::int64_t j = 0; j < width; ++j) {
        const std::int64_t col = c0 + j;
        nbits_block_params p = symmetric ? nbits_symmetric_params(lo[j], hi[j], l.bits)
                                         : nbits_asymmetric_params(lo[j], hi[j], l.bits);
        if (float16_scales)  // stored as float16; the codes use the stored value, as in MLAS
          p.scale = to_float(convert<float16>(p.scale));
        scales[static_cast<std::size_t>(col * kb + b)] = p.scale;
        // A scale below 2^-128 has no finite reciprocal (weights below 1e-38): such a block
        // stores its zero point everywhere, i.e. zeros (ONNX Runtime's packer would multiply by
        // Inf there and convert a NaN).
        const float r = p.scale != 0.0f ? 1.0f / p.scale : 0.0f;
        inv[j] = r - r == 0.0f ? r : 0.0f;
        zpf[j] = static_cast<float>(p.zero_point);
        if (!symmetric) {
          zero_points[static_cast<std::size_t>(col * zcol + b / per_byte)] |=
              static_cast<std::uint8_t>(p.zero_point << ((b % per_byte) * l.bits));
        }
      }
      std::uint8_t* dst = local;
      std::int64_t dst_stride = blob;
      if (local_fits) {
        std::fill_n(local, width * blob, std::uint8_t{0});
      } else {  // one column (width 1), straight into its block
        dst = packed.data() + c0 * kb * blob + b * blob;
      }
      for (std::int64_t r = r0; r < r1; ++r) {
        const float* row = w.data() + r * l.n + c0;
        const std::int64_t i = r - r0;
        const int shift = static_cast<int>(i % per_byte) * l.bits;
        // nbits_code without its clamp: |row[j] * inv[j]| is at most 2^bits (plus rounding),
        // the value being inside its block's range. Vectorizes.
        for (std::int64_t j = 0; j < width; ++j) {
          codes[j] = static_cast<std::uint8_t>(
              detail::nbits_round_clamp(row[j] * inv[j] + zpf[j], max_code));
        }
        std::uint8_t* at = dst + i / per_byte;
        for (std::int64_t j = 0; j < width; ++j)
          at[j * dst_stride] |= static_cast<std::uint8_t>((codes[j] & mask) << shift);
      }
      if (local_fits) {
        for (std::int64_t j = 0; j < width; ++j)
          std::copy_n(local + j * blob, blob, packed.data() + (c0 + j) * kb * blob + b * blob);
      }
    }
  }
  if (nbits_padding_repeats_previous(l)) {
    const std::int64_t last = (l.k - 1) % l.block_size;  // even: the low nibble of its byte
    const std::int64_t prev = ((l.k - 2) / l.block_size) * blob + ((l.k - 2) % l.block_size) / 2;
    for (std::int64_t col = 0; col < l.n; ++col) {
      std::uint8_t* column = packed.data() + col * kb * blob;
      std::uint8_t& byte = column[(kb - 1) * blob + last / 2];
      byte = static_cast<std::uint8_t>(byte | (column[prev] & 0xF0));
    }
  }
}

/// Stores codes chosen elsewhere (GPTQ: quark/algo/gptq.hpp) in MatMulNBits layout: `codes`
/// row-major K x N, each in [0, 2^bits - 1], into `packed` (l.packed_bytes()); `zero_codes`, when
/// not empty, holds l.scale_count() zero points ordered [N][k_blocks] (the order of the scales)
/// and is packed into `zero_points` (l.zero_point_bytes()), else `zero_points` must be empty
/// (symmetric blocks: mid_code()). Padding past K is 0. Throws std::invalid_argument on an
/// invalid layout, wrong sizes or a code out of range.
inline void pack_nbits(std::span<const std::int32_t> codes, const nbits_layout& l,
                       std::span<std::uint8_t> packed, std::span<const std::int32_t> zero_codes,
                       std::span<std::uint8_t> zero_points) {
  if (!l.valid())
    throw std::invalid_argument("pack_nbits: invalid layout (bits 2/4/8, block_size >= 16)");
  const bool zps = !zero_codes.empty();
  if (static_cast<std::int64_t>(codes.size()) != l.k * l.n ||
      static_cast<std::int64_t>(packed.size()) != l.packed_bytes() ||
      (zps && static_cast<std::int64_t>(zero_codes.size()) != l.scale_count()) ||
      static_cast<std::int64_t>(zero_points.size()) != (zps ? l.zero_point_bytes() : 0)) {
    throw std::invalid_argument("pack_nbits: buffer sizes do not match the layout");
  }
  const std::int32_t q = l.max_code();
  const auto out_of_range = [q](std::int32_t v) { return v < 0 || v > q; };
  if (std::any_of(codes.begin(), codes.end(), out_of_range) ||
      std::any_of(zero_codes.begin(), zero_codes.end(), out_of_range))
    throw std::invalid_argument("pack_nbits: a code is outside [0, 2^bits - 1]");
  const std::int64_t kb = l.k_blocks();
  const std::int64_t blob = l.blob_size();
  const int per_byte = 8 / l.bits;
  std::fill(packed.begin(), packed.end(), std::uint8_t{0});
  std::fill(zero_points.begin(), zero_points.end(), std::uint8_t{0});
  for (std::int64_t r = 0; r < l.k; ++r) {
    const std::int64_t b = r / l.block_size, i = r % l.block_size;
    const int shift = static_cast<int>(i % per_byte) * l.bits;
    const std::int32_t* row = codes.data() + r * l.n;
    for (std::int64_t c = 0; c < l.n; ++c) {
      packed[static_cast<std::size_t>(c * kb * blob + b * blob + i / per_byte)] |=
          static_cast<std::uint8_t>(row[c] << shift);
    }
  }
  const std::int64_t zcol = l.zero_point_bytes_per_column();
  for (std::int64_t c = 0; zps && c < l.n; ++c) {
    for (std::int64_t b = 0; b < kb; ++b) {
      zero_points[static_cast<std::size_t>(c * zcol + b / per_byte)] |= static_cast<std::uint8_t>(
          zero_codes[static_cast<std::size_t>(c * kb + b)] << ((b % per_byte) * l.bits));
    }
  }
}

/// The zero points of a stored weight: none (symmetric blocks: mid_code()), packed codes
/// (l.zero_point_bytes() bytes, as quantize_nbits writes them) or float values (one per block,
/// l.scale_count(), which MatMulNBits also accepts: HQQ-style weights).
struct nbits_zero_points {
  std::span<const std::uint8_t> packed;
  std::span<const float> floats;
};

/// Column `col` of the dequantized weight (K values into out[0], out[stride], ...) from MatMulNBits
/// storage, as ONNX Runtime computes it: (code - zero point) * scale, exact in the difference,
/// for integer zero points; code * scale - zero point * scale, rounded after each operation, for
/// float ones (two statements, so that no fused multiply-add forms under ISO C++ or Clang's
/// default contraction; a build with -ffp-contract=fast may differ in the last bit there).
/// Sizes are the caller's to check (dequantize_nbits checks them).
inline void dequantize_nbits_column(std::span<const std::uint8_t> packed,
                                    std::span<const float> scales, const nbits_zero_points& zp,
                                    const nbits_layout& l, std::int64_t col, float* out,
                                    std::ptrdiff_t stride = 1) noexcept {
  const std::int64_t kb = l.k_blocks();
  const std::int64_t blob = l.blob_size();
  const int per_byte = 8 / l.bits;
  const int mask = (1 << l.bits) - 1;
  const std::uint8_t* column = packed.data() + col * kb * blob;
  const float* s = scales.data() + col * kb;
  for (std::int64_t b = 0; b < kb; ++b) {
    const std::int64_t r0 = b * l.block_size;
    const std::int64_t rows = l.k - r0 < l.block_size ? l.k - r0 : l.block_size;
    const std::uint8_t* block = column + b * blob;
    const float scale = s[b];
    float* o = out + r0 * stride;
    if (!zp.floats.empty()) {
      const float offset = zp.floats[static_cast<std::size_t>(col * kb + b)] * scale;
      for (std::int64_t i = 0; i < rows; ++i) {
        const int code = (block[i / per_byte] >> ((i % per_byte) * l.bits)) & mask;
        const float scaled = static_cast<float>(code) * scale;
        o[i * stride] = scaled - offset;
      }
      continue;
    }
    const int z = zp.packed.empty() ? l.mid_code()
                                    : (zp.packed[static_cast<std::size_t>(
                                           col * l.zero_point_bytes_per_column() + b / per_byte)] >>
                                       ((b % per_byte) * l.bits)) &
                                          mask;
    if (l.bits == 4 && stride == 1) {
      // Two codes a byte, low nibble first; vectorizes (the block never overlaps `out`).
      const std::int64_t pairs = rows / 2;
      for (std::int64_t p = 0; p < pairs; ++p) {
        const int byte = block[p];
        o[2 * p] = static_cast<float>((byte & 15) - z) * scale;
        o[2 * p + 1] = static_cast<float>((byte >> 4) - z) * scale;
      }
      if (rows % 2 != 0)
        o[rows - 1] = static_cast<float>((block[pairs] & 15) - z) * scale;
      continue;
    }
    if (l.bits == 4) {
      std::int64_t i = 0;
      for (; i + 1 < rows; i += 2) {
        const int byte = block[i / 2];
        o[i * stride] = static_cast<float>((byte & 15) - z) * scale;
        o[(i + 1) * stride] = static_cast<float>((byte >> 4) - z) * scale;
      }
      if (i < rows)
        o[i * stride] = static_cast<float>((block[i / 2] & 15) - z) * scale;
      continue;
    }
    for (std::int64_t i = 0; i < rows; ++i) {
      const int code = (block[i / per_byte] >> ((i % per_byte) * l.bits)) & mask;
      o[i * stride] = static_cast<float>(code - z) * scale;
    }
  }
}

/// One activation row prepared for nbits_dot_column: its even and odd elements apart (K / 2
/// rounded up and down), and its sum over each block of K (k_blocks values).
struct nbits_row {
  std::span<const float> even, odd, block_sums;
};

/// Fills `even`, `odd` and `block_sums` (sizes (K + 1) / 2, K / 2, k_blocks) from the row `a`
/// (K floats) for nbits_dot_column.
inline void nbits_prepare_row(std::span<const float> a, const nbits_layout& l,
                              std::span<float> even, std::span<float> odd,
                              std::span<float> block_sums) noexcept {
  for (std::int64_t i = 0; 2 * i < l.k; ++i) {
    even[static_cast<std::size_t>(i)] = a[static_cast<std::size_t>(2 * i)];
    if (2 * i + 1 < l.k)
      odd[static_cast<std::size_t>(i)] = a[static_cast<std::size_t>(2 * i + 1)];
  }
  for (std::int64_t b = 0; b < l.k_blocks(); ++b) {
    float sum = 0.0f;
    for (std::int64_t r = b * l.block_size; r < std::min(l.k, (b + 1) * l.block_size); ++r)
      sum += a[static_cast<std::size_t>(r)];
    block_sums[static_cast<std::size_t>(b)] = sum;
  }
}

namespace detail {

/// Lanes of nbits_dot_column's accumulators: 32 pairs of codes (16 bytes twice) per step.
inline constexpr std::int64_t nbits_lanes = 32;

/// The whole 32-pair steps of one block: acc[j] = sum over steps of ae * low code + ao * high
/// code of pair j of each step, then total[j] += acc[j] * scale. Returns the pairs consumed.
inline std::int64_t nbits_block_steps_portable(const std::uint8_t* block, const float* ae,
                                               const float* ao, std::int64_t pairs, float scale,
                                               float* total) noexcept {
  float acc[nbits_lanes] = {};
  std::int64_t p = 0;
  for (; p + nbits_lanes <= pairs; p += nbits_lanes) {
    for (std::int64_t j = 0; j < nbits_lanes; ++j) {
      const int byte = block[p + j];
      const float lo = ae[p + j] * static_cast<float>(byte & 15);
      const float hi = ao[p + j] * static_cast<float>(byte >> 4);
      acc[j] += lo + hi;
    }
  }
  for (std::int64_t j = 0; j < nbits_lanes; ++j)
    total[j] += acc[j] * scale;
  return p;
}

#if QUARK_NBITS_AVX512
QUARK_NBITS_AVX512_PUSH
/// nbits_block_steps_portable with AVX-512F: the same lanes and operations (multiplies and adds,
/// no fused multiply-add), in two 16-lane registers. GCC and Clang contract the portable form's
/// a * b + c into FMAs where the target has them and -ffp-contract allows, so the two forms
/// agree to float rounding, not bit for bit.
QUARK_NBITS_TARGET_AVX512 inline std::int64_t nbits_block_steps_avx512(
    const std::uint8_t* block, const float* ae, const float* ao, std::int64_t pairs, float scale,
    float* total) noexcept {
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  const __m512i low = _mm512_set1_epi32(15);
  std::int64_t p = 0;
  for (; p + nbits_lanes <= pairs; p += nbits_lanes) {
    const __m512i w0 =
        _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(block + p)));
    const __m512i w1 =
        _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(block + p + 16)));
    const __m512 lo0 =
        _mm512_mul_ps(_mm512_loadu_ps(ae + p), _mm512_cvtepi32_ps(_mm512_and_si512(w0, low)));
    const __m512 hi0 =
        _mm512_mul_ps(_mm512_loadu_ps(ao + p), _mm512_cvtepi32_ps(_mm512_srli_epi32(w0, 4)));
    const __m512 lo1 =
        _mm512_mul_ps(_mm512_loadu_ps(ae + p + 16), _mm512_cvtepi32_ps(_mm512_and_si512(w1, low)));
    const __m512 hi1 =
        _mm512_mul_ps(_mm512_loadu_ps(ao + p + 16), _mm512_cvtepi32_ps(_mm512_srli_epi32(w1, 4)));
    acc0 = _mm512_add_ps(acc0, _mm512_add_ps(lo0, hi0));
    acc1 = _mm512_add_ps(acc1, _mm512_add_ps(lo1, hi1));
  }
  const __m512 sc = _mm512_set1_ps(scale);
  _mm512_storeu_ps(total, _mm512_add_ps(_mm512_loadu_ps(total), _mm512_mul_ps(acc0, sc)));
  _mm512_storeu_ps(total + 16, _mm512_add_ps(_mm512_loadu_ps(total + 16), _mm512_mul_ps(acc1, sc)));
  return p;
}
QUARK_NBITS_AVX512_POP
#endif

/// Whether nbits_dot_column uses nbits_block_steps_avx512 (the CPU has AVX-512F).
inline bool nbits_avx512_usable() noexcept {
#if QUARK_NBITS_AVX512
  static const bool ok = __builtin_cpu_supports("avx512f") != 0;
  return ok;
#else
  return false;
#endif
}

/// nbits_dot_column with the block kernel `steps`.
template <class Steps>
float nbits_dot_column_with(Steps steps, const nbits_row& a, std::span<const std::uint8_t> packed,
                            std::span<const float> scales,
                            std::span<const std::uint8_t> zero_points, const nbits_layout& l,
                            std::int64_t col) noexcept {
  const std::int64_t kb = l.k_blocks();
  const std::int64_t blob = l.blob_size();
  const std::uint8_t* column = packed.data() + col * kb * blob;
  const float* s = scales.data() + col * kb;
  const std::uint8_t* zc =
      zero_points.empty() ? nullptr : zero_points.data() + col * l.zero_point_bytes_per_column();
  // Per lane, sum over blocks of scale * (sum of a_k code_k); the lanes are added once at the
  // end (a horizontal sum per block would cost more than the block's products).
  float total[nbits_lanes] = {};
  float y = 0.0f;
  for (std::int64_t b = 0; b < kb; ++b) {
    const std::int64_t r0 = b * l.block_size;
    const std::int64_t rows = std::min(l.block_size, l.k - r0);
    const std::int64_t pairs = rows / 2;
    const std::uint8_t* block = column + b * blob;
    const float* ae = a.even.data() + r0 / 2;
    const float* ao = a.odd.data() + r0 / 2;
    const float scale = s[b];
    std::int64_t p = steps(block, ae, ao, pairs, scale, total);
    float rest = 0.0f;
    for (; p < pairs; ++p) {
      const int byte = block[p];
      rest += ae[p] * static_cast<float>(byte & 15) + ao[p] * static_cast<float>(byte >> 4);
    }
    if (rows % 2 != 0)
      rest += ae[pairs] * static_cast<float>(block[pairs] & 15);
    const int z = zc == nullptr ? l.mid_code() : (zc[b / 2] >> ((b % 2) * 4)) & 15;
    y += scale * (rest - static_cast<float>(z) * a.block_sums[static_cast<std::size_t>(b)]);
  }
  for (const float v : total)
    y += v;
  return y;
}

}  // namespace detail

/// sum_k a[k] W[k][col] straight from 4-bit MatMulNBits storage with integer zero points (packed,
/// or none: mid_code()), without dequantizing W: per block, scale * (sum a_k code_k - zero point
/// * sum a_k), the inner sum over 32 independent lanes (vectorizes without reassociation
/// licence; with AVX-512F, chosen at run time, in two 16-lane registers). For products of a
/// few rows, where dequantizing W first costs more than the product (a decoding step of a
/// language model). Same value as the dequantized product up to float rounding in another
/// order. l.bits must be 4.
inline float nbits_dot_column(const nbits_row& a, std::span<const std::uint8_t> packed,
                              std::span<const float> scales,
                              std::span<const std::uint8_t> zero_points, const nbits_layout& l,
                              std::int64_t col) noexcept {
#if QUARK_NBITS_AVX512
  if (detail::nbits_avx512_usable()) {
    return detail::nbits_dot_column_with(
        [](const std::uint8_t* b, const float* ae, const float* ao, std::int64_t pairs, float sc,
           float* total) { return detail::nbits_block_steps_avx512(b, ae, ao, pairs, sc, total); },
        a, packed, scales, zero_points, l, col);
  }
#endif
  return detail::nbits_dot_column_with(detail::nbits_block_steps_portable, a, packed, scales,
                                       zero_points, l, col);
}

/// The dequantized weight, row-major K x N (`out` holds l.k * l.n floats), from MatMulNBits
/// storage. Throws std::invalid_argument on sizes that do not match the layout.
inline void dequantize_nbits(std::span<const std::uint8_t> packed, std::span<const float> scales,
                             const nbits_zero_points& zp, const nbits_layout& l,
                             std::span<float> out) {
  if (!l.valid() || static_cast<std::int64_t>(packed.size()) != l.packed_bytes() ||
      static_cast<std::int64_t>(scales.size()) != l.scale_count() ||
      (!zp.packed.empty() && static_cast<std::int64_t>(zp.packed.size()) != l.zero_point_bytes()) ||
      (!zp.floats.empty() && static_cast<std::int64_t>(zp.floats.size()) != l.scale_count()) ||
      static_cast<std::int64_t>(out.size()) != l.k * l.n) {
    throw std::invalid_argument("dequantize_nbits: buffer sizes do not match the layout");
  }
  for (std::int64_t col = 0; col < l.n; ++col)
    dequantize_nbits_column(packed, scales, zp, l, col, out.data() + col, l.n);
}

/// HQQ's settings (ONNX Runtime's HQQWeightOnlyQuantizer defaults; quark-spec §10.7).
struct nbits_hqq_options {
  int iterations = 20;
  double lp_norm = 0.7;
  double beta = 10.0;
  double kappa = 1.01;
};

/// Half-quadratic quantization (HQQ, Badri and Shaji 2023) of B (`w`, row-major K x N, finite)
/// into MatMulNBits storage with float zero points, as ONNX Runtime's HQQ quantizer computes it
/// (quark-spec §10.7, in float32): each block of a column, zero-padded to block_size rows, gets
/// an inverse scale s = min((2^bits - 1) / (max - min), 2e4) (a range of 0 counts as
/// 2^bits - 1) over its values and padding, and a zero point z = RNE(-min s); then, for all
/// blocks together, up to `iterations` rounds of
///
///     q = clamp(RNE(w s + z), 0, 2^bits - 1),  r = (q - z) / s,
///     e = sign(w - r) max(|w - r| - (|w - r| + 1e-8)^(p - 1) / beta, 0),
///     z = mean over the block of (q - (w - e) s),  beta = kappa beta,
///
/// stopping after the first round whose mean |w - r| over all of B (padding included) is not
/// below the best so far (that round's z is kept, as in ONNX Runtime). The codes are then
/// RNE(w s + z) clamped; `scales` receives 1 / s and `zero_points` z (float), both ordered
/// [N][k_blocks]; the padding rows' codes are stored too (they are never read). Returns the
/// number of rounds run. Throws std::invalid_argument on an invalid layout or wrong sizes.
inline int quantize_nbits_hqq(std::span<const float> w, const nbits_layout& l,
                              std::span<std::uint8_t> packed, std::span<float> scales,
                              std::span<float> zero_points, const nbits_hqq_options& o = {}) {
  if (!l.valid())
    throw std::invalid_argument(
        "quantize_nbits_hqq: invalid layout (bits 2/4/8, block_size >= 16)");
  if (static_cast<std::int64_t>(w.size()) != l.k * l.n ||
      static_cast<std::int64_t>(packed.size()) != l.packed_bytes() ||
      static_cast<std::int64_t>(scales.size()) != l.scale_count() ||
      static_cast<std::int64_t>(zero_points.size()) != l.scale_count()) {
    throw std::invalid_argument("quantize_nbits_hqq: buffer sizes do not match the layout");
  }
  const auto kb = static_cast<std::size_t>(l.k_blocks());
  const auto bs = static_cast<std::size_t>(l.block_size);
  const auto n = static_cast<std::size_t>(l.n), k = static_cast<std::size_t>(l.k);
  const std::size_t groups = n * kb;
  const float max_v = static_cast<float>(l.max_code());
  // The groups, [N][k_blocks][block_size], zero-padded past K.
  std::vector<float> g(groups * bs, 0.0f);
  for (std::size_t r = 0; r < k; ++r) {
    for (std::size_t c = 0; c < n; ++c)
      g[(c * kb + r / bs) * bs + r % bs] = w[r * n + c];
  }
  std::vector<float> s(groups), z(groups);
  for (std::size_t j = 0; j < groups; ++j) {
    const float* x = g.data() + j * bs;
    float lo = x[0], hi = x[0];
    for (std::size_t i = 1; i < bs; ++i) {
      lo = x[i] < lo ? x[i] : lo;
      hi = x[i] > hi ? x[i] : hi;
    }
    const float range = hi - lo == 0.0f ? max_v : hi - lo;
    const float inv = max_v / range;
    s[j] = inv > 2e4f ? 2e4f : inv;
    z[j] = std::nearbyint(-lo * s[j]);
  }
  const auto code = [max_v](float x, float sj, float zj) {
    const float q = std::nearbyint(x * sj + zj);
    return q < 0.0f ? 0.0f : (q > max_v ? max_v : q);
  };
  double best = 1e4;
  double beta = o.beta;
  const float p1 = static_cast<float>(o.lp_norm - 1.0);
  int rounds = 0;
  std::vector<float> z_next(groups);
  for (int it = 0; it < o.iterations; ++it) {
    ++rounds;
    const float inv_beta = static_cast<float>(1.0 / beta);
    double err = 0.0;
    for (std::size_t j = 0; j < groups; ++j) {
      const float* x = g.data() + j * bs;
      double acc = 0.0;
      for (std::size_t i = 0; i < bs; ++i) {
        const float q = code(x[i], s[j], z[j]);
        const float r = (q - z[j]) / s[j];
        const float d = x[i] - r;
        const float ad = std::fabs(d);
        const float shrunk = ad - inv_beta * std::pow(ad + 1e-8f, p1);
        const float e = shrunk > 0.0f ? (d > 0.0f ? shrunk : -shrunk) : 0.0f;
        const float t = (x[i] - e) * s[j];
        acc += static_cast<double>(q - t);
        err += static_cast<double>(ad);
      }
      z_next[j] = static_cast<float>(acc / static_cast<double>(bs));
    }
    z.swap(z_next);
    beta *= o.kappa;
    const double current =
        static_cast<double>(static_cast<float>(err / static_cast<double>(groups * bs)));
    if (current < best)
      best = current;
    else
      break;
  }
  const std::size_t blob = static_cast<std::size_t>(l.blob_size());
  const int per_byte = 8 / l.bits;
  std::fill(packed.begin(), packed.end(), std::uint8_t{0});
  for (std::size_t j = 0; j < groups; ++j) {
    const float* x = g.data() + j * bs;
    std::uint8_t* block = packed.data() + j * blob;  // groups are [N][k_blocks], as the blobs
    for (std::size_t i = 0; i < bs; ++i) {
      const auto q = static_cast<std::uint8_t>(code(x[i], s[j], z[j]));
      block[i / static_cast<std::size_t>(per_byte)] |= static_cast<std::uint8_t>(
          q << ((i % static_cast<std::size_t>(per_byte)) * static_cast<std::size_t>(l.bits)));
    }
    scales[j] = 1.0f / s[j];
    zero_points[j] = z[j];
  }
  return rounds;
}

}  // namespace quark
