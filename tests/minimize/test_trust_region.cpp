// SPDX-License-Identifier: MIT
// The trust-region outer loop against SciPy's recorded iterates, and its deliberate deviations.
#include <catch2/catch.hpp>

#include <fitlib/minimize/exact.hpp>
#include <fitlib/minimize/gltr.hpp>
#include <fitlib/minimize/steihaug_cg.hpp>
#include <fitlib/minimize/trust_region.hpp>

#include <limits>

#include "reference_data.hpp"
#include "test_problems.hpp"

using namespace fitlib;

namespace {

double rel_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    num = std::max(num, std::abs(a[i] - b[i]));
    den = std::max(den, std::abs(b[i]));
  }
  return den > 0 ? num / den : num;
}

test::Quadratic quad50() {
  const auto j = test::load_reference("scipy-trust-region/quad50_problem.json");
  test::Quadratic q{static_cast<index_t>(j.at("b").size()), test::to_col_major(j.at("A")), test::to_vector(j.at("b"))};
  return q;
}

/// Replays a reference file: every iteration's radius, decision and iterate, then the counts.
template <class Sub, class F>
void replay(const std::string& file, F& objective, Sub prototype, double base_tolerance) {
  INFO(file);
  const auto ref = test::load_reference("scipy-trust-region/" + file);
  const auto& iterations = ref.at("iterations");
  TrustRegion<Sub> tr({}, prototype);
  typename TrustRegion<Sub>::state_type s;
  std::vector<double> x0 = test::to_vector(iterations.at(0).at("x"));
  tr.init(objective, s, x0);
  for (const auto& rec : iterations) {
    const int k = rec.at("k").get<int>();
    INFO("iteration " << k);
    // trust-region.md §7: 1e-10 relative at first, loosening along the path (rounding differences
    // against SciPy's netlib BLAS grow over rosen10's 85 iterations).
    const double tolerance = k <= 50 ? base_tolerance : 10 * base_tolerance;
    REQUIRE(s.status == FitStatus::running);
    CHECK(rel_diff(s.x, test::to_vector(rec.at("x"))) < tolerance);
    CHECK(s.radius == Approx(rec.at("radius").get<double>()).epsilon(tolerance));
    tr.step(objective, s);
    CHECK(s.last.accepted == rec.at("accepted").get<bool>());
    CHECK(s.last.hits_boundary == rec.at("hits_boundary").get<bool>());
    // ρ = (f − f⁺)/pred: where pred is tiny next to |f| the rounding of f − f⁺ dominates it.
    const double rho_tolerance = 1e-6 + 8 * std::numeric_limits<double>::epsilon() * std::abs(s.last.f) / s.last.predicted_decrease;
    CHECK(std::abs(s.last.rho - rec.at("rho").get<double>()) <= rho_tolerance * std::max(1.0, std::abs(rec.at("rho").get<double>())));
    CHECK(s.radius == Approx(rec.at("radius_next").get<double>()).epsilon(tolerance));
    CHECK(rel_diff(s.x, test::to_vector(rec.at("x_after"))) < tolerance);
  }
  const auto& result = ref.at("result");
  CHECK(s.iteration == result.at("nit").get<index_t>());
  CHECK(s.status == (result.at("status").get<int>() == 0 ? FitStatus::converged_gtol : FitStatus::max_iterations));
  CHECK(s.counts.values == result.at("nfev").get<index_t>());
  if (ref.at("variant").at("derivs") == "hessp") CHECK(s.counts.scipy_hessp == ref.at("user_calls").at("Hp").get<index_t>());
}

}  // namespace

TEST_CASE("SteihaugCG reproduces SciPy's trust-ncg iterates", "[minimize][scipy]") {
  const std::string derivs = GENERATE("hess", "hessp");
  test::Rosenbrock rosen2{2}, rosen10{10};
  auto q = quad50();
  replay("rosen2-trust-ncg-derivs_" + derivs + ".json", rosen2, SteihaugCG(), 1e-10);
  replay("rosen10-trust-ncg-derivs_" + derivs + ".json", rosen10, SteihaugCG(), 1e-10);
  replay("quad50-trust-ncg-derivs_" + derivs + ".json", q, SteihaugCG(), 1e-10);
}

TEST_CASE("Exact reproduces SciPy's trust-exact iterates (SciPy ≥ 1.18)", "[minimize][scipy]") {
  test::Rosenbrock rosen2{2}, rosen10{10};
  auto q = quad50();
  replay("rosen2-trust-exact-derivs_hess-exact_impl_main.json", rosen2, Exact(), 1e-10);
  replay("rosen10-trust-exact-derivs_hess-exact_impl_main.json", rosen10, Exact(), 1e-10);
  replay("quad50-trust-exact-derivs_hess-exact_impl_main.json", q, Exact(), 1e-10);
}

