// SPDX-License-Identifier: MIT
// A histogram derived from another one's last batch (histogram_observer::observe_mapped) must
// leave exactly the state that observing the mapped values would: the oracle here is observe()
// on y = f(x) itself, batch after batch, for the float maps the calibration derives (x * c,
// x + c, x / c and chains of them, increasing and decreasing), on data that puts values on,
// next to and between the edges of both histograms, with range growth, zeros of both signs and
// both ways of observing x (one observe() call, and in parts on several threads' worth of
// spans). Where observe_mapped declines, y is observed as usual, so the comparison covers the
// fallback too; the test also requires that most batches are derived, so it fails if
// derivation never happens.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <functional>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include <quark/observer/histogram_observer.hpp>

#include "support/checks.hpp"

using quark::histogram_data;
using quark::histogram_map;
using quark::histogram_mode;
using quark::histogram_observer;
using quark::histogram_options;
using quark::test::error_id;

namespace {

histogram_options extend_options(double margin) {
  return {.mode = histogram_mode::signed_extend,
          .num_bins = 2048,
          .non_finite = quark::non_finite_policy::to_finite,
          .derive_margin = margin};
}

struct named_map {
  std::string name;
  std::function<float(float)> f;
  /// Whether most batches can be derived: not when many x share one y (a y ulp is wider than
  /// the margin, so an x bin's values may land in two y bins).
  bool derivable = true;
};

/// The maps of the calibration's element-wise chains, each step one float operation.
std::vector<named_map> maps() {
  return {
      {"x * 0.37", [](float v) { return v * 0.37f; }},
      {"x * -1.7", [](float v) { return v * -1.7f; }},
      {"x + 2.5", [](float v) { return v + 2.5f; }},
      {"x / 6", [](float v) { return v / 6.0f; }},
      {"x * 1.3 + -0.4", [](float v) { return v * 1.3f + -0.4f; }},
      {"(x * 0.9 / 6) * 1.1 + 0.2",
       [](float v) {
         const float a = v * 0.9f;
         const float b = a / 6.0f;
         const float c = b * 1.1f;
         return c + 0.2f;
       }},
      {"x - 1000 (many x per y)", [](float v) { return v - 1000.0f; }, false},
      {"x * 1e-3", [](float v) { return v * 1e-3f; }},
  };
}

/// One batch of `n` values: normal data clipped to [-5 s, 5.5 s] and the two ends themselves
/// (so only a batch with another `s` grows the range), plus (once x has edges) every x edge as a
/// float with four float neighbours on each side, zeros of both signs and a run of one value.
std::vector<float> batch(std::size_t n, float s, const std::vector<double>& x_edges,
                         std::mt19937& g, bool all_edges = false) {
  std::normal_distribution<float> d(0.3f, 1.5f * s);
  std::vector<float> v(n);
  for (float& x : v)
    x = std::clamp(d(g), -5.0f * s, 5.5f * s);
  v[0] = -5.0f * s;
  v[1] = 5.5f * s;
  const double lo = x_edges.empty() ? 0.0 : x_edges.front();
  const double hi = x_edges.empty() ? 0.0 : x_edges.back();
  // Every 7th edge (about 2,600 values near an edge: all of them flagged, so they fit in the
  // flag log; a batch whose log overflows is observed as usual, also compared below).
  for (std::size_t j = 0; j < x_edges.size(); j += (x_edges.size() > 64 && !all_edges ? 7u : 1u)) {
    const double e = x_edges[j];
    float f = static_cast<float>(e);
    for (int k = 0; k < 4; ++k)
      f = std::nextafter(f, -std::numeric_limits<float>::infinity());
    for (int k = 0; k < 9; ++k, f = std::nextafter(f, std::numeric_limits<float>::infinity())) {
      if (static_cast<double>(f) >= lo && static_cast<double>(f) <= hi)
        v.push_back(f);  // inside x's range: a batch that grows is another case
    }
  }
  for (int k = 0; k < 50; ++k) {
    v.push_back(0.0f);
    v.push_back(-0.0f);
    v.push_back(0.25f);
  }
  std::shuffle(v.begin(), v.end(), g);
  return v;
}

/// Observes `x` in two parts, each pulling every other span of 4096 values (the calibration's
/// way on two threads).
void observe_in_parts(histogram_observer& h, std::span<const float> x) {
  static constexpr std::size_t span = 4096;
  quark::histogram_pieces b = h.begin_pieces(2);
  auto source = [&](std::size_t k) {
    return [x, at = k * span]() mutable -> std::span<const float> {
      if (at >= x.size())
        return {};
      const auto s = x.subspan(at, std::min(span, x.size() - at));
      at += 2 * span;
      return s;
    };
  };
  for (std::size_t k = 0; k < 2; ++k)
    h.observe_piece(b, k, source(k));
  if (h.grow_pieces(b)) {
    for (std::size_t k = 0; k < 2; ++k)
      h.finish_piece(b, k, source(k));
  }
  h.add_pieces(b);
}

}  // namespace

