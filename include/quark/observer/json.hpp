// SPDX-License-Identifier: MIT
// JSON serialisation of observer states and calibrated ranges (SaveAndRestore: a calibration can
// be saved, restored, merged and continued). This is the only quark header that includes
// nlohmann/json; the observers themselves depend on the standard library only.
// Non-finite floats are written as the strings "inf", "-inf" and "nan" (JSON has no such
// numbers); doubles and 64-bit counts round-trip exactly.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include <quark/calib/calib_result.hpp>
#include <quark/observer/histogram_observer.hpp>
#include <quark/observer/minmax_observer.hpp>
#include <quark/observer/per_channel.hpp>

namespace quark {

namespace detail {
inline nlohmann::json float_to_json(double v) {
  if (std::isnan(v))
    return "nan";
  if (std::isinf(v))
    return v > 0 ? "inf" : "-inf";
  return v;
}
inline double float_from_json(const nlohmann::json& j) {
  if (j.is_string()) {
    const auto s = j.get<std::string>();
    if (s == "nan")
      return std::numeric_limits<double>::quiet_NaN();
    if (s == "inf")
      return std::numeric_limits<double>::infinity();
    if (s == "-inf")
      return -std::numeric_limits<double>::infinity();
    throw_invalid("quark.calib.bad_json", "unexpected float string '" + s + "'");
  }
  return j.get<double>();
}
inline float f32_from_json(const nlohmann::json& j) {
  return static_cast<float>(float_from_json(j));
}
/// An integer field that must hold a JSON integer within T's range. nlohmann's get<T>() casts
/// a JSON float such as 1e300 (undefined behaviour) and wraps 2^40 into an int silently; a
/// calibration file is user input, so either is an error naming the field.
template <class T>
T int_from_json(const nlohmann::json& j, const char* field) {
  bool ok = false;
  T v{};
  if (j.is_number_unsigned()) {
    const auto u = j.get<std::uint64_t>();
    ok = std::in_range<T>(u);
    v = static_cast<T>(u);
  } else if (j.is_number_integer()) {
    const auto i = j.get<std::int64_t>();
    ok = std::in_range<T>(i);
    v = static_cast<T>(i);
  }
  if (!ok) {
    throw_invalid("quark.calib.bad_json", std::string("'") + field + "' must be an integer in [" +
                                              std::to_string(std::numeric_limits<T>::min()) + ", " +
                                              std::to_string(std::numeric_limits<T>::max()) +
                                              "], got " + j.dump());
  }
  return v;
}
/// An enumerator stored as its integer: 0 .. last.
template <class E>
E enum_from_json(const nlohmann::json& j, const char* field, E last) {
  const int v = int_from_json<int>(j, field);
  if (v < 0 || v > static_cast<int>(last)) {
    throw_invalid("quark.calib.bad_json", std::string("'") + field + "' must be in 0.." +
                                              std::to_string(static_cast<int>(last)) + ", got " +
                                              std::to_string(v));
  }
  return static_cast<E>(v);
}
}  // namespace detail

/// ```cpp
/// nlohmann::json j = obs;                        // any quark observer or calibrated_range
/// auto back = j.get<quark::minmax_observer>();
/// ```
inline void to_json(nlohmann::json& j, const range_stats& s) {
  j = {{"min", detail::float_to_json(static_cast<double>(s.min))},
       {"max", detail::float_to_json(static_cast<double>(s.max))},
       {"count", s.count},
       {"nan_count", s.nan_count}};
}
inline void from_json(const nlohmann::json& j, range_stats& s) {
  s.min = detail::f32_from_json(j.at("min"));
  s.max = detail::f32_from_json(j.at("max"));
  s.count = detail::int_from_json<std::uint64_t>(j.at("count"), "count");
  s.nan_count = detail::int_from_json<std::uint64_t>(j.at("nan_count"), "nan_count");
}

inline void to_json(nlohmann::json& j, const minmax_observer& o) {
  j = {{"type", "minmax"},
       {"stats", o.state().stats},
       {"nan_policy", static_cast<int>(o.state().nan)}};
}
inline void from_json(const nlohmann::json& j, minmax_observer& o) {
  minmax_observer::state_type s;
  s.stats = j.at("stats").get<range_stats>();
  s.nan = detail::enum_from_json(j.at("nan_policy"), "nan_policy", nan_policy::ignore);
  o = minmax_observer{s};
}

inline void to_json(nlohmann::json& j, const moving_average_observer& o) {
  const auto& s = o.state();
  j = {{"type", "moving_average"},
       {"stats", s.stats},
       {"constant", static_cast<double>(s.constant)},
       {"batches", s.batches},
       {"nan_policy", static_cast<int>(s.nan)}};
}
inline void from_json(const nlohmann::json& j, moving_average_observer& o) {
  moving_average_observer::state_type s;
  s.stats = j.at("stats").get<range_stats>();
  s.constant = static_cast<float>(j.at("constant").get<double>());
  s.batches = detail::int_from_json<std::uint64_t>(j.at("batches"), "batches");
  s.nan = detail::enum_from_json(j.at("nan_policy"), "nan_policy", nan_policy::ignore);
  o = moving_average_observer{s};
}

inline void to_json(nlohmann::json& j, const histogram_observer& o) {
  const histogram_options& opt = o.options();
  const histogram_data& d = o.state();
  j = {{"type", "histogram"},      {"mode", static_cast<int>(d.mode)},
       {"num_bins", opt.num_bins}, {"non_finite", static_cast<int>(opt.non_finite)},
       {"max_bins", opt.max_bins}, {"range", d.range},
       {"threshold", d.threshold}, {"edges", d.edges},
       {"counts", d.counts}};
  if (opt.lump_percentile > 0.0 || d.lump_end != 0) {
    j["lump_percentile"] = opt.lump_percentile;
    j["lump_tail_share"] = opt.lump_tail_share;
    j["lump_min_values"] = opt.lump_min_values;
    j["lump_begin"] = d.lump_begin;
    j["lump_end"] = d.lump_end;
  }
}
inline void from_json(const nlohmann::json& j, histogram_observer& o) {
  histogram_options opt;
  opt.mode = detail::enum_from_json(j.at("mode"), "mode", histogram_mode::signed_extend);
  opt.num_bins = detail::int_from_json<std::size_t>(j.at("num_bins"), "num_bins");
  opt.non_finite =
      detail::enum_from_json(j.at("non_finite"), "non_finite", non_finite_policy::to_finite);
  opt.max_bins = detail::int_from_json<std::size_t>(j.at("max_bins"), "max_bins");
  opt.lump_percentile = j.value("lump_percentile", 0.0);
  opt.lump_tail_share = j.value("lump_tail_share", opt.lump_tail_share);
  if (j.contains("lump_min_values"))
    opt.lump_min_values =
        detail::int_from_json<std::size_t>(j.at("lump_min_values"), "lump_min_values");
  histogram_data d;
  d.mode = opt.mode;
  d.range = j.at("range").get<range_stats>();
  d.threshold = j.at("threshold").get<double>();
  d.edges = j.at("edges").get<std::vector<double>>();
  for (const auto& c : j.at("counts"))
    d.counts.push_back(detail::int_from_json<std::uint64_t>(c, "counts"));
  if (j.contains("lump_begin"))
    d.lump_begin = detail::int_from_json<std::size_t>(j.at("lump_begin"), "lump_begin");
  if (j.contains("lump_end"))
    d.lump_end = detail::int_from_json<std::size_t>(j.at("lump_end"), "lump_end");
  if (!d.counts.empty() && d.edges.size() != d.counts.size() + 1) {
    detail::throw_invalid("quark.calib.bad_json", "histogram edges/counts sizes disagree");
  }
  if (d.lump_end != 0 && (d.lump_end > d.counts.size() || d.lump_begin >= d.lump_end ||
                          d.mode == histogram_mode::signed_extend ||
                          (d.mode == histogram_mode::absolute && d.lump_begin != 0))) {
    detail::throw_invalid("quark.calib.bad_json", "histogram lumped bins outside its bins");
  }
  o = histogram_observer{opt, std::move(d)};
}

/// Per-channel observers: an array of the channels' states.
template <observer O>
void to_json(nlohmann::json& j, const per_channel_observer<O>& pc) {
  nlohmann::json arr = nlohmann::json::array();
  for (const O& o : pc.observers())
    arr.push_back(o);
  j = {{"type", "per_channel"}, {"observers", std::move(arr)}};
}
template <observer O>
void from_json(const nlohmann::json& j, per_channel_observer<O>& pc) {
  std::vector<O> v;
  for (const auto& e : j.at("observers"))
    v.push_back(e.get<O>());
  pc = per_channel_observer<O>(std::move(v));
}

inline void to_json(nlohmann::json& j, const calibrated_range& r) {
  j = {{"min", detail::float_to_json(static_cast<double>(r.min))},
       {"max", detail::float_to_json(static_cast<double>(r.max))}};
  if (!r.warnings.empty())
    j["warnings"] = r.warnings;
  if (r.pof2_position)
    j["pof2_position"] = *r.pof2_position;
  if (r.scale)
    j["scale"] = detail::float_to_json(static_cast<double>(*r.scale));
  if (r.zero_point)
    j["zero_point"] = *r.zero_point;
  if (r.origin == scale_origin::searched)
    j["origin"] = "searched";
}
inline void from_json(const nlohmann::json& j, calibrated_range& r) {
  r = calibrated_range{};
  r.min = detail::f32_from_json(j.at("min"));
  r.max = detail::f32_from_json(j.at("max"));
  if (j.contains("warnings"))
    r.warnings = j.at("warnings").get<std::vector<std::string>>();
  if (j.contains("pof2_position"))
    r.pof2_position = detail::int_from_json<int>(j.at("pof2_position"), "pof2_position");
  if (j.contains("scale"))
    r.scale = detail::f32_from_json(j.at("scale"));
  if (j.contains("zero_point"))
    r.zero_point = detail::int_from_json<std::int64_t>(j.at("zero_point"), "zero_point");
  if (j.contains("origin") && j.at("origin") == "searched")
    r.origin = scale_origin::searched;
}

}  // namespace quark
