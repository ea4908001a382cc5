// SPDX-License-Identifier: MIT
// A device-layer shard's templates in its device's memory: the forward products L = K·C and the backward ones Kᵀ·U,
// as GEMMs (dense templates) or as CSR and CSC kernels (sparse ones).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "fitlib/config.hpp"
#include "fitlib/core/types.hpp"
#include "fitlib/device/shard_bytes.hpp"
#include "fitlib/likelihood/cells.hpp"
#include "fitlib/likelihood/templates.hpp"
#include "fitlib/model/model.hpp"

namespace fitlib::detail {

template <class Storage, class Layer>
class DeviceTemplates;

// Both kinds lay the forward products out alike: cell c of local bin i on row i·P + c of L (`[rows × columns]`,
// column-major), so the launched per-bin functions find a bin's cells at L + i·P whatever the storage; the rows of a
// sparse bin's absent cells are neither written nor read.

/// Dense templates: logk `[cells × ncoef]` row-major, so L = K·C and Kᵀ·U are each one GEMM.
template <class Layer>
class DeviceTemplates<storage::Dense, Layer> {
 public:
  using cells_type = DenseCells;

  DeviceTemplates(Layer& layer, const Model& m, BinRange bins) : P_(m.nprocs()), nc_(m.ncoef()) {
    const DenseTemplates& t = tensor_of<storage::Dense>(m);
    const auto P = static_cast<std::size_t>(P_), nc = static_cast<std::size_t>(nc_);
    const auto row0 = static_cast<std::size_t>(held_row(m, bins));
    const auto cells = static_cast<std::size_t>(bins.size()) * P;
    layer.upload(std::span(t.logk).subspan(row0 * P * nc, cells * nc), logk_);
    layer.upload(std::span(t.nominal).subspan(static_cast<std::size_t>(bins.begin) * P, cells), nominal_);
  }

  /// What the shard keeps on its device (device/shard_bytes.hpp), before anything is uploaded.
  static device::ShardBytes bytes(const Model& m, BinRange bins, index_t data_bins, index_t nparams) {
    return device::dense_shard_bytes(bins.size(), data_bins, m.nprocs(), m.ncoef(), nparams);
  }

  cells_type cells(Layer& layer) { return {layer.data(nominal_), P_}; }

  /// L = K·C for the cells of local bins `bins` and the nf columns of C (`[ncoef × nf]`), L `[bins·P × nf]`.
  void forward(Layer& layer, BinRange bins, index_t nf, const double* C, double* L) {
    const index_t rows = bins.size() * P_;
    layer.gemm(true, rows, nf, nc_, layer.data(logk_) + bins.begin * P_ * nc_, nc_, C, nc_, L, rows);
  }
  /// acc = Kᵀ·U (`[ncoef × nb]`) for the cells of local bins `bins`, U `[bins·P × nb]`.
  void backward(Layer& layer, BinRange bins, index_t nb, const double* U, double* acc) {
    const index_t rows = bins.size() * P_;
    layer.gemm(false, nc_, nb, rows, layer.data(logk_) + bins.begin * P_ * nc_, nc_, U, rows, acc, nc_);
  }

 private:
  index_t P_, nc_;
  typename Layer::template buffer<double> logk_, nominal_;
};

/// L's entries of the cells [first, first + count) of a sparse shard, every column: one thread per (cell, column),
/// its CSR row's products summed in coefficient order.
struct SparseForwardKernel {
  const index_t *row_begin, *col, *row_of;  ///< CSR over the shard's cells; each cell's row of L (i·P + c)
  const double* val;
  const double* C;                 ///< `[ncoef × nf]`
  index_t nc, first, count, row0;  ///< row0: L's first row (the range's first bin times P)
  double* L;
  index_t ldL;
  FITLIB_HOST_DEVICE void operator()(index_t t) const {
    const index_t cell = first + t % count, j = t / count;
    const double* cj = C + j * nc;
    double s = 0;
    for (index_t k = row_begin[cell]; k < row_begin[cell + 1]; ++k) s += val[k] * cj[col[k]];
    L[row_of[cell] - row0 + j * ldL] = s;
  }
};

/// The first of the ascending rows [first, last) that is ≥ r (a CSC column's rows ascend: its entries are in cell order).
FITLIB_HOST_DEVICE inline const index_t* first_row_at_least(const index_t* first, const index_t* last, index_t r) {
  while (first < last) {
    const index_t* mid = first + (last - first) / 2;
    if (*mid < r) first = mid + 1;
    else last = mid;
  }
  return first;
}

/// Kᵀ·U of a sparse shard over L's rows [row0, row1), first half: one thread per (piece, column), a piece being at
/// most device::sparse_piece consecutive CSC entries of one coefficient (the pieces tile the entries in a fixed
/// layout), summed in cell order over the entries whose row lies in the range (two binary searches find them).
struct SparseBackwardPieceKernel {
  const index_t *piece_at, *row;  ///< piece p: entries [piece_at[p], piece_at[p + 1]); each entry's row of L
  const double* val;
  const double* U;  ///< `[ldU × nb]`, row r of the shard at r − row0
  index_t ldU, npieces, row0, row1;
  double* partial;  ///< `[npieces × nb]`
  FITLIB_HOST_DEVICE void operator()(index_t t) const {
    const index_t p = t % npieces, j = t / npieces;
    const double* uj = U + j * ldU;
    const index_t* end = row + piece_at[p + 1];
    const index_t* e = first_row_at_least(row + piece_at[p], end, row0);
    end = first_row_at_least(e, end, row1);
    double s = 0;
    for (; e < end; ++e) s += val[e - row] * uj[*e - row0];
    partial[p + j * npieces] = s;
  }
};

/// The second half: one thread per (coefficient, column), the coefficient's pieces summed in order. The summation
/// order is the layout's alone and no two threads write one entry (no atomics): the same bits run after run.
struct SparseBackwardSumKernel {
  const index_t* piece_begin;  ///< coefficient c's pieces [piece_begin[c], piece_begin[c + 1])
  const double* partial;       ///< `[npieces × nb]`
  index_t npieces, nc;
  double* acc;  ///< `[ncoef × nb]`
  FITLIB_HOST_DEVICE void operator()(index_t t) const {
    const index_t c = t % nc, j = t / nc;
    const double* pj = partial + j * npieces;
    double s = 0;
    for (index_t p = piece_begin[c]; p < piece_begin[c + 1]; ++p) s += pj[p];
    acc[c + j * nc] = s;
  }
};

/// Sparse templates (model/sparse_templates.hpp) on the device without densifying: the shard's cells (process,
/// nominal yield, row of L), their logk rows as CSR for the forward products and the same entries as CSC (by
/// coefficient, in cell order) cut into pieces for the backward ones: twice the entries, so that each product is a
/// gather.
template <class Layer>
class DeviceTemplates<storage::Sparse, Layer> {
 public:
  using cells_type = SparseCells;

