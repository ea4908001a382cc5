// SPDX-License-Identifier: MIT
// device::HostLayer: the device layer run on the host (Eigen GEMMs, plain loops), and its test policy.
#pragma once

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <concepts>
#include <span>
#include <string>
#include <vector>

#include "fitlib/config.hpp"
#include "fitlib/core/types.hpp"
#include "fitlib/device/host_solver.hpp"
#include "fitlib/device/policy.hpp"
#include "fitlib/device/serial.hpp"
#include "fitlib/device/shard_bytes.hpp"

namespace fitlib::device {

/// What the device-layer shard (likelihood/layer_shard.hpp) needs from a device, in one small
/// contract a CUDA layer implements with cuBLAS and kernels on the shard's stream:
/// - `reserve(bytes, what)`: throws, before anything is uploaded, unless the device can hold what
///   the shard will keep there (device/shard_bytes.hpp; `what` names the shard for the message);
/// - `buffer<T>`: an owning array in device memory;
/// - `upload(host span, buffer&)` (resizes) and `download(buffer, host span)` (its first
///   host.size() entries), `zero(buffer&, n)` (n zeros), `resize(buffer&, n)` (at least n
///   entries, their values unspecified: for outputs a GEMM or launch writes in full);
/// - `gemm(trans_a, m, n, k, a, lda, b, ldb, c, ldc)`: c = op(a)·b, column-major, device pointers;
///   it writes all m × n entries of c (zeros when k = 0: the shard only sizes its GEMM outputs);
/// - `launch(n, f)`: f(t) for every t in [0, n) on the device, f a trivially copyable functor whose
///   call operator is FITLIB_HOST_DEVICE;
/// - `fence()`: waits for everything launched (copies included).
/// A layer is built from its shard's resource (a device and stream on a GPU).
template <class L>
concept device_layer = requires(L& l, typename L::template buffer<double>& b, std::span<const double> in, std::span<double> out,
                                const double* a, double* c, index_t n, const ShardBytes& bytes) {
  l.reserve(bytes, std::string());
  l.upload(in, b);
  l.download(b, out);
  l.zero(b, n);
  l.resize(b, n);
  { l.data(b) } -> std::convertible_to<const double*>;
  l.gemm(true, n, n, n, a, n, a, n, c, n);
  l.fence();
};

/// What device::LayerFactorization (Exact's dense side on a device) needs of a layer beyond a device_layer's: its
/// `resource_type` (a device; equality-comparable), the calling thread's current one (`current_resource()`), a layer
/// made from one, and dense algebra on its arrays
/// (column-major, leading dimension ld, U upper triangular in the upper triangle), scalar answers returned to the host:
/// - `potrf(n, a, ld)`: a's upper triangle ← U with A = UᵀU (the lower triangle is not read); LAPACK's info (0, or
///   the 1-based column of the first non-positive pivot; a is unspecified then);
/// - `trsv(transposed, n, u, ld, x)`: x ← U⁻ᵀx (transposed) or U⁻¹x; `trmv(n, u, ld, x)`: x ← Ux;
/// - `gemv(n, a, ld, x, y)`: y = A·x (all of A); `dot(n, x, y)`: xᵀy.
template <class L>
concept dense_layer = device_layer<L> && requires(L& l, typename L::resource_type r, double* x, const double* a, index_t n, bool t) {
  { L::current_resource() } -> std::same_as<typename L::resource_type>;
  L(r);
  { r == r } -> std::convertible_to<bool>;
  { l.potrf(n, x, n) } -> std::convertible_to<index_t>;
  l.trsv(t, n, a, n, x);
  l.trmv(n, a, n, x);
  l.gemv(n, a, n, a, x);
  { l.dot(n, a, a) } -> std::convertible_to<double>;
};

/// The device layer on the host: buffers are std::vector, GEMMs are Eigen's, a launch is a loop.
/// Not a fast path (the host shard's fused pass streams the templates once; this one three
/// times): the reference that a device backend's shard shape is tested with, on any machine.
class HostLayer {
 public:
  /// The host is one resource.
  struct resource_type {
    bool operator==(const resource_type&) const = default;
  };
  static resource_type current_resource() { return {}; }

  HostLayer() = default;
  template <class Resource>
  explicit HostLayer(const Resource&) {}

  template <class T>
  using buffer = std::vector<T>;

  /// The host's memory is the one the host shard uses too: nothing to check ahead.
  void reserve(const ShardBytes&, const std::string&) const {}

