// SPDX-License-Identifier: MIT
// PartialRequest: what one pass over a shard computes, for a block of parameter columns.
#pragma once

#include <span>

#include "fitlib/core/types.hpp"

namespace fitlib {

/// What one pass over a shard computes, for a block of `nx` parameter columns `x` and optionally
/// `nv` directions `v` (one per column, or all at one point when `nx == 1`). Every output is
/// optional; outputs are overwritten (or, with `accumulate`, added to) with this shard's partial sums.
struct PartialRequest {
  ConstBlockView<double> x;   ///< `[nparams × nx]`
  ConstBlockView<double> v;   ///< `[nparams × nv]`, or empty
  double* nll = nullptr;      ///< `[nx]`, or null
  BlockView<double> grad;     ///< `[nparams × nx]`, or empty
  BlockView<double> hvp;      ///< `[nparams × nv]`, or empty
  /// The covariance term, which couples the bins (bbstat.hpp, coupled_bin): per data bin of the
  /// shard y = (C + diag q)⁻¹·r for each column and z = (C + diag q)⁻¹·(dν' − y·dq) for each
  /// direction, computed by the likelihood from `coupled_aggregates`. Empty for separable terms;
  /// when set, `nll` is not written (the likelihood owns the value).
  ConstBlockView<double> coupled_y, coupled_z;
  /// Local bins (any, masked included) of a penalty on the observables o_b = Σ_p ν_bp: the pass is
  /// then that penalty's backward pass instead of the data term's, with coupled_y = ∂pen/∂o and
  /// coupled_z = ∇²pen·do per row of this range, and no bin-by-bin β. Empty: the data bins.
  BinRange observables = {};
  /// The data slot of each column of x (Shard::set_slot), or empty: slot 0 for every column.
  std::span<const index_t> slots = {};
  /// Add into grad and hvp instead of overwriting them.
  bool accumulate = false;
};

}  // namespace fitlib
