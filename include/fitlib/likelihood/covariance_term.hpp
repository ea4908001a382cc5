// SPDX-License-Identifier: MIT
// The covariance χ² data term ½·rᵀ·C⁻¹·r, which couples the bins, with Gaussian bin-by-bin β profiled.
#pragma once

#include <Eigen/Cholesky>
#include <Eigen/Core>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "fitlib/core/error.hpp"
#include "fitlib/core/types.hpp"
#include "fitlib/detail/spd_inverse.hpp"
#include "fitlib/device/host_solver.hpp"
#include "fitlib/likelihood/bbstat.hpp"
#include "fitlib/model/model.hpp"

namespace fitlib {

/// ½·rᵀ·(C + diag q)⁻¹·r over the data bins, r = ν' − n (rabbit-likelihood-and-format.md §3.1
/// --covarianceFit; the β profile of §3.4 as a Gaussian marginalisation, see bbstat.hpp,
/// coupled_aggregates). C⁻¹ is the model's inverse data covariance; a model without one gets
/// diag(1/σ²) from its data variances (or counts), which is what rabbit's fallback meant to do
/// (§8 item 5). The additive type adds diag(sumw2) to C once; the multiplicative type adds the
/// parameter-dependent diag(q) and so factorizes C + diag q per evaluated column, with the
/// policy's dense solver (`Solver`: factor and solve on raw column-major data, device/policy.hpp).
template <class Solver = detail::HostCholesky>
class CovarianceTerm {
 public:
  CovarianceTerm() = default;
  CovarianceTerm(const Model& model, const BinByBinStats& bb) : nbins_(model.nbins()), varying_(bb.enabled && bb.multiplicative()) {
    const index_t B = nbins_;
    Eigen::MatrixXd cinv(B, B);
    if (!model.data_covariance_inverse.empty()) {
      cinv = Eigen::Map<const Eigen::MatrixXd>(model.data_covariance_inverse.data(), B, B);
    } else {
      const auto& var = model.data_variance.empty() ? model.data : model.data_variance;
      cinv.setZero();
      for (index_t b = 0; b < B; ++b) {
        if (!(var[static_cast<std::size_t>(b)] > 0))
          throw model_error("the covariance data term needs an inverse data covariance or a positive variance in every bin, but " +
                            model.describe_bin(b) + " has variance " + std::to_string(var[static_cast<std::size_t>(b)]) +
                            "; supply Model::data_covariance_inverse");
        cinv(b, b) = 1 / var[static_cast<std::size_t>(b)];
      }
    }
    // Additive β widens C by sumw2 per bin; without β, C⁻¹ is used as given.
    Eigen::VectorXd widen = Eigen::VectorXd::Zero(B);
    if (bb.enabled && !bb.multiplicative())
      for (index_t b = 0; b < B; ++b)
        for (index_t e = 0; e < bb.per_bin(); ++e) {
          const auto at = static_cast<std::size_t>(b * bb.per_bin() + e);
          if (!bb.fixed[at]) widen(b) += bb.sigma[at] * bb.sigma[at];
        }
    if (!varying_ && widen.isZero(0)) {
      inverse_ = std::move(cinv);
      return;
    }
    Eigen::LLT<Eigen::MatrixXd> llt(cinv);
    if (llt.info() != Eigen::Success)
      throw model_error("the inverse data covariance is not positive definite; supply a valid Model::data_covariance_inverse");
    covariance_ = detail::inverse_from_cholesky(llt);
    covariance_.diagonal() += widen;
    if (varying_) return;
    Eigen::LLT<Eigen::MatrixXd> widened(covariance_);
    inverse_ = detail::inverse_from_cholesky(widened);
  }

  index_t nbins() const { return nbins_; }
  /// Whether C + diag q depends on the parameters (multiplicative β).
  bool varying() const { return varying_; }

  /// Column j's value ½·rᵀ·y with y = (C + diag q)⁻¹·r, r = ν' − n; keeps the factorization for
  /// `apply` and `add_curvature` at the same column. Returns +∞ when C + diag q is not positive
  /// definite (the step is then rejected like any non-finite trial).
  double solve(index_t j, std::span<const double> nu, std::span<const double> q, std::span<const double> counts, double* y) {
    const index_t B = nbins_;
    if (static_cast<index_t>(llt_.size()) <= j) llt_.resize(static_cast<std::size_t>(j + 1));
    Eigen::VectorXd r(B);
    for (index_t b = 0; b < B; ++b) r(b) = nu[static_cast<std::size_t>(b)] - counts[static_cast<std::size_t>(b)];
    Eigen::Map<Eigen::VectorXd> yv(y, B);
    if (varying_) {
      Eigen::MatrixXd c = covariance_;
      c.diagonal() += Eigen::Map<const Eigen::VectorXd>(q.data(), B);
      Solver& llt = llt_[static_cast<std::size_t>(j)];
      if (!llt.factor({c.data(), B, B})) {
        yv.setZero();
        return std::numeric_limits<double>::infinity();
      }
      llt.solve({r.data(), B, 1}, {y, B, 1});
    } else {
      yv.noalias() = inverse_ * r;
    }
    return 0.5 * r.dot(yv);
  }

