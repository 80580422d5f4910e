// SPDX-License-Identifier: MIT
// The ONNX Runtime oracle harness itself (tests/support/{npy,ort}.hpp, tests/ort/ort_run.js):
// .npy round trips for every supported element type, a multi-input graph with an initializer,
// float16 and int64 tensors, shapes with several dims, and clear errors (node's stderr included).
#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "support/npy.hpp"
#include "support/ort.hpp"
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

namespace {

using quark::test::attr_int;
using quark::test::model_builder;
using quark::test::npy_array;
namespace ot = quark::test::onnx_type;

void require_ort() {
  if (!quark::test::ort_available()) {
    FAIL("ONNX Runtime is required for this test and is not usable: "
         << quark::test::ort_unavailable_reason());
  }
}

std::filesystem::path scratch(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() / "quark_npy_test";
  std::filesystem::create_directories(dir);
  return dir / name;
}

template <class T>
void round_trip(const std::vector<T>& v, std::vector<std::size_t> shape, const char* descr) {
  const auto a = npy_array::from(v, shape, descr);
  const auto p = scratch(std::string("rt_") + (descr + 1) + ".npy").string();
  quark::test::write_npy(p, a);
  const auto b = quark::test::read_npy(p);
  CHECK(b.descr == descr);
  CHECK(b.shape == a.shape);
  CHECK(b.bytes == a.bytes);
  CHECK(b.values<T>() == v);
  // numpy requires the header (magic + length + dict) to end on a 64-byte boundary.
  CHECK(std::filesystem::file_size(p) % 64 == a.bytes.size() % 64);
  std::filesystem::remove(p);
}

}  // namespace

TEST_CASE("npy: every supported element type round-trips byte for byte") {
  round_trip<float>({1.5f, -0.0f, 3.0f, 4.0f, 5.0f, 6.0f}, {2, 3}, "<f4");
  round_trip<std::uint32_t>({0x7FC12345u, 0xFF800001u}, {2}, "<f4");  // NaN payloads survive
  round_trip<std::uint16_t>({0x3C00u, 0x7E01u, 0xFC00u}, {3}, "<f2");
  round_trip<std::int8_t>({-128, 0, 127}, {3}, "|i1");
  round_trip<std::uint8_t>({0, 255}, {2, 1}, "|u1");
  round_trip<std::int16_t>({-32768, 32767}, {2}, "<i2");
  round_trip<std::uint16_t>({0, 65535}, {1, 2}, "<u2");
  round_trip<std::int32_t>({-5, 7}, {2}, "<i4");
  round_trip<std::uint32_t>({0xFFFFFFFFu}, {1}, "<u4");
  round_trip<std::int64_t>({-1, 1LL << 40}, {2}, "<i8");
  round_trip<float>({42.0f}, {1, 1, 1}, "<f4");
  // A scalar: shape ().
  const auto s = npy_array::from(std::vector<float>{2.0f}, {}, "<f4");
  CHECK(s.shape == std::vector<std::size_t>{1});
  CHECK_THROWS_AS(quark::test::read_npy(scratch("missing.npy").string()), std::runtime_error);
  CHECK_THROWS_AS(npy_array::from(std::vector<float>{1.0f}, {2}), std::runtime_error);
}

