// SPDX-License-Identifier: MIT
// Channels and their hist axes from a rabbit tensor's meta pickle, against what hist and rabbit say about them.
#include <catch2/catch.hpp>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fitlib/io/hist_axes.hpp"
#include "fitlib/io/rabbit.hpp"
#include "fitlib/io/results.hpp"
#include "temp_dir.hpp"

namespace {

using Catch::Matchers::Contains;
using fitlib::Axis;
namespace pk = fitlib::io::pickle;

std::string axes_data(const std::string& name) { return std::string(FITLIB_TEST_DATA_DIR) + "/" + name; }

nlohmann::json axes_json(const std::string& name) {
  std::ifstream in(axes_data(name));
  REQUIRE(in);
  return nlohmann::json::parse(in);
}

/// A copy of `from` whose meta pickle is `meta`, encoded as wums writes it (uint8 pickle_data).
std::string with_meta_value(const fitlib::test::TempDir& dir, const std::string& from, const pk::Value& meta) {
  namespace h5 = fitlib::io::hdf5;
  const std::string path = dir / "meta.hdf5";
  std::filesystem::copy_file(from, path, std::filesystem::copy_options::overwrite_existing);
  const auto f = h5::File::open(path, h5::Access::read_write);
  h5::remove(f, "meta/pickle_data");
  const std::vector<std::uint8_t> bytes = pk::encode(meta);
  h5::detail::create_and_write(h5::open(f, "meta"), "pickle_data", H5T_STD_U8LE, H5T_NATIVE_UINT8, {bytes.size()}, 1, bytes.data());
  return path;
}

/// A pickled hist axis: hist.axis.<cls>() with boost-histogram's core axis `core` in its state.
pk::Value hist_axis(const std::string& cls, const std::string& core, std::vector<pk::Value> state) {
  return pk::instance("hist.axis." + cls, {}, pk::dict({{"_ax", pk::instance("boost_histogram._core.axis." + core, {}, pk::tuple(std::move(state)))}}));
}

pk::Value axis_meta(const std::string& name) { return pk::dict({{"name", pk::string(name)}, {"label", pk::string("")}}); }

pk::Value pk_float(double x) {
  pk::Value v;
  v.kind = pk::Kind::floating;
  v.floating = x;
  return v;
}

pk::Value pk_bytes(const std::string& b) {
  pk::Value v;
  v.kind = pk::Kind::bytes;
  v.text = b;
  return v;
}

/// numpy's protocol-5 pickle of a 1-D array: _frombuffer(bytes, dtype(code), (n,), 'C'), byte order `order`.
pk::Value numpy_array(const std::string& raw, const std::string& code, std::int64_t n, const std::string& order = "<") {
  pk::Value dtype = pk::instance("numpy.dtype", {pk::string(code), pk::boolean(false), pk::boolean(true)},
                                 pk::tuple({pk::integer(3), pk::string(order), pk::none(), pk::none(), pk::none(), pk::integer(-1), pk::integer(-1), pk::integer(0)}));
  return pk::instance("numpy._core.numeric._frombuffer", {pk_bytes(raw), std::move(dtype), pk::tuple({pk::integer(n)}), pk::string("C")});
}

std::string doubles_le(const std::vector<double>& x) {
  std::string s;
  for (const double v : x) {
    const auto u = std::bit_cast<std::uint64_t>(v);
    for (int b = 0; b < 8; ++b) s.push_back(static_cast<char>(u >> (8 * b)));
  }
  return s;
}

}  // namespace

