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

/// Throws the refusal of --device cuda where the process sees no device (`count`).
void require_cuda_device(int count);

#ifdef FITLIB_FIT_MPI
/// resolve_cuda_devices under mpirun (runs_cuda_mpi.cu), collective over the run's ranks: ranks that share a node and
/// see the same devices split its listing (--devices, or the node's least occupied, chosen once for all of them:
/// cuda::node_share); ranks that see different devices (CUDA_VISIBLE_DEVICES per rank) choose each its own, and no
/// two may choose one device (cuda::require_unshared). a.threads becomes the rank's device count.
void resolve_cuda_devices_on_node(Args& a);
/// run_cuda under mpirun (runs_cuda_mpi.cu): mpi::Ranks<cuda::Devices>, each rank driving its a.devices.
Fits run_cuda_ranks(const Args& a, std::shared_ptr<const Model> model, const std::vector<BinRange>& shards, io::RabbitReadOptions ro,
                    const LikelihoodOptions& lo, const io::RabbitTensor& in);
#endif

}  // namespace fitlib::cli
