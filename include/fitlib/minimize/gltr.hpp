// SPDX-License-Identifier: MIT
// Gltr: SciPy's trust-krylov subproblem (GLTR as run by SciPy's vendored trlib), with HOTSTART re-solves.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "fitlib/core/error.hpp"
#include "fitlib/core/types.hpp"
#include "fitlib/minimize/subproblem.hpp"
#include "fitlib/minimize/tridiagonal.hpp"
#include "fitlib/minimize/tridiagonal_tr.hpp"

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
  /// trlib's return code, kept as trlib's number to compare with SciPy's records (§5.3:
  /// detail::gltr::KrylovExit's 0 conv_bound, 1 conv_interior, 2 approx_hard, 3/0/1 tridiagonal codes
  /// in Lanczos mode, 4 hard_init_lam, 5 fail_hard, 6 unbounded, 7 unlikely_conv, −1 itmax,
  /// −5 fail_numeric, −7 fail_ttr, −9 unexpected_interior; after a convexify re-solve, §5.8, the
  /// tridiagonal code).
  int exit_code = 0;
  /// The last tridiagonal solve's code (iwork[9]; §5.5: detail::gltr::TriExit's 0 conv_bound,
  /// 1 conv_interior, 3 newton_break, 4 hard_init_lam, −1 itmax, −2 fail_factor, −4 fail_eig).
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

/// How the Krylov driver ended (trust-region.md §5.3); the values are trlib's.
enum class KrylovExit : int {
  conv_bound = 0,
  conv_interior = 1,
  approx_hard = 2,
  newton_break = 3,  ///< only as a tridiagonal solve's code passed on in Lanczos mode
  hard_init_lam = 4,
  fail_hard = 5,
  unbounded = 6,
  unlikely_conv = 7,
  itmax = -1,
  fail_numeric = -5,
  fail_ttr = -7,
  unexpected_interior = -9,
};

