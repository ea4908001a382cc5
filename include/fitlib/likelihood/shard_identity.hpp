// SPDX-License-Identifier: MIT
// What every shard shape holds the same way: its model, place, resource and bins (likelihood/shard_concept.hpp).
#pragma once

#include <algorithm>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "fitlib/core/error.hpp"
#include "fitlib/core/types.hpp"
#include "fitlib/model/model.hpp"

namespace fitlib::detail {

/// The part of a shard that does not depend on where it computes: the model whose templates it
/// reads, its index among its likelihood's shards, the resource it runs on, its bin range (checked
/// here, before a shard touches a template) and how many of those bins are data bins.
template <class Resource>
class ShardIdentity {
 public:
  BinRange bins() const { return range_; }
  /// The shard's place among its likelihood's shards, and the resource it runs on.
  index_t index() const { return index_; }
  const Resource& resource() const { return resource_; }
  /// The model whose templates the shard reads.
  const Model& model() const { return *model_; }
  /// Data (unmasked) bins of the shard: the first `ndata()` of its range.
  index_t ndata() const { return ndata_; }

 protected:
  ShardIdentity(std::shared_ptr<const Model> model, BinRange bins, Resource resource, index_t index)
      : model_(std::move(model)), resource_(std::move(resource)), index_(index), range_(bins) {
    const Model& m = *model_;
    if (bins.begin < 0 || bins.end > m.nbins_full() || bins.begin > bins.end)
      throw usage_error("bin range [" + std::to_string(bins.begin) + ", " + std::to_string(bins.end) + ") is outside the model's " +
                        std::to_string(m.nbins_full()) + " bins");
    ndata_ = std::max<index_t>(0, std::min(bins.end, m.nbins()) - bins.begin);
  }

  /// The model's observed counts and their variances (the counts when it has none) over the
  /// shard's data bins: what slot 0 holds until set_data replaces it.
  std::span<const double> model_counts() const { return own(model_->data); }
  std::span<const double> model_variances() const { return own(model_->data_variance.empty() ? model_->data : model_->data_variance); }

  /// A pass over nx columns names one data slot per column, or none (slot 0 for all).
  static void check_slot_count(std::span<const index_t> slots, index_t nx) {
    if (!slots.empty() && static_cast<index_t>(slots.size()) != nx)
      throw usage_error("a pass over " + std::to_string(nx) + " columns names " + std::to_string(slots.size()) + " data slots");
  }
  /// Column j's data slot: slots[j], or slot 0 when `slots` is empty, checked against `held` (each
  /// slot's `set` flag) with the error that names it.
  template <class Slot>
  const Slot& slot_of(const std::vector<Slot>& held, std::span<const index_t> slots, index_t j) const {
    const index_t s = slots.empty() ? 0 : slots[static_cast<std::size_t>(j)];
    if (s < 0 || s >= static_cast<index_t>(held.size()) || !held[static_cast<std::size_t>(s)].set)
      throw usage_error("data slot " + std::to_string(s) + " of the shard over bins [" + std::to_string(range_.begin) + ", " +
                        std::to_string(range_.end) + ") was never set");
    return held[static_cast<std::size_t>(s)];
  }

  std::shared_ptr<const Model> model_;
  Resource resource_;
  index_t index_;
  BinRange range_;
  index_t ndata_ = 0;

 private:
  std::span<const double> own(const std::vector<double>& v) const {
    return std::span(v).subspan(static_cast<std::size_t>(std::min(range_.begin, model_->nbins())), static_cast<std::size_t>(ndata_));
  }
};

}  // namespace fitlib::detail
