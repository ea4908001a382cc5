// SPDX-License-Identifier: MIT
// read_rabbit on rabbit's example tensors (dense, sparse, symmetric, Blosc2) and on a corpus of broken files.
#include <catch2/catch.hpp>

#include "file_bytes.hpp"
#include "model_checks.hpp"
#include "plugin_path.hpp"
#include "temp_dir.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "fitlib/io/rabbit.hpp"
#include "fitlib/likelihood/likelihood.hpp"

using namespace fitlib;
using namespace fitlib::io;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

using test::TempDir;

std::string example(const std::string& name) { return std::string(FITLIB_TEST_DATA_DIR) + "/rabbit/" + name; }
const std::string dense_file = example("test_tensor.hdf5");
const std::string sparse_file = example("test_tensor_sparse.hdf5");
const std::string symmetric_file = example("test_tensor_symmetric.hdf5");
const std::string blosc2_file = example("test_tensor_blosc2.hdf5");

/// Copies `source` to `target` and applies `mutate` to the copy, opened for writing.
std::string mutated(const std::string& source, const std::string& target, const std::function<void(const hdf5::File&)>& mutate) {
  fs::copy_file(source, target, fs::copy_options::overwrite_existing);
  fs::permissions(target, fs::perms::owner_read | fs::perms::owner_write, fs::perm_options::add);
  {
    const auto f = hdf5::File::open(target, hdf5::Access::read_write);
    mutate(f);
  }
  return target;
}

/// Replaces a numeric dataset the way rabbit writes it: flat, with an original_shape attribute.
void put_flat(const hdf5::Location& f, const std::string& name, const std::vector<double>& values, const std::vector<std::size_t>& shape) {
  const auto ds = hdf5::write(f, name, std::span<const double>(values));
  hdf5::write_attribute(ds, "original_shape", std::vector<std::int64_t>(shape.begin(), shape.end()));
}
void put_flat(const hdf5::Location& f, const std::string& name, const std::vector<std::int64_t>& values, const std::vector<std::size_t>& shape) {
  const auto ds = hdf5::write(f, name, std::span<const std::int64_t>(values));
  hdf5::write_attribute(ds, "original_shape", std::vector<std::int64_t>(shape.begin(), shape.end()));
}

/// Reads a numeric dataset, lets `edit` change its values, and writes it back with the same logical shape.
void edit_doubles(const hdf5::File& f, const std::string& name, const std::function<void(std::vector<double>&)>& edit) {
  auto a = hdf5::read_doubles(f, name);
  edit(a.values);
  put_flat(f, name, a.values, a.shape);
}
void edit_int64s(const hdf5::File& f, const std::string& name, const std::function<void(std::vector<std::int64_t>&)>& edit) {
  auto a = hdf5::read_int64s(f, name);
  edit(a.values);
  put_flat(f, name, a.values, a.shape);
}

/// Replaces an attribute holding an int64 array (original_shape, dense_shape).
void set_shape(const hdf5::File& f, const std::string& object, const char* attribute, const std::vector<std::int64_t>& shape) {
  hdf5::write_attribute(hdf5::open(f, object), attribute, shape);
}

double rel_diff(double a, double b) { return std::abs(a - b) / std::max({std::abs(a), std::abs(b), 1e-300}); }

/// The likelihood's value and gradient at x.
template <class L>
std::pair<double, std::vector<double>> value_grad(L& nll, const std::vector<double>& x) {
  std::vector<double> g(x.size());
  const double f = nll.value_grad(x, g);
  return {f, g};
}

/// A read that must either succeed (and then the model is valid) or throw a fitlib::error; anything else fails.
void read_or_fitlib_error(const std::string& path) {
  try {
    const auto t = read_rabbit(path);
    t.model.validate();
  } catch (const fitlib::error&) {
  } catch (const std::exception& e) {
    FAIL("read_rabbit threw a non-fitlib exception: " << e.what());
  } catch (...) {
    FAIL("read_rabbit threw a non-standard exception");
  }
}

}  // namespace

