// SPDX-License-Identifier: MIT
// fitlib-fit's report on stdout: each fit's summary, and the toys' together.
#include "report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace fitlib::cli {

std::string describe_channels(const std::vector<Channel>& channels) {
  std::string out;
  for (const Channel& c : channels) {
    std::string shape;
    const std::vector<index_t> n = c.shape();
    for (std::size_t k = 0; k < c.axes.size(); ++k)
      shape += (k ? " × " : "") + (c.axes[k].name.empty() ? "" : c.axes[k].name + " ") + std::to_string(n[k]);
    if (c.axes.empty()) shape = std::to_string(c.nbins) + " bins";
    out += (out.empty() ? "" : ", ") + c.name + " [" + shape + (c.flow ? " with flow" : "") + (c.masked ? ", masked" : "") + "]";
  }
  return out;
}

void print_summary(const Model& m, const io::FitRecord& f, const LikelihoodOptions& lo) {
  const FitResult& r = f.result;
  std::printf("\n== %s: %s; NLL %.10g (full %.10g), EDM %.3g, %td iterations, covariance %s\n", f.name.c_str(),
              r.status_text().c_str(), r.nll, f.nll_full, r.edm, r.iterations,
              std::string(to_string(r.covariance_status)).c_str());
  if (!f.blinded.empty()) std::printf("   blinded (use --unblind to see them): %zu parameters\n", f.blinded.size());
  std::printf("   %-32s %14s %12s\n", "parameter of interest", "fitted", "uncertainty");
  for (index_t t : impact_targets(m)) {
    const auto i = static_cast<std::size_t>(t);
    std::printf("   %-32s %14.6g %12.6g", r.names[i].c_str(), r.x[i], r.uncertainties[i]);
    // Squared POIs (the default) store √μ: show μ = x² and its propagated uncertainty 2|x|σ too.
    if (t < m.npoi() && !lo.allow_negative_poi) {
      const SignalStrength mu = signal_strength(r, t, lo);
      std::printf("   (μ = %.6g ± %.6g)", mu.value, mu.uncertainty);
    }
    std::printf("\n");
  }
  // Pulls (θ̂ − θ₀)·√w and constraints σ·√w of the constrained nuisances, largest pulls first.
  std::vector<std::size_t> order;
  for (index_t s = 0; s < m.nsyst(); ++s)
    if (m.constraint_weights[static_cast<std::size_t>(s)] > 0) order.push_back(static_cast<std::size_t>(s));
  auto pull = [&](std::size_t s) {
    return (r.x[static_cast<std::size_t>(m.npoi()) + s] - m.theta0[s]) * std::sqrt(m.constraint_weights[s]);
  };
  std::stable_sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) { return std::abs(pull(x)) > std::abs(pull(y)); });
  const std::size_t shown = std::min<std::size_t>(order.size(), 10);
  if (shown > 0) std::printf("   %-32s %14s %12s   (largest %zu of %zu)\n", "nuisance", "pull", "constraint", shown, order.size());
  for (std::size_t k = 0; k < shown; ++k) {
    const std::size_t s = order[k], i = static_cast<std::size_t>(m.npoi()) + s;
    std::printf("   %-32s %+14.4f %12.4f\n", r.names[i].c_str(), pull(s), r.uncertainties[i] * std::sqrt(m.constraint_weights[s]));
  }
  for (const auto* imp : {f.impacts ? &*f.impacts : nullptr, f.global_impacts ? &*f.global_impacts : nullptr}) {
    if (!imp) continue;
    std::printf("   %s on %s:\n", imp == (f.impacts ? &*f.impacts : nullptr) ? "impacts" : "global impacts", imp->targets.front().c_str());
    for (std::size_t g = 0; g < imp->groups.size(); ++g) std::printf("     %-30s %12.6g\n", imp->groups[g].c_str(), imp->group(0, g));
  }
  if (f.gof) std::printf("   saturated GoF: chi2 %.4f, ndf %td, p-value %.4g\n", f.gof->chi2, f.gof->ndf, f.gof->p_value);
  for (const Scan& s : f.scans) std::printf("   scan of %s: %zu points, ΔNLL at the ends %.4g and %.4g\n", s.parameter.c_str(), s.values.size(), s.dnll.front(), s.dnll.back());
  if (f.histograms)
    std::printf("   histograms: %td bins × %td processes%s\n", f.histograms->nbins, f.histograms->nprocs,
                f.histograms->postfit.empty() ? ", prefit only (blinded)" : ", prefit and postfit");
  if (f.histograms && !f.histograms->prefit_chi2.empty()) {
    const Histograms& h = *f.histograms;
    std::printf("   linear chi2 over %td data bins: prefit %.4f", h.prefit_chi2_total.ndf, h.prefit_chi2_total.chi2);
    if (!h.postfit_chi2.empty()) std::printf(", postfit %.4f", h.postfit_chi2_total.chi2);
    std::printf("%s\n", h.postfit_chi2_note.empty() ? "" : (" (postfit: " + h.postfit_chi2_note + ")").c_str());
  }
  for (const MappedHistograms& h : f.mappings) {
    std::printf("   mapping '%s': %td bins", h.key.c_str(), h.size);
    if (h.prefit_chi2) {
      std::printf(", linear chi2 over %td: prefit %.4f", h.prefit_chi2->ndf, h.prefit_chi2->chi2);
      if (h.postfit_chi2) std::printf(", postfit %.4f", h.postfit_chi2->chi2);
    }
    std::printf("\n");
  }
  for (const GridScan& g : f.scans2d) {
    const auto n = std::count_if(g.status.begin(), g.status.end(), [](FitStatus st) { return converged(st); });
    std::printf("   2D scan of %s and %s: %zu × %zu points, %td converged\n", g.parameters[0].c_str(), g.parameters[1].c_str(), g.values[0].size(),
                g.values[1].size(), n);
  }
  std::printf("   time: minimisation %.3f s, postfit %.3f s\n", f.minimize_seconds, f.postfit_seconds);
}

