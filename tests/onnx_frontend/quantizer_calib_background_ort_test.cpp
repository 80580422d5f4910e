// SPDX-License-Identifier: MIT
// Background observation (calibrate.cpp background_observer): while the runtime computes the next
// nodes, a thread of idle priority folds the values already produced; a value that does not fit
// in its 4 MiB budget, and what is left at the end of a sample, the caller folds on the runtime's
// threads. The
// oracle is observing in place (QUARK_CALIB_BACKGROUND=0, the path the ORT tests of every
// calibration method check): the written bytes and every reported range must be identical, for
// each statistic (|x| and signed histograms that grow between samples, min/max, the second pass
// of LayerwisePercentile). Errors raised by an observer or by a kernel while values wait in the
// queue must name the culprit and leave no output file.
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <set>
#include <string>

#include <doctest/doctest.h>

// support/ort.hpp first: inside quark::test, "onnx::" must find ::onnx, not quark::onnx.
#include <quark/onnx/config.hpp>
#include <quark/onnx/presets.hpp>
#include <quark/onnx/quantizer.hpp>

#include "support/checks.hpp"
#include "support/model_files.hpp"
#include "support/ort.hpp"

namespace fs = std::filesystem;
namespace qo = quark::onnx;
using namespace quark::test;

namespace {

constexpr std::int64_t hw = 96;  // x [1, 4, 96, 96]

/// Opset 13, x [1, 4, H, W] (H, W dynamic):
///   c1 = Conv(x) 4 -> 16 (3x3)   r1 = Relu(c1)      16 x 96 x 96 floats: 576 KiB
///   c2 = Conv(r1) 16 -> 128 (1x1)                   4.5 MiB: over the queue's 4 MiB alone
///   c3 = Conv(c2) 128 -> 8 (1x1) s = Sigmoid(c3)
///   m  = Mul(c3, s)              p = AveragePool(m) 8 x 48 x 48
///   f  = Reshape(p, [1, 18432])  (fails for any other H, W: a kernel error mid-sample)
::onnx::ModelProto model() {
  model_builder b(13);
  b.input("x", onnx_type::float32, {1, 4, -1, -1});
  b.initializer("w1", onnx_type::float32, {16, 4, 3, 3}, random_floats(576, 1, -0.4f, 0.4f));
  b.initializer("b1", onnx_type::float32, {16}, random_floats(16, 2, -0.2f, 0.2f));
  b.initializer("w2", onnx_type::float32, {128, 16, 1, 1}, random_floats(2048, 3, -0.6f, 0.6f));
  b.initializer("w3", onnx_type::float32, {8, 128, 1, 1}, random_floats(1024, 4, -0.2f, 0.2f));
  b.initializer("shape", onnx_type::int64, {2}, std::vector<std::int64_t>{1, 8 * 48 * 48});
  b.node("Conv", {"x", "w1", "b1"}, {"c1"}, {attr_ints("pads", {1, 1, 1, 1})});
  b.node("Relu", {"c1"}, {"r1"});
  b.node("Conv", {"r1", "w2"}, {"c2"});
  b.node("Conv", {"c2", "w3"}, {"c3"});
  b.node("Sigmoid", {"c3"}, {"s"});
  b.node("Mul", {"c3", "s"}, {"m"});
  b.node("AveragePool", {"m"}, {"p"},
         {attr_ints("kernel_shape", {2, 2}), attr_ints("strides", {2, 2})});
  b.node("Reshape", {"p", "shape"}, {"f"});
  b.output("f", onnx_type::float32, {1, 8 * 48 * 48});
  return b.build();
}

/// Five samples whose spread grows from sample to sample (every histogram grows, both ends for
/// the signed ones), with a shifted mean so the two ends differ.
std::vector<qo::calib_sample> samples(std::int64_t h = hw) {
  std::vector<qo::calib_sample> out;
  const auto n = static_cast<std::size_t>(4 * h * h);
  for (std::uint32_t s = 0; s < 5; ++s) {
    const float w = 1.0f + 0.6f * static_cast<float>(s);
    std::vector<float> x = random_floats(n, 70 + s, -w, 1.3f * w);
    out.push_back({{"x", qo::tensor::from_floats({1, 4, h, h}, std::move(x))}});
  }
  return out;
}

/// Sets QUARK_CALIB_BACKGROUND for one scope.
struct background_mode {
  explicit background_mode(bool on) { ::setenv("QUARK_CALIB_BACKGROUND", on ? "1" : "0", 1); }
  ~background_mode() { ::unsetenv("QUARK_CALIB_BACKGROUND"); }
  background_mode(const background_mode&) = delete;
  background_mode& operator=(const background_mode&) = delete;
};

struct run_result {
  std::string bytes;
  qo::quantize_report report;
};

run_result quantize(const fs::path& in, const fs::path& out, const qo::qconfig& cfg,
                    std::vector<qo::calib_sample> calib, bool background) {
  const background_mode mode(background);
  qo::memory_reader reader(std::move(calib));
  run_result r;
  r.report = qo::quantize_model(in, out, cfg, reader);
  r.bytes = file_bytes(out);
  return r;
}

/// Error id and message of quantizing with `calib`, or ("none", "").
std::pair<std::string, std::string> quantize_error(const fs::path& in, const fs::path& out,
                                                   const qo::qconfig& cfg,
                                                   std::vector<qo::calib_sample> calib,
                                                   bool background) {
  const background_mode mode(background);
  qo::memory_reader reader(std::move(calib));
  try {
    (void)qo::quantize_model(in, out, cfg, reader);
  } catch (const qo::frontend_error& e) {
    return {e.id(), e.what()};
  }
  return {"none", ""};
}

qo::qconfig with_method(const std::string& preset, qo::calib_method m) {
  qo::qconfig cfg = qo::get_default_config(preset);
  cfg.global_config.input_tensors->calibration_method = m;
  cfg.global_config.output_tensors->calibration_method = m;
  return cfg;
}

}  // namespace

