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

// AddressSanitizer is told about every switch (its fiber API), so it knows which stack is current,
// keeps each fiber's fake stack (detect_stack_use_after_return) and checks the fiber frames that
// stay live across a suspend.
#if defined(__SANITIZE_ADDRESS__)
#define FITLIB_DETAIL_FIBER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FITLIB_DETAIL_FIBER_ASAN 1
#endif
#endif
#ifdef FITLIB_DETAIL_FIBER_ASAN
#include <dlfcn.h>
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

namespace fitlib::detail {

namespace fiber_switch {
#ifdef FITLIB_DETAIL_FIBER_ASAN
/// libc's own swapcontext. ASan's interceptor of it, which would run otherwise, clears the shadow
/// of the stack being entered (so overflows in frames live across a suspend went unseen) and warns
/// that it "doesn't fully support" the switch; with the annotations below it is not needed.
inline int swap(ucontext_t* from, const ucontext_t* to) {
  using fn = int (*)(ucontext_t*, const ucontext_t*);
  static const fn real = [] {
    void* libc = dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD);
    void* f = libc ? dlsym(libc, "swapcontext") : nullptr;
    return f ? reinterpret_cast<fn>(f) : &::swapcontext;
  }();
  return real(from, to);
}
inline void start(void** fake_stack, const void* bottom, std::size_t size) { __sanitizer_start_switch_fiber(fake_stack, bottom, size); }
inline void finish(void* fake_stack, const void** bottom_old, std::size_t* size_old) {
  __sanitizer_finish_switch_fiber(fake_stack, bottom_old, size_old);
}
inline void unpoison(void* p, std::size_t n) { __asan_unpoison_memory_region(p, n); }
#else
inline int swap(ucontext_t* from, const ucontext_t* to) { return swapcontext(from, to); }
inline void start(void**, const void*, std::size_t) {}
inline void finish(void*, const void**, std::size_t*) {}
inline void unpoison(void*, std::size_t) {}
#endif
}  // namespace fiber_switch

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
    guard_ = page;
    // Reserved, not committed: pages are touched only as deep as the body goes; the lowest page
    // is a guard, so an overflow faults instead of corrupting the heap.
    void* mem = mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (mem == MAP_FAILED) throw std::bad_alloc();
    stack_ = static_cast<char*>(mem);
    // A stack at an address an earlier fiber's had keeps no poison from that fiber's last frames.
    fiber_switch::unpoison(stack_, size_);
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
    fiber_switch::unpoison(stack_ + guard_, size_ - guard_);  // entry's frame never returned
    munmap(stack_, size_);
  }

  bool done() const { return done_; }

  /// Runs the body until it suspends or ends; rethrows an exception that ended it.
  void resume() {
    if (done_) return;
    started_ = true;
    Fiber* outer = std::exchange(current(), this);
    void* caller_fake_stack = nullptr;
    fiber_switch::start(&caller_fake_stack, stack_ + guard_, size_ - guard_);
    fiber_switch::swap(&caller_, &context_);
    fiber_switch::finish(caller_fake_stack, nullptr, nullptr);
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
    fiber_switch::start(&f->fake_stack_, f->caller_bottom_, f->caller_size_);
    fiber_switch::swap(&f->context_, &f->caller_);
    // Resumed, perhaps from another stack than last time: learn it for the next switch back.
    fiber_switch::finish(f->fake_stack_, &f->caller_bottom_, &f->caller_size_);
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
    fiber_switch::finish(nullptr, &f->caller_bottom_, &f->caller_size_);
    try {
      f->body_();
    } catch (const Cancelled&) {
    } catch (...) {
      f->error_ = std::current_exception();
    }
    f->done_ = true;
    fiber_switch::start(nullptr, f->caller_bottom_, f->caller_size_);  // null: this stack's fake frames die with it
    fiber_switch::swap(&f->context_, &f->caller_);                     // never resumed again
  }

  std::function<void()> body_;
  char* stack_ = nullptr;
  std::size_t size_ = 0, guard_ = 0;
  ucontext_t context_{}, caller_{};
  void* fake_stack_ = nullptr;  // ASan's fake stack of the body while it is suspended
  const void* caller_bottom_ = nullptr;  // the stack that resumed the body (ASan)
  std::size_t caller_size_ = 0;
  bool started_ = false, done_ = false, cancelling_ = false;
  std::exception_ptr error_;
};

}  // namespace fitlib::detail
