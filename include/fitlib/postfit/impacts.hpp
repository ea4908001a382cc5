// SPDX-License-Identifier: MIT
// Impacts of the nuisances on the POIs and NOIs: traditional (covariance) and global (shifted
// global observables), per parameter and per group, with the statistical parts.
#pragma once

#include <Eigen/Cholesky>
#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "fitlib/config.hpp"
#include "fitlib/core/error.hpp"
#include "fitlib/core/types.hpp"
#include "fitlib/detail/spd_inverse.hpp"
#include "fitlib/likelihood/options.hpp"
#include "fitlib/minimize/fit.hpp"
#include "fitlib/model/model.hpp"
#include "fitlib/postfit/held_beta.hpp"

namespace fitlib {

/// Impacts on the targets (the POIs, then the nuisances of interest): per source parameter and per
/// group. Rows are targets; columns of `values` are all parameters (zero where a parameter is no
/// source), columns of `grouped` are the model's groups, then the statistical parts.
struct Impacts {
  std::vector<std::string> targets;
  std::vector<index_t> target_index;  ///< the targets' parameter indices
  std::vector<std::string> sources;   ///< every parameter name
  std::vector<double> values;         ///< `[ntargets × nparams]` row-major
  std::vector<std::string> groups;    ///< group names, then "stat" and, with bin-by-bin statistics, "binByBinStat"
  std::vector<double> grouped;        ///< `[ntargets × ngroups]` row-major

