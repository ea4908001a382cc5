// SPDX-License-Identifier: MIT
// Reference problems for the tests: seeded random models covering every feature, and FD helpers.
#pragma once

#include <fitlib/fit.hpp>

#include <Eigen/Dense>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

namespace fitlib::test {

struct RandomModelSpec {
  index_t bins = 12;           ///< unmasked bins (one channel)
  index_t masked_bins = 4;     ///< bins of a masked channel at the tail
  index_t procs = 3;
  index_t signals = 1;         ///< the first `signals` processes carry a POI
  index_t nsyst = 5;
  index_t unconstrained = 1;   ///< the first ones have constraint weight 0
  bool asymmetric = true;
  SystematicType type = SystematicType::log_normal;
  bool zero_counts = true;     ///< every fourth unmasked bin observes n = 0
  bool absent_cells = true;    ///< the last process is absent (N = 0) in every third bin
  double mu_default = 1.0;
  /// Template variances (sumw2) with 3–40 effective MC events per cell; process 1 is exact
  /// (sumw2 = 0) in every other bin and unmasked bin 3 has exact templates throughout.
  bool template_stats = false;
  std::uint64_t seed = 1;
};

/// A model filled with seeded random templates, variations and data around its expectation.
inline Model random_model(const RandomModelSpec& sp) {
  std::mt19937_64 rng(sp.seed);
  std::uniform_real_distribution<double> unif(0.0, 1.0);
  std::normal_distribution<double> gauss(0.0, 1.0);
  Model m;
  m.systematic_type = sp.type;
  m.symmetric = !sp.asymmetric;
  m.channels.push_back({"ch0", sp.bins, false});
  if (sp.masked_bins > 0) m.channels.push_back({"ch0_masked", sp.masked_bins, true});
  for (index_t p = 0; p < sp.procs; ++p)
    m.processes.push_back({p < sp.signals ? "sig" + std::to_string(p) : "bkg" + std::to_string(p), p < sp.signals});
  for (index_t s = 0; s < sp.nsyst; ++s) {
    m.systematics.push_back({"syst" + std::to_string(s)});
    m.constraint_weights.push_back(s < sp.unconstrained ? 0.0 : 1.0);
    m.theta0.push_back(s == sp.nsyst - 1 ? 0.2 : 0.0);
  }
  m.poi_default.assign(static_cast<std::size_t>(sp.signals), sp.mu_default);
  const index_t bf = m.nbins_full(), P = sp.procs, S = sp.nsyst, nc = m.ncoef();
  DenseTemplates& t = *m.dense();
  t.nominal.resize(static_cast<std::size_t>(bf * P));
  t.logk.resize(static_cast<std::size_t>(bf * P * nc));
  for (index_t b = 0; b < bf; ++b)
    for (index_t p = 0; p < P; ++p) {
      const bool absent = sp.absent_cells && p == P - 1 && P > 1 && b % 3 == 1;
      const double n = absent ? 0.0 : 5.0 + 45.0 * unif(rng);
      t.nominal[static_cast<std::size_t>(b * P + p)] = n;
      double* row = t.logk.data() + (b * P + p) * nc;
      for (index_t s = 0; s < S && !absent; ++s) {
        const double scale = sp.type == SystematicType::log_normal ? 1.0 : n;
        row[s] = scale * 0.1 * gauss(rng);
        if (sp.asymmetric) row[S + s] = scale * 0.05 * gauss(rng);
      }
    }
  for (index_t b = 0; b < sp.bins; ++b) {
    double nu = 0;
    for (index_t p = 0; p < P; ++p) nu += t.nominal[static_cast<std::size_t>(b * P + p)];
    m.data.push_back(sp.zero_counts && b % 4 == 2 ? 0.0 : std::max(0.0, std::round(nu * (1.0 + 0.15 * gauss(rng)))));
  }
  if (sp.template_stats) {
    m.sumw2.resize(t.nominal.size());
    for (index_t b = 0; b < bf; ++b)
      for (index_t p = 0; p < P; ++p) {
        const auto c = static_cast<std::size_t>(b * P + p);
        const bool exact = b == 3 || (p == 1 && b % 2 == 0);
        m.sumw2[c] = exact ? 0.0 : t.nominal[c] * t.nominal[c] / (3.0 + 37.0 * unif(rng));
      }
  }
  m.validate();
  return m;
}

/// Data variances for the χ² terms: 1.3·n, and 1.3 where n = 0 (those bins need one too).
inline void add_data_variances(Model& m) {
  m.data_variance.clear();
  for (double n : m.data) m.data_variance.push_back(std::max(n, 1.0) * 1.3);
}

/// Parameter points that put θ on both sides of |θ| = ½ (the interpolation's smooth region).
inline std::vector<double> test_point(const Model& m, std::uint64_t seed, bool linear_poi) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> unif(0.0, 1.0);
  static constexpr double thetas[] = {0.31, -0.27, 0.83, -0.74, 0.05, 1.4, -1.2, 0.45, -0.45, 0.62, -0.58};
  std::vector<double> x;
  for (index_t q = 0; q < m.npoi(); ++q) x.push_back((linear_poi ? 0.6 : 0.8) + 0.6 * unif(rng));
  for (index_t s = 0; s < m.nsyst(); ++s) x.push_back(thetas[(static_cast<std::size_t>(s) + seed) % std::size(thetas)]);
  return x;
}

