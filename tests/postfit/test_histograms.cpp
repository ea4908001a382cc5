// SPDX-License-Identifier: MIT
// Prefit and postfit histograms against direct evaluations and finite-difference Jacobians.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <utility>

#include "fitlib/fit.hpp"
#include "fitlib/postfit/histograms.hpp"
#include "fitlib/postfit/mappings.hpp"
#include "policies.hpp"
#include "random_model.hpp"

using namespace fitlib;

namespace {

/// A model with a masked channel, asymmetric log-normal systematics (one unconstrained) and no template variances;
/// `nsyst` = 140 makes three blocks of directions (64, 64 and a partial one).
Model histogram_model(index_t nsyst = 6) {
  test::RandomModelSpec sp;
  sp.bins = 14;
  sp.masked_bins = 5;
  sp.procs = 3;
  sp.signals = 1;
  sp.nsyst = nsyst;
  sp.unconstrained = 1;
  sp.seed = 23;
  Model m = test::random_model(sp);
  m.constraint_weights[2] = 4;  // a constraint of width 1/2
  return m;
}

/// The central-difference Jacobian `[bins × n]` of the bins' summed yields at x (β held at β₀), or with `per_process`
/// of every cell's, `[bins × nprocs × n]` (a row per bin and process).
template <class Lik>
Eigen::MatrixXd fd_jacobian(Lik& lik, const std::vector<double>& x, bool per_process = false) {
  const auto n = static_cast<index_t>(x.size());
  const index_t bf = lik.model().nbins_full(), np = lik.model().nprocs(), per = per_process ? np : 1;
  Eigen::MatrixXd jm = Eigen::MatrixXd::Zero(bf * per, n);
  for (index_t i = 0; i < n; ++i) {
    const auto k = static_cast<std::size_t>(i);
    const double h = 1e-6 * std::max(1.0, std::abs(x[k]));
    std::vector<double> up = x, down = x;
    up[k] += h;
    down[k] -= h;
    const std::vector<double> a = lik.yields(up), b = lik.yields(down);
    for (index_t c = 0; c < bf * np; ++c)
      jm(per_process ? c : c / np, i) += (a[static_cast<std::size_t>(c)] - b[static_cast<std::size_t>(c)]) / (2 * h);
  }
  return jm;
}

/// diag(J·C·Jᵀ) per bin and process, `[bins × nprocs]`, J fd_jacobian's per process (C `[n × n]`).
template <class Lik>
std::vector<double> fd_process_variance(Lik& lik, const std::vector<double>& x, const std::vector<double>& C) {
  const Eigen::MatrixXd jm = fd_jacobian(lik, x, true);
  const Eigen::VectorXd d = (jm * Eigen::Map<const Eigen::MatrixXd>(C.data(), jm.cols(), jm.cols()) * jm.transpose()).diagonal();
  return {d.data(), d.data() + d.size()};
}

/// J·C·Jᵀ (`[bins × bins]`) with J fd_jacobian's (C `[n × n]`).
template <class Lik>
Eigen::MatrixXd fd_covariance(Lik& lik, const std::vector<double>& x, const std::vector<double>& C) {
  const Eigen::MatrixXd jm = fd_jacobian(lik, x);
  return jm * Eigen::Map<const Eigen::MatrixXd>(C.data(), jm.cols(), jm.cols()) * jm.transpose();
}

/// Histograms' variations (`[bins × n × 2]`) against ν_b ∓ J_bi·σ_i.
void check_variations(const std::vector<double>& v, const std::vector<double>& total, const Eigen::MatrixXd& J, const std::vector<double>& sigma) {
  const auto n = static_cast<std::size_t>(J.cols());
  REQUIRE(v.size() == total.size() * n * 2);
  for (std::size_t b = 0; b < total.size(); ++b)
    for (std::size_t i = 0; i < n; ++i) {
      INFO("bin " << b << " parameter " << i);
      const double d = J(static_cast<index_t>(b), static_cast<index_t>(i)) * sigma[i];
      CHECK(v[(b * n + i) * 2] == Approx(total[b] - d).epsilon(1e-8).margin(1e-6 * std::abs(d)));
      CHECK(v[(b * n + i) * 2 + 1] == Approx(total[b] + d).epsilon(1e-8).margin(1e-6 * std::abs(d)));
    }
}

/// diag(J·C·Jᵀ), as fd_covariance.
template <class Lik>
std::vector<double> fd_variance(Lik& lik, const std::vector<double>& x, const std::vector<double>& C) {
  const Eigen::VectorXd d = fd_covariance(lik, x, C).diagonal();
  return {d.data(), d.data() + d.size()};
}

/// Each channel's covariance block against the full covariance `full` (`[bins × bins]`).
void check_channel_blocks(const Model& m, const std::vector<std::vector<double>>& blocks, const Eigen::MatrixXd& full, double tolerance) {
  REQUIRE(blocks.size() == m.channels.size());
  index_t b0 = 0;
  for (std::size_t c = 0; c < blocks.size(); ++c) {
    const index_t nb = m.channels[c].nbins;
    REQUIRE(blocks[c].size() == static_cast<std::size_t>(nb * nb));
    for (index_t i = 0; i < nb; ++i)
      for (index_t j = 0; j < nb; ++j) {
        INFO("channel " << c << " bins " << i << ", " << j);
        const double want = full(b0 + i, b0 + j);
        CHECK(blocks[c][static_cast<std::size_t>(i * nb + j)] == Approx(want).epsilon(tolerance).margin(tolerance * std::sqrt(full(b0 + i, b0 + i) * full(b0 + j, b0 + j))));
      }
    b0 += nb;
  }
}

template <class Lik>
void check_histograms(Lik& lik, const FitResult& r) {
  const Model& m = lik.model();
  const Histograms h = histograms(lik, r);
  REQUIRE(h.nbins == m.nbins_full());
  REQUIRE(h.nprocs == m.nprocs());
  CHECK(h.prefit == lik.yields(lik.default_parameters()));
  CHECK(h.postfit == lik.yields(r.x));
  CHECK(h.data == m.data);
  CHECK(h.data_variance == m.data);  // Poisson: the counts
  for (index_t b = 0; b < h.nbins; ++b) {
    double pre = 0, post = 0;
    for (index_t p = 0; p < h.nprocs; ++p) {
      pre += h.prefit[static_cast<std::size_t>(b * h.nprocs + p)];
      post += h.postfit[static_cast<std::size_t>(b * h.nprocs + p)];
    }
    CHECK(h.prefit_total[static_cast<std::size_t>(b)] == Approx(pre).epsilon(1e-14));
    CHECK(h.postfit_total[static_cast<std::size_t>(b)] == Approx(post).epsilon(1e-14));
  }
  // The prefit covariance: 1/w on the constrained nuisances, nothing on the POI and the free nuisance.
  const std::size_t n = r.x.size();
  std::vector<double> c0(n * n, 0.0);
  for (index_t s = 0; s < m.nsyst(); ++s)
    if (const double w = m.constraint_weights[static_cast<std::size_t>(s)]; w > 0) {
      const auto i = static_cast<std::size_t>(m.npoi() + s);
      c0[i + i * n] = 1 / w;
    }
  const Eigen::MatrixXd pre = fd_covariance(lik, lik.default_parameters(), c0), post = fd_covariance(lik, r.x, r.covariance);
  for (index_t b = 0; b < pre.rows(); ++b) {
    CHECK(h.prefit_variance[static_cast<std::size_t>(b)] == Approx(pre(b, b)).epsilon(1e-6));
    CHECK(h.postfit_variance[static_cast<std::size_t>(b)] == Approx(post(b, b)).epsilon(1e-6));
    CHECK(h.postfit_variance[static_cast<std::size_t>(b)] > 0);
  }
  CHECK(h.prefit_covariance.empty());
  CHECK(h.prefit_process_variance.empty());
  // Each process's variances (HistogramOptions::process_variances): J_p·C·J_pᵀ per cell, and nothing else moves.
  const Histograms hp = histograms(lik, r, {.process_variances = true});
  CHECK(hp.postfit_variance == h.postfit_variance);
  const std::vector<double> pre_p = fd_process_variance(lik, lik.default_parameters(), c0), post_p = fd_process_variance(lik, r.x, r.covariance);
  REQUIRE(hp.prefit_process_variance.size() == h.prefit.size());
  REQUIRE(hp.postfit_process_variance.size() == h.postfit.size());
  for (std::size_t c = 0; c < h.prefit.size(); ++c) {
    INFO("cell " << c);
    CHECK(hp.prefit_process_variance[c] == Approx(pre_p[c]).epsilon(1e-6).margin(1e-9 * h.prefit_variance[c / static_cast<std::size_t>(h.nprocs)]));
    CHECK(hp.postfit_process_variance[c] == Approx(post_p[c]).epsilon(1e-6).margin(1e-9 * h.postfit_variance[c / static_cast<std::size_t>(h.nprocs)]));
  }
  // Each channel's covariance (HistogramOptions::covariance): the same variances, bit for bit, and the blocks of J·C·Jᵀ.
  const Histograms hc = histograms(lik, r, {.covariance = true});
  CHECK(hc.prefit_variance == h.prefit_variance);
  CHECK(hc.postfit_variance == h.postfit_variance);
  check_channel_blocks(m, hc.prefit_covariance, pre, 1e-6);
  check_channel_blocks(m, hc.postfit_covariance, post, 1e-6);
  // Variations (HistogramOptions::variations): ν ∓ J_i·σ_i, σ prefit 1/√w or 1, postfit √C_ii.
  const Histograms hv = histograms(lik, r, {.variations = true});
  CHECK(hv.postfit_variance == h.postfit_variance);
  std::vector<double> sigma0(n, 0.0), sigma(n);  // prefit: POIs 0, unconstrained nuisances 1
  for (std::size_t i = 0; i < n; ++i) {
    sigma[i] = std::sqrt(r.covariance[i * n + i]);
    if (i >= static_cast<std::size_t>(m.npoi())) {
      const double w = m.constraint_weights[i - static_cast<std::size_t>(m.npoi())];
      sigma0[i] = w > 0 ? 1 / std::sqrt(w) : 1.0;
    }
  }
  check_variations(hv.prefit_variations, h.prefit_total, fd_jacobian(lik, lik.default_parameters()), sigma0);
  check_variations(hv.postfit_variations, h.postfit_total, fd_jacobian(lik, r.x), sigma);
}

LikelihoodOptions without_bin_by_bin() {
  LikelihoodOptions o;
  o.bin_by_bin.enabled = false;
  return o;
}

}  // namespace

