// SPDX-License-Identifier: MIT
// N toys of one model fitted as one replica batch against N sequential fits, and the batched
// evaluations against the DGEMM rate.
//
// throughput_ratio = time of the N toys fitted one after another / time of the same toys as a
//                    batch, both measured here (same toys, same minimiser, same threads);
// gemm_fraction    = flops of the batched pass (the template products it runs, 2 flops per
//                    template element and column, see BM_BatchedPass) / time / Eigen DGEMM rate
//                    (the counter's "/s" suffix is Google Benchmark's for a rate: read it as a ratio);
// ceiling          = DGEMM rate × 8 B / (4 flop × triad bandwidth): a fit streams every template
//                    element (8 B) once per evaluation, a batch spends 4 flops on it per replica
//                    (one forward and one backward product), so this is what batching can gain
//                    on this machine at most;
// active_fraction  = running replicas / batch width, averaged over the scheduling rounds.
// With `threads:2` the toys are split in two halves fitted on two threads, each with its own
// likelihood over the shared model, for the sequential and the batched run alike.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <fitlib/fit.hpp>

#include "machine_limits.hpp"
#include "synthetic_model.hpp"

namespace {

using namespace fitlib;
using fitlib::bench::Config;
using clock_type = std::chrono::steady_clock;

const Config medium{10000, 8, 300, false};  // 192 MB of templates: far out of cache
const Config small{200, 4, 30, false};      // 192 KB: in cache
const Config medium_asymmetric{10000, 8, 300, true};

struct Toys {
  std::shared_ptr<const Model> model;
  std::vector<ReplicaInputs> inputs;
};

/// N toys of the model (frequentist, Poisson; rabbit's default), the same for every run of a size.
const Toys& toys(const Config& c, int n) {
  static std::map<std::pair<std::string, int>, Toys> cache;
  Toys& t = cache[{c.name(), n}];
  if (t.model) return t;
  t.model = bench::synthetic_model(c);
  SerialLikelihood nll(t.model);
  for (int i = 1; i <= n; ++i) {
    const Toy toy = generate_toy(nll, 2026, static_cast<std::uint64_t>(i));
    ReplicaInputs in;
    in.data = toy.data;
    in.constraint_centres = toy.constraints.theta0;
    t.inputs.push_back(std::move(in));
  }
  return t;
}

TrustRegion<Gltr> minimizer() {
  TrustRegionOptions o;
  o.edm_tol = 1e-12;  // fitlib-fit's default
  return TrustRegion<Gltr>(o);
}

/// Runs `work(first, count)` over the toys split into `threads` contiguous parts, one thread each.
template <class Work>
double timed_split(int n, int threads, Work&& work) {
  const auto t0 = clock_type::now();
  std::vector<std::thread> pool;
  const int per = (n + threads - 1) / threads;
  for (int k = 0; k < threads; ++k) {
    const int first = k * per, count = std::min(per, n - first);
    if (count > 0) pool.emplace_back([&, first, count] { work(first, count); });
  }
  for (auto& t : pool) t.join();
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

/// The sequential reference, measured once per (model, N, threads).
double sequential_seconds(const Config& c, int n, int threads) {
  static std::map<std::tuple<std::string, int, int>, double> cache;
  const auto key = std::make_tuple(c.name(), n, threads);
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  const Toys& t = toys(c, n);
  return cache[key] = timed_split(n, threads, [&](int first, int count) {
    SerialLikelihood nll(t.model);
    FitOptions fo;
    fo.covariance = false;
    for (int i = first; i < first + count; ++i) {
      nll.set_data(t.inputs[static_cast<std::size_t>(i)].data);
      nll.set_constraint_centres(t.inputs[static_cast<std::size_t>(i)].constraint_centres);
      benchmark::DoNotOptimize(fit(nll, minimizer(), fo).nll);
    }
  });
}

void BM_Toys(benchmark::State& state, Config c, int n, int threads) {
  const Toys& t = toys(c, n);
  const double seq = sequential_seconds(c, n, threads);
  double active = 0, batched = 0;
  for (auto _ : state) {
    batched = timed_split(n, threads, [&](int first, int count) {
      SerialLikelihood nll(t.model);
      nll.set_replicas({t.inputs.begin() + first, t.inputs.begin() + first + count});
      FitOptions fo;
      fo.covariance = false;
      const BatchResult r = ReplicaBatch<>(count).fit(nll, minimizer(), std::vector<FitOptions>(static_cast<std::size_t>(count), fo));
      if (first == 0) active = r.statistics.active_fraction;
    });
    state.SetIterationTime(batched);
  }
  state.counters["throughput_ratio"] = seq / batched;
  state.counters["sequential_s"] = seq;
  state.counters["toys_per_s"] = n / batched;
  state.counters["active_fraction"] = active;
  state.counters["ceiling"] = bench::dgemm_rate() * 8 / (4 * bench::triad_bandwidth());
}

/// One batched evaluation over N columns, each a different toy at a different point, as a fit
/// runs them. `hvp`: hessp at points whose forward products (and, with asymmetric templates, Kᵀu)
/// the likelihood already holds, as for the Krylov steps at an iterate: the directions' forward
/// products and the HVPs' backward ones. Else value_grad at new points (two sets of points
/// alternate, so none is cached): the forward and the backward product. 2 products per column
/// either way.
void BM_BatchedPass(benchmark::State& state, Config c, int n, bool hvp) {
  const Toys& t = toys(c, n);
  SerialLikelihood nll(t.model);
  nll.set_replicas(t.inputs);
  const index_t np = nll.size();
  std::vector<double> X[2], V, F(static_cast<std::size_t>(n)), out(static_cast<std::size_t>(np * n));
  const std::vector<double> x0 = nll.default_parameters();
  for (int j = 0; j < n; ++j)
    for (index_t i = 0; i < np; ++i) {
      const auto k = static_cast<std::uint64_t>(i + j * np);
      for (int s = 0; s < 2; ++s) X[s].push_back(x0[static_cast<std::size_t>(i)] + 0.1 * bench::hash_uniform(k + static_cast<std::uint64_t>(s) * 1000003));
      V.push_back(bench::hash_uniform(7 + k));
    }
  std::vector<index_t> which(static_cast<std::size_t>(n));
  for (int j = 0; j < n; ++j) which[static_cast<std::size_t>(j)] = j;
  nll.use_replicas(which);
  nll.value_grad({X[0].data(), np, n}, F, {out.data(), np, n});  // the iterates, as a fit has evaluated them
  int pass = 0;
  for (auto _ : state) {
    if (hvp) nll.hessp({X[0].data(), np, n}, {V.data(), np, n}, {out.data(), np, n});
    else nll.value_grad({X[++pass % 2].data(), np, n}, F, {out.data(), np, n});
    benchmark::DoNotOptimize(out.data());
  }
  const double flops = 2 * 2.0 * static_cast<double>(c.bins * c.procs) * static_cast<double>(t.model->ncoef()) * n;
  state.counters["GFLOPs"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["gemm_fraction"] = benchmark::Counter(flops / bench::dgemm_rate(), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["dgemm_GFLOPs"] = bench::dgemm_rate() * 1e-9;
}

/// The template products of a batched pass alone (the forward and the backward product of every
/// bin's rows for N columns, detail/lanes.hpp), without the likelihood's per-bin algebra: what the
/// kernels reach, so that the gap between them and BM_BatchedGrad is the algebra's share.
void BM_TemplateProducts(benchmark::State& state, Config c, int n) {
  const Toys& t = toys(c, n);
  const index_t P = c.procs, nc = t.model->ncoef();
  std::vector<double> coef(static_cast<std::size_t>(nc * n)), L(static_cast<std::size_t>(P * n)), U(L.size()), acc(coef.size());
  for (std::size_t i = 0; i < coef.size(); ++i) coef[i] = 0.01 * bench::hash_uniform(i);
  for (std::size_t i = 0; i < U.size(); ++i) U[i] = bench::hash_uniform(i + 99);
  const double* K = t.model->dense()->logk.data();
  for (auto _ : state) {
    std::fill(acc.begin(), acc.end(), 0.0);
    for (index_t b = 0; b < c.bins; ++b) {
      const double* rows = K + b * P * nc;
      detail::forward_rows(rows, nc, P, coef.data(), n, nc, L.data());
      detail::backward_rows(rows, nc, P, U.data(), n, nc, acc.data());
    }
    benchmark::DoNotOptimize(acc.data());
    benchmark::DoNotOptimize(L.data());
  }
  const double flops = 2 * 2.0 * static_cast<double>(c.bins * P) * static_cast<double>(nc) * n;
  state.counters["GFLOPs"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["gemm_fraction"] = benchmark::Counter(flops / bench::dgemm_rate(), benchmark::Counter::kIsIterationInvariantRate);
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  bench::report_machine_limits({{"throughput_ratio_ceiling", bench::dgemm_rate() * 8 / (4 * bench::triad_bandwidth())}});
  for (const Config& c : {small, medium, medium_asymmetric}) {
    for (int n : {1, 8, 64}) {
      for (bool hvp : {false, true}) {
        const std::string name = std::string(hvp ? "BM_BatchedHvp/" : "BM_BatchedGrad/") + c.name() + "/N:" + std::to_string(n);
        benchmark::RegisterBenchmark(name.c_str(), BM_BatchedPass, c, n, hvp)->Unit(benchmark::kMillisecond);
      }
      const std::string products = "BM_TemplateProducts/" + c.name() + "/N:" + std::to_string(n);
      benchmark::RegisterBenchmark(products.c_str(), BM_TemplateProducts, c, n)->Unit(benchmark::kMillisecond);
      for (int threads : {1, 2}) {
        if (c.asymmetric) continue;  // the passes above show what asymmetric templates change
        if (threads == 2 && n < 8) continue;
        const std::string name = "BM_Toys/" + c.name() + "/N:" + std::to_string(n) + "/threads:" + std::to_string(threads);
        benchmark::RegisterBenchmark(name.c_str(), BM_Toys, c, n, threads)->UseManualTime()->Iterations(1)->Unit(benchmark::kMillisecond);
      }
    }
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
}
