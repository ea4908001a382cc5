// SPDX-License-Identifier: MIT
// ReplicaStore: the replicas' inputs of batched evaluations, and which replica each column uses.
#pragma once

#include <cmath>
#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "fitlib/core/error.hpp"
#include "fitlib/core/types.hpp"
#include "fitlib/likelihood/options.hpp"
#include "fitlib/likelihood/replica_inputs.hpp"
#include "fitlib/model/model.hpp"

namespace fitlib::detail {

/// The χ² term divides by every unmasked bin's variance.
inline void check_variances(const Model& m, std::span<const double> variances) {
  for (std::size_t b = 0; b < variances.size(); ++b)
    if (!(variances[b] > 0) || !std::isfinite(variances[b]))
      throw usage_error("the χ² data term needs a positive variance in every unmasked bin, but " + m.describe_bin(static_cast<index_t>(b)) +
                        " has " + std::to_string(variances[b]) + "; use DataTerm::poisson or supply variances");
}

/// The inputs of the replicas a likelihood holds (ReplicaInputs; replica r is data slot r + 1 of
/// the shards, slot 0 the likelihood's own data), and the replica of each column of the
/// evaluations that follow (use_replicas). Every input a replica leaves empty is the likelihood's own.
class ReplicaStore {
 public:
  /// Checks every replica, naming it and the bin or systematic, before anything changes (so a bad
  /// replica leaves the inputs as they were); a bin split without data of its own gets the
  /// likelihood's `counts` and `variances`. `penalties`: the names of the likelihood's penalties.
  static void check(std::vector<ReplicaInputs>& replicas, const Model& m, const LikelihoodOptions& opts, std::span<const double> counts,
                    std::span<const double> variances, const std::vector<std::string>& penalties) {
    const auto nb = static_cast<std::size_t>(m.nbins()), ns = static_cast<std::size_t>(m.nsyst());
    for (std::size_t r = 0; r < replicas.size(); ++r) {
      ReplicaInputs& in = replicas[r];
      const std::string who = "replica " + std::to_string(r) + ": ";
      auto need = [&](std::size_t size, std::size_t n, const char* what) {
        if (size != 0 && size != n)
          throw usage_error(who + what + " has " + std::to_string(size) + " entries; give " + std::to_string(n) + " or none");
      };
      need(in.data.size(), nb, "data");
      need(in.variances.size(), nb, "variances");
      need(in.constraint_centres.size(), ns, "constraint_centres");
      need(in.bins.size(), nb, "bins");
      need(in.penalty_scales.size(), penalties.size(), "penalty_scales (one per regularizer)");
      if (!in.variances.empty() && in.data.empty()) throw usage_error(who + "variances are given without data; give both");
      if (!in.bins.empty() && opts.data_term == DataTerm::covariance)
        throw usage_error(who + "a bin selection needs a separable data term (Poisson or χ²); the covariance term couples the bins");
      for (std::size_t s = 0; s < in.constraint_centres.size(); ++s)
        if (!std::isfinite(in.constraint_centres[s]))
          throw usage_error(who + "constraint centre of systematic '" + m.systematics[s].name + "' is not finite");
      for (std::size_t k = 0; k < in.penalty_scales.size(); ++k)
        if (!(in.penalty_scales[k] >= 0) || !std::isfinite(in.penalty_scales[k]))
          throw usage_error(who + "penalty scale of regularizer '" + penalties[k] + "' is " + std::to_string(in.penalty_scales[k]) +
                            "; use a finite factor ≥ 0");
      if (in.data.empty() && !in.bins.empty()) {  // a split of the likelihood's own data
        in.data.assign(counts.begin(), counts.end());
        in.variances.assign(variances.begin(), variances.end());
      }
      for (std::size_t i = 0; i < in.data.size(); ++i)
        if (!std::isfinite(in.data[i]) || in.data[i] < 0)
          throw usage_error(who + "observed count in " + m.describe_bin(static_cast<index_t>(i)) + " is " + std::to_string(in.data[i]) +
                            "; counts must be finite and non-negative");
      if (!in.data.empty() && opts.data_term == DataTerm::chisq) check_variances(m, in.variances.empty() ? in.data : in.variances);
    }
  }

