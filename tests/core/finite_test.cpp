// SPDX-License-Identifier: MIT
// quark::count_non_finite / first_non_finite / non_finite_name against the IEEE encodings: a
// value is NaN or +-Inf exactly when its exponent field is all ones. Every float16 and bfloat16
// bit pattern; for float32 every exponent with the extreme and middle mantissas, both signs;
// double by hand (a finite double past FLT_MAX must stay finite).
#include <bit>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include <quark/core/finite.hpp>
#include <quark/dtype/formats.hpp>

TEST_CASE("every float16 and bfloat16 bit pattern: non-finite iff the exponent is all ones") {
  std::vector<quark::float16> h;
  std::vector<quark::bfloat16> b;
  std::size_t h_expected = 0, b_expected = 0;
  for (std::uint32_t bits = 0; bits <= 0xffffu; ++bits) {
    const auto u = static_cast<std::uint16_t>(bits);
    h.push_back(quark::float16::from_bits(u));
    b.push_back(quark::bfloat16::from_bits(u));
    const bool h_bad = (u & 0x7c00u) == 0x7c00u;  // binary16: 5 exponent bits
    const bool b_bad = (u & 0x7f80u) == 0x7f80u;  // bfloat16: 8 exponent bits
    h_expected += h_bad;
    b_expected += b_bad;
    const std::span<const quark::float16> one_h(&h.back(), 1);
    CHECK(quark::count_non_finite(one_h) == (h_bad ? 1u : 0u));
    const std::span<const quark::bfloat16> one_b(&b.back(), 1);
    CHECK(quark::count_non_finite(one_b) == (b_bad ? 1u : 0u));
  }
  CHECK(h_expected == 2 * 1024);  // 2 signs x 1024 mantissas
  CHECK(b_expected == 2 * 128);
  CHECK(quark::count_non_finite(std::span<const quark::float16>(h)) == h_expected);
  CHECK(quark::count_non_finite(std::span<const quark::bfloat16>(b)) == b_expected);
  // The first all-ones exponent in bit order is 0x7c00 (+Inf), and 0x7f80 for bfloat16.
  CHECK(quark::first_non_finite(std::span<const quark::float16>(h)) == 0x7c00u);
  CHECK(quark::first_non_finite(std::span<const quark::bfloat16>(b)) == 0x7f80u);
  CHECK(std::string(quark::non_finite_name(h[0x7c00])) == "+Inf");
  CHECK(std::string(quark::non_finite_name(h[0xfc00])) == "-Inf");
  CHECK(std::string(quark::non_finite_name(h[0x7e00])) == "NaN");
  CHECK(std::string(quark::non_finite_name(h[0x3c00])) == "finite");
}

TEST_CASE("float32: every exponent, extreme and middle mantissas, both signs") {
  std::vector<float> v;
  std::size_t expected = 0;
  std::optional<std::size_t> first;
  for (std::uint32_t sign : {0u, 0x80000000u}) {
    for (std::uint32_t e = 0; e < 256; ++e) {
      for (std::uint32_t m : {0u, 1u, 0x400000u, 0x7fffffu}) {
        const std::uint32_t bits = sign | (e << 23) | m;
        if (e == 255) {
          ++expected;
          if (!first)
            first = v.size();
        }
        v.push_back(std::bit_cast<float>(bits));
      }
    }
  }
  CHECK(expected == 2 * 4);
  CHECK(quark::count_non_finite(std::span<const float>(v)) == expected);
  CHECK(quark::first_non_finite(std::span<const float>(v)) == first);
  CHECK(std::string(quark::non_finite_name(v[*first])) == "+Inf");  // mantissa 0 comes first
  CHECK(std::string(quark::non_finite_name(v[*first + 1])) == "NaN");
  const std::vector<float> fine = {0.0f, -0.0f, std::numeric_limits<float>::max(),
                                   std::numeric_limits<float>::lowest(),
                                   std::numeric_limits<float>::denorm_min()};
  CHECK(quark::count_non_finite(std::span<const float>(fine)) == 0);
  CHECK_FALSE(quark::first_non_finite(std::span<const float>(fine)));
}

TEST_CASE("double: finite past FLT_MAX, and each kind of non-finite") {
  const std::vector<double> v = {1e300, -1e300, std::numeric_limits<double>::infinity(),
                                 std::numeric_limits<double>::quiet_NaN(),
                                 -std::numeric_limits<double>::infinity()};
  CHECK(quark::count_non_finite(std::span<const double>(v)) == 3);
  CHECK(quark::first_non_finite(std::span<const double>(v)) == 2u);
  CHECK(std::string(quark::non_finite_name(v[0])) == "finite");
  CHECK(std::string(quark::non_finite_name(v[3])) == "NaN");
  CHECK(std::string(quark::non_finite_name(v[4])) == "-Inf");
}
