// SPDX-License-Identifier: MIT
// Analytic gradient, Hessian-vector products and dense Hessian against central finite differences.
#include <catch2/catch.hpp>

#include "derivative_checks.hpp"
#include "random_model.hpp"

using namespace fitlib;
using fitlib::test::central_difference;
using fitlib::test::rel_error;

namespace {

struct Case {
  bool asymmetric;
  SystematicType type;
  bool linear_poi;
  index_t unconstrained;
};

std::string describe(const Case& c) {
  return std::string(c.asymmetric ? "asymmetric" : "symmetric") + ", " +
         (c.type == SystematicType::log_normal ? "log-normal" : "additive") + ", " +
         (c.linear_poi ? "linear POIs" : "squared POIs") + ", " + std::to_string(c.unconstrained) + " unconstrained";
}

}  // namespace

TEST_CASE("derivatives match central finite differences for every feature combination", "[likelihood][derivatives]") {
  const bool asymmetric = GENERATE(false, true);
  const auto type = GENERATE(SystematicType::log_normal, SystematicType::normal);
  const bool linear_poi = GENERATE(false, true);
  const index_t unconstrained = GENERATE(index_t{0}, index_t{2});
  const auto data_term = GENERATE(DataTerm::poisson, DataTerm::chisq);
  const Case c{asymmetric, type, linear_poi, unconstrained};
  INFO(describe(c) << (data_term == DataTerm::chisq ? ", χ²" : ", Poisson"));

  test::RandomModelSpec spec;
  spec.asymmetric = asymmetric;
  spec.type = type;
  spec.unconstrained = unconstrained;
  spec.signals = 2;
  spec.procs = 4;
  spec.nsyst = 7;
  spec.mu_default = 1.2;
  spec.seed = 7 + static_cast<std::uint64_t>(asymmetric) + 2 * static_cast<std::uint64_t>(type == SystematicType::normal);
  Model model = test::random_model(spec);
  test::add_data_variances(model);
  LikelihoodOptions opts;
  opts.allow_negative_poi = linear_poi;
  opts.data_term = data_term;
  SerialLikelihood nll(model, {}, opts);
  for (std::uint64_t point = 0; point < 3; ++point) {
    INFO("point " << point);
    test::check_derivatives(nll, test::test_point(model, point, linear_poi), 1e-7, point);
  }
}

TEST_CASE("derivatives stay exact at a squared POI of zero and with every count zero", "[likelihood][derivatives]") {
  test::RandomModelSpec spec;
  spec.asymmetric = true;
  const Model model = test::random_model(spec);
  SerialLikelihood nll(model);
  auto x = test::test_point(model, 1, false);
  x[0] = 0.0;  // μ = 0: the signal's yield vanishes but its curvature 2·N·e^L does not
  const index_t n = nll.size();
  const auto gradient = test::gradient_function(nll);
  std::vector<double> f(1), g(static_cast<std::size_t>(n)), H(static_cast<std::size_t>(n * n));
  nll.hessian(ConstBlockView<double>(x.data(), n, 1), f, BlockView<double>(g.data(), n, 1), BlockView<double>(H.data(), n, n));
  std::vector<double> e(static_cast<std::size_t>(n), 0.0);
  e[0] = 1.0;
  CHECK(rel_error(std::vector<double>(H.begin(), H.begin() + n), central_difference(gradient, x, e, 1e-3)) < 1e-7);
  CHECK(g[0] == 0.0);  // ∂ν/∂x = 2x·N·e^L vanishes

  nll.set_data(std::vector<double>(static_cast<std::size_t>(model.nbins()), 0.0));
  const auto g0 = gradient(x);
  e.assign(static_cast<std::size_t>(n), 0.0);
  e[1] = 1.0;
  CHECK(std::abs(g0[1] - central_difference([&](const std::vector<double>& y) { return std::vector<double>{nll.value(y)}; }, x, e, 1e-3)[0]) <
        1e-7 * std::abs(g0[1]));
}

