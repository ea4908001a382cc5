// SPDX-License-Identifier: MIT
// The real DIS data of examples/nnpdf (issue 20) as prepare.py writes them to nnpdf_dis.h5: datasets and their
// points, the ADD/MULT decomposition of the covariance (so that a t0 covariance can be built), and the FK tables of
// the data, of NNPDF's positivity sets and of its integrability sets, each on its own x-grid in the 8-function
// fitting basis of lo_dis.hpp. The file's layout is prepare.py's docstring; the C++ side never reads YAML.
#pragma once

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include <fitlib/core/types.hpp>
#include <fitlib/io/hdf5.hpp>

#include "lo_dis.hpp"

namespace nnpdf {

/// What to do about a missing or incomplete file: every error below ends with it.
inline constexpr const char* prepare_remedy =
    "run python3 examples/nnpdf/prepare.py (it writes /tmp/nnpdf-prep/nnpdf_dis.h5; --out DIR for another place) "
    "and pass the file with --data FILE";

/// An FK table: prediction_i = Σ_a Σ_k table(i, a·n_evol + k)·x·f_k(grid_x[a], Q0).
struct FkTable {
  std::vector<double> grid_x;
  Eigen::MatrixXd table;  ///< [rows × grid_x.size()·n_evol]
  fitlib::index_t rows() const { return table.rows(); }
};

/// The contents of nnpdf_dis.h5 that a fit needs.
struct DisData {
  std::string path;
  std::vector<std::string> names;        ///< per dataset (NNPDF's names)
  std::vector<std::string> observables;  ///< per dataset: what its FK table computes (F2_NC_EM, SIGMARED_NC_EP, ...)
  std::vector<fitlib::index_t> offset;   ///< dataset d is rows offset[d] .. offset[d+1]-1
  std::vector<double> x, Q2, central;    ///< per point
  std::vector<int> dataset_of;           ///< per point
  // The covariance's decomposition (validphys' covmat_from_systematics): absolute ADD parts, MULT parts as fractions.
  Eigen::VectorXd diag_add, diag_mult;  ///< [n]
  Eigen::MatrixXd sys_add, sys_mult;    ///< [n × K]
  Eigen::MatrixXd experimental;         ///< [n × n], validphys' experimental covariance
  FkTable fk;                           ///< the data's, rows in point order
  Eigen::VectorXd benchmark_pdf;        ///< the Les Houches toy on fk.grid_x, index a·n_evol + k
  Eigen::VectorXd benchmark_direct;     ///< HOPPET's direct predictions with that toy, [n]
  FkTable positivity;                   ///< NNPDF's positivity sets at Q² = 5 GeV², all sets' rows one after the other
  Eigen::VectorXd positivity_direct;    ///< HOPPET's direct positivity observables with the toy
  std::vector<std::string> positivity_names;
  std::vector<fitlib::index_t> positivity_offset;
  std::vector<double> positivity_x;
  FkTable integrability;  ///< x·T3 and x·T8 at x = 1e-9: a one-point grid, the network itself there
  std::vector<std::string> integrability_names;

  fitlib::index_t size() const { return static_cast<fitlib::index_t>(central.size()); }
  fitlib::index_t datasets() const { return static_cast<fitlib::index_t>(names.size()); }
  /// The positivity set that row i of the positivity table belongs to.
  const std::string& positivity_set(fitlib::index_t i) const {
    std::size_t set = 0;
    while (set + 1 < positivity_names.size() && positivity_offset[set + 1] <= i) ++set;
    return positivity_names[set];
  }
  /// The dataset called `name`, or −1.
  fitlib::index_t dataset(const std::string& name) const {
    const auto it = std::find(names.begin(), names.end(), name);
    return it == names.end() ? -1 : static_cast<fitlib::index_t>(it - names.begin());
  }

