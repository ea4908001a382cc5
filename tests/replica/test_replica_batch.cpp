// SPDX-License-Identifier: MIT
// ReplicaBatch: fibers, per-replica likelihood inputs, and batched fits bitwise equal to sequential ones.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "fitlib/detail/fiber.hpp"
#include "fitlib/fit.hpp"
#include "random_model.hpp"
#include "test_problems.hpp"

using namespace fitlib;
using test::same_bits;

namespace {

Model small_model(bool template_stats = true, std::uint64_t seed = 5) {
  test::RandomModelSpec sp;
  sp.bins = 30;
  sp.masked_bins = 4;
  sp.procs = 3;
  sp.nsyst = 6;
  sp.template_stats = template_stats;
  sp.seed = seed;
  return test::random_model(sp);
}

/// Toys of the likelihood as replica inputs (data and frequentist constraint centres).
std::vector<ReplicaInputs> toys(SerialLikelihood& nll, int count, std::uint64_t seed = 11) {
  std::vector<ReplicaInputs> in;
  for (int i = 0; i < count; ++i) {
    const Toy t = generate_toy(nll, seed, static_cast<std::uint64_t>(i + 1));
    ReplicaInputs r;
    r.data = t.data;
    r.constraint_centres = t.constraints.theta0;
    in.push_back(std::move(r));
  }
  return in;
}

}  // namespace

TEST_CASE("fiber: suspends, resumes, rethrows and unwinds on cancel", "[replica][fiber]") {
  std::vector<int> trace;
  detail::Fiber f([&] {
    trace.push_back(1);
    detail::Fiber::suspend();
    trace.push_back(3);
  });
  CHECK_FALSE(detail::Fiber::inside());
  f.resume();
  trace.push_back(2);
  f.resume();
  CHECK(f.done());
  CHECK(trace == std::vector<int>{1, 2, 3});

  detail::Fiber thrower([] {
    detail::Fiber::suspend();
    throw std::runtime_error("boom");
  });
  thrower.resume();
  CHECK_THROWS_WITH(thrower.resume(), "boom");
  CHECK(thrower.done());

  int destroyed = 0;
  {
    struct Guard {
      int* n;
      ~Guard() { ++*n; }
    };
    detail::Fiber cancelled([&] {
      Guard g{&destroyed};
      detail::Fiber::suspend();
      FAIL("a cancelled fiber must not run on");
    });
    cancelled.resume();
    CHECK(destroyed == 0);
  }  // the destructor cancels it: its stack unwinds
  CHECK(destroyed == 1);
}

