// SPDX-License-Identifier: MIT
// ShardSet: a likelihood's shards, the executor that runs their passes, and their partials reduced in shard order.
#pragma once

#include <Eigen/Core>
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "fitlib/core/types.hpp"
#include "fitlib/device/exchange.hpp"
#include "fitlib/device/partials_exchange.hpp"
#include "fitlib/device/policy.hpp"
#include "fitlib/likelihood/options.hpp"
#include "fitlib/likelihood/partial_request.hpp"
#include "fitlib/model/model.hpp"

namespace fitlib::detail {

/// The shards of this process (each over a contiguous bin range, in bin order), the policy's
/// executor that runs their passes, and the exchange with the other processes' shards. A pass
/// writes each shard's partials into its own row and the rows are added in global shard order
/// (`reduce`), so the sum never depends on which shard finished first, nor on how many ran at once.
template <class ShardT>
class ShardSet {
 public:
  using policy_type = typename ShardT::policy_type;
  using exchange_type = decltype(exchange_of(std::declval<const policy_type&>()));
  using executor_type = executor_of_t<policy_type>;

  /// `nbins`: the model's data (unmasked) bins.
  ShardSet(const policy_type& policy, index_t nbins) : exchange_(exchange_of(policy)), nbins_(nbins) {}

  /// Shard s over ranges[s], its templates from model_of(ranges[s]), its resource the policy's
  /// partition. Each shard is built on the thread that evaluates it, so the pages of what it owns
  /// (data, bin-by-bin state, workspaces, and with a template source its templates) are first
  /// touched there, on that thread's memory node; moving it into place keeps its buffers.
  template <class ModelOf>
  void build(const policy_type& policy, const std::vector<BinRange>& ranges, const LikelihoodOptions& opts, ModelOf&& model_of) {
    const auto n = static_cast<index_t>(ranges.size());
    executor_.emplace(policy.executor(n));
    const std::vector<typename ShardT::resource_type> resources = policy.partition(n);
    std::vector<std::optional<ShardT>> built(ranges.size());
    for_each(n, [&](std::size_t s) { built[s].emplace(model_of(ranges[s]), ranges[s], resources[s], opts, static_cast<index_t>(s)); });
    for (auto& b : built) shards_.push_back(std::move(*b));
  }

  std::size_t size() const { return shards_.size(); }
  ShardT& operator[](std::size_t k) { return shards_[k]; }
  const ShardT& operator[](std::size_t k) const { return shards_[k]; }
  auto begin() { return shards_.begin(); }
  auto end() { return shards_.end(); }
  auto begin() const { return shards_.begin(); }
  auto end() const { return shards_.end(); }
  PartialsExchange<exchange_type>& exchange() { return exchange_; }
  const PartialsExchange<exchange_type>& exchange() const { return exchange_; }

  /// Launches f(k) for every shard k on the policy's executor, then waits for the executor and
  /// every shard (its fence), so their outputs are ready. Each shard writes only its own buffers,
  /// so the outcome does not depend on which finishes first.
  template <class Fn>
  void for_each(Fn&& f) {
    for_each(static_cast<index_t>(shards_.size()), f);
    for (auto& s : shards_) s.fence();
  }

  /// Partials by shard, reduced in shard order: pass(k, row) writes shard k's `len` partials into
  /// its own row (concurrently where the policy has threads); then, with the rows of every shard
  /// gathered from every process, add(row, k) runs in global shard order. `mark`: the inputs'
  /// (exchange().inputs_mark), stamped into each row.
  template <class Pass, class Add>
  void reduce(index_t len, std::uint64_t mark, Pass&& pass, Add&& add) {
    const index_t full = len + exchange_.stamped();
    local_.resize(shards_.size() * static_cast<std::size_t>(full));
    for_each([&](std::size_t k) {
      double* row = local_.data() + k * static_cast<std::size_t>(full);
      exchange_.stamp(row, full, mark);
      pass(k, row);
    });
    const double* all = exchange_.gathered(local_, full, mark);
    for (index_t k = 0; k < exchange_.total_shards(); ++k) add(all + k * full, k);
  }

