// SPDX-License-Identifier: MIT
// One comparison of two models' contents, for the tests that read, write or convert models.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <vector>

#include "fitlib/model/model.hpp"

namespace fitlib::test {

/// The logk tensor densely, `[nbins_full × nprocs × ncoef]`, whichever way the model stores it.
inline std::vector<double> dense_logk(const Model& m) { return m.sparse() ? m.sparse()->dense_logk() : m.dense()->logk; }

/// CHECKs that `a` and `b` hold the same analysis, bit for bit: names, templates (in any storage; logk
/// only where both use the same symmetric/asymmetric layout), data and their variances, template
/// statistics, constraints, groups (members in any order: rabbit writes them in set-iteration order),
/// NOIs and external terms.
inline void check_same_model(const Model& a, const Model& b) {
  CHECK(a.parameter_names() == b.parameter_names());
  CHECK(a.nbins() == b.nbins());
  CHECK(a.nbins_full() == b.nbins_full());
  CHECK(a.nominal_yields() == b.nominal_yields());
  if (a.symmetric == b.symmetric) CHECK(dense_logk(a) == dense_logk(b));
  CHECK(a.data == b.data);
  CHECK(a.data_variance == b.data_variance);
  CHECK(a.data_covariance_inverse == b.data_covariance_inverse);
  CHECK(a.sumw2 == b.sumw2);
  CHECK((a.sumw.empty() ? a.nominal_yields() : a.sumw) == (b.sumw.empty() ? b.nominal_yields() : b.sumw));  // empty = N
  CHECK(a.constraint_weights == b.constraint_weights);
  CHECK(a.nois == b.nois);
  REQUIRE(a.groups.size() == b.groups.size());
  for (std::size_t g = 0; g < a.groups.size(); ++g) {
    auto ma = a.groups[g].members, mb = b.groups[g].members;
    std::sort(ma.begin(), ma.end());
    std::sort(mb.begin(), mb.end());
    CHECK(a.groups[g].name == b.groups[g].name);
    CHECK(ma == mb);
  }
  REQUIRE(a.external_terms.size() == b.external_terms.size());
  for (std::size_t t = 0; t < a.external_terms.size(); ++t) {
    CHECK(a.external_terms[t].parameters == b.external_terms[t].parameters);
    CHECK(a.external_terms[t].gradient == b.external_terms[t].gradient);
  }
}

}  // namespace fitlib::test
