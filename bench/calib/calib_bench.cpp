// SPDX-License-Identifier: MIT
// Observation and calibration cost, single core. Each observer runs beside a read-only pass over
// the same bytes in the same run (BM_read_sum: a vectorised integer sum of the bits), on an array
// far larger than the caches (128 Mi floats = 512 MiB; L3 is 480 MiB here) and on an L2-resident
// one (256 Ki floats). Compare `items_per_second` of BM_minmax_observer with BM_read_sum. The
// searches (entropy, percentile, pof2 MinMSE) run on a 2048-bin histogram of normal data.
#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include <benchmark/benchmark.h>

#include <quark/calib/entropy_calibrator.hpp>
#include <quark/calib/minifloat_mse_calibrator.hpp>
#include <quark/calib/mse_calibrator.hpp>
#include <quark/calib/percentile_calibrator.hpp>
#include <quark/calib/pof2_calibrator.hpp>
#include <quark/detail/prefetch.hpp>
#include <quark/observer/detail/histogram_kernel.hpp>
#include <quark/observer/detail/minmax_kernel.hpp>
#include <quark/observer/histogram_observer.hpp>
#include <quark/observer/minmax_observer.hpp>

#include "bench_data.hpp"

namespace {

constexpr std::size_t kLarge = std::size_t{1} << 27;
constexpr std::size_t kSmall = std::size_t{1} << 18;
constexpr std::size_t kTiny = std::size_t{1} << 12;  // one small activation, in L1

const std::vector<float>& input() {
  return quark_bench::normal_floats<kLarge>(2.0f);
}

std::span<const float> data(const benchmark::State& state) {
  return quark_bench::first_arg(state, input());
}

using quark_bench::report;

/// Baseline: memcpy of the same bytes (the project's common baseline, bench_data.hpp).
void BM_memcpy(benchmark::State& state) {
  quark_bench::memcpy_baseline(state, data(state));
}

/// Baseline: a read-only pass over the same bytes, summing their bit patterns as integers (the
/// compiler vectorises it fully; a float max or sum would not be without -ffast-math).
void BM_read_sum(benchmark::State& state) {
  const auto x = data(state);
  for (auto _ : state) {
    std::uint32_t sum = 0;
    for (const float v : x)
      sum += std::bit_cast<std::uint32_t>(v);
    benchmark::DoNotOptimize(sum);
  }
  report(state, x.size());
}

/// The same read pass with the observers' software prefetch (4 KiB ahead, per 1 KiB), to show
/// how much of an observer's speed comes from the prefetch alone. Not the baseline.
void BM_read_sum_prefetch(benchmark::State& state) {
  const auto x = data(state);
  constexpr std::size_t step = quark::detail::observer_block;
  const std::size_t bytes = x.size() * sizeof(float);
  for (auto _ : state) {
    std::uint32_t sum = 0;
    std::size_t i = 0;
    for (; i + step <= x.size(); i += step) {
      quark::detail::prefetch_ahead(x.data(), i * sizeof(float), bytes, step * sizeof(float));
      for (std::size_t k = i; k < i + step; ++k)
        sum += std::bit_cast<std::uint32_t>(x[k]);
    }
    for (; i < x.size(); ++i)
      sum += std::bit_cast<std::uint32_t>(x[i]);
    benchmark::DoNotOptimize(sum);
  }
  report(state, x.size());
}

/// The portable min/max form (what a build without AVX-512 runs).
void BM_minmax_portable(benchmark::State& state) {
  const auto x = data(state);
  for (auto _ : state)
    benchmark::DoNotOptimize(quark::detail::minmax_reduce_portable(x));
  report(state, x.size());
}

void BM_minmax_observer(benchmark::State& state) {
  const auto x = data(state);
  for (auto _ : state) {
    quark::minmax_observer obs;
    obs.observe(x);
    benchmark::DoNotOptimize(obs.stats());
  }
  report(state, x.size());
}

/// f applied to the first kSmall values of the normal data (an L2-resident activation).
template <class F>
std::vector<float> small_mapped(F f) {
  std::vector<float> v(input().begin(), input().begin() + static_cast<std::ptrdiff_t>(kSmall));
  for (float& e : v)
    e = f(e);
  return v;
}

/// A 2048-bin histogram of mode Mode observing `x` once per iteration, after a first batch that
/// sets the range (later passes bin only). `lump`: histogram_options::lump_percentile.
template <quark::histogram_mode Mode>
void observe_repeatedly(benchmark::State& state, std::span<const float> x, double lump = 0.0) {
  quark::histogram_observer h{{.mode = Mode, .num_bins = 2048, .lump_percentile = lump}};
  h.observe(x);
  for (auto _ : state) {
    h.observe(x);
    benchmark::DoNotOptimize(h.stats().counts.data());
  }
  report(state, x.size());
}

/// Normal data (signed or |x|), at the sizes of data(state).
template <quark::histogram_mode Mode>
void BM_histogram_2048(benchmark::State& state) {
  observe_repeatedly<Mode>(state, data(state));
}

/// ReLU output (max(0, x) of the normal data: half the values are exactly 0), L2-resident. The
/// AVX-512 kernel counts zeros apart instead of one table increment each (histogram_kernel.hpp).
template <quark::histogram_mode Mode>
void BM_histogram_relu_2048(benchmark::State& state) {
  static const std::vector<float> relu = small_mapped([](float e) { return std::max(e, 0.0f); });
  observe_repeatedly<Mode>(state, relu);
}

/// Clip(x + 3, 0, 6) of the normal data (the gate of a hardswish, a ReLU6): 6.7% zeros and 6.7%
/// values on the last edge, which the kernel cannot place from the uniform formula alone. On the
/// real PP-OCRv4 det tensors such values and the zeros of ReLU outputs send 12-18% of the
/// 16-lane vectors the slow way (docs/bench/calib.md, session 13).
template <quark::histogram_mode Mode>
void BM_histogram_relu6_2048(benchmark::State& state) {
  static const std::vector<float> gate =
      small_mapped([](float e) { return std::clamp(e + 3.0f, 0.0f, 6.0f); });
  observe_repeatedly<Mode>(state, gate);
}

/// The |x| histogram of Percentile 99.999 as calibration observes it (lumped after the first
/// batch: the values under the top 1% only counted): normal data at the sizes of data(state),
/// then (after the signed form) the ReLU and ReLU6 data above. Compare with
/// BM_histogram_2048<absolute> and the others.
void BM_histogram_lumped_2048(benchmark::State& state) {
  observe_repeatedly<quark::histogram_mode::absolute>(state, data(state), 99.999);
}
/// The signed histogram of an asymmetric Percentile 99.999 (lumped between its bottom and top
/// 1%), normal data.
void BM_histogram_lumped_signed_2048(benchmark::State& state) {
  observe_repeatedly<quark::histogram_mode::signed_symmetric>(state, data(state), 99.999);
}
void BM_histogram_lumped_relu_2048(benchmark::State& state) {
  static const std::vector<float> relu = small_mapped([](float e) { return std::max(e, 0.0f); });
  observe_repeatedly<quark::histogram_mode::absolute>(state, relu, 99.999);
}
void BM_histogram_lumped_relu6_2048(benchmark::State& state) {
  static const std::vector<float> gate =
      small_mapped([](float e) { return std::clamp(e + 3.0f, 0.0f, 6.0f); });
  observe_repeatedly<quark::histogram_mode::absolute>(state, gate, 99.999);
}

/// Eight different windows of 256 Ki values of the normal data (8 MiB), observed in turn: the
/// same values never come back within 2 Mi values, so a branch predictor cannot learn them, as it
/// does when one L2-resident array is observed over and over (calibration never sees a value
/// twice). Mode and lumping as the benchmarks above; compare the plain and lumped forms here.
template <quark::histogram_mode Mode, bool Lump>
void BM_histogram_fresh_2048(benchmark::State& state) {
  const auto all = std::span<const float>(input());
  quark::histogram_observer h{
      {.mode = Mode, .num_bins = 2048, .lump_percentile = Lump ? 99.999 : 0.0}};
  h.observe(all.first(kSmall));
  std::size_t k = 0;
  for (auto _ : state) {
    h.observe(all.subspan((k++ % 8) * kSmall, kSmall));
    benchmark::DoNotOptimize(h.stats().counts.data());
  }
  report(state, kSmall);
}

/// The binning kernel of one path (kernel_path) on the observer's edges: normal data at the
/// sizes of data(state) (Arg) or, with Arg 0, the ReLU data above (half the values 0, which the
/// AVX-512 and AVX2 forms count apart). On a CPU without AVX-512 the automatic path is the AVX2
/// one; compare the two with the portable form in one run.
template <quark::detail::kernel_path Path>
void BM_histogram_path_2048(benchmark::State& state) {
#if QUARK_OBSERVER_AVX512
  if ((Path == quark::detail::kernel_path::avx512 && !quark::detail::observer_avx512_usable()) ||
      (Path == quark::detail::kernel_path::avx2 && !quark::detail::observer_avx2_usable())) {
    state.SkipWithError("this CPU lacks the path's instructions");
    return;
  }
#endif
  static const std::vector<float> relu = small_mapped([](float e) { return std::max(e, 0.0f); });
  const auto x = state.range(0) == 0 ? std::span<const float>(relu) : data(state);
  quark::histogram_observer h{{.mode = quark::histogram_mode::signed_symmetric, .num_bins = 2048}};
  h.observe(x);
  const std::vector<double> edges = h.stats().edges;
  std::vector<std::uint64_t> counts(2048);
  for (auto _ : state) {
    benchmark::DoNotOptimize(
        quark::detail::histogram_add<quark::detail::bin_transform::identity, Path>(x, edges,
                                                                                   counts));
  }
  report(state, x.size());
}

/// L2-resident values binned as rows of `state.range(0)` values, one kernel call per row, the
/// kernel's setup made once: how a 3x3 convolution of 96 input channels hands its output
/// blocks on (rows of 151 values), against whole spans (rows of 262144).
void BM_histogram_rows_2048(benchmark::State& state) {
  const auto x = std::span<const float>(input()).first(kSmall);
  const auto row = static_cast<std::size_t>(state.range(0));
  quark::histogram_observer h{{.mode = quark::histogram_mode::signed_symmetric, .num_bins = 2048}};
  h.observe(x);
  const std::vector<double> edges = h.stats().edges;
  std::vector<std::uint64_t> counts(2048);
  using quark::detail::bin_transform;
  const quark::detail::bin_setup<bin_transform::identity> setup(edges);
  quark::detail::count_tables& tables = quark::detail::thread_count_tables();
  for (auto _ : state) {
    for (std::size_t at = 0; at < x.size(); at += row) {
      benchmark::DoNotOptimize(quark::detail::histogram_count<bin_transform::identity>(
          x.subspan(at, std::min(row, x.size() - at)), setup, tables));
    }
    tables.fold_into(counts);
  }
  benchmark::DoNotOptimize(counts.data());
  report(state, x.size());
}

/// Reference point measured in the same run: the textbook scalar 2048-bin histogram loop
/// (float index, clamp, one table; no edge exactness, no growth), as the anchors' 1.15 G/s.
void BM_histogram_naive_2048(benchmark::State& state) {
  const auto x = data(state);
  std::vector<std::uint64_t> counts(2048);
  const float lo = -12.0f;
  const float norm = 2048.0f / 24.0f;
  for (auto _ : state) {
    for (const float v : x) {
      float f = (v - lo) * norm;
      f = f < 0.0f ? 0.0f : (f > 2047.0f ? 2047.0f : f);
      ++counts[static_cast<std::size_t>(f)];
    }
    benchmark::DoNotOptimize(counts.data());
  }
  report(state, x.size());
}

const quark::histogram_data& hist_2048(quark::histogram_mode mode) {
  static std::array<quark::histogram_data, 3> cache;
  auto& d = cache[static_cast<std::size_t>(mode)];
  if (d.empty()) {
    quark::histogram_observer h{{.mode = mode, .num_bins = 2048}};
    h.observe(std::span<const float>(input()).first(kSmall * 16));
    d = h.stats();
  }
  return d;
}

void BM_entropy_search_2048(benchmark::State& state) {
  const auto& h = hist_2048(quark::histogram_mode::signed_symmetric);
  for (auto _ : state)
    benchmark::DoNotOptimize(quark::entropy_calibrator{}(h));
  state.counters["candidates"] = static_cast<double>(quark::entropy_calibrator{}.scan(h).size());
}

void BM_percentile_search_2048(benchmark::State& state) {
  const auto& h = hist_2048(quark::histogram_mode::absolute);
  for (auto _ : state)
    benchmark::DoNotOptimize(quark::percentile_calibrator{}(h));
}

void BM_pof2_minmse_search_2048(benchmark::State& state) {
  const auto& h = hist_2048(quark::histogram_mode::signed_extend);
  for (auto _ : state)
    benchmark::DoNotOptimize(quark::pof2_minmse_calibrator{}(h));
}

// The weight-style power-of-two MinMSE (XINT8 weights and constants, quark-spec §4.8): five
// candidate scales, each value fake-quantized by all five; items are values. Compare with
// BM_memcpy on the same Arg. BM_pof2_minmse_weights_scalar is the plain per-candidate loop
// (round half to even with branches on the fraction, as the search had before session 42),
// kept as the measured "before".
void BM_pof2_minmse_weights(benchmark::State& state) {
  const auto x = data(state);
  for (auto _ : state)
    benchmark::DoNotOptimize(quark::pof2_minmse_search(x, {-127, 127}));
  report(state, x.size());
}

float branchy_round_even(float v) {
  const float f = std::floor(v);
  const float d = v - f;
  if (d > 0.5f)
    return f + 1.0f;
  if (d < 0.5f)
    return f;
  return std::fmod(f, 2.0f) == 0.0f ? f : f + 1.0f;
}

void BM_pof2_minmse_weights_scalar(benchmark::State& state) {
  const auto x = data(state);
  for (auto _ : state) {
    float lo = x[0], hi = x[0];
    for (const float v : x) {
      lo = v < lo ? v : lo;
      hi = v > hi ? v : hi;
    }
    const auto st = quark::detail::pof2_from_range(static_cast<double>(lo), static_cast<double>(hi),
                                                   {-127, 127});
    std::array<double, quark::detail::pof2_candidates> sse{};
    for (int i = 0; i < quark::detail::pof2_candidates; ++i) {
      const float sc = quark::detail::candidate_scale(st.pos, i);
      double acc = 0.0;
      for (const float raw : x) {
        const float v = quark::detail::to_finite(raw);
        float q = branchy_round_even(v / sc);
        q = q < -127.0f ? -127.0f : (q > 127.0f ? 127.0f : q);
        const double d = static_cast<double>(v) - static_cast<double>(q * sc);
        acc += d * d;
      }
      sse[static_cast<std::size_t>(i)] = acc;
    }
    benchmark::DoNotOptimize(quark::detail::pof2_argmin(sse));
  }
  report(state, x.size());
}

// The float-scale window searches (1024 windows x 2048 bins), run once per tensor after the
// calibration pass: int8 (float_minmse_hist_calibrator) and float8 E4M3FN
// (minifloat_minmse_calibrator, its error through the float8 Q/DQ).
void BM_float_minmse_search_2048(benchmark::State& state) {
  const auto& h = hist_2048(quark::histogram_mode::signed_extend);
  for (auto _ : state)
    benchmark::DoNotOptimize(quark::float_minmse_hist_calibrator{}(h));
}

// Float-scale MinMSE on a weight (WeightCalibrateMethod MinMSE, quark-spec §4.8); items are
// the weight's values (compare with BM_memcpy on the same Arg). Percentile scores four
// percentile ranges, All every window of 2048 bins' centres from half of them to all (1024
// scores, each over every value). BM_float_minmse_weights_all_scalar runs the same windows with
// the plain per-value loop the error had before session 45 (one fake_quant and one double square
// per value), kept as the measured "before"; the results are bit-identical.
template <quark::minmse_float_mode M>
void BM_float_minmse_weights(benchmark::State& state) {
  const auto x = data(state);
  for (auto _ : state)
    benchmark::DoNotOptimize(quark::float_minmse_calibrator{.mode = M}(x));
  report(state, x.size());
}

void BM_float_minmse_weights_all_scalar(benchmark::State& state) {
  const auto x = data(state);
  for (auto _ : state) {
    quark::histogram_observer h{{.mode = quark::histogram_mode::signed_extend,
                                 .num_bins = std::min<std::size_t>(2048, x.size())}};
    h.observe(x);
    benchmark::DoNotOptimize(quark::detail::minmse_windows(
        h.stats(), {-127, 127}, quark::range_symmetry::symmetric,
        [&](const quark::histogram_data&, float s, float zp, float lo, float hi) {
          double acc = 0.0;
          for (const float v : x) {
            const double d = static_cast<double>(quark::detail::fake_quant(v, s, zp, lo, hi)) -
                             static_cast<double>(v);
            acc += d * d;
          }
          return acc / static_cast<double>(x.size());
        }));
  }
  report(state, x.size());
}

void BM_minifloat_minmse_search_2048(benchmark::State& state) {
  const auto& h = hist_2048(quark::histogram_mode::signed_extend);
  for (auto _ : state)
    benchmark::DoNotOptimize(quark::minifloat_minmse_calibrator<quark::float8_e4m3fn>{}(h));
}

}  // namespace

