// SPDX-License-Identifier: MIT
// Bin-by-bin template statistics: the constants of β and its per-bin profile with exact curvature.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "fitlib/config.hpp"
#include "fitlib/core/error.hpp"
#include "fitlib/core/types.hpp"
#include "fitlib/device/partition.hpp"
#include "fitlib/likelihood/cell.hpp"
#include "fitlib/likelihood/options.hpp"
#include "fitlib/model/model.hpp"

namespace fitlib {

/// BinByBinStats as the per-bin algebra reads it on any device: the same fields as raw pointers
/// (trivially copyable; the owner keeps the arrays alive and unchanged while a view is used).
struct BinByBinStatsView {
  bool enabled = false;
  BinByBinMode mode = BinByBinMode::lite;
  BinByBinType type = BinByBinType::gamma;
  index_t nbins = 0, nprocs = 0;
  const double *kstat = nullptr, *sigma = nullptr, *beta0 = nullptr;
  const unsigned char *fixed = nullptr, *active = nullptr;

  FITLIB_HOST_DEVICE index_t per_bin() const { return mode == BinByBinMode::lite ? 1 : nprocs; }
  FITLIB_HOST_DEVICE bool multiplicative() const { return type != BinByBinType::normal_additive; }
};

/// The fixed constants of the bin-by-bin parameters β of a range of data bins
/// (rabbit-likelihood-and-format.md §3.4): the effective MC statistics k = sumw²/sumw2, the widths
/// √sumw2 (additive type), the centres β₀ and which β stay fixed at β₀ (rabbit's betamask). Per bin
/// in lite mode, per (bin, process) cell in full mode; `active` marks the cells a lite β scales
/// (sumw2 > 0, rabbit's zero-variance-aware branch; every cell with ZeroVarianceProcesses::scale,
/// rabbit 0.2.5). Everything downstream (profile, curvature, covariance term, impacts) reads
/// `active`, so this is the one place that decides.
struct BinByBinStats {
  bool enabled = false;  ///< false: off, or a model without template variances
  BinByBinMode mode = BinByBinMode::lite;
  BinByBinType type = BinByBinType::gamma;  ///< resolved, never `automatic`
  index_t nbins = 0, nprocs = 0;
  std::vector<double> kstat, sigma, beta0;  ///< `[nbins]` (lite) or `[nbins × nprocs]` (full)
  std::vector<unsigned char> fixed;         ///< β = β₀ here
  std::vector<unsigned char> active;        ///< `[nbins × nprocs]`, lite only

  /// β entries per bin.
  index_t per_bin() const { return mode == BinByBinMode::lite ? 1 : nprocs; }
  bool multiplicative() const { return type != BinByBinType::normal_additive; }

  /// The arrays as the per-bin algebra reads them (bin_algebra.hpp); valid while this object is unchanged.
  BinByBinStatsView view() const {
    return {enabled, mode, type, nbins, nprocs, kstat.data(), sigma.data(), beta0.data(), fixed.data(), active.data()};
  }
  operator BinByBinStatsView() const { return view(); }  // NOLINT: the view is how every pass reads it

