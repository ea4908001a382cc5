// SPDX-License-Identifier: MIT
// The trust-region end game: steps judged where f − f⁺ is rounding noise, and no "converged" without a minimum.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "fitlib/fit.hpp"
#include "fitlib/io/rabbit.hpp"
#include "demo_analysis.hpp"
#include "plugin_path.hpp"
#include "random_model.hpp"

using namespace fitlib;

namespace {

/// f = 100 + Σ wᵢ(dᵢ⁴ + 1e-6·dᵢ²), dᵢ = xᵢ − cᵢ, its value rounded to a multiple of q = 1e-11 (450·eps·|f|,
/// the value noise the likelihood's n·(ln ν − ln n) had before the log1p form, within the step rule's
/// 1e3·eps·|f|), its gradient and Hessian exact. Newton converges linearly on the quartic, so its
/// predicted decreases pass through the whole range below q.
struct RoundedQuartic {
  std::vector<double> w{1, 3, 0.5, 2}, c{0.3, -0.7, 1.1, 0.05};
  double q = 1e-11, eps2 = 1e-6;
  index_t size() const { return static_cast<index_t>(w.size()); }
  double at(const double* x) const {
    double f = 100;
    for (std::size_t i = 0; i < w.size(); ++i) {
      const double d = x[i] - c[i];
      f += w[i] * (d * d * d * d + eps2 * d * d);
    }
    return std::round(f / q) * q;
  }
  void value(ConstBlockView<double> X, std::span<double> f) const {
    for (index_t j = 0; j < X.cols; ++j) f[static_cast<std::size_t>(j)] = at(X.col(j));
  }
  void value_grad(ConstBlockView<double> X, std::span<double> f, BlockView<double> G) const {
    if (!f.empty()) value(X, f);
    for (index_t j = 0; j < X.cols; ++j)
      for (index_t i = 0; i < size(); ++i) {
        const double d = X(i, j) - c[static_cast<std::size_t>(i)];
        G(i, j) = w[static_cast<std::size_t>(i)] * (4 * d * d * d + 2 * eps2 * d);
      }
  }
  void hessp(ConstBlockView<double> X, ConstBlockView<double> V, BlockView<double> HV) const {
    for (index_t k = 0; k < V.cols; ++k)
      for (index_t i = 0; i < size(); ++i) {
        const double d = X(i, X.cols == 1 ? 0 : k) - c[static_cast<std::size_t>(i)];
        HV(i, k) = w[static_cast<std::size_t>(i)] * (12 * d * d + 2 * eps2) * V(i, k);
      }
  }
};

/// f = −exp(x₀) + ½x₁²: unbounded below, its Hessian indefinite everywhere.
struct ExpDown {
  index_t size() const { return 2; }
  void value(ConstBlockView<double> X, std::span<double> f) const {
    for (index_t j = 0; j < X.cols; ++j) f[static_cast<std::size_t>(j)] = -std::exp(X(0, j)) + 0.5 * X(1, j) * X(1, j);
  }
  void value_grad(ConstBlockView<double> X, std::span<double> f, BlockView<double> G) const {
    if (!f.empty()) value(X, f);
    for (index_t j = 0; j < X.cols; ++j) {
      G(0, j) = -std::exp(X(0, j));
      G(1, j) = X(1, j);
    }
  }
  void hessp(ConstBlockView<double> X, ConstBlockView<double> V, BlockView<double> HV) const {
    for (index_t k = 0; k < V.cols; ++k) {
      HV(0, k) = -std::exp(X(0, X.cols == 1 ? 0 : k)) * V(0, k);
      HV(1, k) = V(1, k);
    }
  }
};

/// The NLL of one Poisson bin ν = μ·s + b with n = 0 observed and a vanishing background: f = ν is
/// linear in μ and unbounded below (S1's toys with backgrounds scaled by 1e-4, μ = 0, a linear POI),
/// plus a unit Gaussian constraint on a nuisance that scales ν.
struct VanishingBackground {
  double s = 1e4, b = 1e-4;
  index_t size() const { return 2; }
  double nu(const double* x) const { return (x[0] * s + b) * std::exp(0.1 * x[1]); }
  void value(ConstBlockView<double> X, std::span<double> f) const {
    for (index_t j = 0; j < X.cols; ++j) f[static_cast<std::size_t>(j)] = nu(X.col(j)) + 0.5 * X(1, j) * X(1, j);
  }
  void value_grad(ConstBlockView<double> X, std::span<double> f, BlockView<double> G) const {
    if (!f.empty()) value(X, f);
    for (index_t j = 0; j < X.cols; ++j) {
      const double e = std::exp(0.1 * X(1, j));
      G(0, j) = s * e;
      G(1, j) = 0.1 * nu(X.col(j)) + X(1, j);
    }
  }
  void hessp(ConstBlockView<double> X, ConstBlockView<double> V, BlockView<double> HV) const {
    for (index_t k = 0; k < V.cols; ++k) {
      const double* x = X.col(X.cols == 1 ? 0 : k);
      const double e = std::exp(0.1 * x[1]);
      HV(0, k) = 0.1 * s * e * V(1, k);
      HV(1, k) = 0.1 * s * e * V(0, k) + (0.01 * nu(x) + 1) * V(1, k);
    }
  }
};

/// f = 1e20 − 1e-30·x: unbounded below, but no step changes its value in double precision, and its
/// gradient is far below gtol's default 1e-4: a collapsed radius used to pass for a minimum here.
struct FlatSlope {
  index_t size() const { return 1; }
  void value(ConstBlockView<double> X, std::span<double> f) const {
    for (index_t j = 0; j < X.cols; ++j) f[static_cast<std::size_t>(j)] = 1e20 - 1e-30 * X(0, j);
  }
  void value_grad(ConstBlockView<double> X, std::span<double> f, BlockView<double> G) const {
    if (!f.empty()) value(X, f);
    for (index_t j = 0; j < X.cols; ++j) G(0, j) = -1e-30;
  }
  void hessp(ConstBlockView<double>, ConstBlockView<double> V, BlockView<double> HV) const {
    for (index_t k = 0; k < V.cols; ++k) HV(0, k) = 0 * V(0, k);
  }
};

/// NaN gradient, finite value.
struct NanGradientAtStart {
  index_t size() const { return 1; }
  void value(ConstBlockView<double> X, std::span<double> f) const {
    for (index_t j = 0; j < X.cols; ++j) f[static_cast<std::size_t>(j)] = X(0, j) * X(0, j);
  }
  void value_grad(ConstBlockView<double> X, std::span<double> f, BlockView<double> G) const {
    if (!f.empty()) value(X, f);
    for (index_t j = 0; j < X.cols; ++j) G(0, j) = std::numeric_limits<double>::quiet_NaN();
  }
  void hessp(ConstBlockView<double>, ConstBlockView<double> V, BlockView<double> HV) const {
    for (index_t k = 0; k < V.cols; ++k) HV(0, k) = 2 * V(0, k);
  }
};

template <class Sub, class F>
FitStatus minimise(F& f, std::vector<double> x0, TrustRegionOptions o, TrustRegionState<Sub>& s, HistoryRecorder& h) {
  const TrustRegion<Sub> tr(o);
  tr.init(f, s, x0);
  return tr.run(f, s, h);
}

}  // namespace

