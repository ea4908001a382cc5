// SPDX-License-Identifier: MIT
// The χ² of PDF replicas on real DIS data as a fitlib objective (examples/nnpdf/dis_fit.cpp; the real-data
// counterpart of pdf_objective.hpp). Each column of a parameter block is one replica's network weights, evaluated
// with that replica's inputs: its preprocessing, its data rows (training or validation) whitened by the Cholesky
// factor of their block of the covariance, and its penalty multipliers. f = ½‖ρ‖² with the residuals
//   ρ = [ L⁻¹(FK·xf − d) ;  √λ_pos·min(0, O_i − μ_i/λ_pos) ;  λ_int·y_j ]
// where xf is x·f on the FK tables' 50 grid nodes, O the positivity observables (NNPDF's sets at Q² = 5 GeV², FK
// tables on the same nodes) with the multiplier estimates μ ≥ 0 of the constraints O ≥ 0, and y = (x·T3, x·T8) at
// x = 1e-9 (the integrability sets: the network itself there, so that x is one more evaluation point). ½χ² plus
// penalties. The positivity term is the augmented Lagrangian of O ≥ 0 (Nocedal & Wright §17.4, up to a constant in
// x): a quadratic penalty, which a Gauss–Newton model carries, whose shift μ/λ the caller updates between minimiser
// runs by μ ← max(0, μ − λ·O) (dis_fit.cpp: at every growth of λ, a dozen times), so that the observables approach
// O ≥ 0 at a smaller λ than a quadratic penalty alone, which leaves O ≈ −pressure/λ (−5e-4 at λ = 10⁶ here); n3fit's
// penalty is the linear Σ ELU(−λ·O). Its integrability (λ·y)² is ours up to the common ½. The gradient by
// backpropagation and the Hessian-vector products of the Gauss–Newton matrix JᵀJ (positive semi-definite). Each
// column is computed as it is alone, so a ReplicaBatch gives every replica its sequential bits.
#pragma once

#include <Eigen/Cholesky>
#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include <fitlib/core/types.hpp>

#include "column_objective.hpp"
#include "lo_dis.hpp"
#include "pdf_model.hpp"

