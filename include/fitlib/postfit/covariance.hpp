// SPDX-License-Identifier: MIT
// The postfit covariance: the inverse Hessian at the minimum, with an honest status.
#pragma once

#include <Eigen/Cholesky>
#include <Eigen/Core>
#include <cmath>
#include <limits>
#include <span>

#include "fitlib/config.hpp"
#include "fitlib/core/types.hpp"
#include "fitlib/device/host_solver.hpp"
#include "fitlib/minimize/status.hpp"

namespace fitlib {

namespace detail {
/// C = H⁻¹ for a finite symmetric H that is not positive definite: from LDLᵀ where it is invertible
/// (`not_positive_definite`: C is then not a covariance), else `failed` with C NaN.
CovarianceStatus indefinite_covariance(ConstBlockView<double> H, BlockView<double> cov);
#if FITLIB_DEFINITIONS
FITLIB_PREBUILT_INLINE CovarianceStatus indefinite_covariance(ConstBlockView<double> H, BlockView<double> cov) {
  const index_t n = H.rows;
  Eigen::MatrixXd h(n, n);
  for (index_t j = 0; j < n; ++j)
    for (index_t i = 0; i < n; ++i) h(i, j) = H(i, j);
  Eigen::Map<Eigen::MatrixXd, 0, Eigen::OuterStride<>> C(cov.data, n, n, Eigen::OuterStride<>(cov.ld));
  Eigen::LDLT<Eigen::MatrixXd> ldlt(h);
  const auto d = ldlt.vectorD();
  const double scale = d.cwiseAbs().maxCoeff();
  if (ldlt.info() == Eigen::Success && scale > 0 && d.cwiseAbs().minCoeff() > 1e-14 * scale) {
    C = ldlt.solve(Eigen::MatrixXd::Identity(n, n));
    return CovarianceStatus::not_positive_definite;
  }
  C.setConstant(std::numeric_limits<double>::quiet_NaN());
  return CovarianceStatus::failed;
}
#endif
}  // namespace detail

/// Writes C = H⁻¹ for a symmetric `[n × n]` Hessian (column-major) into `cov`. Positive definite:
/// from `solver`'s Cholesky factor (`accurate`; a policy's `dense_solver`, so that a GPU
/// likelihood's covariance is factored and inverted on its device; the host's HostCholesky takes L⁻¹,
/// then L⁻ᵀ·L⁻¹). Indefinite but invertible: from LDLᵀ on the host, reported as
/// `not_positive_definite` (C is then not a covariance). Singular or non-finite: `failed`, C NaN.
template <class Solver>
CovarianceStatus covariance_from_hessian(ConstBlockView<double> H, BlockView<double> cov, Solver& solver) {
  for (index_t j = 0; j < H.cols; ++j)
    for (index_t i = 0; i < H.rows; ++i)
      if (!std::isfinite(H(i, j))) {
        for (index_t c = 0; c < cov.cols; ++c)
          for (index_t r = 0; r < cov.rows; ++r) cov(r, c) = std::numeric_limits<double>::quiet_NaN();
        return CovarianceStatus::failed;
      }
  if (solver.factor(H)) {
    solver.inverse(cov);
    return CovarianceStatus::accurate;
  }
  return detail::indefinite_covariance(H, cov);
}
/// The same with the host's solver.
inline CovarianceStatus covariance_from_hessian(ConstBlockView<double> H, BlockView<double> cov) {
  detail::HostCholesky solver;
  return covariance_from_hessian(H, cov, solver);
}

}  // namespace fitlib
