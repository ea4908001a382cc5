// SPDX-License-Identifier: MIT
// ReplicaBatch<N>: many replicas fitted at once, each by the unchanged sequential code, their evaluations pooled.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <concepts>
#include <exception>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "fitlib/core/concepts.hpp"
#include "fitlib/core/error.hpp"
#include "fitlib/core/types.hpp"
#include "fitlib/detail/fiber.hpp"
#include "fitlib/minimize/fit.hpp"

namespace fitlib {

/// An objective that holds per-replica inputs (Likelihood::set_replicas): `use_replicas(r)` makes
/// column j of its next evaluations use replica r[j]'s inputs (−1 its own, empty: its own for all).
template <class F>
concept replica_objective = objective<F> && requires(F& f, const F& cf, std::span<const index_t> r) {
  f.use_replicas(r);
  { cf.replica_count() } -> std::convertible_to<index_t>;
};

/// One replica's outcome: its fit, plus what replica training adds. Its `seconds` is the wall time
/// from its start to its end, the rounds it waited for the others' evaluations included.
struct ReplicaFit : FitResult {
  /// Iteration of the kept state (the best validation NLL in training; else the last iteration).
  index_t best_iteration = 0;
  /// Passed the positivity veto (always true without positivity constraints).
  bool positive = true;
  /// Why the replica's own work failed (a bad option, a throwing callback); empty if it did not.
  /// Such a replica has status `aborted` and never disturbs the others.
  std::string error;
};

/// How a batch ran.
struct BatchStatistics {
  index_t replicas = 0;
  index_t width = 0;        ///< replicas evaluated together at most
  index_t evaluations = 0;  ///< pooled evaluations (each one call of the objective over many columns)
  index_t columns = 0;      ///< columns over all pooled evaluations
  /// Running replicas / width, averaged over the scheduling rounds: how full the batch was
  /// (1 = always full; it drops only in the tail, when no replica is left to take a free place).
  double active_fraction = 0;
  index_t rounds = 0;  ///< scheduling rounds (each ends with one pooled evaluation per kind of request)
  double seconds = 0;

  /// The statistics of two batches run one after the other as one (toys fitted in chunks): counts
  /// and times add, the width is the wider one's, the active fraction is averaged over all rounds.
  BatchStatistics& operator+=(const BatchStatistics& b) {
    const index_t all = rounds + b.rounds;
    active_fraction = all > 0 ? (active_fraction * static_cast<double>(rounds) + b.active_fraction * static_cast<double>(b.rounds)) / static_cast<double>(all) : 0.0;
    replicas += b.replicas;
    width = std::max(width, b.width);
    evaluations += b.evaluations;
    columns += b.columns;
    rounds = all;
    seconds += b.seconds;
    return *this;
  }
};

/// Mean and standard deviation of one quantity over a set of replicas.
struct Spread {
  double mean = std::numeric_limits<double>::quiet_NaN();
  double stddev = std::numeric_limits<double>::quiet_NaN();
  index_t count = 0;
};

/// Mean and standard deviation (with n − 1) of the finite values.
inline Spread spread(std::span<const double> values) {
  Spread s;
  double sum = 0, sum2 = 0;
  for (double v : values)
    if (std::isfinite(v)) {
      sum += v;
      ++s.count;
    }
  if (s.count == 0) return s;
  s.mean = sum / static_cast<double>(s.count);
  for (double v : values)
    if (std::isfinite(v)) sum2 += (v - s.mean) * (v - s.mean);
  s.stddev = s.count > 1 ? std::sqrt(sum2 / static_cast<double>(s.count - 1)) : 0.0;
  return s;
}

/// The replicas of a batch and how it ran, with summaries over the converged replicas.
struct BatchResult {
  std::vector<ReplicaFit> replicas;
  BatchStatistics statistics;

