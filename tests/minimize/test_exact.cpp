// SPDX-License-Identifier: MIT
// The Exact (trust-exact) subproblem against SciPy's recorded solves, the global optimum and its helpers.
#include <catch2/catch.hpp>

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "fitlib/minimize/exact.hpp"
#include "reference_data.hpp"
#include "scipy_rosen.hpp"
#include "spd_matrix.hpp"

using namespace fitlib;
using fitlib::test::load_reference;
using fitlib::test::to_col_major;
using fitlib::test::to_vector;

namespace {

using Vec = std::vector<double>;

void no_hvp(const double*, double*) {}

double norm(std::span<const double> x) {
  double s = 0;
  for (double v : x) s += v * v;
  return std::sqrt(s);
}

/// ‖a − b‖ / ‖b‖ (absolute when b = 0).
double rel_diff(std::span<const double> a, std::span<const double> b) {
  double d = 0;
  for (std::size_t i = 0; i < a.size(); ++i) d += (a[i] - b[i]) * (a[i] - b[i]);
  const double nb = norm(b);
  return nb > 0 ? std::sqrt(d) / nb : std::sqrt(d);
}

Eigen::MatrixXd to_eigen(const Vec& col_major, index_t n) { return Eigen::Map<const Eigen::MatrixXd>(col_major.data(), n, n); }

/// gᵀp + ½pᵀHp.
double model(const Vec& H, const Vec& g, std::span<const double> p) {
  const auto n = static_cast<index_t>(g.size());
  const Eigen::Map<const Eigen::VectorXd> pv(p.data(), n), gv(g.data(), n);
  return gv.dot(pv) + 0.5 * pv.dot(to_eigen(H, n) * pv);
}

/// The global solution of min gᵀp + ½pᵀHp, ‖p‖ ≤ Δ, from an eigendecomposition and bisection on
/// λ (the same construction as the recording script's reference solution; trust-region.md §7).
struct GlobalSolution {
  Vec p;
  double lambda = 0, model = 0;
  bool hard = false;
};

GlobalSolution global_solution(const Vec& H, const Vec& g, double radius) {
  const auto n = static_cast<index_t>(g.size());
  Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> es(to_eigen(H, n));
  const Eigen::VectorXd w = es.eigenvalues();
  const Eigen::MatrixXd V = es.eigenvectors();
  const Eigen::VectorXd a = V.transpose() * Eigen::Map<const Eigen::VectorXd>(g.data(), n);
  auto step = [&](double lambda) {
    Eigen::VectorXd c(n);
    for (index_t i = 0; i < n; ++i) c[i] = a[i] / (w[i] + lambda);
    return Eigen::VectorXd(-(V * c));
  };
  GlobalSolution s;
  Eigen::VectorXd p;
  const double lo = std::max(0.0, -w[0]);
  if (w[0] > 0 && step(0).norm() <= radius) {
    p = step(0);
  } else {
    // Hard case: g has no component along the lowest eigenvector(s) and p(λ = −λ₁) is inside.
    bool orth = true;
    Eigen::VectorXd c = Eigen::VectorXd::Zero(n);
    for (index_t i = 0; i < n; ++i) {
      if (std::abs(w[i] - w[0]) <= 1e-12 * std::max(1.0, std::abs(w[0]))) {
        orth = orth && std::abs(a[i]) <= 1e-14 * std::max(1.0, a.norm());
      } else {
        c[i] = a[i] / (w[i] + lo);
      }
    }
    const Eigen::VectorXd ph = -(V * c);
    if (orth && ph.norm() <= radius) {
      p = ph + std::sqrt(std::max(radius * radius - ph.squaredNorm(), 0.0)) * V.col(0);
      s.lambda = lo;
      s.hard = true;
    } else {
      double l = lo, h = lo + a.norm() / radius + std::abs(w[0]) + 1;
      while (step(h).norm() > radius) h *= 2;
      for (int it = 0; it < 400; ++it) {
        const double mid = 0.5 * (l + h);
        if (mid <= l || mid >= h) break;
        (step(mid).norm() > radius ? l : h) = mid;
      }
      p = step(h);
      s.lambda = h;
    }
  }
  s.p.assign(p.data(), p.data() + n);
  s.model = model(H, g, s.p);
  return s;
}

using test::rosen_grad;
using test::rosen_hess;

/// |a − b| within rel·|b|, or abs near zero.
bool close(double a, double b, double rel, double abs_tol) { return std::abs(a - b) <= std::max(rel * std::abs(b), abs_tol); }

/// Compares our last solve's Cholesky shifts with SciPy's. The recorder read each shift off the
/// diagonal of H + λI as (H_ii + λ) − H_ii at the smallest |H_ii|, so it carries a rounding error
/// of eps·|H_ii + λ|: the tolerance scales with that entry.
void check_cholesky_attempts(const Exact& exact, const nlohmann::json& ref, double min_abs_diag, double rel) {
  const auto mine = exact.cholesky_attempts();
  REQUIRE(mine.size() == ref.size());
  for (std::size_t a = 0; a < ref.size(); ++a) {
    const double ref_lambda = ref[a][0].get<double>();
    const auto ref_info = ref[a][1].get<index_t>();
    INFO("Cholesky attempt " << a << ": ours λ = " << mine[a].lambda << " info " << mine[a].info << ", SciPy λ = " << ref_lambda
                             << " info " << ref_info);
    if (ref_lambda < 0) {
      // Our deliberate deviation (trust-region.md §6.1): SciPy tried the unclamped negative λ_new,
      // we try 0. Both must fail (so the bracket update max(lb, λ_new) = lb is the same); the
      // failing column may differ.
      CHECK(mine[a].lambda == 0);
      CHECK(ref_info != 0);
      CHECK(mine[a].info != 0);
    } else {
      CHECK(close(mine[a].lambda, ref_lambda, rel, rel * min_abs_diag + 1e-14));
      CHECK(mine[a].info == ref_info);
    }
  }
}

}  // namespace

