// SPDX-License-Identifier: MIT
// The CUDA backend's host-side decisions, free of CUDA headers: which devices to use, which device each shard
// runs on, and whether a shard fits its device's memory.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "fitlib/core/error.hpp"
#include "fitlib/core/types.hpp"
#include "fitlib/device/shard_bytes.hpp"

namespace fitlib::cuda {

/// One device's memory as the driver reports it (NVML), before any context exists on it.
struct DeviceMemory {
  int id = 0;                     ///< the CUDA runtime's device index
  std::uint64_t total = 0, used = 0;  ///< bytes
};

/// The `n` devices with the least memory in use, in increasing use (ties by device index): what
/// `cuda::least_occupied(n)` returns from NVML's answer, as rabbit's multi-device fits choose theirs.
inline std::vector<int> least_occupied(std::span<const DeviceMemory> devices, index_t n) {
  if (n < 1) throw usage_error("least_occupied needs a device count of at least 1, got " + std::to_string(n));
  if (n > static_cast<index_t>(devices.size()))
    throw usage_error("least_occupied(" + std::to_string(n) + "): this machine has " + std::to_string(devices.size()) +
                      " CUDA device" + (devices.size() == 1 ? "" : "s") + "; ask for fewer, or list the devices to share (Devices{{0, 0}} runs two shards on device 0)");
  std::vector<DeviceMemory> d(devices.begin(), devices.end());
  std::stable_sort(d.begin(), d.end(), [](const DeviceMemory& a, const DeviceMemory& b) { return a.used != b.used ? a.used < b.used : a.id < b.id; });
  std::vector<int> ids;
  for (index_t k = 0; k < n; ++k) ids.push_back(d[static_cast<std::size_t>(k)].id);
  return ids;
}

/// A listing of devices checked against the machine's count: every id in [0, count), at least one.
/// A device may be listed more than once (one shard and stream per listing).
inline void check_device_list(std::span<const int> ids, int count) {
  if (ids.empty()) throw usage_error("cuda::Devices needs at least one device id; list them (Devices{{0, 1}}) or use least_occupied(n)");
  for (int id : ids)
    if (id < 0 || id >= count)
      throw usage_error("cuda::Devices lists device " + std::to_string(id) + ", but this process sees " + std::to_string(count) +
                        " CUDA device" + (count == 1 ? "" : "s") +
                        (count > 0 ? " (ids 0 to " + std::to_string(count - 1) + ")" : "") +
                        "; check the ids and CUDA_VISIBLE_DEVICES");
}

/// The device of each of k shards: the listings in contiguous blocks (shard s on listing ⌊s·D/k⌋ of D),
/// so that with k = D each listing carries one shard.
inline std::vector<int> shard_devices(std::span<const int> ids, index_t k) {
  if (k < 1) throw usage_error("a CUDA likelihood needs at least one shard, got " + std::to_string(k));
  const auto D = static_cast<index_t>(ids.size());
  std::vector<int> out;
  for (index_t s = 0; s < k; ++s) out.push_back(ids[static_cast<std::size_t>(s * D / k)]);
  return out;
}

/// Local rank `local`'s part of a node's device listing when `locals` ranks of one run share the node and see the same
/// devices: the listing cut into `locals` equal contiguous parts, in order (a device listed in two parts is shared).
/// The listing is the same on each of them (--devices, or the node's locals·n least occupied).
inline std::vector<int> node_share(std::span<const int> listing, int local, int locals) {
  if (locals < 1 || local < 0 || local >= locals)
    throw usage_error("node_share: local rank " + std::to_string(local) + " of " + std::to_string(locals));
  const auto L = static_cast<std::size_t>(locals);
  if (listing.empty() || listing.size() % L != 0)
    throw usage_error(std::to_string(locals) + " ranks of this run share a node and see the same CUDA devices, and the listing has " +
                      std::to_string(listing.size()) + " device" + (listing.size() == 1 ? "" : "s") + ": list a multiple of " +
                      std::to_string(locals) + " (each rank takes its part in order; --devices 0,0 shares device 0), or run one rank per node");
  const std::size_t k = listing.size() / L, first = static_cast<std::size_t>(local) * k;
  return {listing.begin() + static_cast<std::ptrdiff_t>(first), listing.begin() + static_cast<std::ptrdiff_t>(first + k)};
}

/// Throws if two ranks on one node chose the same physical device (`chosen[l]`: the PCI bus ids of local rank l's
/// devices), as ranks that see different devices choose each for itself (CUDA_VISIBLE_DEVICES set per rank).
inline void require_unshared(const std::vector<std::vector<std::string>>& chosen) {
  for (std::size_t a = 0; a < chosen.size(); ++a)
    for (std::size_t b = a + 1; b < chosen.size(); ++b)
      for (const std::string& id : chosen[a])
        if (std::find(chosen[b].begin(), chosen[b].end(), id) != chosen[b].end())
          throw usage_error("local ranks " + std::to_string(a) + " and " + std::to_string(b) + " of this node both chose the CUDA device at PCI bus id " +
                            id + ": give each rank its own devices (CUDA_VISIBLE_DEVICES per rank, or the same view for all so that they split "
                            "it), or run one rank per node");
}

/// Throws unless a shard of `need` bytes fits the `free` bytes of its device: the message names the
/// device, both sizes and the remedies.
inline void require_device_memory(int device, const device::ShardBytes& need, std::uint64_t free, const std::string& what) {
  if (need.total() <= free) return;
  const auto mib = [](std::uint64_t v) { return std::to_string((v + (1u << 20) - 1) >> 20) + " MiB"; };
  throw usage_error(what + " needs " + mib(need.total()) + " on CUDA device " + std::to_string(device) + " (" + mib(need.resident) +
                    " of templates, data and bin-by-bin state, " + mib(need.workspace) + " for the dense Hessian's pass) but the device has " +
                    mib(free) + " free; split the bins over more devices (Devices{{0, 1}}, least_occupied(n)) or over MPI ranks with their own devices");
}

}  // namespace fitlib::cuda
