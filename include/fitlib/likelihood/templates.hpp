// SPDX-License-Identifier: MIT
// A shard's view of the template tensor, dense or sparse: the cells of each bin and their logk rows.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "fitlib/core/error.hpp"
#include "fitlib/core/types.hpp"
#include "fitlib/detail/lanes.hpp"
#include "fitlib/likelihood/cells.hpp"
#include "fitlib/device/partition.hpp"
#include "fitlib/model/dense_templates.hpp"
#include "fitlib/model/model.hpp"
#include "fitlib/model/sparse_templates.hpp"

namespace fitlib {

/// How a shard's templates are stored: each tag names the tensor type of `Model::templates` its shards
/// read in place, so the storage is decided once, by the model, and a shard never copies the tensor.
namespace storage {
/// Templates stored as the dense matrix `[(bins·procs) × ncoef]`, one row per cell.
struct Dense {
  using tensor = DenseTemplates;
};
/// Templates stored as rabbit's sparse tensors (§1.3): only the non-zero cells, their logk rows in CSR.
struct Sparse {
  using tensor = SparseTemplates;
};

/// `f(storage::Dense{})` or `f(storage::Sparse{})`, as `model` stores its templates: where a program
/// picks its likelihood's type from the file it read, e.g.
/// `storage::visit(*model, [&]<class S>(S) { Likelihood<Shard<cpu::Threads, S>> nll(model); return fit(nll, tr); })`.
template <class F>
decltype(auto) visit(const Model& model, F&& f) {
  if (model.sparse()) return std::forward<F>(f)(Sparse{});
  return std::forward<F>(f)(Dense{});
}
}  // namespace storage

namespace detail {

/// The model's templates as `Storage` stores them; throws, naming the remedy, when the model stores
/// them the other way.
template <class Storage>
const typename Storage::tensor& tensor_of(const Model& m) {
  if (const auto* t = std::get_if<typename Storage::tensor>(&m.templates)) return *t;
  if constexpr (std::is_same_v<Storage, storage::Dense>)
    throw usage_error("the model stores sparse templates; evaluate it with storage::Sparse shards (SparseSerialLikelihood), "
                      "or let storage::visit pick the shards from the model");
  else
    throw usage_error("the model stores dense templates; evaluate it with storage::Dense shards (SerialLikelihood), or store a "
                      "copy sparsely (Model::make_sparse) first; storage::visit picks the shards from the model");
}

/// The row of the model's systematic tensor where `bins` begin (Model::held_bins); throws unless
/// the model holds them all.
inline index_t held_row(const Model& m, BinRange bins) {
  const BinRange held = m.held_bins();
  if (bins.begin < held.begin || bins.end > held.end)
    throw usage_error("a shard over bins [" + std::to_string(bins.begin) + ", " + std::to_string(bins.end) + ") needs their templates, but the model holds bins [" +
                      std::to_string(held.begin) + ", " + std::to_string(held.end) + ") only (read for one MPI rank); shard it within those bins");
  return bins.begin - held.begin;
}

/// A template slice's cells grouped by process, and the systematics that act on each process: those
/// with a non-zero (or NaN) logk, either part, in any of the process's cells. A cell is numbered by
/// its place in the slice (bins in order, each bin's cells in order): first[i] + c.
struct CellsByProcess {
  std::vector<index_t> first;              // per bin, its first cell's number; then the number of cells
  std::vector<index_t> syst_begin, systs;  // process p's systematics, ascending: systs[syst_begin[p], syst_begin[p + 1])
  std::vector<index_t> cell_begin, bin, cell;  // process p's cells (bin i, cell c), in bin order: [cell_begin[p], cell_begin[p + 1])

  index_t ncells() const { return first.back(); }
  std::span<const index_t> systematics(index_t p) const {
    return {systs.data() + syst_begin[static_cast<std::size_t>(p)], systs.data() + syst_begin[static_cast<std::size_t>(p + 1)]};
  }

