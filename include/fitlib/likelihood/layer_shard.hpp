// SPDX-License-Identifier: MIT
// The device-layer shard: a pass as a GPU runs it (GEMM, the per-bin functions launched, GEMM), over any device layer.
#pragma once

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "fitlib/core/error.hpp"
#include "fitlib/core/types.hpp"
#include "fitlib/device/host_layer.hpp"
#include "fitlib/device/policy.hpp"
#include "fitlib/device/shard_bytes.hpp"
#include "fitlib/likelihood/bbstat.hpp"
#include "fitlib/likelihood/bin_algebra.hpp"
#include "fitlib/likelihood/columns.hpp"
#include "fitlib/likelihood/device_templates.hpp"
#include "fitlib/likelihood/options.hpp"
#include "fitlib/likelihood/partial_request.hpp"
#include "fitlib/likelihood/shard_identity.hpp"
#include "fitlib/likelihood/slot_inputs.hpp"
#include "fitlib/likelihood/templates.hpp"
#include "fitlib/model/model.hpp"

namespace fitlib {

template <class Policy, class Storage>
class Shard;

template <class B>
inline constexpr bool is_layered_backend_v = false;
template <class Layer>
inline constexpr bool is_layered_backend_v<backend::layered<Layer>> = true;

namespace detail {

/// The launched per-bin kernels of the device-layer shard: trivially copyable functors over the
/// views of bin_algebra.hpp, one call per bin of a chunk, each bin with its own scratch.
struct ScratchLayout {
  index_t P = 0, nx = 0;
  bool variance = false;  ///< the variance pass's extra doubles
  /// Per bin: P·nx cell yields, nx curvatures, and doubles for g, δ, u₁, u₂ (P·nx each), m (P)
  /// and, in the variance pass, β̂, m₀, dm and work (6·P; the Jacobian pass uses β̂, w and dm of them).
  FITLIB_HOST_DEVICE index_t doubles() const { return 4 * P * nx + P + (variance ? 6 * P : 0); }
  FITLIB_HOST_DEVICE BinScratch at(const BinScratch& base, index_t t) const {
    double* d = base.g + t * doubles();
    const index_t pn = P * nx;
    return {base.cy + t * pn, d, d + pn, d + 2 * pn, d + 3 * pn, d + 4 * pn, base.curv + t * nx};
  }
  FITLIB_HOST_DEVICE double* extra(const BinScratch& base, index_t t) const { return base.g + t * doubles() + 4 * P * nx + P; }
};


template <class Cells>
struct DataBinKernel {
  BinPass<Cells> pass;
  index_t first;      ///< the chunk's first bin (local to the range)
  index_t range0;     ///< the range's first local bin: bin i's rows start at (i − range0)·P
  const double* L;
  index_t ldL;
  double* U;
  index_t ldU;
  double* poi;        ///< `[npoi × nb]` per bin of the range
  index_t poi_stride;
  double* nll;        ///< `[nx]` per bin of the range, or null
  ScratchLayout layout;
  BinScratch scratch;  ///< the chunk's base: bin t's at layout.at(scratch, t)
  FITLIB_HOST_DEVICE void operator()(index_t t) const {
    const index_t i = first + t, r = i - range0;
    data_bin(pass, i, r, L + r * pass.P, ldL, U + r * pass.P, ldU, poi + r * poi_stride, nll ? nll + r * pass.nx : nullptr, layout.at(scratch, t));
  }
};

template <class Cells>
struct AggregateBinKernel {
  BinPass<Cells> pass;
  index_t first, range0;
  const double* L;
  index_t ldL;
  BlockView<double> nu, q, dnu, dq;  ///< rows r = i − range0
  ScratchLayout layout;
  BinScratch scratch;  ///< the chunk's base: bin t's at layout.at(scratch, t)
  FITLIB_HOST_DEVICE void operator()(index_t t) const {
    const index_t i = first + t, r = i - range0;
    aggregate_bin(pass, i, r, L + r * pass.P, ldL, nu, q, dnu, dq, layout.at(scratch, t));
  }
};

template <class Cells>
struct BetaBinKernel {
  BinPass<Cells> pass;
  index_t first;
  const double* L;
  double* beta;
  index_t per;
  ScratchLayout layout;
  BinScratch scratch;  ///< the chunk's base: bin t's at layout.at(scratch, t)
  FITLIB_HOST_DEVICE void operator()(index_t t) const {
    const index_t i = first + t;
    beta_bin(pass, i, L + i * pass.P, beta + i * per, layout.at(scratch, t));
  }
};

template <class Cells>
struct VarianceBinKernel {
  BinPass<Cells> pass;
  index_t first;
  const double* L;
  index_t ldL;
  double* var;  ///< `[nv]` per bin
  ScratchLayout layout;
  BinScratch scratch;  ///< the chunk's base: bin t's at layout.at(scratch, t)
  FITLIB_HOST_DEVICE void operator()(index_t t) const {
    const index_t i = first + t, P = pass.P;
    double* e = layout.extra(scratch, t);
    variance_bin(pass, i, L + i * P, ldL, var + i * pass.nv, e, e + P, e + 2 * P, e + 3 * P, layout.at(scratch, t));
  }
};

template <class Cells>
struct JacobianBinKernel {
  BinPass<Cells> pass;
  index_t first, range0, ndata;
  bool profiled;
  JacobianRows rows;
  const double* L;
  index_t ldL;
  double *o, *J, *bvar;  ///< bin i's rows from (i − range0)·(1 or P); J `[rows × nv]` row-major
  ScratchLayout layout;
  BinScratch scratch;  ///< the chunk's base: bin t's at layout.at(scratch, t)
  FITLIB_HOST_DEVICE void operator()(index_t t) const {
    const index_t i = first + t, r = i - range0, P = pass.P;
    double* e = layout.extra(scratch, t);
    const bool prof = profiled && i < ndata;
    if (rows == JacobianRows::processes)
      process_jacobian_bin(pass, i, L + r * P, ldL, prof, o + r * P, J + r * P * pass.nv, bvar + r * P, e, e + P, e + 2 * P, e + 3 * P, e + 4 * P,
                           layout.at(scratch, t));
    else
      jacobian_bin(pass, i, L + r * P, ldL, prof, o + r, J + r * pass.nv, bvar + r, e, e + P, e + 2 * P, layout.at(scratch, t));
  }
};

template <class Cells>
struct YieldsBinKernel {
  BinPass<Cells> pass;
  const double* L;
  double* nu;
  FITLIB_HOST_DEVICE void operator()(index_t i) const { yields_bin(pass, i, L + i * pass.P, nu + i * pass.P); }
};

}  // namespace detail

/// A shard generic over a device layer (device/host_layer.hpp, device_layer): its bins' templates,
/// nominal yields, data slots and bin-by-bin constants live in the layer's buffers; only the
/// coefficient columns go down and `[ncoef × columns]` products and per-bin POI sums come back. A
/// pass is one GEMM for the forward products L = K·C of every cell, the per-bin functions of
/// bin_algebra.hpp launched over the bins (the same code the host shard runs), and one GEMM for
/// the backward products Kᵀ·U (for sparse templates a CSR and a CSC kernel instead of the GEMMs;
/// likelihood/device_templates.hpp); the host reduces the per-bin sums in bin order. The dense Hessian is
/// nparams HVPs at one point in one such pass (the forward GEMM against [I; diag g'] gives every
/// cell's effective row), symmetrized.
///
/// Results are reproducible for a fixed layer, shard layout and column width, not bitwise those of
/// the host shard (a GEMM's summation order depends on its shape; docs/likelihood.md,
/// "Determinism").
template <class Policy, class Storage>
  requires is_layered_backend_v<backend_of_t<Policy>>
class Shard<Policy, Storage> : public detail::ShardIdentity<typename Policy::shard_resource> {
  using Layer = typename backend_of_t<Policy>::layer;
  template <class T>
  using buffer = typename Layer::template buffer<T>;
  using Templates = detail::DeviceTemplates<Storage, Layer>;
  using Cells = typename Templates::cells_type;
  using Identity = detail::ShardIdentity<typename Policy::shard_resource>;
  using Identity::model_, Identity::range_, Identity::ndata_;

