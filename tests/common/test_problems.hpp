// SPDX-License-Identifier: MIT
// Small objectives for the minimizer tests: Rosenbrock and a dense quadratic, as SciPy defines them.
#pragma once

#include <fitlib/fit.hpp>

#include "scipy_rosen.hpp"

#include <algorithm>
#include <span>
#include <vector>

namespace fitlib::test {

/// scipy.optimize.rosen: Σ 100(x_{i+1} − x_i²)² + (1 − x_i)², with SciPy's own gradient, Hessian and
/// Hessian-vector product (scipy_rosen.hpp).
struct Rosenbrock {
  index_t n;
  index_t size() const { return n; }

  double f_at(const double* x) const {
    double f = 0;
    for (index_t i = 0; i + 1 < n; ++i) f += 100.0 * (x[i + 1] - x[i] * x[i]) * (x[i + 1] - x[i] * x[i]) + (1 - x[i]) * (1 - x[i]);
    return f;
  }
  std::vector<double> at(const double* x) const { return {x, x + n}; }

  void value(ConstBlockView<double> X, std::span<double> f) const {
    for (index_t j = 0; j < X.cols; ++j) f[static_cast<std::size_t>(j)] = f_at(X.col(j));
  }
  void value_grad(ConstBlockView<double> X, std::span<double> f, BlockView<double> G) const {
    for (index_t j = 0; j < X.cols; ++j) {
      if (!f.empty()) f[static_cast<std::size_t>(j)] = f_at(X.col(j));
      const auto g = rosen_grad(at(X.col(j)));
      std::copy(g.begin(), g.end(), G.col(j));
    }
  }
  void hessp(ConstBlockView<double> X, ConstBlockView<double> V, BlockView<double> HV) const {
    for (index_t k = 0; k < V.cols; ++k) rosen_hess_prod(at(X.col(X.cols == 1 ? 0 : k)), V.col(k), HV.col(k));
  }
  void hessian(ConstBlockView<double> X, std::span<double> f, BlockView<double> G, BlockView<double> Hs) const {
    value_grad(X, f, G);
    for (index_t j = 0; j < X.cols; ++j) {
      const auto h = rosen_hess(at(X.col(j)));
      std::copy(h.begin(), h.end(), Hs.col(j * n));
    }
  }
};

/// ½ xᵀA x − bᵀx with a dense symmetric A (column-major).
struct Quadratic {
  index_t n;
  std::vector<double> A, b;
  index_t size() const { return n; }

  void value(ConstBlockView<double> X, std::span<double> f) const {
    std::vector<double> g(static_cast<std::size_t>(n));
    for (index_t j = 0; j < X.cols; ++j) f[static_cast<std::size_t>(j)] = value_grad_at(X.col(j), g.data());
  }
  double value_grad_at(const double* x, double* g) const {
    double f = 0;
    for (index_t i = 0; i < n; ++i) {
      double s = 0;
      for (index_t j = 0; j < n; ++j) s += A[static_cast<std::size_t>(i + j * n)] * x[j];
      g[i] = s - b[static_cast<std::size_t>(i)];
      f += 0.5 * x[i] * s - b[static_cast<std::size_t>(i)] * x[i];
    }
    return f;
  }
  void value_grad(ConstBlockView<double> X, std::span<double> f, BlockView<double> G) const {
    for (index_t j = 0; j < X.cols; ++j) {
      const double v = value_grad_at(X.col(j), G.col(j));
      if (!f.empty()) f[static_cast<std::size_t>(j)] = v;
    }
  }
  void hessp(ConstBlockView<double>, ConstBlockView<double> V, BlockView<double> HV) const {
    for (index_t k = 0; k < V.cols; ++k)
      for (index_t i = 0; i < n; ++i) {
        double s = 0;
        for (index_t j = 0; j < n; ++j) s += A[static_cast<std::size_t>(i + j * n)] * V(j, k);
        HV(i, k) = s;
      }
  }
  void hessian(ConstBlockView<double> X, std::span<double> f, BlockView<double> G, BlockView<double> Hs) const {
    value_grad(X, f, G);
    for (index_t j = 0; j < X.cols; ++j)
      for (index_t c = 0; c < n; ++c)
        for (index_t r = 0; r < n; ++r) Hs(r, j * n + c) = A[static_cast<std::size_t>(r + c * n)];
  }
};

}  // namespace fitlib::test