TEST_CASE("hist axes: every axis kind, as rabbit's TensorWriter pickled hist's axes", "[io][rabbit][hist]") {
  // tests/data/rabbit/make_axes_tensor.py wrote the tensor and, from the hist objects themselves, the JSON
  const fitlib::io::RabbitTensor t = fitlib::io::read_rabbit(axes_data("rabbit/test_tensor_axes.hdf5"));
  CHECK(t.channels_skipped.empty());
  const nlohmann::json want = axes_json("rabbit/test_tensor_axes.json")["channels"];
  const std::vector<fitlib::Channel>& got = t.model.channels;
  REQUIRE(got.size() == want.size());
  fitlib::index_t start = 0;
  std::size_t axes_seen = 0;
  for (std::size_t c = 0; c < got.size(); ++c) {
    INFO("channel " << want[c]["name"]);
    CHECK(got[c].name == want[c]["name"].get<std::string>());
    CHECK(got[c].masked == want[c]["masked"].get<bool>());
    CHECK(got[c].flow == want[c]["flow"].get<bool>());
    CHECK(start == want[c]["start"].get<fitlib::index_t>());
    CHECK(got[c].nbins == want[c]["bins"].get<fitlib::index_t>());
    start += got[c].nbins;
    REQUIRE(got[c].axes.size() == want[c]["axes"].size());
    for (std::size_t k = 0; k < got[c].axes.size(); ++k, ++axes_seen) {
      const Axis& a = got[c].axes[k];
      const nlohmann::json& w = want[c]["axes"][k];
      INFO("axis " << k << " (" << w["core"] << ")");
      CHECK(a.kind_name() == w["class"].get<std::string>());
      CHECK(a.name == w["name"].get<std::string>());
      CHECK(a.label == w["label"].get<std::string>());
      CHECK(a.size() == w["size"].get<fitlib::index_t>());
      CHECK(a.extent() == w["extent"].get<fitlib::index_t>());
      CHECK(a.underflow == w["underflow"].get<bool>());
      CHECK(a.overflow == w["overflow"].get<bool>());
      CHECK(a.circular == w["circular"].get<bool>());
      CHECK(a.growth == w["growth"].get<bool>());
      if (w.contains("categories")) {
        CHECK(a.categories == w["categories"].get<std::vector<std::string>>());
        CHECK(a.edges.empty());
      } else {
        CHECK(a.edges == w["edges"].get<std::vector<double>>());  // bit for bit, transforms included
        CHECK(a.categories.empty());
      }
      if (w.contains("transform")) CHECK(a.transform == w["transform"].get<std::string>());
    }
  }
  CHECK(axes_seen == 16);
  CHECK(start == t.model.nbins_full());
  CHECK(t.model.nbins() == 52);  // the four unmasked channels
}

TEST_CASE("hist axes: rabbit's fixture tensors have the channels rabbit's reader computes", "[io][rabbit][hist]") {
  // rabbit_results.json's channels: decoded by hist from the same meta, with rabbit's start/stop
  const nlohmann::json fixture = axes_json("rabbit_fixture/rabbit_results.json");
  for (const auto& [tensor, entry] : fixture["tensors"].items()) {
    const std::string file = entry["files"]["gzip"].get<std::string>();  // the Blosc2 twins need a plugin (test_rabbit_fixture)
    INFO(file);
    const fitlib::io::RabbitTensor t = fitlib::io::read_rabbit(axes_data("rabbit_fixture/" + file));
    CHECK(t.channels_skipped.empty());
    const nlohmann::json& want = entry["channels"];
    REQUIRE(t.model.channels.size() == want.size());
    fitlib::index_t start = 0;
    for (std::size_t c = 0; c < want.size(); ++c) {
      const fitlib::Channel& ch = t.model.channels[c];
      CHECK(ch.name == want[c]["name"].get<std::string>());
      CHECK(ch.masked == want[c]["masked"].get<bool>());
      CHECK(start == want[c]["start"].get<fitlib::index_t>());
      CHECK(start + ch.nbins == want[c]["stop"].get<fitlib::index_t>());
      start += ch.nbins;
      REQUIRE(ch.axes.size() == want[c]["axes"].size());
      for (std::size_t k = 0; k < ch.axes.size(); ++k) {
        CHECK(ch.axes[k].name == want[c]["axes"][k]["name"].get<std::string>());
        CHECK(ch.axes[k].kind_name() == want[c]["axes"][k]["type"].get<std::string>());
        CHECK(ch.axes[k].edges == want[c]["axes"][k]["edges"].get<std::vector<double>>());  // 1.9999999999999998 included
      }
    }
  }
}

