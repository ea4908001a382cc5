// SPDX-License-Identifier: MIT
// Checks that an installed fitlib is usable through the umbrella header alone: a one-bin likelihood.
#include <fitlib/fit.hpp>

#include <cmath>
#include <cstdio>
#include <vector>

int main() {
  static_assert(FITLIB_VERSION >= 100, "find_package asked for fitlib 0.1 or later");
  const auto version = fitlib::version_string();
  std::printf("fitlib %.*s\n", static_cast<int>(version.size()), version.data());

  fitlib::ModelBuilder mb;
  mb.add_channel("sr", 1).add_process("sig", true).add_process("bkg");
  mb.set_nominal("sr", "sig", std::vector{5.0}).set_nominal("sr", "bkg", std::vector{10.0}).set_data("sr", std::vector{15.0});
  fitlib::SerialLikelihood nll(mb.build());
  // At μ = 1 the expectation equals the data, so the reduced NLL vanishes.
  const double f = nll.value(std::vector{1.0});
  std::printf("reduced NLL at mu = 1: %g\n", f);
  return std::abs(f) < 1e-12 ? 0 : 1;
}
