// SPDX-License-Identifier: MIT
// Prefit and postfit histograms: the predicted yields of every bin, per process and summed, with linearised variances.
#pragma once

#include <Eigen/Cholesky>
#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "fitlib/core/error.hpp"
#include "fitlib/core/types.hpp"
#include "fitlib/likelihood/bbstat.hpp"
#include "fitlib/minimize/fit.hpp"
#include "fitlib/minimize/status.hpp"
#include "fitlib/model/model.hpp"

namespace fitlib {

/// The predictions of every bin, masked channels included (rabbit's unfolded yields), per process and summed, before
/// and after the fit, as rabbit's --saveHists --saveHistsPerProcess --computeHistErrors writes them. The variance of
/// each bin's sum comes from the parameters' covariance C by linear propagation, var_b = (J·C·Jᵀ)_bb with J the
/// sums' derivatives along every parameter (Likelihood::yield_jacobian, built as the Hessian's rows are), as ‖R⁻¹·J_bᵀ‖²
/// for the Hessian H = R·Rᵀ of the free parameters: bins·n² flops, a fraction of one dense Hessian's, never one pass
/// per bin. Bins are numbered as in the model (channel by channel, Model::channels). With bin-by-bin statistics, as rabbit has them: the yields carry β (β̂ postfit in the
/// data bins, β₀ elsewhere), J is taken through β̂(x), and each bin's variance adds cᵀ·G_ββ⁻¹·c, β's own (c = ∂ν̃/∂β;
/// G_ββ its constraint's curvature, plus the data term's where data constrain β): the variance of the joint fit of x
/// and β (bbstat.hpp, beta_variance).
struct Histograms {
  index_t nbins = 0;   ///< every bin, masked channels included (Model::nbins_full)
  index_t nprocs = 0;
  /// The observed counts the fit used (Likelihood::data) and their variances, of the unmasked bins only, `[nbins of
  /// the data term]` (the masked channels have no data).
  std::vector<double> data, data_variance;
  /// Prefit: at the default parameters and β₀, with the prefit covariance diag(1/w) of the constrained nuisances
  /// (the POIs and the unconstrained nuisances with variance 0, rabbit's default) and β's prior.
  std::vector<double> prefit;            ///< ν[b, p], `[nbins × nprocs]` row-major
  std::vector<double> prefit_total;      ///< Σ_p ν[b, p], `[nbins]`
  std::vector<double> prefit_variance;   ///< of prefit_total, `[nbins]`
  /// Postfit: at the fit's minimum, with its covariance (frozen parameters held); NaN variances where the
  /// covariance is not a covariance (FitResult::covariance_status other than accurate).
  std::vector<double> postfit, postfit_total, postfit_variance;
};

namespace detail {

/// Calls f(first, count, J, beta_var) for the bins of `lik` in blocks, J the block's yield Jacobian at x
/// (`[count × n]` row-major, Likelihood::yield_jacobian, `profiled` as there) and beta_var β's own variance: blocks
/// of at most 64 MiB of J, so that the memory stays bounded whatever the number of bins.
template <class Lik, class F>
void for_jacobian_blocks(Lik& lik, std::span<const double> x, bool profiled, F&& f) {
  const index_t bf = lik.model().nbins_full(), n = lik.size();
  const index_t block = std::clamp<index_t>(static_cast<index_t>((std::size_t{64} << 20) / sizeof(double)) / std::max<index_t>(n, 1), 1, bf);
  std::vector<double> o, J, bvar;
  for (index_t b0 = 0; b0 < bf; b0 += block) {
    const index_t nb = std::min(block, bf - b0);
    o.resize(static_cast<std::size_t>(nb));
    bvar.resize(static_cast<std::size_t>(nb));
    J.resize(static_cast<std::size_t>(nb * n));
    lik.yield_jacobian(x, {b0, b0 + nb}, profiled, o, J, bvar);
    f(b0, nb, Eigen::Map<const Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>(J.data(), nb, n), bvar);
  }
}

/// The yields per process `nu` (`[nbins × nprocs]`, before β) with β applied (bbstat.hpp, beta_applied_cells): β̂
/// (`beta_hat`, `[data bins × per_bin]`) in the data bins, β₀ in the masked ones, and β₀ everywhere when `beta_hat`
/// is empty (prefit).
inline std::vector<double> with_beta(const BinByBinStats& st, const std::vector<double>& nu, const std::vector<double>& beta_hat, index_t ndata) {
  if (!st.enabled) return nu;
  const index_t P = st.nprocs, per = st.per_bin();
  std::vector<double> out(nu.size());
  for (index_t b = 0; b < st.nbins; ++b) {
    const double* beta = b < ndata && !beta_hat.empty() ? beta_hat.data() + b * per : st.beta0.data() + b * per;
    beta_applied_cells(st, b, nu.data() + b * P, P, beta, out.data() + b * P);
  }
  return out;
}

/// Adds the variance β's prior gives the summed yields of bins [first, nbins) (`nu` per process, before β) at β₀:
/// beta_variance without a data term, for the bins whose β no data constrain (every bin prefit, the masked ones postfit).
inline void add_prior_beta_variance(const BinByBinStats& st, const std::vector<double>& nu, index_t first, std::vector<double>& var) {
  if (!st.enabled) return;
  const index_t P = st.nprocs, per = st.per_bin();
  for (index_t b = first; b < st.nbins; ++b)
    var[static_cast<std::size_t>(b)] += beta_variance(st, b, nu.data() + b * P, P, st.beta0.data() + b * per, 0.0);
}

/// Σ_p ν[b, p] of `nu` (`[nbins × nprocs]`).
inline std::vector<double> process_sums(const std::vector<double>& nu, index_t nbins, index_t nprocs) {
  std::vector<double> total(static_cast<std::size_t>(nbins), 0.0);
  for (index_t b = 0; b < nbins; ++b)
    for (index_t p = 0; p < nprocs; ++p) total[static_cast<std::size_t>(b)] += nu[static_cast<std::size_t>(b * nprocs + p)];
  return total;
}

}  // namespace detail

/// Throws unless `lik` can give histograms, saying what to change: bin-by-bin statistics need a separable data term,
/// for β̂ per bin.
template <class Lik>
void require_histograms(const Lik& lik) {
  if (lik.bin_by_bin_per_bin() > 0 && lik.options().data_term == DataTerm::covariance)
    throw usage_error("histograms with bin-by-bin statistics need a separable data term (Poisson or χ²): the covariance term "
                      "marginalises β in closed form, with no β̂ per bin to apply; fit without bin-by-bin statistics "
                      "(LikelihoodOptions::bin_by_bin, fitlib-fit --noBinByBinStat) or without --covarianceFit");
}

/// The prefit and postfit histograms of `lik` and its fit `r`, which must carry its Hessian and covariance
/// (FitOptions::covariance; a usage_error otherwise, as for a likelihood require_histograms refuses). In one process
/// (Likelihood::yield_jacobian).
template <class Lik>
Histograms histograms(Lik& lik, const FitResult& r) {
  const Model& m = lik.model();
  const index_t n = lik.size(), bf = m.nbins_full(), nb = m.nbins(), np = m.nprocs();
  require_histograms(lik);
  if (static_cast<index_t>(r.x.size()) != n || r.covariance_status == CovarianceStatus::not_computed ||
      static_cast<index_t>(r.hessian.size()) != n * n)
    throw usage_error("histograms need the fit of this likelihood with its covariance (" + std::to_string(n) + " parameters, FitOptions::covariance)");
  Histograms h;
  h.nbins = bf;
  h.nprocs = np;
  h.data = lik.data();
  h.data_variance = lik.data_variances();
  // β's constants over every bin, the masked ones included (their β keep β₀ and their prior)
  const BinByBinStats st = BinByBinStats::build(m, {0, bf}, lik.options().bin_by_bin, lik.options().data_term);

  const std::vector<double> x0 = lik.default_parameters(), nu0 = lik.yields(x0);
  h.prefit = detail::with_beta(st, nu0, {}, nb);
  h.prefit_total = detail::process_sums(h.prefit, bf, np);
  // Prefit, C = diag(1/w) over the constrained nuisances: var_b = Σ_s J_bs²/w_s, β at β₀.
  Eigen::VectorXd c0 = Eigen::VectorXd::Zero(n);
  for (index_t s = 0; s < m.nsyst(); ++s)
    if (const double w = m.constraint_weights[static_cast<std::size_t>(s)]; w > 0) c0(m.npoi() + s) = 1 / w;
  h.prefit_variance.assign(static_cast<std::size_t>(bf), 0.0);
  detail::for_jacobian_blocks(lik, x0, false, [&](index_t b0, index_t nbk, const auto& J, const std::vector<double>&) {
    Eigen::Map<Eigen::VectorXd>(h.prefit_variance.data() + b0, nbk) = J.array().square().matrix() * c0;
  });
  detail::add_prior_beta_variance(st, nu0, 0, h.prefit_variance);

  const std::vector<double> nu = lik.yields(r.x);
  h.postfit = detail::with_beta(st, nu, lik.bin_by_bin_parameters(r.x), nb);
  h.postfit_total = detail::process_sums(h.postfit, bf, np);
  // C = H⁻¹ on the free parameters: with H = R·Rᵀ (the factorisation the covariance came from), J·C·Jᵀ = ‖R⁻¹·Jᵀ‖²
  // column by column, one triangular solve per block of bins (bins·n² flops), without forming C, whose own
  // factorisation could fail where it is ill-conditioned.
  std::vector<index_t> free;
  for (index_t i = 0; i < n; ++i)
    if (!r.frozen[static_cast<std::size_t>(i)]) free.push_back(i);
  const index_t nf = static_cast<index_t>(free.size());
  Eigen::MatrixXd hf(nf, nf);
  for (index_t c = 0; c < nf; ++c)
    for (index_t k = 0; k < nf; ++k) hf(k, c) = r.hessian[static_cast<std::size_t>(free[static_cast<std::size_t>(k)] + free[static_cast<std::size_t>(c)] * n)];
  const Eigen::LLT<Eigen::MatrixXd> llt(hf);
  if (r.covariance_status != CovarianceStatus::accurate || llt.info() != Eigen::Success || !hf.allFinite()) {
    h.postfit_variance.assign(static_cast<std::size_t>(bf), std::numeric_limits<double>::quiet_NaN());
    return h;
  }
  h.postfit_variance.assign(static_cast<std::size_t>(bf), 0.0);
  detail::for_jacobian_blocks(lik, r.x, true, [&](index_t b0, index_t nbk, const auto& J, const std::vector<double>& bvar) {
    Eigen::MatrixXd jt(nf, nbk);  // the free columns of J, transposed
    for (index_t k = 0; k < nf; ++k) jt.row(k) = J.col(free[static_cast<std::size_t>(k)]).transpose();
    llt.matrixL().solveInPlace(jt);
    for (index_t b = 0; b < nbk; ++b) h.postfit_variance[static_cast<std::size_t>(b0 + b)] = jt.col(b).squaredNorm() + bvar[static_cast<std::size_t>(b)];
  });
  detail::add_prior_beta_variance(st, nu, nb, h.postfit_variance);
  return h;
}

}  // namespace fitlib
