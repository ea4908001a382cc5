// SPDX-License-Identifier: MIT
// The objective concept: what a minimizer or replica batch needs from a function to minimize.
#pragma once

#include <concepts>
#include <span>
#include <utility>

#include "fitlib/core/types.hpp"

namespace fitlib {

/// A scalar function of `size()` parameters, evaluated for a block of N parameter columns at once
/// (N = 1 is a plain fit). `value` writes f per column; `value_grad` also the gradient columns;
/// `hessp` the Hessian-vector products H(x_j)·v_j (or H(x)·v_k for every k when x has one column).
/// `Likelihood<Shard>` models it; so can any user type (a hand-written model, a network).
template <class F>
concept objective = requires(F& f, const F& cf, ConstBlockView<double> x, ConstBlockView<double> v,
                             std::span<double> values, BlockView<double> out) {
  { cf.size() } -> std::convertible_to<index_t>;
  f.value(x, values);
  f.value_grad(x, values, out);
  f.hessp(x, v, out);
};

/// An objective that also offers its dense Hessian per column (`hess` is `[n × n·N]`).
template <class F>
concept objective_with_hessian = objective<F> && requires(F& f, ConstBlockView<double> x, std::span<double> values,
                                                          BlockView<double> grad, BlockView<double> hess) {
  f.hessian(x, values, grad, hess);
};

/// Which curvature matrix a dense evaluation returns.
enum class Curvature {
  exact,  ///< the Hessian ∇²f
  /// The Gauss–Newton matrix of a likelihood: ∇²f without the terms that weigh the expected yields'
  /// own second derivatives by the data term's slope ∂f/∂ν (which vanishes, bin by bin, where the
  /// model fits the data), but with the positive part of the asymmetric interpolation's curvature
  /// along each systematic (a diagonal: without it a step runs past the nearer of the two minima
  /// that interpolation can make, docs/benchmarks.md). Positive semi-definite where the data term
  /// is convex in the yields, and a GEMM over one row per bin instead of one per bin and process.
  gauss_newton,
};

/// An objective that also offers its Gauss–Newton matrix: `hessian(x, values, grad, hess,
/// Curvature::gauss_newton)` (values and gradients exact; `Curvature::exact` is `hessian`'s).
template <class F>
concept objective_with_gauss_newton = objective_with_hessian<F> && requires(F& f, ConstBlockView<double> x, std::span<double> values,
                                                                            BlockView<double> grad, BlockView<double> hess) {
  f.hessian(x, values, grad, hess, Curvature::gauss_newton);
};

/// An objective that also offers its dense matrix alone, `hessian(x, hess, kind)`, for a caller that
/// already holds the value and gradient at x (a minimizer at its new iterate): one evaluation fewer
/// than `hessian(x, values, grad, hess)`. `kind` may be Curvature::gauss_newton only where the
/// objective is objective_with_gauss_newton.
template <class F>
concept objective_with_bare_hessian = objective_with_hessian<F> && requires(F& f, ConstBlockView<double> x, BlockView<double> hess) {
  f.hessian(x, hess, Curvature::exact);
};

/// An objective that states the absolute level below which differences of its value, and its EDM,
/// are rounding, whatever the value's own size: `rounding_floor()` ≥ 0. A sum of many terms that
/// cancel to f ≈ 0 at the minimum (an NLL on Asimov data) rounds far above eps·|f|; the
/// trust region's precision stops use max(4·eps·|f|, rounding_floor()) (minimize/trust_region.hpp).
template <class F>
concept objective_with_rounding_floor = objective<F> && requires(const F& cf) {
  { cf.rounding_floor() } -> std::convertible_to<double>;
};

}  // namespace fitlib
