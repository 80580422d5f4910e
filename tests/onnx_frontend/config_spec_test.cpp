// SPDX-License-Identifier: MIT
// Tensor specs: defaults per spec (quark-spec §1.1 table, §1.7–§1.9 block parameters), names and
// enum spellings.
#include <doctest/doctest.h>

#include <quark/onnx/config.hpp>

using namespace quark::onnx;
using quark::dtype_id;

namespace {
struct expected_spec {
  std::string_view name;
  dtype_id dtype;
  bool symmetric;
  scale_kind scale;
  calib_method calib;
};
}  // namespace

TEST_CASE("element-wise spec defaults follow quark-spec §1.1") {
  using sk = scale_kind;
  using cm = calib_method;
  // quark-spec.md §1.1 table (rows Int8Spec .. UInt32Spec, BFloat16Spec); Int4/UInt4 follow seed
  // 000 line 77 (signed symmetric, unsigned asymmetric); Float16Spec like BFloat16Spec; FP8 specs
  // calibrate with Distribution (seed 003: "only FP8 data type is supported under this method").
  const expected_spec table[] = {
      {"Int8Spec", dtype_id::int8, true, sk::float32, cm::percentile},
      {"UInt8Spec", dtype_id::uint8, false, sk::float32, cm::percentile},
      {"XInt8Spec", dtype_id::int8, true, sk::power_of_2, cm::min_mse},
      {"Int16Spec", dtype_id::int16, true, sk::float32, cm::percentile},
      {"UInt16Spec", dtype_id::uint16, false, sk::float32, cm::percentile},
      {"XInt16Spec", dtype_id::int16, true, sk::power_of_2, cm::min_mse},
      {"Int32Spec", dtype_id::int32, true, sk::float32, cm::percentile},
      {"UInt32Spec", dtype_id::uint32, false, sk::float32, cm::percentile},
      {"Int4Spec", dtype_id::int4, true, sk::float32, cm::percentile},
      {"UInt4Spec", dtype_id::uint4, false, sk::float32, cm::percentile},
      {"BFloat16Spec", dtype_id::bfloat16, true, sk::float32, cm::min_max},
      {"Float16Spec", dtype_id::float16, true, sk::float32, cm::min_max},
      {"FP8E4M3FNSpec", dtype_id::float8_e4m3fn, true, sk::float32, cm::distribution},
      {"FP8E4M3FNUZSpec", dtype_id::float8_e4m3fnuz, true, sk::float32, cm::distribution},
      {"FP8E5M2Spec", dtype_id::float8_e5m2, true, sk::float32, cm::distribution},
      {"FP8E5M2FNUZSpec", dtype_id::float8_e5m2fnuz, true, sk::float32, cm::distribution},
  };
  for (const auto& e : table) {
    CAPTURE(e.name);
    const tensor_spec s = make_spec(e.name);
    CHECK(spec_class_name(s.name) == e.name);
    CHECK(s.dtype == e.dtype);
    CHECK(s.symmetric == e.symmetric);
    CHECK(s.scale_type == e.scale);
    CHECK(s.calibration_method == e.calib);
    CHECK(s.quant_granularity == granularity::tensor);
    CHECK(s.group_size == 0);
    CHECK(!s.axis);
    CHECK(!s.is_block());
  }
}

TEST_CASE("block spec defaults follow quark-spec §1.7-§1.9 and §8") {
  // BFP16Spec: BFPQuantizeDequantize op defaults (§1.8): to_bfp, block 8, bit 16, rounding 0.
  const auto bfp = bfp16_spec();
  CHECK(bfp.block == block_params{block_method::to_bfp, 8, 16, 2, 1, 0});
  CHECK(bfp.dtype == dtype_id::undefined);
  CHECK(bfp.symmetric);
  CHECK(bfp.calibration_method == calib_method::min_max);
  // MX4/6/9: DEFAULT_MICROEXPONENTS_PARAMS, bit_width 11/13/16 (§1.9).
  CHECK(make_spec("MX4Spec").block == block_params{block_method::to_bfp_prime, 16, 11, 2, 1, 2});
  CHECK(make_spec("MX6Spec").block == block_params{block_method::to_bfp_prime, 16, 13, 2, 1, 2});
  CHECK(make_spec("MX9Spec").block == block_params{block_method::to_bfp_prime, 16, 16, 2, 1, 2});
  // OCP MX: block 32, rounding_mode 2 (§1.7, §8 DEFAULT_MICROSCALING_PARAMS), element per spec.
  const std::pair<std::string_view, dtype_id> mx[] = {
      {"MXFP8E5M2Spec", dtype_id::float8_e5m2},   {"MXFP8E4M3Spec", dtype_id::float8_e4m3fn},
      {"MXFP6E3M2Spec", dtype_id::float6_e3m2fn}, {"MXFP6E2M3Spec", dtype_id::float6_e2m3fn},
      {"MXFP4E2M1Spec", dtype_id::float4_e2m1fn}, {"MXInt8Spec", dtype_id::int8}};
  for (const auto& row : mx) {
    CAPTURE(row.first);
    const auto s = make_spec(row.first);
    CHECK(s.dtype == row.second);
    CHECK(s.block == block_params{block_method::ocp_mx, 32, 0, 0, 0, 2});
    CHECK(s.symmetric);
    CHECK(s.scale_type == scale_kind::float32);
    CHECK(s.calibration_method == calib_method::min_max);
  }
}

TEST_CASE("spec names parse with or without the Spec suffix, case-insensitively") {
  CHECK(parse_spec_name("Int8Spec") == spec_name::int8);
  CHECK(parse_spec_name("int8") == spec_name::int8);
  CHECK(parse_spec_name("MXINT8") == spec_name::mxint8);
  CHECK(parse_spec_name("xint16spec") == spec_name::xint16);
  CHECK(!parse_spec_name("Int7Spec"));
  CHECK(!parse_spec_name("Spec"));
  CHECK(all_spec_names().size() == 26);
  for (auto n : all_spec_names())
    CHECK(parse_spec_name(spec_class_name(n)) == n);
  CHECK_THROWS_WITH_AS(make_spec("Int7Spec"),
                       doctest::Contains("quark.config.unknown_spec: unknown tensor spec "
                                         "\"Int7Spec\"; valid: Int8Spec, UInt8Spec"),
                       quark::config_error);
}

TEST_CASE("enum spellings") {
  CHECK(parse_scale_kind("PowerOf2") == scale_kind::power_of_2);
  CHECK(parse_scale_kind("ScaleType.Int16") == scale_kind::int16);
  CHECK(parse_calib_method("CalibMethod.LayerwisePercentile") ==
        calib_method::layerwise_percentile);
  CHECK(parse_calib_method("minmse") == calib_method::min_mse);
  CHECK(parse_granularity("QuantGranularity.Channel") == granularity::channel);
  CHECK(!parse_granularity("Block"));
  CHECK(to_string(calib_method::distribution) == "Distribution");
  CHECK(to_string(granularity::group) == "Group");
  CHECK(to_string(scale_kind::float32) == "Float32");
}

TEST_CASE("spec classification") {
  CHECK(is_integer_spec(xint8_spec()));
  CHECK(is_integer_spec(uint4_spec()));
  CHECK(!is_integer_spec(bfloat16_spec()));
  CHECK(is_float_spec(float16_spec()));
  CHECK(is_float_spec(make_spec(spec_name::fp8_e5m2)));
  CHECK(!is_float_spec(make_spec(spec_name::mxfp8_e4m3)));
  CHECK(make_spec(spec_name::mxfp8_e4m3).is_block());
}
