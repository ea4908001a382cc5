// SPDX-License-Identifier: MIT
// The CUDA backend's host-side decisions, on any machine: the least occupied devices from a faked NVML
// answer, device listings, shards placed on listings, and the memory a shard needs before upload.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "fitlib/cuda/selection.hpp"

using namespace fitlib;
using cuda::DeviceMemory;

TEST_CASE("cuda selection: the least occupied devices by memory in use, ties by index", "[cuda_selection]") {
  const std::vector<DeviceMemory> mem{{0, 80, 30}, {1, 80, 5}, {2, 80, 30}, {3, 141, 5}};
  CHECK(cuda::least_occupied(mem, 1) == std::vector<int>{1});
  CHECK(cuda::least_occupied(mem, 2) == std::vector<int>{1, 3});
  CHECK(cuda::least_occupied(mem, 4) == std::vector<int>{1, 3, 0, 2});
  CHECK_THROWS_WITH(cuda::least_occupied(mem, 5), Catch::Contains("has 4 CUDA devices") && Catch::Contains("Devices{{0, 0}}"));
  CHECK_THROWS_AS(cuda::least_occupied(mem, 0), usage_error);
  CHECK_THROWS_WITH(cuda::least_occupied(std::vector<DeviceMemory>{}, 1), Catch::Contains("has 0 CUDA devices"));
}

TEST_CASE("cuda selection: device listings are checked against the devices the process sees", "[cuda_selection]") {
  CHECK_NOTHROW(cuda::check_device_list(std::vector<int>{0, 2, 0}, 3));
  CHECK_THROWS_WITH(cuda::check_device_list(std::vector<int>{0, 3}, 3), Catch::Contains("lists device 3") && Catch::Contains("ids 0 to 2") &&
                                                                           Catch::Contains("CUDA_VISIBLE_DEVICES"));
  CHECK_THROWS_WITH(cuda::check_device_list(std::vector<int>{0}, 0), Catch::Contains("sees 0 CUDA devices"));
  CHECK_THROWS_WITH(cuda::check_device_list(std::vector<int>{-1}, 2), Catch::Contains("lists device -1"));
  CHECK_THROWS_WITH(cuda::check_device_list(std::vector<int>{}, 2), Catch::Contains("at least one device"));
}

TEST_CASE("cuda selection: shards go to listings in contiguous blocks", "[cuda_selection]") {
  const std::vector<int> ids{2, 0, 2};
  CHECK(cuda::shard_devices(ids, 3) == std::vector<int>{2, 0, 2});  // the default: one shard per listing
  CHECK(cuda::shard_devices(ids, 6) == std::vector<int>{2, 2, 0, 0, 2, 2});
  CHECK(cuda::shard_devices(ids, 2) == std::vector<int>{2, 0});  // fewer shards than listings
  CHECK(cuda::shard_devices(ids, 4) == std::vector<int>{2, 2, 0, 2});
  CHECK_THROWS_AS(cuda::shard_devices(ids, 0), usage_error);
}

TEST_CASE("cuda selection: a shard's bytes, counted by hand, and the refusal that names them", "[cuda_selection]") {
  // 100 bins (90 unmasked), 8 processes, 2·50 asymmetric coefficients, 52 parameters.
  const device::ShardBytes b = device::dense_shard_bytes(100, 90, 8, 100, 52);
  CHECK(b.resident == 800u * 101u * 8u + 90u * 17u + 2u * 90u * 8u * 26u);
  CHECK(b.workspace == (3u * 800u + 2u * 100u) * 54u * 8u);
  CHECK(b.total() == b.resident + b.workspace);
  // The same shard stored sparsely with 500 non-zero cells and 6000 logk entries in 120 pieces: per cell process, row,
  // CSR offset (8 bytes each) and nominal; per entry value and index in CSR and in CSC; the CSR's closing offset, the
  // offsets of the 100 bins, the first pieces of the 100 coefficients and the first entries of the 120 pieces (+ 1
  // each). The per-bin data are the dense shard's, and the workspace is, with a partial sum per piece and column.
  const device::ShardBytes s = device::sparse_shard_bytes(100, 90, 8, 100, 52, 500, 6000, 120);
  CHECK(s.resident == 500u * 32u + 2u * 6000u * 16u + 324u * 8u + 90u * 17u + 2u * 90u * 8u * 26u);
  CHECK(s.workspace == b.workspace + 120u * 54u * 8u);
  CHECK_NOTHROW(cuda::require_device_memory(1, b, b.total(), "shard 0"));
  CHECK_THROWS_WITH(cuda::require_device_memory(1, b, b.total() - 1, "shard 3 (bins [300, 400))"),
                    Catch::Contains("shard 3 (bins [300, 400)) needs 2 MiB on CUDA device 1") && Catch::Contains("has 2 MiB free") &&
                        Catch::Contains("more devices"));
  // The 10⁵ × 8 × 1000-systematic model of bench_cuda on one device: 12.8 GB of templates and 19 GB of the
  // Hessian's workspace fit an 80 GiB H100, not a 16 GiB card.
  const device::ShardBytes big = device::dense_shard_bytes(100000, 100000, 8, 2000, 1001);
  CHECK(big.resident > 12'800'000'000u);
  CHECK_NOTHROW(cuda::require_device_memory(0, big, std::uint64_t{80} << 30, "shard 0"));
  CHECK_THROWS_WITH(cuda::require_device_memory(0, big, std::uint64_t{16} << 30, "shard 0"), Catch::Contains("on CUDA device 0"));
}

TEST_CASE("cuda selection: ranks that share a node split its devices, or keep their own without sharing one", "[cuda_selection]") {
  // The same view on every rank: the listing in equal contiguous parts.
  const std::vector<int> four{3, 1, 0, 2};
  CHECK(cuda::node_share(four, 0, 2) == std::vector<int>{3, 1});
  CHECK(cuda::node_share(four, 1, 2) == std::vector<int>{0, 2});
  CHECK(cuda::node_share(four, 3, 4) == std::vector<int>{2});
  CHECK(cuda::node_share(four, 0, 1) == four);
  CHECK(cuda::node_share(std::vector<int>{0, 0}, 1, 2) == std::vector<int>{0});  // device 0 shared on purpose
  CHECK_THROWS_WITH(cuda::node_share(std::vector<int>{0, 1, 2}, 0, 2),
                    Catch::Contains("2 ranks of this run share a node") && Catch::Contains("has 3 devices") && Catch::Contains("multiple of 2"));
  CHECK_THROWS_WITH(cuda::node_share(std::vector<int>{0}, 1, 2), Catch::Contains("has 1 device:") && Catch::Contains("--devices 0,0"));
  CHECK_THROWS_AS(cuda::node_share(four, 2, 2), usage_error);
  // Different views (CUDA_VISIBLE_DEVICES per rank): each rank's own choice, refused where two chose one device.
  const std::string a = "0000:3B:00.0", b = "0000:5E:00.0", c = "0000:86:00.0";
  CHECK_NOTHROW(cuda::require_unshared({{a}, {b}, {c}}));
  CHECK_NOTHROW(cuda::require_unshared({{a, b}}));
  CHECK_THROWS_WITH(cuda::require_unshared({{a}, {b, c}, {c}}),
                    Catch::Contains("local ranks 1 and 2") && Catch::Contains("PCI bus id 0000:86:00.0") && Catch::Contains("CUDA_VISIBLE_DEVICES"));
}
