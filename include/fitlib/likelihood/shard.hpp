// SPDX-License-Identifier: MIT
// Shard: the data-term partial sums of a contiguous bin range, evaluated on the host.
#pragma once

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "fitlib/core/error.hpp"
#include "fitlib/core/types.hpp"
#include "fitlib/detail/lanes.hpp"
#include "fitlib/device/partition.hpp"
#include "fitlib/device/serial.hpp"
#include "fitlib/likelihood/cell.hpp"
#include "fitlib/likelihood/interpolation.hpp"
#include "fitlib/likelihood/options.hpp"
#include "fitlib/model/model.hpp"

namespace fitlib {

namespace storage {
/// Templates stored as the dense matrix `[(bins·procs) × ncoef]`, one row per cell.
struct Dense {};
}  // namespace storage

/// What one pass over a shard computes, for a block of `nx` parameter columns `x` and optionally
/// `nv` directions `v` (one per column, or all at one point when `nx == 1`). Every output is
/// optional; outputs are overwritten with this shard's partial sums of the data term.
struct PartialRequest {
  ConstBlockView<double> x;   ///< `[nparams × nx]`
  ConstBlockView<double> v;   ///< `[nparams × nv]`, or empty
  double* nll = nullptr;      ///< `[nx]`, or null
  BlockView<double> grad;     ///< `[nparams × nx]`, or empty
  BlockView<double> hvp;      ///< `[nparams × nv]`, or empty
};

template <class Policy, class Storage = storage::Dense>
class Shard;

/// A host shard over dense templates. It reads the templates in place from the shared model (on
/// the host a copy would only cost memory), so the model must not change while the shard lives;
/// it owns its data and workspaces.
///
/// Every pass walks the bins once: for each bin it runs the forward products of all its cells
/// (`L = K_row · C` for all columns and directions), the per-bin data-term algebra, then the backward
/// products (`acc += K_rowᵀ · U`) while the bin's rows are still in cache, so the templates stream
/// from memory once per evaluation whatever is computed (DESIGN.md, "The numerical core").
template <class Policy>
  requires cpu::is_host_policy_v<Policy>
class Shard<Policy, storage::Dense> {
 public:
  using policy_type = Policy;

  Shard(std::shared_ptr<const Model> model, BinRange bins, Policy policy = {}, const LikelihoodOptions& opts = {})
      : model_(std::move(model)), policy_(policy), range_(bins), linear_poi_(opts.allow_negative_poi), data_term_(opts.data_term),
        hessian_block_rows_(opts.hessian_block_rows) {
    const Model& m = *model_;
    type_ = m.systematic_type;
    symmetric_ = m.symmetric;
    nprocs_ = m.nprocs();
    nsyst_ = m.nsyst();
    ncoef_ = m.ncoef();
    npoi_ = m.npoi();
    nparams_ = npoi_ + nsyst_;
    if (bins.begin < 0 || bins.end > m.nbins_full() || bins.begin > bins.end)
      throw usage_error("bin range [" + std::to_string(bins.begin) + ", " + std::to_string(bins.end) +
                        ") is outside the model's " + std::to_string(m.nbins_full()) + " bins");
    nominal_ = m.nominal.data() + bins.begin * nprocs_;
    logk_ = m.logk.data() + bins.begin * nprocs_ * ncoef_;
    ndata_ = std::max<index_t>(0, std::min(bins.end, m.nbins()) - bins.begin);
    const auto mine = [&](const std::vector<double>& v) {
      return std::span(v).subspan(static_cast<std::size_t>(std::min(bins.begin, m.nbins())), static_cast<std::size_t>(ndata_));
    };
    set_data(mine(m.data), mine(m.data_variance.empty() ? m.data : m.data_variance));
    poi_of_process_ = m.poi_of_process();
    for (index_t p = 0; p < nprocs_; ++p) {
      const index_t q = poi_of_process_[static_cast<std::size_t>(p)];
      // Additive shifts scale with the signal strength at the default point (§2.4, r⁰).
      r0_.push_back(q < 0 ? 1.0 : m.poi_default[static_cast<std::size_t>(q)]);
    }
  }

  BinRange bins() const { return range_; }
  index_t nparams() const { return nparams_; }