  DeviceTemplates(Layer& layer, const Model& m, BinRange bins) : P_(m.nprocs()), nc_(m.ncoef()) {
    const SparseTemplates& t = tensor_of<storage::Sparse>(m);
    const Range r = range_of(m, bins);
    const index_t c0 = r.c0, ncells = r.c1 - r.c0, k0 = r.k0, nnz = r.nnz;
    const auto at = [](const std::vector<index_t>& v, index_t i) { return v[static_cast<std::size_t>(i)]; };
    std::vector<index_t> bin_begin(static_cast<std::size_t>(bins.size() + 1)), row_of(static_cast<std::size_t>(ncells)),
        row_begin(static_cast<std::size_t>(ncells + 1)), csc_row(static_cast<std::size_t>(nnz));
    std::vector<double> csc_val(static_cast<std::size_t>(nnz));
    for (index_t i = 0; i <= bins.size(); ++i) bin_begin[static_cast<std::size_t>(i)] = at(t.bin_begin, bins.begin + i) - c0;
    for (index_t i = 0; i < bins.size(); ++i)
      for (index_t cell = bin_begin[static_cast<std::size_t>(i)]; cell < bin_begin[static_cast<std::size_t>(i + 1)]; ++cell)
        row_of[static_cast<std::size_t>(cell)] = i * P_ + cell - bin_begin[static_cast<std::size_t>(i)];
    for (index_t cell = 0; cell <= ncells; ++cell) row_begin[static_cast<std::size_t>(cell)] = at(t.row_begin, c0 + cell) - k0;
    // CSC by a counting sort on the coefficient, stable: each column's entries stay in cell order.
    const std::vector<index_t> col_begin = csc_offsets(t, r, nc_);
    std::vector<index_t> next(col_begin.begin(), col_begin.end() - 1);
    for (index_t cell = 0; cell < ncells; ++cell)
      for (index_t k = row_begin[static_cast<std::size_t>(cell)]; k < row_begin[static_cast<std::size_t>(cell + 1)]; ++k) {
        const index_t e = next[static_cast<std::size_t>(at(t.col, k0 + k))]++;
        csc_row[static_cast<std::size_t>(e)] = row_of[static_cast<std::size_t>(cell)];
        csc_val[static_cast<std::size_t>(e)] = t.val[static_cast<std::size_t>(k0 + k)];
      }
    std::vector<index_t> piece_begin, piece_at;
    pieces_of(col_begin, piece_begin, piece_at);
    npieces_ = static_cast<index_t>(piece_at.size()) - 1;
    const auto part = [&](const auto& v, index_t first, index_t n) {
      return std::span(v).subspan(static_cast<std::size_t>(first), static_cast<std::size_t>(n));
    };
    layer.upload(std::span<const index_t>(bin_begin), bin_begin_);
    layer.upload(part(t.cell_process, c0, ncells), process_);
    layer.upload(part(t.cell_nominal, c0, ncells), nominal_);
    layer.upload(std::span<const index_t>(row_of), row_of_);
    layer.upload(std::span<const index_t>(row_begin), row_begin_);
    layer.upload(part(t.col, k0, nnz), col_);
    layer.upload(part(t.val, k0, nnz), val_);
    layer.upload(std::span<const index_t>(piece_begin), piece_begin_);
    layer.upload(std::span<const index_t>(piece_at), piece_at_);
    layer.upload(std::span<const index_t>(csc_row), csc_row_);
    layer.upload(std::span<const double>(csc_val), csc_val_);
    host_bin_begin_ = std::move(bin_begin);
  }

