// SPDX-License-Identifier: MIT
// Bin-by-bin statistics: the profiled β against brute-force minimisation, derivatives against FD.
#include <catch2/catch.hpp>

#include <algorithm>
#include <random>

#include "derivative_checks.hpp"
#include "random_model.hpp"

using namespace fitlib;
using fitlib::test::rel_error;

namespace {

const char* name(BinByBinType t) {
  switch (t) {
    case BinByBinType::gamma: return "gamma";
    case BinByBinType::normal_multiplicative: return "normal-multiplicative";
    case BinByBinType::normal_additive: return "normal-additive";
    default: return "automatic";
  }
}

/// The joint bin term G(m, β) = D(ν̃) + L_β written out independently of bbstat.hpp (§2.5, §3.4).
double joint_term(const BinByBinStats& st, index_t i, DataTerm term, double n, double var, const std::vector<double>& m,
                  const std::vector<double>& beta) {
  const index_t P = st.nprocs;
  double nt = 0, lb = 0;
  auto constraint = [&](double b, double k, double b0) {
    if (st.type == BinByBinType::gamma) return b > 0 ? k * (b - b0) - k * b0 * std::log(b / b0) : INFINITY;
    if (st.type == BinByBinType::normal_multiplicative) return 0.5 * k * (b - b0) * (b - b0);
    return 0.5 * (b - b0) * (b - b0);
  };
  for (index_t p = 0; p < P; ++p) {
    const auto e = static_cast<std::size_t>(st.mode == BinByBinMode::lite ? i : i * P + p);
    const double b = beta[st.mode == BinByBinMode::lite ? 0 : static_cast<std::size_t>(p)];
    const bool scales = st.mode == BinByBinMode::full || st.active[static_cast<std::size_t>(i * P + p)];
    if (!st.multiplicative()) nt += m[static_cast<std::size_t>(p)] + (st.mode == BinByBinMode::full ? st.sigma[e] * b : 0.0);
    else nt += (scales ? b : 1.0) * m[static_cast<std::size_t>(p)];
    if (st.mode == BinByBinMode::full && !st.fixed[e]) lb += constraint(b, st.kstat[e], st.beta0[e]);
  }
  if (st.mode == BinByBinMode::lite) {
    const auto e = static_cast<std::size_t>(i);
    if (!st.multiplicative()) nt += st.sigma[e] * beta[0];
    if (!st.fixed[e]) lb += constraint(beta[0], st.kstat[e], st.beta0[e]);
  }
  double d;
  if (term == DataTerm::chisq) d = 0.5 * (nt - n) * (nt - n) / var;
  else if (n == 0) d = nt;
  else  // in long double: a reference free of the cancellation in ln ν − ln n
    d = nt > 0 ? static_cast<double>(static_cast<long double>(nt) - n - n * (std::log(static_cast<long double>(nt)) - std::log(static_cast<long double>(n))))
               : INFINITY;
  return d + lb;
}

/// min over β of G by coordinate-wise golden-section search (G is convex in β).
double brute_force_profile(const BinByBinStats& st, index_t i, DataTerm term, double n, double var, const std::vector<double>& m) {
  const index_t per = st.per_bin();
  std::vector<double> beta(static_cast<std::size_t>(per));
  for (index_t e = 0; e < per; ++e) beta[static_cast<std::size_t>(e)] = st.beta0[static_cast<std::size_t>(i * per + e)];
  double best = joint_term(st, i, term, n, var, m, beta);
  for (int sweep = 0; sweep < 400; ++sweep) {
    const double before = best;
    for (index_t e = 0; e < per; ++e) {
      if (st.fixed[static_cast<std::size_t>(i * per + e)]) continue;
      auto& b = beta[static_cast<std::size_t>(e)];
      auto at = [&](double t) {
        const double keep = b;
        b = t;
        const double v = joint_term(st, i, term, n, var, m, beta);
        b = keep;
        return std::isnan(v) ? INFINITY : v;
      };
      double lo = b - 20, hi = b + 20;
      const double r = 0.5 * (std::sqrt(5.0) - 1);
      for (int it = 0; it < 300 && hi - lo > 1e-15 * std::max(1.0, std::abs(lo)); ++it) {
        const double c = hi - r * (hi - lo), d = lo + r * (hi - lo);
        (at(c) < at(d) ? hi : lo) = (at(c) < at(d) ? d : c);
      }
      if (at(0.5 * (lo + hi)) <= best) {
        b = 0.5 * (lo + hi);
        best = at(b);
      }
    }
    if (before - best <= 1e-16 * std::abs(best)) break;
  }
  return best;
}

Model bb_model(SystematicType type, bool asymmetric) {
  test::RandomModelSpec spec;
  spec.template_stats = true;
  spec.type = type;
  spec.asymmetric = asymmetric;
  spec.procs = 4;
  spec.signals = 2;
  spec.nsyst = 5;
  spec.seed = 31;
  Model m = test::random_model(spec);
  test::add_data_variances(m);
  return m;
}

}  // namespace

