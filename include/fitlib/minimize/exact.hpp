// SPDX-License-Identifier: MIT
// The trust-exact subproblem: SciPy's nearly exact Moré–Sorensen solver on a dense Hessian.
#pragma once

#include <Eigen/Cholesky>
#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "fitlib/config.hpp"
#include "fitlib/core/error.hpp"
#include "fitlib/core/types.hpp"
#include "fitlib/minimize/subproblem.hpp"

namespace fitlib {

/// Options of the `Exact` subproblem solver.
struct ExactOptions {
  /// Most Moré–Sorensen iterations per solve (SciPy's `subproblem_maxiter`, 25 since 1.17;
  /// trust-region.md §0.1, §3.1); ≥ 1. SciPy's 0 = unbounded is not offered: it can hang (gh-12513).
  index_t maxiter = 25;

  /// For an H that `new_iterate` is told is positive semidefinite (the Gauss–Newton matrix), factorise
  /// H + λI in single precision (about 1.8× double's speed at n = 2000) and refine the step
  /// p = −(H + λI)⁻¹g in double until its residual is double's: ‖(H + λI)p + g‖_∞ ≤ n·eps·(‖H‖_∞ + λ)·‖p‖_∞,
  /// each refinement one solve with the factor and one product with H (O(n²)), at most 10. Where the
  /// single-precision factorisation fails or is not finite, or a refinement stops halving the residual, that
  /// H + λI is factorised in double as without the option. So each factorisation's step is double's to rounding
  /// (and bit for bit double's where single precision does not suffice, a condition number past ~10⁷), while the
  /// λ iteration's other uses of the factor (‖U⁻ᵀp‖, the smallest singular value's estimate) see the single
  /// factor: the λ reached, and so the step, can differ from double's within the stopping rules (‖p‖ within
  /// 10 % of the radius). H not declared semidefinite (∇²f, which can be indefinite, where a single-precision
  /// factor could pass for positive definite) is factorised in double. Off by default: SciPy's iterates.
  /// fitlib-fit's trust-gauss-newton[-krylov] turn it on (methods.hpp).
  bool single_precision_factor = false;

