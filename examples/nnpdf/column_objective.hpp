// SPDX-License-Identifier: MIT
// The fitlib objective interface of the NNPDF examples' objectives (pdf_objective.hpp, dis_objective.hpp), whose
// parameter block's columns are each one replica's network weights, computed one at a time and each as it is alone,
// so that a ReplicaBatch gives every replica its sequential bits.
#pragma once

#include <span>
#include <vector>

#include <fitlib/core/types.hpp>

#include "pdf_model.hpp"

namespace nnpdf {

/// value, value_grad and the Gauss–Newton hessp of `Derived`, from its
///   double column(std::span<const double> w, index_t k, std::span<double> g, std::span<const double> v, std::span<double> hv)
/// (f at weights w with replica inputs k; with g its gradient into g, with v the Gauss–Newton product into hv), with
/// the replica inputs of each column as `use_replicas` chose them (replica_objective), else the column's own index.
/// Derived evaluates the network with `states()` (PdfStates: a replica's Hessian-vector products after its gradient
/// at the same weights, and its validation loss there, find their forward pass made).
template <class Derived>
class ColumnObjective {
 public:
  fitlib::index_t size() const { return static_cast<fitlib::index_t>(Network::size); }

  // replica_objective (with Derived's replica_count)
  void use_replicas(std::span<const fitlib::index_t> r) { use_.assign(r.begin(), r.end()); }

  // objective
  void value(fitlib::ConstBlockView<double> x, std::span<double> f) {
    states_.keep(2 * static_cast<std::size_t>(x.cols));
    for (fitlib::index_t j = 0; j < x.cols; ++j) f[static_cast<std::size_t>(j)] = self().column(weights(x, j), inputs_of(j), {}, {}, {});
  }
  void value_grad(fitlib::ConstBlockView<double> x, std::span<double> f, fitlib::BlockView<double> g) {
    states_.keep(2 * static_cast<std::size_t>(x.cols));
    for (fitlib::index_t j = 0; j < x.cols; ++j)
      f[static_cast<std::size_t>(j)] = self().column(weights(x, j), inputs_of(j), weights(g, j), {}, {});
  }
  /// Gauss–Newton matrix times v: per column, or every v_k at x's one column.
  void hessp(fitlib::ConstBlockView<double> x, fitlib::ConstBlockView<double> v, fitlib::BlockView<double> hv) {
    states_.keep(2 * static_cast<std::size_t>(x.cols));
    for (fitlib::index_t k = 0; k < v.cols; ++k) {
      const fitlib::index_t j = x.cols == 1 ? 0 : k;
      self().column(weights(x, j), inputs_of(j), {}, weights(v, k), weights(hv, k));
    }
  }

 protected:
  PdfStates& states() { return states_; }

 private:
  Derived& self() { return static_cast<Derived&>(*this); }
  static std::span<const double> weights(fitlib::ConstBlockView<double> x, fitlib::index_t j) { return {x.col(j), Network::size}; }
  static std::span<double> weights(fitlib::BlockView<double> x, fitlib::index_t j) { return {x.col(j), Network::size}; }
  /// The replica inputs of column j: use_replicas' choice, else the column's own index.
  fitlib::index_t inputs_of(fitlib::index_t j) const {
    const fitlib::index_t k = use_.empty() ? -1 : use_[static_cast<std::size_t>(j)];
    return k < 0 ? j : k;
  }

  std::vector<fitlib::index_t> use_;
  PdfStates states_;
};

}  // namespace nnpdf
