// SPDX-License-Identifier: MIT
// n3fit's fit of the world's proton DIS data (issue 20, the real-data half; nnpdf-example.md §2 D1): neural-network
// PDF replicas (pdf_model.hpp) fitted as one fitlib::ReplicaBatch to the 1,715 points of BCDMS, SLAC, NMC and HERA
// that prepare.py writes to nnpdf_dis.h5 with NNLO FK tables, with n3fit's statistics: a first, smaller fit with the
// experimental covariance gives t0 (the mean prediction of its kept replicas); the main fit samples its Monte-Carlo
// data replicas from the t0 covariance and fits each with the Cholesky factor of its training block of it; per replica
// its own 75/25 split of every dataset, patience stopping on the validation χ² (counted only below n3fit's threshold
// of 3.5 per point and with positivity passing) with the best state restored, positivity and integrability penalties
// whose multipliers grow, and NNPDF's postfit selection (with its 4σ χ² and arc-length vetoes). Writes the
// replicas' gluon, singlet, valence and T3 at Q0 with their 68 % bands, χ²/n per dataset and the training
// histories to an HDF5 file (plot.py draws it) and prints χ²/n next to the anchors of nnpdf-example.md §4.
// Checks, each failing the program (exit 1): the covariance decomposition against validphys' experimental
// covariance, the FK tables against HOPPET's direct predictions, the objective's derivatives, that the first fit
// keeps a replica, and that the first 8 replicas refitted on one thread at another batch width are bitwise their fits.
//   nnpdf_dis_fit [--data FILE] [--replicas R] [--width W] [--threads T] [--t0-replicas R0] [--seed S] [--out FILE]
//                 [--maxiter N] [--patience N] [--positivity-max L] [--positivity-gate G]
//                 [--subset all|poc] [--central] [--training-fraction F] [--no-positivity]
//                 [--positivity-xmax X] [--optimizer trust-region|nadam]
#include <fitlib/device/cores.hpp>
#include <fitlib/io/hdf5.hpp>
#include <fitlib/minimize/steihaug_cg.hpp>
#include <fitlib/minimize/trust_region.hpp>
#include <fitlib/replica/pseudo_data.hpp>
#include <fitlib/replica/replica_batch.hpp>
#include <fitlib/replica/train_replica.hpp>

#include <Eigen/Cholesky>
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <iterator>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "derivative_checks.hpp"
#include "dis_data.hpp"
#include "dis_objective.hpp"
#include "nadam.hpp"
#include "pdf_model.hpp"

