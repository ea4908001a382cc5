// SPDX-License-Identifier: MIT
// Likelihood<Shard>: the shards' data-term partials reduced in shard order, plus the global terms.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <cmath>
#include <exception>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <utility>
#include <span>
#include <string>
#include <vector>

#include "fitlib/core/concepts.hpp"
#include "fitlib/core/error.hpp"
#include "fitlib/core/types.hpp"
#include "fitlib/device/exchange.hpp"
#include "fitlib/device/partition.hpp"
#include "fitlib/device/threads.hpp"
#include "fitlib/likelihood/bbstat.hpp"
#include "fitlib/likelihood/cell.hpp"
#include "fitlib/likelihood/covariance_term.hpp"
#include "fitlib/likelihood/global_terms.hpp"
#include "fitlib/likelihood/non_finite.hpp"
#include "fitlib/likelihood/options.hpp"
#include "fitlib/likelihood/regularizer.hpp"
#include "fitlib/likelihood/replica_inputs.hpp"
#include "fitlib/likelihood/shard.hpp"
#include "fitlib/likelihood/shard_concept.hpp"
#include "fitlib/model/model.hpp"

namespace fitlib {

/// The reduced negative log-likelihood of a binned model (rabbit-likelihood-and-format.md §3):
/// the Poisson data term with the saturated offset, summed over the shards in shard-index order
/// (so the result never depends on which shard finished first), plus the terms of the parameters
/// alone: Gaussian constraints, POI priors and external terms. Models `objective_with_hessian`.
///
/// With a policy that spans processes (mpi::Ranks) each process holds the shards of its own bins;
/// the shards' partials are gathered from every process and summed in the same global shard order
/// on each, so every process holds the same bits and runs the same minimizer steps (device/mpi.hpp).
template <class ShardT>
class Likelihood {
  static_assert(check_shard<ShardT>());

 public:
  using shard_type = ShardT;
  using policy_type = typename ShardT::policy_type;
  using exchange_type = decltype(exchange_of(std::declval<const policy_type&>()));
  using executor_type = executor_of_t<policy_type>;

  /// The likelihood shares the model (the host shards read its templates in place): do not modify
  /// the model while the likelihood lives; observed data go through `set_data`.
  explicit Likelihood(std::shared_ptr<const Model> model, policy_type policy = {}, LikelihoodOptions opts = {})
      : Likelihood(std::move(model), {}, {}, policy, opts) {}
  explicit Likelihood(Model model, policy_type policy = {}, LikelihoodOptions opts = {})
      : Likelihood(std::make_shared<const Model>(std::move(model)), policy, opts) {}

  /// Where a shard's templates come from: a model holding (at least) the rows of the bins asked
  /// for, e.g. `io::read_rabbit` with `RabbitReadOptions::bins`; otherwise like the likelihood's.
  using TemplateSource = std::function<std::shared_ptr<const Model>(BinRange)>;

  /// The likelihood over the shards `shards` (this process's contiguous bin ranges, e.g. parts of
  /// io::rabbit_partition), shard k reading its templates from `part(shards[k])`, called on the
  /// thread that evaluates the shard: its templates are allocated and first touched there and no
  /// process holds more of the tensor than its shards. `model` gives everything else (names, data,
  /// constraints) and may hold any part of the tensor. `part` runs on several threads at once:
  /// serialise it if the reader is not thread-safe (HDF5's serial build is not).
  Likelihood(std::shared_ptr<const Model> model, std::vector<BinRange> shards, TemplateSource part, policy_type policy = {},
             LikelihoodOptions opts = {})
      : model_(std::move(model)), opts_(opts), exchange_(exchange_of(policy)) {
    // Over MPI ranks a rank whose part fails (bad rows in its slice, too few bins for its shards)
    // must not leave the others waiting in the first gather: every rank learns of it there.
    std::exception_ptr failed;
    try {
      build(policy, std::move(shards), part);
    } catch (...) {
      failed = std::current_exception();
    }
    gather_layout(failed);
    // Shards whose models hold part of the tensor check together what none can see alone.
    if (std::any_of(shards_.begin(), shards_.end(), [](const ShardT& s) { return s.model().logk_bins.has_value(); })) {
      std::vector<index_t> mine(static_cast<std::size_t>(model_->nsyst()), 0), varied(mine.size());
      for (const ShardT& s : shards_) {
        const std::vector<index_t> v = s.model().varied_systematics();
        for (std::size_t i = 0; i < v.size(); ++i) mine[i] |= v[i];
      }
      combine_ranks<index_t>(mine, varied, [](index_t a, index_t b) { return a | b; });
      model_->require_determined(varied);
    }
  }

 private:
  /// This process's part of the constructor: checks, global terms and its shards (`given`, or
  /// partition_bins's; their templates from `part`, or from the model).
  void build(const policy_type& policy, std::vector<BinRange> given, const TemplateSource& part) {
    opts_.validate();
    if (!model_) throw usage_error("Likelihood needs a model, got a null pointer");
    model_->validate();
    nparams_ = model_->nparams();
    npoi_ = model_->npoi();
    names_ = model_->parameter_names();
    theta0_ = model_->theta0;
    global_ = detail::GlobalTerms(*model_, [&](const std::string& name) { return parameter_index(name); }, opts_.allow_negative_poi);
    if (opts_.data_term == DataTerm::chisq)
      check_variances(model_->data_variance.empty() ? model_->data : model_->data_variance);
    if (distributed() && opts_.data_term == DataTerm::covariance)
      throw usage_error("the covariance data term couples every bin through C⁻¹, which no rank holds alone; fit it in one process "
                        "(cpu::Threads splits the bins over threads), or use DataTerm::chisq or poisson over MPI ranks");
    if (opts_.data_term == DataTerm::covariance)
      covariance_ = CovarianceTerm<typename policy_type::dense_solver>(*model_, BinByBinStats::build(*model_, {0, model_->nbins()}, opts_.bin_by_bin, opts_.data_term));
    counts_ = model_->data;
    variances_ = model_->data_variance.empty() ? model_->data : model_->data_variance;
    const BinByBinStats bb = BinByBinStats::build(*model_, {0, 0}, opts_.bin_by_bin, opts_.data_term);
    bb_per_bin_ = bb.enabled ? bb.per_bin() : 0;
    const index_t k = opts_.shards > 0 ? opts_.shards : policy.concurrency();
    if (given.empty() && part) throw usage_error("Likelihood: a template source needs the shard ranges it is to read");
    const std::vector<BinRange> ranges = given.empty() ? partition_bins(*model_, k, exchange_.bins(*model_)) : check_shards(std::move(given), part);
    const auto nshards = static_cast<index_t>(ranges.size());
    executor_.emplace(policy.executor(nshards));
    const std::vector<typename ShardT::resource_type> resources = policy.partition(nshards);
    // Each shard is built on the thread that evaluates it, so the pages of what it owns (data,
    // bin-by-bin state, workspaces, and with a template source its templates) are first touched
    // there, on that thread's memory node; moving it into place keeps its buffers. Without a
    // source the shards read the model's templates in place (a copy would double the largest
    // allocation).
    std::vector<std::optional<ShardT>> built(ranges.size());
    for_each_shard(nshards, [&](std::size_t s) {
      built[s].emplace(templates_of(ranges[s], part), ranges[s], resources[s], opts_, static_cast<index_t>(s));
    });
    for (auto& b : built) shards_.push_back(std::move(*b));
  }

