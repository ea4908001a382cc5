// SPDX-License-Identifier: MIT
// TrustRegion<Subproblem>: SciPy's trust-region outer loop, resumable, over any objective.
#pragma once

#include <algorithm>
#include <Eigen/Cholesky>
#include <Eigen/Core>
#include <chrono>
#include <cmath>
#include <limits>
#include <span>
#include <vector>

#include "fitlib/core/concepts.hpp"
#include "fitlib/core/error.hpp"
#include "fitlib/core/types.hpp"
#include "fitlib/minimize/callbacks.hpp"
#include "fitlib/minimize/options.hpp"
#include "fitlib/minimize/status.hpp"
#include "fitlib/minimize/subproblem.hpp"

namespace fitlib {

/// Objective evaluations of one minimisation.
struct EvaluationCounts {
  index_t values = 0;     ///< objective values (each came with a gradient)
  index_t gradients = 0;  ///< gradients
  index_t hvps = 0;       ///< Hessian-vector products
  index_t hessians = 0;   ///< dense Hessians
  index_t gauss_newton = 0;  ///< dense Gauss–Newton matrices (TrustRegionOptions::curvature)
  /// The hessp calls SciPy would have made for the same iterates (trust-region.md §1.3, §6.8).
  index_t scipy_hessp = 0;

  EvaluationCounts& operator+=(const EvaluationCounts& o) {
    values += o.values;
    gradients += o.gradients;
    hvps += o.hvps;
    hessians += o.hessians;
    gauss_newton += o.gauss_newton;
    scipy_hessp += o.scipy_hessp;
    return *this;
  }
};

/// Everything of one minimisation: the iterate, the trial point, the radius, the counters and the
/// subproblem's workspace. A replica batch drives many of these in lock-step.
template <class Sub>
struct TrustRegionState {
  std::vector<double> x, g, x_trial, g_trial, p;
  std::vector<double> hessian;  ///< dense curvature at x (`[n × n]`), for subproblems that need it
  /// What `hessian` holds: ∇²f, or the Gauss–Newton matrix (TrustRegionOptions::curvature).
  Curvature model = Curvature::exact;
  bool hessian_at_x = false;  ///< `hessian` is the matrix `model` names at x (false before the first)
  double f = std::numeric_limits<double>::quiet_NaN();
  double f_trial = std::numeric_limits<double>::quiet_NaN();
  double gradient_norm = std::numeric_limits<double>::quiet_NaN();
  double radius = 0;
  /// The objective's rounding_floor() (0 for one without): the least level of f's rounding.
  double rounding_floor = 0;
  index_t iteration = 0;
  index_t maxiter = 0;
  FitStatus status = FitStatus::running;
  /// `run` has called the callbacks' on_begin: a minimisation that goes on in another state (fit's
  /// Krylov end game, EndGame::krylov) does not begin again.
  bool begun = false;
  EvaluationCounts counts;
  IterationSummary last;  ///< the last iteration
  Sub subproblem;
  std::chrono::steady_clock::time_point start;

