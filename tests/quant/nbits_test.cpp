// SPDX-License-Identifier: MIT
// quark::quantize_nbits / dequantize_nbits (MatMulNBits storage) on hand-derived blocks: the
// block quantizer's formulas of quark-spec §10.7 evaluated by hand with exactly representable
// scales, so that every code below is a known number, including the cases where the rounding
// rule shows (half away from zero, after adding the zero point), the tie of the symmetric
// maximum, a zero point on a tie, all-zero blocks and the byte layout (nibble order, short last
// blocks, zero points of an odd block count, the padding nibble of an odd K). ONNX Runtime reads
// the same storage in tests/onnx_frontend/quantizer_nbits_ort_test.cpp. pack_nbits against
// quantize_nbits's own bytes; quantize_nbits_hqq (HQQ) against a numpy float32 reference.
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

#include <doctest/doctest.h>

#include <quark/quant/nbits.hpp>

namespace {

struct quantized {
  std::vector<std::uint8_t> packed;
  std::vector<float> scales;
  std::vector<std::uint8_t> zp;
};

quantized run(const std::vector<float>& w, const quark::nbits_layout& l, bool symmetric) {
  quantized q;
  q.packed.resize(static_cast<std::size_t>(l.packed_bytes()));
  q.scales.resize(static_cast<std::size_t>(l.scale_count()));
  q.zp.resize(symmetric ? 0 : static_cast<std::size_t>(l.zero_point_bytes()));
  quark::quantize_nbits(w, l, symmetric, q.packed, q.scales, q.zp);
  return q;
}

/// Code of row r in a single-column, single-block 4-bit layout.
int code4(const quantized& q, int r) {
  return (q.packed[static_cast<std::size_t>(r / 2)] >> ((r % 2) * 4)) & 0xF;
}

}  // namespace

TEST_CASE("nbits: symmetric 4-bit block, hand-derived codes") {
  // Largest magnitude 3 (positive): scale = -3/8 = -0.375, codes round(v / -0.375 + 8).
  std::vector<float> w(16, 0.0f);
  w[0] = 3.0f;     // -8 + 8 = 0
  w[1] = -2.0f;    // 5.33 + 8 -> 13
  w[2] = 0.5f;     // -1.33 + 8 = 6.67 -> 7
  w[3] = -2.875f;  // 7.67 + 8 -> 16, clamped to 15 (the negative end has one step less)
  w[4] = 0.75f;    // -2 + 8 = 6
  const quark::nbits_layout l{16, 1, 4, 16};
  const quantized q = run(w, l, true);
  REQUIRE(q.scales.size() == 1);
  CHECK(q.scales[0] == -0.375f);
  CHECK(code4(q, 0) == 0);
  CHECK(code4(q, 1) == 13);
  CHECK(code4(q, 2) == 7);
  CHECK(code4(q, 3) == 15);
  CHECK(code4(q, 4) == 6);
  CHECK(code4(q, 5) == 8);  // zeros sit on the implicit zero point
  CHECK(q.packed[0] == (0 | (13 << 4)));
  // Dequantized: (code - 8) * scale; 3 comes back exactly, -2.875 as -2.625.
  std::vector<float> back(16);
  quark::dequantize_nbits(q.packed, q.scales, {}, l, back);
  CHECK(back[0] == 3.0f);
  CHECK(back[3] == -2.625f);
  CHECK(back[4] == 0.75f);
}

TEST_CASE("nbits: symmetric ties and rounding") {
  // |max| == |min|: the minimum is taken, so the scale is positive: -(-2) / 8 = 0.25.
  std::vector<float> w(16, 0.0f);
  w[0] = -2.0f;
  w[1] = 2.0f;
  // v * 4 + 8 lands on halves: roundf goes away from zero (RNE would differ on 8.5 and 10.5),
  // and the zero point is added before rounding (-0.5 + 8 = 7.5 -> 8, not round(-0.5) + 8 = 7).
  w[2] = 0.125f;   // 8.5 -> 9
  w[3] = -0.125f;  // 7.5 -> 8
  w[4] = 0.375f;   // 9.5 -> 10
  w[5] = 0.625f;   // 10.5 -> 11
  const quantized q = run(w, {16, 1, 4, 16}, true);
  CHECK(q.scales[0] == 0.25f);
  CHECK(code4(q, 0) == 0);   // -8 + 8
  CHECK(code4(q, 1) == 15);  // 8 + 8 = 16, clamped
  CHECK(code4(q, 2) == 9);
  CHECK(code4(q, 3) == 8);
  CHECK(code4(q, 4) == 10);
  CHECK(code4(q, 5) == 11);
}

