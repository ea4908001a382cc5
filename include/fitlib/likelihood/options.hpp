// SPDX-License-Identifier: MIT
// Options of the binned likelihood.
#pragma once

#include <stdexcept>
#include <string>

#include "fitlib/core/types.hpp"

namespace fitlib {

/// The data term of the unmasked bins (rabbit-likelihood-and-format.md §3.1).
enum class DataTerm {
  poisson,  ///< reduced Poisson: ν − n − n·(ln ν − ln n), with rabbit's n = 0 convention
  chisq,    ///< ½·(ν − n)²/σ² with σ² the data variances (rabbit's --chisqFit)
};

struct LikelihoodOptions {
  /// The data term; `chisq` needs every unmasked bin's variance to be positive.
  DataTerm data_term = DataTerm::poisson;
  /// POIs act linearly, μ = x (rabbit's --allowNegativeParam). Default: μ = x², so μ ≥ 0 and the
  /// stored parameter is √μ (rabbit-likelihood-and-format.md §2.1).
  bool allow_negative_poi = false;
  /// Number of contiguous bin shards; 0 = one per unit of the policy's concurrency.
  index_t shards = 0;
  /// Template rows (bin·process cells) per block of the dense-Hessian GEMMs; ≥ 1. Deeper blocks
  /// run the GEMMs closer to their peak, shallower ones keep the block workspace in cache.
  index_t hessian_block_rows = 256;

  /// Throws `std::invalid_argument` naming the field and its allowed range.
  void validate() const {
    if (shards < 0) throw std::invalid_argument("LikelihoodOptions::shards must be ≥ 0 (0 = automatic), got " + std::to_string(shards));
    if (hessian_block_rows < 1)
      throw std::invalid_argument("LikelihoodOptions::hessian_block_rows must be ≥ 1, got " + std::to_string(hessian_block_rows));
  }
};

}  // namespace fitlib