TEST_CASE("ExactOptions validation names the field", "[minimize][exact]") {
  CHECK_NOTHROW(ExactOptions{}.validate());
  CHECK(ExactOptions{}.maxiter == 25);
  try {
    ExactOptions{0}.validate();
    FAIL("maxiter = 0 was accepted");
  } catch (const std::invalid_argument& e) {
    CHECK(std::string(e.what()).find("maxiter") != std::string::npos);
  }
  CHECK_THROWS_AS(Exact(ExactOptions{-3}), std::invalid_argument);
  static_assert(trust_region_subproblem<Exact>);
  static_assert(Exact::needs_hessian);
}

TEST_CASE("Exact reproduces SciPy's trust-exact on every subproblem case, radii solved in order on one object",
          "[minimize][exact][scipy]") {
  const auto ref = load_reference("scipy-trust-region/subproblem_cases.json");
  REQUIRE(ref.at("cases").size() == 7);
  for (const auto& c : ref.at("cases")) {
    const std::string name = c.at("name");
    const Vec H = to_col_major(c.at("H")), g = to_vector(c.at("g"));
    const auto n = static_cast<index_t>(g.size());
    const auto& expected = c.at("solvers").at("exact_main");
    REQUIRE(expected.size() == c.at("radii").size());
    Exact exact;
    exact.reset(n);
    exact.new_iterate(g, ConstBlockView<double>(H.data(), n, n));
    Vec p(static_cast<std::size_t>(n));
    for (std::size_t r = 0; r < expected.size(); ++r) {
      const auto& e = expected[r];
      const double radius = e.at("radius");
      INFO(name << ", radius " << radius);
      const SubproblemStep step = exact.solve(radius, no_hvp, p);
      const Vec pe = to_vector(e.at("p"));
      CHECK(rel_diff(p, pe) <= 1e-10);
      CHECK(step.hits_boundary == e.at("hits_boundary").get<bool>());
      CHECK(close(step.lambda, e.at("lambda_").get<double>(), 1e-10, 1e-12));
      CHECK(exact.niter() == e.at("niter").get<index_t>());
      CHECK(exact.singular_value_estimates().size() == e.at("smallest_sv_calls").get<std::size_t>());
      CHECK(close(step.model, e.at("model").get<double>(), 1e-10, 1e-14));
      CHECK(close(step.model, model(H, g, p), 1e-13, 1e-16));
      CHECK_FALSE(step.failed);
      CHECK(step.hvps == 0);
      CHECK(step.scipy_hvps == e.at("Hp_calls").get<index_t>());
      CHECK(step.lambda >= 0);
    }
  }
}

