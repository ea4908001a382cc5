// SPDX-License-Identifier: MIT
// What replica batches are for: toys, bootstrap and covariance replicas, scans, frozen-group
// breakdowns, hyperparameter scans and n3fit-style training, each against its sequential reference.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "fitlib/fit.hpp"
#include "random_model.hpp"

using namespace fitlib;
using test::pull_model;
using test::same_bits;

namespace {

LikelihoodOptions linear(DataTerm term = DataTerm::poisson) {
  LikelihoodOptions lo;
  lo.allow_negative_poi = true;
  lo.bin_by_bin.enabled = false;
  lo.data_term = term;
  return lo;
}

TrustRegion<Exact> tight() {
  TrustRegionOptions o;
  o.gtol = 1e-9;
  return TrustRegion<Exact>(o);
}

/// Toys as replica inputs, and the true value of every parameter per toy.
struct ToyBatch {
  std::vector<ReplicaInputs> inputs;
  std::vector<std::vector<double>> truth;
};
ToyBatch make_toys(SerialLikelihood& nll, int count, const ToyOptions& to) {
  ToyBatch b;
  for (int i = 1; i <= count; ++i) {
    const Toy t = generate_toy(nll, 77, static_cast<std::uint64_t>(i), to);
    ReplicaInputs in;
    in.data = t.data;
    in.constraint_centres = t.constraints.theta0;
    if (nll.options().data_term == DataTerm::chisq) in.variances = asimov(nll, nll.default_parameters());  // the toys' own σ²
    b.inputs.push_back(std::move(in));
    b.truth.push_back(t.constraints.toy_parameters(nll.default_parameters()));
  }
  return b;
}

/// Pulls of parameter p against each toy's own truth.
Spread pulls(const BatchResult& r, const ToyBatch& toys, index_t p) {
  std::vector<double> truth;
  for (const auto& t : toys.truth) truth.push_back(t[static_cast<std::size_t>(p)]);
  return r.pulls(p, truth);
}

}  // namespace

TEST_CASE("replica uses: toy pulls from one batch are standard normal", "[replica][toys]") {
  const Model m = pull_model();
  struct Case {
    const char* name;
    DataTerm term;
    ToyOptions toys;
  };
  ToyOptions bayes;
  bayes.constraints = ConstraintRandomization::bayesian;
  ToyOptions gauss;
  gauss.data = DataRandomization::normal;
  Model large = m;  // Gaussian toys of counts in the thousands never go negative
  for (double& n : large.dense()->nominal) n *= 100;
  for (double& n : large.data) n *= 100;
  for (const Case& c : {Case{"poisson, frequentist", DataTerm::poisson, ToyOptions{}}, Case{"poisson, bayesian", DataTerm::poisson, bayes},
                        Case{"gaussian, frequentist", DataTerm::chisq, gauss}}) {
    SerialLikelihood nll(c.term == DataTerm::chisq ? large : m, {}, linear(c.term));
    const int n = 600;
    const ToyBatch toys = make_toys(nll, n, c.toys);
    nll.set_replicas(toys.inputs);
    const BatchResult r = ReplicaBatch<64>().fit(nll, tight(), std::vector<FitOptions>(n));
    CHECK(r.converged() == n);
    // Refilled as replicas finish, the batch is full until the last wave (≈ 1 of 600/64 waves) drains.
    CHECK(r.statistics.active_fraction > 0.7);
    for (index_t p : {0, 2}) {
      const Spread s = pulls(r, toys, p);
      INFO(c.name << ", parameter " << p << ": pull mean " << s.mean << ", width " << s.stddev);
      // 600 toys: the mean's standard error is 0.041, the width's 0.029; the POI carries the model's
      // ML bias of ≈ −0.08σ (tests/replica/test_toy_fits.cpp).
      CHECK(std::abs(s.mean) < 0.2);
      CHECK(std::abs(s.stddev - 1) < 0.1);
    }
  }
}

