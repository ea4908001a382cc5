// SPDX-License-Identifier: MIT
// Bins-sharded likelihoods (cpu::Threads shards, mpi::Ranks) against one shard timed in the same run.
//
// Kernels, each the evaluation a fit repeats: NllGrad = value_grad at a new point (two points
// alternate, so no forward product is cached); Hvp = hessp with one direction at an iterate whose
// gradient was evaluated (what Gltr and SteihaugCG call per Krylov step); Hessian = the dense
// Hessian at a point.
//
// BM_Threads/<kernel>/<model>/shards:k — a likelihood on cpu::Threads{k} and a one-shard
// SerialLikelihood over the same model, evaluated alternately in every iteration (the reported
// time is the sharded one's):
//   ms_per_eval         median time of one sharded evaluation;
//   ms_per_eval_1shard  median time of one one-shard evaluation, in the same iterations;
//   speedup             ms_per_eval_1shard / ms_per_eval;
//   parallel_efficiency speedup / shards (shards:1 shows the cost of the threaded policy itself);
//   triad_efficiency    STREAM triad bandwidth on k threads / (k × on one thread), measured once in
//                       this run: the parallel_efficiency a purely bandwidth-bound kernel can reach.
//
// BM_MPI/<kernel>/<model>/ranks:R — only under an MPI launcher (`mpirun -n N bench_sharding`,
// built with FITLIB_BENCH_MPI), for R = 1 and R = N: Likelihood<Shard<mpi::Ranks<cpu::Serial>,
// storage::Dense>> over the first R ranks, each holding only its bins' template rows (a model
// with the templates' `held`, built directly for the rank's part of partition_bins). Rank 0 first times
// the one-shard SerialLikelihood over the whole model alone, the other ranks waiting in a barrier,
// then frees it; then every rank builds its slice and all run the same fixed number of
// evaluations, each after a barrier. Counters (printed by rank 0 only):
//   ms_per_eval, ms_per_eval_1shard, speedup as above; parallel_efficiency = speedup / R;
//   tensor_bytes        the whole template tensor;
//   bytes_per_rank      the template bytes a rank holds (the largest over the ranks);
//   slice_fraction      bytes_per_rank / tensor_bytes (1/R for an even split);
//   peak_rss_bytes      the largest peak resident set (VmHWM) over the ranks, since the slices were
//                       built (the high-water mark is reset after rank 0 freed its reference);
//   rss_per_slice       peak_rss_bytes / bytes_per_rank: ≈ 1 when a rank holds its slice and little else.
//
// A plain run has the BM_Threads benchmarks; a run under an MPI launcher only the BM_MPI ones.
// Every benchmark first checks one evaluation of the sharded likelihood against the one-shard
// one (value and every output to 1e-12 relative, as max(1, |reference|)), else it is skipped
// with an error. Results and commands: docs/benchmarks.md.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include <fitlib/fit.hpp>

#if FITLIB_BENCH_MPI
#include <fitlib/device/mpi.hpp>

#include <optional>
#endif

#include "machine_limits.hpp"
#include "synthetic_model.hpp"