TEST_CASE("Exact reaches at least 96% of the optimal model reduction; hard cases satisfy the optimality conditions",
          "[minimize][exact]") {
  const auto ref = load_reference("scipy-trust-region/subproblem_cases.json");
  index_t hard_cases = 0;
  for (const auto& c : ref.at("cases")) {
    const std::string name = c.at("name");
    const Vec H = to_col_major(c.at("H")), g = to_vector(c.at("g"));
    const auto n = static_cast<index_t>(g.size());
    const auto radii = to_vector(c.at("radii"));
    const Eigen::MatrixXd He = to_eigen(H, n);
    const double h_norm = He.norm();
    Exact exact;
    exact.reset(n);
    exact.new_iterate(g, ConstBlockView<double>(H.data(), n, n));
    Vec p(static_cast<std::size_t>(n));
    for (std::size_t r = 0; r < radii.size(); ++r) {
      INFO(name << ", radius " << radii[r]);
      const SubproblemStep step = exact.solve(radii[r], no_hvp, p);
      const GlobalSolution best = global_solution(H, g, radii[r]);
      if (r == 0) {
        // The recorded reference solution belongs to the first radius; ours must agree with it.
        const auto& rs = c.at("reference_solution");
        REQUIRE(close(best.model, rs.at("model").get<double>(), 1e-9, 1e-14));
        REQUIRE(best.hard == (rs.at("kind").get<std::string>() == "hard"));
      }
      REQUIRE(best.model < 0);
      CHECK(step.model <= 0.96 * best.model);
      if (best.hard) {
        ++hard_cases;
        // ‖p‖ ≈ Δ, H + λI ⪰ 0, and the model within k_hard of the optimum (trust-region.md §3.6:
        // the hard-case certificate m(p) ≤ (1 − k_hard)·m*).
        CHECK(std::abs(norm(p) - radii[r]) <= 0.1 * radii[r]);
        const Eigen::MatrixXd shifted = He + step.lambda * Eigen::MatrixXd::Identity(n, n);
        CHECK(Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd>(shifted).eigenvalues()[0] >= -1e-8 * h_norm);
        CHECK(step.model <= (1 - 0.2) * best.model);
      }
    }
  }
  // hard_case_diag and hard_case_rotated at the first radius; at Δ/4 and Δ/16, ‖p(−λ₁)‖ > Δ and
  // both become easy (boundary) cases.
  CHECK(hard_cases == 2);
}

TEST_CASE("upper_cholesky reports the first failing column with a usable partial factor", "[minimize][exact]") {
  std::mt19937_64 rng(20240601);
  std::normal_distribution<double> normal;
  const index_t n = 7;
  Eigen::MatrixXd M(n, n);
  for (index_t i = 0; i < n; ++i)
    for (index_t j = 0; j < n; ++j) M(i, j) = normal(rng);
  const Eigen::MatrixXd A = M.transpose() * M + 0.5 * Eigen::MatrixXd::Identity(n, n);
  Vec U(static_cast<std::size_t>(n * n), 0.0), v(static_cast<std::size_t>(n));
  const BlockView<double> Uv(U.data(), n, n);

  SECTION("a positive definite matrix factors as UᵀU") {
    REQUIRE(detail::exact::upper_cholesky(ConstBlockView<double>(A.data(), n, n), 0.25, Uv) == 0);
    const Eigen::MatrixXd Ue = to_eigen(U, n).triangularView<Eigen::Upper>();
    const Eigen::MatrixXd B = A + 0.25 * Eigen::MatrixXd::Identity(n, n);
    CHECK((Ue.transpose() * Ue - B).norm() <= 1e-13 * B.norm());
    // The lower triangle is ignored on input: only H's upper triangle is read.
    Eigen::MatrixXd junk = A;
    junk.triangularView<Eigen::StrictlyLower>().setConstant(1e30);
    Vec U2(U.size(), 0.0);
    REQUIRE(detail::exact::upper_cholesky(ConstBlockView<double>(junk.data(), n, n), 0.25, BlockView<double>(U2.data(), n, n)) == 0);
    CHECK(U2 == U);
  }

  SECTION("failing at column k, the leading block is a factor and v is a null vector of B + δ e_k e_kᵀ") {
    for (index_t k = 1; k <= n; ++k) {
      INFO("column k = " << k);
      // Lower B_kk past its pivot: the leading (k−1)-block is untouched (positive definite), the
      // leading k-block becomes indefinite.
      const Eigen::MatrixXd Akk = A.topLeftCorner(k - 1, k - 1);
      const Eigen::VectorXd b = A.col(k - 1).head(k - 1);
      const double pivot = A(k - 1, k - 1) - (k > 1 ? b.dot(Akk.llt().solve(b)) : 0.0);
      Eigen::MatrixXd B = A;
      B(k - 1, k - 1) -= pivot + 0.3;
      std::fill(U.begin(), U.end(), 0.0);
      const index_t info = detail::exact::upper_cholesky(ConstBlockView<double>(B.data(), n, n), 0.0, Uv);
      REQUIRE(info == k);
      const Eigen::MatrixXd Ue = to_eigen(U, n);
      if (k > 1) {
        const Eigen::MatrixXd L = Ue.topLeftCorner(k - 1, k - 1).triangularView<Eigen::Upper>();
        CHECK((L.transpose() * L - Akk).norm() <= 1e-13 * A.norm());
        CHECK((L.transpose() * Ue.col(k - 1).head(k - 1) - b).norm() <= 1e-13 * A.norm());
      }
      const double delta = detail::exact::singular_leading_submatrix(ConstBlockView<double>(U.data(), n, n), k, B(k - 1, k - 1), v.data());
      CHECK(delta == Approx(0.3).epsilon(1e-9));
      const Eigen::Map<const Eigen::VectorXd> ve(v.data(), n);
      CHECK(ve[k - 1] == 1);
      for (index_t i = k; i < n; ++i) CHECK(ve[i] == 0);
      Eigen::MatrixXd Bd = B;
      Bd(k - 1, k - 1) += delta;
      CHECK(std::abs(ve.dot(Bd * ve)) <= 1e-10 * B.norm() * ve.squaredNorm());
      // Hence λ₁(B) ≤ −δ/‖v‖²: the lower bound of branch (C) is valid.
      CHECK(Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd>(B).eigenvalues()[0] <= -delta / ve.squaredNorm() + 1e-12);
    }
  }

  SECTION("a NaN entry fails the factorisation instead of propagating") {
    Eigen::MatrixXd B = A;
    B(2, 4) = B(4, 2) = std::numeric_limits<double>::quiet_NaN();
    CHECK(detail::exact::upper_cholesky(ConstBlockView<double>(B.data(), n, n), 0.0, Uv) == 5);
  }
}

