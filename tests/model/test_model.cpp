// SPDX-License-Identifier: MIT
// ModelBuilder semantics and the validation errors, each naming the offending item.
#include <catch2/catch.hpp>

#include <limits>

#include "random_model.hpp"

using namespace fitlib;
using Catch::Matchers::Contains;

namespace {

const double not_a_number = std::numeric_limits<double>::quiet_NaN();
const double infinity = std::numeric_limits<double>::infinity();

ModelBuilder basic() {
  ModelBuilder mb;
  mb.add_channel("sr", 3).add_channel("cr", 2).add_process("sig", true).add_process("bkg").add_systematic("jes");
  mb.set_nominal("sr", "sig", std::vector{1.0, 2.0, 3.0}).set_nominal("sr", "bkg", std::vector{5.0, 5.0, 5.0});
  mb.set_nominal("cr", "bkg", std::vector{20.0, 30.0});
  mb.set_data("sr", std::vector{6.0, 7.0, 9.0}).set_data("cr", std::vector{21.0, 28.0});
  return mb;
}

}  // namespace

TEST_CASE("ModelBuilder lays the model out as rabbit does", "[model]") {
  ModelBuilder mb;
  mb.add_channel("masked", 2, true).add_channel("sr", 2).add_process("bkg").add_process("sig", true);
  mb.add_systematic("shape").add_systematic("free", {.constrained = false, .centre = 0.5});
  mb.set_nominal("sr", "bkg", std::vector{10.0, 20.0}).set_nominal("sr", "sig", std::vector{1.0, 2.0});
  mb.set_nominal("masked", "sig", std::vector{4.0, 4.0}).set_data("sr", std::vector{11.0, 23.0});
  mb.add_shape_variation("shape", "sr", "bkg", std::vector{12.0, 20.0}, std::vector{9.0, 18.0});
  mb.add_norm_variation("free", "sr", "sig", 1.2);  // an unconstrained systematic must vary something
  const Model m = mb.build();
  // Unmasked channels first, signals first.
  CHECK(m.channels[0].name == "sr");
  CHECK(m.channels[1].name == "masked");
  CHECK(m.processes[0].name == "sig");
  CHECK(m.nbins() == 2);
  CHECK(m.nbins_full() == 4);
  CHECK(m.parameter_names() == std::vector<std::string>{"sig", "shape", "free"});
  CHECK(m.constraint_weights == std::vector{1.0, 0.0});
  CHECK(m.theta0 == std::vector{0.0, 0.5});
  REQUIRE(!m.symmetric);
  // bkg is process 1; its row in bin 0 is [K_shape, K_free, H_shape, H_free].
  const double lu = std::log(12.0 / 10.0), ld = -std::log(9.0 / 10.0);
  const double* row = m.dense()->logk.data() + (0 * 2 + 1) * 4;
  CHECK(row[0] == Approx(0.5 * (lu + ld)).epsilon(1e-15));
  CHECK(row[2] == Approx(0.5 * (lu - ld)).epsilon(1e-15));
  CHECK(row[1] == 0.0);
  // Bin 1: up = nominal so ℓu = 0.
  CHECK(m.dense()->logk[(1 * 2 + 1) * 4 + 0] == Approx(-0.5 * std::log(18.0 / 20.0)).epsilon(1e-15));
  // rabbit's conventions: a vanishing log-normal variation becomes ln(1e-3).
  ModelBuilder zero;
  zero.add_channel("c", 1).add_process("p").add_systematic("s").set_nominal("c", "p", std::vector{2.0}).set_data("c", std::vector{2.0});
  zero.add_shape_variation("s", "c", "p", std::vector{0.0});
  CHECK(zero.build().dense()->logk[0] == Approx(std::log(1e-3)));
}

TEST_CASE("ModelBuilder lays template variances out like the nominal yields", "[model]") {
  const Model m = basic().set_variances("cr", "bkg", std::vector{2.0, 3.0}).build();
  CHECK(m.sumw2 == std::vector{0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 2.0, 0.0, 3.0});
  CHECK(basic().build().sumw2.empty());  // exact templates
}