namespace {

using namespace fitlib;
using fitlib::bench::Config;
using fitlib::bench::hash_uniform;
using fitlib::bench::synthetic_model;
using clock_type = std::chrono::steady_clock;

// Models: ~2 GB or less, and one of 9.6 GB (rank 0 holds it whole for the reference, then frees it;
// the threaded run holds it once beside 768 MB of triad arrays).
const Config large{100000, 8, 300, false};               // 1.92 GB of templates; NllGrad ~ 85 ms on one core
const Config large_sparse{100000, 8, 300, false, 0.1};   // 10 % non-zero: 24·10⁶ entries, 0.4 GB as CSR
const Config hessian_model{20000, 8, 200, false};        // 0.26 GB; the Hessian's work grows with nsyst²
const Config largest{500000, 8, 300, false};             // 9.6 GB: the largest that fits twice in 24 GiB (rank 0's reference, then the slices)

enum class Kernel { nll_grad, hvp, hessian };

const char* name_of(Kernel k) {
  switch (k) {
    case Kernel::nll_grad: return "NllGrad";
    case Kernel::hvp: return "Hvp";
    case Kernel::hessian: return "Hessian";
  }
  return "";
}

/// The points every likelihood of a model is evaluated at: two iterates (POI at √μ = 1.05, θ
/// within ±0.7) and one direction.
struct Point {
  std::vector<double> x[2], v;
  explicit Point(index_t n) {
    for (int s = 0; s < 2; ++s)
      for (index_t i = 0; i < n; ++i)
        x[s].push_back(i == 0 ? 1.05 : 0.7 * hash_uniform(static_cast<std::uint64_t>(i) + 999 + 1000003 * static_cast<std::uint64_t>(s)));
    for (index_t i = 0; i < n; ++i) v.push_back(hash_uniform(static_cast<std::uint64_t>(i) + 4242));
  }
};

/// What one evaluation gives: the value (not for Hvp), the gradient (Hessian only) and the
/// kernel's main output (gradient, Hessian-vector product, or Hessian).
struct Outputs {
  double f = 0;
  std::vector<double> g, out;
};

/// What a fit has evaluated before the kernel: an HVP's iterate has had its gradient.
template <class L>
void prime(Kernel k, L& nll, const Point& p) {
  if (k != Kernel::hvp) return;
  std::vector<double> g(static_cast<std::size_t>(nll.size()));
  nll.value_grad(std::span<const double>(p.x[0]), std::span<double>(g));
}

/// Evaluation number i of the kernel (NllGrad alternates between the two points).
template <class L>
void evaluate(Kernel k, L& nll, const Point& p, Outputs& o, index_t i) {
  const index_t n = nll.size();
  const auto column = [n](const std::vector<double>& v) { return ConstBlockView<double>(v.data(), n, 1); };
  switch (k) {
    case Kernel::nll_grad:
      o.out.resize(static_cast<std::size_t>(n));
      nll.value_grad(column(p.x[i % 2]), std::span(&o.f, 1), BlockView<double>(o.out.data(), n, 1));
      break;
    case Kernel::hvp:
      o.out.resize(static_cast<std::size_t>(n));
      nll.hessp(column(p.x[0]), column(p.v), BlockView<double>(o.out.data(), n, 1));
      break;
    case Kernel::hessian:
      o.g.resize(static_cast<std::size_t>(n));
      o.out.resize(static_cast<std::size_t>(n * n));
      nll.hessian(column(p.x[0]), std::span(&o.f, 1), BlockView<double>(o.g.data(), n, 1), BlockView<double>(o.out.data(), n, n));
      break;
  }
  benchmark::DoNotOptimize(o.out.data());
}

template <class L>
double timed(Kernel k, L& nll, const Point& p, Outputs& o, index_t i) {
  const auto t0 = clock_type::now();
  evaluate(k, nll, p, o, i);
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

/// The largest |a − b| / max(1, |b|) over the value and every output.
double mismatch(const Outputs& a, const Outputs& b) {
  auto rel = [](double x, double y) { return std::abs(x - y) / std::max(1.0, std::abs(y)); };
  double worst = rel(a.f, b.f);
  if (a.g.size() != b.g.size() || a.out.size() != b.out.size()) return INFINITY;
  for (std::size_t i = 0; i < a.g.size(); ++i) worst = std::max(worst, rel(a.g[i], b.g[i]));
  for (std::size_t i = 0; i < a.out.size(); ++i) worst = std::max(worst, rel(a.out[i], b.out[i]));
  return std::isnan(worst) ? INFINITY : worst;
}

constexpr double tolerance = 1e-12;

std::string mismatch_message(double e) {
  std::ostringstream os;
  os << "the sharded likelihood differs from the one-shard one by " << e << " relative (tolerance " << tolerance << ")";
  return os.str();
}

double median(std::vector<double> t) {
  if (t.empty()) return NAN;
  std::sort(t.begin(), t.end());
  const std::size_t m = t.size() / 2;
  return t.size() % 2 ? t[m] : 0.5 * (t[m - 1] + t[m]);
}

/// Triad bandwidth on k threads / (k × on one): the parallel efficiency a purely bandwidth-bound
/// kernel can reach on this machine, measured once per run and k.
double triad_efficiency(index_t k) {
  static std::map<index_t, double> ratio;
  if (!ratio.contains(k)) ratio[k] = bench::triad_bandwidth_on(k) / (static_cast<double>(k) * bench::triad_bandwidth());
  return ratio[k];
}

void report_speedup(benchmark::State& state, double one_shard, double sharded, index_t shards) {
  state.counters["ms_per_eval"] = 1e3 * sharded;
  state.counters["ms_per_eval_1shard"] = 1e3 * one_shard;
  state.counters["speedup"] = one_shard / sharded;
  state.counters["parallel_efficiency"] = one_shard / sharded / static_cast<double>(shards);
}

LikelihoodOptions options_for(const Config& c) {
  LikelihoodOptions o;
  o.bin_by_bin.enabled = c.bin_by_bin;
  return o;
}

/// The model of the configuration being benchmarked; the previous one is freed first.
std::shared_ptr<const Model> model_of(const Config& c) {
  static std::string current;
  static std::shared_ptr<const Model> model;
  if (current != c.name()) {
    model.reset();
    model = synthetic_model(c);
    current = c.name();
  }
  return model;
}

template <class Storage>
void BM_Threads(benchmark::State& state, Config c, Kernel kernel, index_t k) {
  const auto model = model_of(c);
  // Building a likelihood over a held model is cheap (the shards read its templates in place).
  Likelihood<Shard<cpu::Serial, Storage>> one(model, cpu::Serial{}, options_for(c));
  Likelihood<Shard<cpu::Threads, Storage>> sharded(model, cpu::Threads{k}, options_for(c));
  const Point p(one.size());
  prime(kernel, one, p);
  prime(kernel, sharded, p);
  Outputs a, b;
  index_t i = 0;
  evaluate(kernel, sharded, p, a, i);
  evaluate(kernel, one, p, b, i);
  if (const double e = mismatch(a, b); !(e <= tolerance)) {
    state.SkipWithError(mismatch_message(e).c_str());
    return;
  }
  std::vector<double> t_sharded, t_one;
  for (auto _ : state) {
    ++i;
    const bool one_first = i % 2 == 0;  // alternate the order, so neither always follows the other
    if (one_first) t_one.push_back(timed(kernel, one, p, b, i));
    t_sharded.push_back(timed(kernel, sharded, p, a, i));
    if (!one_first) t_one.push_back(timed(kernel, one, p, b, i));
    state.SetIterationTime(t_sharded.back());
  }
  report_speedup(state, median(t_one), median(t_sharded), sharded.total_shards());
  state.counters["triad_efficiency"] = triad_efficiency(k);
}

#if FITLIB_BENCH_MPI

using RankLikelihood = Likelihood<Shard<mpi::Ranks<cpu::Serial>, storage::Dense>>;

/// True when an MPI launcher started this process (Open MPI, MPICH/Hydra, PMIx).
bool launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
    if (std::getenv(v)) return true;
  return false;
}

/// The dense model of `c` as rank r of `ranks` holds it: the template rows of the rank's bins only
/// (the dense split is even, so it follows from the bin count alone), everything else whole.
std::shared_ptr<const Model> synthetic_slice(const Config& c, index_t r, index_t ranks) {
  Config shape = c;
  shape.nsyst = 0;  // no tensor: just what partition_bins needs
  const BinRange bins = partition_bins(*synthetic_model(shape), ranks)[static_cast<std::size_t>(r)];
  return synthetic_model(c, bins);
}

/// This process's peak resident set in bytes (VmHWM), since it started or reset_peak_rss.
double peak_rss_bytes() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmHWM:", 0) == 0) return 1024.0 * std::strtod(line.c_str() + 6, nullptr);
  return NAN;
}

