// SPDX-License-Identifier: MIT
// What the shard tests compare: one model split many ways, and every derivative of a likelihood as one vector.
#pragma once

#include <cmath>
#include <vector>

#include "fitlib/fit.hpp"
#include "random_model.hpp"

namespace fitlib::test {

/// A model with masked bins, template statistics and positive counts (the χ² term needs them),
/// large enough to split 2–6 ways.
inline fitlib::Model sharded_model() {
  RandomModelSpec sp;
  sp.bins = 41;
  sp.masked_bins = 5;
  sp.procs = 3;
  sp.nsyst = 7;
  sp.template_stats = true;
  sp.zero_counts = false;
  sp.seed = 23;
  return random_model(sp);
}

/// The dense model `m` as a reader of bins `b` holds it (the templates' `held`): their template rows only.
inline fitlib::Model slice_of(const fitlib::Model& m, fitlib::BinRange b) {
  fitlib::Model s = m;
  const fitlib::index_t row = m.nprocs() * m.ncoef();
  const std::vector<double>& logk = m.dense()->logk;
  s.templates = fitlib::DenseTemplates{m.dense()->nominal, std::vector<double>(logk.begin() + b.begin * row, logk.begin() + b.end * row), b};
  return s;
}

/// Values, gradients, HVPs and Hessians of three columns, as one flat vector.
template <class Lik>
std::vector<double> everything(Lik& l) {
  using fitlib::index_t;
  const index_t n = l.size();
  std::vector<double> X, V;
  const auto x0 = l.default_parameters();
  for (int j = 0; j < 3; ++j)
    for (index_t i = 0; i < n; ++i) {
      X.push_back(x0[static_cast<std::size_t>(i)] + 0.04 * (j + 1) * std::sin(1.1 * static_cast<double>(i + j)));
      V.push_back(std::cos(0.9 * static_cast<double>(i) + j));
    }
  std::vector<double> f(3), g(static_cast<std::size_t>(3 * n)), hv(g.size()), H(static_cast<std::size_t>(3 * n * n)), f2(3), g2(g.size());
  l.value_grad({X.data(), n, 3}, f, {g.data(), n, 3});
  l.hessp({X.data(), n, 3}, {V.data(), n, 3}, {hv.data(), n, 3});
  l.hessian({X.data(), n, 3}, f2, {g2.data(), n, 3}, {H.data(), n, 3 * n});
  std::vector<double> all = f;
  for (const auto* v : {&g, &hv, &H}) all.insert(all.end(), v->begin(), v->end());
  return all;
}

/// `n` replicas of toy data of `l` (generate_toy's stream of seed 3, indices 1…n), for batch tests.
template <class Lik>
std::vector<fitlib::ReplicaInputs> toy_replicas(Lik& l, int n) {
  std::vector<fitlib::ReplicaInputs> toys;
  for (int i = 1; i <= n; ++i) toys.emplace_back().data = fitlib::generate_toy(l, 3, static_cast<std::uint64_t>(i)).data;
  return toys;
}

/// The largest |a − b| / max(1, |b|).
inline double worst_relative(const std::vector<double>& a, const std::vector<double>& b) {
  double worst = a.size() == b.size() ? 0.0 : INFINITY;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]) / std::max(1.0, std::abs(b[i])));
  return worst;
}

}  // namespace fitlib::test
