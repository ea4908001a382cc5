// SPDX-License-Identifier: MIT
// fitlib._core's fits and histograms over dense templates (runs.hpp), compiled on their own.
#include "runs.hpp"

namespace fitlib::python {

template FitResult run_fit<storage::Dense>(const std::shared_ptr<const Model>&, const FitSettings&);
template Histograms run_histograms<storage::Dense>(const FitOutcome&, const HistogramOptions&);

}  // namespace fitlib::python
