// SPDX-License-Identifier: MIT
// The rabbit reader behind io/rabbit.hpp: its definitions, inline, or compiled once in fitlib::prebuilt.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <future>
#include <map>
#include <new>
#include <optional>
#include <stdexcept>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <variant>
#include <vector>

#include "fitlib/config.hpp"
#include "fitlib/core/error.hpp"
#include "fitlib/core/types.hpp"
#include "fitlib/device/partition.hpp"
#include "fitlib/io/hdf5.hpp"
#include "fitlib/io/hist_axes.hpp"
#include "fitlib/io/pickle.hpp"
#include "fitlib/io/rabbit.hpp"
#include "fitlib/io/sha256.hpp"
#include "fitlib/model/model.hpp"
#include "fitlib/model/sparse_templates.hpp"

#if !FITLIB_DEFINITIONS
#error "fitlib/io/rabbit_reader.hpp holds the reader that fitlib::prebuilt compiles; include <fitlib/io/rabbit.hpp> instead"
#endif

namespace fitlib::io {

namespace detail::rabbit {

inline std::string join(const std::vector<std::size_t>& v) {
  std::string s = "[";
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

inline std::string number(double v) {
  std::ostringstream os;
  os.precision(17);
  os << v;
  return os.str();
}

/// Reads one file; each step checks what it reads against the sizes fixed before it (B, Bf, P, S).
class Reader {
 public:
  Reader(const hdf5::File& f, const RabbitReadOptions& opt) : f_(f), opt_(opt) {}

  RabbitTensor read() {
    RabbitTensor out;
    out.path = f_.file_name();
    Model& m = out.model;
    m.allow_negative_yields = opt_.allow_negative_yields;

    read_names(m);
    read_data(m);
    const bool sparse = sparse_layout();  // hnorm_sparse/hlogk_sparse, read as SparseTemplates
    if (sparse)
      read_sparse_shape();
    else
      read_dense(m);
    read_template_stats(m);
    if (sparse) read_sparse(m);
    if (!m.sumw2.empty() && kstat_.size() > 0) sumw2_from_kstat(m);
    read_constraints(m);
    read_data_extras(m);
    read_pseudodata(out);
    read_groups(m);
    read_nois(m);
    read_external_terms(m);
    if (has("hbetavariations")) out.beta_variations = doubles("hbetavariations", {nbf_, nb_, np_}, "[Bf, B, P]").values;

    std::visit([&](auto& t) { t.held = opt_.bins; }, m.templates);
    m.channels.push_back(default_channel(false, static_cast<index_t>(nb_)));
    if (nbf_ > nb_) m.channels.push_back(default_channel(true, static_cast<index_t>(nbf_ - nb_)));
    m.theta0.assign(ns_, 0.0);
    m.poi_default.assign(static_cast<std::size_t>(m.npoi()), 1.0);
    try {
      m.validate();
    } catch (const model_error& e) {
      throw file_error("rabbit tensor '" + f_.file_name() + "' does not make a valid model: " + e.what());
    }
    read_meta(out);  // last: a file whose meta cannot be decoded is still checked in full first
    return out;
  }

  /// The bin ranges of `count` parts, split as partition_bins splits the model read() makes (detail::split_work of
  /// bin_work over the unmasked bins), without reading the systematic tensor whole.
  std::vector<BinRange> partition(index_t count) {
    Model m;  // names and data only
    read_names(m);
    read_data(m);
    const auto nb = static_cast<index_t>(nb_);
    if (count < 1 || count > nb)
      throw usage_error("cannot split the " + std::to_string(nb) + " unmasked bins of rabbit tensor '" + f_.file_name() + "' into " +
                        std::to_string(count) + " parts; use between 1 and " + std::to_string(nb) + " parts");
    const std::vector<index_t> work = sparse_layout() ? sparse_work() : dense_work();
    return fitlib::detail::split_work(work, 0, static_cast<index_t>(nbf_), count);
  }

  /// Entries of hlogk_sparse per read while rabbit_partition streams it (16 MiB of indices, 8 MiB of values).
  static constexpr std::size_t stream_rows = std::size_t{1} << 20;

 private:
  /// bin_work of a dense tensor, from its shapes: every cell of every bin, ncoef entries and one.
  std::vector<index_t> dense_work() {
    require("hlogk", "the dense systematic tensor, present whenever hnorm is");
    require("hnorm", "nominal yields");
    dense_nbins(hdf5::RowReader<double>(f_, "hnorm").shape());
    const std::size_t nc = dense_logk_columns(hdf5::RowReader<double>(f_, "hlogk").shape());
    return std::vector<index_t>(nb_, fitlib::dense_bin_work(static_cast<index_t>(np_), static_cast<index_t>(nc)));
  }

  /// bin_work of a sparse tensor: each non-zero cell's non-zero hlogk_sparse entries and one, streaming
  /// hlogk_sparse in reads of `stream_rows` entries. Checks the order a part read relies on (§1.3) on the way.
  std::vector<index_t> sparse_work() {
    read_sparse_shape();
    const auto norm = coo("hnorm_sparse");
    const hdf5::Array<std::int64_t>& ni = norm.first;  // not a structured binding: lambdas below capture it (clang < 16)
    const hdf5::Array<double>& nv = norm.second;
    nnz_norm_ = nv.size();
    sparse_logk_columns();
    const CooRows rows = coo_rows("hlogk_sparse");
    // Per hnorm_sparse entry, its non-zero hlogk_sparse entries: the row from_coo builds for its cell, which drops
    // explicit zeros (reading the values costs half the indices' bytes, and keeps the split exactly partition_bins').
    std::vector<index_t> entries(nnz_norm_, 0), work(nb_, 0);
    try {
      for (std::size_t r = 0; r < rows.values.rows(); r += stream_rows) {
        const std::size_t n = std::min(stream_rows, rows.values.rows() - r), r0 = r > 0 ? r - 1 : 0;  // r0: the entry before, for the order
        const std::vector<std::int64_t> idx = rows.indices.read(r0, r + n - r0).values;
        const std::vector<double> value = rows.values.read(r, n).values;
        for (std::size_t k = r - r0; k < r + n - r0; ++k) {
          const std::int64_t cell = idx[2 * k];
          const auto entry = [&] {
            return "hlogk_sparse entry " + std::to_string(r0 + k) + " (cell " + std::to_string(cell) + ", coefficient " + std::to_string(idx[2 * k + 1]) + ")";
          };
          if (cell < 0 || static_cast<std::size_t>(cell) >= nnz_norm_)
            fail("hlogk_sparse/indices", "has " + entry() + ", outside the " + std::to_string(nnz_norm_) +
                                             " entries of hnorm_sparse; a cell is a position in hnorm_sparse (§1.3)");
          fitlib::detail::sparse::require_row_major(idx, static_cast<index_t>(k), "hlogk_sparse", entry(), "cell", "coefficient");
          if (value[r0 + k - r] != 0) ++entries[static_cast<std::size_t>(cell)];
        }
      }
      for (std::size_t k = 0; k < nnz_norm_; ++k) {
        const std::int64_t b = ni.values[2 * k];
        const auto entry = [&] {
          return "hnorm_sparse entry " + std::to_string(k) + " (bin " + std::to_string(b) + ", process " + std::to_string(ni.values[2 * k + 1]) + ")";
        };
        if (b < 0 || static_cast<std::size_t>(b) >= nbf_)
          fail("hnorm_sparse/indices", "has " + entry() + ", outside the " + std::to_string(nbf_) + " bins of its dense_shape");
        fitlib::detail::sparse::require_row_major(ni.values, static_cast<index_t>(k), "hnorm_sparse", entry(), "bin", "process");
        if (nv.values[k] != 0 && static_cast<std::size_t>(b) < nb_) work[static_cast<std::size_t>(b)] += entries[k] + 1;
      }
    } catch (const model_error& e) {
      throw file_error("rabbit tensor '" + f_.file_name() + "': " + e.what());
    }
    return work;
  }

  const hdf5::File& f_;
  const RabbitReadOptions& opt_;
  std::size_t nb_ = 0, nbf_ = 0, np_ = 0, ns_ = 0;
  std::size_t b0_ = 0, b1_ = 0;  // the bins whose systematic-tensor rows are read (RabbitReadOptions::bins, else all)
  bool symmetric_ = true;
  std::vector<std::string> procs_, systs_;
  std::vector<double> kstat_;  // old files only (hkstat instead of hsumw2)
  std::size_t nnz_norm_ = 0;

  static constexpr const char* regenerate = "regenerate the file with rabbit's TensorWriter (or fix the program that wrote it)";

  [[noreturn]] void fail(const std::string& ds, const std::string& what, const std::string& remedy = regenerate) const {
    throw file_error("rabbit tensor '" + f_.file_name() + "': dataset '" + ds + "' " + what + "; " + remedy);
  }
  bool has(const std::string& ds) const { return hdf5::exists(f_, ds); }
  void require(const std::string& ds, const std::string& meaning) const {
    if (!has(ds))
      fail(ds, "is missing (" + meaning + ")",
           "every rabbit input tensor has it: the file is incomplete or not a rabbit tensor, " + std::string(regenerate));
  }

  void check_shape(const std::string& ds, const std::vector<std::size_t>& got, const std::vector<std::size_t>& want,
                   const std::string& meaning) const {
    if (got != want)
      fail(ds, "has shape " + join(got) + ", expected " + join(want) + " = " + meaning +
                   " (B unmasked bins from hdata_obs, Bf all bins from hnorm, P processes from hprocs, S systematics from hsysts)");
  }

  /// "[i, j] (flat index k)", plus the bin/process/systematic meaning where the layout is known.
  std::string position(const std::string& ds, const std::vector<std::size_t>& shape, std::size_t flat) const {
    std::vector<std::size_t> idx(shape.size());
    std::size_t rest = flat;
    for (std::size_t d = shape.size(); d-- > 0;) {
      idx[d] = shape[d] ? rest % shape[d] : 0;
      rest = shape[d] ? rest / shape[d] : 0;
    }
    std::string s = "entry " + join(idx) + " (flat index " + std::to_string(flat) + ")";
    const bool cell = ds == "hnorm" || ds == "hsumw" || ds == "hsumw2" || ds == "hlogk";
    if (cell && idx.size() >= 2 && idx[1] < procs_.size()) {
      s += " = bin " + std::to_string(idx[0]) + ", process '" + procs_[idx[1]] + "'";
      if (ds == "hlogk" && !idx.empty() && idx.back() < systs_.size())
        s += ", systematic '" + systs_[idx.back()] + "'" + (idx.size() == 4 ? (idx[2] == 0 ? " (K, average)" : " (H, half-difference)") : "");
    }
    return s;
  }

  /// Every value finite: `values` are the elements of `ds` (logical shape `shape`) from flat index `first` on.
  void check_finite(const std::string& ds, const std::vector<double>& values, const std::vector<std::size_t>& shape, std::size_t first) const {
    for (std::size_t k = 0; k < values.size(); ++k)
      if (!std::isfinite(values[k]))
        fail(ds, "has " + number(values[k]) + " at " + position(ds, shape, first + k) + "; every value must be finite", regenerate);
  }
  void check_finite(const std::string& ds, const hdf5::Array<double>& a) const { check_finite(ds, a.values, a.shape, 0); }
  void check_non_negative(const std::string& ds, const hdf5::Array<double>& a, const std::string& what) const {
    for (std::size_t k = 0; k < a.values.size(); ++k)
      if (a.values[k] < 0) fail(ds, "has " + number(a.values[k]) + " at " + position(ds, a.shape, k) + "; " + what, regenerate);
  }

  /// A required or optional float64 dataset of a known shape, all finite.
  hdf5::Array<double> doubles(const std::string& ds, const std::vector<std::size_t>& shape, const std::string& meaning,
                              bool accept_integers = false) const {
    require(ds, meaning);
    auto a = hdf5::read_doubles(f_, ds, accept_integers);
    check_shape(ds, a.shape, shape, meaning);
    check_finite(ds, a);
    return a;
  }

  std::vector<std::string> names(const std::string& ds, const std::string& meaning, const std::string& what) const {
    require(ds, meaning);
    auto v = hdf5::read_strings(f_, ds);
    std::set<std::string> seen;
    for (std::size_t i = 0; i < v.size(); ++i) {
      if (v[i].empty()) fail(ds, "has an empty " + what + " name at index " + std::to_string(i) + "; every " + what + " needs a name");
      if (!seen.insert(v[i]).second) fail(ds, "lists the " + what + " '" + v[i] + "' twice (index " + std::to_string(i) + "); names must be unique");
    }
    return v;
  }

  void read_names(Model& m) {
    procs_ = names("hprocs", "process names", "process");
    if (procs_.empty()) fail("hprocs", "is empty; a tensor needs at least one process");
    np_ = procs_.size();
    const auto signals = names("hsignals", "signal process names", "signal");
    if (signals.size() > np_) fail("hsignals", "lists " + std::to_string(signals.size()) + " signals but hprocs has only " + std::to_string(np_) + " processes");
    for (std::size_t i = 0; i < signals.size(); ++i) {
      const auto it = std::find(procs_.begin(), procs_.end(), signals[i]);
      if (it == procs_.end()) fail("hsignals", "names '" + signals[i] + "', which is not in hprocs; every signal must be a process");
      if (procs_[i] != signals[i])
        fail("hsignals", "names '" + signals[i] + "', which is process " + std::to_string(it - procs_.begin()) + " in hprocs, not process " +
                             std::to_string(i) + "; rabbit orders processes as sorted signals, then sorted backgrounds, and both lists must agree");
    }
    for (std::size_t p = 0; p < np_; ++p) m.processes.push_back({procs_[p], p < signals.size()});
    systs_ = names("hsysts", "systematic names", "systematic");
    ns_ = systs_.size();
    for (const auto& s : systs_) m.systematics.push_back({s});
  }

  void read_data(Model& m) {
    require("hdata_obs", "observed counts of the unmasked bins");
    auto a = hdf5::read_doubles(f_, "hdata_obs", true);
    if (a.shape.size() != 1) fail("hdata_obs", "has shape " + join(a.shape) + ", expected [B] (one count per unmasked bin)");
    nb_ = a.shape[0];
    if (nb_ == 0) fail("hdata_obs", "is empty; a tensor needs at least one unmasked bin");
    check_finite("hdata_obs", a);
    check_non_negative("hdata_obs", a, "observed counts must be ≥ 0");
    m.data = std::move(a.values);
  }

  void set_nbins_full(std::size_t bf, const std::string& ds) {
    if (bf < nb_)
      fail(ds, "gives " + std::to_string(bf) + " bins, fewer than the " + std::to_string(nb_) +
                   " unmasked bins of hdata_obs; all bins (Bf) are the unmasked ones followed by the masked ones");
    nbf_ = bf;
    b0_ = 0;
    b1_ = bf;
    if (!opt_.bins) return;
    const BinRange r = *opt_.bins;
    if (r.begin < 0 || r.begin >= r.end || r.end > static_cast<index_t>(bf))
      throw usage_error("RabbitReadOptions::bins is [" + std::to_string(r.begin) + ", " + std::to_string(r.end) + "), but rabbit tensor '" +
                        f_.file_name() + "' has " + std::to_string(bf) + " bins (" + std::to_string(nb_) + " unmasked, " + std::to_string(bf - nb_) +
                        " masked); give a non-empty range inside [0, " + std::to_string(bf) + "), e.g. one of io::rabbit_partition's");
    b0_ = static_cast<std::size_t>(r.begin);
    b1_ = static_cast<std::size_t>(r.end);
  }

  /// rabbit's own rule (inputdata.py, §1.9): dense whenever hnorm exists, else sparse.
  bool sparse_layout() const {
    const bool sparse = !has("hnorm");
    if (sparse && !has("hnorm_sparse"))
      fail("hnorm", "is missing, and so is hnorm_sparse: the file has no nominal yields",
           "this is not a rabbit input tensor, or its writing was interrupted: regenerate it with rabbit's TensorWriter");
    return sparse;
  }

  /// Bf from hnorm's logical shape, which must be [Bf, P].
  void dense_nbins(const std::vector<std::size_t>& shape) {
    if (shape.size() != 2 || shape[1] != np_)
      fail("hnorm", "has shape " + join(shape) + ", expected [Bf, " + std::to_string(np_) + "] = [all bins, P processes from hprocs]");
    set_nbins_full(shape[0], "hnorm");
  }

  /// The layout of hlogk from its logical shape (§1.3): [Bf, P, S] symmetric or [Bf, P, 2, S] asymmetric. Sets
  /// symmetric_; returns the coefficients per cell (S or 2S).
  std::size_t dense_logk_columns(const std::vector<std::size_t>& shape) {
    symmetric_ = shape.size() == 3;
    if (symmetric_)
      check_shape("hlogk", shape, {nbf_, np_, ns_}, "[Bf, P, S] (symmetric) or [Bf, P, 2, S] (asymmetric)");
    else
      check_shape("hlogk", shape, {nbf_, np_, 2, ns_}, "[Bf, P, 2, S] (asymmetric) or [Bf, P, S] (symmetric)");
    return symmetric_ ? ns_ : 2 * ns_;
  }

  void read_dense(Model& m) {
    require("hlogk", "the dense systematic tensor, present whenever hnorm is");
    require("hnorm", "nominal yields");
    auto norm = hdf5::read_doubles(f_, "hnorm");
    dense_nbins(norm.shape);
    check_finite("hnorm", norm);
    if (!opt_.allow_negative_yields)
      for (std::size_t k = 0; k < norm.values.size(); ++k)
        if (norm.values[k] < 0)
          fail("hnorm", "has the negative yield " + number(norm.values[k]) + " at " + position("hnorm", norm.shape, k),
               "set RabbitReadOptions::allow_negative_yields if the file was written with allow_negative_expectation, else " +
                   std::string(regenerate));
    // The rows of bins [b0, b1): cells [b0·P, b1·P) of hlogk, row-major, so one hyperslab (§1.2).
    hdf5::Array<double> logk;
    std::vector<std::size_t> shape;  // hlogk's logical shape
    std::size_t nc = 0;
    if (opt_.bins) {
      const hdf5::RowReader<double> rows(f_, "hlogk");
      shape = rows.shape();
      nc = dense_logk_columns(shape);
      logk = rows.read(b0_, b1_ - b0_);
    } else {
      logk = hdf5::read_doubles(f_, "hlogk");
      shape = logk.shape;
      nc = dense_logk_columns(shape);
    }
    const std::size_t c0 = b0_ * np_;  // the first cell read
    check_finite("hlogk", logk.values, shape, c0 * nc);
    for (std::size_t c = c0; c < b1_ * np_; ++c)
      if (norm.values[c] == 0)
        for (std::size_t k = 0; k < nc; ++k)
          if (const double v = logk.values[(c - c0) * nc + k]; v != 0)
            fail("hlogk", "has " + number(v) + " at " + position("hlogk", shape, c * nc + k) +
                              " although hnorm is 0 there; a variation needs a non-zero nominal yield");
    m.symmetric = symmetric_;
    m.templates = DenseTemplates{std::move(norm.values), std::move(logk.values), {}};
  }

  std::vector<std::int64_t> dense_shape(const std::string& group, std::size_t rank) const {
    const auto g = hdf5::open(f_, group);
    if (!hdf5::attribute_exists(g, "dense_shape"))
      fail(group, "has no attribute dense_shape (the shape of the dense tensor, §1.3)");
    auto s = hdf5::read_int64_attribute(g, "dense_shape");
    if (s.size() != rank) fail(group, "has a dense_shape attribute with " + std::to_string(s.size()) + " entries, expected " + std::to_string(rank));
    for (auto v : s)
      if (v < 0) fail(group, "has a negative extent in its dense_shape attribute");
    return s;
  }

  void read_sparse_shape() {
    require("hlogk_sparse", "the sparse systematic tensor, present whenever hnorm_sparse is");
    const auto shape = dense_shape("hnorm_sparse", 2);
    if (static_cast<std::size_t>(shape[1]) != np_)
      fail("hnorm_sparse", "has dense_shape [" + std::to_string(shape[0]) + ", " + std::to_string(shape[1]) + "], but hprocs lists " +
                               std::to_string(np_) + " processes");
    set_nbins_full(static_cast<std::size_t>(shape[0]), "hnorm_sparse");
  }

  /// A sparse group's datasets exist, and its logical shapes are [nnz × 2] (indices) and [nnz] (values).
  void require_coo(const std::string& group) const {
    require(group + "/indices", "the sparse tensor's (row, column) indices");
    require(group + "/values", "the sparse tensor's values");
  }
  void check_coo_shapes(const std::string& group, const std::vector<std::size_t>& indices, const std::vector<std::size_t>& values) const {
    const std::string idx = group + "/indices", val = group + "/values";
    if (values.size() != 1) fail(val, "has shape " + join(values) + ", expected [nnz] (one value per index pair)");
    check_shape(idx, indices, {values[0], 2}, "[nnz, 2] (one index pair per entry of " + val + ")");
  }

  /// The [nnz × 2] index array and [nnz] value array of a sparse group.
  std::pair<hdf5::Array<std::int64_t>, hdf5::Array<double>> coo(const std::string& group) const {
    require_coo(group);
    auto i = hdf5::read_int64s(f_, group + "/indices");
    auto v = hdf5::read_doubles(f_, group + "/values");
    check_coo_shapes(group, i.shape, v.shape);
    check_finite(group + "/values", v);
    return {std::move(i), std::move(v)};
  }

  /// A sparse group's datasets opened for reading ranges of entries (shapes checked, nothing read yet).
  struct CooRows {
    hdf5::RowReader<std::int64_t> indices;
    hdf5::RowReader<double> values;
  };
  CooRows coo_rows(const std::string& group) const {
    require_coo(group);
    CooRows r{hdf5::RowReader<std::int64_t>(f_, group + "/indices"), hdf5::RowReader<double>(f_, group + "/values")};
    check_coo_shapes(group, r.indices.shape(), r.values.shape());
    return r;
  }

  void read_sparse(Model& m) {
    auto [ni, nv] = coo("hnorm_sparse");
    nnz_norm_ = nv.size();
    if (!opt_.allow_negative_yields)
      for (std::size_t k = 0; k < nv.size(); ++k)
        if (nv.values[k] < 0) {
          const auto b = ni.values[2 * k], p = ni.values[2 * k + 1];
          const std::string proc = p >= 0 && static_cast<std::size_t>(p) < np_ ? " '" + procs_[static_cast<std::size_t>(p)] + "'" : "";
          fail("hnorm_sparse/values", "has the negative yield " + number(nv.values[k]) + " at entry " + std::to_string(k) + " (bin " +
                                          std::to_string(b) + ", process " + std::to_string(p) + proc + ")",
               "set RabbitReadOptions::allow_negative_yields if the file was written with allow_negative_expectation, else " +
                   std::string(regenerate));
        }
    const std::size_t cols = sparse_logk_columns();
    hdf5::Array<std::int64_t> li;
    hdf5::Array<double> lv;
    std::size_t first = 0;  // the entries read are hlogk_sparse's [first, first + lv.size())
    if (opt_.bins)
      first = read_held_logk(ni.values, li, lv);
    else
      std::tie(li, lv) = coo("hlogk_sparse");
    try {
      m.templates = SparseTemplates::from_coo(static_cast<index_t>(nbf_), static_cast<index_t>(np_), static_cast<index_t>(cols), ni.values, nv.values,
                                           li.values, lv.values, static_cast<index_t>(first));
    } catch (const model_error& e) {
      throw file_error("rabbit tensor '" + f_.file_name() + "': " + e.what());
    }
    m.symmetric = symmetric_;
  }

  /// hlogk_sparse's columns from its dense_shape [nnzN, S or 2S] (§1.3), once nnz_norm_ is known; sets symmetric_.
  std::size_t sparse_logk_columns() {
    const auto shape = dense_shape("hlogk_sparse", 2);
    if (static_cast<std::size_t>(shape[0]) != nnz_norm_)
      fail("hlogk_sparse", "has dense_shape [" + std::to_string(shape[0]) + ", " + std::to_string(shape[1]) + "], but its rows are the " +
                               std::to_string(nnz_norm_) + " entries of hnorm_sparse");
    const auto cols = static_cast<std::size_t>(shape[1]);
    if (cols == ns_)
      symmetric_ = true;
    else if (cols == 2 * ns_)
      symmetric_ = false;
    else
      fail("hlogk_sparse", "has dense_shape [" + std::to_string(shape[0]) + ", " + std::to_string(shape[1]) + "]; its second extent must be S = " +
                               std::to_string(ns_) + " (symmetric) or 2S = " + std::to_string(2 * ns_) + " (asymmetric), S from hsysts");
    return cols;
  }

  /// Reads into li/lv the hlogk_sparse entries of the cells of bins [b0, b1) only, and returns the position of the
  /// first. rabbit sorts hnorm_sparse by (bin, process) and hlogk_sparse by (i, c) (§1.3), so those cells are the
  /// hnorm_sparse entries [i0, i1) and their logk entries one run [f0, f1) of hlogk_sparse, found by binary search
  /// over its column i (O(log nnzK) one-row reads) and read alone. from_coo checks the order of the entries read,
  /// and each search's last two probes bracket the run's ends; an entry of these cells misplaced outside the run
  /// (a file not sorted as rabbit sorts it) goes unseen here, but rabbit_partition, which streams all of
  /// hlogk_sparse, and a full read reject such a file.
  std::size_t read_held_logk(const std::vector<std::int64_t>& ni, hdf5::Array<std::int64_t>& li, hdf5::Array<double>& lv) const {
    // The first position in [0, n) whose key is not below `key` where keys are sorted. On any keys it is monotone
    // in `key` (two searches probe alike until the smaller key turns left and the larger right), so i0 ≤ i1 and
    // f0 ≤ f1 even in a file that is not sorted.
    const auto lower_bound = [](std::size_t n, std::int64_t key, const auto& key_at) {
      std::size_t lo = 0, hi = n;
      while (lo < hi) {
        const std::size_t mid = lo + (hi - lo) / 2;
        if (key_at(mid) < key)
          lo = mid + 1;
        else
          hi = mid;
      }
      return lo;
    };
    const auto bin_at = [&](std::size_t k) { return ni[2 * k]; };
    const std::size_t i0 = lower_bound(nnz_norm_, static_cast<std::int64_t>(b0_), bin_at);
    const std::size_t i1 = lower_bound(nnz_norm_, static_cast<std::int64_t>(b1_), bin_at);
    const CooRows rows = coo_rows("hlogk_sparse");
    const auto cell_at = [&](std::size_t k) { return rows.indices.column(0, k, 1)[0]; };
    const std::size_t f0 = lower_bound(rows.indices.rows(), static_cast<std::int64_t>(i0), cell_at);
    const std::size_t f1 = lower_bound(rows.indices.rows(), static_cast<std::int64_t>(i1), cell_at);
    li = rows.indices.read(f0, f1 - f0);
    lv = rows.values.read(f0, f1 - f0);
    check_finite("hlogk_sparse/values", lv.values, rows.values.shape(), f0);
    return f0;
  }

  void read_template_stats(Model& m) {
    const std::vector<std::size_t> cell{nbf_, np_};
    if (has("hsumw2")) {
      auto a = doubles("hsumw2", cell, "[Bf, P] (template variances)");
      check_non_negative("hsumw2", a, "variances must be ≥ 0");
      m.sumw2 = std::move(a.values);
      if (has("hsumw")) m.sumw = doubles("hsumw", cell, "[Bf, P] (template sums of weights)").values;
      return;
    }
    if (!has("hkstat"))
      fail("hsumw2", "is missing, and so is hkstat (older files)",
           "a rabbit input tensor carries the template variances in one of them: " + std::string(regenerate));
    auto k = doubles("hkstat", {nbf_}, "[Bf] (effective MC statistics per bin, older files)");
    check_non_negative("hkstat", k, "effective statistics must be ≥ 0");
    kstat_ = std::move(k.values);
    if (nbf_ > f_.max_read_bytes() / sizeof(double) / np_)
      fail("hkstat", "implies " + std::to_string(nbf_) + " × " + std::to_string(np_) + " template variances, more than the read limit allows");
    m.sumw2.assign(nbf_ * np_, 0.0);  // filled by sumw2_from_kstat once the nominal yields are known
  }

  /// Older files (hkstat instead of hsumw2): rabbit sets, per bin, sumw = Σ_p N and sumw2 = sumw²/kstat (sumw where
  /// kstat is 0). Split over the processes in proportion to N, which reproduces rabbit's per-bin statistics exactly.
  void sumw2_from_kstat(Model& m) {
    const auto nominal = m.nominal_yields();
    for (std::size_t b = 0; b < nbf_; ++b) {
      double sumw = 0;
      for (std::size_t p = 0; p < np_; ++p) {
        const double n = nominal[b * np_ + p];
        if (n < 0)
          fail("hkstat", "is given (an older file) but bin " + std::to_string(b) + " has a negative yield for process '" + procs_[p] +
                             "'; per-bin statistics cannot be split over processes with negative yields",
               "regenerate the file with a current rabbit, which writes hsumw2");
        sumw += n;
      }
      const double k = kstat_[b];
      const double sumw2 = k == 0 ? sumw : sumw * sumw / k;
      for (std::size_t p = 0; p < np_; ++p)
        m.sumw2[b * np_ + p] = sumw > 0 ? sumw2 * (nominal[b * np_ + p] / sumw) : 0.0;
    }
  }

  void read_constraints(Model& m) {
    std::vector<std::string> free_names;
    if (has("hsystsnoconstraint")) free_names = hdf5::read_strings(f_, "hsystsnoconstraint");
    for (const auto& n : free_names)
      if (std::find(systs_.begin(), systs_.end(), n) == systs_.end())
        fail("hsystsnoconstraint", "names '" + n + "', which is not in hsysts; every unconstrained systematic must be a systematic");
    if (has("hconstraintweights")) {
      auto w = doubles("hconstraintweights", {ns_}, "[S] (one constraint weight per systematic)");
      check_non_negative("hconstraintweights", w, "constraint weights must be ≥ 0 (0 = unconstrained)");
      for (const auto& n : free_names) {
        const auto s = static_cast<std::size_t>(std::find(systs_.begin(), systs_.end(), n) - systs_.begin());
        if (w.values[s] != 0)
          fail("hconstraintweights", "gives the systematic '" + n + "' weight " + number(w.values[s]) +
                                         " although hsystsnoconstraint lists it as unconstrained (weight 0); the two datasets disagree");
      }
      m.constraint_weights = std::move(w.values);
      return;
    }
    if (!has("hsystsnoconstraint"))
      fail("hconstraintweights", "is missing, and so is hsystsnoconstraint",
           "one of them says which systematics are constrained: " + std::string(regenerate));
    m.constraint_weights.assign(ns_, 1.0);
    for (const auto& n : free_names) m.constraint_weights[static_cast<std::size_t>(std::find(systs_.begin(), systs_.end(), n) - systs_.begin())] = 0.0;
  }

  void read_data_extras(Model& m) {
    if (has("hdata_var")) {
      auto v = doubles("hdata_var", {nb_}, "[B] (variances of the observed counts)");
      check_non_negative("hdata_var", v, "variances must be ≥ 0");
      m.data_variance = std::move(v.values);
    }
    if (has("hdata_cov_inv")) {
      auto c = doubles("hdata_cov_inv", {nb_, nb_}, "[B, B] (inverse covariance of the observed counts)");
      // numpy's inv of a symmetric matrix is symmetric only up to rounding; the quadratic form uses only the
      // symmetric part, so symmetrise entries that agree to rounding and reject real asymmetry.
      double scale = 0;
      for (double v : c.values) scale = std::max(scale, std::abs(v));
      for (std::size_t a = 0; a < nb_; ++a)
        for (std::size_t b = 0; b < a; ++b) {
          double& x = c.values[a * nb_ + b];
          double& y = c.values[b * nb_ + a];
          if (x == y) continue;
          if (std::abs(x - y) > 1e-8 * scale)
            fail("hdata_cov_inv", "is not symmetric: entry [" + std::to_string(a) + ", " + std::to_string(b) + "] is " + number(x) + " but [" +
                                      std::to_string(b) + ", " + std::to_string(a) + "] is " + number(y) + "; an inverse covariance must be symmetric");
          x = y = 0.5 * (x + y);
        }
      m.data_covariance_inverse = std::move(c.values);
    }
  }

  void read_pseudodata(RabbitTensor& out) {
    std::size_t npd = 0;
    if (has("hpseudodata")) {
      auto a = hdf5::read_doubles(f_, "hpseudodata", true);
      if (a.shape.size() == 1 && a.shape[0] == nb_) a.shape.push_back(1);
      if (a.shape.size() != 2 || a.shape[0] != nb_)
        fail("hpseudodata", "has shape " + join(a.shape) + ", expected [B, npseudodata] = [" + std::to_string(nb_) + ", n] (B from hdata_obs)");
      check_finite("hpseudodata", a);
      npd = a.shape[1];
      out.pseudodata = std::move(a.values);
    }
    if (has("hpseudodatanames")) {
      out.pseudodata_names = names("hpseudodatanames", "names of the pseudodata sets", "pseudodata");
      if (out.pseudodata_names.size() != npd)
        fail("hpseudodatanames", "lists " + std::to_string(out.pseudodata_names.size()) + " names but hpseudodata has " + std::to_string(npd) +
                                     " sets (columns); the two datasets disagree");
    } else {
      for (std::size_t i = 0; i < npd; ++i) out.pseudodata_names.push_back("pseudodata" + std::to_string(i));
    }
  }

  void read_groups(Model& m) {
    const bool g = has("hsystgroups"), gi = has("hsystgroupidxs");
    if (!g && !gi) return;
    if (!g || !gi)
      fail(g ? "hsystgroupidxs" : "hsystgroups", std::string("is missing although ") + (g ? "hsystgroups" : "hsystgroupidxs") +
                                                     " exists; group names and members come as a pair");
    const auto groups = names("hsystgroups", "systematic group names", "group");
    const auto members = hdf5::read_ragged(f_, "hsystgroupidxs");
    if (members.size() != groups.size())
      fail("hsystgroupidxs", "has " + std::to_string(members.size()) + " rows but hsystgroups names " + std::to_string(groups.size()) +
                                 " groups; there must be one member list per group");
    for (std::size_t i = 0; i < groups.size(); ++i) {
      SystematicGroup sg{groups[i], {}};
      std::set<std::int64_t> seen;
      for (std::int64_t s : members[i]) {
        if (s < 0 || static_cast<std::size_t>(s) >= ns_)
          fail("hsystgroupidxs", "lists systematic index " + std::to_string(s) + " in group '" + groups[i] + "', outside the " +
                                     std::to_string(ns_) + " systematics of hsysts");
        if (!seen.insert(s).second)
          fail("hsystgroupidxs", "lists systematic '" + systs_[static_cast<std::size_t>(s)] + "' twice in group '" + groups[i] + "'");
        sg.members.push_back(static_cast<index_t>(s));
      }
      m.groups.push_back(std::move(sg));
    }
  }

  void read_nois(Model& m) {
    const std::string ds = has("hnoiidxs") ? "hnoiidxs" : has("hnoigroupidxs") ? "hnoigroupidxs" : "";
    if (ds.empty()) return;
    const auto a = hdf5::read_int64s(f_, ds);
    if (a.shape.size() > 1) fail(ds, "has shape " + join(a.shape) + ", expected [nnoi] (indices into hsysts)");
    std::set<std::int64_t> seen;
    for (std::int64_t s : a.values) {
      if (s < 0 || static_cast<std::size_t>(s) >= ns_)
        fail(ds, "lists systematic index " + std::to_string(s) + ", outside the " + std::to_string(ns_) + " systematics of hsysts");
      if (!seen.insert(s).second) fail(ds, "lists systematic '" + systs_[static_cast<std::size_t>(s)] + "' twice");
      m.nois.push_back(static_cast<index_t>(s));
    }
  }

  static const char* type_name(SystematicType t) { return t == SystematicType::normal ? "normal" : "log_normal"; }

  /// Whether a filter of the dataset `ds`'s pipeline cannot be applied (its plugin is missing).
  bool filter_missing(const std::string& ds) const {
    try {
      for (const hdf5::FilterInfo& f : hdf5::filters(f_, ds))
        if (!f.available) return true;
    } catch (const file_error&) {
    }
    return false;
  }

  /// meta/pickle_data decoded as the dict wums' pickle_dump_h5py wrote (format version 1, one in-band pickle), at
  /// most RabbitReadOptions::max_meta_bytes of it, read in bounded parts (no int64 copy of the whole).
  /// Any failure is a file_error saying what could not be read; `missing_filter` is set when that is a filter
  /// plugin the dataset needs.
  pickle::Value decode_meta(bool& missing_filter) const {
    const std::string ds = "meta/pickle_data";
    const auto bad = [&](const std::string& where, const std::string& what) {
      throw file_error("rabbit tensor '" + f_.file_name() + "': " + where + " " + what);
    };
    const auto g = hdf5::open(f_, "meta");
    const std::string version = "narf_h5py_pickle_protocol_version";
    if (!hdf5::attribute_exists(g, version)) bad("group 'meta'", "has no attribute " + version + ", so it is not a pickle written by rabbit (wums)");
    if (const auto v = hdf5::read_int64_attribute(g, version); v.size() != 1 || v[0] != 1)
      bad("group 'meta'", "has " + version + " = " + (v.size() == 1 ? std::to_string(v[0]) : std::to_string(v.size()) + " values") +
                              "; this reader knows version 1 only");
    require(ds, "the pickled meta data");
    // Opening and reading are where a missing filter plugin shows; nothing else here is a filter's doing.
    const auto filtered = [&](auto&& step) {
      try {
        return step();
      } catch (const file_error&) {
        missing_filter = filter_missing(ds);
        throw;
      }
    };
    const auto reader = filtered([&] { return hdf5::RowReader<std::int64_t>(f_, ds); });
    const std::size_t n = reader.rows() * reader.row_size();  // the stored element count (open_numeric checked the shape)
    if (n > opt_.max_meta_bytes) {
      constexpr std::size_t mib = std::size_t{1} << 20;
      const auto size = [&](std::size_t b) { return std::to_string(b) + " bytes" + (b % mib == 0 ? " = " + std::to_string(b / mib) + " MiB" : ""); };
      bad("dataset '" + ds + "'", "holds a pickle of " + size(n) + ", more than the limit of " + size(opt_.max_meta_bytes) +
                                      " (RabbitReadOptions::max_meta_bytes); rabbit writes kilobytes to a few megabytes there: raise the "
                                      "limit if the file is trusted");
    }
    std::vector<std::uint8_t> bytes;
    bytes.reserve(n);
    const std::size_t step = std::max<std::size_t>(1, (std::size_t{1} << 20) / std::max<std::size_t>(1, reader.row_size()));  // ~8 MB reads
    for (std::size_t r = 0; r < reader.rows(); r += step) {
      const auto part = filtered([&] { return reader.read(r, std::min(step, reader.rows() - r)); });
      for (const std::int64_t b : part.values) {
        if (b < 0 || b > 255) bad("dataset '" + ds + "'", "holds " + std::to_string(b) + " at index " + std::to_string(bytes.size()) + ", not a byte");
        bytes.push_back(static_cast<std::uint8_t>(b));
      }
    }
    pickle::Value v;
    try {
      v = pickle::decode(bytes);
    } catch (const file_error& e) {
      bad("dataset '" + ds + "'", std::string("holds a ") + e.what());
    }
    if (v.kind != pickle::Kind::dict) bad("dataset '" + ds + "'", std::string("holds a pickled ") + pickle::kind_name(v.kind) + ", not the dict rabbit's TensorWriter writes");
    return v;
  }

  /// The `meta` group (§1.7): its systematic_type decides the model's unless the options set one (then they must
  /// agree); its symmetric_tensor must match the tensor's layout. Files without `meta` are log-normal, as in rabbit.
  void read_meta(RabbitTensor& out) const {
    const std::optional<SystematicType> asked = opt_.systematic_type;
    Model& m = out.model;
    m.systematic_type = asked.value_or(SystematicType::log_normal);
    out.channels_skipped = default_channels_note("the tensor has no meta group (an older writer)");
    if (!has("meta")) return;
    RabbitMeta meta;
    bool missing_filter = false;
    try {
      meta.pickle = decode_meta(missing_filter);
    } catch (const file_error& e) {
      // The plugin advice only where a filter is what failed: a malformed or oversized pickle was read fine.
      if (!asked)
        throw file_error(std::string(e.what()) + "; rabbit records the systematic type only there: " +
                         (missing_filter ? "make the group readable (the filter plugin named above: for Blosc, HDF5 filter 32001, Debian's "
                                           "hdf5-filter-plugin-blosc-serial; fitlib-fit --hdf5PluginPath) or pass"
                                         : "pass") +
                         " --systematicType log_normal|normal (RabbitReadOptions::systematic_type) to read the tensor without it");
      out.meta_skipped = std::string("skipped the meta group, which cannot be decoded (") + e.what() + "); systematic_type " + type_name(*asked) +
                         " as RabbitReadOptions::systematic_type sets it";
      out.channels_skipped = default_channels_note("the meta group was skipped");
      return;
    }
    const std::string ds = "meta/pickle_data";
    if (const pickle::Value* t = meta.pickle.find("systematic_type")) {
      if (t->kind != pickle::Kind::string || (t->text != "log_normal" && t->text != "normal"))
        fail(ds, std::string("has a systematic_type that is ") + (t->kind == pickle::Kind::string ? "'" + t->text + "'" : std::string("a ") + pickle::kind_name(t->kind)) +
                     ", not 'log_normal' or 'normal'");
      meta.systematic_type = t->text == "normal" ? SystematicType::normal : SystematicType::log_normal;
      if (asked && *asked != *meta.systematic_type)
        throw usage_error("rabbit tensor '" + f_.file_name() + "': the tensor's meta says systematic_type='" + t->text +
                          "' (written by rabbit's TensorWriter), but RabbitReadOptions::systematic_type asks for " + type_name(*asked) +
                          "; drop --systematicType or pass " + t->text);
      m.systematic_type = *meta.systematic_type;
    }
    if (const pickle::Value* s = meta.pickle.find("symmetric_tensor")) {
      if (s->kind != pickle::Kind::boolean) fail(ds, std::string("has a symmetric_tensor that is a ") + pickle::kind_name(s->kind) + ", not a bool");
      meta.symmetric_tensor = s->boolean;
      if (s->boolean != symmetric_)
        fail(ds, std::string("says symmetric_tensor=") + (s->boolean ? "True" : "False") + ", but the systematic tensor is " +
                     (symmetric_ ? "symmetric (hlogk [Bf, P, S], or hlogk_sparse with S columns)" : "asymmetric (hlogk [Bf, P, 2, S], or hlogk_sparse with 2S columns)") +
                     "; the file is inconsistent");
    }
    out.meta = std::move(meta);
    read_channels(out);
  }

  /// rabbit's channels for a tensor without `meta` (its inputdata.py): "ch0" of the unmasked bins and "ch1_masked" of
  /// the rest, each with one Integer axis from 0 named "obs" or "masked", without flow bins.
  static Channel default_channel(bool masked, index_t bins) {
    Axis a;
    a.kind = Axis::Kind::integer;
    a.name = masked ? "masked" : "obs";
    for (index_t k = 0; k <= bins; ++k) a.edges.push_back(static_cast<double>(k));
    Channel c{masked ? "ch1_masked" : "ch0", bins, masked};
    c.axes = {std::move(a)};
    return c;
  }

  /// What RabbitTensor::channels_skipped says when the channels are not the meta's: why, and what they are instead.
  std::string default_channels_note(const std::string& why) const {
    return why + ", so the channels are not known: the bins form one channel '" + default_channel(false, 1).name + "'" +
           (nbf_ > nb_ ? " and the masked ones '" + default_channel(true, 1).name + "'" : "") + ", as rabbit does for a tensor without meta";
  }

  /// The channels of meta's channel_info (§1.7), in its order, each with its hist axes, replacing the default ones
  /// when they describe the tensor's bins: unmasked channels first, B bins in all, then Bf − B masked ones. Anything
  /// that cannot be used leaves the default channels, and RabbitTensor::channels_skipped says why.
  void read_channels(RabbitTensor& out) const {
    using pickle::Kind;
    const pickle::Value* info = out.meta->pickle.find("channel_info");
    std::vector<Channel> channels;
    std::set<std::string> names;
    std::size_t unmasked = 0, masked = 0;
    try {
      if (info == nullptr) throw hist::unreadable_axis("the meta has no channel_info");
      if (info->kind != Kind::dict) throw hist::unreadable_axis(std::string("the meta's channel_info is a ") + pickle::kind_name(info->kind) + ", not a dict");
      for (const auto& entry : info->entries) {
        const pickle::Value &key = entry.first, &value = entry.second;  // (a lambda cannot capture a structured binding in clang 14)
        if (key.kind != Kind::string) throw hist::unreadable_axis(std::string("channel_info has a key that is a ") + pickle::kind_name(key.kind));
        const std::string at = "channel_info['" + key.text + "']";
        if (!names.insert(key.text).second) throw hist::unreadable_axis(at + " is set twice");
        if (value.kind != Kind::dict) throw hist::unreadable_axis(at + " is a " + pickle::kind_name(value.kind) + ", not a dict");
        const auto flag = [&](const char* name) {
          const pickle::Value* f = value.find(name);
          if (f != nullptr && f->kind != Kind::boolean) throw hist::unreadable_axis(at + "['" + name + "'] is a " + pickle::kind_name(f->kind) + ", not a bool");
          return f != nullptr && f->boolean;
        };
        Channel c{key.text, 0, flag("masked")};
        c.flow = flag("flow");
        const pickle::Value* axes = value.find("axes");
        if (axes == nullptr || (axes->kind != Kind::list && axes->kind != Kind::tuple) || axes->items.empty())
          throw hist::unreadable_axis(at + " has no list of axes");
        for (std::size_t k = 0; k < axes->items.size(); ++k) {
          try {
            c.axes.push_back(hist::axis(axes->items[k], static_cast<index_t>(nbf_)));
          } catch (const hist::unreadable_axis& e) {
            throw hist::unreadable_axis(at + "'s axis " + std::to_string(k) + " is " + e.what());
          }
        }
        c.nbins = axes_bins(c.axes, c.flow, static_cast<index_t>(nbf_));  // at most Bf + 1
        if (!c.masked && masked > 0) throw hist::unreadable_axis("unmasked channel '" + c.name + "' follows a masked one in channel_info");
        (c.masked ? masked : unmasked) += static_cast<std::size_t>(c.nbins);
        channels.push_back(std::move(c));
      }
      if (unmasked != nb_ || masked != nbf_ - nb_)
        throw hist::unreadable_axis("channel_info's channels hold " + std::to_string(unmasked) + " unmasked and " + std::to_string(masked) +
                                    " masked bins, but the tensor has " + std::to_string(nb_) + " and " + std::to_string(nbf_ - nb_));
    } catch (const hist::unreadable_axis& e) {
      out.channels_skipped = default_channels_note(std::string(e.what()) + " (meta/pickle_data)");
      return;
    }
    out.model.channels = std::move(channels);
    out.channels_skipped.clear();
  }

  /// Symmetrises M (rabbit's ½xᵀMx depends only on (M + Mᵀ)/2), leaving a symmetric M bitwise unchanged.
  static void add_symmetrised(ExternalTerm& t, const std::map<std::pair<std::size_t, std::size_t>, double>& entries) {
    for (const auto& [rc, v] : entries) {
      const auto mirror = entries.find({rc.second, rc.first});
      const double w = mirror == entries.end() ? 0.0 : mirror->second;
      const double s = v == w ? v : 0.5 * (v + w);
      if (s == 0) continue;
      t.hessian_rows.push_back(static_cast<index_t>(rc.first));
      t.hessian_cols.push_back(static_cast<index_t>(rc.second));
      t.hessian_values.push_back(s);
      if (mirror == entries.end()) {  // the mirror has no entry of its own: add it
        t.hessian_rows.push_back(static_cast<index_t>(rc.second));
        t.hessian_cols.push_back(static_cast<index_t>(rc.first));
        t.hessian_values.push_back(s);
      }
    }
  }

  void read_external_terms(Model& m) {
    if (!has("external_terms")) return;
    const auto root = hdf5::open(f_, "external_terms");
    for (const auto& name : hdf5::children(root)) {
      const std::string base = "external_terms/" + name;
      ExternalTerm t;
      t.name = name;
      t.parameters = names(base + "/params", "the names of the term's parameters", "parameter");
      const std::size_t n = t.parameters.size();
      if (has(base + "/grad_values")) t.gradient = doubles(base + "/grad_values", {n}, "[m] (one gradient entry per parameter of the term)").values;
      const bool dense = has(base + "/hess_dense"), sparse = has(base + "/hess_sparse");
      if (dense && sparse) fail(base + "/hess_dense", "and hess_sparse are both present; a term has one Hessian");
      std::map<std::pair<std::size_t, std::size_t>, double> entries;
      if (dense) {
        const auto h = doubles(base + "/hess_dense", {n, n}, "[m, m] (the term's Hessian over its parameters)");
        for (std::size_t r = 0; r < n; ++r)
          for (std::size_t c = 0; c < n; ++c)
            if (h.values[r * n + c] != 0) entries[{r, c}] = h.values[r * n + c];
      }
      if (sparse) {
        const std::string g = base + "/hess_sparse";
        const auto shape = dense_shape(g, 2);
        if (static_cast<std::size_t>(shape[0]) != n || static_cast<std::size_t>(shape[1]) != n)
          fail(g, "has dense_shape [" + std::to_string(shape[0]) + ", " + std::to_string(shape[1]) + "] but the term has " + std::to_string(n) +
                      " parameters");
        const auto [idx, val] = coo(g);
        for (std::size_t k = 0; k < val.size(); ++k) {
          const std::int64_t r = idx.values[2 * k], c = idx.values[2 * k + 1];
          if (r < 0 || c < 0 || static_cast<std::size_t>(r) >= n || static_cast<std::size_t>(c) >= n)
            fail(g + "/indices", "has entry " + std::to_string(k) + " = (" + std::to_string(r) + ", " + std::to_string(c) + "), outside the term's " +
                                     std::to_string(n) + " parameters");
          if (k > 0) {
            const std::int64_t pr = idx.values[2 * k - 2], pc = idx.values[2 * k - 1];
            if (r < pr || (r == pr && c <= pc))
              fail(g + "/indices", "has entry " + std::to_string(k) + " = (" + std::to_string(r) + ", " + std::to_string(c) + ") after (" +
                                       std::to_string(pr) + ", " + std::to_string(pc) + "); entries must be unique and sorted row-major");
          }
          if (val.values[k] != 0) entries[{static_cast<std::size_t>(r), static_cast<std::size_t>(c)}] = val.values[k];
        }
      }
      add_symmetrised(t, entries);
      m.external_terms.push_back(std::move(t));
    }
  }

};

/// Runs `read` (a Reader's pass over `file`), turning allocation failures into `file_error`s: every large
/// allocation here is sized by the file.
template <class F>
auto guarded(const hdf5::File& file, F&& read) {
  try {
    return read();
  } catch (const std::bad_alloc&) {
    throw file_error("not enough memory to read rabbit tensor '" + file.file_name() + "'; is the file corrupt, or too large for this machine?");
  } catch (const std::length_error&) {
    throw file_error("rabbit tensor '" + file.file_name() + "' declares arrays too large to hold; the file is corrupt");
  }
}

}  // namespace detail::rabbit

FITLIB_PREBUILT_INLINE RabbitTensor read_rabbit(const hdf5::File& file, const RabbitReadOptions& opts) {
  return detail::rabbit::guarded(file, [&] { return detail::rabbit::Reader(file, opts).read(); });
}

FITLIB_PREBUILT_INLINE std::vector<BinRange> rabbit_partition(const hdf5::File& file, index_t count) {
  const RabbitReadOptions whole;
  return detail::rabbit::guarded(file, [&] { return detail::rabbit::Reader(file, whole).partition(count); });
}

FITLIB_PREBUILT_INLINE std::vector<BinRange> rabbit_partition(const std::string& path, index_t count) {
  return rabbit_partition(hdf5::File::open(path), count);
}

FITLIB_PREBUILT_INLINE RabbitTensor read_rabbit(const std::string& path, const RabbitReadOptions& opts, const hdf5::FileOptions& file_opts) {
  file_opts.validate();
  // The digest streams the whole file once more: on a thread of its own, alongside HDF5's reading.
  auto digest = std::async(std::launch::async, [path] { return sha256_file(path); });
  const hdf5::File file = hdf5::File::open(path, hdf5::Access::read_only, file_opts);
  RabbitTensor t = read_rabbit(file, opts);
  t.sha256 = digest.get();
  return t;
}

}  // namespace fitlib::io
