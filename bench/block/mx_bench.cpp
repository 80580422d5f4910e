// SPDX-License-Identifier: MIT
// Block-format fake-quantize throughput (float32 in, float32 out) beside memcpy of the same
// array in the same run. Fake-quantize reads N floats and writes N floats, exactly the traffic of
// memcpy(dst, src, 4N), so the ratio of their bytes_per_second is the figure to report
// (docs/bench/block.md). Large: 64 Mi floats (256 MiB in + 256 MiB out, beyond the 480 MiB L3
// together); small: 64 Ki floats (L2-resident). Arg(0) = large, Arg(1) = small.
#include <cstdint>
#include <cstring>
#include <random>
#include <span>
#include <vector>

#include <benchmark/benchmark.h>

#include <quark/block/bfp.hpp>
#include <quark/block/micro_exponent.hpp>
#include <quark/block/mx.hpp>

namespace {

constexpr std::size_t kLarge = std::size_t{1} << 26;
constexpr std::size_t kSmall = std::size_t{1} << 16;

std::size_t elements(const benchmark::State& state) {
  return state.range(0) == 0 ? kLarge : kSmall;
}

/// Shared buffers: normal data with a spread of magnitudes (fixed seed), and an output array.
struct buffers {
  std::vector<float> in;
  std::vector<float> out;
  buffers() : in(kLarge), out(kLarge) {
    std::mt19937 rng(20261122);
    std::normal_distribution<float> d(0.0f, 1.0f);
    std::uniform_int_distribution<int> e(-8, 8);
    for (auto& x : in)
      x = d(rng) * static_cast<float>(1 << (e(rng) + 8)) / 256.0f;
  }
};

buffers& data() {
  static buffers b;
  return b;
}

void set_counters(benchmark::State& state, std::size_t n) {
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()) *
                          static_cast<std::int64_t>(n));
  // Bytes read + bytes written, as for memcpy.
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) *
                          static_cast<std::int64_t>(2 * n * sizeof(float)));
}

void BM_memcpy(benchmark::State& state) {
  auto& b = data();
  const std::size_t n = elements(state);
  for (auto _ : state) {
    std::memcpy(b.out.data(), b.in.data(), n * sizeof(float));
    benchmark::DoNotOptimize(b.out.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, n);
}

template <class B>
void BM_fake_quantize(benchmark::State& state) {
  auto& b = data();
  const std::size_t n = elements(state);
  for (auto _ : state) {
    quark::fake_quantize<B>(std::span<const float>(b.in.data(), n),
                            std::span<float>(b.out.data(), n));
    benchmark::DoNotOptimize(b.out.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, n);
}

/// Quark's ONNX-op semantics for MX (Inf/NaN pass-through, unclamped exponent).
template <class B>
void BM_fake_quantize_quark_compat(benchmark::State& state) {
  auto& b = data();
  const std::size_t n = elements(state);
  quark::mx_options o;
  o.compat = quark::compat_mode::quark;
  for (auto _ : state) {
    quark::fake_quantize<B>(std::span<const float>(b.in.data(), n),
                            std::span<float>(b.out.data(), n), o);
    benchmark::DoNotOptimize(b.out.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, n);
}

/// Packed storage (quantize to codes + scales), for reference; not a performance target.
template <class B>
void BM_quantize_packed(benchmark::State& state) {
  auto& b = data();
  const std::size_t n = elements(state);
  const auto l = quark::block_storage_layout_for<B>(1, n);
  std::vector<std::uint8_t> e(l.element_bytes), s(l.scale_bytes), sub(l.sub_shift_bytes);
  for (auto _ : state) {
    quark::quantize<B>(std::span<const float>(b.in.data(), n), n, {e, s, sub});
    benchmark::DoNotOptimize(e.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()) *
                          static_cast<std::int64_t>(n));
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) *
                          static_cast<std::int64_t>(n * sizeof(float)));
}

}  // namespace

BENCHMARK(BM_memcpy)->Arg(0)->Arg(1);
BENCHMARK(BM_fake_quantize<quark::mxfp4_e2m1>)->Arg(0)->Arg(1);
BENCHMARK(BM_fake_quantize<quark::mxfp8_e4m3>)->Arg(0)->Arg(1);
BENCHMARK(BM_fake_quantize<quark::mxfp8_e5m2>)->Arg(0)->Arg(1);
BENCHMARK(BM_fake_quantize<quark::mxfp6_e3m2>)->Arg(0)->Arg(1);
BENCHMARK(BM_fake_quantize<quark::mxfp6_e2m3>)->Arg(0)->Arg(1);
BENCHMARK(BM_fake_quantize<quark::mxint8>)->Arg(0)->Arg(1);
BENCHMARK(BM_fake_quantize_quark_compat<quark::mxfp4_e2m1>)->Arg(0)->Arg(1);
BENCHMARK(BM_fake_quantize<quark::bfp16>)->Arg(0)->Arg(1);
BENCHMARK(BM_fake_quantize<quark::mx9>)->Arg(0)->Arg(1);
BENCHMARK(BM_fake_quantize<quark::mx6>)->Arg(0)->Arg(1);
BENCHMARK(BM_fake_quantize<quark::mx4>)->Arg(0)->Arg(1);
BENCHMARK(BM_quantize_packed<quark::mxfp4_e2m1>)->Arg(0);
BENCHMARK(BM_memcpy)->Arg(0)->Arg(1)->Name("BM_memcpy_again");
