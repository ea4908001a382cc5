// SPDX-License-Identifier: MIT
// Gltr against SciPy's trust-krylov: subproblem cases with HOTSTART, every recorded iteration, and trlib's rare paths.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "fitlib/minimize/gltr.hpp"
#include "reference_data.hpp"
#include "scipy_rosen.hpp"

namespace {

using fitlib::Gltr;
using fitlib::GltrOptions;
using fitlib::index_t;
using fitlib::SubproblemStep;
using fitlib::test::load_reference;
using fitlib::test::to_vector;
using Vec = std::vector<double>;

static_assert(fitlib::trust_region_subproblem<Gltr>);

// ‖a − b‖/‖b‖ (‖a − b‖ when b = 0).
double rel_diff(const Vec& a, const Vec& b) {
  double d = 0, nb = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    d += (a[i] - b[i]) * (a[i] - b[i]);
    nb += b[i] * b[i];
  }
  return nb > 0 ? std::sqrt(d / nb) : std::sqrt(d);
}

double norm(const Vec& a) {
  double s = 0;
  for (double v : a) s += v * v;
  return std::sqrt(s);
}

// Whether this translation unit fuses a·b + c (FMA contraction). SciPy's reference BLAS rounds twice;
// tests/CMakeLists.txt builds with -ffp-contract=off, under which Gltr reproduces SciPy bitwise.
bool fma_contraction() {
  volatile double va = 1.0 + 0x1p-30, vb = 1.0 - 0x1p-30, vc = -1.0;
  const double a = va, b = vb, c = vc;
  return a * b + c != 0.0;  // unfused: a·b rounds to 1
}

// A dense row-major matrix; y_j = Σ_i A_ji v_i summed in i order, as reference dgemv does for numpy's A @ v.
struct Dense {
  index_t n = 0;
  Vec a;
  void apply(const double* v, double* y) const {
    for (index_t j = 0; j < n; ++j) {
      double t = 0;
      for (index_t i = 0; i < n; ++i) t += a[j * n + i] * v[i];
      y[j] = t;
    }
  }
  double model(const Vec& g, const Vec& p) const {
    Vec hp(p.size());
    apply(p.data(), hp.data());
    double m = 0;
    for (std::size_t i = 0; i < p.size(); ++i) m += g[i] * p[i] + 0.5 * p[i] * hp[i];
    return m;
  }
};

Dense rows_of(const nlohmann::json& rows) {
  Dense d;
  d.n = static_cast<index_t>(rows.size());
  for (const auto& r : rows)
    for (const auto& v : r) d.a.push_back(v.get<double>());
  return d;
}

Dense rosen_hess(const Vec& x) { return {static_cast<index_t>(x.size()), fitlib::test::rosen_hess(x)}; }
using fitlib::test::rosen_grad;
using fitlib::test::rosen_hess_prod;

Dense quad50_matrix() { return rows_of(load_reference("scipy-trust-region/quad50_problem.json")["A"]); }

Vec quad50_grad(const Dense& a, const Vec& b, const Vec& x) {
  Vec g(x.size());
  a.apply(x.data(), g.data());
  for (std::size_t i = 0; i < g.size(); ++i) g[i] -= b[i];
  return g;
}

}  // namespace

