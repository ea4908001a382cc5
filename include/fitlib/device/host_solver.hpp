// SPDX-License-Identifier: MIT
// HostCholesky: the host policies' dense solver, Eigen's Cholesky on raw column-major data.
#pragma once

#include <Eigen/Cholesky>
#include <Eigen/Core>
#include <optional>
#include <string>

#include "fitlib/config.hpp"
#include "fitlib/core/error.hpp"
#include "fitlib/core/types.hpp"
#include "fitlib/detail/spd_inverse.hpp"

namespace fitlib::detail {

/// A Cholesky factorisation A = L·Lᵀ of a symmetric positive definite matrix, solved against
/// blocks of right-hand sides and inverted: what a device policy offers as `dense_solver`
/// (cuSOLVER's potrf, potrs and potri on a GPU). The interface takes raw column-major views only,
/// never Eigen types.
class HostCholesky {
 public:
  /// Factors A (`[n × n]`, the lower triangle is read); false when A is not positive definite
  /// (a NaN pivot included), and then neither `solve` nor `inverse` may be called.
  bool factor(ConstBlockView<double> a);

  /// X = A⁻¹·B (`[n × nrhs]` each; X may not alias B).
  void solve(ConstBlockView<double> b, BlockView<double> x) const;

  /// X = A⁻¹ (`[n × n]`, both triangles): L⁻¹, then L⁻ᵀ·L⁻¹ (detail::inverse_from_cholesky), symmetric to the bit.
  void inverse(BlockView<double> x) const;

 private:
  std::optional<Eigen::LLT<Eigen::MatrixXd>> llt_;
};

#if FITLIB_DEFINITIONS
FITLIB_PREBUILT_INLINE bool HostCholesky::factor(ConstBlockView<double> a) {
  const Eigen::Map<const Eigen::MatrixXd, 0, Eigen::OuterStride<>> m(a.data, a.rows, a.cols, Eigen::OuterStride<>(a.ld));
  // Constructed only when factorised: a default LLT leaves its status indeterminate, which a
  // later copy or move would read (UBSan reports it).
  if (llt_) llt_->compute(m);
  else llt_.emplace(m);
  return llt_->info() == Eigen::Success;
}

FITLIB_PREBUILT_INLINE void HostCholesky::solve(ConstBlockView<double> b, BlockView<double> x) const {
  if (!llt_ || llt_->info() != Eigen::Success) throw usage_error("HostCholesky::solve without a successful factor()");
  if (b.cols == 1) {  // Eigen's vector path (a triangular solve per factor, not its blocked matrix one)
    Eigen::Map<Eigen::VectorXd>(x.data, x.rows) = llt_->solve(Eigen::Map<const Eigen::VectorXd>(b.data, b.rows));
    return;
  }
  const Eigen::Map<const Eigen::MatrixXd, 0, Eigen::OuterStride<>> bm(b.data, b.rows, b.cols, Eigen::OuterStride<>(b.ld));
  Eigen::Map<Eigen::MatrixXd, 0, Eigen::OuterStride<>> xm(x.data, x.rows, x.cols, Eigen::OuterStride<>(x.ld));
  xm = llt_->solve(bm);
}

FITLIB_PREBUILT_INLINE void HostCholesky::inverse(BlockView<double> x) const {
  if (!llt_ || llt_->info() != Eigen::Success) throw usage_error("HostCholesky::inverse without a successful factor()");
  if (x.rows != llt_->rows() || x.cols != llt_->rows())
    throw usage_error("HostCholesky::inverse: a " + std::to_string(x.rows) + " × " + std::to_string(x.cols) + " block for a factor of " +
                      std::to_string(llt_->rows()));
  Eigen::Map<Eigen::MatrixXd, 0, Eigen::OuterStride<>>(x.data, x.rows, x.cols, Eigen::OuterStride<>(x.ld)) = inverse_from_cholesky(*llt_);
}
#endif

}  // namespace fitlib::detail