  index_t size() const { return static_cast<index_t>(x.size()); }
};

namespace detail {
inline double norm2(std::span<const double> v) { return norm_sequential(v.data(), static_cast<index_t>(v.size())); }
inline double dot(std::span<const double> a, std::span<const double> b) {
  double d = 0;
  for (std::size_t i = 0; i < a.size(); ++i) d += a[i] * b[i];
  return d;
}

/// ½·gᵀy for H·y = g by conjugate gradients (`hv(d, Hd)` writes H·d) to a relative residual of 1e-8.
/// +∞ where H is not positive definite along the way (no minimum to estimate a distance to), and
/// where CG has not met its tolerance after 2n iterations: a partial gᵀy only bounds the EDM from
/// below, and a lower bound must not pass for convergence. CG never leaves the gradient's Krylov
/// space, so a singular H whose null space g does not reach (a parameter the NLL does not depend on)
/// has an EDM.
template <class HessianVector>
double cg_edm(std::span<const double> g, HessianVector&& hv) {
  const std::size_t n = g.size();
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> y(n, 0.0), r(g.begin(), g.end()), d(r), Hd(n);
  double rr = 0;
  for (double v : r) rr += v * v;
  const double stop = 1e-16 * rr;  // (1e-8 relative residual)²
  for (std::size_t it = 0; it < 2 * n && rr > stop; ++it) {
    hv(d.data(), Hd.data());
    double dHd = 0;
    for (std::size_t i = 0; i < n; ++i) dHd += d[i] * Hd[i];
    if (!(dHd > 0)) return inf;
    const double alpha = rr / dHd;
    double rr_next = 0;
    for (std::size_t i = 0; i < n; ++i) {
      y[i] += alpha * d[i];
      r[i] -= alpha * Hd[i];
      rr_next += r[i] * r[i];
    }
    for (std::size_t i = 0; i < n; ++i) d[i] = r[i] + rr_next / rr * d[i];
    rr = rr_next;
  }
  if (rr > stop) return inf;  // not converged in 2n iterations
  double e = 0;
  for (std::size_t i = 0; i < n; ++i) e += g[i] * y[i];
  return 0.5 * e;
}

/// ½·gᵀH⁻¹g with a dense H: from its Cholesky factor, or where there is none (H singular or
/// indefinite) by cg_edm with the matrix itself, so that a singular H has the EDM it has without a
/// dense matrix, and an indefinite one +∞.
inline double dense_edm(const Eigen::Ref<const Eigen::MatrixXd>& H, std::span<const double> g) {
  const index_t n = static_cast<index_t>(g.size());
  const Eigen::Map<const Eigen::VectorXd> gv(g.data(), n);
  const Eigen::LLT<Eigen::MatrixXd> llt(H);
  if (llt.info() == Eigen::Success) {
    const double e = 0.5 * gv.dot(llt.solve(gv));
    if (std::isfinite(e)) return e;
  }
  return cg_edm(g, [&](const double* d, double* Hd) {
    Eigen::Map<Eigen::VectorXd>(Hd, n).noalias() = H * Eigen::Map<const Eigen::VectorXd>(d, n);
  });
}

/// The dense Hessian of `f` at x: the objective's own when it has one, else n HVPs; or its
/// Gauss–Newton matrix (`model`, objective_with_gauss_newton; counted as a Hessian).
template <objective F>
void dense_hessian(F& f, std::span<const double> x, std::span<double> H, std::span<double> scratch_grad, double& value,
                   EvaluationCounts& counts, Curvature model = Curvature::exact) {
  const index_t n = static_cast<index_t>(x.size());
  const ConstBlockView<double> X(x.data(), n, 1);
  if constexpr (objective_with_gauss_newton<F>) {
    if (model == Curvature::gauss_newton) {
      f.hessian(X, std::span(&value, 1), BlockView<double>(scratch_grad.data(), n, 1), BlockView<double>(H.data(), n, n), model);
      ++counts.gauss_newton;
      return;
    }
  }
  if constexpr (objective_with_hessian<F>) {
    f.hessian(X, std::span(&value, 1), BlockView<double>(scratch_grad.data(), n, 1), BlockView<double>(H.data(), n, n));
    ++counts.hessians;
  } else {
    // Column by column (an objective need not take several directions at once).
    std::vector<double> e(static_cast<std::size_t>(n), 0.0);
    for (index_t i = 0; i < n; ++i) {
      e[static_cast<std::size_t>(i)] = 1.0;
      f.hessp(X, ConstBlockView<double>(e.data(), n, 1), BlockView<double>(H.data() + i * n, n, 1));
      e[static_cast<std::size_t>(i)] = 0.0;
    }
    counts.hvps += n;
  }
}

/// The dense matrix `model` names at x into H, for a caller that holds f's value and gradient at x:
/// the objective's matrix alone where it offers that (objective_with_bare_hessian: one evaluation
/// fewer), else dense_hessian's, whose value and gradient are dropped.
template <objective F>
void dense_matrix(F& f, std::span<const double> x, std::span<double> H, std::span<double> scratch_grad, EvaluationCounts& counts,
                  Curvature model) {
  const index_t n = static_cast<index_t>(x.size());
  if constexpr (objective_with_bare_hessian<F>) {
    f.hessian(ConstBlockView<double>(x.data(), n, 1), BlockView<double>(H.data(), n, n), model);
    ++(model == Curvature::gauss_newton ? counts.gauss_newton : counts.hessians);
  } else {
    double value = 0;
    dense_hessian(f, x, H, scratch_grad, value, counts, model);
  }
}
}  // namespace detail

/// SciPy's trust-region outer loop (trust-region.md §1) with a pluggable subproblem, and deliberate
/// changes: a trial point whose objective or predicted reduction is not finite is rejected and the
/// radius shrinks (§6.4; SciPy would repeat the step until maxiter); a step whose predicted decrease
/// f's rounding cannot resolve is judged by the gradients (see `step`); an optional EDM convergence
/// test; and a stop for want of precision that is a minimum only if the EDM says so. Non-convergence
/// is a status, never an exception.
///
/// Resumable: `init` sets a state up, `step` does one iteration and returns the status (`running`
/// until it stops), `run` iterates with callbacks. The object itself holds only options.
template <trust_region_subproblem Sub>
class TrustRegion {
 public:
  using subproblem_type = Sub;
  using state_type = TrustRegionState<Sub>;

