// SPDX-License-Identifier: MIT
// ShardBytes: what a device-layer shard keeps in its device's memory, known before anything is uploaded.
#pragma once

#include <algorithm>
#include <cstdint>

#include "fitlib/core/types.hpp"

namespace fitlib::device {

/// What a device-layer shard keeps on its device: `resident` (templates, nominal yields, data and
/// bin-by-bin state) and `workspace` (the buffers of its widest passes, the dense Hessian's and the
/// Jacobian's: every cell against the n unit directions; they stay allocated once used). A pass over
/// more columns than n + 1 (a replica batch wider than the parameter count) needs more.
struct ShardBytes {
  std::uint64_t resident = 0, workspace = 0;
  std::uint64_t total() const { return resident + workspace; }
};
/// The bytes of a dense shard of `bins` bins (`data_bins` of them unmasked) with P processes, ncoef
/// logk coefficients per cell and n parameters.
inline ShardBytes dense_shard_bytes(index_t bins, index_t data_bins, index_t P, index_t ncoef, index_t n) {
  const auto u = [](index_t v) { return static_cast<std::uint64_t>(std::max<index_t>(v, 0)); };
  const std::uint64_t d = sizeof(double), cells = u(bins) * u(P);
  ShardBytes b;
  // logk and nominal; one data slot (counts, aux, bin flags); bin-by-bin constants per data cell (kstat,
  // σ, β₀ and two flags, twice: the profiled and the exact state).
  b.resident = cells * (u(ncoef) + 1) * d + u(data_bins) * (2 * d + 1) + 2 * u(data_bins) * u(P) * (3 * d + 2);
  // The forward products L and the per-cell outputs U (n + 1 columns each), the Jacobian's own output (n + 2),
  // the coefficient columns C and the backward products (n + 1 each).
  b.workspace = (3 * cells + 2 * u(ncoef)) * (u(n) + 2) * d;
  return b;
}

}  // namespace fitlib::device
