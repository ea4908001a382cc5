// SPDX-License-Identifier: MIT
// What fitlib::prebuilt holds, run end to end: each tensor given is read, then fitted over cpu::Serial and
// cpu::Threads (its storage) with each subproblem, with the impacts of both kinds and a profile scan of its first
// parameter. Every number is printed exactly (hexadecimal floating point), so that tests/CMakeLists.txt's
// prebuilt_same_bits can compare this program built header-only with it built against fitlib::prebuilt.
#include <fitlib/fit.hpp>
#include <fitlib/io/rabbit.hpp>

#include <cstdio>
#include <memory>
#include <string>
#include <variant>
#include <vector>

namespace {

void print(const char* what, const std::vector<double>& v) {
  std::printf("%s", what);
  for (double x : v) std::printf(" %a", x);
  std::printf("\n");
}

template <class Lik, class Sub>
void fit_all(const std::shared_ptr<const fitlib::Model>& model, typename Lik::policy_type policy, const std::string& name) {
  Lik nll(model, policy);
  const fitlib::FitResult r = fitlib::fit(nll, fitlib::TrustRegion<Sub>{});
  std::printf("== %s: %s, %td iterations\n", name.c_str(), r.status_text().c_str(), r.iterations);
  print("x", r.x);
  print("nll", {r.nll, r.edm});
  print("covariance", r.covariance);
  const fitlib::Impacts traditional = fitlib::traditional_impacts(nll, r);
  print("impacts", traditional.values);
  print("grouped", traditional.grouped);
  print("global", fitlib::global_impacts(nll, r).grouped);
  fitlib::ScanOptions so;
  so.points = 3;
  const fitlib::Scan scan = fitlib::profile_scan(nll, fitlib::TrustRegion<Sub>{}, r, r.names.front(), so);
  print("scan", scan.values);
  print("dnll", scan.dnll);
}

template <class Lik>
void fit_each_subproblem(const std::shared_ptr<const fitlib::Model>& model, typename Lik::policy_type policy, const std::string& name) {
  fit_all<Lik, fitlib::Gltr>(model, policy, name + ", Gltr");
  fit_all<Lik, fitlib::Exact>(model, policy, name + ", Exact");
  fit_all<Lik, fitlib::SteihaugCG>(model, policy, name + ", SteihaugCG");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s TENSOR.hdf5...\n", argv[0]);
    return 2;
  }
  for (int a = 1; a < argc; ++a) {
    const auto model = std::make_shared<const fitlib::Model>(fitlib::io::read_rabbit(argv[a]).model);
    std::printf("# %s\n", argv[a]);
    if (std::holds_alternative<fitlib::SparseTemplates>(model->templates)) {
      fit_each_subproblem<fitlib::SparseSerialLikelihood>(model, {}, "sparse serial");
      fit_each_subproblem<fitlib::SparseThreadedLikelihood>(model, fitlib::cpu::Threads{2}, "sparse threads");
    } else {
      fit_each_subproblem<fitlib::SerialLikelihood>(model, {}, "dense serial");
      fit_each_subproblem<fitlib::ThreadedLikelihood>(model, fitlib::cpu::Threads{2}, "dense threads");
    }
  }
  return 0;
}