TEST_CASE("profiled β is the conditional minimum, with exact first and second derivatives", "[likelihood][bbstat]") {
  const auto mode = GENERATE(BinByBinMode::lite, BinByBinMode::full);
  const auto type = GENERATE(BinByBinType::gamma, BinByBinType::normal_multiplicative, BinByBinType::normal_additive);
  const auto term = GENERATE(DataTerm::poisson, DataTerm::chisq);
  const auto zero_variance = GENERATE(ZeroVarianceProcesses::exclude, ZeroVarianceProcesses::scale);
  INFO((mode == BinByBinMode::lite ? "lite, " : "full, ") << name(type) << (term == DataTerm::chisq ? ", χ²" : ", Poisson")
                                                           << (zero_variance == ZeroVarianceProcesses::scale ? ", 0.2.5 convention" : ""));
  const Model model = bb_model(SystematicType::log_normal, false);
  BinByBinOptions opts;
  opts.mode = mode;
  opts.type = type;
  opts.zero_variance = zero_variance;
  const auto st = BinByBinStats::build(model, {0, model.nbins()}, opts, term);
  REQUIRE(st.enabled);
  const index_t P = st.nprocs;
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<double> unif(0.5, 1.5);

  for (index_t i = 0; i < model.nbins(); ++i) {
    // Cell yields away from the nominal ones, as during a fit; bin 3 has exact templates (β fixed).
    std::vector<double> m(static_cast<std::size_t>(P));
    for (index_t p = 0; p < P; ++p) m[static_cast<std::size_t>(p)] = model.dense()->nominal[static_cast<std::size_t>(i * P + p)] * unif(rng);
    const double n = model.data[static_cast<std::size_t>(i)], var = model.data_variance[static_cast<std::size_t>(i)];
    const double aux = term == DataTerm::poisson ? (n > 0 ? 1 / n : 0.0) : 1 / var;
    INFO("bin " << i << ", n = " << n);
    std::vector<double> g(static_cast<std::size_t>(P)), delta(g.size()), u1(g.size()), u2(g.size()), beta(static_cast<std::size_t>(st.per_bin()));
    auto profile = [&](const std::vector<double>& mm) {
      return detail::profile_bin(st, i, term, n, aux, mm.data(), P, g.data(), delta.data(), u1.data(), u2.data(), beta.data());
    };
    const auto c = profile(m);
    const std::vector<double> g0 = g, beta0 = beta;
    // F = G(m, β̂), and no β does better.
    CHECK(c.nll == Approx(joint_term(st, i, term, n, var, m, beta)).epsilon(1e-12));
    CHECK(c.nll == Approx(brute_force_profile(st, i, term, n, var, m)).epsilon(1e-10).margin(1e-12));

    // ∂F/∂m and the curvature (diag(δ) + U·S·Uᵀ) against differences of F and of ∂F/∂m.
    std::vector<double> dm(static_cast<std::size_t>(P));
    for (auto& d : dm) d = unif(rng) - 1.0;
    const double h = 1e-4 * m[0];
    auto shifted = [&](double t) {
      std::vector<double> y = m;
      for (index_t p = 0; p < P; ++p) y[static_cast<std::size_t>(p)] += t * dm[static_cast<std::size_t>(p)];
      return y;
    };
    double slope = 0;
    for (index_t p = 0; p < P; ++p) slope += g0[static_cast<std::size_t>(p)] * dm[static_cast<std::size_t>(p)];
    const double fd_slope = (8 * (profile(shifted(h)).nll - profile(shifted(-h)).nll) - (profile(shifted(2 * h)).nll - profile(shifted(-2 * h)).nll)) / (12 * h);
    CHECK(slope == Approx(fd_slope).epsilon(1e-7).margin(1e-9));
    profile(m);
    double t1 = 0, t2 = 0;
    for (index_t p = 0; p < P; ++p) {
      t1 += u1[static_cast<std::size_t>(p)] * dm[static_cast<std::size_t>(p)];
      t2 += u2[static_cast<std::size_t>(p)] * dm[static_cast<std::size_t>(p)];
    }
    std::vector<double> hv(static_cast<std::size_t>(P));
    for (index_t p = 0; p < P; ++p) {
      const auto q = static_cast<std::size_t>(p);
      hv[q] = delta[q] * dm[q] + u1[q] * (c.s11 * t1 + c.s12 * t2) + u2[q] * (c.s12 * t1 + c.s22 * t2);
    }
    auto grad_at = [&](double t) {
      profile(shifted(t));
      return g;
    };
    const auto gp1 = grad_at(h), gm1 = grad_at(-h), gp2 = grad_at(2 * h), gm2 = grad_at(-2 * h);
    std::vector<double> hv_fd(static_cast<std::size_t>(P));
    for (std::size_t q = 0; q < hv_fd.size(); ++q) hv_fd[q] = (8 * (gp1[q] - gm1[q]) - (gp2[q] - gm2[q])) / (12 * h);
    CHECK(rel_error(hv, hv_fd) < 1e-7);
  }
}

