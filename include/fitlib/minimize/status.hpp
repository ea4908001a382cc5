// SPDX-License-Identifier: MIT
// How a minimisation ended, and how its covariance came out: statuses, never exceptions.
#pragma once

#include <string_view>

namespace fitlib {

/// Why a minimisation stopped. Non-convergence is a status, never an exception.
enum class FitStatus {
  running,             ///< not finished: `TrustRegion::step` returns this while iterating
  converged_gtol,      ///< ‖g‖ < gtol (SciPy's status 0)
  converged_edm,       ///< the EDM ½·gᵀH⁻¹g at the final point is below edm_tol
  converged_callback,  ///< a callback declared convergence (e.g. stalled improvement)
  converged_precision, ///< a rejected step (or, with edm_tol = 0, an accepted step judged by the gradients)
                       ///< predicted a decrease below f's rounding level, and so does the EDM at the final
                       ///< point (finite, positive-definite Hessian)

  max_iterations,      ///< the iteration limit was reached (SciPy's status 1)
  stalled,             ///< as converged_precision, but the EDM at the final point is above edm_tol and
                       ///< f's rounding, not finite, or H is not positive definite: not a verified minimum
  bad_prediction,      ///< the model predicted no decrease (SciPy's status 2)
  linalg_error,        ///< the subproblem could not compute a step (SciPy's status 3)
  aborted,             ///< a callback aborted (e.g. a time limit)
  not_finite,          ///< the objective's value is not finite at the starting point
  not_finite_gradient, ///< the value is finite at the starting point, its gradient is not
};

/// Whether the status counts as a successful minimisation.
constexpr bool converged(FitStatus s) {
  return s == FitStatus::converged_gtol || s == FitStatus::converged_edm || s == FitStatus::converged_callback ||
         s == FitStatus::converged_precision;
}

constexpr std::string_view to_string(FitStatus s) {
  switch (s) {
    case FitStatus::running: return "running";
    case FitStatus::converged_gtol: return "converged (gradient norm below gtol)";
    case FitStatus::converged_edm: return "converged (EDM below edm_tol)";
    case FitStatus::converged_callback: return "converged (declared by a callback)";
    case FitStatus::converged_precision: return "converged (no decrease resolvable in double precision)";
    case FitStatus::max_iterations: return "maximum number of iterations reached";
    case FitStatus::stalled: return "stalled: no decrease resolvable in double precision, but the EDM is above edm_tol (not a verified minimum)";
    case FitStatus::bad_prediction: return "the quadratic model predicted no decrease";
    case FitStatus::linalg_error: return "linear-algebra failure in the subproblem";
    case FitStatus::aborted: return "aborted by a callback";
    case FitStatus::not_finite: return "objective value not finite at the starting point";
    case FitStatus::not_finite_gradient: return "gradient not finite at the starting point (the value is finite)";
  }
  return "unknown";
}

/// How the postfit covariance (the inverse Hessian at the minimum) came out.
enum class CovarianceStatus {
  not_computed,           ///< not requested
  accurate,               ///< the Hessian is positive definite; covariance from its Cholesky factor
  not_positive_definite,  ///< the Hessian is invertible but indefinite; covariance from LDLᵀ, not a valid covariance
  failed,                 ///< the Hessian is singular or not finite
};

constexpr std::string_view to_string(CovarianceStatus s) {
  switch (s) {
    case CovarianceStatus::not_computed: return "not computed";
    case CovarianceStatus::accurate: return "accurate";
    case CovarianceStatus::not_positive_definite: return "Hessian not positive definite";
    case CovarianceStatus::failed: return "failed (singular or non-finite Hessian)";
  }
  return "unknown";
}

}  // namespace fitlib