 public:
  using policy_type = Policy;
  using resource_type = typename Policy::shard_resource;
  using storage_type = Storage;

  Shard(std::shared_ptr<const Model> model, BinRange bins, resource_type resource = {}, const LikelihoodOptions& opts = {}, index_t index = 0)
      : Identity(std::move(model), bins, resource, index),
        layer_(resource),
        data_term_(opts.data_term),
        cols_(*model_, opts.allow_negative_poi),
        templates_(reserved(layer_, *model_, bins, ndata_, cols_.nparams(), index)) {
    const Model& m = *model_;
    P_ = m.nprocs();
    const std::vector<index_t> poi = m.poi_of_process();
    layer_.upload(std::span<const index_t>(poi), poi_of_process_);
    const std::vector<double> r0 = detail::default_strengths(m);
    layer_.upload(std::span<const double>(r0), r0_);
    set_data(this->model_counts(), this->model_variances());
    bb_ = BinByBinStats::build(m, {bins.begin, bins.begin + ndata_}, opts.bin_by_bin, opts.data_term);
    upload_stats();
  }

  index_t nparams() const { return cols_.nparams(); }

  void set_data(std::span<const double> counts, std::span<const double> variances) { set_slot(0, counts, variances, {}); }

  /// As the host shard's (Shard::set_slot): the slot's counts, aux and bin flags go to the device.
  void set_slot(index_t slot, std::span<const double> counts, std::span<const double> variances, std::span<const std::uint8_t> bins) {
    const std::vector<double> aux = detail::slot_aux(range_, ndata_, data_term_, counts, variances, bins, slot);
    if (static_cast<index_t>(slots_.size()) <= slot) slots_.resize(static_cast<std::size_t>(slot + 1));
    DeviceSlot& d = slots_[static_cast<std::size_t>(slot)];
    layer_.upload(counts, d.n);
    layer_.upload(std::span<const double>(aux), d.aux);
    layer_.upload(bins, d.bins);
    d.has_bins = !bins.empty();
    d.set = true;
  }
  void clear_slots() { slots_.resize(1); }