/// x ↦ ∇f(x) of a likelihood, as a vector function (for finite differences of the gradient).
template <class L>
auto gradient_function(L& nll) {
  return [&nll](const std::vector<double>& x) {
    std::vector<double> g(static_cast<std::size_t>(nll.size()));
    nll.value_grad(x, g);
    return g;
  };
}

/// Fourth-order central difference of a vector function along `dir` with step h.
inline std::vector<double> central_difference(const std::function<std::vector<double>(const std::vector<double>&)>& f,
                                              const std::vector<double>& x, const std::vector<double>& dir, double h) {
  auto at = [&](double t) {
    std::vector<double> y = x;
    for (std::size_t i = 0; i < y.size(); ++i) y[i] += t * dir[i];
    return f(y);
  };
  const auto p1 = at(h), m1 = at(-h), p2 = at(2 * h), m2 = at(-2 * h);
  std::vector<double> d(p1.size());
  for (std::size_t i = 0; i < d.size(); ++i) d[i] = (8.0 * (p1[i] - m1[i]) - (p2[i] - m2[i])) / (12.0 * h);
  return d;
}

/// ‖a − b‖∞ / ‖b‖∞ (or the absolute error when b vanishes).
inline double rel_error(const std::vector<double>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    num = std::max(num, std::abs(a[i] - b[i]));
    den = std::max(den, std::abs(b[i]));
  }
  return den > 0 ? num / den : num;
}

/// The small model whose toys have Gaussian pulls: 20 bins, a signal and a background, three
/// constrained symmetric nuisances centred at 0, no empty bins.
inline Model pull_model() {
  RandomModelSpec sp;
  sp.bins = 20;
  sp.masked_bins = 0;
  sp.procs = 2;
  sp.nsyst = 3;
  sp.unconstrained = 0;
  sp.asymmetric = false;
  sp.zero_counts = false;
  sp.seed = 3;
  Model m = random_model(sp);
  m.theta0.assign(m.theta0.size(), 0.0);
  return m;
}

/// Equal to the last bit (NaNs of one pattern included), for results that must not depend on how they were batched or sharded.
inline bool same_bits(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0);
}
inline bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

/// A model for the covariance data term: random templates with statistics, data variances and an
/// inverse covariance, diagonal or correlated by three rank-one terms (symmetrised exactly).
inline Model covariance_model(bool dense_covariance, SystematicType type = SystematicType::log_normal) {
  RandomModelSpec spec;
  spec.template_stats = true;
  spec.procs = 4;
  spec.signals = 2;
  spec.nsyst = 5;
  spec.type = type;
  spec.seed = 17;
  Model m = random_model(spec);
  const index_t B = m.nbins();
  add_data_variances(m);
  Eigen::MatrixXd C = Eigen::MatrixXd::Zero(B, B);
  for (index_t b = 0; b < B; ++b) C(b, b) = m.data_variance[static_cast<std::size_t>(b)];
  if (dense_covariance) {  // correlated: add a few rank-one terms
    std::mt19937_64 rng(3);
    std::normal_distribution<double> gauss;
    for (int r = 0; r < 3; ++r) {
      Eigen::VectorXd u(B);
      for (index_t b = 0; b < B; ++b) u(b) = 3.0 * gauss(rng);
      C += u * u.transpose();
    }
  }
  const Eigen::MatrixXd Cinv = C.inverse();
  m.data_covariance_inverse.resize(static_cast<std::size_t>(B * B));
  for (index_t a = 0; a < B; ++a)
    for (index_t b = 0; b < B; ++b) m.data_covariance_inverse[static_cast<std::size_t>(a * B + b)] = 0.5 * (Cinv(a, b) + Cinv(b, a));
  return m;
}

}  // namespace fitlib::test
