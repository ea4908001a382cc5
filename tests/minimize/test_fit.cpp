// SPDX-License-Identifier: MIT
// fit() on the demo's likelihood: every subproblem and preconditioner reaches the same minimum.
#include <catch2/catch.hpp>

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "demo_analysis.hpp"
#include "random_model.hpp"
#include "test_problems.hpp"

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

/// The Gauss–Newton model with the Krylov end game, gtol off, edm_tol 1e-12.
TrustRegionOptions krylov_end_game() {
  TrustRegionOptions o;
  o.gtol = 0;
  o.edm_tol = 1e-12;
  o.curvature = Curvature::gauss_newton;
  o.end_game = EndGame::krylov;
  return o;
}

/// TrustRegion<Exact> with `o` run on nll from its default point until it stops (at the hand-over).
TrustRegion<Exact>::state_type run_to_stop(SerialLikelihood& nll, const TrustRegionOptions& o) {
  const TrustRegion<Exact> tr(o);
  TrustRegion<Exact>::state_type s;
  tr.init(nll, s, nll.default_parameters());
  tr.run(nll, s);
  return s;
}

/// The postfit's Hessian, gradient and NLL are bit for bit those of the likelihood at the minimum.
void check_postfit_at_minimum(SerialLikelihood& nll, const FitResult& r) {
  const index_t n = nll.size();
  std::vector<double> f(1), g(static_cast<std::size_t>(n)), H(static_cast<std::size_t>(n * n));
  nll.hessian(ConstBlockView<double>(r.x.data(), n, 1), f, BlockView<double>(g.data(), n, 1), BlockView<double>(H.data(), n, n));
  CHECK(test::same_bits(r.hessian, H));
  CHECK(test::same_bits(r.gradient, g));
  CHECK(test::same_bits(r.nll, f[0]));
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
  ProgressPrinter printer(out, 1, std::numeric_limits<index_t>::max());  // one line per iteration, none folded
  FitResult r = fit(nll, TrustRegion<SteihaugCG>(tight()), {}, history, printer);
  REQUIRE(r.converged());
  CHECK(static_cast<index_t>(history.history().size()) == r.iterations);
  CHECK(std::ftell(out) > 80 * r.iterations / 2);
  // The last line names the test that ended the fit with its number, as FitResult::status_text does.
  std::string text(static_cast<std::size_t>(std::ftell(out)), '\0');
  std::rewind(out);
  REQUIRE(std::fread(text.data(), 1, text.size(), out) == text.size());
  CHECK(text.ends_with("stopped: " + r.status_text() + "\n"));
  CHECK(r.status_text() != to_string(r.status));  // a number was added
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
  CHECK(r.edm < 1e-6);  // the EDM that passed the test
  CHECK(r.edm == r.stop.edm);
  // ... which the postfit covariance's ½gᵀCg at the same point repeats (CG's 1e-8 residual aside).
  const std::size_t n = r.x.size();
  double edm = 0;
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < n; ++j) edm += 0.5 * r.gradient[i] * r.covariance[i + j * n] * r.gradient[j];
  CHECK(std::abs(edm - r.edm) <= 1e-6 * r.edm);
  CHECK(r.status_text() == describe(FitStatus::converged_edm, r.stop));
  CHECK(r.status_text().find(" below edm_tol 1e-06") != std::string::npos);
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

namespace {
/// A model whose signal template is all zero: the likelihood does not depend on the POI, so the Hessian's
/// POI row is zero at every point and the covariance fails.
Model zero_signal_template_model() {
  ModelBuilder mb;
  mb.add_channel("sr", 6);
  mb.add_process("signal", /*signal=*/true).add_process("background");
  mb.add_systematic("lumi").add_systematic("bkg_slope");
  const std::vector<double> bkg = {200, 160, 128, 102, 82, 66}, tilted = {180, 150, 125, 104, 87, 73},
                            data = {209, 151, 133, 98, 88, 61};
  mb.set_nominal("sr", "background", bkg).set_data("sr", data);
  mb.add_norm_variation("lumi", "sr", "background", 1.025);
  mb.add_shape_variation("bkg_slope", "sr", "background", tilted);
  return mb.build();
}
}  // namespace

