// SPDX-License-Identifier: MIT
// The derivative checks of the NNPDF examples' objectives (closure.cpp, dis_fit.cpp): the gradient against central
// differences, and the Gauss–Newton products' symmetry and positivity, on random directions.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <vector>

#include <fitlib/core/types.hpp>
#include <fitlib/replica/random.hpp>

namespace nnpdf {

/// What check_derivatives measured.
struct DerivativeCheck {
  double gradient = 0;         ///< the largest relative error of gᵀu against central differences of f along u
  double asymmetry = 0;        ///< the largest relative |vᵀ(Hu) − uᵀ(Hv)| of the Gauss–Newton products
  double least_curvature = 0;  ///< min(0, uᵀHu): negative where the products are not positive semi-definite
};

/// The gradient of f's one column at w against central differences (step 10⁻⁶) along 3 random directions u, and
/// the products H·u, H·v on 3 random pairs (u, v): symmetric and positive semi-definite.
template <class F>
DerivativeCheck check_derivatives(F& f, const std::vector<double>& w) {
  using fitlib::BlockView;
  using fitlib::ConstBlockView;
  const fitlib::index_t n = f.size();
  const std::size_t m = w.size();
  if (static_cast<fitlib::index_t>(m) != n) throw std::invalid_argument("check_derivatives: the weights' size is not the objective's");
  const auto dot = [m](const std::vector<double>& a, const std::vector<double>& b) {
    double s = 0;
    for (std::size_t i = 0; i < m; ++i) s += a[i] * b[i];
    return s;
  };
  std::vector<double> g(m), fw(1);
  f.value_grad(ConstBlockView<double>(w.data(), n, 1), fw, BlockView<double>(g.data(), n, 1));
  DerivativeCheck c;
  for (std::uint64_t k = 0; k < 3; ++k) {
    std::vector<double> u(m), v(m), wp(w), wm(w), Hu(m), Hv(m);
    for (std::size_t i = 0; i < m; ++i) {
      u[i] = fitlib::RandomStream(99, k, fitlib::Stream::user, i).normal();
      v[i] = fitlib::RandomStream(98, k, fitlib::Stream::user, i).normal();
    }
    const double eps = 1e-6;
    for (std::size_t i = 0; i < m; ++i) wp[i] += eps * u[i], wm[i] -= eps * u[i];
    double fp, fm;
    f.value(ConstBlockView<double>(wp.data(), n, 1), std::span(&fp, 1));
    f.value(ConstBlockView<double>(wm.data(), n, 1), std::span(&fm, 1));
    const double gu = dot(g, u);
    // Each keeps a NaN (std::max would drop it): a NaN derivative fails the checks.
    const auto larger = [](double& m, double e) { m = !(e <= m) ? e : m; };
    larger(c.gradient, std::abs((fp - fm) / (2 * eps) - gu) / std::abs(gu));
    f.hessp(ConstBlockView<double>(w.data(), n, 1), ConstBlockView<double>(u.data(), n, 1), BlockView<double>(Hu.data(), n, 1));
    f.hessp(ConstBlockView<double>(w.data(), n, 1), ConstBlockView<double>(v.data(), n, 1), BlockView<double>(Hv.data(), n, 1));
    const double vHu = dot(v, Hu), uHv = dot(u, Hv);
    larger(c.asymmetry, std::abs(vHu - uHv) / std::max(std::abs(vHu), 1e-300));
    const double uHu = dot(u, Hu);
    c.least_curvature = !(uHu >= c.least_curvature) ? uHu : c.least_curvature;
  }
  return c;
}

}  // namespace nnpdf