TEST_CASE("hist axes: without usable channel_info the bins form ch0 and ch1_masked, and the tensor says why", "[io][rabbit][hist]") {
  using fitlib::io::read_rabbit;
  SECTION("axes pickled by stand-in classes (the example tensors were written without hist installed)") {
    const fitlib::io::RabbitTensor t = read_rabbit(axes_data("rabbit/test_tensor.hdf5"));
    REQUIRE(t.model.channels.size() == 2);
    CHECK(t.model.channels[0].name == "ch0");
    CHECK(t.model.channels[1].name == "ch1_masked");
    // rabbit's own defaults: one Integer axis each, "obs" and "masked"
    REQUIRE(t.model.channels[0].axes.size() == 1);
    REQUIRE(t.model.channels[1].axes.size() == 1);
    CHECK(t.model.channels[0].axes[0].name == "obs");
    CHECK(t.model.channels[1].axes[0].name == "masked");
    CHECK(t.model.channels[1].axes[0].kind == Axis::Kind::integer);
    CHECK(t.model.channels[1].axes[0].edges.size() == 11);
    CHECK_THAT(t.channels_skipped, Contains("channel_info['ch0']'s axis 0 is a hist.axis.Regular without boost-histogram's pickled axis") &&
                                       Contains("the bins form one channel 'ch0' and the masked ones 'ch1_masked', as rabbit does for a tensor without meta"));
  }
  fitlib::test::TempDir dir;
  const std::string normal = axes_data("rabbit/test_tensor_normal.hdf5");  // real hist: one channel ch0, Regular(6, 0, 1)
  SECTION("a real axis") {
    const fitlib::io::RabbitTensor t = read_rabbit(normal);
    CHECK(t.channels_skipped.empty());
    REQUIRE(t.model.channels.size() == 1);
    REQUIRE(t.model.channels[0].axes.size() == 1);
    CHECK(t.model.channels[0].axes[0].name == "x");
    CHECK(t.model.channels[0].axes[0].edges.size() == 7);
  }
  const auto meta_with = [&](pk::Value channel_info) {
    return pk::dict({{"channel_info", std::move(channel_info)}, {"symmetric_tensor", pk::boolean(false)}, {"systematic_type", pk::string("normal")}});
  };
  const auto integer_axis = [](std::int64_t n) {
    return hist_axis("Integer", "integer_none", {pk::integer(0), pk::integer(n), axis_meta("i"), pk::integer(0)});
  };
  SECTION("channels that do not add up to the tensor's bins") {
    const fitlib::io::RabbitTensor t = read_rabbit(with_meta_value(dir, normal, meta_with(pk::dict({{"a", pk::dict({{"axes", pk::list({integer_axis(5)})}})}}))));
    CHECK(t.model.channels[0].name == "ch0");
    CHECK_THAT(t.channels_skipped, Contains("channel_info's channels hold 5 unmasked and 0 masked bins, but the tensor has 6 and 0"));
  }
  SECTION("two channels of an integer axis each") {
    const fitlib::io::RabbitTensor t = read_rabbit(with_meta_value(
        dir, normal, meta_with(pk::dict({{"a", pk::dict({{"axes", pk::list({integer_axis(2)})}})}, {"b", pk::dict({{"axes", pk::tuple({integer_axis(4)})}})}}))));
    CHECK(t.channels_skipped.empty());
    REQUIRE(t.model.channels.size() == 2);
    CHECK((t.model.channels[0].name == "a" && t.model.channels[0].nbins == 2 && t.model.channels[1].nbins == 4));
  }
  SECTION("an axis class fitlib does not know, and no channel_info") {
    pk::Value odd = hist_axis("Regular", "regular_float", {pk::integer(0), pk::integer(0), pk::integer(6), axis_meta("r"), pk_float(0), pk_float(1)});
    const fitlib::io::RabbitTensor t = read_rabbit(with_meta_value(dir, normal, meta_with(pk::dict({{"a", pk::dict({{"axes", pk::list({odd})}})}}))));
    CHECK_THAT(t.channels_skipped, Contains("boost_histogram._core.axis.regular_float), an axis class fitlib does not know"));
    const fitlib::io::RabbitTensor none = read_rabbit(with_meta_value(dir, normal, pk::dict({{"systematic_type", pk::string("normal")}})));
    CHECK_THAT(none.channels_skipped, Contains("the meta has no channel_info"));
  }
  SECTION("no meta group") {
    const std::string stripped = dir / "no_meta.hdf5";
    std::filesystem::copy_file(normal, stripped);
    fitlib::io::hdf5::remove(fitlib::io::hdf5::File::open(stripped, fitlib::io::hdf5::Access::read_write), "meta");
    CHECK_THAT(read_rabbit(stripped).channels_skipped, Contains("the tensor has no meta group (an older writer)"));
  }
}

