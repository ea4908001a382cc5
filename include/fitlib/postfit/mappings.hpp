// SPDX-License-Identifier: MIT
// Mappings of the histograms (rabbit's -m): functions of the yields whose uncertainties come from the same propagation.
#pragma once

#include <algorithm>
#include <concepts>
#include <cerrno>
#include <cstdlib>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "fitlib/core/error.hpp"
#include "fitlib/core/types.hpp"
#include "fitlib/model/model.hpp"
#include "fitlib/postfit/histograms.hpp"

namespace fitlib {

/// A mapping of the histograms (rabbit's -m): y = f(ν), a function of every bin's summed yield ν (`[Model::nbins_full]`,
/// masked channels included, in the model's bin order) with its forward derivative, so that `mapped_histograms`
/// propagates the covariance to its outputs as it does to the bins (∂y/∂x = ∂f/∂ν·J). `channels()` lays its outputs
/// out (names, bins and axes, for plots); `has_data()` says whether f of the data is a histogram to compare with (it
/// reads no masked bin), for the χ², whose ndf is the outputs less `ndf_reduction()` (1 for a normalised histogram,
/// whose bins sum to one). BinMapping models it for rabbit's Select, Project, Normalize and Ratio; a user's own
/// mapping is any type with these members.
template <class F>
concept yield_mapping = requires(const F& f, std::span<const double> nu, std::span<double> y, ConstBlockView<double> dnu, BlockView<double> dy) {
  { f.key() } -> std::convertible_to<std::string>;
  { f.channels() } -> std::convertible_to<std::vector<Channel>>;
  { f.size() } -> std::convertible_to<index_t>;
  { f.has_data() } -> std::convertible_to<bool>;
  { f.ndf_reduction() } -> std::convertible_to<index_t>;
  f.value(nu, y);        ///< y (`[size()]`) at ν
  f.forward(nu, dnu, dy);  ///< dy = ∂f/∂ν(ν)·dnu for each column of dnu (`[nbins_full × k]`) into dy (`[size() × k]`)
};

/// Every output a sum of bins, or a ratio of two sums: y_o = Σ_{b ∈ num_o} ν_b / Σ_{b ∈ den_o} ν_b (the denominator 1
/// where den_o is empty). rabbit's Select (a channel, some of its axes' bins chosen or summed), Project (a channel summed
/// over all axes but some, kept in the order given), Normalize (a projection divided by the channel's sum) and Ratio
/// (two selections of the same shape, bin by bin) are all of this form; built by the functions below, which check
/// every name and index against the model.
class BinMapping {
 public:
  BinMapping(std::string key, std::vector<Channel> channels, std::vector<std::vector<index_t>> num, std::vector<std::vector<index_t>> den,
             index_t ndata, index_t ndf_reduction)
      : key_(std::move(key)), channels_(std::move(channels)), num_(std::move(num)), den_(std::move(den)), ndf_reduction_(ndf_reduction) {
    has_data_ = true;
    for (const auto* sets : {&num_, &den_})
      for (const auto& s : *sets)
        for (index_t b : s) has_data_ = has_data_ && b < ndata;
  }

  const std::string& key() const { return key_; }
  const std::vector<Channel>& channels() const { return channels_; }
  index_t size() const { return static_cast<index_t>(num_.size()); }
  bool has_data() const { return has_data_; }
  index_t ndf_reduction() const { return ndf_reduction_; }

  void value(std::span<const double> nu, std::span<double> y) const {
    for (index_t o = 0; o < size(); ++o) y[static_cast<std::size_t>(o)] = sum(num(o), nu) / denominator(o, nu);
  }
  /// dy_o = (dN_o − y_o·dD_o)/D_o.
  void forward(std::span<const double> nu, ConstBlockView<double> dnu, BlockView<double> dy) const {
    for (index_t o = 0; o < size(); ++o) {
      const double d = denominator(o, nu), y = sum(num(o), nu) / d;
      for (index_t k = 0; k < dnu.cols; ++k) {
        double dn = 0, dd = 0;
        for (index_t b : num(o)) dn += dnu(b, k);
        for (index_t b : den(o)) dd += dnu(b, k);
        dy(o, k) = (dn - y * dd) / d;
      }
    }
  }

