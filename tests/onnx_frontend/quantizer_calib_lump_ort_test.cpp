// SPDX-License-Identifier: MIT
// Lumped Percentile histograms (calib_params::lump): once an |x| histogram holds enough counts,
// later values far below the percentile are only counted. The oracle is QUARK_CALIB_LUMP=0
// (every count exact: the path the ORT and numpy tests of Percentile check): the written bytes
// must be identical, whether the values are streamed by their kernel or observed whole, in place
// or in the background, and also when the percentile cannot be decided from the lumped counts
// (then the tensor is observed again, unlumped, in a second pass; a counting reader shows the
// pass). A reader that cannot rewind is never lumped and read once.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include <fcntl.h>
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

/// Hands out samples, counting them; rewinds only if `rewindable`.
class counting_reader final : public qo::calibration_data_reader {
 public:
  counting_reader(std::vector<qo::calib_sample> s, bool rewindable)
      : samples_(std::move(s)), rewindable_(rewindable) {}
  std::optional<qo::calib_sample> next() override {
    if (pos_ == samples_.size())
      return std::nullopt;
    ++reads;
    return samples_[pos_++];
  }
  void rewind() override {
    if (!rewindable_)
      qo::calibration_data_reader::rewind();  // throws
    pos_ = 0;
  }
  [[nodiscard]] bool can_rewind() const noexcept override { return rewindable_; }
  std::size_t reads = 0;

 private:
  std::vector<qo::calib_sample> samples_;
  bool rewindable_;
  std::size_t pos_ = 0;
};

/// x [1, 4, H, W] (H, W dynamic) -> c = Conv 1x1 (4 -> 8) -> m = Mul(c, 1.5) -> a = Add(m, c)
/// -> y = Relu(a): large enough (from 2^18 values) for Mul and Add to stream their chunks.
::onnx::ModelProto lump_model() {
  model_builder b(13);
  b.input("x", onnx_type::float32, {1, 4, -1, -1});
  b.initializer("w", onnx_type::float32, {8, 4, 1, 1}, random_floats(32, 21, -0.5f, 0.5f));
  b.initializer("k", onnx_type::float32, {}, std::vector<float>{1.5f});
  b.node("Conv", {"x", "w"}, {"c"});
  b.node("Mul", {"c", "k"}, {"m"});
  b.node("Add", {"m", "c"}, {"a"});
  b.node("Relu", {"a"}, {"y"});
  b.output("y", onnx_type::float32, {1, 8, -1, -1});
  return b.build();
}

/// A sample of side `h` with values in [-w, 1.2 w].
qo::calib_sample sample(std::int64_t h, float w, std::uint32_t seed) {
  const auto n = static_cast<std::size_t>(4 * h * h);
  return {{"x", qo::tensor::from_floats({1, 4, h, h}, random_floats(n, seed, -w, 1.2f * w))}};
}

struct run_result {
  std::string bytes;
  std::size_t reads = 0;
  std::size_t lumped = 0;  ///< histograms lumped (QUARK_CALIB_PROFILE's count)
};

/// Quantizes with QUARK_CALIB_PROFILE set, stderr (the profile) captured into a file.
run_result quantize(const fs::path& in, const fs::path& out, const qo::qconfig& cfg,
                    const std::vector<qo::calib_sample>& calib, bool rewindable) {
  counting_reader reader(calib, rewindable);
  const fs::path log = out.string() + ".stderr";
  std::fflush(stderr);
  const int saved = ::dup(2);
  const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  REQUIRE(saved >= 0);
  REQUIRE(fd >= 0);
  ::dup2(fd, 2);
  ::close(fd);
  {
    const scoped_env profile("QUARK_CALIB_PROFILE", "1");
    try {
      (void)qo::quantize_model(in, out, cfg, reader);
    } catch (...) {
      std::fflush(stderr);
      ::dup2(saved, 2);
      ::close(saved);
      throw;
    }
  }
  std::fflush(stderr);
  ::dup2(saved, 2);
  ::close(saved);
  run_result r{file_bytes(out), reader.reads, 0};
  const std::string text = file_bytes(log);
  const std::string key = " percentile histograms lumped";
  const auto at = text.find(key);
  REQUIRE(at != std::string::npos);
  const auto start = text.rfind(' ', at - 1);
  r.lumped = std::stoul(text.substr(start + 1, at - start - 1));
  return r;
}

}  // namespace

