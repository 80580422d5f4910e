// SPDX-License-Identifier: MIT
// float32 -> data type conversion under a named policy, and exact data type -> float32, for one
// value and for spans. Integers: round by the policy, saturate to the type's range (clamp before
// the cast, never an out-of-range float->int cast), NaN -> 0.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>

#include <quark/config.hpp>
#include <quark/core/concepts.hpp>
#include <quark/core/policy.hpp>
#include <quark/detail/stream.hpp>
#include <quark/dtype/detail/convert_impl.hpp>
#include <quark/dtype/detail/round_int.hpp>
#include <quark/dtype/detail/simd_encode16.hpp>
#include <quark/dtype/detail/simd_encode8.hpp>
#include <quark/dtype/detail/simd_f16.hpp>
#include <quark/dtype/traits.hpp>

namespace quark {

namespace detail {

template <class T>
struct int_repr {
  using type = T;
};
template <int B, bool S>
struct int_repr<int_n<B, S>> {
  using type = int;
};

/// Largest float <= hi and smallest float >= lo, for exact clamping in the float domain.
template <class T>
inline constexpr float int_hi_float = [] {
  const auto hi = dtype_traits<T>::max_value;
  float f = static_cast<float>(hi);
  while (static_cast<double>(f) > static_cast<double>(hi)) {
    f = bits_float(float_bits(f) - 1u);
  }
  return f;
}();

template <class T, conversion_policy P>
QUARK_ALWAYS_INLINE constexpr T convert_int(float x, std::uint32_t random) noexcept {
  using tr = dtype_traits<T>;
  constexpr float lo = static_cast<float>(tr::min_value);  // exact: a power of two or 0
  constexpr float hi = int_hi_float<T>;
  const float r = round_integral<P.round>(x, random);
  typename int_repr<T>::type v;
  if (r != r) {
    v = 0;  // NaN (nan_handling has no other meaning for integers)
  } else if (r <= lo) {
    v = static_cast<typename int_repr<T>::type>(tr::min_value);
  } else if (r > hi) {
    v = static_cast<typename int_repr<T>::type>(tr::max_value);
  } else {
    v = static_cast<typename int_repr<T>::type>(static_cast<std::int64_t>(r));
  }
  return T(v);
}

/// Decode table for 8-bit-or-narrower formats.
template <fp_format F>
inline constexpr auto decode_table = [] {
  std::array<float, (std::size_t{1} << F.total_bits())> t{};
  for (std::uint32_t c = 0; c < t.size(); ++c)
    t[c] = decode_fp<F>(c);
  return t;
}();

}  // namespace detail

/// Converts x to `To` under policy P.
///
///     auto q = quark::convert<quark::float8_e4m3fn, quark::policies::onnx_saturate>(500.f); // 448
///     auto i = quark::convert<std::int8_t>(-200.7f);                                     // -128
template <quantized_type To,
          conversion_policy P = (integral_data_type<To> ? policies::onnx_quantize : policies::ieee)>
  requires(P.round != rounding::stochastic)
QUARK_ALWAYS_INLINE constexpr To convert(float x) noexcept {
  if constexpr (floating_data_type<To>) {
    using st = typename To::storage_type;
    return To::from_bits(static_cast<st>(detail::encode_fp<To::format, P>(x)));
  } else {
    return detail::convert_int<To, P>(x, 0u);
  }
}

/// Stochastic rounding: `random` is 32 uniformly distributed bits supplied by the caller.
template <quantized_type To, conversion_policy P>
  requires(P.round == rounding::stochastic)
QUARK_ALWAYS_INLINE constexpr To convert(float x, std::uint32_t random) noexcept {
  if constexpr (floating_data_type<To>) {
    using st = typename To::storage_type;
    return To::from_bits(static_cast<st>(detail::encode_fp<To::format, P>(x, random)));
  } else {
    return detail::convert_int<To, P>(x, random);
  }
}

/// Exact conversion back to float32.
template <quantized_type T>
QUARK_ALWAYS_INLINE constexpr float to_float(T v) noexcept {
  if constexpr (floating_data_type<T>) {
    constexpr fp_format F = T::format;
    if constexpr (F.total_bits() <= 8) {
      return detail::decode_table<F>[v.to_bits()];
    } else if constexpr (F == formats::bfloat16) {
      return detail::bits_float(static_cast<std::uint32_t>(v.to_bits()) << 16);
    } else if constexpr (F.has_zero && F.special != specials::nan_only &&
                         F.special != specials::nan_at_negative_zero) {
      return detail::decode_fp_fast<F>(v.to_bits());
    } else {
      return detail::decode_fp<F>(v.to_bits());
    }
  } else if constexpr (requires { v.value(); }) {
    return static_cast<float>(v.value());
  } else {
    return static_cast<float>(v);
  }
}

/// Converts a span; `out.size()` must equal `in.size()`. No allocation.
template <quantized_type To,
          conversion_policy P = (integral_data_type<To> ? policies::onnx_quantize : policies::ieee)>
  requires(P.round != rounding::stochastic)
void convert(std::span<const float> in, std::span<To> out) noexcept {
  QUARK_ASSERT(in.size() == out.size(), "convert: size mismatch");
  const float* QUARK_RESTRICT src = in.data();
#if QUARK_SIMD_ENCODE16 != 0
  if constexpr (floating_data_type<To>) {
    if constexpr (detail::has_simd_encode16<To::format, P>) {
      detail::encode16_bulk<To::format, P>(src, reinterpret_cast<std::uint16_t*>(out.data()),
                                           in.size());
      return;
    }
  }
#endif
#if QUARK_SIMD_ENCODE8
  if constexpr (floating_data_type<To>) {
    if constexpr (detail::has_simd_encode8<To::format, P>) {
      static_assert(sizeof(To) == 1);
      detail::encode8_bulk<To::format, P>(src, reinterpret_cast<std::uint8_t*>(out.data()),
                                          in.size());
      return;
    }
  }
#endif
  detail::for_each_block_streamed(src, in.size(), out.data(),
                                  [src](std::size_t first, std::size_t n, To* QUARK_RESTRICT dst) {
                                    const float* QUARK_RESTRICT x = src + first;
                                    for (std::size_t i = 0; i < n; ++i)
                                      dst[i] = convert<To, P>(x[i]);
                                  });
}

/// Converts a span back to float32; `out.size()` must equal `in.size()`.
template <quantized_type T>
void to_float(std::span<const T> in, std::span<float> out) noexcept {
  QUARK_ASSERT(in.size() == out.size(), "to_float: size mismatch");
  const T* QUARK_RESTRICT src = in.data();
#if QUARK_HAS_F16C
  if constexpr (std::is_same_v<T, float16>) {
    detail::for_each_block_streamed(
        src, in.size(), out.data(), [src](std::size_t first, std::size_t n, float* dst) {
          detail::f16c_decode(reinterpret_cast<const std::uint16_t*>(src + first), dst, n);
        });
    return;
  }
#endif
  detail::for_each_block_streamed(
      src, in.size(), out.data(),
      [src](std::size_t first, std::size_t n, float* QUARK_RESTRICT dst) {
        const T* QUARK_RESTRICT x = src + first;
        for (std::size_t i = 0; i < n; ++i)
          dst[i] = to_float(x[i]);
      });
}

}  // namespace quark
