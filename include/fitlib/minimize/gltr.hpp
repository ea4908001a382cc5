// SPDX-License-Identifier: MIT
// Gltr: SciPy's trust-krylov subproblem (GLTR as run by SciPy's vendored trlib), with HOTSTART re-solves.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "fitlib/core/error.hpp"
#include "fitlib/core/types.hpp"
#include "fitlib/minimize/subproblem.hpp"

namespace fitlib {

/// Options of the GLTR subproblem solver.
struct GltrOptions {
  /// SciPy's `inexact` (trust-region.md §5.1). true: forcing-sequence tolerances
  /// η_i = min(0.5, ‖g₀‖), η_b = max(1e-6, min(0.5, √‖g₀‖)) (trlib's tol_rel −2/−3);
  /// false: fixed relative tolerances η_i = 1e-8 (interior), η_b = 1e-6 (boundary).
  bool inexact = true;

  /// Every value of every field is valid; kept so all option aggregates validate alike.
  void validate() const {}
};

/// What the last `Gltr::solve` did, in trlib's terms (trust-region.md §5.3, §5.5, §5.7), for tests and logs.
struct GltrDiagnostics {
  /// The solve re-used the stored Krylov data (trlib's HOTSTART, init = 2) and spent no new HVP.
  bool hotstart = false;
  /// trlib's iteration counter at exit (iwork[1], SciPy's `trlib_iter_last`); a fresh solve spent
  /// `iterations + 1` HVPs unless convexify (§5.8) ran.
  index_t iterations = 0;
  /// trlib's return code (§5.3: 0 conv_bound, 1 conv_interior, 2 approx_hard, 3/0/1 tridiagonal codes
  /// in Lanczos mode, 4 hard_init_lam, 5 fail_hard, 6 unbounded, 7 unlikely_conv, −1 itmax,
  /// −5 fail_numeric, −7 fail_ttr, −9 unexpected_interior).
  int exit_code = 0;
  /// The last tridiagonal solve's code (iwork[9]; §5.5: 0 conv_bound, 1 conv_interior, 3 newton_break,
  /// 4 hard_init_lam, −1 itmax, −2 fail_factor, −4 fail_eig).
  int exit_tri = 0;
  /// Newton iterations of the last tridiagonal solve (iwork[11]).
  index_t newton_iterations = 0;
  /// Iteration at which CG broke down and Lanczos took over (§5.6), −1 if it never did (iwork[8]).
  index_t lanczos_switch = -1;
  /// Rows of T (and Lanczos vectors) a later HOTSTART on this iterate will use.
  index_t krylov_dimension = 0;
  /// The convexify check (§5.8) asked for the true model value.
  bool convexify_checked = false;
  /// … and the tridiagonal problem was re-solved with a regularised T.
  bool convexified = false;
  /// Extreme Rayleigh quotients pᵀHp/‖p‖² seen in the Krylov process (fwork[13], fwork[14]).
  double ray_max = 0, ray_min = 0;
};

namespace detail::gltr {

inline constexpr double eps = 2.2204460492503131e-16;         // trlib's TRLIB_EPS
inline constexpr double eps_pow_4 = 5.4774205922939014e-07;   // eps^0.4
inline constexpr double eps_pow_5 = 1.4901161193847656e-08;   // eps^0.5
inline constexpr double eps_pow_75 = 1.8189894035458565e-12;  // eps^0.75

// Tridiagonal solve exit codes (trust-region.md §5.5).
inline constexpr int tri_conv_bound = 0;
inline constexpr int tri_conv_interior = 1;
inline constexpr int tri_newton_break = 3;
inline constexpr int tri_hard_init_lam = 4;
inline constexpr int tri_itmax = -1;
inline constexpr int tri_fail_factor = -2;
inline constexpr int tri_fail_eig = -4;

// The Krylov driver's exit codes (trust-region.md §5.3).
inline constexpr int conv_bound = 0;
inline constexpr int conv_interior = 1;
inline constexpr int approx_hard = 2;
inline constexpr int hard_init_lam = 4;
inline constexpr int fail_hard = 5;
inline constexpr int unbounded = 6;
inline constexpr int unlikely_conv = 7;
inline constexpr int itmax_reached = -1;
inline constexpr int fail_numeric = -5;
inline constexpr int fail_ttr = -7;
inline constexpr int unexpected_interior = -9;

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

// Leftmost eigenvalue of an irreducible symmetric tridiagonal (d, e) by safeguarded Newton on the last
// LDLᵀ pivot of T − tI (§5.5.1, trlib's cold start; trlib never warm-starts it from SciPy).
inline double leftmost_irreducible(index_t n, const double* d, const double* e, index_t itmax, double tol) {
  if (n == 1) return d[0];
  // Gershgorin bracket; the last row's upper term uses d − |e| (trlib's quirk, §5.5.1), still an upper bound.
  double oabs0 = std::abs(e[0]), oabs1 = std::abs(e[n - 2]);
  double low = std::fmin(d[0] - oabs0, d[n - 1] - oabs1);
  double up = std::fmax(d[0] + oabs0, d[n - 1] - oabs1);
  for (index_t i = 1; i < n - 1; ++i) {
    oabs1 = std::abs(e[i]);
    low = std::fmin(low, d[i] - oabs0 - oabs1);
    up = std::fmax(up, d[i] + oabs0 + oabs1);
    oabs0 = oabs1;
  }
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

// Eigenvector of (d, e) for the eigenvalue estimate lam by inverse iteration (§5.5.2): shift until
// T − lam·I + πI factors, then up to itmax solves from each of 5 start vectors; returns 0 on
// convergence (|1/‖y‖ − π| ≤ tol), −1 with the best vector otherwise, −2 if no shift factors.
// df, ef: factor scratch; eig: the result; best: scratch.
inline int eigen_inverse(index_t n, const double* d, const double* e, double lam, int itmax, double tol, double* df,
                         double* ef, double* eig, double* best) {
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
  if (!factored) return -2;
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
      if (res <= tol) return 0;
    }
    // trlib reruns the start with the least final residual; keeping that final vector is the same.
    if (res < best_res || start == 0) {
      best_res = res;
      std::copy(eig, eig + n, best);
    }
  }
  std::copy(best, best + n, eig);
  return -1;
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

}  // namespace detail::gltr

/// SciPy's `trust-krylov` subproblem: the Generalized Lanczos Trust-Region method as SciPy's vendored
/// trlib runs it (trust-region.md §5), reproducing SciPy's steps, multipliers and HVP counts. While
/// the CG iterates stay inside the ball with positive curvature it is plain CG; after that it solves
/// the trust-region problem restricted to the Krylov space through the Lanczos tridiagonal T. A second
/// `solve` on the same iterate (after a rejected step) re-solves from the stored T and Lanczos vectors
/// with no new HVP (trlib's HOTSTART, §5.7, §6.6). Deliberate deviations from SciPy/trlib are marked
/// "Deviation" below.
class Gltr {
 public:
  static constexpr bool needs_hessian = false;

