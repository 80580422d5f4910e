// SPDX-License-Identifier: MIT
// Packed storage blocked along any axis (block/axis_storage.hpp): the streams equal those of the
// tensor transposed by hand here (axis moved last) and stored row by row, and dequantizing gives
// back, in tensor order, exactly what fake_quantize along that axis gives (an independent
// strided path), for an MX, a BFP and an MX4/6/9 format with a partial last block.
#include <cstdint>
#include <random>
#include <span>
#include <type_traits>
#include <vector>

#include <doctest/doctest.h>

#include <quark/block/axis_storage.hpp>
#include <quark/core/error.hpp>

#include "block/block_support.hpp"

using block_test::check_same;

TEST_CASE("packed storage along any axis, with a partial last block") {
  const std::uint32_t seed = block_test::seed();
  INFO("seed " << seed);
  std::mt19937 rng(seed);
  // Shape [3, 40, 5] blocked along axis 1: 15 rows of 40 (MX: a block of 32 and one of 8).
  const std::size_t shape[] = {3, 40, 5};
  const auto x = block_test::random_tensor(rng, 3 * 40 * 5);
  std::vector<float> moved(x.size());  // [3, 5, 40], written out index by index
  for (std::size_t o = 0; o < 3; ++o)
    for (std::size_t a = 0; a < 40; ++a)
      for (std::size_t i = 0; i < 5; ++i)
        moved[(o * 5 + i) * 40 + a] = x[(o * 40 + a) * 5 + i];

  const auto run = [&](auto tag) {
    using B = typename decltype(tag)::type;
    const auto l = quark::block_storage_layout_along<B>(shape, 1);
    CHECK(l.rows == 15);
    CHECK(l.row_length == 40);
    std::vector<std::uint8_t> e(l.element_bytes), s(l.scale_bytes), sub(l.sub_shift_bytes);
    quark::quantize_along<B>(x, shape, 1, {e, s, sub});
    const auto want = quark::make_block_tensor<B>(moved, 40);
    CHECK(e == want.elements);
    CHECK(s == want.scales);
    CHECK(sub == want.sub_shifts);
    std::vector<float> back(x.size()), fq(x.size());
    quark::dequantize_along<B>({e, s, sub}, shape, 1, back);
    quark::fake_quantize<B>(std::span<const float>(x), std::span<float>(fq), shape, 1);
    check_same(back, fq, "dequantize_along vs fake_quantize along axis 1");
    // The last axis is plain row storage.
    const std::size_t flat[] = {15, 40};
    std::vector<std::uint8_t> e2(l.element_bytes), s2(l.scale_bytes), sub2(l.sub_shift_bytes);
    quark::quantize_along<B>(moved, flat, 1, {e2, s2, sub2});
    CHECK(e2 == want.elements);
    CHECK(s2 == want.scales);
  };
  run(std::type_identity<quark::mxfp4_e2m1>{});
  run(std::type_identity<quark::mxfp8_e4m3>{});
  run(std::type_identity<quark::bfp16>{});
  run(std::type_identity<quark::mx6>{});

  // Options pass through; a bad axis names the culprit.
  quark::bfp_options o;
  o.element_rounding = quark::rounding::nearest_even;
  const auto l = quark::block_storage_layout_along<quark::bfp16>(shape, 0);
  std::vector<std::uint8_t> e(l.element_bytes), s(l.scale_bytes);
  quark::quantize_along<quark::bfp16>(x, shape, 0, {e, s, {}}, o);
  std::vector<float> back(x.size()), fq(x.size());
  quark::dequantize_along<quark::bfp16>({e, s, {}}, shape, 0, back);
  quark::fake_quantize<quark::bfp16>(std::span<const float>(x), std::span<float>(fq), shape, 0, o);
  check_same(back, fq, "axis 0, nearest even");
  CHECK_THROWS_AS(quark::quantize_along<quark::bfp16>(x, shape, 3, {e, s, {}}),
                  quark::invalid_argument);
}