  /// One pass: C down, the forward GEMM, the per-bin functions, the backward GEMM, the products
  /// and the per-bin sums back (reduced in bin order), then the host's write_partials.
  void partials(const PartialRequest& rq) {
    const index_t nx = rq.x.cols, nv = rq.v.empty() ? 0 : rq.v.cols;
    const bool observables = rq.observables.size() > 0, coupled = observables || !rq.coupled_y.empty();
    const BinRange bins = observables ? rq.observables : BinRange{0, ndata_};
    cols_.prepare(rq.x, rq.v);
    const bool want_u = !rq.grad.empty() || (nv > 0 && !cols_.symmetric());
    const index_t nu = want_u ? nx : 0;
    detail::BinPass<Cells> pass = bin_pass(observables ? exact_stats_ : stats_, observables ? exact_ : bb_, nx, nv, rq.v, rq.slots);
    pass.nu = nu;
    pass.coupled = coupled;
    if (coupled) {
      pass.coupled_y = upload_rows(rq.coupled_y, y_);
      if (nv > 0) pass.coupled_z = upload_rows(rq.coupled_z, z_);
    }
    data_pass(pass, bins, rq.nll != nullptr && !coupled);
    for (index_t j = 0; rq.nll && j < nx; ++j) rq.nll[j] = host_nll_[static_cast<std::size_t>(j)];
    cols_.write_partials(host_acc_.data(), host_poi_.data(), rq.v, nx, nu, rq.grad, rq.hvp, rq.accumulate,
                         [&](index_t j) { return host_acc_.data() + j * cols_.ncoef(); });
  }
  void fence() { layer_.fence(); }

