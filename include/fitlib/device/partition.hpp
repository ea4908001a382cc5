// SPDX-License-Identifier: MIT
// partition_bins: contiguous bin ranges, one per shard.
#pragma once

#include <string>
#include <vector>

#include "fitlib/core/error.hpp"
#include "fitlib/core/types.hpp"
#include "fitlib/model/model.hpp"

namespace fitlib {

/// Bins `[begin, end)` in the model's global bin order.
struct BinRange {
  index_t begin = 0;
  index_t end = 0;
  index_t size() const { return end - begin; }
  friend bool operator==(const BinRange&, const BinRange&) = default;
};

/// Splits the unmasked bins into `nshards` contiguous ranges of equal size (±1 bin); the masked
/// bins, which cost nothing in the data term, join the last range. The ranges cover every bin once.
inline std::vector<BinRange> partition_bins(const Model& model, index_t nshards) {
  const index_t nb = model.nbins(), bf = model.nbins_full();
  if (nshards < 1 || nshards > nb)
    throw usage_error("cannot split " + std::to_string(nb) + " unmasked bins into " + std::to_string(nshards) +
                      " shards; use between 1 and " + std::to_string(nb) + " shards");
  std::vector<BinRange> ranges;
  index_t begin = 0;
  for (index_t k = 0; k < nshards; ++k) {
    const index_t end = nb * (k + 1) / nshards;
    ranges.push_back({begin, k + 1 == nshards ? bf : end});
    begin = end;
  }
  return ranges;
}

}  // namespace fitlib
