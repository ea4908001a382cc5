// SPDX-License-Identifier: MIT
// device::LayerFactorization (Exact's dense side on a device, here over HostLayer) against the host's factorization,
// and BasicExact over it against Exact: the subproblem steps and whole fits.
#include <catch2/catch.hpp>

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "fitlib/device/layer_factorization.hpp"
#include "fitlib/fit.hpp"
#include "random_model.hpp"
#include "spd_matrix.hpp"
#include "test_problems.hpp"

using namespace fitlib;

namespace {

using LayerExact = BasicExact<device::LayerFactorization<device::HostLayer>>;

/// A symmetric matrix of known spectrum: Q·diag(d)·Qᵀ for a random orthogonal Q.
Eigen::MatrixXd with_spectrum(const Eigen::VectorXd& d, std::mt19937_64& rng) {
  const Eigen::Index n = d.size();
  std::normal_distribution<double> normal;
  Eigen::MatrixXd a(n, n);
  for (Eigen::Index j = 0; j < n; ++j)
    for (Eigen::Index i = 0; i < n; ++i) a(i, j) = normal(rng);
  const Eigen::MatrixXd q = Eigen::HouseholderQR<Eigen::MatrixXd>(a).householderQ();
  const Eigen::MatrixXd h = q * d.asDiagonal() * q.transpose();
  return 0.5 * (h + h.transpose());
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

double max_abs(const std::vector<double>& a) {
  double m = 0;
  for (double v : a) m = std::max(m, std::abs(v));
  return m;
}

/// A subproblem solver sized for H and at the iterate (g, H).
template <class Solver>
void start_at(Solver& s, const Eigen::VectorXd& g, const Eigen::MatrixXd& H) {
  const auto n = static_cast<index_t>(g.size());
  s.reset(n);
  s.new_iterate(std::span<const double>(g.data(), static_cast<std::size_t>(n)), ConstBlockView<double>(H.data(), n, n));
}

/// The host's factorization and the layer's over HostLayer, both holding H.
struct Both {
  detail::exact::HostFactorization host;
  device::LayerFactorization<device::HostLayer> layer;
};
Both both_holding(const Eigen::MatrixXd& H) {
  const auto n = static_cast<index_t>(H.rows());
  Both b;
  b.host.reset(n, false);
  b.layer.reset(n, false);
  b.host.set_matrix(ConstBlockView<double>(H.data(), n, n));
  b.layer.set_matrix(ConstBlockView<double>(H.data(), n, n));
  return b;
}

}  // namespace

TEST_CASE("LayerFactorization: factor, solves and products equal the host factorization's", "[exact][device_layer]") {
  std::mt19937_64 rng(11);
  const index_t n = 37;
  const Eigen::MatrixXd H = test::spd_matrix(n, 3, rng);
  auto [host, layer] = both_holding(H);
  for (const double lambda : {0.0, 0.5}) {
    REQUIRE(host.factor(lambda) == 0);
    REQUIRE(layer.factor(lambda) == 0);
    std::normal_distribution<double> normal;
    std::vector<double> b(static_cast<std::size_t>(n));
    for (double& v : b) v = normal(rng);
    for (const bool transposed_only : {false, true}) {
      std::vector<double> x = b, y = b;
      if (transposed_only) {
        host.solve_transposed(x.data());
        layer.solve_transposed(y.data());
      } else {
        host.solve(x.data());
        layer.solve(y.data());
      }
      CHECK(max_abs_diff(x, y) <= 1e-12 * max_abs(x));
    }
    std::vector<double> hx(b.size()), hy(b.size());
    host.times(b.data(), lambda, hx.data());
    layer.times(b.data(), lambda, hy.data());
    CHECK(max_abs_diff(hx, hy) <= 1e-13 * max_abs(hx));
  }
}

TEST_CASE("LayerFactorization: a failed factorisation's column and the Moré–Sorensen null vector", "[exact][device_layer]") {
  std::mt19937_64 rng(12);
  const index_t n = 24;
  Eigen::VectorXd d(n);
  for (index_t i = 0; i < n; ++i) d[i] = i < 3 ? -0.5 * (i + 1) : 0.1 + i;
  const Eigen::MatrixXd H = with_spectrum(d, rng);
  auto [host, layer] = both_holding(H);
  for (const double lambda : {0.0, 0.7, 1.2}) {
    INFO("λ = " << lambda);
    const index_t k = host.factor(lambda);
    REQUIRE(k > 0);
    CHECK(layer.factor(lambda) == k);
    const double b_kk = H(k - 1, k - 1) + lambda;
    std::vector<double> v_host(static_cast<std::size_t>(n)), v_layer(static_cast<std::size_t>(n));
    const double delta_host = host.leading_null_vector(k, b_kk, v_host.data());
    const double delta_layer = layer.leading_null_vector(k, b_kk, v_layer.data());
    CHECK(delta_layer >= 0);
    CHECK(std::abs(delta_layer - delta_host) <= 1e-12 * (std::abs(delta_host) + std::abs(b_kk)));
    CHECK(max_abs_diff(v_host, v_layer) <= 1e-11 * max_abs(v_host));
    // vᵀ(H + λI + δ e_k e_kᵀ)v = 0.
    const Eigen::Map<const Eigen::VectorXd> v(v_layer.data(), n);
    const double form = v.dot(H * v) + lambda * v.squaredNorm() + delta_layer * v[k - 1] * v[k - 1];
    CHECK(std::abs(form) <= 1e-10 * (H.norm() + lambda) * v.squaredNorm());
  }
}

namespace {
/// HostLayer whose potrf of a leading block (fewer rows than the whole) fails at its first column: a device routine that
/// rounds the leading block otherwise than the whole matrix.
struct BlockShyLayer : device::HostLayer {
  using HostLayer::HostLayer;
  static inline index_t whole = 0;
  index_t potrf(index_t n, double* a, index_t ld) const { return n < whole ? 1 : HostLayer::potrf(n, a, ld); }
};
}  // namespace

TEST_CASE("LayerFactorization: where the leading block fails too, the bound falls back to λ (δ = 0, v = e_k)", "[exact][device_layer]") {
  std::mt19937_64 rng(15);
  const index_t n = 16;
  Eigen::VectorXd d(n);
  for (index_t i = 0; i < n; ++i) d[i] = i < 2 ? -1.0 - i : 1.0 + i;
  const Eigen::MatrixXd H = with_spectrum(d, rng);
  BlockShyLayer::whole = n;
  device::LayerFactorization<BlockShyLayer> f;
  f.reset(n, false);
  f.set_matrix(ConstBlockView<double>(H.data(), n, n));
  const index_t k = f.factor(0.0);
  REQUIRE(k > 1);
  std::vector<double> v(static_cast<std::size_t>(n), 7.0);
  CHECK(f.leading_null_vector(k, H(k - 1, k - 1), v.data()) == 0.0);
  for (index_t i = 0; i < n; ++i) CHECK(v[static_cast<std::size_t>(i)] == (i == k - 1 ? 1.0 : 0.0));
  CHECK_THROWS_AS(f.leading_null_vector(k + 1, 0.0, v.data()), usage_error);  // not where it failed
  // The subproblem still solves: the weaker bound costs λ iterations, not the answer.
  Eigen::VectorXd g(n);
  std::normal_distribution<double> normal;
  for (index_t i = 0; i < n; ++i) g[i] = normal(rng);
  BasicExact<device::LayerFactorization<BlockShyLayer>> shy;
  LayerExact layer;
  start_at(shy, g, H);
  start_at(layer, g, H);
  std::vector<double> p1(static_cast<std::size_t>(n)), p2(p1.size());
  const auto no_hvp = [](const double*, double*) {};
  const SubproblemStep a = shy.solve(1.0, no_hvp, p1), b = layer.solve(1.0, no_hvp, p2);
  CHECK_FALSE(a.failed);
  CHECK(a.hits_boundary);
  CHECK(a.model <= 0.75 * b.model);
  CHECK(b.model <= 0.75 * a.model);
}

namespace {
/// HostLayer on one of several "devices": its resource names one, and the layer records which it was made on.
struct NumberedLayer : device::HostLayer {
  struct resource_type {
    int id = 0;
    bool operator==(const resource_type&) const = default;
  };
  static inline int current = 7;
  static resource_type current_resource() { return {current}; }
  explicit NumberedLayer(resource_type r) : id(r.id) { ++made; }
  int id;
  static inline int made = 0;
};
using Numbered = device::LayerFactorization<NumberedLayer>;

/// A factorization of diag(2, 3, 4), factorised.
void hold_diagonal(Numbered& f) {
  static const double H[9] = {2, 0, 0, 0, 3, 0, 0, 0, 4};
  f.reset(3, false);
  f.set_matrix(ConstBlockView<double>(H, 3, 3));
  REQUIRE(f.factor(0.0) == 0);
}

/// f solves with diag(2, 3, 4): (2, 3, 4) ↦ (1, 1, 1).
void check_solves(Numbered& f) {
  std::vector<double> x = {2, 3, 4};
  f.solve(x.data());
  for (double v : x) CHECK(v == Approx(1).epsilon(1e-15));
}
}  // namespace

TEST_CASE("LayerFactorization: copies keep the device, not the layer; a moved-from one must be reset", "[exact][device_layer]") {
  NumberedLayer::current = 7;
  Numbered a;  // on the current device at construction, whatever is current later
  NumberedLayer::current = 8;
  CHECK(a.resource().id == 7);
  hold_diagonal(a);
  std::vector<double> x = {2, 3, 4};

  Numbered copy(a);
  CHECK(copy.resource().id == 7);
  CHECK_THROWS_AS(copy.solve(x.data()), usage_error);  // unsized until reset, which makes its own layer there
  const int made = NumberedLayer::made;
  hold_diagonal(copy);
  CHECK(NumberedLayer::made == made + 1);
  check_solves(copy);

  // Assigned from one on the same device: it keeps its layer (no new one) and forgets its size and H.
  Numbered same(NumberedLayer::resource_type{7});
  hold_diagonal(same);
  const int before = NumberedLayer::made;
  same = a;
  CHECK_THROWS_AS(same.factor(0.0), usage_error);
  hold_diagonal(same);
  CHECK(NumberedLayer::made == before);
  // From one on another device: it moves there (a new layer at reset).
  Numbered other(NumberedLayer::resource_type{3});
  hold_diagonal(other);
  const int on_three = NumberedLayer::made;
  other = a;
  CHECK(other.resource().id == 7);
  hold_diagonal(other);
  CHECK(NumberedLayer::made == on_three + 1);
  check_solves(other);

  // Moved, constructed and assigned over a sized one: the target works, the source must be reset.
  Numbered moved(std::move(a));
  check_solves(moved);
  CHECK_THROWS_AS(a.factor(0.0), usage_error);  // NOLINT(bugprone-use-after-move): the moved-from state is specified
  Numbered target(NumberedLayer::resource_type{3});
  hold_diagonal(target);
  target = std::move(moved);
  CHECK(target.resource().id == 7);
  check_solves(target);
  CHECK_THROWS_AS(moved.solve(x.data()), usage_error);  // NOLINT(bugprone-use-after-move)
  hold_diagonal(a);
  check_solves(a);
}

TEST_CASE("LayerFactorization: the smallest singular value by inverse iteration", "[exact][device_layer]") {
  std::mt19937_64 rng(13);
  const index_t n = 40;
  Eigen::VectorXd d(n);
  for (index_t i = 0; i < n; ++i) d[i] = 1e-3 + 0.5 * i;  // the smallest eigenvalue well apart
  const Eigen::MatrixXd H = with_spectrum(d, rng);
  device::LayerFactorization<device::HostLayer> layer;
  layer.reset(n, false);
  layer.set_matrix(ConstBlockView<double>(H.data(), n, n));
  REQUIRE(layer.factor(0.0) == 0);
  std::vector<double> z(static_cast<std::size_t>(n));
  const double s = layer.smallest_singular_value(z.data());
  const double sigma_min = std::sqrt(d[0]);  // U's singular values are the square roots of H's eigenvalues
  CHECK(s >= sigma_min * (1 - 1e-12));
  CHECK(s <= sigma_min * 1.001);
  const Eigen::Map<const Eigen::VectorXd> zv(z.data(), n);
  CHECK(std::abs(zv.norm() - 1) <= 1e-12);
  CHECK(std::sqrt(zv.dot(H * zv)) == Approx(s).epsilon(1e-10));  // ‖Uz‖² = zᵀHz
  // The host's greedy estimate is an upper bound too, and the inverse iteration's is at least as tight here.
  detail::exact::HostFactorization host;
  host.reset(n, false);
  host.set_matrix(ConstBlockView<double>(H.data(), n, n));
  REQUIRE(host.factor(0.0) == 0);
  std::vector<double> zh(static_cast<std::size_t>(n));
  CHECK(s <= host.smallest_singular_value(zh.data()) * (1 + 1e-12));
}

TEST_CASE("BasicExact over a device layer: the subproblem's steps, easy and hard cases, against Exact", "[exact][device_layer]") {
  std::mt19937_64 rng(14);
  const index_t n = 30;
  std::normal_distribution<double> normal;
  for (int kind = 0; kind < 3; ++kind) {
    Eigen::VectorXd d(n);
    for (index_t i = 0; i < n; ++i) d[i] = kind == 0 ? 0.2 + i : -2.0 + 0.3 * i;  // positive definite; indefinite
    const Eigen::MatrixXd H = with_spectrum(d, rng);
    Eigen::VectorXd g(n);
    for (index_t i = 0; i < n; ++i) g[i] = normal(rng);
    if (kind == 2) {  // the hard case: g ⟂ the eigenvector of the smallest eigenvalue
      const Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> eig(H);
      g -= eig.eigenvectors().col(0) * eig.eigenvectors().col(0).dot(g);
    }
    Exact host;
    LayerExact layer;
    start_at(host, g, H);
    start_at(layer, g, H);
    for (const double radius : {100.0, 2.0, 0.5, 0.05}) {
      INFO("kind " << kind << ", radius " << radius);
      std::vector<double> ph(static_cast<std::size_t>(n)), pl(static_cast<std::size_t>(n));
      const auto no_hvp = [](const double*, double*) {};
      const SubproblemStep sh = host.solve(radius, no_hvp, ph), sl = layer.solve(radius, no_hvp, pl);
      REQUIRE_FALSE(sl.failed);
      const Eigen::Map<const Eigen::VectorXd> p(pl.data(), n);
      const double model = g.dot(p) + 0.5 * p.dot(H * p);
      CHECK(sl.model == Approx(model).epsilon(1e-10));
      CHECK(p.norm() <= 1.1 * radius);
      // Both stop within SciPy's rules (‖p‖ within 10 % of Δ, or the hard-case certificate): the models agree to
      // what those rules allow, and where the host's step is interior so is the layer's, to rounding.
      CHECK(sl.model <= 0.75 * sh.model);
      CHECK(sl.hits_boundary == sh.hits_boundary);
      if (!sh.hits_boundary) CHECK(max_abs_diff(ph, pl) <= 1e-10 * max_abs(ph));
    }
  }
}

TEST_CASE("TrustRegion over the device layer's Exact reaches Exact's minimum", "[exact][device_layer]") {
  SECTION("Rosenbrock, 10 parameters") {
    test::Rosenbrock rosen{10};
    const std::vector<double> x0 = {1.3, 0.7, 0.8, 1.9, 1.2, 1.3, 0.7, 0.8, 1.9, 1.2};  // SciPy's example start, twice
    const TrustRegionOptions o{.gtol = 1e-10};
    FitOptions start;
    start.x0 = x0;
    const FitResult a = fit(rosen, TrustRegion<Exact>(o), start), b = fit(rosen, TrustRegion<LayerExact>(o), start);
    INFO(a.status_text() << "; " << b.status_text());
    CHECK(a.status == FitStatus::converged_gtol);
    CHECK(b.status == FitStatus::converged_gtol);
    for (double v : b.x) CHECK(v == Approx(1).epsilon(1e-9));
  }
  SECTION("a likelihood, with ∇²f and with the Gauss–Newton matrix (single precision is not offered: double)") {
    // 200 bins and 40 symmetric variations: one minimum (with asymmetric ones, this random model has several, and
    // Exact's and this one's λ iterations can lead to different ones).
    const Model m = test::random_model({.bins = 200, .masked_bins = 8, .procs = 3, .nsyst = 40, .asymmetric = false, .seed = 43});
    SerialLikelihood nll(m);
    for (const Curvature c : {Curvature::exact, Curvature::gauss_newton}) {
      INFO("curvature " << static_cast<int>(c));
      const TrustRegionOptions o{.curvature = c};
      const ExactOptions e{.single_precision_factor = true};
      const FitResult a = fit(nll, TrustRegion<Exact>(o, Exact(e))), b = fit(nll, TrustRegion<LayerExact>(o, LayerExact(e)));
      CHECK(a.status == b.status);
      CHECK(b.nll == Approx(a.nll).epsilon(1e-12));
      for (std::size_t i = 0; i < a.x.size(); ++i) CHECK(b.x[i] == Approx(a.x[i]).margin(1e-9 * std::max(1.0, a.uncertainties[i])));
    }
  }
}
