// SPDX-License-Identifier: MIT
// PartialsExchange: every process's shard layout, the stamped gather of the shards' partials, rank-order combines.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <exception>
#include <span>
#include <string>
#include <vector>

#include "fitlib/core/error.hpp"
#include "fitlib/core/types.hpp"
#include "fitlib/device/exchange.hpp"

namespace fitlib::detail {

/// What a likelihood asks of the processes its bins are spread over (`Exchange`: LocalExchange, or
/// mpi::Ranks's), on top of the one all-gather the exchange provides: the layout of every process's
/// shards, the rows of every shard's partials in global shard order, each stamped with the inputs
/// it was evaluated at, values combined in rank order and per-bin rows joined in bin order. In one
/// process each of these is the identity and costs nothing.
template <class Exchange>
class PartialsExchange {
 public:
  PartialsExchange() = default;
  explicit PartialsExchange(Exchange exchange) : exchange_(std::move(exchange)) {}

  const Exchange& exchange() const { return exchange_; }
  bool distributed() const { return exchange_.size() > 1; }
  /// Shards of every process together.
  index_t total_shards() const { return total_shards_; }
  /// This process's bins.
  BinRange my_bins() const { return rank_bins_[static_cast<std::size_t>(exchange_.rank())]; }

  /// Every process's shard count and bins (the same on each): the layout of the gathered partials.
  /// `mine`: this process's shard count and bins; the processes' bins must follow one another in
  /// process order and cover all `nbins_full` bins once. `failed`: this process's own construction
  /// failed (then every process throws, none waits in a gather the failed one never reaches).
  void gather_layout(index_t nshards, BinRange mine, index_t nbins_full, const std::exception_ptr& failed) {
    const auto np = static_cast<std::size_t>(exchange_.size());
    const std::array<index_t, 3> row = failed ? std::array<index_t, 3>{-1, 0, 0} : std::array<index_t, 3>{nshards, mine.begin, mine.end};
    std::vector<index_t> all(3 * np);
    const std::vector<index_t> counts(np, 3);
    exchange_.all_gather(std::span<const index_t>(row), std::span<index_t>(all), std::span<const index_t>(counts));
    if (failed) std::rethrow_exception(failed);
    for (std::size_t r = 0; r < np; ++r)
      if (all[3 * r] < 0)
        throw usage_error("rank " + std::to_string(r) + " could not build its part of the likelihood (its own error says why), so no rank can "
                          "evaluate it");
    shards_of_rank_.resize(np);
    rank_bins_.resize(np);
    total_shards_ = 0;
    for (std::size_t r = 0; r < np; ++r) {
      shards_of_rank_[r] = all[3 * r];
      rank_bins_[r] = {all[3 * r + 1], all[3 * r + 2]};
      total_shards_ += all[3 * r];
      const index_t expected = r == 0 ? 0 : rank_bins_[r - 1].end;
      if (rank_bins_[r].begin != expected || (r + 1 == np && rank_bins_[r].end != nbins_full))
        throw usage_error("rank " + std::to_string(r) + " holds bins [" + std::to_string(rank_bins_[r].begin) + ", " +
                          std::to_string(rank_bins_[r].end) + "), but the ranks' bins must follow one another in rank order and cover all " +
                          std::to_string(nbins_full) + " bins: give every rank its part of the same split (io::rabbit_partition)");
    }
  }

  /// Over MPI ranks each row of partials carries one more value: the mark of its inputs.
  index_t stamped() const { return distributed() ? 1 : 0; }
  void stamp(double* row, index_t len, std::uint64_t mark) const {
    if (distributed()) row[len - 1] = std::bit_cast<double>(mark);
  }
  /// The bits of x and v folded into one word (FNV-1a), once per evaluation; 0 in one process.
  std::uint64_t inputs_mark(ConstBlockView<double> x, ConstBlockView<double> v) const {
    if (!distributed()) return 0;
    std::uint64_t h = 1469598103934665603ULL;
    for (const ConstBlockView<double>* b : {&x, &v})
      for (index_t j = 0; j < b->cols; ++j)
        for (index_t i = 0; i < b->rows; ++i) h = (h ^ std::bit_cast<std::uint64_t>((*b)(i, j))) * 1099511628211ULL;
    return h;
  }

  /// The rows of every shard's partials (`len` each; this process's `local`): local itself in one
  /// process, else gathered from every process in rank (hence shard) order, each row stamped with
  /// the mark of the inputs it was evaluated at. Every rank runs the same minimizer on the same
  /// sums, so the marks agree; if they ever do not (different binaries or CPUs, a callback that
  /// decides by the clock), every rank stops here rather than wait in a later gather the others
  /// never reach.
  const double* gathered(std::span<const double> local, index_t len, std::uint64_t mine) {
    if (!distributed()) return local.data();
    std::vector<index_t> counts(shards_of_rank_.size());
    for (std::size_t r = 0; r < counts.size(); ++r) counts[r] = shards_of_rank_[r] * len;
    all_.resize(static_cast<std::size_t>(total_shards_ * len));
    exchange_.all_gather(local, std::span<double>(all_), std::span<const index_t>(counts));
    for (index_t k = 0; k < total_shards_; ++k)
      if (std::bit_cast<std::uint64_t>(all_[static_cast<std::size_t>((k + 1) * len - 1)]) != mine)
        throw usage_error("the MPI ranks evaluated the likelihood at different parameters (shard " + std::to_string(k) +
                          "'s rank differs from this one): every rank must make the same calls with the same inputs; run the same binary on "
                          "identical CPUs, and stop fits by iterates, not by time");
    return all_.data();
  }

  /// out[i] = op(…op(op(rank 0's mine[i], rank 1's), rank 2's)…): a value every process holds a
  /// part of, combined in rank order (mine itself in one process).
  template <class T, class Op>
  void combine_ranks(std::span<const T> mine, std::span<T> out, Op op) const {
    const auto np = static_cast<std::size_t>(exchange_.size()), n = mine.size();
    std::vector<T> all(n * np);
    const std::vector<index_t> counts(np, static_cast<index_t>(n));
    exchange_.all_gather(mine, std::span<T>(all), std::span<const index_t>(counts));
    for (std::size_t i = 0; i < n; ++i) out[i] = all[i];
    for (std::size_t r = 1; r < np; ++r)
      for (std::size_t i = 0; i < n; ++i) out[i] = op(out[i], all[r * n + i]);
  }

  /// Per-bin rows (`width` values per bin) of this process's bins, of the first `limit` bins
  /// (all bins, or the data bins), joined with every other process's in bin order.
  std::vector<double> gather_bins(std::vector<double> mine, index_t width, index_t limit) const {
    if (!distributed()) return mine;
    std::vector<index_t> counts;
    for (const BinRange& b : rank_bins_) counts.push_back((std::min(b.end, limit) - std::min(b.begin, limit)) * width);
    std::vector<double> all(static_cast<std::size_t>(limit * width));
    exchange_.all_gather(std::span<const double>(mine), std::span<double>(all), std::span<const index_t>(counts));
    return all;
  }

 private:
  Exchange exchange_;
  std::vector<index_t> shards_of_rank_;  ///< every process's shard count, in rank order
  std::vector<BinRange> rank_bins_;      ///< every process's bins, in rank order
  index_t total_shards_ = 0;
  std::vector<double> all_;              ///< every shard's partials, gathered
};

}  // namespace fitlib::detail