 public:
  /// Number of parameters: `[POIs | θ]`.
  index_t size() const { return nparams_; }
  const std::vector<std::string>& parameter_names() const { return names_; }
  const Model& model() const { return *model_; }
  /// The shared model, for another likelihood over the same tensor (other options, another
  /// policy) without copying it.
  const std::shared_ptr<const Model>& model_ptr() const { return model_; }
  const LikelihoodOptions& options() const { return opts_; }
  /// Shards of this process (all of them unless the policy spans processes).
  index_t nshards() const { return static_cast<index_t>(shards_.size()); }
  /// Shards of every process together.
  index_t total_shards() const { return total_shards_; }
  /// The processes the bins are spread over (1 unless mpi::Ranks), and this one's place among them.
  const exchange_type& exchange() const { return exchange_; }

  /// Index of a parameter by name; throws `usage_error` naming it if unknown.
  index_t parameter_index(const std::string& name) const {
    for (std::size_t i = 0; i < names_.size(); ++i)
      if (names_[i] == name) return static_cast<index_t>(i);
    throw usage_error("unknown parameter '" + name + "'; the model's parameters are its signal processes and systematics");
  }

  /// The default (prefit) point: POIs at their default strength (√μ unless allow_negative_poi), θ
  /// at the model's constraint centres.
  std::vector<double> default_parameters() const {
    std::vector<double> x;
    for (index_t q = 0; q < npoi_; ++q) {
      const double mu = model_->poi_default[static_cast<std::size_t>(q)];
      if (!opts_.allow_negative_poi && mu < 0)
        throw usage_error("default signal strength of '" + names_[static_cast<std::size_t>(q)] + "' is " + std::to_string(mu) +
                          ", negative; set LikelihoodOptions::allow_negative_poi");
      x.push_back(opts_.allow_negative_poi ? mu : std::sqrt(mu));
    }
    x.insert(x.end(), model_->theta0.begin(), model_->theta0.end());
    return x;
  }

  /// Replaces the observed counts of the unmasked bins (`[nbins]`) and, for the χ² term, their
  /// variances (empty = the counts themselves, as rabbit).
  void set_data(std::span<const double> counts, std::span<const double> variances = {}) {
    const auto nb = static_cast<std::size_t>(model_->nbins());
    if (counts.size() != nb || (!variances.empty() && variances.size() != nb))
      throw usage_error("set_data needs " + std::to_string(nb) + " counts (one per unmasked bin) and as many variances or none, got " +
                        std::to_string(counts.size()) + " and " + std::to_string(variances.size()));
    for (std::size_t i = 0; i < counts.size(); ++i)
      if (!std::isfinite(counts[i]) || counts[i] < 0)
        throw usage_error("observed count in " + model_->describe_bin(static_cast<index_t>(i)) + " is " +
                          std::to_string(counts[i]) + "; counts must be finite and non-negative");
    if (variances.empty()) variances = counts;
    if (opts_.data_term == DataTerm::chisq) check_variances(variances);
    counts_.assign(counts.begin(), counts.end());
    variances_.assign(variances.begin(), variances.end());
    for (auto& s : shards_) {
      const BinRange r = s.bins();
      const index_t b1 = std::min(r.end, model_->nbins()), b0 = std::min(r.begin, b1);
      const auto mine = [&](std::span<const double> v) { return v.subspan(static_cast<std::size_t>(b0), static_cast<std::size_t>(b1 - b0)); };
      s.set_data(mine(counts), mine(variances));
    }
  }

  /// Replaces the constraint centres θ₀ (the global observables a frequentist toy randomises,
  /// rabbit-likelihood-and-format.md §5.5), `[nsyst]`; the model's own stay as they are.
  void set_constraint_centres(std::span<const double> theta0) {
    if (static_cast<index_t>(theta0.size()) != model_->nsyst())
      throw usage_error("set_constraint_centres needs " + std::to_string(model_->nsyst()) + " centres (one per systematic), got " +
                        std::to_string(theta0.size()));
    for (std::size_t s = 0; s < theta0.size(); ++s)
      if (!std::isfinite(theta0[s]))
        throw usage_error("constraint centre of systematic '" + model_->systematics[s].name + "' is not finite");
    theta0_.assign(theta0.begin(), theta0.end());
  }
  const std::vector<double>& constraint_centres() const { return theta0_; }

  // ---- replicas: per-column inputs for batched evaluations ----------------------------------

  /// Gives the likelihood the inputs of `replicas.size()` replicas (see ReplicaInputs), replacing
  /// any before; validated here, each field naming the replica and the bin or systematic. The
  /// likelihood's own inputs (set_data, set_constraint_centres) stay as they are.
  void set_replicas(std::vector<ReplicaInputs> replicas) {
    const Model& m = *model_;
    const auto nb = static_cast<std::size_t>(m.nbins()), ns = static_cast<std::size_t>(m.nsyst());
    // Everything is checked before anything changes, so a bad replica leaves the inputs as they were.
    for (std::size_t r = 0; r < replicas.size(); ++r) {
      ReplicaInputs& in = replicas[r];
      const std::string who = "replica " + std::to_string(r) + ": ";
      auto need = [&](std::size_t size, std::size_t n, const char* what) {
        if (size != 0 && size != n)
          throw usage_error(who + what + " has " + std::to_string(size) + " entries; give " + std::to_string(n) + " or none");
      };
      need(in.data.size(), nb, "data");
      need(in.variances.size(), nb, "variances");
      need(in.constraint_centres.size(), ns, "constraint_centres");
      need(in.bins.size(), nb, "bins");
      need(in.penalty_scales.size(), regularizers_.size(), "penalty_scales (one per regularizer)");
      if (!in.variances.empty() && in.data.empty()) throw usage_error(who + "variances are given without data; give both");
      if (!in.bins.empty() && opts_.data_term == DataTerm::covariance)
        throw usage_error(who + "a bin selection needs a separable data term (Poisson or χ²); the covariance term couples the bins");
      for (std::size_t s = 0; s < in.constraint_centres.size(); ++s)
        if (!std::isfinite(in.constraint_centres[s]))
          throw usage_error(who + "constraint centre of systematic '" + m.systematics[s].name + "' is not finite");
      for (std::size_t k = 0; k < in.penalty_scales.size(); ++k)
        if (!(in.penalty_scales[k] >= 0) || !std::isfinite(in.penalty_scales[k]))
          throw usage_error(who + "penalty scale of regularizer '" + regularizers_[k]->name() + "' is " +
                            std::to_string(in.penalty_scales[k]) + "; use a finite factor ≥ 0");
      if (in.data.empty() && !in.bins.empty()) {  // a split of the likelihood's own data
        in.data = counts_;
        in.variances = variances_;
      }
      for (std::size_t i = 0; i < in.data.size(); ++i)
        if (!std::isfinite(in.data[i]) || in.data[i] < 0)
          throw usage_error(who + "observed count in " + m.describe_bin(static_cast<index_t>(i)) + " is " + std::to_string(in.data[i]) +
                            "; counts must be finite and non-negative");
      if (!in.data.empty() && opts_.data_term == DataTerm::chisq) check_variances(in.variances.empty() ? in.data : in.variances);
    }
    for (auto& s : shards_) s.clear_slots();
    selected_.clear();
    for (std::size_t r = 0; r < replicas.size(); ++r) {
      const ReplicaInputs& in = replicas[r];
      if (in.data.empty()) continue;
      const std::span<const double> var = in.variances.empty() ? std::span<const double>(in.data) : std::span<const double>(in.variances);
      for (std::size_t k = 0; k < shards_.size(); ++k) {
        const auto b0 = static_cast<std::size_t>(data_offset(k)), nd = static_cast<std::size_t>(shards_[k].ndata());
        shards_[k].set_slot(static_cast<index_t>(r + 1), std::span(in.data).subspan(b0, nd), var.subspan(b0, nd),
                            in.bins.empty() ? std::span<const std::uint8_t>{} : std::span<const std::uint8_t>(in.bins).subspan(b0, nd));
      }
    }
    replicas_ = std::move(replicas);
  }
  index_t replica_count() const { return static_cast<index_t>(replicas_.size()); }
  const ReplicaInputs& replica(index_t r) const { return replicas_.at(static_cast<std::size_t>(r)); }

