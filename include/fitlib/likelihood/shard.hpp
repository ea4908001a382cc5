// SPDX-License-Identifier: MIT
// Shard: the data-term partial sums of a contiguous bin range, evaluated on the host.
#pragma once

#include <Eigen/Core>
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "fitlib/core/error.hpp"
#include "fitlib/core/types.hpp"
#include "fitlib/detail/lanes.hpp"
#include "fitlib/device/partition.hpp"
#include "fitlib/device/serial.hpp"
#include "fitlib/likelihood/bbstat.hpp"
#include "fitlib/likelihood/cell.hpp"
#include "fitlib/likelihood/interpolation.hpp"
#include "fitlib/likelihood/options.hpp"
#include "fitlib/likelihood/templates.hpp"
#include "fitlib/model/model.hpp"

namespace fitlib {

/// What one pass over a shard computes, for a block of `nx` parameter columns `x` and optionally
/// `nv` directions `v` (one per column, or all at one point when `nx == 1`). Every output is
/// optional; outputs are overwritten (or, with `accumulate`, added to) with this shard's partial sums.
struct PartialRequest {
  ConstBlockView<double> x;   ///< `[nparams × nx]`
  ConstBlockView<double> v;   ///< `[nparams × nv]`, or empty
  double* nll = nullptr;      ///< `[nx]`, or null
  BlockView<double> grad;     ///< `[nparams × nx]`, or empty
  BlockView<double> hvp;      ///< `[nparams × nv]`, or empty
  /// The covariance term, which couples the bins (bbstat.hpp, coupled_bin): per data bin of the
  /// shard y = (C + diag q)⁻¹·r for each column and z = (C + diag q)⁻¹·(dν' − y·dq) for each
  /// direction, computed by the likelihood from `coupled_aggregates`. Empty for separable terms;
  /// when set, `nll` is not written (the likelihood owns the value).
  ConstBlockView<double> coupled_y, coupled_z;
  /// Local bins (any, masked included) of a penalty on the observables o_b = Σ_p ν_bp: the pass is
  /// then that penalty's backward pass instead of the data term's, with coupled_y = ∂pen/∂o and
  /// coupled_z = ∇²pen·do per row of this range, and no bin-by-bin β. Empty: the data bins.
  BinRange observables = {};
  /// The data slot of each column of x (Shard::set_slot), or empty: slot 0 for every column.
  std::span<const index_t> slots = {};
  /// Add into grad and hvp instead of overwriting them.
  bool accumulate = false;
};

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
  requires cpu::is_host_policy_v<Policy>
class Shard<Policy, Storage> {
 public:
  using policy_type = Policy;

  Shard(std::shared_ptr<const Model> model, BinRange bins, Policy policy = {}, const LikelihoodOptions& opts = {})
      : model_(std::move(model)), policy_(policy), range_(bins), linear_poi_(opts.allow_negative_poi), data_term_(opts.data_term),
        hessian_block_rows_(opts.hessian_block_rows), tpl_(*model_, bins) {
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
    ndata_ = std::max<index_t>(0, std::min(bins.end, m.nbins()) - bins.begin);
    const auto mine = [&](const std::vector<double>& v) {
      return std::span(v).subspan(static_cast<std::size_t>(std::min(bins.begin, m.nbins())), static_cast<std::size_t>(ndata_));
    };
    set_data(mine(m.data), mine(m.data_variance.empty() ? m.data : m.data_variance));
    bb_ = BinByBinStats::build(m, {bins.begin, bins.begin + ndata_}, opts.bin_by_bin, opts.data_term);
    poi_of_process_ = m.poi_of_process();
    for (index_t p = 0; p < nprocs_; ++p) {
      const index_t q = poi_of_process_[static_cast<std::size_t>(p)];
      // Additive shifts scale with the signal strength at the default point (§2.4, r⁰).
      r0_.push_back(q < 0 ? 1.0 : m.poi_default[static_cast<std::size_t>(q)]);
    }
  }

  BinRange bins() const { return range_; }
  /// The model whose templates the shard reads.
  const Model& model() const { return *model_; }
  /// Data (unmasked) bins of the shard: the first `ndata()` of its range.
  index_t ndata() const { return ndata_; }
  index_t nparams() const { return nparams_; }

  /// Replaces the observed counts of this shard's unmasked bins (toys, Asimov, data replicas) and
  /// their variances (used by the χ² term only): the inputs of slot 0, which every evaluation uses
  /// unless it names other slots.
  void set_data(std::span<const double> counts, std::span<const double> variances) { set_slot(0, counts, variances, {}); }

