// SPDX-License-Identifier: MIT
// Shared vocabulary of the observers: the `range_stats` aggregate, the NaN / Inf policies, the
// `observer` concept and the error helpers with stable ids. Observers consume calibration batches
// (std::span<const float>) and keep O(1) or O(bins) state, never the data (quark-spec §4.0).
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>

#include <quark/config.hpp>
#include <quark/core/error.hpp>

namespace quark {

/// Observed extrema of the data seen so far. `count` counts the values that entered the range
/// (NaN excluded), `nan_count` the NaN values. An observer that saw no value reports
/// `count == 0` and min = +Inf, max = -Inf.
///
/// ```cpp
/// quark::minmax_observer obs;
/// obs.observe(batch);
/// quark::range_stats s = obs.stats();   // s.min, s.max
/// ```
struct range_stats {
  float min = std::numeric_limits<float>::infinity();
  float max = -std::numeric_limits<float>::infinity();
  std::uint64_t count = 0;
  std::uint64_t nan_count = 0;

  /// True when at least one non-NaN value was observed.
  [[nodiscard]] constexpr bool has_values() const noexcept { return count > 0; }
  friend constexpr bool operator==(const range_stats&, const range_stats&) = default;
};

/// What an observer does with NaN values (quark-spec §3.7).
enum class nan_policy : std::uint8_t {
  propagate,  ///< ORT ReduceMin/ReduceMax: any NaN makes the reported range NaN (Quark's MinMax)
  ignore,     ///< NaN values are counted in `nan_count` and otherwise skipped (numpy nanmin)
};

/// What a histogram observer does with non-finite values (quark-spec §3.7, §4.7).
enum class non_finite_policy : std::uint8_t {
  reject_inf,  ///< NaN skipped; +-Inf throws "quark.calib.infinite_input" (numpy cannot bin Inf)
  skip,        ///< NaN and +-Inf skipped (counted in nan_count)
  to_finite,   ///< numpy nan_to_num: NaN -> 0, +-Inf -> +-FLT_MAX (Quark's pof2 MinMSE collector)
};

/// An observer consumes batches and reports a statistic; it is resettable.
///
/// ```cpp
/// static_assert(quark::observer<quark::minmax_observer>);
/// ```
template <class O>
concept observer = std::copy_constructible<O> &&
    requires(O o, const O co, std::span<const float> x) {
  o.observe(x);
  o.reset();
  co.stats();
};

/// An observer whose state can be combined with another one (parallel calibration).
template <class O>
concept mergeable_observer = observer<O> && requires(O o, const O other) {
  o.merge(other);
};

namespace detail {
[[noreturn]] inline void throw_invalid(const char* id, const std::string& what) {
  QUARK_THROW(invalid_argument(id, what));
}
[[noreturn]] inline void throw_config(const char* id, const std::string& what) {
  QUARK_THROW(config_error(id, what));
}
}  // namespace detail

}  // namespace quark
