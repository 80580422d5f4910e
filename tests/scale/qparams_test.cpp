// SPDX-License-Identifier: MIT
// compute_qparams against quark-spec §3 and the derived vectors of §12.1-12.2.
#include <cmath>
#include <cstddef>
#include <iterator>
#include <limits>

#include <doctest/doctest.h>

#include <quark/scale/e8m0_scale.hpp>
#include <quark/scale/fixed_point_scale.hpp>
#include <quark/scale/pow2_scale.hpp>
#include <quark/scale/qparams.hpp>
#include <quark/scale/qrange_id.hpp>

using quark::compute_qparams;
using quark::qparam_options;
using quark::symmetry;

namespace {
constexpr qparam_options sym{.sym = symmetry::symmetric};
}  // namespace

static_assert(quark::quant_range<std::int8_t>(quark::range_table::symmetric).min == -127);
static_assert(quark::quant_range<std::int8_t>(quark::range_table::reduced) ==
              quark::int_range{-64, 64});
static_assert(quark::quant_range<quark::int4>(quark::range_table::symmetric) ==
              quark::int_range{-8, 7});
static_assert(quark::quant_range<quark::int4>(quark::range_table::reduced) ==
              quark::int_range{-4, 3});
static_assert(quark::quant_range<quark::uint4>(quark::range_table::reduced) ==
              quark::int_range{0, 7});
static_assert(quark::quant_range<std::uint8_t>(quark::range_table::symmetric) ==
              quark::int_range{0, 255});
static_assert(quark::quant_range<std::uint8_t>(quark::range_table::reduced) ==
              quark::int_range{0, 127});
static_assert(quark::quant_range<std::int16_t>(quark::range_table::reduced) ==
              quark::int_range{-16384, 16384});
static_assert(quark::quant_range<std::uint16_t>(quark::range_table::reduced) ==
              quark::int_range{0, 32767});
static_assert(quark::quant_range<std::int32_t>(quark::range_table::reduced) ==
              quark::int_range{-(std::int64_t{1} << 30), std::int64_t{1} << 30});
static_assert(quark::quant_range<std::int32_t>(quark::range_table::symmetric).min == -2147483647);
static_assert(quark::quant_range<std::uint32_t>(quark::range_table::reduced).max == 2147483647);

TEST_CASE("quant_range of a run-time dtype_id: every row of the type table") {
  using quark::dtype_id;
  using quark::int_range;
  using quark::range_table;
  // Hand-derived: a b-bit signed type spans -2^(b-1) .. 2^(b-1)-1, unsigned 0 .. 2^b-1.
  struct row {
    dtype_id id;
    int_range full;
  };
  const row ints[] = {
      {dtype_id::int2, {-2, 1}},
      {dtype_id::uint2, {0, 3}},
      {dtype_id::int3, {-4, 3}},
      {dtype_id::uint3, {0, 7}},
      {dtype_id::int4, {-8, 7}},
      {dtype_id::uint4, {0, 15}},
      {dtype_id::int8, {-128, 127}},
      {dtype_id::uint8, {0, 255}},
      {dtype_id::int16, {-32768, 32767}},
      {dtype_id::uint16, {0, 65535}},
      {dtype_id::int32, {-2147483648LL, 2147483647LL}},
      {dtype_id::uint32, {0, 4294967295LL}},
  };
  std::size_t found = 0;
  for (const auto& info : quark::dtype_table) {
    const auto r = quark::quant_range(info.id);
    const row* want = nullptr;
    for (const auto& x : ints) {
      if (x.id == info.id)
        want = &x;
    }
    CAPTURE(info.name);
    if (want == nullptr) {
      CHECK_FALSE(r.has_value());  // floats, int64/uint64, bool, string, complex
      continue;
    }
    ++found;
    REQUIRE(r.has_value());
    CHECK(*r == want->full);
  }
  CHECK(found == std::size(ints));
  // The other tables agree with the compile-time form (and with Quark's rows, checked above).
  CHECK(*quark::quant_range(dtype_id::int8, range_table::symmetric) == int_range{-127, 127});
  CHECK(*quark::quant_range(dtype_id::int16, range_table::reduced) == int_range{-16384, 16384});
  CHECK(*quark::quant_range(dtype_id::uint4, range_table::reduced) == int_range{0, 7});
  CHECK_FALSE(quark::quant_range(static_cast<dtype_id>(999)).has_value());
  CHECK_FALSE(quark::quant_range(dtype_id::undefined).has_value());
}

