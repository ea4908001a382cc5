// SPDX-License-Identifier: MIT
// device::LayerFactorization: Exact's dense side (H, its Cholesky factor) kept on a device, driven through a dense layer.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "fitlib/config.hpp"
#include "fitlib/core/error.hpp"
#include "fitlib/core/types.hpp"
#include "fitlib/device/host_layer.hpp"
#include "fitlib/minimize/exact.hpp"

namespace fitlib::device {

namespace detail::factorization {

/// u = the upper triangle of h's leading m×m block plus shift·I, zeros below the diagonal (both leading dimension ld).
struct ShiftedUpper {
  const double* h;
  double* u;
  index_t m, ld;
  double shift;
  FITLIB_HOST_DEVICE void operator()(index_t t) const {
    const index_t i = t % m, j = t / m;
    u[i + j * ld] = i < j ? h[i + j * ld] : i == j ? h[i + j * ld] + shift : 0.0;
  }
};

/// y += a·x.
struct Axpy {
  double a;
  const double* x;
  double* y;
  FITLIB_HOST_DEVICE void operator()(index_t i) const { y[i] += a * x[i]; }
};

/// y = a·x.
struct Scaled {
  double a;
  const double* x;
  double* y;
  FITLIB_HOST_DEVICE void operator()(index_t i) const { y[i] = a * x[i]; }
};

/// v = (−w[0:m], 1, 0, …, 0): the right-hand side of the leading null vector's solve.
struct NullVectorStart {
  const double* w;
  double* v;
  index_t m;
  FITLIB_HOST_DEVICE void operator()(index_t i) const { v[i] = i < m ? -w[i] : i == m ? 1.0 : 0.0; }
};

/// x = h[0:m] (a column of H above the diagonal).
struct Copy {
  const double* h;
  double* x;
  FITLIB_HOST_DEVICE void operator()(index_t i) const { x[i] = h[i]; }
};

}  // namespace detail::factorization

/// Exact's dense side on a device (an `exact_factorization` for BasicExact): H and its upper Cholesky factor U stay in
/// the layer's memory for a whole iterate, H going down once per iterate (`set_matrix`); per λ trial only n-vectors and
/// scalars cross (LAPACK's info, dot products). cuda::Exact is BasicExact over this with cuda::Layer
/// (fitlib/cuda/exact.cuh); over HostLayer it runs the same calls on the host, which is how it is tested without a GPU.
///
/// Where the host's factorization follows reference LAPACK to reproduce SciPy's iterates, this one takes the device's
/// blocked routines (potrf, trsv, gemv), so its iterates agree with Exact's to rounding, not bit for bit, and:
/// - U's smallest singular value is estimated by inverse iteration, x ← (UᵀU)⁻¹x normalised (from a fixed start at
///   each H, then from the last estimate's vector), until the estimate moves by less than 10⁻³ (at most
///   `inverse_iterations`), and s = ‖Uz‖; each iteration is two
///   triangular solves on the device, where the host's greedy Cline–Moler–Stewart–Wilkinson estimate walks the
///   factor row by row (n dependent steps);
/// - after a failed factorisation at column k the leading (k−1)×(k−1) block is factorised again (the device routine
///   leaves no partial factor it documents) for the Moré–Sorensen bound; where that fails too (the blocked routine
///   rounds a block otherwise than the whole), the bound falls back to λ itself (δ = 0);
/// - factorisations are in double only (offers_single_precision false; ExactOptions::single_precision_factor is
///   ignored): on the data-centre GPUs this backend is for (H100, H200) cuSOLVER's double factorisation runs on the
///   FP64 tensor cores at about single precision's non-tensor rate, so the host's gain from single precision (1.8× at
///   n = 2000) is not there to take (not measured).
///
/// It holds the layer's resource (on a GPU: the device), by default the calling thread's current device at construction;
/// the layer itself, its stream and handles and its arrays (2n² + 4n doubles and potrf's workspace) are made at
/// `reset`. A copy (TrustRegion copies its prototype into every fit's state) has the resource and makes its own layer;
/// an assigned one keeps its layer where the resource is the same (TrustRegion::init on a state that ran before).
template <dense_layer Layer>
class LayerFactorization {
 public:
  using resource_type = typename Layer::resource_type;
  static constexpr bool offers_single_precision = false;
  /// Most inverse iterations per singular value estimate.
  static constexpr int inverse_iterations = 10;

