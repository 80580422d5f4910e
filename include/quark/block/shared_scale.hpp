// SPDX-License-Identifier: MIT
// Shared-exponent selection for block formats. OCP MX v1.0 section 6.3 chooses the shared E8M0
// scale X = 2^(floor(log2(amax)) - emax_elem); the other modes (ceil, even, rceil) are the
// variants found in AMD Quark's PyTorch path, torchao and NVIDIA's libraries. Everything works on
// float32 bits, exactly, with no libm call: floor(log2) is the exponent field, ceil adds one
// unless the significand is a power of two, rceil compares significands.
#pragma once

#include <bit>
#include <cstdint>

#include <quark/block/block_format.hpp>
#include <quark/core/bit.hpp>
#include <quark/dtype/convert.hpp>

namespace quark {

/// The facts of an OCP MX element that the block kernels need, derived from its dtype.
struct mx_element_info {
  int emax;         ///< unbiased exponent of the largest normal (OCP "emax_elem")
  int emin;         ///< unbiased exponent of the smallest normal binade (0 for MXINT8)
  int mbits;        ///< fraction bits kept in a binade (6 for MXINT8's 1.6 fixed point)
  float max_pos;    ///< largest positive element value
  float max_neg;    ///< magnitude of the most negative element value
  bool is_integer;  ///< MXINT8: zero is unsigned, the grid is fixed-point
};

/// mx_element_info of an OCP MX element type.
///
///     static_assert(quark::mx_element_info_v<quark::float4_e2m1fn>.emax == 2);
template <class Element>
  requires detail::is_mx_element_v<Element>
inline constexpr mx_element_info mx_element_info_v = [] {
  if constexpr (std::same_as<Element, std::int8_t>) {
    // 1.6 fixed point: q * 2^-6 with q in [-128, 127]. With emin = emax = 0 every element of a
    // block uses the fixed quantum 2^(E-6), because amax < 2^(E+1) for every scale mode.
    return mx_element_info{0, 0, 6, 127.0f / 64.0f, 2.0f, true};
  } else {
    constexpr fp_format F = Element::format;
    return mx_element_info{
        F.max_normal_exponent(),      F.min_normal_exponent(),      F.mantissa_bits,
        dtype_traits<Element>::max(), dtype_traits<Element>::max(), false};
  }
}();

namespace detail {

/// |x| bits normalised to a 24-bit significand (leading one at bit 23) and its exponent.
/// Precondition: a is finite and non-zero.
constexpr void normalise(std::uint32_t a, std::uint32_t& significand, int& exponent) noexcept {
  const std::uint32_t field = a >> 23;
  if (field != 0u) {
    significand = (a & 0x7FFFFFu) | 0x800000u;
    exponent = static_cast<int>(field) - 127;
  } else {
    const int lz = std::countl_zero(a) - 8;  // a < 2^23: at least 9 leading zeros
    significand = a << lz;
    exponent = -126 - lz;
  }
}

/// Lowest shared exponent a block may use: E8M0's -127, or Quark's unclamped field-based value.
constexpr int mx_min_exponent(const mx_element_info& el, compat_mode compat) noexcept {
  return compat == compat_mode::standard ? -127 : -127 - el.emax;
}

/// The unbiased shared exponent E (scale 2^E) of an OCP MX block whose largest finite magnitude
/// has float32 bits `amax_bits` (sign clear, not Inf/NaN). Result in [min exponent, 127].
///
/// Steps: (1) k = floor/ceil/rounded log2(amax) from the bits (zero: the lowest exponent);
/// (2) E = k - emax (rceil: E = ceil(log2(amax / max)) directly); (3) clamp to the E8M0 range
/// (compat_mode::quark lowers the bottom to -127 - emax, the value Quark's op computes).
constexpr int mx_shared_exponent(std::uint32_t amax_bits, const mx_element_info& el,
                                 e8m0_scale_mode mode, compat_mode compat) noexcept {
  const int lo = mx_min_exponent(el, compat);
  const std::uint32_t field = amax_bits >> 23;
  int e = lo;
  switch (mode) {
    case e8m0_scale_mode::floor:
      // The exponent field: floor(log2) for normals; float32 subnormals give -127 - emax, which
      // is below E8M0 anyway (and exactly Quark's value).
      e = static_cast<int>(field) - 127 - el.emax;
      break;
    case e8m0_scale_mode::ceil:
      if (amax_bits != 0u) {
        std::uint32_t sig = 0;
        int ex = 0;
        normalise(amax_bits, sig, ex);
        e = ex + (sig != 0x800000u ? 1 : 0) - el.emax;
      }
      break;
    case e8m0_scale_mode::even: {
      // Round the significand to the element's mantissa width, ties up (a carry bumps the
      // exponent field), then floor. The sum stays below 2^32 for every finite amax.
      const std::uint32_t r = amax_bits + (std::uint32_t{1} << (22 - el.mbits));
      e = static_cast<int>(r >> 23) - 127 - el.emax;
      break;
    }
    case e8m0_scale_mode::rceil:
      if (amax_bits != 0u) {
        // Smallest k with amax <= max * 2^k: amax = sa * 2^ea, max = sm * 2^em (24-bit
        // significands), so k = ea - em, plus one when sa > sm.
        std::uint32_t sa = 0;
        std::uint32_t sm = 0;
        int ea = 0;
        int em = 0;
        normalise(amax_bits, sa, ea);
        normalise(float_bits(el.max_pos), sm, em);
        e = ea - em + (sa > sm ? 1 : 0);
      }
      break;
  }
  e = e < lo ? lo : e;
  return e > 127 ? 127 : e;
}

}  // namespace detail

/// The E8M0 scale an OCP MX block with largest magnitude |amax| gets (standard E8M0 range);
/// NaN (code 0xFF) when amax is Inf or NaN, as OCP MX specifies.
///
///     auto x = quark::choose_e8m0_scale<quark::float4_e2m1fn>(7.0f);  // 2^(2-2) = 1.0
///     auto y = quark::choose_e8m0_scale<quark::float4_e2m1fn>(7.0f,
///     quark::e8m0_scale_mode::rceil);
///     // y = 2^ceil(log2(7/6)) = 2.0
template <class Element>
  requires detail::is_mx_element_v<Element>
constexpr float8_e8m0fnu choose_e8m0_scale(float amax,
                                           e8m0_scale_mode mode = e8m0_scale_mode::floor) noexcept {
  const std::uint32_t a = detail::float_bits(amax) & 0x7FFFFFFFu;
  if (a >= 0x7F800000u)
    return float8_e8m0fnu::from_bits(0xFF);
  const int e =
      detail::mx_shared_exponent(a, mx_element_info_v<Element>, mode, compat_mode::standard);
  return float8_e8m0fnu::from_bits(static_cast<std::uint8_t>(e + 127));
}

/// The 8-bit shared exponent of a BFP or MX4/6/9 block with largest magnitude |amax|: the biased
/// float32 exponent field of amax (0 for zero and float32 subnormals), stored as an E8M0 code;
/// NaN (0xFF) when amax is Inf or NaN. The block's largest element lies in [2^E, 2^(E+1)).
///
///     auto s = quark::choose_shared_exponent(100.0f);  // code 133: E = 6
constexpr float8_e8m0fnu choose_shared_exponent(float amax) noexcept {
  const std::uint32_t a = detail::float_bits(amax) & 0x7FFFFFFFu;
  return float8_e8m0fnu::from_bits(static_cast<std::uint8_t>(a >= 0x7F800000u ? 0xFFu : a >> 23));
}

/// The shared scale of one block of format B, from the block's largest magnitude: for OCP MX
/// the E8M0 scale chosen by `mode`; for BFP and MX4/6/9 the shared exponent (mode is ignored).
///
///     auto s = quark::choose_scale<quark::mxfp8_e4m3>(1.0f);  // 2^-8
template <block_format_type B>
constexpr float8_e8m0fnu choose_scale(float amax,
                                      e8m0_scale_mode mode = e8m0_scale_mode::floor) noexcept {
  if constexpr (block_traits<B>::family == block_family::ocp_mx) {
    return choose_e8m0_scale<typename block_traits<B>::element_type>(amax, mode);
  } else {
    return choose_shared_exponent(amax);
  }
}

}  // namespace quark
