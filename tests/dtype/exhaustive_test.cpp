// SPDX-License-Identifier: MIT
// Tier 1 evidence for every format of 16 bits or fewer: each encoding is checked against the slow
// reference in tests/support/reference.hpp, which is written from the format definitions alone.
//
//  * decode: every code decodes to the reference value (bitwise; NaN by sign);
//  * encode(decode(c)) == c for every non-NaN code under every deterministic policy;
//  * every midpoint between adjacent values (and its float neighbours, and the grid points' float
//    neighbours) encodes like the reference in all six deterministic rounding modes, with both
//    overflow rules (the sanitizer build samples the 16-bit formats' midpoints: tie_inputs);
//    specials and seeded random floats under all 24 deterministic policies;
//  * stochastic rounding: the result is always one of the two neighbours, matches the reference
//    for given random bits, and is exactly unbiased over a uniform grid of random bits; a seeded
//    statistical test prints the mean error;
//  * numeric_limits values are static_asserted.
// Seed: QUARK_TEST_SEED overrides the default, and is printed.
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <doctest/doctest.h>

#include <quark/quark.hpp>

#include "support/checks.hpp"
#include "support/reference.hpp"

namespace {

using quark::conversion_policy;
using quark::nan_handling;
using quark::overflow;
using quark::rounding;
namespace ref = quark::test::ref;

// ---- numeric_limits: spec values, checked at compile time ------------------------------------

template <class T>
constexpr float lim_max() {
  return quark::to_float(std::numeric_limits<T>::max());
}
template <class T>
constexpr float lim_denorm_min() {
  return quark::to_float(std::numeric_limits<T>::denorm_min());
}
template <class T>
constexpr float lim_epsilon() {
  return quark::to_float(std::numeric_limits<T>::epsilon());
}
template <class T>
constexpr float lim_min() {
  return quark::to_float(std::numeric_limits<T>::min());
}
template <class T>
constexpr float lim_lowest() {
  return quark::to_float(std::numeric_limits<T>::lowest());
}

// max finite (OFP8 Table 1, OCP MX v1.0 Tables 2-4, IEEE 754 binary16, bfloat16)
static_assert(lim_max<quark::float8_e4m3fn>() == 448.0f);
static_assert(lim_max<quark::float8_e4m3fnuz>() == 240.0f);
static_assert(lim_max<quark::float8_e5m2>() == 57344.0f);
static_assert(lim_max<quark::float8_e5m2fnuz>() == 57344.0f);
static_assert(lim_max<quark::float6_e2m3fn>() == 7.5f);
static_assert(lim_max<quark::float6_e3m2fn>() == 28.0f);
static_assert(lim_max<quark::float4_e2m1fn>() == 6.0f);
static_assert(lim_max<quark::float8_e8m0fnu>() == 0x1p127f);
static_assert(lim_max<quark::float16>() == 65504.0f);
static_assert(lim_max<quark::bfloat16>() == 0x1.FEp127f);  // 3.3895314e38
// lowest
static_assert(lim_lowest<quark::float8_e4m3fn>() == -448.0f);
static_assert(lim_lowest<quark::float4_e2m1fn>() == -6.0f);
static_assert(lim_lowest<quark::float16>() == -65504.0f);
static_assert(lim_lowest<quark::float8_e8m0fnu>() == 0x1p-127f);  // unsigned: lowest == min
// smallest subnormal (E8M0 has none: denorm_min == min == 2^-127)
static_assert(lim_denorm_min<quark::float16>() == 0x1p-24f);
static_assert(lim_denorm_min<quark::bfloat16>() == 0x1p-133f);
static_assert(lim_denorm_min<quark::float8_e4m3fn>() == 0x1p-9f);
static_assert(lim_denorm_min<quark::float8_e4m3fnuz>() == 0x1p-10f);
static_assert(lim_denorm_min<quark::float8_e5m2>() == 0x1p-16f);
static_assert(lim_denorm_min<quark::float8_e5m2fnuz>() == 0x1p-17f);
static_assert(lim_denorm_min<quark::float6_e3m2fn>() == 0.0625f);
static_assert(lim_denorm_min<quark::float6_e2m3fn>() == 0.125f);
static_assert(lim_denorm_min<quark::float4_e2m1fn>() == 0.5f);
static_assert(lim_denorm_min<quark::float8_e8m0fnu>() == 0x1p-127f);
// smallest normal
static_assert(lim_min<quark::float16>() == 0x1p-14f);
static_assert(lim_min<quark::bfloat16>() == 0x1p-126f);
static_assert(lim_min<quark::float8_e4m3fn>() == 0x1p-6f);
static_assert(lim_min<quark::float8_e4m3fnuz>() == 0x1p-7f);
static_assert(lim_min<quark::float8_e5m2>() == 0x1p-14f);
static_assert(lim_min<quark::float8_e5m2fnuz>() == 0x1p-15f);
static_assert(lim_min<quark::float6_e3m2fn>() == 0.25f);
static_assert(lim_min<quark::float6_e2m3fn>() == 1.0f);
static_assert(lim_min<quark::float4_e2m1fn>() == 1.0f);
static_assert(lim_min<quark::float8_e8m0fnu>() == 0x1p-127f);
// epsilon = 2^-M
static_assert(lim_epsilon<quark::float16>() == 0x1p-10f);
static_assert(lim_epsilon<quark::bfloat16>() == 0x1p-7f);
static_assert(lim_epsilon<quark::float8_e4m3fn>() == 0.125f);
static_assert(lim_epsilon<quark::float8_e4m3fnuz>() == 0.125f);
static_assert(lim_epsilon<quark::float8_e5m2>() == 0.25f);
static_assert(lim_epsilon<quark::float8_e5m2fnuz>() == 0.25f);
static_assert(lim_epsilon<quark::float6_e3m2fn>() == 0.25f);
static_assert(lim_epsilon<quark::float6_e2m3fn>() == 0.125f);
static_assert(lim_epsilon<quark::float4_e2m1fn>() == 0.5f);
static_assert(lim_epsilon<quark::float8_e8m0fnu>() == 1.0f);
// specials and digits
static_assert(std::numeric_limits<quark::float8_e5m2>::has_infinity);
static_assert(!std::numeric_limits<quark::float8_e4m3fn>::has_infinity);
static_assert(std::numeric_limits<quark::float8_e4m3fn>::has_quiet_NaN);
static_assert(!std::numeric_limits<quark::float4_e2m1fn>::has_quiet_NaN);
static_assert(!std::numeric_limits<quark::float6_e3m2fn>::has_quiet_NaN);
static_assert(std::numeric_limits<quark::float8_e8m0fnu>::has_quiet_NaN);
static_assert(!std::numeric_limits<quark::float8_e8m0fnu>::is_signed);
static_assert(std::numeric_limits<quark::float16>::digits == 11);
static_assert(std::numeric_limits<quark::bfloat16>::digits == 8);
static_assert(std::numeric_limits<quark::float16>::max_exponent == 16);
static_assert(std::numeric_limits<quark::float16>::min_exponent == -13);
// decimal members (the float32 values of the same formulas are 6, 9, -37, 38)
static_assert(std::numeric_limits<quark::float16>::digits10 == 3);
static_assert(std::numeric_limits<quark::float16>::max_digits10 == 5);
static_assert(std::numeric_limits<quark::float16>::min_exponent10 == -4);  // 2^-14 = 6.1e-5
static_assert(std::numeric_limits<quark::float16>::max_exponent10 == 4);   // 65504
static_assert(std::numeric_limits<quark::bfloat16>::digits10 == 2);
static_assert(std::numeric_limits<quark::bfloat16>::max_digits10 == 4);
static_assert(std::numeric_limits<quark::bfloat16>::min_exponent10 == -37);
static_assert(std::numeric_limits<quark::bfloat16>::max_exponent10 == 38);
static_assert(std::numeric_limits<quark::float8_e4m3fn>::digits10 == 0);
static_assert(std::numeric_limits<quark::float8_e4m3fn>::max_digits10 == 3);
static_assert(std::numeric_limits<quark::float8_e4m3fn>::min_exponent10 == -1);    // 2^-6
static_assert(std::numeric_limits<quark::float8_e4m3fn>::max_exponent10 == 2);     // 448
static_assert(std::numeric_limits<quark::float8_e5m2>::max_exponent10 == 4);       // 57344
static_assert(std::numeric_limits<quark::float4_e2m1fn>::max_exponent10 == 0);     // 6
static_assert(std::numeric_limits<quark::float4_e2m1fn>::min_exponent10 == 0);     // 1
static_assert(std::numeric_limits<quark::float8_e8m0fnu>::min_exponent10 == -38);  // 2^-127
static_assert(std::numeric_limits<quark::float8_e8m0fnu>::max_exponent10 == 38);
static_assert(quark::detail::float_bits(
                  quark::to_float(std::numeric_limits<quark::float16>::infinity())) == 0x7F800000u);
// integers
static_assert(std::numeric_limits<quark::int4>::min().value() == -8);
static_assert(std::numeric_limits<quark::int4>::max().value() == 7);
static_assert(std::numeric_limits<quark::uint4>::max().value() == 15);
static_assert(std::numeric_limits<quark::int3>::min().value() == -4);
static_assert(std::numeric_limits<quark::int3>::max().value() == 3);
static_assert(std::numeric_limits<quark::uint3>::max().value() == 7);
static_assert(std::numeric_limits<quark::int2>::min().value() == -2);
static_assert(std::numeric_limits<quark::uint2>::max().value() == 3);

// ---- helpers ----------------------------------------------------------------------------------

std::uint32_t test_seed() {
  const char* s = std::getenv("QUARK_TEST_SEED");
  return s != nullptr ? static_cast<std::uint32_t>(std::strtoul(s, nullptr, 0)) : 20261122u;
}

constexpr std::array<rounding, 6> deterministic_modes = {
    rounding::nearest_even, rounding::nearest_away,    rounding::nearest_up,
    rounding::toward_zero,  rounding::toward_positive, rounding::toward_negative};

/// All 24 deterministic policies: 6 rounding modes x 2 overflow rules x 2 NaN rules.
constexpr auto policy_grid = [] {
  std::array<conversion_policy, 24> a{};
  std::size_t i = 0;
  for (const auto r : deterministic_modes) {
    for (const auto o : {overflow::saturate, overflow::to_special}) {
      for (const auto n : {nan_handling::propagate, nan_handling::to_zero}) {
        a[i++] = conversion_policy{r, o, n};
      }
    }
  }
  return a;
}();

/// Calls f.template operator()<P>() for every policy in the grid.
template <class F>
void for_each_policy(F&& f) {
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    (f.template operator()<policy_grid[I]>(), ...);
  }
  (std::make_index_sequence<policy_grid.size()>{});
}

