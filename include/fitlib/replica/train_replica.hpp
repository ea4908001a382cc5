// SPDX-License-Identifier: MIT
// One replica's n3fit-style training on any objective: early stopping with patience on a validation
// loss, the best state kept, and a positivity multiplier that grows on a schedule. train_replicas
// (training.hpp) runs it for a likelihood's replicas; an objective of one's own runs it in a
// ReplicaBatch (examples/nnpdf).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "fitlib/core/error.hpp"
#include "fitlib/minimize/fit.hpp"
#include "fitlib/replica/early_stopping.hpp"
#include "fitlib/replica/random.hpp"
#include "fitlib/replica/replica_batch.hpp"

namespace fitlib {

class PositivityPenalty;

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
  /// The positivity penalty, added to the likelihood first (add_regularizer); null for none (train_replicas).
  std::shared_ptr<const PositivityPenalty> positivity;
  /// The penalty's multiplier: `positivity_initial`, times `positivity_growth` every
  /// `positivity_every` iterations (n3fit's schedule, §3.4) and whenever the minimiser converges
  /// before it reached `positivity_max`, except at the iteration limit and when the minimiser
  /// converged at once after the last growth (the replica then ends below the maximum).
  double positivity_initial = 1;
  double positivity_growth = 10;
  index_t positivity_every = 10;
  double positivity_max = 1e8;
  /// Whether a growth of the multiplier starts the patience count again (a new objective gets
  /// `patience` iterations to improve on the best state). `false` is n3fit's: its positivity callback
  /// and its early stopping never meet, so a schedule that keeps the multiplier changing (every
  /// `positivity_every` iterations, with `positivity_max` = +∞: the multiplier stops at the largest finite
  /// double and the schedule goes on ticking there) still ends on patience (or on the minimiser's convergence
  /// at once after a growth). `true` with that unbounded schedule is refused: patience would never run out.
  bool positivity_restarts_patience = true;
  /// The veto at the kept state: every positivity observable ≥ −tolerance (relative to its prefit yield).
  double positivity_tolerance = 1e-6;
  /// The postfit covariance of the kept state.
  bool covariance = false;

  void validate() const {
    auto fail = [](const std::string& what) { throw std::invalid_argument("TrainingOptions::" + what); };
    if (!(validation_fraction >= 0 && validation_fraction < 1)) fail("validation_fraction must be in [0, 1), got " + std::to_string(validation_fraction));
    if (patience < 1) fail("patience must be ≥ 1, got " + std::to_string(patience));
    if (!(min_improvement >= 0)) fail("min_improvement must be ≥ 0, got " + std::to_string(min_improvement));
    // growth = 1 below the maximum would restart a converged minimiser for ever.
    if (!(positivity_initial > 0) || !(positivity_max >= positivity_initial) || positivity_every < 1 ||
        !(positivity_growth > 1 || (positivity_growth == 1 && positivity_max == positivity_initial)))
      fail("positivity schedule needs initial > 0, max ≥ initial, every ≥ 1 and growth > 1 (or growth = 1 with max = initial), got initial " +
           std::to_string(positivity_initial) + ", max " + std::to_string(positivity_max) + ", every " + std::to_string(positivity_every) +
           ", growth " + std::to_string(positivity_growth));
    if (!(positivity_tolerance >= 0)) fail("positivity_tolerance must be ≥ 0");
    // An unbounded multiplier grows for the whole fit, and each growth would give patience back.
    if (validation_fraction > 0 && positivity_restarts_patience && positivity_max == std::numeric_limits<double>::infinity())
      fail("positivity_max = +inf grows the multiplier for the whole fit, so with positivity_restarts_patience patience never runs out; "
           "set positivity_restarts_patience = false (n3fit's) or a finite positivity_max");
  }
};

/// Replica `index`'s split of n bins: 0 for ⌊n·fraction⌋ validation bins, 1 for the others (the
/// training bins), placed by a Fisher–Yates shuffle drawn from (seed, index, Stream::split, element)
/// alone, so a replica's split does not depend on its batch. Every replica has the same counts
/// (§2.4). `element` tells apart the splits of one replica's datasets (n3fit splits each).
inline std::vector<std::uint8_t> training_split(index_t nbins, double fraction, std::uint64_t seed, std::uint64_t index,
                                                std::uint64_t element = 0) {
  if (nbins < 0 || !(fraction >= 0 && fraction < 1))
    throw usage_error("training_split: needs nbins ≥ 0 and a fraction in [0, 1), got " + std::to_string(nbins) + " and " + std::to_string(fraction));
  const auto nval = static_cast<index_t>(std::floor(static_cast<double>(nbins) * fraction));
  std::vector<std::uint8_t> train(static_cast<std::size_t>(nbins), 1);
  std::fill_n(train.begin(), nval, 0);
  RandomStream rng(seed, index, Stream::split, element);
  for (index_t i = nbins - 1; i > 0; --i) {
    const auto j = static_cast<index_t>(rng() % static_cast<std::uint64_t>(i + 1));  // bias < 2⁻⁴⁰ for any practical n
    std::swap(train[static_cast<std::size_t>(i)], train[static_cast<std::size_t>(j)]);
  }
  return train;
}