  /// Sets replica r's factor on regularizer k (a hyperparameter, or a multiplier that grows on a
  /// schedule during a fit).
  void set_penalty_scale(index_t r, index_t k, double scale) {
    if (r < 0 || r >= replica_count() || k < 0 || k >= static_cast<index_t>(regularizers_.size()))
      throw usage_error("set_penalty_scale: replica " + std::to_string(r) + " or regularizer " + std::to_string(k) + " does not exist (" +
                        std::to_string(replica_count()) + " replicas, " + std::to_string(regularizers_.size()) + " regularizers)");
    if (!(scale >= 0) || !std::isfinite(scale))
      throw usage_error("set_penalty_scale: scale " + std::to_string(scale) + " of regularizer '" + regularizers_[static_cast<std::size_t>(k)]->name() +
                        "'; use a finite factor ≥ 0");
    auto& scales = replicas_[static_cast<std::size_t>(r)].penalty_scales;
    scales.resize(regularizers_.size(), 1.0);
    scales[static_cast<std::size_t>(k)] = scale;
  }
  index_t regularizer_count() const { return static_cast<index_t>(regularizers_.size()); }
  const Regularizer& regularizer(index_t k) const { return *regularizers_.at(static_cast<std::size_t>(k)); }

  /// Column j of the following evaluations uses the inputs of replica `replicas[j]` (−1: the
  /// likelihood's own); empty: every column uses the likelihood's own. A selection must name one
  /// replica per column of x.
  void use_replicas(std::span<const index_t> replicas) {
    for (index_t r : replicas)
      if (r < -1 || r >= replica_count())
        throw usage_error("use_replicas: replica " + std::to_string(r) + " is not set; the likelihood holds " +
                          std::to_string(replica_count()) + " (set_replicas)");
    selected_.assign(replicas.begin(), replicas.end());
  }

  /// Adds a penalty term (regularizer.hpp) and binds it: a parameter penalty resolves its names; an
  /// observable penalty gets the bin yields of its bins at the default parameters as its reference
  /// (rabbit's ν⁰, §3.6). Only the bins an observable penalty reads pay for a second pass.
  void add_regularizer(std::shared_ptr<Regularizer> r) {
    if (!r) throw usage_error("add_regularizer needs a regularizer, got a null pointer");
    std::vector<double> reference;
    if (r->needs_observables() && distributed())
      throw usage_error("regularizer '" + r->name() + "' reads the yields of bins that other MPI ranks hold; add it to a likelihood in one "
                        "process (cpu::Threads splits the bins over threads), or penalise parameters only over MPI ranks");
    if (r->needs_observables()) {
      const BinRange br = r->observable_bins();
      if (br.begin < 0 || br.end > model_->nbins_full() || br.begin >= br.end)
        throw usage_error("regularizer '" + r->name() + "' reads bins [" + std::to_string(br.begin) + ", " + std::to_string(br.end) +
                          "), outside the model's " + std::to_string(model_->nbins_full()) + " bins");
      const auto x0 = default_parameters();
      Eigen::MatrixXd o(br.size(), 1);
      gather_observables(br, column(x0), {}, o, nullptr);
      reference.assign(o.data(), o.data() + o.size());
    }
    r->bind(names_, reference);
    for (const auto& in : replicas_)
      if (!in.penalty_scales.empty())
        throw usage_error("add_regularizer: the replicas' penalty_scales were set for " + std::to_string(regularizers_.size()) +
                          " regularizers; add regularizers before set_replicas");
    regularizers_.push_back(std::move(r));
  }

  // ---- the objective concept -------------------------------------------------------------

  void value(ConstBlockView<double> x, std::span<double> f) { evaluate(x, {}, f, {}, {}); }

  void value_grad(ConstBlockView<double> x, std::span<double> f, BlockView<double> g) { evaluate(x, {}, f, g, {}); }

  /// H(x_j)·v_j per column, or H(x)·v_k for every k when x has one column.
  void hessp(ConstBlockView<double> x, ConstBlockView<double> v, BlockView<double> hv) { evaluate(x, v, {}, {}, hv); }

  /// Value, gradient and Hessian-vector products from one pass over the templates.
  void value_grad_hessp(ConstBlockView<double> x, ConstBlockView<double> v, std::span<double> f, BlockView<double> g,
                        BlockView<double> hv) {
    evaluate(x, v, f, g, hv);
  }

