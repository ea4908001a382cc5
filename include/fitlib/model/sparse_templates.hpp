// SPDX-License-Identifier: MIT
// The template tensor (nominal yields and their variations) in rabbit's sparse form, as CSR grouped by bin.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "fitlib/core/error.hpp"
#include "fitlib/core/types.hpp"

namespace fitlib {

/// The template tensor of a model without its zeros (rabbit-likelihood-and-format.md §1.3): the non-zero
/// nominal cells N_bp, grouped by bin and ordered by process inside a bin, and one CSR row of logk
/// coefficients per cell. Coefficient c is the column of the dense layout of `Model::logk`: c = s for a
/// symmetric tensor, c = s (K) or nsyst + s (H) for an asymmetric one. Because a bin's cells are contiguous,
/// a range of bins is a contiguous range of cells and of CSR entries, which is what a shard streams.
///
/// Negative nominal values are representable; whether a model may have them is `Model`'s decision.
struct SparseTemplates {
  index_t nbins_full = 0;  ///< bins, masked channels included (rabbit's Bf)
  index_t nprocs = 0;      ///< processes (rabbit's P)
  index_t ncoef = 0;       ///< logk columns: nsyst (symmetric) or 2·nsyst (asymmetric)
  std::vector<index_t> bin_begin;     ///< [nbins_full + 1]: the cells of bin b are [bin_begin[b], bin_begin[b+1])
  std::vector<index_t> cell_process;  ///< [ncells]: process of each non-zero cell, strictly increasing within a bin
  std::vector<double> cell_nominal;   ///< [ncells]: N_bp, finite and ≠ 0
  std::vector<index_t> row_begin;     ///< [ncells + 1]: the logk entries of cell i are [row_begin[i], row_begin[i+1])
  std::vector<index_t> col;           ///< [nnz]: coefficient index c ∈ [0, ncoef), strictly increasing within a row
  std::vector<double> val;            ///< [nnz]: logk values, finite and ≠ 0
  /// The bins whose logk rows the tensor holds, or empty: all of them. The cells of the other bins have empty
  /// rows (absent, not zero); a tensor read for one rank of an MPI fit (io::RabbitReadOptions::bins) holds its own.
  std::optional<BinRange> held;

  /// Non-zero nominal cells (rabbit's nnzN).
  index_t ncells() const { return static_cast<index_t>(cell_nominal.size()); }
  /// Non-zero logk entries (rabbit's nnzK).
  index_t nnz() const { return static_cast<index_t>(val.size()); }

  /// From rabbit's COO datasets (§1.3): `hnorm_sparse/indices` `[nnzN × 2]` rows (bin, process) flattened
  /// row-major with `hnorm_sparse/values` `[nnzN]`; `hlogk_sparse/indices` `[nnzK × 2]` rows (i, c), where i is
  /// a position in hnorm_sparse, with `hlogk_sparse/values` `[nnzK]`. The extents are the dense shapes.
  /// The logk entries may be a contiguous part of hlogk_sparse starting at entry `logk_first` (the entries of some
  /// bins' cells, io::RabbitReadOptions::bins): the other cells then have empty rows, and messages number entries
  /// as in the file. Throws `model_error` naming the dataset, the entry and the remedy.
  static SparseTemplates from_coo(index_t nbins_full, index_t nprocs, index_t ncoef, std::span<const std::int64_t> norm_indices,
                                  std::span<const double> norm_values, std::span<const std::int64_t> logk_indices,
                                  std::span<const double> logk_values, index_t logk_first = 0);

  /// From dense arrays in DenseTemplates' layout (nominal `[nbins_full × nprocs]`, logk `[held bins × nprocs ×
  /// ncoef]`, row-major; `held` empty: all bins): keeps the non-zero nominal cells and their non-zero logk entries,
  /// and the held bins. Throws `model_error` for a wrong length, a non-finite value, or a non-zero logk entry of
  /// a cell whose nominal is zero (as `Model::validate`).
  static SparseTemplates from_dense(index_t nbins_full, index_t nprocs, index_t ncoef, std::span<const double> nominal,
                                    std::span<const double> logk, std::optional<BinRange> held = {});