TEST_CASE("Gltr reproduces SciPy's trust-krylov on every subproblem case, HOTSTART included", "[gltr][scipy]") {
  const auto ref = load_reference("scipy-trust-region/subproblem_cases.json");
  const bool fused = fma_contraction();
  int solves = 0;
  for (const auto& c : ref.at("cases")) {
    const Dense h = rows_of(c.at("H"));
    const Vec g = to_vector(c.at("g"));
    for (const std::string key : {"krylov_inexact", "krylov_exact"}) {
      Gltr gltr(GltrOptions{key == "krylov_inexact"});
      gltr.reset(h.n);
      gltr.new_iterate(g, {});  // once: the later, smaller radii re-solve the same iterate (HOTSTART)
      for (const auto& e : c.at("solvers").at(key)) {
        INFO(c.at("name").get<std::string>() << " " << key << " radius " << e.at("radius").get<double>());
        Vec p(g.size());
        index_t calls = 0;
        const SubproblemStep st = gltr.solve(
            e.at("radius").get<double>(),
            [&](const double* v, double* y) {
              ++calls;
              h.apply(v, y);
            },
            p);
        // The tridiagonal solves, the CG recurrences and the inverse iteration run SciPy's operations in
        // SciPy's order, so 1e-10 is loose (the observed difference is 0).
        CHECK(rel_diff(p, to_vector(e.at("p"))) <= 1e-10);
        CHECK(st.hits_boundary == e.at("hits_boundary").get<bool>());
        // Recorded: gᵀp + ½pᵀHp in numpy; ours: the Krylov objective (§6.8), equal to rounding here.
        CHECK(st.model == Approx(e.at("model").get<double>()).epsilon(1e-12));
        CHECK(st.hvps == e.at("Hp_calls").get<index_t>());
        CHECK(calls == st.hvps);
        CHECK(st.scipy_hvps == st.hvps + 1);
        CHECK(st.lambda == Approx(e.at("trlib_lam").get<double>()).epsilon(1e-10).margin(0));
        CHECK(gltr.hotstart() == (e.at("trlib_init").get<int>() == 2));
        if (gltr.hotstart()) CHECK(st.hvps == 0);
        CHECK(gltr.iterations() == e.at("trlib_iter").get<index_t>());
        // Whether trlib's Newton stops by ‖h‖ − Δ ≤ eps·Δ (0) or by a tiny step (3) is a knife edge that
        // fused multiply-adds flip (near_hard_diag at Δ/16); λ and p agree either way.
        if (!fused) CHECK(gltr.diagnostics().exit_tri == e.at("trlib_exit_tri").get<int>());
        ++solves;
      }
    }
  }
  CHECK(solves == 42);
}

TEST_CASE("Gltr exact mode: optimal where the Krylov space suffices, SciPy's Krylov limit in the hard case",
          "[gltr][scipy]") {
  const auto ref = load_reference("scipy-trust-region/subproblem_cases.json");
  int optimal = 0, limited = 0;
  for (const auto& c : ref.at("cases")) {
    const std::string name = c.at("name").get<std::string>();
    INFO(name);
    const Dense h = rows_of(c.at("H"));
    const Vec g = to_vector(c.at("g"));
    Gltr gltr(GltrOptions{false});
    gltr.reset(h.n);
    gltr.new_iterate(g, {});
    Vec p(g.size());
    const double radius = c.at("radii")[0].get<double>();  // reference_solution is for the first radius
    const SubproblemStep st = gltr.solve(radius, [&](const double* v, double* y) { h.apply(v, y); }, p);
    const double best = c.at("reference_solution").at("model").get<double>();
    // trlib's Newton may stop on a tiny step (|Δλ| ≤ 1e-11·max(1, λ)) just left of the root: SciPy's own
    // steps here exceed Δ by up to 5e-12 relative.
    CHECK(norm(p) <= radius * (1 + 1e-10));
    CHECK(h.model(g, p) == Approx(st.model).epsilon(1e-12));
    // The gradient has (almost, near_hard_diag: 1e-8) no component along the leftmost eigenvector, so
    // the Krylov space never contains it (trust-region.md §7, last bullet): trust-krylov (exact) returns
    // model −1.019 where the optimum is −1.475.
    if (name == "hard_case_diag" || name == "hard_case_rotated" || name == "near_hard_diag") {
      CHECK(st.model == Approx(-1.0186855510231576).epsilon(1e-12));
      CHECK(best == Approx(-1.475).epsilon(1e-8));
      CHECK(st.model > 0.7 * best);  // well short of the optimum: the known limitation, reproduced
      ++limited;
    } else {
      CHECK(st.model <= 0.999 * best);
      ++optimal;
    }
  }
  CHECK(optimal == 4);
  CHECK(limited == 3);
}