TEST_CASE("spec 12.1: float scale and zero point") {
  auto p = compute_qparams<std::int8_t>({-1.3f, 2.6f}, sym);
  CHECK(p.scale.value == 0.020472440868616104f);
  CHECK(p.zero_point == 0);
  CHECK(p.qmin == -128);  // activations saturate to the full range (ONNX QuantizeLinear)
  CHECK(p.qmax == 127);

  // The spec's UINT8 rows were derived from the double ends -1.3 and 2.6; a calibrated range is
  // float32, and f32(2.6f + 1.3f) / 255 lands one float below (docs/compatibility.md, "qparams").
  p = compute_qparams<std::uint8_t>({-1.3f, 2.6f});
  CHECK(p.zero_point == 85);
  CHECK(p.scale.value == 0.015294116921722889f);
  CHECK(std::nextafter(p.scale.value, 1.0f) == 0.015294117853045464f);

  p = compute_qparams<std::uint8_t>({-1.3f, 2.6f}, sym);
  CHECK(p.zero_point == 128);
  CHECK(p.scale.value == 0.020392155274748802f);
  CHECK(std::nextafter(p.scale.value, 1.0f) == 0.02039215713739395f);

  p = compute_qparams<std::uint8_t>({-1.0f, 1.0f});
  CHECK(p.zero_point == 128);
  CHECK(p.scale.value == 0.007843137718737125f);

  p = compute_qparams<std::int8_t>({-1.0f, 1.0f}, {.clip = quark::clip_rule::quark_weight});
  CHECK(p.zero_point == 0);
  CHECK(p.scale.value == 0.007843137718737125f);
  CHECK(p.qmin == -127);

  p = compute_qparams<std::int8_t>({-1.0f, 3.0f});
  CHECK(p.zero_point == -64);
  CHECK(p.scale.value == 0.01568627543747425f);

  p = compute_qparams<std::uint8_t>({0.5f, 3.0f});
  CHECK(p.zero_point == 0);
  CHECK(p.scale.value == 0.0117647061124444f);

  p = compute_qparams<std::int8_t>({0.0f, 0.0f}, sym);
  CHECK(p.zero_point == 0);
  CHECK(p.scale.value == 1.0f);

  p = compute_qparams<std::int8_t>({5.0f, 5.0f}, sym);
  CHECK(p.zero_point == 0);
  CHECK(p.scale.value == 0.03937007859349251f);

  p = compute_qparams<std::int16_t>({-1.0f, 1.0f}, sym);
  CHECK(p.scale.value == 3.0518509447574615e-05f);
  p = compute_qparams<std::int16_t>({-1.3f, 2.6f}, sym);
  CHECK(p.scale.value == 7.934812310850248e-05f);

  p = compute_qparams<quark::int4>({-1.0f, 1.0f}, sym);
  CHECK(p.zero_point == 0);
  CHECK(p.scale.value == 0.13333334028720856f);
}

TEST_CASE("unsigned symmetric zero point: 128 (Quark) or 127 (option)") {
  auto p = compute_qparams<std::uint8_t>(
      {-2.0f, 1.0f}, {.sym = symmetry::symmetric,
                      .unsigned_zero_point = quark::unsigned_symmetric_zero_point::lower_middle});
  CHECK(p.zero_point == 127);
  CHECK(compute_qparams<std::uint16_t>({-2.0f, 1.0f}, sym).zero_point == 32768);
  CHECK(compute_qparams<quark::uint4>({-2.0f, 1.0f}, sym).zero_point == 8);
  // The symmetric zero point never depends on double rounding of rmin / scale: scan absmax.
  for (float a = 1e-3f; a < 1e3f; a *= 1.0173f) {
    REQUIRE(compute_qparams<std::uint8_t>({-a, a}, sym).zero_point == 128);
    REQUIRE(compute_qparams<quark::int4>({-a, a}, sym).zero_point == 0);
    REQUIRE(compute_qparams<std::int8_t>({-a, a}, sym).zero_point == 0);
  }
}

TEST_CASE("reduce_range, +-Inf, NaN, MinimumRealRange, overrides") {
  auto p = compute_qparams<std::int8_t>({-1.0f, 1.0f}, {.reduce = quark::range_reduction::reduced});
  CHECK(p.scale.value == static_cast<float>(2.0 / 128.0));
  CHECK(p.zero_point == 0);  // RNE(-64 + 64)
  const float inf = std::numeric_limits<float>::infinity();
  p = compute_qparams<std::int8_t>({-inf, inf}, sym);
  CHECK(p.scale.value ==
        static_cast<float>(static_cast<double>(std::numeric_limits<float>::max()) / 254.0));
  p = compute_qparams<std::uint8_t>({0.0f, inf});
  CHECK(p.zero_point == 0);
  CHECK(std::isfinite(p.scale.value));
  try {
    (void)compute_qparams<std::int8_t>({NAN, 1.0f}, {.tensor_name = "conv1.weight"});
    CHECK(false);
  } catch (const quark::invalid_argument& e) {
    CHECK(e.id() == "quark.qparams.nan_range");
    CHECK(std::string(e.what()).find("conv1.weight") != std::string::npos);
  }
  CHECK_THROWS_AS(compute_qparams<std::uint8_t>({0.0f, NAN}), quark::invalid_argument);
  p = compute_qparams<std::uint8_t>({0.0f, 0.0f}, {.minimum_real_range = 1e-4f});
  CHECK(p.scale.value == static_cast<float>(static_cast<double>(1e-4f) / 255.0));
  p = compute_qparams<std::uint8_t>({-5.0f, 5.0f}, {.rmin_override = 0.0f, .rmax_override = 2.55f});
  CHECK(p.zero_point == 0);
  CHECK(p.scale.value == static_cast<float>(static_cast<double>(2.55f) / 255.0));
}

