// SPDX-License-Identifier: MIT
// The cells of a bin as the per-bin algebra reads them: every process (dense) or the non-zero ones (sparse).
#pragma once

#include "fitlib/config.hpp"
#include "fitlib/core/types.hpp"

namespace fitlib::detail {

/// A bin's cells when every process is one (dense templates): nominal yields `[bins × P]`.
struct DenseCells {
  const double* nominal;
  index_t P;
  FITLIB_HOST_DEVICE index_t cells(index_t) const { return P; }
  FITLIB_HOST_DEVICE index_t process(index_t, index_t c) const { return c; }
  FITLIB_HOST_DEVICE double nominal_of(index_t i, index_t c) const { return nominal[i * P + c]; }
};

/// A bin's non-zero cells (sparse templates): cell range per bin, each cell's process and nominal yield.
struct SparseCells {
  const index_t* bin_begin;  ///< `[bins + 1]`, already offset to the slice's first bin
  const index_t* process_of;
  const double* nominal;
  FITLIB_HOST_DEVICE index_t cells(index_t i) const { return bin_begin[i + 1] - bin_begin[i]; }
  FITLIB_HOST_DEVICE index_t process(index_t i, index_t c) const { return process_of[bin_begin[i] + c]; }
  FITLIB_HOST_DEVICE double nominal_of(index_t i, index_t c) const { return nominal[bin_begin[i] + c]; }
};

}  // namespace fitlib::detail
