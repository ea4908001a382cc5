// SPDX-License-Identifier: MIT
// The CUDA runtime, cuBLAS and cuSOLVER calls of the backend, each checked, the handles it owns, and the device array its shards keep their bins in.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cusolverDn.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "fitlib/core/error.hpp"

namespace fitlib::cuda {

/// A CUDA runtime or cuBLAS call that failed: no device, out of memory, a kernel fault. The message
/// names the call, the device and CUDA's own error name.
class device_error : public error {
 public:
  using error::error;
};

inline void check(cudaError_t e, const char* call, int device) {
  if (e == cudaSuccess) return;
  throw device_error(std::string(call) + " failed on CUDA device " + std::to_string(device) + ": " + cudaGetErrorName(e) + " (" +
                     cudaGetErrorString(e) + ")");
}
inline void check(cublasStatus_t s, const char* call, int device) {
  if (s == CUBLAS_STATUS_SUCCESS) return;
  throw device_error(std::string(call) + " failed on CUDA device " + std::to_string(device) + ": " + cublasGetStatusName(s) + " (" +
                     cublasGetStatusString(s) + ")");
}
inline void check(cusolverStatus_t s, const char* call, int device) {
  if (s == CUSOLVER_STATUS_SUCCESS) return;
  throw device_error(std::string(call) + " failed on CUDA device " + std::to_string(device) + " (cuSOLVER status " + std::to_string(static_cast<int>(s)) + ")");
}

/// Makes `device` the calling thread's current device. Not restored afterwards: setting a device
/// creates its context, and restoring the thread's default (device 0) would create one on a device
/// the fit does not use.
inline void use_device(int device) { check(cudaSetDevice(device), "cudaSetDevice", device); }

/// The calling thread's current device.
inline int current_device() {
  int device = 0;
  check(cudaGetDevice(&device), "cudaGetDevice", -1);
  return device;
}

/// The number of devices this process sees; 0 where there is none or no driver (the toolkit's stub
/// libcuda included), never an exception for those.
inline int device_count() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver || e == cudaErrorStubLibrary) {
    (void)cudaGetLastError();  // clear it, so that a later cudaGetLastError does not report it
    return 0;
  }
  check(e, "cudaGetDeviceCount", -1);
  return n;
}

/// A library handle H (cuBLAS's, cuSOLVER's) or a stream, made on one device and owned: destroyed by
/// `Destroy` with that device current. Movable, not copyable.
template <class H, auto Destroy>
class Owned {
 public:
  Owned() = default;
  /// `make(&h)` on `device` (made current), checked as `call`.
  template <class Make>
  Owned(int device, const Make& make, const char* call) : device_(device) {
    use_device(device);
    check(make(&h_), call, device);
  }
  Owned(const Owned&) = delete;
  Owned& operator=(const Owned&) = delete;
  Owned(Owned&& o) noexcept : h_(std::exchange(o.h_, nullptr)), device_(o.device_) {}
  Owned& operator=(Owned&& o) noexcept {
    if (this != &o) {
      release();
      h_ = std::exchange(o.h_, nullptr);
      device_ = o.device_;
    }
    return *this;
  }
  ~Owned() { release(); }

  H get() const { return h_; }
  explicit operator bool() const { return h_ != nullptr; }

 private:
  void release() noexcept {
    if (h_ && cudaSetDevice(device_) == cudaSuccess) (void)Destroy(h_);
    h_ = nullptr;
  }

  H h_ = nullptr;
  int device_ = 0;
};

/// A non-blocking stream on `device`.
using Stream = Owned<cudaStream_t, cudaStreamDestroy>;
inline Stream make_stream(int device) {
  return Stream(device, [](cudaStream_t* s) { return cudaStreamCreateWithFlags(s, cudaStreamNonBlocking); }, "cudaStreamCreateWithFlags");
}

/// An array of T in one device's memory, owned: it grows (its contents are not kept then) and never
/// shrinks. Movable, not copyable.
template <class T>
class Buffer {
 public:
  Buffer() = default;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  Buffer(Buffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)), capacity_(std::exchange(o.capacity_, 0)), device_(o.device_) {}
  Buffer& operator=(Buffer&& o) noexcept {
    if (this != &o) {
      release();
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
      capacity_ = std::exchange(o.capacity_, 0);
      device_ = o.device_;
    }
    return *this;
  }
  ~Buffer() { release(); }

  T* data() { return data_; }
  const T* data() const { return data_; }
  std::size_t size() const { return size_; }

  /// n entries on `device` (the current device), reallocated where the capacity is short; the
  /// entries' values are unspecified after a reallocation. cudaFree waits for the device, so no
  /// launched work still reads the old array.
  void resize(std::size_t n, int device) {
    if (n > capacity_ || (data_ && device != device_)) {
      release();
      if (n > 0) {
        void* p = nullptr;
        const cudaError_t e = cudaMalloc(&p, n * sizeof(T));
        if (e == cudaErrorMemoryAllocation) {
          (void)cudaGetLastError();
          throw device_error("allocating " + std::to_string((n * sizeof(T) + (1u << 20) - 1) >> 20) + " MiB on CUDA device " + std::to_string(device) +
                             " failed (out of memory); split the bins over more devices or MPI ranks");
        }
        check(e, "cudaMalloc", device);
        data_ = static_cast<T*>(p);
        capacity_ = n;
      }
    }
    device_ = device;
    size_ = n;
  }

 private:
  void release() noexcept {
    if (!data_) return;
    // The array's own device is current for the free (it has a context: the array lives there).
    if (cudaSetDevice(device_) == cudaSuccess) (void)cudaFree(data_);
    data_ = nullptr;
    size_ = capacity_ = 0;
  }

  T* data_ = nullptr;
  std::size_t size_ = 0, capacity_ = 0;
  int device_ = 0;
};

}  // namespace fitlib::cuda
