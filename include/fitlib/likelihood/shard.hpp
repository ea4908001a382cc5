// SPDX-License-Identifier: MIT
// Shard: the data-term partial sums of a contiguous bin range, evaluated on the host.
#pragma once

#include <Eigen/Core>
#include <algorithm>
#include <bit>
#include <concepts>
#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "fitlib/core/concepts.hpp"
#include "fitlib/core/error.hpp"
#include "fitlib/core/types.hpp"
#include "fitlib/detail/lanes.hpp"
#include "fitlib/device/partition.hpp"
#include "fitlib/device/policy.hpp"
#include "fitlib/likelihood/bbstat.hpp"
#include "fitlib/likelihood/bin_algebra.hpp"
#include "fitlib/likelihood/columns.hpp"
#include "fitlib/likelihood/forward_cache.hpp"
#include "fitlib/likelihood/cell.hpp"
#include "fitlib/likelihood/interpolation.hpp"
#include "fitlib/likelihood/options.hpp"
#include "fitlib/likelihood/partial_request.hpp"
#include "fitlib/likelihood/shard_identity.hpp"
#include "fitlib/likelihood/slot_inputs.hpp"
#include "fitlib/likelihood/templates.hpp"
#include "fitlib/model/model.hpp"

namespace fitlib {

template <class Policy, class Storage = storage::Dense>
class Shard;

/// A host shard over dense or sparse templates (templates.hpp). It reads the templates in place
/// from the shared model (on the host a copy would only cost memory), so the model must not change
/// while the shard lives; it owns its data and workspaces. Per-cell arrays are indexed by the cell
/// c of the bin (every process when dense, the non-zero ones when sparse), per-process ones by p.
///
/// Every pass walks the bins once: for each bin it runs the forward products of all its cells
/// (`L = K_row · C` for all columns and directions), the per-bin data-term algebra, then the backward
/// products (`acc += K_rowᵀ · U`) while the bin's rows are still in cache, so the templates stream
/// from memory once per evaluation whatever is computed (DESIGN.md, "The numerical core").
template <class Policy, class Storage>
  requires std::same_as<backend_of_t<Policy>, backend::host>
class Shard<Policy, Storage> : public detail::ShardIdentity<typename Policy::shard_resource> {
  using Identity = detail::ShardIdentity<typename Policy::shard_resource>;
  using Identity::model_, Identity::range_, Identity::ndata_;

 public:
  using policy_type = Policy;
  using resource_type = typename Policy::shard_resource;
  using storage_type = Storage;

  /// Shard `index` of its likelihood over `bins`, on `resource` (one of partition(policy, k)'s; a
  /// host shard needs nothing from it).
  Shard(std::shared_ptr<const Model> model, BinRange bins, resource_type resource = {}, const LikelihoodOptions& opts = {}, index_t index = 0)
      : Identity(std::move(model), bins, resource, index), data_term_(opts.data_term), hessian_block_rows_(opts.hessian_block_rows),
        single_precision_gauss_newton_(opts.single_precision_gauss_newton),
        tpl_(*model_, bins), cols_(*model_, opts.allow_negative_poi), nprocs_(model_->nprocs()),
        cache_(nprocs_, cols_.ncoef(), cols_.nparams(), bins.size(), cols_.symmetric()) {
    const Model& m = *model_;
    set_data(this->model_counts(), this->model_variances());
    bb_ = BinByBinStats::build(m, {bins.begin, bins.begin + ndata_}, opts.bin_by_bin, opts.data_term);
    poi_of_process_ = m.poi_of_process();
    r0_ = detail::default_strengths(m);
  }

  index_t nparams() const { return cols_.nparams(); }

  /// Replaces the observed counts of this shard's unmasked bins (toys, Asimov, data replicas) and
  /// their variances (used by the χ² term only): the inputs of slot 0, which every evaluation uses
  /// unless it names other slots.
  void set_data(std::span<const double> counts, std::span<const double> variances) { set_slot(0, counts, variances, {}); }

  /// The inputs of data slot `slot` (slot 0 is set_data's; replicas of a batch use 1, 2, …): the
  /// observed counts and variances of the shard's data bins and, optionally, which of them enter
  /// the data term (`bins[i] == 0` leaves bin i out; empty: all). Slots grow as needed;
  /// `PartialRequest::slots` picks one per column.
  void set_slot(index_t slot, std::span<const double> counts, std::span<const double> variances, std::span<const std::uint8_t> bins) {
    std::vector<double> aux = detail::slot_aux(range_, ndata_, data_term_, counts, variances, bins, slot);
    if (static_cast<index_t>(slots_.size()) <= slot) slots_.resize(static_cast<std::size_t>(slot + 1));
    DataSlot& d = slots_[static_cast<std::size_t>(slot)];
    d.n.assign(counts.begin(), counts.end());
    d.aux = std::move(aux);
    d.bins.assign(bins.begin(), bins.end());
    d.set = true;
    cache_.invalidate();
  }

