// SPDX-License-Identifier: MIT
// Impacts, scans, goodness of fit and the full-NLL constant, against brute-force refits and
// independent computations.
#include <catch2/catch.hpp>

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <numbers>
#include <random>

#include "fitlib/detail/spd_inverse.hpp"
#include "fitlib/fit.hpp"
#include "fitlib/postfit/gof.hpp"
#include "fitlib/postfit/impacts.hpp"
#include "fitlib/postfit/scan.hpp"
#include "random_model.hpp"
#include "spd_matrix.hpp"

using namespace fitlib;
using test::RandomModelSpec;

// The postfit covariance's solver (fit.hpp): the policy's where it inverts, else the host's; every host policy's is
// Eigen's HostCholesky, so its covariances are the bits they were.
static_assert(std::same_as<detail::dense_solver_of<SerialLikelihood>::type, detail::HostCholesky>);
static_assert(std::same_as<detail::dense_solver_of<ThreadedLikelihood>::type, detail::HostCholesky>);
static_assert(std::same_as<detail::dense_solver_of<Likelihood<Shard<device::HostLayered, storage::Sparse>>>::type, detail::HostCholesky>);
static_assert(std::same_as<detail::dense_solver_of<ReplicaObjective<SerialLikelihood>>::type, detail::HostCholesky>);
namespace postfit_solver_check {
struct Inverting : detail::HostCholesky {};  // a policy's own solver with inverse (as cuda::DeviceCholesky)
struct Factoring {                            // one without it: the host's is used
  bool factor(ConstBlockView<double>);
};
struct WithInverse {
  struct policy_type {
    using dense_solver = Inverting;
  };
};
struct WithoutInverse {
  struct policy_type {
    using dense_solver = Factoring;
  };
};
static_assert(std::same_as<detail::dense_solver_of<WithInverse>::type, Inverting>);
static_assert(std::same_as<detail::dense_solver_of<WithoutInverse>::type, detail::HostCholesky>);
}  // namespace postfit_solver_check

namespace {

TrustRegion<Exact> tight() {
  TrustRegionOptions o;
  o.gtol = 1e-10;
  return TrustRegion<Exact>(o);
}

/// A Poisson model with log-normal systematics in two groups and one NOI.
Model grouped_model(bool template_stats) {
  RandomModelSpec sp;
  sp.bins = 16;
  sp.nsyst = 5;
  sp.unconstrained = 1;
  sp.asymmetric = false;
  sp.template_stats = template_stats;
  sp.seed = 7;
  Model m = test::random_model(sp);
  // Data near the nominal expectation (μ̂ ≈ 1, away from the boundary), one empty bin.
  for (index_t b = 0; b < m.nbins(); ++b) {
    double nu = 0;
    for (index_t p = 0; p < m.nprocs(); ++p) nu += m.dense()->nominal[static_cast<std::size_t>(b * m.nprocs() + p)];
    m.data[static_cast<std::size_t>(b)] = b == 5 ? 0.0 : std::round(nu * (1 + 0.1 * std::sin(1.7 * static_cast<double>(b))));
  }
  m.groups = {{"first", {1, 2}}, {"second", {3, 4}}, {"all", {0, 1, 2, 3, 4}}};
  m.nois = {2};
  return m;
}

/// The quadratic case: χ² data, additive systematics, linear POIs: the NLL is exactly quadratic.
Model quadratic_model() {
  RandomModelSpec sp;
  sp.bins = 14;
  sp.nsyst = 4;
  sp.asymmetric = false;
  sp.type = SystematicType::normal;
  sp.zero_counts = false;
  sp.seed = 11;
  Model m = test::random_model(sp);
  m.constraint_weights = {0.0, 1.0, 4.0, 0.25};
  m.groups = {{"pair", {1, 2}}};
  return m;
}

/// Linear POIs (this model's data pull √μ to the boundary at 0), with or without β.
LikelihoodOptions linear_poi(bool bin_by_bin) {
  LikelihoodOptions o;
  o.allow_negative_poi = true;
  o.bin_by_bin.enabled = bin_by_bin;
  return o;
}

LikelihoodOptions quadratic_options() {
  LikelihoodOptions o;
  o.data_term = DataTerm::chisq;
  o.allow_negative_poi = true;
  o.bin_by_bin.enabled = false;
  return o;
}

/// σ of every parameter from a refit started at the best fit with `frozen` held there.
FitResult refit_frozen(SerialLikelihood& nll, const FitResult& best, std::vector<std::string> frozen) {
  FitOptions fo;
  fo.x0 = best.x;
  fo.frozen = std::move(frozen);
  return fit(nll, tight(), fo);
}

}  // namespace

