// SPDX-License-Identifier: MIT
// fitlib._core's fits and histograms on the fixed set of likelihoods (dense or sparse templates, one thread or several),
// chosen at run time. Instantiated once per template storage (runs_dense.cpp, runs_sparse.cpp), so that they compile
// in parallel and the binding source compiles none of them.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "fitlib/fit.hpp"

namespace fitlib::python {

/// What a Python fit's keywords set. The defaults are fitlib-fit's (apps/fitlib-fit/command_line.cpp), so that
/// `fit(model)` is the fit `fitlib-fit TENSOR -t 0 --unblind` runs, bit for bit.
struct FitSettings {
  LikelihoodOptions likelihood = {};
  /// fitlib-fit's minimizer options: no SciPy gradient test, converged on the EDM.
  TrustRegionOptions minimizer = [] {
    TrustRegionOptions o;
    o.gtol = 0;
    o.edm_tol = 1e-12;
    return o;
  }();
  /// fitlib-fit's --minimizerMethod, resolved (never "auto"): one of minimizer_methods; see set_method.
  std::string method = "trust-krylov";
  FitOptions fit = {};
  /// 1: cpu::Serial; k > 1: cpu::Threads, the bins in k shards (fitlib-fit --threads k).
  index_t threads = 1;
};

/// Sets s.method from fit's `method` keyword: "auto" resolves as fitlib-fit's does (default_minimizer), so that
/// fit(model) stays fitlib-fit's fit.
inline void set_method(FitSettings& s, const Model& m, const std::string& method) {
  s.method = resolve_minimizer(method, m);
}

/// Calls f with the trust region s.method names.
template <class F>
decltype(auto) with_minimizer(const FitSettings& s, F&& f) {
  return fitlib::with_minimizer(s.method, s.minimizer, std::forward<F>(f));
}

/// A fit with what it was fitted on and with, from which its histograms rebuild its likelihood.
struct FitOutcome {
  std::shared_ptr<const Model> model;
  FitSettings settings;
  FitResult result;
};

/// Calls f with the likelihood `s` asks for over `model`'s `Storage` templates, holding the model's observed data.
template <class Storage, class F>
decltype(auto) with_likelihood(const std::shared_ptr<const Model>& model, const FitSettings& s, F&& f) {
  // The likelihoods fitlib-fit builds (runs.hpp there), with the model's templates read in place rather than by each
  // shard from the file: the same shards (io::rabbit_partition splits as partition_bins does) and the same values.
  if (s.threads == 1) {
    Likelihood<Shard<cpu::Serial, Storage>> lik(model, cpu::Serial{}, s.likelihood);
    lik.set_data(model->data, model->data_variance);
    return f(lik);
  }
  Likelihood<Shard<cpu::Threads, Storage>> lik(model, cpu::Threads{s.threads}, s.likelihood);
  lik.set_data(model->data, model->data_variance);
  return f(lik);
}

/// A likelihood held for Python's fitlib.Likelihood, its type erased: its value, gradient, Hessian-vector product and
/// Hessian at one point. One call at a time (the likelihood's passes keep their buffers).
class HeldLikelihood {
 public:
  virtual ~HeldLikelihood() = default;
  virtual index_t size() const = 0;
  virtual std::vector<double> default_parameters() const = 0;
  virtual double value(const double* x) = 0;
  virtual double value_grad(const double* x, double* g) = 0;
  virtual void hessp(const double* x, const double* v, double* out) = 0;
  virtual double hessian(const double* x, double* g, double* h) = 0;
};

namespace detail {
template <class Lik>
class Held final : public HeldLikelihood {
 public:
  template <class Policy>
  Held(const std::shared_ptr<const Model>& model, Policy policy, const LikelihoodOptions& o) : lik_(model, std::move(policy), o) {
    lik_.set_data(model->data, model->data_variance);
  }
  index_t size() const override { return lik_.size(); }
  std::vector<double> default_parameters() const override { return lik_.default_parameters(); }
  double value(const double* x) override {
    double f = 0;
    lik_.value(point(x), std::span(&f, 1));
    return f;
  }
  double value_grad(const double* x, double* g) override {
    double f = 0;
    lik_.value_grad(point(x), std::span(&f, 1), BlockView<double>(g, size(), 1));
    return f;
  }
  void hessp(const double* x, const double* v, double* out) override { lik_.hessp(point(x), point(v), BlockView<double>(out, size(), 1)); }
  double hessian(const double* x, double* g, double* h) override {
    double f = 0;
    lik_.hessian(point(x), std::span(&f, 1), BlockView<double>(g, size(), 1), BlockView<double>(h, size(), size()));
    return f;
  }