 private:
  const std::vector<index_t>& num(index_t o) const { return num_[static_cast<std::size_t>(o)]; }
  const std::vector<index_t>& den(index_t o) const { return den_.empty() ? empty_ : den_[static_cast<std::size_t>(o)]; }
  static double sum(const std::vector<index_t>& bins, std::span<const double> nu) {
    double s = 0;
    for (index_t b : bins) s += nu[static_cast<std::size_t>(b)];
    return s;
  }
  double denominator(index_t o, std::span<const double> nu) const { return den(o).empty() ? 1.0 : sum(den(o), nu); }

  std::string key_;
  std::vector<Channel> channels_;
  std::vector<std::vector<index_t>> num_, den_;
  index_t ndf_reduction_ = 0;
  bool has_data_ = true;
  std::vector<index_t> empty_;
};

namespace detail {

/// An Integer axis of `n` bins, 0 … n.
inline Axis integer_axis(const std::string& name, index_t n) {
  Axis a;
  a.name = name;
  for (index_t e = 0; e <= n; ++e) a.edges.push_back(static_cast<double>(e));
  return a;
}

/// A channel's bins grouped by a reduction: kept axes (in their order in `keep`) and, per axis, the chosen bins (an
/// axis summed over keeps all its bins, an axis cut to one index or a range keeps those). `groups[o]` lists the model's
/// bins that add up to output o, outputs row-major over the kept axes.
struct Reduction {
  Channel out;
  std::vector<std::vector<index_t>> groups;
};

/// The channel named `name` of `m` and its first bin; a usage_error naming the channels otherwise.
inline std::pair<const Channel*, index_t> find_channel(const Model& m, const std::string& name, const std::string& what) {
  index_t start = 0;
  std::string names;
  for (const Channel& c : m.channels) {
    if (c.name == name) {
      if (c.axes.empty()) throw usage_error(what + ": channel '" + name + "' has no axes in the tensor (no meta to read them from)");
      return {&c, start};
    }
    start += c.nbins;
    names += (names.empty() ? "'" : ", '") + c.name + "'";
  }
  throw usage_error(what + ": no channel '" + name + "' in the tensor; its channels are " + names);
}

/// The index of axis `name` of channel c; a usage_error naming its axes otherwise.
inline index_t find_axis(const Channel& c, const std::string& name, const std::string& what) {
  std::string names;
  for (std::size_t k = 0; k < c.axes.size(); ++k) {
    if (c.axes[k].name == name) return static_cast<index_t>(k);
    names += (names.empty() ? "'" : ", '") + c.axes[k].name + "'";
  }
  throw usage_error(what + ": channel '" + c.name + "' has no axis '" + name + "'; its axes are " + names);
}

/// Reduces channel c (first bin `start`): the axes `keep` stay (in that order), each axis keeps the bins [lo, hi) of
/// `range` (all by default, in the channel's bin numbering, flow bins included when the channel has them), and the
/// others are summed over.
inline Reduction reduce(const Channel& c, index_t start, const std::vector<index_t>& keep, std::vector<std::pair<index_t, index_t>> range) {
  const std::vector<index_t> shape = c.shape();
  const auto nax = static_cast<index_t>(shape.size());
  if (range.empty())
    for (index_t k = 0; k < nax; ++k) range.push_back({0, shape[static_cast<std::size_t>(k)]});
  Reduction r;
  r.out = {c.name, 1, c.masked, {}, c.flow};
  std::vector<index_t> out_shape;
  for (index_t k : keep) {
    const auto [lo, hi] = range[static_cast<std::size_t>(k)];
    Axis a = c.axes[static_cast<std::size_t>(k)];
    const index_t first = c.flow && a.underflow ? 1 : 0;  // the axis's bin numbering inside its range
    if (lo != 0 || hi != shape[static_cast<std::size_t>(k)]) {  // a cut: the axis keeps the chosen bins, no flow
      if (lo < first || hi > first + a.size())
        throw usage_error("selecting the bins [" + std::to_string(lo - first) + ", " + std::to_string(hi - first) + ") of axis '" + a.name +
                          "' of channel '" + c.name + "' reaches into its flow bins");
      if (a.categories.empty())
        a.edges = std::vector<double>(a.edges.begin() + (lo - first), a.edges.begin() + (hi - first) + 1);
      else
        a.categories = std::vector<std::string>(a.categories.begin() + (lo - first), a.categories.begin() + (hi - first));
      if (c.flow) a.underflow = a.overflow = false;
    }
    r.out.axes.push_back(std::move(a));
    out_shape.push_back(hi - lo);
  }
  index_t nout = 1;
  for (index_t s : out_shape) nout *= s;
  r.out.nbins = nout;  // (a cut axis has lost its flow flags, so the channel's flow flag still gives its shape)
  r.groups.assign(static_cast<std::size_t>(nout), {});
  std::vector<index_t> idx(static_cast<std::size_t>(nax), 0);
  for (index_t b = 0; b < c.nbins; ++b) {
    // idx: b's multi-index, the last axis fastest
    index_t rest = b;
    for (index_t k = nax - 1; k >= 0; --k) {
      idx[static_cast<std::size_t>(k)] = rest % shape[static_cast<std::size_t>(k)];
      rest /= shape[static_cast<std::size_t>(k)];
    }
    bool inside = true;
    for (index_t k = 0; k < nax; ++k) {
      const auto [lo, hi] = range[static_cast<std::size_t>(k)];
      inside = inside && idx[static_cast<std::size_t>(k)] >= lo && idx[static_cast<std::size_t>(k)] < hi;
    }
    if (!inside) continue;
    index_t o = 0;
    for (std::size_t j = 0; j < keep.size(); ++j) {
      const index_t k = keep[j];
      o = o * out_shape[j] + (idx[static_cast<std::size_t>(k)] - range[static_cast<std::size_t>(k)].first);
    }
    r.groups[static_cast<std::size_t>(o)].push_back(start + b);
  }
  return r;
}

/// rabbit's axis selections, "axis:sel,axis:sel,…" with sel an index i (that bin, the axis summed away), slice(a,b)
/// (bins a … b−1, kept), sum (the axis summed over) or None (kept whole); "None:None" selects nothing. Applied to
/// channel c (first bin `start`).
inline Reduction select(const Channel& c, index_t start, const std::string& selection, const std::string& what) {
  const std::vector<index_t> shape = c.shape();
  std::vector<std::pair<index_t, index_t>> range;
  for (index_t s : shape) range.push_back({0, s});
  std::set<index_t> summed, seen;
  if (selection != "None:None" && !selection.empty()) {
    std::size_t at = 0;
    while (at < selection.size()) {
      // split at commas outside parentheses
      std::size_t end = at;
      for (int depth = 0; end < selection.size() && (depth > 0 || selection[end] != ','); ++end) depth += selection[end] == '(' ? 1 : selection[end] == ')' ? -1 : 0;
      const std::string item = selection.substr(at, end - at);
      if (end + 1 == selection.size()) throw usage_error(what + ": the axis selections '" + selection + "' end in a comma");
      at = end + 1;
      if (item.empty()) throw usage_error(what + ": the axis selections '" + selection + "' have an empty entry");
      const std::size_t colon = item.find(':');
      if (colon == std::string::npos) throw usage_error(what + ": the axis selection '" + item + "' is not axis:selection");
      const index_t k = find_axis(c, item.substr(0, colon), what);
      const std::string sel = item.substr(colon + 1);
      const index_t first = c.flow && c.axes[static_cast<std::size_t>(k)].underflow ? 1 : 0, size = c.axes[static_cast<std::size_t>(k)].size();
      if (sel.rfind("rebin(", 0) == 0 || sel.find('j') != std::string::npos)
        throw usage_error(what + ": '" + item + "': rebinning and value (complex) indices are not supported; select bins by index");
      if (!seen.insert(k).second) throw usage_error(what + ": axis '" + c.axes[static_cast<std::size_t>(k)].name + "' is selected twice");
      const auto integer = [&](const std::string& s) {  // an index within the axis, or a usage_error
        char* stop = nullptr;
        errno = 0;
        const long long v = std::strtoll(s.c_str(), &stop, 10);
        if (s.empty() || *stop != '\0' || errno == ERANGE || v < 0 || v > size)
          throw usage_error(what + ": '" + s + "' in the axis selection '" + item + "' is not an index of axis '" +
                            c.axes[static_cast<std::size_t>(k)].name + "' (0 … " + std::to_string(size) + ")");
        return static_cast<index_t>(v);
      };
      auto& [lo, hi] = range[static_cast<std::size_t>(k)];
      if (sel == "sum") {
        summed.insert(k);
      } else if (sel == "None") {
      } else if (sel.rfind("slice(", 0) == 0 && sel.back() == ')') {
        const std::string args = sel.substr(6, sel.size() - 7);
        const std::size_t comma = args.find(',');
        if (comma == std::string::npos || args.find(',', comma + 1) != std::string::npos)
          throw usage_error(what + ": '" + sel + "' is not slice(a,b) (steps, rebinning and complex indices are not supported)");
        const std::string a = args.substr(0, comma), b = args.substr(comma + 1);
        lo = first + (a == "None" ? 0 : integer(a));
        hi = first + (b == "None" ? size : integer(b));
      } else {
        lo = first + integer(sel);
        hi = lo + 1;
        summed.insert(k);
      }
      if (lo < first || hi > first + size || lo >= hi)
        throw usage_error(what + ": the selection '" + item + "' is outside axis '" + c.axes[static_cast<std::size_t>(k)].name + "', of " +
                          std::to_string(size) + " bins");
    }
  }
  std::vector<index_t> keep;
  for (index_t k = 0; k < static_cast<index_t>(shape.size()); ++k)
    if (!summed.count(k)) keep.push_back(k);
  return reduce(c, start, keep, range);
}

inline std::string join_key(const std::string& kind, const std::vector<std::string>& args) {
  std::string key = kind;
  for (const std::string& a : args) key += " " + a;
  return key;
}

}  // namespace detail

/// rabbit's `-m Select CHANNEL [AXIS:SEL,…]`: the channel, its axes' bins chosen (an index, slice(a,b)) or summed
/// (sum, or a single index). Selecting processes is not supported (a usage_error). Its key, as rabbit's, leaves the
/// channel out.
inline BinMapping select_mapping(const Model& m, const std::vector<std::string>& args) {
  const std::string what = "-m Select";
  if (args.size() > 1 && args[1].find(':') == std::string::npos)
    throw usage_error(what + ": selecting processes ('" + args[1] + "') is not supported; the histograms sum every process");
  if (args.empty() || args.size() > 2) throw usage_error(what + " takes a channel and optionally its axis selections, axis:sel,…");
  const auto [c, start] = detail::find_channel(m, args[0], what);
  detail::Reduction r = detail::select(*c, start, args.size() == 2 ? args[1] : "None:None", what);
  // rabbit's key leaves the channel out ("Select obs:slice(0,10)")
  return BinMapping(detail::join_key("Select", {args.begin() + 1, args.end()}), {r.out}, std::move(r.groups), {}, m.nbins(), 0);
}

/// rabbit's `-m Project CHANNEL [AXIS …]` (the channel summed over every other axis, the axes in the order given; no
/// axis: one bin) and `-m Normalize CHANNEL [AXIS …]` (that divided by the channel's sum).
inline BinMapping project_mapping(const Model& m, const std::vector<std::string>& args, bool normalize) {
  const std::string what = normalize ? "-m Normalize" : "-m Project";
  if (args.empty()) throw usage_error(what + " takes a channel and the axes to keep");
  const auto [c, start] = detail::find_channel(m, args[0], what);
  std::vector<index_t> keep;
  for (std::size_t k = 1; k < args.size(); ++k) {
    const index_t a = detail::find_axis(*c, args[k], what);
    if (std::find(keep.begin(), keep.end(), a) != keep.end()) throw usage_error(what + ": axis '" + args[k] + "' is named twice");
    keep.push_back(a);
  }
  detail::Reduction r = detail::reduce(*c, start, keep, {});
  if (keep.empty()) r.out.axes = {detail::integer_axis("yield", 1)};  // rabbit's axis of a total
  std::vector<std::vector<index_t>> den;
  if (normalize) {
    std::vector<index_t> all(static_cast<std::size_t>(c->nbins));
    for (index_t b = 0; b < c->nbins; ++b) all[static_cast<std::size_t>(b)] = start + b;
    den.assign(r.groups.size(), all);
  }
  return BinMapping(detail::join_key(normalize ? "Normalize" : "Project", args), {r.out}, std::move(r.groups), std::move(den), m.nbins(),
                    normalize ? 1 : 0);
}

/// rabbit's `-m Ratio NUM DEN [NUMSEL DENSEL]`: channel NUM over channel DEN bin by bin, each optionally with axis
/// selections (as Select's; "None:None" for none), which must leave the same number of bins along each axis.
inline BinMapping ratio_mapping(const Model& m, const std::vector<std::string>& args) {
  const std::string what = "-m Ratio";
  if (args.size() != 2 && args.size() != 4)
    throw usage_error(what + " takes two channels and optionally an axis selection for each (selecting processes is not supported)");
  if (args.size() == 4 && (args[2].find(':') == std::string::npos || args[3].find(':') == std::string::npos))
    throw usage_error(what + ": selecting processes is not supported; give axis selections axis:sel,… (None:None for none)");
  const auto [cn, sn] = detail::find_channel(m, args[0], what);
  const auto [cd, sd] = detail::find_channel(m, args[1], what);
  detail::Reduction num = detail::select(*cn, sn, args.size() == 4 ? args[2] : "None:None", what);
  detail::Reduction den = detail::select(*cd, sd, args.size() == 4 ? args[3] : "None:None", what);
  const auto shape_text = [](const std::vector<index_t>& shape) {
    std::string t = "[";
    for (std::size_t k = 0; k < shape.size(); ++k) t += (k ? ", " : "") + std::to_string(shape[k]);
    return t + "]";
  };
  if (num.out.shape() != den.out.shape())
    throw usage_error(what + ": the numerator's selection has the shape " + shape_text(num.out.shape()) + ", the denominator's " +
                      shape_text(den.out.shape()) + "; select or sum axes (axis:sum) until they agree");
  Channel out = num.out;
  if (cn != cd) {
    out.name = cn->name + "_" + cd->name;
    out.flow = false;
  }
  const auto same = [](const Axis& a, const Axis& b) {
    return a.kind == b.kind && a.name == b.name && a.edges == b.edges && a.categories == b.categories && a.underflow == b.underflow &&
           a.overflow == b.overflow;
  };
  bool equal = true;
  for (std::size_t k = 0; k < out.axes.size(); ++k) equal = equal && same(num.out.axes[k], den.out.axes[k]);
  if (!equal) {  // rabbit's: IntCategory axes a0, a1, … of the same lengths, no flow
    const std::vector<index_t> shape = num.out.shape();
    for (std::size_t k = 0; k < out.axes.size(); ++k) {
      Axis a;
      a.kind = Axis::Kind::int_category;
      a.name = "a" + std::to_string(k);
      for (index_t e = 0; e < shape[k]; ++e) a.categories.push_back(std::to_string(e));
      out.axes[k] = std::move(a);
    }
    out.flow = false;
  }
  return BinMapping(detail::join_key("Ratio", args), {out}, std::move(num.groups), std::move(den.groups), m.nbins(), 0);
}

/// A mapping from rabbit's command line, `-m KIND ARG…`: Select, Project, Normalize or Ratio (a usage_error names the
/// others rabbit has).
inline BinMapping parse_mapping(const Model& m, const std::vector<std::string>& words) {
  if (words.empty()) throw usage_error("-m needs a mapping: Select, Project, Normalize or Ratio, and its arguments");
  const std::vector<std::string> args(words.begin() + 1, words.end());
  if (words[0] == "Select") return select_mapping(m, args);
  if (words[0] == "Project") return project_mapping(m, args, false);
  if (words[0] == "Normalize") return project_mapping(m, args, true);
  if (words[0] == "Ratio") return ratio_mapping(m, args);
  throw usage_error("-m " + words[0] + ": fitlib has the mappings Select, Project, Normalize and Ratio (rabbit's BaseMapping is the "
                    "histograms themselves; Difference, Normratio, Asymmetry and the angular coefficients are not supported)");
}

static_assert(yield_mapping<BinMapping>);

/// A mapping's prefit and postfit histograms (rabbit's results under the mapping's key), as `histograms` gives the bins':
/// y = f(ν) of the summed yields (β̂ applied postfit), their variances and, with HistogramOptions::covariance, their
/// covariance over all outputs, `[size × size]` row-major: ∂f/∂ν·(J·C·Jᵀ + diag(β's own))·∂f/∂νᵀ, the bins' covariance
/// mapped, computed as J_y = ∂f/∂ν·J by f's forward derivative along the parameters (one column each) and along each
/// bin's β part. With f.has_data(): f of the data and its variance (∂f/∂n·V·∂f/∂nᵀ, V as for the χ²), and the linear
/// χ² prefit and postfit, rᵀ·S⁻¹·r with r = f(ν) − f(n) and S the mapped residual covariance (a pseudo-inverse where
/// the mapping removes degrees of freedom, ndf = size − ndf_reduction, as rabbit); postfit not with bin-by-bin
/// statistics yet, as for the histograms.
struct MappedHistograms {
  std::string key;
  std::vector<Channel> channels;
  index_t size = 0;
  std::vector<double> data, data_variance;  ///< empty unless has_data
  std::vector<double> prefit, prefit_variance, prefit_covariance;
  std::vector<double> postfit, postfit_variance, postfit_covariance;
  std::optional<LinearChi2> prefit_chi2, postfit_chi2;  ///< with data and HistogramOptions::chi2
  std::string postfit_chi2_note;  ///< why the postfit χ² is NaN, when it is for a reason other than S
};

namespace detail {

/// F·X for f's Jacobian F at ν and the columns of X (`[rows × k]`, rows the first bins of the model, the others zero):
/// `[f.size() × k]`, 256 columns at a time.
template <yield_mapping F>
Eigen::MatrixXd map_columns(const F& f, std::span<const double> nu, const Eigen::MatrixXd& X) {
  const auto bf = static_cast<index_t>(nu.size());
  const index_t k = X.cols(), chunk = 256;
  Eigen::MatrixXd out(f.size(), k), pad = Eigen::MatrixXd::Zero(bf, std::min(k, chunk));
  for (index_t j0 = 0; j0 < k; j0 += chunk) {
    const index_t w = std::min(chunk, k - j0);
    pad.topLeftCorner(X.rows(), w) = X.middleCols(j0, w);
    Eigen::MatrixXd dy(f.size(), w);
    f.forward(nu, ConstBlockView<double>(pad.data(), bf, w), BlockView<double>(dy.data(), f.size(), w));
    out.middleCols(j0, w) = dy;
  }
  return out;
}

/// Y·Yᵀ for Y = Σ_k F(ν_k)·diag(s_k), F(ν) f's forward derivative at ν, over the `terms` (ν_k, s_k) (each s_k over the
/// first bins, the others 0): the mapped covariance of independent bins that enter through f at more than one point.
template <yield_mapping F>
Eigen::MatrixXd map_gram(const F& f, const std::vector<std::pair<std::span<const double>, Eigen::VectorXd>>& terms) {
  Eigen::MatrixXd sum = Eigen::MatrixXd::Zero(f.size(), f.size());
  const index_t nd = terms.front().second.size(), chunk = 256;
  for (index_t b0 = 0; b0 < nd; b0 += chunk) {
    const index_t w = std::min(chunk, nd - b0);
    Eigen::MatrixXd y = Eigen::MatrixXd::Zero(f.size(), w);
    for (const auto& [nu, s] : terms) {
      Eigen::MatrixXd X = Eigen::MatrixXd::Zero(b0 + w, w);
      for (index_t j = 0; j < w; ++j) X(b0 + j, j) = s(b0 + j);
      y += map_columns(f, nu, X);
    }
    sum.noalias() += y * y.transpose();
  }
  return sum;
}

/// F·diag(d)·Fᵀ (`d` over the first bins, the others 0): the mapped covariance of independent bins.
template <yield_mapping F>
Eigen::MatrixXd map_diagonal(const F& f, std::span<const double> nu, const Eigen::VectorXd& d) {
  return map_gram(f, {{nu, d.cwiseMax(0.0).cwiseSqrt()}});
}

/// The whole Jacobian of the summed yields at x (`[nbins_full × n]`) and β's own variance per bin (its data part with
/// `profiled`, its prior from `first_prior` on).
template <class Lik>
std::pair<Eigen::MatrixXd, Eigen::VectorXd> full_jacobian(Lik& lik, std::span<const double> x, bool profiled, const BinByBinStats& st,
                                                          const std::vector<double>& nu, index_t first_prior) {
  const Model& m = lik.model();
  const index_t n = lik.size(), bf = m.nbins_full();
  Eigen::MatrixXd J(bf, n);
  Eigen::VectorXd own(bf);
  for_jacobian_blocks(lik, x, profiled, jacobian_blocks(m, n), [&](const BinRange& blk, const auto& Jb, const std::vector<double>& bvar) {
    J.middleRows(blk.begin, blk.size()) = Jb;
    for (index_t b = blk.begin; b < blk.end; ++b)
      own(b) = bvar[static_cast<std::size_t>(b - blk.begin)] + (b >= first_prior ? prior_beta_variance(st, nu, b) : 0.0);
  });
  return {std::move(J), std::move(own)};
}

inline std::vector<double> diagonal_of(const Eigen::MatrixXd& c) {
  std::vector<double> d(static_cast<std::size_t>(c.rows()));
  for (index_t i = 0; i < c.rows(); ++i) d[static_cast<std::size_t>(i)] = c(i, i);
  return d;
}

inline std::vector<double> row_major(const Eigen::MatrixXd& c) {
  std::vector<double> v(static_cast<std::size_t>(c.size()));
  Eigen::Map<Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>(v.data(), c.rows(), c.cols()) = c;
  return v;
}

}  // namespace detail

/// The histograms of mapping f (see MappedHistograms) of `lik` and its fit `r` (as `histograms` needs them).
template <class Lik, yield_mapping F>
MappedHistograms mapped_histograms(Lik& lik, const FitResult& r, const F& f, const HistogramOptions& opts = {}) {
  const Model& m = lik.model();
  const index_t n = lik.size(), bf = m.nbins_full(), nb = m.nbins(), np = m.nprocs(), ny = f.size();
  require_histograms(lik);
  if (static_cast<index_t>(r.x.size()) != n || r.covariance_status == CovarianceStatus::not_computed || static_cast<index_t>(r.hessian.size()) != n * n)
    throw usage_error("mapped histograms need the fit of this likelihood with its covariance (" + std::to_string(n) + " parameters, FitOptions::covariance)");
  MappedHistograms h;
  h.key = f.key();
  h.channels = f.channels();
  h.size = ny;
  const BinByBinStats st = BinByBinStats::build(m, {0, bf}, lik.options().bin_by_bin, lik.options().data_term);
  const auto value = [&](const std::vector<double>& nu) {
    std::vector<double> y(static_cast<std::size_t>(ny));
    f.value(nu, y);
    return y;
  };
  const bool data = f.has_data() && opts.chi2;
  // The data: f(n), its covariance F_n·V·F_nᵀ (V as the χ²'s: the counts for Poisson, the variances, or dense).
  std::vector<double> counts(static_cast<std::size_t>(bf), 0.0);
  std::copy(lik.data().begin(), lik.data().end(), counts.begin());
  Eigen::MatrixXd data_cov;
  if (f.has_data()) {
    h.data = value(counts);
    const detail::ResidualCovariance dv = detail::data_covariance(lik);
    data_cov = dv.dense.size() != 0 ? Eigen::MatrixXd(detail::map_columns(f, counts, Eigen::MatrixXd(dv.dense.llt().matrixL()))) : detail::map_diagonal(f, counts, dv.v);
    if (dv.dense.size() != 0) data_cov = data_cov * data_cov.transpose();
    h.data_variance = detail::diagonal_of(data_cov);
  }
  const auto chi2 = [&](const std::vector<double>& y, const Eigen::MatrixXd& S) {
    Eigen::VectorXd res(ny);
    for (index_t o = 0; o < ny; ++o) res(o) = y[static_cast<std::size_t>(o)] - h.data[static_cast<std::size_t>(o)];
    return detail::dense_chi2(res, S, f.ndf_reduction());
  };

  // Prefit: C₀ = diag(1/w) of the constrained nuisances, β at β₀ with its prior.
  const std::vector<double> x0 = lik.default_parameters(), nu0 = lik.yields(x0);
  const std::vector<double> total0 = detail::process_sums(detail::with_beta(st, nu0, {}, nb), bf, np);
  h.prefit = value(total0);
  {
    const auto [J, own] = detail::full_jacobian(lik, x0, false, st, nu0, 0);
    const Eigen::VectorXd c0 = detail::prior_variances(m);
    const Eigen::MatrixXd Jy = detail::map_columns(f, total0, J) * c0.cwiseSqrt().asDiagonal();
    const Eigen::MatrixXd cov = Jy * Jy.transpose() + detail::map_diagonal(f, total0, own);
    h.prefit_variance = detail::diagonal_of(cov);
    if (opts.covariance) h.prefit_covariance = detail::row_major(cov);
    if (data) h.prefit_chi2 = chi2(h.prefit, data_cov + cov);
  }

  // Postfit, with the fit's covariance on the free parameters (H = R·Rᵀ, as `histograms`).
  const std::vector<double> beta_hat = lik.bin_by_bin_parameters(r.x), nu = lik.yields(r.x);
  const std::vector<double> total = detail::process_sums(detail::with_beta(st, nu, beta_hat, nb), bf, np);
  h.postfit = value(total);
  const detail::FreeHessian fh(r);
  const std::vector<index_t>& free = fh.free;
  const auto nf = static_cast<index_t>(free.size());
  const Eigen::LLT<Eigen::MatrixXd>& llt = fh.llt;
  if (!fh.usable) {
    constexpr double nan = std::numeric_limits<double>::quiet_NaN();
    h.postfit_variance.assign(static_cast<std::size_t>(ny), nan);
    if (opts.covariance) h.postfit_covariance.assign(static_cast<std::size_t>(ny * ny), nan);
    if (data) {
      h.postfit_chi2 = LinearChi2{.ndf = ny - f.ndf_reduction()};
      h.postfit_chi2_note = "the fit's covariance is not usable (" + std::string(to_string(r.covariance_status)) + ")";
    }
    return h;
  }
  const auto [J, own] = detail::full_jacobian(lik, r.x, true, st, nu, nb);
  Eigen::MatrixXd Jf(bf, nf);
  for (index_t k = 0; k < nf; ++k) Jf.col(k) = J.col(free[static_cast<std::size_t>(k)]);
  Eigen::MatrixXd y = detail::map_columns(f, total, Jf).transpose();  // R⁻¹·J_yᵀ
  llt.matrixL().solveInPlace(y);
  const Eigen::MatrixXd cov = y.transpose() * y + detail::map_diagonal(f, total, own);
  h.postfit_variance = detail::diagonal_of(cov);
  if (opts.covariance) h.postfit_covariance = detail::row_major(cov);
  if (!data) return h;
  // S = F_n·V·F_nᵀ + U·M·Uᵀ with the bins' U = [J·C, E·J] mapped: [F_ν·J·C, F_n·E·J] (histograms.hpp, postfit_residual_covariance).
  // With bin-by-bin statistics n moves ν̃ through β as well, by −diag(a·bvar)·dn, so F_n·diag(√v) and F_n·E·J gain
  // F_ν·diag(a·bvar) times the same, and β₀'s shares (X's Zr, V's hᵀ·Λ·h) are mapped by F_ν (beta_share).
  const Eigen::MatrixXd Jd = J.topRows(nb);
  const auto beta = st.enabled ? std::optional(detail::beta_share(lik, r.x, Jd, free, st, nu, beta_hat, total)) : std::nullopt;
  const detail::ResidualCovariance s = detail::postfit_residual_covariance(lik, Jd, free, llt, total, beta ? &*beta : nullptr);
  Eigen::MatrixXd U(ny, 2 * nf);
  U.leftCols(nf) = detail::map_columns(f, total, s.J) * s.blocks[0].T;
  if (!beta) {
    U.rightCols(nf) = detail::map_columns(f, counts, s.blocks[1].d.asDiagonal() * s.J);
    h.postfit_chi2 = chi2(h.postfit, data_cov + U * s.m * U.transpose());
    return h;
  }
  const Eigen::VectorXd v = detail::data_covariance(lik).v, a = detail::data_cross(lik, total, v);
  Eigen::VectorXd e(nb), sv = v.cwiseSqrt();
  for (index_t b = 0; b < nb; ++b) e(b) = v(b) == 0 ? 0.0 : a(b) * v(b);
  U.rightCols(nf) = detail::map_columns(f, counts, e.asDiagonal() * s.J) +
                    detail::map_columns(f, total, Eigen::MatrixXd(beta->ba.cwiseProduct(e).asDiagonal() * s.J + beta->zr));
  const Eigen::MatrixXd D = detail::map_gram(f, {{counts, sv}, {total, beta->ba.cwiseProduct(sv)}}) + detail::map_diagonal(f, total, beta->own);
  h.postfit_chi2 = chi2(h.postfit, D + U * s.m * U.transpose());
  return h;
}

}  // namespace fitlib
