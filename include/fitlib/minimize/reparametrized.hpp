// SPDX-License-Identifier: MIT
// Reparametrized<F>: an objective over the free parameters in preconditioned coordinates.
#pragma once

#include <Eigen/Core>
#include <span>
#include <vector>

#include "fitlib/core/concepts.hpp"
#include "fitlib/core/types.hpp"

namespace fitlib {

/// The objective y ↦ f(x_ref + S·L⁻ᵀ·y): S selects the free parameters (the frozen ones stay at
/// x_ref), L is a fixed lower-triangular preconditioner (L·Lᵀ ≈ the free block of the Hessian;
/// empty means the identity). Gradients and curvature follow by the chain rule:
/// g̃ = L⁻¹·Sᵀ·g, H̃ = L⁻¹·H_ff·L⁻ᵀ. The minimizer sees a problem of `free.size()` parameters
/// whose Hessian is near the identity, so its radius is in units of standard deviations.
template <objective F>
class Reparametrized {
 public:
  Reparametrized(F& f, std::vector<double> x_ref, std::vector<index_t> free, Eigen::MatrixXd L = {})
      : f_(&f), x_ref_(std::move(x_ref)), free_(std::move(free)), L_(std::move(L)) {}

  index_t size() const { return static_cast<index_t>(free_.size()); }
  index_t full_size() const { return static_cast<index_t>(x_ref_.size()); }
  /// The free parameters' indices among the full ones (S's columns).
  const std::vector<index_t>& free() const { return free_; }

  /// X (`[n × N]`) = x_ref + S·L⁻ᵀ·Y for the columns of Y (`[m × N]`).
  void to_full(ConstBlockView<double> Y, BlockView<double> X) const {
    const Eigen::MatrixXd d = directions(Y);
    for (index_t j = 0; j < Y.cols; ++j) {
      for (index_t i = 0; i < full_size(); ++i) X(i, j) = x_ref_[static_cast<std::size_t>(i)];
      for (index_t k = 0; k < size(); ++k) X(free_[static_cast<std::size_t>(k)], j) += d(k, j);
    }
  }

  void value(ConstBlockView<double> Y, std::span<double> f) { f_->value(full_points(Y), f); }
  double rounding_floor() const
    requires objective_with_rounding_floor<F>
  {
    return f_->rounding_floor();
  }

  void value_grad(ConstBlockView<double> Y, std::span<double> f, BlockView<double> G) {
    const auto X = full_points(Y);
    grad_full_.resize(static_cast<std::size_t>(full_size() * Y.cols));
    f_->value_grad(X, f, BlockView<double>(grad_full_.data(), full_size(), Y.cols));
    pull_back(ConstBlockView<double>(grad_full_.data(), full_size(), Y.cols), G);
  }

  void hessp(ConstBlockView<double> Y, ConstBlockView<double> V, BlockView<double> HV) {
    const auto X = full_points(Y);
    const Eigen::MatrixXd d = directions(V);
    dir_full_.assign(static_cast<std::size_t>(full_size() * V.cols), 0.0);
    for (index_t j = 0; j < V.cols; ++j)
      for (index_t k = 0; k < size(); ++k) dir_full_[static_cast<std::size_t>(free_[static_cast<std::size_t>(k)] + j * full_size())] = d(k, j);
    hv_full_.resize(dir_full_.size());
    f_->hessp(X, ConstBlockView<double>(dir_full_.data(), full_size(), V.cols), BlockView<double>(hv_full_.data(), full_size(), V.cols));
    pull_back(ConstBlockView<double>(hv_full_.data(), full_size(), V.cols), HV);
  }

  void hessian(ConstBlockView<double> Y, std::span<double> f, BlockView<double> G, BlockView<double> H)
    requires objective_with_hessian<F>
  {
    curvature(Y, G, H, [&](ConstBlockView<double> X, BlockView<double> g, BlockView<double> h) { f_->hessian(X, f, g, h); });
  }

