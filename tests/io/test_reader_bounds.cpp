// SPDX-License-Identifier: MIT
// What reading a rabbit tensor may cost: every allocation bounded by what the file stores (FileOptions::
// max_compression_ratio), crafted files that declare far more than they store refused by name, and seeded byte
// mutations of the example tensors read within a memory and time bound proportional to the file's size.
#include <catch2/catch.hpp>

#include "bounded_run.hpp"
#include "file_bytes.hpp"
#include "temp_dir.hpp"

#include <hdf5.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "fitlib/io/hdf5.hpp"
#include "fitlib/io/rabbit.hpp"

using Catch::Matchers::Contains;

namespace reader_bounds {

namespace fs = std::filesystem;
namespace hdf5 = fitlib::io::hdf5;
using fitlib::test::RunOutcome;
using fitlib::test::RunResult;
using fitlib::test::TempDir;

std::string data_file(const std::string& name) { return std::string(FITLIB_TEST_DATA_DIR) + "/rabbit/" + name; }

/// A writable copy of `source` at `target`.
std::string copy_of(const std::string& source, const std::string& target) {
  fs::copy_file(source, target, fs::copy_options::overwrite_existing);
  fs::permissions(target, fs::perms::owner_read | fs::perms::owner_write, fs::perm_options::add);
  return target;
}

/// How a crafted dataset is stored.
struct Craft {
  std::vector<hsize_t> dims{};    ///< the declared extent
  std::vector<hsize_t> chunk{};   ///< chunk dimensions; empty: contiguous, allocated late (so never, unwritten)
  hsize_t written = 0;            ///< leading elements written (1.0 each); 0: nothing stored
  bool strings = false;           ///< variable-length strings instead of doubles (then nothing is written)
  bool resizable = false;         ///< unlimited maximal dimensions (chunks may exceed the extent)
};

/// Replaces (or creates) the dataset `name` in the file at `path` by one that declares `c.dims` and stores only what
/// `c` says: the HDF5 C API, since fitlib's writer always writes what it declares.
void craft(const std::string& path, const std::string& name, const Craft& c) {
  const hid_t f = fs::exists(path) ? H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT) : H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  REQUIRE(f >= 0);
  if (H5Lexists(f, name.c_str(), H5P_DEFAULT) > 0) REQUIRE(H5Ldelete(f, name.c_str(), H5P_DEFAULT) >= 0);
  const int rank = static_cast<int>(c.dims.size());
  std::vector<hsize_t> maxdims(c.dims.size(), c.resizable ? H5S_UNLIMITED : 0);
  if (!c.resizable) maxdims = c.dims;
  const hid_t space = H5Screate_simple(rank, c.dims.data(), maxdims.data());
  const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  if (c.chunk.empty()) {
    H5Pset_layout(dcpl, H5D_CONTIGUOUS);
    H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_LATE);
  } else {
    H5Pset_chunk(dcpl, rank, c.chunk.data());
  }
  hid_t type = H5Tcopy(H5T_IEEE_F64LE);
  if (c.strings) {
    H5Tclose(type);
    type = H5Tcopy(H5T_C_S1);
    H5Tset_size(type, H5T_VARIABLE);
  }
  const hid_t ds = H5Dcreate2(f, name.c_str(), type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  REQUIRE(ds >= 0);
  if (c.written > 0) {
    const std::vector<double> ones(static_cast<std::size_t>(c.written), 1.0);
    const hsize_t start = 0, count = c.written;
    const hid_t file_space = H5Dget_space(ds);
    H5Sselect_hyperslab(file_space, H5S_SELECT_SET, &start, nullptr, &count, nullptr);
    const hid_t mem_space = H5Screate_simple(1, &count, nullptr);
    REQUIRE(H5Dwrite(ds, H5T_NATIVE_DOUBLE, mem_space, file_space, H5P_DEFAULT, ones.data()) >= 0);
    H5Sclose(mem_space);
    H5Sclose(file_space);
  }
  H5Dclose(ds);
  H5Tclose(type);
  H5Pclose(dcpl);
  H5Sclose(space);
  H5Fclose(f);
}

/// Sets the int64 attribute `attr` of the object `object` in the file at `path`.
void set_shape_attribute(const std::string& path, const std::string& object, const std::string& attr, const std::vector<std::int64_t>& values) {
  const auto f = hdf5::File::open(path, hdf5::Access::read_write);
  hdf5::write_attribute(hdf5::open(f, object), attr, std::span<const std::int64_t>(values));
}

