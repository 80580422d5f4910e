// SPDX-License-Identifier: MIT
// docs/config.md documents every extra option and every preset (the tables are kept in step
// with the registry and the preset list).
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <doctest/doctest.h>

#include <quark/onnx/presets.hpp>

using namespace quark::onnx;

namespace {
std::string read_doc() {
  const char* s = std::getenv("QUARK_SOURCE_DIR");
  const auto root = s ? std::filesystem::path(s)
                      : std::filesystem::path(__FILE__).parent_path().parent_path().parent_path();
  std::ifstream in(root / "docs" / "config.md");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}
}  // namespace

TEST_CASE("docs/config.md has a row for every extra option") {
  const std::string doc = read_doc();
  REQUIRE(!doc.empty());
  for (const auto& info : option_registry()) {
    const std::string row = "| `" + std::string(info.name) + "` | " +
                            std::to_string(static_cast<int>(info.category)) + " | ";
    CHECK_MESSAGE(doc.find(row) != std::string::npos, info.name);
  }
}

TEST_CASE("docs/config.md has a section for every preset") {
  const std::string doc = read_doc();
  for (const auto& p : presets()) {
    CHECK_MESSAGE(doc.find("\n### " + std::string(p.name)) != std::string::npos, p.name);
  }
}
