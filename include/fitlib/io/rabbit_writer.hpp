// SPDX-License-Identifier: MIT
// Writes a fitlib::Model as a rabbit input tensor (rabbit-likelihood-and-format.md §1), readable by
// read_rabbit and by rabbit's own FitInputData.
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>
#include <string>
#include <vector>

#include "fitlib/core/error.hpp"
#include "fitlib/io/hdf5.hpp"
#include "fitlib/io/output_file.hpp"
#include "fitlib/io/pickle.hpp"
#include "fitlib/model/model.hpp"

namespace fitlib::io {

struct RabbitWriteOptions {
  /// Store the logk tensor with its half-difference part even when the model is symmetric (H = 0),
  /// so that readers which ignore `meta` (rabbit assumes an asymmetric tensor without it) still read
  /// it correctly; the `meta` pickle's symmetric_tensor says which layout was written.
  bool asymmetric_layout = true;
};

namespace detail::rabbit_writer {

/// rabbit's writeFlatInChunks convention (§1.2): the array flattened, its logical shape in an int64
/// attribute `original_shape`.
template <class T>
void write_flat(const hdf5::Location& loc, const std::string& name, const std::vector<T>& values, const std::vector<std::size_t>& shape) {
  const hdf5::Location ds = hdf5::write(loc, name, std::span<const T>(values));
  std::vector<std::int64_t> s(shape.begin(), shape.end());
  hdf5::write_attribute(ds, "original_shape", std::span<const std::int64_t>(s));
}

/// rabbit's `meta` group (rabbit-likelihood-and-format.md §1.7) as wums' pickle_dump_h5py writes it: attribute
/// narf_h5py_pickle_protocol_version = 1 and the raw pickle bytes as the uint8 dataset `pickle_data` (here gzip
/// above 64 KiB instead of Blosc, so no filter plugin is needed to read it). The pickled dict is TensorWriter's:
/// systematic_type, symmetric_tensor (the layout written), meta_info (empty) and channel_info, one entry per
/// channel with the axes rabbit itself assumes for a tensor without `meta`: a single hist.axis.Integer(0, nbins,
/// underflow=False, overflow=False, name="obs") (the model knows no binning), masked as the channel is, no flow.
inline void write_meta(const hdf5::File& f, const Model& m, bool symmetric_tensor) {
  namespace pk = pickle;
  std::vector<std::pair<std::string, pk::Value>> channels;
  for (const auto& c : m.channels) {
    // hist.axis.Integer's pickle: NEWOBJ, BUILD {'_ax': boost-histogram's integer_none, BUILD (0, size, metadata, min)}
    pk::Value metadata = pk::dict({{"name", pk::string(c.masked ? "masked" : "obs")}, {"label", pk::string("")}});
    pk::Value core = pk::instance("boost_histogram._core.axis.integer_none", {},
                                  pk::tuple({pk::integer(0), pk::integer(c.nbins), std::move(metadata), pk::integer(0)}));
    pk::Value axis = pk::instance("hist.axis.Integer", {}, pk::dict({{"_ax", std::move(core)}}));
    channels.emplace_back(c.name, pk::dict({{"axes", pk::list({std::move(axis)})}, {"masked", pk::boolean(c.masked)}, {"flow", pk::boolean(false)}}));
  }
  const pk::Value meta = pk::dict({
      {"meta_info", pk::dict({})},
      {"channel_info", pk::dict(std::move(channels))},
      {"symmetric_tensor", pk::boolean(symmetric_tensor)},
      {"systematic_type", pk::string(m.systematic_type == SystematicType::normal ? "normal" : "log_normal")},
  });
  const std::vector<std::uint8_t> bytes = pk::encode(meta);
  const hdf5::Location g = hdf5::create_group(f, "meta");
  hdf5::write_attribute(g, "narf_h5py_pickle_protocol_version", std::int64_t{1});
  hdf5::detail::create_and_write(g, "pickle_data", H5T_STD_U8LE, H5T_NATIVE_UINT8, {static_cast<hsize_t>(bytes.size())}, 1, bytes.data());
}

}  // namespace detail::rabbit_writer

/// Writes `m` to `path` (created or truncated) in rabbit's layout: dense (hnorm, hlogk) or sparse
/// (hnorm_sparse, hlogk_sparse) as the model stores its templates, with data, variances, inverse
/// data covariance, sumw/sumw2, groups, NOIs, external terms and the `meta` pickle (systematic_type,
/// symmetric_tensor, channel names, sizes and masked flags; see write_meta). POI priors and constraint
/// centres other than 0 have no place in the format: refused.
inline void write_rabbit(const std::string& path, const Model& m, const RabbitWriteOptions& opts = {}) {
  using detail::rabbit_writer::write_flat;
  m.validate();
  m.require_whole_tensor("write_rabbit");
  for (double c : m.theta0)
    if (c != 0) throw usage_error("write_rabbit: rabbit tensors have no constraint centres (θ₀ = 0); set them at fit time instead");
  if (!m.poi_prior_weights.empty()) throw usage_error("write_rabbit: rabbit tensors have no POI priors; drop them or keep the model in memory");
  const auto B = static_cast<std::size_t>(m.nbins()), Bf = static_cast<std::size_t>(m.nbins_full()), P = static_cast<std::size_t>(m.nprocs()),
             S = static_cast<std::size_t>(m.nsyst());
  const bool asym = !m.symmetric || opts.asymmetric_layout;
  ReplacingFile out(path);  // whole or not at all: a failed write leaves an existing file at `path` as it was
  const hdf5::File f = hdf5::File::create(out.temporary());
  detail::rabbit_writer::write_meta(f, m, !asym);

  std::vector<std::string> procs, signals, systs, unconstrained, groups;
  for (const auto& p : m.processes) {
    procs.push_back(p.name);
    if (p.signal) signals.push_back(p.name);
  }
  for (std::size_t s = 0; s < S; ++s) {
    systs.push_back(m.systematics[s].name);
    if (m.constraint_weights[s] == 0) unconstrained.push_back(m.systematics[s].name);
  }
  std::vector<std::vector<std::int64_t>> members;
  for (const auto& g : m.groups) {
    groups.push_back(g.name);
    members.emplace_back(g.members.begin(), g.members.end());
  }
  hdf5::write_strings(f, "hprocs", procs);
  hdf5::write_strings(f, "hsignals", signals);
  hdf5::write_strings(f, "hsysts", systs);
  hdf5::write_strings(f, "hsystsnoconstraint", unconstrained);
  hdf5::write_strings(f, "hsystgroups", groups);
  hdf5::write_ragged(f, "hsystgroupidxs", members);
  const std::vector<std::int64_t> nois(m.nois.begin(), m.nois.end());
  hdf5::write(f, "hnoiidxs", std::span<const std::int64_t>(nois));
  hdf5::write_strings(f, "hpseudodatanames", {});
  write_flat(f, "hpseudodata", std::vector<double>{}, {B, 0});
  write_flat(f, "hconstraintweights", m.constraint_weights, {S});
  write_flat(f, "hdata_obs", m.data, {B});
  if (!m.data_variance.empty()) write_flat(f, "hdata_var", m.data_variance, {B});
  if (!m.data_covariance_inverse.empty()) write_flat(f, "hdata_cov_inv", m.data_covariance_inverse, {B, B});
  const std::vector<double> nominal = m.nominal_yields();
  write_flat(f, "hsumw", m.sumw.empty() ? nominal : m.sumw, {Bf, P});
  write_flat(f, "hsumw2", m.sumw2.empty() ? std::vector<double>(Bf * P, 0.0) : m.sumw2, {Bf, P});

  const auto nc = static_cast<std::size_t>(m.ncoef());
  const std::size_t ncw = asym ? 2 * S : S;  // logk columns written
  if (const SparseTemplates* sp = m.sparse()) {
    const SparseTemplates& t = *sp;
    std::vector<std::int64_t> ni, li;
    std::vector<double> li_val;
    for (std::size_t b = 0; b < Bf; ++b)
      for (auto i = static_cast<std::size_t>(t.bin_begin[b]); i < static_cast<std::size_t>(t.bin_begin[b + 1]); ++i) {
        ni.push_back(static_cast<std::int64_t>(b));
        ni.push_back(t.cell_process[i]);
        for (auto k = static_cast<std::size_t>(t.row_begin[i]); k < static_cast<std::size_t>(t.row_begin[i + 1]); ++k) {
          li.push_back(static_cast<std::int64_t>(i));
          li.push_back(t.col[k]);
          li_val.push_back(t.val[k]);
        }
      }
    const hdf5::Location gn = hdf5::create_group(f, "hnorm_sparse");
    write_flat(gn, "indices", ni, {ni.size() / 2, 2});
    write_flat(gn, "values", t.cell_nominal, {t.cell_nominal.size()});
    const std::vector<std::int64_t> nshape = {static_cast<std::int64_t>(Bf), static_cast<std::int64_t>(P)};
    hdf5::write_attribute(gn, "dense_shape", std::span<const std::int64_t>(nshape));
    const hdf5::Location gl = hdf5::create_group(f, "hlogk_sparse");
    write_flat(gl, "indices", li, {li.size() / 2, 2});
    write_flat(gl, "values", li_val, {li_val.size()});
    const std::vector<std::int64_t> lshape = {static_cast<std::int64_t>(t.ncells()), static_cast<std::int64_t>(ncw)};
    hdf5::write_attribute(gl, "dense_shape", std::span<const std::int64_t>(lshape));
  } else {
    const DenseTemplates& t = *m.dense();
    write_flat(f, "hnorm", t.nominal, {Bf, P});
    if (asym == !m.symmetric) {
      write_flat(f, "hlogk", t.logk, asym ? std::vector<std::size_t>{Bf, P, 2, S} : std::vector<std::size_t>{Bf, P, S});
    } else {  // symmetric model in the asymmetric layout: [K | H = 0] per cell
      std::vector<double> logk(Bf * P * 2 * S, 0.0);
      for (std::size_t c = 0; c < Bf * P; ++c)
        for (std::size_t s = 0; s < nc; ++s) logk[c * 2 * S + s] = t.logk[c * nc + s];
      write_flat(f, "hlogk", logk, {Bf, P, 2, S});
    }
  }
  for (const auto& t : m.external_terms) {
    const hdf5::Location g = hdf5::create_group(f, "external_terms/" + t.name);
    hdf5::write_strings(g, "params", t.parameters);
    if (!t.gradient.empty()) write_flat(g, "grad_values", t.gradient, {t.gradient.size()});
    if (!t.hessian_values.empty()) {
      const hdf5::Location h = hdf5::create_group(g, "hess_sparse");
      std::vector<std::size_t> order(t.hessian_values.size());  // rabbit's sparse layout is sorted row-major
      for (std::size_t e = 0; e < order.size(); ++e) order[e] = e;
      std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
        return std::pair(t.hessian_rows[a], t.hessian_cols[a]) < std::pair(t.hessian_rows[b], t.hessian_cols[b]);
      });
      std::vector<std::int64_t> idx;
      std::vector<double> val;
      for (std::size_t e : order) {
        idx.push_back(t.hessian_rows[e]);
        idx.push_back(t.hessian_cols[e]);
        val.push_back(t.hessian_values[e]);
      }
      write_flat(h, "indices", idx, {val.size(), 2});
      write_flat(h, "values", val, {val.size()});
      const std::vector<std::int64_t> shape(2, static_cast<std::int64_t>(t.parameters.size()));
      hdf5::write_attribute(h, "dense_shape", std::span<const std::int64_t>(shape));
    }
  }
  f.flush();  // reports a full disk (closing cannot)
  out.commit();
}

}  // namespace fitlib::io
