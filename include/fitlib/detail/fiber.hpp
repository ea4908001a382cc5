// SPDX-License-Identifier: MIT
// Fiber: a function on its own stack that can suspend itself and be resumed (POSIX ucontext).
#pragma once

#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <cstdint>
#include <exception>
#include <functional>
#include <new>
#include <utility>

namespace fitlib::detail {

/// A body run on its own stack in the calling thread: `resume()` runs it until it calls
/// `Fiber::suspend()` or returns. Single-threaded and cooperative, so a program of fibers is as
/// deterministic as one without. ReplicaBatch runs each replica's unchanged sequential fit in one,
/// suspending at each evaluation so that the evaluations of all replicas can be pooled.
///
/// An exception leaving the body is kept and rethrown by `resume()`. `cancel()` unwinds a
/// suspended body (its `suspend()` throws `Cancelled`, which the fiber swallows), so the objects
/// on its stack are destroyed; the destructor cancels a body still suspended.
class Fiber {
 public:
  /// Thrown from `suspend()` inside a fiber being cancelled; let it propagate.
  struct Cancelled {};

  explicit Fiber(std::function<void()> body, std::size_t stack_bytes = std::size_t{4} << 20) : body_(std::move(body)) {
    const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
    size_ = (stack_bytes + page - 1) / page * page + page;
    // Reserved, not committed: pages are touched only as deep as the body goes; the lowest page
    // is a guard, so an overflow faults instead of corrupting the heap.
    void* mem = mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (mem == MAP_FAILED) throw std::bad_alloc();
    stack_ = static_cast<char*>(mem);
    mprotect(stack_, page, PROT_NONE);
    getcontext(&context_);
    context_.uc_stack.ss_sp = stack_ + page;
    context_.uc_stack.ss_size = size_ - page;
    context_.uc_link = nullptr;
    const auto self = reinterpret_cast<std::uintptr_t>(this);
    makecontext(&context_, reinterpret_cast<void (*)()>(&Fiber::entry), 2, static_cast<unsigned>(self >> 32),
                static_cast<unsigned>(self & 0xFFFFFFFFu));
  }
  Fiber(const Fiber&) = delete;
  Fiber& operator=(const Fiber&) = delete;
  ~Fiber() {
    if (started_ && !done_) cancel();
    munmap(stack_, size_);
  }

  bool done() const { return done_; }

  /// Runs the body until it suspends or ends; rethrows an exception that ended it.
  void resume() {
    if (done_) return;
    started_ = true;
    Fiber* outer = std::exchange(current(), this);
    swapcontext(&caller_, &context_);
    current() = outer;
    if (done_ && error_) std::rethrow_exception(std::exchange(error_, nullptr));
  }

  /// Unwinds a suspended body; its remaining work is dropped.
  void cancel() {
    if (done_ || !started_) {
      done_ = true;
      return;
    }
    cancelling_ = true;
    resume();
  }

  /// From inside a body: returns control to whoever resumed it. Throws `Cancelled` when the fiber
  /// is being cancelled.
  static void suspend() {
    Fiber* f = current();
    swapcontext(&f->context_, &f->caller_);
    if (f->cancelling_) throw Cancelled{};
  }

  /// True inside a fiber's body.
  static bool inside() { return current() != nullptr; }

 private:
  static Fiber*& current() {
    thread_local Fiber* f = nullptr;
    return f;
  }

  static void entry(unsigned hi, unsigned lo) {
    Fiber* f = reinterpret_cast<Fiber*>((static_cast<std::uintptr_t>(hi) << 32) | lo);
    try {
      f->body_();
    } catch (const Cancelled&) {
    } catch (...) {
      f->error_ = std::current_exception();
    }
    f->done_ = true;
    swapcontext(&f->context_, &f->caller_);  // never resumed again
  }

  std::function<void()> body_;
  char* stack_ = nullptr;
  std::size_t size_ = 0;
  ucontext_t context_{}, caller_{};
  bool started_ = false, done_ = false, cancelling_ = false;
  std::exception_ptr error_;
};

}  // namespace fitlib::detail