TEST_CASE("io: read_rabbit reads the dense asymmetric example tensor", "[io][rabbit]") {
  const RabbitTensor t = read_rabbit(dense_file);
  const Model& m = t.model;
  CHECK_FALSE(m.sparse());
  CHECK(t.path == dense_file);
  CHECK(t.sha256 == "57b302ecc851e008454873be053f59c08e6a316b2f066c9d93282272c3eb0a48");
  CHECK(m.nbins() == 60);
  CHECK(m.nbins_full() == 70);
  REQUIRE(m.channels.size() == 2);
  CHECK((m.channels[0].name == "ch0" && m.channels[0].nbins == 60 && !m.channels[0].masked));
  CHECK((m.channels[1].name == "ch1_masked" && m.channels[1].nbins == 10 && m.channels[1].masked));
  REQUIRE(m.nprocs() == 3);
  CHECK(m.processes[0].name == "sig");
  CHECK(m.processes[0].signal);
  CHECK(m.processes[1].name == "bkg");
  CHECK_FALSE(m.processes[1].signal);
  CHECK(m.processes[2].name == "bkg_2");
  CHECK(m.npoi() == 1);
  REQUIRE(m.nsyst() == 12);
  CHECK(m.systematics[0].name == "slope_background");
  CHECK(m.systematics[5].name == "slope_2_signal_ch1");
  CHECK(m.systematics[11].name == "slope_signal_ch1");
  CHECK_FALSE(m.symmetric);
  CHECK(m.systematic_type == SystematicType::log_normal);
  CHECK(m.dense()->nominal.size() == 70 * 3);
  CHECK(m.dense()->logk.size() == 70 * 3 * 2 * 12);
  CHECK(m.constraint_weights == std::vector<double>{0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1});
  CHECK(m.theta0 == std::vector<double>(12, 0.0));
  CHECK(m.poi_default == std::vector<double>{1.0});
  CHECK(m.nois == std::vector<index_t>{1, 10});
  REQUIRE(m.groups.size() == 7);
  CHECK(m.groups[0].name == "bkg_2_norm");
  CHECK(m.groups[0].members == std::vector<index_t>{2});
  CHECK(m.groups[4].name == "slopes");
  CHECK(m.groups[4].members == std::vector<index_t>{8, 9, 0, 10, 5, 11, 6, 7});
  CHECK(m.groups[6].name == "slopes_signal");
  CHECK(std::vector<double>(m.data.begin(), m.data.begin() + 5) == std::vector<double>{524, 560, 884, 2423, 4956});
  CHECK(m.data_variance.empty());  // unweighted data: rabbit writes no hdata_var
  CHECK(m.data_covariance_inverse.size() == 60 * 60);
  CHECK(m.sumw2.size() == 70 * 3);
  CHECK(m.sumw.size() == 70 * 3);
  CHECK(m.external_terms.empty());
  CHECK(t.pseudodata_names == std::vector<std::string>{"original"});
  CHECK(t.pseudodata.size() == 60);
  CHECK(t.beta_variations.empty());

  // Bit-for-bit the file's arrays, in rabbit's (and Model's) row-major layout.
  const auto f = hdf5::File::open(dense_file);
  CHECK(m.dense()->nominal == hdf5::read_doubles(f, "hnorm").values);
  CHECK(m.dense()->logk == hdf5::read_doubles(f, "hlogk").values);
  CHECK(m.sumw2 == hdf5::read_doubles(f, "hsumw2").values);
  CHECK(m.data_covariance_inverse == hdf5::read_doubles(f, "hdata_cov_inv").values);
  CHECK(m.dense()->nominal[1] == Approx(547.46857015).epsilon(1e-10));  // bin 0, bkg (structure dump)
  CHECK(m.dense()->nominal[0] == 0.0);                                  // no signal in bin 0
}

TEST_CASE("io: read_rabbit reads the symmetric example tensor", "[io][rabbit]") {
  const RabbitTensor t = read_rabbit(symmetric_file);
  const Model& m = t.model;
  CHECK(m.symmetric);
  REQUIRE(m.nsyst() == 13);
  CHECK(m.systematics[5].name == "slope_2_signal_ch1SymAvg");
  CHECK(m.systematics[12].name == "slope_signal_ch1");
  CHECK(m.dense()->logk.size() == 70 * 3 * 13);
  CHECK(m.nois == std::vector<index_t>{1, 11});
  CHECK(m.constraint_weights.size() == 13);
  CHECK(m.groups[4].members == std::vector<index_t>{11, 0, 12, 7, 10, 9, 5, 8, 6});
  CHECK(t.sha256 == "8e2fff2f35f080fd69133dcd6f75b9fa1fea7fa14d16f6e5043383ae8a98dfd1");
}