  /// Value, gradient and dense Hessian per column; `hess` is `[n × n·N]`, column j's Hessian in
  /// columns `[j·n, (j+1)·n)`.
  void hessian(ConstBlockView<double> x, std::span<double> f, BlockView<double> g, BlockView<double> hess) {
    const index_t n = nparams_, nx = x.cols;
    require(hess.rows == n && hess.cols == n * nx, "hessian output", n, n * nx, hess);
    evaluate(x, {}, f, g, {});
    const bool coupled = opts_.data_term == DataTerm::covariance;
    if (coupled) rows_.resize(model_->nbins(), n);
    const std::span<const index_t> slots = bind_columns(nx);
    const std::uint64_t mark = inputs_mark(x, {});
    for (index_t j = 0; j < nx; ++j) {
      BlockView<double> hj = hess.block_cols(j * n, n);
      const index_t len = n * n + stamped();
      local_.resize(shards_.size() * static_cast<std::size_t>(len));
      for_each_shard([&](std::size_t k) {
        const index_t b0 = data_offset(k);
        stamp(local_.data() + k * static_cast<std::size_t>(len), len, mark);
        shards_[k].hessian(x, j, BlockView<double>(local_.data() + k * static_cast<std::size_t>(len), n, n),
                           coupled ? data_rows(y_, b0, k) : ConstBlockView<double>{},
                           coupled ? BlockView<double>(rows_.data() + b0, shards_[k].ndata(), n, rows_.rows()) : BlockView<double>{},
                           slots.empty() ? 0 : slots[static_cast<std::size_t>(j)]);
      });
      const double* all = gathered(len, mark);
      for (index_t k = 0; k < total_shards_; ++k) put(hj, ConstBlockView<double>(all + k * len, n, n), k == 0);
      if (coupled) covariance_.add_curvature(j, rows_, hj);
    }
    global_.add(*model_, x, {}, {}, {}, {}, hess, theta0s());
    add_regularizer_hessians(x, hess);
  }

  // ---- conveniences for one parameter vector ---------------------------------------------

  double value(std::span<const double> x) {
    double f;
    value(column(x), std::span(&f, 1));
    return f;
  }
  double value_grad(std::span<const double> x, std::span<double> g) {
    double f;
    value_grad(column(x), std::span(&f, 1), BlockView<double>(g.data(), static_cast<index_t>(g.size()), 1));
    return f;
  }

  /// Expected yields ν[b, p] of every bin (masked channels included), `[nbins_full × nprocs]` row-major.
  /// Over MPI ranks each rank's bins are gathered, so every rank returns all of them.
  std::vector<double> yields(std::span<const double> x) {
    const auto xv = column(x);
    const index_t P = model_->nprocs(), b0 = rank_bins_[static_cast<std::size_t>(exchange_.rank())].begin;
    std::vector<double> mine(static_cast<std::size_t>(rank_bins_[static_cast<std::size_t>(exchange_.rank())].size() * P));
    for (auto& s : shards_) {
      const BinRange r = s.bins();
      s.yields(xv, 0, std::span(mine).subspan(static_cast<std::size_t>((r.begin - b0) * P), static_cast<std::size_t>(r.size() * P)));
    }
    return gather_bins(mine, P, model_->nbins_full());
  }

  /// Bin-by-bin parameters per data bin: 1 (lite) or nprocs (full); 0 without bin-by-bin statistics.
  index_t bin_by_bin_per_bin() const { return bb_per_bin_; }

  /// The profiled bin-by-bin parameters β̂ at x (rabbit's postfit β, §2.5, §3.4): `[nbins × per_bin]`
  /// row-major (see bin_by_bin_per_bin), β₀ where β is fixed; empty without bin-by-bin statistics.
  std::vector<double> bin_by_bin_parameters(std::span<const double> x) {
    const index_t per = bin_by_bin_per_bin();
    if (per == 0) return {};
    const auto xv = column(x);
    const bool coupled = opts_.data_term == DataTerm::covariance;
    if (coupled) solve_coupled(xv, {}, {});
    // This process's data bins, [first, last data bin of its last shard).
    const index_t first = data_offset(0);
    std::vector<double> beta(static_cast<std::size_t>((data_offset(shards_.size() - 1) + shards_.back().ndata() - first) * per));
    for (std::size_t k = 0; k < shards_.size(); ++k) {
      const index_t b0 = data_offset(k);
      shards_[k].bin_by_bin_parameters(
          xv, std::span(beta).subspan(static_cast<std::size_t>((b0 - first) * per), static_cast<std::size_t>(shards_[k].ndata() * per)),
          coupled ? data_rows(y_, b0, k) : ConstBlockView<double>{});
    }
    return gather_bins(beta, per, model_->nbins());
  }

  /// Σ_b L_β''(β̂_b)·(dβ̂_b/dx·v_k)² for each column v_k of `v` (`[n × nv]`): the variance that the
  /// bin-by-bin β₀ (as global observables, §5.2) give a target whose covariance column is v_k.
  /// Separable data terms (lite or full); zeros without bin-by-bin statistics.
  std::vector<double> bin_by_bin_variance(std::span<const double> x, ConstBlockView<double> v) {
    std::vector<double> var(static_cast<std::size_t>(v.cols), 0.0);
    if (bin_by_bin_per_bin() == 0) return var;
    if (opts_.data_term == DataTerm::covariance)
      throw usage_error("the bin-by-bin part of global impacts needs a separable data term (Poisson or χ²), not the covariance term");
    require(v.rows == nparams_, "direction block", nparams_, v.cols, v);
    for (auto& s : shards_) s.bin_by_bin_variance(column(x), v, var);
    std::vector<double> total(var.size());
    combine_ranks<double>(var, total, [](double a, double b) { return a + b; });  // each rank's sum, added in rank order
    return total;
  }

  /// Holds β at `beta` (as bin_by_bin_parameters returns it) instead of profiling it, until called
  /// with an empty span; values and derivatives are then those at fixed β. Not for the covariance
  /// term, where β is marginalised in closed form.
  void fix_bin_by_bin(std::span<const double> beta) {
    const index_t per = bin_by_bin_per_bin();
    if (per == 0) return;
    if (opts_.data_term == DataTerm::covariance)
      throw usage_error("fix_bin_by_bin: the covariance data term marginalises β in closed form; β cannot be held fixed there");
    if (!beta.empty() && static_cast<index_t>(beta.size()) != model_->nbins() * per)
      throw usage_error("fix_bin_by_bin needs " + std::to_string(model_->nbins() * per) + " values (as bin_by_bin_parameters returns), got " +
                        std::to_string(beta.size()));
    for (std::size_t k = 0; k < shards_.size(); ++k)
      shards_[k].fix_bin_by_bin(beta.empty() ? beta
                                             : beta.subspan(static_cast<std::size_t>(data_offset(k) * per),
                                                            static_cast<std::size_t>(shards_[k].ndata() * per)));
  }