  /// Replaces the observed counts of this shard's unmasked bins (toys, Asimov, data replicas) and
  /// their variances (used by the χ² term only).
  void set_data(std::span<const double> counts, std::span<const double> variances) {
    if (static_cast<index_t>(counts.size()) != ndata_ || variances.size() != counts.size())
      throw usage_error("shard over bins [" + std::to_string(range_.begin) + ", " + std::to_string(range_.end) + ") needs " +
                        std::to_string(ndata_) + " observed counts and variances, got " + std::to_string(counts.size()) + " and " +
                        std::to_string(variances.size()));
    for (std::size_t i = 0; i < counts.size(); ++i) {
      const bool bad_count = !std::isfinite(counts[i]) || counts[i] < 0;
      const bool bad_variance = data_term_ == DataTerm::chisq && !(variances[i] > 0 && std::isfinite(variances[i]));
      if (bad_count || bad_variance)
        throw usage_error("global bin " + std::to_string(range_.begin + static_cast<index_t>(i)) + " has count " +
                          std::to_string(counts[i]) + " and variance " + std::to_string(variances[i]) +
                          "; counts must be finite and ≥ 0, and the χ² term needs positive variances");
    }
    data_.assign(counts.begin(), counts.end());
    aux_.resize(data_.size());
    for (std::size_t i = 0; i < data_.size(); ++i)
      aux_[i] = data_term_ == DataTerm::poisson ? (data_[i] > 0 ? std::log(data_[i]) : 0.0) : 1.0 / variances[i];
  }