  /// Whether replica r counts in the summaries: converged, and its own work did not fail.
  bool usable(std::size_t r) const { return replicas[r].converged() && replicas[r].error.empty(); }
  index_t converged() const {
    index_t n = 0;
    for (std::size_t r = 0; r < replicas.size(); ++r) n += usable(r);
    return n;
  }
  /// Spread of parameter `p` over the converged replicas.
  Spread parameter(index_t p) const {
    std::vector<double> v;
    for (std::size_t r = 0; r < replicas.size(); ++r)
      if (usable(r)) v.push_back(replicas[r].x[static_cast<std::size_t>(p)]);
    return spread(v);
  }
  /// Spread of the pulls (x̂_p − truth_r)/σ̂_p over the converged replicas; `truth` has one value
  /// per replica, or one for all.
  Spread pulls(index_t p, std::span<const double> truth) const {
    if (truth.size() != 1 && truth.size() != replicas.size())
      throw usage_error("pulls need one true value per replica (" + std::to_string(replicas.size()) + ") or one for all, got " +
                        std::to_string(truth.size()));
    const auto i = static_cast<std::size_t>(p);
    std::vector<double> v;
    for (std::size_t r = 0; r < replicas.size(); ++r)
      if (usable(r)) v.push_back((replicas[r].x[i] - truth[truth.size() == 1 ? 0 : r]) / replicas[r].uncertainties[i]);
    return spread(v);
  }
};

template <objective F>
class ReplicaBatchPool;

/// The objective replica r sees inside a batch: every evaluation is handed to the batch's pool
/// and the replica's fiber suspends until the pool has evaluated it together with the other
/// replicas' (so its sequential code runs unchanged). Outside a running batch it is not usable.
template <objective F>
class ReplicaObjective {
 public:
  ReplicaObjective(ReplicaBatchPool<F>& pool, index_t replica, index_t inputs) : pool_(&pool), replica_(replica), inputs_(inputs) {}

  index_t replica() const { return replica_; }
  /// The same replica evaluating with the objective's replica inputs k instead of its own (a
  /// validation set, a second data set of the same replica).
  ReplicaObjective with_inputs(index_t k) const { return {*pool_, replica_, k}; }
  index_t size() const { return static_cast<index_t>(pool_->shared().size()); }
  /// The shared objective, for what is not an evaluation (names, the model, its options).
  const F& shared() const { return pool_->shared(); }

  decltype(auto) parameter_names() const
    requires requires(const F& f) { f.parameter_names(); }
  {
    return shared().parameter_names();
  }
  decltype(auto) default_parameters() const
    requires requires(const F& f) { f.default_parameters(); }
  {
    return shared().default_parameters();
  }

  /// The shared objective's for this replica's inputs (its data), where it holds per-replica inputs.
  double rounding_floor() const
    requires objective_with_rounding_floor<F>
  {
    if constexpr (requires(const F& f) { f.rounding_floor(index_t{}); }) return shared().rounding_floor(inputs_);
    else return shared().rounding_floor();
  }

  void value(ConstBlockView<double> x, std::span<double> f) { pool_->submit({Kind::value, replica_, inputs_, x, {}, f, {}, {}}); }
  void value_grad(ConstBlockView<double> x, std::span<double> f, BlockView<double> g) {
    pool_->submit({Kind::value_grad, replica_, inputs_, x, {}, f, g, {}});
  }
  void hessp(ConstBlockView<double> x, ConstBlockView<double> v, BlockView<double> hv) {
    pool_->submit({Kind::hessp, replica_, inputs_, x, v, {}, {}, hv});
  }
  void hessian(ConstBlockView<double> x, std::span<double> f, BlockView<double> g, BlockView<double> hess)
    requires objective_with_hessian<F>
  {
    pool_->submit({Kind::hessian, replica_, inputs_, x, {}, f, g, hess});
  }
  void hessian(ConstBlockView<double> x, std::span<double> f, BlockView<double> g, BlockView<double> hess, Curvature curvature)
    requires objective_with_gauss_newton<F>
  {
    pool_->submit({curvature == Curvature::exact ? Kind::hessian : Kind::gauss_newton, replica_, inputs_, x, {}, f, g, hess});
  }

  /// One evaluation request of a replica, as the pool collects them.
  enum class Kind { value, value_grad, hessp, hessian, gauss_newton };
  struct Request {
    Kind kind;
    index_t replica;  ///< who asks (−1 in a place without a request)
    index_t inputs;   ///< whose replica inputs the columns use
    ConstBlockView<double> x, v;
    std::span<double> f;
    BlockView<double> g, out;  ///< out: the HVPs or the Hessians
  };

