// SPDX-License-Identifier: MIT
// fitlib-fit --device cuda: the runs over cuda::Devices, compiled by nvcc (built where CMake finds it).
#include "runs_cuda.cuh"

namespace fitlib::cli {

void require_cuda_device(int count) {
  if (count == 0)
    throw usage_error("--device cuda: this process sees no CUDA device (no GPU, no NVIDIA driver, or CUDA_VISIBLE_DEVICES hides them); "
                      "use --device cpu");
}

void resolve_cuda_devices(Args& a) {
#ifdef FITLIB_FIT_MPI
  if (a.ranks > 1) return resolve_cuda_devices_on_node(a);
#endif
  require_cuda_device(cuda::device_count());
  if (a.devices.empty()) a.devices = cuda::least_occupied(a.threads);  // --nDevices (1 by default)
  (void)cuda::Devices{a.devices};  // checks the ids
}

Fits run_cuda(const Args& a, std::shared_ptr<const Model> model, const std::vector<BinRange>& shards, io::RabbitReadOptions ro,
              const LikelihoodOptions& lo, const io::RabbitTensor& in) {
#ifdef FITLIB_FIT_MPI
  if (a.ranks > 1) return run_cuda_ranks(a, std::move(model), shards, ro, lo, in);
#endif
  return run_cuda_on(cuda::Devices{a.devices}, a, std::move(model), shards, ro, lo, in);
}

}  // namespace fitlib::cli
