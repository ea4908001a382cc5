// SPDX-License-Identifier: MIT
// cuda::Layer: the device layer of the device-layer shard on one CUDA device and stream (cuBLAS GEMMs, kernels).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cusolverDn.h>

#include <algorithm>
#include <climits>
#include <span>
#include <string>
#include <utility>

#include "fitlib/core/types.hpp"
#include "fitlib/cuda/runtime.cuh"
#include "fitlib/cuda/selection.hpp"
#include "fitlib/device/host_layer.hpp"
#include "fitlib/device/shard_bytes.hpp"

namespace fitlib::cuda {

/// Where one shard runs. Each shard's layer has a stream of its own, so two shards on one device
/// overlap their work.
struct ShardResource {
  int device = 0;
  bool operator==(const ShardResource&) const = default;
};

namespace detail {
/// f(t) for every t in [0, n), one thread each.
template <class F>
__global__ void for_each_index(F f, index_t n) {
  const index_t t = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t < n) f(t);
}
}  // namespace detail

/// The device layer (device/host_layer.hpp, device_layer) on one CUDA device: buffers in its
/// memory, copies and kernels on the shard's own stream, GEMMs by cuBLAS on a handle bound to that
/// stream (one handle per shard: cuBLAS is bitwise reproducible run after run for a fixed handle,
/// device and shape). Every call makes the shard's device current first, so shards on several
/// devices can be driven from any thread. Host arrays are pageable: CUDA copies a pageable upload
/// to its staging memory before cudaMemcpyAsync returns (the runtime's documented synchronisation
/// behaviour), so the host array may go; a download returns once the data have arrived. (A pinned
/// staging buffer of the layer's own would make the small per-pass uploads asynchronous.)
class Layer {
 public:
  template <class T>
  using buffer = Buffer<T>;

  explicit Layer(const ShardResource& r)
      : device_(r.device), stream_(make_stream(device_)), blas_(device_, cublasCreate, "cublasCreate") {
    check(cublasSetStream(blas_.get(), stream_.get()), "cublasSetStream", device_);
  }
  using resource_type = ShardResource;
  /// The calling thread's current device (cuda::Exact's default).
  static ShardResource current_resource() { return {current_device()}; }

  cudaStream_t stream() const { return stream_.get(); }

  /// Throws, before anything is uploaded, unless the device's free memory holds `need` (`what`
  /// names the shard in the message).
  void reserve(const device::ShardBytes& need, const std::string& what) {
    use_device(device_);
    std::size_t free = 0, total = 0;
    check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo", device_);
    require_device_memory(device_, need, free, what);
  }

  template <class T>
  void upload(std::span<const T> host, Buffer<T>& dev) {
    use_device(device_);
    dev.resize(host.size(), device_);
    if (!host.empty()) check(cudaMemcpyAsync(dev.data(), host.data(), host.size_bytes(), cudaMemcpyHostToDevice, stream_.get()), "cudaMemcpyAsync (upload)", device_);
  }
  template <class T>
  void download(const Buffer<T>& dev, std::span<T> host) {
    if (host.empty()) return;
    if (host.size() > dev.size()) throw usage_error("a download of " + std::to_string(host.size()) + " entries from a device buffer of " + std::to_string(dev.size()));
    use_device(device_);
    check(cudaMemcpyAsync(host.data(), dev.data(), host.size_bytes(), cudaMemcpyDeviceToHost, stream_.get()), "cudaMemcpyAsync (download)", device_);
    check(cudaStreamSynchronize(stream_.get()), "cudaStreamSynchronize (download)", device_);
  }
  template <class T>
  void zero(Buffer<T>& dev, index_t n) {
    use_device(device_);
    dev.resize(static_cast<std::size_t>(n), device_);
    if (n > 0) check(cudaMemsetAsync(dev.data(), 0, static_cast<std::size_t>(n) * sizeof(T), stream_.get()), "cudaMemsetAsync", device_);
  }
  template <class T>
  void resize(Buffer<T>& dev, index_t n) {
    use_device(device_);
    if (static_cast<index_t>(dev.size()) < n) dev.resize(static_cast<std::size_t>(n), device_);
  }
  template <class T>
  T* data(Buffer<T>& b) const {
    return b.data();
  }
  template <class T>
  const T* data(const Buffer<T>& b) const {
    return b.data();
  }

  /// c = op(a)·b with op(a) `[m × k]`, b `[k × n]`, c `[m × n]`, column-major device arrays (cuBLAS's
  /// 64-bit DGEMM); zeros where k = 0.
  void gemm(bool trans_a, index_t m, index_t n, index_t k, const double* a, index_t lda, const double* b, index_t ldb, double* c, index_t ldc) {
    if (m == 0 || n == 0) return;
    use_device(device_);
    if (k == 0) {
      check(cudaMemset2DAsync(c, static_cast<std::size_t>(ldc) * sizeof(double), 0, static_cast<std::size_t>(m) * sizeof(double),
                              static_cast<std::size_t>(n), stream_.get()),
            "cudaMemset2DAsync (GEMM with k = 0)", device_);
      return;
    }
    const double one = 1.0, zero = 0.0;
    check(cublasDgemm_64(blas_.get(), trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, a, lda, b, ldb, &zero, c, ldc), "cublasDgemm_64", device_);
  }

