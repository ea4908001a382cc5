// SPDX-License-Identifier: MIT
// Callbacks of the trust-region loop: the hooks, and the built-in printer, stoppers and recorder.
#pragma once

#include <chrono>
#include <cmath>
#include <cstdio>
#include <deque>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "fitlib/core/types.hpp"
#include "fitlib/minimize/status.hpp"

namespace fitlib {

/// What a callback hook asks of the loop. A hook returning void means `proceed`.
enum class CallbackAction { proceed, stop_converged, abort };

/// One outer iteration, as callbacks see it.
struct IterationSummary {
  index_t iteration = 0;       ///< 1-based, rejected iterations included
  double f = 0;                ///< objective at the iterate the step was taken from
  double f_trial = 0;          ///< objective at the proposed point
  double gradient_norm = 0;    ///< ‖g‖ at the iterate after the decision
  double predicted_decrease = 0;  ///< the step's predicted decrease of the objective, −model(p)
  double edm = std::numeric_limits<double>::quiet_NaN();  ///< ½gᵀH⁻¹g at the new point where the end game computed it; NaN elsewhere
  double radius = 0;           ///< Δ used for the step
  double radius_next = 0;      ///< Δ after the update
  double rho = 0;              ///< actual / predicted reduction (−∞ for a non-finite trial)
  double step_norm = 0;        ///< ‖p‖
  bool accepted = false;
  bool hits_boundary = false;
  bool slope_judged = false;   ///< ρ from the gradients: f − f⁺ could not resolve the prediction (TrustRegion::step)
  index_t hvps = 0;            ///< Hessian-vector products of the subproblem solve
  double elapsed = 0;          ///< seconds since the start of the minimisation
};

namespace detail {
/// Calls `cb.hook(args...)` if it exists; maps a void return to `proceed`.
template <class Hook, class... Args>
CallbackAction invoke_hook(Hook&& hook, Args&&... args) {
  if constexpr (std::is_void_v<decltype(hook(std::forward<Args>(args)...))>) {
    hook(std::forward<Args>(args)...);
    return CallbackAction::proceed;
  } else {
    return hook(std::forward<Args>(args)...);
  }
}

/// The strongest request among all callbacks: abort > stop_converged > proceed.
inline CallbackAction combine(CallbackAction a, CallbackAction b) {
  return static_cast<int>(a) > static_cast<int>(b) ? a : b;
}

template <class... Callbacks>
CallbackAction on_begin(Callbacks&... cbs) {
  CallbackAction a = CallbackAction::proceed;
  ((a = combine(a, [&] {
      if constexpr (requires { cbs.on_begin(); }) return invoke_hook([&] { return cbs.on_begin(); });
      else return CallbackAction::proceed;
    }())),
   ...);
  return a;
}

template <class... Callbacks>
CallbackAction on_iteration(const IterationSummary& s, Callbacks&... cbs) {
  CallbackAction a = CallbackAction::proceed;
  ((a = combine(a, [&] {
      if constexpr (requires { cbs.on_iteration(s); }) return invoke_hook([&] { return cbs.on_iteration(s); });
      else return CallbackAction::proceed;
    }())),
   ...);
  return a;
}

template <class... Callbacks>
void on_end(FitStatus status, const StopTest& stop, Callbacks&... cbs) {
  (
      [&] {
        if constexpr (requires { cbs.on_end(status, stop); }) cbs.on_end(status, stop);
        else if constexpr (requires { cbs.on_end(status); }) cbs.on_end(status);
      }(),
      ...);
}
}  // namespace detail

/// Prints one line per `every` iterations: iteration, f, the step's predicted decrease, the EDM
/// where it was computed (blank elsewhere), radius, ρ, elapsed seconds. Of a run of consecutive
/// rejected steps it prints the first `fold_after` and then one line for the rest of the run
/// ("… 812 more steps rejected (iterations 9–820), radius 0.25 → 3.1e-300"), so that a fit whose
/// radius collapses over thousands of rejected steps takes a few lines, not thousands. The last line
/// says how the fit stopped, with the number that passed (or failed) the test and the tolerance it was
/// tested against (the minimizer's StopTest).
class ProgressPrinter {
 public:
  explicit ProgressPrinter(std::FILE* out = stdout, index_t every = 1, index_t fold_after = 3)
      : out_(out), every_(every < 1 ? 1 : every), fold_after_(fold_after < 0 ? 0 : fold_after) {}
  void on_begin() {
    rejected_run_ = folded_ = 0;
    std::fprintf(out_, "%6s %18s %11s %11s %11s %9s %9s\n", "iter", "f", "pred.decr.", "EDM", "radius", "rho", "seconds");
  }
  void on_iteration(const IterationSummary& s) {
    if (s.accepted) {
      flush_folded();
      rejected_run_ = 0;
    } else if (++rejected_run_ > fold_after_) {  // folded into the run's summary line
      if (folded_++ == 0) {
        fold_first_ = s.iteration;
        fold_radius_ = s.radius;
      }
      fold_last_ = s.iteration;
      fold_radius_next_ = s.radius_next;
      return;
    }
    if (s.iteration % every_ != 0) return;
    char edm[16] = "";
    if (!std::isnan(s.edm)) std::snprintf(edm, sizeof edm, "%11.4g", s.edm);
    std::fprintf(out_, "%6td %18.10g %11.4g %11s %11.4g %9.4g %9.3f%s%s\n", s.iteration, s.accepted ? s.f_trial : s.f, s.predicted_decrease, edm,
                 s.radius, s.rho, s.elapsed, s.accepted ? "" : "  (rejected)", s.slope_judged ? "  (ρ from the gradients)" : "");
  }
  void on_end(FitStatus status, const StopTest& stop) {
    flush_folded();
    std::fprintf(out_, "stopped: %s\n", describe(status, stop).c_str());
  }

