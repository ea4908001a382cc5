// SPDX-License-Identifier: MIT
// Parity over the policy type list: every backend's values, derivatives, fits, batches and postfit passes against cpu::Serial.
#include <catch2/catch.hpp>

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "fitlib/fit.hpp"
#include "policies.hpp"
#include "random_model.hpp"
#include "shard_checks.hpp"

using namespace fitlib;
using test::everything;
using test::same_bits;
using test::sharded_model;
using test::worst_relative;

namespace {

/// a equals b bitwise where the policy promises it, and to `tol` everywhere.
template <class T>
void check_parity(const std::vector<double>& a, const std::vector<double>& b, double tol = 1e-12) {
  if constexpr (T::bitwise) CHECK(same_bits(a, b));
  CHECK(worst_relative(a, b) < tol);
}

/// Models over every data-term and bin-by-bin configuration a shard evaluates.
struct Case {
  Model model;
  LikelihoodOptions options;
  std::string name;
  /// How many shards the policies split it into (the covariance model is small).
  index_t shards() const { return options.data_term == DataTerm::covariance ? 2 : 3; }
};
std::vector<Case> configurations() {
  std::vector<Case> cases;
  for (DataTerm term : {DataTerm::poisson, DataTerm::chisq})
    for (BinByBinMode mode : {BinByBinMode::lite, BinByBinMode::full})
      for (BinByBinType type : {BinByBinType::gamma, BinByBinType::normal_multiplicative, BinByBinType::normal_additive})
        for (bool asymmetric : {true, false}) {
          const test::RandomModelSpec sp{.bins = 24, .masked_bins = 4, .procs = 4, .signals = 2, .nsyst = 6, .asymmetric = asymmetric,
                                         .zero_counts = term == DataTerm::poisson, .template_stats = true, .seed = 5};
          Case c{test::random_model(sp), {}, ""};
          if (term == DataTerm::chisq) test::add_data_variances(c.model);
          c.options.data_term = term;
          c.options.bin_by_bin.mode = mode;
          c.options.bin_by_bin.type = type;
          c.name = std::string(term == DataTerm::poisson ? "poisson" : "chisq") + (mode == BinByBinMode::lite ? " lite " : " full ") +
                   std::to_string(static_cast<int>(type)) + (asymmetric ? " asymmetric" : " symmetric");
          cases.push_back(std::move(c));
        }
  const test::RandomModelSpec normal{.type = SystematicType::normal, .template_stats = true, .seed = 9};
  cases.push_back({test::random_model(normal), {}, "normal type"});
  // The covariance term, with a correlated inverse covariance.
  for (BinByBinMode mode : {BinByBinMode::lite, BinByBinMode::full})
    for (BinByBinType type : {BinByBinType::automatic, BinByBinType::normal_multiplicative}) {
      LikelihoodOptions lo;
      lo.data_term = DataTerm::covariance;
      lo.bin_by_bin.mode = mode;
      lo.bin_by_bin.type = type;
      cases.push_back({test::covariance_model(true), lo, std::string("covariance") + (mode == BinByBinMode::lite ? " lite " : " full ") +
                                                         std::to_string(static_cast<int>(type))});
    }
  return cases;
}

}  // namespace

TEMPLATE_TEST_CASE("policies: values, gradients, HVPs and Hessians equal cpu::Serial's, run after run", "[policies]", FITLIB_TEST_POLICIES) {
  // The model every shard-count test splits (formerly cpu::Threads' own test).
  const Model m = sharded_model();
  for (DataTerm term : {DataTerm::poisson, DataTerm::chisq}) {
    LikelihoodOptions lo;
    lo.data_term = term;
    for (index_t k : {2, 3}) {
      auto [lik, serial] = test::AgainstSerial<TestType>(m, k, lo);
      SerialLikelihood one(m, {}, lo);
      REQUIRE(lik.nshards() == k);
      const auto t = everything(lik);
      INFO("data term " << static_cast<int>(term) << ", " << k << " shards");
      check_parity<TestType>(t, everything(serial));
      for (int again = 0; again < 10; ++again) CHECK(same_bits(t, everything(lik)));  // run after run
      CHECK(worst_relative(t, everything(one)) < 1e-12);
    }
  }
  // Every data term and bin-by-bin configuration, masked bins and absent cells included.
  for (const Case& c : configurations()) {
    INFO(c.name);
    auto [lik, serial] = test::AgainstSerial<TestType>(c.model, c.shards(), c.options);
    SerialLikelihood one(c.model, {}, c.options);
    const auto t = everything(lik);
    check_parity<TestType>(t, everything(serial));
    CHECK(worst_relative(t, everything(one)) < 1e-12);
  }
}

