// SPDX-License-Identifier: MIT
// One routine that checks a likelihood's gradient, dense Hessian and HVPs against finite differences.
#pragma once

#include <catch2/catch.hpp>

#include <random>

#include "random_model.hpp"

namespace fitlib::test {

/// At x: the gradient against differences of the value, the dense Hessian's columns against
/// differences of the gradient (and its symmetry, value and gradient against value_grad), and a
/// block of HVPs from one pass against differences of the gradient and against H·v.
template <class L>
void check_derivatives(L& nll, const std::vector<double>& x, double tol, std::uint64_t seed = 0) {
  const index_t n = nll.size();
  auto value = [&](const std::vector<double>& y) { return std::vector<double>{nll.value(y)}; };
  const auto gradient = gradient_function(nll);
  const auto g = gradient(x);
  auto unit = [&](index_t i) {
    std::vector<double> e(static_cast<std::size_t>(n), 0.0);
    e[static_cast<std::size_t>(i)] = 1.0;
    return e;
  };
  auto step = [&](index_t i) { return 1e-3 * std::max(1.0, std::abs(x[static_cast<std::size_t>(i)])); };

  std::vector<double> g_fd(static_cast<std::size_t>(n));
  for (index_t i = 0; i < n; ++i) g_fd[static_cast<std::size_t>(i)] = central_difference(value, x, unit(i), step(i))[0];
  CHECK(rel_error(g, g_fd) < tol);

  std::vector<double> f(1), gh(static_cast<std::size_t>(n)), H(static_cast<std::size_t>(n * n));
  nll.hessian(ConstBlockView<double>(x.data(), n, 1), f, BlockView<double>(gh.data(), n, 1), BlockView<double>(H.data(), n, n));
  CHECK(gh == g);
  CHECK(f[0] == nll.value(x));
  for (index_t i = 0; i < n; ++i) {
    const auto col_fd = central_difference(gradient, x, unit(i), step(i));
    const std::vector<double> col(H.begin() + i * n, H.begin() + (i + 1) * n);
    INFO("Hessian column " << i);
    CHECK(rel_error(col, col_fd) < tol);
  }
  for (index_t i = 0; i < n; ++i)
    for (index_t j = 0; j < i; ++j) REQUIRE(H[static_cast<std::size_t>(i + j * n)] == H[static_cast<std::size_t>(j + i * n)]);

  const index_t ndir = 3;
  std::vector<double> V(static_cast<std::size_t>(n * ndir)), HV(V.size());
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> gauss;
  for (auto& v : V) v = gauss(rng);
  nll.hessp(ConstBlockView<double>(x.data(), n, 1), ConstBlockView<double>(V.data(), n, ndir), BlockView<double>(HV.data(), n, ndir));
  for (index_t k = 0; k < ndir; ++k) {
    const std::vector<double> v(V.begin() + k * n, V.begin() + (k + 1) * n);
    const std::vector<double> hv(HV.begin() + k * n, HV.begin() + (k + 1) * n);
    double vmax = 0;
    for (double a : v) vmax = std::max(vmax, std::abs(a));
    INFO("direction " << k);
    CHECK(rel_error(hv, central_difference(gradient, x, v, 1e-3 / vmax)) < tol);
    std::vector<double> Hv(static_cast<std::size_t>(n), 0.0);
    for (index_t j = 0; j < n; ++j)
      for (index_t i = 0; i < n; ++i) Hv[static_cast<std::size_t>(i)] += H[static_cast<std::size_t>(i + j * n)] * v[static_cast<std::size_t>(j)];
    CHECK(rel_error(hv, Hv) < 1e-12);
  }
}

}  // namespace fitlib::test
