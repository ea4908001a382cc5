// SPDX-License-Identifier: MIT
// n3fit's optimiser, for comparison with fitlib's trust region on the same objective (issue 20; nnpdf-example.md §3
// row 16): Nadam as Keras (TF ≥ 2.11) updates a variable, with n3fit's per-variable gradient clipping, one full-batch
// step per epoch, driving one replica's training as fitlib::train_replica does for a trust region (early stopping on
// the validation loss with the best state kept, and a positivity clock).
#pragma once

#include <array>
#include <cmath>
#include <cstddef>
#include <functional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include <fitlib/core/types.hpp>
#include <fitlib/replica/early_stopping.hpp>
#include <fitlib/replica/replica_batch.hpp>

#include "pdf_model.hpp"

namespace nnpdf {

/// Nadam's settings; the defaults are NNPDF4.0's (nnpdf40-like.yml) and Keras'.
struct NadamOptions {
  double learning_rate = 2.621e-3;
  /// Each variable's gradient (a layer's weight matrix or bias vector) scaled down to this L2 norm where it is longer
  /// (Keras' clipnorm, per variable; n3fit-parallel-replicas.md §5).
  double clipnorm = 6.073e-6;
  double beta1 = 0.9, beta2 = 0.999, epsilon = 1e-7;
  fitlib::index_t epochs = 17000;  ///< steps in all (n3fit's E: one full-batch step per epoch)
  fitlib::index_t patience = 1700;  ///< epochs without a validation improvement before a replica stops (n3fit's 10 %)
  fitlib::index_t positivity_every = 100;  ///< epochs between the positivity clock's ticks (n3fit's PUSH_POSITIVITY_EACH)

  void validate() const {
    if (!(learning_rate > 0) || !(clipnorm > 0) || !(beta1 >= 0 && beta1 < 1) || !(beta2 >= 0 && beta2 < 1) || !(epsilon > 0) || epochs < 1 ||
        patience < 1 || positivity_every < 1)
      throw std::invalid_argument("NadamOptions: needs learning_rate, clipnorm and epsilon > 0, beta1 and beta2 in [0, 1), epochs, patience and "
                                  "positivity_every >= 1");
  }
};

/// The network's variables in the weight vector (Network's layout): [begin, end) of W1, b1, W2, b2, W3, b3.
inline constexpr std::array<std::array<std::size_t, 2>, 6> network_variables{{{Network::w1, Network::b1},
                                                                              {Network::b1, Network::w2},
                                                                              {Network::w2, Network::b2},
                                                                              {Network::b2, Network::w3},
                                                                              {Network::w3, Network::b3},
                                                                              {Network::b3, Network::size}}};

/// Trains one replica from x0 with Nadam into `res`: at every epoch one gradient of f (the replica's training
/// objective) and one step, then `validation_loss` at the new point (fitlib::EarlyStopping: the best state is kept,
/// and `o.patience` epochs without improvement stop the replica); every `o.positivity_every` epochs
/// `positivity_tick()` (empty: none), which may change f. `res` gets the kept state, the epochs run as iterations,
/// the best epoch, the status (`converged_callback` when patience ended it, `max_iterations` after `o.epochs`,
/// `not_finite` or `not_finite_gradient` where f or its gradient stopped being finite) and the counts.
template <class F, class Loss>
void train_replica_nadam(F& f, Loss&& validation_loss, const NadamOptions& o, const std::function<void()>& positivity_tick,
                         const std::vector<double>& x0, fitlib::ReplicaFit& res) {
  o.validate();
  const auto n = static_cast<std::size_t>(f.size());
  if (x0.size() != n || n != Network::size) throw std::invalid_argument("train_replica_nadam: the start is not the network's weights");
  std::vector<double> x = x0, g(n), m(n, 0.0), v(n, 0.0);
  fitlib::EarlyStopping stopping(true, o.patience, 0.0, std::forward<Loss>(validation_loss), x0);
  double u_product = 1;  // Π u_s over the steps taken (Keras' momentum cache)
  fitlib::index_t epoch = 0;
  fitlib::FitStatus status = fitlib::FitStatus::max_iterations;
  while (epoch < o.epochs) {
    double fx = 0;
    f.value_grad(fitlib::ConstBlockView<double>(x.data(), static_cast<fitlib::index_t>(n), 1), std::span(&fx, 1),
                 fitlib::BlockView<double>(g.data(), static_cast<fitlib::index_t>(n), 1));
    ++res.counts.values;
    ++res.counts.gradients;
    if (!std::isfinite(fx)) {
      status = fitlib::FitStatus::not_finite;
      break;
    }
    for (const auto& [first, last] : network_variables) {
      double norm2 = 0;
      for (std::size_t i = first; i < last; ++i) norm2 += g[i] * g[i];
      if (!std::isfinite(norm2)) {
        status = fitlib::FitStatus::not_finite_gradient;
        break;
      }
      const double norm = std::sqrt(norm2);
      if (norm > o.clipnorm)
        for (std::size_t i = first; i < last; ++i) g[i] *= o.clipnorm / norm;
    }
    if (status == fitlib::FitStatus::not_finite_gradient) break;
    ++epoch;
    // Nesterov momentum with a schedule: u_t = β1·(1 − ½·0.96^t), bias corrections by Π u and β2^t.
    const double t = static_cast<double>(epoch);
    const double u = o.beta1 * (1 - 0.5 * std::pow(0.96, t)), u_next = o.beta1 * (1 - 0.5 * std::pow(0.96, t + 1));
    u_product *= u;
    const double u_product_next = u_product * u_next, beta2_power = std::pow(o.beta2, t);
    for (std::size_t i = 0; i < n; ++i) {
      m[i] += (g[i] - m[i]) * (1 - o.beta1);
      v[i] += (g[i] * g[i] - v[i]) * (1 - o.beta2);
      const double m_hat = u_next * m[i] / (1 - u_product_next) + (1 - u) * g[i] / (1 - u_product);
      const double v_hat = v[i] / (1 - beta2_power);
      x[i] -= o.learning_rate * m_hat / (std::sqrt(v_hat) + o.epsilon);
    }
    if (stopping.after_step(x, true, epoch)) {
      status = fitlib::FitStatus::converged_callback;
      break;
    }
    if (positivity_tick && epoch % o.positivity_every == 0) positivity_tick();
  }
  res.status = status;
  res.x0 = x0;
  res.iterations = epoch;
  res.x = stopping.best();
  res.best_iteration = stopping.best_iteration();
}

}  // namespace nnpdf
