// SPDX-License-Identifier: MIT
// fit(): minimise an objective, then the postfit covariance, uncertainties, EDM and a report.
#pragma once

#include <Eigen/Cholesky>
#include <Eigen/Core>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>
#include <regex>
#include <stdexcept>
#include <string>
#include <vector>

#include "fitlib/config.hpp"
#include "fitlib/core/concepts.hpp"
#include "fitlib/core/error.hpp"
#include "fitlib/core/types.hpp"
#include "fitlib/minimize/gltr.hpp"
#include "fitlib/minimize/reparametrized.hpp"
#include "fitlib/minimize/status.hpp"
#include "fitlib/minimize/trust_region.hpp"
#include "fitlib/postfit/covariance.hpp"

namespace fitlib {

/// How the minimizer's coordinates are scaled (a fixed change of variables, see Reparametrized).
enum class Preconditioning {
  none,      ///< the parameters as they are
  diagonal,  ///< y_i = √H_ii·(x_i − x0_i) with the prefit Hessian's diagonal
  cholesky,  ///< y = Lᵀ(x − x0) with L the Cholesky factor of the prefit Hessian (by blocks, see below)
};

struct FitOptions {
  /// Starting point; empty = the objective's `default_parameters()`.
  std::vector<double> x0;
  /// Parameters held fixed: exact names or ECMAScript regular expressions matching whole names.
  std::vector<std::string> frozen;
  Preconditioning preconditioning = Preconditioning::none;
  /// The Hessian the preconditioner is built from (`[n × n]`, column-major, all parameters); empty =
  /// the Hessian at the starting point. A fit of many similar datasets can share one.
  std::vector<double> reference_hessian;
  /// For `cholesky`: sizes of consecutive blocks of the free parameters factorised separately
  /// (the cross-block curvature is ignored); empty = one block. The sizes must add up to the
  /// number of free parameters.
  std::vector<index_t> preconditioner_blocks;
  /// Compute the covariance (inverse Hessian) at the minimum.
  bool covariance = true;

  void validate() const {
    for (index_t b : preconditioner_blocks)
      if (b < 1) throw std::invalid_argument("FitOptions::preconditioner_blocks must hold block sizes ≥ 1, got " + std::to_string(b));
    if (!preconditioner_blocks.empty() && preconditioning != Preconditioning::cholesky)
      throw std::invalid_argument("FitOptions::preconditioner_blocks apply to Preconditioning::cholesky only; set it or drop the blocks");
    if (!reference_hessian.empty() && preconditioning == Preconditioning::none)
      throw std::invalid_argument("FitOptions::reference_hessian is used by a preconditioner only; choose one or drop the Hessian");
  }
};

/// The outcome of `fit`: parameters, uncertainties, covariance, statuses and counts.
struct FitResult {
  std::vector<std::string> names;
  std::vector<double> x;              ///< parameters at the minimum
  std::vector<double> x0;             ///< the starting point
  std::vector<double> uncertainties;  ///< √diag(covariance); 0 for frozen parameters, NaN if unavailable
  std::vector<double> covariance;     ///< `[n × n]` column-major; zero rows/columns for frozen parameters
  std::vector<double> hessian;        ///< `[n × n]` at the minimum, all parameters; empty without covariance
  std::vector<double> gradient;       ///< at the minimum
  std::vector<bool> frozen;
  double nll = std::numeric_limits<double>::quiet_NaN();
  /// ½·gᵀH⁻¹g over the free parameters: where the minimizer's stop was decided by an EDM
  /// (converged_edm, converged_precision, stalled), the one it tested (its `stop.edm`, also where
  /// the covariance then failed); else ½·gᵀ·C·g with the postfit covariance C (NaN without one).
  double edm = std::numeric_limits<double>::quiet_NaN();
  FitStatus status = FitStatus::running;
  /// The numbers the stop was decided by (gradient norm, EDM, f) and the tolerances they were tested
  /// against; `status_text()` says them.
  StopTest stop;
  CovarianceStatus covariance_status = CovarianceStatus::not_computed;
  index_t iterations = 0;
  EvaluationCounts counts;
  double seconds = 0;