TEST_CASE("background observation writes the bytes of observing in place") {
  const fs::path dir = work_dir();
  save_proto(model(), dir / "bg.onnx");
  struct config_case {
    std::string name;
    qo::qconfig cfg;
  };
  // A8W8: |x| histograms (Percentile); XINT8 / VINT8: signed [min, max] histograms (pof2
  // MinMSE); U8S8 with MinMax: min/max; Entropy: the symmetric signed histogram;
  // LayerwisePercentile: a second pass over the samples, also in the background.
  const std::vector<config_case> cases = {
      {"A8W8", qo::get_default_config("A8W8")},
      {"XINT8", qo::get_default_config("XINT8")},
      {"VINT8", qo::get_default_config("VINT8")},
      {"U8S8 MinMax", with_method("U8S8", qo::calib_method::min_max)},
      {"A8W8 Entropy", with_method("A8W8", qo::calib_method::entropy)},
      {"A8W8 LayerwisePercentile", with_method("A8W8", qo::calib_method::layerwise_percentile)},
  };
  for (const auto& c : cases) {
    CAPTURE(c.name);
    const run_result in_place =
        quantize(dir / "bg.onnx", dir / "in_place.onnx", c.cfg, samples(), false);
    const run_result background =
        quantize(dir / "bg.onnx", dir / "background.onnx", c.cfg, samples(), true);
    CHECK(in_place.bytes.size() > 3000);  // 3648 int8 weights and the graph
    CHECK(in_place.bytes == background.bytes);
    // x, c2 (the value larger than the queue) and more had real ranges.
    CHECK(check_same_ranges(in_place.report, background.report) >= 4);
  }
}