  /// Throws `std::invalid_argument` naming the field and its allowed range.
  void validate() const {
    if (maxiter < 1) throw std::invalid_argument("ExactOptions::maxiter must be ≥ 1, got " + std::to_string(maxiter));
  }
};

/// One Cholesky factorisation of H + λI tried during a solve, with LAPACK's `info`: 0 on
/// success, else the 1-based column of the first non-positive pivot.
struct CholeskyAttempt {
  double lambda = 0;
  index_t info = 0;
  bool single = false;  ///< the factor used is single precision's (ExactOptions::single_precision_factor)
};

namespace detail::exact {

/// Solves U x = b in place for upper-triangular U, column by column (reference `dtrsm`'s order).
inline void solve_upper(ConstBlockView<double> U, double* x) {
  for (index_t j = U.rows - 1; j >= 0; --j) {
    if (x[j] == 0) continue;
    x[j] /= U(j, j);
    const double xj = x[j];
    const double* uj = U.col(j);
    for (index_t i = 0; i < j; ++i) x[i] -= xj * uj[i];
  }
}

/// Solves Uᵀ x = b in place for upper-triangular U, one dot product per row (reference `dtrsm`'s order).
inline void solve_upper_transposed(ConstBlockView<double> U, double* x) {
  for (index_t i = 0; i < U.rows; ++i) {
    const double* ui = U.col(i);
    double t = x[i];
    for (index_t k = 0; k < i; ++k) t -= ui[k] * x[k];
    x[i] = t / ui[i];
  }
}

/// The upper Cholesky factor U of B = H + shift·I (B = UᵀU), reading only the upper triangle of
/// H, as LAPACK `dpotrf('U')` does. Returns 0 on success, else the 1-based column k of the
/// first non-positive (or NaN) pivot. On failure the leading (k−1)×(k−1) factor and
/// U[0:k−1, k−1] are valid, which is what `singular_leading_submatrix` needs (trust-region.md
/// §3.5), and U(k−1, k−1) holds the failed pivot. The strictly lower triangle of U is zeroed.
index_t upper_cholesky(ConstBlockView<double> H, double shift, BlockView<double> U);
#if FITLIB_DEFINITIONS
FITLIB_PREBUILT_INLINE index_t upper_cholesky(ConstBlockView<double> H, double shift, BlockView<double> U) {
  using Map = Eigen::Map<Eigen::MatrixXd, 0, Eigen::OuterStride<>>;
  const index_t n = H.rows;
  Map u(U.data, n, n, Eigen::OuterStride<>(U.ld));
  // First Eigen's blocked factorisation in place (GEMM speed, as LAPACK's dpotrf that SciPy
  // calls); only when it fails, the column-by-column one below, which finds the failing column
  // and leaves the partial factor the Moré–Sorensen bound needs (§3.5).
  for (index_t j = 0; j < n; ++j) {
    for (index_t i = 0; i <= j; ++i) u(i, j) = H(i, j);
    u(j, j) += shift;
    for (index_t i = j + 1; i < n; ++i) u(i, j) = 0;
  }
  {
    Eigen::LLT<Eigen::Ref<Eigen::MatrixXd, 0, Eigen::OuterStride<>>, Eigen::Upper> blocked(u);
    // Eigen lets a NaN pivot through (it only rejects x ≤ 0); a NaN anywhere reaches the diagonal.
    if (blocked.info() == Eigen::Success && u.diagonal().allFinite()) return 0;
  }
  for (index_t j = 0; j < n; ++j) {
    // U[0:j, j] solves U[0:j, 0:j]ᵀ x = B[0:j, j]: a level-2 triangular solve that Eigen
    // vectorizes without allocating (the right-hand side is a contiguous column).
    auto col = u.col(j).head(j);
    const double* hj = H.col(j);
    for (index_t i = 0; i < j; ++i) col[i] = hj[i];
    if (j > 0) u.topLeftCorner(j, j).triangularView<Eigen::Upper>().transpose().solveInPlace(col);
    const double pivot = (hj[j] + shift) - col.squaredNorm();
    if (!(pivot > 0)) {
      u(j, j) = pivot;
      return j + 1;
    }
    u(j, j) = std::sqrt(pivot);
  }
  return 0;
}
#endif

/// The upper Cholesky factor of B = H + shift·I in single precision, widened into U (its strictly lower
/// triangle zeroed): B's upper triangle times 4⁻ᵏ, with k from B's largest entry (exact), is factorised in
/// `Uf` (n×n floats, column-major) by Eigen's blocked LLT, and U = 2ᵏ·Uf. False, U unspecified, where B
/// is not finite or zero, or the factorisation fails or has a non-finite pivot.
bool upper_cholesky_single(ConstBlockView<double> H, double shift, float* Uf, BlockView<double> U);
#if FITLIB_DEFINITIONS
FITLIB_PREBUILT_INLINE bool upper_cholesky_single(ConstBlockView<double> H, double shift, float* Uf, BlockView<double> U) {
  const index_t n = H.rows;
  double largest = 0;
  for (index_t j = 0; j < n; ++j)
    for (index_t i = 0; i <= j; ++i) largest = std::max(largest, std::abs(i == j ? H(i, j) + shift : H(i, j)));
  if (!(largest > 0) || !std::isfinite(largest)) return false;
  const int k = std::ilogb(largest) / 2;  // B·4⁻ᵏ's largest entry in [1/2, 4)
  const double down = std::ldexp(1.0, -2 * k), up = std::ldexp(1.0, k);  // powers of two: exact products
  Eigen::Map<Eigen::MatrixXf> uf(Uf, n, n);
  for (index_t j = 0; j < n; ++j)
    for (index_t i = 0; i <= j; ++i) uf(i, j) = static_cast<float>((i == j ? H(i, j) + shift : H(i, j)) * down);
  {
    Eigen::LLT<Eigen::Ref<Eigen::MatrixXf>, Eigen::Upper> blocked(uf);  // reads and writes the upper triangle only
    if (blocked.info() != Eigen::Success || !uf.diagonal().allFinite()) return false;
  }
  for (index_t j = 0; j < n; ++j) {
    double* uj = U.col(j);
    for (index_t i = 0; i <= j; ++i) uj[i] = static_cast<double>(uf(i, j)) * up;
    for (index_t i = j + 1; i < n; ++i) uj[i] = 0;
  }
  return true;
}
#endif

/// The Cline–Moler–Stewart–Wilkinson estimate of U's smallest singular value and its right
/// singular vector (trust-region.md §3.5): the ±1 right-hand side e of Uᵀw = e is chosen
/// greedily, one component at a time, to make w large (a tie picks +1); then U v = w and
/// s = ‖w‖/‖v‖, z = v/‖v‖, so that ‖U z‖ = s and ‖z‖ = 1. O(n²), no allocation: z, w and pvec
/// (the running partial sums Uᵀ[k+1:, 0:k]·w[0:k]) are length-n workspaces.
inline double estimate_smallest_singular_value(ConstBlockView<double> U, double* z, double* w, double* pvec) {
  const index_t n = U.rows;
  std::fill(pvec, pvec + n, 0.0);
  for (index_t k = 0; k < n; ++k) {
    const double ukk = U(k, k);
    const double wp = (1 - pvec[k]) / ukk, wm = (-1 - pvec[k]) / ukk;
    // Row k of U right of the diagonal is column k of Uᵀ below it (strided in column-major).
    double sum_p = 0, sum_m = 0;
    for (index_t j = k + 1; j < n; ++j) {
      sum_p += std::abs(pvec[j] + wp * U(k, j));
      sum_m += std::abs(pvec[j] + wm * U(k, j));
    }
    const double wk = std::abs(wp) + sum_p >= std::abs(wm) + sum_m ? wp : wm;
    w[k] = wk;
    for (index_t j = k + 1; j < n; ++j) pvec[j] = pvec[j] + wk * U(k, j);
  }
  std::copy(w, w + n, z);
  solve_upper(U, z);
  const double v_norm = norm_sequential(z, n), w_norm = norm_sequential(w, n);
  for (index_t i = 0; i < n; ++i) z[i] /= v_norm;
  return w_norm / v_norm;
}

/// For a Cholesky of B that failed at the 1-based column k with the partial factor U: returns
/// δ ≥ 0 such that B + δ e_k e_kᵀ has a singular leading k×k block, and writes its null vector v
/// (v[k−1] = 1, v[0:k−1] = −U[0:k−1, 0:k−1]⁻¹ U[0:k−1, k−1], zero after k). Then
/// vᵀ(B + δ e_k e_kᵀ)v = 0, so λ₁(B) ≤ −δ/‖v‖² (Moré–Sorensen; trust-region.md §3.5).
/// `b_kk` is B[k−1, k−1] as B holds it (H's diagonal entry plus the shift, rounded once).
inline double singular_leading_submatrix(ConstBlockView<double> U, index_t k, double b_kk, double* v) {
  const index_t n = U.rows, m = k - 1;
  const double* uk = U.col(m);
  double sum = 0;
  for (index_t i = 0; i < m; ++i) sum += uk[i] * uk[i];
  std::fill(v, v + n, 0.0);
  v[m] = 1;
  for (index_t i = 0; i < m; ++i) v[i] = -uk[i];
  solve_upper(ConstBlockView<double>(U.data, m, m, U.ld), v);
  return sum - b_kk;
}

/// Exact's dense side on the host (the `exact_factorization` below): H and its upper Cholesky factor U
/// in host memory, the factorisations, solves and estimates above, in reference LAPACK/BLAS order, so
/// that Exact reproduces SciPy's iterates. Offers single-precision factorisations
/// (ExactOptions::single_precision_factor).
class HostFactorization {
 public:
  static constexpr bool offers_single_precision = true;

