// SPDX-License-Identifier: MIT
// mpi::Ranks: the bins split over MPI ranks give the one-process answer; run under mpirun with 2 or 3 ranks.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "fitlib/device/mpi.hpp"
#include "fitlib/device/threads.hpp"
#include "fitlib/fit.hpp"
#include "fitlib/io/rabbit.hpp"
#include "random_model.hpp"
#include "shard_checks.hpp"

using namespace fitlib;
using test::everything;
using test::same_bits;
using test::sharded_model;
using test::worst_relative;

namespace {

using RankLikelihood = Likelihood<Shard<mpi::Ranks<cpu::Serial>, storage::Dense>>;
using ThreadedRankLikelihood = Likelihood<Shard<mpi::Ranks<cpu::Threads>, storage::Dense>>;
using SparseRankLikelihood = Likelihood<Shard<mpi::Ranks<cpu::Threads>, storage::Sparse>>;

index_t ranks() { return mpi::size_of(MPI_COMM_WORLD); }
index_t rank() { return mpi::rank_of(MPI_COMM_WORLD); }

/// The same vector on every rank, bit for bit.
bool same_on_every_rank(const std::vector<double>& v) {
  const auto n = static_cast<int>(v.size());
  std::vector<double> all(v.size() * static_cast<std::size_t>(ranks()));
  MPI_Allgather(v.data(), n, MPI_DOUBLE, all.data(), n, MPI_DOUBLE, MPI_COMM_WORLD);
  for (index_t r = 1; r < ranks(); ++r)
    if (!same_bits(std::vector<double>(all.begin() + r * n, all.begin() + (r + 1) * n), v)) return false;
  return true;
}

std::string data_file(const std::string& name) { return std::string(FITLIB_TEST_DATA_DIR) + "/rabbit/" + name; }

}  // namespace

TEST_CASE("mpi: ranks equal the serial shards bitwise and one shard to 1e-12, on every rank", "[mpi]") {
  const Model m = sharded_model();
  for (DataTerm term : {DataTerm::poisson, DataTerm::chisq}) {
    LikelihoodOptions lo;
    lo.data_term = term;
    RankLikelihood ranked(m, {}, lo);
    // CHECK, not REQUIRE, before a collective: a rank that left here would leave the others waiting.
    CHECK(ranked.total_shards() == ranks());
    CHECK(ranked.exchange().size() == ranks());
    LikelihoodOptions serial_shards = lo;
    serial_shards.shards = ranks();
    SerialLikelihood serial(m, {}, serial_shards), one(m, {}, lo);
    const auto r = everything(ranked);
    INFO("data term " << static_cast<int>(term) << ", " << ranks() << " ranks, rank " << rank());
    CHECK(same_bits(r, everything(serial)));  // the same shards, summed in the same order
    CHECK(same_bits(r, everything(ranked)));  // run after run
    CHECK(same_on_every_rank(r));
    CHECK(worst_relative(r, everything(one)) < 1e-12);

    // Threads inside each rank: two shards per rank.
    ThreadedRankLikelihood threaded(m, {cpu::Threads{2}}, lo);
    CHECK(threaded.total_shards() == 2 * ranks());
    const auto t = everything(threaded);
    CHECK(same_on_every_rank(t));
    CHECK(worst_relative(t, everything(one)) < 1e-12);

    // Sparse storage over ranks equals sparse storage in one process with as many shards.
    Model stored_sparse = m;
    stored_sparse.make_sparse();
    SparseRankLikelihood sparse(stored_sparse, {cpu::Threads{1}}, lo);
    SparseSerialLikelihood sparse_serial(stored_sparse, {}, serial_shards);
    CHECK(same_bits(everything(sparse), everything(sparse_serial)));
  }
}

