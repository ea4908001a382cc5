// SPDX-License-Identifier: MIT
// The host-side binned model: channels, processes, systematics, templates, data and constraints.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <sstream>
#include <string>
#include <variant>
#include <vector>

#include "fitlib/core/error.hpp"
#include "fitlib/core/types.hpp"
#include "fitlib/model/axis.hpp"
#include "fitlib/model/dense_templates.hpp"
#include "fitlib/model/sparse_templates.hpp"

namespace fitlib {

/// How a systematic's tensor entries act on the yields (rabbit-likelihood-and-format.md §1.4, §2.4).
/// As in rabbit, the type is a property of the whole model (its `systematic_type` attribute).
enum class SystematicType {
  log_normal,  ///< ν = r·N·exp(L): entries are logarithms of yield ratios
  normal,      ///< ν = r·N + r⁰·L: entries are absolute (additive) yield shifts
};

/// A group of consecutive bins. Masked channels are computed like any other but never enter the
/// data term (used for unfolded cross sections and regularisation).
struct Channel {
  std::string name;
  index_t nbins = 0;
  bool masked = false;
  /// The histogram the bins come from, if known: its axes, the bins in row-major order (the last axis varies
  /// fastest, as numpy flattens hist's values), each axis giving its size() bins, or its extent() with `flow`.
  /// Empty: the bins are numbered 0 … nbins-1 and nothing more is known.
  std::vector<Axis> axes = {};
  bool flow = false;  ///< the bins include the axes' underflow and overflow bins (rabbit: masked channels only)

  /// The number of bins along each axis (empty without axes).
  std::vector<index_t> shape() const {
    std::vector<index_t> s;
    for (const Axis& a : axes) s.push_back(flow ? a.extent() : a.size());
    return s;
  }
};

/// A process. Signal processes are scaled by one signal-strength POI each (rabbit's `Mu` model).
struct Process {
  std::string name;
  bool signal = false;
};

/// A nuisance parameter θ_s. Its Gaussian constraint ½·w·(θ − θ₀)² lives in `Model::constraint_weights`
/// and `Model::theta0`; weight 0 means unconstrained.
struct Systematic {
  std::string name;
};

/// A named set of systematics, for grouped impacts (rabbit's hsystgroups/hsystgroupidxs, §1.1).
struct SystematicGroup {
  std::string name;
  std::vector<index_t> members;  ///< indices into `Model::systematics`
};

/// An external likelihood term gᵀx_J + ½·x_Jᵀ·M·x_J on named parameters (rabbit-likelihood-and-format.md
/// §1.6, §3.5), e.g. a prefit Hessian from another measurement. M is symmetric and stored as its
/// non-zero entries (row, column, value) over the term's own parameter order, both triangles
/// (validated).
struct ExternalTerm {
  std::string name;
  std::vector<std::string> parameters;  ///< the names J, resolved against the model's parameters
  std::vector<double> gradient;         ///< g, `[m]`, or empty
  std::vector<index_t> hessian_rows, hessian_cols;
  std::vector<double> hessian_values;   ///< M's non-zero entries, or empty

