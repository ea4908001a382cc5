// SPDX-License-Identifier: MIT
// The covariance χ² term: against the diagonal χ², a joint minimisation over β, and finite differences.
#include <catch2/catch.hpp>

#include <Eigen/Dense>
#include <random>

#include "derivative_checks.hpp"
#include "random_model.hpp"

using namespace fitlib;
using fitlib::test::covariance_model;
using fitlib::test::rel_error;

namespace {

LikelihoodOptions options(DataTerm term, bool bb, BinByBinMode mode = BinByBinMode::lite, BinByBinType type = BinByBinType::normal_additive) {
  LikelihoodOptions o;
  o.data_term = term;
  o.bin_by_bin.enabled = bb;
  o.bin_by_bin.mode = mode;
  o.bin_by_bin.type = type;
  return o;
}

}  // namespace

TEST_CASE("a diagonal covariance reproduces the diagonal χ² with every Gaussian bin-by-bin choice", "[likelihood][covariance]") {
  const bool bb = GENERATE(false, true);
  const auto mode = GENERATE(BinByBinMode::lite, BinByBinMode::full);
  const auto type = GENERATE(BinByBinType::normal_multiplicative, BinByBinType::normal_additive);
  INFO((bb ? "with β, " : "without β, ") << (mode == BinByBinMode::lite ? "lite, " : "full, ")
                                         << (type == BinByBinType::normal_additive ? "additive" : "multiplicative"));
  const Model model = covariance_model(false);
  SerialLikelihood cov(model, {}, options(DataTerm::covariance, bb, mode, type));
  SerialLikelihood chisq(model, {}, options(DataTerm::chisq, bb, mode, type));
  const index_t n = cov.size();
  for (std::uint64_t point = 0; point < 2; ++point) {
    const auto x = test::test_point(model, point, false);
    std::vector<double> g1(static_cast<std::size_t>(n)), g2(g1.size());
    const double f1 = cov.value_grad(x, g1), f2 = chisq.value_grad(x, g2);
    CHECK(f1 == Approx(f2).epsilon(1e-12));
    CHECK(rel_error(g1, g2) < 1e-11);
    std::vector<double> f(1), H1(static_cast<std::size_t>(n * n)), H2(H1.size());
    cov.hessian({x.data(), n, 1}, f, BlockView<double>(g1.data(), n, 1), BlockView<double>(H1.data(), n, n));
    chisq.hessian({x.data(), n, 1}, f, BlockView<double>(g2.data(), n, 1), BlockView<double>(H2.data(), n, n));
    CHECK(rel_error(H1, H2) < 1e-11);
  }
}

