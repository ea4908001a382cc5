// SPDX-License-Identifier: MIT
// cuda::Exact: SciPy's trust-exact subproblem with the Hessian and its Cholesky factors on a GPU.
#pragma once

#include "fitlib/cuda/layer.cuh"
#include "fitlib/device/layer_factorization.hpp"
#include "fitlib/minimize/exact.hpp"

namespace fitlib::cuda {

/// The Moré–Sorensen subproblem of `Exact` (minimize/exact.hpp) with H and every Cholesky factor of H + λI on one
/// device: `exact_on(d)`, or by default construction the calling thread's current device at that time. H goes down once
/// per iterate, and per λ trial only n-vectors and scalars cross (device::LayerFactorization says what differs from
/// the host's: cuSOLVER's potrf, cuBLAS's triangular solves, the smallest singular value by inverse iteration, double
/// precision only). `TrustRegion<cuda::Exact>` with any objective, a CUDA likelihood's or a host one's; a likelihood
/// over cuda::Devices offers its own (`Devices::exact_subproblem`, on its first device).
using Exact = BasicExact<device::LayerFactorization<Layer>>;

/// cuda::Exact on CUDA device `device`.
inline Exact exact_on(int device, ExactOptions options = {}) { return Exact(options, device::LayerFactorization<Layer>(ShardResource{device})); }

}  // namespace fitlib::cuda
