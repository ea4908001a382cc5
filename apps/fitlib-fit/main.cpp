// SPDX-License-Identifier: MIT
// fitlib-fit: fits a rabbit input tensor (rabbit-likelihood-and-format.md §1) and writes the results
// as HDF5 (docs/results-format.md) and, with --json, a JSON summary. Options follow rabbit_fit.py's
// (§6) where rabbit has them.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <regex>
#include <span>
#include <string>
#include <vector>

#include "fitlib/fit.hpp"
#include "fitlib/io/rabbit.hpp"
#include "fitlib/io/output_file.hpp"
#include "fitlib/io/results.hpp"
#include "fitlib/io/sha256.hpp"
#ifdef FITLIB_FIT_MPI  // built with MPI: `mpirun -n K fitlib-fit …` splits the bins over K ranks
#include "fitlib/device/mpi.hpp"
#endif

using namespace fitlib;

namespace {

/// Everything the command line sets.
struct Args {
  std::string input, output = "fitresults.hdf5";
  std::string plugin_path;  ///< --hdf5PluginPath
  bool json = false, quiet = false;
  std::vector<int> toys = {-1};
  std::string seed_text = "123456789";  ///< as given; `seed` once checked
  std::uint64_t seed = 123456789;
  std::string toys_syst = "frequentist", toys_data = "poisson", toys_data_mode = "expected";
  int replica_batch = 0;
  std::vector<std::string> pseudodata;
  bool use_pseudodata = false;
  std::string method = "trust-krylov", preconditioning = "none";
  double gtol = 0, edm_tol = 1e-12;
  index_t maxiter = 0;
  bool no_bbb = false;
  std::string bbb_type = "automatic", bbb_mode = "lite", bbb_zero_variance = "exclude";
  double min_kstat = 0;
  bool chisq = false, covariance = false, allow_negative_poi = false, allow_negative_expectation = false;
  std::string systematic_type;  ///< empty: the tensor's meta says (log_normal without one)
  std::vector<std::pair<std::string, double>> expect_signal, constraint_minimum;
  std::vector<std::string> freeze;
  bool impacts = false, global_impacts = false, no_hessian = false;
  std::vector<std::string> scan;
  bool do_scan = false;
  index_t scan_points = 15;
  double scan_range = 3;
  std::vector<std::string> unblind;
  bool unblind_all = false;
  int threads = 1;
  index_t rank = 0, ranks = 1;  ///< this process's MPI rank and the number of ranks (1 without mpirun)
};

/// --seed as given: a decimal number 0 … 2⁶⁴−1 (CLI11 would wrap -1 and saturate larger ones, so that
/// two different seeds gave the same toys).
std::uint64_t parse_seed(const std::string& text) {
  std::uint64_t v = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (text.empty() || ec != std::errc() || ptr != end)
    throw usage_error("--seed '" + text + "' is not a whole number from 0 to 18446744073709551615 (2⁶⁴−1)");
  return v;
}

/// The JSON summary beside the results file (--json).
std::string json_path(const Args& a) { return std::filesystem::path(a.output).replace_extension(".json").string(); }

/// Whether a fit is one of the toys (named toy<i>), which stdout summarises as a table, not one by one.
bool is_toy(const io::FitRecord& f) { return f.name.rfind("toy", 0) == 0; }

/// Where HDF5 looks for filter plugins (Blosc2 for real rabbit tensors), first to last: --hdf5PluginPath,
/// $FITLIB_HDF5_PLUGIN_PATH (':'-separated), the plugins scripts/install-deps.sh put in .deps/, HDF5's own
/// path (HDF5_PLUGIN_PATH or its default) and, if Blosc2 is still missing, the directory of an importable
/// Python `hdf5plugin`. Set through HDF5's API, so that no variable has to be exported into the shell,
/// where it would also redirect h5py (and break hdf5plugin's writes in rabbit's TensorWriter).
void find_filter_plugins(const std::string& option, index_t ranks) {
  std::vector<std::string> dirs;
  auto add = [&](const std::string& list) {
    for (std::size_t b = 0; b <= list.size();) {
      const std::size_t e = std::min(list.find(':', b), list.size());
      if (e > b) dirs.push_back(list.substr(b, e - b));
      b = e + 1;
    }
  };
  add(option);
  if (const char* env = std::getenv("FITLIB_HDF5_PLUGIN_PATH")) add(env);
#ifdef FITLIB_HDF5_PLUGIN_DIR
  if (std::filesystem::is_directory(FITLIB_HDF5_PLUGIN_DIR)) dirs.emplace_back(FITLIB_HDF5_PLUGIN_DIR);
#endif
  for (auto& d : io::hdf5::plugin_search_path()) dirs.push_back(std::move(d));
  io::hdf5::set_plugin_search_path(dirs);
  // Python is asked in a single process only (no fork under MPI), and only when Blosc2 or rabbit's Blosc (meta) is missing.
  if (ranks > 1 || (io::hdf5::filter_available(32026) && io::hdf5::filter_available(32001))) return;
  std::FILE* py = popen("python3 -c 'import hdf5plugin, sys; sys.stdout.write(hdf5plugin.PLUGINS_PATH)' 2>/dev/null", "r");
  if (py == nullptr) return;
  std::string dir;
  for (char buf[512]; const std::size_t n = std::fread(buf, 1, sizeof buf, py);) dir.append(buf, n);
  if (pclose(py) == 0 && std::filesystem::is_directory(dir)) {
    dirs.push_back(dir);
    io::hdf5::set_plugin_search_path(dirs);
  }
}

template <class E>
E choose(const std::string& option, const std::string& value, const std::map<std::string, E>& choices) {
  const auto it = choices.find(value);
  if (it != choices.end()) return it->second;
  std::string allowed;
  for (const auto& [k, v] : choices) allowed += (allowed.empty() ? "" : ", ") + k;
  throw usage_error(option + " '" + value + "' is not one of: " + allowed);
}

LikelihoodOptions likelihood_options(const Args& a) {
  LikelihoodOptions o;
  if (a.chisq && a.covariance) throw usage_error("--chisqFit and --covarianceFit exclude each other; choose one data term");
  o.data_term = a.chisq ? DataTerm::chisq : a.covariance ? DataTerm::covariance : DataTerm::poisson;
  o.allow_negative_poi = a.allow_negative_poi;
  o.shards = a.threads;  // one shard per thread
  o.bin_by_bin.enabled = !a.no_bbb;
  o.bin_by_bin.mode = choose<BinByBinMode>("--binByBinStatMode", a.bbb_mode, {{"lite", BinByBinMode::lite}, {"full", BinByBinMode::full}});
  o.bin_by_bin.type = choose<BinByBinType>("--binByBinStatType", a.bbb_type,
                                           {{"automatic", BinByBinType::automatic},
                                            {"gamma", BinByBinType::gamma},
                                            {"normal-multiplicative", BinByBinType::normal_multiplicative},
                                            {"normal-additive", BinByBinType::normal_additive}});
  o.bin_by_bin.min_kstat = a.min_kstat;
  o.bin_by_bin.zero_variance = choose<ZeroVarianceProcesses>("--binByBinStatZeroVariance", a.bbb_zero_variance,
                                                             {{"exclude", ZeroVarianceProcesses::exclude}, {"scale", ZeroVarianceProcesses::scale}});
  o.validate();
  return o;
}

ToyOptions toy_options(const Args& a) {
  ToyOptions t;
  t.constraints = choose<ConstraintRandomization>(
      "--toysSystRandomize", a.toys_syst,
      {{"frequentist", ConstraintRandomization::frequentist}, {"bayesian", ConstraintRandomization::bayesian}, {"none", ConstraintRandomization::none}});
  t.data = choose<DataRandomization>("--toysDataRandomize", a.toys_data,
                                     {{"poisson", DataRandomization::poisson}, {"normal", DataRandomization::normal}, {"none", DataRandomization::none}});
  t.data_mode = choose<ToyDataMode>("--toysDataMode", a.toys_data_mode, {{"expected", ToyDataMode::expected}, {"observed", ToyDataMode::observed}});
  return t;
}

/// Applies --expectSignal and --setConstraintMinimum to the model, naming unknown parameters.
void adjust_model(Model& m, const Args& a) {
  for (const auto& [name, value] : a.expect_signal) {
    index_t q = 0;
    bool found = false;
    for (const auto& p : m.processes) {
      if (!p.signal) continue;
      if (p.name == name) {
        m.poi_default[static_cast<std::size_t>(q)] = value;
        found = true;
      }
      ++q;
    }
    if (!found) throw usage_error("--expectSignal names '" + name + "', which is not a signal process (POI) of the tensor");
  }
  for (const auto& [name, value] : a.constraint_minimum) {
    const auto it = std::find_if(m.systematics.begin(), m.systematics.end(), [&](const Systematic& s) { return s.name == name; });
    if (it == m.systematics.end()) throw usage_error("--setConstraintMinimum names '" + name + "', which is not a systematic of the tensor");
    m.theta0[static_cast<std::size_t>(it - m.systematics.begin())] = value;
  }
}

// ---- blinding ---------------------------------------------------------------------------------

/// Blinded reporting (on by default for fits to observed data): POI q is reported as x·e^{ξ_q}
/// (√μ·e^{ξ} for squared POIs, i.e. μ·e^{2ξ}) and NOI s as θ + 5·ξ_s, ξ ~ N(0, 1) drawn from a
/// stream seeded by the SHA-256 of the parameter's name: deterministic, the same in every run.
/// The fit itself is unchanged (the map is a fixed change of variables), so blinded and unblinded
/// results differ only in these coordinates and --unblind shows the same fit.
struct Blinding {
  std::vector<double> scale, shift;  // reported = scale·x + shift
  std::vector<std::string> names;
};

Blinding make_blinding(const Model& m, const std::vector<std::string>& names, const Args& a) {
  Blinding b;
  const auto n = names.size();
  b.scale.assign(n, 1.0);
  b.shift.assign(n, 0.0);
  if (a.unblind_all) return b;
  // As --freezeParameters: an exact name, or else a regular expression (one that is not valid must be a name).
  std::vector<std::optional<std::regex>> keep;
  for (const auto& u : a.unblind) {
    const bool is_name = std::find(names.begin(), names.end(), u) != names.end();
    try {
      keep.emplace_back(std::regex(u));
    } catch (const std::regex_error&) {
      if (!is_name) throw usage_error("--unblind '" + u + "' is neither a parameter of the tensor nor a valid regular expression");
      keep.emplace_back();
    }
  }
  auto unblinded = [&](const std::string& name) {
    for (std::size_t k = 0; k < keep.size(); ++k)
      if (name == a.unblind[k] || (keep[k] && std::regex_match(name, *keep[k]))) return true;
    return false;
  };
  auto xi = [](const std::string& name) {
    io::Sha256 h;
    h.update(std::string_view(name));
    const auto d = h.digest();
    std::uint64_t seed = 0;
    for (int i = 0; i < 8; ++i) seed = seed << 8 | d[static_cast<std::size_t>(i)];
    return RandomStream(seed, 0, static_cast<Stream>(static_cast<std::uint32_t>(Stream::user) + 1)).normal();
  };
  for (index_t q = 0; q < m.npoi(); ++q) {
    const auto& name = names[static_cast<std::size_t>(q)];
    if (unblinded(name)) continue;
    b.scale[static_cast<std::size_t>(q)] = std::exp(xi(name));
    b.names.push_back(name);
  }
  for (index_t s : m.nois) {
    const auto i = static_cast<std::size_t>(m.npoi() + s);
    if (unblinded(names[i])) continue;
    b.shift[i] = 5 * xi(names[i]);
    b.names.push_back(names[i]);
  }
  return b;
}

void blind(io::FitRecord& f, const Blinding& b) {
  if (b.names.empty()) return;
  FitResult& r = f.result;
  const std::size_t n = r.x.size();
  for (std::size_t i = 0; i < n; ++i) {
    r.x[i] = b.scale[i] * r.x[i] + b.shift[i];
    r.x0[i] = b.scale[i] * r.x0[i] + b.shift[i];
    r.uncertainties[i] *= b.scale[i];
    r.gradient[i] /= b.scale[i];
  }
  for (std::size_t j = 0; j < n && r.covariance.size() == n * n; ++j)
    for (std::size_t i = 0; i < n; ++i) r.covariance[i + j * n] *= b.scale[i] * b.scale[j];
  for (std::size_t j = 0; j < n && r.hessian.size() == n * n; ++j)
    for (std::size_t i = 0; i < n; ++i) r.hessian[i + j * n] /= b.scale[i] * b.scale[j];
  for (auto* imp : {f.impacts ? &*f.impacts : nullptr, f.global_impacts ? &*f.global_impacts : nullptr}) {
    if (!imp) continue;
    for (std::size_t t = 0; t < imp->targets.size(); ++t) {
      const double s = b.scale[static_cast<std::size_t>(imp->target_index[t])];
      for (std::size_t k = 0; k < imp->sources.size(); ++k) imp->values[t * imp->sources.size() + k] *= s;
      for (std::size_t g = 0; g < imp->groups.size(); ++g) imp->grouped[t * imp->groups.size() + g] *= s;
    }
  }
  for (Scan& s : f.scans) {
    const auto i = static_cast<std::size_t>(r.index(s.parameter));
    for (double& v : s.values) v = b.scale[i] * v + b.shift[i];
  }
  f.blinded = b.names;
}

// ---- the fits ---------------------------------------------------------------------------------

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

/// The options of every fit of the run; toys fitted in batches use them too, so that a batched toy
/// is the same fit as a toy fitted alone.
FitOptions fit_options(const Args& a) {
  FitOptions fo;
  fo.frozen = a.freeze;
  fo.covariance = !a.no_hessian;
  fo.preconditioning = choose<Preconditioning>("--preconditioning", a.preconditioning,
                                               {{"none", Preconditioning::none}, {"diagonal", Preconditioning::diagonal}, {"cholesky", Preconditioning::cholesky}});
  return fo;
}

/// The scans' options, checked before any fit.
ScanOptions scan_options(const Args& a) {
  ScanOptions so;
  so.points = a.scan_points;
  so.range = a.scan_range;
  so.validate();
  return so;
}

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
    if (params.empty())
      for (index_t t : impact_targets(lik.model()))
        if (!r.frozen[static_cast<std::size_t>(t)]) params.push_back(r.names[static_cast<std::size_t>(t)]);
  }
  // Toys report their progress as a whole (run_toys), not each toy's postfit.
  std::optional<StageProgress> progress;
  if (!is_toy(rec))
    progress.emplace("postfit of '" + rec.name + "' (impacts, scans)", index_t{a.impacts} + index_t{a.global_impacts} + static_cast<index_t>(params.size()),
                     a.rank > 0);
  auto advance = [&] {
    if (progress) progress->advance();
  };
  if (a.impacts) rec.impacts = traditional_impacts(lik, r), advance();
  if (a.global_impacts) rec.global_impacts = global_impacts(lik, r), advance();
  for (const auto& p : params) {
    // A scan needs a finite σ to set its range; without one (a failed covariance) the fit's results
    // are still written, without that scan.
    const double sigma = r.uncertainties[static_cast<std::size_t>(r.index(p))];
    if (r.frozen[static_cast<std::size_t>(r.index(p))] || !(sigma > 0) || !std::isfinite(sigma))
      std::fprintf(stderr, "fitlib-fit: warning: fit '%s': no scan of '%s' (frozen, or its uncertainty is %g)\n", rec.name.c_str(), p.c_str(), sigma);
    else
      rec.scans.push_back(profile_scan(lik, tr, r, p, scan_options(a)));
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

/// The record of a fit that threw instead of returning a status: status aborted, the message in `error`.
io::FitRecord failed_fit(const std::string& name, const std::string& error) {
  io::FitRecord rec;
  rec.name = name;
  rec.error = error;
  rec.result.status = FitStatus::aborted;
  return rec;
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
  postfit(rec, lik, tr, a, counts, variances);
  return rec;
}

// ---- toys -------------------------------------------------------------------------------------

/// Toys minimised together for `--replicaBatch` (0 = automatic) and `toys` toys; never wider than
/// the toys, which would only leave places empty.
index_t replica_width(const Args& a, int toys) {
  const int b = a.replica_batch == 0 ? 64 : a.replica_batch;
  return std::max<index_t>(1, std::min<index_t>(b, toys));
}

/// Pulls (x̂ − truth)/σ̂ and fitted values of the POIs and NOIs over the converged toys `fits`;
/// `truth` holds each toy's generating values of those targets, toy after toy.
io::ToySummary summarize_toys(const Model& m, const std::vector<std::string>& names, std::span<const io::FitRecord> fits,
                              const std::vector<double>& truth) {
  const std::vector<index_t> targets = impact_targets(m);
  io::ToySummary s;
  s.toys = static_cast<index_t>(fits.size());
  for (const auto& f : fits) s.converged += f.result.converged();
  for (std::size_t k = 0; k < targets.size(); ++k) {
    const auto i = static_cast<std::size_t>(targets[k]);
    std::vector<double> values, pulls;
    for (std::size_t t = 0; t < fits.size(); ++t) {
      const FitResult& r = fits[t].result;
      if (!r.converged()) continue;
      values.push_back(r.x[i]);
      pulls.push_back((r.x[i] - truth[t * targets.size() + k]) / r.uncertainties[i]);
    }
    s.targets.push_back({names[i], spread(values), spread(pulls)});
  }
  return s;
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
  std::vector<double> truth;
  // The generating point: the default parameters, with the nuisances a Bayesian toy moved (a
  // frequentist toy moves the centres θ₀ instead, so its nuisances' truth stays the model's θ₀).
  auto generate = [&](int i) {
    Toy toy = generate_toy(lik, a.seed, static_cast<std::uint64_t>(i), to);
    const std::vector<double> x = toy.constraints.toy_parameters(x_default);
    for (index_t t : targets) truth.push_back(x[static_cast<std::size_t>(t)]);
    return toy;
  };
  const std::size_t first = out.size();
  const index_t width = replica_width(a, n);
  double seconds = 0;
  std::optional<BatchStatistics> pooled;
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
      pooled->evaluations += b.statistics.evaluations;
      pooled->columns += b.statistics.columns;
      pooled->active_fraction += b.statistics.active_fraction * static_cast<double>(b.statistics.rounds);  // normalised below
      pooled->rounds += b.statistics.rounds;
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
    pooled->replicas = n;
    pooled->width = width;
    pooled->seconds = seconds;
    if (pooled->rounds > 0) pooled->active_fraction /= static_cast<double>(pooled->rounds);
  }
  io::ToySummary s = summarize_toys(m, lik.parameter_names(), std::span<const io::FitRecord>(out).subspan(first), truth);
  s.width = width;
  s.seconds = seconds;
  s.batch = pooled;
  return s;
}