  /// C(c) = diag(diag_add + diag_mult·c²) + S·Sᵀ with S = sys_add + diag(c)·sys_mult (prepare.py's docstring; n3fit
  /// fact 4): the experimental covariance for c = the data, the t0 covariance for c = t0 predictions. Exactly
  /// symmetric (CovarianceReplicas and the Cholesky factorisations want that).
  Eigen::MatrixXd covariance(std::span<const double> c) const {
    const Eigen::Map<const Eigen::VectorXd> cv(c.data(), static_cast<Eigen::Index>(c.size()));
    const Eigen::MatrixXd S = sys_add + cv.asDiagonal() * sys_mult;
    Eigen::MatrixXd C = S * S.transpose();
    C.diagonal() += diag_add + diag_mult.cwiseProduct(cv.cwiseAbs2());
    // A GEMM need not round (i, j) and (j, i) alike; the mean of the two is symmetric to the bit.
    return (C + C.transpose()) * 0.5;
  }
};

namespace detail {

/// The dataset `name` of `f` as doubles, with its shape checked against `shape` (0: any extent there); a missing
/// dataset names itself and the remedy.
inline fitlib::io::hdf5::Array<double> read_checked(const fitlib::io::hdf5::File& f, const std::string& name,
                                                    const std::vector<std::size_t>& shape, bool integers = false) {
  namespace h5 = fitlib::io::hdf5;
  if (!h5::exists(f, name))
    throw fitlib::io::file_error("'" + f.file_name() + "' has no dataset /" + name + ": it is not a complete nnpdf_dis.h5 (an older or " +
                                 "interrupted prepare.py?); " + prepare_remedy);
  h5::Array<double> a = h5::read_doubles(f, name, integers);
  bool ok = a.shape.size() == shape.size();
  for (std::size_t i = 0; ok && i < shape.size(); ++i) ok = shape[i] == 0 || a.shape[i] == shape[i];
  if (!ok) {
    std::string got, want;
    for (std::size_t s : a.shape) got += (got.empty() ? "" : ", ") + std::to_string(s);
    for (std::size_t s : shape) want += (want.empty() ? "" : ", ") + (s ? std::to_string(s) : std::string("*"));
    throw fitlib::io::file_error("'" + f.file_name() + "' /" + name + " has shape [" + got + "], expected [" + want + "]; " + prepare_remedy);
  }
  return a;
}

inline std::vector<std::string> read_strings_checked(const fitlib::io::hdf5::File& f, const std::string& name, std::size_t n) {
  namespace h5 = fitlib::io::hdf5;
  if (!h5::exists(f, name))
    throw fitlib::io::file_error("'" + f.file_name() + "' has no dataset /" + name + ": it is not a complete nnpdf_dis.h5; " + prepare_remedy);
  std::vector<std::string> s = h5::read_strings(f, name);
  if (n != 0 && s.size() != n)
    throw fitlib::io::file_error("'" + f.file_name() + "' /" + name + " has " + std::to_string(s.size()) + " entries, expected " +
                                 std::to_string(n) + "; " + prepare_remedy);
  return s;
}

/// Offsets [m+1] that start at 0, never decrease and end at `total`.
inline std::vector<fitlib::index_t> read_offsets(const fitlib::io::hdf5::File& f, const std::string& name, std::size_t m, std::size_t total) {
  const auto a = read_checked(f, name, {m + 1}, true);
  std::vector<fitlib::index_t> o(a.values.begin(), a.values.end());
  bool ok = o.front() == 0 && o.back() == static_cast<fitlib::index_t>(total);
  for (std::size_t i = 0; i + 1 < o.size(); ++i) ok = ok && o[i] <= o[i + 1];
  if (!ok) throw fitlib::io::file_error("'" + f.file_name() + "' /" + name + " are not offsets from 0 to " + std::to_string(total) + "; " + prepare_remedy);
  return o;
}

/// A row-major [rows, nx, n_evol] table as an FK table on its grid.
inline FkTable read_fk(const fitlib::io::hdf5::File& f, const std::string& group, std::size_t rows) {
  FkTable t;
  t.grid_x = read_checked(f, group + "/grid_x", {0}).values;
  const std::size_t nx = t.grid_x.size();
  const auto a = read_checked(f, group + "/table", {rows, nx, n_evol});
  const auto cols = static_cast<Eigen::Index>(nx * n_evol);
  t.table = Eigen::Map<const Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>(a.values.data(), static_cast<Eigen::Index>(rows), cols);
  return t;
}

inline Eigen::VectorXd to_vector(const std::vector<double>& v) { return Eigen::Map<const Eigen::VectorXd>(v.data(), static_cast<Eigen::Index>(v.size())); }

}  // namespace detail

/// Reads nnpdf_dis.h5. Throws fitlib::io::file_error naming the file, the dataset and the remedy when the file is
/// missing, incomplete or inconsistent (shapes, offsets, the basis, the grids).
inline DisData read_dis_data(const std::string& path) {
  namespace h5 = fitlib::io::hdf5;
  using detail::read_checked;
  if (!std::filesystem::exists(path)) throw fitlib::io::file_error("no file '" + path + "'; " + prepare_remedy);
  const h5::File f = h5::File::open(path);
  DisData d;
  d.path = path;
  d.names = detail::read_strings_checked(f, "datasets/name", 0);
  const std::size_t D = d.names.size();
  d.observables = detail::read_strings_checked(f, "datasets/observable", D);
  d.central = read_checked(f, "points/central", {0}).values;
  const std::size_t n = d.central.size();
  d.offset = detail::read_offsets(f, "datasets/offset", D, n);
  d.x = read_checked(f, "points/x", {n}).values;
  d.Q2 = read_checked(f, "points/Q2", {n}).values;
  const auto dataset = read_checked(f, "points/dataset", {n}, true).values;
  d.dataset_of.assign(dataset.begin(), dataset.end());
  for (std::size_t s = 0; s < D; ++s)
    for (auto i = d.offset[s]; i < d.offset[s + 1]; ++i)
      if (d.dataset_of[static_cast<std::size_t>(i)] != static_cast<int>(s))
        throw fitlib::io::file_error("'" + path + "' /points/dataset disagrees with /datasets/offset at point " + std::to_string(i) + "; " + prepare_remedy);

  using RowMajor = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const auto N = static_cast<Eigen::Index>(n);
  d.diag_add = detail::to_vector(read_checked(f, "covariance/diag_add", {n}).values);
  d.diag_mult = detail::to_vector(read_checked(f, "covariance/diag_mult", {n}).values);
  const auto add = read_checked(f, "covariance/sys_add", {n, 0});
  const auto K = static_cast<Eigen::Index>(add.shape[1]);
  d.sys_add = Eigen::Map<const RowMajor>(add.values.data(), N, K);
  d.sys_mult = Eigen::Map<const RowMajor>(read_checked(f, "covariance/sys_mult", {n, add.shape[1]}).values.data(), N, K);
  d.experimental = Eigen::Map<const RowMajor>(read_checked(f, "covariance/experimental", {n, n}).values.data(), N, N);

  // The basis must be lo_dis.hpp's (the network's outputs, in order).
  const auto basis = detail::read_strings_checked(f, "fk/basis", n_evol);
  for (std::size_t k = 0; k < n_evol; ++k)
    if (basis[k] != evol_names[k])
      throw fitlib::io::file_error("'" + path + "' /fk/basis[" + std::to_string(k) + "] is '" + basis[k] + "', expected '" + evol_names[k] +
                           "' (lo_dis.hpp's order); " + prepare_remedy);
  d.fk = detail::read_fk(f, "fk", n);
  const auto nx = d.fk.grid_x.size();
  d.benchmark_pdf = detail::to_vector(read_checked(f, "fk/benchmark_pdf", {nx, n_evol}).values);  // row-major [a][k] = index a·n_evol + k
  d.benchmark_direct = detail::to_vector(read_checked(f, "fk/benchmark_direct", {n}).values);

  d.positivity_names = detail::read_strings_checked(f, "positivity/name", 0);
  d.positivity_x = read_checked(f, "positivity/x", {0}).values;
  d.positivity_offset = detail::read_offsets(f, "positivity/offset", d.positivity_names.size(), d.positivity_x.size());
  d.positivity = detail::read_fk(f, "positivity", d.positivity_x.size());
  d.positivity_direct = detail::to_vector(read_checked(f, "positivity/benchmark_direct", {d.positivity_x.size()}).values);
  // The objective evaluates the network once, at the data's grid nodes: the positivity tables must share them.
  if (d.positivity.grid_x != d.fk.grid_x)
    throw fitlib::io::file_error("'" + path + "' /positivity/grid_x differs from /fk/grid_x; the fit evaluates the network on one grid; " + prepare_remedy);

  d.integrability_names = detail::read_strings_checked(f, "integrability/name", 0);
  d.integrability = detail::read_fk(f, "integrability", d.integrability_names.size());
  if (d.integrability.grid_x.size() != 1)
    throw fitlib::io::file_error("'" + path + "' /integrability/grid_x has " + std::to_string(d.integrability.grid_x.size()) +
                         " nodes, expected one (x = 1e-9, the network itself there); " + prepare_remedy);
  return d;
}

/// The data restricted to `rows` (increasing point indices): their points, covariance parts and FK rows, the datasets
/// that keep a point (in order), and the positivity and integrability tables as they are.
inline DisData restricted(const DisData& d, const std::vector<fitlib::index_t>& rows) {
  if (!std::is_sorted(rows.begin(), rows.end()) || std::adjacent_find(rows.begin(), rows.end()) != rows.end() ||
      (!rows.empty() && (rows.front() < 0 || rows.back() >= d.size())))
    throw std::invalid_argument("restricted: the rows must be increasing point indices below " + std::to_string(d.size()));
  DisData r = d;
  const auto m = static_cast<Eigen::Index>(rows.size());
  const Eigen::Map<const Eigen::Matrix<fitlib::index_t, Eigen::Dynamic, 1>> idx(rows.data(), m);
  r.x.clear();
  r.Q2.clear();
  r.central.clear();
  r.dataset_of.clear();
  r.names.clear();
  r.observables.clear();
  r.offset.assign(1, 0);
  for (fitlib::index_t i : rows) {
    const auto k = static_cast<std::size_t>(i);
    const int set = d.dataset_of[k];
    if (r.names.empty() || r.names.back() != d.names[static_cast<std::size_t>(set)]) {
      r.names.push_back(d.names[static_cast<std::size_t>(set)]);
      r.observables.push_back(d.observables[static_cast<std::size_t>(set)]);
      r.offset.push_back(r.offset.back());
    }
    ++r.offset.back();
    r.x.push_back(d.x[k]);
    r.Q2.push_back(d.Q2[k]);
    r.central.push_back(d.central[k]);
    r.dataset_of.push_back(static_cast<int>(r.names.size()) - 1);
  }
  r.diag_add = d.diag_add(idx);
  r.diag_mult = d.diag_mult(idx);
  r.sys_add = d.sys_add(idx, Eigen::all);
  r.sys_mult = d.sys_mult(idx, Eigen::all);
  r.experimental = d.experimental(idx, idx);
  r.fk.table = d.fk.table(idx, Eigen::all);
  r.benchmark_direct = d.benchmark_direct(idx);
  return r;
}

/// The data with only the positivity rows at x ≤ xmax: every set keeps its name, perhaps with no row left; throws
/// std::invalid_argument where no set keeps a row.
inline DisData positivity_up_to(const DisData& d, double xmax) {
  DisData r = d;
  std::vector<Eigen::Index> rows;
  r.positivity_offset.assign(1, 0);
  for (std::size_t set = 0; set + 1 < d.positivity_offset.size(); ++set) {
    for (auto i = d.positivity_offset[set]; i < d.positivity_offset[set + 1]; ++i)
      if (d.positivity_x[static_cast<std::size_t>(i)] <= xmax) rows.push_back(i);
    r.positivity_offset.push_back(static_cast<fitlib::index_t>(rows.size()));
  }
  if (rows.empty())
    throw std::invalid_argument("no positivity observable at x <= " + std::to_string(xmax) + " (the smallest x is " +
                                std::to_string(*std::min_element(d.positivity_x.begin(), d.positivity_x.end())) + "); choose a larger x");
  r.positivity_x.clear();
  for (Eigen::Index i : rows) r.positivity_x.push_back(d.positivity_x[static_cast<std::size_t>(i)]);
  r.positivity.table = d.positivity.table(rows, Eigen::all);
  r.positivity_direct = d.positivity_direct(rows);
  return r;
}

/// max |C(data) − experimental|_ij / √(C_ii·C_jj): how well the decomposition rebuilds validphys' covariance,
/// relative to the scale of each entry (an absolute test on the correlations).
inline double covariance_mismatch(const DisData& d) {
  const Eigen::MatrixXd C = d.covariance(d.central);
  const Eigen::VectorXd s = d.experimental.diagonal().cwiseSqrt().cwiseInverse();
  return (s.asDiagonal() * (C - d.experimental) * s.asDiagonal()).cwiseAbs().maxCoeff();
}

/// max over the data points of |FK·benchmark_pdf − benchmark_direct| / |benchmark_direct|: the grid's interpolation
/// error (prepare.py measured 7.8e-4 at most).
inline double fk_benchmark_mismatch(const DisData& d) {
  const Eigen::VectorXd t = d.fk.table * d.benchmark_pdf;
  return ((t - d.benchmark_direct).cwiseAbs().array() / d.benchmark_direct.cwiseAbs().array()).maxCoeff();
}

/// The same for the positivity tables, per set relative to the set's largest |value| (the toy's antiquarks vanish
/// at large x, where a relative difference per point means nothing; prepare.py measured 8.9e-5).
inline double positivity_benchmark_mismatch(const DisData& d) {
  const Eigen::VectorXd t = d.positivity.table * d.benchmark_pdf;
  double worst = 0;
  for (std::size_t p = 0; p + 1 < d.positivity_offset.size(); ++p) {
    const auto b = d.positivity_offset[p], m = d.positivity_offset[p + 1] - b;
    if (m == 0) continue;
    const double scale = d.positivity_direct.segment(b, m).cwiseAbs().maxCoeff();
    if (scale > 0) worst = std::max(worst, (t.segment(b, m) - d.positivity_direct.segment(b, m)).cwiseAbs().maxCoeff() / scale);
  }
  return worst;
}

}  // namespace nnpdf