TEST_CASE("Gltr reproduces every recorded trust-krylov iteration (rosen2, rosen10, quad50)", "[gltr][scipy]") {
  // Each record is solved on its own, without the outer loop: g and H at the recorded x, a new iterate
  // only when x changed (a rejection re-solves the same iterate at Δ/4: HOTSTART), the recorded radius.
  const bool fused = fma_contraction();
  if (fused)
    WARN("FMA contraction is on: quad50 is checked loosely and exit codes not at all (build with "
         "-ffp-contract=off, as tests/CMakeLists.txt does, for the bitwise comparison)");
  const Dense quad_a = quad50_matrix();
  const Vec quad_b = to_vector(load_reference("scipy-trust-region/quad50_problem.json").at("b"));
  int files = 0, records = 0;
  for (const std::string problem : {"rosen2", "rosen10", "quad50"})
    for (const std::string inexact : {"True", "False"})
      for (const std::string derivs : {"hess", "hessp"}) {
        const std::string file =
            "scipy-trust-region/" + problem + "-trust-krylov-derivs_" + derivs + "-inexact_" + inexact + ".json";
        const auto ref = load_reference(file);
        const bool quad = problem == "quad50";
        // Without FMA contraction every step agrees with SciPy to the last bit along the whole path, so no
        // loosening is needed. With contraction, quad50's 20–100 Lanczos steps at condition 1e6 (no
        // reorthogonalisation, §5.9b) amplify the changed roundings to 1e-5 within one solve and 1e-1
        // later; Rosenbrock stays within 2e-11.
        const double p_tol = fused && quad ? 0.5 : 1e-10;
        const Vec x0 = to_vector(ref.at("iterations")[0].at("x"));
        const auto n = static_cast<index_t>(x0.size());
        Gltr gltr(GltrOptions{inexact == "True"});
        gltr.reset(n);
        Vec x_prev, g, x;
        Dense hess;
        index_t scipy_hp_calls = 0;
        for (const auto& it : ref.at("iterations")) {
          const int k = it.at("k").get<int>();
          INFO(file << " k=" << k);
          x = to_vector(it.at("x"));
          if (x != x_prev) {
            g = quad ? quad50_grad(quad_a, quad_b, x) : rosen_grad(x);
            hess = quad ? quad_a : rosen_hess(x);
            gltr.new_iterate(g, {});
            x_prev = x;
          }
          auto hvp = [&](const double* v, double* y) {
            if (derivs == "hessp" && !quad)
              rosen_hess_prod(x, v, y);  // SciPy calls the user's hessp; quad50's hessp is A @ p as well
            else
              hess.apply(v, y);
          };
          Vec p(static_cast<std::size_t>(n));
          const SubproblemStep st = gltr.solve(it.at("radius").get<double>(), hvp, p);
          const bool hot = it.at("trlib_init").get<int>() == 2;
          CHECK(gltr.hotstart() == hot);
          CHECK(rel_diff(p, to_vector(it.at("p"))) <= p_tol);
          CHECK(st.hits_boundary == it.at("hits_boundary").get<bool>());
          const double lam = it.at("trlib_lam").get<double>();
          if (!fused || !quad) {
            if (lam == 0.0)
              CHECK(st.lambda == 0.0);
            else
              CHECK(st.lambda == Approx(lam).epsilon(1e-10));
            // HVPs in the solve: SciPy counts the user's hessp calls; with a dense H it counts none, but
            // trlib spends iter + 1 on a fresh solve (§5.3) and 0 on a HOTSTART (§5.7).
            const index_t expected_hvps = derivs == "hessp" ? it.at("user_Hp_calls_in_solve").get<index_t>()
                                                            : (hot ? 0 : it.at("trlib_iter_last").get<index_t>() + 1);
            CHECK(st.hvps == expected_hvps);
            CHECK(gltr.iterations() == it.at("trlib_iter_last").get<index_t>());
            CHECK(gltr.diagnostics().lanczos_switch == it.at("trlib_lanczos_switch").get<index_t>());
            // The multiplier agrees to 1e-14 either way, but whether trlib's Newton stops by ‖h‖ − Δ ≤ eps·Δ
            // (0) or by a tiny step (3) is a knife edge that fused roundings flip.
            if (!fused) {
              CHECK(gltr.diagnostics().exit_tri == it.at("trlib_exit_tri").get<int>());
              CHECK(gltr.diagnostics().newton_iterations == it.at("trlib_newton_iters_last_tri").get<index_t>());
            }
            // The model from the Krylov data against SciPy's literal f + gᵀp + ½pᵀHp − f: the recorded
            // difference carries eps·|f| of cancellation, and quad50's 20-step Lanczos T (k=1, no
            // reorthogonalisation) differs from the literal model by 4e-9 relative.
            const double f = it.at("f").get<double>();
            const double m_ref = it.at("model_value").get<double>() - f;
            CHECK(std::abs(st.model - m_ref) <= 1e-8 * std::abs(m_ref) + 1e-13 * std::max(1.0, std::abs(f)));
          } else {
            const double m_ref = it.at("model_value").get<double>() - it.at("f").get<double>();
            CHECK(st.model < 0);
            CHECK(std::abs(st.model - m_ref) <= 0.1 * std::abs(m_ref));
          }
          CHECK(st.scipy_hvps == st.hvps + 1);
          scipy_hp_calls += st.scipy_hvps;
          ++records;
        }
        // SciPy's hessp count over the run: the solves plus one m(p) per iteration (§1.3).
        if (derivs == "hessp" && (!fused || !quad))
          CHECK(scipy_hp_calls == ref.at("user_calls").at("Hp").get<index_t>());
        ++files;
      }
  CHECK(files == 12);
  CHECK(records == 2 * (36 + 25 + 64 + 29 + 17 + 15));
}

