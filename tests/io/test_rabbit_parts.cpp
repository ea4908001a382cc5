// SPDX-License-Identifier: MIT
// Reading a rabbit tensor in parts, one per MPI rank: rabbit_partition, RabbitReadOptions::bins and the hyperslab
// reads under them (hdf5::RowReader), each checked against the whole file read at once.
#include <catch2/catch.hpp>

#include "random_model.hpp"
#include "temp_dir.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "fitlib/device/partition.hpp"
#include "fitlib/io/rabbit.hpp"
#include "fitlib/io/rabbit_writer.hpp"
#include "fitlib/likelihood/likelihood.hpp"

using namespace fitlib;
using namespace fitlib::io;
using Catch::Matchers::Contains;

namespace {

using test::TempDir;

std::string example(const std::string& name) { return std::string(FITLIB_TEST_DATA_DIR) + "/rabbit/" + name; }
const std::string dense_file = example("test_tensor.hdf5");               // dense, asymmetric: B = 60, Bf = 70
const std::string sparse_file = example("test_tensor_sparse.hdf5");       // sparse, asymmetric
const std::string symmetric_file = example("test_tensor_symmetric.hdf5");  // dense, symmetric

/// Replaces a numeric dataset the way rabbit writes it: flat, with an original_shape attribute.
template <class T>
void put_flat(const hdf5::Location& loc, const std::string& name, const std::vector<T>& values, const std::vector<std::size_t>& shape) {
  const auto ds = hdf5::write(loc, name, std::span<const T>(values));
  hdf5::write_attribute(ds, "original_shape", std::vector<std::int64_t>(shape.begin(), shape.end()));
}

/// A random model (tests/common/random_model.hpp) that write_rabbit accepts: constraint centres at 0.
Model writable_random_model(const test::RandomModelSpec& spec) {
  Model m = test::random_model(spec);
  m.theta0.assign(m.theta0.size(), 0.0);
  return m;
}

/// Drops (zeroes) logk entries of a dense model, keeping each with a probability that falls from 0.95 in the
/// first bins to 0.15 in the last, so that the work per bin and hence the split vary; then makes it sparse.
void thin_and_make_sparse(Model& m, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> unif(0.0, 1.0);
  const index_t bf = m.nbins_full(), row = m.nprocs() * m.ncoef();
  for (index_t b = 0; b < bf; ++b) {
    const double keep = 0.95 - 0.8 * static_cast<double>(b) / static_cast<double>(bf);
    for (index_t k = 0; k < row; ++k)
      if (unif(rng) > keep) m.dense()->logk[static_cast<std::size_t>(b * row + k)] = 0.0;
  }
  m.make_sparse();
}

/// A part must be the whole model with only bins `r`'s systematic-tensor rows: everything else equal, the
/// dense rows of those bins (or, sparse, every cell, with rows for the cells of those bins only) bit for bit.
void check_part(const Model& full, const Model& part, BinRange r) {
  REQUIRE(part.held());
  CHECK(*part.held() == r);
  CHECK(part.held_bins() == r);
  REQUIRE_NOTHROW(part.validate());

  CHECK(part.parameter_names() == full.parameter_names());
  REQUIRE(part.channels.size() == full.channels.size());
  for (std::size_t c = 0; c < full.channels.size(); ++c) {
    CHECK(part.channels[c].name == full.channels[c].name);
    CHECK(part.channels[c].nbins == full.channels[c].nbins);
    CHECK(part.channels[c].masked == full.channels[c].masked);
  }
  CHECK(part.symmetric == full.symmetric);
  CHECK(part.systematic_type == full.systematic_type);
  CHECK(part.nominal_yields() == full.nominal_yields());
  CHECK(part.data == full.data);
  CHECK(part.data_variance == full.data_variance);
  CHECK(part.data_covariance_inverse == full.data_covariance_inverse);
  CHECK(part.sumw2 == full.sumw2);
  CHECK(part.sumw == full.sumw);
  CHECK(part.theta0 == full.theta0);
  CHECK(part.constraint_weights == full.constraint_weights);
  CHECK(part.poi_default == full.poi_default);
  CHECK(part.nois == full.nois);
  REQUIRE(part.groups.size() == full.groups.size());
  for (std::size_t g = 0; g < full.groups.size(); ++g) {
    CHECK(part.groups[g].name == full.groups[g].name);
    CHECK(part.groups[g].members == full.groups[g].members);
  }
  CHECK(part.external_terms.size() == full.external_terms.size());

  const auto row = static_cast<std::size_t>(full.nprocs() * full.ncoef());  // logk entries per bin, dense
  if (!full.sparse()) {
    REQUIRE_FALSE(part.sparse());
    CHECK(part.dense()->nominal == full.dense()->nominal);
    const auto first = full.dense()->logk.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(r.begin) * row);
    const auto last = full.dense()->logk.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(r.end) * row);
    CHECK(part.dense()->logk == std::vector<double>(first, last));
    return;
  }
  REQUIRE(part.sparse());
  CHECK_FALSE(part.dense());
  const SparseTemplates& t = *full.sparse();
  SparseTemplates expected = t;  // every cell; the entries of the cells of bins r only
  const index_t lo = t.row_begin[static_cast<std::size_t>(t.bin_begin[static_cast<std::size_t>(r.begin)])];
  const index_t hi = t.row_begin[static_cast<std::size_t>(t.bin_begin[static_cast<std::size_t>(r.end)])];
  for (index_t& x : expected.row_begin) x = std::clamp(x, lo, hi) - lo;
  expected.col.assign(t.col.begin() + lo, t.col.begin() + hi);
  expected.val.assign(t.val.begin() + lo, t.val.begin() + hi);
  expected.held = r;
  CHECK(part.sparse()->nnz() == hi - lo);
  CHECK(*part.sparse() == expected);
}