TEST_CASE("hist axes: each layout read exactly, anything else refused with what was found", "[io][hist]") {
  using fitlib::io::hist::axis;
  using fitlib::io::hist::unreadable_axis;
  SECTION("regular: boost-histogram's edges, (1 - z)·min + z·(min + delta)") {
    const Axis a = axis(hist_axis("Regular", "regular_uflow", {pk::integer(0), pk::integer(0), pk::integer(10), axis_meta("x"), pk_float(-5), pk_float(10)}), 100);
    CHECK(a.kind == Axis::Kind::regular);
    CHECK((a.underflow && !a.overflow && a.size() == 10 && a.extent() == 11));
    CHECK(a.edges[7] == 1.9999999999999998);
    CHECK(a.edges[10] == 5);
    CHECK_THROWS_WITH(axis(hist_axis("Regular", "regular_none", {pk::integer(0), pk::integer(0), pk::integer(101), axis_meta("x"), pk_float(0), pk_float(1)}), 100),
                      Contains("has 101 bins, more than the tensor's 100"));
    CHECK_THROWS_WITH(axis(hist_axis("Regular", "regular_none", {pk::integer(0), pk::integer(0), pk::integer(2), axis_meta("x"), pk_float(0), pk_float(0)}), 100),
                      Contains("spans"));
    CHECK_THROWS_WITH(axis(hist_axis("Regular", "regular_none", {pk::integer(0), pk::integer(0), pk::integer(2), axis_meta("x"), pk_float(0), pk_float(-1)}), 100),
                      Contains("not finite and increasing (at edge 1)"));
    CHECK_THROWS_WITH(axis(hist_axis("Regular", "regular_trans", {pk::integer(0), pk::integer(0), pk::string("f"), pk::string("g"), pk::none(), pk::string("cbrt"),
                                                                   pk::integer(2), axis_meta("x"), pk_float(0), pk_float(1)}), 100),
                      Contains("transformed by 'cbrt', not hist's log or sqrt"));
  }
  SECTION("variable: numpy's two pickles of the edges") {
    const Axis a = axis(hist_axis("Variable", "variable_none", {pk::integer(0), numpy_array(doubles_le({0, 1, 3, 7}), "f8", 4), axis_meta("v")}), 100);
    CHECK(a.edges == std::vector<double>{0, 1, 3, 7});
    CHECK((!a.underflow && !a.overflow && a.extent() == 3));
    // numpy < 1.16 or protocol < 5: _reconstruct(ndarray, (0,), b'b') with a BUILD state (1, shape, dtype, is_fortran, data)
    pk::Value old = pk::instance("numpy.core.multiarray._reconstruct", {pk::none(), pk::tuple({pk::integer(0)}), pk_bytes("b")},
                                 pk::tuple({pk::integer(1), pk::tuple({pk::integer(3)}), numpy_array("", "f8", 0).items[1], pk::boolean(false), pk_bytes(doubles_le({1, 2, 4}))}));
    CHECK(axis(hist_axis("Variable", "variable_oflow", {pk::integer(0), old, axis_meta("v")}), 100).edges == std::vector<double>{1, 2, 4});
    CHECK_THROWS_WITH(axis(hist_axis("Variable", "variable_none", {pk::integer(0), numpy_array(doubles_le({0, 3, 1}), "f8", 3), axis_meta("v")}), 100),
                      Contains("not finite and increasing (at edge 2)"));
    CHECK_THROWS_WITH(axis(hist_axis("Variable", "variable_none", {pk::integer(0), numpy_array(doubles_le({0, 1}), "f8", 2, ">"), axis_meta("v")}), 100),
                      Contains("byte order '>', not little-endian"));
    CHECK_THROWS_WITH(axis(hist_axis("Variable", "variable_none", {pk::integer(0), numpy_array(doubles_le({0, 1}), "f8", 3), axis_meta("v")}), 100),
                      Contains("holds 16 bytes for 3 values of f8"));
  }
  SECTION("integer, boolean and the categories") {
    const Axis i = axis(hist_axis("Integer", "integer_uoflow", {pk::integer(0), pk::integer(3), axis_meta("n"), pk::integer(-2)}), 100);
    CHECK(i.edges == std::vector<double>{-2, -1, 0, 1});
    CHECK(i.extent() == 5);
    const Axis s = axis(hist_axis("StrCategory", "category_str", {pk::integer(0), pk::integer(2), pk::string("ee"), pk::string("mumu"), axis_meta("f")}), 100);
    CHECK(s.categories == std::vector<std::string>{"ee", "mumu"});
    CHECK((s.overflow && s.extent() == 3 && s.kind == Axis::Kind::str_category));
    const std::string ints{"\x0b\x00\x00\x00\xf3\xff\xff\xff", 8};  // 11, -13 as little-endian int32
    const Axis c = axis(hist_axis("IntCategory", "category_int_growth", {pk::integer(0), numpy_array(ints, "i4", 2), axis_meta("pdg")}), 100);
    CHECK(c.categories == std::vector<std::string>{"11", "-13"});
    CHECK((c.growth && !c.overflow));
    CHECK_THROWS_WITH(axis(hist_axis("StrCategory", "category_str", {pk::integer(0), pk::integer(3), pk::string("ee"), axis_meta("f")}), 100),
                      Contains("has 4 fields in its state, not the 6 of (version, count, categories..., metadata)"));
  }
  SECTION("hostile sizes and ranges: refused before anything is allocated") {
    // a length whose byte count wraps around 2⁶⁴ (2⁶¹ doubles of 8 bytes: 0 bytes)
    CHECK_THROWS_WITH(axis(hist_axis("Variable", "variable_none", {pk::integer(0), numpy_array("", "f8", std::int64_t{1} << 61), axis_meta("v")}), 100),
                      Contains("holds 0 bytes for 2305843009213693952 values of f8"));
    CHECK_THROWS_WITH(axis(hist_axis("Variable", "variable_none", {pk::integer(0), numpy_array(doubles_le(std::vector<double>(200, 1.0)), "f8", 200), axis_meta("v")}), 100),
                      Contains("has 200 values, more than the tensor's bins allow"));
    CHECK_THROWS_WITH(axis(hist_axis("Integer", "integer_none", {pk::integer(0), pk::integer(3), axis_meta("n"), pk::integer(INT64_MAX - 1)}), 100),
                      Contains("beyond ±2⁵³"));
    // a regular axis whose transform overflows
    CHECK_THROWS_WITH(axis(hist_axis("Regular", "regular_trans", {pk::integer(0), pk::integer(0), pk::string("f"), pk::string("g"), pk::none(), pk::string("log"),
                                                                   pk::integer(2), axis_meta("x"), pk_float(0), pk_float(1000)}), 100),
                      Contains("edges that are not finite and increasing (at edge 2)"));  // e¹⁰⁰⁰
    // Pow with a negative power: hist stores a negative width, and the edges still increase
    const Axis inverse = axis(hist_axis("Regular", "regular_pow", {pk::integer(0), pk::integer(0), pk_float(-1), pk::integer(2), axis_meta("p"), pk_float(1), pk_float(-0.5)}), 100);
    CHECK(inverse.edges == std::vector<double>{1, 1 / 0.75, 2});
    CHECK(inverse.transform == "pow(-1)");
  }
  SECTION("not an axis") {
    CHECK_THROWS_WITH(axis(pk::integer(3), 100), Contains("a int, not a hist axis"));
    CHECK_THROWS_WITH(axis(pk::instance("os.system", {pk::string("ls")}), 100), Contains("a os.system object, not a hist axis"));
    CHECK_THROWS_WITH(axis(pk::instance("hist.axis.Regular", {}, pk::dict({{"edges", pk::list({})}})), 100), Contains("without boost-histogram's pickled axis"));
    CHECK_THROWS_AS(axis(hist_axis("Integer", "integer_none", {pk::integer(0), pk::integer(3)}), 100), unreadable_axis);
  }
}