TEST_CASE("mpi: fits, yields, profiled β, global impacts and replica batches over ranks", "[mpi]") {
  const Model m = sharded_model();
  ThreadedRankLikelihood ranked(m, {cpu::Threads{2}});
  SerialLikelihood one(m);
  const TrustRegion<Gltr> minimizer;
  const FitResult a = fit(ranked, minimizer), b = fit(one, minimizer);
  CHECK(converged(a.status));
  CHECK(same_on_every_rank(a.x));
  CHECK(same_on_every_rank(a.covariance));
  // Other shards round differently; the minimizer's path carries that to ~1e-10 in x, and the
  // Hessian's conditioning to ~1e-9 in the covariance.
  CHECK(worst_relative(a.x, b.x) < 1e-9);
  CHECK(worst_relative(a.covariance, b.covariance) < 1e-8);
  CHECK(a.iterations == b.iterations);
  {  // The same shards in one process: the same fit, bit for bit.
    RankLikelihood one_per_rank(m);
    LikelihoodOptions lo;
    lo.shards = ranks();
    SerialLikelihood serial(m, {}, lo);
    const FitResult c = fit(one_per_rank, minimizer), d = fit(serial, minimizer);
    CHECK(same_bits(c.x, d.x));
    CHECK(same_bits(c.covariance, d.covariance));
  }

  CHECK(same_bits(ranked.yields(a.x), one.yields(a.x)));  // per-bin values, gathered in bin order
  CHECK(same_bits(ranked.bin_by_bin_parameters(a.x), one.bin_by_bin_parameters(a.x)));
  const Impacts ga = global_impacts(ranked, a), gb = global_impacts(one, a);
  CHECK(worst_relative(ga.grouped, gb.grouped) < 1e-9);

  const std::vector<ReplicaInputs> toys = test::toy_replicas(one, 5);
  ranked.set_replicas(toys);
  one.set_replicas(toys);
  const std::vector<FitOptions> opts(toys.size());
  const BatchResult br = ReplicaBatch<3>().fit(ranked, minimizer, opts), bo = ReplicaBatch<3>().fit(one, minimizer, opts);
  for (std::size_t r = 0; r < toys.size(); ++r) {
    CHECK(same_on_every_rank(br.replicas[r].x));
    CHECK(worst_relative(br.replicas[r].x, bo.replicas[r].x) < 1e-9);
  }
}

TEST_CASE("mpi: each rank reads only its bins of a rabbit tensor, and the fit is the whole file's", "[mpi]") {
  for (const char* name : {"test_tensor.hdf5", "test_tensor_symmetric.hdf5", "test_tensor_sparse.hdf5"}) {
    INFO(name << ", rank " << rank() << " of " << ranks());
    const std::string path = data_file(name);
    const io::RabbitTensor whole = io::read_rabbit(path);
    const std::vector<BinRange> parts = io::rabbit_partition(path, ranks());
    io::RabbitReadOptions ro;
    ro.bins = parts[static_cast<std::size_t>(rank())];
    const io::RabbitTensor mine = io::read_rabbit(path, ro);
    CHECK(mine.model.held_bins() == parts[static_cast<std::size_t>(rank())]);
    if (!whole.model.sparse()) CHECK(mine.model.dense()->logk.size() * static_cast<std::size_t>(whole.model.nbins_full()) ==
                             whole.model.dense()->logk.size() * static_cast<std::size_t>(ro.bins->size()));
    const TrustRegion<Gltr> minimizer;
    FitResult a, b;
    if (whole.model.sparse()) {
      SparseRankLikelihood ranked(mine.model, {cpu::Threads{2}});
      SparseSerialLikelihood one(whole.model);
      a = fit(ranked, minimizer);
      b = fit(one, minimizer);
    } else {
      ThreadedRankLikelihood ranked(mine.model, {cpu::Threads{2}});
      SerialLikelihood one(whole.model);
      a = fit(ranked, minimizer);
      b = fit(one, minimizer);
    }
    CHECK(a.status == b.status);
    CHECK(same_on_every_rank(a.x));
    // The full-NLL constant and the saturated GoF need every bin's data and template variances, which
    // every rank holds whole.
    const LikelihoodOptions lo;
    CHECK(nll_constant(mine.model, lo, mine.model.data) == nll_constant(whole.model, lo, whole.model.data));
    CHECK(saturated_gof(mine.model, a).ndf == saturated_gof(whole.model, b).ndf);
    CHECK(std::abs(saturated_gof(mine.model, a).chi2 - saturated_gof(whole.model, b).chi2) < 1e-9 * saturated_gof(whole.model, b).chi2);
    CHECK(worst_relative(a.x, b.x) < 1e-9);
    CHECK(worst_relative(a.covariance, b.covariance) < 1e-8);

    // Two shards per rank, each reading its own part of the file on its own thread (a mutex: HDF5's
    // serial build is not thread-safe); the likelihood's own model holds one bin's rows.
    const std::vector<BinRange> shards = io::rabbit_partition(path, 2 * ranks());
    const std::vector<BinRange> own{shards[static_cast<std::size_t>(2 * rank())], shards[static_cast<std::size_t>(2 * rank() + 1)]};
    std::mutex hdf5;
    const auto part = [&](BinRange b) {
      const std::lock_guard lock(hdf5);
      io::RabbitReadOptions po;
      po.bins = b;
      return std::make_shared<const Model>(io::read_rabbit(path, po).model);
    };
    io::RabbitReadOptions mo;
    mo.bins = BinRange{own[0].begin, own[0].begin + 1};
    const auto meta = std::make_shared<const Model>(io::read_rabbit(path, mo).model);
    FitResult c;
    if (whole.model.sparse()) {
      SparseRankLikelihood ranked(meta, own, part, {cpu::Threads{2}});
      c = fit(ranked, minimizer);
    } else {
      ThreadedRankLikelihood ranked(meta, own, part, {cpu::Threads{2}});
      c = fit(ranked, minimizer);
    }
    CHECK(same_on_every_rank(c.x));
    CHECK(worst_relative(c.x, b.x) < 1e-9);
  }
}