TEST_CASE("POI priors and external terms: values and derivatives", "[likelihood][derivatives][external]") {
  const bool linear_poi = GENERATE(false, true);
  test::RandomModelSpec spec;
  spec.signals = 2;
  spec.procs = 4;
  Model model = test::random_model(spec);
  const Model plain = model;
  model.poi_prior_weights = {4.0, 0.0};
  model.poi_prior_centres = {1.1, 0.0};
  ExternalTerm dense{"dense", {"syst1", "sig0", "syst3"}, {0.3, -0.2, 0.1}, {}, {}, {}};
  dense.set_dense_hessian({2.0, 0.5, 0.0, 0.5, 1.5, -0.3, 0.0, -0.3, 1.0});
  ExternalTerm sparse{"sparse", {"syst4", "syst2"}, {}, {0, 1, 0, 1}, {0, 1, 1, 0}, {3.0, 2.0, 0.7, 0.7}};
  model.external_terms = {dense, sparse};
  LikelihoodOptions opts;
  opts.allow_negative_poi = linear_poi;
  SerialLikelihood nll(model, {}, opts), base(plain, {}, opts);
  const index_t n = nll.size();
  const auto x = test::test_point(model, 5, linear_poi);

  // The value: the data term plus the hand-computed global terms.
  const double mu = linear_poi ? x[0] : x[0] * x[0];
  const auto xi = [&](const char* name) { return x[static_cast<std::size_t>(nll.parameter_index(name))]; };
  const double xd[] = {xi("syst1"), xi("sig0"), xi("syst3")}, Md[3][3] = {{2.0, 0.5, 0.0}, {0.5, 1.5, -0.3}, {0.0, -0.3, 1.0}};
  double ext = 0.3 * xd[0] - 0.2 * xd[1] + 0.1 * xd[2];
  for (int a = 0; a < 3; ++a)
    for (int b = 0; b < 3; ++b) ext += 0.5 * xd[a] * Md[a][b] * xd[b];
  const double s4 = xi("syst4"), s2 = xi("syst2");
  ext += 0.5 * (3.0 * s4 * s4 + 2.0 * s2 * s2 + 2 * 0.7 * s4 * s2);
  CHECK(nll.value(x) == Approx(base.value(x) + 0.5 * 4.0 * (mu - 1.1) * (mu - 1.1) + ext).epsilon(1e-13));

  const auto gradient = test::gradient_function(nll);
  std::vector<double> f(1), g(static_cast<std::size_t>(n)), H(static_cast<std::size_t>(n * n));
  nll.hessian(ConstBlockView<double>(x.data(), n, 1), f, BlockView<double>(g.data(), n, 1), BlockView<double>(H.data(), n, n));
  for (index_t i = 0; i < n; ++i) {
    std::vector<double> e(static_cast<std::size_t>(n), 0.0);
    e[static_cast<std::size_t>(i)] = 1.0;
    const double h = 1e-3 * std::max(1.0, std::abs(x[static_cast<std::size_t>(i)]));
    INFO("parameter " << i);
    CHECK(std::abs(g[static_cast<std::size_t>(i)] -
                   central_difference([&](const std::vector<double>& y) { return std::vector<double>{nll.value(y)}; }, x, e, h)[0]) <
          1e-7 * (1 + std::abs(g[static_cast<std::size_t>(i)])));
    CHECK(rel_error(std::vector<double>(H.begin() + i * n, H.begin() + (i + 1) * n), central_difference(gradient, x, e, h)) < 1e-7);
  }
  std::vector<double> v(static_cast<std::size_t>(n)), hv(v.size());
  for (index_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = std::cos(static_cast<double>(i));
  nll.hessp(ConstBlockView<double>(x.data(), n, 1), ConstBlockView<double>(v.data(), n, 1), BlockView<double>(hv.data(), n, 1));
  std::vector<double> Hv(static_cast<std::size_t>(n), 0.0);
  for (index_t j = 0; j < n; ++j)
    for (index_t i = 0; i < n; ++i) Hv[static_cast<std::size_t>(i)] += H[static_cast<std::size_t>(i + j * n)] * v[static_cast<std::size_t>(j)];
  CHECK(rel_error(hv, Hv) < 1e-12);
}

TEST_CASE("the exact Hessian's cell term over the systematics that act on each process", "[likelihood][derivatives][hessian]") {
  // Systematic s acts on process p only where (s + p) % 3 != 0, the last process on none, and in the
  // asymmetric model syst1's average part is zero for process 0 (its half-difference alone acts): each
  // process's cells reach a different subset of the systematics, which the cell term is restricted to.
  const bool asymmetric = GENERATE(false, true);
  const auto type = GENERATE(SystematicType::log_normal, SystematicType::normal);
  const int bb = GENERATE(0, 1, 2);  // bin-by-bin statistics off, lite, full
  INFO((asymmetric ? "asymmetric" : "symmetric") << (type == SystematicType::log_normal ? ", log-normal" : ", additive") << ", β "
                                                 << (bb == 0 ? "off" : bb == 1 ? "lite" : "full"));
  test::RandomModelSpec spec;
  spec.asymmetric = asymmetric;
  spec.type = type;
  spec.signals = 2;
  spec.procs = 4;
  spec.nsyst = 6;
  spec.bins = 20;
  spec.template_stats = true;
  Model model = test::random_model(spec);
  const index_t P = model.nprocs(), S = model.nsyst(), nc = model.ncoef();
  DenseTemplates& t = *model.dense();
  for (index_t b = 0; b < model.nbins_full(); ++b)
    for (index_t p = 0; p < P; ++p)
      for (index_t s = 0; s < S; ++s) {
        double* row = t.logk.data() + (b * P + p) * nc;
        if ((s + p) % 3 == 0 || p == P - 1) {
          row[s] = 0;
          if (asymmetric) row[S + s] = 0;
        }
        if (asymmetric && p == 0 && s == 1) row[s] = 0;
      }
  Model sparse = model;
  sparse.make_sparse();
  const auto x = test::test_point(model, 2, false);
  const index_t n = model.npoi() + S;
  const auto hessian = [&](auto& nll) {
    std::vector<double> f(1), g(static_cast<std::size_t>(n)), H(static_cast<std::size_t>(n * n));
    nll.hessian(ConstBlockView<double>(x.data(), n, 1), f, BlockView<double>(g.data(), n, 1), BlockView<double>(H.data(), n, n));
    return H;
  };
  LikelihoodOptions opts;
  opts.bin_by_bin.enabled = bb > 0;
  opts.bin_by_bin.mode = bb == 2 ? BinByBinMode::full : BinByBinMode::lite;
  SerialLikelihood dense(model, {}, opts);
  test::check_derivatives(dense, x, 1e-7, 3);
  const auto H = hessian(dense);
  // The same sums with sparse storage, over blocks of one cell, and over three shards, to rounding.
  const auto same = [&]<class Storage>(const Model& m, Storage) {
    LikelihoodOptions one = opts;
    one.hessian_block_rows = 1;
    Likelihood<Shard<cpu::Serial, Storage>> serial(m, {}, opts), blocks(m, {}, one);
    Likelihood<Shard<cpu::Threads, Storage>> threaded(m, cpu::Threads{3}, opts);
    CHECK(rel_error(hessian(serial), H) < 1e-13);
    CHECK(rel_error(hessian(blocks), H) < 1e-13);
    CHECK(rel_error(hessian(threaded), H) < 1e-13);
  };
  same(model, storage::Dense{});
  same(sparse, storage::Sparse{});
}
