// SPDX-License-Identifier: MIT
// The HDF5 layer: write/read round trips, clear errors for bad files and types, and SHA-256 test vectors.
#include <catch2/catch.hpp>

#include "file_bytes.hpp"
#include "temp_dir.hpp"

#include <cstdint>
#include <filesystem>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "fitlib/io/hdf5.hpp"
#include "fitlib/io/sha256.hpp"

using namespace fitlib;
using namespace fitlib::io;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

using test::TempDir;

std::string example(const std::string& name) { return std::string(FITLIB_TEST_DATA_DIR) + "/rabbit/" + name; }

}  // namespace

TEST_CASE("io: HDF5 write/read round trip of every writer function", "[io][hdf5]") {
  TempDir dir;
  const std::string path = dir / "round_trip.h5";
  std::vector<double> cube(24);
  for (std::size_t i = 0; i < cube.size(); ++i) cube[i] = 0.5 * static_cast<double>(i) - 3.25;
  std::vector<double> big(300 * 250);  // 600 kB: chunked and gzip-compressed
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<double>(i % 977) * 1e-3;
  const std::vector<std::int64_t> ints{-3, 0, 7, std::int64_t{1} << 40, -1, 2};
  const std::vector<std::string> strings{"sig", "bkg_2", "", "μ → ∞ (UTF-8)"};
  const std::vector<std::vector<std::int64_t>> ragged{{2}, {}, {8, 9, 0, 10}};
  {
    const auto f = hdf5::File::create(path);
    hdf5::write(f, "cube", cube, {2, 3, 4});
    hdf5::write(f, "big", big, {300, 250});
    hdf5::write(f, "ints", ints, {3, 2});
    hdf5::write(f, "vector", std::span<const double>(cube));
    hdf5::write(f, "empty", std::vector<double>{}, {0});
    hdf5::write(f, "empty2d", std::vector<double>{}, {0, 5});
    hdf5::write(f, "scalar", std::vector<double>{42.5}, {});
    const auto g = hdf5::create_group(f, "results/fit");  // intermediate groups are created
    const auto ds = hdf5::write(g, "x", std::span<const double>(cube.data(), 4), {4});
    hdf5::write_attribute(ds, "unit", std::string("GeV"));
    hdf5::write_strings(f, "names", strings);
    hdf5::write_strings(f, "no_names", {});
    hdf5::write_ragged(f, "ragged", ragged);
    hdf5::write_attribute(f, "version", std::int64_t{3});
    hdf5::write_attribute(f, "count", 17);  // any integer type
    hdf5::write_attribute(f, "edm", 1.5e-9);
    hdf5::write_attribute(f, "tool", "fitlib");
    hdf5::write_attribute(g, "dense_shape", std::vector<std::int64_t>{70, 3});
    hdf5::write_attribute(g, "weights", std::vector<double>{0.5, 2.0});
    hdf5::write_attribute(f, "edm", 2.5e-9);  // replaces
    f.flush();
  }
  const auto f = hdf5::File::open(path);
  const auto c = hdf5::read_doubles(f, "cube");
  CHECK(c.values == cube);
  CHECK(c.shape == std::vector<std::size_t>{2, 3, 4});
  const auto b = hdf5::read_doubles(f, "big");
  CHECK(b.values == big);
  CHECK(b.shape == std::vector<std::size_t>{300, 250});
  const auto bf = hdf5::filters(f, "big");
  REQUIRE(bf.size() == 1);
  CHECK(bf[0].id == 1);
  CHECK(bf[0].available);
  CHECK(hdf5::filters(f, "cube").empty());  // small arrays stay contiguous
  const auto i = hdf5::read_int64s(f, "ints");
  CHECK(i.values == ints);
  CHECK(i.shape == std::vector<std::size_t>{3, 2});
  CHECK(hdf5::read_doubles(f, "vector").shape == std::vector<std::size_t>{24});
  const auto e = hdf5::read_doubles(f, "empty");
  CHECK(e.values.empty());
  CHECK(e.shape == std::vector<std::size_t>{0});
  CHECK(hdf5::read_doubles(f, "empty2d").shape == std::vector<std::size_t>{0, 5});
  const auto s = hdf5::read_doubles(f, "scalar");
  CHECK(s.values == std::vector<double>{42.5});
  CHECK(s.shape.empty());
  CHECK(hdf5::read_doubles(f, "results/fit/x").values == std::vector<double>(cube.begin(), cube.begin() + 4));
  const auto g = hdf5::open(f, "results/fit");
  CHECK(g.path() == "/results/fit");
  CHECK(hdf5::read_doubles(g, "x").values.size() == 4);
  CHECK(hdf5::read_string_attribute(hdf5::open(g, "x"), "unit") == "GeV");
  CHECK(hdf5::read_strings(f, "names") == strings);
  CHECK(hdf5::read_strings(f, "no_names").empty());
  CHECK(hdf5::read_ragged(f, "ragged") == ragged);
  CHECK(hdf5::read_int64_attribute(f, "version") == std::vector<std::int64_t>{3});
  CHECK(hdf5::read_int64_attribute(f, "count") == std::vector<std::int64_t>{17});
  CHECK(hdf5::read_double_attribute(f, "edm") == 2.5e-9);
  CHECK(hdf5::read_double_attribute(f, "version") == 3.0);
  CHECK(hdf5::read_string_attribute(f, "tool") == "fitlib");
  CHECK(hdf5::read_int64_attribute(g, "dense_shape") == std::vector<std::int64_t>{70, 3});
  CHECK(hdf5::read_doubles(f, "ints", true).values == std::vector<double>(ints.begin(), ints.end()));

  CHECK(hdf5::exists(f, "cube"));
  CHECK(hdf5::exists(f, "results"));
  CHECK(hdf5::exists(f, "results/fit/x"));
  CHECK(hdf5::exists(f, "/results/fit"));
  CHECK_FALSE(hdf5::exists(f, "missing"));
  CHECK_FALSE(hdf5::exists(f, "missing/deeper/x"));
  CHECK_FALSE(hdf5::exists(f, "results/nothing"));
  CHECK(hdf5::attribute_exists(f, "edm"));
  CHECK(hdf5::attribute_exists(g, "weights"));
  CHECK_FALSE(hdf5::attribute_exists(f, "nope"));
  CHECK(hdf5::children(f) == std::vector<std::string>{"big", "cube", "empty", "empty2d", "ints", "names", "no_names", "ragged", "results",
                                                      "scalar", "vector"});
}

