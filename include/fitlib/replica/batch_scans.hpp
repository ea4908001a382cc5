// SPDX-License-Identifier: MIT
// Refits as one batch: profile scans in one or two parameters, and the uncertainty breakdown by frozen groups.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "fitlib/core/error.hpp"
#include "fitlib/minimize/fit.hpp"
#include "fitlib/postfit/impacts.hpp"
#include "fitlib/postfit/scan.hpp"
#include "fitlib/replica/replica_batch.hpp"

namespace fitlib {

/// A profile scan over a grid of one or two parameters: at each grid point the parameters held
/// there and every other free parameter refitted, ΔNLL = NLL − NLL̂ (not ×2, as `Scan`).
struct GridScan {
  std::vector<std::string> parameters;      ///< 1 or 2 names
  std::vector<std::vector<double>> values;  ///< each parameter's grid values
  std::vector<double> dnll;                 ///< `[n₀ × n₁]` row-major (the last parameter fastest)
  std::vector<FitStatus> status;            ///< per grid point, same order
  BatchStatistics statistics;

  /// The one-parameter scan in `profile_scan`'s layout. Each point starts from the best fit (points
  /// are independent replicas of one batch), where profile_scan warm-starts each from its
  /// neighbour; at an NLL with several minima along the scan the two can differ.
  Scan scan() const {
    if (parameters.size() != 1) throw usage_error("GridScan::scan: the grid has " + std::to_string(parameters.size()) + " parameters, not 1");
    return {parameters[0], values[0], dnll, status};
  }
};

namespace detail {
/// Replicas share the objective's own inputs in these batches: refuse an objective holding others.
template <class F>
void require_own_inputs(const F& f, const char* what) {
  if constexpr (replica_objective<F>)
    if (f.replica_count() > 0)
      throw usage_error(std::string(what) + " refits the objective's own data, but it holds replica inputs; call set_replicas({}) first");
}
}  // namespace detail

/// Scans `names` (one or two parameters) over x̂ ± range·σ̂ in `points` steps each (the grid of
/// `profile_scan`), every grid point one replica of `batch`, started at the best fit with the
/// scanned parameters moved. Parameters frozen in `best` stay frozen. A point that does not
/// converge keeps its status; never throws for it.
template <index_t N, objective F, class Sub>
GridScan batch_scan(const ReplicaBatch<N>& batch, F& f, const TrustRegion<Sub>& minimizer, const FitResult& best,
                    const std::vector<std::string>& names, ScanOptions opts = {}) {
  opts.validate();
  detail::require_own_inputs(f, "batch_scan");
  if (names.empty() || names.size() > 2) throw usage_error("batch_scan scans 1 or 2 parameters, got " + std::to_string(names.size()));
  GridScan g;
  g.parameters = names;
  const index_t half = opts.points / 2;
  std::vector<index_t> index;
  FitOptions base;
  base.covariance = false;
  for (const auto& name : names) {
    const auto [j, step] = detail::scan_axis(best, name, opts);
    const double centre = best.x[static_cast<std::size_t>(j)];
    std::vector<double> axis;
    for (index_t k = -half; k <= half; ++k) axis.push_back(k == 0 ? centre : centre + static_cast<double>(k) * step);
    g.values.push_back(std::move(axis));
    index.push_back(j);
  }
  for (std::size_t i = 0; i < best.names.size(); ++i)
    if (best.frozen[i] || std::find(index.begin(), index.end(), static_cast<index_t>(i)) != index.end()) base.frozen.push_back(best.names[i]);

  const std::size_t n0 = g.values[0].size(), n1 = names.size() == 2 ? g.values[1].size() : 1;
  std::vector<FitOptions> points(n0 * n1, base);
  for (std::size_t a = 0; a < n0; ++a)
    for (std::size_t b = 0; b < n1; ++b) {
      FitOptions& o = points[a * n1 + b];
      o.x0 = best.x;
      o.x0[static_cast<std::size_t>(index[0])] = g.values[0][a];
      if (names.size() == 2) o.x0[static_cast<std::size_t>(index[1])] = g.values[1][b];
    }
  const BatchResult r = batch.fit(f, minimizer, points);
  for (const auto& p : r.replicas) {
    g.dnll.push_back(p.nll - best.nll);
    g.status.push_back(p.status);
  }
  g.statistics = r.statistics;
  return g;
}

/// The uncertainty breakdown by frozen groups: for each of the model's groups, the fit refitted with the group's
/// members frozen at their best-fit values (one replica each, one batch). `impacts[t·ngroups + k]`
/// = √(σ_t² − σ_t,k²) for each target t (the POIs, then the nuisances of interest): the part of
/// target t's uncertainty that group k carries. Equals the traditional group impacts for a
/// quadratic NLL (rabbit-likelihood-and-format.md §5.1).
struct GroupBreakdown {
  std::vector<std::string> targets, groups;
  std::vector<double> impacts;  ///< `[ntargets × ngroups]` row-major; NaN where a refit failed
  std::vector<FitStatus> status;  ///< per group
  BatchStatistics statistics;
};

template <index_t N, objective F, class Sub>
GroupBreakdown frozen_group_breakdown(const ReplicaBatch<N>& batch, F& f, const TrustRegion<Sub>& minimizer, const FitResult& best,
                                      const Model& model) {
  detail::require_own_inputs(f, "frozen_group_breakdown");
  const std::vector<SystematicGroup>& groups = model.groups;
  const std::vector<index_t> targets = impact_targets(model);
  if (best.covariance.size() != best.x.size() * best.x.size())
    throw usage_error("frozen_group_breakdown needs the best fit's covariance: fit with FitOptions::covariance = true");
  GroupBreakdown out;
  std::vector<FitOptions> opts(groups.size());
  for (std::size_t k = 0; k < groups.size(); ++k) {
    out.groups.push_back(groups[k].name);
    opts[k].x0 = best.x;
    for (std::size_t i = 0; i < best.names.size(); ++i)
      if (best.frozen[i]) opts[k].frozen.push_back(best.names[i]);
    for (index_t member : groups[k].members) opts[k].frozen.push_back(model.systematics.at(static_cast<std::size_t>(member)).name);
  }
  for (index_t t : targets) out.targets.push_back(best.names.at(static_cast<std::size_t>(t)));
  const BatchResult r = batch.fit(f, minimizer, opts);
  const auto n = best.x.size();
  for (index_t t : targets) {
    const auto tu = static_cast<std::size_t>(t);
    const double var = best.covariance[tu + tu * n];
    for (std::size_t k = 0; k < groups.size(); ++k) {
      const ReplicaFit& p = r.replicas[k];
      const double frozen_var = p.covariance.size() == n * n ? p.covariance[tu + tu * n] : std::numeric_limits<double>::quiet_NaN();
      out.impacts.push_back(p.converged() && p.error.empty() ? std::sqrt(std::max(0.0, var - frozen_var)) : std::numeric_limits<double>::quiet_NaN());
    }
  }
  for (const auto& p : r.replicas) out.status.push_back(p.status);
  out.statistics = r.statistics;
  return out;
}

}  // namespace fitlib
