// SPDX-License-Identifier: MIT
// What the two CUDA translation units of fitlib-fit share (runs_cuda.cu, and runs_cuda_mpi.cu under MPI: compiled in
// parallel, since nvcc takes minutes over each).
#pragma once

#include <fitlib/cuda.cuh>

#include "runs.hpp"

namespace fitlib::cli {

/// run_on over a CUDA policy, holding the templates as the model stores them (dense, or sparse without densifying).
template <class Policy>
Fits run_cuda_on(const Policy& policy, const Args& a, std::shared_ptr<const Model> model, const std::vector<BinRange>& shards,
                 io::RabbitReadOptions ro, const LikelihoodOptions& lo, const io::RabbitTensor& in) {
  if (model->sparse()) return run_on<storage::Sparse>(policy, a, std::move(model), shards, ro, lo, in);
  return run_on<storage::Dense>(policy, a, std::move(model), shards, ro, lo, in);
}

#ifdef FITLIB_FIT_MPI
/// run_cuda under mpirun (runs_cuda_mpi.cu): mpi::Ranks<cuda::Devices>, each rank driving its node's a.devices.
Fits run_cuda_ranks(const Args& a, std::shared_ptr<const Model> model, const std::vector<BinRange>& shards, io::RabbitReadOptions ro,
                    const LikelihoodOptions& lo, const io::RabbitTensor& in);
#endif

}  // namespace fitlib::cli
