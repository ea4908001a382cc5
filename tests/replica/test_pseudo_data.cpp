// SPDX-License-Identifier: MIT
// Pseudo-data generators: Philox known answers, sampler moments and goodness of fit, reproducibility, Asimov closure.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include <fitlib/replica/pseudo_data.hpp>

#include "random_model.hpp"

using namespace fitlib;

namespace {

// Tolerances are 5 standard errors of each estimator: tight enough to catch a wrong sampler
// (a 1% bias in a Poisson(37) mean is 8 σ at N = 10⁴), loose enough never to trip on a correct
// one; the seeds are fixed, so the outcome is deterministic anyway.
constexpr double n_sigma = 5;

struct Moments {
  double mean = 0, var = 0;
};

Moments moments(const std::vector<double>& v) {
  double m = 0, s = 0;
  for (std::size_t i = 0; i < v.size(); ++i) {
    const double d = v[i] - m;
    m += d / static_cast<double>(i + 1);
    s += d * (v[i] - m);
  }
  return {m, s / static_cast<double>(v.size() - 1)};
}

/// Checks the sample mean and variance against (mean, var), given the distribution's fourth
/// central moment: SE(mean) = √(σ²/N), SE(s²) ≈ √((μ₄ − σ⁴)/N).
void check_moments(const std::vector<double>& v, double mean, double var, double mu4) {
  const double n = static_cast<double>(v.size());
  const Moments m = moments(v);
  INFO("sample mean " << m.mean << " (expected " << mean << "), sample variance " << m.var << " (expected " << var << ")");
  CHECK(std::abs(m.mean - mean) < n_sigma * std::sqrt(var / n));
  CHECK(std::abs(m.var - var) < n_sigma * std::sqrt((mu4 - var * var) / n));
}

/// Wilson–Hilferty approximation of the χ²(df) quantile at standard-normal deviate z.
double chi2_quantile(double df, double z) {
  const double a = 2.0 / (9.0 * df);
  return df * std::pow(1 - a + z * std::sqrt(a), 3);
}

double poisson_pmf(double k, double mu) { return std::exp(-mu + k * std::log(mu) - std::lgamma(k + 1)); }

/// Pearson's χ² of a sample's histogram against the Poisson(mu) pmf, over cells of consecutive k
/// that each expect ≥ N/50 counts (the tail beyond the last k folded into the last cell).
struct GoodnessOfFit {
  double chi2 = 0;
  int cells = 0;
};

GoodnessOfFit poisson_gof(const std::vector<double>& draws, double mu) {
  const double n = static_cast<double>(draws.size());
  const auto kmax = static_cast<std::size_t>(mu + 12 * std::sqrt(mu) + 30);
  std::vector<double> count(kmax + 1, 0.0);
  for (double k : draws) count[std::min(static_cast<std::size_t>(k), kmax)] += 1;
  std::vector<double> obs, expct;
  double o = 0, e = 0, cdf = 0;
  for (std::size_t k = 0; k <= kmax; ++k) {
    const double p = k < kmax ? poisson_pmf(static_cast<double>(k), mu) : 1 - cdf;  // last k takes the tail
    cdf += p;
    o += count[k];
    e += n * p;
    if (e >= n / 50) {
      obs.push_back(o);
      expct.push_back(e);
      o = e = 0;
    }
  }
  obs.back() += o;  // a thin remainder joins the last full cell
  expct.back() += e;
  GoodnessOfFit g;
  for (std::size_t i = 0; i < obs.size(); ++i) g.chi2 += (obs[i] - expct[i]) * (obs[i] - expct[i]) / expct[i];
  g.cells = static_cast<int>(obs.size());
  return g;
}

std::uint64_t bits(double x) {
  std::uint64_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}

bool bitwise_equal(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0);
}

long ulp_distance(double a, double b) {
  return std::abs(static_cast<long>(bits(a)) - static_cast<long>(bits(b)));
}

}  // namespace