TEST_CASE("replica uses: bootstrap and covariance replicas reproduce the uncertainty they sample", "[replica][bootstrap]") {
  const Model m = pull_model();
  SerialLikelihood nll(m, {}, linear());
  const FitResult best = fit(nll, tight());
  REQUIRE(best.converged());
  const int n = 500;

  SECTION("Poisson bootstrap of the data") {
    std::vector<ReplicaInputs> in(n);
    for (int i = 0; i < n; ++i) in[static_cast<std::size_t>(i)].data = bootstrap_counts(m.data, 5, static_cast<std::uint64_t>(i));
    CHECK(bootstrap_counts(m.data, 5, 3) == in[3].data);  // a function of (seed, index) only
    nll.set_replicas(in);
    const BatchResult r = ReplicaBatch<dynamic>(32).fit(nll, tight(), std::vector<FitOptions>(n));
    CHECK(r.converged() == n);
    // The data-statistical part of σ(μ): the bootstrap leaves the constraints at their centres, so
    // its spread is the uncertainty with the nuisances' prior, √(σ² − the constraints' share).
    const Spread s = r.parameter(0);
    const Impacts imp = traditional_impacts(nll, best);
    const double stat = imp.group(0, imp.group_index("stat"));
    INFO("bootstrap spread " << s.stddev << ", stat-only σ " << stat << ", total σ " << best.uncertainties[0]);
    CHECK(s.stddev > 0.85 * stat);
    CHECK(s.stddev < 1.15 * best.uncertainties[0]);
  }

  SECTION("Monte-Carlo replicas from a data covariance (NNPDF style)") {
    // A correlated covariance of the bins: Poisson variances plus a 5 % fully correlated normalisation.
    const index_t nb = m.nbins();
    std::vector<double> C(static_cast<std::size_t>(nb * nb));
    for (index_t a = 0; a < nb; ++a)
      for (index_t b = 0; b < nb; ++b)
        C[static_cast<std::size_t>(a + b * nb)] = (a == b ? m.data[static_cast<std::size_t>(a)] : 0.0) +
                                                   0.0025 * m.data[static_cast<std::size_t>(a)] * m.data[static_cast<std::size_t>(b)];
    const CovarianceReplicas sampler(m.data, C);
    CHECK(sampler.replica(9, 4) == sampler.replica(9, 4));
    // The sample covariance of 4000 replicas within 5 standard errors of C.
    const int ns = 4000;
    std::vector<std::vector<double>> d;
    for (int i = 0; i < ns; ++i) d.push_back(sampler.replica(9, static_cast<std::uint64_t>(i)));
    for (index_t a : {0, 7}) {
      for (index_t b : {0, 3, 7}) {
        double sa = 0, sb = 0, sab = 0;
        for (const auto& v : d) {
          sa += v[static_cast<std::size_t>(a)];
          sb += v[static_cast<std::size_t>(b)];
        }
        sa /= ns;
        sb /= ns;
        for (const auto& v : d) sab += (v[static_cast<std::size_t>(a)] - sa) * (v[static_cast<std::size_t>(b)] - sb);
        sab /= ns - 1;
        const double caa = C[static_cast<std::size_t>(a + a * nb)], cbb = C[static_cast<std::size_t>(b + b * nb)],
                     cab = C[static_cast<std::size_t>(a + b * nb)];
        const double se = std::sqrt((caa * cbb + cab * cab) / ns);
        INFO("C(" << a << "," << b << ") = " << cab << ", sampled " << sab);
        CHECK(std::abs(sab - cab) < 5 * se);
      }
    }
    std::vector<double> bad = C;
    bad[1] = 1e9;
    CHECK_THROWS_WITH(CovarianceReplicas(m.data, bad), Catch::Contains("not symmetric"));
  }

  SECTION("Monte-Carlo replicas fitted: their spread is the data's share of the uncertainty") {
    // χ² with the data's variances, the replicas drawn from that covariance, constraints at their
    // centres: the spread of μ̂ is the global impacts' "stat" part (the data's share), to the
    // statistical precision of 500 replicas (3 %; the model is close to linear at these counts).
    Model large = m;
    for (double& n : large.dense()->nominal) n *= 100;
    for (double& n : large.data) n *= 100;
    SerialLikelihood chi2(large, {}, linear(DataTerm::chisq));
    const FitResult fitted = fit(chi2, tight());
    REQUIRE(fitted.converged());
    const index_t nb = large.nbins();
    std::vector<double> C(static_cast<std::size_t>(nb * nb), 0.0);
    for (index_t b = 0; b < nb; ++b) C[static_cast<std::size_t>(b + b * nb)] = large.data[static_cast<std::size_t>(b)];
    const CovarianceReplicas sampler(large.data, C);
    std::vector<ReplicaInputs> in(n);
    for (int i = 0; i < n; ++i) {
      in[static_cast<std::size_t>(i)].data = sampler.replica(3, static_cast<std::uint64_t>(i));
      in[static_cast<std::size_t>(i)].variances = large.data;  // the fit's covariance stays the data's
    }
    chi2.set_replicas(in);
    const BatchResult r = ReplicaBatch<64>().fit(chi2, tight(), std::vector<FitOptions>(n));
    chi2.set_replicas({});
    CHECK(r.converged() == n);
    const Impacts global = global_impacts(chi2, fitted);
    const double stat = global.group(0, global.group_index("stat"));
    INFO("replica spread " << r.parameter(0).stddev << ", data share of σ " << stat << ", total σ " << fitted.uncertainties[0]);
    CHECK(r.parameter(0).stddev == Approx(stat).epsilon(0.1));
    CHECK(r.parameter(0).mean == Approx(fitted.x[0]).margin(0.2 * stat));
  }
}

