// SPDX-License-Identifier: MIT
// n3fit's PDF parametrisation for examples/nnpdf (nnpdf-example.md §3 rows 13–15): a 2-25-20-8 network
// of (x, ln x) with tanh, tanh, linear layers, times the preprocessing x^{1−α}(1−x)^β, normalised by
// the valence and momentum sum rules; and its derivatives: outputs along a direction (tangent) and
// adjoints back to the weights (reverse), both through the sum rules' normalisations.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <numbers>
#include <span>
#include <vector>

#include <fitlib/replica/random.hpp>

#include "lo_dis.hpp"

namespace nnpdf {

/// The network's shape and the layout of its weights in a parameter vector: W1 (25 × 2), b1, W2
/// (20 × 25), b2, W3 (8 × 20), b3, each matrix row-major.
struct Network {
  static constexpr int n_in = 2, n1 = 25, n2 = 20, n_out = n_evol;
  static constexpr std::size_t w1 = 0, b1 = w1 + n1 * n_in, w2 = b1 + n1, b2 = w2 + n2 * n1, w3 = b2 + n2, b3 = w3 + n_out * n2,
                               size = b3 + n_out;

  /// Glorot-normal weights (Keras' glorot_normal: a normal truncated at 2σ, σ = √(2/(fan_in + fan_out))
  /// / 0.87962566 so that the truncated draw has standard deviation √(2/(fan_in + fan_out))) and zero
  /// biases, drawn from (seed, replica) alone: weight i from its own stream element.
  static std::vector<double> initial(std::uint64_t seed, std::uint64_t replica) {
    std::vector<double> w(size, 0.0);
    auto layer = [&](std::size_t at, int rows, int cols) {
      const double sigma = std::sqrt(2.0 / (rows + cols)) / 0.87962566;
      for (std::size_t i = at; i < at + static_cast<std::size_t>(rows * cols); ++i) {
        fitlib::RandomStream rng(seed, replica, fitlib::Stream::user, i);
        double z = rng.normal();
        while (std::abs(z) > 2) z = rng.normal();
        w[i] = sigma * z;
      }
    };
    layer(w1, n1, n_in);
    layer(w2, n2, n1);
    layer(w3, n_out, n2);
    return w;
  }
};

/// A PDF replica's fixed inputs: the preprocessing exponents per basis function.
struct Preprocessing {
  std::array<double, n_evol> alpha{}, beta{};