  /// Drops every data slot but slot 0.
  void clear_slots() {
    slots_.resize(1);
    cache_.invalidate();
  }

  /// Data-term NLL, gradient and Hessian-vector products of this shard's bins (see PartialRequest).
  /// The host shard computes them here; fence() has nothing left to wait for.
  void partials(const PartialRequest& rq) {
    const index_t nx = rq.x.cols, nv = rq.v.empty() ? 0 : rq.v.cols;
    // Observables are the coupled form with exact templates: ∂F/∂m = y, curvature z through u₁ = 1.
    const bool observables = rq.observables.size() > 0, coupled = observables || !rq.coupled_y.empty();
    const BinRange bins = observables ? rq.observables : BinRange{0, ndata_};
    const index_t nf = nx + nv;
    prepare_columns(rq.x, rq.v);
    bind_slots(rq.slots, nx);
    // Points whose products L = K·x the previous data pass computed are not recomputed: an HVP at
    // the iterate needs only its direction's forward product (the cache holds them bitwise).
    const bool cached = !observables && !coupled;
    const detail::ForwardCache::Plan plan = cached ? cache_.plan(rq.x, nv, rq.slots, cols_.coef()) : detail::ForwardCache::Plan{cols_.coef(), nf, false, false};
    // The gradient's backward column u; an HVP needs it too, for g''·(Hᵀu), but only with an
    // asymmetric tensor, and not when the points' Kᵀu are cached from their gradient.
    const bool want_u = !rq.grad.empty() || (nv > 0 && !cols_.symmetric() && !plan.cached_u);
    const index_t nu = want_u ? nx : 0, nb = nu + nv;
    detail::BinPass<Cells> pass = bin_pass(observables ? exact_ : bb_, nx, nv, rq.v);
    pass.nu = nu;
    pass.coupled = coupled;
    pass.coupled_y = rq.coupled_y;
    pass.coupled_z = rq.coupled_z;

    std::fill_n(acc_.data(), ncoef() * nb, 0.0);
    std::fill_n(poi_acc_.data(), npoi() * nb, 0.0);
    if (rq.nll) std::fill_n(rq.nll, nx, 0.0);
    const index_t P = nprocs_;
    double* L = cell_L_.data();  // [P × nf]
    double* U = cell_U_.data();  // [P × nb]
    double* Lf = plan.gathered ? cache_.gathered() : L;
    const detail::BinScratch scratch = this->scratch();

    for (index_t i = bins.begin; i < bins.end; ++i) {
      // Forward: every column's and direction's L for the bin's cells. The rows of later bins are
      // requested during the backward pass, or here when there is none.
      tpl_.forward(i, plan.coef, plan.columns, Lf, nb == 0);
      if (cached) cache_.exchange(i, nx, nv, Lf, L);
      detail::data_bin(pass, i, i - bins.begin, L, P, U, P, poi_acc_.data(), rq.nll, scratch);
      // Backward: acc += K_rowᵀ · U for every column while the bin's rows are in cache, and the
      // next bins' rows are on their way.
      tpl_.backward(i, U, nb, acc_.data());
    }

    cols_.write_partials(acc_.data(), poi_acc_.data(), rq.v, nx, nu, rq.grad, rq.hvp, rq.accumulate,
                         [&](index_t j) { return plan.cached_u ? cache_.u_column(j) : acc_.data() + j * ncoef(); });
    if (cached) cache_.keep(nx, nv, want_u, plan.cached_u, acc_.data());  // last: it replaces what write_partials read
  }

  /// Waits for the passes launched so far: nothing to wait for on the host.
  void fence() {}

  /// β̂ of the shard's data bins at column 0 of `x`: `[ndata × per_bin]` row-major into `beta`
  /// (per_bin = 1 in lite mode, nprocs in full mode; β₀ where β is fixed). For the covariance term
  /// `coupled_y` carries y per data bin (see PartialRequest).
  void bin_by_bin_parameters(ConstBlockView<double> x, std::span<double> beta, ConstBlockView<double> coupled_y = {}) {
    const index_t per = bb_.per_bin();
    if (static_cast<index_t>(beta.size()) != ndata_ * per)
      throw usage_error("bin_by_bin_parameters needs " + std::to_string(ndata_ * per) + " entries for this shard");
    prepare_columns(x.block_cols(0, 1), {});
    bind_slots({}, 1);
    detail::BinPass<Cells> pass = bin_pass(bb_, 1, 0);
    pass.coupled = !coupled_y.empty();
    pass.coupled_y = coupled_y;
    double* L = cell_L_.data();
    for (index_t i = 0; i < ndata_; ++i) {
      tpl_.forward(i, cols_.coef(), 1, L, true);
      detail::beta_bin(pass, i, L, beta.data() + i * per, scratch());
    }
  }

