// SPDX-License-Identifier: MIT
// The linear χ² of predicted histograms against the data, with the residuals' full covariance.
#pragma once

#include <Eigen/Cholesky>
#include <Eigen/Core>
#include <Eigen/Eigenvalues>
#include <Eigen/LU>
#include <cmath>
#include <limits>
#include <vector>

#include "fitlib/core/types.hpp"

namespace fitlib {

/// A linear χ² (rabbit's, written unless --noChi2): rᵀ·S⁻¹·r over `ndf` bins, r the residuals prediction − data and
/// S their covariance, linearised; NaN where it was not computed or S is not positive definite.
struct LinearChi2 {
  double chi2 = std::numeric_limits<double>::quiet_NaN();
  index_t ndf = 0;  ///< the number of residuals, as rabbit counts them
};

namespace detail {

/// A block of U, diag(d)·J·T: the rows of J scaled by d (empty: by 1) and its columns combined by T (empty: I); or,
/// where the block is no such product, its columns themselves, X (`[rows × k]`; d and T unused).
struct ScaledBlock {
  Eigen::VectorXd d;
  Eigen::MatrixXd T, X;
};

/// The residuals' covariance in the form a fit's linearisation gives it, V + U·M·Uᵀ with V the data's covariance (a
/// diagonal `v`, or `dense` when that is not empty) and U·M·Uᵀ the predictions' share: U = [diag(d₁)·J·T₁, …] in
/// `blocks` over the rows of the yields' Jacobian J (prefit one block, J·C₀^½; postfit two, J·C and E·J, or with
/// bin-by-bin statistics a given X for the second), of low rank
/// when it has fewer columns than rows; `m_inverse` is M⁻¹ (M is invertible in both uses: I prefit, a 2×2 block
/// matrix postfit).
struct ResidualCovariance {
  Eigen::VectorXd v;
  Eigen::MatrixXd dense, J;
  std::vector<ScaledBlock> blocks;
  Eigen::MatrixXd m, m_inverse;

