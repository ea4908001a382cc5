// SPDX-License-Identifier: MIT
// SparseTemplates: dense and COO construction agree, round trips are exact, and every malformed input is named.
#include <catch2/catch.hpp>

#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <fitlib/model/sparse_templates.hpp>

using namespace fitlib;
using Catch::Matchers::Contains;

namespace {

const double not_a_number = std::numeric_limits<double>::quiet_NaN();
const double infinity = std::numeric_limits<double>::infinity();

// Four bins, two processes, an asymmetric tensor of two systematics (ncoef = 4). Bin 1 lacks process 0,
// bin 2 lacks process 1 and has a negative yield, bin 3 is empty, cell (0, 1) has no variation at all.
constexpr index_t hand_bins = 4, hand_procs = 2, hand_coef = 4;
const std::vector<double> hand_nominal{10, 5, 0, 7, -2, 0, 0, 0};
std::vector<double> hand_logk() {
  std::vector<double> k(static_cast<std::size_t>(hand_bins * hand_procs * hand_coef), 0.0);
  const auto at = [&](index_t b, index_t p, index_t c) -> double& { return k[static_cast<std::size_t>((b * hand_procs + p) * hand_coef + c)]; };
  at(0, 0, 0) = 0.1;
  at(0, 0, 3) = -0.2;
  at(1, 1, 1) = 0.3;
  at(1, 1, 2) = 0.05;
  at(2, 0, 0) = 0.4;
  return k;
}

// The same tensor as rabbit's sparse datasets (§1.3).
struct Coo {
  index_t nbins = hand_bins, nprocs = hand_procs, ncoef = hand_coef;
  std::vector<std::int64_t> norm_indices{0, 0, 0, 1, 1, 1, 2, 0};
  std::vector<double> norm_values{10, 5, 7, -2};
  std::vector<std::int64_t> logk_indices{0, 0, 0, 3, 2, 1, 2, 2, 3, 0};
  std::vector<double> logk_values{0.1, -0.2, 0.3, 0.05, 0.4};
  SparseTemplates build() const {
    return SparseTemplates::from_coo(nbins, nprocs, ncoef, norm_indices, norm_values, logk_indices, logk_values);
  }
};

struct Dense {
  index_t nbins, nprocs, ncoef;
  std::vector<double> nominal, logk;
};

// Random yields with absent cells, negative yields, empty bins and sparse variations.
Dense random_dense(index_t nbins, index_t nprocs, index_t nsyst, bool asymmetric, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> unif(0.0, 1.0);
  std::normal_distribution<double> gauss(0.0, 1.0);
  Dense d{nbins, nprocs, asymmetric ? 2 * nsyst : nsyst, {}, {}};
  d.nominal.assign(static_cast<std::size_t>(nbins * nprocs), 0.0);
  d.logk.assign(static_cast<std::size_t>(nbins * nprocs * d.ncoef), 0.0);
  for (index_t b = 0; b < nbins; ++b) {
    const bool empty_bin = b % 11 == 5;
    for (index_t p = 0; p < nprocs; ++p) {
      const double u = unif(rng);
      if (empty_bin || u < 0.3) continue;
      const std::size_t cell = static_cast<std::size_t>(b * nprocs + p);
      d.nominal[cell] = u < 0.38 ? -3.0 * unif(rng) - 0.1 : 1.0 + 50.0 * unif(rng);
      for (index_t c = 0; c < d.ncoef; ++c)
        if (unif(rng) < 0.5) d.logk[cell * static_cast<std::size_t>(d.ncoef) + static_cast<std::size_t>(c)] = 0.1 * gauss(rng) + 1e-3;
    }
  }
  return d;
}

// rabbit's writer applied to a dense tensor, written independently of SparseTemplates.
Coo to_coo(const Dense& d) {
  Coo c;
  c.nbins = d.nbins;
  c.nprocs = d.nprocs;
  c.ncoef = d.ncoef;
  c.norm_indices.clear();
  c.norm_values.clear();
  c.logk_indices.clear();
  c.logk_values.clear();
  std::int64_t pos = 0;
  for (index_t b = 0; b < d.nbins; ++b)
    for (index_t p = 0; p < d.nprocs; ++p) {
      const std::size_t cell = static_cast<std::size_t>(b * d.nprocs + p);
      if (d.nominal[cell] == 0) continue;
      c.norm_indices.insert(c.norm_indices.end(), {b, p});
      c.norm_values.push_back(d.nominal[cell]);
      for (index_t k = 0; k < d.ncoef; ++k)
        if (const double v = d.logk[cell * static_cast<std::size_t>(d.ncoef) + static_cast<std::size_t>(k)]; v != 0) {
          c.logk_indices.insert(c.logk_indices.end(), {pos, k});
          c.logk_values.push_back(v);
        }
      ++pos;
    }
  return c;
}

index_t count_nonzero(const std::vector<double>& v) {
  index_t n = 0;
  for (double x : v) n += x != 0 ? 1 : 0;
  return n;
}

}  // namespace

