// SPDX-License-Identifier: MIT
// A batch observed in pieces (histogram_observer::begin_pieces ... add_pieces) must leave exactly
// the state of one sequential observe(batch): the oracle here is observe() itself, over
// exhaustive small cases (values on the old and the new edges, NaN, the first batch, growth by
// many bins, every split point, empty pieces) and over large random batches that take the
// AVX-512 kernel and overflow the tail buffer.
#include <cmath>
#include <cstddef>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include <quark/core/error.hpp>
#include <quark/observer/histogram_observer.hpp>

using quark::histogram_mode;
using quark::histogram_observer;
using quark::histogram_options;
using quark::histogram_pieces;

namespace {

constexpr float nan_v = std::numeric_limits<float>::quiet_NaN();

histogram_options options_of(histogram_mode mode, std::size_t bins) {
  return {.mode = mode,
          .num_bins = bins,
          .non_finite = mode == histogram_mode::signed_extend
                            ? quark::non_finite_policy::to_finite
                            : quark::non_finite_policy::reject_inf};
}

/// A generator over some of the spans [cuts[i], cuts[i + 1]) of `x`, last to first: those
/// with i % parts == k (phase 1) or (i + 1) % parts == k (phase 2), so a part reads different
/// spans in the two phases and several spans each; nothing may depend on which or in what order.
struct span_source {
  std::span<const float> x;
  std::vector<std::size_t> chunks;  ///< indices into the cuts, in pulling order
  const std::vector<std::size_t>* cuts;
  std::size_t at = 0;
  std::span<const float> operator()() {
    while (at < chunks.size()) {
      const std::size_t i = chunks[at++];
      const auto c = x.subspan((*cuts)[i], (*cuts)[i + 1] - (*cuts)[i]);
      if (!c.empty())
        return c;  // an empty span would end the generator: skip empty chunks
    }
    return {};
  }
};

span_source source(std::span<const float> x, const std::vector<std::size_t>& cuts,
                   std::size_t parts, std::size_t k, std::size_t shift) {
  span_source s{x, {}, &cuts};
  for (std::size_t i = cuts.size() - 1; i-- > 0;) {
    if ((i + shift) % parts == k)
      s.chunks.push_back(i);
  }
  return s;
}

/// Observes `x` in `parts` parts made of the spans between `cuts` (from 0 to x.size()).
void observe_in_pieces(histogram_observer& h, std::span<const float> x,
                       const std::vector<std::size_t>& cuts, std::size_t parts, bool extrema_first,
                       histogram_pieces::tally& work) {
  histogram_pieces b = h.begin_pieces(parts, extrema_first);
  for (std::size_t k = parts; k-- > 0;)
    h.observe_piece(b, k, source(x, cuts, parts, k, 0));
  if (h.grow_pieces(b)) {
    for (std::size_t k = 0; k < parts; ++k)
      h.finish_piece(b, k, source(x, cuts, parts, k, 1));
  }
  h.add_pieces(b);
  work.tail += b.work().tail;
  work.binned += b.work().binned;
}

/// Every way to cut `n` values into 1 span, 2 spans (each cut point, empty ends included) and
/// 3 spans with an empty middle one.
std::vector<std::vector<std::size_t>> splits(std::size_t n) {
  std::vector<std::vector<std::size_t>> out{{0, n}};
  for (std::size_t c = 0; c <= n; ++c)
    out.push_back({0, c, n});
  out.push_back({0, n / 2, n / 2, n});
  return out;
}

}  // namespace

TEST_CASE("histogram pieces: every split of every small second batch equals observe()") {
  // First batch {0, 4} or {-4, 4}: 4 bins of width 1 or 2 on float-exact edges, so the pool
  // below holds values exactly on the old edges (0, 1, 4), on appended / regenerated edges
  // (5, 6, 8), far beyond them (40, 1e3: tens to a thousand new bins), below the first
  // edge of an |x| histogram (-0.5 -> 0.5 is inside; the first edge is 0), and NaN.
  const std::vector<float> pool{-1e3f, -40.0f, -5.0f, -4.0f, -0.5f, 0.0f, 1.0f,
                                3.75f, 4.0f,   4.5f,  5.0f,  6.0f,  8.0f, nan_v};
  histogram_pieces::tally work;
  std::size_t cases = 0;
  for (const auto mode : {histogram_mode::absolute, histogram_mode::signed_symmetric,
                          histogram_mode::signed_extend}) {
    CAPTURE(static_cast<int>(mode));
    histogram_observer start(options_of(mode, 4));
    const std::vector<float> first{mode == histogram_mode::absolute ? 0.0f : -4.0f, 4.0f};
    start.observe(first);
    for (const float a : pool) {
      for (const float b : pool) {
        for (const float c : pool) {
          const std::vector<float> batch{a, b, c};
          histogram_observer ref = start;
          ref.observe(batch);
          for (const auto& cuts : splits(batch.size())) {
            for (const std::size_t parts : {std::size_t{1}, std::size_t{2}, std::size_t{3}}) {
              for (const bool extrema_first : {false, true}) {
                histogram_observer h = start;
                observe_in_pieces(h, batch, cuts, parts, extrema_first, work);
                ++cases;
                if (h.stats() == ref.stats())
                  continue;  // (one doctest assertion per case would take most of the time)
                CAPTURE(a);
                CAPTURE(b);
                CAPTURE(c);
                CAPTURE(cuts.size());
                CAPTURE(parts);
                CAPTURE(extrema_first);
                REQUIRE(h.stats() == ref.stats());
              }
            }
          }
        }
      }
    }
  }
  CHECK(cases > 10000);
  // Both phase-2 actions were taken (so each is what the equality above proves).
  CHECK(work.tail > 0);
  CHECK(work.binned > 0);
}