TEMPLATE_TEST_CASE("end game: a value with rounding noise above eps·|f| still converges by EDM", "[minimize][endgame]", Gltr, SteihaugCG,
                   Exact) {
  RoundedQuartic f;
  TrustRegionOptions o;
  o.gtol = 0;
  o.edm_tol = 1e-14;  // far below the value's resolution 1e-11: only the gradients can resolve it
  TrustRegionState<TestType> s;
  HistoryRecorder h;
  const FitStatus status = minimise<TestType>(f, {2.0, -2.0, -1.0, 1.5}, o, s, h);
  CHECK(status == FitStatus::converged_edm);
  CHECK(s.last.edm < o.edm_tol);
  for (std::size_t i = 0; i < f.c.size(); ++i) CHECK(std::abs(s.x[i] - f.c[i]) < 3e-4);  // EDM 1e-14, curvature 2e-6·wᵢ: |dᵢ| ≲ 1e-4
  index_t by_slope = 0;
  for (const auto& it : h.history()) by_slope += it.slope_judged;
  CHECK(by_slope >= 1);              // the noise did defeat ρ = (f − f⁺)/pred
  CHECK(s.iteration < 100);          // no run of rejections collapsing the radius
}

TEMPLATE_TEST_CASE("end game: with edm_tol = 0 a noisy value stops for want of precision, not at maxiter", "[minimize][endgame]", Gltr,
                   SteihaugCG, Exact) {
  RoundedQuartic f;
  TrustRegionOptions o;  // the library's defaults: edm_tol = 0, maxiter = 200·n = 800
  o.gtol = 0;
  TrustRegionState<TestType> s;
  HistoryRecorder h;
  const FitStatus status = minimise<TestType>(f, {2.0, -2.0, -1.0, 1.5}, o, s, h);
  index_t by_slope = 0;
  for (const auto& it : h.history()) by_slope += it.slope_judged;
  INFO(to_string(status) << " after " << s.iteration << " iterations, EDM " << s.last.edm << ", " << by_slope << " judged by the slope");
  CHECK(status == FitStatus::converged_precision);
  CHECK(s.last.edm <= 4 * std::numeric_limits<double>::epsilon() * std::abs(s.f));  // below f's rounding, 9e-14
  CHECK(by_slope >= 1);
  CHECK(s.iteration < 100);  // maxiter is 800
  for (std::size_t i = 0; i < f.c.size(); ++i) CHECK(std::abs(s.x[i] - f.c[i]) < 1e-3);  // EDM 9e-14, curvature 2e-6·wᵢ: |dᵢ| ≲ 3e-4
}