  /// Sizes the workspaces for n parameters (and n×n floats where `single`).
  void reset(index_t n, bool single) {
    n_ = n;
    const auto nn = static_cast<std::size_t>(n) * static_cast<std::size_t>(n), n1 = static_cast<std::size_t>(n);
    H_.assign(nn, 0.0);
    U_.assign(nn, 0.0);  // its strictly lower triangle stays zero for good
    for (auto* v : {&w_, &pvec_}) v->assign(n1, 0.0);
    Uf_.assign(single ? nn : 0, 0.0f);
  }

  /// Keeps H (`[n × n]`, both triangles).
  void set_matrix(ConstBlockView<double> H) {
    for (index_t j = 0; j < n_; ++j) std::copy(H.col(j), H.col(j) + n_, H_.data() + j * n_);
  }

  /// Factors H + λI (upper_cholesky); LAPACK's info.
  index_t factor(double lambda) { return upper_cholesky(matrix(), lambda, factor_view()); }
  /// Factors H + λI in single precision (upper_cholesky_single); false where that fails.
  bool factor_single(double lambda) { return upper_cholesky_single(matrix(), lambda, Uf_.data(), factor_view()); }

  /// x ← (UᵀU)⁻¹x.
  void solve(double* x) const {
    solve_upper_transposed(factor(), x);
    solve_upper(factor(), x);
  }
  /// x ← U⁻ᵀx.
  void solve_transposed(double* x) const { solve_upper_transposed(factor(), x); }

  /// U's smallest singular value s and a unit z with ‖Uz‖ = s (estimate_smallest_singular_value).
  double smallest_singular_value(double* z) { return estimate_smallest_singular_value(factor(), z, w_.data(), pvec_.data()); }

  /// After factor(λ) failed with info k: δ and v of singular_leading_submatrix (`b_kk` = H_kk + λ).
  double leading_null_vector(index_t k, double b_kk, double* v) const { return singular_leading_submatrix(factor(), k, b_kk, v); }

  /// hx = (H + shift·I)·x, each row summed in column order (reference `dgemv` on SciPy's row-major H).
  void times(const double* x, double shift, double* hx) const {
    std::fill(hx, hx + n_, 0.0);
    for (index_t j = 0; j < n_; ++j) {
      const double* hj = H_.data() + j * n_;
      const double xj = x[j];
      for (index_t i = 0; i < j; ++i) hx[i] += hj[i] * xj;
      hx[j] += (hj[j] + shift) * xj;
      for (index_t i = j + 1; i < n_; ++i) hx[i] += hj[i] * xj;
    }
  }

 private:
  ConstBlockView<double> matrix() const { return {H_.data(), n_, n_}; }
  ConstBlockView<double> factor() const { return {U_.data(), n_, n_}; }
  BlockView<double> factor_view() { return {U_.data(), n_, n_}; }

