// SPDX-License-Identifier: MIT
// Library version, kept in step with project(VERSION) in the top-level CMakeLists.txt.
#pragma once

#define QUARK_VERSION_MAJOR 0
#define QUARK_VERSION_MINOR 1
#define QUARK_VERSION_PATCH 0

namespace quark {
struct version_info {
  int major, minor, patch;
};
inline constexpr version_info version{QUARK_VERSION_MAJOR, QUARK_VERSION_MINOR,
                                      QUARK_VERSION_PATCH};
}  // namespace quark
