// SPDX-License-Identifier: MIT
// Prefit and postfit histograms against direct evaluations and finite-difference Jacobians.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>

#include "fitlib/fit.hpp"
#include "fitlib/postfit/histograms.hpp"
#include "policies.hpp"
#include "random_model.hpp"

using namespace fitlib;

namespace {

/// A model with a masked channel, asymmetric log-normal systematics (one unconstrained) and no template variances;
/// `nsyst` = 140 makes three blocks of directions (64, 64 and a partial one).
Model histogram_model(index_t nsyst = 6) {
  test::RandomModelSpec sp;
  sp.bins = 14;
  sp.masked_bins = 5;
  sp.procs = 3;
  sp.signals = 1;
  sp.nsyst = nsyst;
  sp.unconstrained = 1;
  sp.seed = 23;
  Model m = test::random_model(sp);
  m.constraint_weights[2] = 4;  // a constraint of width 1/2
  return m;
}

/// diag(J·C·Jᵀ) with J the central-difference Jacobian of the bins' summed yields at x (C `[n × n]`).
template <class Lik>
std::vector<double> fd_variance(Lik& lik, const std::vector<double>& x, const std::vector<double>& C) {
  const std::size_t n = x.size();
  const index_t bf = lik.model().nbins_full(), np = lik.model().nprocs();
  std::vector<std::vector<double>> J(n);
  for (std::size_t i = 0; i < n; ++i) {
    const double h = 1e-6 * std::max(1.0, std::abs(x[i]));
    std::vector<double> up = x, down = x;
    up[i] += h;
    down[i] -= h;
    const std::vector<double> a = lik.yields(up), b = lik.yields(down);
    J[i].assign(static_cast<std::size_t>(bf), 0.0);
    for (index_t bin = 0; bin < bf; ++bin)
      for (index_t p = 0; p < np; ++p) {
        const auto c = static_cast<std::size_t>(bin * np + p);
        J[i][static_cast<std::size_t>(bin)] += (a[c] - b[c]) / (2 * h);
      }
  }
  std::vector<double> var(static_cast<std::size_t>(bf), 0.0);
  for (std::size_t b = 0; b < static_cast<std::size_t>(bf); ++b)
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = 0; j < n; ++j) var[b] += J[i][b] * C[i + j * n] * J[j][b];
  return var;
}

template <class Lik>
void check_histograms(Lik& lik, const FitResult& r) {
  const Model& m = lik.model();
  const Histograms h = histograms(lik, r);
  REQUIRE(h.nbins == m.nbins_full());
  REQUIRE(h.nprocs == m.nprocs());
  CHECK(h.prefit == lik.yields(lik.default_parameters()));
  CHECK(h.postfit == lik.yields(r.x));
  CHECK(h.data == m.data);
  CHECK(h.data_variance == m.data);  // Poisson: the counts
  for (index_t b = 0; b < h.nbins; ++b) {
    double pre = 0, post = 0;
    for (index_t p = 0; p < h.nprocs; ++p) {
      pre += h.prefit[static_cast<std::size_t>(b * h.nprocs + p)];
      post += h.postfit[static_cast<std::size_t>(b * h.nprocs + p)];
    }
    CHECK(h.prefit_total[static_cast<std::size_t>(b)] == Approx(pre).epsilon(1e-14));
    CHECK(h.postfit_total[static_cast<std::size_t>(b)] == Approx(post).epsilon(1e-14));
  }
  // The prefit covariance: 1/w on the constrained nuisances, nothing on the POI and the free nuisance.
  const std::size_t n = r.x.size();
  std::vector<double> c0(n * n, 0.0);
  for (index_t s = 0; s < m.nsyst(); ++s)
    if (const double w = m.constraint_weights[static_cast<std::size_t>(s)]; w > 0) {
      const auto i = static_cast<std::size_t>(m.npoi() + s);
      c0[i + i * n] = 1 / w;
    }
  const std::vector<double> pre = fd_variance(lik, lik.default_parameters(), c0), post = fd_variance(lik, r.x, r.covariance);
  for (std::size_t b = 0; b < pre.size(); ++b) {
    CHECK(h.prefit_variance[b] == Approx(pre[b]).epsilon(1e-6));
    CHECK(h.postfit_variance[b] == Approx(post[b]).epsilon(1e-6));
    CHECK(h.postfit_variance[b] > 0);
  }
}

LikelihoodOptions without_bin_by_bin() {
  LikelihoodOptions o;
  o.bin_by_bin.enabled = false;
  return o;
}

}  // namespace

TEMPLATE_TEST_CASE("histograms: every policy, three blocks of directions, variances as J·C·Jᵀ with a finite-difference J",
                   "[postfit][histograms]", FITLIB_TEST_POLICIES) {
  auto lik = test::likelihood_of<TestType>(histogram_model(140), 3, without_bin_by_bin());
  const FitResult r = fit(lik, TrustRegion<Exact>{});
  REQUIRE(r.converged());
  REQUIRE(r.covariance_status == CovarianceStatus::accurate);
  check_histograms(lik, r);
}

TEST_CASE("histograms: yields per process and summed, variances as J·C·Jᵀ with a finite-difference J", "[postfit][histograms]") {
  const Model m = histogram_model();
  SerialLikelihood lik(m, {}, without_bin_by_bin());
  const FitResult r = fit(lik, TrustRegion<Exact>{});
  REQUIRE(r.converged());
  REQUIRE(r.covariance_status == CovarianceStatus::accurate);
  check_histograms(lik, r);

  SECTION("sparse templates over threads, the same numbers") {
    Model sparse = m;
    sparse.make_sparse();
    SparseThreadedLikelihood threaded(std::move(sparse), cpu::Threads{3}, without_bin_by_bin());
    const FitResult rt = fit(threaded, TrustRegion<Exact>{});
    check_histograms(threaded, rt);
  }
  SECTION("a frozen parameter contributes nothing to the postfit variances") {
    FitOptions fo;
    fo.frozen = {r.names[3]};
    const FitResult rf = fit(lik, TrustRegion<Exact>{}, fo);
    check_histograms(lik, rf);
  }
  SECTION("without a usable covariance the postfit variances are NaN, the yields still there") {
    FitResult bad = r;
    bad.covariance_status = CovarianceStatus::failed;
    const Histograms h = histograms(lik, bad);
    CHECK(std::all_of(h.postfit_variance.begin(), h.postfit_variance.end(), [](double v) { return std::isnan(v); }));
    CHECK(h.postfit == lik.yields(r.x));
  }
}

TEST_CASE("histograms: refused with bin-by-bin statistics, and without the fit's covariance", "[postfit][histograms]") {
  test::RandomModelSpec sp;
  sp.template_stats = true;
  SerialLikelihood lik(test::random_model(sp));
  REQUIRE(lik.bin_by_bin_per_bin() > 0);
  const FitResult r = fit(lik, TrustRegion<Exact>{});
  CHECK_THROWS_WITH(histograms(lik, r), Catch::Contains("bin-by-bin statistics") && Catch::Contains("--noBinByBinStat"));

  SerialLikelihood plain(histogram_model(), {}, without_bin_by_bin());
  FitOptions fo;
  fo.covariance = false;
  const FitResult no_cov = fit(plain, TrustRegion<Exact>{}, fo);
  CHECK_THROWS_WITH(histograms(plain, no_cov), Catch::Contains("FitOptions::covariance"));
}