  index_t n_ = 0;
  std::vector<double> H_, U_;  // n×n, column-major
  std::vector<double> w_, pvec_;
  std::vector<float> Uf_;  // n×n with single precision, else empty
};

}  // namespace detail::exact

/// What `BasicExact` needs from where H lives (host memory: detail::exact::HostFactorization; a device:
/// device::LayerFactorization). Vectors are host arrays of length n; only they and scalars cross:
/// - `reset(n, single)` sizes it; `set_matrix(H)` takes a new H (`[n × n]`, host, both triangles);
/// - `factor(λ)`: the upper Cholesky factor U of H + λI (H + λI = UᵀU), LAPACK's info (0, or the 1-based
///   column of the first non-positive pivot); `factor_single(λ)` likewise in single precision, false on
///   failure, where `offers_single_precision`;
/// - `solve(x)`: x ← (UᵀU)⁻¹x; `solve_transposed(x)`: x ← U⁻ᵀx (after a successful factor);
/// - `smallest_singular_value(z)`: an estimate s ≥ σ_min(U) and a unit z with ‖Uz‖ = s;
/// - `leading_null_vector(k, b_kk, v)`: after factor failed with info k, δ ≥ 0 and v (v_k = 1, zero past k)
///   with vᵀ(H + λI + δ e_k e_kᵀ)v = 0 (§3.5); or, where it cannot compute them, δ = 0 and v = e_k (then λ itself is
///   the bound, weaker and still valid);
/// - `times(x, shift, hx)`: hx = (H + shift·I)x.
template <class F>
concept exact_factorization = requires(F& f, const F& cf, index_t n, ConstBlockView<double> H, double lambda, double* x, const double* cx) {
  { F::offers_single_precision } -> std::convertible_to<bool>;
  f.reset(n, true);
  f.set_matrix(H);
  { f.factor(lambda) } -> std::convertible_to<index_t>;
  f.solve(x);
  f.solve_transposed(x);
  { f.smallest_singular_value(x) } -> std::convertible_to<double>;
  { f.leading_null_vector(n, lambda, x) } -> std::convertible_to<double>;
  f.times(cx, lambda, x);
};
static_assert(exact_factorization<detail::exact::HostFactorization>);

/// SciPy's `trust-exact` subproblem (`IterativeSubproblem`, current semantics ≥ 1.18): nearly
/// exact Moré–Sorensen iterations on λ with Cholesky factorisations of H + λI, as specified in
/// trust-region.md §3. It reproduces SciPy's steps, λ and Cholesky sequence on every reference
/// case, with these deliberate deviations (each cited where it is made): λ_new is clamped at 0
/// (§6.1); a hard-case candidate is taken only if it lowers the model (§6.3); a solve in which no
/// factorisation ever succeeded (SciPy: UnboundLocalError) falls back to the Cauchy step, or for
/// g = 0 to the negative-curvature direction of the last failed pivot (§3.4).
///
/// The algorithm is written once over where H and its factor live (`exact_factorization`): `Exact` keeps them
/// in host memory; cuda::Exact (fitlib/cuda/exact.cuh) on a GPU, where only n-vectors and scalars cross per
/// λ iteration.
///
/// `solve` allocates nothing on the host; `reset(n)` sizes every workspace (two n×n matrices and a few
/// vectors, and n×n floats with ExactOptions::single_precision_factor).
template <exact_factorization Factorization>
class BasicExact {
 public:
  /// Exact factorises the dense Hessian; it never calls the Hessian-vector product.
  static constexpr bool needs_hessian = true;

  /// `factorization`: where H and its factors live (cuda::Exact: on which device).
  explicit BasicExact(ExactOptions options = {}, Factorization factorization = {}) : options_(options), factorization_(std::move(factorization)) {
    options_.validate();
  }

  const ExactOptions& options() const { return options_; }

  /// Sizes the workspaces for n parameters and forgets any iterate.
  void reset(index_t n) {
    if (n < 1) throw usage_error("Exact::reset: the number of parameters must be ≥ 1, got " + std::to_string(n));
    n_ = n;
    const auto n1 = static_cast<std::size_t>(n);
    factorization_.reset(n, single_precision_available());
    for (auto* v : {&g_, &p_, &w_, &z_, &v_, &work_, &hp_, &diagonal_}) v->assign(n1, 0.0);
    refined_.assign(single_precision_available() ? n1 : 0, 0.0);
    single_precision_ = single_factor_ = false;
    attempts_.clear();
    attempts_.reserve(static_cast<std::size_t>(2 * options_.maxiter));  // ≤ 2 factorisations per iteration
    estimates_.clear();
    estimates_.reserve(static_cast<std::size_t>(options_.maxiter));  // ≤ 1 estimate per iteration
    niter_ = 0;
    have_iterate_ = false;
  }

