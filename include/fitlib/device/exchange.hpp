// SPDX-License-Identifier: MIT
// LocalExchange: the one process a likelihood's shards live in, unless a policy spans processes (mpi::Ranks).
#pragma once

#include <algorithm>
#include <span>

#include "fitlib/core/types.hpp"
#include "fitlib/model/model.hpp"

namespace fitlib {

/// The processes a likelihood's bins are spread over, and the one collective it needs from them: an
/// all-gather, every process's block in process order. Every policy runs in one process unless it
/// provides its own `exchange_of` (found by argument-dependent lookup, as mpi::Ranks does); the
/// likelihood then splits its bins over the processes and sums the gathered partials in shard order.
struct LocalExchange {
  index_t rank() const { return 0; }
  index_t size() const { return 1; }
  /// The bins this process evaluates: all of them.
  BinRange bins(const Model& m) const { return {0, m.nbins_full()}; }
  /// `out` = every process's `mine` in process order (here: mine); process r's is counts[r] long.
  template <class T>
  void all_gather(std::span<const T> mine, std::span<T> out, std::span<const index_t>) const {
    std::copy(mine.begin(), mine.end(), out.begin());
  }
};

template <class Policy>
LocalExchange exchange_of(const Policy&) {
  return {};
}

}  // namespace fitlib