  /// α and β drawn uniformly from NNPDF4.0's ranges (nnpdf-example.md §3 row 14; nnpdf40-like.yml) from
  /// (seed, replica) alone.
  static Preprocessing draw(std::uint64_t seed, std::uint64_t replica) {
    // small-x α and large-x β ranges of Σ, g, V, V3, V8, T3, T8, T15
    static constexpr std::array<std::array<double, 4>, n_evol> ranges{{{1.089, 1.119, 1.475, 3.119},
                                                                         {0.7504, 1.098, 2.814, 5.669},
                                                                         {0.479, 0.7384, 1.549, 3.532},
                                                                         {0.1073, 0.4397, 1.733, 3.458},
                                                                         {0.5507, 0.7837, 1.516, 3.356},
                                                                         {-0.4506, 0.9305, 1.745, 3.424},
                                                                         {0.5877, 0.8687, 1.522, 3.515},
                                                                         {1.089, 1.141, 1.492, 3.222}}};
    const auto stream = static_cast<fitlib::Stream>(static_cast<std::uint32_t>(fitlib::Stream::user) + 1);
    Preprocessing p;
    for (std::size_t k = 0; k < n_evol; ++k) {
      const auto& r = ranges[k];
      p.alpha[k] = r[0] + (r[1] - r[0]) * fitlib::RandomStream(seed, replica, stream, 2 * k).uniform();
      p.beta[k] = r[2] + (r[3] - r[2]) * fitlib::RandomStream(seed, replica, stream, 2 * k + 1).uniform();
    }
    return p;
  }
};

/// Gauss–Legendre nodes and weights on [a, b], n points per panel, `panels` equal panels.
inline void gauss_legendre(double a, double b, int n, int panels, std::vector<double>& t, std::vector<double>& w) {
  std::vector<double> z(static_cast<std::size_t>(n)), wz(z.size());
  for (int i = 0; i < n; ++i) {  // Newton on P_n from the Chebyshev guess
    double x = std::cos(std::numbers::pi * (i + 0.75) / (n + 0.5)), dp = 0;
    for (int it = 0; it < 100; ++it) {
      double p0 = 1, p1 = x;
      for (int k = 2; k <= n; ++k) {
        const double p2 = ((2 * k - 1) * x * p1 - (k - 1) * p0) / k;
        p0 = p1;
        p1 = p2;
      }
      dp = n * (x * p1 - p0) / (x * x - 1);
      const double dx = p1 / dp;
      x -= dx;
      if (std::abs(dx) < 1e-16) break;
    }
    z[static_cast<std::size_t>(i)] = x;
    wz[static_cast<std::size_t>(i)] = 2 / ((1 - x * x) * dp * dp);
  }
  const double h = (b - a) / panels;
  for (int p = 0; p < panels; ++p)
    for (int i = 0; i < n; ++i) {
      t.push_back(a + h * (p + 0.5 * (1 + z[static_cast<std::size_t>(i)])));
      w.push_back(0.5 * h * wz[static_cast<std::size_t>(i)]);
    }
}

/// Where the network is evaluated: the FK grid's nodes, the sum rules' quadrature nodes, and the
/// positivity points, in that order; with the quadrature weights in ln x.
struct Points {
  std::vector<double> x;        ///< all points
  std::vector<double> log_x;    ///< ln x at each point (the network's second input)
  std::size_t grid = 0;         ///< [0, grid): the FK table's nodes
  std::size_t quad = 0;         ///< [grid, grid + quad): quadrature nodes
  std::vector<double> weights;  ///< quadrature weights in t = ln x (∫ f dx = ∫ x·f dt)

  Points(const std::vector<double>& grid_nodes, const std::vector<double>& positivity_x) {
    x = grid_nodes;
    grid = x.size();
    std::vector<double> t;
    gauss_legendre(std::log(1e-9), 0.0, 16, 6, t, weights);
    for (double ti : t) x.push_back(std::exp(ti));
    quad = t.size();
    x.insert(x.end(), positivity_x.begin(), positivity_x.end());
    for (double xi : x) log_x.push_back(std::log(xi));
  }
  std::size_t size() const { return x.size(); }
};

/// One replica's PDF on the points: the network's outputs o (x·f before normalisation), the sum rules'
/// normalisations A, and x·f_k = A_k·x^{1−α_k}(1−x)^{β_k}·o_k; with the hidden layers kept for the
/// derivatives.
class PdfReplica {
 public:
  using Row = std::array<double, n_evol>;

  /// Evaluates the network with weights `w` and the preprocessing `pre` on every point. A call with the bits of
  /// the last one's weights, preprocessing and points (the Hessian-vector products of a trust-region step, after
  /// its gradient at the same weights) keeps the state it made; the preprocessing factors are recomputed only for
  /// other exponents or points. Either way the state is bitwise what a full evaluation makes.
  void evaluate(std::span<const double> w, const Preprocessing& pre, const Points& pts) {
    const bool same_inputs = preprocessed(pre, pts);
    pts_ = &pts;
    if (same_inputs && same_bits(w_, w)) return;
    w_.assign(w.begin(), w.end());
    const std::size_t np = pts.size();
    if (!same_inputs) preprocess(pre, pts);
    h1_.resize(np * Network::n1);
    h2_.resize(np * Network::n2);
    out_.resize(np);
    for (std::size_t p = 0; p < np; ++p) {
      const double u[2] = {pts.x[p], pts.log_x[p]};
      double* h1 = &h1_[p * Network::n1];
      double* h2 = &h2_[p * Network::n2];
      for (int i = 0; i < Network::n1; ++i)
        h1[i] = std::tanh(w[Network::b1 + i] + w[Network::w1 + 2 * i] * u[0] + w[Network::w1 + 2 * i + 1] * u[1]);
      for (int i = 0; i < Network::n2; ++i) {
        double z = w[Network::b2 + i];
        for (int j = 0; j < Network::n1; ++j) z += w[Network::w2 + i * Network::n1 + j] * h1[j];
        h2[i] = std::tanh(z);
      }
      for (int k = 0; k < n_evol; ++k) {
        double z = w[Network::b3 + k];
        for (int j = 0; j < Network::n2; ++j) z += w[Network::w3 + k * Network::n2 + j] * h2[j];
        out_[p][static_cast<std::size_t>(k)] = z;
      }
    }
    integrals(out_, I_);
    norms_ = normalisations(I_);
  }