TEMPLATE_TEST_CASE("histograms: every policy, three blocks of directions, variances as J·C·Jᵀ with a finite-difference J",
                   "[postfit][histograms]", FITLIB_TEST_POLICIES) {
  auto lik = test::likelihood_of<TestType>(histogram_model(140), 3, without_bin_by_bin());
  const FitResult r = fit(lik, TrustRegion<Exact>{});
  REQUIRE(r.converged());
  REQUIRE(r.covariance_status == CovarianceStatus::accurate);
  check_histograms(lik, r);
}

TEST_CASE("histograms: blocks of bins stay within a channel, and a channel's covariance is gathered from its blocks", "[postfit][histograms]") {
  Model m;
  m.channels = {{"a", 5, false}, {"b", 3, true}};
  // 2 bins a block: 64 MiB of Jacobian at 4 Mi columns.
  const std::vector<BinRange> blocks = detail::jacobian_blocks(m, index_t{1} << 22);
  const std::vector<std::pair<index_t, index_t>> want = {{0, 2}, {2, 4}, {4, 5}, {5, 7}, {7, 8}};
  REQUIRE(blocks.size() == want.size());
  for (std::size_t k = 0; k < want.size(); ++k) {
    CHECK(blocks[k].begin == want[k].first);
    CHECK(blocks[k].end == want[k].second);
  }
  std::mt19937_64 rng(3);
  std::normal_distribution<double> normal;
  Eigen::MatrixXd Y(3, 8);
  for (index_t i = 0; i < 3; ++i)
    for (index_t b = 0; b < 8; ++b) Y(i, b) = normal(rng);
  std::vector<double> var(8);
  for (index_t b = 0; b < 8; ++b) var[static_cast<std::size_t>(b)] = Y.col(b).squaredNorm() + 0.5;  // plus β's own
  std::vector<std::vector<double>> out;
  detail::ChannelCovariance cov(m, out);
  for (const BinRange& blk : blocks) cov.add(blk, Y.middleCols(blk.begin, blk.size()), var);
  REQUIRE(out.size() == 2);
  for (index_t c = 0, b0 = 0; c < 2; b0 += m.channels[static_cast<std::size_t>(c)].nbins, ++c) {
    const index_t nb = m.channels[static_cast<std::size_t>(c)].nbins;
    REQUIRE(out[static_cast<std::size_t>(c)].size() == static_cast<std::size_t>(nb * nb));
    const Eigen::MatrixXd gram = Y.middleCols(b0, nb).transpose() * Y.middleCols(b0, nb);
    for (index_t i = 0; i < nb; ++i)
      for (index_t j = 0; j < nb; ++j) {
        const double got = out[static_cast<std::size_t>(c)][static_cast<std::size_t>(i * nb + j)];
        if (i == j) CHECK(got == var[static_cast<std::size_t>(b0 + i)]);
        else CHECK(got == Approx(gram(i, j)).epsilon(1e-14));
      }
  }
}

TEST_CASE("histograms: yields per process and summed, variances as J·C·Jᵀ with a finite-difference J", "[postfit][histograms]") {
  const Model m = histogram_model();
  SerialLikelihood lik(m, {}, without_bin_by_bin());
  const FitResult r = fit(lik, TrustRegion<Exact>{});
  REQUIRE(r.converged());
  REQUIRE(r.covariance_status == CovarianceStatus::accurate);
  check_histograms(lik, r);

  SECTION("sparse templates over threads, the same numbers") {
    Model sparse = m;
    sparse.make_sparse();
    SparseThreadedLikelihood threaded(std::move(sparse), cpu::Threads{3}, without_bin_by_bin());
    const FitResult rt = fit(threaded, TrustRegion<Exact>{});
    check_histograms(threaded, rt);
  }
  SECTION("a frozen parameter contributes nothing to the postfit variances") {
    FitOptions fo;
    fo.frozen = {r.names[3]};
    const FitResult rf = fit(lik, TrustRegion<Exact>{}, fo);
    check_histograms(lik, rf);
  }
  SECTION("without a usable covariance the postfit variances are NaN, the yields still there") {
    FitResult bad = r;
    bad.covariance_status = CovarianceStatus::failed;
    const Histograms h = histograms(lik, bad);
    CHECK(std::all_of(h.postfit_variance.begin(), h.postfit_variance.end(), [](double v) { return std::isnan(v); }));
    CHECK(h.postfit == lik.yields(r.x));
  }
}

TEST_CASE("histograms: refused with the covariance data term's bin-by-bin statistics, and without the fit's covariance", "[postfit][histograms]") {
  test::RandomModelSpec sp;
  sp.template_stats = true;
  Model m = test::random_model(sp);
  const auto nb = static_cast<std::size_t>(m.nbins());
  m.data_covariance_inverse.assign(nb * nb, 0.0);  // diagonal: 1/max(n, 1)
  for (std::size_t b = 0; b < nb; ++b) m.data_covariance_inverse[b * nb + b] = 1 / std::max(m.data[b], 1.0);
  LikelihoodOptions o;
  o.data_term = DataTerm::covariance;
  SerialLikelihood lik(m, {}, o);
  REQUIRE(lik.bin_by_bin_per_bin() > 0);
  const FitResult r = fit(lik, TrustRegion<Exact>{});
  CHECK_THROWS_WITH(histograms(lik, r), Catch::Contains("separable data term") && Catch::Contains("--noBinByBinStat"));

  SerialLikelihood plain(histogram_model(), {}, without_bin_by_bin());
  FitOptions fo;
  fo.covariance = false;
  const FitResult no_cov = fit(plain, TrustRegion<Exact>{}, fo);
  CHECK_THROWS_WITH(histograms(plain, no_cov), Catch::Contains("FitOptions::covariance"));
}

namespace {

/// A small model with template variances (random_model: process 1 exact in every other bin, bin 3 exact
/// throughout, so that lite β scales some cells of a bin and not others) and a masked channel.
Model bbstat_histogram_model() {
  test::RandomModelSpec sp;
  sp.bins = 7;
  sp.masked_bins = 2;
  sp.procs = 3;
  sp.signals = 1;
  sp.nsyst = 3;
  sp.template_stats = true;
  sp.seed = 41;
  return test::random_model(sp);
}

/// A bin-by-bin configuration of the reference tests: its likelihood options, and its name for INFO.
struct BbCase {
  BinByBinMode mode;
  BinByBinType type;
  DataTerm term;
  LikelihoodOptions options() const {
    LikelihoodOptions o;
    o.bin_by_bin.mode = mode;
    o.bin_by_bin.type = type;
    o.data_term = term;
    return o;
  }
  std::string name() const {
    return std::string("mode ") + (mode == BinByBinMode::lite ? "lite" : "full") + ", type " + std::to_string(static_cast<int>(type)) + ", term " +
           std::to_string(static_cast<int>(term));
  }
};

/// c_p of cell (b, p) and the additive shift of bin b at β (`beta`, per entries of bin b), written out per mode
/// for the reference, independently of bbstat.hpp: the bin's per-process yields with β applied.
std::vector<double> apply_beta_by_hand(const Model& m, const LikelihoodOptions& o, index_t b, const std::vector<double>& mu, const double* beta) {
  const index_t P = m.nprocs();
  std::vector<double> out(mu.begin() + b * P, mu.begin() + (b + 1) * P);
  const bool lite = o.bin_by_bin.mode == BinByBinMode::lite;
  const BinByBinType type = o.bin_by_bin.resolved(o.data_term);
  double v = 0, nu = 0;
  for (index_t p = 0; p < P; ++p) {
    v += m.sumw2[static_cast<std::size_t>(b * P + p)];
    nu += out[static_cast<std::size_t>(p)];
  }
  for (index_t p = 0; p < P; ++p) {
    const double w2 = m.sumw2[static_cast<std::size_t>(b * P + p)];
    auto& y = out[static_cast<std::size_t>(p)];
    if (type == BinByBinType::normal_additive)
      y += lite ? std::sqrt(v) * beta[0] * y / nu : std::sqrt(w2) * beta[p];
    else if (w2 > 0 || !lite)
      y *= lite ? beta[0] : beta[p];
  }
  return out;
}

}  // namespace