TEST_CASE("io: dense and sparse example tensors give the same model and likelihood", "[io][rabbit]") {
  const RabbitTensor d = read_rabbit(dense_file);
  const RabbitTensor s = read_rabbit(sparse_file);
  REQUIRE(s.model.sparse());
  CHECK_FALSE(s.model.dense());
  CHECK(s.model.sparse()->ncells() == 130);
  CHECK(s.model.sparse()->nnz() == 462);
  CHECK(s.model.sparse()->ncoef == 24);
  CHECK_FALSE(s.model.symmetric);
  CHECK(s.model.nominal_yields() == d.model.dense()->nominal);
  CHECK(s.model.sparse()->dense_logk() == d.model.dense()->logk);
  test::check_same_model(s.model, d.model);
  CHECK(s.pseudodata == d.pseudodata);

  SerialLikelihood dense(d.model);
  SparseSerialLikelihood sparse(s.model);
  Model densified = s.model;  // the sparse model's templates, stored densely
  densified.templates = DenseTemplates{s.model.nominal_yields(), s.model.sparse()->dense_logk(), {}};
  SerialLikelihood dense_again(std::move(densified));
  auto x = dense.default_parameters();
  REQUIRE(x.size() == 13);
  for (int point = 0; point < 2; ++point) {
    INFO("point " << point);
    if (point == 1)
      for (std::size_t i = 0; i < x.size(); ++i) x[i] += 0.3 * std::sin(1.0 + static_cast<double>(i));  // both sides of |θ| = 1/2
    const auto [fd, gd] = value_grad(dense, x);
    const auto [fs, gs] = value_grad(sparse, x);
    const auto [fa, ga] = value_grad(dense_again, x);
    REQUIRE(std::isfinite(fd));
    CHECK(rel_diff(fd, fs) < 1e-12);
    for (std::size_t i = 0; i < x.size(); ++i) CHECK(rel_diff(gd[i], gs[i]) < 1e-12);
    CHECK(fa == fd);
    CHECK(ga == gd);
  }
}

TEST_CASE("io: read_rabbit reads Blosc2-compressed tensors with a plugin and explains the error without one", "[io][rabbit][blosc2]") {
  // Both parts live in one test case, in this order: a plugin HDF5 has loaded stays loaded for the process.
  // First an empty plugin search path, before anything asks HDF5 about filter 32026 (asking loads the plugin).
  // HDF5 reads HDF5_PLUGIN_PATH once, when it starts (already done in this process), so set the search path
  // through the H5PL API; the variable is set too for any HDF5 that starts later.
  const test::RestorePluginPath restore_path;
  const char* env = std::getenv("HDF5_PLUGIN_PATH");
  const std::string saved_env = env != nullptr ? env : "";
  struct RestoreEnv {
    bool had;
    std::string value;
    ~RestoreEnv() { had ? setenv("HDF5_PLUGIN_PATH", value.c_str(), 1) : unsetenv("HDF5_PLUGIN_PATH"); }
  } restore_env{env != nullptr, saved_env};
  TempDir empty;
  setenv("HDF5_PLUGIN_PATH", empty.path.c_str(), 1);
  hdf5::set_plugin_search_path({empty.path.string()});
  CHECK(hdf5::plugin_search_path() == std::vector<std::string>{empty.path.string()});

  const auto f = hdf5::File::open(blosc2_file);
  bool compressed = false;
  for (const char* name : {"hnorm", "hlogk"})
    for (const auto& filter : hdf5::filters(f, name)) compressed = compressed || filter.id == 32026;
  REQUIRE(compressed);  // the premise: hnorm/hlogk use filter 32026
  bool plugin_already_loaded = false;
  for (const auto& filter : hdf5::filters(f, "hnorm")) plugin_already_loaded = plugin_already_loaded || (filter.id == 32026 && filter.available);
  if (plugin_already_loaded) {
    WARN("the Blosc2 filter is already registered in this process; skipping the missing-plugin check");
  } else {
    try {
      (void)read_rabbit(blosc2_file);
      FAIL("read_rabbit read a Blosc2 tensor without a plugin");
    } catch (const file_error& e) {
      const std::string msg = e.what();
      CHECK_THAT(msg, Contains("32026") && Contains("Blosc2") && Contains("--hdf5PluginPath") && Contains("hdf5plugin") &&
                          Contains("test_tensor_blosc2.hdf5") && Contains(empty.path.string()));
      // The dataset it names is one that really uses Blosc2.
      const auto begin = msg.find("dataset '");
      REQUIRE(begin != std::string::npos);
      const auto end = msg.find('\'', begin + 9);
      const std::string ds = msg.substr(begin + 9, end - begin - 9);
      INFO("named dataset: " << ds);
      bool uses = false;
      for (const auto& filter : hdf5::filters(f, ds)) uses = uses || filter.id == 32026;
      CHECK(uses);
    }
  }

  const std::string plugins = FITLIB_HDF5_PLUGIN_DIR;
  if (!fs::exists(fs::path(plugins) / "libh5blosc2.so")) {
    WARN("no Blosc2 HDF5 plugin at " << plugins << " (scripts/install-deps.sh installs the PyPI package hdf5plugin there); "
                                        "skipping the check that a Blosc2 tensor reads correctly");
    return;
  }
  setenv("HDF5_PLUGIN_PATH", plugins.c_str(), 1);
  hdf5::set_plugin_search_path({plugins});
  const RabbitTensor b = read_rabbit(blosc2_file);
  const RabbitTensor g = read_rabbit(symmetric_file);  // the same tensor, gzip-compressed
  hdf5::set_plugin_search_path(restore_path.saved);
  CHECK(b.model.dense()->nominal == g.model.dense()->nominal);
  CHECK(b.model.dense()->logk == g.model.dense()->logk);
  CHECK(b.model.symmetric == g.model.symmetric);
  test::check_same_model(b.model, g.model);
  CHECK(b.pseudodata == g.pseudodata);
}