/// read_rabbit(path) in a forked child, killed past 1 GiB of growth or 60 s (the unbounded reader took 16.6 GB, 40 s).
RunResult bounded_read(const std::string& path, hdf5::FileOptions fo = {}) {
  return fitlib::test::run_bounded([&] { (void)fitlib::io::read_rabbit(path, {}, fo); }, std::size_t{1} << 30, 60.0);
}

/// A read limit (FileOptions::max_read_bytes) far above any machine's memory, so that what refuses a crafted file is
/// the compression-ratio bound, whatever the memory of the machine that runs the test.
constexpr hdf5::FileOptions no_read_limit{.max_read_bytes = std::size_t{1} << 50};

/// The bound on a read of a file of `size` bytes: a fixed base (HDF5's caches and metadata, the chunk buffers of
/// unstored_chunk_bytes, the code paged in) plus a multiple of the size; doubled under AddressSanitizer.
std::size_t memory_bound(std::size_t size) {
  const std::size_t bound = (std::size_t{48} << 20) + 64 * size;
  return fitlib::test::under_asan() ? 2 * bound + (std::size_t{64} << 20) : bound;
}
double time_bound(std::size_t size) { return (fitlib::test::under_asan() ? 5.0 : 1.0) * (2.0 + static_cast<double>(size) / 1e6); }

std::string describe(const RunResult& r) {
  return std::string(fitlib::test::outcome_name(r.outcome)) + " after " + std::to_string(r.seconds) + " s, peak growth " +
         std::to_string(r.peak_growth >> 10) + " KiB" + (r.signal ? ", signal " + std::to_string(r.signal) : std::string()) +
         (r.message.empty() ? std::string() : ": " + r.message);
}

}  // namespace reader_bounds

#if defined(FITLIB_BOUNDED_RUN)

TEST_CASE("io: datasets that declare far more than they store are refused by name, quickly and without the memory", "[io][hdf5][bounds]") {
  using namespace reader_bounds;
  const TempDir dir;
  const hdf5::ErrorSilencer quiet;

  SECTION("hdata_obs declares 16 GiB in chunks of which one is stored") {
    const std::string path = copy_of(data_file("test_tensor.hdf5"), dir / "huge_data.hdf5");
    craft(path, "hdata_obs", {.dims = {hsize_t{1} << 31}, .chunk = {hsize_t{1} << 16}, .written = hsize_t{1} << 16});
    const RunResult r = bounded_read(path, no_read_limit);
    INFO(describe(r));
    REQUIRE(r.outcome == RunOutcome::fitlib_error);
    CHECK_THAT(r.message, Contains("dataset 'hdata_obs'") && Contains("2147483648 elements") && Contains("17179869184 bytes") &&
                              Contains("occupies 524288 bytes") && Contains("FileOptions::max_compression_ratio"));
    CHECK(r.peak_growth < memory_bound(fs::file_size(path)));
    CHECK(r.seconds < time_bound(fs::file_size(path)));
  }

  SECTION("hlogk declares 8 GiB of contiguous storage that was never allocated") {
    const std::string path = copy_of(data_file("test_tensor.hdf5"), dir / "huge_logk.hdf5");
    craft(path, "hlogk", {.dims = {hsize_t{1} << 30}});
    const RunResult r = bounded_read(path, no_read_limit);
    INFO(describe(r));
    REQUIRE(r.outcome == RunOutcome::fitlib_error);
    CHECK_THAT(r.message, Contains("dataset 'hlogk'") && Contains("8589934592 bytes") && Contains("occupies 0 bytes"));
    CHECK(r.peak_growth < memory_bound(fs::file_size(path)));
  }

  SECTION("hsysts declares 2^28 strings and stores none") {
    const std::string path = copy_of(data_file("test_tensor_sparse.hdf5"), dir / "huge_names.hdf5");
    craft(path, "hsysts", {.dims = {hsize_t{1} << 28}, .chunk = {hsize_t{1} << 12}, .strings = true});
    const RunResult r = bounded_read(path, no_read_limit);
    INFO(describe(r));
    REQUIRE(r.outcome == RunOutcome::fitlib_error);
    CHECK_THAT(r.message, Contains("dataset 'hsysts'") && Contains("268435456 elements") && Contains("occupies 0 bytes"));
    CHECK(r.peak_growth < memory_bound(fs::file_size(path)));
  }

  SECTION("a chunk far larger than what the dataset stores") {
    const std::string path = dir / "big_chunk.hdf5";
    craft(path, "x", {.dims = {10}, .chunk = {hsize_t{1} << 22}, .resizable = true});  // 32 MiB chunks, nothing stored
    const auto f = hdf5::File::open(path, hdf5::Access::read_only, no_read_limit);
    REQUIRE_THROWS_WITH(hdf5::read_doubles(f, "x"), Contains("dataset 'x'") && Contains("chunks of 33554432 bytes") && Contains("occupies 0 bytes"));
  }

  SECTION("a sparse tensor's dense shape is metadata: a huge one allocates nothing and is refused against the stored arrays") {
    const std::string norm = copy_of(data_file("test_tensor_sparse.hdf5"), dir / "huge_bins.hdf5");
    set_shape_attribute(norm, "hnorm_sparse", "dense_shape", {1000000000000, 3});
    RunResult r = bounded_read(norm, no_read_limit);
    INFO(describe(r));
    REQUIRE(r.outcome == RunOutcome::fitlib_error);
    CHECK_THAT(r.message, Contains("hsumw2") && Contains("1000000000000"));
    CHECK(r.peak_growth < memory_bound(fs::file_size(norm)));

    const std::string logk = copy_of(data_file("test_tensor_sparse.hdf5"), dir / "huge_columns.hdf5");
    set_shape_attribute(logk, "hlogk_sparse", "dense_shape", {130, 1000000000000});
    r = bounded_read(logk, no_read_limit);
    INFO(describe(r));
    REQUIRE(r.outcome == RunOutcome::fitlib_error);
    CHECK_THAT(r.message, Contains("hlogk_sparse") && Contains("1000000000000"));
    CHECK(r.peak_growth < memory_bound(fs::file_size(logk)));
  }
}

