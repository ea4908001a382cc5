// SPDX-License-Identifier: MIT
// The template tensor (nominal yields and their variations) stored densely, as rabbit's hnorm and hlogk.
#pragma once

#include <optional>
#include <vector>

#include "fitlib/core/types.hpp"

namespace fitlib {

/// The template tensor of a model in rabbit's dense layout (rabbit-likelihood-and-format.md §1.1–1.2):
/// `nominal` is N[b, p] row-major over `[nbins_full × nprocs]`; `logk` holds one row of ncoef coefficients per
/// cell, K[b, p, s] for a symmetric tensor (ncoef = nsyst) or [b, p, {K, H}, s] for an asymmetric one
/// (ncoef = 2·nsyst, H = rabbit's logkhalfdiff), for the bins in `held`. Its shape is the model's; `Model::validate`
/// checks it. storage::Dense shards read it in place.
struct DenseTemplates {
  std::vector<double> nominal;  ///< N[b, p], `[nbins_full × nprocs]`
  std::vector<double> logk;     ///< the rows of the held bins, `[held bins × nprocs × ncoef]`
  /// The bins whose rows `logk` holds, or empty: all of them. A tensor read for one rank of an MPI fit
  /// (io::RabbitReadOptions::bins) holds its own bins' rows only; the nominal yields are always whole.
  std::optional<BinRange> held;

  bool operator==(const DenseTemplates&) const = default;
};

}  // namespace fitlib
