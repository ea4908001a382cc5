// SPDX-License-Identifier: MIT
// ForwardCache: the host shard's forward products L = K·x of recent points, reused bitwise by later passes.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "fitlib/core/types.hpp"

namespace fitlib::detail {

/// The forward products of the points of the host shard's last data passes, so that a pass at a
/// point already seen multiplies only its new columns: an HVP at the iterate needs only its
/// direction's product, the iterate's own was computed with its gradient.
///
/// Invariant (why reuse is exact): a column's L = K·x is bitwise independent of the other columns
/// of its pass, of their number and of the pass's kind (detail/lanes.hpp, "a result's arithmetic
/// depends only on n"), so a cached column is bitwise the one the pass would compute. Points are
/// matched by the bits of their parameters; the Kᵀu kept with asymmetric templates depends on the
/// data too and is used only for the same data slot and data version (`invalidate()` whenever the
/// data or the β treatment change). A backend whose products depend on the batch (a GEMM) must not
/// use this cache. The cache holds the last pass with directions and the last without, which is
/// what pooled replicas alternating between HVPs and new iterates ask for (the batch scheduler
/// orders HVPs first, replica_batch.hpp, to find them: an optimisation, never a condition).
class ForwardCache {
 public:
  ForwardCache(index_t nprocs, index_t ncoef, index_t nparams, index_t nbins, bool symmetric)
      : P_(nprocs), ncoef_(ncoef), nparams_(nparams), nbins_(nbins), symmetric_(symmetric) {}

  /// The data or the β treatment changed: no cached Kᵀu is valid any more.
  void invalidate() { ++data_version_; }
  /// The buffer a gathered plan's forward pass writes (`[P × columns]`).
  double* gathered() { return cell_Lf_.data(); }

  /// What the forward pass multiplies: the coefficient columns and their count, and whether they
  /// are a gathered subset (the points not cached, then the directions) rather than coef_ itself;
  /// `cached_u`: every point's Kᵀu is cached for this pass's data.
  struct Plan {
    const double* coef;
    index_t columns;
    bool gathered, cached_u;
  };

  /// Point j's cached Kᵀu (valid when the plan says cached_u).
  const double* u_column(index_t j) const {
    const auto [pp, c] = cached_point(hit_[static_cast<std::size_t>(j)]);
    return pp->u.data() + c * ncoef_;
  }

  /// Looks every point of x up among the cached ones (bitwise equal parameters), gathers the
  /// coefficient columns still to multiply and sizes the next cache for the points of this pass.
  Plan plan(ConstBlockView<double> x, index_t nv, std::span<const index_t> slots, const double* coef) {
    const index_t nx = x.cols, n = nparams_;
    auto same = [n](const double* a, const double* b) {
      return std::equal(a, a + n, b, [](double u, double w) { return std::bit_cast<std::uint64_t>(u) == std::bit_cast<std::uint64_t>(w); });
    };
    auto slot_of = [&](index_t j) { return slots.empty() ? index_t{0} : slots[static_cast<std::size_t>(j)]; };
    hit_.assign(static_cast<std::size_t>(nx), -1);
    index_t misses = 0;
    bool cached_u = !symmetric_;
    for (index_t j = 0; j < nx; ++j) {
      index_t h = -1;
      for (index_t k = 0, base = 0; k < 2 && h < 0; base += products_[k].points, ++k)
        for (index_t c = 0; c < products_[k].points && h < 0; ++c)
          if (same(x.col(j), products_[k].x.data() + c * n)) h = base + c;
      hit_[static_cast<std::size_t>(j)] = h;
      misses += h < 0;
      if (h < 0) {
        cached_u = false;
      } else {
        const auto [pp, c] = cached_point(h);
        cached_u = cached_u && pp->has_u && pp->data_version == data_version_ && pp->slot[static_cast<std::size_t>(c)] == slot_of(j);
      }
    }
    next_products_.points = nx;
    next_products_.x.resize(static_cast<std::size_t>(n * nx));
    for (index_t j = 0; j < nx; ++j) std::copy_n(x.col(j), n, next_products_.x.data() + j * n);
    next_products_.slot.resize(static_cast<std::size_t>(nx));
    for (index_t j = 0; j < nx; ++j) next_products_.slot[static_cast<std::size_t>(j)] = slot_of(j);
    grow(next_products_.L, nbins_ * P_ * nx);
    if (misses == nx) return {coef, nx + nv, false, false};
    grow(coef_fwd_, ncoef_ * (misses + nv));
    grow(cell_Lf_, P_ * (misses + nv));
    index_t c = 0;
    for (index_t j = 0; j < nx + nv; ++j)
      if (j >= nx || hit_[static_cast<std::size_t>(j)] < 0) std::copy_n(coef + j * ncoef_, ncoef_, coef_fwd_.data() + (c++) * ncoef_);
    return {coef_fwd_.data(), misses + nv, true, cached_u && nv > 0};
  }