/// What a shard computes at two points and two directions.
struct Partials {
  std::vector<double> nll, grad, hvp;
};

template <class Storage>
Partials shard_partials(const std::shared_ptr<const Model>& model, BinRange r, const LikelihoodOptions& opts) {
  Shard<cpu::Serial, Storage> shard(model, r, {}, opts);
  const index_t np = model->nparams(), npoi = model->npoi(), nx = 2;
  std::vector<double> x(static_cast<std::size_t>(np * nx)), v(x.size());
  for (index_t j = 0; j < nx; ++j)
    for (index_t i = 0; i < np; ++i) {
      const auto k = static_cast<std::size_t>(i + j * np);
      x[k] = i < npoi ? 1.0 + 0.1 * static_cast<double>(j) : 0.4 * std::sin(1.0 + static_cast<double>(i) + 3.0 * static_cast<double>(j));
      v[k] = std::cos(0.7 * static_cast<double>(i) + static_cast<double>(j));
    }
  Partials p{std::vector<double>(static_cast<std::size_t>(nx)), std::vector<double>(x.size()), std::vector<double>(x.size())};
  PartialRequest rq;
  rq.x = {x.data(), np, nx};
  rq.v = {v.data(), np, nx};
  rq.nll = p.nll.data();
  rq.grad = {p.grad.data(), np, nx};
  rq.hvp = {p.hvp.data(), np, nx};
  shard.partials(rq);
  return p;
}

/// The fit-level check: a shard over bins r of the part evaluates exactly (bitwise) as one over the same bins of
/// the whole model, with both storages where the model is dense (Model::make_sparse stores a copy's held rows
/// sparsely), with bin-by-bin statistics per bin and per cell.
void check_same_partials(const std::shared_ptr<const Model>& full, const std::shared_ptr<const Model>& part, BinRange r) {
  LikelihoodOptions per_cell;
  per_cell.bin_by_bin.mode = BinByBinMode::full;
  for (const LikelihoodOptions& opts : {LikelihoodOptions{}, per_cell}) {
    const auto check = [&](const Partials& a, const Partials& b) {
      for (double f : a.nll) CHECK(std::isfinite(f));
      CHECK(a.nll == b.nll);
      CHECK(a.grad == b.grad);
      CHECK(a.hvp == b.hvp);
    };
    const auto sparse = [](const std::shared_ptr<const Model>& m) {
      if (m->sparse()) return m;
      auto s = std::make_shared<Model>(*m);
      s->make_sparse();
      return std::shared_ptr<const Model>(std::move(s));
    };
    check(shard_partials<storage::Sparse>(sparse(full), r, opts), shard_partials<storage::Sparse>(sparse(part), r, opts));
    if (!full->sparse()) check(shard_partials<storage::Dense>(full, r, opts), shard_partials<storage::Dense>(part, r, opts));
  }
}

