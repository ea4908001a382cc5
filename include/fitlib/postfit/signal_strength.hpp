// SPDX-License-Identifier: MIT
// A POI's signal strength μ from the fitted parameter, with its uncertainty.
#pragma once

#include <cmath>
#include <string>

#include "fitlib/core/error.hpp"
#include "fitlib/core/types.hpp"
#include "fitlib/likelihood/options.hpp"
#include "fitlib/minimize/fit.hpp"

namespace fitlib {

/// μ of a POI at the minimum, with its uncertainty, and at the start.
struct SignalStrength {
  double value, uncertainty, prefit;
};

/// The signal strength of POI q (parameter q: the POIs come first) in `r`, fitted with options `o`.
/// By default the parameter is x = √μ (μ = x² cannot go negative; rabbit-likelihood-and-format.md §1),
/// so μ = x² with σ_μ = 2|x|·σ_x, its linear propagation, as rabbit reports it; with
/// LikelihoodOptions::allow_negative_poi the parameter is μ itself.
inline SignalStrength signal_strength(const FitResult& r, index_t q, const LikelihoodOptions& o) {
  if (q < 0 || q >= static_cast<index_t>(r.x.size()) || r.uncertainties.size() != r.x.size() || r.x0.size() != r.x.size())
    throw usage_error("signal_strength: POI " + std::to_string(q) + " is not a parameter of the fit result (" + std::to_string(r.x.size()) +
                      " parameters)");
  const auto i = static_cast<std::size_t>(q);
  const double x = r.x[i], s = r.uncertainties[i], x0 = r.x0[i];
  if (o.allow_negative_poi) return {x, s, x0};
  return {x * x, 2 * std::abs(x) * s, x0 * x0};
}

}  // namespace fitlib