  /// The bin-by-bin part of the global impacts (rabbit-likelihood-and-format.md §5.2): for each
  /// direction v_k (a column of the covariance), Σ over the shard's β entries of L_β''·(dβ̂/dx·v_k)²,
  /// added to `var[k]` (bbstat.hpp, beta_response_variance). Separable data terms.
  void bin_by_bin_variance(ConstBlockView<double> x, ConstBlockView<double> v, std::span<double> var) {
    const index_t P = nprocs_, nv = v.cols;
    if (!bb_.enabled) return;
    prepare_columns(x.block_cols(0, 1), v);
    bind_slots({}, 1);
    const detail::BinPass<Cells> pass = bin_pass(bb_, 1, nv, v);
    double* L = cell_L_.data();
    std::vector<double> beta(static_cast<std::size_t>(P)), m(static_cast<std::size_t>(P)), dm(static_cast<std::size_t>(P)),
        work(static_cast<std::size_t>(3 * P));
    for (index_t i = 0; i < ndata_; ++i) {
      tpl_.forward(i, cols_.coef(), 1 + nv, L, true);
      detail::variance_bin(pass, i, L, P, var.data(), beta.data(), m.data(), dm.data(), work.data(), scratch());
    }
  }

  /// The derivatives of the local bins `r`' yields (any bins, masked included) along every parameter at x, what a
  /// postfit histogram propagates: one row per bin for its summed yield, or per bin and process (`rows`), in `J`
  /// (`[rows × nparams]` row-major), built from the cells' effective template rows as the Hessian's bin rows are (no
  /// product with a block of directions), with the yields (`o`) and β's own variance (`bvar`). With `profiled` the
  /// data bins' yields carry β̂(x) and J its response (bin_algebra.hpp, yield_weights, process_weights); otherwise β is
  /// held at β₀.
  void jacobian(ConstBlockView<double> x, BinRange r, bool profiled, JacobianRows rows, std::span<double> o, std::span<double> J,
                std::span<double> bvar) {
    const index_t P = nprocs_, S = nsyst(), npoi = this->npoi(), n = nparams();
    const bool per_process = rows == JacobianRows::processes;
    prepare_columns(x.block_cols(0, 1), {});
    bind_slots({}, 1);
    const detail::BinPass<Cells> pass = bin_pass(bb_, 1, 0);
    const double* dg = cols_.symmetric() ? nullptr : cols_.dg();
    std::vector<double> beta(static_cast<std::size_t>(P)), w(static_cast<std::size_t>(P)), u(static_cast<std::size_t>(P)),
        v(static_cast<std::size_t>(P)), e(static_cast<std::size_t>(S)), jv(static_cast<std::size_t>(per_process ? n : 0));
    for (index_t i = r.begin; i < r.end; ++i) {
      const index_t nc = tpl_.cells(i), row = (i - r.begin) * (per_process ? P : 1);
      for (index_t c = 0; c < nc; ++c) cell_L_[static_cast<std::size_t>(c)] = tpl_.dot(i, c, cols_.coef());
      detail::cell_yields(pass, i, 0, cell_L_.data(), cells_.data(), m_.data());
      const bool prof = profiled && i < ndata_;
      if (per_process)  // ∂ν̃_p/∂x = d_p·∂m_p/∂x + u_p·Σ_q v_q·∂m_q/∂x
        detail::process_weights(pass, i, prof, beta.data(), &o[static_cast<std::size_t>(row)], w.data(), u.data(), v.data(),
                                &bvar[static_cast<std::size_t>(row)], scratch());
      else
        o[static_cast<std::size_t>(row)] = detail::yield_weights(pass, i, prof, beta.data(), w.data(), &bvar[static_cast<std::size_t>(row)], scratch());
      double* j = J.data() + row * n;
      std::fill_n(j, (per_process ? P : 1) * n, 0.0);
      std::fill(jv.begin(), jv.end(), 0.0);
      for (index_t cc = 0; cc < nc; ++cc) {
        const auto& c = cells_[static_cast<std::size_t>(cc)];
        const index_t p = tpl_.process(i, cc), q = poi_of_process_[static_cast<std::size_t>(p)];
        tpl_.effective_row(i, cc, dg, e.data());
        const auto add = [&](double wp, double* to) {
          detail::axpy(wp * c.d_L, e.data(), to + npoi, S);
          if (q >= 0) to[q] += wp * c.d_mu;
        };
        add(w[static_cast<std::size_t>(p)], per_process ? j + p * n : j);
        if (per_process && v[static_cast<std::size_t>(p)] != 0) add(v[static_cast<std::size_t>(p)], jv.data());
      }
      if (per_process)
        for (index_t p = 0; p < P; ++p)
          if (u[static_cast<std::size_t>(p)] != 0) detail::axpy(u[static_cast<std::size_t>(p)], jv.data(), j + p * n, n);
    }
  }