  template <class T>
  void upload(std::span<const T> host, buffer<T>& dev) const {
    dev.assign(host.begin(), host.end());
  }
  template <class T>
  void download(const buffer<T>& dev, std::span<T> host) const {
    std::copy_n(dev.begin(), host.size(), host.begin());
  }
  template <class T>
  void zero(buffer<T>& dev, index_t n) const {
    dev.assign(static_cast<std::size_t>(n), T{});
  }
  template <class T>
  void resize(buffer<T>& dev, index_t n) const {
    if (static_cast<index_t>(dev.size()) < n) dev.resize(static_cast<std::size_t>(n));
  }
  template <class T>
  T* data(buffer<T>& b) const {
    return b.data();
  }
  template <class T>
  const T* data(const buffer<T>& b) const {
    return b.data();
  }

  /// c = op(a)·b with op(a) `[m × k]`, b `[k × n]`, c `[m × n]`, column-major.
  void gemm(bool trans_a, index_t m, index_t n, index_t k, const double* a, index_t lda, const double* b, index_t ldb, double* c,
            index_t ldc) const;

  template <class F>
  void launch(index_t n, const F& f) const {
    for (index_t t = 0; t < n; ++t) f(t);
  }
  void fence() const {}

  // dense_layer, in plain loops (unblocked; trsv, gemv and dot in reference BLAS's order, potrf and trmv by dot products).

  index_t potrf(index_t n, double* a, index_t ld) const {
    for (index_t j = 0; j < n; ++j) {
      double* aj = a + j * ld;
      for (index_t i = 0; i < j; ++i) {
        const double* ai = a + i * ld;
        double t = aj[i];
        for (index_t k = 0; k < i; ++k) t -= ai[k] * aj[k];
        aj[i] = t / ai[i];
      }
      double pivot = aj[j];
      for (index_t k = 0; k < j; ++k) pivot -= aj[k] * aj[k];
      if (!(pivot > 0)) return j + 1;
      aj[j] = std::sqrt(pivot);
    }
    return 0;
  }
  void trsv(bool transposed, index_t n, const double* u, index_t ld, double* x) const {
    if (transposed) {
      for (index_t i = 0; i < n; ++i) {
        double t = x[i];
        for (index_t k = 0; k < i; ++k) t -= u[k + i * ld] * x[k];
        x[i] = t / u[i + i * ld];
      }
    } else {
      for (index_t j = n - 1; j >= 0; --j) {
        x[j] /= u[j + j * ld];
        for (index_t i = 0; i < j; ++i) x[i] -= x[j] * u[i + j * ld];
      }
    }
  }
  void trmv(index_t n, const double* u, index_t ld, double* x) const {
    for (index_t i = 0; i < n; ++i) {
      double t = 0;
      for (index_t k = i; k < n; ++k) t += u[i + k * ld] * x[k];
      x[i] = t;
    }
  }
  void gemv(index_t n, const double* a, index_t ld, const double* x, double* y) const {
    std::fill(y, y + n, 0.0);
    for (index_t j = 0; j < n; ++j)
      for (index_t i = 0; i < n; ++i) y[i] += a[i + j * ld] * x[j];
  }
  double dot(index_t n, const double* x, const double* y) const {
    double s = 0;
    for (index_t i = 0; i < n; ++i) s += x[i] * y[i];
    return s;
  }
};

#if FITLIB_DEFINITIONS
FITLIB_PREBUILT_INLINE void HostLayer::gemm(bool trans_a, index_t m, index_t n, index_t k, const double* a, index_t lda, const double* b,
                                            index_t ldb, double* c, index_t ldc) const {
  using Map = Eigen::Map<const Eigen::MatrixXd, 0, Eigen::OuterStride<>>;
  Eigen::Map<Eigen::MatrixXd, 0, Eigen::OuterStride<>> cm(c, m, n, Eigen::OuterStride<>(ldc));
  const Map bm(b, k, n, Eigen::OuterStride<>(ldb));
  if (m == 0 || n == 0) return;
  if (k == 0) {
    cm.setZero();
    return;
  }
  if (trans_a) cm.noalias() = Map(a, k, m, Eigen::OuterStride<>(lda)).transpose() * bm;
  else cm.noalias() = Map(a, m, k, Eigen::OuterStride<>(lda)) * bm;
}
#endif

static_assert(dense_layer<HostLayer>);

/// A test policy: the device-layer shard (GEMM, per-bin launch, GEMM) on the host, `shards` of
/// them run one after the other. It exists so that every parity test runs the shard shape of the
/// GPU backend on any machine (CTest names: `device_layer`).
struct HostLayered {
  using memory_space = memory::host;
  using backend = fitlib::backend::layered<HostLayer>;
  struct shard_resource {};
  template <class T>
  using buffer = std::vector<T>;
  using dense_solver = detail::HostCholesky;

  index_t shards = 1;
  index_t concurrency() const { return shards; }
  std::vector<shard_resource> partition(index_t k) const { return std::vector<shard_resource>(static_cast<std::size_t>(k)); }
  cpu::InlineExecutor executor(index_t) const { return {}; }
};

static_assert(device_policy<HostLayered>);

}  // namespace fitlib::device
