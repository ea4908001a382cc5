// SPDX-License-Identifier: MIT
// fitlib replicas: toys, a 2D scan, a frozen-group breakdown and n3fit-style training, each as one batch.
#include <fitlib/fit.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <vector>

#include "demo_analysis.hpp"

namespace {
double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

int main() {
  using namespace fitlib;
  const Model model = examples::demo_analysis();
  SerialLikelihood nll(model);
  TrustRegionOptions opts;
  opts.gtol = 1e-6;
  opts.edm_tol = 1e-8;
  const TrustRegion<Gltr> minimizer(opts);
  const ReplicaBatch<64> batch;
  const index_t signal = nll.parameter_index("signal");

  // 1. Toys: each its own data and constraint centres (rabbit's frequentist toys), fitted 64 at a time.
  const int ntoys = 400;
  std::vector<ReplicaInputs> toys;
  for (int i = 1; i <= ntoys; ++i) {
    const Toy t = generate_toy(nll, 2026, static_cast<std::uint64_t>(i));
    ReplicaInputs& in = toys.emplace_back();
    in.data = t.data;
    in.constraint_centres = t.constraints.theta0;
  }
  nll.set_replicas(toys);
  auto t0 = std::chrono::steady_clock::now();
  const BatchResult b = batch.fit(nll, minimizer, std::vector<FitOptions>(toys.size()));
  const double truth = nll.default_parameters()[static_cast<std::size_t>(signal)];
  const Spread pull = b.pulls(signal, std::span(&truth, 1));
  std::printf("toys: %td of %d converged in %.3f s (%td pooled evaluations, active fraction %.2f)\n", b.converged(), ntoys,
              seconds_since(t0), b.statistics.evaluations, b.statistics.active_fraction);
  std::printf("  signal pull: mean %+.3f, width %.3f\n", pull.mean, pull.stddev);
  nll.set_replicas({});  // back to the likelihood's own data

  // 2. A 2D profile scan: every grid point a replica with both parameters frozen there.
  const FitResult best = fit(nll, minimizer);
  ScanOptions so;
  so.points = 5;
  so.range = 2;
  t0 = std::chrono::steady_clock::now();
  const GridScan scan = batch_scan(batch, nll, minimizer, best, {"signal", "lumi"}, so);
  std::printf("\n2D scan of signal × lumi (ΔNLL), %zu points in %.3f s:\n", scan.dnll.size(), seconds_since(t0));
  for (std::size_t a = 0; a < scan.values[0].size(); ++a) {
    std::printf("  signal %7.4f:", scan.values[0][a]);
    for (std::size_t c = 0; c < scan.values[1].size(); ++c) std::printf(" %7.3f", scan.dnll[a * scan.values[1].size() + c]);
    std::printf("\n");
  }

  // 3. The uncertainty breakdown: one refit per group with the group frozen.
  const GroupBreakdown groups = frozen_group_breakdown(batch, nll, minimizer, best, model);
  std::printf("\nsignal = %.4f ± %.4f; by group (frozen refits):\n", best.x[static_cast<std::size_t>(signal)],
              best.uncertainties[static_cast<std::size_t>(signal)]);
  for (std::size_t k = 0; k < groups.groups.size(); ++k) std::printf("  %-14s %.4f\n", groups.groups[k].c_str(), groups.impacts[k]);

  // 4. n3fit-style training on bootstrap replicas of the data: a 25 % validation split per
  //    replica, early stopping with patience, and the masked fiducial yields kept non-negative by a
  //    penalty whose multiplier grows, with a final veto.
  SerialLikelihood trained(model);
  const index_t fiducial = model.nbins();  // the masked channel follows the fitted ones
  const auto positivity = std::make_shared<PositivityPenalty>("fiducial_positivity", BinRange{fiducial, model.nbins_full()});
  trained.add_regularizer(positivity);
  std::vector<ReplicaInputs> replicas(100);
  for (std::size_t r = 0; r < replicas.size(); ++r) replicas[r].data = bootstrap_counts(model.data, 7, r);
  TrainingOptions to;
  to.seed = 11;
  to.patience = 5;
  to.positivity = positivity;
  t0 = std::chrono::steady_clock::now();
  const BatchResult tr = train_replicas(batch, trained, minimizer, replicas, to);
  index_t positive = 0, early = 0;
  for (const auto& r : tr.replicas) {
    positive += r.positive;
    early += r.status == FitStatus::converged_callback;
  }
  const Spread s = tr.parameter(signal);
  std::printf("\ntraining: %zu bootstrap replicas in %.3f s, %td stopped early, %td pass positivity\n", tr.replicas.size(),
              seconds_since(t0), early, positive);
  std::printf("  signal over replicas: %.4f ± %.4f\n", s.mean, s.stddev);
  return b.converged() == ntoys && tr.converged() == static_cast<index_t>(tr.replicas.size()) ? 0 : 1;
}