std::string hex(std::uint32_t v) {
  static const char* const digits = "0123456789abcdef";
  std::string s;
  do {
    s.insert(s.begin(), digits[v & 0xFu]);
    v >>= 4;
  } while (v != 0u);
  return "0x" + s;
}

std::string describe(conversion_policy p) {
  static const char* const modes[] = {"nearest_even", "nearest_away",    "nearest_up",
                                      "toward_zero",  "toward_positive", "toward_negative",
                                      "stochastic"};
  return std::string(modes[static_cast<int>(p.round)]) +
         (p.on_overflow == overflow::saturate ? "/saturate" : "/to_special") +
         (p.nan == nan_handling::to_zero ? "/nan_to_zero" : "/nan_propagate");
}

/// The reference definition with the same name as T (names are the ONNX/ml_dtypes spellings).
template <class T>
const ref::format_def& def_of() {
  static const ref::format_def* const d = [] {
    for (const auto* f : {&ref::float16, &ref::bfloat16, &ref::float8_e4m3fn, &ref::float8_e4m3fnuz,
                          &ref::float8_e5m2, &ref::float8_e5m2fnuz, &ref::float6_e3m2fn,
                          &ref::float6_e2m3fn, &ref::float4_e2m1fn, &ref::float8_e8m0fnu}) {
      if (f->name == quark::dtype_traits<T>::name)
        return f;
    }
    return static_cast<const ref::format_def*>(nullptr);
  }();
  REQUIRE(d != nullptr);
  return *d;
}