  /// Dense nominal `[nbins_full × nprocs]` (for tests and small models).
  std::vector<double> dense_nominal() const;
  /// Dense logk `[nbins_full × nprocs × ncoef]` (for tests and small models).
  std::vector<double> dense_logk() const;

  /// Checks every invariant above; throws `model_error` naming the array and the entry.
  void validate() const;

  /// Bytes held by the sparse arrays (for benchmarks' roofline counts).
  std::size_t bytes() const {
    return sizeof(index_t) * (bin_begin.size() + cell_process.size() + row_begin.size() + col.size()) +
           sizeof(double) * (cell_nominal.size() + val.size());
  }

  /// Same shape and the same stored entries (stored values are non-zero, so == on doubles is exact equality).
  bool operator==(const SparseTemplates&) const = default;
};

namespace detail::sparse {

inline std::string number(double v) {
  std::ostringstream os;
  os.precision(17);
  os << v;
  return os.str();
}

inline std::string shape(index_t a, index_t b) { return std::string("[") + std::to_string(a) + ", " + std::to_string(b) + "]"; }

/// Entry k of a COO index array `[nnz × 2]` (dataset `dataset`, e.g. "hnorm_sparse") must come
/// strictly after entry k − 1 in row-major order (§1.3); `first` and `second` name the two indices.
inline void require_row_major(std::span<const std::int64_t> idx, index_t k, const std::string& dataset, const std::string& entry,
                              const char* first, const char* second) {
  if (k == 0) return;
  const std::int64_t a = idx[static_cast<std::size_t>(2 * k)], b = idx[static_cast<std::size_t>(2 * k + 1)];
  const std::int64_t pa = idx[static_cast<std::size_t>(2 * k - 2)], pb = idx[static_cast<std::size_t>(2 * k - 1)];
  if (a == pa && b == pb)
    throw model_error(dataset + "/indices: " + entry + " duplicates the entry before it; each (" + first + ", " + second +
                      ") may appear once, so merge the two when writing the file");
  if (a < pa || (a == pa && b < pb))
    throw model_error(dataset + "/indices: " + entry + " comes after (" + first + " " + std::to_string(pa) + ", " + second + " " +
                      std::to_string(pb) + "); entries must be sorted row-major by (" + first + ", " + second +
                      ") as rabbit writes them (§1.3)");
}

inline void require_shape(index_t nbins_full, index_t nprocs, index_t ncoef, const char* where) {
  if (nbins_full < 0 || nprocs < 0 || ncoef < 0)
    throw model_error(std::string(where) + ": dense shape (nbins_full " + std::to_string(nbins_full) + ", nprocs " +
                      std::to_string(nprocs) + ", ncoef " + std::to_string(ncoef) +
                      ") has a negative extent; check the dense_shape attributes");
}

}  // namespace detail::sparse

inline SparseTemplates SparseTemplates::from_coo(index_t nbins_full, index_t nprocs, index_t ncoef,
                                                 std::span<const std::int64_t> norm_indices, std::span<const double> norm_values,
                                                 std::span<const std::int64_t> logk_indices, std::span<const double> logk_values,
                                                 index_t logk_first) {
  using detail::sparse::number;
  using detail::sparse::shape;
  detail::sparse::require_shape(nbins_full, nprocs, ncoef, "hnorm_sparse/hlogk_sparse");
  const auto nnz_norm = static_cast<index_t>(norm_values.size());
  const auto nnz_logk = static_cast<index_t>(logk_values.size());
  if (static_cast<index_t>(norm_indices.size()) != 2 * nnz_norm)
    throw model_error("hnorm_sparse/indices has " + std::to_string(norm_indices.size()) + " integers but hnorm_sparse/values has " +
                      std::to_string(nnz_norm) + " entries; indices must be [nnzN × 2] (bin, process) pairs, one per value");
  if (static_cast<index_t>(logk_indices.size()) != 2 * nnz_logk)
    throw model_error("hlogk_sparse/indices has " + std::to_string(logk_indices.size()) + " integers but hlogk_sparse/values has " +
                      std::to_string(nnz_logk) + " entries; indices must be [nnzK × 2] (cell, coefficient) pairs, one per value");

  // Unsorted or duplicated entries are rejected, not repaired. rabbit's writer always sorts row-major (§1.3)
  // and rabbit's reader builds its CSR assuming so, so such a file did not come from rabbit and rabbit would
  // misread it; silently sorting hnorm_sparse would also renumber the cells that hlogk_sparse's i refers to,
  // and a duplicate has no single meaning (sum? last wins?). Requiring the order lets one streaming pass build
  // the CSR arrays, with no sort and no copy of multi-gigabyte COO arrays.
  //
  // Explicit zero values are dropped instead: a stored zero means the same as an absent entry, to rabbit too.
  SparseTemplates t;
  t.nbins_full = nbins_full;
  t.nprocs = nprocs;
  t.ncoef = ncoef;
  t.bin_begin.assign(static_cast<std::size_t>(nbins_full + 1), 0);
  t.cell_process.reserve(static_cast<std::size_t>(nnz_norm));
  t.cell_nominal.reserve(static_cast<std::size_t>(nnz_norm));
  // hlogk_sparse's i counts every hnorm_sparse entry, dropped zeros included.
  std::vector<index_t> cell_of(static_cast<std::size_t>(nnz_norm), -1);
  for (index_t k = 0; k < nnz_norm; ++k) {
    const std::int64_t b = norm_indices[static_cast<std::size_t>(2 * k)], p = norm_indices[static_cast<std::size_t>(2 * k + 1)];
    const auto entry = [&] {
      return "hnorm_sparse entry " + std::to_string(k) + " (bin " + std::to_string(b) + ", process " + std::to_string(p) + ")";
    };
    if (b < 0 || b >= nbins_full || p < 0 || p >= nprocs)
      throw model_error("hnorm_sparse/indices: " + entry() + " is outside the dense shape " + shape(nbins_full, nprocs) +
                        "; the indices and the dense_shape attribute disagree (a corrupt or mismatched file)");
    detail::sparse::require_row_major(norm_indices, k, "hnorm_sparse", entry(), "bin", "process");
    const double v = norm_values[static_cast<std::size_t>(k)];
    if (!std::isfinite(v))
      throw model_error("hnorm_sparse/values: " + entry() + " is " + number(v) + "; nominal yields must be finite, fix the input histogram");
    if (v == 0) continue;
    cell_of[static_cast<std::size_t>(k)] = static_cast<index_t>(t.cell_nominal.size());
    t.cell_process.push_back(static_cast<index_t>(p));
    t.cell_nominal.push_back(v);
    ++t.bin_begin[static_cast<std::size_t>(b + 1)];
  }
  for (index_t b = 0; b < nbins_full; ++b) t.bin_begin[static_cast<std::size_t>(b + 1)] += t.bin_begin[static_cast<std::size_t>(b)];

  t.row_begin.assign(static_cast<std::size_t>(t.ncells() + 1), 0);
  t.col.reserve(static_cast<std::size_t>(nnz_logk));
  t.val.reserve(static_cast<std::size_t>(nnz_logk));
  for (index_t k = 0; k < nnz_logk; ++k) {
    const std::int64_t i = logk_indices[static_cast<std::size_t>(2 * k)], c = logk_indices[static_cast<std::size_t>(2 * k + 1)];
    const auto entry = [&] {
      return "hlogk_sparse entry " + std::to_string(logk_first + k) + " (cell " + std::to_string(i) + ", coefficient " + std::to_string(c) + ")";
    };
    if (i < 0 || i >= nnz_norm)
      throw model_error("hlogk_sparse/indices: " + entry() + " refers to hnorm_sparse entry " + std::to_string(i) +
                        ", but hnorm_sparse has " + std::to_string(nnz_norm) +
                        " entries; a row index is a position in hnorm_sparse, not a bin (§1.3) — check that both groups "
                        "come from the same file");
    if (c < 0 || c >= ncoef)
      throw model_error("hlogk_sparse/indices: " + entry() + " is outside the dense shape " + shape(nnz_norm, ncoef) +
                        " (ncoef = nsyst, or 2·nsyst when asymmetric); the indices and the dense_shape attribute disagree");
    detail::sparse::require_row_major(logk_indices, k, "hlogk_sparse", entry(), "cell", "coefficient");
    const double v = logk_values[static_cast<std::size_t>(k)];
    if (!std::isfinite(v))
      throw model_error("hlogk_sparse/values: " + entry() + " is " + number(v) + "; variations must be finite, check the up/down histograms");
    if (v == 0) continue;
    const index_t cell = cell_of[static_cast<std::size_t>(i)];
    if (cell < 0)
      throw model_error("hlogk_sparse/values: " + entry() + " is " + number(v) + " but hnorm_sparse entry " + std::to_string(i) + " (bin " +
                        std::to_string(norm_indices[static_cast<std::size_t>(2 * i)]) + ", process " +
                        std::to_string(norm_indices[static_cast<std::size_t>(2 * i + 1)]) +
                        ") has a zero nominal yield; a variation needs a non-zero nominal yield");
    t.col.push_back(static_cast<index_t>(c));
    t.val.push_back(v);
    ++t.row_begin[static_cast<std::size_t>(cell + 1)];
  }
  for (index_t i = 0; i < t.ncells(); ++i) t.row_begin[static_cast<std::size_t>(i + 1)] += t.row_begin[static_cast<std::size_t>(i)];
  return t;
}

inline SparseTemplates SparseTemplates::from_dense(index_t nbins_full, index_t nprocs, index_t ncoef, std::span<const double> nominal,
                                                   std::span<const double> logk, std::optional<BinRange> held) {
  using detail::sparse::number;
  detail::sparse::require_shape(nbins_full, nprocs, ncoef, "SparseTemplates::from_dense");
  const BinRange rows = held.value_or(BinRange{0, nbins_full});
  if (rows.begin < 0 || rows.begin > rows.end || rows.end > nbins_full)
    throw model_error("held bins [" + std::to_string(rows.begin) + ", " + std::to_string(rows.end) + ") are outside the tensor's " +
                      std::to_string(nbins_full) + " bins");
  const index_t ncell_full = nbins_full * nprocs;
  if (static_cast<index_t>(nominal.size()) != ncell_full)
    throw model_error("dense nominal has " + std::to_string(nominal.size()) + " entries but nbins_full × nprocs = " +
                      std::to_string(ncell_full) + "; pass the [nbins_full × nprocs] array");
  if (static_cast<index_t>(logk.size()) != rows.size() * nprocs * ncoef)
    throw model_error("dense logk has " + std::to_string(logk.size()) + " entries but " + (held ? "held bins" : "nbins_full") +
                      " × nprocs × ncoef = " + std::to_string(rows.size() * nprocs * ncoef) + "; pass the [" +
                      (held ? "held bins" : "nbins_full") + " × nprocs × ncoef] array (ncoef = 2·nsyst if asymmetric)");
  SparseTemplates t;
  t.nbins_full = nbins_full;
  t.nprocs = nprocs;
  t.ncoef = ncoef;
  t.held = held;
  t.bin_begin.reserve(static_cast<std::size_t>(nbins_full + 1));
  t.bin_begin.push_back(0);
  t.row_begin.push_back(0);
  for (index_t b = 0; b < nbins_full; ++b) {
    const bool has_rows = b >= rows.begin && b < rows.end;
    for (index_t p = 0; p < nprocs; ++p) {
      const double n = nominal[static_cast<std::size_t>(b * nprocs + p)];
      const auto cell = [&] { return "(bin " + std::to_string(b) + ", process " + std::to_string(p) + ")"; };
      if (!std::isfinite(n)) throw model_error("dense nominal " + cell() + " is " + number(n) + "; nominal yields must be finite");
      const double* row = has_rows ? logk.data() + ((b - rows.begin) * nprocs + p) * ncoef : nullptr;
      for (index_t c = 0; row && c < ncoef; ++c) {
        if (!std::isfinite(row[c]))
          throw model_error("dense logk " + cell() + " coefficient " + std::to_string(c) + " is " + number(row[c]) +
                            "; variations must be finite");
        if (n == 0 && row[c] != 0)
          throw model_error("dense logk " + cell() + " coefficient " + std::to_string(c) + " is " + number(row[c]) +
                            " but the nominal yield is zero; a variation needs a non-zero nominal yield");
      }
      if (n == 0) continue;
      t.cell_process.push_back(p);
      t.cell_nominal.push_back(n);
      for (index_t c = 0; row && c < ncoef; ++c)
        if (row[c] != 0) {
          t.col.push_back(c);
          t.val.push_back(row[c]);
        }
      t.row_begin.push_back(t.nnz());
    }
    t.bin_begin.push_back(t.ncells());
  }
  return t;
}

inline std::vector<double> SparseTemplates::dense_nominal() const {
  std::vector<double> d(static_cast<std::size_t>(nbins_full * nprocs), 0.0);
  for (index_t b = 0; b < nbins_full; ++b)
    for (index_t i = bin_begin[static_cast<std::size_t>(b)]; i < bin_begin[static_cast<std::size_t>(b + 1)]; ++i)
      d[static_cast<std::size_t>(b * nprocs + cell_process[static_cast<std::size_t>(i)])] = cell_nominal[static_cast<std::size_t>(i)];
  return d;
}

inline std::vector<double> SparseTemplates::dense_logk() const {
  std::vector<double> d(static_cast<std::size_t>(nbins_full * nprocs * ncoef), 0.0);
  for (index_t b = 0; b < nbins_full; ++b)
    for (index_t i = bin_begin[static_cast<std::size_t>(b)]; i < bin_begin[static_cast<std::size_t>(b + 1)]; ++i) {
      double* row = d.data() + (b * nprocs + cell_process[static_cast<std::size_t>(i)]) * ncoef;
      for (index_t k = row_begin[static_cast<std::size_t>(i)]; k < row_begin[static_cast<std::size_t>(i + 1)]; ++k)
        row[col[static_cast<std::size_t>(k)]] = val[static_cast<std::size_t>(k)];
    }
  return d;
}

inline void SparseTemplates::validate() const {
  using detail::sparse::number;
  detail::sparse::require_shape(nbins_full, nprocs, ncoef, "SparseTemplates");
  const auto fail = [](const std::string& what) { throw model_error("SparseTemplates::" + what); };
  const auto size_check = [&](std::size_t actual, std::size_t expected, const char* name, const char* rule) {
    if (actual != expected)
      fail(std::string(name) + " has " + std::to_string(actual) + " entries but must have " + std::to_string(expected) + " (" + rule + ")");
  };
  // Sizes first: every later check indexes through these arrays.
  size_check(bin_begin.size(), static_cast<std::size_t>(nbins_full + 1), "bin_begin", "nbins_full + 1");
  size_check(cell_process.size(), cell_nominal.size(), "cell_process", "one per cell, as cell_nominal");
  size_check(row_begin.size(), cell_nominal.size() + 1, "row_begin", "ncells + 1");
  size_check(col.size(), val.size(), "col", "one per logk entry, as val");
  // Offsets that start at 0, never decrease and end at the count stay in range, so the loops below may index through them.
  const auto offsets_check = [&](const std::vector<index_t>& off, const char* name, const char* unit, index_t count, const char* counted) {
    if (off.front() != 0) fail(std::string(name) + "[0] is " + std::to_string(off.front()) + "; it must be 0");
    for (std::size_t j = 1; j < off.size(); ++j)
      if (off[j] < off[j - 1])
        fail(std::string(name) + " decreases at " + unit + " " + std::to_string(j - 1) + " (" + std::to_string(off[j - 1]) + " → " +
             std::to_string(off[j]) + "); offsets must not decrease");
    if (off.back() != count)
      fail(std::string(name) + "[" + std::to_string(off.size() - 1) + "] is " + std::to_string(off.back()) + " but there are " +
           std::to_string(count) + " " + counted);
  };
  offsets_check(bin_begin, "bin_begin", "bin", ncells(), "cells");
  offsets_check(row_begin, "row_begin", "cell", nnz(), "logk entries");
  for (index_t b = 0; b < nbins_full; ++b) {
    const index_t lo = bin_begin[static_cast<std::size_t>(b)], hi = bin_begin[static_cast<std::size_t>(b + 1)];
    for (index_t i = lo; i < hi; ++i) {
      const index_t p = cell_process[static_cast<std::size_t>(i)];
      // Built only on failure: validate() runs over every entry of large tensors.
      const auto at = [&] { return std::string("[") + std::to_string(i) + "] (bin " + std::to_string(b) + ")"; };
      if (p < 0 || p >= nprocs)
        fail(std::string("cell_process") + at() + " is " + std::to_string(p) + ", outside [0, " + std::to_string(nprocs) + ")");
      if (i > lo && p <= cell_process[static_cast<std::size_t>(i - 1)])
        fail(std::string("cell_process") + at() + " is " + std::to_string(p) + ", not after the previous cell's process " +
             std::to_string(cell_process[static_cast<std::size_t>(i - 1)]) + "; processes must strictly increase within a bin");
      const double n = cell_nominal[static_cast<std::size_t>(i)];
      if (!std::isfinite(n) || n == 0) fail(std::string("cell_nominal") + at() + " is " + number(n) + "; stored yields must be finite and non-zero");
    }
  }
  for (index_t i = 0; i < ncells(); ++i) {
    const index_t lo = row_begin[static_cast<std::size_t>(i)], hi = row_begin[static_cast<std::size_t>(i + 1)];
    for (index_t k = lo; k < hi; ++k) {
      const index_t c = col[static_cast<std::size_t>(k)];
      const auto at = [&] { return std::string("[") + std::to_string(k) + "] (cell " + std::to_string(i) + ")"; };
      if (c < 0 || c >= ncoef) fail(std::string("col") + at() + " is " + std::to_string(c) + ", outside [0, " + std::to_string(ncoef) + ")");
      if (k > lo && c <= col[static_cast<std::size_t>(k - 1)])
        fail(std::string("col") + at() + " is " + std::to_string(c) + ", not after the previous coefficient " +
             std::to_string(col[static_cast<std::size_t>(k - 1)]) + "; coefficients must strictly increase within a row");
      const double v = val[static_cast<std::size_t>(k)];
      if (!std::isfinite(v) || v == 0) fail(std::string("val") + at() + " is " + number(v) + "; stored logk values must be finite and non-zero");
    }
  }
  if (!held) return;
  if (held->begin < 0 || held->begin > held->end || held->end > nbins_full)
    fail("held is [" + std::to_string(held->begin) + ", " + std::to_string(held->end) + "), outside the " + std::to_string(nbins_full) + " bins");
  for (const BinRange outside : {BinRange{0, held->begin}, BinRange{held->end, nbins_full}}) {
    const index_t first = row_begin[static_cast<std::size_t>(bin_begin[static_cast<std::size_t>(outside.begin)])];
    const index_t last = row_begin[static_cast<std::size_t>(bin_begin[static_cast<std::size_t>(outside.end)])];
    if (first != last)
      fail("row_begin gives logk entries to bins [" + std::to_string(outside.begin) + ", " + std::to_string(outside.end) + "), outside held [" +
           std::to_string(held->begin) + ", " + std::to_string(held->end) + "); the rows of bins not held must be empty");
  }
}

}  // namespace fitlib