  /// One pass over the slice's `nbins` bins (P processes, S systematics).
  template <class Slice>
  static CellsByProcess find(const Slice& tpl, index_t nbins, index_t P, index_t S) {
    CellsByProcess out;
    std::vector<std::uint8_t> used(static_cast<std::size_t>(P * S), 0);
    out.first.assign(1, 0);
    out.cell_begin.assign(static_cast<std::size_t>(P + 1), 0);
    for (index_t i = 0; i < nbins; ++i) {
      const index_t nc = tpl.cells(i);
      for (index_t c = 0; c < nc; ++c) {
        const index_t p = tpl.process(i, c);
        tpl.mark_support(i, c, used.data() + p * S);
        ++out.cell_begin[static_cast<std::size_t>(p + 1)];
      }
      out.first.push_back(out.first.back() + nc);
    }
    out.syst_begin.assign(1, 0);
    for (index_t p = 0; p < P; ++p) {
      for (index_t s = 0; s < S; ++s)
        if (used[static_cast<std::size_t>(p * S + s)]) out.systs.push_back(s);
      out.syst_begin.push_back(static_cast<index_t>(out.systs.size()));
      out.cell_begin[static_cast<std::size_t>(p + 1)] += out.cell_begin[static_cast<std::size_t>(p)];
    }
    out.bin.resize(static_cast<std::size_t>(out.ncells()));
    out.cell.resize(out.bin.size());
    std::vector<index_t> next(out.cell_begin.begin(), out.cell_begin.end() - 1);
    for (index_t i = 0; i < nbins; ++i)
      for (index_t c = 0; c < tpl.cells(i); ++c) {
        const auto k = static_cast<std::size_t>(next[static_cast<std::size_t>(tpl.process(i, c))]++);
        out.bin[k] = i;
        out.cell[k] = c;
      }
    return out;
  }
};

/// What a shard's passes need from the templates of its bins, for local bin i and its cell c
/// (c < cells(i) ≤ nprocs): the cell's process and nominal yield, the forward products
/// L[c + j·P] = row_c · C[:, j] for nf columns, the backward products acc[:, j] += Σ_c U[c + j·P]·row_c,
/// single rows for the dense Hessian and the yields, and which systematics a row has (mark_support).
template <class Storage>
class TemplateSlice;

/// Dense rows read in place from the model; every process is a cell.
template <>
class TemplateSlice<storage::Dense> {
 public:
  TemplateSlice(const Model& m, BinRange bins)
      : P_(m.nprocs()), ncoef_(m.ncoef()), S_(m.nsyst()), nominal_(tensor_of<storage::Dense>(m).nominal.data() + bins.begin * P_),
        logk_(tensor_of<storage::Dense>(m).logk.data() + held_row(m, bins) * P_ * ncoef_), nbins_(bins.size()) {
    // Prefetch distance: the bin about 128 KiB ahead (at least the next one).
    ahead_ = std::clamp<index_t>((index_t{1} << 17) / std::max<index_t>(1, 8 * P_ * ncoef_), 1, 64);
  }

  index_t cells(index_t) const { return P_; }
  index_t process(index_t, index_t c) const { return c; }
  double nominal(index_t i, index_t c) const { return nominal_[i * P_ + c]; }
  /// The cells as the per-bin algebra reads them (bin_algebra.hpp).
  DenseCells cells_view() const { return {nominal_, P_}; }

  /// `prefetch`: request the bin `ahead` bins on meanwhile (when no backward pass follows).
  void forward(index_t i, const double* C, index_t nf, double* L, bool prefetch) const {
    detail::forward_rows(row(i, 0), ncoef_, P_, C, nf, ncoef_, L, prefetch ? next(i) : nullptr);
  }
  void backward(index_t i, const double* U, index_t nb, double* acc) const {
    detail::backward_rows(row(i, 0), ncoef_, P_, U, nb, ncoef_, acc, next(i));
  }
  double dot(index_t i, index_t c, const double* coef) const { return detail::dot(row(i, c), coef, ncoef_); }
  /// The effective row E = K + H·diag(dg) over the S systematics (dg null: symmetric, E = K).
  void effective_row(index_t i, index_t c, const double* dg, double* e) const {
    const double* r = row(i, c);
    for (index_t s = 0; s < S_; ++s) e[s] = dg ? r[s] + dg[s] * r[S_ + s] : r[s];
  }
  /// out += alpha·H_c (the asymmetric half-difference part of the row).
  void add_half(index_t i, index_t c, double alpha, double* out) const { detail::axpy(alpha, row(i, c) + S_, out, S_); }
  /// Sets used[s] for every systematic s with a non-zero (or NaN) entry in either part of the row.
  void mark_support(index_t i, index_t c, std::uint8_t* used) const {
    const double* r = row(i, c);
    for (index_t k = 0; k < ncoef_; ++k)
      if (r[k] != 0) used[k < S_ ? k : k - S_] = 1;
  }

 private:
  const double* row(index_t i, index_t c) const { return logk_ + (i * P_ + c) * ncoef_; }
  const double* next(index_t i) const { return i + ahead_ < nbins_ ? row(i + ahead_, 0) : nullptr; }