TEST_CASE("postfit: group impacts equal the variance a frozen refit loses", "[postfit]") {
  const Model m = grouped_model(false);
  const LikelihoodOptions lo = linear_poi(false);
  SerialLikelihood nll(m, {}, lo);
  const FitResult best = fit(nll, tight());
  REQUIRE(best.converged());
  const Impacts imp = traditional_impacts(nll, best);
  REQUIRE(imp.targets == std::vector<std::string>{"sig0", "syst2"});
  for (std::size_t g = 0; g < m.groups.size(); ++g) {
    std::vector<std::string> frozen;
    for (index_t s : m.groups[g].members) frozen.push_back(m.systematics[static_cast<std::size_t>(s)].name);
    const FitResult r = refit_frozen(nll, best, frozen);
    REQUIRE(r.converged());
    for (std::size_t t = 0; t < imp.targets.size(); ++t) {
      const auto i = static_cast<std::size_t>(imp.target_index[t]);
      if (r.frozen[i]) continue;  // the NOI in its own group
      INFO(m.groups[g].name << " on " << imp.targets[t]);
      const double lost = best.uncertainties[i] * best.uncertainties[i] - r.uncertainties[i] * r.uncertainties[i];
      CHECK(imp.group(t, g) == Approx(std::sqrt(lost)).epsilon(1e-6));
    }
  }
  // A group of one is the per-parameter impact; "stat" is the refit with every constrained θ frozen.
  const FitResult stat_fit = refit_frozen(nll, best, {"syst1", "syst2", "syst3", "syst4"});
  CHECK(imp.group(0, imp.group_index("stat")) == Approx(stat_fit.uncertainties[0]).epsilon(1e-6));
  CHECK(imp.group(1, imp.group_index("stat")) == 0.0);  // a constrained NOI is held in the stat-only fit
  const std::size_t i = 0, j = 3;
  CHECK(imp.value(i, j) == Approx(best.covariance[i + j * best.x.size()] / best.uncertainties[j]).epsilon(1e-12));
}

TEST_CASE("postfit: the bin-by-bin split holds β at β̂ exactly as scaled templates do", "[postfit]") {
  const Model m = grouped_model(true);
  SerialLikelihood nll(m, {}, linear_poi(true));  // lite gamma, rabbit's default
  const FitResult best = fit(nll, tight());
  REQUIRE(best.converged());
  const Impacts imp = traditional_impacts(nll, best);
  const std::size_t stat = imp.group_index("stat"), bb = imp.group_index("binByBinStat");

  // Brute force 1: β profiled, constrained nuisances frozen.
  const FitResult profiled = refit_frozen(nll, best, {"syst1", "syst2", "syst3", "syst4"});
  // Brute force 2: a model without bin-by-bin statistics whose active cells are scaled by β̂.
  const std::vector<double> beta = nll.bin_by_bin_parameters(best.x);
  REQUIRE(beta.size() == static_cast<std::size_t>(m.nbins()));
  Model scaled = m;
  for (index_t b = 0; b < m.nbins(); ++b)
    for (index_t p = 0; p < m.nprocs(); ++p)
      if (m.sumw2[static_cast<std::size_t>(b * m.nprocs() + p)] > 0) scaled.dense()->nominal[static_cast<std::size_t>(b * m.nprocs() + p)] *= beta[static_cast<std::size_t>(b)];
  scaled.sumw2.clear();
  SerialLikelihood fixed(scaled, {}, linear_poi(false));
  // The scaled model's gradient vanishes at x̂ too (envelope theorem), so x̂ is its minimum.
  std::vector<double> g(best.x.size());
  fixed.value_grad(best.x, g);
  for (double gi : g) CHECK(std::abs(gi) < 1e-6);
  const FitResult fixed_stat = refit_frozen(fixed, best, {"syst1", "syst2", "syst3", "syst4"});
  CHECK(imp.group(0, stat) == Approx(fixed_stat.uncertainties[0]).epsilon(1e-6));
  const double s_prof = profiled.uncertainties[0], s_fix = fixed_stat.uncertainties[0];
  CHECK(imp.group(0, bb) == Approx(std::sqrt(s_prof * s_prof - s_fix * s_fix)).epsilon(1e-5));
  CHECK(imp.group(0, bb) > 0.01 * s_prof);
  // fix_bin_by_bin is undone: the likelihood profiles β again.
  CHECK(nll.value(best.x) == best.nll);
}