  /// Why the NLL or its gradient is not finite at x, in one sentence that names the first data bin
  /// at fault (channel, bin, process) and its cause: a non-finite parameter, a non-finite yield, an
  /// expected count ≤ 0 (or too small) where data are observed, a data term that is not finite, or a
  /// gradient share too large to square (an extreme nominal yield, signal strength, logk or observed
  /// count). Empty when both are finite. For fitlib-fit's `not_finite` status (FitStatus), with the
  /// likelihood's own data (set_data), not a replica's. It evaluates the likelihood, so under
  /// mpi::Ranks call it on every rank (each gets the same text; logk rows a rank does not hold are
  /// not inspected there).
  std::string explain_non_finite(std::span<const double> x) {
    if (static_cast<index_t>(x.size()) != nparams_)
      throw usage_error("explain_non_finite needs " + std::to_string(nparams_) + " parameters, got " + std::to_string(x.size()));
    std::vector<double> g(x.size(), 0.0);
    double f = std::numeric_limits<double>::quiet_NaN();
    const bool finite_x = std::all_of(x.begin(), x.end(), [](double v) { return std::isfinite(v); });
    if (finite_x) f = value_grad(x, g);
    const std::vector<double> nu = finite_x ? yields(x) : std::vector<double>{};
    return detail::explain_non_finite(*model_, opts_, x, nu, counts_, variances_, f, g, names_);
  }

 private:
  /// The replica of column j of an evaluation over nx columns (−1: the likelihood's own inputs).
  index_t replica_of(index_t j) const { return selected_.empty() ? -1 : selected_[static_cast<std::size_t>(j)]; }
  /// Each column's constraint centres, for the global terms.
  auto theta0s() const {
    return [this](index_t j) -> const std::vector<double>& { return theta0_of(j); };
  }
  const std::vector<double>& theta0_of(index_t j) const {
    const index_t r = replica_of(j);
    return r < 0 || replicas_[static_cast<std::size_t>(r)].constraint_centres.empty() ? theta0_
                                                                                       : replicas_[static_cast<std::size_t>(r)].constraint_centres;
  }
  const std::vector<double>& counts_of(index_t j) const {
    const index_t r = replica_of(j);
    return r < 0 || replicas_[static_cast<std::size_t>(r)].data.empty() ? counts_ : replicas_[static_cast<std::size_t>(r)].data;
  }
  /// The factor on regularizer k in column j (1 unless the column's replica scales it).
  double penalty_scale(std::size_t k, index_t j) const {
    const index_t r = replica_of(j);
    return r < 0 || replicas_[static_cast<std::size_t>(r)].penalty_scales.empty() ? 1.0 : replicas_[static_cast<std::size_t>(r)].penalty_scales[k];
  }
  /// The shards' data slot of each column (0 = the likelihood's own data; replica r's is r + 1).
  std::span<const index_t> bind_columns(index_t nx) {
    if (selected_.empty()) return {};
    if (static_cast<index_t>(selected_.size()) != nx)
      throw usage_error("use_replicas named " + std::to_string(selected_.size()) + " replicas for an evaluation of " + std::to_string(nx) +
                        " columns; name one per column");
    column_slots_.resize(static_cast<std::size_t>(nx));
    for (index_t j = 0; j < nx; ++j) {
      const index_t r = replica_of(j);
      column_slots_[static_cast<std::size_t>(j)] = r < 0 || replicas_[static_cast<std::size_t>(r)].data.empty() ? 0 : r + 1;
    }
    return column_slots_;
  }

  /// Launches f(k) for every shard k on the policy's executor, then waits for the executor and
  /// every shard (its fence), so their outputs are ready. Each shard writes only its own buffers,
  /// so the outcome does not depend on which finishes first.
  template <class Fn>
  void for_each_shard(Fn&& f) {
    for_each_shard(static_cast<index_t>(shards_.size()), f);
    for (auto& s : shards_) s.fence();
  }
  template <class Fn>
  void for_each_shard(index_t n, Fn&& f) {
    executor_->for_each(n, [&](index_t k) { f(static_cast<std::size_t>(k)); });
    executor_->fence();
  }

  /// The χ² term divides by every unmasked bin's variance.
  void check_variances(std::span<const double> variances) const {
    for (std::size_t b = 0; b < variances.size(); ++b)
      if (!(variances[b] > 0) || !std::isfinite(variances[b]))
        throw usage_error("the χ² data term needs a positive variance in every unmasked bin, but " +
                          model_->describe_bin(static_cast<index_t>(b)) + " has " + std::to_string(variances[b]) +
                          "; use DataTerm::poisson or supply variances");
  }

  ConstBlockView<double> column(std::span<const double> x) const {
    if (static_cast<index_t>(x.size()) != nparams_)
      throw usage_error("parameter vector has " + std::to_string(x.size()) + " entries; the model has " +
                        std::to_string(nparams_) + " parameters");
    return {x.data(), nparams_, 1};
  }

  template <class T>
  static void require(bool ok, const char* what, index_t rows, index_t cols, const BlockView<T>& b) {
    if (!ok)
      throw usage_error(std::string(what) + " is " + std::to_string(b.rows) + " × " + std::to_string(b.cols) + ", expected " +
                        std::to_string(rows) + " × " + std::to_string(cols));
  }

  /// to = from (the first shard's partials) or to += from (each later one's).
  static void put(BlockView<double> to, ConstBlockView<double> from, bool first) {
    for (index_t j = 0; j < to.cols; ++j)
      for (index_t i = 0; i < to.rows; ++i) to(i, j) = first ? from(i, j) : to(i, j) + from(i, j);
  }

  bool distributed() const { return exchange_.size() > 1; }

  /// Shard ranges given to the constructor: contiguous, each with a data bin, all of them in one
  /// process (over MPI ranks, gather_layout checks that the ranks' follow one another).
  std::vector<BinRange> check_shards(std::vector<BinRange> shards, const TemplateSource& part) const {
    if (!part) throw usage_error("Likelihood: shard ranges were given without a template source to read them from");
    const index_t nb = model_->nbins(), bf = model_->nbins_full();
    for (std::size_t s = 0; s < shards.size(); ++s) {
      const BinRange r = shards[s];
      const bool follows = s == 0 || r.begin == shards[s - 1].end;
      if (r.begin < 0 || r.begin >= std::min(r.end, nb) || r.end > bf || !follows)
        throw usage_error("Likelihood: shard " + std::to_string(s) + " covers bins [" + std::to_string(r.begin) + ", " + std::to_string(r.end) +
                          "); shards must follow one another, each from an unmasked bin, within the model's " + std::to_string(bf) +
                          " bins (io::rabbit_partition or partition_bins gives such ranges)");
    }
    if (!distributed() && (shards.front().begin != 0 || shards.back().end != bf))
      throw usage_error("Likelihood: the shards cover bins [" + std::to_string(shards.front().begin) + ", " + std::to_string(shards.back().end) +
                        ") but must cover all " + std::to_string(bf) + " bins in one process");
    return shards;
  }

  /// The model shard `bins` reads its templates from: part(bins), checked to be the same model, or
  /// the likelihood's own.
  std::shared_ptr<const Model> templates_of(BinRange bins, const TemplateSource& part) const {
    if (!part) return model_;
    std::shared_ptr<const Model> m = part(bins);
    if (!m || m->nbins_full() != model_->nbins_full() || m->nprocs() != model_->nprocs() || m->nsyst() != model_->nsyst() ||
        m->symmetric != model_->symmetric || m->sparse.has_value() != model_->sparse.has_value())
      throw usage_error("the template source gave shard [" + std::to_string(bins.begin) + ", " + std::to_string(bins.end) +
                        ") a model of another shape than the likelihood's (bins, processes, systematics, layout); read both from the same tensor");
    m->validate();
    return m;
  }

