// SPDX-License-Identifier: MIT
// Runs fitlib's trust-region minimizers on the problems of benchmarks/compare_scipy.py, one JSON line per run.
//
// Usage: fitlib_scipy_problems [--quad50 PATH] [--repeats N] [--max-seconds S] [--only PROBLEM[/METHOD]]
// Problems: rosen1000 (Rosenbrock, n = 1000, x0 = −1.2, 1, …), quad50 (A, b, x0 from
// quad50_problem.json), quad2000 (½xᵀAx − bᵀx, A_ij = 0.9^|i−j|, b_i = sin(i+1), x0 = 0).
// Methods: trust-ncg (SteihaugCG), trust-krylov (Gltr, inexact), trust-exact (Exact). Each row is
// the best wall time of `repeats` complete minimisations (init + run), fewer once a row's runs
// have taken `max-seconds`; the objective's setup (building A) is outside the timing, as it is
// on the SciPy side.
#include <Eigen/Core>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <fitlib/core/concepts.hpp>
#include <fitlib/minimize/exact.hpp>
#include <fitlib/minimize/gltr.hpp>
#include <fitlib/minimize/status.hpp>
#include <fitlib/minimize/steihaug_cg.hpp>
#include <fitlib/minimize/trust_region.hpp>

#ifndef FITLIB_SCIPY_DATA_DIR
#define FITLIB_SCIPY_DATA_DIR "tests/data/scipy-trust-region"
#endif

namespace {

using fitlib::BlockView;
using fitlib::ConstBlockView;
using fitlib::index_t;
using Vec = Eigen::Map<Eigen::VectorXd>;
using CVec = Eigen::Map<const Eigen::VectorXd>;
using CMat = Eigen::Map<const Eigen::MatrixXd, 0, Eigen::OuterStride<>>;
using Mat = Eigen::Map<Eigen::MatrixXd, 0, Eigen::OuterStride<>>;

/// scipy.optimize.rosen with O(n) value, gradient and (tridiagonal) Hessian-vector product; the
/// dense Hessian is formed only for Exact.
struct Rosenbrock {
  index_t n;
  index_t size() const { return n; }

  double value_at(const double* x) const {
    double f = 0;
    for (index_t i = 0; i + 1 < n; ++i) {
      const double t = x[i + 1] - x[i] * x[i], u = 1 - x[i];
      f += 100.0 * t * t + u * u;
    }
    return f;
  }
  double value_grad_at(const double* x, double* g) const {
    double f = 0;
    g[0] = 0;
    for (index_t i = 0; i + 1 < n; ++i) {
      const double t = x[i + 1] - x[i] * x[i], u = 1 - x[i];
      f += 100.0 * t * t + u * u;
      g[i] += -400.0 * x[i] * t - 2.0 * u;
      g[i + 1] = 200.0 * t;
    }
    return f;
  }
  void value(ConstBlockView<double> X, std::span<double> f) const {
    for (index_t j = 0; j < X.cols; ++j) f[static_cast<std::size_t>(j)] = value_at(X.col(j));
  }
  void value_grad(ConstBlockView<double> X, std::span<double> f, BlockView<double> G) const {
    for (index_t j = 0; j < X.cols; ++j) {
      const double v = value_grad_at(X.col(j), G.col(j));
      if (!f.empty()) f[static_cast<std::size_t>(j)] = v;
    }
  }
  /// scipy.optimize.rosen_hess_prod: H is tridiagonal.
  void hessp(ConstBlockView<double> X, ConstBlockView<double> V, BlockView<double> HV) const {
    for (index_t k = 0; k < V.cols; ++k) {
      const double* x = X.col(X.cols == 1 ? 0 : k);
      const double* p = V.col(k);
      double* hp = HV.col(k);
      if (n == 1) {
        hp[0] = 0;
        continue;
      }
      hp[0] = (1200.0 * x[0] * x[0] - 400.0 * x[1] + 2.0) * p[0] - 400.0 * x[0] * p[1];
      for (index_t i = 1; i + 1 < n; ++i)
        hp[i] = -400.0 * x[i - 1] * p[i - 1] + (202.0 + 1200.0 * x[i] * x[i] - 400.0 * x[i + 1]) * p[i] - 400.0 * x[i] * p[i + 1];
      hp[n - 1] = -400.0 * x[n - 2] * p[n - 2] + 200.0 * p[n - 1];
    }
  }
  void hessian(ConstBlockView<double> X, std::span<double> f, BlockView<double> G, BlockView<double> H) const {
    value_grad(X, f, G);
    for (index_t j = 0; j < X.cols; ++j) {
      const double* x = X.col(j);
      Mat h(H.col(j * n), n, n, Eigen::OuterStride<>(H.ld));
      h.setZero();
      for (index_t i = 0; i + 1 < n; ++i) {
        h(i, i) += 1200.0 * x[i] * x[i] - 400.0 * x[i + 1] + 2.0;
        h(i + 1, i + 1) += 200.0;
        h(i, i + 1) = h(i + 1, i) = -400.0 * x[i];
      }
    }
  }
};

/// ½xᵀAx − bᵀx with a dense symmetric A (column-major); every product is one Eigen GEMV/GEMM.
struct Quadratic {
  index_t n;
  std::vector<double> A, b;
  mutable std::vector<double> Ax;
  index_t size() const { return n; }

