// SPDX-License-Identifier: MIT
// The minimizers by name: fitlib-fit's --minimizerMethod and Python's fit(method=...).
#pragma once

#include <array>
#include <string>
#include <string_view>
#include <utility>

#include "fitlib/core/error.hpp"
#include "fitlib/model/cost_model.hpp"
#include "fitlib/minimize/exact.hpp"
#include "fitlib/minimize/gltr.hpp"
#include "fitlib/minimize/options.hpp"
#include "fitlib/minimize/steihaug_cg.hpp"
#include "fitlib/minimize/trust_region.hpp"

namespace fitlib {

/// The trust regions by name: rabbit's (SciPy's) three; trust-gauss-newton, trust-exact on the
/// Gauss–Newton matrix and then on ∇²f near the minimum (TrustRegionOptions::curvature); and
/// trust-gauss-newton-krylov, the same Gauss–Newton steps and then trust-krylov preconditioned by the
/// last Gauss–Newton matrix (EndGame::krylov: no dense ∇²f before the postfit covariance).
inline constexpr std::array<std::string_view, 5> minimizer_methods{"trust-krylov", "trust-ncg", "trust-exact", "trust-gauss-newton",
                                                                   "trust-gauss-newton-krylov"};

/// A usage_error unless `method` is one of minimizer_methods.
inline void require_minimizer_method(std::string_view method) {
  for (std::string_view m : minimizer_methods)
    if (m == method) return;
  throw usage_error("unknown minimizer method '" + std::string(method) +
                    "': use auto (chosen by the cost model), trust-krylov (GLTR), trust-ncg (Steihaug CG), trust-exact (Moré–Sorensen) "
                    "trust-gauss-newton or trust-gauss-newton-krylov");
}

/// A usage_error unless `method` is one of minimizer_methods and, for a likelihood without a Gauss–Newton matrix
/// (`gauss_newton` false: objective_with_gauss_newton holds for the host shards, not a CUDA likelihood's), not a
/// Gauss–Newton one.
inline void require_minimizer_method(std::string_view method, bool gauss_newton) {
  require_minimizer_method(method);
  if (!gauss_newton && method.starts_with("trust-gauss-newton"))
    throw usage_error("minimizer method " + std::string(method) + " steps on the Gauss–Newton matrix, which this likelihood does not compute (a CUDA "
                      "likelihood's shards have no Gauss–Newton pass); use trust-exact (on a GPU its algebra runs there) or trust-krylov");
}

/// `method`, or for "auto" the one default_minimizer picks for the model (and `gauss_newton`); checked.
inline std::string resolve_minimizer(std::string_view method, const Model& m, bool gauss_newton = true) {
  std::string resolved(method == "auto" ? default_minimizer(m, gauss_newton) : method);
  require_minimizer_method(resolved, gauss_newton);
  return resolved;
}

/// The dense subproblem (trust-exact's) for objectives evaluated under `policy`: the policy's `exact_subproblem` where it
/// offers one (cuda::Devices: cuda::Exact on its first device), else the host's Exact. mpi::Ranks offers none: its
/// ranks must take bitwise the same steps, which the host's arithmetic gives on every node whatever its devices.
template <class Policy>
auto exact_subproblem_for(const Policy& policy, ExactOptions options) {
  if constexpr (requires { policy.exact_subproblem(options); })
    return policy.exact_subproblem(options);
  else
    return Exact(options);
}

/// f(trust region) with the trust region `method` names, on `options` with their curvature and end game
/// set by the name (the Gauss–Newton model for trust-gauss-newton[-krylov], else ∇²f). The Gauss–Newton
/// methods factorise the Gauss–Newton matrix in single precision with steps refined to double's
/// (ExactOptions::single_precision_factor; ∇²f in double; on a device in double); trust-exact stays SciPy's.
/// `make_exact(ExactOptions)` makes the dense subproblem (exact_subproblem_for a policy); without it, Exact.
template <class MakeExact, class F>
decltype(auto) with_minimizer(std::string_view method, TrustRegionOptions options, MakeExact&& make_exact, F&& f) {
  require_minimizer_method(method);
  const bool gauss_newton = method.starts_with("trust-gauss-newton");
  options.curvature = gauss_newton ? Curvature::gauss_newton : Curvature::exact;
  options.end_game = method == "trust-gauss-newton-krylov" ? EndGame::krylov : EndGame::hessian;
  if (method == "trust-krylov") return f(TrustRegion<Gltr>(options));
  if (method == "trust-ncg") return f(TrustRegion<SteihaugCG>(options));
  // trust-exact, trust-gauss-newton[-krylov]
  auto exact = make_exact(ExactOptions{.single_precision_factor = gauss_newton});
  return f(TrustRegion<decltype(exact)>(options, std::move(exact)));
}
template <class F>
decltype(auto) with_minimizer(std::string_view method, TrustRegionOptions options, F&& f) {
  return with_minimizer(method, options, [](ExactOptions o) { return Exact(o); }, std::forward<F>(f));
}

}  // namespace fitlib