  /// Data-term NLL, gradient and Hessian-vector products of this shard's bins (see PartialRequest).
  void partials(const PartialRequest& rq) {
    const index_t nx = rq.x.cols, nv = rq.v.empty() ? 0 : rq.v.cols;
    // The gradient's backward column u; an HVP needs it too, for g''·(Hᵀu), but only with an asymmetric tensor.
    const bool want_u = !rq.grad.empty() || (nv > 0 && !symmetric_);
    const index_t nu = want_u ? nx : 0, nf = nx + nv, nb = nu + nv;
    auto point_of = [&](index_t k) { return nx == 1 ? index_t{0} : k; };
    prepare_columns(rq.x, rq.v);

    std::fill_n(acc_.data(), ncoef_ * nb, 0.0);
    std::fill_n(poi_acc_.data(), npoi_ * nb, 0.0);
    if (rq.nll) std::fill_n(rq.nll, nx, 0.0);
    const index_t P = nprocs_;
    double* L = cell_L_.data();       // [P × nf]
    double* U = cell_U_.data();       // [P × nb]
    detail::CellYield* cy = cells_.data();  // [P × nx]

    // Prefetch distance: the bin about 128 KiB ahead (at least the next one).
    const index_t ahead = std::clamp<index_t>((index_t{1} << 17) / std::max<index_t>(1, 8 * P * ncoef_), 1, 64);
    for (index_t i = 0; i < ndata_; ++i) {
      const double n = data_[static_cast<std::size_t>(i)], aux = aux_[static_cast<std::size_t>(i)];
      // Forward: every column's and direction's L for the bin's cells.
      const double* rows = logk_ + i * P * ncoef_;
      // The rows `ahead` bins on are requested during the backward pass, or here when there is none.
      const double* next = i + ahead < ndata_ ? rows + ahead * P * ncoef_ : nullptr;
      detail::forward_rows(rows, ncoef_, P, coef_.data(), nf, ncoef_, L, nb == 0 ? next : nullptr);
      for (index_t j = 0; j < nx; ++j) {
        double nu_b = 0;
        for (index_t p = 0; p < P; ++p) {
          cy[p + j * P] = detail::cell_yield(type_, nominal_[i * P + p], L[p + j * P], strength(p, j), r0_[static_cast<std::size_t>(p)]);
          nu_b += cy[p + j * P].nu;
        }
        const auto t = detail::data_term(data_term_, nu_b, n, aux);
        if (rq.nll) rq.nll[j] += t.nll;
        w_[static_cast<std::size_t>(j)] = t.w;
        d2_[static_cast<std::size_t>(j)] = t.d2;
        if (!want_u) continue;
        for (index_t p = 0; p < P; ++p) {
          U[p + j * P] = t.w * cy[p + j * P].d_L;
          if (const index_t q = poi_of_process_[static_cast<std::size_t>(p)]; q >= 0) poi_acc_[q + j * npoi_] += t.w * cy[p + j * P].d_mu;
        }
      }
      for (index_t k = 0; k < nv; ++k) {
        const index_t j = point_of(k);
        const double w = w_[static_cast<std::size_t>(j)], d2 = d2_[static_cast<std::size_t>(j)];
        const double* vk = rq.v.col(k);
        double dnu_b = 0;
        for (index_t p = 0; p < P; ++p) {
          const index_t q = poi_of_process_[static_cast<std::size_t>(p)];
          const double vq = q >= 0 ? vk[q] : 0.0;
          dnu_b += cy[p + j * P].d_mu * vq + cy[p + j * P].d_L * L[p + (nx + k) * P];
        }
        for (index_t p = 0; p < P; ++p) {
          const auto& c = cy[p + j * P];
          const index_t q = poi_of_process_[static_cast<std::size_t>(p)];
          const double vq = q >= 0 ? vk[q] : 0.0, dL = L[p + (nx + k) * P];
          U[p + (nu + k) * P] = d2 * dnu_b * c.d_L + w * (c.d_muL * vq + c.d_LL * dL);
          if (q >= 0) poi_acc_[q + (nu + k) * npoi_] += d2 * dnu_b * c.d_mu + w * (c.d_mumu * vq + c.d_muL * dL);
        }
      }
      // Backward: acc += K_rowᵀ · U for every column while the bin's rows are in cache, and the
      // next bin's rows are on their way.
      detail::backward_rows(rows, ncoef_, P, U, nb, ncoef_, acc_.data(), next);
    }

    const index_t S = nsyst_;
    for (index_t j = 0; j < nx && !rq.grad.empty(); ++j) {
      double* g = rq.grad.col(j);
      const double* a = acc_.data() + j * ncoef_;
      for (index_t q = 0; q < npoi_; ++q) g[q] = poi_acc_[q + j * npoi_];
      for (index_t s = 0; s < S; ++s) g[npoi_ + s] = symmetric_ ? a[s] : a[s] + dg_[s + j * S] * a[S + s];
    }
    for (index_t k = 0; k < nv && !rq.hvp.empty(); ++k) {
      const index_t j = point_of(k);
      double* h = rq.hvp.col(k);
      const double* vk = rq.v.col(k);
      const double* a = acc_.data() + (nu + k) * ncoef_;
      const double* au = acc_.data() + j * ncoef_;
      for (index_t q = 0; q < npoi_; ++q) h[q] = poi_acc_[q + (nu + k) * npoi_];
      for (index_t s = 0; s < S; ++s)
        h[npoi_ + s] = symmetric_ ? a[s] : a[s] + dg_[s + j * S] * a[S + s] + d2g_[s + j * S] * vk[npoi_ + s] * au[S + s];
    }
  }