  index_t P_, ncoef_, S_;
  const double* nominal_;
  const double* logk_;
  index_t nbins_, ahead_ = 1;
};

/// Sparse rows (CSR per non-zero cell), evaluated without densifying.
template <>
class TemplateSlice<storage::Sparse> {
 public:
  TemplateSlice(const Model& m, BinRange bins)
      : ncoef_(m.ncoef()), S_(m.nsyst()), nbins_(bins.size()), t_(&tensor_of<storage::Sparse>(m)), first_(bins.begin) {
    held_row(m, bins);  // throws unless the model holds the rows of these bins
  }

  index_t cells(index_t i) const { return begin(i + 1) - begin(i); }
  index_t process(index_t i, index_t c) const { return t_->cell_process[static_cast<std::size_t>(begin(i) + c)]; }
  double nominal(index_t i, index_t c) const { return t_->cell_nominal[static_cast<std::size_t>(begin(i) + c)]; }
  /// The cells as the per-bin algebra reads them (bin_algebra.hpp).
  SparseCells cells_view() const { return {t_->bin_begin.data() + first_, t_->cell_process.data(), t_->cell_nominal.data()}; }

  void forward(index_t i, const double* C, index_t nf, double* L, bool) const {
    const index_t P = stride();
    for (index_t c = 0, cell = begin(i); cell < begin(i + 1); ++c, ++cell) {
      const index_t k0 = t_->row_begin[static_cast<std::size_t>(cell)], k1 = t_->row_begin[static_cast<std::size_t>(cell + 1)];
      for (index_t j = 0; j < nf; ++j) {
        const double* cj = C + j * ncoef_;
        double s = 0;
        for (index_t k = k0; k < k1; ++k) s = fmadd(t_->val[static_cast<std::size_t>(k)], cj[t_->col[static_cast<std::size_t>(k)]], s);
        L[c + j * P] = s;
      }
    }
  }
  void backward(index_t i, const double* U, index_t nb, double* acc) const {
    const index_t P = stride();
    for (index_t c = 0, cell = begin(i); cell < begin(i + 1); ++c, ++cell) {
      const index_t k0 = t_->row_begin[static_cast<std::size_t>(cell)], k1 = t_->row_begin[static_cast<std::size_t>(cell + 1)];
      for (index_t j = 0; j < nb; ++j) {
        const double u = U[c + j * P];
        double* a = acc + j * ncoef_;
        for (index_t k = k0; k < k1; ++k) {
          double& dst = a[t_->col[static_cast<std::size_t>(k)]];
          dst = fmadd(u, t_->val[static_cast<std::size_t>(k)], dst);
        }
      }
    }
  }
  double dot(index_t i, index_t c, const double* coef) const {
    double s = 0;
    for_each(i, c, [&](index_t col, double v) { s = fmadd(v, coef[col], s); });
    return s;
  }
  void effective_row(index_t i, index_t c, const double* dg, double* e) const {
    std::fill_n(e, S_, 0.0);
    for_each(i, c, [&](index_t col, double v) {
      if (col < S_) e[col] += v;
      else e[col - S_] += dg[col - S_] * v;
    });
  }
  void add_half(index_t i, index_t c, double alpha, double* out) const {
    for_each(i, c, [&](index_t col, double v) {
      if (col >= S_) out[col - S_] += alpha * v;
    });
  }
  void mark_support(index_t i, index_t c, std::uint8_t* used) const {
    for_each(i, c, [&](index_t col, double v) {
      if (v != 0) used[col < S_ ? col : col - S_] = 1;
    });
  }
  /// Bytes streamed by one pass over the bins: values, column indices, row offsets and cells.
  std::size_t bytes() const {
    const index_t c0 = begin(0), c1 = begin(nbins_);
    const index_t nnz = t_->row_begin[static_cast<std::size_t>(c1)] - t_->row_begin[static_cast<std::size_t>(c0)];
    return static_cast<std::size_t>(nnz) * (sizeof(double) + sizeof(index_t)) +
           static_cast<std::size_t>(c1 - c0) * (2 * sizeof(index_t) + sizeof(double));
  }

  /// The stride of the per-cell arrays L and U: the number of processes.
  index_t stride() const { return t_->nprocs; }

 private:
  index_t begin(index_t i) const { return t_->bin_begin[static_cast<std::size_t>(first_ + i)]; }
  template <class F>
  void for_each(index_t i, index_t c, F&& f) const {
    const index_t cell = begin(i) + c;
    for (index_t k = t_->row_begin[static_cast<std::size_t>(cell)]; k < t_->row_begin[static_cast<std::size_t>(cell + 1)]; ++k)
      f(t_->col[static_cast<std::size_t>(k)], t_->val[static_cast<std::size_t>(k)]);
  }

  index_t ncoef_, S_, nbins_;
  const SparseTemplates* t_;
  index_t first_;  ///< the slice's first bin in t_
};

}  // namespace detail
}  // namespace fitlib
