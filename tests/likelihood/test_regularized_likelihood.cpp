// SPDX-License-Identifier: MIT
// Regularizers plugged into the likelihood: values and exact derivatives through the yields.
#include <catch2/catch.hpp>

#include "derivative_checks.hpp"
#include "random_model.hpp"

using namespace fitlib;

TEST_CASE("regularizers on yields and on parameters: values and derivatives", "[likelihood][regularizer]") {
  const bool asymmetric = GENERATE(false, true);
  const index_t shards = GENERATE(index_t{1}, index_t{3});
  INFO((asymmetric ? "asymmetric, " : "symmetric, ") << shards << " shards");
  test::RandomModelSpec spec;
  spec.asymmetric = asymmetric;
  spec.masked_bins = 6;
  spec.procs = 4;
  spec.signals = 2;
  const Model model = test::random_model(spec);
  LikelihoodOptions opts;
  opts.shards = shards;
  SerialLikelihood plain(model, {}, opts), nll(model, {}, opts);
  // The masked channel as a 2 × 3 grid, and the tail of the unmasked one; a prior on two θ's.
  auto svd = std::make_shared<SvdRegularizer>("masked", BinRange{model.nbins(), model.nbins_full()}, std::vector<index_t>{2, 3}, 0.3);
  auto tail = std::make_shared<SvdRegularizer>("tail", BinRange{model.nbins() - 5, model.nbins()}, std::vector<index_t>{5}, -0.2);
  auto smooth = std::make_shared<SmoothnessPrior>("smooth", std::vector<std::string>{"syst1", "syst2", "syst3"}, 0.5, 2);
  nll.add_regularizer(svd);
  nll.add_regularizer(tail);
  nll.add_regularizer(smooth);
  for (std::uint64_t point = 0; point < 2; ++point) {
    const auto x = test::test_point(model, point, false);
    // The value is the likelihood's plus each penalty at the observables or parameters it reads.
    const auto nu = plain.yields(x);
    auto obs = [&](BinRange br) {
      std::vector<double> o;
      for (index_t b = br.begin; b < br.end; ++b) {
        double s = 0;
        for (index_t p = 0; p < model.nprocs(); ++p) s += nu[static_cast<std::size_t>(b * model.nprocs() + p)];
        o.push_back(s);
      }
      return o;
    };
    const double expected = plain.value(x) + svd->value_grad(obs(svd->bins()), {}) +
                            tail->value_grad(obs(tail->bins()), {}) + smooth->value_grad(x, {});
    CHECK(nll.value(x) == Approx(expected).epsilon(1e-13));
    CHECK(nll.value(x) > plain.value(x));
    test::check_derivatives(nll, x, 1e-7, point);
  }
  // At the default point the ratio to the reference is 1 everywhere: the curvature penalty vanishes.
  SerialLikelihood only_svd(model, {}, opts);
  only_svd.add_regularizer(std::make_shared<SvdRegularizer>("m", BinRange{model.nbins(), model.nbins_full()}, std::vector<index_t>{6}, 0.0));
  const auto x0 = plain.default_parameters();
  CHECK(only_svd.value(x0) == Approx(plain.value(x0)).epsilon(1e-15));
  REQUIRE_THROWS_WITH(only_svd.add_regularizer(std::make_shared<SmoothnessPrior>("s", std::vector<std::string>{"syst1", "nope"}, 1.0)),
                      Catch::Contains("nope"));
  REQUIRE_THROWS_WITH(only_svd.add_regularizer(std::make_shared<SvdRegularizer>("far", BinRange{0, model.nbins_full() + 1},
                                                                                std::vector<index_t>{model.nbins_full() + 1}, 0.0)),
                      Catch::Contains("outside the model"));
}
