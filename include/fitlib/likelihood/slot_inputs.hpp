// SPDX-License-Identifier: MIT
// The inputs of a shard's data slot, checked: counts and variances of its data bins, and the data term's aux per bin.
#pragma once

#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "fitlib/core/error.hpp"
#include "fitlib/core/types.hpp"
#include "fitlib/likelihood/options.hpp"

namespace fitlib::detail {

/// Checks a data slot's inputs for the shard over `range` with `ndata` data bins (sizes; finite
/// counts ≥ 0; positive variances for the χ² term) and returns each bin's aux: 1/n for Poisson (0
/// where n = 0), 1/σ² for χ². Every shard shape stores these, wherever its memory is.
inline std::vector<double> slot_aux(BinRange range, index_t ndata, DataTerm term, std::span<const double> counts, std::span<const double> variances,
                                    std::span<const std::uint8_t> bins, index_t slot) {
  if (static_cast<index_t>(counts.size()) != ndata || variances.size() != counts.size() || (!bins.empty() && bins.size() != counts.size()))
    throw usage_error("shard over bins [" + std::to_string(range.begin) + ", " + std::to_string(range.end) + ") needs " + std::to_string(ndata) +
                      " observed counts and variances (and bin flags or none), got " + std::to_string(counts.size()) + ", " +
                      std::to_string(variances.size()) + " and " + std::to_string(bins.size()));
  std::vector<double> aux(counts.size());
  for (std::size_t i = 0; i < counts.size(); ++i) {
    const bool bad_count = !std::isfinite(counts[i]) || counts[i] < 0;
    const bool bad_variance = term == DataTerm::chisq && !(variances[i] > 0 && std::isfinite(variances[i]));
    if (bad_count || bad_variance)
      throw usage_error("global bin " + std::to_string(range.begin + static_cast<index_t>(i)) + " has count " + std::to_string(counts[i]) +
                        " and variance " + std::to_string(variances[i]) + "; counts must be finite and ≥ 0, and the χ² term needs positive variances");
    aux[i] = term == DataTerm::poisson ? (counts[i] > 0 ? 1.0 / counts[i] : 0.0) : 1.0 / variances[i];
  }
  if (slot < 0) throw usage_error("data slot " + std::to_string(slot) + " is negative");
  return aux;
}

}  // namespace fitlib::detail
