// SPDX-License-Identifier: MIT
// The cost of a fit's evaluations from a model's dimensions, and the minimizer it picks by default.
#pragma once

#include <string_view>

#include "fitlib/core/types.hpp"
#include "fitlib/model/model.hpp"

namespace fitlib {

/// What the likelihood's evaluations of a model cost, from its dimensions alone: no timing enters,
/// so the choices made from it, and the results, are the same on every machine; nor does the
/// storage (a pass is costed as the dense one), so every MPI rank, holding only its own bins, and
/// both storages of one tensor make the same choice.
struct CostModel {
  /// Bytes a pass streams per flop a dense Hessian's GEMM does in the same time: memory bandwidth over
  /// DGEMM rate, 12 GB/s over 19 GFLOP/s on one core of the benchmark machine (docs/benchmarks.md,
  /// "Realistic analyses"), where this model predicts a Hessian's measured cost in passes to 10 %.
  static constexpr double bytes_per_flop = 0.6;

  double pass_bytes = 0;     ///< the dense templates one pass reads (nominal and logk values)
  /// The dense Hessian's GEMMs as if every systematic acted on every process: nprocs + 1 rows per data
  /// bin, n² flops each. An upper bound: the cells' rows cover only the systematics of their process
  /// (Shard::hessian), which a rank holding part of the bins cannot count for all of them.
  double hessian_flops = 0;

  /// One dense Hessian in passes over the templates.
  double hessian_passes() const { return pass_bytes > 0 ? hessian_flops * bytes_per_flop / pass_bytes : 0.0; }
};

inline CostModel cost_model(const Model& m) {
  const double n = static_cast<double>(m.npoi() + m.nsyst());
  CostModel c;
  c.hessian_flops = static_cast<double>(m.nbins()) * static_cast<double>(m.nprocs() + 1) * n * n;
  c.pass_bytes = static_cast<double>(m.nbins_full()) * static_cast<double>(m.nprocs()) * static_cast<double>(m.ncoef() + 1) * sizeof(double);
  return c;
}

/// fitlib-fit's --minimizerMethod auto: Gauss–Newton steps to the minimum's neighbourhood, then where a
/// dense Hessian costs at most 12 passes over the templates the end game on dense Hessians
/// (trust-gauss-newton: 2–3 of them, the last the postfit's), and above that trust-krylov preconditioned
/// by the last Gauss–Newton matrix (trust-gauss-newton-krylov: 10–30 HVPs and the postfit's Hessian),
/// faster than trust-krylov alone on every tensor measured. The threshold lies between the two measured
/// points that bracket it (docs/benchmarks.md, "The Krylov end game": 9 passes, synth_b10000_s100 of
/// benchmarks/compare_rabbit.py, is faster with dense Hessians, 16, realistic_400, with HVPs); not derived.
/// Without a Gauss–Newton matrix (`gauss_newton` false: a CUDA likelihood's shards compute none) the same rule
/// picks between the two on ∇²f alone: trust-exact or trust-krylov.
inline std::string_view default_minimizer(const Model& m, bool gauss_newton = true) {
  const bool dense = cost_model(m).hessian_passes() <= 12;
  if (!gauss_newton) return dense ? "trust-exact" : "trust-krylov";
  return dense ? "trust-gauss-newton" : "trust-gauss-newton-krylov";
}

}  // namespace fitlib