TEST_CASE("Philox4x32-10 reproduces Random123's known-answer vectors", "[replica][random]") {
  // Random123 tests/kat_vectors, the three "philox4x32 10" lines: counter, key → output.
  CHECK(Philox4x32::apply({0, 0, 0, 0}, {0, 0}) == Philox4x32::Counter{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8});
  CHECK(Philox4x32::apply({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}) ==
        Philox4x32::Counter{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd});
  CHECK(Philox4x32::apply({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}) ==
        Philox4x32::Counter{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1});
  static_assert(Philox4x32::apply({0, 0, 0, 0}, {0, 0})[0] == 0x6627e8d5);  // usable at compile time
}

TEST_CASE("portable exp and log agree with the C library", "[replica][random]") {
  RandomStream r(99, 0, Stream::user);
  long worst_exp = 0, worst_log = 0;
  for (int i = 0; i < 20000; ++i) {
    const double x = std::fma(2.0, r.uniform(), -1.0) * 740;
    worst_exp = std::max(worst_exp, ulp_distance(detail::portable_exp(x), std::exp(x)));
    const double y = std::exp(std::fma(2.0, r.uniform(), -1.0) * 700), z = 4 * r.uniform();
    worst_log = std::max({worst_log, ulp_distance(detail::portable_log(y), std::log(y)), ulp_distance(detail::portable_log(z), std::log(z))});
  }
  CHECK(worst_exp <= 2);
  CHECK(worst_log <= 2);
  CHECK(detail::portable_exp(0.0) == 1.0);
  CHECK(detail::portable_log(1.0) == 0.0);
  CHECK(detail::portable_exp(-800.0) == 0.0);
  CHECK(std::isinf(detail::portable_exp(710.0)));
  CHECK(detail::portable_log(0.0) == -std::numeric_limits<double>::infinity());
  CHECK(std::isnan(detail::portable_log(-1.0)));
  CHECK(std::abs(detail::portable_log(std::numeric_limits<double>::denorm_min()) - std::log(std::numeric_limits<double>::denorm_min())) < 1e-12);
}

TEST_CASE("uniforms lie strictly inside (0, 1) with the right moments", "[replica][random]") {
  CHECK(detail::open_unit(0) == 0x1p-53);
  CHECK(detail::open_unit(~std::uint64_t{0}) == 1 - 0x1p-53);
  CHECK(detail::open_unit(std::uint64_t{1} << 63) + detail::open_unit((std::uint64_t{1} << 63) - 1) == 1.0);  // symmetric grid
  RandomStream r(3, 1, Stream::user);
  std::vector<double> u(10000);
  for (double& x : u) {
    x = r.uniform();
    REQUIRE((x > 0 && x < 1));
  }
  check_moments(u, 0.5, 1.0 / 12, 1.0 / 80);
}

TEST_CASE("the streams are pinned bit for bit", "[replica][random]") {
  // Values recorded from this implementation. They must come out identical with any compiler,
  // optimisation level, FMA setting and C library; if they change, every stored toy changes.
  RandomStream s(20240601, 5, Stream::data, 3);
  CHECK(s() == 0x30d7079d08dfbd00u);
  CHECK(s.uniform() == 0x1.45f587d58ba29p-1);
  CHECK(s.normal() == 0x1.4f26ebb65ac6cp-1);
  CHECK(s.normal() == -0x1.042e54f6e5e11p+0);  // the spare of the same polar pair
  CHECK(s.gamma(2.5) == 0x1.3cb846529ba3ep+1);
  const std::vector<double> mu = {0.3, 3, 9.9, 10, 37, 1e4, 1e9};
  CHECK(poisson_toy(mu, 42, 7) == std::vector<double>{0, 5, 9, 10, 32, 9814, 1000009905});
  const std::vector<double> var = {1, 4, 0, 2.5, 9, 100, 1e6};
  CHECK(bitwise_equal(gaussian_toy(mu, var, 42, 7), {0x1.8f0417fc24fc7p-2, 0x1.7a7c1cb9e73aap+1, 0x1.3cccccccccccdp+3, 0x1.444cbb402efcap+3,
                                                     0x1.1ad187a196c19p+5, 0x1.3844df3c020edp+13, 0x1.dcd65c1644fc4p+29}));
}

