// SPDX-License-Identifier: MIT
// The machine's limits the benchmarks report against: memory bandwidth and DGEMM rate, measured once per run.
#pragma once

#include <benchmark/benchmark.h>

#include <Eigen/Core>
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include <fitlib/config.hpp>
#include <fitlib/core/types.hpp>
#include <fitlib/device/threads.hpp>

namespace fitlib::bench {

/// STREAM triad a = b + s·c over arrays far larger than the last-level cache, best of 5; bytes
/// counted as STREAM does (two reads and one write of 8 bytes per element).
inline double triad_bandwidth() {
  static const double bw = [] {
    const std::size_t n = std::size_t{1} << 25;  // 256 MiB per array
    std::vector<double> a(n, 0.0), b(n, 1.0), c(n, 2.0);
    double best = 1e30;
    for (int rep = 0; rep < 5; ++rep) {
      const auto t0 = std::chrono::steady_clock::now();
      double* FITLIB_RESTRICT pa = a.data();
      const double* FITLIB_RESTRICT pb = b.data();
      const double* FITLIB_RESTRICT pc = c.data();
      for (std::size_t i = 0; i < n; ++i) pa[i] = pb[i] + 3.0 * pc[i];
      benchmark::DoNotOptimize(pa);
      benchmark::ClobberMemory();
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    return 3.0 * 8.0 * static_cast<double>(n) / best;
  }();
  return bw;
}

/// The same triad on k threads (a fork-join pool), each over its own part of the arrays, best of 5.
inline double triad_bandwidth_on(index_t k) {
  const std::size_t n = std::size_t{1} << 25;
  std::vector<double> a(n, 0.0), b(n, 1.0), c(n, 2.0);
  const auto part = [&](index_t t) {
    const auto kk = static_cast<std::size_t>(k), tt = static_cast<std::size_t>(t);
    double* FITLIB_RESTRICT pa = a.data();
    const double* FITLIB_RESTRICT pb = b.data();
    const double* FITLIB_RESTRICT pc = c.data();
    for (std::size_t i = n * tt / kk; i < n * (tt + 1) / kk; ++i) pa[i] = pb[i] + 3.0 * pc[i];
    benchmark::DoNotOptimize(pa);
  };
  fitlib::detail::ForkJoinPool pool(k - 1);
  double best = 1e30;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    pool.run(k, part);
    benchmark::ClobberMemory();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return 3.0 * 8.0 * static_cast<double>(n) / best;
}

/// Eigen DGEMM on 1536² matrices, best of 3 (flops = 2·n³).
inline double dgemm_rate() {
  static const double rate = [] {
    const index_t n = 1536;
    Eigen::MatrixXd A = Eigen::MatrixXd::Random(n, n), B = Eigen::MatrixXd::Random(n, n), C(n, n);
    double best = 1e30;
    for (int rep = 0; rep < 3; ++rep) {
      const auto t0 = std::chrono::steady_clock::now();
      C.noalias() = A * B;
      benchmark::DoNotOptimize(C.data());
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    return 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n) / best;
  }();
  return rate;
}

/// Puts the machine's limits (and any `extra` figures) into Google Benchmark's context, which its JSON
/// output carries, and on stderr, so that stdout stays valid JSON with --benchmark_format=json.
inline void report_machine_limits(std::initializer_list<std::pair<const char*, double>> extra = {}) {
  const double triad = triad_bandwidth() / 1e9, dgemm = dgemm_rate() / 1e9;
  benchmark::AddCustomContext("triad_GBs", std::to_string(triad));
  benchmark::AddCustomContext("dgemm_GFLOPs", std::to_string(dgemm));
  std::fprintf(stderr, "triad bandwidth %.1f GB/s, Eigen DGEMM %.1f GFLOP/s", triad, dgemm);
  for (const auto& [name, value] : extra) {
    benchmark::AddCustomContext(name, std::to_string(value));
    std::fprintf(stderr, ", %s %.3g", name, value);
  }
  std::fprintf(stderr, "\n");
}

}  // namespace fitlib::bench
