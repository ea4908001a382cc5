// SPDX-License-Identifier: MIT
// fitlib::prebuilt: the fits and postfit helpers over fitlib::SparseThreadedLikelihood (prebuilt.hpp).
#include "fitlib/fit.hpp"

namespace fitlib {
FITLIB_PREBUILT_LIKELIHOOD(template, SparseThreadedLikelihood)
}  // namespace fitlib