TEST_CASE("histograms with bin-by-bin statistics: β̂ in the yields, the variance of the joint (x, β) fit", "[postfit][histograms][bbstat]") {
  // The reference: the NLL as a function of x and every data bin's β (β held by fix_bin_by_bin, plus β's
  // constraint written out), its Hessian by finite differences, and var_b = gᵀ·H⁻¹·g with g the finite-difference
  // gradient of bin b's summed yield in (x, β). The histograms' J·C·Jᵀ through β̂(x) plus cᵀ·G_ββ⁻¹·c must equal
  // it: C is the inverse of H's Schur complement, the profiled Hessian.
  const Model m = bbstat_histogram_model();
  for (const BbCase c : {BbCase{BinByBinMode::lite, BinByBinType::gamma, DataTerm::poisson}, BbCase{BinByBinMode::full, BinByBinType::gamma, DataTerm::poisson},
                       BbCase{BinByBinMode::lite, BinByBinType::normal_additive, DataTerm::poisson},
                       BbCase{BinByBinMode::full, BinByBinType::normal_additive, DataTerm::poisson},
                       BbCase{BinByBinMode::lite, BinByBinType::gamma, DataTerm::chisq}}) {
    const LikelihoodOptions o = c.options();
    Model mc = m;
    if (c.term == DataTerm::chisq) test::add_data_variances(mc);
    SerialLikelihood lik(mc, {}, o);
    INFO(c.name());
    const FitResult r = fit(lik, TrustRegion<Exact>{});
    INFO(r.status_text());
    REQUIRE(r.converged());
    REQUIRE(r.covariance_status == CovarianceStatus::accurate);
    const Histograms h = histograms(lik, r, {.process_variances = true});

    const index_t n = lik.size(), nb = mc.nbins(), bf = mc.nbins_full(), P = mc.nprocs(), per = lik.bin_by_bin_per_bin();
    const BinByBinStats st = BinByBinStats::build(mc, {0, bf}, o.bin_by_bin, o.data_term);
    const std::vector<double> beta_hat = lik.bin_by_bin_parameters(r.x);
    // The postfit yields: β̂ applied to the yields before β.
    const std::vector<double> mu = lik.yields(r.x);
    for (index_t b = 0; b < bf; ++b) {
      const std::vector<double> want = apply_beta_by_hand(mc, o, b, mu, b < nb ? beta_hat.data() + b * per : st.beta0.data() + b * per);
      for (index_t p = 0; p < P; ++p) CHECK(h.postfit[static_cast<std::size_t>(b * P + p)] == Approx(want[static_cast<std::size_t>(p)]).epsilon(1e-13));
    }

    // β's prior adds c²/k per β (c = ∂ν̃/∂β) where no data constrain β: every bin prefit, the masked ones postfit;
    // k = sumw²/sumw2 (sumw the nominal yields here), c the yield of the cells β scales, or s for an additive β.
    const std::size_t nx = r.x.size();
    std::vector<double> c0(nx * nx, 0.0);
    for (index_t s = 0; s < mc.nsyst(); ++s)
      if (const double w = mc.constraint_weights[static_cast<std::size_t>(s)]; w > 0) {
        const auto i = static_cast<std::size_t>(mc.npoi() + s);
        c0[i + i * nx] = 1 / w;
      }
    const std::vector<double> x0 = lik.default_parameters(), mu0 = lik.yields(x0);
    const std::vector<double> pre = fd_variance(lik, x0, c0), post = fd_variance(lik, r.x, r.covariance);
    const std::vector<double> nominal = mc.nominal_yields();
    const auto prior = [&](const std::vector<double>& y, index_t b) {
      double sumw2 = 0, active = 0, active_sumw = 0, full = 0;
      for (index_t p = 0; p < P; ++p) {
        const auto cell = static_cast<std::size_t>(b * P + p);
        sumw2 += mc.sumw2[cell];
        if (mc.sumw2[cell] > 0) {
          active += y[cell];
          active_sumw += nominal[cell];
          full += y[cell] * y[cell] * mc.sumw2[cell] / (nominal[cell] * nominal[cell]);
        }
      }
      if (c.type == BinByBinType::normal_additive) return sumw2;
      return c.mode == BinByBinMode::full ? full : active_sumw > 0 ? active * active * sumw2 / (active_sumw * active_sumw) : 0.0;
    };
    // Per process, c_p²/k: a lite β's c shared as the cells' yields (all of it for each active cell, multiplicative; s
    // in proportion to the yields, additive), a full one's on its own cell.
    const auto process_prior = [&](const std::vector<double>& y, index_t b, index_t p) {
      const auto cell = static_cast<std::size_t>(b * P + p);
      double sumw2 = 0, active_sumw = 0, nu = 0;
      for (index_t q = 0; q < P; ++q) {
        const auto e = static_cast<std::size_t>(b * P + q);
        sumw2 += mc.sumw2[e];
        nu += y[e];
        if (mc.sumw2[e] > 0) active_sumw += nominal[e];
      }
      if (c.mode == BinByBinMode::full)
        return c.type == BinByBinType::normal_additive ? mc.sumw2[cell]
                                                        : mc.sumw2[cell] > 0 ? y[cell] * y[cell] * mc.sumw2[cell] / (nominal[cell] * nominal[cell]) : 0.0;
      if (c.type == BinByBinType::normal_additive) return sumw2 * (y[cell] / nu) * (y[cell] / nu);
      return mc.sumw2[cell] > 0 ? y[cell] * y[cell] * sumw2 / (active_sumw * active_sumw) : 0.0;
    };
    const std::vector<double> pre_p = fd_process_variance(lik, x0, c0), post_p = fd_process_variance(lik, r.x, r.covariance);
    for (index_t b = 0; b < bf; ++b) {
      INFO("bin " << b);
      CHECK(h.prefit_variance[static_cast<std::size_t>(b)] == Approx(pre[static_cast<std::size_t>(b)] + prior(mu0, b)).epsilon(1e-6));
      if (b >= nb) CHECK(h.postfit_variance[static_cast<std::size_t>(b)] == Approx(post[static_cast<std::size_t>(b)] + prior(mu, b)).epsilon(1e-6));
      for (index_t p = 0; p < P; ++p) {
        INFO("process " << p);
        const auto cell = static_cast<std::size_t>(b * P + p);
        const double margin = 1e-9 * h.prefit_variance[static_cast<std::size_t>(b)];
        CHECK(h.prefit_process_variance[cell] == Approx(pre_p[cell] + process_prior(mu0, b, p)).epsilon(1e-6).margin(margin));
        if (b >= nb) CHECK(h.postfit_process_variance[cell] == Approx(post_p[cell] + process_prior(mu, b, p)).epsilon(1e-6).margin(margin));
      }
    }

    // The joint NLL and the bins' yields in z = (x, β of the data bins).
    const index_t nz = n + nb * per;
    const auto joint = [&](const std::vector<double>& z) {
      const std::vector<double> x(z.begin(), z.begin() + n), beta(z.begin() + n, z.end());
      lik.fix_bin_by_bin(beta);
      double f = lik.value(x);
      lik.fix_bin_by_bin({});
      for (index_t e = 0; e < nb * per; ++e)
        if (!st.fixed[static_cast<std::size_t>(e)]) f += detail::beta_term(st.type, beta[static_cast<std::size_t>(e)], st.kstat[static_cast<std::size_t>(e)], st.beta0[static_cast<std::size_t>(e)]).value;
      return f;
    };
    const auto cell_yields = [&](const std::vector<double>& z, index_t b) {
      const std::vector<double> x(z.begin(), z.begin() + n), y = lik.yields(x);
      return apply_beta_by_hand(mc, o, b, y, z.data() + n + b * per);
    };
    const auto bin_yield = [&](const std::vector<double>& z, index_t b) {
      const std::vector<double> cells = cell_yields(z, b);
      return std::accumulate(cells.begin(), cells.end(), 0.0);
    };
    std::vector<double> z0(r.x);
    z0.insert(z0.end(), beta_hat.begin(), beta_hat.end());
    std::vector<double> step(static_cast<std::size_t>(nz));
    for (index_t i = 0; i < nz; ++i) step[static_cast<std::size_t>(i)] = 1e-4 * std::max(1.0, std::abs(z0[static_cast<std::size_t>(i)]));
    Eigen::MatrixXd H(nz, nz);
    for (index_t i = 0; i < nz; ++i)
      for (index_t j = 0; j <= i; ++j) {
        const double hi = step[static_cast<std::size_t>(i)], hj = step[static_cast<std::size_t>(j)];
        const auto at = [&](double si, double sj) {
          std::vector<double> z = z0;
          z[static_cast<std::size_t>(i)] += si * hi;
          z[static_cast<std::size_t>(j)] += sj * hj;
          return joint(z);
        };
        H(i, j) = H(j, i) = (at(1, 1) - at(1, -1) - at(-1, 1) + at(-1, -1)) / (4 * hi * hj);
      }
    // Fixed β (no template statistics there) do not vary: drop their rows and columns.
    std::vector<index_t> free;
    for (index_t i = 0; i < nz; ++i)
      if (i < n || !st.fixed[static_cast<std::size_t>(i - n)]) free.push_back(i);
    Eigen::MatrixXd Hf(static_cast<index_t>(free.size()), static_cast<index_t>(free.size()));
    for (std::size_t a = 0; a < free.size(); ++a)
      for (std::size_t b = 0; b < free.size(); ++b) Hf(static_cast<index_t>(a), static_cast<index_t>(b)) = H(free[a], free[b]);
    const Eigen::MatrixXd Cz = Hf.inverse();
    const Histograms hc = histograms(lik, r, {.covariance = true});
    REQUIRE(hc.postfit_covariance.size() == 2);  // the data channel, then the masked one
    REQUIRE(mc.channels[0].nbins == nb);
    Eigen::MatrixXd G(static_cast<index_t>(free.size()), nb);  // each data bin's gradient in z
    for (index_t b = 0; b < nb; ++b) {
      Eigen::VectorXd g(static_cast<index_t>(free.size()));
      for (std::size_t a = 0; a < free.size(); ++a) {
        std::vector<double> up = z0, down = z0;
        up[static_cast<std::size_t>(free[a])] += step[static_cast<std::size_t>(free[a])];
        down[static_cast<std::size_t>(free[a])] -= step[static_cast<std::size_t>(free[a])];
        g(static_cast<index_t>(a)) = (bin_yield(up, b) - bin_yield(down, b)) / (2 * step[static_cast<std::size_t>(free[a])]);
      }
      INFO("bin " << b);
      CHECK(h.postfit_variance[static_cast<std::size_t>(b)] == Approx(g.dot(Cz * g)).epsilon(1e-4));
      G.col(b) = g;
      // Each process's yield: its own gradient in z
      Eigen::MatrixXd gp(static_cast<index_t>(free.size()), P);
      for (std::size_t a = 0; a < free.size(); ++a) {
        std::vector<double> up = z0, down = z0;
        up[static_cast<std::size_t>(free[a])] += step[static_cast<std::size_t>(free[a])];
        down[static_cast<std::size_t>(free[a])] -= step[static_cast<std::size_t>(free[a])];
        const std::vector<double> cu = cell_yields(up, b), cd = cell_yields(down, b);
        for (index_t p = 0; p < P; ++p)
          gp(static_cast<index_t>(a), p) = (cu[static_cast<std::size_t>(p)] - cd[static_cast<std::size_t>(p)]) / (2 * step[static_cast<std::size_t>(free[a])]);
      }
      for (index_t p = 0; p < P; ++p) {
        INFO("process " << p);
        CHECK(h.postfit_process_variance[static_cast<std::size_t>(b * P + p)] ==
              Approx(gp.col(p).dot(Cz * gp.col(p))).epsilon(1e-4).margin(1e-6 * h.postfit_variance[static_cast<std::size_t>(b)]));
      }
    }
    // Variations hold β at β̂: their slope is the x part of g, times √C_ii.
    const Histograms hv = histograms(lik, r, {.variations = true});
    for (index_t b = 0; b < nb; ++b)
      for (index_t i = 0; i < n; ++i) {
        const auto at = static_cast<std::size_t>((b * n + i) * 2);
        const double slope = (hv.postfit_variations[at + 1] - hv.postfit_variations[at]) / 2, sigma = std::sqrt(r.covariance[static_cast<std::size_t>(i * n + i)]);
        INFO("variation of bin " << b << " along parameter " << i);
        CHECK(slope == Approx(G(i, b) * sigma).epsilon(1e-5).margin(1e-7 * std::abs(h.postfit_total[static_cast<std::size_t>(b)])));
      }
    const Eigen::MatrixXd joint_cov = G.transpose() * Cz * G;  // the covariance of the data channel's yields
    for (index_t i = 0; i < nb; ++i)
      for (index_t j = 0; j < nb; ++j) {
        INFO("bins " << i << ", " << j);
        CHECK(hc.postfit_covariance[0][static_cast<std::size_t>(i * nb + j)] ==
              Approx(joint_cov(i, j)).epsilon(1e-4).margin(1e-4 * std::sqrt(joint_cov(i, i) * joint_cov(j, j))));
      }
    for (index_t b = 0; b < bf - nb; ++b)  // the masked channel's diagonal: its variances, β's prior included
      CHECK(hc.postfit_covariance[1][static_cast<std::size_t>(b * (bf - nb) + b)] == Approx(h.postfit_variance[static_cast<std::size_t>(nb + b)]).epsilon(1e-12));
  }
}

