// SPDX-License-Identifier: MIT
// The concepts that constrain every public function template, so ADL never picks a quark
// overload for a user's type and misuse fails with a readable message.
#pragma once

#include <concepts>
#include <string_view>

#include <quark/dtype/traits.hpp>

namespace quark {

/// A type with complete dtype_traits.
template <class T>
concept data_type = requires {
  { dtype_traits<T>::bits } -> std::convertible_to<int>;
  { dtype_traits<T>::name } -> std::convertible_to<std::string_view>;
};

/// A minifloat format (float16, bfloat16, float8*, float6*, float4*, e8m0).
template <class T>
concept floating_data_type = data_type<T> && requires {
  T::format;
};

/// An integer type a tensor can be quantized to: int2..int32, uint2..uint32.
template <class T>
concept integral_data_type = data_type<T> && dtype_traits<T>::is_integer &&
                             (dtype_traits<T>::bits <= 32) &&
                             !std::same_as<T, bool>;

/// Any type quark converts float32 into: a minifloat or a quantization integer.
template <class T>
concept quantized_type = floating_data_type<T> || integral_data_type<T>;

}  // namespace quark
