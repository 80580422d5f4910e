// SPDX-License-Identifier: MIT
// The AVX-512 chunk kernels (block/detail/block_avx512.hpp) against the portable chunk kernels,
// bit for bit, over seeded tensors that mix every case the kernels branch on: zeros, float32
// subnormals, Inf and NaN, blocks near the top and bottom of the float32 range, ties, and block
// maxima that saturate. The portable kernels are the ones the hand-derived vectors and the
// double-precision references of the other block tests were first checked against; every public
// call in those tests now runs the AVX-512 kernels on a machine that has them.
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include <quark/block/bfp.hpp>
#include <quark/block/micro_exponent.hpp>
#include <quark/block/mx.hpp>

#include "block/block_support.hpp"

using block_test::check_same;

namespace {

/// n floats in blocks of `bs`: each block draws a magnitude class, then elements within it, with
/// specials and ties sprinkled in.
std::vector<float> mixed_tensor(std::mt19937& rng, std::size_t n, std::size_t bs) {
  std::uniform_int_distribution<int> cls(0, 9);
  std::uniform_int_distribution<int> pick(0, 63);
  std::uniform_int_distribution<int> spread(-12, 0);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (std::size_t b = 0; b < n; b += bs) {
    int top = 0;
    switch (cls(rng)) {
      case 0:
        top = 126;
        break;  // near FLT_MAX
      case 1:
        top = -120;
        break;  // near the float32 normal minimum
      case 2:
        top = -140;
        break;  // float32 subnormals only
      case 3:
        top = 100;
        break;
      case 4:
        top = -100;
        break;
      default:
        top = std::uniform_int_distribution<int>(-30, 30)(rng);
        break;
    }
    for (std::size_t i = b; i < b + bs && i < n; ++i) {
      const int p = pick(rng);
      float x = std::ldexp(d(rng), top + spread(rng));
      if (p == 0)
        x = 0.0f;
      if (p == 1)
        x = -0.0f;
      if (p == 2)
        x = std::numeric_limits<float>::infinity();
      if (p == 3)
        x = -std::numeric_limits<float>::infinity();
      if (p == 4)
        x = std::numeric_limits<float>::quiet_NaN();
      if (p == 5)
        x = std::numeric_limits<float>::denorm_min() * static_cast<float>(pick(rng) + 1);
      if (p >= 6 && p < 10)
        x = std::ldexp(static_cast<float>(2 * pick(rng) + 1), top - 8);  // ties
      v[i] = x;
    }
  }
  return v;
}

constexpr quark::rounding kModes[] = {
    quark::rounding::nearest_even,    quark::rounding::nearest_away,
    quark::rounding::nearest_up,      quark::rounding::toward_zero,
    quark::rounding::toward_positive, quark::rounding::toward_negative};

template <class Element>
void check_mx(const std::vector<float>& x, const std::string& name) {
  const quark::detail::block_layout l{1, x.size(), 1};
  std::vector<float> a(x.size()), b(x.size());
  for (const quark::rounding r : kModes) {
    for (const auto c : {quark::compat_mode::standard, quark::compat_mode::quark}) {
      for (const auto m : {quark::e8m0_scale_mode::floor, quark::e8m0_scale_mode::ceil,
                           quark::e8m0_scale_mode::even, quark::e8m0_scale_mode::rceil}) {
        quark::detail::dispatch_rounding(r, [&](auto rt) {
          constexpr quark::rounding R = decltype(rt)::value;
          if (c == quark::compat_mode::standard) {
            quark::detail::mx_fake_quantize_impl<Element, R, quark::compat_mode::standard, true>(
                x.data(), a.data(), l, 32, m);
            quark::detail::mx_fake_quantize_impl<Element, R, quark::compat_mode::standard, false>(
                x.data(), b.data(), l, 32, m);
          } else {
            quark::detail::mx_fake_quantize_impl<Element, R, quark::compat_mode::quark, true>(
                x.data(), a.data(), l, 32, m);
            quark::detail::mx_fake_quantize_impl<Element, R, quark::compat_mode::quark, false>(
                x.data(), b.data(), l, 32, m);
          }
        });
        check_same(a, b,
                   name + " rounding " + std::to_string(static_cast<int>(r)) + " compat " +
                       std::to_string(static_cast<int>(c)) + " scale mode " +
                       std::to_string(static_cast<int>(m)));
      }
    }
  }
}

}  // namespace

TEST_CASE("AVX-512 block kernels agree bit for bit with the portable kernels") {
  const std::uint32_t seed = block_test::seed();
  INFO("seed " << seed);
  if (!quark::detail::block_avx512_usable())
    MESSAGE("no AVX-512 on this CPU: both sides run the portable kernels");
  std::mt19937 rng(seed);
  const std::size_t n = 32 * 700 + 8 * 3;  // several chunks, a partial last block for 32 and 16

  SUBCASE("OCP MX, blocks of 32") {
    const auto x = mixed_tensor(rng, n, 32);
    check_mx<quark::float4_e2m1fn>(x, "fp4");
    check_mx<quark::float6_e2m3fn>(x, "fp6 e2m3");
    check_mx<quark::float6_e3m2fn>(x, "fp6 e3m2");
    check_mx<quark::float8_e4m3fn>(x, "fp8 e4m3");
    check_mx<quark::float8_e5m2>(x, "fp8 e5m2");
    check_mx<std::int8_t>(x, "int8");
  }

  SUBCASE("BFP, blocks of 8, magnitude bits 1..22") {
    const auto x = mixed_tensor(rng, n, 8);
    const quark::detail::block_layout l{1, x.size(), 1};
    std::vector<float> a(x.size()), b(x.size());
    for (const int m : {1, 2, 4, 7, 12, 22}) {
      for (const quark::rounding r : kModes) {
        quark::detail::dispatch_rounding(r, [&](auto rt) {
          constexpr quark::rounding R = decltype(rt)::value;
          using quark::bfp_input;
          using quark::bfp_variant;
          quark::detail::bfp_fake_quantize_impl<R, bfp_input::float32, bfp_variant::standard, true>(
              x.data(), a.data(), l, 8, m);
          quark::detail::bfp_fake_quantize_impl<R, bfp_input::float32, bfp_variant::standard,
                                                false>(x.data(), b.data(), l, 8, m);
        });
        check_same(
            a, b,
            "bfp m " + std::to_string(m) + " rounding " + std::to_string(static_cast<int>(r)));
      }
    }
  }

  SUBCASE("MX4/6/9, blocks of 16 with pairs") {
    const auto x = mixed_tensor(rng, n, 16);
    const quark::detail::block_layout l{1, x.size(), 1};
    std::vector<float> a(x.size()), b(x.size());
    for (const int m : {2, 4, 7, 12}) {
      for (const quark::rounding r : kModes) {
        for (const auto c : {quark::compat_mode::standard, quark::compat_mode::quark}) {
          quark::detail::dispatch_rounding(r, [&](auto rt) {
            constexpr quark::rounding R = decltype(rt)::value;
            quark::detail::micro_fake_quantize_impl<R, true>(x.data(), a.data(), l, 16, 2, 1, m, c);
            quark::detail::micro_fake_quantize_impl<R, false>(x.data(), b.data(), l, 16, 2, 1, m,
                                                              c);
          });
          check_same(a, b,
                     "mx m " + std::to_string(m) + " rounding " +
                         std::to_string(static_cast<int>(r)) + " compat " +
                         std::to_string(static_cast<int>(c)));
        }
      }
    }
  }
}