TEST_CASE("io: FileOptions::max_compression_ratio bounds a read and can be raised for a file that is really this compressible", "[io][hdf5][bounds]") {
  using namespace reader_bounds;
  const TempDir dir;
  const hdf5::ErrorSilencer quiet;
  // 8 MiB declared, one chunk of 2 KiB stored: a ratio of 4096, above the default 2048.
  const std::string path = dir / "sparse_chunks.hdf5";
  craft(path, "x", {.dims = {hsize_t{1} << 20}, .chunk = {256}, .written = 256});
  {
    const auto f = hdf5::File::open(path);
    REQUIRE_THROWS_WITH(hdf5::read_doubles(f, "x"), Contains("dataset 'x'") && Contains("8388608 bytes") && Contains("occupies 2048 bytes") &&
                                                        Contains("FileOptions::max_compression_ratio (2048) times what it stores"));
    // Unbounded ratios (a user switching the bound off) format without overflow.
    const auto unbounded = hdf5::File::open(path, hdf5::Access::read_only, {.max_compression_ratio = std::numeric_limits<double>::infinity()});
    CHECK(hdf5::read_doubles(unbounded, "x").values.size() == std::size_t{1} << 20);
    REQUIRE_THROWS_WITH(hdf5::RowReader<double>(f, "x"), Contains("dataset 'x'"));  // a reader of part checks the whole
  }
  const auto f = hdf5::File::open(path, hdf5::Access::read_only, {.max_compression_ratio = 8192});
  const auto a = hdf5::read_doubles(f, "x");
  REQUIRE(a.values.size() == std::size_t{1} << 20);
  CHECK(a.values[255] == 1.0);
  CHECK(a.values[256] == 0.0);
  CHECK(a.values.back() == 0.0);
  // The example tensors, whose most compressible dataset (hdata_cov_inv) stores 43 times less than it declares.
  for (const char* name : {"test_tensor.hdf5", "test_tensor_sparse.hdf5", "test_tensor_symmetric.hdf5", "test_tensor_normal.hdf5"})
    CHECK_NOTHROW(fitlib::io::read_rabbit(data_file(name), {}, {.max_compression_ratio = 64}));
  REQUIRE_THROWS_AS(hdf5::File::open(path, hdf5::Access::read_only, {.max_compression_ratio = 0.5}), std::invalid_argument);
}