TEST_CASE("nbits: asymmetric 4-bit blocks, hand-derived") {
  const quark::nbits_layout l{16, 1, 4, 16};
  SUBCASE("zero point on a tie rounds away from zero") {
    // [-1.125, 2.625]: scale 3.75 / 15 = 0.25 exactly; zero point 1.125 / 0.25 = 4.5 -> 5.
    std::vector<float> w(16, 0.0f);
    w[0] = -1.125f;
    w[1] = 2.625f;
    w[2] = 0.125f;  // 0.5 + 5 = 5.5 -> 6
    const quantized q = run(w, l, false);
    CHECK(q.scales[0] == 0.25f);
    CHECK((q.zp.at(0) & 0xF) == 5);
    CHECK(code4(q, 0) == 1);   // -4.5 + 5 = 0.5 -> 1 (the range end is not always code 0)
    CHECK(code4(q, 1) == 15);  // 10.5 + 5 = 15.5 -> 16, clamped
    CHECK(code4(q, 2) == 6);
    CHECK(code4(q, 3) == 5);
  }
  SUBCASE("positive block: the range takes in 0") {
    // [0.5, 3.75] -> [0, 3.75]: scale 0.25, zero point 0.
    std::vector<float> w(16, 1.0f);
    w[0] = 0.5f;
    w[1] = 3.75f;
    const quantized q = run(w, l, false);
    CHECK(q.scales[0] == 0.25f);
    CHECK((q.zp.at(0) & 0xF) == 0);
    CHECK(code4(q, 0) == 2);
    CHECK(code4(q, 1) == 15);
    CHECK(code4(q, 2) == 4);
  }
  SUBCASE("negative block: zero at the top code") {
    // [-3.75, -0.25] -> [-3.75, 0]: scale 0.25, zero point 15.
    std::vector<float> w(16, -0.25f);
    w[0] = -3.75f;
    const quantized q = run(w, l, false);
    CHECK(q.scales[0] == 0.25f);
    CHECK((q.zp.at(0) & 0xF) == 15);
    CHECK(code4(q, 0) == 0);
    CHECK(code4(q, 1) == 14);
  }
  SUBCASE("all-zero block") {
    const std::vector<float> w(16, 0.0f);
    const quantized q = run(w, l, false);
    CHECK(q.scales[0] == 0.0f);
    CHECK(q.zp.at(0) == 0);
    CHECK(code4(q, 7) == 0);
    const quantized s = run(w, l, true);
    CHECK(s.scales[0] == 0.0f);
    CHECK(code4(s, 7) == 8);  // the implicit zero point
  }
  SUBCASE("the computed inverse scale, not a division, as the block quantizer does") {
    // [-1, 2]: scale 3 / 15 = 0.2f (0.200000003), zero point 1 / 0.2f = 4.99999992 -> 5.
    std::vector<float> w(16, 0.0f);
    w[0] = -1.0f;
    w[1] = 2.0f;
    w[2] = 0.1f;
    const quantized q = run(w, l, false);
    CHECK(q.scales[0] == 3.0f / 15.0f);
    CHECK((q.zp.at(0) & 0xF) == 5);
    const float inv = 1.0f / (3.0f / 15.0f);
    CHECK(code4(q, 2) == static_cast<int>(std::round(0.1f * inv + 5.0f)));
  }
}

