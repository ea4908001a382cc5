// SPDX-License-Identifier: MIT
// scipy.optimize's rosen_der, rosen_hess and rosen_hess_prod (SciPy 1.10.1), operation for operation.
#pragma once

#include <cstddef>
#include <vector>

namespace fitlib::test {

inline std::vector<double> rosen_grad(const std::vector<double>& x) {
  const std::size_t n = x.size();
  std::vector<double> g(n, 0.0);
  for (std::size_t i = 1; i + 1 < n; ++i)
    g[i] = 200 * (x[i] - x[i - 1] * x[i - 1]) - 400 * (x[i + 1] - x[i] * x[i]) * x[i] - 2 * (1 - x[i]);
  g[0] = -400 * x[0] * (x[1] - x[0] * x[0]) - 2 * (1 - x[0]);
  g[n - 1] = 200 * (x[n - 1] - x[n - 2] * x[n - 2]);
  return g;
}

/// The n × n Hessian (symmetric, so row- and column-major alike).
inline std::vector<double> rosen_hess(const std::vector<double>& x) {
  const std::size_t n = x.size();
  std::vector<double> h(n * n, 0.0);
  for (std::size_t i = 0; i + 1 < n; ++i) {
    h[i * n + i + 1] = -400 * x[i];
    h[(i + 1) * n + i] = -(400 * x[i]);
  }
  h[0] = 1200 * (x[0] * x[0]) - 400 * x[1] + 2;
  for (std::size_t i = 1; i + 1 < n; ++i) h[i * n + i] = 202 + 1200 * (x[i] * x[i]) - 400 * x[i + 1];
  h[(n - 1) * n + n - 1] = 200;
  return h;
}

inline void rosen_hess_prod(const std::vector<double>& x, const double* p, double* y) {
  const std::size_t n = x.size();
  y[0] = (1200 * (x[0] * x[0]) - 400 * x[1] + 2) * p[0] - 400 * x[0] * p[1];
  for (std::size_t i = 1; i + 1 < n; ++i)
    y[i] = -400 * x[i - 1] * p[i - 1] + (202 + 1200 * (x[i] * x[i]) - 400 * x[i + 1]) * p[i] - 400 * x[i] * p[i + 1];
  y[n - 1] = -400 * x[n - 2] * p[n - 2] + 200 * p[n - 1];
}

}  // namespace fitlib::test