  /// Every process's shard count and bins (the same on each): the layout of the gathered partials.
  /// The processes' bins must follow one another in process order and cover every bin once.
  /// `failed`: this process's own construction failed (then every process throws).
  void gather_layout(const std::exception_ptr& failed) {
    const auto np = static_cast<std::size_t>(exchange_.size());
    const std::array<index_t, 3> mine = failed ? std::array<index_t, 3>{-1, 0, 0}
                                               : std::array<index_t, 3>{nshards(), shards_.front().bins().begin, shards_.back().bins().end};
    std::vector<index_t> all(3 * np);
    const std::vector<index_t> counts(np, 3);
    exchange_.all_gather(std::span<const index_t>(mine), std::span<index_t>(all), std::span<const index_t>(counts));
    if (failed) std::rethrow_exception(failed);
    for (std::size_t r = 0; r < np; ++r)
      if (all[3 * r] < 0)
        throw usage_error("rank " + std::to_string(r) + " could not build its part of the likelihood (its own error says why), so no rank can "
                          "evaluate it");
    shards_of_rank_.resize(np);
    rank_bins_.resize(np);
    total_shards_ = 0;
    for (std::size_t r = 0; r < np; ++r) {
      shards_of_rank_[r] = all[3 * r];
      rank_bins_[r] = {all[3 * r + 1], all[3 * r + 2]};
      total_shards_ += all[3 * r];
      const index_t expected = r == 0 ? 0 : rank_bins_[r - 1].end;
      if (rank_bins_[r].begin != expected || (r + 1 == np && rank_bins_[r].end != model_->nbins_full()))
        throw usage_error("rank " + std::to_string(r) + " holds bins [" + std::to_string(rank_bins_[r].begin) + ", " +
                          std::to_string(rank_bins_[r].end) + "), but the ranks' bins must follow one another in rank order and cover all " +
                          std::to_string(model_->nbins_full()) + " bins: give every rank its part of the same split (io::rabbit_partition)");
    }
  }

  /// The rows of every shard's partials (`len` each), this process's in `local_`: itself in one
  /// process, else gathered from every process in rank (hence shard) order, each row stamped with
  /// the mark of the inputs it was evaluated at (inputs_mark). Every rank runs the same minimizer on
  /// the same sums, so the marks agree; if they ever do not (different binaries or CPUs, a callback
  /// that decides by the clock), every rank stops here rather than wait in a later gather the
  /// others never reach.
  const double* gathered(index_t len, std::uint64_t mine) {
    if (!distributed()) return local_.data();
    std::vector<index_t> counts(shards_of_rank_.size());
    for (std::size_t r = 0; r < counts.size(); ++r) counts[r] = shards_of_rank_[r] * len;
    all_.resize(static_cast<std::size_t>(total_shards_ * len));
    exchange_.all_gather(std::span<const double>(local_.data(), shards_.size() * static_cast<std::size_t>(len)), std::span<double>(all_),
                         std::span<const index_t>(counts));
    for (index_t k = 0; k < total_shards_; ++k)
      if (std::bit_cast<std::uint64_t>(all_[static_cast<std::size_t>((k + 1) * len - 1)]) != mine)
        throw usage_error("the MPI ranks evaluated the likelihood at different parameters (shard " + std::to_string(k) +
                          "'s rank differs from this one): every rank must make the same calls with the same inputs; run the same binary on "
                          "identical CPUs, and stop fits by iterates, not by time");
    return all_.data();
  }
  /// Over MPI ranks each row of partials carries one more value: the mark of its inputs.
  index_t stamped() const { return distributed() ? 1 : 0; }
  void stamp(double* row, index_t len, std::uint64_t mark) const {
    if (distributed()) row[len - 1] = std::bit_cast<double>(mark);
  }
  /// The bits of x and v folded into one word (FNV-1a), once per evaluation; 0 in one process.
  std::uint64_t inputs_mark(ConstBlockView<double> x, ConstBlockView<double> v) const {
    if (!distributed()) return 0;
    std::uint64_t h = 1469598103934665603ULL;
    for (const ConstBlockView<double>* b : {&x, &v})
      for (index_t j = 0; j < b->cols; ++j)
        for (index_t i = 0; i < b->rows; ++i) h = (h ^ std::bit_cast<std::uint64_t>((*b)(i, j))) * 1099511628211ULL;
    return h;
  }

  /// out[i] = op(…op(op(rank 0's mine[i], rank 1's), rank 2's)…): a value every process holds a
  /// part of, combined in rank order (mine itself in one process).
  template <class T, class Op>
  void combine_ranks(std::span<const T> mine, std::span<T> out, Op op) const {
    const auto np = static_cast<std::size_t>(exchange_.size()), n = mine.size();
    std::vector<T> all(n * np);
    const std::vector<index_t> counts(np, static_cast<index_t>(n));
    exchange_.all_gather(mine, std::span<T>(all), std::span<const index_t>(counts));
    for (std::size_t i = 0; i < n; ++i) out[i] = all[i];
    for (std::size_t r = 1; r < np; ++r)
      for (std::size_t i = 0; i < n; ++i) out[i] = op(out[i], all[r * n + i]);
  }

  /// Per-bin rows (`width` values per bin) of this process's bins, of the first `limit` bins
  /// (all bins, or the data bins), joined with every other process's in bin order.
  std::vector<double> gather_bins(std::vector<double> mine, index_t width, index_t limit) const {
    if (!distributed()) return mine;
    std::vector<index_t> counts;
    for (const BinRange& b : rank_bins_) counts.push_back((std::min(b.end, limit) - std::min(b.begin, limit)) * width);
    std::vector<double> all(static_cast<std::size_t>(limit * width));
    exchange_.all_gather(std::span<const double>(mine), std::span<double>(all), std::span<const index_t>(counts));
    return all;
  }

