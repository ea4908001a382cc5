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
/// sums' derivatives: computed as Σ_k (J·L)_bk² for C = L·Lᵀ, forward passes along the columns of L, so that the
/// cost is about that of one dense Hessian, never one pass per bin. Bins are numbered as in the model (channel by
/// channel, Model::channels). With bin-by-bin statistics, as rabbit has them: the yields carry β (β̂ postfit in the
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

/// (J·L·Lᵀ·Jᵀ)_bb for every bin of `lik` at x, J the summed yields' derivatives and L `[n × m]`: forward passes
/// along 64 columns of L at a time, which bounds the memory to 64 values per bin. `profiled`: the data bins' yields
/// with β̂(x) applied, J through β̂(x), plus the variance β's own uncertainty adds there (Likelihood::
/// postfit_observables); otherwise the yields at β held.
template <class Lik>
std::vector<double> propagated_variance(Lik& lik, std::span<const double> x, const Eigen::MatrixXd& L, bool profiled) {
  const index_t bf = lik.model().nbins_full(), nb = profiled ? lik.model().nbins() : 0, n = lik.size();
  constexpr index_t width = 64;
  std::vector<double> var(static_cast<std::size_t>(bf), 0.0), o(static_cast<std::size_t>(bf)), bvar(static_cast<std::size_t>(nb));
  const std::span<double> o_data = std::span(o).first(static_cast<std::size_t>(nb)), o_rest = std::span(o).subspan(static_cast<std::size_t>(nb));
  if (profiled) {
    lik.postfit_observables(x, {}, o_data, {}, bvar);
    std::copy(bvar.begin(), bvar.end(), var.begin());
  }
  Eigen::MatrixXd d(bf, std::min<index_t>(width, std::max<index_t>(L.cols(), 1)));
  for (index_t c0 = 0; c0 < L.cols(); c0 += width) {
    const index_t k = std::min<index_t>(width, L.cols() - c0);
    const ConstBlockView<double> v(L.data() + c0 * n, n, k);
    if (nb > 0) lik.postfit_observables(x, v, o_data, BlockView<double>(d.data(), nb, k, bf), bvar);
    if (nb < bf) lik.observables(x, v, {nb, bf}, o_rest, BlockView<double>(d.data() + nb, bf - nb, k, bf));
    for (index_t j = 0; j < k; ++j)
      for (index_t b = 0; b < bf; ++b) var[static_cast<std::size_t>(b)] += d(b, j) * d(b, j);
  }
  return var;
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
/// (Likelihood::observables).
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
  const index_t npoi = m.npoi();
  index_t constrained = 0;
  for (double w : m.constraint_weights) constrained += w > 0 ? 1 : 0;
  Eigen::MatrixXd L0 = Eigen::MatrixXd::Zero(n, constrained);
  for (index_t s = 0, k = 0; s < m.nsyst(); ++s)
    if (const double w = m.constraint_weights[static_cast<std::size_t>(s)]; w > 0) L0(npoi + s, k++) = 1 / std::sqrt(w);
  h.prefit_variance = detail::propagated_variance(lik, x0, L0, false);
  detail::add_prior_beta_variance(st, nu0, 0, h.prefit_variance);

  const std::vector<double> nu = lik.yields(r.x);
  h.postfit = detail::with_beta(st, nu, lik.bin_by_bin_parameters(r.x), nb);
  h.postfit_total = detail::process_sums(h.postfit, bf, np);
  // C = H⁻¹ on the free parameters: with H = R·Rᵀ (the factorisation the covariance came from), L = R⁻ᵀ has L·Lᵀ = C
  // without forming C, whose own factorisation could fail where it is ill-conditioned.
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
  const Eigen::MatrixXd lf = llt.matrixU().solve(Eigen::MatrixXd::Identity(nf, nf));
  Eigen::MatrixXd L = Eigen::MatrixXd::Zero(n, nf);
  for (index_t k = 0; k < nf; ++k) L.row(free[static_cast<std::size_t>(k)]) = lf.row(k);
  h.postfit_variance = detail::propagated_variance(lik, r.x, L, true);
  detail::add_prior_beta_variance(st, nu, nb, h.postfit_variance);
  return h;
}

}  // namespace fitlib
