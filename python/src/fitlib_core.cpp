// SPDX-License-Identifier: MIT
// fitlib._core, the Python extension (nanobind): rabbit tensors in, fits and their histograms out as numpy arrays.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/filesystem.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "fitlib/device/cores.hpp"
#include "fitlib/io/rabbit.hpp"
#include "fitlib/io/results.hpp"
#include "fitlib/version.hpp"
#include "runs.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace fitlib::python {

namespace {

/// A tensor read by read_rabbit: the model, shared with the fits and with the arrays that view it, and what else the
/// file says that a fit needs.
struct PyModel {
  std::shared_ptr<const Model> model;
  std::string path, sha256;
  std::string channels_skipped;  ///< io::RabbitTensor::channels_skipped
  std::string meta_skipped;      ///< io::RabbitTensor::meta_skipped
  bool beta_variations = false;  ///< the tensor has hbetavariations, which fitlib does not apply yet
};

/// A fit, immutable and shared with the arrays that view it.
struct PyFitResult {
  std::shared_ptr<const FitOutcome> outcome;
};

/// fitlib's exception classes as Python sees them (created with the module, which keeps them alive).
struct PythonErrors {
  PyObject* base = nullptr;
  PyObject* model = nullptr;
  PyObject* usage = nullptr;
  PyObject* file = nullptr;
};
PythonErrors errors;

/// HDF5's serial build runs one call at a time, and a read releases the GIL: two Python threads may read at once.
std::mutex hdf5_mutex;

/// The value a string keyword names, or a usage_error listing the choices.
template <class E>
E choose(const char* keyword, const std::string& value, std::initializer_list<std::pair<const char*, E>> choices) {
  std::string allowed;
  for (const auto& [name, e] : choices) {
    if (value == name) return e;
    allowed += (allowed.empty() ? "'" : ", '") + std::string(name) + "'";
  }
  throw usage_error(std::string(keyword) + "='" + value + "' is not one of " + allowed);
}

/// The systematic type the keyword systematic_type names.
SystematicType systematic_type_named(const std::string& value) {
  return choose<SystematicType>("systematic_type", value, {{"log_normal", SystematicType::log_normal}, {"normal", SystematicType::normal}});
}

/// A read-only numpy array over values that `owner` keeps alive (the model, a fit, histograms), without a copy.
/// `strides` in elements, as `shape`; none: row-major. Returned as a Python object: nanobind refuses to return an
/// ndarray that has an owner under a property's reference_internal policy.
template <class T, class Owner>
nb::object view(std::shared_ptr<Owner> owner, const T* data, std::initializer_list<std::size_t> shape,
                std::initializer_list<std::int64_t> strides = {}) {
  static const T no_values{};  // an array of no values still needs an address
  auto* keep = new std::shared_ptr<Owner>(std::move(owner));
  const nb::capsule capsule(keep, [](void* p) noexcept { delete static_cast<std::shared_ptr<Owner>*>(p); });
  return nb::ndarray<nb::numpy, const T>(data != nullptr ? data : &no_values, shape, capsule, strides).cast();
}

/// A read-only numpy array that owns `values`.
template <class T>
nb::object owning(std::vector<T> values, std::initializer_list<std::size_t> shape) {
  auto keep = std::make_shared<const std::vector<T>>(std::move(values));
  const T* data = keep->data();
  return view(std::move(keep), data, shape);
}

/// A read-only numpy bool array of `values` (std::vector<bool> has no contiguous storage to view).
nb::object bools(const std::vector<bool>& values) {
  std::shared_ptr<bool[]> keep(new bool[values.size() + 1]());
  for (std::size_t i = 0; i < values.size(); ++i) keep[i] = values[i];
  bool* data = keep.get();
  return view(std::move(keep), static_cast<const bool*>(data), {values.size()});
}

/// An `[n × n]` column-major matrix over the fit's parameters (FitResult::covariance, hessian) as numpy's [i, j],
/// or None where the fit has none (FitOptions::covariance off).
nb::object matrix(const std::shared_ptr<const FitOutcome>& o, const std::vector<double>& m) {
  const std::size_t n = o->result.x.size();
  if (m.size() != n * n) return nb::none();
  return view(o, m.data(), {n, n}, {std::int64_t{1}, static_cast<std::int64_t>(n)});
}

PyModel py_read_rabbit(const std::filesystem::path& path, bool allow_negative_yields, const std::optional<std::string>& systematic_type) {
  io::RabbitReadOptions ro;
  ro.allow_negative_yields = allow_negative_yields;
  if (systematic_type)
    ro.systematic_type = systematic_type_named(*systematic_type);
  io::RabbitTensor t = [&] {
    const nb::gil_scoped_release released;
    const std::lock_guard lock(hdf5_mutex);
    return io::read_rabbit(path.string(), ro);
  }();
  PyModel m;
  m.path = std::move(t.path);
  m.sha256 = std::move(t.sha256);
  m.channels_skipped = std::move(t.channels_skipped);
  m.meta_skipped = std::move(t.meta_skipped);
  m.beta_variations = !t.beta_variations.empty();
  m.model = std::make_shared<const Model>(std::move(t.model));
  return m;
}

/// `m` with the channels `channels` (fitlib/_meta.py: the tensor's channel_info read by Python's pickle where fitlib's
/// reader cannot decode it): each a dict of name, masked, flow and axes (dicts of Axis's fields, kind by hist's class
/// name). They must cover the model's bins, the unmasked ones first, as the tensor orders them.
PyModel py_with_channels(const PyModel& m, const nb::list& channels) {
  const auto field = [](const nb::handle& d, const char* key) { return nb::object(d[key]); };
  std::vector<Channel> out;
  for (const nb::handle c : channels) {
    Channel ch{.name = nb::cast<std::string>(field(c, "name")), .nbins = 0, .masked = nb::cast<bool>(field(c, "masked"))};
    ch.flow = nb::cast<bool>(field(c, "flow"));
    for (const nb::handle a : nb::cast<nb::list>(field(c, "axes"))) {
      Axis ax;
      ax.kind = choose<Axis::Kind>("axis kind", nb::cast<std::string>(field(a, "kind")),
                                   {{"Regular", Axis::Kind::regular},
                                    {"Variable", Axis::Kind::variable},
                                    {"Integer", Axis::Kind::integer},
                                    {"Boolean", Axis::Kind::boolean},
                                    {"StrCategory", Axis::Kind::str_category},
                                    {"IntCategory", Axis::Kind::int_category}});
      ax.name = nb::cast<std::string>(field(a, "name"));
      ax.label = nb::cast<std::string>(field(a, "label"));
      ax.edges = nb::cast<std::vector<double>>(field(a, "edges"));
      ax.categories = nb::cast<std::vector<std::string>>(field(a, "categories"));
      ax.transform = nb::cast<std::string>(field(a, "transform"));
      ax.underflow = nb::cast<bool>(field(a, "underflow"));
      ax.overflow = nb::cast<bool>(field(a, "overflow"));
      ax.circular = nb::cast<bool>(field(a, "circular"));
      ax.growth = nb::cast<bool>(field(a, "growth"));
      ch.axes.push_back(std::move(ax));
    }
    ch.nbins = axes_bins(ch.axes, ch.flow, m.model->nbins_full() + 1);
    out.push_back(std::move(ch));
  }
  Model mo = *m.model;
  index_t bins = 0, unmasked = 0;
  for (const Channel& c : out) {
    bins += c.nbins;
    unmasked += c.masked ? 0 : c.nbins;
  }
  if (bins != mo.nbins_full() || unmasked != mo.nbins())
    throw model_error("the meta's channel_info describes " + std::to_string(unmasked) + " bins and " + std::to_string(bins - unmasked) +
                      " masked ones, but the tensor has " + std::to_string(mo.nbins()) + " and " + std::to_string(mo.nbins_full() - mo.nbins()));
  mo.channels = std::move(out);
  mo.validate();
  PyModel r = m;
  r.channels_skipped.clear();
  r.model = std::make_shared<const Model>(std::move(mo));
  return r;
}

/// A C-contiguous double array from Python (converted when it is not one), as nanobind passes it.
using Array = nb::ndarray<const double, nb::c_contig, nb::device::cpu>;

/// `h` as a C-contiguous double array: a numpy array of any dtype and order, or a list or tuple of numbers (nanobind
/// converts only arrays); a usage_error naming `what` for anything else.
Array array_of(const nb::handle& h, const char* what) {
  nb::object a;
  try {
    a = nb::module_::import_("numpy").attr("ascontiguousarray")(h, "dtype"_a = "float64");
  } catch (const nb::python_error& e) {
    throw usage_error(std::string(what) + " is not an array of numbers (" + e.what() + ")");
  }
  return nb::cast<Array>(a);  // holds a reference to `a`'s data
}

/// The values of `a`, checked to have the shape `shape` (-1: any extent), naming `what` otherwise.
std::vector<double> values_of(const Array& a, const char* what, std::initializer_list<std::int64_t> shape) {
  bool ok = a.ndim() == shape.size();
  std::string want, got;
  std::size_t k = 0;
  for (std::int64_t e : shape) {
    want += (k ? ", " : "") + (e < 0 ? std::string("any") : std::to_string(e));
    if (ok && e >= 0 && static_cast<std::int64_t>(a.shape(k)) != e) ok = false;
    ++k;
  }
  for (std::size_t i = 0; i < a.ndim(); ++i) got += (i ? ", " : "") + std::to_string(a.shape(i));
  if (!ok) throw model_error(std::string(what) + " has shape [" + got + "]; expected [" + want + "]");
  return {a.data(), a.data() + a.size()};
}

/// The index of `name` among `names`, naming `what` it should be otherwise.
index_t index_of(const std::vector<std::string>& names, const std::string& name, const char* what) {
  const auto it = std::find(names.begin(), names.end(), name);
  if (it == names.end()) throw model_error("'" + name + "' is not " + what);
  return static_cast<index_t>(it - names.begin());
}

/// Model.from_arrays: a dense model in rabbit's layout (its TensorWriter's hnorm, hlogk, hsumw2, …).
PyModel py_from_arrays(const nb::handle& nominal_in, const nb::handle& logk_in, const nb::handle& data_in, const std::vector<std::string>& processes,
                       const std::vector<std::string>& signal, const std::vector<std::string>& systematics,
                       std::optional<std::vector<std::tuple<std::string, index_t, bool>>> channels, const nb::handle& sumw2,
                       const nb::handle& data_variance, const nb::handle& constraint_weights,
                       const nb::dict& groups, const std::vector<std::string>& nois,
                       const std::string& systematic_type, bool allow_negative_yields) {
  const Array nominal = array_of(nominal_in, "nominal"), logk = array_of(logk_in, "logk"), data = array_of(data_in, "data");
  if (nominal.ndim() != 2) throw model_error("nominal must be [bins, processes] (every bin, masked channels last)");
  const auto bf = static_cast<std::int64_t>(nominal.shape(0)), np = static_cast<std::int64_t>(processes.size()),
             ns = static_cast<std::int64_t>(systematics.size());
  Model mo;
  if (channels) {
    for (const auto& [name, nbins, masked] : *channels) mo.channels.push_back(Channel{.name = name, .nbins = nbins, .masked = masked});
  } else {  // rabbit's channels of a tensor without meta: the data's bins, then the rest masked
    const auto nb = static_cast<index_t>(data.ndim() == 1 ? data.shape(0) : 0);
    mo.channels.push_back(Channel{.name = "ch0", .nbins = nb});
    if (bf > nb) mo.channels.push_back(Channel{.name = "ch1_masked", .nbins = static_cast<index_t>(bf) - nb, .masked = true});
  }
  if (mo.nbins_full() != bf)
    throw model_error("the channels cover " + std::to_string(mo.nbins_full()) + " bins, but nominal has " + std::to_string(bf) +
                      " rows: one per bin of every channel, masked ones included");
  for (const std::string& p : processes)
    mo.processes.push_back(Process{.name = p, .signal = std::find(signal.begin(), signal.end(), p) != signal.end()});
  for (const std::string& p : signal) index_of(processes, p, "a process (signal names processes)");
  for (const std::string& sy : systematics) mo.systematics.push_back(Systematic{.name = sy});
  mo.symmetric = logk.ndim() == 3;
  DenseTemplates t;
  t.nominal = values_of(nominal, "nominal", {bf, np});
  t.logk = mo.symmetric ? values_of(logk, "logk", {bf, np, ns}) : values_of(logk, "logk (asymmetric: [bins, processes, 2, systematics])", {bf, np, 2, ns});
  mo.templates = std::move(t);
  const std::int64_t nb = mo.nbins();
  mo.data = values_of(data, "data", {nb});
  if (!sumw2.is_none()) mo.sumw2 = values_of(array_of(sumw2, "sumw2"), "sumw2", {bf, np});
  if (!data_variance.is_none()) mo.data_variance = values_of(array_of(data_variance, "data_variance"), "data_variance", {nb});
  mo.theta0.assign(static_cast<std::size_t>(ns), 0.0);
  mo.constraint_weights = constraint_weights.is_none() ? std::vector<double>(static_cast<std::size_t>(ns), 1.0)
                                                       : values_of(array_of(constraint_weights, "constraint_weights"), "constraint_weights", {ns});
  mo.poi_default.assign(static_cast<std::size_t>(mo.npoi()), 1.0);
  mo.allow_negative_yields = allow_negative_yields;
  mo.systematic_type = systematic_type_named(systematic_type);
  for (const auto& [name, members] : groups) {  // in the dict's order, which grouped impacts keep
    SystematicGroup g{.name = nb::cast<std::string>(name), .members = {}};
    for (const std::string& sy : nb::cast<std::vector<std::string>>(members))
      g.members.push_back(index_of(systematics, sy, "a systematic (groups name systematics)"));
    mo.groups.push_back(std::move(g));
  }
  for (const std::string& sy : nois) mo.nois.push_back(index_of(systematics, sy, "a systematic (nois name systematics)"));
  mo.validate();
  PyModel m;
  m.path = "<arrays>";
  m.model = std::make_shared<const Model>(std::move(mo));
  return m;
}

/// A fit's progress, from its thread with the GIL taken for each iteration: a line per iteration on the logger
/// "fitlib" at DEBUG, with progress=True a tqdm bar where tqdm is installed (else the lines on stderr too), and
/// Python's signal check, so that Ctrl-C stops the fit (it aborts, then KeyboardInterrupt is raised). Built and ended
/// with the GIL held.
class Progress {
 public:
  explicit Progress(bool progress) {
    logger_ = nb::module_::import_("logging").attr("getLogger")("fitlib");
    log_ = nb::cast<bool>(logger_.attr("isEnabledFor")(10));  // DEBUG
    if (progress) {
      try {
        bar_ = nb::module_::import_("tqdm").attr("tqdm")("desc"_a = "fitlib fit", "unit"_a = " it");
      } catch (const nb::python_error&) {  // no tqdm: the lines on stderr
        stderr_ = nb::module_::import_("sys").attr("stderr");
      }
    }
  }
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  /// fit()'s hook, on the fit's thread without the GIL.
  CallbackAction operator()(const IterationSummary& s) {
    const nb::gil_scoped_acquire gil;
    try {
      if (bar_.is_valid()) {
        bar_.attr("set_postfix_str")(format("f=%.10g edm=%.3g radius=%.3g", s.f, s.edm, s.radius_next), "refresh"_a = false);
        bar_.attr("update")(1);
      }
      if (log_ || stderr_.is_valid()) {
        const std::string line = format("iteration %td: f %.12g, predicted decrease %.3g, edm %.3g, radius %.3g -> %.3g, rho %.3g, %.2f s",
                                        s.iteration, s.f, s.predicted_decrease, s.edm, s.radius, s.radius_next, s.rho, s.elapsed);
        if (log_) logger_.attr("debug")(line);
        if (stderr_.is_valid()) stderr_.attr("write")("fitlib: " + line + "\n");
      }
      if (PyErr_CheckSignals() != 0) throw nb::python_error();
    } catch (nb::python_error& e) {  // Ctrl-C, or a failing handler: the fit stops, and the error is raised after it
      error_.emplace(std::move(e));
      return CallbackAction::abort;
    }
    return CallbackAction::proceed;
  }