  /// The data-term Hessian of column j: nparams HVPs at x_j in one pass (see the class comment);
  /// with the covariance term its local part, and the rows R_b = dν'_b/dx − y_b·dq_b/dx.
  void hessian(ConstBlockView<double> x, index_t j, BlockView<double> hess, ConstBlockView<double> coupled_y = {},
               BlockView<double> coupled_rows = {}, index_t slot = 0) {
    const index_t n = nparams();
    const ConstBlockView<double> xj = x.block_cols(j, 1);
    const ConstBlockView<double> I = identity(n);
    std::vector<double> h(static_cast<std::size_t>(n * n)), zeros;
    PartialRequest rq;
    rq.x = xj;
    rq.v = I;
    rq.hvp = {h.data(), n, n};
    rq.slots = std::span(&slot, 1);
    const bool coupled = !coupled_y.empty();
    if (coupled) {
      zeros.assign(static_cast<std::size_t>(ndata_ * n), 0.0);
      rq.coupled_y = coupled_y.block_cols(j, 1);
      rq.coupled_z = {zeros.data(), ndata_, n};
    }
    partials(rq);
    for (index_t c = 0; c < n; ++c)
      for (index_t r = 0; r < n; ++r) hess(r, c) = 0.5 * (h[static_cast<std::size_t>(r + c * n)] + h[static_cast<std::size_t>(c + r * n)]);
    if (!coupled) return;
    std::vector<double> nu(static_cast<std::size_t>(ndata_)), q(nu.size()), dnu(static_cast<std::size_t>(ndata_ * n)), dq(dnu.size());
    coupled_aggregates(xj, I, {nu.data(), ndata_, 1}, {q.data(), ndata_, 1}, {dnu.data(), ndata_, n}, {dq.data(), ndata_, n});
    for (index_t c = 0; c < n; ++c)
      for (index_t b = 0; b < ndata_; ++b)
        coupled_rows(b, c) = dnu[static_cast<std::size_t>(b + c * ndata_)] - coupled_y(b, j) * dq[static_cast<std::size_t>(b + c * ndata_)];
  }

  /// β̂ of the data bins at column 0 (as the host shard's).
  void bin_by_bin_parameters(ConstBlockView<double> x, std::span<double> beta, ConstBlockView<double> coupled_y = {}) {
    const index_t per = bb_.per_bin();
    if (static_cast<index_t>(beta.size()) != ndata_ * per)
      throw usage_error("bin_by_bin_parameters needs " + std::to_string(ndata_ * per) + " entries for this shard");
    cols_.prepare(x.block_cols(0, 1), {});
    detail::BinPass<Cells> pass = bin_pass(stats_, bb_, 1, 0, {}, {});
    pass.coupled = !coupled_y.empty();
    if (pass.coupled) pass.coupled_y = upload_rows(coupled_y.block_cols(0, 1), y_);
    forward({0, ndata_}, 1);
    layer_.zero(out_, ndata_ * per);
    for_chunks(ndata_, layout(1), [&](index_t first, index_t count) {
      layer_.launch(count, detail::BetaBinKernel<Cells>{pass, first, layer_.data(L_), layer_.data(out_), per, layout(1), scratch_base()});
    });
    layer_.download(out_, beta);
    layer_.fence();
  }

  /// The bin-by-bin part of the global impacts (as the host shard's), per-bin sums reduced in bin order.
  void bin_by_bin_variance(ConstBlockView<double> x, ConstBlockView<double> v, std::span<double> var) {
    const index_t nv = v.cols;
    if (!bb_.enabled) return;
    cols_.prepare(x.block_cols(0, 1), v);
    const detail::BinPass<Cells> pass = bin_pass(stats_, bb_, 1, nv, v, {});
    forward({0, ndata_}, 1 + nv);
    layer_.zero(out_, ndata_ * nv);
    const detail::ScratchLayout lay{P_, 1, true};
    for_chunks(ndata_, lay, [&](index_t first, index_t count) {
      layer_.launch(count, detail::VarianceBinKernel<Cells>{pass, first, layer_.data(L_), ndata_ * P_, layer_.data(out_), lay, scratch_base()});
    });
    std::vector<double> part(static_cast<std::size_t>(ndata_ * nv));
    layer_.download(out_, std::span(part));
    layer_.fence();
    for (index_t i = 0; i < ndata_; ++i)
      for (index_t k = 0; k < nv; ++k) var[static_cast<std::size_t>(k)] += part[static_cast<std::size_t>(i * nv + k)];
  }

