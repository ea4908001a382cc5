// SPDX-License-Identifier: MIT
// ModelBuilder: assembles a Model from per-process histograms and systematic variations.
#pragma once

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <tuple>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "fitlib/model/model.hpp"

namespace fitlib {

/// How an up/down pair becomes the tensor entries (rabbit-likelihood-and-format.md §1.4).
/// With ℓu = logk(up) and ℓd = −logk(down):
enum class Symmetrize {
  none,          ///< keep the asymmetry: K = (ℓu + ℓd)/2, H = (ℓu − ℓd)/2
  average,       ///< K = (ℓu + ℓd)/2, H = 0 (rabbit TensorWriter's default)
  conservative,  ///< K = whichever of ℓu, ℓd is larger in magnitude, H = 0
};

/// Options of a systematic (nuisance parameter).
struct SystematicOptions {
  bool constrained = true;  ///< unit-Gaussian constraint (rabbit); false = free nuisance
  double centre = 0.0;      ///< constraint centre θ₀ (rabbit's --setConstraintMinimum)
};

/// Builds a validated `Model` from histograms, one call per item. Names are checked when used;
/// variations are turned into tensor entries in `build()`, so the calls can come in any order.
/// Channels keep their order except that masked channels move behind the unmasked ones;
/// signal processes move in front of the backgrounds (rabbit's layout).
class ModelBuilder {
 public:
  explicit ModelBuilder(SystematicType type = SystematicType::log_normal) : type_(type) {}

  ModelBuilder& add_channel(std::string name, index_t nbins, bool masked = false) {
    if (nbins <= 0) throw model_error("channel '" + name + "' needs at least one bin, got " + std::to_string(nbins));
    if (find(channels_, name)) throw model_error("duplicate channel name '" + name + "'; channel names must be unique");
    channels_.push_back({std::move(name), nbins, masked});
    return *this;
  }

  /// `mu_default` is the signal strength at the default point (rabbit's --expectSignal).
  ModelBuilder& add_process(std::string name, bool signal = false, double mu_default = 1.0) {
    if (find(processes_, name)) throw model_error("duplicate process name '" + name + "'; process names must be unique");
    processes_.push_back({{std::move(name), signal}, mu_default});
    return *this;
  }

  ModelBuilder& add_systematic(std::string name, SystematicOptions opts = {}) {
    if (find(systematics_, name)) throw model_error("duplicate systematic name '" + name + "'; systematic names must be unique");
    systematics_.push_back({{std::move(name)}, opts});
    return *this;
  }

  ModelBuilder& set_nominal(const std::string& channel, const std::string& process, std::span<const double> yields) {
    return set_histogram(nominal_, "nominal histogram", channel, process, yields);
  }

  /// The variances of a template's Monte-Carlo sums (sumw2, rabbit's hsumw2), which drive the
  /// bin-by-bin statistics; templates without them are exact.
  ModelBuilder& set_variances(const std::string& channel, const std::string& process, std::span<const double> sumw2) {
    return set_histogram(variances_, "template variances", channel, process, sumw2);
  }

  ModelBuilder& set_data(const std::string& channel, std::span<const double> counts) {
    auto& ch = channel_ref(channel);
    if (ch.masked) throw model_error("channel '" + channel + "' is masked and has no data; drop the set_data call");
    require_length(counts, ch, "data histogram");
    data_[channel] = std::vector<double>(counts.begin(), counts.end());
    return *this;
  }

  /// Shape variation from full up and down histograms of the process.
  ModelBuilder& add_shape_variation(const std::string& syst, const std::string& channel, const std::string& process,
                                    std::span<const double> up, std::span<const double> down,
                                    Symmetrize symmetrize = Symmetrize::none) {
    auto& ch = channel_ref(channel);
    require_length(up, ch, "up variation of systematic '" + syst + "'");
    require_length(down, ch, "down variation of systematic '" + syst + "'");
    return add_variation(syst, channel, process,
                         {Variation::Kind::shape, {up.begin(), up.end()}, std::vector<double>(down.begin(), down.end()), symmetrize});
  }