TEST_CASE("an error of a background observer names the tensor and writes nothing") {
  const fs::path dir = work_dir();
  save_proto(model(), dir / "bg.onnx");
  // 3e38 in sample 2 (finite: a non-finite sample is refused before it runs): growing the
  // histogram range of the first two samples to it would take ~1e41 bins (numpy runs out of
  // memory), for A8W8's |x| histogram (Percentile) as for XINT8's signed pof2 MinMSE one.
  // Calibration fails naming the graph input, in both modes.
  std::vector<qo::calib_sample> bad = samples();
  {
    std::vector<float> x(bad[2].at("x").data<float>().begin(), bad[2].at("x").data<float>().end());
    x[12345] = 3e38f;
    bad[2]["x"] = qo::tensor::from_floats({1, 4, hw, hw}, std::move(x));
  }
  for (const auto& expected :
       {std::pair<std::string, std::string>{"A8W8", "quark.calib.histogram_too_large"},
        {"XINT8", "quark.calib.histogram_too_large"}}) {
    const std::string& preset = expected.first;
    const std::string& want = expected.second;
    for (const bool background : {false, true}) {
      CAPTURE(preset);
      CAPTURE(background);
      const fs::path out = dir / (preset + (background ? "_inf_bg.onnx" : "_inf_in_place.onnx"));
      const auto [id, what] =
          quantize_error(dir / "bg.onnx", out, qo::get_default_config(preset), bad, background);
      CHECK(id == want);
      CHECK(what.find("calibrating tensor 'x': ") != std::string::npos);
      CHECK(what.find(want, want.size()) == std::string::npos);  // the id once, at the start
      CHECK(!fs::exists(out));
    }
  }
}

TEST_CASE("a kernel error while values wait for their observer names the node and writes nothing") {
  const fs::path dir = work_dir();
  save_proto(model(), dir / "bg.onnx");
  // Sample 3 is 64 x 64: every node runs (and queues its output) up to the Reshape, whose fixed
  // shape no longer fits. The queued values must be dropped safely (the sanitizer build checks
  // that no job reads the freed sample).
  std::vector<qo::calib_sample> calib = samples();
  calib[3] = samples(64)[3];
  for (const bool background : {false, true}) {
    CAPTURE(background);
    const fs::path out = dir / (background ? "shape_bg.onnx" : "shape_in_place.onnx");
    const auto [id, what] =
        quantize_error(dir / "bg.onnx", out, qo::get_default_config("A8W8"), calib, background);
    CHECK(id != "none");
    CHECK(what.find("Reshape") != std::string::npos);
    CHECK(!fs::exists(out));
  }
}

namespace {

/// Sets QUARK_CALIB_FUSE for one scope ("0": observe whole values after their node).
struct fuse_mode {
  explicit fuse_mode(bool on) { ::setenv("QUARK_CALIB_FUSE", on ? "1" : "0", 1); }
  ~fuse_mode() { ::unsetenv("QUARK_CALIB_FUSE"); }
  fuse_mode(const fuse_mode&) = delete;
  fuse_mode& operator=(const fuse_mode&) = delete;
};

constexpr std::int64_t big_hw = 192;  // x [1, 8, 192, 192]: 294912 elements, over 2 * 2^17

/// x -> c = Conv 1x1 (8 -> 8) -> m = Mul(c, 1.5) -> a = Add(m, c) -> y = Mul(a, Sigmoid(a)):
/// m, a and y come from element-wise binary nodes large enough to be streamed chunk by chunk.
::onnx::ModelProto streamed_model() {
  model_builder b(13);
  b.input("x", onnx_type::float32, {1, 8, big_hw, big_hw});
  b.initializer("w", onnx_type::float32, {8, 8, 1, 1}, random_floats(64, 11, -0.5f, 0.5f));
  b.initializer("k", onnx_type::float32, {}, std::vector<float>{1.5f});
  b.node("Conv", {"x", "w"}, {"c"});
  b.node("Mul", {"c", "k"}, {"m"});
  b.node("Add", {"m", "c"}, {"a"});
  b.node("Sigmoid", {"a"}, {"s"});
  b.node("Mul", {"a", "s"}, {"y"});
  b.output("y", onnx_type::float32, {1, 8, big_hw, big_hw});
  return b.build();
}

/// Nine samples whose spread grows, so every histogram grows after its first batch: a streamed
/// |x| batch then reads its values beyond the old last edge again, a streamed signed one (past
/// the 3 or 6 batches whose extrema are found first) bins its value again. Sample 7 spreads
/// eight times wider than the others, so its counts decide the coarse power-of-two scale of
/// XINT8 (losing them changes the bytes); the last sample spreads less and grows nothing.
std::vector<qo::calib_sample> streamed_samples() {
  std::vector<qo::calib_sample> out;
  const auto n = static_cast<std::size_t>(8 * big_hw * big_hw);
  for (std::uint32_t s = 0; s < 9; ++s) {
    const float w = s == 8 ? 1.5f : s == 7 ? 40.0f : 1.0f + 0.7f * static_cast<float>(s);
    out.push_back({{"x", qo::tensor::from_floats({1, 8, big_hw, big_hw},
                                                 random_floats(n, 90 + s, -w, 1.2f * w))}});
  }
  return out;
}

}  // namespace

