// SPDX-License-Identifier: MIT
// Options of the binned likelihood.
#pragma once

#include <cmath>
#include <stdexcept>
#include <string>

#include "fitlib/core/types.hpp"

namespace fitlib {

/// The data term of the unmasked bins (rabbit-likelihood-and-format.md §3.1).
enum class DataTerm {
  poisson,  ///< reduced Poisson: ν − n − n·ln(ν/n) (computed as (ν − n) − n·log1p((ν − n)/n)), with rabbit's n = 0 convention
  chisq,    ///< ½·(ν − n)²/σ² with σ² the data variances (rabbit's --chisqFit)
  covariance,  ///< ½·(n − ν)ᵀ·C⁻¹·(n − ν) with the model's inverse data covariance (--covarianceFit)
};

/// Bin-by-bin template statistics (Barlow–Beeston, rabbit-likelihood-and-format.md §3.4): one
/// parameter β per bin (lite) or per bin and process (full) for the finite size of the templates.
enum class BinByBinMode { lite, full };

/// The rows of a yields' Jacobian (Likelihood::yield_jacobian, process_yield_jacobian; the shard's jacobian pass):
/// each bin's summed yield, or each of its processes' yields (a row per bin and process).
enum class JacobianRows : unsigned char { summed, processes };

/// How β acts on the yields and what constrains it (§2.5, §3.4).
enum class BinByBinType {
  automatic,              ///< rabbit's choice: normal_additive for the covariance term, else
                          ///< normal_multiplicative in full mode, else gamma
  gamma,                  ///< ν ← β·ν with a gamma constraint of shape k = sumw²/sumw2 (β₀ = 1)
  normal_multiplicative,  ///< ν ← β·ν with a Gaussian constraint of width 1/√k (β₀ = 1)
  normal_additive,        ///< ν ← ν + √sumw2·β with a unit Gaussian constraint (β₀ = 0)
};

/// Which processes a lite-mode β scales in a bin where some processes have exact templates
/// (sumw2 = 0), e.g. data-driven backgrounds. The two rabbit versions differ here (docs/likelihood.md);
/// in full mode they agree, since a cell with sumw2 = 0 keeps its own β at β₀ either way.
enum class ZeroVarianceProcesses {
  exclude,  ///< rabbit since a08c647 (2026-04): β scales only the processes with sumw2 > 0, and only
            ///< their sumw enters k = sumw²/sumw2; the others keep their yields (the default)
  scale,    ///< rabbit 0.2.5 (the PyPI release): β scales every process of the bin, and k is
            ///< (Σ_p sumw)²/Σ_p sumw2 over all of them
};

struct BinByBinOptions {
  /// Profile β in every evaluation (rabbit's default; --noBinByBinStat turns it off). A model
  /// without template variances (`Model::sumw2` empty) has exact templates: β then changes nothing.
  bool enabled = true;
  BinByBinMode mode = BinByBinMode::lite;
  BinByBinType type = BinByBinType::automatic;
  /// Bins (lite) or cells (full) with fewer effective MC events k = sumw²/sumw2 keep β = β₀
  /// (rabbit's --minBBKstat); 0 masks nothing.
  double min_kstat = 0;
  /// Lite mode: whether β scales the processes without template variances (rabbit 0.2.5) or leaves
  /// them alone (rabbit's current behaviour, the default). No effect in full mode.
  ZeroVarianceProcesses zero_variance = ZeroVarianceProcesses::exclude;

  /// The type `automatic` stands for under a data term.
  BinByBinType resolved(DataTerm data_term) const {
    if (type != BinByBinType::automatic) return type;
    if (data_term == DataTerm::covariance) return BinByBinType::normal_additive;
    return mode == BinByBinMode::full ? BinByBinType::normal_multiplicative : BinByBinType::gamma;
  }
};

struct LikelihoodOptions {
  /// The data term; `chisq` needs every unmasked bin's variance to be positive.
  DataTerm data_term = DataTerm::poisson;
  /// POIs act linearly, μ = x (rabbit's --allowNegativeParam). Default: μ = x², so μ ≥ 0 and the
  /// stored parameter is √μ (rabbit-likelihood-and-format.md §2.1).
  bool allow_negative_poi = false;
  /// Number of contiguous bin shards (of each rank, under mpi::Ranks); 0 = one per unit of the
  /// policy's concurrency.
  index_t shards = 0;
  /// Rows per block of the dense-Hessian GEMMs; ≥ 1: bin rows (one per bin, two where β couples
  /// the cells) and, for the exact Hessian's cell term, one process's cells. Deeper blocks run the
  /// GEMMs closer to their peak, shallower ones keep the block workspace in cache.
  index_t hessian_block_rows = 256;
  /// The Gauss–Newton matrix (Curvature::gauss_newton) from single-precision GEMMs: twice the rate of
  /// double's on AVX2. The matrix is a trust region's model and a preconditioner, never an answer
  /// (values, gradients, HVPs and the exact Hessian stay double), so its rounding moves steps, not the
  /// minimum they reach. Each block's rows M and weighted rows D·M are scaled by a power of two each into
  /// float's range (an entry more than float's range below its block's largest rounds to zero), their
  /// product is computed in float and added to the matrix in double, so that rounding does not
  /// accumulate over blocks: below 1e-6 of the largest entry on the tests' models. A block with a
  /// non-finite entry takes the double product. `false`: double throughout.
  bool single_precision_gauss_newton = true;
  /// Bin-by-bin template statistics.
  BinByBinOptions bin_by_bin = {};

  /// Throws `std::invalid_argument` naming the field and its allowed range.
  void validate() const {
    if (shards < 0) throw std::invalid_argument("LikelihoodOptions::shards must be ≥ 0 (0 = automatic), got " + std::to_string(shards));
    if (hessian_block_rows < 1)
      throw std::invalid_argument("LikelihoodOptions::hessian_block_rows must be ≥ 1, got " + std::to_string(hessian_block_rows));
    if (!(bin_by_bin.min_kstat >= 0) || !std::isfinite(bin_by_bin.min_kstat))
      throw std::invalid_argument("LikelihoodOptions::bin_by_bin.min_kstat must be finite and ≥ 0, got " +
                                  std::to_string(bin_by_bin.min_kstat));
    if (bin_by_bin.zero_variance != ZeroVarianceProcesses::exclude && bin_by_bin.zero_variance != ZeroVarianceProcesses::scale)
      throw std::invalid_argument("LikelihoodOptions::bin_by_bin.zero_variance must be ZeroVarianceProcesses::exclude or scale, got " +
                                  std::to_string(static_cast<int>(bin_by_bin.zero_variance)));
    // The covariance term's β profile is a linear solve: a gamma constraint has no closed form there (§3.4).
    if (bin_by_bin.enabled && data_term == DataTerm::covariance && bin_by_bin.resolved(data_term) == BinByBinType::gamma)
      throw std::invalid_argument(
          "LikelihoodOptions: the covariance data term cannot profile gamma bin-by-bin parameters; set bin_by_bin.type to "
          "normal_additive or normal_multiplicative (or disable bin_by_bin)");
  }
};

}  // namespace fitlib