TEST_CASE("nbits: subnormal blocks and float zero points") {
  // 1e-39 / -8 is a scale whose reciprocal overflows: the block stores zeros (its zero point),
  // no Inf * 0 reaches a conversion (the sanitizer build checks float-cast-overflow).
  std::vector<float> w(16, 0.0f);
  w[0] = 1e-39f;
  w[1] = -5e-40f;
  const quark::nbits_layout l{16, 1, 4, 16};
  const quantized q = run(w, l, true);
  CHECK(q.scales[0] == 1e-39f / -8.0f);
  for (int r = 0; r < 16; ++r)
    CHECK(code4(q, r) == 8);
  CHECK(quark::nbits_code(1.0f, std::numeric_limits<float>::infinity(), 8, 4) == 15);
  CHECK(quark::nbits_code(0.0f, std::numeric_limits<float>::infinity(), 8, 4) == 8);
  // Float zero points (HQQ-style storage): code * scale - zero point * scale.
  const std::vector<std::uint8_t> packed = {0x53, 0, 0, 0, 0, 0, 0, 0};  // codes 3, 5, 0, ...
  const std::vector<float> scales = {0.5f}, zf = {2.25f};
  std::vector<float> col(16);
  quark::dequantize_nbits_column(packed, scales, {{}, zf}, l, 0, col.data());
  CHECK(col[0] == 0.375f);   // 1.5 - 1.125
  CHECK(col[1] == 1.375f);   // 2.5 - 1.125
  CHECK(col[2] == -1.125f);  // 0 - 1.125
}

TEST_CASE("nbits: layout of several blocks and columns") {
  // K = 40 with blocks of 16: blocks of 16, 16 and 8 rows; N = 3. Each value encodes its row and
  // column so that the codes show where each element went.
  const quark::nbits_layout l{40, 3, 4, 16};
  CHECK(l.k_blocks() == 3);
  CHECK(l.blob_size() == 8);
  CHECK(l.packed_bytes() == 3 * 3 * 8);
  CHECK(l.zero_point_bytes_per_column() == 2);
  std::vector<float> w(40 * 3);
  for (int r = 0; r < 40; ++r) {
    for (int c = 0; c < 3; ++c)
      w[static_cast<std::size_t>(r * 3 + c)] = static_cast<float>((r % 8) - c);
  }
  const quantized q = run(w, l, false);
  // Column c, block b holds rows 16b.. with values (r % 8) - c in [-c, 7 - c]: lo = -c (0 for
  // c = 0), hi = 7 - c, scale (7 - c + c) / 15 = 7 / 15 and zero point round(c * 15 / 7).
  for (int c = 0; c < 3; ++c) {
    for (int b = 0; b < 3; ++b) {
      CAPTURE(c);
      CAPTURE(b);
      CHECK(q.scales[static_cast<std::size_t>(c * 3 + b)] == 7.0f / 15.0f);
      const int zp = (q.zp[static_cast<std::size_t>(c * 2 + b / 2)] >> ((b % 2) * 4)) & 0xF;
      CHECK(zp == (c == 0 ? 0 : (c == 1 ? 2 : 4)));  // 15/7 = 2.14, 30/7 = 4.29
    }
    // The third block's zero point is the low nibble of the column's second byte; the high
    // nibble is padding (0).
    CHECK((q.zp[static_cast<std::size_t>(c * 2 + 1)] >> 4) == 0);
    // Rows 32..39 fill the first 4 bytes of block 2; its last 4 bytes are padding.
    for (int i = 4; i < 8; ++i)
      CHECK(q.packed[static_cast<std::size_t>(c * 24 + 16 + i)] == 0);
  }
  // Round trip: within half a step of every value.
  std::vector<float> back(w.size());
  quark::dequantize_nbits(q.packed, q.scales, {q.zp, {}}, l, back);
  for (std::size_t i = 0; i < w.size(); ++i)
    CHECK(std::fabs(back[i] - w[i]) <= 0.5f * 7.0f / 15.0f + 1e-6f);
}