TEST_CASE("lumped Percentile histograms write the bytes of unlumped ones") {
  // A8W8, U8S8: |x| histograms (CalibTensorRangeSymmetric is True for Percentile); U8S8 and
  // S8S8 (99.9999) with CalibTensorRangeSymmetric False: signed ones, lumped in the middle.
  const fs::path dir = work_dir();
  save_proto(lump_model(), dir / "lump.onnx");
  // Eight samples of 256 x 256 whose spread grows, then shrinks; sample 5 is ten times wider.
  std::vector<qo::calib_sample> calib;
  for (std::uint32_t s = 0; s < 8; ++s)
    calib.push_back(sample(256, s == 5 ? 12.0f : 1.0f + 0.3f * static_cast<float>(s % 4), 40 + s));
  // Under the sanitizers (sanitized_build) each preset runs one of the four fuse x background
  // settings, each setting once: 8 quantizations instead of 32 (81 s under ASan on CI96).
  int combo = -1;
  for (const std::string preset : {"A8W8", "U8S8", "U8S8 signed", "S8S8 signed"}) {
    const bool sym = preset.find("signed") == std::string::npos;
    qo::qconfig cfg = qo::get_default_config(preset.substr(0, 4));
    cfg.extra_options.set("QuantizeAllOpTypes", true);
    cfg.extra_options.set("CalibTensorRangeSymmetric", sym);
    ++combo;
    for (const std::string fuse : {"0", "1"}) {
      for (const std::string background : {"0", "1"}) {
        if (sanitized_build && (fuse == "1") != (combo / 2 == 1))
          continue;
        if (sanitized_build && (background == "1") != (combo % 2 == 1))
          continue;
        CAPTURE(preset);
        CAPTURE(fuse);
        CAPTURE(background);
        const scoped_env f("QUARK_CALIB_FUSE", fuse.c_str());
        const scoped_env b("QUARK_CALIB_BACKGROUND", background.c_str());
        run_result exact;
        {
          const scoped_env off("QUARK_CALIB_LUMP", "0");
          exact = quantize(dir / "lump.onnx", dir / "exact.onnx", cfg, calib, true);
        }
        const run_result lumped =
            quantize(dir / "lump.onnx", dir / "lumped.onnx", cfg, calib, true);
        CHECK(exact.bytes.size() > 500);
        CHECK(lumped.bytes == exact.bytes);
        CHECK(exact.reads == calib.size());
        CHECK(lumped.reads == calib.size());  // decided from the lumped counts: one pass
        CHECK(exact.lumped == 0);
        CHECK(lumped.lumped >= 3);  // of x, c, m, a, y those observed after the first sample
      }
    }
  }
}

TEST_CASE("a lumped percentile it cannot decide is observed again unlumped, with the same bytes") {
  // Percentile 99.9 lumps the bins under the first sample's top 10% of |x| (100 times the 0.1%
  // the percentile leaves above), or a signed histogram's bins between its bottom and top 10%
  // (100 times the 0.05% it cuts off each end). The first sample (64 x 64, wide) sets them; the
  // second, ten times narrower, puts the percentile deep inside them once it holds more than
  // 100 times as many values (|x|: 720 x 720, 126 times) or 200 times (signed: 960 x 960, 225
  // times). Then every histogram is observed again without lumping, so the reader is read twice,
  // and the bytes are those of QUARK_CALIB_LUMP=0. A reader that cannot rewind is not lumped:
  // read once, the same bytes.
  const fs::path dir = work_dir();
  save_proto(lump_model(), dir / "lump.onnx");
  for (const bool sym : {true, false}) {
    CAPTURE(sym);
    qo::qconfig cfg = qo::get_default_config("U8S8");
    cfg.extra_options.set("QuantizeAllOpTypes", true);
    cfg.extra_options.set("CalibTensorRangeSymmetric", sym);
    cfg.extra_options.set("Percentile", 99.9);
    const std::vector<qo::calib_sample> calib{sample(64, 10.0f, 7),
                                              sample(sym ? 720 : 960, 1.0f, 8)};
    run_result exact;
    {
      const scoped_env off("QUARK_CALIB_LUMP", "0");
      exact = quantize(dir / "lump.onnx", dir / "exact.onnx", cfg, calib, true);
    }
    const run_result again = quantize(dir / "lump.onnx", dir / "again.onnx", cfg, calib, true);
    const run_result once = quantize(dir / "lump.onnx", dir / "once.onnx", cfg, calib, false);
    CHECK(exact.bytes.size() > 500);
    CHECK(exact.reads == 2);
    CHECK(again.reads == 4);  // the second pass ran
    CHECK(again.lumped >= 3);
    CHECK(again.bytes == exact.bytes);
    CHECK(once.reads == 2);
    CHECK(once.lumped == 0);
    CHECK(once.bytes == exact.bytes);
  }
}
