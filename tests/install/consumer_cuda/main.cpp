// SPDX-License-Identifier: MIT
// Links fitlib::cuda from an installed fitlib: the device selection (host code) and the CUDA runtime's answer.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <vector>

#include "fitlib/cuda/selection.hpp"

int main() {
  // Two devices by memory in use: the least occupied is device 1.
  constexpr std::uint64_t GiB = std::uint64_t{1} << 30;
  const std::vector<fitlib::cuda::DeviceMemory> mem{{0, 80 * GiB, 40 * GiB}, {1, 80 * GiB, 1 * GiB}};
  const std::vector<int> pick = fitlib::cuda::least_occupied(mem, 1);
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) count = 0;  // no driver or no device: none
  std::printf("least occupied: %d; CUDA devices here: %d\n", pick.at(0), count);
  return pick.at(0) == 1 ? 0 : 1;
}