  bool converged() const { return fitlib::converged(status); }
  /// The status with the test that ended the fit and the number that passed it, e.g. "converged
  /// (EDM 3.2e-15 below edm_tol 1e-12)"; `to_string(status)` is the short name.
  std::string status_text() const { return describe(status, stop); }
  index_t index(const std::string& name) const {
    for (std::size_t i = 0; i < names.size(); ++i)
      if (names[i] == name) return static_cast<index_t>(i);
    throw usage_error("unknown parameter '" + name + "' in the fit result");
  }

  /// A human-readable table of the parameters (start, fitted ± σ) and the fit's summary.
  std::string report() const {
    std::string out;
    char line[256];
    std::snprintf(line, sizeof line, "%-28s %14s %14s %14s\n", "parameter", "start", "fitted", "uncertainty");
    out += line;
    for (std::size_t i = 0; i < x.size(); ++i) {
      if (frozen[i])
        std::snprintf(line, sizeof line, "%-28s %14.6g %14.6g %14s\n", names[i].c_str(), x0[i], x[i], "frozen");
      else
        std::snprintf(line, sizeof line, "%-28s %14.6g %14.6g %14.6g\n", names[i].c_str(), x0[i], x[i], uncertainties[i]);
      out += line;
    }
    std::snprintf(line, sizeof line, "NLL %.10g   EDM %.3g   ", nll, edm);
    out += line + status_text() + "\ncovariance: " + std::string(to_string(covariance_status)) + "\n";
    std::snprintf(line, sizeof line, "%td iterations, %td values+gradients, %td HVPs, %td Hessians", iterations, counts.values, counts.hvps,
                  counts.hessians);
    out += line;
    if (counts.gauss_newton > 0) {
      std::snprintf(line, sizeof line, ", %td Gauss–Newton matrices", counts.gauss_newton);
      out += line;
    }
    std::snprintf(line, sizeof line, ", %.3f s\n", seconds);
    out += line;
    return out;
  }
};

/// Which of `names` FitOptions::frozen holds fixed: each pattern is a parameter's name or else a
/// regular expression matched against whole names (ECMAScript); a pattern that is neither, or that
/// matches nothing, is a usage_error naming it. A program checks its users' patterns with this
/// before any fit runs.
std::vector<bool> frozen_mask(const std::vector<std::string>& names, const std::vector<std::string>& patterns);
#if FITLIB_DEFINITIONS
FITLIB_PREBUILT_INLINE std::vector<bool> frozen_mask(const std::vector<std::string>& names, const std::vector<std::string>& patterns) {
  std::vector<bool> frozen(names.size(), false);
  for (const auto& pattern : patterns) {
    bool matched = false;
    for (std::size_t i = 0; i < names.size(); ++i)
      if (names[i] == pattern) frozen[i] = matched = true;
    if (!matched) {
      std::regex re;
      try {
        re = std::regex(pattern);
      } catch (const std::regex_error& e) {
        throw usage_error("frozen-parameter pattern '" + pattern + "' is neither a parameter name nor a valid regular expression (" +
                          e.what() + ")");
      }
      for (std::size_t i = 0; i < names.size(); ++i)
        if (std::regex_match(names[i], re)) frozen[i] = matched = true;
    }
    if (!matched) throw usage_error("frozen-parameter pattern '" + pattern + "' matches no parameter; check the name");
  }
  return frozen;
}
#endif

namespace detail {
template <class F>
std::vector<std::string> parameter_names_of(const F& f) {
  if constexpr (requires { f.parameter_names(); }) {
    const auto& names = f.parameter_names();
    return {names.begin(), names.end()};
  } else {
    std::vector<std::string> names;
    for (index_t i = 0; i < static_cast<index_t>(f.size()); ++i) names.push_back("x" + std::to_string(i));
    return names;
  }
}


/// Dense Hessian of f at one point into H (`[n × n]`), with f and g; counted.
template <objective F>
void full_hessian(F& f, const std::vector<double>& x, double& value, std::vector<double>& g, std::vector<double>& H,
                  EvaluationCounts& counts) {
  const index_t n = static_cast<index_t>(x.size());
  g.resize(static_cast<std::size_t>(n));
  H.resize(static_cast<std::size_t>(n * n));
  if constexpr (!objective_with_hessian<F>) {
    f.value_grad(ConstBlockView<double>(x.data(), n, 1), std::span(&value, 1), BlockView<double>(g.data(), n, 1));
    ++counts.values;
    ++counts.gradients;
  }
  dense_hessian(f, x, H, g, value, counts);
}

/// The lower Cholesky factor of the free block of H, for the preconditioner; a block that is not
/// positive definite falls back to its diagonal, and a non-positive diagonal entry to 1.
Eigen::MatrixXd preconditioner_factor(const std::vector<double>& H, index_t n, const std::vector<index_t>& free, Preconditioning kind,
                                      std::vector<index_t> blocks);
#if FITLIB_DEFINITIONS
FITLIB_PREBUILT_INLINE Eigen::MatrixXd preconditioner_factor(const std::vector<double>& H, index_t n, const std::vector<index_t>& free,
                                                             Preconditioning kind, std::vector<index_t> blocks) {
  const index_t m = static_cast<index_t>(free.size());
  Eigen::MatrixXd L = Eigen::MatrixXd::Zero(m, m);
  auto h = [&](index_t r, index_t c) {
    return H[static_cast<std::size_t>(free[static_cast<std::size_t>(r)] + free[static_cast<std::size_t>(c)] * n)];
  };
  auto diagonal = [&](index_t b0, index_t b1) {
    for (index_t i = b0; i < b1; ++i) L(i, i) = h(i, i) > 0 && std::isfinite(h(i, i)) ? std::sqrt(h(i, i)) : 1.0;
  };
  if (kind == Preconditioning::diagonal) {
    diagonal(0, m);
    return L;
  }
  if (blocks.empty()) blocks = {m};
  index_t total = 0;
  for (index_t b : blocks) total += b;
  if (total != m)
    throw usage_error("FitOptions::preconditioner_blocks add up to " + std::to_string(total) + " but there are " + std::to_string(m) +
                      " free parameters");
  index_t b0 = 0;
  for (index_t b : blocks) {
    Eigen::MatrixXd block(b, b);
    for (index_t c = 0; c < b; ++c)
      for (index_t r = 0; r < b; ++r) block(r, c) = h(b0 + r, b0 + c);
    Eigen::LLT<Eigen::MatrixXd> llt(block);
    if (llt.info() == Eigen::Success && block.allFinite())
      L.block(b0, b0, b, b) = llt.matrixL();
    else
      diagonal(b0, b0 + b);
    b0 += b;
  }
  return L;
}
#endif
}  // namespace detail

namespace detail {
/// fit's coordinates (Reparametrized), for a Krylov minimizer: its EDM test would run conjugate
/// gradients on HVPs (TrustRegion's cg_edm), but where fit computes the covariance, the dense ∇²f at
/// the minimum is needed anyway. So with `dense`, `dense_edm` computes f, g and ∇²f at the iterate in
/// the parameters' own coordinates (the EDM ½·gᵀH⁻¹g does not depend on the fixed linear change of
/// variables) and keeps them; where the fit stops there, the postfit takes them (`take_hessian_at`)
/// instead of computing them again. A test that does not stop the fit costs a dense Hessian instead
/// of CG's HVPs. Without `dense` (no covariance) the EDM stays CG's.
template <objective F>
class ReparametrizedKeepingHessian : public Reparametrized<F> {
 public:
  ReparametrizedKeepingHessian(F& f, std::vector<double> x_ref, std::vector<index_t> free, Eigen::MatrixXd L, bool dense)
      : Reparametrized<F>(f, std::move(x_ref), std::move(free), std::move(L)), f_(&f), dense_(dense) {}

