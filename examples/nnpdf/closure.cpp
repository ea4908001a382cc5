// SPDX-License-Identifier: MIT
// n3fit's parallel replicas in a leading-order closure test (issue 20; nnpdf-example.md §2 D3): the Les
// Houches PDF is the truth, synthetic DIS kinematics with a correlated covariance give level-0 data
// FK·f_true, one correlated shift gives the level-1 data, and Monte-Carlo replicas of it (level 2) are
// fitted as one ReplicaBatch by n3fit's parametrisation (pdf_model.hpp), each with its own training/
// validation split per dataset, patience stopping with the best state kept, and a growing positivity
// penalty, by fitlib's trust region on the network weights (Gauss–Newton Hessian-vector products).
// Checks, each failing the program (exit 1): the derivatives, the FK table, the truth's sum rules,
// the closure estimators (bias/variance and the 68 % band's coverage of the truth, with a control
// that must fail: the band shrunk to a third), and that a replica fitted alone is bitwise its fit in
// the batch. Positivity at the kept states is reported, not checked (open: examples/nnpdf/README.md).
//   nnpdf_closure [--replicas R] [--width W] [--instances L]   (defaults 16, 16, 4)
#include <fitlib/minimize/steihaug_cg.hpp>
#include <fitlib/minimize/trust_region.hpp>
#include <fitlib/replica/pseudo_data.hpp>
#include <fitlib/replica/replica_batch.hpp>
#include <fitlib/replica/train_replica.hpp>

#include <Eigen/Cholesky>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "derivative_checks.hpp"
#include "lo_dis.hpp"
#include "pdf_model.hpp"
#include "pdf_objective.hpp"

namespace {

using namespace nnpdf;
using fitlib::index_t;

int failures = 0;
void check(bool ok, const char* what, double value) {
  std::printf("  %-66s %12.4g  %s\n", what, value, ok ? "ok" : "FAILED");
  if (!ok) ++failures;
}

/// A dataset: an observable at log-spaced x with its uncertainties (relative to the level-0 value).
struct Dataset {
  Observable observable;
  int n;
  double x_min, x_max;
  double stat, normalisation;  ///< uncorrelated, and fully correlated (MULT) within the dataset
};

const std::vector<Dataset> datasets{{F2_proton, 40, 1e-3, 0.7, 0.02, 0.02},  {F2_deuteron, 32, 5e-3, 0.7, 0.02, 0.025},
                                    {F2_nu, 16, 0.02, 0.65, 0.04, 0.03},     {xF3_nu, 16, 0.02, 0.65, 0.04, 0.03},
                                    {F2_nubar, 16, 0.02, 0.65, 0.04, 0.03}, {xF3_nubar, 16, 0.02, 0.65, 0.04, 0.03}};

constexpr double positivity_tolerance = 1e-6;
constexpr std::uint64_t filter_seed = 1, mc_seed = 2, split_seed = 3, network_seed = 4, preprocessing_seed = 5;

/// The t0 covariance (t0 = the level-0 data, as NNPDF's closure tests take it): per point its statistical
/// uncertainty, per dataset its normalisation, a shape uncertainty of 1 % linear in ln x, and a 1 %
/// normalisation shared by the two F₂ datasets (a "special" correlated systematic).
Eigen::MatrixXd covariance(const std::vector<Point>& points, const std::vector<int>& dataset_of, const std::vector<double>& t0) {
  const auto n = static_cast<index_t>(points.size());
  Eigen::MatrixXd C = Eigen::MatrixXd::Zero(n, n);
  for (index_t i = 0; i < n; ++i) {
    const Dataset& d = datasets[static_cast<std::size_t>(dataset_of[static_cast<std::size_t>(i)])];
    C(i, i) += std::pow(d.stat * t0[static_cast<std::size_t>(i)], 2);
  }
  for (std::size_t s = 0; s < datasets.size(); ++s) {
    const Dataset& d = datasets[s];
    Eigen::VectorXd norm = Eigen::VectorXd::Zero(n), shape = Eigen::VectorXd::Zero(n);
    for (index_t i = 0; i < n; ++i)
      if (dataset_of[static_cast<std::size_t>(i)] == static_cast<int>(s)) {
        const double u = std::log(points[static_cast<std::size_t>(i)].x / d.x_min) / std::log(d.x_max / d.x_min);
        norm(i) = d.normalisation * t0[static_cast<std::size_t>(i)];
        shape(i) = 0.01 * u * t0[static_cast<std::size_t>(i)];
      }
    C += norm * norm.transpose() + shape * shape.transpose();
  }
  Eigen::VectorXd shared = Eigen::VectorXd::Zero(n);
  for (index_t i = 0; i < n; ++i)
    if (dataset_of[static_cast<std::size_t>(i)] <= 1) shared(i) = 0.01 * t0[static_cast<std::size_t>(i)];
  C += shared * shared.transpose();
  return C;
}

/// C[rows, rows]'s lower Cholesky factor.
Eigen::MatrixXd block_factor(const Eigen::MatrixXd& C, const std::vector<index_t>& rows) {
  const auto m = static_cast<index_t>(rows.size());
  Eigen::MatrixXd B(m, m);
  for (index_t a = 0; a < m; ++a)
    for (index_t b = 0; b < m; ++b) B(a, b) = C(rows[static_cast<std::size_t>(a)], rows[static_cast<std::size_t>(b)]);
  return Eigen::LLT<Eigen::MatrixXd>(B).matrixL();
}

/// Replica r's split of every dataset: ⌊n/4⌋ validation points each, drawn from (seed, r, dataset) alone
/// (n3fit keeps int(0.75·n) for training, nnpdf-example.md §3 row 8: the same counts for these n, multiples of 4).
void split(index_t r, const std::vector<int>& dataset_of, std::vector<index_t>& training, std::vector<index_t>& validation) {
  training.clear();
  validation.clear();
  for (std::size_t s = 0; s < datasets.size(); ++s) {
    std::vector<index_t> members;
    for (std::size_t i = 0; i < dataset_of.size(); ++i)
      if (dataset_of[i] == static_cast<int>(s)) members.push_back(static_cast<index_t>(i));
    const auto keep = fitlib::training_split(static_cast<index_t>(members.size()), 0.25, split_seed, static_cast<std::uint64_t>(r), s);
    for (std::size_t i = 0; i < members.size(); ++i) (keep[i] ? training : validation).push_back(members[i]);
  }
  std::sort(training.begin(), training.end());
  std::sort(validation.begin(), validation.end());
}

/// A vector's squared norm in the metric C⁻¹, per point.
double chi2_per_point(const Eigen::LLT<Eigen::MatrixXd>& C, const Eigen::VectorXd& v) {
  return v.dot(C.solve(v)) / static_cast<double>(v.size());
}

}  // namespace

