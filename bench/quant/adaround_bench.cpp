// SPDX-License-Identifier: MIT
// The per-iteration work of fast finetune (include/quark/algo/adaround.hpp, adam.hpp) on 64 Ki
// weights, beside memcpy of the same double bytes: one Adam step (BM_adam_step) and the plain
// one-loop form it replaced in session 42 (BM_adam_step_scalar: its sqrt keeps the loop scalar);
// one AdaRound iteration (soft weights, backward with the regulariser, Adam) early in training
// (BM_adaround_iteration/0: every alpha near its start, h inside (0, 1)) and late (/1: 90% of the
// alphas beyond +-3, where h is clamped and the exp and pow are skipped). Items are weights
// (compare times: bytes_per_second counts 4 bytes per item, memcpy here copies 8).
// Measured when written (release-native, GCC 12, 2-core AMD EPYC with AVX-512, shared host):
// see docs/bench/quant.md.
#include <cmath>
#include <cstring>
#include <optional>
#include <vector>

#include <benchmark/benchmark.h>

#include <quark/algo/adam.hpp>
#include <quark/algo/adaround.hpp>

#include "bench_data.hpp"

namespace {

std::size_t count(const benchmark::State& state) {
  return quark_bench::smoke() ? 1024 : static_cast<std::size_t>(state.range(0));
}

std::vector<double> gradients(std::size_t n) {
  std::vector<double> g(n);
  for (std::size_t i = 0; i < n; ++i)
    g[i] = std::sin(static_cast<double>(i) * 0.61) * 1e-3;
  return g;
}

void BM_memcpy_doubles(benchmark::State& state) {
  const std::size_t n = count(state);
  std::vector<double> a(n, 1.0), b(n);
  for (auto _ : state) {
    std::memcpy(b.data(), a.data(), n * sizeof(double));
    benchmark::DoNotOptimize(b.data());
    benchmark::ClobberMemory();
  }
  quark_bench::report(state, n);
}

void BM_adam_step(benchmark::State& state) {
  const std::size_t n = count(state);
  const std::vector<double> g = gradients(n);
  std::vector<double> p(n, 0.5);
  quark::adam opt(n, {.lr = 0.01});
  for (auto _ : state) {
    opt.step(p, g);
    benchmark::DoNotOptimize(p.data());
  }
  quark_bench::report(state, n);
}

void BM_adam_step_scalar(benchmark::State& state) {
  const std::size_t n = count(state);
  const std::vector<double> g = gradients(n);
  std::vector<double> p(n, 0.5), m(n, 0.0), v(n, 0.0);
  const quark::adam_options o{.lr = 0.01};
  int t = 0;
  for (auto _ : state) {
    ++t;
    const double c1 = 1.0 - std::pow(o.beta1, t);
    const double c2 = 1.0 - std::pow(o.beta2, t);
    for (std::size_t i = 0; i < n; ++i) {
      m[i] = o.beta1 * m[i] + (1.0 - o.beta1) * g[i];
      v[i] = o.beta2 * v[i] + (1.0 - o.beta2) * g[i] * g[i];
      p[i] -= o.lr * (m[i] / c1) / (std::sqrt(v[i] / c2) + o.eps);
    }
    benchmark::DoNotOptimize(p.data());
  }
  quark_bench::report(state, n);
}

void BM_adaround_iteration(benchmark::State& state) {
  const std::size_t n = count(state);
  const bool late = state.range(1) != 0;
  const auto& w = quark_bench::normal_floats<std::size_t{1} << 16>(0.05f);
  const float s = 0.002f;
  quark::tensor_qparams<std::int8_t> p{std::span(&s, 1), {}, quark::per_tensor{}, -127, 127};
  quark::adaround<std::int8_t> ar(quark::tensor_shape{n}, std::span(w.data(), n), p);
  if (late) {
    for (std::size_t i = 0; i < n; ++i) {
      if (i % 10 != 0)
        ar.alpha()[i] = ar.alpha()[i] >= 0.0 ? 4.0 : -4.0;
    }
  }
  const std::vector<double> g = gradients(n);
  const std::optional<quark::adaround_reg> reg = quark::adaround_reg{0.01, 8.0};
  for (auto _ : state) {
    benchmark::DoNotOptimize(ar.soft_weights().data());
    benchmark::DoNotOptimize(ar.step(g, 0.0, reg));
  }
  quark_bench::report(state, n);
}

}  // namespace

BENCHMARK(BM_memcpy_doubles)->Arg(1 << 16)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_adam_step)->Arg(1 << 16)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_adam_step_scalar)->Arg(1 << 16)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_adaround_iteration)
    ->Args({1 << 16, 0})
    ->Args({1 << 16, 1})
    ->Unit(benchmark::kMicrosecond);
