// SPDX-License-Identifier: MIT
// Derived histograms (calib_params::derive): a power-of-two MinMSE histogram of a value that an
// element-wise node makes from another observed value and a scalar constant is derived from that
// value's batch (histogram_observer::observe_mapped) instead of being binned. The oracle is
// binning every value (QUARK_CALIB_DERIVE=0): the written bytes and every reported range must be
// identical, with and without background observation, on a graph with the chains of PP-OCRv4
// det (Conv, a learnable affine x * w0 + w1, hardswish, x / 6, another affine) and the other
// scalar forms (Sub both ways, a Constant node's value_float, a decreasing map), over samples
// whose spread grows (every range grows at both ends). The calibration profile must report
// derived batches, so the test fails if derivation never happens.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <regex>
#include <string>

#include <doctest/doctest.h>

#include <unistd.h>

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

constexpr std::int64_t hw = 64;

/// Opset 13, x [1, 4, H, W]:
///   c = Conv(x) 4 -> 16          a1 = Mul(w0, c)   a2 = Add(a1, w1)       (learnable affine)
///   p = Add(a2, 3)  q = Clip(p, 0, 6)  h = Mul(a2, q)  d = Div(h, 6)       (hardswish, / 6)
///   e1 = Mul(d, k)  e2 = Sub(e1, s)  e3 = Sub(t, e2)                        (Sub both ways)
///   c2 = Conv(e3) 16 -> 8        n = Mul(c2, -0.5) (k from a Constant node's value_float)
::onnx::ModelProto model() {
  model_builder b(13);
  b.input("x", onnx_type::float32, {1, 4, -1, -1});
  b.initializer("w", onnx_type::float32, {16, 4, 3, 3}, random_floats(576, 1, -0.4f, 0.4f));
  b.initializer("bias", onnx_type::float32, {16}, random_floats(16, 2, -0.2f, 0.2f));
  b.initializer("w0", onnx_type::float32, {1}, std::vector<float>{1.37f});
  b.initializer("w1", onnx_type::float32, {1}, std::vector<float>{-0.21f});
  b.initializer("three", onnx_type::float32, {}, std::vector<float>{3.0f});
  b.initializer("zero", onnx_type::float32, {}, std::vector<float>{0.0f});
  b.initializer("six", onnx_type::float32, {}, std::vector<float>{6.0f});
  b.initializer("s", onnx_type::float32, {1, 1, 1, 1}, std::vector<float>{0.125f});
  b.initializer("t", onnx_type::float32, {}, std::vector<float>{2.5f});
  b.initializer("v", onnx_type::float32, {8, 16, 1, 1}, random_floats(128, 3, -0.5f, 0.5f));
  b.initializer("half", onnx_type::float32, {}, std::vector<float>{-0.5f});
  b.node("Constant", {}, {"k"}, {attr_float("value_float", 0.75f)});
  b.node("Conv", {"x", "w", "bias"}, {"c"}, {attr_ints("pads", {1, 1, 1, 1})});
  b.node("Mul", {"w0", "c"}, {"a1"});
  b.node("Add", {"a1", "w1"}, {"a2"});
  b.node("Add", {"a2", "three"}, {"p"});
  b.node("Clip", {"p", "zero", "six"}, {"q"});
  b.node("Mul", {"a2", "q"}, {"h"});
  b.node("Div", {"h", "six"}, {"d"});
  b.node("Mul", {"d", "k"}, {"e1"});
  b.node("Sub", {"e1", "s"}, {"e2"});
  b.node("Sub", {"t", "e2"}, {"e3"});
  b.node("Conv", {"e3", "v"}, {"c2"});
  b.node("Mul", {"c2", "half"}, {"n"});
  b.output("n", onnx_type::float32, {1, 8, -1, -1});
  return b.build();
}

/// Six samples whose spread grows (every histogram grows at both ends now and then), with a
/// shifted mean.
std::vector<qo::calib_sample> samples() {
  std::vector<qo::calib_sample> out;
  const auto n = static_cast<std::size_t>(4 * hw * hw);
  for (std::uint32_t s = 0; s < 6; ++s) {
    const float w = 1.0f + 0.3f * static_cast<float>(s % 4);
    std::vector<float> x = random_floats(n, 90 + s, -w, 1.2f * w);
    out.push_back({{"x", qo::tensor::from_floats({1, 4, hw, hw}, std::move(x))}});
  }
  return out;
}

