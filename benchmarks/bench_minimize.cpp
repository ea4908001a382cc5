// SPDX-License-Identifier: MIT
// Full fits of synthetic models with each subproblem: iterations, HVPs, time, and the overhead
// fraction (time outside objective evaluations over the total).
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include <fitlib/fit.hpp>

#include "synthetic_model.hpp"

namespace {

using fitlib::index_t;
using clock_type = std::chrono::steady_clock;

/// Forwards every evaluation to the likelihood and adds up the seconds spent in it.
class Timed {
 public:
  explicit Timed(fitlib::SerialLikelihood& f) : f_(&f) {}
  index_t size() const { return f_->size(); }
  std::vector<double> default_parameters() const { return f_->default_parameters(); }
  const std::vector<std::string>& parameter_names() const { return f_->parameter_names(); }
  void value(fitlib::ConstBlockView<double> x, std::span<double> v) { time([&] { f_->value(x, v); }); }
  void value_grad(fitlib::ConstBlockView<double> x, std::span<double> v, fitlib::BlockView<double> g) {
    time([&] { f_->value_grad(x, v, g); });
  }
  void hessp(fitlib::ConstBlockView<double> x, fitlib::ConstBlockView<double> d, fitlib::BlockView<double> hv) {
    time([&] { f_->hessp(x, d, hv); });
  }
  void hessian(fitlib::ConstBlockView<double> x, std::span<double> v, fitlib::BlockView<double> g, fitlib::BlockView<double> h) {
    time([&] { f_->hessian(x, v, g, h); });
  }
  double seconds = 0;

 private:
  template <class F>
  void time(F&& evaluate) {
    const auto t0 = clock_type::now();
    evaluate();
    seconds += std::chrono::duration<double>(clock_type::now() - t0).count();
  }
  fitlib::SerialLikelihood* f_;
};

fitlib::SerialLikelihood& likelihood(const fitlib::bench::Config& c) {
  static std::string current;
  static std::unique_ptr<fitlib::SerialLikelihood> nll;
  if (current != c.name()) {
    nll.reset();
    nll = std::make_unique<fitlib::SerialLikelihood>(fitlib::bench::synthetic_model(c));
    current = c.name();
  }
  return *nll;
}

template <class Sub>
void BM_Fit(benchmark::State& state, fitlib::bench::Config c) {
  auto& nll = likelihood(c);
  fitlib::TrustRegionOptions opts;
  opts.gtol = 1e-6;
  opts.edm_tol = 1e-8;
  const fitlib::TrustRegion<Sub> minimizer(opts);
  fitlib::FitOptions fo;
  fo.covariance = false;  // the minimisation only; the postfit Hessian is BM_Hessian's business
  double total = 0, inside = 0;
  index_t iterations = 0, hvps = 0;
  bool converged = true;
  for (auto _ : state) {
    Timed timed(nll);
    const auto t0 = clock_type::now();
    const fitlib::FitResult r = fitlib::fit(timed, minimizer, fo);
    total += std::chrono::duration<double>(clock_type::now() - t0).count();
    inside += timed.seconds;
    iterations = r.iterations;
    hvps = r.counts.hvps;
    converged = converged && r.converged();
  }
  const double runs = static_cast<double>(state.iterations());
  state.counters["iterations"] = static_cast<double>(iterations);
  state.counters["hvps"] = static_cast<double>(hvps);
  state.counters["seconds_per_iteration"] = total / runs / static_cast<double>(std::max<index_t>(iterations, 1));
  state.counters["overhead_fraction"] = (total - inside) / total;
  state.counters["converged"] = converged ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  for (index_t bins : {1000, 10000, 100000})
    for (index_t nsyst : {100, 1000}) {
      const fitlib::bench::Config c{bins, 8, nsyst, true};
      const std::string name = c.name();
      auto reg = [&](const char* method, auto fn) {
        char buf[128];
        std::snprintf(buf, sizeof buf, "BM_Fit/%s/%s", method, name.c_str());
        benchmark::RegisterBenchmark(buf, fn, c)->Unit(benchmark::kMillisecond)->MinTime(0.2);
      };
      reg("Gltr", BM_Fit<fitlib::Gltr>);
      reg("SteihaugCG", BM_Fit<fitlib::SteihaugCG>);
      // Exact needs a dense Hessian per accepted step: 12 s each at bins 10⁵ with nsyst 1000.
      if (bins * nsyst <= 10000 * 1000) reg("Exact", BM_Fit<fitlib::Exact>);
    }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
