// SPDX-License-Identifier: MIT
// bench_cuda: the CUDA backend's figures, each a ratio to a limit or a peer measured in the same run
// (issue 16). Timed by CUDA events and the host clock (no Google Benchmark: the GPU machine is bare).
//
//   bench_cuda [--quick] [--json FILE]
//
// - limits: the device's copy bandwidth (a triad kernel, a = b + s·c, best of 5) and cuBLAS's DGEMM rate
//   (m = n = k = 8192, best of 3);
// - passes: value+gradient and value+gradient+HVP of the largest synthetic model (10⁵ bins × 8 processes ×
//   1000 asymmetric systematics, 12.8 GB of templates; --quick: 10⁴ × 8 × 100), as the fraction of the triad
//   bandwidth that the templates' two reads per pass (the forward and the backward GEMM) reach; beside
//   cpu::Threads on every host core on the same model; the same passes with the model's templates sparse (10 % of
//   the variations non-zero: the CSR and CSC kernels, as the fraction of the triad for their entries' two reads);
// - batches: one pass over 256 and 1024 parameter columns (10⁴ × 8 × 200), as the fraction of DGEMM's rate
//   its two GEMMs reach, and toy fits per second as one replica batch against cpu::Threads' batches;
// - fit: a whole fit (trust-krylov, covariance included) of the largest model against cpu::Threads;
// - covariance: the postfit covariance's factor and inverse of n = 2000 and 6000 (--quick: 1000) on the device
//   (DeviceCholesky) against the host's HostCholesky;
// - exact: a Cholesky factorisation of n = 2000 and 6000 (--quick: 1000) for Exact on the device against the host's,
//   as factorisations per second, and a subproblem solve (indefinite, on the boundary) by cuda::Exact against Exact.
// Exit code 77 where there is no CUDA device.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include "fitlib/cuda.cuh"
#include "synthetic_model.hpp"

using namespace fitlib;
using clock_type = std::chrono::steady_clock;
using GpuLikelihood = Likelihood<Shard<cuda::Devices, storage::Dense>>;
using CpuLikelihood = Likelihood<Shard<cpu::Threads, storage::Dense>>;

namespace {

template <class F>
double seconds(F&& f) {
  const auto t0 = clock_type::now();
  f();
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}
/// The best of `reps` timings of f after one warm-up call.
template <class F>
double best_of(int reps, F&& f) {
  f();
  double best = 1e300;
  for (int r = 0; r < reps; ++r) best = std::min(best, seconds(f));
  return best;
}

__global__ void triad(double* a, const double* b, const double* c, double s, std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n; i += std::size_t{gridDim.x} * blockDim.x) a[i] = b[i] + s * c[i];
}

