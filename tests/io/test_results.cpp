// SPDX-License-Identifier: MIT
// Results files: written whole or not at all, outputs checked before work, valid JSON whatever the bytes.
#include <sys/resource.h>

#include <catch2/catch.hpp>
#include <csignal>
#include <fstream>
#include <nlohmann/json.hpp>

#include "file_bytes.hpp"
#include "fitlib/io/output_file.hpp"
#include "fitlib/io/rabbit.hpp"
#include "fitlib/io/results.hpp"
#include "temp_dir.hpp"

using namespace fitlib;
using Catch::Matchers::Contains;

namespace {

/// A fit record of `n` parameters with a covariance and toy-sized payload.
io::FitRecord record(const std::string& name, std::size_t n) {
  io::FitRecord f;
  f.name = name;
  FitResult& r = f.result;
  for (std::size_t i = 0; i < n; ++i) r.names.push_back("p" + std::to_string(i));
  r.x.assign(n, 1.5);
  r.x0.assign(n, 1.0);
  r.uncertainties.assign(n, 0.1);
  r.gradient.assign(n, 0.0);
  r.frozen.assign(n, false);
  r.covariance.assign(n * n, 0.0);
  for (std::size_t i = 0; i < n; ++i) r.covariance[i * n + i] = 0.01;
  r.covariance[1] = r.covariance[n] = 0.002;  // (1, 0) and (0, 1)
  r.status = FitStatus::converged_edm;
  r.nll = 12.5;
  return f;
}

/// Files in `dir` whose names start with '.' (the temporary files of ReplacingFile).
std::size_t hidden_files(const std::filesystem::path& dir) {
  std::size_t n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) n += e.path().filename().string().front() == '.';
  return n;
}

/// Limits the size of files this process writes (RLIMIT_FSIZE, with SIGXFSZ ignored, so a write beyond it
/// fails with EFBIG as a full disk fails with ENOSPC) for its lifetime.
struct FileSizeLimit {
  rlimit saved{};
  void (*handler)(int) = nullptr;
  explicit FileSizeLimit(rlim_t bytes) {
    getrlimit(RLIMIT_FSIZE, &saved);
    handler = std::signal(SIGXFSZ, SIG_IGN);
    rlimit lim = saved;
    lim.rlim_cur = bytes;
    setrlimit(RLIMIT_FSIZE, &lim);
  }
  ~FileSizeLimit() {
    setrlimit(RLIMIT_FSIZE, &saved);
    std::signal(SIGXFSZ, handler);
  }
};

}  // namespace

TEST_CASE("results: a write replaces the file whole, and a failed write leaves the old one", "[io][results]") {
  test::TempDir dir;
  const std::string path = dir / "fit.hdf5";
  io::RunInfo run;
  run.input_path = "tensor.hdf5";
  io::write_results(path, run, {record("data", 4)});
  const std::string before = test::file_text(path);
  REQUIRE(!before.empty());
  CHECK(hidden_files(dir.path) == 0);
  {
    const auto file = io::hdf5::File::open(path);
    CHECK(io::hdf5::exists(file, "data/covariance"));
  }

  // Many large fits against a 64 KiB limit: the write fails part-way (the probe's full disk, C2/D1).
  std::vector<io::FitRecord> many;
  for (int i = 0; i < 40; ++i) many.push_back(record("toy" + std::to_string(i + 1), 60));
  {
    const FileSizeLimit limit(64 * 1024);
    CHECK_THROWS_AS(io::write_results(path, run, many), io::file_error);
    CHECK_THROWS_AS(io::write_results_json(dir / "fit.json", run, many), io::file_error);
  }
  CHECK(test::file_text(path) == before);
  CHECK(!std::filesystem::exists(dir / "fit.json"));
  CHECK(hidden_files(dir.path) == 0);

  // Without the limit the same write succeeds and replaces the file.
  io::write_results(path, run, many);
  const auto file = io::hdf5::File::open(path);
  CHECK(io::hdf5::exists(file, "toy40/covariance"));
}

TEST_CASE("results: the JSON summary is valid UTF-8 whatever the names hold, with the covariance as rows", "[io][results]") {
  test::TempDir dir;
  io::RunInfo run;
  run.input_path = "caf\xe9.hdf5";  // Latin-1: not UTF-8
  io::FitRecord f = record("data", 3);
  f.result.names[0] = "lu\xffmi";
  io::write_results_json(dir / "fit.json", run, {f});
  const nlohmann::json j = nlohmann::json::parse(test::file_text(dir / "fit.json"));
  CHECK(j["input"]["path"] == "caf\xef\xbf\xbd.hdf5");  // U+FFFD
  CHECK(j["fits"][0]["parameters"][0]["name"] == "lu\xef\xbf\xbdmi");
  const auto& cov = j["fits"][0]["covariance"];
  REQUIRE(cov.size() == 3);
  REQUIRE(cov[0].size() == 3);
  CHECK(cov[0][1].get<double>() == 0.002);
  CHECK(cov[2][2].get<double>() == 0.01);
  // The HDF5 file keeps the bytes as they are.
  io::write_results(dir / "fit.hdf5", run, {f});
  const auto file = io::hdf5::File::open(dir / "fit.hdf5");
  CHECK(io::hdf5::read_strings(file, "data/parameters")[0] == "lu\xffmi");
}

