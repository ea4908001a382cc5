// SPDX-License-Identifier: MIT
// Goodness of fit (saturated test) and the constant that turns the reduced NLL into the full one.
#pragma once

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

/// The constant of one bin-by-bin β entry in the full NLL (its full-form term minus its reduced-form
/// term), for its effective MC statistics `k` and centre `beta0`. Gamma: rabbit 0.2.5's
/// kβ₀ − kβ₀·ln β₀ + lnΓ(kβ₀) − kβ₀·ln k (its full term is −kβ₀·ln β + kβ + lnΓ(kβ₀) − kβ₀·ln k,
/// fitter.py:1848-1858 at tag v0.2.5). The normal types, for which rabbit 0.2.5 has no usable value:
/// the normalisation of their Gaussian constraint, ½·ln 2π − ½·ln k (width 1/√k) and ½·ln 2π (width 1).
inline double bin_by_bin_constant(BinByBinType type, double k, double beta0) {
  const double half_log_2pi = 0.5 * std::log(2 * std::numbers::pi);
  switch (type) {
    case BinByBinType::gamma: {
      const double a = k * beta0;
      return a - (beta0 > 0 ? a * std::log(beta0) : 0.0) + std::lgamma(a) - a * std::log(k);
    }
    case BinByBinType::normal_multiplicative: return half_log_2pi - 0.5 * std::log(k);
    default: return half_log_2pi;
  }
}

/// NLL_full − NLL_reduced for the observed `counts` of the unmasked bins, so that reduced + this is
/// rabbit 0.2.5's full NLL `nllvalfull` (`--fullNll`; Fitter._compute_lc, _compute_lbeta and
/// _compute_nll_components, fitter.py:1827-1933 at tag v0.2.5):
/// - Poisson: Σ_b n − n·ln n + lnΓ(n + 1). χ² and covariance: nothing, as rabbit's full NLL leaves
///   them unnormalised; so `variances` is unused (kept for callers).
/// - each constrained nuisance: ½·ln 2π − ½·ln w (rabbit adds ½·ln 2π·w: the same for the weights 0
///   and 1 its TensorWriter writes). POI priors: nothing.
/// - bin_by_bin_constant of every β entry (per bin in lite mode, per bin and process in full) of every
///   bin, the masked channels' included, with k = 1 where β is held at β₀ (sumw2 = 0, k = 0 or
///   k < min_kstat), because rabbit's β spans all bins and sets k = 1 there (a held gamma entry adds 1).
/// Only gamma lite has a rabbit 0.2.5 value: rabbit refuses gamma in full mode, raises
/// NotImplementedError for normal-multiplicative, and its normal-additive value is off (nbins_full·½·ln 2π
/// per entry plus ½·ln(sumw2/sumw²), NaN with an empty bin, a shape error in full mode).
inline double nll_constant(const Model& m, const LikelihoodOptions& opts, std::span<const double> counts,
                           [[maybe_unused]] std::span<const double> variances = {}) {
  const double half_log_2pi = 0.5 * std::log(2 * std::numbers::pi);
  if (static_cast<index_t>(counts.size()) != m.nbins()) throw usage_error("nll_constant needs one count per unmasked bin");
  double c = 0;
  if (opts.data_term == DataTerm::poisson)
    for (double n : counts) c += n - (n > 0 ? n * std::log(n) : 0.0) + std::lgamma(n + 1);
  for (double w : m.constraint_weights)
    if (w > 0) c += half_log_2pi - 0.5 * std::log(w);
  // Every bin: rabbit's β includes the masked channels' bins, held at β₀.
  const BinByBinStats st = BinByBinStats::build(m, {0, m.nbins_full()}, opts.bin_by_bin, opts.data_term);
  for (std::size_t e = 0; st.enabled && e < st.kstat.size(); ++e) c += bin_by_bin_constant(st.type, st.kstat[e], st.beta0[e]);
  return c;
}

}  // namespace fitlib
