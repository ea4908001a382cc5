// SPDX-License-Identifier: MIT
// Penalties added to the NLL: the parameter and observable penalty interfaces, rabbit's SVD curvature penalty and a smoothness prior.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "fitlib/core/error.hpp"
#include "fitlib/core/types.hpp"
#include "fitlib/device/partition.hpp"

namespace fitlib {

/// The two kinds of penalty a likelihood adds to its NLL (Likelihood::add_regularizer), as two
/// interfaces, held in two lists: a kind is a type, never a run-time flag to test.
///
/// A parameter penalty reads the parameters x alone. It is evaluated once per column beside the
/// constraints, so it works however the bins are sharded, over MPI ranks too (`SmoothnessPrior`).
class ParameterPenalty {
 public:
  virtual ~ParameterPenalty() = default;
  /// The name used in messages and results.
  virtual std::string name() const = 0;
  /// Called once by the likelihood before any evaluation: resolves the penalty's parameter names
  /// and throws usage_error naming an unknown one.
  virtual void bind(const std::vector<std::string>& parameter_names) = 0;
  /// Penalty at x (size nparams); adds ∂/∂x into grad when grad is not empty.
  virtual double value_grad(std::span<const double> x, std::span<double> grad) const = 0;
  /// Adds ∇²penalty(x)·v_k into hv column k, for every column of v (v and hv are [nparams × nv]).
  virtual void hessp(std::span<const double> x, ConstBlockView<double> v, BlockView<double> hv) const = 0;
  /// Adds ∇²penalty(x) into hess ([nparams × nparams]).
  virtual void add_hessian(std::span<const double> x, BlockView<double> hess) const = 0;
};

/// An observable penalty reads the observables o: the expected bin yields summed over processes,
/// o_b = Σ_p ν_bp, of the contiguous global bin range bins() (usually one masked channel), and
/// nothing else. The likelihood gathers o from the shards holding those bins and sends the
/// penalty's derivatives back through their backward pass (`SvdRegularizer`, `PositivityPenalty`).
class ObservablePenalty {
 public:
  virtual ~ObservablePenalty() = default;
  /// The name used in messages and results.
  virtual std::string name() const = 0;
  /// The global bin range [begin, end) read.
  virtual BinRange bins() const = 0;
  /// Called once by the likelihood before any evaluation: the observables at the initial point
  /// (the reference yields, bins().size() of them).
  virtual void bind(std::span<const double> reference_observables) = 0;
  /// Penalty at o (size bins().size()); adds ∂/∂o into grad when grad is not empty.
  virtual double value_grad(std::span<const double> o, std::span<double> grad) const = 0;
  /// Adds ∇²penalty(o)·v_k into hv column k, for every column of v (v and hv are [nbins × nv]).
  virtual void hessp(std::span<const double> o, ConstBlockView<double> v, BlockView<double> hv) const = 0;
  /// Adds ∇²penalty(o) into hess ([nbins × nbins]).
  virtual void add_hessian(std::span<const double> o, BlockView<double> hess) const = 0;
};

namespace detail {

inline void check_regularizer_shapes(const std::string& who, index_t nz, std::span<const double> z, index_t grad_size) {
  if (static_cast<index_t>(z.size()) != nz)
    throw usage_error(who + ": evaluated at a point with " + std::to_string(z.size()) + " entries; it expects " +
                      std::to_string(nz));
  if (grad_size != 0 && grad_size != nz)
    throw usage_error(who + ": the gradient has " + std::to_string(grad_size) + " entries; pass " + std::to_string(nz) +
                      " or none");
}

inline void check_regularizer_block(const std::string& who, index_t nz, ConstBlockView<double> v, BlockView<double> hv) {
  if (v.rows != nz || hv.rows != nz || v.cols != hv.cols)
    throw usage_error(who + ": Hessian-vector blocks are [" + std::to_string(v.rows) + " × " + std::to_string(v.cols) +
                      "] → [" + std::to_string(hv.rows) + " × " + std::to_string(hv.cols) + "]; both must be [" +
                      std::to_string(nz) + " × nv]");
}

inline void check_regularizer_hessian(const std::string& who, index_t nz, BlockView<double> hess) {
  if (hess.rows != nz || hess.cols != nz)
    throw usage_error(who + ": the Hessian block is [" + std::to_string(hess.rows) + " × " + std::to_string(hess.cols) +
                      "]; it must be [" + std::to_string(nz) + " × " + std::to_string(nz) + "]");
}

}  // namespace detail

/// rabbit's SVD-style curvature penalty on one block of observables (rabbit-likelihood-and-format.md §3.6):
/// e^{2τ}·Σ_cells (Δr)², r = o/o⁰ reshaped to an N-D grid (N = 1..3), symmetric edge padding, Δ the
/// discrete Laplacian. Everything is applied matrix-free in O(nbins) except the dense Hessian.
class SvdRegularizer final : public ObservablePenalty {
 public:
  /// `bins`: the global bin range read; `shape`: 1–3 positive extents, row-major (last index fastest),
  /// whose product is bins.size(); `tau`: the strength, the penalty is weighted by e^{2τ}.
  /// Throws usage_error naming the offending argument.
  SvdRegularizer(std::string name, BinRange bins, std::vector<index_t> shape, double tau)
      : name_(std::move(name)), bins_(bins), shape_(std::move(shape)), tau_(tau) {
    if (bins_.begin < 0 || bins_.end <= bins_.begin)
      throw usage_error(who() + ": bins [" + std::to_string(bins_.begin) + ", " + std::to_string(bins_.end) +
                        ") is empty or negative; give a non-empty range of global bins");
    if (shape_.empty() || shape_.size() > 3)
      throw usage_error(who() + ": shape has " + std::to_string(shape_.size()) + " dimensions; use 1 to 3");
    index_t product = 1;
    for (std::size_t a = 0; a < shape_.size(); ++a) {
      if (shape_[a] < 1)
        throw usage_error(who() + ": shape extent " + std::to_string(a) + " is " + std::to_string(shape_[a]) +
                          "; every extent must be ≥ 1");
      // Checked before multiplying, so absurd extents report a mismatch rather than overflow.
      if (shape_[a] > bins_.size()) {
        product = bins_.size() + 1;
        break;
      }
      product *= shape_[a];
    }
    if (product != bins_.size())
      throw usage_error(who() + ": shape holds " + std::to_string(product) + " cells but bins has " +
                        std::to_string(bins_.size()) + "; the extents must multiply to the number of bins");
    weight_ = std::exp(2.0 * tau_);
    if (!std::isfinite(tau_) || !std::isfinite(weight_))
      throw usage_error(who() + ": tau = " + std::to_string(tau_) + " gives a non-finite weight e^{2τ}; use a finite tau below ~354");
    // Leading unit extents keep one loop nest for every rank; a unit axis contributes nothing.
    const std::size_t pad = 3 - shape_.size();
    for (std::size_t a = 0; a < 3; ++a) ext_[a] = a < pad ? 1 : shape_[a - pad];
  }

