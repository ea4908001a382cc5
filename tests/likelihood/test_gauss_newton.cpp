// SPDX-License-Identifier: MIT
// The Gauss–Newton matrix (Curvature::gauss_newton) against Σ_b (n_b/ν_b²)·∇ν_b∇ν_bᵀ from finite
// differences of the yields (plus a non-negative diagonal where the interpolation is asymmetric), and
// against the Hessian where the data equal the expectation.
#include <catch2/catch.hpp>

#include <Eigen/Dense>

#include "random_model.hpp"

using namespace fitlib;
using fitlib::test::central_difference;
using fitlib::test::rel_error;

namespace {

/// f, g and the matrix of `kind` at x.
template <class L>
std::vector<double> curvature(L& nll, const std::vector<double>& x, Curvature kind, std::vector<double>* g_out = nullptr) {
  const index_t n = nll.size();
  std::vector<double> f(1), g(static_cast<std::size_t>(n)), H(static_cast<std::size_t>(n * n));
  nll.hessian(ConstBlockView<double>(x.data(), n, 1), f, BlockView<double>(g.data(), n, 1), BlockView<double>(H.data(), n, n), kind);
  if (g_out) *g_out = g;
  return H;
}

/// A model with bin-by-bin statistics and bins enough for three shards.
Model shards_model() {
  test::RandomModelSpec spec;
  spec.template_stats = true;
  spec.bins = 24;
  return test::random_model(spec);
}

double smallest_eigenvalue(const std::vector<double>& H, index_t n) {
  return Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd>(Eigen::Map<const Eigen::MatrixXd>(H.data(), n, n)).eigenvalues()(0);
}

}  // namespace

TEST_CASE("the Gauss–Newton matrix is Σ_b (n_b/ν_b²)·∇ν_b∇ν_bᵀ plus the constraints' curvature", "[likelihood][gauss-newton]") {
  const auto type = GENERATE(SystematicType::log_normal, SystematicType::normal);
  const bool linear_poi = GENERATE(false, true);
  const bool asymmetric = GENERATE(false, true);
  INFO((type == SystematicType::log_normal ? "log-normal" : "additive") << (linear_poi ? ", linear POIs" : ", squared POIs")
                                                                       << (asymmetric ? ", asymmetric" : ", symmetric"));
  test::RandomModelSpec spec;
  spec.asymmetric = asymmetric;
  spec.type = type;
  spec.signals = 2;
  spec.procs = 4;
  spec.nsyst = 6;
  spec.unconstrained = 2;
  const Model model = test::random_model(spec);
  LikelihoodOptions opts;
  opts.allow_negative_poi = linear_poi;
  opts.single_precision_gauss_newton = false;  // to 1e-8 below; the single-precision matrix has its own test
  SerialLikelihood nll(model, {}, opts);
  const index_t n = nll.size(), P = model.nprocs(), B = model.nbins();
  const std::vector<double> x = test::test_point(model, 2, linear_poi);

  // ∇ν_b of every data bin, by fourth-order differences of the summed yields.
  auto bin_yields = [&](const std::vector<double>& y) {
    const std::vector<double> nu = nll.yields(y);
    std::vector<double> sum(static_cast<std::size_t>(B), 0.0);
    for (index_t b = 0; b < B; ++b)
      for (index_t p = 0; p < P; ++p) sum[static_cast<std::size_t>(b)] += nu[static_cast<std::size_t>(b * P + p)];
    return sum;
  };
  const std::vector<double> nu = bin_yields(x);
  Eigen::MatrixXd J(B, n);
  for (index_t k = 0; k < n; ++k) {
    std::vector<double> e(static_cast<std::size_t>(n), 0.0);
    e[static_cast<std::size_t>(k)] = 1.0;
    const std::vector<double> d = central_difference(bin_yields, x, e, 1e-4);
    for (index_t b = 0; b < B; ++b) J(b, k) = d[static_cast<std::size_t>(b)];
  }
  Eigen::MatrixXd ref = Eigen::MatrixXd::Zero(n, n);
  for (index_t b = 0; b < B; ++b) {
    const double nb = model.data[static_cast<std::size_t>(b)], v = nu[static_cast<std::size_t>(b)];
    ref += (nb / (v * v)) * J.row(b).transpose() * J.row(b);
  }
  for (index_t s = 0; s < model.nsyst(); ++s) ref(model.npoi() + s, model.npoi() + s) += model.constraint_weights[static_cast<std::size_t>(s)];

  std::vector<double> g_gn, g_exact;
  const std::vector<double> GN = curvature(nll, x, Curvature::gauss_newton, &g_gn);
  const std::vector<double> H = curvature(nll, x, Curvature::exact, &g_exact);
  // The asymmetric interpolation adds the positive part of its own curvature to the systematics'
  // diagonal (test_point puts some θ in |θ| < ½, where g'' ≠ 0).
  Eigen::MatrixXd diff = Eigen::Map<const Eigen::MatrixXd>(GN.data(), n, n) - ref;
  const double scale = ref.cwiseAbs().maxCoeff();
  double added = 0;
  for (index_t i = 0; i < n; ++i) {
    CHECK(diff(i, i) > -1e-8 * scale);
    added = std::max(added, diff(i, i));
    if (i < model.npoi() || !asymmetric) CHECK(std::abs(diff(i, i)) < 1e-8 * scale);
    diff(i, i) = 0;
  }
  CHECK(diff.cwiseAbs().maxCoeff() < 1e-8 * scale);
  if (!asymmetric) CHECK(added < 1e-8 * scale);
  CHECK(test::same_bits(g_gn, g_exact));  // values and gradients are exact either way
  if (type == SystematicType::log_normal) CHECK(rel_error(GN, H) > 1e-3);  // away from the data the yields' own curvature counts
  CHECK(smallest_eigenvalue(GN, n) > -1e-12 * Eigen::Map<const Eigen::MatrixXd>(GN.data(), n, n).norm());
  // hessian(x, f, g, H) is the exact one.
  std::vector<double> f(1), g(static_cast<std::size_t>(n)), H0(static_cast<std::size_t>(n * n));
  nll.hessian(ConstBlockView<double>(x.data(), n, 1), f, BlockView<double>(g.data(), n, 1), BlockView<double>(H0.data(), n, n));
  CHECK(test::same_bits(H0, H));
}