TEMPLATE_TEST_CASE("fit: a stop decided by the EDM reports that EDM, also where the covariance then fails", "[fit]", SteihaugCG, Gltr) {
  // fitlib-fit reported "converged (EDM below edm_tol)" with edm NaN: the minimizer's CG EDM stays in the
  // gradient's Krylov space and passes, while the postfit ½gᵀCg used the failed (NaN) covariance.
  SerialLikelihood nll(zero_signal_template_model());
  TrustRegionOptions o;
  o.gtol = 0;
  o.edm_tol = 1e-6;
  const FitResult r = fit(nll, TrustRegion<TestType>(o));
  REQUIRE(r.status == FitStatus::converged_edm);
  CHECK(r.covariance_status == CovarianceStatus::failed);
  CHECK(covariance_unusable(r.covariance_status));
  CHECK(std::isnan(r.uncertainties[0]));
  CHECK(std::abs(r.x[0] - r.x0[0]) < 1e-12);  // the likelihood has no slope along the POI
  CHECK(std::isfinite(r.edm));
  CHECK(r.edm >= 0);
  CHECK(r.edm < o.edm_tol);
  CHECK(r.edm == r.stop.edm);
  CHECK(r.stop.edm_tol == o.edm_tol);
  char expected[96];
  std::snprintf(expected, sizeof expected, "converged (EDM %.3g below edm_tol 1e-06)", r.edm);
  CHECK(r.status_text() == expected);
  CHECK(to_string(r.status) == "converged (EDM below edm_tol)");  // the short name results files keep
  CHECK(r.report().find(expected) != std::string::npos);
}

TEST_CASE("describe: a status with the test that ended the fit and its number", "[fit][status]") {
  StopTest t;
  t.gradient_norm = 3.25e-9;
  t.edm = 3.2e-15;
  t.f = 1000;
  t.gtol = 1e-8;
  t.edm_tol = 1e-12;
  CHECK(describe(FitStatus::converged_gtol, t) == "converged (gradient norm 3.25e-09 below gtol 1e-08)");
  CHECK(describe(FitStatus::converged_edm, t) == "converged (EDM 3.2e-15 below edm_tol 1e-12)");
  CHECK(describe(FitStatus::converged_precision, t) ==
        "converged (no decrease resolvable in double precision: EDM 3.2e-15 within f's rounding 8.88e-13)");
  t.rounding_floor = 1e-10;  // an objective's floor above 4·eps·|f|
  CHECK(describe(FitStatus::converged_precision, t) ==
        "converged (no decrease resolvable in double precision: EDM 3.2e-15 within f's rounding 1e-10)");
  t.rounding_floor = 0;
  t.edm = 2e-3;
  CHECK(describe(FitStatus::stalled, t) ==
        "stalled: no decrease resolvable in double precision, but the EDM 0.002 is above edm_tol 1e-12 and f's rounding 8.88e-13 "
        "(not a verified minimum)");
  t.edm = std::numeric_limits<double>::infinity();
  CHECK(describe(FitStatus::stalled, t).find("no EDM (H not positive definite") != std::string::npos);
  t.gradient_norm = 0;
  CHECK(describe(FitStatus::converged_gtol, t) == "converged (gradient exactly zero)");
  // Unknown numbers or tolerances: the short name, or the number alone.
  const StopTest unknown;
  for (FitStatus s : {FitStatus::converged_gtol, FitStatus::converged_edm, FitStatus::converged_precision, FitStatus::stalled,
                      FitStatus::max_iterations, FitStatus::aborted})
    CHECK(describe(s, unknown) == to_string(s));
  StopTest no_tolerance;
  no_tolerance.edm = 5e-13;
  CHECK(describe(FitStatus::converged_edm, no_tolerance) == "converged (EDM 5e-13 below edm_tol)");
}