TEST_CASE("Gltr's earlyterm exit and small-gradient boundary tolerance match SciPy", "[gltr][scipy]") {
  // The recorded runs never take trlib's earlyterm exit (§5.9c) and always have ‖g₀‖ large enough that
  // η_b = 0.5; these exactly representable problems (H = diag(1 + q·i² − 1.5·[i = 0]),
  // g_i = s·((7i mod 11) − 5)/8, n = 20) do both. Reference values from SciPy 1.10.1 (see the next test).
  struct Expected {
    double radius, lambda, model, checksum;  // checksum: Σ (i + 1)·p_i
    index_t iterations, hvps;
    int exit_code;
  };
  struct Case {
    double q, scale;
    bool inexact;
    std::vector<Expected> solves;
    bool knife_edge = false;
  };
  const std::vector<Case> cases{
      // Exact tolerances: γ|h| falls steadily but by < 10× over ten iterations: earlyterm at k = 13.
      {0.25, 1.0 / 64, false,
       {{1.0 / 128, 1.8357713418454005, -0.00011647478589885267, 0.001654625455647257, 13, 14, 7},
        {1.0 / 512, 7.47948070011815, -3.55223988106504e-05, -0.0008024631067707786, 13, 0, 7}}},
      // Inexact: ‖g₀‖ ≈ 0.05, so η_b = √‖g₀‖ ≈ 0.22 (not min(0.5, ‖g₀‖)): converged at k = 9.
      {0.25, 1.0 / 64, true,
       {{1.0 / 128, 1.8155388566832371, -0.00011614357147463064, 0.00043604879920955885, 9, 10, 0},
        {1.0 / 512, 7.479183807709519, -3.5522260365691074e-05, -0.0008215593196790555, 9, 0, 7}}},
      {1.0, 1.0 / 1024, true,
       {{1.0 / 128, 0.578134436494587, -2.0074367742756797e-05, 0.007539408499366311, 17, 18, 0},
        {1.0 / 512, 0.8130340372915144, -2.1913505509512844e-06, 0.001693283840370363, 17, 0, 7}},
       // ‖g₁₈‖² ends within a factor of a few of trlib's absolute breakdown threshold 2e-16 (§5.9d):
       // fused multiply-adds move it across (fail_hard at k = 17), so it is checked unfused only.
       true},
  };
  const bool fused = fma_contraction();
  const index_t n = 20;
  for (const Case& c : cases) {
    if (fused && c.knife_edge) continue;
    Vec d(n), g(n);
    for (index_t i = 0; i < n; ++i) {
      d[i] = 1.0 + c.q * static_cast<double>(i * i) - (i == 0 ? 1.5 : 0.0);
      g[i] = c.scale * static_cast<double>((i * 7) % 11 - 5) / 8.0;
    }
    Gltr gltr(GltrOptions{c.inexact});
    gltr.reset(n);
    gltr.new_iterate(g, {});
    for (const Expected& e : c.solves) {
      INFO("q " << c.q << " scale " << c.scale << " inexact " << c.inexact << " radius " << e.radius);
      Vec p(n);
      const SubproblemStep st = gltr.solve(
          e.radius,
          [&](const double* v, double* y) {
            for (index_t i = 0; i < n; ++i) y[i] = d[i] * v[i];
          },
          p);
      double m = 0, checksum = 0;
      for (index_t i = 0; i < n; ++i) {
        m += g[i] * p[i] + 0.5 * p[i] * (d[i] * p[i]);
        checksum += static_cast<double>(i + 1) * p[i];
      }
      CHECK(st.lambda == Approx(e.lambda).epsilon(1e-10));
      CHECK(m == Approx(e.model).epsilon(1e-10));
      // The Krylov objective drifts from the literal model as the 17 Lanczos vectors lose orthogonality.
      CHECK(st.model == Approx(e.model).epsilon(1e-8));
      CHECK(checksum == Approx(e.checksum).epsilon(1e-10));
      CHECK(gltr.iterations() == e.iterations);
      CHECK(st.hvps == e.hvps);
      CHECK(gltr.diagnostics().exit_code == e.exit_code);
    }
  }
}

