// SPDX-License-Identifier: MIT
// fitlib demo: an embedded synthetic analysis, its prefit likelihood, and the evaluation throughput.
#include <fitlib/fit.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

namespace {

using fitlib::index_t;

/// A falling spectrum over `n` bins: `norm · exp(−slope·x)` at bin centres x ∈ (0, 1).
std::vector<double> falling(index_t n, double norm, double slope) {
  std::vector<double> h(static_cast<std::size_t>(n));
  for (index_t i = 0; i < n; ++i) h[static_cast<std::size_t>(i)] = norm * std::exp(-slope * (static_cast<double>(i) + 0.5) / static_cast<double>(n));
  return h;
}

/// A Gaussian peak over `n` bins.
std::vector<double> peak(index_t n, double norm, double mean, double width) {
  std::vector<double> h(static_cast<std::size_t>(n));
  for (index_t i = 0; i < n; ++i) {
    const double x = (static_cast<double>(i) + 0.5) / static_cast<double>(n);
    h[static_cast<std::size_t>(i)] = norm * std::exp(-0.5 * std::pow((x - mean) / width, 2));
  }
  return h;
}

/// `h` tilted linearly by ±`amount` across the bins (a shape variation).
std::vector<double> tilt(const std::vector<double>& h, double amount) {
  std::vector<double> t(h);
  for (std::size_t i = 0; i < t.size(); ++i) t[i] *= 1.0 + amount * (2.0 * (static_cast<double>(i) + 0.5) / static_cast<double>(t.size()) - 1.0);
  return t;
}

/// A Z → μμ-like analysis: a signal peak over three backgrounds in a signal and a control region,
/// plus a masked fiducial channel (the signal's generator-level spectrum, never fitted to data).
fitlib::Model build_analysis() {
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

  // Pseudo-data: Poisson fluctuations (seed 42) of the expectation at μ = 1.1.
  std::mt19937_64 rng(42);
  auto fluctuate = [&](std::vector<std::vector<double>> procs, double mu) {
    std::vector<double> d(procs[0].size());
    for (std::size_t i = 0; i < d.size(); ++i) {
      double nu = mu * procs[0][i];
      for (std::size_t p = 1; p < procs.size(); ++p) nu += procs[p][i];
      d[i] = static_cast<double>(std::poisson_distribution<long>(nu)(rng));
    }
    return d;
  };
  mb.set_data("signal_region", fluctuate({sig, tt, wj, qcd}, 1.1));
  mb.set_data("control_region", fluctuate({std::vector<double>(static_cast<std::size_t>(ncr), 0.0), tt_cr, wj_cr}, 1.0));
  return mb.build();
}

}  // namespace

int main() {
  fitlib::SerialLikelihood nll(build_analysis());
  const fitlib::Model& m = nll.model();

  std::printf("fitlib %s demo: a synthetic binned analysis\n\n", std::string(fitlib::version_string()).c_str());
  std::printf("channels (%td bins, %td fitted):\n", m.nbins_full(), m.nbins());
  for (const auto& c : m.channels) std::printf("  %-16s %4td bins%s\n", c.name.c_str(), c.nbins, c.masked ? "  (masked)" : "");
  std::printf("processes:");
  for (const auto& p : m.processes) std::printf(" %s%s", p.name.c_str(), p.signal ? " (signal)" : "");
  std::printf("\nsystematics (%s, %s tensor):\n", m.systematic_type == fitlib::SystematicType::log_normal ? "log-normal" : "additive",
              m.symmetric ? "symmetric" : "asymmetric");
  for (index_t s = 0; s < m.nsyst(); ++s)
    std::printf("  %-12s %s\n", m.systematics[static_cast<std::size_t>(s)].name.c_str(),
                m.constraint_weights[static_cast<std::size_t>(s)] > 0 ? "constrained" : "unconstrained");

  const auto x = nll.default_parameters();
  std::vector<double> g(x.size());
  const double f = nll.value_grad(x, g);
  double gnorm = 0;
  for (double gi : g) gnorm += gi * gi;
  std::printf("\nprefit point (mu = 1, theta = 0):\n  reduced NLL     %.6f\n  |gradient|      %.6f\n", f, std::sqrt(gnorm));
  std::printf("  gradient        ");
  for (std::size_t i = 0; i < g.size(); ++i) std::printf("%s=%.3f ", nll.parameter_names()[i].c_str(), g[i]);

  // Throughput of NLL + gradient over ~0.3 s.
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  long evals = 0;
  double sink = 0;
  while (clock::now() - t0 < std::chrono::milliseconds(300)) {
    sink += nll.value_grad(x, g);
    ++evals;
  }
  const double secs = std::chrono::duration<double>(clock::now() - t0).count();
  const double bytes = static_cast<double>(m.nbins() * m.nprocs() * (m.ncoef() + 1)) * sizeof(double);
  std::printf("\n\nthroughput: %.0f NLL+gradient evaluations/s (%.2f us each, %.2f GB/s of templates)%s\n", evals / secs,
              1e6 * secs / static_cast<double>(evals), bytes * static_cast<double>(evals) / secs / 1e9, sink == 0 ? " " : "");
  return 0;
}