namespace nnpdf {

using fitlib::BlockView;
using fitlib::ConstBlockView;
using fitlib::index_t;

/// One replica's data term, whitened once: with L·Lᵀ = C[rows, rows], A = L⁻¹·FK[rows, :] and b = L⁻¹·d[rows], so
/// that ½χ² = ½‖A·xf − b‖². An evaluation is then one matrix-vector product (plus its transpose for the gradient)
/// instead of an FK product and a triangular solve of ~1300 rows; a Gauss–Newton product's data term Aᵀ(A·δxf) is
/// one product with the Gram matrix AᵀA, which is 400 × 400 whatever the rows.
struct WhitenedData {
  Eigen::MatrixXd fk;    ///< A: [rows × grid·n_evol]
  Eigen::VectorXd data;  ///< b: [rows]
  Eigen::MatrixXd gram;  ///< AᵀA: [grid·n_evol × grid·n_evol] (empty where no Gauss–Newton product is taken)
  /// ½‖A·xf − b‖² at the xf of the last gradient taken on this data: the training χ² recorded after an accepted step
  /// (the point of its gradient) is then not another product with A. Keyed by xf's bits, so it is what that product makes.
  /// Written by the objective's evaluations: whitened data belongs to one objective (one thread), never shared.
  struct Memo {
    Eigen::VectorXd xf;
    double half_chi2 = 0;
  };
  mutable Memo last_gradient;
};

/// A = L⁻¹·FK[rows, :] and b = L⁻¹·d[rows] for the covariance C (all points), the FK table (all points) and the
/// values d (all points), with AᵀA if `gram`. Throws when C[rows, rows] is not positive definite.
inline std::shared_ptr<const WhitenedData> whiten(const Eigen::MatrixXd& C, const Eigen::MatrixXd& fk, const std::vector<index_t>& rows,
                                                  std::span<const double> d, bool gram) {
  const auto m = static_cast<index_t>(rows.size());
  Eigen::MatrixXd block(m, m);
  auto w = std::make_shared<WhitenedData>();
  w->fk.resize(m, fk.cols());
  w->data.resize(m);
  for (index_t a = 0; a < m; ++a) {
    const index_t i = rows[static_cast<std::size_t>(a)];
    for (index_t b = 0; b < m; ++b) block(a, b) = C(i, rows[static_cast<std::size_t>(b)]);
    w->fk.row(a) = fk.row(i);
    w->data(a) = d[static_cast<std::size_t>(i)];
  }
  const Eigen::LLT<Eigen::MatrixXd> llt(block);
  if (llt.info() != Eigen::Success) throw std::runtime_error("whiten: a block of the covariance is not positive definite");
  llt.matrixL().solveInPlace(w->fk);
  llt.matrixL().solveInPlace(w->data);
  if (gram) w->gram.noalias() = w->fk.transpose() * w->fk;
  return w;
}

/// What one replica's objective sees (training inputs, validation inputs and training inputs without penalties are
/// separate indices; the last two share the whitened data of the first or have their own).
struct DisReplicaInputs {
  Preprocessing pre;
  std::shared_ptr<const WhitenedData> whitened;  ///< null: not set (the inputs are built when the replica starts)
  double positivity = 0;     ///< λ_pos (0: no positivity term)
  Eigen::VectorXd positivity_multipliers;  ///< μ, one per positivity observable (empty: all 0)
  double integrability = 0;  ///< λ_int (0: no integrability term)
};

class DisObjective : public ColumnObjective<DisObjective> {
 public:
  /// `grid`: the FK tables' nodes; `positivity`: [observables × grid.size()·n_evol] on those nodes;
  /// `integrability`: [observables × n_evol], the observables at the one point `integrability_x`.
  DisObjective(const std::vector<double>& grid, Eigen::MatrixXd positivity, Eigen::MatrixXd integrability, double integrability_x)
      : points_(grid, {integrability_x}), positivity_(std::move(positivity)), integrability_(std::move(integrability)) {
    const auto cols = static_cast<index_t>(grid.size() * n_evol);
    if (positivity_.cols() != cols || integrability_.cols() != n_evol)
      throw std::invalid_argument("DisObjective: the positivity table needs grid.size()·8 columns and the integrability table 8");
  }

  const Points& points() const { return points_; }
  index_t grid_columns() const { return static_cast<index_t>(points_.grid * n_evol); }

  /// Inputs per replica index; `resize` keeps the ones there.
  void resize(index_t count) { inputs_.resize(static_cast<std::size_t>(count)); }
  DisReplicaInputs& inputs(index_t k) { return inputs_.at(static_cast<std::size_t>(k)); }
  const DisReplicaInputs& inputs(index_t k) const { return inputs_.at(static_cast<std::size_t>(k)); }

  // replica_objective
  index_t replica_count() const { return static_cast<index_t>(inputs_.size()); }