  /// Starts a new iterate: copies g and the dense symmetric Hessian H (column-major n×n; only the
  /// upper triangle enters the factorisations, all of it the bounds and the model) and computes
  /// the per-iterate bounds of trust-region.md §3.2. Forgets the λ lower bound of the last iterate.
  /// `semidefinite`: H is positive semidefinite by construction (ExactOptions::single_precision_factor).
  void new_iterate(std::span<const double> g, ConstBlockView<double> H, bool semidefinite = false) {
    if (n_ == 0) throw usage_error("Exact::new_iterate: call reset(n) first");
    if (static_cast<index_t>(g.size()) != n_ || H.rows != n_ || H.cols != n_ || H.ld < n_)
      throw usage_error("Exact::new_iterate: expected a gradient of length " + std::to_string(n_) + " and a " + std::to_string(n_) +
                        "×" + std::to_string(n_) + " Hessian, got length " + std::to_string(g.size()) + " and " +
                        std::to_string(H.rows) + "×" + std::to_string(H.cols));
    std::copy(g.begin(), g.end(), g_.begin());
    factorization_.set_matrix(H);

    // Gershgorin bounds in SciPy's form (H_ii ± |H_ii| ∓ r_i with r_i the full absolute row sum,
    // to match its rounding), ‖H‖_∞ from the same row sums and ‖H‖_F: true matrix norms, ≥ ‖H‖₂ (§6.2).
    std::fill(work_.begin(), work_.end(), 0.0);
    double fro2 = 0;
    for (index_t j = 0; j < n_; ++j)
      for (index_t i = 0; i < n_; ++i) {
        const double h = H(i, j);
        work_[static_cast<std::size_t>(i)] += std::abs(h);
        fro2 += h * h;
      }
    gershgorin_lb_ = std::numeric_limits<double>::infinity();
    gershgorin_ub_ = -std::numeric_limits<double>::infinity();
    hess_inf_ = 0;
    min_diag_ = std::numeric_limits<double>::infinity();
    for (index_t i = 0; i < n_; ++i) {
      const double d = H(i, i), r = work_[static_cast<std::size_t>(i)];
      diagonal_[static_cast<std::size_t>(i)] = d;
      gershgorin_lb_ = std::min(gershgorin_lb_, d + std::abs(d) - r);
      gershgorin_ub_ = std::max(gershgorin_ub_, d - std::abs(d) + r);
      hess_inf_ = std::max(hess_inf_, r);
      min_diag_ = std::min(min_diag_, d);
    }
    hess_fro_ = std::sqrt(fro2);
    jac_mag_ = detail::norm_sequential(g_.data(), n_);
    // Below this gradient norm back substitution is unreliable (§3.1: n·eps·‖H‖_∞).
    close_to_zero_ = static_cast<double>(n_) * std::numeric_limits<double>::epsilon() * hess_inf_;
    previous_radius_ = -1;
    lambda_lb_ = 0;
    // Single precision only where the step is wanted (g not ≈ 0) and cannot be mistaken for positive definite.
    single_precision_ = options_.single_precision_factor && semidefinite && jac_mag_ > close_to_zero_;
    have_iterate_ = true;
  }

  /// Solves min gᵀp + ½pᵀHp subject to ‖p‖ ≤ radius (SciPy's stopping rules: ‖p‖ within 10 % of
  /// the radius, or the hard-case certificate; §3.6) and writes p. Called again on the same iterate
  /// with a smaller radius (after a rejected step), it starts from the λ lower bound it proved
  /// before (§3.3). `hvp` is not used: the model comes from the dense H. The reported λ is SciPy's
  /// final `lambda_current` (p's multiplier on every converged exit), 0 for a fallback step.
  /// A non-finite g or H gives `failed` at once (SciPy would return NaN steps).
  template <class Hvp>
  SubproblemStep solve(double radius, Hvp&& /*hvp*/, std::span<double> p) {
    if (!have_iterate_) throw usage_error("Exact::solve: call new_iterate(g, H) first");
    if (static_cast<index_t>(p.size()) != n_)
      throw usage_error("Exact::solve: the step has length " + std::to_string(p.size()) + ", expected " + std::to_string(n_));
    if (!(radius > 0)) throw usage_error("Exact::solve: the trust radius must be > 0, got " + std::to_string(radius));

    attempts_.clear();
    estimates_.clear();
    niter_ = 0;
    SubproblemStep step;
    step.hvps = 0;
    // trust-exact with a callable Hessian: SciPy's m(p) is H @ p, not a user hessp call, and the
    // reference runs record user_calls Hp = 0 (trust-region.md §1.2).
    step.scipy_hvps = 0;
    if (!std::isfinite(jac_mag_) || !std::isfinite(hess_inf_) || !std::isfinite(hess_fro_)) {
      std::fill(p.begin(), p.end(), 0.0);
      step.failed = true;
      return step;
    }

    Iteration it = initial_bracket(radius);
    while (niter_ < options_.maxiter) {
      // After a successful trial factorisation in (A1) the factor of H + λ_new I is reused, not
      // recomputed (SciPy ≥ 1.18's `U = c`, §0.1).
      if (it.have_factor) {
        it.have_factor = false;
      } else {
        it.info = factorize(it.lambda);
      }
      ++niter_;

      if (it.info == 0 && jac_mag_ > close_to_zero_) {
        if (positive_definite(it, radius)) break;  // (A)
      } else if (it.info == 0) {
        if (zero_gradient(it, radius)) break;  // (B)
      } else {
        not_positive_definite(it);  // (C)
      }
    }
    // Past maxiter SciPy returns the last computed p with hits_boundary = true (§3.4); so do we.
    lambda_lb_ = it.lb;
    previous_radius_ = radius;
    step.lambda = it.lambda;
    if (!it.have_step) {
      // No factorisation succeeded within maxiter: SciPy's p is unbound there (UnboundLocalError,
      // §3.4); we define the case instead of failing the whole minimisation.
      step.lambda = 0;
      if (!fallback_step(radius, it.have_failed_pivot, it.hits_boundary)) {
        std::fill(p.begin(), p.end(), 0.0);
        step.failed = true;
        step.hits_boundary = false;
        return step;
      }
    }
    std::copy(p_.begin(), p_.end(), p.begin());
    step.hits_boundary = it.hits_boundary;
    step.model = it.model_known ? it.model : model_of(p_.data());
    return step;
  }