TEST_CASE("Poisson draws have the Poisson mean, variance and P(0)", "[replica][poisson]") {
  const std::size_t n = 10000;
  for (double mu : {0.3, 3.0, 9.9, 10.0, 37.0, 1e4}) {
    INFO("mean " << mu);
    const std::vector<double> draws = poisson_toy(std::vector<double>(n, mu), 2024, 1);
    for (double k : draws) REQUIRE((k >= 0 && k == std::floor(k)));
    check_moments(draws, mu, mu, mu * (1 + 3 * mu));
    if (mu < 5) {
      const double p0 = std::exp(-mu);
      const double f0 = static_cast<double>(std::count(draws.begin(), draws.end(), 0.0)) / static_cast<double>(n);
      CHECK(std::abs(f0 - p0) < n_sigma * std::sqrt(p0 * (1 - p0) / static_cast<double>(n)));
    }
  }
  CHECK(poisson_toy(std::vector<double>(5, 0.0), 1, 1) == std::vector<double>(5, 0.0));
}

TEST_CASE("Poisson histograms match the exact pmf (Pearson chi-square)", "[replica][poisson]") {
  // 10⁵ draws per mean; both samplers (inversion below 10, PTRS from 10) and their boundary.
  for (double mu : {0.3, 3.0, 9.9, 10.0, 37.0, 1e4}) {
    RandomStream s(777, 0, Stream::user, static_cast<std::uint64_t>(mu * 10));
    std::vector<double> draws(100000);
    for (double& k : draws) k = s.poisson(mu);
    const GoodnessOfFit g = poisson_gof(draws, mu);
    const double df = g.cells - 1, limit = chi2_quantile(df, 5.0);  // p ≈ 3e-7
    INFO("mean " << mu << ": chi2 = " << g.chi2 << " over " << g.cells << " cells, limit " << limit);
    CHECK(g.cells >= 3);
    CHECK(g.chi2 < limit);
  }
}

TEST_CASE("Gaussian toys: moments, shape, no clipping, zero variance", "[replica][normal]") {
  const std::size_t n = 10000;
  const std::vector<double> draws = gaussian_toy(std::vector<double>(n, 5.0), std::vector<double>(n, 4.0), 11, 2);
  check_moments(draws, 5.0, 4.0, 3 * 16.0);

  // Kolmogorov–Smirnov distance of the standardised draws from Φ; 2.7/√N is the p ≈ 1e-6 point.
  std::vector<double> z(draws);
  for (double& v : z) v = (v - 5.0) / 2.0;
  std::sort(z.begin(), z.end());
  double d = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double cdf = 0.5 * std::erfc(-z[i] / std::sqrt(2.0));
    d = std::max({d, std::abs(cdf - static_cast<double>(i) / n), std::abs(static_cast<double>(i + 1) / n - cdf)});
  }
  CHECK(d < 2.7 / std::sqrt(static_cast<double>(n)));

  // Centred at 0 about half the draws are negative, and they are kept.
  const auto at_zero = gaussian_toy(std::vector<double>(1000, 0.0), std::vector<double>(1000, 1.0), 11, 3);
  const auto negatives = std::count_if(at_zero.begin(), at_zero.end(), [](double v) { return v < 0; });
  CHECK(negatives > 400);
  CHECK(negatives < 600);
  // Zero variance returns the expectation; the one-argument form uses variance = expectation.
  CHECK(gaussian_toy(std::vector<double>{1.5, 2.5}, std::vector<double>{0.0, 0.0}, 1, 1) == std::vector<double>{1.5, 2.5});
  const std::vector<double> mu = {4.0, 9.0, 100.0};
  CHECK(bitwise_equal(gaussian_toy(mu, 5, 6), gaussian_toy(mu, mu, 5, 6)));
}

