// SPDX-License-Identifier: MIT
#include "runtime/thread_pool.hpp"

#include <algorithm>
#include <chrono>
#include <exception>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace quark::onnx::rt {
namespace {

/// Polls `done()` for up to about 50 microseconds (the gap between two nodes of a model is
/// usually shorter) before the caller falls back to sleeping on a condition variable; a wake-up
/// through the kernel costs tens of microseconds on a virtual machine.
template <class F>
bool spin_until(F&& done) {
  using clock = std::chrono::steady_clock;
  const clock::time_point until = clock::now() + std::chrono::microseconds(50);
  for (unsigned i = 1;; ++i) {
    if (done())
      return true;
#if defined(__x86_64__) || defined(__i386__)
    _mm_pause();
#else
    std::this_thread::yield();
#endif
    if (i % 64 == 0 && clock::now() >= until)
      return false;
  }
}

}  // namespace

thread_pool::thread_pool(unsigned threads) {
  if (threads == 0)
    threads = std::max(1u, std::thread::hardware_concurrency());
  for (unsigned i = 1; i < threads; ++i)
    workers_.emplace_back([this, i] { worker_loop(i); });
}

thread_pool::~thread_pool() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& w : workers_)
    w.join();
}

void thread_pool::worker_loop(unsigned index) {
  std::size_t seen = 0;
  for (;;) {
    (void)spin_until([&] { return generation_.load(std::memory_order_acquire) != seen; });
    std::unique_lock lock(mutex_);
    wake_.wait(lock, [&] { return stop_ || generation_.load() != seen; });
    if (stop_)
      return;
    seen = generation_.load();
    if (index >= chunks_.size())
      continue;
    const auto [b, e] = chunks_[index];
    const auto* job = job_;
    lock.unlock();
    std::exception_ptr err;
    try {
      (*job)(b, e);
    } catch (...) {
      err = std::current_exception();
    }
    lock.lock();
    if (err && !error_)
      error_ = err;
    if (--pending_ == 0)
      done_.notify_one();
  }
}

void thread_pool::parallel_for(std::size_t n, std::size_t grain,
                               const std::function<void(std::size_t, std::size_t)>& fn) {
  if (n == 0)
    return;
  grain = std::max<std::size_t>(grain, 1);
  const std::size_t max_parts = (n + grain - 1) / grain;
  const std::size_t parts = std::min<std::size_t>(size(), max_parts);
  {
    std::unique_lock lock(mutex_);
    if (parts <= 1 || busy_) {
      lock.unlock();
      fn(0, n);
      return;
    }
    busy_ = true;
    chunks_.clear();
    for (std::size_t p = 0; p < parts; ++p)
      chunks_.emplace_back(n * p / parts, n * (p + 1) / parts);
    job_ = &fn;
    pending_ = parts - 1;
    error_ = nullptr;
    ++generation_;
  }
  wake_.notify_all();
  std::exception_ptr err;
  try {
    fn(chunks_[0].first, chunks_[0].second);
  } catch (...) {
    err = std::current_exception();
  }
  (void)spin_until([&] { return pending_.load(std::memory_order_acquire) == 0; });
  std::unique_lock lock(mutex_);
  done_.wait(lock, [&] { return pending_.load() == 0; });
  busy_ = false;
  job_ = nullptr;
  if (!err)
    err = error_;
  lock.unlock();
  if (err)
    std::rethrow_exception(err);
}

}  // namespace quark::onnx::rt
