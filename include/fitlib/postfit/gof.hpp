// SPDX-License-Identifier: MIT
// Goodness of fit (saturated test) and the constant that turns the reduced NLL into the full one.
#pragma once

#include <Eigen/Cholesky>
#include <Eigen/Core>
#include <cmath>
#include <limits>
#include <numbers>
#include <span>

#include "fitlib/core/error.hpp"
#include "fitlib/likelihood/bbstat.hpp"
#include "fitlib/likelihood/options.hpp"
#include "fitlib/minimize/fit.hpp"
#include "fitlib/model/model.hpp"

namespace fitlib {

/// P(χ²_k ≥ x): the upper regularised incomplete gamma function Q(k/2, x/2), by its power series
/// below a + 1 and its continued fraction (modified Lentz) above.
inline double chi2_survival(double x, double k) {
  if (!(k > 0) || !(x >= 0) || !std::isfinite(k)) return std::numeric_limits<double>::quiet_NaN();
  if (x == 0) return 1.0;
  if (std::isinf(x)) return 0.0;
  const double a = 0.5 * k, z = 0.5 * x;
  const double log_prefactor = a * std::log(z) - z - std::lgamma(a);
  if (z < a + 1) {  // P(a, z) = z^a e^-z / Γ(a+1) · Σ z^n / ((a+1)…(a+n))
    double term = 1 / a, sum = term;
    for (int i = 1; i < 1000 && std::abs(term) > 1e-17 * std::abs(sum); ++i) {
      term *= z / (a + i);
      sum += term;
    }
    return std::max(0.0, 1 - std::exp(log_prefactor) * sum);
  }
  const double tiny = 1e-300;
  double b = z + 1 - a, c = 1 / tiny, d = 1 / b, h = d;
  for (int i = 1; i < 1000; ++i) {
    const double an = -i * (i - a);
    b += 2;
    d = an * d + b;
    if (std::abs(d) < tiny) d = tiny;
    c = b + an / c;
    if (std::abs(c) < tiny) c = tiny;
    d = 1 / d;
    const double delta = d * c;
    h *= delta;
    if (std::abs(delta - 1) < 1e-16) break;
  }
  return std::exp(log_prefactor) * h;
}

/// The saturated-model goodness of fit (rabbit-likelihood-and-format.md §5.6): χ² = 2·NLL_reduced at
/// the minimum (constraint and bin-by-bin terms included), ndf = data bins − free unconstrained
/// parameters (POIs and unconstrained nuisances).
struct SaturatedGof {
  double chi2 = std::numeric_limits<double>::quiet_NaN();
  index_t ndf = 0;
  double p_value = std::numeric_limits<double>::quiet_NaN();
};

inline SaturatedGof saturated_gof(const Model& m, const FitResult& r) {
  SaturatedGof g;
  g.chi2 = 2 * r.nll;
  index_t free_unconstrained = 0;
  for (index_t q = 0; q < m.npoi(); ++q) free_unconstrained += r.frozen[static_cast<std::size_t>(q)] ? 0 : 1;
  for (index_t s = 0; s < m.nsyst(); ++s)
    if (m.constraint_weights[static_cast<std::size_t>(s)] == 0 && !r.frozen[static_cast<std::size_t>(m.npoi() + s)]) ++free_unconstrained;
  g.ndf = m.nbins() - free_unconstrained;
  g.p_value = g.ndf > 0 ? chi2_survival(g.chi2, static_cast<double>(g.ndf)) : std::numeric_limits<double>::quiet_NaN();
  return g;
}

/// NLL_full − NLL_reduced: the normalisation constants the reduced NLL drops (§3.1–3.4), for the
/// observed `counts` (and, for χ², their `variances`; empty = the counts). Poisson: Σ_b n − n·ln n +
/// lnΓ(n + 1); χ²: Σ_b ½·ln(2πσ_b²); covariance: ½·(B·ln 2π − ln det C⁻¹); constraints: ½·ln 2π −
/// ½·ln w per constrained nuisance; bin-by-bin β (each unmasked entry): gamma kβ₀ − kβ₀·ln β₀ +
/// lnΓ(kβ₀) − kβ₀·ln k, normal-multiplicative ½·ln 2π − ½·ln k, normal-additive ½·ln 2π.
inline double nll_constant(const Model& m, const LikelihoodOptions& opts, std::span<const double> counts,
                           std::span<const double> variances = {}) {
  const double half_log_2pi = 0.5 * std::log(2 * std::numbers::pi);
  if (static_cast<index_t>(counts.size()) != m.nbins()) throw usage_error("nll_constant needs one count per unmasked bin");
  if (variances.empty()) variances = counts;
  double c = 0;
  // Without an inverse covariance the covariance term is the χ² term (docs/likelihood.md).
  const bool covariance = opts.data_term == DataTerm::covariance && !m.data_covariance_inverse.empty();
  if (opts.data_term == DataTerm::poisson) {
    for (double n : counts) c += n - (n > 0 ? n * std::log(n) : 0.0) + std::lgamma(n + 1);
  } else if (covariance) {
    const index_t B = m.nbins();
    const Eigen::LDLT<Eigen::MatrixXd> ldlt(Eigen::Map<const Eigen::MatrixXd>(m.data_covariance_inverse.data(), B, B));
    c += static_cast<double>(B) * half_log_2pi - 0.5 * ldlt.vectorD().array().log().sum();
  } else {
    for (double v : variances) c += half_log_2pi + 0.5 * std::log(v);
  }
  for (double w : m.constraint_weights)
    if (w > 0) c += half_log_2pi - 0.5 * std::log(w);
  const BinByBinStats st = BinByBinStats::build(m, {0, m.nbins()}, opts.bin_by_bin, opts.data_term);
  for (std::size_t e = 0; st.enabled && e < st.kstat.size(); ++e) {
    if (st.fixed[e]) continue;
    const double k = st.kstat[e], b0 = st.beta0[e];
    switch (st.type) {
      case BinByBinType::gamma: c += k * b0 - (b0 > 0 ? k * b0 * std::log(b0) : 0.0) + std::lgamma(k * b0) - k * b0 * std::log(k); break;
      case BinByBinType::normal_multiplicative: c += half_log_2pi - 0.5 * std::log(k); break;
      default: c += half_log_2pi; break;
    }
  }
  return c;
}

}  // namespace fitlib