  /// As the host shard's: the local bins `r`' yields (summed or per process), their derivatives along every parameter
  /// (the forward GEMM against the unit directions gives every cell's effective row, as for the Hessian) and β's own
  /// variance.
  void jacobian(ConstBlockView<double> x, BinRange r, bool profiled, JacobianRows rows, std::span<double> o, std::span<double> J,
                std::span<double> bvar) {
    const index_t n = nparams(), nr = r.size() * (rows == JacobianRows::processes ? P_ : 1);
    const ConstBlockView<double> I = identity(n);
    cols_.prepare(x.block_cols(0, 1), I);
    const detail::BinPass<Cells> pass = bin_pass(stats_, bb_, 1, n, I, {});
    forward(r, 1 + n);
    // Outputs packed: J [nr × n] row-major, then o and bvar [nr] each.
    layer_.zero(out_, nr * (n + 2));
    double* out = layer_.data(out_);
    const detail::ScratchLayout lay{P_, 1, true};
    for_chunks(r.size(), lay, [&](index_t first, index_t count) {
      layer_.launch(count, detail::JacobianBinKernel<Cells>{pass, r.begin + first, r.begin, ndata_, profiled, rows, layer_.data(L_), r.size() * P_,
                                                            out + nr * n, out, out + nr * (n + 1), lay, scratch_base()});
    });
    std::vector<double> host(static_cast<std::size_t>(nr * (n + 2)));
    layer_.download(out_, std::span(host));
    layer_.fence();
    std::copy_n(host.begin(), nr * n, J.begin());
    std::copy_n(host.begin() + nr * n, nr, o.begin());
    std::copy_n(host.begin() + nr * (n + 1), nr, bvar.begin());
  }

  /// As the host shard's: β held at `beta` (empty: profiled again); the constants go down again.
  void fix_bin_by_bin(std::span<const double> beta) {
    if (!profiled_bb_) profiled_bb_ = bb_;
    if (beta.empty()) {
      bb_ = *profiled_bb_;
    } else {
      if (static_cast<index_t>(beta.size()) != ndata_ * bb_.per_bin())
        throw usage_error("fix_bin_by_bin needs " + std::to_string(ndata_ * bb_.per_bin()) + " entries for this shard");
      if (!bb_.enabled) return;
      bb_.beta0.assign(beta.begin(), beta.end());
      std::fill(bb_.fixed.begin(), bb_.fixed.end(), 1);
    }
    upload_stats();
  }

  void coupled_aggregates(ConstBlockView<double> x, ConstBlockView<double> v, BlockView<double> nu, BlockView<double> q, BlockView<double> dnu,
                          BlockView<double> dq) {
    aggregate_pass(x, v, {0, ndata_}, stats_, bb_, nu, q, dnu, dq);
  }
  void observables(ConstBlockView<double> x, ConstBlockView<double> v, BinRange r, BlockView<double> o, BlockView<double> dobs) {
    aggregate_pass(x, v, r, exact_stats_, exact_, o, {}, dobs, {});
  }

  void yields(ConstBlockView<double> x, index_t j, std::span<double> nu) {
    if (static_cast<index_t>(nu.size()) != range_.size() * P_)
      throw usage_error("yields of bins [" + std::to_string(range_.begin) + ", " + std::to_string(range_.end) + ") need an output of " +
                        std::to_string(range_.size() * P_) + " entries");
    cols_.prepare(x.block_cols(j, 1), {});
    const detail::BinPass<Cells> pass = bin_pass(stats_, bb_, 1, 0, {}, {});
    forward({0, range_.size()}, 1);
    layer_.zero(out_, range_.size() * P_);
    layer_.launch(range_.size(), detail::YieldsBinKernel<Cells>{pass, layer_.data(L_), layer_.data(out_)});
    layer_.download(out_, nu);
    layer_.fence();
  }