TEST_CASE("covariance term with correlated bins: derivatives and the joint minimum over β", "[likelihood][covariance][bbstat]") {
  const bool bb = GENERATE(false, true);
  const auto mode = GENERATE(BinByBinMode::lite, BinByBinMode::full);
  const auto type = GENERATE(BinByBinType::normal_multiplicative, BinByBinType::normal_additive);
  const auto systematics = GENERATE(SystematicType::log_normal, SystematicType::normal);
  INFO((bb ? "with β, " : "without β, ") << (mode == BinByBinMode::lite ? "lite, " : "full, ")
                                         << (type == BinByBinType::normal_additive ? "additive, " : "multiplicative, ")
                                         << (systematics == SystematicType::normal ? "additive systematics" : "log-normal"));
  const Model model = covariance_model(true, systematics);
  const auto opts = options(DataTerm::covariance, bb, mode, type);
  SerialLikelihood nll(model, {}, opts);
  const auto st = BinByBinStats::build(model, {0, model.nbins()}, opts.bin_by_bin, DataTerm::covariance);
  for (std::uint64_t point = 0; point < 2; ++point) {
    INFO("point " << point);
    const auto x = test::test_point(model, point, false);
    test::check_derivatives(nll, x, 1e-7, point);
    {  // a block of two columns gives each column's own value, gradient and Hessian
      const index_t n = nll.size();
      const auto x2 = test::test_point(model, point + 5, false);
      std::vector<double> X(x), f(2), G(static_cast<std::size_t>(2 * n)), H(static_cast<std::size_t>(2 * n * n));
      X.insert(X.end(), x2.begin(), x2.end());
      nll.hessian({X.data(), n, 2}, f, BlockView<double>(G.data(), n, 2), BlockView<double>(H.data(), n, 2 * n));
      for (int c = 0; c < 2; ++c) {
        const auto& xc = c == 0 ? x : x2;
        std::vector<double> f1(1), g1(static_cast<std::size_t>(n)), H1(static_cast<std::size_t>(n * n));
        nll.hessian({xc.data(), n, 1}, f1, BlockView<double>(g1.data(), n, 1), BlockView<double>(H1.data(), n, n));
        CHECK(f[static_cast<std::size_t>(c)] == f1[0]);
        CHECK(std::vector<double>(G.begin() + c * n, G.begin() + (c + 1) * n) == g1);
        CHECK(std::vector<double>(H.begin() + c * n * n, H.begin() + (c + 1) * n * n) == H1);
      }
    }

    // The profiled value against min over all β at once of ½(ν̃ − n)ᵀC⁻¹(ν̃ − n) + L_β, a quadratic in β
    // solved here by its normal equations over the joint (bins × β) system.
    const index_t B = model.nbins(), P = model.nprocs(), per = st.per_bin(), nb = bb ? B * per : 0;
    SerialLikelihood plain(model, {}, options(DataTerm::covariance, false));
    const auto nu = plain.yields(x);  // before β
    const Eigen::Map<const Eigen::MatrixXd> Cinv(model.data_covariance_inverse.data(), B, B);
    Eigen::VectorXd r(B);
    Eigen::MatrixXd D = Eigen::MatrixXd::Zero(B, nb);  // ν̃ = ν + D·(β − β₀)
    Eigen::VectorXd k = Eigen::VectorXd::Ones(nb);
    for (index_t b = 0; b < B; ++b) {
      r(b) = -model.data[static_cast<std::size_t>(b)];
      for (index_t p = 0; p < P; ++p) r(b) += nu[static_cast<std::size_t>(b * P + p)];
      for (index_t e = 0; e < per && bb; ++e) {
        const auto at = static_cast<std::size_t>(b * per + e);
        if (st.fixed[at]) continue;
        if (type == BinByBinType::normal_additive) {
          D(b, b * per + e) = st.sigma[at];
        } else {
          for (index_t p = 0; p < P; ++p)
            if (per == 1 ? st.active[static_cast<std::size_t>(b * P + p)] != 0 : p == e) D(b, b * per + e) += nu[static_cast<std::size_t>(b * P + p)];
          k(b * per + e) = st.kstat[at];
        }
      }
    }
    const Eigen::MatrixXd A = D.transpose() * Cinv * D + Eigen::MatrixXd(k.asDiagonal());
    const Eigen::VectorXd d = A.ldlt().solve(-D.transpose() * Cinv * r);
    const Eigen::VectorXd res = r + D * d;
    const double joint = 0.5 * res.dot(Cinv * res) + 0.5 * d.dot(k.asDiagonal() * d);
    // The constraints are what the other terms add on top of the data term.
    SerialLikelihood constraints_only(model, {}, options(DataTerm::covariance, false));
    const double cons = constraints_only.value(x) - 0.5 * r.dot(Cinv * r);
    CHECK(nll.value(x) == Approx(joint + cons).epsilon(1e-11));
  }
}

TEST_CASE("covariance term: invalid combinations are rejected naming the remedy", "[likelihood][covariance]") {
  Model model = covariance_model(false);
  auto gamma = options(DataTerm::covariance, true, BinByBinMode::lite, BinByBinType::gamma);
  REQUIRE_THROWS_WITH(SerialLikelihood(model, {}, gamma), Catch::Contains("normal_additive or normal_multiplicative"));
  // Without a covariance matrix the data variances give the diagonal (rabbit's intended fallback).
  model.data_covariance_inverse.clear();
  SerialLikelihood diag(model, {}, options(DataTerm::covariance, false));
  SerialLikelihood chisq(model, {}, options(DataTerm::chisq, false));
  const auto x = test::test_point(model, 0, false);
  CHECK(diag.value(x) == Approx(chisq.value(x)).epsilon(1e-12));
  model.data_variance.assign(model.data_variance.size(), 1.0);
  model.data_variance[2] = 0;
  REQUIRE_THROWS_WITH(SerialLikelihood(model, {}, options(DataTerm::covariance, false)), Catch::Contains("data_covariance_inverse"));
  model.data_variance.clear();
  model.data_covariance_inverse.assign(static_cast<std::size_t>(model.nbins() * model.nbins()), 0.0);
  model.data_covariance_inverse[1] = 1.0;
  REQUIRE_THROWS_WITH(model.validate(), Catch::Contains("not symmetric"));
  model.data_covariance_inverse[1] = 0.0;  // all zero: not positive definite once β widens C
  REQUIRE_THROWS_WITH(SerialLikelihood(model, {}, options(DataTerm::covariance, true)), Catch::Contains("not positive definite"));
}
