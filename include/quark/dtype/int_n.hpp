// SPDX-License-Identifier: MIT
// int_n<Bits, Signed>: sub-byte integers (2..7 bits) held unpacked, one per byte. Packing into
// bytes is a separate step (pack.hpp). 8-, 16- and 32-bit integers are the std types themselves.
#pragma once

#include <cstdint>
#include <type_traits>

namespace quark {

/// A `Bits`-bit two's-complement (Signed) or unsigned integer, 2 <= Bits <= 7.
///
///     quark::int4 v{-3};
///     int x = v.value();  // -3
template <int Bits, bool Signed>
class int_n {
  static_assert(Bits >= 2 && Bits <= 7, "int_n covers 2..7 bits; use std::intN_t for 8 and up");

 public:
  using value_type = std::conditional_t<Signed, std::int8_t, std::uint8_t>;
  using storage_type = std::uint8_t;
  static constexpr int bits = Bits;
  static constexpr bool is_signed = Signed;
  static constexpr int min_value = Signed ? -(1 << (Bits - 1)) : 0;
  static constexpr int max_value = Signed ? (1 << (Bits - 1)) - 1 : (1 << Bits) - 1;

  constexpr int_n() noexcept = default;
  /// Precondition: min_value <= v <= max_value (use convert<> for saturation from float).
  constexpr explicit int_n(int v) noexcept : value_(static_cast<value_type>(v)) {}
  constexpr int value() const noexcept { return value_; }
  constexpr explicit operator float() const noexcept { return static_cast<float>(value_); }
  /// The Bits-bit two's-complement code (what pack() stores).
  constexpr storage_type to_bits() const noexcept {
    return static_cast<storage_type>(static_cast<unsigned>(value_) & ((1u << Bits) - 1u));
  }
  static constexpr int_n from_bits(storage_type code) noexcept {
    const unsigned c = code & ((1u << Bits) - 1u);
    if constexpr (Signed) {
      const int v =
          (c & (1u << (Bits - 1))) ? static_cast<int>(c) - (1 << Bits) : static_cast<int>(c);
      return int_n(v);
    } else {
      return int_n(static_cast<int>(c));
    }
  }
  friend constexpr bool operator==(int_n, int_n) = default;

 private:
  value_type value_{};
};

}  // namespace quark