  LayerFactorization() : resource_(Layer::current_resource()) {}
  explicit LayerFactorization(resource_type resource) : resource_(resource) {}
  LayerFactorization(const LayerFactorization& o) : resource_(o.resource_) {}
  LayerFactorization& operator=(const LayerFactorization& o) {
    if (this != &o) {
      if (!(resource_ == o.resource_)) *this = LayerFactorization(o.resource_);
      forget();
    }
    return *this;
  }
  LayerFactorization(LayerFactorization&& o) noexcept { take(o); }
  LayerFactorization& operator=(LayerFactorization&& o) noexcept {
    if (this != &o) take(o);
    return *this;
  }

  const resource_type& resource() const { return resource_; }

  void reset(index_t n, bool /*single: not offered*/) {
    if (!layer_) layer_.emplace(resource_);
    forget();
    Layer& l = *layer_;
    l.resize(h_, n * n);
    l.resize(u_, n * n);
    l.resize(x_, n);
    l.resize(y_, n);
    // The inverse iteration's start at each H: the fractional parts of i·φ (golden ratio), centred, normalised; unlike a
    // constant or alternating vector, it is not orthogonal to the eigenvectors that a symmetric structure of H makes
    // (e.g. the antisymmetric ones of a matrix symmetric under reversal). Later estimates at the same H start from the
    // last vector.
    std::vector<double> start(static_cast<std::size_t>(n));
    double sum = 0;
    for (index_t i = 0; i < n; ++i) {
      const double f = static_cast<double>(i + 1) * 0.6180339887498949;
      start[static_cast<std::size_t>(i)] = (f - std::floor(f)) - 0.5;
      sum += start[static_cast<std::size_t>(i)] * start[static_cast<std::size_t>(i)];
    }
    for (double& v : start) v /= std::sqrt(sum);
    l.upload(std::span<const double>(start), start_);
    l.resize(z_, n);
    n_ = n;
  }

  /// H goes down (`[n × n]`, both triangles).
  void set_matrix(ConstBlockView<double> H) {
    Layer& l = sized("set_matrix");
    have_matrix_ = factored_ = false;  // until the upload has succeeded
    failed_at_ = 0;
    if (H.ld == n_) {
      l.upload(std::span<const double>(H.data, static_cast<std::size_t>(n_ * n_)), h_);
    } else {
      std::vector<double> packed(static_cast<std::size_t>(n_ * n_));
      for (index_t j = 0; j < n_; ++j) std::copy(H.col(j), H.col(j) + n_, packed.data() + j * n_);
      l.upload(std::span<const double>(packed), h_);
    }
    l.launch(n_, detail::factorization::Copy{l.data(start_), l.data(z_)});
    have_matrix_ = true;
  }

  /// U of H + λI (on the device); LAPACK's info.
  index_t factor(double lambda) {
    Layer& l = with_matrix("factor");
    factored_ = false;  // until potrf has answered
    failed_at_ = 0;
    lambda_ = lambda;
    l.launch(n_ * n_, detail::factorization::ShiftedUpper{l.data(h_), l.data(u_), n_, n_, lambda});
    const index_t info = l.potrf(n_, l.data(u_), n_);
    factored_ = info == 0;
    failed_at_ = info;
    return info;
  }

  /// x ← (UᵀU)⁻¹x.
  void solve(double* x) { triangular(x, true, "solve"); }
  /// x ← U⁻ᵀx.
  void solve_transposed(double* x) { triangular(x, false, "solve_transposed"); }

  /// s ≥ σ_min(U) and a unit z with ‖Uz‖ = s, by inverse iteration on UᵀU from the last estimate's vector.
  double smallest_singular_value(double* z) {
    Layer& l = factored("smallest_singular_value");
    double* x = l.data(z_);  // unit throughout
    double* y = l.data(y_);
    double last = 0;
    for (int k = 0; k < inverse_iterations; ++k) {
      l.launch(n_, detail::factorization::Copy{x, y});
      l.trsv(true, n_, l.data(u_), n_, y);
      l.trsv(false, n_, l.data(u_), n_, y);
      const double norm = std::sqrt(l.dot(n_, y, y));  // ‖(UᵀU)⁻¹x‖ → 1/σ_min² along the smallest singular vector
      if (!(norm > 0) || !std::isfinite(norm)) break;
      l.launch(n_, detail::factorization::Scaled{1 / norm, y, x});
      const double estimate = 1 / std::sqrt(norm);
      if (k > 0 && std::abs(estimate - last) <= 1e-3 * estimate) break;
      last = estimate;
    }
    l.launch(n_, detail::factorization::Copy{x, y});
    l.trmv(n_, l.data(u_), n_, y);
    const double s = std::sqrt(l.dot(n_, y, y));
    l.download(z_, std::span<double>(z, static_cast<std::size_t>(n_)));
    return s;
  }

