// SPDX-License-Identifier: MIT
// Pseudo-data for toys and replicas (Asimov, Poisson, Gaussian, bootstrap, constraints), each a function of (seed, replica index).
#pragma once

#include <Eigen/Cholesky>
#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "fitlib/config.hpp"
#include "fitlib/core/error.hpp"
#include "fitlib/core/types.hpp"
#include "fitlib/model/model.hpp"
#include "fitlib/replica/random.hpp"

namespace fitlib {

// Every generator draws element i (bin or nuisance) from its own RandomStream(seed, index,
// stream, i), so a replica's vector does not depend on which other replicas were drawn, in which
// order, nor on how the bins are sharded (a shard passes the global index of its first bin as
// `first_bin`); data, constraint and bootstrap draws use different stream ids, so they are
// independent within a replica.

namespace detail {

/// What `asimov` and `generate_toy` need of a likelihood (fitlib's `Likelihood` has it).
template <class L>
concept yields_source = requires(L& l, std::span<const double> x) {
  { l.yields(x) } -> std::convertible_to<std::vector<double>>;
  { l.model() } -> std::convertible_to<const Model&>;
  { l.default_parameters() } -> std::convertible_to<std::vector<double>>;
};

/// The replica index and the elements [first, first + n) must be addressable by a stream (32 bits each).
inline void require_stream_range(std::uint64_t index, std::uint64_t first, std::size_t n, const char* what) {
  if (index > 0xFFFFFFFFu)
    throw usage_error(std::string(what) + ": replica index " + std::to_string(index) + " does not fit in 32 bits; use indices below 2^32");
  if (first > 0xFFFFFFFFu || n > 0x100000000u - first)
    throw usage_error(std::string(what) + ": elements [" + std::to_string(first) + ", " + std::to_string(first + n) +
                      ") exceed the 2^32 elements a random stream addresses");
}

/// Throws `usage_error` naming the bin unless the expectation is finite and ≥ 0.
inline void require_expectation(double mu, std::uint64_t bin, const char* generator) {
  if (!std::isfinite(mu) || mu < 0)
    throw usage_error(std::string(generator) + ": expected count of bin " + std::to_string(bin) + " is " + std::to_string(mu) +
                      "; expectations must be finite and non-negative");
}

}  // namespace detail

/// The Asimov data set at parameters x: Σ_p ν[b, p] for the unmasked bins b < nbins(), summed over
/// the processes in order, as the likelihood sums them, so that `set_data(asimov(l, x))` puts the
/// data term's minimum (exactly zero) at x. The expectation may be negative only for models that
/// allow negative yields; it is returned as is.
template <detail::yields_source L>
std::vector<double> asimov(L& likelihood, std::span<const double> x) {
  const Model& m = likelihood.model();
  const std::vector<double> nu = likelihood.yields(x);
  const index_t nb = m.nbins(), np = m.nprocs();
  std::vector<double> n(static_cast<std::size_t>(nb));
  for (index_t b = 0; b < nb; ++b) {
    double s = 0;
    for (index_t p = 0; p < np; ++p) s += nu[static_cast<std::size_t>(b * np + p)];
    n[static_cast<std::size_t>(b)] = s;
  }
  return n;
}

/// n_b ~ Poisson(expected_b), independently per bin, from stream `Stream::data` of replica `index`;
/// `expected[0]` is bin `first_bin` (0 unless a shard draws only its own bins). Throws
/// `usage_error` naming the bin for a negative, non-finite or absurdly large (> 2⁵⁰) expectation,
/// or an index ≥ 2³².
inline std::vector<double> poisson_toy(std::span<const double> expected, std::uint64_t seed, std::uint64_t index,
                                       std::uint64_t first_bin = 0) {
  detail::require_stream_range(index, first_bin, expected.size(), "poisson_toy");
  std::vector<double> n(expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    const std::uint64_t b = first_bin + i;
    detail::require_expectation(expected[i], b, "poisson_toy");
    if (expected[i] > RandomStream::max_poisson_mean)
      throw usage_error("poisson_toy: expected count of bin " + std::to_string(b) + " is " + std::to_string(expected[i]) +
                        ", above the sampler's limit 2^50; use a Gaussian toy for such counts");
    n[i] = RandomStream(seed, index, Stream::data, b).poisson(expected[i]);
  }
  return n;
}

/// n_b = expected_b + √variances_b · z_b with z_b ~ N(0, 1), for χ² fits (rabbit's
/// `--toysDataRandomize normal`), from stream `Stream::data`. Not clipped: a draw may be negative
/// (probability Φ(−expected/σ) per bin), because clipping or redrawing would bias the mean and the
/// χ² term accepts any value; a Poisson likelihood's `set_data` refuses such counts. A zero variance
/// gives the expectation itself. `first_bin` as for `poisson_toy`. Throws `usage_error` naming the
/// bin for a negative or non-finite expectation or variance, or for mismatched sizes.
inline std::vector<double> gaussian_toy(std::span<const double> expected, std::span<const double> variances, std::uint64_t seed,
                                        std::uint64_t index, std::uint64_t first_bin = 0) {
  if (variances.size() != expected.size())
    throw usage_error("gaussian_toy: " + std::to_string(expected.size()) + " expectations but " + std::to_string(variances.size()) +
                      " variances; give one variance per bin");
  detail::require_stream_range(index, first_bin, expected.size(), "gaussian_toy");
  std::vector<double> n(expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    const std::uint64_t b = first_bin + i;
    detail::require_expectation(expected[i], b, "gaussian_toy");
    if (!std::isfinite(variances[i]) || variances[i] < 0)
      throw usage_error("gaussian_toy: variance of bin " + std::to_string(b) + " is " + std::to_string(variances[i]) +
                        "; variances must be finite and non-negative");
    n[i] = std::fma(std::sqrt(variances[i]), RandomStream(seed, index, Stream::data, b).normal(), expected[i]);
  }
  return n;
}

/// The Gaussian toy with variance = expectation, N(ν, √ν): rabbit's normal toys of a Poisson fit.
inline std::vector<double> gaussian_toy(std::span<const double> expected, std::uint64_t seed, std::uint64_t index,
                                        std::uint64_t first_bin = 0) {
  return gaussian_toy(expected, expected, seed, index, first_bin);
}

/// n Poisson(1) weights for bins [first_bin, first_bin + n), from stream `Stream::bootstrap`: the
/// Poisson bootstrap, which resamples a bin's data by weighting it with w_b (mean 1, variance 1).
inline std::vector<double> bootstrap_weights(index_t n, std::uint64_t seed, std::uint64_t index, std::uint64_t first_bin = 0) {
  if (n < 0) throw usage_error("bootstrap_weights: the number of bins is " + std::to_string(n) + "; it must be ≥ 0");
  detail::require_stream_range(index, first_bin, static_cast<std::size_t>(n), "bootstrap_weights");
  std::vector<double> w(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = RandomStream(seed, index, Stream::bootstrap, first_bin + i).poisson(1.0);
  return w;
}

/// The Poisson bootstrap of binned data: every event of bin b is drawn a Poisson(1) number of
/// times, so the bin's resampled count is n*_b ~ Poisson(n_b), from stream `Stream::bootstrap`
/// (element = bin). Throws `usage_error` naming the bin for a negative or non-finite count.
inline std::vector<double> bootstrap_counts(std::span<const double> counts, std::uint64_t seed, std::uint64_t index,
                                            std::uint64_t first_bin = 0) {
  detail::require_stream_range(index, first_bin, counts.size(), "bootstrap_counts");
  std::vector<double> n(counts.size());
  for (std::size_t i = 0; i < n.size(); ++i) {
    detail::require_expectation(counts[i], first_bin + i, "bootstrap_counts");
    n[i] = RandomStream(seed, index, Stream::bootstrap, first_bin + i).poisson(counts[i]);
  }
  return n;
}

/// Monte-Carlo data replicas drawn from a data covariance, as NNPDF samples its pseudo-data
/// (n3fit-parallel-replicas.md §2.2): d = c + L·z with z ~ N(0, 1) per bin and L·Lᵀ = C, where L
/// comes from the Cholesky factor of the correlation matrix, L = D_σ·Lρ (so badly scaled bins do
/// not spoil the factorisation). Replica `index` draws z_i from stream `Stream::data`, element i.
class CovarianceReplicas {
 public:
  /// `central`: the central values `[n]`; `covariance`: `[n × n]` (either storage order: it must
  /// be symmetric). Throws `usage_error` naming the bin for a non-finite value or a non-positive
  /// variance, and when the matrix is not symmetric positive definite.
  CovarianceReplicas(std::vector<double> central, std::span<const double> covariance);

  index_t size() const { return static_cast<index_t>(central_.size()); }

  /// Replica `index`: c + L·z.
  std::vector<double> replica(std::uint64_t seed, std::uint64_t index) const;

 private:
  std::vector<double> central_;
  Eigen::MatrixXd factor_;  ///< L with L·Lᵀ = C, lower triangular
};

#if FITLIB_DEFINITIONS
FITLIB_PREBUILT_INLINE CovarianceReplicas::CovarianceReplicas(std::vector<double> central, std::span<const double> covariance)
    : central_(std::move(central)) {
  const index_t n = static_cast<index_t>(central_.size());
  if (static_cast<index_t>(covariance.size()) != n * n)
    throw usage_error("CovarianceReplicas: the covariance has " + std::to_string(covariance.size()) + " entries; it must be n × n = " +
                      std::to_string(n * n));
  const Eigen::Map<const Eigen::MatrixXd> C(covariance.data(), n, n);
  Eigen::VectorXd sigma(n);
  for (index_t i = 0; i < n; ++i) {
    if (!std::isfinite(central_[static_cast<std::size_t>(i)]))
      throw usage_error("CovarianceReplicas: central value of bin " + std::to_string(i) + " is not finite");
    if (!(C(i, i) > 0) || !std::isfinite(C(i, i)))
      throw usage_error("CovarianceReplicas: variance of bin " + std::to_string(i) + " is " + std::to_string(C(i, i)) + "; it must be positive");
    sigma(i) = std::sqrt(C(i, i));
  }
  if (!C.allFinite() || !C.isApprox(C.transpose(), 1e-12))
    throw usage_error("CovarianceReplicas: the covariance is not symmetric (or not finite)");
  const Eigen::MatrixXd rho = sigma.cwiseInverse().asDiagonal() * C * sigma.cwiseInverse().asDiagonal();
  const Eigen::LLT<Eigen::MatrixXd> llt(rho);
  if (llt.info() != Eigen::Success)
    throw usage_error("CovarianceReplicas: the covariance is not positive definite; regularise it or drop degenerate bins");
  factor_ = sigma.asDiagonal() * Eigen::MatrixXd(llt.matrixL());
}

FITLIB_PREBUILT_INLINE std::vector<double> CovarianceReplicas::replica(std::uint64_t seed, std::uint64_t index) const {
  detail::require_stream_range(index, 0, central_.size(), "CovarianceReplicas");
  Eigen::VectorXd z(size());
  for (index_t i = 0; i < size(); ++i) z(i) = RandomStream(seed, index, Stream::data, static_cast<std::uint64_t>(i)).normal();
  const Eigen::VectorXd d = Eigen::Map<const Eigen::VectorXd>(central_.data(), size()) + factor_.triangularView<Eigen::Lower>() * z;
  return {d.data(), d.data() + d.size()};
}
#endif

/// How a toy treats the Gaussian constraints (rabbit's `--toysSystRandomize`, §5.5).
enum class ConstraintRandomization {
  none,         ///< θ₀ and the generating point stay at the model's values
  frequentist,  ///< the global observables move: θ₀_s ~ N(θ₀_s, 1/w_s); data generated at θ = θ₀ (model's)
  bayesian,     ///< the generating point moves: θ_s ~ N(θ₀_s, 1/w_s); θ₀ unchanged
};

/// The constraint side of one toy. Exactly one of the two vectors differs from the model's θ₀
/// (none for `none`); unconstrained nuisances (w = 0) never move.
struct RandomizedConstraints {
  ConstraintRandomization mode = ConstraintRandomization::none;
  /// Constraint centres the toy is fitted with, `[nsyst]` (randomised in frequentist mode).
  std::vector<double> theta0;
  /// Nuisance values at which the toy's expectation is generated, `[nsyst]` (randomised in
  /// Bayesian mode).
  std::vector<double> theta;

  /// True when `theta0` differs from the model's centres (the fit needs the new centres).
  bool centres_changed() const { return mode == ConstraintRandomization::frequentist; }
  /// True when `theta` differs from the model's centres (the expectation moves).
  bool parameters_changed() const { return mode == ConstraintRandomization::bayesian; }

  /// The generating parameter vector: `x_default` (`[POIs | θ]`) with its last nsyst entries
  /// replaced by `theta`.
  std::vector<double> toy_parameters(std::span<const double> x_default) const {
    if (x_default.size() < theta.size())
      throw usage_error("toy_parameters: the parameter vector has " + std::to_string(x_default.size()) + " entries, fewer than the " +
                        std::to_string(theta.size()) + " nuisances");
    std::vector<double> x(x_default.begin(), x_default.end());
    std::copy(theta.begin(), theta.end(), x.end() - static_cast<std::ptrdiff_t>(theta.size()));
    return x;
  }
};

/// Randomises the Gaussian constraints of replica `index` (stream `Stream::constraints`, element =
/// nuisance index): a draw θ₀_s + z_s/√w_s for each constrained nuisance, into `theta0`
/// (frequentist) or `theta` (Bayesian). Both modes use the same z_s, so a replica's frequentist
/// centre shift equals its Bayesian parameter shift. Throws `usage_error` naming the systematic for
/// a non-finite centre or a negative or non-finite weight, or when the sizes disagree.
inline RandomizedConstraints randomize_constraints(const Model& model, std::uint64_t seed, std::uint64_t index,
                                                   ConstraintRandomization mode) {
  const std::size_t ns = static_cast<std::size_t>(model.nsyst());
  if (model.theta0.size() != ns || model.constraint_weights.size() != ns)
    throw usage_error("randomize_constraints: the model has " + std::to_string(ns) + " systematics but " +
                      std::to_string(model.theta0.size()) + " centres and " + std::to_string(model.constraint_weights.size()) +
                      " constraint weights");
  if (mode != ConstraintRandomization::none && mode != ConstraintRandomization::frequentist && mode != ConstraintRandomization::bayesian)
    throw usage_error("randomize_constraints: unknown ConstraintRandomization value " + std::to_string(static_cast<int>(mode)));
  detail::require_stream_range(index, 0, ns, "randomize_constraints");
  RandomizedConstraints r{mode, model.theta0, model.theta0};
  std::vector<double>& moved = mode == ConstraintRandomization::frequentist ? r.theta0 : r.theta;
  for (std::size_t s = 0; s < ns; ++s) {
    const double w = model.constraint_weights[s], c = model.theta0[s];
    const std::string& name = model.systematics[s].name;
    if (!std::isfinite(w) || w < 0)
      throw usage_error("randomize_constraints: constraint weight of systematic '" + name + "' is " + std::to_string(w) +
                        "; use a finite weight ≥ 0 (0 = unconstrained)");
    if (!std::isfinite(c)) throw usage_error("randomize_constraints: constraint centre of systematic '" + name + "' is not finite");
    if (mode == ConstraintRandomization::none || w == 0) continue;
    moved[s] = c + RandomStream(seed, index, Stream::constraints, s).normal() / std::sqrt(w);
  }
  return r;
}

/// Which data a toy fluctuates (rabbit's `--toysDataMode`).
enum class ToyDataMode {
  expected,  ///< the expectation at the generating point
  observed,  ///< the model's observed counts
};

/// How a toy fluctuates its data (rabbit's `--toysDataRandomize`).
enum class DataRandomization {
  poisson,  ///< n_b ~ Poisson(centre_b)
  normal,   ///< n_b ~ N(centre_b, √centre_b), unclipped
  none,     ///< n_b = centre_b
};

/// A toy's recipe; the defaults are rabbit's.
struct ToyOptions {
  /// Constraint randomisation: none, frequentist (default) or bayesian.
  ConstraintRandomization constraints = ConstraintRandomization::frequentist;
  /// Centre of the data draw: expected (default) or observed.
  ToyDataMode data_mode = ToyDataMode::expected;
  /// Fluctuation of the data: poisson (default), normal or none.
  DataRandomization data = DataRandomization::poisson;

  /// Throws `std::invalid_argument` naming a field that holds a value outside its enumeration.
  void validate() const {
    auto fail = [](const std::string& what) { throw std::invalid_argument("ToyOptions::" + what); };
    if (constraints != ConstraintRandomization::none && constraints != ConstraintRandomization::frequentist &&
        constraints != ConstraintRandomization::bayesian)
      fail("constraints must be none, frequentist or bayesian, got " + std::to_string(static_cast<int>(constraints)));
    if (data_mode != ToyDataMode::expected && data_mode != ToyDataMode::observed)
      fail("data_mode must be expected or observed, got " + std::to_string(static_cast<int>(data_mode)));
    if (data != DataRandomization::poisson && data != DataRandomization::normal && data != DataRandomization::none)
      fail("data must be poisson, normal or none, got " + std::to_string(static_cast<int>(data)));
  }
};

/// One toy: its data (the unmasked bins) and its constraints.
struct Toy {
  std::vector<double> data;
  RandomizedConstraints constraints;
};

/// Toy `index` of a likelihood, as rabbit's `toyassign` makes it (§5.5): randomise the
/// constraints, take the centre (the Asimov data at the generating point, or the observed data)
/// and fluctuate it. Fit it with `set_data(toy.data)`, `set_constraint_centres(toy.constraints.theta0)`
/// (changed in frequentist mode) and the usual start `default_parameters()`.
template <detail::yields_source L>
Toy generate_toy(L& likelihood, std::uint64_t seed, std::uint64_t index, const ToyOptions& opts = {}) {
  opts.validate();
  const Model& m = likelihood.model();
  Toy t{{}, randomize_constraints(m, seed, index, opts.constraints)};
  const std::vector<double> centre = opts.data_mode == ToyDataMode::observed
                                         ? m.data
                                         : asimov(likelihood, t.constraints.toy_parameters(likelihood.default_parameters()));
  switch (opts.data) {
    case DataRandomization::poisson: t.data = poisson_toy(centre, seed, index); break;
    case DataRandomization::normal: t.data = gaussian_toy(centre, seed, index); break;
    case DataRandomization::none: t.data = centre; break;
  }
  return t;
}

/// What toys' pulls (x̂ − truth)/σ̂ are taken against: their truth, by data mode (toy_truth).
enum class PullReference {
  generating_point,  ///< the parameters the toy's expectation was generated at (ToyDataMode::expected)
  observed_fit,      ///< the fit to the observed data, around which observed-mode toys scatter (ToyDataMode::observed)
};

constexpr PullReference pull_reference(ToyDataMode mode) {
  return mode == ToyDataMode::observed ? PullReference::observed_fit : PullReference::generating_point;
}

/// The name results files keep (docs/results-format.md, `/toys/pull_reference`).
constexpr std::string_view to_string(PullReference r) {
  return r == PullReference::observed_fit ? "observed_fit" : "generating_point";
}

/// The parameters toy `toy` (made with `opts`) is pulled against. Expected mode: the point its data
/// were generated at, `x_generating` (generate_toy's, the default parameters) with the nuisances a
/// Bayesian toy drew; a frequentist toy moved its constraint centres instead, so its truth stays
/// `x_generating`. Observed mode: no parameter point generated the data (the observed counts,
/// fluctuated), and the toys' fits scatter around the fit to the observed data with the model's
/// centres, `x_observed_fit`: to first order E[x̂] = x̂(E[n], E[θ₀]) = x̂(n_obs, θ₀), whatever the
/// constraint randomisation (a Bayesian draw of θ moves no observed count). Pulls against the
/// default parameters there measure how far the data lie from the model, not the fit. Throws
/// `usage_error` when observed mode is given no `x_observed_fit`, or a vector of the wrong size.
inline std::vector<double> toy_truth(const Toy& toy, const ToyOptions& opts, std::span<const double> x_generating,
                                     std::span<const double> x_observed_fit = {}) {
  if (pull_reference(opts.data_mode) == PullReference::generating_point) return toy.constraints.toy_parameters(x_generating);
  if (x_observed_fit.size() != x_generating.size())
    throw usage_error("toy_truth: observed-mode toys are pulled against the fit to the observed data; give its " +
                      std::to_string(x_generating.size()) + " parameters (got " + std::to_string(x_observed_fit.size()) + ")");
  return {x_observed_fit.begin(), x_observed_fit.end()};
}

}  // namespace fitlib