  std::string name() const override { return name_; }
  BinRange bins() const override { return bins_; }

  /// Stores the reference yields o⁰ (bins.size() entries). Throws usage_error on a wrong size and
  /// model_error naming the global bin where o⁰ is not finite.
  void bind(std::span<const double> reference_observables) override {
    const index_t n = bins_.size();
    if (static_cast<index_t>(reference_observables.size()) != n)
      throw usage_error(who() + ": bind() got " + std::to_string(reference_observables.size()) +
                        " reference yields; it reads " + std::to_string(n) + " bins");
    std::vector<double> ref(reference_observables.begin(), reference_observables.end());
    std::vector<double> inv(static_cast<std::size_t>(n));
    for (index_t b = 0; b < n; ++b) {
      const double r = ref[static_cast<std::size_t>(b)];
      if (!std::isfinite(r))
        throw model_error(who() + ": the reference yield of global bin " + std::to_string(bins_.begin + b) + " is " +
                          std::to_string(r) + "; the initial point must give finite yields");
      // A zero reference fixes the ratio at 1 (rabbit's choice), so that bin's o drops out: its
      // row of D is zero.
      inv[static_cast<std::size_t>(b)] = r != 0.0 ? 1.0 / r : 0.0;
    }
    ref_ = std::move(ref);
    inv_ref_ = std::move(inv);
  }

