// SPDX-License-Identifier: MIT
// scale_traits<S>: the customization point that makes S a scale type. A scale type is a runtime
// value whose *kind* is its C++ type (float32, float16, power of two, int16 fixed point, E8M0).
// Each kind projects a real scale onto the values it can represent (`from_float`) and converts
// back exactly (`to_float`). See quark-spec §2 for the rules each kind follows.
#pragma once

#include <concepts>
#include <cstdint>
#include <string_view>

namespace quark {

template <class S>
struct scale_traits;  // intentionally undefined

/// How a real scale is projected onto a power of two (quark-spec §2.2).
enum class pow2_rounding : std::uint8_t {
  nearest_log2,  ///< Quark: position = rint(-log2 s); s' may be below s by up to sqrt(2)
  ceil,          ///< non-overflow: the smallest power of two >= s, so the range never shrinks
};

/// What the int16 fixed-point search does when Quark's N in [0, 16] finds no non-zero M
/// (quark-spec §2.3 and the project decision "Int16 scales never collapse to 2^-14").
enum class fixed_point_fallback : std::uint8_t {
  extend_shift,    ///< keep searching N outside [0, 16] (N > 16 for tiny, N < 0 for huge scales)
  quark_collapse,  ///< Quark's code: the scale becomes 2^-14 (kept only for comparisons)
};

/// How a real scale is projected onto an E8M0 power of two (OCP MX v1.0 §5.3 uses floor).
enum class e8m0_rounding : std::uint8_t {
  floor,    ///< 2^floor(log2 s) (OCP, default)
  ceil,     ///< 2^ceil(log2 s) (the "rceil" choice: the range never shrinks)
  nearest,  ///< the nearest power of two in the linear domain, ties to the even code
};

/// The projection choices of every scale kind, bundled so one value travels through qparams.
struct scale_projection {
  pow2_rounding pow2 = pow2_rounding::nearest_log2;
  fixed_point_fallback fixed_point = fixed_point_fallback::extend_shift;
  e8m0_rounding e8m0 = e8m0_rounding::floor;
};

/// A type with complete scale_traits: exact `to_float`, projecting `from_float`, a name and
/// whether every value is a power of two.
///
///     static_assert(quark::scale_type<quark::pow2_scale>);
///     float s = quark::scale_traits<quark::pow2_scale>::to_float({-7});  // 0.0078125
template <class S>
concept scale_type = requires(S s, float f, scale_projection p) {
  { scale_traits<S>::to_float(s) } -> std::same_as<float>;
  { scale_traits<S>::from_float(f, p) } -> std::same_as<S>;
  { scale_traits<S>::name } -> std::convertible_to<std::string_view>;
  { scale_traits<S>::is_power_of_two } -> std::convertible_to<bool>;
};

/// Projects a real scale onto S and returns the represented value as float (exact).
///
///     float s = quark::project_scale<quark::pow2_scale>(0.011f);  // 0.0078125
template <scale_type S>
constexpr float project_scale(float s, scale_projection p = {}) noexcept {
  return scale_traits<S>::to_float(scale_traits<S>::from_float(s, p));
}

}  // namespace quark
