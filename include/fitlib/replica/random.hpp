// SPDX-License-Identifier: MIT
// Counter-based random streams (Philox4x32-10) with exact samplers that draw bitwise the same on every platform.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "fitlib/core/error.hpp"

namespace fitlib {

// Why everything below avoids <random> and <cmath>'s transcendental functions: a replica's
// pseudo-data must follow from (seed, replica index) alone on any machine. std::*_distribution
// algorithms are implementation-defined, and std::exp/std::log may differ by an ulp between C
// libraries (glibc, Apple, MSVC, CUDA), which changes a rejection decision now and then. So the
// samplers use only IEEE-754 operations that are correctly rounded everywhere (+ − × ÷, sqrt,
// fma, floor, frexp/ldexp), and every product that feeds a sum is an explicit std::fma, so that
// FMA contraction (-ffp-contract, -march) cannot change a result. Requires IEEE-754 doubles
// evaluated in double precision (not x87 extended precision) and no -ffast-math.

namespace detail {

/// ln 2 in two parts (fdlibm's split: the high part has 32 significant bits, so k·ln2_hi is exact).
inline constexpr double ln2_hi = 6.93147180369123816490e-01;
inline constexpr double ln2_lo = 1.90821492927058770002e-10;
inline constexpr double half_ln_2pi = 0.918938533204672741780329736406;

/// e^x from +, ×, fma and ldexp only: x = k·ln2 + r with |r| ≤ ½ln2, then a degree-13 Taylor
/// polynomial (truncation < 5e-18 relative). Within 1 ulp of the true value; what matters is
/// that it is the same function on every platform.
inline double portable_exp(double x) {
  if (std::isnan(x)) return x;
  if (x > 709.782712893384) return std::numeric_limits<double>::infinity();
  if (x < -745.2) return 0.0;
  const double k = std::floor(std::fma(x, 1.44269504088896340736, 0.5));
  const double r = std::fma(-k, ln2_lo, std::fma(-k, ln2_hi, x));
  // 1/j! for j = 13 … 0, evaluated by Horner's rule with fused multiply-adds.
  static constexpr double inv_fact[] = {1.0 / 6227020800.0, 1.0 / 479001600.0, 1.0 / 39916800.0, 1.0 / 3628800.0,
                                        1.0 / 362880.0,     1.0 / 40320.0,     1.0 / 5040.0,     1.0 / 720.0,
                                        1.0 / 120.0,        1.0 / 24.0,        1.0 / 6.0,        0.5,
                                        1.0,                1.0};
  double p = inv_fact[0];
  for (int j = 1; j < 14; ++j) p = std::fma(p, r, inv_fact[j]);
  return std::ldexp(p, static_cast<int>(k));
}

/// ln x from +, ×, ÷, fma and frexp only (fdlibm's reduction log(1+f) = f − (½f² − s(½f² + R)),
/// s = f/(2+f), with R's Taylor series in s² taken far enough for double precision).
inline double portable_log(double x) {
  if (std::isnan(x) || x < 0) return std::numeric_limits<double>::quiet_NaN();
  if (x == 0) return -std::numeric_limits<double>::infinity();
  if (std::isinf(x)) return x;
  int e = 0;
  double m = std::frexp(x, &e);  // x = m·2^e, m ∈ [½, 1)
  if (m < 0.70710678118654752440) {
    m *= 2;
    --e;
  }
  const double f = m - 1;  // exact (Sterbenz), |f| < 0.415
  const double s = f / (2 + f), z = s * s, hfsq = 0.5 * f * f;
  // R/z = Σ_{j≥1} 2 z^{j-1}/(2j+1); z ≤ 0.0295, so 12 terms leave < 1e-19.
  static constexpr double c[] = {2.0 / 25, 2.0 / 23, 2.0 / 21, 2.0 / 19, 2.0 / 17, 2.0 / 15,
                                 2.0 / 13, 2.0 / 11, 2.0 / 9,  2.0 / 7,  2.0 / 5,  2.0 / 3};
  double p = c[0];
  for (int j = 1; j < 12; ++j) p = std::fma(p, z, c[j]);
  const double dk = e;
  const double t = std::fma(-dk, ln2_lo, std::fma(-s, std::fma(z, p, hfsq), hfsq));
  return std::fma(dk, ln2_hi, f - t);
}

/// Stirling's error ln n! − [½ln(2πn) + n ln n − n] for n ≥ 16 (asymptotic series; the next term
/// is below 3e-20 there).
inline double stirling_error(double n) {
  const double nn = n * n;
  return (1.0 / 12 - (1.0 / 360 - (1.0 / 1260 - (1.0 / 1680 - (1.0 / 1188 - (691.0 / 360360 - 1.0 / 156 / nn) / nn) / nn) / nn) / nn) / nn) / n;
}

/// x·ln(x/m) + m − x without the cancellation of the direct form when x ≈ m (Loader 2000).
inline double poisson_deviance_part(double x, double m) {
  const double d = x - m;
  if (std::abs(d) < 0.1 * (x + m)) {
    double v = d / (x + m);
    double s = d * v;
    double ej = 2 * x * v;
    v *= v;
    for (int j = 1; j < 1000; ++j) {
      ej *= v;
      const double s1 = s + ej / (2 * j + 1);
      if (s1 == s) return s1;
      s = s1;
    }
    return s;
  }
  return std::fma(x, portable_log(x / m), m - x);
}

/// ln P(K = k) for K ~ Poisson(m), k a non-negative integer, m > 0. Small k directly (k! is exact);
/// larger k in Loader's saddle-point form, accurate to ~1e-16 absolute even for m ~ 1e15, where
/// the direct −m + k ln m − ln k! would lose everything to cancellation.
inline double poisson_log_pmf(double k, double m) {
  static constexpr double factorial[] = {1.0,       1.0,        2.0,         6.0,          24.0,          120.0,
                                         720.0,     5040.0,     40320.0,     362880.0,     3628800.0,     39916800.0,
                                         479001600.0, 6227020800.0, 87178291200.0, 1307674368000.0};
  if (k < 16) return std::fma(k, portable_log(m), -m) - portable_log(factorial[static_cast<int>(k)]);
  return -(stirling_error(k) + poisson_deviance_part(k, m)) - std::fma(0.5, portable_log(k), half_ln_2pi);
}

/// The 64 random bits of x mapped to (2j+1)·2⁻⁵³ with j the top 52 bits: uniform on a grid of
/// 2⁵² points symmetric about ½, never 0 or 1 (so log(u) and log(1−u) are finite), and exact.
constexpr double open_unit(std::uint64_t x) { return static_cast<double>(((x >> 12) << 1) | 1u) * 0x1p-53; }

}  // namespace detail

/// The Philox4x32-10 bijection (Salmon, Moraes, Dror, Shaw, "Parallel random numbers: as easy as
/// 1, 2, 3", SC'11): a keyed 128-bit permutation whose outputs for successive counters pass
/// BigCrush. Stateless, so any counter can be evaluated in any order, on any thread or device.
struct Philox4x32 {
  using Counter = std::array<std::uint32_t, 4>;
  using Key = std::array<std::uint32_t, 2>;