  /// f(t) for t in [0, n) on the device: f is a trivially copyable functor with a __host__ __device__ call operator.
  template <class F>
  void launch(index_t n, const F& f) {
    if (n <= 0) return;
    use_device(device_);
    constexpr index_t threads = 128;
    const index_t blocks = (n + threads - 1) / threads;
    detail::for_each_index<<<static_cast<unsigned>(blocks), static_cast<unsigned>(threads), 0, stream_.get()>>>(f, n);
    check(cudaGetLastError(), "a kernel launch", device_);
  }

  /// Waits for everything launched on the shard's stream; a kernel's fault surfaces here.
  void fence() {
    use_device(device_);
    check(cudaStreamSynchronize(stream_.get()), "cudaStreamSynchronize", device_);
  }

  // device::dense_layer: cuSOLVER's potrf, cuBLAS's level-2 routines and dot (device/host_layer.hpp). cuBLAS's
  // pointer mode is the host's, so a dot waits for its result; potrf's info is read back. cuBLAS's atomics stay
  // off (its default), so each result is the same run after run.

  /// a's upper triangle ← U with A = UᵀU; LAPACK's info.
  index_t potrf(index_t n, double* a, index_t ld) {
    if (n == 0) return 0;
    if (n > INT_MAX || ld > INT_MAX)
      throw usage_error("cuda::Layer::potrf: cuSOLVER's potrf takes at most 2³¹ − 1 rows and leading dimension, got " + std::to_string(n) + " and " +
                        std::to_string(ld));
    use_device(device_);
    if (!solver_) {
      solver_ = Owned<cusolverDnHandle_t, cusolverDnDestroy>(device_, cusolverDnCreate, "cusolverDnCreate");
      check(cusolverDnSetStream(solver_.get(), stream_.get()), "cusolverDnSetStream", device_);
    }
    const int ni = static_cast<int>(n), ldi = static_cast<int>(ld);
    int lwork = 0;
    check(cusolverDnDpotrf_bufferSize(solver_.get(), CUBLAS_FILL_MODE_UPPER, ni, a, ldi, &lwork), "cusolverDnDpotrf_bufferSize", device_);
    if (work_.size() < static_cast<std::size_t>(std::max(lwork, 1))) work_.resize(static_cast<std::size_t>(std::max(lwork, 1)), device_);
    info_.resize(1, device_);
    check(cusolverDnDpotrf(solver_.get(), CUBLAS_FILL_MODE_UPPER, ni, a, ldi, work_.data(), lwork, info_.data()), "cusolverDnDpotrf", device_);
    int info = 0;
    check(cudaMemcpyAsync(&info, info_.data(), sizeof(int), cudaMemcpyDeviceToHost, stream_.get()), "cudaMemcpyAsync (potrf's info)", device_);
    check(cudaStreamSynchronize(stream_.get()), "cudaStreamSynchronize (potrf)", device_);
    if (info < 0) throw device_error("cusolverDnDpotrf reported info " + std::to_string(info) + " on CUDA device " + std::to_string(device_));
    return info;
  }
  /// x ← U⁻ᵀx (transposed) or U⁻¹x.
  void trsv(bool transposed, index_t n, const double* u, index_t ld, double* x) {
    if (n == 0) return;
    use_device(device_);
    check(cublasDtrsv_64(blas_.get(), CUBLAS_FILL_MODE_UPPER, transposed ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_DIAG_NON_UNIT, n, u, ld, x, 1),
          "cublasDtrsv_64", device_);
  }
  /// x ← Ux.
  void trmv(index_t n, const double* u, index_t ld, double* x) {
    if (n == 0) return;
    use_device(device_);
    check(cublasDtrmv_64(blas_.get(), CUBLAS_FILL_MODE_UPPER, CUBLAS_OP_N, CUBLAS_DIAG_NON_UNIT, n, u, ld, x, 1), "cublasDtrmv_64", device_);
  }
  /// y = A·x.
  void gemv(index_t n, const double* a, index_t ld, const double* x, double* y) {
    if (n == 0) return;
    use_device(device_);
    const double one = 1.0, zero = 0.0;
    check(cublasDgemv_64(blas_.get(), CUBLAS_OP_N, n, n, &one, a, ld, x, 1, &zero, y, 1), "cublasDgemv_64", device_);
  }
  /// xᵀy, on the host when it returns.
  double dot(index_t n, const double* x, const double* y) {
    if (n == 0) return 0;
    use_device(device_);
    double r = 0;
    check(cublasDdot_64(blas_.get(), n, x, 1, y, 1, &r), "cublasDdot_64", device_);
    return r;
  }

 private:
  int device_ = 0;
  Stream stream_;  // (declared before the handles bound to it, so destroyed after them)
  Owned<cublasHandle_t, cublasDestroy> blas_;
  Owned<cusolverDnHandle_t, cusolverDnDestroy> solver_;  // made at the first potrf
  Buffer<double> work_;
  Buffer<int> info_;
};

static_assert(device::dense_layer<Layer>);

}  // namespace fitlib::cuda