TEST_CASE("histogram pieces: the first batch, NaN-only and empty batches equal observe()") {
  const std::vector<std::vector<float>> batches{
      {}, {nan_v, nan_v}, {2.0f, -3.0f, 0.0f, nan_v}, {nan_v}, {}, {7.0f}, {-7.5f, 0.25f}, {1.0f}};
  for (const auto mode : {histogram_mode::absolute, histogram_mode::signed_symmetric,
                          histogram_mode::signed_extend}) {
    for (const std::size_t bins : {std::size_t{1}, std::size_t{3}, std::size_t{16}}) {
      for (const bool extrema_first : {false, true}) {
        CAPTURE(static_cast<int>(mode));
        CAPTURE(bins);
        CAPTURE(extrema_first);
        histogram_observer ref(options_of(mode, bins));
        histogram_observer h = ref;
        histogram_pieces::tally work;
        for (const auto& batch : batches) {
          ref.observe(batch);
          const std::size_t n = batch.size();
          observe_in_pieces(h, batch, {0, n / 3, n / 2, n}, 2, extrema_first, work);
          REQUIRE(h.stats() == ref.stats());
        }
      }
    }
  }
}

TEST_CASE("histogram pieces: +-Inf throws as observe() does and leaves the state unchanged") {
  const std::vector<float> first{-1.0f, 2.0f};
  const std::vector<float> bad{0.5f, std::numeric_limits<float>::infinity(), 1.0f, 3.0f};
  for (const auto mode : {histogram_mode::absolute, histogram_mode::signed_symmetric}) {
    histogram_observer h(options_of(mode, 8));
    h.observe(first);
    histogram_observer ref = h;
    const histogram_observer before = h;
    std::string ref_id;
    try {
      ref.observe(bad);
    } catch (const quark::error& e) {
      ref_id = e.id();
    }
    CHECK(ref_id == "quark.calib.infinite_input");
    std::string id;
    const std::vector<std::size_t> cuts{0, 2, 4};
    histogram_pieces b = h.begin_pieces(2);
    h.observe_piece(b, 0, source(bad, cuts, 2, 0, 0));
    h.observe_piece(b, 1, source(bad, cuts, 2, 1, 0));
    try {
      (void)h.grow_pieces(b);
    } catch (const quark::error& e) {
      id = e.id();
    }
    CHECK(id == ref_id);
    CHECK(h.stats() == before.stats());
  }
}

TEST_CASE("histogram pieces: large growing batches (AVX-512 kernel, long tails) equal observe()") {
  // Batches of 100k values whose scale steps up and down: growth with tens of thousands of
  // values beyond the old last edge (the tail buffer fills many times), batches inside the range,
  // exact zeros (the kernel counts them apart), a NaN.
  std::mt19937 gen(7);
  std::vector<std::vector<float>> batches;
  for (const float scale : {1.0f, 2.0f, 1.5f, 6.0f, 0.5f, 6.0f, 40.0f}) {
    std::normal_distribution<float> d(0.1f, scale);
    std::vector<float> x(100000);
    for (float& v : x)
      v = d(gen);
    for (std::size_t i = 0; i < x.size(); i += 7)
      x[i] = 0.0f;
    x[12345] = nan_v;
    batches.push_back(std::move(x));
  }
  for (const auto mode : {histogram_mode::absolute, histogram_mode::signed_symmetric,
                          histogram_mode::signed_extend}) {
    for (const std::size_t parts : {std::size_t{2}, std::size_t{7}}) {
      CAPTURE(static_cast<int>(mode));
      CAPTURE(parts);
      histogram_observer ref(options_of(mode, 2048));
      histogram_observer h = ref;
      histogram_pieces::tally work;
      for (std::size_t i = 0; i < batches.size(); ++i) {
        const auto& batch = batches[i];
        ref.observe(batch);
        // 4 spans per part, as the calibration's chunks.
        std::vector<std::size_t> cuts;
        for (std::size_t k = 0; k <= 4 * parts; ++k)
          cuts.push_back(batch.size() * k / (4 * parts));
        observe_in_pieces(h, batch, cuts, parts, i % 2 == 1, work);
        REQUIRE(h.stats() == ref.stats());
      }
      if (mode == histogram_mode::absolute)
        CHECK(work.tail > 0);
    }
  }
}

TEST_CASE("add_pieces refuses parts made before the histogram grew (quark.calib.pieces)") {
  // Parts counted on 8 bins, then the observer grows on its own (another batch through
  // observe()): the parts no longer match the edges, and adding them would misplace counts.
  histogram_observer h(options_of(histogram_mode::absolute, 8));
  const std::vector<float> first{0.5f, 1.0f, 2.0f};
  h.observe(first);
  const std::vector<float> inside{0.75f, 1.5f};
  histogram_pieces b = h.begin_pieces(1);
  std::size_t pulls = 0;
  h.observe_piece(b, 0, [&]() -> std::span<const float> {
    return pulls++ == 0 ? std::span<const float>(inside) : std::span<const float>{};
  });
  REQUIRE_FALSE(h.grow_pieces(b));
  const std::vector<float> wider{8.0f};
  h.observe(wider);  // appends bins
  const auto before = h.stats();
  std::string id;
  try {
    h.add_pieces(b);
  } catch (const quark::error& e) {
    id = e.id();
  }
  CHECK(id == "quark.calib.pieces");
  CHECK(h.stats() == before);  // nothing added
}