  /// After the fit, with the GIL: closes the bar, logs the outcome, and raises what stopped the fit.
  void end(const FitResult& r) {
    if (bar_.is_valid()) bar_.attr("close")();
    if (error_) throw std::move(*error_);
    logger_.attr("info")(format("fit: %s after %td iterations, %.3f s", r.status_text().c_str(), r.iterations, r.seconds));
  }

 private:
  template <class... A>
  static std::string format(const char* f, A... a) {
    char buffer[256];
    std::snprintf(buffer, sizeof buffer, f, a...);
    return buffer;
  }
  nb::object logger_, bar_, stderr_;
  bool log_ = false;
  std::optional<nb::python_error> error_;
};

/// The likelihood's settings from the keywords fit and Likelihood share, as fitlib-fit's options set them
/// (command_line.cpp: likelihood_options).
FitSettings settings_of(const PyModel& m, bool bin_by_bin, const std::string& bin_by_bin_mode, const std::string& bin_by_bin_type,
                        const std::string& data_term, bool allow_negative_poi, index_t threads) {
  if (threads < 0) throw usage_error("threads must be ≥ 1, or 0 for every core, got " + std::to_string(threads));
  if (threads == 0) threads = cpu::default_threads(m.model->nbins());  // fitlib-fit's default
  FitSettings s;
  s.likelihood.data_term = choose<DataTerm>("data_term", data_term,
                                            {{"poisson", DataTerm::poisson}, {"chisq", DataTerm::chisq}, {"covariance", DataTerm::covariance}});
  s.likelihood.allow_negative_poi = allow_negative_poi;
  s.likelihood.shards = threads;  // one shard per thread
  s.likelihood.bin_by_bin.enabled = bin_by_bin;
  s.likelihood.bin_by_bin.mode =
      choose<BinByBinMode>("bin_by_bin_mode", bin_by_bin_mode, {{"lite", BinByBinMode::lite}, {"full", BinByBinMode::full}});
  s.likelihood.bin_by_bin.type = choose<BinByBinType>("bin_by_bin_type", bin_by_bin_type,
                                                      {{"automatic", BinByBinType::automatic},
                                                       {"gamma", BinByBinType::gamma},
                                                       {"normal-multiplicative", BinByBinType::normal_multiplicative},
                                                       {"normal-additive", BinByBinType::normal_additive}});
  s.likelihood.validate();
  s.threads = threads;
  if (m.beta_variations && bin_by_bin && s.likelihood.bin_by_bin.mode == BinByBinMode::full)
    throw usage_error("the tensor has hbetavariations, which fitlib does not apply yet; use bin_by_bin_mode='lite' or bin_by_bin=False");
  return s;
}

PyFitResult py_fit(const PyModel& m, bool bin_by_bin, const std::string& bin_by_bin_mode, const std::string& bin_by_bin_type,
                   const std::string& data_term, bool allow_negative_poi, std::vector<std::string> frozen, bool covariance, index_t threads,
                   double edm_tol, index_t max_iterations, const std::string& method, bool progress) {
  auto o = std::make_shared<FitOutcome>();
  o->model = m.model;
  FitSettings& s = o->settings;
  s = settings_of(m, bin_by_bin, bin_by_bin_mode, bin_by_bin_type, data_term, allow_negative_poi, threads);
  if (!(edm_tol > 0)) throw usage_error("edm_tol must be positive, got " + std::to_string(edm_tol));
  if (max_iterations < 0) throw usage_error("max_iterations must be ≥ 0 (0: 200 per parameter), got " + std::to_string(max_iterations));
  s.minimizer.edm_tol = edm_tol;
  s.minimizer.maxiter = max_iterations;
  set_method(s, *m.model, method);
  s.fit.frozen = std::move(frozen);
  s.fit.covariance = covariance;
  Progress p(progress);
  const IterationHook hook{[&p](const IterationSummary& it) { return p(it); }};
  {
    const nb::gil_scoped_release released;
    o->result = fit_model(o->model, s, hook);
  }
  p.end(o->result);
  return PyFitResult{std::move(o)};
}

/// fitlib.Likelihood: a model's likelihood as fit builds it, for the user's own minimiser or checks (scipy.optimize).
struct PyLikelihood {
  std::shared_ptr<const Model> model;
  std::unique_ptr<HeldLikelihood> lik;
  std::mutex mutex;  ///< one evaluation at a time: the passes keep their buffers, and evaluations release the GIL

