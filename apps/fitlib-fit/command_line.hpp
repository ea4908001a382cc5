// SPDX-License-Identifier: MIT
// fitlib-fit's command line: its options, their checks, and the library options they set.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "fitlib/fit.hpp"

namespace fitlib::cli {

/// Everything the command line sets.
struct Args {
  std::string input, output = "fitresults.hdf5";
  std::string outname;  ///< --outname: with -o a directory (rabbit's -o DIR --outname NAME), the file in it
  std::string plugin_path;  ///< --hdf5PluginPath
  std::string rabbit_output;  ///< --rabbitOutput: rabbit's fitresults layout too, written by `python -m fitlib.rabbit`
  bool json = false, quiet = false;
  std::vector<int> toys = {-1};
  std::string seed_text = "123456789";  ///< as given; `seed` once checked
  std::uint64_t seed = 123456789;
  std::string toys_syst = "frequentist", toys_data = "poisson", toys_data_mode = "expected";
  int replica_batch = 0;
  std::vector<std::string> pseudodata;
  bool use_pseudodata = false;
  std::string method = "auto", preconditioning = "none";
  double gtol = 0, edm_tol = 1e-12;
  index_t maxiter = 0;
  bool no_bbb = false;
  std::string bbb_type = "automatic", bbb_mode = "lite", bbb_zero_variance = "exclude";
  double min_kstat = 0;
  bool chisq = false, covariance = false, allow_negative_poi = false, allow_negative_expectation = false;
  std::string systematic_type;  ///< empty: the tensor's meta says (log_normal without one)
  /// --maxCompressionRatio: io::hdf5::FileOptions::max_compression_ratio of the input (its default)
  double max_compression_ratio = 2048;
  std::int64_t max_meta_mib = 64;  ///< --maxMetaMiB: the largest `meta` pickle read (RabbitReadOptions::max_meta_bytes)
  std::vector<std::pair<std::string, double>> expect_signal, constraint_minimum;
  std::vector<std::string> freeze;
  bool impacts = false, global_impacts = false, no_hessian = false;
  std::vector<std::string> scan;
  bool do_scan = false;
  std::vector<std::pair<std::string, std::string>> scan2d;  ///< --scan2D A B (repeatable)
  bool save_hists = false;
  bool hist_cov = false;         ///< --computeHistCov
  bool hist_variations = false;  ///< --computeVariations
  bool hist_process_errors = false;  ///< --computeHistErrorsPerProcess
  bool no_chi2 = false;          ///< --noChi2
  std::vector<std::vector<std::string>> mappings;  ///< -m/--mapping KIND ARG… (repeatable)
  index_t scan_points = 15;
  double scan_range = 3;
  std::vector<std::string> unblind;
  bool unblind_all = false;
  int threads = 0;  ///< --threads; 0: every core, as many as the bins allow (own_shards sets it; with --device cuda, the devices' shards)
  std::string device = "cpu";  ///< --device: cpu, or cuda (in a binary built with nvcc: FITLIB_FIT_CUDA)
  std::vector<int> devices;    ///< --devices 0,2: the CUDA devices by id, one shard each
  int n_devices = 0;           ///< --nDevices N: the N least occupied CUDA devices (NVML); 0: --devices, else 1
  index_t rank = 0, ranks = 1;  ///< this process's MPI rank and the number of ranks (1 without mpirun)
};

/// Parses the command line into `a`; an exit status when the program ends here (--help: 0, a
/// malformed command line: 2, the message said).
std::optional<int> parse_command_line(int argc, char** argv, Args& a);
/// The checks that need no file (option combinations, the seed, the output paths), before anything is
/// read, so that no run's work is lost to a bad option; throws usage_error naming the option.
void check_arguments(Args& a);

LikelihoodOptions likelihood_options(const Args& a);
ToyOptions toy_options(const Args& a);
/// The options of every fit of the run; toys fitted in batches use them too, so that a batched toy
/// is the same fit as a toy fitted alone.
FitOptions fit_options(const Args& a);
ScanOptions scan_options(const Args& a);
TrustRegionOptions minimizer_options(const Args& a);
/// The options as the results file records them.
nlohmann::json options_json(const Args& a);
/// The JSON summary beside the results file (--json).
std::string json_path(const Args& a);

/// Applies --expectSignal and --setConstraintMinimum to the model, naming unknown parameters.
void adjust_model(Model& m, const Args& a);
/// The Python that writes rabbit's layout (--rabbitOutput): $FITLIB_PYTHON, else python3 on the PATH.
std::string rabbit_python();
/// `python -m fitlib.rabbit RESULTS OUTPUT --tensor INPUT`: rabbit's layout of the written results (--rabbitOutput).
/// Its exit status; -1 when it could not start or ended by a signal.
int write_rabbit_output(const Args& a);
/// Sets HDF5's plugin search path (command_line.cpp); `report`: warn on stderr about entries that are not directories.
void find_filter_plugins(const std::string& option, index_t ranks, bool report);
/// A library message with the library's option fields replaced by the flags that set them here, so that a
/// user reads what to type.
std::string in_command_line_terms(std::string message);

}  // namespace fitlib::cli
