// SPDX-License-Identifier: MIT
// cuda::Layer against device::HostLayer, primitive by primitive (copies, zeros, GEMMs, launches, potrf and the level-2
// routines), cuda::Exact against the same algorithm on the host, the dense solver against HostCholesky (the covariance term's solve and the postfit covariance), and the CUDA policy's own bookkeeping on a real device: streams per shard, the
// memory check before upload.
#include <catch2/catch.hpp>

#include <Eigen/Dense>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "fitlib/cuda.cuh"
#include "random_model.hpp"

using namespace fitlib;

namespace {
std::vector<double> ramp(std::size_t n, double scale) {
  std::vector<double> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = scale * std::sin(0.37 * static_cast<double>(i) + 0.1);
  return v;
}

/// x[t] = 2·x[t] + t: a trivially copyable functor, as the shard's per-bin kernels are.
struct Affine {
  double* x;
  FITLIB_HOST_DEVICE void operator()(index_t t) const { x[t] = 2.0 * x[t] + static_cast<double>(t); }
};
}  // namespace

TEST_CASE("cuda::Layer: copies, zeros and buffers that only grow", "[cuda]") {
  cuda::Layer layer(cuda::ShardResource{0});
  cuda::Buffer<double> b;
  const std::vector<double> v = ramp(1000, 1.0);
  layer.upload(std::span<const double>(v), b);
  CHECK(b.size() == v.size());
  std::vector<double> back(v.size());
  layer.download(b, std::span(back));
  CHECK(back == v);
  layer.zero(b, 10);
  std::vector<double> z(10, 1.0);
  layer.download(b, std::span(z));
  CHECK(z == std::vector<double>(10, 0.0));
  layer.resize(b, 5);  // never shrinks
  CHECK(b.size() == 10);
  std::vector<double> big(20);
  CHECK_THROWS_AS(layer.download(b, std::span(big)), usage_error);
  // A moved buffer and layer keep working; the moved-from ones are empty.
  cuda::Buffer<double> moved = std::move(b);
  CHECK(b.data() == nullptr);
  cuda::Layer other = std::move(layer);
  other.download(moved, std::span(z));
  CHECK(z == std::vector<double>(10, 0.0));
}

TEST_CASE("cuda::Layer: GEMMs equal the host layer's to rounding, k = 0 included", "[cuda]") {
  cuda::Layer dev(cuda::ShardResource{0});
  const device::HostLayer host;
  for (bool trans : {false, true})
    for (index_t k : {0, 1, 7, 300}) {
      const index_t m = 37, n = 5, lda = trans ? k + 2 : m + 3, ldb = k + 1, ldc = m + 4;
      const std::vector<double> a = ramp(static_cast<std::size_t>(lda * (trans ? m : k) + 1), 1.0), bv = ramp(static_cast<std::size_t>(ldb * n + 1), 0.5);
      std::vector<double> c_host(static_cast<std::size_t>(ldc * n), -1.0), c_dev = c_host;
      host.gemm(trans, m, n, k, a.data(), lda, bv.data(), ldb, c_host.data(), ldc);
      cuda::Buffer<double> da, db, dc;
      dev.upload(std::span<const double>(a), da);
      dev.upload(std::span<const double>(bv), db);
      dev.upload(std::span<const double>(c_dev), dc);
      dev.gemm(trans, m, n, k, da.data(), lda, db.data(), ldb, dc.data(), ldc);
      dev.download(dc, std::span(c_dev));
      INFO("trans " << trans << ", k " << k);
      for (index_t j = 0; j < n; ++j)
        for (index_t i = 0; i < ldc; ++i) {
          const auto at = static_cast<std::size_t>(i + j * ldc);
          if (i >= m) CHECK(c_dev[at] == -1.0);  // outside op(a)·b's rows: untouched
          else CHECK(std::abs(c_dev[at] - c_host[at]) <= 1e-13 * (1.0 + std::abs(c_host[at])));
        }
    }
}

