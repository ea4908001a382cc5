// SPDX-License-Identifier: MIT
// partition_bins: contiguous bin ranges, one per shard.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "fitlib/core/error.hpp"
#include "fitlib/core/types.hpp"
#include "fitlib/model/model.hpp"
#include "fitlib/model/sparse_templates.hpp"

namespace fitlib {

/// Bins `[begin, end)` in the model's global bin order.
struct BinRange {
  index_t begin = 0;
  index_t end = 0;
  index_t size() const { return end - begin; }
  friend bool operator==(const BinRange&, const BinRange&) = default;
};

/// The work one evaluation spends on each unmasked bin, in template entries: the stored logk
/// entries of its cells (every cell's ncoef with dense templates, the non-zero ones with sparse),
/// plus one per cell for the cell's own algebra.
inline std::vector<index_t> bin_work(const Model& model) {
  const index_t nb = model.nbins();
  std::vector<index_t> w(static_cast<std::size_t>(nb));
  if (!model.sparse) {
    std::fill(w.begin(), w.end(), model.nprocs() * (model.ncoef() + 1));
    return w;
  }
  const SparseTemplates& t = *model.sparse;
  for (index_t b = 0; b < nb; ++b) {
    const index_t c0 = t.bin_begin[static_cast<std::size_t>(b)], c1 = t.bin_begin[static_cast<std::size_t>(b + 1)];
    w[static_cast<std::size_t>(b)] = t.row_begin[static_cast<std::size_t>(c1)] - t.row_begin[static_cast<std::size_t>(c0)] + (c1 - c0);
  }
  return w;
}

/// Splits the unmasked bins into `nshards` contiguous ranges carrying about equal work (bin_work),
/// never splitting a bin: shard k ends at the first bin where the running work reaches k + 1
/// shares, and every shard keeps at least one bin. The masked bins, which cost nothing in the data
/// term, join the last range. The ranges cover every bin once; the split depends on the model and
/// the count only.
inline std::vector<BinRange> partition_bins(const Model& model, index_t nshards) {
  const index_t nb = model.nbins(), bf = model.nbins_full();
  if (nshards < 1 || nshards > nb)
    throw usage_error("cannot split " + std::to_string(nb) + " unmasked bins into " + std::to_string(nshards) +
                      " shards; use between 1 and " + std::to_string(nb) + " shards");
  const std::vector<index_t> w = bin_work(model);
  // Exact integer shares: shard k ends where nshards·(work so far) reaches (k + 1)·total.
  index_t total = 0;
  for (index_t x : w) total += x;
  std::vector<BinRange> ranges;
  index_t begin = 0, done = 0;  // done: the work of bins [0, begin)
  for (index_t k = 0; k < nshards; ++k) {
    index_t end = nb;
    if (k + 1 < nshards) {
      const index_t last = nb - (nshards - k - 1);  // one bin left for each later shard
      end = begin;
      do done += w[static_cast<std::size_t>(end++)];
      while (end < last && nshards * done < (k + 1) * total);
    }
    ranges.push_back({begin, k + 1 == nshards ? bf : end});
    begin = end;
  }
  return ranges;
}

/// The split for a device policy: one shard per unit of its concurrency.
template <class Policy>
  requires requires(const Policy& p) { p.concurrency(); }
std::vector<BinRange> partition_bins(const Policy& policy, const Model& model) {
  return partition_bins(model, static_cast<index_t>(policy.concurrency()));
}

}  // namespace fitlib
