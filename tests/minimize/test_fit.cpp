// SPDX-License-Identifier: MIT
// fit() on the demo's likelihood: every subproblem and preconditioner reaches the same minimum.
#include <catch2/catch.hpp>

#include <Eigen/Core>
#include <cstdio>

#include "demo_analysis.hpp"
#include "random_model.hpp"

using namespace fitlib;

namespace {

TrustRegionOptions tight() {
  TrustRegionOptions o;
  o.gtol = 1e-9;
  return o;
}

/// The reference minimum: SteihaugCG, no preconditioning, run to ‖g‖ < 1e-9.
const FitResult& reference_fit() {
  static const FitResult r = [] {
    SerialLikelihood nll(examples::demo_analysis());
    return fit(nll, TrustRegion<SteihaugCG>(tight()));
  }();
  return r;
}

void check_same_minimum(const FitResult& r, const FitResult& ref) {
  REQUIRE(r.converged());
  CHECK(std::abs(r.nll - ref.nll) < 1e-9);
  for (std::size_t i = 0; i < r.x.size(); ++i) {
    INFO(r.names[i]);
    CHECK(std::abs(r.x[i] - ref.x[i]) < 1e-6 * ref.uncertainties[i]);
  }
}

}  // namespace

TEST_CASE("fit: the covariance is the inverse Hessian at the minimum", "[fit]") {
  const FitResult& r = reference_fit();
  REQUIRE(r.converged());
  REQUIRE(r.covariance_status == CovarianceStatus::accurate);
  SerialLikelihood nll(examples::demo_analysis());
  const index_t n = nll.size();
  std::vector<double> f(1), g(static_cast<std::size_t>(n)), H(static_cast<std::size_t>(n * n));
  nll.hessian(ConstBlockView<double>(r.x.data(), n, 1), f, BlockView<double>(g.data(), n, 1), BlockView<double>(H.data(), n, n));
  const Eigen::Map<const Eigen::MatrixXd> Hm(H.data(), n, n), C(r.covariance.data(), n, n);
  CHECK(((C * Hm) - Eigen::MatrixXd::Identity(n, n)).cwiseAbs().maxCoeff() < 1e-10);
  for (index_t i = 0; i < n; ++i) CHECK(r.uncertainties[static_cast<std::size_t>(i)] == std::sqrt(C(i, i)));
  CHECK(r.edm < 1e-12);
  CHECK(r.edm >= 0);
  CHECK(f[0] == r.nll);
  CHECK(r.report().find("signal") != std::string::npos);
}

TEMPLATE_TEST_CASE("fit: every subproblem, with and without preconditioning, reaches the same minimum", "[fit]", SteihaugCG, Exact, Gltr) {
  const auto kind = GENERATE(Preconditioning::none, Preconditioning::diagonal, Preconditioning::cholesky);
  const bool blocks = GENERATE(false, true);
  if (blocks && kind != Preconditioning::cholesky) return;
  SerialLikelihood nll(examples::demo_analysis());
  FitOptions opts;
  opts.preconditioning = kind;
  if (blocks) opts.preconditioner_blocks = {1, 3, 4};
  const FitResult r = fit(nll, TrustRegion<TestType>(tight()), opts);
  check_same_minimum(r, reference_fit());
  CHECK(r.covariance_status == CovarianceStatus::accurate);
  const std::size_t n = r.x.size();
  // Minima within 1e-6 σ of each other: covariances equal to that order too.
  for (std::size_t i = 0; i < n * n; ++i) CHECK(std::abs(r.covariance[i] - reference_fit().covariance[i]) < 1e-5 * std::abs(reference_fit().covariance[i]) + 1e-12);
}

TEMPLATE_TEST_CASE("fit: on Asimov data every subproblem returns the generating values", "[fit]", SteihaugCG, Exact, Gltr) {
  SerialLikelihood nll(examples::demo_analysis(/*asimov=*/true));
  const FitResult r = fit(nll, TrustRegion<TestType>(tight()));
  REQUIRE(r.converged());
  CHECK(std::abs(r.x[0] - std::sqrt(1.1)) < 1e-6 * r.uncertainties[0]);
  for (std::size_t i = 1; i < r.x.size(); ++i) CHECK(std::abs(r.x[i]) < 1e-6 * r.uncertainties[i]);
}