  /// Subproblem iterations of the last solve (SciPy's `niter`).
  index_t niter() const { return niter_; }
  /// Every Cholesky factorisation of the last solve, in order (the reference data's `cholesky_attempts`).
  std::span<const CholeskyAttempt> cholesky_attempts() const { return attempts_; }
  /// Every smallest-singular-value estimate s of the last solve (the reference's `smallest_sv_estimates`).
  std::span<const double> singular_value_estimates() const { return estimates_; }
  /// The λ lower bound the last solve ended with; reused by a solve at a smaller radius (SciPy's `lambda_lb`).
  double lambda_lower_bound() const { return lambda_lb_; }

 private:
  static constexpr double theta = 0.01;  // UPDATE_COEFF, CGT (7.3.14); §3.1
  static constexpr double k_easy = 0.1;  // §3.6
  static constexpr double k_hard = 0.2;  // §3.6

  /// ExactOptions::single_precision_factor, where the factorization offers it.
  bool single_precision_available() const { return Factorization::offers_single_precision && options_.single_precision_factor; }

  /// The Moré–Sorensen iteration's state within one solve (§3.3): λ, its bracket [lb, ub], the last
  /// factorisation's info, and what the cases have left (a step in p_, a known model value).
  struct Iteration {
    double lambda = 0, lb = 0, ub = 0;
    index_t info = 0;
    bool hits_boundary = true, have_factor = false, have_step = false, model_known = false;
    bool have_failed_pivot = false;  // v_ holds the null vector of the last failed pivot (C)
    double model = 0;
  };

  /// The Cholesky factor of H + λI, recorded in attempts_; LAPACK's info. For a semidefinite H
  /// under single_precision_factor first in single precision, kept only where the step it gives refines
  /// to double's residual (into refined_); else in double.
  index_t factorize(double lambda) {
    single_factor_ = false;
    if constexpr (Factorization::offers_single_precision)
      single_factor_ = single_precision_ && factorization_.factor_single(lambda) && refine(lambda);
    const index_t info = single_factor_ ? 0 : static_cast<index_t>(factorization_.factor(lambda));
    attempts_.push_back({lambda, info, single_factor_});  // within the reserved capacity: no allocation
    return info;
  }

  /// p = −(H + λI)⁻¹g into refined_ from the single-precision factor, refined in double: r = −g − (H + λI)p,
  /// p += (UᵀU)⁻¹r, until ‖r‖_∞ ≤ n·eps·(‖H‖_∞ + λ)·‖p‖_∞ (true), or false where a refinement fails to halve
  /// ‖r‖_∞, r or p is not finite, or 10 refinements did not suffice.
  bool refine(double lambda) {
    double* p = refined_.data();
    double* r = work_.data();
    for (index_t i = 0; i < n_; ++i) p[i] = -g_[static_cast<std::size_t>(i)];
    factorization_.solve(p);
    const double tolerance = static_cast<double>(n_) * std::numeric_limits<double>::epsilon() * (hess_inf_ + lambda);
    double last = std::numeric_limits<double>::infinity();
    for (int refinements = 0;; ++refinements) {
      hess_times(p, lambda);
      double r_max = 0, p_max = 0, sum = 0;  // the sum carries a NaN, which std::max drops
      for (index_t i = 0; i < n_; ++i) {
        r[i] = -g_[static_cast<std::size_t>(i)] - hp_[static_cast<std::size_t>(i)];
        r_max = std::max(r_max, std::abs(r[i]));
        p_max = std::max(p_max, std::abs(p[i]));
        sum += std::abs(r[i]) + std::abs(p[i]);
      }
      if (!std::isfinite(sum)) return false;
      if (r_max <= tolerance * p_max) return true;
      if (refinements == 10 || !(r_max <= 0.5 * last)) return false;  // stalled
      last = r_max;
      factorization_.solve(r);
      for (index_t i = 0; i < n_; ++i) p[i] += r[i];
    }
  }