TEST_CASE("values streamed by their kernel give the bytes of observing whole values") {
  // calib_params::fuse: the histograms of m, a, y are binned chunk by chunk inside the Mul /
  // Add kernels. The oracle is QUARK_CALIB_FUSE=0 (whole values after each node, the path the
  // other tests check against numpy and ONNX Runtime), in place and in the background. A8W8:
  // |x| histograms (Percentile); XINT8: signed ones grown at either end (pof2 MinMSE); Entropy:
  // signed ones grown symmetrically.
  const fs::path dir = work_dir();
  save_proto(streamed_model(), dir / "streamed.onnx");
  const std::pair<const char*, qo::qconfig> configs[] = {
      {"A8W8", qo::get_default_config("A8W8")},
      {"XINT8", qo::get_default_config("XINT8")},
      {"A8W8 Entropy", with_method("A8W8", qo::calib_method::entropy)}};
  // Under the sanitizers (sanitized_build) each configuration runs in place or in the
  // background, alternating (48 s under ASan on CI96 for all six).
  bool alternate = false;
  for (auto [label, cfg] : configs) {
    cfg.extra_options.set("QuantizeAllOpTypes", true);
    alternate = !alternate;
    for (const bool background : {false, true}) {
      if (sanitized_build && background != alternate)
        continue;
      const std::string name = label;
      CAPTURE(name);
      CAPTURE(background);
      run_result whole;
      run_result streamed;
      {
        const fuse_mode off(false);
        whole = quantize(dir / "streamed.onnx", dir / "whole.onnx", cfg, streamed_samples(),
                         background);
      }
      {
        const fuse_mode on(true);
        streamed = quantize(dir / "streamed.onnx", dir / "streamed_q.onnx", cfg, streamed_samples(),
                            background);
      }
      CHECK(whole.bytes.size() > 1000);
      CHECK(streamed.bytes == whole.bytes);
      std::set<std::string> ranged;
      for (const auto& t : whole.report.tensors) {
        if (t.rmax > t.rmin)
          ranged.insert(t.name);
      }
      for (const char* t : {"m", "a", "y"})
        CHECK(ranged.contains(t));  // the streamed values were calibrated
    }
  }
  // +Inf reaching a streamed value: x = FLT_MAX in the first sample (finite, and the first
  // sample sets the histogram ranges, so nothing grows) overflows a = m + c = 2.5 c to +Inf
  // in each channel whose weight from x's channel exceeds 0.4 in magnitude. The same error
  // either way.
  std::vector<qo::calib_sample> bad = streamed_samples();
  {
    const auto v = bad[0].at("x").data<float>();
    std::vector<float> x(v.begin(), v.end());
    x[100000] = std::numeric_limits<float>::max();
    bad[0]["x"] = qo::tensor::from_floats({1, 8, big_hw, big_hw}, std::move(x));
  }
  // The inputs are finite, so the message says the float model overflows.
  std::string ids[2];
  for (const bool fuse : {false, true}) {
    const fuse_mode mode(fuse);
    const fs::path out = dir / "inf.onnx";
    const auto [id, what] =
        quantize_error(dir / "streamed.onnx", out, qo::get_default_config("A8W8"), bad, false);
    ids[fuse ? 1 : 0] = id;
    CHECK(what.find("calibrating tensor '") != std::string::npos);
    CHECK(what.find("the float model computes +-Inf here from finite calibration inputs") !=
          std::string::npos);
    CHECK(!fs::exists(out));
  }
  CHECK(ids[0] == "quark.calib.infinite_input");
  CHECK(ids[1] == ids[0]);
}