/// Lanczos mode returns a converged tridiagonal solve's code as its own (§5.6); trlib's numbers agree.
inline KrylovExit as_krylov_exit(TriExit e) { return static_cast<KrylovExit>(e); }

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
    for (auto* v : {&alpha_, &beta_, &delta_, &gamma_, &neglin_, &convhist_, &regdiag_}) v->assign(m, 0.0);
    tri_.reset(m);
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
  /// Solves min gᵀp + ½pᵀBp, ‖p‖ ≤ radius, with `hvp(v, Bv)` computing B·v. The first solve on an
  /// iterate builds the Krylov space; later ones (any radius, as in SciPy) re-solve from it with no HVP.
  template <class Hvp>
  SubproblemStep solve(double radius, Hvp&& hvp, std::span<double> p) {
    if (static_cast<index_t>(p.size()) != n_)
      throw usage_error("Gltr::solve: step has " + std::to_string(p.size()) + " entries, reset() was for " +
                        std::to_string(n_));
    if (!(radius > 0) || !std::isfinite(radius))
      throw usage_error("Gltr::solve: the trust radius must be positive and finite, got " + std::to_string(radius));
    diag_ = {};
    hvps_ = 0;
    index_t scipy_extra = 0;
    KrylovExit ret;
    if (krylov_ready_) {
      diag_.hotstart = true;
      ret = hotstart(radius);
    } else {
      ret = fresh(radius, hvp);
      krylov_ready_ = true;
    }
    int code = static_cast<int>(ret);  // trlib's number, as GltrDiagnostics::exit_code reports it
    double model = obj_;
    // Convexify check (§5.8), only for non-negative codes as in trlib's wrapper.
    if (code >= 0 && lam_ > 1e-2 * std::fmax(1.0, raymax_) && raymin_ < 0 && std::abs(raymin_) < 1e-8 * raymax_)
      code = convexify_check(radius, hvp, ret, model, scipy_extra);
    std::copy(s_.begin(), s_.end(), p.begin());
    SubproblemStep step;
    step.lambda = lam_;
    step.hits_boundary = lam_ > 0.0;  // SciPy's rule (§5.1), whatever the exit code
    step.model = model;
    step.hvps = hvps_;
    step.scipy_hvps = hvps_ + scipy_extra + 1;  // + the outer loop's m(p) (§1.5)
    step.failed = !std::all_of(s_.begin(), s_.end(), [](double x) { return std::isfinite(x); });
    record_diagnostics(code);
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
  using TriExit = detail::gltr::TriExit;
  using KrylovExit = detail::gltr::KrylovExit;

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
    const double* h = tri_.h();
    std::fill(s_.begin(), s_.end(), 0.0);
    for (index_t j = 0; j < rows; ++j) {
      const double hj = h[j];
      const double* q = q_row(j);
      for (index_t i = 0; i < n_; ++i) s_[i] = s_[i] + hj * q[i];
    }
  }

  // T's leading `rows` rows as the tridiagonal solver reads them.
  detail::gltr::TriProblem tri_problem(index_t rows) const { return {delta_.data(), gamma_.data(), neglin_.data(), rows}; }

  // The tridiagonal solve on T's leading rows (§5.5); on a failure λ keeps its last value (TriResult).
  TriExit tri_solve(index_t rows, double radius, index_t newton_itmax, bool warm_fac0) {
    const detail::gltr::TriResult r = tri_.solve(tri_problem(rows), radius, newton_itmax, warm_fac0);
    if (!r.failed()) lam_ = r.lambda;
    obj_ = r.objective;
    return r.exit;
  }

  // hp = H·p (1 HVP); returns pᵀHp.
  template <class Hvp>
  double apply_hvp(Hvp& hvp) {
    hvp(static_cast<const double*>(p_.data()), hp_.data());
    ++hvps_;
    return detail::gltr::dot_sequential(p_.data(), hp_.data(), n_);
  }

  // The earlyterm rule, literally (§5.9c): over the last ten iterations the history never rose and
  // hist_{k−10} > 0.1·hist_k — steady progress, despite trlib's comment ("no significant progress").
  bool early_term(index_t k) const {
    for (index_t c = k - 10; c < k; ++c)
      if (convhist_[c + 1] > convhist_[c]) return false;
    return true;
  }

  // The last tests of a CG or Lanczos iteration k: earlyterm (§5.9c) on the boundary, else unbounded
  // below. form_step: whether s = Q h is formed on the unbounded exit (always in Lanczos mode; in CG
  // only past the interior, where s is not the CG iterate).
  std::optional<KrylovExit> stalled_or_unbounded(index_t k, bool form_step) {
    if (!interior_ && k > 10 && convhist_[k - 10] > 1e-1 * convhist_[k]) {
      if (early_term(k)) {
        retransform(k + 1);
        return KrylovExit::unlikely_conv;
      }
      // else the unbounded test is skipped, as in trlib
    } else if (std::isnan(obj_) || obj_ < obj_lo_) {
      if (form_step) retransform(k + 1);
      return KrylovExit::unbounded;
    }
    return std::nullopt;
  }

  // A fresh solve: CG while interior, then the boundary phase, possibly Lanczos mode (§5.3, §5.6).
  template <class Hvp>
  KrylovExit fresh(double radius, Hvp& hvp) {
    const double v_dot_g = init_fresh();
    if (v_dot_g == 0.0) {
      // Deviation: g = 0 would make trlib divide 0/0; the step is 0 (SciPy never solves at g = 0, §4).
      lam_ = 0;
      obj_ = 0;
      raymax_ = raymin_ = 0;
      hot_rows_ = 0;
      return KrylovExit::conv_interior;
    }
    for (index_t i = 0; i < n_; ++i) p_[i] = -g_[i];
    const double p_dot_hp = apply_hvp(hvp);
    init_cg(v_dot_g, p_dot_hp);

    for (;;) {
      const index_t k = ii_;
      // CG_NEW_ITER
      if (std::abs(p_hp_) <= zero_) return lanczos(radius, hvp);
      if (const auto exit = cg_new_iter(k, radius)) return *exit;
      // CG_UPDATE_GRAD, CG_UPDATE_GV
      const double v_dot_g_next = cg_update_grad(k);
      if (const auto exit = cg_update_gv(k, v_dot_g_next)) return *exit;
      // CG_UPDATE_DIR: p_{k+1} = −g_{k+1} + β_k p_k (1 HVP)
      for (index_t i = 0; i < n_; ++i) p_[i] = -1.0 * g_[i] + beta_[k] * p_[i];
      p_hp_ = apply_hvp(hvp);
      ii_ = k + 1;
      if (ii_ >= itmax_) {
        // Deviation (§5.9a): trlib's T now has a row itmax whose δ lacks 1/α and whose Lanczos vector was
        // never written (SciPy's Q is np.empty), yet its HOTSTART solves with it. We keep only the
        // itmax complete rows for a later HOTSTART.
        hot_rows_ = k + 1;
        if (!interior_) retransform(k + 1);
        return KrylovExit::itmax;
      }
    }
  }

  // trlib INIT / VEC_INIT (§5.3); M = I, so v ≡ g. Returns ‖g₀‖².
  double init_fresh() {
    ii_ = 0;
    pos_def_ = true;
    interior_ = true;
    tri_.restart();
    lanczos_switch_ = -1;
    exit_tri_ = TriExit::conv_bound;
    std::fill(gamma_.begin(), gamma_.end(), 0.0);
    std::fill(s_.begin(), s_.end(), 0.0);
    std::fill(gm_.begin(), gm_.end(), 0.0);
    std::copy(g0_.begin(), g0_.end(), g_.begin());
    return detail::gltr::dot_sequential(g_.data(), g_.data(), n_);
  }

  // The tolerances and the CG recurrences' start, from ‖g₀‖² and p₀ᵀHp₀ (p₀ = −g₀).
  void init_cg(double v_dot_g, double p_dot_hp) {
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
    lam_ = 0.0;
    obj_ = 0.0;
    s_mp_ = 0.0;
    s_ms_ = 0.0;
    p_mp_ = v_g_;
    raymax_ = raymin_ = p_hp_ / p_mp_;
    delta_[0] = 0.0;
  }

  // CG_NEW_ITER after the breakdown test: α_k, T's row k, the Rayleigh quotients, q_k, then either the
  // interior CG step or, past the interior, the tridiagonal solve on T's k + 1 rows.
  std::optional<KrylovExit> cg_new_iter(index_t k, double radius) {
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
      for (index_t i = 0; i < n_; ++i) q[i] = cgl_ * g_[i];
    }
    if (interior_) {
      s_ms_ = sp_msp;
      obj_ = obj_ - .5 * alpha_[k] * alpha_[k] * p_hp_;
      for (index_t i = 0; i < n_; ++i) s_[i] = s_[i] + alpha_[k] * p_[i];
    } else {
      const bool warm_fac0 = tri_.extend_warm_factor(tri_problem(k + 1));
      exit_tri_ = tri_solve(k + 1, radius, 100 + 3 * k, warm_fac0);
      if (detail::gltr::unusable(exit_tri_)) {  // NEWTON_BREAK (3) counts as success
        hot_rows_ = k + 1;
        retransform(k + 1);
        return KrylovExit::fail_ttr;
      }
      if (exit_tri_ == TriExit::conv_interior && pos_def_) {
        hot_rows_ = k + 1;
        retransform(k + 1);
        return KrylovExit::unexpected_interior;
      }
    }
    return std::nullopt;
  }

  // CG_UPDATE_GRAD: g_{k+1} = g_k + α_k H p_k; returns ‖g_{k+1}‖².
  double cg_update_grad(index_t k) {
    for (index_t i = 0; i < n_; ++i) {
      gm_[i] = g_[i];
      g_[i] = g_[i] + alpha_[k] * hp_[i];
    }
    const double v_dot_g = detail::gltr::dot_sequential(g_.data(), g_.data(), n_);
    hot_rows_ = k + 1;
    return v_dot_g;
  }

  // CG_UPDATE_GV: β_k and T's next entries from v_dot_g = ‖g_{k+1}‖², then the convergence tests.
  std::optional<KrylovExit> cg_update_gv(index_t k, double v_dot_g) {
    if (std::isnan(v_dot_g)) {
      if (!interior_) retransform(k + 1);
      return KrylovExit::fail_numeric;
    }
    if (v_dot_g <= zero_) {  // Krylov breakdown: the space is invariant
      gamma_[k] = 0.0;
      if (!interior_) retransform(k + 1);
      return KrylovExit::fail_hard;
    }
    beta_[k] = v_dot_g / v_g_;
    delta_[k + 1] = (v_dot_g * p_hp_) / (v_g_ * v_g_);
    gamma_[k] = std::abs(std::sqrt(v_dot_g) * p_hp_ / (std::sqrt(v_g_) * v_g_));
    v_g_ = v_dot_g;
    const double* h = tri_.h();
    // (sic) the interior history divides by the squared stop_i, as trlib does.
    convhist_[k] = interior_ ? std::sqrt(v_g_) / stop_i_ : (gamma_[k] * std::abs(h[k])) / stop_b_;
    if (interior_ && v_g_ <= stop_i_) return KrylovExit::conv_interior;
    if (!interior_ && gamma_[k] * std::abs(h[k]) <= stop_b_) {
      retransform(k + 1);
      return KrylovExit::conv_bound;
    }
    return stalled_or_unbounded(k, !interior_);
  }

  // Lanczos mode after CG breaks down (|pᵀHp| ≤ 2e-16) at iteration k = ii_ (§5.6).
  template <class Hvp>
  KrylovExit lanczos(double radius, Hvp& hvp) {
    index_t k = ii_;
    lanczos_switch_ = k;
    if (k > 0) sigma_ = -std::copysign(1.0, alpha_[k - 1]) * sigma_;
    // q_k = σ g_k/‖g_k‖ as the new direction (1 HVP).
    {
      const double c = sigma_ / std::sqrt(v_g_);
      for (index_t i = 0; i < n_; ++i) p_[i] = c * g_[i];
    }
    double p_dot_hp = lanczos_hvp(k, hvp);
    for (;;) {
      if (const auto exit = lanczos_update_p(k, radius, p_dot_hp)) return *exit;
      lanczos_update_grad(k);
      const double v_dot_g = detail::gltr::dot_sequential(g_.data(), g_.data(), n_);
      if (const auto exit = lanczos_check_conv(k, v_dot_g)) return *exit;
      // L_NEW_ITER
      ii_ = k + 1;
      if (ii_ >= itmax_ || ii_ - lanczos_switch_ >= itmax_lanczos_) {
        retransform(k + 1);
        return KrylovExit::itmax;
      }
      k = ii_;
      {
        const double c = 1.0 / gamma_[k - 1];
        for (index_t i = 0; i < n_; ++i) p_[i] = c * g_[i];
      }
      p_dot_hp = lanczos_hvp(k, hvp);
    }
  }

  // H·q_k for the Lanczos vector q_k = p (1 HVP), stored as row k of Q; returns q_kᵀHq_k.
  template <class Hvp>
  double lanczos_hvp(index_t k, Hvp& hvp) {
    const double p_dot_hp = apply_hvp(hvp);
    ensure_q_row(k);
    std::copy(p_.begin(), p_.end(), q_row(k));
    return p_dot_hp;
  }

  // L_UPDATE_P: δ_k = q_kᵀHq_k, then the tridiagonal solve on T's k + 1 rows.
  std::optional<KrylovExit> lanczos_update_p(index_t k, double radius, double p_dot_hp) {
    // Deviation: trlib stops here with fail_hard when |q_kᵀHq_k| ≤ 2e-16 (a "FIXME" in
    // trlib) and SciPy then returns Q·h with h never formed. A zero diagonal entry is no breakdown
    // for Lanczos (only γ_{k+1} = 0 is), and at a switch in iteration 0 it is certain, since q_0 ∝ p_0,
    // so we keep going.
    delta_[k] = p_dot_hp;  // overwrites CG's partial δ_k
    hot_rows_ = k + 1;
    raymax_ = std::fmax(raymax_, p_dot_hp);
    raymin_ = std::fmin(raymin_, p_dot_hp);
    const bool warm_fac0 = tri_.extend_warm_factor(tri_problem(k + 1));
    exit_tri_ = tri_solve(k + 1, radius, 100 + 3 * k, warm_fac0);
    if (detail::gltr::unusable(exit_tri_)) {
      retransform(k + 1);
      return KrylovExit::fail_ttr;
    }
    if (exit_tri_ == TriExit::hard_init_lam) {
      retransform(k + 1);
      return KrylovExit::hard_init_lam;
    }
    return std::nullopt;
  }

  // Three-term recurrence t = H q_k − δ_k q_k − γ_k q_{k−1}, with g holding γ_k q_k (or, right after
  // the switch, the CG gradient g_k = σ‖g_k‖ q_k) and gm holding γ_{k−1} q_{k−1}.
  void lanczos_update_grad(index_t k) {
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
    for (index_t i = 0; i < n_; ++i) {
      const double t = hp_[i] + flt1 * g_[i] + flt2 * gm_[i];
      gm_[i] = flt3 * g_[i];
      g_[i] = t;
    }
  }

  // L_CMP_CONV and L_CHK_CONV, with v_dot_g = ‖t‖² of the new recurrence vector.
  std::optional<KrylovExit> lanczos_check_conv(index_t k, double v_dot_g) {
    if (std::isnan(v_dot_g)) {
      retransform(k + 1);  // Deviation: SciPy returns the scratch vector when still "interior"
      return KrylovExit::fail_numeric;
    }
    if (v_dot_g <= zero_) {
      gamma_[k] = std::sqrt(v_dot_g);
      retransform(k + 1);  // Deviation (§5.6 item 5): SciPy returns the scratch vector here
      return KrylovExit::approx_hard;
    }
    gamma_[k] = std::sqrt(v_dot_g);
    const double* h = tri_.h();
    v_g_ = v_dot_g * h[k] * h[k];  // squared residual (γ_{k+1} h_k)²
    // L_CHK_CONV; the squared residual against unsquared tolerances is trlib's (§5.6 item 3).
    convhist_[k] = interior_ ? std::sqrt(v_g_) / std::sqrt(stop_i_) : v_g_ / std::sqrt(stop_b_);
    if (exit_tri_ != TriExit::conv_interior && v_g_ <= std::sqrt(stop_b_)) {
      retransform(k + 1);
      return detail::gltr::as_krylov_exit(exit_tri_);
    }
    if (exit_tri_ == TriExit::conv_interior && v_g_ <= std::sqrt(stop_i_)) {
      retransform(k + 1);
      return detail::gltr::as_krylov_exit(exit_tri_);
    }
    return stalled_or_unbounded(k, true);
  }

  // HOTSTART (§5.7): the tridiagonal problem on the stored T at the new radius, warm from the last λ0;
  // earlyterm = 1 makes trlib return right after it, so no HVP.
  KrylovExit hotstart(double radius) {
    const index_t rows = hot_rows_;
    if (rows == 0) {  // the g = 0 exit: nothing stored, the step stays 0
      std::fill(s_.begin(), s_.end(), 0.0);
      lam_ = 0;
      obj_ = 0;
      return KrylovExit::conv_interior;
    }
    exit_tri_ = tri_solve(rows, radius, 100 + 3 * ii_, false);
    retransform(rows);
    if (detail::gltr::unusable(exit_tri_)) return KrylovExit::fail_ttr;
    if (exit_tri_ == TriExit::hard_init_lam) return KrylovExit::hard_init_lam;
    return KrylovExit::unlikely_conv;
  }

  // The convexify check (§5.8) once its condition holds: the true model value of s, and a re-solve
  // with a regularised T when T's value disagrees. Updates the reported model and SciPy's extra
  // objective evaluations; returns trlib's exit code (the tridiagonal one after a re-solve).
  template <class Hvp>
  int convexify_check(double radius, Hvp& hvp, KrylovExit ret, double& model, index_t& scipy_extra) {
    namespace d = detail::gltr;
    diag_.convexify_checked = true;
    hvp(static_cast<const double*>(s_.data()), hs_.data());
    ++hvps_;
    const double obj_true = .5 * d::dot_sequential(s_.data(), hs_.data(), n_) + d::dot_sequential(s_.data(), g0_.data(), n_);
    if (ret == KrylovExit::conv_bound) {
      // trlib's quirk: status 200 skips the comparison, and SciPy evaluates the objective twice.
      ++scipy_extra;
      model = obj_true;  // Deviation: the exact model is at hand, report it rather than T's.
    } else if (std::abs(obj_ - obj_true) > std::fmax(1e-6, 1e-1 * std::abs(obj_true)) || obj_true > 0.0) {
      diag_.convexified = true;
      const TriExit tri = convexify_resolve(radius);
      // Deviation: the model of the returned step under the true T (trlib reports the regularised one).
      model = tri_.objective(tri_problem(tri_.rows()));
      return static_cast<int>(tri);
    } else {
      ++scipy_extra;  // the "no mismatch" path also leaves OBJVAL pending: SciPy evaluates it again
      model = obj_true;  // Deviation: exact model instead of T's estimate, at no extra cost.
    }
    return static_cast<int>(ret);
  }

  // trlib's HOTSTART_P (§5.8): re-solve with T shifted to be safely positive definite, from a cold start.
  TriExit convexify_resolve(double radius) {
    const index_t rows = tri_.rows();
    detail::gltr::regularize_posdef(rows, delta_.data(), gamma_.data(), 1e-12, 10.0, regdiag_.data());
    for (index_t i = 0; i < rows; ++i) delta_[i] = delta_[i] + regdiag_[i];
    tri_.forget_warm_start();
    exit_tri_ = tri_solve(rows, radius, 100 + 3 * ii_, false);
    for (index_t i = 0; i < rows; ++i) delta_[i] = delta_[i] - regdiag_[i];  // restored as trlib does (daxpy −1)
    retransform(rows);
    return exit_tri_;
  }

  void record_diagnostics(int code) {
    diag_.iterations = ii_;
    diag_.exit_code = code;
    diag_.exit_tri = static_cast<int>(exit_tri_);
    diag_.newton_iterations = tri_.newton_iterations();
    diag_.lanczos_switch = lanczos_switch_;
    diag_.krylov_dimension = hot_rows_;
    diag_.ray_max = raymax_;
    diag_.ray_min = raymin_;
  }

  GltrOptions options_{};
  index_t n_ = 0;
  index_t itmax_ = 0;

  // Krylov data kept per iterate for HOTSTART: T (delta_, gamma_), Q (q_), ‖g₀‖ (neglin_[0]); the warm
  // λ0 and h are tri_'s.
  std::vector<double> alpha_, beta_, delta_, gamma_, neglin_;
  std::vector<double> q_;
  index_t q_rows_ = 0;
  // The tridiagonal solver, the convergence history, the convexify shifts.
  detail::gltr::TriSolver tri_;
  std::vector<double> convhist_, regdiag_;
  // n-vectors: the gradient g₀, the CG/Lanczos gradient and its predecessor, direction, H·p, step, H·s.
  std::vector<double> g0_, g_, gm_, p_, hp_, s_, hs_;

  bool krylov_ready_ = false;
  index_t ii_ = 0, hot_rows_ = 0, lanczos_switch_ = -1, hvps_ = 0;
  TriExit exit_tri_ = TriExit::conv_bound;
  bool pos_def_ = true, interior_ = true;
  double stop_i_ = 0, stop_b_ = 0, v_g_ = 0, p_hp_ = 0, cgl_ = 1, sigma_ = 1, lam_ = 0, obj_ = 0, s_mp_ = 0, p_mp_ = 0, s_ms_ = 0, raymax_ = 0,
         raymin_ = 0;
  GltrDiagnostics diag_{};
};

}  // namespace fitlib
