// SPDX-License-Identifier: MIT
// cpu::Serial: the one-thread CPU device policy, the reference every backend is checked against.
#pragma once

#include <vector>

#include "fitlib/core/types.hpp"
#include "fitlib/device/host_solver.hpp"
#include "fitlib/device/policy.hpp"

namespace fitlib::cpu {

/// Runs shard tasks on the calling thread, one after the other; a task has finished when
/// for_each returns, so fence() has nothing to wait for.
struct InlineExecutor {
  template <class F>
  void for_each(index_t n, F&& f) const {
    for (index_t k = 0; k < n; ++k) f(k);
  }
  void fence() const {}
};

/// Evaluates every shard on the calling thread, one after the other.
struct Serial {
  using memory_space = memory::host;
  using backend = fitlib::backend::host;
  /// A host shard needs nothing from its resource.
  struct shard_resource {};
  template <class T>
  using buffer = std::vector<T>;
  using dense_solver = detail::HostCholesky;

  /// Number of shards the policy runs concurrently.
  static constexpr index_t concurrency() { return 1; }
  std::vector<shard_resource> partition(index_t shards) const { return std::vector<shard_resource>(static_cast<std::size_t>(shards)); }
  InlineExecutor executor(index_t) const { return {}; }
};

}  // namespace fitlib::cpu

namespace fitlib {
static_assert(device_policy<cpu::Serial>);
}  // namespace fitlib