TEST_CASE("hist axes: a channel's axes must describe its bins; the results carry them", "[io][model][hist]") {
  fitlib::io::RabbitTensor t = fitlib::io::read_rabbit(axes_data("rabbit/test_tensor_axes.hdf5"));
  fitlib::Model m = t.model;
  m.validate();
  m.channels[0].flow = true;  // "counts": Integer(-1, 2) with both flow bins, Regular without underflow, growing StrCategory
  CHECK_THROWS_WITH(m.validate(), Contains("channel 'counts' has 12 bins but its axes have 5 × 3 × 2 (with their flow bins)"));

  const fitlib::io::ModelInfo info = fitlib::io::ModelInfo::of(t.model);
  const nlohmann::json j = fitlib::io::detail::model_json(info);
  REQUIRE(j["channels"].size() == 6);
  CHECK(j["channels"][2]["name"] == "cats");
  CHECK(j["channels"][2]["start"] == 24);
  CHECK(j["channels"][2]["axes"][1]["kind"] == "IntCategory");
  CHECK(j["channels"][2]["axes"][1]["categories"] == nlohmann::json::array({"11", "-13", "211"}));
  CHECK(j["channels"][1]["axes"][2]["transform"] == "pow(0.5)");
  CHECK(j["channels"][4]["flow"] == true);
  CHECK(j["channels"][3]["axes"][0]["label"] == "p_T [GeV]");

  fitlib::test::TempDir dir;
  fitlib::io::RunInfo run;
  run.model = info;
  fitlib::io::write_results(dir / "fit.hdf5", run, {});
  namespace h5 = fitlib::io::hdf5;
  const auto file = h5::File::open(dir / "fit.hdf5");
  CHECK(h5::read_int64s(file, "model/channel_start").values == std::vector<std::int64_t>{0, 12, 24, 36, 52, 77});
  CHECK(h5::read_int64s(file, "model/channel_flow").values == std::vector<std::int64_t>{0, 0, 0, 0, 1, 0});
  CHECK(h5::read_strings(file, "model/channel_axes/2/0") == std::vector<std::string>{"ee", "mumu"});
  CHECK(h5::read_doubles(file, "model/channel_axes/3/1").values == t.model.channels[3].axes[1].edges);
  const h5::Location eta = h5::open(file, "model/channel_axes/3/1");
  CHECK(h5::read_string_attribute(eta, "kind") == "Variable");
  CHECK(h5::read_string_attribute(eta, "name") == "eta");
  CHECK(h5::read_int64_attribute(eta, "underflow") == std::vector<std::int64_t>{1});
}