  /// x·f on the grid nodes (index a·n_evol + k), the positivity observables and the integrability observables of the
  /// replica with weights w and preprocessing pre: what the predictions (FK·xf), the positivity veto and the
  /// integrability penalty are made of.
  Eigen::VectorXd grid_pdf(std::span<const double> w, const Preprocessing& pre) {
    gather(states().evaluate(w, pre, points_), xf_);
    return xf_;
  }
  Eigen::VectorXd positivity_observables(std::span<const double> w, const Preprocessing& pre) { return positivity_ * grid_pdf(w, pre); }
  Eigen::VectorXd integrability_observables(std::span<const double> w, const Preprocessing& pre) {
    const PdfReplica& pdf = states().evaluate(w, pre, points_);
    Eigen::VectorXd y(integrability_.rows());
    for (index_t j = 0; j < y.size(); ++j) y(j) = integrability(pdf, j);
    return y;
  }
  /// The smallest positivity observable (the veto: ≥ −tolerance).
  double least_positivity(std::span<const double> w, const Preprocessing& pre) { return positivity_observables(w, pre).minCoeff(); }
  /// The augmented Lagrangian's update of replica input k's multiplier estimates at weights w, before its λ changes:
  /// μ ← max(0, μ − λ·O(w)). The objective changes with them: the minimiser restarts after it.
  void update_positivity_multipliers(index_t k, std::span<const double> w) { inputs(k).positivity_multipliers = multiplier_estimates(k, w); }
  /// That update's value, max(0, μ − λ·O(w)), without making it: the Lagrange multiplier estimates of replica input
  /// k's positivity constraints at w (what ½χ² would gain per unit of each observable allowed below 0).
  Eigen::VectorXd multiplier_estimates(index_t k, std::span<const double> w) {
    if (w.size() != Network::size) throw std::logic_error("multiplier_estimates: weights of the wrong size (no current point?)");
    const DisReplicaInputs& in = inputs(k);
    const Eigen::VectorXd o = positivity_observables(w, in.pre);
    if (in.positivity_multipliers.size() != o.size())
      throw std::logic_error("multiplier_estimates: the replica's multipliers are not set (one per positivity observable)");
    return (in.positivity_multipliers - in.positivity * o).cwiseMax(0.0);
  }

 private:
  friend class ColumnObjective<DisObjective>;
  /// The integrability point: after the grid nodes and the sum rules' quadrature nodes.
  std::size_t integrability_point() const { return points_.grid + points_.quad; }

  /// The evaluated replica pdf's x·f on the grid nodes into v (index a·n_evol + k).
  void gather(const PdfReplica& pdf, Eigen::VectorXd& v) const {
    v.resize(grid_columns());
    for (std::size_t a = 0; a < points_.grid; ++a)
      for (int k = 0; k < n_evol; ++k) v(static_cast<index_t>(a * n_evol + static_cast<std::size_t>(k))) = pdf.xf(a, k);
  }
  /// Integrability observable j of the evaluated replica pdf.
  double integrability(const PdfReplica& pdf, index_t j) const {
    double y = 0;
    for (int k = 0; k < n_evol; ++k) y += integrability_(j, k) * pdf.xf(integrability_point(), k);
    return y;
  }