TEST_CASE("the CMSW estimate: ‖U z‖ = s, ‖z‖ = 1, s ≥ σ_min(U); ties pick +1", "[minimize][exact]") {
  std::mt19937_64 rng(7);
  std::normal_distribution<double> normal;
  for (const index_t n : {index_t{1}, index_t{2}, index_t{5}, index_t{12}, index_t{40}}) {
    for (int trial = 0; trial < 5; ++trial) {
      INFO("n = " << n << ", trial " << trial);
      Eigen::MatrixXd M(n, n);
      for (index_t i = 0; i < n; ++i)
        for (index_t j = 0; j < n; ++j) M(i, j) = normal(rng);
      // Cholesky factors of increasingly ill-conditioned SPD matrices.
      const Eigen::MatrixXd A = M.transpose() * M + std::pow(10.0, -2 * trial) * Eigen::MatrixXd::Identity(n, n);
      Vec U(static_cast<std::size_t>(n * n), 0.0), z(static_cast<std::size_t>(n)), w(z), pv(z);
      REQUIRE(detail::exact::upper_cholesky(ConstBlockView<double>(A.data(), n, n), 0.0, BlockView<double>(U.data(), n, n)) == 0);
      const double s = detail::exact::estimate_smallest_singular_value(ConstBlockView<double>(U.data(), n, n), z.data(), w.data(), pv.data());
      const Eigen::MatrixXd Ue = to_eigen(U, n);
      const Eigen::Map<const Eigen::VectorXd> ze(z.data(), n);
      CHECK(ze.norm() == Approx(1).epsilon(1e-14));
      CHECK((Ue * ze).norm() == Approx(s).epsilon(1e-10));
      const double sigma_min = Eigen::JacobiSVD<Eigen::MatrixXd>(Ue).singularValues()[n - 1];
      CHECK(s >= sigma_min * (1 - 1e-10));
    }
  }
  // Diagonal U: every choice ties, so e = (1, …, 1): w_k = 1/d_k, v_k = 1/d_k², all positive.
  const Vec d = {3.0, 0.5, 2.0, 4.0};
  Vec U(16, 0.0), z(4), w(4), pv(4);
  for (std::size_t k = 0; k < 4; ++k) U[k * 5] = d[k];
  const double s = detail::exact::estimate_smallest_singular_value(ConstBlockView<double>(U.data(), 4, 4), z.data(), w.data(), pv.data());
  double vn = 0;
  for (double dk : d) vn += 1 / (dk * dk * dk * dk);
  vn = std::sqrt(vn);
  for (std::size_t k = 0; k < 4; ++k) CHECK(z[k] == Approx(1 / (d[k] * d[k]) / vn).epsilon(1e-15));
  CHECK(s == Approx(std::sqrt(1 / 9.0 + 4 + 0.25 + 1 / 16.0) / vn).epsilon(1e-15));
}