namespace {

using namespace nnpdf;
using fitlib::index_t;
namespace h5 = fitlib::io::hdf5;

constexpr double not_a_number = std::numeric_limits<double>::quiet_NaN();
constexpr double infinity = std::numeric_limits<double>::infinity();

// n3fit's settings (nnpdf-example.md §3; nnpdf40-like.yml) and the closure's schedule (closure.cpp).
constexpr double chi2_threshold = 3.5;           ///< threshold_chi2: validation χ²/n below which stopping counts (fact 10)
constexpr double positivity_tolerance = 1e-6;    ///< positivity passes when every observable is ≥ −this (facts 11, 18)
constexpr double positivity_initial = 184.8;     ///< NNPDF4.0's λ at the start (fact 11)
constexpr index_t positivity_every = 10;        ///< the trust region's clock (Nadam's: NadamOptions::positivity_every epochs)
constexpr double integrability_initial = 10, integrability_max = 100;  ///< fact 12
constexpr double integrability_threshold = 0.5;  ///< postfit's INTEG_THRESHOLD (fact 18)
constexpr double veto_sigmas = 4;                ///< postfit's NSIGMA_DISCARD_CHI2 and _ARCLENGTH (fact 18)

/// The integrability multiplier for a positivity multiplier λ that grows to λ_max: both grow geometrically and
/// together, from their initial values to their maxima (n3fit multiplies both every 100 epochs, each by its own
/// factor): λ_int = 10·(λ/184.8)^t with t = 1/log₁₀(λ_max/184.8), 10 at the start and 100 at λ_max.
double integrability_of(double lambda, double lambda_max) {
  const double t = lambda_max > positivity_initial ? std::log(lambda / positivity_initial) / std::log(lambda_max / positivity_initial) : 1.0;
  return integrability_initial * std::pow(integrability_max / integrability_initial, std::clamp(t, 0.0, 1.0));
}

struct Settings {
  std::string data = "/tmp/nnpdf-prep/nnpdf_dis.h5";
  std::string out = "/tmp/nnpdf-prep/nnpdf_dis_fit.h5";  // beside the data: made from GPL data, kept outside the repository
  /// width: replicas a thread's batch holds at once. 1 on the CPU: each replica has its own whitened tables (~5 MB), which
  /// stay in cache one replica at a time (docs/benchmarks.md: 8 at once on one thread cost 1.2× the time per iteration).
  index_t replicas = 100, width = 1, t0_replicas = 20;
  /// The threads the replicas are fitted on, each with its own objective and batch (fit_phase; no bit depends on it).
  index_t threads = fitlib::cpu::available_cores();
  /// patience: n3fit's 10 % of the iteration budget. 24000 and 2400: the mean meets the polynomial's χ²/n on every
  /// dataset of its 568 points on each seed tried, and the 100 replicas of the full fit stay well under 10 minutes on 2
  /// cores (docs/benchmarks.md, "The network's forward pass kept").
  index_t maxiter = 24000, patience = 2400;
  /// "trust-region" (fitlib's, on Gauss–Newton products) or "nadam" (n3fit's, nadam.hpp; for comparison, on the same
  /// objective, with --maxiter and --patience its epochs, 17000 and 1700 unless given).
  std::string optimizer = "trust-region";
  /// The trust region's largest radius (TrustRegionOptions::max_radius) in the network's weights.
  double max_radius = fitlib::TrustRegionOptions{}.max_radius;
  std::uint64_t seed = 1;
  /// λ_max. The quadratic penalty's pull on an observable at −v is λ·v (plus the multiplier estimate μ), n3fit's linear
  /// ELU's is λ at any v < 0: n3fit's λ_max of 10⁶ (fact 11) pulls as hard at v = 10⁻⁸ as 10¹⁴ does here without μ
  /// (README: 10⁶ leaves most replicas below −1e-6). 10⁶, n3fit's: with the training above it keeps 81 of 100 replicas
  /// at χ²/n 1.404 (10¹⁰ with a quarter of the training: 74 at 1.513; docs/benchmarks.md, "Both cores"). Past the gate,
  /// 10¹⁰ keeps more replicas than 10¹⁴ at a lower χ² ("The fit quality against the polynomial, like for like").
  double positivity_max = 1e6;
  /// Above this λ (n3fit's λ_max, fact 11) a replica's multiplier grows only once its validation χ²/n has been below
  /// n3fit's threshold: a penalty that stiff before the data are fitted stalls the fit on positivity.
  double positivity_gate = 1e6;
  /// λ's factor at each tick of the clock (every 10 trust-region iterations, every 100 Nadam epochs).
  double positivity_growth = 10;
  /// The points fitted: "all", or "poc", the 568 points of the polynomial's joint fit (nnpdf-example.md §4 item 4:
  /// BCDMS p, SLAC p, HERA NC e⁺p 920 GeV with Q² ≤ 100), to compare with it like for like.
  std::string subset = "all";
  /// n3fit's genrep: false: every replica fits the central values instead of a Monte-Carlo data replica.
  bool central = false;
  /// Per dataset, n_tr = int(fraction·n) training points (n3fit's frac, fact 8), in [0.5, 1]; at 1 there is no
  /// validation, and stopping watches the training χ², as n3fit does without a validation set.
  double training_fraction = 0.75;
  /// false (--no-positivity, a diagnosis): no positivity penalty, gate or veto; the observables are still reported.
  bool positivity = true;
  /// Only the positivity rows at x ≤ this (a diagnosis: NNPDF's sets reach x = 0.9, where the tables' interpolation
  /// error is largest relative to the observables).
  double positivity_xmax = 1;
};

int failures = 0;
void check(bool ok, const char* what, double value) {
  std::printf("  %-70s %12.4g  %s\n", what, value, ok ? "ok" : "FAILED");
  if (!ok) ++failures;
}

/// The random streams of one fit from the seed alone: phase 0 is the t0 fit, phase 1 the main fit. A replica's
/// draws depend on (stream seed, replica index) only, never on the batch or the number of replicas.
struct Seeds {
  std::uint64_t mc, split, network, preprocessing;
};
Seeds seeds_of(std::uint64_t seed, int phase) {
  const std::uint64_t b = 16 * seed + 4 * static_cast<std::uint64_t>(phase);
  return {b, b + 1, b + 2, b + 3};
}

/// One fit: R replicas whose data replicas are drawn from `C` around the data (with `mc` null: the central values),
/// and who are fitted with `C`.
struct Phase {
  const char* name;
  Seeds seeds;
  index_t replicas;
  const Eigen::MatrixXd* C;
  const fitlib::CovarianceReplicas* mc;  ///< the data replicas; null: every replica fits the central values
  double positivity_max;
  double training_fraction;
  bool positivity;  ///< imposed (penalty, stopping gate, veto)
};

/// What a replica's fit leaves.
struct Outcome {
  fitlib::ReplicaFit fit;
  Preprocessing pre;
  index_t ntraining = 0, nvalidation = 0;
  /// χ²/n of the training and validation data (without penalties) at the start and after every accepted step.
  std::vector<double> training_history, validation_history;
  std::vector<double> positivity_history;  ///< the least positivity observable at the same states
  std::vector<double> current;             ///< the last of those states: the minimiser's current point
  fitlib::index_t least_row = -1;          ///< which positivity row is the least, at the last of them
  /// The positivity constraints' Lagrange multiplier estimates at the minimiser's last point, max(0, μ − λ·O) with the
  /// μ and λ in force there (the augmented Lagrangian's next update), one per positivity row: what ½χ² would gain per
  /// unit of that observable were it allowed below 0; 0 where the constraint does not bind there.
  std::vector<double> multipliers;
  bool ever_below = false, ever_positive = false, ever_both = false;  // the stopping gate's two parts, and both at once
  /// λ_pos's schedule: the positivity multiplier where positivity is imposed, and the integrability's clock always.
  double schedule = 0;
  double training = not_a_number, validation = not_a_number;  ///< χ²/n at the kept state
  std::string error;
  // After the batch, at the kept state:
  std::vector<double> prediction;  ///< FK·xf at every data point
  double least_positivity = not_a_number, integrability = not_a_number;
  double chi2 = not_a_number;  ///< χ²/n of the prediction to the data with the phase's covariance (n3fit's "experimental")
  std::array<double, 5> arc_lengths{};  ///< of x·f for Σ, g, V, V3, V8 (arc_lengths())
  std::string verdict;
};

/// Replica r's split of every dataset: n − int(fraction·n) validation points each (n3fit, fact 8), placed by
/// fitlib::training_split from (seed, r, dataset) alone.
void split(const DisData& d, double training_fraction, std::uint64_t seed, index_t r, std::vector<index_t>& training,
           std::vector<index_t>& validation) {
  training.clear();
  validation.clear();
  for (index_t s = 0; s < d.datasets(); ++s) {
    const index_t first = d.offset[static_cast<std::size_t>(s)], n = d.offset[static_cast<std::size_t>(s) + 1] - first;
    const auto n_tr = static_cast<index_t>(std::floor(training_fraction * static_cast<double>(n)));
    const index_t n_val = n_tr > 0 ? n - n_tr : 0;  // a one-point dataset trains (n3fit keeps it with probability frac)
    // training_split holds out ⌊n·fraction⌋ points: half a point above n_val makes that exactly n_val.
    const double fraction = n_val > 0 ? (static_cast<double>(n_val) + 0.5) / static_cast<double>(n) : 0.0;
    const auto keep = fitlib::training_split(n, fraction, seed, static_cast<std::uint64_t>(r), static_cast<std::uint64_t>(s));
    for (index_t i = 0; i < n; ++i) (keep[static_cast<std::size_t>(i)] ? training : validation).push_back(first + i);
  }
}

/// Replica r's inputs in f: its training data with the penalties (index r), its validation data (R + r; without a
/// validation set, the training data) and its training data without penalties (2R + r, for the training χ²), all
/// from (seeds, r) alone.
void prepare_inputs(const DisData& d, DisObjective& f, const Phase& ph, index_t r, Outcome& out) {
  const index_t R = ph.replicas;
  const std::vector<double> data = ph.mc ? ph.mc->replica(ph.seeds.mc, static_cast<std::uint64_t>(r)) : d.central;
  std::vector<index_t> tr, vl;
  split(d, ph.training_fraction, ph.seeds.split, r, tr, vl);
  if (vl.empty()) vl = tr;
  out.pre = Preprocessing::draw(ph.seeds.preprocessing, static_cast<std::uint64_t>(r));
  out.ntraining = static_cast<index_t>(tr.size());
  out.nvalidation = static_cast<index_t>(vl.size());
  DisReplicaInputs& t = f.inputs(r);
  DisReplicaInputs& v = f.inputs(R + r);
  DisReplicaInputs& p = f.inputs(2 * R + r);
  t.pre = v.pre = p.pre = out.pre;
  t.whitened = p.whitened = whiten(*ph.C, d.fk.table, tr, data, /*gram=*/true);
  v.whitened = vl == tr ? t.whitened : whiten(*ph.C, d.fk.table, vl, data, /*gram=*/false);
  out.schedule = positivity_initial;
  t.positivity = ph.positivity ? out.schedule : 0;  // 0: no positivity term
  t.positivity_multipliers = Eigen::VectorXd::Zero(d.positivity.table.rows());
  t.integrability = integrability_of(positivity_initial, ph.positivity_max);
  v.positivity = v.integrability = p.positivity = p.integrability = 0;
}

/// Frees replica r's whitened data (~5 MB): a batch holds only its running replicas' inputs.
void release_inputs(DisObjective& f, const Phase& ph, index_t r) {
  for (index_t k : {r, ph.replicas + r, 2 * ph.replicas + r}) f.inputs(k).whitened.reset();
}

/// max over V, V3, V8, T3, T8 of Σ |x·f(x)| at x = 10⁻⁹, 10^−7.5, 10⁻⁶: validphys' integrability number (x·f at Q0;
/// n3fit-parallel-replicas.md §4.4), which postfit wants ≤ 0.5 for each.
double integrability_number(std::span<const double> w, const Preprocessing& pre) {
  static const Points q({1e-9, std::pow(10.0, -7.5), 1e-6}, {});
  PdfReplica p;
  p.evaluate(w, pre, q);
  double worst = 0;
  for (int k : {V, V3, V8, T3, T8}) {
    double s = 0;
    for (std::size_t i = 0; i < 3; ++i) s += std::abs(p.xf(i, k));
    worst = std::max(worst, s);
  }
  return worst;
}

/// The arc lengths of Σ, g, V, V3 and V8 at Q0 as n3fit-parallel-replicas.md §4.4 defines validphys' (whose grid
/// differs in detail: 199 points a segment, without its end): the sum over [10⁻⁶, 10⁻⁴],
/// [10⁻⁴, 10⁻²] and [10⁻², 1] of ∫√(1 + y′²) dx with y = x·(x·f) on 200 intervals each, y′ by forward differences,
/// integrated over the 200 difference points by Simpson's rule (the last interval by the trapezoid).
std::array<double, 5> arc_lengths(std::span<const double> w, const Preprocessing& pre) {
  static constexpr int intervals = 200;
  static constexpr std::array<double, 4> edges{1e-6, 1e-4, 1e-2, 1};
  static const Points q = [] {
    std::vector<double> x;
    for (std::size_t k = 0; k + 1 < edges.size(); ++k)
      for (int i = 0; i <= intervals; ++i) x.push_back(edges[k] + (edges[k + 1] - edges[k]) * i / intervals);
    return Points(x, {});
  }();
  PdfReplica p;
  p.evaluate(w, pre, q);
  std::array<double, 5> lengths{};
  const std::array<int, 5> flavours{Sigma, Gluon, V, V3, V8};
  for (std::size_t f = 0; f < flavours.size(); ++f)
    for (std::size_t k = 0; k + 1 < edges.size(); ++k) {
      const double h = (edges[k + 1] - edges[k]) / intervals;
      const std::size_t first = k * (intervals + 1);
      const auto y = [&](std::size_t i) { return q.x[first + i] * p.xf(first + i, flavours[f]); };
      std::array<double, intervals> s{};
      for (std::size_t i = 0; i < s.size(); ++i) {
        const double slope = (y(i + 1) - y(i)) / h;
        s[i] = std::sqrt(1 + slope * slope);
      }
      double integral = 0.5 * h * (s[intervals - 2] + s[intervals - 1]);
      for (std::size_t i = 0; i + 2 < s.size(); i += 2) integral += h / 3 * (s[i] + 4 * s[i + 1] + s[i + 2]);
      lengths[f] += integral;
    }
  return lengths;
}

/// Why a replica is dropped by postfit (n3fit fact 18), or "kept".
std::string verdict(const Outcome& o, bool positivity_imposed) {
  if (!o.error.empty()) return "failed";
  // The kept state is above the threshold only where no state passed the stopping gate (it is then the start).
  if (!(o.validation < chi2_threshold))
    return !o.ever_below ? "never below the chi2 threshold" : !o.ever_positive ? "never positive" : "never below the threshold while positive";
  if (positivity_imposed && o.least_positivity < -positivity_tolerance) return "positivity veto";
  if (o.integrability > integrability_threshold) return "integrability veto";
  return "kept";
}

/// NNPDF's postfit distribution vetoes (n3fit-parallel-replicas.md §4.4): of the replicas kept so far, those whose χ²
/// or one of whose arc lengths lies more than 4σ above the kept replicas' mean (σ: their standard deviation) are
/// dropped, all six tests on the same kept set, repeated until none is dropped (a drop is final; validphys recomputes
/// every round's masks over all replicas, so that one could come back).
void distribution_vetoes(std::vector<Outcome>& outcomes) {
  for (;;) {
    std::vector<std::size_t> passing;
    for (std::size_t r = 0; r < outcomes.size(); ++r)
      if (outcomes[r].verdict == "kept") passing.push_back(r);
    if (passing.size() < 2) return;
    std::vector<std::pair<std::size_t, const char*>> dropped;
    for (std::size_t q = 0; q < 6; ++q) {  // the χ², then the five arc lengths; a non-finite one is dropped
      const auto value = [&](std::size_t r) {
        const double v = q == 0 ? outcomes[r].chi2 : outcomes[r].arc_lengths[q - 1];
        return std::isfinite(v) ? v : infinity;
      };
      double mean = 0, square = 0;
      for (std::size_t r : passing) mean += value(r);
      mean /= static_cast<double>(passing.size());
      for (std::size_t r : passing) square += (value(r) - mean) * (value(r) - mean);
      const double limit = mean + veto_sigmas * std::sqrt(square / static_cast<double>(passing.size()));
      for (std::size_t r : passing)
        if (value(r) > limit) dropped.emplace_back(r, q == 0 ? "chi2 4-sigma veto" : "arc-length 4-sigma veto");
    }
    if (dropped.empty()) return;
    for (const auto& [r, why] : dropped)
      if (outcomes[r].verdict == "kept") outcomes[r].verdict = why;
  }
}

/// Fits the replicas `which` (empty: all) of a phase, and evaluates their kept states (the distribution vetoes only
/// for a whole phase: they compare its replicas). One thread per objective of `fs`, each running its own batch of
/// `width` over the replicas it takes next (whichever thread gets to a replica first fits it): a replica's fit is
/// the same on any thread, at any width (ReplicaBatch), so no bit depends on the threads or on who took what.
std::vector<Outcome> fit_phase(const DisData& d, std::span<DisObjective> fs, const Phase& ph, const Settings& s, index_t width,
                               const std::vector<index_t>& which, fitlib::BatchStatistics* statistics = nullptr) {
  fitlib::TrustRegionOptions tro;
  tro.gtol = 1e-8;
  tro.maxiter = s.maxiter;
  tro.max_radius = s.max_radius;
  if (tro.initial_radius >= s.max_radius) tro.initial_radius = s.max_radius / 2;  // (it must be below the largest)
  const fitlib::TrustRegion<fitlib::SteihaugCG> minimizer(tro, fitlib::SteihaugCG(fitlib::SteihaugCGOptions{30}));
  NadamOptions nadam;  // --optimizer nadam
  nadam.epochs = s.maxiter;
  nadam.patience = s.patience;
  fitlib::TrainingOptions to;
  to.validation_fraction = 0.25;  // early stopping on (the split itself is split() above)
  to.patience = s.patience;
  to.positivity_initial = positivity_initial;
  to.positivity_growth = s.positivity_growth;
  to.positivity_every = positivity_every;
  // The schedule is the replica's own (the hook's below); train_replica's multiplier is only its clock: every
  // positivity_every iterations, for the whole fit, and at each convergence of the minimiser. As in n3fit, the
  // multiplier's changes do not restart patience.
  to.positivity_max = infinity;
  to.positivity_restarts_patience = false;
  to.positivity_tolerance = positivity_tolerance;

  const index_t R = ph.replicas, n = fs.front().size();
  for (DisObjective& f : fs) f.resize(3 * R);
  std::vector<Outcome> outcomes(static_cast<std::size_t>(R));
  std::vector<std::atomic<bool>> taken(static_cast<std::size_t>(R));
  for (index_t r = 0; r < R; ++r) taken[static_cast<std::size_t>(r)] = !which.empty() && std::find(which.begin(), which.end(), r) == which.end();
  const auto chi2 = [n](fitlib::ReplicaObjective<DisObjective>& o, const std::vector<double>& x, index_t points) {
    double v = 0;
    o.value(ConstBlockView<double>(x.data(), n, 1), std::span(&v, 1));
    return 2 * v / static_cast<double>(points);
  };
  const fitlib::ReplicaBatch<> batch(width);
  std::vector<std::string> errors(static_cast<std::size_t>(R));
  std::vector<fitlib::BatchStatistics> statistics_of(fs.size());
  std::vector<std::exception_ptr> failure_of(fs.size());
  const auto fit_on = [&](std::size_t thread) {
    try {
      DisObjective& f = fs[thread];
      std::vector<std::string> errors_here;
      statistics_of[thread] = batch.run(
          f, R,
          [&](index_t r, fitlib::ReplicaObjective<DisObjective>& fr) {
            if (taken[static_cast<std::size_t>(r)].exchange(true)) return;  // another thread's, or not asked for
            Outcome& out = outcomes[static_cast<std::size_t>(r)];
            prepare_inputs(d, f, ph, r, out);
            fitlib::ReplicaObjective<DisObjective> validation = fr.with_inputs(R + r), plain = fr.with_inputs(2 * R + r);
            // The validation ½χ² where n3fit's stopping counts it: χ²/n below the threshold and positivity passing; +∞
            // elsewhere (such a state is never kept, and patience starts with the first that passes; fact 10).
            auto loss = [&](const std::vector<double>& x) {
              out.current = x;
              const double v = chi2(validation, x, out.nvalidation), t = chi2(plain, x, out.ntraining);
              out.validation_history.push_back(v);
              out.training_history.push_back(t);
              // The thread's objective directly (not a pooled evaluation): between the pool's evaluations it is idle.
              const Eigen::VectorXd o = f.positivity_observables(x, out.pre);
              const double least = o.minCoeff(&out.least_row);
              out.positivity_history.push_back(least);
              const bool below = v < chi2_threshold, positive = !ph.positivity || least >= -positivity_tolerance;
              out.ever_below = out.ever_below || below;
              out.ever_positive = out.ever_positive || positive;
              out.ever_both = out.ever_both || (below && positive);
              return below && positive ? 0.5 * v * static_cast<double>(out.nvalidation) : infinity;
            };
            // At every tick of the clock: the multipliers' update at the current point (the minimiser restarts there),
            // and λ ×10 up to the gate, past it to --positivity-max once the replica's validation χ² has been below the
            // threshold. At the largest λ the multipliers go on converging (the method of multipliers' outer loop).
            const auto set_multiplier = [&f, &out, r, &s, &ph](double) {
              f.update_positivity_multipliers(r, out.current);
              DisReplicaInputs& t = f.inputs(r);
              const double cap = out.ever_below ? s.positivity_max : std::min(s.positivity_gate, s.positivity_max);
              out.schedule = std::min(cap, out.schedule * s.positivity_growth);  // cap ≥ λ: it starts at 184.8 ≤ the gate and only grows
              t.positivity = ph.positivity ? out.schedule : 0;
              t.integrability = integrability_of(out.schedule, s.positivity_max);
            };
            const std::vector<double> w0 = Network::initial(ph.seeds.network, static_cast<std::uint64_t>(r));
            if (s.optimizer == "nadam")
              train_replica_nadam(fr, loss, nadam, [&set_multiplier] { set_multiplier(0); }, w0, out.fit);
            else
              fitlib::train_replica(minimizer, fr, loss, to, set_multiplier, w0, out.fit);
            const Eigen::VectorXd mu = f.multiplier_estimates(r, out.current);
            out.multipliers.assign(mu.data(), mu.data() + mu.size());
            std::vector<double>().swap(out.fit.covariance);  // 763² NaNs (no postfit covariance asked for): 4.7 MB a replica
            out.training = chi2(plain, out.fit.x, out.ntraining);
            out.validation = chi2(validation, out.fit.x, out.nvalidation);
            release_inputs(f, ph, r);
          },
          &errors_here);
      for (std::size_t r = 0; r < errors_here.size(); ++r)
        if (!errors_here[r].empty()) errors[r] = errors_here[r];
    } catch (...) {
      failure_of[thread] = std::current_exception();
    }
  };
  {
    std::vector<std::jthread> threads;
    for (std::size_t t = 1; t < fs.size(); ++t) threads.emplace_back(fit_on, t);
    fit_on(0);
  }
  for (const std::exception_ptr& e : failure_of)
    if (e) std::rethrow_exception(e);
  if (statistics) {
    *statistics = {};
    for (const fitlib::BatchStatistics& st : statistics_of) *statistics += st;
    statistics->replicas = which.empty() ? R : static_cast<index_t>(which.size());
  }

  // Postfit, at the kept states (outside the batches: an objective directly).
  DisObjective& f = fs.front();
  const Eigen::LLT<Eigen::MatrixXd> covariance(*ph.C);
  if (covariance.info() != Eigen::Success) throw std::runtime_error("the phase's covariance is not positive definite");
  const Eigen::Map<const Eigen::VectorXd> central(d.central.data(), static_cast<index_t>(d.central.size()));
  for (index_t r = 0; r < R; ++r) {
    if (!which.empty() && std::find(which.begin(), which.end(), r) == which.end()) continue;
    Outcome& o = outcomes[static_cast<std::size_t>(r)];
    o.error = errors[static_cast<std::size_t>(r)];
    if (o.error.empty()) {
      const Eigen::VectorXd t = d.fk.table * f.grid_pdf(o.fit.x, o.pre);
      o.prediction.assign(t.data(), t.data() + t.size());
      o.least_positivity = f.least_positivity(o.fit.x, o.pre);
      o.integrability = integrability_number(o.fit.x, o.pre);
      const Eigen::VectorXd e = t - central;
      o.chi2 = e.dot(covariance.solve(e)) / static_cast<double>(e.size());
      o.arc_lengths = arc_lengths(o.fit.x, o.pre);
    } else {
      for (DisObjective& g : fs) release_inputs(g, ph, r);
    }
    o.verdict = verdict(o, ph.positivity);
  }
  if (which.empty()) distribution_vetoes(outcomes);
  return outcomes;
}

/// The kept replicas of a phase.
std::vector<index_t> kept(const std::vector<Outcome>& outcomes) {
  std::vector<index_t> k;
  for (std::size_t r = 0; r < outcomes.size(); ++r)
    if (outcomes[r].verdict == "kept") k.push_back(static_cast<index_t>(r));
  return k;
}

/// The mean prediction of the replicas `which`.
std::vector<double> mean_prediction(const std::vector<Outcome>& outcomes, const std::vector<index_t>& which, index_t n) {
  std::vector<double> m(static_cast<std::size_t>(n), 0.0);
  for (index_t r : which)
    for (index_t i = 0; i < n; ++i) m[static_cast<std::size_t>(i)] += outcomes[static_cast<std::size_t>(r)].prediction[static_cast<std::size_t>(i)];
  for (double& v : m) v /= static_cast<double>(which.size());
  return m;
}

/// Prints how a phase's replicas ended.
void summarise(const DisData& d, const char* name, const std::vector<Outcome>& outcomes, double seconds) {
  std::vector<std::pair<std::string, index_t>> counts;
  double iterations = 0;
  for (const Outcome& o : outcomes) {
    iterations += static_cast<double>(o.fit.iterations);
    auto it = std::find_if(counts.begin(), counts.end(), [&](const auto& c) { return c.first == o.verdict; });
    if (it == counts.end()) counts.emplace_back(o.verdict, 1);
    else ++it->second;
  }
  std::printf("%s: %zu replicas in %.1f s (%.0f replicas per hour), %.0f iterations per replica;", name, outcomes.size(), seconds,
              static_cast<double>(outcomes.size()) / (seconds / 3600), iterations / static_cast<double>(outcomes.size()));
  for (const auto& [verdict, count] : counts) std::printf(" %s %td;", verdict.c_str(), count);
  std::printf("\n");
  // How far the positivity observables end below 0 (the veto and the gate want ≥ −1e-6).
  std::vector<double> least;
  for (const Outcome& o : outcomes)
    if (std::isfinite(o.least_positivity)) least.push_back(o.least_positivity);
  if (!least.empty()) {
    std::sort(least.begin(), least.end());
    std::printf("  least positivity observable at the kept states (the start where no state passed the gate): min %.3g, median %.3g, max %.3g\n",
                least.front(), least[least.size() / 2], least.back());
  }
  for (std::size_t r = 0; r < outcomes.size(); ++r)
    if (!outcomes[r].error.empty()) std::printf("  replica %zu failed: %s\n", r, outcomes[r].error.c_str());
  // The first replicas' course: training/validation χ²/n and the least positivity observable at 6 of their states.
  for (std::size_t r = 0; r < std::min<std::size_t>(outcomes.size(), 8); ++r) {
    const Outcome& o = outcomes[r];
    if (o.training_history.empty()) continue;
    std::printf("  replica %zu (%s, %td iterations): χ²/n tr/vl, least positivity:", r, o.verdict.c_str(), o.fit.iterations);
    const std::size_t n = o.training_history.size();
    for (std::size_t k = 0; k < 6; ++k) {
      const std::size_t i = k * (n - 1) / 5;
      std::printf(" [%zu] %.3g/%.3g, %.2g", i, o.training_history[i], o.validation_history[i], o.positivity_history[i]);
    }
    if (o.least_row >= 0)  // which set, at which x, is the least at the last state
      std::printf("; least: %s at x = %.3g", d.positivity_set(o.least_row).c_str(), d.positivity_x[static_cast<std::size_t>(o.least_row)]);
    // The constraints that bind hardest: the largest multipliers.
    std::vector<index_t> rows(o.multipliers.size());
    for (std::size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<index_t>(i);
    const std::size_t top = std::min<std::size_t>(rows.size(), 3);
    std::partial_sort(rows.begin(), rows.begin() + static_cast<std::ptrdiff_t>(top), rows.end(),
                      [&](index_t a, index_t b) { return o.multipliers[static_cast<std::size_t>(a)] > o.multipliers[static_cast<std::size_t>(b)]; });
    for (std::size_t k = 0; k < top && o.multipliers[static_cast<std::size_t>(rows[k])] > 0; ++k)
      std::printf("%s %s at x = %.3g: mu %.3g", k == 0 ? "; largest multipliers:" : ",", d.positivity_set(rows[k]).c_str(),
                  d.positivity_x[static_cast<std::size_t>(rows[k])], o.multipliers[static_cast<std::size_t>(rows[k])]);
    std::printf("\n");
  }
}

/// χ²/n of predictions t against the data on `rows`, with that block of C.
double chi2_per_point(const DisData& d, const Eigen::MatrixXd& C, const std::vector<index_t>& rows, const std::vector<double>& t) {
  const auto m = static_cast<index_t>(rows.size());
  if (m == 0) return not_a_number;
  Eigen::MatrixXd B(m, m);
  Eigen::VectorXd e(m);
  for (index_t a = 0; a < m; ++a) {
    const index_t i = rows[static_cast<std::size_t>(a)];
    for (index_t b = 0; b < m; ++b) B(a, b) = C(i, rows[static_cast<std::size_t>(b)]);
    e(a) = t[static_cast<std::size_t>(i)] - d.central[static_cast<std::size_t>(i)];
  }
  return e.dot(Eigen::LLT<Eigen::MatrixXd>(B).solve(e)) / static_cast<double>(m);
}

/// A set of points whose χ²/n is reported, with its anchors (NaN: none).
struct Subset {
  std::string name;
  std::vector<index_t> rows;
  double poc = not_a_number, nnpdf_t0 = not_a_number, nnpdf_experimental = not_a_number;
  double t0 = not_a_number, experimental = not_a_number;  ///< ours
};

/// The rows of dataset `name` with Q² ≤ q2max (empty where the file has no such dataset).
std::vector<index_t> rows_of(const DisData& d, const std::string& name, double q2max = infinity) {
  std::vector<index_t> rows;
  const index_t s = d.dataset(name);
  if (s < 0) return rows;
  for (index_t i = d.offset[static_cast<std::size_t>(s)]; i < d.offset[static_cast<std::size_t>(s) + 1]; ++i)
    if (d.Q2[static_cast<std::size_t>(i)] <= q2max) rows.push_back(i);
  return rows;
}

/// The anchors of nnpdf-example.md §4: items 4 (the 17-parameter polynomial with the same theory, joint fit) and
/// 1 (NNPDF4.0 NNLO on HERA NC e⁺p 920 GeV, t0 covariance; 1.305 with the experimental one).
std::vector<Subset> anchor_subsets(const DisData& d) {
  std::vector<Subset> a;
  a.push_back({"BCDMS p F2", rows_of(d, "BCDMS_NC_NOTFIXED_P_EM-F2"), 1.213});
  a.push_back({"SLAC p F2", rows_of(d, "SLAC_NC_NOTFIXED_P_EM-F2"), 1.487});
  a.push_back({"HERA NC e+p 920, Q2 <= 100", rows_of(d, "HERA_NC_318GEV_EP-SIGMARED", 100.0), 1.988, 1.365});
  Subset total{"BCDMS + SLAC + HERA Q2 <= 100", {}, 1.505};
  for (std::size_t i = 0; i < 3; ++i) total.rows.insert(total.rows.end(), a[i].rows.begin(), a[i].rows.end());
  std::sort(total.rows.begin(), total.rows.end());
  a.push_back(total);
  a.push_back({"HERA NC e+p 920, all", rows_of(d, "HERA_NC_318GEV_EP-SIGMARED"), not_a_number, 1.3931, 1.305});
  return a;
}

/// The q-quantile of v by linear interpolation between order statistics (numpy's default).
double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const double p = q * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(p));
  const std::size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (p - static_cast<double>(lo)) * (v[hi] - v[lo]);
}