template <class T>
std::uint32_t code_count() {
  return 1u << quark::dtype_traits<T>::bits;
}

template <class T>
T from_code(std::uint32_t c) {
  return T::from_bits(static_cast<typename T::storage_type>(c));
}

float next_up(float x) {
  return std::nextafter(x, std::numeric_limits<float>::infinity());
}
float next_down(float x) {
  return std::nextafter(x, -std::numeric_limits<float>::infinity());
}

/// Adds x, and -x when the format is signed.
void push_signed(std::vector<float>& v, float x, bool is_signed) {
  v.push_back(x);
  if (is_signed)
    v.push_back(-x);
}

/// Midpoints of every pair of adjacent non-negative values (including max and the virtual next
/// value), their float neighbours, and the float neighbours of every grid point; both signs.
std::vector<float> tie_inputs(const ref::format_def& f) {
  const auto& g = ref::grid_of(f);
  // Under the sanitizers (quark::test::sanitized_build; the code is unoptimised there) the 16-bit
  // formats take every 7th interval of their grid, and every interval of its first and last 256
  // (zero, the subnormals, the largest values and the overflow threshold): 14 s each under ASan
  // with all of them. The dev build checks every interval.
  const std::size_t n = g.points.size();
  const std::size_t stride = quark::test::sanitized_build && n > 4096 ? 7 : 1;
  std::vector<float> v;
  for (std::size_t i = 0; i < n; ++i) {
    if (i % stride != 0 && i >= 256 && i + 256 < n)
      continue;
    const double a = g.points[i].first;
    const double b = i + 1 < n ? g.points[i + 1].first : g.virtual_next;
    const double mid = (a + b) / 2;
    const auto fa = static_cast<float>(a);
    push_signed(v, fa, f.has_sign);
    push_signed(v, next_up(fa), f.has_sign);
    if (fa > 0.0f)
      push_signed(v, next_down(fa), f.has_sign);
    const auto fm = static_cast<float>(mid);
    if (static_cast<double>(fm) != mid)
      continue;  // beyond float range: nothing to test
    push_signed(v, fm, f.has_sign);
    push_signed(v, next_up(fm), f.has_sign);
    push_signed(v, next_down(fm), f.has_sign);
  }
  if (!f.has_sign) {  // unsigned E8M0 still sees negative inputs
    v.push_back(-1.0f);
    v.push_back(-0.0f);
  }
  return v;
}

