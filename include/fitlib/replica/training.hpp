// SPDX-License-Identifier: MIT
// n3fit-style replica training: per-replica training/validation splits, early stopping with patience
// on the validation NLL, the best state kept, and positivity by a growing penalty with a final veto.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "fitlib/core/error.hpp"
#include "fitlib/likelihood/likelihood.hpp"
#include "fitlib/likelihood/replica_inputs.hpp"
#include "fitlib/minimize/fit.hpp"
#include "fitlib/replica/early_stopping.hpp"
#include "fitlib/replica/positivity.hpp"
#include "fitlib/replica/random.hpp"
#include "fitlib/replica/replica_batch.hpp"

namespace fitlib {

/// How replicas are trained (n3fit-parallel-replicas.md §2.4, §3.4, §4): what n3fit does, with
/// every replica's state its own (no stopped replica is computed on, no shared multiplier).
struct TrainingOptions {
  /// Fraction of the unmasked bins each replica holds out for validation, in [0, 1): exactly
  /// ⌊n·fraction⌋ bins, chosen from (seed, replica). 0 trains on everything without early stopping.
  double validation_fraction = 0.25;
  std::uint64_t seed = 0;
  /// Iterations without a validation improvement after which a replica stops (≥ 1).
  index_t patience = 20;
  /// An improvement must lower the validation NLL by more than this (n3fit's stopping_delta, ≥ 0).
  double min_improvement = 0;
  /// The positivity penalty, added to the likelihood first (add_regularizer); null for none.
  std::shared_ptr<const PositivityPenalty> positivity;
  /// The penalty's multiplier: `positivity_initial`, times `positivity_growth` every
  /// `positivity_every` iterations (n3fit's schedule, §3.4) and whenever the minimiser converges
  /// before it reached `positivity_max`, so that a replica ends at the full multiplier.
  double positivity_initial = 1;
  double positivity_growth = 10;
  index_t positivity_every = 10;
  double positivity_max = 1e8;
  /// The veto at the kept state: every positivity observable ≥ −tolerance (relative to its prefit yield).
  double positivity_tolerance = 1e-6;
  /// The postfit covariance of the kept state.
  bool covariance = false;

