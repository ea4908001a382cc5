// SPDX-License-Identifier: MIT
// Peak resident memory of a data fit with bin-by-bin statistics on a sparse rabbit tensor, against the model's own size.
//
// BM_SparseFitMemory/bins:B/nsyst:S — a sparse asymmetric tensor (14 processes, 1 signal, every cell
// non-zero, each systematic varying a cell with probability 1.75 %, both its K and H entries then non-zero, so 1.75 %
// of the logk tensor [B, 14, 2, S]; MC variances of 30–50 effective events per cell) is built and written with
// io::write_rabbit (gzip, as fitlib writes) in one child process. A second, fresh child process (forked from this
// small benchmark process, which never holds a model) then does what `fitlib-fit tensor.hdf5 -t 0` does: read_rabbit(path)
// (SHA-256 on its own thread), a one-shard SparseSerialLikelihood with bin-by-bin statistics (Barlow–Beeston lite,
// rabbit's default), TrustRegion<Gltr> (rabbit's trust-krylov) to EDM < 1e-8, and the postfit covariance (the dense
// Hessian and its inverse). The numbers are that child's, from /proc/self/status:
//   peak_rss_bytes     its peak resident set (VmHWM) at the end, less its resident set when it started
//                      (baseline_rss_bytes, what fork gave it: a few MB): the memory the read and the fit took;
//   read_peak_bytes    the same peak measured right after read_rabbit returned (the reader's own peak);
//   model_bytes        the model's own arrays as read: the CSR tensor (8 bytes per index, 8 per value), nominal
//                      yields, sumw2, data, per-systematic vectors;
//   file_bytes         the HDF5 file's size;
//   hessian_bytes      8·n² for the n fit parameters: one dense n × n matrix (the postfit Hessian, the covariance and
//                      the factorisation each hold one);
//   rss_per_model      peak_rss_bytes / model_bytes: what a fit costs per byte of the tensor it fits;
//   fit_seconds, iterations, hvps, converged: the fit (also the benchmark's manual time: read + fit).
// A size whose build, write or fit would need more than the machine's available memory (MemAvailable, estimated
// from the non-zeros and n) is skipped with an error saying so. The file goes to $TMPDIR (or /tmp) and is removed.
// Linux only. Results and the command: docs/benchmarks.md.
#include <benchmark/benchmark.h>

#if defined(__linux__)
#include <sys/wait.h>
#include <unistd.h>
#endif

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <fitlib/fit.hpp>
#include <fitlib/io/rabbit.hpp>
#include <fitlib/io/rabbit_writer.hpp>

#include "synthetic_model.hpp"

namespace {

using fitlib::index_t;
using fitlib::bench::hash_uniform;
using clock_type = std::chrono::steady_clock;

constexpr index_t procs = 14;
constexpr double density = 0.0175;

/// A field of /proc/self/status in bytes (VmHWM, VmRSS, ...), or -1.
double status_bytes(const char* field) {
  std::ifstream status("/proc/self/status");
  const std::size_t n = std::strlen(field);
  for (std::string line; std::getline(status, line);)
    if (line.compare(0, n, field) == 0 && line.size() > n && line[n] == ':') return 1024.0 * std::strtod(line.c_str() + n + 1, nullptr);
  return -1;
}

/// MemAvailable of /proc/meminfo in bytes, or -1.
double available_bytes() {
  std::ifstream info("/proc/meminfo");
  for (std::string line; std::getline(info, line);)
    if (line.rfind("MemAvailable:", 0) == 0) return 1024.0 * std::strtod(line.c_str() + 13, nullptr);
  return -1;
}

/// The systematics that vary cell `cell`, in increasing order: a Bernoulli(density) draw per systematic, made with
/// geometric gaps from a counter hash (so O(density·nsyst) per cell, and the same draws whenever asked).
template <class F>
void varied(std::uint64_t cell, index_t nsyst, F&& each) {
  const double log_q = std::log1p(-density);
  std::uint64_t draw = cell * 0x9e3779b97f4a7c15ULL;
  for (index_t s = -1;;) {
    const double u = 0.5 * (hash_uniform(draw++) + 1.0);  // [0, 1)
    s += 1 + static_cast<index_t>(std::floor(std::log1p(-u) / log_q));
    if (s >= nsyst) return;
    each(s);
  }
}

/// The sparse asymmetric model of `bins` × 14 processes × `nsyst` systematics described above, its CSR arrays sized
/// exactly (a counting pass first), so building it holds the model once.
fitlib::Model sparse_model(index_t bins, index_t nsyst) {
  fitlib::Model m;
  m.channels.push_back({"ch", bins, false});
  for (index_t p = 0; p < procs; ++p) m.processes.push_back({"p" + std::to_string(p), p == 0});
  for (index_t s = 0; s < nsyst; ++s) m.systematics.push_back({"s" + std::to_string(s)});
  m.symmetric = false;
  m.theta0.assign(static_cast<std::size_t>(nsyst), 0.0);
  m.constraint_weights.assign(static_cast<std::size_t>(nsyst), 1.0);
  m.poi_default = {1.0};
  const index_t cells = bins * procs;
  fitlib::SparseTemplates t;
  t.nbins_full = bins;
  t.nprocs = procs;
  t.ncoef = 2 * nsyst;
  std::size_t nnz = 0;
  for (index_t i = 0; i < cells; ++i) varied(static_cast<std::uint64_t>(i), nsyst, [&](index_t) { nnz += 2; });
  t.bin_begin.resize(static_cast<std::size_t>(bins + 1));
  for (index_t b = 0; b <= bins; ++b) t.bin_begin[static_cast<std::size_t>(b)] = b * procs;
  t.cell_process.resize(static_cast<std::size_t>(cells));
  t.cell_nominal.resize(static_cast<std::size_t>(cells));
  t.row_begin.resize(static_cast<std::size_t>(cells + 1));
  t.col.resize(nnz);
  t.val.resize(nnz);
  m.sumw2.resize(static_cast<std::size_t>(cells));
  std::vector<index_t> mine;
  std::size_t k = 0;
  for (index_t i = 0; i < cells; ++i) {
    const auto c = static_cast<std::size_t>(i);
    const double n = 50.0 + 40.0 * hash_uniform(c);
    t.cell_process[c] = i % procs;
    t.cell_nominal[c] = n;
    m.sumw2[c] = n * n / (40.0 + 10.0 * hash_uniform(c + 0xbbULL));
    t.row_begin[c] = static_cast<index_t>(k);
    mine.clear();
    varied(c, nsyst, [&](index_t s) { mine.push_back(s); });
    for (const index_t s : mine) {  // K (average) entries, then H (half-difference) entries: columns ascending
      t.col[k] = s;
      t.val[k++] = 0.03 * hash_uniform((c << 20) + static_cast<std::uint64_t>(s) + 0x1234567ULL);
    }
    for (const index_t s : mine) {
      t.col[k] = nsyst + s;
      t.val[k++] = 0.005 * hash_uniform((c << 20) + static_cast<std::uint64_t>(s) + 0x7654321ULL);
    }
  }
  t.row_begin[static_cast<std::size_t>(cells)] = static_cast<index_t>(k);
  m.data.resize(static_cast<std::size_t>(bins));
  for (index_t b = 0; b < bins; ++b) {
    double nu = 0;
    for (index_t p = 0; p < procs; ++p) nu += t.cell_nominal[static_cast<std::size_t>(b * procs + p)];
    m.data[static_cast<std::size_t>(b)] = std::round(nu * (1.0 + 0.03 * hash_uniform(static_cast<std::uint64_t>(b) + 77)));
  }
  m.templates = std::move(t);
  return m;
}

/// The bytes of the model's own arrays.
double model_bytes(const fitlib::Model& m) {
  const auto bytes = [](const auto& v) { return static_cast<double>(v.size() * sizeof(v[0])); };
  double total = bytes(m.data) + bytes(m.data_variance) + bytes(m.data_covariance_inverse) + bytes(m.sumw2) + bytes(m.sumw) + bytes(m.theta0) +
                 bytes(m.constraint_weights);
  if (const fitlib::SparseTemplates* t = m.sparse())
    total += bytes(t->bin_begin) + bytes(t->cell_process) + bytes(t->cell_nominal) + bytes(t->row_begin) + bytes(t->col) + bytes(t->val);
  else if (const fitlib::DenseTemplates* d = m.dense())
    total += bytes(d->nominal) + bytes(d->logk);
  return total;
}

/// What the fitting child reports.
struct Report {
  double baseline = 0, read_peak = 0, peak = 0, model = 0, fit_seconds = 0, total_seconds = 0, iterations = 0, hvps = 0, converged = 0;
  char error[512] = {};
};

#if defined(__linux__)
/// Runs `body(Report&)` in a forked child and returns what it filled in (error set if it failed or died).
template <class F>
Report in_child(F&& body) {
  int fds[2];
  Report r;
  if (pipe(fds) != 0) {
    std::snprintf(r.error, sizeof r.error, "pipe failed");
    return r;
  }
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    Report mine;
    try {
      body(mine);
    } catch (const std::exception& e) {
      std::snprintf(mine.error, sizeof mine.error, "%s", e.what());
    }
    (void)!write(fds[1], &mine, sizeof mine);
    _exit(0);
  }
  close(fds[1]);
  std::size_t got = 0;
  for (ssize_t n; got < sizeof r && (n = read(fds[0], reinterpret_cast<char*>(&r) + got, sizeof r - got)) > 0;) got += static_cast<std::size_t>(n);
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (got != sizeof r) std::snprintf(r.error, sizeof r.error, "the child process died (status %d)", status);
  return r;
}
#endif