TEST_CASE("results: outputs are checked before any work", "[io][results]") {
  test::TempDir dir;
  const std::string input = dir / "tensor.hdf5";
  std::ofstream(input) << "x";
  CHECK_THROWS_WITH(io::check_output_path(dir / "no/such/fit.hdf5", "-o"), Contains("does not exist") && Contains("mkdir"));
  CHECK_THROWS_WITH(io::check_output_path(input, "-o", {input}), Contains("is the input"));
  CHECK_THROWS_WITH(io::check_output_path((dir.path / "." / "tensor.hdf5").string(), "-o", {input}), Contains("is the input"));
  CHECK_THROWS_WITH(io::check_output_path(dir.path.string(), "-o"), Contains("is a directory"));
  CHECK_NOTHROW(io::check_output_path(dir / "fit.hdf5", "-o", {input}));
  CHECK(hidden_files(dir.path) == 0);
  CHECK(!std::filesystem::exists(dir / "fit.hdf5"));
}

TEST_CASE("results: a fit that threw is written with its error beside the others", "[io][results]") {
  test::TempDir dir;
  io::FitRecord failed;
  failed.name = "toy2";
  failed.error = "the toy's data are not finite";
  failed.result.status = FitStatus::aborted;
  const std::vector<io::FitRecord> fits = {record("toy1", 3), failed};
  io::write_results(dir / "fit.hdf5", {}, fits);
  io::write_results_json(dir / "fit.json", {}, fits);
  const auto file = io::hdf5::File::open(dir / "fit.hdf5");
  CHECK(io::hdf5::read_strings(file, "fits") == std::vector<std::string>{"toy1", "toy2"});
  CHECK(io::hdf5::exists(file, "toy1/covariance"));
  const nlohmann::json j = nlohmann::json::parse(test::file_text(dir / "fit.json"));
  CHECK(j["fits"][1]["error"] == failed.error);
  CHECK(j["fits"][1]["converged"] == false);
  CHECK(!j["fits"][0].contains("error"));
}

TEST_CASE("results: the model section says what a plot needs: channels, processes, kinds, constraints and prefit widths",
          "[io][results]") {
  Model m = io::read_rabbit(std::string(FITLIB_TEST_DATA_DIR) + "/rabbit/test_tensor.hdf5").model;
  REQUIRE(m.nois == std::vector<index_t>{1, 10});
  REQUIRE(m.groups[0].members == std::vector<index_t>{2});
  REQUIRE(m.constraint_weights[0] == 0);  // an unconstrained nuisance
  REQUIRE(m.constraint_weights[3] == 1);
  // Two POIs, so that an offset by the POI count is told from an offset by one.
  m.processes[1].signal = true;
  REQUIRE(m.npoi() == 2);
  m.constraint_weights[2] = 4;  // a constraint of width 1/2
  const io::ModelInfo info = io::ModelInfo::of(m);
  REQUIRE(info.parameters == m.parameter_names());
  REQUIRE(info.parameters.size() == 2 + m.systematics.size());
  CHECK(info.kinds[0] == "poi");
  CHECK(info.kinds[1] == "poi");
  CHECK(info.kinds[2] == "nuisance");  // systematic 0
  CHECK(info.kinds[3] == "noi");       // systematic 1
  CHECK(info.kinds[12] == "noi");      // systematic 10
  CHECK(std::count(info.kinds.begin(), info.kinds.end(), "noi") == 2);
  CHECK(info.constrained[1] == 0);
  CHECK(info.constrained[2] == 0);
  CHECK(info.constrained[5] == 1);
  CHECK(info.prefit_uncertainty[2] == 0);
  CHECK(info.prefit_uncertainty[4] == 0.5);  // systematic 2
  CHECK(info.prefit_uncertainty[5] == 1);
  REQUIRE(info.groups.size() == m.groups.size());
  CHECK(info.groups[0].name == "bkg_2_norm");
  CHECK(info.groups[0].members == std::vector<index_t>{4});
  CHECK(info.parameters[4] == m.systematics[2].name);

  test::TempDir dir;
  io::RunInfo run;
  run.model = info;
  io::write_results(dir / "fit.hdf5", run, {record("data", info.parameters.size())});
  io::write_results_json(dir / "fit.json", run, {record("data", info.parameters.size())});
  const auto file = io::hdf5::File::open(dir / "fit.hdf5");
  CHECK(io::hdf5::read_int64_attribute(file, "format_version") == std::vector<std::int64_t>{io::results_format_version});
  CHECK(io::hdf5::read_strings(file, "model/parameter_kind") == info.kinds);
  CHECK(io::hdf5::read_doubles(file, "model/prefit_uncertainty").values == info.prefit_uncertainty);
  CHECK(io::hdf5::read_int64s(file, "model/process_signal").values[1] == 1);
  CHECK(io::hdf5::read_int64s(file, "model/channel_bins").values == std::vector<std::int64_t>{m.channels[0].nbins, m.channels[1].nbins});
  CHECK(io::hdf5::read_int64s(file, "model/channel_masked").values == std::vector<std::int64_t>{0, 1});
  const auto offsets = io::hdf5::read_int64s(file, "model/group_offsets").values;
  REQUIRE(offsets.size() == m.groups.size() + 1);
  CHECK(io::hdf5::read_int64s(file, "model/group_members").values[static_cast<std::size_t>(offsets[0])] == 4);
  const nlohmann::json j = nlohmann::json::parse(test::file_text(dir / "fit.json"));
  CHECK(j["model"]["parameters"][4]["prefit_uncertainty"].get<double>() == 0.5);
  CHECK(j["model"]["parameters"][3]["kind"] == "noi");
  CHECK(j["model"]["parameters"][2]["constrained"] == false);
  CHECK(j["model"]["groups"][0]["name"] == "bkg_2_norm");
  CHECK(j["model"]["groups"][0]["members"] == nlohmann::json::array({info.parameters[4]}));
  CHECK(j["model"]["channels"][1]["masked"] == true);
}

