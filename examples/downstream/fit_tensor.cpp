// SPDX-License-Identifier: MIT
// A downstream fit: reads a rabbit tensor, fits it (trust region, GLTR steps) and prints the report.
#include <fitlib/fit.hpp>
#include <fitlib/io/rabbit.hpp>

#include <cstdio>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s TENSOR.hdf5\n", argv[0]);
    return 2;
  }
  fitlib::SerialLikelihood nll(fitlib::io::read_rabbit(argv[1]).model);
  const fitlib::FitResult r = fitlib::fit(nll, fitlib::TrustRegion<fitlib::Gltr>{});
  std::fputs(r.report().c_str(), stdout);
  return r.converged() ? 0 : 1;
}
