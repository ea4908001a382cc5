// SPDX-License-Identifier: MIT
// cuda::DeviceCholesky: the CUDA policy's dense solver (cuSOLVER's potrf, potrs and potri): the covariance term's bins × bins
// solve and the postfit covariance.
#pragma once

#include <cuda_runtime.h>
#include <cusolverDn.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "fitlib/core/error.hpp"
#include "fitlib/core/types.hpp"
#include "fitlib/cuda/runtime.cuh"

namespace fitlib::cuda {

/// A Cholesky factorisation A = L·Lᵀ kept on a device, solved against host blocks: the interface of
/// detail::HostCholesky (device/host_solver.hpp), so that the covariance term factors C + diag q and
/// solves with it where the shards' data are. The device is the calling thread's current one at the
/// first factorisation: in a likelihood that is shard 0's (the calling thread runs shard 0's passes).
/// Only the matrix's n² doubles go down once per factorisation; right-hand sides and solutions are n
/// per column.
class DeviceCholesky {
 public:
  DeviceCholesky() = default;

  /// Factors A (`[n × n]`, the lower triangle is read); false when A is not positive definite or has a
  /// non-finite entry there, and then neither `solve` nor `inverse` may be called.
  bool factor(ConstBlockView<double> a) {
    const index_t n = a.rows;
    if (n != a.cols) throw usage_error("DeviceCholesky::factor needs a square matrix, got " + std::to_string(a.rows) + " × " + std::to_string(a.cols));
    if (n > INT_MAX) throw usage_error("DeviceCholesky::factor: cuSOLVER's potrf takes at most 2³¹ − 1 rows, got " + std::to_string(n));
    factored_ = false;
    host_.resize(static_cast<std::size_t>(n * n));
    for (index_t c = 0; c < n; ++c)
      for (index_t r = 0; r < n; ++r) {
        const double v = a(r, c);
        if (r >= c && !std::isfinite(v)) return false;
        host_[static_cast<std::size_t>(r + c * n)] = v;
      }
    start();
    n_ = n;
    const int ni = static_cast<int>(n);
    a_.resize(host_.size(), device_);
    check(cudaMemcpyAsync(a_.data(), host_.data(), host_.size() * sizeof(double), cudaMemcpyHostToDevice, stream_.get()), "cudaMemcpyAsync (factor)", device_);
    int lwork = 0;
    check(cusolverDnDpotrf_bufferSize(solver_.get(), CUBLAS_FILL_MODE_LOWER, ni, a_.data(), ni, &lwork), "cusolverDnDpotrf_bufferSize", device_);
    work_.resize(static_cast<std::size_t>(std::max(lwork, 1)), device_);
    info_.resize(1, device_);
    check(cusolverDnDpotrf(solver_.get(), CUBLAS_FILL_MODE_LOWER, ni, a_.data(), ni, work_.data(), lwork, info_.data()), "cusolverDnDpotrf", device_);
    int info = 0;
    check(cudaMemcpyAsync(&info, info_.data(), sizeof(int), cudaMemcpyDeviceToHost, stream_.get()), "cudaMemcpyAsync (potrf's info)", device_);
    check(cudaStreamSynchronize(stream_.get()), "cudaStreamSynchronize (factor)", device_);
    factored_ = info == 0;
    return factored_;
  }

  /// X = A⁻¹·B (`[n × nrhs]` each, host blocks; X may not alias B).
  void solve(ConstBlockView<double> b, BlockView<double> x) const {
    if (!factored_) throw usage_error("DeviceCholesky::solve without a successful factor()");
    if (b.rows != n_ || x.rows != n_ || x.cols != b.cols)
      throw usage_error("DeviceCholesky::solve: right-hand sides of " + std::to_string(b.rows) + " rows for a factor of " + std::to_string(n_));
    if (b.cols == 0) return;
    use_device(device_);
    const index_t m = b.cols;
    std::vector<double>& packed = host_;  // the factor's host copy is no longer needed
    packed.resize(static_cast<std::size_t>(n_ * m));
    for (index_t c = 0; c < m; ++c)
      for (index_t r = 0; r < n_; ++r) packed[static_cast<std::size_t>(r + c * n_)] = b(r, c);
    rhs_.resize(packed.size(), device_);
    check(cudaMemcpyAsync(rhs_.data(), packed.data(), packed.size() * sizeof(double), cudaMemcpyHostToDevice, stream_.get()), "cudaMemcpyAsync (solve)", device_);
    const int ni = static_cast<int>(n_);
    check(cusolverDnDpotrs(solver_.get(), CUBLAS_FILL_MODE_LOWER, ni, static_cast<int>(m), a_.data(), ni, rhs_.data(), ni, info_.data()), "cusolverDnDpotrs",
          device_);
    check(cudaMemcpyAsync(packed.data(), rhs_.data(), packed.size() * sizeof(double), cudaMemcpyDeviceToHost, stream_.get()), "cudaMemcpyAsync (solve)", device_);
    check(cudaStreamSynchronize(stream_.get()), "cudaStreamSynchronize (solve)", device_);
    for (index_t c = 0; c < m; ++c)
      for (index_t r = 0; r < n_; ++r) x(r, c) = packed[static_cast<std::size_t>(r + c * n_)];
  }