  /// After factor(λ) failed with info k: δ = ‖U_m⁻ᵀ b‖² − b_kk (m = k − 1, b = (H + λI)[0:m, m]) and v =
  /// (−U_m⁻¹U_m⁻ᵀb, 1, 0, …), with U_m the factor of the leading m×m block, factorised again.
  double leading_null_vector(index_t k, double b_kk, double* v) {
    Layer& l = with_matrix("leading_null_vector");
    if (failed_at_ != k || k < 1)
      throw usage_error("LayerFactorization::leading_null_vector(" + std::to_string(k) + ") without a factorisation that failed there");
    const index_t m = k - 1;
    double* u = l.data(u_);
    double* y = l.data(y_);
    double sum = 0;
    if (m > 0) {
      l.launch(m * m, detail::factorization::ShiftedUpper{l.data(h_), u, m, n_, lambda_});
      if (l.potrf(m, u, n_) != 0) {
        // The device's blocked routine rounds the leading block otherwise than the whole matrix and found it singular
        // too: δ = 0 still gives a valid bound (H + λI is not positive definite, so λ ≤ −λ₁), and v = e_k.
        std::fill(v, v + n_, 0.0);
        v[m] = 1;
        return 0;
      }
      l.launch(m, detail::factorization::Copy{l.data(h_) + m * n_, y});
      l.trsv(true, m, u, n_, y);
      sum = l.dot(m, y, y);
    }
    double* x = l.data(x_);
    l.launch(n_, detail::factorization::NullVectorStart{y, x, m});
    if (m > 0) l.trsv(false, m, u, n_, x);
    l.download(x_, std::span<double>(v, static_cast<std::size_t>(n_)));
    return sum - b_kk;
  }

  /// hx = (H + shift·I)·x.
  void times(const double* x, double shift, double* hx) {
    Layer& l = with_matrix("times");
    l.upload(std::span<const double>(x, static_cast<std::size_t>(n_)), x_);
    l.gemv(n_, l.data(h_), n_, l.data(x_), l.data(y_));
    if (shift != 0) l.launch(n_, detail::factorization::Axpy{shift, l.data(x_), l.data(y_)});
    l.download(y_, std::span<double>(hx, static_cast<std::size_t>(n_)));
  }

 private:
  using buffer = typename Layer::template buffer<double>;

  /// Unsized: reset(n) comes next.
  void forget() {
    n_ = 0;
    have_matrix_ = factored_ = false;
    failed_at_ = 0;
  }

  void take(LayerFactorization& o) {
    resource_ = o.resource_;
    layer_.reset();  // destroyed whole first: a layer's move-assignment would free its stream before its handles
    layer_ = std::exchange(o.layer_, std::nullopt);
    h_ = std::move(o.h_), u_ = std::move(o.u_), x_ = std::move(o.x_), y_ = std::move(o.y_), z_ = std::move(o.z_), start_ = std::move(o.start_);
    n_ = o.n_, lambda_ = o.lambda_, failed_at_ = o.failed_at_, have_matrix_ = o.have_matrix_, factored_ = o.factored_;
    o.forget();
  }

  Layer& sized(const char* what) {
    if (!layer_ || n_ == 0) throw usage_error(std::string("LayerFactorization::") + what + ": call reset(n) first");
    return *layer_;
  }
  Layer& with_matrix(const char* what) {
    Layer& l = sized(what);
    if (!have_matrix_) throw usage_error(std::string("LayerFactorization::") + what + ": call set_matrix(H) first");
    return l;
  }
  Layer& factored(const char* what) {
    Layer& l = with_matrix(what);
    if (!factored_) throw usage_error(std::string("LayerFactorization::") + what + " without a successful factor()");
    return l;
  }

  /// x ← U⁻ᵀx, then (where `both`) U⁻¹ of that.
  void triangular(double* x, bool both, const char* what) {
    Layer& l = factored(what);
    l.upload(std::span<const double>(x, static_cast<std::size_t>(n_)), x_);
    l.trsv(true, n_, l.data(u_), n_, l.data(x_));
    if (both) l.trsv(false, n_, l.data(u_), n_, l.data(x_));
    l.download(x_, std::span<double>(x, static_cast<std::size_t>(n_)));
  }

  resource_type resource_{};
  std::optional<Layer> layer_;
  // H and U (n×n, column-major); two n-vectors; the inverse iteration's vector and its first start.
  buffer h_, u_, x_, y_, z_, start_;
  index_t n_ = 0, failed_at_ = 0;  // failed_at_: the last factor()'s info
  double lambda_ = 0;
  bool have_matrix_ = false, factored_ = false;
};

static_assert(exact_factorization<LayerFactorization<HostLayer>>);

}  // namespace fitlib::device
