// SPDX-License-Identifier: MIT
// quant_range for an element type known only at run time (a dtype_id read from a model or a
// configuration): the same three tables as quant_range<D>, reached through visit_dtype, so
// callers that hold a dtype_id never spell out a type's code range by hand.
#pragma once

#include <optional>

#include <quark/core/concepts.hpp>
#include <quark/dtype/dtype_id.hpp>
#include <quark/dtype/visit.hpp>
#include <quark/scale/qrange.hpp>

namespace quark {

/// The [qmin, qmax] of table `t` for the integer quantization type `id` (int2 ... int32,
/// uint2 ... uint32), or nullopt when `id` is not one (a float type, int64, bool, string, an
/// unknown value).
///
///     quark::quant_range(quark::dtype_id::int4)->min == -8
///     !quark::quant_range(quark::dtype_id::float16)
inline std::optional<int_range> quant_range(dtype_id id, range_table t = range_table::full) {
  switch (id) {
    case dtype_id::int2:
    case dtype_id::uint2:
    case dtype_id::int3:
    case dtype_id::uint3:
    case dtype_id::int4:
    case dtype_id::uint4:
    case dtype_id::int8:
    case dtype_id::uint8:
    case dtype_id::int16:
    case dtype_id::uint16:
    case dtype_id::int32:
    case dtype_id::uint32:
      break;
    default:
      return std::nullopt;
  }
  return visit_dtype(id, [t](auto tag) -> std::optional<int_range> {
    using D = typename decltype(tag)::type;
    if constexpr (integral_data_type<D>)
      return quant_range<D>(t);
    else
      return std::nullopt;
  });
}

}  // namespace quark
