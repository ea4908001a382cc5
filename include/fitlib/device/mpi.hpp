// SPDX-License-Identifier: MIT
// mpi::Ranks<Inner>: the bins split over the ranks of an MPI communicator, each rank evaluating its own with Inner.
#pragma once

// MPI's C API only: the deprecated C++ bindings some MPI headers pull in do not build warning-free.
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <climits>
#include <exception>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "fitlib/core/error.hpp"
#include "fitlib/core/types.hpp"
#include "fitlib/device/partition.hpp"
#include "fitlib/device/policy.hpp"
#include "fitlib/device/serial.hpp"
#include "fitlib/model/model.hpp"

namespace fitlib::mpi {

/// A communicator's rank and size.
inline index_t rank_of(MPI_Comm comm) {
  int r = 0;
  MPI_Comm_rank(comm, &r);
  return r;
}
inline index_t size_of(MPI_Comm comm) {
  int n = 0;
  MPI_Comm_size(comm, &n);
  return n;
}

/// MPI for the lifetime of the object: initialised unless it already is, finalised by whoever
/// initialised it. Only the thread that calls the likelihood talks to MPI (its shard threads never
/// do), so MPI_THREAD_FUNNELED is all it asks for.
class Session {
 public:
  Session(int* argc = nullptr, char*** argv = nullptr) {
    int ready = 0;
    MPI_Initialized(&ready);
    if (ready) return;
    int provided = 0;
    if (MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) throw usage_error("MPI_Init_thread failed");
    owner_ = true;
    if (provided < MPI_THREAD_FUNNELED)
      throw usage_error("this MPI library supports no threads beside the one calling MPI (MPI_THREAD_FUNNELED), which cpu::Threads "
                        "shards need; use cpu::Serial inside each rank or an MPI built with thread support");
  }
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;
  /// Unwinding past the session with other ranks alive aborts them all: they may be waiting in a
  /// collective this rank will never reach, and MPI_Finalize would wait for them forever.
  ~Session() {
    int done = 0;
    MPI_Finalized(&done);
    if (!owner_ || done) return;
    if (std::uncaught_exceptions() > 0 && size_of(MPI_COMM_WORLD) > 1) MPI_Abort(MPI_COMM_WORLD, 1);
    MPI_Finalize();
  }

 private:
  bool owner_ = false;
};

/// The ranks of `comm` (MPI must be initialised, e.g. by a Session): each holds a contiguous range
/// of the bins and evaluates it with `inner` (cpu::Serial, or cpu::Threads for shards on its
/// threads). Every rank runs the same program on the same inputs: the likelihood gathers every
/// shard's partials onto every rank and sums them in shard order, so each rank holds the same bits
/// and its minimizer takes the same steps, with no step to broadcast (docs/likelihood.md, "MPI").
/// Everything else of the device-policy contract (memory space, backend, shard resources, executor,
/// dense solver) is the inner policy's: a backend composes with MPI by its type alone.
template <device_policy Inner = cpu::Serial>
struct Ranks {
  using inner_policy = Inner;
  using memory_space = typename Inner::memory_space;
  using backend = typename Inner::backend;
  using shard_resource = typename Inner::shard_resource;
  template <class T>
  using buffer = typename Inner::template buffer<T>;
  using dense_solver = typename Inner::dense_solver;

  Inner inner{};
  MPI_Comm comm = MPI_COMM_WORLD;
  /// Shards this rank runs concurrently (its inner policy's).
  index_t concurrency() const { return inner.concurrency(); }
  /// This rank's shards' resources and executor.
  std::vector<shard_resource> partition(index_t shards) const { return inner.partition(shards); }
  auto executor(index_t shards) const { return inner.executor(shards); }
  index_t rank() const { return rank_of(comm); }
  index_t size() const { return size_of(comm); }
};

namespace detail {
template <class T>
MPI_Datatype datatype();
template <>
inline MPI_Datatype datatype<double>() {
  return MPI_DOUBLE;
}
template <>
inline MPI_Datatype datatype<index_t>() {
  static_assert(sizeof(index_t) == sizeof(std::int64_t));
  return MPI_INT64_T;
}
}  // namespace detail

/// The ranks of a communicator as a likelihood sees them: which bins this rank evaluates, and the
/// all-gather that brings every rank's partials to every rank in rank order (MPI_Allgatherv: its
/// result is the concatenation, whatever the network did, so the sums after it are deterministic).
class Exchange {
 public:
  explicit Exchange(MPI_Comm comm) : comm_(comm), rank_(rank_of(comm)), size_(size_of(comm)) {}
  index_t rank() const { return rank_; }
  index_t size() const { return size_; }
  /// This rank's bins: those its model holds when it was read for this rank (Model::held),
  /// else its part of partition_bins over the ranks.
  BinRange bins(const Model& m) const {
    if (m.held()) return *m.held();
    return partition_bins(m, size_)[static_cast<std::size_t>(rank_)];
  }
  template <class T>
  void all_gather(std::span<const T> mine, std::span<T> out, std::span<const index_t> counts) const {
    std::vector<int> n(counts.size()), at(counts.size());
    index_t offset = 0;
    for (std::size_t r = 0; r < counts.size(); ++r) {
      if (counts[r] > INT_MAX || offset > INT_MAX)
        throw usage_error("an MPI all-gather of " + std::to_string(offset + counts[r]) + " values exceeds MPI's int counts; use fewer parameters per rank");
      n[r] = static_cast<int>(counts[r]);
      at[r] = static_cast<int>(offset);
      offset += counts[r];
    }
    if (static_cast<index_t>(mine.size()) != counts[static_cast<std::size_t>(rank_)] || static_cast<index_t>(out.size()) < offset)
      throw usage_error("MPI all-gather: this rank sends " + std::to_string(mine.size()) + " values for a count of " +
                        std::to_string(counts[static_cast<std::size_t>(rank_)]) + ", into room for " + std::to_string(out.size()) + " of " +
                        std::to_string(offset));
    MPI_Allgatherv(mine.data(), static_cast<int>(mine.size()), detail::datatype<T>(), out.data(), n.data(), at.data(), detail::datatype<T>(), comm_);
  }

 private:
  MPI_Comm comm_;
  index_t rank_, size_;
};

template <class Inner>
Exchange exchange_of(const Ranks<Inner>& r) {
  return Exchange(r.comm);
}

}  // namespace fitlib::mpi
