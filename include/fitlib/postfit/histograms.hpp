// SPDX-License-Identifier: MIT
// Prefit and postfit histograms: the predicted yields of every bin, per process and summed, with linearised variances.
#pragma once

#include <Eigen/Cholesky>
#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "fitlib/core/error.hpp"
#include "fitlib/core/types.hpp"
#include "fitlib/detail/spd_inverse.hpp"
#include "fitlib/likelihood/bbstat.hpp"
#include "fitlib/minimize/fit.hpp"
#include "fitlib/minimize/status.hpp"
#include "fitlib/model/model.hpp"
#include "fitlib/postfit/chi2.hpp"
#include "fitlib/postfit/held_beta.hpp"

namespace fitlib {

/// The predictions of every bin, masked channels included (rabbit's unfolded yields), per process and summed, before
/// and after the fit, as rabbit's --saveHists --saveHistsPerProcess --computeHistErrors writes them. The variance of
/// each bin's sum comes from the parameters' covariance C by linear propagation, var_b = (J·C·Jᵀ)_bb with J the
/// sums' derivatives along every parameter (Likelihood::yield_jacobian, built as the Hessian's rows are), as ‖R⁻¹·J_bᵀ‖²
/// for the Hessian H = R·Rᵀ of the free parameters: bins·n² flops, a fraction of one dense Hessian's, never one pass
/// per bin. Bins are numbered as in the model (channel by channel, Model::channels). With bin-by-bin statistics, as rabbit has them: the yields carry β (β̂ postfit in the
/// data bins, β₀ elsewhere), J is taken through β̂(x), and each bin's variance adds cᵀ·G_ββ⁻¹·c, β's own (c = ∂ν̃/∂β;
/// G_ββ its constraint's curvature, plus the data term's where data constrain β): the variance of the joint fit of x
/// and β (bbstat.hpp, beta_variance).
struct Histograms {
  index_t nbins = 0;   ///< every bin, masked channels included (Model::nbins_full)
  index_t nprocs = 0;
  /// The observed counts the fit used (Likelihood::data) and their variances, of the unmasked bins only, `[nbins of
  /// the data term]` (the masked channels have no data).
  std::vector<double> data, data_variance;
  /// Prefit: at the default parameters and β₀, with the prefit covariance diag(1/w) of the constrained nuisances
  /// (the POIs and the unconstrained nuisances with variance 0, rabbit's default) and β's prior.
  std::vector<double> prefit;            ///< ν[b, p], `[nbins × nprocs]` row-major
  std::vector<double> prefit_total;      ///< Σ_p ν[b, p], `[nbins]`
  std::vector<double> prefit_variance;   ///< of prefit_total, `[nbins]`
  /// Postfit: at the fit's minimum, with its covariance (frozen parameters held); NaN variances where the
  /// covariance is not a covariance (FitResult::covariance_status other than accurate).
  std::vector<double> postfit, postfit_total, postfit_variance;
  /// With HistogramOptions::process_variances (rabbit's --computeHistErrorsPerProcess): the variance of each process's
  /// yield in every bin, `[nbins × nprocs]` row-major as `prefit`, by the same propagation through each process's own
  /// Jacobian, plus β's own share of it (bbstat.hpp, process_beta_variances); empty otherwise. A lite β scales all the
  /// processes of a bin together, so β's shares are fully correlated between them.
  std::vector<double> prefit_process_variance, postfit_process_variance;
  /// With HistogramOptions::covariance (rabbit's --computeHistCov), per channel (Model::channels' order, masked ones
  /// included) the covariance of its summed yields, `[bins × bins]` row-major, its diagonal the variances above (the
  /// same numbers); empty otherwise. Bins of different channels are correlated too, through the parameters; these blocks
  /// leave that out, as rabbit's per-channel histograms do.
  std::vector<std::vector<double>> prefit_covariance, postfit_covariance;
  /// With HistogramOptions::variations (rabbit's --computeVariations): each bin's summed yield with each parameter
  /// moved down and up by its σ, linearly, `[nbins × nparams × 2]` row-major (down, up): ν_b ∓ J_bi·σ_i, J at β held
  /// (β₀ prefit, β̂ postfit; rabbit's uncorrelated variations). σ: prefit 1/√w for a constrained nuisance, 1 for an
  /// unconstrained one and 0 for the POIs (rabbit's prefit covariance with unit errors for the unconstrained), postfit
  /// √C_ii (0 for a frozen parameter, NaN where the covariance is not usable). Empty otherwise.
  std::vector<double> prefit_variations, postfit_variations;
  /// With HistogramOptions::chi2 (rabbit's default, off with --noChi2): the linear χ² of the summed yields against
  /// the data over every data bin (`*_chi2_total`, rabbit's) and per channel (`*_chi2`, Model::channels' order, each
  /// with its bins' marginal covariance; ndf 0 and NaN for a masked channel). Prefit the residuals' covariance is the
  /// data's plus the prefit yields' (J·C₀·Jᵀ and β's prior); postfit it is that of ν(x̂) − n with x̂ moving with the
  /// data and the constraint centres θ₀ (rabbit's profiled residuals): with R = ∂(ν(x̂) − n)/∂n and Θ = ∂ν(x̂)/∂θ₀,
  /// R·V·Rᵀ + Θ·diag(1/w)·Θᵀ, and with bin-by-bin statistics the share of β's constraint centres β₀ moving too.
  std::vector<LinearChi2> prefit_chi2, postfit_chi2;
  LinearChi2 prefit_chi2_total, postfit_chi2_total;
  std::string postfit_chi2_note;  ///< why the postfit χ² are NaN, when they are for a reason other than S
};

/// What `histograms` computes besides the yields and their variances.
struct HistogramOptions {
  bool covariance = false;  ///< each channel's bin-by-bin covariance (Histograms::prefit_covariance, postfit_covariance)
  bool variations = false;  ///< each parameter's ±1σ shift of every bin (Histograms::prefit_variations, postfit_variations)
  bool chi2 = true;         ///< the linear χ² against the data, per channel and in total (Histograms::prefit_chi2, ...)
  bool process_variances = false;  ///< each process's variances (Histograms::prefit_process_variance, postfit_process_variance)
};

namespace detail {

/// The blocks of bins `histograms` propagates at once: runs of at most 64 MiB of Jacobian (`n` columns) within each
/// channel, so that the memory stays bounded whatever the number of bins, and a channel's covariance is gathered
/// from the same blocks as the variances (ChannelCovariance).
inline std::vector<BinRange> jacobian_blocks(const Model& m, index_t n) {
  std::vector<BinRange> blocks;
  const index_t block = std::max<index_t>(static_cast<index_t>((std::size_t{64} << 20) / sizeof(double)) / std::max<index_t>(n, 1), 1);
  index_t c0 = 0;
  for (const Channel& c : m.channels) {
    for (index_t b0 = c0; b0 < c0 + c.nbins; b0 += block) blocks.push_back({b0, std::min(b0 + block, c0 + c.nbins)});
    c0 += c.nbins;
  }
  return blocks;
}

/// Calls f(block, J, beta_var) for each block of bins, J the block's yield Jacobian at x (`[bins × n]` row-major,
/// Likelihood::yield_jacobian, `profiled` as there; with JacobianRows::processes `[bins × nprocs × n]`, a row per bin
/// and process, process_yield_jacobian) and beta_var β's own variance of each row.
template <class Lik, class F>
void for_jacobian_blocks(Lik& lik, std::span<const double> x, bool profiled, const std::vector<BinRange>& blocks, F&& f,
                         JacobianRows rows = JacobianRows::summed) {
  const index_t n = lik.size(), per = rows == JacobianRows::processes ? lik.model().nprocs() : 1;
  std::vector<double> o, J, bvar;
  for (const BinRange& blk : blocks) {
    const auto nr = static_cast<std::size_t>(blk.size() * per);
    o.resize(nr);
    bvar.resize(nr);
    J.resize(nr * static_cast<std::size_t>(n));
    if (rows == JacobianRows::processes)
      lik.process_yield_jacobian(x, blk, profiled, o, J, bvar);
    else
      lik.yield_jacobian(x, blk, profiled, o, J, bvar);
    f(blk, Eigen::Map<const Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>(J.data(), blk.size() * per, n), bvar);
  }
}

/// Each process's variance in every bin (`[nbins × nprocs]`, Histograms::prefit_process_variance): `form(J)` the
/// parameters' share of a block of per-process rows J, plus β's own where profiled (the data bins postfit) and its
/// prior from `first_prior` on (`nu`, per process before β, at β₀).
template <class Lik, class Form>
std::vector<double> process_variances(Lik& lik, std::span<const double> x, bool profiled, const BinByBinStats& st, const std::vector<double>& nu,
                                      index_t first_prior, Form&& form) {
  const Model& m = lik.model();
  const index_t P = m.nprocs();
  std::vector<double> var(static_cast<std::size_t>(m.nbins_full() * P)), prior(static_cast<std::size_t>(P));
  for_jacobian_blocks(
      lik, x, profiled, jacobian_blocks(m, lik.size() * P),
      [&](const BinRange& blk, const auto& J, const std::vector<double>& bvar) {
        const Eigen::VectorXd v = form(J);
        for (index_t b = blk.begin; b < blk.end; ++b) {
          if (b >= first_prior)
            process_beta_variances(st, b, nu.data() + b * P, P, st.beta0.data() + b * st.per_bin(), 0.0, prior.data());
          for (index_t p = 0; p < P; ++p) {
            const auto r = static_cast<std::size_t>((b - blk.begin) * P + p);
            var[static_cast<std::size_t>(b * P + p)] = v(static_cast<index_t>(r)) + bvar[r] + (b >= first_prior ? prior[static_cast<std::size_t>(p)] : 0.0);
          }
        }
      },
      JacobianRows::processes);
  return var;
}

/// The yields per process `nu` (`[nbins × nprocs]`, before β) with β applied (bbstat.hpp, beta_applied_cells): β̂
/// (`beta_hat`, `[data bins × per_bin]`) in the data bins, β₀ in the masked ones, and β₀ everywhere when `beta_hat`
/// is empty (prefit).
inline std::vector<double> with_beta(const BinByBinStats& st, const std::vector<double>& nu, const std::vector<double>& beta_hat, index_t ndata) {
  if (!st.enabled) return nu;
  const index_t P = st.nprocs, per = st.per_bin();
  std::vector<double> out(nu.size());
  for (index_t b = 0; b < st.nbins; ++b) {
    const double* beta = b < ndata && !beta_hat.empty() ? beta_hat.data() + b * per : st.beta0.data() + b * per;
    beta_applied_cells(st, b, nu.data() + b * P, P, beta, out.data() + b * P);
  }
  return out;
}

/// The variance β's prior gives bin b's summed yield (`nu` per process, before β) at β₀: beta_variance without a data
/// term, for the bins whose β no data constrain (every bin prefit, the masked ones postfit).
inline double prior_beta_variance(const BinByBinStats& st, const std::vector<double>& nu, index_t b) {
  if (!st.enabled) return 0;
  return beta_variance(st, b, nu.data() + b * st.nprocs, st.nprocs, st.beta0.data() + b * st.per_bin(), 0.0);
}

/// Each channel's covariance (Histograms::prefit_covariance, postfit_covariance) from the blocks of its bins in order
/// (jacobian_blocks): `add` takes a block's factor Y (`[k × bins]`, its covariance the Gram matrix YᵀY) and its
/// variances (the columns' squared norms plus β's own), and at the channel's last bin its YᵀY, the diagonal those
/// variances, goes to `out`.
class ChannelCovariance {
 public:
  ChannelCovariance(const Model& m, std::vector<std::vector<double>>& out) : m_(&m), out_(&out) {}