TEST_CASE("postfit: global impacts are the linear response to shifted constraint centres", "[postfit]") {
  const Model m = quadratic_model();
  SerialLikelihood nll(m, {}, quadratic_options());
  const FitResult best = fit(nll, tight());
  REQUIRE(best.converged());
  const Impacts imp = global_impacts(nll, best);
  double sum2 = 0;
  for (index_t s = 1; s < m.nsyst(); ++s) {
    const double w = m.constraint_weights[static_cast<std::size_t>(s)];
    std::vector<double> centres = m.theta0;
    centres[static_cast<std::size_t>(s)] += 1 / std::sqrt(w);  // one σ of the global observable
    nll.set_constraint_centres(centres);
    FitOptions fo;
    fo.x0 = best.x;
    const FitResult r = fit(nll, tight(), fo);
    nll.set_constraint_centres(m.theta0);
    const auto j = static_cast<std::size_t>(m.npoi() + s);
    INFO(m.systematics[static_cast<std::size_t>(s)].name);
    CHECK(imp.value(0, j) == Approx(r.x[0] - best.x[0]).epsilon(1e-7));
    sum2 += imp.value(0, j) * imp.value(0, j);
  }
  CHECK(imp.value(0, static_cast<std::size_t>(m.npoi())) == 0.0);  // unconstrained: no global observable
  CHECK(imp.group(0, 0) == Approx(std::hypot(imp.value(0, 2), imp.value(0, 3))).epsilon(1e-14));
  const double var = best.uncertainties[0] * best.uncertainties[0];
  CHECK(imp.group(0, imp.group_index("stat")) == Approx(std::sqrt(var - sum2)).epsilon(1e-10));
}

TEST_CASE("postfit: the bin-by-bin part of global impacts follows dβ̂/dx", "[postfit]") {
  // No empty bin: with n = 0 a normal-multiplicative β is not bounded below (β̂ = 1 − A/k, and the
  // profiled term A − A²/2k falls without limit as the yield A grows), a property of that type.
  Model m = grouped_model(true);
  m.data[5] = 30;
  const index_t P = m.nprocs();
  for (const auto mode : {BinByBinMode::lite, BinByBinMode::full})
    for (const auto type : {BinByBinType::gamma, BinByBinType::normal_multiplicative, BinByBinType::normal_additive}) {
      INFO("mode " << static_cast<int>(mode) << " type " << static_cast<int>(type));
      LikelihoodOptions lo;  // squared POIs: μ ≥ 0 keeps every yield, and so every β̂, positive
      lo.bin_by_bin.mode = mode;
      lo.bin_by_bin.type = type;
      SerialLikelihood nll(m, {}, lo);
      const FitResult best = fit(nll, tight());
      REQUIRE(best.converged());
      const index_t n = nll.size();
      const std::vector<double> v(best.covariance.begin(), best.covariance.begin() + n);  // C·e_0
      const double var = nll.bin_by_bin_variance(best.x, ConstBlockView<double>(v.data(), n, 1))[0];
      // Independently: β̂ by central differences along v, weighted by the constraint's curvature at
      // β̂ (gamma k·β₀/β̂², normal-multiplicative k, normal-additive 1) with k = sumw²/sumw2 of the
      // entry's cells that have variances.
      const auto beta = [&](double t) {
        std::vector<double> x = best.x;
        for (index_t i = 0; i < n; ++i) x[static_cast<std::size_t>(i)] += t * v[static_cast<std::size_t>(i)];
        return nll.bin_by_bin_parameters(x);
      };
      const double h = 1e-4;
      const auto bp = beta(h), bm = beta(-h), b0 = nll.bin_by_bin_parameters(best.x);
      const index_t per = mode == BinByBinMode::lite ? 1 : P;
      double expected = 0;
      for (index_t b = 0; b < m.nbins(); ++b)
        for (index_t e = 0; e < per; ++e) {
          double sw = 0, s2 = 0;
          for (index_t p = per == 1 ? 0 : e; p < (per == 1 ? P : e + 1); ++p) {
            const auto c = static_cast<std::size_t>(b * P + p);
            if (m.sumw2[c] > 0) {
              sw += m.dense()->nominal[c];
              s2 += m.sumw2[c];
            }
          }
          if (s2 == 0 || sw == 0) continue;
          const auto at = static_cast<std::size_t>(b * per + e);
          const double k = sw * sw / s2, db = (bp[at] - bm[at]) / (2 * h);
          const double w = type == BinByBinType::gamma ? k / (b0[at] * b0[at]) : type == BinByBinType::normal_multiplicative ? k : 1.0;
          expected += w * db * db;
        }
      CHECK(expected > 0);
      CHECK(var == Approx(expected).epsilon(1e-6));
      const Impacts imp = global_impacts(nll, best);
      CHECK(imp.group(0, imp.group_index("binByBinStat")) == Approx(std::sqrt(var)).epsilon(1e-12));
    }
}

