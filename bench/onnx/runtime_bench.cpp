// SPDX-License-Identifier: MIT
// The calibration runtime on real models (docs/bench/runtime.md):
//   BM_paddleocr_det   PaddleOCR v4 detection, 1x3x640x640, 2 threads
//   BM_paddleocr_cls   PaddleOCR mobile v2 classifier, 1x3x48x192, 2 threads
//   BM_calibration_pass/N  N samples of the classifier with an observer that keeps a running
//                      min/max per value (what a calibrator does); reports the process's peak RSS
//                      (getrusage) before and after, so N=8 and N=64 can be compared.
//   BM_check_sample    the checks every calibration sample passes before it runs (names, type,
//                      shape, no NaN / Inf) on det's 1x3x640x640 float32 input, beside
//   BM_memcpy_sample   memcpy of the same bytes: their bytes_per_second ratio is the figure.
// ONNX Runtime's time on the same inputs comes from bench/onnx/ort_time.js.
// Models: scripts/fetch-models.sh (${QUARK_DATA_CACHE:-<source>/.cache}/models).
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <random>
#include <string>

#include <benchmark/benchmark.h>

#include <quark/onnx/calib_data.hpp>
#include <quark/onnx/runtime.hpp>

#include "bench_data.hpp"
#include <sys/resource.h>

namespace fs = std::filesystem;
using quark::onnx::tensor;

namespace {

fs::path model_path(const std::string& rel) {
  fs::path base;
  if (const char* c = std::getenv("QUARK_DATA_CACHE"); c && *c) {
    base = c;
  } else {
    base = fs::path(__FILE__).parent_path().parent_path().parent_path() / ".cache";
  }
  return base / "models" / rel;
}

/// Light paper with dark word-shaped blocks, normalised to [-1, 1] as PaddleOCR does.
tensor document_image(std::int64_t h, std::int64_t w, std::uint32_t seed) {
  tensor t(quark::dtype_id::float32, {1, 3, h, w});
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> noise(-0.05f, 0.05f);
  std::uniform_int_distribution<int> word(8, 40);
  auto px = t.data<float>();
  const auto plane = static_cast<std::size_t>(h * w);
  for (auto& v : px)
    v = 0.85f + noise(rng);
  for (std::int64_t y0 = 16; y0 + 14 < h; y0 += 32) {
    for (std::int64_t x0 = 12; x0 < w - 12;) {
      const int len = word(rng);
      for (std::int64_t y = y0; y < y0 + 12; ++y) {
        for (std::int64_t x = x0; x < std::min<std::int64_t>(w - 4, x0 + len); ++x) {
          if (((x - x0) / 2) % 2 == 0 || (y - y0) % 5 == 0) {
            for (std::size_t ch = 0; ch < 3; ++ch) {
              px[ch * plane + static_cast<std::size_t>(y * w + x)] = -0.8f + noise(rng);
            }
          }
        }
      }
      x0 += len + 10;
    }
  }
  return t;
}

/// CPU time (user + system, all threads) consumed by the process so far, in ms.
double process_cpu_ms() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  auto ms = [](const timeval& t) {
    return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_usec) / 1e3;
  };
  return ms(u.ru_utime) + ms(u.ru_stime);
}

double peak_rss_mb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;  // KiB on Linux
}

void run_model(benchmark::State& state, const std::string& rel, std::int64_t h, std::int64_t w) {
  const auto path = model_path(rel);
  if (!fs::exists(path)) {
    state.SkipWithError(("missing " + path.string() + ": run scripts/fetch-models.sh").c_str());
    return;
  }
  quark::onnx::runtime rt(path, quark::onnx::runtime_options{2});
  std::map<std::string, tensor> feeds;
  feeds["x"] = document_image(h, w, 1);
  (void)rt.run(feeds);  // warm-up
  const double cpu0 = process_cpu_ms();
  for (auto _ : state) {
    auto out = rt.run(feeds);
    benchmark::DoNotOptimize(out);
  }
  // Wall time suffers when the machine is shared; CPU time of all threads per run does less.
  state.counters["process_cpu_ms_per_run"] =
      (process_cpu_ms() - cpu0) / static_cast<double>(state.iterations());
  state.counters["peak_rss_MB"] = peak_rss_mb();
}