std::vector<float> special_inputs() {
  constexpr float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> v = {0.0f,
                          -0.0f,
                          inf,
                          -inf,
                          nan,
                          -nan,
                          std::numeric_limits<float>::max(),
                          -std::numeric_limits<float>::max(),
                          std::numeric_limits<float>::denorm_min(),
                          -std::numeric_limits<float>::denorm_min(),
                          std::numeric_limits<float>::min(),
                          -std::numeric_limits<float>::min(),
                          quark::detail::bits_float(0x7F800001u),   // signalling NaN
                          quark::detail::bits_float(0xFFC12345u)};  // negative NaN with payload
  return v;
}

std::vector<float> random_inputs(std::uint32_t seed, std::size_t n) {
  std::mt19937 rng(seed);
  std::vector<float> v;
  v.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t bits = static_cast<std::uint32_t>(rng());
    // Half random bit patterns, half log-uniform in [2^-30, 2^20] with random sign.
    if (i % 2 == 0) {
      v.push_back(quark::detail::bits_float(bits));
    } else {
      const std::uint32_t e = 97u + (bits % 51u);  // biased exponents of 2^-30 .. 2^20
      v.push_back(quark::detail::bits_float((bits & 0x807FFFFFu) | (e << 23)));
    }
  }
  return v;
}