TEST_CASE("Exact never uses a negative λ and always decreases the model", "[minimize][exact]") {
  std::mt19937_64 rng(11);
  std::normal_distribution<double> normal;
  const index_t n = 8;
  Exact exact;
  exact.reset(n);
  Vec p(static_cast<std::size_t>(n));
  index_t solves = 0;
  for (int trial = 0; trial < 200; ++trial) {
    Eigen::MatrixXd M(n, n);
    for (index_t i = 0; i < n; ++i)
      for (index_t j = 0; j < n; ++j) M(i, j) = normal(rng);
    const double shift = trial % 3 == 0 ? 3.0 : (trial % 3 == 1 ? 0.0 : -3.0);
    const Eigen::MatrixXd A = 0.5 * (M + M.transpose()) + shift * Eigen::MatrixXd::Identity(n, n);
    Vec H(A.data(), A.data() + n * n), g(static_cast<std::size_t>(n));
    for (double& x : g) x = normal(rng) * std::pow(10.0, trial % 5 - 2);
    exact.new_iterate(g, ConstBlockView<double>(H.data(), n, n));
    for (double radius = 4.0; radius > 1e-3; radius /= 4) {
      INFO("trial " << trial << ", radius " << radius);
      const SubproblemStep step = exact.solve(radius, no_hvp, p);
      ++solves;
      REQUIRE_FALSE(step.failed);
      CHECK(step.lambda >= 0);
      for (const auto& a : exact.cholesky_attempts()) CHECK(a.lambda >= 0);
      CHECK(step.model < 0);
      CHECK(close(step.model, model(H, g, p), 1e-12, 1e-14));
      // 10 % beyond the boundary at most, unless the loop ran out of iterations (§3.4).
      if (exact.niter() < exact.options().maxiter) CHECK(norm(p) <= 1.1 * radius * (1 + 1e-12));
      CHECK(exact.cholesky_attempts().size() <= static_cast<std::size_t>(2 * exact.options().maxiter));
    }
  }
  CHECK(solves == 1200);  // 200 problems × radii 4, 1, 1/4, 1/16, 1/64, 1/256
}

TEST_CASE("a zero gradient with an indefinite H gives a boundary step along negative curvature", "[minimize][exact]") {
  const index_t n = 5;
  Vec g(static_cast<std::size_t>(n), 0.0), p(static_cast<std::size_t>(n));
  const double radius = 0.7;

  SECTION("rotated spectrum: SciPy's branch (B)") {
    const auto ref = load_reference("scipy-trust-region/subproblem_cases.json");
    const Vec H = to_col_major(ref.at("cases")[5].at("H"));  // hard_case_rotated: eigenvalues −2, 1, 2, 3, 4
    REQUIRE(ref.at("cases")[5].at("name") == "hard_case_rotated");
    Exact exact;
    exact.reset(n);
    exact.new_iterate(g, ConstBlockView<double>(H.data(), n, n));
    const SubproblemStep step = exact.solve(radius, no_hvp, p);
    REQUIRE_FALSE(step.failed);
    CHECK(step.hits_boundary);
    CHECK(norm(p) == Approx(radius).epsilon(1e-12));
    CHECK(step.lambda >= 0);
    CHECK(exact.singular_value_estimates().size() >= 1);
    // The optimum is ½λ₁Δ² = −Δ²; the branch-(B) stop certifies (1 − k_hard) of it.
    CHECK(step.model < 0);
    CHECK(step.model <= 0.8 * (-radius * radius));
    CHECK(close(step.model, model(H, g, p), 1e-12, 1e-15));
  }

  SECTION("diagonal spectrum: no factorisation succeeds, the failed pivot's direction is taken") {
    // Gershgorin is tight for a diagonal H, so λ_lb = λ_ub = −λ₁ and H + λI stays singular; SciPy
    // would raise UnboundLocalError here (trust-region.md §3.4).
    Vec H(static_cast<std::size_t>(n * n), 0.0);
    const Vec diag = {-2.0, 1.0, 2.0, 3.0, 4.0};
    for (index_t i = 0; i < n; ++i) H[static_cast<std::size_t>(i * (n + 1))] = diag[static_cast<std::size_t>(i)];
    Exact exact;
    exact.reset(n);
    exact.new_iterate(g, ConstBlockView<double>(H.data(), n, n));
    const SubproblemStep step = exact.solve(radius, no_hvp, p);
    REQUIRE_FALSE(step.failed);
    CHECK(exact.niter() == exact.options().maxiter);
    for (const auto& a : exact.cholesky_attempts()) CHECK(a.info != 0);
    CHECK(step.hits_boundary);
    CHECK(std::abs(p[0]) == Approx(radius).epsilon(1e-15));
    for (index_t i = 1; i < n; ++i) CHECK(p[static_cast<std::size_t>(i)] == 0);
    CHECK(step.model == Approx(-radius * radius).epsilon(1e-15));
  }
}