TEST_CASE("observe_mapped gives the state of observing f(x), batch after batch") {
  for (const named_map& m : maps()) {
    for (const bool parts : {false, true}) {
      CAPTURE(m.name);
      CAPTURE(parts);
      std::mt19937 g(7);
      histogram_observer x(extend_options(1e-3));
      histogram_observer y_derived(extend_options(0.0));
      histogram_observer y_ref(extend_options(0.0));
      histogram_map map;
      std::size_t derived = 0;
      const std::size_t batches = 14;
      for (std::size_t i = 0; i < batches; ++i) {
        CAPTURE(i);
        // Batches 5 and 9 are wider: they grow both ranges.
        const float sigma = i == 5 ? 1.5f : (i == 9 ? 2.0f : 1.0f);
        // Batch 11 puts values next to every edge of x: more than its flag log holds.
        const std::vector<float> xb = batch(20000 + 3001 * i, sigma, x.stats().edges, g, i == 11);
        std::vector<float> yb(xb.size());
        for (std::size_t j = 0; j < xb.size(); ++j)
          yb[j] = m.f(xb[j]);
        if (parts) {
          observe_in_parts(x, xb);
        } else {
          x.observe(xb);
        }
        if (y_derived.observe_mapped(x, m.f, map)) {
          ++derived;
        } else {
          y_derived.observe(yb);
        }
        y_ref.observe(yb);
        REQUIRE(y_derived.stats() == y_ref.stats());
      }
      // Batch 11 (its flag log overflows) falls back, and maybe a batch whose new edges make a
      // bin map that fails; the rest must be derived, growing batches and the first included.
      if (m.derivable)
        CHECK(derived >= batches - 3);
      const std::string label = m.name + (parts ? " (parts)" : "");
      MESSAGE(label << ": " << derived << " of " << batches << " batches derived");
    }
  }
}

TEST_CASE("observe_mapped declines what it cannot be sure of, the state unchanged") {
  std::mt19937 g(3);
  const auto f = [](float v) { return v * 0.5f; };
  auto mapped = [](const std::vector<float>& v, const auto& fn) {
    std::vector<float> out(v.size());
    for (std::size_t j = 0; j < v.size(); ++j)
      out[j] = fn(v[j]);
    return out;
  };
  histogram_observer x(extend_options(1e-3));
  histogram_observer y(extend_options(0.0));
  histogram_observer y_ref(extend_options(0.0));
  histogram_map map;
  const std::vector<float> b1 = batch(5000, 1.0f, {}, g);
  x.observe(b1);
  // The first batch of both: y's edges come from f of x's extrema, as from y's own.
  REQUIRE(y.observe_mapped(x, f, map));
  y_ref.observe(mapped(b1, f));
  REQUIRE(y.stats() == y_ref.stats());
  const histogram_data before = y.stats();
  // A batch with a NaN.
  std::vector<float> b2 = batch(5000, 0.5f, x.stats().edges, g);
  b2[17] = std::numeric_limits<float>::quiet_NaN();
  x.observe(b2);
  CHECK_FALSE(y.observe_mapped(x, f, map));
  // f(extreme) == 0: the sign of a zero extremum is not f's to tell.
  const std::vector<float> b3 = batch(5000, 0.5f, x.stats().edges, g);
  x.observe(b3);
  CHECK_FALSE(y.observe_mapped(
      x, [](float v) { return v * 0.0f + 0.1f - 0.1f; }, map));
  // A map whose y ulp is wider than the margin fails its check after growing y's range: the
  // growth is undone.
  histogram_map other;
  CHECK_FALSE(y.observe_mapped(
      x, [](float v) { return v * 3.0f - 1000.0f; }, other));
  CHECK(y.stats() == before);
  // A source without a margin keeps nothing.
  histogram_observer plain(extend_options(0.0));
  plain.observe(b1);
  plain.observe(b3);
  CHECK_FALSE(y.observe_mapped(plain, f, map));
  CHECK(y.stats() == before);
  // And b3 through x is derived: the same state as observing f(b3).
  REQUIRE(y.observe_mapped(x, f, map));
  y_ref = histogram_observer(extend_options(0.0));  // y did not take b2 (its NaN)
  y_ref.observe(mapped(b1, f));
  y_ref.observe(mapped(b3, f));
  CHECK(y.stats() == y_ref.stats());
}

TEST_CASE("a growth observe(y) would refuse is declined, and observe(y) names it") {
  // y allows no growth beyond its first batch's 2048 bins: f of a wider batch of x needs more.
  std::mt19937 g(5);
  const auto f = [](float v) { return v * 0.5f; };
  histogram_observer x(extend_options(1e-3));
  histogram_options yo = extend_options(0.0);
  yo.max_bins = 2048;
  histogram_observer y(yo);
  histogram_map map;
  x.observe(batch(5000, 1.0f, {}, g));
  REQUIRE(y.observe_mapped(x, f, map));
  const histogram_data before = y.stats();
  const std::vector<float> wide = batch(5000, 3.0f, {}, g);
  x.observe(wide);
  CHECK_FALSE(y.observe_mapped(x, f, map));
  CHECK(y.stats() == before);
  std::vector<float> mapped(wide.size());
  for (std::size_t j = 0; j < wide.size(); ++j)
    mapped[j] = f(wide[j]);
  CHECK(error_id([&] { y.observe(mapped); }) == "quark.calib.histogram_too_large");
}

TEST_CASE("derive_margin is checked") {
  const std::string id = "quark.calib.bad_option";
  auto make = [](histogram_options o) { return [o] { histogram_observer h(o); }; };
  CHECK(error_id(make({.mode = histogram_mode::absolute, .derive_margin = 1e-4})) == id);
  CHECK(error_id(make({.mode = histogram_mode::signed_extend, .derive_margin = 0.5})) == id);
  CHECK(error_id(make({.mode = histogram_mode::signed_extend, .derive_margin = -1.0})) == id);
  CHECK(error_id(make({.mode = histogram_mode::signed_extend,
                       .lump_percentile = 99.9,
                       .derive_margin = 1e-4})) == id);
  CHECK(error_id(make({.mode = histogram_mode::signed_extend, .derive_margin = 1e-4})) == "none");
}
