// SPDX-License-Identifier: MIT
// External data: saving large initializers to one data file, loading location/offset/length
// references relative to the model's folder, and rejecting paths that leave that folder.
#include <cstring>

#include <doctest/doctest.h>

#include <quark/onnx/model.hpp>

#include "onnx_frontend/io_wire.hpp"

namespace qo = quark::onnx;
using namespace io_wire;

namespace {

qo::tensor ramp(std::size_t n, float start) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i)
    v[i] = start + static_cast<float>(i);
  return qo::tensor::from_floats({static_cast<std::int64_t>(n)}, v);
}

bool same(const qo::tensor& a, const qo::tensor& b) {
  return a.type() == b.type() && a.shape() == b.shape() && a.byte_size() == b.byte_size() &&
         (a.byte_size() == 0 ||
          std::memcmp(a.bytes().data(), b.bytes().data(), a.byte_size()) == 0);
}

std::string load_error(const std::filesystem::path& p) {
  try {
    qo::model::load(p);
  } catch (const qo::frontend_error& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST_CASE("save with external data: large initializers go to one data file, small stay inline") {
  scratch_dir dir;
  auto m = qo::model::from_bytes(model(relu_graph()));
  m.set_initializer("big1", ramp(1000, 0));
  m.set_initializer("small", ramp(4, 100));
  m.set_initializer("big2", ramp(600, -5));
  m.save(dir / "m.onnx", {.external_data = true, .external_threshold = 1024});
  REQUIRE(std::filesystem::exists(dir / "m.onnx.data"));
  CHECK(std::filesystem::file_size(dir / "m.onnx.data") == (1000 + 600) * 4);
  CHECK(std::filesystem::file_size(dir / "m.onnx") < 1024);

  const auto back = qo::model::load(dir / "m.onnx");
  CHECK(same(back.initializer("big1"), ramp(1000, 0)));
  CHECK(same(back.initializer("big2"), ramp(600, -5)));
  CHECK(same(back.initializer("small"), ramp(4, 100)));

  // Saving elsewhere without the option embeds everything read from the old data file.
  scratch_dir other;
  back.save(other / "inline.onnx");
  CHECK_FALSE(std::filesystem::exists(other / "inline.onnx.data"));
  const auto inl = qo::model::load(other / "inline.onnx");
  CHECK(same(inl.initializer("big2"), ramp(600, -5)));
  // And to bytes.
  CHECK(same(qo::model::from_bytes(back.to_bytes()).initializer("big1"), ramp(1000, 0)));

  // A custom data file name in a subfolder.
  std::filesystem::create_directories(other.path / "w");
  inl.save(other / "sub.onnx",
           {.external_data = true, .external_threshold = 0, .external_file = "w/sub.bin"});
  CHECK(std::filesystem::exists(other.path / "w" / "sub.bin"));
  CHECK(same(qo::model::load(other / "sub.onnx").initializer("small"), ramp(4, 100)));
}

TEST_CASE("re-saving over the data file the model reads from keeps the model readable") {
  scratch_dir dir;
  qo::model m;
  m.set_initializer("a", ramp(500, 1));
  m.set_initializer("b", ramp(300, 2));
  m.save(dir / "m.onnx", {.external_data = true, .external_threshold = 0});
  auto loaded = qo::model::load(dir / "m.onnx");
  loaded.remove_initializer("a");  // the layout of the rewritten data file changes
  loaded.save(dir / "m.onnx", {.external_data = true, .external_threshold = 0});
  CHECK(same(loaded.initializer("b"), ramp(300, 2)));
  CHECK(same(qo::model::load(dir / "m.onnx").initializer("b"), ramp(300, 2)));
  CHECK(std::filesystem::file_size(dir / "m.onnx.data") == 300 * 4);
  // Below the threshold now: the tensor moves inline, the in-memory model follows.
  loaded.save(dir / "m.onnx", {.external_data = true, .external_threshold = 1u << 20});
  CHECK(same(loaded.initializer("b"), ramp(300, 2)));
}

TEST_CASE("external references: offsets, lengths and their validation") {
  scratch_dir dir;
  std::string blob(64, '\0');
  const float vals[] = {1.5f, -2.5f};
  std::memcpy(blob.data() + 16, vals, 8);
  write_file(dir / "weights.bin", blob);
  auto with_ref = [&](std::string_view loc, std::string_view off, std::string_view len,
                      int code = 1) {
    graph g = relu_graph();
    msg w = tensor("w", code, {2});
    external(w, loc, off, len);
    g.add_initializer(w);
    write_file(dir / "m.onnx", model(g));
    return dir / "m.onnx";
  };
  SUBCASE("valid reference") {
    const auto m = qo::model::load(with_ref("weights.bin", "16", "8"));
    CHECK(m.initializer("w").data<float>()[1] == -2.5f);
    CHECK(m.base_dir() == dir.path);
  }
  SUBCASE("length may be omitted: the shape gives it") {
    CHECK(qo::model::load(with_ref("weights.bin", "16", "")).initializer("w").data<float>()[0] ==
          1.5f);
    CHECK(load_error(with_ref("weights.bin", "60", "")).find("lies outside") != std::string::npos);
    CHECK(load_error(with_ref("weights.bin", "16", "12"))
              .find("tensor 'w' (data_type 1): external data length 12 does not match shape (8 "
                    "bytes expected)") != std::string::npos);
  }
  SUBCASE("range beyond the file") {
    CHECK(load_error(with_ref("weights.bin", "60", "8")).find("lies outside") != std::string::npos);
    CHECK(load_error(with_ref("weights.bin", "18446744073709551615", "8")).find("lies outside") !=
          std::string::npos);
  }
  SUBCASE("bad numbers") {
    CHECK(load_error(with_ref("weights.bin", "-1", "8")).find("offset '-1' is not an integer") !=
          std::string::npos);
    CHECK(load_error(with_ref("weights.bin", "0", "99999999999999999999999"))
              .find("is not an integer") != std::string::npos);
  }
  SUBCASE("missing file") {
    CHECK(load_error(with_ref("nothere.bin", "0", "8"))
              .find("tensor 'w' (data_type 1): cannot open external data file") !=
          std::string::npos);
  }
  SUBCASE("path traversal is rejected") {
    CHECK(load_error(with_ref("../weights.bin", "0", "8")).find("leaves the model's folder") !=
          std::string::npos);
    CHECK(load_error(with_ref("a/../../weights.bin", "0", "8")).find("leaves the model's folder") !=
          std::string::npos);
    CHECK(load_error(with_ref("/etc/passwd", "0", "8")).find("must be relative") !=
          std::string::npos);
    std::filesystem::create_symlink("/etc", dir.path / "escape");
    CHECK(load_error(with_ref("escape/passwd", "0", "8")).find("resolves outside") !=
          std::string::npos);
  }
  SUBCASE("external data needs a folder when loading from bytes") {
    graph g = relu_graph();
    msg w = tensor("w", 1, {2});
    external(w, "weights.bin", "16", "8");
    g.add_initializer(w);
    CHECK_THROWS_WITH_AS(qo::model::from_bytes(model(g)), doctest::Contains("has no folder"),
                         qo::frontend_error);
    CHECK(qo::model::from_bytes(model(g), dir.path).initializer("w").data<float>()[0] == 1.5f);
  }
  SUBCASE("sub-byte and fp8 external tensors") {
    std::string b2(4, '\0');
    b2[0] = '\x21';
    write_file(dir / "q.bin", b2);
    const auto m = qo::model::load(with_ref("q.bin", "0", "1", 21));  // uint4 x2
    CHECK(m.initializer("w").data<quark::uint4>()[0].to_bits() == 1);
    CHECK(m.initializer("w").data<quark::uint4>()[1].to_bits() == 2);
  }
}

TEST_CASE("bad external_file options are rejected before anything is written") {
  scratch_dir dir;
  qo::model m;
  m.set_initializer("a", ramp(10, 0));
  CHECK_THROWS_WITH_AS(m.save(dir / "m.onnx", {.external_data = true, .external_file = "../x.bin"}),
                       doctest::Contains("quark.onnx.save"), qo::frontend_error);
  CHECK_THROWS_AS(m.save(dir / "m.onnx", {.external_data = true, .external_file = "m.onnx"}),
                  qo::frontend_error);
  CHECK(std::filesystem::is_empty(dir.path));
}

TEST_CASE("a model over 2 GB keeps its weights external: loads lazily, refuses to embed") {
  scratch_dir dir;
  // A sparse 2.25 GB data file: no disk space is used, nothing is read.
  const std::uint64_t big = (std::uint64_t{9} << 28);
  { std::ofstream touch(dir / "huge.bin", std::ios::binary); }
  std::filesystem::resize_file(dir / "huge.bin", big);
  graph g = relu_graph();
  msg w = tensor("w", 2, {static_cast<std::int64_t>(big)});
  external(w, "huge.bin", "0", std::to_string(big));
  g.add_initializer(w);
  write_file(dir / "huge.onnx", model(g));
  const auto m = qo::model::load(dir / "huge.onnx");
  CHECK(m.initializer_names() == std::vector<std::string>{"w"});
  CHECK_THROWS_WITH_AS(m.to_bytes(),
                       doctest::Contains("beyond protobuf's 2 GB limit; save with external_data"),
                       qo::frontend_error);
  CHECK_THROWS_WITH_AS(m.save(dir / "embedded.onnx"), doctest::Contains("quark.onnx.save"),
                       qo::frontend_error);
  CHECK_FALSE(std::filesystem::exists(dir / "embedded.onnx"));
}
