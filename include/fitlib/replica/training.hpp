// SPDX-License-Identifier: MIT
// n3fit-style replica training of a likelihood: per-replica training/validation splits of its bins,
// early stopping on the validation NLL (train_replica.hpp), and positivity by a growing penalty with a final veto.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "fitlib/core/error.hpp"
#include "fitlib/likelihood/likelihood.hpp"
#include "fitlib/likelihood/replica_inputs.hpp"
#include "fitlib/minimize/fit.hpp"
#include "fitlib/replica/positivity.hpp"
#include "fitlib/replica/replica_batch.hpp"
#include "fitlib/replica/train_replica.hpp"

namespace fitlib {

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
  detail::require_stepwise(minimizer.options());
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
  auto body = [&](index_t r, ReplicaObjective<Likelihood<Shard>>& fr) {
    ReplicaObjective<Likelihood<Shard>> validation = fr.with_inputs(R + r);
    const index_t n = fr.size();
    auto validation_nll = [&](const std::vector<double>& x) {
      double v;
      validation.value(ConstBlockView<double>(x.data(), n, 1), std::span(&v, 1));
      return v;
    };
    std::function<void(double)> set_multiplier;
    if (positivity >= 0) set_multiplier = [&lik, r, positivity](double lambda) { lik.set_penalty_scale(r, positivity, lambda); };
    train_replica(minimizer, fr, validation_nll, opts, set_multiplier, x0, out.replicas[static_cast<std::size_t>(r)]);
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
