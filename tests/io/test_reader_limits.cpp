// SPDX-License-Identifier: MIT
// What the readers and writers do at their limits: a plugin search path with a directory that does not exist,
// the filter-plugin advice only where a filter failed, the size of rabbit's `meta` pickle and the decoder's
// working memory, and integers beyond 2⁵³ in the results' options.
#include <catch2/catch.hpp>

#include "plugin_path.hpp"
#include "temp_dir.hpp"

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "fitlib/fit.hpp"
#include "fitlib/io/hdf5.hpp"
#include "fitlib/io/pickle.hpp"
#include "fitlib/io/rabbit.hpp"
#include "fitlib/io/results.hpp"

using namespace std::string_literals;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;
namespace hdf5 = fitlib::io::hdf5;
namespace pickle = fitlib::io::pickle;
using fitlib::SystematicType;
using fitlib::io::file_error;
using fitlib::io::read_rabbit;
using fitlib::io::RabbitReadOptions;
using fitlib::io::RabbitTensor;
using fitlib::test::RestorePluginPath;
using fitlib::test::TempDir;

namespace {

std::string data_file(const std::string& name) { return std::string(FITLIB_TEST_DATA_DIR) + "/" + name; }
const std::string blosc2_tensor = data_file("rabbit/test_tensor_blosc2.hdf5");
const std::string normal_tensor = data_file("rabbit/test_tensor_normal.hdf5");  // meta: systematic_type normal, asymmetric

/// Sets HDF5's plugin search path through HDF5's own API, entries unchecked, as HDF5_PLUGIN_PATH can give it.
void raw_plugin_path(const std::vector<std::string>& dirs) {
  unsigned n = 0;
  REQUIRE(H5PLsize(&n) >= 0);
  for (; n > 0; --n) REQUIRE(H5PLremove(0) >= 0);
  for (const auto& d : dirs) REQUIRE(H5PLappend(d.c_str()) >= 0);
}

/// A copy of `from` in `dir` whose meta/pickle_data holds `pickle` as the uint8 dataset rabbit (wums) writes.
std::string with_meta(const TempDir& dir, const std::string& from, const std::string& pickle) {
  const std::string path = dir / "meta.hdf5";
  fs::copy_file(from, path, fs::copy_options::overwrite_existing);
  const auto f = hdf5::File::open(path, hdf5::Access::read_write);
  hdf5::remove(f, "meta/pickle_data");
  const auto g = hdf5::open(f, "meta");
  const hsize_t n = pickle.size();
  const hid_t space = H5Screate_simple(1, &n, nullptr);
  REQUIRE(space >= 0);
  const hid_t ds = H5Dcreate2(g.id(), "pickle_data", H5T_STD_U8LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  REQUIRE(ds >= 0);
  CHECK(H5Dwrite(ds, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, pickle.data()) >= 0);
  H5Dclose(ds);
  H5Sclose(space);
  return path;
}

std::string as_string(const std::vector<std::uint8_t>& bytes) { return {bytes.begin(), bytes.end()}; }

/// rabbit's meta for the normal tensor plus a bytes value `blob` of `size` varied bytes.
std::string meta_with_blob(std::size_t size, std::string& blob) {
  blob.resize(size);
  std::uint32_t x = 12345;
  for (char& c : blob) {
    x = x * 1664525u + 1013904223u;
    c = static_cast<char>(x >> 24);
  }
  pickle::Value b;
  b.kind = pickle::Kind::bytes;
  b.text = blob;
  return as_string(pickle::encode(pickle::dict({{"systematic_type", pickle::string("normal")},
                                                {"symmetric_tensor", pickle::boolean(false)},
                                                {"blob", std::move(b)}})));
}

pickle::Value decode(const std::string& s, const pickle::Limits& limits = {}) {
  return pickle::decode(std::span(reinterpret_cast<const std::uint8_t*>(s.data()), s.size()), limits);
}

}  // namespace

// ---- 1. plugin search path

TEST_CASE("hdf5 plugins: a directory that does not exist does not end the search for the others", "[io][hdf5][blosc2][plugins]") {
  const RestorePluginPath restore;
  const std::string plugins = FITLIB_HDF5_PLUGIN_DIR;
  if (!fs::exists(fs::path(plugins) / "libh5blosc2.so")) {
    WARN("no Blosc2 HDF5 plugin at " << plugins << " (scripts/install-deps.sh installs it); skipping");
    return;
  }
  TempDir scratch;
  const std::string missing = scratch / "no_such_plugins";

  // As HDF5_PLUGIN_PATH can give it: HDF5 itself ends its search at the missing directory, so the Blosc2 plugin
  // right after it is not found. The error says so instead of listing that directory as searched.
  raw_plugin_path({missing, plugins});
  if (hdf5::filter_available(32026)) {  // not loadable from this path: registered earlier in this process
    WARN("the Blosc2 filter is already registered in this process; skipping the check of the missing-filter message");
  } else {
    try {
      (void)read_rabbit(blosc2_tensor);
      FAIL("HDF5 found the plugin after a missing directory");
    } catch (const file_error& e) {
      const std::string msg = e.what();
      CHECK_THAT(msg, Contains("32026") && Contains(missing + " (not a directory: HDF5 ends its search there") &&
                          Contains(plugins + " (not searched)"));
    }
  }

  // set_plugin_search_path leaves the missing directory out (and returns it); the search goes on to the plugin.
  CHECK(hdf5::set_plugin_search_path({missing, plugins}) == std::vector<std::string>{missing});
  CHECK(hdf5::plugin_search_path() == std::vector<std::string>{plugins});
  const RabbitTensor b = read_rabbit(blosc2_tensor);
  const RabbitTensor g = read_rabbit(data_file("rabbit/test_tensor_symmetric.hdf5"));  // the same tensor, gzip
  REQUIRE(b.model.dense() != nullptr);
  CHECK(b.model.dense()->nominal == g.model.dense()->nominal);
  CHECK(b.model.dense()->logk == g.model.dense()->logk);
}

TEST_CASE("hdf5 plugins: plugin_directories skips entries that are not directories, naming them and their source", "[io][hdf5][plugins]") {
  TempDir scratch;
  const std::string good = scratch.path.string();
  const std::string missing = scratch / "no_such_plugins";
  const std::string file = scratch / "a_file";
  std::ofstream(file) << "not a directory";

  std::ostringstream warn;
  // as fitlib-fit splits --hdf5PluginPath and FITLIB_HDF5_PLUGIN_PATH: ':'-separated, empty entries dropped
  CHECK(hdf5::plugin_directories(missing + "::" + good + ":" + file + ":", "FITLIB_HDF5_PLUGIN_PATH", warn) == std::vector<std::string>{good});
  const std::string said = warn.str();
  CHECK_THAT(said, Contains("warning: HDF5 plugin directory '" + missing + "' (from FITLIB_HDF5_PLUGIN_PATH)") &&
                       Contains("'" + file + "' (from FITLIB_HDF5_PLUGIN_PATH)") && Contains("still searched"));

  std::ostringstream quiet;
  CHECK(hdf5::plugin_directories(good, "--hdf5PluginPath", quiet) == std::vector<std::string>{good});
  CHECK(hdf5::plugin_directories("", "--hdf5PluginPath", quiet).empty());
  CHECK(quiet.str().empty());

  const RestorePluginPath restore;
  CHECK(hdf5::set_plugin_search_path({missing, good, file}) == std::vector<std::string>{missing, file});
  CHECK(hdf5::plugin_search_path() == std::vector<std::string>{good});
}

// ---- 2. the filter-plugin advice

TEST_CASE("rabbit meta: advice about filter plugins only where a filter is what failed", "[io][rabbit][pickle]") {
  TempDir dir;
  // A malformed pickle, read without any filter: the opcode and offset, and the option that settles it; no plugin.
  const std::string path = with_meta(dir, normal_tensor, "\x80\x05\x95\xff\xff\x00\x00\x00\x00\x00\x00}."s);
  try {
    (void)read_rabbit(path);
    FAIL("read a tensor whose meta is corrupt");
  } catch (const file_error& e) {
    const std::string msg = e.what();
    CHECK_THAT(msg, Contains("meta/pickle_data") && Contains("malformed pickle") && Contains("(opcode 0x95) at byte 2") &&
                        Contains("--systematicType log_normal|normal"));
    CHECK_THAT(msg, !Contains("plugin") && !Contains("Blosc") && !Contains("32001"));
  }

  // rabbit's own meta is Blosc-compressed (filter 32001): without the plugin the advice is the plugin.
  const RestorePluginPath restore;
  TempDir empty;
  (void)hdf5::set_plugin_search_path({empty.path.string()});
  if (hdf5::filter_available(32001)) {
    WARN("the Blosc filter is already registered in this process; skipping the missing-plugin half");
    return;
  }
  const std::string blosc_meta = data_file("rabbit/test_tensor.hdf5");
  try {
    (void)read_rabbit(blosc_meta);
    FAIL("read a Blosc-compressed meta without the Blosc plugin");
  } catch (const file_error& e) {
    CHECK_THAT(e.what(), Contains("meta/pickle_data") && Contains("32001") && Contains("--hdf5PluginPath") &&
                             Contains("make the group readable") && Contains("--systematicType log_normal|normal"));
  }
  const RabbitTensor t = read_rabbit(blosc_meta, {.systematic_type = SystematicType::log_normal});
  CHECK_FALSE(t.meta.has_value());
  CHECK_THAT(t.meta_skipped, Contains("32001"));
}

// ---- 3. the size of the meta pickle, and the decoder's working memory

TEST_CASE("rabbit meta: a pickle beyond RabbitReadOptions::max_meta_bytes is refused before it is read", "[io][rabbit][pickle]") {
  TempDir dir;
  // 1.1 MiB: two of the reader's bounded reads (2^20 elements each)
  std::string blob;
  const std::string meta = meta_with_blob((std::size_t{11} << 20) / 10, blob);
  const std::string path = with_meta(dir, normal_tensor, meta);
  const std::size_t limit = std::size_t{1} << 20;

  try {
    (void)read_rabbit(path, {.max_meta_bytes = limit});
    FAIL("read a meta pickle beyond the limit");
  } catch (const file_error& e) {
    const std::string msg = e.what();
    CHECK_THAT(msg, Contains("meta/pickle_data") && Contains("holds a pickle of " + std::to_string(meta.size()) + " bytes") &&
                        Contains("more than the limit of 1048576 bytes = 1 MiB (RabbitReadOptions::max_meta_bytes)") &&
                        Contains("--systematicType log_normal|normal"));
    CHECK_THAT(msg, !Contains("plugin"));
  }
  // With the systematic type given, the meta is skipped, saying why.
  const RabbitTensor skipped = read_rabbit(path, {.systematic_type = SystematicType::normal, .max_meta_bytes = limit});
  CHECK_FALSE(skipped.meta.has_value());
  CHECK_THAT(skipped.meta_skipped, Contains("RabbitReadOptions::max_meta_bytes"));
  CHECK(skipped.model.systematic_type == SystematicType::normal);

  // At the limit, and with the default (64 MiB), it is read whole, in order, across the bounded reads.
  CHECK(RabbitReadOptions{}.max_meta_bytes == std::size_t{64} << 20);
  for (const std::size_t max : {meta.size(), RabbitReadOptions{}.max_meta_bytes}) {
    const RabbitTensor t = read_rabbit(path, {.max_meta_bytes = max});
    REQUIRE(t.meta.has_value());
    CHECK(t.meta->systematic_type == SystematicType::normal);
    const pickle::Value* b = t.meta->pickle.find("blob");
    REQUIRE(b != nullptr);
    CHECK(b->kind == pickle::Kind::bytes);
    CHECK(b->text == blob);
  }
}

TEST_CASE("pickle: the decoder's working memory is bounded (Limits::max_nodes)", "[io][pickle]") {
  const auto fails = [](const std::string& s, std::size_t max_nodes) {
    INFO("stream of " << s.size() << " bytes, max_nodes " << max_nodes);
    pickle::Limits limits;
    limits.max_nodes = max_nodes;
    try {
      decode(s, limits);
      FAIL("decoded");
    } catch (const file_error& e) {
      CHECK_THAT(e.what(), Contains("more than " + std::to_string(max_nodes) + " values and stack entries at once (Limits::max_nodes)") &&
                               Contains("at byte"));
    }
  };
  // values pushed and popped: the tree is one None, but each is kept until STOP
  std::string popped;
  for (int k = 0; k < 3000; ++k) popped += "N0";
  popped += "N.";
  CHECK(decode(popped).kind == pickle::Kind::none);
  fails(popped, 1000);
  // one value referenced from the memo over and over: the stack grows, not the values
  std::string refs = "N\x94(";
  for (int k = 0; k < 3000; ++k) refs += "h\x00"s;
  refs += "l.";
  CHECK(decode(refs).items.size() == 3000);
  fails(refs, 1000);
  // marks alone
  fails(std::string(3000, '(') + "N.", 1000);
  CHECK(pickle::Limits{}.max_nodes == std::size_t{1} << 21);
}

// ---- 4. integers beyond 2⁵³ in the results' options

TEST_CASE("results: integers beyond 2^53 in the options are written as strings (the seed)", "[io][results]") {
  constexpr std::uint64_t max64 = std::numeric_limits<std::uint64_t>::max();
  constexpr std::uint64_t exact = std::uint64_t{1} << 53;
  fitlib::io::RunInfo run;
  run.input_path = "tensor.hdf5";
  run.options = {{"seed", max64},
                 {"small", 5},
                 {"edge", exact},
                 {"beyond", exact + 1},
                 {"negative", std::numeric_limits<std::int64_t>::min()},
                 {"nested", {{"list", {std::uint64_t{1}, exact + 2}}}},
                 {"ratio", 0.5}};
  fitlib::io::FitRecord rec;
  rec.name = "data";
  rec.result.names = {"p"};
  rec.result.x = {1.0};
  rec.result.x0 = {1.0};
  rec.result.uncertainties = {0.1};
  rec.result.gradient = {0.0};
  rec.result.frozen = {false};
  rec.result.covariance = {0.01};
  rec.result.status = fitlib::FitStatus::converged_edm;

  const auto check = [&](const nlohmann::json& o) {
    INFO(o.dump());
    CHECK(o["seed"] == "18446744073709551615");
    CHECK(o["beyond"] == std::to_string(exact + 1));
    CHECK(o["negative"] == "-9223372036854775808");
    CHECK(o["nested"]["list"][1] == std::to_string(exact + 2));
    CHECK(o["small"].is_number_integer());
    CHECK(o["small"] == 5);
    CHECK(o["edge"].is_number());  // 2⁵³ is exact as a double
    CHECK(o["nested"]["list"][0] == 1);
    CHECK(o["ratio"] == 0.5);
  };
  // the JSON summary, as text and read back
  check(nlohmann::json::parse(fitlib::io::results_json_text(run, {rec}))["options"]);
  CHECK_THAT(fitlib::io::results_json_text(run, {rec}), Contains("\"seed\": \"18446744073709551615\""));
  // the HDF5 root attribute `options`, the same JSON as text
  TempDir dir;
  const std::string path = dir / "fit.hdf5";
  fitlib::io::write_results(path, run, {rec});
  check(nlohmann::json::parse(hdf5::read_string_attribute(hdf5::File::open(path), "options")));
  // what the caller gave is unchanged
  CHECK(run.options["seed"] == max64);
}
