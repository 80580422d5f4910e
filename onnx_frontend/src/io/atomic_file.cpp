// SPDX-License-Identifier: MIT
// POSIX implementation of atomic_file: open(O_EXCL) in the destination folder, write, fsync,
// rename(2) (atomic within one file system), then fsync the folder so the rename is durable.
#include "io/atomic_file.hpp"

#include <atomic>
#include <cerrno>
#include <cstring>
#include <string>

#include <quark/onnx/error.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace quark::onnx::detail {
namespace {

std::atomic<unsigned> temp_counter{0};

std::filesystem::path folder_of(const std::filesystem::path& p) {
  auto dir = p.parent_path();
  return dir.empty() ? std::filesystem::path(".") : dir;
}

}  // namespace

atomic_file::atomic_file(std::filesystem::path dest) : dest_(std::move(dest)) {
  if (dest_.empty() || !dest_.has_filename())
    fail("not a file path", EINVAL);
  for (int attempt = 0; attempt < 16 && fd_ < 0; ++attempt) {
    temp_ = folder_of(dest_) / (dest_.filename().string() + ".tmp-" + std::to_string(::getpid()) +
                                "-" + std::to_string(temp_counter.fetch_add(1)));
    fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd_ < 0 && errno != EEXIST)
      break;
  }
  if (fd_ < 0)
    fail("cannot create a temporary file in its folder", errno);
}

atomic_file::~atomic_file() {
  if (fd_ >= 0)
    ::close(fd_);
  if (!committed_ && !temp_.empty())
    ::unlink(temp_.c_str());
}

void atomic_file::fail(const char* what, int err) const {
  throw frontend_error("quark.onnx.save",
                       "'" + dest_.string() + "': " + what + ": " + std::strerror(err));
}

void atomic_file::write(std::string_view bytes) {
  const char* p = bytes.data();
  std::size_t left = bytes.size();
  while (left > 0) {
    const ::ssize_t n = ::write(fd_, p, left);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      fail("write failed", errno);
    }
    p += n;
    left -= static_cast<std::size_t>(n);
    size_ += static_cast<std::size_t>(n);
  }
}

void atomic_file::finish() {
  if (fd_ < 0)
    return;
  if (::fsync(fd_) != 0)
    fail("fsync failed", errno);
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0)
    fail("close failed", errno);
}

void atomic_file::commit() {
  finish();
  if (::rename(temp_.c_str(), dest_.c_str()) != 0)
    fail("cannot rename the temporary file", errno);
  committed_ = true;
  const int dir = ::open(folder_of(dest_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    ::fsync(dir);  // best effort: the data itself is already durable
    ::close(dir);
  }
}

}  // namespace quark::onnx::detail