  /// The inputs of data slot `slot` (slot 0 is set_data's; replicas of a batch use 1, 2, …): the
  /// observed counts and variances of the shard's data bins and, optionally, which of them enter
  /// the data term (`bins[i] == 0` leaves bin i out; empty: all). Slots grow as needed;
  /// `PartialRequest::slots` picks one per column.
  void set_slot(index_t slot, std::span<const double> counts, std::span<const double> variances, std::span<const std::uint8_t> bins) {
    if (static_cast<index_t>(counts.size()) != ndata_ || variances.size() != counts.size() || (!bins.empty() && bins.size() != counts.size()))
      throw usage_error("shard over bins [" + std::to_string(range_.begin) + ", " + std::to_string(range_.end) + ") needs " +
                        std::to_string(ndata_) + " observed counts and variances (and bin flags or none), got " +
                        std::to_string(counts.size()) + ", " + std::to_string(variances.size()) + " and " + std::to_string(bins.size()));
    for (std::size_t i = 0; i < counts.size(); ++i) {
      const bool bad_count = !std::isfinite(counts[i]) || counts[i] < 0;
      const bool bad_variance = data_term_ == DataTerm::chisq && !(variances[i] > 0 && std::isfinite(variances[i]));
      if (bad_count || bad_variance)
        throw usage_error("global bin " + std::to_string(range_.begin + static_cast<index_t>(i)) + " has count " +
                          std::to_string(counts[i]) + " and variance " + std::to_string(variances[i]) +
                          "; counts must be finite and ≥ 0, and the χ² term needs positive variances");
    }
    if (slot < 0) throw usage_error("data slot " + std::to_string(slot) + " is negative");
    if (static_cast<index_t>(slots_.size()) <= slot) slots_.resize(static_cast<std::size_t>(slot + 1));
    DataSlot& d = slots_[static_cast<std::size_t>(slot)];
    d.n.assign(counts.begin(), counts.end());
    d.aux.resize(d.n.size());
    for (std::size_t i = 0; i < d.n.size(); ++i)
      d.aux[i] = data_term_ == DataTerm::poisson ? (d.n[i] > 0 ? 1.0 / d.n[i] : 0.0) : 1.0 / variances[i];
    d.bins.assign(bins.begin(), bins.end());
    d.set = true;
    ++data_version_;
  }

  /// Drops every data slot but slot 0.
  void clear_slots() {
    slots_.resize(1);
    ++data_version_;
  }