TEST_CASE("io: read_rabbit rejects broken tensors, naming the dataset", "[io][rabbit]") {
  TempDir dir;
  struct Case {
    const char* what;
    const std::string* source;
    std::function<void(const hdf5::File&)> mutate;
    std::vector<std::string> message;  // substrings the error must contain
  };
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<Case> cases = {
      {"hdata_obs deleted", &dense_file, [](const auto& f) { hdf5::remove(f, "hdata_obs"); }, {"'hdata_obs'", "missing"}},
      {"hprocs deleted", &dense_file, [](const auto& f) { hdf5::remove(f, "hprocs"); }, {"'hprocs'", "missing"}},
      {"hsysts deleted", &dense_file, [](const auto& f) { hdf5::remove(f, "hsysts"); }, {"'hsysts'", "missing"}},
      {"hnorm deleted", &dense_file, [](const auto& f) { hdf5::remove(f, "hnorm"); }, {"'hnorm'", "hnorm_sparse"}},
      {"hlogk deleted", &dense_file, [](const auto& f) { hdf5::remove(f, "hlogk"); }, {"'hlogk'", "missing"}},
      {"hsumw2 deleted", &dense_file, [](const auto& f) { hdf5::remove(f, "hsumw2"); }, {"'hsumw2'", "hkstat"}},
      {"hlogk_sparse deleted", &sparse_file, [](const auto& f) { hdf5::remove(f, "hlogk_sparse"); }, {"'hlogk_sparse'", "missing"}},
      {"hnorm_sparse/values deleted", &sparse_file, [](const auto& f) { hdf5::remove(f, "hnorm_sparse/values"); },
       {"'hnorm_sparse/values'", "missing"}},
      {"hnorm original_shape product wrong", &dense_file, [](const auto& f) { set_shape(f, "hnorm", "original_shape", {70, 4}); },
       {"'hnorm'", "original_shape"}},
      {"hnorm original_shape reshaped", &dense_file, [](const auto& f) { set_shape(f, "hnorm", "original_shape", {35, 6}); },
       {"'hnorm'", "[35, 6]"}},
      {"hlogk shape with the wrong S", &dense_file, [](const auto& f) { set_shape(f, "hlogk", "original_shape", {70, 3, 24}); },
       {"'hlogk'", "[70, 3, 24]", "[70, 3, 12]"}},
      {"hsumw2 shape", &dense_file, [](const auto& f) { set_shape(f, "hsumw2", "original_shape", {3, 70}); }, {"'hsumw2'", "[70, 3]"}},
      {"hdata_cov_inv flattened", &dense_file, [](const auto& f) { set_shape(f, "hdata_cov_inv", "original_shape", {3600}); },
       {"'hdata_cov_inv'", "[60, 60]"}},
      {"hnorm_sparse dense_shape", &sparse_file, [](const auto& f) { set_shape(f, "hnorm_sparse", "dense_shape", {70, 4}); },
       {"'hnorm_sparse'", "dense_shape"}},
      {"hlogk_sparse dense_shape", &sparse_file, [](const auto& f) { set_shape(f, "hlogk_sparse", "dense_shape", {130, 20}); },
       {"'hlogk_sparse'", "2S = 24"}},
      {"hlogk_sparse rows", &sparse_file, [](const auto& f) { set_shape(f, "hlogk_sparse", "dense_shape", {131, 24}); },
       {"'hlogk_sparse'", "130 entries of hnorm_sparse"}},
      {"strings for hdata_obs", &dense_file, [](const auto& f) { hdf5::write_strings(f, "hdata_obs", {"1", "2"}); },
       {"'hdata_obs'", "string", "expected numbers"}},
      {"numbers for hprocs", &dense_file, [](const auto& f) { hdf5::write(f, "hprocs", std::vector<double>{1, 2, 3}); },
       {"'hprocs'", "expected strings"}},
      {"floats for hnoiidxs", &dense_file, [](const auto& f) { hdf5::write(f, "hnoiidxs", std::vector<double>{1, 10}); },
       {"'hnoiidxs'", "expected integers"}},
      {"integers for hnorm", &dense_file,
       [](const auto& f) { put_flat(f, "hnorm", std::vector<std::int64_t>(210, 1), {70, 3}); },
       {"'hnorm'", "expected floating-point"}},
      {"NaN in hnorm", &dense_file, [&](const auto& f) { edit_doubles(f, "hnorm", [&](auto& v) { v[5 * 3 + 1] = nan; }); },
       {"'hnorm'", "nan", "bin 5, process 'bkg'", "flat index 16"}},
      {"inf in hlogk", &dense_file,
       [&](const auto& f) { edit_doubles(f, "hlogk", [&](auto& v) { v[((7 * 3 + 2) * 2 + 1) * 12 + 3] = -std::numeric_limits<double>::infinity(); }); },
       {"'hlogk'", "-inf", "bin 7, process 'bkg_2', systematic 'bkg_norm' (H, half-difference)"}},
      {"NaN in hdata_obs", &dense_file, [&](const auto& f) { edit_doubles(f, "hdata_obs", [&](auto& v) { v[12] = nan; }); },
       {"'hdata_obs'", "[12]"}},
      {"NaN in hnorm_sparse/values", &sparse_file, [&](const auto& f) { edit_doubles(f, "hnorm_sparse/values", [&](auto& v) { v[4] = nan; }); },
       {"'hnorm_sparse/values'", "[4]"}},
      {"NaN in hsumw2", &dense_file, [&](const auto& f) { edit_doubles(f, "hsumw2", [&](auto& v) { v[0] = nan; }); }, {"'hsumw2'"}},
      {"negative data", &dense_file, [](const auto& f) { edit_doubles(f, "hdata_obs", [](auto& v) { v[3] = -1; }); },
       {"'hdata_obs'", "-1", "≥ 0"}},
      {"negative data variance", &dense_file, [](const auto& f) { put_flat(f, "hdata_var", std::vector<double>(60, -2.0), {60}); },
       {"'hdata_var'", "≥ 0"}},
      {"negative template variance", &dense_file, [](const auto& f) { edit_doubles(f, "hsumw2", [](auto& v) { v[4] = -1; }); },
       {"'hsumw2'", "≥ 0"}},
      {"negative yield", &dense_file, [](const auto& f) { edit_doubles(f, "hnorm", [](auto& v) { v[2] = -3; }); },
       {"'hnorm'", "negative", "allow_negative_yields"}},
      {"negative sparse yield", &sparse_file, [](const auto& f) { edit_doubles(f, "hnorm_sparse/values", [](auto& v) { v[2] = -3; }); },
       {"'hnorm_sparse/values'", "negative", "allow_negative_yields"}},
      {"logk without nominal", &dense_file, [](const auto& f) { edit_doubles(f, "hlogk", [](auto& v) { v[0] = 0.1; }); },
       {"'hlogk'", "hnorm is 0"}},
      {"sparse bin out of range", &sparse_file, [](const auto& f) { edit_int64s(f, "hnorm_sparse/indices", [](auto& v) { v[2 * 129] = 70; }); },
       {"hnorm_sparse/indices", "outside"}},
      {"sparse process out of range", &sparse_file, [](const auto& f) { edit_int64s(f, "hnorm_sparse/indices", [](auto& v) { v[1] = -1; }); },
       {"hnorm_sparse/indices", "outside"}},
      {"unsorted sparse indices", &sparse_file,
       [](const auto& f) {
         edit_int64s(f, "hnorm_sparse/indices", [](auto& v) {
           std::swap(v[20], v[40]);
           std::swap(v[21], v[41]);
         });
       },
       {"hnorm_sparse/indices", "sorted"}},
      {"sparse logk cell out of range", &sparse_file,
       [](const auto& f) { edit_int64s(f, "hlogk_sparse/indices", [](auto& v) { v[2 * 461] = 130; }); }, {"hlogk_sparse/indices", "130"}},
      {"sparse logk column out of range", &sparse_file,
       [](const auto& f) { edit_int64s(f, "hlogk_sparse/indices", [](auto& v) { v[2 * 461 + 1] = 24; }); }, {"hlogk_sparse/indices", "outside"}},
      {"sparse index count", &sparse_file, [](const auto& f) { put_flat(f, "hnorm_sparse/indices", std::vector<std::int64_t>(258, 0), {129, 2}); },
       {"'hnorm_sparse/indices'", "[129, 2]", "[130, 2]"}},
      {"group member out of range", &dense_file,
       [](const auto& f) {
         auto rows = hdf5::read_ragged(f, "hsystgroupidxs");
         rows[4].push_back(12);
         hdf5::write_ragged(f, "hsystgroupidxs", rows);
       },
       {"'hsystgroupidxs'", "12", "'slopes'"}},
      {"group rows missing", &dense_file,
       [](const auto& f) {
         auto rows = hdf5::read_ragged(f, "hsystgroupidxs");
         rows.pop_back();
         hdf5::write_ragged(f, "hsystgroupidxs", rows);
       },
       {"'hsystgroupidxs'", "6 rows", "7 groups"}},
      {"group names without members", &dense_file, [](const auto& f) { hdf5::remove(f, "hsystgroupidxs"); }, {"'hsystgroupidxs'", "missing"}},
      {"NOI out of range", &dense_file, [](const auto& f) { hdf5::write(f, "hnoiidxs", std::vector<std::int64_t>{1, 12}); },
       {"'hnoiidxs'", "12", "outside"}},
      {"NOI twice", &dense_file, [](const auto& f) { hdf5::write(f, "hnoiidxs", std::vector<std::int64_t>{1, 1}); }, {"'hnoiidxs'", "twice"}},
      {"duplicate process", &dense_file, [](const auto& f) { hdf5::write_strings(f, "hprocs", {"sig", "bkg", "bkg"}); },
       {"'hprocs'", "'bkg' twice"}},
      {"duplicate systematic", &dense_file,
       [](const auto& f) {
         auto names = hdf5::read_strings(f, "hsysts");
         names[3] = names[2];
         hdf5::write_strings(f, "hsysts", names);
       },
       {"'hsysts'", "twice"}},
      {"signal not first", &dense_file, [](const auto& f) { hdf5::write_strings(f, "hsignals", {"bkg"}); }, {"'hsignals'", "'bkg'", "signals"}},
      {"unknown signal", &dense_file, [](const auto& f) { hdf5::write_strings(f, "hsignals", {"higgs"}); }, {"'hsignals'", "'higgs'"}},
      {"asymmetric inverse covariance", &dense_file,
       [](const auto& f) { edit_doubles(f, "hdata_cov_inv", [](auto& v) { v[1] = 0.5; }); }, {"'hdata_cov_inv'", "symmetric"}},
      {"pseudodata names", &dense_file, [](const auto& f) { hdf5::write_strings(f, "hpseudodatanames", {"a", "b"}); },
       {"'hpseudodatanames'", "2 names"}},
      {"constraint weights disagree", &dense_file,
       [](const auto& f) { put_flat(f, "hconstraintweights", std::vector<double>(12, 1.0), {12}); }, {"'hconstraintweights'", "'slope_background'"}},
      {"more masked than all bins", &dense_file, [](const auto& f) { put_flat(f, "hdata_obs", std::vector<double>(80, 1.0), {80}); },
       {"'hnorm'", "fewer than the 80 unmasked bins"}},
      {"external term with an unknown parameter", &dense_file,
       [](const auto& f) {
         const auto g = hdf5::create_group(f, "external_terms/prior");
         hdf5::write_strings(g, "params", {"norm", "nonexistent"});
         hdf5::write(g, "grad_values", std::vector<double>{0.1, 0.2});
       },
       {"external term 'prior'", "'nonexistent'"}},
      {"external term with a bad sparse Hessian", &dense_file,
       [](const auto& f) {
         const auto g = hdf5::create_group(f, "external_terms/prior");
         hdf5::write_strings(g, "params", {"norm", "bkg_norm"});
         const auto h = hdf5::create_group(g, "hess_sparse");
         hdf5::write_attribute(h, "dense_shape", std::vector<std::int64_t>{2, 2});
         put_flat(h, "indices", std::vector<std::int64_t>{0, 0, 2, 1}, {2, 2});
         put_flat(h, "values", std::vector<double>{1.0, 0.5}, {2});
       },
       {"'external_terms/prior/hess_sparse/indices'", "outside"}},
  };
  int index = 0;
  for (const auto& c : cases) {
    INFO("case: " << c.what);
    const std::string path = mutated(*c.source, dir / ("broken" + std::to_string(index++) + ".hdf5"), c.mutate);
    try {
      (void)read_rabbit(path);
      FAIL("read_rabbit accepted the broken tensor");
    } catch (const fitlib::error& e) {
      const std::string msg = e.what();
      INFO("message: " << msg);
      CHECK_THAT(msg, Contains(path));
      for (const auto& part : c.message) CHECK_THAT(msg, Contains(part));
    }
  }
  // A few with REQUIRE_THROWS_WITH, as the API promises the exception types.
  const std::string nan_norm = mutated(dense_file, dir / "nan_norm.hdf5", [&](const auto& f) { edit_doubles(f, "hnorm", [&](auto& v) { v[7] = nan; }); });
  REQUIRE_THROWS_AS(read_rabbit(nan_norm), file_error);
  REQUIRE_THROWS_WITH(read_rabbit(nan_norm), Contains("'hnorm'") && Contains("nan"));
  const std::string unsorted = mutated(sparse_file, dir / "unsorted.hdf5", [](const auto& f) {
    edit_int64s(f, "hlogk_sparse/indices", [](auto& v) {
      std::swap(v[0], v[10]);
      std::swap(v[1], v[11]);
    });
  });
  REQUIRE_THROWS_WITH(read_rabbit(unsorted), Contains("hlogk_sparse/indices") && Contains("sorted"));
}

