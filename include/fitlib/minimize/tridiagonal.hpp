// SPDX-License-Identifier: MIT
// LAPACK-style kernels on symmetric tridiagonal matrices, as SciPy's vendored trlib uses them (GLTR's T).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <utility>

#include "fitlib/core/types.hpp"
#include "fitlib/minimize/subproblem.hpp"

namespace fitlib::detail::gltr {

inline constexpr double eps = 2.2204460492503131e-16;         // trlib's TRLIB_EPS
inline constexpr double eps_pow_4 = 5.4774205922939014e-07;   // eps^0.4
inline constexpr double eps_pow_5 = 1.4901161193847656e-08;   // eps^0.5
inline constexpr double eps_pow_75 = 1.8189894035458565e-12;  // eps^0.75

// Reductions run sequentially, left to right, in the order netlib's ddot/dnrm2/dgemv use, so the
// recurrences see SciPy's roundings (trust-region.md §8, determinism).
using detail::dot_sequential;

// Plain sum of squares (what reference dnrm2 computes for mid-range values); rescaled only when
// that over- or underflows.
inline double nrm2(const double* x, index_t n) {
  const double ss = dot_sequential(x, x, n);
  if (std::isfinite(ss) && (ss > 1e-290 || ss == 0)) return std::sqrt(ss);
  double scale = 0;
  for (index_t i = 0; i < n; ++i) scale = std::max(scale, std::abs(x[i]));
  if (scale == 0 || !std::isfinite(scale)) return std::isnan(ss) ? ss : scale;
  double s = 0;
  for (index_t i = 0; i < n; ++i) {
    const double t = x[i] / scale;
    s += t * t;
  }
  return scale * std::sqrt(s);
}

// LDLᵀ of the symmetric tridiagonal (d, e) in place, as LAPACK dpttrf: e becomes the unit-lower
// multipliers, d the pivots. Fails at the first pivot that is not > 0 (a NaN pivot passes, as there).
inline bool pttrf(index_t n, double* d, double* e) {
  for (index_t i = 0; i + 1 < n; ++i) {
    if (d[i] <= 0) return false;
    const double ei = e[i];
    e[i] = ei / d[i];
    d[i + 1] = d[i + 1] - e[i] * ei;
  }
  return !(d[n - 1] <= 0);
}

// Solve with the factor of pttrf, as LAPACK dpttrs/dptts2.
inline void pttrs(index_t n, const double* d, const double* e, double* b) {
  if (n == 1) {
    b[0] *= 1.0 / d[0];
    return;
  }
  for (index_t i = 1; i < n; ++i) b[i] = b[i] - b[i - 1] * e[i - 1];
  b[n - 1] = b[n - 1] / d[n - 1];
  for (index_t i = n - 2; i >= 0; --i) b[i] = b[i] / d[i] - b[i + 1] * e[i];
}

// Iterative refinement of x for (d, e)·x = b, as LAPACK dptrfs (trlib calls it inside the Newton
// loop, §5.1 `refine`); the forward-error bound it also computes is not needed. r and w: n scratch.
inline void ptrfs(index_t n, const double* d, const double* e, const double* df, const double* ef, const double* b,
                  double* x, double* r, double* w) {
  constexpr double lapack_eps = eps / 2;  // DLAMCH('Epsilon')
  constexpr double safe1 = 4 * std::numeric_limits<double>::min();
  constexpr double safe2 = safe1 / lapack_eps;
  double lstres = 3;
  for (int count = 1;; ++count) {
    if (n == 1) {
      const double bi = b[0], dx = d[0] * x[0];
      r[0] = bi - dx;
      w[0] = std::abs(bi) + std::abs(dx);
    } else {
      {
        const double bi = b[0], dx = d[0] * x[0], ex = e[0] * x[1];
        r[0] = bi - dx - ex;
        w[0] = std::abs(bi) + std::abs(dx) + std::abs(ex);
      }
      for (index_t i = 1; i < n - 1; ++i) {
        const double bi = b[i], cx = e[i - 1] * x[i - 1], dx = d[i] * x[i], ex = e[i] * x[i + 1];
        r[i] = bi - cx - dx - ex;
        w[i] = std::abs(bi) + std::abs(cx) + std::abs(dx) + std::abs(ex);
      }
      const double bi = b[n - 1], cx = e[n - 2] * x[n - 2], dx = d[n - 1] * x[n - 1];
      r[n - 1] = bi - cx - dx;
      w[n - 1] = std::abs(bi) + std::abs(cx) + std::abs(dx);
    }
    double berr = 0;
    for (index_t i = 0; i < n; ++i)
      berr = std::max(berr, w[i] > safe2 ? std::abs(r[i]) / w[i] : (std::abs(r[i]) + safe1) / (w[i] + safe1));
    if (!(berr > lapack_eps && 2 * berr <= lstres && count <= 5)) return;
    pttrs(n, df, ef, r);
    for (index_t i = 0; i < n; ++i) x[i] = x[i] + r[i];
    lstres = berr;
  }
}

// The roots t₁ ≤ t₂ of t² + c_lin·t + c_abs, each polished by one Newton step (§5.5.3).
inline std::pair<double, double> quadratic_zero(double c_abs, double c_lin, double tol) {
  const double lin_sq = c_lin * c_lin;
  double t1 = 0, t2 = 0;
  if (std::abs(c_abs) > tol * lin_sq) {
    double q = lin_sq - 4.0 * c_abs;
    if (std::abs(q) <= (eps * c_lin) * (eps * c_lin)) {
      t1 = t2 = -0.5 * c_lin;  // numerically a double root; Newton below refines it
    } else if (q < 0) {
      return {0.0, 0.0};  // no real root: trlib returns zeros unpolished
    } else {
      t1 = -0.5 * (c_lin + std::copysign(std::sqrt(q), c_lin));  // the sign avoids cancellation
      t2 = c_abs / t1;
      if (t2 < t1) std::swap(t1, t2);
    }
  } else if (c_lin < 0) {
    t2 = -c_lin;
  } else {
    t1 = -c_lin;
  }
  double q = (t1 + c_lin) * t1 + c_abs, dq = 2.0 * t1 + c_lin;
  if (dq != 0) t1 = t1 - q / dq;
  q = (t2 + c_lin) * t2 + c_abs;
  dq = 2.0 * t2 + c_lin;
  if (dq != 0) t2 = t2 - q / dq;
  return {t1, t2};
}

// Gershgorin bracket {low, up} of the spectrum of (d, e), n ≥ 2; the last row's upper term uses d − |e|
// (trlib's quirk, §5.5.1), still an upper bound.
inline std::pair<double, double> gershgorin_bracket(index_t n, const double* d, const double* e) {
  double oabs0 = std::abs(e[0]), oabs1 = std::abs(e[n - 2]);
  double low = std::fmin(d[0] - oabs0, d[n - 1] - oabs1);
  double up = std::fmax(d[0] + oabs0, d[n - 1] - oabs1);
  for (index_t i = 1; i < n - 1; ++i) {
    oabs1 = std::abs(e[i]);
    low = std::fmin(low, d[i] - oabs0 - oabs1);
    up = std::fmax(up, d[i] + oabs0 + oabs1);
    oabs0 = oabs1;
  }
  return {low, up};
}

// Leftmost eigenvalue of an irreducible symmetric tridiagonal (d, e) by safeguarded Newton on the last
// LDLᵀ pivot of T − tI (§5.5.1, trlib's cold start; trlib never warm-starts it from SciPy).
inline double leftmost_irreducible(index_t n, const double* d, const double* e, index_t itmax, double tol) {
  if (n == 1) return d[0];
  auto [low, up] = gershgorin_bracket(n, d, e);
  double t = low + .1 * (up - low);
  const index_t max_passes = itmax * n;
  for (index_t pass = 1;; ++pass) {
    if (pass > max_passes) return t;
    index_t n_neg = 0;
    double piv = 0, dpiv = 0;
    bool restart = false;
    for (index_t j = 0; j < n; ++j) {
      if (j == 0) {
        piv = d[0] - t;
        dpiv = -1.0;
      } else {
        const double ratio = e[j - 1] / piv;
        dpiv = -1.0 + e[j - 1] * e[j - 1] * dpiv / (piv * piv);
        piv = d[j] - t - e[j - 1] * ratio;
      }
      if (piv == 0.0) {
        if (n_neg == 0 && j + 1 == n) return t;  // T − tI singular with no negative pivot: t is the eigenvalue
        up = t;
        t = 0.5 * (low + up);
        restart = true;
        break;
      }
      if (piv < 0.0) {
        ++n_neg;
        up = t;
        if (n_neg > 1) {  // right of the leftmost eigenvalue by more than one
          t = 0.5 * (low + up);
          restart = true;
          break;
        }
      }
    }
    if (restart) continue;
    if (n_neg == 0)
      low = t;
    else
      up = t;
    const double scale = std::fmax(1.0, std::fmax(std::abs(low), std::abs(up)));
    if (up - low <= tol * scale || std::abs(piv) <= tol) return t;
    const double dt = -piv / dpiv, attempt = t + dt;
    if (low <= attempt && attempt <= up) {
      if (std::abs(dt) <= tol * scale) return t;
      t = attempt;
    } else {
      t = .5 * (low + up);
    }
  }
}

// A fixed pseudo-random stream (splitmix64) for the inverse-iteration start vectors: trlib seeds
// rand() with time(NULL) (§5.5.2); a fixed seed keeps fitlib deterministic.
inline double start_value(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * 0x1.0p-53;  // uniform in [0, 1), like rand()/RAND_MAX
}

/// How `eigen_inverse` ended.
enum class InverseIterationExit : int {
  converged = 0,          ///< |1/‖y‖ − π| ≤ tol
  not_converged = -1,     ///< itmax solves from every start vector; the best vector is returned
  no_shift_factors = -2,  ///< no shift π made T − lam·I + πI factor
};


// Eigenvector of (d, e) for the eigenvalue estimate lam by inverse iteration (§5.5.2): shift until
// T − lam·I + πI factors, then up to itmax solves from each of 5 start vectors (trlib's codes 0, −1, −2
// are InverseIterationExit's values). df, ef: factor scratch; eig: the result; best: scratch.
inline InverseIterationExit eigen_inverse(index_t n, const double* d, const double* e, double lam, int itmax, double tol,
                                          double* df, double* ef, double* eig, double* best) {
  double pert = 0, minuslam = -lam;
  bool factored = false;
  while (pert <= 1.0 / eps) {
    for (index_t i = 0; i < n; ++i) df[i] = d[i] + minuslam;
    for (index_t i = 0; i + 1 < n; ++i) ef[i] = e[i];
    if (pttrf(n, df, ef)) {
      factored = true;
      break;
    }
    pert = pert == 0.0 ? eps_pow_4 * std::fmax(1.0, -lam) : 10.0 * pert;
    minuslam = pert - lam;
  }
  if (!factored) return InverseIterationExit::no_shift_factors;
  constexpr int n_start = 5;
  std::uint64_t stream = 0x5EEDF17B1DULL;
  double best_res = std::numeric_limits<double>::infinity();
  for (int start = 0; start < n_start; ++start) {
    for (index_t i = 0; i < n; ++i) eig[i] = start_value(stream);
    double inv = 1.0 / nrm2(eig, n);
    for (index_t i = 0; i < n; ++i) eig[i] *= inv;
    double res = std::numeric_limits<double>::infinity();
    for (int it = 1; it <= itmax; ++it) {
      pttrs(n, df, ef, eig);
      inv = 1.0 / nrm2(eig, n);
      for (index_t i = 0; i < n; ++i) eig[i] *= inv;
      res = std::abs(inv - pert);
      if (res <= tol) return InverseIterationExit::converged;
    }
    // trlib reruns the start with the least final residual; keeping that final vector is the same.
    if (res < best_res || start == 0) {
      best_res = res;
      std::copy(eig, eig + n, best);
    }
  }
  std::copy(best, best + n, eig);
  return InverseIterationExit::not_converged;
}

// Diagonal shifts that make the tridiagonal (d, e) safely positive definite (trlib's
// tri_factor_regularize_posdef, used by the convexify re-solve, §5.8).
inline void regularize_posdef(index_t n, const double* d, const double* e, double tol_away, double security,
                              double* reg) {
  reg[0] = d[0] <= tol_away ? security * tol_away : 0.0;
  double piv = d[0] + reg[0];
  for (index_t i = 0; i + 1 < n; ++i) {
    reg[i + 1] = 0.0;
    if (d[i + 1] - e[i] * e[i] / piv <= tol_away * piv) reg[i + 1] = security * std::abs(e[i] * e[i] / piv - d[i + 1]);
    piv = d[i + 1] + reg[i + 1] - e[i] * e[i] / piv;
  }
}

}  // namespace fitlib::detail::gltr