  /// The factor's smallest singular value (its vector into z_), recorded in estimates_.
  double estimate() {
    const double s = factorization_.smallest_singular_value(z_.data());
    estimates_.push_back(s);
    return s;
  }

  /// Initial bracket and guess (§3.3, CGT §7.3.8). The stored lower bound holds for any smaller
  /// radius, because λ*(Δ) does not increase with Δ.
  Iteration initial_bracket(double radius) const {
    Iteration it;
    it.ub = std::max(0.0, jac_mag_ / radius + std::min(std::min(-gershgorin_lb_, hess_fro_), hess_inf_));
    it.lb = std::max(std::max(0.0, -min_diag_), jac_mag_ / radius - std::min(std::min(gershgorin_ub_, hess_fro_), hess_inf_));
    if (radius < previous_radius_) it.lb = std::max(lambda_lb_, it.lb);
    it.lambda = it.lb == 0 ? 0.0 : safeguarded(it.lb, it.ub);
    return it;
  }

  /// (A) H + λI is positive definite: p(λ) = −(H + λI)⁻¹g. True when the solve is done.
  bool positive_definite(Iteration& it, double radius) {
    const double* g = g_.data();
    double* pp = p_.data();
    if (single_factor_) {
      std::copy(refined_.begin(), refined_.end(), pp);
    } else {
      for (index_t i = 0; i < n_; ++i) pp[i] = -g[i];
      factorization_.solve(pp);
    }
    it.have_step = true;
    const double p_norm = detail::norm_sequential(pp, n_);
    if (p_norm <= radius && it.lambda == 0) {  // the Newton step is interior
      it.hits_boundary = false;
      return true;
    }
    std::copy(pp, pp + n_, w_.begin());
    factorization_.solve_transposed(w_.data());
    const double w_norm = detail::norm_sequential(w_.data(), n_);
    const double ratio = p_norm / w_norm;
    // Newton's step on 1/‖p(λ)‖ − 1/Δ (N&W 4.44).
    const double lambda_new = it.lambda + ratio * ratio * (p_norm - radius) / radius;
    if (p_norm < radius) return inside(it, radius, lambda_new);
    return outside(it, radius, p_norm, lambda_new);
  }

  /// (A1) Inside: λ is too large, or this is the hard case. Try p + τz with z the estimated
  /// smallest singular vector of U, taking the boundary root of smaller |τ|.
  bool inside(Iteration& it, double radius, double lambda_new) {
    double* pp = p_.data();
    const double lambda = it.lambda;
    const double s = estimate();
    const auto roots = boundary_intersections(p_, z_, radius);
    const double tau = std::abs(roots.upper) < std::abs(roots.lower) ? roots.upper : roots.lower;
    const double quadratic = quadratic_form_shifted(pp, lambda);  // pᵀ(H + λI)p
    const double relative_error = tau * tau * (s * s) / (quadratic + lambda * (radius * radius));
    if (relative_error <= k_hard) {
      for (index_t i = 0; i < n_; ++i) work_[static_cast<std::size_t>(i)] = pp[i] + tau * z_[static_cast<std::size_t>(i)];
      const double candidate = model_of(work_.data());
      // Deviation (§6.3): take the candidate only if it lowers the model; with λ ≥ 0 (§6.1)
      // the k_hard test implies this in exact arithmetic, so SciPy's iterates are unchanged.
      if (candidate < 0) {
        std::copy(work_.begin(), work_.end(), pp);
        it.model = candidate;
        it.model_known = true;
        return true;
      }
    }
    it.ub = lambda;
    it.lb = std::max(it.lb, lambda - s * s);
    // Deviation (§6.1): SciPy does not clamp λ_new; a factorisation that succeeds at λ < 0
    // would push the bracket negative. Every recorded negative λ_new failed at 0 as well.
    lambda_new = std::max(lambda_new, 0.0);
    if (factorize(lambda_new) == 0) {
      it.lambda = lambda_new;
      it.have_factor = true;
      it.info = 0;
    } else {
      it.lb = std::max(it.lb, lambda_new);  // a failed factorisation proves λ_new ≤ −λ₁ ≤ λ* (§6 'extra')
      it.lambda = safeguarded(it.lb, it.ub);
    }
    return false;
  }

  /// (A2) Outside or on the boundary: stop within k_easy; else Newton from the left.
  static bool outside(Iteration& it, double radius, double p_norm, double lambda_new) {
    if (std::abs(p_norm - radius) / radius <= k_easy) return true;
    it.lb = it.lambda;
    it.lambda = lambda_new;
    return false;
  }

