// SPDX-License-Identifier: MIT
// fitlib-fit's runs: the fits the options ask for (Asimov, data, pseudodata, toys) and their postfit,
// on the likelihood the options call for. Instantiated once per template storage (runs_dense.cpp,
// runs_sparse.cpp), so that the program's two heaviest halves compile in parallel.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "blinding.hpp"
#include "command_line.hpp"
#include "fitlib/device/cores.hpp"
#include "fitlib/fit.hpp"
#include "fitlib/io/rabbit.hpp"
#include "fitlib/io/results.hpp"
#include "report.hpp"
#ifdef FITLIB_FIT_MPI  // built with MPI: `mpirun -n K fitlib-fit …` splits the bins over K ranks
#include "fitlib/device/mpi.hpp"
#endif

namespace fitlib::cli {

/// Progress of a long stage on stderr (also with -q, which silences per-iteration lines only): nothing for
/// a stage done within a second, then a line at most every 5 s with done/total, the time taken and the time
/// left, and a last line when a stage that spoke ends.
class StageProgress {
 public:
  using clock = std::chrono::steady_clock;
  /// `silent`: count without printing (MPI ranks other than 0).
  StageProgress(std::string what, index_t total, bool silent = false) : what_(std::move(what)), total_(total), silent_(silent) {}
  StageProgress(const StageProgress&) = delete;
  StageProgress& operator=(const StageProgress&) = delete;
  ~StageProgress() {
    if (spoke_) print("done in");
  }
  void advance(index_t n = 1) {
    done_ += n;
    const auto now = clock::now();
    if (!silent_ && now - start_ >= std::chrono::seconds(1) && (!spoke_ || now - last_ >= std::chrono::seconds(5))) {
      last_ = now;
      spoke_ = true;
      if (done_ < total_) print("running for");
    }
  }