/// Compares quark's conversion (public convert<> and the generic encoder) with the reference for
/// every input under policy P; returns the number of comparisons, reports the first mismatches.
template <class T, conversion_policy P>
std::size_t compare_encode(const std::vector<float>& xs, std::size_t& mismatches) {
  const auto& def = def_of<T>();
  for (const float x : xs) {
    const std::uint32_t want = ref::encode(def, x, P);
    const std::uint32_t got = quark::convert<T, P>(x).to_bits();
    const std::uint32_t generic = quark::detail::encode_fp_generic<T::format, P>(x);
    if (got != want || generic != want) {
      if (++mismatches <= 8) {
        MESSAGE(quark::dtype_traits<T>::name
                << " " << describe(P) << ": x = " << x << " (" << hex(quark::detail::float_bits(x))
                << ") quark " << hex(got) << " generic " << hex(generic) << " reference "
                << hex(want));
      }
    }
  }
  return xs.size();
}

#define QUARK_FLOAT_FORMATS                                                                   \
  quark::float16, quark::bfloat16, quark::float8_e4m3fn, quark::float8_e4m3fnuz,              \
      quark::float8_e5m2, quark::float8_e5m2fnuz, quark::float6_e3m2fn, quark::float6_e2m3fn, \
      quark::float4_e2m1fn, quark::float8_e8m0fnu

}  // namespace

// ---- floating-point formats -------------------------------------------------------------------

TEST_CASE_TEMPLATE("every encoding decodes to the reference value", T, QUARK_FLOAT_FORMATS) {
  const auto& def = def_of<T>();
  REQUIRE(def.bits() == quark::dtype_traits<T>::bits);
  std::size_t bad = 0;
  for (std::uint32_t c = 0; c < code_count<T>(); ++c) {
    const ref::value want = ref::decode(def, c);
    const float got = quark::to_float(from_code<T>(c));
    const float slow = quark::detail::decode_fp<T::format>(c);
    bool ok = true;
    for (const float g : {got, slow}) {
      switch (want.kind) {
        case ref::value::number:
          ok = ok &&
               quark::detail::float_bits(g) ==
                   quark::detail::float_bits(static_cast<float>(want.v)) &&
               static_cast<double>(g) == want.v;
          break;
        case ref::value::infinity:
          ok = ok && std::isinf(g) && std::signbit(g) == want.negative;
          break;
        case ref::value::nan:
          // NaN keeps the code's sign bit (ONNX Runtime decodes the fnuz NaN 0x80 to -NaN).
          ok = ok && std::isnan(g) && std::signbit(g) == want.negative;
          break;
      }
    }
    ok = ok && from_code<T>(c).is_nan() == (want.kind == ref::value::nan) &&
         from_code<T>(c).is_inf() == (want.kind == ref::value::infinity);
    if (!ok && ++bad <= 8) {
      MESSAGE(def.name << " code " << hex(c) << ": quark " << got << " reference " << want.v);
    }
  }
  MESSAGE(def.name << ": " << code_count<T>() << " encodings decoded");
  CHECK(bad == 0u);
}

TEST_CASE_TEMPLATE("encode(decode(c)) == c for every non-NaN code under every policy", T,
                   QUARK_FLOAT_FORMATS) {
  const auto& def = def_of<T>();
  std::size_t checked = 0;
  std::size_t bad = 0;
  for_each_policy([&]<conversion_policy P>() {
    for (std::uint32_t c = 0; c < code_count<T>(); ++c) {
      const T v = from_code<T>(c);
      if (v.is_nan())
        continue;
      const float x = quark::to_float(v);
      std::uint32_t want = c;
      if (v.is_inf() && P.on_overflow == overflow::saturate) {
        want = ref::encode(def, x, P);  // Inf saturates to max: not a round trip
        CHECK(quark::to_float(from_code<T>(want)) ==
              (x > 0 ? 1.0f : -1.0f) * quark::dtype_traits<T>::max());
      }
      const std::uint32_t got = quark::convert<T, P>(x).to_bits();
      ++checked;
      if (got != want && ++bad <= 8) {
        MESSAGE(def.name << " " << describe(P) << ": code " << hex(c) << " -> " << hex(got));
      }
    }
  });
  // Exact values are fixed points of stochastic rounding too, whatever the random bits.
  constexpr conversion_policy sr{rounding::stochastic, overflow::to_special,
                                 nan_handling::propagate};
  for (std::uint32_t c = 0; c < code_count<T>(); ++c) {
    const T v = from_code<T>(c);
    if (v.is_nan())
      continue;
    for (const std::uint32_t r : {0u, 0x80000000u, 0xFFFFFFFFu}) {
      ++checked;
      if (quark::convert<T, sr>(quark::to_float(v), r).to_bits() != c && ++bad <= 8) {
        MESSAGE(def.name << " stochastic: code " << hex(c) << " random " << hex(r));
      }
    }
  }
  MESSAGE(def.name << ": " << checked << " round trips");
  CHECK(bad == 0u);
}

