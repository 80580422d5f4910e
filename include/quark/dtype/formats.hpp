// SPDX-License-Identifier: MIT
// The named formats. Suffixes follow LLVM/ONNX/ml_dtypes: `f` finite (no Inf), `n` NaN only at a
// special encoding, `uz` no negative zero (NaN takes its pattern), `u` unsigned.
#pragma once

#include <cstdint>

#include <quark/core/type_list.hpp>
#include <quark/dtype/dtype_id.hpp>  // first, so GCC -Wshadow does not flag its enumerators
#include <quark/dtype/fp_format.hpp>
#include <quark/dtype/int_n.hpp>
#include <quark/dtype/minifloat.hpp>

namespace quark {

namespace formats {
inline constexpr fp_format float16{5, 10, 15, true, specials::ieee};
inline constexpr fp_format bfloat16{8, 7, 127, true, specials::ieee};
inline constexpr fp_format float8_e4m3fn{4, 3, 7, true, specials::nan_only};
inline constexpr fp_format float8_e4m3fnuz{4, 3, 8, true, specials::nan_at_negative_zero};
inline constexpr fp_format float8_e5m2{5, 2, 15, true, specials::ieee};
inline constexpr fp_format float8_e5m2fnuz{5, 2, 16, true, specials::nan_at_negative_zero};
inline constexpr fp_format float6_e3m2fn{3, 2, 3, true, specials::none};
inline constexpr fp_format float6_e2m3fn{2, 3, 1, true, specials::none};
inline constexpr fp_format float4_e2m1fn{2, 1, 1, true, specials::none};
inline constexpr fp_format float8_e8m0fnu{8, 0, 127, false, specials::nan_only, false};
}  // namespace formats

/// IEEE 754 binary16: s1 e5 m10, bias 15, Inf/NaN at exponent 31; max 65504, min subnormal 2^-24.
using float16 = minifloat<formats::float16>;
/// bfloat16: s1 e8 m7, bias 127, Inf/NaN at exponent 255; max 3.3895314e38, min sub 2^-133.
using bfloat16 = minifloat<formats::bfloat16>;
/// OFP8 E4M3 (fn): s1 e4 m3, bias 7, no Inf, NaN = S.1111.111; max 448, min subnormal 2^-9.
using float8_e4m3fn = minifloat<formats::float8_e4m3fn>;
/// E4M3 fnuz: s1 e4 m3, bias 8, no Inf, no -0, NaN = 0x80; max 240, min subnormal 2^-10.
using float8_e4m3fnuz = minifloat<formats::float8_e4m3fnuz>;
/// OFP8 E5M2: s1 e5 m2, bias 15, IEEE-style Inf/NaN; max 57344, min subnormal 2^-16.
using float8_e5m2 = minifloat<formats::float8_e5m2>;
/// E5M2 fnuz: s1 e5 m2, bias 16, no Inf, no -0, NaN = 0x80; max 57344, min subnormal 2^-17.
using float8_e5m2fnuz = minifloat<formats::float8_e5m2fnuz>;
/// OCP MX FP6 E3M2: s1 e3 m2, bias 3, no Inf/NaN; max 28, min subnormal 2^-4.
using float6_e3m2fn = minifloat<formats::float6_e3m2fn>;
/// OCP MX FP6 E2M3: s1 e2 m3, bias 1, no Inf/NaN; max 7.5, min subnormal 2^-3.
using float6_e2m3fn = minifloat<formats::float6_e2m3fn>;
/// OCP MX FP4 E2M1: s1 e2 m1, bias 1, no Inf/NaN; values +-{0, .5, 1, 1.5, 2, 3, 4, 6}.
using float4_e2m1fn = minifloat<formats::float4_e2m1fn>;
/// OCP E8M0 scale: e8, bias 127, unsigned, no zero, NaN = 0xFF; 2^-127 .. 2^127.
using float8_e8m0fnu = minifloat<formats::float8_e8m0fnu>;

using int2 = int_n<2, true>;
using uint2 = int_n<2, false>;
using int3 = int_n<3, true>;
using uint3 = int_n<3, false>;
using int4 = int_n<4, true>;
using uint4 = int_n<4, false>;

using all_float_formats =
    type_list<float16, bfloat16, float8_e4m3fn, float8_e4m3fnuz, float8_e5m2, float8_e5m2fnuz,
              float6_e3m2fn, float6_e2m3fn, float4_e2m1fn, float8_e8m0fnu>;
using all_sub_byte_integers = type_list<int2, uint2, int3, uint3, int4, uint4>;
using all_integer_types =
    type_list<int2, uint2, int3, uint3, int4, uint4, std::int8_t, std::uint8_t, std::int16_t,
              std::uint16_t, std::int32_t, std::uint32_t>;

}  // namespace quark
