// SPDX-License-Identifier: MIT
// Postfit histograms (fitlib::histograms: prefit and postfit yields with their linearised variances) as a multiple of
// one dense Hessian of the same likelihood at the same point, timed in the same run:
//   hessian_multiple = seconds of histograms(lik, r) / seconds of one Hessian (the fastest of two)
// The target for 10⁴ bins × 1000 systematics is ≤ 1.5. The "/chi2" rows add the linear χ² against the data
// (HistogramOptions::chi2, the default; prefit and postfit, by Woodbury's identity), the "/processes" rows each
// process's variances instead (HistogramOptions::process_variances, a Jacobian row per bin and process). The histograms build each bin's row of the yields'
// Jacobian from the templates as the Hessian builds its rows (twice: prefit and postfit) and solve one triangular
// system per block of bins (bins·n² flops); the Hessian does a rank-k update of cells·n² flops.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <fitlib/fit.hpp>
#include <fitlib/postfit/histograms.hpp>

#include "synthetic_model.hpp"

namespace {

using fitlib::index_t;
using fitlib::bench::Config;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void BM_Histograms(benchmark::State& state, Config c, fitlib::HistogramOptions opts) {
  fitlib::LikelihoodOptions o;
  o.bin_by_bin.enabled = c.bin_by_bin;
  fitlib::SerialLikelihood lik(fitlib::bench::synthetic_model(c), {}, o);
  const index_t n = lik.size();
  // A fit result at the default parameters with the dense Hessian there: what histograms() reads of a fit.
  fitlib::FitResult r;
  r.x = lik.default_parameters();
  r.names = lik.parameter_names();
  r.frozen.assign(static_cast<std::size_t>(n), false);
  r.hessian.resize(static_cast<std::size_t>(n * n));
  r.covariance_status = fitlib::CovarianceStatus::accurate;
  std::vector<double> g(static_cast<std::size_t>(n));
  double value = 0, hessian_seconds = 1e300;
  for (int k = 0; k < 2; ++k) {
    const auto t0 = std::chrono::steady_clock::now();
    lik.hessian(fitlib::ConstBlockView<double>(r.x.data(), n, 1), std::span(&value, 1), fitlib::BlockView<double>(g.data(), n, 1),
                fitlib::BlockView<double>(r.hessian.data(), n, n));
    hessian_seconds = std::min(hessian_seconds, seconds_since(t0));
  }
  double total = 0;
  index_t runs = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    const fitlib::Histograms h = fitlib::histograms(lik, r, opts);
    benchmark::DoNotOptimize(h.postfit_variance.data());
    total += seconds_since(t0);
    ++runs;
  }
  state.counters["hessian_seconds"] = hessian_seconds;
  state.counters["hessian_multiple"] = total / static_cast<double>(runs) / hessian_seconds;
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  for (const Config& c : {Config{1000, 8, 100, false}, Config{1000, 8, 100, false, 1.0, true}, Config{10000, 8, 1000, false},
                          Config{10000, 8, 1000, false, 1.0, true}})
    for (const auto& [suffix, opts] : {std::pair<std::string, fitlib::HistogramOptions>{"", {.chi2 = false}},
                                       {"/chi2", {}},
                                       {"/processes", {.chi2 = false, .process_variances = true}}})
      benchmark::RegisterBenchmark(("BM_Histograms/" + c.name() + suffix).c_str(), BM_Histograms, c, opts)->Unit(benchmark::kMillisecond)->Iterations(2);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
