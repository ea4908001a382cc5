// SPDX-License-Identifier: MIT
// fitlib._core's fits and histograms over sparse templates (runs.hpp), compiled on their own.
#include "runs.hpp"

namespace fitlib::python {

template FitResult run_fit<storage::Sparse>(const std::shared_ptr<const Model>&, const FitSettings&, const IterationHook&);
template struct Postfit<storage::Sparse>;
template std::unique_ptr<HeldLikelihood> hold_likelihood<storage::Sparse>(const std::shared_ptr<const Model>&, const FitSettings&);

}  // namespace fitlib::python