 private:
  ConstBlockView<double> point(const double* x) const { return ConstBlockView<double>(x, size(), 1); }
  Lik lik_;
};
}  // namespace detail

/// The likelihood `s` asks for over `model`'s `Storage` templates, holding the model's observed data (as with_likelihood's).
template <class Storage>
std::unique_ptr<HeldLikelihood> hold_likelihood(const std::shared_ptr<const Model>& model, const FitSettings& s) {
  if (s.threads == 1) return std::make_unique<detail::Held<Likelihood<Shard<cpu::Serial, Storage>>>>(model, cpu::Serial{}, s.likelihood);
  return std::make_unique<detail::Held<Likelihood<Shard<cpu::Threads, Storage>>>>(model, cpu::Threads{s.threads}, s.likelihood);
}

extern template std::unique_ptr<HeldLikelihood> hold_likelihood<storage::Dense>(const std::shared_ptr<const Model>&, const FitSettings&);
extern template std::unique_ptr<HeldLikelihood> hold_likelihood<storage::Sparse>(const std::shared_ptr<const Model>&, const FitSettings&);

/// A fit's callback (fit()'s Callbacks): each iteration goes to `f`, which may stop the fit (Python's progress and its
/// interrupt check, fitlib_core.cpp). Called on the thread that runs the fit, never on a replica fiber.
struct IterationHook {
  std::function<CallbackAction(const IterationSummary&)> f;
  CallbackAction on_iteration(const IterationSummary& s) const { return f ? f(s) : CallbackAction::proceed; }
};

/// The fit of the model's observed data.
template <class Storage>
FitResult run_fit(const std::shared_ptr<const Model>& model, const FitSettings& s, const IterationHook& hook) {
  return with_likelihood<Storage>(model, s, [&](auto& lik) {
    return with_minimizer(s, [&](const auto& tr) { return fitlib::fit(lik, tr, s.fit, hook); });
  });
}

/// What is computed after a fit, each on a likelihood built as the fit's was.
template <class Storage>
struct Postfit {
  static Histograms histograms(const FitOutcome& f, const HistogramOptions& ho) {
    return with_likelihood<Storage>(f.model, f.settings, [&](auto& lik) { return fitlib::histograms(lik, f.result, ho); });
  }
  /// Traditional impacts, or with `global` global impacts (fitlib-fit --doImpacts, --globalImpacts).
  static Impacts impacts(const FitOutcome& f, bool global) {
    return with_likelihood<Storage>(f.model, f.settings, [&](auto& lik) {
      return global ? fitlib::global_impacts(lik, f.result) : fitlib::traditional_impacts(lik, f.result);
    });
  }
  /// A profile scan with the fit's minimizer (fitlib-fit --scan).
  static Scan scan(const FitOutcome& f, const std::string& parameter, const ScanOptions& so) {
    return with_likelihood<Storage>(f.model, f.settings, [&](auto& lik) {
      return with_minimizer(f.settings, [&](const auto& tr) { return fitlib::profile_scan(lik, tr, f.result, parameter, so); });
    });
  }
};

extern template FitResult run_fit<storage::Dense>(const std::shared_ptr<const Model>&, const FitSettings&, const IterationHook&);
extern template FitResult run_fit<storage::Sparse>(const std::shared_ptr<const Model>&, const FitSettings&, const IterationHook&);
extern template struct Postfit<storage::Dense>;
extern template struct Postfit<storage::Sparse>;

/// run_fit on the storage the model's templates have.
inline FitResult fit_model(const std::shared_ptr<const Model>& model, const FitSettings& s, const IterationHook& hook) {
  return storage::visit(*model, [&]<class S>(S) { return run_fit<S>(model, s, hook); });
}

/// `f(Postfit<S>{})` on the storage S of the fit's model's templates.
template <class F>
decltype(auto) postfit(const FitOutcome& o, F&& f) {
  return storage::visit(*o.model, [&]<class S>(S) { return f(Postfit<S>{}); });
}

}  // namespace fitlib::python
