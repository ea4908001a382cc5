// SPDX-License-Identifier: MIT
// Writes the small rabbit tensors that check_statuses.cmake fits with fitlib-fit: zero_signal.hdf5, whose
// signal template is all zero (the likelihood does not depend on the POI: its Hessian is singular), and
// zero_data.hdf5, whose observed counts are all zero. Usage: fitlib_fit_check_tensors DIRECTORY
#include <cmath>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "fitlib/io/rabbit_writer.hpp"
#include "fitlib/model/model_builder.hpp"

namespace {

/// A signal peak over a falling background in 8 bins, with a constrained normalisation and a constrained
/// shape systematic (no free nuisance, so that zero data still have a minimum).
fitlib::Model check_model(bool zero_signal, bool zero_data) {
  const int nb = 8;
  std::vector<double> sig, bkg, tilted, data;
  for (int i = 0; i < nb; ++i) {
    const double x = (i + 0.5) / nb;
    sig.push_back(zero_signal ? 0.0 : 40.0 * std::exp(-0.5 * std::pow((x - 0.5) / 0.15, 2)));
    bkg.push_back(200.0 * std::exp(-2.0 * x));
    tilted.push_back(bkg.back() * (1.0 + 0.1 * (2.0 * x - 1.0)));
  }
  const double wiggle[nb] = {1.04, 0.97, 1.02, 0.95, 1.06, 0.99, 1.01, 0.96};  // fixed "fluctuations" of the data
  for (int i = 0; i < nb; ++i) data.push_back(zero_data ? 0.0 : std::round((sig[static_cast<std::size_t>(i)] + bkg[static_cast<std::size_t>(i)]) * wiggle[i]));
  fitlib::ModelBuilder mb;
  mb.add_channel("sr", nb);
  mb.add_process("signal", /*signal=*/true).add_process("background");
  mb.add_systematic("lumi").add_systematic("bkg_slope");
  mb.set_nominal("sr", "signal", sig).set_nominal("sr", "background", bkg).set_data("sr", data);
  if (!zero_signal) mb.add_norm_variation("lumi", "sr", "signal", 1.025);
  mb.add_norm_variation("lumi", "sr", "background", 1.025);
  mb.add_shape_variation("bkg_slope", "sr", "background", tilted);
  return mb.build();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIRECTORY\n", argv[0]);
    return 2;
  }
  try {
    const std::string dir = argv[1];
    fitlib::io::write_rabbit(dir + "/zero_signal.hdf5", check_model(/*zero_signal=*/true, /*zero_data=*/false));
    fitlib::io::write_rabbit(dir + "/zero_data.hdf5", check_model(/*zero_signal=*/false, /*zero_data=*/true));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fitlib_fit_check_tensors: %s\n", e.what());
    return 1;
  }
  return 0;
}
