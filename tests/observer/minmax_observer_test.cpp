// SPDX-License-Identifier: MIT
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include <doctest/doctest.h>

#include <quark/observer/minmax_observer.hpp>
#include <quark/observer/per_channel.hpp>

namespace {
std::vector<float> make_normal(std::size_t n, unsigned seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.5f, 2.0f);
  std::vector<float> v(n);
  for (float& x : v)
    x = d(g);
  return v;
}
}  // namespace

static_assert(quark::observer<quark::minmax_observer>);
static_assert(quark::mergeable_observer<quark::minmax_observer>);
static_assert(quark::observer<quark::moving_average_observer>);
static_assert(!quark::mergeable_observer<quark::moving_average_observer>);

TEST_CASE("minmax: streaming equals batch for 1, 7 and 64 batches, exactly") {
  const auto v = make_normal(100003, 1);
  float mn = v[0], mx = v[0];
  for (float x : v) {
    mn = std::min(mn, x);
    mx = std::max(mx, x);
  }
  for (std::size_t parts : {1u, 7u, 64u}) {
    quark::minmax_observer obs;
    const std::size_t step = (v.size() + parts - 1) / parts;
    for (std::size_t i = 0; i < v.size(); i += step) {
      obs.observe(std::span<const float>(v).subspan(i, std::min(step, v.size() - i)));
    }
    CHECK(obs.stats().min == mn);
    CHECK(obs.stats().max == mx);
    CHECK(obs.stats().count == v.size());
  }
}

TEST_CASE("minmax: merge equals sequential") {
  const auto v = make_normal(5000, 2);
  quark::minmax_observer seq, a, b;
  std::span<const float> s(v);
  seq.observe(s);
  a.observe(s.first(1234));
  b.observe(s.subspan(1234));
  a.merge(b);
  CHECK(a.stats() == seq.stats());
}

TEST_CASE("minmax: empty, NaN, Inf and constant input") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  quark::minmax_observer obs;
  obs.observe({});
  CHECK_FALSE(obs.stats().has_values());
  std::vector<float> c(37, 5.0f);
  obs.observe(c);
  CHECK(obs.stats().min == 5.0f);
  CHECK(obs.stats().max == 5.0f);
  std::vector<float> w{1.0f, nan, -inf, 2.0f};
  obs.observe(w);
  CHECK(std::isnan(obs.stats().min));  // ORT propagates NaN
  quark::minmax_observer ign{quark::nan_policy::ignore};
  ign.observe(w);
  CHECK(ign.stats().min == -inf);
  CHECK(ign.stats().max == 2.0f);
  CHECK(ign.stats().nan_count == 1);
  std::vector<float> all_nan(20, nan);
  quark::minmax_observer only{quark::nan_policy::ignore};
  only.observe(all_nan);
  CHECK_FALSE(only.stats().has_values());
  CHECK(only.stats().nan_count == 20);
}

TEST_CASE("moving average: exponential with the documented constant") {
  quark::moving_average_observer obs{0.01f};
  std::vector<float> b1{-1.0f, 3.0f}, b2{-2.0f, 5.0f}, b3{0.5f, 1.0f};
  obs.observe(b1);
  CHECK(obs.stats().min == -1.0f);
  obs.observe(b2);
  CHECK(obs.stats().min == doctest::Approx(-1.01));
  CHECK(obs.stats().max == doctest::Approx(3.02));
  obs.observe(b3);
  CHECK(obs.stats().min == doctest::Approx(-1.01 + 0.01 * (0.5 + 1.01)));
  CHECK(obs.stats().max == doctest::Approx(3.02 + 0.01 * (1.0 - 3.02)));
  CHECK_THROWS_AS(quark::moving_average_observer{1.5f}, quark::config_error);
}

TEST_CASE("per_channel: axis 0 and last axis agree with direct reductions") {
  const auto v = make_normal(4 * 3 * 5, 3);
  std::size_t shape[] = {4, 3, 5};
  for (std::ptrdiff_t axis : {0, 1, 2, -1}) {
    const auto l = quark::axis_layout::from_shape(shape, axis);
    quark::per_channel_observer<quark::minmax_observer> pc{l.channels};
    pc.observe(v, shape, axis);
    for (std::size_t c = 0; c < l.channels; ++c) {
      float mn = std::numeric_limits<float>::infinity();
      for (std::size_t o = 0; o < l.outer; ++o)
        for (std::size_t i = 0; i < l.inner; ++i)
          mn = std::min(mn, v[(o * l.channels + c) * l.inner + i]);
      CHECK(pc[c].stats().min == mn);
    }
  }
  quark::per_channel_observer<quark::minmax_observer> bad{7};
  CHECK_THROWS_AS(bad.observe(v, shape, 0), quark::invalid_argument);
  CHECK_THROWS_AS(bad.observe(v, shape, 3), quark::invalid_argument);
}

TEST_CASE("per_group: blocks along an axis") {
  std::vector<float> v(2 * 10);
  for (std::size_t i = 0; i < v.size(); ++i)
    v[i] = static_cast<float>(i);
  std::size_t shape[] = {2, 10};
  quark::per_group_observer<quark::minmax_observer> last{4};
  last.observe(v, shape, 1);  // groups {0..3},{4..7},{8,9} per row
  REQUIRE(last.groups() == 6);
  CHECK(last[2].stats().min == 8.0f);
  CHECK(last[2].stats().max == 9.0f);
  CHECK(last[3].stats().min == 10.0f);
  quark::per_group_observer<quark::minmax_observer> first{2};
  first.observe(v, shape, 0);  // one group of 2 rows per column
  REQUIRE(first.groups() == 10);
  CHECK(first[3].stats().min == 3.0f);
  CHECK(first[3].stats().max == 13.0f);
  std::size_t other[] = {4, 5};
  CHECK_THROWS_AS(first.observe(v, other, 0), quark::invalid_argument);
}