TEMPLATE_TEST_CASE("histograms with bin-by-bin statistics: every policy gives cpu::Serial's", "[postfit][histograms][bbstat]", FITLIB_TEST_POLICIES) {
  const Model m = bbstat_histogram_model();
  for (const BinByBinMode mode : {BinByBinMode::lite, BinByBinMode::full}) {
    LikelihoodOptions o;
    o.bin_by_bin.mode = mode;
    o.bin_by_bin.type = BinByBinType::gamma;
    SerialLikelihood serial(m, {}, o);
    auto lik = test::likelihood_of<TestType>(m, 3, o);
    const FitResult r = fit(serial, TrustRegion<Exact>{});
    REQUIRE(r.converged());
    const HistogramOptions all{.covariance = true, .variations = true, .process_variances = true};
    const Histograms a = histograms(serial, r, all), b = histograms(lik, r, all);  // the same fit result: the propagation alone
    for (std::size_t k = 0; k < a.postfit_process_variance.size(); ++k) {
      CHECK(b.prefit_process_variance[k] == Approx(a.prefit_process_variance[k]).epsilon(1e-12).margin(1e-14 * a.prefit_variance[k / static_cast<std::size_t>(m.nprocs())]));
      CHECK(b.postfit_process_variance[k] == Approx(a.postfit_process_variance[k]).epsilon(1e-12).margin(1e-14 * a.postfit_variance[k / static_cast<std::size_t>(m.nprocs())]));
    }
    for (std::size_t k = 0; k < a.postfit.size(); ++k) CHECK(b.postfit[k] == Approx(a.postfit[k]).epsilon(1e-13));
    for (std::size_t k = 0; k < a.postfit_variations.size(); ++k) {
      CHECK(b.prefit_variations[k] == Approx(a.prefit_variations[k]).epsilon(1e-12));
      CHECK(b.postfit_variations[k] == Approx(a.postfit_variations[k]).epsilon(1e-12));
    }
    REQUIRE(b.postfit_covariance.size() == a.postfit_covariance.size());
    for (std::size_t c = 0; c < a.postfit_covariance.size(); ++c)
      for (std::size_t k = 0; k < a.postfit_covariance[c].size(); ++k)
        CHECK(b.postfit_covariance[c][k] == Approx(a.postfit_covariance[c][k]).epsilon(1e-12).margin(1e-12 * std::abs(a.postfit_covariance[c][0])));
    // The Jacobian pass's own yields are the histograms' sums (β̂ applied in the data bins)
    const auto bf = static_cast<std::size_t>(m.nbins_full()), n = static_cast<std::size_t>(lik.size());
    std::vector<double> sums(bf), J(bf * n), bvar(bf);
    lik.yield_jacobian(r.x, {0, m.nbins_full()}, true, sums, J, bvar);
    for (std::size_t k = 0; k < bf; ++k) CHECK(sums[k] == Approx(a.postfit_total[k]).epsilon(1e-13));
    // and per process: the histograms' cells, whose rows add up to the sums' (the column sums of ∂ν̃_p/∂m_q are w_q)
    const auto P = static_cast<std::size_t>(m.nprocs());
    std::vector<double> cells(bf * P), Jp(bf * P * n), pvar(bf * P);
    lik.process_yield_jacobian(r.x, {0, m.nbins_full()}, true, cells, Jp, pvar);
    for (std::size_t k = 0; k < bf * P; ++k) CHECK(cells[k] == Approx(a.postfit[k]).epsilon(1e-13));
    for (std::size_t k = 0; k < bf; ++k)
      for (std::size_t i = 0; i < n; ++i) {
        double sum = 0;
        for (std::size_t p = 0; p < P; ++p) sum += Jp[(k * P + p) * n + i];
        CHECK(sum == Approx(J[k * n + i]).epsilon(1e-12).margin(1e-12 * sums[k]));
      }
    for (std::size_t k = 0; k < a.postfit_variance.size(); ++k) {
      CHECK(b.prefit_variance[k] == Approx(a.prefit_variance[k]).epsilon(1e-12));
      CHECK(b.postfit_variance[k] == Approx(a.postfit_variance[k]).epsilon(1e-12));
    }
  }
}