TEST_CASE("likelihood derivatives with bin-by-bin statistics match finite differences", "[likelihood][bbstat][derivatives]") {
  const auto mode = GENERATE(BinByBinMode::lite, BinByBinMode::full);
  const auto type = GENERATE(BinByBinType::gamma, BinByBinType::normal_multiplicative, BinByBinType::normal_additive);
  const auto term = GENERATE(DataTerm::poisson, DataTerm::chisq);
  const auto systematics = GENERATE(SystematicType::log_normal, SystematicType::normal);
  // rabbit 0.2.5's convention changes the lite algebra only (ZeroVarianceProcesses).
  const auto zero_variance = GENERATE(ZeroVarianceProcesses::exclude, ZeroVarianceProcesses::scale);
  if (mode == BinByBinMode::full && zero_variance == ZeroVarianceProcesses::scale) return;
  INFO((mode == BinByBinMode::lite ? "lite, " : "full, ") << name(type) << (term == DataTerm::chisq ? ", χ², " : ", Poisson, ")
                                                           << (systematics == SystematicType::normal ? "additive" : "log-normal")
                                                           << (zero_variance == ZeroVarianceProcesses::scale ? ", 0.2.5 convention" : ""));
  const Model model = bb_model(systematics, true);
  LikelihoodOptions opts;
  opts.data_term = term;
  opts.bin_by_bin.mode = mode;
  opts.bin_by_bin.type = type;
  opts.bin_by_bin.zero_variance = zero_variance;
  SerialLikelihood nll(model, {}, opts);
  SerialLikelihood plain(model, {}, [&] {
    auto o = opts;
    o.bin_by_bin.enabled = false;
    return o;
  }());
  for (std::uint64_t point = 0; point < 2; ++point) {
    INFO("point " << point);
    const auto x = test::test_point(model, point, false);
    test::check_derivatives(nll, x, 1e-7, point);
    // β can only lower the NLL (β = β₀ is one of the candidates).
    CHECK(nll.value(x) < plain.value(x));
  }
}