  /// Whether the state is an evaluation at the bits of w, pre and pts.
  bool holds(std::span<const double> w, const Preprocessing& pre, const Points& pts) const { return preprocessed(pre, pts) && same_bits(w_, w); }
  /// Points the state at pts, whose bits it holds (holds()): the points it was made on may be gone.
  void rebind(const Points& pts) { pts_ = &pts; }

  /// x·f_k at point p.
  double xf(std::size_t p, int k) const { return norms_[static_cast<std::size_t>(k)] * pre_[p][static_cast<std::size_t>(k)] * out_[p][static_cast<std::size_t>(k)]; }
  const Row& norms() const { return norms_; }

  /// d(x·f) at every point along the weights' direction v (a tangent pass): dxf[p][k].
  void tangent(std::span<const double> v, std::vector<Row>& dxf) const {
    const std::span<const double> w = w_;
    const std::size_t np = pts_->size();
    std::vector<Row> dout(np);
    for (std::size_t p = 0; p < np; ++p) {
      const double u[2] = {pts_->x[p], pts_->log_x[p]};
      const double* h1 = &h1_[p * Network::n1];
      const double* h2 = &h2_[p * Network::n2];
      double d1[Network::n1], d2[Network::n2];
      for (int i = 0; i < Network::n1; ++i)
        d1[i] = (1 - h1[i] * h1[i]) * (v[Network::b1 + i] + v[Network::w1 + 2 * i] * u[0] + v[Network::w1 + 2 * i + 1] * u[1]);
      for (int i = 0; i < Network::n2; ++i) {
        double z = v[Network::b2 + i];
        for (int j = 0; j < Network::n1; ++j) z += v[Network::w2 + i * Network::n1 + j] * h1[j] + w[Network::w2 + i * Network::n1 + j] * d1[j];
        d2[i] = (1 - h2[i] * h2[i]) * z;
      }
      for (int k = 0; k < n_evol; ++k) {
        double z = v[Network::b3 + k];
        for (int j = 0; j < Network::n2; ++j) z += v[Network::w3 + k * Network::n2 + j] * h2[j] + w[Network::w3 + k * Network::n2 + j] * d2[j];
        dout[p][static_cast<std::size_t>(k)] = z;
      }
    }
    Row dI;
    integrals(dout, dI);
    const Row dA = normalisation_tangent(dI);
    dxf.resize(np);
    for (std::size_t p = 0; p < np; ++p)
      for (std::size_t k = 0; k < n_evol; ++k) dxf[p][k] = pre_[p][k] * (dA[k] * out_[p][k] + norms_[k] * dout[p][k]);
  }