  Gltr() = default;
  explicit Gltr(const GltrOptions& options) : options_(options) { options_.validate(); }

  const GltrOptions& options() const { return options_; }

  /// Sizes every workspace for n parameters. The Lanczos vectors need (itmax + 1)·n doubles with
  /// itmax = min(10⁹/n, 2n) (§5.1, §8); up to 64 MiB they are allocated here, beyond that they grow on
  /// demand, doubling, so only a Krylov space larger than any seen before allocates.
  void reset(index_t n) {
    if (n < 1) throw usage_error("Gltr::reset: the number of parameters must be ≥ 1, got " + std::to_string(n));
    n_ = n;
    // SciPy: int(min(1e9/n, 2*n)), a float minimum truncated to int.
    itmax_ = static_cast<index_t>(std::min(1e9 / static_cast<double>(n), 2.0 * static_cast<double>(n)));
    itmax_ = std::max<index_t>(itmax_, 1);
    const auto m = static_cast<std::size_t>(itmax_ + 2);
    for (auto* v : {&alpha_, &beta_, &delta_, &gamma_, &neglin_, &h_, &h0_, &delta_fac0_, &gamma_fac0_, &delta_fac_,
                    &gamma_fac_, &convhist_, &tri_w_, &diag_lam_, &resid_, &absw_, &regdiag_, &eig_best_})
      v->assign(m, 0.0);
    const auto nn = static_cast<std::size_t>(n);
    for (auto* v : {&g0_, &g_, &gm_, &p_, &hp_, &s_, &hs_}) v->assign(nn, 0.0);
    constexpr index_t eager_bytes = index_t{64} << 20;
    q_rows_ = std::min<index_t>(itmax_ + 1, std::max<index_t>(2, eager_bytes / (8 * n)));
    q_.assign(static_cast<std::size_t>(q_rows_ * n), 0.0);
    krylov_ready_ = false;
    diag_ = {};
  }

  /// Starts a new iterate with gradient g (H is ignored: Gltr needs only HVPs).
  void new_iterate(std::span<const double> g, ConstBlockView<double> H = {}) {
    (void)H;
    if (static_cast<index_t>(g.size()) != n_)
      throw usage_error("Gltr::new_iterate: gradient has " + std::to_string(g.size()) + " entries, reset() was for " +
                        std::to_string(n_));
    std::copy(g.begin(), g.end(), g0_.begin());
    krylov_ready_ = false;
  }