TEST_CASE("nbits: pack_nbits stores given codes where quantize_nbits puts its own") {
  // The codes quantize_nbits chose, read back from its bytes by hand, packed again: the same
  // bytes (K = 40 over blocks of 16, N = 3, asymmetric, 4 and 2 bits; the padding nibble aside).
  for (const int bits : {4, 2}) {
    CAPTURE(bits);
    const quark::nbits_layout l{40, 3, bits, 16};
    std::vector<float> w(40 * 3);
    for (std::size_t i = 0; i < w.size(); ++i)
      w[i] = static_cast<float>((i * 7) % 11) - 4.0f;
    const quantized q = run(w, l, false);
    const int per_byte = 8 / bits, mask = (1 << bits) - 1;
    std::vector<std::int32_t> codes(w.size()), zeros(static_cast<std::size_t>(l.scale_count()));
    for (std::int64_t r = 0; r < l.k; ++r) {
      for (std::int64_t c = 0; c < l.n; ++c) {
        const std::int64_t b = r / 16, i = r % 16;
        const std::uint8_t byte = q.packed[static_cast<std::size_t>(
            c * l.k_blocks() * l.blob_size() + b * l.blob_size() + i / per_byte)];
        codes[static_cast<std::size_t>(r * l.n + c)] = (byte >> ((i % per_byte) * bits)) & mask;
      }
    }
    for (std::int64_t c = 0; c < l.n; ++c) {
      for (std::int64_t b = 0; b < l.k_blocks(); ++b) {
        const std::uint8_t byte =
            q.zp[static_cast<std::size_t>(c * l.zero_point_bytes_per_column() + b / per_byte)];
        zeros[static_cast<std::size_t>(c * l.k_blocks() + b)] =
            (byte >> ((b % per_byte) * bits)) & mask;
      }
    }
    std::vector<std::uint8_t> packed(static_cast<std::size_t>(l.packed_bytes()));
    std::vector<std::uint8_t> zp(static_cast<std::size_t>(l.zero_point_bytes()));
    quark::pack_nbits(codes, l, packed, zeros, zp);
    CHECK(packed == q.packed);
    CHECK(zp == q.zp);
  }
  // Symmetric (no zero points), and the argument checks.
  const quark::nbits_layout l{16, 1, 4, 16};
  std::vector<std::int32_t> codes(16);
  for (std::size_t i = 0; i < codes.size(); ++i)
    codes[i] = static_cast<std::int32_t>(i);
  std::vector<std::uint8_t> packed(8);
  quark::pack_nbits(codes, l, packed, {}, {});
  CHECK(packed == std::vector<std::uint8_t>{0x10, 0x32, 0x54, 0x76, 0x98, 0xBA, 0xDC, 0xFE});
  codes[3] = 16;
  CHECK_THROWS_AS(quark::pack_nbits(codes, l, packed, {}, {}), std::invalid_argument);
  codes[3] = -1;
  CHECK_THROWS_AS(quark::pack_nbits(codes, l, packed, {}, {}), std::invalid_argument);
  codes[3] = 3;
  std::vector<std::uint8_t> short_packed(7);
  CHECK_THROWS_AS(quark::pack_nbits(codes, l, short_packed, {}, {}), std::invalid_argument);
}

TEST_CASE("nbits: the padding nibble of an odd K") {
  std::vector<float> w(33);
  for (std::size_t i = 0; i < w.size(); ++i)
    w[i] = static_cast<float>(i % 5) - 1.5f;
  SUBCASE("K = 17: row 16 shares its byte with a repeat of row 15's code") {
    const quark::nbits_layout l{17, 1, 4, 16};
    CHECK(quark::nbits_padding_repeats_previous(l));
    const std::vector<float> v(w.begin(), w.begin() + 17);
    const quantized q = run(v, l, true);
    const int row15 = q.packed[7] >> 4;  // block 0, byte 7, high nibble: -1.5 / -0.3125 + 8
    CHECK(row15 == 13);
    CHECK((q.packed[8] >> 4) == row15);
    CHECK((q.packed[8] & 0xF) == static_cast<int>(std::round(v[16] / q.scales[1] + 8.0f)));
  }
  SUBCASE("K = 33: row 32 opens a strip of 2 blocks, the nibble stays 0") {
    const quark::nbits_layout l{33, 1, 4, 16};
    CHECK(!quark::nbits_padding_repeats_previous(l));
    const quantized q = run(w, l, true);
    CHECK((q.packed[16] >> 4) == 0);
  }
}