  /// The weights' gradient g = Σ_{p,k} bar[p][k]·∂(x·f_k(p))/∂w (a reverse pass), into g (overwritten).
  void reverse(const std::vector<Row>& bar, std::span<double> g) const {
    const std::size_t np = pts_->size();
    // Adjoints of the network's outputs: directly, and through the normalisations' integrals.
    Row barA{};
    for (std::size_t p = 0; p < np; ++p)
      for (std::size_t k = 0; k < n_evol; ++k) barA[k] += bar[p][k] * pre_[p][k] * out_[p][k];
    const Row barI = normalisation_adjoint(barA);
    std::vector<Row> bout(np);
    for (std::size_t p = 0; p < np; ++p)
      for (std::size_t k = 0; k < n_evol; ++k) bout[p][k] = bar[p][k] * norms_[k] * pre_[p][k];
    integrals_adjoint(barI, bout);
    std::fill(g.begin(), g.end(), 0.0);
    for (std::size_t p = 0; p < np; ++p) {
      const double u[2] = {pts_->x[p], pts_->log_x[p]};
      const double* h1 = &h1_[p * Network::n1];
      const double* h2 = &h2_[p * Network::n2];
      double z2[Network::n2] = {}, z1[Network::n1] = {};
      for (int k = 0; k < n_evol; ++k) {
        const double b = bout[p][static_cast<std::size_t>(k)];
        g[Network::b3 + k] += b;
        for (int j = 0; j < Network::n2; ++j) {
          g[Network::w3 + k * Network::n2 + j] += b * h2[j];
          z2[j] += w_[Network::w3 + k * Network::n2 + j] * b;
        }
      }
      for (int i = 0; i < Network::n2; ++i) {
        const double b = z2[i] * (1 - h2[i] * h2[i]);
        g[Network::b2 + i] += b;
        for (int j = 0; j < Network::n1; ++j) {
          g[Network::w2 + i * Network::n1 + j] += b * h1[j];
          z1[j] += w_[Network::w2 + i * Network::n1 + j] * b;
        }
      }
      for (int i = 0; i < Network::n1; ++i) {
        const double b = z1[i] * (1 - h1[i] * h1[i]);
        g[Network::b1 + i] += b;
        g[Network::w1 + 2 * i] += b * u[0];
        g[Network::w1 + 2 * i + 1] += b * u[1];
      }
    }
  }

 private:
  template <class A, class B>
  static bool same_bits(const A& a, const B& b) {
    return std::size(a) == std::size(b) && std::memcmp(std::data(a), std::data(b), std::size(a) * sizeof(double)) == 0;
  }
  bool preprocessed(const Preprocessing& pre, const Points& pts) const {
    return same_bits(pre_key_.alpha, pre.alpha) && same_bits(pre_key_.beta, pre.beta) && same_bits(x_key_, pts.x) &&
           grid_key_ == pts.grid && quad_key_ == pts.quad;
  }
  /// The preprocessing factors x^{1−α_k}(1−x)^{β_k} at every point, and the key they were made from.
  void preprocess(const Preprocessing& pre, const Points& pts) {
    pre_key_ = pre;
    x_key_ = pts.x;
    grid_key_ = pts.grid;
    quad_key_ = pts.quad;
    pre_.resize(pts.size());
    for (std::size_t p = 0; p < pts.size(); ++p)
      for (std::size_t k = 0; k < n_evol; ++k) pre_[p][k] = std::pow(pts.x[p], 1 - pre.alpha[k]) * std::pow(1 - pts.x[p], pre.beta[k]);
  }