  /// Solves min gᵀp + ½pᵀBp, ‖p‖ ≤ radius, with `hvp(v, Bv)` computing B·v. The first solve on an
  /// iterate builds the Krylov space; later ones (any radius, as in SciPy) re-solve from it with no HVP.
  template <class Hvp>
  SubproblemStep solve(double radius, Hvp&& hvp, std::span<double> p) {
    namespace d = detail::gltr;
    if (static_cast<index_t>(p.size()) != n_)
      throw usage_error("Gltr::solve: step has " + std::to_string(p.size()) + " entries, reset() was for " +
                        std::to_string(n_));
    if (!(radius > 0) || !std::isfinite(radius))
      throw usage_error("Gltr::solve: the trust radius must be positive and finite, got " + std::to_string(radius));
    diag_ = {};
    hvps_ = 0;
    index_t scipy_extra = 0;
    int ret;
    if (krylov_ready_) {
      diag_.hotstart = true;
      ret = hotstart(radius);
    } else {
      ret = fresh(radius, hvp);
      krylov_ready_ = true;
    }
    double model = obj_;
    // Convexify check (§5.8), only for non-negative codes as in trlib's wrapper.
    if (ret >= 0 && lam_ > 1e-2 * std::fmax(1.0, raymax_) && raymin_ < 0 && std::abs(raymin_) < 1e-8 * raymax_) {
      diag_.convexify_checked = true;
      hvp(static_cast<const double*>(s_.data()), hs_.data());
      ++hvps_;
      const double obj_true = .5 * d::dot_sequential(s_.data(), hs_.data(), n_) + d::dot_sequential(s_.data(), g0_.data(), n_);
      if (ret == d::conv_bound) {
        // trlib's quirk: status 200 skips the comparison, and SciPy evaluates the objective twice.
        ++scipy_extra;
        model = obj_true;  // Deviation: the exact model is at hand, report it rather than T's.
      } else if (std::abs(obj_ - obj_true) > std::fmax(1e-6, 1e-1 * std::abs(obj_true)) || obj_true > 0.0) {
        diag_.convexified = true;
        ret = convexify_resolve(radius);
        // Deviation: the model of the returned step under the true T (trlib reports the regularised one).
        model = tri_objective(tri_rows_);
      } else {
        ++scipy_extra;  // the "no mismatch" path also leaves OBJVAL pending: SciPy evaluates it again
        model = obj_true;  // Deviation: exact model instead of T's estimate, at no extra cost.
      }
    }
    std::copy(s_.begin(), s_.end(), p.begin());
    SubproblemStep step;
    step.lambda = lam_;
    step.hits_boundary = lam_ > 0.0;  // SciPy's rule (§5.1), whatever the exit code
    step.model = model;
    step.hvps = hvps_;
    step.scipy_hvps = hvps_ + scipy_extra + 1;  // + the outer loop's m(p) (§1.5)
    step.failed = !std::all_of(s_.begin(), s_.end(), [](double x) { return std::isfinite(x); });
    diag_.iterations = ii_;
    diag_.exit_code = ret;
    diag_.exit_tri = exit_tri_;
    diag_.newton_iterations = newton_iters_;
    diag_.lanczos_switch = lanczos_switch_;
    diag_.krylov_dimension = hot_rows_;
    diag_.ray_max = raymax_;
    diag_.ray_min = raymin_;
    return step;
  }

  /// What the last solve did.
  const GltrDiagnostics& diagnostics() const { return diag_; }
  /// trlib's iteration counter after the last solve (SciPy's `trlib_iter_last`).
  index_t iterations() const { return diag_.iterations; }
  /// The last solve was a HOTSTART (no new HVP).
  bool hotstart() const { return diag_.hotstart; }
  /// trlib's iteration cap, min(10⁹/n, 2n) (§5.1).
  index_t itmax() const { return itmax_; }

 private:
  static constexpr double zero_ = 2e-16;    // trlib's absolute `zero` (§5.1, §5.9d)
  static constexpr double obj_lo_ = -1e20;  // unbounded-below threshold
  static constexpr index_t itmax_lanczos_ = 100;

  double* q_row(index_t k) { return q_.data() + k * n_; }

  // Room for Lanczos vector k. Grows (doubling) only past the largest Krylov space seen so far.
  void ensure_q_row(index_t k) {
    if (k < q_rows_) return;
    q_rows_ = std::min<index_t>(itmax_ + 1, std::max<index_t>(2 * q_rows_, k + 1));
    q_.resize(static_cast<std::size_t>(q_rows_ * n_), 0.0);
  }

  // s = Σ_{j<rows} h_j q_j (trlib's RETRANSF), summed in j order like SciPy's gemv.
  void retransform(index_t rows) {
    std::fill(s_.begin(), s_.end(), 0.0);
    for (index_t j = 0; j < rows; ++j) {
      const double hj = h_[j];
      const double* q = q_row(j);
      for (index_t i = 0; i < n_; ++i) s_[i] = s_[i] + hj * q[i];
    }
  }

  // ½hᵀT h + γ₀h₀ = ½hᵀ(T h − 2·neglin), formed as trlib does (dlagtm then ddot).
  double tri_objective(index_t n0) {
    const double* d = delta_.data();
    const double* e = gamma_.data();
    const double* h = h_.data();
    double* w = tri_w_.data();
    for (index_t i = 0; i < n0; ++i) w[i] = -2.0 * neglin_[i];
    if (n0 == 1) {
      w[0] = w[0] + d[0] * h[0];
    } else {
      w[0] = w[0] + d[0] * h[0] + e[0] * h[1];
      w[n0 - 1] = w[n0 - 1] + e[n0 - 2] * h[n0 - 2] + d[n0 - 1] * h[n0 - 1];
      for (index_t i = 1; i < n0 - 1; ++i) w[i] = w[i] + e[i - 1] * h[i - 1] + d[i] * h[i] + e[i] * h[i + 1];
    }
    return 0.5 * detail::gltr::dot_sequential(h, w, n0);
  }

  // (T + λI) factored into delta_fac0_/gamma_fac0_, with diag_lam_ = diag(T) + λ kept for refinement.
  bool factor_shifted(index_t n0, double lam) {
    for (index_t i = 0; i < n0; ++i) {
      diag_lam_[i] = delta_[i] + lam;
      delta_fac0_[i] = diag_lam_[i];
    }
    for (index_t i = 0; i + 1 < n0; ++i) gamma_fac0_[i] = gamma_[i];
    return detail::gltr::pttrf(n0, delta_fac0_.data(), gamma_fac0_.data());
  }