int main(int argc, char** argv) {
  index_t R = 16, width = 16, instances = 4;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--replicas")) R = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--width")) width = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--instances")) instances = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: nnpdf_closure [--replicas R] [--width W] [--instances L]\n");
      return 2;
    }
  }
  const auto t_start = std::chrono::steady_clock::now();

  // Kinematics, the FK table and the level-0 data.
  std::vector<Point> points;
  std::vector<int> dataset_of;
  for (std::size_t s = 0; s < datasets.size(); ++s) {
    const Dataset& d = datasets[s];
    for (int i = 0; i < d.n; ++i) {
      points.push_back({d.observable, d.x_min * std::pow(d.x_max / d.x_min, (i + 0.5) / d.n)});
      dataset_of.push_back(static_cast<int>(s));
    }
  }
  const std::vector<double> grid = x_grid(1e-4, 24, 12);
  std::vector<double> positivity_x;
  for (int i = 0; i < 20; ++i) positivity_x.push_back(1e-4 * std::pow(0.9 / 1e-4, i / 19.0));
  const std::size_t N = points.size();
  PdfObjective f(fk_table(points, grid), N, grid, positivity_x);

  std::printf("LO closure test: %zu points in %zu datasets, FK grid of %zu x-nodes, %zu network weights\n", N, datasets.size(), grid.size(),
              Network::size);
  std::printf("checks\n");
  // The truth on the grid through the FK table against the observables computed directly.
  std::vector<double> level0(N);
  {
    double worst = 0;
    for (std::size_t i = 0; i < N; ++i) {
      double t = 0;
      const auto w = interpolation_weights(grid, points[i].x);
      const auto c = evol_coefficients(points[i].observable);
      for (std::size_t a = 0; a < grid.size(); ++a) {
        const auto truth = les_houches(grid[a]);
        for (int k = 0; k < n_evol; ++k) t += c[static_cast<std::size_t>(k)] * w[a] * truth[static_cast<std::size_t>(k)];
      }
      const double direct = observable(points[i].observable, points[i].x, les_houches);
      level0[i] = t;  // what the fitted model can produce: the closure is exact by construction
      worst = std::max(worst, std::abs(t - direct) / std::abs(direct));
    }
    check(worst < 2e-3, "FK table against the direct LO observables (max relative)", worst);
  }
  // The truth's sum rules by the parametrisation's quadrature: u_v 2, d_v 1, momentum 1.
  {
    const Points q({}, {});
    double uv = 0, dv = 0, momentum = 0;
    for (std::size_t i = 0; i < q.quad; ++i) {
      const auto t = les_houches(q.x[i]);
      uv += q.weights[i] * 0.5 * (t[V] + t[V3]);
      dv += q.weights[i] * 0.5 * (t[V] - t[V3]);
      momentum += q.weights[i] * q.x[i] * (t[Sigma] + t[Gluon]);
    }
    check(std::abs(uv - 2) < 1e-6 && std::abs(dv - 1) < 1e-6 && std::abs(momentum - 1) < 1e-6,
          "the truth's valence and momentum sum rules by the quadrature (max |Δ|)", std::max({std::abs(uv - 2), std::abs(dv - 1), std::abs(momentum - 1)}));
  }

  // The covariance; per closure instance l its level-1 data and its replicas' inputs (training r, validation R + r).
  const Eigen::MatrixXd C = covariance(points, dataset_of, level0);
  const Eigen::LLT<Eigen::MatrixXd> C_llt(C);
  const std::span<const double> C_span(C.data(), static_cast<std::size_t>(C.size()));
  std::vector<double> level1;
  std::vector<ReplicaData> inputs;
  const auto prepare = [&](index_t l) {
    level1 = fitlib::CovarianceReplicas(level0, C_span).replica(filter_seed, static_cast<std::uint64_t>(l));
    const fitlib::CovarianceReplicas mc(level1, C_span);
    inputs.assign(static_cast<std::size_t>(2 * R), {});
    for (index_t r = 0; r < R; ++r) {
      const auto id = static_cast<std::uint64_t>(l * R + r);  // every replica of every instance its own streams
      const std::vector<double> data = mc.replica(mc_seed, id);
      ReplicaData& t = inputs[static_cast<std::size_t>(r)];
      ReplicaData& v = inputs[static_cast<std::size_t>(R + r)];
      split(static_cast<index_t>(id), dataset_of, t.rows, v.rows);
      t.pre = v.pre = Preprocessing::draw(preprocessing_seed, id);
      for (index_t i : t.rows) t.data.push_back(data[static_cast<std::size_t>(i)]);
      for (index_t i : v.rows) v.data.push_back(data[static_cast<std::size_t>(i)]);
      t.factor = block_factor(C, t.rows);
      v.factor = block_factor(C, v.rows);
    }
    f.set_replicas(inputs);
  };
  prepare(0);

  // Derivatives at replica 0's start, its positivity penalty on (some observables are negative there):
  // the gradient against central differences along random directions, and the Gauss–Newton products'
  // symmetry and positivity.
  {
    f.set_positivity(0, 1e3);
    check(f.least_positivity(0, Network::initial(network_seed, 0)) < 0, "positivity penalty active at the derivative checks' point (least observable)",
          f.least_positivity(0, Network::initial(network_seed, 0)));
    const std::vector<double> w0 = Network::initial(network_seed, 0);
    const DerivativeCheck c = check_derivatives(f, w0);
    check(c.gradient < 1e-5, "gradient against central differences (max relative)", c.gradient);
    check(c.asymmetry < 1e-10 && c.least_curvature >= 0, "Gauss-Newton products symmetric (max relative vHu - uHv) and u.Hu >= 0", c.asymmetry);
    f.set_positivity(0, 0);
  }

  // The batch: every replica its own trust region, split, early stopping and positivity multiplier.
  fitlib::TrustRegionOptions tro;
  tro.gtol = 1e-8;
  tro.maxiter = 400;
  const fitlib::TrustRegion<fitlib::SteihaugCG> minimizer(tro, fitlib::SteihaugCG(fitlib::SteihaugCGOptions{30}));
  fitlib::TrainingOptions to;
  to.validation_fraction = 0.25;  // early stopping on (the split is per dataset, above)
  to.patience = 30;
  to.positivity_initial = 1;
  to.positivity_growth = 10;
  to.positivity_every = 10;
  to.positivity_max = 1e6;  // n3fit's λ_max (nnpdf-example.md §3 row 11)
  std::vector<fitlib::ReplicaFit> fits(static_cast<std::size_t>(R));
  // ½χ² of n3fit's stopping threshold, 3.5 per point, on the rows of inputs k.
  const auto below_threshold = [&](index_t k) { return 0.5 * 3.5 * static_cast<double>(inputs[static_cast<std::size_t>(k)].rows.size()); };
  // Replica r's validation ½χ² at x (its inputs R + r), outside a batch.
  const auto validation_loss = [&](index_t r, const std::vector<double>& x) {
    const index_t k = R + r;
    double v;
    f.use_replicas(std::span(&k, 1));
    f.value(ConstBlockView<double>(x.data(), f.size(), 1), std::span(&v, 1));
    f.use_replicas({});
    return v;
  };
  const auto train = [&](index_t instance, index_t width_used, const std::vector<index_t>& which) {
    const fitlib::ReplicaBatch<> batch(width_used);
    std::vector<std::string> errors;
    batch.run(
        f, R,
        [&](index_t r, fitlib::ReplicaObjective<PdfObjective>& fr) {
          if (std::find(which.begin(), which.end(), r) == which.end()) return;
          fitlib::ReplicaObjective<PdfObjective> validation = fr.with_inputs(R + r);
          const index_t n = fr.size();
          // The validation χ² where it is below n3fit's threshold (3.5 per point); +∞ above: such a
          // state is never kept, and patience starts with the first other (nnpdf-example.md §3 row 10).
          const double threshold = below_threshold(R + r);
          auto loss = [&](const std::vector<double>& x) {
            double v;
            validation.value(ConstBlockView<double>(x.data(), n, 1), std::span(&v, 1));
            return v < threshold ? v : std::numeric_limits<double>::infinity();
          };
          f.set_positivity(r, to.positivity_initial);
          fitlib::train_replica(minimizer, fr, loss, to, [&f, r](double lambda) { f.set_positivity(r, lambda); },
                                Network::initial(network_seed, static_cast<std::uint64_t>(instance * R + r)), fits[static_cast<std::size_t>(r)]);
        },
        &errors);
    for (const auto& e : errors)
      if (!e.empty()) std::printf("  a replica failed: %s\n", e.c_str());
  };

  // The closure estimators, pooled over the instances: bias = |mean − level 0|² and variance =
  // mean |replica − mean|² per point in the metric C⁻¹ (data space; with ~15 replicas the mean's noise
  // adds variance/G to the bias and the population variance is low by (G − 1)/G, ~6 % each, and they
  // about cancel); in PDF space, how often the replicas' 68 % band of the combinations the data
  // constrain (Σ, V, T3, on 25 x from 10⁻³ to 0.7) covers the truth.
  std::vector<double> eval_x;
  for (int i = 0; i < 25; ++i) eval_x.push_back(1e-3 * std::pow(0.7 / 1e-3, i / 24.0));
  const Points eval_points(eval_x, {});
  const int constrained[] = {Sigma, V, T3};
  double bias_sum = 0, variance_sum = 0, chi2_l1_sum = 0, fit_seconds = 0;
  index_t covered = 0, shrunk_covered = 0, total = 0, positive = 0, iterations = 0, kept = 0;
  std::vector<index_t> all(static_cast<std::size_t>(R));
  for (index_t r = 0; r < R; ++r) all[static_cast<std::size_t>(r)] = r;
  std::vector<fitlib::ReplicaFit> first_batch;
  for (index_t l = 0; l < instances; ++l) {
    if (l > 0) prepare(l);
    const auto t_fit = std::chrono::steady_clock::now();
    train(l, width, all);
    fit_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t_fit).count();
    if (l == 0) first_batch = fits;
    // NNPDF's postfit selection: a replica whose kept state is above the threshold (it never got below) is dropped.
    std::vector<index_t> good;
    Eigen::MatrixXd pred(static_cast<index_t>(N), R);
    std::vector<std::vector<std::array<double, n_evol>>> pdfs;
    for (index_t r = 0; r < R; ++r) {
      const auto& fit = fits[static_cast<std::size_t>(r)];
      iterations += fit.iterations;
      positive += f.least_positivity(r, fit.x) >= -positivity_tolerance;
      if (!(validation_loss(r, fit.x) < below_threshold(R + r))) continue;
      const std::vector<double> t = f.predictions(fit.x, inputs[static_cast<std::size_t>(r)].pre);
      for (std::size_t i = 0; i < N; ++i) pred(static_cast<index_t>(i), static_cast<index_t>(good.size())) = t[i];
      good.push_back(r);
      PdfReplica p;
      p.evaluate(fit.x, inputs[static_cast<std::size_t>(r)].pre, eval_points);
      auto& rows = pdfs.emplace_back();
      for (std::size_t i = 0; i < eval_x.size(); ++i) {
        std::array<double, n_evol> row{};
        for (int k = 0; k < n_evol; ++k) row[static_cast<std::size_t>(k)] = p.xf(i, k);
        rows.push_back(row);
      }
    }
    const auto G = static_cast<index_t>(good.size());
    kept += G;
    if (G < 2) continue;
    const Eigen::MatrixXd P = pred.leftCols(G);
    const Eigen::VectorXd mean = P.rowwise().mean();
    double variance = 0;
    for (index_t r = 0; r < G; ++r) variance += chi2_per_point(C_llt, P.col(r) - mean) / static_cast<double>(G);
    const Eigen::Map<const Eigen::VectorXd> L0(level0.data(), static_cast<index_t>(N)), L1(level1.data(), static_cast<index_t>(N));
    bias_sum += chi2_per_point(C_llt, mean - L0);
    variance_sum += variance;
    chi2_l1_sum += chi2_per_point(C_llt, mean - L1);
    for (std::size_t i = 0; i < eval_x.size(); ++i) {
      const auto truth = les_houches(eval_x[i]);
      for (int k : constrained) {
        double m = 0, m2 = 0;
        for (const auto& rows : pdfs) {
          const double v = rows[i][static_cast<std::size_t>(k)];
          m += v / static_cast<double>(G);
          m2 += v * v / static_cast<double>(G);
        }
        const double sd = std::sqrt(std::max(0.0, m2 - m * m)), t = truth[static_cast<std::size_t>(k)];
        covered += std::abs(m - t) <= sd;
        shrunk_covered += std::abs(m - t) <= sd / 3;
        ++total;
      }
    }
  }
  std::printf("fit: %td instances x %td replicas, width %td, %.2f s (%.0f trust-region iterations per replica), %td kept, %td positive\n",
              instances, R, width, fit_seconds, static_cast<double>(iterations) / static_cast<double>(instances * R), kept, positive);
  std::printf("closure estimators\n");
  check(kept >= instances * R * 3 / 4, "replicas kept (their validation chi2/n fell below 3.5)", static_cast<double>(kept));
  const double chi2_l1 = chi2_l1_sum / static_cast<double>(instances), ratio = bias_sum / variance_sum;
  check(chi2_l1 > 0.5 && chi2_l1 < 1.5, "chi2/n of the replicas' mean against the level-1 data", chi2_l1);
  check(ratio > 1.0 / 3 && ratio < 3, "bias/variance (data space; 1 for faithful uncertainties)", ratio);
  const double xi = static_cast<double>(covered) / static_cast<double>(total);
  check(xi > 0.45 && xi < 0.9, "fraction of (x, Sigma/V/T3) whose 68% band covers the truth", xi);
  // A band a third as wide covers a faithful fit's truth 26 % of the time: it must fail the check above.
  check(static_cast<double>(shrunk_covered) / static_cast<double>(total) < 0.45, "control: the same with the band shrunk to a third (must fail: < 0.45)",
        static_cast<double>(shrunk_covered) / static_cast<double>(total));

  // Bitwise: the first instance's first and last replicas fitted alone, width 1.
  prepare(0);
  fits.assign(static_cast<std::size_t>(R), {});
  train(0, 1, {0, R - 1});
  bool same = true;
  for (index_t r : {index_t{0}, R - 1}) {
    const auto& a = first_batch[static_cast<std::size_t>(r)];
    const auto& b = fits[static_cast<std::size_t>(r)];
    same = same && a.x.size() == b.x.size() && std::memcmp(a.x.data(), b.x.data(), a.x.size() * sizeof(double)) == 0 && a.iterations == b.iterations &&
           a.best_iteration == b.best_iteration;
  }
  check(same, "replicas 0 and R-1 alone are bitwise their fits in the batch (1 = yes)", same ? 1 : 0);

  std::printf("%s in %.1f s\n", failures ? "FAILED" : "passed", std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count());
  return failures ? 1 : 0;
}