TEST_CASE("fit: frozen parameters stay fixed and leave the covariance", "[fit]") {
  SerialLikelihood nll(examples::demo_analysis());
  FitOptions opts;
  opts.frozen = {"lumi", "^(jes|muon_.*)$"};
  const FitResult r = fit(nll, TrustRegion<SteihaugCG>(tight()), opts);
  REQUIRE(r.converged());
  const index_t n = static_cast<index_t>(r.x.size());
  for (const char* name : {"lumi", "jes", "muon_eff"}) {
    const index_t i = r.index(name);
    INFO(name);
    CHECK(r.frozen[static_cast<std::size_t>(i)]);
    CHECK(r.x[static_cast<std::size_t>(i)] == r.x0[static_cast<std::size_t>(i)]);
    CHECK(r.uncertainties[static_cast<std::size_t>(i)] == 0.0);
    for (index_t j = 0; j < n; ++j) CHECK(r.covariance[static_cast<std::size_t>(i + j * n)] == 0.0);
  }
  CHECK_FALSE(r.frozen[static_cast<std::size_t>(r.index("qcd_shape"))]);
  // The free parameters sit where the gradient vanishes; the frozen ones need not.
  for (index_t i = 0; i < n; ++i)
    if (!r.frozen[static_cast<std::size_t>(i)]) CHECK(std::abs(r.gradient[static_cast<std::size_t>(i)]) < 1e-8);
  CHECK(r.nll > reference_fit().nll);

  opts.frozen = {"jet_energy"};
  CHECK_THROWS_WITH(fit(nll, TrustRegion<SteihaugCG>(), opts), Catch::Matchers::Contains("'jet_energy' matches no parameter"));
  opts.frozen = {"(unclosed"};
  CHECK_THROWS_WITH(fit(nll, TrustRegion<SteihaugCG>(), opts), Catch::Matchers::Contains("neither a parameter name nor a valid regular"));
}

TEMPLATE_TEST_CASE("fit: every parameter frozen, and no covariance", "[fit]", SteihaugCG, Exact, Gltr) {
  SerialLikelihood nll(examples::demo_analysis());
  FitOptions opts;
  opts.frozen = {".*"};
  FitResult r = fit(nll, TrustRegion<TestType>(), opts);
  CHECK(r.converged());
  CHECK(r.x == r.x0);
  CHECK(r.nll == nll.value(r.x0));
  CHECK(r.iterations == 0);
  for (double u : r.uncertainties) CHECK(u == 0.0);

  opts = {};
  opts.frozen = {"lumi"};
  opts.covariance = false;
  r = fit(nll, TrustRegion<TestType>(tight()), opts);
  CHECK(r.converged());
  CHECK(r.covariance_status == CovarianceStatus::not_computed);
  for (std::size_t i = 0; i < r.x.size(); ++i) {
    INFO(r.names[i]);
    if (r.frozen[i]) CHECK(r.uncertainties[i] == 0.0);
    else CHECK(std::isnan(r.uncertainties[i]));
  }
}

TEST_CASE("fit: callbacks observe, stop and abort", "[fit][callbacks]") {
  SerialLikelihood nll(examples::demo_analysis());
  HistoryRecorder history;
  std::FILE* out = std::tmpfile();
  ProgressPrinter printer(out);
  FitResult r = fit(nll, TrustRegion<SteihaugCG>(tight()), {}, history, printer);
  REQUIRE(r.converged());
  CHECK(static_cast<index_t>(history.history().size()) == r.iterations);
  CHECK(std::ftell(out) > 80 * r.iterations / 2);
  std::fclose(out);

  TimeLimit limit(-1.0);  // already exceeded at the first iteration
  r = fit(nll, TrustRegion<SteihaugCG>(tight()), {}, limit);
  CHECK(r.status == FitStatus::aborted);
  CHECK(limit.triggered());
  CHECK(r.iterations == 1);

  struct StopAtThree {
    CallbackAction on_iteration(const IterationSummary& s) { return s.iteration >= 3 ? CallbackAction::stop_converged : CallbackAction::proceed; }
  } stop;
  r = fit(nll, TrustRegion<SteihaugCG>(tight()), {}, stop);
  CHECK(r.status == FitStatus::converged_callback);
  CHECK(r.iterations == 3);

  StallStop stall(1e3, 2);  // any two accepted steps improving by less than 1e3 count as stalled
  r = fit(nll, TrustRegion<SteihaugCG>(tight()), {}, stall);
  CHECK(r.status == FitStatus::converged_callback);
}