 private:
  /// The templates on the device, once the device has been checked to hold the whole shard (before any upload).
  static Templates reserved(Layer& layer, const Model& m, BinRange bins, index_t data_bins, index_t nparams, index_t index) {
    layer.reserve(Templates::bytes(m, bins, data_bins, nparams),
                  "shard " + std::to_string(index) + " (bins [" + std::to_string(bins.begin) + ", " + std::to_string(bins.end) + "))");
    return Templates(layer, m, bins);
  }

  /// The n × n identity (kept): the unit directions of every parameter.
  ConstBlockView<double> identity(index_t n) {
    if (static_cast<index_t>(eye_.size()) != n * n) {
      eye_.assign(static_cast<std::size_t>(n * n), 0.0);
      for (index_t k = 0; k < n; ++k) eye_[static_cast<std::size_t>(k * n + k)] = 1.0;
    }
    return {eye_.data(), n, n};
  }

  struct DeviceSlot {
    buffer<double> n, aux;
    buffer<std::uint8_t> bins;
    bool has_bins = false, set = false;
  };
  /// A BinByBinStats' arrays on the device.
  struct DeviceStats {
    buffer<double> kstat, sigma, beta0;
    buffer<unsigned char> fixed, active;
  };

  /// The per-bin scratch of one launch is kept within this (a GPU then runs a pass's bins in one or
  /// a few launches wide enough to fill it; at least 1024 bins per launch).
  static constexpr index_t scratch_bytes = index_t{64} << 20;

  detail::ScratchLayout layout(index_t nx) const { return {P_, nx}; }
  /// f(first, count) over the chunks of `nbins` bins, the per-bin scratch sized for a chunk (the
  /// per-bin functions write every scratch entry they read, as the host shard's reused workspaces).
  template <class F>
  void for_chunks(index_t nbins, detail::ScratchLayout lay, F&& f) {
    const index_t per_bin = lay.doubles() * static_cast<index_t>(sizeof(double)) + P_ * lay.nx * static_cast<index_t>(sizeof(detail::CellYield)) +
                            lay.nx * static_cast<index_t>(sizeof(detail::BinCurvature));
    const index_t chunk = std::min(std::max<index_t>(1024, scratch_bytes / per_bin), std::max<index_t>(nbins, 1));
    layer_.resize(scratch_, chunk * lay.doubles());
    layer_.resize(scratch_cy_, chunk * P_ * lay.nx);
    layer_.resize(scratch_curv_, chunk * lay.nx);
    for (index_t b = 0; b < nbins; b += chunk) f(b, std::min(chunk, nbins - b));
  }
  detail::BinScratch scratch_base() {
    return {layer_.data(scratch_cy_), layer_.data(scratch_), nullptr, nullptr, nullptr, nullptr, layer_.data(scratch_curv_)};
  }

  void upload_stats() {
    auto up = [&](const BinByBinStats& s, DeviceStats& d) {
      layer_.upload(std::span<const double>(s.kstat), d.kstat);
      layer_.upload(std::span<const double>(s.sigma), d.sigma);
      layer_.upload(std::span<const double>(s.beta0), d.beta0);
      layer_.upload(std::span<const unsigned char>(s.fixed), d.fixed);
      layer_.upload(std::span<const unsigned char>(s.active), d.active);
    };
    up(bb_, stats_);
    up(exact_, exact_stats_);
  }