  /// M given densely (`[m × m]`, column-major): keeps its non-zero entries.
  void set_dense_hessian(const std::vector<double>& M) {
    const index_t m = static_cast<index_t>(parameters.size());
    if (static_cast<index_t>(M.size()) != m * m)
      throw model_error("external term '" + name + "': the dense Hessian has " + std::to_string(M.size()) + " entries, expected " +
                        std::to_string(m) + " × " + std::to_string(m));
    hessian_rows.clear();
    hessian_cols.clear();
    hessian_values.clear();
    for (index_t c = 0; c < m; ++c)
      for (index_t r = 0; r < m; ++r)
        if (const double v = M[static_cast<std::size_t>(r + c * m)]; v != 0) {
          hessian_rows.push_back(r);
          hessian_cols.push_back(c);
          hessian_values.push_back(v);
        }
  }
};

/// The complete binned model, in rabbit's layout (rabbit-likelihood-and-format.md §1.1–1.3):
/// bins of all channels concatenated, unmasked channels first and masked ones at the tail; the
/// template tensor stored densely (DenseTemplates) or without its zeros (SparseTemplates).
/// The fit parameters are `[POIs (one per signal process, in process order) | θ (nsyst)]`.
struct Model {
  std::vector<Channel> channels;
  std::vector<Process> processes;
  std::vector<Systematic> systematics;
  SystematicType systematic_type = SystematicType::log_normal;
  bool symmetric = true;                  ///< tensor layout: K only (true) or K and H (false)
  /// The template tensor, stored one way: the storage of a likelihood's shards is the tensor's type
  /// (storage::Dense reads DenseTemplates, storage::Sparse reads SparseTemplates, both in place), and
  /// storage::visit picks it from the model. Either may hold some bins' systematic rows only (`held`,
  /// a model read for one MPI rank); nominal yields, data and template variances are always whole.
  std::variant<DenseTemplates, SparseTemplates> templates;
  std::vector<double> data;               ///< observed counts n[b] of the unmasked bins, `[nbins]`
  /// Variances of the observed counts (rabbit's hdata_var), `[nbins]`, or empty = the counts
  /// themselves. Used by the χ² data term only.
  std::vector<double> data_variance;
  /// Inverse covariance C⁻¹ of the observed counts (rabbit's hdata_cov_inv), `[nbins × nbins]`,
  /// symmetric, or empty. Used by the covariance data term only.
  std::vector<double> data_covariance_inverse;
  /// Variances of the templates' Monte-Carlo sums, sumw2[b, p] (rabbit's hsumw2), `[nbins_full ×
  /// nprocs]`, or empty = exact templates. They drive the bin-by-bin statistics (§3.4).
  std::vector<double> sumw2;
  /// The templates' sums of weights sumw[b, p] (rabbit's hsumw), or empty = the nominal yields,
  /// which is what rabbit writes.
  std::vector<double> sumw;
  std::vector<double> theta0;             ///< constraint centres, `[nsyst]`
  std::vector<double> constraint_weights; ///< constraint weights (1 rabbit's default, 0 unconstrained)
  std::vector<double> poi_default;        ///< signal strength μ at the default point, `[npoi]`
  bool allow_negative_yields = false;     ///< accept N[b, p] < 0 (rabbit: allow_negative_expectation)
  /// Gaussian priors ½·w_q·(μ_q − c_q)² on the signal strengths μ = r(x) (rabbit's POI priors); either
  /// both empty or `[npoi]` each, weight 0 = no prior.
  std::vector<double> poi_prior_weights, poi_prior_centres;
  std::vector<ExternalTerm> external_terms;
  /// Groups of systematics for grouped impacts; a systematic may be in several groups or in none.
  std::vector<SystematicGroup> groups;
  /// Nuisances of interest (rabbit's hnoiidxs): systematics reported like POIs (impacts are computed
  /// on them too); indices into `systematics`.
  std::vector<index_t> nois;

  index_t nprocs() const { return static_cast<index_t>(processes.size()); }
  index_t nsyst() const { return static_cast<index_t>(systematics.size()); }
  /// Columns of a cell's row of the template matrix: nsyst (symmetric) or 2·nsyst.
  index_t ncoef() const { return symmetric ? nsyst() : 2 * nsyst(); }
  index_t npoi() const {
    index_t n = 0;
    for (const auto& p : processes) n += p.signal ? 1 : 0;
    return n;
  }
  index_t nparams() const { return npoi() + nsyst(); }
  /// The templates when stored densely, else null.
  const DenseTemplates* dense() const { return std::get_if<DenseTemplates>(&templates); }
  DenseTemplates* dense() { return std::get_if<DenseTemplates>(&templates); }
  /// The templates when stored sparsely, else null.
  const SparseTemplates* sparse() const { return std::get_if<SparseTemplates>(&templates); }
  SparseTemplates* sparse() { return std::get_if<SparseTemplates>(&templates); }
  /// N[b, p] densely, `[nbins_full × nprocs]`, whichever way the templates are stored.
  std::vector<double> nominal_yields() const { return sparse() ? sparse()->dense_nominal() : dense()->nominal; }
  /// The bins the tensor was read for (its `held`), or empty: it holds every bin's rows.
  const std::optional<BinRange>& held() const {
    return std::visit([](const auto& t) -> const std::optional<BinRange>& { return t.held; }, templates);
  }
  /// The bins whose systematic-tensor rows the model holds.
  BinRange held_bins() const { return held().value_or(BinRange{0, nbins_full()}); }
  /// Throws unless the model holds the systematic tensor of every bin, naming `what` needs it.
  void require_whole_tensor(const std::string& what) const {
    if (const BinRange h = held_bins(); h != BinRange{0, nbins_full()})
      throw usage_error(what + " needs the systematic tensor of every bin, but this model holds bins [" + std::to_string(h.begin) + ", " +
                        std::to_string(h.end) + ") only (read for one MPI rank); read the whole file (io::read_rabbit without RabbitReadOptions::bins)");
  }