TEST_CASE("Gltr reproduces SciPy's trust-krylov iterates", "[minimize][scipy]") {
  const std::string derivs = GENERATE("hess", "hessp");
  const bool inexact = GENERATE(true, false);
  const std::string variant = "-derivs_" + derivs + "-inexact_" + (inexact ? "True" : "False") + ".json";
  test::Rosenbrock rosen2{2}, rosen10{10};
  auto q = quad50();
  const Gltr gltr(GltrOptions{.inexact = inexact});
  replay("rosen2-trust-krylov" + variant, rosen2, gltr, 1e-10);
  replay("rosen10-trust-krylov" + variant, rosen10, gltr, 1e-10);
  replay("quad50-trust-krylov" + variant, q, gltr, 1e-10);
}

TEST_CASE("a trial point with a non-finite objective is rejected and the radius shrinks", "[minimize]") {
  // A one-bin Poisson NLL in a signal strength: ν = μs + b, f = ν − n·ln ν, minimum at ν = n. From
  // μ = 1 with Δ₀ = 20 the Newton step overshoots to ν < 0, where ln ν is NaN. SciPy would retry the
  // same step until maxiter (nan_probe.json); fitlib rejects it, shrinks and converges.
  struct PoissonLine {
    double s = 10, b = 1, n = 1;
    index_t size() const { return 1; }
    void value(ConstBlockView<double> X, std::span<double> f) const {
      for (index_t j = 0; j < X.cols; ++j) f[static_cast<std::size_t>(j)] = nu(X(0, j)) - n * std::log(nu(X(0, j)));
    }
    void value_grad(ConstBlockView<double> X, std::span<double> f, BlockView<double> G) const {
      if (!f.empty()) value(X, f);
      for (index_t j = 0; j < X.cols; ++j) G(0, j) = s * (1 - n / nu(X(0, j)));
    }
    void hessp(ConstBlockView<double> X, ConstBlockView<double> V, BlockView<double> HV) const {
      for (index_t k = 0; k < V.cols; ++k) {
        const double v = nu(X(0, X.cols == 1 ? 0 : k));
        HV(0, k) = n * s * s / (v * v) * V(0, k);
      }
    }
    double nu(double mu) const { return mu * s + b; }
  };
  PoissonLine f;
  TrustRegionOptions opts;
  opts.initial_radius = 20;
  TrustRegion<SteihaugCG> tr(opts);
  TrustRegion<SteihaugCG>::state_type s;
  std::vector<double> x0{1.0};
  tr.init(f, s, x0);
  HistoryRecorder history;
  tr.run(f, s, history);
  CHECK(s.status == FitStatus::converged_gtol);
  CHECK(std::abs(s.x[0]) < 1e-5);
  index_t rejected_nan = 0;
  for (const auto& it : history.history())
    if (std::isnan(it.f_trial)) {
      ++rejected_nan;
      CHECK_FALSE(it.accepted);
      CHECK(it.rho == -std::numeric_limits<double>::infinity());
      CHECK(it.radius_next == 0.25 * it.radius);
    }
  CHECK(rejected_nan >= 1);
}

TEST_CASE("non-finite gradients: rejected trial points, failed subproblems, never a hang", "[minimize]") {
  // Rosenbrock whose gradient is NaN for x₀ > 0.5 (a finite value there): the fit must pass around it.
  struct NanGradient : test::Rosenbrock {
    void value_grad(ConstBlockView<double> X, std::span<double> f, BlockView<double> G) const {
      test::Rosenbrock::value_grad(X, f, G);
      for (index_t j = 0; j < X.cols; ++j)
        if (X(0, j) > 0.5) G(0, j) = std::numeric_limits<double>::quiet_NaN();
    }
  };
  NanGradient f{{2}};
  TrustRegionOptions opts;
  opts.maxiter = 500;
  TrustRegion<SteihaugCG> tr(opts);
  TrustRegion<SteihaugCG>::state_type s;
  std::vector<double> x0{-1.2, 1.0};
  tr.init(f, s, x0);
  HistoryRecorder history;
  tr.run(f, s, history);
  for (const auto& it : history.history()) {
    INFO("iteration " << it.iteration);
    CHECK(std::isfinite(it.gradient_norm));  // no accepted point has a NaN gradient
  }
  CHECK(s.x[0] <= 0.5);

  // The subproblem itself reports a NaN gradient as a failure.
  SteihaugCG cg;
  cg.reset(2);
  const std::vector<double> g{std::numeric_limits<double>::quiet_NaN(), 1.0};
  cg.new_iterate(g, {});
  std::vector<double> p(2);
  const auto step = cg.solve(1.0, [](const double* v, double* Bv) { Bv[0] = v[0]; Bv[1] = v[1]; }, p);
  CHECK(step.failed);
  CHECK(p == std::vector<double>{0.0, 0.0});
}