TEST_CASE("ProgressPrinter folds runs of rejected steps into one line each", "[fit][callbacks]") {
  std::FILE* out = std::tmpfile();
  REQUIRE(out);
  ProgressPrinter printer(out);  // folds after 3 rejected steps in a row
  printer.on_begin();
  index_t iteration = 0;
  double radius = 1;
  auto step = [&](bool accepted) {
    IterationSummary s;
    s.iteration = ++iteration;
    s.f = 10;
    s.f_trial = accepted ? 9 : 11;
    s.predicted_decrease = 1e-3;
    s.radius = radius;
    if (!accepted) radius *= 0.25;
    s.radius_next = radius;
    s.accepted = accepted;
    s.rho = accepted ? 1 : -1;
    printer.on_iteration(s);
  };
  step(true);
  step(true);
  for (int i = 0; i < 2000; ++i) step(false);  // a radius collapsing over thousands of rejected steps
  step(true);
  step(false);  // a short run is printed as it is
  step(false);
  step(true);
  for (int i = 0; i < 500; ++i) step(false);  // a run still open at the end
  IterationSummary last;
  last.iteration = ++iteration;
  last.f = last.f_trial = 9;
  last.edm = 3.2e-15;
  last.accepted = true;
  printer.on_iteration(last);
  StopTest stop;
  stop.gradient_norm = 1e-7;
  stop.edm = 3.2e-15;
  stop.f = 9;
  stop.gtol = 0;
  stop.edm_tol = 1e-12;
  printer.on_end(FitStatus::converged_edm, stop);

  std::string text(static_cast<std::size_t>(std::ftell(out)), '\0');
  std::rewind(out);
  REQUIRE(std::fread(text.data(), 1, text.size(), out) == text.size());
  std::fclose(out);
  std::vector<std::string> lines;
  for (std::size_t b = 0, e; (e = text.find('\n', b)) != std::string::npos; b = e + 1) lines.push_back(text.substr(b, e - b));
  INFO(text);
  // header, 2 accepted, 3 rejected + 1 fold, 1 accepted, 2 rejected, 1 accepted, 3 rejected + 1 fold, 1 accepted, stopped
  REQUIRE(lines.size() == 17);
  char fold[160];
  std::snprintf(fold, sizeof fold, "%6s … 1997 more steps rejected (iterations 6–2002), radius %.4g → %.4g", "", std::pow(0.25, 3), std::pow(0.25, 2000));
  CHECK(lines[6] == fold);
  CHECK(lines[7].find("(rejected)") == std::string::npos);  // the accepted step after the run
  CHECK(lines[8].find("(rejected)") != std::string::npos);
  CHECK(lines[9].find("(rejected)") != std::string::npos);
  CHECK(lines[14].find("… 497 more steps rejected (iterations 2010–2506)") != std::string::npos);
  CHECK(lines[16] == "stopped: converged (EDM 3.2e-15 below edm_tol 1e-12)");
}

TEST_CASE("fit: the Gauss–Newton model reaches the Hessian's minimum, its EDM from ∇²f", "[fit][gauss-newton]") {
  SerialLikelihood nll(examples::demo_analysis());
  TrustRegionOptions o = tight();
  o.edm_tol = 1e-14;
  o.curvature = Curvature::gauss_newton;
  const double exact_below = GENERATE(1e-3, std::numeric_limits<double>::infinity());
  o.exact_below = exact_below;
  INFO("exact_below " << exact_below);
  const FitResult r = fit(nll, TrustRegion<Exact>(o));
  check_same_minimum(r, reference_fit());
  CHECK(r.counts.gauss_newton > 0);
  CHECK(r.counts.hessians > 0);  // the end game's, which decided the stop
  CHECK(r.edm < 1e-14);
}