  /// Holds every β of the shard's data bins at `beta` (`[ndata × per_bin]`, as bin_by_bin_parameters
  /// writes it) instead of profiling it, so derivatives are those at fixed β (the stat-only
  /// uncertainty without template statistics, rabbit-likelihood-and-format.md §5.1); an empty span
  /// restores the profiling.
  void fix_bin_by_bin(std::span<const double> beta) {
    cache_.invalidate();
    if (!profiled_bb_) profiled_bb_ = bb_;
    if (beta.empty()) {
      bb_ = *profiled_bb_;
      return;
    }
    if (static_cast<index_t>(beta.size()) != ndata_ * bb_.per_bin())
      throw usage_error("fix_bin_by_bin needs " + std::to_string(ndata_ * bb_.per_bin()) + " entries for this shard");
    if (!bb_.enabled) return;
    bb_.beta0.assign(beta.begin(), beta.end());
    std::fill(bb_.fixed.begin(), bb_.fixed.end(), 1);
  }

  /// Data-term dense Hessian of column `j` of `x` into `hess` (`[nparams × nparams]`), as GEMMs
  /// over blocks of bins: `Hθθ = Σ_cells E_cᵀ (w ν_LL) E_c + Σ_bins J_bᵀ (n/ν²) J_b` with the
  /// effective template rows `E = K + H·diag(g')`, the bin Jacobians `J_b`, the POI cross terms and
  /// the interpolation's diagonal term `g''·(Hᵀ u)` (rabbit-likelihood-and-format.md §3.7). The
  /// cells' term runs process by process over the systematics that act on the process
  /// (add_cell_curvature): where each acts on a few processes, a fraction of the dense cost.
  ///
  /// For the covariance term (`coupled_y`: y per data bin and column, see PartialRequest) this is
  /// the local part only, and the rows R_b = Σ_p u₁_p·∂ν_p/∂x that meet (C + diag q)⁻¹ go to
  /// `coupled_rows` (`[ndata × nparams]`), for the likelihood's Rᵀ·(C + diag q)⁻¹·R.
  ///
  /// `slot` names the data slot of the column (see set_slot). With Curvature::gauss_newton every term
  /// that the data term's slope weighs is left out: the yields' own curvature (∂²ν/∂L², the POI cross
  /// terms, g_p-weighted) and β's (δ and S's corner s₁₂, s₂₂, which grow with the slope), leaving
  /// s₁₁·J₁ᵀJ₁ with J₁ = U's first column applied to the cells' Jacobians (the Schur complement of the
  /// joint Gauss–Newton matrix in the yields and β; positive semi-definite): one row per bin, no cell
  /// term. The interpolation's diagonal term goes to `interpolation`
  /// (nsyst entries) instead, whose sum over the shards the likelihood keeps the positive part of.
  void hessian(ConstBlockView<double> x, index_t j, BlockView<double> hess, ConstBlockView<double> coupled_y = {},
               BlockView<double> coupled_rows = {}, index_t slot = 0, Curvature curvature = Curvature::exact,
               std::span<double> interpolation = {}) {
    const ConstBlockView<double> xj = x.block_cols(j, 1);
    prepare_columns(xj, {});
    bind_slots(std::span(&slot, 1), 1);
    detail::BinPass<Cells> pass = bin_pass(bb_, 1, 0);
    pass.coupled = !coupled_y.empty();
    pass.coupled_y = pass.coupled ? coupled_y.block_cols(j, 1) : ConstBlockView<double>{};
    const bool coupled = pass.coupled;
    const index_t P = nprocs_, S = nsyst(), n = nparams(), npoi = this->npoi();
    const bool symmetric = cols_.symmetric();
    // One bin row per bin (its Jacobian), two when β couples the cells (U's two columns, bbstat.hpp;
    // the second meets only s₁₂ and s₂₂, which the Gauss–Newton matrix leaves out). `gp` (1 or 0)
    // weighs the terms it leaves out.
    const double gp = curvature == Curvature::exact ? 1.0 : 0.0;
    const index_t nbr = bb_.enabled && bb_.multiplicative() && gp != 0 ? 2 : 1;
    // The cells' own curvature (∂²ν/∂L² for log-normal systematics, the full mode's diag(δ)); the
    // Gauss–Newton matrix leaves it out. It is added process by process after the bins (add_cell_curvature):
    // here each cell keeps its weights, and a bin row is one backward product of the bin's templates
    // (Σ_c U_c·row_c, then the interpolation's g' on the half-difference part).
    const bool cell_term = gp != 0 && (model_->systematic_type == SystematicType::log_normal ||
                                       (bb_.enabled && bb_.mode == BinByBinMode::full && bb_.multiplicative()));
    const bool single = gp == 0 && single_precision_gauss_newton_;
    const index_t bins_per_block = std::max<index_t>(1, hessian_block_rows_ / nbr);
    const index_t max_rows = bins_per_block * nbr;
    if (hM_.rows() < max_rows || hM_.cols() != n) {
      hM_.resize(max_rows, n);
      hDM_.resize(max_rows, n);
    }
    if (single && (hMf_.rows() < max_rows || hMf_.cols() != n)) {
      hMf_.resize(max_rows, n);
      hDMf_.resize(max_rows, n);
      hBf_.resize(n, n);
    }
    grow(acc_, nbr * ncoef());
    grow(cell_U_, nbr * P);
    const detail::CellsByProcess* by_process = cell_term ? &cells_by_process() : nullptr;
    if (cell_term) {
      hw_.assign(static_cast<std::size_t>(by_process->ncells()), 0.0);
      hy_.assign(hw_.size(), 0.0);
    }
    Eigen::Map<Eigen::MatrixXd, 0, Eigen::OuterStride<>> H(hess.data, n, n, Eigen::OuterStride<>(hess.ld));
    H.setZero();
    std::vector<double> diag_acc(static_cast<std::size_t>(symmetric ? 0 : S), 0.0);
    std::vector<detail::BinCurvature> curv(static_cast<std::size_t>(bins_per_block));

    for (index_t i0 = 0; i0 < ndata_; i0 += bins_per_block) {
      // The bin rows: U's columns applied to the cell Jacobians J_p = ∂ν_p/∂x.
      const index_t nbk = std::min(bins_per_block, ndata_ - i0), rows = nbk * nbr;
      auto M = hM_.topRows(rows);
      M.leftCols(npoi).setZero();  // the systematics' columns are written whole below
      double* g = g_.data();
      double *delta = delta_.data(), *u1 = u1_.data(), *u2 = u2_.data(), *U = cell_U_.data(), *acc = acc_.data();
      for (index_t ib = 0; ib < nbk; ++ib) {
        const index_t i = i0 + ib, nc = tpl_.cells(i);
        for (index_t c = 0; c < nc; ++c) cell_L_[static_cast<std::size_t>(c)] = tpl_.dot(i, c, cols_.coef());
        detail::cell_yields(pass, i, 0, cell_L_.data(), cells_.data(), m_.data());
        curv[static_cast<std::size_t>(ib)] = detail::bin_term(pass, i, i, 0, m_.data(), g, delta, u1, u2);
        for (index_t cc = 0; cc < nc; ++cc) {
          const auto& c = cells_[static_cast<std::size_t>(cc)];
          const index_t p = tpl_.process(i, cc), q = poi_of_process_[static_cast<std::size_t>(p)];
          U[cc] = u1[p] * c.d_L;
          if (nbr == 2) U[cc + P] = u2[p] * c.d_L;
          if (cell_term) {  // the cell's weight on E_cᵀE_c and on its POI cross term
            const auto k = static_cast<std::size_t>(by_process->first[static_cast<std::size_t>(i)] + cc);
            hw_[k] = g[p] * c.d_LL + delta[p] * c.d_L * c.d_L;
            if (q >= 0) hy_[k] = g[p] * c.d_muL + delta[p] * c.d_L * c.d_mu;
          }
          if (q >= 0) {
            M(ib * nbr, q) += u1[p] * c.d_mu;
            if (nbr == 2) M(ib * nbr + 1, q) += u2[p] * c.d_mu;
            H(q, q) += gp * (g[p] * c.d_mumu + delta[p] * c.d_mu * c.d_mu);
          }
          if (!symmetric) tpl_.add_half(i, cc, g[p] * c.d_L, diag_acc.data());
        }
        const index_t nco = ncoef();
        std::fill_n(acc, nbr * nco, 0.0);
        tpl_.backward(i, U, nbr, acc);
        for (index_t k = 0; k < nbr; ++k) {
          double* row = M.row(ib * nbr + k).data() + npoi;
          const double* a = acc + k * nco;
          for (index_t s = 0; s < S; ++s) row[s] = symmetric ? a[s] : a[s] + cols_.dg()[s] * a[S + s];
        }
      }
      for (index_t ib = 0; ib < nbk && coupled; ++ib)
        for (index_t c = 0; c < n; ++c) coupled_rows(i0 + ib, c) = M(ib * nbr, c);
      auto DM = hDM_.topRows(rows);
      for (index_t ib = 0; ib < nbk; ++ib) {  // the bin rows' weight is the 2 × 2 block S (or its corner)
        const auto& t = curv[static_cast<std::size_t>(ib)];
        if (nbr == 1) {
          DM.row(ib) = t.s11 * M.row(ib);  // (the Gauss–Newton matrix's s₁₁ alone, also with β)
        } else {
          DM.row(2 * ib) = t.s11 * M.row(2 * ib) + t.s12 * M.row(2 * ib + 1);
          DM.row(2 * ib + 1) = t.s12 * M.row(2 * ib) + t.s22 * M.row(2 * ib + 1);
        }
      }
      if (single && M.allFinite() && DM.allFinite()) {
        // The Gauss–Newton matrix in single precision: M and DM scaled by a power of two each to order one (exact),
        // so that float's range holds the block's largest entries; the block's float product is added to H in
        // double, so that its rounding does not accumulate over blocks. A block with a non-finite entry, or one
        // whose scale is beyond double's own range (subnormal or near-overflow entries), takes the double product.
        const double am = M.cwiseAbs().maxCoeff(), ad = DM.cwiseAbs().maxCoeff();
        if (am == 0 || ad == 0) continue;
        const int em = std::ilogb(am), ed = std::ilogb(ad);
        if (std::abs(em) < 1000 && std::abs(ed) < 1000) {
          auto Mf = hMf_.topRows(rows);
          auto DMf = hDMf_.topRows(rows);
          Mf = (std::ldexp(1.0, -em) * M).template cast<float>();
          DMf = (std::ldexp(1.0, -ed) * DM).template cast<float>();
          hBf_.setZero();
          hBf_.template triangularView<Eigen::Lower>() += Mf.transpose() * DMf;
          H.template triangularView<Eigen::Lower>() += std::ldexp(1.0, ed) * (std::ldexp(1.0, em) * hBf_.template cast<double>());
          continue;
        }
      }
      H.template triangularView<Eigen::Lower>() += M.transpose() * DM;
    }
    if (cell_term) add_cell_curvature(H, npoi, symmetric ? nullptr : cols_.dg());
    // The interpolation's own curvature g''(θ_s)·Σ g_p·∂ν_p/∂L·h_ps, a diagonal (to `interpolation` for
    // the Gauss–Newton matrix).
    if (gp == 0) {
      if (static_cast<index_t>(interpolation.size()) != S)
        throw usage_error("the Gauss–Newton matrix of a shard needs its interpolation term's " + std::to_string(S) + " entries");
      std::fill(interpolation.begin(), interpolation.end(), 0.0);
    }
    for (index_t s = 0; s < S && !symmetric; ++s) {
      const double t = cols_.d2g()[s] * diag_acc[static_cast<std::size_t>(s)];
      if (gp != 0) H(npoi + s, npoi + s) += t;
      else interpolation[static_cast<std::size_t>(s)] = t;
    }
    for (index_t c = 1; c < n; ++c)
      for (index_t r = 0; r < c; ++r) H(r, c) = H(c, r);
  }