  /// Data-term NLL, gradient and Hessian-vector products of this shard's bins (see PartialRequest).
  void partials(const PartialRequest& rq) {
    const index_t nx = rq.x.cols, nv = rq.v.empty() ? 0 : rq.v.cols;
    // Observables are the coupled form with exact templates: ∂F/∂m = y, curvature z through u₁ = 1.
    const bool observables = rq.observables.size() > 0, coupled = observables || !rq.coupled_y.empty();
    const BinRange bins = observables ? rq.observables : BinRange{0, ndata_};
    const BinByBinStats& st = observables ? exact_ : bb_;
    const index_t nf = nx + nv;
    auto point_of = [&](index_t k) { return nx == 1 ? index_t{0} : k; };
    prepare_columns(rq.x, rq.v);
    bind_slots(rq.slots, nx);
    // Points whose products L = K·x the previous data pass computed are not recomputed: an HVP at
    // the iterate needs only its direction's forward product (the cache holds them bitwise).
    const bool cached = !observables && !coupled;
    const ForwardPlan plan = cached ? plan_forward(rq.x, nv, rq.slots) : ForwardPlan{coef_.data(), nf, false, false};
    // The gradient's backward column u; an HVP needs it too, for g''·(Hᵀu), but only with an
    // asymmetric tensor, and not when the points' Kᵀu are cached from their gradient.
    const bool want_u = !rq.grad.empty() || (nv > 0 && !symmetric_ && !plan.cached_u);
    const index_t nu = want_u ? nx : 0, nb = nu + nv;

    std::fill_n(acc_.data(), ncoef_ * nb, 0.0);
    std::fill_n(poi_acc_.data(), npoi_ * nb, 0.0);
    if (rq.nll) std::fill_n(rq.nll, nx, 0.0);
    const index_t P = nprocs_;
    double* L = cell_L_.data();       // [P × nf]
    double* U = cell_U_.data();       // [P × nb]
    detail::CellYield* cy = cells_.data();  // [P × nx]
    double* Lf = plan.gathered ? cell_Lf_.data() : L;

    for (index_t i = bins.begin; i < bins.end; ++i) {
      const index_t r = i - bins.begin;
      // Forward: every column's and direction's L for the bin's cells.
      const index_t nc = tpl_.cells(i);
      // The rows of later bins are requested during the backward pass, or here when there is none.
      tpl_.forward(i, plan.coef, plan.columns, Lf, nb == 0);
      if (cached) exchange_cached_products(i, nx, nv, Lf, L);
      for (index_t j = 0; j < nx; ++j) {
        cell_yields(i, j, L, cy + j * P);
        // The bin's term and its curvature in the cell yields, β profiled (bbstat.hpp).
        double* g = g_.data() + j * P;
        const DataSlot& d = *column_slot_[static_cast<std::size_t>(j)];
        detail::BinCurvature t{};
        if (!coupled && !d.bins.empty() && !d.bins[static_cast<std::size_t>(i)]) {  // left out of this column's data term
          for (double* a : {g, delta_.data() + j * P, u1_.data() + j * P, u2_.data() + j * P}) std::fill_n(a, P, 0.0);
        } else {
          t = coupled ? detail::coupled_bin(st, i, m_.data(), P, rq.coupled_y(r, j), g, delta_.data() + j * P, u1_.data() + j * P,
                                            u2_.data() + j * P, nullptr)
                      : detail::profile_bin(bb_, i, data_term_, d.n[static_cast<std::size_t>(i)], d.aux[static_cast<std::size_t>(i)], m_.data(),
                                            P, g, delta_.data() + j * P, u1_.data() + j * P, u2_.data() + j * P, nullptr);
        }
        if (rq.nll && !coupled) rq.nll[j] += t.nll;
        curv_[static_cast<std::size_t>(j)] = t;
        if (!want_u) continue;
        for (index_t c = 0; c < nc; ++c) {
          const index_t p = tpl_.process(i, c);
          U[c + j * P] = g[p] * cy[c + j * P].d_L;
          if (const index_t q = poi_of_process_[static_cast<std::size_t>(p)]; q >= 0) poi_acc_[q + j * npoi_] += g[p] * cy[c + j * P].d_mu;
        }
      }
      for (index_t k = 0; k < nv; ++k) {
        const index_t j = point_of(k);
        const detail::BinCurvature& t = curv_[static_cast<std::size_t>(j)];
        const double *g = g_.data() + j * P, *delta = delta_.data() + j * P, *u1 = u1_.data() + j * P, *u2 = u2_.data() + j * P;
        const double* vk = rq.v.col(k);
        // dm: the direction's change of the cell yields; h = (diag(δ) + U·S·Uᵀ)·dm.
        double t1 = 0, t2 = 0;
        for (index_t c = 0; c < nc; ++c) {
          const index_t p = tpl_.process(i, c), q = poi_of_process_[static_cast<std::size_t>(p)];
          const double dm = cy[c + j * P].d_mu * (q >= 0 ? vk[q] : 0.0) + cy[c + j * P].d_L * L[c + (nx + k) * P];
          m_[static_cast<std::size_t>(c)] = dm;
          t1 += u1[p] * dm;
          t2 += u2[p] * dm;
        }
        // The coupled term's non-local curvature enters through u₁: z = (C + diag q)⁻¹·(Σ_bins u₁·dm).
        const double a1 = t.s11 * t1 + t.s12 * t2 + (coupled ? rq.coupled_z(r, k) : 0.0), a2 = t.s12 * t1 + t.s22 * t2;
        for (index_t c = 0; c < nc; ++c) {
          const auto& y = cy[c + j * P];
          const index_t p = tpl_.process(i, c), q = poi_of_process_[static_cast<std::size_t>(p)];
          const double vq = q >= 0 ? vk[q] : 0.0, dL = L[c + (nx + k) * P];
          const double h = delta[p] * m_[static_cast<std::size_t>(c)] + u1[p] * a1 + u2[p] * a2;
          U[c + (nu + k) * P] = h * y.d_L + g[p] * (y.d_muL * vq + y.d_LL * dL);
          if (q >= 0) poi_acc_[q + (nu + k) * npoi_] += h * y.d_mu + g[p] * (y.d_mumu * vq + y.d_muL * dL);
        }
      }
      // Backward: acc += K_rowᵀ · U for every column while the bin's rows are in cache, and the
      // next bins' rows are on their way.
      tpl_.backward(i, U, nb, acc_.data());
    }

    write_partials(rq.v, nx, nu, rq.grad, rq.hvp, rq.accumulate, plan.cached_u);
    if (cached) keep_products(nx, nv, want_u, plan.cached_u);  // last: it replaces what write_partials read
  }

