// SPDX-License-Identifier: MIT
// write_rabbit → read_rabbit gives back the model (and the same likelihood), dense and sparse.
#include <catch2/catch.hpp>

#include "fitlib/fit.hpp"
#include "fitlib/io/rabbit.hpp"
#include "fitlib/io/rabbit_writer.hpp"
#include "demo_analysis.hpp"
#include "model_checks.hpp"
#include "random_model.hpp"
#include "temp_dir.hpp"

using namespace fitlib;

namespace {

Model rich_model(bool asymmetric) {
  test::RandomModelSpec sp;
  sp.asymmetric = asymmetric;
  sp.template_stats = true;
  sp.nsyst = 6;
  sp.unconstrained = 2;
  sp.signals = 2;
  sp.procs = 4;
  Model m = test::random_model(sp);
  m.theta0.assign(m.theta0.size(), 0.0);  // rabbit tensors have no centres
  m.groups = {{"pair", {2, 3}}, {"all_constrained", {2, 3, 4, 5}}};
  m.nois = {1};
  test::add_data_variances(m);
  ExternalTerm t;
  t.name = "prefit";
  t.parameters = {"syst3", "sig0"};
  t.gradient = {0.1, -0.2};
  t.set_dense_hessian({2.0, 0.5, 0.5, 1.0});
  m.external_terms.push_back(t);
  return m;
}

template <class Lik>
void check_same_likelihood(const Model& a, const Model& b) {
  Lik la(a), lb(b);
  const auto x = test::test_point(a, 5, false);
  std::vector<double> ga(x.size()), gb(x.size());
  CHECK(la.value_grad(x, ga) == Approx(lb.value_grad(x, gb)).epsilon(1e-14));
  CHECK(test::rel_error(ga, gb) < 1e-14);
}

}  // namespace

TEST_CASE("io: write_rabbit round trip", "[io]") {
  for (const bool asymmetric : {false, true})
    for (const bool sparse : {false, true}) {
      INFO("asymmetric " << asymmetric << " sparse " << sparse);
      Model m = rich_model(asymmetric);
      if (sparse) m.make_sparse();
      const test::TempDir dir;
      const std::string path = dir / "roundtrip.hdf5";
      io::write_rabbit(path, m);
      const io::RabbitTensor in = io::read_rabbit(path);
      const Model& r = in.model;
      CHECK((in.model.sparse() != nullptr) == sparse);
      test::check_same_model(r, m);
      CHECK(r.external_terms[0].hessian_values.size() == m.external_terms[0].hessian_values.size());
      // Written in the asymmetric layout by default (rabbit's assumption without a meta pickle): H = 0 added.
      CHECK_FALSE(r.symmetric);
      REQUIRE(in.meta);
      CHECK(in.meta->symmetric_tensor == std::optional<bool>(false));
      CHECK(r.systematic_type == SystematicType::log_normal);
      if (sparse) check_same_likelihood<SparseSerialLikelihood>(m, r);
      else check_same_likelihood<SerialLikelihood>(m, r);
    }
}

TEST_CASE("io: write_rabbit records systematic_type and symmetric_tensor in rabbit's meta pickle", "[io][pickle]") {
  for (const SystematicType type : {SystematicType::normal, SystematicType::log_normal})
    for (const bool asymmetric : {false, true})
      for (const bool layout : {false, true}) {
        INFO("normal " << (type == SystematicType::normal) << " asymmetric " << asymmetric << " asymmetric_layout " << layout);
        Model m = rich_model(asymmetric);
        m.systematic_type = type;
        const test::TempDir dir;
        const std::string path = dir / "meta.hdf5";
        io::write_rabbit(path, m, {.asymmetric_layout = layout});
        const io::RabbitTensor in = io::read_rabbit(path);  // no systematic_type option: it comes from meta
        CHECK(in.model.systematic_type == type);
        CHECK(in.model.symmetric == !(asymmetric || layout));
        REQUIRE(in.meta);
        CHECK(in.meta->systematic_type == type);
        CHECK(in.meta->symmetric_tensor == std::optional<bool>(in.model.symmetric));
        check_same_likelihood<SerialLikelihood>(m, in.model);
        // channel_info: one entry per channel, in order, with its masked flag and one integer axis of its size
        const io::pickle::Value* ci = in.meta->pickle.find("channel_info");
        REQUIRE(ci);
        REQUIRE(ci->entries.size() == m.channels.size());
        for (std::size_t c = 0; c < m.channels.size(); ++c) {
          CHECK(ci->entries[c].first.text == m.channels[c].name);
          const io::pickle::Value& info = ci->entries[c].second;
          REQUIRE(info.find("masked"));
          CHECK(info.find("masked")->boolean == m.channels[c].masked);
          const io::pickle::Value& axis = info.find("axes")->items.at(0);
          CHECK(axis.text == "hist.axis.Integer");
          const io::pickle::Value& state = axis.state.at(0).find("_ax")->state.at(0);
          CHECK(state.items.at(1).integer == m.channels[c].nbins);
        }
        // Asking for the other type contradicts the meta: a usage_error.
        const SystematicType other = type == SystematicType::normal ? SystematicType::log_normal : SystematicType::normal;
        CHECK_THROWS_AS(io::read_rabbit(path, {.systematic_type = other}), usage_error);
      }
}

TEST_CASE("io: write_rabbit refuses what rabbit tensors cannot hold", "[io]") {
  Model m = rich_model(false);
  m.theta0[3] = 0.5;
  const test::TempDir dir;
  CHECK_THROWS_WITH(io::write_rabbit(dir / "bad.hdf5", m), Catch::Contains("constraint centres"));
}

TEST_CASE("io: the shipped demo tensor is the demo analysis", "[io]") {
  // examples/data/demo_analysis.hdf5 is written by examples/write_demo_tensor.cpp; rerun it when
  // demo_analysis.hpp changes.
  const io::RabbitTensor in = io::read_rabbit(std::string(FITLIB_TEST_DATA_DIR) + "/../../examples/data/demo_analysis.hdf5");
  const Model m = examples::demo_analysis();
  const Model& r = in.model;
  CHECK(r.dense()->nominal == m.dense()->nominal);
  CHECK(r.dense()->logk == m.dense()->logk);
  test::check_same_model(r, m);
}
