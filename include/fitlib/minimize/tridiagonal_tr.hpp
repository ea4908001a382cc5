// SPDX-License-Identifier: MIT
// GLTR's tridiagonal trust-region subproblem (trlib_tri_factor_min on one irreducible block), warm-startable.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <vector>

#include "fitlib/core/types.hpp"
#include "fitlib/minimize/tridiagonal.hpp"

namespace fitlib::detail::gltr {

/// How a tridiagonal solve ended (trust-region.md §5.5); the values are trlib's.
enum class TriExit : int {
  conv_bound = 0,
  conv_interior = 1,
  newton_break = 3,  ///< Newton stalled; counts as success
  hard_init_lam = 4,
  itmax = -1,
  fail_factor = -2,
  fail_eig = -4,
};

/// trlib's negative codes (itmax and the failures): the Krylov driver stops with fail_ttr after one.
inline bool unusable(TriExit e) { return static_cast<int>(e) < 0; }

/// The problem min ½hᵀTh − neglinᵀh, ‖h‖ ≤ Δ on the leading `rows` rows of the symmetric tridiagonal T
/// (diagonal `delta`, off-diagonal `gamma`); the arrays belong to the caller (GLTR's Krylov data).
struct TriProblem {
  const double* delta;
  const double* gamma;
  const double* neglin;
  index_t rows;
};

/// What a tridiagonal solve returns; h itself stays in the solver (`TriSolver::h`).
struct TriResult {
  TriExit exit;
  /// h's multiplier λ; NaN on a failure, where trlib leaves λ as it was.
  double lambda;
  /// ½hᵀTh − neglinᵀh; 0 on a failure, where h = 0 (trlib's obj would stay stale, but the model
  /// reported must be that of the step).
  double objective;

  bool failed() const { return exit == TriExit::fail_factor || exit == TriExit::fail_eig; }
};

/// The tridiagonal trust-region solver (trust-region.md §5.5): λ0 with T + λ0 I ≻ 0, Newton on the
/// secular equation from the left, the hard case by inverse iteration. It keeps h, h(λ0), the LDLᵀ
/// factor of T + λ0 I and λ0 between solves, so that the next solve on a grown or re-radiused T can
/// start warm from λ0 (trlib's warm start, §5.3).
class TriSolver {
 public:
  /// Sizes the workspaces for up to m rows.
  void reset(std::size_t m) {
    for (auto* v : {&h_, &h0_, &delta_fac0_, &gamma_fac0_, &delta_fac_, &gamma_fac_, &tri_w_, &diag_lam_, &resid_, &absw_, &eig_best_})
      v->assign(m, 0.0);
  }

  /// A new Krylov space: no warm λ0, no leftmost eigenvalue estimate (θ = 0), h = 0, no solve yet.
  void restart() {
    warm_lam0_ = false;
    newton_iters_ = 0;
    rows_ = 0;
    std::fill(h_.begin(), h_.end(), 0.0);
    leftmost_ = 0.0;
  }

  /// The next solve starts cold (the convexify re-solve on a shifted T, §5.8).
  void forget_warm_start() { warm_lam0_ = false; }

  /// h of the last solve (the coefficients of the step in the Lanczos basis).
  const double* h() const { return h_.data(); }
  /// Rows of T the last solve used.
  index_t rows() const { return rows_; }
  /// Newton iterations of the last solve.
  index_t newton_iterations() const { return newton_iters_; }

  // ½hᵀT h + γ₀h₀ = ½hᵀ(T h − 2·neglin), formed as trlib does (dlagtm then ddot).
  double objective(const TriProblem& t) {
    const index_t n0 = t.rows;
    const double* d = t.delta;
    const double* e = t.gamma;
    const double* h = h_.data();
    double* w = tri_w_.data();
    for (index_t i = 0; i < n0; ++i) w[i] = -2.0 * t.neglin[i];
    if (n0 == 1) {
      w[0] = w[0] + d[0] * h[0];
    } else {
      w[0] = w[0] + d[0] * h[0] + e[0] * h[1];
      w[n0 - 1] = w[n0 - 1] + e[n0 - 2] * h[n0 - 2] + d[n0 - 1] * h[n0 - 1];
      for (index_t i = 1; i < n0 - 1; ++i) w[i] = w[i] + e[i - 1] * h[i - 1] + d[i] * h[i] + e[i] * h[i + 1];
    }
    return 0.5 * dot_sequential(h, w, n0);
  }

  // trlib's warm factor update: extend the LDLᵀ of T + λ0 I by T's last row k (§5.3); usable iff the
  // pivot stays > 0.
  bool extend_warm_factor(const TriProblem& t) {
    const index_t k = t.rows - 1;
    if (!warm_lam0_ || k == 0) return false;
    if (delta_fac0_[k - 1] == 0.0) return false;
    gamma_fac0_[k - 1] = t.gamma[k - 1] / delta_fac0_[k - 1];
    delta_fac0_[k] = t.delta[k] + lam0_ - t.gamma[k - 1] * t.gamma[k - 1] / delta_fac0_[k - 1];
    return delta_fac0_[k] > 0.0;
  }

