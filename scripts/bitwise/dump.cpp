// SPDX-License-Identifier: MIT
// Hashes every output bit of the likelihood configurations a refactoring must leave bitwise unchanged
// (DESIGN.md, "Determinism"): values, derivatives, Hessians, fits, postfit passes, fixed β and
// replica batches, per data term, bin-by-bin mode and type, symmetry, storage and shard count.
// Built and compared at two revisions by scripts/bitwise-check.sh; one line per configuration.
#include <Eigen/Dense>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "fitlib/fit.hpp"
#include "random_model.hpp"
#include "shard_checks.hpp"
#if __has_include("fitlib/device/host_layer.hpp")
#include "fitlib/device/host_layer.hpp"
#define FITLIB_DUMP_DEVICE_LAYER 1
#endif

using namespace fitlib;

namespace {

/// FNV-1a over the bits of every double seen since the last reset.
struct Hash {
  std::uint64_t h = 1469598103934665603ULL;
  void add(const std::vector<double>& v) {
    for (double d : v) {
      std::uint64_t u;
      std::memcpy(&u, &d, sizeof u);
      h = (h ^ u) * 1099511628211ULL;
    }
  }
  void add(double d) { add(std::vector<double>{d}); }
};

template <class Lik>
void run(const char* name, Lik& l) {
  Hash h;
  h.add(test::everything(l));
  const TrustRegion<Gltr> krylov;
  const FitResult r = fit(l, krylov);
  h.add(r.x);
  h.add(r.covariance);
  h.add(r.nll);
  h.add(fit(l, TrustRegion<Exact>{}).x);
  h.add(l.yields(r.x));
  h.add(l.bin_by_bin_parameters(r.x));
  if (l.options().data_term != DataTerm::covariance) {
    const index_t n = l.size();
    const Eigen::MatrixXd V = Eigen::MatrixXd::Identity(n, n);
    h.add(l.bin_by_bin_variance(r.x, {V.data(), n, n}));
    l.fix_bin_by_bin(l.bin_by_bin_parameters(r.x));
    h.add(test::everything(l));
    l.fix_bin_by_bin({});
  }
  std::vector<ReplicaInputs> toys;
  for (int i = 1; i <= 5; ++i) toys.emplace_back().data = generate_toy(l, 3, static_cast<std::uint64_t>(i)).data;
  l.set_replicas(toys);
  const BatchResult batch = ReplicaBatch<4>().fit(l, krylov, std::vector<FitOptions>(toys.size()));
  for (const auto& x : batch.replicas) h.add(x.x);
  l.set_replicas({});
  std::printf("%-28s %016llx\n", name, static_cast<unsigned long long>(h.h));
}

}  // namespace

int main() {
  for (DataTerm term : {DataTerm::poisson, DataTerm::chisq})
    for (BinByBinMode mode : {BinByBinMode::lite, BinByBinMode::full})
      for (BinByBinType type : {BinByBinType::automatic, BinByBinType::gamma, BinByBinType::normal_multiplicative, BinByBinType::normal_additive})
        for (bool symmetric : {false, true}) {
          test::RandomModelSpec sp;
          sp.bins = 30;
          sp.masked_bins = 4;
          sp.nsyst = 6;
          sp.template_stats = true;
          sp.zero_counts = term == DataTerm::poisson;
          sp.asymmetric = !symmetric;
          sp.seed = 5;
          Model m = test::random_model(sp);
          if (term == DataTerm::chisq) test::add_data_variances(m);
          LikelihoodOptions lo;
          lo.data_term = term;
          lo.bin_by_bin.mode = mode;
          lo.bin_by_bin.type = type;
          char tag[64];
          std::snprintf(tag, sizeof tag, "t%d m%d ty%d s%d", static_cast<int>(term), static_cast<int>(mode), static_cast<int>(type), symmetric ? 1 : 0);
          char name[96];
          SerialLikelihood serial(m, {}, lo);
          std::snprintf(name, sizeof name, "serial %s", tag);
          run(name, serial);
          LikelihoodOptions three = lo;
          three.shards = 3;
          ThreadedLikelihood threads(m, cpu::Threads{3}, three);
          std::snprintf(name, sizeof name, "threads3 %s", tag);
          run(name, threads);
          Model stored_sparse = m;  // the same tensor, stored sparsely
          stored_sparse.make_sparse();
          SparseSerialLikelihood sparse(stored_sparse, {}, three);
          std::snprintf(name, sizeof name, "sparse3 %s", tag);
          run(name, sparse);
#ifdef FITLIB_DUMP_DEVICE_LAYER
          Likelihood<Shard<device::HostLayered, storage::Dense>> layered(m, device::HostLayered{3}, three);
          std::snprintf(name, sizeof name, "layer3 %s", tag);
          run(name, layered);
#endif
        }
  {
    test::RandomModelSpec sp;
    sp.type = SystematicType::normal;
    sp.template_stats = true;
    sp.seed = 9;
    SerialLikelihood normal(test::random_model(sp));
    run("serial normal type", normal);
  }
  for (BinByBinMode mode : {BinByBinMode::lite, BinByBinMode::full})
    for (BinByBinType type : {BinByBinType::automatic, BinByBinType::normal_multiplicative}) {
      LikelihoodOptions lo;
      lo.data_term = DataTerm::covariance;
      lo.bin_by_bin.mode = mode;
      lo.bin_by_bin.type = type;
      SerialLikelihood cov(test::covariance_model(true), {}, lo);
      char name[64];
      std::snprintf(name, sizeof name, "serial covariance m%d ty%d", static_cast<int>(mode), static_cast<int>(type));
      run(name, cov);
    }
}