  static constexpr Counter apply(Counter c, Key k) {
    for (int round = 0; round < 10; ++round) {
      if (round > 0) {
        k[0] += 0x9E3779B9u;
        k[1] += 0xBB67AE85u;
      }
      const std::uint64_t p0 = std::uint64_t{0xD2511F53u} * c[0], p1 = std::uint64_t{0xCD9E8D57u} * c[2];
      const auto hi = [](std::uint64_t p) { return static_cast<std::uint32_t>(p >> 32); };
      const auto lo = [](std::uint64_t p) { return static_cast<std::uint32_t>(p); };
      c = {hi(p1) ^ c[1] ^ k[0], lo(p1), hi(p0) ^ c[3] ^ k[1], lo(p0)};
    }
    return c;
  }
};

/// Independent random streams of one replica. fitlib's own generators use the ids below `user`;
/// callers take any id from `user` up, e.g. `Stream{(1u << 16) + 3}`.
enum class Stream : std::uint32_t {
  data = 1,         ///< Poisson/Gaussian pseudo-data of the bins
  constraints = 2,  ///< global observables θ₀ (frequentist) or generating values θ (Bayesian)
  bootstrap = 3,    ///< Poisson(1) bootstrap weights of the bins
  split = 4,        ///< training/validation splits of the bins
  user = 1u << 16,  ///< first id reserved for callers
};

/// One random stream, identified by (seed, replica index, stream id, element). The element is a
/// bin or parameter index: giving each its own stream makes its draw independent of how many
/// numbers the other elements consumed, so a vector drawn whole, in shards, in any order or on
/// any device is bitwise the same.
///
/// Philox input: key = seed (64 bits); counter = {block, element, replica, stream}, so distinct
/// identities never share a counter. Each block yields two 64-bit numbers; a stream holds 2³²
/// blocks (2³³ uniforms), far more than any rejection sampler here consumes.
///
/// Models std::uniform_random_bit_generator (64-bit outputs) for callers that need that.
class RandomStream {
 public:
  using result_type = std::uint64_t;