  /// The per-bin algebra's view: device pointers throughout (the columns' strengths and the
  /// slots' views go down here).
  detail::BinPass<Cells> bin_pass(const DeviceStats& ds, const BinByBinStats& st, index_t nx, index_t nv, ConstBlockView<double> v,
                                  std::span<const index_t> slots) {
    detail::BinPass<Cells> a;
    a.cells = templates_.cells(layer_);
    a.bb = st.view();
    a.bb.kstat = layer_.data(ds.kstat);
    a.bb.sigma = layer_.data(ds.sigma);
    a.bb.beta0 = layer_.data(ds.beta0);
    a.bb.fixed = layer_.data(ds.fixed);
    a.bb.active = layer_.data(ds.active);
    a.term = data_term_;
    a.type = model_->systematic_type;
    a.P = P_;
    a.npoi = cols_.npoi();
    a.nx = nx;
    a.nv = nv;
    a.poi_of_process = layer_.data(poi_of_process_);
    a.r0 = layer_.data(r0_);
    layer_.upload(std::span<const detail::Strength>(cols_.strengths(), static_cast<std::size_t>(cols_.npoi() * nx)), strengths_);
    a.strengths = layer_.data(strengths_);
    this->check_slot_count(slots, nx);
    std::vector<detail::SlotView> views(static_cast<std::size_t>(nx));
    for (index_t j = 0; j < nx; ++j) {
      const DeviceSlot& d = this->slot_of(slots_, slots, j);
      views[static_cast<std::size_t>(j)] = {layer_.data(d.n), layer_.data(d.aux), d.has_bins ? layer_.data(d.bins) : nullptr};
    }
    layer_.upload(std::span<const detail::SlotView>(views), slot_views_);
    a.slots = layer_.data(slot_views_);
    if (!v.empty()) a.v = upload_rows(v, v_);
    return a;
  }

  /// A host block into a packed device buffer, as a view of it.
  ConstBlockView<double> upload_rows(ConstBlockView<double> b, buffer<double>& dev) {
    std::vector<double> packed(static_cast<std::size_t>(b.rows * b.cols));
    for (index_t c = 0; c < b.cols; ++c) std::copy_n(b.col(c), b.rows, packed.begin() + c * b.rows);
    layer_.upload(std::span<const double>(packed), dev);
    return {layer_.data(dev), b.rows, b.cols};
  }

  /// L = K·C for the cells of local bins `bins` and the first nf columns of C, into L_ (`[bins·P × nf]`).
  void forward(BinRange bins, index_t nf) {
    const index_t nc = cols_.ncoef();
    layer_.upload(std::span<const double>(cols_.coef(), static_cast<std::size_t>(nc * nf)), C_);
    layer_.resize(L_, bins.size() * P_ * nf);  // every row a bin's cells read is written
    templates_.forward(layer_, bins, nf, layer_.data(C_), layer_.data(L_));
  }

  /// The data pass over `bins`: forward GEMM, data_bin launched per bin, backward GEMM; returns the
  /// backward products (`[ncoef × nb]`), the POI sums (`[npoi × nb]`) and the values (`[nx]`,
  /// when `values`) in host_acc_, host_poi_ and host_nll_, the per-bin sums added in bin order.
  void data_pass(const detail::BinPass<Cells>& pass, BinRange bins, bool values) {
    const index_t nx = pass.nx, nb = pass.nu + pass.nv, nf = nx + pass.nv, nc = cols_.ncoef(), npoi = cols_.npoi();
    const index_t nbins = bins.size(), cells = nbins * P_, ps = npoi * nb;
    forward(bins, nf);
    layer_.zero(U_, cells * nb);
    layer_.zero(poi_, nbins * ps);
    layer_.zero(nll_, values ? nbins * nx : 0);
    for_chunks(nbins, layout(nx), [&](index_t first, index_t count) {
      layer_.launch(count, detail::DataBinKernel<Cells>{pass, bins.begin + first, bins.begin, layer_.data(L_), cells, layer_.data(U_), cells,
                                                        layer_.data(poi_), ps, values ? layer_.data(nll_) : nullptr, layout(nx),
                                                        scratch_base()});
    });
    layer_.resize(acc_, nc * nb);  // the backward products write every entry
    templates_.backward(layer_, bins, nb, layer_.data(U_), layer_.data(acc_));
    host_acc_.resize(static_cast<std::size_t>(nc * nb));
    host_part_.resize(static_cast<std::size_t>(nbins * ps));
    host_vals_.resize(static_cast<std::size_t>(values ? nbins * nx : 0));
    layer_.download(acc_, std::span(host_acc_));
    layer_.download(poi_, std::span(host_part_));
    if (values) layer_.download(nll_, std::span(host_vals_));
    layer_.fence();
    host_poi_.assign(static_cast<std::size_t>(std::max<index_t>(ps, 1)), 0.0);
    host_nll_.assign(static_cast<std::size_t>(nx), 0.0);
    for (index_t i = 0; i < nbins; ++i) {
      for (index_t e = 0; e < ps; ++e) host_poi_[static_cast<std::size_t>(e)] += host_part_[static_cast<std::size_t>(i * ps + e)];
      for (index_t j = 0; values && j < nx; ++j) host_nll_[static_cast<std::size_t>(j)] += host_vals_[static_cast<std::size_t>(i * nx + j)];
    }
  }