  double value_grad(std::span<const double> z, std::span<double> grad) const override {
    check_bound();
    const index_t n = bins_.size();
    detail::check_regularizer_shapes(who(), n, z, static_cast<index_t>(grad.size()));
    std::vector<double> r(static_cast<std::size_t>(n)), q(static_cast<std::size_t>(n));
    for (std::size_t b = 0; b < r.size(); ++b) r[b] = ref_[b] != 0.0 ? z[b] * inv_ref_[b] : 1.0;
    apply_laplacian(r.data(), q.data());
    double s = 0.0;
    for (double qb : q) s += qb * qb;
    if (!grad.empty()) {
      // L is symmetric (Neumann boundary), so Lᵀq = Lq.
      apply_laplacian(q.data(), r.data());
      for (std::size_t b = 0; b < r.size(); ++b) grad[b] += 2.0 * weight_ * inv_ref_[b] * r[b];
    }
    return weight_ * s;
  }

  void hessp(std::span<const double> z, ConstBlockView<double> v, BlockView<double> hv) const override {
    check_bound();
    const index_t n = bins_.size();
    detail::check_regularizer_shapes(who(), n, z, 0);
    detail::check_regularizer_block(who(), n, v, hv);
    std::vector<double> t(static_cast<std::size_t>(n)), q(static_cast<std::size_t>(n));
    for (index_t k = 0; k < v.cols; ++k) {
      const double* vk = v.col(k);
      for (index_t b = 0; b < n; ++b) t[static_cast<std::size_t>(b)] = inv_ref_[static_cast<std::size_t>(b)] * vk[b];
      apply_laplacian(t.data(), q.data());
      apply_laplacian(q.data(), t.data());
      double* hk = hv.col(k);
      for (index_t b = 0; b < n; ++b)
        hk[b] += 2.0 * weight_ * inv_ref_[static_cast<std::size_t>(b)] * t[static_cast<std::size_t>(b)];
    }
  }

  /// Adds 2e^{2τ}·D·L·L·D (D = diag(1/o⁰), 0 where o⁰ = 0), one column at a time: O(nbins²), the
  /// size of the output itself.
  void add_hessian(std::span<const double> z, BlockView<double> hess) const override {
    check_bound();
    const index_t n = bins_.size();
    detail::check_regularizer_shapes(who(), n, z, 0);
    detail::check_regularizer_hessian(who(), n, hess);
    std::vector<double> t(static_cast<std::size_t>(n), 0.0), q(static_cast<std::size_t>(n));
    for (index_t j = 0; j < n; ++j) {
      const double dj = inv_ref_[static_cast<std::size_t>(j)];
      if (dj == 0.0) continue;
      std::fill(t.begin(), t.end(), 0.0);
      t[static_cast<std::size_t>(j)] = dj;
      apply_laplacian(t.data(), q.data());
      apply_laplacian(q.data(), t.data());
      double* hj = hess.col(j);
      for (index_t b = 0; b < n; ++b)
        hj[b] += 2.0 * weight_ * inv_ref_[static_cast<std::size_t>(b)] * t[static_cast<std::size_t>(b)];
    }
  }

  /// The grid extents as given.
  const std::vector<index_t>& shape() const { return shape_; }
  /// The strength τ.
  double tau() const { return tau_; }
  /// The weight e^{2τ}.
  double weight() const { return weight_; }
  /// The reference yields o⁰ stored by bind() (empty before).
  const std::vector<double>& reference() const { return ref_; }