TEST_CASE("cuda::Layer: a launch calls the functor once per index, on the device", "[cuda]") {
  cuda::Layer layer(cuda::ShardResource{0});
  const std::vector<double> v = ramp(1000, 3.0);
  cuda::Buffer<double> b;
  layer.upload(std::span<const double>(v), b);
  layer.launch(1000, Affine{b.data()});
  layer.launch(0, Affine{nullptr});  // nothing to do: no launch
  std::vector<double> out(v.size());
  layer.download(b, std::span(out));
  for (std::size_t t = 0; t < v.size(); ++t) CHECK(out[t] == 2.0 * v[t] + static_cast<double>(t));
}

TEST_CASE("cuda::Devices: a shard that does not fit its device is refused before anything is uploaded", "[cuda]") {
  cuda::Layer layer(cuda::ShardResource{0});
  const device::ShardBytes huge{std::uint64_t{1} << 52, 0};  // 4 PiB
  try {
    layer.reserve(huge, "shard 0 (bins [0, 10))");
    FAIL("no refusal");
  } catch (const usage_error& e) {
    const std::string what = e.what();
    CHECK_THAT(what, Catch::Contains("shard 0 (bins [0, 10)) needs") && Catch::Contains("on CUDA device 0") && Catch::Contains("more devices"));
  }
  CHECK_NOTHROW(layer.reserve({1 << 20, 1 << 20}, "a small shard"));
}

TEST_CASE("cuda::Devices: shards listed on one device get their own streams; bad listings are refused", "[cuda]") {
  const cuda::Devices gpus{{0, 0}};
  const auto res = gpus.partition(2);
  REQUIRE(res.size() == 2);
  CHECK(res[0].device == 0);
  CHECK(res[1].device == 0);
  cuda::Layer a(res[0]), b(res[1]);
  CHECK(a.stream() != b.stream());
  CHECK_THROWS_AS(cuda::Devices({cuda::device_count()}), usage_error);
  CHECK_THROWS_AS(cuda::Devices(std::vector<int>{}), usage_error);
  // least_occupied by NVML, where the driver has it: n distinct devices of this machine.
  const std::vector<int> one = cuda::least_occupied(1);
  REQUIRE(one.size() == 1);
  CHECK(one[0] >= 0);
  CHECK(one[0] < cuda::device_count());
}