TEST_CASE("SparseTemplates from hand-built COO arrays equals the dense tensor's", "[model][sparse]") {
  const auto logk = hand_logk();
  const SparseTemplates d = SparseTemplates::from_dense(hand_bins, hand_procs, hand_coef, hand_nominal, logk);
  const SparseTemplates c = Coo{}.build();
  REQUIRE_NOTHROW(d.validate());
  REQUIRE_NOTHROW(c.validate());
  CHECK(d.bin_begin == std::vector<index_t>{0, 2, 3, 4, 4});
  CHECK(d.cell_process == std::vector<index_t>{0, 1, 1, 0});
  CHECK(d.cell_nominal == std::vector<double>{10, 5, 7, -2});
  CHECK(d.row_begin == std::vector<index_t>{0, 2, 2, 4, 5});
  CHECK(d.col == std::vector<index_t>{0, 3, 1, 2, 0});
  CHECK(d.val == std::vector<double>{0.1, -0.2, 0.3, 0.05, 0.4});
  CHECK(d.ncells() == 4);
  CHECK(d.nnz() == 5);
  CHECK(d.bytes() == 19 * sizeof(index_t) + 9 * sizeof(double));
  CHECK(c == d);
  CHECK(c.dense_nominal() == hand_nominal);
  CHECK(c.dense_logk() == logk);
}

TEST_CASE("SparseTemplates drops explicit zeros in COO arrays, as an absent entry", "[model][sparse]") {
  Coo c;
  // An explicit zero yield at (1, 0) between entries 1 and 2 shifts the later cell positions by one.
  c.norm_indices = {0, 0, 0, 1, 1, 0, 1, 1, 2, 0};
  c.norm_values = {10, 5, 0, 7, -2};
  c.logk_indices = {0, 0, 0, 1, 0, 3, 2, 0, 3, 1, 3, 2, 4, 0};
  c.logk_values = {0.1, 0.0, -0.2, 0.0, 0.3, 0.05, 0.4};
  const SparseTemplates t = c.build();
  REQUIRE_NOTHROW(t.validate());
  CHECK(t == Coo{}.build());
}

TEST_CASE("SparseTemplates round trip dense → sparse → dense is exact", "[model][sparse]") {
  const bool asymmetric = GENERATE(false, true);
  const std::uint64_t seed = GENERATE(1u, 2u, 3u);
  INFO("asymmetric " << asymmetric << ", seed " << seed);
  const Dense d = random_dense(53, 5, 7, asymmetric, seed);
  const SparseTemplates t = SparseTemplates::from_dense(d.nbins, d.nprocs, d.ncoef, d.nominal, d.logk);
  REQUIRE_NOTHROW(t.validate());
  // The generator must actually have produced every feature the test is about.
  REQUIRE(t.ncells() < d.nbins * d.nprocs);
  REQUIRE(t.nnz() < t.ncells() * d.ncoef);
  REQUIRE(count_nonzero(d.nominal) == t.ncells());
  REQUIRE(count_nonzero(d.logk) == t.nnz());
  CHECK(t.bin_begin[6] == t.bin_begin[5]);  // bin 5 is empty
  CHECK(t.dense_nominal() == d.nominal);
  CHECK(t.dense_logk() == d.logk);
  const Coo c = to_coo(d);
  CHECK(c.build() == t);
  CHECK(t.bytes() == (t.bin_begin.size() + 2 * static_cast<std::size_t>(t.ncells()) + 1 + static_cast<std::size_t>(t.nnz())) * sizeof(index_t) +
                         static_cast<std::size_t>(t.ncells() + t.nnz()) * sizeof(double));
}

