// SPDX-License-Identifier: MIT
// cuda::Devices: the device policy that puts a likelihood's shards on CUDA devices, and least_occupied(n) by NVML.
#pragma once

#include <cuda_runtime.h>
#include <dlfcn.h>

#include <string>
#include <utility>
#include <vector>

#include "fitlib/core/error.hpp"
#include "fitlib/core/types.hpp"
#include "fitlib/cuda/exact.cuh"
#include "fitlib/cuda/layer.cuh"
#include "fitlib/cuda/runtime.cuh"
#include "fitlib/cuda/selection.hpp"
#include "fitlib/cuda/solver.cuh"
#include "fitlib/device/policy.hpp"
#include "fitlib/device/threads.hpp"

namespace fitlib {
namespace memory {
/// CUDA device memory: a shard's bins live on its device.
struct cuda {};
}  // namespace memory

namespace cuda {

/// Shards on CUDA devices: one shard per listing by default (a device listed twice carries two
/// shards, each with its own stream), each with its templates, data and bin-by-bin state resident
/// on its device (the device-layer shard over cuda::Layer: a GEMM for the forward products, the
/// per-bin functions as a kernel, a GEMM for the backward products). Only parameter columns go
/// down and `[ncoef × columns]` products come back; the likelihood adds the shards' partials in
/// shard order on the host, so the result does not depend on which device finishes first. The
/// shards' passes run concurrently, one host thread each. A device that is not listed gets no
/// context. The covariance term's bins × bins Cholesky runs on shard 0's device (DeviceCholesky).
class Devices {
 public:
  using memory_space = memory::cuda;
  using backend = fitlib::backend::layered<Layer>;
  using shard_resource = ShardResource;
  template <class T>
  using buffer = Buffer<T>;
  using dense_solver = DeviceCholesky;

  /// The devices by CUDA runtime index, checked against the devices this process sees.
  explicit Devices(std::vector<int> ids) : ids_(std::move(ids)) { check_device_list(ids_, device_count()); }

  const std::vector<int>& ids() const { return ids_; }
  index_t concurrency() const { return static_cast<index_t>(ids_.size()); }
  /// Shard s of k on listing ⌊s·D/k⌋ (shard_devices): with k = D, one shard per listing.
  std::vector<shard_resource> partition(index_t k) const {
    std::vector<shard_resource> r;
    for (int d : shard_devices(ids_, k)) r.push_back({d});
    return r;
  }
  /// One host thread per shard, which drives that shard's device and stream.
  cpu::PoolExecutor executor(index_t k) const { return cpu::PoolExecutor(k); }
  /// trust-exact's subproblem with H on the first listed device (exact_subproblem_for: fitlib-fit's --device cuda).
  Exact exact_subproblem(ExactOptions options = {}) const { return exact_on(ids_.front(), options); }

 private:
  std::vector<int> ids_;
};

namespace detail {
/// The few NVML calls least_occupied needs, loaded from the driver's libnvidia-ml.so.1 when first
/// used (NVML comes with the driver, not the toolkit; nothing links against it). NVML reads each
/// device's memory without creating a context on it. Declared here by their documented C ABI.
class Nvml {
 public:
  struct Memory {  // nvmlMemory_t
    unsigned long long total, free, used;
  };
  using Device = void*;  // nvmlDevice_t

  Nvml() {
    lib_ = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib_)
      throw device_error("least_occupied needs NVML (libnvidia-ml.so.1, installed with the NVIDIA driver), which could not be loaded: " +
                         std::string(dlerror()) + "; list the devices instead (cuda::Devices{{0, 1}})");
    init_ = symbol<int (*)()>("nvmlInit_v2");
    shutdown_ = symbol<int (*)()>("nvmlShutdown");
    by_bus_ = symbol<int (*)(const char*, Device*)>("nvmlDeviceGetHandleByPciBusId_v2");
    memory_ = symbol<int (*)(Device, Memory*)>("nvmlDeviceGetMemoryInfo");
    if (const int rc = init_(); rc != 0) {
      dlclose(lib_);
      throw device_error("nvmlInit_v2 failed (NVML error " + std::to_string(rc) + "); list the devices instead (cuda::Devices{{0, 1}})");
    }
  }
  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;
  ~Nvml() {
    shutdown_();
    dlclose(lib_);
  }

  /// The memory of the device with this PCI bus id ("0000:3B:00.0", as cudaDeviceGetPCIBusId gives it).
  Memory memory(const std::string& bus_id) const {
    Device d = nullptr;
    Memory m{};
    if (const int rc = by_bus_(bus_id.c_str(), &d); rc != 0)
      throw device_error("NVML does not know the device at PCI bus id " + bus_id + " (NVML error " + std::to_string(rc) + ")");
    if (const int rc = memory_(d, &m); rc != 0)
      throw device_error("nvmlDeviceGetMemoryInfo failed for the device at PCI bus id " + bus_id + " (NVML error " + std::to_string(rc) + ")");
    return m;
  }

 private:
  template <class Fn>
  Fn symbol(const char* name) {
    void* p = dlsym(lib_, name);
    if (!p) {
      dlclose(lib_);
      throw device_error(std::string("libnvidia-ml.so.1 has no ") + name + "; update the NVIDIA driver, or list the devices (cuda::Devices{{0, 1}})");
    }
    return reinterpret_cast<Fn>(p);
  }
  void* lib_ = nullptr;
  int (*init_)() = nullptr;
  int (*shutdown_)() = nullptr;
  int (*by_bus_)(const char*, Device*) = nullptr;
  int (*memory_)(Device, Memory*) = nullptr;
};
}  // namespace detail

/// The PCI bus id of CUDA device d ("0000:3B:00.0"): its identity for NVML and across processes with different views
/// of the node (cudaDeviceGetPCIBusId creates no context). Shorter than 32 bytes.
inline std::string bus_id(int d) {
  char bus[32] = {};
  check(cudaDeviceGetPCIBusId(bus, static_cast<int>(sizeof bus), d), "cudaDeviceGetPCIBusId", d);
  return bus;
}

/// Every device this process sees with its memory in use, from NVML (matched to the CUDA runtime's
/// indices by PCI bus id, so CUDA_VISIBLE_DEVICES and CUDA's device order are respected).
inline std::vector<DeviceMemory> device_memory() {
  const int n = device_count();
  std::vector<DeviceMemory> out;
  if (n == 0) return out;
  const detail::Nvml nvml;
  for (int d = 0; d < n; ++d) {
    const detail::Nvml::Memory m = nvml.memory(bus_id(d));
    out.push_back({d, m.total, m.used});
  }
  return out;
}

/// The `n` devices with the least memory in use (NVML's answer), as Devices{least_occupied(n)} uses them.
inline std::vector<int> least_occupied(index_t n) {
  const std::vector<DeviceMemory> mem = device_memory();
  return least_occupied(mem, n);
}

}  // namespace cuda
}  // namespace fitlib

static_assert(fitlib::device_policy<fitlib::cuda::Devices>);
