// SPDX-License-Identifier: MIT
// A MatMul with a constant weight through quark::onnx::runtime, float, after dynamic
// quantization (UINT8_DYNAMIC_QUANT: DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul) and
// as 4-bit weights (MATMUL_NBITS: com.microsoft MatMulNBits, blocks of 128), against memcpy of the
// bytes the float product reads and writes (A, B, Y in float32), in the same run
// (docs/bench/quantizer.md, "Dynamic quantization" and "MatMulNBits"):
//   BM_matmul_float/M/K/N     Y = A B, A [M, K] activations, B [K, N] weights
//   BM_matmul_dynamic/M/K/N   the same model quantized by quark::onnx::quantize_model
//   BM_matmul_nbits/M/K/N     the same model with MATMUL_NBITS
//   BM_memcpy/M/K/N           (M K + K N + M N) * 4 bytes copied
// The runtime uses 2 threads (as bench/onnx/runtime_bench.cpp).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>
#include <onnx/onnx_pb.h>

#include <quark/onnx/config.hpp>
#include <quark/onnx/model.hpp>
#include <quark/onnx/presets.hpp>
#include <quark/onnx/quantizer.hpp>
#include <quark/onnx/runtime.hpp>

#include "bench_data.hpp"

namespace {

using quark::onnx::tensor;

std::vector<float> normal(std::size_t n, std::uint32_t seed, float sd) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, sd);
  std::vector<float> v(n);
  for (auto& x : v)
    x = d(g);
  return v;
}

/// Y = MatMul(A[M, K], B[K, N]) with B an initializer, opset 13.
quark::onnx::model matmul_model(std::int64_t m, std::int64_t k, std::int64_t n) {
  ::onnx::ModelProto p;
  p.set_ir_version(7);
  p.add_opset_import()->set_version(13);
  auto* g = p.mutable_graph();
  g->set_name("matmul");
  auto io = [](::onnx::ValueInfoProto* v, const char* name, std::vector<std::int64_t> dims) {
    v->set_name(name);
    auto* t = v->mutable_type()->mutable_tensor_type();
    t->set_elem_type(::onnx::TensorProto::FLOAT);
    for (auto d : dims)
      t->mutable_shape()->add_dim()->set_dim_value(d);
  };
  io(g->add_input(), "A", {m, k});
  io(g->add_output(), "Y", {m, n});
  auto* b = g->add_initializer();
  b->set_name("B");
  b->set_data_type(::onnx::TensorProto::FLOAT);
  b->add_dims(k);
  b->add_dims(n);
  const std::vector<float> w = normal(static_cast<std::size_t>(k * n), 2, 0.05f);
  b->set_raw_data(std::string(reinterpret_cast<const char*>(w.data()), w.size() * sizeof(float)));
  auto* node = g->add_node();
  node->set_op_type("MatMul");
  node->set_name("mm");
  node->add_input("A");
  node->add_input("B");
  node->add_output("Y");
  const std::string bytes = p.SerializeAsString();
  return quark::onnx::model::from_bytes(std::string_view(bytes));
}

void run(benchmark::State& state, const char* preset) {
  const std::int64_t m = state.range(0), k = state.range(1), n = state.range(2);
  quark::onnx::model f = matmul_model(m, k, n);
  if (preset != nullptr) {
    quark::onnx::memory_reader none({});
    f = quark::onnx::quantize_model(f, quark::onnx::get_default_config(preset), none);
  }
  quark::onnx::runtime rt(f, quark::onnx::runtime_options{2});
  std::map<std::string, tensor> feeds;
  feeds["A"] = tensor::from_floats({m, k}, normal(static_cast<std::size_t>(m * k), 1, 1.0f));
  (void)rt.run(feeds);  // warm-up
  for (auto _ : state) {
    auto out = rt.run(feeds);
    benchmark::DoNotOptimize(out);
  }
  state.counters["GMAC/s"] = benchmark::Counter(
      static_cast<double>(m * k * n) * static_cast<double>(state.iterations()) / 1e9,
      benchmark::Counter::kIsRate);
}

void BM_matmul_float(benchmark::State& state) {
  run(state, nullptr);
}
void BM_matmul_dynamic(benchmark::State& state) {
  run(state, "UINT8_DYNAMIC_QUANT");
}
void BM_matmul_nbits(benchmark::State& state) {
  run(state, "MATMUL_NBITS");
}
void BM_memcpy(benchmark::State& state) {
  const auto m = static_cast<std::size_t>(state.range(0));
  const auto k = static_cast<std::size_t>(state.range(1));
  const auto n = static_cast<std::size_t>(state.range(2));
  const std::size_t bytes = (m * k + k * n + m * n) * sizeof(float);
  std::vector<char> src(bytes, 1), dst(bytes);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), bytes);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(bytes) * state.iterations());
}

void shapes(benchmark::internal::Benchmark* b) {
  // A transformer's feed-forward layer over 128 tokens, one token through it, a square layer.
  b->Args({128, 768, 3072})->Args({1, 768, 3072})->Args({256, 256, 256});
  // One token through a 4096 x 4096 layer: 64 MiB of float weights, past the caches.
  if (!quark_bench::smoke())
    b->Args({1, 4096, 4096});
  b->Unit(benchmark::kMicrosecond)->UseRealTime();
  b->MinTime(quark_bench::smoke() ? 0.001 : 1.0);
}

}  // namespace

BENCHMARK(BM_matmul_float)->Apply(shapes);
BENCHMARK(BM_matmul_dynamic)->Apply(shapes);
BENCHMARK(BM_matmul_nbits)->Apply(shapes);
BENCHMARK(BM_memcpy)->Apply(shapes);