TEST_CASE("SparseTemplates::from_dense of some bins' rows keeps those rows and the held bins", "[model][sparse]") {
  const Dense d = random_dense(53, 5, 7, true, 4);
  const SparseTemplates whole = SparseTemplates::from_dense(d.nbins, d.nprocs, d.ncoef, d.nominal, d.logk);
  const BinRange held{11, 30};
  const auto row = static_cast<std::size_t>(d.nprocs * d.ncoef);
  const std::vector<double> rows(d.logk.begin() + static_cast<std::ptrdiff_t>(held.begin * row),
                                 d.logk.begin() + static_cast<std::ptrdiff_t>(held.end * row));
  const SparseTemplates part = SparseTemplates::from_dense(d.nbins, d.nprocs, d.ncoef, d.nominal, rows, held);
  REQUIRE_NOTHROW(part.validate());
  REQUIRE(part.held == held);
  CHECK(part.cell_nominal == whole.cell_nominal);  // every cell
  CHECK(part.cell_process == whole.cell_process);
  const auto first = [&](const SparseTemplates& t, index_t b) { return t.row_begin[static_cast<std::size_t>(t.bin_begin[static_cast<std::size_t>(b)])]; };
  CHECK(first(part, held.begin) == 0);  // no rows before the held bins
  CHECK(part.nnz() == first(whole, held.end) - first(whole, held.begin));
  CHECK(part.val == std::vector<double>(whole.val.begin() + first(whole, held.begin), whole.val.begin() + first(whole, held.end)));
  REQUIRE_THROWS_WITH(SparseTemplates::from_dense(d.nbins, d.nprocs, d.ncoef, d.nominal, d.logk, held), Contains("dense logk has") && Contains("held bins"));
  REQUIRE_THROWS_WITH(SparseTemplates::from_dense(d.nbins, d.nprocs, d.ncoef, d.nominal, rows, BinRange{40, 60}), Contains("outside the tensor's 53 bins"));
  SparseTemplates stray = whole;  // rows outside the held bins
  stray.held = held;
  REQUIRE_THROWS_WITH(stray.validate(), Contains("outside held [11, 30)") && Contains("must be empty"));
}

TEST_CASE("SparseTemplates of an empty tensor", "[model][sparse]") {
  const SparseTemplates t = SparseTemplates::from_coo(3, 2, 0, {}, {}, {}, {});
  REQUIRE_NOTHROW(t.validate());
  CHECK(t.bin_begin == std::vector<index_t>{0, 0, 0, 0});
  CHECK(t.row_begin == std::vector<index_t>{0});
  CHECK(t.dense_nominal() == std::vector<double>(6, 0.0));
  CHECK(t.dense_logk().empty());
  CHECK(t == SparseTemplates::from_dense(3, 2, 0, std::vector<double>(6, 0.0), {}));
}