  /// X = A⁻¹ (`[n × n]`, host block, both triangles): cuSOLVER's potri on a device copy of the factor (which stays, for
  /// solve), its lower triangle mirrored on the host. The postfit covariance of a CUDA likelihood (fit.hpp).
  void inverse(BlockView<double> x) const {
    if (!factored_) throw usage_error("DeviceCholesky::inverse without a successful factor()");
    if (x.rows != n_ || x.cols != n_)
      throw usage_error("DeviceCholesky::inverse: a " + std::to_string(x.rows) + " × " + std::to_string(x.cols) + " block for a factor of " +
                        std::to_string(n_));
    if (n_ == 0) return;
    use_device(device_);
    const int ni = static_cast<int>(n_);
    const auto entries = static_cast<std::size_t>(n_ * n_);
    rhs_.resize(entries, device_);
    check(cudaMemcpyAsync(rhs_.data(), a_.data(), entries * sizeof(double), cudaMemcpyDeviceToDevice, stream_.get()), "cudaMemcpyAsync (inverse)", device_);
    int lwork = 0;
    check(cusolverDnDpotri_bufferSize(solver_.get(), CUBLAS_FILL_MODE_LOWER, ni, rhs_.data(), ni, &lwork), "cusolverDnDpotri_bufferSize", device_);
    work_.resize(static_cast<std::size_t>(std::max(lwork, 1)), device_);
    check(cusolverDnDpotri(solver_.get(), CUBLAS_FILL_MODE_LOWER, ni, rhs_.data(), ni, work_.data(), lwork, info_.data()), "cusolverDnDpotri", device_);
    host_.resize(entries);
    int info = 0;
    check(cudaMemcpyAsync(host_.data(), rhs_.data(), entries * sizeof(double), cudaMemcpyDeviceToHost, stream_.get()), "cudaMemcpyAsync (inverse)", device_);
    check(cudaMemcpyAsync(&info, info_.data(), sizeof(int), cudaMemcpyDeviceToHost, stream_.get()), "cudaMemcpyAsync (potri's info)", device_);
    check(cudaStreamSynchronize(stream_.get()), "cudaStreamSynchronize (inverse)", device_);
    if (info != 0) throw device_error("cusolverDnDpotri reported info " + std::to_string(info) + " on CUDA device " + std::to_string(device_));
    for (index_t c = 0; c < n_; ++c)
      for (index_t r = 0; r < n_; ++r) x(r, c) = host_[static_cast<std::size_t>(std::max(r, c) + std::min(r, c) * n_)];
  }

 private:
  /// The stream and cuSOLVER handle on the current device, made at the first factorisation.
  void start() {
    if (solver_) {
      use_device(device_);
      return;
    }
    device_ = current_device();
    stream_ = make_stream(device_);
    solver_ = Owned<cusolverDnHandle_t, cusolverDnDestroy>(device_, cusolverDnCreate, "cusolverDnCreate");
    check(cusolverDnSetStream(solver_.get(), stream_.get()), "cusolverDnSetStream", device_);
  }

  int device_ = 0;
  index_t n_ = 0;
  bool factored_ = false;
  Stream stream_;  // (declared before the handle bound to it, so destroyed after it)
  Owned<cusolverDnHandle_t, cusolverDnDestroy> solver_;
  Buffer<double> a_;
  // solve() and inverse() are const (as HostCholesky's) but stage through these.
  mutable Buffer<double> rhs_, work_;
  mutable Buffer<int> info_;
  mutable std::vector<double> host_;
};

}  // namespace fitlib::cuda