void print_toy_summary(const io::ToySummary& t, std::span<const io::FitRecord> fits) {
  std::printf("\n== toys: %td of %td converged; minimisation %.3f s (%.4g toys/s), ", t.converged, t.toys, t.seconds, t.toys_per_second());
  if (t.batch)
    std::printf("%td at a time: %td pooled evaluations, active fraction %.3f\n", t.width, t.batch->evaluations, t.batch->active_fraction);
  else
    std::printf("one at a time\n");
  // How the others ended (they are left out of the means below), most frequent first.
  std::map<std::string, index_t> ended;
  for (const auto& f : fits)
    if (is_toy(f) && !f.result.converged()) ++ended[std::string(to_string(f.result.status))];
  std::vector<std::pair<std::string, index_t>> order(ended.begin(), ended.end());
  std::stable_sort(order.begin(), order.end(), [](const auto& x, const auto& y) { return x.second > y.second; });
  for (const auto& [status, count] : order) std::printf("   not converged: %td %s\n", count, status.c_str());
  index_t no_covariance = 0;  // converged toys whose σ̂ the pulls cannot use
  for (const auto& f : fits)
    if (is_toy(f) && f.result.converged() && covariance_unusable(f.result.covariance_status)) ++no_covariance;
  if (no_covariance > 0)
    std::printf("   covariance failed or not positive definite in %td converged toys: their σ̂, and so their pulls, are NaN or not valid\n",
                no_covariance);
  const bool observed = t.pull_reference == to_string(PullReference::observed_fit);
  std::printf("   pulls (x̂ − truth)/σ̂ against %s\n",
              observed ? "the fit to the observed data (the toys' data are the observed counts, fluctuated)" : "the toys' generating parameters");
  std::printf("   %-32s %14s %12s %12s %12s\n", "parameter (converged toys)", "mean fitted", "std dev", "mean pull", "pull std dev");
  for (const auto& p : t.targets)
    std::printf("   %-32s %14.6g %12.6g %+12.4f %12.4f\n", p.name.c_str(), p.value.mean, p.value.stddev, p.pull.mean, p.pull.stddev);
}

}  // namespace fitlib::cli