TEST_CASE("Gltr's hard case in the tridiagonal problem (trlib's HARD_INIT_LAM) matches SciPy", "[gltr][scipy]") {
  // H = diag(−2, 1, 2, 3, 4), g = (1e-6, 1, 1, 1, 1), exact tolerances: the Krylov space is exhausted
  // and T's leftmost eigenvector is almost orthogonal to e₁, so the tridiagonal solve adds t·u (§5.5 step 3,
  // inverse iteration §5.5.2). Reference values from SciPy 1.10.1's TRLIBQuadraticSubproblem (Debian's
  // python3-scipy, the recording's version), which seeds its start vectors from the clock: they agree across
  // runs to all printed digits, and with Gltr's fixed seed.
  const Vec d{-2, 1, 2, 3, 4};
  const Vec g{1e-6, 1, 1, 1, 1};
  auto hvp = [&](const double* v, double* y) {
    for (int i = 0; i < 5; ++i) y[i] = d[i] * v[i];
  };
  struct Expected {
    double radius;
    Vec p;
    double lambda;
    int exit_tri;
    index_t hvps;
  };
  const std::vector<Expected> expected{
      {1.0,
       {-0.8709829280966181, -0.3333332057644462, -0.2499999282442997, -0.19999995407533924, -0.16666663477627675},
       2.00000114811529,
       4,
       5},
      {0.25,
       {-2.6810578273329435e-07, -0.14859125696528716, -0.12936826400531964, -0.11454922909424897,
        -0.10277628489083315},
       5.729871059867357,
       3,
       0},
  };
  Gltr gltr(GltrOptions{false});
  gltr.reset(5);
  gltr.new_iterate(g, {});
  for (const auto& e : expected) {
    INFO("radius " << e.radius);
    Vec p(5);
    const SubproblemStep st = gltr.solve(e.radius, hvp, p);
    CHECK(rel_diff(p, e.p) <= 1e-10);
    CHECK(st.lambda == Approx(e.lambda).epsilon(1e-10));
    CHECK(gltr.diagnostics().exit_tri == e.exit_tri);
    CHECK(st.hvps == e.hvps);
    CHECK(st.hits_boundary);
    double m = 0;
    for (int i = 0; i < 5; ++i) m += g[i] * p[i] + 0.5 * d[i] * p[i] * p[i];
    CHECK(st.model == Approx(m).epsilon(1e-10));
  }
}

TEST_CASE("Gltr replicates trlib's convexify check and SciPy's HVP count for it", "[gltr][scipy]") {
  // One huge and one slightly negative curvature with a tiny radius trigger the check (§5.8): λ large,
  // ray_min < 0 and |ray_min| < 1e-8·ray_max. The objective agrees, so nothing is re-solved, but SciPy
  // evaluates the objective twice (2 HVPs) on both the fresh solve (CONV_BOUND quirk) and the HOTSTART.
  // Reference values from SciPy 1.10.1 (see the previous test).
  const Vec d{12763757.81210099, 1.1398469081269615, -0.15271608234341133, 2.6780992969570727};
  const Vec g{1.3803138486051605, 0.2057165176789978, 0.8870580070430005, -0.10639959608685703};
  auto hvp = [&](const double* v, double* y) {
    for (int i = 0; i < 4; ++i) y[i] = d[i] * v[i];
  };
  Gltr gltr(GltrOptions{false});
  gltr.reset(4);
  gltr.new_iterate(g, {});
  Vec p(4);
  SubproblemStep st = gltr.solve(2.359826635358149e-09, hvp, p);
  CHECK(rel_diff(p, {-1.9546522446640564e-09, -2.966759586095483e-10, -1.2792788252137838e-09,
                     1.5344515089076312e-10}) <= 1e-10);
  CHECK(st.lambda == Approx(693404744.7300959).epsilon(1e-10));
  CHECK(gltr.diagnostics().convexify_checked);
  CHECK_FALSE(gltr.diagnostics().convexified);
  CHECK(st.hvps == 3);        // 2 for the Krylov space + 1 for the true objective
  CHECK(st.scipy_hvps == 5);  // SciPy: 2 + 2 objective evaluations, + 1 for the outer m(p)
  st = gltr.solve(5.899566588395373e-10, hvp, p);
  CHECK(gltr.hotstart());
  CHECK(rel_diff(p, {-4.907481187548438e-10, -7.347257356782778e-11, -3.16816731328533e-10,
                     3.8001091186084684e-11}) <= 1e-10);
  CHECK(st.lambda == Approx(2799908967.4698167).epsilon(1e-10));
  CHECK(st.hvps == 1);
  CHECK(st.scipy_hvps == 3);
}

