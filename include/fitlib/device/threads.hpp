// SPDX-License-Identifier: MIT
// cpu::Threads: shards evaluated concurrently on CPU threads, and the fork-join pool that runs them.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "fitlib/core/error.hpp"
#include "fitlib/core/types.hpp"
#include "fitlib/device/serial.hpp"

namespace fitlib {

namespace cpu {
/// Evaluates k shards concurrently, one per thread (the calling thread runs shard 0). Each shard
/// computes its partial sums alone; the likelihood adds them in shard order afterwards, so the
/// result is bitwise the same from run to run and the same as cpu::Serial with as many shards.
struct Threads {
  index_t threads = 1;
  index_t concurrency() const { return threads; }
};
}  // namespace cpu

namespace cpu {
template <>
inline constexpr bool is_host_policy_v<Threads> = true;
}  // namespace cpu

namespace detail {

/// A fixed set of worker threads for fork-join parallel loops: `run(n, task)` calls task(k) for
/// every k in [0, n), task 0 on the calling thread and task k on worker k − 1, and returns when
/// all are done. The first exception a task throws is rethrown by `run`, after every task ended.
class ForkJoinPool {
 public:
  explicit ForkJoinPool(index_t workers) {
    if (workers < 0) throw usage_error("a thread pool needs ≥ 0 workers, got " + std::to_string(workers));
    for (index_t w = 0; w < workers; ++w) threads_.emplace_back([this, w] { work(w); });
  }
  ForkJoinPool(const ForkJoinPool&) = delete;
  ForkJoinPool& operator=(const ForkJoinPool&) = delete;
  ~ForkJoinPool() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    for (auto& t : threads_) t.join();
  }

  index_t workers() const { return static_cast<index_t>(threads_.size()); }

  void run(index_t n, const std::function<void(index_t)>& task) {
    if (n - 1 > workers())
      throw usage_error("a parallel loop of " + std::to_string(n) + " tasks on " + std::to_string(workers() + 1) + " threads");
    std::exception_ptr first;
    {
      std::lock_guard lock(mutex_);
      task_ = &task;
      tasks_ = n;
      pending_ = n - 1;
      errors_.assign(static_cast<std::size_t>(n), nullptr);
      ++generation_;
    }
    wake_.notify_all();
    try {
      if (n > 0) task(0);
    } catch (...) {
      errors_[0] = std::current_exception();
    }
    std::unique_lock lock(mutex_);
    done_.wait(lock, [&] { return pending_ <= 0; });
    task_ = nullptr;
    for (auto& e : errors_)
      if (e && !first) first = e;
    lock.unlock();
    if (first) std::rethrow_exception(first);
  }

 private:
  void work(index_t w) {
    std::uint64_t seen = 0;
    for (;;) {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      const index_t k = w + 1;
      if (k >= tasks_) continue;
      const auto* task = task_;
      lock.unlock();
      std::exception_ptr error;
      try {
        (*task)(k);
      } catch (...) {
        error = std::current_exception();
      }
      lock.lock();
      errors_[static_cast<std::size_t>(k)] = error;
      if (--pending_ == 0) done_.notify_one();
    }
  }

  std::vector<std::thread> threads_;
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  const std::function<void(index_t)>* task_ = nullptr;
  index_t tasks_ = 0, pending_ = 0;
  std::uint64_t generation_ = 0;
  std::vector<std::exception_ptr> errors_;
  bool stop_ = false;
};

/// Owns a ForkJoinPool (or none) for an object that may be copied or moved: a copy gets threads
/// of its own, so two copies never share a pool.
class PoolHandle {
 public:
  PoolHandle() = default;
  explicit PoolHandle(index_t workers) : pool_(std::make_unique<ForkJoinPool>(workers)) {}
  PoolHandle(const PoolHandle& o) : pool_(o.pool_ ? std::make_unique<ForkJoinPool>(o.pool_->workers()) : nullptr) {}
  PoolHandle& operator=(const PoolHandle& o) {
    if (this != &o) pool_ = o.pool_ ? std::make_unique<ForkJoinPool>(o.pool_->workers()) : nullptr;
    return *this;
  }
  PoolHandle(PoolHandle&&) noexcept = default;
  PoolHandle& operator=(PoolHandle&&) noexcept = default;

  ForkJoinPool* get() const { return pool_.get(); }
  explicit operator bool() const { return pool_ != nullptr; }
  ForkJoinPool* operator->() const { return pool_.get(); }

 private:
  std::unique_ptr<ForkJoinPool> pool_;
};

}  // namespace detail
}  // namespace fitlib
