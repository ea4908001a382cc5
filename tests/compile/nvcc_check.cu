// SPDX-License-Identifier: MIT
// Compile-only check that the CPU umbrella header and the CUDA one get through nvcc cleanly, and that the
// per-bin algebra every shard shares is device code: the device-layer shard's kernels instantiated as
// __global__ functions (a host function called from them is an error here, not at a GPU's run time), and
// the CUDA shard and likelihood instantiated whole.
#include <fitlib/fit.hpp>
#include <fitlib/cuda.cuh>

// A translation unit must declare something; this also checks version.hpp is reachable.
static_assert(FITLIB_VERSION_MAJOR >= 0);

namespace fitlib_nvcc_check {
template <class Kernel>
__global__ void run_bins(Kernel k, fitlib::index_t n) {
  const fitlib::index_t t = static_cast<fitlib::index_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t < n) k(t);
}
}  // namespace fitlib_nvcc_check

template __global__ void fitlib_nvcc_check::run_bins<fitlib::detail::DataBinKernel<fitlib::detail::DenseCells>>(fitlib::detail::DataBinKernel<fitlib::detail::DenseCells>,
                                                                                           fitlib::index_t);
template __global__ void fitlib_nvcc_check::run_bins<fitlib::detail::DataBinKernel<fitlib::detail::SparseCells>>(
    fitlib::detail::DataBinKernel<fitlib::detail::SparseCells>, fitlib::index_t);
template __global__ void fitlib_nvcc_check::run_bins<fitlib::detail::AggregateBinKernel<fitlib::detail::DenseCells>>(
    fitlib::detail::AggregateBinKernel<fitlib::detail::DenseCells>, fitlib::index_t);
template __global__ void fitlib_nvcc_check::run_bins<fitlib::detail::BetaBinKernel<fitlib::detail::DenseCells>>(fitlib::detail::BetaBinKernel<fitlib::detail::DenseCells>,
                                                                                           fitlib::index_t);
template __global__ void fitlib_nvcc_check::run_bins<fitlib::detail::VarianceBinKernel<fitlib::detail::DenseCells>>(
    fitlib::detail::VarianceBinKernel<fitlib::detail::DenseCells>, fitlib::index_t);
template __global__ void fitlib_nvcc_check::run_bins<fitlib::detail::YieldsBinKernel<fitlib::detail::DenseCells>>(fitlib::detail::YieldsBinKernel<fitlib::detail::DenseCells>,
                                                                                             fitlib::index_t);

template class fitlib::Shard<fitlib::cuda::Devices, fitlib::storage::Dense>;
template class fitlib::Likelihood<fitlib::Shard<fitlib::cuda::Devices, fitlib::storage::Dense>>;