  double value(std::size_t t, std::size_t source) const { return values[t * sources.size() + source]; }
  double group(std::size_t t, std::size_t g) const { return grouped[t * groups.size() + g]; }
  /// Column of a group (or "stat", "binByBinStat") by name; throws naming it if absent.
  std::size_t group_index(const std::string& name) const {
    const auto it = std::find(groups.begin(), groups.end(), name);
    if (it == groups.end()) throw usage_error("no impact group '" + name + "'");
    return static_cast<std::size_t>(it - groups.begin());
  }
};

/// The parameters impacts are computed on (rabbit-likelihood-and-format.md §5): every POI, then the
/// nuisances of interest.
inline std::vector<index_t> impact_targets(const Model& m) {
  std::vector<index_t> t;
  for (index_t q = 0; q < m.npoi(); ++q) t.push_back(q);
  for (index_t s : m.nois) t.push_back(m.npoi() + s);
  return t;
}

namespace detail {

Eigen::MatrixXd square(const std::vector<double>& a, index_t n);
#if FITLIB_DEFINITIONS
FITLIB_PREBUILT_INLINE Eigen::MatrixXd square(const std::vector<double>& a, index_t n) {
  if (static_cast<index_t>(a.size()) != n * n)
    throw usage_error("impacts need the fit's covariance and Hessian: fit with FitOptions::covariance = true");
  return Eigen::Map<const Eigen::MatrixXd>(a.data(), n, n);
}
#endif

constexpr double nan = std::numeric_limits<double>::quiet_NaN();

/// √max(0, q), but NaN for a NaN q (std::max(0.0, NaN) is 0): an impact computed from a covariance
/// that is not available stays NaN, as results-format.md promises for unavailable numbers.
inline double root_or_nan(double q) { return std::isnan(q) ? nan : std::sqrt(std::max(0.0, q)); }

/// √diag((H_UU)⁻¹) on the index set U, scattered to all parameters (0 outside U): the uncertainties
/// with every parameter outside U held at its fitted value. NaN if H_UU is not finite or not
/// positive definite.
Eigen::VectorXd conditional_sigma(const Eigen::MatrixXd& H, const std::vector<index_t>& U);
#if FITLIB_DEFINITIONS
FITLIB_PREBUILT_INLINE Eigen::VectorXd conditional_sigma(const Eigen::MatrixXd& H, const std::vector<index_t>& U) {
  Eigen::VectorXd sigma = Eigen::VectorXd::Zero(H.rows());
  const auto m = static_cast<index_t>(U.size());
  Eigen::MatrixXd h(m, m);
  for (index_t a = 0; a < m; ++a)
    for (index_t b = 0; b < m; ++b) h(a, b) = H(U[static_cast<std::size_t>(a)], U[static_cast<std::size_t>(b)]);
  // Eigen's LLT lets NaN pivots through (NaN ≤ 0 is false), so a NaN Hessian is caught here.
  const bool finite = h.allFinite();
  const Eigen::LLT<Eigen::MatrixXd> llt(finite ? h : Eigen::MatrixXd::Identity(m, m));
  const bool ok = finite && llt.info() == Eigen::Success;
  const Eigen::MatrixXd c = ok ? detail::inverse_from_cholesky(llt) : Eigen::MatrixXd();
  for (index_t a = 0; a < m; ++a)
    sigma(U[static_cast<std::size_t>(a)]) = ok ? root_or_nan(c(a, a)) : nan;
  return sigma;
}
#endif

/// The free parameters among `candidates`.
inline std::vector<index_t> free_of(const FitResult& r, const std::vector<index_t>& candidates) {
  std::vector<index_t> out;
  for (index_t i : candidates)
    if (!r.frozen[static_cast<std::size_t>(i)]) out.push_back(i);
  return out;
}

inline std::vector<index_t> group_parameters(const Model& m, const SystematicGroup& g, const FitResult& r) {
  std::vector<index_t> idx;
  for (index_t s : g.members) idx.push_back(m.npoi() + s);
  return free_of(r, idx);
}

template <class Lik>
Impacts impacts_frame(const Lik& lik, const FitResult& r) {
  Impacts out;
  const Model& m = lik.model();
  out.target_index = impact_targets(m);
  for (index_t t : out.target_index) out.targets.push_back(r.names[static_cast<std::size_t>(t)]);
  out.sources = r.names;
  out.values.assign(out.targets.size() * out.sources.size(), 0.0);
  for (const auto& g : m.groups) out.groups.push_back(g.name);
  return out;
}

}  // namespace detail

/// Traditional impacts (rabbit-likelihood-and-format.md §5.1) from the postfit covariance C and
/// Hessian H of `r` (a fit of `lik` with the covariance computed):
/// - per parameter j: C_ij/√C_jj;
/// - per group G: √(c_Gᵀ·C_GG⁻¹·c_G) with c_G = C_{i,G} (= √(σ_i² − σ_i²|G fixed));
/// - "stat": σ_i with every constrained nuisance held fixed (POIs and unconstrained nuisances
///   profiled) and, with bin-by-bin statistics, β held at β̂ too; "binByBinStat": the quadrature
///   difference that profiling β makes to that. Frozen parameters are no sources (0).
/// Where the covariance is not available (NaN, CovarianceStatus::failed) or C_jj ≤ 0 (an indefinite
/// Hessian's inverse), the impacts that need it are NaN, never 0.
template <class Lik>
Impacts traditional_impacts(Lik& lik, const FitResult& r) {
  const Model& m = lik.model();
  const index_t n = lik.size(), np = m.npoi();
  const Eigen::MatrixXd C = detail::square(r.covariance, n), H = detail::square(r.hessian, n);
  Impacts out = detail::impacts_frame(lik, r);
  const std::size_t ns = out.sources.size();
  std::vector<index_t> unconstrained;
  for (index_t q = 0; q < np; ++q) unconstrained.push_back(q);
  for (index_t s = 0; s < m.nsyst(); ++s)
    if (m.constraint_weights[static_cast<std::size_t>(s)] == 0) unconstrained.push_back(np + s);
  unconstrained = detail::free_of(r, unconstrained);

  const bool split_bb = lik.bin_by_bin_per_bin() > 0 && lik.options().data_term != DataTerm::covariance;
  const Eigen::VectorXd stat_profiled = detail::conditional_sigma(H, unconstrained);
  Eigen::VectorXd stat = stat_profiled;
  if (split_bb) {
    // The same with β held at β̂: the Hessian at fixed β (no Schur complement of β).
    const std::vector<double> beta = lik.bin_by_bin_parameters(r.x);
    detail::HeldBeta<Lik> held(lik, beta);
    std::vector<double> hf(static_cast<std::size_t>(n * n)), g(static_cast<std::size_t>(n));
    double f;
    lik.hessian(ConstBlockView<double>(r.x.data(), n, 1), std::span(&f, 1), BlockView<double>(g.data(), n, 1),
                BlockView<double>(hf.data(), n, n));
    stat = detail::conditional_sigma(Eigen::Map<const Eigen::MatrixXd>(hf.data(), n, n), unconstrained);
  }
  out.groups.push_back("stat");
  if (split_bb) out.groups.push_back("binByBinStat");
  out.grouped.assign(out.targets.size() * out.groups.size(), 0.0);

  for (std::size_t t = 0; t < out.targets.size(); ++t) {
    const index_t i = out.target_index[t];
    for (index_t j = 0; j < n; ++j)
      if (!r.frozen[static_cast<std::size_t>(j)])
        out.values[t * ns + static_cast<std::size_t>(j)] = C(j, j) > 0 ? C(i, j) / std::sqrt(C(j, j)) : detail::nan;
    for (std::size_t g = 0; g < m.groups.size(); ++g) {
      const std::vector<index_t> G = detail::group_parameters(m, m.groups[g], r);
      if (G.empty()) continue;
      const auto k = static_cast<index_t>(G.size());
      Eigen::MatrixXd cgg(k, k);
      Eigen::VectorXd c(k);
      for (index_t a = 0; a < k; ++a) {
        c(a) = C(i, G[static_cast<std::size_t>(a)]);
        for (index_t b = 0; b < k; ++b) cgg(a, b) = C(G[static_cast<std::size_t>(a)], G[static_cast<std::size_t>(b)]);
      }
      const double q = c.allFinite() && cgg.allFinite() ? c.dot(cgg.ldlt().solve(c)) : detail::nan;
      out.grouped[t * out.groups.size() + g] = detail::root_or_nan(q);
    }
    const std::size_t gs = m.groups.size();
    out.grouped[t * out.groups.size() + gs] = stat(i);
    if (split_bb)
      out.grouped[t * out.groups.size() + gs + 1] = detail::root_or_nan(stat_profiled(i) * stat_profiled(i) - stat(i) * stat(i));
  }
  return out;
}

/// Global impacts by the shifted-global-observable method (rabbit-likelihood-and-format.md §5.2):
/// the shift of each target when a global observable moves by its own uncertainty, to first order.
/// - per constrained nuisance j: √w_j·C_ij (w_j its constraint weight);
/// - per group: the quadrature sum of its members;
/// - "binByBinStat": √(Σ_b L_β''·(dβ̂_b/dx·C e_i)²), the bin-by-bin β₀ as global observables
///   (separable data terms: Poisson or χ²);
/// - "stat": the data's part, √(C_ii − Σ_j I_ij² − binByBinStat²).
/// Frozen parameters are no sources; POI priors and external terms are not treated as global
/// observables, so their share stays in "stat". Without a covariance (NaN) every impact is NaN.
template <class Lik>
Impacts global_impacts(Lik& lik, const FitResult& r) {
  const Model& m = lik.model();
  const index_t n = lik.size(), np = m.npoi();
  const Eigen::MatrixXd C = detail::square(r.covariance, n);
  Impacts out = detail::impacts_frame(lik, r);
  const std::size_t ns = out.sources.size(), nt = out.targets.size();
  const bool bb = lik.bin_by_bin_per_bin() > 0;
  std::vector<double> var_bb(nt, 0.0);
  if (bb) {
    Eigen::MatrixXd V(n, static_cast<index_t>(nt));
    for (std::size_t t = 0; t < nt; ++t) V.col(static_cast<index_t>(t)) = C.col(out.target_index[t]);
    var_bb = lik.bin_by_bin_variance(r.x, ConstBlockView<double>(V.data(), n, V.cols()));
  }
  out.groups.push_back("stat");
  if (bb) out.groups.push_back("binByBinStat");
  const std::size_t ng = out.groups.size(), gs = m.groups.size();
  out.grouped.assign(nt * ng, 0.0);
  for (std::size_t t = 0; t < nt; ++t) {
    const index_t i = out.target_index[t];
    double total = 0;
    for (index_t s = 0; s < m.nsyst(); ++s) {
      const double w = m.constraint_weights[static_cast<std::size_t>(s)];
      const index_t j = np + s;
      if (w == 0 || r.frozen[static_cast<std::size_t>(j)]) continue;
      const double I = std::sqrt(w) * C(i, j);
      out.values[t * ns + static_cast<std::size_t>(j)] = I;
      total += I * I;
    }
    for (std::size_t g = 0; g < gs; ++g) {
      double q = 0;
      for (index_t j : detail::group_parameters(m, m.groups[g], r)) q += std::pow(out.values[t * ns + static_cast<std::size_t>(j)], 2);
      out.grouped[t * ng + g] = std::sqrt(q);
    }
    out.grouped[t * ng + gs] = detail::root_or_nan(C(i, i) - total - var_bb[t]);
    if (bb) out.grouped[t * ng + gs + 1] = detail::root_or_nan(var_bb[t]);
  }
  return out;
}

}  // namespace fitlib
