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
#include "fitlib/detail/spd_inverse.hpp"
#include "fitlib/minimize/status.hpp"

namespace fitlib {

/// Writes C = H⁻¹ for a symmetric `[n × n]` Hessian (column-major) into `cov`. Positive definite:
/// from the Cholesky factor, L⁻¹ then L⁻ᵀ·L⁻¹ (`accurate`). Indefinite but invertible: from LDLᵀ, reported as
/// `not_positive_definite` (C is then not a covariance). Singular or non-finite: `failed`, C NaN.
CovarianceStatus covariance_from_hessian(ConstBlockView<double> H, BlockView<double> cov);
#if FITLIB_DEFINITIONS
FITLIB_PREBUILT_INLINE CovarianceStatus covariance_from_hessian(ConstBlockView<double> H, BlockView<double> cov) {
  const index_t n = H.rows;
  Eigen::MatrixXd h(n, n);
  for (index_t j = 0; j < n; ++j)
    for (index_t i = 0; i < n; ++i) h(i, j) = H(i, j);
  Eigen::Map<Eigen::MatrixXd, 0, Eigen::OuterStride<>> C(cov.data, n, n, Eigen::OuterStride<>(cov.ld));
  if (!h.allFinite()) {
    C.setConstant(std::numeric_limits<double>::quiet_NaN());
    return CovarianceStatus::failed;
  }
  Eigen::LLT<Eigen::MatrixXd> llt(h);
  if (llt.info() == Eigen::Success) {
    C = detail::inverse_from_cholesky(llt);
    return CovarianceStatus::accurate;
  }
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

}  // namespace fitlib
