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
#include "fitlib/device/partials_exchange.hpp"
#include "fitlib/device/partition.hpp"
#include "fitlib/device/threads.hpp"
#include "fitlib/likelihood/bbstat.hpp"
#include "fitlib/likelihood/cell.hpp"
#include "fitlib/likelihood/covariance_term.hpp"
#include "fitlib/likelihood/global_terms.hpp"
#include "fitlib/likelihood/non_finite.hpp"
#include "fitlib/likelihood/options.hpp"
#include "fitlib/likelihood/penalties.hpp"
#include "fitlib/likelihood/regularizer.hpp"
#include "fitlib/likelihood/replica_inputs.hpp"
#include "fitlib/likelihood/replica_store.hpp"
#include "fitlib/likelihood/shard.hpp"
#include "fitlib/likelihood/shard_concept.hpp"
#include "fitlib/likelihood/shard_set.hpp"
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
///
/// It is a composition, each part in its own header: the shards, their executor and their
/// shard-order reduction (shard_set.hpp, with the exchange between processes,
/// partials_exchange.hpp); the replicas' inputs (replica_store.hpp); the terms of the parameters
/// alone (global_terms.hpp); the covariance term's coupled step (covariance_term.hpp); the
/// penalties (penalties.hpp). What stays here is the objective's interface and the order of a pass.
template <class ShardT>
class Likelihood {
  static_assert(check_shard<ShardT>());