  /// Data-term dense Hessian of column `j` of `x` into `hess` (`[nparams × nparams]`), as GEMMs
  /// over blocks of bins: `Hθθ = Σ_cells E_cᵀ (w ν_LL) E_c + Σ_bins J_bᵀ (n/ν²) J_b` with the
  /// effective template rows `E = K + H·diag(g')`, the bin Jacobians `J_b`, the POI cross terms and
  /// the interpolation's diagonal term `g''·(Hᵀ u)` (rabbit-likelihood-and-format.md §3.7).
  void hessian(ConstBlockView<double> x, index_t j, BlockView<double> hess) {
    const ConstBlockView<double> xj = x.block_cols(j, 1);
    prepare_columns(xj, {});
    const index_t P = nprocs_, S = nsyst_, n = nparams_;
    const index_t bins_per_block = std::max<index_t>(1, hessian_block_rows_ / P);
    const index_t max_rows = bins_per_block * (P + 1);
    if (hM_.rows() < max_rows || hM_.cols() != n) {
      hM_.resize(max_rows, n);
      hDM_.resize(max_rows, n);
      hY_.resize(max_rows, std::max<index_t>(npoi_, 1));
    }
    Eigen::Map<Eigen::MatrixXd, 0, Eigen::OuterStride<>> H(hess.data, n, n, Eigen::OuterStride<>(hess.ld));
    H.setZero();
    std::vector<double> diag_acc(static_cast<std::size_t>(symmetric_ ? 0 : S), 0.0);
    std::vector<double> weight(static_cast<std::size_t>(max_rows));
    const bool log_normal = type_ == SystematicType::log_normal;

    for (index_t i0 = 0; i0 < ndata_; i0 += bins_per_block) {
      const index_t nbk = std::min(bins_per_block, ndata_ - i0), ncell = nbk * P;
      // Bin rows first, then cell rows: additive models have no cell-row (∂²ν/∂L²) term.
      auto M = hM_.topRows(nbk + ncell);
      M.setZero();
      auto Y = hY_.topRows(nbk + ncell);
      if (npoi_ > 0) Y.setZero();
      for (index_t ib = 0; ib < nbk; ++ib) {
        const index_t i = i0 + ib;
        double nu_b = 0;
        for (index_t p = 0; p < P; ++p) {
          const double* row = logk_ + (i * P + p) * ncoef_;
          cells_[static_cast<std::size_t>(p)] =
              detail::cell_yield(type_, nominal_[i * P + p], detail::dot(row, coef_.data(), ncoef_), strength(p, 0), r0_[static_cast<std::size_t>(p)]);
          nu_b += cells_[static_cast<std::size_t>(p)].nu;
        }
        const auto t = detail::data_term(data_term_, nu_b, data_[static_cast<std::size_t>(i)], aux_[static_cast<std::size_t>(i)]);
        weight[static_cast<std::size_t>(ib)] = t.d2;
        for (index_t p = 0; p < P; ++p) {
          const auto& c = cells_[static_cast<std::size_t>(p)];
          const double* row = logk_ + (i * P + p) * ncoef_;
          const index_t r = nbk + ib * P + p;
          double* e = M.row(r).data() + npoi_;
          for (index_t s = 0; s < S; ++s) e[s] = symmetric_ ? row[s] : row[s] + dg_[s] * row[S + s];
          detail::axpy(c.d_L, e, M.row(ib).data() + npoi_, S);  // J_b,θ = Σ_p ∂ν/∂L · E_c
          weight[static_cast<std::size_t>(r)] = t.w * c.d_LL;
          if (const index_t q = poi_of_process_[static_cast<std::size_t>(p)]; q >= 0) {
            M(ib, q) += c.d_mu;
            Y(r, q) = t.w * c.d_muL;
            H(q, q) += t.w * c.d_mumu;
          }
          if (!symmetric_) detail::axpy(t.w * c.d_L, row + S, diag_acc.data(), S);
        }
      }
      const index_t rows = log_normal ? nbk + ncell : nbk;
      auto Mr = M.topRows(rows);
      auto DM = hDM_.topRows(rows);
      DM.noalias() = Eigen::Map<const Eigen::VectorXd>(weight.data(), rows).asDiagonal() * Mr;
      H.template triangularView<Eigen::Lower>() += Mr.transpose() * DM;
      if (npoi_ > 0 && log_normal) H.leftCols(npoi_).noalias() += M.transpose() * Y.leftCols(npoi_);
    }
    for (index_t s = 0; s < S && !symmetric_; ++s) H(npoi_ + s, npoi_ + s) += d2g_[s] * diag_acc[static_cast<std::size_t>(s)];
    for (index_t c = 1; c < n; ++c)
      for (index_t r = 0; r < c; ++r) H(r, c) = H(c, r);
  }

  /// Expected yields ν[b, p] of every bin of the shard (masked included) at column `j` of `x`,
  /// into `nu` (`[nbins × nprocs]` row-major).
  void yields(ConstBlockView<double> x, index_t j, std::span<double> nu) {
    prepare_columns(x.block_cols(j, 1), {});
    const index_t P = nprocs_;
    if (static_cast<index_t>(nu.size()) != range_.size() * P)
      throw usage_error("yields of bins [" + std::to_string(range_.begin) + ", " + std::to_string(range_.end) +
                        ") need an output of " + std::to_string(range_.size() * P) + " entries");
    for (index_t c = 0; c < range_.size() * P; ++c) {
      const double L = detail::dot(logk_ + c * ncoef_, coef_.data(), ncoef_);
      nu[static_cast<std::size_t>(c)] = detail::cell_yield(type_, nominal_[c], L, strength(c % P, 0), r0_[static_cast<std::size_t>(c % P)]).nu;
    }
  }