/// For each count: rabbit_partition of the file equals partition_bins of the whole model, and each range reads
/// as a valid part that agrees with the whole model (check_part, check_same_partials).
void check_parts(const std::string& path, const std::vector<index_t>& counts) {
  INFO("tensor " << path);
  const RabbitTensor whole = read_rabbit(path);
  const auto full = std::make_shared<const Model>(whole.model);
  const auto file = hdf5::File::open(path);
  for (index_t k : counts) {
    INFO(k << " parts");
    const std::vector<BinRange> ranges = rabbit_partition(file, k);
    REQUIRE(ranges == partition_bins(*full, k));
    CHECK(rabbit_partition(path, k) == ranges);
    for (const BinRange& r : ranges) {
      INFO("bins [" << r.begin << ", " << r.end << ")");
      const RabbitTensor t = read_rabbit(file, {.bins = r});
      CHECK(t.model.templates.index() == whole.model.templates.index());
      CHECK(t.pseudodata == whole.pseudodata);
      check_part(*full, t.model, r);
      check_same_partials(full, std::make_shared<const Model>(t.model), r);
    }
  }
  // Every bin, read as a part: the whole model, marked as held whole.
  const BinRange all{0, full->nbins_full()};
  const RabbitTensor t = read_rabbit(path, {.bins = all});
  CHECK(t.sha256 == whole.sha256);
  check_part(*full, t.model, all);
}

}  // namespace

TEST_CASE("io: rabbit_partition and RabbitReadOptions::bins on rabbit's example tensors", "[io][rabbit][parts]") {
  SECTION("dense asymmetric") { check_parts(dense_file, {1, 2, 3, 60}); }
  SECTION("dense symmetric") { check_parts(symmetric_file, {1, 2, 3, 60}); }
  SECTION("sparse asymmetric") { check_parts(sparse_file, {1, 2, 3, 60}); }
  SECTION("sparse symmetric") {
    TempDir dir;
    Model m = read_rabbit(symmetric_file).model;
    m.make_sparse();
    const std::string path = dir / "sparse_symmetric.hdf5";
    write_rabbit(path, m, {.asymmetric_layout = false});
    const RabbitTensor t = read_rabbit(path);
    REQUIRE(t.model.sparse());
    REQUIRE(t.model.symmetric);
    check_parts(path, {1, 2, 3, 60});
  }
}