  /// (B) ‖g‖ ≈ 0: the step is a boundary step along the estimated smallest singular vector. True when
  /// the solve is done.
  bool zero_gradient(Iteration& it, double radius) {
    double* pp = p_.data();
    const double lambda = it.lambda;
    if (lambda == 0) {
      std::fill(pp, pp + n_, 0.0);
      it.have_step = true;
      it.hits_boundary = false;
      return true;
    }
    const double s = estimate();
    for (index_t i = 0; i < n_; ++i) pp[i] = radius * z_[static_cast<std::size_t>(i)];
    it.have_step = true;
    if (radius * radius * (s * s) <= k_hard * lambda * (radius * radius)) return true;
    it.ub = lambda;
    it.lb = std::max(it.lb, lambda - s * s);
    it.lambda = safeguarded(it.lb, it.ub);  // SciPy has no |·| here; lb·ub ≥ 0 anyway since λ ≥ 0 (§6.1)
    return false;
  }

  /// (C) H + λI is not positive definite: the failed pivot gives a sharper lower bound,
  /// λ + δ/‖v‖² ≤ −λ₁ ≤ λ* (§3.5, §6 'extra').
  void not_positive_definite(Iteration& it) {
    const index_t info = it.info;
    const double lambda = it.lambda;
    const double b_kk = diagonal_[static_cast<std::size_t>(info - 1)] + lambda;
    const double delta = factorization_.leading_null_vector(info, b_kk, v_.data());
    const double v_norm = detail::norm_sequential(v_.data(), n_);
    it.have_failed_pivot = true;
    it.lb = std::max(it.lb, lambda + delta / (v_norm * v_norm));
    it.lambda = safeguarded(it.lb, it.ub);
  }

  /// max(√|lb·ub|, lb + θ(ub − lb)), Python's max (the first unless the second is larger).
  static double safeguarded(double lb, double ub) { return std::max(std::sqrt(std::abs(lb * ub)), lb + theta * (ub - lb)); }

  /// (H + shift·I)·x into hp_.
  void hess_times(const double* x, double shift) { factorization_.times(x, shift, hp_.data()); }

  /// xᵀ(H + shift·I)x, the shifted matrix formed entry by entry as SciPy forms H + λI.
  double quadratic_form_shifted(const double* x, double shift) {
    hess_times(x, shift);
    return detail::dot_sequential(x, hp_.data(), n_);
  }

  /// The model change gᵀx + ½xᵀHx with the dense H.
  double model_of(const double* x) {
    hess_times(x, 0.0);
    return detail::dot_sequential(g_.data(), x, n_) + 0.5 * detail::dot_sequential(x, hp_.data(), n_);
  }

  /// The step when no factorisation succeeded (deviation, §3.4: SciPy leaves p unbound). With
  /// g ≠ 0 the Cauchy step: along −g to the 1-D minimiser or the boundary, whichever is shorter.
  /// With g = 0 a boundary step along v from the last failed pivot, whose curvature
  /// vᵀHv = −δ − λ‖v‖² (§3.5 identity) is negative unless δ = λ = 0. Writes p_; false if neither exists.
  bool fallback_step(double radius, bool have_failed_pivot, bool& hits_boundary) {
    double* pp = p_.data();
    if (jac_mag_ > 0) {
      const double curvature = quadratic_form_shifted(g_.data(), 0.0);
      const double t_boundary = radius / jac_mag_;
      double t = t_boundary;
      if (curvature > 0) t = std::min(jac_mag_ * jac_mag_ / curvature, t_boundary);
      for (index_t i = 0; i < n_; ++i) pp[i] = -t * g_[static_cast<std::size_t>(i)];
      hits_boundary = t == t_boundary;
      return std::isfinite(t);
    }
    if (have_failed_pivot) {
      const double v_norm = detail::norm_sequential(v_.data(), n_);
      const double curvature = quadratic_form_shifted(v_.data(), 0.0);
      if (curvature < 0 && std::isfinite(curvature)) {
        for (index_t i = 0; i < n_; ++i) pp[i] = radius * v_[static_cast<std::size_t>(i)] / v_norm;
        hits_boundary = true;
        return true;
      }
    }
    return false;
  }

  ExactOptions options_;
  index_t n_ = 0;
  Factorization factorization_;                              // H and its factor
  std::vector<double> g_, p_, w_, z_, v_, work_, hp_, diagonal_;  // length n
  std::vector<double> refined_;                              // the refined step of a single factor (length n)
  bool single_precision_ = false;                            // this iterate factorises in single precision first
  bool single_factor_ = false;                               // the factor is single precision's, refined_ its step
  std::vector<CholeskyAttempt> attempts_;
  std::vector<double> estimates_;
  index_t niter_ = 0;
  bool have_iterate_ = false;
  // Per iterate (§3.2).
  double gershgorin_lb_ = 0, gershgorin_ub_ = 0, hess_inf_ = 0, hess_fro_ = 0, min_diag_ = 0;
  double jac_mag_ = 0, close_to_zero_ = 0;
  // Between solves on one iterate (§3.3): the last radius and the λ lower bound proved there.
  double previous_radius_ = -1, lambda_lb_ = 0;
};

/// SciPy's trust-exact subproblem on the host.
using Exact = BasicExact<detail::exact::HostFactorization>;

}  // namespace fitlib