TEMPLATE_TEST_CASE("fit: the EDM convergence test and the iteration limit are statuses", "[fit]", SteihaugCG, Exact, Gltr) {
  SerialLikelihood nll(examples::demo_analysis());
  TrustRegionOptions o;
  o.gtol = 0;
  o.edm_tol = 1e-6;
  FitResult r = fit(nll, TrustRegion<TestType>(o));
  CHECK(r.status == FitStatus::converged_edm);
  CHECK(r.edm < 1e-6);  // the EDM at the minimum, computed anew by fit()
  CHECK(std::abs(r.nll - reference_fit().nll) < 1e-6);
  CHECK(r.iterations < reference_fit().iterations);  // it stops earlier than the gtol 1e-9 fit
  o.edm_tol = 0;
  o.maxiter = 2;
  r = fit(nll, TrustRegion<TestType>(o));
  CHECK(r.status == FitStatus::max_iterations);
  CHECK(r.iterations == 2);
  CHECK_FALSE(r.converged());
}

TEST_CASE("options are validated with the field named", "[fit][validation]") {
  auto bad = [](auto mutate) {
    TrustRegionOptions o;
    mutate(o);
    return o;
  };
  CHECK_THROWS_WITH(TrustRegion<SteihaugCG>(bad([](auto& o) { o.initial_radius = 0; })), Catch::Matchers::Contains("initial_radius"));
  CHECK_THROWS_WITH(TrustRegion<SteihaugCG>(bad([](auto& o) { o.initial_radius = 2000; })), Catch::Matchers::Contains("< max_radius"));
  CHECK_THROWS_WITH(TrustRegion<SteihaugCG>(bad([](auto& o) { o.eta = 0.3; })), Catch::Matchers::Contains("eta"));
  CHECK_THROWS_WITH(TrustRegion<SteihaugCG>(bad([](auto& o) { o.gtol = -1; })), Catch::Matchers::Contains("gtol"));
  CHECK_THROWS_WITH(TrustRegion<SteihaugCG>(bad([](auto& o) { o.maxiter = -1; })), Catch::Matchers::Contains("maxiter"));
  CHECK_THROWS_AS(SteihaugCG(SteihaugCGOptions{-1}), std::invalid_argument);
  SerialLikelihood nll(examples::demo_analysis());
  FitOptions opts;
  opts.x0 = {1.0};
  CHECK_THROWS_WITH(fit(nll, TrustRegion<SteihaugCG>(), opts), Catch::Matchers::Contains("x0 has 1 entries"));
  opts = {};
  opts.preconditioning = Preconditioning::cholesky;
  opts.preconditioner_blocks = {2, 2};
  CHECK_THROWS_WITH(fit(nll, TrustRegion<SteihaugCG>(), opts), Catch::Matchers::Contains("add up to 4 but there are 8"));
  opts.preconditioning = Preconditioning::diagonal;
  CHECK_THROWS_WITH(fit(nll, TrustRegion<SteihaugCG>(), opts), Catch::Matchers::Contains("Preconditioning::cholesky only"));
  opts.preconditioning = Preconditioning::cholesky;
  opts.preconditioner_blocks.clear();
  opts.reference_hessian = {1.0, 2.0};
  CHECK_THROWS_WITH(fit(nll, TrustRegion<SteihaugCG>(), opts), Catch::Matchers::Contains("reference_hessian has 2 entries"));
}

TEST_CASE("fit: a preconditioner from a supplied reference Hessian", "[fit]") {
  // The postfit Hessian of the reference fit, reused as the preconditioner of a new fit.
  const FitResult& ref = reference_fit();
  SerialLikelihood nll(examples::demo_analysis());
  const index_t n = nll.size();
  std::vector<double> f(1), g(static_cast<std::size_t>(n));
  FitOptions opts;
  opts.preconditioning = Preconditioning::cholesky;
  opts.reference_hessian.resize(static_cast<std::size_t>(n * n));
  nll.hessian(ConstBlockView<double>(ref.x.data(), n, 1), f, BlockView<double>(g.data(), n, 1),
              BlockView<double>(opts.reference_hessian.data(), n, n));
  const FitResult r = fit(nll, TrustRegion<Gltr>(tight()), opts);
  check_same_minimum(r, ref);
  CHECK(r.counts.hessians == 1);  // only the postfit one
}