TEST_CASE("Symmetrize modes", "[model]") {
  auto first_entry = [](Symmetrize mode) {
    ModelBuilder mb;
    mb.add_channel("c", 1).add_process("p").add_systematic("s").set_nominal("c", "p", std::vector{10.0}).set_data("c", std::vector{10.0});
    mb.add_shape_variation("s", "c", "p", std::vector{13.0}, std::vector{9.0}, mode);
    return mb.build();
  };
  const double lu = std::log(1.3), ld = -std::log(0.9);
  CHECK(first_entry(Symmetrize::average).symmetric);
  CHECK(first_entry(Symmetrize::average).dense()->logk[0] == Approx(0.5 * (lu + ld)));
  CHECK(first_entry(Symmetrize::conservative).dense()->logk[0] == Approx(lu));
  const Model none = first_entry(Symmetrize::none);
  CHECK(none.dense()->logk == std::vector{0.5 * (lu + ld), 0.5 * (lu - ld)});
}

TEST_CASE("bad input raises model_error naming the item", "[model][validation]") {
  SECTION("mismatched shapes") {
    CHECK_THROWS_WITH(basic().set_nominal("cr", "sig", std::vector{1.0}),
                      Contains("process 'sig'") && Contains("channel 'cr'") && Contains("1 bins") && Contains("has 2"));
    CHECK_THROWS_WITH(basic().set_data("sr", std::vector{1.0, 2.0}), Contains("data histogram") && Contains("channel 'sr'"));
    CHECK_THROWS_WITH(basic().set_nominal("sr", "sig", std::vector{1.0, 2.0, 3.0}), Contains("nominal histogram set twice") &&
                                                                                         Contains("process 'sig'"));
    CHECK_THROWS_WITH(basic().set_variances("sr", "bkg", std::vector{1.0, 1.0}), Contains("template variances of process 'bkg'"));
    CHECK_THROWS_WITH(basic().set_variances("sr", "sig", std::vector{1.0, 1.0, 1.0}).set_variances("sr", "sig", std::vector{1.0, 1.0, 1.0}),
                      Contains("template variances set twice"));
    CHECK_THROWS_WITH(basic().add_shape_variation("jes", "sr", "sig", std::vector{1.0, 2.0, 3.0}, std::vector{1.0}),
                      Contains("down variation of systematic 'jes'"));
    Model m = test::random_model({});
    m.dense()->logk.pop_back();
    CHECK_THROWS_WITH(m.validate(), Contains("Model::templates' logk") && Contains("nbins_full × nprocs × 2 × nsyst"));
    m = test::random_model({});
    m.data.push_back(1.0);
    CHECK_THROWS_WITH(m.validate(), Contains("Model::data"));
    m = test::random_model({});
    m.theta0.clear();
    CHECK_THROWS_WITH(m.validate(), Contains("Model::theta0"));
  }
  SECTION("NaN and infinity") {
    CHECK_THROWS_WITH(basic().set_nominal("sr", "sig", std::vector{1.0, not_a_number, 3.0}).build(), Contains("process 'sig'"));
    auto mb = basic();
    mb.set_nominal("cr", "sig", std::vector{1.0, infinity});
    CHECK_THROWS_WITH(mb.build(), Contains("nominal yield of process 'sig' in channel 'cr' bin 1") && Contains("not finite"));
    auto mv = basic();
    mv.add_shape_variation("jes", "sr", "bkg", std::vector{5.0, not_a_number, 5.0});
    CHECK_THROWS_WITH(mv.build(), Contains("systematic 'jes'") && Contains("process 'bkg'") && Contains("channel 'sr' bin 1"));
    auto mk = basic();
    mk.add_norm_variation("jes", "sr", "bkg", infinity);
    CHECK_THROWS_WITH(mk.build(), Contains("systematic 'jes'") && Contains("finite"));
    auto md = basic();
    md.set_data("cr", std::vector{1.0, not_a_number});
    CHECK_THROWS_WITH(md.build(), Contains("observed count in channel 'cr' bin 1"));
    Model m = test::random_model({});
    m.dense()->logk[5] = not_a_number;
    CHECK_THROWS_WITH(m.validate(), Contains("systematic 'syst0'") && Contains("not finite"));
  }
  SECTION("negative yields: an error unless allowed") {
    auto mb = basic();
    mb.set_nominal("cr", "sig", std::vector{-1.0, 2.0});
    CHECK_THROWS_WITH(mb.build(), Contains("process 'sig' in channel 'cr' bin 0") && Contains("negative") &&
                                      Contains("allow_negative_yields"));
    mb.allow_negative_yields();
    CHECK_NOTHROW(mb.build());
    auto md = basic();
    md.set_data("sr", std::vector{1.0, -2.0, 3.0});
    CHECK_THROWS_WITH(md.build(), Contains("channel 'sr' bin 1") && Contains("non-negative"));
  }
  SECTION("zero nominal with a non-zero variation") {
    auto mb = basic();
    mb.set_nominal("cr", "sig", std::vector{1.0, 0.0});
    mb.add_shape_variation("jes", "cr", "sig", std::vector{0.5, 1.0});
    CHECK_THROWS_WITH(mb.build(), Contains("systematic 'jes'") && Contains("process 'sig'") && Contains("channel 'cr' bin 1") &&
                                      Contains("nominal yield is zero"));
    Model m = test::random_model({});  // the last process is absent in bin 1
    m.dense()->logk[static_cast<std::size_t>((1 * 3 + 2) * m.ncoef())] = 0.1;
    CHECK_THROWS_WITH(m.validate(), Contains("process 'bkg2' in channel 'ch0' bin 1") && Contains("nominal yield is zero"));
  }
  SECTION("duplicate and unknown names") {
    CHECK_THROWS_WITH(basic().add_channel("sr", 2), Contains("duplicate channel name 'sr'"));
    CHECK_THROWS_WITH(basic().add_process("bkg"), Contains("duplicate process name 'bkg'"));
    CHECK_THROWS_WITH(basic().add_systematic("jes"), Contains("duplicate systematic name 'jes'"));
    CHECK_THROWS_WITH(basic().set_nominal("vr", "bkg", std::vector{1.0}), Contains("unknown channel 'vr'"));
    CHECK_THROWS_WITH(basic().set_nominal("sr", "ttbar", std::vector{1.0, 1.0, 1.0}), Contains("unknown process 'ttbar'"));
    CHECK_THROWS_WITH(basic().add_norm_variation("lumi", "sr", "bkg", 1.1), Contains("unknown systematic 'lumi'"));
    CHECK_THROWS_WITH(basic().add_norm_variation("jes", "sr", "bkg", 1.1).add_norm_variation("jes", "sr", "bkg", 1.2),
                      Contains("booked twice"));
    CHECK_THROWS_WITH(basic().add_norm_variation("jes", "cr", "sig", 1.1).build(),
                      Contains("process 'sig' in channel 'cr', which has no nominal histogram there"));
    Model m = test::random_model({});
    m.systematics[2].name = m.systematics[0].name;
    CHECK_THROWS_WITH(m.validate(), Contains("duplicate systematic name 'syst0'"));
  }
  SECTION("structure") {
    ModelBuilder mb;
    mb.add_channel("c", 2).add_process("p").set_nominal("c", "p", std::vector{1.0, 1.0});
    CHECK_THROWS_WITH(mb.build(), Contains("channel 'c' has no data"));
    CHECK_THROWS_WITH(basic().add_channel("m", 2, true).set_data("m", std::vector{1.0, 1.0}), Contains("channel 'm' is masked"));
    CHECK_THROWS_WITH(basic().add_norm_variation("jes", "sr", "bkg", -1.1).build(), Contains("positive"));
    Model m = test::random_model({});
    std::swap(m.channels[0], m.channels[1]);
    CHECK_THROWS_WITH(m.validate(), Contains("masked channels must come last"));
    ModelBuilder free_unbooked = basic();
    free_unbooked.add_systematic("bkg_rate", {.constrained = false});
    CHECK_THROWS_WITH(free_unbooked.build(), Contains("systematic 'bkg_rate' is unconstrained but varies no fitted bin"));
    free_unbooked.add_norm_variation("bkg_rate", "sr", "bkg", 1.5);
    CHECK_NOTHROW(free_unbooked.build());
    m = test::random_model({});
    m.constraint_weights[1] = -1;
    CHECK_THROWS_WITH(m.validate(), Contains("constraint weight of systematic 'syst1'"));
  }
}