  explicit TrustRegion(TrustRegionOptions opts = {}, Sub prototype = Sub()) : opts_(opts), prototype_(std::move(prototype)) {
    opts_.validate();
  }

  const TrustRegionOptions& options() const { return opts_; }

  /// Starts a minimisation of f at x0: evaluates f, g (and H for Exact) and sizes every buffer.
  template <objective F>
  void init(F& f, state_type& s, std::span<const double> x0) const {
    const index_t n = static_cast<index_t>(x0.size());
    if (n != static_cast<index_t>(f.size()))
      throw usage_error("starting point has " + std::to_string(n) + " entries; the objective has " + std::to_string(f.size()) +
                        " parameters");
    s.x.assign(x0.begin(), x0.end());
    s.g.assign(static_cast<std::size_t>(n), 0.0);
    s.x_trial.assign(static_cast<std::size_t>(n), 0.0);
    s.g_trial.assign(static_cast<std::size_t>(n), 0.0);
    s.p.assign(static_cast<std::size_t>(n), 0.0);
    if (opts_.curvature == Curvature::gauss_newton) {
      if constexpr (!Sub::needs_hessian || !objective_with_gauss_newton<F>)
        throw usage_error(Sub::needs_hessian ? "TrustRegionOptions::curvature = gauss_newton needs an objective with a Gauss–Newton matrix "
                                               "(objective_with_gauss_newton: Likelihood on host shards); use Curvature::exact"
                                             : "TrustRegionOptions::curvature = gauss_newton needs a subproblem with a dense matrix (Exact); "
                                               "use TrustRegion<Exact> or Curvature::exact");
    }
    s.hessian.assign(Sub::needs_hessian ? static_cast<std::size_t>(n * n) : 0, 0.0);
    s.model = opts_.curvature;
    s.hessian_at_x = false;
    s.radius = opts_.initial_radius;
    s.iteration = 0;
    s.maxiter = opts_.maxiter > 0 ? opts_.maxiter : 200 * n;
    s.status = FitStatus::running;
    s.begun = false;
    s.counts = {};
    s.last = {};
    s.subproblem = prototype_;
    s.subproblem.reset(n);
    s.start = std::chrono::steady_clock::now();
    s.rounding_floor = 0;
    if constexpr (objective_with_rounding_floor<F>) s.rounding_floor = f.rounding_floor();
    evaluate(f, s.x, s.f, s.g, s.counts);
    s.gradient_norm = detail::norm2(s.g);
    if (!std::isfinite(s.f) || !std::isfinite(s.gradient_norm)) {
      s.status = std::isfinite(s.f) ? FitStatus::not_finite_gradient : FitStatus::not_finite;
      return;
    }
    new_iterate(f, s);
    if (stationary(s)) s.status = FitStatus::converged_gtol;
    else if (edm_at_iterate(s)) s.status = FitStatus::converged_edm;
  }