 private:
  void print(const char* how) const {
    const double t = std::chrono::duration<double>(clock::now() - start_).count();
    std::fprintf(stderr, "fitlib-fit: %s: %td/%td %s %.1f s", what_.c_str(), done_, total_, how, t);
    if (done_ > 0 && done_ < total_) std::fprintf(stderr, ", about %.0f s left", t / static_cast<double>(done_) * static_cast<double>(total_ - done_));
    std::fprintf(stderr, "\n");
  }
  std::string what_;
  index_t total_, done_ = 0;
  clock::time_point start_ = clock::now(), last_ = start_;
  bool silent_, spoke_ = false;
};

/// Every fit of a run, and the summary of its toys if it has any.
struct Fits {
  std::vector<io::FitRecord> records;
  std::optional<io::ToySummary> toys;
};

/// This process's shards when the bins are split (--threads, mpirun): its --threads consecutive
/// parts of io::rabbit_partition over every thread of every rank, worked out by rank 0 alone (it
/// streams a sparse tensor's indices) and broadcast; empty for one shard. Sets --threads' default (0):
/// every core, as many as the bins allow, in one process; one thread per MPI rank.
std::vector<BinRange> own_shards(Args& a);
/// The tensor; with shards, everything but the systematic tensor, which each shard reads for its
/// own bins on its own thread, so the process holds one bin's rows beside them. Rank 0 alone
/// streams the file for its SHA-256.
io::RabbitTensor read_input(const Args& a, io::RabbitReadOptions ro, const std::vector<BinRange>& shards);
/// How the input is opened: the bound on what its datasets may declare (--maxCompressionRatio).
inline io::hdf5::FileOptions input_file_options(const Args& a) {
  io::hdf5::FileOptions fo;
  fo.max_compression_ratio = a.max_compression_ratio;
  return fo;
}
/// The record of a fit that threw instead of returning a status: status aborted, the message in `error`.
io::FitRecord failed_fit(const std::string& name, const std::string& error);
/// Toys minimised together for `--replicaBatch` (0 = automatic) and `toys` toys; never wider than
/// the toys, which would only leave places empty.
index_t replica_width(const Args& a, int toys);

/// What the options ask for after the fit in `rec` (full NLL, GoF, β̂, impacts, scans), with the
/// likelihood holding that fit's data (`counts`, `variances`) and constraint centres. Expects
/// rec.minimize_seconds set; sets the other timings.
template <class Lik, class Sub>
void postfit(io::FitRecord& rec, Lik& lik, const TrustRegion<Sub>& tr, const Args& a, std::span<const double> counts,
             std::span<const double> variances = {}) {
  const auto t1 = std::chrono::steady_clock::now();
  FitResult& r = rec.result;
  rec.nll_full = r.nll + nll_constant(lik.model(), lik.options(), counts, variances);
  rec.gof = saturated_gof(lik.model(), r);
  rec.bin_by_bin_per_bin = lik.bin_by_bin_per_bin();
  if (rec.bin_by_bin_per_bin > 0) rec.bin_by_bin = lik.bin_by_bin_parameters(r.x);
  std::vector<std::string> params;
  if (a.do_scan) {
    params = a.scan;
    if (params.empty())  // bare --scan: every free parameter, as rabbit's
      for (std::size_t i = 0; i < r.names.size(); ++i)
        if (!r.frozen[i]) params.push_back(r.names[i]);
  }
  // Toys report their progress as a whole (run_toys), not each toy's postfit.
  std::optional<StageProgress> progress;
  if (!is_toy(rec))
    progress.emplace("postfit of '" + rec.name + "' (impacts, scans)",
                     index_t{a.impacts} + index_t{a.global_impacts} + static_cast<index_t>(params.size() + a.scan2d.size()), a.rank > 0);
  auto advance = [&] {
    if (progress) progress->advance();
  };
  if (a.save_hists && !is_toy(rec)) {
    const HistogramOptions ho{.covariance = a.hist_cov, .variations = a.hist_variations, .chi2 = !a.no_chi2, .process_variances = a.hist_process_errors};
    rec.histograms = histograms(lik, r, ho);
    for (const auto& words : a.mappings) rec.mappings.push_back(mapped_histograms(lik, r, parse_mapping(lik.model(), words), ho));
  }
  if (a.impacts) rec.impacts = traditional_impacts(lik, r), advance();
  if (a.global_impacts) rec.global_impacts = global_impacts(lik, r), advance();
  // A scan needs a free parameter with a finite σ to set its range; without one (a failed covariance) the fit's
  // results are still written, without that scan.
  const auto scannable = [&](const std::string& p, const std::string& scan, const std::string& which) {
    const auto i = static_cast<std::size_t>(r.index(p));
    if (!r.frozen[i] && r.uncertainties[i] > 0 && std::isfinite(r.uncertainties[i])) return true;
    if (a.rank == 0)
      std::fprintf(stderr, "fitlib-fit: warning: fit '%s': no %s (%sfrozen, or its uncertainty is %g)\n", rec.name.c_str(), scan.c_str(),
                   which.c_str(), r.uncertainties[i]);
    return false;
  };
  for (const auto& p : params) {
    if (scannable(p, "scan of '" + p + "'", "")) rec.scans.push_back(profile_scan(lik, tr, r, p, scan_options(a)));
    advance();
  }
  for (const auto& [x, y] : a.scan2d) {
    const std::string what = "2D scan of '" + x + "' and '" + y + "'";
    if (scannable(x, what, "'" + x + "': ") && scannable(y, what, "'" + y + "': ")) {
      const ScanOptions so = scan_options(a);
      const index_t side = 2 * (so.points / 2) + 1;  // batch_scan's grid
      rec.scans2d.push_back(batch_scan(ReplicaBatch<>(replica_width(a, static_cast<int>(side * side))), lik, tr, r, {x, y}, so));
    }
    advance();
  }
  rec.postfit_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  rec.total_seconds = rec.minimize_seconds + rec.postfit_seconds;
}

/// Where a fit that could not start is not finite (bin, process, systematic, cause), on stderr. Every rank
/// calls it (it evaluates the likelihood); rank 0 speaks.
template <class Lik>
void explain_start(Lik& lik, const io::FitRecord& rec, const Args& a) {
  if (rec.result.status != FitStatus::not_finite && rec.result.status != FitStatus::not_finite_gradient) return;
  const std::string why = lik.explain_non_finite(rec.result.x0);
  if (a.rank == 0 && !why.empty()) std::fprintf(stderr, "fitlib-fit: fit '%s' cannot start: %s\n", rec.name.c_str(), why.c_str());
}

/// A covariance that failed or is not positive definite, said on stderr by rank 0 for a fit that is not
/// a toy (the toys' summary counts theirs), as rabbit warns: the uncertainties, impacts and scans stand
/// on it. Names the free parameters whose Hessian row is zero at the minimum, the usual cause (the
/// likelihood does not depend on them: an all-zero template). The exit status follows the fit's
/// status alone (command_line.cpp's footer).
inline void warn_covariance(const io::FitRecord& rec, const Args& a) {
  const FitResult& r = rec.result;
  if (a.rank > 0 || is_toy(rec) || !covariance_unusable(r.covariance_status)) return;
  const std::size_t n = r.x.size();
  std::string flat;
  std::size_t nflat = 0;
  if (r.hessian.size() == n * n)
    for (std::size_t i = 0; i < n; ++i) {
      bool zero = !r.frozen[i];
      for (std::size_t j = 0; j < n && zero; ++j) zero = r.frozen[j] || r.hessian[i + j * n] == 0;
      if (zero && ++nflat <= 5) flat += (flat.empty() ? "'" : ", '") + r.names[i] + "'";
    }
  if (nflat > 5) flat += " and " + std::to_string(nflat - 5) + " more";
  const std::string why = nflat == 0 ? "" : "; the Hessian's row is zero for " + flat + " (the likelihood does not depend on " +
                                                (nflat == 1 ? "it" : "them") + " at the minimum: an all-zero template?)";
  if (r.covariance_status == CovarianceStatus::failed)
    std::fprintf(stderr, "fitlib-fit: warning: fit '%s': the covariance failed (singular or non-finite Hessian at the minimum): its uncertainties "
                 "are NaN, and impacts and scans that need them are NaN or left out%s\n", rec.name.c_str(), why.c_str());
  else
    std::fprintf(stderr, "fitlib-fit: warning: fit '%s': the Hessian is not positive definite at the minimum: the covariance (from LDLT) "
                 "is not a valid covariance, nor its uncertainties%s\n", rec.name.c_str(), why.c_str());
}

/// One fit to the likelihood's current data, then its postfit.
template <class Lik, class Sub>
io::FitRecord fit_one(Lik& lik, const TrustRegion<Sub>& tr, const Args& a, const std::string& name, std::span<const double> counts,
                      std::span<const double> variances = {}) {
  const auto t0 = std::chrono::steady_clock::now();
  io::FitRecord rec;
  rec.name = name;
  const FitOptions fo = fit_options(a);
  ProgressPrinter progress(stderr, 1);
  if (a.quiet || is_toy(rec)) rec.result = fit(lik, tr, fo);  // toys: one progress line for all (run_toys)
  else {
    std::fprintf(stderr, "fitlib-fit: fit '%s'\n", name.c_str());
    rec.result = fit(lik, tr, fo, progress);
  }
  rec.minimize_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  explain_start(lik, rec, a);
  warn_covariance(rec, a);
  postfit(rec, lik, tr, a, counts, variances);
  return rec;
}

/// Toys 1..n as rabbit makes them (§5.5), fitted and postfitted into `out` as "toy<i>". With a
/// width above 1 the toys are minimised as batches of replicas pooling their evaluations (each toy
/// still the fit it is alone), in chunks of a few batches so that only a chunk's toys are held;
/// then each toy's postfit runs on its own, as in the sequential path.
template <class Lik, class Sub>
io::ToySummary run_toys(Lik& lik, const TrustRegion<Sub>& tr, const Args& a, int n, std::vector<io::FitRecord>& out) {
  const Model& m = lik.model();
  const ToyOptions to = toy_options(a);
  const std::vector<double> x_default = lik.default_parameters();
  const std::vector<index_t> targets = impact_targets(m);
  // Observed-mode toys scatter around the fit to the observed data, not around the default point:
  // that fit (with the toys' fit options, on every rank) is their pulls' reference (toy_truth). Only
  // its name is written (ToySummary::pull_reference), not its values, which a data fit reports blinded.
  std::vector<double> x_observed;
  if (pull_reference(to.data_mode) == PullReference::observed_fit) {
    lik.set_data(m.data, m.data_variance);
    FitOptions fo = fit_options(a);
    fo.covariance = false;  // its point is all that is needed
    const FitResult r = fit(lik, tr, fo);
    if (!r.converged() && a.rank == 0)
      std::fprintf(stderr, "fitlib-fit: warning: the fit to the observed data, which --toysDataMode observed toys are pulled against, "
                   "did not converge (%s)\n", r.status_text().c_str());
    x_observed = r.x;
  }
  std::vector<double> truth;
  // The truth: the generating point (the default parameters, with the nuisances a Bayesian toy moved; a
  // frequentist toy moves the centres θ₀ instead), or in observed mode the fit to the observed data.
  auto generate = [&](int i) {
    Toy toy = generate_toy(lik, a.seed, static_cast<std::uint64_t>(i), to);
    const std::vector<double> x = toy_truth(toy, to, x_default, x_observed);
    for (index_t t : targets) truth.push_back(x[static_cast<std::size_t>(t)]);
    return toy;
  };
  const std::size_t first = out.size();
  const index_t width = replica_width(a, n);
  double seconds = 0;
  std::optional<BatchStatistics> pooled;  // the batches' statistics, added (width > 1)
  StageProgress progress(std::to_string(n) + (width == 1 ? " toys fitted" : " toys minimised"), n, a.rank > 0);
  if (width == 1) {
    for (int i = 1; i <= n; ++i) {
      const Toy toy = generate(i);
      lik.set_data(toy.data);
      lik.set_constraint_centres(toy.constraints.theta0);
      const std::string name = "toy" + std::to_string(i);
      try {
        out.push_back(fit_one(lik, tr, a, name, toy.data));
      } catch (const fitlib::error& e) {  // kept as what it is, with every other toy
        out.push_back(failed_fit(name, e.what()));
        if (a.rank == 0) std::fprintf(stderr, "fitlib-fit: warning: fit '%s' failed: %s\n", name.c_str(), e.what());
      }
      lik.set_constraint_centres(m.theta0);
      seconds += out.back().minimize_seconds;
      progress.advance();
    }
  } else {
    const ReplicaBatch<> batch(width);
    const int chunk = static_cast<int>(8 * width);
    pooled.emplace();
    for (int begin = 1; begin <= n; begin += chunk) {
      const int end = std::min(n, begin + chunk - 1);
      std::vector<ReplicaInputs> inputs;
      for (int i = begin; i <= end; ++i) {
        Toy toy = generate(i);
        ReplicaInputs& in = inputs.emplace_back();
        in.data = std::move(toy.data);
        in.constraint_centres = std::move(toy.constraints.theta0);
      }
      lik.set_replicas(inputs);
      const std::vector<FitOptions> options(inputs.size(), fit_options(a));
      BatchResult b = batch.fit(lik, tr, std::span<const FitOptions>(options));
      lik.set_replicas({});
      progress.advance(static_cast<index_t>(inputs.size()));
      *pooled += b.statistics;
      seconds += b.statistics.seconds;
      for (std::size_t k = 0; k < inputs.size(); ++k) {
        const std::string name = "toy" + std::to_string(begin + static_cast<int>(k));
        io::FitRecord rec;
        rec.name = name;
        rec.error = std::move(b.replicas[k].error);
        rec.result = std::move(static_cast<FitResult&>(b.replicas[k]));
        // The batch's time shared evenly: the toys were minimised together, not one by one.
        rec.minimize_seconds = b.statistics.seconds / static_cast<double>(inputs.size());
        // A toy whose fit or postfit threw is kept as what it is (its error), with every other toy.
        if (rec.error.empty()) {
          lik.set_data(inputs[k].data);
          lik.set_constraint_centres(inputs[k].constraint_centres);
          try {
            explain_start(lik, rec, a);
            postfit(rec, lik, tr, a, inputs[k].data);
          } catch (const fitlib::error& e) {
            rec.error = std::string("postfit: ") + e.what();
          }
          lik.set_constraint_centres(m.theta0);
        }
        if (!rec.error.empty() && a.rank == 0) std::fprintf(stderr, "fitlib-fit: warning: fit '%s' failed: %s\n", name.c_str(), rec.error.c_str());
        out.push_back(std::move(rec));
      }
    }
  }
  // The summary: spreads of the fitted values and pulls over the converged toys, from the fields
  // they read (a toy's covariance and Hessian stay in its record).
  BatchResult all;
  for (std::size_t t = first; t < out.size(); ++t) {
    ReplicaFit& f = all.replicas.emplace_back();
    f.status = out[t].result.status;
    f.x = out[t].result.x;
    f.uncertainties = out[t].result.uncertainties;
  }
  io::ToySummary s;
  s.toys = n;
  s.pull_reference = std::string(to_string(pull_reference(to.data_mode)));
  s.converged = all.converged();
  const std::vector<std::string>& names = lik.parameter_names();
  for (std::size_t k = 0; k < targets.size(); ++k) {
    std::vector<double> truth_k;
    for (std::size_t t = 0; t < all.replicas.size(); ++t) truth_k.push_back(truth[t * targets.size() + k]);
    s.targets.push_back({names[static_cast<std::size_t>(targets[k])], all.parameter(targets[k]), all.pulls(targets[k], truth_k)});
  }
  s.width = width;
  s.seconds = seconds;
  s.batch = pooled;
  return s;
}

/// Asimov, data, pseudodata and toys, in rabbit's order (§4.1, §5.5).
template <class Lik, class Sub>
Fits run_fits(Lik& lik, const TrustRegion<Sub>& tr, const Args& a, const io::RabbitTensor& in) {
  const Model& m = lik.model();
  Fits fits;
  std::vector<io::FitRecord>& out = fits.records;
  const Blinding blinding = make_blinding(m, lik.parameter_names(), a);
  const std::vector<double> observed = m.data;
  const std::vector<double> variances = m.data_variance;
  // The Asimov data are checked before any fit runs.
  std::vector<double> asimov_data;
  if (std::find(a.toys.begin(), a.toys.end(), -1) != a.toys.end()) {
    asimov_data = asimov(lik, lik.default_parameters());
    for (index_t b = 0; b < m.nbins(); ++b)
      if (const double nu = asimov_data[static_cast<std::size_t>(b)]; !(nu >= 0))
        throw usage_error("the Asimov data (-t -1, the expectation at the default parameters) of " + m.describe_bin(b) + " is " +
                          std::to_string(nu) + "; a bin's total expectation must be ≥ 0 to be fitted as data (--allowNegativeExpectation "
                          "allows negative yields of single processes only)");
  }
  for (int t : a.toys) {
    if (t == -1) {
      lik.set_data(asimov_data);
      out.push_back(fit_one(lik, tr, a, "asimov", asimov_data));
    } else if (t == 0 && a.use_pseudodata) {
      const std::size_t npd = in.pseudodata_names.size(), nb = static_cast<std::size_t>(m.nbins());
      for (std::size_t c = 0; c < npd; ++c) {
        const std::string& pd = in.pseudodata_names[c];
        if (!a.pseudodata.empty() && std::find(a.pseudodata.begin(), a.pseudodata.end(), pd) == a.pseudodata.end()) continue;
        std::vector<double> counts(nb);
        for (std::size_t b = 0; b < nb; ++b) counts[b] = in.pseudodata[b * npd + c];
        lik.set_data(counts);
        out.push_back(fit_one(lik, tr, a, "pseudodata_" + pd, counts));
      }
    } else if (t == 0) {
      lik.set_data(observed, variances);
      out.push_back(fit_one(lik, tr, a, "data", observed, variances));
      blind(out.back(), blinding);
    } else {
      fits.toys = run_toys(lik, tr, a, t, out);
    }
  }
  lik.set_data(observed, variances);
  return fits;
}

/// run_fits with the minimizer --minimizerMethod names (trust-exact's on the policy's device where it has one:
/// exact_subproblem_for).
template <class Lik, class Policy>
Fits run_with_method(Lik& lik, const Policy& policy, const Args& a, const io::RabbitTensor& in) {
  return with_minimizer(
      a.method, minimizer_options(a), [&](ExactOptions o) { return exact_subproblem_for(policy, o); }, [&](const auto& tr) { return run_fits(lik, tr, a, in); });
}


/// Every fit the options ask for, on a likelihood of `Storage` templates whose shards (`shards`, or one) the
/// policy evaluates; each shard reads its own templates (`ro` for `shards`) on its own thread. Checks the scanned
/// and frozen names before any fit runs.
template <class Storage, class Policy>
Fits run_on(const Policy& policy, const Args& a, std::shared_ptr<const Model> model, const std::vector<BinRange>& shards,
            io::RabbitReadOptions ro, const LikelihoodOptions& lo, const io::RabbitTensor& in) {
  std::mutex hdf5;  // HDF5's serial build reads on one thread at a time
  const auto part = [&](BinRange bins) {
    const std::lock_guard lock(hdf5);
    ro.bins = bins;
    Model m = io::read_rabbit(io::hdf5::File::open(a.input, io::hdf5::Access::read_only, input_file_options(a)), ro).model;
    adjust_model(m, a);
    return std::make_shared<const Model>(std::move(m));
  };
  using Lik = Likelihood<Shard<Policy, Storage>>;
  Lik lik(model, shards, shards.empty() ? nullptr : typename Lik::TemplateSource(part), policy, lo);
  // Names are checked before any fit runs, so a typo never costs a fit.
  for (const auto& p : a.scan) (void)lik.parameter_index(p);
  for (const auto& [x, y] : a.scan2d) (void)lik.parameter_index(x), (void)lik.parameter_index(y);
  if (a.save_hists) require_histograms(lik);
  for (const auto& words : a.mappings) (void)parse_mapping(lik.model(), words);
  (void)frozen_mask(lik.parameter_names(), a.freeze);
  return run_with_method(lik, policy, a, in);
}

#ifdef FITLIB_FIT_CUDA
/// The devices --device cuda runs on into a.devices: --devices, or the --nDevices least occupied by memory in use
/// (NVML), checked against the devices this process sees, before anything is read; an error names the remedy.
void resolve_cuda_devices(Args& a);
/// run_on over cuda::Devices (runs_cuda.cu, compiled by nvcc): one shard per entry of a.devices, holding the
/// templates as the model stores them (dense, or sparse without densifying).
Fits run_cuda(const Args& a, std::shared_ptr<const Model> model, const std::vector<BinRange>& shards, io::RabbitReadOptions ro,
              const LikelihoodOptions& lo, const io::RabbitTensor& in);
#endif

/// Every fit the options ask for, on a likelihood of `Storage` templates: the bins split over
/// --threads shards evaluated concurrently and added in shard order (one thread: the serial
/// evaluation), under MPI over the ranks first; with --device cuda over the devices instead.
template <class Storage>
Fits run_all(const Args& a, std::shared_ptr<const Model> model, const std::vector<BinRange>& shards, io::RabbitReadOptions ro,
             const LikelihoodOptions& lo, const io::RabbitTensor& in) {
#ifdef FITLIB_FIT_CUDA
  if (a.device == "cuda") {
    return run_cuda(a, model, shards, ro, lo, in);
  }
#endif
#ifdef FITLIB_FIT_MPI
  if (a.ranks > 1) return run_on<Storage>(mpi::Ranks<cpu::Threads>{cpu::Threads{a.threads}}, a, model, shards, ro, lo, in);
#endif
  return run_on<Storage>(cpu::Threads{a.threads}, a, model, shards, ro, lo, in);
}

extern template Fits run_all<storage::Dense>(const Args&, std::shared_ptr<const Model>, const std::vector<BinRange>&, io::RabbitReadOptions,
                                             const LikelihoodOptions&, const io::RabbitTensor&);
extern template Fits run_all<storage::Sparse>(const Args&, std::shared_ptr<const Model>, const std::vector<BinRange>&, io::RabbitReadOptions,
                                              const LikelihoodOptions&, const io::RabbitTensor&);

}  // namespace fitlib::cli
