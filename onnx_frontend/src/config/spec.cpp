// SPDX-License-Identifier: MIT
// Tensor specs: names, defaults (quark-spec §1.1, §1.7–§1.9, §8) and the enum spellings.
#include <array>
#include <cctype>
#include <string>

#include <quark/onnx/config.hpp>

#include "config/text.hpp"

namespace quark::onnx {

namespace {

struct spec_row {
  std::string_view class_name;
  dtype_id dtype;
  spec_name name;
  bool symmetric;
  scale_kind scale;
  calib_method calib;
};

using spec_n = spec_name;
using sk = scale_kind;
using cm = calib_method;

// quark-spec §1.1 table; Int4/UInt4 (absent from Quark's spec.py) follow seed 000 line 77 (signed
// types default to symmetric, unsigned to asymmetric); FP8 specs calibrate with Distribution, the
// only method seed 003 allows for FP8 and the one ORT requires (quark-spec §1.6).
constexpr spec_row spec_table[] = {
    {"Int8Spec", dtype_id::int8, spec_n::int8, true, sk::float32, cm::percentile},
    {"UInt8Spec", dtype_id::uint8, spec_n::uint8, false, sk::float32, cm::percentile},
    {"XInt8Spec", dtype_id::int8, spec_n::xint8, true, sk::power_of_2, cm::min_mse},
    {"Int16Spec", dtype_id::int16, spec_n::int16, true, sk::float32, cm::percentile},
    {"XInt16Spec", dtype_id::int16, spec_n::xint16, true, sk::power_of_2, cm::min_mse},
    {"UInt16Spec", dtype_id::uint16, spec_n::uint16, false, sk::float32, cm::percentile},
    {"Int32Spec", dtype_id::int32, spec_n::int32, true, sk::float32, cm::percentile},
    {"UInt32Spec", dtype_id::uint32, spec_n::uint32, false, sk::float32, cm::percentile},
    {"Int4Spec", dtype_id::int4, spec_n::int4, true, sk::float32, cm::percentile},
    {"UInt4Spec", dtype_id::uint4, spec_n::uint4, false, sk::float32, cm::percentile},
    {"BFloat16Spec", dtype_id::bfloat16, spec_n::bfloat16, true, sk::float32, cm::min_max},
    {"Float16Spec", dtype_id::float16, spec_n::float16, true, sk::float32, cm::min_max},
    {"FP8E4M3FNSpec", dtype_id::float8_e4m3fn, spec_n::fp8_e4m3fn, true, sk::float32,
     cm::distribution},
    {"FP8E4M3FNUZSpec", dtype_id::float8_e4m3fnuz, spec_n::fp8_e4m3fnuz, true, sk::float32,
     cm::distribution},
    {"FP8E5M2Spec", dtype_id::float8_e5m2, spec_n::fp8_e5m2, true, sk::float32, cm::distribution},
    {"FP8E5M2FNUZSpec", dtype_id::float8_e5m2fnuz, spec_n::fp8_e5m2fnuz, true, sk::float32,
     cm::distribution},
    {"BFP16Spec", dtype_id::undefined, spec_n::bfp16, true, sk::float32, cm::min_max},
    {"MX4Spec", dtype_id::undefined, spec_n::mx4, true, sk::float32, cm::min_max},
    {"MX6Spec", dtype_id::undefined, spec_n::mx6, true, sk::float32, cm::min_max},
    {"MX9Spec", dtype_id::undefined, spec_n::mx9, true, sk::float32, cm::min_max},
    {"MXFP8E5M2Spec", dtype_id::float8_e5m2, spec_n::mxfp8_e5m2, true, sk::float32, cm::min_max},
    {"MXFP8E4M3Spec", dtype_id::float8_e4m3fn, spec_n::mxfp8_e4m3, true, sk::float32, cm::min_max},
    {"MXFP6E3M2Spec", dtype_id::float6_e3m2fn, spec_n::mxfp6_e3m2, true, sk::float32, cm::min_max},
    {"MXFP6E2M3Spec", dtype_id::float6_e2m3fn, spec_n::mxfp6_e2m3, true, sk::float32, cm::min_max},
    {"MXFP4E2M1Spec", dtype_id::float4_e2m1fn, spec_n::mxfp4_e2m1, true, sk::float32, cm::min_max},
    {"MXInt8Spec", dtype_id::int8, spec_n::mxint8, true, sk::float32, cm::min_max},
};

constexpr auto all_names = [] {
  std::array<spec_name, std::size(spec_table)> a{};
  for (std::size_t i = 0; i < a.size(); ++i)
    a[i] = spec_table[i].name;
  return a;
}();

const spec_row& row_of(spec_name n) {
  for (const auto& r : spec_table) {
    if (r.name == n)
      return r;
  }
  return spec_table[0];
}

}  // namespace

std::string_view spec_class_name(spec_name n) noexcept {
  return row_of(n).class_name;
}

std::span<const spec_name> all_spec_names() noexcept {
  return all_names;
}

std::optional<spec_name> parse_spec_name(std::string_view s) noexcept {
  std::string l = lower(s);
  if (l.size() > 4 && l.ends_with("spec"))
    l.resize(l.size() - 4);
  for (const auto& r : spec_table) {
    std::string c = lower(r.class_name);
    c.resize(c.size() - 4);
    if (c == l)
      return r.name;
  }
  return std::nullopt;
}

tensor_spec make_spec(spec_name n) {
  const spec_row& r = row_of(n);
  tensor_spec s;
  s.name = n;
  s.dtype = r.dtype;
  s.symmetric = r.symmetric;
  s.scale_type = r.scale;
  s.calibration_method = r.calib;
  s.quant_granularity = granularity::tensor;
  switch (n) {
    case spec_n::bfp16:
      // BFPQuantizeDequantize op defaults (quark-spec §1.8): the new-API BFP16Spec keeps
      // rounding_mode 0; only the legacy BFP16 preset used 2 (§8.1, §13.12).
      s.block = {block_method::to_bfp, 8, 16, 2, 1, 0};
      break;
    case spec_n::mx4:
    case spec_n::mx6:
    case spec_n::mx9:
      // DEFAULT_MICROEXPONENTS_PARAMS with bit_width 11 / 13 / 16 (quark-spec §1.9).
      s.block = {block_method::to_bfp_prime,
                 16,
                 n == spec_n::mx4 ? 11 : (n == spec_n::mx6 ? 13 : 16),
                 2,
                 1,
                 2};
      break;
    case spec_n::mxfp8_e5m2:
    case spec_n::mxfp8_e4m3:
    case spec_n::mxfp6_e3m2:
    case spec_n::mxfp6_e2m3:
    case spec_n::mxfp4_e2m1:
    case spec_n::mxint8:
      // DEFAULT_MICROSCALING_PARAMS (quark-spec §1.7, §8): block 32, rounding_mode 2.
      s.block = {block_method::ocp_mx, 32, 0, 0, 0, 2};
      break;
    default:
      break;
  }
  return s;
}

tensor_spec make_spec(std::string_view class_name) {
  const auto n = parse_spec_name(class_name);
  if (!n) {
    std::string names;
    for (const auto& r : spec_table) {
      if (!names.empty())
        names += ", ";
      names += r.class_name;
    }
    throw config_error("quark.config.unknown_spec",
                       "unknown tensor spec \"" + std::string(class_name) + "\"; valid: " + names);
  }
  return make_spec(*n);
}

bool is_integer_spec(const tensor_spec& s) noexcept {
  switch (s.name) {
    case spec_n::int8:
    case spec_n::uint8:
    case spec_n::xint8:
    case spec_n::int16:
    case spec_n::xint16:
    case spec_n::uint16:
    case spec_n::int32:
    case spec_n::uint32:
    case spec_n::int4:
    case spec_n::uint4:
      return true;
    default:
      return false;
  }
}

bool is_float_spec(const tensor_spec& s) noexcept {
  switch (s.name) {
    case spec_n::bfloat16:
    case spec_n::float16:
    case spec_n::fp8_e4m3fn:
    case spec_n::fp8_e4m3fnuz:
    case spec_n::fp8_e5m2:
    case spec_n::fp8_e5m2fnuz:
      return true;
    default:
      return false;
  }
}

std::string_view to_string(scale_kind k) noexcept {
  switch (k) {
    case sk::float32:
      return "Float32";
    case sk::power_of_2:
      return "PowerOf2";
    case sk::int16:
      return "Int16";
  }
  return "?";
}

std::string_view to_string(calib_method m) noexcept {
  switch (m) {
    case cm::min_max:
      return "MinMax";
    case cm::min_mse:
      return "MinMSE";
    case cm::percentile:
      return "Percentile";
    case cm::entropy:
      return "Entropy";
    case cm::layerwise_percentile:
      return "LayerwisePercentile";
    case cm::distribution:
      return "Distribution";
  }
  return "?";
}

std::string_view to_string(granularity g) noexcept {
  switch (g) {
    case granularity::tensor:
      return "Tensor";
    case granularity::channel:
      return "Channel";
    case granularity::group:
      return "Group";
  }
  return "?";
}

std::string_view to_string(block_method m) noexcept {
  switch (m) {
    case block_method::none:
      return "none";
    case block_method::to_bfp:
      return "to_bfp";
    case block_method::to_bfp_prime:
      return "to_bfp_prime";
    case block_method::ocp_mx:
      return "ocp_mx";
  }
  return "?";
}

namespace {
/// Accepts "Float32", "ScaleType.Float32", "quark.onnx.ScaleType.Float32" (case-insensitive).
std::string strip_enum_prefix(std::string_view s) {
  const auto dot = s.rfind('.');
  return lower(dot == std::string_view::npos ? s : s.substr(dot + 1));
}
}  // namespace

std::optional<scale_kind> parse_scale_kind(std::string_view s) noexcept {
  const std::string l = strip_enum_prefix(s);
  for (auto k : {sk::float32, sk::power_of_2, sk::int16}) {
    if (lower(to_string(k)) == l)
      return k;
  }
  return std::nullopt;
}

std::optional<calib_method> parse_calib_method(std::string_view s) noexcept {
  const std::string l = strip_enum_prefix(s);
  for (auto m : {cm::min_max, cm::min_mse, cm::percentile, cm::entropy, cm::layerwise_percentile,
                 cm::distribution}) {
    if (lower(to_string(m)) == l)
      return m;
  }
  return std::nullopt;
}

std::optional<granularity> parse_granularity(std::string_view s) noexcept {
  const std::string l = strip_enum_prefix(s);
  for (auto g : {granularity::tensor, granularity::channel, granularity::group}) {
    if (lower(to_string(g)) == l)
      return g;
  }
  return std::nullopt;
}

std::optional<block_method> parse_block_method(std::string_view s) noexcept {
  for (auto m : {block_method::none, block_method::to_bfp, block_method::to_bfp_prime,
                 block_method::ocp_mx}) {
    if (to_string(m) == s)
      return m;
  }
  return std::nullopt;
}

}  // namespace quark::onnx
