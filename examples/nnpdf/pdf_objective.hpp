// SPDX-License-Identifier: MIT
// The χ² of PDF replicas as a fitlib objective (examples/nnpdf): each column of a parameter block is one
// replica's network weights, evaluated with that replica's inputs (preprocessing, data, the Cholesky
// factor of its block of the t0 covariance, positivity multiplier). f = ½‖ρ‖² with the residuals
// ρ = [L⁻¹(FK·xf − d); √λ·min(0, q)] (q: x·q⁺ of u, d, s and x·g at the positivity points), so
// ½χ² plus n3fit's positivity penalty in a quadratic form; the gradient by backpropagation and the
// Hessian-vector products of its Gauss–Newton matrix JᵀJ (positive semi-definite). Each column is
// computed as it is alone, so a ReplicaBatch gives every replica its sequential bits.
#pragma once

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <limits>
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

/// What one replica's objective sees: its preprocessing, the data rows it is fitted to (training or
/// validation) with their values and the lower Cholesky factor of their block of the covariance, and
/// its positivity multiplier λ (0 in validation).
struct ReplicaData {
  Preprocessing pre;
  std::vector<index_t> rows;
  std::vector<double> data;  ///< at `rows`
  Eigen::MatrixXd factor;    ///< L with L·Lᵀ = C[rows, rows]
  double positivity = 0;
};

class PdfObjective : public ColumnObjective<PdfObjective> {
 public:
  /// The positivity observables: x·(q + q̄) for u, d, s (F₂ of one flavour, as NNPDF's F2U, F2D, F2S
  /// positivity sets) and x·g.
  static constexpr int n_positivity = 4;

  /// `fk`: row-major [points × grid.size()·n_evol]; `positivity_x`: where the positivity observables are.
  PdfObjective(std::vector<double> fk, std::size_t npoints, const std::vector<double>& grid, const std::vector<double>& positivity_x)
      : fk_(std::move(fk)), npoints_(npoints), points_(grid, positivity_x) {
    if (fk_.size() != npoints_ * grid.size() * n_evol) throw std::invalid_argument("PdfObjective: the FK table's size does not match its points and grid");
  }

  const Points& points() const { return points_; }

  /// Inputs per replica index (training inputs and validation inputs are separate indices).
  void set_replicas(std::vector<ReplicaData> r) { replicas_ = std::move(r); }
  const ReplicaData& replica(index_t k) const { return replicas_.at(static_cast<std::size_t>(k)); }
  void set_positivity(index_t k, double lambda) { replicas_.at(static_cast<std::size_t>(k)).positivity = lambda; }

  // replica_objective
  index_t replica_count() const { return static_cast<index_t>(replicas_.size()); }

  /// The predictions FK·xf at every point for weights w with preprocessing pre.
  std::vector<double> predictions(std::span<const double> w, const Preprocessing& pre) {
    const PdfReplica& pdf = states().evaluate(w, pre, points_);
    std::vector<double> t(npoints_);
    for (std::size_t i = 0; i < npoints_; ++i) t[i] = prediction(pdf, i);
    return t;
  }

  /// The smallest positivity observable at weights w of replica k (the veto: ≥ −tolerance).
  double least_positivity(index_t k, std::span<const double> w) {
    const PdfReplica& pdf = states().evaluate(w, replica(k).pre, points_);
    double least = std::numeric_limits<double>::infinity();
    for (std::size_t p = positivity_begin(); p < points_.size(); ++p)
      for (int o = 0; o < n_positivity; ++o) least = std::min(least, positivity_observable(pdf, p, o));
    return least;
  }

 private:
  friend class ColumnObjective<PdfObjective>;
  std::size_t positivity_begin() const { return points_.grid + points_.quad; }
  std::size_t grid_columns() const { return points_.grid * n_evol; }

  double prediction(const PdfReplica& pdf, std::size_t i) const {
    const double* row = &fk_[i * grid_columns()];
    double t = 0;
    for (std::size_t a = 0; a < points_.grid; ++a)
      for (int k = 0; k < n_evol; ++k) t += row[a * n_evol + static_cast<std::size_t>(k)] * pdf.xf(a, k);
    return t;
  }

  // Coefficients of x·f_k in positivity observable o: x·q⁺ for u, d, s, and x·g.
  static const std::array<std::array<double, n_evol>, n_positivity>& positivity_rows() {
    static const auto rows = [] {
      const auto r = flavour_rotation();
      return std::array<std::array<double, n_evol>, n_positivity>{r[u_plus], r[d_plus], r[s_plus], {0, 1, 0, 0, 0, 0, 0, 0}};
    }();
    return rows;
  }
  double positivity_observable(const PdfReplica& pdf, std::size_t p, int o) const {
    double q = 0;
    for (int k = 0; k < n_evol; ++k) q += positivity_rows()[static_cast<std::size_t>(o)][static_cast<std::size_t>(k)] * pdf.xf(p, k);
    return q;
  }