TEST_CASE("io: a dataset that stores nothing, as rabbit's writer leaves an all-zero one, reads within a multiple of the file", "[io][hdf5][bounds]") {
  using namespace reader_bounds;
  const TempDir dir;
  const hdf5::ErrorSilencer quiet;
  // rabbit's writeFlatInChunks skips all-zero chunks: zero observed counts of 16384 bins store nothing (128 KiB
  // declared, beyond the free 64 KiB), which no ratio to the stored bytes allows.
  const std::string path = dir / "zero_data.hdf5";
  craft(path, "hdata_obs", {.dims = {16384}, .chunk = {4096}, .written = 0});
  const auto f = hdf5::File::open(path);
  const auto a = hdf5::read_doubles(f, "hdata_obs");
  REQUIRE(a.values.size() == 16384);
  CHECK(a.values.front() == 0.0);
  CHECK(a.values.back() == 0.0);
}

TEST_CASE("io: read_rabbit stays within a memory and time bound proportional to the file on seeded byte mutations", "[io][rabbit][bounds]") {
  using namespace reader_bounds;
  const TempDir dir;
  // Mutations on which the reader once used unbounded memory or time (tests/data/rabbit/mutated/README.md).
  REQUIRE(fs::is_directory(data_file("mutated")));
  for (const auto& entry : fs::directory_iterator(data_file("mutated"))) {
    if (entry.path().extension() != ".hdf5") continue;
    const std::size_t size = fs::file_size(entry.path());
    const RunResult r = bounded_read(entry.path().string());
    INFO(entry.path().filename().string() << " (" << size << " bytes): " << describe(r));
    CHECK(r.outcome == RunOutcome::fitlib_error);
    CHECK(r.peak_growth < memory_bound(size));
    CHECK(r.seconds < time_bound(size));
  }
  // 200 seeded mutations of 1–4 bytes of the example tensors, read at the tensors' own compression ratio (64, above
  // their 43) so that the bound is tight: the reader may allocate at most 64 times a dataset's stored bytes.
  // Not under AddressSanitizer: two of them reach memory errors inside libhdf5 1.10 itself, past fitlib's checks
  // (a use-after-free in H5Aexists' attribute-message walk, a 127 TiB malloc in H5Oopen's cache), which ASan's
  // interceptors report from the forked child; the release build reads them as errors or data. Found by `make
  // sanitize`; fitlib's own pre-checks (io/hdf5/integrity.hpp) do not cover those object-header fields yet.
  if (fitlib::test::under_asan()) {
    WARN("seeded mutations skipped under AddressSanitizer: libhdf5 1.10's own memory errors on two of them");
    return;
  }
  std::size_t worst_growth = 0;
  double worst_seconds = 0;
  for (const char* name : {"test_tensor.hdf5", "test_tensor_sparse.hdf5", "test_tensor_symmetric.hdf5", "test_tensor_normal.hdf5"}) {
    const std::vector<char> good = fitlib::test::file_bytes(data_file(name));
    REQUIRE(good.size() > 20000);
    for (std::uint64_t seed = 1; seed <= 50; ++seed) {
      const std::string path = dir / "mutated.hdf5";
      fitlib::test::write_bytes(path, fitlib::test::mutate(good, seed, 1 + static_cast<int>(seed % 4)));
      const RunResult r = bounded_read(path, {.max_compression_ratio = 64});
      INFO(name << ", mutate(bytes, seed " << seed << ", " << 1 + seed % 4 << " bytes): " << describe(r));
      CHECK((r.outcome == RunOutcome::returned || r.outcome == RunOutcome::fitlib_error));
      CHECK(r.peak_growth < memory_bound(good.size()));
      CHECK(r.seconds < time_bound(good.size()));
      worst_growth = std::max(worst_growth, r.peak_growth);
      worst_seconds = std::max(worst_seconds, r.seconds);
    }
  }
  INFO("worst peak growth " << (worst_growth >> 10) << " KiB, worst time " << worst_seconds << " s");
  SUCCEED();
}

#else

TEST_CASE("io: reader resource bounds (Linux only)", "[io][bounds]") { WARN("skipped: run_bounded needs fork, /proc and wait4 (Linux)"); }

#endif