  void evaluate(ConstBlockView<double> x, ConstBlockView<double> v, std::span<double> f, BlockView<double> g,
                BlockView<double> hv) {
    const index_t n = nparams_, nx = x.cols, nv = v.empty() ? 0 : v.cols;
    require(x.rows == n && nx >= 1, "parameter block", n, nx, x);
    if (!f.empty() && static_cast<index_t>(f.size()) != nx)
      throw usage_error("value output has " + std::to_string(f.size()) + " entries for " + std::to_string(nx) + " columns");
    if (!g.empty()) require(g.rows == n && g.cols == nx, "gradient output", n, nx, g);
    if (nv > 0) {
      require(v.rows == n && (nv == nx || nx == 1), "direction block", n, nx, v);
      require(hv.rows == n && hv.cols == nv, "Hessian-vector output", n, nv, hv);
    }
    const bool coupled = opts_.data_term == DataTerm::covariance;
    const std::span<const index_t> slots = bind_columns(nx);
    if (coupled) solve_coupled(x, v, f);
    // The coupled term's value comes from solve_coupled: its backward pass only serves derivatives.
    const bool backward = !coupled || !g.empty() || nv > 0;
    // Each shard writes its partials, [values | gradients | HVPs], into its row of a block
    // (concurrently where the policy has threads); the rows of every shard, gathered from every
    // process, are then added in shard order.
    if (backward) {
      const index_t at_g = f.empty() || coupled ? 0 : nx, at_hv = at_g + (g.empty() ? 0 : n * nx), len = at_hv + n * nv + stamped();
      local_.resize(shards_.size() * static_cast<std::size_t>(len));
      const std::uint64_t mark = inputs_mark(x, v);
      for_each_shard([&](std::size_t k) {
        double* row = local_.data() + k * static_cast<std::size_t>(len);
        stamp(row, len, mark);
        PartialRequest rq;
        rq.x = x;
        rq.v = v;
        rq.slots = slots;
        if (coupled) {
          rq.coupled_y = data_rows(y_, data_offset(k), k);
          if (nv > 0) rq.coupled_z = data_rows(z_, data_offset(k), k);
        }
        if (at_g > 0) rq.nll = row;
        if (!g.empty()) rq.grad = BlockView<double>(row + at_g, n, nx);
        if (nv > 0) rq.hvp = BlockView<double>(row + at_hv, n, nv);
        shards_[k].partials(rq);
      });
      const double* all = gathered(len, mark);
      for (index_t k = 0; k < total_shards_; ++k) {
        const double* row = all + k * len;
        if (at_g > 0) put(BlockView<double>(f.data(), 1, nx), ConstBlockView<double>(row, 1, nx), k == 0);
        if (!g.empty()) put(g, ConstBlockView<double>(row + at_g, n, nx), k == 0);
        if (nv > 0) put(hv, ConstBlockView<double>(row + at_hv, n, nv), k == 0);
      }
    }
    global_.add(*model_, x, v, f, g, hv, {}, theta0s());
    add_regularizers(0, regularizers_.size(), x, v, f, g, hv);
  }

  /// Shard k's part of the global bin range br: its local bins and the rows they fill.
  struct Overlap {
    BinRange local;
    index_t row = 0;
  };
  Overlap overlap(std::size_t k, BinRange br) const {
    const BinRange r = shards_[k].bins();
    const index_t lo = std::max(r.begin, br.begin), hi = std::min(r.end, br.end);
    if (lo >= hi) return {};
    return {{lo - r.begin, hi - r.begin}, lo - br.begin};
  }

  /// The observables o_b = Σ_p ν_bp of the bins br for every column of x (`o`, `[br.size() × nx]`)
  /// and their directional derivatives (`dobs`, may be null), gathered from the shards.
  void gather_observables(BinRange br, ConstBlockView<double> x, ConstBlockView<double> v, Eigen::MatrixXd& o, Eigen::MatrixXd* dobs) {
    for (std::size_t k = 0; k < shards_.size(); ++k) {
      const Overlap ov = overlap(k, br);
      if (ov.local.size() == 0) continue;
      const index_t nr = ov.local.size(), ld = br.size();
      shards_[k].observables(x, v, ov.local, BlockView<double>(o.data() + ov.row, nr, o.cols(), ld),
                             dobs ? BlockView<double>(dobs->data() + ov.row, nr, dobs->cols(), ld) : BlockView<double>{});
    }
  }

  /// The regularizers [k0, k1)'s values, gradients and HVPs, each times its column's penalty scale,
  /// added to the outputs: parameter penalties directly, observable ones through their bins'
  /// forward and backward passes. Column j of x is column j0 + j of the evaluation (its replica).
  void add_regularizers(std::size_t k0, std::size_t k1, ConstBlockView<double> x, ConstBlockView<double> v, std::span<double> f,
                        BlockView<double> g, BlockView<double> hv, index_t j0 = 0) {
    const index_t nx = x.cols, nv = v.empty() ? 0 : v.cols, n = nparams_;
    auto point_of = [&](index_t k) { return nx == 1 ? index_t{0} : k; };
    for (std::size_t ri = k0; ri < k1; ++ri) {
      const Regularizer& r = *regularizers_[ri];
      auto scale = [&](index_t j) { return penalty_scale(ri, j0 + j); };
      if (!r.needs_observables()) {
        std::vector<double> tmp;
        // Into the output directly at scale 1; through a buffer otherwise, the output then + scale·buffer.
        auto scaled = [&](double c, double* out, index_t len, auto&& add_into) {
          if (c == 1.0) return add_into(out);
          tmp.assign(static_cast<std::size_t>(len), 0.0);
          const auto result = add_into(out ? tmp.data() : nullptr);
          for (index_t i = 0; out && i < len; ++i) out[i] += c * tmp[static_cast<std::size_t>(i)];
          return c * result;
        };
        for (index_t j = 0; j < nx; ++j) {
          const double value = scaled(scale(j), g.empty() ? nullptr : g.col(j), n, [&](double* out) {
            return r.value_grad({x.col(j), static_cast<std::size_t>(n)}, out ? std::span<double>(out, static_cast<std::size_t>(n)) : std::span<double>{});
          });
          if (!f.empty()) f[static_cast<std::size_t>(j)] += value;
        }
        for (index_t k = 0; k < nv; ++k)
          scaled(scale(point_of(k)), hv.col(k), n, [&](double* out) {
            r.hessp({x.col(point_of(k)), static_cast<std::size_t>(n)}, v.block_cols(k, 1), BlockView<double>(out, n, 1));
            return 0.0;
          });
        continue;
      }
      const BinRange br = r.observable_bins();
      const index_t nb = br.size();
      Eigen::MatrixXd o(nb, nx), dobs(nb, nv), y = Eigen::MatrixXd::Zero(nb, nx), z = Eigen::MatrixXd::Zero(nb, nv);
      gather_observables(br, x, v, o, &dobs);
      for (index_t j = 0; j < nx; ++j) {
        double value = r.value_grad({o.col(j).data(), static_cast<std::size_t>(nb)}, {y.col(j).data(), static_cast<std::size_t>(nb)});
        if (const double c = scale(j); c != 1.0) {
          value *= c;
          y.col(j) *= c;
        }
        if (!f.empty()) f[static_cast<std::size_t>(j)] += value;
      }
      for (index_t k = 0; k < nv; ++k) {
        r.hessp({o.col(point_of(k)).data(), static_cast<std::size_t>(nb)}, {dobs.col(k).data(), nb, 1}, {z.col(k).data(), nb, 1});
        if (const double c = scale(point_of(k)); c != 1.0) z.col(k) *= c;
      }
      if (g.empty() && nv == 0) continue;
      for (std::size_t k = 0; k < shards_.size(); ++k) {
        const Overlap ov = overlap(k, br);
        if (ov.local.size() == 0) continue;
        PartialRequest rq;
        rq.x = x;
        rq.v = v;
        rq.grad = g;
        rq.hvp = hv;
        rq.coupled_y = {y.data() + ov.row, ov.local.size(), nx, nb};
        rq.coupled_z = {z.data() + ov.row, ov.local.size(), nv, nb};
        rq.observables = ov.local;
        rq.accumulate = true;
        shards_[k].partials(rq);
        shards_[k].fence();
      }
    }
  }