  /// Largest mean `poisson` accepts: above 2⁵⁰ a double no longer resolves the sampler's +0.43
  /// offset and the integers near the mean become too coarse to be an exact draw.
  static constexpr double max_poisson_mean = 0x1p50;

  /// Throws `usage_error` when the replica index or the element does not fit in 32 bits.
  RandomStream(std::uint64_t seed, std::uint64_t replica, Stream stream, std::uint64_t element = 0)
      : key_{static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32)},
        counter_{0u, static_cast<std::uint32_t>(element), static_cast<std::uint32_t>(replica), static_cast<std::uint32_t>(stream)} {
    if (replica > 0xFFFFFFFFu)
      throw usage_error("replica index " + std::to_string(replica) + " does not fit in 32 bits; use indices below 2^32");
    if (element > 0xFFFFFFFFu)
      throw usage_error("stream element " + std::to_string(element) + " does not fit in 32 bits; use fewer than 2^32 bins or parameters");
  }

  static constexpr result_type min() { return 0; }
  static constexpr result_type max() { return std::numeric_limits<result_type>::max(); }

  /// The next 64 random bits.
  result_type operator()() {
    if (used_ == 2) refill();
    const std::size_t i = static_cast<std::size_t>(2 * used_++);
    return (std::uint64_t{block_[i]} << 32) | block_[i + 1];
  }

  /// Uniform on (0, 1), never 0 or 1 (see detail::open_unit).
  double uniform() { return detail::open_unit((*this)()); }