TEST_CASE("with no successful factorisation and g ≠ 0, Exact returns the Cauchy step", "[minimize][exact]") {
  // H has eigenvalues −1, 1, 2 but a zero diagonal entry: with ‖g‖/Δ small, λ_lb = 0, so λ₀ = 0
  // and the only factorisation allowed by maxiter = 1 fails at column 1.
  const index_t n = 3;
  const Vec H = {0.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 2.0};
  const double radius = 10.0;
  Vec p(3);
  Exact exact(ExactOptions{1});
  exact.reset(n);
  SECTION("positive curvature along −g: the 1-D minimiser, inside the region") {
    const Vec g = {0.3, 0.0, 0.4};
    exact.new_iterate(g, ConstBlockView<double>(H.data(), n, n));
    const SubproblemStep step = exact.solve(radius, no_hvp, p);
    REQUIRE(exact.cholesky_attempts().size() == 1);
    REQUIRE(exact.cholesky_attempts()[0].lambda == 0);
    REQUIRE(exact.cholesky_attempts()[0].info == 1);
    REQUIRE_FALSE(step.failed);
    const double t = 0.25 / 0.32;  // ‖g‖²/gᵀHg
    CHECK_FALSE(step.hits_boundary);
    for (std::size_t i = 0; i < 3; ++i) CHECK(p[i] == Approx(-t * g[i]).epsilon(1e-14));
    CHECK(step.model == Approx(-0.5 * 0.25 * t).epsilon(1e-13));
  }
  SECTION("negative curvature along −g: to the boundary") {
    const Vec g = {0.3, -0.3, 0.0};
    exact.new_iterate(g, ConstBlockView<double>(H.data(), n, n));
    const SubproblemStep step = exact.solve(radius, no_hvp, p);
    REQUIRE(exact.cholesky_attempts().size() == 1);
    REQUIRE(exact.cholesky_attempts()[0].info == 1);
    REQUIRE_FALSE(step.failed);
    CHECK(step.hits_boundary);
    const double gn = norm(g);
    for (std::size_t i = 0; i < 3; ++i) CHECK(p[i] == Approx(-radius / gn * g[i]).epsilon(1e-14));
    CHECK(step.model == Approx(-radius * gn - 0.5 * radius * radius).epsilon(1e-13));
  }
}

TEST_CASE("Exact reproduces SciPy's trust-exact (main) subproblem at every recorded iterate", "[minimize][exact][scipy]") {
  const auto quad = load_reference("scipy-trust-region/quad50_problem.json");
  const Vec A = to_col_major(quad.at("A")), b = to_vector(quad.at("b"));
  for (const std::string problem : {"rosen2", "rosen10", "quad50"}) {
    const auto run = load_reference("scipy-trust-region/" + problem + "-trust-exact-derivs_hess-exact_impl_main.json");
    const auto& iterations = run.at("iterations");
    const auto n = static_cast<index_t>(iterations.at(0).at("x").size());
    Exact exact;
    exact.reset(n);
    Vec x_current, H, g, p(static_cast<std::size_t>(n));
    index_t checked = 0;
    for (const auto& it : iterations) {
      const Vec x = to_vector(it.at("x"));
      const int k = it.at("k");
      INFO(problem << " k = " << k);
      if (x != x_current) {
        // A new iterate; after a rejection SciPy re-solves the same object at a smaller radius.
        x_current = x;
        if (problem == "quad50") {
          H = A;
          const Eigen::VectorXd ge = to_eigen(A, n) * Eigen::Map<const Eigen::VectorXd>(x.data(), n);
          g.resize(x.size());
          for (std::size_t i = 0; i < x.size(); ++i) g[i] = ge[static_cast<index_t>(i)] - b[i];
        } else {
          H = rosen_hess(x);
          g = rosen_grad(x);
        }
        // Our g must be SciPy's. Near the minimum g is a difference of terms of size ~‖H‖·‖x‖, so
        // its rounding (FMA contraction here, none in SciPy) is relative to those terms, not to ‖g‖.
        const double g_scale = Eigen::Map<const Eigen::MatrixXd>(H.data(), n, n).cwiseAbs().rowwise().sum().maxCoeff() *
                               std::max(1.0, Eigen::Map<const Eigen::VectorXd>(x.data(), n).lpNorm<Eigen::Infinity>());
        INFO("‖g‖ = " << norm(g) << ", SciPy " << it.at("gnorm").get<double>());
        REQUIRE(close(norm(g), it.at("gnorm").get<double>(), 1e-12, 1e-13 * g_scale));
        exact.new_iterate(g, ConstBlockView<double>(H.data(), n, n));
      }
      const SubproblemStep step = exact.solve(it.at("radius").get<double>(), no_hvp, p);
      const Vec pe = to_vector(it.at("p"));
      CHECK(rel_diff(p, pe) <= 1e-10);
      CHECK(step.hits_boundary == it.at("hits_boundary").get<bool>());
      CHECK(close(step.lambda, it.at("lambda").get<double>(), 1e-10, 1e-12));
      CHECK(close(exact.lambda_lower_bound(), it.at("lambda_lb_final").get<double>(), 1e-10, 1e-12));
      CHECK(exact.niter() == it.at("niter").get<index_t>());
      CHECK(step.scipy_hvps == it.at("user_Hp_calls_in_solve").get<index_t>());
      // SciPy's model value includes f.
      CHECK(close(step.model + it.at("f").get<double>(), it.at("model_value").get<double>(), 1e-10, 1e-12));
      double min_abs_diag = std::numeric_limits<double>::infinity();
      for (index_t i = 0; i < n; ++i) min_abs_diag = std::min(min_abs_diag, std::abs(H[static_cast<std::size_t>(i * (n + 1))]));
      check_cholesky_attempts(exact, it.at("cholesky_attempts"), min_abs_diag, 1e-10);
      const auto sv = to_vector(it.at("smallest_sv_estimates"));
      REQUIRE(exact.singular_value_estimates().size() == sv.size());
      for (std::size_t i = 0; i < sv.size(); ++i) CHECK(close(exact.singular_value_estimates()[i], sv[i], 1e-10, 1e-14));
      ++checked;
    }
    CHECK(checked == static_cast<index_t>(iterations.size()));
    CHECK(checked == run.at("result").at("nit").get<index_t>());
  }
}