 private:
  std::string who() const { return "SVD regularizer '" + name_ + "'"; }

  void check_bound() const {
    if (ref_.empty()) throw usage_error(who() + ": call bind() with the reference yields before evaluating it");
  }

  /// out = L·in, where L sums over the axes the 1-D stencil [1, −2, 1] with the outside neighbour
  /// replaced by the edge cell (width-1 symmetric padding). That is the Neumann Laplacian, which is
  /// symmetric; the derivatives rely on it.
  void apply_laplacian(const double* in, double* out) const {
    const index_t n0 = ext_[0], n1 = ext_[1], n2 = ext_[2];
    const index_t s0 = n1 * n2, s1 = n2;
    for (index_t i0 = 0; i0 < n0; ++i0)
      for (index_t i1 = 0; i1 < n1; ++i1)
        for (index_t i2 = 0; i2 < n2; ++i2) {
          const index_t idx = i0 * s0 + i1 * s1 + i2;
          const double c = in[idx];
          double acc = 0.0;
          if (n0 > 1) acc += ((i0 > 0 ? in[idx - s0] : c) + (i0 + 1 < n0 ? in[idx + s0] : c)) - 2.0 * c;
          if (n1 > 1) acc += ((i1 > 0 ? in[idx - s1] : c) + (i1 + 1 < n1 ? in[idx + s1] : c)) - 2.0 * c;
          if (n2 > 1) acc += ((i2 > 0 ? in[idx - 1] : c) + (i2 + 1 < n2 ? in[idx + 1] : c)) - 2.0 * c;
          out[idx] = acc;
        }
  }

  std::string name_;
  BinRange bins_;
  std::vector<index_t> shape_;
  std::array<index_t, 3> ext_{1, 1, 1};
  double tau_ = 0.0;
  double weight_ = 1.0;
  std::vector<double> ref_;
  std::vector<double> inv_ref_;
};

/// A Gaussian prior on the first or second differences of an ordered list of named parameters:
/// Σ_i d_i²/(2σ²), d_i = x_{i+1} − x_i (order 1) or x_{i+2} − 2x_{i+1} + x_i (order 2).
class SmoothnessPrior final : public ParameterPenalty {
 public:
  /// `parameters`: distinct names in the order the differences follow (at least order + 1 of them);
  /// `sigma` > 0: the width of each difference; `order`: 1 or 2. Throws usage_error naming the argument.
  SmoothnessPrior(std::string name, std::vector<std::string> parameters, double sigma, int order = 1)
      : name_(std::move(name)), parameters_(std::move(parameters)), sigma_(sigma), order_(order) {
    if (order_ != 1 && order_ != 2)
      throw usage_error(who() + ": order is " + std::to_string(order_) + "; use 1 (first differences) or 2 (second differences)");
    if (!(std::isfinite(sigma_) && sigma_ > 0.0))
      throw usage_error(who() + ": sigma is " + std::to_string(sigma_) + "; it must be finite and > 0");
    if (static_cast<int>(parameters_.size()) < order_ + 1)
      throw usage_error(who() + ": parameters has " + std::to_string(parameters_.size()) + " names; order " +
                        std::to_string(order_) + " needs at least " + std::to_string(order_ + 1));
    std::unordered_set<std::string> seen;
    for (const auto& p : parameters_)
      if (!seen.insert(p).second)
        throw usage_error("parameter '" + p + "' appears twice in smoothness prior '" + name_ + "'; list each parameter once");
    inv_var_ = 1.0 / (sigma_ * sigma_);
    if (!std::isfinite(inv_var_))
      throw usage_error(who() + ": sigma is " + std::to_string(sigma_) + "; 1/σ² overflows, use a larger sigma");
  }

  std::string name() const override { return name_; }