 public:
  using shard_type = ShardT;
  using policy_type = typename ShardT::policy_type;
  using exchange_type = typename detail::ShardSet<ShardT>::exchange_type;

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
             LikelihoodOptions opts = {});

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
      detail::check_variances(*model_, model_->data_variance.empty() ? model_->data : model_->data_variance);
    if (distributed() && opts_.data_term == DataTerm::covariance)
      throw usage_error("the covariance data term couples every bin through C⁻¹, which no rank holds alone; fit it in one process "
                        "(cpu::Threads splits the bins over threads), or use DataTerm::chisq or poisson over MPI ranks");
    if (opts_.data_term == DataTerm::covariance)
      coupled_ = CoupledStep<typename policy_type::dense_solver>(*model_, BinByBinStats::build(*model_, {0, model_->nbins()}, opts_.bin_by_bin, opts_.data_term));
    counts_ = model_->data;
    variances_ = model_->data_variance.empty() ? model_->data : model_->data_variance;
    const BinByBinStats bb = BinByBinStats::build(*model_, {0, 0}, opts_.bin_by_bin, opts_.data_term);
    bb_per_bin_ = bb.enabled ? bb.per_bin() : 0;
    const index_t k = opts_.shards > 0 ? opts_.shards : policy.concurrency();
    if (given.empty() && part) throw usage_error("Likelihood: a template source needs the shard ranges it is to read");
    const std::vector<BinRange> ranges = given.empty() ? partition_bins(*model_, k, exchange().bins(*model_)) : check_shards(std::move(given), part);
    // Without a source the shards read the model's templates in place (a copy would double the
    // largest allocation).
    shards_.build(policy, ranges, opts_, [&](BinRange r) { return templates_of(r, part); });
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
  index_t total_shards() const { return shards_.exchange().total_shards(); }
  /// The processes the bins are spread over (1 unless mpi::Ranks), and this one's place among them.
  const exchange_type& exchange() const { return shards_.exchange().exchange(); }

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
    if (opts_.data_term == DataTerm::chisq) detail::check_variances(*model_, variances);
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
  /// The observed counts of the unmasked bins (the model's, or set_data's) and their variances (the counts
  /// themselves unless set_data or the model gave others), `[nbins]` each.
  const std::vector<double>& data() const { return counts_; }
  const std::vector<double>& data_variances() const { return variances_; }

  // ---- replicas: per-column inputs for batched evaluations ----------------------------------

  /// Gives the likelihood the inputs of `replicas.size()` replicas (see ReplicaInputs), replacing
  /// any before; validated here, each field naming the replica and the bin or systematic. The
  /// likelihood's own inputs (set_data, set_constraint_centres) stay as they are.
  void set_replicas(std::vector<ReplicaInputs> replicas) {
    detail::ReplicaStore::check(replicas, *model_, opts_, counts_, variances_, penalty_names());
    for (auto& s : shards_) s.clear_slots();
    for (std::size_t r = 0; r < replicas.size(); ++r) {
      const ReplicaInputs& in = replicas[r];
      if (in.data.empty()) continue;
      const std::span<const double> var = in.variances.empty() ? std::span<const double>(in.data) : std::span<const double>(in.variances);
      for (std::size_t k = 0; k < shards_.size(); ++k) {
        const auto b0 = static_cast<std::size_t>(shards_.data_offset(k)), nd = static_cast<std::size_t>(shards_[k].ndata());
        shards_[k].set_slot(static_cast<index_t>(r + 1), std::span(in.data).subspan(b0, nd), var.subspan(b0, nd),
                            in.bins.empty() ? std::span<const std::uint8_t>{} : std::span<const std::uint8_t>(in.bins).subspan(b0, nd));
      }
    }
    replicas_.replace(std::move(replicas));
  }
  index_t replica_count() const { return replicas_.count(); }
  const ReplicaInputs& replica(index_t r) const { return replicas_.at(r); }

  /// Sets replica r's factor on regularizer k (a hyperparameter, or a multiplier that grows on a
  /// schedule during a fit).
  void set_penalty_scale(index_t r, index_t k, double scale) { replicas_.set_penalty_scale(r, k, scale, penalty_names()); }
  /// The penalties added (add_regularizer), of both kinds, numbered in the order they were added:
  /// the order of ReplicaInputs::penalty_scales.
  index_t regularizer_count() const { return penalties_.count(); }
  std::string regularizer_name(index_t k) const {
    if (k < 0 || k >= regularizer_count())
      throw usage_error("regularizer " + std::to_string(k) + " does not exist; the likelihood has " + std::to_string(regularizer_count()));
    return penalties_.name(k);
  }
  /// The number of an observable penalty among the regularizers; throws usage_error unless it was added here.
  index_t regularizer_index(const ObservablePenalty& p) const {
    const index_t k = penalties_.index_of(p);
    if (k < 0) throw usage_error("regularizer '" + p.name() + "' was not added to this likelihood; add it with add_regularizer first");
    return k;
  }

  /// Column j of the following evaluations uses the inputs of replica `replicas[j]` (−1: the
  /// likelihood's own); empty: every column uses the likelihood's own. A selection must name one
  /// replica per column of x.
  void use_replicas(std::span<const index_t> replicas) { replicas_.select(replicas); }

  /// Adds a penalty on the parameters (regularizer.hpp) and binds it: it resolves its names.
  void add_regularizer(std::shared_ptr<ParameterPenalty> r) {
    if (!r) throw usage_error("add_regularizer needs a regularizer, got a null pointer");
    r->bind(names_);
    check_no_penalty_scales();
    penalties_.add(std::move(r));
  }

  /// Adds a penalty on the observables of a bin range (regularizer.hpp) and binds it: it gets the
  /// bin yields of its bins at the default parameters as its reference (rabbit's ν⁰, §3.6). Only
  /// the bins it reads pay for a second pass.
  void add_regularizer(std::shared_ptr<ObservablePenalty> r) {
    if (!r) throw usage_error("add_regularizer needs a regularizer, got a null pointer");
    if (distributed())
      throw usage_error("regularizer '" + r->name() + "' reads the yields of bins that other MPI ranks hold; add it to a likelihood in one "
                        "process (cpu::Threads splits the bins over threads), or penalise parameters only over MPI ranks");
    const BinRange br = r->bins();
    if (br.begin < 0 || br.end > model_->nbins_full() || br.begin >= br.end)
      throw usage_error("regularizer '" + r->name() + "' reads bins [" + std::to_string(br.begin) + ", " + std::to_string(br.end) +
                        "), outside the model's " + std::to_string(model_->nbins_full()) + " bins");
    const auto x0 = default_parameters();
    Eigen::MatrixXd o(br.size(), 1);
    shards_.observables(br, column(x0), {}, o, nullptr);
    r->bind(std::span<const double>(o.data(), static_cast<std::size_t>(o.size())));
    check_no_penalty_scales();
    penalties_.add(std::move(r));
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
    curvature(x, f, g, hess, Curvature::exact);
  }

  /// As hessian, or with Curvature::gauss_newton the data term's Gauss–Newton matrix (the shards'
  /// GEMMs over one row per bin; the covariance term's, the global terms' and the penalties' curvature
  /// exact); objective_with_gauss_newton. The host shards have it.
  void hessian(ConstBlockView<double> x, std::span<double> f, BlockView<double> g, BlockView<double> hess, Curvature kind)
    requires gauss_newton_shard<ShardT>
  {
    curvature(x, f, g, hess, kind);
  }

  /// The dense matrix alone (objective_with_bare_hessian): the shards' walk for the matrix without the
  /// walk for value and gradient, which the caller holds. Curvature::gauss_newton where the shards
  /// have it (else a usage_error).
  void hessian(ConstBlockView<double> x, BlockView<double> hess, Curvature kind) {
    if constexpr (!gauss_newton_shard<ShardT>) {
      if (kind == Curvature::gauss_newton)
        throw usage_error("this likelihood's shards have no Gauss–Newton matrix (the host shards have it); use Curvature::exact");
    }
    curvature(x, {}, {}, hess, kind);
  }

  /// The level below which differences of the NLL, and its EDM, are rounding (objective_with_rounding_floor):
  /// 1e3·eps²·Σ n_b over the observed counts. A yield ν carries a relative rounding of some tens of eps (the
  /// exponent's sum over systematics, the products, the sum over processes); a bin's term is flat at its
  /// minimum, so that rounding moves it by about n·δ², and the gradient's rounding gives an EDM of
  /// eps²·Σ ν at most (Cauchy–Schwarz over the bins). At f ≈ 0 (Asimov data, where every term vanishes)
  /// that, not eps·|f|, is what no step can resolve. Of the likelihood's own data, or with `replica` ≥ 0 of
  /// that replica's (set_replicas; its own where the replica leaves the data empty).
  double rounding_floor(index_t replica = -1) const {
    const bool own = replica < 0 || replica >= replicas_.count() || replicas_.all()[static_cast<std::size_t>(replica)].data.empty();
    double n = 0;
    for (double c : own ? counts_ : replicas_.all()[static_cast<std::size_t>(replica)].data) n += c;
    const double eps = std::numeric_limits<double>::epsilon();
    return 1e3 * eps * eps * n;
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
    const BinRange here = shards_.exchange().my_bins();
    const index_t P = model_->nprocs(), b0 = here.begin;
    std::vector<double> mine(static_cast<std::size_t>(here.size() * P));
    for (auto& s : shards_) {
      const BinRange r = s.bins();
      s.yields(xv, 0, std::span(mine).subspan(static_cast<std::size_t>((r.begin - b0) * P), static_cast<std::size_t>(r.size() * P)));
    }
    return shards_.exchange().gather_bins(mine, P, model_->nbins_full());
  }

  /// What a postfit histogram propagates: the summed yields of the bins `bins` (any, masked included) at x, `o`
  /// (`[bins.size()]`), and their derivatives along every parameter, `J` (`[bins.size() × n]` row-major), from the
  /// cells' effective template rows (no product with a block of directions). With `profiled` and bin-by-bin
  /// statistics (rabbit's postfit yields, §2.5), the data bins' yields carry β̂(x) and J its response, and `beta_var`
  /// gets the variance β's own uncertainty adds, cᵀ·G_ββ⁻¹·c with c = ∂ν̃/∂β (bbstat.hpp, beta_variance), so that with
  /// C the parameters' covariance (J·C·Jᵀ)_bb + beta_var_b is the variance of the joint fit of x and β; otherwise
  /// β is held at β₀ and `beta_var` is 0. Separable data terms with β profiled; in one process.
  void yield_jacobian(std::span<const double> x, BinRange bins, bool profiled, std::span<double> o, std::span<double> J, std::span<double> beta_var) {
    jacobian_rows(x, bins, profiled, JacobianRows::summed, o, J, beta_var);
  }

  /// yield_jacobian per process: the yields ν̃[b, p] of the bins `bins` (`o`, `[bins.size() × nprocs]` row-major, β̂
  /// applied as there), their derivatives `J` (`[bins.size() × nprocs × n]`, a row per bin and process) and β's own
  /// variance of each (`beta_var`, as `o`; bbstat.hpp, process_beta_variances), for rabbit's
  /// --computeHistErrorsPerProcess.
  void process_yield_jacobian(std::span<const double> x, BinRange bins, bool profiled, std::span<double> o, std::span<double> J,
                              std::span<double> beta_var) {
    jacobian_rows(x, bins, profiled, JacobianRows::processes, o, J, beta_var);
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
    const std::size_t last = shards_.size() - 1;
    const index_t first = shards_.data_offset(0);
    std::vector<double> beta(static_cast<std::size_t>((shards_.data_offset(last) + shards_[last].ndata() - first) * per));
    for (std::size_t k = 0; k < shards_.size(); ++k) {
      const index_t b0 = shards_.data_offset(k);
      shards_[k].bin_by_bin_parameters(
          xv, std::span(beta).subspan(static_cast<std::size_t>((b0 - first) * per), static_cast<std::size_t>(shards_[k].ndata() * per)),
          coupled ? shards_.data_rows(coupled_.y(), k) : ConstBlockView<double>{});
    }
    return shards_.exchange().gather_bins(beta, per, model_->nbins());
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
    shards_.exchange().template combine_ranks<double>(var, total, [](double a, double b) { return a + b; });  // each rank's sum, added in rank order
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
                                             : beta.subspan(static_cast<std::size_t>(shards_.data_offset(k) * per),
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
  /// yield_jacobian and process_yield_jacobian: `rows` rows per bin.
  void jacobian_rows(std::span<const double> x, BinRange bins, bool profiled, JacobianRows rows, std::span<double> o, std::span<double> J,
                     std::span<double> beta_var) {
    if (distributed())
      throw usage_error("the yields' derivatives read the templates of bins that other MPI ranks hold; compute them in one process "
                        "(cpu::Threads splits the bins over threads)");
    if (profiled && bin_by_bin_per_bin() > 0 && opts_.data_term == DataTerm::covariance)
      throw usage_error("postfit yields with bin-by-bin statistics need a separable data term (Poisson or χ²): the covariance term "
                        "marginalises β in closed form, with no β̂ per bin; disable LikelihoodOptions::bin_by_bin or use another data term");
    const std::string what = rows == JacobianRows::processes ? "process_yield_jacobian" : "yield_jacobian";
    if (bins.begin < 0 || bins.end > model_->nbins_full() || bins.begin >= bins.end)
      throw usage_error(what + " of bins [" + std::to_string(bins.begin) + ", " + std::to_string(bins.end) + "), outside the model's " +
                        std::to_string(model_->nbins_full()) + " bins");
    const index_t per = rows == JacobianRows::processes ? model_->nprocs() : 1;
    const auto nr = static_cast<std::size_t>(bins.size() * per), n = static_cast<std::size_t>(nparams_);
    if (o.size() != nr || beta_var.size() != nr || J.size() != nr * n)
      throw usage_error(what + " of " + std::to_string(bins.size()) + " bins needs outputs of " + std::to_string(nr) + ", " + std::to_string(nr) +
                        " × " + std::to_string(n) + " and " + std::to_string(nr) + " entries");
    const auto xv = column(x);
    shards_.for_each([&](std::size_t k) {  // each shard writes its own rows
      auto& s = shards_[k];
      const BinRange held = s.bins(), both{std::max(held.begin, bins.begin), std::min(held.end, bins.end)};
      if (both.begin >= both.end) return;
      const auto at = static_cast<std::size_t>((both.begin - bins.begin) * per), len = static_cast<std::size_t>(both.size() * per);
      s.jacobian(xv, {both.begin - held.begin, both.end - held.begin}, profiled, rows, o.subspan(at, len), J.subspan(at * n, len * n),
                 beta_var.subspan(at, len));
    });
  }

  /// Each column's constraint centres, for the global terms.
  auto theta0s() const {
    return [this](index_t j) -> const std::vector<double>& { return replicas_.theta0_of(j, theta0_); };
  }
  /// Each penalty's factor in each column, for the penalties.
  auto penalty_scales() const {
    return [this](std::size_t k, index_t j) { return replicas_.penalty_scale(k, j); };
  }
  std::vector<std::string> penalty_names() const {
    std::vector<std::string> out;
    for (index_t k = 0; k < penalties_.count(); ++k) out.push_back(penalties_.name(k));
    return out;
  }
  void check_no_penalty_scales() const {
    for (const auto& in : replicas_.all())
      if (!in.penalty_scales.empty())
        throw usage_error("add_regularizer: the replicas' penalty_scales were set for " + std::to_string(penalties_.count()) +
                          " regularizers; add regularizers before set_replicas");
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

  bool distributed() const { return shards_.exchange().distributed(); }

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
        m->symmetric != model_->symmetric || m->templates.index() != model_->templates.index())
      throw usage_error("the template source gave shard [" + std::to_string(bins.begin) + ", " + std::to_string(bins.end) +
                        ") a model of another shape than the likelihood's (bins, processes, systematics, layout); read both from the same tensor");
    m->validate();
    return m;
  }

  /// hessian's work: the shards' data-term matrices of `kind` summed in shard order, then the exact
  /// curvature of the covariance term, the global terms and the penalties. The Gauss–Newton matrix
  /// takes the positive part of the interpolation's diagonal term of the sum over all shards (the
  /// shards send it after their matrices), so that it does not depend on the shard count. With f and
  /// g both empty only the covariance term's solve runs before (the shards' matrices need no other
  /// state of an evaluation at x).
  void curvature(ConstBlockView<double> x, std::span<double> f, BlockView<double> g, BlockView<double> hess, Curvature kind) {
    const index_t n = nparams_, nx = x.cols;
    const bool gauss_newton = kind == Curvature::gauss_newton;
    const index_t S = model_->nsyst(), tail = gauss_newton ? S : 0;
    std::vector<double> interpolation(static_cast<std::size_t>(tail));
    require(x.rows == n && nx >= 1, "parameter block", n, nx, x);
    require(hess.rows == n && hess.cols == n * nx, "hessian output", n, n * nx, hess);
    const bool coupled = opts_.data_term == DataTerm::covariance;
    if (!f.empty() || !g.empty() || coupled) evaluate(x, {}, f, g, {});
    Eigen::MatrixXd* rows = coupled ? &coupled_.rows(n) : nullptr;
    const std::span<const index_t> slots = replicas_.slots(nx);
    const std::uint64_t mark = shards_.exchange().inputs_mark(x, {});
    for (index_t j = 0; j < nx; ++j) {
      BlockView<double> hj = hess.block_cols(j * n, n);
      shards_.reduce(
          n * n + tail, mark,
          [&](std::size_t k, double* row) {
            const ConstBlockView<double> y = coupled ? shards_.data_rows(coupled_.y(), k) : ConstBlockView<double>{};
            const BlockView<double> r = coupled ? shards_.data_rows(*rows, k) : BlockView<double>{};
            const index_t slot = slots.empty() ? 0 : slots[static_cast<std::size_t>(j)];
            const BlockView<double> h(row, n, n);
            if (!gauss_newton)
              shards_[k].hessian(x, j, h, y, r, slot);
            else if constexpr (gauss_newton_shard<ShardT>)
              shards_[k].hessian(x, j, h, y, r, slot, kind, std::span<double>(row + n * n, static_cast<std::size_t>(S)));
          },
          [&](const double* row, index_t k) {
            put(hj, ConstBlockView<double>(row, n, n), k == 0);
            for (index_t s = 0; s < tail; ++s) interpolation[static_cast<std::size_t>(s)] = (k == 0 ? 0.0 : interpolation[static_cast<std::size_t>(s)]) + row[n * n + s];
          });
      for (index_t s = 0; s < tail; ++s) hj(npoi_ + s, npoi_ + s) += std::max(interpolation[static_cast<std::size_t>(s)], 0.0);
      if (coupled) coupled_.add_curvature(j, hj);
    }
    global_.add(*model_, x, {}, {}, {}, {}, hess, theta0s());
    penalties_.add_hessians(shards_, x, hess, penalty_scales());
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
    const std::span<const index_t> slots = replicas_.slots(nx);
    if (coupled) solve_coupled(x, v, f);
    // The coupled term's value comes from solve_coupled: its backward pass only serves derivatives.
    const bool backward = !coupled || !g.empty() || nv > 0;
    // Each shard's partials are one row, [values | gradients | HVPs], added in shard order.
    if (backward) {
      const index_t at_g = f.empty() || coupled ? 0 : nx, at_hv = at_g + (g.empty() ? 0 : n * nx), len = at_hv + n * nv;
      shards_.reduce(
          len, shards_.exchange().inputs_mark(x, v),
          [&](std::size_t k, double* row) {
            PartialRequest rq;
            rq.x = x;
            rq.v = v;
            rq.slots = slots;
            if (coupled) {
              rq.coupled_y = shards_.data_rows(coupled_.y(), k);
              if (nv > 0) rq.coupled_z = shards_.data_rows(coupled_.z(), k);
            }
            if (at_g > 0) rq.nll = row;
            if (!g.empty()) rq.grad = BlockView<double>(row + at_g, n, nx);
            if (nv > 0) rq.hvp = BlockView<double>(row + at_hv, n, nv);
            shards_[k].partials(rq);
          },
          [&](const double* row, index_t k) {
            if (at_g > 0) put(BlockView<double>(f.data(), 1, nx), ConstBlockView<double>(row, 1, nx), k == 0);
            if (!g.empty()) put(g, ConstBlockView<double>(row + at_g, n, nx), k == 0);
            if (nv > 0) put(hv, ConstBlockView<double>(row + at_hv, n, nv), k == 0);
          });
    }
    global_.add(*model_, x, v, f, g, hv, {}, theta0s());
    penalties_.add_terms(shards_, x, v, f, g, hv, penalty_scales());
  }

  /// The covariance term's step between the shards' forward and backward passes (CoupledStep::solve).
  void solve_coupled(ConstBlockView<double> x, ConstBlockView<double> v, std::span<double> f) {
    coupled_.solve(shards_, x, v, f, [this](index_t j) -> std::span<const double> { return replicas_.counts_of(j, counts_); });
  }

  std::shared_ptr<const Model> model_;
  LikelihoodOptions opts_;
  index_t nparams_ = 0, npoi_ = 0;
  index_t bb_per_bin_ = 0;  ///< β entries per data bin, 0 without bin-by-bin statistics
  std::vector<std::string> names_;
  std::vector<double> theta0_;              ///< constraint centres, the model's unless replaced
  std::vector<double> counts_, variances_;  ///< the observed counts and variances of set_data
  detail::ShardSet<ShardT> shards_;
  detail::GlobalTerms global_;
  detail::ReplicaStore replicas_;
  CoupledStep<typename policy_type::dense_solver> coupled_;  ///< the covariance term (DataTerm::covariance)
  detail::Penalties penalties_;
};