  /// One outer iteration (trust-region.md §1.5); returns the status, `running` to go on.
  template <objective F>
  FitStatus step(F& f, state_type& s) const {
    if (s.status != FitStatus::running) return s.status;
    const index_t n = s.size();
    auto hvp = [&](const double* v, double* Bv) {
      f.hessp(ConstBlockView<double>(s.x.data(), n, 1), ConstBlockView<double>(v, n, 1), BlockView<double>(Bv, n, 1));
      ++s.counts.hvps;
    };
    const SubproblemStep sp = s.subproblem.solve(s.radius, hvp, std::span<double>(s.p));
    s.counts.scipy_hessp += sp.scipy_hvps;
    if (sp.failed) return s.status = FitStatus::linalg_error;

    for (index_t i = 0; i < n; ++i) s.x_trial[static_cast<std::size_t>(i)] = s.x[static_cast<std::size_t>(i)] + s.p[static_cast<std::size_t>(i)];
    evaluate(f, s.x_trial, s.f_trial, s.g_trial, s.counts);
    const double predicted = -sp.model;
    double actual = s.f - s.f_trial;
    // A trial whose value or gradient is not finite is rejected and the radius shrinks (§6.4).
    const bool trial_finite = std::isfinite(s.f_trial) && std::isfinite(detail::norm2(s.g_trial));
    double rho = -std::numeric_limits<double>::infinity();
    // No predicted decrease: SciPy's failure, unless x is a minimum to f's rounding, where the prediction
    // itself is a rounded-off zero (an exact Hessian at an Asimov fit's start).
    if (std::isfinite(predicted) && predicted <= 0) {
      if (krylov_next(s)) return s.status = FitStatus::handed_over;  // the end game's EDM decides
      const bool approximate = s.model != Curvature::exact;  // no stop on the Gauss–Newton model's failure
      const double e = s.last.edm = edm(f, s);
      if (e < opts_.edm_tol) return s.status = FitStatus::converged_edm;
      if (approximate) return step(f, s);  // the same step on ∇²f (the model is exact now: once)
      if (e <= resolution(s)) return s.status = FitStatus::converged_precision;
      return s.status = FitStatus::bad_prediction;
    }
    // The end game. SciPy's ρ = (f − f⁺)/pred (trust-region.md §1.5) takes f − f⁺ to be exact, but it
    // carries the rounding of f: a sum of many large terms rounds to many eps·|f| (the likelihood's
    // Poisson term, written n·(ln ν − ln n) before likelihood/cell.hpp's log1p form, had a measured
    // value noise of ~500·eps·|f|). Near the minimum, where pred falls below that, ρ is noise and every
    // step is rejected until the radius collapses. The slope estimate −½(g + g⁺)·p (the trapezoid rule
    // along p: exact for a quadratic, error O(‖p‖³)) carries only the gradients' rounding times ‖p‖.
    // The step is judged by the slope only where both
    //   |f − f⁺ − slope| > pred: f − f⁺ does not confirm the prediction, and
    //   |f − f⁺ − slope| ≤ noise = 1e3·eps·max(|f|, |f⁺|): the disagreement can be f's rounding (1e3
    //     covers that measured ~500·eps·|f| with margin).
    // A larger gap is resolved by f and stands: an increase of f above its noise is never overruled.
    // Together they imply pred < noise, so no separate bound on pred (√eps·max(1, |f|), L-BFGS-B's ftol
    // scale, before) is needed: noise is the sharper one. At f ≈ 0 (SciPy's recorded problems, §7)
    // noise vanishes with f: the rule would need pred < 2e-13·|f|, and a step towards a minimum at
    // f = 0 predicts a decrease of the order of f itself, so it cannot fire there; on smooth, resolved steps the two estimates
    // agree to the model's O(‖p‖³), below pred. So SciPy's iterates are kept (a deviation as in §6.4).
    bool slope_judged = false;
    if (std::isfinite(predicted) && trial_finite) {
      const double slope = -0.5 * (detail::dot(s.g, s.p) + detail::dot(s.g_trial, s.p));
      const double noise = 1e3 * std::numeric_limits<double>::epsilon() * std::max(std::abs(s.f), std::abs(s.f_trial));
      const double gap = std::abs(actual - slope);
      if (gap > predicted && gap <= noise) {
        actual = slope;
        slope_judged = true;
      }
      rho = actual / predicted;
    }

    IterationSummary& it = s.last;
    it = {};
    it.f = s.f;
    it.f_trial = s.f_trial;
    it.predicted_decrease = predicted;
    it.radius = s.radius;
    it.rho = rho;
    it.step_norm = detail::norm2(s.p);
    it.hits_boundary = sp.hits_boundary;
    it.hvps = sp.hvps;
    it.slope_judged = slope_judged;
    if (rho < 0.25)
      s.radius *= 0.25;
    else if (rho > 0.75 && sp.hits_boundary)
      s.radius = std::min(2 * s.radius, opts_.max_radius);
    it.accepted = rho > opts_.eta;
    const bool gauss_newton = s.model == Curvature::gauss_newton;
    // Near the minimum the Hessian's own curvature is what converges quadratically; and after
    // gauss_newton_limit() iterations the model hands over to ∇²f, whatever the step.
    const bool hand_over = gauss_newton && ((it.accepted && !sp.hits_boundary && predicted < opts_.exact_below) ||
                                            s.iteration + 1 >= opts_.gauss_newton_limit());
    const bool to_krylov = hand_over && krylov_next(s);
    if (it.accepted) {
      s.x.swap(s.x_trial);
      s.g.swap(s.g_trial);
      s.f = s.f_trial;
      s.gradient_norm = detail::norm2(s.g);
      s.hessian_at_x = false;
    }
    if (hand_over && !to_krylov) s.model = Curvature::exact;
    // (The Krylov end game keeps the last Gauss–Newton matrix, at the previous iterate, as its preconditioner.)
    if ((it.accepted || hand_over) && !to_krylov) new_iterate(f, s);
    ++s.iteration;
    it.iteration = s.iteration;
    it.radius_next = s.radius;
    it.gradient_norm = s.gradient_norm;
    it.elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - s.start).count();