TEMPLATE_TEST_CASE("end game: an increase of f above its rounding noise is never overruled by the slope", "[minimize][endgame]", Gltr,
                   SteihaugCG, Exact) {
  RoundedQuartic f;
  TrustRegionOptions o;
  o.gtol = 0;
  o.edm_tol = 1e-14;
  TrustRegionState<TestType> s;
  HistoryRecorder h;
  minimise<TestType>(f, {2.0, -2.0, -1.0, 1.5}, o, s, h);
  const double noise = 1e3 * std::numeric_limits<double>::epsilon();
  for (const auto& it : h.history()) {
    if (!it.slope_judged) continue;
    INFO("iteration " << it.iteration << ": f − f⁺ = " << it.f - it.f_trial);
    CHECK(it.f - it.f_trial >= -noise * std::max(std::abs(it.f), std::abs(it.f_trial)));
  }
}

TEMPLATE_TEST_CASE("end game: a function unbounded below never converges", "[minimize][endgame]", Gltr, SteihaugCG, Exact) {
  TrustRegionOptions o;
  o.gtol = 0;
  o.edm_tol = 1e-12;
  o.maxiter = 2000;
  {
    ExpDown f;
    TrustRegionState<TestType> s;
    HistoryRecorder h;
    const FitStatus status = minimise<TestType>(f, {0.0, 1.0}, o, s, h);
    INFO(to_string(status) << " after " << s.iteration << " iterations, f = " << s.f);
    CHECK_FALSE(converged(status));
  }
  {
    VanishingBackground f;
    TrustRegionState<TestType> s;
    HistoryRecorder h;
    const FitStatus status = minimise<TestType>(f, {0.0, 0.0}, o, s, h);
    INFO(to_string(status) << " after " << s.iteration << " iterations, f = " << s.f);
    CHECK_FALSE(converged(status));
  }
  {
    FlatSlope f;
    TrustRegionState<TestType> s;
    HistoryRecorder h;
    CHECK(minimise<TestType>(f, {0.0}, o, s, h) == FitStatus::stalled);
    CHECK(s.last.edm == std::numeric_limits<double>::infinity());  // H = 0: no minimum to measure a distance to
  }
}

TEST_CASE("end game: a non-finite gradient at the start is told from a non-finite value", "[minimize][endgame]") {
  NanGradientAtStart f;
  TrustRegionState<Gltr> s;
  HistoryRecorder h;
  CHECK(minimise<Gltr>(f, {1.0}, {}, s, h) == FitStatus::not_finite_gradient);
  CHECK(minimise<Gltr>(f, {std::numeric_limits<double>::infinity()}, {}, s, h) == FitStatus::not_finite);
  CHECK(to_string(FitStatus::not_finite_gradient).find("gradient") != std::string_view::npos);
  CHECK_FALSE(converged(FitStatus::stalled));
}