void BM_paddleocr_det(benchmark::State& state) {
  run_model(state, "ocr-models/assets/ch_PP-OCRv4_det_infer.onnx", 640, 640);
}
BENCHMARK(BM_paddleocr_det)
    ->Unit(benchmark::kMillisecond)
    ->MinTime(quark_bench::smoke() ? 0.001 : 3.0)
    ->UseRealTime();

void BM_paddleocr_cls(benchmark::State& state) {
  run_model(state, "ocr-models/assets/ch_ppocr_mobile_v2.0_cls_infer.onnx", 48, 192);
}
BENCHMARK(BM_paddleocr_cls)
    ->Unit(benchmark::kMillisecond)
    ->MinTime(quark_bench::smoke() ? 0.001 : 2.0)
    ->UseRealTime();

/// A calibration pass: N different samples, an observer keeping min/max of every value.
void BM_calibration_pass(benchmark::State& state) {
  const auto path = model_path("ocr-models/assets/ch_PP-OCRv4_det_infer.onnx");
  if (!fs::exists(path)) {
    state.SkipWithError(("missing " + path.string() + ": run scripts/fetch-models.sh").c_str());
    return;
  }
  const auto samples = static_cast<std::uint32_t>(state.range(0));
  quark::onnx::runtime rt(path, quark::onnx::runtime_options{2});
  std::map<std::string, std::pair<float, float>, std::less<>> ranges;
  const double before = peak_rss_mb();
  for (auto _ : state) {
    for (std::uint32_t s = 0; s < samples; ++s) {
      std::map<std::string, tensor> feeds;
      feeds["x"] = document_image(320, 320, s + 1);
      auto out = rt.run(feeds, [&](std::string_view name, const tensor& t) {
        if (t.type() != quark::dtype_id::float32)
          return;
        auto it = ranges.find(name);
        if (it == ranges.end()) {
          it = ranges
                   .emplace(std::string(name), std::pair{std::numeric_limits<float>::max(),
                                                         std::numeric_limits<float>::lowest()})
                   .first;
        }
        for (float v : t.data<float>()) {
          it->second.first = std::min(it->second.first, v);
          it->second.second = std::max(it->second.second, v);
        }
      });
      benchmark::DoNotOptimize(out);
    }
  }
  state.counters["samples"] = static_cast<double>(samples);
  state.counters["observed_values"] = static_cast<double>(ranges.size());
  state.counters["peak_rss_before_MB"] = before;
  state.counters["peak_rss_after_MB"] = peak_rss_mb();
}
BENCHMARK(BM_calibration_pass)
    ->Apply([](benchmark::internal::Benchmark* b) {
      b->Arg(8);
      if (!quark_bench::smoke())  // a smoke run does the 8-sample pass only
        b->Arg(64);
    })
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);

/// det's input, 1x3x640x640 float32 (4.9 MB) of finite values.
tensor det_input() {
  tensor t(quark::dtype_id::float32, {1, 3, 640, 640});
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (auto& v : t.data<float>())
    v = u(gen);
  return t;
}

void BM_check_sample(benchmark::State& state) {
  const quark::onnx::calib_sample s{{"x", det_input()}};
  const std::vector<quark::onnx::input_signature> ins{
      {"x", quark::dtype_id::float32, {-1, 3, -1, -1}}};
  for (auto _ : state) {
    quark::onnx::check_sample(s, ins, 0);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) *
                          static_cast<std::int64_t>(s.at("x").bytes().size()));
}
BENCHMARK(BM_check_sample);

void BM_memcpy_sample(benchmark::State& state) {
  const tensor in = det_input();
  tensor out(quark::dtype_id::float32, in.shape());
  for (auto _ : state) {
    std::memcpy(out.bytes().data(), in.bytes().data(), in.bytes().size());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) *
                          static_cast<std::int64_t>(in.bytes().size()));
}
BENCHMARK(BM_memcpy_sample);

}  // namespace
