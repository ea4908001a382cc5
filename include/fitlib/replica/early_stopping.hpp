// SPDX-License-Identifier: MIT
// Early stopping on a validation loss with the best state kept, as one component a training loop calls.
#pragma once

#include <cmath>
#include <functional>
#include <limits>
#include <utility>
#include <vector>

#include "fitlib/core/types.hpp"

namespace fitlib {

/// n3fit's stopping (n3fit-parallel-replicas.md §2.4): after every accepted step the loop hands the
/// new point to `after_step`, which evaluates the validation loss there and keeps the point if the
/// loss dropped by more than `min_improvement`; `patience` iterations without such a drop ask the
/// loop to stop. The two roles of ensmallen's EarlyStopAtMinLossOnValidation and
/// StoreBestCoordinates, for one replica. With no validation (`enabled` false) it keeps nothing and
/// never stops: the loop's last point is its result. A loss of +∞ marks a point that may not be kept
/// (n3fit's gate: a replica's clock starts only once its validation χ² is below a threshold and its
/// positivity passes, §4.2): patience counts from the first point with a finite loss.
class EarlyStopping {
 public:
  using Loss = std::function<double(const std::vector<double>&)>;

  EarlyStopping(bool enabled, index_t patience, double min_improvement, Loss validation_loss, const std::vector<double>& x0)
      : enabled_(enabled), patience_(patience), min_improvement_(min_improvement), loss_(std::move(validation_loss)), best_(x0),
        best_loss_(enabled ? gated(loss_(x0)) : std::numeric_limits<double>::infinity()) {}

  /// Iteration `iteration` has run (a step taken or rejected, `accepted`, ending at x): whether
  /// patience is exhausted.
  bool after_step(const std::vector<double>& x, bool accepted, index_t iteration) {
    if (!enabled_) return false;
    if (best_loss_ < std::numeric_limits<double>::infinity()) ++since_best_;
    if (accepted) {
      const double v = gated(loss_(x));
      if (v < best_loss_ - min_improvement_) {
        best_loss_ = v;
        best_ = x;
        best_iteration_ = iteration;
        since_best_ = 0;
      }
    }
    return since_best_ >= patience_;
  }
  /// The objective changed under the loop (a penalty's multiplier grew): the record stands,
  /// patience starts again.
  void restart_patience() { since_best_ = 0; }

  bool enabled() const { return enabled_; }
  /// A NaN loss is +∞: never kept, and no start of the clock.
  static double gated(double v) { return std::isnan(v) ? std::numeric_limits<double>::infinity() : v; }
  /// The kept point, its validation loss and the iteration that reached it.
  const std::vector<double>& best() const { return best_; }
  double best_loss() const { return best_loss_; }
  index_t best_iteration() const { return best_iteration_; }

 private:
  bool enabled_;
  index_t patience_;
  double min_improvement_;
  Loss loss_;
  std::vector<double> best_;
  double best_loss_;
  index_t best_iteration_ = 0, since_best_ = 0;
};

}  // namespace fitlib