TEST_CASE("nbits: 8-bit and 2-bit blocks") {
  SUBCASE("8 bits, symmetric: scale -m / 128, implicit zero point 128") {
    std::vector<float> w(16, 0.0f);
    w[0] = 4.0f;   // scale -4 / 128 = -0.03125: 4 -> -128 + 128 = 0
    w[1] = -1.0f;  // 32 + 128 = 160
    const quantized q = run(w, {16, 1, 8, 16}, true);
    CHECK(q.scales[0] == -0.03125f);
    CHECK(q.packed[0] == 0);
    CHECK(q.packed[1] == 160);
    CHECK(q.packed[2] == 128);
  }
  SUBCASE("2 bits, asymmetric: four codes a byte") {
    // [-1, 2]: scale 1, zero point 1; codes v + 1.
    std::vector<float> w(16, 0.0f);
    w[0] = -1.0f;
    w[1] = 2.0f;
    w[2] = 1.0f;
    w[3] = 0.0f;
    const quantized q = run(w, {16, 1, 2, 16}, false);
    CHECK(q.scales[0] == 1.0f);
    CHECK(q.packed[0] == (0 | (3 << 2) | (2 << 4) | (1 << 6)));
    CHECK((q.zp[0] & 0x3) == 1);
  }
}

TEST_CASE("nbits: a row times the stored weight, straight from the codes") {
  // nbits_dot_column against the dequantized weight multiplied in double: K odd (a lone last
  // code), blocks of 16 (short last block) and of 64 (the 16-lane loop), both zero-point forms.
  std::mt19937 g(11);
  std::normal_distribution<float> d(0.0f, 1.0f);
  for (const std::int64_t block : {16, 64, 128}) {
    for (const bool sym : {true, false}) {
      CAPTURE(block);
      CAPTURE(sym);
      const quark::nbits_layout l{147, 5, 4, block};
      std::vector<float> w(147 * 5), a(147);
      for (auto& x : w)
        x = d(g);
      for (auto& x : a)
        x = d(g);
      const quantized q = run(w, l, sym);
      std::vector<float> deq(w.size());
      quark::dequantize_nbits(q.packed, q.scales, {q.zp, {}}, l, deq);
      std::vector<float> even(74), odd(73), sums(static_cast<std::size_t>(l.k_blocks()));
      quark::nbits_prepare_row(a, l, even, odd, sums);
      const quark::nbits_row row{even, odd, sums};
      for (std::int64_t c = 0; c < 5; ++c) {
        double ref = 0.0, mag = 0.0;
        for (std::size_t k = 0; k < 147; ++k) {
          const double t = static_cast<double>(a[k]) *
                           static_cast<double>(deq[k * 5 + static_cast<std::size_t>(c)]);
          ref += t;
          mag += std::fabs(t);
        }
        const double got =
            static_cast<double>(quark::nbits_dot_column(row, q.packed, q.scales, q.zp, l, c));
        CHECK(std::fabs(got - ref) <= 1e-5 * mag);
        // Both block kernels, whichever nbits_dot_column picked on this CPU.
        const double portable = static_cast<double>(quark::detail::nbits_dot_column_with(
            quark::detail::nbits_block_steps_portable, row, q.packed, q.scales, q.zp, l, c));
        CHECK(std::fabs(portable - ref) <= 1e-5 * mag);
#if QUARK_NBITS_AVX512
        if (quark::detail::nbits_avx512_usable()) {
          const double wide = static_cast<double>(quark::detail::nbits_dot_column_with(
              [](const std::uint8_t* b, const float* ae, const float* ao, std::int64_t pairs,
                 float sc, float* total) {
                return quark::detail::nbits_block_steps_avx512(b, ae, ao, pairs, sc, total);
              },
              row, q.packed, q.scales, q.zp, l, c));
          CHECK(std::fabs(wide - ref) <= 1e-5 * mag);
        }
#endif
      }
    }
  }
}