TEST_CASE("io: parts of written tensors stored in several chunks, with uneven work per bin", "[io][rabbit][parts]") {
  TempDir dir;
  SECTION("dense, asymmetric, 2 chunks of hlogk") {
    Model m = writable_random_model({.bins = 400, .masked_bins = 30, .procs = 4, .nsyst = 40, .unconstrained = 2, .template_stats = true, .seed = 7});
    const std::string path = dir / "dense.hdf5";
    write_rabbit(path, m);
    REQUIRE(hdf5::RowReader<double>(hdf5::File::open(path), "hlogk").shape() == std::vector<std::size_t>{430, 4, 2, 40});
    check_parts(path, {1, 2, 3, 7});
  }
  SECTION("sparse, thinned towards the last bins") {
    Model m = writable_random_model({.bins = 1200, .masked_bins = 40, .procs = 3, .nsyst = 50, .unconstrained = 2, .template_stats = true, .seed = 8});
    thin_and_make_sparse(m, 9);
    REQUIRE(m.sparse()->nnz() > 131072);  // more than one chunk of the writer's (1 MiB of int64 pairs or doubles)
    const std::string path = dir / "sparse.hdf5";
    write_rabbit(path, m);
    check_parts(path, {1, 2, 3, 7});
    // Uneven work: the split is not the even split of the bins.
    CHECK(partition_bins(read_rabbit(path).model, 3) != fitlib::detail::split_work(std::vector<index_t>(1200, 1), 0, 1240, 3));
  }
  SECTION("sparse with explicit zeros in hlogk_sparse/values") {
    // A stored zero means an absent entry (from_coo drops it); rabbit_partition reads the values too, so its
    // work, and its split, are still those of the model.
    Model m = writable_random_model({.bins = 300, .masked_bins = 10, .procs = 3, .nsyst = 20, .seed = 10});
    m.make_sparse();
    const std::string path = dir / "zeros.hdf5";
    write_rabbit(path, m);
    {
      const auto f = hdf5::File::open(path, hdf5::Access::read_write);
      const auto cells = hdf5::read_int64s(f, "hlogk_sparse/indices").values;
      auto values = hdf5::read_doubles(f, "hlogk_sparse/values");
      const SparseTemplates& t = *m.sparse();
      const auto zero_from = static_cast<std::size_t>(t.bin_begin[150]);  // the cells of bins 150 and on
      for (std::size_t k = 0; k < values.values.size(); ++k)
        if (static_cast<std::size_t>(cells[2 * k]) >= zero_from && k % 4 != 0) values.values[k] = 0.0;
      put_flat(f, "hlogk_sparse/values", values.values, values.shape);
    }
    const RabbitTensor t = read_rabbit(path);
    CHECK(t.model.sparse()->nnz() < m.sparse()->nnz());
    // Counting the stored entries would move the split: the zeros sit in the second half of the bins.
    std::vector<index_t> stored(300, 0);
    for (index_t b = 0; b < 300; ++b)
      for (index_t i = m.sparse()->bin_begin[static_cast<std::size_t>(b)]; i < m.sparse()->bin_begin[static_cast<std::size_t>(b + 1)]; ++i)
        stored[static_cast<std::size_t>(b)] += m.sparse()->row_begin[static_cast<std::size_t>(i + 1)] - m.sparse()->row_begin[static_cast<std::size_t>(i)] + 1;
    CHECK(fitlib::detail::split_work(stored, 0, 310, 3) != partition_bins(t.model, 3));
    check_parts(path, {1, 2, 3, 5});
  }
}

TEST_CASE("io: rabbit_partition streams a sparse tensor of more than one read's entries", "[io][rabbit][parts]") {
  TempDir dir;
  Model m = writable_random_model({.bins = 15000, .masked_bins = 500, .procs = 4, .nsyst = 19, .asymmetric = false, .seed = 11});
  m.make_sparse();
  REQUIRE(static_cast<std::size_t>(m.sparse()->nnz()) > io::detail::rabbit::Reader::stream_rows);
  const std::string path = dir / "large.hdf5";
  write_rabbit(path, m, {.asymmetric_layout = false});
  check_parts(path, {1, 4});
}

TEST_CASE("io: RabbitReadOptions::bins and rabbit_partition reject what does not fit the tensor", "[io][rabbit][parts]") {
  for (const std::string* path : {&dense_file, &sparse_file}) {
    INFO(*path);
    for (const BinRange r : {BinRange{-1, 3}, BinRange{5, 5}, BinRange{6, 2}, BinRange{60, 71}, BinRange{70, 70}}) {
      INFO("bins [" << r.begin << ", " << r.end << ")");
      REQUIRE_THROWS_AS(read_rabbit(*path, {.bins = r}), usage_error);
      REQUIRE_THROWS_WITH(read_rabbit(*path, {.bins = r}), Contains("RabbitReadOptions::bins") && Contains("70 bins") && Contains("[0, 70)"));
    }
    for (const index_t k : {index_t{0}, index_t{-2}, index_t{61}}) {
      INFO(k << " parts");
      REQUIRE_THROWS_AS(rabbit_partition(*path, k), usage_error);
      REQUIRE_THROWS_WITH(rabbit_partition(*path, k), Contains("60 unmasked bins") && Contains("between 1 and 60"));
    }
  }
}