TEST_CASE("cuda::DeviceCholesky: the covariance term's solve on the device equals HostCholesky's to rounding", "[cuda]") {
  const index_t n = 300, m = 3;
  Eigen::MatrixXd A = Eigen::MatrixXd::Identity(n, n) * static_cast<double>(n);
  for (index_t c = 0; c < n; ++c)
    for (index_t r = 0; r < n; ++r) A(r, c) += std::cos(0.1 * static_cast<double>(r * c + 1));  // symmetric, diagonally dominant
  const Eigen::MatrixXd B = Eigen::MatrixXd::Random(n, m);
  fitlib::detail::HostCholesky host;
  cuda::DeviceCholesky dev;
  REQUIRE(host.factor({A.data(), n, n}));
  REQUIRE(dev.factor({A.data(), n, n}));
  Eigen::MatrixXd xh(n, m), xd(n, m);
  host.solve({B.data(), n, m}, {xh.data(), n, m});
  dev.solve({B.data(), n, m}, {xd.data(), n, m});
  CHECK((xd - xh).cwiseAbs().maxCoeff() <= 1e-12 * xh.cwiseAbs().maxCoeff());
  // One column through a strided view, and a moved solver.
  cuda::DeviceCholesky moved = std::move(dev);
  Eigen::VectorXd x1(n);
  moved.solve({B.data() + n, n, 1, n}, {x1.data(), n, 1});
  CHECK((x1 - xh.col(1)).cwiseAbs().maxCoeff() <= 1e-12 * xh.cwiseAbs().maxCoeff());
  // Not positive definite, or a NaN in the lower triangle: false, as the host's.
  Eigen::MatrixXd bad = A;
  bad(5, 5) = -1.0;
  CHECK_FALSE(moved.factor({bad.data(), n, n}));
  CHECK_THROWS_AS(moved.solve({B.data(), n, m}, {xd.data(), n, m}), usage_error);
  bad = A;
  bad(7, 2) = std::nan("");
  CHECK_FALSE(moved.factor({bad.data(), n, n}));
  CHECK(moved.factor({A.data(), n, n}));  // and back
  // The inverse (the postfit covariance's), both triangles, to rounding of the host's; the factor stays for solve.
  Eigen::MatrixXd ih(n, n), id(n, n);
  REQUIRE(host.factor({A.data(), n, n}));
  host.inverse({ih.data(), n, n});
  moved.inverse({id.data(), n, n});
  CHECK((id - ih).cwiseAbs().maxCoeff() <= 1e-12 * ih.cwiseAbs().maxCoeff());
  CHECK(id == id.transpose());
  moved.solve({B.data(), n, m}, {xd.data(), n, m});
  CHECK((xd - xh).cwiseAbs().maxCoeff() <= 1e-12 * xh.cwiseAbs().maxCoeff());
  CHECK_THROWS_AS(moved.inverse({id.data(), n - 1, n - 1}), usage_error);
  // The postfit covariance through the device's solver: accurate as the host's; an indefinite Hessian falls back to
  // the host's LDLᵀ, a NaN fails, as with the host's solver.
  Eigen::MatrixXd cd(n, n), ch(n, n);
  CHECK(covariance_from_hessian({A.data(), n, n}, {cd.data(), n, n}, moved) == CovarianceStatus::accurate);
  CHECK(covariance_from_hessian({A.data(), n, n}, {ch.data(), n, n}) == CovarianceStatus::accurate);
  CHECK((cd - ch).cwiseAbs().maxCoeff() <= 1e-12 * ch.cwiseAbs().maxCoeff());
  Eigen::MatrixXd indefinite = A;
  indefinite(5, 5) = -static_cast<double>(n);
  CHECK(covariance_from_hessian({indefinite.data(), n, n}, {cd.data(), n, n}, moved) == CovarianceStatus::not_positive_definite);
  CHECK(covariance_from_hessian({indefinite.data(), n, n}, {ch.data(), n, n}) == CovarianceStatus::not_positive_definite);
  CHECK(cd == ch);  // (the host's LDLᵀ both times)
  indefinite(7, 2) = indefinite(2, 7) = std::nan("");
  CHECK(covariance_from_hessian({indefinite.data(), n, n}, {cd.data(), n, n}, moved) == CovarianceStatus::failed);
  CHECK(std::isnan(cd(0, 0)));
}

TEST_CASE("cuda: the postfit covariance of 256 parameters or more is inverted on the device, as the host's", "[cuda]") {
  // 300 systematics (301 parameters): fit's postfit takes the policy's DeviceCholesky (fit.hpp, device_covariance_min).
  const Model m = test::random_model({.bins = 60, .masked_bins = 0, .procs = 3, .nsyst = 300, .seed = 41});
  Likelihood<Shard<cuda::Devices, storage::Dense>> gpu(m, cuda::Devices{{0}});
  SerialLikelihood host(m);
  const TrustRegion<Gltr> minimizer;
  const FitResult a = fit(gpu, minimizer), b = fit(host, minimizer);
  REQUIRE(static_cast<index_t>(a.x.size()) >= detail::device_covariance_min);
  CHECK(a.covariance_status == CovarianceStatus::accurate);
  CHECK(b.covariance_status == CovarianceStatus::accurate);
  REQUIRE(a.covariance.size() == b.covariance.size());
  double worst = 0, largest = 0;
  for (std::size_t k = 0; k < b.covariance.size(); ++k) {
    worst = std::max(worst, std::abs(a.covariance[k] - b.covariance[k]));
    largest = std::max(largest, std::abs(b.covariance[k]));
  }
  CHECK(worst <= 1e-8 * largest);  // the fits' minima agree to their stopping tolerance, not to rounding
}

