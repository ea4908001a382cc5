// SPDX-License-Identifier: MIT
// cpu::Serial: the one-thread CPU device policy, the reference every backend is checked against.
#pragma once

#include <concepts>
#include <type_traits>

#include "fitlib/core/types.hpp"

namespace fitlib {

namespace cpu {
/// Evaluates every shard on the calling thread, one after the other.
struct Serial {
  /// Number of shards the policy runs concurrently.
  static constexpr index_t concurrency() { return 1; }
};
}  // namespace cpu

/// A device policy names a kind of resource; an instance holds it (DESIGN.md, "The five parts").
template <class P>
concept device_policy = std::copy_constructible<P> && requires(const P& p) {
  { p.concurrency() } -> std::convertible_to<index_t>;
};

template <class P>
inline constexpr bool is_device_policy_v = device_policy<P>;

}  // namespace fitlib

namespace fitlib::cpu {
/// True for policies whose shards run on the host with the Eigen kernels.
template <class P>
inline constexpr bool is_host_policy_v = false;
template <>
inline constexpr bool is_host_policy_v<Serial> = true;
}  // namespace fitlib::cpu