TEST_CASE("results: a 2D scan is written with its grid, row-major, the second parameter fastest", "[io][results]") {
  io::FitRecord f = record("data", 3);
  GridScan g;
  g.parameters = {"x0", "x2"};
  g.values = {{1, 2}, {10, 20, 30}};
  g.dnll = {0.5, 0.25, 0.125, 4, 2, 1};  // [2 × 3]
  g.status.assign(6, FitStatus::converged_gtol);
  g.status[5] = FitStatus::max_iterations;
  f.scans2d = {g};
  test::TempDir dir;
  io::write_results(dir / "fit.hdf5", {}, {f});
  io::write_results_json(dir / "fit.json", {}, {f});
  const auto file = io::hdf5::File::open(dir / "fit.hdf5");
  CHECK(io::hdf5::read_strings(file, "data/scans2D/0/parameters") == g.parameters);
  CHECK(io::hdf5::read_doubles(file, "data/scans2D/0/values_y").values == g.values[1]);
  const auto dnll = io::hdf5::read_doubles(file, "data/scans2D/0/dnll");
  CHECK(dnll.shape == std::vector<std::size_t>{2, 3});
  CHECK(dnll.values == g.dnll);
  CHECK(io::hdf5::read_strings(file, "data/scans2D/0/status").size() == 6);
  const nlohmann::json j = nlohmann::json::parse(test::file_text(dir / "fit.json"));
  const auto& s = j["fits"][0]["scans2D"][0];
  CHECK(s["parameters"] == nlohmann::json::array({"x0", "x2"}));
  CHECK(s["values"][1][2].get<double>() == 30);
  REQUIRE(s["dnll"].size() == 2);
  CHECK(s["dnll"][1][0].get<double>() == 4);
  CHECK(s["dnll"][0][2].get<double>() == 0.125);
  CHECK(s["status"][5] == std::string(to_string(FitStatus::max_iterations)));
}

TEST_CASE("results: the histograms carry each process's variances [bins, processes] when they were computed", "[io][results]") {
  io::FitRecord f = record("data", 3);
  Histograms h;
  h.nbins = 2;
  h.nprocs = 3;
  h.data = h.data_variance = {4, 5};
  h.prefit = h.postfit = {1, 2, 3, 4, 5, 6};
  h.prefit_total = h.postfit_total = {6, 15};
  h.prefit_variance = h.postfit_variance = {0.5, 0.25};
  f.histograms = h;
  test::TempDir dir;
  io::write_results(dir / "plain.hdf5", {}, {f});
  CHECK_FALSE(io::hdf5::exists(io::hdf5::File::open(dir / "plain.hdf5"), "data/histograms/postfit_process_variance"));
  CHECK(io::hdf5::exists(io::hdf5::File::open(dir / "plain.hdf5"), "data/histograms/postfit_variance"));
  f.histograms->prefit_process_variance = {0.1, 0.2, 0.3, 0.4, 0.5, 0.6};
  f.histograms->postfit_process_variance = {1, 2, 3, 4, 5, 6};
  io::write_results(dir / "fit.hdf5", {}, {f});
  const auto file = io::hdf5::File::open(dir / "fit.hdf5");
  const auto pre = io::hdf5::read_doubles(file, "data/histograms/prefit_process_variance");
  CHECK(pre.shape == std::vector<std::size_t>{2, 3});
  CHECK(pre.values == f.histograms->prefit_process_variance);
  CHECK(io::hdf5::read_doubles(file, "data/histograms/postfit_process_variance").values == f.histograms->postfit_process_variance);
}
