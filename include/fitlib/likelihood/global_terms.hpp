// SPDX-License-Identifier: MIT
// GlobalTerms: the likelihood's terms of the parameters alone (constraints, POI priors, external terms).
#pragma once

#include <array>
#include <span>
#include <string>
#include <vector>

#include "fitlib/core/types.hpp"
#include "fitlib/likelihood/cell.hpp"
#include "fitlib/model/model.hpp"

namespace fitlib::detail {

/// Everything of the NLL that depends on the parameters only, added once after the shards' data
/// terms; parameter-sized host work whatever the backend.
class GlobalTerms {
 public:
  GlobalTerms() = default;
  /// Resolves the external terms' parameter names with `index_of` (which throws for an unknown one).
  template <class IndexOf>
  GlobalTerms(const Model& m, IndexOf&& index_of, bool linear_poi) : linear_poi_(linear_poi) {
    for (const auto& t : m.external_terms) {
      ResolvedTerm r{&t, {}};
      for (const auto& name : t.parameters) r.index.push_back(index_of(name));
      external_.push_back(std::move(r));
    }
  }

  /// The terms that depend on parameters only, added once after the shards' data terms: the
  /// Gaussian constraints ½·w_s·(θ_s − θ₀_s)², the POI priors ½·w_q·(μ_q − c_q)² with μ = r(x)
  /// (rabbit-likelihood-and-format.md §3.2), and the external terms gᵀx_J + ½·x_Jᵀ·M·x_J (§3.5).
  /// Each output is optional; `hess` holds one `[n × n]` block per column of x.
  template <class Theta0Of>
  void add(const Model& m, ConstBlockView<double> x, ConstBlockView<double> v, std::span<double> f, BlockView<double> g, BlockView<double> hv,
           BlockView<double> hess, Theta0Of&& theta0_of) const {
    const index_t npoi = m.npoi(), n = m.nparams(), ns = m.nsyst(), nv = v.empty() ? 0 : v.cols;
    auto point_of = [&](index_t k) { return x.cols == 1 ? index_t{0} : k; };
    for (index_t j = 0; j < x.cols; ++j) {
      double value = 0;
      const std::vector<double>& theta0 = theta0_of(j);
      for (index_t s = 0; s < ns; ++s) {
        const double d = x(npoi + s, j) - theta0[static_cast<std::size_t>(s)], w = m.constraint_weights[static_cast<std::size_t>(s)];
        value += 0.5 * w * d * d;
        if (!g.empty()) g(npoi + s, j) += w * d;
        if (!hess.empty()) hess(npoi + s, j * n + npoi + s) += w;
      }
      for (index_t q = 0; q < npoi && !m.poi_prior_weights.empty(); ++q) {
        const auto [w, d, d1, d2] = poi_prior(m, q, x(q, j));
        value += 0.5 * w * d * d;
        if (!g.empty()) g(q, j) += w * d * d1;
        if (!hess.empty()) hess(q, j * n + q) += w * (d1 * d1 + d * d2);
      }
      for (const auto& t : external_) {
        for (std::size_t a = 0; a < t.index.size(); ++a) {
          const double xa = x(t.index[a], j);
          if (!t.term->gradient.empty()) {
            value += t.term->gradient[a] * xa;
            if (!g.empty()) g(t.index[a], j) += t.term->gradient[a];
          }
        }
        for (std::size_t e = 0; e < t.term->hessian_values.size(); ++e) {
          const index_t r = t.index[static_cast<std::size_t>(t.term->hessian_rows[e])], c = t.index[static_cast<std::size_t>(t.term->hessian_cols[e])];
          const double mv = t.term->hessian_values[e];
          value += 0.5 * x(r, j) * mv * x(c, j);
          if (!g.empty()) g(r, j) += mv * x(c, j);
          if (!hess.empty()) hess(r, j * n + c) += mv;
        }
      }
      if (!f.empty()) f[static_cast<std::size_t>(j)] += value;
    }
    for (index_t k = 0; k < nv; ++k) {
      for (index_t s = 0; s < ns; ++s) hv(npoi + s, k) += m.constraint_weights[static_cast<std::size_t>(s)] * v(npoi + s, k);
      for (index_t q = 0; q < npoi && !m.poi_prior_weights.empty(); ++q) {
        const auto [w, d, d1, d2] = poi_prior(m, q, x(q, point_of(k)));
        hv(q, k) += w * (d1 * d1 + d * d2) * v(q, k);
      }
      for (const auto& t : external_)
        for (std::size_t e = 0; e < t.term->hessian_values.size(); ++e)
          hv(t.index[static_cast<std::size_t>(t.term->hessian_rows[e])], k) +=
              t.term->hessian_values[e] * v(t.index[static_cast<std::size_t>(t.term->hessian_cols[e])], k);
    }
  }

 private:
  /// POI q's prior weight, μ − c, and dμ/dx, d²μ/dx² at parameter value x.
  std::array<double, 4> poi_prior(const Model& m, index_t q, double xq) const {
    const auto r = poi_strength(xq, linear_poi_);
    return {m.poi_prior_weights[static_cast<std::size_t>(q)], r.r - m.poi_prior_centres[static_cast<std::size_t>(q)], r.dr, r.d2r};
  }

  /// An external term with its parameter names resolved to indices.
  struct ResolvedTerm {
    const ExternalTerm* term;
    std::vector<index_t> index;
  };

  bool linear_poi_ = false;
  std::vector<ResolvedTerm> external_;
};

}  // namespace fitlib::detail