TEST_CASE("cuda::Layer: potrf, triangular solves and products equal the host layer's to rounding", "[cuda]") {
  cuda::Layer dev(cuda::ShardResource{0});
  const device::HostLayer host;
  const index_t n = 300;
  std::vector<double> a(static_cast<std::size_t>(n * n));
  const std::vector<double> r = ramp(a.size(), 1.0);
  for (index_t j = 0; j < n; ++j)  // symmetric, diagonally dominant: positive definite
    for (index_t i = 0; i < n; ++i) a[static_cast<std::size_t>(i + j * n)] = i == j ? 2.0 * n : 0.5 * (r[static_cast<std::size_t>(i + j * n)] + r[static_cast<std::size_t>(j + i * n)]);
  cuda::Buffer<double> da, dx, dy;
  dev.upload(std::span<const double>(a), da);
  std::vector<double> ua = a;
  REQUIRE(host.potrf(n, ua.data(), n) == 0);
  REQUIRE(dev.potrf(n, da.data(), n) == 0);
  std::vector<double> ud(a.size());
  dev.download(da, std::span(ud));
  double worst = 0, largest = 0;
  for (index_t j = 0; j < n; ++j)
    for (index_t i = 0; i <= j; ++i) {
      worst = std::max(worst, std::abs(ud[static_cast<std::size_t>(i + j * n)] - ua[static_cast<std::size_t>(i + j * n)]));
      largest = std::max(largest, std::abs(ua[static_cast<std::size_t>(i + j * n)]));
    }
  CHECK(worst <= 1e-13 * largest);
  const std::vector<double> x = ramp(static_cast<std::size_t>(n), 3.0);
  for (int op = 0; op < 4; ++op) {
    INFO("op " << op);
    std::vector<double> h = x, d(x.size());
    dev.upload(std::span<const double>(x), dx);
    if (op < 2) {
      host.trsv(op == 1, n, ua.data(), n, h.data());
      dev.trsv(op == 1, n, da.data(), n, dx.data());
    } else if (op == 2) {
      host.trmv(n, ua.data(), n, h.data());
      dev.trmv(n, da.data(), n, dx.data());
    } else {
      dev.upload(std::span<const double>(a), da);
      host.gemv(n, a.data(), n, x.data(), h.data());
      dev.resize(dy, n);
      dev.gemv(n, da.data(), n, dx.data(), dy.data());
      dev.fence();
      std::swap(dx, dy);
    }
    dev.download(dx, std::span(d));
    double w = 0, l = 0;
    for (std::size_t i = 0; i < h.size(); ++i) w = std::max(w, std::abs(h[i] - d[i])), l = std::max(l, std::abs(h[i]));
    CHECK(w <= 1e-12 * l);
    CHECK(dev.dot(n, dx.data(), dx.data()) == Approx(host.dot(n, h.data(), h.data())).epsilon(1e-12));
  }
  // A matrix that is not positive definite: the first failing column, as LAPACK's info.
  std::vector<double> bad = a;
  bad[static_cast<std::size_t>(41 + 41 * n)] = -1.0;
  std::vector<double> hb = bad;
  dev.upload(std::span<const double>(bad), da);
  CHECK(dev.potrf(n, da.data(), n) == host.potrf(n, hb.data(), n));
  CHECK(host.potrf(n, bad.data(), n) == 42);
}