  /// `x` as the likelihood's point, checked to be [n].
  std::vector<double> point(const nb::handle& h, const char* what) const {
    const Array x = array_of(h, what);
    const auto n = static_cast<std::size_t>(lik->size());
    if (x.ndim() != 1 || x.shape(0) != n)
      throw usage_error(std::string(what) + " must be a vector of the " + std::to_string(n) + " parameters (Likelihood.names), got " +
                        std::to_string(x.ndim()) + " dimensions of " + std::to_string(x.ndim() ? x.shape(0) : 0));
    return {x.data(), x.data() + n};
  }
  /// `f(likelihood)` without the GIL, one evaluation at a time.
  template <class F>
  auto evaluate(F&& f) {
    const nb::gil_scoped_release released;
    const std::lock_guard lock(mutex);
    return f(*lik);
  }
  /// (value, gradient) at the point `h`, one pass.
  std::pair<double, std::vector<double>> value_grad(const nb::handle& h) {
    const std::vector<double> p = point(h, "x");
    std::vector<double> g(p.size());
    const double f = evaluate([&](HeldLikelihood& l) { return l.value_grad(p.data(), g.data()); });
    return {f, std::move(g)};
  }
};

/// The fit `r` of the model `m`: what comes after a fit rebuilds its likelihood over its model, and another model's
/// would be another likelihood.
const FitOutcome& fit_of(const PyModel& m, const PyFitResult& r) {
  if (r.outcome->model != m.model) throw usage_error("this FitResult is the fit of another Model; pass the Model it was fitted on");
  return *r.outcome;
}

/// Impacts on the POIs and NOIs, shared with the arrays that view them.
struct PyImpacts {
  std::shared_ptr<const Impacts> impacts;
  bool global = false;
};

PyImpacts py_impacts(const PyModel& m, const PyFitResult& r, bool global) {
  const FitOutcome& f = fit_of(m, r);
  if (global && f.settings.likelihood.bin_by_bin.enabled && !m.model->sumw2.empty() && f.settings.likelihood.data_term == DataTerm::covariance)
    throw usage_error("global impacts split off the bin-by-bin part with a Poisson or χ² data term only, not with data_term='covariance'; "
                      "use fitlib.impacts, or fit with bin_by_bin=False");
  const nb::gil_scoped_release released;
  return PyImpacts{std::make_shared<const Impacts>(postfit(f, [&](auto p) { return p.impacts(f, global); })), global};
}

/// Row `target` of an impacts table (`values`, columns `columns`) as a dict by column name; a KeyError naming the targets.
nb::dict by_name(const PyImpacts& i, const std::string& target, const std::vector<std::string>& columns, const std::vector<double>& values) {
  const auto& targets = i.impacts->targets;
  const auto it = std::find(targets.begin(), targets.end(), target);
  if (it == targets.end()) {
    std::string names;
    for (const auto& t : targets) names += (names.empty() ? "'" : ", '") + t + "'";
    throw nb::key_error(("no impacts on '" + target + "'; the targets are " + names).c_str());
  }
  const auto t = static_cast<std::size_t>(it - targets.begin());
  nb::dict d;
  for (std::size_t c = 0; c < columns.size(); ++c) d[columns[c].c_str()] = values[t * columns.size() + c];
  return d;
}

/// A profile scan, shared with the arrays that view it.
struct PyScan {
  std::shared_ptr<const Scan> scan;
};

PyScan py_scan(const PyModel& m, const PyFitResult& r, const std::string& parameter, index_t points, double range) {
  const FitOutcome& f = fit_of(m, r);
  const ScanOptions so{.points = points, .range = range};
  so.validate();
  const nb::gil_scoped_release released;
  return PyScan{std::make_shared<const Scan>(postfit(f, [&](auto p) { return p.scan(f, parameter, so); }))};
}

nb::dict py_histograms(const PyModel& m, const PyFitResult& r, bool covariance, bool process_variances, bool chi2, bool variations) {
  const FitOutcome& f = fit_of(m, r);
  HistogramOptions ho;
  ho.covariance = covariance;
  ho.variations = variations;
  ho.chi2 = chi2;
  ho.process_variances = process_variances;
  std::shared_ptr<const Histograms> h;
  {
    const nb::gil_scoped_release released;
    h = std::make_shared<const Histograms>(postfit(f, [&](auto p) { return p.histograms(f, ho); }));
  }
  const auto bins = static_cast<std::size_t>(h->nbins), procs = static_cast<std::size_t>(h->nprocs);
  const auto values = [&](const std::vector<double>& v) { return view(h, v.data(), {v.size()}); };
  const auto per_process = [&](const std::vector<double>& v) { return view(h, v.data(), {bins, procs}); };
  const auto per_channel = [&](const std::vector<std::vector<double>>& blocks) {
    nb::list l;
    for (std::size_t c = 0; c < blocks.size(); ++c) {
      const auto n = static_cast<std::size_t>(m.model->channels[c].nbins);
      l.append(view(h, blocks[c].data(), {n, n}));
    }
    return l;
  };
  // As the results file's prefit_chi2/, postfit_chi2/ (docs/results-format.md): per channel, and the totals.
  const auto chi2_of = [&](const std::vector<LinearChi2>& per, const LinearChi2& total, const std::string& note) {
    std::vector<double> chi2s;
    std::vector<std::int64_t> ndfs;
    for (const LinearChi2& c : per) {
      chi2s.push_back(c.chi2);
      ndfs.push_back(c.ndf);
    }
    nb::dict d;
    d["chi2"] = owning(std::move(chi2s), {per.size()});
    d["ndf"] = owning(std::move(ndfs), {per.size()});
    d["total_chi2"] = total.chi2;
    d["total_ndf"] = total.ndf;
    if (!note.empty()) d["note"] = note;
    return d;
  };
  nb::dict d;
  d["data"] = values(h->data);
  d["data_variance"] = values(h->data_variance);
  d["prefit"] = per_process(h->prefit);
  d["prefit_total"] = values(h->prefit_total);
  d["prefit_variance"] = values(h->prefit_variance);
  d["postfit"] = per_process(h->postfit);
  d["postfit_total"] = values(h->postfit_total);
  d["postfit_variance"] = values(h->postfit_variance);
  if (process_variances) {
    d["prefit_process_variance"] = per_process(h->prefit_process_variance);
    d["postfit_process_variance"] = per_process(h->postfit_process_variance);
  }
  if (covariance) {
    d["prefit_covariance"] = per_channel(h->prefit_covariance);
    d["postfit_covariance"] = per_channel(h->postfit_covariance);
  }
  if (variations) {
    const auto n = static_cast<std::size_t>(m.model->nparams());
    d["prefit_variations"] = view(h, h->prefit_variations.data(), {bins, n, std::size_t{2}});
    d["postfit_variations"] = view(h, h->postfit_variations.data(), {bins, n, std::size_t{2}});
  }
  if (chi2) {
    d["prefit_chi2"] = chi2_of(h->prefit_chi2, h->prefit_chi2_total, {});
    d["postfit_chi2"] = chi2_of(h->postfit_chi2, h->postfit_chi2_total, h->postfit_chi2_note);
  }
  return d;
}

/// fitlib's errors as Python exceptions: bad input is a ValueError (ModelError, UsageError) or, for files, an OSError
/// (FileError), each also a fitlib.Error, so that callers catch them as Python's own or as fitlib's.
void define_errors(nb::module_& m) {
  const auto make = [&](const char* name, PyObject* bases, const char* doc) {
    PyObject* cls = PyErr_NewExceptionWithDoc(("fitlib." + std::string(name)).c_str(), doc, bases, nullptr);
    if (cls == nullptr) throw nb::python_error();
    m.attr(name) = nb::steal(cls);
    return cls;
  };
  errors.base = make("Error", PyExc_Exception, "Base of the exceptions fitlib raises for bad input.");
  errors.model = make("ModelError", nb::make_tuple(nb::handle(errors.base), nb::handle(PyExc_ValueError)).ptr(),
                      "A model (templates, data, systematics) that is inconsistent or numerically invalid.");
  errors.usage = make("UsageError", nb::make_tuple(nb::handle(errors.base), nb::handle(PyExc_ValueError)).ptr(),
                      "A call whose arguments do not fit what it is called on (an unknown name, a bad option value).");
  errors.file = make("FileError", nb::make_tuple(nb::handle(errors.base), nb::handle(PyExc_OSError)).ptr(),
                     "A file that cannot be read as expected: missing, not HDF5, not a rabbit tensor, or damaged.");
  // Only fitlib's own types: nanobind's translators are shared with every other nanobind extension in the process.
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const io::file_error& e) {
      PyErr_SetString(errors.file, e.what());
    } catch (const model_error& e) {
      PyErr_SetString(errors.model, e.what());
    } catch (const usage_error& e) {
      PyErr_SetString(errors.usage, e.what());
    } catch (const fitlib::error& e) {
      PyErr_SetString(errors.base, e.what());
    }
  });
}