TEST_CASE("io: HDF5 reads apply original_shape and reject wrong types by name", "[io][hdf5]") {
  TempDir dir;
  const std::string path = dir / "types.h5";
  {
    const auto f = hdf5::File::create(path);
    const std::vector<double> v{1, 2, 3, 4, 5, 6};
    auto ds = hdf5::write(f, "flat", std::span<const double>(v));
    hdf5::write_attribute(ds, "original_shape", std::vector<std::int64_t>{2, 3});
    ds = hdf5::write(f, "bad_shape", std::span<const double>(v));
    hdf5::write_attribute(ds, "original_shape", std::vector<std::int64_t>{4, 4});
    ds = hdf5::write(f, "negative_shape", std::span<const double>(v));
    hdf5::write_attribute(ds, "original_shape", std::vector<std::int64_t>{-2, -3});
    ds = hdf5::write(f, "float_shape", std::span<const double>(v));
    hdf5::write_attribute(ds, "original_shape", std::vector<double>{2, 3});
    hdf5::write(f, "ints", std::vector<std::int64_t>{1, 2});
    hdf5::write_strings(f, "words", {"a", "b"});
    hdf5::create_group(f, "group");
  }
  const auto f = hdf5::File::open(path);
  const auto flat = hdf5::read_doubles(f, "flat");
  CHECK(flat.shape == std::vector<std::size_t>{2, 3});
  CHECK(flat.values == std::vector<double>{1, 2, 3, 4, 5, 6});
  REQUIRE_THROWS_AS(hdf5::read_doubles(f, "bad_shape"), file_error);
  REQUIRE_THROWS_WITH(hdf5::read_doubles(f, "bad_shape"), Contains("'bad_shape'") && Contains("original_shape [4, 4]") && Contains("stores 6"));
  REQUIRE_THROWS_WITH(hdf5::read_doubles(f, "negative_shape"), Contains("'negative_shape'") && Contains("negative"));
  REQUIRE_THROWS_WITH(hdf5::read_doubles(f, "float_shape"), Contains("original_shape") && Contains("expected integers"));
  REQUIRE_THROWS_WITH(hdf5::read_doubles(f, "words"), Contains("'words'") && Contains("string") && Contains("expected floating-point"));
  REQUIRE_THROWS_WITH(hdf5::read_doubles(f, "ints"), Contains("'ints'") && Contains("integer"));
  REQUIRE_THROWS_WITH(hdf5::read_int64s(f, "flat"), Contains("'flat'") && Contains("floating point") && Contains("expected integers"));
  REQUIRE_THROWS_WITH(hdf5::read_strings(f, "flat"), Contains("'flat'") && Contains("expected strings"));
  REQUIRE_THROWS_WITH(hdf5::read_ragged(f, "ints"), Contains("'ints'") && Contains("variable-length"));
  REQUIRE_THROWS_WITH(hdf5::read_doubles(f, "absent"), Contains("no dataset 'absent'") && Contains(path));
  REQUIRE_THROWS_WITH(hdf5::read_doubles(f, "group"), Contains("'group'") && Contains("is a group"));
  REQUIRE_THROWS_WITH(hdf5::read_double_attribute(f, "absent"), Contains("'absent'"));
  REQUIRE_THROWS_AS(hdf5::write(f, "x", std::vector<double>{1, 2, 3}, {2, 2}), usage_error);
  REQUIRE_THROWS_WITH(hdf5::write(f, "x", std::vector<double>{1.0}, {1}), Contains("'x'") && Contains("writing"));
}

