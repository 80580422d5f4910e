// SPDX-License-Identifier: MIT
// The runtime -> compile-time bridge: visit_dtype(id, f) calls f(std::type_identity<T>{}) with the
// C++ type of `id`. Used by the ONNX frontend and any other runtime-configured caller.
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>

#include <quark/config.hpp>
#include <quark/core/error.hpp>
#include <quark/dtype/dtype_id.hpp>
#include <quark/dtype/formats.hpp>

namespace quark {

/// Calls f(std::type_identity<T>{}) for the element type T of `id` and returns its result.
/// Covers float32/64, bool, every integer from int2 to int64/uint64 and every minifloat; throws
/// quark::invalid_argument ("quark.dtype.unsupported") for string, complex and unknown ids.
///
///     int bits = quark::visit_dtype(quark::dtype_id::int4, [](auto t) {
///       return quark::dtype_traits<typename decltype(t)::type>::bits; });  // 4
template <class F>
decltype(auto) visit_dtype(dtype_id id, F&& f) {
  using I = std::type_identity<float>;
  switch (id) {
    case dtype_id::float32:
      return f(I{});
    case dtype_id::float64:
      return f(std::type_identity<double>{});
    case dtype_id::boolean:
      return f(std::type_identity<bool>{});
    case dtype_id::uint8:
      return f(std::type_identity<std::uint8_t>{});
    case dtype_id::int8:
      return f(std::type_identity<std::int8_t>{});
    case dtype_id::uint16:
      return f(std::type_identity<std::uint16_t>{});
    case dtype_id::int16:
      return f(std::type_identity<std::int16_t>{});
    case dtype_id::uint32:
      return f(std::type_identity<std::uint32_t>{});
    case dtype_id::int32:
      return f(std::type_identity<std::int32_t>{});
    case dtype_id::uint64:
      return f(std::type_identity<std::uint64_t>{});
    case dtype_id::int64:
      return f(std::type_identity<std::int64_t>{});
    case dtype_id::float16:
      return f(std::type_identity<float16>{});
    case dtype_id::bfloat16:
      return f(std::type_identity<bfloat16>{});
    case dtype_id::float8_e4m3fn:
      return f(std::type_identity<float8_e4m3fn>{});
    case dtype_id::float8_e4m3fnuz:
      return f(std::type_identity<float8_e4m3fnuz>{});
    case dtype_id::float8_e5m2:
      return f(std::type_identity<float8_e5m2>{});
    case dtype_id::float8_e5m2fnuz:
      return f(std::type_identity<float8_e5m2fnuz>{});
    case dtype_id::float6_e3m2fn:
      return f(std::type_identity<float6_e3m2fn>{});
    case dtype_id::float6_e2m3fn:
      return f(std::type_identity<float6_e2m3fn>{});
    case dtype_id::float4_e2m1fn:
      return f(std::type_identity<float4_e2m1fn>{});
    case dtype_id::float8_e8m0fnu:
      return f(std::type_identity<float8_e8m0fnu>{});
    case dtype_id::int2:
      return f(std::type_identity<int2>{});
    case dtype_id::uint2:
      return f(std::type_identity<uint2>{});
    case dtype_id::int3:
      return f(std::type_identity<int3>{});
    case dtype_id::uint3:
      return f(std::type_identity<uint3>{});
    case dtype_id::int4:
      return f(std::type_identity<int4>{});
    case dtype_id::uint4:
      return f(std::type_identity<uint4>{});
    default:
      break;
  }
  QUARK_THROW(invalid_argument("quark.dtype.unsupported",
                               "no numeric element type for dtype id " +
                                   std::to_string(static_cast<std::int32_t>(id)) + " (" +
                                   std::string(dtype_name(id)) + ")"));
}

}  // namespace quark
