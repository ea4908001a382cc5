// SPDX-License-Identifier: MIT
// Row kernels with a fixed summation order, so every column of a batch is computed bitwise alike.
#pragma once

#include "fitlib/config.hpp"
#include "fitlib/core/types.hpp"

namespace fitlib::detail {

/// Width of the lane accumulators: two AVX-512 (or four AVX2) registers, enough independent
/// chains to hide the FMA latency while streaming one template row.
inline constexpr int dot_lanes = 16;

/// Σ_i a_i b_i with lane l accumulating i ≡ l (mod dot_lanes) and a fixed pairwise reduction.
/// The order depends on n only, never on which column or how many columns are evaluated.
inline double dot(const double* FITLIB_RESTRICT a, const double* FITLIB_RESTRICT b, index_t n) {
  double acc[dot_lanes] = {};
  index_t i = 0;
  for (; i + dot_lanes <= n; i += dot_lanes)
    for (int l = 0; l < dot_lanes; ++l) acc[l] += a[i + l] * b[i + l];
  for (int l = 0; i + l < n; ++l) acc[l] += a[i + l] * b[i + l];
  for (int w = dot_lanes / 2; w > 0; w /= 2)
    for (int l = 0; l < w; ++l) acc[l] += acc[l + w];
  return acc[0];
}

/// y += alpha·x, element by element.
inline void axpy(double alpha, const double* FITLIB_RESTRICT x, double* FITLIB_RESTRICT y, index_t n) {
  for (index_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

}  // namespace fitlib::detail
