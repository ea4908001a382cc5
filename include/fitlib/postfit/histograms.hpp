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
#include "fitlib/minimize/fit.hpp"
#include "fitlib/minimize/status.hpp"
#include "fitlib/model/model.hpp"

namespace fitlib {

/// The predictions of every bin, masked channels included (rabbit's unfolded yields), per process and summed, before
/// and after the fit, as rabbit's --saveHists --saveHistsPerProcess --computeHistErrors writes them. The variance of
/// each bin's sum comes from the parameters' covariance C by linear propagation, var_b = (J·C·Jᵀ)_bb with J the
/// sums' derivatives: computed as Σ_k (J·L)_bk² for C = L·Lᵀ, forward passes along the columns of L, so that the
/// cost is about that of one dense Hessian, never one pass per bin. Bins are numbered as in the model (channel by
/// channel, Model::channels).
struct Histograms {
  index_t nbins = 0;   ///< every bin, masked channels included (Model::nbins_full)
  index_t nprocs = 0;
  /// The observed counts the fit used (Likelihood::data) and their variances, of the unmasked bins only, `[nbins of
  /// the data term]` (the masked channels have no data).
  std::vector<double> data, data_variance;
  /// Prefit: at the default parameters, with the prefit covariance diag(1/w) of the constrained nuisances (the
  /// POIs and the unconstrained nuisances with variance 0, rabbit's default).
  std::vector<double> prefit;            ///< ν[b, p], `[nbins × nprocs]` row-major
  std::vector<double> prefit_total;      ///< Σ_p ν[b, p], `[nbins]`
  std::vector<double> prefit_variance;   ///< of prefit_total, `[nbins]`
  /// Postfit: at the fit's minimum, with its covariance (frozen parameters held); NaN variances where the
  /// covariance is not a covariance (FitResult::covariance_status other than accurate).
  std::vector<double> postfit, postfit_total, postfit_variance;
};

namespace detail {

/// (J·L·Lᵀ·Jᵀ)_bb for every bin of `lik` at x, J the summed yields' derivatives and L `[n × m]`: forward passes
/// along 64 columns of L at a time, which bounds the memory to 64 values per bin.
template <class Lik>
std::vector<double> propagated_variance(Lik& lik, std::span<const double> x, const Eigen::MatrixXd& L) {
  const index_t bf = lik.model().nbins_full(), n = lik.size();
  constexpr index_t width = 64;
  std::vector<double> var(static_cast<std::size_t>(bf), 0.0), o(static_cast<std::size_t>(bf));
  Eigen::MatrixXd d(bf, std::min<index_t>(width, std::max<index_t>(L.cols(), 1)));
  for (index_t c0 = 0; c0 < L.cols(); c0 += width) {
    const index_t k = std::min<index_t>(width, L.cols() - c0);
    lik.observables(x, ConstBlockView<double>(L.data() + c0 * n, n, k), {0, bf}, o, BlockView<double>(d.data(), bf, k));
    for (index_t j = 0; j < k; ++j)
      for (index_t b = 0; b < bf; ++b) var[static_cast<std::size_t>(b)] += d(b, j) * d(b, j);
  }
  return var;
}

/// Σ_p ν[b, p] of `nu` (`[nbins × nprocs]`).
inline std::vector<double> process_sums(const std::vector<double>& nu, index_t nbins, index_t nprocs) {
  std::vector<double> total(static_cast<std::size_t>(nbins), 0.0);
  for (index_t b = 0; b < nbins; ++b)
    for (index_t p = 0; p < nprocs; ++p) total[static_cast<std::size_t>(b)] += nu[static_cast<std::size_t>(b * nprocs + p)];
  return total;
}

}  // namespace detail

/// Throws unless `lik` can give histograms, saying what to change: not yet with bin-by-bin statistics, whose β̂ the
/// postfit yields and their variances would need.
template <class Lik>
void require_histograms(const Lik& lik) {
  if (lik.bin_by_bin_per_bin() > 0)
    throw usage_error("histograms with bin-by-bin statistics need β̂ in the postfit yields and in their variances, which fitlib does not "
                      "compute yet; fit without bin-by-bin statistics (LikelihoodOptions::bin_by_bin, fitlib-fit --noBinByBinStat)");
}

/// The prefit and postfit histograms of `lik` and its fit `r`, which must carry its Hessian and covariance
/// (FitOptions::covariance; a usage_error otherwise, as for a likelihood require_histograms refuses). In one process
/// (Likelihood::observables).
template <class Lik>
Histograms histograms(Lik& lik, const FitResult& r) {
  const Model& m = lik.model();
  const index_t n = lik.size(), bf = m.nbins_full(), np = m.nprocs();
  require_histograms(lik);
  if (static_cast<index_t>(r.x.size()) != n || r.covariance_status == CovarianceStatus::not_computed ||
      static_cast<index_t>(r.hessian.size()) != n * n)
    throw usage_error("histograms need the fit of this likelihood with its covariance (" + std::to_string(n) + " parameters, FitOptions::covariance)");
  Histograms h;
  h.nbins = bf;
  h.nprocs = np;
  h.data = lik.data();
  h.data_variance = lik.data_variances();

  const std::vector<double> x0 = lik.default_parameters();
  h.prefit = lik.yields(x0);
  h.prefit_total = detail::process_sums(h.prefit, bf, np);
  const index_t npoi = m.npoi();
  index_t constrained = 0;
  for (double w : m.constraint_weights) constrained += w > 0 ? 1 : 0;
  Eigen::MatrixXd L0 = Eigen::MatrixXd::Zero(n, constrained);
  for (index_t s = 0, k = 0; s < m.nsyst(); ++s)
    if (const double w = m.constraint_weights[static_cast<std::size_t>(s)]; w > 0) L0(npoi + s, k++) = 1 / std::sqrt(w);
  h.prefit_variance = detail::propagated_variance(lik, x0, L0);

  h.postfit = lik.yields(r.x);
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
  h.postfit_variance = detail::propagated_variance(lik, r.x, L);
  return h;
}

}  // namespace fitlib
