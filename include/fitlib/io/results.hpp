// SPDX-License-Identifier: MIT
// Results files: every fit of a run (parameters, covariance, impacts, scans, goodness of fit) as
// plain HDF5 and as a JSON summary; the layout is documented in docs/results-format.md.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "fitlib/io/hdf5.hpp"
#include "fitlib/io/output_file.hpp"
#include "fitlib/minimize/fit.hpp"
#include "fitlib/model/model.hpp"
#include "fitlib/postfit/gof.hpp"
#include "fitlib/postfit/histograms.hpp"
#include "fitlib/postfit/mappings.hpp"
#include "fitlib/postfit/impacts.hpp"
#include "fitlib/postfit/scan.hpp"
#include "fitlib/replica/batch_scans.hpp"
#include "fitlib/replica/pseudo_data.hpp"
#include "fitlib/replica/replica_batch.hpp"
#include "fitlib/version.hpp"

namespace fitlib::io {

/// Version of the results layout (docs/results-format.md); bumped when a reader would need to change.
inline constexpr std::int64_t results_format_version = 5;

/// One fit of a run and what was computed after it.
struct FitRecord {
  std::string name;  ///< "asimov", "data", "toy<i>", or a pseudodata set's name
  FitResult result;
  double nll_full = std::numeric_limits<double>::quiet_NaN();  ///< reduced NLL + nll_constant
  std::optional<SaturatedGof> gof;
  std::optional<Impacts> impacts, global_impacts;
  std::vector<Scan> scans;
  std::vector<GridScan> scans2d;          ///< two-parameter scans (fitlib-fit --scan2D)
  std::optional<Histograms> histograms;   ///< prefit and postfit yields (fitlib-fit --saveHists); postfit ones empty when blinded
  std::vector<MappedHistograms> mappings;  ///< the histograms of each mapping (fitlib-fit -m), likewise
  std::vector<double> bin_by_bin;         ///< β̂ `[nbins × bin_by_bin_per_bin]`, or empty
  index_t bin_by_bin_per_bin = 0;
  std::vector<std::string> blinded;       ///< parameters reported in blinded coordinates
  std::string error;                      ///< why the fit failed where it threw (its status is then `aborted`), or empty
  double minimize_seconds = 0, postfit_seconds = 0, total_seconds = 0;
};

/// The toys of a run (`-t N`) together: per POI and NOI the spread of the fitted values and of the
/// pulls over the converged toys, and how fast the toys were minimised.
struct ToySummary {
  struct Target {
    std::string name;
    Spread value;  ///< of x̂
    Spread pull;   ///< of (x̂ − truth)/σ̂, truth per `pull_reference`
  };
  index_t toys = 0, converged = 0;
  /// What the pulls were taken against (fitlib::toy_truth): "generating_point" (the toy's generating
  /// parameters, --toysDataMode expected) or "observed_fit" (the fit to the observed data, observed mode).
  std::string pull_reference = std::string(to_string(PullReference::generating_point));
  /// Toys minimised together (1: one after the other).
  index_t width = 1;
  /// Wall time of the minimisations alone (not toy generation, not postfit).
  double seconds = 0;
  /// The pooled evaluations of batched toys (width > 1); absent when they ran one after the other,
  /// where nothing was pooled.
  std::optional<BatchStatistics> batch;
  std::vector<Target> targets;

  double toys_per_second() const { return seconds > 0 ? static_cast<double>(toys) / seconds : std::numeric_limits<double>::quiet_NaN(); }
};

/// What a plot needs of the model besides the fits, so that a pulls, impacts or yields plot needs no input tensor
/// (docs/results-format.md, `model`): its channels, processes and parameters, each parameter's kind and prefit
/// uncertainty, and the systematic groups.
struct ModelInfo {
  std::vector<Channel> channels;
  std::vector<Process> processes;
  std::vector<std::string> parameters;     ///< the fit's parameters: `[POIs | systematics]`
  std::vector<std::string> kinds;          ///< per parameter: "poi", "noi" (a nuisance of interest) or "nuisance"
  std::vector<std::uint8_t> constrained;   ///< per parameter: 1 for a nuisance with a Gaussian constraint (weight > 0)
  /// Per parameter, the prefit uncertainty 1/√w of a constrained nuisance (the width pulls are measured in);
  /// 0 for the POIs (a POI prior included) and the unconstrained nuisances, as rabbit's default
  /// --prefitUnconstrainedNuisanceUncertainty.
  std::vector<double> prefit_uncertainty;
  std::vector<SystematicGroup> groups;     ///< members as indices into `parameters` (not into the systematics)

