// SPDX-License-Identifier: MIT
// The parity tests of tests/likelihood/test_policies.cpp over the CUDA policy: values, gradients, HVPs,
// Hessians, postfit passes, replica slots, fits and batches against cpu::Serial, with 2 or 3 shards on
// device 0 (one stream each: a multi-shard run on one device), dense and sparse templates.
#include "fitlib/cuda.cuh"
#include "policies.hpp"

namespace fitlib::test {
/// The CUDA backend, k shards listed on device 0; to 1e-12 of cpu::Serial (its GEMMs sum in cuBLAS's order).
struct cuda_devices {
  using policy = cuda::Devices;
  using storage = fitlib::storage::Dense;
  static constexpr bool bitwise = false;
  static policy make(index_t k) { return cuda::Devices(std::vector<int>(static_cast<std::size_t>(k), 0)); }
};
/// The same with sparse templates (the CSR and CSC kernels in place of cuBLAS's GEMMs).
struct cuda_devices_sparse : cuda_devices {
  using storage = fitlib::storage::Sparse;
};
}  // namespace fitlib::test

#undef FITLIB_TEST_POLICIES
#define FITLIB_TEST_POLICIES fitlib::test::cuda_devices, fitlib::test::cuda_devices_sparse
#include "likelihood/test_policies.cpp"