/// The best of 5 timings (after one warm-up) of work(stream) in seconds, by CUDA events on that stream.
template <class Work>
double best_of_events(cudaStream_t stream, Work&& work) {
  cudaEvent_t e0, e1;
  cuda::check(cudaEventCreate(&e0), "cudaEventCreate", 0);
  cuda::check(cudaEventCreate(&e1), "cudaEventCreate", 0);
  float best = 1e30f;
  for (int r = 0; r < 6; ++r) {
    cuda::check(cudaEventRecord(e0, stream), "cudaEventRecord", 0);
    work(stream);
    cuda::check(cudaEventRecord(e1, stream), "cudaEventRecord", 0);
    cuda::check(cudaEventSynchronize(e1), "cudaEventSynchronize", 0);
    float ms = 0;
    cuda::check(cudaEventElapsedTime(&ms, e0, e1), "cudaEventElapsedTime", 0);
    if (r > 0) best = std::min(best, ms);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return best * 1e-3;
}

std::vector<double> ramp(std::size_t n) {
  std::vector<double> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = std::sin(0.37 * static_cast<double>(i) + 0.1);
  return v;
}

/// Device copy bandwidth in bytes/s: the triad over three 512 MiB arrays.
double triad_bandwidth() {
  const std::size_t n = std::size_t{64} << 20;
  cuda::Layer layer(cuda::ShardResource{0});
  cuda::Buffer<double> a, b, c;
  layer.zero(a, static_cast<index_t>(n));
  layer.zero(b, static_cast<index_t>(n));
  layer.zero(c, static_cast<index_t>(n));
  const double t = best_of_events(layer.stream(), [&](cudaStream_t s) {
    triad<<<4096, 256, 0, s>>>(a.data(), b.data(), c.data(), 1.5, n);
    cuda::check(cudaGetLastError(), "the triad kernel", 0);
  });
  return 3.0 * static_cast<double>(n) * sizeof(double) / t;
}

/// cuBLAS DGEMM in flop/s at m = n = k = 8192, on data that are not zeros (zeros draw less power).
double dgemm_rate() {
  const index_t m = 8192;
  cuda::Layer layer(cuda::ShardResource{0});
  cuda::Buffer<double> a, c;
  const std::vector<double> host = ramp(static_cast<std::size_t>(m * m));
  layer.upload(std::span<const double>(host), a);
  layer.resize(c, m * m);
  const double t = best_of_events(layer.stream(), [&](cudaStream_t) { layer.gemm(false, m, m, m, a.data(), m, a.data(), m, c.data(), m); });
  return 2.0 * static_cast<double>(m) * m * m / t;
}

index_t host_cores() { return std::max<index_t>(1, static_cast<index_t>(std::thread::hardware_concurrency())); }

LikelihoodOptions shards(index_t k) {
  LikelihoodOptions o;
  o.shards = k;
  return o;
}

/// A block of `cols` parameter points near the default (column j shifted by 1e-3·j along every parameter).
std::vector<double> points(const std::vector<double>& x0, index_t cols) {
  std::vector<double> x;
  for (index_t j = 0; j < cols; ++j)
    for (double v : x0) x.push_back(v + 1e-3 * static_cast<double>(j));
  return x;
}

/// The results so far, written out after every section (a later crash or time limit keeps what was measured).
struct Json {
  std::string path;
  std::string text = "{";
  void add(const std::string& key, const std::string& raw) { text += (text.size() > 1 ? ",\n \"" : "\n \"") + key + "\": " + raw; }
  void num(const std::string& key, double v) {
    char b[64];
    std::snprintf(b, sizeof b, "%.6g", v);
    add(key, std::isfinite(v) ? b : "null");
  }
  void str(const std::string& key, const std::string& v) { add(key, "\"" + v + "\""); }
  void write() const {
    if (path.empty()) return;
    if (FILE* fp = std::fopen(path.c_str(), "w")) {
      std::fputs((text + "\n}\n").c_str(), fp);
      std::fclose(fp);
    }
  }
};

#if defined(__AVX512F__)
constexpr const char* host_isa = "AVX-512";
#elif defined(__AVX2__)
constexpr const char* host_isa = "AVX2";
#else
constexpr const char* host_isa = "SSE2";
#endif

int run(bool quick, Json& out);

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // each line out at once, also into a pipe
  bool quick = false;
  std::string json_path;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--quick")) quick = true;
    else if (!std::strcmp(argv[i], "--json") && i + 1 < argc) json_path = argv[++i];
    else {
      std::fprintf(stderr, "usage: bench_cuda [--quick] [--json FILE]\n");
      return 2;
    }
  }
  try {
    if (cuda::device_count() == 0) {
      std::puts("no CUDA device (or no NVIDIA driver): bench_cuda did not run");
      return 77;
    }
    Json out{json_path};
    return run(quick, out);
  } catch (const std::exception& e) {
    std::printf("bench_cuda: %s\n", e.what());
    return 1;
  }
}