  // h0 = (T + λ0 I)⁻¹·neglin with the current factor.
  void solve_h0_only(index_t n0) {
    for (index_t i = 0; i < n0; ++i) h0_[i] = neglin_[i];
    detail::gltr::pttrs(n0, delta_fac0_.data(), gamma_fac0_.data(), h0_.data());
  }
  // … and its norm.
  double solve_h0(index_t n0) {
    solve_h0_only(n0);
    return detail::gltr::nrm2(h0_.data(), n0);
  }

  // The tridiagonal trust-region problem on T_{0..n0−1} (trlib_tri_factor_min with one irreducible
  // block, trust-region.md §5.5). Writes h_, lam_, obj_, lam0_ and the warm-start state.
  int tri_solve(index_t n0, double radius, index_t newton_itmax, bool warm_fac0) {
    namespace d = detail::gltr;
    tri_rows_ = n0;
    newton_iters_ = 0;
    for (index_t i = 0; i < n0; ++i) h_[i] = 0.0;  // the returned h stays 0 on a failure exit, as in trlib
    double norm_h0 = 0;
    int ret = d::tri_conv_bound;
    // On a failure h stays 0 (so s = 0) and λ keeps its last value, as in trlib; trlib's obj would stay
    // stale too, but the model reported must be that of the step.
    auto fail = [this](int code) {
      obj_ = 0.0;
      return code;
    };
    // 1) λ0 with T + λ0 I ≻ 0 and ‖h(λ0)‖ ≥ Δ: warm from the previous λ0 if that still qualifies …
    if (warm_lam0_) {
      if (!warm_fac0) {
        if (factor_shifted(n0, lam0_))
          warm_fac0 = true;
        else
          warm_lam0_ = false;
      }
      if (warm_fac0) {
        norm_h0 = solve_h0(n0);
        warm_lam0_ = norm_h0 >= radius;
      }
    }
    // … else cold: λ0 = 0 if T ≻ 0, otherwise a bracketed shift right of −θ, θ = leftmost eigenvalue.
    if (!warm_lam0_) {
      lam0_ = 0.0;
      for (index_t i = 0; i < n0; ++i) {
        delta_fac0_[i] = delta_[i];
        h0_[i] = neglin_[i];
      }
      for (index_t i = 0; i + 1 < n0; ++i) gamma_fac0_[i] = gamma_[i];
      bool ok = d::pttrf(n0, delta_fac0_.data(), gamma_fac0_.data());
      if (ok) {
        norm_h0 = solve_h0(n0);
      } else {
        leftmost_ = d::leftmost_irreducible(n0, delta_.data(), gamma_.data(), 1000, d::eps_pow_75);
        double pert_low = -d::eps_pow_5 * std::abs(leftmost_), pert_up = 1.0 / d::eps, lam_pert = 0.0;
        for (int jj = 0; jj < 50; ++jj) {
          lam0_ = -leftmost_ + lam_pert;
          ok = factor_shifted(n0, lam0_);
          if (ok) {
            pert_up = lam_pert;
            norm_h0 = solve_h0(n0);
            if (norm_h0 >= radius) break;
            lam_pert = .5 * (pert_low + pert_up);
          } else {
            pert_low = lam_pert;
            if (pert_up == 1.0 / d::eps)
              lam_pert = lam_pert == 0.0 ? (1.0 + std::abs(leftmost_)) * d::eps_pow_75 : 2.0 * lam_pert;
            else
              lam_pert = .5 * (pert_low + pert_up);
          }
        }
        if (!ok) {
          lam0_ = -leftmost_ + pert_up;
          if (!factor_shifted(n0, lam0_)) return fail(d::tri_fail_factor);
          // trlib solves here without re-copying neglin into h0 (literal replication; the 50-try
          // bracket search practically never ends on a failed factorisation).
          d::pttrs(n0, delta_fac0_.data(), gamma_fac0_.data(), h0_.data());
          norm_h0 = d::nrm2(h0_.data(), n0);
        }
      }
    }
    // 2) Newton on φ(λ) = 1/‖h(λ)‖ − 1/Δ from the left, where φ is concave (§5.5 step 2).
    if (norm_h0 >= radius) {
      for (;;) {
        double* w = tri_w_.data();
        const double inv = 1.0 / norm_h0;
        for (index_t i = 0; i < n0; ++i) w[i] = inv * h0_[i];
        double wdw = w[0] * w[0] / delta_fac0_[0];
        for (index_t j = 1; j < n0; ++j) {
          w[j] = w[j] - gamma_fac0_[j - 1] * w[j - 1];
          wdw += w[j] * w[j] / delta_fac0_[j];
        }
        const double dlam = (norm_h0 - radius) / (radius * wdw);
        ++newton_iters_;
        if (lam0_ + dlam == lam0_ || std::abs(dlam) <= 1e-11 * std::fmax(1.0, std::abs(lam0_)) ||
            newton_iters_ > newton_itmax) {
          ret = newton_iters_ > newton_itmax ? d::tri_itmax : d::tri_newton_break;
          break;
        }
        lam0_ += dlam;
        if (!factor_shifted(n0, lam0_)) return fail(d::tri_fail_factor);
        solve_h0_only(n0);
        d::ptrfs(n0, diag_lam_.data(), gamma_.data(), delta_fac0_.data(), gamma_fac0_.data(), neglin_.data(),
                 h0_.data(), resid_.data(), absw_.data());
        norm_h0 = d::nrm2(h0_.data(), n0);
        if (norm_h0 - radius <= d::eps * radius) {
          ret = d::tri_conv_bound;
          break;
        }
      }
    }
    warm_lam0_ = true;
    // 3) Classification: interior, or h too short even at λ0 ≈ −θ (the hard case: add t·u, §5.5 step 3).
    if (std::abs(radius - norm_h0) >= d::eps_pow_5 * radius) {
      if (lam0_ == 0.0) {
        ret = d::tri_conv_interior;
      } else {
        const int sub = d::eigen_inverse(n0, delta_.data(), gamma_.data(), leftmost_, 10, d::eps_pow_5,
                                         delta_fac_.data(), gamma_fac_.data(), h_.data(), eig_best_.data());
        if (sub != 0 && sub != -1) {
          for (index_t i = 0; i < n0; ++i) h_[i] = 0.0;  // Deviation: trlib leaves the start vector in h
          return fail(d::tri_fail_eig);
        }
        const double* u = h_.data();
        const double zeta = d::dot_sequential(h0_.data(), u, n0);
        const auto [t1, t2] = d::quadratic_zero(norm_h0 * norm_h0 - radius * radius, 2.0 * zeta, d::eps_pow_75);
        const double u_neglin = d::dot_sequential(u, neglin_.data(), n0);
        const double lin = leftmost_ * zeta - u_neglin;
        const double t = .5 * leftmost_ * t1 * t1 + lin * t1 <= .5 * leftmost_ * t2 * t2 + lin * t2 ? t1 : t2;
        for (index_t i = 0; i < n0; ++i) h0_[i] = h0_[i] + t * u[i];
        ret = d::tri_hard_init_lam;
      }
    }
    lam_ = lam0_;
    for (index_t i = 0; i < n0; ++i) h_[i] = h0_[i];
    obj_ = tri_objective(n0);
    return ret;
  }