TEST_CASE("SparseTemplates::from_coo rejects malformed datasets, naming them", "[model][sparse]") {
  REQUIRE_NOTHROW(Coo{}.build());  // every case below differs from this valid input by its one change
  struct Case {
    const char* name;
    std::function<void(Coo&)> change;
    const char* dataset;
    const char* phrase;
  };
  const std::vector<Case> cases{
      {"norm: processes out of order", [](Coo& c) { c.norm_indices = {0, 1, 0, 0, 1, 1, 2, 0}; }, "hnorm_sparse/indices", "sorted row-major"},
      {"norm: bins out of order", [](Coo& c) { c.norm_indices = {0, 0, 1, 1, 0, 1, 2, 0}; }, "hnorm_sparse/indices", "sorted row-major"},
      {"norm: duplicate cell", [](Coo& c) { c.norm_indices[2 * 1 + 1] = 0; }, "hnorm_sparse/indices", "duplicates"},
      {"norm: bin past the end", [](Coo& c) { c.norm_indices[2 * 3] = 4; }, "hnorm_sparse/indices", "outside the dense shape [4, 2]"},
      {"norm: process past the end", [](Coo& c) { c.norm_indices[2 * 3 + 1] = 2; }, "hnorm_sparse/indices", "outside the dense shape"},
      {"norm: negative bin", [](Coo& c) { c.norm_indices[0] = -1; }, "hnorm_sparse/indices", "(bin -1, process 0) is outside"},
      {"norm: negative process", [](Coo& c) { c.norm_indices[1] = -1; }, "hnorm_sparse/indices", "(bin 0, process -1) is outside"},
      {"norm: NaN yield", [](Coo& c) { c.norm_values[2] = not_a_number; }, "hnorm_sparse/values", "must be finite"},
      {"norm: infinite yield", [](Coo& c) { c.norm_values[0] = -infinity; }, "hnorm_sparse/values", "entry 0"},
      {"norm: odd index count", [](Coo& c) { c.norm_indices.pop_back(); }, "hnorm_sparse/indices", "[nnzN × 2]"},
      {"norm: more values than indices", [](Coo& c) { c.norm_values.push_back(1.0); }, "hnorm_sparse/values has 5 entries", "[nnzN × 2]"},
      {"logk: odd index count", [](Coo& c) { c.logk_indices.pop_back(); }, "hlogk_sparse/indices", "[nnzK × 2]"},
      {"logk: fewer values than indices", [](Coo& c) { c.logk_values.pop_back(); }, "hlogk_sparse/values has 4 entries", "[nnzK × 2]"},
      {"logk: coefficients out of order", [](Coo& c) { c.logk_indices = {0, 3, 0, 0, 2, 1, 2, 2, 3, 0}; }, "hlogk_sparse/indices", "sorted row-major"},
      {"logk: cells out of order", [](Coo& c) { c.logk_indices = {0, 0, 0, 3, 3, 0, 2, 1, 2, 2}; }, "hlogk_sparse/indices", "sorted row-major"},
      {"logk: duplicate entry", [](Coo& c) { c.logk_indices[2 * 3 + 1] = 1; }, "hlogk_sparse/indices", "duplicates"},
      {"logk: cell past nnzN", [](Coo& c) { c.logk_indices[2 * 4] = 4; }, "hlogk_sparse/indices", "hnorm_sparse has 4 entries"},
      {"logk: negative cell", [](Coo& c) { c.logk_indices[0] = -1; }, "hlogk_sparse/indices", "refers to hnorm_sparse entry -1"},
      {"logk: coefficient past ncoef", [](Coo& c) { c.logk_indices[2 * 4 + 1] = 4; }, "hlogk_sparse/indices", "outside the dense shape [4, 4]"},
      {"logk: negative coefficient", [](Coo& c) { c.logk_indices[1] = -1; }, "hlogk_sparse/indices", "coefficient -1) is outside"},
      {"logk: NaN value", [](Coo& c) { c.logk_values[3] = not_a_number; }, "hlogk_sparse/values", "must be finite"},
      {"logk: infinite value", [](Coo& c) { c.logk_values[4] = infinity; }, "hlogk_sparse/values", "entry 4"},
      {"logk: variation of a zero yield",
       [](Coo& c) {
         c.norm_values[1] = 0.0;
         c.logk_indices = {0, 0, 0, 3, 1, 2, 2, 1, 2, 2, 3, 0};
         c.logk_values = {0.1, -0.2, 0.7, 0.3, 0.05, 0.4};
       },
       "hlogk_sparse/values", "hnorm_sparse entry 1 (bin 0, process 1) has a zero nominal yield"},
      {"negative dense shape", [](Coo& c) { c.nbins = -1; }, "hnorm_sparse/hlogk_sparse", "negative extent"},
  };
  for (const auto& k : cases) {
    Coo c;
    k.change(c);
    INFO(k.name);
    REQUIRE_THROWS_AS(c.build(), model_error);
    REQUIRE_THROWS_WITH(c.build(), Contains(k.dataset) && Contains(k.phrase));
  }
}

TEST_CASE("SparseTemplates::from_dense rejects malformed arrays, naming them", "[model][sparse]") {
  const auto logk = hand_logk();
  const auto build = [](std::vector<double> n, std::vector<double> k) { return SparseTemplates::from_dense(hand_bins, hand_procs, hand_coef, n, k); };
  REQUIRE_NOTHROW(build(hand_nominal, logk));
  auto short_nominal = hand_nominal;
  short_nominal.pop_back();
  REQUIRE_THROWS_AS(build(short_nominal, logk), model_error);
  REQUIRE_THROWS_WITH(build(short_nominal, logk), Contains("dense nominal has 7 entries") && Contains("nbins_full × nprocs = 8"));
  auto long_logk = logk;
  long_logk.push_back(0.0);
  REQUIRE_THROWS_WITH(build(hand_nominal, long_logk), Contains("dense logk has 33 entries"));
  auto nan_nominal = hand_nominal;
  nan_nominal[3] = not_a_number;
  REQUIRE_THROWS_WITH(build(nan_nominal, logk), Contains("dense nominal (bin 1, process 1)") && Contains("finite"));
  auto inf_logk = logk;
  inf_logk[(2 * hand_procs + 1) * hand_coef + 2] = infinity;  // at a zero yield: non-finite is the first complaint
  REQUIRE_THROWS_WITH(build(hand_nominal, inf_logk), Contains("dense logk (bin 2, process 1) coefficient 2") && Contains("finite"));
  auto orphan = logk;
  orphan[(1 * hand_procs + 0) * hand_coef + 3] = 0.2;
  REQUIRE_THROWS_AS(build(hand_nominal, orphan), model_error);
  REQUIRE_THROWS_WITH(build(hand_nominal, orphan), Contains("dense logk (bin 1, process 0) coefficient 3") && Contains("nominal yield is zero"));
  REQUIRE_THROWS_WITH(SparseTemplates::from_dense(2, -4, 1, {}, {}), Contains("from_dense") && Contains("negative extent"));
}

