// SPDX-License-Identifier: MIT
// fitlib-fit's blinded reporting: fixed, name-seeded changes of the reported coordinates.
#include "blinding.hpp"

#include <algorithm>
#include <cmath>
#include <optional>
#include <regex>

#include "fitlib/io/sha256.hpp"

namespace fitlib::cli {

Blinding make_blinding(const Model& m, const std::vector<std::string>& names, const Args& a) {
  Blinding b;
  const auto n = names.size();
  b.scale.assign(n, 1.0);
  b.shift.assign(n, 0.0);
  if (a.unblind_all) return b;
  // As --freezeParameters: an exact name, or else a regular expression (one that is not valid must be a name).
  std::vector<std::optional<std::regex>> keep;
  for (const auto& u : a.unblind) {
    const bool is_name = std::find(names.begin(), names.end(), u) != names.end();
    try {
      keep.emplace_back(std::regex(u));
    } catch (const std::regex_error&) {
      if (!is_name) throw usage_error("--unblind '" + u + "' is neither a parameter of the tensor nor a valid regular expression");
      keep.emplace_back();
    }
  }
  auto unblinded = [&](const std::string& name) {
    for (std::size_t k = 0; k < keep.size(); ++k)
      if (name == a.unblind[k] || (keep[k] && std::regex_match(name, *keep[k]))) return true;
    return false;
  };
  auto xi = [](const std::string& name) {
    io::Sha256 h;
    h.update(std::string_view(name));
    const auto d = h.digest();
    std::uint64_t seed = 0;
    for (int i = 0; i < 8; ++i) seed = seed << 8 | d[static_cast<std::size_t>(i)];
    return RandomStream(seed, 0, static_cast<Stream>(static_cast<std::uint32_t>(Stream::user) + 1)).normal();
  };
  for (index_t q = 0; q < m.npoi(); ++q) {
    const auto& name = names[static_cast<std::size_t>(q)];
    if (unblinded(name)) continue;
    b.scale[static_cast<std::size_t>(q)] = std::exp(xi(name));
    b.names.push_back(name);
  }
  for (index_t s : m.nois) {
    const auto i = static_cast<std::size_t>(m.npoi() + s);
    if (unblinded(names[i])) continue;
    b.shift[i] = 5 * xi(names[i]);
    b.names.push_back(names[i]);
  }
  return b;
}

void blind(io::FitRecord& f, const Blinding& b) {
  if (b.names.empty()) return;
  FitResult& r = f.result;
  const std::size_t n = r.x.size();
  for (std::size_t i = 0; i < n; ++i) {
    r.x[i] = b.scale[i] * r.x[i] + b.shift[i];
    r.x0[i] = b.scale[i] * r.x0[i] + b.shift[i];
    r.uncertainties[i] *= b.scale[i];
    r.gradient[i] /= b.scale[i];
  }
  for (std::size_t j = 0; j < n && r.covariance.size() == n * n; ++j)
    for (std::size_t i = 0; i < n; ++i) r.covariance[i + j * n] *= b.scale[i] * b.scale[j];
  for (std::size_t j = 0; j < n && r.hessian.size() == n * n; ++j)
    for (std::size_t i = 0; i < n; ++i) r.hessian[i + j * n] /= b.scale[i] * b.scale[j];
  for (auto* imp : {f.impacts ? &*f.impacts : nullptr, f.global_impacts ? &*f.global_impacts : nullptr}) {
    if (!imp) continue;
    for (std::size_t t = 0; t < imp->targets.size(); ++t) {
      const double s = b.scale[static_cast<std::size_t>(imp->target_index[t])];
      for (std::size_t k = 0; k < imp->sources.size(); ++k) imp->values[t * imp->sources.size() + k] *= s;
      for (std::size_t g = 0; g < imp->groups.size(); ++g) imp->grouped[t * imp->groups.size() + g] *= s;
    }
  }
  for (Scan& s : f.scans) {
    const auto i = static_cast<std::size_t>(r.index(s.parameter));
    for (double& v : s.values) v = b.scale[i] * v + b.shift[i];
  }
  for (GridScan& g : f.scans2d)
    for (std::size_t k = 0; k < g.parameters.size(); ++k) {
      const auto i = static_cast<std::size_t>(r.index(g.parameters[k]));
      for (double& v : g.values[k]) v = b.scale[i] * v + b.shift[i];
    }
  // The postfit yields would show the blinded POIs and NOIs: only the prefit ones and the data stay.
  if (f.histograms) {
    f.histograms->postfit.clear();
    f.histograms->postfit_total.clear();
    f.histograms->postfit_variance.clear();
    f.histograms->postfit_covariance.clear();
    f.histograms->postfit_variations.clear();
    f.histograms->postfit_process_variance.clear();
    f.histograms->postfit_chi2.clear();
    f.histograms->postfit_chi2_total = {};
    f.histograms->postfit_chi2_note.clear();
  }
  for (MappedHistograms& h : f.mappings) {
    h.postfit.clear();
    h.postfit_variance.clear();
    h.postfit_covariance.clear();
    h.postfit_chi2.reset();
    h.postfit_chi2_note.clear();
  }
  f.blinded = b.names;
}

}  // namespace fitlib::cli