  /// z = (C + diag q)⁻¹·t at column j (after `solve` there).
  void apply(index_t j, const double* t, double* z) const {
    const Eigen::Map<const Eigen::VectorXd> tv(t, nbins_);
    Eigen::Map<Eigen::VectorXd> zv(z, nbins_);
    if (varying_) llt_[static_cast<std::size_t>(j)].solve({t, nbins_, 1}, {z, nbins_, 1});
    else zv.noalias() = inverse_ * tv;
  }

  /// Adds Rᵀ·(C + diag q)⁻¹·R at column j into H (`[n × n]`), R the shards' coupled rows `[nbins × n]`.
  void add_curvature(index_t j, const Eigen::MatrixXd& R, BlockView<double> H) const {
    Eigen::Map<Eigen::MatrixXd, 0, Eigen::OuterStride<>> h(H.data, H.rows, H.cols, Eigen::OuterStride<>(H.ld));
    const Eigen::MatrixXd G = varying_ ? Eigen::MatrixXd(R.transpose() * solved(j, R)) : Eigen::MatrixXd(R.transpose() * (inverse_ * R));
    // Added from one triangle, so the Hessian stays exactly symmetric.
    for (index_t c = 0; c < G.cols(); ++c)
      for (index_t r = c; r < G.rows(); ++r) {
        h(r, c) += G(r, c);
        if (r != c) h(c, r) += G(r, c);
      }
  }

 private:
  /// (C + diag q)⁻¹·R at column j (after `solve` there).
  Eigen::MatrixXd solved(index_t j, const Eigen::MatrixXd& R) const {
    Eigen::MatrixXd s(R.rows(), R.cols());
    llt_[static_cast<std::size_t>(j)].solve({R.data(), R.rows(), R.cols()}, {s.data(), s.rows(), s.cols()});
    return s;
  }

  index_t nbins_ = 0;
  bool varying_ = false;
  Eigen::MatrixXd inverse_;     ///< (C + widening)⁻¹ when constant
  Eigen::MatrixXd covariance_;  ///< C (+ the additive widening), when q varies
  std::vector<Solver> llt_;     ///< per column, factorised by `solve`
};

/// The covariance term inside a likelihood: the term and the global step it takes between the
/// shards' forward and backward passes, with that step's per-bin workspaces.
template <class Solver = detail::HostCholesky>
class CoupledStep {
 public:
  CoupledStep() = default;
  CoupledStep(const Model& model, const BinByBinStats& bb) : term_(model, bb) {}

  /// Gathers ν' and q (and their directional derivatives) of every data bin from the shards, then
  /// per column the value ½·rᵀ·y into f (when not empty), y = (C + diag q)⁻¹·r, and per direction
  /// z = (C + diag q)⁻¹·(dν' − y·dq). `counts_of(j)`: column j's observed counts.
  template <class Shards, class CountsOf>
  void solve(Shards& shards, ConstBlockView<double> x, ConstBlockView<double> v, std::span<double> f, const CountsOf& counts_of) {
    const index_t B = term_.nbins(), nx = x.cols, nv = v.empty() ? 0 : v.cols;
    nu_.resize(B, nx);
    q_.resize(B, nx);
    y_.resize(B, nx);
    dnu_.resize(B, nv);
    dq_.resize(B, nv);
    z_.resize(B, nv);
    shards.for_each([&](std::size_t k) {
      shards[k].coupled_aggregates(x, v, shards.data_rows(nu_, k), shards.data_rows(q_, k), shards.data_rows(dnu_, k), shards.data_rows(dq_, k));
    });
    for (index_t j = 0; j < nx; ++j) {
      const double value = term_.solve(j, {nu_.col(j).data(), static_cast<std::size_t>(B)}, {q_.col(j).data(), static_cast<std::size_t>(B)},
                                       counts_of(j), y_.col(j).data());
      if (!f.empty()) f[static_cast<std::size_t>(j)] = value;
    }
    for (index_t k = 0; k < nv; ++k) {
      const index_t j = nx == 1 ? 0 : k;
      const Eigen::VectorXd t = dnu_.col(k) - y_.col(j).cwiseProduct(dq_.col(k));
      term_.apply(j, t.data(), z_.col(k).data());
    }
  }

  /// ∂F/∂ν' per data bin and column (`[nbins × nx]`), and its derivative along each direction
  /// (`[nbins × nv]`), of the last solve.
  const Eigen::MatrixXd& y() const { return y_; }
  const Eigen::MatrixXd& z() const { return z_; }
  /// The Hessian's coupled rows R (`[nbins × n]`), which the shards fill before add_curvature.
  Eigen::MatrixXd& rows(index_t n) {
    rows_.resize(term_.nbins(), n);
    return rows_;
  }
  /// Adds Rᵀ·(C + diag q)⁻¹·R at column j (after solve) into H.
  void add_curvature(index_t j, BlockView<double> H) const { term_.add_curvature(j, rows_, H); }

 private:
  CovarianceTerm<Solver> term_;
  Eigen::MatrixXd nu_, q_, y_, dnu_, dq_, z_, rows_;
};

}  // namespace fitlib