  /// Ends a cached pass: the points' Kᵀu (computed, or carried over from the cache) join their
  /// products, which replace the cache of this kind of pass.
  void keep(index_t nx, index_t nv, bool computed_u, bool cached_u, const double* acc) {
    PointProducts& next = next_products_;
    next.has_u = !symmetric_ && (computed_u || cached_u);
    next.data_version = data_version_;
    if (next.has_u) {
      grow(next.u, ncoef_ * nx);
      for (index_t j = 0; j < nx; ++j) std::copy_n(cached_u ? u_column(j) : acc + j * ncoef_, ncoef_, next.u.data() + j * ncoef_);
    }
    std::swap(products_[nv > 0 ? 1 : 0], next);
  }

  /// After bin i's forward pass into Lf: the pass's L (`[P × (nx + nv)]`) from the computed and the
  /// cached columns, and the points' columns into the next cache.
  void exchange(index_t i, index_t nx, index_t nv, const double* Lf, double* L) {
    const index_t P = P_;
    if (Lf != L) {
      index_t c = 0;
      for (index_t j = 0; j < nx + nv; ++j) {
        index_t h = j < nx ? hit_[static_cast<std::size_t>(j)] : -1;
        const double* src = Lf;
        if (h < 0) {
          src = Lf + (c++) * P;
        } else {
          const PointProducts& pp = h < products_[0].points ? products_[0] : products_[1];
          if (h >= products_[0].points) h -= products_[0].points;
          src = pp.L.data() + (i * pp.points + h) * P;
        }
        std::copy_n(src, P, L + j * P);
      }
    }
    std::copy_n(L, P * nx, next_products_.L.data() + i * nx * P);
  }

 private:
  /// The forward products L = K·x of the points of a data pass, `[nbins × P × points]` (bin-major,
  /// stride P per point), and the points themselves; with asymmetric templates also each point's
  /// Kᵀu (`[ncoef × points]`), which depends on the data too, so it is kept with the points' data
  /// slots and the data's version. Kept for the last pass with directions (the HVPs of iterates
  /// still in their Krylov solves) and the last without (new iterates, whose first HVP follows),
  /// so that pooled replicas alternating between the two still find theirs.
  struct PointProducts {
    std::vector<double> x, L, u;
    std::vector<index_t> slot;
    index_t points = 0;
    bool has_u = false;
    std::uint64_t data_version = 0;
  };
  PointProducts products_[2], next_products_;
  std::uint64_t data_version_ = 0;  ///< bumped whenever the data or the β treatment change
  std::vector<index_t> hit_;        ///< per point of the pass: its column among products_[0] then [1], or −1
  std::vector<double> coef_fwd_, cell_Lf_;

  /// Point h of the cache (numbered through products_[0], then [1]) and its column there.
  std::pair<const PointProducts*, index_t> cached_point(index_t h) const {
    return h < products_[0].points ? std::pair{&products_[0], h} : std::pair{&products_[1], h - products_[0].points};
  }

  template <class T>
  static void grow(std::vector<T>& v, index_t n) {
    if (static_cast<index_t>(v.size()) < n) v.resize(static_cast<std::size_t>(n));
  }

  index_t P_, ncoef_, nparams_, nbins_;
  bool symmetric_;
};

}  // namespace fitlib::detail
