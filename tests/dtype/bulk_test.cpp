// SPDX-License-Identifier: MIT
// The span overloads of convert / to_float switch to block-wise streaming stores for outputs of
// 8 MiB and more (detail/stream.hpp). Both paths must give exactly the scalar results, including
// misaligned output pointers and lengths that are not a multiple of the block.
#include <cstdint>
#include <random>
#include <vector>

#include <doctest/doctest.h>

#include <quark/quark.hpp>

namespace {

std::vector<float> random_floats(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<float> x(n);
  for (auto& v : x)
    v = quark::detail::bits_float(static_cast<std::uint32_t>(rng()));
  return x;
}

template <class T, quark::conversion_policy P>
void check_bulk(std::size_t n, std::size_t offset) {
  const auto x = random_floats(n + offset, 1234u);
  std::vector<T> out(n + offset);
  quark::convert<T, P>(std::span<const float>(x).subspan(offset),
                       std::span<T>(out).subspan(offset));
  std::size_t bad = 0;
  for (std::size_t i = 0; i < n; ++i) {
    bad += out[offset + i].to_bits() != quark::convert<T, P>(x[offset + i]).to_bits() ? 1u : 0u;
  }
  CHECK(bad == 0u);
  std::vector<float> back(n + offset);
  quark::to_float(std::span<const T>(out).subspan(offset), std::span<float>(back).subspan(offset));
  bad = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const float a = back[offset + i];
    const float b = quark::to_float(out[offset + i]);
    bad += (quark::detail::float_bits(a) != quark::detail::float_bits(b)) ? 1u : 0u;
  }
  CHECK(bad == 0u);
}

}  // namespace

TEST_CASE("bulk conversion equals scalar conversion, streamed and cached paths") {
  // 5 Mi + 13 elements: 10 MiB of bfloat16 output (streamed), 20 MiB of float (streamed back).
  const std::size_t big = (std::size_t{5} << 20) + 13;
  check_bulk<quark::bfloat16, quark::policies::ieee>(big, 1);
  check_bulk<quark::float16, quark::policies::ieee>(big, 3);
  // 9 Mi + 5 one-byte elements: streamed; and a small array: cached stores.
  check_bulk<quark::float8_e4m3fn, quark::policies::onnx_saturate>((std::size_t{9} << 20) + 5, 7);
  check_bulk<quark::float8_e5m2, quark::policies::onnx_no_saturate>(1000, 0);
}

TEST_CASE("bulk float16 decode equals the scalar decoder on every encoding") {
  std::vector<quark::float16> all(65536);
  for (std::uint32_t c = 0; c < 65536; ++c) {
    all[c] = quark::float16::from_bits(static_cast<std::uint16_t>(c));
  }
  std::vector<float> out(all.size());
  quark::to_float(std::span<const quark::float16>(all), std::span<float>(out));
  std::size_t bad = 0;
  for (std::uint32_t c = 0; c < 65536; ++c) {
    bad += quark::detail::float_bits(out[c]) != quark::detail::float_bits(quark::to_float(all[c]))
               ? 1u
               : 0u;
  }
  CHECK(bad == 0u);
}
