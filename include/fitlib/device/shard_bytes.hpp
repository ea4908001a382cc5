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
/// The bytes of a shard of `bins` bins (`data_bins` of them unmasked) with P processes, ncoef logk coefficients per cell and n
/// parameters, whose templates take `templates` bytes: its per-bin arrays and pass buffers are laid out P cells per
/// bin whatever the storage.
inline ShardBytes shard_bytes(index_t bins, index_t data_bins, index_t P, index_t ncoef, index_t n, std::uint64_t templates) {
  const auto u = [](index_t v) { return static_cast<std::uint64_t>(std::max<index_t>(v, 0)); };
  const std::uint64_t d = sizeof(double), cells = u(bins) * u(P);
  ShardBytes b;
  // The templates; one data slot (counts, aux, bin flags); bin-by-bin constants per data cell (kstat, σ, β₀ and two
  // flags, twice: the profiled and the exact state).
  b.resident = templates + u(data_bins) * (2 * d + 1) + 2 * u(data_bins) * u(P) * (3 * d + 2);
  // The forward products L and the per-cell outputs U (n + 1 columns each), the Jacobian's own output (n + 2),
  // the coefficient columns C and the backward products (n + 1 each).
  b.workspace = (3 * cells + 2 * u(ncoef)) * (u(n) + 2) * d;
  return b;
}

/// The bytes of a dense shard (shard_bytes): logk and the nominal yields of every cell.
inline ShardBytes dense_shard_bytes(index_t bins, index_t data_bins, index_t P, index_t ncoef, index_t n) {
  const auto cells = static_cast<std::uint64_t>(std::max<index_t>(bins, 0)) * static_cast<std::uint64_t>(std::max<index_t>(P, 0));
  return shard_bytes(bins, data_bins, P, ncoef, n, cells * static_cast<std::uint64_t>(std::max<index_t>(ncoef, 0) + 1) * sizeof(double));
}

/// The most CSC entries of one coefficient that one thread of a sparse shard's backward products sums
/// (device_templates.hpp): a coefficient's entries are cut into pieces of this many, summed in parallel, then in order.
inline constexpr index_t sparse_piece = 512;

/// The bytes of a sparse shard (shard_bytes) with `ncells` non-zero cells, `nnz` logk entries among them and `npieces`
/// pieces of their CSC (sparse_piece): per cell its process, nominal yield, row and CSR offset; per entry its value
/// twice, its coefficient (CSR) and its row (CSC); the CSR's closing offset, the bins' offsets, the coefficients' first
/// pieces and the pieces' first entries (each with its closing one); in the workspace, a partial sum per piece and column.
inline ShardBytes sparse_shard_bytes(index_t bins, index_t data_bins, index_t P, index_t ncoef, index_t n, index_t ncells, index_t nnz,
                                     index_t npieces) {
  const auto u = [](index_t v) { return static_cast<std::uint64_t>(std::max<index_t>(v, 0)); };
  const std::uint64_t d = sizeof(double), i = sizeof(index_t);
  const std::uint64_t templates = u(ncells) * (3 * i + d) + 2 * u(nnz) * (i + d) + (u(bins) + u(ncoef) + u(npieces) + 4) * i;
  ShardBytes b = shard_bytes(bins, data_bins, P, ncoef, n, templates);
  b.workspace += u(npieces) * (u(n) + 2) * d;
  return b;
}

}  // namespace fitlib::device
