// SPDX-License-Identifier: MIT
// PRIVATE: a file written under a temporary name in its destination folder and renamed into place
// only after fsync, so readers see either the old file or the complete new one. Destroying an
// uncommitted atomic_file removes the temporary.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string_view>

namespace quark::onnx::detail {

class atomic_file {
 public:
  /// Creates "<dest>.tmp-<pid>-<n>" next to dest; throws frontend_error("quark.onnx.save").
  explicit atomic_file(std::filesystem::path dest);
  ~atomic_file();
  atomic_file(const atomic_file&) = delete;
  atomic_file& operator=(const atomic_file&) = delete;

  /// Appends bytes (retrying short writes); throws on any error.
  void write(std::string_view bytes);
  /// Bytes written so far.
  std::size_t size() const noexcept { return size_; }
  /// fsync and close (first phase of commit); throws on error.
  void finish();
  /// Renames the finished temporary onto the destination and syncs the folder.
  void commit();

  const std::filesystem::path& destination() const noexcept { return dest_; }

 private:
  [[noreturn]] void fail(const char* what, int err) const;

  std::filesystem::path dest_;
  std::filesystem::path temp_;
  int fd_ = -1;
  std::size_t size_ = 0;
  bool committed_ = false;
};

}  // namespace quark::onnx::detail