    if (stationary(s)) return s.status = FitStatus::converged_gtol;
    if (to_krylov) return s.status = FitStatus::handed_over;
    if (it.accepted && edm_at_iterate(s)) return s.status = FitStatus::converged_edm;
    // f's rounding at the (new) iterate: no value of f confirms a decrease below it.
    const double resolution = this->resolution(s);
    // An accepted step off the boundary that predicted a decrease below edm_tol: a truncated Krylov
    // step only bounds the EDM from below, so confirm with the EDM of the new point itself.
    // An accepted slope-judged step that predicted a decrease below f's rounding, with edm_tol = 0:
    // no EDM target, f can no longer confirm any step, and nothing else would stop a noisy fit
    // before maxiter; so the precision stop below applies at the new point: converged_precision if
    // its EDM is below f's rounding. Else the step was a verified descent and the model expects a
    // resolvable decrease from x, so the iteration goes on (not stalled: a collapsed radius grows
    // back on such steps). With edm_tol > 0 the gradients go on towards edm_tol, below f's rounding
    // if asked; a rejected step still ends it below.
    // An accepted step that predicted a decrease below the objective's rounding floor was confirmed by
    // nothing, slope-judged or not (at an Asimov fit's minimum they cycle at random for ever): the EDM
    // of the new point decides, converged below edm_tol or, whatever edm_tol, below f's rounding.
    const bool slope_at_precision = it.accepted && slope_judged && predicted <= resolution && opts_.edm_tol == 0;
    const bool below_floor = it.accepted && predicted <= s.rounding_floor;
    if (it.accepted && ((!sp.hits_boundary && predicted < opts_.edm_tol) || slope_at_precision || below_floor)) {
      if (krylov_next(s)) return s.status = FitStatus::handed_over;
      it.edm = edm(f, s);
      if (it.edm < opts_.edm_tol) return s.status = FitStatus::converged_edm;
      if ((slope_at_precision || below_floor) && it.edm <= resolution)
        return s.status = FitStatus::converged_precision;
    }
    // A rejected step that predicted a decrease below f's rounding level cannot be verified by any
    // shorter step either; SciPy would shrink the radius until maxiter. Whether this is a minimum is
    // for the EDM at x to say, not the step: a radius collapsed on a function unbounded below, or
    // with an indefinite Hessian, predicts as little. Converged only if the Newton step's predicted
    // decrease (the EDM, finite and from a positive-definite H) is itself below edm_tol, or below
    // f's rounding (`resolution`), where no value of f can confirm a further decrease; else stalled.
    if (!it.accepted && trial_finite && predicted <= resolution) {
      if (krylov_next(s)) return s.status = FitStatus::handed_over;
      const bool approximate = s.model != Curvature::exact;  // the Hessian takes the next step, not a stop
      it.edm = edm(f, s);
      if (it.edm < opts_.edm_tol) return s.status = FitStatus::converged_edm;
      if (approximate) return s.status;
      return s.status = it.edm <= resolution ? FitStatus::converged_precision : FitStatus::stalled;
    }
    if (s.iteration >= s.maxiter) return s.status = FitStatus::max_iterations;
    return s.status;
  }

