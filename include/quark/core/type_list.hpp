// SPDX-License-Identifier: MIT
// A minimal compile-time type list for tests, dispatch and benchmarks.
#pragma once

#include <cstddef>
#include <type_traits>

namespace quark {

template <class... Ts>
struct type_list {
  static constexpr std::size_t size = sizeof...(Ts);
};

/// Calls f(std::type_identity<T>{}) for every T in the list, in order.
template <class... Ts, class F>
constexpr void for_each_type(type_list<Ts...>, F&& f) {
  (f(std::type_identity<Ts>{}), ...);
}

}  // namespace quark