/// Every fit of a run, and the summary of its toys if it has any.
struct Fits {
  std::vector<io::FitRecord> records;
  std::optional<io::ToySummary> toys;
};

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

template <class Lik>
Fits run_with_method(Lik& lik, const Args& a, const io::RabbitTensor& in) {
  TrustRegionOptions o;
  o.gtol = a.gtol;
  o.edm_tol = a.edm_tol;
  o.maxiter = a.maxiter;
  o.validate();
  if (a.method == "trust-exact") return run_fits(lik, TrustRegion<Exact>(o), a, in);
  if (a.method == "trust-ncg") return run_fits(lik, TrustRegion<SteihaugCG>(o), a, in);
  return run_fits(lik, TrustRegion<Gltr>(o), a, in);
}

// ---- the summary on stdout -------------------------------------------------------------------

void print_summary(const Model& m, const io::FitRecord& f, bool squared_poi_off) {
  const FitResult& r = f.result;
  std::printf("\n== %s: %s; NLL %.10g (full %.10g), EDM %.3g, %td iterations, covariance %s\n", f.name.c_str(),
              std::string(to_string(r.status)).c_str(), r.nll, f.nll_full, r.edm, r.iterations,
              std::string(to_string(r.covariance_status)).c_str());
  if (!f.blinded.empty()) std::printf("   blinded (use --unblind to see them): %zu parameters\n", f.blinded.size());
  std::printf("   %-32s %14s %12s\n", "parameter of interest", "fitted", "uncertainty");
  for (index_t t : impact_targets(m)) {
    const auto i = static_cast<std::size_t>(t);
    std::printf("   %-32s %14.6g %12.6g", r.names[i].c_str(), r.x[i], r.uncertainties[i]);
    // Squared POIs (the default) store √μ: show μ = x² and its propagated uncertainty 2|x|σ too.
    if (t < m.npoi() && !squared_poi_off) std::printf("   (μ = %.6g ± %.6g)", r.x[i] * r.x[i], 2 * std::abs(r.x[i]) * r.uncertainties[i]);
    std::printf("\n");
  }
  // Pulls (θ̂ − θ₀)·√w and constraints σ·√w of the constrained nuisances, largest pulls first.
  std::vector<std::size_t> order;
  for (index_t s = 0; s < m.nsyst(); ++s)
    if (m.constraint_weights[static_cast<std::size_t>(s)] > 0) order.push_back(static_cast<std::size_t>(s));
  auto pull = [&](std::size_t s) {
    return (r.x[static_cast<std::size_t>(m.npoi()) + s] - m.theta0[s]) * std::sqrt(m.constraint_weights[s]);
  };
  std::stable_sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) { return std::abs(pull(x)) > std::abs(pull(y)); });
  const std::size_t shown = std::min<std::size_t>(order.size(), 10);
  if (shown > 0) std::printf("   %-32s %14s %12s   (largest %zu of %zu)\n", "nuisance", "pull", "constraint", shown, order.size());
  for (std::size_t k = 0; k < shown; ++k) {
    const std::size_t s = order[k], i = static_cast<std::size_t>(m.npoi()) + s;
    std::printf("   %-32s %+14.4f %12.4f\n", r.names[i].c_str(), pull(s), r.uncertainties[i] * std::sqrt(m.constraint_weights[s]));
  }
  for (const auto* imp : {f.impacts ? &*f.impacts : nullptr, f.global_impacts ? &*f.global_impacts : nullptr}) {
    if (!imp) continue;
    std::printf("   %s on %s:\n", imp == (f.impacts ? &*f.impacts : nullptr) ? "impacts" : "global impacts", imp->targets.front().c_str());
    for (std::size_t g = 0; g < imp->groups.size(); ++g) std::printf("     %-30s %12.6g\n", imp->groups[g].c_str(), imp->group(0, g));
  }
  if (f.gof) std::printf("   saturated GoF: chi2 %.4f, ndf %td, p-value %.4g\n", f.gof->chi2, f.gof->ndf, f.gof->p_value);
  for (const Scan& s : f.scans) std::printf("   scan of %s: %zu points, ΔNLL at the ends %.4g and %.4g\n", s.parameter.c_str(), s.values.size(), s.dnll.front(), s.dnll.back());
  std::printf("   time: minimisation %.3f s, postfit %.3f s\n", f.minimize_seconds, f.postfit_seconds);
}