TEST_CASE("nbits: random round trip and bad arguments") {
  std::mt19937 g(7);
  std::normal_distribution<float> d(0.0f, 1.0f);
  const quark::nbits_layout l{100, 7, 4, 32};
  std::vector<float> w(700);
  for (auto& x : w)
    x = d(g);
  for (const bool sym : {true, false}) {
    const quantized q = run(w, l, sym);
    std::vector<float> back(w.size());
    quark::dequantize_nbits(q.packed, q.scales, {q.zp, {}}, l, back);
    for (std::size_t i = 0; i < w.size(); ++i) {
      const std::size_t r = i / 7, c = i % 7;
      const float s = std::fabs(q.scales[c * 4 + r / 32]);
      // Half a step, except the symmetric block's top end: one step short at most.
      CHECK(std::fabs(back[i] - w[i]) <= (sym ? 1.0f : 0.5f) * s * 1.0001f);
    }
  }
  std::vector<std::uint8_t> p(static_cast<std::size_t>(l.packed_bytes()));
  std::vector<float> s(static_cast<std::size_t>(l.scale_count()));
  std::vector<std::uint8_t> z;
  CHECK_THROWS_AS(quark::quantize_nbits(w, {100, 7, 4, 24}, true, p, s, z), std::invalid_argument);
  CHECK_THROWS_AS(quark::quantize_nbits(w, {100, 7, 3, 32}, true, p, s, z), std::invalid_argument);
  CHECK_THROWS_AS(quark::quantize_nbits(w, l, false, p, s, z), std::invalid_argument);
  const std::vector<float> short_w(10);
  CHECK_THROWS_AS(quark::quantize_nbits(short_w, l, true, p, s, z), std::invalid_argument);
}

