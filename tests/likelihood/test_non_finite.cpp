// SPDX-License-Identifier: MIT
// Likelihood::explain_non_finite names the bin, process and input behind a non-finite NLL or gradient.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>

#include "fitlib/fit.hpp"
#include "random_model.hpp"

using namespace fitlib;
using Catch::Matchers::Contains;

namespace {

Model base_model(bool template_stats) {
  test::RandomModelSpec sp;
  sp.bins = 10;
  sp.procs = 3;
  sp.nsyst = 4;
  sp.asymmetric = false;
  sp.zero_counts = false;
  sp.template_stats = template_stats;
  sp.seed = 3;
  return test::random_model(sp);
}

/// Whether a fit from the default point stops there because the objective is not finite (the value,
/// or its gradient: FitStatus::not_finite and its gradient counterpart).
bool stops_not_finite(SerialLikelihood& nll) {
  const FitResult r = fit(nll, TrustRegion<Exact>(TrustRegionOptions{}));
  return std::string(to_string(r.status)).find("not finite") != std::string::npos;
}

}  // namespace

TEST_CASE("explain_non_finite: nothing to explain at a finite point", "[likelihood][non_finite]") {
  const Model m = base_model(true);
  SerialLikelihood nll(m);
  auto x = nll.default_parameters();
  CHECK(nll.explain_non_finite(x).empty());
  x[2] = std::nan("");
  CHECK_THAT(nll.explain_non_finite(x), Contains("parameter 'syst1' is nan"));
  CHECK_THROWS_AS(nll.explain_non_finite(std::vector<double>(2, 0.0)), usage_error);
}

TEST_CASE("explain_non_finite: a bin with zero expectation and observed events", "[likelihood][non_finite]") {
  for (const bool template_stats : {false, true}) {
    INFO((template_stats ? "with" : "without") << " bin-by-bin statistics");
    Model m = base_model(template_stats);
    const index_t P = m.nprocs(), nc = m.ncoef(), b = 6;
    for (index_t p = 0; p < P; ++p) {
      m.dense()->nominal[static_cast<std::size_t>(b * P + p)] = 0;
      std::fill_n(m.dense()->logk.begin() + (b * P + p) * nc, nc, 0.0);
    }
    m.data[static_cast<std::size_t>(b)] = 25;
    SerialLikelihood nll(m);
    const auto x = nll.default_parameters();
    REQUIRE(!std::isfinite(nll.value(x)));
    REQUIRE(stops_not_finite(nll));
    const std::string why = nll.explain_non_finite(x);
    INFO(why);
    CHECK_THAT(why, Contains("the NLL is"));
    CHECK_THAT(why, Contains("channel 'ch0' bin 6 (global bin 6)"));
    CHECK_THAT(why, Contains("expected count is 0 while 25 are observed"));
    CHECK_THAT(why, Contains("every process's yield is zero"));
  }
}

TEST_CASE("explain_non_finite: an expectation too small for the data", "[likelihood][non_finite]") {
  Model m = base_model(false);
  const index_t P = m.nprocs(), b = 4;
  for (index_t p = 0; p < P; ++p) m.dense()->nominal[static_cast<std::size_t>(b * P + p)] = 1e-310;  // denormal
  m.data[static_cast<std::size_t>(b)] = 30;
  SerialLikelihood nll(m);
  const std::string why = nll.explain_non_finite(nll.default_parameters());
  INFO(why);
  CHECK_THAT(why, Contains("channel 'ch0' bin 4"));
  CHECK_THAT(why, Contains("too small for the 30 observed"));
}

TEST_CASE("explain_non_finite: a logk of 1e300 overflows the gradient, not the NLL", "[likelihood][non_finite]") {
  Model m = base_model(true);
  const index_t P = m.nprocs(), nc = m.ncoef(), b = 2, p = 1, s = 2;  // syst3 is centred at 0.2, syst2 at 0
  m.dense()->logk[static_cast<std::size_t>((b * P + p) * nc + s)] = 1e300;
  SerialLikelihood nll(m);
  const auto x = nll.default_parameters();  // θ₂ = 0 there, so the yields stay finite
  REQUIRE(std::isfinite(nll.value(x)));
  REQUIRE(stops_not_finite(nll));
  const std::string why = nll.explain_non_finite(x);
  INFO(why);
  CHECK_THAT(why, Contains("the gradient is not finite (∂NLL/∂syst2"));
  CHECK_THAT(why, Contains("channel 'ch0' bin 2 (global bin 2) process 'bkg1'"));
  CHECK_THAT(why, Contains("systematic 'syst2' has logk 1e+300 (hlogk)"));
}

TEST_CASE("explain_non_finite: an extreme nominal yield", "[likelihood][non_finite]") {
  Model m = base_model(false);
  const index_t P = m.nprocs(), b = 7, p = 1;
  m.dense()->nominal[static_cast<std::size_t>(b * P + p)] = 1e300;
  SerialLikelihood nll(m);
  const std::string why = nll.explain_non_finite(nll.default_parameters());
  INFO(why);
  CHECK_THAT(why, Contains("channel 'ch0' bin 7"));
  CHECK_THAT(why, Contains("process 'bkg1'"));
  CHECK_THAT(why, Contains("its nominal yield is 1e+300 (hnorm)"));
}