TEST_CASE("fit: with Exact the EDM is tested at every iterate, and the last Hessian is the postfit one", "[fit][gauss-newton]") {
  SerialLikelihood nll(examples::demo_analysis());
  TrustRegionOptions o;
  o.gtol = 0;
  o.edm_tol = 1e-10;
  struct CountAccepted {
    index_t n = 0;
    CallbackAction on_iteration(const IterationSummary& s) {
      n += s.accepted ? 1 : 0;
      return CallbackAction::proceed;
    }
  } accepted;
  const FitResult r = fit(nll, TrustRegion<Exact>(o), {}, accepted);
  REQUIRE(r.status == FitStatus::converged_edm);
  // The start and every accepted iterate had one Hessian; the postfit took the last (the same bits).
  check_postfit_at_minimum(nll, r);
  CHECK(r.counts.hessians == accepted.n + 1);
  // The stop came at the first iterate whose EDM is below edm_tol: the one before was not.
  o.maxiter = r.iterations - 1;
  const FitResult before = fit(nll, TrustRegion<Exact>(o));
  CHECK(before.status == FitStatus::max_iterations);
  CHECK(before.edm >= 1e-10);
}

TEMPLATE_TEST_CASE("fit: a Krylov minimizer's EDM test computes ∇²f, and the postfit takes it where the fit stops", "[fit]", SteihaugCG,
                   Gltr) {
  // The covariance needs ∇²f at the minimum anyway: the EDM that stops the fit is computed from it (in
  // the parameters' own coordinates, whatever the preconditioner), not by conjugate gradients on HVPs.
  SerialLikelihood nll(examples::demo_analysis());
  TrustRegionOptions o;
  o.gtol = 0;
  o.edm_tol = 1e-12;
  FitOptions fo;
  fo.preconditioning = GENERATE(Preconditioning::none, Preconditioning::cholesky);
  INFO("preconditioning " << static_cast<int>(fo.preconditioning));
  const index_t prefit = fo.preconditioning == Preconditioning::none ? 0 : 1;
  const FitResult r = fit(nll, TrustRegion<TestType>(o), fo);
  REQUIRE(r.status == FitStatus::converged_edm);
  CHECK(r.counts.hessians == 1 + prefit);  // the EDM's ∇²f is the postfit's
  check_postfit_at_minimum(nll, r);
  CHECK(r.edm == r.stop.edm);
  CHECK(r.edm < o.edm_tol);
  // Without the covariance the EDM is CG's, on the same iterates: the same point, no dense ∇²f.
  fo.covariance = false;
  const FitResult bare = fit(nll, TrustRegion<TestType>(o), fo);
  REQUIRE(bare.status == FitStatus::converged_edm);
  CHECK(test::same_bits(bare.x, r.x));
  CHECK(bare.iterations == r.iterations);
  CHECK(bare.counts.hessians == prefit);
  CHECK(bare.counts.hvps > r.counts.hvps);  // CG's HVPs
  CHECK(bare.edm == Approx(r.edm).epsilon(1e-4));
}

TEST_CASE("TrustRegion refuses the Gauss–Newton model where there is none", "[fit][gauss-newton][validation]") {
  SerialLikelihood nll(examples::demo_analysis());
  TrustRegionOptions o;
  o.curvature = Curvature::gauss_newton;
  CHECK_THROWS_WITH(fit(nll, TrustRegion<Gltr>(o)), Catch::Contains("needs a subproblem with a dense matrix (Exact)"));
  test::Rosenbrock rosen{2};
  TrustRegion<Exact> tr(o);
  TrustRegion<Exact>::state_type s;
  CHECK_THROWS_WITH(tr.init(rosen, s, std::vector<double>{-1.2, 1.0}), Catch::Contains("needs an objective with a Gauss–Newton matrix"));
  o.exact_below = 0;
  CHECK_THROWS_WITH(TrustRegion<Exact>(o), Catch::Contains("exact_below must be > 0"));
  o.exact_below = 1e-3;
  o.gauss_newton_iterations = -1;
  CHECK_THROWS_WITH(TrustRegion<Exact>(o), Catch::Contains("gauss_newton_iterations must be ≥ 0"));
  // 0, the default: 10 iterations before a dense ∇²f, 30 before the Krylov end game; else as set.
  o.gauss_newton_iterations = 0;
  CHECK(o.gauss_newton_limit() == 10);
  o.end_game = EndGame::krylov;
  CHECK(o.gauss_newton_limit() == 30);
  o.gauss_newton_iterations = 4;
  CHECK(o.gauss_newton_limit() == 4);
}