TEMPLATE_TEST_CASE("policies: the postfit passes (yields, β̂, its variance, fixed β) equal cpu::Serial's", "[policies]", FITLIB_TEST_POLICIES) {
  for (const Case& c : configurations()) {
    INFO(c.name);
    auto [lik, serial] = test::AgainstSerial<TestType>(c.model, c.shards(), c.options);
    std::vector<double> x = serial.default_parameters();
    for (std::size_t i = 0; i < x.size(); ++i) x[i] += 0.05 * std::sin(1.3 * static_cast<double>(i));
    check_parity<TestType>(lik.yields(x), serial.yields(x));
    check_parity<TestType>(lik.bin_by_bin_parameters(x), serial.bin_by_bin_parameters(x));
    if (c.options.data_term == DataTerm::covariance) continue;
    const index_t n = serial.size();
    const Eigen::MatrixXd V = Eigen::MatrixXd::Identity(n, n);
    check_parity<TestType>(lik.bin_by_bin_variance(x, {V.data(), n, n}), serial.bin_by_bin_variance(x, {V.data(), n, n}));
    const std::vector<double> beta = serial.bin_by_bin_parameters(x);
    lik.fix_bin_by_bin(beta);
    serial.fix_bin_by_bin(beta);
    check_parity<TestType>(everything(lik), everything(serial));
    lik.fix_bin_by_bin({});
    serial.fix_bin_by_bin({});
    check_parity<TestType>(everything(lik), everything(serial));
  }
}

TEMPLATE_TEST_CASE("policies: replica data slots, bin selections and observable penalties equal cpu::Serial's", "[policies]",
                   FITLIB_TEST_POLICIES) {
  const Model m = sharded_model();
  auto [lik, serial] = test::AgainstSerial<TestType>(m, 3);
  // Observable penalties read the masked bins and the tail of the data bins, across shards.
  const auto svd = std::make_shared<SvdRegularizer>("masked", BinRange{m.nbins(), m.nbins_full()}, std::vector<index_t>{5}, 0.3);
  const auto tail = std::make_shared<SvdRegularizer>("tail", BinRange{m.nbins() - 9, m.nbins()}, std::vector<index_t>{9}, -0.2);
  lik.add_regularizer(svd);
  lik.add_regularizer(tail);
  serial.add_regularizer(svd);
  serial.add_regularizer(tail);
  check_parity<TestType>(everything(lik), everything(serial));
  // Three replicas: toy data, a bin selection of the likelihood's own data, and shifted centres.
  std::vector<ReplicaInputs> reps(3);
  reps[0].data = generate_toy(serial, 3, 11).data;
  reps[1].bins.assign(static_cast<std::size_t>(m.nbins()), 1);
  for (std::size_t b = 0; b < reps[1].bins.size(); b += 3) reps[1].bins[b] = 0;
  reps[2].constraint_centres.assign(static_cast<std::size_t>(m.nsyst()), 0.1);
  reps[2].penalty_scales = {2.0, 0.5};
  lik.set_replicas(reps);
  serial.set_replicas(reps);
  const std::vector<index_t> pick{0, 1, 2};
  lik.use_replicas(pick);
  serial.use_replicas(pick);
  check_parity<TestType>(everything(lik), everything(serial));
}

TEMPLATE_TEST_CASE("policies: fits and replica batches equal cpu::Serial's", "[policies]", FITLIB_TEST_POLICIES) {
  const Model m = sharded_model();
  auto [lik, serial] = test::AgainstSerial<TestType>(m, 3);
  const TrustRegion<Gltr> minimizer;
  // A fit's minimum is a fixed point the minimizer stops near, at its tolerance: kernels that agree to
  // 1e-14 move the stopping point by up to 1e-11 here (4e-12 for the Krylov fit on AVX2, where Eigen's
  // GEMM sums in another order than with AVX-512), and a replica's by up to 1e-10 (the batch's GEMM
  // widths differ from the sequential fit's), far inside any uncertainty. So the minimum's value is
  // compared to the kernels' 1e-12 and where it lies to 1e-9. Host backends stay bitwise.
  const double stopping = 1e-9;
  const FitResult a = fit(lik, minimizer), b = fit(serial, minimizer);
  CHECK(a.status == b.status);
  CHECK(a.iterations == b.iterations);
  check_parity<TestType>({a.nll}, {b.nll});
  check_parity<TestType>(a.x, b.x, stopping);
  check_parity<TestType>(a.covariance, b.covariance, stopping);
  const FitResult e = fit(lik, TrustRegion<Exact>{}), f = fit(serial, TrustRegion<Exact>{});
  check_parity<TestType>({e.nll}, {f.nll});
  check_parity<TestType>(e.x, f.x, stopping);

  const std::vector<ReplicaInputs> toys = test::toy_replicas(serial, 6);
  lik.set_replicas(toys);
  serial.set_replicas(toys);
  const std::vector<FitOptions> opts(toys.size());
  const BatchResult bt = ReplicaBatch<4>().fit(lik, minimizer, opts), bs = ReplicaBatch<4>().fit(serial, minimizer, opts);
  for (std::size_t r = 0; r < toys.size(); ++r) {
    INFO("replica " << r);
    CHECK(bt.replicas[r].status == bs.replicas[r].status);
    check_parity<TestType>({bt.replicas[r].nll}, {bs.replicas[r].nll});
    check_parity<TestType>(bt.replicas[r].x, bs.replicas[r].x, stopping);
  }
}

