// SPDX-License-Identifier: MIT
// PositivityPenalty: a smooth penalty on negative observables (masked-channel yields), and its veto.
#pragma once

#include <algorithm>
#include <cmath>
#include <span>
#include <string>
#include <vector>

#include "fitlib/core/error.hpp"
#include "fitlib/likelihood/regularizer.hpp"

namespace fitlib {

/// ½·Σ_b (min(0, o_b)/s_b)² over the observables o_b = Σ_p ν_bp of a global bin range (a masked
/// channel whose yields must stay physical), with s_b = |o⁰_b| the yields at the default point
/// (1 where that is 0), so every bin counts in relative units. It is C¹ with a piecewise
/// constant curvature, so a trust-region method sees an ordinary quadratic penalty; its weight is
/// the replica's penalty scale, which replica training grows on a schedule (n3fit's Lagrange
/// multiplier, n3fit-parallel-replicas.md §3.2, §3.4, made smooth for a second-order method).
class PositivityPenalty final : public ObservablePenalty {
 public:
  PositivityPenalty(std::string name, BinRange bins) : name_(std::move(name)), bins_(bins) {
    if (bins_.begin < 0 || bins_.end <= bins_.begin)
      throw usage_error("positivity penalty '" + name_ + "': bins [" + std::to_string(bins_.begin) + ", " + std::to_string(bins_.end) +
                        ") is empty or negative; give a non-empty range of global bins");
  }

  std::string name() const override { return name_; }
  BinRange bins() const override { return bins_; }

  void bind(std::span<const double> reference) override {
    if (static_cast<index_t>(reference.size()) != bins_.size())
      throw usage_error("positivity penalty '" + name_ + "': " + std::to_string(reference.size()) + " reference yields for " +
                        std::to_string(bins_.size()) + " bins");
    inv_scale2_.resize(reference.size());
    for (std::size_t b = 0; b < reference.size(); ++b) {
      const double s = std::isfinite(reference[b]) && reference[b] != 0 ? std::abs(reference[b]) : 1.0;
      inv_scale2_[b] = 1.0 / (s * s);
    }
  }

  double value_grad(std::span<const double> o, std::span<double> grad) const override {
    check(o);
    double v = 0;
    for (std::size_t b = 0; b < o.size(); ++b) {
      const double neg = std::min(0.0, o[b]);
      v += 0.5 * neg * neg * inv_scale2_[b];
      if (!grad.empty()) grad[b] += neg * inv_scale2_[b];
    }
    return v;
  }

  void hessp(std::span<const double> o, ConstBlockView<double> v, BlockView<double> hv) const override {
    check(o);
    for (index_t k = 0; k < v.cols; ++k)
      for (std::size_t b = 0; b < o.size(); ++b)
        if (o[b] < 0) hv(static_cast<index_t>(b), k) += inv_scale2_[b] * v(static_cast<index_t>(b), k);
  }

  void add_hessian(std::span<const double> o, BlockView<double> hess) const override {
    check(o);
    for (std::size_t b = 0; b < o.size(); ++b)
      if (o[b] < 0) hess(static_cast<index_t>(b), static_cast<index_t>(b)) += inv_scale2_[b];
  }

  /// The veto: every observable at or above −tolerance·s_b.
  bool positive(std::span<const double> o, double tolerance) const {
    check(o);
    for (std::size_t b = 0; b < o.size(); ++b)
      if (o[b] < -tolerance / std::sqrt(inv_scale2_[b])) return false;
    return true;
  }

 private:
  void check(std::span<const double> o) const {
    if (inv_scale2_.empty()) throw usage_error("positivity penalty '" + name_ + "' is used before a likelihood bound it (add_regularizer)");
    if (static_cast<index_t>(o.size()) != bins_.size())
      throw usage_error("positivity penalty '" + name_ + "': evaluated on " + std::to_string(o.size()) + " observables, expects " +
                        std::to_string(bins_.size()));
  }

  std::string name_;
  BinRange bins_;
  std::vector<double> inv_scale2_;
};

}  // namespace fitlib