TEST_CASE("io: part reads and rabbit_partition reject unsorted sparse tensors", "[io][rabbit][parts]") {
  TempDir dir;
  const auto edited = [&](const std::string& name, const std::function<void(std::vector<std::int64_t>&)>& edit) {
    const std::string path = dir / name;
    std::filesystem::copy_file(sparse_file, path);
    std::filesystem::permissions(path, std::filesystem::perms::owner_write, std::filesystem::perm_options::add);
    const auto f = hdf5::File::open(path, hdf5::Access::read_write);
    auto a = hdf5::read_int64s(f, "hlogk_sparse/indices");
    edit(a.values);
    put_flat(f, "hlogk_sparse/indices", a.values, a.shape);
    return path;
  };
  SECTION("two entries swapped: the part that reads them, and the partition") {
    const std::string path = edited("swapped.hdf5", [](auto& v) {
      std::swap(v[0], v[10]);
      std::swap(v[1], v[11]);
    });
    REQUIRE_THROWS_AS(read_rabbit(path, {.bins = BinRange{0, 35}}), file_error);
    REQUIRE_THROWS_WITH(read_rabbit(path, {.bins = BinRange{0, 35}}), Contains("hlogk_sparse/indices") && Contains("sorted"));
    REQUIRE_THROWS_WITH(rabbit_partition(path, 2), Contains("hlogk_sparse/indices") && Contains("sorted") && Contains(path));
  }
  SECTION("cells in reverse order: the partition (a part's binary search cannot see it)") {
    const std::string path = edited("reversed.hdf5", [](auto& v) {
      for (std::size_t a = 0, b = v.size() / 2 - 1; a < b; ++a, --b) {
        std::swap(v[2 * a], v[2 * b]);
        std::swap(v[2 * a + 1], v[2 * b + 1]);
      }
    });
    REQUIRE_THROWS_AS(rabbit_partition(path, 3), file_error);
    REQUIRE_THROWS_WITH(rabbit_partition(path, 3), Contains("hlogk_sparse/indices") && Contains("sorted"));
  }
  SECTION("a cell outside hnorm_sparse") {
    const std::string path = edited("outside.hdf5", [](auto& v) { v[2 * 461] = 130; });
    REQUIRE_THROWS_WITH(rabbit_partition(path, 3), Contains("hlogk_sparse/indices") && Contains("130"));
    // It belongs to no bin, so no part reads it.
    for (const BinRange& r : rabbit_partition(sparse_file, 3)) CHECK_NOTHROW(read_rabbit(path, {.bins = r}));
  }
}

