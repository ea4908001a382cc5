// SPDX-License-Identifier: MIT
// The embedded synthetic analysis of the demo (and of the tests that fit it).
#pragma once

#include <fitlib/fit.hpp>

#include <cmath>
#include <cstdint>
#include <vector>

namespace fitlib::examples {

/// A falling spectrum over `n` bins: `norm · exp(−slope·x)` at bin centres x ∈ (0, 1).
inline std::vector<double> falling(index_t n, double norm, double slope) {
  std::vector<double> h(static_cast<std::size_t>(n));
  for (index_t i = 0; i < n; ++i) h[static_cast<std::size_t>(i)] = norm * std::exp(-slope * (static_cast<double>(i) + 0.5) / static_cast<double>(n));
  return h;
}

/// A Gaussian peak over `n` bins.
inline std::vector<double> peak(index_t n, double norm, double mean, double width) {
  std::vector<double> h(static_cast<std::size_t>(n));
  for (index_t i = 0; i < n; ++i) {
    const double x = (static_cast<double>(i) + 0.5) / static_cast<double>(n);
    h[static_cast<std::size_t>(i)] = norm * std::exp(-0.5 * std::pow((x - mean) / width, 2));
  }
  return h;
}

/// `h` tilted linearly by ±`amount` across the bins (a shape variation).
inline std::vector<double> tilt(const std::vector<double>& h, double amount) {
  std::vector<double> t(h);
  for (std::size_t i = 0; i < t.size(); ++i) t[i] *= 1.0 + amount * (2.0 * (static_cast<double>(i) + 0.5) / static_cast<double>(t.size()) - 1.0);
  return t;
}

/// A Z → μμ-like analysis: a signal peak over three backgrounds in a signal and a control region,
/// plus a masked fiducial channel (the signal's generator-level spectrum, never fitted to data).
/// `asimov`: the data are the expectation at μ = 1.1, θ = 0 instead of its Poisson fluctuation.
inline fitlib::Model demo_analysis(bool asimov = false) {
  const index_t nsr = 240, ncr = 60, nfid = 24;
  fitlib::ModelBuilder mb;
  mb.add_channel("signal_region", nsr).add_channel("control_region", ncr).add_channel("fiducial", nfid, /*masked=*/true);
  mb.add_process("signal", /*signal=*/true).add_process("ttbar").add_process("wjets").add_process("qcd");
  mb.add_systematic("lumi").add_systematic("ttbar_xsec").add_systematic("wjets_norm", {.constrained = false});
  mb.add_systematic("jes").add_systematic("muon_eff").add_systematic("qcd_shape").add_systematic("signal_pdf");

  const auto sig = peak(nsr, 80.0, 0.45, 0.08), tt = falling(nsr, 120.0, 2.0), wj = falling(nsr, 200.0, 3.5), qcd = falling(nsr, 60.0, 6.0);
  const auto tt_cr = falling(ncr, 400.0, 1.5), wj_cr = falling(ncr, 150.0, 2.5), fid = peak(nfid, 900.0, 0.45, 0.08);
  mb.set_nominal("signal_region", "signal", sig).set_nominal("signal_region", "ttbar", tt);
  mb.set_nominal("signal_region", "wjets", wj).set_nominal("signal_region", "qcd", qcd);
  mb.set_nominal("control_region", "ttbar", tt_cr).set_nominal("control_region", "wjets", wj_cr);
  mb.set_nominal("fiducial", "signal", fid);

  // Finite Monte-Carlo samples: each template bin holds the sum of weights of its simulated
  // events, sumw2 = N²/k with k effective events (fewer for the data-driven QCD estimate).
  auto mc_variance = [](const std::vector<double>& h, double events_per_yield) {
    std::vector<double> v(h.size());
    for (std::size_t i = 0; i < h.size(); ++i) v[i] = h[i] / events_per_yield;  // N²/(events_per_yield·N)
    return v;
  };
  mb.set_variances("signal_region", "signal", mc_variance(sig, 20.0)).set_variances("signal_region", "ttbar", mc_variance(tt, 4.0));
  mb.set_variances("signal_region", "wjets", mc_variance(wj, 2.0)).set_variances("signal_region", "qcd", mc_variance(qcd, 0.5));
  mb.set_variances("control_region", "ttbar", mc_variance(tt_cr, 4.0)).set_variances("control_region", "wjets", mc_variance(wj_cr, 2.0));

  for (const char* proc : {"signal", "ttbar", "wjets", "qcd"}) {
    mb.add_norm_variation("lumi", "signal_region", proc, 1.025);
    mb.add_norm_variation("muon_eff", "signal_region", proc, 1.02, 0.97);  // asymmetric
  }
  for (const char* ch : {"signal_region", "control_region"}) {
    mb.add_norm_variation("ttbar_xsec", ch, "ttbar", 1.06, 0.95);
    mb.add_norm_variation("wjets_norm", ch, "wjets", 1.5);  // a free rate parameter
  }
  mb.add_shape_variation("jes", "signal_region", "signal", tilt(sig, 0.04), tilt(sig, -0.03));
  mb.add_shape_variation("jes", "signal_region", "ttbar", tilt(tt, 0.08), tilt(tt, -0.06));
  mb.add_shape_variation("jes", "control_region", "ttbar", tilt(tt_cr, 0.08), tilt(tt_cr, -0.06));
  mb.add_shape_variation("qcd_shape", "signal_region", "qcd", tilt(qcd, 0.3));
  mb.add_shape_variation("signal_pdf", "signal_region", "signal", tilt(sig, 0.02), tilt(sig, -0.025));
  mb.add_shape_variation("signal_pdf", "fiducial", "signal", tilt(fid, 0.02), tilt(fid, -0.025));

  // Pseudo-data: Poisson fluctuations of the expectation at μ = 1.1, from fitlib's own
  // reproducible streams (seed 42; replica 0 for the signal region, 1 for the control region).
  auto fluctuate = [&](std::vector<std::vector<double>> procs, double mu, std::uint64_t replica) {
    std::vector<double> nu(procs[0].size());
    for (std::size_t i = 0; i < nu.size(); ++i) {
      nu[i] = mu * procs[0][i];
      for (std::size_t p = 1; p < procs.size(); ++p) nu[i] += procs[p][i];
    }
    return asimov ? nu : fitlib::poisson_toy(nu, 42, replica);
  };
  mb.set_data("signal_region", fluctuate({sig, tt, wj, qcd}, 1.1, 0));
  mb.set_data("control_region", fluctuate({std::vector<double>(static_cast<std::size_t>(ncr), 0.0), tt_cr, wj_cr}, 1.0, 1));
  fitlib::Model m = mb.build();
  // Groups for grouped impacts (indices in the order the systematics were added above).
  m.groups = {{"luminosity", {0}}, {"experimental", {3, 4}}, {"theory", {1, 6}}, {"background", {2, 5}}};
  return m;
}

}  // namespace fitlib::examples