  /// Standard normal by Marsaglia's polar method (only sqrt and log, no sin/cos); the second
  /// value of each accepted pair is kept for the next call.
  double normal() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    for (;;) {
      // 2u − 1 is exact on the open_unit grid and never 0, so s > 0.
      const double u = std::fma(2.0, uniform(), -1.0), v = std::fma(2.0, uniform(), -1.0);
      const double s = std::fma(u, u, v * v);
      if (s >= 1) continue;
      const double f = std::sqrt(-2 * detail::portable_log(s) / s);
      spare_ = v * f;
      has_spare_ = true;
      return u * f;
    }
  }

  /// A Poisson(mean) count (an integer-valued double). Exact in distribution, up to the rounding
  /// of the pmf in double precision: inversion for mean < 10, Hörmann's transformed rejection with
  /// squeeze (PTRS) for mean ≥ 10. Throws `usage_error` unless 0 ≤ mean ≤ max_poisson_mean.
  double poisson(double mean) {
    if (!(mean >= 0 && mean <= max_poisson_mean))
      throw usage_error("Poisson mean " + std::to_string(mean) + " is outside [0, 2^50]; expectations must be finite and non-negative");
    if (mean == 0) return 0;
    return mean < 10 ? poisson_inversion(mean) : poisson_ptrs(mean);
  }

  /// A Gamma(shape, 1) variate by Marsaglia and Tsang's method (exact: a rejection method with a
  /// squeeze); for shape < 1 through Gamma(shape + 1)·U^{1/shape}. Throws `usage_error` unless
  /// shape is finite and > 0.
  double gamma(double shape) {
    if (!(shape > 0 && shape <= std::numeric_limits<double>::max()))
      throw usage_error("Gamma shape " + std::to_string(shape) + " must be finite and > 0");
    if (shape < 1) {
      const double g = gamma_large(shape + 1);
      return g * detail::portable_exp(detail::portable_log(uniform()) / shape);
    }
    return gamma_large(shape);
  }

 private:
  void refill() {
    if (exhausted_) throw usage_error("random stream exhausted after 2^32 blocks; split the draws over more elements");
    block_ = Philox4x32::apply(counter_, key_);
    exhausted_ = ++counter_[0] == 0;
    used_ = 0;
  }

  /// Sequential search of the CDF with one uniform. F stops growing once the pmf underflows
  /// relative to it; a u beyond the accumulated CDF (a 1e-16 event) or k = 60 (P(K ≥ 60) < 1e-26
  /// for mean < 10) is redrawn rather than looping on.
  double poisson_inversion(double mean) {
    const double p0 = detail::portable_exp(-mean);
    for (;;) {
      const double u = uniform();
      double k = 0, p = p0, cdf = p0;
      while (u > cdf && k < 60) {
        k += 1;
        p = p * mean / k;
        cdf += p;
      }
      if (u <= cdf) return k;
    }
  }

  /// W. Hörmann, "The transformed rejection method for generating Poisson random variables",
  /// Insurance: Mathematics and Economics 12 (1993) 39–45, algorithm PTRS, valid for mean ≥ 10.
  /// The squeeze (us ≥ 0.07, v ≤ v_r) accepts most candidates without a log; the rest are
  /// accepted against the exact pmf, so the output is exactly Poisson.
  double poisson_ptrs(double mean) {
    const double smu = std::sqrt(mean);
    const double b = std::fma(2.53, smu, 0.931);
    const double a = std::fma(0.02483, b, -0.059);
    const double inv_alpha = 1.1239 + 1.1328 / (b - 3.4);
    const double vr = 0.9277 - 3.6224 / (b - 2);
    for (;;) {
      const double u = uniform() - 0.5, v = uniform();  // both exact
      const double us = 0.5 - std::abs(u);
      const double k = std::floor(std::fma(2 * a / us + b, u, mean + 0.43));
      if (us >= 0.07 && v <= vr) return k;
      if (k < 0 || (us < 0.013 && v > us)) continue;
      if (detail::portable_log(v * inv_alpha / (a / (us * us) + b)) <= detail::poisson_log_pmf(k, mean)) return k;
    }
  }

  /// G. Marsaglia and W. W. Tsang, "A simple method for generating gamma variables", ACM TOMS 26
  /// (2000) 363–372, for shape ≥ 1.
  double gamma_large(double shape) {
    const double d = shape - 1.0 / 3.0, c = 1 / std::sqrt(9 * d);
    for (;;) {
      double x, t;
      do {
        x = normal();
        t = std::fma(c, x, 1.0);
      } while (t <= 0);
      const double v = t * t * t, u = uniform(), x2 = x * x;
      if (u < std::fma(-0.0331, x2 * x2, 1.0)) return d * v;
      if (detail::portable_log(u) < std::fma(d, (1 - v) + detail::portable_log(v), 0.5 * x2)) return d * v;
    }
  }

  Philox4x32::Key key_;
  Philox4x32::Counter counter_;
  Philox4x32::Counter block_{};
  int used_ = 2;  ///< 64-bit halves of block_ handed out; 2 = none left
  bool exhausted_ = false;
  bool has_spare_ = false;
  double spare_ = 0;
};

}  // namespace fitlib
