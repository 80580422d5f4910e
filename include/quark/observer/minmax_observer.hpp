// SPDX-License-Identifier: MIT
// Min/max observers: the global extrema (ORT MinMaxCalibrater, quark-spec §4.1) and the
// exponential moving average of per-batch extrema (`CalibMovingAverage` with
// `CalibMovingAverageConstant`). Quark's code averages per-batch extrema arithmetically and uses
// the constant only for chunked re-merges (quark-spec §13.4); this project implements the
// documented exponential average (decision 1), see docs/compatibility.md.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <span>

#include <quark/observer/detail/minmax_kernel.hpp>
#include <quark/observer/range_stats.hpp>

namespace quark {

/// Global min and max over every observed batch, in O(1) memory.
///
/// ```cpp
/// quark::minmax_observer obs;                 // nan_policy::propagate, as ORT
/// for (auto batch : batches) obs.observe(batch);
/// auto [mn, mx, n, nans] = obs.stats();
/// ```
/// Merging two observers gives exactly the result of observing both streams in sequence.
class minmax_observer {
 public:
  /// Plain state, for serialisation (observer/json.hpp).
  struct state_type {
    range_stats stats;
    nan_policy nan = nan_policy::propagate;
    friend constexpr bool operator==(const state_type&, const state_type&) = default;
  };

  constexpr minmax_observer() noexcept = default;
  constexpr explicit minmax_observer(nan_policy nan) noexcept { state_.nan = nan; }
  constexpr explicit minmax_observer(const state_type& s) noexcept : state_(s) {}

  /// Folds one batch into the range. Never keeps `x`.
  void observe(std::span<const float> x) noexcept {
    const detail::minmax_partial p = detail::minmax_reduce(x);
    range_stats& s = state_.stats;
    s.min = p.min < s.min ? p.min : s.min;
    s.max = p.max > s.max ? p.max : s.max;
    s.nan_count += p.nan_count;
    s.count += x.size() - p.nan_count;
  }

  /// Combines the state of another observer (same policy) into this one.
  constexpr void merge(const minmax_observer& other) noexcept {
    range_stats& s = state_.stats;
    const range_stats& o = other.state_.stats;
    s.min = o.min < s.min ? o.min : s.min;
    s.max = o.max > s.max ? o.max : s.max;
    s.count += o.count;
    s.nan_count += o.nan_count;
  }

  constexpr void reset() noexcept { state_.stats = range_stats{}; }

  /// The range; under nan_policy::propagate a NaN seen anywhere makes min and max NaN.
  [[nodiscard]] constexpr range_stats stats() const noexcept {
    range_stats s = state_.stats;
    if (state_.nan == nan_policy::propagate && s.nan_count > 0) {
      s.min = std::numeric_limits<float>::quiet_NaN();
      s.max = std::numeric_limits<float>::quiet_NaN();
    }
    return s;
  }
  [[nodiscard]] constexpr const state_type& state() const noexcept { return state_; }

 private:
  state_type state_{};
};

/// Exponential moving average of the per-batch extrema:
/// `avg = avg + c * (batch - avg)` from the second batch on, `avg = batch` for the first one
/// (CalibMovingAverageConstant c, default 0.01, must lie in [0, 1]).
///
/// ```cpp
/// quark::moving_average_observer obs{0.01f};
/// obs.observe(batch1); obs.observe(batch2);
/// float lo = obs.stats().min;   // batch1.min + 0.01 * (batch2.min - batch1.min)
/// ```
/// Batches without a non-NaN value are skipped (nan_policy::ignore) or make the range NaN
/// (nan_policy::propagate). The result depends on how the data is split into batches by
/// definition, and two averages cannot be merged (the order of batches matters).
class moving_average_observer {
 public:
  struct state_type {
    range_stats stats;       ///< min/max hold the averages; count/nan_count the totals
    float constant = 0.01f;  ///< c
    std::uint64_t batches = 0;
    nan_policy nan = nan_policy::propagate;
    friend constexpr bool operator==(const state_type&, const state_type&) = default;
  };

  /// Throws config_error "quark.calib.bad_option" unless 0 <= c <= 1.
  explicit moving_average_observer(float constant = 0.01f, nan_policy nan = nan_policy::propagate) {
    if (!(constant >= 0.0f && constant <= 1.0f)) {
      detail::throw_config("quark.calib.bad_option",
                           "CalibMovingAverageConstant must lie in [0, 1]");
    }
    state_.constant = constant;
    state_.nan = nan;
  }
  explicit moving_average_observer(const state_type& s)
      : moving_average_observer(s.constant, s.nan) {
    state_ = s;
  }

  void observe(std::span<const float> x) noexcept {
    const detail::minmax_partial p = detail::minmax_reduce(x);
    range_stats& s = state_.stats;
    s.nan_count += p.nan_count;
    s.count += x.size() - p.nan_count;
    float lo = p.min;
    float hi = p.max;
    if (p.nan_count > 0 && state_.nan == nan_policy::propagate) {
      lo = hi = std::numeric_limits<float>::quiet_NaN();
    } else if (x.size() == p.nan_count) {
      return;  // nothing to average
    }
    if (state_.batches == 0) {
      s.min = lo;
      s.max = hi;
    } else {
      // Computed in double and rounded once, so the step is independent of FMA contraction.
      const auto c = static_cast<double>(state_.constant);
      const auto old_lo = static_cast<double>(s.min);
      const auto old_hi = static_cast<double>(s.max);
      s.min = static_cast<float>(old_lo + c * (static_cast<double>(lo) - old_lo));
      s.max = static_cast<float>(old_hi + c * (static_cast<double>(hi) - old_hi));
    }
    ++state_.batches;
  }

  constexpr void reset() noexcept {
    state_.stats = range_stats{};
    state_.batches = 0;
  }
  [[nodiscard]] constexpr range_stats stats() const noexcept { return state_.stats; }
  [[nodiscard]] constexpr const state_type& state() const noexcept { return state_; }

 private:
  state_type state_{};
};

}  // namespace quark