  /// The covariance term's per-bin aggregates (bbstat.hpp, coupled_aggregates) of this shard's
  /// data bins: ν' and q for each column of x (`nu`, `q`: `[ndata × nx]`) and their directional
  /// derivatives for each column of v (`dnu`, `dq`: `[ndata × nv]`). A forward-only pass.
  void coupled_aggregates(ConstBlockView<double> x, ConstBlockView<double> v, BlockView<double> nu, BlockView<double> q,
                          BlockView<double> dnu, BlockView<double> dq) {
    aggregate_pass(x, v, {0, ndata_}, bb_, nu, q, dnu, dq);
  }

  /// The observables o_b = Σ_p ν_bp of the local bins `r` (any, masked included), for the penalties
  /// that read yields: each column's `o` (`[r.size() × nx]`) and each direction's derivative
  /// `dobs` (`[r.size() × nv]`, or empty). Their backward pass is `partials` with
  /// PartialRequest::observables.
  void observables(ConstBlockView<double> x, ConstBlockView<double> v, BinRange r, BlockView<double> o, BlockView<double> dobs) {
    aggregate_pass(x, v, r, exact_, o, {}, dobs, {});
  }

  /// Expected yields ν[b, p] of every bin of the shard (masked included) at column `j` of `x`,
  /// into `nu` (`[nbins × nprocs]` row-major).
  void yields(ConstBlockView<double> x, index_t j, std::span<double> nu) {
    prepare_columns(x.block_cols(j, 1), {});
    const index_t P = nprocs_;
    if (static_cast<index_t>(nu.size()) != range_.size() * P)
      throw usage_error("yields of bins [" + std::to_string(range_.begin) + ", " + std::to_string(range_.end) +
                        ") need an output of " + std::to_string(range_.size() * P) + " entries");
    std::fill(nu.begin(), nu.end(), 0.0);
    const detail::BinPass<Cells> pass = bin_pass(bb_, 1, 0);
    for (index_t i = 0; i < range_.size(); ++i) {
      for (index_t c = 0; c < tpl_.cells(i); ++c) cell_L_[static_cast<std::size_t>(c)] = tpl_.dot(i, c, cols_.coef());
      detail::yields_bin(pass, i, cell_L_.data(), nu.data() + i * P);
    }
  }

