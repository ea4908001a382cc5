// SPDX-License-Identifier: MIT
// The default number of threads: the cores this process may run on, as many as the bins allow.
#pragma once

#include <algorithm>
#include <thread>

#if defined(__linux__)
#include <sched.h>
#endif

#include "fitlib/core/types.hpp"

namespace fitlib::cpu {

/// The cores this process may run on: its affinity mask (taskset, a container's cpuset) where the system has one, else
/// the machine's hardware threads; at least 1.
inline int available_cores() {
#if defined(__linux__)
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
#endif
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

/// The threads (one shard each) a likelihood of `bins` unmasked bins gets by default, fitlib-fit's and Python's
/// fitlib.fit's: the available cores, halved until every shard has a bin.
inline int default_threads(index_t bins) {
  int k = available_cores();
  while (k > 1 && k > bins) k /= 2;
  return k;
}

}  // namespace fitlib::cpu
