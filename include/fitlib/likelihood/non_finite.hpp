// SPDX-License-Identifier: MIT
// Names the bin, process and input behind a non-finite NLL or gradient (Likelihood::explain_non_finite).
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <span>
#include <string>
#include <vector>

#include "fitlib/core/types.hpp"
#include "fitlib/likelihood/bbstat.hpp"
#include "fitlib/likelihood/cell.hpp"
#include "fitlib/likelihood/interpolation.hpp"
#include "fitlib/likelihood/options.hpp"
#include "fitlib/model/model.hpp"

namespace fitlib::detail {

inline std::string describe_number(double v) {
  std::ostringstream os;
  os.precision(6);
  os << v;
  return os.str();
}

/// The nominal yield N_bp and the logk coefficients of cell (b, p) (`coef`, ncoef entries; zeros for
/// an absent sparse cell). Returns false when the model does not hold the cell's systematic rows
/// (a model read for one MPI rank).
inline bool cell_templates(const Model& m, index_t b, index_t p, double& nominal, std::vector<double>& coef) {
  const index_t P = m.nprocs(), nc = m.ncoef();
  coef.assign(static_cast<std::size_t>(nc), 0.0);
  const BinRange held = m.held_bins();
  const bool rows = b >= held.begin && b < held.end;
  if (const SparseTemplates* sp = m.sparse()) {
    const SparseTemplates& t = *sp;
    nominal = 0;
    for (index_t c = t.bin_begin[static_cast<std::size_t>(b)]; c < t.bin_begin[static_cast<std::size_t>(b + 1)]; ++c) {
      if (t.cell_process[static_cast<std::size_t>(c)] != p) continue;
      nominal = t.cell_nominal[static_cast<std::size_t>(c)];
      for (index_t k = t.row_begin[static_cast<std::size_t>(c)]; k < t.row_begin[static_cast<std::size_t>(c + 1)]; ++k)
        coef[static_cast<std::size_t>(t.col[static_cast<std::size_t>(k)])] = t.val[static_cast<std::size_t>(k)];
    }
    return rows;
  }
  const DenseTemplates& t = *m.dense();
  nominal = t.nominal[static_cast<std::size_t>(b * P + p)];
  if (!rows) return false;
  const double* row = t.logk.data() + ((b - held.begin) * P + p) * nc;
  std::copy_n(row, nc, coef.begin());
  return true;
}

/// See Likelihood::explain_non_finite: `nu` the yields at x (`[nbins_full × nprocs]`), `counts` and
/// `variances` the data of the unmasked bins, f and g the NLL and its gradient at x.
inline std::string explain_non_finite(const Model& m, const LikelihoodOptions& opts, std::span<const double> x, std::span<const double> nu,
                                      std::span<const double> counts, std::span<const double> variances, double f,
                                      std::span<const double> g, const std::vector<std::string>& names) {
  const index_t P = m.nprocs(), S = m.nsyst(), np = m.npoi(), n = static_cast<index_t>(x.size());
  for (index_t i = 0; i < n; ++i)
    if (!std::isfinite(x[static_cast<std::size_t>(i)]))
      return "parameter '" + names[static_cast<std::size_t>(i)] + "' is " + describe_number(x[static_cast<std::size_t>(i)]);
  // ‖g‖ is formed from Σg², so a component beyond √(max/n) can overflow it while every g_i is finite.
  const double big = std::sqrt(std::numeric_limits<double>::max() / static_cast<double>(std::max<index_t>(n, 1)));
  const auto bad = [&](double v) { return !std::isfinite(v) || std::abs(v) >= big; };
  double ss = 0;
  index_t worst = -1;
  for (index_t i = 0; i < n; ++i) {
    const double gi = g[static_cast<std::size_t>(i)];
    ss += gi * gi;
    if (worst < 0 || !(std::abs(gi) <= std::abs(g[static_cast<std::size_t>(worst)]))) worst = i;
  }
  if (std::isfinite(f) && std::isfinite(ss)) return {};

  std::string what;
  if (!std::isfinite(f)) what = "the NLL is " + describe_number(f);
  else
    what = "the gradient is not finite (∂NLL/∂" + names[static_cast<std::size_t>(worst)] + " = " + describe_number(g[static_cast<std::size_t>(worst)]) +
           (std::isfinite(g[static_cast<std::size_t>(worst)]) ? ", too large to square" : "") + ")";
  const std::vector<index_t> poi_of = m.poi_of_process();
  const BinByBinStats st = BinByBinStats::build(m, {0, m.nbins()}, opts.bin_by_bin, opts.data_term);
  const bool separable = opts.data_term != DataTerm::covariance;
  std::vector<double> coef, cells(static_cast<std::size_t>(P)), gp(cells.size()), delta(cells.size()), u1(cells.size()), u2(cells.size()),
      beta(static_cast<std::size_t>(std::max<index_t>(st.per_bin(), 1)));
  const auto huge = [](double v) { return !std::isfinite(v) || std::abs(v) >= 1e100; };
  // What makes a cell's yield or its derivatives extreme: its nominal yield, its signal strength, or a systematic.
  const auto cell_cause = [&](index_t b, index_t p) -> std::string {
    double nominal = 0;
    const bool rows = cell_templates(m, b, p, nominal, coef);
    if (huge(nominal)) return "its nominal yield is " + describe_number(nominal) + " (hnorm)";
    if (const index_t q = poi_of[static_cast<std::size_t>(p)]; q >= 0) {
      const double mu = poi_strength(x[static_cast<std::size_t>(q)], opts.allow_negative_poi).r;
      if (huge(mu)) return "its signal strength " + names[static_cast<std::size_t>(q)] + " is μ = " + describe_number(mu);
    }
    if (!rows) return "";
    index_t top = -1;
    double top_v = 0;
    for (index_t s = 0; s < S; ++s) {
      const double k = coef[static_cast<std::size_t>(s)], h = m.symmetric ? 0.0 : coef[static_cast<std::size_t>(S + s)];
      const double v = std::abs(k) + std::abs(h);
      if (top < 0 || !(v <= top_v)) {
        top = s;
        top_v = v;
      }
    }
    if (top >= 0 && huge(top_v))
      return "systematic '" + m.systematics[static_cast<std::size_t>(top)].name + "' has logk " +
             describe_number(coef[static_cast<std::size_t>(top)]) + (m.symmetric ? "" : " (half-difference " + describe_number(coef[static_cast<std::size_t>(S + top)]) + ")") +
             " (hlogk)";
    return "";
  };
  const auto with = [](const std::string& s) { return s.empty() ? std::string() : ": " + s; };

  for (index_t b = 0; b < m.nbins(); ++b) {
    const std::string where = m.describe_bin(b);
    double total = 0;
    for (index_t p = 0; p < P; ++p) {
      const double v = nu[static_cast<std::size_t>(b * P + p)];
      cells[static_cast<std::size_t>(p)] = v;
      total += v;
      if (!std::isfinite(v))
        return what + ": in " + where + " the expected yield of process '" + m.processes[static_cast<std::size_t>(p)].name + "' is " + describe_number(v) +
               with(cell_cause(b, p));
    }
    const double cnt = counts[static_cast<std::size_t>(b)];
    if (opts.data_term == DataTerm::poisson && cnt > 0 && !(total > 0))
      return what + ": in " + where + " the expected count is " + describe_number(total) + " while " + describe_number(cnt) +
             " are observed; a Poisson term needs a positive expectation there" +
             (total == 0 ? " (every process's yield is zero in this bin)" : "");
    if (!separable) {  // the coupled term: each bin's slope is not local; the cells' sensitivities still are
      std::fill(gp.begin(), gp.end(), 1.0);
    } else {
      const double aux = opts.data_term == DataTerm::poisson ? (cnt > 0 ? 1.0 / cnt : 0.0) : 1.0 / variances[static_cast<std::size_t>(b)];
      const BinCurvature t = profile_bin(st, b, opts.data_term, cnt, aux, cells.data(), P, gp.data(), delta.data(), u1.data(), u2.data(), beta.data());
      bool slope_bad = false;
      for (double v : gp) slope_bad = slope_bad || !std::isfinite(v);
      if (!std::isfinite(t.nll) || slope_bad) {
        if (opts.data_term == DataTerm::poisson && cnt > 0 && !std::isfinite(cnt / total))
          return what + ": in " + where + " the expected count " + describe_number(total) + " is too small for the " + describe_number(cnt) +
                 " observed (the Poisson slope 1 − n/ν overflows)";
        return what + ": in " + where + " the data term is " + describe_number(t.nll) + " with " + describe_number(cnt) + " observed and " + describe_number(total) +
               " expected" + (st.enabled ? " (bin-by-bin statistics profiled)" : "") + (huge(cnt) ? ": the observed count is extreme" : "");
      }
    }
    // The gradient: each cell's share g_p·∂ν_p/∂x_i, for its POI and every systematic.
    for (index_t p = 0; p < P; ++p) {
      const double v = cells[static_cast<std::size_t>(p)], w = gp[static_cast<std::size_t>(p)];
      if (v == 0) continue;
      double nominal = 0;
      const bool rows = cell_templates(m, b, p, nominal, coef);
      const std::string proc = "process '" + m.processes[static_cast<std::size_t>(p)].name + "'";
      if (const index_t q = poi_of[static_cast<std::size_t>(p)]; q >= 0) {
        const Strength s = poi_strength(x[static_cast<std::size_t>(q)], opts.allow_negative_poi);
        const double d = m.systematic_type == SystematicType::log_normal ? (s.r != 0 ? v * s.dr / s.r : s.dr * nominal) : s.dr * nominal;
        if (bad(w * d))
          return what + ": in " + where + " " + proc + " gives ∂NLL/∂" + names[static_cast<std::size_t>(q)] + " = " + describe_number(w * d) +
                 " (expected yield " + describe_number(v) + ")" + with(cell_cause(b, p));
      }
      if (!rows) continue;
      const double r0 = [&] {
        const index_t q = poi_of[static_cast<std::size_t>(p)];
        return q < 0 ? 1.0 : m.poi_default[static_cast<std::size_t>(q)];
      }();
      for (index_t s = 0; s < S; ++s) {
        const double k = coef[static_cast<std::size_t>(s)], h = m.symmetric ? 0.0 : coef[static_cast<std::size_t>(S + s)];
        const double dl = k + (h != 0 ? asymmetric_interpolation(x[static_cast<std::size_t>(np + s)]).dg * h : 0.0);
        const double d = (m.systematic_type == SystematicType::log_normal ? v : r0) * dl;
        if (!bad(w * d)) continue;
        std::string cause = cell_cause(b, p);
        if (cause.empty() && huge(cnt)) cause = "the observed count is " + describe_number(cnt);
        return what + ": in " + where + " " + proc + " gives ∂NLL/∂" + names[static_cast<std::size_t>(np + s)] + " = " + describe_number(w * d) +
               " through systematic '" + m.systematics[static_cast<std::size_t>(s)].name + "' (logk " + describe_number(k) + ", expected yield " + describe_number(v) +
               ", ∂NLL/∂ν " + describe_number(w) + ")" + with(cause);
      }
    }
  }
  std::string largest;
  if (worst >= 0)
    largest = " (the largest gradient component is ∂NLL/∂" + names[static_cast<std::size_t>(worst)] + " = " +
              describe_number(g[static_cast<std::size_t>(worst)]) + ")";
  return what + ", but no bin's term is at fault: look at the POI priors, external terms and regularizers" + largest;
}

}  // namespace fitlib::detail
