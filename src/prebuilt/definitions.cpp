// SPDX-License-Identifier: MIT
// fitlib::prebuilt: the non-template functions it compiles once, out of line (config.hpp's FITLIB_DEFINITIONS):
// every header with a `#if FITLIB_DEFINITIONS` section.
#define FITLIB_PREBUILT_SOURCE
#include "fitlib/detail/spd_inverse.hpp"
#include "fitlib/device/host_layer.hpp"
#include "fitlib/device/host_solver.hpp"
#include "fitlib/io/pickle.hpp"
#include "fitlib/io/rabbit.hpp"
#include "fitlib/minimize/exact.hpp"
#include "fitlib/minimize/fit.hpp"
#include "fitlib/postfit/covariance.hpp"
#include "fitlib/postfit/impacts.hpp"
#include "fitlib/replica/pseudo_data.hpp"
#include "fitlib/prebuilt.hpp"
