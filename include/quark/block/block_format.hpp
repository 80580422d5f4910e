// SPDX-License-Identifier: MIT
// Block formats: a descriptor bundle block_format<Element, Scale, BlockSize, SubBlock> plus the
// block_traits customization point that quant/ and algo/ code depends on. Three families share it:
// OCP MX v1.0 (minifloat or int8 elements, one E8M0 scale per block), BFP as AMD Quark defines it
// (sign-magnitude integer elements, one 8-bit shared exponent per block) and the MX4/MX6/MX9
// shared-micro-exponent formats of arXiv 2302.08007 (BFP plus a 1-bit exponent offset per pair).
// The bits-per-element figure of every alias is a constexpr fact checked by static_asserts.
#pragma once

#include <concepts>
#include <cstdint>
#include <type_traits>

#include <quark/core/bit.hpp>
#include <quark/core/concepts.hpp>
#include <quark/core/policy.hpp>
#include <quark/dtype/formats.hpp>
#include <quark/dtype/traits.hpp>

namespace quark {

/// How an OCP MX block chooses its shared E8M0 exponent from the block's largest magnitude amax
/// (emax = unbiased exponent of the element's largest normal, max = the element's largest value).
enum class e8m0_scale_mode : std::uint8_t {
  floor,  ///< 2^(floor(log2 amax) - emax): OCP MX v1.0 and Quark's ONNX op (default)
  ceil,   ///< 2^(ceil(log2 amax) - emax)
  even,   ///< round amax to the element's mantissa width (half up) first, then floor: Quark torch
  rceil,  ///< 2^ceil(log2(amax / max)): NVIDIA/cuBLAS; never saturates an element
};

/// Which of two documented behaviours a block format follows where AMD Quark's kernels depart
/// from the format's own specification (docs/compatibility.md, "Block formats").
enum class compat_mode : std::uint8_t {
  standard,  ///< the specification: OCP MX NaN blocks and E8M0 range, MX4/6/9 clamp
  quark,     ///< bit-compatible with Quark's kernels (Inf/NaN pass-through, no clamps)
};

/// The sub-block of the shared-micro-exponent formats: `size` consecutive elements share a
/// `shift_bits`-bit exponent offset below the block's shared exponent. {0, 0}: no sub-blocks.
struct sub_block {
  int size = 0;
  int shift_bits = 0;
  constexpr bool operator==(const sub_block&) const = default;
};

/// The block format families.
enum class block_family : std::uint8_t { ocp_mx, bfp, micro_exponent };

/// The element of BFP and MX4/6/9 blocks: a sign bit above `MagnitudeBits` magnitude bits. The
/// value is sign * magnitude * 2^(shared exponent - MagnitudeBits + 1) (one quantum).
///
///     auto e = quark::sign_magnitude<7>::from_bits(0x85);  // -5 quanta
///     int q = e.value();                                   // -5
template <int MagnitudeBits>
class sign_magnitude {
  static_assert(MagnitudeBits >= 1 && MagnitudeBits <= 15,
                "sign_magnitude: 1..15 magnitude bits (the code must fit 16 bits)");

 public:
  using storage_type = detail::uint_for_bits<MagnitudeBits + 1>;
  static constexpr int magnitude_bits = MagnitudeBits;
  static constexpr int bits = MagnitudeBits + 1;
  static constexpr int max_magnitude = (1 << MagnitudeBits) - 1;

  constexpr sign_magnitude() noexcept = default;
  static constexpr sign_magnitude from_bits(storage_type b) noexcept {
    sign_magnitude s;
    s.bits_ = b;
    return s;
  }
  /// Builds from a signed quantum count; |q| must be at most max_magnitude.
  static constexpr sign_magnitude from_value(int q) noexcept {
    const bool neg = q < 0;
    const auto mag = static_cast<std::uint32_t>(neg ? -q : q);
    return from_bits(static_cast<storage_type>(mag | (neg ? (1u << MagnitudeBits) : 0u)));
  }
  constexpr storage_type to_bits() const noexcept { return bits_; }
  constexpr int magnitude() const noexcept {
    return static_cast<int>(static_cast<std::uint32_t>(bits_) & ((1u << MagnitudeBits) - 1u));
  }
  constexpr bool is_negative() const noexcept { return ((bits_ >> MagnitudeBits) & 1u) != 0u; }
  /// The signed quantum count (a negative zero code reads as 0).
  constexpr int value() const noexcept { return is_negative() ? -magnitude() : magnitude(); }

