// SPDX-License-Identifier: MIT
// ParameterColumns: a pass's parameter block as the template products need it, and its partials back.
#pragma once

#include <string>
#include <vector>

#include "fitlib/core/error.hpp"
#include "fitlib/core/types.hpp"
#include "fitlib/likelihood/cell.hpp"
#include "fitlib/likelihood/interpolation.hpp"
#include "fitlib/model/model.hpp"

namespace fitlib::detail {

/// Per process, the signal strength at the model's default point (1 without a POI): the r⁰ by
/// which additive (normal-type) shifts scale (rabbit-likelihood-and-format.md §2.4).
inline std::vector<double> default_strengths(const Model& m) {
  std::vector<double> r0;
  const std::vector<index_t> poi = m.poi_of_process();
  for (const index_t q : poi) r0.push_back(q < 0 ? 1.0 : m.poi_default[static_cast<std::size_t>(q)]);
  return r0;
}

/// Host-side, parameter-sized work of every shard pass, whatever evaluates the bins: the
/// coefficient matrix C `[ncoef × (nx + nv)]` that multiplies the templates (`[θ; g(θ)]` per point,
/// `[v_θ; g'(θ)·v_θ]` per direction), the interpolation's derivatives and the POI strengths; then,
/// from the backward products Kᵀ·U and the POIs' sums, the gradient and HVP columns.
class ParameterColumns {
 public:
  ParameterColumns(const Model& m, bool linear_poi)
      : npoi_(m.npoi()), nsyst_(m.nsyst()), ncoef_(m.ncoef()), symmetric_(m.symmetric), linear_poi_(linear_poi) {}

  index_t npoi() const { return npoi_; }
  index_t nsyst() const { return nsyst_; }
  index_t ncoef() const { return ncoef_; }
  index_t nparams() const { return npoi_ + nsyst_; }
  bool symmetric() const { return symmetric_; }

  /// Fills C, g', g'' and the strengths for the points x and directions v (one per point, or all
  /// at one point when x has one column).
  void prepare(ConstBlockView<double> x, ConstBlockView<double> v) {
    const index_t nx = x.cols, nv = v.empty() ? 0 : v.cols, S = nsyst_, nf = nx + nv;
    if (x.rows != nparams() || (nv > 0 && (v.rows != nparams() || (nv != nx && nx != 1))))
      throw usage_error("parameter block has " + std::to_string(x.rows) + " rows (model has " + std::to_string(nparams()) +
                        " parameters) or its directions do not match its columns");
    grow(coef_, ncoef_ * nf);
    grow(dg_, S * nx);
    grow(d2g_, S * nx);
    grow(strengths_, npoi_ * nx);
    for (index_t j = 0; j < nx; ++j) {
      const double* xj = x.col(j);
      double* c = coef_.data() + j * ncoef_;
      for (index_t q = 0; q < npoi_; ++q) strengths_[static_cast<std::size_t>(q + j * npoi_)] = poi_strength(xj[q], linear_poi_);
      for (index_t s = 0; s < S; ++s) {
        const double theta = xj[npoi_ + s];
        c[s] = theta;
        if (symmetric_) continue;
        const auto a = asymmetric_interpolation(theta);
        c[S + s] = a.g;
        dg_[static_cast<std::size_t>(s + j * S)] = a.dg;
        d2g_[static_cast<std::size_t>(s + j * S)] = a.d2g;
      }
    }
    for (index_t k = 0; k < nv; ++k) {
      const double* vk = v.col(k);
      const index_t j = nx == 1 ? 0 : k;
      double* c = coef_.data() + (nx + k) * ncoef_;
      for (index_t s = 0; s < S; ++s) {
        c[s] = vk[npoi_ + s];
        if (!symmetric_) c[S + s] = dg_[static_cast<std::size_t>(s + j * S)] * vk[npoi_ + s];
      }
    }
  }

  const double* coef() const { return coef_.data(); }
  const double* dg() const { return dg_.data(); }    ///< `[nsyst × nx]`
  const double* d2g() const { return d2g_.data(); }  ///< `[nsyst × nx]`
  const Strength* strengths() const { return strengths_.data(); }

  /// The gradient and HVP columns from the backward products `acc` (`[ncoef × (nu + nv)]`) and
  /// the POIs' sums `poi` (`[npoi × (nu + nv)]`): θ's with the asymmetric interpolation's g' and,
  /// for HVPs, g''·v·(Hᵀu), where `u_column(j)` gives point j's Kᵀu. Overwrites, or adds with `add`.
  template <class UColumn>
  void write_partials(const double* acc, const double* poi, ConstBlockView<double> v, index_t nx, index_t nu, BlockView<double> grad,
                      BlockView<double> hvp, bool add, UColumn&& u_column) const {
    const index_t S = nsyst_, nv = v.empty() ? 0 : v.cols;
    auto put = [add](double& out, double value) { out = add ? out + value : value; };
    for (index_t j = 0; j < nx && !grad.empty(); ++j) {
      double* g = grad.col(j);
      const double* a = acc + j * ncoef_;
      for (index_t q = 0; q < npoi_; ++q) put(g[q], poi[q + j * npoi_]);
      for (index_t s = 0; s < S; ++s) put(g[npoi_ + s], symmetric_ ? a[s] : a[s] + dg_[s + j * S] * a[S + s]);
    }
    for (index_t k = 0; k < nv && !hvp.empty(); ++k) {
      const index_t j = nx == 1 ? 0 : k;
      double* h = hvp.col(k);
      const double* vk = v.col(k);
      const double* a = acc + (nu + k) * ncoef_;
      const double* au = symmetric_ ? nullptr : u_column(j);
      for (index_t q = 0; q < npoi_; ++q) put(h[q], poi[q + (nu + k) * npoi_]);
      for (index_t s = 0; s < S; ++s)
        put(h[npoi_ + s], symmetric_ ? a[s] : a[s] + dg_[s + j * S] * a[S + s] + d2g_[s + j * S] * vk[npoi_ + s] * au[S + s]);
    }
  }

 private:
  template <class T>
  static void grow(std::vector<T>& v, index_t n) {
    if (static_cast<index_t>(v.size()) < n) v.resize(static_cast<std::size_t>(n));
  }

  index_t npoi_, nsyst_, ncoef_;
  bool symmetric_, linear_poi_;
  std::vector<double> coef_, dg_, d2g_;
  std::vector<Strength> strengths_;
};

}  // namespace fitlib::detail
