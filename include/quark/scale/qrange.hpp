// SPDX-License-Identifier: MIT
// The three integer range tables of Quark's get_qmin_qmax_for_qType (quark-spec §1.2): the full
// range of the type, the "symmetric" table (only signed 8/16/32-bit types have one: -(2^(b-1)-1)
// .. 2^(b-1)-1; INT4 keeps -8..7) and the reduced table used by reduce_range (INT8 -64..64,
// INT16/INT32 likewise symmetric 7/15/31-bit, INT4 -4..3, unsigned 0..2^(b-1)-1). The 2- and
// 3-bit types are not in Quark's tables; they follow the INT4/UINT4 rows.
#pragma once

#include <cstdint>

#include <quark/core/concepts.hpp>
#include <quark/dtype/traits.hpp>

namespace quark {

/// Which of Quark's three integer range tables.
enum class range_table : std::uint8_t { full, symmetric, reduced };

/// An inclusive integer range [min, max].
struct int_range {
  std::int64_t min = 0;
  std::int64_t max = 0;
  friend constexpr bool operator==(int_range, int_range) = default;
};

/// True when Quark's symmetric table has a row for D (signed 8, 16 and 32 bits).
template <integral_data_type D>
inline constexpr bool has_symmetric_table_v =
    dtype_traits<D>::is_signed&& dtype_traits<D>::bits >= 8;

/// The [qmin, qmax] of table `t` for D.
///
///     static_assert(quark::quant_range<std::int8_t>(quark::range_table::reduced).min == -64);
template <integral_data_type D>
constexpr int_range quant_range(range_table t) noexcept {
  using tr = dtype_traits<D>;
  constexpr int b = tr::bits;
  const int_range full{tr::min_value, tr::max_value};
  switch (t) {
    case range_table::full:
      return full;
    case range_table::symmetric:
      return has_symmetric_table_v<D> ? int_range{-tr::max_value, tr::max_value} : full;
    case range_table::reduced:
      if constexpr (!tr::is_signed) {
        return {0, (std::int64_t{1} << (b - 1)) - 1};
      } else if constexpr (b >= 8) {
        const std::int64_t h = std::int64_t{1} << (b - 2);
        return {-h, h};
      } else {
        const std::int64_t h = std::int64_t{1} << (b - 2);
        return {-h, h - 1};
      }
  }
  return full;
}

}  // namespace quark