 private:
  /// The summary line of the folded rejected steps, if any.
  void flush_folded() {
    if (folded_ == 0) return;
    if (folded_ == 1)
      std::fprintf(out_, "%6s … 1 more step rejected (iteration %td), radius %.4g → %.4g\n", "", fold_first_, fold_radius_, fold_radius_next_);
    else
      std::fprintf(out_, "%6s … %td more steps rejected (iterations %td–%td), radius %.4g → %.4g\n", "", folded_, fold_first_, fold_last_,
                   fold_radius_, fold_radius_next_);
    folded_ = 0;
  }

  std::FILE* out_;
  index_t every_, fold_after_;
  index_t rejected_run_ = 0, folded_ = 0, fold_first_ = 0, fold_last_ = 0;
  double fold_radius_ = 0, fold_radius_next_ = 0;
};

/// Declares convergence when the objective improved by less than `tolerance` over the last
/// `window` accepted iterations (a stalled fit that gtol would run to maxiter).
class StallStop {
 public:
  StallStop(double tolerance, index_t window = 10) : tolerance_(tolerance), window_(window < 1 ? 1 : window) {}
  CallbackAction on_iteration(const IterationSummary& s) {
    if (!s.accepted) return CallbackAction::proceed;
    history_.push_back(s.f_trial);
    if (static_cast<index_t>(history_.size()) <= window_) return CallbackAction::proceed;
    history_.pop_front();
    return history_.front() - history_.back() < tolerance_ ? CallbackAction::stop_converged : CallbackAction::proceed;
  }

 private:
  double tolerance_;
  index_t window_;
  std::deque<double> history_;
};

/// Aborts the minimisation once `seconds` have elapsed; `triggered()` tells whether it did.
class TimeLimit {
 public:
  explicit TimeLimit(double seconds) : seconds_(seconds) {}
  CallbackAction on_iteration(const IterationSummary& s) {
    triggered_ = s.elapsed > seconds_;
    return triggered_ ? CallbackAction::abort : CallbackAction::proceed;
  }
  bool triggered() const { return triggered_; }

 private:
  double seconds_;
  bool triggered_ = false;
};

/// Records every iteration's summary.
class HistoryRecorder {
 public:
  void on_iteration(const IterationSummary& s) { history_.push_back(s); }
  const std::vector<IterationSummary>& history() const { return history_; }

 private:
  std::vector<IterationSummary> history_;
};

}  // namespace fitlib
