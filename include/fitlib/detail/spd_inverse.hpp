// SPDX-License-Identifier: MIT
// The inverse of a symmetric positive definite matrix from its Cholesky factor, in LAPACK's dpotri order.
#pragma once

#include <Eigen/Cholesky>
#include <Eigen/Core>

#include "fitlib/config.hpp"
#include "fitlib/core/types.hpp"

namespace fitlib::detail {

/// X ← L⁻¹ for the lower-triangular L in X's lower triangle (the strictly upper triangle is neither
/// read nor written): [A 0; B D]⁻¹ = [A⁻¹ 0; −D⁻¹·B·A⁻¹ D⁻¹] by halves, n³/3 flops in triangular
/// products, as LAPACK's dtrtri.
void invert_lower_in_place(Eigen::Ref<Eigen::MatrixXd> X);
/// X ← XᵀX in X's lower triangle, for the lower-triangular X there (LAPACK's dlauum):
/// [A 0; B D]ᵀ·[A 0; B D] = [AᵀA + BᵀB ·; DᵀB DᵀD] by halves, n³/3 flops.
void lower_gram_in_place(Eigen::Ref<Eigen::MatrixXd> X);
#if FITLIB_DEFINITIONS
FITLIB_PREBUILT_INLINE void invert_lower_in_place(Eigen::Ref<Eigen::MatrixXd> X) {
  const index_t n = X.rows();
  if (n <= 32) {
    // Right to left: column j of L⁻¹ below the diagonal is −L⁻¹[j+1:, j+1:]·L[j+1:, j] / L[j, j].
    for (index_t j = n - 1; j >= 0; --j) {
      X(j, j) = 1 / X(j, j);
      const index_t m = n - 1 - j;
      if (m == 0) continue;
      const Eigen::VectorXd t = X.bottomRightCorner(m, m).triangularView<Eigen::Lower>() * X.col(j).tail(m);
      X.col(j).tail(m) = -X(j, j) * t;
    }
    return;
  }
  const index_t h = n / 2;
  invert_lower_in_place(X.topLeftCorner(h, h));
  invert_lower_in_place(X.bottomRightCorner(n - h, n - h));
  auto B = X.bottomLeftCorner(n - h, h);
  B = -(X.bottomRightCorner(n - h, n - h).triangularView<Eigen::Lower>() * B);
  B = B * X.topLeftCorner(h, h).triangularView<Eigen::Lower>();
}
FITLIB_PREBUILT_INLINE void lower_gram_in_place(Eigen::Ref<Eigen::MatrixXd> X) {
  const index_t n = X.rows();
  if (n <= 32) {
    const Eigen::MatrixXd L = X.triangularView<Eigen::Lower>();
    X.triangularView<Eigen::Lower>() = L.transpose() * L;
    return;
  }
  const index_t h = n / 2;
  auto A = X.topLeftCorner(h, h);
  auto B = X.bottomLeftCorner(n - h, h);
  auto D = X.bottomRightCorner(n - h, n - h);
  lower_gram_in_place(A);
  A.selfadjointView<Eigen::Lower>().rankUpdate(B.transpose());
  B = D.triangularView<Eigen::Lower>().transpose() * B;
  lower_gram_in_place(D);
}
#endif

/// H⁻¹ from the Cholesky factorisation H = L·Lᵀ: L⁻¹, then L⁻ᵀ·L⁻¹ (LAPACK's dpotri order), 2n³/3 flops
/// where a solve with the identity takes 2n³; symmetric to the bit.
Eigen::MatrixXd inverse_from_cholesky(const Eigen::LLT<Eigen::MatrixXd>& llt);
#if FITLIB_DEFINITIONS
FITLIB_PREBUILT_INLINE Eigen::MatrixXd inverse_from_cholesky(const Eigen::LLT<Eigen::MatrixXd>& llt) {
  Eigen::MatrixXd C = llt.matrixLLT();  // L in the lower triangle
  detail::invert_lower_in_place(C);
  detail::lower_gram_in_place(C);
  const index_t n = C.rows();
  for (index_t j = 1; j < n; ++j)
    for (index_t i = 0; i < j; ++i) C(i, j) = C(j, i);
  return C;
}
#endif

}  // namespace fitlib::detail