TEST_CASE("postfit: impacts are NaN, not 0, when the covariance failed", "[postfit]") {
  // The signal template is all zero: the POI changes nothing, so the Hessian is singular and the
  // covariance is not available (the probe's finding S2).
  for (const bool template_stats : {false, true}) {
    INFO((template_stats ? "with" : "without") << " bin-by-bin statistics");
    Model m = grouped_model(template_stats);
    const index_t P = m.nprocs(), nc = m.ncoef();
    for (index_t b = 0; b < m.nbins_full(); ++b) {
      m.dense()->nominal[static_cast<std::size_t>(b * P)] = 0;
      std::fill_n(m.dense()->logk.begin() + (b * P) * nc, nc, 0.0);
    }
    SerialLikelihood nll(m, {}, linear_poi(template_stats));
    const FitResult best = fit(nll, tight());
    REQUIRE(best.covariance_status == CovarianceStatus::failed);
    const Impacts trad = traditional_impacts(nll, best), glob = global_impacts(nll, best);
    for (const Impacts* imp : {&trad, &glob})
      for (std::size_t t = 0; t < imp->targets.size(); ++t)
        for (std::size_t g = 0; g < imp->groups.size(); ++g) {
          INFO((imp == &trad ? "traditional" : "global") << ", target " << imp->targets[t] << ", group " << imp->groups[g]);
          // Traditional "stat" (and so "binByBinStat") holds a constrained NOI fixed: 0 is its value there.
          const bool held = imp == &trad && (imp->groups[g] == "stat" || imp->groups[g] == "binByBinStat") && imp->target_index[t] >= m.npoi();
          if (held) CHECK(imp->group(t, g) == 0.0);
          else CHECK(std::isnan(imp->group(t, g)));
        }
    for (std::size_t t = 0; t < trad.targets.size(); ++t)
      for (std::size_t j = 0; j < trad.sources.size(); ++j) {
        INFO("target " << trad.targets[t] << ", source " << trad.sources[j]);
        CHECK(std::isnan(trad.value(t, j)));  // every parameter is free, so every one is a source
        const bool constrained = j >= static_cast<std::size_t>(m.npoi()) && m.constraint_weights[j - static_cast<std::size_t>(m.npoi())] > 0;
        if (constrained) CHECK(std::isnan(glob.value(t, j)));
        else CHECK(glob.value(t, j) == 0.0);  // no global observable: no source
      }
  }
}

TEST_CASE("postfit: a profile scan of a quadratic NLL is the parabola of its σ", "[postfit]") {
  const Model m = quadratic_model();
  SerialLikelihood nll(m, {}, quadratic_options());
  const FitResult best = fit(nll, tight());
  ScanOptions so;
  so.points = 7;
  so.range = 2;
  const Scan scan = profile_scan(nll, tight(), best, "sig0", so);
  REQUIRE(scan.values.size() == 7);
  for (std::size_t k = 0; k < scan.values.size(); ++k) {
    const double z = (scan.values[k] - best.x[0]) / best.uncertainties[0];
    INFO("point " << k);
    CHECK(converged(scan.status[k]));
    CHECK(scan.dnll[k] == Approx(0.5 * z * z).margin(1e-9));
  }
  CHECK(scan.values.front() == Approx(best.x[0] - 2 * best.uncertainties[0]));
  CHECK_THROWS_WITH(profile_scan(nll, tight(), best, "nope"), Catch::Contains("unknown parameter 'nope'"));
}

TEST_CASE("postfit: χ² survival function and the saturated test", "[postfit]") {
  CHECK(chi2_survival(3.841458820694124, 1) == Approx(0.05).epsilon(1e-12));
  CHECK(chi2_survival(18.307038053275146, 10) == Approx(0.05).epsilon(1e-12));
  CHECK(chi2_survival(124.34211340400407, 100) == Approx(0.05).epsilon(1e-11));
  for (double x : {0.1, 1.0, 7.0, 40.0}) CHECK(chi2_survival(x, 2) == Approx(std::exp(-x / 2)).epsilon(1e-13));
  CHECK(chi2_survival(0, 3) == 1.0);
  CHECK(std::isnan(chi2_survival(1, 0)));

  const Model m = grouped_model(false);
  const LikelihoodOptions lo = linear_poi(false);
  SerialLikelihood nll(m, {}, lo);
  const FitResult best = fit(nll, tight());
  const SaturatedGof g = saturated_gof(m, best);
  CHECK(g.chi2 == 2 * best.nll);
  CHECK(g.ndf == m.nbins() - 2);  // one POI, one unconstrained nuisance
  CHECK(g.p_value == Approx(chi2_survival(g.chi2, static_cast<double>(g.ndf))));
}