TEST_CASE("mpi: what needs every bin in one place is refused before any fit, naming the remedy", "[mpi]") {
  if (ranks() < 2) return;  // one rank holds every bin
  const Model m = sharded_model();
  LikelihoodOptions cov;
  cov.data_term = DataTerm::covariance;
  CHECK_THROWS_WITH(RankLikelihood(m, {}, cov), Catch::Contains("covariance data term") && Catch::Contains("cpu::Threads"));
  RankLikelihood ranked(m);
  CHECK_THROWS_WITH(ranked.add_regularizer(std::make_shared<SvdRegularizer>("svd", BinRange{0, 12}, std::vector<index_t>{12}, 0.0)),
                    Catch::Contains("svd") && Catch::Contains("other MPI ranks"));
  // A penalty on parameters alone works over ranks.
  ranked.add_regularizer(std::make_shared<SmoothnessPrior>("smooth", std::vector<std::string>{ranked.parameter_names()[1], ranked.parameter_names()[2]}, 0.5));
  SerialLikelihood one(m);
  one.add_regularizer(std::make_shared<SmoothnessPrior>("smooth", std::vector<std::string>{one.parameter_names()[1], one.parameter_names()[2]}, 0.5));
  CHECK(worst_relative(everything(ranked), everything(one)) < 1e-12);
  // A model read for one rank cannot be fitted in one process.
  const std::string path = data_file("test_tensor.hdf5");
  io::RabbitReadOptions ro;
  ro.bins = io::rabbit_partition(path, ranks())[static_cast<std::size_t>(rank())];
  CHECK_THROWS_WITH(SerialLikelihood(io::read_rabbit(path, ro).model), Catch::Contains("mpi::Ranks"));
}

TEST_CASE("mpi: an unconstrained systematic must vary a fitted bin on some rank", "[mpi]") {
  Model m = sharded_model();
  const std::vector<BinRange> parts = partition_bins(m, ranks());
  const BinRange mine = parts[static_cast<std::size_t>(rank())];
  const index_t P = m.nprocs(), nc = m.ncoef(), ns = m.nsyst();
  const auto slice = [&](const Model& whole) { return test::slice_of(whole, mine); };
  // Systematic 0, unconstrained, varies the last rank's bins only: determined, though most ranks see no variation.
  m.constraint_weights[0] = 0;
  const auto vary_from = [&](index_t first) {
    for (index_t b = 0; b < m.nbins_full(); ++b)
      for (index_t k = 0; k < P * nc; ++k)
        if (k % nc % ns == 0 && b < first) m.dense()->logk[static_cast<std::size_t>(b * P * nc + k)] = 0;
  };
  vary_from(parts.back().begin);
  CHECK_NOTHROW(RankLikelihood(slice(m)));
  vary_from(m.nbins_full());  // now it varies nothing
  CHECK_THROWS_WITH(RankLikelihood(slice(m)), Catch::Contains("unconstrained but varies no fitted bin"));
}

TEST_CASE("mpi: a failure on one rank stops every rank, never leaves them waiting", "[mpi]") {
  if (ranks() < 2) return;
  const Model m = sharded_model();
  const bool last = rank() == ranks() - 1;
  // The last rank cannot split its bins into 1000 shards; the others learn of it in the first gather.
  LikelihoodOptions lo;
  lo.shards = last ? 1000 : 1;
  CHECK_THROWS_WITH(RankLikelihood(m, {}, lo), Catch::Contains(last ? "cannot split" : "could not build its part of the likelihood"));
  // Ranks holding bins out of rank order.
  const std::vector<BinRange> parts = partition_bins(m, ranks());
  const Model swapped = test::slice_of(m, parts[static_cast<std::size_t>(ranks() - 1 - rank())]);
  CHECK_THROWS_WITH(RankLikelihood(swapped), Catch::Contains("must follow one another in rank order"));
  // Ranks that evaluate at different points stop at that evaluation.
  RankLikelihood ranked(m);
  auto x = ranked.default_parameters();
  x[0] += last ? 1e-3 : 0.0;
  CHECK_THROWS_WITH(ranked.value(x), Catch::Contains("evaluated the likelihood at different parameters"));
  x[0] = ranked.default_parameters()[0];
  CHECK(std::isfinite(ranked.value(x)));  // and agree again afterwards
}

int main(int argc, char** argv) {
  const mpi::Session session(&argc, &argv);
  if (rank() == 0) std::printf("test_mpi: %td ranks\n", ranks());
  return Catch::Session().run(argc, argv);
}
