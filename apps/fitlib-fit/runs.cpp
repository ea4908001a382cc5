// SPDX-License-Identifier: MIT
// fitlib-fit's runs: what of them needs no likelihood type (the shards, the input, failed fits).
#include "runs.hpp"

namespace fitlib::cli {

std::vector<BinRange> own_shards(Args& a) {
  // --threads' default: every core in one process (cpu::default_threads, halved below until the bins split), one
  // thread per MPI rank (the ranks take the cores).
  const bool automatic = a.threads == 0 && a.ranks == 1;
  if (a.threads == 0) a.threads = automatic ? cpu::available_cores() : 1;
  std::vector<BinRange> all;
  if (a.rank == 0)
    while (a.threads * a.ranks > 1) {
      try {
        all = io::rabbit_partition(a.input, a.threads * a.ranks);
        break;
      } catch (const usage_error& e) {  // more shards than bins
        if (automatic) {
          a.threads /= 2;
          continue;
        }
        throw usage_error("--threads " + std::to_string(a.threads) + (a.ranks > 1 ? " on each of " + std::to_string(a.ranks) + " ranks" : "") +
                          " exceeds what the tensor allows (each thread takes a shard of its bins): " + e.what());
      }
    }
  if (a.threads * a.ranks == 1) return {};
  std::vector<index_t> bounds(static_cast<std::size_t>(2 * a.threads * a.ranks));
  if (a.rank == 0) {
    for (std::size_t r = 0; const BinRange& b : all) {
      bounds[2 * r] = b.begin;
      bounds[2 * r++ + 1] = b.end;
    }
  }
#ifdef FITLIB_FIT_MPI
  if (a.ranks > 1) MPI_Bcast(bounds.data(), static_cast<int>(bounds.size()), MPI_INT64_T, 0, MPI_COMM_WORLD);
#endif
  std::vector<BinRange> mine;
  for (index_t t = a.rank * a.threads; t < (a.rank + 1) * a.threads; ++t)
    mine.push_back({bounds[static_cast<std::size_t>(2 * t)], bounds[static_cast<std::size_t>(2 * t + 1)]});
  return mine;
}

/// The tensor; with shards, everything but the systematic tensor, which each shard reads for its
/// own bins on its own thread (`part`), so the process holds one bin's rows beside them. Rank 0
/// alone streams the file for its SHA-256.
io::RabbitTensor read_input(const Args& a, io::RabbitReadOptions ro, const std::vector<BinRange>& shards) {
  if (!shards.empty()) ro.bins = BinRange{shards.front().begin, shards.front().begin + 1};
  if (a.rank == 0) return io::read_rabbit(a.input, ro, input_file_options(a));
  io::RabbitTensor t = io::read_rabbit(io::hdf5::File::open(a.input, io::hdf5::Access::read_only, input_file_options(a)), ro);
  t.path = a.input;
  return t;
}


io::FitRecord failed_fit(const std::string& name, const std::string& error) {
  io::FitRecord rec;
  rec.name = name;
  rec.error = error;
  rec.result.status = FitStatus::aborted;
  return rec;
}

index_t replica_width(const Args& a, int toys) {
  const int b = a.replica_batch == 0 ? 64 : a.replica_batch;
  return std::max<index_t>(1, std::min<index_t>(b, toys));
}

}  // namespace fitlib::cli
