// SPDX-License-Identifier: MIT
// The asymmetric-variation interpolation of rabbit and its exact derivatives.
#pragma once

#include <cmath>

#include "fitlib/config.hpp"

namespace fitlib {

/// g(θ) = θ·α(θ) multiplies the half-difference H, so a cell's log-variation is
/// `Σ_s θ_s K_s + g(θ_s) H_s` (rabbit-likelihood-and-format.md §2.3). With u = 2θ,
/// α = (u/8)(3u⁴ − 10u² + 15) inside |θ| < ½ and sign(θ) outside, so g = |θ| there
/// (the exact up/down templates at θ = ±1, linear beyond). α is C² at |θ| = ½.
struct Interpolation {
  double g;    ///< θ·α(θ)
  double dg;   ///< d g / dθ = α + θ·α'
  double d2g;  ///< d² g / dθ² = 2α' + θ·α''
};

FITLIB_HOST_DEVICE inline Interpolation asymmetric_interpolation(double theta) {
  const double u = 2.0 * theta;
  if (!(std::abs(u) < 1.0)) {
    const double sign = theta < 0 ? -1.0 : 1.0;
    return {sign * theta, sign, 0.0};
  }
  const double u2 = u * u;
  const double alpha = (u / 8.0) * ((3.0 * u2 - 10.0) * u2 + 15.0);
  const double d1 = 3.75 * (u2 - 1.0) * (u2 - 1.0);  // α'(θ)
  const double d2 = 30.0 * u * (u2 - 1.0);           // α''(θ)
  return {theta * alpha, alpha + theta * d1, 2.0 * d1 + theta * d2};
}

}  // namespace fitlib