TEST_CASE("end game: rabbit's test tensor without bin-by-bin statistics, trust-krylov as trust-ncg", "[minimize][endgame][rabbit]") {
  // History: with the Poisson term computed as n·(ln ν − ln n), the value rounded to ~1e-11 (bins with
  // n up to 5e3), 250·eps·|f|: ρ was noise from EDM 2e-12 on, and trust-krylov stopped there, 9e-6
  // relative off in σ. The log1p form (likelihood/cell.hpp) removed most of that noise; the slope rule
  // still judges one step of each fit here (measured: trust-krylov 21 iterations, trust-ncg 23, one
  // slope-judged step each, final EDM 6e-18 and 2e-19), but RoundedQuartic above is what proves the
  // rule. This test is the end-to-end check: both subproblems reach edm_tol and agree to 1e-7 in x and σ.
  const io::RabbitTensor in = io::read_rabbit(std::string(FITLIB_TEST_DATA_DIR) + "/rabbit/test_tensor.hdf5");
  LikelihoodOptions lo;
  lo.bin_by_bin.enabled = false;
  SerialLikelihood lik(in.model, {}, lo);
  TrustRegionOptions o;  // fitlib-fit's defaults
  o.gtol = 0;
  o.edm_tol = 1e-12;
  HistoryRecorder hk, hn;
  const FitResult krylov = fit(lik, TrustRegion<Gltr>(o), {}, hk);
  const FitResult ncg = fit(lik, TrustRegion<SteihaugCG>(o), {}, hn);
  index_t by_slope_krylov = 0, by_slope_ncg = 0;
  for (const auto& it : hk.history()) by_slope_krylov += it.slope_judged;
  for (const auto& it : hn.history()) by_slope_ncg += it.slope_judged;
  INFO("trust-krylov: " << to_string(krylov.status) << ", " << krylov.iterations << " iterations, EDM " << krylov.edm << ", "
                        << by_slope_krylov << " judged by the slope");
  INFO("trust-ncg: " << to_string(ncg.status) << ", " << ncg.iterations << " iterations, EDM " << ncg.edm << ", " << by_slope_ncg
                     << " judged by the slope");
  CHECK(krylov.status == FitStatus::converged_edm);
  CHECK(ncg.status == FitStatus::converged_edm);
  CHECK(krylov.edm < o.edm_tol);
  CHECK(ncg.edm < o.edm_tol);
  for (std::size_t i = 0; i < krylov.x.size(); ++i) {
    INFO(krylov.names[i]);
    CHECK(std::abs(krylov.x[i] - ncg.x[i]) < 1e-7 * ncg.uncertainties[i]);
    CHECK(std::abs(krylov.uncertainties[i] / ncg.uncertainties[i] - 1) < 1e-7);
  }
}

namespace {

/// Asimov data at the defaults of `lik`, then a fit with gtol = 0 (fitlib-fit's default) and the given edm_tol.
template <class Sub, class L>
FitResult fit_asimov(L& lik, double edm_tol) {
  lik.set_data(asimov(lik, lik.default_parameters()));
  TrustRegionOptions o;
  o.gtol = 0;
  o.edm_tol = edm_tol;
  o.maxiter = 200;
  return fit(lik, TrustRegion<Sub>(o));
}

/// Every subproblem, with and without edm_tol: an Asimov fit starts at its minimum and must say so
/// within a few iterations, at the defaults.
template <class L>
void check_asimov_fits(L& lik) {
  auto check = [&](const FitResult& r, const char* sub, double edm_tol) {
    INFO(sub << ", edm_tol " << edm_tol << ": " << to_string(r.status) << " after " << r.iterations << " iterations, NLL " << r.nll
              << ", EDM " << r.edm);
    CHECK(r.converged());
    CHECK(r.iterations <= 3);
    const std::vector<double> x0 = lik.default_parameters();
    for (std::size_t i = 0; i < r.x.size(); ++i) CHECK(std::abs(r.x[i] - x0[i]) < 1e-6 * r.uncertainties[i]);
  };
  for (double edm_tol : {1e-12, 0.0}) {
    check(fit_asimov<Gltr>(lik, edm_tol), "trust-krylov", edm_tol);
    check(fit_asimov<SteihaugCG>(lik, edm_tol), "trust-ncg", edm_tol);
    check(fit_asimov<Exact>(lik, edm_tol), "trust-exact", edm_tol);
  }
}

/// Dense and sparse, with and without bin-by-bin statistics.
void check_asimov_fits(const Model& m) {
  for (bool bb : {true, false}) {
    INFO("bin-by-bin statistics " << (bb ? "on" : "off"));
    LikelihoodOptions lo;
    lo.bin_by_bin.enabled = bb;
    Model sparse = m;
    if (!sparse.sparse()) sparse.make_sparse();
    {
      INFO("sparse");
      SparseSerialLikelihood lik(sparse, {}, lo);
      check_asimov_fits(lik);
    }
    if (m.dense()) {
      INFO("dense");
      SerialLikelihood lik(m, {}, lo);
      check_asimov_fits(lik);
    }
  }
}

}  // namespace

