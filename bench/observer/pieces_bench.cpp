// SPDX-License-Identifier: MIT
// A histogram batch observed in parts (histogram_observer::begin_pieces ... add_pieces, as the
// calibration does on each thread), single core, beside memcpy of the same bytes in the same run
// (BM_memcpy: the baseline). Data: normal floats, 2048-bin |x| histogram, in 64 Ki-value chunks.
// BM_pieces_inside: a batch inside the range (the common case, one binning pass).
// BM_pieces_grow_tail: a batch that grows the |x| range (its values scaled by 1.5 over the
// priming batch): phase 1 bins it, phase 2 reads again only the values beyond the old last edge.
// BM_observe_grow: the same growing batch through sequential observe(), which bins it twice.
// Compare items_per_second with BM_memcpy at the same size (256 Ki floats: L2; 4 Mi: L3).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <span>
#include <vector>

#include <benchmark/benchmark.h>

#include <quark/observer/histogram_observer.hpp>

#include "bench_data.hpp"

namespace {

constexpr std::size_t kChunk = std::size_t{1} << 16;

const std::vector<float>& input() {
  return quark_bench::normal_floats<std::size_t{1} << 22>(2.0f);
}

std::span<const float> data(const benchmark::State& state) {
  return quark_bench::first_arg(state, input());
}

using quark_bench::report;

/// An |x| histogram primed with `x` scaled by `scale` (so a later batch x grows it if scale < 1).
quark::histogram_observer primed(std::span<const float> x, float scale) {
  std::vector<float> y(x.begin(), x.end());
  for (float& v : y)
    v *= scale;
  quark::histogram_observer h{{.mode = quark::histogram_mode::absolute, .num_bins = 2048}};
  h.observe(y);
  return h;
}

/// One batch in one part, pulled in chunks of kChunk values.
void observe_in_parts(quark::histogram_observer& h, std::span<const float> x) {
  std::size_t at = 0;
  auto next = [&]() -> std::span<const float> {
    const std::size_t m = std::min(kChunk, x.size() - at);
    const auto c = x.subspan(at, m);
    at += m;
    return c;
  };
  quark::histogram_pieces b = h.begin_pieces(1);
  h.observe_piece(b, 0, next);
  if (h.grow_pieces(b)) {
    at = 0;
    h.finish_piece(b, 0, next);
  }
  h.add_pieces(b);
}

void BM_memcpy(benchmark::State& state) {
  quark_bench::memcpy_baseline(state, data(state));
}

void BM_pieces_inside(benchmark::State& state) {
  const auto x = data(state);
  quark::histogram_observer h = primed(x, 1.0f);
  for (auto _ : state) {
    observe_in_parts(h, x);
    benchmark::DoNotOptimize(h.stats().counts.data());
  }
  report(state, x.size());
}

/// A growing batch (x over a histogram primed with x / 1.5) observed by `observe(h, x)`; the
/// primed histogram is copied outside the timed region.
template <class Observe>
void grow_bench(benchmark::State& state, Observe&& observe) {
  const auto x = data(state);
  const quark::histogram_observer start = primed(x, 1.0f / 1.5f);
  for (auto _ : state) {
    state.PauseTiming();
    quark::histogram_observer h = start;
    state.ResumeTiming();
    observe(h, x);
    benchmark::DoNotOptimize(h.stats().counts.data());
  }
  report(state, x.size());
}

void BM_pieces_grow_tail(benchmark::State& state) {
  grow_bench(state, [](quark::histogram_observer& h, std::span<const float> x) {
    observe_in_parts(h, x);
  });
}

void BM_observe_grow(benchmark::State& state) {
  grow_bench(state, [](quark::histogram_observer& h, std::span<const float> x) { h.observe(x); });
}

}  // namespace

BENCHMARK(BM_memcpy)->Arg(1 << 18)->Arg(1 << 22)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_pieces_inside)->Arg(1 << 18)->Arg(1 << 22)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_pieces_grow_tail)->Arg(1 << 18)->Arg(1 << 22)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_observe_grow)->Arg(1 << 18)->Arg(1 << 22)->Unit(benchmark::kMicrosecond);