TEST_CASE("likelihood replicas: each column evaluates with its replica's inputs, bitwise as alone", "[replica][likelihood]") {
  const Model m = small_model();
  SerialLikelihood nll(m);
  auto in = toys(nll, 3);
  in[1].bins.assign(static_cast<std::size_t>(m.nbins()), 1);
  for (std::size_t b = 0; b < in[1].bins.size(); b += 3) in[1].bins[b] = 0;
  nll.set_replicas(in);
  const index_t n = nll.size();
  std::vector<double> X;
  for (int j = 0; j < 4; ++j)
    for (index_t i = 0; i < n; ++i) X.push_back(nll.default_parameters()[static_cast<std::size_t>(i)] + 0.05 * (j + 1) * std::sin(i + j));
  std::vector<double> V(X.size());
  for (std::size_t i = 0; i < V.size(); ++i) V[i] = std::cos(0.7 * static_cast<double>(i));
  const std::vector<index_t> which = {2, 0, -1, 1};

  std::vector<double> f(4), g(static_cast<std::size_t>(n * 4)), hv(g.size()), H(static_cast<std::size_t>(n * n * 4));
  nll.use_replicas(which);
  nll.value_grad({X.data(), n, 4}, f, {g.data(), n, 4});
  nll.hessp({X.data(), n, 4}, {V.data(), n, 4}, {hv.data(), n, 4});
  nll.hessian({X.data(), n, 4}, f, {g.data(), n, 4}, {H.data(), n, n * 4});
  nll.use_replicas({});

  for (int j = 0; j < 4; ++j) {
    // Alone: a likelihood whose own inputs are the replica's (bins left out: a model without them).
    SerialLikelihood alone(m);
    const index_t r = which[static_cast<std::size_t>(j)];
    if (r >= 0) {
      alone.set_replicas({in[static_cast<std::size_t>(r)]});
      alone.use_replicas(std::vector<index_t>{0});
    }
    std::vector<double> f1(1), g1(static_cast<std::size_t>(n)), hv1(g1.size()), H1(static_cast<std::size_t>(n * n));
    const double* xj = X.data() + j * n;
    alone.value_grad({xj, n, 1}, f1, {g1.data(), n, 1});
    alone.hessp({xj, n, 1}, {V.data() + j * n, n, 1}, {hv1.data(), n, 1});
    alone.hessian({xj, n, 1}, f1, {g1.data(), n, 1}, {H1.data(), n, n});
    INFO("column " << j << " (replica " << r << ")");
    CHECK(same_bits(f1[0], f[static_cast<std::size_t>(j)]));
    CHECK(same_bits(g1, {g.begin() + j * n, g.begin() + (j + 1) * n}));
    CHECK(same_bits(hv1, {hv.begin() + j * n, hv.begin() + (j + 1) * n}));
    CHECK(same_bits(H1, {H.begin() + j * n * n, H.begin() + (j + 1) * n * n}));
  }

  SECTION("a left-out bin is a bin the data term does not see") {
    // Replica 1 without every third bin equals the same data with those bins' terms subtracted.
    const auto& r1 = in[1];
    SerialLikelihood full(m), third(m);
    full.set_data(r1.data);
    std::vector<ReplicaInputs> only_third(1);
    only_third[0].data = r1.data;
    only_third[0].constraint_centres = r1.constraint_centres;
    only_third[0].bins.assign(r1.bins.size(), 0);
    for (std::size_t b = 0; b < r1.bins.size(); ++b) only_third[0].bins[b] = r1.bins[b] ? 0 : 1;
    third.set_replicas(only_third);
    third.use_replicas(std::vector<index_t>{0});
    full.set_constraint_centres(r1.constraint_centres);
    const std::vector<double> x(X.begin(), X.begin() + n);
    // Constraints count in both halves, so: kept + left-out = full + constraints.
    SerialLikelihood constraints_only(m);
    std::vector<ReplicaInputs> none(1);
    none[0].data = r1.data;
    none[0].constraint_centres = r1.constraint_centres;
    none[0].bins.assign(r1.bins.size(), 0);
    constraints_only.set_replicas(none);
    constraints_only.use_replicas(std::vector<index_t>{0});
    nll.use_replicas(std::vector<index_t>{1});
    const double kept = nll.value(x);
    nll.use_replicas({});
    CHECK(kept + third.value(x) == Approx(full.value(x) + constraints_only.value(x)).epsilon(1e-12));
  }

  SECTION("bad replica inputs name the replica and the field") {
    std::vector<ReplicaInputs> bad(2);
    bad[1].data.assign(3, 1.0);
    CHECK_THROWS_WITH(nll.set_replicas(bad), Catch::Contains("replica 1: data has 3 entries"));
    CHECK(nll.replica_count() == 3);  // a refused set leaves the inputs as they were
    bad[1].data.assign(static_cast<std::size_t>(m.nbins()), 1.0);
    bad[1].data[2] = -1;
    CHECK_THROWS_WITH(nll.set_replicas(bad), Catch::Contains("replica 1: observed count in"));
    bad[1].data[2] = 1;
    bad[1].constraint_centres.assign(static_cast<std::size_t>(m.nsyst()), std::numeric_limits<double>::quiet_NaN());
    CHECK_THROWS_WITH(nll.set_replicas(bad), Catch::Contains("constraint centre of systematic"));
    nll.set_replicas(bad = std::vector<ReplicaInputs>(2));
    CHECK_THROWS_WITH(nll.use_replicas(std::vector<index_t>{2}), Catch::Contains("replica 2 is not set"));
    nll.use_replicas(std::vector<index_t>{0, 1});
    CHECK_THROWS_WITH(nll.value(std::vector<double>(static_cast<std::size_t>(n), 0.1)), Catch::Contains("name one per column"));
    nll.use_replicas({});
  }
}

