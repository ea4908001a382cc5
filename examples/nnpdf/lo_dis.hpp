// SPDX-License-Identifier: MIT
// Leading-order deep-inelastic scattering at the input scale, for the closure test of examples/nnpdf:
// the Les Houches benchmark PDF (the truth), NNPDF's evolution basis, LO structure functions, and the
// FK table that maps a PDF on an x-grid to the observables (shared/reference/nnpdf-example.md §1.6,
// §2 D3; §3 rows 1–3).
#pragma once

#include <array>
#include <cmath>
#include <cstddef>
#include <string>
#include <vector>

namespace nnpdf {

/// NNPDF4.0's fitting basis (EVOL, nnpdf-example.md §3 row 17), the network's eight outputs: x·f for
/// Σ, g, V, V3, V8, T3, T8, T15.
enum Evol { Sigma, Gluon, V, V3, V8, T3, T8, T15, n_evol };
inline constexpr std::array<const char*, n_evol> evol_names{"Sigma", "g", "V", "V3", "V8", "T3", "T8", "T15"};

/// Quark combinations q± = q ± q̄ for u, d, s, c (the index order of flavour vectors).
enum Flavour { u_plus, d_plus, s_plus, c_plus, u_minus, d_minus, s_minus, c_minus, n_flavours };

/// x·f at Q0 = √2 GeV of the Les Houches benchmark PDF (hep-ph/0204316), in the evolution basis.
inline std::array<double, n_evol> les_houches(double x) {
  const double xuv = 5.1072 * std::pow(x, 0.8) * std::pow(1 - x, 3), xdv = 3.06432 * std::pow(x, 0.8) * std::pow(1 - x, 4);
  const double xg = 1.7 * std::pow(x, -0.1) * std::pow(1 - x, 5), xdbar = 0.1939875 * std::pow(x, -0.1) * std::pow(1 - x, 6);
  const double xubar = (1 - x) * xdbar, xs = 0.2 * (xubar + xdbar);
  // q⁺ = valence + 2 q̄ for u and d, 2 s for s; q⁻ = valence; no charm.
  const double up = xuv + 2 * xubar, dp = xdv + 2 * xdbar, sp = 2 * xs;
  std::array<double, n_evol> f{};
  f[Sigma] = up + dp + sp;
  f[Gluon] = xg;
  f[V] = xuv + xdv;
  f[V3] = xuv - xdv;
  f[V8] = xuv + xdv;
  f[T3] = up - dp;
  f[T8] = up + dp - 2 * sp;
  f[T15] = up + dp + sp;
  return f;
}

/// The flavour combinations from the evolution basis: flavour[i] = Σ_k rotation[i][k]·evol[k], the inverse of
/// Σ = u⁺+d⁺+s⁺+c⁺, T3 = u⁺−d⁺, T8 = u⁺+d⁺−2s⁺, T15 = u⁺+d⁺+s⁺−3c⁺, V = Σq⁻, V3 = u⁻−d⁻, V8 = u⁻+d⁻−2s⁻,
/// with c⁻ = 0 (V15 = V, as NNPDF4.0's basis has no V15).
inline std::array<std::array<double, n_evol>, n_flavours> flavour_rotation() {
  std::array<std::array<double, n_evol>, n_flavours> r{};
  r[u_plus] = {1.0 / 4, 0, 0, 0, 0, 1.0 / 2, 1.0 / 6, 1.0 / 12};
  r[d_plus] = {1.0 / 4, 0, 0, 0, 0, -1.0 / 2, 1.0 / 6, 1.0 / 12};
  r[s_plus] = {1.0 / 4, 0, 0, 0, 0, 0, -1.0 / 3, 1.0 / 12};
  r[c_plus] = {1.0 / 4, 0, 0, 0, 0, 0, 0, -1.0 / 4};
  r[u_minus] = {0, 0, 1.0 / 3, 1.0 / 2, 1.0 / 6, 0, 0, 0};
  r[d_minus] = {0, 0, 1.0 / 3, -1.0 / 2, 1.0 / 6, 0, 0, 0};
  r[s_minus] = {0, 0, 1.0 / 3, 0, -1.0 / 3, 0, 0, 0};
  r[c_minus] = {};
  return r;
}

/// LO structure functions at the input scale, each a linear combination of x·q±: the charged-lepton F₂
/// of the proton and of the deuteron (per nucleon), and the charged-current F₂ and xF₃ of neutrinos and
/// antineutrinos on protons (ν: W⁺ turns d, s, ū, c̄ into up-type or down-type quarks).
enum Observable { F2_proton, F2_deuteron, F2_nu, xF3_nu, F2_nubar, xF3_nubar, n_observables };
inline constexpr std::array<const char*, n_observables> observable_names{"F2p", "F2d", "F2nu", "xF3nu", "F2nubar", "xF3nubar"};

/// Coefficients of x·q± in each observable (q = (q⁺ + q⁻)/2, q̄ = (q⁺ − q⁻)/2).
inline std::array<double, n_flavours> flavour_coefficients(Observable o) {
  constexpr double eu = 4.0 / 9, ed = 1.0 / 9;
  switch (o) {
    case F2_proton: return {eu, ed, ed, eu, 0, 0, 0, 0};
    case F2_deuteron: return {(eu + ed) / 2, (eu + ed) / 2, ed, eu, 0, 0, 0, 0};
    // 2x(d + s + ū + c̄) and 2x(d + s − ū − c̄)
    case F2_nu: return {1, 1, 1, 1, -1, 1, 1, -1};
    case xF3_nu: return {-1, 1, 1, -1, 1, 1, 1, 1};
    // 2x(u + c + d̄ + s̄) and 2x(u + c − d̄ − s̄)
    case F2_nubar: return {1, 1, 1, 1, 1, -1, -1, 1};
    case xF3_nubar: return {1, -1, -1, 1, 1, 1, 1, 1};
    default: return {};
  }
}

/// The observable's coefficients in the evolution basis: O = Σ_k c_k·(x·f_k).
inline std::array<double, n_evol> evol_coefficients(Observable o) {
  const auto q = flavour_coefficients(o);
  const auto r = flavour_rotation();
  std::array<double, n_evol> c{};
  for (int i = 0; i < n_flavours; ++i)
    for (int k = 0; k < n_evol; ++k) c[k] += q[i] * r[i][k];
  return c;
}

/// The FK table's x-grid: log-spaced below 0.1, linear above (as NNPDF's interpolation grid is), from x_min to 1.
inline std::vector<double> x_grid(double x_min, int n_log, int n_lin) {
  std::vector<double> x;
  for (int i = 0; i < n_log; ++i) x.push_back(x_min * std::pow(0.1 / x_min, static_cast<double>(i) / n_log));
  for (int i = 0; i <= n_lin; ++i) x.push_back(0.1 + 0.9 * static_cast<double>(i) / n_lin);
  return x;
}

/// Weights ℓ_a(x) of the cubic Lagrange interpolation in ln x on the four grid nodes around x (at the
/// ends, the first or last four): f(x) ≈ Σ_a ℓ_a(x)·f(x_a).
inline std::vector<double> interpolation_weights(const std::vector<double>& grid, double x) {
  const int n = static_cast<int>(grid.size());
  int j = 0;
  while (j + 1 < n && grid[static_cast<std::size_t>(j + 1)] <= x) ++j;
  const int first = std::max(0, std::min(n - 4, j - 1));
  std::vector<double> w(grid.size(), 0.0);
  const double t = std::log(x);
  for (int a = first; a < first + 4; ++a) {
    double l = 1;
    for (int b = first; b < first + 4; ++b)
      if (b != a) l *= (t - std::log(grid[static_cast<std::size_t>(b)])) / (std::log(grid[static_cast<std::size_t>(a)]) - std::log(grid[static_cast<std::size_t>(b)]));
    w[static_cast<std::size_t>(a)] = l;
  }
  return w;
}

/// One data point: an observable at x.
struct Point {
  Observable observable;
  double x;
};

/// The FK table of the points: row i, column a·n_evol + k is c_k(observable_i)·ℓ_a(x_i), so that the
/// predictions are FK · (x·f_k(x_a)) with the PDF on the grid, a at the slow index. Row-major.
inline std::vector<double> fk_table(const std::vector<Point>& points, const std::vector<double>& grid) {
  const std::size_t ncol = grid.size() * n_evol;
  std::vector<double> fk(points.size() * ncol, 0.0);
  for (std::size_t i = 0; i < points.size(); ++i) {
    const auto c = evol_coefficients(points[i].observable);
    const auto w = interpolation_weights(grid, points[i].x);
    for (std::size_t a = 0; a < grid.size(); ++a)
      for (int k = 0; k < n_evol; ++k) fk[i * ncol + a * n_evol + static_cast<std::size_t>(k)] = c[static_cast<std::size_t>(k)] * w[a];
  }
  return fk;
}

/// The observable computed directly from a PDF at x (the FK table's reference).
template <class Pdf>
double observable(Observable o, double x, Pdf&& pdf) {
  const auto c = evol_coefficients(o);
  const auto f = pdf(x);
  double s = 0;
  for (int k = 0; k < n_evol; ++k) s += c[static_cast<std::size_t>(k)] * f[static_cast<std::size_t>(k)];
  return s;
}

}  // namespace nnpdf
