// SPDX-License-Identifier: MIT
// Bit-level helpers shared by every format: the smallest unsigned storage for N bits, masks,
// sign extension and exact powers of two built from bits (constexpr, no libm).
#pragma once

#include <bit>
#include <cstdint>
#include <type_traits>

namespace quark::detail {

/// Smallest unsigned integer type that holds `Bits` bits (1..64).
template <int Bits>
using uint_for_bits = std::conditional_t<
    (Bits <= 8), std::uint8_t,
    std::conditional_t<(Bits <= 16), std::uint16_t,
                       std::conditional_t<(Bits <= 32), std::uint32_t, std::uint64_t>>>;

/// Mask of the low `n` bits (n in 0..32).
constexpr std::uint32_t low_mask(int n) noexcept {
  return n >= 32 ? 0xFFFFFFFFu : ((std::uint32_t{1} << n) - 1u);
}

/// Sign-extends the low `bits` bits of `v`.
constexpr std::int32_t sign_extend(std::uint32_t v, int bits) noexcept {
  const std::uint32_t m = std::uint32_t{1} << (bits - 1);
  v &= low_mask(bits);
  return static_cast<std::int32_t>((v ^ m)) - static_cast<std::int32_t>(m);
}

constexpr std::uint32_t float_bits(float f) noexcept {
  return std::bit_cast<std::uint32_t>(f);
}
constexpr float bits_float(std::uint32_t u) noexcept {
  return std::bit_cast<float>(u);
}

/// 2^e as a double, exact for e in [-1074, 1023] (subnormal doubles included).
constexpr double exp2i(int e) noexcept {
  if (e >= -1022) {
    return std::bit_cast<double>(static_cast<std::uint64_t>(e + 1023) << 52);
  }
  return std::bit_cast<double>(std::uint64_t{1} << (e + 1074));
}

/// 2^e as a float, exact for e in [-149, 127]; 0 below, +Inf above.
constexpr float exp2f_exact(int e) noexcept {
  if (e > 127)
    return std::bit_cast<float>(0x7F800000u);
  if (e >= -126)
    return std::bit_cast<float>(static_cast<std::uint32_t>(e + 127) << 23);
  if (e >= -149)
    return std::bit_cast<float>(std::uint32_t{1} << (e + 149));
  return 0.0f;
}

/// floor(log2(|x|)) for finite non-zero float x, exact (subnormals included).
constexpr int ilogb_exact(float x) noexcept {
  const std::uint32_t a = float_bits(x) & 0x7FFFFFFFu;
  const int e = static_cast<int>(a >> 23);
  if (e != 0)
    return e - 127;
  return -127 - std::countl_zero(a << 9);  // subnormal: position of the leading one
}

}  // namespace quark::detail