  // The tridiagonal trust-region problem on T_{0..n0−1} (trlib_tri_factor_min with one irreducible
  // block, trust-region.md §5.5). Writes h, λ0 and the warm-start state. warm_fac0: the factor of
  // T + λ0 I is already at hand (extend_warm_factor).
  TriResult solve(const TriProblem& t, double radius, index_t newton_itmax, bool warm_fac0) {
    const index_t n0 = t.rows;
    rows_ = n0;
    newton_iters_ = 0;
    for (index_t i = 0; i < n0; ++i) h_[i] = 0.0;  // the returned h stays 0 on a failure exit, as in trlib
    double norm_h0 = 0;
    TriExit ret = TriExit::conv_bound;
    const auto fail = [](TriExit code) { return TriResult{code, std::numeric_limits<double>::quiet_NaN(), 0.0}; };
    // 1) λ0 with T + λ0 I ≻ 0 and ‖h(λ0)‖ ≥ Δ: warm from the previous λ0 if that still qualifies …
    if (warm_lam0_) warm_lambda0(t, radius, warm_fac0, norm_h0);
    // … else cold.
    if (!warm_lam0_ && !cold_lambda0(t, radius, norm_h0)) return fail(TriExit::fail_factor);
    // 2) Newton on φ(λ) = 1/‖h(λ)‖ − 1/Δ from the left, where φ is concave (§5.5 step 2).
    if (norm_h0 >= radius) {
      ret = newton(t, radius, newton_itmax, norm_h0);
      if (ret == TriExit::fail_factor) return fail(ret);
    }
    warm_lam0_ = true;
    // 3) Classification: interior, or h too short even at λ0 ≈ −θ (the hard case: add t·u, §5.5 step 3).
    if (std::abs(radius - norm_h0) >= eps_pow_5 * radius) {
      if (lam0_ == 0.0) {
        ret = TriExit::conv_interior;
      } else {
        if (!hard_case(t, radius, norm_h0)) return fail(TriExit::fail_eig);
        ret = TriExit::hard_init_lam;
      }
    }
    for (index_t i = 0; i < n0; ++i) h_[i] = h0_[i];
    return {ret, lam0_, objective(t)};
  }

 private:
  // (T + λI) factored into delta_fac0_/gamma_fac0_, with diag_lam_ = diag(T) + λ kept for refinement.
  bool factor_shifted(const TriProblem& t, double lam) {
    const index_t n0 = t.rows;
    for (index_t i = 0; i < n0; ++i) {
      diag_lam_[i] = t.delta[i] + lam;
      delta_fac0_[i] = diag_lam_[i];
    }
    for (index_t i = 0; i + 1 < n0; ++i) gamma_fac0_[i] = t.gamma[i];
    return pttrf(n0, delta_fac0_.data(), gamma_fac0_.data());
  }

  // h0 = (T + λ0 I)⁻¹·neglin with the current factor.
  void solve_h0_only(const TriProblem& t) {
    const index_t n0 = t.rows;
    for (index_t i = 0; i < n0; ++i) h0_[i] = t.neglin[i];
    pttrs(n0, delta_fac0_.data(), gamma_fac0_.data(), h0_.data());
  }
  // … and its norm.
  double solve_h0(const TriProblem& t) {
    solve_h0_only(t);
    return nrm2(h0_.data(), t.rows);
  }

  // Step 1, warm: keeps λ0 (warm_lam0_) iff T + λ0 I still factors and ‖h(λ0)‖ ≥ Δ.
  void warm_lambda0(const TriProblem& t, double radius, bool warm_fac0, double& norm_h0) {
    if (!warm_fac0) {
      if (factor_shifted(t, lam0_))
        warm_fac0 = true;
      else
        warm_lam0_ = false;
    }
    if (warm_fac0) {
      norm_h0 = solve_h0(t);
      warm_lam0_ = norm_h0 >= radius;
    }
  }

  // Step 1, cold: λ0 = 0 if T ≻ 0, otherwise a bracketed shift right of −θ, θ = leftmost eigenvalue.
  // False if even the bracket's upper end does not factor.
  bool cold_lambda0(const TriProblem& t, double radius, double& norm_h0) {
    const index_t n0 = t.rows;
    lam0_ = 0.0;
    for (index_t i = 0; i < n0; ++i) {
      delta_fac0_[i] = t.delta[i];
      h0_[i] = t.neglin[i];
    }
    for (index_t i = 0; i + 1 < n0; ++i) gamma_fac0_[i] = t.gamma[i];
    if (pttrf(n0, delta_fac0_.data(), gamma_fac0_.data())) {
      norm_h0 = solve_h0(t);
      return true;
    }
    return shift_right_of_leftmost(t, radius, norm_h0);
  }

