// SPDX-License-Identifier: MIT
// docs/formats.md is a contract: every row is parsed and checked against dtype_traits,
// fp_format and numeric_limits, so documentation and code cannot drift apart.
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include <quark/quark.hpp>

namespace {

std::vector<std::string> split_row(const std::string& line) {
  std::vector<std::string> cells;
  std::stringstream ss(line);
  std::string cell;
  while (std::getline(ss, cell, '|')) {
    const auto b = cell.find_first_not_of(' ');
    const auto e = cell.find_last_not_of(' ');
    cells.push_back(b == std::string::npos ? "" : cell.substr(b, e - b + 1));
  }
  return cells;  // cells[0] is empty (text before the first '|')
}

struct row_facts {
  int bits = 0;
  double max_finite = 0;
  double min_sub = 0;  // 0 when none
  bool inf = false, nan = false, neg_zero = false;
  int onnx = -1;
  int e = -1, m = -1, bias = -1;
};

template <class T>
row_facts facts() {
  row_facts f;
  using tr = quark::dtype_traits<T>;
  f.bits = tr::bits;
  f.max_finite = static_cast<double>(tr::max());
  if constexpr (quark::floating_data_type<T>) {
    constexpr auto F = T::format;
    f.e = F.exponent_bits;
    f.m = F.mantissa_bits;
    f.bias = F.bias;
    f.inf = F.has_inf();
    f.nan = F.has_nan();
    f.neg_zero = F.has_negative_zero();
    f.min_sub = F.has_subnormals()
                    ? static_cast<double>(quark::to_float(std::numeric_limits<T>::denorm_min()))
                    : 0.0;
  }
  const auto code = quark::onnx_code(tr::id);
  f.onnx = code ? *code : -1;
  return f;
}

}  // namespace

TEST_CASE("docs/formats.md matches the library") {
  const char* src = std::getenv("QUARK_SOURCE_DIR");
  REQUIRE_MESSAGE(src != nullptr, "QUARK_SOURCE_DIR is not set (ctest sets it)");
  std::ifstream in(std::string(src) + "/docs/formats.md");
  REQUIRE(in.good());
  std::map<std::string, row_facts> expected;
  auto add = [&](auto id) {
    using T = typename decltype(id)::type;
    expected[std::string(quark::dtype_traits<T>::name)] = facts<T>();
  };
  quark::for_each_type(quark::all_float_formats{}, add);
  quark::for_each_type(quark::all_integer_types{}, add);

  std::string line;
  int rows = 0;
  while (std::getline(in, line)) {
    if (line.rfind("| ", 0) != 0 || line.rfind("| name", 0) == 0)
      continue;
    const auto c = split_row(line);
    REQUIRE(c.size() >= 12);
    const auto it = expected.find(c[1]);
    INFO("row: " << line);
    REQUIRE_MESSAGE(it != expected.end(), "unknown format name in docs/formats.md");
    const auto& f = it->second;
    CHECK(std::stoi(c[2]) == f.bits);
    if (f.e >= 0) {
      CHECK(std::stoi(c[3]) == f.e);
      CHECK(std::stoi(c[4]) == f.m);
      CHECK(std::stoi(c[5]) == f.bias);
    }
    CHECK(std::stod(c[6]) == doctest::Approx(f.max_finite).epsilon(1e-7));
    if (c[7] == "-") {
      CHECK(f.min_sub == 0.0);
    } else {
      CHECK(std::stod(c[7]) == doctest::Approx(f.min_sub).epsilon(1e-7));
    }
    CHECK((c[8] == "yes") == f.inf);
    CHECK((c[9] == "yes") == f.nan);
    CHECK((c[10] == "yes") == f.neg_zero);
    CHECK((c[11] == "-" ? -1 : std::stoi(c[11])) == f.onnx);
    expected.erase(it);
    ++rows;
  }
  CHECK(rows == 22);
  CHECK_MESSAGE(expected.empty(), "formats missing from docs/formats.md");
}
