// SPDX-License-Identifier: MIT
// Likelihood values and structure: hand-computed models, Asimov closure, batching, shards, masking.
#include <catch2/catch.hpp>

#include <Eigen/Cholesky>
#include <Eigen/Core>

#include "random_model.hpp"

using namespace fitlib;
using fitlib::test::rel_error;

namespace {

double poisson_reduced(double nu, double n) { return n == 0 ? nu : nu - n - n * std::log(nu / n); }

std::vector<double> gradient_of(SerialLikelihood& nll, const std::vector<double>& x) { return test::gradient_function(nll)(x); }

}  // namespace

TEST_CASE("values of tiny hand-computed models", "[likelihood]") {
  // One bin, a signal (s = 4) and a background (b = 10) with a 10% / −5% asymmetric log-normal
  // normalisation variation on the background and a symmetric 20% shape-less one on the signal.
  const double s = 4, b = 10, n = 17;
  auto build = [&](SystematicType type) {
    ModelBuilder mb(type);
    mb.add_channel("sr", 1).add_process("sig", true).add_process("bkg");
    mb.add_systematic("bkg_norm").add_systematic("sig_norm", {.constrained = false});
    mb.set_nominal("sr", "sig", std::vector{s}).set_nominal("sr", "bkg", std::vector{b}).set_data("sr", std::vector{n});
    mb.add_norm_variation("bkg_norm", "sr", "bkg", 1.10, 0.95);
    mb.add_norm_variation("sig_norm", "sr", "sig", 1.20);
    return mb.build();
  };

  SECTION("log-normal, squared POI, θ inside and outside the smooth region") {
    SerialLikelihood nll(build(SystematicType::log_normal));
    REQUIRE(nll.parameter_names() == std::vector<std::string>{"sig", "bkg_norm", "sig_norm"});
    const double K = 0.5 * (std::log(1.10) - std::log(0.95)), H = 0.5 * (std::log(1.10) + std::log(0.95));
    for (double t : {0.25, -0.25, 0.8, -1.0}) {
      const double x = 1.1, u = 2 * t;
      const double alpha = std::abs(t) >= 0.5 ? (t > 0 ? 1.0 : -1.0) : u / 8 * (3 * std::pow(u, 4) - 10 * u * u + 15);
      const double nu = x * x * s * std::exp(0.3 * std::log(1.2)) + b * std::exp(t * K + t * alpha * H);
      const double expected = poisson_reduced(nu, n) + 0.5 * t * t;  // sig_norm is unconstrained
      INFO("theta = " << t);
      CHECK(nll.value(std::vector{x, t, 0.3}) == Approx(expected).epsilon(1e-12));
    }
    // The exact down template at θ = −1: ν_bkg = 0.95·b.
    const auto nu = nll.yields(std::vector{1.0, -1.0, 0.0});
    CHECK(nu[1] == Approx(0.95 * b).epsilon(1e-14));
    CHECK(nll.yields(std::vector{1.0, 1.0, 0.0})[1] == Approx(1.10 * b).epsilon(1e-14));
  }

  SECTION("additive, linear POI") {
    LikelihoodOptions opts;
    opts.allow_negative_poi = true;
    SerialLikelihood nll(build(SystematicType::normal), {}, opts);
    // Additive entries are the yield shifts: bkg ±(0.10, −0.05)·b split into K and H.
    const double K = 0.5 * (0.10 * b + 0.05 * b), H = 0.5 * (0.10 * b - 0.05 * b);
    const double t = 1.5, x = 0.7;
    const double nu = x * s + 0.3 * 0.2 * s + b + t * K + t * H;
    CHECK(nll.value(std::vector{x, t, 0.3}) == Approx(poisson_reduced(nu, n) + 0.5 * t * t).epsilon(1e-12));
  }

  SECTION("χ² with the data's variances, as rabbit's --chisqFit") {
    Model m = build(SystematicType::log_normal);
    LikelihoodOptions opts;
    opts.data_term = DataTerm::chisq;
    SerialLikelihood nll(m, {}, opts);
    const double t = 0.8, x = 1.1, K = 0.5 * (std::log(1.10) - std::log(0.95)), H = 0.5 * (std::log(1.10) + std::log(0.95));
    const double nu = x * x * s * std::exp(0.3 * std::log(1.2)) + b * std::exp(t * (K + H));
    CHECK(nll.value(std::vector{x, t, 0.3}) == Approx(0.5 * (nu - n) * (nu - n) / n + 0.5 * t * t).epsilon(1e-14));
    m.data_variance = {25.0};  // hdata_var, used where rabbit would use n
    SerialLikelihood with_var(m, {}, opts);
    CHECK(with_var.value(std::vector{x, t, 0.3}) == Approx(0.5 * (nu - n) * (nu - n) / 25.0 + 0.5 * t * t).epsilon(1e-14));
    with_var.set_data(std::vector{17.0}, std::vector{4.0});
    CHECK(with_var.value(std::vector{x, t, 0.3}) == Approx(0.5 * (nu - n) * (nu - n) / 4.0 + 0.5 * t * t).epsilon(1e-14));
    CHECK_THROWS_WITH(with_var.set_data(std::vector{17.0}, std::vector{0.0}),
                      Catch::Matchers::Contains("positive variance") && Catch::Matchers::Contains("channel 'sr' bin 0"));
    m.data_variance.clear();
    m.data = {0.0};
    CHECK_THROWS_WITH(SerialLikelihood(m, {}, opts), Catch::Matchers::Contains("DataTerm::poisson or supply variances"));
  }

  SECTION("a bin with n = 0 contributes its expectation") {
    ModelBuilder mb;
    mb.add_channel("c", 2).add_process("bkg").set_nominal("c", "bkg", std::vector{3.0, 5.0}).set_data("c", std::vector{0.0, 5.0});
    SerialLikelihood nll(mb.build());
    CHECK(nll.value(std::vector<double>{}) == 3.0);
  }
}