TEST_CASE("external terms and POI priors are validated", "[model][validation][external]") {
  Model m = test::random_model({});
  m.external_terms = {ExternalTerm{"ext", {"syst0", "jes"}, {}, {}, {}, {}}};
  CHECK_THROWS_WITH(m.validate(), Contains("external term 'ext' names parameter 'jes'"));
  m.external_terms = {ExternalTerm{"ext", {"syst0", "syst0"}, {}, {}, {}, {}}};
  CHECK_THROWS_WITH(m.validate(), Contains("names parameter 'syst0' twice"));
  m.external_terms = {ExternalTerm{"ext", {"syst0"}, {1.0, 2.0}, {}, {}, {}}};
  CHECK_THROWS_WITH(m.validate(), Contains("gradient"));
  m.external_terms = {ExternalTerm{"ext", {"syst0"}, {}, {0}, {1}, {1.0}}};
  CHECK_THROWS_WITH(m.validate(), Contains("Hessian entry (0, 1) is outside its 1 parameters"));
  ExternalTerm t{"ext", {"syst0", "syst1"}, {}, {}, {}, {}};
  CHECK_THROWS_WITH(t.set_dense_hessian({1.0}), Contains("expected 2 × 2"));
  m.external_terms = {ExternalTerm{"upper", {"syst0", "syst1"}, {}, {0, 0, 1}, {0, 1, 1}, {1.0, 0.5, 1.0}}};  // one triangle
  CHECK_THROWS_WITH(m.validate(), Contains("external term 'upper': Hessian entry (0, 1)") && Contains("both triangles"));
  m.external_terms = {ExternalTerm{"a", {"syst0"}, {}, {}, {}, {}}, ExternalTerm{"a", {"syst1"}, {}, {}, {}, {}}};
  CHECK_THROWS_WITH(m.validate(), Contains("duplicate external term name 'a'"));
  m.external_terms.clear();
  m.poi_prior_weights = {1.0, 2.0};
  m.poi_prior_centres = {1.0, 1.0};
  CHECK_THROWS_WITH(m.validate(), Contains("Model::poi_prior_weights"));
  m.poi_prior_weights = {-1.0};
  m.poi_prior_centres = {1.0};
  CHECK_THROWS_WITH(m.validate(), Contains("prior of POI 'sig0'"));
}