TEST_CASE("where the data equal the expectation the Gauss–Newton matrix is the Hessian", "[likelihood][gauss-newton]") {
  const auto mode = GENERATE(BinByBinMode::lite, BinByBinMode::full);
  const bool stats = GENERATE(false, true);
  INFO((stats ? "bin-by-bin statistics, " : "no bin-by-bin statistics, ") << (mode == BinByBinMode::lite ? "lite" : "full"));
  test::RandomModelSpec spec;
  spec.template_stats = stats;
  spec.zero_counts = false;
  spec.nsyst = 6;
  Model model = test::random_model(spec);
  LikelihoodOptions opts;
  opts.bin_by_bin.enabled = stats;
  opts.bin_by_bin.mode = mode;
  opts.single_precision_gauss_newton = false;
  const index_t P = model.nprocs(), B = model.nbins();
  const std::vector<double> x = test::test_point(model, 1, false);
  {
    SerialLikelihood at_default(model, {}, opts);
    const std::vector<double> nu = at_default.yields(x);
    for (index_t b = 0; b < B; ++b) {
      double v = 0;
      for (index_t p = 0; p < P; ++p) v += nu[static_cast<std::size_t>(b * P + p)];
      model.data[static_cast<std::size_t>(b)] = v;
    }
  }
  SerialLikelihood nll(model, {}, opts);
  const index_t n = nll.size();
  const std::vector<double> GN = curvature(nll, x, Curvature::gauss_newton), H = curvature(nll, x, Curvature::exact);
  // The data term's slope vanishes in every bin; the constraints' (θ ≠ θ₀) is no yield curvature.
  CHECK(rel_error(GN, H) < 1e-10);
  CHECK(smallest_eigenvalue(GN, n) > 0);
}