  /// Iterates until a stop; callbacks' hooks see every iteration and may stop or abort. With
  /// EndGame::krylov it may return FitStatus::handed_over, without on_end: `fit` goes on from there.
  template <objective F, class... Callbacks>
  FitStatus run(F& f, state_type& s, Callbacks&... callbacks) const {
    if (s.status == FitStatus::running && !s.begun) {
      s.begun = true;
      const CallbackAction a = detail::on_begin(callbacks...);
      if (a == CallbackAction::stop_converged) s.status = FitStatus::converged_callback;
      if (a == CallbackAction::abort) s.status = FitStatus::aborted;
    }
    while (s.status == FitStatus::running) {
      const index_t before = s.iteration;
      step(f, s);
      if (s.iteration == before) break;  // stopped before taking a step (no subproblem step, or no predicted decrease)
      const CallbackAction a = detail::on_iteration(s.last, callbacks...);
      if (s.status != FitStatus::running && s.status != FitStatus::handed_over) break;
      if (a == CallbackAction::stop_converged) s.status = FitStatus::converged_callback;
      if (a == CallbackAction::abort) s.status = FitStatus::aborted;
      if (s.status == FitStatus::handed_over) break;
    }
    if (s.status != FitStatus::handed_over) detail::on_end(s.status, stop_test(s), callbacks...);  // else it goes on
    return s.status;
  }

  /// The numbers the stop of `s` was decided by, and the thresholds they were tested against.
  StopTest stop_test(const state_type& s) const {
    return {s.gradient_norm, s.last.edm, s.f, opts_.gtol, opts_.edm_tol, s.rounding_floor};
  }

 private:
  /// Whether the Gauss–Newton model's next switch to ∇²f is fit's Krylov end game (EndGame::krylov),
  /// which then takes over, its EDM deciding the stop; so no dense ∇²f is computed here.
  bool krylov_next(const state_type& s) const { return s.model == Curvature::gauss_newton && opts_.end_game == EndGame::krylov; }

  /// f's rounding at the iterate (rounding_level).
  static double resolution(const state_type& s) { return rounding_level(s.f, s.rounding_floor); }