TEST_CASE("io: read_rabbit accepts what rabbit accepts", "[io][rabbit]") {
  TempDir dir;
  const RabbitTensor ref = read_rabbit(dense_file);

  SECTION("negative yields with allow_negative_yields") {
    const auto path = mutated(dense_file, dir / "negative.hdf5", [](const auto& f) { edit_doubles(f, "hnorm", [](auto& v) { v[2] = -3; }); });
    const RabbitTensor t = read_rabbit(path, {.allow_negative_yields = true});
    CHECK(t.model.dense()->nominal[2] == -3);
    CHECK(t.model.allow_negative_yields);
  }
  SECTION("systematic_type from the options, for a file without meta") {  // with meta: tests/io/test_pickle.cpp
    const auto path = mutated(dense_file, dir / "no_meta.hdf5", [](const auto& f) { hdf5::remove(f, "meta"); });
    const RabbitTensor t = read_rabbit(path, {.systematic_type = SystematicType::normal});
    CHECK(t.model.systematic_type == SystematicType::normal);
  }
  SECTION("constraint weights from hsystsnoconstraint when hconstraintweights is absent") {
    const auto path = mutated(dense_file, dir / "no_cw.hdf5", [](const auto& f) { hdf5::remove(f, "hconstraintweights"); });
    CHECK(read_rabbit(path).model.constraint_weights == ref.model.constraint_weights);
  }
  SECTION("older files: hnoigroupidxs and hkstat") {
    const auto path = mutated(dense_file, dir / "old.hdf5", [&](const auto& f) {
      const auto noi = hdf5::read_int64s(f, "hnoiidxs").values;
      hdf5::remove(f, "hnoiidxs");
      hdf5::write(f, "hnoigroupidxs", noi);
      // kstat_b = sumw_b² / sumw2_b per bin, as older writers stored it.
      const auto& m = ref.model;
      std::vector<double> kstat(70);
      for (std::size_t b = 0; b < 70; ++b) {
        double w = 0, w2 = 0;
        for (std::size_t p = 0; p < 3; ++p) {
          w += m.dense()->nominal[b * 3 + p];
          w2 += m.sumw2[b * 3 + p];
        }
        kstat[b] = w2 > 0 ? w * w / w2 : 0.0;
      }
      hdf5::remove(f, "hsumw2");
      hdf5::remove(f, "hsumw");
      put_flat(f, "hkstat", kstat, {70});
    });
    const RabbitTensor t = read_rabbit(path);
    CHECK(t.model.nois == ref.model.nois);
    CHECK(t.model.sumw.empty());
    for (std::size_t b = 0; b < 70; ++b) {
      double a = 0, r = 0;
      for (std::size_t p = 0; p < 3; ++p) {
        a += t.model.sumw2[b * 3 + p];
        r += ref.model.sumw2[b * 3 + p];
        if (ref.model.dense()->nominal[b * 3 + p] == 0) CHECK(t.model.sumw2[b * 3 + p] == 0);
      }
      CHECK(a == Approx(r).epsilon(1e-12));
    }
  }
  SECTION("external terms with dense and sparse Hessians") {
    const auto path = mutated(dense_file, dir / "external.hdf5", [](const auto& f) {
      auto g = hdf5::create_group(f, "external_terms/a_dense");
      hdf5::write_strings(g, "params", {"sig", "norm"});
      hdf5::write(g, "grad_values", std::vector<double>{0.5, -1.0});
      put_flat(g, "hess_dense", std::vector<double>{2.0, 0.25, 0.25, 3.0}, {2, 2});
      g = hdf5::create_group(f, "external_terms/b_sparse");
      hdf5::write_strings(g, "params", {"bkg_norm", "norm", "slope_signal"});
      const auto h = hdf5::create_group(g, "hess_sparse");
      hdf5::write_attribute(h, "dense_shape", std::vector<std::int64_t>{3, 3});
      put_flat(h, "indices", std::vector<std::int64_t>{0, 0, 0, 2, 1, 1, 2, 0}, {4, 2});
      put_flat(h, "values", std::vector<double>{4.0, -0.5, 1.0, -0.5}, {4});
      g = hdf5::create_group(f, "external_terms/c_upper");  // one triangle only: symmetrised
      hdf5::write_strings(g, "params", {"norm", "bkg_norm"});
      put_flat(g, "hess_dense", std::vector<double>{1.0, 0.5, 0.0, 1.0}, {2, 2});
    });
    const RabbitTensor t = read_rabbit(path);
    REQUIRE(t.model.external_terms.size() == 3);
    const auto& a = t.model.external_terms[0];
    CHECK(a.name == "a_dense");
    CHECK(a.parameters == std::vector<std::string>{"sig", "norm"});
    CHECK(a.gradient == std::vector<double>{0.5, -1.0});
    CHECK(a.hessian_values.size() == 4);
    const auto& b = t.model.external_terms[1];
    CHECK(b.gradient.empty());
    CHECK(b.hessian_values.size() == 4);
    const auto& c = t.model.external_terms[2];
    REQUIRE(c.hessian_values.size() == 4);
    for (std::size_t k = 0; k < 4; ++k)
      if (c.hessian_rows[k] != c.hessian_cols[k]) CHECK(c.hessian_values[k] == 0.25);
    SerialLikelihood nll(t.model);  // the terms resolve against the model's parameters
    CHECK(std::isfinite(nll.value(nll.default_parameters())));
  }
}