void bind_model(nb::module_& m) {
  nb::class_<Axis>(m, "Axis", "One axis of a channel's histogram, as hist describes it (rabbit's channel_info).")
      .def_prop_ro("kind", [](const Axis& a) { return std::string(a.kind_name()); },
                   "hist's class: 'Regular', 'Variable', 'Integer', 'Boolean', 'StrCategory' or 'IntCategory'")
      .def_ro("name", &Axis::name)
      .def_ro("label", &Axis::label, "as stored: empty when the writer gave none")
      .def_ro("edges", &Axis::edges, "the size + 1 bin edges, ascending (Regular, Variable, Integer, Boolean); a transformed "
                                     "Regular axis's in the variable itself")
      .def_ro("categories", &Axis::categories, "one per bin (StrCategory; IntCategory in decimal)")
      .def_ro("transform", &Axis::transform, "Regular: '' (none), 'log', 'sqrt' or 'pow(p)'")
      .def_ro("underflow", &Axis::underflow)
      .def_ro("overflow", &Axis::overflow)
      .def_ro("circular", &Axis::circular)
      .def_ro("growth", &Axis::growth)
      .def_prop_ro("size", &Axis::size, "the bins inside the axis's range")
      .def_prop_ro("extent", &Axis::extent, "the bins with the underflow and overflow bins")
      .def("__repr__", [](const Axis& a) {
        return "Axis(" + std::string(a.kind_name()) + " '" + a.name + "', " + std::to_string(a.size()) + " bins)";
      });

  nb::class_<Channel>(m, "Channel", "A channel: consecutive bins of the model, unmasked or masked, with its histogram's axes.")
      .def_ro("name", &Channel::name)
      .def_ro("nbins", &Channel::nbins)
      .def_ro("masked", &Channel::masked, "masked channels are predicted but never enter the data term")
      .def_ro("flow", &Channel::flow, "the bins include the axes' underflow and overflow bins")
      .def_ro("axes", &Channel::axes, "the histogram's axes, the bins in row-major order; empty: bins 0 … nbins-1")
      .def_prop_ro("shape", &Channel::shape, "the bins along each axis")
      .def("__repr__", [](const Channel& c) {
        return "Channel('" + c.name + "', " + std::to_string(c.nbins) + " bins" + (c.masked ? ", masked" : "") + ")";
      });

  nb::class_<PyModel>(m, "Model",
                      "A binned model read by read_rabbit: channels, processes, systematics and observed data. Arrays are read-only views.")
      .def_static("from_arrays", &py_from_arrays, "nominal"_a, "logk"_a, "data"_a, nb::kw_only(), "processes"_a, "signal"_a, "systematics"_a,
                  "channels"_a = nb::none(), "sumw2"_a = nb::none(), "data_variance"_a = nb::none(), "constraint_weights"_a = nb::none(),
                  "groups"_a = nb::dict(), "nois"_a = std::vector<std::string>(),
                  "systematic_type"_a = "log_normal", "allow_negative_yields"_a = false,
                  "A model from numpy arrays in rabbit's layout (its TensorWriter's datasets), dense.\n\n"
                  "nominal: [bins, processes] yields of every bin, masked channels last (hnorm); logk: [bins, processes, systematics] "
                  "(symmetric) or [bins, processes, 2, systematics] (average and half-difference, hlogk); data: [unmasked bins].\n"
                  "processes, systematics: names; signal: the processes a POI scales (one each, in process order).\n"
                  "channels: (name, nbins, masked) in bin order, unmasked first; None: 'ch0' over the data's bins and 'ch1_masked' "
                  "over the rest, as rabbit.\n"
                  "sumw2: [bins, processes] template variances (bin-by-bin statistics); data_variance: [unmasked bins] (chisq); "
                  "constraint_weights: [systematics], 1 Gaussian, 0 unconstrained (default all 1).\n"
                  "groups: {group: [systematics]} for grouped impacts; nois: systematics reported as POIs.\n"
                  "Raises ModelError naming what is inconsistent.")
      .def_ro("path", &PyModel::path, "the file read ('<arrays>' for Model.from_arrays)")
      .def_ro("sha256", &PyModel::sha256, "SHA-256 of the file's bytes")
      .def_ro("channels_skipped", &PyModel::channels_skipped,
              "why the channels are not the meta's channel_info (then 'ch0' and 'ch1_masked' with one Integer axis each); empty if they are")
      .def_ro("meta_skipped", &PyModel::meta_skipped, "why an undecodable meta was skipped (systematic_type given); empty otherwise")
      .def_prop_ro("nbins", [](const PyModel& p) { return p.model->nbins(); }, "bins that enter the data term (the unmasked channels')")
      .def_prop_ro("nbins_full", [](const PyModel& p) { return p.model->nbins_full(); }, "all bins, masked channels included")
      .def_prop_ro("nprocs", [](const PyModel& p) { return p.model->nprocs(); })
      .def_prop_ro("nsyst", [](const PyModel& p) { return p.model->nsyst(); })
      .def_prop_ro("npoi", [](const PyModel& p) { return p.model->npoi(); }, "one signal strength per signal process")
      .def_prop_ro("nparams", [](const PyModel& p) { return p.model->nparams(); }, "npoi + nsyst")
      .def_prop_ro("sparse", [](const PyModel& p) { return p.model->sparse() != nullptr; }, "whether the templates are stored sparsely")
      .def_prop_ro("symmetric", [](const PyModel& p) { return p.model->symmetric; }, "symmetric (K only) or asymmetric (K and H) systematics")
      .def_prop_ro("systematic_type",
                   [](const PyModel& p) { return std::string(p.model->systematic_type == SystematicType::normal ? "normal" : "log_normal"); })
      .def_prop_ro("parameter_names", [](const PyModel& p) { return p.model->parameter_names(); },
                   "the POIs (the signal processes, in process order), then the systematics")
      .def_prop_ro("process_names",
                   [](const PyModel& p) {
                     std::vector<std::string> names;
                     for (const Process& q : p.model->processes) names.push_back(q.name);
                     return names;
                   })
      .def_prop_ro("signal",
                   [](const PyModel& p) {
                     std::vector<bool> signal;
                     for (const Process& q : p.model->processes) signal.push_back(q.signal);
                     return bools(signal);
                   },
                   "per process, whether a POI scales it")
      .def_prop_ro("systematic_names",
                   [](const PyModel& p) {
                     std::vector<std::string> names;
                     for (const Systematic& s : p.model->systematics) names.push_back(s.name);
                     return names;
                   })
      .def_prop_ro("channels", [](const PyModel& p) { return p.model->channels; }, "the channels in bin order, unmasked ones first")
      .def_prop_ro("data", [](const PyModel& p) { return view(p.model, p.model->data.data(), {p.model->data.size()}); },
                   "observed counts of the unmasked bins, [nbins]")
      .def_prop_ro("data_variance",
                   [](const PyModel& p) {
                     const std::vector<double>& v = p.model->data_variance.empty() ? p.model->data : p.model->data_variance;
                     return view(p.model, v.data(), {v.size()});
                   },
                   "variances of the observed counts, [nbins] (the counts where the tensor has none)")
      .def_prop_ro("nominal",
                   [](const PyModel& p) {
                     const auto bins = static_cast<std::size_t>(p.model->nbins_full()), procs = static_cast<std::size_t>(p.model->nprocs());
                     return owning(p.model->nominal_yields(), {bins, procs});
                   },
                   "nominal yields, [nbins_full, nprocs] (a copy)")
      .def("__repr__", [](const PyModel& p) {
        const Model& mo = *p.model;
        return "Model('" + p.path + "': " + std::to_string(mo.nbins()) + " bins + " + std::to_string(mo.nbins_full() - mo.nbins()) + " masked, " +
               std::to_string(mo.nprocs()) + " processes, " + std::to_string(mo.nsyst()) + " systematics, " +
               (mo.sparse() ? "sparse" : "dense") + ")";
      });
}

