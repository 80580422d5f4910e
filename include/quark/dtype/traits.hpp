// SPDX-License-Identifier: MIT
// dtype_traits<T>: the customization point that makes T a quark data type. The primary template
// is declared and not defined, so an unsupported type fails loudly at compile time.
#pragma once

#include <cstdint>
#include <limits>
#include <string_view>

#include <quark/core/bit.hpp>
#include <quark/dtype/dtype_id.hpp>
#include <quark/dtype/formats.hpp>

namespace quark {

template <class T>
struct dtype_traits;  // intentionally undefined

namespace detail {
constexpr dtype_id id_of_format(fp_format f) noexcept {
  if (f == formats::float16)
    return dtype_id::float16;
  if (f == formats::bfloat16)
    return dtype_id::bfloat16;
  if (f == formats::float8_e4m3fn)
    return dtype_id::float8_e4m3fn;
  if (f == formats::float8_e4m3fnuz)
    return dtype_id::float8_e4m3fnuz;
  if (f == formats::float8_e5m2)
    return dtype_id::float8_e5m2;
  if (f == formats::float8_e5m2fnuz)
    return dtype_id::float8_e5m2fnuz;
  if (f == formats::float6_e3m2fn)
    return dtype_id::float6_e3m2fn;
  if (f == formats::float6_e2m3fn)
    return dtype_id::float6_e2m3fn;
  if (f == formats::float4_e2m1fn)
    return dtype_id::float4_e2m1fn;
  if (f == formats::float8_e8m0fnu)
    return dtype_id::float8_e8m0fnu;
  return dtype_id::undefined;
}
constexpr dtype_id id_of_int(int bits, bool is_signed) noexcept {
  switch (bits) {
    case 2:
      return is_signed ? dtype_id::int2 : dtype_id::uint2;
    case 3:
      return is_signed ? dtype_id::int3 : dtype_id::uint3;
    case 4:
      return is_signed ? dtype_id::int4 : dtype_id::uint4;
    case 8:
      return is_signed ? dtype_id::int8 : dtype_id::uint8;
    case 16:
      return is_signed ? dtype_id::int16 : dtype_id::uint16;
    case 32:
      return is_signed ? dtype_id::int32 : dtype_id::uint32;
    case 64:
      return is_signed ? dtype_id::int64 : dtype_id::uint64;
    default:
      return dtype_id::undefined;
  }
}
}  // namespace detail

/// Traits of every minifloat.
template <fp_format F>
struct dtype_traits<minifloat<F>> {
  using storage_type = typename minifloat<F>::storage_type;
  static constexpr int bits = F.total_bits();
  static constexpr bool is_integer = false;
  static constexpr bool is_signed = F.is_signed;
  static constexpr dtype_id id = detail::id_of_format(F);
  static constexpr std::string_view name = dtype_name(id);
  static constexpr float max() noexcept { return detail::decode_fp<F>(F.max_finite_code()); }
  static constexpr float lowest() noexcept {
    return F.is_signed ? -max() : detail::decode_fp<F>(0u);
  }
  static_assert(id != dtype_id::undefined, "every fp_format alias needs a dtype_id");
};

/// Traits of the sub-byte integers.
template <int B, bool S>
struct dtype_traits<int_n<B, S>> {
  using storage_type = std::uint8_t;
  static constexpr int bits = B;
  static constexpr bool is_integer = true;
  static constexpr bool is_signed = S;
  static constexpr dtype_id id = detail::id_of_int(B, S);
  static constexpr std::string_view name = dtype_name(id);
  static constexpr std::int64_t min_value = int_n<B, S>::min_value;
  static constexpr std::int64_t max_value = int_n<B, S>::max_value;
  static constexpr float max() noexcept { return static_cast<float>(max_value); }
  static constexpr float lowest() noexcept { return static_cast<float>(min_value); }
};

namespace detail {
template <class T>
struct std_int_traits {
  using storage_type = T;
  static constexpr int bits = static_cast<int>(sizeof(T) * 8);
  static constexpr bool is_integer = true;
  static constexpr bool is_signed = std::numeric_limits<T>::is_signed;
  static constexpr dtype_id id = id_of_int(bits, is_signed);
  static constexpr std::string_view name = dtype_name(id);
  static constexpr std::int64_t min_value =
      static_cast<std::int64_t>(std::numeric_limits<T>::min());
  static constexpr std::int64_t max_value =
      bits < 64 ? static_cast<std::int64_t>(std::numeric_limits<T>::max())
                : std::numeric_limits<std::int64_t>::max();
  static constexpr float max() noexcept { return static_cast<float>(max_value); }
  static constexpr float lowest() noexcept { return static_cast<float>(min_value); }
};
}  // namespace detail

template <>
struct dtype_traits<std::int8_t> : detail::std_int_traits<std::int8_t> {};
template <>
struct dtype_traits<std::uint8_t> : detail::std_int_traits<std::uint8_t> {};
template <>
struct dtype_traits<std::int16_t> : detail::std_int_traits<std::int16_t> {};
template <>
struct dtype_traits<std::uint16_t> : detail::std_int_traits<std::uint16_t> {};
template <>
struct dtype_traits<std::int32_t> : detail::std_int_traits<std::int32_t> {};
template <>
struct dtype_traits<std::uint32_t> : detail::std_int_traits<std::uint32_t> {};
template <>
struct dtype_traits<std::int64_t> : detail::std_int_traits<std::int64_t> {};
template <>
struct dtype_traits<std::uint64_t> : detail::std_int_traits<std::uint64_t> {};

template <>
struct dtype_traits<float> {
  using storage_type = std::uint32_t;
  static constexpr int bits = 32;
  static constexpr bool is_integer = false;
  static constexpr bool is_signed = true;
  static constexpr dtype_id id = dtype_id::float32;
  static constexpr std::string_view name = "float32";
  static constexpr float max() noexcept { return std::numeric_limits<float>::max(); }
  static constexpr float lowest() noexcept { return std::numeric_limits<float>::lowest(); }
};
template <>
struct dtype_traits<double> {
  using storage_type = std::uint64_t;
  static constexpr int bits = 64;
  static constexpr bool is_integer = false;
  static constexpr bool is_signed = true;
  static constexpr dtype_id id = dtype_id::float64;
  static constexpr std::string_view name = "float64";
  static constexpr float max() noexcept { return std::numeric_limits<float>::infinity(); }
  static constexpr float lowest() noexcept { return -std::numeric_limits<float>::infinity(); }
};
template <>
struct dtype_traits<bool> {
  using storage_type = std::uint8_t;
  static constexpr int bits = 8;
  static constexpr bool is_integer = true;
  static constexpr bool is_signed = false;
  static constexpr dtype_id id = dtype_id::boolean;
  static constexpr std::string_view name = "bool";
  static constexpr std::int64_t min_value = 0;
  static constexpr std::int64_t max_value = 1;
  static constexpr float max() noexcept { return 1.0f; }
  static constexpr float lowest() noexcept { return 0.0f; }
};

}  // namespace quark