TEST_CASE("SparseTemplates::validate names the broken array and entry", "[model][sparse]") {
  const SparseTemplates good = Coo{}.build();
  REQUIRE_NOTHROW(good.validate());
  struct Case {
    const char* name;
    std::function<void(SparseTemplates&)> change;
    const char* phrase;
  };
  const std::vector<Case> cases{
      {"bin_begin too short", [](SparseTemplates& t) { t.bin_begin.pop_back(); }, "SparseTemplates::bin_begin has 4 entries"},
      {"bin_begin not from 0", [](SparseTemplates& t) { t.bin_begin[0] = 1; }, "SparseTemplates::bin_begin[0] is 1"},
      {"bin_begin decreasing", [](SparseTemplates& t) { t.bin_begin[1] = 9; }, "SparseTemplates::bin_begin decreases at bin 1"},
      {"bin_begin wrong end", [](SparseTemplates& t) { t.bin_begin[4] = 5; }, "SparseTemplates::bin_begin[4] is 5"},
      {"cell_process length", [](SparseTemplates& t) { t.cell_process.pop_back(); }, "SparseTemplates::cell_process has 3 entries"},
      {"cell_process out of range", [](SparseTemplates& t) { t.cell_process[3] = 2; }, "SparseTemplates::cell_process[3] (bin 2) is 2, outside"},
      {"cell_process negative", [](SparseTemplates& t) { t.cell_process[2] = -1; }, "SparseTemplates::cell_process[2] (bin 1) is -1, outside"},
      {"cell_process not increasing", [](SparseTemplates& t) { t.cell_process[1] = 0; }, "SparseTemplates::cell_process[1] (bin 0) is 0, not after"},
      {"cell_nominal zero", [](SparseTemplates& t) { t.cell_nominal[2] = 0.0; }, "SparseTemplates::cell_nominal[2] (bin 1) is 0"},
      {"cell_nominal NaN", [](SparseTemplates& t) { t.cell_nominal[0] = not_a_number; }, "SparseTemplates::cell_nominal[0] (bin 0)"},
      {"row_begin length", [](SparseTemplates& t) { t.row_begin.push_back(5); }, "SparseTemplates::row_begin has 6 entries"},
      {"row_begin decreasing past the end", [](SparseTemplates& t) { t.row_begin[1] = 9; }, "SparseTemplates::row_begin decreases at cell 1"},
      {"row_begin wrong end", [](SparseTemplates& t) { t.row_begin[4] = 4; }, "SparseTemplates::row_begin[4] is 4"},
      {"col length", [](SparseTemplates& t) { t.col.pop_back(); }, "SparseTemplates::col has 4 entries"},
      {"col out of range", [](SparseTemplates& t) { t.col[4] = 4; }, "SparseTemplates::col[4] (cell 3) is 4, outside"},
      {"col not increasing", [](SparseTemplates& t) { t.col[3] = 1; }, "SparseTemplates::col[3] (cell 2) is 1, not after"},
      {"val zero", [](SparseTemplates& t) { t.val[1] = 0.0; }, "SparseTemplates::val[1] (cell 0) is 0"},
      {"val infinite", [](SparseTemplates& t) { t.val[0] = infinity; }, "SparseTemplates::val[0] (cell 0) is inf"},
      {"negative ncoef", [](SparseTemplates& t) { t.ncoef = -4; }, "negative extent"},
  };
  for (const auto& k : cases) {
    SparseTemplates t = good;
    k.change(t);
    INFO(k.name);
    REQUIRE_THROWS_AS(t.validate(), model_error);
    REQUIRE_THROWS_WITH(t.validate(), Contains(k.phrase));
  }
}