namespace {

/// The χ²'s brute-force reference: rᵀ·S⁻¹·r for the rows [b0, b1) of S.
double chi2_of(const Eigen::VectorXd& r, const Eigen::MatrixXd& S, index_t b0, index_t b1) {
  const Eigen::VectorXd rb = r.segment(b0, b1 - b0);
  return rb.dot(S.block(b0, b0, b1 - b0, b1 - b0).ldlt().solve(rb));
}

/// Checks χ² per channel and in total against chi2_of(r, S).
void check_chi2(const Model& m, const std::vector<LinearChi2>& per, const LinearChi2& total, const Eigen::VectorXd& r, const Eigen::MatrixXd& S,
                double tolerance) {
  REQUIRE(per.size() == m.channels.size());
  index_t b0 = 0;
  for (std::size_t c = 0; c < per.size(); ++c) {
    INFO("channel " << m.channels[c].name);
    if (m.channels[c].masked) {
      CHECK(per[c].ndf == 0);
      CHECK(std::isnan(per[c].chi2));
      continue;
    }
    const index_t b1 = b0 + m.channels[c].nbins;
    CHECK(per[c].ndf == b1 - b0);
    CHECK(per[c].chi2 == Approx(chi2_of(r, S, b0, b1)).epsilon(tolerance));
    b0 = b1;
  }
  CHECK(total.ndf == m.nbins());
  CHECK(total.chi2 == Approx(chi2_of(r, S, 0, m.nbins())).epsilon(tolerance));
}

/// Two unmasked channels (14 and 10 bins: the χ² take Woodbury's route in the first and the total, the direct one in
/// the second) and a masked one, no empty bins.
Model chi2_model() {
  test::RandomModelSpec sp;
  sp.bins = 24;
  sp.masked_bins = 3;
  sp.nsyst = 4;
  sp.zero_counts = false;
  sp.seed = 41;
  Model m = test::random_model(sp);
  m.channels.front() = {"a", 14, false};
  m.channels.insert(m.channels.begin() + 1, Channel{"b", 10, false});
  m.constraint_weights[2] = 4;
  return m;
}

}  // namespace

TEST_CASE("histograms: the linear χ² against brute force, prefit and postfit (refits with moved data and constraint centres)",
          "[postfit][histograms][chi2]") {
  const auto term = GENERATE(DataTerm::poisson, DataTerm::chisq, DataTerm::covariance);
  INFO("data term " << static_cast<int>(term));
  Model m = chi2_model();
  const index_t nd = m.nbins();
  Eigen::MatrixXd V = Eigen::VectorXd::Map(m.data.data(), nd).asDiagonal();  // the data's covariance
  if (term == DataTerm::covariance) {  // neighbours correlated by 0.3
    for (index_t b = 0; b + 1 < nd; ++b) V(b, b + 1) = V(b + 1, b) = 0.3 * std::sqrt(V(b, b) * V(b + 1, b + 1));
    const Eigen::MatrixXd inverse = V.inverse(), cinv = (inverse + inverse.transpose()) / 2;
    m.data_covariance_inverse.assign(cinv.data(), cinv.data() + cinv.size());
  }
  LikelihoodOptions o = without_bin_by_bin();
  o.data_term = term;
  SerialLikelihood lik(m, {}, o);
  TrustRegionOptions t;
  t.gtol = 1e-10;
  const auto refit = [&] { return fit(lik, TrustRegion<Exact>(t)); };
  const FitResult r = refit();
  REQUIRE(r.converged());
  const Histograms h = histograms(lik, r);
  const auto data_rows = [&](const std::vector<double>& v) { return Eigen::VectorXd(Eigen::VectorXd::Map(v.data(), nd)); };
  const Eigen::VectorXd n0 = data_rows(m.data);

  // Prefit: S = V + J·C₀·Jᵀ with a finite-difference J.
  const Eigen::MatrixXd J0 = fd_jacobian(lik, lik.default_parameters()).topRows(nd);
  Eigen::VectorXd c0 = Eigen::VectorXd::Zero(J0.cols());
  for (index_t s = 0; s < m.nsyst(); ++s)
    if (const double w = m.constraint_weights[static_cast<std::size_t>(s)]; w > 0) c0(m.npoi() + s) = 1 / w;
  check_chi2(m, h.prefit_chi2, h.prefit_chi2_total, data_rows(h.prefit_total) - n0, V + J0 * c0.asDiagonal() * J0.transpose(), 1e-6);

  // Postfit: S = R·V·Rᵀ + Θ·diag(1/w)·Θᵀ, R = ∂(ν(x̂) − n)/∂n and Θ = ∂ν(x̂)/∂θ₀ by central differences of refits.
  const auto moved = [&](auto&& move, double step) {
    move(step);
    const Eigen::VectorXd up = data_rows(detail::process_sums(lik.yields(refit().x), m.nbins_full(), m.nprocs()));
    move(-step);
    const Eigen::VectorXd down = data_rows(detail::process_sums(lik.yields(refit().x), m.nbins_full(), m.nprocs()));
    move(0);
    return Eigen::VectorXd((up - down) / (2 * step));
  };
  Eigen::MatrixXd R(nd, nd);
  const std::vector<double> variances = lik.data_variances();
  for (index_t b = 0; b < nd; ++b) {
    R.col(b) = moved(
        [&](double d) {
          std::vector<double> counts = m.data;
          counts[static_cast<std::size_t>(b)] += d;
          lik.set_data(counts, variances);
        },
        1e-3 * n0(b));
    R(b, b) -= 1;
  }
  Eigen::MatrixXd S = R * V * R.transpose();
  for (index_t s = 0; s < m.nsyst(); ++s) {
    const double w = m.constraint_weights[static_cast<std::size_t>(s)];
    if (w == 0) continue;
    const Eigen::VectorXd theta = moved(
        [&](double d) {
          std::vector<double> centres = m.theta0;
          centres[static_cast<std::size_t>(s)] += d;
          lik.set_constraint_centres(centres);
        },
        1e-3);
    S += theta * theta.transpose() / w;
  }
  CHECK(h.postfit_chi2_note.empty());
  check_chi2(m, h.postfit_chi2, h.postfit_chi2_total, data_rows(h.postfit_total) - n0, S, 1e-5);

  SECTION("HistogramOptions::chi2 off: none") {
    const Histograms none = histograms(lik, r, {.chi2 = false});
    CHECK(none.prefit_chi2.empty());
    CHECK(none.postfit_chi2.empty());
    CHECK(none.postfit_variance == h.postfit_variance);
  }
}

TEST_CASE("linear_chi2: Woodbury's route equals the direct one", "[postfit][chi2]") {
  std::mt19937_64 rng(5);
  std::normal_distribution<double> g;
  const index_t rows = 12, k = 4;
  // The postfit's form: U = [J·T, diag(d)·J], M = [[A, I], [I, 0]] with its inverse [[0, I], [I, −A]], d < 0.
  detail::ResidualCovariance s;
  s.J = Eigen::MatrixXd::NullaryExpr(rows, k, [&] { return g(rng); });
  const Eigen::MatrixXd T = Eigen::MatrixXd::NullaryExpr(k, k, [&] { return g(rng); });
  const Eigen::VectorXd d = Eigen::VectorXd::NullaryExpr(rows, [&] { return -0.5 - std::abs(g(rng)); });
  s.blocks = {{.d = {}, .T = T, .X = {}}, {.d = d, .T = {}, .X = {}}};
  const Eigen::MatrixXd B = Eigen::MatrixXd::NullaryExpr(k, k, [&] { return g(rng); }), A = B * B.transpose(), I = Eigen::MatrixXd::Identity(k, k);
  s.m.setZero(2 * k, 2 * k);
  s.m << A, I, I, Eigen::MatrixXd::Zero(k, k);
  s.m_inverse.setZero(2 * k, 2 * k);
  s.m_inverse << Eigen::MatrixXd::Zero(k, k), I, I, -A;
  Eigen::MatrixXd U(rows, 2 * k);
  U << s.J * T, d.asDiagonal() * s.J;
  CHECK(s.U({0, rows}).isApprox(U, 1e-15));
  // a positive definite S: V large enough against the indefinite part
  s.v = 10 * (U * s.m * U.transpose()).cwiseAbs().rowwise().sum() + Eigen::VectorXd::Ones(rows);
  const Eigen::VectorXd r = Eigen::VectorXd::NullaryExpr(rows, [&] { return g(rng); });
  const Eigen::MatrixXd S = Eigen::MatrixXd(s.v.asDiagonal()) + U * s.m * U.transpose();
  const LinearChi2 woodbury = detail::linear_chi2(r, s, {0, rows});  // 8 columns < 12 rows
  const LinearChi2 direct = detail::linear_chi2(r, s, {2, 8});        // 8 columns ≥ 6 rows
  CHECK(woodbury.ndf == rows);
  CHECK(woodbury.chi2 == Approx(chi2_of(r, S, 0, rows)).epsilon(1e-12));
  CHECK(direct.chi2 == Approx(chi2_of(r, S, 2, 8)).epsilon(1e-12));
  // The second block given by its columns X (bin-by-bin statistics' postfit form): the same U, the same χ², through
  // the given block's own products on both routes.
  detail::ResidualCovariance sx = s;
  sx.blocks[1] = {.d = {}, .T = {}, .X = d.asDiagonal() * s.J};
  CHECK(sx.U({0, rows}).isApprox(U, 1e-15));
  CHECK(detail::linear_chi2(r, sx, {0, rows}).chi2 == Approx(woodbury.chi2).epsilon(1e-12));
  CHECK(detail::linear_chi2(r, sx, {2, 8}).chi2 == Approx(direct.chi2).epsilon(1e-12));
  // The prefit's form, U = J·T, M = I, with a bin without variance (an empty Poisson bin): the direct route.
  s.blocks = {{.d = {}, .T = T.leftCols(3), .X = {}}};
  s.m = s.m_inverse = Eigen::MatrixXd::Identity(3, 3);
  s.v(3) = 0;
  const Eigen::MatrixXd U0 = s.J * T.leftCols(3);
  const Eigen::MatrixXd S0 = Eigen::MatrixXd(s.v.asDiagonal()) + U0 * U0.transpose();
  CHECK(detail::linear_chi2(r, s, {0, rows}).chi2 == Approx(chi2_of(r, S0, 0, rows)).epsilon(1e-12));
  s.v(3) = 1;
  const Eigen::MatrixXd S1 = Eigen::MatrixXd(s.v.asDiagonal()) + U0 * U0.transpose();
  CHECK(detail::linear_chi2(r, s, {0, rows}).chi2 == Approx(chi2_of(r, S1, 0, rows)).epsilon(1e-12));  // Woodbury's
  // Jᵀ·diag(w)·J for weights of either sign, or mixed
  Eigen::VectorXd mixed(rows);
  for (index_t i = 0; i < rows; ++i) mixed(i) = (i % 2 ? 1.0 : -1.0) * static_cast<double>(1 + i);
  for (const Eigen::VectorXd& w : {Eigen::VectorXd(s.v), Eigen::VectorXd(-s.v), mixed})
    CHECK(detail::weighted_gram(s.J, w).isApprox(s.J.transpose() * w.asDiagonal() * s.J, 1e-13));
}