  // trlib's warm factor update: extend the LDLᵀ of T + λ0 I by row k (§5.3); usable iff the pivot stays > 0.
  bool extend_warm_factor(index_t k) {
    if (!warm_lam0_ || k == 0) return false;
    if (delta_fac0_[k - 1] == 0.0) return false;
    gamma_fac0_[k - 1] = gamma_[k - 1] / delta_fac0_[k - 1];
    delta_fac0_[k] = delta_[k] + lam0_ - gamma_[k - 1] * gamma_[k - 1] / delta_fac0_[k - 1];
    return delta_fac0_[k] > 0.0;
  }

  // The earlyterm rule, literally (§5.9c): over the last ten iterations the history never rose and
  // hist_{k−10} > 0.1·hist_k — steady progress, despite trlib's comment ("no significant progress").
  bool early_term(index_t k) const {
    for (index_t c = k - 10; c < k; ++c)
      if (convhist_[c + 1] > convhist_[c]) return false;
    return true;
  }

  // A fresh solve: CG while interior, then the boundary phase, possibly Lanczos mode (§5.3, §5.6).
  template <class Hvp>
  int fresh(double radius, Hvp& hvp) {
    namespace d = detail::gltr;
    const index_t n = n_;
    // trlib INIT / VEC_INIT (§5.3); M = I, so v ≡ g.
    ii_ = 0;
    pos_def_ = true;
    interior_ = true;
    warm_lam0_ = false;
    lanczos_switch_ = -1;
    exit_tri_ = 0;
    newton_iters_ = 0;
    tri_rows_ = 0;
    std::fill(gamma_.begin(), gamma_.end(), 0.0);
    std::fill(h_.begin(), h_.end(), 0.0);
    std::fill(s_.begin(), s_.end(), 0.0);
    std::fill(gm_.begin(), gm_.end(), 0.0);
    std::copy(g0_.begin(), g0_.end(), g_.begin());
    double v_dot_g = d::dot_sequential(g_.data(), g_.data(), n);
    if (v_dot_g == 0.0) {
      // Deviation: g = 0 would make trlib divide 0/0; the step is 0 (SciPy never solves at g = 0, §4).
      lam_ = 0;
      obj_ = 0;
      raymax_ = raymin_ = 0;
      hot_rows_ = 0;
      return d::conv_interior;
    }
    for (index_t i = 0; i < n; ++i) p_[i] = -g_[i];
    hvp(static_cast<const double*>(p_.data()), hp_.data());
    ++hvps_;
    double p_dot_hp = d::dot_sequential(p_.data(), hp_.data(), n);

    double eta_i, eta_b;
    if (options_.inexact) {  // trlib tol_rel_i = −2, tol_rel_b = −3
      eta_i = std::fmin(5e-1, std::sqrt(v_dot_g));
      eta_b = std::fmax(1e-6, std::fmin(5e-1, std::sqrt(std::sqrt(v_dot_g))));
    } else {
      eta_i = 1e-8;
      eta_b = 1e-6;
    }
    stop_i_ = std::fmax(0.0, eta_i * std::sqrt(v_dot_g));
    stop_i_ = stop_i_ * stop_i_;  // compared with ‖g‖², hence squared
    stop_b_ = std::fmax(0.0, eta_b * std::sqrt(v_dot_g));
    v_g_ = v_dot_g;
    p_hp_ = p_dot_hp;
    neglin_[0] = -std::sqrt(v_dot_g);
    cgl_ = 1.0;
    sigma_ = 1.0;
    leftmost_ = 0.0;
    lam_ = 0.0;
    obj_ = 0.0;
    s_mp_ = 0.0;
    s_ms_ = 0.0;
    p_mp_ = v_g_;
    raymax_ = raymin_ = p_hp_ / p_mp_;
    delta_[0] = 0.0;

    for (;;) {
      const index_t k = ii_;
      // CG_NEW_ITER
      if (std::abs(p_hp_) <= zero_) return lanczos(radius, hvp);
      alpha_[k] = v_g_ / p_hp_;
      delta_[k] += p_hp_ / v_g_;  // δ_k = 1/α_k + β_{k−1}/α_{k−1}; the second term was stored last iteration
      pos_def_ = pos_def_ && (alpha_[k] > 0.0);
      if (k > 0) sigma_ = -std::copysign(1.0, alpha_[k - 1]) * sigma_;
      cgl_ = sigma_ / std::sqrt(v_g_);
      if (k > 0) {
        s_mp_ = beta_[k - 1] * (s_mp_ + alpha_[k - 1] * p_mp_);
        p_mp_ = v_g_ + beta_[k - 1] * beta_[k - 1] * p_mp_;
      }
      const double sp_msp = s_ms_ + alpha_[k] * (2.0 * s_mp_ + alpha_[k] * p_mp_);
      raymax_ = std::fmax(raymax_, p_hp_ / p_mp_);
      raymin_ = std::fmin(raymin_, p_hp_ / p_mp_);
      interior_ = interior_ && pos_def_ && (sp_msp < radius * radius);
      // Lanczos vector q_k = σ_k g_k/‖g_k‖. trlib stores it one state later (with the gradient update);
      // storing it first means the exits below (fail_ttr, unexpected_interior) form s = Q h from a
      // written row rather than from SciPy's uninitialised memory.
      ensure_q_row(k);
      {
        double* q = q_row(k);
        for (index_t i = 0; i < n; ++i) q[i] = cgl_ * g_[i];
      }
      if (interior_) {
        s_ms_ = sp_msp;
        obj_ = obj_ - .5 * alpha_[k] * alpha_[k] * p_hp_;
        for (index_t i = 0; i < n; ++i) s_[i] = s_[i] + alpha_[k] * p_[i];
      } else {
        const bool warm_fac0 = extend_warm_factor(k);
        exit_tri_ = tri_solve(k + 1, radius, 100 + 3 * k, warm_fac0);
        if (exit_tri_ < 0) {  // NEWTON_BREAK (3) counts as success
          hot_rows_ = k + 1;
          retransform(k + 1);
          return d::fail_ttr;
        }
        if (exit_tri_ == d::tri_conv_interior && pos_def_) {
          hot_rows_ = k + 1;
          retransform(k + 1);
          return d::unexpected_interior;
        }
      }
      // CG_UPDATE_GRAD: g_{k+1} = g_k + α_k H p_k
      for (index_t i = 0; i < n; ++i) {
        gm_[i] = g_[i];
        g_[i] = g_[i] + alpha_[k] * hp_[i];
      }
      v_dot_g = d::dot_sequential(g_.data(), g_.data(), n);
      hot_rows_ = k + 1;
      // CG_UPDATE_GV
      if (std::isnan(v_dot_g)) {
        if (!interior_) retransform(k + 1);
        return d::fail_numeric;
      }
      if (v_dot_g <= zero_) {  // Krylov breakdown: the space is invariant
        gamma_[k] = 0.0;
        if (!interior_) retransform(k + 1);
        return d::fail_hard;
      }
      beta_[k] = v_dot_g / v_g_;
      delta_[k + 1] = (v_dot_g * p_hp_) / (v_g_ * v_g_);
      gamma_[k] = std::abs(std::sqrt(v_dot_g) * p_hp_ / (std::sqrt(v_g_) * v_g_));
      v_g_ = v_dot_g;
      // (sic) the interior history divides by the squared stop_i, as trlib does.
      convhist_[k] = interior_ ? std::sqrt(v_g_) / stop_i_ : (gamma_[k] * std::abs(h_[k])) / stop_b_;
      if (interior_ && v_g_ <= stop_i_) return d::conv_interior;
      if (!interior_ && gamma_[k] * std::abs(h_[k]) <= stop_b_) {
        retransform(k + 1);
        return d::conv_bound;
      }
      if (!interior_ && k > 10 && convhist_[k - 10] > 1e-1 * convhist_[k]) {
        if (early_term(k)) {
          retransform(k + 1);
          return d::unlikely_conv;
        }
        // else the unbounded test is skipped, as in trlib
      } else if (std::isnan(obj_) || obj_ < obj_lo_) {
        if (!interior_) retransform(k + 1);
        return d::unbounded;
      }
      // CG_UPDATE_DIR: p_{k+1} = −g_{k+1} + β_k p_k (1 HVP)
      for (index_t i = 0; i < n; ++i) p_[i] = -1.0 * g_[i] + beta_[k] * p_[i];
      hvp(static_cast<const double*>(p_.data()), hp_.data());
      ++hvps_;
      p_hp_ = d::dot_sequential(p_.data(), hp_.data(), n);
      ii_ = k + 1;
      if (ii_ >= itmax_) {
        // Deviation (§5.9a): trlib's T now has a row itmax whose δ lacks 1/α and whose Lanczos vector was
        // never written (SciPy's Q is np.empty), yet its HOTSTART solves with it. We keep only the
        // itmax complete rows for a later HOTSTART.
        hot_rows_ = k + 1;
        if (!interior_) retransform(k + 1);
        return d::itmax_reached;
      }
    }
  }

