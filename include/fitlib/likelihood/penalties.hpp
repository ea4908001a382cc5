// SPDX-License-Identifier: MIT
// Penalties: a likelihood's parameter and observable penalties, two typed lists evaluated in the order they were added.
#pragma once

#include <Eigen/Core>
#include <algorithm>
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "fitlib/core/types.hpp"
#include "fitlib/likelihood/partial_request.hpp"
#include "fitlib/likelihood/regularizer.hpp"

namespace fitlib::detail {

/// The penalties of a likelihood (regularizer.hpp): parameter penalties, evaluated per column beside
/// the constraints, and observable penalties, whose observables are gathered from the shards that
/// hold their bins and whose derivatives go back through those shards' backward passes. Penalty k
/// is the k-th added, of either kind: replicas scale it by their penalty_scales[k], and its terms
/// are added to the outputs in that order, so a sum never depends on how the kinds interleave.
/// `scale(k, j)` below is penalty k's factor in column j of an evaluation (its replica's).
class Penalties {
 public:
  index_t count() const { return static_cast<index_t>(parameter_.size() + observable_.size()); }
  /// Penalty k's name.
  std::string name(index_t k) const {
    std::string out;
    visit(k, k + 1, [&](const ParameterPenalty& p, std::size_t) { out = p.name(); }, [&](const ObservablePenalty& p, std::size_t) { out = p.name(); });
    return out;
  }
  /// The position of `p` among the penalties, −1 if it was not added here.
  index_t index_of(const ObservablePenalty& p) const {
    for (const auto& e : observable_)
      if (e.term.get() == &p) return static_cast<index_t>(e.index);
    return -1;
  }

  /// Adds a bound penalty as penalty count().
  void add(std::shared_ptr<ParameterPenalty> p) { parameter_.push_back({std::move(p), static_cast<std::size_t>(count())}); }
  void add(std::shared_ptr<ObservablePenalty> p) { observable_.push_back({std::move(p), static_cast<std::size_t>(count())}); }

  /// Every penalty's value, gradient and HVPs, each times its column's scale, added to the outputs.
  template <class Shards, class Scale>
  void add_terms(Shards& shards, ConstBlockView<double> x, ConstBlockView<double> v, std::span<double> f, BlockView<double> g,
                 BlockView<double> hv, const Scale& scale) const {
    visit(0, static_cast<std::size_t>(count()),
          [&](const ParameterPenalty& p, std::size_t k) { add_parameter_terms(p, k, x, v, f, g, hv, scale); },
          [&](const ObservablePenalty& p, std::size_t k) { add_observable_terms(p, k, shards, x, v, f, g, hv, scale, 0); });
  }

  /// Every penalty's dense Hessian per column (`hess`: `[n × n·nx]`): parameter penalties give
  /// theirs; for an observable penalty the columns are its HVPs along every unit vector, from one
  /// batched pass over its bins only, symmetrized. Each times its column's scale.
  template <class Shards, class Scale>
  void add_hessians(Shards& shards, ConstBlockView<double> x, BlockView<double> hess, const Scale& scale) const {
    const index_t n = x.rows;
    for (index_t j = 0; j < x.cols && count() > 0; ++j) {
      BlockView<double> hj = hess.block_cols(j * n, n);
      const ConstBlockView<double> xj = x.block_cols(j, 1);
      const std::span<const double> xs(xj.col(0), static_cast<std::size_t>(n));
      // The result is hj += c·A, with A the penalty's Hessian (its HVPs already carry c).
      auto add_scaled = [&](double c, const Eigen::MatrixXd& A) {
        for (index_t cc = 0; cc < n; ++cc)
          for (index_t rr = 0; rr < n; ++rr) hj(rr, cc) += c == 1.0 ? A(rr, cc) : c * A(rr, cc);
      };
      visit(
          0, static_cast<std::size_t>(count()),
          [&](const ParameterPenalty& p, std::size_t k) {
            const double c = scale(k, j);
            if (c == 1.0) return p.add_hessian(xs, hj);
            Eigen::MatrixXd A = Eigen::MatrixXd::Zero(n, n);
            p.add_hessian(xs, BlockView<double>(A.data(), n, n));
            add_scaled(c, A);
          },
          [&](const ObservablePenalty& p, std::size_t k) {
            Eigen::MatrixXd A = Eigen::MatrixXd::Zero(n, n);
            const Eigen::MatrixXd I = Eigen::MatrixXd::Identity(n, n);
            add_observable_terms(p, k, shards, xj, {I.data(), n, n}, {}, {}, BlockView<double>(A.data(), n, n), scale, j);
            A = (0.5 * (A + A.transpose())).eval();
            add_scaled(1.0, A);
          });
    }
  }

