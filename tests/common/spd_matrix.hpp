// SPDX-License-Identifier: MIT
// A random symmetric positive definite matrix of known spectrum, for the tests of factorisations and inverses.
#pragma once

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>

namespace fitlib::test {

/// Q·diag(d)·Qᵀ with Q the orthogonal factor of a standard normal n×n matrix drawn from `rng`, and eigenvalues d
/// spaced evenly in log from 1 to 10^decades; symmetrised, so that it is symmetric to the bit.
inline Eigen::MatrixXd spd_matrix(Eigen::Index n, double decades, std::mt19937_64& rng) {
  std::normal_distribution<double> normal;
  Eigen::MatrixXd a(n, n);
  for (Eigen::Index j = 0; j < n; ++j)
    for (Eigen::Index i = 0; i < n; ++i) a(i, j) = normal(rng);
  const Eigen::MatrixXd q = Eigen::HouseholderQR<Eigen::MatrixXd>(a).householderQ();
  Eigen::VectorXd d(n);
  for (Eigen::Index i = 0; i < n; ++i)
    d[i] = std::pow(10.0, decades * static_cast<double>(i) / std::max(1.0, static_cast<double>(n - 1)));
  const Eigen::MatrixXd h = q * d.asDiagonal() * q.transpose();
  return 0.5 * (h + h.transpose());
}

}  // namespace fitlib::test