TEST_CASE_TEMPLATE("midpoints and their neighbours round like the reference in every mode", T,
                   QUARK_FLOAT_FORMATS) {
  const auto& def = def_of<T>();
  const std::vector<float> xs = tie_inputs(def);
  std::size_t checked = 0;
  std::size_t bad = 0;
  for_each_policy([&]<conversion_policy P>() {
    if constexpr (P.nan == nan_handling::propagate) {  // no NaN among these inputs
      checked += compare_encode<T, P>(xs, bad);
    }
  });
  MESSAGE(def.name << ": " << xs.size() << " tie inputs, " << checked << " comparisons");
  CHECK(bad == 0u);
}

TEST_CASE_TEMPLATE("specials and seeded random floats match the reference under every policy", T,
                   QUARK_FLOAT_FORMATS) {
  const auto& def = def_of<T>();
  std::vector<float> xs = special_inputs();
  const auto rnd = random_inputs(test_seed(), 20000);
  xs.insert(xs.end(), rnd.begin(), rnd.end());
  std::size_t checked = 0;
  std::size_t bad = 0;
  for_each_policy([&]<conversion_policy P>() { checked += compare_encode<T, P>(xs, bad); });
  MESSAGE(def.name << ": " << checked << " comparisons (seed " << test_seed() << ")");
  CHECK(bad == 0u);
}

TEST_CASE_TEMPLATE("stochastic rounding picks a neighbour and is exactly unbiased", T,
                   QUARK_FLOAT_FORMATS) {
  // For x = lo + j/8 (hi - lo) and the eight random words k * 2^29, exactly j results are hi; every
  // result equals the reference for its random word. All intervals of the 8-bit and smaller
  // formats; for float16/bfloat16 the lowest and highest 512 and every 16th in between.
  const auto& def = def_of<T>();
  const auto& g = ref::grid_of(def);
  std::size_t checked = 0;
  std::size_t bad = 0;
  const auto run = [&]<conversion_policy P>() {
    const std::size_t np = g.points.size();
    for (std::size_t i = 0; i < np; ++i) {
      // 16-bit formats: every interval near zero (subnormals) and the top, every 16th between.
      if (np > 4096 && i >= 512 && i + 512 < np && i % 16 != 0)
        continue;
      const double lo = g.points[i].first;
      const double hi = i + 1 < np ? g.points[i + 1].first : g.virtual_next;
      for (int j = 1; j < 8; ++j) {
        const double xd = lo + (hi - lo) * j / 8;
        const auto x = static_cast<float>(xd);
        if (static_cast<double>(x) != xd)
          continue;
        for (const float sx : {x, -x}) {
          if (!def.has_sign && sx < 0)
            continue;
          const std::uint32_t lo_code =
              ref::encode(def, sx, {rounding::toward_zero, P.on_overflow, P.nan});
          int ups = 0;
          for (std::uint32_t k = 0; k < 8; ++k) {
            const std::uint32_t r = k << 29;
            const std::uint32_t got = quark::convert<T, P>(sx, r).to_bits();
            const std::uint32_t want = ref::encode(def, sx, P, r);
            ups += got != lo_code ? 1 : 0;
            ++checked;
            if (got != want && ++bad <= 8) {
              MESSAGE(def.name << " " << describe(P) << ": x = " << sx << " random " << hex(r)
                               << " quark " << hex(got) << " reference " << hex(want));
            }
          }
          // In the top interval hi is "overflowed"; when that saturates (or E8M0's range check
          // fires first) both neighbours are the same code and nothing rounds away.
          const std::uint32_t hi_code = ref::encode(def, sx, P, 0xFFFFFFFFu);
          const int expect = hi_code == lo_code ? 0 : j;
          if (ups != expect && ++bad <= 8) {
            MESSAGE(def.name << ": x = " << sx << " rounded away " << ups << "/8 times, want "
                             << expect);
          }
        }
      }
    }
  };
  run.template operator()<conversion_policy{rounding::stochastic, overflow::saturate,
                                            nan_handling::propagate}>();
  run.template operator()<conversion_policy{rounding::stochastic, overflow::to_special,
                                            nan_handling::propagate}>();
  MESSAGE(def.name << ": " << checked << " stochastic conversions");
  CHECK(bad == 0u);
}

