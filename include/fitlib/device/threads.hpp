// SPDX-License-Identifier: MIT
// cpu::Threads: shards evaluated concurrently on CPU threads, and the fork-join pool that runs them.
#pragma once

#include <algorithm>
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
#include "fitlib/device/policy.hpp"
#include "fitlib/device/serial.hpp"

namespace fitlib {

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

namespace cpu {

/// Runs shard tasks on a fork-join pool (the calling thread and `threads − 1` workers), as many at
/// a time as there are threads, in waves of shard order. Each task writes only its own shard's
/// buffers, so the outcome does not depend on which finishes first. A copy gets threads of its own.
class PoolExecutor {
 public:
  explicit PoolExecutor(index_t threads) {
    if (threads > 1) pool_ = detail::PoolHandle(threads - 1);
  }
  template <class F>
  void for_each(index_t n, F&& f) {
    if (!pool_) {
      for (index_t k = 0; k < n; ++k) f(k);
      return;
    }
    const index_t width = pool_->workers() + 1;
    for (index_t k0 = 0; k0 < n; k0 += width) pool_->run(std::min(width, n - k0), [&](index_t t) { f(k0 + t); });
  }
  /// Every task has finished when for_each returns.
  void fence() const {}

 private:
  detail::PoolHandle pool_;
};

/// Evaluates k shards concurrently, one per thread (the calling thread runs shard 0). Each shard
/// computes its partial sums alone; the likelihood adds them in shard order afterwards, so the
/// result is bitwise the same from run to run and the same as cpu::Serial with as many shards.
struct Threads {
  using memory_space = memory::host;
  using backend = fitlib::backend::host;
  /// The thread a shard runs on (shards beyond the thread count wait for a later wave).
  struct shard_resource {
    index_t thread = 0;
  };
  template <class T>
  using buffer = std::vector<T>;
  using dense_solver = detail::HostCholesky;

  index_t threads = 1;
  index_t concurrency() const { return threads; }
  std::vector<shard_resource> partition(index_t shards) const {
    std::vector<shard_resource> r(static_cast<std::size_t>(shards));
    for (index_t k = 0; k < shards; ++k) r[static_cast<std::size_t>(k)].thread = k % std::max<index_t>(threads, 1);
    return r;
  }
  /// A pool of min(threads, shards) threads.
  PoolExecutor executor(index_t shards) const { return PoolExecutor(std::min(threads, shards)); }
};

}  // namespace cpu

static_assert(device_policy<cpu::Threads>);

}  // namespace fitlib