TEST_CASE("io: a part read checks the rows it reads, naming their place in the file", "[io][rabbit][parts]") {
  TempDir dir;
  const auto edited = [&](const std::string& source, const std::string& name, const std::string& dataset,
                          const std::function<void(std::vector<double>&)>& edit) {
    const std::string path = dir / name;
    std::filesystem::copy_file(source, path);
    std::filesystem::permissions(path, std::filesystem::perms::owner_write, std::filesystem::perm_options::add);
    const auto f = hdf5::File::open(path, hdf5::Access::read_write);
    auto a = hdf5::read_doubles(f, dataset);
    edit(a.values);
    put_flat(f, dataset, a.values, a.shape);
    return path;
  };
  SECTION("dense: a non-finite entry, and a variation of a zero yield") {
    const std::string inf = edited(dense_file, "inf.hdf5", "hlogk", [](auto& v) { v[((7 * 3 + 2) * 2 + 1) * 12 + 3] = -HUGE_VAL; });
    REQUIRE_THROWS_AS(read_rabbit(inf, {.bins = BinRange{5, 9}}), file_error);
    REQUIRE_THROWS_WITH(read_rabbit(inf, {.bins = BinRange{5, 9}}),
                        Contains("'hlogk'") && Contains("-inf") && Contains("bin 7, process 'bkg_2', systematic 'bkg_norm' (H, half-difference)") &&
                            Contains("flat index " + std::to_string(((7 * 3 + 2) * 2 + 1) * 12 + 3)));
    CHECK_NOTHROW(read_rabbit(inf, {.bins = BinRange{8, 70}}));
    const std::string orphan = edited(dense_file, "orphan.hdf5", "hlogk", [](auto& v) { v[0] = 0.1; });  // bin 0, 'sig': hnorm is 0
    REQUIRE_THROWS_WITH(read_rabbit(orphan, {.bins = BinRange{0, 2}}), Contains("'hlogk'") && Contains("hnorm is 0") && Contains("bin 0"));
    CHECK_NOTHROW(read_rabbit(orphan, {.bins = BinRange{1, 2}}));
  }
  SECTION("sparse: a non-finite value") {
    const auto f = hdf5::File::open(sparse_file);
    const auto cells = hdf5::read_int64s(f, "hlogk_sparse/indices").values;
    const auto bins = hdf5::read_int64s(f, "hnorm_sparse/indices").values;
    const auto bin = static_cast<index_t>(bins[static_cast<std::size_t>(2 * cells[2 * 300])]);  // the bin of hlogk_sparse entry 300
    const std::string nan = edited(sparse_file, "nan.hdf5", "hlogk_sparse/values", [](auto& v) { v[300] = std::nan(""); });
    REQUIRE_THROWS_AS(read_rabbit(nan, {.bins = BinRange{bin, bin + 1}}), file_error);
    REQUIRE_THROWS_WITH(read_rabbit(nan, {.bins = BinRange{bin, bin + 1}}),
                        Contains("'hlogk_sparse/values'") && Contains("nan") && Contains("[300]"));
    CHECK_NOTHROW(read_rabbit(nan, {.bins = BinRange{bin + 1, 70}}));
    CHECK_NOTHROW(read_rabbit(nan, {.bins = BinRange{0, bin}}));
  }
}