TEST_CASE("fit: where the data term has no curvature the Gauss–Newton model hands over after gauss_newton_iterations",
          "[fit][gauss-newton]") {
  Model m = examples::demo_analysis();
  std::fill(m.data.begin(), m.data.end(), 0.0);  // n/ν² = 0 in every bin: the model is linear in the yields
  SerialLikelihood nll(m);
  TrustRegionOptions o;
  o.gtol = 0;
  o.edm_tol = 1e-12;
  const FitResult krylov = fit(nll, TrustRegion<Gltr>(o));
  REQUIRE(krylov.converged());
  o.curvature = Curvature::gauss_newton;
  const EndGame end_game = GENERATE(EndGame::hessian, EndGame::krylov);
  o.end_game = end_game;
  const FitResult r = fit(nll, TrustRegion<Exact>(o));
  INFO((end_game == EndGame::krylov ? "Krylov end game: " : "") << r.status_text() << ", NLL " << r.nll << "; trust-krylov: "
                                                                 << krylov.status_text() << ", NLL " << krylov.nll);
  CHECK((end_game == EndGame::hessian || r.counts.hvps > 0));  // handed over
  // Without the hand-over every step stays on the boundary until maxiter; with it ∇²f ends the fit where
  // trust-krylov's ends: the yields driven towards zero, where the NLL is flat to its rounding (and where
  // ∇²f's model, trust-exact's too, stops predicting a decrease at an EDM of a few 1e-12).
  CHECK(r.counts.gauss_newton <= o.gauss_newton_limit());
  // The model never hands over by itself here, so the limit in effect shows: the Krylov end game's 30, not 10.
  if (end_game == EndGame::krylov) CHECK(r.counts.gauss_newton > 10);
  CHECK(r.status != FitStatus::max_iterations);
  CHECK(r.nll == Approx(krylov.nll).epsilon(1e-12));
  CHECK(r.edm < 1e-10);
}

