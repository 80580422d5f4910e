// SPDX-License-Identifier: MIT
// How quantize_model's time grows with the number of nodes (docs/bench/quantizer.md, "Graph
// size"). The models are chains of tiny nodes on a 1x4x2x2 input, so the numbers are the
// quantizer's graph bookkeeping (lookups, rewrites, passes), not arithmetic:
//   BM_quantize_chain/<kind>/<preset>/N   quantize a chain of N nodes with one random sample;
//                                         Google Benchmark fits the time against N (BigO, RMS)
//     kind relu:       Relu -> Relu -> ...            (activations only)
//     kind conv_relu:  Conv 1x1 (weight, bias) -> Relu -> Conv -> ...   (weights and biases)
//     kind matmul:     MatMul (constant B) -> MatMul -> ...   with the weight-only presets
//                      UINT8_DYNAMIC_QUANT and MATMUL_NBITS (no calibration)
//   BM_memcpy_model/N                     memcpy of the serialized model of N relu nodes
// A quantizer linear in N keeps its "nodes_per_s" counter flat and fits BigO "N";
// session 50 found it quadratic (20,000 Relu nodes: 26-36 s).
#include <cstring>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>
#include <onnx/onnx_pb.h>

#include <quark/onnx/calib_data.hpp>
#include <quark/onnx/model.hpp>
#include <quark/onnx/presets.hpp>
#include <quark/onnx/quantizer.hpp>

#include "bench_data.hpp"

namespace {

enum class chain_kind { relu, conv_relu, matmul };

void add_tensor_input(::onnx::GraphProto& g, const std::string& name) {
  auto* v = g.add_input();
  v->set_name(name);
  auto* t = v->mutable_type()->mutable_tensor_type();
  t->set_elem_type(::onnx::TensorProto::FLOAT);
  for (const int d : {1, 4, 2, 2})
    t->mutable_shape()->add_dim()->set_dim_value(d);
}

/// A float initializer holding `values`.
void add_float_initializer(::onnx::GraphProto& g, const std::string& name,
                           const std::vector<std::int64_t>& dims,
                           const std::vector<float>& values) {
  auto* t = g.add_initializer();
  t->set_name(name);
  t->set_data_type(::onnx::TensorProto::FLOAT);
  for (const auto d : dims)
    t->add_dims(d);
  for (const float v : values)
    t->add_float_data(v);
}

/// A 4x4 1x1 convolution close to the identity (so that thousands of them neither vanish nor
/// overflow), different for every layer `i`.
std::vector<float> conv_weight(std::size_t i) {
  std::vector<float> w(16, 0.0f);
  for (std::size_t o = 0; o < 4; ++o)
    w[o * 4 + o] = 1.0f;
  w[(i % 4) * 4 + (i + 1) % 4] = 0.01f;
  return w;
}

/// A chain of `n` nodes (conv_relu: n / 2 Conv + Relu pairs), serialized.
std::string chain_model(chain_kind kind, std::size_t n) {
  ::onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(13);
  auto& g = *m.mutable_graph();
  g.set_name("chain");
  add_tensor_input(g, "x");
  std::string prev = "x";
  for (std::size_t i = 0; i < n; ++i) {
    const std::string out = "t" + std::to_string(i);
    auto* node = g.add_node();
    node->set_name("n" + std::to_string(i));
    node->add_input(prev);
    if (kind == chain_kind::matmul) {
      node->set_op_type("MatMul");
      const float e = 0.01f * static_cast<float>(i % 3);  // [2, 2] near the identity
      add_float_initializer(g, "w" + std::to_string(i), {2, 2}, {1.0f, e, -e, 1.0f});
      node->add_input("w" + std::to_string(i));
    } else if (kind == chain_kind::conv_relu && i % 2 == 0) {
      node->set_op_type("Conv");
      add_float_initializer(g, "w" + std::to_string(i), {4, 4, 1, 1}, conv_weight(i));
      add_float_initializer(g, "b" + std::to_string(i), {4}, {0.01f, -0.01f, 0.0f, 0.0f});
      node->add_input("w" + std::to_string(i));
      node->add_input("b" + std::to_string(i));
    } else {
      node->set_op_type("Relu");
    }
    node->add_output(out);
    prev = out;
  }
  auto* y = g.add_output();
  y->CopyFrom(g.input(0));
  y->set_name(prev);
  return m.SerializeAsString();
}

void BM_quantize_chain(benchmark::State& state, chain_kind kind, const char* preset) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const quark::onnx::model m = quark::onnx::model::from_bytes(chain_model(kind, n));
  const quark::onnx::qconfig cfg = quark::onnx::get_default_config(preset);
  for (auto _ : state) {
    quark::onnx::random_reader reader(
        {{"x", quark::dtype_id::float32, {1, 4, 2, 2}}},
        quark::onnx::random_data_options{.count = 1, .ranges = {{"x", {-1.0, 1.0}}}});
    quark::onnx::model q = quark::onnx::quantize_model(m, cfg, reader);
    benchmark::DoNotOptimize(q);
  }
  state.SetComplexityN(state.range(0));
  state.counters["nodes_per_s"] =
      benchmark::Counter(static_cast<double>(n), benchmark::Counter::kIsIterationInvariantRate);
}

void BM_memcpy_model(benchmark::State& state) {
  const std::string bytes = chain_model(chain_kind::relu, static_cast<std::size_t>(state.range(0)));
  std::vector<char> dst(bytes.size());
  for (auto _ : state) {
    std::memcpy(dst.data(), bytes.data(), bytes.size());
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) *
                          static_cast<std::int64_t>(bytes.size()));
}

void sizes(benchmark::internal::Benchmark* b) {
  if (quark_bench::smoke()) {
    b->Arg(16)->Arg(32);
    return;
  }
  for (const int n : {1000, 2000, 4000, 8000})
    b->Arg(n);
}

void register_all() {
  const std::vector<const char*> static_presets{"A8W8", "XINT8", "VINT8"};
  const std::vector<const char*> weight_presets{"UINT8_DYNAMIC_QUANT", "MATMUL_NBITS"};
  for (const auto& [kind, label] :
       {std::pair{chain_kind::relu, "relu"}, std::pair{chain_kind::conv_relu, "conv_relu"},
        std::pair{chain_kind::matmul, "matmul"}}) {
    for (const char* preset : kind == chain_kind::matmul ? weight_presets : static_presets) {
      benchmark::RegisterBenchmark(
          ("BM_quantize_chain/" + std::string(label) + "/" + preset).c_str(),
          [kind = kind, preset](benchmark::State& s) { BM_quantize_chain(s, kind, preset); })
          ->Apply(sizes)
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime()
          ->Complexity();
    }
  }
  benchmark::RegisterBenchmark("BM_memcpy_model", BM_memcpy_model)->Apply(sizes);
}

const int registered = (register_all(), 0);

}  // namespace
