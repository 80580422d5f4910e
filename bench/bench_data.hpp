// SPDX-License-Identifier: MIT
// What the benchmark programs share: seeded normal input (generated once per size and spread) and
// the items / bytes counters Google Benchmark prints beside the time, so every benchmark reports
// the same way as the memcpy baseline it is compared with.
//
//     const std::vector<float>& x = quark_bench::normal_floats<std::size_t{1} << 22>(2.0f);
//     ...
//     quark_bench::report(state, n);   // n floats read per iteration
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <span>
#include <vector>

#include <benchmark/benchmark.h>

namespace quark_bench {

/// True when QUARK_BENCH_SMOKE is set (the `bench_smoke` ctest entries set it): a benchmark then
/// shrinks its arrays and minimum times, since the run only proves that it still works. Safe to
/// call while benchmarks are registered (static initialisation).
inline bool smoke() {
  static const bool on = [] {
    const char* v = std::getenv("QUARK_BENCH_SMOKE");
    return v != nullptr && *v != '\0';
  }();
  return on;
}

/// `full` in a measuring run, `small` in a smoke run.
inline std::size_t sized(std::size_t full, std::size_t small) {
  return smoke() ? small : full;
}

/// N normal floats (mean 0, standard deviation `sigma`, std::mt19937 seeded with 42), made on the
/// first call for each (N, sigma) and kept.
template <std::size_t N>
const std::vector<float>& normal_floats(float sigma) {
  static const std::vector<float> v = [sigma] {
    std::vector<float> x(N);
    std::mt19937 rng(42);
    std::normal_distribution<float> d(0.0f, sigma);
    for (auto& e : x)
      e = d(rng);
    return x;
  }();
  return v;
}

/// The first state.range(0) values of `x`.
inline std::span<const float> first_arg(const benchmark::State& state,
                                        const std::vector<float>& x) {
  return std::span<const float>(x).first(static_cast<std::size_t>(state.range(0)));
}

/// Items and bytes processed: `n` floats per iteration.
inline void report(benchmark::State& state, std::size_t n) {
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()) *
                          static_cast<std::int64_t>(n));
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) *
                          static_cast<std::int64_t>(n * sizeof(float)));
}

/// The baseline of a benchmark over the float array `x`: memcpy of its bytes to another buffer,
/// reported like the benchmark (`x.size()` floats per iteration).
inline void memcpy_baseline(benchmark::State& state, std::span<const float> x) {
  std::vector<float> out(x.size());
  for (auto _ : state) {
    std::memcpy(out.data(), x.data(), x.size() * sizeof(float));
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  report(state, x.size());
}

}  // namespace quark_bench