  // Lanczos mode after CG breaks down (|pᵀHp| ≤ 2e-16) at iteration k = ii_ (§5.6).
  template <class Hvp>
  int lanczos(double radius, Hvp& hvp) {
    namespace d = detail::gltr;
    const index_t n = n_;
    index_t k = ii_;
    lanczos_switch_ = k;
    if (k > 0) sigma_ = -std::copysign(1.0, alpha_[k - 1]) * sigma_;
    // q_k = σ g_k/‖g_k‖ as the new direction (1 HVP).
    {
      const double c = sigma_ / std::sqrt(v_g_);
      for (index_t i = 0; i < n; ++i) p_[i] = c * g_[i];
    }
    hvp(static_cast<const double*>(p_.data()), hp_.data());
    ++hvps_;
    double p_dot_hp = d::dot_sequential(p_.data(), hp_.data(), n);
    ensure_q_row(k);
    std::copy(p_.begin(), p_.end(), q_row(k));
    for (;;) {
      // L_UPDATE_P. Deviation: trlib stops here with fail_hard when |q_kᵀHq_k| ≤ 2e-16 (a "FIXME" in
      // trlib) and SciPy then returns Q·h with h never formed. A zero diagonal entry is no breakdown
      // for Lanczos (only γ_{k+1} = 0 is), and at a switch in iteration 0 it is certain, since q_0 ∝ p_0,
      // so we keep going.
      delta_[k] = p_dot_hp;  // overwrites CG's partial δ_k
      hot_rows_ = k + 1;
      raymax_ = std::fmax(raymax_, p_dot_hp);
      raymin_ = std::fmin(raymin_, p_dot_hp);
      const bool warm_fac0 = extend_warm_factor(k);
      exit_tri_ = tri_solve(k + 1, radius, 100 + 3 * k, warm_fac0);
      if (exit_tri_ < 0) {
        retransform(k + 1);
        return d::fail_ttr;
      }
      if (exit_tri_ == d::tri_hard_init_lam) {
        retransform(k + 1);
        return d::hard_init_lam;
      }
      // Three-term recurrence t = H q_k − δ_k q_k − γ_k q_{k−1}, with g holding γ_k q_k (or, right after
      // the switch, the CG gradient g_k = σ‖g_k‖ q_k) and gm holding γ_{k−1} q_{k−1}.
      double flt1, flt2, flt3 = 1.0;
      if (k == lanczos_switch_) {
        if (k == 0) {
          // Deviation: trlib reads gamma[−1] here (memory before the array); the recurrence needs
          // q_0 = g_0/‖g_0‖ and no q_{−1}, and gm must hold q_0 for the next step's −γ_1·gm.
          flt1 = -delta_[0] / std::sqrt(v_g_);
          flt2 = 0.0;
          flt3 = 1.0 / std::sqrt(v_g_);
        } else {
          flt1 = -delta_[k] / std::sqrt(v_g_) * sigma_;
          flt2 = -gamma_[k - 1] * cgl_;  // cgl_ still maps g_{k−1} to q_{k−1}
          // Deviation: trlib uses γ_k/‖g_k‖, which leaves gm = σγ_k q_k; with σ = −1 the next step adds
          // +γ_{k+1} q_k and the Lanczos vectors lose orthogonality at once (seen with SciPy 1.10.1).
          flt3 = sigma_ * gamma_[k - 1] / std::sqrt(v_g_);
        }
        cgl_ = 1.0;
      } else if (k < 2) {
        flt1 = -delta_[k] / gamma_[k - 1];
        flt2 = -gamma_[k - 1];
      } else {
        flt1 = -delta_[k] / gamma_[k - 1];
        flt2 = -gamma_[k - 1] / gamma_[k - 2];
      }
      // L update of the gradient; s_ as scratch as in SciPy's wrapper (s is re-formed by retransform).
      for (index_t i = 0; i < n; ++i) {
        const double t = hp_[i] + flt1 * g_[i] + flt2 * gm_[i];
        gm_[i] = flt3 * g_[i];
        g_[i] = t;
      }
      const double v_dot_g = d::dot_sequential(g_.data(), g_.data(), n);
      // L_CMP_CONV
      if (std::isnan(v_dot_g)) {
        retransform(k + 1);  // Deviation: SciPy returns the scratch vector when still "interior"
        return d::fail_numeric;
      }
      if (v_dot_g <= zero_) {
        gamma_[k] = std::sqrt(v_dot_g);
        retransform(k + 1);  // Deviation (§5.6 item 5): SciPy returns the scratch vector here
        return d::approx_hard;
      }
      gamma_[k] = std::sqrt(v_dot_g);
      v_g_ = v_dot_g * h_[k] * h_[k];  // squared residual (γ_{k+1} h_k)²
      // L_CHK_CONV; the squared residual against unsquared tolerances is trlib's (§5.6 item 3).
      convhist_[k] = interior_ ? std::sqrt(v_g_) / std::sqrt(stop_i_) : v_g_ / std::sqrt(stop_b_);
      if (exit_tri_ != d::tri_conv_interior && v_g_ <= std::sqrt(stop_b_)) {
        retransform(k + 1);
        return exit_tri_;
      }
      if (exit_tri_ == d::tri_conv_interior && v_g_ <= std::sqrt(stop_i_)) {
        retransform(k + 1);
        return exit_tri_;
      }
      if (!interior_ && k > 10 && convhist_[k - 10] > 1e-1 * convhist_[k]) {
        if (early_term(k)) {
          retransform(k + 1);
          return d::unlikely_conv;
        }
      } else if (std::isnan(obj_) || obj_ < obj_lo_) {
        retransform(k + 1);
        return d::unbounded;
      }
      // L_NEW_ITER
      ii_ = k + 1;
      if (ii_ >= itmax_ || ii_ - lanczos_switch_ >= itmax_lanczos_) {
        retransform(k + 1);
        return d::itmax_reached;
      }
      k = ii_;
      {
        const double c = 1.0 / gamma_[k - 1];
        for (index_t i = 0; i < n; ++i) p_[i] = c * g_[i];
      }
      hvp(static_cast<const double*>(p_.data()), hp_.data());
      ++hvps_;
      p_dot_hp = d::dot_sequential(p_.data(), hp_.data(), n);
      ensure_q_row(k);
      std::copy(p_.begin(), p_.end(), q_row(k));
    }
  }

