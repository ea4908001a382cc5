// SPDX-License-Identifier: MIT
// How a minimisation ended, and how its covariance came out: statuses, never exceptions.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <string_view>

namespace fitlib {

/// Why a minimisation stopped. Non-convergence is a status, never an exception.
enum class FitStatus {
  running,             ///< not finished: `TrustRegion::step` returns this while iterating
  handed_over,         ///< not finished: the Gauss–Newton model hands over to `fit`'s Krylov end game
                       ///< (EndGame::krylov); `fit` never returns it
  converged_gtol,      ///< ‖g‖ < gtol (SciPy's status 0)
  converged_edm,       ///< the EDM ½·gᵀH⁻¹g at the final point is below edm_tol
  converged_callback,  ///< a callback declared convergence (e.g. stalled improvement)
  converged_precision, ///< a rejected step (an accepted one below the objective's rounding floor, with
                       ///< edm_tol = 0 one judged by the gradients, or a step with no predicted decrease at
                       ///< all) predicted a decrease below f's rounding level, and so does the EDM at the
                       ///< final point (finite, positive-definite Hessian)

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
    case FitStatus::handed_over: return "handed over to the Krylov end game";
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

/// f's rounding level, below which no value of f confirms a decrease: 4·eps·|f|, and at least the
/// objective's rounding floor (objective_with_rounding_floor), which decides where f ≈ 0 is a sum of
/// cancelled terms. The trust region's precision stops and StopTest use it.
inline double rounding_level(double f, double rounding_floor) {
  return std::max(4 * std::numeric_limits<double>::epsilon() * std::abs(f), rounding_floor);
}

/// The numbers a minimisation's stop was decided by, in the minimizer's own coordinates, and the
/// thresholds they were tested against; NaN where not known. TrustRegion::stop_test gives it (FitResult::stop,
/// callbacks' on_end).
struct StopTest {
  double gradient_norm = std::numeric_limits<double>::quiet_NaN();  ///< ‖g‖ at the final iterate (gtol's test)
  double edm = std::numeric_limits<double>::quiet_NaN();  ///< the EDM ½·gᵀH⁻¹g the end game computed at the final iterate (+∞: H not positive definite); NaN if none
  double f = std::numeric_limits<double>::quiet_NaN();    ///< the objective at the final iterate: no value of f resolves a decrease below 4·eps·|f|
  double gtol = std::numeric_limits<double>::quiet_NaN();
  double edm_tol = std::numeric_limits<double>::quiet_NaN();
  double rounding_floor = 0;  ///< the objective's rounding floor (objective_with_rounding_floor), 0 without one

  /// The precision stops' threshold (rounding_level).
  double rounding() const { return rounding_level(f, rounding_floor); }
};

/// The status with the test that ended the minimisation and the number that passed (or failed) it,
/// e.g. "converged (EDM 3.2e-15 below edm_tol 1e-12)"; `to_string` where the numbers are not known.
/// `to_string` stays the short name that results files keep.
inline std::string describe(FitStatus s, const StopTest& t) {
  char buf[320];
  auto threshold = [](double v) {  // " 1e-12", or nothing where the threshold is not known
    char b[40] = "";
    if (!std::isnan(v)) std::snprintf(b, sizeof b, " %.3g", v);
    return std::string(b);
  };
  switch (s) {
    case FitStatus::converged_gtol:
      if (t.gradient_norm == 0) return "converged (gradient exactly zero)";
      if (std::isnan(t.gradient_norm)) break;
      std::snprintf(buf, sizeof buf, "converged (gradient norm %.3g below gtol%s)", t.gradient_norm, threshold(t.gtol).c_str());
      return buf;
    case FitStatus::converged_edm:
      if (std::isnan(t.edm)) break;
      std::snprintf(buf, sizeof buf, "converged (EDM %.3g below edm_tol%s)", t.edm, threshold(t.edm_tol).c_str());
      return buf;
    case FitStatus::converged_precision:
      if (std::isnan(t.edm) || std::isnan(t.f)) break;
      std::snprintf(buf, sizeof buf, "converged (no decrease resolvable in double precision: EDM %.3g within f's rounding %.3g)", t.edm,
                    t.rounding());
      return buf;
    case FitStatus::stalled:
      if (std::isnan(t.edm) || std::isnan(t.f)) break;
      if (std::isinf(t.edm))
        return "stalled: no decrease resolvable in double precision, and no EDM (H not positive definite, or CG did not converge): "
               "not a verified minimum";
      std::snprintf(buf, sizeof buf,
                    "stalled: no decrease resolvable in double precision, but the EDM %.3g is above edm_tol%s and f's rounding %.3g "
                    "(not a verified minimum)",
                    t.edm, threshold(t.edm_tol).c_str(), t.rounding());
      return buf;
    default: break;
  }
  return std::string(to_string(s));
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

/// Whether a covariance was computed and cannot serve as one: it failed (NaN), or the Hessian is indefinite (LDLᵀ's
/// inverse is no covariance). The uncertainties, pulls, impacts and scans that stand on it are then NaN or not valid;
/// `not_computed` is not unusable, as nothing was asked of it.
constexpr bool covariance_unusable(CovarianceStatus s) {
  return s == CovarianceStatus::failed || s == CovarianceStatus::not_positive_definite;
}

}  // namespace fitlib
