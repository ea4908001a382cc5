// SPDX-License-Identifier: MIT
// fitlib-fit's report on stdout: each fit's summary, and the toys' together.
#pragma once

#include <span>

#include "fitlib/fit.hpp"
#include "fitlib/io/results.hpp"

namespace fitlib::cli {

/// Whether a fit is one of the toys (named toy<i>), which stdout summarises as a table, not one by one.
inline bool is_toy(const io::FitRecord& f) { return f.name.rfind("toy", 0) == 0; }

/// A fit's status, POIs and NOIs (with μ for squared POIs), the largest pulls, impacts, GoF, scans and times.
void print_summary(const Model& m, const io::FitRecord& f, const LikelihoodOptions& lo);

/// The channels in one line: each name with its axes' names and bins ("ch1 [a 10 × b 5], ch0_masked [x 10, masked]").
std::string describe_channels(const std::vector<Channel>& channels);
/// The toys together: converged count, how fast, and per POI and NOI the spread of the fitted
/// values and of the pulls.
void print_toy_summary(const io::ToySummary& t, std::span<const io::FitRecord> fits);

}  // namespace fitlib::cli
