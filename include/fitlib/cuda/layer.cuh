// SPDX-License-Identifier: MIT
// cuda::Layer: the device layer of the device-layer shard on one CUDA device and stream (cuBLAS GEMMs, kernels).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

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

 private:
  int device_ = 0;
  Stream stream_;  // (declared before the handle bound to it, so destroyed after it)
  Owned<cublasHandle_t, cublasDestroy> blas_;
};

static_assert(device::device_layer<Layer>);

}  // namespace fitlib::cuda