namespace {

/// chi2_model's bins as three channels with axes: "a" (x: 3 × y: 4), "b" (z: 12) and the masked "m" (u: 3).
Model mapping_model() {
  test::RandomModelSpec sp;
  sp.bins = 24;
  sp.masked_bins = 3;
  sp.nsyst = 4;
  sp.zero_counts = false;
  sp.seed = 43;
  sp.template_stats = true;
  Model m = test::random_model(sp);
  m.channels = {{"a", 12, false, {detail::integer_axis("x", 3), detail::integer_axis("y", 4)}},
                {"b", 12, false, {detail::integer_axis("z", 12)}},
                {"m", 3, true, {detail::integer_axis("u", 3)}}};
  m.constraint_weights[2] = 4;
  return m;
}

std::vector<double> values_of(const BinMapping& f, const std::vector<double>& nu) {
  std::vector<double> y(static_cast<std::size_t>(f.size()));
  f.value(nu, y);
  return y;
}

}  // namespace

TEST_CASE("mappings: Select, Project, Normalize and Ratio sum the bins they should, with their forward derivative", "[postfit][mappings]") {
  const Model m = mapping_model();
  std::vector<double> nu(static_cast<std::size_t>(m.nbins_full()));
  for (std::size_t b = 0; b < nu.size(); ++b) nu[b] = 1.0 + static_cast<double>(b * b % 7) + 0.1 * static_cast<double>(b);
  const auto a = [&](index_t x, index_t y) { return nu[static_cast<std::size_t>(x * 4 + y)]; };
  const auto b = [&](index_t z) { return nu[static_cast<std::size_t>(12 + z)]; };

  const BinMapping px = parse_mapping(m, {"Project", "a", "x"});
  CHECK(px.key() == "Project a x");
  REQUIRE(px.size() == 3);
  CHECK(px.channels().front().axes.front().name == "x");
  for (index_t x = 0; x < 3; ++x) CHECK(values_of(px, nu)[static_cast<std::size_t>(x)] == Approx(a(x, 0) + a(x, 1) + a(x, 2) + a(x, 3)));
  const BinMapping pyx = parse_mapping(m, {"Project", "a", "y", "x"});  // transposed
  REQUIRE(pyx.size() == 12);
  CHECK(pyx.channels().front().axes[0].name == "y");
  for (index_t y = 0; y < 4; ++y)
    for (index_t x = 0; x < 3; ++x) CHECK(values_of(pyx, nu)[static_cast<std::size_t>(y * 3 + x)] == a(x, y));
  CHECK(parse_mapping(m, {"Project", "a"}).size() == 1);
  const BinMapping s1 = parse_mapping(m, {"Select", "a", "x:1"});  // one index: that bin, the axis summed away
  REQUIRE(s1.size() == 4);
  for (index_t y = 0; y < 4; ++y) CHECK(values_of(s1, nu)[static_cast<std::size_t>(y)] == a(1, y));
  const BinMapping s2 = parse_mapping(m, {"Select", "a", "x:slice(1,3),y:sum"});
  REQUIRE(s2.size() == 2);
  CHECK(s2.channels().front().axes.front().edges == std::vector<double>{1, 2, 3});
  CHECK(values_of(s2, nu)[1] == Approx(a(2, 0) + a(2, 1) + a(2, 2) + a(2, 3)));
  const BinMapping norm = parse_mapping(m, {"Normalize", "a", "y"});
  CHECK(norm.ndf_reduction() == 1);
  const std::vector<double> yn = values_of(norm, nu);
  CHECK(std::accumulate(yn.begin(), yn.end(), 0.0) == Approx(1.0).epsilon(1e-15));
  const BinMapping ratio = parse_mapping(m, {"Ratio", "a", "b", "x:sum", "z:slice(0,4)"});
  REQUIRE(ratio.size() == 4);
  CHECK(ratio.channels().front().name == "a_b");
  CHECK(ratio.channels().front().axes.front().name == "a0");  // y and z differ: rabbit's IntCategory axes
  CHECK(ratio.channels().front().axes.front().categories == std::vector<std::string>{"0", "1", "2", "3"});
  CHECK(parse_mapping(m, {"Ratio", "a", "a", "x:0", "x:1"}).channels().front().axes.front().name == "y");  // the same axes kept
  CHECK(parse_mapping(m, {"Project", "a"}).channels().front().axes.front().name == "yield");
  CHECK(parse_mapping(m, {"Select", "a", "x:1"}).key() == "Select x:1");  // rabbit's key, without the channel
  CHECK(values_of(ratio, nu)[2] == Approx((a(0, 2) + a(1, 2) + a(2, 2)) / b(2)));
  CHECK(ratio.has_data());
  CHECK_FALSE(parse_mapping(m, {"Project", "m"}).has_data());

  // The forward derivative against central differences of value(), along two directions at once.
  std::mt19937_64 rng(3);
  std::normal_distribution<double> g;
  Eigen::MatrixXd dnu = Eigen::MatrixXd::NullaryExpr(m.nbins_full(), 2, [&] { return g(rng); });
  for (const BinMapping* f : {&px, &norm, &ratio}) {
    Eigen::MatrixXd dy(f->size(), 2);
    f->forward(nu, ConstBlockView<double>(dnu.data(), dnu.rows(), 2), BlockView<double>(dy.data(), f->size(), 2));
    for (index_t k = 0; k < 2; ++k) {
      std::vector<double> up = nu, down = nu;
      for (std::size_t i = 0; i < nu.size(); ++i) {
        up[i] += 1e-6 * dnu(static_cast<index_t>(i), k);
        down[i] -= 1e-6 * dnu(static_cast<index_t>(i), k);
      }
      const std::vector<double> yu = values_of(*f, up), yd = values_of(*f, down);
      for (index_t o = 0; o < f->size(); ++o)
        CHECK(dy(o, k) == Approx((yu[static_cast<std::size_t>(o)] - yd[static_cast<std::size_t>(o)]) / 2e-6).epsilon(1e-7).margin(1e-9));
    }
  }

  // Bad input names what is wrong.
  CHECK_THROWS_WITH(parse_mapping(m, {"Project", "c", "x"}), Catch::Contains("no channel 'c'") && Catch::Contains("'a', 'b', 'm'"));
  CHECK_THROWS_WITH(parse_mapping(m, {"Project", "a", "z"}), Catch::Contains("no axis 'z'") && Catch::Contains("'x', 'y'"));
  CHECK_THROWS_WITH(parse_mapping(m, {"Select", "a", "sig0"}), Catch::Contains("selecting processes"));
  CHECK_THROWS_WITH(parse_mapping(m, {"Select", "a", "x:5"}), Catch::Contains("not an index of axis 'x'"));
  CHECK_THROWS_WITH(parse_mapping(m, {"Select", "a", "x:slice(0,3,2)"}), Catch::Contains("slice(a,b)"));
  CHECK_THROWS_WITH(parse_mapping(m, {"Ratio", "a", "b"}), Catch::Contains("shape [3, 4], the denominator's [12]"));
  CHECK_THROWS_WITH(parse_mapping(m, {"Select", "a", "x:99999999999999999999"}), Catch::Contains("not an index of axis 'x'"));
  CHECK_THROWS_WITH(parse_mapping(m, {"Select", "a", "x:0,x:sum"}), Catch::Contains("selected twice"));
  CHECK_THROWS_WITH(parse_mapping(m, {"Select", "a", "x:rebin(0,2,3)"}), Catch::Contains("rebinning"));
  CHECK_THROWS_WITH(parse_mapping(m, {"Asymmetry", "a", "b"}), Catch::Contains("Select, Project, Normalize and Ratio"));
}

