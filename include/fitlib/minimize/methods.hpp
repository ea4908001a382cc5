// SPDX-License-Identifier: MIT
// The minimizers by name: fitlib-fit's --minimizerMethod and Python's fit(method=...).
#pragma once

#include <array>
#include <string>
#include <string_view>

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

/// `method`, or for "auto" the one default_minimizer picks for the model; checked.
inline std::string resolve_minimizer(std::string_view method, const Model& m) {
  std::string resolved(method == "auto" ? default_minimizer(m) : method);
  require_minimizer_method(resolved);
  return resolved;
}

/// f(trust region) with the trust region `method` names, on `options` with their curvature and end game
/// set by the name (the Gauss–Newton model for trust-gauss-newton[-krylov], else ∇²f). The Gauss–Newton
/// methods factorise the Gauss–Newton matrix in single precision with steps refined to double's
/// (ExactOptions::single_precision_factor; ∇²f in double); trust-exact stays SciPy's.
template <class F>
decltype(auto) with_minimizer(std::string_view method, TrustRegionOptions options, F&& f) {
  require_minimizer_method(method);
  const bool gauss_newton = method.starts_with("trust-gauss-newton");
  options.curvature = gauss_newton ? Curvature::gauss_newton : Curvature::exact;
  options.end_game = method == "trust-gauss-newton-krylov" ? EndGame::krylov : EndGame::hessian;
  if (method == "trust-krylov") return f(TrustRegion<Gltr>(options));
  if (method == "trust-ncg") return f(TrustRegion<SteihaugCG>(options));
  // trust-exact, trust-gauss-newton[-krylov]
  return f(TrustRegion<Exact>(options, Exact(ExactOptions{.single_precision_factor = gauss_newton})));
}

}  // namespace fitlib
