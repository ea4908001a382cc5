// SPDX-License-Identifier: MIT
// fitlib-fit's blinded reporting of fits to observed data.
#pragma once

#include <string>
#include <vector>

#include "command_line.hpp"
#include "fitlib/io/results.hpp"

namespace fitlib::cli {

/// Blinded reporting (on by default for fits to observed data): POI q is reported as x·e^{ξ_q}
/// (√μ·e^{ξ} for squared POIs, i.e. μ·e^{2ξ}) and NOI s as θ + 5·ξ_s, ξ ~ N(0, 1) drawn from a
/// stream seeded by the SHA-256 of the parameter's name: deterministic, the same in every run.
/// The fit itself is unchanged (the map is a fixed change of variables), so blinded and unblinded
/// results differ only in these coordinates and --unblind shows the same fit.
struct Blinding {
  std::vector<double> scale, shift;  // reported = scale·x + shift
  std::vector<std::string> names;
};

/// The blinding of the parameters `names` of `m` that --unblind leaves blinded.
Blinding make_blinding(const Model& m, const std::vector<std::string>& names, const Args& a);
/// Reports `f` in blinded coordinates (values, uncertainties, covariance, Hessian, impacts, scans).
void blind(io::FitRecord& f, const Blinding& b);

}  // namespace fitlib::cli
