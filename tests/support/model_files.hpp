// SPDX-License-Identifier: MIT
// Helpers the quantizer tests share: a per-process scratch directory, seeded random data, ONNX
// protobuf files on disk, conversions between the protobuf and quark::onnx::model, and the small
// Conv model most option tests quantize, BatchNormalization parameters, and the "same function"
// check of rewritten models (ORT on both, quark-cpp's runtime on the rewrite).
//
//     using namespace quark::test;
//     const auto dir = work_dir();               // $QUARK_BINARY_DIR/<test binary>/<pid>
//     save_proto(conv_model(), dir / "f.onnx");
//     const qo::model m = to_model(load_proto(dir / "f.onnx"));
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <doctest/doctest.h>
#include <onnx/onnx_pb.h>

#include <quark/onnx/model.hpp>
#include <quark/onnx/quantizer.hpp>

#include "support/checks.hpp"
#include "support/ort.hpp"
#include <unistd.h>

namespace quark::test {

/// The bytes of a file ("" when it cannot be read).
inline std::string file_bytes(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

/// Checks that two quantizations reported the same tensors with the same calibrated ranges and
/// scales (an oracle run against another path to the same numbers); returns how many of them
/// had a real range (rmax > rmin), so a caller can require that the comparison covered some.
inline std::size_t check_same_ranges(const quark::onnx::quantize_report& want,
                                     const quark::onnx::quantize_report& got) {
  REQUIRE(want.tensors.size() == got.tensors.size());
  std::size_t calibrated = 0;
  for (std::size_t i = 0; i < want.tensors.size(); ++i) {
    const auto& a = want.tensors[i];
    const auto& b = got.tensors[i];
    CAPTURE(a.name);
    CHECK(a.name == b.name);
    CHECK(a.rmin == b.rmin);
    CHECK(a.rmax == b.rmax);
    CHECK(a.scale == b.scale);
    calibrated += a.rmax > a.rmin ? 1u : 0u;
  }
  return calibrated;
}

/// Sets an environment variable for one scope (the QUARK_CALIB_* switches the oracle runs use).
class scoped_env {
 public:
  scoped_env(const char* name, const char* value) : name_(name) { ::setenv(name, value, 1); }
  ~scoped_env() { ::unsetenv(name_); }
  scoped_env(const scoped_env&) = delete;
  scoped_env& operator=(const scoped_env&) = delete;

 private:
  const char* name_;
};

/// A fresh directory for this test process: $QUARK_BINARY_DIR (or the system temp dir) / the test
/// executable's name / the process id. Created on first use; never removed (ctest runs every
/// TEST_CASE in its own process, so the pid keeps parallel cases apart).
inline std::filesystem::path work_dir() {
  namespace fs = std::filesystem;
  const char* b = std::getenv("QUARK_BINARY_DIR");
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  const std::string suite = ec ? std::string("quark_tests") : exe.filename().string();
  const fs::path d = fs::path(b ? b : fs::temp_directory_path().string()) / (suite + "_work") /
                     std::to_string(::getpid());
  fs::create_directories(d);
  return d;
}

inline void save_proto(const ::onnx::ModelProto& m, const std::filesystem::path& p) {
  std::ofstream f(p, std::ios::binary);
  REQUIRE(m.SerializeToOstream(&f));
}

inline ::onnx::ModelProto load_proto(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  ::onnx::ModelProto m;
  REQUIRE(m.ParseFromIstream(&f));
  return m;
}

/// The main graph's initializer `name`, or nullptr.
inline const ::onnx::TensorProto* find_init(const ::onnx::ModelProto& m, const std::string& name) {
  for (const auto& t : m.graph().initializer()) {
    if (t.name() == name)
      return &t;
  }
  return nullptr;
}

/// The main graph's node called `name`, or nullptr.
inline const ::onnx::NodeProto* node_named(const ::onnx::ModelProto& m, const std::string& name) {
  for (const auto& n : m.graph().node()) {
    if (n.name() == name)
      return &n;
  }
  return nullptr;
}

/// The values of a float32 TensorProto (float_data or raw_data).
inline std::vector<float> floats_of(const ::onnx::TensorProto& t) {
  if (t.float_data_size() > 0)
    return {t.float_data().begin(), t.float_data().end()};
  std::vector<float> v(t.raw_data().size() / sizeof(float));
  std::memcpy(v.data(), t.raw_data().data(), v.size() * sizeof(float));
  return v;
}

inline quark::onnx::model to_model(const ::onnx::ModelProto& p) {
  std::string bytes;
  REQUIRE(p.SerializeToString(&bytes));
  return quark::onnx::model::from_bytes(std::string_view(bytes));
}

inline ::onnx::ModelProto to_proto(const quark::onnx::model& m) {
  ::onnx::ModelProto p;
  REQUIRE(p.ParseFromString(m.to_bytes()));
  return p;
}

/// Runs the scope in directory `p` (options such as SaveTensorHistFig write into the working
/// directory, which must not be the source tree when a test is run by hand).
struct cwd_guard {
  std::filesystem::path old = std::filesystem::current_path();
  explicit cwd_guard(const std::filesystem::path& p) { std::filesystem::current_path(p); }
  ~cwd_guard() { std::filesystem::current_path(old); }
  cwd_guard(const cwd_guard&) = delete;
  cwd_guard& operator=(const cwd_guard&) = delete;
};

/// conv1 -> relu1 -> conv2 -> add1 (constant) -> pool1 (MaxPool 2x2) -> sig1 (Sigmoid) on
/// x: 1x3x8x8, opset 13; tensors x, c1, r1, c2, a, p, y; weights w1, b1, w2, b2 and constant c.
inline ::onnx::ModelProto conv_model() {
  model_builder b(13);
  b.input("x", onnx_type::float32, {1, 3, 8, 8});
  b.initializer("w1", onnx_type::float32, {4, 3, 3, 3}, random_floats(108, 1, -0.5f, 0.5f));
  b.initializer("b1", onnx_type::float32, {4}, random_floats(4, 2, -0.1f, 0.1f));
  b.initializer("w2", onnx_type::float32, {4, 4, 1, 1}, random_floats(16, 3, -0.8f, 0.8f));
  b.initializer("b2", onnx_type::float32, {4}, random_floats(4, 4, -0.1f, 0.1f));
  b.initializer("c", onnx_type::float32, {1, 4, 1, 1}, random_floats(4, 5, -0.3f, 0.3f));
  b.node("Conv", {"x", "w1", "b1"}, {"c1"}, {attr_ints("pads", {1, 1, 1, 1})});
  b.node("Relu", {"c1"}, {"r1"});
  b.node("Conv", {"r1", "w2", "b2"}, {"c2"});
  b.node("Add", {"c2", "c"}, {"a"});
  b.node("MaxPool", {"a"}, {"p"},
         {attr_ints("kernel_shape", {2, 2}), attr_ints("strides", {2, 2})});
  b.node("Sigmoid", {"p"}, {"y"});
  b.output("y", onnx_type::float32, {1, 4, 4, 4});
  ::onnx::ModelProto m = b.build();
  const char* names[] = {"conv1", "relu1", "conv2", "add1", "pool1", "sig1"};
  for (int i = 0; i < m.graph().node_size(); ++i)
    m.mutable_graph()->mutable_node(i)->set_name(names[i]);
  return m;
}

/// BatchNormalization parameters `<p>_{s,b,m,v}` for `c` channels (positive variances).
inline void bn_params(model_builder& b, const std::string& p, std::int64_t c, std::uint32_t seed) {
  const auto n = static_cast<std::size_t>(c);
  b.initializer(p + "_s", onnx_type::float32, {c}, random_floats(n, seed, 0.5f, 2.0f));
  b.initializer(p + "_b", onnx_type::float32, {c}, random_floats(n, seed + 1, -0.5f, 0.5f));
  b.initializer(p + "_m", onnx_type::float32, {c}, random_floats(n, seed + 2, -0.5f, 0.5f));
  b.initializer(p + "_v", onnx_type::float32, {c}, random_floats(n, seed + 3, 0.1f, 2.0f));
}

/// A rewritten model `b` computes the same function as `a`: ORT on both and quark-cpp's runtime on
/// `b`, one seeded input of `shape` in [-2, 2), every output within `tol` of `a`'s relative to its
/// largest magnitude (which must exceed 0.1, so an all-zero output cannot pass). Skipped with a
/// message when ONNX Runtime is not installed.
inline void check_same_function(const ::onnx::ModelProto& a, const ::onnx::ModelProto& b,
                                const quark::onnx::shape_t& shape, double tol = 1e-5) {
  namespace qo = quark::onnx;
  if (!ort_available()) {
    MESSAGE("skipped ORT comparison: " << ort_unavailable_reason());
    return;
  }
  const std::vector<float> x = random_floats(qo::element_count(shape), 99, -2.0f, 2.0f);
  const std::vector<std::size_t> dims(shape.begin(), shape.end());
  const auto ra = run_ort(a, {npy_array::from(x, dims)});
  const auto rb = run_ort(b, {npy_array::from(x, dims)});
  const std::filesystem::path p = work_dir() / "check.onnx";
  save_proto(b, p);
  const qo::calib_sample s{{a.graph().input(0).name(), qo::tensor::from_floats(shape, x)}};
  const auto ours = qo::run_model(p, s);
  REQUIRE(ra.size() == rb.size());
  for (const auto& kv : ra) {
    const std::string name = kv.first;  // (no structured binding: CAPTURE is a lambda)
    CAPTURE(name);
    const auto fa = kv.second.values<float>();
    const auto fb = rb.at(name).values<float>();
    const auto fo = ours.at(name).data<float>();
    REQUIRE(fa.size() == fb.size());
    REQUIRE(fa.size() == fo.size());
    double peak = 0.0, err_ort = 0.0, err_ours = 0.0;
    for (std::size_t i = 0; i < fa.size(); ++i) {
      peak = std::max(peak, std::fabs(static_cast<double>(fa[i])));
      err_ort = std::max(err_ort, std::fabs(static_cast<double>(fa[i] - fb[i])));
      err_ours = std::max(err_ours, std::fabs(static_cast<double>(fa[i] - fo[i])));
    }
    CHECK(peak > 0.1);
    CHECK(err_ort <= tol * peak);
    CHECK(err_ours <= tol * peak);
  }
}

}  // namespace quark::test