TEST_CASE("zero-variance processes: rabbit 0.2.5's convention scales them, the current one does not", "[likelihood][bbstat]") {
  const auto type = GENERATE(BinByBinType::gamma, BinByBinType::normal_multiplicative, BinByBinType::normal_additive);
  INFO(name(type));
  const Model with_exact = bb_model(SystematicType::log_normal, true);  // process 1 has sumw2 = 0 in every other bin
  Model without_exact = with_exact;
  for (std::size_t c = 0; c < without_exact.sumw2.size(); ++c)
    if (without_exact.sumw2[c] == 0) without_exact.sumw2[c] = without_exact.dense()->nominal[c] * without_exact.dense()->nominal[c] / 7.0;
  auto options = [&](BinByBinMode mode, ZeroVarianceProcesses zv) {
    LikelihoodOptions o;
    o.bin_by_bin.mode = mode;
    o.bin_by_bin.type = type;
    o.bin_by_bin.zero_variance = zv;
    return o;
  };
  const index_t P = with_exact.nprocs(), n = with_exact.nparams();
  const auto x = test::test_point(with_exact, 1, false);
  struct Eval {
    double f;
    std::vector<double> g, beta;
  };
  auto eval = [&](const Model& m, BinByBinMode mode, ZeroVarianceProcesses zv) {
    SerialLikelihood nll(m, {}, options(mode, zv));
    Eval e{0, std::vector<double>(static_cast<std::size_t>(n)), {}};
    e.f = nll.value_grad(x, e.g);
    e.beta = nll.bin_by_bin_parameters(x);
    return e;
  };

  // The statistics: every process is scaled and enters k under the 0.2.5 convention.
  const auto st_now = BinByBinStats::build(with_exact, {0, with_exact.nbins()}, options(BinByBinMode::lite, ZeroVarianceProcesses::exclude).bin_by_bin, DataTerm::poisson);
  const auto st_025 = BinByBinStats::build(with_exact, {0, with_exact.nbins()}, options(BinByBinMode::lite, ZeroVarianceProcesses::scale).bin_by_bin, DataTerm::poisson);
  const index_t b = 0;  // process 1 is exact here, the others are not
  REQUIRE(with_exact.sumw2[static_cast<std::size_t>(b * P + 1)] == 0);
  CHECK(st_now.active[static_cast<std::size_t>(b * P + 1)] == 0);
  CHECK(std::all_of(st_025.active.begin(), st_025.active.end(), [](unsigned char a) { return a == 1; }));
  double sw_all = 0, sw_var = 0, v = 0;
  for (index_t p = 0; p < P; ++p) {
    const auto c = static_cast<std::size_t>(b * P + p);
    sw_all += with_exact.dense()->nominal[c];
    sw_var += with_exact.sumw2[c] > 0 ? with_exact.dense()->nominal[c] : 0.0;
    v += with_exact.sumw2[c];
  }
  if (type != BinByBinType::normal_additive) {
    CHECK(st_now.kstat[b] == Approx(sw_var * sw_var / v).epsilon(1e-14));
    CHECK(st_025.kstat[b] == Approx(sw_all * sw_all / v).epsilon(1e-14));
  }

  // A zero-variance process makes the lite conventions differ; 0.2.5's gamma β̂ is rabbit's
  // (n + k)/(ν + k) over the bin's whole yield.
  const Eval now = eval(with_exact, BinByBinMode::lite, ZeroVarianceProcesses::exclude);
  const Eval old = eval(with_exact, BinByBinMode::lite, ZeroVarianceProcesses::scale);
  if (type != BinByBinType::normal_additive) {  // the additive shift acts on the bin total either way
    CHECK(std::abs(now.f - old.f) > 1e-3);
    CHECK(test::rel_error(now.g, old.g) > 1e-4);
    CHECK(now.beta[b] != Approx(old.beta[b]).epsilon(1e-6));
  }
  if (type == BinByBinType::gamma) {
    SerialLikelihood nll(with_exact, {}, options(BinByBinMode::lite, ZeroVarianceProcesses::scale));
    const std::vector<double> nu = nll.yields(x);
    double total = 0;
    for (index_t p = 0; p < P; ++p) total += nu[static_cast<std::size_t>(b * P + p)];
    const double k = sw_all * sw_all / v, nb = with_exact.data[b];
    CHECK(old.beta[b] == Approx((nb + k) / (total + k)).epsilon(1e-12));
  }

  // Without zero-variance processes, and in full mode whatever the templates, they are the same.
  for (const Model* m : {static_cast<const Model*>(&without_exact), &with_exact})
    for (const auto mode : {BinByBinMode::lite, BinByBinMode::full}) {
      if (m == &with_exact && mode == BinByBinMode::lite) continue;
      INFO((m == &with_exact ? "with" : "without") << " exact processes, " << (mode == BinByBinMode::lite ? "lite" : "full"));
      const Eval a = eval(*m, mode, ZeroVarianceProcesses::exclude), c = eval(*m, mode, ZeroVarianceProcesses::scale);
      CHECK(a.f == c.f);
      CHECK(a.g == c.g);
      CHECK(a.beta == c.beta);
    }

  LikelihoodOptions bad;
  bad.bin_by_bin.zero_variance = static_cast<ZeroVarianceProcesses>(7);
  CHECK_THROWS_AS(bad.validate(), std::invalid_argument);
}
