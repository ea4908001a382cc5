// SPDX-License-Identifier: MIT
// Runs code in a forked child and measures its peak resident memory growth and its time, killing it past a bound;
// and seeded byte mutations of a file, for the reader's resource-bound tests (tests/io/test_reader_bounds.cpp) and
// the mutation search (fuzz/mutation_search.cpp). Linux only (fork, /proc, wait4's ru_maxrss).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#if defined(__linux__)
#define FITLIB_BOUNDED_RUN 1
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <stdexcept>
#include <thread>

#include "fitlib/core/error.hpp"
#endif

namespace fitlib::test {

/// Whether the code runs under AddressSanitizer, whose shadow memory and quarantine add to the resident memory.
constexpr bool under_asan() {
#if defined(__SANITIZE_ADDRESS__)
  return true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
  return true;
#else
  return false;
#endif
#else
  return false;
#endif
}

/// How a bounded run ended.
enum class RunOutcome {
  returned,       ///< the code returned
  fitlib_error,   ///< it threw a fitlib::error (`message` holds what())
  other_error,    ///< it threw anything else (`message` says what)
  crashed,        ///< the child died of a signal it raised itself (`signal`)
  killed_memory,  ///< killed: its resident memory grew past the bound
  killed_time,    ///< killed: it ran past the time bound
};

inline const char* outcome_name(RunOutcome o) {
  switch (o) {
    case RunOutcome::returned: return "returned";
    case RunOutcome::fitlib_error: return "threw a fitlib::error";
    case RunOutcome::other_error: return "threw a non-fitlib exception";
    case RunOutcome::crashed: return "crashed";
    case RunOutcome::killed_memory: return "was killed for its memory";
    case RunOutcome::killed_time: return "was killed for its time";
  }
  return "?";
}

/// What a bounded run measured.
struct RunResult {
  RunOutcome outcome = RunOutcome::crashed;
  std::size_t peak_growth = 0;  ///< peak resident bytes beyond the child's own at its start (ru_maxrss − start)
  double seconds = 0;           ///< wall time from fork to exit
  int signal = 0;               ///< the signal that ended it, if one did
  std::string message;          ///< what it threw
};

/// The bytes `data` with `count` seeded mutations, each one of: a byte xor-ed with a random non-zero value, a byte set
/// to 0x00, 0x7f, 0x80 or 0xff (the values that turn an extent or an address into a huge one), or 2–8 bytes set to
/// 0xff. The same (data, seed) always gives the same bytes.
inline std::vector<char> mutate(std::vector<char> data, std::uint64_t seed, int count) {
  std::mt19937_64 rng(seed);
  if (data.empty()) return data;
  for (int k = 0; k < count; ++k) {
    const std::size_t at = static_cast<std::size_t>(rng() % data.size());
    switch (rng() % 3) {
      case 0: data[at] = static_cast<char>(data[at] ^ static_cast<char>(1 + rng() % 255)); break;
      case 1: {
        static constexpr unsigned char values[] = {0x00, 0x7f, 0x80, 0xff};
        data[at] = static_cast<char>(values[rng() % 4]);
        break;
      }
      default: {
        const std::size_t len = 2 + static_cast<std::size_t>(rng() % 7);
        for (std::size_t i = at; i < std::min(data.size(), at + len); ++i) data[i] = static_cast<char>(0xff);
      }
    }
  }
  return data;
}

#if defined(FITLIB_BOUNDED_RUN)

namespace detail {

/// The resident set of process `pid` in bytes (VmRSS), or -1 where /proc does not say.
inline long long resident_bytes(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::atoll(line.c_str() + 6) * 1024;
  return -1;
}

}  // namespace detail

/// Runs `body` in a forked child, polling its resident memory every millisecond: a child whose memory grows more than
/// `kill_bytes` beyond its own at the start, or that runs longer than `kill_seconds`, is killed (SIGKILL) and so
/// reported. The child exits with _exit (no atexit handlers, no Catch2 reporting) and the default signal handlers.
/// The peak is wait4's ru_maxrss, the child's high-water mark, less its resident memory when it started.
template <class F>
RunResult run_bounded(F&& body, std::size_t kill_bytes, double kill_seconds) {
  using clock = std::chrono::steady_clock;
  int fds[2];
  if (pipe(fds) != 0) throw std::runtime_error("run_bounded: pipe failed");
  std::fflush(nullptr);
  const auto t0 = clock::now();
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("run_bounded: fork failed");
  if (pid == 0) {
    for (int sig : {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL}) std::signal(sig, SIG_DFL);
    close(fds[0]);
    const long long start = detail::resident_bytes(getpid());
    (void)!write(fds[1], &start, sizeof start);
    char code = 0;
    std::string message;
    try {
      body();
    } catch (const fitlib::error& e) {
      code = 1;
      message = e.what();
    } catch (const std::exception& e) {
      code = 2;
      message = e.what();
    } catch (...) {
      code = 2;
      message = "a non-standard exception";
    }
    (void)!write(fds[1], &code, 1);
    (void)!write(fds[1], message.data(), message.size());
    close(fds[1]);
    _exit(0);
  }
  close(fds[1]);
  fcntl(fds[0], F_SETFL, O_NONBLOCK);
  std::string received;
  const auto drain = [&] {
    char buf[4096];
    for (ssize_t got; (got = read(fds[0], buf, sizeof buf)) > 0;) received.append(buf, static_cast<std::size_t>(got));
  };
  RunResult r;
  int status = 0;
  rusage usage{};
  bool killed = false;
  for (;;) {
    drain();
    if (wait4(pid, &status, WNOHANG, &usage) == pid) break;
    const double elapsed = std::chrono::duration<double>(clock::now() - t0).count();
    long long start = -1;
    if (received.size() >= sizeof start) std::memcpy(&start, received.data(), sizeof start);
    const long long now = detail::resident_bytes(pid);
    if (start >= 0 && now >= 0 && now > start && static_cast<unsigned long long>(now - start) > kill_bytes) {
      r.outcome = RunOutcome::killed_memory;
      killed = true;
    } else if (elapsed > kill_seconds) {
      r.outcome = RunOutcome::killed_time;
      killed = true;
    }
    if (killed) {
      kill(pid, SIGKILL);
      wait4(pid, &status, 0, &usage);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  drain();
  close(fds[0]);
  r.seconds = std::chrono::duration<double>(clock::now() - t0).count();
  long long start = 0;
  if (received.size() >= sizeof start) std::memcpy(&start, received.data(), sizeof start);
  const long long peak = static_cast<long long>(usage.ru_maxrss) * 1024;
  r.peak_growth = peak > start ? static_cast<std::size_t>(peak - start) : 0;
  if (killed) return r;
  if (WIFSIGNALED(status)) {
    r.outcome = RunOutcome::crashed;
    r.signal = WTERMSIG(status);
    return r;
  }
  if (received.size() <= sizeof start) {
    r.outcome = RunOutcome::crashed;  // exited without reporting
    return r;
  }
  const char code = received[sizeof start];
  r.outcome = code == 0 ? RunOutcome::returned : code == 1 ? RunOutcome::fitlib_error : RunOutcome::other_error;
  r.message = received.substr(sizeof start + 1);
  return r;
}

#endif  // FITLIB_BOUNDED_RUN

}  // namespace fitlib::test