  static ModelInfo of(const Model& m) {
    ModelInfo info;
    info.channels = m.channels;
    info.processes = m.processes;
    info.parameters = m.parameter_names();
    const index_t npoi = m.npoi();
    info.kinds.assign(static_cast<std::size_t>(npoi), "poi");
    info.constrained.assign(static_cast<std::size_t>(npoi), 0);
    info.prefit_uncertainty.assign(static_cast<std::size_t>(npoi), 0.0);
    for (index_t s = 0; s < m.nsyst(); ++s) {
      const double w = m.constraint_weights[static_cast<std::size_t>(s)];
      const bool noi = std::find(m.nois.begin(), m.nois.end(), s) != m.nois.end();
      info.kinds.emplace_back(noi ? "noi" : "nuisance");
      info.constrained.push_back(w > 0 ? 1 : 0);
      info.prefit_uncertainty.push_back(w > 0 ? 1 / std::sqrt(w) : 0.0);
    }
    for (const SystematicGroup& g : m.groups) {
      SystematicGroup pg{g.name, {}};
      for (index_t s : g.members) pg.members.push_back(npoi + s);
      info.groups.push_back(std::move(pg));
    }
    return info;
  }
};

/// What describes the whole run.
struct RunInfo {
  std::string input_path, input_sha256, command_line;
  /// The options, written as given except that an integer beyond ±2⁵³ (anywhere in it) is written as its decimal
  /// string: readers that hold JSON numbers as doubles (jq, JavaScript, ...) would round it. A value that can be
  /// that large (fitlib-fit's seed) is best given as a string always, so that its type does not depend on it.
  nlohmann::json options = nlohmann::json::object();
  /// The model fitted; written when set.
  std::optional<ModelInfo> model;
};

namespace detail {

/// `j` with every integer beyond ±2⁵³ (those a double cannot hold exactly) as its decimal string (RunInfo::options).
inline nlohmann::json exact_integers(nlohmann::json j) {
  constexpr std::uint64_t exact = std::uint64_t{1} << 53;
  if (j.is_number_unsigned()) {
    if (const auto u = j.get<std::uint64_t>(); u > exact) return std::to_string(u);
  } else if (j.is_number_integer()) {
    if (const auto i = j.get<std::int64_t>(); i > static_cast<std::int64_t>(exact) || i < -static_cast<std::int64_t>(exact)) return std::to_string(i);
  } else if (j.is_structured()) {
    for (auto& x : j) x = exact_integers(std::move(x));
  }
  return j;
}

inline nlohmann::json finite_or_null(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }

inline nlohmann::json finite_or_null(const std::vector<double>& v) {
  nlohmann::json a = nlohmann::json::array();
  for (double x : v) a.push_back(finite_or_null(x));
  return a;
}

/// A symmetric `[n × n]` matrix as a list of rows (JSON nulls for non-finite entries).
inline nlohmann::json matrix_rows(const std::vector<double>& m, std::size_t n) {
  nlohmann::json rows = nlohmann::json::array();
  for (std::size_t i = 0; i < n; ++i) {
    nlohmann::json row = nlohmann::json::array();
    for (std::size_t j = 0; j < n; ++j) row.push_back(finite_or_null(m[i + j * n]));
    rows.push_back(std::move(row));
  }
  return rows;
}

inline std::vector<std::string> status_names(const std::vector<FitStatus>& s) {
  std::vector<std::string> out;
  for (FitStatus f : s) out.emplace_back(to_string(f));
  return out;
}

inline void write_impacts(const hdf5::Location& fit, const std::string& name, const Impacts& imp) {
  const hdf5::Location g = hdf5::create_group(fit, name);
  hdf5::write_strings(g, "targets", imp.targets);
  hdf5::write_strings(g, "sources", imp.sources);
  hdf5::write(g, "values", std::span<const double>(imp.values), {imp.targets.size(), imp.sources.size()});
  hdf5::write_strings(g, "groups", imp.groups);
  hdf5::write(g, "grouped", std::span<const double>(imp.grouped), {imp.targets.size(), imp.groups.size()});
}

inline nlohmann::json impacts_json(const Impacts& imp) {
  nlohmann::json j;
  for (std::size_t t = 0; t < imp.targets.size(); ++t) {
    nlohmann::json per, grouped;
    for (std::size_t s = 0; s < imp.sources.size(); ++s)
      if (imp.value(t, s) != 0) per[imp.sources[s]] = finite_or_null(imp.value(t, s));
    for (std::size_t g = 0; g < imp.groups.size(); ++g) grouped[imp.groups[g]] = finite_or_null(imp.group(t, g));
    j[imp.targets[t]] = {{"parameters", per}, {"groups", grouped}};
  }
  return j;
}

/// Correlations from a covariance (`[n × n]` column-major); 0 where a variance is 0, NaN if unknown.
inline std::vector<double> correlation(const std::vector<double>& cov, std::size_t n) {
  std::vector<double> r(cov.size());
  for (std::size_t j = 0; j < n; ++j)
    for (std::size_t i = 0; i < n; ++i) {
      const double d = cov[i + i * n] * cov[j + j * n];
      r[i + j * n] = i == j ? (cov[i + i * n] > 0 ? 1.0 : 0.0) : d > 0 ? cov[i + j * n] / std::sqrt(d) : (std::isnan(d) ? d : 0.0);
    }
  return r;
}

/// An `[n × n]` column-major matrix in row-major order.
inline std::vector<double> transposed(const std::vector<double>& m, std::size_t n) {
  std::vector<double> t(m.size());
  for (std::size_t j = 0; j < n; ++j)
    for (std::size_t i = 0; i < n; ++i) t[i * n + j] = m[i + j * n];
  return t;
}

inline void write_toys(const hdf5::Location& file, const ToySummary& t) {
  const hdf5::Location g = hdf5::create_group(file, "toys");
  hdf5::write_attribute(g, "toys", static_cast<std::int64_t>(t.toys));
  hdf5::write_attribute(g, "converged", static_cast<std::int64_t>(t.converged));
  hdf5::write_attribute(g, "width", static_cast<std::int64_t>(t.width));
  hdf5::write_attribute(g, "seconds", t.seconds);
  hdf5::write_attribute(g, "toys_per_second", t.toys_per_second());
  hdf5::write_attribute(g, "pull_reference", t.pull_reference);
  if (t.batch) {
    hdf5::write_attribute(g, "evaluations", static_cast<std::int64_t>(t.batch->evaluations));
    hdf5::write_attribute(g, "columns", static_cast<std::int64_t>(t.batch->columns));
    hdf5::write_attribute(g, "active_fraction", t.batch->active_fraction);
  }
  std::vector<std::string> names;
  std::vector<double> value_mean, value_stddev, pull_mean, pull_stddev;
  std::vector<std::int64_t> value_count, pull_count;
  for (const auto& p : t.targets) {
    names.push_back(p.name);
    value_mean.push_back(p.value.mean);
    value_stddev.push_back(p.value.stddev);
    value_count.push_back(p.value.count);
    pull_mean.push_back(p.pull.mean);
    pull_stddev.push_back(p.pull.stddev);
    pull_count.push_back(p.pull.count);
  }
  hdf5::write_strings(g, "parameters", names);
  hdf5::write(g, "value_mean", std::span<const double>(value_mean));
  hdf5::write(g, "value_stddev", std::span<const double>(value_stddev));
  hdf5::write(g, "value_count", std::span<const std::int64_t>(value_count));
  hdf5::write(g, "pull_mean", std::span<const double>(pull_mean));
  hdf5::write(g, "pull_stddev", std::span<const double>(pull_stddev));
  hdf5::write(g, "pull_count", std::span<const std::int64_t>(pull_count));
}

inline nlohmann::json spread_json(const Spread& s) {
  return {{"mean", finite_or_null(s.mean)}, {"stddev", finite_or_null(s.stddev)}, {"count", s.count}};
}

inline nlohmann::json toys_json(const ToySummary& t) {
  nlohmann::json j = {{"toys", t.toys},
                      {"converged", t.converged},
                      {"width", t.width},
                      {"seconds", t.seconds},
                      {"toys_per_second", finite_or_null(t.toys_per_second())},
                      {"pull_reference", t.pull_reference}};
  j["batch"] = t.batch ? nlohmann::json{{"evaluations", t.batch->evaluations}, {"columns", t.batch->columns}, {"active_fraction", t.batch->active_fraction}}
                       : nlohmann::json(nullptr);
  j["parameters"] = nlohmann::json::array();
  for (const auto& p : t.targets) j["parameters"].push_back({{"name", p.name}, {"value", spread_json(p.value)}, {"pull", spread_json(p.pull)}});
  return j;
}

}  // namespace detail

namespace detail {

/// Channels with their axes into g: `channels`, `channel_bins`, `channel_start`, `channel_masked`, `channel_flow` and
/// `channel_axes/<c>/<k>` (the model's, and each mapping's).
inline void write_channels(const hdf5::Location& g, const std::vector<Channel>& list) {
  std::vector<std::string> channels;
  std::vector<std::int64_t> channel_bins, channel_start, channel_masked, channel_flow;
  const hdf5::Location axes = hdf5::create_group(g, "channel_axes");
  for (const Channel& c : list) {
    channel_start.push_back(channel_start.empty() ? 0 : channel_start.back() + channel_bins.back());
    channels.push_back(c.name);
    channel_bins.push_back(c.nbins);
    channel_masked.push_back(c.masked ? 1 : 0);
    channel_flow.push_back(c.flow ? 1 : 0);
    // one group per channel (by its index, names may hold any character), one dataset per axis: its edges or
    // categories, the rest as attributes
    const hdf5::Location ca = hdf5::create_group(axes, std::to_string(channels.size() - 1));
    for (std::size_t k = 0; k < c.axes.size(); ++k) {
      const Axis& a = c.axes[k];
      const hdf5::Location d = a.categories.empty() ? hdf5::write(ca, std::to_string(k), std::span<const double>(a.edges))
                                                    : hdf5::write_strings(ca, std::to_string(k), a.categories);
      hdf5::write_attribute(d, "kind", std::string(a.kind_name()));
      hdf5::write_attribute(d, "name", a.name);
      hdf5::write_attribute(d, "label", a.label);
      hdf5::write_attribute(d, "transform", a.transform);
      for (const auto& [flag, on] : {std::pair{"underflow", a.underflow}, {"overflow", a.overflow}, {"circular", a.circular}, {"growth", a.growth}})
        hdf5::write_attribute(d, flag, std::int64_t{on ? 1 : 0});
    }
  }
  hdf5::write_strings(g, "channels", channels);
  hdf5::write(g, "channel_bins", std::span<const std::int64_t>(channel_bins));
  hdf5::write(g, "channel_start", std::span<const std::int64_t>(channel_start));
  hdf5::write(g, "channel_masked", std::span<const std::int64_t>(channel_masked));
  hdf5::write(g, "channel_flow", std::span<const std::int64_t>(channel_flow));
}

inline void write_model(const hdf5::File& file, const ModelInfo& m) {
  const hdf5::Location g = hdf5::create_group(file, "model");
  std::vector<std::string> processes;
  std::vector<std::int64_t> signal, group_members, group_offsets{0};
  write_channels(g, m.channels);
  for (const Process& p : m.processes) {
    processes.push_back(p.name);
    signal.push_back(p.signal ? 1 : 0);
  }
  std::vector<std::string> group_names;
  for (const SystematicGroup& sg : m.groups) {
    group_names.push_back(sg.name);
    group_members.insert(group_members.end(), sg.members.begin(), sg.members.end());
    group_offsets.push_back(static_cast<std::int64_t>(group_members.size()));
  }
  const std::vector<std::int64_t> constrained(m.constrained.begin(), m.constrained.end());
  hdf5::write_strings(g, "processes", processes);
  hdf5::write(g, "process_signal", std::span<const std::int64_t>(signal));
  hdf5::write_strings(g, "parameters", m.parameters);
  hdf5::write_strings(g, "parameter_kind", m.kinds);
  hdf5::write(g, "parameter_constrained", std::span<const std::int64_t>(constrained));
  hdf5::write(g, "prefit_uncertainty", std::span<const double>(m.prefit_uncertainty));
  hdf5::write_strings(g, "groups", group_names);
  hdf5::write(g, "group_members", std::span<const std::int64_t>(group_members));
  hdf5::write(g, "group_offsets", std::span<const std::int64_t>(group_offsets));
}

/// A χ² as the attributes `<prefix>chi2`, `<prefix>ndf` and, when there is one, `<prefix>note`.
inline void write_chi2_attributes(const hdf5::Location& g, const std::string& prefix, const LinearChi2& x, const std::string& note) {
  hdf5::write_attribute(g, prefix + "chi2", x.chi2);
  hdf5::write_attribute(g, prefix + "ndf", x.ndf);
  if (!note.empty()) hdf5::write_attribute(g, prefix + "note", note);
}

inline void write_histograms(const hdf5::Location& fit, const Histograms& h) {
  const hdf5::Location g = hdf5::create_group(fit, "histograms");
  const auto nb = static_cast<std::size_t>(h.nbins), np = static_cast<std::size_t>(h.nprocs);
  hdf5::write(g, "data", std::span<const double>(h.data));
  hdf5::write(g, "data_variance", std::span<const double>(h.data_variance));
  hdf5::write(g, "prefit", std::span<const double>(h.prefit), {nb, np});
  hdf5::write(g, "prefit_total", std::span<const double>(h.prefit_total));
  hdf5::write(g, "prefit_variance", std::span<const double>(h.prefit_variance));
  const auto per_process = [&](const char* name, const std::vector<double>& v) {
    if (!v.empty()) hdf5::write(g, name, std::span<const double>(v), {nb, np});
  };
  per_process("prefit_process_variance", h.prefit_process_variance);
  // per channel, by its index: `[bins, bins]`
  const auto covariances = [&](const char* name, const std::vector<std::vector<double>>& blocks) {
    if (blocks.empty()) return;
    const hdf5::Location c = hdf5::create_group(g, name);
    for (std::size_t k = 0; k < blocks.size(); ++k) {
      const auto side = static_cast<std::size_t>(std::llround(std::sqrt(static_cast<double>(blocks[k].size()))));
      hdf5::write(c, std::to_string(k), std::span<const double>(blocks[k]), {side, side});
    }
  };
  covariances("prefit_covariance", h.prefit_covariance);
  const auto variations = [&](const char* name, const std::vector<double>& v) {
    if (!v.empty()) hdf5::write(g, name, std::span<const double>(v), {nb, v.size() / (2 * nb), 2});
  };
  variations("prefit_variations", h.prefit_variations);
  // per channel `[channels]` (masked: NaN, ndf 0), the total over every data bin as attributes
  const auto chi2 = [&](const char* name, const std::vector<LinearChi2>& per, const LinearChi2& total, const std::string& note) {
    if (per.empty()) return;
    const hdf5::Location c = hdf5::create_group(g, name);
    std::vector<double> values;
    std::vector<std::int64_t> ndf;
    for (const LinearChi2& x : per) {
      values.push_back(x.chi2);
      ndf.push_back(x.ndf);
    }
    hdf5::write(c, "chi2", std::span<const double>(values));
    hdf5::write(c, "ndf", std::span<const std::int64_t>(ndf));
    write_chi2_attributes(c, "total_", total, {});
    if (!note.empty()) hdf5::write_attribute(c, "note", note);
  };
  chi2("prefit_chi2", h.prefit_chi2, h.prefit_chi2_total, {});
  if (h.postfit.empty()) return;  // blinded
  hdf5::write(g, "postfit", std::span<const double>(h.postfit), {nb, np});
  hdf5::write(g, "postfit_total", std::span<const double>(h.postfit_total));
  hdf5::write(g, "postfit_variance", std::span<const double>(h.postfit_variance));
  per_process("postfit_process_variance", h.postfit_process_variance);
  covariances("postfit_covariance", h.postfit_covariance);
  variations("postfit_variations", h.postfit_variations);
  chi2("postfit_chi2", h.postfit_chi2, h.postfit_chi2_total, h.postfit_chi2_note);
}

/// One group per mapping, `mappings/<i>` in the order given, its key as an attribute.
inline void write_mappings(const hdf5::Location& fit, const std::vector<MappedHistograms>& list) {
  if (list.empty()) return;
  const hdf5::Location all = hdf5::create_group(fit, "mappings");
  for (std::size_t i = 0; i < list.size(); ++i) {
    const MappedHistograms& h = list[i];
    const hdf5::Location g = hdf5::create_group(all, std::to_string(i));
    hdf5::write_attribute(g, "key", h.key);
    write_channels(g, h.channels);
    const auto size = static_cast<std::size_t>(h.size);
    const auto vector = [&](const char* name, const std::vector<double>& v) {
      if (!v.empty()) hdf5::write(g, name, std::span<const double>(v));
    };
    const auto matrix = [&](const char* name, const std::vector<double>& v) {
      if (!v.empty()) hdf5::write(g, name, std::span<const double>(v), {size, size});
    };
    vector("data", h.data);
    vector("data_variance", h.data_variance);
    vector("prefit", h.prefit);
    vector("prefit_variance", h.prefit_variance);
    matrix("prefit_covariance", h.prefit_covariance);
    if (h.prefit_chi2) write_chi2_attributes(g, "prefit_", *h.prefit_chi2, {});
    if (h.postfit.empty()) continue;  // blinded
    vector("postfit", h.postfit);
    vector("postfit_variance", h.postfit_variance);
    matrix("postfit_covariance", h.postfit_covariance);
    if (h.postfit_chi2) write_chi2_attributes(g, "postfit_", *h.postfit_chi2, h.postfit_chi2_note);
  }
}

inline nlohmann::json chi2_json(const LinearChi2& x) { return {{"chi2", finite_or_null(x.chi2)}, {"ndf", x.ndf}}; }

/// The channels as the JSON lists them (model.channels, and each mapping's).
inline nlohmann::json channels_json(const std::vector<Channel>& channels) {
  nlohmann::json list = nlohmann::json::array();
  index_t start = 0;
  for (const Channel& c : channels) {
    nlohmann::json axes = nlohmann::json::array();
    for (const Axis& a : c.axes) {
      nlohmann::json ja = {{"kind", a.kind_name()}, {"name", a.name}, {"label", a.label}};
      if (a.categories.empty())
        ja["edges"] = a.edges;
      else
        ja["categories"] = a.categories;
      if (!a.transform.empty()) ja["transform"] = a.transform;
      ja.update({{"underflow", a.underflow}, {"overflow", a.overflow}, {"circular", a.circular}, {"growth", a.growth}});
      axes.push_back(std::move(ja));
    }
    list.push_back({{"name", c.name}, {"start", start}, {"bins", c.nbins}, {"masked", c.masked}, {"flow", c.flow}, {"axes", std::move(axes)}});
    start += c.nbins;
  }
  return list;
}

inline nlohmann::json mappings_json(const std::vector<MappedHistograms>& list) {
  nlohmann::json all = nlohmann::json::array();
  for (const MappedHistograms& h : list) {
    nlohmann::json j = {{"key", h.key}, {"channels", channels_json(h.channels)}, {"prefit", finite_or_null(h.prefit)},
                        {"prefit_variance", finite_or_null(h.prefit_variance)}};
    if (!h.data.empty()) {
      j["data"] = finite_or_null(h.data);
      j["data_variance"] = finite_or_null(h.data_variance);
    }
    if (h.prefit_chi2) j["prefit_chi2"] = chi2_json(*h.prefit_chi2);
    if (!h.prefit_covariance.empty()) j["prefit_covariance"] = finite_or_null(h.prefit_covariance);
    if (!h.postfit.empty()) {
      j["postfit"] = finite_or_null(h.postfit);
      j["postfit_variance"] = finite_or_null(h.postfit_variance);
      if (!h.postfit_covariance.empty()) j["postfit_covariance"] = finite_or_null(h.postfit_covariance);
      if (h.postfit_chi2) {
        j["postfit_chi2"] = chi2_json(*h.postfit_chi2);
        if (!h.postfit_chi2_note.empty()) j["postfit_chi2"]["note"] = h.postfit_chi2_note;
      }
    }
    all.push_back(std::move(j));
  }
  return all;
}

inline nlohmann::json histograms_json(const Histograms& h) {
  nlohmann::json j = {{"data", finite_or_null(h.data)},
                      {"data_variance", finite_or_null(h.data_variance)},
                      {"prefit_total", finite_or_null(h.prefit_total)},
                      {"prefit_variance", finite_or_null(h.prefit_variance)}};
  const auto covariances = [](const std::vector<std::vector<double>>& blocks) {
    nlohmann::json a = nlohmann::json::array();
    for (const auto& b : blocks) a.push_back(finite_or_null(b));
    return a;
  };
  if (!h.prefit_covariance.empty()) j["prefit_covariance"] = covariances(h.prefit_covariance);
  const auto chi2 = [](const std::vector<LinearChi2>& per, const LinearChi2& total, const std::string& note) {
    nlohmann::json c = {{"total", chi2_json(total)}, {"channels", nlohmann::json::array()}};
    for (const LinearChi2& x : per) c["channels"].push_back(chi2_json(x));
    if (!note.empty()) c["note"] = note;
    return c;
  };
  if (!h.prefit_chi2.empty()) j["prefit_chi2"] = chi2(h.prefit_chi2, h.prefit_chi2_total, {});
  if (!h.postfit.empty()) {
    j["postfit_total"] = finite_or_null(h.postfit_total);
    j["postfit_variance"] = finite_or_null(h.postfit_variance);
    if (!h.postfit_covariance.empty()) j["postfit_covariance"] = covariances(h.postfit_covariance);
    if (!h.postfit_chi2.empty()) j["postfit_chi2"] = chi2(h.postfit_chi2, h.postfit_chi2_total, h.postfit_chi2_note);
  }
  return j;
}

inline nlohmann::json model_json(const ModelInfo& m) {
  nlohmann::json j;
  j["channels"] = channels_json(m.channels);
  j["processes"] = nlohmann::json::array();
  for (const Process& p : m.processes) j["processes"].push_back({{"name", p.name}, {"signal", p.signal}});
  j["parameters"] = nlohmann::json::array();
  for (std::size_t i = 0; i < m.parameters.size(); ++i)
    j["parameters"].push_back({{"name", m.parameters[i]},
                               {"kind", m.kinds[i]},
                               {"constrained", m.constrained[i] != 0},
                               {"prefit_uncertainty", m.prefit_uncertainty[i]}});
  j["groups"] = nlohmann::json::array();
  for (const SystematicGroup& sg : m.groups) {
    nlohmann::json members = nlohmann::json::array();
    for (index_t k : sg.members) members.push_back(m.parameters[static_cast<std::size_t>(k)]);
    j["groups"].push_back({{"name", sg.name}, {"members", std::move(members)}});
  }
  return j;
}

inline void write_run(const hdf5::File& file, const RunInfo& run, const std::vector<FitRecord>& fits, const std::optional<ToySummary>& toys) {
  hdf5::write_attribute(file, "fitlib_version", std::string(FITLIB_VERSION_STRING));
  hdf5::write_attribute(file, "format_version", results_format_version);
  hdf5::write_attribute(file, "input_path", run.input_path);
  hdf5::write_attribute(file, "input_sha256", run.input_sha256);
  hdf5::write_attribute(file, "command_line", run.command_line);
  hdf5::write_attribute(file, "options", detail::exact_integers(run.options).dump());
  if (run.model) write_model(file, *run.model);
  std::vector<std::string> names;
  for (const FitRecord& f : fits) names.push_back(f.name);
  hdf5::write_strings(file, "fits", names);
  for (const FitRecord& f : fits) {
    const FitResult& r = f.result;
    const std::size_t n = r.x.size();
    const hdf5::Location g = hdf5::create_group(file, f.name);
    hdf5::write_attribute(g, "status", std::string(to_string(r.status)));
    hdf5::write_attribute(g, "converged", std::int64_t{r.converged() ? 1 : 0});
    hdf5::write_attribute(g, "covariance_status", std::string(to_string(r.covariance_status)));
    if (!f.error.empty()) hdf5::write_attribute(g, "error", f.error);
    hdf5::write_attribute(g, "nll_reduced", r.nll);
    hdf5::write_attribute(g, "nll_full", f.nll_full);
    hdf5::write_attribute(g, "edm", r.edm);
    hdf5::write_attribute(g, "iterations", static_cast<std::int64_t>(r.iterations));
    hdf5::write_attribute(g, "minimize_seconds", f.minimize_seconds);
    hdf5::write_attribute(g, "postfit_seconds", f.postfit_seconds);
    hdf5::write_attribute(g, "total_seconds", f.total_seconds);
    hdf5::write_strings(g, "parameters", r.names);
    hdf5::write(g, "prefit", std::span<const double>(r.x0));
    hdf5::write(g, "postfit", std::span<const double>(r.x));
    hdf5::write(g, "uncertainty", std::span<const double>(r.uncertainties));
    hdf5::write(g, "gradient", std::span<const double>(r.gradient));
    std::vector<std::int64_t> frozen(r.frozen.begin(), r.frozen.end());
    hdf5::write(g, "frozen", std::span<const std::int64_t>(frozen));
    hdf5::write_strings(g, "blinded", f.blinded);
    if (r.covariance.size() == n * n) {  // column-major, symmetric only to rounding: transposed, so that [i, j] is C_ij
      hdf5::write(g, "covariance", std::span<const double>(transposed(r.covariance, n)), {n, n});
      hdf5::write(g, "correlation", std::span<const double>(transposed(correlation(r.covariance, n), n)), {n, n});
    }
    if (!f.bin_by_bin.empty())
      hdf5::write(g, "bin_by_bin_beta", std::span<const double>(f.bin_by_bin),
            {f.bin_by_bin.size() / static_cast<std::size_t>(f.bin_by_bin_per_bin), static_cast<std::size_t>(f.bin_by_bin_per_bin)});
    if (f.gof) {
      const hdf5::Location s = hdf5::create_group(g, "saturated_gof");
      hdf5::write_attribute(s, "chi2", f.gof->chi2);
      hdf5::write_attribute(s, "ndf", static_cast<std::int64_t>(f.gof->ndf));
      hdf5::write_attribute(s, "p_value", f.gof->p_value);
    }
    if (f.impacts) write_impacts(g, "impacts", *f.impacts);
    if (f.global_impacts) write_impacts(g, "global_impacts", *f.global_impacts);
    for (const Scan& s : f.scans) {
      const hdf5::Location sg = hdf5::create_group(g, "scans/" + s.parameter);
      hdf5::write(sg, "values", std::span<const double>(s.values));
      hdf5::write(sg, "dnll", std::span<const double>(s.dnll));
      hdf5::write_strings(sg, "status", status_names(s.status));
    }
    if (f.histograms) write_histograms(g, *f.histograms);
    write_mappings(g, f.mappings);
    for (std::size_t k = 0; k < f.scans2d.size(); ++k) {
      const GridScan& s = f.scans2d[k];
      const hdf5::Location sg = hdf5::create_group(g, "scans2D/" + std::to_string(k));
      hdf5::write_strings(sg, "parameters", s.parameters);
      hdf5::write(sg, "values_x", std::span<const double>(s.values[0]));
      hdf5::write(sg, "values_y", std::span<const double>(s.values[1]));
      hdf5::write(sg, "dnll", std::span<const double>(s.dnll), {s.values[0].size(), s.values[1].size()});
      hdf5::write_strings(sg, "status", status_names(s.status));
    }
  }
  if (toys) write_toys(file, *toys);
}

}  // namespace detail

/// The results file's bytes, in the layout of docs/results-format.md, built in memory: a writer puts them on
/// disk itself (`write_file`, `ReplacingFile`), so HDF5 never meets a failed disk write (HDF5 1.10 crashes
/// at exit on a file whose write failed). `name` is used in messages.
inline std::vector<std::byte> results_image(const std::string& name, const RunInfo& run, const std::vector<FitRecord>& fits,
                                            const std::optional<ToySummary>& toys = std::nullopt) {
  hdf5::FileOptions fo;
  fo.compress = false;  // mostly covariance-sized matrices of full-precision numbers: gzip gains little, costs much
  const hdf5::File file = hdf5::File::create_in_memory(name, fo);
  detail::write_run(file, run, fits, toys);
  return file.image();
}

/// Writes the run to `path`, whole or not at all: a failure (a full disk, a signal) leaves an existing
/// `path` untouched. Throws `file_error` when the file cannot be written.
inline void write_results(const std::string& path, const RunInfo& run, const std::vector<FitRecord>& fits,
                          const std::optional<ToySummary>& toys = std::nullopt) {
  write_file(path, results_image(path, run, fits, toys), "the results file");
}

/// The JSON summary of the run. The covariance is included up to `max_covariance_parameters`
/// parameters (the HDF5 file always has it).
inline nlohmann::json results_json(const RunInfo& run, const std::vector<FitRecord>& fits, const std::optional<ToySummary>& toys = std::nullopt,
                                   std::size_t max_covariance_parameters = 500) {
  nlohmann::json j;
  j["fitlib_version"] = FITLIB_VERSION_STRING;
  j["format_version"] = results_format_version;
  j["input"] = {{"path", run.input_path}, {"sha256", run.input_sha256}};
  j["command_line"] = run.command_line;
  j["options"] = detail::exact_integers(run.options);
  if (run.model) j["model"] = detail::model_json(*run.model);
  j["fits"] = nlohmann::json::array();
  for (const FitRecord& f : fits) {
    const FitResult& r = f.result;
    nlohmann::json fj;
    fj["name"] = f.name;
    fj["status"] = std::string(to_string(r.status));
    fj["converged"] = r.converged();
    fj["covariance_status"] = std::string(to_string(r.covariance_status));
    if (!f.error.empty()) fj["error"] = f.error;
    fj["nll_reduced"] = detail::finite_or_null(r.nll);
    fj["nll_full"] = detail::finite_or_null(f.nll_full);
    fj["edm"] = detail::finite_or_null(r.edm);
    fj["iterations"] = r.iterations;
    fj["evaluations"] = {{"values", r.counts.values}, {"gradients", r.counts.gradients}, {"hvps", r.counts.hvps}, {"hessians", r.counts.hessians},
                          {"gauss_newton", r.counts.gauss_newton}};
    fj["blinded"] = f.blinded;
    fj["parameters"] = nlohmann::json::array();
    for (std::size_t i = 0; i < r.x.size(); ++i)
      fj["parameters"].push_back({{"name", r.names[i]},
                                  {"prefit", detail::finite_or_null(r.x0[i])},
                                  {"postfit", detail::finite_or_null(r.x[i])},
                                  {"uncertainty", detail::finite_or_null(r.uncertainties[i])},
                                  {"frozen", static_cast<bool>(r.frozen[i])}});
    if (r.x.size() <= max_covariance_parameters && r.covariance.size() == r.x.size() * r.x.size())
      fj["covariance"] = detail::matrix_rows(r.covariance, r.x.size());
    if (f.gof) fj["saturated_gof"] = {{"chi2", detail::finite_or_null(f.gof->chi2)}, {"ndf", f.gof->ndf}, {"p_value", detail::finite_or_null(f.gof->p_value)}};
    if (f.impacts) fj["impacts"] = detail::impacts_json(*f.impacts);
    if (f.global_impacts) fj["global_impacts"] = detail::impacts_json(*f.global_impacts);
    for (const Scan& s : f.scans)
      fj["scans"][s.parameter] = {{"values", detail::finite_or_null(s.values)}, {"dnll", detail::finite_or_null(s.dnll)}, {"status", detail::status_names(s.status)}};
    if (f.histograms) fj["histograms"] = detail::histograms_json(*f.histograms);
    if (!f.mappings.empty()) fj["mappings"] = detail::mappings_json(f.mappings);
    for (const GridScan& s : f.scans2d) {
      nlohmann::json rows = nlohmann::json::array();
      const std::size_t ny = s.values[1].size();
      for (std::size_t a = 0; a < s.values[0].size(); ++a)
        rows.push_back(detail::finite_or_null(std::vector<double>(s.dnll.begin() + static_cast<std::ptrdiff_t>(a * ny),
                                                                  s.dnll.begin() + static_cast<std::ptrdiff_t>((a + 1) * ny))));
      fj["scans2D"].push_back({{"parameters", s.parameters},
                               {"values", {detail::finite_or_null(s.values[0]), detail::finite_or_null(s.values[1])}},
                               {"dnll", std::move(rows)},
                               {"status", detail::status_names(s.status)}});
    }
    fj["timing"] = {{"minimize_seconds", f.minimize_seconds}, {"postfit_seconds", f.postfit_seconds}, {"total_seconds", f.total_seconds}};
    j["fits"].push_back(fj);
  }
  if (toys) j["toys"] = detail::toys_json(*toys);
  return j;
}

/// `results_json` as text, indented. JSON text is UTF-8: bytes of names or paths that are not (e.g. Latin-1
/// file names) are written as U+FFFD; the HDF5 file keeps them exactly.
inline std::string results_json_text(const RunInfo& run, const std::vector<FitRecord>& fits, const std::optional<ToySummary>& toys = std::nullopt) {
  return results_json(run, fits, toys).dump(1, ' ', false, nlohmann::json::error_handler_t::replace) + '\n';
}

/// Writes `results_json_text` to `path`, whole or not at all (`write_file`).
inline void write_results_json(const std::string& path, const RunInfo& run, const std::vector<FitRecord>& fits,
                               const std::optional<ToySummary>& toys = std::nullopt) {
  write_file(path, results_json_text(run, fits, toys), "the JSON summary");
}

}  // namespace fitlib::io