  /// First global bin of shard k's data bins.
  index_t data_offset(std::size_t k) const { return std::min(shards_[k].bins().begin, nbins_); }
  /// Shard k's rows of a `[nbins × cols]` per-bin matrix.
  ConstBlockView<double> data_rows(const Eigen::MatrixXd& a, std::size_t k) const {
    return {a.data() + data_offset(k), shards_[k].ndata(), a.cols(), a.rows()};
  }
  BlockView<double> data_rows(Eigen::MatrixXd& a, std::size_t k) const {
    return {a.data() + data_offset(k), shards_[k].ndata(), a.cols(), a.rows()};
  }

  /// The observables o_b = Σ_p ν_bp of the global bins br for every column of x (`o`,
  /// `[br.size() × nx]`) and their directional derivatives (`dobs`, may be null), from the shards
  /// that hold them.
  void observables(BinRange br, ConstBlockView<double> x, ConstBlockView<double> v, Eigen::MatrixXd& o, Eigen::MatrixXd* dobs) {
    for (std::size_t k = 0; k < shards_.size(); ++k) {
      const Overlap ov = overlap(k, br);
      if (ov.local.size() == 0) continue;
      const index_t nr = ov.local.size(), ld = br.size();
      shards_[k].observables(x, v, ov.local, BlockView<double>(o.data() + ov.row, nr, o.cols(), ld),
                             dobs ? BlockView<double>(dobs->data() + ov.row, nr, dobs->cols(), ld) : BlockView<double>{});
    }
  }

  /// The backward pass of a penalty on the observables of br: ∂F/∂o (`y`, `[br.size() × nx]`) and
  /// its curvature along the directions (`z`, `[br.size() × nv]`) added into g and hv through the
  /// templates of the shards that hold those bins.
  void backward_observables(BinRange br, ConstBlockView<double> x, ConstBlockView<double> v, BlockView<double> g, BlockView<double> hv,
                            ConstBlockView<double> y, ConstBlockView<double> z) {
    const index_t nb = br.size(), nv = v.empty() ? 0 : v.cols;
    for (std::size_t k = 0; k < shards_.size(); ++k) {
      const Overlap ov = overlap(k, br);
      if (ov.local.size() == 0) continue;
      PartialRequest rq;
      rq.x = x;
      rq.v = v;
      rq.grad = g;
      rq.hvp = hv;
      rq.coupled_y = {y.data + ov.row, ov.local.size(), x.cols, nb};
      rq.coupled_z = {z.data + ov.row, ov.local.size(), nv, nb};
      rq.observables = ov.local;
      rq.accumulate = true;
      shards_[k].partials(rq);
      shards_[k].fence();
    }
  }

  /// Launches f(k) for k < n on the policy's executor and waits for it (before the shards exist).
  template <class Fn>
  void for_each(index_t n, Fn&& f) {
    executor_->for_each(n, [&](index_t k) { f(static_cast<std::size_t>(k)); });
    executor_->fence();
  }

 private:
  /// Shard k's part of the global bin range br: its local bins and the rows they fill.
  struct Overlap {
    BinRange local;
    index_t row = 0;
  };
  Overlap overlap(std::size_t k, BinRange br) const {
    const BinRange r = shards_[k].bins();
    const index_t lo = std::max(r.begin, br.begin), hi = std::min(r.end, br.end);
    if (lo >= hi) return {};
    return {{lo - r.begin, hi - r.begin}, lo - br.begin};
  }

  PartialsExchange<exchange_type> exchange_;
  index_t nbins_;
  std::vector<ShardT> shards_;
  std::optional<executor_type> executor_;  ///< runs the shards' passes (the policy's; a copy of a pool gets threads of its own)
  std::vector<double> local_;              ///< this process's shards' partials, a row each
};

}  // namespace fitlib::detail
