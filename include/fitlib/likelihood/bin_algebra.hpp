// SPDX-License-Identifier: MIT
// The per-bin algebra of every shard pass, as host/device functions over trivially copyable views.
#pragma once

#include <cstdint>
#include <type_traits>

#include "fitlib/config.hpp"
#include "fitlib/core/types.hpp"
#include "fitlib/likelihood/bbstat.hpp"
#include "fitlib/likelihood/cell.hpp"
#include "fitlib/likelihood/cells.hpp"
#include "fitlib/likelihood/options.hpp"

namespace fitlib::detail {

/// One data slot's inputs (Shard::set_slot) for the shard's data bins: counts, aux (1/n or 1/σ²)
/// and which bins enter the data term (null: all).
struct SlotView {
  const double* n = nullptr;
  const double* aux = nullptr;
  const std::uint8_t* bins = nullptr;
};

/// Everything a bin's pass reads besides its forward products, for a block of `nx` points and
/// `nv` directions (DESIGN.md, "The numerical core"): the cells, the bin-by-bin constants, the
/// per-column data slots and strengths, and for the coupled forms (the covariance term, an
/// observable penalty's backward pass) y and z per bin row.
template <class Cells>
struct BinPass {
  Cells cells;
  BinByBinStatsView bb;
  DataTerm term = DataTerm::poisson;
  SystematicType type = SystematicType::log_normal;
  index_t P = 0, npoi = 0, nx = 0, nv = 0;
  index_t nu = 0;         ///< gradient columns of U before the directions': nx, or 0 without them
  bool coupled = false;   ///< coupled_y (and coupled_z) replace the data term
  const index_t* poi_of_process = nullptr;  ///< `[P]`, −1 for no POI
  const double* r0 = nullptr;               ///< `[P]`, the strength at the default point (normal type)
  const Strength* strengths = nullptr;      ///< `[npoi × nx]`
  const SlotView* slots = nullptr;          ///< `[nx]`
  ConstBlockView<double> v;                 ///< `[nparams × nv]` directions (their POI rows are read)
  ConstBlockView<double> coupled_y, coupled_z;  ///< `[rows × nx]`, `[rows × nv]` by bin row r

