// SPDX-License-Identifier: MIT
// The linear χ² of predicted histograms against the data, with the residuals' full covariance.
#pragma once

#include <Eigen/Cholesky>
#include <Eigen/Core>
#include <Eigen/Eigenvalues>
#include <Eigen/LU>
#include <cmath>
#include <limits>

#include "fitlib/core/types.hpp"

namespace fitlib {

/// A linear χ² (rabbit's, written unless --noChi2): rᵀ·S⁻¹·r over `ndf` bins, r the residuals prediction − data and
/// S their covariance, linearised; NaN where it was not computed or S is not positive definite.
struct LinearChi2 {
  double chi2 = std::numeric_limits<double>::quiet_NaN();
  index_t ndf = 0;  ///< the number of residuals, as rabbit counts them
};

namespace detail {

/// The residuals' covariance in the form a fit's linearisation gives it, V + U·M·Uᵀ with V the data's covariance (a
/// diagonal `v`, or `dense` when that is not empty) and U·M·Uᵀ the predictions' share, of low rank when U has fewer
/// columns than rows; `m_inverse` is M⁻¹ (M is invertible in both uses: I prefit, a 2×2 block matrix postfit).
struct ResidualCovariance {
  Eigen::VectorXd v;
  Eigen::MatrixXd dense, U, m, m_inverse;
};

/// rᵀ·S⁺·r over ndf = rows − `ndf_reduction`: by S's Cholesky factor, or where the residuals lose `ndf_reduction`
/// degrees of freedom (a normalised histogram's sum is fixed) by its pseudo-inverse, eigenvalues below 10·rows·ε of the
/// largest left out (rabbit's pinv, numpy's rcond). NaN where S is not positive (semi)definite.
inline LinearChi2 dense_chi2(const Eigen::VectorXd& r, const Eigen::MatrixXd& S, index_t ndf_reduction) {
  LinearChi2 out{.ndf = r.size() - ndf_reduction};
  if (r.size() == 0) return out;
  if (ndf_reduction == 0) {
    const Eigen::LLT<Eigen::MatrixXd> llt(S);
    if (llt.info() == Eigen::Success) out.chi2 = r.dot(llt.solve(r));
    return out;
  }
  const Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> es(S);
  if (es.info() != Eigen::Success) return out;
  const Eigen::VectorXd& lambda = es.eigenvalues();
  const double cut = 10.0 * static_cast<double>(r.size()) * std::numeric_limits<double>::epsilon() * lambda.cwiseAbs().maxCoeff();
  if (lambda.minCoeff() < -cut) return out;
  const Eigen::VectorXd z = es.eigenvectors().transpose() * r;
  double chi2 = 0;
  for (index_t i = 0; i < r.size(); ++i)
    if (lambda(i) > cut) chi2 += z(i) * z(i) / lambda(i);
  out.chi2 = chi2;
  return out;
}

/// rᵀ·S⁻¹·r for the rows `rows` of S = V + U·M·Uᵀ (their marginal covariance). With a diagonal, positive V and U
/// narrower than the rows, by Woodbury's identity, S⁻¹ = V⁻¹ − V⁻¹·U·(M⁻¹ + Uᵀ·V⁻¹·U)⁻¹·Uᵀ·V⁻¹: rows·k² flops for
/// k columns of U, as a Hessian's; otherwise from S itself, which must then be positive definite. NaN otherwise.
inline LinearChi2 linear_chi2(const Eigen::VectorXd& r, const ResidualCovariance& s, BinRange rows) {
  const index_t nr = rows.size(), k = s.U.cols();
  LinearChi2 out{.ndf = nr};
  if (nr == 0) return out;
  const auto res = r.segment(rows.begin, nr);
  const auto U = s.U.middleRows(rows.begin, nr);
  const auto v = s.v.segment(rows.begin, nr);
  if (s.dense.size() == 0 && k < nr && (v.array() > 0).all()) {
    const Eigen::VectorXd vinv = v.cwiseInverse();
    const Eigen::MatrixXd capacitance = s.m_inverse + U.transpose() * vinv.asDiagonal() * U;
    const Eigen::VectorXd q = U.transpose() * vinv.cwiseProduct(res);
    const double chi2 = res.dot(vinv.cwiseProduct(res)) - q.dot(Eigen::PartialPivLU<Eigen::MatrixXd>(capacitance).solve(q));
    if (std::isfinite(chi2)) out.chi2 = chi2;
    return out;
  }
  Eigen::MatrixXd S = U * s.m * U.transpose();
  if (s.dense.size() != 0)
    S += s.dense.block(rows.begin, rows.begin, nr, nr);
  else
    S.diagonal() += v;
  return dense_chi2(res, S, 0);
}

}  // namespace detail
}  // namespace fitlib
