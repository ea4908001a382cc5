// SPDX-License-Identifier: MIT
// fitlib-fit's command line: the options (rabbit_fit.py's where rabbit has them, rabbit-likelihood-and-format.md §6),
// their checks, and the library options they set.
#include "command_line.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <sstream>
#include <string_view>

#include "fitlib/io/hdf5.hpp"
#include "fitlib/io/output_file.hpp"

namespace fitlib::cli {

namespace {


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

template <class E>
E choose(const std::string& option, const std::string& value, const std::map<std::string, E>& choices) {
  const auto it = choices.find(value);
  if (it != choices.end()) return it->second;
  std::string allowed;
  for (const auto& [k, v] : choices) allowed += (allowed.empty() ? "" : ", ") + k;
  throw usage_error(option + " '" + value + "' is not one of: " + allowed);
}

}  // namespace

std::optional<int> parse_command_line(int argc, char** argv, Args& a) {
  CLI::App app{"fitlib-fit: binned profile-likelihood fits of rabbit input tensors (fitlib " FITLIB_VERSION_STRING ")"};
  app.get_formatter()->column_width(40);
  app.footer(
      "Exit status: 0 when every fit converged; 3 when one did not (its status is in the results, which are still\n"
      "written); 2 for bad input (the message names the file, dataset, option or parameter and the remedy), checked\n"
      "before any fit; 4 when the results could not be written (they are still printed; an earlier results file\n"
      "at -o is left as it was; a failed flush of the directory after the files are in place is only a warning).\n"
      "A converged fit whose covariance failed (a singular Hessian) counts as converged: stderr warns about it, and\n"
      "its uncertainties are NaN.\n"
      "Real rabbit tensors are Blosc2-compressed: fitlib-fit finds the filter plugin that scripts/install-deps.sh\n"
      "installs, or one given by --hdf5PluginPath or FITLIB_HDF5_PLUGIN_PATH, or that of an importable Python\n"
      "hdf5plugin (pip install hdf5plugin); HDF5_PLUGIN_PATH need not be set.");
  app.add_option("tensor", a.input, "rabbit input tensor (HDF5, dense or sparse)")->required();
  app.add_option("--hdf5PluginPath", a.plugin_path, "directory (or ':'-separated list) of HDF5 filter plugins, searched first");
  app.add_option("-o,--output", a.output,
                 "results file (HDF5; docs/results-format.md), or as rabbit's -o a directory (existing, or ending in '/': made) that "
                 "gets --outname")->capture_default_str();
  app.add_option("--outname", a.outname, "with -o a directory, the results file's name in it (rabbit's --outname; default fitresults.hdf5)");
  app.add_flag("--json", a.json, "also write a JSON summary next to the results file (same name, .json)");
  app.add_option("--rabbitOutput", a.rabbit_output,
                 "also write the results in rabbit's fitresults layout to this file, for rabbit's scripts (by the fitlib Python "
                 "package: python3 -m fitlib.rabbit, or $FITLIB_PYTHON; pip install './python[rabbit]')");
  app.add_flag("-q,--quiet", a.quiet, "no per-iteration progress on stderr");
  app.add_option("-t,--toys", a.toys, "fits to run: -1 Asimov, 0 observed data, N toys 1..N (several allowed)")->capture_default_str();
  app.add_option("--seed", a.seed_text, "random seed of the toys, 0 … 2⁶⁴−1; toy i draws from (seed, i) only")->capture_default_str();
  app.add_option("--toysSystRandomize", a.toys_syst, "constraint randomisation of toys: frequentist, bayesian, none")->capture_default_str();
  app.add_option("--toysDataRandomize", a.toys_data, "data fluctuation of toys: poisson, normal, none")->capture_default_str();
  app.add_option("--toysDataMode", a.toys_data_mode, "centre of the toys' data: expected, observed")->capture_default_str();
  app.add_option("--replicaBatch", a.replica_batch,
                 "toys (and --scan2D grid points) minimised together, their evaluations pooled (same results as one by one): 0 = min(64, N), 1 = one at a time")
      ->capture_default_str();
  auto* pd = app.add_option("--pseudoData", a.pseudodata, "fit the tensor's pseudodata sets (names; none = all) instead of data with -t 0")
                 ->expected(0, -1);
  app.add_option("--minimizerMethod", a.method,
                 "auto (chosen by the cost of a dense Hessian), trust-krylov (GLTR), trust-ncg (Steihaug CG), trust-exact (Moré–Sorensen), "
                 "trust-gauss-newton (trust-exact on the Gauss–Newton matrix, then on the Hessian near the minimum) or "
                 "trust-gauss-newton-krylov (the same Gauss–Newton steps, then trust-krylov preconditioned by the last Gauss–Newton matrix)")
      ->check(CLI::IsMember([] {
        std::vector<std::string> names{"auto"};
        names.insert(names.end(), minimizer_methods.begin(), minimizer_methods.end());
        return names;
      }()))
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
  app.add_option("--maxMetaMiB", a.max_meta_mib,
                 "largest `meta` pickle read, in MiB (rabbit writes kilobytes to a few MB); raise it for a trusted tensor with a larger one")
      ->capture_default_str();
  app.add_option("--maxCompressionRatio", a.max_compression_ratio,
                 "largest ratio of a dataset's declared size to the bytes it stores (a damaged dataspace can declare terabytes); "
                 "raise it for a trusted dense tensor that is almost all zeros beyond 64 times the file's size (rabbit leaves all-zero chunks unwritten)")
      ->capture_default_str();
  app.add_option("--expectSignal", a.expect_signal, "NAME VALUE: default signal strength of a POI (repeatable)");
  app.add_option("--setConstraintMinimum", a.constraint_minimum, "NAME VALUE: constraint centre of a nuisance (repeatable)");
  app.add_option("--freezeParameters", a.freeze, "parameters held at their start: names or regular expressions");
  app.add_flag("--doImpacts", a.impacts, "traditional impacts on POIs and NOIs, per parameter and group");
  app.add_flag("--globalImpacts", a.global_impacts, "global impacts (shifted global observables) on POIs and NOIs");
  app.add_flag("--noHessian", a.no_hessian, "no covariance (and no impacts or scans)");
  auto* scan = app.add_option("--scan", a.scan, "profile-likelihood scans of these parameters (none: every free parameter, as rabbit)")->expected(0, -1);
  app.add_flag("--saveHists", a.save_hists,
               "prefit and postfit yields of every bin, per process and summed, with their variances (rabbit's --saveHists "
               "--saveHistsPerProcess --computeHistErrors), with bin-by-bin statistics as rabbit has them: β̂ in the postfit yields, "
               "the variances through β̂ and with β's own");
  app.add_flag("--computeHistCov", a.hist_cov, "with --saveHists: each channel's bin-by-bin covariance of the summed yields, prefit and postfit");
  app.add_flag("--computeHistErrorsPerProcess", a.hist_process_errors,
               "with --saveHists: the variance of each process's yield in every bin, prefit and postfit (β's own share included)");
  app.add_flag("--computeVariations", a.hist_variations,
               "with --saveHists: every bin's summed yield with each parameter moved down and up by its σ (linear, as rabbit's), "
               "prefit and postfit; in the HDF5 results only");
  app.add_option("-m,--mapping", a.mappings,
                 "KIND ARG…: with --saveHists, the histograms of a mapping as rabbit's -m (repeatable): Select CHANNEL [AXIS:SEL,…], "
                 "Project CHANNEL [AXIS…], Normalize CHANNEL [AXIS…], Ratio NUM DEN [NUMSEL DENSEL]; SEL an index, slice(a,b), sum or None. Its words run to the next option: give the "
                 "tensor before it")
      ->expected(1, -1);
  app.add_flag("--noChi2", a.no_chi2, "with --saveHists: no linear chi2 of the prefit and postfit histograms against the data (rabbit's --noChi2)");
  app.add_option("--scan2D", a.scan2d, "A B: a profile-likelihood scan over the grid of two parameters, its points fitted as a batch of replicas (repeatable)");
  app.add_option("--scanPoints", a.scan_points, "points per scan (per parameter of a 2D scan)")->capture_default_str();
  app.add_option("--scanRange", a.scan_range, "scan half-width in postfit σ")->capture_default_str();
  auto* unblind = app.add_option("--unblind", a.unblind, "data fits report POIs and NOIs blinded (fixed, name-seeded offsets) unless unblinded here: no values = all, else the names/regexes given")
                      ->expected(0, -1);
  app.add_option("--threads", a.threads, "threads: the bins split into as many shards, evaluated concurrently; 0 (the default): every core "
                 "this process may use, as many as the unmasked bins allow (one per rank under mpirun); results depend on the count "
                 "only through the order of the shard sums")
      ->capture_default_str();
  app.add_option("--device", a.device, "where the likelihood is evaluated: cpu (--threads shards) or cuda (one shard per listed GPU, "
                 "templates and bins resident there; dense templates; a fitlib-fit built with nvcc)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  app.add_option("--devices", a.devices, "with --device cuda: the CUDA devices by id, one shard each (a device listed twice holds two shards), "
                 "e.g. --devices 0,2")
      ->delimiter(',');
  app.add_option("--nDevices", a.n_devices, "with --device cuda: the N least occupied CUDA devices by memory in use (NVML; 1 unless --devices is given)");
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
  return std::nullopt;
}

namespace {
/// Runs a program (argv[0] searched on the PATH) and waits for it; `quiet`: its stdout and stderr to /dev/null. Its exit
/// status; -1 when it could not start or ended by a signal.
int run_program(const std::vector<std::string>& args, bool quiet) {
  std::vector<char*> argv;
  for (const std::string& s : args) argv.push_back(const_cast<char*>(s.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  if (quiet) {
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  }
  pid_t pid = 0;
  const int err = posix_spawnp(&pid, argv[0], &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (err != 0) return -1;
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}
}  // namespace

std::string rabbit_python() {
  const char* p = std::getenv("FITLIB_PYTHON");
  return p != nullptr && *p != '\0' ? p : "python3";
}

int write_rabbit_output(const Args& a) {
  return run_program({rabbit_python(), "-m", "fitlib.rabbit", a.output, a.rabbit_output, "--tensor", a.input}, false);
}

/// --device, --devices and --nDevices: consistent, and CUDA in this binary; with --device cuda, --threads becomes the
/// number of device shards of each process (own_shards splits the bins into that many per rank; under mpirun, ranks that
/// share a node split its devices: resolve_cuda_devices_on_node).
void check_device_arguments(Args& a) {
  if (a.device != "cuda") {
    if (!a.devices.empty() || a.n_devices != 0) throw usage_error("--devices and --nDevices choose CUDA devices: add --device cuda");
    return;
  }
#ifndef FITLIB_FIT_CUDA
  throw usage_error("--device cuda: this fitlib-fit was built without CUDA (CMake found no nvcc when it was configured); install the CUDA "
                    "toolkit (nvcc, cuBLAS, cuSOLVER) and rebuild, or use --device cpu");
#else
  if (!a.devices.empty() && a.n_devices != 0)
    throw usage_error("--devices and --nDevices exclude each other: list the devices, or ask for the N least occupied");
  if (a.n_devices < 0) throw usage_error("--nDevices must be ≥ 1, got " + std::to_string(a.n_devices));
  if (a.threads != 0)
    throw usage_error("--threads splits the bins over CPU threads; with --device cuda the shards are the devices (--devices, --nDevices)");
  if (a.method != "auto") require_minimizer_method(a.method, false);  // --device cuda computes no Gauss–Newton matrix
  a.threads = a.devices.empty() ? std::max(a.n_devices, 1) : static_cast<int>(a.devices.size());
#endif
}

void check_arguments(Args& a) {
  if (a.no_hessian && (a.impacts || a.global_impacts || a.do_scan || !a.scan2d.empty() || a.save_hists))
    throw usage_error("--noHessian leaves no covariance for --doImpacts, --globalImpacts, --scan, --scan2D or --saveHists; drop one of them");
  for (const auto& [x, y] : a.scan2d)
    if (x == y) throw usage_error("--scan2D needs two different parameters, got '" + x + "' twice");
  // A scan asked for twice is run once.
  const auto once = [](auto& v) {
    for (std::size_t i = 0; i < v.size(); ++i) v.erase(std::remove(v.begin() + static_cast<std::ptrdiff_t>(i) + 1, v.end(), v[i]), v.end());
  };
  once(a.scan);
  once(a.scan2d);
  if (a.threads < 0) throw usage_error("--threads must be ≥ 1, or 0 for every core, got " + std::to_string(a.threads));
  check_device_arguments(a);
  if (a.max_meta_mib < 1 || a.max_meta_mib > (std::int64_t{1} << 20))
    throw usage_error("--maxMetaMiB must be from 1 to 1048576 (1 TiB), got " + std::to_string(a.max_meta_mib));
  if (!(a.max_compression_ratio >= 1))
    throw usage_error("--maxCompressionRatio must be at least 1, got " + std::to_string(a.max_compression_ratio));
  a.seed = parse_seed(a.seed_text);
  // rabbit's -o DIR [--outname NAME]: the results go to DIR/NAME.
  {
    namespace fs = std::filesystem;
    std::error_code ec;
    const bool dir_named = !a.output.empty() && (a.output.back() == '/' || fs::is_directory(a.output, ec));
    if (!a.outname.empty() && !dir_named)
      throw usage_error("--outname names the results file inside the directory -o gives (rabbit's -o DIR --outname NAME), but '" + a.output +
                        "' is not a directory; give -o a directory, or drop --outname and name the file with -o");
    if (!a.outname.empty() && fs::path(a.outname).has_parent_path())
      throw usage_error("--outname '" + a.outname + "' is a path; give a file name (the directory is -o's)");
    if (dir_named) {
      if (a.rank == 0 && !fs::is_directory(a.output, ec) && !fs::create_directories(a.output, ec) && ec)
        throw usage_error("-o/--output '" + a.output + "': cannot create the directory (" + ec.message() + ")");
      a.output = (fs::path(a.output) / (a.outname.empty() ? "fitresults.hdf5" : a.outname)).string();
    }
  }
  // The outputs are checked before anything is computed, so that no run's work is lost to a bad path.
  if (a.rank == 0) {
    io::check_output_path(a.output, "-o/--output", {a.input});
    if (!a.rabbit_output.empty()) {
      io::check_output_path(a.rabbit_output, "rabbit's fitresults file (--rabbitOutput)", {a.input});
      std::error_code ec1, ec2;
      if (std::filesystem::weakly_canonical(a.rabbit_output, ec1) == std::filesystem::weakly_canonical(a.output, ec2) && !ec1 && !ec2)
        throw usage_error("--rabbitOutput '" + a.rabbit_output + "' is the results file (-o); give rabbit's layout a file of its own");
      // Checked before any fit, so that a missing package loses no fit's work.
      if (run_program({rabbit_python(), "-c", "import fitlib.rabbit as r; r._ioutils()"}, true) != 0)
        throw usage_error("--rabbitOutput writes rabbit's layout with the fitlib Python package and wums, which '" + rabbit_python() +
                          "' cannot import; install them there (pip install './python[rabbit]' from fitlib's repository), or name a "
                          "Python that has them in FITLIB_PYTHON");
    }
    if (a.json) {
      if (json_path(a) == a.output)
        throw usage_error("-o/--output '" + a.output + "' ends in .json, so with --json the JSON summary would replace the HDF5 results; "
                          "name the results file .hdf5 (the summary goes beside it as .json)");
      io::check_output_path(json_path(a), "the JSON summary (--json)", {a.input});
    }
  }
  if ((a.hist_cov || a.hist_variations || a.hist_process_errors || a.no_chi2 || !a.mappings.empty()) && !a.save_hists)
    throw usage_error(std::string(a.hist_cov              ? "--computeHistCov"
                                  : a.hist_variations     ? "--computeVariations"
                                  : a.hist_process_errors ? "--computeHistErrorsPerProcess"
                                  : a.no_chi2             ? "--noChi2"
                                                          : "-m") +
                      " is part of the histograms: add --saveHists");
  if (a.ranks > 1 && a.save_hists)
    throw usage_error("--saveHists propagates through every bin's templates, which no MPI rank holds alone; run fitlib-fit without "
                      "mpirun (--threads splits the bins over threads)");
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
  (void)likelihood_options(a);
  (void)toy_options(a);
  (void)scan_options(a);
  (void)minimizer_options(a);
}

/// The JSON summary beside the results file (--json).
std::string json_path(const Args& a) { return std::filesystem::path(a.output).replace_extension(".json").string(); }

/// Where HDF5 looks for filter plugins (Blosc2 for real rabbit tensors), first to last: --hdf5PluginPath,
/// $FITLIB_HDF5_PLUGIN_PATH (':'-separated), the plugins scripts/install-deps.sh put in .deps/, HDF5's own
/// path (HDF5_PLUGIN_PATH or its default) and, if Blosc2 is still missing, the directory of an importable
/// Python `hdf5plugin`. Set through HDF5's API, so that no variable has to be exported into the shell,
/// where it would also redirect h5py (and break hdf5plugin's writes in rabbit's TensorWriter). An entry that is
/// not a directory is skipped (HDF5 would end its whole search there), with a warning on stderr naming it and
/// the option or variable that gave it when `report` (rank 0); HDF5's built-in default is skipped silently.
void find_filter_plugins(const std::string& option, index_t ranks, bool report) {
  std::ostringstream unreported;
  std::ostream& warn = report ? static_cast<std::ostream&>(std::cerr) : unreported;
  std::vector<std::string> dirs = io::hdf5::plugin_directories(option, "--hdf5PluginPath", warn);
  if (const char* env = std::getenv("FITLIB_HDF5_PLUGIN_PATH"))
    for (auto& d : io::hdf5::plugin_directories(env, "FITLIB_HDF5_PLUGIN_PATH", warn)) dirs.push_back(std::move(d));
#ifdef FITLIB_HDF5_PLUGIN_DIR
  if (std::filesystem::is_directory(FITLIB_HDF5_PLUGIN_DIR)) dirs.emplace_back(FITLIB_HDF5_PLUGIN_DIR);
#endif
  for (auto& d : io::hdf5::plugin_search_path()) dirs.push_back(std::move(d));
  // What is left out now is HDF5's own path: HDF5_PLUGIN_PATH's entries, else its built-in default.
  const char* hdf5_env = std::getenv("HDF5_PLUGIN_PATH");
  for (const auto& d : io::hdf5::set_plugin_search_path(dirs))
    if (hdf5_env != nullptr && *hdf5_env != '\0') (void)io::hdf5::plugin_directories(d, "HDF5_PLUGIN_PATH", warn);
  // Python is asked in a single process only (no fork under MPI), and only when Blosc2 or rabbit's Blosc (meta) is missing.
  if (ranks > 1 || (io::hdf5::filter_available(32026) && io::hdf5::filter_available(32001))) return;
  std::FILE* py = popen("python3 -c 'import hdf5plugin, sys; sys.stdout.write(hdf5plugin.PLUGINS_PATH)' 2>/dev/null", "r");
  if (py == nullptr) return;
  std::string dir;
  for (char buf[512]; const std::size_t n = std::fread(buf, 1, sizeof buf, py);) dir.append(buf, n);
  if (pclose(py) == 0 && std::filesystem::is_directory(dir)) {
    dirs.push_back(dir);
    (void)io::hdf5::set_plugin_search_path(dirs);  // every entry was checked above
  }
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

TrustRegionOptions minimizer_options(const Args& a) {
  TrustRegionOptions o;
  o.gtol = a.gtol;
  o.edm_tol = a.edm_tol;
  o.maxiter = a.maxiter;
  o.validate();
  return o;
}

nlohmann::json options_json(const Args& a) {
  return {{"toys", a.toys},
          {"seed", std::to_string(a.seed)},  // a string: 0 … 2⁶⁴−1, beyond what double-based JSON readers hold exactly
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
          {"scan2D", a.scan2d},
          {"saveHists", a.save_hists},
          {"computeHistCov", a.hist_cov},
          {"computeVariations", a.hist_variations},
          {"computeHistErrorsPerProcess", a.hist_process_errors},
          {"noChi2", a.no_chi2},
          {"mapping", a.mappings},
          {"unblind", a.unblind_all ? nlohmann::json("all") : nlohmann::json(a.unblind)},
          {"threads", a.threads},
          {"device", a.device},
          {"devices", a.devices},
          {"nDevices", a.n_devices},
          {"ranks", a.ranks}};
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
      {"RabbitReadOptions::max_meta_bytes", "--maxMetaMiB"},
      {"a larger FileOptions::max_compression_ratio", "a larger --maxCompressionRatio"},
      {"FileOptions::max_compression_ratio", "--maxCompressionRatio"},
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

}  // namespace fitlib::cli