TEST_CASE("end game: an Asimov fit starts at its minimum and ends converged at once", "[minimize][endgame][asimov]") {
  // Regression: f ≈ 1e-28 at the start, where the rounding stops that scale with |f| could not fire; with
  // bin-by-bin statistics trust-krylov ran to maxiter (steps rejected with ρ ≈ −1e-5, then accepted steps
  // cycling at EDM 1e-28) and trust-exact stopped with "predicted no decrease". The likelihood's
  // rounding_floor (eps²·Σn) is the level below which no step of f is resolvable.
  SECTION("a tensor of the reported shape: 480 + 20 masked bins, 4 processes, 50 systematics, MC statistics") {
    test::RandomModelSpec sp;
    sp.bins = 480;
    sp.masked_bins = 20;
    sp.procs = 4;
    sp.nsyst = 50;
    sp.template_stats = true;
    sp.zero_counts = false;
    sp.seed = 3;
    check_asimov_fits(test::random_model(sp));
  }
  SECTION("every tensor of tests/ and the demo") {
    const std::string data = FITLIB_TEST_DATA_DIR;
    for (const std::string& path :
         {data + "/rabbit/test_tensor.hdf5", data + "/rabbit/test_tensor_sparse.hdf5", data + "/rabbit/test_tensor_symmetric.hdf5",
          data + "/rabbit/test_tensor_normal.hdf5", data + "/rabbit_fixture/test_tensor_gzip.hdf5",
          data + "/rabbit_fixture/test_tensor_sparse_gzip.hdf5"}) {
      INFO(path);
      check_asimov_fits(io::read_rabbit(path).model);
    }
    check_asimov_fits(examples::demo_analysis());
    // The fixture's normal-systematics tensor is stored with Blosc2 only.
    const std::string plugins = FITLIB_HDF5_PLUGIN_DIR;
    if (!std::filesystem::exists(std::filesystem::path(plugins) / "libh5blosc2.so")) {
      WARN("no Blosc2 HDF5 plugin at " << plugins << " (scripts/install-deps.sh installs it); skipping test_tensor_normal.hdf5");
      return;
    }
    const Model normal = [&] {
      const test::RestorePluginPath restore;
      io::hdf5::set_plugin_search_path({plugins});
      return io::read_rabbit(data + "/rabbit_fixture/test_tensor_normal.hdf5").model;
    }();
    check_asimov_fits(normal);
  }
}

TEST_CASE("end game: the likelihood's rounding floor is proportional to the counts, a replica's to its own, and zero without",
          "[minimize][endgame][asimov]") {
  SerialLikelihood lik(examples::demo_analysis());
  const std::vector<double> own = lik.model().data;
  const double own_floor = lik.rounding_floor();
  REQUIRE(own_floor > 0);
  // Away from f ≈ 0 it lies below f's own rounding, so that it decides only where the terms cancel (Asimov data).
  CHECK(own_floor < std::numeric_limits<double>::epsilon() * std::abs(lik.value(lik.default_parameters())));
  const auto scaled = [&](double k) {
    std::vector<double> v(own);
    for (double& c : v) c *= k;
    return v;
  };

  // A replica's floor is its data's; one that leaves its data empty has the likelihood's.
  std::vector<ReplicaInputs> replicas(2);
  replicas[0].data = scaled(3);
  lik.set_replicas(replicas);
  CHECK(lik.rounding_floor(0) == Approx(3 * own_floor).epsilon(1e-12));
  CHECK(lik.rounding_floor(1) == lik.rounding_floor());

  // Twice the counts, twice the floor: the likelihood's own, and so the empty replica's, not the other replica's.
  lik.set_data(scaled(2));
  CHECK(lik.rounding_floor() == Approx(2 * own_floor).epsilon(1e-12));
  CHECK(lik.rounding_floor(1) == lik.rounding_floor());
  CHECK(lik.rounding_floor(0) == Approx(3 * own_floor).epsilon(1e-12));

  lik.set_data(scaled(0));
  CHECK(lik.rounding_floor() == 0.0);
}