 private:
  detail::Strength strength(index_t p, index_t j) const {
    const index_t q = poi_of_process_[static_cast<std::size_t>(p)];
    return q < 0 ? detail::Strength{} : strengths_[static_cast<std::size_t>(q + j * npoi_)];
  }

  /// Fills the coefficient matrix C `[ncoef × (nx + nv)]`: `[θ; g(θ)]` for each point and
  /// `[v_θ; g'(θ)·v_θ]` for each direction, the interpolation derivatives and POI strengths,
  /// and sizes the workspaces (they only grow).
  void prepare_columns(ConstBlockView<double> x, ConstBlockView<double> v) {
    const index_t nx = x.cols, nv = v.empty() ? 0 : v.cols, S = nsyst_, nf = nx + nv;
    if (x.rows != nparams_ || (nv > 0 && (v.rows != nparams_ || (nv != nx && nx != 1))))
      throw usage_error("parameter block has " + std::to_string(x.rows) + " rows (model has " + std::to_string(nparams_) +
                        " parameters) or its directions do not match its columns");
    grow(coef_, ncoef_ * nf);
    grow(acc_, ncoef_ * (nx + nv));
    grow(poi_acc_, npoi_ * (nx + nv));
    grow(dg_, S * nx);
    grow(d2g_, S * nx);
    grow(w_, nx);
    grow(d2_, nx);
    grow(strengths_, npoi_ * nx);
    grow(cell_L_, nprocs_ * nf);
    grow(cell_U_, nprocs_ * (nx + nv));
    grow(cells_, nprocs_ * nx);
    for (index_t j = 0; j < nx; ++j) {
      const double* xj = x.col(j);
      double* c = coef_.data() + j * ncoef_;
      for (index_t q = 0; q < npoi_; ++q) strengths_[static_cast<std::size_t>(q + j * npoi_)] = detail::poi_strength(xj[q], linear_poi_);
      for (index_t s = 0; s < S; ++s) {
        const double theta = xj[npoi_ + s];
        c[s] = theta;
        if (symmetric_) continue;
        const auto a = asymmetric_interpolation(theta);
        c[S + s] = a.g;
        dg_[static_cast<std::size_t>(s + j * S)] = a.dg;
        d2g_[static_cast<std::size_t>(s + j * S)] = a.d2g;
      }
    }
    for (index_t k = 0; k < nv; ++k) {
      const double* vk = v.col(k);
      const index_t j = nx == 1 ? 0 : k;
      double* c = coef_.data() + (nx + k) * ncoef_;
      for (index_t s = 0; s < S; ++s) {
        c[s] = vk[npoi_ + s];
        if (!symmetric_) c[S + s] = dg_[static_cast<std::size_t>(s + j * S)] * vk[npoi_ + s];
      }
    }
  }

  template <class T>
  static void grow(std::vector<T>& v, index_t n) {
    if (static_cast<index_t>(v.size()) < n) v.resize(static_cast<std::size_t>(n));
  }

  std::shared_ptr<const Model> model_;
  Policy policy_;
  BinRange range_;
  bool linear_poi_;
  DataTerm data_term_;
  index_t hessian_block_rows_;
  SystematicType type_;
  bool symmetric_;
  index_t nprocs_, nsyst_, ncoef_, npoi_, nparams_, ndata_;
  const double* nominal_;
  const double* logk_;
  std::vector<double> data_, aux_, r0_;  // aux: ln n (Poisson) or 1/σ² (χ²) per bin
  std::vector<index_t> poi_of_process_;
  // Workspaces, sized on first use and reused.
  std::vector<double> coef_, acc_, poi_acc_, dg_, d2g_, w_, d2_, cell_L_, cell_U_;
  std::vector<detail::Strength> strengths_;
  std::vector<detail::CellYield> cells_;
  Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> hM_, hDM_, hY_;
};

}  // namespace fitlib