TEST_CASE("bootstrap weights are Poisson(1)", "[replica][bootstrap]") {
  const std::vector<double> w = bootstrap_weights(10000, 8, 4);
  REQUIRE(w.size() == 10000);
  for (double x : w) REQUIRE((x >= 0 && x == std::floor(x)));
  check_moments(w, 1.0, 1.0, 4.0);
  CHECK(bootstrap_weights(0, 8, 4).empty());
  // A different stream from the data draws of the same replica.
  CHECK(w != poisson_toy(std::vector<double>(10000, 1.0), 8, 4));
}

TEST_CASE("gamma variates have mean and variance equal to the shape", "[replica][random]") {
  for (double a : {0.3, 1.0, 4.5}) {
    INFO("shape " << a);
    RandomStream s(5, 0, Stream::user, static_cast<std::uint64_t>(a * 10));
    std::vector<double> g(10000);
    for (double& x : g) {
      x = s.gamma(a);
      REQUIRE(x >= 0);
    }
    check_moments(g, a, a, 3 * a * a + 6 * a);
  }
  RandomStream s(5, 0, Stream::user);
  CHECK_THROWS_AS(s.gamma(0.0), usage_error);
  CHECK_THROWS_AS(s.gamma(std::nan("")), usage_error);
}

TEST_CASE("constraint randomisation: frequentist moves θ0, Bayesian moves θ", "[replica][constraints]") {
  fitlib::test::RandomModelSpec spec;
  spec.nsyst = 4;
  spec.unconstrained = 1;
  Model m = fitlib::test::random_model(spec);
  m.constraint_weights = {0.0, 1.0, 4.0, 0.25};
  m.theta0 = {0.3, 0.0, -0.5, 0.2};

  const std::size_t n = 10000;
  std::vector<std::vector<double>> shifted(4);
  for (std::uint64_t i = 0; i < n; ++i) {
    const RandomizedConstraints f = randomize_constraints(m, 31, i, ConstraintRandomization::frequentist);
    const RandomizedConstraints b = randomize_constraints(m, 31, i, ConstraintRandomization::bayesian);
    REQUIRE(f.centres_changed());
    REQUIRE_FALSE(f.parameters_changed());
    REQUIRE(b.parameters_changed());
    REQUIRE_FALSE(b.centres_changed());
    REQUIRE(f.theta == m.theta0);  // frequentist toys are generated at the model's centres
    REQUIRE(b.theta0 == m.theta0);
    REQUIRE(bitwise_equal(f.theta0, b.theta));  // the same draw, applied to the other vector
    REQUIRE(f.theta0[0] == m.theta0[0]);        // unconstrained: never moves
    for (std::size_t s = 0; s < 4; ++s) shifted[s].push_back(f.theta0[s]);
  }
  for (std::size_t s = 1; s < 4; ++s) {
    INFO("systematic " << s);
    const double var = 1 / m.constraint_weights[s];
    check_moments(shifted[s], m.theta0[s], var, 3 * var * var);
  }
  const RandomizedConstraints none = randomize_constraints(m, 31, 0, ConstraintRandomization::none);
  CHECK((none.theta0 == m.theta0 && none.theta == m.theta0 && !none.centres_changed() && !none.parameters_changed()));

  // The generating point replaces the nuisances and keeps the POIs.
  const RandomizedConstraints b = randomize_constraints(m, 31, 5, ConstraintRandomization::bayesian);
  const std::vector<double> x0 = {1.1, 9, 9, 9, 9};
  const std::vector<double> x = b.toy_parameters(x0);
  CHECK(x[0] == 1.1);
  CHECK(std::vector<double>(x.begin() + 1, x.end()) == b.theta);
  CHECK_THROWS_AS(b.toy_parameters(std::vector<double>{1.0}), usage_error);
}