  FITLIB_HOST_DEVICE index_t point_of(index_t k) const { return nx == 1 ? 0 : k; }
  FITLIB_HOST_DEVICE Strength strength(index_t p, index_t j) const {
    const index_t q = poi_of_process[p];
    return q < 0 ? Strength{} : strengths[q + j * npoi];
  }
};

/// Per-column workspaces of a bin's pass (P entries per column, or P alone for `m`).
struct BinScratch {
  CellYield* cy;  ///< `[P × nx]`
  double *g, *delta, *u1, *u2;  ///< `[P × nx]` each: ∂F/∂m and the curvature diag(δ) + U·S·Uᵀ
  double* m;      ///< `[P]`: the bin's cell yields per process, then a direction's dm per cell
  BinCurvature* curv;  ///< `[nx]`
  FITLIB_HOST_DEVICE BinScratch column(index_t j, index_t P) const {
    return {cy + j * P, g + j * P, delta + j * P, u1 + j * P, u2 + j * P, m, curv + j};
  }
};

/// The cells' yields of bin i at column j from their products `Lj` (one per cell), into `out`,
/// and the per-process yields `m` (zero for absent cells) that the bin's term reads.
template <class Cells>
FITLIB_HOST_DEVICE inline void cell_yields(const BinPass<Cells>& a, index_t i, index_t j, const double* Lj, CellYield* out, double* m) {
  const index_t P = a.P, nc = a.cells.cells(i);
  if (nc < P)
    for (index_t p = 0; p < P; ++p) m[p] = 0.0;
  for (index_t c = 0; c < nc; ++c) {
    const index_t p = a.cells.process(i, c);
    out[c] = cell_yield(a.type, a.cells.nominal_of(i, c), Lj[c], a.strength(p, j), a.r0[p]);
    m[p] = out[c].nu;
  }
}

/// Bin i's term at column j given its per-process yields m: the bin-by-bin profile (profile_bin)
/// or, in the coupled forms, its local part (coupled_bin, y from row r); nothing for a bin the
/// column's data slot leaves out. Writes g, δ, u₁, u₂ (P each).
template <class Cells>
FITLIB_HOST_DEVICE inline BinCurvature bin_term(const BinPass<Cells>& a, index_t i, index_t r, index_t j, const double* m, double* g, double* delta,
                                                double* u1, double* u2) {
  const SlotView& d = a.slots[j];
  if (!a.coupled && d.bins && !d.bins[i]) {  // left out of this column's data term
    for (index_t p = 0; p < a.P; ++p) g[p] = delta[p] = u1[p] = u2[p] = 0.0;
    return {};
  }
  return a.coupled ? coupled_bin(a.bb, i, m, a.P, a.coupled_y(r, j), g, delta, u1, u2, nullptr)
                   : profile_bin(a.bb, i, a.term, d.n[i], d.aux[i], m, a.P, g, delta, u1, u2, nullptr);
}

/// The data pass of bin i (row r of the coupled inputs): from the forward products L of its cells
/// (`L[c + f·ldL]` for the nx points then the nv directions) to the backward columns U
/// (`U[c + b·ldU]`: the gradient's nu, then the directions'), adding the POIs' partials into
/// `poi` (`[npoi × (nu + nv)]`) and each point's term into `nll` (or not, when null). The
/// backward products Kᵀ·U then give the systematics' partials (write_partials).
template <class Cells>
FITLIB_HOST_DEVICE inline void data_bin(const BinPass<Cells>& a, index_t i, index_t r, const double* L, index_t ldL, double* U, index_t ldU,
                                        double* poi, double* nll, const BinScratch& s) {
  const index_t P = a.P, nc = a.cells.cells(i), nx = a.nx, npoi = a.npoi;
  for (index_t j = 0; j < nx; ++j) {
    const BinScratch w = s.column(j, P);
    cell_yields(a, i, j, L + j * ldL, w.cy, s.m);
    const BinCurvature t = bin_term(a, i, r, j, s.m, w.g, w.delta, w.u1, w.u2);
    if (nll && !a.coupled) nll[j] += t.nll;
    *w.curv = t;
    if (a.nu == 0) continue;
    for (index_t c = 0; c < nc; ++c) {
      const index_t p = a.cells.process(i, c);
      U[c + j * ldU] = w.g[p] * w.cy[c].d_L;
      if (const index_t q = a.poi_of_process[p]; q >= 0) poi[q + j * npoi] += w.g[p] * w.cy[c].d_mu;
    }
  }
  for (index_t k = 0; k < a.nv; ++k) {
    const BinScratch w = s.column(a.point_of(k), P);
    const BinCurvature& t = *w.curv;
    const double* vk = a.v.col(k);
    const double* Lk = L + (nx + k) * ldL;
    // dm: the direction's change of the cell yields; h = (diag(δ) + U·S·Uᵀ)·dm.
    double t1 = 0, t2 = 0;
    for (index_t c = 0; c < nc; ++c) {
      const index_t p = a.cells.process(i, c), q = a.poi_of_process[p];
      const double dm = w.cy[c].d_mu * (q >= 0 ? vk[q] : 0.0) + w.cy[c].d_L * Lk[c];
      s.m[c] = dm;
      t1 += w.u1[p] * dm;
      t2 += w.u2[p] * dm;
    }
    // The coupled term's non-local curvature enters through u₁: z = (C + diag q)⁻¹·(Σ_bins u₁·dm).
    const double a1 = t.s11 * t1 + t.s12 * t2 + (a.coupled ? a.coupled_z(r, k) : 0.0), a2 = t.s12 * t1 + t.s22 * t2;
    for (index_t c = 0; c < nc; ++c) {
      const CellYield& y = w.cy[c];
      const index_t p = a.cells.process(i, c), q = a.poi_of_process[p];
      const double vq = q >= 0 ? vk[q] : 0.0, dL = Lk[c];
      const double h = w.delta[p] * s.m[c] + w.u1[p] * a1 + w.u2[p] * a2;
      U[c + (a.nu + k) * ldU] = h * y.d_L + w.g[p] * (y.d_muL * vq + y.d_LL * dL);
      if (q >= 0) poi[q + (a.nu + k) * npoi] += h * y.d_mu + w.g[p] * (y.d_mumu * vq + y.d_muL * dL);
    }
  }
}

/// The forward-only pass of bin i (row r): per point ν' and q of the coupled term
/// (coupled_aggregates; with exact statistics ν' = Σ_p ν_bp, the observable), per direction their
/// derivatives. `q` and `dq` may be empty.
template <class Cells>
FITLIB_HOST_DEVICE inline void aggregate_bin(const BinPass<Cells>& a, index_t i, index_t r, const double* L, index_t ldL, BlockView<double> nu,
                                             BlockView<double> q, BlockView<double> dnu, BlockView<double> dq, const BinScratch& s) {
  const index_t P = a.P, nc = a.cells.cells(i);
  for (index_t j = 0; j < a.nx; ++j) {
    const BinScratch w = s.column(j, P);
    cell_yields(a, i, j, L + j * ldL, w.cy, s.m);
    const CoupledAggregates ag = coupled_aggregates(a.bb, i, s.m, P, w.u1, w.u2);
    nu(r, j) = ag.nu;
    if (!q.empty()) q(r, j) = ag.q;
  }
  for (index_t k = 0; k < a.nv; ++k) {
    const BinScratch w = s.column(a.point_of(k), P);
    const double* vk = a.v.col(k);
    const double* Lk = L + (a.nx + k) * ldL;
    double s_nu = 0, s_q = 0;
    for (index_t cc = 0; cc < nc; ++cc) {
      const CellYield& c = w.cy[cc];
      const index_t p = a.cells.process(i, cc), qi = a.poi_of_process[p];
      const double dm = c.d_mu * (qi >= 0 ? vk[qi] : 0.0) + c.d_L * Lk[cc];
      s_nu += w.u1[p] * dm;
      s_q += w.u2[p] * dm;
    }
    dnu(r, k) = s_nu;
    if (!dq.empty()) dq(r, k) = s_q;
  }
}

/// β̂ of data bin i at point 0 into `beta` (per_bin entries): the profile, or with `coupled` the
/// covariance term's closed form at y = coupled_y(i, 0).
template <class Cells>
FITLIB_HOST_DEVICE inline void beta_bin(const BinPass<Cells>& a, index_t i, const double* L, double* beta, const BinScratch& s) {
  cell_yields(a, i, 0, L, s.cy, s.m);
  const SlotView& d = a.slots[0];
  if (a.coupled) coupled_bin(a.bb, i, s.m, a.P, a.coupled_y(i, 0), s.g, s.delta, s.u1, s.u2, beta);
  else profile_bin(a.bb, i, a.term, d.n[i], d.aux[i], s.m, a.P, s.g, s.delta, s.u1, s.u2, beta);
}

/// The cell yields' derivatives dm along direction k (P entries, zero for absent cells) of bin i, from point 0's cell
/// yields in s (cell_yields) and the direction's products in L (column 1 + k).
template <class Cells>
FITLIB_HOST_DEVICE inline void direction_yields(const BinPass<Cells>& a, index_t i, const double* L, index_t ldL, const BinScratch& s, index_t k, double* dm) {
  for (index_t p = 0; p < a.P; ++p) dm[p] = 0.0;
  for (index_t c = 0; c < a.cells.cells(i); ++c) {
    const index_t p = a.cells.process(i, c), q = a.poi_of_process[p];
    dm[p] = s.cy[c].d_mu * (q >= 0 ? a.v(q, k) : 0.0) + s.cy[c].d_L * L[c + (1 + k) * ldL];
  }
}

/// Bin i's share of the bin-by-bin global impacts (beta_response_variance) for each direction,
/// added to `var[k]`. L holds point 0's products then the nv directions'; `beta` (per_bin), `m0`,
/// `dm` (P each) and `work` (3·P) are workspaces besides s.
template <class Cells>
FITLIB_HOST_DEVICE inline void variance_bin(const BinPass<Cells>& a, index_t i, const double* L, index_t ldL, double* var, double* beta, double* m0,
                                            double* dm, double* work, const BinScratch& s) {
  const index_t P = a.P;
  const SlotView& d = a.slots[0];
  const double n = d.n[i], aux = d.aux[i];
  cell_yields(a, i, 0, L, s.cy, s.m);
  for (index_t p = 0; p < P; ++p) m0[p] = s.m[p];
  profile_bin(a.bb, i, a.term, n, aux, m0, P, s.g, s.delta, s.u1, s.u2, beta);
  for (index_t k = 0; k < a.nv; ++k) {
    direction_yields(a, i, L, ldL, s, k, dm);
    var[k] += beta_response_variance(a.bb, i, a.term, n, aux, m0, dm, P, beta, work);
  }
}

/// Bin i's summed yield at point 0 for a postfit histogram, from its cell yields (cell_yields into s.m): with
/// `profiled` (a data bin with its β profiled), β̂ applied, the weights w (P) of its derivative along the cell yields
/// with β̂'s response folded in (bbstat.hpp, profiled_yield_weights) and the variance β's own uncertainty adds
/// (beta_variance at the data term's curvature, into `bvar`); otherwise Σ_p ν_p, w = 1 and 0 (β held at β₀ = 1, or
/// no β: a masked bin, or prefit). `beta` (per_bin) is a workspace besides s.
template <class Cells>
FITLIB_HOST_DEVICE inline double yield_weights(const BinPass<Cells>& a, index_t i, bool profiled, double* beta, double* w, double* bvar,
                                               const BinScratch& s) {
  const index_t P = a.P;
  *bvar = 0;
  if (!profiled || !a.bb.enabled) {
    double nu = 0;
    for (index_t p = 0; p < P; ++p) {
      w[p] = 1.0;
      nu += s.m[p];
    }
    return nu;
  }
  const SlotView& d = a.slots[0];
  const double n = d.n[i], aux = d.aux[i];
  profile_bin(a.bb, i, a.term, n, aux, s.m, P, s.g, s.delta, s.u1, s.u2, beta);
  const double nu = profiled_yield_weights(a.bb, i, a.term, n, aux, s.m, P, beta, w);
  *bvar = beta_variance(a.bb, i, s.m, P, beta, data_term(a.term, nu, n, aux).d2);
  return nu;
}

/// The row J (nv entries, stride 1) of bin i's summed yield's derivatives along the nv directions of the pass, which
/// a postfit histogram's propagation reads (yield_weights; the directions the unit vectors of the parameters on a
/// device layer, whose forward GEMM against them gives every cell's effective row, as its Hessian's does). `o` and
/// `bvar` get the yield and β's own variance; `beta` (per_bin), `w` and `dm` (P each) are workspaces besides s.
template <class Cells>
FITLIB_HOST_DEVICE inline void jacobian_bin(const BinPass<Cells>& a, index_t i, const double* L, index_t ldL, bool profiled, double* o, double* J,
                                            double* bvar, double* beta, double* w, double* dm, const BinScratch& s) {
  cell_yields(a, i, 0, L, s.cy, s.m);
  *o = yield_weights(a, i, profiled, beta, w, bvar, s);
  for (index_t k = 0; k < a.nv; ++k) {
    direction_yields(a, i, L, ldL, s, k, dm);
    double d = 0;
    for (index_t p = 0; p < a.P; ++p) d += w[p] * dm[p];
    J[k] = d;
  }
}

/// Bin i's per-process yields at point 0 for a postfit histogram (`o`, P), the weights of their derivatives along the
/// cell yields, ∂ν̃_p/∂m_q = d_p·δ_pq + u_p·v_q (`d`, `u`, `v`, P each) and the variance β's own uncertainty adds to each
/// (`bvar`, P): yield_weights per process (bbstat.hpp, profiled_process_weights and process_beta_variances), and
/// without `profiled` ν_p, d = 1, u = v = 0 and no variance. `beta` (per_bin) is a workspace besides s.
template <class Cells>
FITLIB_HOST_DEVICE inline void process_weights(const BinPass<Cells>& a, index_t i, bool profiled, double* beta, double* o, double* d, double* u, double* v,
                                               double* bvar, const BinScratch& s) {
  const index_t P = a.P;
  for (index_t p = 0; p < P; ++p) {
    o[p] = s.m[p];
    d[p] = 1.0;
    u[p] = v[p] = bvar[p] = 0.0;
  }
  if (!profiled || !a.bb.enabled) return;
  const SlotView& dv = a.slots[0];
  const double n = dv.n[i], aux = dv.aux[i];
  profile_bin(a.bb, i, a.term, n, aux, s.m, P, s.g, s.delta, s.u1, s.u2, beta);
  beta_applied_cells(a.bb, i, s.m, P, beta, o);
  double nu = 0;
  for (index_t p = 0; p < P; ++p) nu += o[p];
  profiled_process_weights(a.bb, i, a.term, n, aux, s.m, P, beta, d, u, v);
  process_beta_variances(a.bb, i, s.m, P, beta, data_term(a.term, nu, n, aux).d2, bvar);
}

/// jacobian_bin per process: the rows J (P rows of nv entries, row-major) of bin i's per-process yields' derivatives
/// along the nv directions, with their yields (`o`) and β's own variances (`bvar`), P each (process_weights). `beta`
/// (per_bin), `d`, `u`, `v` and `dm` (P each) are workspaces besides s.
template <class Cells>
FITLIB_HOST_DEVICE inline void process_jacobian_bin(const BinPass<Cells>& a, index_t i, const double* L, index_t ldL, bool profiled, double* o, double* J,
                                                    double* bvar, double* beta, double* d, double* u, double* v, double* dm, const BinScratch& s) {
  cell_yields(a, i, 0, L, s.cy, s.m);
  process_weights(a, i, profiled, beta, o, d, u, v, bvar, s);
  for (index_t k = 0; k < a.nv; ++k) {
    direction_yields(a, i, L, ldL, s, k, dm);
    double sv = 0;
    for (index_t p = 0; p < a.P; ++p) sv += v[p] * dm[p];
    for (index_t p = 0; p < a.P; ++p) J[p * a.nv + k] = d[p] * dm[p] + u[p] * sv;
  }
}

/// The expected yields ν[p] of bin i at point 0 (`nu`, P entries, zero for absent cells).
template <class Cells>
FITLIB_HOST_DEVICE inline void yields_bin(const BinPass<Cells>& a, index_t i, const double* L, double* nu) {
  const index_t nc = a.cells.cells(i);
  for (index_t c = 0; c < nc; ++c) {
    const index_t p = a.cells.process(i, c);
    nu[p] = cell_yield(a.type, a.cells.nominal_of(i, c), L[c], a.strength(p, 0), a.r0[p]).nu;
  }
}

static_assert(std::is_trivially_copyable_v<BinPass<DenseCells>> && std::is_trivially_copyable_v<BinPass<SparseCells>> &&
              std::is_trivially_copyable_v<BinScratch>);

}  // namespace fitlib::detail