TEST_CASE("the Gauss–Newton matrix is positive semi-definite with bin-by-bin statistics, empty bins and every data term",
          "[likelihood][gauss-newton]") {
  const auto mode = GENERATE(BinByBinMode::lite, BinByBinMode::full);
  const auto type = GENERATE(BinByBinType::gamma, BinByBinType::normal_multiplicative, BinByBinType::normal_additive);
  const auto term = GENERATE(DataTerm::poisson, DataTerm::chisq);
  INFO((mode == BinByBinMode::lite ? "lite, " : "full, ") << static_cast<int>(type) << (term == DataTerm::poisson ? ", Poisson" : ", χ²"));
  test::RandomModelSpec spec;
  spec.template_stats = true;  // zero_counts: every fourth bin empty
  spec.nsyst = 6;
  Model model = test::random_model(spec);
  test::add_data_variances(model);
  LikelihoodOptions opts;
  opts.data_term = term;
  opts.bin_by_bin.mode = mode;
  opts.bin_by_bin.type = type;
  opts.single_precision_gauss_newton = false;
  SerialLikelihood nll(model, {}, opts);
  const index_t n = nll.size();
  for (std::uint64_t point = 0; point < 3; ++point) {
    const std::vector<double> GN = curvature(nll, test::test_point(model, point, false), Curvature::gauss_newton);
    CHECK(smallest_eigenvalue(GN, n) > -1e-12 * Eigen::Map<const Eigen::MatrixXd>(GN.data(), n, n).norm());
  }
}

TEST_CASE("the Gauss–Newton matrix is the same over shards and with sparse templates", "[likelihood][gauss-newton]") {
  const Model model = shards_model();
  const std::vector<double> x = test::test_point(model, 3, false);
  // Each shard rounds its own single-precision sum: 1e-13 in double, single precision's own bound in single.
  const bool single = GENERATE(false, true);
  INFO((single ? "single" : "double") << " precision");
  LikelihoodOptions opts;
  opts.single_precision_gauss_newton = single;
  const double tol = single ? 1e-6 : 1e-13;
  SerialLikelihood serial(model, {}, opts);
  const std::vector<double> ref = curvature(serial, x, Curvature::gauss_newton);
  ThreadedLikelihood threaded(model, cpu::Threads{3}, opts);
  CHECK(rel_error(curvature(threaded, x, Curvature::gauss_newton), ref) < tol);
  Model sparse = model;
  sparse.make_sparse();
  SparseSerialLikelihood sparse_nll(sparse, {}, opts);
  CHECK(rel_error(curvature(sparse_nll, x, Curvature::gauss_newton), ref) < tol);
}

TEST_CASE("the single-precision Gauss–Newton matrix is the double one to single precision", "[likelihood][gauss-newton]") {
  // The default (LikelihoodOptions::single_precision_gauss_newton) runs the matrix's GEMMs in float; the
  // rest (the constraints, the interpolation's diagonal, the covariance term's rows) stays double.
  const auto mode = GENERATE(BinByBinMode::lite, BinByBinMode::full);
  const auto term = GENERATE(DataTerm::poisson, DataTerm::chisq, DataTerm::covariance);
  const bool asymmetric = GENERATE(false, true);
  const index_t block_rows = GENERATE(index_t{256}, index_t{4});  // one block, or ten and more added in double
  INFO((mode == BinByBinMode::lite ? "lite, " : "full, ") << static_cast<int>(term) << (asymmetric ? ", asymmetric" : ", symmetric")
                                                          << ", blocks of " << block_rows);
  Model model = [&] {
    if (term == DataTerm::covariance) return test::covariance_model(true);
    test::RandomModelSpec spec;
    spec.template_stats = true;
    spec.asymmetric = asymmetric;
    spec.nsyst = 6;
    spec.bins = 40;
    Model m = test::random_model(spec);
    test::add_data_variances(m);
    return m;
  }();
  LikelihoodOptions single, dbl;
  single.data_term = dbl.data_term = term;
  single.bin_by_bin.mode = dbl.bin_by_bin.mode = mode;
  single.hessian_block_rows = dbl.hessian_block_rows = block_rows;
  if (term == DataTerm::covariance) single.bin_by_bin.type = dbl.bin_by_bin.type = BinByBinType::normal_additive;
  dbl.single_precision_gauss_newton = false;
  REQUIRE(single.single_precision_gauss_newton);  // the default
  SerialLikelihood a(model, {}, single), b(model, {}, dbl);
  for (std::uint64_t point = 0; point < 3; ++point) {
    const std::vector<double> x = test::test_point(model, point, false);
    std::vector<double> ga, gb;
    const std::vector<double> GNs = curvature(a, x, Curvature::gauss_newton, &ga), GNd = curvature(b, x, Curvature::gauss_newton, &gb);
    const double err = rel_error(GNs, GNd);
    CHECK(err < 1e-6);
    if (term != DataTerm::covariance) CHECK(err > 0);  // it is single precision (the covariance term's data part is double)
    CHECK(test::same_bits(ga, gb));  // values and gradients are double either way
    const index_t n = a.size();
    CHECK(smallest_eigenvalue(GNs, n) > -1e-6 * Eigen::Map<const Eigen::MatrixXd>(GNs.data(), n, n).norm());
    // The exact Hessian does not depend on the option.
    CHECK(curvature(a, x, Curvature::exact) == curvature(b, x, Curvature::exact));
  }
}