  /// ½·gᵀH⁻¹g over the free parameters at the point y (TrustRegion::edm); NaN without `dense`.
  double dense_edm(std::span<const double> y, EvaluationCounts& counts) {
    if (!dense_) return std::numeric_limits<double>::quiet_NaN();
    const index_t n = this->full_size(), m = this->size();
    const std::vector<index_t>& free = this->free();
    x_.resize(static_cast<std::size_t>(n));
    this->to_full(ConstBlockView<double>(y.data(), m, 1), BlockView<double>(x_.data(), n, 1));
    full_hessian(*f_, x_, value_, g_, H_, counts);
    Eigen::MatrixXd h(m, m);
    std::vector<double> g(static_cast<std::size_t>(m));
    for (index_t c = 0; c < m; ++c) {
      const auto jc = static_cast<std::size_t>(free[static_cast<std::size_t>(c)]);
      g[static_cast<std::size_t>(c)] = g_[jc];
      for (index_t k = 0; k < m; ++k) h(k, c) = H_[static_cast<std::size_t>(free[static_cast<std::size_t>(k)]) + jc * static_cast<std::size_t>(n)];
    }
    return detail::dense_edm(h, g);
  }

  /// The Hessian (`[n × n]`, all parameters) kept at x, with f's value and gradient there into
  /// `value` and `g`; empty (and `value`, `g` untouched) where none was computed at exactly x.
  std::vector<double> take_hessian_at(const std::vector<double>& x, double& value, std::vector<double>& g) {
    if (H_.empty() || x_ != x) return {};
    value = value_;
    g = std::move(g_);
    std::vector<double> H = std::move(H_);
    x_.clear();
    H_.clear();
    return H;
  }