  CMat a() const { return CMat(A.data(), n, n, Eigen::OuterStride<>(n)); }

  double value_grad_at(const double* x, double* g) const {
    CVec xv(x, n), bv(b.data(), n);
    Vec gv(g, n);
    gv.noalias() = a() * xv;
    const double f = 0.5 * xv.dot(gv) - bv.dot(xv);
    gv -= bv;
    return f;
  }
  void value(ConstBlockView<double> X, std::span<double> f) const {
    Ax.resize(static_cast<std::size_t>(n));
    for (index_t j = 0; j < X.cols; ++j) f[static_cast<std::size_t>(j)] = value_grad_at(X.col(j), Ax.data());
  }
  void value_grad(ConstBlockView<double> X, std::span<double> f, BlockView<double> G) const {
    for (index_t j = 0; j < X.cols; ++j) {
      const double v = value_grad_at(X.col(j), G.col(j));
      if (!f.empty()) f[static_cast<std::size_t>(j)] = v;
    }
  }
  void hessp(ConstBlockView<double>, ConstBlockView<double> V, BlockView<double> HV) const {
    Mat hv(HV.data, n, V.cols, Eigen::OuterStride<>(HV.ld));
    if (V.cols == 1)
      hv.col(0).noalias() = a() * CVec(V.data, n);
    else
      hv.noalias() = a() * CMat(V.data, n, V.cols, Eigen::OuterStride<>(V.ld));
  }
  void hessian(ConstBlockView<double> X, std::span<double> f, BlockView<double> G, BlockView<double> H) const {
    value_grad(X, f, G);
    for (index_t j = 0; j < X.cols; ++j) Mat(H.col(j * n), n, n, Eigen::OuterStride<>(H.ld)) = a();
  }
};

static_assert(fitlib::objective_with_hessian<Rosenbrock>);
static_assert(fitlib::objective_with_hessian<Quadratic>);

/// The numbers of one JSON array that follows `"key":` in text (nested arrays flattened, row by row).
std::vector<double> json_array(const std::string& text, const std::string& key) {
  const auto at = text.find("\"" + key + "\"");
  if (at == std::string::npos) throw std::runtime_error("quad50 problem file has no \"" + key + "\"");
  auto pos = text.find('[', at);
  if (pos == std::string::npos) throw std::runtime_error("quad50 problem file: \"" + key + "\" is not an array");
  std::vector<double> out;
  int depth = 0;
  for (; pos < text.size(); ++pos) {
    const char c = text[pos];
    if (c == '[') {
      ++depth;
    } else if (c == ']') {
      if (--depth == 0) return out;
    } else if (c == '-' || c == '+' || c == '.' || (c >= '0' && c <= '9')) {
      char* end = nullptr;
      out.push_back(std::strtod(text.c_str() + pos, &end));
      pos = static_cast<std::size_t>(end - text.c_str()) - 1;
    }
  }
  throw std::runtime_error("quad50 problem file: unterminated array \"" + key + "\"");
}

Quadratic quad50(const std::string& path, std::vector<double>& x0) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path + " (pass --quad50 PATH)");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  const std::vector<double> rows = json_array(text, "A");
  Quadratic q;
  q.b = json_array(text, "b");
  q.n = static_cast<index_t>(q.b.size());
  if (static_cast<index_t>(rows.size()) != q.n * q.n) throw std::runtime_error(path + ": A is not " + std::to_string(q.n) + "²");
  q.A.resize(rows.size());
  for (index_t i = 0; i < q.n; ++i)
    for (index_t j = 0; j < q.n; ++j) q.A[static_cast<std::size_t>(i + j * q.n)] = rows[static_cast<std::size_t>(i * q.n + j)];
  x0 = json_array(text, "x0");
  if (x0.empty()) x0.assign(static_cast<std::size_t>(q.n), 0.0);
  return q;
}