TEST_CASE("mapped histograms: the bins' propagation mapped, bin-by-bin statistics included, and the χ²", "[postfit][mappings][chi2]") {
  const bool bbstat = GENERATE(false, true);
  INFO((bbstat ? "with" : "without") << " bin-by-bin statistics");
  const Model m = mapping_model();
  LikelihoodOptions o;
  o.bin_by_bin.enabled = bbstat;
  SerialLikelihood lik(m, {}, o);
  const FitResult r = fit(lik, TrustRegion<Exact>{});
  REQUIRE(r.converged());
  const Histograms h = histograms(lik, r, {.covariance = true});
  const auto block = [&](const std::vector<double>& rows, index_t nbins) { return Eigen::MatrixXd(Eigen::MatrixXd::Map(rows.data(), nbins, nbins)); };

  // Select of a whole channel is the channel: its yields, variances and covariance; its χ² the channel's.
  const MappedHistograms sa = mapped_histograms(lik, r, parse_mapping(m, {"Select", "a"}), {.covariance = true});
  REQUIRE(sa.size == 12);
  for (std::size_t b = 0; b < 12; ++b) {
    CHECK(sa.prefit[b] == Approx(h.prefit_total[b]).epsilon(1e-15));
    CHECK(sa.postfit[b] == Approx(h.postfit_total[b]).epsilon(1e-15));
    CHECK(sa.prefit_variance[b] == Approx(h.prefit_variance[b]).epsilon(1e-12));
    CHECK(sa.postfit_variance[b] == Approx(h.postfit_variance[b]).epsilon(1e-12));
    CHECK(sa.data[b] == m.data[b]);
    CHECK(sa.data_variance[b] == Approx(m.data[b]).epsilon(1e-14));
  }
  CHECK(block(sa.postfit_covariance, 12).isApprox(block(h.postfit_covariance[0], 12), 1e-12));
  REQUIRE(sa.prefit_chi2);
  CHECK(sa.prefit_chi2->ndf == 12);
  CHECK(sa.prefit_chi2->chi2 == Approx(h.prefit_chi2[0].chi2).epsilon(1e-10));
  REQUIRE(sa.postfit_chi2);
  CHECK(sa.postfit_chi2->chi2 == Approx(h.postfit_chi2[0].chi2).epsilon(1e-10));
  CHECK(sa.postfit_chi2_note.empty());

  // Project sums the covariance over its groups of bins.
  const MappedHistograms px = mapped_histograms(lik, r, parse_mapping(m, {"Project", "a", "x"}));
  for (index_t x = 0; x < 3; ++x) {
    const Eigen::MatrixXd pre = block(h.prefit_covariance[0], 12).block(x * 4, x * 4, 4, 4), post = block(h.postfit_covariance[0], 12).block(x * 4, x * 4, 4, 4);
    CHECK(px.prefit_variance[static_cast<std::size_t>(x)] == Approx(pre.sum()).epsilon(1e-12));
    CHECK(px.postfit_variance[static_cast<std::size_t>(x)] == Approx(post.sum()).epsilon(1e-12));
  }
  CHECK(px.prefit_covariance.empty());

  // Normalize and Ratio: F·(J·C·Jᵀ + β's own)·Fᵀ with F from the forward derivative; the χ² of Normalize over one
  // degree of freedom fewer, with a pseudo-inverse.
  for (const auto& words : {std::vector<std::string>{"Normalize", "a", "y"}, {"Ratio", "a", "b", "x:sum", "z:slice(0,4)"}}) {
    INFO(words.front());
    const BinMapping f = parse_mapping(m, words);
    const MappedHistograms mh = mapped_histograms(lik, r, f, {.covariance = true});
    // every bin's covariance, channel by channel (a and b; the mappings read no other), then mapped
    const index_t bf = m.nbins_full();
    Eigen::MatrixXd full = Eigen::MatrixXd::Zero(bf, bf);
    full.block(0, 0, 12, 12) = block(h.postfit_covariance[0], 12);
    full.block(12, 12, 12, 12) = block(h.postfit_covariance[1], 12);
    Eigen::MatrixXd F(f.size(), bf);
    const Eigen::MatrixXd I = Eigen::MatrixXd::Identity(bf, bf);
    f.forward(h.postfit_total, ConstBlockView<double>(I.data(), bf, bf), BlockView<double>(F.data(), f.size(), bf));
    if (words.front() == "Normalize") {  // reads channel a alone: the covariance across channels does not enter
      CHECK(block(mh.postfit_covariance, f.size()).isApprox(F * full * F.transpose(), 1e-10));
      CHECK(mh.prefit_chi2->ndf == 3);
      CHECK(mh.prefit_chi2->chi2 > 0);
    }
    CHECK(mh.postfit == values_of(f, h.postfit_total));
    if (!bbstat) {  // every bin correlated, through the parameters: F·J·C·Jᵀ·Fᵀ with a finite-difference J
      const Eigen::MatrixXd Jy = F * fd_jacobian(lik, r.x);
      const Eigen::MatrixXd want = Jy * Eigen::MatrixXd::Map(r.covariance.data(), Jy.cols(), Jy.cols()) * Jy.transpose();
      for (index_t k = 0; k < f.size(); ++k) CHECK(mh.postfit_variance[static_cast<std::size_t>(k)] == Approx(want(k, k)).epsilon(1e-6));
    }
  }
}