  // HOTSTART (§5.7): the tridiagonal problem on the stored T at the new radius, warm from the last λ0;
  // earlyterm = 1 makes trlib return right after it, so no HVP.
  int hotstart(double radius) {
    namespace d = detail::gltr;
    const index_t rows = hot_rows_;
    if (rows == 0) {  // the g = 0 exit: nothing stored, the step stays 0
      std::fill(s_.begin(), s_.end(), 0.0);
      lam_ = 0;
      obj_ = 0;
      return d::conv_interior;
    }
    exit_tri_ = tri_solve(rows, radius, 100 + 3 * ii_, false);
    retransform(rows);
    if (exit_tri_ < 0) return d::fail_ttr;
    if (exit_tri_ == d::tri_hard_init_lam) return d::hard_init_lam;
    return d::unlikely_conv;
  }

  // trlib's HOTSTART_P (§5.8): re-solve with T shifted to be safely positive definite, from a cold start.
  int convexify_resolve(double radius) {
    namespace d = detail::gltr;
    const index_t rows = tri_rows_;
    d::regularize_posdef(rows, delta_.data(), gamma_.data(), 1e-12, 10.0, regdiag_.data());
    for (index_t i = 0; i < rows; ++i) delta_[i] = delta_[i] + regdiag_[i];
    warm_lam0_ = false;
    exit_tri_ = tri_solve(rows, radius, 100 + 3 * ii_, false);
    for (index_t i = 0; i < rows; ++i) delta_[i] = delta_[i] - regdiag_[i];  // restored as trlib does (daxpy −1)
    retransform(rows);
    return exit_tri_;
  }

