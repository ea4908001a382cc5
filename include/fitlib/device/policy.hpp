// SPDX-License-Identifier: MIT
// The device-policy contract: memory space, backend, per-shard resources, executor and dense solver.
#pragma once

#include <concepts>
#include <type_traits>
#include <utility>
#include <vector>

#include "fitlib/core/types.hpp"

namespace fitlib {

/// Where a policy's buffers live. Parameters, partials and everything parameter-sized stay on the
/// host whatever the backend; only bins-proportional data live in a policy's memory space.
namespace memory {
struct host {};
}  // namespace memory

/// Which Shard specialisation evaluates a policy's bins (DESIGN.md, "The five parts"): the host's
/// fused, cache-blocked pass (likelihood/shard.hpp), or the device-layer shard over a small device
/// layer (likelihood/layer_shard.hpp: a GEMM for the forward products, the per-bin functions
/// launched over the bins, a GEMM for the backward products), the shape a GPU runs.
namespace backend {
struct host {};
template <class Layer>
struct layered {
  using layer = Layer;
};
}  // namespace backend

/// A device policy names a kind of resource and an instance holds it (Kokkos' execution spaces are
/// the model). It says
/// - `memory_space` and `buffer<T>`: where its shards keep their bins' data;
/// - `backend`: which Shard specialisation runs on it;
/// - `shard_resource` and `partition(k)`: the resource of each of k shards (a thread, a device and
///   stream), handed to shard k with its index;
/// - `executor(k)`: what runs k shards' passes (`for_each(k, f)` launches f(shard) for each, then
///   `fence()` waits for all), replacing a pool inside the likelihood;
/// - `dense_solver`: Cholesky factor/solve/inverse on raw column-major data (Eigen on the host), for
///   the bins × bins solve of the covariance term and the postfit covariance (fit.hpp);
/// - `concurrency()`: how many shards it runs at once (the default shard count).
/// mpi::Ranks<Inner> forwards all of these to its inner policy, so backends compose by type.
namespace detail {
/// A task that does nothing, for checking an executor's for_each (a lambda in a requires-expression
/// is beyond nvcc's front end).
struct noop_task {
  void operator()(index_t) const {}
};
}  // namespace detail

template <class P>
concept device_policy = std::copy_constructible<P> && requires(const P& p, index_t k) {
  typename P::memory_space;
  typename P::backend;
  typename P::shard_resource;
  typename P::dense_solver;
  typename P::template buffer<double>;
  { p.concurrency() } -> std::convertible_to<index_t>;
  { p.partition(k) } -> std::same_as<std::vector<typename P::shard_resource>>;
  p.executor(k).for_each(k, detail::noop_task{});
  p.executor(k).fence();
};

template <class P>
inline constexpr bool is_device_policy_v = device_policy<P>;

/// The Shard specialisation a policy's bins are evaluated with.
template <class P>
using backend_of_t = typename P::backend;

/// The executor type of a policy.
template <class P>
using executor_of_t = decltype(std::declval<const P&>().executor(index_t{1}));

}  // namespace fitlib