TEST_CASE_TEMPLATE("stochastic rounding is unbiased on average (seeded statistics)", T,
                   quark::float16, quark::bfloat16, quark::float8_e4m3fn, quark::float8_e5m2,
                   quark::float6_e2m3fn, quark::float4_e2m1fn) {
  constexpr conversion_policy sr{rounding::stochastic, overflow::saturate, nan_handling::propagate};
  const std::uint32_t seed = test_seed();
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  constexpr int values = 200;
  constexpr int draws = 512;
  double sum_err_ulps = 0.0;
  double worst_value_bias = 0.0;
  for (int i = 0; i < values; ++i) {
    // x in [1, 4): inside the normal range of every format listed above.
    const float x = std::ldexp(mant(rng), i % 2);
    const float ulp = std::ldexp(1.0f, std::ilogb(x) - std::numeric_limits<T>::digits + 1);
    double acc = 0.0;
    for (int k = 0; k < draws; ++k) {
      const float q = quark::to_float(quark::convert<T, sr>(x, static_cast<std::uint32_t>(rng())));
      acc += static_cast<double>(q - x) / static_cast<double>(ulp);
    }
    const double mean = acc / draws;
    sum_err_ulps += mean;
    worst_value_bias = std::max(worst_value_bias, std::fabs(mean));
  }
  const double overall = sum_err_ulps / values;
  // Each draw errs by at most one ulp (sigma <= 0.5 ulp): 5 sigma over values*draws samples.
  const double bound = 5.0 * 0.5 / std::sqrt(static_cast<double>(values) * draws);
  MESSAGE(quark::dtype_traits<T>::name << ": mean stochastic error " << overall << " ulp over "
                                       << values * draws << " draws (bound " << bound
                                       << ", worst per-value mean " << worst_value_bias
                                       << " ulp, seed " << seed << ")");
  CHECK(std::fabs(overall) < bound);
  CHECK(worst_value_bias < 5.0 * 0.5 / std::sqrt(static_cast<double>(draws)));
}

// ---- integers ---------------------------------------------------------------------------------

namespace {

template <class T>
constexpr long long int_min() {
  return static_cast<long long>(quark::dtype_traits<T>::min_value);
}
template <class T>
constexpr long long int_max() {
  return static_cast<long long>(quark::dtype_traits<T>::max_value);
}
template <class T>
long long int_value(T v) {
  return static_cast<long long>(quark::to_float(v));
}

/// Integer inputs: every k and k + 1/2 around the range, their float neighbours, specials, random.
template <class T>
std::vector<float> int_inputs() {
  std::vector<float> v = special_inputs();
  const long long span = int_max<T>() - int_min<T>();
  for (long long k = int_min<T>() - 3; k <= int_max<T>() + 3; ++k) {
    // 16-bit types: every k near both ends, a stride of 97 in between.
    const bool near_end = k < int_min<T>() + 300 || k > int_max<T>() - 300;
    if (span > 1024 && !near_end && k % 97 != 0)
      continue;
    for (const double d : {0.0, 0.5, 0.25, 0.75}) {
      const auto x = static_cast<float>(static_cast<double>(k) + d);
      v.push_back(x);
      v.push_back(next_up(x));
      v.push_back(next_down(x));
    }
  }
  const auto rnd = random_inputs(test_seed() + 1u, 4000);
  v.insert(v.end(), rnd.begin(), rnd.end());
  return v;
}

#define QUARK_INT_TYPES                                                                         \
  quark::int2, quark::uint2, quark::int3, quark::uint3, quark::int4, quark::uint4, std::int8_t, \
      std::uint8_t, std::int16_t, std::uint16_t

}  // namespace

