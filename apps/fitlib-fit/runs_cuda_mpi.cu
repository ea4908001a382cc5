// SPDX-License-Identifier: MIT
// fitlib-fit --device cuda under mpirun: the runs over mpi::Ranks<cuda::Devices>, compiled by nvcc where fitlib-fit has
// both MPI and CUDA.
#include "runs_cuda.cuh"

namespace fitlib::cli {

Fits run_cuda_ranks(const Args& a, std::shared_ptr<const Model> model, const std::vector<BinRange>& shards, io::RabbitReadOptions ro,
                    const LikelihoodOptions& lo, const io::RabbitTensor& in) {
  return run_cuda_on(mpi::Ranks<cuda::Devices>{cuda::Devices{a.devices}}, a, std::move(model), shards, ro, lo, in);
}

}  // namespace fitlib::cli