namespace detail {
/// Training drives the trust region step by step (early stopping, the positivity schedule); the
/// Gauss–Newton model's Krylov end game (EndGame::krylov) is fit()'s, so it is refused.
inline void require_stepwise(const TrustRegionOptions& o) {
  if (o.end_game == EndGame::krylov)
    throw usage_error("training drives the trust region step by step, and the Krylov end game (EndGame::krylov) is fit()'s; "
                      "use EndGame::hessian");
}
}  // namespace detail

/// Trains one replica from x0 into `res`: it minimises `f` with its own trust region; after every
/// accepted step it evaluates `validation_loss(x)` and keeps the best state; it stops after
/// `opts.patience` iterations without improvement (with `opts.validation_fraction` > 0), or when the
/// minimiser stops. `set_multiplier(λ)` (empty: no positivity) sets the positivity multiplier of f:
/// it starts at `opts.positivity_initial` (set it before), grows on the schedule, and whenever the
/// minimiser converges before the maximum but not at once after the last growth, nor at the iteration
/// limit (the minimiser then restarts at its current point and
/// radius on the new objective, and patience starts again unless `opts.positivity_restarts_patience`
/// is false). The minimiser's iteration limit bounds the replica's iterations in all, restarts
/// included. `res` gets the kept state: `x`, `best_iteration`, the status (`converged_callback`
/// when early stopping ended it), the counts, and the postfit NLL (and covariance with
/// `opts.covariance`) there. The positivity veto is the caller's. Of `opts`, the
/// split's `seed` and `validation_fraction` (beyond turning early stopping on), `positivity` and
/// `positivity_tolerance` are the caller's too. A replica whose every loss was +∞ (EarlyStopping's
/// gate) keeps its start x0, with best_iteration 0.
template <objective F, class Sub, class Loss>
void train_replica(const TrustRegion<Sub>& minimizer, F& fr, Loss&& validation_loss, const TrainingOptions& opts,
                   const std::function<void(double)>& set_multiplier, const std::vector<double>& x0, ReplicaFit& res) {
  opts.validate();
  detail::require_stepwise(minimizer.options());
  const index_t n = fr.size();
  std::function<double(const std::vector<double>&)> validation_nll = std::forward<Loss>(validation_loss);
  res.x0 = x0;
  typename TrustRegion<Sub>::state_type s;
  minimizer.init(fr, s, x0);
  EarlyStopping stopping(opts.validation_fraction > 0, opts.patience, opts.min_improvement, validation_nll, x0);
  index_t iteration = 0;
  double lambda = opts.positivity_initial;
  EvaluationCounts counts;  // of the minimiser runs before the last restart
  index_t restarted_at = -1;  // the iteration of the last restart
  FitStatus status = s.status;
  bool stopped_early = false;
  for (;;) {
    if (status == FitStatus::running) {
      status = minimizer.step(fr, s);
      ++iteration;
      // The limit is the replica's, across the restarts (each restart counts the minimiser's own afresh).
      if (status == FitStatus::running && iteration >= s.maxiter) status = FitStatus::max_iterations;
      if (stopping.after_step(s.x, s.last.accepted, iteration) && status == FitStatus::running) {
        status = FitStatus::converged_callback;
        stopped_early = true;
      }
    }
    // The multiplier grows on its schedule, and whenever the minimiser has converged before it
    // reached its maximum (a penalty method's outer loop); early stopping ends the replica.
    // A minimiser that converges at once after a restart has nothing left to do on the new objective either; and
    // no growth is due at the iteration limit.
    const bool grow = set_multiplier && lambda < opts.positivity_max && !stopped_early && iteration < s.maxiter &&
                      ((status == FitStatus::running && iteration % opts.positivity_every == 0) ||
                       (converged(status) && iteration > restarted_at));
    if (!grow) {
      if (status != FitStatus::running) break;
      continue;
    }
    // Never +∞: with positivity_max = +∞ the schedule keeps its clock for the whole fit.
    lambda = std::min({opts.positivity_max, lambda * opts.positivity_growth, std::numeric_limits<double>::max()});
    set_multiplier(lambda);
    // A new objective: restart the minimiser at the current point, keeping its radius.
    const double radius = s.radius;
    counts += s.counts;
    const std::vector<double> x = s.x;
    minimizer.init(fr, s, x);
    restarted_at = iteration;
    s.radius = radius;
    status = s.status;
    if (opts.positivity_restarts_patience) stopping.restart_patience();
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
}

}  // namespace fitlib