  /// β̂ of the shard's data bins at column 0 of `x`: `[ndata × per_bin]` row-major into `beta`
  /// (per_bin = 1 in lite mode, nprocs in full mode; β₀ where β is fixed). For the covariance term
  /// `coupled_y` carries y per data bin (see PartialRequest).
  void bin_by_bin_parameters(ConstBlockView<double> x, std::span<double> beta, ConstBlockView<double> coupled_y = {}) {
    const index_t P = nprocs_, per = bb_.per_bin();
    if (static_cast<index_t>(beta.size()) != ndata_ * per)
      throw usage_error("bin_by_bin_parameters needs " + std::to_string(ndata_ * per) + " entries for this shard");
    prepare_columns(x.block_cols(0, 1), {});
    double* L = cell_L_.data();
    for (index_t i = 0; i < ndata_; ++i) {
      tpl_.forward(i, coef_.data(), 1, L, true);
      cell_yields(i, 0, L, cells_.data());
      double* b = beta.data() + i * per;
      if (!coupled_y.empty())
        detail::coupled_bin(bb_, i, m_.data(), P, coupled_y(i, 0), g_.data(), delta_.data(), u1_.data(), u2_.data(), b);
      else
        detail::profile_bin(bb_, i, data_term_, slots_[0].n[static_cast<std::size_t>(i)], slots_[0].aux[static_cast<std::size_t>(i)],
                            m_.data(), P, g_.data(), delta_.data(), u1_.data(), u2_.data(), b);
    }
  }

  /// The bin-by-bin part of the global impacts (rabbit-likelihood-and-format.md §5.2): for each
  /// direction v_k (a column of the covariance), Σ over the shard's β entries of L_β''·(dβ̂/dx·v_k)²,
  /// added to `var[k]` (bbstat.hpp, beta_response_variance). Separable data terms.
  void bin_by_bin_variance(ConstBlockView<double> x, ConstBlockView<double> v, std::span<double> var) {
    const index_t P = nprocs_, nv = v.cols;
    if (!bb_.enabled) return;
    prepare_columns(x.block_cols(0, 1), v);
    double* L = cell_L_.data();
    detail::CellYield* cy = cells_.data();
    std::vector<double> beta(static_cast<std::size_t>(P)), m(static_cast<std::size_t>(P)), dm(static_cast<std::size_t>(P));
    for (index_t i = 0; i < ndata_; ++i) {
      const index_t nc = tpl_.cells(i);
      const double n = slots_[0].n[static_cast<std::size_t>(i)], aux = slots_[0].aux[static_cast<std::size_t>(i)];
      tpl_.forward(i, coef_.data(), 1 + nv, L, true);
      cell_yields(i, 0, L, cy);
      std::copy_n(m_.data(), P, m.data());
      detail::profile_bin(bb_, i, data_term_, n, aux, m.data(), P, g_.data(), delta_.data(), u1_.data(), u2_.data(), beta.data());
      for (index_t k = 0; k < nv; ++k) {
        std::fill(dm.begin(), dm.end(), 0.0);
        for (index_t c = 0; c < nc; ++c) {
          const index_t p = tpl_.process(i, c), q = poi_of_process_[static_cast<std::size_t>(p)];
          dm[static_cast<std::size_t>(p)] = cy[c].d_mu * (q >= 0 ? v(q, k) : 0.0) + cy[c].d_L * L[c + (1 + k) * P];
        }
        var[static_cast<std::size_t>(k)] += detail::beta_response_variance(bb_, i, data_term_, n, aux, m.data(), dm.data(), P, beta.data());
      }
    }
  }