TEST_CASE("nbits: HQQ against a numpy float32 reference (tests/quant/data/gen_hqq_reference.py)") {
  // K = 40 over blocks of 16 (the last block padded with 8 zeros), N = 3; column 2 is small and
  // its first block all zero (a range of 0). The reference follows quark-spec §10.7 step by step
  // in float32; its block means sum in float32 pairs, ours in double, so the zero points agree to
  // a few ulp and the codes exactly.
  const std::vector<std::uint32_t> w_bits{
      0x3ea2e3ff, 0xbf0b6572, 0x00000000, 0x3e1f5228, 0xbe8c6f84, 0x00000000, 0x3f28dca1,
      0xbdfafb3c, 0x00000000, 0x3f995c9e, 0x3e16189c, 0x00000000, 0xbf353394, 0x3f625324,
      0x00000000, 0xbe6da3ff, 0x3edf157e, 0x00000000, 0xbeb15d21, 0x3e8d9052, 0x00000000,
      0x3ef7546c, 0xbf5bd95e, 0x00000000, 0xbf233e3a, 0x3fd71358, 0x00000000, 0xbd8352ad,
      0x3f037a1c, 0x00000000, 0xbef565ee, 0x3f7f6c58, 0x00000000, 0x3ebc6d3d, 0x3f8f23c3,
      0x00000000, 0xbf5d5d79, 0xbea0440e, 0x00000000, 0xbed55212, 0x3e5efe66, 0x00000000,
      0xbeef5585, 0xbf371fac, 0x00000000, 0x3e3f6b44, 0xbf718d33, 0x00000000, 0xbea9e09e,
      0xbd25b7bd, 0x3d4e072f, 0x3ec11daf, 0xbe63d925, 0x3c239f34, 0xbe77b8c0, 0x3f7acbe6,
      0xbd5166df, 0xbfa229e1, 0xbeb687c7, 0x3cb03c1e, 0xbeddfd60, 0x3fee50dc, 0x3ccdf78a,
      0xbeb91cd5, 0xbef04b88, 0x3d0d5e2f, 0x3ec547f0, 0xbf0d3c4b, 0x3c58cd63, 0x3e8b5e7a,
      0x3de60dd6, 0x3d50e4c9, 0xbf1204d8, 0xbf789640, 0x3d4c213a, 0xbf092686, 0x3ec5b10f,
      0x3d4b3464, 0x3f065bbe, 0x3f037954, 0x3d49474d, 0xbf27efcb, 0x3d933fbf, 0xbbf6eff8,
      0x3f13f344, 0x3fe897b7, 0x3dd2bb20, 0xbf107b08, 0xbfb5321c, 0xbc92b16c, 0xbe2d5618,
      0xbf55e16e, 0x3b875fc3, 0xbebfd7d0, 0xbf8642d0, 0x3d3be21a, 0xbe1d60b3, 0x400ddf64,
      0xbc4a61f6, 0x3e9cdccf, 0x3f38a15d, 0xbb0dbb3b, 0xbeefbf36, 0xbc4ec233, 0xbc9b50fd,
      0xbea5d581, 0x3cabacc8, 0x3c162209, 0xbebe5b6e, 0xbf811ad4, 0x3d0154a2, 0xbe74d562,
      0xbf8692cc, 0x3c06631b, 0x3f82cc31, 0x3f857a61, 0xbc1d33c1, 0xbf21d06e, 0xbc4e29d5,
      0xbcbda2f4};
  const std::vector<int> codes{
      8,  7,  11, 15, 1,  4, 4, 10, 1,  6, 3,  9,  0,  3, 3,  7, 7,  13, 8,  0, 6,  7, 13, 12,
      5,  6,  14, 5,  15, 5, 9, 7,  5,  9, 2,  3,  3,  4, 15, 0, 6,  6,  6,  6, 6,  6, 6,  6,
      2,  3,  4,  6,  10, 7, 7, 0,  15, 8, 11, 11, 3,  6, 1,  0, 6,  5,  10, 4, 14, 4, 3,  6,
      1,  8,  8,  6,  14, 0, 2, 1,  15, 8, 5,  5,  0,  0, 10, 5, 5,  5,  5,  5, 5,  5, 5,  5,
      0,  0,  0,  0,  0,  0, 0, 0,  0,  0, 0,  0,  0,  0, 0,  0, 10, 6,  0,  7, 7,  8, 6,  10,
      10, 10, 10, 4,  15, 3, 5, 9,  3,  5, 1,  9,  15, 8, 3,  0, 6,  6,  6,  6, 6,  6, 6,  6};
  const std::vector<std::uint32_t> scale_bits{0x3e0cd2db, 0x3dfbe19e, 0x3de1d180,
                                              0x3e331ee7, 0x3e5fbd51, 0x3e5f1a71,
                                              0x3f800000, 0x3c283af7, 0x3b6f1796};
  const std::vector<std::uint32_t> zero_bits{0x40c45031, 0x411f6400, 0x40c19c14,
                                             0x409f6ef6, 0x40bd8bea, 0x409e682e,
                                             0x00000000, 0x409c205a, 0x40c178cc};
  const quark::nbits_layout l{40, 3, 4, 16};
  std::vector<float> w;
  for (const std::uint32_t b : w_bits)
    w.push_back(std::bit_cast<float>(b));
  std::vector<std::uint8_t> packed(static_cast<std::size_t>(l.packed_bytes()));
  std::vector<float> scales(static_cast<std::size_t>(l.scale_count()));
  std::vector<float> zeros(scales.size());
  CHECK(quark::quantize_nbits_hqq(w, l, packed, scales, zeros) == 2);
  for (std::size_t j = 0; j < scales.size(); ++j) {
    CAPTURE(j);
    CHECK(std::bit_cast<std::uint32_t>(scales[j]) == scale_bits[j]);
    const float zr = std::bit_cast<float>(zero_bits[j]);
    CHECK(std::fabs(zeros[j] - zr) <= 1e-6f * (1.0f + std::fabs(zr)));
  }
  // Codes of the padded groups [N][k_blocks][16], two to a byte, low nibble first.
  REQUIRE(codes.size() == packed.size() * 2);
  for (std::size_t i = 0; i < codes.size(); ++i) {
    CAPTURE(i);
    CHECK(((packed[i / 2] >> (4 * (i % 2))) & 0xF) == codes[i]);
  }
  // Dequantized with the float zero points (code * scale - zero * scale, as ORT), each value
  // within a step of the weight (HQQ moves the zero point off the grid: not half a step).
  std::vector<float> back(w.size());
  quark::dequantize_nbits(packed, scales, {{}, zeros}, l, back);
  for (std::size_t i = 0; i < w.size(); ++i) {
    const std::size_t g = (i % 3) * 3 + (i / 3) / 16;
    CHECK(std::fabs(back[i] - w[i]) <= scales[g] * 1.0001f);
  }
  std::vector<float> short_zeros(2);
  CHECK_THROWS_AS(quark::quantize_nbits_hqq(w, l, packed, scales, short_zeros),
                  std::invalid_argument);
}