TEST_CASE("run_ort: several inputs in graph order, an initializer, float16 and int64") {
  require_ort();
  // z = x + float(y) * k (k an initializer), h = Identity(w) in float16, all with shape [2, 3].
  model_builder m(21);
  m.input("x", ot::float32, {2, 3})
      .input("y", ot::int64, {2, 3})
      .input("w", ot::float16, {-1})
      .initializer("k", ot::float32, {}, std::vector<float>{0.5f})
      .node("Cast", {"y"}, {"yf"}, {attr_int("to", ot::float32)})
      .node("Mul", {"yf", "k"}, {"yk"})
      .node("Add", {"x", "yk"}, {"z"})
      .node("Identity", {"w"}, {"h"})
      .output("z", ot::float32, {2, 3})
      .output("h", ot::float16);
  const std::vector<float> x = {1, 2, 3, 4, 5, 6};
  const std::vector<std::int64_t> y = {10, 20, 30, 40, 50, -60};
  const std::vector<std::uint16_t> w = {0x3C00u, 0x7E01u, 0x8000u, 0x7C00u};  // NaN payload kept
  const auto out = quark::test::run_ort(
      m.build(),
      {npy_array::from(x, {2, 3}), npy_array::from(y, {2, 3}), npy_array::from(w, {}, "<f2")});
  REQUIRE(out.size() == 2u);
  const auto& z = out.at("z");
  CHECK(z.descr == "<f4");
  CHECK(z.shape == std::vector<std::size_t>{2, 3});
  CHECK(z.values<float>() == std::vector<float>{6, 12, 18, 24, 30, -24});
  const auto& h = out.at("h");
  CHECK(h.descr == "<f2");
  CHECK(h.values<std::uint16_t>() == w);
}

TEST_CASE("run_ort: failures carry node's stderr and keep the files") {
  require_ort();
  model_builder bad(21);
  bad.input("x", ot::float32, {1})
      .node("NoSuchOperator", {"x"}, {"y"})
      .output("y", ot::float32, {1});
  std::string what;
  try {
    (void)quark::test::run_ort(bad.build(), {npy_array::from(std::vector<float>{1.0f})});
  } catch (const std::runtime_error& e) {
    what = e.what();
  }
  CHECK(what.find("ONNX Runtime failed") != std::string::npos);
  CHECK(what.find("NoSuchOperator") != std::string::npos);  // from node's stderr
  CHECK(what.find("files kept in") != std::string::npos);

  // Wrong number of inputs.
  model_builder two(21);
  two.input("a", ot::float32, {1})
      .input("b", ot::float32, {1})
      .node("Add", {"a", "b"}, {"c"})
      .output("c", ot::float32, {1});
  CHECK_THROWS_WITH_AS(
      (void)quark::test::run_ort(two.build(), {npy_array::from(std::vector<float>{1.0f})}),
      doctest::Contains("2 inputs"), std::runtime_error);

  // int4 outputs are refused before the binding can crash.
  model_builder q(21);
  q.input("x", ot::float32, {2})
      .initializer("s", ot::float32, {}, std::vector<float>{1.0f})
      .node("QuantizeLinear", {"x", "s"}, {"y"}, {attr_int("output_dtype", ot::int4)})
      .output("y", ot::int4, {2});
  CHECK_THROWS_WITH_AS(
      (void)quark::test::run_ort(q.build(), {npy_array::from(std::vector<float>{1.0f, 2.0f})}),
      doctest::Contains("Cast(to=INT8)"), std::runtime_error);
}

TEST_CASE("run_ort: a node child that died is reported, then replaced") {
  require_ort();
  model_builder m(21);
  m.input("x", ot::float32, {2}).node("Neg", {"x"}, {"y"}).output("y", ot::float32, {2});
  const auto x = npy_array::from(std::vector<float>{1.5f, -2.0f});
  auto& child = quark::test::detail::ort_child::instance();
  CHECK(quark::test::run_ort(m.build(), {x}).at("y").values<float>() ==
        std::vector<float>{-1.5f, 2.0f});
  const pid_t pid = child.pid();
  REQUIRE(pid > 0);
  REQUIRE(::kill(pid, SIGKILL) == 0);
  // Wait for the kill to land without reaping the child (run_ort's own waitpid does that).
  siginfo_t info{};
  while (::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
         info.si_pid == 0) {
    ::usleep(1000);
  }
  const std::string expected = "node child (pid " + std::to_string(pid) + ") failed";
  CHECK_THROWS_WITH_AS((void)quark::test::run_ort(m.build(), {x}),
                       doctest::Contains(expected.c_str()), std::runtime_error);
  CHECK(child.pid() == -1);
  CHECK(quark::test::run_ort(m.build(), {x}).at("y").values<float>() ==
        std::vector<float>{-1.5f, 2.0f});
  CHECK(child.pid() > 0);
  CHECK(child.pid() != pid);
}