  /// Shape variation from one histogram, mirrored (symmetric).
  ModelBuilder& add_shape_variation(const std::string& syst, const std::string& channel, const std::string& process,
                                    std::span<const double> varied) {
    auto& ch = channel_ref(channel);
    require_length(varied, ch, "variation of systematic '" + syst + "'");
    return add_variation(syst, channel, process, {Variation::Kind::shape, {varied.begin(), varied.end()}, std::nullopt, Symmetrize::none});
  }

  /// Normalisation variation by a factor κ (up: κ·N, mirrored).
  ModelBuilder& add_norm_variation(const std::string& syst, const std::string& channel, const std::string& process,
                                   double kappa) {
    channel_ref(channel);
    return add_variation(syst, channel, process, {Variation::Kind::norm, {kappa}, std::nullopt, Symmetrize::none});
  }

  /// Asymmetric normalisation variation: κ_up·N at θ = +1 and κ_down·N at θ = −1.
  ModelBuilder& add_norm_variation(const std::string& syst, const std::string& channel, const std::string& process,
                                   double kappa_up, double kappa_down, Symmetrize symmetrize = Symmetrize::none) {
    channel_ref(channel);
    return add_variation(syst, channel, process, {Variation::Kind::norm, {kappa_up}, std::vector<double>{kappa_down}, symmetrize});
  }

  /// Accept negative nominal yields instead of rejecting them.
  ModelBuilder& allow_negative_yields(bool allow = true) {
    allow_negative_ = allow;
    return *this;
  }

  /// Store the tensor as `[K, H]` even when every H is zero (symmetric ≡ asymmetric tests, uniform files).
  ModelBuilder& force_asymmetric(bool force = true) {
    force_asymmetric_ = force;
    return *this;
  }

  /// Assembles and validates the model; throws `model_error` naming the offending item.
  Model build() const;

 private:
  struct Variation {
    enum class Kind { shape, norm } kind;
    std::vector<double> up;                  // histogram, or {κ_up}
    std::optional<std::vector<double>> down; // histogram, or {κ_down}; empty = mirrored
    Symmetrize symmetrize;
  };
  struct ProcessEntry {
    Process process;
    double mu_default;
    const std::string& name() const { return process.name; }
  };
  struct SystEntry {
    Systematic syst;
    SystematicOptions opts;
    const std::string& name() const { return syst.name; }
  };
  using Key = std::pair<std::string, std::string>;  // (channel, process)

  template <class Vec>
  static auto find(Vec& items, const std::string& name) -> decltype(&items[0]) {
    for (auto& it : items) {
      if constexpr (requires { it.name(); }) {
        if (it.name() == name) return &it;
      } else if (it.name == name) {
        return &it;
      }
    }
    return nullptr;
  }
  const Channel& channel_ref(const std::string& name) const {
    if (auto* c = find(channels_, name)) return *c;
    throw model_error("unknown channel '" + name + "'; declare it with add_channel first");
  }
  const ProcessEntry& process_ref(const std::string& name) const {
    if (auto* p = find(processes_, name)) return *p;
    throw model_error("unknown process '" + name + "'; declare it with add_process first");
  }
  static void require_length(std::span<const double> h, const Channel& ch, const std::string& what) {
    if (static_cast<index_t>(h.size()) != ch.nbins)
      throw model_error(what + " in channel '" + ch.name + "' has " + std::to_string(h.size()) +
                        " bins but the channel has " + std::to_string(ch.nbins));
  }
  ModelBuilder& add_variation(const std::string& syst, const std::string& channel, const std::string& process,
                              Variation v) {
    if (!find(systematics_, syst)) throw model_error("unknown systematic '" + syst + "'; declare it with add_systematic first");
    process_ref(process);
    if (!variations_.emplace(std::tuple(syst, channel, process), std::move(v)).second)
      throw model_error("systematic '" + syst + "' is booked twice for process '" + process + "' in channel '" + channel + "'");
    return *this;
  }