Quadratic ar1(index_t n) {
  Quadratic q;
  q.n = n;
  q.A.resize(static_cast<std::size_t>(n * n));
  q.b.resize(static_cast<std::size_t>(n));
  for (index_t j = 0; j < n; ++j)
    for (index_t i = 0; i < n; ++i) q.A[static_cast<std::size_t>(i + j * n)] = std::pow(0.9, static_cast<double>(std::abs(i - j)));
  for (index_t i = 0; i < n; ++i) q.b[static_cast<std::size_t>(i)] = std::sin(static_cast<double>(i + 1));
  return q;
}

template <class Sub, class F>
void run(const std::string& problem, const std::string& method, F& f, const std::vector<double>& x0, const Sub& sub, int repeats,
         double max_seconds) {
  using TR = fitlib::TrustRegion<Sub>;
  const TR tr(fitlib::TrustRegionOptions{}, sub);  // SciPy's defaults: Δ₀ = 1, Δmax = 1000, η = 0.15, gtol = 1e-4
  typename TR::state_type s;
  double best = std::numeric_limits<double>::infinity(), spent = 0;
  int runs = 0;
  while (runs < repeats && (runs == 0 || spent < max_seconds)) {
    const auto t0 = std::chrono::steady_clock::now();
    tr.init(f, s, x0);
    tr.run(f, s);
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::min(best, dt);
    spent += dt;
    ++runs;
  }
  std::printf(
      "{\"problem\":\"%s\",\"method\":\"%s\",\"n\":%td,\"iterations\":%td,\"f\":%.17g,\"gnorm\":%.6g,\"seconds\":%.9g,"
      "\"runs\":%d,\"values\":%td,\"hvps\":%td,\"scipy_hessp\":%td,\"hessians\":%td,\"status\":\"%s\"}\n",
      problem.c_str(), method.c_str(), f.size(), s.iteration, s.f, s.gradient_norm, best, runs, s.counts.values, s.counts.hvps,
      s.counts.scipy_hessp, s.counts.hessians, std::string(fitlib::to_string(s.status)).c_str());
  std::fflush(stdout);
}

template <class F>
void run_all(const std::string& problem, F& f, const std::vector<double>& x0, int repeats, double max_seconds, const std::string& only) {
  auto wanted = [&](const std::string& method) {
    return only.empty() || only == problem || only == problem + "/" + method;
  };
  if (wanted("trust-ncg")) run(problem, "trust-ncg", f, x0, fitlib::SteihaugCG(), repeats, max_seconds);
  if (wanted("trust-krylov")) run(problem, "trust-krylov", f, x0, fitlib::Gltr(fitlib::GltrOptions{.inexact = true}), repeats, max_seconds);
  if (wanted("trust-exact")) run(problem, "trust-exact", f, x0, fitlib::Exact(), repeats, max_seconds);
}

}  // namespace

int main(int argc, char** argv) {
  std::string quad50_path = std::string(FITLIB_SCIPY_DATA_DIR) + "/quad50_problem.json";
  std::string only;
  int repeats = 3;
  double max_seconds = 60;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
      return argv[++i];
    };
    if (a == "--quad50") {
      quad50_path = next();
    } else if (a == "--repeats") {
      repeats = std::max(1, std::atoi(next().c_str()));
    } else if (a == "--max-seconds") {
      max_seconds = std::atof(next().c_str());
    } else if (a == "--only") {
      only = next();
    } else {
      std::fprintf(stderr, "usage: %s [--quad50 PATH] [--repeats N] [--max-seconds S] [--only PROBLEM[/METHOD]]\n", argv[0]);
      return 2;
    }
  }
  try {
    {
      Rosenbrock f{1000};
      std::vector<double> x0(1000);
      for (std::size_t i = 0; i < x0.size(); ++i) x0[i] = i % 2 == 0 ? -1.2 : 1.0;
      run_all("rosen1000", f, x0, repeats, max_seconds, only);
    }
    if (only.empty() || only.rfind("quad50", 0) == 0) {
      std::vector<double> x0;
      Quadratic f = quad50(quad50_path, x0);
      run_all("quad50", f, x0, repeats, max_seconds, only);
    }
    if (only.empty() || only.rfind("quad2000", 0) == 0) {
      Quadratic f = ar1(2000);
      const std::vector<double> x0(2000, 0.0);
      run_all("quad2000", f, x0, repeats, max_seconds, only);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fitlib_scipy_problems: %s\n", e.what());
    return 1;
  }
  return 0;
}