/// Resets VmHWM to the current resident set (Linux ≥ 4.0); false where that is not allowed.
bool reset_peak_rss() {
  std::ofstream clear("/proc/self/clear_refs");
  clear << "5";
  clear.flush();
  return clear.good();
}

double max_over_ranks(double mine) {
  double all = 0;
  MPI_Allreduce(&mine, &all, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return all;
}

void BM_MPI(benchmark::State& state, Config c, Kernel kernel, int ranks) {
  const MPI_Comm world = MPI_COMM_WORLD;
  const index_t me = mpi::rank_of(world);
  const auto iterations = static_cast<std::size_t>(state.max_iterations);
  // 1. The one-shard reference, on rank 0 alone (the others wait in the barrier, in no collective).
  Outputs reference;
  std::vector<double> t_one;
  if (me == 0) {
    SerialLikelihood one(synthetic_model(c), cpu::Serial{}, options_for(c));
    const Point p(one.size());
    prime(kernel, one, p);
    evaluate(kernel, one, p, reference, 0);
    Outputs o;
    for (std::size_t i = 1; i <= iterations; ++i) t_one.push_back(timed(kernel, one, p, o, static_cast<index_t>(i)));
  }  // the whole model is freed here
  MPI_Barrier(world);

  // 2. The first `ranks` ranks, each with its slice; the others only keep count of the iterations.
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Comm_split(world, me < ranks ? 0 : MPI_UNDEFINED, static_cast<int>(me), &comm);
  const bool member = comm != MPI_COMM_NULL;
  const bool reset = reset_peak_rss();
  std::shared_ptr<const Model> slice;
  std::unique_ptr<RankLikelihood> nll;
  const Point p(1 + c.nsyst);  // [POI | θ]: a synthetic model has one signal process
  Outputs out;
  if (member) {
    slice = synthetic_slice(c, mpi::rank_of(comm), ranks);
    nll = std::make_unique<RankLikelihood>(slice, mpi::Ranks<cpu::Serial>{cpu::Serial{}, comm}, options_for(c));
    prime(kernel, *nll, p);
    evaluate(kernel, *nll, p, out, 0);
  }
  double e = me == 0 ? mismatch(out, reference) : 0.0;
  MPI_Bcast(&e, 1, MPI_DOUBLE, 0, world);  // every rank skips, or none
  if (!(e <= tolerance)) state.SkipWithError(mismatch_message(e).c_str());
  std::vector<double> t_ranks;
  index_t i = 0;
  for (auto _ : state) {
    double t = 1e-9;
    if (member) {
      MPI_Barrier(comm);
      t = timed(kernel, *nll, p, out, ++i);
      t_ranks.push_back(t);
    }
    state.SetIterationTime(t);
  }
  const double held = member ? 8.0 * static_cast<double>(slice->dense()->logk.size()) : 0.0;
  const double bytes_per_rank = max_over_ranks(held), peak = max_over_ranks(member ? peak_rss_bytes() : 0.0);
  const index_t shards = member ? nll->total_shards() : 0;
  nll.reset();
  slice.reset();
  if (member) MPI_Comm_free(&comm);
  MPI_Barrier(world);
  if (!(e <= tolerance)) return;
  report_speedup(state, median(t_one), median(t_ranks), shards);
  const double tensor = 8.0 * static_cast<double>(c.bins * c.procs) * static_cast<double>(c.asymmetric ? 2 * c.nsyst : c.nsyst);
  state.counters["tensor_bytes"] = tensor;
  state.counters["bytes_per_rank"] = bytes_per_rank;
  state.counters["slice_fraction"] = bytes_per_rank / tensor;
  state.counters["peak_rss_bytes"] = peak;
  state.counters["rss_per_slice"] = peak / bytes_per_rank;
  if (!reset) state.SetLabel("peak RSS since the process started (/proc/self/clear_refs not writable)");
}

/// Rank 0 alone reports; the others run the same benchmarks silently.
class NullReporter : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>&) override {}
};