 private:
  ReplicaBatchPool<F>* pool_;
  index_t replica_, inputs_;
};

/// The scheduler behind ReplicaBatch: one fiber per running replica, and between rounds one
/// objective call per kind of request over the columns of every replica waiting on that kind.
template <objective F>
class ReplicaBatchPool {
 public:
  using Request = typename ReplicaObjective<F>::Request;
  using Kind = typename ReplicaObjective<F>::Kind;

  ReplicaBatchPool(F& f, index_t width) : f_(&f), width_(width) {}

  const F& shared() const { return *f_; }

  /// Called from a replica's fiber: queues the request and suspends until it has been evaluated.
  void submit(const Request& r) {
    if (!detail::Fiber::inside())
      throw usage_error("a ReplicaObjective evaluates only inside its batch (ReplicaBatch::run); use the shared objective outside");
    waiting_[static_cast<std::size_t>(running_index(r.replica))] = r;
    detail::Fiber::suspend();
  }

  /// Runs body(r, objective_r) for every replica r in [0, count), `width` at a time: a replica that
  /// finishes makes room for the next. `on_error(r, message)` records a replica whose body threw
  /// (the others go on); an exception from the shared objective's evaluation ends the batch.
  template <class Body, class OnError>
  BatchStatistics run(index_t count, Body& body, OnError& on_error) {
    const auto t0 = std::chrono::steady_clock::now();
    BatchStatistics st;
    st.replicas = count;
    st.width = width_;
    index_t next = 0, occupied = 0;
    struct Running {
      index_t replica;
      std::unique_ptr<ReplicaObjective<F>> view;
      std::unique_ptr<detail::Fiber> fiber;
    };
    running_.clear();
    waiting_.clear();
    std::vector<Running> running;
    while (next < count || !running.empty()) {
      // Fill the free places, then let every replica without a pending request run to its next one.
      while (next < count && static_cast<index_t>(running.size()) < width_) {
        const index_t r = next++;
        auto view = std::make_unique<ReplicaObjective<F>>(*this, r, r);
        auto fiber = std::make_unique<detail::Fiber>([&body, r, v = view.get()] { body(r, *v); });
        running.push_back({r, std::move(view), std::move(fiber)});
        running_.push_back(r);
        waiting_.emplace_back();
        waiting_.back().replica = -1;
      }
      for (std::size_t i = 0; i < running.size(); ++i) {
        if (waiting_[i].replica >= 0) continue;
        try {
          running[i].fiber->resume();
        } catch (const std::exception& e) {
          on_error(running[i].replica, std::string(e.what()));
        } catch (...) {
          on_error(running[i].replica, std::string("unknown exception"));
        }
      }
      // Drop the finished replicas (their fibers are done) and keep the order of the rest.
      std::size_t keep = 0;
      for (std::size_t i = 0; i < running.size(); ++i) {
        if (running[i].fiber->done()) continue;
        if (keep != i) {
          running[keep] = std::move(running[i]);
          running_[keep] = running_[i];
          waiting_[keep] = waiting_[i];
        }
        ++keep;
      }
      running.resize(keep);
      running_.resize(keep);
      waiting_.resize(keep);
      if (keep == 0) continue;
      ++st.rounds;
      occupied += static_cast<index_t>(keep);
      // HVPs first: a replica that has just accepted a point asks for its first HVP there, and
      // the likelihood still holds that point's products from the last value-and-gradient pass.
      for (Kind kind : {Kind::hessp, Kind::value_grad, Kind::hessian, Kind::gauss_newton, Kind::value}) {
        const index_t cols = evaluate(kind);
        if (cols == 0) continue;
        ++st.evaluations;
        st.columns += cols;
      }
    }
    st.active_fraction = st.rounds > 0 ? static_cast<double>(occupied) / static_cast<double>(st.rounds * width_) : 0.0;
    st.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return st;
  }

 private:
  index_t running_index(index_t replica) const {
    for (std::size_t i = 0; i < running_.size(); ++i)
      if (running_[i] == replica) return static_cast<index_t>(i);
    throw usage_error("replica " + std::to_string(replica) + " is not running in this batch");
  }