TEST_CASE("likelihood replicas: the products kept between passes change no bit of any result", "[replica][likelihood]") {
  // A long-lived likelihood, which keeps its points' products (and Kᵀu) from pass to pass, against
  // a fresh one per call, over a seeded mix of passes: subsets and orders of replicas, points
  // revisited, new data, β held fixed; asymmetric templates with bin-by-bin statistics.
  const Model m = small_model();
  SerialLikelihood kept(m);
  auto in = toys(kept, 4);
  kept.set_replicas(in);
  const index_t n = kept.size();
  std::vector<std::vector<double>> points;
  for (int p = 0; p < 5; ++p) {
    points.push_back(kept.default_parameters());
    for (index_t i = 0; i < n; ++i) points.back()[static_cast<std::size_t>(i)] += 0.03 * p * std::sin(1.3 * static_cast<double>(i + p));
  }
  std::vector<double> beta, X;
  std::vector<index_t> which;
  std::mt19937 rng(17);
  for (int call = 0; call < 200; ++call) {
    const int what = static_cast<int>(rng() % 10);
    if (what == 0) {  // new data for one replica
      in[rng() % in.size()].data = generate_toy(kept, 99, static_cast<std::uint64_t>(call)).data;
      kept.set_replicas(in);
      continue;
    }
    if (what == 1) {  // β held at the current β̂, or released
      beta = beta.empty() ? kept.bin_by_bin_parameters(points[rng() % points.size()]) : std::vector<double>{};
      kept.fix_bin_by_bin(beta);
      continue;
    }
    // Half of the passes revisit the last pass's points (as Krylov steps at an iterate do), in
    // another order (as a pooled batch does when other replicas come and go).
    if (what >= 6 && !X.empty()) {
      std::vector<index_t> order(which.size());
      std::iota(order.begin(), order.end(), index_t{0});
      std::shuffle(order.begin(), order.end(), rng);
      std::vector<double> X2;
      std::vector<index_t> which2;
      for (index_t j : order) {
        X2.insert(X2.end(), X.begin() + j * n, X.begin() + (j + 1) * n);
        which2.push_back(which[static_cast<std::size_t>(j)]);
      }
      X.swap(X2);
      which.swap(which2);
    } else {
      const index_t cols = 1 + static_cast<index_t>(rng() % 4);
      X.clear();
      which.clear();
      for (index_t j = 0; j < cols; ++j) {
        const auto& x = points[rng() % points.size()];
        X.insert(X.end(), x.begin(), x.end());
        which.push_back(static_cast<index_t>(rng() % 5) - 1);
      }
    }
    const auto cols = static_cast<index_t>(which.size());
    std::vector<double> V;
    for (index_t j = 0; j < cols; ++j)
      for (index_t i = 0; i < n; ++i) V.push_back(std::cos(static_cast<double>(i * (call + 1) + j)));
    SerialLikelihood fresh(m);
    fresh.set_replicas(in);
    fresh.fix_bin_by_bin(beta);
    const bool hvp = what % 2 == 0 || what == 7;
    std::vector<double> f1(static_cast<std::size_t>(cols)), f2(f1), o1(static_cast<std::size_t>(n * cols)), o2(o1);
    for (SerialLikelihood* l : {&kept, &fresh}) {
      l->use_replicas(which);
      std::vector<double>& f = l == &kept ? f1 : f2;
      std::vector<double>& o = l == &kept ? o1 : o2;
      if (hvp) l->hessp({X.data(), n, cols}, {V.data(), n, cols}, {o.data(), n, cols});
      else l->value_grad({X.data(), n, cols}, f, {o.data(), n, cols});
      l->use_replicas({});
    }
    INFO("call " << call << (hvp ? ": HVPs" : ": values and gradients") << " of " << cols << " columns");
    CHECK(same_bits(f1, f2));
    CHECK(same_bits(o1, o2));
  }
}