void bind_fit(nb::module_& m) {
  const auto vec = [](const PyFitResult& r, const std::vector<double>& v) { return view(r.outcome, v.data(), {v.size()}); };
  nb::class_<PyFitResult>(m, "FitResult", "A fit: parameters, uncertainties, covariance and statuses. Arrays are read-only views.")
      .def_prop_ro("names", [](const PyFitResult& r) { return r.outcome->result.names; }, "parameter names, [n]: the POIs, then the systematics")
      .def_prop_ro("x", [vec](const PyFitResult& r) { return vec(r, r.outcome->result.x); },
                   "parameters at the minimum, [n]; a POI is √μ unless allow_negative_poi (then μ)")
      .def_prop_ro("x0", [vec](const PyFitResult& r) { return vec(r, r.outcome->result.x0); }, "the starting point, [n]")
      .def_prop_ro("uncertainties", [vec](const PyFitResult& r) { return vec(r, r.outcome->result.uncertainties); },
                   "√diag(covariance), [n]; 0 for frozen parameters, NaN if unavailable")
      .def_prop_ro("gradient", [vec](const PyFitResult& r) { return vec(r, r.outcome->result.gradient); }, "at the minimum, [n]")
      .def_prop_ro("covariance", [](const PyFitResult& r) { return matrix(r.outcome, r.outcome->result.covariance); },
                   "[n, n], zero rows and columns for frozen parameters; None without covariance")
      .def_prop_ro("correlation",
                   [](const PyFitResult& r) -> nb::object {
                     const std::size_t n = r.outcome->result.x.size();
                     if (r.outcome->result.covariance.size() != n * n) return nb::none();
                     // as the results file's (io::write_results): 1 on the diagonal of a free parameter, 0 for a frozen one
                     auto c = std::make_shared<const std::vector<double>>(io::detail::correlation(r.outcome->result.covariance, n));
                     const double* data = c->data();
                     return view(std::move(c), data, {n, n}, {std::int64_t{1}, static_cast<std::int64_t>(n)});  // column-major
                   },
                   "[n, n] from the covariance, as the results file's; None without covariance")
      .def_prop_ro("hessian", [](const PyFitResult& r) { return matrix(r.outcome, r.outcome->result.hessian); },
                   "[n, n] at the minimum; None without covariance")
      .def_prop_ro("frozen", [](const PyFitResult& r) { return bools(r.outcome->result.frozen); }, "[n]")
      .def_prop_ro("nll", [](const PyFitResult& r) { return r.outcome->result.nll; }, "the reduced NLL at the minimum")
      .def_prop_ro("edm", [](const PyFitResult& r) { return r.outcome->result.edm; })
      .def_prop_ro("status", [](const PyFitResult& r) { return std::string(fitlib::to_string(r.outcome->result.status)); },
                   "how the minimisation ended, as the results files name it")
      .def_prop_ro("status_text", [](const PyFitResult& r) { return r.outcome->result.status_text(); },
                   "the status with the number that decided it")
      .def_prop_ro("converged", [](const PyFitResult& r) { return r.outcome->result.converged(); })
      .def_prop_ro("covariance_status", [](const PyFitResult& r) { return std::string(fitlib::to_string(r.outcome->result.covariance_status)); })
      .def_prop_ro("iterations", [](const PyFitResult& r) { return r.outcome->result.iterations; })
      .def_prop_ro("seconds", [](const PyFitResult& r) { return r.outcome->result.seconds; })
      .def_prop_ro("evaluations",
                   [](const PyFitResult& r) {
                     const EvaluationCounts& c = r.outcome->result.counts;
                     nb::dict d;
                     d["values"] = c.values;
                     d["gradients"] = c.gradients;
                     d["hvps"] = c.hvps;
                     d["hessians"] = c.hessians;
                     d["gauss_newton"] = c.gauss_newton;
                     return d;
                   })
      .def("report", [](const PyFitResult& r) { return r.outcome->result.report(); }, "a table of the parameters and the fit's summary")
      .def_prop_ro("method", [](const PyFitResult& r) { return r.outcome->settings.method; },
                   "the minimizer that fitted it (fit's method, 'auto' resolved)")
      .def("__repr__", [](const PyFitResult& r) {
        return "FitResult(" + r.outcome->result.status_text() + ", nll=" + std::to_string(r.outcome->result.nll) + ")";
      });

  m.def("_with_channels", &py_with_channels, "model"_a, "channels"_a,
        "The model with these channels (dicts of name, masked, flow and axes); fitlib.read_rabbit's fallback for a meta "
        "that fitlib's reader cannot decode.");
  m.def("_read_rabbit", &py_read_rabbit, "path"_a, nb::kw_only(), "allow_negative_yields"_a = false, "systematic_type"_a = nb::none(),
        "fitlib's reader of a rabbit tensor (fitlib.read_rabbit adds the meta's channels through Python's pickle where it "
        "cannot decode them).");
  m.def("fit", &py_fit, "model"_a, nb::kw_only(), "bin_by_bin"_a = true, "bin_by_bin_mode"_a = "lite", "bin_by_bin_type"_a = "automatic",
        "data_term"_a = "poisson", "allow_negative_poi"_a = false, "frozen"_a = std::vector<std::string>(), "covariance"_a = true,
        "threads"_a = 0, "edm_tol"_a = 1e-12, "max_iterations"_a = 0, "method"_a = "auto", "progress"_a = false,
        "Fits the model's observed data; the defaults are fitlib-fit's, so that fit(model) is `fitlib-fit TENSOR -t 0 --unblind`.\n\n"
        "bin_by_bin: Barlow-Beeston bin-by-bin statistics (--noBinByBinStat turns them off); bin_by_bin_mode: 'lite' or 'full'; "
        "bin_by_bin_type: 'automatic', 'gamma', 'normal-multiplicative' or 'normal-additive' (--binByBinStatType).\n"
        "data_term: 'poisson', 'chisq' (--chisqFit) or 'covariance' (--covarianceFit).\n"
        "allow_negative_poi: POIs act linearly, mu = x (--allowNegativePOI).\n"
        "frozen: parameters held at their start, names or regular expressions (--freezeParameters).\n"
        "covariance: compute the covariance at the minimum (histograms need it).\n"
        "threads: the bins split into as many shards, evaluated concurrently (--threads); 0: every core this process may use, "
        "as many as the unmasked bins allow (fitlib-fit's default).\n"
        "edm_tol: converged when the EDM is below it (--minimizerEdmTol); max_iterations: 0 is 200 per parameter (--minimizerMaxiter).\n"
        "method: 'auto' (chosen by the cost of a dense Hessian, as fitlib-fit), 'trust-krylov', 'trust-ncg', 'trust-exact', "
        "'trust-gauss-newton' or 'trust-gauss-newton-krylov' (--minimizerMethod).\n"
        "progress: a tqdm bar of the iterations where tqdm is installed, else a line per iteration on stderr (always: a line per "
        "iteration on the logger 'fitlib' at DEBUG, and the outcome at INFO).\n"
        "Non-convergence is a status (FitResult.converged), never an exception. The GIL is released while it runs; Ctrl-C stops the "
        "fit and raises KeyboardInterrupt.");
  nb::class_<PyLikelihood>(m, "Likelihood",
                           "A model's negative log-likelihood as fitlib.fit minimises it (the reduced NLL, its constants dropped), over the "
                           "POIs then the systematics, with its analytic derivatives: for your own minimiser, e.g. "
                           "scipy.optimize.minimize(lik.value, lik.x0, jac=lik.gradient, hessp=lik.hessp, method='trust-krylov'). "
                           "Evaluations release the GIL and run one at a time.")
      .def("__init__",
           [](PyLikelihood* self, const PyModel& m, bool bin_by_bin, const std::string& bin_by_bin_mode, const std::string& bin_by_bin_type,
              const std::string& data_term, bool allow_negative_poi, index_t threads) {
             const FitSettings s = settings_of(m, bin_by_bin, bin_by_bin_mode, bin_by_bin_type, data_term, allow_negative_poi, threads);
             auto held = storage::visit(*m.model, [&]<class S>(S) { return hold_likelihood<S>(m.model, s); });
             new (self) PyLikelihood{m.model, std::move(held), {}};
           },
           "model"_a, nb::kw_only(), "bin_by_bin"_a = true, "bin_by_bin_mode"_a = "lite", "bin_by_bin_type"_a = "automatic",
           "data_term"_a = "poisson", "allow_negative_poi"_a = false, "threads"_a = 0, "fitlib.fit's likelihood keywords, with its defaults.")
      .def_prop_ro("names", [](const PyLikelihood& l) { return l.model->parameter_names(); }, "the parameters: the POIs, then the systematics")
      .def_prop_ro("x0", [](const PyLikelihood& l) { return owning(l.lik->default_parameters(), {static_cast<std::size_t>(l.lik->size())}); },
                   "the default point, where fitlib.fit starts")
      .def("__len__", [](const PyLikelihood& l) { return l.lik->size(); })
      .def("value",
           [](PyLikelihood& l, const nb::handle& x) {
             const std::vector<double> p = l.point(x, "x");
             return l.evaluate([&](HeldLikelihood& h) { return h.value(p.data()); });
           },
           "x"_a, "the NLL at x")
      .def("value_and_gradient",
           [](PyLikelihood& l, const nb::handle& x) {
             auto [f, g] = l.value_grad(x);
             const std::size_t n = g.size();
             return nb::make_tuple(f, owning(std::move(g), {n}));
           },
           "x"_a, "(NLL, gradient) at x, in one pass")
      .def("gradient",
           [](PyLikelihood& l, const nb::handle& x) {
             std::vector<double> g = l.value_grad(x).second;
             const std::size_t n = g.size();
             return owning(std::move(g), {n});
           },
           "x"_a, "the gradient at x")
      .def("hessp",
           [](PyLikelihood& l, const nb::handle& x, const nb::handle& v) {
             const std::vector<double> p = l.point(x, "x"), d = l.point(v, "v");
             std::vector<double> out(p.size());
             l.evaluate([&](HeldLikelihood& h) { h.hessp(p.data(), d.data(), out.data()); });
             return owning(std::move(out), {p.size()});
           },
           "x"_a, "v"_a, "the Hessian at x times v (one pass)")
      .def("hessian",
           [](PyLikelihood& l, const nb::handle& x) {
             const std::vector<double> p = l.point(x, "x");
             const std::size_t n = p.size();
             std::vector<double> g(n), h(n * n);
             l.evaluate([&](HeldLikelihood& lik) { return lik.hessian(p.data(), g.data(), h.data()); });
             return owning(io::detail::transposed(h, n), {n, n});  // column-major in C++, symmetric only to rounding
           },
           "x"_a, "the dense Hessian at x, [n, n]")
      .def("__repr__", [](const PyLikelihood& l) { return "Likelihood(" + std::to_string(l.lik->size()) + " parameters)"; });

  nb::class_<PyImpacts>(m, "Impacts",
                        "Impacts on the targets (the POIs, then the NOIs) per parameter and per group, as fitlib-fit's --doImpacts "
                        "(traditional) or --globalImpacts (global). Arrays are read-only views.")
      .def_prop_ro("kind", [](const PyImpacts& i) { return std::string(i.global ? "global" : "traditional"); },
                   "'traditional' (fitlib.impacts) or 'global' (fitlib.global_impacts: shifted global observables)")
      .def_prop_ro("targets", [](const PyImpacts& i) { return i.impacts->targets; }, "the rows: POIs, then NOIs")
      .def_prop_ro("sources", [](const PyImpacts& i) { return i.impacts->sources; }, "the columns of values: every parameter")
      .def_prop_ro("values",
                   [](const PyImpacts& i) {
                     return view(i.impacts, i.impacts->values.data(), {i.impacts->targets.size(), i.impacts->sources.size()});
                   },
                   "[targets, parameters]: each parameter's impact on each target (zero where it is no source)")
      .def_prop_ro("groups", [](const PyImpacts& i) { return i.impacts->groups; },
                   "the columns of grouped: the model's groups, then 'stat' and, with bin-by-bin statistics, 'binByBinStat'")
      .def_prop_ro("grouped",
                   [](const PyImpacts& i) {
                     return view(i.impacts, i.impacts->grouped.data(), {i.impacts->targets.size(), i.impacts->groups.size()});
                   },
                   "[targets, groups]: each group's impact on each target")
      .def("of", [](const PyImpacts& i, const std::string& target) { return by_name(i, target, i.impacts->sources, i.impacts->values); },
           "target"_a, "each parameter's impact on `target`, by name (as fitlib.results.Impacts.of)")
      .def("grouped_of", [](const PyImpacts& i, const std::string& target) { return by_name(i, target, i.impacts->groups, i.impacts->grouped); },
           "target"_a, "each group's impact on `target`, by name")
      .def("__repr__", [](const PyImpacts& i) {
        return std::string(i.global ? "Global impacts" : "Impacts") + "(" + std::to_string(i.impacts->targets.size()) + " targets, " +
               std::to_string(i.impacts->sources.size()) + " parameters, " + std::to_string(i.impacts->groups.size()) + " groups)";
      });

  nb::class_<PyScan>(m, "Scan", "A profile-likelihood scan: at each value the NLL minimised over the other free parameters.")
      .def_prop_ro("parameter", [](const PyScan& s) { return s.scan->parameter; })
      .def_prop_ro("values", [](const PyScan& s) { return view(s.scan, s.scan->values.data(), {s.scan->values.size()}); },
                   "the parameter's values, the best fit in the middle")
      .def_prop_ro("dnll", [](const PyScan& s) { return view(s.scan, s.scan->dnll.data(), {s.scan->dnll.size()}); },
                   "NLL − NLL at the best fit (not ×2, as rabbit's nll_scan)")
      .def_prop_ro("status",
                   [](const PyScan& s) {
                     std::vector<std::string> names;
                     for (FitStatus st : s.scan->status) names.emplace_back(fitlib::to_string(st));
                     return names;
                   },
                   "each point's fit status")
      .def_prop_ro("converged",
                   [](const PyScan& s) {
                     std::vector<bool> c;
                     for (FitStatus st : s.scan->status) c.push_back(fitlib::converged(st));
                     return bools(c);
                   },
                   "whether each point's fit converged")
      .def("__repr__", [](const PyScan& s) { return "Scan('" + s.scan->parameter + "', " + std::to_string(s.scan->values.size()) + " points)"; });

  m.def("impacts", [](const PyModel& mo, const PyFitResult& r) { return py_impacts(mo, r, false); }, "model"_a, "result"_a,
        "Traditional impacts of every parameter and group on the POIs and NOIs at the fit's minimum (fitlib-fit --doImpacts). "
        "Needs the fit's covariance. The GIL is released while it runs.");
  m.def("global_impacts", [](const PyModel& mo, const PyFitResult& r) { return py_impacts(mo, r, true); }, "model"_a, "result"_a,
        "Global impacts (shifted global observables) of every parameter and group on the POIs and NOIs (fitlib-fit "
        "--globalImpacts). Needs the fit's covariance. The GIL is released while it runs.");
  m.def("scan", &py_scan, "model"_a, "result"_a, "parameter"_a, nb::kw_only(), "points"_a = 15, "range"_a = 3.0,
        "A profile-likelihood scan of one parameter around the fit's minimum (fitlib-fit --scan NAME --scanPoints --scanRange): "
        "points values over ± range postfit σ, the other free parameters refitted at each. The GIL is released while it runs.");
  m.def("histograms", &py_histograms, "model"_a, "result"_a, nb::kw_only(), "covariance"_a = false, "process_variances"_a = false,
        "chi2"_a = true, "variations"_a = false,
        "The prefit and postfit histograms of a fit, as fitlib-fit --saveHists: a dict of numpy arrays over every bin (masked "
        "channels included, in the model's bin order): 'prefit' and 'postfit' [nbins_full, nprocs], '*_total' and '*_variance' "
        "[nbins_full], 'data' and 'data_variance' [nbins]; with process_variances '*_process_variance' [nbins_full, nprocs] "
        "(--computeHistErrorsPerProcess); with covariance '*_covariance', one [bins, bins] array per channel (--computeHistCov); "
        "with chi2 '*_chi2', dicts of the per-channel 'chi2' and 'ndf' and the 'total_chi2' and 'total_ndf'; with variations "
        "'*_variations' [nbins_full, nparams, 2], every bin's summed yield with each parameter moved down and up by its σ "
        "(--computeVariations).");
}

}  // namespace

}  // namespace fitlib::python

namespace fitlib::python {
namespace {
/// Puts `dirs` first on HDF5's filter-plugin search path (fitlib/__init__.py: FITLIB_HDF5_PLUGIN_PATH's entries and
/// PyPI's hdf5plugin, whose Blosc2 filter rabbit's current tensors need); returns the entries that are not directories.
std::vector<std::string> add_hdf5_plugin_paths(std::vector<std::string> dirs) {
  const std::lock_guard lock(hdf5_mutex);
  for (auto& d : io::hdf5::plugin_search_path()) dirs.push_back(std::move(d));
  return io::hdf5::set_plugin_search_path(dirs);
}
}  // namespace
}  // namespace fitlib::python

NB_MODULE(_core, m) {
  m.doc() = "fitlib's C++ core: rabbit tensors, fits and histograms (use the fitlib package)";
  m.attr("__version__") = FITLIB_VERSION_STRING;
  fitlib::python::define_errors(m);
  fitlib::python::bind_model(m);
  fitlib::python::bind_fit(m);
  m.def("_add_hdf5_plugin_paths", &fitlib::python::add_hdf5_plugin_paths, "dirs"_a,
        "Puts these directories first on HDF5's filter-plugin search path; returns those that are not directories.");
}