  /// One objective call for every waiting request of `kind`: their columns side by side (an HVP
  /// request's point repeated for each of its directions), each column with its replica's
  /// inputs; the results go back and the requests are marked served. Returns the columns.
  index_t evaluate(Kind kind) {
    const index_t n = static_cast<index_t>(f_->size());
    index_t cols = 0;
    for (const Request& r : waiting_)
      if (r.replica >= 0 && r.kind == kind) cols += kind == Kind::hessp ? r.v.cols : r.x.cols;
    if (cols == 0) return 0;
    x_.resize(static_cast<std::size_t>(n * cols));
    replica_of_.clear();
    if (kind == Kind::hessp) v_.resize(static_cast<std::size_t>(n * cols));
    index_t c = 0;
    for (const Request& r : waiting_) {
      if (r.replica < 0 || r.kind != kind) continue;
      const index_t k = kind == Kind::hessp ? r.v.cols : r.x.cols;
      for (index_t j = 0; j < k; ++j, ++c) {
        const double* xj = r.x.col(kind == Kind::hessp && r.x.cols == 1 ? 0 : j);
        std::copy_n(xj, n, x_.data() + c * n);
        if (kind == Kind::hessp) std::copy_n(r.v.col(j), n, v_.data() + c * n);
        replica_of_.push_back(r.inputs);
      }
    }
    const ConstBlockView<double> X(x_.data(), n, cols);
    f_out_.resize(static_cast<std::size_t>(cols));
    g_.resize(static_cast<std::size_t>(n * cols));
    const std::span<double> fv(f_out_.data(), static_cast<std::size_t>(cols));
    const BlockView<double> G(g_.data(), n, cols);
    if constexpr (replica_objective<F>) f_->use_replicas(f_->replica_count() > 0 ? std::span<const index_t>(replica_of_) : std::span<const index_t>{});
    struct ClearSelection {
      F* f;
      ~ClearSelection() {
        if constexpr (replica_objective<F>) f->use_replicas({});
      }
    } clear{f_};
    switch (kind) {
      case Kind::value: f_->value(X, fv); break;
      case Kind::value_grad: f_->value_grad(X, fv, G); break;
      case Kind::hessp:
        out_.resize(static_cast<std::size_t>(n * cols));
        f_->hessp(X, ConstBlockView<double>(v_.data(), n, cols), BlockView<double>(out_.data(), n, cols));
        break;
      case Kind::hessian:
        if constexpr (objective_with_hessian<F>) {
          out_.resize(static_cast<std::size_t>(n * n * cols));
          f_->hessian(X, fv, G, BlockView<double>(out_.data(), n, n * cols));
        }
        break;
      case Kind::gauss_newton:
        if constexpr (objective_with_gauss_newton<F>) {
          out_.resize(static_cast<std::size_t>(n * n * cols));
          f_->hessian(X, fv, G, BlockView<double>(out_.data(), n, n * cols), Curvature::gauss_newton);
        }
        break;
    }
    c = 0;
    for (Request& r : waiting_) {
      if (r.replica < 0 || r.kind != kind) continue;
      const index_t k = kind == Kind::hessp ? r.v.cols : r.x.cols;
      for (index_t j = 0; j < k; ++j, ++c) {
        if (kind == Kind::hessp) {
          std::copy_n(out_.data() + c * n, n, r.out.col(j));
          continue;
        }
        if (!r.f.empty()) r.f[static_cast<std::size_t>(j)] = f_out_[static_cast<std::size_t>(c)];
        if (!r.g.empty()) std::copy_n(g_.data() + c * n, n, r.g.col(j));
        if (kind == Kind::hessian || kind == Kind::gauss_newton)
          for (index_t col = 0; col < n; ++col) std::copy_n(out_.data() + (c * n + col) * n, n, r.out.col(j * n + col));
      }
      r.replica = -1;  // served: its fiber runs on in the next round
    }
    return cols;
  }