BENCHMARK(BM_memcpy)->Arg(kTiny)->Arg(kSmall)->Arg(kLarge)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_read_sum)->Arg(kTiny)->Arg(kSmall)->Arg(kLarge)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_read_sum_prefetch)->Arg(kSmall)->Arg(kLarge)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_minmax_observer)->Arg(kTiny)->Arg(kSmall)->Arg(kLarge)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_minmax_portable)->Arg(kSmall)->Arg(kLarge)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_histogram_2048<quark::histogram_mode::absolute>)
    ->Arg(kTiny)
    ->Arg(kSmall)
    ->Arg(kLarge)
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_histogram_2048<quark::histogram_mode::signed_symmetric>)
    ->Arg(kTiny)
    ->Arg(kSmall)
    ->Arg(kLarge)
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_histogram_relu_2048<quark::histogram_mode::absolute>)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_histogram_relu_2048<quark::histogram_mode::signed_extend>)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_histogram_relu6_2048<quark::histogram_mode::absolute>)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_histogram_relu6_2048<quark::histogram_mode::signed_extend>)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_histogram_lumped_2048)->Arg(kSmall)->Arg(kLarge)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_histogram_lumped_signed_2048)->Arg(kSmall)->Arg(kLarge)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_histogram_fresh_2048<quark::histogram_mode::absolute, false>)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_histogram_fresh_2048<quark::histogram_mode::absolute, true>)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_histogram_fresh_2048<quark::histogram_mode::signed_symmetric, false>)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_histogram_fresh_2048<quark::histogram_mode::signed_symmetric, true>)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_histogram_lumped_relu_2048)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_histogram_lumped_relu6_2048)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_histogram_rows_2048)->Arg(151)->Arg(606)->Arg(kSmall)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_histogram_path_2048<quark::detail::kernel_path::portable>)
    ->Arg(0)
    ->Arg(kSmall)
    ->Arg(kLarge)
    ->Unit(benchmark::kMicrosecond);