// Defined out of the class, so that fitlib::prebuilt holds it for its likelihoods (prebuilt.hpp).
template <class ShardT>
Likelihood<ShardT>::Likelihood(std::shared_ptr<const Model> model, std::vector<BinRange> shards, TemplateSource part, policy_type policy,
                               LikelihoodOptions opts)
    : model_(std::move(model)), opts_(opts), shards_(policy, model_ ? model_->nbins() : 0) {
  // Over MPI ranks a rank whose part fails (bad rows in its slice, too few bins for its shards)
  // must not leave the others waiting in the first gather: every rank learns of it there.
  std::exception_ptr failed;
  try {
    build(policy, std::move(shards), part);
  } catch (...) {
    failed = std::current_exception();
  }
  shards_.exchange().gather_layout(static_cast<index_t>(shards_.size()),
                                   failed ? BinRange{} : BinRange{shards_[0].bins().begin, shards_[shards_.size() - 1].bins().end},
                                   model_ ? model_->nbins_full() : 0, failed);
  // Shards whose models hold part of the tensor check together what none can see alone.
  if (std::any_of(shards_.begin(), shards_.end(), [](const ShardT& s) { return s.model().held().has_value(); })) {
    std::vector<index_t> mine(static_cast<std::size_t>(model_->nsyst()), 0), varied(mine.size());
    for (const ShardT& s : shards_) {
      const std::vector<index_t> v = s.model().varied_systematics();
      for (std::size_t i = 0; i < v.size(); ++i) mine[i] |= v[i];
    }
    shards_.exchange().template combine_ranks<index_t>(mine, varied, [](index_t a, index_t b) { return a | b; });
    model_->require_determined(varied);
  }
}

/// The likelihood on one CPU thread with dense templates.
using SerialLikelihood = Likelihood<Shard<cpu::Serial, storage::Dense>>;

/// The likelihood on one CPU thread with sparse templates (rabbit's sparse tensors, §1.3).
using SparseSerialLikelihood = Likelihood<Shard<cpu::Serial, storage::Sparse>>;

/// The likelihood with its bins split over CPU threads (cpu::Threads{k}), dense or sparse templates.
using ThreadedLikelihood = Likelihood<Shard<cpu::Threads, storage::Dense>>;
using SparseThreadedLikelihood = Likelihood<Shard<cpu::Threads, storage::Sparse>>;

static_assert(objective_with_hessian<SerialLikelihood>);
static_assert(objective_with_gauss_newton<SerialLikelihood> && objective_with_gauss_newton<SparseThreadedLikelihood>);
static_assert(objective_with_bare_hessian<SerialLikelihood>);

}  // namespace fitlib