  /// Resolves the names against the likelihood's parameters.
  void bind(const std::vector<std::string>& parameter_names) override {
    std::unordered_map<std::string, index_t> where;
    where.reserve(parameter_names.size());
    for (std::size_t i = 0; i < parameter_names.size(); ++i) where.emplace(parameter_names[i], static_cast<index_t>(i));
    std::vector<index_t> idx;
    idx.reserve(parameters_.size());
    for (const auto& p : parameters_) {
      const auto it = where.find(p);
      if (it == where.end())
        throw usage_error("unknown parameter '" + p + "' in smoothness prior '" + name_ +
                          "'; use a name from the likelihood's parameter list");
      idx.push_back(it->second);
    }
    index_ = std::move(idx);
    nparams_ = static_cast<index_t>(parameter_names.size());
  }

  double value_grad(std::span<const double> z, std::span<double> grad) const override {
    check_bound();
    detail::check_regularizer_shapes(who(), nparams_, z, static_cast<index_t>(grad.size()));
    const auto c = coefficients();
    double s = 0.0;
    for (index_t i = 0; i < nterms(); ++i) {
      const double d = difference(z.data(), i);
      s += d * d;
      if (!grad.empty())
        for (std::size_t a = 0; a < c.size(); ++a) grad[static_cast<std::size_t>(at(i, a))] += c[a] * d * inv_var_;
    }
    return 0.5 * inv_var_ * s;
  }

  void hessp(std::span<const double> z, ConstBlockView<double> v, BlockView<double> hv) const override {
    check_bound();
    detail::check_regularizer_shapes(who(), nparams_, z, 0);
    detail::check_regularizer_block(who(), nparams_, v, hv);
    const auto c = coefficients();
    for (index_t k = 0; k < v.cols; ++k) {
      const double* vk = v.col(k);
      double* hk = hv.col(k);
      for (index_t i = 0; i < nterms(); ++i) {
        const double dv = difference(vk, i);
        for (std::size_t a = 0; a < c.size(); ++a) hk[at(i, a)] += c[a] * dv * inv_var_;
      }
    }
  }

  void add_hessian(std::span<const double> z, BlockView<double> hess) const override {
    check_bound();
    detail::check_regularizer_shapes(who(), nparams_, z, 0);
    detail::check_regularizer_hessian(who(), nparams_, hess);
    const auto c = coefficients();
    for (index_t i = 0; i < nterms(); ++i)
      for (std::size_t a = 0; a < c.size(); ++a)
        for (std::size_t b = 0; b < c.size(); ++b) hess(at(i, a), at(i, b)) += c[a] * c[b] * inv_var_;
  }

  /// The parameter names, in difference order.
  const std::vector<std::string>& parameters() const { return parameters_; }
  /// The width σ of each difference.
  double sigma() const { return sigma_; }
  /// 1 (first differences) or 2 (second differences).
  int order() const { return order_; }
  /// The resolved positions of parameters() in the likelihood's parameter vector (empty before bind()).
  const std::vector<index_t>& indices() const { return index_; }

 private:
  std::string who() const { return "smoothness prior '" + name_ + "'"; }

  void check_bound() const {
    if (index_.empty()) throw usage_error(who() + ": call bind() with the parameter names before evaluating it");
  }

  std::span<const double> coefficients() const {
    static constexpr double first[] = {-1.0, 1.0};
    static constexpr double second[] = {1.0, -2.0, 1.0};
    return order_ == 1 ? std::span<const double>(first) : std::span<const double>(second);
  }

  index_t nterms() const { return static_cast<index_t>(index_.size()) - order_; }
  index_t at(index_t term, std::size_t a) const { return index_[static_cast<std::size_t>(term) + a]; }

  /// The i-th difference of the named entries of y (a point or a direction).
  double difference(const double* y, index_t i) const {
    const auto c = coefficients();
    double d = 0.0;
    for (std::size_t a = 0; a < c.size(); ++a) d += c[a] * y[at(i, a)];
    return d;
  }

  std::string name_;
  std::vector<std::string> parameters_;
  double sigma_ = 1.0;
  int order_ = 1;
  double inv_var_ = 1.0;
  std::vector<index_t> index_;
  index_t nparams_ = 0;
};

}  // namespace fitlib