TEST_CASE("a replica's draws depend on (seed, index) alone", "[replica][reproducibility]") {
  std::vector<double> mu;
  for (int b = 0; b < 60; ++b) mu.push_back(0.5 + 3.1 * b);
  fitlib::test::RandomModelSpec spec;
  const Model m = fitlib::test::random_model(spec);
  auto draw_all = [&](std::uint64_t seed, std::uint64_t i) {
    std::vector<double> v = poisson_toy(mu, seed, i);
    for (double x : gaussian_toy(mu, seed, i)) v.push_back(x);
    for (double x : bootstrap_weights(20, seed, i)) v.push_back(x);
    for (double x : randomize_constraints(m, seed, i, ConstraintRandomization::frequentist).theta0) v.push_back(x);
    return v;
  };
  const std::vector<double> first = draw_all(123, 7);
  std::vector<std::vector<double>> others;
  for (std::uint64_t i : {3u, 11u, 0u, 7u, 1u, 9u}) others.push_back(draw_all(123, i));
  for (std::uint64_t seed : {1u, 124u}) others.push_back(draw_all(seed, 7));
  const std::vector<double> last = draw_all(123, 7);
  CHECK(bitwise_equal(first, last));
  CHECK(bitwise_equal(first, others[3]));  // index 7 drawn in the middle
  for (std::size_t k : {0u, 1u, 2u, 4u, 5u, 6u, 7u}) CHECK_FALSE(bitwise_equal(first, others[k]));

  // Sharded drawing: each shard passes its first global bin and gets the same numbers.
  const std::span<const double> all(mu);
  std::vector<double> pieces = poisson_toy(all.first(25), 123, 7, 0);
  for (double x : poisson_toy(all.subspan(25), 123, 7, 25)) pieces.push_back(x);
  CHECK(bitwise_equal(pieces, poisson_toy(mu, 123, 7)));
  std::vector<double> g = gaussian_toy(all.subspan(40), 123, 7, 40), g_all = gaussian_toy(mu, 123, 7);
  CHECK(bitwise_equal(g, std::vector<double>(g_all.begin() + 40, g_all.end())));
  std::vector<double> w = bootstrap_weights(10, 123, 7, 10), w_all = bootstrap_weights(20, 123, 7);
  CHECK(bitwise_equal(w, std::vector<double>(w_all.begin() + 10, w_all.end())));
}

TEST_CASE("Asimov data are the summed yields and zero the data term", "[replica][asimov]") {
  for (int variant = 0; variant < 4; ++variant) {
    fitlib::test::RandomModelSpec spec;
    spec.seed = 10 + static_cast<std::uint64_t>(variant);
    spec.asymmetric = variant % 2 == 0;
    spec.type = variant < 2 ? SystematicType::log_normal : SystematicType::normal;
    spec.signals = 2;
    const Model model = fitlib::test::random_model(spec);
    LikelihoodOptions opts;
    opts.shards = variant == 3 ? 3 : 1;
    SerialLikelihood lik(model, {}, opts);
    INFO("variant " << variant);

    // POIs away from their defaults, nuisances at their centres (so the constraints vanish too).
    std::vector<double> x = lik.default_parameters();
    x[0] = 1.3;
    x[1] = 0.7;
    const std::vector<double> data = asimov(lik, x);
    const std::vector<double> nu = lik.yields(x);
    REQUIRE(static_cast<index_t>(data.size()) == model.nbins());
    for (index_t b = 0; b < model.nbins(); ++b) {
      double s = 0;
      for (index_t p = 0; p < model.nprocs(); ++p) s += nu[static_cast<std::size_t>(b * model.nprocs() + p)];
      CHECK(bits(data[static_cast<std::size_t>(b)]) == bits(s));
    }
    lik.set_data(data);
    CHECK(lik.value(x) == 0.0);
    std::vector<double> y = x;
    y[0] = 1.2;
    CHECK(lik.value(y) > 0);
  }
}