TEST_CASE("likelihood calls with the wrong shapes or options are rejected", "[likelihood][validation]") {
  SerialLikelihood nll(test::random_model({}));
  CHECK_THROWS_WITH(nll.value(std::vector{1.0, 2.0}), Contains("2 entries") && Contains("6 parameters"));
  CHECK_THROWS_WITH(nll.set_data(std::vector{1.0}), Contains("12 counts"));
  CHECK_THROWS_WITH(nll.set_data(std::vector<double>(12, -1.0)), Contains("channel 'ch0' bin 0"));
  CHECK_THROWS_WITH(nll.parameter_index("lumi"), Contains("unknown parameter 'lumi'"));
  CHECK(nll.parameter_index("syst2") == 3);
  std::vector<double> x = nll.default_parameters(), g(3);
  CHECK_THROWS_WITH(nll.value_grad(ConstBlockView<double>(x.data(), 6, 1), std::span<double>{}, BlockView<double>(g.data(), 3, 1)),
                    Contains("gradient output is 3 × 1, expected 6 × 1"));
  // A shard used directly checks its data too, naming the global bin.
  Shard<cpu::Serial> shard(std::make_shared<const Model>(test::random_model({})), BinRange{4, 8});
  CHECK_THROWS_WITH(shard.set_data(std::vector{1.0, 2.0, -1.0, 3.0}, std::vector{1.0, 2.0, 1.0, 3.0}), Contains("global bin 6"));
  LikelihoodOptions bad;
  bad.hessian_block_rows = 0;
  CHECK_THROWS_AS(SerialLikelihood(test::random_model({}), {}, bad), std::invalid_argument);
  bad = {};
  bad.shards = 100;
  CHECK_THROWS_WITH(SerialLikelihood(test::random_model({}), {}, bad), Contains("100 shards"));
}
