// SPDX-License-Identifier: MIT
// Atomic saving: a failed save throws frontend_error("quark.onnx.save") naming the path and
// leaves neither a partial model nor a temporary file; a successful save replaces the old file.
#include <doctest/doctest.h>

#include <quark/onnx/io.hpp>
#include <quark/onnx/model.hpp>

#include "onnx_frontend/io_wire.hpp"

namespace qo = quark::onnx;
using namespace io_wire;

namespace {

std::size_t file_count(const std::filesystem::path& dir) {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir))
    ++n;
  return n;
}

}  // namespace

TEST_CASE("save into a missing folder fails naming the path") {
  scratch_dir dir;
  const auto m = qo::model::from_bytes(model(relu_graph()));
  const auto target = dir.path / "no" / "such" / "m.onnx";
  try {
    m.save(target);
    FAIL("save succeeded");
  } catch (const qo::frontend_error& e) {
    CHECK(e.id() == "quark.onnx.save");
    CHECK(std::string(e.what()).find(target.string()) != std::string::npos);
    CHECK(std::string(e.what()).find("No such file or directory") != std::string::npos);
  }
  CHECK(file_count(dir.path) == 0);
}

TEST_CASE("save under a regular file fails (works even as root)") {
  scratch_dir dir;
  write_file(dir / "plain", "x");
  const auto m = qo::model::from_bytes(model(relu_graph()));
  CHECK_THROWS_WITH_AS(
      m.save("/etc/passwd/x.onnx"),
      "quark.onnx.save: '/etc/passwd/x.onnx': cannot create a temporary file in its "
      "folder: Not a directory",
      qo::frontend_error);
  CHECK_THROWS_WITH_AS(m.save(dir / "plain" / "m.onnx", {.external_data = true}),
                       doctest::Contains("Not a directory"), qo::frontend_error);
  CHECK(file_count(dir.path) == 1);
  CHECK_THROWS_AS(qo::save_tensor("/etc/passwd/t.pb", qo::tensor(quark::dtype_id::int8, {1})),
                  qo::frontend_error);
}

TEST_CASE("a failure while building the model leaves the old file and no temporaries") {
  scratch_dir dir;
  const auto good = qo::model::from_bytes(model(relu_graph()));
  good.save(dir / "m.onnx");
  const auto before = read_file(dir / "m.onnx");
  // A model whose external data vanished: the save fails midway through reading it.
  write_file(dir / "w.bin", std::string(8, '\0'));
  graph g = relu_graph();
  msg w = tensor("w", 1, {2});
  external(w, "w.bin", "0", "8");
  g.add_initializer(w);
  const auto ext = qo::model::from_bytes(model(g), dir.path);
  std::filesystem::remove(dir / "w.bin");
  CHECK_THROWS_WITH_AS(ext.save(dir / "m.onnx", {.external_data = true, .external_threshold = 0}),
                       doctest::Contains("tensor 'w'"), qo::frontend_error);
  CHECK(read_file(dir / "m.onnx") == before);
  CHECK(file_count(dir.path) == 1);  // only m.onnx: no temp, no data file
}

TEST_CASE("a successful save replaces the file and leaves no temporaries") {
  scratch_dir dir;
  write_file(dir / "m.onnx", "old contents");
  auto m = qo::model::from_bytes(model(relu_graph()));
  m.set_initializer("w", qo::tensor::from_floats({2}, std::vector<float>{1, 2}));
  m.save(dir / "m.onnx");
  CHECK(file_count(dir.path) == 1);
  CHECK(qo::model::load(dir / "m.onnx").has_initializer("w"));
  // A relative path in the current folder works too.
  const auto cwd = std::filesystem::current_path();
  std::filesystem::current_path(dir.path);
  m.save("rel.onnx", {.external_data = true, .external_threshold = 0});
  CHECK(qo::model::load("rel.onnx").initializer("w").data<float>()[1] == 2.0f);
  std::filesystem::current_path(cwd);
  CHECK(file_count(dir.path) == 3);
}
