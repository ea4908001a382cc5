// SPDX-License-Identifier: MIT
// SteihaugCG: the truncated conjugate-gradient trust-region subproblem (SciPy's trust-ncg).
#pragma once

#include <algorithm>
#include <cmath>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "fitlib/core/types.hpp"
#include "fitlib/minimize/subproblem.hpp"

namespace fitlib {

struct SteihaugCGOptions {
  /// Cap on CG iterations per solve; 0 = none, as SciPy (trust-region.md §4: CG can run past n on
  /// an ill-conditioned Hessian).
  index_t maxiter = 0;

  void validate() const {
    if (maxiter < 0) throw std::invalid_argument("SteihaugCGOptions::maxiter must be ≥ 0 (0 = no cap), got " + std::to_string(maxiter));
  }
};

/// Steihaug–Toint truncated CG as SciPy's trust-ncg (trust-region.md §4), with one deliberate
/// change (§6.8): the model along the CG path is evaluated from the recurrences, using that the
/// residual is r = g + B·z, so negative-curvature and boundary exits, and the outer loop's m(p),
/// cost no Hessian-vector products. Iterates equal SciPy's up to rounding.
class SteihaugCG {
 public:
  static constexpr bool needs_hessian = false;

  SteihaugCG() = default;
  explicit SteihaugCG(SteihaugCGOptions opts) : opts_(opts) { opts_.validate(); }

  void reset(index_t n) {
    for (auto* v : {&g_, &z_, &r_, &d_, &Bd_}) v->assign(static_cast<std::size_t>(n), 0.0);
  }

  void new_iterate(std::span<const double> g, ConstBlockView<double> /*H*/) { std::copy(g.begin(), g.end(), g_.begin()); }

  template <class Hvp>
  SubproblemStep solve(double radius, Hvp&& hvp, std::span<double> p) {
    const std::size_t n = g_.size();
    const double gnorm = std::sqrt(dot(g_, g_));
    const double tol = std::min(0.5, std::sqrt(gnorm)) * gnorm;  // forcing term min(0.5, √‖g‖)·‖g‖
    std::fill(z_.begin(), z_.end(), 0.0);
    std::copy(g_.begin(), g_.end(), r_.begin());
    for (std::size_t i = 0; i < n; ++i) d_[i] = -g_[i];
    double gz = 0, zr = 0;  // gᵀz and zᵀr, for m(z) = gᵀz + ½zᵀBz with B·z = r − g
    SubproblemStep step;
    // Non-finite input would satisfy none of the exits below: report a failure instead.
    auto fail = [&] {
      std::fill(p.begin(), p.end(), 0.0);
      step.failed = true;
      step.scipy_hvps = step.hvps + 1;
      return step;
    };
    if (!std::isfinite(gnorm)) return fail();
    for (index_t it = 0;; ++it) {
      hvp(d_.data(), Bd_.data());
      ++step.hvps;
      const double curvature = dot(d_, Bd_);
      if (!std::isfinite(curvature)) return fail();
      const double gd = dot(g_, d_), rd = dot(r_, d_);
      // The model at z + t·d, from the recurrences: gᵀz + t·gᵀd + ½(zᵀBz + 2t·dᵀBz + t²·dᵀBd).
      auto model_at = [&](double t) { return gz + t * gd + 0.5 * ((zr - gz) + 2 * t * (rd - gd) + t * t * curvature); };
      if (curvature <= 0) {  // non-positive curvature: the better of the two boundary points
        const auto [ta, tb] = boundary_intersections(z_, d_, radius);
        const double ma = model_at(ta), mb = model_at(tb);
        const double t = ma < mb ? ta : tb;  // a tie picks the forward point, as SciPy
        finish(p, t);
        step.hits_boundary = true;
        step.model = std::min(ma, mb);
        step.scipy_hvps = step.hvps + 2 + 1;  // SciPy evaluates m(pa), m(pb) and the outer m(p)
        return step;
      }
      const double rr = dot(r_, r_);
      const double alpha = rr / curvature;
      double zz = 0;  // ‖z + αd‖²
      for (std::size_t i = 0; i < n; ++i) zz += (z_[i] + alpha * d_[i]) * (z_[i] + alpha * d_[i]);
      if (std::sqrt(zz) >= radius || (opts_.maxiter > 0 && it + 1 >= opts_.maxiter)) {
        const double t = std::sqrt(zz) >= radius ? boundary_intersections(z_, d_, radius).upper : alpha;
        step.model = model_at(t);
        step.hits_boundary = std::sqrt(zz) >= radius;
        finish(p, t);
        step.scipy_hvps = step.hvps + 1;
        return step;
      }
      const double model_next = model_at(alpha);
      for (std::size_t i = 0; i < n; ++i) {
        z_[i] += alpha * d_[i];
        r_[i] += alpha * Bd_[i];
      }
      gz = dot(g_, z_);
      zr = dot(z_, r_);
      const double rr_next = dot(r_, r_);
      if (std::sqrt(rr_next) < tol) {
        std::copy(z_.begin(), z_.end(), p.begin());
        step.model = model_next;
        step.scipy_hvps = step.hvps + 1;
        return step;
      }
      const double beta = rr_next / rr;
      for (std::size_t i = 0; i < n; ++i) d_[i] = -r_[i] + beta * d_[i];
    }
  }

 private:
  static double dot(const std::vector<double>& a, const std::vector<double>& b) {
    return detail::dot_sequential(a.data(), b.data(), static_cast<index_t>(a.size()));
  }
  void finish(std::span<double> p, double t) const {
    for (std::size_t i = 0; i < z_.size(); ++i) p[i] = z_[i] + t * d_[i];
  }

  SteihaugCGOptions opts_;
  std::vector<double> g_, z_, r_, d_, Bd_;
};

}  // namespace fitlib
