// SPDX-License-Identifier: MIT
// Sparse templates evaluate the same likelihood as dense ones, without densifying.
#include <catch2/catch.hpp>

#include "derivative_checks.hpp"
#include "random_model.hpp"

using namespace fitlib;
using fitlib::test::rel_error;

namespace {

/// Every output of one likelihood at x: value, gradient, three HVPs, the dense Hessian, the yields.
template <class L>
std::vector<std::vector<double>> everything(L& nll, const std::vector<double>& x) {
  const index_t n = nll.size();
  std::vector<double> f(1), g(static_cast<std::size_t>(n)), H(static_cast<std::size_t>(n * n)), V(static_cast<std::size_t>(3 * n)), HV(V.size());
  for (std::size_t i = 0; i < V.size(); ++i) V[i] = std::sin(1.0 + static_cast<double>(i));
  nll.hessian({x.data(), n, 1}, f, BlockView<double>(g.data(), n, 1), BlockView<double>(H.data(), n, n));
  nll.hessp({x.data(), n, 1}, {V.data(), n, 3}, BlockView<double>(HV.data(), n, 3));
  return {f, g, HV, H, nll.yields(x)};
}

}  // namespace

TEST_CASE("sparse and dense templates give the same likelihood to 1e-12", "[likelihood][sparse]") {
  const bool asymmetric = GENERATE(false, true);
  const auto type = GENERATE(SystematicType::log_normal, SystematicType::normal);
  const auto term = GENERATE(DataTerm::poisson, DataTerm::chisq, DataTerm::covariance);
  const auto mode = GENERATE(BinByBinMode::lite, BinByBinMode::full);
  const index_t shards = GENERATE(index_t{1}, index_t{3});
  INFO((asymmetric ? "asymmetric, " : "symmetric, ") << (type == SystematicType::normal ? "additive, " : "log-normal, ") << "term "
                                                     << static_cast<int>(term) << ", " << (mode == BinByBinMode::lite ? "lite" : "full")
                                                     << ", " << shards << " shards");
  test::RandomModelSpec spec;
  spec.asymmetric = asymmetric;
  spec.type = type;
  spec.template_stats = true;
  spec.procs = 4;
  spec.signals = 2;
  spec.seed = 11;
  Model dense = test::random_model(spec);
  test::add_data_variances(dense);
  // Sparse for real: zero a third of the logk entries, so rows have different lengths.
  for (std::size_t k = 0; k < dense.dense()->logk.size(); k += 3) dense.dense()->logk[k] = 0.0;
  Model sparse = dense;
  sparse.make_sparse();
  REQUIRE_FALSE(sparse.dense());
  REQUIRE(sparse.sparse()->nnz() < static_cast<index_t>(dense.dense()->logk.size()));

  LikelihoodOptions opts;
  opts.data_term = term;
  opts.shards = shards;
  opts.bin_by_bin.mode = mode;
  opts.bin_by_bin.type = term == DataTerm::covariance ? BinByBinType::normal_multiplicative : BinByBinType::automatic;
  SerialLikelihood a(dense, {}, opts);
  SparseSerialLikelihood b(sparse, {}, opts);
  for (std::uint64_t point = 0; point < 2; ++point) {
    const auto x = test::test_point(dense, point, false);
    const auto ra = everything(a, x), rb = everything(b, x);
    for (std::size_t k = 0; k < ra.size(); ++k) {
      INFO("output " << k);
      CHECK(rel_error(rb[k], ra[k]) < 1e-12);
    }
  }
  if (shards == 1 && term != DataTerm::covariance) test::check_derivatives(b, test::test_point(dense, 2, false), 1e-7);
}

TEST_CASE("a shard refuses templates stored the other way, naming the remedy; storage::visit picks the model's", "[likelihood][sparse]") {
  const Model dense = test::random_model({});
  Model m = dense;
  m.make_sparse();
  REQUIRE_THROWS_WITH(SerialLikelihood(m), Catch::Contains("storage::Sparse"));
  REQUIRE_THROWS_WITH(SparseSerialLikelihood(dense), Catch::Contains("Model::make_sparse") && Catch::Contains("storage::visit"));
  const auto is_sparse = [](const Model& x) { return storage::visit(x, []<class S>(S) { return std::same_as<S, storage::Sparse>; }); };
  CHECK(is_sparse(m));
  CHECK_FALSE(is_sparse(dense));
}