  void add(const BinRange& blk, const Eigen::MatrixXd& Y, const std::vector<double>& var) {
    const Channel& c = m_->channels[static_cast<std::size_t>(channel_)];
    if (Yc_.cols() == 0) Yc_.resize(Y.rows(), c.nbins);
    Yc_.middleCols(blk.begin - first_, blk.size()) = Y;
    if (blk.end < first_ + c.nbins) return;
    Eigen::MatrixXd cov = Yc_.transpose() * Yc_;
    for (index_t b = 0; b < c.nbins; ++b) cov(b, b) = var[static_cast<std::size_t>(first_ + b)];
    std::vector<double> rows(static_cast<std::size_t>(c.nbins * c.nbins));
    Eigen::Map<Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>(rows.data(), c.nbins, c.nbins) = cov;
    out_->push_back(std::move(rows));
    first_ += c.nbins;
    ++channel_;
    Yc_.resize(0, 0);
  }

 private:
  const Model* m_;
  std::vector<std::vector<double>>* out_;
  index_t channel_ = 0, first_ = 0;  // the channel being gathered and its first bin
  Eigen::MatrixXd Yc_;
};

/// Writes a block's variances into `var_out`: the parameters' part `var` plus β's own, `bvar` in the data bins and
/// its prior from `first_prior` on; and, with `cov`, the block's factor `Y` (ChannelCovariance::add).
inline void store_block(const BinRange& blk, const Eigen::VectorXd& var, const std::vector<double>& bvar, const BinByBinStats& st,
                        const std::vector<double>& nu, index_t first_prior, std::vector<double>& var_out, ChannelCovariance* cov,
                        const Eigen::MatrixXd& Y) {
  for (index_t b = 0; b < blk.size(); ++b) {
    const index_t g = blk.begin + b;
    const double own = bvar[static_cast<std::size_t>(b)] + (g >= first_prior ? prior_beta_variance(st, nu, g) : 0.0);
    var_out[static_cast<std::size_t>(g)] = var(b) + own;
  }
  if (cov) cov->add(blk, Y, var_out);
}

/// Writes a block's variations into `out` (`[nbins × n × 2]`, Histograms' variations): the summed yields `total`
/// moved down and up along each parameter by σ, ν_b ∓ J_bi·σ_i.
template <class Jacobian>
void store_variations(const BinRange& blk, const Jacobian& J, const std::vector<double>& total, const Eigen::VectorXd& sigma, std::vector<double>& out) {
  const index_t n = J.cols();
  out.resize(total.size() * static_cast<std::size_t>(n) * 2);
  for (index_t b = 0; b < blk.size(); ++b)
    for (index_t i = 0; i < n; ++i) {
      const double d = J(b, i) * sigma(i), nu = total[static_cast<std::size_t>(blk.begin + b)];
      const auto at = static_cast<std::size_t>(((blk.begin + b) * n + i) * 2);
      out[at] = nu - d;
      out[at + 1] = nu + d;
    }
}

/// Σ_p ν[b, p] of `nu` (`[nbins × nprocs]`).
inline std::vector<double> process_sums(const std::vector<double>& nu, index_t nbins, index_t nprocs) {
  std::vector<double> total(static_cast<std::size_t>(nbins), 0.0);
  for (index_t b = 0; b < nbins; ++b)
    for (index_t p = 0; p < nprocs; ++p) total[static_cast<std::size_t>(b)] += nu[static_cast<std::size_t>(b * nprocs + p)];
  return total;
}

/// The prefit covariance diag(1/w) of every parameter (`[nparams]`): 1/w for a constrained nuisance, 0 for the POIs
/// and the unconstrained nuisances (rabbit's default).
inline Eigen::VectorXd prior_variances(const Model& m) {
  Eigen::VectorXd c0 = Eigen::VectorXd::Zero(m.nparams());
  for (index_t s = 0; s < m.nsyst(); ++s)
    if (const double w = m.constraint_weights[static_cast<std::size_t>(s)]; w > 0) c0(m.npoi() + s) = 1 / w;
  return c0;
}

/// The fit's Hessian on its free parameters `free`, factorised as H = R·Rᵀ (`llt`); `usable` where the covariance is
/// accurate and the factorisation succeeded, so that C = H⁻¹ may be applied through R.
struct FreeHessian {
  std::vector<index_t> free;
  Eigen::LLT<Eigen::MatrixXd> llt;
  bool usable = false;