TEST_CASE("the single-precision Gauss–Newton matrix of yields near double's underflow is the double one", "[likelihood][gauss-newton]") {
  // With χ² the weight 1/σ² does not grow as the yields shrink. At ν ~ 1e-310 (subnormal) a block's float scale
  // 2^−ilogb would be 2^1030, beyond double's range: such blocks take the double product. At 1e-300 the float
  // path's products underflow to zero as the double ones do.
  const double scale = GENERATE(1e-300, 1e-310);
  INFO("yields scaled by " << scale);
  test::RandomModelSpec spec;
  spec.bins = 12;
  spec.absent_cells = false;
  Model model = test::random_model(spec);
  test::add_data_variances(model);
  for (double& nu : model.dense()->nominal) nu *= scale;
  LikelihoodOptions single, dbl;
  single.data_term = dbl.data_term = DataTerm::chisq;
  single.bin_by_bin.enabled = dbl.bin_by_bin.enabled = false;
  dbl.single_precision_gauss_newton = false;
  SerialLikelihood a(model, {}, single), b(model, {}, dbl);
  const std::vector<double> x = test::test_point(model, 1, false);
  const std::vector<double> GNs = curvature(a, x, Curvature::gauss_newton), GNd = curvature(b, x, Curvature::gauss_newton);
  CHECK(Eigen::Map<const Eigen::VectorXd>(GNs.data(), static_cast<index_t>(GNs.size())).allFinite());
  CHECK(GNs == GNd);
}

TEST_CASE("the matrix alone is the matrix that comes with a value and gradient, bit for bit", "[likelihood][gauss-newton][hessian]") {
  // objective_with_bare_hessian: the minimizer's new iterate and the postfit covariance ask for the matrix
  // without the walk for value and gradient, which they hold; the matrix must not notice.
  const Model model = shards_model();
  const std::vector<double> x = test::test_point(model, 3, false);
  const auto bare = [&](auto& nll, Curvature kind) {
    const index_t n = nll.size();
    std::vector<double> H(static_cast<std::size_t>(n * n), -1.0);
    nll.hessian(ConstBlockView<double>(x.data(), n, 1), BlockView<double>(H.data(), n, n), kind);
    return H;
  };
  for (const Curvature kind : {Curvature::exact, Curvature::gauss_newton}) {
    SerialLikelihood serial(model);
    const std::vector<double> with_value = curvature(serial, x, kind);
    SerialLikelihood fresh(model);  // no evaluation at x before
    CHECK(bare(fresh, kind) == with_value);
    ThreadedLikelihood threaded(model, cpu::Threads{3});
    CHECK(bare(threaded, kind) == curvature(threaded, x, kind));
  }
  // The covariance term's matrix needs the term's solve at x, which the bare matrix still runs.
  const Model cov = test::covariance_model(true);
  LikelihoodOptions lo;
  lo.data_term = DataTerm::covariance;
  const std::vector<double> xc = test::test_point(cov, 5, false);
  SerialLikelihood first(cov, {}, lo), second(cov, {}, lo);
  const index_t n = first.size();
  std::vector<double> f(1), g(static_cast<std::size_t>(n)), H(static_cast<std::size_t>(n * n)), Hb(H.size());
  first.hessian(ConstBlockView<double>(xc.data(), n, 1), f, BlockView<double>(g.data(), n, 1), BlockView<double>(H.data(), n, n));
  second.hessian(ConstBlockView<double>(xc.data(), n, 1), BlockView<double>(Hb.data(), n, n), Curvature::exact);
  CHECK(Hb == H);
  // A shard without the Gauss–Newton matrix says so.
  Likelihood<Shard<device::HostLayered, storage::Dense>> layered(model, device::HostLayered{1});
  const index_t nl = layered.size();
  std::vector<double> Hl(static_cast<std::size_t>(nl * nl));
  CHECK_THROWS_WITH(layered.hessian(ConstBlockView<double>(x.data(), nl, 1), BlockView<double>(Hl.data(), nl, nl), Curvature::gauss_newton),
                    Catch::Contains("no Gauss–Newton matrix"));
}