  GltrOptions options_{};
  index_t n_ = 0;
  index_t itmax_ = 0;

  // Krylov data kept per iterate for HOTSTART: T (delta_, gamma_), Q (q_), ‖g₀‖ (neglin_[0]), warm λ0.
  std::vector<double> alpha_, beta_, delta_, gamma_, neglin_;
  std::vector<double> q_;
  index_t q_rows_ = 0;
  // Tridiagonal solver workspace: h, h(λ0), LDLᵀ factors, Newton/refinement scratch.
  std::vector<double> h_, h0_, delta_fac0_, gamma_fac0_, delta_fac_, gamma_fac_, convhist_, tri_w_, diag_lam_,
      resid_, absw_, regdiag_, eig_best_;
  // n-vectors: the gradient g₀, the CG/Lanczos gradient and its predecessor, direction, H·p, step, H·s.
  std::vector<double> g0_, g_, gm_, p_, hp_, s_, hs_;

  bool krylov_ready_ = false;
  index_t ii_ = 0, hot_rows_ = 0, tri_rows_ = 0, lanczos_switch_ = -1, newton_iters_ = 0, hvps_ = 0;
  int exit_tri_ = 0;
  bool pos_def_ = true, interior_ = true, warm_lam0_ = false;
  double stop_i_ = 0, stop_b_ = 0, v_g_ = 0, p_hp_ = 0, cgl_ = 1, sigma_ = 1, lam0_ = 0, lam_ = 0, obj_ = 0,
         leftmost_ = 0, s_mp_ = 0, p_mp_ = 0, s_ms_ = 0, raymax_ = 0, raymin_ = 0;
  GltrDiagnostics diag_{};
};

}  // namespace fitlib