  static device::ShardBytes bytes(const Model& m, BinRange bins, index_t data_bins, index_t nparams) {
    const Range r = range_of(m, bins);
    std::vector<index_t> piece_begin, piece_at;
    pieces_of(csc_offsets(tensor_of<storage::Sparse>(m), r, m.ncoef()), piece_begin, piece_at);
    return device::sparse_shard_bytes(bins.size(), data_bins, m.nprocs(), m.ncoef(), nparams, r.c1 - r.c0, r.nnz,
                                      static_cast<index_t>(piece_at.size()) - 1);
  }

  cells_type cells(Layer& layer) { return {layer.data(bin_begin_), layer.data(process_), layer.data(nominal_)}; }

  void forward(Layer& layer, BinRange bins, index_t nf, const double* C, double* L) {
    const index_t first = cell(bins.begin), count = cell(bins.end) - first;
    if (count == 0 || nf == 0) return;
    layer.launch(count * nf, SparseForwardKernel{layer.data(row_begin_), layer.data(col_), layer.data(row_of_), layer.data(val_), C, nc_, first,
                                                 count, bins.begin * P_, L, bins.size() * P_});
  }
  void backward(Layer& layer, BinRange bins, index_t nb, const double* U, double* acc) {
    if (nc_ == 0 || nb == 0) return;
    layer.resize(partial_, npieces_ * nb);  // every piece writes its entry
    if (npieces_ > 0)
      layer.launch(npieces_ * nb, SparseBackwardPieceKernel{layer.data(piece_at_), layer.data(csc_row_), layer.data(csc_val_), U, bins.size() * P_,
                                                            npieces_, bins.begin * P_, bins.end * P_, layer.data(partial_)});
    layer.launch(nc_ * nb, SparseBackwardSumKernel{layer.data(piece_begin_), layer.data(partial_), npieces_, nc_, acc});
  }

 private:
  /// The shard's cells [c0, c1) and their logk entries [k0, k0 + nnz).
  struct Range {
    index_t c0, c1, k0, nnz;
  };
  static Range range_of(const Model& m, BinRange bins) {
    const SparseTemplates& t = tensor_of<storage::Sparse>(m);
    held_row(m, bins);  // throws unless the model holds these bins' rows
    const auto at = [](const std::vector<index_t>& v, index_t i) { return v[static_cast<std::size_t>(i)]; };
    const index_t c0 = at(t.bin_begin, bins.begin), c1 = at(t.bin_begin, bins.end), k0 = at(t.row_begin, c0);
    return {c0, c1, k0, at(t.row_begin, c1) - k0};
  }
  /// The CSC's column offsets (`[ncoef + 1]`) of the range's entries.
  static std::vector<index_t> csc_offsets(const SparseTemplates& t, const Range& r, index_t nc) {
    std::vector<index_t> col_begin(static_cast<std::size_t>(nc + 1), 0);
    for (index_t k = 0; k < r.nnz; ++k) ++col_begin[static_cast<std::size_t>(t.col[static_cast<std::size_t>(r.k0 + k)] + 1)];
    for (index_t c = 0; c < nc; ++c) col_begin[static_cast<std::size_t>(c + 1)] += col_begin[static_cast<std::size_t>(c)];
    return col_begin;
  }
  /// Each coefficient's entries cut into pieces of device::sparse_piece (its last one shorter): coefficient c's pieces
  /// [piece_begin[c], piece_begin[c + 1]), piece p's entries [piece_at[p], piece_at[p + 1]).
  static void pieces_of(const std::vector<index_t>& col_begin, std::vector<index_t>& piece_begin, std::vector<index_t>& piece_at) {
    piece_begin.assign(1, 0);
    piece_at.assign(1, 0);
    for (std::size_t c = 0; c + 1 < col_begin.size(); ++c) {
      for (index_t e = col_begin[c] + device::sparse_piece; e < col_begin[c + 1]; e += device::sparse_piece) piece_at.push_back(e);
      if (col_begin[c + 1] > col_begin[c]) piece_at.push_back(col_begin[c + 1]);
      piece_begin.push_back(static_cast<index_t>(piece_at.size()) - 1);
    }
  }
  index_t cell(index_t i) const { return host_bin_begin_[static_cast<std::size_t>(i)]; }

  index_t P_, nc_, npieces_ = 0;
  std::vector<index_t> host_bin_begin_;  ///< the bins' first cells, also on the host (a pass's cell range)
  typename Layer::template buffer<index_t> bin_begin_, process_, row_of_, row_begin_, col_, piece_begin_, piece_at_, csc_row_;
  typename Layer::template buffer<double> nominal_, val_, csc_val_, partial_;
};

}  // namespace fitlib::detail