TEST_CASE("postfit: reduced NLL plus the constant is the full NLL", "[postfit]") {
  const Model m = grouped_model(false);
  const LikelihoodOptions lo = linear_poi(false);
  SerialLikelihood nll(m, {}, lo);
  const std::vector<double> x = test::test_point(m, 3, false);
  const std::vector<double> nu = nll.yields(x);
  double full = 0;
  for (index_t b = 0; b < m.nbins(); ++b) {
    double v = 0;
    for (index_t p = 0; p < m.nprocs(); ++p) v += nu[static_cast<std::size_t>(b * m.nprocs() + p)];
    const double n = m.data[static_cast<std::size_t>(b)];
    full += v - (n > 0 ? n * std::log(v) : 0.0) + std::lgamma(n + 1);  // −ln Poisson(n; ν)
  }
  for (index_t s = 0; s < m.nsyst(); ++s) {
    const double w = m.constraint_weights[static_cast<std::size_t>(s)], d = x[static_cast<std::size_t>(m.npoi() + s)] - m.theta0[static_cast<std::size_t>(s)];
    if (w > 0) full += 0.5 * w * d * d + 0.5 * std::log(2 * std::numbers::pi / w);  // −ln N(θ₀; θ, 1/√w)
  }
  CHECK(nll.value(x) + nll_constant(m, lo, m.data) == Approx(full).epsilon(1e-13));
}

TEST_CASE("postfit: a squared POI's μ = x² and 2|x|σ equal the fit of μ itself", "[postfit]") {
  const Model m = test::pull_model();  // one well-defined minimum, μ̂ > 0
  LikelihoodOptions linear;
  linear.allow_negative_poi = true;
  SerialLikelihood squared_nll(m), linear_nll(std::make_shared<const Model>(m), {}, linear);
  const TrustRegion<Exact> minimizer;
  const FitResult sq = fit(squared_nll, minimizer), lin = fit(linear_nll, minimizer);
  REQUIRE(sq.converged());
  REQUIRE(lin.converged());
  const SignalStrength a = signal_strength(sq, 0, squared_nll.options()), b = signal_strength(lin, 0, linear_nll.options());
  CHECK(a.value == sq.x[0] * sq.x[0]);
  CHECK(a.prefit == sq.x0[0] * sq.x0[0]);
  CHECK(b.value == lin.x[0]);
  CHECK(b.uncertainty == lin.uncertainties[0]);
  // At the minimum the gradient vanishes, so the Hessian (and the covariance) transforms with the
  // Jacobian dμ/dx = 2x alone: the propagated σ is the μ fit's, not an approximation of it.
  CHECK(a.value == Approx(b.value).epsilon(1e-7));
  CHECK(a.uncertainty == Approx(b.uncertainty).epsilon(1e-6));
  CHECK_THROWS_WITH(signal_strength(sq, static_cast<index_t>(sq.x.size()), squared_nll.options()), Catch::Contains("not a parameter"));
}

TEST_CASE("postfit: the inverse from the Cholesky factor in dpotri's order is H⁻¹, symmetric to the bit",
          "[postfit][covariance]") {
  // Sizes across the recursion's base case (32) and odd halves; eigenvalues from 1 to 10^4.
  const auto n = GENERATE(1, 5, 32, 33, 100, 257);
  std::mt19937_64 rng(static_cast<std::uint64_t>(n));
  const Eigen::MatrixXd h = test::spd_matrix(n, 4, rng);
  const Eigen::LLT<Eigen::MatrixXd> llt(h);
  REQUIRE(llt.info() == Eigen::Success);
  const Eigen::MatrixXd c = detail::inverse_from_cholesky(llt);
  const Eigen::MatrixXd reference = llt.solve(Eigen::MatrixXd::Identity(n, n));
  CHECK(c == c.transpose());
  CHECK((c - reference).cwiseAbs().maxCoeff() <= 1e-11 * reference.cwiseAbs().maxCoeff());
  CHECK((h * c - Eigen::MatrixXd::Identity(n, n)).cwiseAbs().maxCoeff() <= 1e-10);
}