TEST_CASE("generate_toy composes rabbit's toy recipe", "[replica][toys]") {
  fitlib::test::RandomModelSpec spec;
  const Model model = fitlib::test::random_model(spec);
  SerialLikelihood lik(model);
  const std::vector<double> x0 = lik.default_parameters();

  ToyOptions plain{ConstraintRandomization::none, ToyDataMode::expected, DataRandomization::none};
  CHECK(generate_toy(lik, 1, 2, plain).data == asimov(lik, x0));

  const Toy f = generate_toy(lik, 1, 2);  // rabbit's defaults: frequentist, expected, Poisson
  CHECK(f.constraints.centres_changed());
  CHECK(f.data == poisson_toy(asimov(lik, x0), 1, 2));

  ToyOptions bayes;
  bayes.constraints = ConstraintRandomization::bayesian;
  const Toy b = generate_toy(lik, 1, 2, bayes);
  CHECK(b.constraints.theta0 == model.theta0);
  CHECK(b.data == poisson_toy(asimov(lik, b.constraints.toy_parameters(x0)), 1, 2));

  ToyOptions observed{ConstraintRandomization::none, ToyDataMode::observed, DataRandomization::none};
  CHECK(generate_toy(lik, 1, 2, observed).data == model.data);
  ToyOptions normal{ConstraintRandomization::none, ToyDataMode::expected, DataRandomization::normal};
  CHECK(bitwise_equal(generate_toy(lik, 1, 2, normal).data, gaussian_toy(asimov(lik, x0), 1, 2)));

  ToyOptions bad;
  bad.data = static_cast<DataRandomization>(7);
  CHECK_THROWS_WITH(bad.validate(), Catch::Contains("ToyOptions::data"));
  CHECK_THROWS_AS(generate_toy(lik, 1, 2, bad), std::invalid_argument);
  bad = {};
  bad.constraints = static_cast<ConstraintRandomization>(-1);
  CHECK_THROWS_WITH(bad.validate(), Catch::Contains("ToyOptions::constraints"));
  bad = {};
  bad.data_mode = static_cast<ToyDataMode>(5);
  CHECK_THROWS_WITH(bad.validate(), Catch::Contains("ToyOptions::data_mode"));
  CHECK_NOTHROW(ToyOptions{}.validate());
}

TEST_CASE("bad input is refused with the bin or systematic named", "[replica][errors]") {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  CHECK_THROWS_WITH(poisson_toy(std::vector<double>{1.0, -1.0}, 1, 1), Catch::Contains("bin 1"));
  CHECK_THROWS_WITH(poisson_toy(std::vector<double>{nan}, 1, 1), Catch::Contains("bin 0"));
  CHECK_THROWS_WITH(poisson_toy(std::vector<double>{1.0, 2.0, inf}, 1, 1), Catch::Contains("bin 2"));
  CHECK_THROWS_WITH(poisson_toy(std::vector<double>{1e16}, 1, 1), Catch::Contains("bin 0"));
  CHECK_THROWS_WITH(poisson_toy(std::vector<double>{1.0, -1.0}, 1, 1, 40), Catch::Contains("bin 41"));
  CHECK_THROWS_AS(poisson_toy(std::vector<double>{1.0}, 1, std::uint64_t{1} << 32), usage_error);
  CHECK_THROWS_AS(poisson_toy(std::vector<double>{1.0, 1.0}, 1, 1, 0xFFFFFFFFu), usage_error);
  CHECK_NOTHROW(poisson_toy(std::vector<double>{1.0}, 1, 1, 0xFFFFFFFFu));  // the last element

  CHECK_THROWS_WITH(gaussian_toy(std::vector<double>{1, 1, 1}, std::vector<double>{1, 1, -1}, 1, 1), Catch::Contains("bin 2"));
  CHECK_THROWS_WITH(gaussian_toy(std::vector<double>{1, 1}, std::vector<double>{nan, 1}, 1, 1), Catch::Contains("bin 0"));
  CHECK_THROWS_WITH(gaussian_toy(std::vector<double>{1, -2}, std::vector<double>{1, 1}, 1, 1), Catch::Contains("bin 1"));
  CHECK_THROWS_AS(gaussian_toy(std::vector<double>{1, 1}, std::vector<double>{1}, 1, 1), usage_error);
  CHECK_THROWS_AS(bootstrap_weights(-1, 1, 1), usage_error);

  fitlib::test::RandomModelSpec spec;
  Model m = fitlib::test::random_model(spec);
  m.constraint_weights[2] = -1;
  CHECK_THROWS_WITH(randomize_constraints(m, 1, 1, ConstraintRandomization::frequentist), Catch::Contains("syst2"));
  m.constraint_weights[2] = 1;
  m.theta0[3] = nan;
  CHECK_THROWS_WITH(randomize_constraints(m, 1, 1, ConstraintRandomization::bayesian), Catch::Contains("syst3"));
  m.theta0.pop_back();
  CHECK_THROWS_AS(randomize_constraints(m, 1, 1, ConstraintRandomization::frequentist), usage_error);

  CHECK_THROWS_AS(RandomStream(1, std::uint64_t{1} << 32, Stream::data), usage_error);
  RandomStream s(1, 1, Stream::data);
  CHECK_THROWS_AS(s.poisson(-0.5), usage_error);
  CHECK_THROWS_AS(s.poisson(nan), usage_error);
}