template <class Sub>
void check_batch_equals_sequential(index_t width, Curvature curvature = Curvature::exact, EndGame end_game = EndGame::hessian) {
  const Model m = small_model();
  SerialLikelihood nll(m);
  const auto in = toys(nll, 7);
  TrustRegionOptions o;
  o.gtol = 1e-9;
  o.curvature = curvature;
  o.end_game = end_game;
  const TrustRegion<Sub> minimizer(o);

  std::vector<FitOptions> opts(in.size());
  opts[3].frozen = {"sig0"};  // replicas differ in their options too
  opts[5].x0 = nll.default_parameters();
  opts[5].x0[1] += 0.5;

  nll.set_replicas(in);
  ReplicaBatch<> batch(width);
  const BatchResult b = batch.fit(nll, minimizer, opts);
  REQUIRE(b.replicas.size() == in.size());
  CHECK(b.statistics.columns > 0);
  CHECK(b.statistics.active_fraction > 0);
  CHECK(b.statistics.active_fraction <= 1);

  SerialLikelihood seq(m);
  for (std::size_t r = 0; r < in.size(); ++r) {
    seq.set_data(in[r].data);
    seq.set_constraint_centres(in[r].constraint_centres);
    const FitResult s = fit(seq, minimizer, opts[r]);
    const ReplicaFit& f = b.replicas[r];
    INFO("replica " << r << ", width " << width);
    CHECK(f.error.empty());
    CHECK(f.status == s.status);
    CHECK(f.iterations == s.iterations);
    CHECK(f.counts.hvps == s.counts.hvps);
    CHECK(f.counts.gauss_newton == s.counts.gauss_newton);
    CHECK((curvature == Curvature::exact || s.counts.gauss_newton > 0));
    CHECK(s.converged());
    CHECK((end_game == EndGame::hessian || s.counts.hvps > 0));
    CHECK(same_bits(f.x, s.x));
    CHECK(same_bits(f.nll, s.nll));
    CHECK(same_bits(f.covariance, s.covariance));
  }
}

TEST_CASE("replica batch: every replica bitwise equals its sequential fit, whatever the width", "[replica][batch]") {
  for (index_t w : {1, 3, 7, 64}) check_batch_equals_sequential<Gltr>(w);
  check_batch_equals_sequential<SteihaugCG>(4);
  check_batch_equals_sequential<Exact>(4);
  check_batch_equals_sequential<Exact>(3, Curvature::gauss_newton);
  check_batch_equals_sequential<Exact>(3, Curvature::gauss_newton, EndGame::krylov);
}

TEST_CASE("replica batch: a failing replica is marked and disturbs no other", "[replica][batch]") {
  const Model m = small_model();
  SerialLikelihood nll(m);
  nll.set_replicas(toys(nll, 5));
  const TrustRegion<Gltr> minimizer;
  std::vector<FitOptions> opts(5);
  opts[1].x0 = nll.default_parameters();
  opts[1].x0[2] = std::numeric_limits<double>::quiet_NaN();  // objective not finite at the start
  opts[3].frozen = {"no_such_parameter"};                     // throws inside the replica
  ReplicaBatch<4> batch;
  const BatchResult b = batch.fit(nll, minimizer, opts);
  CHECK(b.replicas[1].status == FitStatus::not_finite);
  CHECK(b.replicas[3].status == FitStatus::aborted);
  CHECK_THAT(b.replicas[3].error, Catch::Contains("no_such_parameter"));
  for (std::size_t r : {0u, 2u, 4u}) CHECK(b.replicas[r].converged());
  CHECK(b.converged() == 3);

  const ReplicaBatch<4> alone;
  std::vector<FitOptions> one(3);
  nll.set_replicas(toys(nll, 3));
  const BatchResult c = alone.fit(nll, minimizer, one);
  CHECK(same_bits(c.replicas[2].x, b.replicas[2].x));  // replica 2 unaffected by its failing neighbours

  SECTION("more replicas than inputs is an error before anything runs") {
    std::vector<FitOptions> many(4);
    CHECK_THROWS_WITH(alone.fit(nll, minimizer, many), Catch::Contains("holds inputs for 3 replicas"));
  }
}

TEST_CASE("replica batch: any objective, here Rosenbrock from many starts, bitwise as sequential fits", "[replica][batch]") {
  test::Rosenbrock rosen{6};
  std::vector<FitOptions> starts(9);
  for (std::size_t r = 0; r < starts.size(); ++r) {
    starts[r].x0.assign(6, 0.0);
    for (std::size_t i = 0; i < 6; ++i) starts[r].x0[i] = std::sin(1.7 * static_cast<double>(r + 1) + static_cast<double>(i));
  }
  TrustRegionOptions o;
  o.gtol = 1e-10;
  const TrustRegion<Gltr> krylov(o);
  const TrustRegion<Exact> exact(o);
  const BatchResult k = ReplicaBatch<4>().fit(rosen, krylov, starts), e = ReplicaBatch<4>().fit(rosen, exact, starts);
  for (std::size_t r = 0; r < starts.size(); ++r) {
    INFO("start " << r);
    const FitResult sk = fit(rosen, krylov, starts[r]), se = fit(rosen, exact, starts[r]);
    CHECK(k.replicas[r].converged());
    CHECK(same_bits(k.replicas[r].x, sk.x));
    CHECK(k.replicas[r].iterations == sk.iterations);
    CHECK(same_bits(e.replicas[r].x, se.x));
    CHECK(same_bits(e.replicas[r].covariance, se.covariance));
  }
}