  /// The forward-only pass (coupled aggregates, observables) over local bins `bins`.
  void aggregate_pass(ConstBlockView<double> x, ConstBlockView<double> v, BinRange bins, const DeviceStats& ds, const BinByBinStats& st,
                      BlockView<double> nu, BlockView<double> q, BlockView<double> dnu, BlockView<double> dq) {
    const index_t nx = x.cols, nv = v.empty() ? 0 : v.cols, nr = bins.size();
    cols_.prepare(x, v);
    const detail::BinPass<Cells> pass = bin_pass(ds, st, nx, nv, v, {});
    forward(bins, nx + nv);
    // Outputs packed per kind: [nr × nx] twice, then [nr × nv] twice.
    layer_.zero(out_, 2 * nr * (nx + nv));
    double* o = layer_.data(out_);
    const BlockView<double> dnu_d(o, nr, nv), dq_d(o + nr * nv, nr, nv), nu_d(o + 2 * nr * nv, nr, nx), q_d(o + 2 * nr * nv + nr * nx, nr, nx);
    for_chunks(nr, layout(nx), [&](index_t first, index_t count) {
      layer_.launch(count, detail::AggregateBinKernel<Cells>{pass, bins.begin + first, bins.begin, layer_.data(L_), nr * P_, nu_d, q.empty() ? BlockView<double>{} : q_d,
                                                             nv > 0 ? dnu_d : BlockView<double>{}, nv > 0 && !dq.empty() ? dq_d : BlockView<double>{},
                                                             layout(nx), scratch_base()});
    });
    std::vector<double> host(static_cast<std::size_t>(2 * nr * (nx + nv)));
    layer_.download(out_, std::span(host));
    layer_.fence();
    auto put = [&](BlockView<double> to, const double* from) {
      for (index_t c = 0; c < to.cols; ++c)
        for (index_t r = 0; r < to.rows; ++r) to(r, c) = from[r + c * nr];
    };
    put(nu, host.data() + 2 * nr * nv);
    if (!q.empty()) put(q, host.data() + 2 * nr * nv + nr * nx);
    if (!dnu.empty()) put(dnu, host.data());
    if (!dq.empty()) put(dq, host.data() + nr * nv);
  }

  Layer layer_;
  DataTerm data_term_;
  detail::ParameterColumns cols_;
  Templates templates_;
  index_t P_ = 0;
  BinByBinStats bb_, exact_;
  std::optional<BinByBinStats> profiled_bb_;
  std::vector<DeviceSlot> slots_ = std::vector<DeviceSlot>(1);
  // Device buffers: the shard's data, then each pass's columns, products and per-bin sums.
  buffer<double> r0_;
  buffer<index_t> poi_of_process_;
  DeviceStats stats_, exact_stats_;
  buffer<detail::Strength> strengths_;
  buffer<detail::SlotView> slot_views_;
  buffer<double> C_, L_, U_, acc_, poi_, nll_, v_, y_, z_, out_, scratch_;
  buffer<detail::CellYield> scratch_cy_;
  buffer<detail::BinCurvature> scratch_curv_;
  // Host buffers, reused: what a data pass brings back, and the Hessian's unit directions.
  std::vector<double> host_acc_, host_poi_, host_nll_, host_part_, host_vals_, eye_;
};

}  // namespace fitlib