#if QUARK_OBSERVER_AVX512
BENCHMARK(BM_histogram_path_2048<quark::detail::kernel_path::avx2>)
    ->Arg(0)
    ->Arg(kSmall)
    ->Arg(kLarge)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_histogram_path_2048<quark::detail::kernel_path::avx512>)
    ->Arg(0)
    ->Arg(kSmall)
    ->Arg(kLarge)
    ->Unit(benchmark::kMicrosecond);
#endif
BENCHMARK(BM_histogram_naive_2048)->Arg(kSmall)->Arg(kLarge)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_entropy_search_2048)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_percentile_search_2048)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_pof2_minmse_search_2048)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_pof2_minmse_weights)->Arg(kSmall)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_pof2_minmse_weights_scalar)->Arg(kSmall)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_float_minmse_search_2048)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_minifloat_minmse_search_2048)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_float_minmse_weights<quark::minmse_float_mode::percentile>)
    ->Arg(kTiny)
    ->Arg(kSmall)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_float_minmse_weights<quark::minmse_float_mode::hist_center>)
    ->Arg(kTiny)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_float_minmse_weights<quark::minmse_float_mode::all>)
    ->Arg(kTiny)
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_float_minmse_weights_all_scalar)->Arg(kTiny)->Unit(benchmark::kMillisecond);
