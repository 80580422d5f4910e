// SPDX-License-Identifier: MIT
// Float scales: float32 (Quark's default, quark-spec §2.1) and float16 (FP16 models with
// UseFP32Scale off, §2.4: the scale initializer is FP16, rounded to nearest even).
#pragma once

#include <quark/dtype/convert.hpp>
#include <quark/dtype/formats.hpp>
#include <quark/scale/traits.hpp>

namespace quark {

/// A float32 scale: the value itself.
///
///     quark::float_scale s{0.02f};
struct float_scale {
  float value = 1.0f;
};

/// A float16 scale, as stored by Quark for FP16 models when UseFP32Scale is off.
///
///     auto s = quark::scale_traits<quark::float16_scale>::from_float(0.1f, {});  //
///     0.0999755859375
struct float16_scale {
  float16 value = float16(1.0f);
};

template <>
struct scale_traits<float_scale> {
  using storage_type = float;
  static constexpr std::string_view name = "float32";
  static constexpr bool is_power_of_two = false;
  static constexpr float to_float(float_scale s) noexcept { return s.value; }
  static constexpr float_scale from_float(float s, scale_projection = {}) noexcept { return {s}; }
};

template <>
struct scale_traits<float16_scale> {
  using storage_type = float16;
  static constexpr std::string_view name = "float16";
  static constexpr bool is_power_of_two = false;
  static constexpr float to_float(float16_scale s) noexcept { return quark::to_float(s.value); }
  /// Round to nearest even (numpy astype(float16)); above 65504 the IEEE rule gives +Inf.
  static constexpr float16_scale from_float(float s, scale_projection = {}) noexcept {
    return {convert<float16, policies::ieee>(s)};
  }
};

}  // namespace quark