TEST_CASE("Asimov closure: zero NLL, vanishing gradient, positive-definite Hessian", "[likelihood]") {
  const bool asymmetric = GENERATE(false, true);
  const auto type = GENERATE(SystematicType::log_normal, SystematicType::normal);
  test::RandomModelSpec spec;
  spec.asymmetric = asymmetric;
  spec.type = type;
  spec.bins = 40;
  spec.signals = 2;
  spec.mu_default = 1.3;
  spec.zero_counts = false;
  SerialLikelihood nll(test::random_model(spec));
  const auto x0 = nll.default_parameters();
  const auto nu = nll.yields(x0);
  std::vector<double> asimov(static_cast<std::size_t>(nll.model().nbins()), 0.0);
  for (std::size_t b = 0; b < asimov.size(); ++b)
    for (index_t p = 0; p < spec.procs; ++p) asimov[b] += nu[b * static_cast<std::size_t>(spec.procs) + static_cast<std::size_t>(p)];
  nll.set_data(asimov);

  const index_t n = nll.size();
  std::vector<double> f(1), g(static_cast<std::size_t>(n)), H(static_cast<std::size_t>(n * n));
  nll.hessian(ConstBlockView<double>(x0.data(), n, 1), f, BlockView<double>(g.data(), n, 1), BlockView<double>(H.data(), n, n));
  CHECK(std::abs(f[0]) < 1e-10);
  for (double gi : g) CHECK(std::abs(gi) < 1e-10);
  const Eigen::Map<Eigen::MatrixXd> Hm(H.data(), n, n);
  CHECK((Hm - Hm.transpose()).cwiseAbs().maxCoeff() == 0.0);
  Eigen::LLT<Eigen::MatrixXd> llt(Hm);
  CHECK(llt.info() == Eigen::Success);
}

TEST_CASE("a symmetric tensor equals the asymmetric one with H = 0", "[likelihood]") {
  ModelBuilder sym, asym;
  for (auto* mb : {&sym, &asym}) {
    mb->add_channel("c", 3).add_process("s", true).add_process("b").add_systematic("a").add_systematic("k", {.constrained = false});
    mb->set_nominal("c", "s", std::vector{1.0, 2.0, 3.0}).set_nominal("c", "b", std::vector{9.0, 8.0, 7.0});
    mb->set_data("c", std::vector{11.0, 9.0, 12.0});
    mb->add_shape_variation("a", "c", "b", std::vector{10.0, 8.5, 6.0}, std::vector{8.0, 7.4, 8.0}, Symmetrize::average);
    mb->add_norm_variation("k", "c", "s", 1.3);
  }
  asym.force_asymmetric();
  SerialLikelihood ls(sym.build()), la(asym.build());
  REQUIRE(ls.model().symmetric);
  REQUIRE(!la.model().symmetric);
  for (const auto& x : {std::vector{1.0, 0.3, -0.2}, std::vector{0.7, -1.3, 2.0}, std::vector{1.4, 0.49, 0.51}}) {
    CHECK(ls.value(x) == Approx(la.value(x)).epsilon(1e-15));
    CHECK(rel_error(gradient_of(ls, x), gradient_of(la, x)) < 1e-15);
  }
}

