// SPDX-License-Identifier: MIT
// fitlib-fit: fits a rabbit input tensor (rabbit-likelihood-and-format.md §1) and writes the results
// as HDF5 (docs/results-format.md) and, with --json, a JSON summary. Options follow rabbit_fit.py's
// (§6) where rabbit has them. The command line is in command_line.cpp, the fits in runs.hpp, the
// report on stdout in report.cpp; this file reads the input, runs, writes and reports.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "command_line.hpp"
#include "fitlib/fit.hpp"
#include "fitlib/io/output_file.hpp"
#include "fitlib/io/rabbit.hpp"
#include "fitlib/io/results.hpp"
#include "report.hpp"
#include "runs.hpp"

using namespace fitlib;
using namespace fitlib::cli;

namespace {

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

#ifdef FITLIB_FIT_MPI
/// Whether an MPI launcher (mpirun or mpiexec of Open MPI, MPICH or Intel MPI, srun with PMI or PMIx) started this
/// process: only then is MPI initialised, since a singleton's start-up alone takes a third of a second, more than a
/// small fit. FITLIB_MPI=1 asks for MPI under a launcher these variables miss.
bool launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMI_RANK", "PMIX_RANK"})
    if (const char* s = std::getenv(v); s != nullptr && *s != '\0') return true;
  const char* forced = std::getenv("FITLIB_MPI");
  return forced != nullptr && std::string(forced) == "1";
}
#endif

}  // namespace

int main(int argc, char** argv) {
  Args a;
#ifdef FITLIB_FIT_MPI
  std::optional<mpi::Session> mpi_session;
  if (launched_by_mpi()) {
    mpi_session.emplace(&argc, &argv);
    a.rank = mpi::rank_of(MPI_COMM_WORLD);
    a.ranks = mpi::size_of(MPI_COMM_WORLD);
  }
#endif
  if (const std::optional<int> rc = parse_command_line(argc, argv, a)) return *rc;

  try {
    check_arguments(a);
#ifdef FITLIB_FIT_CUDA
    if (a.device == "cuda") resolve_cuda_devices(a);
#endif
    find_filter_plugins(a.plugin_path, a.ranks, a.rank == 0);
    const std::vector<BinRange> shards = own_shards(a);  // first: it sets --threads' default
    const LikelihoodOptions lo = likelihood_options(a);
    const auto t0 = std::chrono::steady_clock::now();
    io::RabbitReadOptions ro;
    ro.allow_negative_yields = a.allow_negative_expectation;
    ro.max_meta_bytes = static_cast<std::size_t>(a.max_meta_mib) << 20;  // 1 … 2²⁰ MiB (check_arguments)
    if (!a.systematic_type.empty()) ro.systematic_type = a.systematic_type == "normal" ? SystematicType::normal : SystematicType::log_normal;
    io::RabbitTensor in = read_input(a, ro, shards);
    if (!in.meta_skipped.empty() && a.rank == 0) std::fprintf(stderr, "fitlib-fit: note: %s\n", in_command_line_terms(in.meta_skipped).c_str());
    if (!in.channels_skipped.empty() && a.rank == 0 && !a.quiet) std::fprintf(stderr, "fitlib-fit: note: %s\n", in.channels_skipped.c_str());
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
                   in.model.sparse() ? "sparse" : "dense", in.model.nbins(), in.model.nbins_full() - in.model.nbins(), in.model.nprocs(),
                   in.model.nsyst(), read_seconds);
    if (!a.quiet && a.rank == 0) std::fprintf(stderr, "fitlib-fit: channels: %s\n", describe_channels(in.model.channels).c_str());

    if (a.method == "auto") {
      a.method = resolve_minimizer(a.method, in.model, a.device != "cuda");
      if (!a.quiet && a.rank == 0)
        std::fprintf(stderr, "fitlib-fit: minimizer %s (--minimizerMethod auto: a dense Hessian costs ~%.0f passes over the templates)\n",
                     a.method.c_str(), cost_model(in.model).hessian_passes());
    }
    auto model = std::make_shared<const Model>(std::move(in.model));
    const Fits fits = storage::visit(*model, [&]<class S>(S) { return run_all<S>(a, model, shards, ro, lo, in); });
    bool all_converged = true;
    for (const auto& f : fits.records) all_converged = all_converged && f.result.converged();
    if (a.rank > 0) return all_converged ? 0 : 3;  // rank 0 writes and reports

    io::RunInfo run;
    run.input_path = a.input;
    run.input_sha256 = in.sha256;
    for (int i = 0; i < argc; ++i) run.command_line += (i ? " " : "") + std::string(argv[i]);
    run.options = options_json(a);
    run.options["systematicType"] = model->systematic_type == SystematicType::normal ? "normal" : "log_normal";  // as fitted
    run.model = io::ModelInfo::of(*model);
    // A failed write (a full disk, a vanished directory) still shows the results on stdout; any earlier
    // file at the output paths is left as it was (io::ReplacingFile). A directory flush that fails after
    // the renames is only a warning: the files are in place, and a reader finds them.
    std::string write_error, write_warning;
    const auto t_write = std::chrono::steady_clock::now();
    try {
      // Both files written and flushed to disk before either is renamed into place, the two renames back to
      // back, so that the pair is one run's (docs/results-format.md, "Writing").
      io::ReplacingFile results(a.output);
      results.write(io::results_image(a.output, run, fits.records, fits.toys), "the results file");
      std::optional<io::ReplacingFile> summary;
      if (a.json) summary.emplace(json_path(a)).write(io::results_json_text(run, fits.records, fits.toys), "the JSON summary");
      io::commit_all({&results, summary ? &*summary : nullptr});
    } catch (const io::not_durable_error& e) {
      write_warning = e.what();
    } catch (const std::exception& e) {  // a file_error, or no memory for the image
      write_error = e.what();
    }
    const double write_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_write).count();
    for (const auto& f : fits.records)
      if (!is_toy(f)) print_summary(*model, f, lo);
    if (fits.toys) print_toy_summary(*fits.toys, fits.records);
    const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!write_error.empty()) {
      std::fflush(stdout);
      std::fprintf(stderr, "fitlib-fit: error: the results were computed but could not be written: %s\n", write_error.c_str());
      return 4;
    }
    if (!write_warning.empty()) {
      std::fflush(stdout);
      std::fprintf(stderr, "fitlib-fit: warning: %s (the results are in place; the exit status counts them written)\n", write_warning.c_str());
    }
    std::printf("\nwrote %s%s in %.3f s; total %.3f s\n", a.output.c_str(), a.json ? (" and " + json_path(a)).c_str() : "", write_seconds, total);
    if (!a.rabbit_output.empty()) {
      std::fflush(stdout);
      if (const int rc = write_rabbit_output(a); rc != 0) {
        std::fprintf(stderr, "fitlib-fit: error: rabbit's layout (--rabbitOutput '%s') was not written (%s -m fitlib.rabbit exited with %d); "
                     "the results are in %s\n", a.rabbit_output.c_str(), rabbit_python().c_str(), rc, a.output.c_str());
        return 4;
      }
      std::printf("wrote %s (rabbit's layout)\n", a.rabbit_output.c_str());
    }
    return all_converged ? 0 : 3;
  } catch (const fitlib::error& e) {
    return fail(a, e.what());
  } catch (const std::invalid_argument& e) {
    return fail(a, e.what());
  } catch (const std::exception& e) {  // not bad input: a fault (no memory, a library's own error), still said, never a terminate
    return fail(a, (std::string("unexpected failure: ") + e.what()).c_str());
  }
}
