// SPDX-License-Identifier: MIT
// ReplicaInputs: what one replica of a batch changes in a likelihood (data, constraint centres, bins, penalties).
#pragma once

#include <cstdint>
#include <vector>

namespace fitlib {

/// One replica's inputs to batched evaluations (Likelihood::set_replicas, ReplicaBatch). The
/// templates are shared; every field left empty keeps the likelihood's own value.
struct ReplicaInputs {
  /// Observed counts of the unmasked bins, `[nbins]` (a toy, a bootstrap or a data replica).
  std::vector<double> data;
  /// Their variances for the χ² term, `[nbins]`; empty = the replica's counts (as set_data).
  std::vector<double> variances;
  /// Constraint centres θ₀, `[nsyst]` (a frequentist toy's global observables).
  std::vector<double> constraint_centres;
  /// Which unmasked bins enter the data term (1) and which are left out (0), `[nbins]`: a
  /// training or validation split. Separable data terms (Poisson, χ²) only.
  std::vector<std::uint8_t> bins;
  /// One factor per regularizer, in the order they were added, multiplying its penalty (a
  /// hyperparameter scan, a growing positivity multiplier); empty = 1 for all.
  std::vector<double> penalty_scales;
};

}  // namespace fitlib
