// SPDX-License-Identifier: MIT
// Replays tests/onnx_frontend/data/fuzz_regressions/ (the fuzzer's seeds and every input that
// once crashed it, see fuzz/README.md) through the same calls as fuzz/model_loader_fuzz.cpp:
// each file must load or raise frontend_error, never crash or throw anything else.
#include <algorithm>
#include <cstdlib>

#include <doctest/doctest.h>

#include <quark/onnx/io.hpp>
#include <quark/onnx/model.hpp>

#include "onnx_frontend/io_wire.hpp"

namespace qo = quark::onnx;

namespace {

std::filesystem::path corpus_dir() {
  // ctest sets QUARK_SOURCE_DIR; otherwise the folder next to this source file.
  const char* src = std::getenv("QUARK_SOURCE_DIR");
  if (src != nullptr)
    return std::filesystem::path(src) / "tests" / "onnx_frontend" / "data" / "fuzz_regressions";
  return std::filesystem::path(__FILE__).parent_path() / "data" / "fuzz_regressions";
}

/// Mirrors one pass of the fuzz target; returns true when the model loaded.
bool replay(const std::string& bytes, const std::filesystem::path& base_dir) {
  bool loaded = false;
  try {
    auto m = qo::model::from_bytes(bytes, base_dir);
    loaded = true;
    static_cast<void>(m.inputs());
    static_cast<void>(m.outputs());
    static_cast<void>(m.topological_order());
    for (const auto& name : m.initializer_names()) {
      try {
        static_cast<void>(m.initializer(name));
      } catch (const qo::frontend_error&) {
      }
    }
    try {
      static_cast<void>(m.nodes());
    } catch (const qo::frontend_error&) {
    }
    m.constants_to_initializers();
    m.validate();
    static_cast<void>(qo::model::from_bytes(m.to_bytes()));
  } catch (const qo::frontend_error&) {
  }
  try {
    static_cast<void>(qo::tensor_from_bytes(bytes, base_dir));
  } catch (const qo::frontend_error&) {
  }
  return loaded;
}

}  // namespace

TEST_CASE("every fuzz regression input loads or fails with frontend_error") {
  const auto dir = corpus_dir();
  REQUIRE(std::filesystem::is_directory(dir));
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    files.push_back(e.path());
  std::sort(files.begin(), files.end());
  REQUIRE(files.size() >= 6);
  // Like the fuzzer: once without a folder, once with a folder holding a 64-byte weights.bin.
  io_wire::scratch_dir data;
  io_wire::write_file(data / "weights.bin", std::string(64, '\x3c'));
  std::size_t loaded = 0;
  for (const auto& f : files) {
    CAPTURE(f.filename().string());
    const auto bytes = io_wire::read_file(f);
    CHECK_NOTHROW(replay(bytes, {}));
    CHECK_NOTHROW(loaded += replay(bytes, data.path) ? 1u : 0u);
  }
  MESSAGE(loaded << " of " << files.size() << " inputs load");
  CHECK(loaded >= 6);  // at least the seeds
}

TEST_CASE("the committed seeds are valid models") {
  const auto dir = corpus_dir();
  for (const char* name : {"seed_relu.onnx", "seed_conv_types.onnx", "seed_constants.onnx",
                           "seed_if.onnx", "seed_ir3.onnx"}) {
    CAPTURE(name);
    CHECK_NOTHROW(qo::model::load(dir / name));
  }
  CHECK_THROWS_WITH_AS(qo::model::load(dir / "seed_external.onnx"),
                       doctest::Contains("cannot open external data file"), qo::frontend_error);
  auto m = qo::model::load(dir / "seed_constants.onnx");
  CHECK(m.constants_to_initializers() == 5);
}