TEST_CASE("spec 12.2: power-of-two scale through compute_qparams") {
  auto p = compute_qparams<std::int8_t, quark::pow2_scale>({-1.3f, 2.6f}, sym);
  CHECK(p.scale_value() == 0.015625f);
  CHECK(p.zero_point == 0);
  auto u = compute_qparams<std::uint8_t, quark::pow2_scale>({-1.3f, 2.6f}, sym);
  CHECK(u.scale_value() == 0.015625f);
  CHECK(u.zero_point == 128);
  for (float a : {0.9f, 1.0f, 1.4f}) {
    CHECK(compute_qparams<std::int8_t, quark::pow2_scale>({-a, a}, sym).scale_value() ==
          0.0078125f);
  }
  for (float a : {1.5f, 2.0f, 2.6f}) {
    CHECK(compute_qparams<std::int8_t, quark::pow2_scale>({-a, a}, sym).scale_value() == 0.015625f);
  }
  qparam_options ceil = sym;
  ceil.projection.pow2 = quark::pow2_rounding::ceil;
  CHECK(compute_qparams<std::int8_t, quark::pow2_scale>({-1.4f, 1.4f}, ceil).scale_value() ==
        0.015625f);
}

TEST_CASE("int16 fixed-point scale through compute_qparams (spec 2.3)") {
  auto p = compute_qparams<std::int16_t, quark::fixed_point_scale>({-2.6f, 2.6f}, sym);
  // f32(5.2 / 65534) -> searched as a fixed point value.
  CHECK(p.scale.multiplier != 0);
  // Small activation ranges no longer collapse to 2^-14 (Quark did for scales <= 2^-17).
  auto small = compute_qparams<std::int16_t, quark::fixed_point_scale>({-0.1f, 0.1f}, sym);
  CHECK(small.scale_value() < 0x1p-17f);
  CHECK(std::fabs(small.scale_value() - 0.2f / 65534.0f) < 1e-4f * (0.2f / 65534.0f));
}

TEST_CASE("float types: FP16/BF16 unscaled and scaled, FP8 rules") {
  auto u = compute_qparams<quark::bfloat16>({-3.0f, 5.0f});
  CHECK(u.scale.value == 1.0f);
  CHECK(u.zero_point == 0.0f);
  auto s = compute_qparams<quark::bfloat16>(
      {-3.0f, 5.0f}, {.sym = symmetry::symmetric, .fp_scaling = quark::float_scaling::scaled});
  CHECK(s.scale.value == 2.5f);  // absmax / 2
  auto a =
      compute_qparams<quark::bfloat16>({-3.0f, 5.0f}, {.fp_scaling = quark::float_scaling::scaled});
  CHECK(a.scale.value == 2.0f);  // 8 / 4
  CHECK(a.zero_point == -0.0f);  // RNE(-2 + 1.5) = -0
  auto h = compute_qparams<quark::float16>(
      {-3.0f, 5.0f}, {.sym = symmetry::symmetric, .fp_scaling = quark::float_scaling::scaled});
  CHECK(h.scale.value == static_cast<float>(10.0 / 131008.0));
  // Asymmetric scaled on [-1, 2]: BF16 scale 3 / 4, zero point RNE(-2 + 1 / 0.75) = -1.
  auto ab =
      compute_qparams<quark::bfloat16>({-1.0f, 2.0f}, {.fp_scaling = quark::float_scaling::scaled});
  CHECK(ab.scale.value == 0.75f);
  CHECK(ab.zero_point == -1.0f);
  // FP16: scale 3 / 131008, RNE(-65504 + 43669.33) = -21835, which float16 stores as -21840
  // (spacing 16 in [16384, 32768); -21835 / 16 = -1364.69 -> -1365).
  auto ah =
      compute_qparams<quark::float16>({-1.0f, 2.0f}, {.fp_scaling = quark::float_scaling::scaled});
  CHECK(ah.scale.value == static_cast<float>(3.0 / 131008.0));
  CHECK(ah.zero_point == -21840.0f);
  auto f8 = compute_qparams<quark::float8_e4m3fn>({-3.0f, 4.48f});
  CHECK(f8.scale.value == static_cast<float>(static_cast<double>(4.48f) / 448.0));
  CHECK(f8.zero_point == 0.0f);
  const double sd = quark::finite_value_std<quark::float8_e4m3fn>();
  CHECK(sd == doctest::Approx(100.0577).epsilon(1e-6));
  auto st = quark::compute_fp8_qparams_from_std<quark::float8_e4m3fn>(2.0);
  CHECK(st.scale.value == static_cast<float>(2.0 / sd));
  auto e = compute_qparams<quark::float4_e2m1fn, quark::e8m0_scale>({-0.0f, 3.0f});
  CHECK(e.scale_value() == 0.5f);  // 3 / 6 = 0.5 exactly
}