 private:
  storage_type bits_{};
};

namespace detail {
template <class T>
inline constexpr bool is_sign_magnitude_v = false;
template <int M>
inline constexpr bool is_sign_magnitude_v<sign_magnitude<M>> = true;

/// Magnitude bits of a sign_magnitude element, 0 for any other element type. (A plain
/// `!is_sign_magnitude_v<E> || E::magnitude_bits <= 22` is ill-formed for minifloat elements:
/// `||` does not stop the lookup, so block_format<float4_e2m1fn, ...> failed to instantiate.)
template <class T>
inline constexpr int magnitude_bits_v = 0;
template <int M>
inline constexpr int magnitude_bits_v<sign_magnitude<M>> = M;

/// OCP MX element types: the five OCP minifloats and MXINT8's two's complement int8.
template <class T>
inline constexpr bool is_mx_element_v =
    std::same_as<T, float8_e4m3fn> || std::same_as<T, float8_e5m2> ||
    std::same_as<T, float6_e3m2fn> || std::same_as<T, float6_e2m3fn> ||
    std::same_as<T, float4_e2m1fn> || std::same_as<T, std::int8_t>;
}  // namespace detail

/// A block format descriptor: `BlockSize` elements of type `Element` share one `Scale`
/// (float8_e8m0fnu for every family here); `Sub` adds per-sub-block micro-exponents.
///
///     using my_mxfp4_16 = quark::block_format<quark::float4_e2m1fn, quark::float8_e8m0fnu, 16>;
///     static_assert(quark::block_traits<my_mxfp4_16>::bits_per_element == 4.5);
template <class Element, class Scale, int BlockSize, sub_block Sub = sub_block{}>
struct block_format {
  static_assert(BlockSize >= 1, "block_format: the block size must be positive");
  static_assert(std::same_as<Scale, float8_e8m0fnu>,
                "block_format: the shared scale is an 8-bit exponent (float8_e8m0fnu)");
  static_assert(detail::is_mx_element_v<Element> || detail::is_sign_magnitude_v<Element>,
                "block_format: elements are OCP MX element types (float8_e4m3fn, float8_e5m2, "
                "float6_e3m2fn, float6_e2m3fn, float4_e2m1fn, std::int8_t) or sign_magnitude<M>");
  static_assert(Sub.size == 0 || detail::is_sign_magnitude_v<Element>,
                "block_format: sub-blocks (micro-exponents) need sign_magnitude elements");
  static_assert(Sub.size == 0 || (Sub.size >= 1 && BlockSize % Sub.size == 0 &&
                                  Sub.shift_bits >= 1 && Sub.shift_bits <= 7),
                "block_format: the sub-block size divides the block size; 1..7 shift bits");
  static_assert(detail::magnitude_bits_v<Element> <= 22,
                "block_format: at most 22 magnitude bits (float32 has 24 significant bits)");
};

/// The customization point: primary template intentionally undefined.
template <class B>
struct block_traits;

template <class Element, class Scale, int BlockSize, sub_block Sub>
struct block_traits<block_format<Element, Scale, BlockSize, Sub>> {
  using element_type = Element;
  using scale_type = Scale;
  static constexpr int block_size = BlockSize;
  static constexpr int sub_block_size = Sub.size;
  static constexpr int sub_block_shift_bits = Sub.shift_bits;
  static constexpr block_family family =
      detail::is_mx_element_v<Element>
          ? block_family::ocp_mx
          : (Sub.size == 0 ? block_family::bfp : block_family::micro_exponent);
  static constexpr int element_bits = [] {
    if constexpr (detail::is_sign_magnitude_v<Element>) {
      return Element::bits;
    } else {
      return dtype_traits<Element>::bits;
    }
  }();
  static constexpr int scale_bits = dtype_traits<Scale>::bits;
  /// Storage bits of one whole block: elements, the shared scale and the micro-exponents.
  static constexpr int block_bits = BlockSize * element_bits + scale_bits +
                                    (Sub.size == 0 ? 0 : (BlockSize / Sub.size) * Sub.shift_bits);
  /// Average storage bits per element (exact for these formats).
  static constexpr double bits_per_element =
      static_cast<double>(block_bits) / static_cast<double>(BlockSize);
};

/// A complete block_traits specialization.
template <class B>
concept block_format_type = requires {
  typename block_traits<B>::element_type;
  typename block_traits<B>::scale_type;
  { block_traits<B>::block_size } -> std::convertible_to<int>;
  { block_traits<B>::family } -> std::convertible_to<block_family>;
};

/// A block format of the given family.
template <class B, block_family F>
concept block_format_of = block_format_type<B> &&(block_traits<B>::family == F);

}  // namespace quark