  /// Holds every β of the shard's data bins at `beta` (`[ndata × per_bin]`, as bin_by_bin_parameters
  /// writes it) instead of profiling it, so derivatives are those at fixed β (the stat-only
  /// uncertainty without template statistics, rabbit-likelihood-and-format.md §5.1); an empty span
  /// restores the profiling.
  void fix_bin_by_bin(std::span<const double> beta) {
    ++data_version_;
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
  /// the interpolation's diagonal term `g''·(Hᵀ u)` (rabbit-likelihood-and-format.md §3.7).
  ///
  /// For the covariance term (`coupled_y`: y per data bin and column, see PartialRequest) this is
  /// the local part only, and the rows R_b = Σ_p u₁_p·∂ν_p/∂x that meet (C + diag q)⁻¹ go to
  /// `coupled_rows` (`[ndata × nparams]`), for the likelihood's Rᵀ·(C + diag q)⁻¹·R.
  ///
  /// `slot` names the data slot of the column (see set_slot).
  void hessian(ConstBlockView<double> x, index_t j, BlockView<double> hess, ConstBlockView<double> coupled_y = {},
               BlockView<double> coupled_rows = {}, index_t slot = 0) {
    const bool coupled = !coupled_y.empty();
    const DataSlot& d = data_slot(slot);
    const ConstBlockView<double> xj = x.block_cols(j, 1);
    prepare_columns(xj, {});
    const index_t P = nprocs_, S = nsyst_, n = nparams_;
    const index_t bins_per_block = std::max<index_t>(1, hessian_block_rows_ / P);
    // One bin row per bin (its Jacobian), two when β couples the cells (U's two columns, bbstat.hpp).
    const index_t nbr = bb_.enabled && bb_.multiplicative() ? 2 : 1;
    const index_t max_rows = bins_per_block * (P + nbr);
    if (hM_.rows() < max_rows || hM_.cols() != n) {
      hM_.resize(max_rows, n);
      hDM_.resize(max_rows, n);
      hY_.resize(max_rows, std::max<index_t>(npoi_, 1));
    }
    Eigen::Map<Eigen::MatrixXd, 0, Eigen::OuterStride<>> H(hess.data, n, n, Eigen::OuterStride<>(hess.ld));
    H.setZero();
    std::vector<double> diag_acc(static_cast<std::size_t>(symmetric_ ? 0 : S), 0.0);
    std::vector<double> weight(static_cast<std::size_t>(max_rows), 0.0);  // rows of absent (sparse) cells stay 0
    // Cell rows carry ∂²ν/∂L² (log-normal) and the full mode's diag(δ).
    const bool cell_rows = type_ == SystematicType::log_normal || (bb_.enabled && bb_.mode == BinByBinMode::full && bb_.multiplicative());
    std::vector<detail::BinCurvature> curv(static_cast<std::size_t>(bins_per_block));

    for (index_t i0 = 0; i0 < ndata_; i0 += bins_per_block) {
      const index_t nbk = std::min(bins_per_block, ndata_ - i0), ncell = nbk * P, nrb = nbk * nbr;
      // Bin rows first (U's columns applied to the cell Jacobians J_p = ∂ν_p/∂x), then cell rows
      // (the effective template rows E_c, weighted by g_p·∂²ν/∂L² + δ_p·(∂ν/∂L)²).
      auto M = hM_.topRows(nrb + ncell);
      M.setZero();
      auto Y = hY_.topRows(nrb + ncell);
      if (npoi_ > 0) Y.setZero();
      double* g = g_.data();
      double *delta = delta_.data(), *u1 = u1_.data(), *u2 = u2_.data();
      std::fill_n(weight.begin() + nrb, ncell, 0.0);
      for (index_t ib = 0; ib < nbk; ++ib) {
        const index_t i = i0 + ib, nc = tpl_.cells(i);
        for (index_t c = 0; c < nc; ++c) cell_L_[static_cast<std::size_t>(c)] = tpl_.dot(i, c, coef_.data());
        cell_yields(i, 0, cell_L_.data(), cells_.data());
        if (!coupled && !d.bins.empty() && !d.bins[static_cast<std::size_t>(i)]) {  // left out of this column's data term
          for (double* a : {g, delta, u1, u2}) std::fill_n(a, P, 0.0);
          curv[static_cast<std::size_t>(ib)] = {};
        } else {
          curv[static_cast<std::size_t>(ib)] =
              coupled ? detail::coupled_bin(bb_, i, m_.data(), P, coupled_y(i, j), g, delta, u1, u2, nullptr)
                      : detail::profile_bin(bb_, i, data_term_, d.n[static_cast<std::size_t>(i)], d.aux[static_cast<std::size_t>(i)], m_.data(),
                                            P, g, delta, u1, u2, nullptr);
        }
        for (index_t cc = 0; cc < nc; ++cc) {
          const auto& c = cells_[static_cast<std::size_t>(cc)];
          const index_t p = tpl_.process(i, cc), r = nrb + ib * P + cc;
          double* e = M.row(r).data() + npoi_;
          tpl_.effective_row(i, cc, symmetric_ ? nullptr : dg_.data(), e);
          detail::axpy(u1[p] * c.d_L, e, M.row(ib * nbr).data() + npoi_, S);
          if (nbr == 2) detail::axpy(u2[p] * c.d_L, e, M.row(ib * nbr + 1).data() + npoi_, S);
          weight[static_cast<std::size_t>(r)] = g[p] * c.d_LL + delta[p] * c.d_L * c.d_L;
          if (const index_t q = poi_of_process_[static_cast<std::size_t>(p)]; q >= 0) {
            M(ib * nbr, q) += u1[p] * c.d_mu;
            if (nbr == 2) M(ib * nbr + 1, q) += u2[p] * c.d_mu;
            Y(r, q) = g[p] * c.d_muL + delta[p] * c.d_L * c.d_mu;
            H(q, q) += g[p] * c.d_mumu + delta[p] * c.d_mu * c.d_mu;
          }
          if (!symmetric_) tpl_.add_half(i, cc, g[p] * c.d_L, diag_acc.data());
        }
      }
      for (index_t ib = 0; ib < nbk && coupled; ++ib)
        for (index_t c = 0; c < n; ++c) coupled_rows(i0 + ib, c) = M(ib * nbr, c);
      const index_t rows = cell_rows ? nrb + ncell : nrb;
      auto Mr = M.topRows(rows);
      auto DM = hDM_.topRows(rows);
      DM.noalias() = Eigen::Map<const Eigen::VectorXd>(weight.data(), rows).asDiagonal() * Mr;
      for (index_t ib = 0; ib < nbk; ++ib) {  // the bin rows' weight is the 2 × 2 block S (or its corner)
        const auto& t = curv[static_cast<std::size_t>(ib)];
        if (nbr == 1) {
          DM.row(ib) = t.s11 * M.row(ib);
        } else {
          DM.row(2 * ib) = t.s11 * M.row(2 * ib) + t.s12 * M.row(2 * ib + 1);
          DM.row(2 * ib + 1) = t.s12 * M.row(2 * ib) + t.s22 * M.row(2 * ib + 1);
        }
      }
      H.template triangularView<Eigen::Lower>() += Mr.transpose() * DM;
      if (npoi_ > 0 && cell_rows) H.leftCols(npoi_).noalias() += M.transpose() * Y.leftCols(npoi_);
    }
    for (index_t s = 0; s < S && !symmetric_; ++s) H(npoi_ + s, npoi_ + s) += d2g_[s] * diag_acc[static_cast<std::size_t>(s)];
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
    for (index_t i = 0; i < range_.size(); ++i)
      for (index_t c = 0; c < tpl_.cells(i); ++c) {
        const index_t p = tpl_.process(i, c);
        nu[static_cast<std::size_t>(i * P + p)] =
            detail::cell_yield(type_, tpl_.nominal(i, c), tpl_.dot(i, c, coef_.data()), strength(p, 0), r0_[static_cast<std::size_t>(p)]).nu;
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
    const index_t nx = x.cols, nv = v.empty() ? 0 : v.cols, P = nprocs_;
    prepare_columns(x, v);
    double* L = cell_L_.data();
    for (index_t i = bins.begin; i < bins.end; ++i) {
      const index_t nc = tpl_.cells(i), r = i - bins.begin;
      tpl_.forward(i, coef_.data(), nx + nv, L, true);
      for (index_t j = 0; j < nx; ++j) {
        cell_yields(i, j, L, cells_.data() + j * P);
        const auto a = detail::coupled_aggregates(st, i, m_.data(), P, u1_.data() + j * P, u2_.data() + j * P);
        nu(r, j) = a.nu;
        if (!q.empty()) q(r, j) = a.q;
      }
      for (index_t k = 0; k < nv; ++k) {
        const index_t j = nx == 1 ? 0 : k;
        const double* vk = v.col(k);
        double s_nu = 0, s_q = 0;
        for (index_t cc = 0; cc < nc; ++cc) {
          const auto& c = cells_[static_cast<std::size_t>(cc + j * P)];
          const index_t p = tpl_.process(i, cc), qi = poi_of_process_[static_cast<std::size_t>(p)];
          const double dm = c.d_mu * (qi >= 0 ? vk[qi] : 0.0) + c.d_L * L[cc + (nx + k) * P];
          s_nu += u1_[static_cast<std::size_t>(p + j * P)] * dm;
          s_q += u2_[static_cast<std::size_t>(p + j * P)] * dm;
        }
        dnu(r, k) = s_nu;
        if (!dq.empty()) dq(r, k) = s_q;
      }
    }
  }

  /// The gradient and HVP columns from the accumulators: θ's from the template products (with the
  /// asymmetric interpolation's g' and, for HVPs, g''·v·(Hᵀu), Kᵀu from the cache with
  /// `cached_u`), the POIs' from their own sums. Overwrites, or adds with `add`.
  void write_partials(ConstBlockView<double> v, index_t nx, index_t nu, BlockView<double> grad, BlockView<double> hvp, bool add,
                      bool cached_u = false) {
    const index_t S = nsyst_, nv = v.empty() ? 0 : v.cols;
    auto put = [add](double& out, double value) { out = add ? out + value : value; };
    for (index_t j = 0; j < nx && !grad.empty(); ++j) {
      double* g = grad.col(j);
      const double* a = acc_.data() + j * ncoef_;
      for (index_t q = 0; q < npoi_; ++q) put(g[q], poi_acc_[q + j * npoi_]);
      for (index_t s = 0; s < S; ++s) put(g[npoi_ + s], symmetric_ ? a[s] : a[s] + dg_[s + j * S] * a[S + s]);
    }
    for (index_t k = 0; k < nv && !hvp.empty(); ++k) {
      const index_t j = nx == 1 ? 0 : k;
      double* h = hvp.col(k);
      const double* vk = v.col(k);
      const double* a = acc_.data() + (nu + k) * ncoef_;
      const double* au = cached_u ? cached_u_column(j) : acc_.data() + j * ncoef_;
      for (index_t q = 0; q < npoi_; ++q) put(h[q], poi_acc_[q + (nu + k) * npoi_]);
      for (index_t s = 0; s < S; ++s)
        put(h[npoi_ + s], symmetric_ ? a[s] : a[s] + dg_[s + j * S] * a[S + s] + d2g_[s + j * S] * vk[npoi_ + s] * au[S + s]);
    }
  }

  /// The cells' yields of bin i at column j from their L (stride P), into `out` (per cell), and the
  /// per-process yields m_ (zero for absent cells) that the bin's term reads.
  void cell_yields(index_t i, index_t j, const double* L, detail::CellYield* out) {
    const index_t P = nprocs_, nc = tpl_.cells(i);
    if (nc < P) std::fill_n(m_.data(), P, 0.0);
    for (index_t c = 0; c < nc; ++c) {
      const index_t p = tpl_.process(i, c);
      out[c] = detail::cell_yield(type_, tpl_.nominal(i, c), L[c + j * P], strength(p, j), r0_[static_cast<std::size_t>(p)]);
      m_[static_cast<std::size_t>(p)] = out[c].nu;
    }
  }

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
    grow(curv_, nx);
    grow(g_, nprocs_ * nx);
    grow(delta_, nprocs_ * nx);
    grow(u1_, nprocs_ * nx);
    grow(u2_, nprocs_ * nx);
    grow(m_, nprocs_);
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

  const DataSlot& data_slot(index_t slot) const {
    if (slot < 0 || slot >= static_cast<index_t>(slots_.size()) || !slots_[static_cast<std::size_t>(slot)].set)
      throw usage_error("data slot " + std::to_string(slot) + " of the shard over bins [" + std::to_string(range_.begin) + ", " +
                        std::to_string(range_.end) + ") was never set");
    return slots_[static_cast<std::size_t>(slot)];
  }

  /// Each column's data slot for the pass (slot 0 for all when `slots` is empty).
  void bind_slots(std::span<const index_t> slots, index_t nx) {
    if (!slots.empty() && static_cast<index_t>(slots.size()) != nx)
      throw usage_error("a pass over " + std::to_string(nx) + " columns names " + std::to_string(slots.size()) + " data slots");
    column_slot_.resize(static_cast<std::size_t>(nx));
    for (index_t j = 0; j < nx; ++j) column_slot_[static_cast<std::size_t>(j)] = &data_slot(slots.empty() ? 0 : slots[static_cast<std::size_t>(j)]);
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
  detail::TemplateSlice<Storage> tpl_;
  std::vector<DataSlot> slots_ = std::vector<DataSlot>(1);

  /// The forward products L = K·x of the points of a data pass, `[nbins × P × points]` (bin-major,
  /// stride P per point), and the points themselves; with asymmetric templates also each point's
  /// Kᵀu (`[ncoef × points]`), which depends on the data too, so it is kept with the points' data
  /// slots and the data's version. Kept for the last pass with directions (the HVPs of iterates
  /// still in their Krylov solves) and the last without (new iterates, whose first HVP follows),
  /// so that pooled replicas alternating between the two still find theirs.
  struct PointProducts {
    std::vector<double> x, L, u;
    std::vector<index_t> slot;
    index_t points = 0;
    bool has_u = false;
    std::uint64_t data_version = 0;
  };
  PointProducts products_[2], next_products_;
  std::uint64_t data_version_ = 0;  ///< bumped whenever the data or the β treatment change
  std::vector<index_t> hit_;        ///< per point of the pass: its column among products_[0] then [1], or −1
  std::vector<double> coef_fwd_, cell_Lf_;

  /// What the forward pass multiplies: the coefficient columns and their count, and whether they
  /// are a gathered subset (the points not cached, then the directions) rather than coef_ itself;
  /// `cached_u`: every point's Kᵀu is cached for this pass's data.
  struct ForwardPlan {
    const double* coef;
    index_t columns;
    bool gathered, cached_u;
  };

  /// Point h of the cache (numbered through products_[0], then [1]) and its column there.
  std::pair<const PointProducts*, index_t> cached_point(index_t h) const {
    return h < products_[0].points ? std::pair{&products_[0], h} : std::pair{&products_[1], h - products_[0].points};
  }
  const double* cached_u_column(index_t j) const {
    const auto [pp, c] = cached_point(hit_[static_cast<std::size_t>(j)]);
    return pp->u.data() + c * ncoef_;
  }

  /// Looks every point of x up among the cached ones (bitwise equal parameters), gathers the
  /// coefficient columns still to multiply and sizes the next cache for the points of this pass.
  ForwardPlan plan_forward(ConstBlockView<double> x, index_t nv, std::span<const index_t> slots) {
    const index_t nx = x.cols, n = nparams_;
    auto same = [n](const double* a, const double* b) {
      return std::equal(a, a + n, b, [](double u, double w) { return std::bit_cast<std::uint64_t>(u) == std::bit_cast<std::uint64_t>(w); });
    };
    auto slot_of = [&](index_t j) { return slots.empty() ? index_t{0} : slots[static_cast<std::size_t>(j)]; };
    hit_.assign(static_cast<std::size_t>(nx), -1);
    index_t misses = 0;
    bool cached_u = !symmetric_;
    for (index_t j = 0; j < nx; ++j) {
      index_t h = -1;
      for (index_t k = 0, base = 0; k < 2 && h < 0; base += products_[k].points, ++k)
        for (index_t c = 0; c < products_[k].points && h < 0; ++c)
          if (same(x.col(j), products_[k].x.data() + c * n)) h = base + c;
      hit_[static_cast<std::size_t>(j)] = h;
      misses += h < 0;
      if (h < 0) {
        cached_u = false;
      } else {
        const auto [pp, c] = cached_point(h);
        cached_u = cached_u && pp->has_u && pp->data_version == data_version_ && pp->slot[static_cast<std::size_t>(c)] == slot_of(j);
      }
    }
    next_products_.points = nx;
    next_products_.x.resize(static_cast<std::size_t>(n * nx));
    for (index_t j = 0; j < nx; ++j) std::copy_n(x.col(j), n, next_products_.x.data() + j * n);
    next_products_.slot.resize(static_cast<std::size_t>(nx));
    for (index_t j = 0; j < nx; ++j) next_products_.slot[static_cast<std::size_t>(j)] = slot_of(j);
    grow(next_products_.L, range_.size() * nprocs_ * nx);
    if (misses == nx) return {coef_.data(), nx + nv, false, false};
    grow(coef_fwd_, ncoef_ * (misses + nv));
    grow(cell_Lf_, nprocs_ * (misses + nv));
    index_t c = 0;
    for (index_t j = 0; j < nx + nv; ++j)
      if (j >= nx || hit_[static_cast<std::size_t>(j)] < 0) std::copy_n(coef_.data() + j * ncoef_, ncoef_, coef_fwd_.data() + (c++) * ncoef_);
    return {coef_fwd_.data(), misses + nv, true, cached_u && nv > 0};
  }

  /// Ends a cached pass: the points' Kᵀu (computed, or carried over from the cache) join their
  /// products, which replace the cache of this kind of pass.
  void keep_products(index_t nx, index_t nv, bool computed_u, bool cached_u) {
    PointProducts& next = next_products_;
    next.has_u = !symmetric_ && (computed_u || cached_u);
    next.data_version = data_version_;
    if (next.has_u) {
      grow(next.u, ncoef_ * nx);
      for (index_t j = 0; j < nx; ++j) std::copy_n(cached_u ? cached_u_column(j) : acc_.data() + j * ncoef_, ncoef_, next.u.data() + j * ncoef_);
    }
    std::swap(products_[nv > 0 ? 1 : 0], next);
  }

  /// After bin i's forward pass into Lf: the pass's L (`[P × (nx + nv)]`) from the computed and the
  /// cached columns, and the points' columns into the next cache.
  void exchange_cached_products(index_t i, index_t nx, index_t nv, const double* Lf, double* L) {
    const index_t P = nprocs_;
    if (Lf != L) {
      index_t c = 0;
      for (index_t j = 0; j < nx + nv; ++j) {
        index_t h = j < nx ? hit_[static_cast<std::size_t>(j)] : -1;
        const double* src = Lf;
        if (h < 0) {
          src = Lf + (c++) * P;
        } else {
          const PointProducts& pp = h < products_[0].points ? products_[0] : products_[1];
          if (h >= products_[0].points) h -= products_[0].points;
          src = pp.L.data() + (i * pp.points + h) * P;
        }
        std::copy_n(src, P, L + j * P);
      }
    }
    std::copy_n(L, P * nx, next_products_.L.data() + i * nx * P);
  }
  std::vector<const DataSlot*> column_slot_;  // per column of the current pass
  std::vector<double> r0_;
  std::vector<index_t> poi_of_process_;
  BinByBinStats bb_, exact_;  // exact_: no β, for the observables
  std::optional<BinByBinStats> profiled_bb_;  // bb_ as built, while fix_bin_by_bin holds β
  // Workspaces, sized on first use and reused; per column: the bin's ∂F/∂m and its curvature.
  std::vector<double> coef_, acc_, poi_acc_, dg_, d2g_, cell_L_, cell_U_, g_, delta_, u1_, u2_, m_;
  std::vector<detail::BinCurvature> curv_;
  std::vector<detail::Strength> strengths_;
  std::vector<detail::CellYield> cells_;
  Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> hM_, hDM_, hY_;
};

}  // namespace fitlib
