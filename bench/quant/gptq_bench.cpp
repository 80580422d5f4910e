// SPDX-License-Identifier: MIT
// quark::gptq_quantize (include/quark/algo/gptq.hpp) on square MatMul weights K = N = 768 and
// 4096 (64 in a smoke run): 4 bits, per channel, groups of 128 (32 in a smoke run), Quark's other
// defaults (symmetric, damping 0.01, blocks of 128), the Hessian of 2048 normal input rows
// accumulated once beforehand; gptq_hessian::add of those 2048 rows on its own; and memcpy of
// the weight's float bytes in the same run. Every benchmark reports the weight's float bytes as
// bytes_per_second, so the columns compare directly (GPTQ is offline work: seconds, not a
// bandwidth, are what matter; the ratio to memcpy puts them on this machine's scale).
// Measured when written (release-native, GCC 12, AMD EPYC with AVX-512, one thread): GPTQ 39.5 ms
// at 768 (790x memcpy's 0.050 ms), 3.87 s at 4096 (610x memcpy's 6.4 ms); the Hessian of 2048
// rows 41 ms and 1.13 s.
#include <cstdint>
#include <cstring>
#include <map>
#include <vector>

#include <benchmark/benchmark.h>

#include <quark/algo/gptq.hpp>

#include "bench_data.hpp"

namespace {

constexpr std::size_t max_side = 4096;
constexpr std::size_t rows = 2048;

std::size_t side(const benchmark::State& state) {
  return quark_bench::smoke() ? 64 : static_cast<std::size_t>(state.range(0));
}

const std::vector<float>& inputs() {
  return quark_bench::normal_floats<rows * max_side>(1.0f);
}

/// The first k x n floats of the shared normal weights.
std::vector<float> weight(std::size_t k, std::size_t n) {
  const auto& all = quark_bench::normal_floats<max_side * max_side>(0.05f);
  return {all.begin(), all.begin() + static_cast<std::ptrdiff_t>(k * n)};
}

/// The Hessian of the first `rows` input rows over k features, made once per k.
const quark::gptq_hessian& hessian(std::size_t k) {
  static std::map<std::size_t, quark::gptq_hessian> made;
  auto it = made.find(k);
  if (it == made.end()) {
    it = made.emplace(k, quark::gptq_hessian(k)).first;
    it->second.add(inputs().data(), quark_bench::smoke() ? 64 : rows, 1);
  }
  return it->second;
}

void bm_memcpy(benchmark::State& state) {
  const std::size_t k = side(state);
  quark_bench::memcpy_baseline(state, weight(k, k));
}

void bm_gptq(benchmark::State& state) {
  const std::size_t k = side(state);
  const std::vector<float> w = weight(k, k);
  const quark::gptq_hessian& h = hessian(k);
  quark::gptq_computed_params grid;
  grid.bits = 4;
  grid.per_channel = true;
  quark::gptq_options opt;
  opt.group_size = quark_bench::smoke() ? 32 : 128;
  for (auto _ : state) {
    quark::gptq_result r = quark::gptq_quantize(w, k, k, h, grid, opt);
    benchmark::DoNotOptimize(r.codes.data());
    benchmark::ClobberMemory();
  }
  quark_bench::report(state, w.size());
}

void bm_hessian_add(benchmark::State& state) {
  const std::size_t k = side(state);
  const std::size_t n = quark_bench::smoke() ? 64 : rows;
  quark::gptq_hessian h(k);
  std::vector<float> x(n * k);
  for (std::size_t r = 0; r < n; ++r)
    std::memcpy(x.data() + r * k, inputs().data() + r * max_side, k * sizeof(float));
  for (auto _ : state) {
    h.add(x.data(), n, 1);
    benchmark::DoNotOptimize(h.matrix().data());
    benchmark::ClobberMemory();
  }
  quark_bench::report(state, k * k);
}

}  // namespace

BENCHMARK(bm_memcpy)->Arg(768)->Arg(4096)->ArgName("side")->Unit(benchmark::kMillisecond);
BENCHMARK(bm_gptq)->Arg(768)->Arg(4096)->ArgName("side")->Unit(benchmark::kMillisecond);
BENCHMARK(bm_hessian_add)->Arg(768)->Arg(4096)->ArgName("side")->Unit(benchmark::kMillisecond);
