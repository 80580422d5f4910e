// SPDX-License-Identifier: MIT
// Bandwidth of fake_quantize / quantize / dequantize on 64 MiB float32 tensors (16 Mi elements),
// each reported beside memcpy of the same bytes in the same run. Bytes are counted as moved
// (read + written): fake-quant 8 B/element, quantize and dequantize int8 5 B/element, memcpy
// 2 B per byte copied. Compare the bytes_per_second columns.
#include <cstdint>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include <benchmark/benchmark.h>

#include <quark/quant/fake_quant.hpp>
#include <quark/quant/quantize.hpp>

namespace {

constexpr std::size_t rows = 4096;
constexpr std::size_t cols = 4096;
constexpr std::size_t n = rows * cols;  // 16 Mi floats = 64 MiB

struct buffers {
  std::vector<float> x, y;
  std::vector<std::int8_t> q;
  std::vector<float> scale_rows, scale_cols, scale_groups;
  std::vector<std::int32_t> zp_rows, zp_cols;
  buffers()
      : x(n),
        y(n),
        q(n),
        scale_rows(rows),
        scale_cols(cols),
        scale_groups(n / 128),
        zp_rows(rows),
        zp_cols(cols) {
    std::mt19937 rng(42);
    std::normal_distribution<float> d(0.0f, 1.0f);
    for (auto& v : x)
      v = d(rng);
    for (std::size_t k = 0; k < rows; ++k)
      scale_rows[k] = 0.02f + 0.001f * static_cast<float>(k % 7);
    for (std::size_t k = 0; k < cols; ++k)
      scale_cols[k] = 0.03f + 0.001f * static_cast<float>(k % 5);
    for (auto& s : scale_groups)
      s = 0.4f;
    for (std::size_t k = 0; k < rows; ++k)
      zp_rows[k] = static_cast<std::int32_t>(k % 5) - 2;
    for (std::size_t k = 0; k < cols; ++k)
      zp_cols[k] = static_cast<std::int32_t>(k % 3) - 1;
    std::memset(y.data(), 0, n * sizeof(float));
    std::memset(q.data(), 0, n);
  }
};

buffers& buf() {
  static buffers b;
  return b;
}

const quark::tensor_shape shape{rows, cols};
const float tensor_scale = 0.0235f;
const std::int32_t tensor_zp = 3;

void BM_memcpy(benchmark::State& st) {
  auto& b = buf();
  const auto threads = static_cast<unsigned>(st.range(0));
  for (auto _ : st) {
    if (threads == 1) {
      std::memcpy(b.y.data(), b.x.data(), n * sizeof(float));
    } else {
      std::thread t([&] { std::memcpy(b.y.data(), b.x.data(), n / 2 * sizeof(float)); });
      std::memcpy(b.y.data() + n / 2, b.x.data() + n / 2, n / 2 * sizeof(float));
      t.join();
    }
    benchmark::ClobberMemory();
  }
  st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations() * n * 8));
}
BENCHMARK(BM_memcpy)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);

template <class D, quark::quant_policy P = quark::quant_policy{}>
void run_fake(benchmark::State& st, const quark::tensor_qparams<D>& p) {
  auto& b = buf();
  const quark::threading t{static_cast<unsigned>(st.range(0))};
  for (auto _ : st) {
    quark::fake_quantize<D, P>(shape, b.x, p, b.y, t);
    benchmark::ClobberMemory();
  }
  st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations() * n * 8));
}

void BM_fake_quant_per_tensor_int8(benchmark::State& st) {
  run_fake<std::int8_t>(st, {std::span(&tensor_scale, 1), std::span(&tensor_zp, 1)});
}
void BM_fake_quant_per_tensor_int8_reciprocal(benchmark::State& st) {
  run_fake<std::int8_t, quark::policies::torch_fake_quant>(
      st, {std::span(&tensor_scale, 1), std::span(&tensor_zp, 1)});
}
void BM_fake_quant_per_channel_axis0_int8(benchmark::State& st) {
  auto& b = buf();
  run_fake<std::int8_t>(st, {b.scale_rows, b.zp_rows, quark::per_channel{0}});
}
void BM_fake_quant_per_channel_last_int8(benchmark::State& st) {
  auto& b = buf();
  run_fake<std::int8_t>(st, {b.scale_cols, b.zp_cols, quark::per_channel{-1}});
}
void BM_fake_quant_per_group128_int4(benchmark::State& st) {
  auto& b = buf();
  run_fake<quark::int4>(st, {b.scale_groups, {}, quark::per_block{-1, 128}});
}
BENCHMARK(BM_fake_quant_per_tensor_int8)
    ->Arg(1)
    ->Arg(2)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_fake_quant_per_tensor_int8_reciprocal)
    ->Arg(1)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_fake_quant_per_channel_axis0_int8)
    ->Arg(1)
    ->Arg(2)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_fake_quant_per_channel_last_int8)
    ->Arg(1)
    ->Arg(2)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_fake_quant_per_group128_int4)
    ->Arg(1)
    ->Arg(2)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

void BM_quantize_int8(benchmark::State& st) {
  auto& b = buf();
  const quark::tensor_qparams<std::int8_t> p{std::span(&tensor_scale, 1), std::span(&tensor_zp, 1)};
  const quark::threading t{static_cast<unsigned>(st.range(0))};
  for (auto _ : st) {
    quark::quantize<std::int8_t>(shape, b.x, p, std::span(b.q), t);
    benchmark::ClobberMemory();
  }
  st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations() * n * 5));
}
void BM_dequantize_int8(benchmark::State& st) {
  auto& b = buf();
  const quark::tensor_qparams<std::int8_t> p{std::span(&tensor_scale, 1), std::span(&tensor_zp, 1)};
  const quark::threading t{static_cast<unsigned>(st.range(0))};
  for (auto _ : st) {
    quark::dequantize<std::int8_t>(shape, std::span<const std::int8_t>(b.q), p, b.y, t);
    benchmark::ClobberMemory();
  }
  st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations() * n * 5));
}
/// The floor for any float32 -> int8 loop on this machine: a bare truncating conversion, no
/// scale, no rounding, no clamp (not a correct quantizer; context for BM_quantize_int8).
void BM_bare_convert_int8(benchmark::State& st) {
  auto& b = buf();
  for (auto _ : st) {
    const float* x = b.x.data();
    std::int8_t* q = b.q.data();
    for (std::size_t i = 0; i < n; ++i)
      q[i] = static_cast<std::int8_t>(static_cast<int>(x[i]));
    benchmark::ClobberMemory();
  }
  st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations() * n * 5));
}
BENCHMARK(BM_bare_convert_int8)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_quantize_int8)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_dequantize_int8)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace
