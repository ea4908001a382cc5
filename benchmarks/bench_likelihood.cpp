// SPDX-License-Identifier: MIT
// Likelihood kernels on synthetic dense models, as fractions of the memory bandwidth and DGEMM rate.
//
// roofline_fraction = (template bytes, counted once per evaluation) / time / triad bandwidth;
// gemm_fraction     = (flops of the Hessian's triangular GEMMs) / time / Eigen DGEMM rate.
// Both limits are measured in this program, on this machine, at start-up.
#include <benchmark/benchmark.h>

#include <Eigen/Core>
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <fitlib/fit.hpp>

#include "machine_limits.hpp"
#include "synthetic_model.hpp"

namespace {

using fitlib::index_t;
using namespace fitlib;
using fitlib::bench::Config;
using fitlib::bench::hash_uniform;
using fitlib::bench::synthetic_model;
using clock_type = std::chrono::steady_clock;
using fitlib::bench::dgemm_rate;
using fitlib::bench::triad_bandwidth;

struct Fixture {
  std::shared_ptr<const fitlib::Model> model;
  std::unique_ptr<fitlib::SerialLikelihood> dense;
  std::unique_ptr<fitlib::SparseSerialLikelihood> sparse;
  std::vector<double> x, v, g, hv, H;
  std::uint64_t evaluations = 0;
  double template_bytes = 0;
  index_t size() const { return dense ? dense->size() : sparse->size(); }
  /// Calls f with whichever likelihood the model's storage needs.
  template <class F>
  auto with(F&& f) {
    return dense ? f(*dense) : f(*sparse);
  }
};

/// The fixture of the configuration being benchmarked; the previous one is freed first, since
/// the largest model takes 12.8 GB.
Fixture& fixture(const Config& c) {
  static std::string current;
  static Fixture f;
  if (current != c.name()) {
    f = Fixture{};
    f.model = synthetic_model(c);
    fitlib::LikelihoodOptions opts;
    opts.bin_by_bin.enabled = c.bin_by_bin;
    if (c.sparse()) f.sparse = std::make_unique<fitlib::SparseSerialLikelihood>(f.model, fitlib::cpu::Serial{}, opts);
    else f.dense = std::make_unique<fitlib::SerialLikelihood>(f.model, fitlib::cpu::Serial{}, opts);
    const index_t n = f.size();
    f.x.resize(static_cast<std::size_t>(n));
    f.v.resize(f.x.size());
    for (index_t i = 0; i < n; ++i) {
      f.x[static_cast<std::size_t>(i)] = i == 0 ? 1.05 : 0.7 * hash_uniform(static_cast<std::uint64_t>(i) + 999);
      f.v[static_cast<std::size_t>(i)] = hash_uniform(static_cast<std::uint64_t>(i) + 4242);
    }
    f.g.resize(f.x.size());
    f.hv.resize(f.x.size());
    // Bytes one pass streams: the dense rows, or the sparse values, column indices, row offsets and cells.
    f.template_bytes = c.sparse() ? static_cast<double>(detail::TemplateSlice<storage::Sparse>(*f.model, {0, c.bins}).bytes())
                                  : 8.0 * static_cast<double>(c.bins * c.procs) * static_cast<double>(f.model->ncoef());
    current = c.name();
  }
  return f;
}

/// The point of the next evaluation: x with its first parameter moved in its last bits, a new point
/// every time, so that a pass streams the templates as at a fit's new iterate instead of finding
/// its forward products in the shard's cache (forward_cache.hpp).
fitlib::ConstBlockView<double> next_point(Fixture& f) {
  f.x[0] = 1.05 + 1e-12 * static_cast<double>(++f.evaluations % 4096);
  return {f.x.data(), static_cast<index_t>(f.x.size()), 1};
}

/// Runs `evaluate` in the benchmark loop and returns the seconds per evaluation, timed around the
/// whole loop (the counters below are plain ratios, not Google Benchmark rates).
template <class F>
double run(benchmark::State& state, F&& evaluate) {
  const auto t0 = clock_type::now();
  for (auto _ : state) evaluate();
  return std::chrono::duration<double>(clock_type::now() - t0).count() / static_cast<double>(state.iterations());
}

void report_bandwidth(benchmark::State& state, double bytes, double seconds) {
  state.counters["template_GBps"] = bytes / seconds / 1e9;
  state.counters["roofline_fraction"] = bytes / seconds / triad_bandwidth();
  state.counters["triad_GBps"] = triad_bandwidth() / 1e9;
}

/// One kind of evaluation at a new point each time, timed against the triad bandwidth: each reads
/// the template tensor once.
template <class Evaluate>
void BM_Bandwidth(benchmark::State& state, Config c, Evaluate evaluate) {
  Fixture& f = fixture(c);
  const double t = run(state, [&] { benchmark::DoNotOptimize(evaluate(f)); });
  report_bandwidth(state, f.template_bytes, t);
}

fitlib::ConstBlockView<double> column(const std::vector<double>& v) { return {v.data(), static_cast<index_t>(v.size()), 1}; }
fitlib::BlockView<double> column(std::vector<double>& v) { return {v.data(), static_cast<index_t>(v.size()), 1}; }

double nll_only(Fixture& f) {
  double value = 0;
  f.with([&](auto& nll) { nll.value(next_point(f), std::span(&value, 1)); });
  return value;
}

double nll_grad(Fixture& f) {
  double value = 0;
  f.with([&](auto& nll) { nll.value_grad(next_point(f), std::span(&value, 1), column(f.g)); });
  return value;
}

/// NLL, gradient and one Hessian-vector product from one pass at a new point.
double nll_grad_hvp(Fixture& f) {
  double value = 0;
  f.with([&](auto& nll) { nll.value_grad_hessp(next_point(f), column(std::as_const(f.v)), std::span(&value, 1), column(f.g), column(f.hv)); });
  return value;
}

void BM_Hessian(benchmark::State& state, Config c) {
  Fixture& f = fixture(c);
  const index_t n = f.size();
  f.H.resize(static_cast<std::size_t>(n * n));
  double value = 0;
  const double t = run(state, [&] {
    f.dense->hessian(fitlib::ConstBlockView<double>(f.x.data(), n, 1), std::span(&value, 1),
                   fitlib::BlockView<double>(f.g.data(), n, 1), fitlib::BlockView<double>(f.H.data(), n, n));
    benchmark::DoNotOptimize(f.H.data());
  });
  // The lower triangle of Mᵀ·D·M over (cells + bin) rows of n columns: rows·n·(n+1) flops; with
  // multiplicative β each bin has two bin rows (bbstat.hpp).
  const double rows = static_cast<double>(c.bins * (c.procs + (c.bin_by_bin ? 2 : 1)));
  const double flops = rows * static_cast<double>(n) * static_cast<double>(n + 1);
  state.counters["GFLOPs"] = flops / t / 1e9;
  state.counters["gemm_fraction"] = flops / t / dgemm_rate();
  state.counters["dgemm_GFLOPs"] = dgemm_rate() / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  fitlib::bench::report_machine_limits();
  // One configuration at a time, all three kernels on it, so each model is built once.
  for (index_t bins : {1000, 10000, 100000})
    for (index_t nsyst : {100, 1000})
      for (bool asym : {false, true}) {
        const Config c{bins, 8, nsyst, asym};
        const std::string name = c.name();
        auto full = [&](const char* kernel) {
          char buf[128];
          std::snprintf(buf, sizeof buf, "%s/%s", kernel, name.c_str());
          return std::string(buf);
        };
        benchmark::RegisterBenchmark(full("BM_Nll").c_str(), BM_Bandwidth<double (*)(Fixture&)>, c, nll_only)->Unit(benchmark::kMillisecond);
        benchmark::RegisterBenchmark(full("BM_NllGrad").c_str(), BM_Bandwidth<double (*)(Fixture&)>, c, nll_grad)->Unit(benchmark::kMillisecond);
        benchmark::RegisterBenchmark(full("BM_Hvp").c_str(), BM_Bandwidth<double (*)(Fixture&)>, c, nll_grad_hvp)->Unit(benchmark::kMillisecond);
        benchmark::RegisterBenchmark(full("BM_Hessian").c_str(), BM_Hessian, c)->Unit(benchmark::kMillisecond);
      }
  // Bin-by-bin statistics (rabbit's default: lite, gamma) on the dense models; sparse storage at
  // two densities, its roofline counted on the bytes it actually streams.
  auto add = [&](const Config& c, bool hessian) {
    const std::string name = c.name();
    auto full = [&](const char* kernel) { return std::string(kernel) + "/" + name; };
    benchmark::RegisterBenchmark(full("BM_NllGrad").c_str(), BM_Bandwidth<double (*)(Fixture&)>, c, nll_grad)->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(full("BM_Hvp").c_str(), BM_Bandwidth<double (*)(Fixture&)>, c, nll_grad_hvp)->Unit(benchmark::kMillisecond);
    if (hessian) benchmark::RegisterBenchmark(full("BM_Hessian").c_str(), BM_Hessian, c)->Unit(benchmark::kMillisecond);
  };
  for (index_t nsyst : {100, 1000}) add(Config{100000, 8, nsyst, false, 1.0, true}, true);
  for (double density : {0.05, 0.2}) add(Config{100000, 8, 1000, false, density, false}, false);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