namespace {
/// 720 bins × 3 processes, every cell present, 4 asymmetric systematics: 2,160 entries per coefficient, so that a
/// sparse device shard cuts each into pieces of device::sparse_piece (512), the last one shorter; the last coefficient
/// has no entries at all.
Model pieces_model() {
  test::RandomModelSpec sp{.bins = 700, .masked_bins = 20, .procs = 3, .nsyst = 4, .absent_cells = false, .template_stats = true, .seed = 31};
  Model m = test::random_model(sp);
  const index_t P = m.nprocs(), nc = m.ncoef();
  for (index_t cell = 0; cell < m.nbins_full() * P; ++cell) m.dense()->logk[static_cast<std::size_t>(cell * nc + nc - 1)] = 0;
  return m;
}
}  // namespace

TEST_CASE("device-layer sparse templates: the products over pieces of a coefficient's entries, for any range of bins", "[policies]") {
  const Model m = pieces_model();
  Model sparse = m;
  sparse.make_sparse();
  const std::vector<index_t>& col = sparse.sparse()->col;
  REQUIRE(std::count(col.begin(), col.end(), index_t{0}) > 2 * device::sparse_piece);
  // The backward products over any range of a shard's bins (pieces cut at their ends by the binary searches, or wholly
  // outside) equal the dense templates' GEMM, and so do the forward ones. A shard of 512 bins has exactly 3 pieces per
  // coefficient.
  const index_t P = m.nprocs(), nc = m.ncoef(), nb = 3;
  for (const BinRange shard : {BinRange{0, m.nbins_full()}, BinRange{0, 512}}) {
    device::HostLayer layer;
    detail::DeviceTemplates<storage::Dense, device::HostLayer> dense_t(layer, m, shard);
    detail::DeviceTemplates<storage::Sparse, device::HostLayer> sparse_t(layer, sparse, shard);
    for (const BinRange r : {shard, BinRange{123, 512}, BinRange{171, 172}, BinRange{500, shard.end}, BinRange{5, 5}}) {
      INFO("shard [" << shard.begin << ", " << shard.end << "), bins [" << r.begin << ", " << r.end << ")");
      const index_t rows = r.size() * P;
      std::vector<double> U(static_cast<std::size_t>(rows * nb)), C(static_cast<std::size_t>(nc * nb));
      for (std::size_t k = 0; k < U.size(); ++k) U[k] = std::sin(0.37 * static_cast<double>(k) + 1);
      for (std::size_t k = 0; k < C.size(); ++k) C[k] = std::cos(0.61 * static_cast<double>(k));
      std::vector<double> a(static_cast<std::size_t>(nc * nb), -1), b(a.size(), -2), La(static_cast<std::size_t>(rows * nb)), Lb(La.size());
      dense_t.backward(layer, r, nb, U.data(), a.data());
      sparse_t.backward(layer, r, nb, U.data(), b.data());
      CHECK(worst_relative(b, a) < 1e-12);
      dense_t.forward(layer, r, nb, C.data(), La.data());
      sparse_t.forward(layer, r, nb, C.data(), Lb.data());
      CHECK(worst_relative(Lb, La) < 1e-12);
    }
  }
}

TEMPLATE_TEST_CASE("policies: shards with coefficients of several pieces, and shards that hold only their own bins", "[policies]",
                   FITLIB_TEST_POLICIES) {
  const Model m = pieces_model();
  for (const index_t k : {1, 3}) {
    INFO(k << " shards");
    auto [lik, serial] = test::AgainstSerial<TestType>(m, k);
    check_parity<TestType>(everything(lik), everything(serial));
  }
  // Each shard's templates read for its bins alone (an MPI rank's, io::read_rabbit with bins), stored as the entry's
  // shards hold them.
  const std::vector<BinRange> ranges = partition_bins(m, 3);
  const auto part = [&](BinRange b) {
    Model s = test::slice_of(m, b);
    if constexpr (std::same_as<typename TestType::storage, storage::Sparse>) s.make_sparse();
    return std::make_shared<const Model>(std::move(s));
  };
  test::LikelihoodOf<TestType> held(part({0, 1}), ranges, part, TestType::make(3));
  LikelihoodOptions three;
  three.shards = 3;
  SerialLikelihood serial(m, {}, three);
  check_parity<TestType>(everything(held), everything(serial));
  const TrustRegion<Gltr> minimizer;
  const FitResult a = fit(held, minimizer), b = fit(serial, minimizer);
  CHECK(a.status == b.status);
  check_parity<TestType>(a.x, b.x, 1e-9);
}