 private:
  /// The observed side of one data slot: counts, aux (1/n for Poisson, 1/σ² for χ²) and the
  /// bins that enter the data term (empty: all).
  struct DataSlot {
    std::vector<double> n, aux;
    std::vector<std::uint8_t> bins;
    bool set = false;
  };
  /// The forward-only pass behind coupled_aggregates and observables: per bin of the local range
  /// `bins`, ν' and q (bbstat.hpp, coupled_aggregates; with `exact_`, ν' = Σ_p ν_bp and q = 0) for
  /// each column, their directional derivatives for each direction; `q` and `dq` may be empty.
  void aggregate_pass(ConstBlockView<double> x, ConstBlockView<double> v, BinRange bins, const BinByBinStats& st, BlockView<double> nu,
                      BlockView<double> q, BlockView<double> dnu, BlockView<double> dq) {
    const index_t nx = x.cols, nv = v.empty() ? 0 : v.cols;
    prepare_columns(x, v);
    const detail::BinPass<Cells> pass = bin_pass(st, nx, nv, v);
    double* L = cell_L_.data();
    for (index_t i = bins.begin; i < bins.end; ++i) {
      tpl_.forward(i, cols_.coef(), nx + nv, L, true);
      detail::aggregate_bin(pass, i, i - bins.begin, L, nprocs_, nu, q, dnu, dq, scratch());
    }
  }