/// The toys together: converged count, how fast, and per POI and NOI the spread of the fitted
/// values and of the pulls.
void print_toy_summary(const io::ToySummary& t, std::span<const io::FitRecord> fits) {
  std::printf("\n== toys: %td of %td converged; minimisation %.3f s (%.4g toys/s), ", t.converged, t.toys, t.seconds, t.toys_per_second());
  if (t.batch)
    std::printf("%td at a time: %td pooled evaluations, active fraction %.3f\n", t.width, t.batch->evaluations, t.batch->active_fraction);
  else
    std::printf("one at a time\n");
  // How the others ended (they are left out of the means below), most frequent first.
  std::map<std::string, index_t> ended;
  for (const auto& f : fits)
    if (is_toy(f) && !f.result.converged()) ++ended[std::string(to_string(f.result.status))];
  std::vector<std::pair<std::string, index_t>> order(ended.begin(), ended.end());
  std::stable_sort(order.begin(), order.end(), [](const auto& x, const auto& y) { return x.second > y.second; });
  for (const auto& [status, count] : order) std::printf("   not converged: %td %s\n", count, status.c_str());
  std::printf("   %-32s %14s %12s %12s %12s\n", "parameter (converged toys)", "mean fitted", "std dev", "mean pull", "pull std dev");
  for (const auto& p : t.targets)
    std::printf("   %-32s %14.6g %12.6g %+12.4f %12.4f\n", p.name.c_str(), p.value.mean, p.value.stddev, p.pull.mean, p.pull.stddev);
}

