// SPDX-License-Identifier: MIT
// Compile-only check that the CPU umbrella header gets through nvcc cleanly.
#include <fitlib/fit.hpp>

// A translation unit must declare something; this also checks version.hpp is reachable.
static_assert(FITLIB_VERSION_MAJOR >= 0);
