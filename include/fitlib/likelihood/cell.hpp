// SPDX-License-Identifier: MIT
// Per-cell yield functions and the per-bin Poisson term, with the derivatives the passes need.
#pragma once

#include <cmath>
#include <limits>

#include "fitlib/config.hpp"
#include "fitlib/likelihood/options.hpp"
#include "fitlib/model/model.hpp"

namespace fitlib::detail {

/// The signal strength μ = r(x) of a POI and its first two derivatives: x² (rabbit's default)
/// or x (allow_negative_poi). A process without a POI has r = 1.
struct Strength {
  double r = 1, dr = 0, d2r = 0;
};

FITLIB_HOST_DEVICE inline Strength poi_strength(double x, bool linear) {
  return linear ? Strength{x, 1.0, 0.0} : Strength{x * x, 2.0 * x, 2.0};
}

/// A cell's expected yield ν(μ, L) as a function of its process's signal strength parameter and
/// its log-variation (or additive shift) L, with the derivatives used by every pass
/// (rabbit-likelihood-and-format.md §2.4, §3.7). Subscripts: μ = the POI parameter x, L = L.
struct CellYield {
  double nu = 0;      ///< ν
  double d_mu = 0;    ///< ∂ν/∂x
  double d_L = 0;     ///< ∂ν/∂L
  double d_LL = 0;    ///< ∂²ν/∂L²
  double d_muL = 0;   ///< ∂²ν/∂x∂L
  double d_mumu = 0;  ///< ∂²ν/∂x²
};

/// log-normal: ν = r·N·e^L; normal: ν = r·N + r⁰·L, with r⁰ the strength at the default point.
FITLIB_HOST_DEVICE inline CellYield cell_yield(SystematicType type, double nominal, double L, Strength s, double r0) {
  if (type == SystematicType::log_normal) {
    const double m = nominal * std::exp(L);
    const double nu = s.r * m;
    return {nu, s.dr * m, nu, nu, s.dr * m, s.d2r * m};
  }
  return {s.r * nominal + r0 * L, s.dr * nominal, r0, 0.0, 0.0, s.d2r * nominal};
}

/// One bin's data term with its first two derivatives in ν.
struct BinTerm {
  double nll;  ///< the term
  double w;    ///< ∂/∂ν
  double d2;   ///< ∂²/∂ν²
};

/// The data term's slope ∂/∂ν alone (no logarithm), for the solvers that iterate on ν: Poisson's
/// 1 − n/ν (1 for n = 0), χ²'s (ν − n)/σ² given aux = 1/σ².
FITLIB_HOST_DEVICE inline double data_slope(DataTerm kind, double nu, double n, double aux) {
  return kind == DataTerm::poisson ? (n == 0 ? 1.0 : 1.0 - n / nu) : (nu - n) * aux;
}

/// The reduced Poisson term ν − n − n·ln(ν/n), zero at ν = n (the saturated offset, §3.1), given 1/n;
/// for n = 0 the log term is dropped. A non-positive ν with n > 0 gives +∞. Written as
/// (ν − n) − n·log1p((ν − n)/n): ln ν − ln n loses n·eps·ln n in a bin of n counts (1e-11 at n ~ 5000),
/// noise that near a minimum exceeds the decrease a trust-region step predicts.
FITLIB_HOST_DEVICE inline BinTerm poisson_term(double nu, double n, double inverse_n) {
  if (n == 0) return {nu, 1.0, 0.0};
  const double w = data_slope(DataTerm::poisson, nu, n, 0.0);
  if (!(nu > 0)) return {std::numeric_limits<double>::infinity(), w, n / (nu * nu)};
  const double r = nu - n;
  return {r - n * std::log1p(r * inverse_n), w, n / (nu * nu)};
}

/// ½(ν − n)²/σ², given 1/σ².
FITLIB_HOST_DEVICE inline BinTerm chisq_term(double nu, double n, double inverse_variance) {
  const double r = nu - n;
  return {0.5 * r * r * inverse_variance, data_slope(DataTerm::chisq, nu, n, inverse_variance), inverse_variance};
}

/// The bin's term; `aux` is 1/n (Poisson; 0 for n = 0) or 1/σ² (χ²), precomputed with the data.
FITLIB_HOST_DEVICE inline BinTerm data_term(DataTerm kind, double nu, double n, double aux) {
  return kind == DataTerm::poisson ? poisson_term(nu, n, aux) : chisq_term(nu, n, aux);
}

}  // namespace fitlib::detail