TEST_CASE("fit: the Gauss–Newton model's Krylov end game reaches the Hessian's minimum with no dense ∇²f before the postfit",
          "[fit][gauss-newton][end-game]") {
  SerialLikelihood nll(examples::demo_analysis());
  TrustRegionOptions o = tight();
  o.edm_tol = 1e-14;
  o.curvature = Curvature::gauss_newton;
  o.end_game = EndGame::krylov;
  const double exact_below = GENERATE(1e-3, std::numeric_limits<double>::infinity());
  o.exact_below = exact_below;
  const Preconditioning preconditioning = GENERATE(Preconditioning::none, Preconditioning::diagonal, Preconditioning::cholesky);
  INFO("exact_below " << exact_below << ", preconditioning " << static_cast<int>(preconditioning));
  struct Hooks {
    index_t begun = 0, ended = 0, last = 0;
    bool increasing = true;
    CallbackAction on_begin() {
      ++begun;
      return CallbackAction::proceed;
    }
    CallbackAction on_iteration(const IterationSummary& s) {
      increasing = increasing && s.iteration == last + 1;
      last = s.iteration;
      return CallbackAction::proceed;
    }
    void on_end(FitStatus) { ++ended; }
  } hooks;
  FitOptions fo;
  fo.preconditioning = preconditioning;
  const FitResult r = fit(nll, TrustRegion<Exact>(o), fo, hooks);
  check_same_minimum(r, reference_fit());
  CHECK(r.edm < 1e-14);
  // The end game's metric is the Gauss–Newton matrix's in the parameters' own coordinates whatever the
  // first phase's: with a prefit preconditioner it takes about as many HVPs as without.
  const FitResult plain = fit(nll, TrustRegion<Exact>(o));
  CHECK(r.counts.hvps <= 2 * plain.counts.hvps);
  CHECK(r.counts.gauss_newton > 0);
  CHECK(r.counts.hvps > 0);  // the end game's
  // Dense ∇²f: the postfit covariance's, and --preconditioning's prefit one; none in the minimisation.
  CHECK(r.counts.hessians == (preconditioning == Preconditioning::none ? 1 : 2));
  for (std::size_t i = 0; i < r.x.size(); ++i) {
    INFO(r.names[i]);
    CHECK(r.uncertainties[i] == Approx(reference_fit().uncertainties[i]).epsilon(1e-6));
  }
  // The callbacks saw one minimisation: one begin, one end, iterations numbered on through the hand-over.
  CHECK(hooks.begun == 1);
  CHECK(hooks.ended == 1);
  CHECK(hooks.increasing);
  CHECK(hooks.last == r.iterations);
}

TEST_CASE("TrustRegion with the Krylov end game stops with handed_over where the model would take ∇²f",
          "[fit][gauss-newton][end-game]") {
  SerialLikelihood nll(examples::demo_analysis());
  TrustRegionOptions o = krylov_end_game();
  const TrustRegion<Exact>::state_type s = run_to_stop(nll, o);
  REQUIRE(s.status == FitStatus::handed_over);
  CHECK(s.model == Curvature::gauss_newton);
  CHECK(s.counts.hessians == 0);
  CHECK(s.counts.gauss_newton > 0);
  // The hessian end game takes the same Gauss–Newton steps up to there.
  o.end_game = EndGame::hessian;
  TrustRegion<Exact>::state_type h;
  const TrustRegion<Exact> dense(o);
  dense.init(nll, h, nll.default_parameters());
  while (h.iteration < s.iteration && h.status == FitStatus::running) dense.step(nll, h);
  REQUIRE(h.iteration == s.iteration);
  CHECK(test::same_bits(h.x, s.x));
  CHECK(h.model == Curvature::exact);
  CHECK(h.counts.hessians > 0);
  // Validated: the Krylov end game follows the Gauss–Newton model only.
  o.curvature = Curvature::exact;
  o.end_game = EndGame::krylov;
  CHECK_THROWS_WITH(TrustRegion<Exact>(o), Catch::Contains("end_game = krylov follows the Gauss–Newton model only"));
}

TEST_CASE("fit: the Krylov end game with frozen parameters", "[fit][gauss-newton][end-game]") {
  TrustRegionOptions o = krylov_end_game();
  SerialLikelihood nll(examples::demo_analysis());
  FitOptions fo;
  fo.frozen = {nll.parameter_names()[1]};
  o.edm_tol = 1e-14;
  const FitResult held = fit(nll, TrustRegion<Exact>(o), fo);
  o.curvature = Curvature::exact;
  o.end_game = EndGame::hessian;
  const FitResult ref = fit(nll, TrustRegion<Gltr>(o), fo);
  REQUIRE(held.converged());
  CHECK(held.x[1] == held.x0[1]);
  CHECK(held.uncertainties[1] == 0);
  for (std::size_t i = 0; i < held.x.size(); ++i) {
    INFO(held.names[i]);
    CHECK(std::abs(held.x[i] - ref.x[i]) <= 1e-6 * (ref.uncertainties[i] > 0 ? ref.uncertainties[i] : 1.0));
  }
}