TEST_CASE("a frequentist toy is fitted with its own constraint centres", "[replica][toys]") {
  test::RandomModelSpec spec;
  spec.zero_counts = false;
  spec.unconstrained = 0;
  Model model = test::random_model(spec);
  SerialLikelihood nll(model);
  const Toy toy = generate_toy(nll, 11, 3);
  REQUIRE(toy.constraints.centres_changed());
  const auto x = nll.default_parameters();
  nll.set_data(toy.data);
  const double before = nll.value(x);
  nll.set_constraint_centres(toy.constraints.theta0);
  CHECK(nll.constraint_centres() == toy.constraints.theta0);
  // Only the constraint term changes: ½Σ w[(θ − c')² − (θ − c)²].
  double expected = before;
  for (index_t s = 0; s < model.nsyst(); ++s) {
    const double t = x[static_cast<std::size_t>(model.npoi() + s)], w = model.constraint_weights[static_cast<std::size_t>(s)];
    const double c0 = model.theta0[static_cast<std::size_t>(s)], c1 = toy.constraints.theta0[static_cast<std::size_t>(s)];
    expected += 0.5 * w * ((t - c1) * (t - c1) - (t - c0) * (t - c0));
  }
  CHECK(nll.value(x) == Approx(expected).epsilon(1e-12));
  const FitResult r = fit(nll, TrustRegion<Gltr>());
  CHECK(r.converged());
  // The fit minimised the toy's constraints, not the model's: at its minimum the model-centred
  // likelihood's gradient is exactly the difference of the constraint gradients, w·(c_toy − c_model).
  SerialLikelihood model_centres(model);
  model_centres.set_data(toy.data);
  std::vector<double> g(static_cast<std::size_t>(nll.size()));
  model_centres.value_grad(r.x, g);
  for (index_t s = 0; s < model.nsyst(); ++s) {
    const auto i = static_cast<std::size_t>(model.npoi() + s);
    const double w = model.constraint_weights[static_cast<std::size_t>(s)];
    const double shift = toy.constraints.theta0[static_cast<std::size_t>(s)] - model.theta0[static_cast<std::size_t>(s)];
    INFO("systematic " << s);
    CHECK(g[i] == Approx(w * shift).margin(1e-3));
    CHECK(std::abs(shift) > 1e-3);  // the centres did move
  }
  CHECK_THROWS_WITH(nll.set_constraint_centres(std::vector<double>{1.0}), Catch::Matchers::Contains("needs 5 centres"));
}