#endif  // FITLIB_BENCH_MPI

std::string benchmark_name(const char* family, Kernel k, const Config& c, const std::string& tail) {
  return std::string(family) + "/" + name_of(k) + "/" + c.name() + "/" + tail;
}

/// The kernels run on each model: the Hessian (n² blocks) on a model of fewer systematics.
struct Case {
  Config model;
  Kernel kernel;
};
const Case thread_cases[] = {{large, Kernel::nll_grad},   {large, Kernel::hvp},         {large_sparse, Kernel::nll_grad},
                             {large_sparse, Kernel::hvp}, {hessian_model, Kernel::hessian}, {largest, Kernel::nll_grad},
                             {largest, Kernel::hvp}};
const Case mpi_cases[] = {{large, Kernel::nll_grad},   {large, Kernel::hvp}, {hessian_model, Kernel::hessian},
                          {largest, Kernel::nll_grad}, {largest, Kernel::hvp}};  // dense only

void register_threads() {
  for (const Case& c : thread_cases)
    for (index_t shards : {1, 2}) {
      const std::string name = benchmark_name("BM_Threads", c.kernel, c.model, "shards:" + std::to_string(shards));
      auto* b = c.model.sparse() ? benchmark::RegisterBenchmark(name.c_str(), BM_Threads<storage::Sparse>, c.model, c.kernel, shards)
                                 : benchmark::RegisterBenchmark(name.c_str(), BM_Threads<storage::Dense>, c.model, c.kernel, shards);
      b->UseManualTime()->Unit(benchmark::kMillisecond);
    }
}

}  // namespace

