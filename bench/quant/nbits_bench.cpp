// SPDX-License-Identifier: MIT
// quark::quantize_nbits and dequantize_nbits_column (MatMulNBits storage, include/quark/quant/
// nbits.hpp) on a 4096 x 4096 float32 weight (64 MiB; 512 x 512 in a smoke run), 4-bit blocks of
// 32 and 128 along K, symmetric and asymmetric, each beside memcpy of the weight's float bytes
// in the same run. Every benchmark reports the float bytes of the weight as bytes_per_second
// (read by quantize, written by dequantize), so the columns compare directly: quantization is
// offline work, dequantization runs inside every MatMulNBits call of our runtime. HQQ
// (quantize_nbits_hqq) runs its rounds over the whole weight.
#include <cstdint>
#include <cstring>
#include <vector>

#include <benchmark/benchmark.h>

#include <quark/quant/nbits.hpp>

#include "bench_data.hpp"

namespace {

std::int64_t side() {
  return static_cast<std::int64_t>(quark_bench::sized(4096, 512));
}

const std::vector<float>& weight() {
  static const std::vector<float> w = [] {
    const auto& all = quark_bench::normal_floats<std::size_t{4096} * 4096>(0.05f);
    const auto n = static_cast<std::size_t>(side() * side());
    return std::vector<float>(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(n));
  }();
  return w;
}

void bm_memcpy(benchmark::State& state) {
  quark_bench::memcpy_baseline(state, weight());
}

struct stored {
  quark::nbits_layout l;
  std::vector<std::uint8_t> packed, zp;
  std::vector<float> scales;
  stored(std::int64_t block, bool symmetric)
      : l{side(), side(), 4, block},
        packed(static_cast<std::size_t>(l.packed_bytes())),
        zp(symmetric ? 0 : static_cast<std::size_t>(l.zero_point_bytes())),
        scales(static_cast<std::size_t>(l.scale_count())) {}
};

void bm_quantize(benchmark::State& state) {
  const auto& w = weight();
  stored s(state.range(0), state.range(1) != 0);
  for (auto _ : state) {
    quark::quantize_nbits(w, s.l, state.range(1) != 0, s.packed, s.scales, s.zp);
    benchmark::DoNotOptimize(s.packed.data());
    benchmark::ClobberMemory();
  }
  quark_bench::report(state, w.size());
}

void bm_dequantize_columns(benchmark::State& state) {
  const auto& w = weight();
  const bool symmetric = state.range(1) != 0;
  stored s(state.range(0), symmetric);
  quark::quantize_nbits(w, s.l, symmetric, s.packed, s.scales, s.zp);
  std::vector<float> out(w.size());
  const quark::nbits_zero_points zp{s.zp, {}};
  for (auto _ : state) {
    for (std::int64_t c = 0; c < s.l.n; ++c) {
      quark::dequantize_nbits_column(s.packed, s.scales, zp, s.l, c,
                                     out.data() + static_cast<std::size_t>(c * s.l.k));
    }
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  quark_bench::report(state, w.size());
}

/// HQQ (float zero points; at most 20 passes over the weight, ORT's early stop).
void bm_quantize_hqq(benchmark::State& state) {
  const auto& w = weight();
  stored s(state.range(0), true);
  std::vector<float> zeros(s.scales.size());
  int rounds = 0;
  for (auto _ : state) {
    rounds = quark::quantize_nbits_hqq(w, s.l, s.packed, s.scales, zeros);
    benchmark::DoNotOptimize(s.packed.data());
    benchmark::ClobberMemory();
  }
  state.counters["rounds"] = rounds;
  quark_bench::report(state, w.size());
}

}  // namespace

BENCHMARK(bm_memcpy)->Unit(benchmark::kMillisecond);
BENCHMARK(bm_quantize_hqq)->Arg(32)->Arg(128)->ArgName("block")->Unit(benchmark::kMillisecond);
BENCHMARK(bm_quantize)
    ->ArgsProduct({{32, 128}, {1, 0}})
    ->ArgNames({"block", "sym"})
    ->Unit(benchmark::kMillisecond);
BENCHMARK(bm_dequantize_columns)
    ->ArgsProduct({{32, 128}, {1, 0}})
    ->ArgNames({"block", "sym"})
    ->Unit(benchmark::kMillisecond);