  void hessian(ConstBlockView<double> Y, std::span<double> f, BlockView<double> G, BlockView<double> H, Curvature kind)
    requires objective_with_gauss_newton<F>
  {
    curvature(Y, G, H, [&](ConstBlockView<double> X, BlockView<double> g, BlockView<double> h) { f_->hessian(X, f, g, h, kind); });
  }

  /// The matrix alone (objective_with_bare_hessian): the change of variables is linear, so the
  /// matrix's pull-back needs no gradient.
  void hessian(ConstBlockView<double> Y, BlockView<double> H, Curvature kind)
    requires objective_with_bare_hessian<F>
  {
    curvature(Y, {}, H, [&](ConstBlockView<double> X, BlockView<double>, BlockView<double> h) { f_->hessian(X, h, kind); });
  }

 private:
  /// A dense curvature of f (`full(X, g, h)` into the full-space gradient and matrix) in these coordinates.
  template <class Full>
  void curvature(ConstBlockView<double> Y, BlockView<double> G, BlockView<double> H, Full full) {
    const index_t n = full_size(), m = size();
    const auto X = full_points(Y);
    grad_full_.resize(static_cast<std::size_t>(n * Y.cols));
    hess_full_.resize(static_cast<std::size_t>(n * n * Y.cols));
    full(X, BlockView<double>(grad_full_.data(), n, Y.cols), BlockView<double>(hess_full_.data(), n, n * Y.cols));
    if (!G.empty()) pull_back(ConstBlockView<double>(grad_full_.data(), n, Y.cols), G);
    for (index_t j = 0; j < Y.cols; ++j) {
      Eigen::MatrixXd h(m, m);
      for (index_t c = 0; c < m; ++c)
        for (index_t r = 0; r < m; ++r)
          h(r, c) = hess_full_[static_cast<std::size_t>(free_[static_cast<std::size_t>(r)] + (free_[static_cast<std::size_t>(c)] + j * n) * n)];
      if (L_.size() > 0) {
        h = L_.template triangularView<Eigen::Lower>().solve(h);
        h = L_.template triangularView<Eigen::Lower>().solve(h.transpose()).transpose();
      }
      for (index_t c = 0; c < m; ++c)
        for (index_t r = 0; r < m; ++r) H(r, j * m + c) = h(r, c);
    }
  }

  /// L⁻ᵀ·Y: the displacement of the free parameters.
  Eigen::MatrixXd directions(ConstBlockView<double> Y) const {
    Eigen::MatrixXd d(size(), Y.cols);
    for (index_t j = 0; j < Y.cols; ++j)
      for (index_t k = 0; k < size(); ++k) d(k, j) = Y(k, j);
    if (L_.size() > 0) d = L_.transpose().template triangularView<Eigen::Upper>().solve(d);
    return d;
  }

  ConstBlockView<double> full_points(ConstBlockView<double> Y) {
    x_full_.resize(static_cast<std::size_t>(full_size() * Y.cols));
    to_full(Y, BlockView<double>(x_full_.data(), full_size(), Y.cols));
    return {x_full_.data(), full_size(), Y.cols};
  }

  /// L⁻¹·Sᵀ·A for full-space columns A.
  void pull_back(ConstBlockView<double> A, BlockView<double> out) const {
    Eigen::MatrixXd a(size(), A.cols);
    for (index_t j = 0; j < A.cols; ++j)
      for (index_t k = 0; k < size(); ++k) a(k, j) = A(free_[static_cast<std::size_t>(k)], j);
    if (L_.size() > 0) a = L_.template triangularView<Eigen::Lower>().solve(a);
    for (index_t j = 0; j < A.cols; ++j)
      for (index_t k = 0; k < size(); ++k) out(k, j) = a(k, j);
  }

  F* f_;
  std::vector<double> x_ref_;
  std::vector<index_t> free_;
  Eigen::MatrixXd L_;
  std::vector<double> x_full_, grad_full_, dir_full_, hv_full_, hess_full_;
};

}  // namespace fitlib