nlohmann::json options_json(const Args& a) {
  return {{"toys", a.toys},
          {"seed", a.seed},
          {"replicaBatch", a.replica_batch},
          {"minimizerMethod", a.method},
          {"minimizerGtol", a.gtol},
          {"minimizerEdmTol", a.edm_tol},
          {"minimizerMaxiter", a.maxiter},
          {"preconditioning", a.preconditioning},
          {"binByBinStat", !a.no_bbb},
          {"binByBinStatType", a.bbb_type},
          {"binByBinStatMode", a.bbb_mode},
          {"binByBinStatZeroVariance", a.bbb_zero_variance},
          {"minBBKstat", a.min_kstat},
          {"dataTerm", a.chisq ? "chisq" : a.covariance ? "covariance" : "poisson"},
          {"allowNegativePOI", a.allow_negative_poi},
          {"freezeParameters", a.freeze},
          {"doImpacts", a.impacts},
          {"globalImpacts", a.global_impacts},
          {"scan", a.do_scan ? nlohmann::json(a.scan) : nlohmann::json(nullptr)},
          {"unblind", a.unblind_all ? nlohmann::json("all") : nlohmann::json(a.unblind)},
          {"threads", a.threads},
          {"ranks", a.ranks}};
}

/// This process's shards when the bins are split (--threads, mpirun): its --threads consecutive
/// parts of io::rabbit_partition over every thread of every rank, worked out by rank 0 alone (it
/// streams a sparse tensor's indices) and broadcast; empty for one shard.
std::vector<BinRange> own_shards(const Args& a) {
  if (a.threads * a.ranks == 1) return {};
  std::vector<index_t> bounds(static_cast<std::size_t>(2 * a.threads * a.ranks));
  if (a.rank == 0) {
    std::vector<BinRange> all;
    try {
      all = io::rabbit_partition(a.input, a.threads * a.ranks);
    } catch (const usage_error& e) {  // more shards than bins
      throw usage_error("--threads " + std::to_string(a.threads) + (a.ranks > 1 ? " on each of " + std::to_string(a.ranks) + " ranks" : "") +
                        " exceeds what the tensor allows (each thread takes a shard of its bins): " + e.what());
    }
    for (std::size_t r = 0; const BinRange& b : all) {
      bounds[2 * r] = b.begin;
      bounds[2 * r++ + 1] = b.end;
    }
  }
#ifdef FITLIB_FIT_MPI
  if (a.ranks > 1) MPI_Bcast(bounds.data(), static_cast<int>(bounds.size()), MPI_INT64_T, 0, MPI_COMM_WORLD);
#endif
  std::vector<BinRange> mine;
  for (index_t t = a.rank * a.threads; t < (a.rank + 1) * a.threads; ++t)
    mine.push_back({bounds[static_cast<std::size_t>(2 * t)], bounds[static_cast<std::size_t>(2 * t + 1)]});
  return mine;
}