TEST_CASE("a batched evaluation's column j equals the single-column evaluation bitwise", "[likelihood][batch]") {
  const bool asymmetric = GENERATE(false, true);
  test::RandomModelSpec spec;
  spec.asymmetric = asymmetric;
  spec.signals = 2;
  spec.nsyst = 19;  // not a multiple of the lane width
  SerialLikelihood nll(test::random_model(spec));
  const index_t n = nll.size(), N = 5;
  std::vector<double> X, V;
  std::mt19937_64 rng(3);
  std::normal_distribution<double> gauss;
  for (index_t j = 0; j < N; ++j) {
    const auto x = test::test_point(nll.model(), static_cast<std::uint64_t>(j), false);
    X.insert(X.end(), x.begin(), x.end());
    for (index_t i = 0; i < n; ++i) V.push_back(gauss(rng));
  }
  std::vector<double> f(N), G(static_cast<std::size_t>(n * N)), HV(G.size()), H(static_cast<std::size_t>(n * n * N));
  const ConstBlockView<double> Xb(X.data(), n, N), Vb(V.data(), n, N);
  nll.value_grad_hessp(Xb, Vb, f, BlockView<double>(G.data(), n, N), BlockView<double>(HV.data(), n, N));
  std::vector<double> fh(N), Gh(G.size());
  nll.hessian(Xb, fh, BlockView<double>(Gh.data(), n, N), BlockView<double>(H.data(), n, n * N));
  CHECK(fh == f);
  CHECK(Gh == G);
  for (index_t j = 0; j < N; ++j) {
    INFO("column " << j);
    double f1;
    std::vector<double> g1(static_cast<std::size_t>(n)), hv1(g1.size()), h1(static_cast<std::size_t>(n * n));
    nll.value_grad_hessp(Xb.block_cols(j, 1), Vb.block_cols(j, 1), std::span(&f1, 1), BlockView<double>(g1.data(), n, 1),
                         BlockView<double>(hv1.data(), n, 1));
    CHECK(f1 == f[static_cast<std::size_t>(j)]);
    CHECK(g1 == std::vector<double>(G.begin() + j * n, G.begin() + (j + 1) * n));
    CHECK(hv1 == std::vector<double>(HV.begin() + j * n, HV.begin() + (j + 1) * n));
    double f2;
    nll.hessian(Xb.block_cols(j, 1), std::span(&f2, 1), BlockView<double>(g1.data(), n, 1), BlockView<double>(h1.data(), n, n));
    CHECK(h1 == std::vector<double>(H.begin() + j * n * n, H.begin() + (j + 1) * n * n));
    // The value alone equals the value from the full pass.
    double f3;
    nll.value(Xb.block_cols(j, 1), std::span(&f3, 1));
    CHECK(f3 == f1);
  }
}

