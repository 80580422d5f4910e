// SPDX-License-Identifier: MIT
// minifloat<Format>: the storage value type of every floating-point format narrower than float32.
// It is not an arithmetic type: do the maths in float and convert explicitly, which avoids the
// hidden double rounding that operators on 8-bit types invite.
#pragma once

#include <cstdint>

#include <quark/core/bit.hpp>
#include <quark/core/policy.hpp>
#include <quark/dtype/detail/convert_impl.hpp>
#include <quark/dtype/fp_format.hpp>

namespace quark {

/// A value of format `Format`, stored in the smallest unsigned integer that holds its bits.
///
///     auto h = quark::float8_e4m3fn(1.3f);        // RNE, overflow to NaN (IEEE policy)
///     float back = static_cast<float>(h);          // exact: 1.25
///     auto s = quark::convert<quark::float8_e4m3fn, quark::policies::onnx_saturate>(1e6f);
template <fp_format Format>
class minifloat {
 public:
  using storage_type = detail::uint_for_bits<Format.total_bits()>;
  static constexpr fp_format format = Format;

  constexpr minifloat() noexcept = default;
  /// Converts with the IEEE policy (round to nearest even, overflow to Inf or NaN).
  constexpr explicit minifloat(float f) noexcept
      : bits_(static_cast<storage_type>(detail::encode_fp<Format, policies::ieee>(f))) {}
  constexpr explicit operator float() const noexcept { return detail::decode_fp<Format>(bits_); }

  static constexpr minifloat from_bits(storage_type bits) noexcept {
    minifloat m;
    m.bits_ = bits;
    return m;
  }
  constexpr storage_type to_bits() const noexcept { return bits_; }

  constexpr bool is_nan() const noexcept { return Format.is_nan_code(bits_); }
  constexpr bool is_inf() const noexcept { return Format.is_inf_code(bits_); }

 private:
  storage_type bits_{};
};

/// Bitwise equality: NaN equals the same NaN pattern, +0 differs from -0.
template <fp_format F>
constexpr bool bit_equal(minifloat<F> a, minifloat<F> b) noexcept {
  return a.to_bits() == b.to_bits();
}

}  // namespace quark