  /// The constants of the global data bins `bins` of `model`.
  static BinByBinStats build(const Model& model, BinRange bins, const BinByBinOptions& opts, DataTerm data_term) {
    BinByBinStats st;
    st.mode = opts.mode;
    st.type = opts.resolved(data_term);
    st.nbins = bins.size();
    st.nprocs = model.nprocs();
    st.enabled = opts.enabled && !model.sumw2.empty();
    if (!st.enabled) return st;
    const index_t P = st.nprocs, per = st.per_bin(), n = st.nbins * per;
    const double centre = st.multiplicative() ? 1.0 : 0.0;
    st.kstat.assign(static_cast<std::size_t>(n), 1.0);
    st.sigma.assign(static_cast<std::size_t>(n), 0.0);
    st.beta0.assign(static_cast<std::size_t>(n), centre);
    st.fixed.assign(static_cast<std::size_t>(n), 1);
    if (st.mode == BinByBinMode::lite) st.active.assign(static_cast<std::size_t>(st.nbins * P), 0);
    const std::vector<double> sumw = model.sumw.empty() ? model.nominal_yields() : model.sumw;
    // rabbit 0.2.5's lite β scales every process, and all of them enter k.
    const bool scale_all = per == 1 && opts.zero_variance == ZeroVarianceProcesses::scale;
    for (index_t i = 0; i < st.nbins; ++i) {
      for (index_t e = 0; e < per; ++e) {
        double sw = 0, v = 0;
        for (index_t p = (per == 1 ? 0 : e); p < (per == 1 ? P : e + 1); ++p) {
          const auto c = static_cast<std::size_t>((bins.begin + i) * P + p);
          v += model.sumw2[c];
          if (model.sumw2[c] > 0 || scale_all) {
            sw += sumw[c];
            if (per == 1) st.active[static_cast<std::size_t>(i * P + p)] = 1;
          }
        }
        const auto at = static_cast<std::size_t>(i * per + e);
        const double k = v > 0 ? sw * sw / v : 0;
        st.fixed[at] = v == 0 || sw == 0 || k < opts.min_kstat;
        if (st.fixed[at]) continue;
        st.kstat[at] = k;
        st.sigma[at] = std::sqrt(v);
      }
    }
    return st;
  }
};

namespace detail {

/// The profiled bin term F(m) = min_β [D(ν̃(m, β)) + L_β(β)] as a function of the bin's cell yields
/// m_p before β (§2.5, §3.4), with the exact derivatives the passes need. By the envelope theorem
/// ∇F = ∂G/∂m at β̂; its Hessian is the Schur complement G_mm − G_mβ·G_ββ⁻¹·G_βm (§3.7), which in
/// every mode has the form diag(δ) + U·S·Uᵀ with U = [u₁ u₂] (P × 2) and S symmetric 2 × 2. The
/// arrays `g`, `delta`, `u1`, `u2` (P each) are written by `profile_bin`.
struct BinCurvature {
  double nll;              ///< D(ν̃) + L_β(β̂)
  double s11, s12, s22;    ///< S
};

/// The root of a·x² + b·x + c with the larger value, without cancellation.
FITLIB_HOST_DEVICE inline double larger_root(double a, double b, double c) {
  if (a == 0) return -c / b;
  const double d = std::sqrt(std::max(0.0, b * b - 4 * a * c));
  if (b >= 0) return b == 0 && d == 0 ? 0.0 : 2 * c / (-b - d);
  return (-b + d) / (2 * a);
}

/// The constraint −ln p(β) of one β entry in its reduced form (§3.4) and its second derivative.
struct BetaTerm {
  double value, d2;
};
FITLIB_HOST_DEVICE inline BetaTerm beta_term(BinByBinType type, double beta, double k, double beta0) {
  const double d = beta - beta0;
  switch (type) {
    case BinByBinType::gamma:
      return {k * d - (beta0 > 0 ? k * beta0 * std::log(beta / beta0) : 0.0), k * beta0 / (beta * beta)};
    case BinByBinType::normal_multiplicative: return {0.5 * k * d * d, k};
    default: return {0.5 * d * d, 1.0};
  }
}

/// Gamma constraints in full mode have no closed-form profile (§3.4): the total profiled yield x
/// solves ψ(x) = x − Σ_p β_p(x)·m_p = 0 with β_p(x) = k_p·β₀_p / (k_p + D'(x)·m_p) on the fixed cells'
/// complement. ψ is increasing and concave on the domain where every denominator is positive, so a
/// Newton iteration safeguarded by a bracket converges to the unique root; it runs to machine
/// precision (not rabbit's 50 iterations / 1e-10) so that the envelope-theorem gradient is exact.
FITLIB_HOST_DEVICE inline double gamma_full_yield(const BinByBinStatsView& st, index_t i, DataTerm term, double n, double aux, const double* m) {
  const index_t P = st.nprocs;
  const double* k = st.kstat + i * P;
  const double* b0 = st.beta0 + i * P;
  const unsigned char* fx = st.fixed + i * P;
  double base = 0, nu0 = 0, slope_lo = -std::numeric_limits<double>::infinity();
  for (index_t p = 0; p < P; ++p) {
    nu0 += b0[p] * m[p];
    if (fx[p]) base += b0[p] * m[p];
    else if (m[p] < 0) return std::numeric_limits<double>::quiet_NaN();  // no gamma profile for a negative yield
    else if (m[p] > 0) slope_lo = std::max(slope_lo, -k[p] / m[p]);
  }
  const auto psi = [&](double x, double* dpsi) {
    const double d1 = data_slope(term, x, n, aux), dd1 = term == DataTerm::poisson ? n / (x * x) : aux;
    double s = 0, ds = 0;
    for (index_t p = 0; p < P; ++p) {
      if (fx[p] || m[p] == 0) continue;
      const double den = k[p] + d1 * m[p];
      s += k[p] * b0[p] * m[p] / den;
      ds += k[p] * b0[p] * m[p] * m[p] / (den * den);
    }
    *dpsi = 1 + dd1 * ds;
    return x - base - s;
  };
  // The domain's lower end: D'(x) > slope_lo; the upper bracket: D' ≥ 0 there, so ψ ≥ x − ν₀ ≥ 0.
  double lo = term == DataTerm::poisson ? n / (1 - slope_lo) : n + slope_lo / aux;
  double hi = std::max(n, nu0);
  if (!(lo < hi)) return hi;
  double x = hi;
  for (int it = 0; it < 200; ++it) {
    double dpsi;
    const double f = psi(x, &dpsi);
    if (f == 0) break;
    (f > 0 ? hi : lo) = x;
    double next = x - f / dpsi;
    if (!(next > lo && next < hi)) next = lo + 0.5 * (hi - lo);
    if (std::abs(next - x) <= 4 * std::numeric_limits<double>::epsilon() * std::abs(x) || next == lo || next == hi) {
      x = next;
      break;
    }
    x = next;
  }
  return x;
}

/// What profile_bin's cases read of a bin besides the statistics: its data term, count n, `aux`,
/// the cell yields m before β (P of them) and what every case derives from them.
struct BinProfileInput {
  DataTerm term;
  double n, aux;
  const double* m;
  index_t P;
  double nu;           ///< Σ_p m_p
  bool poisson_empty;  ///< Poisson with n = 0: D = ν, no barrier, D' = 1
  double var;          ///< σ² = 1/aux for χ², else 0
};

/// Where profile_bin writes: ∂F/∂m (`g`), diag(δ) and U (`delta`, `u1`, `u2`, P each), β̂ (`beta`, or null).
struct BinProfileOutput {
  double *g, *delta, *u1, *u2, *beta;
};

/// β fixed: F = D(Σ c_p m_p) with the cells' factors c already in u1.
FITLIB_HOST_DEVICE inline BinCurvature profile_plain(const BinProfileInput& in, const BinProfileOutput& out, double nu_tilde) {
  const BinTerm t = data_term(in.term, nu_tilde, in.n, in.aux);
  for (index_t p = 0; p < in.P; ++p) {
    out.g[p] = t.w * out.u1[p];
    out.delta[p] = 0;
    out.u2[p] = 0;
  }
  return BinCurvature{t.nll, t.d2, 0, 0};
}

/// Lite mode, additive type: ν̃ = ν + s·β, unit Gaussian constraint.
FITLIB_HOST_DEVICE inline BinCurvature profile_lite_additive(const BinByBinStatsView& st, index_t i, const BinProfileInput& in,
                                                             const BinProfileOutput& out) {
  const DataTerm term = in.term;
  const double n = in.n, nu = in.nu, var = in.var;
  const double b0 = st.beta0[static_cast<std::size_t>(i)];
  const double s = st.sigma[static_cast<std::size_t>(i)];
  double b = b0;
  if (!st.fixed[static_cast<std::size_t>(i)]) {
    if (in.poisson_empty) b = b0 - s;
    else if (term == DataTerm::poisson) b = larger_root(s, s * s + nu - s * b0, s * (nu - n) - nu * b0);
    else b = (s * (n - nu) + var * b0) / (var + s * s);
  }
  if (out.beta) out.beta[0] = b;
  const BinTerm t = data_term(term, nu + s * b, n, in.aux);
  for (index_t p = 0; p < in.P; ++p) {
    out.g[p] = t.w;
    out.delta[p] = 0;
    out.u1[p] = 1;
    out.u2[p] = 0;
  }
  return {t.nll + 0.5 * (b - b0) * (b - b0), t.d2 / (1 + t.d2 * s * s), 0, 0};
}

/// Lite mode, multiplicative types: one β scales the active cells' yield A; Z is the rest.
FITLIB_HOST_DEVICE inline BinCurvature profile_lite_multiplicative(const BinByBinStatsView& st, index_t i, const BinProfileInput& in,
                                                                   const BinProfileOutput& out) {
  const DataTerm term = in.term;
  const double n = in.n, var = in.var;
  const double* m = in.m;
  const index_t P = in.P;
  const double k = st.kstat[static_cast<std::size_t>(i)], b0 = st.beta0[static_cast<std::size_t>(i)];
  const unsigned char* act = st.active + i * P;
  double A = 0, Z = 0;
  for (index_t p = 0; p < P; ++p) (act[p] ? A : Z) += m[p];
  double b = b0;
  if (!st.fixed[static_cast<std::size_t>(i)]) {
    const bool gamma = st.type == BinByBinType::gamma;
    if (in.poisson_empty) b = gamma ? k * b0 / (A + k) : b0 - A / k;
    else if (term == DataTerm::poisson)
      b = gamma ? larger_root(A * (A + k), A * (Z - n - k * b0) + k * Z, -k * b0 * Z)
                : larger_root(k * A, A * A - k * b0 * A + k * Z, A * (Z - n) - k * b0 * Z);
    else if (gamma) b = larger_root(A * A, k * var + (Z - n) * A, -k * var * b0);
    else b = ((n - Z) * A / var + k * b0) / (k + A * A / var);
  }
  if (out.beta) out.beta[0] = b;
  for (index_t p = 0; p < P; ++p) out.u1[p] = act[p] ? b : 1.0;
  if (st.fixed[static_cast<std::size_t>(i)]) return profile_plain(in, out, b * A + Z);
  const BinTerm t = data_term(term, b * A + Z, n, in.aux);
  const BetaTerm l = beta_term(st.type, b, k, b0);
  const double gbb = t.d2 * A * A + l.d2;
  for (index_t p = 0; p < P; ++p) {
    out.g[p] = t.w * out.u1[p];
    out.delta[p] = 0;
    out.u2[p] = act[p];
  }
  return {t.nll + l.value, t.d2 - (t.d2 * A) * (t.d2 * A) / gbb, -t.d2 * A * t.w / gbb, -t.w * t.w / gbb};
}

/// Full mode, additive type: ν̃ = ν + Σ s_p β_p, so F depends on ν alone.
FITLIB_HOST_DEVICE inline BinCurvature profile_full_additive(const BinByBinStatsView& st, index_t i, const BinProfileInput& in,
                                                             const BinProfileOutput& out) {
  const DataTerm term = in.term;
  const double n = in.n, aux = in.aux, nu = in.nu, var = in.var;
  const index_t P = in.P;
  const double* s = st.sigma + i * P;
  const double* b0 = st.beta0 + i * P;
  const unsigned char* fx = st.fixed + i * P;
  double V = 0, sb0 = 0;
  for (index_t p = 0; p < P; ++p)
    if (!fx[p]) {
      V += s[p] * s[p];
      sb0 += s[p] * b0[p];
    }
  double x;  // the profiled ν̃
  if (in.poisson_empty) x = nu + sb0 - V;
  else if (term == DataTerm::poisson) x = larger_root(1, V - nu - sb0, -n * V);
  else x = (nu + sb0 + n * V / var) / (1 + V / var);
  const double d1 = data_slope(term, x, n, aux);
  double nt = nu, lb = 0;
  for (index_t p = 0; p < P; ++p) {
    const double bp = fx[p] ? b0[p] : b0[p] - d1 * s[p];
    if (out.beta) out.beta[p] = bp;
    nt += s[p] * bp;  // fixed cells: s = 0 under the betamask, or β held by fix_bin_by_bin
    lb += 0.5 * (bp - b0[p]) * (bp - b0[p]);
  }
  const BinTerm t = data_term(term, nt, n, aux);
  for (index_t p = 0; p < P; ++p) {
    out.g[p] = t.w;
    out.delta[p] = 0;
    out.u1[p] = 1;
    out.u2[p] = 0;
  }
  return {t.nll + lb, t.d2 / (1 + t.d2 * V), 0, 0};
}

/// Full mode, multiplicative types: β_p = argmin given the profiled total, written to b (P entries).
FITLIB_HOST_DEVICE inline void full_multiplicative_beta(const BinByBinStatsView& st, index_t i, const BinProfileInput& in, double* b) {
  const DataTerm term = in.term;
  const double n = in.n, aux = in.aux, var = in.var;
  const double* m = in.m;
  const index_t P = in.P;
  const double* k = st.kstat + i * P;
  const double* b0 = st.beta0 + i * P;
  const unsigned char* fx = st.fixed + i * P;
  if (st.type == BinByBinType::gamma) {
    // With n = 0 the slope is 1 whatever the total, so there is nothing to solve.
    const double d1 = in.poisson_empty ? 1.0 : data_slope(term, gamma_full_yield(st, i, term, n, aux, m), n, aux);
    for (index_t p = 0; p < P; ++p) b[p] = fx[p] ? b0[p] : k[p] * b0[p] / (k[p] + d1 * m[p]);
  } else {
    double Sk = 0, Bk = 0;
    for (index_t p = 0; p < P; ++p) {
      Bk += b0[p] * m[p];
      if (!fx[p]) Sk += m[p] * m[p] / k[p];
    }
    double x;
    if (in.poisson_empty) x = Bk - Sk;
    else if (term == DataTerm::poisson) x = larger_root(1, Sk - Bk, -n * Sk);
    else x = (Bk + n * Sk / var) / (1 + Sk / var);
    const double d1 = data_slope(term, x, n, aux);
    for (index_t p = 0; p < P; ++p) b[p] = fx[p] ? b0[p] : b0[p] - d1 * m[p] / k[p];
  }
}

/// Full mode, multiplicative types: β̂ (into u1), then the Schur complement.
FITLIB_HOST_DEVICE inline BinCurvature profile_full_multiplicative(const BinByBinStatsView& st, index_t i, const BinProfileInput& in,
                                                                   const BinProfileOutput& out) {
  const double* m = in.m;
  const index_t P = in.P;
  const double* k = st.kstat + i * P;
  const double* b0 = st.beta0 + i * P;
  const unsigned char* fx = st.fixed + i * P;
  double* b = out.u1;
  full_multiplicative_beta(st, i, in, b);
  if (out.beta)
    for (index_t p = 0; p < P; ++p) out.beta[p] = b[p];
  double nt = 0, lb = 0, gam = 0;
  for (index_t p = 0; p < P; ++p) nt += b[p] * m[p];
  const BinTerm t = data_term(in.term, nt, in.n, in.aux);
  for (index_t p = 0; p < P; ++p) {
    out.g[p] = t.w * b[p];
    out.delta[p] = out.u2[p] = 0;
    if (fx[p]) continue;
    const BetaTerm l = beta_term(st.type, b[p], k[p], b0[p]);
    lb += l.value;
    out.u2[p] = m[p] / l.d2;
    out.delta[p] = -t.w * t.w / l.d2;
    gam += m[p] * out.u2[p];
  }
  const double q = 1 + t.d2 * gam;
  return {t.nll + lb, t.d2 / q, -t.w * t.d2 / q, t.d2 * t.w * t.w / q};
}

/// Profiles β in data bin `i` (local index in `st`) given its cell yields `m` before β, its count
/// n and `aux` (1/n for Poisson, 1/σ² for χ²). Writes ∂F/∂m (`g`), the curvature's diag(δ) and
/// U (`delta`, `u1`, `u2`, P each) and β̂ (`beta`, st.per_bin() entries, or null). Without bin-by-bin
/// statistics F = D(Σ_p m_p): g = D', U = [1 0], S = diag(D'', 0).
FITLIB_HOST_DEVICE inline BinCurvature profile_bin(const BinByBinStatsView& st, index_t i, DataTerm term, double n, double aux, const double* m, index_t P,
                                double* g, double* delta, double* u1, double* u2, double* beta) {
  double nu = 0;
  for (index_t p = 0; p < P; ++p) nu += m[p];
  const bool poisson_empty = term == DataTerm::poisson && n == 0;  // D = ν: no barrier, D' = 1
  const double var = term == DataTerm::chisq ? 1 / aux : 0;
  const BinProfileInput in{term, n, aux, m, P, nu, poisson_empty, var};
  const BinProfileOutput out{g, delta, u1, u2, beta};
  if (!st.enabled) {
    for (index_t p = 0; p < P; ++p) u1[p] = 1.0;
    return profile_plain(in, out, nu);
  }
  if (st.mode == BinByBinMode::lite) return st.multiplicative() ? profile_lite_multiplicative(st, i, in, out) : profile_lite_additive(st, i, in, out);
  // Full mode: one β per cell.
  return st.multiplicative() ? profile_full_multiplicative(st, i, in, out) : profile_full_additive(st, i, in, out);
}

/// The variance that bin `i`'s β₀ give through β̂ when the cell yields move by dm (per process):
/// Σ_e L_β''(β̂_e)·dβ̂_e², the weighted square of β̂'s response, the bin's share of the bin-by-bin
/// global impact (§5.2). dβ̂ solves G_ββ·dβ̂ = −G_βm·dm (implicit function theorem on ∂G/∂β = 0, G
/// the bin's joint term, §3.4); in full mode G_ββ = diag(L_β'') + D''·c·cᵀ (c = m for multiplicative
/// β, √sumw2 for additive) is inverted by Sherman–Morrison. `beta`: β̂ of the bin (per_bin entries).
/// Fixed entries do not move and weigh nothing. Separable data terms only. `work`: 3·P doubles.
FITLIB_HOST_DEVICE inline double beta_response_variance(const BinByBinStatsView& st, index_t i, DataTerm term, double n, double aux,
                                                        const double* m, const double* dm, index_t P, const double* beta, double* work) {
  if (!st.enabled) return 0;
  if (st.mode == BinByBinMode::lite) {
    const auto at = static_cast<std::size_t>(i);
    if (st.fixed[at]) return 0;
    double nu = 0, dnu = 0;
    for (index_t p = 0; p < P; ++p) {
      nu += m[p];
      dnu += dm[p];
    }
    const double b = beta[0];
    if (!st.multiplicative()) {  // ∂G/∂β = D'(ν + sβ)·s + β − β₀
      const double s = st.sigma[at], d2 = data_term(term, nu + s * b, n, aux).d2;
      const double db = -d2 * s * dnu / (d2 * s * s + 1);
      return db * db;
    }
    // ∂G/∂β = D'(βA + Z)·A + L_β'(β), A the active cells' yield.
    const unsigned char* act = st.active + i * P;
    double A = 0, Z = 0, dA = 0, dZ = 0;
    for (index_t p = 0; p < P; ++p) {
      (act[p] ? A : Z) += m[p];
      (act[p] ? dA : dZ) += dm[p];
    }
    const BinTerm t = data_term(term, b * A + Z, n, aux);
    const double l2 = beta_term(st.type, b, st.kstat[at], st.beta0[at]).d2;
    const double db = -(t.d2 * A * (b * dA + dZ) + t.w * dA) / (t.d2 * A * A + l2);
    return l2 * db * db;
  }
  // Full mode, one β per cell.
  const auto at = static_cast<std::size_t>(i * P);
  const unsigned char* fx = st.fixed + at;
  const bool mult = st.multiplicative();
  double nt = 0, dsum = 0;  // ν̃ and Σ_p β_p·dm_p (multiplicative) or Σ_p dm_p (additive)
  for (index_t p = 0; p < P; ++p) {
    nt += mult ? beta[p] * m[p] : m[p] + st.sigma[at + static_cast<std::size_t>(p)] * beta[p];
    dsum += mult ? beta[p] * dm[p] : dm[p];
  }
  const BinTerm t = data_term(term, nt, n, aux);
  // G_ββ = diag(l2) + D''·c·cᵀ; rhs_p = −(D''·c_p·dsum + D'·dm_p [multiplicative only]).
  double cc = 0, crhs = 0;  // Σ c²/l2 and Σ c·rhs/l2 over the free entries
  double *l2 = work, *c = work + P, *rhs = work + 2 * P;
  for (index_t p = 0; p < 3 * P; ++p) work[p] = 0.0;
  for (index_t p = 0; p < P; ++p) {
    if (fx[p]) continue;
    const auto e = at + static_cast<std::size_t>(p);
    l2[p] = beta_term(st.type, beta[p], st.kstat[e], st.beta0[e]).d2;
    c[p] = mult ? m[p] : st.sigma[e];
    rhs[p] = -(t.d2 * c[p] * dsum + (mult ? t.w * dm[p] : 0.0));
    cc += c[p] * c[p] / l2[p];
    crhs += c[p] * rhs[p] / l2[p];
  }
  double var = 0;
  for (index_t p = 0; p < P; ++p) {
    if (l2[p] == 0) continue;
    const double db = rhs[p] / l2[p] - t.d2 * (c[p] / l2[p]) * crhs / (1 + t.d2 * cc);
    var += l2[p] * db * db;
  }
  return var;
}

/// How data bin `i`'s summed yield with β̂ applied, ν̃(m, β̂(m)), moves with its cell yields m before β: the weights
/// w (P entries) of dν̃ = Σ_p w_p·dm_p, β̂'s response taken by the implicit function theorem on ∂G/∂β = 0 (as
/// beta_response_variance takes it) and folded in; `beta` is β̂ of the bin (per_bin entries, profile_bin's). Returns
/// ν̃ = Σ_p c_p·m_p (c_p the β that scales cell p, 1 where none does) plus the additive type's Σ s·β. Lite,
/// multiplicative: ν̃ = βA + Z, w = β − A·(D''·A·β + D')/G_ββ on the cells β scales, 1 − D''·A²/G_ββ on the rest;
/// additive: ν̃ = ν + s·β, w = 1/(1 + D''·s²); full: w_p = (c_p − D'·m_p/L_β''_p)/(1 + D''·Σ c²/L_β'') with c = β
/// (multiplicative; the D' term only there) or 1 (additive). Fixed entries keep β₀ and respond with nothing.
FITLIB_HOST_DEVICE inline double profiled_yield_weights(const BinByBinStatsView& st, index_t i, DataTerm term, double n, double aux, const double* m,
                                                        index_t P, const double* beta, double* w) {
  double nu = 0;
  for (index_t p = 0; p < P; ++p) {
    w[p] = 1.0;
    nu += m[p];
  }
  if (!st.enabled) return nu;
  if (st.mode == BinByBinMode::lite) {
    const auto at = static_cast<std::size_t>(i);
    const double b = beta[0];
    const bool fixed = st.fixed[at];
    if (!st.multiplicative()) {  // ν + s·β
      const double s = st.sigma[at], nt = nu + s * b;
      if (!fixed) {
        const double d2 = data_term(term, nt, n, aux).d2;
        for (index_t p = 0; p < P; ++p) w[p] = 1 / (1 + d2 * s * s);
      }
      return nt;
    }
    const unsigned char* act = st.active + i * P;  // β·A + Z
    double A = 0, Z = 0;
    for (index_t p = 0; p < P; ++p) (act[p] ? A : Z) += m[p];
    const double nt = b * A + Z;
    for (index_t p = 0; p < P; ++p) w[p] = act[p] ? b : 1.0;
    if (fixed) return nt;
    const BinTerm t = data_term(term, nt, n, aux);
    const double gbb = t.d2 * A * A + beta_term(st.type, b, st.kstat[at], st.beta0[at]).d2;
    for (index_t p = 0; p < P; ++p) w[p] -= A * (act[p] ? t.d2 * A * b + t.w : t.d2 * A) / gbb;
    return nt;
  }
  const auto at = static_cast<std::size_t>(i * P);
  const bool mult = st.multiplicative();
  double nt = 0, cc = 0;
  for (index_t p = 0; p < P; ++p) nt += mult ? beta[p] * m[p] : m[p] + st.sigma[at + static_cast<std::size_t>(p)] * beta[p];
  const BinTerm t = data_term(term, nt, n, aux);
  for (index_t p = 0; p < P; ++p) {
    const auto e = at + static_cast<std::size_t>(p);
    w[p] = mult ? beta[p] : 1.0;
    if (st.fixed[e]) continue;
    const double l2 = beta_term(st.type, beta[p], st.kstat[e], st.beta0[e]).d2;
    if (!(l2 > 0)) continue;
    const double c = mult ? m[p] : st.sigma[e];
    cc += c * c / l2;
    if (mult) w[p] -= t.w * m[p] / l2;
  }
  for (index_t p = 0; p < P; ++p) w[p] /= 1 + t.d2 * cc;
  return nt;
}

/// The per-process yields of data bin `i` with β at `beta`: c_p·m_p (`out`, P entries); the additive type's
/// s·β shared among the cells it moves in proportion to their yields (lite: every cell, as rabbit does, equally where
/// the bin predicts nothing; full: its own), so that they add up to profiled_yield_weights' ν̃.
FITLIB_HOST_DEVICE inline void beta_applied_cells(const BinByBinStatsView& st, index_t i, const double* m, index_t P, const double* beta, double* out) {
  double nu = 0;
  for (index_t p = 0; p < P; ++p) {
    out[p] = m[p];
    nu += m[p];
  }
  if (!st.enabled) return;
  if (st.mode == BinByBinMode::lite) {
    const auto at = static_cast<std::size_t>(i);
    for (index_t p = 0; p < P; ++p)
      if (st.multiplicative())
        out[p] = st.active[at * static_cast<std::size_t>(P) + static_cast<std::size_t>(p)] ? beta[0] * m[p] : m[p];
      else
        out[p] += st.sigma[at] * beta[0] * (nu != 0 ? m[p] / nu : 1.0 / static_cast<double>(P));
    return;
  }
  const auto at = static_cast<std::size_t>(i * P);
  for (index_t p = 0; p < P; ++p) out[p] = st.multiplicative() ? beta[p] * m[p] : m[p] + st.sigma[at + static_cast<std::size_t>(p)] * beta[p];
}

/// The variance β's own uncertainty gives data bin `i`'s summed yield ν̃ beyond the parameters' (the bin-by-bin
/// term of a postfit histogram's variance): cᵀ·G_ββ⁻¹·c with c = ∂ν̃/∂β at β = `beta` (A, the active cells' yield,
/// or s in lite mode; m_p or s_p per cell in full mode) and G_ββ = diag(L_β''(β)) + `d2`·c·cᵀ, `d2` the data term's
/// D''(ν̃) (0 where β has no data: the prior alone), inverted by Sherman–Morrison: cc/(1 + d2·cc), cc = Σ c²/L_β''.
/// Fixed entries do not vary.
FITLIB_HOST_DEVICE inline double beta_variance(const BinByBinStatsView& st, index_t i, const double* m, index_t P, const double* beta, double d2) {
  if (!st.enabled) return 0;
  const index_t per = st.per_bin();
  double cc = 0;
  for (index_t e = 0; e < per; ++e) {
    const auto at = static_cast<std::size_t>(i * per + e);
    if (st.fixed[at]) continue;
    double c = st.sigma[at];  // additive: ∂ν̃/∂β = s
    if (st.multiplicative()) {
      c = 0;
      if (per == 1) {
        for (index_t p = 0; p < P; ++p) c += st.active[static_cast<std::size_t>(i * P + p)] ? m[p] : 0.0;
      } else {
        c = m[e];
      }
    }
    const double l2 = beta_term(st.type, beta[e], st.kstat[at], st.beta0[at]).d2;
    if (l2 > 0) cc += c * c / l2;  // (a gamma β with β₀ = 0 has no curvature: unconstrained, left out as fixed)
  }
  return cc / (1 + d2 * cc);
}

/// The per-process refinement of profiled_yield_weights: how each process's yield of data bin `i` with β̂ applied,
/// ν̃_p(m, β̂(m)) (beta_applied_cells), moves with the bin's cell yields m. β̂ responds along one direction in lite
/// mode and along diag + one direction in full mode, so ∂ν̃_p/∂m_q = d_p·δ_pq + u_p·v_q (`d`, `u`, `v`, P each), and
/// its column sums d_q + (Σ_p u_p)·v_q are profiled_yield_weights' w. Lite, multiplicative: d = β or 1, u = A's cells'
/// m, v = ∂β̂/∂m; additive: each cell's share m_p/ν of s·β̂ (1/P where ν = 0), d = 1 + s·β/ν, u = the shares,
/// v = s·∂β̂/∂m − s·β/ν; full: ∂β̂_p/∂m_q = −(D''·c_p·w_q + D'·δ_pq·[multiplicative])/L_β''_p, so d_p = β_p − D'·m_p/L_β''_p
/// (1 additive), u_p = −D''·c_p²/L_β''_p and v = w. Fixed entries keep β₀ and respond with nothing.
FITLIB_HOST_DEVICE inline void profiled_process_weights(const BinByBinStatsView& st, index_t i, DataTerm term, double n, double aux, const double* m,
                                                        index_t P, const double* beta, double* d, double* u, double* v) {
  double nu = 0;
  for (index_t p = 0; p < P; ++p) {
    d[p] = 1.0;
    u[p] = v[p] = 0.0;
    nu += m[p];
  }
  if (!st.enabled) return;
  if (st.mode == BinByBinMode::lite) {
    const auto at = static_cast<std::size_t>(i);
    const double b = beta[0];
    const bool fixed = st.fixed[at];
    if (!st.multiplicative()) {  // ν_p + s·β·m_p/ν
      const double s = st.sigma[at], sb = nu != 0 ? s * b / nu : 0.0;
      const double d2 = data_term(term, nu + s * b, n, aux).d2, dbeta = fixed ? 0.0 : -d2 * s / (1 + d2 * s * s);
      for (index_t p = 0; p < P; ++p) {
        d[p] = 1 + sb;
        u[p] = nu != 0 ? m[p] / nu : 1.0 / static_cast<double>(P);
        v[p] = s * dbeta - sb;
      }
      return;
    }
    const unsigned char* act = st.active + i * P;  // β·A + Z
    double A = 0, Z = 0;
    for (index_t p = 0; p < P; ++p) (act[p] ? A : Z) += m[p];
    for (index_t p = 0; p < P; ++p) {
      d[p] = act[p] ? b : 1.0;
      u[p] = act[p] ? m[p] : 0.0;
    }
    if (fixed) return;
    const BinTerm t = data_term(term, b * A + Z, n, aux);
    const double gbb = t.d2 * A * A + beta_term(st.type, b, st.kstat[at], st.beta0[at]).d2;
    for (index_t p = 0; p < P; ++p) v[p] = -(act[p] ? t.d2 * A * b + t.w : t.d2 * A) / gbb;
    return;
  }
  const auto at = static_cast<std::size_t>(i * P);
  const bool mult = st.multiplicative();
  double nt = 0, cc = 0;
  for (index_t p = 0; p < P; ++p) nt += mult ? beta[p] * m[p] : m[p] + st.sigma[at + static_cast<std::size_t>(p)] * beta[p];
  const BinTerm t = data_term(term, nt, n, aux);
  for (index_t p = 0; p < P; ++p) {
    const auto e = at + static_cast<std::size_t>(p);
    d[p] = mult ? beta[p] : 1.0;
    if (st.fixed[e]) continue;
    const double l2 = beta_term(st.type, beta[p], st.kstat[e], st.beta0[e]).d2;
    if (!(l2 > 0)) continue;
    const double c = mult ? m[p] : st.sigma[e];
    cc += c * c / l2;
    u[p] = -t.d2 * c * c / l2;
    if (mult) d[p] -= t.w * m[p] / l2;
  }
  for (index_t p = 0; p < P; ++p) v[p] = d[p] / (1 + t.d2 * cc);
}

/// The variance β's own uncertainty gives each process's yield of bin `i` (`var`, P entries), beta_variance per
/// process: c_pᵀ·G_ββ⁻¹·c_p with c_p = ∂ν̃_p/∂β at β = `beta` and G_ββ = diag(L_β''(β)) + `d2`·c·cᵀ (c = Σ_p c_p;
/// `d2` the data term's D''(ν̃), 0 for the prior alone). Lite: one β, c_p = m_p on the cells it scales (additive:
/// s·m_p/ν); full: c_p = m_p (s_p) on β_p alone. Processes share a lite β, so their variances do not add up to the
/// sum's: √var_p do.
FITLIB_HOST_DEVICE inline void process_beta_variances(const BinByBinStatsView& st, index_t i, const double* m, index_t P, const double* beta, double d2,
                                                      double* var) {
  double nu = 0;
  for (index_t p = 0; p < P; ++p) {
    var[p] = 0.0;
    nu += m[p];
  }
  if (!st.enabled) return;
  if (st.mode == BinByBinMode::lite) {
    const auto at = static_cast<std::size_t>(i);
    const double l2 = beta_term(st.type, beta[0], st.kstat[at], st.beta0[at]).d2;
    if (st.fixed[at] || !(l2 > 0)) return;
    const unsigned char* act = st.active + i * P;
    double c = st.sigma[at];
    if (st.multiplicative()) {
      c = 0;
      for (index_t p = 0; p < P; ++p) c += act[p] ? m[p] : 0.0;
    }
    const double g = l2 + d2 * c * c;
    for (index_t p = 0; p < P; ++p) {
      const double cp = st.multiplicative() ? (act[p] ? m[p] : 0.0) : st.sigma[at] * (nu != 0 ? m[p] / nu : 1.0 / static_cast<double>(P));
      var[p] = cp * cp / g;
    }
    return;
  }
  const auto at = static_cast<std::size_t>(i * P);
  double cc = 0;
  for (index_t p = 0; p < P; ++p) {
    const auto e = at + static_cast<std::size_t>(p);
    const double l2 = beta_term(st.type, beta[p], st.kstat[e], st.beta0[e]).d2;
    if (st.fixed[e] || !(l2 > 0)) continue;
    const double c = st.multiplicative() ? m[p] : st.sigma[e];
    var[p] = c * c / l2;
    cc += var[p];
  }
  for (index_t p = 0; p < P; ++p) var[p] -= d2 * var[p] * var[p] / (1 + d2 * cc);
}

/// The covariance data term couples the bins (§3.1, §3.4). Profiling Gaussian β there is a
/// Gaussian marginalisation: F(m) = ½·rᵀ·(C + diag q)⁻¹·r with r_b = ν'_b − n_b, where per bin
/// ν' = Σ_p c_p·m_p + Σ s·β₀ (c_p = β₀ for the cells β scales, else 1) and q = A²/k (lite, A the
/// scaled cells' yield) or Σ_p m_p²/k_p (full) for the multiplicative type; the additive type
/// adds the constant diag(sumw2) to C instead. Writes c and ∂q/∂m (`c`, `dq`, P each) and
/// returns {ν', q}.
struct CoupledAggregates {
  double nu, q;
};
FITLIB_HOST_DEVICE inline CoupledAggregates coupled_aggregates(const BinByBinStatsView& st, index_t i, const double* m, index_t P, double* c, double* dq) {
  for (index_t p = 0; p < P; ++p) {
    c[p] = 1.0;
    dq[p] = 0.0;
  }
  double nu = 0, q = 0;
  if (st.enabled && st.mode == BinByBinMode::lite) {
    const auto e = static_cast<std::size_t>(i);
    const unsigned char* act = st.active + i * P;
    if (st.multiplicative()) {
      double A = 0;
      for (index_t p = 0; p < P; ++p)
        if (act[p]) {
          c[p] = st.beta0[e];
          A += m[p];
        }
      if (!st.fixed[e]) {
        q = A * A / st.kstat[e];
        for (index_t p = 0; p < P; ++p) dq[p] = act[p] ? 2 * A / st.kstat[e] : 0.0;
      }
    } else if (!st.fixed[e]) {
      nu += st.sigma[e] * st.beta0[e];
    }
  } else if (st.enabled) {
    for (index_t p = 0; p < P; ++p) {
      const auto e = static_cast<std::size_t>(i * P + p);
      if (st.multiplicative()) c[p] = st.beta0[e];
      if (st.fixed[e]) continue;
      if (!st.multiplicative()) nu += st.sigma[e] * st.beta0[e];
      else {
        q += m[p] * m[p] / st.kstat[e];
        dq[p] = 2 * m[p] / st.kstat[e];
      }
    }
  }
  for (index_t p = 0; p < P; ++p) nu += c[p] * m[p];
  return {nu, q};
}

/// Bin i's local part of the coupled term given y_b = [(C + diag q)⁻¹·r]_b: ∂F/∂m = y·c − ½y²·∂q/∂m
/// (`g`), u₁ = c − y·∂q/∂m, the row that meets (C + diag q)⁻¹ in the non-local curvature, and the
/// local curvature −½y²·∇²q as diag(δ) (full) or u₂·S₂₂·u₂ᵀ (lite); S₁₁ = S₁₂ = 0. Writes β̂ when
/// `beta` is not null.
FITLIB_HOST_DEVICE inline BinCurvature coupled_bin(const BinByBinStatsView& st, index_t i, const double* m, index_t P, double y, double* g, double* delta,
                                double* u1, double* u2, double* beta) {
  coupled_aggregates(st, i, m, P, u1, g);  // c into u1, ∂q/∂m into g
  double s22 = 0;
  for (index_t p = 0; p < P; ++p) {
    const double c = u1[p], dq = g[p];
    g[p] = y * c - 0.5 * y * y * dq;
    u1[p] = c - y * dq;
    delta[p] = u2[p] = 0;
  }
  if (!st.enabled) return {0, 0, 0, 0};
  const bool lite = st.mode == BinByBinMode::lite;
  for (index_t e = 0; e < st.per_bin(); ++e) {
    const auto at = static_cast<std::size_t>(i * st.per_bin() + e);
    const double k = st.kstat[at], b0 = st.beta0[at];
    const double scale = !st.multiplicative() ? st.sigma[at] : lite ? [&] {
      double A = 0;
      for (index_t p = 0; p < P; ++p) A += st.active[static_cast<std::size_t>(i * P + p)] ? m[p] : 0.0;
      return A / k;
    }() : m[e] / k;
    if (beta) beta[e] = st.fixed[at] ? b0 : b0 - scale * y;
    if (st.fixed[at] || !st.multiplicative()) continue;
    if (!lite) delta[e] = -y * y / k;
    else {
      for (index_t p = 0; p < P; ++p) u2[p] = st.active[static_cast<std::size_t>(i * P + p)];
      s22 = -y * y / k;
    }
  }
  return {0, 0, 0, s22};
}

}  // namespace detail
}  // namespace fitlib
