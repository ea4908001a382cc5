// SPDX-License-Identifier: MIT
// Row kernels with a fixed summation order, so every column of a batch is computed bitwise alike.
#pragma once

#include <Eigen/Core>
#include <cmath>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "fitlib/config.hpp"
#include "fitlib/core/types.hpp"

namespace fitlib::detail {

/// a·b + c, fused where the target has FMA (one rounding, and the compiler vectorizes it), so
/// the result never depends on whether the compiler chose to contract an expression.
FITLIB_ALWAYS_INLINE double fmadd(double a, double b, double c) {
#if defined(__FMA__) || defined(__CUDA_ARCH__)
  return std::fma(a, b, c);
#else
  return a * b + c;
#endif
}

/// Asks for the cache lines of x[0, count) ahead of use (a hint; never faults).
FITLIB_ALWAYS_INLINE void prefetch_lines(const double* x, index_t count) {
#if defined(__GNUC__) || defined(__clang__)
  for (index_t i = 0; i < count; i += 8) __builtin_prefetch(x + i, 0, 3);
#else
  (void)x;
  (void)count;
#endif
}

/// Width of the lane accumulators: 8 doubles, one AVX-512 (two AVX2) register per row and column;
/// the forward pass runs 8 rows at once, enough independent chains to hide the FMA latency.
inline constexpr int lanes = 8;

/// Eigen's widest packet for double on this target (its intrinsics, whatever the compiler's
/// auto-vectorizer prefers), and how many of them make up the lanes.
using Packet = Eigen::internal::packet_traits<double>::type;
inline constexpr int packet_size = Eigen::internal::packet_traits<double>::size;
inline constexpr int packets = lanes / packet_size;
static_assert(lanes % packet_size == 0);

/// L[r + j·ldl] = row_r · C_j for NR rows (stride ld) and NC columns of C (stride ldc), lane l
/// accumulating the i ≡ l (mod lanes), then a fixed pairwise reduction. A result's arithmetic
/// depends only on n, never on NR, NC or its neighbours, so batching columns changes no bit of any
/// result; batching loads each row chunk once for NC columns and keeps NR rows streaming at once
/// (more memory-level parallelism than one row after another).
template <int NR, int NC, bool Prefetch = false>
FITLIB_ALWAYS_INLINE void dot_block(const double* FITLIB_RESTRICT rows, index_t ld, const double* FITLIB_RESTRICT C, index_t ldc,
                                    index_t n, double* FITLIB_RESTRICT L, index_t ldl, const double* prefetch = nullptr) {
  using namespace Eigen::internal;
  Packet acc[NR][NC][packets];
  for (int r = 0; r < NR; ++r)
    for (int j = 0; j < NC; ++j)
      for (int k = 0; k < packets; ++k) acc[r][j][k] = pset1<Packet>(0.0);
  index_t i = 0;
  for (; i + lanes <= n; i += lanes)
    for (int k = 0; k < packets; ++k) {
      Packet c[NC];
      for (int j = 0; j < NC; ++j) c[j] = ploadu<Packet>(C + j * ldc + i + k * packet_size);
      for (int r = 0; r < NR; ++r) {
        if constexpr (Prefetch) if (k == 0) prefetch_lines(prefetch + r * ld + i, lanes);
        const Packet x = ploadu<Packet>(rows + r * ld + i + k * packet_size);
        for (int j = 0; j < NC; ++j) acc[r][j][k] = pmadd(x, c[j], acc[r][j][k]);
      }
    }
#if defined(__AVX512F__)
  if constexpr (packet_size == lanes) {
    // The same arithmetic in registers: the tail by a masked fused multiply-add of the lanes it
    // touches, then the pairwise reduction (l + 4, then l + 2, then l + 1) by halving the register.
    if (const index_t rem = n - i; rem > 0) {
      const __mmask8 m = static_cast<__mmask8>((1u << rem) - 1);
      Packet c[NC];
      for (int j = 0; j < NC; ++j) c[j] = _mm512_maskz_loadu_pd(m, C + j * ldc + i);
      for (int r = 0; r < NR; ++r) {
        const Packet x = _mm512_maskz_loadu_pd(m, rows + r * ld + i);
        for (int j = 0; j < NC; ++j) acc[r][j][0] = _mm512_mask3_fmadd_pd(x, c[j], acc[r][j][0], m);
      }
    }
    for (int r = 0; r < NR; ++r)
      for (int j = 0; j < NC; ++j) {
        const __m256d s4 = _mm256_add_pd(_mm512_castpd512_pd256(acc[r][j][0]), _mm512_extractf64x4_pd(acc[r][j][0], 1));
        const __m128d s2 = _mm_add_pd(_mm256_castpd256_pd128(s4), _mm256_extractf128_pd(s4, 1));
        L[r + j * ldl] = _mm_cvtsd_f64(_mm_add_sd(s2, _mm_unpackhi_pd(s2, s2)));
      }
    return;
  }
#endif
  for (int r = 0; r < NR; ++r)
    for (int j = 0; j < NC; ++j) {
      double a[lanes];
      for (int k = 0; k < packets; ++k) pstoreu(a + k * packet_size, acc[r][j][k]);
      for (int l = 0; i + l < n; ++l) a[l] = fmadd(rows[r * ld + i + l], C[j * ldc + i + l], a[l]);
      for (int w = lanes / 2; w > 0; w /= 2)
        for (int l = 0; l < w; ++l) a[l] += a[l + w];
      L[r + j * ldl] = a[0];
    }
}

/// L[p + j·nrows] = row_p · C_j for `nrows` rows (stride ld) and `ncols` columns of C (`[n × ncols]`),
/// requesting the rows at `prefetch` (the next block, same shape; may be null) from memory meanwhile.
inline void forward_rows(const double* rows, index_t ld, index_t nrows, const double* C, index_t ncols, index_t n, double* L,
                         const double* prefetch = nullptr) {
  index_t p = 0;
  for (; p + 8 <= nrows; p += 8) {
    index_t j = 0;
    if (prefetch && ncols > 0) {  // no columns (every point cached): nothing to compute, C may be empty
      dot_block<8, 1, true>(rows + p * ld, ld, C, n, n, L + p, nrows, prefetch + p * ld);
      j = 1;
    }
    for (; j + 2 <= ncols; j += 2) dot_block<8, 2>(rows + p * ld, ld, C + j * n, n, n, L + p + j * nrows, nrows);
    for (; j < ncols; ++j) dot_block<8, 1>(rows + p * ld, ld, C + j * n, n, n, L + p + j * nrows, nrows);
  }
  for (; p + 4 <= nrows; p += 4) {
    index_t j = 0;
    for (; j + 2 <= ncols; j += 2) dot_block<4, 2>(rows + p * ld, ld, C + j * n, n, n, L + p + j * nrows, nrows);
    for (; j < ncols; ++j) dot_block<4, 1>(rows + p * ld, ld, C + j * n, n, n, L + p + j * nrows, nrows);
  }
  for (; p < nrows; ++p) {
    index_t j = 0;
    for (; j + 2 <= ncols; j += 2) dot_block<1, 2>(rows + p * ld, ld, C + j * n, n, n, L + p + j * nrows, nrows);
    for (; j < ncols; ++j) dot_block<1, 1>(rows + p * ld, ld, C + j * n, n, n, L + p + j * nrows, nrows);
  }
}

/// acc[:, j] += Σ_r U[r + j·ldu] · row_r for NR rows (stride ld) and NC columns j, the rows added in
/// order r = 0, 1, … into each element (the order of one row-by-row axpy after another, so a
/// result never depends on NR or NC). The coefficients stay in registers for the whole pass and
/// each lane block of acc is loaded and stored once. The lane blocks run last to first: the
/// forward pass has just read the rows front to back, so their ends are the part still in L1.
/// `prefetch` (may be null) names rows of the same shape to request from memory meanwhile.
template <int NR, int NC>
FITLIB_ALWAYS_INLINE void backward_block(const double* FITLIB_RESTRICT rows, index_t ld, const double* FITLIB_RESTRICT U, index_t ldu,
                                         double* FITLIB_RESTRICT acc, index_t n, const double* prefetch) {
  using namespace Eigen::internal;
  Packet u[NR][NC];
  for (int r = 0; r < NR; ++r)
    for (int j = 0; j < NC; ++j) u[r][j] = pset1<Packet>(U[r + j * ldu]);
  const index_t full = n - n % packet_size;
  for (index_t i = full - packet_size; i >= 0; i -= packet_size) {
    Packet a[NC];
    for (int j = 0; j < NC; ++j) a[j] = ploadu<Packet>(acc + j * n + i);
    for (int r = 0; r < NR; ++r) {
      const Packet x = ploadu<Packet>(rows + r * ld + i);
      if (prefetch) prefetch_lines(prefetch + r * ld + i, packet_size);
      for (int j = 0; j < NC; ++j) a[j] = pmadd(u[r][j], x, a[j]);
    }
    for (int j = 0; j < NC; ++j) pstoreu(acc + j * n + i, a[j]);
  }
  for (int j = 0; j < NC; ++j)
    for (index_t t = full; t < n; ++t) {
      double a = acc[j * n + t];
      for (int r = 0; r < NR; ++r) a = fmadd(U[r + j * ldu], rows[r * ld + t], a);
      acc[j * n + t] = a;
    }
}

/// acc[:, j] += Σ_p U[p + j·nrows] · row_p for `nrows` rows and `ncols` columns (acc is `[n × ncols]`),
/// in groups of rows that keep the per-element order p = 0, 1, … While the rows come from cache,
/// the rows at `prefetch` (the next block, same shape; may be null) are requested from memory, so
/// the stream from memory does not pause for the backward pass.
inline void backward_rows(const double* rows, index_t ld, index_t nrows, const double* U, index_t ncols, index_t n, double* acc,
                          const double* prefetch = nullptr) {
  for (index_t j = 0; j < ncols;) {
    const index_t nc = ncols - j >= 4 ? 4 : ncols - j >= 2 ? 2 : 1;
    double* a = acc + j * n;
    index_t p = 0;
    auto group = [&]<int NR>() {
      const double* pf = prefetch ? prefetch + p * ld : nullptr;
      if (nc == 4) backward_block<(NR > 4 ? 4 : NR), 4>(rows + p * ld, ld, U + p + j * nrows, nrows, a, n, pf);
      else if (nc == 2) backward_block<NR, 2>(rows + p * ld, ld, U + p + j * nrows, nrows, a, n, pf);
      else backward_block<NR, 1>(rows + p * ld, ld, U + p + j * nrows, nrows, a, n, pf);
      p += nc == 4 && NR > 4 ? 4 : NR;
    };
    while (p + 8 <= nrows) group.template operator()<8>();
    while (p + 4 <= nrows) group.template operator()<4>();
    while (p < nrows) group.template operator()<1>();
    j += nc;
    prefetch = nullptr;
  }
}

/// The single-column forms, for the passes that need no batching.
inline double dot(const double* a, const double* b, index_t n) {
  double out;
  dot_block<1, 1>(a, 0, b, 0, n, &out, 0);
  return out;
}

/// y += alpha·x, element by element.
inline void axpy(double alpha, const double* FITLIB_RESTRICT x, double* FITLIB_RESTRICT y, index_t n) {
  for (index_t i = 0; i < n; ++i) y[i] = fmadd(alpha, x[i], y[i]);
}

}  // namespace fitlib::detail