  /// ‖g‖ < gtol, or an exactly zero gradient whatever gtol (gtol = 0 would otherwise run on to a
  /// zero predicted decrease at a start that is already the minimum, e.g. an Asimov fit).
  bool stationary(const state_type& s) const { return s.gradient_norm < opts_.gtol || s.gradient_norm == 0; }

  template <objective F>
  static void evaluate(F& f, std::span<const double> x, double& value, std::span<double> g, EvaluationCounts& counts) {
    const index_t n = static_cast<index_t>(x.size());
    f.value_grad(ConstBlockView<double>(x.data(), n, 1), std::span(&value, 1), BlockView<double>(g.data(), n, 1));
    ++counts.values;
    ++counts.gradients;
  }

  /// EDM = ½·gᵀH⁻¹g at the current iterate: from the dense Hessian where the subproblem keeps one
  /// (dense_edm); else from the objective's own `dense_edm(x, counts)` where it offers one and it
  /// answers (not NaN: fit's objective computes ∇²f there where the covariance needs it anyway); else
  /// by conjugate gradients on H·y = g with HVPs (cg_edm).
  /// Under Curvature::gauss_newton the model first switches to ∇²f at x: an EDM is never the
  /// approximation's.
  template <objective F>
  static double edm(F& f, state_type& s) {
    if constexpr (Sub::needs_hessian) {
      if (s.model != Curvature::exact) {
        s.model = Curvature::exact;
        new_iterate(f, s);
      }
      return dense_edm(s);
    } else {
      const index_t n = s.size();
      if constexpr (requires { f.dense_edm(std::span<const double>(s.x), s.counts); }) {
        const double e = f.dense_edm(std::span<const double>(s.x), s.counts);
        if (!std::isnan(e)) return e;
      }
      return detail::cg_edm(s.g, [&](const double* d, double* Hd) {
        f.hessp(ConstBlockView<double>(s.x.data(), n, 1), ConstBlockView<double>(d, n, 1), BlockView<double>(Hd, n, 1));
        ++s.counts.hvps;
      });
    }
  }

  /// ½·gᵀH⁻¹g with the dense matrix at x (detail::dense_edm).
  static double dense_edm(const state_type& s) {
    const index_t n = s.size();
    return detail::dense_edm(Eigen::Map<const Eigen::MatrixXd>(s.hessian.data(), n, n), s.g);
  }

  /// With ∇²f at hand at every iterate (Exact), the EDM test costs no evaluation: it is made at each
  /// new iterate (with edm_tol > 0), not one step later from a step's predicted decrease. Records
  /// the EDM tested in `s.last`; true when it is below edm_tol.
  bool edm_at_iterate(state_type& s) const {
    if constexpr (Sub::needs_hessian) {
      if (opts_.edm_tol > 0 && s.model == Curvature::exact && s.hessian_at_x) {
        s.last.edm = dense_edm(s);
        return s.last.edm < opts_.edm_tol;
      }
    }
    return false;
  }

  /// Hands the new iterate to the subproblem (with its dense matrix where it needs one).
  template <objective F>
  static void new_iterate(F& f, state_type& s) {
    const index_t n = s.size();
    if constexpr (Sub::needs_hessian) {
      std::vector<double>& scratch = s.g_trial;  // g_trial is free between steps
      detail::dense_matrix(f, s.x, s.hessian, scratch, s.counts, s.model);
      s.hessian_at_x = true;
      const ConstBlockView<double> H(s.hessian.data(), n, n);
      // The Gauss–Newton matrix is positive semidefinite by construction; a subproblem may use that (Exact).
      if constexpr (requires { s.subproblem.new_iterate(s.g, H, true); })
        s.subproblem.new_iterate(s.g, H, s.model == Curvature::gauss_newton);
      else
        s.subproblem.new_iterate(s.g, H);
    } else {
      s.subproblem.new_iterate(s.g, {});
    }
  }

  TrustRegionOptions opts_;
  Sub prototype_;
};

}  // namespace fitlib
