// SPDX-License-Identifier: MIT
// One-dimensional profile-likelihood scans: the parameter held at each point, all others refitted.
#pragma once

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "fitlib/core/error.hpp"
#include "fitlib/minimize/fit.hpp"

namespace fitlib {

struct ScanOptions {
  /// Points, the best fit in the middle (rabbit's --scanPoints); an even number gets one more.
  index_t points = 15;
  /// Half-width in units of the parameter's postfit uncertainty (rabbit's --scanRange).
  double range = 3;

  void validate() const {
    if (points < 1) throw std::invalid_argument("ScanOptions::points must be ≥ 1, got " + std::to_string(points));
    if (!(range > 0) || !std::isfinite(range)) throw std::invalid_argument("ScanOptions::range must be positive and finite");
  }
};

/// A profile scan of one parameter: at each value the NLL minimised over the other free
/// parameters, as ΔNLL = NLL − NLL̂ (not ×2, as rabbit's nll_scan).
struct Scan {
  std::string parameter;
  std::vector<double> values, dnll;
  std::vector<FitStatus> status;
};

namespace detail {
/// A scanned parameter: its index and its grid step range·σ̂/(points/2), checked to be free and to
/// have a postfit uncertainty.
struct ScanAxis {
  index_t index;
  double step;
};
inline ScanAxis scan_axis(const FitResult& best, const std::string& name, const ScanOptions& opts) {
  const index_t j = best.index(name);
  const auto ju = static_cast<std::size_t>(j);
  if (best.frozen[ju]) throw usage_error("cannot scan '" + name + "': it is frozen in the fit");
  const double sigma = best.uncertainties[ju];
  if (!(sigma > 0) || !std::isfinite(sigma))
    throw usage_error("cannot scan '" + name + "': its postfit uncertainty is " + std::to_string(sigma) + "; fit with the covariance first");
  const index_t half = opts.points / 2;
  return {j, half > 0 ? opts.range * sigma / static_cast<double>(half) : 0.0};
}
}  // namespace detail

/// Scans `name` over x̂ ± range·σ̂ in `points` steps (rabbit-likelihood-and-format.md §5.4): each side
/// outward from the best fit, every point started from its neighbour's solution. Parameters frozen
/// in `best` stay frozen. A point whose fit does not converge keeps its status; never throws for it.
template <objective F, class Sub>
Scan profile_scan(F& f, const TrustRegion<Sub>& minimizer, const FitResult& best, const std::string& name, ScanOptions opts = {}) {
  opts.validate();
  const auto [j, step] = detail::scan_axis(best, name, opts);
  const auto ju = static_cast<std::size_t>(j);
  const index_t half = opts.points / 2;
  FitOptions fo;
  fo.covariance = false;
  for (std::size_t i = 0; i < best.names.size(); ++i)
    if (best.frozen[i] || i == ju) fo.frozen.push_back(best.names[i]);

  Scan scan;
  scan.parameter = name;
  const auto n = static_cast<std::size_t>(2 * half + 1);
  scan.values.resize(n);
  scan.dnll.resize(n);
  scan.status.resize(n);
  scan.values[static_cast<std::size_t>(half)] = best.x[ju];
  scan.dnll[static_cast<std::size_t>(half)] = 0;
  scan.status[static_cast<std::size_t>(half)] = best.status;
  for (const int side : {-1, 1}) {
    std::vector<double> start = best.x;
    for (index_t k = 1; k <= half; ++k) {
      const auto at = static_cast<std::size_t>(half + side * k);
      start[ju] = best.x[ju] + side * static_cast<double>(k) * step;
      fo.x0 = start;
      const FitResult r = fit(f, minimizer, fo);
      scan.values[at] = start[ju];
      scan.dnll[at] = r.nll - best.nll;
      scan.status[at] = r.status;
      start = r.x;
    }
  }
  return scan;
}

}  // namespace fitlib