  explicit FreeHessian(const FitResult& r) {
    const auto n = static_cast<index_t>(r.x.size());
    for (index_t i = 0; i < n; ++i)
      if (!r.frozen[static_cast<std::size_t>(i)]) free.push_back(i);
    const auto nf = static_cast<index_t>(free.size());
    Eigen::MatrixXd hf(nf, nf);
    for (index_t c = 0; c < nf; ++c)
      for (index_t k = 0; k < nf; ++k) hf(k, c) = r.hessian[static_cast<std::size_t>(free[static_cast<std::size_t>(k)] + free[static_cast<std::size_t>(c)] * n)];
    llt.compute(hf);
    usable = r.covariance_status == CovarianceStatus::accurate && llt.info() == Eigen::Success && hf.allFinite();
  }
};

/// Copies the rows of the data bins among a block's, of J (`[block bins × n]`), into `Jd` (`[data bins × n]`).
template <class Jacobian>
void gather_data_rows(const BinRange& blk, const Jacobian& J, index_t ndata, Eigen::MatrixXd& Jd) {
  for (index_t b = blk.begin; b < std::min(blk.end, ndata); ++b) Jd.row(b) = J.row(b - blk.begin);
}

/// The data's part of the χ²'s residual covariance: for Poisson the counts (rabbit's), for the χ² terms the variances
/// they use (as rabbit now does; 0.2.5 took the counts), and for the covariance term with the model's inverse data
/// covariance its inverse (dense).
template <class Lik>
ResidualCovariance data_covariance(const Lik& lik) {
  const Model& m = lik.model();
  ResidualCovariance s;
  const bool poisson = lik.options().data_term == DataTerm::poisson;
  s.v = Eigen::Map<const Eigen::VectorXd>((poisson ? lik.data() : lik.data_variances()).data(), m.nbins());
  if (lik.options().data_term == DataTerm::covariance && !m.data_covariance_inverse.empty()) {
    const Eigen::Map<const Eigen::MatrixXd> cinv(m.data_covariance_inverse.data(), m.nbins(), m.nbins());
    s.dense = detail::inverse_from_cholesky(Eigen::LLT<Eigen::MatrixXd>(cinv));
  }
  return s;
}

/// The χ² of the residuals `r` (`[data bins]`) with covariance `s`, per channel (masked ones: ndf 0) and over every
/// data bin; without `s`, NaN with their ndf (not computed).
inline void channel_chi2(const Model& m, const Eigen::VectorXd& r, const ResidualCovariance* s, std::vector<LinearChi2>& per, LinearChi2& total) {
  const auto chi2 = [&](BinRange rows) { return s ? linear_chi2(r, *s, rows) : LinearChi2{.ndf = rows.size()}; };
  index_t b0 = 0;
  for (const Channel& c : m.channels) {
    per.push_back(c.masked ? LinearChi2{} : chi2({b0, b0 + c.nbins}));
    if (!c.masked) b0 += c.nbins;
  }
  const bool one = std::count_if(m.channels.begin(), m.channels.end(), [](const Channel& c) { return !c.masked; }) == 1;
  total = one ? per.front() : chi2({0, m.nbins()});  // (the unmasked channels come first)
}

/// The prefit residuals' covariance: the data's plus U·Uᵀ, U = J·C₀^½ over the constrained nuisances (`c0` their
/// prior variances, 0 elsewhere), plus β's prior in every data bin (`nu`, per process before β).
template <class Lik>
ResidualCovariance prefit_residual_covariance(const Lik& lik, const Eigen::MatrixXd& Jd, const Eigen::VectorXd& c0, const BinByBinStats& st,
                                              const std::vector<double>& nu) {
  ResidualCovariance s = data_covariance(lik);
  std::vector<index_t> cols;
  for (index_t i = 0; i < c0.size(); ++i)
    if (c0(i) > 0) cols.push_back(i);
  Eigen::MatrixXd T = Eigen::MatrixXd::Zero(c0.size(), static_cast<index_t>(cols.size()));  // C₀^½ on the constrained columns
  for (std::size_t k = 0; k < cols.size(); ++k) T(cols[k], static_cast<index_t>(k)) = std::sqrt(c0(cols[k]));
  s.J = Jd;
  s.blocks = {{.d = {}, .T = std::move(T), .X = {}}};
  s.m = s.m_inverse = Eigen::MatrixXd::Identity(static_cast<index_t>(cols.size()), static_cast<index_t>(cols.size()));
  for (index_t b = 0; b < Jd.rows(); ++b) {
    const double prior = prior_beta_variance(st, nu, b);
    if (s.dense.size() != 0)
      s.dense(b, b) += prior;
    else
      s.v(b) += prior;
  }
  return s;
}

/// a = ∂²ℓ/∂ν∂n per data bin: −1/ν̂ for the Poisson term (`total` the summed yields ν̂), −1/v for the χ² term (`v` the
/// data's variances).
template <class Lik>
Eigen::VectorXd data_cross(const Lik& lik, const std::vector<double>& total, const Eigen::VectorXd& v) {
  Eigen::VectorXd a(v.size());
  for (index_t b = 0; b < v.size(); ++b) a(b) = lik.options().data_term == DataTerm::poisson ? -1 / total[static_cast<std::size_t>(b)] : -1 / v(b);
  return a;
}

/// The columns `free` of J (`[rows × n]`).
inline Eigen::MatrixXd free_columns(const Eigen::MatrixXd& J, const std::vector<index_t>& free) {
  Eigen::MatrixXd Jf(J.rows(), static_cast<index_t>(free.size()));
  for (std::size_t k = 0; k < free.size(); ++k) Jf.col(static_cast<index_t>(k)) = J.col(free[k]);
  return Jf;
}

/// β's share of the postfit residuals' covariance with bin-by-bin statistics, rabbit's _residuals_profiled with β₀
/// as global observables: the joint minimum of z = (x, β) moves with n, θ₀ and β₀, and β's block of the joint Hessian
/// is diagonal per bin, so that with C the inverse of its Schur complement (the profiled Hessian) the covariance
/// keeps the form V' + U·M·Uᵀ, U = [J̃·C, X]. Per data bin b, with J̃_b its row of the profiled Jacobian (`Jd`, data
/// rows; `free` its free columns), a_b = ∂²ℓ/∂ν∂n, c = ∂ν̃_b/∂β, h = G_ββ⁻¹·c, Λ = diag(L_β'') (β₀'s information, (∂²L_β/∂β∂β₀)²·var β₀)
/// and g_e = ∂β̂_e/∂x:
///   V'_b = Δ_b²·v_b + hᵀ·Λ·h with Δ_b = 1 + a_b·cᵀ·G_ββ⁻¹·c;  X_b = Δ_b·a_b·v_b·J̃_b + Σ_e Λ_e·h_e·g_e;
///   M's first block gains Σ_e Λ_e·g_e·g_eᵀ.
/// g_e is −D''·s_e/L_β''_e·J̃_b for an additive β; (J̃_b − J_h,b)/A for a lite multiplicative one (J_h with β held at β̂, A the yield
/// it scales); −(D''·m_e·J̃_b + D'·∂m_e/∂x)/L_β''_e for a full multiplicative one (bbstat.hpp, profiled_process_weights).
struct BetaShare {
  Eigen::VectorXd ba, own;  ///< a·cᵀ·G_ββ⁻¹·c (Δ − 1) and hᵀ·Λ·h per data bin
  Eigen::MatrixXd zr;     ///< Σ_e Λ_e·h_e·g_e per data bin, `[data bins × free]`
  Eigen::MatrixXd gram;   ///< Σ_e Λ_e·g_e·g_eᵀ, `[free × free]`
};

template <class Lik>
BetaShare beta_share(Lik& lik, std::span<const double> x, const Eigen::MatrixXd& Jd, const std::vector<index_t>& free, const BinByBinStats& st,
                     const std::vector<double>& nu, const std::vector<double>& beta_hat, const std::vector<double>& total) {
  const Model& m = lik.model();
  const Eigen::MatrixXd Jf = free_columns(Jd, free);
  const Eigen::VectorXd v = data_covariance(lik).v, a = data_cross(lik, total, v);
  const index_t nd = Jf.rows(), nf = Jf.cols(), P = m.nprocs(), per = st.per_bin();
  const DataTerm term = lik.options().data_term;
  const bool mult = st.multiplicative(), full = st.mode == BinByBinMode::full;
  BetaShare out{.ba = Eigen::VectorXd(nd), .own = Eigen::VectorXd::Zero(nd), .zr = Eigen::MatrixXd::Zero(nd, nf), .gram = Eigen::MatrixXd::Zero(nf, nf)};
  // Per β entry: Λ, h and g = α·J̃_b + γ·(a row of the held rows: J_h,b lite, ∂m_e/∂x full); Λ = 0 where β is fixed.
  std::vector<double> lambda(static_cast<std::size_t>(nd * per), 0.0), h(lambda.size()), alpha(lambda.size()), gamma(lambda.size());
  for (index_t b = 0; b < nd; ++b) {
    const double* mb = nu.data() + b * P;
    const double* bb = beta_hat.data() + b * per;
    const double n = lik.data()[static_cast<std::size_t>(b)], nt = total[static_cast<std::size_t>(b)];
    const double aux = term == DataTerm::poisson ? (n > 0 ? 1 / n : 0.0) : 1 / lik.data_variances()[static_cast<std::size_t>(b)];
    const BinTerm t = data_term(term, nt, n, aux);
    out.ba(b) = v(b) == 0 ? 0.0 : a(b) * beta_variance(st, b, mb, P, bb, t.d2);  // (a may be infinite where v = 0; ba meets only v)
    double A = 0, cc = 0;
    if (!full)  // (active cells: lite only)
      for (index_t p = 0; p < P; ++p) A += st.active[static_cast<std::size_t>(b * P + p)] ? mb[p] : 0.0;
    const auto c_of = [&](index_t e) { return !mult ? st.sigma[static_cast<std::size_t>(b * per + e)] : full ? mb[e] : A; };
    for (index_t e = 0; e < per; ++e) {
      const auto at = static_cast<std::size_t>(b * per + e);
      const double l2 = beta_term(st.type, bb[e], st.kstat[at], st.beta0[at]).d2;
      if (st.fixed[at] || !(l2 > 0) || (mult && !full && A == 0)) continue;
      lambda[at] = l2;
      cc += c_of(e) * c_of(e) / l2;
    }
    for (index_t e = 0; e < per; ++e) {
      const auto at = static_cast<std::size_t>(b * per + e);
      if (lambda[at] == 0) continue;
      const double c = c_of(e), l2 = lambda[at];
      h[at] = c / l2 / (1 + t.d2 * cc);
      out.own(b) += l2 * h[at] * h[at];
      if (!mult) {
        alpha[at] = -t.d2 * c / l2;
      } else if (!full) {
        alpha[at] = 1 / A;
        gamma[at] = -1 / A;
      } else {
        alpha[at] = -t.d2 * c / l2;
        gamma[at] = -t.w / l2;
      }
    }
  }
  // g per β entry, a block of bins at a time: rows of √Λ·g for the Gram matrix, Λ·h·g into zr.
  const index_t rows_per_bin = full ? P : 1;
  const auto add = [&](BinRange blk, const auto* held) {
    Eigen::MatrixXd G(blk.size() * per, nf);
    for (index_t b = blk.begin; b < blk.end; ++b)
      for (index_t e = 0; e < per; ++e) {
        const auto at = static_cast<std::size_t>(b * per + e);
        auto g = G.row((b - blk.begin) * per + e);
        g = alpha[at] * Jf.row(b);
        if (held && gamma[at] != 0)
          for (index_t k = 0; k < nf; ++k) g(k) += gamma[at] * (*held)((b - blk.begin) * rows_per_bin + (full ? e : 0), free[static_cast<std::size_t>(k)]);
        out.zr.row(b) += lambda[at] * h[at] * g;
        g *= std::sqrt(lambda[at]);
      }
    out.gram.selfadjointView<Eigen::Lower>().rankUpdate(G.transpose());
  };
  std::vector<BinRange> blocks;
  for (const BinRange& blk : jacobian_blocks(m, lik.size() * rows_per_bin))
    if (blk.begin < nd) blocks.push_back({blk.begin, std::min(blk.end, nd)});
  if (!mult) {
    for (const BinRange& blk : blocks) add(blk, static_cast<const Eigen::MatrixXd*>(nullptr));
  } else if (!full) {  // J_h: β held at β̂
    HeldBeta<Lik> held(lik, beta_hat);
    for_jacobian_blocks(lik, x, true, blocks, [&](const BinRange& blk, const auto& J, const std::vector<double>&) { add(blk, &J); });
    held.release();
  } else {  // ∂m_e/∂x: each cell's rows before β
    for_jacobian_blocks(lik, x, false, blocks, [&](const BinRange& blk, const auto& J, const std::vector<double>&) { add(blk, &J); },
                        JacobianRows::processes);
  }
  out.gram.triangularView<Eigen::StrictlyUpper>() = out.gram.transpose();
  return out;
}

/// The postfit residuals' covariance, rabbit's _residuals_profiled: r = ν(x̂) − n with
/// x̂ moving with n and θ₀ by the implicit function theorem, dx̂ = C·(Wf·dθ₀ − Jfᵀ·A·dn), A = ∂²ℓ/∂ν∂n (−1/ν̂ Poisson,
/// −V⁻¹ for the χ² terms), Jf the free columns of J (`Jd`, data rows), C = H⁻¹ (`llt`, its factor), Wf the
/// constraints' weights. With K = Jf·C, E = A·V and G = Jfᵀ·A·V·A·Jf:
///   S = V + K·(Wf + G)·Kᵀ + K·(E·Jf)ᵀ + (E·Jf)·Kᵀ = V + U·M·Uᵀ,  U = [Jf·C, E·Jf],  M = [[Wf + G, I], [I, 0]],
/// M⁻¹ = [[0, I], [I, −(Wf + G)]]. E = −I for the χ² terms; for Poisson E = −diag(v/ν̂). With bin-by-bin statistics
/// J is the profiled Jacobian, and β's share (`beta`, beta_share's) replaces V by V' and E·J by X and adds to Wf + G.
template <class Lik>
ResidualCovariance postfit_residual_covariance(const Lik& lik, const Eigen::MatrixXd& Jd, const std::vector<index_t>& free, const Eigen::LLT<Eigen::MatrixXd>& llt,
                                               const std::vector<double>& total, const BetaShare* beta = nullptr) {
  const Model& m = lik.model();
  const index_t nd = Jd.rows(), nf = static_cast<index_t>(free.size());
  ResidualCovariance s = data_covariance(lik);
  Eigen::MatrixXd Jf = free_columns(Jd, free);
  Eigen::VectorXd wf(nf);
  for (index_t k = 0; k < nf; ++k) {
    const index_t i = free[static_cast<std::size_t>(k)];
    wf(k) = i < m.npoi() ? 0.0 : m.constraint_weights[static_cast<std::size_t>(i - m.npoi())];
  }
  Eigen::MatrixXd G;
  Eigen::VectorXd e;
  if (s.dense.size() != 0) {  // A = −V⁻¹: E = −I, G = Jfᵀ·V⁻¹·Jf
    const Eigen::Map<const Eigen::MatrixXd> cinv(m.data_covariance_inverse.data(), nd, nd);
    G = Jf.transpose() * cinv * Jf;
    e = -Eigen::VectorXd::Ones(nd);
  } else {
    // a·v and a²·v per bin; 0 where v = 0 (an empty Poisson bin, whose count cannot move: its a, −1/ν̂, may be infinite)
    const Eigen::VectorXd a = data_cross(lik, total, s.v);
    Eigen::VectorXd a2v(nd);
    e.resize(nd);
    for (index_t b = 0; b < nd; ++b) {
      e(b) = s.v(b) == 0 ? 0.0 : a(b) * s.v(b);
      a2v(b) = s.v(b) == 0 ? 0.0 : a(b) * e(b);
    }
    G = weighted_gram(Jf, a2v);
  }
  G.diagonal() += wf;
  ScaledBlock second{.d = std::move(e), .T = {}, .X = {}};  // E·J
  if (beta) {
    const Eigen::ArrayXd delta = 1 + beta->ba.array();
    G += beta->gram;
    s.v = delta.square() * s.v.array() + beta->own.array();
    second = {.d = {}, .T = {}, .X = (delta * second.d.array()).matrix().asDiagonal() * Jf + beta->zr};
  }
  s.J = std::move(Jf);
  s.blocks = {{.d = {}, .T = detail::inverse_from_cholesky(llt), .X = {}}, std::move(second)};  // J·C, and E·J or X
  const Eigen::MatrixXd I = Eigen::MatrixXd::Identity(nf, nf);
  s.m.setZero(2 * nf, 2 * nf);
  s.m.topLeftCorner(nf, nf) = G;
  s.m.topRightCorner(nf, nf) = s.m.bottomLeftCorner(nf, nf) = I;
  s.m_inverse.setZero(2 * nf, 2 * nf);
  s.m_inverse.bottomRightCorner(nf, nf) = -G;
  s.m_inverse.topRightCorner(nf, nf) = s.m_inverse.bottomLeftCorner(nf, nf) = I;
  return s;
}

/// The residuals prediction − data of the data bins.
inline Eigen::VectorXd residuals(const std::vector<double>& total, const std::vector<double>& data) {
  Eigen::VectorXd r(static_cast<index_t>(data.size()));
  for (std::size_t b = 0; b < data.size(); ++b) r(static_cast<index_t>(b)) = total[b] - data[b];
  return r;
}

}  // namespace detail

/// Throws unless `lik` can give histograms, saying what to change: bin-by-bin statistics need a separable data term,
/// for β̂ per bin.
template <class Lik>
void require_histograms(const Lik& lik) {
  if (lik.bin_by_bin_per_bin() > 0 && lik.options().data_term == DataTerm::covariance)
    throw usage_error("histograms with bin-by-bin statistics need a separable data term (Poisson or χ²): the covariance term "
                      "marginalises β in closed form, with no β̂ per bin to apply; fit without bin-by-bin statistics "
                      "(LikelihoodOptions::bin_by_bin, fitlib-fit --noBinByBinStat) or without --covarianceFit");
}

/// The prefit and postfit histograms of `lik` and its fit `r`, which must carry its Hessian and covariance
/// (FitOptions::covariance; a usage_error otherwise, as for a likelihood require_histograms refuses). In one process
/// (Likelihood::yield_jacobian). The variations hold β (Likelihood::fix_bin_by_bin) and leave it profiled.
template <class Lik>
Histograms histograms(Lik& lik, const FitResult& r, const HistogramOptions& opts = {}) {
  const Model& m = lik.model();
  const index_t n = lik.size(), bf = m.nbins_full(), nb = m.nbins(), np = m.nprocs();
  require_histograms(lik);
  if (static_cast<index_t>(r.x.size()) != n || r.covariance_status == CovarianceStatus::not_computed ||
      static_cast<index_t>(r.hessian.size()) != n * n)
    throw usage_error("histograms need the fit of this likelihood with its covariance (" + std::to_string(n) + " parameters, FitOptions::covariance)");
  Histograms h;
  h.nbins = bf;
  h.nprocs = np;
  h.data = lik.data();
  h.data_variance = lik.data_variances();
  // β's constants over every bin, the masked ones included (their β keep β₀ and their prior)
  const BinByBinStats st = BinByBinStats::build(m, {0, bf}, lik.options().bin_by_bin, lik.options().data_term);

  const std::vector<double> x0 = lik.default_parameters(), nu0 = lik.yields(x0);
  h.prefit = detail::with_beta(st, nu0, {}, nb);
  h.prefit_total = detail::process_sums(h.prefit, bf, np);
  const std::vector<BinRange> blocks = detail::jacobian_blocks(m, n);
  // Prefit, C = diag(1/w) over the constrained nuisances: var_b = Σ_s J_bs²/w_s, β at β₀ with its prior.
  const Eigen::VectorXd c0 = detail::prior_variances(m);
  // Variations' σ prefit (rabbit's prefit covariance with unit errors for the unconstrained): the POIs do not move.
  Eigen::VectorXd sigma0 = Eigen::VectorXd::Zero(n);
  for (index_t s = 0; s < m.nsyst(); ++s) {
    const double w = m.constraint_weights[static_cast<std::size_t>(s)];
    sigma0(m.npoi() + s) = w > 0 ? 1 / std::sqrt(w) : 1.0;
  }
  h.prefit_variance.assign(static_cast<std::size_t>(bf), 0.0);
  Eigen::MatrixXd Jd(opts.chi2 ? nb : 0, n);  // the data bins' rows of J, for the χ²
  detail::ChannelCovariance prefit_cov(m, h.prefit_covariance);
  detail::for_jacobian_blocks(lik, x0, false, blocks, [&](const BinRange& blk, const auto& J, const std::vector<double>& bvar) {
    if (opts.chi2) detail::gather_data_rows(blk, J, nb, Jd);
    Eigen::MatrixXd Y;  // (J·diag(√c0))ᵀ: J·C·Jᵀ = YᵀY
    if (opts.covariance) Y = (J * c0.cwiseSqrt().asDiagonal()).transpose();
    detail::store_block(blk, J.array().square().matrix() * c0, bvar, st, nu0, 0, h.prefit_variance, opts.covariance ? &prefit_cov : nullptr, Y);
    if (opts.variations) detail::store_variations(blk, J, h.prefit_total, sigma0, h.prefit_variations);  // β at β₀: this J
  });
  if (opts.chi2) {
    const detail::ResidualCovariance s = detail::prefit_residual_covariance(lik, Jd, c0, st, nu0);
    detail::channel_chi2(m, detail::residuals(h.prefit_total, h.data), &s, h.prefit_chi2, h.prefit_chi2_total);
  }
  if (opts.process_variances)
    h.prefit_process_variance =
        detail::process_variances(lik, x0, false, st, nu0, 0, [&](const auto& J) -> Eigen::VectorXd { return J.array().square().matrix() * c0; });
  const std::vector<double> beta_hat = lik.bin_by_bin_parameters(r.x);

  const std::vector<double> nu = lik.yields(r.x);
  h.postfit = detail::with_beta(st, nu, beta_hat, nb);
  h.postfit_total = detail::process_sums(h.postfit, bf, np);
  // C = H⁻¹ on the free parameters: with H = R·Rᵀ (the factorisation the covariance came from), J·C·Jᵀ = ‖R⁻¹·Jᵀ‖²
  // column by column, one triangular solve per block of bins (bins·n² flops), without forming C, whose own
  // factorisation could fail where it is ill-conditioned.
  const detail::FreeHessian fh(r);
  const std::vector<index_t>& free = fh.free;
  const index_t nf = static_cast<index_t>(free.size());
  const Eigen::LLT<Eigen::MatrixXd>& llt = fh.llt;
  if (!fh.usable) {
    constexpr double nan = std::numeric_limits<double>::quiet_NaN();
    h.postfit_variance.assign(static_cast<std::size_t>(bf), nan);
    if (opts.covariance)
      for (const Channel& c : m.channels) h.postfit_covariance.emplace_back(static_cast<std::size_t>(c.nbins * c.nbins), nan);
    if (opts.variations) h.postfit_variations.assign(static_cast<std::size_t>(bf * n * 2), nan);
    if (opts.process_variances) h.postfit_process_variance.assign(static_cast<std::size_t>(bf * np), nan);
    if (opts.chi2) {
      detail::channel_chi2(m, {}, nullptr, h.postfit_chi2, h.postfit_chi2_total);
      h.postfit_chi2_note = "the fit's covariance is not usable (" + std::string(to_string(r.covariance_status)) + ")";
    }
    return h;
  }
  if (opts.variations) {  // J with β held at β̂ (fixed entries do not respond), rabbit's
    Eigen::VectorXd sigma(n);
    for (index_t i = 0; i < n; ++i) sigma(i) = std::sqrt(std::max(0.0, r.covariance[static_cast<std::size_t>(i * n + i)]));
    detail::HeldBeta<Lik> held(lik, beta_hat);
    detail::for_jacobian_blocks(lik, r.x, true, detail::jacobian_blocks(m, n), [&](const BinRange& blk, const auto& J, const std::vector<double>&) {
      detail::store_variations(blk, J, h.postfit_total, sigma, h.postfit_variations);
    });
    held.release();
  }
  const auto halfway = [&](const auto& J) {  // R⁻¹·Jᵀ over the free columns of J: J·C·Jᵀ is its Gram matrix
    Eigen::MatrixXd y(nf, J.rows());
    for (index_t k = 0; k < nf; ++k) y.row(k) = J.col(free[static_cast<std::size_t>(k)]).transpose();
    llt.matrixL().solveInPlace(y);
    return y;
  };
  h.postfit_variance.assign(static_cast<std::size_t>(bf), 0.0);
  detail::ChannelCovariance postfit_cov(m, h.postfit_covariance);
  detail::for_jacobian_blocks(lik, r.x, true, blocks, [&](const BinRange& blk, const auto& J, const std::vector<double>& bvar) {
    if (opts.chi2) detail::gather_data_rows(blk, J, nb, Jd);
    const Eigen::MatrixXd y = halfway(J);
    detail::store_block(blk, y.colwise().squaredNorm().transpose(), bvar, st, nu, nb, h.postfit_variance, opts.covariance ? &postfit_cov : nullptr, y);
  });
  if (opts.process_variances)
    h.postfit_process_variance = detail::process_variances(lik, r.x, true, st, nu, nb, [&](const auto& J) -> Eigen::VectorXd {
      return halfway(J).colwise().squaredNorm().transpose();
    });
  if (opts.chi2) {
    const auto beta = st.enabled ? std::optional(detail::beta_share(lik, r.x, Jd, free, st, nu, beta_hat, h.postfit_total)) : std::nullopt;
    const detail::ResidualCovariance s = detail::postfit_residual_covariance(lik, Jd, free, llt, h.postfit_total, beta ? &*beta : nullptr);
    detail::channel_chi2(m, detail::residuals(h.postfit_total, h.data), &s, h.postfit_chi2, h.postfit_chi2_total);
  }
  return h;
}

}  // namespace fitlib