  // λ0 = −θ + π with π bisected (50 tries) between where T + λ0 I fails to factor and where
  // ‖h(λ0)‖ ≥ Δ; on an unfinished search, the last factoring π.
  bool shift_right_of_leftmost(const TriProblem& t, double radius, double& norm_h0) {
    const index_t n0 = t.rows;
    bool ok = false;
    leftmost_ = leftmost_irreducible(n0, t.delta, t.gamma, 1000, eps_pow_75);
    double pert_low = -eps_pow_5 * std::abs(leftmost_), pert_up = 1.0 / eps, lam_pert = 0.0;
    for (int jj = 0; jj < 50; ++jj) {
      lam0_ = -leftmost_ + lam_pert;
      ok = factor_shifted(t, lam0_);
      if (ok) {
        pert_up = lam_pert;
        norm_h0 = solve_h0(t);
        if (norm_h0 >= radius) break;
        lam_pert = .5 * (pert_low + pert_up);
      } else {
        pert_low = lam_pert;
        if (pert_up == 1.0 / eps)
          lam_pert = lam_pert == 0.0 ? (1.0 + std::abs(leftmost_)) * eps_pow_75 : 2.0 * lam_pert;
        else
          lam_pert = .5 * (pert_low + pert_up);
      }
    }
    if (!ok) {
      lam0_ = -leftmost_ + pert_up;
      if (!factor_shifted(t, lam0_)) return false;
      // trlib solves here without re-copying neglin into h0 (literal replication; the 50-try
      // bracket search practically never ends on a failed factorisation).
      pttrs(n0, delta_fac0_.data(), gamma_fac0_.data(), h0_.data());
      norm_h0 = nrm2(h0_.data(), n0);
    }
    return true;
  }

  // Step 2: Newton from λ0 with ‖h(λ0)‖ ≥ Δ, refining each solve (ptrfs); conv_bound, itmax,
  // newton_break, or fail_factor.
  TriExit newton(const TriProblem& t, double radius, index_t newton_itmax, double& norm_h0) {
    const index_t n0 = t.rows;
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
      if (lam0_ + dlam == lam0_ || std::abs(dlam) <= 1e-11 * std::fmax(1.0, std::abs(lam0_)) || newton_iters_ > newton_itmax)
        return newton_iters_ > newton_itmax ? TriExit::itmax : TriExit::newton_break;
      lam0_ += dlam;
      if (!factor_shifted(t, lam0_)) return TriExit::fail_factor;
      solve_h0_only(t);
      ptrfs(n0, diag_lam_.data(), t.gamma, delta_fac0_.data(), gamma_fac0_.data(), t.neglin, h0_.data(), resid_.data(), absw_.data());
      norm_h0 = nrm2(h0_.data(), n0);
      if (norm_h0 - radius <= eps * radius) return TriExit::conv_bound;
    }
  }

  // Step 3, the hard case: h0 += τ·u with u the eigenvector of θ by inverse iteration and τ the root of
  // ‖h0 + τu‖ = Δ of lower model value. False (h = 0) if inverse iteration found no shift that factors.
  bool hard_case(const TriProblem& t, double radius, double norm_h0) {
    const index_t n0 = t.rows;
    const InverseIterationExit sub =
        eigen_inverse(n0, t.delta, t.gamma, leftmost_, 10, eps_pow_5, delta_fac_.data(), gamma_fac_.data(), h_.data(), eig_best_.data());
    if (sub != InverseIterationExit::converged && sub != InverseIterationExit::not_converged) {
      for (index_t i = 0; i < n0; ++i) h_[i] = 0.0;  // Deviation: trlib leaves the start vector in h
      return false;
    }
    const double* u = h_.data();
    const double zeta = dot_sequential(h0_.data(), u, n0);
    const auto [t1, t2] = quadratic_zero(norm_h0 * norm_h0 - radius * radius, 2.0 * zeta, eps_pow_75);
    const double u_neglin = dot_sequential(u, t.neglin, n0);
    const double lin = leftmost_ * zeta - u_neglin;
    const double tau = .5 * leftmost_ * t1 * t1 + lin * t1 <= .5 * leftmost_ * t2 * t2 + lin * t2 ? t1 : t2;
    for (index_t i = 0; i < n0; ++i) h0_[i] = h0_[i] + tau * u[i];
    return true;
  }

  // h, h(λ0), the LDLᵀ factor of T + λ0 I, the inverse-iteration factor, Newton/refinement scratch.
  std::vector<double> h_, h0_, delta_fac0_, gamma_fac0_, delta_fac_, gamma_fac_, tri_w_, diag_lam_, resid_, absw_, eig_best_;
  index_t rows_ = 0, newton_iters_ = 0;
  bool warm_lam0_ = false;
  double lam0_ = 0, leftmost_ = 0;
};

}  // namespace fitlib::detail::gltr