TEST_CASE("io: HDF5 open explains missing, non-HDF5, empty and truncated files", "[io][hdf5]") {
  TempDir dir;
  REQUIRE_THROWS_AS(hdf5::File::open(dir / "nope.hdf5"), file_error);
  REQUIRE_THROWS_WITH(hdf5::File::open(dir / "nope.hdf5"), Contains("nope.hdf5") && Contains("does not exist"));
  REQUIRE_THROWS_WITH(hdf5::File::open(dir.path.string()), Contains("is a directory"));
  const std::string text = dir / "notes.txt";
  test::write_bytes(text, std::string_view("not an HDF5 file at all, just some text\n"));
  REQUIRE_THROWS_WITH(hdf5::File::open(text), Contains("notes.txt") && Contains("not an HDF5 file"));
  test::write_bytes(dir / "empty.h5", std::string_view());
  REQUIRE_THROWS_WITH(hdf5::File::open(dir / "empty.h5"), Contains("empty"));
  const auto good = test::file_bytes(example("test_tensor.hdf5"));
  REQUIRE(good.size() > 10000);
  for (std::size_t n : {std::size_t{8}, std::size_t{600}, std::size_t{5000}, good.size() / 2, good.size() - 1}) {
    INFO("first " << n << " bytes");
    test::write_bytes(dir / "cut.h5", std::span(good).first(n));
    REQUIRE_THROWS_AS(hdf5::File::open(dir / "cut.h5"), file_error);
  }
  test::write_bytes(dir / "cut.h5", std::span(good).first(good.size() - 1));
  REQUIRE_THROWS_WITH(hdf5::File::open(dir / "cut.h5"), Contains("cut.h5") && Contains("truncated"));
  REQUIRE_THROWS_WITH(hdf5::File::create(dir / "no/such/dir/x.h5"), Contains("x.h5") && Contains("cannot create"));
}

TEST_CASE("io: HDF5 file images open without touching the disk", "[io][hdf5]") {
  const auto good = test::file_bytes(example("test_tensor.hdf5"));
  const auto f = hdf5::File::open_image(std::as_bytes(std::span(good)), "in-memory tensor");
  CHECK(f.file_name() == "in-memory tensor");
  CHECK(hdf5::read_strings(f, "hprocs") == std::vector<std::string>{"sig", "bkg", "bkg_2"});
  const auto g = hdf5::File::open_image(std::as_bytes(std::span(good)), "in-memory tensor");  // the same name twice is fine
  CHECK(hdf5::read_doubles(g, "hnorm").shape == std::vector<std::size_t>{70, 3});
  REQUIRE_THROWS_AS(hdf5::File::open_image(std::as_bytes(std::span(good.data(), 1000)), "cut"), file_error);
  REQUIRE_THROWS_AS(hdf5::File::open_image({}, "nothing"), file_error);
}

TEST_CASE("io: HDF5 reads stop at the read limit instead of allocating", "[io][hdf5]") {
  const auto f = hdf5::File::open(example("test_tensor.hdf5"), hdf5::Access::read_only, {.max_read_bytes = 1000});
  CHECK(hdf5::read_doubles(f, "hdata_obs").values.size() == 60);  // 480 bytes
  REQUIRE_THROWS_WITH(hdf5::read_doubles(f, "hlogk"), Contains("'hlogk'") && Contains("read limit"));
}

TEST_CASE("io: SHA-256 matches the FIPS 180-4 test vectors", "[io][sha256]") {
  // Both compression functions: the CPU's SHA extensions (where it has them) and the portable code.
  const bool cpu_extensions = GENERATE(true, false);
  CAPTURE(cpu_extensions);
  const auto hex = [&](std::string_view s) {
    Sha256 h(cpu_extensions);
    h.update(s);
    return h.hex_digest();
  };
  CHECK(hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") == "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  CHECK(hex("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu") ==
        "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
  // One million 'a', fed in uneven pieces (exercises the block buffering and runs of whole blocks).
  Sha256 h(cpu_extensions);
  const std::string piece(997, 'a');
  std::size_t left = 1000000;
  while (left > 0) {
    const std::size_t n = std::min(left, piece.size());
    h.update(piece.data(), n);
    left -= n;
  }
  CHECK(h.hex_digest() == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  // Every message length around the block and padding boundaries, against the portable code.
  std::string bytes(300, '\0');
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 131 + 7);
  for (std::size_t len = 0; len <= bytes.size(); ++len) {
    Sha256 portable(false);
    portable.update(bytes.data(), len);
    REQUIRE(hex(std::string_view(bytes.data(), len)) == portable.hex_digest());
  }

  TempDir dir;
  const std::string path = dir / "abc.txt";
  test::write_bytes(path, std::string_view("abc"));
  CHECK(sha256_file(path) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(sha256_file(example("test_tensor.hdf5")) == "57b302ecc851e008454873be053f59c08e6a316b2f066c9d93282272c3eb0a48");
  REQUIRE_THROWS_AS(sha256_file(dir / "missing"), file_error);
}
