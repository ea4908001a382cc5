// SPDX-License-Identifier: MIT
// The policy type list every parity test runs over: each backend against cpu::Serial (Kokkos' test categories are the model).
#pragma once

#include <string>

#include "fitlib/fit.hpp"

namespace fitlib::test {

/// One entry of the list: the policy with k shards, and whether its results must equal
/// cpu::Serial's with as many shards bitwise (the host backends) or to 1e-12 (the device shapes,
/// whose GEMMs sum in another order; docs/likelihood.md, "Determinism").
struct serial {
  using policy = cpu::Serial;
  static constexpr bool bitwise = true;
  static policy make(index_t) { return {}; }
};
struct threads {
  using policy = cpu::Threads;
  static constexpr bool bitwise = true;
  static policy make(index_t k) { return {k}; }
};
/// The device-layer shard (GEMM, per-bin launch, GEMM) on the host: the CUDA backend's shape.
struct device_layer {
  using policy = device::HostLayered;
  static constexpr bool bitwise = false;
  static policy make(index_t k) { return {k}; }
};

/// The likelihood of a list entry with k shards (LikelihoodOptions::shards set to k).
template <class T>
using LikelihoodOf = Likelihood<Shard<typename T::policy, storage::Dense>>;
template <class T>
LikelihoodOf<T> likelihood_of(const Model& m, index_t k, LikelihoodOptions lo = {}) {
  lo.shards = k;
  return LikelihoodOf<T>(m, T::make(k), lo);
}

/// A list entry's likelihood with k shards beside cpu::Serial's with as many: what a parity test compares.
template <class T>
struct AgainstSerial {
  AgainstSerial(const Model& m, index_t k, const LikelihoodOptions& lo = {}) : tested(likelihood_of<T>(m, k, lo)), serial(m, {}, sharded(lo, k)) {}
  LikelihoodOf<T> tested;
  SerialLikelihood serial;

 private:
  static LikelihoodOptions sharded(LikelihoodOptions lo, index_t k) {
    lo.shards = k;
    return lo;
  }
};

}  // namespace fitlib::test

/// The list; a backend's tests (tests/cuda/) add their entry to it.
#define FITLIB_TEST_POLICIES fitlib::test::serial, fitlib::test::threads, fitlib::test::device_layer