  /// The columns of U, or of block `b`, at the rows `rows`.
  Eigen::MatrixXd block(std::size_t b, BinRange rows) const {
    const ScaledBlock& k = blocks[b];
    if (k.X.size() != 0) return k.X.middleRows(rows.begin, rows.size());
    Eigen::MatrixXd x = J.middleRows(rows.begin, rows.size());
    if (k.d.size() != 0) x = k.d.segment(rows.begin, rows.size()).asDiagonal() * x;
    return k.T.size() != 0 ? Eigen::MatrixXd(x * k.T) : x;
  }
  Eigen::MatrixXd U(BinRange rows) const {
    Eigen::MatrixXd u(rows.size(), columns());
    index_t at = 0;
    for (std::size_t b = 0; b < blocks.size(); ++b) {
      const Eigen::MatrixXd x = block(b, rows);
      u.middleCols(at, x.cols()) = x;
      at += x.cols();
    }
    return u;
  }
  index_t columns() const {
    index_t k = 0;
    for (const ScaledBlock& b : blocks) k += b.X.size() != 0 ? b.X.cols() : b.T.size() != 0 ? b.T.cols() : J.cols();
    return k;
  }
};

/// Jᵀ·diag(w)·J (`[n × n]`): for weights of one sign by a rank update of the rows scaled by √|w| (rows·n² flops).
inline Eigen::MatrixXd weighted_gram(const Eigen::Ref<const Eigen::MatrixXd>& J, const Eigen::VectorXd& w) {
  const bool nonnegative = (w.array() >= 0).all();
  if (!nonnegative && !(w.array() <= 0).all()) return J.transpose() * w.asDiagonal() * J;  // mixed signs: a full product
  const double sign = nonnegative ? 1.0 : -1.0;
  const Eigen::MatrixXd scaled = (sign * w).cwiseSqrt().asDiagonal() * J;
  Eigen::MatrixXd g = Eigen::MatrixXd::Zero(J.cols(), J.cols());
  g.selfadjointView<Eigen::Lower>().rankUpdate(scaled.transpose(), sign);
  return g.selfadjointView<Eigen::Lower>();
}

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
/// narrower than the rows, by Woodbury's identity, S⁻¹ = V⁻¹ − V⁻¹·U·(M⁻¹ + Uᵀ·V⁻¹·U)⁻¹·Uᵀ·V⁻¹, where each block of
/// Uᵀ·V⁻¹·U is T_iᵀ·(Jᵀ·diag(d_i·d_j/v)·J)·T_j: a Gram matrix of J per pair of blocks (rows·n² flops, a fraction of a
/// Hessian's), U itself never formed (a block given by its columns X enters by its own products); otherwise from S
/// itself, which must then be positive definite. NaN otherwise.
inline LinearChi2 linear_chi2(const Eigen::VectorXd& r, const ResidualCovariance& s, BinRange rows) {
  const index_t nr = rows.size(), k = s.columns();
  LinearChi2 out{.ndf = nr};
  if (nr == 0) return out;
  const Eigen::VectorXd res = r.segment(rows.begin, nr), v = s.v.segment(rows.begin, nr);
  if (s.dense.size() == 0 && k < nr && (v.array() > 0).all()) {
    const auto J = s.J.middleRows(rows.begin, nr);
    const Eigen::VectorXd vinv = v.cwiseInverse();
    const auto weight = [&](std::size_t b) {
      return s.blocks[b].d.size() != 0 ? Eigen::VectorXd(s.blocks[b].d.segment(rows.begin, nr)) : Eigen::VectorXd::Ones(nr);
    };
    const auto right = [&](std::size_t b, const Eigen::MatrixXd& x) { return s.blocks[b].T.size() != 0 ? Eigen::MatrixXd(x * s.blocks[b].T) : x; };
    const auto left = [&](std::size_t b, const Eigen::MatrixXd& x) {
      return s.blocks[b].T.size() != 0 ? Eigen::MatrixXd(s.blocks[b].T.transpose() * x) : x;
    };
    Eigen::MatrixXd capacitance = s.m_inverse;
    Eigen::VectorXd q(k);
    const auto given = [&](std::size_t b) { return s.blocks[b].X.size() != 0; };
    for (std::size_t i = 0, at = 0; i < s.blocks.size(); ++i) {
      const Eigen::VectorXd di = weight(i);
      const Eigen::VectorXd qi = given(i) ? Eigen::VectorXd(s.block(i, rows).transpose() * vinv.cwiseProduct(res))
                                          : Eigen::VectorXd(left(i, J.transpose() * di.cwiseProduct(vinv).cwiseProduct(res)));
      q.segment(static_cast<index_t>(at), qi.size()) = qi;
      for (std::size_t j = i, bt = at; j < s.blocks.size(); ++j) {
        // a given block with itself by a rank update; with a product of J before J's own T (n columns, not T's)
        const auto rows_of = [&](std::size_t b) -> Eigen::MatrixXd { return given(b) ? s.block(b, rows) : weight(b).asDiagonal() * J; };
        const Eigen::MatrixXd g = !given(i) && !given(j) ? left(i, right(j, weighted_gram(J, di.cwiseProduct(weight(j)).cwiseProduct(vinv))))
                                  : i == j               ? weighted_gram(s.block(i, rows), vinv)
                                                         : left(i, right(j, Eigen::MatrixXd(rows_of(i).transpose() * vinv.asDiagonal() * rows_of(j))));
        capacitance.block(static_cast<index_t>(at), static_cast<index_t>(bt), g.rows(), g.cols()) += g;
        if (j != i) capacitance.block(static_cast<index_t>(bt), static_cast<index_t>(at), g.cols(), g.rows()) += g.transpose();
        bt += static_cast<std::size_t>(g.cols());
      }
      at += static_cast<std::size_t>(qi.size());
    }
    const double chi2 = res.dot(vinv.cwiseProduct(res)) - q.dot(Eigen::PartialPivLU<Eigen::MatrixXd>(capacitance).solve(q));
    if (std::isfinite(chi2) && chi2 >= 0) out.chi2 = chi2;  // (a negative one: S is not positive definite)
    return out;
  }
  const Eigen::MatrixXd U = s.U(rows);
  Eigen::MatrixXd S = U * s.m * U.transpose();
  if (s.dense.size() != 0)
    S += s.dense.block(rows.begin, rows.begin, nr, nr);
  else
    S.diagonal() += v;
  return dense_chi2(res, S, 0);
}

}  // namespace detail
}  // namespace fitlib