TEST_CASE_TEMPLATE("sub-byte integers: every code decodes to its two's-complement value", T,
                   quark::int2, quark::uint2, quark::int3, quark::uint3, quark::int4,
                   quark::uint4) {
  constexpr int bits = quark::dtype_traits<T>::bits;
  for (std::uint32_t c = 0; c < (1u << bits); ++c) {
    const T v = T::from_bits(static_cast<std::uint8_t>(c));
    // Reference: bit (bits-1) weighs -2^(bits-1) when signed.
    long long want = static_cast<long long>(c);
    if (quark::dtype_traits<T>::is_signed && (c >> (bits - 1)) != 0u)
      want -= 1LL << bits;
    CHECK(v.value() == want);
    CHECK(v.to_bits() == c);
    CHECK(int_value(v) == want);
  }
}

TEST_CASE_TEMPLATE("integers: every rounding mode matches the reference", T, QUARK_INT_TYPES) {
  const auto xs = int_inputs<T>();
  std::size_t checked = 0;
  std::size_t bad = 0;
  for_each_policy([&]<conversion_policy P>() {
    // round trip of every value
    for (long long k = int_min<T>(); k <= int_max<T>(); ++k) {
      ++checked;
      if (int_value(quark::convert<T, P>(static_cast<float>(k))) != k && ++bad <= 8) {
        MESSAGE(quark::dtype_traits<T>::name << " " << describe(P) << ": " << k << " not exact");
      }
    }
    for (const float x : xs) {
      const long long want = ref::encode_int(x, int_min<T>(), int_max<T>(), P.round);
      const long long got = int_value(quark::convert<T, P>(x));
      ++checked;
      if (got != want && ++bad <= 8) {
        MESSAGE(quark::dtype_traits<T>::name << " " << describe(P) << ": x = " << x << " quark "
                                             << got << " reference " << want);
      }
    }
  });
  MESSAGE(quark::dtype_traits<T>::name << ": " << checked << " comparisons");
  CHECK(bad == 0u);
}

TEST_CASE_TEMPLATE("integers: stochastic rounding matches the reference and is exactly unbiased", T,
                   QUARK_INT_TYPES) {
  constexpr conversion_policy sr{rounding::stochastic, overflow::saturate, nan_handling::propagate};
  std::size_t checked = 0;
  std::size_t bad = 0;
  for (long long k = int_min<T>(); k < int_max<T>(); k += (int_max<T>() - int_min<T>()) / 64 + 1) {
    for (int j = 1; j < 8; ++j) {
      const auto x = static_cast<float>(static_cast<double>(k) + j / 8.0);
      int away = 0;
      for (std::uint32_t q = 0; q < 8; ++q) {
        const std::uint32_t r = q << 29;
        const long long got = int_value(quark::convert<T, sr>(x, r));
        const long long want = ref::encode_int(x, int_min<T>(), int_max<T>(), sr.round, r);
        ++checked;
        if (got != want && ++bad <= 8) {
          MESSAGE(quark::dtype_traits<T>::name << ": x = " << x << " random " << r << " quark "
                                               << got << " reference " << want);
        }
        away += got != (x < 0 ? k + 1 : k) ? 1 : 0;
      }
      // x >= 0 rounds away (up) with probability j/8; x < 0 rounds away (down) with 1 - j/8.
      const int expect = x < 0 ? 8 - j : j;
      if (away != expect && ++bad <= 8) {
        MESSAGE(quark::dtype_traits<T>::name << ": x = " << x << " rounded away " << away
                                             << "/8 times, want " << expect);
      }
    }
  }
  MESSAGE(quark::dtype_traits<T>::name << ": " << checked << " stochastic conversions");
  CHECK(bad == 0u);
}