TEST_CASE("cuda::Exact: the subproblem on the device, against the same algorithm over the host layer", "[cuda]") {
  // Indefinite, positive definite and the hard case, at radii that put the step inside and on the boundary. The device
  // rounds otherwise (blocked potrf, cuBLAS), so steps agree to the stopping rules' slack, interior ones to rounding.
  const index_t n = 400;
  for (int kind = 0; kind < 3; ++kind) {
    std::vector<double> h(static_cast<std::size_t>(n * n)), g = ramp(static_cast<std::size_t>(n), 1.0);
    const std::vector<double> r = ramp(h.size(), 0.01);
    for (index_t j = 0; j < n; ++j)
      for (index_t i = 0; i < n; ++i)
        h[static_cast<std::size_t>(i + j * n)] =
            i == j ? (kind == 0 ? 1.0 + 0.01 * i : -1.0 + 0.01 * i) : 0.5 * (r[static_cast<std::size_t>(i + j * n)] + r[static_cast<std::size_t>(j + i * n)]);
    if (kind == 2) {  // g ⟂ the eigenvector of the smallest eigenvalue
      const Eigen::Map<const Eigen::MatrixXd> H(h.data(), n, n);
      const Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> eig(H);
      Eigen::Map<Eigen::VectorXd> gv(g.data(), n);
      gv -= eig.eigenvectors().col(0) * eig.eigenvectors().col(0).dot(gv);
    }
    cuda::Exact dev = cuda::exact_on(0);
    BasicExact<device::LayerFactorization<device::HostLayer>> host;
    dev.reset(n);
    host.reset(n);
    dev.new_iterate(g, ConstBlockView<double>(h.data(), n, n));
    host.new_iterate(g, ConstBlockView<double>(h.data(), n, n));
    for (const double radius : {1e3, 3.0, 0.3}) {
      INFO("kind " << kind << ", radius " << radius);
      std::vector<double> pd(static_cast<std::size_t>(n)), ph(pd.size());
      const auto no_hvp = [](const double*, double*) {};
      const SubproblemStep sd = dev.solve(radius, no_hvp, pd), sh = host.solve(radius, no_hvp, ph);
      REQUIRE_FALSE(sd.failed);
      CHECK(sd.hits_boundary == sh.hits_boundary);
      CHECK(sd.model <= 0.75 * sh.model);
      CHECK(sh.model <= 0.75 * sd.model);
      if (!sh.hits_boundary) {
        double w = 0, l = 0;
        for (std::size_t i = 0; i < ph.size(); ++i) w = std::max(w, std::abs(pd[i] - ph[i])), l = std::max(l, std::abs(ph[i]));
        CHECK(w <= 1e-10 * l);
      }
    }
  }
}

TEST_CASE("cuda::Exact: fits of a CUDA likelihood reach the host Exact's minimum", "[cuda]") {
  // Symmetric variations: with 40 asymmetric ones this random model has several local minima, and two minimizers may
  // stop in different ones.
  const Model m = test::random_model({.bins = 200, .masked_bins = 8, .procs = 3, .nsyst = 40, .asymmetric = false, .seed = 43});
  Likelihood<Shard<cuda::Devices, storage::Dense>> gpu(m, cuda::Devices{{0, 0}});
  SerialLikelihood host(m);
  // ∇²f only: a CUDA likelihood offers no Gauss–Newton matrix (its shard has no Curvature pass), so
  // Curvature::gauss_newton is refused there, whichever subproblem.
  const TrustRegionOptions o;
  const TrustRegion<cuda::Exact> on_device(o, cuda::Devices{{0}}.exact_subproblem());
  const FitResult a = fit(gpu, on_device), b = fit(host, TrustRegion<Exact>(o));
  CHECK(a.status == b.status);
  CHECK(a.nll == Approx(b.nll).epsilon(1e-12));
  // The λ iterations differ (inverse iteration, the device's rounding), so the fits may stop an iteration apart: each
  // stop lies within √(2·EDM) standard deviations of the minimum.
  REQUIRE(std::isfinite(a.edm));
  REQUIRE(std::isfinite(b.edm));
  const double apart = 2 * (std::sqrt(2 * a.edm) + std::sqrt(2 * b.edm)) + 1e-9;
  for (std::size_t i = 0; i < a.x.size(); ++i) CHECK(a.x[i] == Approx(b.x[i]).margin(apart * std::max(1.0, b.uncertainties[i])));
  // Run after run, bitwise (cuBLAS without atomics, one handle per layer).
  const FitResult again = fit(gpu, on_device);
  CHECK(test::same_bits(again.x, a.x));
  CHECK_THROWS_AS(fit(gpu, TrustRegion<cuda::Exact>(TrustRegionOptions{.curvature = Curvature::gauss_newton})), usage_error);
}
