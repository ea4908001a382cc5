// SPDX-License-Identifier: MIT
// Options of the trust-region outer loop: SciPy's defaults, plus the EDM convergence test.
#pragma once

#include <cmath>
#include <stdexcept>
#include <string>

#include "fitlib/core/concepts.hpp"
#include "fitlib/core/types.hpp"

namespace fitlib {

/// What takes over from the Gauss–Newton model (TrustRegionOptions::curvature) near the minimum.
enum class EndGame {
  /// The same trust region on ∇²f: a dense Hessian at every iterate.
  hessian,
  /// `fit` goes on with trust-krylov (GLTR on HVPs of f) from the last Gauss–Newton iterate, in
  /// coordinates preconditioned by the Cholesky factor of the last Gauss–Newton matrix (there close to
  /// ∇²f), so that no dense ∇²f is needed before the postfit covariance: for models whose Hessian costs
  /// many passes over the templates. TrustRegion itself stops with FitStatus::handed_over there. In
  /// those coordinates gtol tests ‖L⁻¹g‖ (≈ √(2·EDM) near the minimum), and radii and step norms (the
  /// progress lines) are in units of the curvature's metric.
  krylov,
};

/// The outer loop's options; the defaults are SciPy's (trust-region.md §1.1).
struct TrustRegionOptions {
  /// Δ₀ > 0 and strictly below max_radius.
  double initial_radius = 1.0;
  /// Δmax > 0; applies on expansion only.
  double max_radius = 1000.0;
  /// Acceptance threshold η ∈ [0, 0.25): a step is taken when ρ > η.
  double eta = 0.15;
  /// Converged when the Euclidean gradient norm is below gtol (≥ 0; 0 disables the test).
  double gtol = 1e-4;
  /// Converged when the estimated distance to the minimum EDM = ½·gᵀH⁻¹g (the HEP convention of
  /// rabbit and Minuit) is below edm_tol. It is computed (a Cholesky factor, or CG with HVPs) only
  /// at a stop for want of precision (a rejected step, or one with no predicted decrease, below f's
  /// rounding; an accepted step below the objective's rounding floor; with edm_tol = 0 also an
  /// accepted step judged by the gradients below f's rounding) and once an accepted step off the
  /// boundary has predicted a decrease below edm_tol, since the prediction of a truncated Krylov step
  /// only bounds the EDM from below. ≥ 0; 0 disables the test (SciPy's behaviour).
  double edm_tol = 0.0;
  /// Outer iterations, rejected ones included; 0 = 200·n (SciPy's default).
  index_t maxiter = 0;
  /// The matrix a subproblem with a dense Hessian (Exact) models f with. Curvature::exact: ∇²f
  /// (SciPy's). Curvature::gauss_newton (objective_with_gauss_newton): the Gauss–Newton matrix,
  /// positive semi-definite, so no step follows the negative curvature of a prefit Hessian, until
  /// an accepted step lands inside the region with a predicted decrease below `exact_below`; from
  /// there on ∇²f, which every EDM is computed from (a stop is never decided by the approximation).
  Curvature curvature = Curvature::exact;
  /// With Curvature::gauss_newton: the predicted decrease of an accepted step inside the region
  /// below which the model switches to ∇²f (> 0; +∞: at the first such step).
  double exact_below = 1e-3;
  /// With Curvature::gauss_newton: the most iterations on the Gauss–Newton model; then ∇²f whatever
  /// the steps. Where the data term's curvature vanishes (empty bins: n/ν² = 0) the model is only
  /// linear in the yields and its steps stay on the boundary. 0 (≥ 0; the default) = gauss_newton_limit():
  /// 10 with EndGame::hessian, whose dense ∇²f handles a start far from the minimum as well; 30 with
  /// EndGame::krylov, whose Krylov steps far from the minimum follow ∇²f's negative curvature into
  /// steps the function rejects (docs/benchmarks.md: realistic_2000 took 153 HVPs after a hand-over
  /// forced at 10, 38 after the Gauss–Newton model's own).
  index_t gauss_newton_iterations = 0;
  /// With Curvature::gauss_newton: what takes over where the model switches to ∇²f.
  EndGame end_game = EndGame::hessian;

  /// The Gauss–Newton iterations in effect: gauss_newton_iterations, or its default for the end game.
  index_t gauss_newton_limit() const {
    if (gauss_newton_iterations > 0) return gauss_newton_iterations;
    return end_game == EndGame::krylov ? 30 : 10;
  }

  void validate() const {
    auto fail = [](const std::string& what) { throw std::invalid_argument("TrustRegionOptions::" + what); };
    if (!(initial_radius > 0)) fail("initial_radius must be > 0, got " + std::to_string(initial_radius));
    if (!(max_radius > 0)) fail("max_radius must be > 0, got " + std::to_string(max_radius));
    if (!(initial_radius < max_radius))
      fail("initial_radius must be < max_radius, got " + std::to_string(initial_radius) + " ≥ " + std::to_string(max_radius));
    if (!(eta >= 0 && eta < 0.25)) fail("eta must be in [0, 0.25), got " + std::to_string(eta));
    if (!(gtol >= 0)) fail("gtol must be ≥ 0, got " + std::to_string(gtol));
    if (!(edm_tol >= 0)) fail("edm_tol must be ≥ 0, got " + std::to_string(edm_tol));
    if (maxiter < 0) fail("maxiter must be ≥ 0 (0 = 200·n), got " + std::to_string(maxiter));
    if (!(exact_below > 0)) fail("exact_below must be > 0, got " + std::to_string(exact_below));
    if (gauss_newton_iterations < 0)
      fail("gauss_newton_iterations must be ≥ 0 (0 = the end game's default), got " + std::to_string(gauss_newton_iterations));
    if (end_game == EndGame::krylov && curvature != Curvature::gauss_newton)
      fail("end_game = krylov follows the Gauss–Newton model only; set curvature = Curvature::gauss_newton or end_game = EndGame::hessian");
  }
};

}  // namespace fitlib