  /// Stores the templates sparsely (only non-zero cells and entries are kept, and the held bins).
  void make_sparse() {
    if (sparse()) return;
    DenseTemplates& d = *dense();
    templates = SparseTemplates::from_dense(nbins_full(), nprocs(), ncoef(), d.nominal, d.logk, d.held);
  }
  /// All bins, masked channels included.
  index_t nbins_full() const {
    index_t n = 0;
    for (const auto& c : channels) n += c.nbins;
    return n;
  }
  /// Bins that enter the data term (the unmasked channels).
  index_t nbins() const {
    index_t n = 0;
    for (const auto& c : channels) n += c.masked ? 0 : c.nbins;
    return n;
  }

  /// Parameter names: the signal processes' names for the POIs, then the systematics'.
  std::vector<std::string> parameter_names() const {
    std::vector<std::string> names;
    for (const auto& p : processes)
      if (p.signal) names.push_back(p.name);
    for (const auto& s : systematics) names.push_back(s.name);
    return names;
  }

  /// POI index of each process, or -1 for a process that no POI scales.
  std::vector<index_t> poi_of_process() const {
    std::vector<index_t> map;
    index_t q = 0;
    for (const auto& p : processes) map.push_back(p.signal ? q++ : -1);
    return map;
  }

  /// "channel 'x' bin i" for a global bin index, for error messages.
  std::string describe_bin(index_t b) const {
    index_t start = 0;
    for (const auto& c : channels) {
      if (b < start + c.nbins) {
        std::ostringstream os;
        os << "channel '" << c.name << "' bin " << (b - start) << " (global bin " << b << ")";
        return os.str();
      }
      start += c.nbins;
    }
    return "global bin " + std::to_string(b) + " (beyond the channels)";
  }

  /// Checks every invariant above; throws `model_error` naming the offending item.
  void validate() const;