TEST_CASE("hdf5: RowReader reads ranges of rows with hyperslabs, whatever the stored shape", "[io][hdf5][parts]") {
  TempDir dir;
  const std::string path = dir / "rows.h5";
  std::vector<double> small(120);
  for (std::size_t i = 0; i < small.size(); ++i) small[i] = 0.5 + static_cast<double>(i);
  std::vector<double> big(20000 * 8);
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = std::sin(static_cast<double>(i));
  std::vector<std::int64_t> pairs(2 * 50);
  for (std::size_t i = 0; i < pairs.size(); ++i) pairs[i] = static_cast<std::int64_t>(i / 2 * 3 + i % 2);
  {
    const auto f = hdf5::File::create(path);
    hdf5::write(f, "nd", std::span<const double>(small), {5, 4, 6});  // stored in its logical shape
    put_flat(f, "flat", small, {5, 4, 6});                               // rabbit's flat layout
    const auto odd = hdf5::write(f, "reshaped", std::span<const double>(small), {8, 15});  // rows of 24 straddle stored rows of 15
    hdf5::write_attribute(odd, "original_shape", std::vector<std::int64_t>{5, 4, 6});
    const auto deep = hdf5::write(f, "deep", std::span<const double>(small), {2, 3, 4, 5});
    hdf5::write_attribute(deep, "original_shape", std::vector<std::int64_t>{10, 12});
    put_flat(f, "big", big, {20000, 8});  // chunked and gzip-compressed: 1.25 MiB
    put_flat(f, "pairs", pairs, {50, 2});
    hdf5::write(f, "scalar", std::span<const double>(small.data(), 1), {});
  }
  const auto f = hdf5::File::open(path);
  REQUIRE_FALSE(hdf5::filters(f, "big").empty());

  for (const char* name : {"nd", "flat", "reshaped", "deep"}) {
    INFO("dataset " << name);
    const hdf5::RowReader<double> rows(f, name);
    const auto whole = hdf5::read_doubles(f, name);
    CHECK(rows.shape() == whole.shape);
    const std::size_t n = rows.rows(), per = rows.row_size();
    CHECK(n * per == small.size());
    for (std::size_t r0 = 0; r0 <= n; ++r0)
      for (std::size_t m = 0; r0 + m <= n; ++m) {
        INFO("rows [" << r0 << ", " << r0 + m << ")");
        const auto a = rows.read(r0, m);
        std::vector<std::size_t> shape = whole.shape;
        shape[0] = m;
        CHECK(a.shape == shape);
        CHECK(a.values == std::vector<double>(small.begin() + static_cast<std::ptrdiff_t>(r0 * per),
                                              small.begin() + static_cast<std::ptrdiff_t>((r0 + m) * per)));
      }
  }
  {
    const hdf5::RowReader<double> rows(f, "big");
    for (const auto& [r0, m] : {std::pair<std::size_t, std::size_t>{0, 20000}, {1, 1}, {16383, 2}, {12345, 6789}, {19999, 1}}) {
      INFO("rows [" << r0 << ", " << r0 + m << ")");
      CHECK(rows.read(r0, m).values ==
            std::vector<double>(big.begin() + static_cast<std::ptrdiff_t>(8 * r0), big.begin() + static_cast<std::ptrdiff_t>(8 * (r0 + m))));
    }
  }
  CHECK(hdf5::RowReader<double>(f, "flat").read(2, 2).values == std::vector<double>(small.begin() + 48, small.begin() + 96));
  const auto p = hdf5::RowReader<std::int64_t>(f, "pairs").read(10, 3);
  CHECK(p.shape == std::vector<std::size_t>{3, 2});
  CHECK(p.values == std::vector<std::int64_t>{30, 31, 33, 34, 36, 37});
  const hdf5::RowReader<std::int64_t> pr(f, "pairs");
  CHECK(pr.column(0, 48, 2) == std::vector<std::int64_t>{144, 147});
  CHECK(pr.column(1, 0, 1) == std::vector<std::int64_t>{1});

  // Errors name the dataset and the rows.
  REQUIRE_THROWS_AS(hdf5::RowReader<double>(f, "nd").read(4, 2), file_error);
  REQUIRE_THROWS_WITH(hdf5::RowReader<double>(f, "nd").read(4, 2), Contains("rows [4, 6)") && Contains("'nd'") && Contains("5 rows"));
  REQUIRE_THROWS_WITH(hdf5::RowReader<double>(f, "scalar"), Contains("'scalar'") && Contains("scalar"));
  REQUIRE_THROWS_WITH(hdf5::RowReader<double>(f, "nd").column(0, 0, 1), Contains("'nd'") && Contains("2-D"));
  REQUIRE_THROWS_WITH(hdf5::RowReader<double>(f, "pairs"), Contains("'pairs'") && Contains("expected floating-point"));
  REQUIRE_THROWS_WITH(hdf5::RowReader<std::int64_t>(f, "nd"), Contains("'nd'") && Contains("expected integers"));
  REQUIRE_THROWS_WITH(hdf5::RowReader<double>(f, "missing"), Contains("'missing'"));
  // The read limit applies to the rows read, not to the dataset.
  const auto limited = hdf5::File::open(path, hdf5::Access::read_only, {.max_read_bytes = 4096});
  REQUIRE_THROWS_WITH(hdf5::read_doubles(limited, "big"), Contains("'big'") && Contains("read limit"));
  const hdf5::RowReader<double> rows(limited, "big");
  CHECK(rows.read(100, 64).values.size() == 512);
  REQUIRE_THROWS_AS(rows.read(100, 65), file_error);
  REQUIRE_THROWS_WITH(rows.read(100, 65), Contains("rows [100, 165)") && Contains("'big'") && Contains("read limit"));
}