TEST_CASE("replica uses: batched scans and frozen-group breakdowns equal their sequential fits", "[replica][scan]") {
  test::RandomModelSpec sp;
  sp.bins = 16;
  sp.nsyst = 5;
  sp.asymmetric = false;
  sp.seed = 7;
  sp.zero_counts = false;
  Model m = test::random_model(sp);
  m.groups = {{"first", {1, 2}}, {"second", {3, 4}}};
  m.nois = {2};
  SerialLikelihood nll(m, {}, linear());
  const auto minimizer = tight();
  const FitResult best = fit(nll, minimizer);
  REQUIRE(best.converged());
  ScanOptions so;
  so.points = 7;
  so.range = 2;
  const ReplicaBatch<dynamic> batch(8);

  SECTION("1D: the profile scan") {
    const Scan seq = profile_scan(nll, minimizer, best, "sig0", so);
    const GridScan g = batch_scan(batch, nll, minimizer, best, {"sig0"}, so);
    const Scan b = g.scan();
    REQUIRE(b.values.size() == seq.values.size());
    for (std::size_t i = 0; i < b.values.size(); ++i) {
      CHECK(b.values[i] == Approx(seq.values[i]).epsilon(1e-14));
      CHECK(b.dnll[i] == Approx(seq.dnll[i]).margin(1e-8));  // different starts, same minimum
      CHECK(converged(b.status[i]));
    }
  }

  SECTION("2D: every grid point is its own frozen fit") {
    so.points = 5;
    const GridScan g = batch_scan(batch, nll, minimizer, best, {"sig0", "syst1"}, so);
    REQUIRE(g.dnll.size() == 25);
    for (std::size_t a = 0; a < 5; ++a)
      for (std::size_t b = 0; b < 5; ++b) {
        FitOptions fo;
        fo.covariance = false;
        fo.frozen = {"sig0", "syst1"};
        fo.x0 = best.x;
        fo.x0[0] = g.values[0][a];
        fo.x0[2] = g.values[1][b];
        const FitResult r = fit(nll, minimizer, fo);
        CHECK(same_bits(g.dnll[a * 5 + b], r.nll - best.nll));
      }
    CHECK(g.dnll[12] == Approx(0).margin(1e-9));  // the centre is the best fit
  }

  SECTION("groups: the breakdown by frozen refits equals the traditional group impacts") {
    const Impacts imp = traditional_impacts(nll, best);
    const GroupBreakdown gb = frozen_group_breakdown(batch, nll, minimizer, best, m);
    REQUIRE(gb.groups == std::vector<std::string>{"first", "second"});
    for (std::size_t t = 0; t < gb.targets.size(); ++t)
      for (std::size_t k = 0; k < gb.groups.size(); ++k) {
        if (gb.targets[t] == "syst2" && gb.groups[k] == "first") continue;  // the NOI frozen in its own group
        INFO(gb.groups[k] << " on " << gb.targets[t]);
        CHECK(gb.impacts[t * gb.groups.size() + k] == Approx(imp.group(t, imp.group_index(gb.groups[k]))).epsilon(1e-6));
      }
  }

  SECTION("a batch over an objective holding replica inputs is refused") {
    nll.set_replicas(std::vector<ReplicaInputs>(3));
    CHECK_THROWS_WITH(batch_scan(batch, nll, minimizer, best, {"sig0"}, so), Catch::Contains("set_replicas({})"));
  }
}