 private:
  template <class T>
  struct Entry {
    std::shared_ptr<T> term;
    std::size_t index;  ///< its position among all penalties
  };
  std::vector<Entry<ParameterPenalty>> parameter_;
  std::vector<Entry<ObservablePenalty>> observable_;

  /// Calls on_parameter(p, k) or on_observable(p, k) for penalties k0 ≤ k < k1, in that order.
  template <class OnParameter, class OnObservable>
  void visit(std::size_t k0, std::size_t k1, OnParameter&& on_parameter, OnObservable&& on_observable) const {
    auto first = [k0](const auto& list) {
      return static_cast<std::size_t>(std::ranges::lower_bound(list, k0, {}, [](const auto& e) { return e.index; }) - list.begin());
    };
    std::size_t a = first(parameter_), b = first(observable_);
    for (std::size_t k = k0; k < k1; ++k) {
      if (a < parameter_.size() && parameter_[a].index == k)
        on_parameter(*parameter_[a++].term, k);
      else
        on_observable(*observable_[b++].term, k);
    }
  }

  /// A parameter penalty's value, gradient and HVPs per column.
  template <class Scale>
  static void add_parameter_terms(const ParameterPenalty& r, std::size_t k, ConstBlockView<double> x, ConstBlockView<double> v,
                                  std::span<double> f, BlockView<double> g, BlockView<double> hv, const Scale& scale) {
    const index_t nx = x.cols, nv = v.empty() ? 0 : v.cols, n = x.rows;
    auto point_of = [&](index_t c) { return nx == 1 ? index_t{0} : c; };
    std::vector<double> tmp;
    // Into the output directly at scale 1; through a buffer otherwise, the output then + scale·buffer.
    auto scaled = [&](double c, double* out, index_t len, auto&& add_into) {
      if (c == 1.0) return add_into(out);
      tmp.assign(static_cast<std::size_t>(len), 0.0);
      const auto result = add_into(out ? tmp.data() : nullptr);
      for (index_t i = 0; out && i < len; ++i) out[i] += c * tmp[static_cast<std::size_t>(i)];
      return c * result;
    };
    for (index_t j = 0; j < nx; ++j) {
      const double value = scaled(scale(k, j), g.empty() ? nullptr : g.col(j), n, [&](double* out) {
        return r.value_grad({x.col(j), static_cast<std::size_t>(n)}, out ? std::span<double>(out, static_cast<std::size_t>(n)) : std::span<double>{});
      });
      if (!f.empty()) f[static_cast<std::size_t>(j)] += value;
    }
    for (index_t c = 0; c < nv; ++c)
      scaled(scale(k, point_of(c)), hv.col(c), n, [&](double* out) {
        r.hessp({x.col(point_of(c)), static_cast<std::size_t>(n)}, v.block_cols(c, 1), BlockView<double>(out, n, 1));
        return 0.0;
      });
  }

  /// An observable penalty's value, gradient and HVPs per column, through its bins' forward and
  /// backward passes. Column j of x is column j0 + j of the evaluation (its replica's scale).
  template <class Shards, class Scale>
  static void add_observable_terms(const ObservablePenalty& r, std::size_t k, Shards& shards, ConstBlockView<double> x,
                                   ConstBlockView<double> v, std::span<double> f, BlockView<double> g, BlockView<double> hv,
                                   const Scale& scale, index_t j0) {
    const index_t nx = x.cols, nv = v.empty() ? 0 : v.cols;
    auto point_of = [&](index_t c) { return nx == 1 ? index_t{0} : c; };
    const BinRange br = r.bins();
    const index_t nb = br.size();
    Eigen::MatrixXd o(nb, nx), dobs(nb, nv), y = Eigen::MatrixXd::Zero(nb, nx), z = Eigen::MatrixXd::Zero(nb, nv);
    shards.observables(br, x, v, o, &dobs);
    for (index_t j = 0; j < nx; ++j) {
      double value = r.value_grad({o.col(j).data(), static_cast<std::size_t>(nb)}, {y.col(j).data(), static_cast<std::size_t>(nb)});
      if (const double c = scale(k, j0 + j); c != 1.0) {
        value *= c;
        y.col(j) *= c;
      }
      if (!f.empty()) f[static_cast<std::size_t>(j)] += value;
    }
    for (index_t c = 0; c < nv; ++c) {
      r.hessp({o.col(point_of(c)).data(), static_cast<std::size_t>(nb)}, {dobs.col(c).data(), nb, 1}, {z.col(c).data(), nb, 1});
      if (const double s = scale(k, j0 + point_of(c)); s != 1.0) z.col(c) *= s;
    }
    if (g.empty() && nv == 0) return;
    shards.backward_observables(br, x, v, g, hv, {y.data(), nb, nx, nb}, {z.data(), nb, nv, nb});
  }
};

}  // namespace fitlib::detail
