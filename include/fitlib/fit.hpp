// SPDX-License-Identifier: MIT
// Umbrella header for CPU users: everything public, nothing that needs nvcc.
#pragma once

#include "fitlib/version.hpp"
#include "fitlib/config.hpp"
#include "fitlib/core/types.hpp"
#include "fitlib/core/error.hpp"
#include "fitlib/core/concepts.hpp"
#include "fitlib/model/model.hpp"
#include "fitlib/model/model_builder.hpp"
#include "fitlib/device/serial.hpp"
#include "fitlib/device/partition.hpp"
#include "fitlib/likelihood/interpolation.hpp"
#include "fitlib/likelihood/options.hpp"
#include "fitlib/likelihood/shard.hpp"
#include "fitlib/likelihood/likelihood.hpp"
