// SPDX-License-Identifier: MIT
// fitlib for GPU users: everything of fit.hpp, plus the CUDA device policy. Compile with nvcc (C++20) and link
// CUDA's runtime, cuBLAS and cuSOLVER (CMake: fitlib::cuda).
//
//   fitlib::cuda::Devices gpus{fitlib::cuda::least_occupied(2)};   // or Devices{{0, 2}}
//   fitlib::Likelihood<fitlib::Shard<fitlib::cuda::Devices, fitlib::storage::Dense>> nll(model, gpus);
//   auto r = fitlib::fit(nll, fitlib::TrustRegion<fitlib::Gltr>{});   // the minimizer is unchanged host code
#pragma once

#include "fitlib/fit.hpp"
#include "fitlib/cuda/devices.cuh"
#include "fitlib/cuda/exact.cuh"
#include "fitlib/cuda/layer.cuh"
#include "fitlib/cuda/runtime.cuh"
#include "fitlib/cuda/selection.hpp"
#include "fitlib/cuda/solver.cuh"
