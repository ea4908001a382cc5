// SPDX-License-Identifier: MIT
// partition_bins: contiguous shards balanced by the work their bins carry, never splitting a bin.
#include <catch2/catch.hpp>

#include <algorithm>
#include <numeric>
#include <vector>

#include "fitlib/fit.hpp"
#include "random_model.hpp"

using namespace fitlib;

namespace {
/// Every bin once, in order, each shard non-empty, the masked bins in the last.
void check_cover(const Model& m, const std::vector<BinRange>& r, index_t k) {
  REQUIRE(static_cast<index_t>(r.size()) == k);
  CHECK(r.front().begin == 0);
  CHECK(r.back().end == m.nbins_full());
  for (std::size_t i = 0; i < r.size(); ++i) {
    CHECK(r[i].size() >= 1);
    if (i + 1 < r.size()) {
      CHECK(r[i].end == r[i + 1].begin);
      CHECK(r[i].end <= m.nbins());
    }
  }
}
}  // namespace

TEST_CASE("partition: dense bins split evenly, sparse bins by their entries", "[partition]") {
  test::RandomModelSpec sp;
  sp.bins = 60;
  sp.masked_bins = 6;
  sp.procs = 4;
  sp.nsyst = 9;
  Model dense = test::random_model(sp);
  for (index_t k : {1, 2, 3, 7, 60}) {
    const auto r = partition_bins(dense, k);
    check_cover(dense, r, k);
    for (index_t i = 0; i + 1 < k; ++i) CHECK(std::abs(r[static_cast<std::size_t>(i)].size() - 60 / k) <= 1);
  }
  CHECK(partition_bins(cpu::Threads{3}, dense).size() == 3);
  CHECK_THROWS_WITH(partition_bins(dense, 61), Catch::Contains("cannot split 60 unmasked bins into 61 shards"));

  // The first 15 bins carry every variation, the rest almost none: balanced by entries, the first
  // shards hold far fewer bins.
  Model sparse = dense;
  const index_t P = sparse.nprocs(), nc = sparse.ncoef();
  for (index_t b = 15; b < sparse.nbins_full(); ++b)
    for (index_t c = 1; c < P * nc; ++c) sparse.dense()->logk[static_cast<std::size_t>(b * P * nc + c)] = 0.0;
  sparse.make_sparse();
  const std::vector<index_t> w = bin_work(sparse);
  const index_t total = std::accumulate(w.begin(), w.end(), index_t{0});
  for (index_t k : {2, 3, 4}) {
    const auto r = partition_bins(sparse, k);
    check_cover(sparse, r, k);
    CHECK(r[0].size() < 15);
    for (const BinRange& s : r) {
      const index_t work = std::accumulate(w.begin() + s.begin, w.begin() + std::min(s.end, sparse.nbins()), index_t{0});
      CHECK(work <= total / k + *std::max_element(w.begin(), w.end()));  // a share, give or take one bin
    }
  }
}