TEST_CASE("Gltr's Lanczos mode after a CG breakdown (deviations from trlib: fixed recurrences)", "[gltr]") {
  // pᵀHp = 0 exactly makes CG break down and trlib switch to Lanczos (§5.6). In SciPy 1.10.1 the first
  // case (switch at k = 1, σ = −1) returns ‖p‖ = 1.015·Δ with a Lanczos basis that is not orthogonal
  // (QQᵀ − I = 0.98), and at k = 0 trlib fails at once and returns a step made of uninitialised memory.
  // Gltr's corrected recurrences must give the global optimum, since the Krylov space is all of ℝ⁴.
  struct Case {
    Vec d, g;
    double radius;
    index_t switch_at;
  };
  for (const Case& c : {Case{{-2, 1, 2, 4}, {1, 2, 3, 2}, 1000.0, 1}, Case{{-2, 1, 2, 4}, {1, 2, 3, 2}, 1.0, 1},
                        Case{{1, -1, 2, -2}, {1, 1, 1, 1}, 1.0, 0}, Case{{1, -1, 2, -2}, {1, 1, 1, 1}, 10.0, 0}}) {
    for (const double radius : {c.radius, c.radius / 4}) {
      INFO("switch at " << c.switch_at << ", radius " << radius);
      auto model_at = [&](double lam) {
        double m = 0, nn = 0;
        for (int i = 0; i < 4; ++i) {
          const double pi = -c.g[i] / (c.d[i] + lam);
          m += c.g[i] * pi + 0.5 * c.d[i] * pi * pi;
          nn += pi * pi;
        }
        return std::pair{m, std::sqrt(nn)};
      };
      // The optimum by bisection on the secular equation (diagonal H, no hard case).
      double lo = 2, hi = 1e9;
      for (int i = 0; i < 300; ++i) {
        const double mid = 0.5 * (lo + hi);
        (model_at(mid).second > radius ? lo : hi) = mid;
      }
      const double best = model_at(hi).first;
      Gltr gltr(GltrOptions{false});
      gltr.reset(4);
      gltr.new_iterate(c.g, {});
      auto hvp = [&](const double* v, double* y) {
        for (int i = 0; i < 4; ++i) y[i] = c.d[i] * v[i];
      };
      Vec p(4);
      const SubproblemStep st = gltr.solve(c.radius, hvp, p);
      const SubproblemStep st2 = radius == c.radius ? st : gltr.solve(radius, hvp, p);
      CHECK(gltr.diagnostics().lanczos_switch == c.switch_at);
      double m = 0;
      for (int i = 0; i < 4; ++i) m += c.g[i] * p[i] + 0.5 * c.d[i] * p[i] * p[i];
      CHECK(norm(p) == Approx(radius).epsilon(1e-10));
      CHECK(st2.model == Approx(m).epsilon(1e-10));
      CHECK(m == Approx(best).epsilon(1e-8));
      CHECK(st2.hits_boundary);
    }
  }
}

