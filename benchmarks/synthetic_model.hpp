// SPDX-License-Identifier: MIT
// Synthetic dense models for the benchmarks, filled fast and reproducibly from a counter hash.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include <fitlib/fit.hpp>

namespace fitlib::bench {

struct Config {
  index_t bins, procs, nsyst;
  bool asymmetric;
  double density = 1.0;     ///< fraction of non-zero logk entries; below 1 the model is stored sparse
  bool bin_by_bin = false;  ///< template variances (10–50 effective events per cell), so β is profiled
  bool sparse() const { return density < 1.0; }
  std::string name() const {
    char buf[128];
    int n = std::snprintf(buf, sizeof buf, "bins:%td/procs:%td/nsyst:%td/%s", bins, procs, nsyst, asymmetric ? "asym" : "sym");
    if (sparse()) n += std::snprintf(buf + n, sizeof buf - static_cast<std::size_t>(n), "/sparse:%g", density);
    if (bin_by_bin) std::snprintf(buf + n, sizeof buf - static_cast<std::size_t>(n), "/bb:lite");
    return buf;
  }
};

/// Uniform in [−1, 1) from a counter (splitmix64), so multi-GB models fill quickly and reproducibly.
inline double hash_uniform(std::uint64_t i) {
  std::uint64_t z = i + 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * 0x1.0p-52 - 1.0;
}

/// One signal and procs−1 backgrounds, log-normal variations of a few per cent, all constrained;
/// dense, or sparse with a fraction `density` of the variations non-zero. `held` (dense only): the
/// model holds the template rows of these bins only (the templates' `held`), as one MPI rank would; the
/// entries are those of the whole model.
inline std::shared_ptr<const fitlib::Model> synthetic_model(const Config& c, std::optional<fitlib::BinRange> held = {}) {
  auto m = std::make_shared<fitlib::Model>();
  m->channels.push_back({"ch", c.bins, false});
  for (index_t p = 0; p < c.procs; ++p) m->processes.push_back({std::string("p").append(std::to_string(p)), p == 0});
  for (index_t s = 0; s < c.nsyst; ++s) m->systematics.push_back({std::string("s").append(std::to_string(s))});
  m->symmetric = !c.asymmetric;
  m->theta0.assign(static_cast<std::size_t>(c.nsyst), 0.0);
  m->constraint_weights.assign(static_cast<std::size_t>(c.nsyst), 1.0);
  m->poi_default = {1.0};
  const index_t cells = c.bins * c.procs, nc = m->ncoef();
  std::vector<double> nominal(static_cast<std::size_t>(cells));
  for (index_t i = 0; i < cells; ++i) nominal[static_cast<std::size_t>(i)] = 50.0 + 40.0 * hash_uniform(static_cast<std::uint64_t>(i));
  if (c.sparse()) {  // built as CSR directly: the dense tensor of the largest models would not fit
    fitlib::SparseTemplates t;
    t.nbins_full = c.bins;
    t.nprocs = c.procs;
    t.ncoef = nc;
    t.row_begin.push_back(0);
    for (index_t b = 0; b <= c.bins; ++b) t.bin_begin.push_back(b * c.procs);
    for (index_t i = 0; i < cells; ++i) {
      t.cell_process.push_back(i % c.procs);
      t.cell_nominal.push_back(nominal[static_cast<std::size_t>(i)]);
      for (index_t k = 0; k < nc; ++k) {
        const auto e = static_cast<std::uint64_t>(i * nc + k);
        if (0.5 * (hash_uniform(e + 0x777ULL) + 1.0) >= c.density) continue;
        t.col.push_back(k);
        t.val.push_back(0.02 * hash_uniform(e + 0x1234567ULL));
      }
      t.row_begin.push_back(static_cast<index_t>(t.val.size()));
    }
    m->templates = std::move(t);
  } else {
    const fitlib::BinRange rows = held ? *held : fitlib::BinRange{0, c.bins};
    const auto first = static_cast<std::uint64_t>(rows.begin * c.procs * nc);
    std::vector<double> logk(static_cast<std::size_t>(rows.size() * c.procs * nc));
    for (std::size_t i = 0; i < logk.size(); ++i) logk[i] = 0.02 * hash_uniform(first + i + 0x1234567ULL);
    m->templates = fitlib::DenseTemplates{nominal, std::move(logk), held};
  }
  if (c.bin_by_bin) {
    m->sumw2.resize(static_cast<std::size_t>(cells));
    for (index_t i = 0; i < cells; ++i) {
      const double n = nominal[static_cast<std::size_t>(i)];
      m->sumw2[static_cast<std::size_t>(i)] = n * n / (30.0 + 20.0 * hash_uniform(static_cast<std::uint64_t>(i) + 0xbbULL));
    }
  }
  m->data.resize(static_cast<std::size_t>(c.bins));
  for (index_t b = 0; b < c.bins; ++b) {
    double nu = 0;
    for (index_t p = 0; p < c.procs; ++p) nu += nominal[static_cast<std::size_t>(b * c.procs + p)];
    m->data[static_cast<std::size_t>(b)] = std::round(nu * (1.0 + 0.05 * hash_uniform(static_cast<std::uint64_t>(b) + 77)));
  }
  return m;
}

}  // namespace fitlib::bench