TEST_CASE("Exact rejects misuse and reports a non-finite iterate as failed", "[minimize][exact]") {
  const index_t n = 2;
  Vec H = {2.0, 0.0, 0.0, 1.0}, g = {1.0, -1.0}, p(2), p_short(1);
  Exact exact;
  CHECK_THROWS_AS(exact.new_iterate(g, ConstBlockView<double>(H.data(), n, n)), usage_error);  // before reset
  CHECK_THROWS_AS(exact.reset(0), usage_error);
  exact.reset(n);
  CHECK_THROWS_AS(exact.solve(1.0, no_hvp, p), usage_error);  // before new_iterate
  CHECK_THROWS_AS(exact.new_iterate(p_short, ConstBlockView<double>(H.data(), n, n)), usage_error);
  exact.new_iterate(g, ConstBlockView<double>(H.data(), n, n));
  CHECK_THROWS_AS(exact.solve(1.0, no_hvp, p_short), usage_error);
  CHECK_THROWS_AS(exact.solve(0.0, no_hvp, p), usage_error);
  // A finite iterate solves; the same object then meets NaN in H, or in g.
  CHECK_FALSE(exact.solve(1.0, no_hvp, p).failed);
  H[1] = H[2] = std::numeric_limits<double>::quiet_NaN();
  exact.new_iterate(g, ConstBlockView<double>(H.data(), n, n));
  SubproblemStep step = exact.solve(1.0, no_hvp, p);
  CHECK(step.failed);
  CHECK(p == Vec{0.0, 0.0});
  H[1] = H[2] = 0.0;
  g[0] = std::numeric_limits<double>::infinity();
  exact.new_iterate(g, ConstBlockView<double>(H.data(), n, n));
  step = exact.solve(1.0, no_hvp, p);
  CHECK(step.failed);
  CHECK(exact.niter() == 0);
}