/// The tensor; with shards, everything but the systematic tensor, which each shard reads for its
/// own bins on its own thread (`part`), so the process holds one bin's rows beside them. Rank 0
/// alone streams the file for its SHA-256.
io::RabbitTensor read_input(const Args& a, io::RabbitReadOptions ro, const std::vector<BinRange>& shards) {
  if (!shards.empty()) ro.bins = BinRange{shards.front().begin, shards.front().begin + 1};
  if (a.rank == 0) return io::read_rabbit(a.input, ro);
  io::RabbitTensor t = io::read_rabbit(io::hdf5::File::open(a.input), ro);
  t.path = a.input;
  return t;
}

/// Runs `body(lik)` on a likelihood on `policy` with the storage the model's templates call for,
/// over `shards` reading their templates from `part` (or, without shards, over the whole model).
template <class Policy, class Body>
auto with_storage(const Policy& policy, std::shared_ptr<const Model> model, const std::vector<BinRange>& shards,
                  const std::function<std::shared_ptr<const Model>(BinRange)>& part, const LikelihoodOptions& lo, Body&& body) {
  if (model->sparse) {
    Likelihood<Shard<Policy, storage::Sparse>> lik(model, shards, shards.empty() ? nullptr : part, policy, lo);
    return body(lik);
  }
  Likelihood<Shard<Policy, storage::Dense>> lik(model, shards, shards.empty() ? nullptr : part, policy, lo);
  return body(lik);
}