void BM_SparseFitMemory(benchmark::State& state) {
#if !defined(__linux__)
  state.SkipWithError("needs Linux (fork, /proc/self/status)");
  for (auto _ : state) {
  }
#else
  const index_t bins = state.range(0), nsyst = state.range(1);
  const double nnz = 2.0 * density * static_cast<double>(bins * procs * nsyst), n = static_cast<double>(nsyst + 1);
  // Writing holds the model (16 B per non-zero) and its COO copy (24 B); the fit the model, the reader's transient
  // COO arrays, and about four n × n matrices.
  const double need = std::max(40.0 * nnz, 40.0 * nnz + 4 * 8.0 * n * n) + (std::size_t{1} << 30);
  if (const double avail = available_bytes(); avail > 0 && need > avail) {
    state.SkipWithError(("needs about " + std::to_string(static_cast<long long>(need / 1e9)) + " GB, " +
                         std::to_string(static_cast<long long>(avail / 1e9)) + " GB available")
                            .c_str());
    for (auto _ : state) {
    }
    return;
  }
  const char* tmp = std::getenv("TMPDIR");
  const std::string path = (std::filesystem::path(tmp && *tmp ? tmp : "/tmp") /
                            ("fitlib_bench_memory_" + std::to_string(getpid()) + "_" + std::to_string(bins) + "_" + std::to_string(nsyst) + ".hdf5"))
                               .string();
  const Report written = in_child([&](Report& r) {
    const fitlib::Model m = sparse_model(bins, nsyst);
    r.model = model_bytes(m);
    fitlib::io::write_rabbit(path, m);
  });
  if (written.error[0]) {
    std::filesystem::remove(path);
    state.SkipWithError((std::string("writing the tensor failed: ") + written.error).c_str());
    for (auto _ : state) {
    }
    return;
  }
  Report r;
  for (auto _ : state) {
    r = in_child([&](Report& out) {
      out.baseline = status_bytes("VmRSS");
      const auto t0 = clock_type::now();
      fitlib::io::RabbitTensor in = fitlib::io::read_rabbit(path);
      out.read_peak = status_bytes("VmHWM");
      out.model = model_bytes(in.model);
      fitlib::SparseSerialLikelihood lik(std::make_shared<const fitlib::Model>(std::move(in.model)));
      fitlib::TrustRegionOptions opts;
      opts.gtol = 1e-6;
      opts.edm_tol = 1e-8;
      const fitlib::TrustRegion<fitlib::Gltr> minimizer(opts);
      const auto t1 = clock_type::now();
      const fitlib::FitResult fit = fitlib::fit(lik, minimizer);
      const auto t2 = clock_type::now();
      out.peak = status_bytes("VmHWM");
      out.fit_seconds = std::chrono::duration<double>(t2 - t1).count();
      out.total_seconds = std::chrono::duration<double>(t2 - t0).count();
      out.iterations = static_cast<double>(fit.iterations);
      out.hvps = static_cast<double>(fit.counts.hvps);
      out.converged = fit.converged() ? 1 : 0;
    });
    state.SetIterationTime(r.total_seconds);
  }
  const double file = std::filesystem::exists(path) ? static_cast<double>(std::filesystem::file_size(path)) : 0.0;
  std::filesystem::remove(path);
  if (r.error[0]) {
    state.SkipWithError((std::string("the fit failed: ") + r.error).c_str());
    return;
  }
  state.counters["peak_rss_bytes"] = r.peak - r.baseline;
  state.counters["read_peak_bytes"] = r.read_peak - r.baseline;
  state.counters["baseline_rss_bytes"] = r.baseline;
  state.counters["model_bytes"] = r.model;
  state.counters["file_bytes"] = file;
  state.counters["hessian_bytes"] = 8.0 * n * n;
  state.counters["rss_per_model"] = (r.peak - r.baseline) / r.model;
  state.counters["fit_seconds"] = r.fit_seconds;
  state.counters["iterations"] = r.iterations;
  state.counters["hvps"] = r.hvps;
  state.counters["converged"] = r.converged;
#endif
}

}  // namespace

// Bins × systematics: the corners of 10⁴–10⁵ × 10³–10⁴, and 2·10⁴ × 10³ (a 34 MB rabbit tensor of that shape was the
// issue's example). The last needs ~25 GB and is skipped on smaller machines.
BENCHMARK(BM_SparseFitMemory)
    ->ArgNames({"bins", "nsyst"})
    ->Args({10000, 1000})
    ->Args({20000, 1000})
    ->Args({100000, 1000})
    ->Args({10000, 10000})
    ->Args({100000, 10000})
    ->Iterations(1)
    ->UseManualTime()
    ->Unit(benchmark::kSecond);

BENCHMARK_MAIN();
