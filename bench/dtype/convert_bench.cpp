// SPDX-License-Identifier: MIT
// float32 -> format and format -> float32 throughput on arrays far larger than cache, reported
// beside memcpy of the same bytes in the same run. Compare `bytes_per_second` of BM_encode<T>
// with BM_memcpy_encode<T> (same input + output bytes) to get the ratio.
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include <benchmark/benchmark.h>

#include <quark/quark.hpp>

#include "bench_data.hpp"

namespace {

// 128 Mi floats = 512 MiB in (L3 is 480 MiB); 64 Ki in a smoke run.
const std::size_t kElements = quark_bench::sized(std::size_t{1} << 27, std::size_t{1} << 16);

const std::vector<float>& input() {
  static const std::vector<float> v = [] {
    std::vector<float> x(kElements);
    std::mt19937 rng(42);
    std::normal_distribution<float> d(0.0f, 8.0f);
    for (auto& e : x)
      e = d(rng);
    return x;
  }();
  return v;
}

/// memcpy of the bytes one conversion reads plus the bytes it writes.
template <class T>
void BM_memcpy_encode(benchmark::State& state) {
  const std::size_t in_bytes = kElements * sizeof(float);
  const std::size_t out_bytes = kElements * sizeof(T);
  // Copy (in + out)/2 bytes: a memcpy of k bytes moves 2k bytes (read + write).
  const std::size_t half = (in_bytes + out_bytes) / 2;
  std::vector<std::uint8_t> a(half, 1), b(half);
  for (auto _ : state) {
    std::memcpy(b.data(), a.data(), half);
    benchmark::DoNotOptimize(b.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) *
                          static_cast<std::int64_t>(in_bytes + out_bytes));
}

template <class T, quark::conversion_policy P>
void BM_encode(benchmark::State& state) {
  const auto& x = input();
  std::vector<T> out(kElements);
  for (auto _ : state) {
    quark::convert<T, P>(std::span<const float>(x), std::span<T>(out));
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * kElements));
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) *
                          static_cast<std::int64_t>(kElements * (sizeof(float) + sizeof(T))));
}

template <class T>
void BM_decode(benchmark::State& state) {
  std::vector<T> q(kElements);
  quark::convert<T, quark::policies::onnx_saturate>(std::span<const float>(input()),
                                                    std::span<T>(q));
  std::vector<float> out(kElements);
  for (auto _ : state) {
    quark::to_float(std::span<const T>(q), std::span<float>(out));
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * kElements));
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) *
                          static_cast<std::int64_t>(kElements * (sizeof(float) + sizeof(T))));
}

using quark::policies::ieee;
using quark::policies::onnx_saturate;

}  // namespace

#define QUARK_CONVERT_BENCH(T, P)                                                \
  BENCHMARK_TEMPLATE(BM_memcpy_encode, quark::T)->Unit(benchmark::kMillisecond); \
  BENCHMARK_TEMPLATE(BM_encode, quark::T, P)->Unit(benchmark::kMillisecond);     \
  BENCHMARK_TEMPLATE(BM_decode, quark::T)->Unit(benchmark::kMillisecond);

QUARK_CONVERT_BENCH(bfloat16, ieee)
QUARK_CONVERT_BENCH(float16, ieee)
QUARK_CONVERT_BENCH(float8_e4m3fn, onnx_saturate)
QUARK_CONVERT_BENCH(float8_e4m3fnuz, onnx_saturate)
QUARK_CONVERT_BENCH(float8_e5m2, onnx_saturate)
QUARK_CONVERT_BENCH(float8_e5m2fnuz, onnx_saturate)
QUARK_CONVERT_BENCH(float6_e3m2fn, onnx_saturate)
QUARK_CONVERT_BENCH(float6_e2m3fn, onnx_saturate)
QUARK_CONVERT_BENCH(float4_e2m1fn, onnx_saturate)
QUARK_CONVERT_BENCH(float8_e8m0fnu, quark::policies::onnx_e8m0_up)