TEST_CASE("replica batch: statistics of batches run one after another add up as one batch's", "[replica][batch]") {
  BatchStatistics a, b;
  a.replicas = 64, a.width = 64, a.evaluations = 100, a.columns = 5000, a.active_fraction = 0.9, a.rounds = 40, a.seconds = 2;
  b.replicas = 36, b.width = 64, b.evaluations = 80, b.columns = 2000, b.active_fraction = 0.5, b.rounds = 60, b.seconds = 1;
  BatchStatistics all;
  all += a;
  all += b;
  CHECK(all.replicas == 100);
  CHECK(all.width == 64);
  CHECK(all.evaluations == 180);
  CHECK(all.columns == 7000);
  CHECK(all.rounds == 100);
  CHECK(all.seconds == 3);
  CHECK(all.active_fraction == Approx((0.9 * 40 + 0.5 * 60) / 100).epsilon(1e-15));
  BatchStatistics none;
  none += BatchStatistics{};
  CHECK(none.active_fraction == 0);  // no rounds: nothing to average, and no NaN
}

TEST_CASE("early stopping: keeps the best point, stops after patience, restarts patience", "[replica][training]") {
  // The validation loss of a point is its first coordinate.
  EarlyStopping stop(true, 3, 0.1, [](const std::vector<double>& x) { return x[0]; }, {5.0});
  CHECK(stop.best_loss() == 5.0);
  CHECK_FALSE(stop.after_step({4.0}, true, 1));  // better by more than 0.1: kept
  CHECK(stop.best() == std::vector<double>{4.0});
  CHECK(stop.best_iteration() == 1);
  CHECK_FALSE(stop.after_step({3.95}, true, 2));  // better by less than min_improvement: not kept
  CHECK_FALSE(stop.after_step({1.0}, false, 3));  // a rejected step is not evaluated
  stop.restart_patience();
  CHECK_FALSE(stop.after_step({4.5}, true, 4));
  CHECK_FALSE(stop.after_step({4.5}, true, 5));
  CHECK(stop.after_step({4.5}, true, 6));  // three iterations without a kept point
  CHECK(stop.best() == std::vector<double>{4.0});
  CHECK(stop.best_iteration() == 1);
  EarlyStopping off(false, 1, 0, [](const std::vector<double>&) -> double { throw std::logic_error("never evaluated"); }, {1.0});
  CHECK_FALSE(off.after_step({0.0}, true, 1));
}

TEST_CASE("early stopping: points of infinite loss are never kept, and patience starts with the first other", "[replica][training]") {
  // n3fit's gate: a loss of +∞ (validation χ² above a threshold, positivity failing) marks a point that may not be kept.
  const double inf = std::numeric_limits<double>::infinity();
  EarlyStopping stop(true, 2, 0, [&](const std::vector<double>& x) { return x[0] > 10 ? inf : x[0]; }, {50.0});
  CHECK(stop.best_loss() == inf);
  for (index_t it = 1; it <= 5; ++it) CHECK_FALSE(stop.after_step({20.0}, true, it));  // the clock has not started
  CHECK(stop.best() == std::vector<double>{50.0});
  CHECK_FALSE(stop.after_step({7.0}, true, 6));  // the first finite loss: kept, the clock starts
  CHECK(stop.best_iteration() == 6);
  CHECK_FALSE(stop.after_step({20.0}, true, 7));
  CHECK(stop.after_step({8.0}, true, 8));  // patience 2 without improvement
  CHECK(stop.best() == std::vector<double>{7.0});
  // A NaN loss is gated too: never kept, and no clock.
  EarlyStopping nan(true, 1, 0, [&](const std::vector<double>& x) { return x[0] < 0 ? std::nan("") : x[0]; }, {-1.0});
  CHECK_FALSE(nan.after_step({-2.0}, true, 1));
  CHECK_FALSE(nan.after_step({-3.0}, true, 2));
  CHECK_FALSE(nan.after_step({4.0}, true, 3));
  CHECK(nan.best() == std::vector<double>{4.0});
  CHECK(nan.after_step({5.0}, true, 4));
}