  using Cells = decltype(std::declval<const detail::TemplateSlice<Storage>&>().cells_view());
  index_t npoi() const { return cols_.npoi(); }
  index_t nsyst() const { return cols_.nsyst(); }
  index_t ncoef() const { return cols_.ncoef(); }

  /// The per-bin algebra's view of this shard for `nx` points and `nv` directions `v` at the
  /// columns prepared last, with the data slots bound last (bind_slots), β from `st`.
  detail::BinPass<Cells> bin_pass(const BinByBinStats& st, index_t nx, index_t nv, ConstBlockView<double> v = {}) const {
    detail::BinPass<Cells> a;
    a.cells = tpl_.cells_view();
    a.bb = st.view();
    a.term = data_term_;
    a.type = model_->systematic_type;
    a.P = nprocs_;
    a.npoi = npoi();
    a.nx = nx;
    a.nv = nv;
    a.poi_of_process = poi_of_process_.data();
    a.r0 = r0_.data();
    a.strengths = cols_.strengths();
    a.slots = slot_views_.data();
    a.v = v;
    return a;
  }
  detail::BinScratch scratch() { return {cells_.data(), g_.data(), delta_.data(), u1_.data(), u2_.data(), m_.data(), curv_.data()}; }

  /// The pass's columns (ParameterColumns) and workspaces for nx points and nv directions (they only grow).
  void prepare_columns(ConstBlockView<double> x, ConstBlockView<double> v) {
    cols_.prepare(x, v);
    const index_t nx = x.cols, nv = v.empty() ? 0 : v.cols, nf = nx + nv, P = nprocs_;
    grow(acc_, ncoef() * nf);
    grow(poi_acc_, npoi() * nf);
    grow(curv_, nx);
    for (auto* w : {&g_, &delta_, &u1_, &u2_}) grow(*w, P * nx);
    grow(m_, P);
    grow(cell_L_, P * nf);
    grow(cell_U_, P * nf);
    grow(cells_, P * nx);
  }

  /// Each column's data slot for the pass (slot 0 for all when `slots` is empty).
  void bind_slots(std::span<const index_t> slots, index_t nx) {
    this->check_slot_count(slots, nx);
    slot_views_.resize(static_cast<std::size_t>(nx));
    for (index_t j = 0; j < nx; ++j) {
      const DataSlot& d = this->slot_of(slots_, slots, j);
      slot_views_[static_cast<std::size_t>(j)] = {d.n.data(), d.aux.data(), d.bins.empty() ? nullptr : d.bins.data()};
    }
  }