int main(int argc, char** argv) {
#if FITLIB_BENCH_MPI
  std::optional<mpi::Session> session;
  if (launched_by_mpi()) {
    session.emplace(&argc, &argv);
    const index_t world = mpi::size_of(MPI_COMM_WORLD);
    // Only rank 0 writes --benchmark_out: the others drop it, so that no two write the same file.
    if (mpi::rank_of(MPI_COMM_WORLD) != 0) {
      const auto out = [](const char* a) { return std::string(a).rfind("--benchmark_out=", 0) == 0; };
      argc = static_cast<int>(std::remove_if(argv + 1, argv + argc, out) - argv);
      argv[argc] = nullptr;
    }
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    benchmark::AddCustomContext("mpi_world_size", std::to_string(world));
    // Fixed iteration counts: every rank must run the same evaluations (each one a collective).
    std::vector<index_t> counts{1};
    if (world > 1) counts.push_back(world);
    for (const Case& c : mpi_cases)
      for (index_t ranks : counts) {
        const std::string name = benchmark_name("BM_MPI", c.kernel, c.model, "ranks:" + std::to_string(ranks));
        benchmark::RegisterBenchmark(name.c_str(), BM_MPI, c.model, c.kernel, static_cast<int>(ranks))
            ->UseManualTime()
            ->Iterations(c.kernel == Kernel::hessian ? 8 : 20)
            ->Unit(benchmark::kMillisecond);
      }
    NullReporter silent;
    if (mpi::rank_of(MPI_COMM_WORLD) == 0) benchmark::RunSpecifiedBenchmarks();
    else benchmark::RunSpecifiedBenchmarks(&silent);
    benchmark::Shutdown();
    return 0;
  }
#endif
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  register_threads();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