  F* f_;
  index_t width_;
  std::vector<index_t> running_;  ///< replica of each running place
  std::vector<Request> waiting_;  ///< the pending request of each running place (replica −1: none)
  std::vector<double> x_, v_, f_out_, g_, out_;
  std::vector<index_t> replica_of_;
};

/// Fits many replicas of one objective at once (DESIGN.md, ReplicaBatch; n3fit-parallel-replicas.md
/// for what n3fit does and what we keep). Each replica runs the sequential code (`fit`, a scan, a
/// training loop) on its own fiber with its own trust region, stopping and status; whenever every
/// running replica waits for an evaluation, one objective call serves all of them (a GEMM over the
/// templates instead of one GEMV per replica). A replica that finishes leaves the batch and the
/// next one takes its place, so the columns stay packed. Replica r's arithmetic is its sequential
/// arithmetic: the objective's batched evaluation computes every column as it computes one column
/// alone (detail/lanes.hpp), so the result is bitwise the sequential fit's, whatever the batch width.
///
/// The replicas' inputs (data, constraint centres, bins, penalty scales) live in the objective:
/// `Likelihood::set_replicas`, replica r ↔ inputs r. An objective without per-replica inputs serves
/// replicas that differ only in their fit options (start, frozen parameters).
///
/// `N`: the batch width at compile time, or `dynamic` to give it to the constructor. It sets the
/// width only, on purpose: making it the column block in which the kernels run the per-bin algebra
/// across N columns in SIMD lanes would tie a column's arithmetic to its block, and "a column is
/// computed as it is alone" (detail/lanes.hpp) is what makes a batched replica bitwise its
/// sequential fit and the host shard's forward cache exact. The kernels vectorise along the
/// template rows instead (the reduction), where a pass spends its time streaming the templates; a
/// block of columns would raise only the batch's compute-bound small-model case
/// (docs/benchmarks.md: in-cache models gain 1.07 from batching), at the price of that contract.
template <index_t N = dynamic>
class ReplicaBatch {
 public:
  ReplicaBatch()
    requires(N != dynamic)
      : width_(N) {
    static_assert(N == dynamic || N >= 1, "ReplicaBatch<N> needs N ≥ 1 or dynamic");
  }
  explicit ReplicaBatch(index_t width)
    requires(N == dynamic)
      : width_(width) {
    if (width < 1) throw usage_error("ReplicaBatch width must be ≥ 1, got " + std::to_string(width));
  }

  index_t width() const { return width_; }

  /// Runs `body(r, objective_r)` for every replica r in [0, count), each on its own fiber with
  /// `objective_r` (a ReplicaObjective over f) as its objective, pooling the evaluations. Returns
  /// how it ran; `errors[r]` is set for a replica whose body threw.
  template <objective F, class Body>
  BatchStatistics run(F& f, index_t count, Body&& body, std::vector<std::string>* errors = nullptr) const {
    check_replicas(f, count);
    ReplicaBatchPool<F> pool(f, width_);
    if (errors) errors->assign(static_cast<std::size_t>(count), {});
    auto on_error = [&](index_t r, std::string message) {
      if (errors) (*errors)[static_cast<std::size_t>(r)] = std::move(message);
    };
    return pool.run(count, body, on_error);
  }

  /// Fits replica r with `options[r]` (start point, frozen parameters, covariance) for every r, as
  /// `fit(f_r, minimizer, options[r])` would alone.
  template <objective F, class Sub>
  BatchResult fit(F& f, const TrustRegion<Sub>& minimizer, std::span<const FitOptions> options) const {
    BatchResult out;
    const auto count = static_cast<index_t>(options.size());
    out.replicas.resize(options.size());
    auto body = [&](index_t r, ReplicaObjective<F>& fr) {
      static_cast<FitResult&>(out.replicas[static_cast<std::size_t>(r)]) = fitlib::fit(fr, minimizer, options[static_cast<std::size_t>(r)]);
      out.replicas[static_cast<std::size_t>(r)].best_iteration = out.replicas[static_cast<std::size_t>(r)].iterations;
    };
    std::vector<std::string> errors;
    out.statistics = run(f, count, body, &errors);
    mark_errors(out, errors);
    return out;
  }

  /// Replicas whose body threw: status `aborted` and the message.
  static void mark_errors(BatchResult& out, std::vector<std::string>& errors) {
    for (std::size_t r = 0; r < errors.size(); ++r)
      if (!errors[r].empty()) {
        out.replicas[r].status = FitStatus::aborted;
        out.replicas[r].error = std::move(errors[r]);
      }
  }

 private:
  template <class F>
  static void check_replicas(const F& f, index_t count) {
    if (count < 0) throw usage_error("a batch of " + std::to_string(count) + " replicas; give a count ≥ 0");
    if constexpr (replica_objective<F>) {
      const index_t held = f.replica_count();
      if (held > 0 && held < count)
        throw usage_error("the objective holds inputs for " + std::to_string(held) + " replicas but the batch has " + std::to_string(count) +
                          "; give one ReplicaInputs per replica (set_replicas), or none to share the objective's own");
    }
  }

  index_t width_;
};

}  // namespace fitlib