std::string stop_reason(const fitlib::ReplicaFit& fit) {
  return fit.status == fitlib::FitStatus::converged_callback ? std::string("patience") : std::string(fitlib::to_string(fit.status));
}

}  // namespace

int main(int argc, char** argv) {
  Settings s;
  bool maxiter_given = false, patience_given = false;
  for (int i = 1; i < argc; ++i) {
    const bool has_value = i + 1 < argc;
    const auto is = [&](const char* flag) { return !std::strcmp(argv[i], flag) && has_value; };
    const auto number = [&] { return static_cast<index_t>(std::atoll(argv[++i])); };
    if (!std::strcmp(argv[i], "--central")) s.central = true;
    else if (!std::strcmp(argv[i], "--no-positivity")) s.positivity = false;
    else if (is("--data")) s.data = argv[++i];
    else if (is("--out")) s.out = argv[++i];
    else if (is("--replicas")) s.replicas = number();
    else if (is("--width")) s.width = number();
    else if (is("--t0-replicas")) s.t0_replicas = number();
    else if (is("--seed")) s.seed = std::strtoull(argv[++i], nullptr, 10);
    else if (is("--maxiter")) s.maxiter = number(), maxiter_given = true;
    else if (is("--patience")) s.patience = number(), patience_given = true;
    else if (is("--optimizer")) s.optimizer = argv[++i];
    else if (is("--positivity-max")) s.positivity_max = std::atof(argv[++i]);
    else if (is("--positivity-growth")) s.positivity_growth = std::atof(argv[++i]);
    else if (is("--max-radius")) s.max_radius = std::atof(argv[++i]);
    else if (is("--positivity-gate")) s.positivity_gate = std::atof(argv[++i]);
    else if (is("--subset")) s.subset = argv[++i];
    else if (is("--training-fraction")) s.training_fraction = std::atof(argv[++i]);
    else if (is("--threads"))
      s.threads = number();
    else if (is("--positivity-xmax")) s.positivity_xmax = std::atof(argv[++i]);
    else {
      std::fprintf(stderr,
                   "usage: nnpdf_dis_fit [--data FILE] [--replicas R] [--width W] [--threads T] [--t0-replicas R0] [--seed S] [--out FILE]\n"
                   "                     [--maxiter N] [--patience N] [--positivity-max L] [--positivity-gate G]\n"
                   "                     [--subset all|poc] [--central] [--training-fraction F] [--no-positivity]\n"
                   "                     [--positivity-xmax X] [--optimizer trust-region|nadam] [--positivity-growth F]\n"
                   "                     [--max-radius D]\n"
                   "defaults: --data %s --replicas 100 --width 1 --threads %td (the cores this process may use) --t0-replicas 20 (0: t0 = the data)\n"
                   "          --seed 1"
                   " --out %s --maxiter 24000 --patience 2400 --positivity-max 1e6 --positivity-gate 1e6\n"
                   "          --subset all (poc: the 568 points of the polynomial's joint fit) --training-fraction 0.75\n"
                   "          (1: no validation set); --central: every replica fits the central values (n3fit's genrep: false);\n"
                   "          --no-positivity: no positivity penalty, gate or veto (a diagnosis); --positivity-xmax 1: only the\n"
                   "          positivity rows at x <= X (a diagnosis); --optimizer nadam: n3fit's Nadam instead of the trust\n"
                   "          region (for comparison; then --maxiter 17000 --patience 1700 unless given); --positivity-growth 10:\n"
                   "          lambda's factor per tick; --max-radius 1000: the trust region's largest radius in the weights\n",
                   Settings{}.data.c_str(), Settings{}.threads, Settings{}.out.c_str());
      return 2;
    }
  }
  if (s.optimizer == "nadam") {
    if (!maxiter_given) s.maxiter = NadamOptions{}.epochs;
    if (!patience_given) s.patience = NadamOptions{}.patience;
  }
  if (s.replicas < 1 || s.width < 1 || s.threads < 1 || s.t0_replicas < 0 || s.maxiter < 1 || s.patience < 1 ||
      !(s.positivity_max >= positivity_initial) || !(s.positivity_gate >= positivity_initial) ||
      !(s.training_fraction >= 0.5 && s.training_fraction <= 1) || (s.subset != "all" && s.subset != "poc") || !(s.positivity_xmax > 0) ||
      (s.optimizer != "trust-region" && s.optimizer != "nadam") || !(s.positivity_growth > 1 && std::isfinite(s.positivity_growth)) ||
      !(s.max_radius > 0 && std::isfinite(s.max_radius))) {
    std::fprintf(stderr,
                 "nnpdf_dis_fit: --replicas, --width, --threads, --maxiter and --patience must be >= 1, --t0-replicas >= 0, --positivity-max and "
                 "--positivity-gate >= %g, --training-fraction in [0.5, 1], --positivity-xmax > 0, --subset all or poc, --optimizer "
                 "trust-region or nadam, --positivity-growth > 1, --max-radius > 0 (both finite)\n",
                 positivity_initial);
    return 2;
  }
  // The output is written after hours of fitting: its directory must exist now.
  if (const auto dir = std::filesystem::absolute(s.out).parent_path(); !std::filesystem::is_directory(dir)) {
    std::fprintf(stderr, "nnpdf_dis_fit: the directory of --out %s does not exist; create it or choose another file\n", s.out.c_str());
    return 2;
  }
  const auto t_start = std::chrono::steady_clock::now();
  const auto since = [](std::chrono::steady_clock::time_point t) { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count(); };

  DisData d;
  try {
    d = read_dis_data(s.data);
    if (s.subset == "poc") {
      const std::vector<index_t> rows = anchor_subsets(d)[3].rows;
      if (rows.empty()) throw std::runtime_error("'" + s.data + "' holds none of the polynomial's datasets (BCDMS p, SLAC p, HERA NC e+p 920 GeV); use --subset all");
      d = restricted(d, rows);
    }
    if (s.positivity_xmax < 1) d = positivity_up_to(d, s.positivity_xmax);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "nnpdf_dis_fit: %s\n", e.what());
    return 1;
  }
  const index_t N = d.size();
  std::printf("NNPDF-style fit of proton DIS data%s: %td points in %td datasets, FK grid of %zu nodes, %zu positivity observables, %zu network weights\n",
              s.subset == "poc" ? " (the polynomial's 568 points)" : "", N, d.datasets(), d.fk.grid_x.size(), static_cast<std::size_t>(d.positivity.rows()), Network::size);
  std::printf("checks\n");
  check(covariance_mismatch(d) < 1e-12, "C(data) from the ADD/MULT decomposition against /covariance/experimental", covariance_mismatch(d));
  check(fk_benchmark_mismatch(d) < 1e-3, "FK x benchmark PDF against HOPPET's direct predictions (max relative)", fk_benchmark_mismatch(d));
  check(positivity_benchmark_mismatch(d) < 1e-3, "the same for the positivity tables (relative to each set's largest)", positivity_benchmark_mismatch(d));
  if (failures) {
    std::printf("FAILED: %s does not hold what prepare.py checked; %s\n", s.data.c_str(), prepare_remedy);
    return 1;
  }

  DisObjective f(d.fk.grid_x, d.positivity.table, d.integrability.table, d.integrability.grid_x[0]);  // (x = 1e-9)
  const Eigen::MatrixXd C_exp = d.covariance(d.central);
  const std::span<const double> C_exp_span(C_exp.data(), static_cast<std::size_t>(C_exp.size()));
  const fitlib::CovarianceReplicas mc_exp(d.central, C_exp_span);
  const Phase first{"t0 fit", seeds_of(s.seed, 0), std::max<index_t>(s.t0_replicas, 1), &C_exp, s.central ? nullptr : &mc_exp,
                    s.positivity_max, s.training_fraction, s.positivity};

  // Derivatives at the first fit's replica 0 at its start, both penalties on (some positivity observables are
  // negative there): the gradient against central differences along random directions, and the Gauss–Newton
  // products' symmetry and positivity.
  {
    f.resize(3 * first.replicas);
    Outcome scratch;
    prepare_inputs(d, f, first, 0, scratch);
    f.inputs(0).positivity = 1e3;
    // Multipliers on a third of the observables, so that the shifted constraints are checked too.
    Eigen::VectorXd& mu = f.inputs(0).positivity_multipliers;
    mu = Eigen::VectorXd::Zero(d.positivity.table.rows());
    for (index_t i = 0; i < mu.size(); i += 3) mu(i) = 0.1 * static_cast<double>(i % 7);
    f.inputs(0).integrability = integrability_max;
    const std::vector<double> w0 = Network::initial(first.seeds.network, 0);
    check(f.least_positivity(w0, scratch.pre) < 0, "positivity penalty active at the derivative checks' point (least observable)",
          f.least_positivity(w0, scratch.pre));
    const DerivativeCheck c = check_derivatives(f, w0);
    check(c.gradient < 1e-5, "gradient against central differences, penalties on (max relative)", c.gradient);
    check(c.asymmetry < 1e-10 && c.least_curvature >= 0, "Gauss-Newton products symmetric (max relative vHu - uHv) and u.Hu >= 0", c.asymmetry);
    release_inputs(f, first, 0);
  }

  // One objective per thread (each holds its running replicas' inputs; the tables are small beside them).
  std::vector<DisObjective> fs(static_cast<std::size_t>(s.threads), f);

  // The first fit: t0 = the mean prediction of its kept replicas (or the data with --t0-replicas 0).
  std::vector<double> t0 = d.central;
  double t0_seconds = 0;
  std::vector<Outcome> t0_outcomes;
  std::vector<index_t> t0_kept;
  if (s.t0_replicas > 0) {
    const auto t = std::chrono::steady_clock::now();
    t0_outcomes = fit_phase(d, fs, first, s, s.width, {});
    t0_seconds = since(t);
    summarise(d, "t0 fit (experimental covariance)", t0_outcomes, t0_seconds);
    t0_kept = kept(t0_outcomes);
    check(!t0_kept.empty(), "replicas the t0 fit keeps", static_cast<double>(t0_kept.size()));
    if (t0_kept.empty()) {
      std::printf("FAILED: no t0 (the verdicts above say why; --t0-replicas 0 takes t0 = the data)\n");
      return 1;
    }
    t0 = mean_prediction(t0_outcomes, t0_kept, N);
  }

  // The main fit: data replicas from the t0 covariance around the data, each fitted with it (n3fit fact 5).
  const Eigen::MatrixXd C_t0 = d.covariance(t0);
  const fitlib::CovarianceReplicas mc_t0(d.central, std::span<const double>(C_t0.data(), static_cast<std::size_t>(C_t0.size())));
  const Phase main_fit{"main fit", seeds_of(s.seed, 1), s.replicas, &C_t0, s.central ? nullptr : &mc_t0, s.positivity_max,
                       s.training_fraction, s.positivity};
  fitlib::BatchStatistics stats;
  const auto t_fit = std::chrono::steady_clock::now();
  const std::vector<Outcome> outcomes = fit_phase(d, fs, main_fit, s, s.width, {}, &stats);
  const double fit_seconds = since(t_fit);
  summarise(d, "main fit (t0 covariance)", outcomes, fit_seconds);
  std::printf("  batch: width %td on %td threads, %td pooled evaluations of %.1f columns on average, %.0f %% full\n", stats.width, s.threads,
              stats.evaluations, static_cast<double>(stats.columns) / static_cast<double>(std::max<index_t>(stats.evaluations, 1)),
              100 * stats.active_fraction);
  const std::vector<index_t> good = kept(outcomes);
  const auto G = static_cast<index_t>(good.size());
  const index_t needed = std::min<index_t>(s.replicas, 2);
  check(G >= needed, "replicas the main fit keeps (at least 2 for a band, or the one fitted)", static_cast<double>(G));
  if (G < needed) {
    std::printf("FAILED: too few replicas kept\n");
    return 1;
  }

  // χ²/n of the mean prediction per dataset, in total and on the anchors' subsets, with both covariances.
  const std::vector<double> mean = mean_prediction(outcomes, good, N);
  std::vector<Subset> per_dataset;
  for (index_t k = 0; k < d.datasets(); ++k) {
    Subset sub{d.names[static_cast<std::size_t>(k)], {}};
    for (index_t i = d.offset[static_cast<std::size_t>(k)]; i < d.offset[static_cast<std::size_t>(k) + 1]; ++i) sub.rows.push_back(i);
    per_dataset.push_back(sub);
  }
  Subset total{"total", {}};
  for (index_t i = 0; i < N; ++i) total.rows.push_back(i);
  per_dataset.push_back(total);
  std::vector<Subset> anchors = anchor_subsets(d);
  if (s.subset == "poc") anchors.pop_back();  // "HERA NC e+p 920, all" would be its Q² ≤ 100 points again
  for (auto* list : {&per_dataset, &anchors})
    for (Subset& sub : *list) {
      sub.t0 = chi2_per_point(d, C_t0, sub.rows, mean);
      sub.experimental = chi2_per_point(d, C_exp, sub.rows, mean);
    }
  const auto cell = [](double v) {
    char b[400];  // any double in %9.3f fits (no truncation to warn about)
    if (std::isnan(v)) std::snprintf(b, sizeof b, "%9s", "-");
    else std::snprintf(b, sizeof b, "%9.3f", v);
    return std::string(b);
  };
  std::printf("chi2/n of the mean prediction of the %td kept replicas\n  %-36s %5s %9s %9s\n", G, "dataset", "n", "t0 cov", "exp cov");
  for (const Subset& sub : per_dataset)
    std::printf("  %-36s %5zu %s %s\n", sub.name.c_str(), sub.rows.size(), cell(sub.t0).c_str(), cell(sub.experimental).c_str());
  std::printf("  next to nnpdf-example.md section 4 (PoC: a 17-parameter polynomial, same theory, joint fit; NNPDF4.0: NNLO, its t0)\n");
  std::printf("  %-36s %5s %9s %9s %9s %9s %9s\n", "subset", "n", "t0 cov", "exp cov", "PoC", "NNPDF4.0", "(exp cov)");
  for (const Subset& sub : anchors)
    std::printf("  %-36s %5zu %s %s %s %s %s\n", sub.name.c_str(), sub.rows.size(), cell(sub.t0).c_str(), cell(sub.experimental).c_str(),
                cell(sub.poc).c_str(), cell(sub.nnpdf_t0).c_str(), cell(sub.nnpdf_experimental).c_str());
  if (anchors[2].rows.size() != 202 || anchors[3].rows.size() != 568)
    std::printf("  note: the anchors' subsets have 202 and 568 points; these have %zu and %zu (another cut or data version?)\n", anchors[2].rows.size(),
                anchors[3].rows.size());
  std::printf("  (the PoC's covariance is not recorded; NNPDF4.0's t0 is its own prediction, ours is the first fit's)\n");

  // Per replica, the χ²/n of its prediction against the data with the t0 covariance (n3fit's "experimental" χ²).
  std::vector<double> replica_chi2;
  for (const Outcome& o : outcomes) replica_chi2.push_back(o.chi2);

  // The PDFs at Q0 on a log grid from 10⁻⁵ to 0.9: per kept replica, the mean and the 68 % band (16th and 84th
  // percentiles over the kept replicas).
  std::vector<double> xs;
  for (int i = 0; i < 100; ++i) xs.push_back(1e-5 * std::pow(0.9 / 1e-5, i / 99.0));
  const Points q(xs, {});
  const int shown[] = {Gluon, Sigma, V, T3};
  std::vector<std::vector<double>> xf(std::size(shown));  // [flavour][replica·100 + i]
  for (index_t r : good) {
    PdfReplica p;
    p.evaluate(outcomes[static_cast<std::size_t>(r)].fit.x, outcomes[static_cast<std::size_t>(r)].pre, q);
    for (std::size_t k = 0; k < std::size(shown); ++k)
      for (std::size_t i = 0; i < xs.size(); ++i) xf[k].push_back(p.xf(i, shown[k]));
  }

  // The output file.
  try {
    const auto out = h5::File::create(s.out);
    h5::write_attribute(out, "program", "nnpdf_dis_fit (fitlib examples/nnpdf)");
    h5::write_attribute(out, "data", s.data);
    h5::write_attribute(out, "license", "derived from GPL-3.0-or-later data (nnpdf-data, HOPPET tables): do not commit");
    const auto settings = h5::create_group(out, "settings");
    h5::write_attribute(settings, "replicas", s.replicas);
    h5::write_attribute(settings, "width", s.width);
    h5::write_attribute(settings, "threads", s.threads);
    h5::write_attribute(settings, "t0_replicas", s.t0_replicas);
    h5::write_attribute(settings, "seed", static_cast<std::int64_t>(s.seed));
    h5::write_attribute(settings, "maxiter", s.maxiter);
    h5::write_attribute(settings, "patience", s.patience);
    h5::write_attribute(settings, "chi2_threshold", chi2_threshold);
    h5::write_attribute(settings, "training_fraction", s.training_fraction);
    h5::write_attribute(settings, "subset", s.subset);
    h5::write_attribute(settings, "central", static_cast<std::int64_t>(s.central));
    h5::write_attribute(settings, "positivity_imposed", static_cast<std::int64_t>(s.positivity));
    h5::write_attribute(settings, "positivity_xmax", s.positivity_xmax);
    h5::write_attribute(settings, "positivity_initial", positivity_initial);
    h5::write_attribute(settings, "positivity_growth", s.positivity_growth);
    h5::write_attribute(settings, "optimizer", s.optimizer);
    h5::write_attribute(settings, "positivity_every", s.optimizer == "nadam" ? NadamOptions{}.positivity_every : positivity_every);
    h5::write_attribute(settings, "positivity_max", s.positivity_max);
    h5::write_attribute(settings, "positivity_gate", s.positivity_gate);
    h5::write_attribute(settings, "positivity_tolerance", positivity_tolerance);
    h5::write_attribute(settings, "positivity_penalty", "augmented Lagrangian: 1/2 lambda min(0, O - mu/lambda)^2, mu <- max(0, mu - lambda O) every positivity_every iterations (n3fit: linear ELU)");
    h5::write_attribute(settings, "integrability_initial", integrability_initial);
    h5::write_attribute(settings, "integrability_max", integrability_max);
    h5::write_attribute(settings, "integrability_penalty", "1/2 (lambda_int y)^2, y = x T3, x T8 at x = 1e-9; lambda_int from 10 to 100 geometrically as lambda_pos grows to its maximum");
    h5::write_attribute(settings, "integrability_threshold", integrability_threshold);
    h5::write_attribute(settings, "integrability_number", "max over V, V3, V8, T3, T8 of sum |x f| at x = 1e-9, 10^-7.5, 1e-6");
    h5::write_attribute(settings, "t0_seconds", t0_seconds);
    h5::write_attribute(settings, "fit_seconds", fit_seconds);
    h5::write_attribute(settings, "replicas_per_hour", static_cast<double>(s.replicas) / (fit_seconds / 3600));

    const auto pdf = h5::create_group(out, "pdf");
    h5::write_attribute(pdf, "Q0", 1.65);
    h5::write_attribute(pdf, "quantity", "x f(x, Q0) in the evolution basis; band = 16th to 84th percentile over the kept replicas");
    h5::write(pdf, "x", std::span<const double>(xs));
    std::vector<std::int64_t> kept_index(good.begin(), good.end());
    h5::write(pdf, "kept", std::span<const std::int64_t>(kept_index));
    for (std::size_t k = 0; k < std::size(shown); ++k) {
      const auto g = h5::create_group(pdf, evol_names[static_cast<std::size_t>(shown[k])]);
      h5::write(g, "replicas", std::span<const double>(xf[k]), {good.size(), xs.size()});
      std::vector<double> central(xs.size()), lower(xs.size()), upper(xs.size());
      for (std::size_t i = 0; i < xs.size(); ++i) {
        std::vector<double> v;
        for (std::size_t r = 0; r < good.size(); ++r) v.push_back(xf[k][r * xs.size() + i]);
        double m = 0;
        for (double x : v) m += x / static_cast<double>(v.size());
        central[i] = m;
        lower[i] = quantile(v, 0.16);
        upper[i] = quantile(v, 0.84);
      }
      h5::write(g, "central", std::span<const double>(central));
      h5::write(g, "lower_68", std::span<const double>(lower));
      h5::write(g, "upper_68", std::span<const double>(upper));
    }

    const auto chi2 = h5::create_group(out, "chi2");
    h5::write_attribute(chi2, "of", "the mean prediction of the kept replicas against the data, chi2/n");
    for (const auto& [name, list] : {std::pair{"datasets", &per_dataset}, std::pair{"anchors", &anchors}}) {
      const auto g = h5::create_group(chi2, name);
      std::vector<std::string> names;
      std::vector<std::int64_t> ndata;
      std::vector<double> t0v, ex, poc, nt0, nex;
      for (const Subset& sub : *list) {
        names.push_back(sub.name);
        ndata.push_back(static_cast<std::int64_t>(sub.rows.size()));
        t0v.push_back(sub.t0);
        ex.push_back(sub.experimental);
        poc.push_back(sub.poc);
        nt0.push_back(sub.nnpdf_t0);
        nex.push_back(sub.nnpdf_experimental);
      }
      h5::write_strings(g, "name", names);
      h5::write(g, "ndata", std::span<const std::int64_t>(ndata));
      h5::write(g, "t0", std::span<const double>(t0v));
      h5::write(g, "experimental", std::span<const double>(ex));
      if (list == &anchors) {
        h5::write(g, "poc_polynomial", std::span<const double>(poc));
        h5::write(g, "nnpdf40_t0", std::span<const double>(nt0));
        h5::write(g, "nnpdf40_experimental", std::span<const double>(nex));
      }
    }
    h5::write(chi2, "mean_prediction", std::span<const double>(mean));
    h5::write(chi2, "t0_prediction", std::span<const double>(t0));

    const auto reps = h5::create_group(out, "replicas");
    const std::size_t R = outcomes.size();
    std::size_t longest = 0;
    for (const Outcome& o : outcomes) longest = std::max(longest, o.training_history.size());
    std::vector<double> th(R * longest, not_a_number), vh(R * longest, not_a_number), tr(R), vl(R), pos(R), integ(R);
    std::vector<std::int64_t> length(R), iterations(R), best(R), is_kept(R);
    std::vector<std::string> reason(R), verdicts(R);
    for (std::size_t r = 0; r < R; ++r) {
      const Outcome& o = outcomes[r];
      std::copy(o.training_history.begin(), o.training_history.end(), th.begin() + static_cast<std::ptrdiff_t>(r * longest));
      std::copy(o.validation_history.begin(), o.validation_history.end(), vh.begin() + static_cast<std::ptrdiff_t>(r * longest));
      length[r] = static_cast<std::int64_t>(o.training_history.size());
      iterations[r] = o.fit.iterations;
      best[r] = o.fit.best_iteration;
      is_kept[r] = o.verdict == "kept";
      tr[r] = o.training;
      vl[r] = o.validation;
      pos[r] = o.least_positivity;
      integ[r] = o.integrability;
      reason[r] = o.error.empty() ? stop_reason(o.fit) : "failed: " + o.error;
      verdicts[r] = o.verdict;
    }
    h5::write_attribute(reps, "history", "chi2/n of the training and validation data (no penalties) at the start and after every accepted step; NaN-padded");
    h5::write(reps, "training_history", std::span<const double>(th), {R, longest});
    h5::write(reps, "validation_history", std::span<const double>(vh), {R, longest});
    h5::write(reps, "history_length", std::span<const std::int64_t>(length));
    h5::write(reps, "iterations", std::span<const std::int64_t>(iterations));
    h5::write(reps, "best_iteration", std::span<const std::int64_t>(best));
    h5::write(reps, "kept", std::span<const std::int64_t>(is_kept));
    h5::write_strings(reps, "stop_reason", reason);
    h5::write_strings(reps, "verdict", verdicts);
    h5::write(reps, "training_chi2", std::span<const double>(tr));
    h5::write(reps, "validation_chi2", std::span<const double>(vl));
    h5::write(reps, "chi2_t0", std::span<const double>(replica_chi2));
    h5::write(reps, "least_positivity", std::span<const double>(pos));
    h5::write(reps, "integrability_number", std::span<const double>(integ));
    // The multiplier estimates at each replica's last point, [replica, positivity row], with each row's set and x.
    const std::size_t P = static_cast<std::size_t>(d.positivity.rows());
    std::vector<double> mu(R * P, not_a_number);
    std::vector<std::string> row_set(P);
    for (std::size_t r = 0; r < R; ++r)
      if (outcomes[r].multipliers.size() == P) std::copy(outcomes[r].multipliers.begin(), outcomes[r].multipliers.end(), mu.begin() + static_cast<std::ptrdiff_t>(r * P));
    for (std::size_t i = 0; i < P; ++i) row_set[i] = d.positivity_set(static_cast<index_t>(i));
    h5::write(reps, "positivity_multipliers", std::span<const double>(mu), {R, P});
    h5::write_strings(reps, "positivity_row_set", row_set);
    h5::write(reps, "positivity_row_x", std::span<const double>(d.positivity_x));
    out.flush();
    std::printf("wrote %s (plot: .venv-nnpdf/bin/python examples/nnpdf/plot.py %s)\n", s.out.c_str(), s.out.c_str());
  } catch (const std::exception& e) {
    std::printf("FAILED to write %s: %s\n", s.out.c_str(), e.what());
    ++failures;
  }

  // The first 8 replicas refitted on one thread (after the output is safe), as one batch of 8 where --width is 1, else
  // one at a time: each is bitwise its fit in the main fit (--width on --threads threads); and the wall time per
  // trust-region iteration of either against the main fit's, measured in the same run.
  {
    const index_t k = std::min<index_t>(s.replicas, 8);
    std::vector<index_t> first_k(static_cast<std::size_t>(k));
    for (index_t r = 0; r < k; ++r) first_k[static_cast<std::size_t>(r)] = r;
    const auto t = std::chrono::steady_clock::now();
    const index_t width = s.width == 1 ? k : 1;
    const std::vector<Outcome> alone = fit_phase(d, std::span(fs).first(1), main_fit, s, width, first_k);
    const double sequential_seconds = since(t);
    bool same = true;
    double sequential_iterations = 0, batch_iterations = 0;
    for (index_t r : first_k) {
      const auto& a = outcomes[static_cast<std::size_t>(r)].fit;
      const auto& b = alone[static_cast<std::size_t>(r)].fit;
      same = same && a.x.size() == b.x.size() && std::memcmp(a.x.data(), b.x.data(), a.x.size() * sizeof(double)) == 0 &&
             a.iterations == b.iterations && a.best_iteration == b.best_iteration;
      sequential_iterations += static_cast<double>(b.iterations);
    }
    for (const Outcome& o : outcomes) batch_iterations += static_cast<double>(o.fit.iterations);
    check(same, "the first replicas refitted on one thread at another width: bitwise their fits (1 = yes)", same ? 1 : 0);
    // Wall time per trust-region iteration, each replica's set-up (whitening) and postfit included.
    std::printf(
        "  refitted on one thread at width %td: %td replicas in %.1f s (%.0f replicas per hour), %.2f ms per iteration; the main fit "
        "(width %td, %td threads): %.2f ms per iteration\n",
        width, k, sequential_seconds, static_cast<double>(k) / (sequential_seconds / 3600),
        1e3 * sequential_seconds / std::max(sequential_iterations, 1.0), s.width, s.threads, 1e3 * fit_seconds / std::max(batch_iterations, 1.0));
  }

  const double total_seconds = since(t_start);
  std::printf("time: t0 fit %.1f s (%td replicas), main fit %.1f s (%td replicas, %.0f replicas per hour; %.0f with the t0 fit's time), "
              "total %.1f s\n",
              t0_seconds, s.t0_replicas, fit_seconds, s.replicas, static_cast<double>(s.replicas) / (fit_seconds / 3600),
              static_cast<double>(s.replicas) / ((fit_seconds + t0_seconds) / 3600), total_seconds);
  std::printf("%s\n", failures ? "FAILED" : "passed");
  return failures ? 1 : 0;
}
