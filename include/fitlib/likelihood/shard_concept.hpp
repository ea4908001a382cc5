// SPDX-License-Identifier: MIT
// The shard contract: what Likelihood<Shard> calls on each shard, core passes and postfit passes.
#pragma once

#include <concepts>
#include <cstdint>
#include <memory>
#include <span>

#include "fitlib/core/concepts.hpp"
#include "fitlib/core/types.hpp"
#include "fitlib/device/policy.hpp"
#include "fitlib/likelihood/options.hpp"
#include "fitlib/likelihood/partial_request.hpp"
#include "fitlib/model/model.hpp"

namespace fitlib {

/// The core of the contract: a contiguous bin range built from (model, bins, its resource, the
/// likelihood's options, its index), its data slots, and the passes every fit needs. `partials`
/// launches a pass (PartialRequest); its outputs are ready after `fence()` (a host shard computes
/// at launch), so the likelihood launches every shard before it waits for any. The other passes
/// return with their outputs ready. Every output is host memory of parameter size (or, for the
/// postfit passes, of the shard's bins): the templates never leave the shard.
template <class S>
concept shard_core = requires(S& s, const S& cs, std::shared_ptr<const Model> m, BinRange r, typename S::resource_type res,
                              const LikelihoodOptions& o, index_t k, std::span<const double> d, std::span<const std::uint8_t> b,
                              const PartialRequest& rq, ConstBlockView<double> x, BlockView<double> out) {
  typename S::policy_type;
  typename S::resource_type;
  requires device_policy<typename S::policy_type>;
  S(m, r, res, o, k);
  { cs.bins() } -> std::same_as<BinRange>;
  { cs.ndata() } -> std::convertible_to<index_t>;
  { cs.index() } -> std::convertible_to<index_t>;
  { cs.model() } -> std::same_as<const Model&>;
  s.set_data(d, d);
  s.set_slot(k, d, d, b);
  s.clear_slots();
  s.partials(rq);
  s.fence();
  s.hessian(x, k, out, x, out, k);
};

/// What the postfit helpers and the coupled terms call: yields, β̂ and its variance, the yields' Jacobian, fixed-β
/// evaluation, the observables of a bin range and the covariance term's per-bin aggregates.
template <class S>
concept shard_postfit = requires(S& s, ConstBlockView<double> x, BlockView<double> out, index_t k, std::span<double> o,
                                 std::span<const double> c, BinRange r) {
  s.yields(x, k, o);
  s.bin_by_bin_parameters(x, o, x);
  s.bin_by_bin_variance(x, x, o);
  s.jacobian(x, r, true, JacobianRows::summed, o, o, o);
  s.fix_bin_by_bin(c);
  s.observables(x, x, r, out, out);
  s.coupled_aggregates(x, x, out, out, out, out);
};

/// A shard of Likelihood<Shard>: both halves of the contract.
template <class S>
concept shard = shard_core<S> && shard_postfit<S>;

/// A shard that also computes the Gauss–Newton matrix (hessian with a Curvature and the interpolation's
/// diagonal term; the host shards): what Likelihood's Curvature::gauss_newton needs.
template <class S>
concept gauss_newton_shard = shard<S> && requires(S& s, ConstBlockView<double> x, BlockView<double> h, index_t k, std::span<double> d) {
  s.hessian(x, k, h, x, h, k, Curvature::gauss_newton, d);
};

/// Checks a shard type with messages that name what is missing (ensmallen's static checks are the
/// model); Likelihood<Shard> instantiates it.
template <class S>
constexpr bool check_shard() {
  static_assert(device_policy<typename S::policy_type>,
                "Shard::policy_type is not a device_policy: it needs memory_space, backend, shard_resource, dense_solver, buffer<T>, "
                "concurrency(), partition(k) and executor(k) with for_each and fence (device/policy.hpp)");
  static_assert(shard_core<S>,
                "the shard lacks the core contract: a constructor (model, bins, resource, options, index), bins(), ndata(), index(), "
                "model(), set_data, set_slot, clear_slots, partials(PartialRequest), fence() and hessian (likelihood/shard_concept.hpp)");
  static_assert(shard_postfit<S>,
                "the shard lacks the postfit contract: yields, bin_by_bin_parameters, bin_by_bin_variance, jacobian, fix_bin_by_bin, observables "
                "and coupled_aggregates (likelihood/shard_concept.hpp)");
  return true;
}

}  // namespace fitlib
