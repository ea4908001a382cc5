// SPDX-License-Identifier: MIT
// fitlib-fit --device cuda under mpirun: each rank's devices, chosen with the ranks that share its node, and the runs
// over mpi::Ranks<cuda::Devices>; compiled by nvcc where fitlib-fit has both MPI and CUDA.
#include <algorithm>
#include <cstring>
#include <exception>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include "runs_cuda.cuh"

namespace fitlib::cli {

namespace {

/// The PCI bus ids of CUDA devices `ids` (cuda::bus_id).
std::vector<std::string> bus_ids(const std::vector<int>& ids) {
  std::vector<std::string> out;
  for (int d : ids) out.push_back(cuda::bus_id(d));
  return out;
}

/// Every rank of `comm`'s strings (each shorter than 32 bytes), on each rank, in rank order.
std::vector<std::vector<std::string>> all_of(MPI_Comm comm, const std::vector<std::string>& mine) {
  constexpr int width = 32;
  const int ranks = static_cast<int>(mpi::size_of(comm)), count = static_cast<int>(mine.size());
  std::vector<int> counts(static_cast<std::size_t>(ranks)), bytes(counts.size()), at(counts.size());
  MPI_Allgather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, comm);
  for (int r = 0; r < ranks; ++r) {
    bytes[static_cast<std::size_t>(r)] = counts[static_cast<std::size_t>(r)] * width;
    if (r > 0) at[static_cast<std::size_t>(r)] = at[static_cast<std::size_t>(r - 1)] + bytes[static_cast<std::size_t>(r - 1)];
  }
  std::vector<char> send(static_cast<std::size_t>(count * width), '\0'), recv(static_cast<std::size_t>(at.back() + bytes.back()));
  for (int k = 0; k < count; ++k) {
    const std::string& v = mine[static_cast<std::size_t>(k)];
    std::memcpy(send.data() + k * width, v.data(), std::min<std::size_t>(v.size(), width - 1));  // the rest stays '\0'
  }
  MPI_Allgatherv(send.data(), count * width, MPI_CHAR, recv.data(), bytes.data(), at.data(), MPI_CHAR, comm);
  std::vector<std::vector<std::string>> out(counts.size());
  for (int r = 0; r < ranks; ++r)
    for (int k = 0; k < counts[static_cast<std::size_t>(r)]; ++k)
      out[static_cast<std::size_t>(r)].emplace_back(recv.data() + at[static_cast<std::size_t>(r)] + k * width);
  return out;
}

/// Root's `make()` on every rank of `comm` into `value`; the error root met making it, or empty.
std::string from_root(MPI_Comm comm, bool root, const std::function<std::vector<int>()>& make, std::vector<int>& value) {
  std::string error;
  if (root) try {
      value = make();
    } catch (const std::exception& e) {
      error = e.what();
    }
  int sizes[2] = {static_cast<int>(value.size()), static_cast<int>(error.size())};
  MPI_Bcast(sizes, 2, MPI_INT, 0, comm);
  value.resize(static_cast<std::size_t>(sizes[0]));
  error.resize(static_cast<std::size_t>(sizes[1]));
  MPI_Bcast(value.data(), sizes[0], MPI_INT, 0, comm);
  MPI_Bcast(error.data(), sizes[1], MPI_CHAR, 0, comm);
  return error;
}

/// Runs `step` on every rank of the run, then refuses on all of them if it threw on any: each such rank with its own
/// error, the others saying so, so that no rank waits in a collective for one that threw. A step's collectives are
/// over its node, whose ranks all take the same branches.
template <class Step>
void on_every_rank(Step&& step) {
  std::exception_ptr error;
  try {
    step();
  } catch (...) {
    error = std::current_exception();
  }
  int failed = error ? 1 : 0, any = 0;
  MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (error) std::rethrow_exception(error);
  if (any) throw usage_error("--device cuda: another rank of this run could not choose its CUDA devices (its error says why)");
}

}  // namespace

void resolve_cuda_devices_on_node(Args& a) {
  MPI_Comm node = MPI_COMM_NULL;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, static_cast<int>(a.rank), MPI_INFO_NULL, &node);
  struct Free {
    MPI_Comm* comm;
    ~Free() { MPI_Comm_free(comm); }
  } free_node{&node};
  const int local = static_cast<int>(mpi::rank_of(node)), locals = static_cast<int>(mpi::size_of(node));
  int count = 0;
  std::vector<std::string> visible;
  on_every_rank([&] {
    count = cuda::device_count();
    require_cuda_device(count);
    std::vector<int> all(static_cast<std::size_t>(count));
    std::iota(all.begin(), all.end(), 0);
    visible = bus_ids(all);
  });
  const std::vector<std::vector<std::string>> seen = all_of(node, visible);
  const bool split = locals > 1 && std::all_of(seen.begin(), seen.end(), [&](const auto& v) { return v == seen.front(); });
  // Ranks that share the node's view split one listing: --devices as given, or the locals·n least occupied as local
  // rank 0 sees them (ranks asking NVML each on its own could pick one device twice).
  std::vector<int> listing = a.devices;
  std::string root_error;
  if (split && listing.empty())
    root_error = from_root(
        node, local == 0, [&] { return cuda::least_occupied(static_cast<index_t>(a.threads) * locals); }, listing);
  std::vector<std::string> mine;
  on_every_rank([&] {
    if (!root_error.empty())
      throw usage_error("--nDevices " + std::to_string(a.threads) + " on each of the " + std::to_string(locals) + " ranks that share this node: " + root_error);
    if (split) {
      cuda::check_device_list(listing, count);
      a.devices = cuda::node_share(listing, local, locals);
    } else {
      if (a.devices.empty()) a.devices = cuda::least_occupied(a.threads);  // --nDevices (1 by default)
      cuda::check_device_list(a.devices, count);
    }
    mine = bus_ids(a.devices);
  });
  // Ranks that see different devices (CUDA_VISIBLE_DEVICES per rank) chose each its own: none may share one.
  on_every_rank([&] {
    if (locals > 1 && !split) cuda::require_unshared(all_of(node, mine));
  });
  // Every rank holds as many shards (own_shards splits the bins into a.threads per rank).
  const int held = static_cast<int>(a.devices.size());
  int range[2] = {held, -held};
  MPI_Allreduce(MPI_IN_PLACE, range, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (range[0] != -range[1])
    throw usage_error("--devices: the ranks of this run would hold from " + std::to_string(-range[1]) + " to " + std::to_string(range[0]) +
                      " CUDA devices each (nodes with different numbers of ranks split the listing); give every node as many ranks, or "
                      "use --nDevices");
  a.threads = held;
}

Fits run_cuda_ranks(const Args& a, std::shared_ptr<const Model> model, const std::vector<BinRange>& shards, io::RabbitReadOptions ro,
                    const LikelihoodOptions& lo, const io::RabbitTensor& in) {
  return run_cuda_on(mpi::Ranks<cuda::Devices>{cuda::Devices{a.devices}}, a, std::move(model), shards, ro, lo, in);
}

}  // namespace fitlib::cli