  ModelBuilder& set_histogram(std::map<Key, std::vector<double>>& into, const char* what, const std::string& channel,
                              const std::string& process, std::span<const double> h) {
    auto& ch = channel_ref(channel);
    process_ref(process);
    require_length(h, ch, std::string(what) + " of process '" + process + "'");
    if (!into.emplace(std::pair(channel, process), std::vector<double>(h.begin(), h.end())).second)
      throw model_error(std::string(what) + " set twice for process '" + process + "' in channel '" + channel + "'; set it once");
    return *this;
  }

  SystematicType type_;
  std::vector<Channel> channels_;
  std::vector<ProcessEntry> processes_;
  std::vector<SystEntry> systematics_;
  std::map<Key, std::vector<double>> nominal_, variances_;
  std::map<std::string, std::vector<double>> data_;
  std::map<std::tuple<std::string, std::string, std::string>, Variation> variations_;
  bool allow_negative_ = false;
  bool force_asymmetric_ = false;
};

inline Model ModelBuilder::build() const {
  Model m;
  m.systematic_type = type_;
  m.allow_negative_yields = allow_negative_;
  for (const auto& c : channels_)
    if (!c.masked) m.channels.push_back(c);
  for (const auto& c : channels_)
    if (c.masked) m.channels.push_back(c);
  for (const auto& p : processes_)
    if (p.process.signal) {
      m.processes.push_back(p.process);
      m.poi_default.push_back(p.mu_default);
    }
  for (const auto& p : processes_)
    if (!p.process.signal) m.processes.push_back(p.process);
  for (const auto& s : systematics_) {
    m.systematics.push_back(s.syst);
    m.theta0.push_back(s.opts.centre);
    m.constraint_weights.push_back(s.opts.constrained ? 1.0 : 0.0);
  }
  for (const auto& c : m.channels) {
    if (c.masked) continue;
    auto it = data_.find(c.name);
    if (it == data_.end()) throw model_error("channel '" + c.name + "' has no data; call set_data for it");
    m.data.insert(m.data.end(), it->second.begin(), it->second.end());
  }

  const index_t np = m.nprocs(), ns = m.nsyst(), bf = m.nbins_full();
  std::vector<index_t> chan_start(m.channels.size());
  for (std::size_t c = 0, b = 0; c < m.channels.size(); b += static_cast<std::size_t>(m.channels[c].nbins), ++c)
    chan_start[c] = static_cast<index_t>(b);
  auto chan_index = [&](const std::string& name) {
    for (std::size_t c = 0; c < m.channels.size(); ++c)
      if (m.channels[c].name == name) return c;
    return m.channels.size();
  };
  auto proc_index = [&](const std::string& name) {
    for (index_t p = 0; p < np; ++p)
      if (m.processes[static_cast<std::size_t>(p)].name == name) return p;
    return np;
  };
  auto syst_index = [&](const std::string& name) {
    for (index_t s = 0; s < ns; ++s)
      if (m.systematics[static_cast<std::size_t>(s)].name == name) return s;
    return ns;
  };

  // Per-(channel, process) histograms into the [nbins_full × nprocs] layout, zero where absent.
  auto scatter = [&](const std::map<Key, std::vector<double>>& histograms, std::vector<double>& out) {
    out.assign(static_cast<std::size_t>(bf * np), 0.0);
    for (const auto& [key, h] : histograms) {
      const auto c = chan_index(key.first);
      const index_t p = proc_index(key.second);
      for (index_t i = 0; i < m.channels[c].nbins; ++i) out[static_cast<std::size_t>((chan_start[c] + i) * np + p)] = h[static_cast<std::size_t>(i)];
    }
  };
  DenseTemplates& tensor = *m.dense();
  scatter(nominal_, tensor.nominal);
  if (!variances_.empty()) scatter(variances_, m.sumw2);

  // ℓ = ln(V/N) (log-normal) or V − N (normal); rabbit maps a log-normal variation that
  // reaches zero or flips sign to ln(1e-3) (§1.4).
  const double logk_epsilon = std::log(1e-3);
  auto ell = [&](double v, double n) {
    if (type_ == SystematicType::normal) return v - n;
    return (n * v > 0) ? std::log(v / n) : logk_epsilon;
  };

  std::vector<double> K(static_cast<std::size_t>(bf * np * ns), 0.0), H(K.size(), 0.0);
  bool asymmetric = force_asymmetric_;
  for (const auto& [key, v] : variations_) {
    // Named references rather than structured bindings: clang 14 cannot capture those in lambdas.
    const std::string& syst = std::get<0>(key);
    const std::string& chan = std::get<1>(key);
    const std::string& proc = std::get<2>(key);
    const auto c = chan_index(chan);
    const index_t p = proc_index(proc), s = syst_index(syst);
    auto nom_it = nominal_.find({chan, proc});
    for (index_t i = 0; i < m.channels[c].nbins; ++i) {
      const index_t b = chan_start[c] + i;
      const double n = nom_it == nominal_.end() ? 0.0 : nom_it->second[static_cast<std::size_t>(i)];
      auto where = [&] { return "systematic '" + syst + "' for process '" + proc + "' in " + m.describe_bin(b); };
      double up, down = 0;
      if (v.kind == Variation::Kind::norm) {
        const double ku = v.up[0], kd = v.down ? (*v.down)[0] : 0.0;
        if (!std::isfinite(ku) || !std::isfinite(kd) || (type_ == SystematicType::log_normal && (ku <= 0 || (v.down && kd <= 0))))
          throw model_error("normalisation factor of systematic '" + syst + "' for process '" + proc +
                            "' must be finite" + (type_ == SystematicType::log_normal ? " and positive" : ""));
        up = ku * n;
        down = kd * n;
      } else {
        up = v.up[static_cast<std::size_t>(i)];
        down = v.down ? (*v.down)[static_cast<std::size_t>(i)] : 0.0;
        if (!std::isfinite(up) || !std::isfinite(down))
          throw model_error("variation histogram of " + where() + " is not finite; fix the input histogram");
      }
      if (n == 0) {
        if (nom_it == nominal_.end())
          throw model_error("systematic '" + syst + "' varies process '" + proc + "' in channel '" + chan +
                            "', which has no nominal histogram there; call set_nominal for it");
        if (up != 0 || (v.down && down != 0))
          throw model_error(where() + " is non-zero where the nominal yield is zero; a variation needs a non-zero nominal yield");
        continue;
      }
      const double lu = ell(up, n);
      double k = lu, h = 0;
      if (v.down) {
        const double ld = -ell(down, n);
        switch (v.symmetrize) {
          case Symmetrize::none: k = 0.5 * (lu + ld); h = 0.5 * (lu - ld); break;
          case Symmetrize::average: k = 0.5 * (lu + ld); break;
          case Symmetrize::conservative: k = std::abs(lu) > std::abs(ld) ? lu : ld; break;
        }
      }
      const auto at = static_cast<std::size_t>((b * np + p) * ns + s);
      K[at] = k;
      H[at] = h;
      asymmetric = asymmetric || h != 0;
    }
  }
  m.symmetric = !asymmetric;
  if (m.symmetric) {
    tensor.logk = std::move(K);
  } else {
    tensor.logk.assign(static_cast<std::size_t>(bf * np * 2 * ns), 0.0);
    for (index_t cell = 0; cell < bf * np; ++cell) {
      std::copy_n(K.begin() + cell * ns, ns, tensor.logk.begin() + cell * 2 * ns);
      std::copy_n(H.begin() + cell * ns, ns, tensor.logk.begin() + cell * 2 * ns + ns);
    }
  }
  m.validate();
  return m;
}

}  // namespace fitlib