TEST_CASE("k = 3 shards on one thread equal one shard", "[likelihood][shards]") {
  test::RandomModelSpec spec;
  spec.bins = 31;
  spec.signals = 2;
  const Model model = test::random_model(spec);
  LikelihoodOptions three;
  three.shards = 3;
  SerialLikelihood one(model), split(model, {}, three);
  REQUIRE(split.nshards() == 3);
  const index_t n = one.size();
  const auto x = test::test_point(model, 4, false);
  std::vector<double> v(static_cast<std::size_t>(n));
  for (index_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = std::sin(1.0 + static_cast<double>(i));
  auto all = [&](SerialLikelihood& l, std::vector<double>& g, std::vector<double>& hv, std::vector<double>& H) {
    double f;
    g.resize(static_cast<std::size_t>(n));
    hv.resize(g.size());
    H.resize(static_cast<std::size_t>(n * n));
    l.value_grad_hessp(ConstBlockView<double>(x.data(), n, 1), ConstBlockView<double>(v.data(), n, 1), std::span(&f, 1),
                       BlockView<double>(g.data(), n, 1), BlockView<double>(hv.data(), n, 1));
    double fh;
    std::vector<double> gh(g.size());
    l.hessian(ConstBlockView<double>(x.data(), n, 1), std::span(&fh, 1), BlockView<double>(gh.data(), n, 1), BlockView<double>(H.data(), n, n));
    return f;
  };
  std::vector<double> g1, hv1, H1, g3, hv3, H3;
  const double f1 = all(one, g1, hv1, H1), f3 = all(split, g3, hv3, H3);
  CHECK(f3 == Approx(f1).epsilon(1e-13));
  CHECK(rel_error(g3, g1) < 1e-13);
  CHECK(rel_error(hv3, hv1) < 1e-13);
  CHECK(rel_error(H3, H1) < 1e-13);
  CHECK(one.yields(x) == split.yields(x));
}

TEST_CASE("masked channels: yields computed, data term untouched", "[likelihood][masked]") {
  test::RandomModelSpec spec;
  Model model = test::random_model(spec);
  SerialLikelihood nll(model);
  const auto x = test::test_point(model, 2, false);
  const double f = nll.value(x);
  const auto g = gradient_of(nll, x);
  const auto nu = nll.yields(x);
  // A masked bin's yields follow the same formula as any other bin.
  const index_t P = model.nprocs(), S = model.nsyst(), b = model.nbins_full() - 1;
  for (index_t p = 0; p < P; ++p) {
    const double* row = model.dense()->logk.data() + (b * P + p) * 2 * S;
    double L = 0;
    for (index_t s = 0; s < S; ++s) L += x[static_cast<std::size_t>(1 + s)] * row[s] + asymmetric_interpolation(x[static_cast<std::size_t>(1 + s)]).g * row[S + s];
    const double r = p == 0 ? x[0] * x[0] : 1.0;
    CHECK(nu[static_cast<std::size_t>(b * P + p)] == Approx(r * model.dense()->nominal[static_cast<std::size_t>(b * P + p)] * std::exp(L)).epsilon(1e-13));
  }
  // Changing the masked templates changes neither the value nor the gradient.
  for (index_t c = model.nbins() * P; c < model.nbins_full() * P; ++c) model.dense()->nominal[static_cast<std::size_t>(c)] *= 3.0;
  SerialLikelihood changed(model);
  CHECK(changed.value(x) == f);
  CHECK(gradient_of(changed, x) == g);
  CHECK(changed.yields(x) != nu);
}

TEST_CASE("blocks with a leading dimension larger than their rows", "[likelihood][batch]") {
  test::RandomModelSpec spec;
  spec.signals = 2;
  SerialLikelihood nll(test::random_model(spec));
  const index_t n = nll.size(), N = 3, ld = n + 4;
  std::vector<double> X(static_cast<std::size_t>(ld * N), -99.0), V(X.size(), -99.0);
  for (index_t j = 0; j < N; ++j) {
    const auto x = test::test_point(nll.model(), static_cast<std::uint64_t>(j), false);
    for (index_t i = 0; i < n; ++i) {
      X[static_cast<std::size_t>(i + j * ld)] = x[static_cast<std::size_t>(i)];
      V[static_cast<std::size_t>(i + j * ld)] = std::cos(static_cast<double>(i + 7 * j));
    }
  }
  // Padded outputs: the padding must stay untouched.
  std::vector<double> f(N), G(static_cast<std::size_t>(ld * N), 42.0), HV(G.size(), 42.0), H(static_cast<std::size_t>(ld * n * N), 42.0);
  const ConstBlockView<double> Xb(X.data(), n, N, ld), Vb(V.data(), n, N, ld);
  nll.value_grad_hessp(Xb, Vb, f, BlockView<double>(G.data(), n, N, ld), BlockView<double>(HV.data(), n, N, ld));
  std::vector<double> fh(N), Gh(G.size(), 42.0);
  nll.hessian(Xb, fh, BlockView<double>(Gh.data(), n, N, ld), BlockView<double>(H.data(), n, n * N, ld));
  for (index_t j = 0; j < N; ++j) {
    INFO("column " << j);
    const std::vector<double> x(X.begin() + j * ld, X.begin() + j * ld + n), v(V.begin() + j * ld, V.begin() + j * ld + n);
    std::vector<double> g(static_cast<std::size_t>(n)), hv(g.size()), h(static_cast<std::size_t>(n * n));
    double f1;
    nll.value_grad_hessp(ConstBlockView<double>(x.data(), n, 1), ConstBlockView<double>(v.data(), n, 1), std::span(&f1, 1),
                         BlockView<double>(g.data(), n, 1), BlockView<double>(hv.data(), n, 1));
    CHECK(f1 == f[static_cast<std::size_t>(j)]);
    CHECK(fh[static_cast<std::size_t>(j)] == f1);
    nll.hessian(ConstBlockView<double>(x.data(), n, 1), std::span(&f1, 1), BlockView<double>(g.data(), n, 1), BlockView<double>(h.data(), n, n));
    for (index_t i = 0; i < n; ++i) {
      CHECK(G[static_cast<std::size_t>(i + j * ld)] == g[static_cast<std::size_t>(i)]);
      CHECK(HV[static_cast<std::size_t>(i + j * ld)] == hv[static_cast<std::size_t>(i)]);
      for (index_t c = 0; c < n; ++c) CHECK(H[static_cast<std::size_t>(i + (j * n + c) * ld)] == h[static_cast<std::size_t>(i + c * n)]);
    }
    for (index_t i = n; i < ld; ++i) {
      CHECK(G[static_cast<std::size_t>(i + j * ld)] == 42.0);
      CHECK(HV[static_cast<std::size_t>(i + j * ld)] == 42.0);
    }
  }
}