  /// Per systematic, 1 if it varies a yield of an unmasked bin whose templates the model holds, else 0.
  std::vector<index_t> varied_systematics() const {
    std::vector<index_t> varied(static_cast<std::size_t>(nsyst()), 0);
    const BinRange held = held_bins();
    const index_t ns = nsyst(), nc = ncoef(), np = nprocs(), end = std::min(held.end, nbins());
    for (index_t b = held.begin; b < end; ++b) {
      if (const SparseTemplates* sp = sparse()) {
        const auto& t = *sp;
        for (index_t k = t.row_begin[static_cast<std::size_t>(t.bin_begin[static_cast<std::size_t>(b)])];
             k < t.row_begin[static_cast<std::size_t>(t.bin_begin[static_cast<std::size_t>(b + 1)])]; ++k)
          varied[static_cast<std::size_t>(t.col[static_cast<std::size_t>(k)] % ns)] = 1;
        continue;
      }
      const double* row = dense()->logk.data() + (b - held.begin) * np * nc;
      for (index_t p = 0; p < np; ++p, row += nc)  // (an asymmetric row's second half is the same systematics')
        for (index_t k = 0; k < nc; ++k)
          if (row[k] != 0) varied[static_cast<std::size_t>(k < ns ? k : k - ns)] = 1;
    }
    return varied;
  }
  /// Throws unless every unconstrained systematic varies some fitted yield (`varied`, as
  /// varied_systematics gives it for the whole model): the data could not determine it otherwise.
  void require_determined(std::span<const index_t> varied) const {
    for (index_t s = 0; s < nsyst(); ++s)
      if (constraint_weights[static_cast<std::size_t>(s)] == 0 && !varied[static_cast<std::size_t>(s)])
        throw model_error("systematic '" + systematics[static_cast<std::size_t>(s)].name +
                          "' is unconstrained but varies no fitted bin, so the data cannot determine it; book a variation for it, constrain it, or drop it");
  }
};

namespace detail {
template <class Range>
void require_unique_names(const Range& items, const char* what) {
  std::set<std::string> seen;
  for (const auto& it : items) {
    if (it.name.empty()) throw model_error(std::string("a ") + what + " has an empty name; give every " + what + " a name");
    if (!seen.insert(it.name).second)
      throw model_error(std::string("duplicate ") + what + " name '" + it.name + "'; " + what + " names must be unique");
  }
}

inline void require_size(std::size_t actual, index_t expected, const char* field, const char* shape) {
  if (static_cast<index_t>(actual) != expected) {
    std::ostringstream os;
    os << "Model::" << field << " has " << actual << " entries but the model needs " << expected << " (" << shape << ")";
    throw model_error(os.str());
  }
}
}  // namespace detail

inline void Model::validate() const {
  detail::require_unique_names(channels, "channel");
  detail::require_unique_names(processes, "process");
  detail::require_unique_names(systematics, "systematic");
  if (channels.empty()) throw model_error("the model has no channels; add at least one channel");
  if (processes.empty()) throw model_error("the model has no processes; add at least one process");
  bool seen_masked = false;
  for (const auto& c : channels) {
    if (c.nbins <= 0) throw model_error("channel '" + c.name + "' has no bins; give it at least one bin");
    if (!c.axes.empty() && axes_bins(c.axes, c.flow, c.nbins) != c.nbins) {
      std::string shape;
      for (const index_t n : c.shape()) shape += (shape.empty() ? "" : " × ") + std::to_string(n);
      throw model_error("channel '" + c.name + "' has " + std::to_string(c.nbins) + " bins but its axes have " + shape +
                        (c.flow ? " (with their flow bins)" : "") + "; make Channel::axes describe its bins, or leave them empty");
    }
    if (seen_masked && !c.masked)
      throw model_error("unmasked channel '" + c.name +
                        "' follows a masked channel; masked channels must come last (rabbit's bin order)");
    seen_masked = seen_masked || c.masked;
  }
  if (nbins() == 0) throw model_error("every channel is masked; at least one channel must enter the data term");

  const index_t bf = nbins_full(), np = nprocs(), ns = nsyst(), nc = ncoef();
  const BinRange held = held_bins();
  if (held.begin < 0 || held.end > bf || held.begin > held.end)
    throw model_error("the templates' held bins are [" + std::to_string(held.begin) + ", " + std::to_string(held.end) + "), outside the model's " +
                      std::to_string(bf) + " bins");
  const auto cell = [&](index_t b, index_t p) { return "process '" + processes[static_cast<std::size_t>(p)].name + "' in " + describe_bin(b); };
  const auto check_nominal = [&](index_t b, index_t p, double n) {
    if (!std::isfinite(n)) throw model_error("nominal yield of " + cell(b, p) + " is not finite; fix the input histogram");
    if (n < 0 && !allow_negative_yields)
      throw model_error("nominal yield of " + cell(b, p) + " is negative (" + std::to_string(n) + "); clip it to zero or set allow_negative_yields");
  };
  if (const SparseTemplates* sp = sparse()) {
    sp->validate();
    if (sp->nbins_full != bf || sp->nprocs != np || sp->ncoef != nc)
      throw model_error("sparse templates have shape [" + std::to_string(sp->nbins_full) + " bins × " + std::to_string(sp->nprocs) +
                        " processes × " + std::to_string(sp->ncoef) + " coefficients] but the model needs [" + std::to_string(bf) +
                        " × " + std::to_string(np) + " × " + std::to_string(nc) + "]");
    for (index_t b = 0; b < bf; ++b)
      for (index_t i = sp->bin_begin[static_cast<std::size_t>(b)]; i < sp->bin_begin[static_cast<std::size_t>(b + 1)]; ++i)
        check_nominal(b, sp->cell_process[static_cast<std::size_t>(i)], sp->cell_nominal[static_cast<std::size_t>(i)]);
  } else {
    const DenseTemplates& d = *dense();
    detail::require_size(d.nominal.size(), bf * np, "templates' nominal", "nbins_full × nprocs");
    const std::string rows = d.held ? "held bins" : "nbins_full";
    detail::require_size(d.logk.size(), held.size() * np * nc, "templates' logk",
                         (rows + (symmetric ? " × nprocs × nsyst" : " × nprocs × 2 × nsyst")).c_str());
    for (index_t b = 0; b < bf; ++b) {
      for (index_t p = 0; p < np; ++p) {
        const double n = d.nominal[static_cast<std::size_t>(b * np + p)];
        check_nominal(b, p, n);
        if (b < held.begin || b >= held.end) continue;
        const double* row = d.logk.data() + ((b - held.begin) * np + p) * nc;
        // The row at once (a pass over the whole tensor), then the entry that fails, if one does.
        bool bad = false;
        if (n == 0)
          for (index_t k = 0; k < nc; ++k) bad |= row[k] != 0;  // (NaN too)
        else
          for (index_t k = 0; k < nc; ++k) bad |= !std::isfinite(row[k]);
        for (index_t k = 0; k < nc && bad; ++k) {
          const auto& syst = systematics[static_cast<std::size_t>(k % ns)].name;
          const char* part = k < ns ? "" : " (asymmetric half-difference)";
          if (!std::isfinite(row[k]))
            throw model_error("variation of systematic '" + syst + "'" + part + " for " + cell(b, p) +
                              " is not finite; check the up/down histograms");
          if (n == 0 && row[k] != 0)
            throw model_error("systematic '" + syst + "' varies " + cell(b, p) +
                              " whose nominal yield is zero; a variation needs a non-zero nominal yield");
        }
      }
    }
  }
  detail::require_size(data.size(), nbins(), "data", "one entry per unmasked bin");
  detail::require_size(theta0.size(), ns, "theta0", "one entry per systematic");
  detail::require_size(constraint_weights.size(), ns, "constraint_weights", "one entry per systematic");
  detail::require_size(poi_default.size(), npoi(), "poi_default", "one entry per signal process");
  for (index_t b = 0; b < nbins(); ++b) {
    const double n = data[static_cast<std::size_t>(b)];
    if (!std::isfinite(n) || n < 0)
      throw model_error("observed count in " + describe_bin(b) + " is " + std::to_string(n) +
                        "; counts must be finite and non-negative");
  }
  if (!data_variance.empty()) {
    detail::require_size(data_variance.size(), nbins(), "data_variance", "empty, or one entry per unmasked bin");
    for (index_t b = 0; b < nbins(); ++b)
      if (const double v = data_variance[static_cast<std::size_t>(b)]; !std::isfinite(v) || v < 0)
        throw model_error("data variance in " + describe_bin(b) + " is " + std::to_string(v) + "; variances must be finite and ≥ 0");
  }
  if (!data_covariance_inverse.empty()) {
    const index_t nb = nbins();
    detail::require_size(data_covariance_inverse.size(), nb * nb, "data_covariance_inverse", "empty, or nbins × nbins");
    for (index_t a = 0; a < nb; ++a)
      for (index_t b = 0; b <= a; ++b) {
        const double v = data_covariance_inverse[static_cast<std::size_t>(a * nb + b)];
        if (!std::isfinite(v))
          throw model_error("inverse data covariance entry (" + std::to_string(a) + ", " + std::to_string(b) + ") is not finite");
        if (v != data_covariance_inverse[static_cast<std::size_t>(b * nb + a)])
          throw model_error("inverse data covariance is not symmetric at (" + std::to_string(a) + ", " + std::to_string(b) +
                            "); supply a symmetric matrix");
      }
  }
  for (const auto* field : {&sumw2, &sumw}) {
    if (field->empty()) continue;
    const char* what = field == &sumw2 ? "sumw2" : "sumw";
    detail::require_size(field->size(), bf * np, what, "empty, or nbins_full × nprocs");
    for (index_t c = 0; c < bf * np; ++c) {
      const double v = (*field)[static_cast<std::size_t>(c)];
      if (!std::isfinite(v) || (field == &sumw2 && v < 0))
        throw model_error(std::string("template ") + what + " of process '" + processes[static_cast<std::size_t>(c % np)].name + "' in " +
                          describe_bin(c / np) + " is " + std::to_string(v) + (field == &sumw2 ? "; variances must be finite and ≥ 0" : "; it must be finite"));
    }
  }
  for (index_t s = 0; s < ns; ++s) {
    const auto& name = systematics[static_cast<std::size_t>(s)].name;
    const double w = constraint_weights[static_cast<std::size_t>(s)];
    if (!std::isfinite(w) || w < 0)
      throw model_error("constraint weight of systematic '" + name + "' is " + std::to_string(w) +
                        "; use a finite weight ≥ 0 (0 = unconstrained)");
    if (!std::isfinite(theta0[static_cast<std::size_t>(s)]))
      throw model_error("constraint centre of systematic '" + name + "' is not finite");
  }
  // A model holding part of the tensor cannot see every bin: mpi::Ranks checks this across ranks.
  if (!this->held()) require_determined(varied_systematics());
  index_t q = 0;
  for (const auto& p : processes) {
    if (!p.signal) continue;
    const double mu = poi_default[static_cast<std::size_t>(q++)];
    if (!std::isfinite(mu)) throw model_error("default signal strength of '" + p.name + "' is not finite");
  }
  if (!poi_prior_weights.empty() || !poi_prior_centres.empty()) {
    detail::require_size(poi_prior_weights.size(), npoi(), "poi_prior_weights", "empty, or one entry per signal process");
    detail::require_size(poi_prior_centres.size(), npoi(), "poi_prior_centres", "empty, or one entry per signal process");
    const auto names = parameter_names();
    for (index_t i = 0; i < npoi(); ++i) {
      const double w = poi_prior_weights[static_cast<std::size_t>(i)], c = poi_prior_centres[static_cast<std::size_t>(i)];
      if (!std::isfinite(w) || w < 0 || !std::isfinite(c))
        throw model_error("prior of POI '" + names[static_cast<std::size_t>(i)] + "' has weight " + std::to_string(w) + " and centre " +
                          std::to_string(c) + "; use a finite weight ≥ 0 and a finite centre");
    }
  }
  detail::require_unique_names(groups, "systematic group");
  for (const auto& g : groups)
    for (index_t s : g.members)
      if (s < 0 || s >= ns)
        throw model_error("systematic group '" + g.name + "' lists systematic index " + std::to_string(s) + ", outside [0, " +
                          std::to_string(ns) + ")");
  for (index_t s : nois)
    if (s < 0 || s >= ns)
      throw model_error("nuisance of interest index " + std::to_string(s) + " is outside the " + std::to_string(ns) + " systematics");
  const auto names = parameter_names();
  std::set<std::string> term_names;
  for (const auto& t : external_terms) {
    if (!term_names.insert(t.name).second) throw model_error("duplicate external term name '" + t.name + "'");
    const auto m = t.parameters.size();
    std::set<std::string> seen;
    for (const auto& name : t.parameters) {
      if (std::find(names.begin(), names.end(), name) == names.end())
        throw model_error("external term '" + t.name + "' names parameter '" + name +
                          "', which the model does not have; its parameters are the signal processes and systematics");
      if (!seen.insert(name).second) throw model_error("external term '" + t.name + "' names parameter '" + name + "' twice");
    }
    if (!t.gradient.empty()) detail::require_size(t.gradient.size(), static_cast<index_t>(m), "external_terms[].gradient", "one entry per parameter of the term");
    if (t.hessian_rows.size() != t.hessian_values.size() || t.hessian_cols.size() != t.hessian_values.size())
      throw model_error("external term '" + t.name + "': the Hessian's rows, columns and values differ in length");
    for (double g : t.gradient)
      if (!std::isfinite(g)) throw model_error("external term '" + t.name + "' has a non-finite gradient entry");
    for (std::size_t k = 0; k < t.hessian_values.size(); ++k) {
      const index_t r = t.hessian_rows[k], c = t.hessian_cols[k];
      if (r < 0 || c < 0 || r >= static_cast<index_t>(m) || c >= static_cast<index_t>(m))
        throw model_error("external term '" + t.name + "': Hessian entry (" + std::to_string(r) + ", " + std::to_string(c) +
                          ") is outside its " + std::to_string(m) + " parameters");
      if (!std::isfinite(t.hessian_values[k])) throw model_error("external term '" + t.name + "' has a non-finite Hessian entry");
    }
    // ½xᵀMx has gradient M·x only for a symmetric M: both triangles must be given, and agree.
    std::map<std::pair<index_t, index_t>, double> entries;
    for (std::size_t k = 0; k < t.hessian_values.size(); ++k) entries[{t.hessian_rows[k], t.hessian_cols[k]}] += t.hessian_values[k];
    for (const auto& [rc, v] : entries) {
      const auto mirror = entries.find({rc.second, rc.first});
      const double w = mirror == entries.end() ? 0.0 : mirror->second;
      if (v != w)
        throw model_error("external term '" + t.name + "': Hessian entry (" + std::to_string(rc.first) + ", " + std::to_string(rc.second) +
                          ") = " + std::to_string(v) + " but its mirror is " + std::to_string(w) +
                          "; give both triangles of the symmetric matrix");
    }
  }
}

}  // namespace fitlib