  /// The regularizers' dense Hessians: parameter penalties give theirs; for an observable penalty
  /// the columns are its HVPs along every unit vector, from one batched pass over its bins only,
  /// symmetrized. Each times its column's penalty scale.
  void add_regularizer_hessians(ConstBlockView<double> x, BlockView<double> hess) {
    const index_t n = nparams_;
    for (index_t j = 0; j < x.cols && !regularizers_.empty(); ++j) {
      BlockView<double> hj = hess.block_cols(j * n, n);
      const ConstBlockView<double> xj = x.block_cols(j, 1);
      for (std::size_t k = 0; k < regularizers_.size(); ++k) {
        const Regularizer& r = *regularizers_[k];
        const double c = r.needs_observables() ? 1.0 : penalty_scale(k, j);  // the observables' HVPs carry their scale
        if (c == 1.0 && !r.needs_observables()) {
          r.add_hessian({xj.col(0), static_cast<std::size_t>(n)}, hj);
          continue;
        }
        Eigen::MatrixXd A = Eigen::MatrixXd::Zero(n, n);
        if (!r.needs_observables()) {
          r.add_hessian({xj.col(0), static_cast<std::size_t>(n)}, BlockView<double>(A.data(), n, n));
        } else {
          const Eigen::MatrixXd I = Eigen::MatrixXd::Identity(n, n);
          add_regularizers(k, k + 1, xj, {I.data(), n, n}, {}, {}, BlockView<double>(A.data(), n, n), j);
          A = (0.5 * (A + A.transpose())).eval();
        }
        for (index_t cc = 0; cc < n; ++cc)
          for (index_t rr = 0; rr < n; ++rr) hj(rr, cc) += c == 1.0 ? A(rr, cc) : c * A(rr, cc);
      }
    }
  }

  /// First global bin of shard k's data bins.
  index_t data_offset(std::size_t k) const { return std::min(shards_[k].bins().begin, model_->nbins()); }
  /// Shard k's rows of a `[nbins × cols]` per-bin matrix.
  ConstBlockView<double> data_rows(const Eigen::MatrixXd& a, index_t b0, std::size_t k) const {
    return {a.data() + b0, shards_[k].ndata(), a.cols(), a.rows()};
  }

  /// The covariance term's global step between the shards' forward and backward passes: gathers
  /// ν' and q (and their directional derivatives) of every data bin, then per column the value
  /// ½·rᵀ·y into f, y = (C + diag q)⁻¹·r, and per direction z = (C + diag q)⁻¹·(dν' − y·dq).
  void solve_coupled(ConstBlockView<double> x, ConstBlockView<double> v, std::span<double> f) {
    const index_t B = model_->nbins(), nx = x.cols, nv = v.empty() ? 0 : v.cols;
    nu_.resize(B, nx);
    q_.resize(B, nx);
    y_.resize(B, nx);
    dnu_.resize(B, nv);
    dq_.resize(B, nv);
    z_.resize(B, nv);
    for_each_shard([&](std::size_t k) {
      const index_t b0 = data_offset(k), nd = shards_[k].ndata();
      auto rows = [&](Eigen::MatrixXd& a) { return BlockView<double>(a.data() + b0, nd, a.cols(), B); };
      shards_[k].coupled_aggregates(x, v, rows(nu_), rows(q_), rows(dnu_), rows(dq_));
    });
    for (index_t j = 0; j < nx; ++j) {
      const double value = covariance_.solve(j, {nu_.col(j).data(), static_cast<std::size_t>(B)}, {q_.col(j).data(), static_cast<std::size_t>(B)},
                                             counts_of(j), y_.col(j).data());
      if (!f.empty()) f[static_cast<std::size_t>(j)] = value;
    }
    for (index_t k = 0; k < nv; ++k) {
      const index_t j = nx == 1 ? 0 : k;
      const Eigen::VectorXd t = dnu_.col(k) - y_.col(j).cwiseProduct(dq_.col(k));
      covariance_.apply(j, t.data(), z_.col(k).data());
    }
  }

  std::shared_ptr<const Model> model_;
  LikelihoodOptions opts_;
  index_t nparams_ = 0, npoi_ = 0;
  index_t bb_per_bin_ = 0;  ///< β entries per data bin, 0 without bin-by-bin statistics
  std::vector<std::string> names_;
  std::vector<double> theta0_;  ///< constraint centres, the model's unless replaced
  detail::GlobalTerms global_;
  exchange_type exchange_;
  std::vector<ShardT> shards_;
  std::vector<index_t> shards_of_rank_;  ///< every process's shard count, in rank order
  std::vector<BinRange> rank_bins_;      ///< every process's bins, in rank order
  index_t total_shards_ = 0;
  std::vector<double> local_, all_;      ///< this process's shards' partials; every shard's, gathered
  std::optional<executor_type> executor_;  ///< runs the shards' passes (the policy's; a copy of a pool gets threads of its own)
  std::vector<double> counts_, variances_;  ///< the observed counts and variances of set_data
  std::vector<ReplicaInputs> replicas_;
  std::vector<index_t> selected_;     ///< replica of each column (use_replicas), −1: the likelihood's own
  std::vector<index_t> column_slots_;  ///< the shards' data slot of each column of the current evaluation
  // The covariance term: its matrices and the per-bin workspaces of solve_coupled.
  CovarianceTerm<typename policy_type::dense_solver> covariance_;
  Eigen::MatrixXd nu_, q_, y_, dnu_, dq_, z_, rows_;
  std::vector<std::shared_ptr<Regularizer>> regularizers_;
};

/// The likelihood on one CPU thread with dense templates.
using SerialLikelihood = Likelihood<Shard<cpu::Serial, storage::Dense>>;

/// The likelihood on one CPU thread with sparse templates (rabbit's sparse tensors, §1.3).
using SparseSerialLikelihood = Likelihood<Shard<cpu::Serial, storage::Sparse>>;

/// The likelihood with its bins split over CPU threads (cpu::Threads{k}), dense or sparse templates.
using ThreadedLikelihood = Likelihood<Shard<cpu::Threads, storage::Dense>>;
using SparseThreadedLikelihood = Likelihood<Shard<cpu::Threads, storage::Sparse>>;

static_assert(objective_with_hessian<SerialLikelihood>);

}  // namespace fitlib
