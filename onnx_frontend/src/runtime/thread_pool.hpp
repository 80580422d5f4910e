// SPDX-License-Identifier: MIT
// A tiny fork-join pool: parallel_for splits [0, n) into one contiguous chunk per thread; the
// calling thread runs the first chunk. Kernels call it with coarse work items (output channels,
// column blocks, batch images), so scheduling cost stays negligible.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace quark::onnx::rt {

class thread_pool {
 public:
  explicit thread_pool(unsigned threads);
  ~thread_pool();
  thread_pool(const thread_pool&) = delete;
  thread_pool& operator=(const thread_pool&) = delete;

  unsigned size() const noexcept { return static_cast<unsigned>(workers_.size()) + 1; }

  /// Calls fn(begin, end) on disjoint chunks covering [0, n). Chunks smaller than `grain`
  /// items are not split further. Blocks until all chunks ran; rethrows the first exception.
  void parallel_for(std::size_t n, std::size_t grain,
                    const std::function<void(std::size_t, std::size_t)>& fn);

 private:
  void worker_loop(unsigned index);

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  const std::function<void(std::size_t, std::size_t)>* job_ = nullptr;
  std::vector<std::pair<std::size_t, std::size_t>> chunks_;
  /// Written under mutex_; atomic so a worker (or the caller waiting for the workers) can poll
  /// it for a moment before sleeping: back-to-back nodes then skip the futex wake-up.
  std::atomic<std::size_t> generation_{0};
  std::atomic<std::size_t> pending_{0};
  std::exception_ptr error_;
  bool stop_ = false;
  bool busy_ = false;  ///< nested calls run inline
};

}  // namespace quark::onnx::rt