TEST_CASE("Gltr's HOTSTART after the iteration cap leaves out trlib's incomplete row (§5.9a)", "[gltr]") {
  // At itmax = 2n trlib's T has a last row whose δ lacks 1/α and whose Lanczos vector was never written,
  // and SciPy's HOTSTART solves with it (quad50s: model +2.74, status 2). Gltr keeps the itmax complete
  // rows. On quad50's recorded iterates that hit the cap (inexact k=8: interior; exact k=4: boundary; both
  // far from converging at the cap, so also with fused multiply-adds), a re-solve at smaller radii must
  // cost no HVP and return a boundary step whose Krylov model is the true one.
  // (SciPy 1.10.1 on the interior one at Δ = 3.15: literal model −0.1905 where its T predicts −0.2968.)
  const Dense a = quad50_matrix();
  const Vec b = to_vector(load_reference("scipy-trust-region/quad50_problem.json").at("b"));
  for (const auto& [file, k] : {std::pair{"quad50-trust-krylov-derivs_hess-inexact_True.json", 8},
                                std::pair{"quad50-trust-krylov-derivs_hess-inexact_False.json", 4}}) {
    INFO(file);
    const auto it = load_reference(std::string("scipy-trust-region/") + file).at("iterations")[k - 1];
    const Vec x = to_vector(it.at("x"));
    const Vec g = quad50_grad(a, b, x);
    Gltr gltr(GltrOptions{std::string(file).find("True") != std::string::npos});
    gltr.reset(a.n);
    gltr.new_iterate(g, {});
    auto hvp = [&](const double* v, double* y) { a.apply(v, y); };
    Vec p(50);
    double radius = it.at("radius").get<double>();
    SubproblemStep st = gltr.solve(radius, hvp, p);
    CHECK(gltr.diagnostics().exit_code == -1);  // itmax
    CHECK(gltr.iterations() == 100);
    CHECK(gltr.diagnostics().krylov_dimension == gltr.itmax());
    CHECK(st.hvps == 101);
    radius = std::min(radius, norm(p)) / 4;
    for (int rep = 0; rep < 4; ++rep, radius /= 4) {
      INFO("radius " << radius);
      st = gltr.solve(radius, hvp, p);
      CHECK(gltr.hotstart());
      CHECK(st.hvps == 0);
      CHECK(st.hits_boundary);
      CHECK(norm(p) == Approx(radius).epsilon(1e-9));  // Q loses orthogonality at condition 1e6
      CHECK(st.model < 0);
      CHECK(a.model(g, p) == Approx(st.model).epsilon(1e-8));
    }
  }
}

TEST_CASE("Gltr workspace, options and input checks", "[gltr]") {
  GltrOptions opt;
  CHECK(opt.inexact);
  CHECK_NOTHROW(opt.validate());
  Gltr gltr;
  CHECK_THROWS_AS(gltr.reset(0), fitlib::usage_error);
  gltr.reset(2);
  CHECK(gltr.itmax() == 4);
  gltr.reset(50);
  CHECK(gltr.itmax() == 100);
  gltr.reset(100000);  // itmax = min(1e9/n, 2n) = 10000; the Lanczos vectors are not all allocated up front
  CHECK(gltr.itmax() == 10000);
  gltr.reset(3);
  const Vec g{1, 2};
  CHECK_THROWS_AS(gltr.new_iterate(g, {}), fitlib::usage_error);
  const Vec g3{0, 0, 0};
  gltr.new_iterate(g3, {});
  Vec p2(2), p(3, 7.0);
  auto hvp = [](const double* v, double* y) {
    for (int i = 0; i < 3; ++i) y[i] = v[i];
  };
  CHECK_THROWS_AS(gltr.solve(1.0, hvp, p2), fitlib::usage_error);
  CHECK_THROWS_AS(gltr.solve(0.0, hvp, p), fitlib::usage_error);
  // g = 0: the step is 0 and no HVP is spent (SciPy never solves there; trlib would divide 0/0).
  SubproblemStep st = gltr.solve(1.0, hvp, p);
  CHECK(p == Vec{0, 0, 0});
  CHECK(st.hvps == 0);
  CHECK_FALSE(st.hits_boundary);
  CHECK(st.model == 0);
  st = gltr.solve(0.5, hvp, p);
  CHECK(gltr.hotstart());
  CHECK(p == Vec{0, 0, 0});
  // A new iterate starts a fresh Krylov space; the same inputs give bitwise the same step.
  const Vec g1{1, -2, 0.5};
  Vec q1(3), q2(3);
  gltr.new_iterate(g1, {});
  st = gltr.solve(0.1, hvp, q1);
  CHECK_FALSE(gltr.hotstart());
  CHECK(st.hvps == 1);  // H = I: one CG step reaches the boundary and the residual is 0
  gltr.new_iterate(g1, {});
  gltr.solve(0.1, hvp, q2);
  CHECK(q1 == q2);
  CHECK(norm(q1) == Approx(0.1).epsilon(1e-14));
}