TEST_CASE("fit: the Krylov end game at the iteration limit, and a callback's stop at the hand-over", "[fit][gauss-newton][end-game]") {
  SerialLikelihood nll(examples::demo_analysis());
  TrustRegionOptions o = krylov_end_game();
  const TrustRegion<Exact>::state_type s = run_to_stop(nll, o);
  REQUIRE(s.status == FitStatus::handed_over);
  const index_t k = s.iteration;
  // The limit reached at the hand-over: the end game takes no step.
  o.maxiter = k;
  const FitResult limited = fit(nll, TrustRegion<Exact>(o));
  CHECK(limited.status == FitStatus::max_iterations);
  CHECK(limited.iterations == k);
  CHECK(limited.counts.hvps == 0);
  // A callback's abort at the hand-over iteration ends the fit there.
  o.maxiter = 0;
  struct AbortAt {
    index_t k;
    index_t ended = 0;
    CallbackAction on_iteration(const IterationSummary& it) { return it.iteration == k ? CallbackAction::abort : CallbackAction::proceed; }
    void on_end(FitStatus) { ++ended; }
  } abort_at{k};
  const FitResult aborted = fit(nll, TrustRegion<Exact>(o), {}, abort_at);
  CHECK(aborted.status == FitStatus::aborted);
  CHECK(aborted.iterations == k);
  CHECK(abort_at.ended == 1);
  // Training drives the trust region step by step: the Krylov end game is refused there.
  test::RandomModelSpec sp;
  SerialLikelihood small(test::random_model(sp));
  const ReplicaBatch<dynamic> batch(2);
  CHECK_THROWS_WITH(train_replicas(batch, small, TrustRegion<Exact>(o), std::vector<ReplicaInputs>(2), TrainingOptions{}),
                    Catch::Contains("the Krylov end game (EndGame::krylov) is fit()'s"));
}

TEST_CASE("the automatic minimizer: dense Hessians where one costs few passes, the Krylov end game above", "[fit][gauss-newton][end-game]") {
  test::RandomModelSpec sp;
  sp.bins = 200;
  sp.masked_bins = 0;
  sp.asymmetric = false;
  sp.nsyst = 20;
  const Model cheap = test::random_model(sp);
  sp.nsyst = 400;
  const Model costly = test::random_model(sp);
  INFO("passes per Hessian: " << cost_model(cheap).hessian_passes() << " and " << cost_model(costly).hessian_passes());
  CHECK(cost_model(cheap).hessian_passes() <= 12);
  CHECK(cost_model(costly).hessian_passes() > 12);
  CHECK(resolve_minimizer("auto", cheap) == "trust-gauss-newton");
  CHECK(resolve_minimizer("auto", costly) == "trust-gauss-newton-krylov");
  CHECK(resolve_minimizer("trust-krylov", costly) == "trust-krylov");
  CHECK_THROWS_WITH(resolve_minimizer("trust-newton", cheap), Catch::Contains("trust-gauss-newton-krylov"));
  // Without a Gauss–Newton matrix (a CUDA likelihood): the same rule on ∇²f, and the Gauss–Newton methods refused.
  CHECK(resolve_minimizer("auto", cheap, false) == "trust-exact");
  CHECK(resolve_minimizer("auto", costly, false) == "trust-krylov");
  CHECK(resolve_minimizer("trust-ncg", costly, false) == "trust-ncg");
  CHECK_THROWS_WITH(resolve_minimizer("trust-gauss-newton-krylov", cheap, false), Catch::Contains("use trust-exact"));
  // Each name runs its own trust region: the Krylov end game's name on the Gauss–Newton model.
  const bool krylov_end = with_minimizer("trust-gauss-newton-krylov", {}, [](const auto& tr) {
    return tr.options().curvature == Curvature::gauss_newton && tr.options().end_game == EndGame::krylov;
  });
  CHECK(krylov_end);
}
