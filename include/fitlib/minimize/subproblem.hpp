// SPDX-License-Identifier: MIT
// The trust-region subproblem interface shared by Exact, SteihaugCG and Gltr.
#pragma once

#include <cmath>
#include <concepts>
#include <span>

#include "fitlib/core/types.hpp"

namespace fitlib {

/// What one solve of `min_p gᵀp + ½ pᵀBp subject to ‖p‖ ≤ Δ` reports besides the step p.
struct SubproblemStep {
  /// The step lies on the boundary (Exact also reports steps up to 10% beyond it, as SciPy does).
  bool hits_boundary = false;
  /// The model change gᵀp + ½ pᵀBp of the returned step (negative for a descent step), computed
  /// without an extra Hessian-vector product where the method carries B·p.
  double model = 0;
  /// Hessian-vector products this solve used.
  index_t hvps = 0;
  /// The hessp calls SciPy would count for the same solve, including the outer loop's m(p)
  /// (trust-region.md §1.3, §4, §6.8); for evaluation-count comparisons only.
  index_t scipy_hvps = 0;
  /// Multiplier λ of the returned step ((B + λI)p = −g), where the method knows it.
  double lambda = 0;
  /// No step could be computed (Exact: no successful factorisation; SciPy's status 3).
  bool failed = false;
};

/// A subproblem solver. One object serves one minimisation; its workspace is sized once by
/// `reset(n)`. `new_iterate(g, H)` starts a new iterate (H: the dense Hessian, column-major
/// `[n × n]`, for solvers with `needs_hessian`, else empty); a solver that also takes
/// `new_iterate(g, H, semidefinite)` is told when H is positive semidefinite by construction (TrustRegion's
/// Gauss–Newton matrix; Exact factorises it in single precision where ExactOptions allow). `solve(Δ, hvp, p)` writes the step
/// into p; after a rejected step it is called again at the same iterate with a smaller Δ and
/// reuses what it learned (Exact: the λ lower bound; Gltr: the Krylov data, with no new HVPs).
/// `hvp(v, Bv)` writes B·v for `const double* v`, `double* Bv` of length n.
template <class S>
concept trust_region_subproblem =
    requires(S& s, index_t n, std::span<const double> g, ConstBlockView<double> H, double radius, std::span<double> p,
             void (*hvp)(const double*, double*)) {
      { S::needs_hessian } -> std::convertible_to<bool>;
      s.reset(n);
      s.new_iterate(g, H);
      { s.solve(radius, hvp, p) } -> std::same_as<SubproblemStep>;
    };

namespace detail {
/// Σ x_i·y_i summed in index order, as reference BLAS `ddot` does: the subproblems and the outer
/// loop see SciPy's roundings (trust-region.md §3.7, §8).
inline double dot_sequential(const double* x, const double* y, index_t n) {
  double s = 0;
  for (index_t i = 0; i < n; ++i) s += x[i] * y[i];
  return s;
}

/// Euclidean norm from the in-order sum of squares (reference `dnrm2` for values of ordinary magnitude).
inline double norm_sequential(const double* x, index_t n) { return std::sqrt(dot_sequential(x, x, n)); }
}  // namespace detail

/// The two roots t₁ ≤ t₂ of ‖z + t·d‖ = Δ, computed stably (trust-region.md §1.4). With ‖z‖ < Δ
/// they bracket zero. Requires d ≠ 0.
struct BoundaryRoots {
  double lower, upper;
};

inline BoundaryRoots boundary_intersections(std::span<const double> z, std::span<const double> d, double radius) {
  const auto n = static_cast<index_t>(z.size());
  const double a = detail::dot_sequential(d.data(), d.data(), n);
  const double b = 2 * detail::dot_sequential(z.data(), d.data(), n);
  const double c = detail::dot_sequential(z.data(), z.data(), n) - radius * radius;
  const double s = std::sqrt(b * b - 4 * a * c);
  const double aux = b + std::copysign(s, b);
  const double t1 = -aux / (2 * a), t2 = -2 * c / aux;
  return t1 <= t2 ? BoundaryRoots{t1, t2} : BoundaryRoots{t2, t1};
}

}  // namespace fitlib