TEST_CASE("io: read_rabbit survives truncated and corrupted files", "[io][rabbit]") {
  TempDir dir;
  for (const std::string* source : {&dense_file, &sparse_file, &symmetric_file}) {
    const auto good = test::file_bytes(*source);
    REQUIRE(good.size() > 20000);
    for (std::size_t n : {std::size_t{0}, std::size_t{7}, std::size_t{96}, std::size_t{800}, std::size_t{4096}, good.size() / 3,
                          good.size() / 2, good.size() - 100, good.size() - 1}) {
      INFO(*source << ": first " << n << " bytes");
      const std::string path = dir / "cut.hdf5";
      test::write_bytes(path, std::span(good).first(n));
      REQUIRE_THROWS_AS(read_rabbit(path), fitlib::error);
    }
    // Byte flips at seeded offsets: every outcome is a valid model or a fitlib::error.
    std::mt19937_64 rng(20240611);
    for (int trial = 0; trial < 40; ++trial) {
      auto bytes = good;
      const int flips = 1 + trial % 4;
      for (int k = 0; k < flips; ++k) {
        const std::size_t at = static_cast<std::size_t>(rng() % bytes.size());
        bytes[at] = static_cast<char>(bytes[at] ^ static_cast<char>(1 + rng() % 255));
      }
      INFO(*source << ": trial " << trial);
      const std::string path = dir / "flipped.hdf5";
      test::write_bytes(path, bytes);
      read_or_fitlib_error(path);
    }
  }
}