  /// Adds the cells' own curvature Σ_c w_c·E_cᵀE_c and POI cross terms Σ_c y_c·E_c (the weights hessian() left
  /// in hw_, hy_) to H's lower triangle, process by process: process p's effective rows E_c restricted to the
  /// m_p systematics that act on p, so that a cell costs m_p² flops instead of S², in GEMMs over blocks of
  /// hessian_block_rows cells summed in an m_p × m_p block that is added to H once. A cell of weights 0 is
  /// skipped (with finite templates its E_c is finite; a NaN there reaches H through the bin rows as well).
  void add_cell_curvature(Eigen::Map<Eigen::MatrixXd, 0, Eigen::OuterStride<>>& H, index_t npoi, const double* dg) {
    const index_t P = nprocs_, S = nsyst(), R = std::max<index_t>(1, std::min(hessian_block_rows_, ndata_));
    const detail::CellsByProcess& by = cells_by_process();
    std::vector<double> e(static_cast<std::size_t>(S)), w(static_cast<std::size_t>(R)), y(static_cast<std::size_t>(R));
    for (index_t p = 0; p < P; ++p) {
      const std::span<const index_t> cols = by.systematics(p);
      const auto m = static_cast<index_t>(cols.size());
      if (m == 0) continue;
      const index_t q = poi_of_process_[static_cast<std::size_t>(p)];
      if (hK_.rows() < R || hK_.cols() < m) {
        hK_.resize(std::max<index_t>(R, hK_.rows()), std::max<index_t>(m, hK_.cols()));
        hDK_.resize(hK_.rows(), hK_.cols());
      }
      if (hA_.rows() < m) hA_.resize(m, m);
      auto A = hA_.topLeftCorner(m, m);
      A.template triangularView<Eigen::Lower>().setZero();
      Eigen::VectorXd a = Eigen::VectorXd::Zero(q >= 0 ? m : 0);
      index_t r = 0;
      const auto flush = [&] {
        auto K = hK_.topLeftCorner(r, m);
        auto DK = hDK_.topLeftCorner(r, m);
        DK.noalias() = Eigen::Map<const Eigen::VectorXd>(w.data(), r).asDiagonal() * K;
        A.template triangularView<Eigen::Lower>() += K.transpose() * DK;
        if (q >= 0) a.noalias() += K.transpose() * Eigen::Map<const Eigen::VectorXd>(y.data(), r);
        r = 0;
      };
      for (index_t k = by.cell_begin[static_cast<std::size_t>(p)]; k < by.cell_begin[static_cast<std::size_t>(p + 1)]; ++k) {
        const index_t i = by.bin[static_cast<std::size_t>(k)], c = by.cell[static_cast<std::size_t>(k)];
        const auto at = static_cast<std::size_t>(by.first[static_cast<std::size_t>(i)] + c);
        if (hw_[at] == 0 && hy_[at] == 0) continue;
        tpl_.effective_row(i, c, dg, e.data());
        double* row = hK_.row(r).data();
        for (index_t t = 0; t < m; ++t) row[t] = e[static_cast<std::size_t>(cols[static_cast<std::size_t>(t)])];
        w[static_cast<std::size_t>(r)] = hw_[at];
        y[static_cast<std::size_t>(r)] = hy_[at];
        if (++r == R) flush();
      }
      if (r > 0) flush();
      for (index_t t = 0; t < m; ++t) {  // cols ascend: A's lower triangle lands in H's
        const index_t ht = npoi + cols[static_cast<std::size_t>(t)];
        for (index_t u = 0; u <= t; ++u) H(ht, npoi + cols[static_cast<std::size_t>(u)]) += A(t, u);
        if (q >= 0) H(ht, q) += a[t];
      }
    }
  }

  /// The shard's cells by process and the systematics that act on each, found on first use: the
  /// templates do not change while the shard lives.
  const detail::CellsByProcess& cells_by_process() {
    if (!cells_by_process_) cells_by_process_ = detail::CellsByProcess::find(tpl_, ndata_, nprocs_, nsyst());
    return *cells_by_process_;
  }

  template <class T>
  static void grow(std::vector<T>& v, index_t n) {
    if (static_cast<index_t>(v.size()) < n) v.resize(static_cast<std::size_t>(n));
  }

  DataTerm data_term_;
  index_t hessian_block_rows_;
  bool single_precision_gauss_newton_;
  detail::TemplateSlice<Storage> tpl_;
  detail::ParameterColumns cols_;
  index_t nprocs_ = 0;
  detail::ForwardCache cache_;
  std::vector<DataSlot> slots_ = std::vector<DataSlot>(1);

  std::vector<detail::SlotView> slot_views_;  // per column of the current pass
  std::vector<double> r0_;
  std::vector<index_t> poi_of_process_;
  BinByBinStats bb_, exact_;  // exact_: no β, for the observables
  std::optional<BinByBinStats> profiled_bb_;  // bb_ as built, while fix_bin_by_bin holds β
  // Workspaces, sized on first use and reused; per column: the bin's ∂F/∂m and its curvature.
  std::vector<double> acc_, poi_acc_, cell_L_, cell_U_, g_, delta_, u1_, u2_, m_;
  std::vector<detail::BinCurvature> curv_;
  std::vector<detail::CellYield> cells_;
  Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> hM_, hDM_, hK_, hDK_;
  Eigen::MatrixXd hA_;  // a process's cell curvature over its systematics
  std::vector<double> hw_, hy_;  // per cell (CellsByProcess's numbering): the cell curvature's weights
  std::optional<detail::CellsByProcess> cells_by_process_;
  Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> hMf_, hDMf_;  // the Gauss–Newton GEMM's, single precision
  Eigen::MatrixXf hBf_;  // a block's single-precision product
};

}  // namespace fitlib
