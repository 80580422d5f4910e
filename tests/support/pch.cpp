// SPDX-License-Identifier: MIT
// The donor of a test group's shared precompiled header (QUARK_TEST_PCH, tests/CMakeLists.txt):
// CMake builds the header with this translation unit's flags, which equal its users'.