TEST_CASE("Exact with a single-precision factor: steps refined to double's, double's factor where single's is not enough",
          "[minimize][exact]") {
  const ExactOptions single{.single_precision_factor = true};
  SECTION("an H not declared semidefinite (∇²f) is factorised in double: every recorded case bit for bit") {
    const auto ref = load_reference("scipy-trust-region/subproblem_cases.json");
    for (const auto& c : ref.at("cases")) {
      const Vec H = to_col_major(c.at("H")), g = to_vector(c.at("g"));
      const auto n = static_cast<index_t>(g.size());
      Exact with(single), without;
      with.reset(n);
      without.reset(n);
      with.new_iterate(g, ConstBlockView<double>(H.data(), n, n));
      without.new_iterate(g, ConstBlockView<double>(H.data(), n, n));
      Vec p(static_cast<std::size_t>(n)), q(p.size());
      for (double radius : to_vector(c.at("radii"))) {
        INFO(c.at("name").get<std::string>() << ", radius " << radius);
        const SubproblemStep a = with.solve(radius, no_hvp, p), b = without.solve(radius, no_hvp, q);
        CHECK(p == q);
        CHECK(a.model == b.model);
        for (const CholeskyAttempt& t : with.cholesky_attempts()) CHECK_FALSE(t.single);
      }
    }
  }
  // A positive definite H of n = 300 (Eigen's blocked factorisation) with eigenvalues from 1 to 10^decades.
  const index_t n = 300;
  auto spd = [&](double decades) {
    std::mt19937_64 rng(7);
    const Eigen::MatrixXd h = test::spd_matrix(n, decades, rng);
    std::normal_distribution<double> normal;
    Vec out(h.data(), h.data() + n * n), g(static_cast<std::size_t>(n));
    for (auto& v : g) v = normal(rng);
    return std::pair{out, g};
  };
  auto solve = [&](const Vec& H, const Vec& g, double radius, ExactOptions options, Vec& p) {
    Exact exact(options);
    exact.reset(n);
    exact.new_iterate(g, ConstBlockView<double>(H.data(), n, n), /*semidefinite=*/true);
    p.assign(static_cast<std::size_t>(n), 0.0);
    const SubproblemStep step = exact.solve(radius, no_hvp, p);
    return std::pair{step, std::vector<CholeskyAttempt>(exact.cholesky_attempts().begin(), exact.cholesky_attempts().end())};
  };
  /// ‖(H + λI)p + g‖_∞ over the refinement's bound n·eps·(‖H‖_∞ + λ)·‖p‖_∞ (ExactOptions::single_precision_factor).
  auto residual = [&](const Vec& H, const Vec& g, double lambda, const Vec& p) {
    const Eigen::Map<const Eigen::VectorXd> pv(p.data(), n), gv(g.data(), n);
    const Eigen::MatrixXd h = to_eigen(H, n);
    const double bound = static_cast<double>(n) * std::numeric_limits<double>::epsilon() *
                         (h.cwiseAbs().rowwise().sum().maxCoeff() + lambda) * pv.cwiseAbs().maxCoeff();
    return (h * pv + lambda * pv + gv).cwiseAbs().maxCoeff() / bound;
  };
  /// The Newton step (a radius beyond it) with ExactOptions `single` (s, ps) and with double's (d, pd), one
  /// factorisation each, and whether `single`'s factorisation was in single precision.
  struct NewtonSteps {
    SubproblemStep s, d;
    Vec ps, pd;
    bool factor_single;
  };
  auto newton_steps = [&](double decades, double radius) {
    const auto [H, g] = spd(decades);
    NewtonSteps out;
    const auto [ss, as] = solve(H, g, radius, single, out.ps);
    const auto [sd, ad] = solve(H, g, radius, {}, out.pd);
    REQUIRE(as.size() == 1);
    REQUIRE(ad.size() == 1);
    CHECK_FALSE(ad[0].single);
    out.s = ss;
    out.d = sd;
    out.factor_single = as[0].single;
    return out;
  };
  SECTION("a condition number of 10^4: the Newton step from the single factor is double's to rounding") {
    const NewtonSteps n4 = newton_steps(4, 1e10);
    CHECK(n4.factor_single);
    CHECK_FALSE(n4.s.hits_boundary);
    CHECK(rel_diff(n4.ps, n4.pd) < 1e-10);
    CHECK(std::abs(n4.s.model - n4.d.model) <= 1e-12 * std::abs(n4.d.model));
  }
  SECTION("condition numbers of 10^4 and 10^5 on the boundary: single factors only, (H + λI)p = −g to the refinement's bound") {
    const double decades = GENERATE(4.0, 5.0);
    const auto [H, g] = spd(decades);
    Vec pn, ps;
    solve(H, g, 1e10, {}, pn);
    // Radii where λ is below, near and above H's eigenvalues' range.
    for (double fraction : {0.5, 0.1, 1e-3}) {
      const double radius = fraction * norm(pn);
      INFO("10^" << decades << ", radius " << fraction << "·‖p_N‖");
      const auto [ss, as] = solve(H, g, radius, single, ps);
      CHECK(ss.hits_boundary);
      CHECK(std::all_of(as.begin(), as.end(), [](const CholeskyAttempt& a) { return a.single; }));
      CHECK(std::abs(norm(ps) - radius) <= 0.1 * radius);
      CHECK(residual(H, g, ss.lambda, ps) <= 2);  // the bound, and the rounding of this check's own product
      CHECK(ss.model <= 0.96 * global_solution(H, g, radius).model);
    }
  }
  SECTION("a condition number of 10^12, beyond single precision: double's factor, and bit for bit double's step") {
    const NewtonSteps n12 = newton_steps(12, 1e30);
    CHECK_FALSE(n12.factor_single);
    CHECK(n12.ps == n12.pd);
    CHECK(n12.s.model == n12.d.model);
  }
}