  /// f at weights w with replica inputs k; with g, its gradient into g; with v, the Gauss–Newton product into hv
  /// (and then no value: 0).
  double column(std::span<const double> w, index_t k, std::span<double> g, std::span<const double> v, std::span<double> hv) {
    const DisReplicaInputs& in = inputs(k);
    if (!in.whitened) throw std::logic_error("DisObjective: the inputs of replica index " + std::to_string(k) + " are not set");
    const WhitenedData& W = *in.whitened;
    const PdfReplica& pdf = states().evaluate(w, in.pre, points_);
    gather(pdf, xf_);
    // Residuals: the whitened data residuals (not for a product: the Gram matrix carries them), the active positivity
    // terms, the integrability terms.
    double f = 0;
    if (v.empty()) {
      const WhitenedData::Memo& m = W.last_gradient;
      if (g.empty() && m.xf.size() == xf_.size() && std::memcmp(m.xf.data(), xf_.data(), sizeof(double) * static_cast<std::size_t>(xf_.size())) == 0) {
        f = m.half_chi2;
      } else {
        r_.noalias() = W.fk * xf_;
        r_ -= W.data;
        f = 0.5 * r_.squaredNorm();
        if (!g.empty()) W.last_gradient = {xf_, f};
      }
    }
    const double s = std::sqrt(in.positivity), li = in.integrability;
    if (s > 0) {
      rp_.noalias() = positivity_ * xf_;
      if (in.positivity_multipliers.size() == rp_.size()) rp_ -= in.positivity_multipliers / in.positivity;
      else if (in.positivity_multipliers.size() != 0) throw std::logic_error("DisObjective: a replica's positivity multipliers have the wrong size");
      rp_ = s * rp_.cwiseMin(0.0);  // √λ·min(0, O − μ/λ): zero where the constraint is inactive
      f += 0.5 * rp_.squaredNorm();
    }
    ri_.resize(integrability_.rows());
    for (index_t j = 0; j < ri_.size(); ++j) ri_(j) = li * integrability(pdf, j);
    if (li > 0) f += 0.5 * ri_.squaredNorm();
    if (g.empty() && v.empty()) return f;
    if (!v.empty()) f = 0;

    // The vector the reverse pass takes back: the residuals (gradient Jᵀρ) or J·v (Gauss–Newton JᵀJ·v), with the
    // positivity rows that are inactive (O ≥ μ/λ, ρ = 0) left out of J; the data rows' share of Jᵀ(J·v) is AᵀA·δxf.
    const Eigen::VectorXd* dp = &rp_;
    const Eigen::VectorXd* di = &ri_;
    if (!v.empty()) {
      pdf.tangent(v, dxf_rows_);
      dxf_.resize(grid_columns());
      for (std::size_t a = 0; a < points_.grid; ++a)
        for (int c = 0; c < n_evol; ++c) dxf_(static_cast<index_t>(a * n_evol + static_cast<std::size_t>(c))) = dxf_rows_[a][static_cast<std::size_t>(c)];
      if (W.gram.rows() != dxf_.size()) throw std::logic_error("DisObjective: a Gauss–Newton product on inputs whitened without AᵀA");
      bar_grid_.noalias() = W.gram * dxf_;
      if (s > 0) {
        jp_.noalias() = positivity_ * dxf_;
        for (index_t i = 0; i < jp_.size(); ++i) jp_(i) = rp_(i) < 0 ? s * jp_(i) : 0.0;
        dp = &jp_;
      }
      ji_.resize(integrability_.rows());
      for (index_t j = 0; j < ji_.size(); ++j) {
        double t = 0;
        for (int c = 0; c < n_evol; ++c) t += integrability_(j, c) * dxf_rows_[integrability_point()][static_cast<std::size_t>(c)];
        ji_(j) = li * t;
      }
      di = &ji_;
    }
    // Back: Aᵀ (made above for a product) and the positivity rows onto the grid nodes, the integrability rows onto
    // their point, then the network.
    if (v.empty()) bar_grid_.noalias() = W.fk.transpose() * r_;
    if (s > 0) bar_grid_.noalias() += positivity_.transpose() * (s * (*dp));  // ∂ρ_i/∂O_i = √λ where active (dp is 0 elsewhere)
    bar_.assign(points_.size(), PdfReplica::Row{});
    for (std::size_t a = 0; a < points_.grid; ++a)
      for (int c = 0; c < n_evol; ++c) bar_[a][static_cast<std::size_t>(c)] = bar_grid_(static_cast<index_t>(a * n_evol + static_cast<std::size_t>(c)));
    if (li > 0)
      for (index_t j = 0; j < di->size(); ++j)
        for (int c = 0; c < n_evol; ++c) bar_[integrability_point()][static_cast<std::size_t>(c)] += li * (*di)(j) * integrability_(j, c);
    pdf.reverse(bar_, v.empty() ? g : hv);
    return f;
  }

  Points points_;
  Eigen::MatrixXd positivity_, integrability_;
  std::vector<DisReplicaInputs> inputs_;
  // Scratch, reused by every column (its values never carry from one column to the next).
  Eigen::VectorXd xf_, dxf_, r_, rp_, ri_, jp_, ji_, bar_grid_;
  std::vector<PdfReplica::Row> dxf_rows_, bar_;
};

}  // namespace nnpdf
