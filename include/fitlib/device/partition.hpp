// SPDX-License-Identifier: MIT
// partition_bins: contiguous bin ranges, one per shard.
#pragma once

#include <algorithm>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "fitlib/core/error.hpp"
#include "fitlib/core/types.hpp"
#include "fitlib/device/exchange.hpp"
#include "fitlib/device/policy.hpp"
#include "fitlib/model/model.hpp"
#include "fitlib/model/sparse_templates.hpp"

namespace fitlib {

/// The work of one bin of dense templates: every cell's row, and the cell.
inline index_t dense_bin_work(index_t nprocs, index_t ncoef) { return nprocs * (ncoef + 1); }

/// The work one evaluation spends on each unmasked bin, in template entries: the stored logk
/// entries of its cells (every cell's ncoef with dense templates, the non-zero ones with sparse),
/// plus one per cell for the cell's own algebra.
inline std::vector<index_t> bin_work(const Model& model) {
  const index_t nb = model.nbins();
  std::vector<index_t> w(static_cast<std::size_t>(nb));
  const SparseTemplates* sp = model.sparse();
  if (!sp) {
    std::fill(w.begin(), w.end(), dense_bin_work(model.nprocs(), model.ncoef()));
    return w;
  }
  const SparseTemplates& t = *sp;
  for (index_t b = 0; b < nb; ++b) {
    const index_t c0 = t.bin_begin[static_cast<std::size_t>(b)], c1 = t.bin_begin[static_cast<std::size_t>(b + 1)];
    w[static_cast<std::size_t>(b)] = t.row_begin[static_cast<std::size_t>(c1)] - t.row_begin[static_cast<std::size_t>(c0)] + (c1 - c0);
  }
  return w;
}

namespace detail {
/// Splits bins `[begin, begin + w.size())` (work w each) into k contiguous ranges carrying about equal
/// work, never splitting a bin: range r ends at the first bin where the running work reaches r + 1
/// shares, and every range keeps at least one bin; the last ends at `end` (which may add bins
/// that cost nothing, such as masked ones). Exact integer shares, so the split depends on w and k only.
inline std::vector<BinRange> split_work(std::span<const index_t> w, index_t begin, index_t end, index_t k) {
  const auto nb = static_cast<index_t>(w.size());
  index_t total = 0;
  for (index_t x : w) total += x;
  std::vector<BinRange> ranges;
  index_t i = 0, done = 0;  // done: the work of bins [0, i)
  for (index_t r = 0; r < k; ++r) {
    index_t stop = nb;
    if (r + 1 < k) {
      const index_t last = nb - (k - r - 1);  // one bin left for each later range
      stop = i;
      do done += w[static_cast<std::size_t>(stop++)];
      while (stop < last && k * done < (r + 1) * total);
    }
    ranges.push_back({begin + i, r + 1 == k ? end : begin + stop});
    i = stop;
  }
  return ranges;
}
}  // namespace detail

/// Splits the bins `within` (all by default) into `nshards` contiguous ranges carrying about equal
/// work (bin_work) in their unmasked bins, never splitting a bin (detail::split_work). The masked
/// bins, which cost nothing in the data term, join the last range. The ranges cover `within` once;
/// the split depends on the model, the range and the count only. A model that holds part of the
/// tensor (the templates' `held`) can be split only within the bins it holds.
inline std::vector<BinRange> partition_bins(const Model& model, index_t nshards, std::optional<BinRange> within = {}) {
  const index_t nb = model.nbins(), bf = model.nbins_full();
  const BinRange all = within ? *within : BinRange{0, bf}, held = model.held_bins();
  if (all.begin < held.begin || all.end > held.end || all.begin > all.end)
    throw usage_error("cannot split bins [" + std::to_string(all.begin) + ", " + std::to_string(all.end) + ") of a model that holds the templates of bins [" +
                      std::to_string(held.begin) + ", " + std::to_string(held.end) +
                      ") only (read for one MPI rank): evaluate it with mpi::Ranks, or read the whole tensor");
  const index_t data_end = std::min(all.end, nb), ndata = std::max<index_t>(0, data_end - all.begin);
  if (nshards < 1 || nshards > ndata)
    throw usage_error("cannot split " + std::to_string(ndata) + " unmasked bins into " + std::to_string(nshards) +
                      " shards; use between 1 and " + std::to_string(ndata) + " shards");
  const std::vector<index_t> w = bin_work(model);
  return detail::split_work(std::span(w).subspan(static_cast<std::size_t>(all.begin), static_cast<std::size_t>(ndata)), all.begin, all.end,
                            nshards);
}

/// The split a likelihood on `policy` makes: the bins of this process (all of them, or under
/// mpi::Ranks this rank's), one shard per unit of the policy's concurrency.
template <class Policy>
  requires device_policy<Policy>
std::vector<BinRange> partition_bins(const Policy& policy, const Model& model) {
  return partition_bins(model, static_cast<index_t>(policy.concurrency()), exchange_of(policy).bins(model));
}

}  // namespace fitlib