  /// f at weights w with replica inputs k; with g, its gradient into g; with v, the
  /// Gauss–Newton product into hv.
  double column(std::span<const double> w, index_t k, std::span<double> g, std::span<const double> v, std::span<double> hv) {
    const ReplicaData& in = replica(k);
    const PdfReplica& pdf = states().evaluate(w, in.pre, points_);
    const auto nr = static_cast<index_t>(in.rows.size());
    // Residuals: whitened data residuals, then the active positivity terms.
    Eigen::VectorXd e(nr);
    for (index_t i = 0; i < nr; ++i) e(i) = prediction(pdf, static_cast<std::size_t>(in.rows[static_cast<std::size_t>(i)])) - in.data[static_cast<std::size_t>(i)];
    const Eigen::VectorXd r = in.factor.triangularView<Eigen::Lower>().solve(e);
    const double s = std::sqrt(in.positivity);
    std::vector<double> rp;
    for (std::size_t p = positivity_begin(); p < points_.size(); ++p)
      for (int o = 0; o < n_positivity; ++o) rp.push_back(s * std::min(0.0, positivity_observable(pdf, p, o)));
    double f = 0.5 * r.squaredNorm();
    for (double q : rp) f += 0.5 * q * q;
    if (g.empty() && v.empty()) return f;

    // The vector the reverse pass takes back: the residuals (gradient Jᵀρ) or J·v (Gauss–Newton JᵀJv).
    Eigen::VectorXd dr = r;
    std::vector<double> dp = rp;
    if (!v.empty()) {
      std::vector<PdfReplica::Row> dxf;
      pdf.tangent(v, dxf);
      Eigen::VectorXd dt(nr);
      for (index_t i = 0; i < nr; ++i) {
        const double* row = &fk_[static_cast<std::size_t>(in.rows[static_cast<std::size_t>(i)]) * grid_columns()];
        double t = 0;
        for (std::size_t a = 0; a < points_.grid; ++a)
          for (int c = 0; c < n_evol; ++c) t += row[a * n_evol + static_cast<std::size_t>(c)] * dxf[a][static_cast<std::size_t>(c)];
        dt(i) = t;
      }
      dr = in.factor.triangularView<Eigen::Lower>().solve(dt);
      std::size_t at = 0;
      for (std::size_t p = positivity_begin(); p < points_.size(); ++p)
        for (int o = 0; o < n_positivity; ++o, ++at) {
          double dq = 0;
          for (int c = 0; c < n_evol; ++c) dq += positivity_rows()[static_cast<std::size_t>(o)][static_cast<std::size_t>(c)] * dxf[p][static_cast<std::size_t>(c)];
          dp[at] = rp[at] < 0 ? s * dq : 0.0;
        }
    }
    // Back: L⁻ᵀ, FKᵀ onto the grid nodes, the positivity rows onto their points, then the network.
    const Eigen::VectorXd bt = in.factor.triangularView<Eigen::Lower>().transpose().solve(dr);
    std::vector<PdfReplica::Row> bar(points_.size(), PdfReplica::Row{});
    for (index_t i = 0; i < nr; ++i) {
      const double* row = &fk_[static_cast<std::size_t>(in.rows[static_cast<std::size_t>(i)]) * grid_columns()];
      for (std::size_t a = 0; a < points_.grid; ++a)
        for (int c = 0; c < n_evol; ++c) bar[a][static_cast<std::size_t>(c)] += row[a * n_evol + static_cast<std::size_t>(c)] * bt(i);
    }
    std::size_t at = 0;
    for (std::size_t p = positivity_begin(); p < points_.size(); ++p)
      for (int o = 0; o < n_positivity; ++o, ++at)
        if (rp[at] < 0)
          for (int c = 0; c < n_evol; ++c) bar[p][static_cast<std::size_t>(c)] += s * dp[at] * positivity_rows()[static_cast<std::size_t>(o)][static_cast<std::size_t>(c)];
    pdf.reverse(bar, v.empty() ? g : hv);
    return f;
  }

  std::vector<double> fk_;
  std::size_t npoints_;
  Points points_;
  std::vector<ReplicaData> replicas_;
};

}  // namespace nnpdf