/// Runs `body(lik)` on the likelihood the options call for: the bins split over --threads shards
/// evaluated concurrently and added in shard order (one thread: the serial evaluation), and under
/// MPI over the ranks first; each shard reads its own templates on its own thread.
template <class Body>
auto with_likelihood(const Args& a, std::shared_ptr<const Model> model, const std::vector<BinRange>& shards, io::RabbitReadOptions ro,
                     const LikelihoodOptions& lo, Body&& body) {
  std::mutex hdf5;  // HDF5's serial build reads on one thread at a time
  const auto part = [&](BinRange bins) {
    const std::lock_guard lock(hdf5);
    ro.bins = bins;
    Model m = io::read_rabbit(io::hdf5::File::open(a.input), ro).model;
    adjust_model(m, a);
    return std::make_shared<const Model>(std::move(m));
  };
#ifdef FITLIB_FIT_MPI
  if (a.ranks > 1) return with_storage(mpi::Ranks<cpu::Threads>{cpu::Threads{a.threads}}, std::move(model), shards, part, lo, body);
#endif
  return with_storage(cpu::Threads{a.threads}, std::move(model), shards, part, lo, body);
}

/// A library message with the library's option fields replaced by the flags that set them here, so that a
/// user reads what to type (each pair: the field's name in fitlib's API, the flag).
std::string in_command_line_terms(std::string message) {
  static const std::pair<std::string_view, std::string_view> flags[] = {
      {"set LikelihoodOptions::allow_negative_poi", "pass --allowNegativePOI"},
      {"LikelihoodOptions::allow_negative_poi", "--allowNegativePOI"},
      {"set RabbitReadOptions::allow_negative_yields", "pass --allowNegativeExpectation"},
      {"RabbitReadOptions::allow_negative_yields", "--allowNegativeExpectation"},
      {"RabbitReadOptions::systematic_type", "--systematicType"},
      {"LikelihoodOptions::bin_by_bin.min_kstat", "--minBBKstat"},
      {"LikelihoodOptions::bin_by_bin.zero_variance", "--binByBinStatZeroVariance"},
      {"ScanOptions::points", "--scanPoints"},
      {"ScanOptions::range", "--scanRange"},
      {"TrustRegionOptions::edm_tol", "--minimizerEdmTol"},
      {"TrustRegionOptions::gtol", "--minimizerGtol"},
      {"TrustRegionOptions::maxiter", "--minimizerMaxiter"},
      {"use DataTerm::poisson or supply variances", "drop --chisqFit (the Poisson term needs no variances) or give the tensor hdata_var"},
      {"supply a valid Model::data_covariance_inverse", "check the tensor's hdata_cov_inv (--covarianceFit), or drop --covarianceFit"},
      {"Model::data_covariance_inverse", "the tensor's hdata_cov_inv"},
      {"FileOptions::max_read_bytes", "the read limit (the machine's memory)"},
  };
  for (const auto& [field, flag] : flags)
    for (std::size_t at = message.find(field); at != std::string::npos; at = message.find(field, at + flag.size()))
      message.replace(at, field.size(), flag);
  return message;
}