  // The sum rules' integrals (nnpdf-example.md §3 row 15), by quadrature in t = ln x on [1e-9, 1]:
  // I[V], I[V3], I[V8] = ∫ f dx of the preprocessed outputs, I[Sigma], I[Gluon] = ∫ x·f dx.
  void integrals(const std::vector<Row>& o, Row& I) const {
    I = {};
    for (std::size_t q = 0; q < pts_->quad; ++q) {
      const std::size_t p = pts_->grid + q;
      const double w = pts_->weights[q], x = pts_->x[p];
      for (std::size_t k : {std::size_t{V}, std::size_t{V3}, std::size_t{V8}}) I[k] += w * pre_[p][k] * o[p][k];
      for (std::size_t k : {std::size_t{Sigma}, std::size_t{Gluon}}) I[k] += w * x * pre_[p][k] * o[p][k];
    }
  }
  void integrals_adjoint(const Row& barI, std::vector<Row>& bout) const {
    for (std::size_t q = 0; q < pts_->quad; ++q) {
      const std::size_t p = pts_->grid + q;
      const double w = pts_->weights[q], x = pts_->x[p];
      for (std::size_t k : {std::size_t{V}, std::size_t{V3}, std::size_t{V8}}) bout[p][k] += barI[k] * w * pre_[p][k];
      for (std::size_t k : {std::size_t{Sigma}, std::size_t{Gluon}}) bout[p][k] += barI[k] * w * x * pre_[p][k];
    }
  }
  // A_V = 3/∫V, A_V3 = 1/∫V3, A_V8 = 3/∫V8, A_g = (1 − ∫xΣ)/∫xg; 1 for Σ, T3, T8, T15 (Σ's momentum is the
  // network's; u_v, d_v counts 2 and 1).
  static Row normalisations(const Row& I) {
    Row A;
    A.fill(1.0);
    A[V] = 3 / I[V];
    A[V3] = 1 / I[V3];
    A[V8] = 3 / I[V8];
    A[Gluon] = (1 - I[Sigma]) / I[Gluon];
    return A;
  }
  Row normalisation_tangent(const Row& dI) const {
    Row dA{};
    dA[V] = -norms_[V] / I_[V] * dI[V];
    dA[V3] = -norms_[V3] / I_[V3] * dI[V3];
    dA[V8] = -norms_[V8] / I_[V8] * dI[V8];
    dA[Gluon] = (-dI[Sigma] - norms_[Gluon] * dI[Gluon]) / I_[Gluon];
    return dA;
  }
  Row normalisation_adjoint(const Row& barA) const {
    Row barI{};
    barI[V] = -norms_[V] / I_[V] * barA[V];
    barI[V3] = -norms_[V3] / I_[V3] * barA[V3];
    barI[V8] = -norms_[V8] / I_[V8] * barA[V8];
    barI[Sigma] = -barA[Gluon] / I_[Gluon];
    barI[Gluon] = -norms_[Gluon] / I_[Gluon] * barA[Gluon];
    return barI;
  }

  std::vector<double> w_;  ///< the weights of the state (a copy: the caller's may change)
  const Points* pts_ = nullptr;
  Preprocessing pre_key_;      ///< the exponents pre_ was made from
  std::vector<double> x_key_;  ///< the points pre_ was made from (empty: none yet), and how they divide
  std::size_t grid_key_ = 0, quad_key_ = 0;
  std::vector<double> h1_, h2_;
  std::vector<Row> out_, pre_;
  Row I_{}, norms_{};
};

/// The network states of the last evaluations, found by the bits of their inputs: a replica's Hessian-vector products
/// after its gradient at the same weights, and its validation loss there, find their forward pass made, wherever a
/// batch puts its columns. Each state is bitwise what a fresh evaluation makes.
class PdfStates {
 public:
  /// Keeps at least n states (the columns of a block and their trial points).
  void keep(std::size_t n) { capacity_ = std::max(capacity_, n); }

  /// A state at (w, pre, pts): the one that holds those bits, else a new one or the least recently used, evaluated.
  PdfReplica& evaluate(std::span<const double> w, const Preprocessing& pre, const Points& pts) {
    ++clock_;
    for (Entry& e : entries_)
      if (e.pdf.holds(w, pre, pts)) {
        e.used = clock_;
        e.pdf.rebind(pts);
        return e.pdf;
      }
    if (entries_.size() < capacity_) entries_.emplace_back();
    Entry& e = *std::min_element(entries_.begin(), entries_.end(), [](const Entry& a, const Entry& b) { return a.used < b.used; });
    e.used = clock_;
    e.pdf.evaluate(w, pre, pts);
    return e.pdf;
  }

 private:
  struct Entry {
    PdfReplica pdf;
    std::uint64_t used = 0;  ///< the clock of its last use
  };
  std::vector<Entry> entries_;
  std::size_t capacity_ = 2;
  std::uint64_t clock_ = 0;
};

}  // namespace nnpdf
