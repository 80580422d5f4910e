// SPDX-License-Identifier: MIT
// The loader on the real models of issue 6 (fetched by scripts/fetch-models.sh into
// $QUARK_DATA_CACHE/models): each loads and validates, its Constant nodes become initializers,
// and it survives a save with external data and a reload with every initializer bit-identical.
// Skipped (with a message) when the model cache is absent.
#include <cstdlib>
#include <cstring>

#include <doctest/doctest.h>

#include <quark/onnx/model.hpp>

#include "onnx_frontend/io_wire.hpp"

namespace qo = quark::onnx;

namespace {

std::filesystem::path model_path(const char* rel) {
  const char* cache = std::getenv("QUARK_DATA_CACHE");
  if (cache == nullptr || *cache == '\0')
    return {};
  return std::filesystem::path(cache) / "models" / rel;
}

bool same(const qo::tensor& a, const qo::tensor& b) {
  return a.type() == b.type() && a.shape() == b.shape() && a.byte_size() == b.byte_size() &&
         (a.byte_size() == 0 ||
          std::memcmp(a.bytes().data(), b.bytes().data(), a.byte_size()) == 0);
}

void round_trip(const char* rel) {
  const auto path = model_path(rel);
  if (path.empty() || !std::filesystem::exists(path)) {
    MESSAGE("skipped: " << rel << " not in the model cache (run scripts/fetch-models.sh)");
    return;
  }
  auto m = qo::model::load(path);
  const auto constants = m.constants_to_initializers();
  m.validate();
  MESSAGE(std::string(rel) << ": " << m.node_count() << " nodes, " << m.initializer_names().size()
                           << " initializers (" << constants << " from Constant nodes), opset "
                           << m.opset("").value_or(0));
  CHECK(m.opset("").has_value());
  CHECK_FALSE(m.inputs().empty());
  CHECK_FALSE(m.outputs().empty());
  io_wire::scratch_dir dir;
  m.save(dir / "m.onnx", {.external_data = true, .external_threshold = 1024});
  const auto back = qo::model::load(dir / "m.onnx");
  CHECK(back.node_count() == m.node_count());
  REQUIRE(back.initializer_names() == m.initializer_names());
  std::size_t checked = 0;
  for (const auto& name : m.initializer_names()) {
    qo::tensor a;
    try {
      a = m.initializer(name);
    } catch (const qo::frontend_error&) {
      continue;  // string tensors have no tensor form
    }
    CAPTURE(name);
    CHECK(same(a, back.initializer(name)));
    ++checked;
  }
  CHECK(checked > 0);
}

}  // namespace

TEST_CASE("PaddleOCR v4 detection") {
  round_trip("ocr-models/assets/ch_PP-OCRv4_det_infer.onnx");
}
TEST_CASE("PaddleOCR mobile v2 classifier") {
  round_trip("ocr-models/assets/ch_ppocr_mobile_v2.0_cls_infer.onnx");
}
TEST_CASE("PaddleOCR v4 recognition") {
  round_trip("ocr-models/assets/ch_PP-OCRv4_rec_infer.onnx");
}
TEST_CASE("silero VAD op15 (If subgraphs)") {
  round_trip("silero-vad/weights/silero_vad_16k_op15.onnx");
}
TEST_CASE("silero VAD float16") {
  round_trip("silero-vad/weights/silero_vad_half.onnx");
}