/// Reports bad input (exit status 2). Under MPI a rank that fails ends every rank, since the
/// others may be waiting for it in a collective; each rank that got there says which it is.
int fail(const Args& a, const char* library_message) {
  const std::string what = in_command_line_terms(library_message);
  if (a.ranks == 1) {
    std::fprintf(stderr, "fitlib-fit: error: %s\n", what.c_str());
    return 2;
  }
  std::fprintf(stderr, "fitlib-fit: error on rank %td of %td: %s\n", a.rank, a.ranks, what.c_str());
#ifdef FITLIB_FIT_MPI
  MPI_Abort(MPI_COMM_WORLD, 2);
#endif
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
#ifdef FITLIB_FIT_MPI
  const mpi::Session mpi_session(&argc, &argv);
  a.rank = mpi::rank_of(MPI_COMM_WORLD);
  a.ranks = mpi::size_of(MPI_COMM_WORLD);
#endif
  CLI::App app{"fitlib-fit: binned profile-likelihood fits of rabbit input tensors (fitlib " FITLIB_VERSION_STRING ")"};
  app.get_formatter()->column_width(40);
  app.footer(
      "Exit status: 0 when every fit converged; 3 when one did not (its status is in the results, which are still\n"
      "written); 2 for bad input (the message names the file, dataset, option or parameter and the remedy), checked\n"
      "before any fit; 4 when the results could not be written (they are still printed; an earlier results file\n"
      "at -o is left as it was).\n"
      "Real rabbit tensors are Blosc2-compressed: fitlib-fit finds the filter plugin that scripts/install-deps.sh\n"
      "installs, or one given by --hdf5PluginPath or FITLIB_HDF5_PLUGIN_PATH, or that of an importable Python\n"
      "hdf5plugin (pip install hdf5plugin); HDF5_PLUGIN_PATH need not be set.");
  app.add_option("tensor", a.input, "rabbit input tensor (HDF5, dense or sparse)")->required();
  app.add_option("--hdf5PluginPath", a.plugin_path, "directory (or ':'-separated list) of HDF5 filter plugins, searched first");
  app.add_option("-o,--output", a.output, "results file (HDF5; docs/results-format.md)")->capture_default_str();
  app.add_flag("--json", a.json, "also write a JSON summary next to the results file (same name, .json)");
  app.add_flag("-q,--quiet", a.quiet, "no per-iteration progress on stderr");
  app.add_option("-t,--toys", a.toys, "fits to run: -1 Asimov, 0 observed data, N toys 1..N (several allowed)")->capture_default_str();
  app.add_option("--seed", a.seed_text, "random seed of the toys, 0 … 2⁶⁴−1; toy i draws from (seed, i) only")->capture_default_str();
  app.add_option("--toysSystRandomize", a.toys_syst, "constraint randomisation of toys: frequentist, bayesian, none")->capture_default_str();
  app.add_option("--toysDataRandomize", a.toys_data, "data fluctuation of toys: poisson, normal, none")->capture_default_str();
  app.add_option("--toysDataMode", a.toys_data_mode, "centre of the toys' data: expected, observed")->capture_default_str();
  app.add_option("--replicaBatch", a.replica_batch,
                 "toys minimised together, their evaluations pooled (same results as one by one): 0 = min(64, N), 1 = one at a time")
      ->capture_default_str();
  auto* pd = app.add_option("--pseudoData", a.pseudodata, "fit the tensor's pseudodata sets (names; none = all) instead of data with -t 0")
                 ->expected(0, -1);
  app.add_option("--minimizerMethod", a.method, "trust-krylov (GLTR), trust-ncg (Steihaug CG) or trust-exact (Moré–Sorensen)")
      ->check(CLI::IsMember({"trust-krylov", "trust-ncg", "trust-exact"}))
      ->capture_default_str();
  app.add_option("--preconditioning", a.preconditioning, "change of variables from the prefit Hessian: none, diagonal, cholesky")
      ->check(CLI::IsMember({"none", "diagonal", "cholesky"}))
      ->capture_default_str();
  app.add_option("--minimizerGtol", a.gtol, "stop when the gradient norm is below this (0 = off, as rabbit)")->capture_default_str();
  app.add_option("--minimizerEdmTol", a.edm_tol, "stop when the EDM ½gᵀH⁻¹g is below this")->capture_default_str();
  app.add_option("--minimizerMaxiter", a.maxiter, "iteration limit (0 = 200·parameters)")->capture_default_str();
  app.add_flag("--noBinByBinStat", a.no_bbb, "no bin-by-bin template statistics");
  app.add_option("--binByBinStatType", a.bbb_type, "automatic, gamma, normal-multiplicative, normal-additive")->capture_default_str();
  app.add_option("--binByBinStatMode", a.bbb_mode, "lite (one β per bin) or full (one per bin and process)")->capture_default_str();
  app.add_option("--binByBinStatZeroVariance", a.bbb_zero_variance,
                 "lite mode, processes with sumw2 = 0: exclude (rabbit since 2026-04: β leaves them alone) or scale (rabbit 0.2.5, "
                 "the PyPI release: β scales them too); docs/likelihood.md")
      ->capture_default_str();
  app.add_option("--minBBKstat", a.min_kstat, "keep β fixed where the effective MC statistics are below this")->capture_default_str();
  app.add_flag("--chisqFit", a.chisq, "χ² data term with the data variances");
  app.add_flag("--covarianceFit", a.covariance, "χ² data term with the tensor's inverse data covariance");
  app.add_flag("--allowNegativePOI,--allowNegativeParam", a.allow_negative_poi, "POIs act linearly (μ = x) instead of μ = x²");
  app.add_flag("--allowNegativeExpectation", a.allow_negative_expectation, "accept negative nominal yields in the tensor");
  app.add_option("--systematicType", a.systematic_type,
                 "log_normal or normal: how the tensor's logk act (default: what the tensor's meta says, log_normal without one; "
                 "refused where it contradicts the meta)")
      ->check(CLI::IsMember({"log_normal", "normal"}));
  app.add_option("--expectSignal", a.expect_signal, "NAME VALUE: default signal strength of a POI (repeatable)");
  app.add_option("--setConstraintMinimum", a.constraint_minimum, "NAME VALUE: constraint centre of a nuisance (repeatable)");
  app.add_option("--freezeParameters", a.freeze, "parameters held at their start: names or regular expressions");
  app.add_flag("--doImpacts", a.impacts, "traditional impacts on POIs and NOIs, per parameter and group");
  app.add_flag("--globalImpacts", a.global_impacts, "global impacts (shifted global observables) on POIs and NOIs");
  app.add_flag("--noHessian", a.no_hessian, "no covariance (and no impacts or scans)");
  auto* scan = app.add_option("--scan", a.scan, "profile-likelihood scans of these parameters (none = POIs and NOIs)")->expected(0, -1);
  app.add_option("--scanPoints", a.scan_points, "points per scan")->capture_default_str();
  app.add_option("--scanRange", a.scan_range, "scan half-width in postfit σ")->capture_default_str();
  auto* unblind = app.add_option("--unblind", a.unblind, "data fits report POIs and NOIs blinded (fixed, name-seeded offsets) unless unblinded here: no values = all, else the names/regexes given")
                      ->expected(0, -1);
  app.add_option("--threads", a.threads, "threads: the bins split into as many shards, evaluated concurrently (results depend on the count only through the order of the shard sums)")
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help exits 0; every malformed command line exits 2, as the footer says (not CLI11's own codes).
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  // An option given without values leaves one empty string behind in CLI11 2.1.
  for (auto* v : {&a.pseudodata, &a.scan, &a.unblind}) std::erase(*v, std::string());
  a.use_pseudodata = pd->count() > 0;
  a.do_scan = scan->count() > 0;
  a.unblind_all = unblind->count() > 0 && a.unblind.empty();
  a.quiet = a.quiet || a.rank > 0;  // under MPI, rank 0 speaks for all

  try {
    if (a.no_hessian && (a.impacts || a.global_impacts || a.do_scan))
      throw usage_error("--noHessian leaves no covariance for --doImpacts, --globalImpacts or --scan; drop one of them");
    if (a.threads < 1) throw usage_error("--threads must be ≥ 1, got " + std::to_string(a.threads));
    a.seed = parse_seed(a.seed_text);
    find_filter_plugins(a.plugin_path, a.ranks);
    // The outputs are checked before anything is computed, so that no run's work is lost to a bad path.
    if (a.rank == 0) {
      io::check_output_path(a.output, "-o/--output", {a.input});
      if (a.json) {
        if (json_path(a) == a.output)
          throw usage_error("-o/--output '" + a.output + "' ends in .json, so with --json the JSON summary would replace the HDF5 results; "
                            "name the results file .hdf5 (the summary goes beside it as .json)");
        io::check_output_path(json_path(a), "the JSON summary (--json)", {a.input});
      }
    }
    if (a.ranks > 1 && a.covariance)
      throw usage_error("--covarianceFit couples every bin through the inverse data covariance, which no MPI rank holds alone; run "
                        "fitlib-fit without mpirun (--threads splits the bins over threads), or use --chisqFit or the Poisson term");
    for (int t : a.toys)
      if (t < -1) throw usage_error("-t/--toys takes -1 (Asimov), 0 (data) or a number of toys N > 0, got " + std::to_string(t));
    // Toy i is named toy<i> in every set, so a second set would overwrite the first's names.
    if (std::count_if(a.toys.begin(), a.toys.end(), [](int t) { return t > 0; }) > 1)
      throw usage_error("-t/--toys takes one number of toys N > 0 per run (toys are named toy1 … toyN); give the largest once");
    if (a.replica_batch < 0)
      throw usage_error("--replicaBatch must be ≥ 0 (0 = automatic, 1 = one toy at a time, B = B toys together), got " +
                        std::to_string(a.replica_batch));
    const LikelihoodOptions lo = likelihood_options(a);
    (void)toy_options(a);
    (void)scan_options(a);
    const auto t0 = std::chrono::steady_clock::now();
    io::RabbitReadOptions ro;
    ro.allow_negative_yields = a.allow_negative_expectation;
    if (!a.systematic_type.empty()) ro.systematic_type = a.systematic_type == "normal" ? SystematicType::normal : SystematicType::log_normal;
    const std::vector<BinRange> shards = own_shards(a);
    io::RabbitTensor in = read_input(a, ro, shards);
    if (!in.meta_skipped.empty() && a.rank == 0) std::fprintf(stderr, "fitlib-fit: note: %s\n", in_command_line_terms(in.meta_skipped).c_str());
    if (!in.beta_variations.empty() && !a.no_bbb && lo.bin_by_bin.mode == BinByBinMode::full)
      throw usage_error("the tensor has hbetavariations, which fitlib does not apply yet; use --binByBinStatMode lite or --noBinByBinStat");
    if (a.use_pseudodata && in.pseudodata_names.empty()) throw usage_error("--pseudoData: the tensor has no pseudodata sets");
    for (const auto& p : a.pseudodata)
      if (std::find(in.pseudodata_names.begin(), in.pseudodata_names.end(), p) == in.pseudodata_names.end())
        throw usage_error("--pseudoData names '" + p + "', which is not a pseudodata set of the tensor");
    adjust_model(in.model, a);
    const bool bin_by_bin = lo.bin_by_bin.enabled && !in.model.sumw2.empty();
    if (a.global_impacts && bin_by_bin && lo.data_term == DataTerm::covariance)
      throw usage_error("--globalImpacts splits off the bin-by-bin part with a Poisson or χ² data term only, not with --covarianceFit; "
                        "use --doImpacts, or --noBinByBinStat");
    const double read_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!a.quiet)
      std::fprintf(stderr, "fitlib-fit: read %s (%s, %td bins + %td masked, %td processes, %td systematics) in %.3f s\n", a.input.c_str(),
                   in.sparse ? "sparse" : "dense", in.model.nbins(), in.model.nbins_full() - in.model.nbins(), in.model.nprocs(),
                   in.model.nsyst(), read_seconds);

    auto model = std::make_shared<const Model>(std::move(in.model));
    Fits fits;
    // Names are checked before any fit runs, so a typo never costs a fit.
    const auto run_all = [&](auto& lik) {
      for (const auto& p : a.scan) (void)lik.parameter_index(p);
      (void)fitlib::detail::frozen_mask(lik.parameter_names(), a.freeze);
      return run_with_method(lik, a, in);
    };
    fits = with_likelihood(a, model, shards, ro, lo, run_all);
    bool all_converged = true;
    for (const auto& f : fits.records) all_converged = all_converged && f.result.converged();
    if (a.rank > 0) return all_converged ? 0 : 3;  // rank 0 writes and reports

    io::RunInfo run;
    run.input_path = a.input;
    run.input_sha256 = in.sha256;
    for (int i = 0; i < argc; ++i) run.command_line += (i ? " " : "") + std::string(argv[i]);
    run.options = options_json(a);
    run.options["systematicType"] = model->systematic_type == SystematicType::normal ? "normal" : "log_normal";  // as fitted
    // A failed write (a full disk, a vanished directory) still shows the results on stdout; any earlier
    // file at the output paths is left as it was (io::ReplacingFile).
    std::string write_error;
    const auto t_write = std::chrono::steady_clock::now();
    try {
      // Both files written before either is renamed into place, so that the pair is one run's.
      io::ReplacingFile results(a.output);
      results.write(io::results_image(a.output, run, fits.records, fits.toys), "the results file");
      std::optional<io::ReplacingFile> summary;
      if (a.json) summary.emplace(json_path(a)).write(io::results_json_text(run, fits.records, fits.toys), "the JSON summary");
      results.commit();
      if (summary) summary->commit();
    } catch (const std::exception& e) {  // a file_error, or no memory for the image
      write_error = e.what();
    }
    const double write_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_write).count();
    for (const auto& f : fits.records)
      if (!is_toy(f)) print_summary(*model, f, a.allow_negative_poi);
    if (fits.toys) print_toy_summary(*fits.toys, fits.records);
    const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!write_error.empty()) {
      std::fflush(stdout);
      std::fprintf(stderr, "fitlib-fit: error: the results were computed but could not be written: %s\n", write_error.c_str());
      return 4;
    }
    std::printf("\nwrote %s%s in %.3f s; total %.3f s\n", a.output.c_str(), a.json ? (" and " + json_path(a)).c_str() : "", write_seconds, total);
    return all_converged ? 0 : 3;
  } catch (const fitlib::error& e) {
    return fail(a, e.what());
  } catch (const std::invalid_argument& e) {
    return fail(a, e.what());
  } catch (const std::exception& e) {  // not bad input: a fault (no memory, a library's own error), still said, never a terminate
    return fail(a, (std::string("unexpected failure: ") + e.what()).c_str());
  }
}