TEST_CASE("replica uses: a hyperparameter scan is one batch (an L-curve)", "[replica][hyperparameters]") {
  test::RandomModelSpec sp;
  sp.bins = 12;
  sp.masked_bins = 6;
  sp.nsyst = 4;
  sp.asymmetric = false;
  sp.seed = 21;
  const Model m = test::random_model(sp);
  const double tau0 = 0.0;
  const std::vector<double> taus = {-3, -1.5, 0, 1, 2.5};
  auto regularized = [&](double tau) {
    auto nll = std::make_unique<SerialLikelihood>(m, cpu::Serial{}, linear());
    nll->add_regularizer(std::make_shared<SvdRegularizer>("svd", BinRange{m.nbins(), m.nbins_full()}, std::vector<index_t>{6}, tau));
    return nll;
  };
  auto nll = regularized(tau0);
  std::vector<ReplicaInputs> in(taus.size());
  for (std::size_t i = 0; i < taus.size(); ++i) in[i].penalty_scales = {std::exp(2 * (taus[i] - tau0))};
  nll->set_replicas(in);
  const auto minimizer = tight();
  const BatchResult r = ReplicaBatch<8>().fit(*nll, minimizer, std::vector<FitOptions>(taus.size()));
  nll->set_replicas({});
  std::vector<double> penalty;
  for (std::size_t i = 0; i < taus.size(); ++i) {
    auto alone = regularized(taus[i]);
    const FitResult s = fit(*alone, minimizer);
    INFO("tau " << taus[i]);
    REQUIRE(r.replicas[i].converged());
    for (std::size_t p = 0; p < s.x.size(); ++p) CHECK(r.replicas[i].x[p] == Approx(s.x[p]).margin(1e-7));
    CHECK(r.replicas[i].nll == Approx(s.nll).epsilon(1e-10));
    // The penalty's share: the regularized NLL minus the plain one at the same point.
    SerialLikelihood plain(m, {}, linear());
    penalty.push_back(r.replicas[i].nll - plain.value(r.replicas[i].x));
  }
  for (std::size_t i = 1; i < taus.size(); ++i) CHECK(penalty[i] * std::exp(-2 * taus[i]) <= penalty[i - 1] * std::exp(-2 * taus[i - 1]) + 1e-12);
}