namespace {
int run(bool quick, Json& out) {
  cudaDeviceProp prop{};
  cuda::check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties", 0);
  out.str("device", prop.name);
  out.num("host_cores", static_cast<double>(host_cores()));
  out.str("host_isa", host_isa);
  const double triad_Bs = triad_bandwidth(), dgemm_Fs = dgemm_rate();
  out.num("triad_GBs", triad_Bs / 1e9);
  out.num("dgemm_GFs", dgemm_Fs / 1e9);
  std::printf("%s: triad %.0f GB/s, DGEMM %.0f GFLOP/s; host: %td cores, cpu::Threads built for %s\n", prop.name, triad_Bs / 1e9, dgemm_Fs / 1e9,
              host_cores(), host_isa);
  out.write();

  // Passes over the largest model.
  const bench::Config big = quick ? bench::Config{10000, 8, 100, true} : bench::Config{100000, 8, 1000, true};
  const auto model = bench::synthetic_model(big);
  const double logk_bytes = static_cast<double>(big.bins * big.procs * model->ncoef()) * sizeof(double);
  GpuLikelihood gpu(model, cuda::Devices{{0}});
  CpuLikelihood cpu(model, cpu::Threads{host_cores()}, shards(host_cores()));
  const std::vector<double> x0 = gpu.default_parameters();
  const index_t n = static_cast<index_t>(x0.size());
  std::vector<double> g(static_cast<std::size_t>(n)), hv(g.size()), v(g.size(), 1e-2);
  double f = 0;
  const ConstBlockView<double> X(x0.data(), n, 1), V(v.data(), n, 1);
  const BlockView<double> G(g.data(), n, 1), HV(hv.data(), n, 1);
  const double t_vg = best_of(5, [&] { gpu.value_grad(X, std::span(&f, 1), G); });
  const double t_vgh = best_of(5, [&] { gpu.value_grad_hessp(X, V, std::span(&f, 1), G, HV); });
  const double c_vg = best_of(3, [&] { cpu.value_grad(X, std::span(&f, 1), G); });
  const double frac_vg = 2 * logk_bytes / t_vg / triad_Bs, frac_vgh = 2 * logk_bytes / t_vgh / triad_Bs;
  std::printf("%s: value+gradient %.2f ms (%.2f of the triad for two template reads; cpu::Threads %.1f ms, %.1fx), +HVP %.2f ms (%.2f)\n",
              big.name().c_str(), t_vg * 1e3, frac_vg, c_vg * 1e3, c_vg / t_vg, t_vgh * 1e3, frac_vgh);
  out.str("pass_model", big.name());
  out.num("value_grad_ms", t_vg * 1e3);
  out.num("value_grad_triad_fraction", frac_vg);
  out.num("value_grad_hvp_ms", t_vgh * 1e3);
  out.num("value_grad_hvp_triad_fraction", frac_vgh);
  out.num("value_grad_cpu_threads_ms", c_vg * 1e3);
  out.write();

  // The same passes over sparse templates (10 % of the variations non-zero), each entry read twice per pass (CSR
  // forward, CSC backward) with its index: the fraction of the triad, and against cpu::Threads' sparse shards.
  const bench::Config sparse_cfg{big.bins, big.procs, big.nsyst, big.asymmetric, 0.1};
  const auto smodel = bench::synthetic_model(sparse_cfg);
  const double sparse_bytes = 2.0 * static_cast<double>(smodel->sparse()->nnz()) * (sizeof(double) + sizeof(index_t));
  Likelihood<Shard<cuda::Devices, storage::Sparse>> sgpu(smodel, cuda::Devices{{0}});
  Likelihood<Shard<cpu::Threads, storage::Sparse>> scpu(smodel, cpu::Threads{host_cores()}, shards(host_cores()));
  const double ts_vg = best_of(5, [&] { sgpu.value_grad(X, std::span(&f, 1), G); });
  const double ts_vgh = best_of(5, [&] { sgpu.value_grad_hessp(X, V, std::span(&f, 1), G, HV); });
  const double cs_vg = best_of(3, [&] { scpu.value_grad(X, std::span(&f, 1), G); });
  std::printf("%s: value+gradient %.2f ms (%.2f of the triad for the CSR and CSC reads; cpu::Threads %.1f ms, %.1fx), +HVP %.2f ms\n",
              sparse_cfg.name().c_str(), ts_vg * 1e3, sparse_bytes / ts_vg / triad_Bs, cs_vg * 1e3, cs_vg / ts_vg, ts_vgh * 1e3);
  out.str("sparse_pass_model", sparse_cfg.name());
  out.num("sparse_value_grad_ms", ts_vg * 1e3);
  out.num("sparse_value_grad_triad_fraction", sparse_bytes / ts_vg / triad_Bs);
  out.num("sparse_value_grad_hvp_ms", ts_vgh * 1e3);
  out.num("sparse_value_grad_cpu_threads_ms", cs_vg * 1e3);
  out.write();

  // Batches: one pass over many columns, and toy fits as one replica batch.
  const bench::Config mid{10000, 8, 200, true};
  const auto bmodel = bench::synthetic_model(mid);
  GpuLikelihood bgpu(bmodel, cuda::Devices{{0}});
  CpuLikelihood bcpu(bmodel, cpu::Threads{host_cores()}, shards(host_cores()));
  const std::vector<double> b0 = bgpu.default_parameters();
  const index_t bn = static_cast<index_t>(b0.size());
  const double cells = static_cast<double>(mid.bins * mid.procs), ncoef = static_cast<double>(bmodel->ncoef());
  TrustRegionOptions tro;
  tro.edm_tol = 1e-12;
  const TrustRegion<Gltr> minimizer(tro);
  FitOptions fo;
  fo.covariance = false;
  std::string batches = "[";
  double cpu_toys_per_s = 0;  // cpu::Threads' batch of 128 toys, measured once
  for (index_t N : {index_t{256}, index_t{1024}}) {
    if (quick && N > 256) break;
    const std::vector<double> xs = points(b0, N);
    std::vector<double> fs(static_cast<std::size_t>(N)), gs(static_cast<std::size_t>(bn * N));
    const double t = best_of(3, [&] { bgpu.value_grad({xs.data(), bn, N}, std::span(fs), {gs.data(), bn, N}); });
    const double frac = 2 * 2 * cells * ncoef * static_cast<double>(N) / t / dgemm_Fs;
    // Toys: the GPU fits N as one batch; cpu::Threads fits min(N, 128) as one batch (its toys per second).
    SerialLikelihood gen(bmodel);
    std::vector<ReplicaInputs> toys;
    for (index_t i = 1; i <= N; ++i) {
      const Toy toy = generate_toy(gen, 2026, static_cast<std::uint64_t>(i));
      toys.push_back({});
      toys.back().data = toy.data;
      toys.back().constraint_centres = toy.constraints.theta0;
    }
    bgpu.set_replicas(toys);
    index_t converged = 0;
    const double tg = seconds([&] {
      converged = ReplicaBatch<>(N).fit(bgpu, minimizer, std::vector<FitOptions>(static_cast<std::size_t>(N), fo)).converged();
    });
    if (cpu_toys_per_s == 0) {
      const index_t Nc = 128;
      bcpu.set_replicas({toys.begin(), toys.begin() + Nc});
      cpu_toys_per_s = static_cast<double>(Nc) / seconds([&] {
        ReplicaBatch<>(Nc).fit(bcpu, minimizer, std::vector<FitOptions>(static_cast<std::size_t>(Nc), fo));
      });
    }
    const double gps = static_cast<double>(N) / tg, cps = cpu_toys_per_s;
    std::printf("batch of %td columns (%s): pass %.2f ms, %.2f of DGEMM; %td toys in %.2f s (%.1f/s, %td converged), cpu::Threads %.1f/s: %.1fx\n", N,
                mid.name().c_str(), t * 1e3, frac, N, tg, gps, converged, cps, gps / cps);
    char b[512];
    std::snprintf(b, sizeof b,
                  "%s{\"columns\": %td, \"pass_ms\": %.6g, \"dgemm_fraction\": %.4g, \"toys_per_s\": %.6g, \"converged\": %td, "
                  "\"cpu_threads_toys_per_s\": %.6g, \"ratio\": %.4g}",
                  batches.size() > 1 ? ", " : "", N, t * 1e3, frac, gps, converged, cps, gps / cps);
    batches += b;
  }
  out.add("batches", batches + "]");
  out.write();

  // A whole fit of the largest model.
  const TrustRegion<Gltr> krylov(tro);
  FitResult rg, rc;
  const double tg = seconds([&] { rg = fit(gpu, krylov); });
  const double tc = seconds([&] { rc = fit(cpu, krylov); });
  double dx = rg.x.size() == rc.x.size() && rc.uncertainties.size() == rc.x.size() ? 0.0 : std::nan("");
  for (std::size_t i = 0; std::isfinite(dx) && i < rg.x.size(); ++i)
    if (rc.uncertainties[i] > 0) dx = std::max(dx, std::abs(rg.x[i] - rc.x[i]) / rc.uncertainties[i]);
  std::printf("fit of %s: %.2f s on the GPU, %.2f s on cpu::Threads (%.1fx); %d and %d iterations, max |dx|/sigma %.1e\n", big.name().c_str(), tg, tc,
              tc / tg, static_cast<int>(rg.iterations), static_cast<int>(rc.iterations), dx);
  out.num("fit_gpu_s", tg);
  out.num("fit_cpu_threads_s", tc);
  out.num("fit_ratio", tc / tg);
  out.num("fit_max_dx_over_sigma", dx);
  out.write();

  // The postfit covariance: factor and inverse of an n × n Hessian on the device (DeviceCholesky: potrf, potri, the
  // matrix down and the inverse back) against the host's (HostCholesky: Eigen's LLT, L⁻¹, L⁻ᵀL⁻¹).
  std::string inverses = "[";
  for (index_t N : quick ? std::vector<index_t>{1000} : std::vector<index_t>{2000, 6000}) {
    std::vector<double> H(static_cast<std::size_t>(N * N)), ch(H.size()), cd(H.size());
    for (index_t c = 0; c < N; ++c)
      for (index_t r = 0; r < N; ++r) H[static_cast<std::size_t>(r + c * N)] = (r == c ? static_cast<double>(N) : 0.0) + std::cos(0.1 * static_cast<double>(r * c + 1));
    detail::HostCholesky host;
    cuda::DeviceCholesky dev;
    const double th = seconds([&] {
      if (host.factor({H.data(), N, N})) host.inverse({ch.data(), N, N});
    });
    const double td = best_of(3, [&] {
      if (dev.factor({H.data(), N, N})) dev.inverse({cd.data(), N, N});
    });
    double worst = 0, largest = 0;
    for (std::size_t k = 0; k < H.size(); ++k) {
      worst = std::max(worst, std::abs(cd[k] - ch[k]));
      largest = std::max(largest, std::abs(ch[k]));
    }
    std::printf("postfit covariance of %td parameters: device %.1f ms (factor + inverse, both copies), host %.1f ms: %.1fx; max |diff| %.1e of the largest\n",
                N, td * 1e3, th * 1e3, th / td, worst / largest);
    char b[256];
    std::snprintf(b, sizeof b, "%s{\"n\": %td, \"device_ms\": %.6g, \"host_ms\": %.6g, \"ratio\": %.4g, \"relative_difference\": %.3g}",
                  inverses.size() > 1 ? ", " : "", N, td * 1e3, th * 1e3, th / td, worst / largest);
    inverses += b;
  }
  out.add("covariance_inverse", inverses + "]");
  out.write();

  // Exact's dense algebra: one Cholesky factorisation of H + λI where H already lies there, on the device
  // (device::LayerFactorization over cuda::Layer: cuSOLVER's potrf) against the host's (Eigen's blocked LLT,
  // detail::exact::HostFactorization), as factorisations per second; and a whole subproblem solve at one iterate (H
  // down once, the Moré–Sorensen λ trials, the step back) by cuda::Exact against Exact, indefinite H with the step on
  // the boundary, so that it takes several trials (their counts reported).
  std::string exacts = "[";
  for (index_t N : quick ? std::vector<index_t>{1000} : std::vector<index_t>{2000, 6000}) {
    std::vector<double> H(static_cast<std::size_t>(N * N)), g(static_cast<std::size_t>(N)), pd(g.size()), ph(g.size());
    for (index_t c = 0; c < N; ++c) {
      g[static_cast<std::size_t>(c)] = std::sin(0.3 * static_cast<double>(c) + 0.2);
      for (index_t r = 0; r < N; ++r)
        H[static_cast<std::size_t>(r + c * N)] = (r == c ? -1.0 + 4.0 * static_cast<double>(r) / static_cast<double>(N) : 0.0) + 0.01 * std::cos(0.1 * static_cast<double>(r * c + 1));
    }
    const ConstBlockView<double> Hv(H.data(), N, N);
    const double lambda = 2.0;  // H + 2I is positive definite: every factorisation runs to the end
    device::LayerFactorization<cuda::Layer> dev_factor(cuda::ShardResource{0});
    detail::exact::HostFactorization host_factor;
    dev_factor.reset(N, false);
    host_factor.reset(N, false);
    dev_factor.set_matrix(Hv);
    host_factor.set_matrix(Hv);
    index_t info_d = -1, info_h = -1;
    const double tfd = best_of(3, [&] { info_d = dev_factor.factor(lambda); });  // returns once potrf's info is back
    const double tfh = seconds([&] { info_h = host_factor.factor(lambda); });
    const double radius = 1.0;
    const auto no_hvp = [](const double*, double*) {};
    cuda::Exact dev = cuda::exact_on(0);
    Exact host;
    dev.reset(N);
    host.reset(N);
    SubproblemStep sd, sh;
    const double td = best_of(3, [&] {
      dev.new_iterate(g, Hv);
      sd = dev.solve(radius, no_hvp, pd);
    });
    const double th = seconds([&] {
      host.new_iterate(g, Hv);
      sh = host.solve(radius, no_hvp, ph);
    });
    const auto fd = dev.cholesky_attempts().size(), fh = host.cholesky_attempts().size();
    std::printf("Exact, n = %td: a factorisation on the device %.2f ms, on the host %.1f ms (%.1fx; info %td, %td); a subproblem solve on the "
                "device %.1f ms (%zu factorisations), on the host %.1f ms (%zu): %.1fx; models %.6g and %.6g\n",
                N, tfd * 1e3, tfh * 1e3, tfh / tfd, info_d, info_h, td * 1e3, fd, th * 1e3, fh, th / td, sd.model, sh.model);
    char b[512];
    std::snprintf(b, sizeof b,
                  "%s{\"n\": %td, \"factor_device_ms\": %.6g, \"factor_host_ms\": %.6g, \"factorisations_per_s_ratio\": %.4g, "
                  "\"solve_device_ms\": %.6g, \"solve_device_factorisations\": %zu, \"solve_host_ms\": %.6g, \"solve_host_factorisations\": %zu, "
                  "\"solve_ratio\": %.4g, \"device_model\": %.8g, \"host_model\": %.8g}",
                  exacts.size() > 1 ? ", " : "", N, tfd * 1e3, tfh * 1e3, tfh / tfd, td * 1e3, fd, th * 1e3, fh, th / td, sd.model, sh.model);
    exacts += b;
  }
  out.add("exact_subproblem", exacts + "]");
  out.write();
  return 0;
}
}  // namespace