struct run_result {
  std::string bytes;
  qo::quantize_report report;
  std::string profile;                            ///< stderr of the run (QUARK_CALIB_PROFILE)
  std::map<std::string, std::string> histograms;  ///< SaveTensorHistFig's files, by name
};

/// Quantizes `in` into `out`, with SaveTensorHistFig writing every calibrated histogram into
/// `work`/tensor_hist (the working directory of the run).
run_result quantize(const fs::path& in, const fs::path& out, const fs::path& work, qo::qconfig cfg,
                    bool derive, bool background) {
  const scoped_env d("QUARK_CALIB_DERIVE", derive ? "1" : "0");
  const scoped_env b("QUARK_CALIB_BACKGROUND", background ? "1" : "0");
  const scoped_env p("QUARK_CALIB_PROFILE", "1");
  qo::memory_reader reader(samples());
  cfg.extra_options.set("SaveTensorHistFig", true);
  fs::remove_all(work);
  fs::create_directories(work);
  run_result r;
  // The profile lines go to stderr: into a file for this run.
  const fs::path err = out.string() + ".stderr";
  std::fflush(stderr);
  const int saved = ::dup(2);
  REQUIRE(saved >= 0);
  FILE* f = std::fopen(err.c_str(), "w");
  REQUIRE(f != nullptr);
  ::dup2(::fileno(f), 2);
  const fs::path old_cwd = fs::current_path();
  fs::current_path(work);
  auto restore = [&] {
    std::fflush(stderr);
    ::dup2(saved, 2);
    ::close(saved);
    std::fclose(f);
    fs::current_path(old_cwd);
  };
  try {
    r.report = qo::quantize_model(in, out, cfg, reader);
  } catch (...) {
    restore();
    throw;
  }
  restore();
  r.bytes = file_bytes(out);
  r.profile = file_bytes(err);
  for (const auto& e : fs::directory_iterator(work / "tensor_hist"))
    r.histograms[e.path().filename().string()] = file_bytes(e.path());
  return r;
}

/// "N batches derived" of the calibration profile, or -1 when the line is missing.
long derived_batches(const std::string& profile) {
  static const std::regex re(
      "(\\d+) values derived from another one's batch where exact: "
      "(\\d+) batches derived");
  std::smatch m;
  if (!std::regex_search(profile, m, re))
    return -1;
  return std::stol(m[2].str());
}

}  // namespace

TEST_CASE("derived histograms write the bytes of binning every value") {
  const fs::path dir = work_dir();
  save_proto(model(), dir / "derive.onnx");
  for (const std::string preset : {"XINT8", "VINT8"}) {
    for (const bool background : {false, true}) {
      CAPTURE(preset);
      CAPTURE(background);
      const qo::qconfig cfg = qo::get_default_config(preset);
      const run_result binned = quantize(dir / "derive.onnx", dir / "binned.onnx",
                                         dir / "binned_work", cfg, false, background);
      const run_result derived = quantize(dir / "derive.onnx", dir / "derived.onnx",
                                          dir / "derived_work", cfg, true, background);
      CHECK(binned.bytes.size() > 800);
      CHECK(binned.bytes == derived.bytes);
      // Every histogram the same, edges and counts (the ranges alone could hide a wrong count).
      CHECK(binned.histograms.size() >= 8);
      CHECK(binned.histograms.size() == derived.histograms.size());
      for (const auto& entry : binned.histograms) {
        const std::string& name = entry.first;
        CAPTURE(name);
        CHECK(derived.histograms.count(name) == 1);
        if (derived.histograms.count(name) == 1)
          CHECK(derived.histograms.at(name) == entry.second);
      }
      CHECK(check_same_ranges(binned.report, derived.report) >= 6);
      // Binning every value derives nothing; deriving takes most batches of the values the
      // preset observes among a1, a2, d, e1, e2, e3, n (6 samples each).
      CAPTURE(derived.profile);
      CHECK(derived_batches(binned.profile) == -1);
      const long n = derived_batches(derived.profile);
      const std::string mode = background ? "background" : "in place";
      MESSAGE(preset << " " << mode << ": " << n << " batches derived");
      CHECK(n >= 12);
    }
  }
}
