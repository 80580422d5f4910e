// SPDX-License-Identifier: MIT
// PRIVATE: the small string helpers the configuration sources share (names are matched
// case-insensitively; messages list the valid choices).
#pragma once

#include <cctype>
#include <initializer_list>
#include <string>
#include <string_view>

namespace quark::onnx {

/// `s` with ASCII letters lowered (option, spec and algorithm names are ASCII).
inline std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

/// "a, b, c": the valid choices a message lists.
inline std::string join(std::initializer_list<std::string_view> items) {
  std::string out;
  for (auto s : items) {
    if (!out.empty())
      out += ", ";
    out += s;
  }
  return out;
}

}  // namespace quark::onnx
