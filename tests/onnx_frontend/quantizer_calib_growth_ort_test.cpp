// SPDX-License-Identifier: MIT
// Growing |x| histograms on the threaded observation path (calibrate.cpp, through
// histogram_observer::begin_pieces ... add_pieces): a batch that grows the range keeps the counts
// each thread made on the old edges (the grown edges only append) and reads again only its
// values at or beyond the old last edge. The oracle is the header's sequential
// histogram_observer fed the same samples: the histogram SaveTensorHistFig writes (edges and
// counts) and the calibrated range must be bit-identical. The samples put the growth in the
// second half of the tensor (the second thread's chunks on two threads); the first half stays
// strictly inside the range, except in one growing sample where it holds a value exactly on the
// old last edge (the first batch's maximum |x|), which moves from the old last bin to the first
// appended one.
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <vector>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

// support/ort.hpp first: inside quark::test, "onnx::" must find ::onnx, not quark::onnx.
#include <quark/calib/percentile_calibrator.hpp>
#include <quark/observer/histogram_observer.hpp>
#include <quark/onnx/presets.hpp>
#include <quark/onnx/quantizer.hpp>

#include "support/model_files.hpp"
#include "support/ort.hpp"

namespace fs = std::filesystem;
namespace qo = quark::onnx;
using namespace quark::test;

TEST_CASE("a growing |x| histogram keeps its counts below the old last edge exactly") {
  constexpr std::int64_t c = 4, hw = 128;  // 65536 values: the threaded path
  constexpr std::size_t n = static_cast<std::size_t>(c * hw * hw);
  model_builder b(13);
  b.input("x", onnx_type::float32, {1, c, hw, hw});
  b.initializer("w", onnx_type::float32, {2, c, 1, 1}, random_floats(8, 1, -0.5f, 0.5f));
  b.node("Conv", {"x", "w"}, {"y"});
  b.output("y", onnx_type::float32, {1, 2, hw, hw});
  const fs::path dir = work_dir();
  save_proto(b.build(), dir / "growth.onnx");
  // Sample 0: (-1, 1) (sets the edges; its maximum |x| m is the last edge). Samples 1, 2:
  // (-0.5, 0.5), no growth. Sample 3: first half (-0.5, 0.5) plus one -m (on the old last edge),
  // second half (-2, 2): grows. Sample 4: first half (-0.5, 0.5), second half (-3, 3): grows.
  std::vector<std::vector<float>> data;
  const float half_w[] = {1.0f, 0.5f, 0.5f, 0.5f, 0.5f};
  const float grow_w[] = {1.0f, 0.5f, 0.5f, 2.0f, 3.0f};
  for (std::uint32_t s = 0; s < 5; ++s) {
    std::vector<float> v = random_floats(n / 2, 10 + s, -half_w[s], half_w[s]);
    const std::vector<float> hi = random_floats(n - n / 2, 20 + s, -grow_w[s], grow_w[s]);
    v.insert(v.end(), hi.begin(), hi.end());
    data.push_back(std::move(v));
  }
  float m = 0.0f;
  for (const float v : data[0])
    m = std::fmax(m, std::fabs(v));
  data[3][5] = -m;
  std::vector<qo::calib_sample> calib;
  for (const auto& v : data)
    calib.push_back({{"x", qo::tensor::from_floats({1, c, hw, hw}, v)}});
  // Oracle: one sequential |x| histogram (A8W8: Percentile 99.999, symmetric, 2048 bins).
  quark::histogram_observer h{{.mode = quark::histogram_mode::absolute, .num_bins = 2048}};
  for (const auto& v : data)
    h.observe(v);
  const quark::calibrated_range want = quark::percentile_calibrator{99.999}(h.stats());
  REQUIRE(h.stats().edges[2048] == static_cast<double>(m));  // growth came after sample 0 only
  // In place (QUARK_CALIB_BACKGROUND=0), x is binned by the runtime's two threads; with
  // background observation, by the background thread alone through the same pieces.
  for (const char* background : {"0", "1"}) {
    CAPTURE(background);
    ::setenv("QUARK_CALIB_BACKGROUND", background, 1);
    qo::memory_reader reader(calib);
    qo::qconfig cfg = qo::get_default_config("A8W8");
    cfg.extra_options.set("SaveTensorHistFig", true);  // tensor_hist/ in the working directory
    const fs::path old_cwd = fs::current_path();
    fs::current_path(dir);
    const qo::quantize_report r =
        qo::quantize_model(dir / "growth.onnx", dir / "growth_q.onnx", cfg, reader);
    fs::current_path(old_cwd);
    std::ifstream in(dir / "tensor_hist" / "x.json");
    REQUIRE(in);
    const nlohmann::json j = nlohmann::json::parse(in);
    CHECK(j.at("edges").get<std::vector<double>>() == h.stats().edges);
    CHECK(j.at("counts").get<std::vector<std::uint64_t>>() == h.stats().counts);
    bool found = false;
    for (const auto& t : r.tensors) {
      if (t.name != "x")
        continue;
      found = true;
      CHECK(t.rmin == want.min);
      CHECK(t.rmax == want.max);
    }
    CHECK(found);
    ::unsetenv("QUARK_CALIB_BACKGROUND");
  }
}