TEST_CASE("histograms: the linear χ² with bin-by-bin statistics, prefit β's prior, postfit the joint fit's response to n, θ₀ and β₀",
          "[postfit][histograms][chi2][bbstat]") {
  // The reference is rabbit's _residuals_profiled written out with nothing of histograms.hpp's algebra: the joint
  // minimum ẑ = (x̂, β̂) of l(z; y) (the likelihood with β held, plus β's constraint, written out) moves with
  // y = (n, θ₀, β₀) as dẑ/dy = −H⁻¹·∂²l/∂z∂y, H and the cross derivatives by finite differences; r = ν̃(ẑ) − n, and
  // S = R_n·V·R_nᵀ + R_θ·diag(1/w)·R_θᵀ + R_β·diag(var β₀)·R_βᵀ, var β₀ = L_β''/(∂²L_β/∂β∂β₀)² (rabbit's).
  test::RandomModelSpec sp;
  sp.bins = 18;
  sp.masked_bins = 2;
  sp.procs = 3;
  sp.signals = 1;
  sp.nsyst = 3;
  sp.template_stats = true;
  sp.zero_counts = false;
  sp.seed = 43;
  Model base = test::random_model(sp);
  // Woodbury's route (8 columns of U, 12 rows) and the direct one (6 rows)
  base.channels = {{"a", 12, false, {detail::integer_axis("x", 12)}}, {"b", 6, false, {detail::integer_axis("y", 6)}},
                   {"m", 2, true, {detail::integer_axis("u", 2)}}};
  base.constraint_weights[1] = 4;
  for (const BbCase c : {BbCase{BinByBinMode::lite, BinByBinType::gamma, DataTerm::poisson}, BbCase{BinByBinMode::full, BinByBinType::gamma, DataTerm::poisson},
                       BbCase{BinByBinMode::lite, BinByBinType::normal_additive, DataTerm::poisson},
                       BbCase{BinByBinMode::full, BinByBinType::normal_additive, DataTerm::poisson},
                       BbCase{BinByBinMode::lite, BinByBinType::normal_multiplicative, DataTerm::poisson},
                       BbCase{BinByBinMode::full, BinByBinType::normal_multiplicative, DataTerm::poisson},
                       BbCase{BinByBinMode::lite, BinByBinType::gamma, DataTerm::chisq}, BbCase{BinByBinMode::full, BinByBinType::gamma, DataTerm::chisq},
                       BbCase{BinByBinMode::lite, BinByBinType::normal_additive, DataTerm::chisq}}) {
    const LikelihoodOptions o = c.options();
    Model m = base;
    if (c.term == DataTerm::chisq) test::add_data_variances(m);
    SerialLikelihood lik(m, {}, o);
    INFO(c.name());
    TrustRegionOptions t;
    t.gtol = 1e-10;
    const FitResult r = fit(lik, TrustRegion<Exact>(t));
    REQUIRE(r.converged());
    REQUIRE(r.covariance_status == CovarianceStatus::accurate);
    const Histograms h = histograms(lik, r, {.covariance = true});
    const index_t n = lik.size(), nd = m.nbins(), S = m.nsyst(), per = lik.bin_by_bin_per_bin();
    const Eigen::VectorXd n0 = Eigen::VectorXd::Map(lik.data().data(), nd), var0 = Eigen::VectorXd::Map(lik.data_variances().data(), nd);
    // Prefit: the data's covariance plus the prefit yields' (tested above, β's prior included).
    const Eigen::MatrixXd V = (c.term == DataTerm::poisson ? n0 : var0).asDiagonal();
    Eigen::MatrixXd Spre = V;
    for (std::size_t k = 0, b0 = 0; k < 2; b0 += static_cast<std::size_t>(m.channels[k].nbins), ++k) {
      const auto nk = m.channels[k].nbins;
      Spre.block(static_cast<index_t>(b0), static_cast<index_t>(b0), nk, nk) += Eigen::MatrixXd::Map(h.prefit_covariance[k].data(), nk, nk).transpose();
    }
    // (only the per-channel blocks are known from the histograms: the channels' χ² alone)
    for (std::size_t k = 0, b0 = 0; k < 2; b0 += static_cast<std::size_t>(m.channels[k].nbins), ++k) {
      const auto nk = m.channels[k].nbins;
      const Eigen::VectorXd rk = (Eigen::VectorXd::Map(h.prefit_total.data(), nd) - n0).segment(static_cast<index_t>(b0), nk);
      CHECK(h.prefit_chi2[k].chi2 == Approx(rk.dot(Spre.block(static_cast<index_t>(b0), static_cast<index_t>(b0), nk, nk).ldlt().solve(rk))).epsilon(1e-10));
    }

    // Postfit: z = (x, the free β), y = (n, θ₀, β₀ of the free β).
    const BinByBinStats st = BinByBinStats::build(m, {0, nd}, o.bin_by_bin, o.data_term);
    const std::vector<double> beta_hat = lik.bin_by_bin_parameters(r.x), theta00 = lik.constraint_centres();
    std::vector<index_t> fb;
    for (index_t e = 0; e < nd * per; ++e)
      if (!st.fixed[static_cast<std::size_t>(e)]) fb.push_back(e);
    const auto nfb = static_cast<index_t>(fb.size()), nz = n + nfb, ny = nd + S + nfb;
    std::vector<double> z0(r.x), y0(lik.data());
    for (index_t e : fb) z0.push_back(beta_hat[static_cast<std::size_t>(e)]);
    y0.insert(y0.end(), theta00.begin(), theta00.end());
    for (index_t e : fb) y0.push_back(st.beta0[static_cast<std::size_t>(e)]);
    const auto nll = [&](const std::vector<double>& z, const std::vector<double>& y) {
      const std::vector<double> counts(y.begin(), y.begin() + nd), theta0(y.begin() + nd, y.begin() + nd + S);
      if (c.term == DataTerm::chisq)
        lik.set_data(counts, std::vector<double>(var0.data(), var0.data() + nd));
      else
        lik.set_data(counts);
      lik.set_constraint_centres(theta0);
      std::vector<double> beta = beta_hat;
      for (index_t k = 0; k < nfb; ++k) beta[static_cast<std::size_t>(fb[static_cast<std::size_t>(k)])] = z[static_cast<std::size_t>(n + k)];
      lik.fix_bin_by_bin(beta);
      double f = lik.value(std::span(z.data(), static_cast<std::size_t>(n)));
      lik.fix_bin_by_bin({});
      for (index_t k = 0; k < nfb; ++k) {
        const auto e = static_cast<std::size_t>(fb[static_cast<std::size_t>(k)]);
        f += detail::beta_term(st.type, z[static_cast<std::size_t>(n + k)], st.kstat[e], y[static_cast<std::size_t>(nd + S + k)]).value;
      }
      return f;
    };
    const auto step = [](double v) { return 1e-4 * std::max(1.0, std::abs(v)); };
    const auto mixed = [&](std::vector<double> z, std::vector<double> y, std::size_t i, bool i_in_z, std::size_t j, bool j_in_z) {
      const double hi = step(i_in_z ? z[i] : y[i]), hj = step(j_in_z ? z[j] : y[j]);
      const auto at = [&](double si, double sj) {
        std::vector<double> zz = z, yy = y;
        (i_in_z ? zz : yy)[i] += si * hi;
        (j_in_z ? zz : yy)[j] += sj * hj;
        return nll(zz, yy);
      };
      return (at(1, 1) - at(1, -1) - at(-1, 1) + at(-1, -1)) / (4 * hi * hj);
    };
    Eigen::MatrixXd H(nz, nz), X(nz, ny);
    for (index_t i = 0; i < nz; ++i) {
      for (index_t j = 0; j <= i; ++j) H(i, j) = H(j, i) = mixed(z0, y0, static_cast<std::size_t>(i), true, static_cast<std::size_t>(j), true);
      for (index_t j = 0; j < ny; ++j) X(i, j) = mixed(z0, y0, static_cast<std::size_t>(i), true, static_cast<std::size_t>(j), false);
    }
    lik.set_data(std::vector<double>(n0.data(), n0.data() + nd), std::vector<double>(var0.data(), var0.data() + nd));
    lik.set_constraint_centres(theta00);
    const Eigen::MatrixXd dz = -H.ldlt().solve(X);  // dẑ/dy
    // ∂ν̃/∂z of the data bins, by central differences
    const auto totals = [&](const std::vector<double>& z) {
      const std::vector<double> x(z.begin(), z.begin() + n), mu = lik.yields(x);
      std::vector<double> beta = beta_hat;
      for (index_t k = 0; k < nfb; ++k) beta[static_cast<std::size_t>(fb[static_cast<std::size_t>(k)])] = z[static_cast<std::size_t>(n + k)];
      Eigen::VectorXd out(nd);
      for (index_t b = 0; b < nd; ++b) {
        const std::vector<double> cells = apply_beta_by_hand(m, o, b, mu, beta.data() + b * per);
        out(b) = std::accumulate(cells.begin(), cells.end(), 0.0);
      }
      return out;
    };
    Eigen::MatrixXd K(nd, nz);
    for (index_t i = 0; i < nz; ++i) {
      std::vector<double> up = z0, down = z0;
      const double hi = step(z0[static_cast<std::size_t>(i)]);
      up[static_cast<std::size_t>(i)] += hi;
      down[static_cast<std::size_t>(i)] -= hi;
      K.col(i) = (totals(up) - totals(down)) / (2 * hi);
    }
    Eigen::MatrixXd R = K * dz;
    R.leftCols(nd) -= Eigen::MatrixXd::Identity(nd, nd);
    Eigen::VectorXd vy(ny);  // the variances of y
    vy.head(nd) = c.term == DataTerm::poisson ? n0 : var0;
    for (index_t s = 0; s < S; ++s) {
      const double w = m.constraint_weights[static_cast<std::size_t>(s)];
      vy(nd + s) = w > 0 ? 1 / w : 0.0;
    }
    for (index_t k = 0; k < nfb; ++k) {
      const auto e = static_cast<std::size_t>(fb[static_cast<std::size_t>(k)]);
      const double l2 = detail::beta_term(st.type, z0[static_cast<std::size_t>(n + k)], st.kstat[e], st.beta0[e]).d2;
      vy(nd + S + k) = l2 / (X(n + k, nd + S + k) * X(n + k, nd + S + k));
    }
    const Eigen::MatrixXd Spost = R * vy.asDiagonal() * R.transpose();
    const Eigen::VectorXd res = totals(z0) - n0;
    CHECK(h.postfit_chi2_note.empty());
    check_chi2(m, h.postfit_chi2, h.postfit_chi2_total, res, Spost, 1e-4);

    // A mapping's: Select of a whole channel is the channel's; a Ratio (f at ν̃ and at n differ) is rᵀ·S_f⁻¹·r with
    // S_f = R_f·diag(var y)·R_fᵀ, R_f = F(ν̃)·∂ν̃/∂y − F(n)·∂n/∂y, F the forward derivative.
    const MappedHistograms sb = mapped_histograms(lik, r, parse_mapping(m, {"Select", "b"}));
    CHECK(sb.postfit_chi2->chi2 == Approx(h.postfit_chi2[1].chi2).epsilon(1e-10));
    const BinMapping f = parse_mapping(m, {"Ratio", "a", "b", "x:slice(0,6)", "y:slice(0,6)"});
    const MappedHistograms mr = mapped_histograms(lik, r, f);
    const index_t bf = m.nbins_full();
    std::vector<double> counts(static_cast<std::size_t>(bf), 0.0);
    std::copy(lik.data().begin(), lik.data().end(), counts.begin());
    const Eigen::MatrixXd I = Eigen::MatrixXd::Identity(bf, bf);
    Eigen::MatrixXd Fnu(f.size(), bf), Fn(f.size(), bf);
    f.forward(h.postfit_total, ConstBlockView<double>(I.data(), bf, bf), BlockView<double>(Fnu.data(), f.size(), bf));
    f.forward(counts, ConstBlockView<double>(I.data(), bf, bf), BlockView<double>(Fn.data(), f.size(), bf));
    Eigen::MatrixXd Rf = Fnu.leftCols(nd) * K * dz;
    Rf.leftCols(nd) -= Fn.leftCols(nd);
    const std::vector<double> yp = values_of(f, h.postfit_total), yn = values_of(f, counts);
    Eigen::VectorXd rf(f.size());
    for (index_t k = 0; k < f.size(); ++k) rf(k) = yp[static_cast<std::size_t>(k)] - yn[static_cast<std::size_t>(k)];
    REQUIRE(mr.postfit_chi2);
    CHECK(mr.postfit_chi2->chi2 == Approx(rf.dot((Rf * vy.asDiagonal() * Rf.transpose()).ldlt().solve(rf))).epsilon(1e-4));
  }
}