  void validate() const {
    auto fail = [](const std::string& what) { throw std::invalid_argument("TrainingOptions::" + what); };
    if (!(validation_fraction >= 0 && validation_fraction < 1)) fail("validation_fraction must be in [0, 1), got " + std::to_string(validation_fraction));
    if (patience < 1) fail("patience must be ≥ 1, got " + std::to_string(patience));
    if (!(min_improvement >= 0)) fail("min_improvement must be ≥ 0, got " + std::to_string(min_improvement));
    if (!(positivity_initial > 0) || !(positivity_growth >= 1) || !(positivity_max >= positivity_initial) || positivity_every < 1)
      fail("positivity schedule needs initial > 0, growth ≥ 1, max ≥ initial and every ≥ 1");
    if (!(positivity_tolerance >= 0)) fail("positivity_tolerance must be ≥ 0");
  }
};

/// Replica `index`'s split of n bins: 0 for ⌊n·fraction⌋ validation bins, 1 for the others (the
/// training bins), placed by a Fisher–Yates shuffle drawn from (seed, index, Stream::split) alone,
/// so a replica's split does not depend on its batch. Every replica has the same counts (§2.4).
inline std::vector<std::uint8_t> training_split(index_t nbins, double fraction, std::uint64_t seed, std::uint64_t index) {
  if (nbins < 0 || !(fraction >= 0 && fraction < 1))
    throw usage_error("training_split: needs nbins ≥ 0 and a fraction in [0, 1), got " + std::to_string(nbins) + " and " + std::to_string(fraction));
  const auto nval = static_cast<index_t>(std::floor(static_cast<double>(nbins) * fraction));
  std::vector<std::uint8_t> train(static_cast<std::size_t>(nbins), 1);
  std::fill_n(train.begin(), nval, 0);
  RandomStream rng(seed, index, Stream::split);
  for (index_t i = nbins - 1; i > 0; --i) {
    const auto j = static_cast<index_t>(rng() % static_cast<std::uint64_t>(i + 1));  // bias < 2⁻⁴⁰ for any practical n
    std::swap(train[static_cast<std::size_t>(i)], train[static_cast<std::size_t>(j)]);
  }
  return train;
}

/// Trains replica r of `replicas` (its data, constraint centres, …) for every r as one batch: each
/// minimises its NLL on its training bins with its own trust region; after every accepted step it
/// evaluates the NLL of its validation bins (data term and constraints, no penalties) and keeps
/// the best state; it stops after `patience` iterations without improvement, or when the
/// minimiser stops. With a positivity penalty, its multiplier grows on the schedule (the
/// minimiser then restarts at its current point and radius on the new objective) and the kept
/// state is vetoed if an observable is negative (growth until the maximum; a minimiser that
/// converges earlier restarts with the next multiplier). The result of replica r is its kept state:
/// `x`, the training NLL there, `best_iteration`, `positive`, the status (`converged_callback`
/// when early stopping ended it), and the covariance when asked.
///
/// The likelihood's replica inputs are replaced (2·R of them: training, then validation) and
/// cleared at the end.
template <index_t N, class Shard, class Sub>
BatchResult train_replicas(const ReplicaBatch<N>& batch, Likelihood<Shard>& lik, const TrustRegion<Sub>& minimizer,
                           std::vector<ReplicaInputs> replicas, const TrainingOptions& opts, std::vector<double> x0 = {}) {
  opts.validate();
  const auto R = static_cast<index_t>(replicas.size());
  const index_t nb = lik.model().nbins(), nreg = lik.regularizer_count();
  // The penalty's number among the likelihood's regularizers (its replicas' penalty scale).
  const index_t positivity = opts.positivity ? lik.regularizer_index(*opts.positivity) : -1;
  if (x0.empty()) x0 = lik.default_parameters();
  // Training inputs r, validation inputs R + r: the same data, complementary bins, no penalties in validation.
  std::vector<ReplicaInputs> all(static_cast<std::size_t>(2 * R));
  for (index_t r = 0; r < R; ++r) {
    ReplicaInputs& t = all[static_cast<std::size_t>(r)];
    t = std::move(replicas[static_cast<std::size_t>(r)]);
    if (!t.bins.empty()) throw usage_error("train_replicas: replica " + std::to_string(r) + " selects bins itself; the training split does that");
    if (opts.validation_fraction > 0) t.bins = training_split(nb, opts.validation_fraction, opts.seed, static_cast<std::uint64_t>(r));
    if (positivity >= 0) {
      t.penalty_scales.resize(static_cast<std::size_t>(nreg), 1.0);
      t.penalty_scales[static_cast<std::size_t>(positivity)] = opts.positivity_initial;
    }
    ReplicaInputs& v = all[static_cast<std::size_t>(R + r)];
    v = t;
    for (auto& b : v.bins) b = !b;
    v.penalty_scales.assign(static_cast<std::size_t>(nreg), 0.0);
  }
  lik.set_replicas(std::move(all));

  BatchResult out;
  out.replicas.resize(static_cast<std::size_t>(R));
  using State = typename TrustRegion<Sub>::state_type;
  auto body = [&](index_t r, ReplicaObjective<Likelihood<Shard>>& fr) {
    ReplicaObjective<Likelihood<Shard>> validation = fr.with_inputs(R + r);
    const index_t n = fr.size();
    auto validation_nll = [&](const std::vector<double>& x) {
      double v;
      validation.value(ConstBlockView<double>(x.data(), n, 1), std::span(&v, 1));
      return v;
    };
    State s;
    minimizer.init(fr, s, x0);
    ReplicaFit& res = out.replicas[static_cast<std::size_t>(r)];
    res.x0 = x0;
    EarlyStopping stopping(opts.validation_fraction > 0, opts.patience, opts.min_improvement, validation_nll, x0);
    index_t iteration = 0;
    double lambda = opts.positivity_initial;
    EvaluationCounts counts;  // of the minimiser runs before the last restart
    FitStatus status = s.status;
    bool stopped_early = false;
    for (;;) {
      if (status == FitStatus::running) {
        status = minimizer.step(fr, s);
        ++iteration;
        if (stopping.after_step(s.x, s.last.accepted, iteration) && status == FitStatus::running) {
          status = FitStatus::converged_callback;
          stopped_early = true;
        }
      }
      // The multiplier grows on its schedule, and whenever the minimiser has converged before it
      // reached its maximum (a penalty method's outer loop); early stopping ends the replica.
      const bool grow = positivity >= 0 && lambda < opts.positivity_max && !stopped_early &&
                        ((status == FitStatus::running && iteration % opts.positivity_every == 0) || converged(status));
      if (!grow) {
        if (status != FitStatus::running) break;
        continue;
      }
      lambda = std::min(opts.positivity_max, lambda * opts.positivity_growth);
      lik.set_penalty_scale(r, positivity, lambda);
      // A new objective: restart the minimiser at the current point, keeping its radius.
      const double radius = s.radius;
      counts += s.counts;
      const std::vector<double> x = s.x;
      minimizer.init(fr, s, x);
      s.radius = radius;
      status = s.status;
      stopping.restart_patience();
    }
    res.status = status;
    res.iterations = iteration;
    res.x = stopping.enabled() ? stopping.best() : s.x;
    res.best_iteration = stopping.enabled() ? stopping.best_iteration() : iteration;
    res.names = detail::parameter_names_of(fr);
    res.frozen.assign(static_cast<std::size_t>(n), false);
    std::vector<index_t> free(static_cast<std::size_t>(n));
    for (index_t i = 0; i < n; ++i) free[static_cast<std::size_t>(i)] = i;
    res.counts = counts;
    res.counts += s.counts;
    detail::postfit(fr, res, free, opts.covariance);
  };
  std::vector<std::string> errors;
  try {
    out.statistics = batch.run(lik, R, body, &errors);
  } catch (...) {
    lik.set_replicas({});
    throw;
  }
  ReplicaBatch<N>::mark_errors(out, errors);
  lik.set_replicas({});
  // The veto, on the kept states (one forward pass each over the penalty's bins).
  if (positivity >= 0)
    for (ReplicaFit& res : out.replicas) {
      if (!res.error.empty()) continue;
      const PositivityPenalty& pen = *opts.positivity;
      const std::vector<double> nu = lik.yields(res.x);
      const BinRange br = pen.bins();
      const index_t P = lik.model().nprocs();
      std::vector<double> o(static_cast<std::size_t>(br.size()), 0.0);
      for (index_t b = br.begin; b < br.end; ++b)
        for (index_t p = 0; p < P; ++p) o[static_cast<std::size_t>(b - br.begin)] += nu[static_cast<std::size_t>(b * P + p)];
      res.positive = pen.positive(o, opts.positivity_tolerance);
    }
  return out;
}

}  // namespace fitlib
