// SPDX-License-Identifier: MIT
// The policy type list every parity test runs over: each backend against cpu::Serial (Kokkos' test categories are the model).
#pragma once

#include <concepts>
#include <string>
#include <utility>

#include "fitlib/fit.hpp"

namespace fitlib::test {

/// One entry of the list: the policy with k shards, how its shards store the templates, and whether its results
/// must equal cpu::Serial's (dense) with as many shards bitwise (the host backends) or to 1e-12 (the device shapes,
/// whose GEMMs sum in another order, and sparse templates; docs/likelihood.md, "Determinism").
struct serial {
  using policy = cpu::Serial;
  using storage = fitlib::storage::Dense;
  static constexpr bool bitwise = true;
  static policy make(index_t) { return {}; }
};
struct threads {
  using policy = cpu::Threads;
  using storage = fitlib::storage::Dense;
  static constexpr bool bitwise = true;
  static policy make(index_t k) { return {k}; }
};
/// The device-layer shard (GEMM, per-bin launch, GEMM) on the host: the CUDA backend's shape.
struct device_layer {
  using policy = device::HostLayered;
  using storage = fitlib::storage::Dense;
  static constexpr bool bitwise = false;
  static policy make(index_t k) { return {k}; }
};
/// The same with sparse templates: the CSR and CSC kernels in place of the GEMMs.
struct device_layer_sparse : device_layer {
  using storage = fitlib::storage::Sparse;
};

/// The likelihood of a list entry with k shards (LikelihoodOptions::shards set to k), on a copy of the model stored as
/// the entry's shards hold it.
template <class T>
using LikelihoodOf = Likelihood<Shard<typename T::policy, typename T::storage>>;
template <class T>
LikelihoodOf<T> likelihood_of(const Model& m, index_t k, LikelihoodOptions lo = {}) {
  lo.shards = k;
  if constexpr (std::same_as<typename T::storage, fitlib::storage::Sparse>) {
    Model sparse = m;
    sparse.make_sparse();
    return LikelihoodOf<T>(std::move(sparse), T::make(k), lo);
  } else {
    return LikelihoodOf<T>(m, T::make(k), lo);
  }
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
#define FITLIB_TEST_POLICIES fitlib::test::serial, fitlib::test::threads, fitlib::test::device_layer, fitlib::test::device_layer_sparse