TEST_CASE("replica uses: n3fit-style training with early stopping and positivity", "[replica][training]") {
  SECTION("splits: exact counts, a function of (seed, replica) only") {
    const auto a = training_split(40, 0.25, 3, 5), b = training_split(40, 0.25, 3, 5), c = training_split(40, 0.25, 3, 6);
    CHECK(a == b);
    CHECK(a != c);
    CHECK(std::count(a.begin(), a.end(), 0) == 10);
    CHECK(std::count(c.begin(), c.end(), 0) == 10);
    CHECK_THROWS_WITH(training_split(10, 1.0, 0, 0), Catch::Contains("fraction in [0, 1)"));
    // Per dataset (n3fit splits each): another element, another split of the same counts.
    const auto d = training_split(40, 0.25, 3, 5, 1);
    CHECK(d != a);
    CHECK(std::count(d.begin(), d.end(), 0) == 10);
  }

  // Signal-only masked bins (their yields are μ·N, negative for μ < 0) and data below the
  // background, so an unconstrained fit pulls μ negative.
  test::RandomModelSpec sp;
  sp.bins = 40;
  sp.masked_bins = 3;
  sp.procs = 2;
  sp.nsyst = 3;
  sp.asymmetric = false;
  sp.zero_counts = false;
  sp.absent_cells = false;
  sp.seed = 13;
  Model m = test::random_model(sp);
  const index_t P = m.nprocs();
  for (index_t b = m.nbins(); b < m.nbins_full(); ++b) {
    m.dense()->nominal[static_cast<std::size_t>(b * P + 1)] = 0;
    std::fill_n(m.dense()->logk.begin() + (b * P + 1) * m.ncoef(), m.ncoef(), 0.0);
  }
  for (index_t b = 0; b < m.nbins(); ++b) {
    const double bkg = m.dense()->nominal[static_cast<std::size_t>(b * P + 1)], sig = m.dense()->nominal[static_cast<std::size_t>(b * P)];
    m.data[static_cast<std::size_t>(b)] = std::round(std::max(0.0, bkg - 0.6 * sig));
  }
  SerialLikelihood nll(m, {}, linear());
  const auto positivity = std::make_shared<PositivityPenalty>("positivity", BinRange{m.nbins(), m.nbins_full()});
  nll.add_regularizer(positivity);
  const ReplicaBatch<dynamic> batch(4);
  TrustRegionOptions o;
  o.gtol = 1e-8;
  const TrustRegion<Gltr> minimizer(o);
  std::vector<ReplicaInputs> replicas(6);
  for (int i = 0; i < 6; ++i) replicas[static_cast<std::size_t>(i)].data = poisson_toy(m.data, 1, static_cast<std::uint64_t>(i));

  SECTION("a positivity penalty the likelihood does not hold is refused before any fit") {
    TrainingOptions to;
    to.positivity = std::make_shared<PositivityPenalty>("elsewhere", BinRange{m.nbins(), m.nbins_full()});
    REQUIRE_THROWS_AS(train_replicas(batch, nll, minimizer, replicas, to), usage_error);
    REQUIRE_THROWS_WITH(train_replicas(batch, nll, minimizer, replicas, to),
                        Catch::Contains("regularizer 'elsewhere' was not added to this likelihood") && Catch::Contains("add_regularizer"));
    CHECK(nll.regularizer_count() == 1);
    CHECK(nll.regularizer_name(0) == "positivity");
    CHECK(nll.regularizer_index(*positivity) == 0);
  }

  SECTION("without validation and positivity, training is the plain fit") {
    TrainingOptions to;
    to.validation_fraction = 0;
    to.covariance = true;
    SerialLikelihood plain(m, {}, linear());
    std::vector<ReplicaInputs> in = replicas;
    for (auto& r : in) r.penalty_scales = {0.0};
    const BatchResult r = train_replicas(batch, nll, minimizer, in, to);
    CHECK(nll.replica_count() == 0);  // cleared
    for (int i = 0; i < 6; ++i) {
      plain.set_data(replicas[static_cast<std::size_t>(i)].data);
      const FitResult s = fit(plain, minimizer);
      const ReplicaFit& f = r.replicas[static_cast<std::size_t>(i)];
      // The same minimiser on the same NLL, iterating on x itself rather than fit()'s x0 + y.
      for (std::size_t p = 0; p < s.x.size(); ++p) CHECK(f.x[p] == Approx(s.x[p]).margin(1e-7));
      CHECK(f.uncertainties[0] == Approx(s.uncertainties[0]).epsilon(1e-7));
      CHECK(f.best_iteration == f.iterations);
      CHECK(f.x[0] < 0);  // μ̂ < 0: the masked yields are negative
      CHECK(f.positive);  // no positivity asked, no veto
    }
  }

  SECTION("early stopping keeps the state of the best validation NLL") {
    TrainingOptions to;
    to.validation_fraction = 0.3;
    to.patience = 3;
    to.seed = 4;
    std::vector<ReplicaInputs> in = replicas;
    for (auto& r : in) r.penalty_scales = {0.0};
    const BatchResult r = train_replicas(batch, nll, minimizer, in, to);
    for (int i = 0; i < 6; ++i) {
      const ReplicaFit& f = r.replicas[static_cast<std::size_t>(i)];
      INFO("replica " << i << ": " << to_string(f.status) << ", best " << f.best_iteration << " of " << f.iterations);
      CHECK(f.error.empty());
      CHECK(f.best_iteration <= f.iterations);
      // The kept state's validation NLL is the lowest the replica saw: evaluate it directly.
      std::vector<ReplicaInputs> v(1, replicas[static_cast<std::size_t>(i)]);
      v[0].bins = training_split(m.nbins(), 0.3, 4, static_cast<std::uint64_t>(i));
      for (auto& b : v[0].bins) b = !b;
      v[0].penalty_scales = {0.0};
      nll.set_replicas(v);
      nll.use_replicas(std::vector<index_t>{0});
      const double kept = nll.value(f.x), start = nll.value(nll.default_parameters());
      nll.use_replicas({});
      nll.set_replicas({});
      CHECK(kept <= start);
    }
    // Replica 4 gives the same bits in a batch of 5 three wide (its split and fit are its own).
    std::vector<ReplicaInputs> five(in.begin(), in.begin() + 5);
    const BatchResult r5 = train_replicas(ReplicaBatch<dynamic>(3), nll, minimizer, five, to);
    for (std::size_t p = 0; p < r5.replicas[4].x.size(); ++p) CHECK(same_bits(r5.replicas[4].x[p], r.replicas[4].x[p]));
  }

  SECTION("a growing multiplier restarts patience unless positivity_restarts_patience is false (n3fit's)") {
    // The multiplier only counts here (the objective does not change) and the loss is best at x0: every
    // iteration is one without improvement. Growth every 2 iterations, patience 3.
    SerialLikelihood plain(m, {}, linear());
    std::vector<double> x0 = plain.default_parameters();
    x0[0] = 50;  // μ̂ < 0: at least 6 iterations from here (radius 1, 2, 4, …), so the limits below are reached first
    TrainingOptions to;
    to.validation_fraction = 0.3;
    to.patience = 3;
    to.positivity_initial = 1;
    to.positivity_growth = 2;
    to.positivity_every = 2;
    to.positivity_max = 256;  // 8 growths
    for (const bool restarts : {false, true}) {
      INFO("positivity_restarts_patience " << restarts);
      to.positivity_restarts_patience = restarts;
      int calls = 0, growths = 0;
      const auto loss = [&calls](const std::vector<double>&) { return ++calls == 1 ? 1.0 : 2.0; };
      ReplicaFit res;
      train_replica(minimizer, plain, loss, to, [&growths](double) { ++growths; }, x0, res);
      CHECK(res.best_iteration == 0);
      CHECK(res.x == x0);
      if (!restarts) {
        // One growth (iteration 2), and patience runs out at iteration 3 regardless.
        CHECK(res.status == FitStatus::converged_callback);
        CHECK(res.iterations == 3);
        CHECK(growths == 1);
      } else {
        // Each growth gives 3 more iterations: patience never runs out while the multiplier grows, and the
        // replica runs until the multiplier is at its maximum (8 growths, iterations 2 to 16), then to the
        // minimiser's convergence.
        CHECK(growths == 8);
        CHECK(converged(res.status));
        CHECK(res.iterations > 16);
      }
    }
    // The minimiser's iteration limit bounds the replica's iterations in all, across the restarts.
    {
      TrustRegionOptions lo = o;
      lo.maxiter = 5;
      to.positivity_restarts_patience = true;
      int calls = 0;
      const auto loss = [&calls](const std::vector<double>&) { return ++calls == 1 ? 1.0 : 2.0; };
      ReplicaFit res;
      train_replica(TrustRegion<Gltr>(lo), plain, loss, to, [](double) {}, x0, res);
      CHECK(res.status == FitStatus::max_iterations);
      CHECK(res.iterations == 5);
    }
    // positivity_max = +∞ (n3fit's): the multiplier stops at the largest finite double and the schedule keeps
    // ticking there for the whole fit (it used to overflow to +∞ and tick no more). From 1e306 ×10 every 2
    // iterations: 1e307 and 1e308 at iterations 2 and 4, then the largest double from iteration 6 on (x0 is at least
    // 6 iterations from the minimum, and the loss improves every time, so patience never ends it).
    {
      TrustRegionOptions lo = o;
      lo.maxiter = 12;
      TrainingOptions forever = to;
      forever.positivity_initial = 1e306;
      forever.positivity_growth = 10;
      forever.positivity_max = std::numeric_limits<double>::infinity();
      forever.positivity_restarts_patience = false;  // (with it, patience would never run out: refused below)
      int calls = 0;
      const auto loss = [&calls](const std::vector<double>&) { return -static_cast<double>(++calls); };  // always improving
      std::vector<double> lambdas;
      ReplicaFit res;
      train_replica(TrustRegion<Gltr>(lo), plain, loss, forever, [&lambdas](double l) { lambdas.push_back(l); }, x0, res);
      CHECK(res.iterations >= 6);
      REQUIRE(lambdas.size() >= 3);
      for (const double l : lambdas) CHECK(std::isfinite(l));
      CHECK(lambdas.back() == std::numeric_limits<double>::max());
      forever.positivity_restarts_patience = true;
      CHECK_THROWS_WITH(forever.validate(), Catch::Contains("patience never runs out") && Catch::Contains("positivity_restarts_patience = false"));
    }
    // A growth of 1 below the maximum would restart a converged minimiser for ever: refused.
    to.positivity_growth = 1;
    CHECK_THROWS_WITH(to.validate(), Catch::Contains("growth > 1"));
    to.positivity_max = to.positivity_initial;
    CHECK_NOTHROW(to.validate());
  }

  SECTION("positivity: the growing penalty keeps the masked yields physical; the veto flags those that are not") {
    TrainingOptions to;
    to.validation_fraction = 0;
    to.positivity = positivity;
    to.positivity_initial = 1;
    to.positivity_growth = 10;
    to.positivity_every = 3;
    to.positivity_max = 1e10;
    to.positivity_tolerance = 1e-3;
    const BatchResult r = train_replicas(batch, nll, minimizer, replicas, to);
    for (const auto& f : r.replicas) {
      INFO(to_string(f.status) << ", mu " << f.x[0]);
      CHECK(f.error.empty());
      CHECK(f.x[0] > -1e-3);
      CHECK(f.positive);
    }
    // A multiplier that never grows past 10⁻⁶: the veto catches the unphysical yields.
    to.positivity_initial = to.positivity_max = 1e-6;
    const BatchResult weak = train_replicas(batch, nll, minimizer, replicas, to);
    for (const auto& f : weak.replicas) {
      CHECK(f.x[0] < -1e-2);
      CHECK_FALSE(f.positive);
    }
  }
}