  /// Replaces the replicas (checked) and clears the column selection.
  void replace(std::vector<ReplicaInputs> replicas) {
    selected_.clear();
    replicas_ = std::move(replicas);
  }
  index_t count() const { return static_cast<index_t>(replicas_.size()); }
  const ReplicaInputs& at(index_t r) const { return replicas_.at(static_cast<std::size_t>(r)); }
  const std::vector<ReplicaInputs>& all() const { return replicas_; }

  /// Sets replica r's factor on penalty k of `penalties` (their names).
  void set_penalty_scale(index_t r, index_t k, double scale, const std::vector<std::string>& penalties) {
    const auto np = static_cast<index_t>(penalties.size());
    if (r < 0 || r >= count() || k < 0 || k >= np)
      throw usage_error("set_penalty_scale: replica " + std::to_string(r) + " or regularizer " + std::to_string(k) + " does not exist (" +
                        std::to_string(count()) + " replicas, " + std::to_string(np) + " regularizers)");
    if (!(scale >= 0) || !std::isfinite(scale))
      throw usage_error("set_penalty_scale: scale " + std::to_string(scale) + " of regularizer '" + penalties[static_cast<std::size_t>(k)] +
                        "'; use a finite factor ≥ 0");
    auto& scales = replicas_[static_cast<std::size_t>(r)].penalty_scales;
    scales.resize(penalties.size(), 1.0);
    scales[static_cast<std::size_t>(k)] = scale;
  }

  /// Column j of the following evaluations uses replica replicas[j] (−1: the likelihood's own).
  void select(std::span<const index_t> replicas) {
    for (index_t r : replicas)
      if (r < -1 || r >= count())
        throw usage_error("use_replicas: replica " + std::to_string(r) + " is not set; the likelihood holds " + std::to_string(count()) +
                          " (set_replicas)");
    selected_.assign(replicas.begin(), replicas.end());
  }

  /// The replica of column j of an evaluation (−1: the likelihood's own inputs).
  index_t replica_of(index_t j) const { return selected_.empty() ? -1 : selected_[static_cast<std::size_t>(j)]; }
  /// Column j's constraint centres (`own`: the likelihood's).
  const std::vector<double>& theta0_of(index_t j, const std::vector<double>& own) const {
    const ReplicaInputs* in = inputs_of(j);
    return in && !in->constraint_centres.empty() ? in->constraint_centres : own;
  }
  /// Column j's observed counts (`own`: the likelihood's).
  const std::vector<double>& counts_of(index_t j, const std::vector<double>& own) const {
    const ReplicaInputs* in = inputs_of(j);
    return in && !in->data.empty() ? in->data : own;
  }
  /// The factor on penalty k in column j (1 unless the column's replica scales it).
  double penalty_scale(std::size_t k, index_t j) const {
    const ReplicaInputs* in = inputs_of(j);
    return in && !in->penalty_scales.empty() ? in->penalty_scales[k] : 1.0;
  }
  /// The shards' data slot of each column of an evaluation over nx columns (0 = the likelihood's
  /// own data; replica r's is r + 1); empty when every column uses the likelihood's own.
  std::span<const index_t> slots(index_t nx) {
    if (selected_.empty()) return {};
    if (static_cast<index_t>(selected_.size()) != nx)
      throw usage_error("use_replicas named " + std::to_string(selected_.size()) + " replicas for an evaluation of " + std::to_string(nx) +
                        " columns; name one per column");
    column_slots_.resize(static_cast<std::size_t>(nx));
    for (index_t j = 0; j < nx; ++j) {
      const ReplicaInputs* in = inputs_of(j);
      column_slots_[static_cast<std::size_t>(j)] = in && !in->data.empty() ? replica_of(j) + 1 : 0;
    }
    return column_slots_;
  }

 private:
  const ReplicaInputs* inputs_of(index_t j) const {
    const index_t r = replica_of(j);
    return r < 0 ? nullptr : &replicas_[static_cast<std::size_t>(r)];
  }

  std::vector<ReplicaInputs> replicas_;
  std::vector<index_t> selected_;      ///< replica of each column (use_replicas), −1: the likelihood's own
  std::vector<index_t> column_slots_;  ///< the shards' data slot of each column of the current evaluation
};

}  // namespace fitlib::detail
