// SPDX-License-Identifier: MIT
// The runtime identity of every element type. Enumerator values equal the ONNX
// TensorProto.DataType codes 1..26 where ONNX defines the type (Debian's onnx 1.12 headers stop at
// 16, so this table is the project's own); types ONNX lacks use codes from 1001 up.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace quark {

enum class dtype_id : std::int32_t {
  undefined = 0,
  float32 = 1,
  uint8 = 2,
  int8 = 3,
  uint16 = 4,
  int16 = 5,
  int32 = 6,
  int64 = 7,
  string = 8,
  boolean = 9,
  float16 = 10,
  float64 = 11,
  uint32 = 12,
  uint64 = 13,
  complex64 = 14,
  complex128 = 15,
  bfloat16 = 16,
  float8_e4m3fn = 17,
  float8_e4m3fnuz = 18,
  float8_e5m2 = 19,
  float8_e5m2fnuz = 20,
  uint4 = 21,
  int4 = 22,
  float4_e2m1fn = 23,
  float8_e8m0fnu = 24,
  uint2 = 25,
  int2 = 26,
  // Not (yet) ONNX types.
  int3 = 1001,
  uint3 = 1002,
  float6_e3m2fn = 1003,
  float6_e2m3fn = 1004,
};

/// One row of the type table.
struct dtype_info {
  dtype_id id;
  std::string_view name;       ///< quark / ml_dtypes spelling
  std::string_view onnx_name;  ///< TensorProto.DataType enumerator, empty if ONNX has none
  int bits;                    ///< bits per element (0 for string)
};

inline constexpr dtype_info dtype_table[] = {
    {dtype_id::float32, "float32", "FLOAT", 32},
    {dtype_id::uint8, "uint8", "UINT8", 8},
    {dtype_id::int8, "int8", "INT8", 8},
    {dtype_id::uint16, "uint16", "UINT16", 16},
    {dtype_id::int16, "int16", "INT16", 16},
    {dtype_id::int32, "int32", "INT32", 32},
    {dtype_id::int64, "int64", "INT64", 64},
    {dtype_id::string, "string", "STRING", 0},
    {dtype_id::boolean, "bool", "BOOL", 8},
    {dtype_id::float16, "float16", "FLOAT16", 16},
    {dtype_id::float64, "float64", "DOUBLE", 64},
    {dtype_id::uint32, "uint32", "UINT32", 32},
    {dtype_id::uint64, "uint64", "UINT64", 64},
    {dtype_id::complex64, "complex64", "COMPLEX64", 64},
    {dtype_id::complex128, "complex128", "COMPLEX128", 128},
    {dtype_id::bfloat16, "bfloat16", "BFLOAT16", 16},
    {dtype_id::float8_e4m3fn, "float8_e4m3fn", "FLOAT8E4M3FN", 8},
    {dtype_id::float8_e4m3fnuz, "float8_e4m3fnuz", "FLOAT8E4M3FNUZ", 8},
    {dtype_id::float8_e5m2, "float8_e5m2", "FLOAT8E5M2", 8},
    {dtype_id::float8_e5m2fnuz, "float8_e5m2fnuz", "FLOAT8E5M2FNUZ", 8},
    {dtype_id::uint4, "uint4", "UINT4", 4},
    {dtype_id::int4, "int4", "INT4", 4},
    {dtype_id::float4_e2m1fn, "float4_e2m1fn", "FLOAT4E2M1", 4},
    {dtype_id::float8_e8m0fnu, "float8_e8m0fnu", "FLOAT8E8M0", 8},
    {dtype_id::uint2, "uint2", "UINT2", 2},
    {dtype_id::int2, "int2", "INT2", 2},
    {dtype_id::int3, "int3", "", 3},
    {dtype_id::uint3, "uint3", "", 3},
    {dtype_id::float6_e3m2fn, "float6_e3m2fn", "", 6},
    {dtype_id::float6_e2m3fn, "float6_e2m3fn", "", 6},
};

/// The table row of `id`, or nullptr for undefined / unknown values.
constexpr const dtype_info* find_dtype(dtype_id id) noexcept {
  for (const auto& row : dtype_table) {
    if (row.id == id)
      return &row;
  }
  return nullptr;
}

/// "float8_e4m3fn", ... or "undefined".
constexpr std::string_view dtype_name(dtype_id id) noexcept {
  const auto* row = find_dtype(id);
  return row ? row->name : std::string_view("undefined");
}

/// Bits per element, 0 when unknown.
constexpr int dtype_bits(dtype_id id) noexcept {
  const auto* row = find_dtype(id);
  return row ? row->bits : 0;
}

/// Maps an ONNX TensorProto.DataType code (1..26) to a dtype_id; nullopt for anything else.
constexpr std::optional<dtype_id> dtype_from_onnx(std::int32_t code) noexcept {
  if (code < 1 || code > 26)
    return std::nullopt;
  return static_cast<dtype_id>(code);
}

/// The ONNX code of `id`, nullopt when ONNX has no such type.
constexpr std::optional<std::int32_t> onnx_code(dtype_id id) noexcept {
  const auto c = static_cast<std::int32_t>(id);
  if (c < 1 || c > 26)
    return std::nullopt;
  return c;
}

/// Parses a name as spelled in dtype_name() or as the ONNX enumerator ("FLOAT8E4M3FN").
constexpr std::optional<dtype_id> dtype_from_name(std::string_view name) noexcept {
  for (const auto& row : dtype_table) {
    if (row.name == name || (!row.onnx_name.empty() && row.onnx_name == name))
      return row.id;
  }
  return std::nullopt;
}

}  // namespace quark