 private:
  F* f_;
  bool dense_;
  std::vector<double> x_, g_, H_;
  double value_ = 0;
};

/// EndGame::krylov: trust-krylov from the Gauss–Newton phase's last iterate r.x, in coordinates
/// y = Lᵀ(x − r.x) where L·Lᵀ is the phase's last Gauss–Newton matrix G (`gn.hessian`) in the
/// parameters' own coordinates: G is the matrix in the phase's coordinates y₀ = L0ᵀ(x − x0), so
/// L = L0·chol(G) (preconditioner_factor's fallbacks where G is not positive definite). Near the minimum that matrix is close to ∇²f, so the Krylov solves
/// and the EDM's conjugate gradients take few HVPs there, and the trust region is measured in the metric
/// the minimum's curvature sets; the EDM that decides the stop does not depend on the fixed change of
/// variables. Iterations, evaluations, the iteration limit and the clock go on from the phase's; the
/// callbacks see one minimisation. Sets r.x, r.status, r.stop, r.iterations and r.counts; with
/// `covariance`, the EDM is the dense ∇²f's (ReparametrizedKeepingHessian), and the matrix at r.x,
/// where the last EDM test was there, goes into `known` with r.nll and r.gradient.
template <objective F, class Sub, class... Callbacks>
void krylov_end_game(F& f, const TrustRegionOptions& options, const TrustRegionState<Sub>& gn, const Eigen::MatrixXd& L0,
                     const std::vector<index_t>& free, bool covariance, FitResult& r, std::vector<double>& known, Callbacks&... callbacks) {
  const index_t n = static_cast<index_t>(r.x.size()), m = static_cast<index_t>(free.size());
  std::vector<index_t> all(static_cast<std::size_t>(m));
  std::iota(all.begin(), all.end(), index_t{0});
  Eigen::MatrixXd L = preconditioner_factor(gn.hessian, m, all, Preconditioning::cholesky, {});
  if (L0.size() > 0) L = (L0 * L).eval();  // lower triangular, as both factors
  ReparametrizedKeepingHessian<F> end(f, r.x, free, std::move(L), covariance);
  TrustRegionOptions o = options;
  o.curvature = Curvature::exact;
  o.end_game = EndGame::hessian;
  const TrustRegion<Gltr> krylov(o);
  TrustRegionState<Gltr> s;
  krylov.init(end, s, std::vector<double>(static_cast<std::size_t>(m), 0.0));
  s.iteration = gn.iteration;
  s.maxiter = gn.maxiter;
  s.start = gn.start;
  s.begun = gn.begun;
  s.counts += gn.counts;
  if (s.status == FitStatus::running && s.iteration >= s.maxiter) s.status = FitStatus::max_iterations;
  krylov.run(end, s, callbacks...);
  end.to_full(ConstBlockView<double>(s.x.data(), m, 1), BlockView<double>(r.x.data(), n, 1));
  r.status = s.status;
  r.stop = krylov.stop_test(s);
  r.iterations = s.iteration;
  r.counts = s.counts;
  known = end.take_hessian_at(r.x, r.nll, r.gradient);
}

/// The dense solver of the postfit covariance: F's policy's where it inverts (a CUDA likelihood's factors and
/// inverts on its device), else the host's. A device solver takes matrices of `device_covariance_min` free
/// parameters or more; below, a round trip to the device costs more than the host's n³/3 flops.
template <class F>
struct dense_solver_of {
  using type = HostCholesky;
};
template <class F>
  requires requires(typename F::policy_type::dense_solver& s, BlockView<double> x) { s.inverse(x); }
struct dense_solver_of<F> {
  using type = typename F::policy_type::dense_solver;
};
inline constexpr index_t device_covariance_min = 256;

/// What `fit` computes at the minimum r.x, into r: with `covariance`, the dense Hessian, the
/// covariance of the free parameters (its inverse), the uncertainties and the EDM; else the NLL
/// and the gradient only. Frozen parameters get zero rows and columns. `known`: the Hessian at r.x
/// already computed by the minimizer (all parameters), with r.nll and r.gradient, or empty.
template <objective F>
void postfit(F& f, FitResult& r, const std::vector<index_t>& free, bool covariance, std::vector<double> known = {}) {
  const index_t n = static_cast<index_t>(r.x.size()), m = static_cast<index_t>(free.size());
  // Frozen parameters have zero uncertainty; the free ones NaN unless the covariance is computed.
  const double unknown = covariance ? 0.0 : std::numeric_limits<double>::quiet_NaN();
  r.uncertainties.assign(static_cast<std::size_t>(n), 0.0);
  r.covariance.assign(static_cast<std::size_t>(n * n), 0.0);
  for (index_t a : free) {
    r.uncertainties[static_cast<std::size_t>(a)] = unknown;
    for (index_t b : free) r.covariance[static_cast<std::size_t>(a + b * n)] = unknown;
  }
  std::vector<double> H = std::move(known);
  if (covariance) {
    if (H.empty()) full_hessian(f, r.x, r.nll, r.gradient, H, r.counts);
    std::vector<double> hf(static_cast<std::size_t>(m * m)), cf(hf.size());
    for (index_t c = 0; c < m; ++c)
      for (index_t k = 0; k < m; ++k) hf[static_cast<std::size_t>(k + c * m)] = H[static_cast<std::size_t>(free[static_cast<std::size_t>(k)] + free[static_cast<std::size_t>(c)] * n)];
    const ConstBlockView<double> hv(hf.data(), m, m);
    const BlockView<double> cv(cf.data(), m, m);
    if (m == 0) {
      r.covariance_status = CovarianceStatus::accurate;
    } else if (m >= device_covariance_min) {
      typename dense_solver_of<F>::type solver;
      r.covariance_status = covariance_from_hessian(hv, cv, solver);
    } else {
      r.covariance_status = covariance_from_hessian(hv, cv);
    }
    double edm = 0;
    for (index_t c = 0; c < m; ++c) {
      const index_t jc = free[static_cast<std::size_t>(c)];
      for (index_t k = 0; k < m; ++k) {
        const index_t jk = free[static_cast<std::size_t>(k)];
        const double ckc = cf[static_cast<std::size_t>(k + c * m)];
        r.covariance[static_cast<std::size_t>(jk + jc * n)] = ckc;
        edm += 0.5 * r.gradient[static_cast<std::size_t>(jk)] * ckc * r.gradient[static_cast<std::size_t>(jc)];
      }
      const double var = cf[static_cast<std::size_t>(c + c * m)];
      r.uncertainties[static_cast<std::size_t>(jc)] = var >= 0 ? std::sqrt(var) : std::numeric_limits<double>::quiet_NaN();
    }
    r.edm = edm;
    r.hessian = std::move(H);
  } else {
    r.gradient.resize(static_cast<std::size_t>(n));
    f.value_grad(ConstBlockView<double>(r.x.data(), n, 1), std::span(&r.nll, 1), BlockView<double>(r.gradient.data(), n, 1));
    ++r.counts.values;
    ++r.counts.gradients;
  }
}
}  // namespace detail

/// Minimises `f` with `minimizer` from `options.x0` (or the objective's default point), holding the
/// frozen parameters fixed and in the chosen preconditioned coordinates; then computes the
/// covariance as the inverse Hessian of the free parameters at the minimum. Never throws for
/// non-convergence: that is `FitResult::status`. Callbacks see every iteration.
template <objective F, class Sub, class... Callbacks>
FitResult fit(F& f, const TrustRegion<Sub>& minimizer, const FitOptions& options = {}, Callbacks&... callbacks) {
  options.validate();
  const auto t0 = std::chrono::steady_clock::now();
  FitResult r;
  r.names = detail::parameter_names_of(f);
  const index_t n = static_cast<index_t>(f.size());
  if (!options.x0.empty()) {
    r.x0 = options.x0;
  } else if constexpr (requires { f.default_parameters(); }) {
    r.x0 = f.default_parameters();
  } else {
    throw usage_error("fit needs a starting point: set FitOptions::x0 (the objective has no default_parameters())");
  }
  if (static_cast<index_t>(r.x0.size()) != n)
    throw usage_error("FitOptions::x0 has " + std::to_string(r.x0.size()) + " entries; the objective has " + std::to_string(n) + " parameters");
  r.frozen = frozen_mask(r.names, options.frozen);
  std::vector<index_t> free;
  for (index_t i = 0; i < n; ++i)
    if (!r.frozen[static_cast<std::size_t>(i)]) free.push_back(i);
  const index_t m = static_cast<index_t>(free.size());

  Eigen::MatrixXd L;
  EvaluationCounts extra;
  if (options.preconditioning != Preconditioning::none && m > 0) {
    std::vector<double> H = options.reference_hessian;
    if (H.empty()) {
      double value;
      std::vector<double> g;
      detail::full_hessian(f, r.x0, value, g, H, extra);
    } else if (static_cast<index_t>(H.size()) != n * n) {
      throw usage_error("FitOptions::reference_hessian has " + std::to_string(H.size()) + " entries; it must be n × n = " +
                        std::to_string(n * n));
    }
    L = detail::preconditioner_factor(H, n, free, options.preconditioning, options.preconditioner_blocks);
  }
  detail::ReparametrizedKeepingHessian<F> reduced(f, r.x0, free, L, options.covariance);
  typename TrustRegion<Sub>::state_type state;
  std::vector<double> known;  // ∇²f at r.x (all parameters) where the minimizer computed it there
  if (m > 0) {
    const std::vector<double> y0(static_cast<std::size_t>(m), 0.0);
    minimizer.init(reduced, state, y0);
    minimizer.run(reduced, state, callbacks...);
    r.x.resize(static_cast<std::size_t>(n));
    reduced.to_full(ConstBlockView<double>(state.x.data(), m, 1), BlockView<double>(r.x.data(), n, 1));
    r.status = state.status;
    // What the stop tested, at the final iterate: the EDM is the one the last step computed (NaN
    // if it computed none); ½gᵀH⁻¹g does not change under the fixed linear change of variables.
    r.stop = minimizer.stop_test(state);
    r.iterations = state.iteration;
    r.counts = state.counts;
    if constexpr (Sub::needs_hessian && objective_with_gauss_newton<Reparametrized<F>>)
      if (state.status == FitStatus::handed_over)
        detail::krylov_end_game(f, minimizer.options(), state, L, free, options.covariance, r, known, callbacks...);
    if (state.status != FitStatus::handed_over && options.covariance) known = reduced.take_hessian_at(r.x, r.nll, r.gradient);
  } else {  // everything frozen (a scan point, a fixed hypothesis): nothing to minimise
    r.x = r.x0;
    r.status = FitStatus::converged_gtol;
  }
  r.counts += extra;  // the preconditioner's prefit Hessian

  // The postfit's ∇²f at r.x where a Krylov minimizer's last EDM test computed it there (`known`,
  // above). Else, where the minimizer's coordinates are the parameters themselves, its value and
  // gradient at the last iterate are the postfit ones (the same evaluation at the same point: the same
  // bits), and so is its last ∇²f where it kept one; else the matrix alone is computed there
  // (objective_with_bare_hessian). (The Krylov end game's coordinates are preconditioned ones.)
  if (known.empty() && options.covariance && m == n && m > 0 && L.size() == 0 && state.status != FitStatus::handed_over) {
    if (Sub::needs_hessian && state.model == Curvature::exact && state.hessian_at_x) {
      known = std::move(state.hessian);
    } else if constexpr (objective_with_bare_hessian<F>) {
      known.resize(static_cast<std::size_t>(n * n));
      f.hessian(ConstBlockView<double>(r.x.data(), n, 1), BlockView<double>(known.data(), n, n), Curvature::exact);
      ++r.counts.hessians;
    }
    if (!known.empty()) {
      r.nll = state.f;
      r.gradient = state.g;
    }
  }
  detail::postfit(f, r, free, options.covariance, std::move(known));
  // A stop decided by an EDM reports the EDM it tested: the postfit's ½gᵀCg is NaN where the
  // covariance fails (a parameter the likelihood does not depend on makes H singular, while the
  // minimizer's CG EDM never leaves the gradient's Krylov space and passes), and would otherwise
  // only repeat it to rounding.
  if ((r.status == FitStatus::converged_edm || r.status == FitStatus::converged_precision || r.status == FitStatus::stalled) &&
      !std::isnan(r.stop.edm))
    r.edm = r.stop.edm;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace fitlib
